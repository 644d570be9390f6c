#!/usr/bin/env python3
"""Tiny random mixture-of-experts checkpoints (Qwen3-MoE, Qwen2-MoE with a shared expert, OLMoE,
Mixtral, gpt-oss) with transformers' logits, greedy continuations, router logits and per-layer taps.

Produces tests/testdata/arch/<case>/ (or --out/<case>/) for each case below:
  config.json        the layout of published Hub checkpoints of the family (rope_theta and
                     rope_scaling at the top level, "torch_dtype"), reloaded with transformers to
                     prove it means the same model.
  model.safetensors  save_pretrained: the Hub's per-expert tensors (Qwen/OLMoE
                     "mlp.experts.E.{gate,up,down}_proj", "mlp.gate" the router; Mixtral
                     "block_sparse_moe.experts.E.w1/w2/w3", "block_sparse_moe.gate"; Qwen2-MoE
                     "mlp.shared_expert.*" and "mlp.shared_expert_gate").
  tokenizer.json     the byte-level BPE of make_interp_arch_fixtures.py (same training, same ids).
  model.gguf         (not gptoss) the same weights, F32, the way llama.cpp's convert_hf_to_gguf.py writes the
                     family: general.architecture qwen3moe / qwen2moe / olmoe, Mixtral as "llama"
                     with q/k rows permuted to interleaved pairs; "<arch>.expert_count",
                     ".expert_used_count", ".expert_feed_forward_length",
                     ".expert_shared_feed_forward_length"; the router as blk.N.ffn_gate_inp, the
                     experts stacked as blk.N.ffn_{gate,up,down}_exps [experts, rows, cols], the
                     shared expert as ffn_*_shexp and its gate as 1-D ffn_gate_inp_shexp; the
                     tokenizer as GGUF "gpt2" BPE metadata. Read from model.safetensors, so it
                     holds exactly the checkpoint's values. gptoss_mxfp4's is llama.cpp's
                     "gpt-oss" layout with the MXFP4 experts repacked byte for byte
                     (write_gpt_oss_gguf).
  reference.json     input ids, float32 logits at every position, argmax, a 16-token greedy
                     continuation (EOS not a stop) with its top-1/top-2 margins, and "taps" per
                     layer and position:
                       attn_out        layers.L.self_attn output (after o_proj)
                       mlp_out         layers.L.mlp output: the whole sparse block (routed experts
                                       weighted, plus the gated shared expert where there is one)
                       residual_stream the decoder layer's output (hidden_states[L + 1])
                       final_norm      model.norm output
                       router_logits   transformers' output_router_logits: the router's
                                       pre-softmax logits [num_experts]
                       expert_weights  the dense [num_experts] routing weights the block applies
                                       (softmax of router_logits, top-k kept, renormalised where
                                       the family does; zeros elsewhere)
                     and "router_margin": the smallest gap, over every layer and position of the
                     prompt and of prompt + greedy continuation, between the k-th and (k+1)-th
                     routing probability (a tie would make the expert choice ill-defined).

Cases:
  qwen3moe   Qwen3MoeForCausalLM, 2 layers, hidden 64, 4 heads / 2 KV heads, 8 experts top-3,
             norm_topk_prob true, moe_intermediate_size 32, per-head q/k norms, untied.
  qwen2moe   Qwen2MoeForCausalLM, the same shape with q/k/v biases, no q/k norms, top-2,
             norm_topk_prob false, and a shared expert (intermediate 48) gated by
             sigmoid(shared_expert_gate(x)).
  olmoe      OlmoeForCausalLM, 2 layers, hidden 64, 4 heads (MHA), 8 experts top-3,
             norm_topk_prob false, full-width q/k norms.
  mixtral    MixtralForCausalLM, 2 layers, hidden 64, 4 heads / 2 KV heads, 4 experts top-2
             (always renormalised), intermediate_size 64, no sliding window.
  gptoss     GptOssForCausalLM, 4 layers (sliding window 8, full, sliding, full: the 24-token
             prompt is longer than the window), hidden 64, 4 heads / 2 KV heads of 16, q/k/v/o
             biases, per-head attention sinks, YaRN (factor 4 over 32 positions, theta 150000),
             8 experts top-4 (router bias; softmax over the chosen logits), intermediate 16,
             clamped SwiGLU with swiglu_limit 2.0 (so that the clamps act; alpha 1.702). Saved in
             transformers' fused layout ("mlp.experts.gate_up_proj" [E, H, 2I] with gate/up
             interleaved, "down_proj" [E, I, H], their "_bias"es, "mlp.router", "sinks").
             router_margin is the gap between the k-th and (k+1)-th router logit.
  gptoss_mxfp4
             gpt-oss as the published checkpoints store it: the experts in MXFP4. 2 layers
             (sliding window 8, full), hidden 64, 4 experts top-2, intermediate 96 (blocks of 32
             along both expert inputs: three along down_proj's, which TP 2 splits 2 + 1),
             swiglu_limit 7.0 (the published value, which llama.cpp hard-codes, so that
             llama.cpp computes the same model from model.gguf), YaRN with its correction range
             clamped (GPT_OSS_YARN_CLAMPED), otherwise as gptoss. After init_weights each expert
             matrix W [out, in] (gate_up_proj[e].T, down_proj[e].T) is quantized per 32 inputs
             with gguf-py's MXFP4 quantizer and the model's experts set to gguf-py's
             dequantization of those blocks. model.safetensors then holds
             "mlp.experts.gate_up_proj_blocks" [E, 2I, H/32, 16] uint8 and "_scales"
             [E, 2I, H/32] uint8 (down_proj likewise, [E, H, I/32, 16] / [E, H, I/32]) instead of
             the F32 experts: the E8M0 scale byte as is, the FP4 codes two a byte with element
             2b in the low nibble of byte b and 2b + 1 in the high one (transformers'
             convert_moe_packed_tensors; ggml's blocks put elements 0..15 in the low nibbles),
             and config.json has quantization_config {"quant_method": "mxfp4"}. The reference
             model is that directory reloaded by transformers with Mxfp4Config(dequantize=True)
             (its own dequantizer), whose experts must equal gguf-py's values exactly.

Weights: N(0, std) per tensor drawn with torch.Generator(seed) in named_parameters order (the
experts as transformers holds them in memory, fused [num_experts, 2 * I, H] gate_up_proj and
[num_experts, H, I] down_proj); std = c / sqrt(fan_in) with fan_in the last dimension (q/k
c=1.5, v 1.0, o_proj 2.6, MLP and expert inputs 1.0, outputs 3.9, router 2.0, shared-expert gate
1.0; gpt-oss's transposed experts use fan_in = dim -2), embeddings and head 0.65, biases 0.3,
attention sinks N(0, 1), norm weights 1 + 0.1 N(0,1). The seed is the first of
base_seed, base_seed+1, ... whose greedy continuation keeps every top-1/top-2 margin >= 0.02 and
whose router_margin >= 1e-3 (gptoss_mxfp4: >= 0.25 and >= 0.05, see its case).
Input ids: numpy default_rng(4521 + case index), 24 ids uniform in [1, VOCAB).
Compute: float32, torch.set_num_threads(2), attn_implementation="eager".

Usage: python3 tools/reference/make_moe_fixtures.py [--out DIR] [--only CASE ...]
       python3 tools/reference/make_moe_fixtures.py --gguf-only [DIR]
         (rewrites only model.gguf of each case folder under DIR, default tests/testdata/arch)
Deterministic: re-running rewrites identical files (existing case folders are replaced).
"""

