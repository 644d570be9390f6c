#!/usr/bin/env python3
"""Oracle data for the dequantization of the ggml block types Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K,
Q4_K, Q5_K, Q6_K, Q8_K and MXFP4.

Default mode writes tests/testdata/quant/ (or --out DIR):
  <TYPE>.blocks    NUM_BLOCKS[TYPE] blocks of TYPE, back to back (the ggml block layout). The
                   quant bytes are uniform random bytes (numpy default_rng, seed SEED + type id);
                   the f16 scale fields (d; dmin for Q2_K/Q4_K/Q5_K; m for Q5_1) are then
                   overwritten: most are +-10^U(-4.5, -0.5) rounded to f16, each block's sign
                   random (dmin/m too: negative ones occur in the wild for d, and they must
                   still decode), and block i % 16 == 0..7 gets an edge value instead (0, -0, the
                   smallest f16 subnormal, a larger subnormal, -subnormal, the smallest normal,
                   65504, -1000). Q8_K's d is an f32 with the same pattern plus f32 subnormals.
                   MXFP4's E8M0 e is uniform in [96, 160), and block i % 16 == 0..7 gets an
                   edge instead (0 and 1: subnormal scales, 2, 3, 126, 127, 128, and 252, the
                   largest e whose values are all finite; 253..255 overflow 12 * 2^(e - 128)).
  <TYPE>.f32       the float32 little-endian values gguf.quants.dequantize gives for those
                   blocks, NUM_BLOCKS[TYPE] * block size values. gguf-py has no Q8_K
                   dequantizer (Q8_K is llama.cpp's activation type): its values are ggml's
                   dequantize_row_q8_K written in numpy, d * float32(q), one float32 multiply.
  manifest.json    per type: ggml id, block size and bytes, block count, sha256 of both files;
                   "meta": package versions.
and, for the GGUF fuzzer's seed corpus, fuzz/corpus/gguf/kquant_tensors.gguf: a GGUF
(gguf.GGUFWriter, architecture "llama") with one [2, block size] tensor of each type, the first
two blocks of <TYPE>.blocks; kquant_tensors_align1.gguf: the same with general.alignment 1, so
that tensors start at odd offsets.

--gemma3 PATH mode writes tests/testdata/gemma3/dequant_sha256.json (or --out DIR) for
gemma-3-270m-q4_k_m.gguf (scripts/fetch-gemma3.sh; not committed): per tensor, in file order,
its name, ggml type name, shape (outermost first, as the project writes shapes), the sha256 of
the float32 little-endian bytes of gguf.quants.dequantize of its data (F32 tensors: their own
bytes), and the values at flat indices 0, numel / 2 and numel - 1; plus the file's sha256.

Run with (also in every output's "meta"): python 3.11.7, numpy 2.4.6, gguf 0.19.0.

Usage: python3 tools/reference/make_quant_fixtures.py [--out DIR]
       python3 tools/reference/make_quant_fixtures.py --gemma3 build/models/gemma3/gemma-3-270m-q4_k_m.gguf
Deterministic: re-running rewrites byte-identical files (the gemma3 mode takes ~30 s).
"""

import argparse
import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refutil import dump_json, sha256_file, versions  # noqa: E402

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SEED = 20240601

# type -> number of blocks in the fixture (~0.8 MB in all)
NUM_BLOCKS = {
    T.Q5_0: 256,
    T.Q5_1: 256,
    T.IQ4_NL: 256,
    T.Q2_K: 96,
    T.Q3_K: 96,
    T.Q4_K: 96,
    T.Q5_K: 96,
    T.Q6_K: 96,
    T.Q8_K: 96,
    T.MXFP4: 256,
}

# type -> {field: byte offset} of its f16 scale fields (ggml block structs)
F16_FIELDS = {
    T.Q5_0: {"d": 0},
    T.Q5_1: {"d": 0, "m": 2},
    T.IQ4_NL: {"d": 0},
    T.Q2_K: {"d": 80, "dmin": 82},
    T.Q3_K: {"d": 108},
    T.Q4_K: {"d": 0, "dmin": 2},
    T.Q5_K: {"d": 0, "dmin": 2},
    T.Q6_K: {"d": 208},
}

F16_EDGES = np.array([0x0000, 0x8000, 0x0001, 0x02A7, 0x83FF, 0x0400, 0x7BFF, 0xE3D0], dtype=np.uint16)
MXFP4_EDGES = np.array([0, 1, 2, 3, 126, 127, 128, 252], dtype=np.uint8)
F32_EDGES = np.array([0.0, -0.0, 1e-45, 3e-40, -1.17549435e-38, 1e-30, 3e30, -1000.0], dtype=np.float32)


def random_scales(rng, n):
    """n realistic scales: +-10^U(-4.5, -0.5), with every 16th block from i = 0..7 an edge."""
    mag = 10.0 ** rng.uniform(-4.5, -0.5, size=n)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return mag * sign


