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

Weights: N(0, std) per tensor drawn with torch.Generator(seed) in named_parameters order (the
experts as transformers holds them in memory, fused [num_experts, 2 * I, H] gate_up_proj and
[num_experts, H, I] down_proj); std = c / sqrt(fan_in) with fan_in the last dimension (q/k
c=1.5, v 1.0, o_proj 2.6, MLP and expert inputs 1.0, outputs 3.9, router 2.0, shared-expert gate
1.0; gpt-oss's transposed experts use fan_in = dim -2), embeddings and head 0.65, biases 0.3,
attention sinks N(0, 1), norm weights 1 + 0.1 N(0,1). The seed is the first of
base_seed, base_seed+1, ... whose greedy continuation keeps every top-1/top-2 margin >= 0.02 and
whose router_margin >= 1e-3.
Input ids: numpy default_rng(4521 + case index), 24 ids uniform in [1, VOCAB).
Compute: float32, torch.set_num_threads(2), attn_implementation="eager".

Usage: python3 tools/reference/make_moe_fixtures.py [--out DIR] [--only CASE ...]
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
from make_arch_fixtures import greedy  # noqa: E402
from make_interp_arch_fixtures import VOCAB, N_IDS, MIN_MARGIN, capture_taps, train_tokenizer  # noqa: E402
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

CASES = [
    dict(
        name="qwen3moe",
        cls="Qwen3MoeForCausalLM",
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
            rope_parameters=dict(
                rope_type="yarn",
                rope_theta=150000.0,
                factor=4.0,
                beta_fast=32.0,
                beta_slow=1.0,
                truncate=False,
                original_max_position_embeddings=32,
            ),
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
        model = model.eval()
        g = greedy(model, ids, 0)
        margin = min(router_margin(case, model, ids), router_margin(case, model, ids + g["new_ids"]))
        if g["min_margin"] >= MIN_MARGIN and margin >= MIN_ROUTER_MARGIN:
            break
        seed += 1
        assert seed < case["base_seed"] + 200, case["name"]

    d = os.path.join(out_root, case["name"])
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model.save_pretrained(d, safe_serialization=True)
    cfg_hub = to_hub_layout(case, os.path.join(d, "config.json"))
    tok = train_tokenizer(os.path.join(d, "tokenizer.json"))
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)

    ref_model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
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

    files = sorted(os.listdir(d))
    meta = {
        "versions": versions(),
        "script": "tools/reference/make_moe_fixtures.py",
        "case": case["name"],
        "architecture": case["cls"],
        "storage_dtype": "float32",
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
    run_fixture_cases(CASES, make_case, __doc__.split("\n")[0],
                      os.path.join(REPO, "tests", "testdata", "arch"))


if __name__ == "__main__":
    main()
