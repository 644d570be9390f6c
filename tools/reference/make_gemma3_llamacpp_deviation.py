#!/usr/bin/env python3
"""llama.cpp's own deviation from transformers on Gemma 3 270M Q4_K_M (the peer's bar for our
int8 path).

Runs the four prompts of tests/testdata/gemma3/reference.json through llama.cpp (the PyPI
package llama-cpp-python, which builds it from source for this CPU, with its default settings:
F16 KV cache, its own quantized-activation matmuls) on the same GGUF, and records, per prompt,
the largest and the mean |logit(llama.cpp) - logit(transformers)| over the same entries the C++
test compares (the 32 top logits and the 64 sample logits at every recorded position), and
whether llama.cpp's argmax agrees with transformers' at each position.

Output: tests/testdata/gemma3/llamacpp_deviation.json, read by tests/integration/models/gemma3_test.cc
(Gemma3Test.Int8PathDeviatesNoMoreThanLlamaCpp). llama.cpp's deviation depends on the CPU paths
it was built with (AVX2, AVX-512 VNNI, AMX ...): `meta.system_info` records them.

Usage: python3 tools/reference/make_gemma3_llamacpp_deviation.py build/models/gemma3/gemma-3-270m-q4_k_m.gguf
Requires: llama-cpp-python, numpy.
"""
import hashlib
import json
import os
import platform
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join(ROOT, "tests/testdata/gemma3/reference.json")
OUT = os.path.join(ROOT, "tests/testdata/gemma3/llamacpp_deviation.json")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    gguf_path = sys.argv[1]
    import llama_cpp

    with open(REFERENCE) as f:
        reference = json.load(f)
    digest = sha256(gguf_path)
    if digest != reference["meta"]["model_sha256"]:
        sys.exit(f"{gguf_path}: sha256 {digest} is not the reference's model")
    sample_ids = reference["sample_ids"]
    longest = max(len(c["input_ids"]) for c in reference["cases"])
    llm = llama_cpp.Llama(model_path=gguf_path, n_ctx=longest + 8, n_batch=longest + 8,
                          n_ubatch=longest + 8, logits_all=True, n_threads=2, seed=0,
                          verbose=False)
    cases = []
    for c in reference["cases"]:
        ids = c["input_ids"]
        llm.reset()
        llm.eval(ids)
        scores = np.asarray(llm.scores[: len(ids)], dtype=np.float64)
        worst, total, count, argmax_agree = 0.0, 0.0, 0, 0
        for p in c["positions"]:
            row = scores[p["position"]]
            for ids_k, ref_k in ((p["top_ids"], p["top_logits"]), (sample_ids, p["sample_logits"])):
                diff = np.abs(row[np.asarray(ids_k)] - np.asarray(ref_k, dtype=np.float64))
                worst = max(worst, float(diff.max()))
                total += float(diff.sum())
                count += diff.size
            argmax_agree += int(int(np.argmax(row)) == p["top_ids"][0])
        cases.append({
            "name": c["name"],
            "positions": len(c["positions"]),
            "max_abs": worst,
            "mean_abs": total / count,
            "argmax_agreement": argmax_agree,
        })
        print(f"{c['name']}: llama.cpp max |dlogit| {worst:.4g}, mean {total / count:.4g}, "
              f"argmax agrees at {argmax_agree}/{len(c['positions'])}")
    out = {
        "meta": {
            "script": "tools/reference/make_gemma3_llamacpp_deviation.py",
            "model_sha256": digest,
            "llama_cpp_python": llama_cpp.__version__,
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "machine": platform.machine(),
            "settings": "defaults (F16 KV cache), n_threads 2, one eval per prompt",
            "compared": "the reference's top_ids and sample_ids at every recorded position",
        },
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.relpath(OUT, ROOT))


if __name__ == "__main__":
    main()