def make_blocks(qtype):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    n = NUM_BLOCKS[qtype]
    rng = np.random.default_rng(SEED + int(qtype))
    blocks = rng.integers(0, 256, size=(n, type_size), dtype=np.uint8)
    edge = np.arange(n) % 16
    if qtype == T.Q8_K:
        d = random_scales(rng, n).astype(np.float32)
        d = np.where(edge < 8, F32_EDGES[np.minimum(edge, 7)], d).astype(np.float32)
        blocks[:, 0:4] = d.view(np.uint8).reshape(n, 4)
        # bsums as ggml's quantize_row_q8_K writes them (unused by dequantization)
        qs = blocks[:, 4:260].view(np.int8).astype(np.int16).reshape(n, 16, 16).sum(axis=-1)
        blocks[:, 260:292] = qs.astype("<i2").view(np.uint8).reshape(n, 32)
        return blocks
    if qtype == T.MXFP4:
        e = rng.integers(96, 160, size=n, dtype=np.uint8)
        blocks[:, 0] = np.where(edge < 8, MXFP4_EDGES[np.minimum(edge, 7)], e)
        return blocks
    for offset in F16_FIELDS[qtype].values():
        h = random_scales(rng, n).astype(np.float16).view(np.uint16)
        # a different edge per field, so that (d, dmin) pairs vary
        h = np.where(edge < 8, F16_EDGES[(edge + offset) % 8], h).astype("<u2")
        blocks[:, offset:offset + 2] = h.view(np.uint8).reshape(n, 2)
    return blocks


def dequantize(blocks, qtype):
    if qtype == T.Q8_K:
        d = blocks[:, 0:4].copy().view("<f4")  # (n, 1)
        q = blocks[:, 4:260].view(np.int8).astype(np.float32)
        return (d * q).astype("<f4")
    out = gguf.quants.dequantize(blocks, qtype)
    assert out.dtype == np.float32
    return out.astype("<f4")


def write_fixtures(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    manifest = {"meta": versions(), "seed": SEED, "types": {}}
    seed_blocks = {}
    for qtype in NUM_BLOCKS:
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        blocks = make_blocks(qtype)
        values = dequantize(blocks, qtype)
        assert values.shape == (len(blocks), block_size), values.shape
        assert np.all(np.isfinite(values)), qtype.name
        name = qtype.name
        with open(os.path.join(out_dir, name + ".blocks"), "wb") as f:
            f.write(blocks.tobytes())
        with open(os.path.join(out_dir, name + ".f32"), "wb") as f:
            f.write(values.tobytes())
        manifest["types"][name] = {
            "ggml_type": int(qtype),
            "block_size": block_size,
            "block_bytes": type_size,
            "num_blocks": len(blocks),
            "blocks_sha256": sha256_file(os.path.join(out_dir, name + ".blocks")),
            "f32_sha256": sha256_file(os.path.join(out_dir, name + ".f32")),
        }
        seed_blocks[qtype] = blocks[:2]
    dump_json(manifest, os.path.join(out_dir, "manifest.json"))
    return seed_blocks


def write_fuzz_seed(seed_blocks, path, alignment=None):
    writer = gguf.GGUFWriter(path, "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_uint32("llama.block_count", 1)
    writer.add_uint32("llama.embedding_length", 256)
    for qtype, blocks in seed_blocks.items():
        _, type_size = GGML_QUANT_SIZES[qtype]
        # Two rows of one block each: [2, block size] outermost first.
        writer.add_tensor(f"t.{qtype.name.lower()}", blocks.reshape(2, type_size), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gemma3_checksums(path, out_dir):
    reader = gguf.GGUFReader(path)
    tensors = []
    for t in reader.tensors:
        qtype = T(t.tensor_type)
        values = dequantize(np.asarray(t.data), qtype) if qtype != T.F32 else np.asarray(t.data)
        values = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
        n = values.size
        shape = [int(x) for x in reversed(t.shape.tolist())]
        assert n == int(np.prod(shape)), (t.name, shape, n)
        tensors.append({
            "name": t.name,
            "type": qtype.name,
            "shape": shape,
            "sha256": hashlib.sha256(values.tobytes()).hexdigest(),
            "samples": [[0, values[0]], [n // 2, values[n // 2]], [n - 1, values[n - 1]]],
        })
        print(f"{t.name:40s} {qtype.name:5s} {shape}", file=sys.stderr)
    doc = {
        "meta": versions(),
        "file": os.path.basename(path),
        "file_sha256": sha256_file(path),
        "tensors": tensors,
    }
    os.makedirs(out_dir, exist_ok=True)
    dump_json(doc, os.path.join(out_dir, "dequant_sha256.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output directory")
    ap.add_argument("--gemma3", metavar="GGUF", help="write the gemma3 checksums instead")
    args = ap.parse_args()
    if args.gemma3:
        gemma3_checksums(args.gemma3, args.out or os.path.join(REPO, "tests", "testdata", "gemma3"))
        return
    out_dir = args.out or os.path.join(REPO, "tests", "testdata", "quant")
    seed_blocks = write_fixtures(out_dir)
    seed_dir = os.path.join(args.out, "fuzz") if args.out else os.path.join(REPO, "fuzz", "corpus", "gguf")
    os.makedirs(seed_dir, exist_ok=True)
    write_fuzz_seed(seed_blocks, os.path.join(seed_dir, "kquant_tensors.gguf"))
    write_fuzz_seed(seed_blocks, os.path.join(seed_dir, "kquant_tensors_align1.gguf"), alignment=1)


if __name__ == "__main__":
    main()