import json
import math
import os
import shutil
import sys

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_fixtures import GGUF_LAYER_NAMES, greedy, llama_permute  # noqa: E402
from make_interp_arch_fixtures import (  # noqa: E402
    VOCAB,
    N_IDS,
    MIN_MARGIN,
    add_bpe_tokenizer,
    capture_taps,
    train_tokenizer,
)
from refutil import dump_json, run_fixture_cases, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MIN_ROUTER_MARGIN = 1e-3

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
    bos_token_id=0,
    eos_token_id=0,
    pad_token_id=0,
    tie_word_embeddings=False,
)

# gpt-oss's YaRN RoPE, scaled down to the fixtures' 32-position window.
GPT_OSS_YARN = dict(
    rope_type="yarn",
    rope_theta=150000.0,
    factor=4.0,
    beta_fast=32.0,
    beta_slow=1.0,
    truncate=False,
    original_max_position_embeddings=32,
)

# The same with the correction range clamped to [0, head_dim - 1] at both ends (beta_slow tiny):
# llama.cpp floors/ceils the range where transformers' gpt-oss does not (truncate false), a
# deviation of llama.cpp's own; clamped, the two compute the same rotation, so llama.cpp can be
# held to the GGUF file's greedy tokens. Still a YaRN blend: pair j keeps 1 - j/15 of its
# extrapolated frequency.
GPT_OSS_YARN_CLAMPED = dict(GPT_OSS_YARN, beta_slow=1e-9)

