#!/usr/bin/env python3
"""Random-weight mixture-of-experts GGUF files at the shapes of OLMoE-1B-7B and
Granite-3.0-1B-A400M (F16, for `undercurrent quantize` to Q4_K_M / Q8_0) and of gpt-oss-20b (as
published: MXFP4 experts), for speed and memory runs (bench/vs_llamacpp.py) where the real
weights cannot be downloaded.

  olmoe-1b-7b-f16.gguf   general.architecture olmoe: 16 layers, hidden 2048, 16 heads (MHA), 64
                         experts top-8 of FFN 1024, full-width q/k norms, vocab 50304, 4096
                         positions (6.9B weights, 1.3B active per token).
  granite-1b-a400m-f16.gguf
                         the Granite-3.0-1B-A400M shape written as llama.cpp's Mixtral ("llama"
                         with llama.expert_count; Granite's own multipliers are not part of the
                         shape): 24 layers, hidden 1024, 16 heads / 8 KV heads, 32 experts top-8
                         of FFN 512, vocab 49155, 4096 positions (1.3B weights, 0.4B active).
  gpt-oss-20b-mxfp4.gguf general.architecture gpt-oss: 24 layers, hidden 2880, 64 heads / 8 KV
                         heads of 64, q/k/v/o biases, attention sinks, 128-token sliding window
                         on even layers, YaRN (factor 32 over 4096), 32 experts top-4 of FFN 2880
                         with biases, vocab 201088 (20.9B weights, 3.6B active). The experts are
                         MXFP4 (random FP4 codes, E8M0 scales 2^-8..2^-6), attention, embeddings
                         and head Q8_0 (random int8, F16 scales), as the published GGUF; 12 GiB.

Names and metadata as tools/reference/make_moe_fixtures.py writes them (llama.cpp's layout:
experts stacked in blk.N.ffn_{gate,up,down}_exps, the router in blk.N.ffn_gate_inp); N(0, 0.02)
weights (one numpy seed per tensor), unit norms, a placeholder byte-level vocabulary (the speed
runs feed token ids). Tensors are generated and written one at a time, so memory stays at one
tensor. Needs numpy and gguf.

Usage: python3 bench/make_moe_shape_gguf.py OUT_DIR [--only olmoe|granite|gptoss]
"""
import argparse
import os
import sys

import numpy as np

SHAPES = {
    "olmoe": dict(file="olmoe-1b-7b-f16.gguf", arch="olmoe", layers=16, hidden=2048, heads=16,
                  kv_heads=16, experts=64, used=8, ffn=1024, vocab=50304, ctx=4096,
                  qk_norm=True),
    "granite": dict(file="granite-1b-a400m-f16.gguf", arch="llama", layers=24, hidden=1024,
                    heads=16, kv_heads=8, experts=32, used=8, ffn=512, vocab=49155, ctx=4096,
                    qk_norm=False),
    "gptoss": dict(file="gpt-oss-20b-mxfp4.gguf", arch="gpt-oss", layers=24, hidden=2880,
                   heads=64, kv_heads=8, head_dim=64, experts=32, used=4, ffn=2880,
                   vocab=201088, ctx=131072, window=128),
}


def tensor_list(s):
    """(name, shape outermost first, kind) of every tensor, in file order."""
    h, hd = s["hidden"], s["hidden"] // s["heads"]
    kv = s["kv_heads"] * hd
    out = [("token_embd.weight", (s["vocab"], h), "mat"),
           ("output_norm.weight", (h,), "norm"),
           ("output.weight", (s["vocab"], h), "mat")]
    for L in range(s["layers"]):
        b = f"blk.{L}."
        out += [(b + "attn_norm.weight", (h,), "norm"),
                (b + "attn_q.weight", (h, h), "mat"),
                (b + "attn_k.weight", (kv, h), "mat"),
                (b + "attn_v.weight", (kv, h), "mat"),
                (b + "attn_output.weight", (h, h), "mat")]
        if s["qk_norm"]:
            out += [(b + "attn_q_norm.weight", (h,), "norm"),
                    (b + "attn_k_norm.weight", (kv,), "norm")]
        out += [(b + "ffn_norm.weight", (h,), "norm"),
                (b + "ffn_gate_inp.weight", (s["experts"], h), "router"),
                (b + "ffn_gate_exps.weight", (s["experts"], s["ffn"], h), "mat"),
                (b + "ffn_up_exps.weight", (s["experts"], s["ffn"], h), "mat"),
                (b + "ffn_down_exps.weight", (s["experts"], h, s["ffn"]), "mat")]
    return out


