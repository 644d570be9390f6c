// File: model_config.h
// -----------------------------------------------------------------------------
// ModelConfig: the shape and hyper-parameters of a Llama-family decoder, named as in Hugging
// Face's config.json. It is filled from config.json, from GGUF metadata or from a llama2.c
// header, then validated once (Validate()); everything downstream trusts it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/ops.h"

namespace uc::models {

// Llama-3 style frequency-dependent RoPE scaling ("rope_type": "llama3"), plain linear
// position interpolation ("linear") or YaRN ("yarn", gpt-oss: interpolation by `factor` ramped
// in between beta_fast and beta_slow rotations, cos/sin scaled by attention_factor). type ""
// means none.
struct RopeScaling {
  std::string type;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  bool truncate = true;           // yarn: floor/ceil the correction range
  float attention_factor = 0.0f;  // yarn; 0: 0.1 ln(factor) + 1 (1 when factor <= 1)
};

// Upper bounds Validate() enforces: far past every released model (the largest have ~128
// layers, hidden 16k-25k, vocabularies of 256k, contexts of 10M), low enough that a damaged or
// hostile file stating 10^9 layers is refused before anything is allocated for it.
inline constexpr int kMaxLayers = 4096;
inline constexpr int kMaxHiddenSize = 1 << 18;
inline constexpr int kMaxIntermediateSize = 1 << 20;
inline constexpr int kMaxHeads = 1 << 14;
inline constexpr int kMaxHeadDim = 1 << 14;
inline constexpr int kMaxVocabSize = 1 << 24;
inline constexpr int kMaxPositionEmbeddings = 1 << 28;
inline constexpr int kMaxExperts = 1 << 12;

// The MLP's activation: SwiGLU (Llama, Qwen, Phi-3, OLMo-2), GELU with PyTorch's tanh
// approximation (Gemma's "gelu_pytorch_tanh", GPT-2's "gelu_new") or the exact GELU (GPT-NeoX's
// "gelu"; plain MLPs only).
enum class Activation { kSilu, kGeluTanh, kGelu };

// The norm in front of the blocks and the LM head: RMSNorm, or LayerNorm with a bias (GPT-2,
// GPT-NeoX; its epsilon is rms_norm_eps).
enum class NormKind { kRms, kLayer };

struct ModelConfig {
  std::string architecture;  // Hugging Face class name, e.g. "LlamaForCausalLM"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;  // explicit or hidden_size / num_attention_heads
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rotary_dim = 0;  // dimensions of each head that RoPE rotates (= head_dim unless partial)
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry biases (Llama attention_bias, Qwen2)
  bool o_proj_bias = false;     // o_proj carries a bias (Llama attention_bias only)
  int sliding_window = 0;       // 0: full attention
  // Which layers use sliding_window ([num_hidden_layers]; Gemma interleaves sliding and global
  // layers). Empty: every layer does (Mistral, Phi-3) when sliding_window > 0.
  std::vector<bool> sliding_layers;
  // RoPE base of the sliding layers, unscaled (Gemma 3's rope_local_base_freq); 0: rope_theta.
  float rope_local_theta = 0.0f;
  Activation hidden_act = Activation::kSilu;
  NormKind norm_kind = NormKind::kRms;
  // GPT-2: a learned table of absolute positions ("model.embed_positions.weight",
  // [max_position_embeddings, hidden_size]) is added to the token embeddings; no RoPE
  // (rotary_dim 0).
  bool learned_positions = false;
  // false: a plain MLP, down(act(up(x))) (GPT-2, GPT-NeoX), instead of the gated one.
  bool gated_mlp = true;
  bool mlp_bias = false;  // up_proj and down_proj carry biases (GPT-2, GPT-NeoX)
  // GPT-NeoX's use_parallel_residual: x + attn(ln1(x)) + mlp(ln2(x)), both blocks reading the
  // same stream, instead of the MLP reading x + attn(ln1(x)).
  bool parallel_residual = false;
  // false: no norm in front of the attention and MLP blocks (OLMo-2, which norms their outputs:
  // sandwich_norms without the pre-norms).
  bool pre_norms = true;
  // OLMo-2: qk_norm over each token's whole q and k projections (weights [q_size], [kv_size])
  // rather than per head.
  bool qk_norm_full_width = false;
  // Hugging Face Gemma checkpoints store RMSNorm weights as w and scale by (1 + w); GGUF files
  // store 1 + w. When set, the loader adds the 1 (in F32) so every norm multiplies by its weight.
  bool norm_weight_plus_one = false;
  // Gemma 2/3: the attention and MLP outputs are normed again before joining the residual
  // stream ("sandwich" norms: post_attention_layernorm, pre_/post_feedforward_layernorm).
  bool sandwich_norms = false;
  bool qk_norm = false;                  // RMSNorm over each q and k head before RoPE
  float embedding_multiplier = 1.0f;     // Gemma: sqrt(hidden_size)
  float attention_scale = 0.0f;          // score scale; 0: 1 / sqrt(head_dim)
  float attn_logit_softcapping = 0.0f;   // Gemma 2; 0: none
  float final_logit_softcapping = 0.0f;  // Gemma 2; 0: none
  // Phi-3 stores q/k/v as one qkv_proj and gate/up as one gate_up_proj; the loader splits them.
  bool fused_qkv = false;
  bool fused_gate_up = false;
  // How q/k rows are ordered in the checkpoint: llama2.c and GGUF "llama" keep the original
  // interleaved pairs; Hugging Face permutes to rotate_half.
  kernels::RopeStyle rope_style = kernels::RopeStyle::kHalf;
  // Per-pair divisors of the RoPE frequencies (GGUF rope_freqs.weight); empty if none.
  std::vector<float> rope_freq_factors;
  // Mixture of experts (Qwen2/3-MoE, OLMoE, Mixtral): num_experts > 0 replaces the MLP of the
  // sparse layers by a router ("mlp.gate", [num_experts, hidden_size]) choosing
  // num_experts_per_tok gated experts of moe_intermediate_size per token, weighted by the softmax
  // of the router logits over all experts, renormalised over the chosen when norm_topk_prob;
  // plus a shared expert of shared_expert_intermediate_size gated by sigmoid(shared_expert_gate)
  // when that is > 0 (Qwen2-MoE). A layer L is sparse unless L is in mlp_only_layers or
  // (L + 1) % decoder_sparse_step != 0; the others keep the dense MLP of intermediate_size.
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int shared_expert_intermediate_size = 0;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  // gpt-oss: the router has a bias and softmax runs over the top-k logits only
  // (router_topk_then_softmax); each expert's gate/up/down projections carry biases
  // (expert_bias); the experts' activation is the clamped SwiGLU when swiglu_limit > 0:
  // gate = min(gate, limit), up = clamp(up, -limit, limit), out = (up + 1) gate sigmoid(alpha
  // gate).
  bool router_bias = false;
  bool router_topk_then_softmax = false;
  bool expert_bias = false;
  float swiglu_limit = 0.0f;
  float swiglu_alpha = 1.702f;
  // gpt-oss: each attention head has a learned sink logit ("self_attn.sinks", [num_heads]) in
  // its softmax denominator.
  bool attention_sinks = false;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  // Checks every field for consistency and against the bounds above; the message names
  // `source` and the field.
  Status Validate(const std::string& source) const;
  // The mixture-of-experts fields (part of Validate).
  Status ValidateMoe(const std::string& source) const;
  // Hugging Face's model_type of the architecture ("llama", "qwen2", "gemma3_text", ...).
  std::string ModelType() const;
  // Inverse RoPE frequencies, rotary_dim / 2 of them, with scaling applied.
  std::vector<float> RopeInvFreq() const;
  // The RoPE frequencies of `layer`: RopeInvFreq(), or for a sliding layer of a model with
  // rope_local_theta the unscaled frequencies of that base.
  std::vector<float> RopeInvFreq(int layer) const;
  // The sliding window of `layer` (0: the layer attends to the whole prefix).
  int LayerWindow(int layer) const;
  // The largest window over all layers, or 0 when some layer attends to everything.
  int MaxWindow() const;
  float AttentionScale() const;
  // The factor RoPE's cos and sin are multiplied by (YaRN's attention_factor; else 1). Applied
  // to both q and k, it scales every attention score by its square.
  float RopeAttentionFactor() const;
  // Whether `layer`'s MLP is a mixture of experts (see num_experts).
  bool IsMoeLayer(int layer) const;
  int q_size() const { return num_attention_heads * head_dim; }
  int kv_size() const { return num_key_value_heads * head_dim; }
};

}  // namespace uc::models
