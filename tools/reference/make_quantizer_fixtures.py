#!/usr/bin/env python3
"""Oracle data for the weight quantizers (tensor/quants.h): ggml's own output bytes for the types
`undercurrent quantize` writes, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K.

Writes tests/testdata/quant/quantize/ (or --out DIR):
  input.f32        NUM_ROWS rows of ROW_LEN float32 little-endian values (row-major). Row r has
                   the distribution KINDS[r % len(KINDS)], drawn from numpy default_rng(SEED + r):
                   gaussian (sigma 0.02, like trained weights), gaussian with 1% outliers x 50,
                   all zero, constant 0.37, tiny (1e-7 scale, below most f16 scales), mixed
                   signs of different magnitudes per 16 values, uniform [0, 1) (no negative),
                   a wide log-uniform range 1e-6 .. 1e3, and gaussian with single 32-value
                   groups set to zero or to -0.0.
  <TYPE>.bin       ggml_quantize_chunk(TYPE, input, ..., nrows=NUM_ROWS, n_per_row=ROW_LEN,
                   imatrix=NULL): NUM_ROWS rows of ggml blocks, back to back.
  manifest.json    row count and length, the kind of each row, per type its ggml id, row bytes
                   and sha256; the sha256 of input.f32; "meta": package versions and the path of
                   the ggml library used (relative to the site-packages dir).

ggml_quantize_chunk without an importance matrix runs ggml's quantize_row_<type>_ref for every
type above, so these bytes are the reference algorithm's.

Run with (also in "meta"): python 3.11.7, numpy 2.4.6, llama-cpp-python 0.3.36 (its bundled
libggml-base.so).

Usage: python3 tools/reference/make_quantizer_fixtures.py [--out DIR]
Deterministic: re-running rewrites byte-identical files (~1 s).
"""

import argparse
import ctypes
import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refutil import dump_json, sha256_file, versions  # noqa: E402

import llama_cpp  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SEED = 20261201
ROW_LEN = 512
KINDS = ["gaussian", "outliers", "zero", "constant", "tiny", "mixed", "uniform_pos", "wide",
         "zero_groups"]
NUM_ROWS = 4 * len(KINDS)

# ggml type name -> ggml_type id (ggml.h)
TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13,
         "Q6_K": 14}
# ggml type id -> (block size, block bytes)
BLOCKS = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 12: (256, 144),
          13: (256, 176), 14: (256, 210)}


def make_row(kind, rng):
    n = ROW_LEN
    if kind == "gaussian":
        return rng.normal(0.0, 0.02, n)
    if kind == "outliers":
        x = rng.normal(0.0, 0.02, n)
        idx = rng.choice(n, n // 100, replace=False)
        x[idx] *= 50.0
        return x
    if kind == "zero":
        return np.zeros(n)
    if kind == "constant":
        return np.full(n, 0.37)
    if kind == "tiny":
        return rng.normal(0.0, 1e-7, n)
    if kind == "mixed":
        scales = 10.0 ** rng.uniform(-4, 1, n // 16)
        return rng.normal(0.0, 1.0, n) * np.repeat(scales, 16)
    if kind == "uniform_pos":
        return rng.uniform(0.0, 1.0, n)
    if kind == "wide":
        return rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-6, 3, n)
    if kind == "zero_groups":
        x = rng.normal(0.0, 0.05, n)
        for g in rng.choice(n // 32, 4, replace=False):
            x[32 * g:32 * g + 32] = 0.0
        x[32 * 5:32 * 6] = -0.0
        return x
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "testdata", "quant", "quantize"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    lib = ctypes.CDLL(os.path.join(lib_dir, "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]

    rows = [make_row(KINDS[r % len(KINDS)], np.random.default_rng(SEED + r)).astype("<f4")
            for r in range(NUM_ROWS)]
    x = np.ascontiguousarray(np.stack(rows))
    input_path = os.path.join(args.out, "input.f32")
    x.tofile(input_path)

    types = {}
    for name, tid in TYPES.items():
        block, nbytes = BLOCKS[tid]
        row_bytes = ROW_LEN // block * nbytes
        dst = np.zeros(NUM_ROWS * row_bytes, dtype=np.uint8)
        lib.ggml_quantize_init(tid)
        written = lib.ggml_quantize_chunk(tid, x.ctypes.data, dst.ctypes.data, 0, NUM_ROWS,
                                          ROW_LEN, None)
        assert written == dst.size, (name, written, dst.size)
        path = os.path.join(args.out, f"{name}.bin")
        dst.tofile(path)
        types[name] = {"ggml_type": tid, "row_bytes": row_bytes,
                       "sha256": hashlib.sha256(dst.tobytes()).hexdigest()}

    meta = versions()
    meta["llama_cpp_python"] = llama_cpp.__version__
    meta["ggml_library"] = "llama_cpp/lib/libggml-base.so"
    dump_json({
        "meta": meta,
        "num_rows": NUM_ROWS,
        "row_len": ROW_LEN,
        "row_kinds": [KINDS[r % len(KINDS)] for r in range(NUM_ROWS)],
        "input_sha256": sha256_file(input_path),
        "types": types,
    }, os.path.join(args.out, "manifest.json"))


if __name__ == "__main__":
    main()