CASES = [
    dict(
        name="qwen3moe",
        cls="Qwen3MoeForCausalLM",
        gguf="qwen3moe",
        base_seed=5100,
        renormalize=True,
        config=dict(
            COMMON,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=96,
            moe_intermediate_size=32,
            num_experts=8,
            num_experts_per_tok=3,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            rope_theta=1000000.0,
        ),
    ),
    dict(
        name="qwen2moe",
        cls="Qwen2MoeForCausalLM",
        gguf="qwen2moe",
        base_seed=5200,
        renormalize=False,
        config=dict(
            COMMON,
            num_key_value_heads=2,
            intermediate_size=96,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            rope_theta=1000000.0,
        ),
    ),
    dict(
        name="olmoe",
        cls="OlmoeForCausalLM",
        gguf="olmoe",
        base_seed=5300,
        renormalize=False,
        config=dict(
            COMMON,
            num_key_value_heads=4,
            intermediate_size=32,
            num_experts=8,
            num_experts_per_tok=3,
            norm_topk_prob=False,
            rope_theta=10000.0,
        ),
    ),
    dict(
        name="mixtral",
        cls="MixtralForCausalLM",
        gguf="llama",
        base_seed=5400,
        renormalize=True,
        config=dict(
            COMMON,
            num_key_value_heads=2,
            intermediate_size=64,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=None,
            rope_theta=1000000.0,
        ),
    ),
    dict(
        name="gptoss",
        cls="GptOssForCausalLM",
        base_seed=5500,
        renormalize=True,
        softmax_over_chosen=True,
        config=dict(
            COMMON,
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=16,
            num_local_experts=8,
            num_experts_per_tok=4,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"] * 2,
            attention_bias=True,
            swiglu_limit=2.0,
            rope_parameters=GPT_OSS_YARN,
        ),
    ),
    dict(
        name="gptoss_mxfp4",
        cls="GptOssForCausalLM",
        gguf="gpt-oss",
        base_seed=5600,
        # llama.cpp runs MXFP4 against int8-quantized activations (about 0.2 of a logit off
        # here): margins that its rounding does not flip.
        min_margin=0.25,
        min_router_margin=0.05,
        max_seeds=5000,
        renormalize=True,
        softmax_over_chosen=True,
        mxfp4=True,
        config=dict(
            COMMON,
            num_hidden_layers=2,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=96,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            attention_bias=True,
            swiglu_limit=7.0,
            rope_parameters=GPT_OSS_YARN_CLAMPED,
        ),
    ),
]

# (name fragment, c) for matrices: std = c / sqrt(fan_in), the first fragment that matches.
MATRIX_C = [
    ("mlp.router.", 2.0),
    ("shared_expert_gate", 1.0),
    ("mlp.gate.", 2.0),
    ("q_proj", 1.5),
    ("k_proj", 1.5),
    ("v_proj", 1.0),
    ("o_proj", 2.6),
    ("gate_up_proj", 1.0),
    ("gate_proj", 1.0),
    ("up_proj", 1.0),
    ("down_proj", 3.9),
]


