// File: llama_model.h
// -----------------------------------------------------------------------------
// The decoder shared by every architecture in models/architectures/: token embedding (scaled
// for Gemma), N pre-norm decoder layers (RMSNorm -> attention -> add, RMSNorm -> gated MLP ->
// add; optionally q/k head norms, Gemma's post-norms of both blocks, per-layer sliding windows,
// RoPE bases and soft-capping, all read from ModelConfig), final RMSNorm and the LM head
// (optionally soft-capped); tensor-parallel through the parallel layers of layers/ and
// pipeline-parallel by stages.
//
// A CausalLM is one rank's part of the model: the layers [layer_start, layer_end) of its
// pipeline stage (the others are PPMissingLayer entries, so layer indices stay global), the
// embedding on the first stage, final norm and LM head on the last, each sharded over the TP
// group by rank_in_group. With one process both groups have size 1 and it is the whole model.
//
// The residual stream travels as vLLM's pair: after layer L it is hidden_states + residual.
// Stages exchange that pair as IntermediateTensors. Weights are views into the checkpoint,
// checked against the config at load (mismatches name the tensor and both shapes).
//
// Not thread-safe: a CausalLM owns scratch buffers reused across calls; serialize calls.
#pragma once

#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "base/thread_pool.h"
#include "distributed/group_coordinator.h"
#include "layers/attention.h"
#include "layers/fused_moe.h"
#include "layers/gated_mlp.h"
#include "layers/norm.h"
#include "layers/rms_norm.h"
#include "layers/vocab_parallel_embedding.h"
#include "models/checkpoint.h"
#include "models/forward_hooks.h"
#include "models/steering.h"

namespace uc::models {

// Where this rank sits in the deployment.
struct ParallelContext {
  distributed::GroupCoordinator* tp_group = nullptr;  // never null (size 1 in one process)
  int pp_rank = 0;                                    // this rank's pipeline stage
  int pp_size = 1;
  int layer_start = 0;  // this stage owns decoder layers [layer_start, layer_end)
  int layer_end = 0;
  bool is_first_stage() const { return pp_rank == 0; }
  bool is_last_stage() const { return pp_rank == pp_size - 1; }
};

// What flows between pipeline stages; the residual stream is hidden_states + residual.
struct IntermediateTensors {
  Tensor hidden_states;  // [m, hidden_size] F32
  Tensor residual;       // [m, hidden_size] F32
};

// The KV cache on this rank: num_blocks blocks of block_size slots, for the owned layers only
// (the others are empty). Paged for the engine (many sequences, block tables from the
// scheduler); one block as long as the sequence for a single contiguous sequence.
struct KvCache {
  int num_blocks = 0;
  int block_size = 0;
  std::vector<layers::KvCacheLayer> layers;                 // [num_hidden_layers]
  int capacity() const { return num_blocks * block_size; }  // slots
};

// One forward call over a batch of tokens from one or many sequences (the same on every rank of
// a step). Token i is ids[i] (first stage) at positions[i], its KV goes to slot_mapping[i], and
// it attends through `layout`. The last stage computes logits for the rows in logit_rows.
struct ForwardBatch {
  std::span<const int32_t> ids;           // [m] (read on the first stage)
  std::span<const int32_t> positions;     // [m]
  std::span<const int32_t> slot_mapping;  // [m]
  kernels::PagedKvLayout layout;
  std::span<const int32_t> logit_rows;      // ascending rows of [0, m); may be empty
  const BatchSteering* steering = nullptr;  // per-row steering; null or empty: none
};

// Which logits a forward call produces on the last stage.
enum class LogitsRequest { kNone, kLast, kAll };

// Buffers reused by every layer of one forward call, sized for `max_tokens` tokens.
struct Activations {
  Activations(int64_t max_tokens, const ModelConfig& config, int64_t q_size_per_rank,
              int64_t kv_size_per_rank, int64_t intermediate_size_per_partition);
  int64_t max_tokens;
  Tensor hidden_states;  // [max_tokens, hidden_size]  output of the last block
  Tensor residual;       // [max_tokens, hidden_size]  the residual stream minus hidden_states
  Tensor normed;         // [max_tokens, hidden_size]  RMSNorm output fed to a block
  Tensor tap;            // [max_tokens, hidden_size]  hidden_states + residual, for probes
  Tensor mlp_out;        // [max_tokens, hidden_size]  the MLP's output of a parallel block
  layers::AttentionBuffers attention;
  layers::MlpBuffers mlp;
  layers::MoeBuffers moe;  // mixture-of-experts models only
};

// The part of a forward call every layer needs.
struct ForwardContext {
  std::span<const int32_t> positions;  // [m]
  const layers::AttentionMetadata* attention = nullptr;
  KvCache* cache = nullptr;
  ForwardHooks* hooks = nullptr;            // may be null
  ThreadPool* pool = nullptr;               // may be null
  const BatchSteering* steering = nullptr;  // may be null
};

// Gemma's extra norms of the attention and MLP outputs before they join the residual stream
// (post_attention_layernorm and post_feedforward_layernorm in its files); default: none.
struct SandwichNorms {
  layers::RmsNorm post_attention;
  layers::RmsNorm post_mlp;
  bool enabled() const {
    return post_attention.weight().defined() && post_attention.weight().rank() == 1;
  }
};

class DecoderLayer {
 public:
  // post_attention_layernorm is the norm in front of the MLP (Gemma's pre_feedforward_layernorm).
  // Either pre-norm may be absent (OLMo-2): the block then reads the residual stream itself.
  // parallel_residual: both blocks read the stream before the layer (GPT-NeoX), and the layer
  // adds attn_out + mlp_out to it. A defined `moe` replaces `mlp` (then default-constructed):
  // its output (routed and shared experts, all-reduced) is mlp_out, and the layer also taps
  // router_logits and expert_weights ([m, num_experts]). REQUIRES: not both moe and
  // parallel_residual.
  DecoderLayer(int layer_index, layers::Norm input_layernorm, layers::Attention attention,
               layers::Norm post_attention_layernorm, layers::GatedMlp mlp,
               SandwichNorms sandwich = {}, bool parallel_residual = false,
               layers::FusedMoe moe = {});

