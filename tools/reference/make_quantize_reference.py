#!/usr/bin/env python3
"""llama.cpp's per-tensor types and bytes for `undercurrent quantize` on SmolLM2-135M-Instruct and
stories260K.

Steps, per model:
  1. `UNDERCURRENT quantize IN model-f32.gguf --type f32` (a temporary directory): for SmolLM2
     our dequantization of the shipped Q4_1 file (itself checked against gguf-py elsewhere);
     for stories260K our conversion of tests/testdata/stories260K-hf.
  2. llama.cpp quantizes that f32 file with llama_cpp.llama_model_quantize to q4_k_m, q5_k_m,
     q6_k and q8_0 (SmolLM2), and also to q4_0, q4_1, q5_0, q5_1, f16 and bf16 (stories260K)
     (llama_model_quantize_default_params(), ftype set; no imatrix, no overrides).
  3. Every file is read with gguf.GGUFReader: per tensor, in file order, its name, ggml type
     name and the sha256 of its data bytes.

Writes tests/testdata/quantize/smollm2_llamacpp.json and
tests/testdata/quantize/stories260K_llamacpp.json (under --out DIR; every row of stories260K
is a fallback case: 64 and 172 columns), each:
  {"meta": versions, "source": {"file" or "dir", "sha256"}, "ftypes": {type: llama_ftype},
   "types": {"f32": [...our f32 file...], "q4_k_m": [...llama.cpp...], ...}}
where each list holds {"name", "type", "sha256"}.

Run with (also in "meta"): python 3.11.7, gguf 0.19.0, llama-cpp-python 0.3.36.

Usage: python3 tools/reference/make_quantize_reference.py build/ci/bin/undercurrent \\
           build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf     # ~30 s
The model path may also come from $UC_SMOLLM2_GGUF. Deterministic: the same inputs give the same
JSON.
"""

import argparse
import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refutil import dump_json, sha256_file, versions  # noqa: E402

import gguf  # noqa: E402
import llama_cpp  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# --type name -> llama_ftype; SmolLM2 gets the first four, stories260K (tiny) all of them.
TYPES = {"q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8,
         "q5_1": 9, "f16": 1, "bf16": 32}
SMOLLM2_TYPES = ["q4_k_m", "q5_k_m", "q6_k", "q8_0"]


def digests(path):
    reader = gguf.GGUFReader(path)
    out = []
    for t in reader.tensors:
        data = bytes(reader.data[t.data_offset:t.data_offset + t.n_bytes])
        out.append({"name": t.name, "type": t.tensor_type.name,
                    "sha256": hashlib.sha256(data).hexdigest()})
    return out


def reference(undercurrent, model, out_path, types):
    result = {"meta": versions(), "source": {}, "ftypes": {"f32": 0}, "types": {}}
    result["meta"]["llama_cpp_python"] = llama_cpp.__version__
    if os.path.isdir(model):
        files = sorted(os.listdir(model))
        h = hashlib.sha256()
        for f in files:
            with open(os.path.join(model, f), "rb") as fh:
                h.update(f.encode() + b"\0" + hashlib.sha256(fh.read()).digest())
        result["source"] = {"dir": os.path.relpath(model, REPO), "files": files,
                            "sha256": h.hexdigest()}
    else:
        result["source"] = {"file": os.path.basename(model), "sha256": sha256_file(model)}
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "model-f32.gguf")
        subprocess.run([undercurrent, "quantize", model, f32, "--type", "f32"], check=True)
        result["types"]["f32"] = digests(f32)
        for name in types:
            ftype = TYPES[name]
            out = os.path.join(tmp, f"model-{name}.gguf")
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = ftype
            rc = llama_cpp.llama_model_quantize(f32.encode(), out.encode(), ctypes.byref(params))
            if rc != 0:
                sys.exit(f"llama_model_quantize({name}) returned {rc}")
            result["ftypes"][name] = ftype
            result["types"][name] = digests(out)
            os.remove(out)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    dump_json(result, out_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("undercurrent", help="the undercurrent binary")
    ap.add_argument("model", nargs="?", default=os.environ.get("UC_SMOLLM2_GGUF"),
                    help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "testdata", "quantize"),
                    help="output directory")
    args = ap.parse_args()
    if not args.model:
        sys.exit("give the SmolLM2 GGUF path or set UC_SMOLLM2_GGUF")
    reference(args.undercurrent, os.path.join(REPO, "tests", "testdata", "stories260K-hf"),
              os.path.join(args.out, "stories260K_llamacpp.json"), list(TYPES))
    reference(args.undercurrent, args.model, os.path.join(args.out, "smollm2_llamacpp.json"),
              SMOLLM2_TYPES)


if __name__ == "__main__":
    main()