def init_weights(model, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    gpt_oss = model.config.model_type == "gpt_oss"
    with torch.no_grad():
        for name, p in model.named_parameters():
            z = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if "norm" in name:
                p.copy_((1.0 + 0.1 * z).to(p.dtype))
            elif name.endswith(".bias") or name.endswith("_bias"):
                p.copy_((0.3 * z).to(p.dtype))
            elif name.endswith(".sinks"):
                p.copy_((1.0 * z).to(p.dtype))
            elif gpt_oss and name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                # gpt-oss holds its experts transposed, [E, in, out]: fan_in is dim -2
                c = 1.0 if name.endswith("gate_up_proj") else 3.9
                p.copy_((c / math.sqrt(p.shape[-2]) * z).to(p.dtype))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_((0.65 * z).to(p.dtype))
            else:
                c = next(c for k, c in MATRIX_C if k in name + ".")
                p.copy_((c / math.sqrt(p.shape[-1]) * z).to(p.dtype))


def mxfp4_quantize(w):
    """W [..., out, in] float32 -> (blocks [..., out, in/32, 16], scales [..., out, in/32], the
    dequantized W) in transformers' packing (see the header), by gguf-py's MXFP4 code."""
    import gguf
    from gguf import GGMLQuantizationType as T

    lead = w.shape[:-1]
    ggml = gguf.quants.quantize(np.ascontiguousarray(w, dtype=np.float32), T.MXFP4)
    ggml = ggml.reshape(*lead, w.shape[-1] // 32, 17)
    values = gguf.quants.dequantize(ggml.reshape(-1, 17), T.MXFP4).reshape(w.shape)
    scales = ggml[..., 0].copy()
    qs = ggml[..., 1:]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # ggml: element j < 16 low, j + 16 high
    blocks = (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)
    return blocks, scales, values.astype(np.float32)


def quantize_experts(model):
    """Sets every expert matrix of `model` to its MXFP4 values; returns {file name: uint8 array}
    for the blocks and scales that replace the F32 experts in model.safetensors."""
    import torch

    packed = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                continue
            w = p.detach().numpy().transpose(0, 2, 1)  # [E, in, out] -> [E, out, in]
            blocks, scales, values = mxfp4_quantize(w)
            p.copy_(torch.from_numpy(np.ascontiguousarray(values.transpose(0, 2, 1))))
            packed[name + "_blocks"] = blocks
            packed[name + "_scales"] = scales
    return packed


def write_mxfp4(d, packed):
    """model.safetensors with the F32 experts replaced by `packed`; config.json's
    quantization_config."""
    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(d, "model.safetensors")
    sd = load_file(path)
    for name in packed:
        sd.pop(name.rsplit("_", 1)[0], None)  # "..._blocks" / "..._scales" -> the F32 tensor
    for name, a in packed.items():
        sd[name] = torch.from_numpy(np.ascontiguousarray(a))
    save_file(dict(sorted(sd.items())), path, metadata={"format": "pt"})
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path, encoding="utf-8") as f:
        c = json.load(f)
    c["quantization_config"] = {"quant_method": "mxfp4"}
    c = dict(sorted(c.items()))
    with open(cfg_path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    return c


def top_k(case):
    return case["config"]["num_experts_per_tok"]


def routing(case, router_logits):
    """Dense [positions, num_experts] weights and the k-th/(k+1)-th probability margin."""
    k = top_k(case)
    if case.get("softmax_over_chosen"):  # gpt-oss: top-k of the logits, softmax over those
        order = np.argsort(-router_logits, axis=-1, kind="stable")
        dense = np.zeros_like(router_logits)
        margin = math.inf
        for p in range(router_logits.shape[0]):
            chosen = order[p, :k]
            w = np.exp(router_logits[p, chosen] - router_logits[p, chosen].max())
            dense[p, chosen] = w / w.sum()
            if k < router_logits.shape[1]:
                logits = router_logits[p]
                margin = min(margin, float(logits[order[p, k - 1]] - logits[order[p, k]]))
        return dense, margin
    probs = np.exp(router_logits - router_logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    order = np.argsort(-probs, axis=-1, kind="stable")
    dense = np.zeros_like(probs)
    margin = math.inf
    for p in range(probs.shape[0]):
        chosen = order[p, :k]
        w = probs[p, chosen]
        if case["renormalize"]:
            w = w / w.sum()
        dense[p, chosen] = w
        if k < probs.shape[1]:
            margin = min(margin, float(probs[p, order[p, k - 1]] - probs[p, order[p, k]]))
    return dense, margin


def router_logits_of(model, ids):
    import torch

    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False, output_router_logits=True)
    return [r.float().numpy().reshape(len(ids), -1) for r in out.router_logits]


def router_margin(case, model, ids):
    return min(routing(case, r)[1] for r in router_logits_of(model, ids))


def to_hub_layout(case, cfg_path):
    """transformers 5's config.json -> the keys published checkpoints of the family carry."""
    with open(cfg_path, encoding="utf-8") as f:
        c = json.load(f)
    if case["cls"] == "Qwen3MoeForCausalLM" and "num_local_experts" in c:
        c["num_experts"] = c.pop("num_local_experts")  # Qwen3-30B-A3B's key
    rp = dict(c.pop("rope_parameters", None) or {})
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    c["rope_theta"] = rp.pop("rope_theta")
    c["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    c = dict(sorted(c.items()))
    with open(cfg_path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    return c


# Hugging Face names of the sparse block (Mixtral's presented as Qwen's) -> llama.cpp's.
GGUF_MOE_NAMES = {
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
}
MIXTRAL_NAMES = {"block_sparse_moe.gate.": "mlp.gate.", "block_sparse_moe.experts.": "mlp.experts.",
                 ".w1.": ".gate_proj.", ".w3.": ".up_proj.", ".w2.": ".down_proj."}


def add_decoder_keys(w, cfg, head_dim):
    """The "<arch>.*" keys every decoder's GGUF carries, from config.json, in the converter's order."""
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])


def write_gguf(case, d):
    """model.gguf of the case folder `d` from its model.safetensors (see the header)."""
    import gguf
    from safetensors.numpy import load_file

    with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    arch = case["gguf"]
    if arch == "gpt-oss":
        return write_gpt_oss_gguf(case, d, cfg)
    sd = load_file(os.path.join(d, "model.safetensors"))
    if arch == "llama":
        renamed = {}
        for k, v in sd.items():
            for a, b in MIXTRAL_NAMES.items():
                k = k.replace(a, b)
            renamed[k] = v
        sd = renamed
    n_layer, n_head = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    n_experts = cfg.get("num_experts") or cfg["num_local_experts"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    path = os.path.join(d, "model.gguf")
    w = gguf.GGUFWriter(path, arch)
    add_decoder_keys(w, cfg, head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_expert_count(n_experts)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if cfg.get("moe_intermediate_size"):
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if cfg.get("shared_expert_intermediate_size"):
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    add_bpe_tokenizer(w, os.path.join(d, "tokenizer.json"))
    tensors = [
        ("token_embd.weight", sd["model.embed_tokens.weight"]),
        ("output_norm.weight", sd["model.norm.weight"]),
        ("output.weight", sd["lm_head.weight"]),
    ]
    for L in range(n_layer):
        p = f"model.layers.{L}."
        for rest, gname in list(GGUF_LAYER_NAMES.items()) + list(GGUF_MOE_NAMES.items()):
            if p + rest not in sd:
                continue
            t = sd[p + rest]
            if arch == "llama" and rest == "self_attn.q_proj.weight":
                t = llama_permute(t, n_head)
            if arch == "llama" and rest == "self_attn.k_proj.weight":
                t = llama_permute(t, cfg["num_key_value_heads"])
            if rest == "mlp.shared_expert_gate.weight":
                t = t.reshape(-1)
            tensors.append((f"blk.{L}.{gname}", t))
        for bias in ("q_proj", "k_proj", "v_proj"):
            if f"{p}self_attn.{bias}.bias" in sd:
                tensors.append((f"blk.{L}.attn_{bias[0]}.bias", sd[f"{p}self_attn.{bias}.bias"]))
        for proj, gname in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"),
                            ("down_proj", "ffn_down_exps")):
            stacked = np.stack([sd[f"{p}mlp.experts.{e}.{proj}.weight"] for e in range(n_experts)])
            tensors.append((f"blk.{L}.{gname}.weight", stacked))
    for name, t in tensors:
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.chmod(path, 0o644)
    print(f"{case['name']}: model.gguf ({arch}), {os.path.getsize(path)} bytes")


def ggml_mxfp4(blocks, scales):
    """transformers' MXFP4 experts (blocks [E, rows, G, 16], scales [E, rows, G]; element 2b of a
    block in the low nibble of byte b) -> ggml's block_mxfp4 bytes [E, rows, G * 17] (the scale
    byte, then qs[j] = element j | element j + 16 << 4), as convert_hf_to_gguf.py repacks them."""
    elems = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    qs = (elems[..., :16] | (elems[..., 16:] << 4)).astype(np.uint8)
    out = np.concatenate([scales[..., None], qs], axis=-1)
    return np.ascontiguousarray(out.reshape(*blocks.shape[:-2], -1), dtype=np.uint8)


def write_gpt_oss_gguf(case, d, cfg):
    """model.gguf of a gpt-oss case folder, as llama.cpp's converter writes gpt-oss (arch
    "gpt-oss"): the post-attention norm as blk.N.post_attention_norm, the sinks as
    blk.N.attn_sinks.weight, the router as ffn_gate_inp.{weight,bias}, the experts stacked as
    ffn_{gate,up,down}_exps.weight in MXFP4 (gate the even rows of gate_up, up the odd) with
    their biases ffn_{gate,up,down}_exps.bias [E, n]; YaRN as rope.scaling.{type,factor,
    original_context_length,yarn_beta_fast,yarn_beta_slow}; attention.sliding_window with
    llama.cpp's fixed pattern (even layers slide); everything else F32. llama.cpp hard-codes
    the clamped SwiGLU's alpha 1.702 and limit 7.0, so the case must use those."""
    import gguf
    from safetensors.numpy import load_file

    assert cfg.get("swiglu_limit", 7.0) == 7.0, "llama.cpp's gpt-oss clamps at 7.0"
    sd = load_file(os.path.join(d, "model.safetensors"))
    n_layer, n_head = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    head_dim = cfg["head_dim"]
    rs = cfg["rope_scaling"]
    path = os.path.join(d, "model.gguf")
    w = gguf.GGUFWriter(path, "gpt-oss")
    add_decoder_keys(w, cfg, head_dim)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rs["factor"])
    w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(rs["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(rs["beta_slow"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_sliding_window(cfg["sliding_window"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])
    add_bpe_tokenizer(w, os.path.join(d, "tokenizer.json"))
    f32 = [
        ("token_embd.weight", sd["model.embed_tokens.weight"]),
        ("output_norm.weight", sd["model.norm.weight"]),
        ("output.weight", sd["lm_head.weight"]),
    ]
    raw = []
    for L in range(n_layer):
        p, b = f"model.layers.{L}.", f"blk.{L}."
        f32 += [
            (b + "attn_norm.weight", sd[p + "input_layernorm.weight"]),
            (b + "post_attention_norm.weight", sd[p + "post_attention_layernorm.weight"]),
            (b + "attn_sinks.weight", sd[p + "self_attn.sinks"]),
            (b + "ffn_gate_inp.weight", sd[p + "mlp.router.weight"]),
            (b + "ffn_gate_inp.bias", sd[p + "mlp.router.bias"]),
        ]
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                       ("o_proj", "attn_output")):
            f32.append((f"{b}{gg}.weight", sd[f"{p}self_attn.{hf}.weight"]))
            f32.append((f"{b}{gg}.bias", sd[f"{p}self_attn.{hf}.bias"]))
        e = p + "mlp.experts."
        gate_up = ggml_mxfp4(sd[e + "gate_up_proj_blocks"], sd[e + "gate_up_proj_scales"])
        raw += [
            (b + "ffn_gate_exps.weight", gate_up[:, 0::2]),
            (b + "ffn_up_exps.weight", gate_up[:, 1::2]),
            (b + "ffn_down_exps.weight",
             ggml_mxfp4(sd[e + "down_proj_blocks"], sd[e + "down_proj_scales"])),
        ]
        f32 += [
            (b + "ffn_gate_exps.bias", sd[e + "gate_up_proj_bias"][:, 0::2]),
            (b + "ffn_up_exps.bias", sd[e + "gate_up_proj_bias"][:, 1::2]),
            (b + "ffn_down_exps.bias", sd[e + "down_proj_bias"]),
        ]
    for name, t in f32:
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    for name, t in raw:
        w.add_tensor(name, np.ascontiguousarray(t), raw_dtype=gguf.GGMLQuantizationType.MXFP4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.chmod(path, 0o644)
    print(f"{case['name']}: model.gguf (gpt-oss, MXFP4 experts), {os.path.getsize(path)} bytes")


def make_case(case, index, out_root):
    import torch
    import transformers

    cls = getattr(transformers, case["cls"])
    rng = np.random.default_rng(4521 + index)
    ids = rng.integers(1, VOCAB, size=N_IDS).tolist()

    seed = case["base_seed"]
    while True:
        model = cls._from_config(
            cls.config_class(**case["config"]), attn_implementation="eager", dtype=torch.float32
        )
        init_weights(model, seed)
        packed = quantize_experts(model) if case.get("mxfp4") else None
        model = model.eval()
        try:
            g = greedy(model, ids, 0)
        except AssertionError:  # generation ended early: this seed's continuation emits EOS
            seed += 1
            assert seed < case["base_seed"] + case.get("max_seeds", 200), case["name"]
            continue
        margin = min(router_margin(case, model, ids), router_margin(case, model, ids + g["new_ids"]))
        if g["min_margin"] >= case.get("min_margin", MIN_MARGIN) and margin >= case.get(
            "min_router_margin", MIN_ROUTER_MARGIN
        ):
            break
        seed += 1
        assert seed < case["base_seed"] + case.get("max_seeds", 200), case["name"]

    d = os.path.join(out_root, case["name"])
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model.save_pretrained(d, safe_serialization=True)
    cfg_hub = to_hub_layout(case, os.path.join(d, "config.json"))
    load_args = {}
    if packed is not None:
        cfg_hub = write_mxfp4(d, packed)
        load_args["quantization_config"] = transformers.Mxfp4Config(dequantize=True)
    tok = train_tokenizer(os.path.join(d, "tokenizer.json"))
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)

    ref_model = cls.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", **load_args
    ).eval()
    for k, v in model.state_dict().items():
        assert torch.equal(ref_model.state_dict()[k], v), k
    names = ("model.layers", "self_attn", "mlp", "model.norm")
    taps, logits = capture_taps(ref_model, case["cls"], ids, names)
    with torch.no_grad():
        direct = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
    assert np.array_equal(direct, logits), "the reloaded config is another model"
    router = router_logits_of(ref_model, ids)
    taps["router_logits"] = router
    taps["expert_weights"] = [routing(case, r)[0] for r in router]
    g2 = greedy(ref_model, ids, 0)
    assert g2["new_ids"] == g["new_ids"]

    if "gguf" in case:
        write_gguf(case, d)
    files = sorted(os.listdir(d))
    meta = {
        "versions": versions(),
        "script": "tools/reference/make_moe_fixtures.py",
        "case": case["name"],
        "architecture": case["cls"],
        "storage_dtype": "float32, experts mxfp4" if packed is not None else "float32",
        "compute_dtype": "float32",
        "seed": seed,
        "input_ids": "numpy default_rng(%d): %d ids uniform in [1, %d)" % (4521 + index, N_IDS, VOCAB),
        "logits": "one no-cache forward over input_ids; logits[p] = all vocab logits at position p",
        "greedy": "generate(do_sample=False, max_new_tokens=16, eos_token_id=None), KV cache",
        "taps": "taps[site][layer][position] (final_norm: [0][position]) from forward hooks and "
        "output_router_logits; see the script header for each site",
        "files": files,
    }
    ref = {
        "meta": meta,
        "config": cfg_hub,
        "input_ids": ids,
        "argmax": [int(np.argmax(r)) for r in logits],
        "top2_margin": [float(np.diff(np.sort(r)[-2:])[0]) for r in logits],
        "logits": [r.tolist() for r in logits],
        "greedy": g2,
        "router_margin": margin,
        "taps": {k: [np.asarray(a).tolist() for a in v] for k, v in taps.items()},
    }
    dump_json(ref, os.path.join(d, "reference.json"))
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(
        f"{case['name']}: seed {seed}, files {files}, {size} bytes, min margin "
        f"{g2['min_margin']:.4f}, router margin {margin:.4f}, greedy {g2['new_ids']}"
    )


def main():
    if "--gguf-only" in sys.argv:
        rest = [a for a in sys.argv[1:] if a != "--gguf-only"]
        root = rest[0] if rest else os.path.join(REPO, "tests", "testdata", "arch")
        for case in CASES:
            if "gguf" in case:
                write_gguf(case, os.path.join(root, case["name"]))
        return
    run_fixture_cases(CASES, make_case, __doc__.split("\n")[0],
                      os.path.join(REPO, "tests", "testdata", "arch"))


if __name__ == "__main__":
    main()