  // (hidden_states, residual) of the previous layer -> those of this layer, in place on
  // act.hidden_states[0:m] and act.residual[0:m]. The taps: attn_out and mlp_out are what each
  // block adds to the residual stream (after any post-norm), residual_stream the stream after
  // the layer, so that stream(l) = stream(l-1) + attn_out(l) + mlp_out(l) for every form.
  void Forward(const ForwardContext& ctx, Activations& act, int64_t m) const;
  const layers::Attention& attention() const { return attention_; }
  const layers::FusedMoe& moe() const { return moe_; }
  // A [hidden_size] F32 vector added to this block's output for every token, after the
  // attn_out and mlp_out taps and before the residual-stream tap; undefined: none. Per-request
  // steering (ForwardContext::steering) is applied at the same places: attn_out after the
  // attn_out tap, mlp_out and residual_stream after the mlp_out tap.
  void set_steering(Tensor vector) { steering_ = std::move(vector); }

 private:
  void Tap(const ForwardContext& ctx, Site site, const Tensor& value) const;
  void TapResidual(const ForwardContext& ctx, Activations& act, int64_t m) const;
  // Adds ctx.steering's vectors for (this layer, site) to `block_out` (the block's output about
  // to join `residual`).
  void Steer(const ForwardContext& ctx, Site site, Tensor& block_out, const Tensor& residual) const;

  void ForwardParallel(const ForwardContext& ctx, Activations& act, int64_t m) const;

