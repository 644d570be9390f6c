#!/usr/bin/env python3
"""Random-weight GGUF files at the shapes of GPT-2 small and Pythia-410M, for speed runs
(bench/vs_llamacpp.py) where the real weights cannot be downloaded.

Writes OUT_DIR/gpt2-small-f16.gguf (gpt2: 12 layers, hidden 768, 12 heads, FFN 3072, vocab
50257, 1024 positions) and OUT_DIR/pythia-410m-f16.gguf (gptneox: 24 layers, hidden 1024, 16
heads, FFN 4096, vocab 50304, rotary_pct 0.25, parallel residual), F16, in llama.cpp's layout
(the names and metadata tools/reference/make_interp_arch_fixtures.py writes), with N(0, 0.02)
weights (seed 0), unit norms, and a placeholder byte-level vocabulary (GPT-2's 256 byte tokens,
one merge, then "t<i>"): the speed runs feed token ids. Needs numpy and gguf.

Usage: python3 bench/make_interp_shape_gguf.py OUT_DIR [--only gpt2|pythia]
"""
import argparse
import os
import sys

import numpy as np

SHAPES = {
    "gpt2": dict(file="gpt2-small-f16.gguf", arch="gpt2", layers=12, hidden=768, heads=12,
                 ffn=3072, vocab=50257, ctx=1024),
    "pythia": dict(file="pythia-410m-f16.gguf", arch="gptneox", layers=24, hidden=1024,
                   heads=16, ffn=4096, vocab=50304, ctx=2048),
}


def write(shape, path):
    import gguf

    rng = np.random.default_rng(0)
    h, f, v = shape["hidden"], shape["ffn"], shape["vocab"]
    w = gguf.GGUFWriter(path, shape["arch"])
    w.add_context_length(shape["ctx"])
    w.add_embedding_length(h)
    w.add_feed_forward_length(f)
    w.add_block_count(shape["layers"])
    w.add_head_count(shape["heads"])
    w.add_layer_norm_eps(1e-5)
    if shape["arch"] == "gptneox":
        w.add_rope_dimension_count(h // shape["heads"] // 4)
        w.add_parallel_residual(True)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                    "reference"))
    from make_interp_arch_fixtures import bytes_to_unicode

    alphabet = bytes_to_unicode()
    tokens = [alphabet[b] for b in range(256)] + ["\u0120t"]
    tokens += [f"t{i}" for i in range(v - len(tokens))]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([1] * v)
    w.add_token_merges(["\u0120 t"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)

    def mat(rows, cols):
        return (0.02 * rng.standard_normal((rows, cols), dtype=np.float32)).astype(np.float16)

    def vec(n, one=False):
        return np.ones(n, np.float32) if one else np.zeros(n, np.float32)

    w.add_tensor("token_embd.weight", mat(v, h))
    if shape["arch"] == "gpt2":
        w.add_tensor("position_embd.weight", mat(shape["ctx"], h))
    for L in range(shape["layers"]):
        for name, t in (
            ("attn_norm.weight", vec(h, True)), ("attn_norm.bias", vec(h)),
            ("attn_qkv.weight", mat(3 * h, h)), ("attn_qkv.bias", vec(3 * h)),
            ("attn_output.weight", mat(h, h)), ("attn_output.bias", vec(h)),
            ("ffn_norm.weight", vec(h, True)), ("ffn_norm.bias", vec(h)),
            ("ffn_up.weight", mat(f, h)), ("ffn_up.bias", vec(f)),
            ("ffn_down.weight", mat(h, f)), ("ffn_down.bias", vec(h)),
        ):
            w.add_tensor(f"blk.{L}.{name}", t)
    w.add_tensor("output_norm.weight", vec(h, True))
    w.add_tensor("output_norm.bias", vec(h))
    w.add_tensor("output.weight", mat(v, h))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--only", choices=sorted(SHAPES))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for key, shape in SHAPES.items():
        if args.only and key != args.only:
            continue
        path = os.path.join(args.out, shape["file"])
        write(shape, path)
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