def gpt_oss_tensor_list(s):
    """(name, shape outermost first, kind) of every gpt-oss tensor, in file order; kinds "q8",
    "mxfp4" (stored types) and "f32" (norms, biases, sinks, the router)."""
    h, hd, e, f = s["hidden"], s["head_dim"], s["experts"], s["ffn"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    out = [("token_embd.weight", (s["vocab"], h), "q8"),
           ("output_norm.weight", (h,), "norm"),
           ("output.weight", (s["vocab"], h), "q8")]
    for L in range(s["layers"]):
        b = f"blk.{L}."
        out += [(b + "attn_norm.weight", (h,), "norm"),
                (b + "post_attention_norm.weight", (h,), "norm"),
                (b + "attn_sinks.weight", (s["heads"],), "f32"),
                (b + "attn_q.weight", (q, h), "q8"), (b + "attn_q.bias", (q,), "f32"),
                (b + "attn_k.weight", (kv, h), "q8"), (b + "attn_k.bias", (kv,), "f32"),
                (b + "attn_v.weight", (kv, h), "q8"), (b + "attn_v.bias", (kv,), "f32"),
                (b + "attn_output.weight", (h, q), "q8"), (b + "attn_output.bias", (h,), "f32"),
                (b + "ffn_gate_inp.weight", (e, h), "f32"), (b + "ffn_gate_inp.bias", (e,), "f32"),
                (b + "ffn_gate_exps.weight", (e, f, h), "mxfp4"),
                (b + "ffn_gate_exps.bias", (e, f), "f32"),
                (b + "ffn_up_exps.weight", (e, f, h), "mxfp4"),
                (b + "ffn_up_exps.bias", (e, f), "f32"),
                (b + "ffn_down_exps.weight", (e, h, f), "mxfp4"),
                (b + "ffn_down_exps.bias", (e, h), "f32")]
    return out


def gpt_oss_blocks(shape, kind, rng):
    """Random blocks of a Q8_0 or MXFP4 tensor: uint8 [..., row bytes], as ggml stores them."""
    rows, k = int(np.prod(shape[:-1])), shape[-1]
    if kind == "q8":  # block_q8_0: F16 d, 32 int8
        blocks = np.empty((rows, k // 32), dtype=[("d", "<f2"), ("qs", "i1", 32)])
        blocks["d"] = 0.02 / 64
        blocks["qs"] = rng.integers(-127, 128, size=(rows, k // 32, 32), dtype=np.int8)
    else:  # block_mxfp4: E8M0 scale, 16 bytes of FP4 codes
        blocks = np.empty((rows, k // 32), dtype=[("e", "u1"), ("qs", "u1", 16)])
        blocks["e"] = rng.integers(119, 122, size=(rows, k // 32), dtype=np.uint8)
        blocks["qs"] = rng.integers(0, 256, size=(rows, k // 32, 16), dtype=np.uint8)
    return blocks.view(np.uint8).reshape(*shape[:-1], -1)


def write_gpt_oss(s, path):
    import gguf

    tensors = gpt_oss_tensor_list(s)
    w = gguf.GGUFWriter(path, s["arch"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_expert_count(s["experts"])
    w.add_expert_used_count(s["used"])
    w.add_sliding_window(s["window"])
    w.add_expert_feed_forward_length(s["ffn"])
    add_placeholder_vocab(w, s["vocab"])
    types = {"q8": gguf.GGMLQuantizationType.Q8_0, "mxfp4": gguf.GGMLQuantizationType.MXFP4}
    for name, shape, kind in tensors:
        if kind in types:
            row_bytes = shape[-1] // 32 * (34 if kind == "q8" else 17)
            w.add_tensor_info(name, (*shape[:-1], row_bytes), np.dtype(np.uint8),
                              int(np.prod(shape[:-1])) * row_bytes, raw_dtype=types[kind])
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, shape, kind) in enumerate(tensors):
        rng = np.random.default_rng(i)
        if kind in types:
            w.write_tensor_data(gpt_oss_blocks(shape, kind, rng))
        elif kind == "norm":
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
        else:
            w.write_tensor_data(0.02 * rng.standard_normal(shape, dtype=np.float32))
    w.close()
    print(f"wrote {path}: {os.path.getsize(path) / 2**30:.2f} GiB")


def add_placeholder_vocab(w, vocab):
    """A byte-level vocabulary of `vocab` tokens (the speed runs feed token ids)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                    "reference"))
    from make_interp_arch_fixtures import bytes_to_unicode

    alphabet = bytes_to_unicode()
    tokens = [alphabet[b] for b in range(256)] + ["\u0120t"]
    tokens += [f"t{i}" for i in range(vocab - len(tokens))]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([1] * vocab)
    w.add_token_merges(["\u0120 t"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)


def write(s, path):
    import gguf

    if s["arch"] == "gpt-oss":
        return write_gpt_oss(s, path)

    h = s["hidden"]
    w = gguf.GGUFWriter(path, s["arch"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(h)
    w.add_feed_forward_length(s["ffn"])
    w.add_block_count(s["layers"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(h // s["heads"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(s["experts"])
    w.add_expert_used_count(s["used"])
    add_placeholder_vocab(w, s["vocab"])
    tensors = tensor_list(s)
    for name, shape, kind in tensors:
        dt = np.float32 if kind in ("norm", "router") else np.float16
        w.add_tensor_info(name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, shape, kind) in enumerate(tensors):
        if kind == "norm":
            t = np.ones(shape, dtype=np.float32)
        else:
            rng = np.random.default_rng(i)
            t = 0.02 * rng.standard_normal(shape, dtype=np.float32)
            t = t if kind == "router" else t.astype(np.float16)
        w.write_tensor_data(t)
    w.close()
    print(f"wrote {path}: {os.path.getsize(path) / 2**30:.2f} GiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--only", choices=sorted(SHAPES))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for key, s in SHAPES.items():
        if args.only in (None, key):
            write(s, os.path.join(args.out_dir, s["file"]))


if __name__ == "__main__":
    main()