  int layer_index_;
  layers::Norm input_layernorm_;
  layers::Attention attention_;
  layers::Norm post_attention_layernorm_;
  layers::GatedMlp mlp_;
  SandwichNorms sandwich_;
  bool parallel_residual_ = false;
  layers::FusedMoe moe_;
  Tensor steering_;
};

// How a model is built from its checkpoint (the same on every rank of a deployment).
struct LoadOptions {
  // How the linear layers and the LM head multiply quantized weights. kExact: F32 activations,
  // within 1e-5 of the dequantized matmul (the oracle path; the default). kInt8: activations
  // quantized to 8 bits per block and integer dot products, as llama.cpp's CPU backend (faster,
  // ~0.5% error per matmul); BF16 weights where vdpbf16ps outruns F32 FMAs (AMD with
  // AVX512_BF16): activations rounded to BF16 and vdpbf16ps. F32/F16 weights ignore it. See
  // kernels::MatMulPrecision.
  kernels::MatMulPrecision matmul_precision = kernels::MatMulPrecision::kExact;
  // Every row's activations and logits independent of the batch it runs in (its bits equal
  // alone, in any batch, at any prefill chunking); see kernels::MatMulOptions::batch_invariant.
  // On by default: the packed kernels of the common weight types are invariant at no cost; off
  // buys prefill speed only for F32 weights and Q2_K, Q3_K, IQ4_NL.
  bool batch_invariant = true;
  kernels::MatMulOptions matmul() const { return {matmul_precision, batch_invariant}; }
  // Mixture-of-experts layers under TP: whole experts per rank instead of a slice of every
  // expert (vLLM's --enable-expert-parallel; layers::MoeOptions::expert_parallel). Dense layers,
  // attention and the shared expert stay sliced; nothing changes with one TP rank.
  bool expert_parallel = false;
  // Control vectors added to every token's residual stream after their blocks (steering.h).
  // Read and checked against the model by Load; each pipeline stage keeps its own blocks'.
  SteeringOptions steering = {};
};

// A layer owned by another pipeline stage: keeps the layer table at its global length.
struct PPMissingLayer {};

class CausalLM {
 public:
  // Builds this rank's part of the model from `checkpoint`, checking every tensor it needs
  // (presence, shape, dtype) and that the model divides over the TP group (heads, KV heads,
  // intermediate size), naming the dimension otherwise.
  static StatusOr<std::unique_ptr<CausalLM>> Load(const Checkpoint& checkpoint,
                                                  const ParallelContext& parallel,
                                                  const LoadOptions& options = {});
  // The whole model in this process (one TP rank, one stage).
  static StatusOr<std::unique_ptr<CausalLM>> Load(const Checkpoint& checkpoint,
                                                  const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const ParallelContext& parallel() const { return parallel_; }
  // A zeroed contiguous cache for one sequence of up to `capacity` positions (owned layers).
  KvCache NewKvCache(int capacity) const;
  // A zeroed paged cache of num_blocks blocks of block_size slots (owned layers only).
  KvCache NewPagedKvCache(int num_blocks, int block_size) const;
  // Bytes one KV block takes on this rank (K and V, owned layers, F32).
  int64_t KvBlockBytes(int block_size) const;
  // Elements of K (or V) per token per layer on this rank.
  int64_t kv_size_per_rank() const { return kv_size_per_rank_; }

  // Runs this stage over a batch of tokens of many sequences sharing the paged `cache`.
  // First stage: reads batch.ids; other stages read `input`. Not last stage: fills `output`.
  // Last stage: writes `logits` [batch.logit_rows.size(), vocab_size] where has_logits().
  // Every row's result depends only on its own sequence, not on the rest of the batch.
  void Forward(const ForwardBatch& batch, KvCache& cache, const IntermediateTensors* input,
               IntermediateTensors* output, Tensor* logits, ThreadPool* pool,
               ForwardHooks* hooks = nullptr);

  // Runs this stage over tokens ids[i] at positions[i] (consecutive, continuing what `cache`
  // holds). First stage: reads `ids`; other stages read `input` (the previous stage's output).
  // Not last stage: fills `output` for the next stage. Last stage: runs the final norm and LM
  // head as `request` says — the same request on every rank of the stage — and writes `logits`
  // where has_logits(): [m, vocab_size] for kAll, [1, vocab_size] for kLast. `logits` may be
  // null where !has_logits() or for kNone.
  void ForwardStage(std::span<const int32_t> ids, std::span<const int32_t> positions,
                    KvCache& cache, const IntermediateTensors* input, IntermediateTensors* output,
                    LogitsRequest request, Tensor* logits, ThreadPool* pool,
                    ForwardHooks* hooks = nullptr);

  // The whole model in one stage (pp_size == 1): ids -> logits.
  void Forward(std::span<const int32_t> ids, std::span<const int32_t> positions, KvCache& cache,
               bool all_logits, Tensor& logits, ThreadPool* pool, ForwardHooks* hooks = nullptr);

  // True where ForwardStage writes logits.
  bool has_logits() const;
  // Bytes of weights this rank streams per token (as stored), for bandwidth figures.
  int64_t weight_bytes() const { return weight_bytes_; }

 private:
  CausalLM() = default;
  Activations& ActivationsFor(int64_t m);
  void Finish(const ForwardBatch& batch, Tensor* logits, ThreadPool* pool, ForwardHooks* hooks);

  ModelConfig config_;
  ParallelContext parallel_;
  int64_t q_size_per_rank_ = 0, kv_size_per_rank_ = 0, intermediate_per_partition_ = 0;
  layers::VocabParallelEmbedding embed_tokens_;  // first stage only
  Tensor embed_positions_;  // learned_positions, first stage only: [max_positions, hidden_size]
  std::vector<std::variant<PPMissingLayer, DecoderLayer>> layers_;  // [num_hidden_layers]
  layers::Norm norm_;                                               // last stage only
  layers::ParallelLmHead lm_head_;                                  // last stage only
  int64_t weight_bytes_ = 0;
  std::unique_ptr<Activations> activations_;
  std::unique_ptr<distributed::GroupCoordinator> own_tp_group_;  // single-process Load only
};

}  // namespace uc::models
