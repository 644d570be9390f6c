#!/usr/bin/env python3
"""Checks that `undercurrent steer-vector` files load in repeng and in llama.cpp, and that
llama.cpp and Undercurrent apply a control vector at the same block.

On SmolLM2-135M-Instruct (Q4_1 GGUF, $UC_SMOLLM2_GGUF):
  1. `undercurrent steer-vector` makes a mean-difference vector for block 10 ($LAYERS) from a
     few happy / sad prompts and writes it as a control-vector GGUF;
  2. repeng's ControlVector.import_gguf reads it: same blocks, same values;
  3. llama.cpp (llama-cpp-python, llama_apply_adapter_cvec with the buffer laid out as llama.cpp's
     own common_control_vector_load lays out direction.N, from block 1) generates greedily with
     the vector scaled by SCALE, and so does `undercurrent generate --control-vector-scaled`;
     the continuations must agree with each other, differ from the unsteered ones, and differ
     from llama.cpp with the vector shifted one block either way (an off-by-one would show).
Prints a small report; exits 1 on a mismatch. Not part of CI (needs repeng and
llama-cpp-python). Usage:
  python3 tools/reference/check_control_vector_interop.py build/ci/bin/undercurrent
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

BINARY = sys.argv[1] if len(sys.argv) > 1 else "build/ci/bin/undercurrent"
GGUF = os.environ.get("UC_SMOLLM2_GGUF", "build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
SCALE = float(os.environ.get("SCALE", "1.0"))
PROMPT = "Today I feel"
TOKENS = 10
POS = ["I feel so happy and joyful", "What a wonderful and delightful day",
       "I love everything and life is great", "This is the best news and I am glad"]
NEG = ["I feel so sad and miserable", "What a terrible and awful day",
       "I hate everything and life is bleak", "This is the worst news and I am upset"]
LAYERS = os.environ.get("LAYERS", "10")


def ours(args):
    out = subprocess.run([BINARY, "generate", "--model", GGUF, "--prompt", PROMPT, "--max-tokens",
                          str(TOKENS), "--temperature", "0", "--json"] + args,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["text"]


def llama_text(vectors, shift, n_embd, n_layer):
    import ctypes
    import llama_cpp
    llm = llama_cpp.Llama(model_path=GGUF, n_ctx=256, verbose=False, n_threads=2)
    if vectors:
        data = np.zeros(n_embd * (n_layer - 1), dtype=np.float32)
        for layer, v in vectors.items():
            il = layer + shift
            if 1 <= il < n_layer:
                data[(il - 1) * n_embd:il * n_embd] += SCALE * v
        rc = llama_cpp.llama_apply_adapter_cvec(
            llm.ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), data.size, n_embd, 1,
            n_layer - 1)
        assert rc == 0, rc
    out = llm.create_completion(PROMPT, max_tokens=TOKENS, temperature=0.0)
    return out["choices"][0]["text"]


def main():
    import gguf
    import repeng
    tmp = tempfile.mkdtemp()
    for name, lines in (("pos.jsonl", POS), ("neg.jsonl", NEG)):
        with open(os.path.join(tmp, name), "w") as f:
            for i, p in enumerate(lines):
                f.write(json.dumps({"id": i, "prompt": p}) + "\n")
    vec = os.path.join(tmp, "happy.gguf")
    subprocess.run([BINARY, "steer-vector", "--model", GGUF, "--positive",
                    os.path.join(tmp, "pos.jsonl"), "--negative", os.path.join(tmp, "neg.jsonl"),
                    "--layers", LAYERS, "--out", vec], check=True)
    reader = gguf.GGUFReader(vec)
    ours_vectors = {int(t.name.split(".")[1]): np.array(t.data, dtype=np.float32)
                    for t in reader.tensors}
    imported = repeng.ControlVector.import_gguf(vec)
    ok = sorted(imported.directions) == sorted(ours_vectors) and all(
        np.array_equal(np.asarray(imported.directions[k]), ours_vectors[k]) for k in ours_vectors)
    print(f"repeng import_gguf: blocks {sorted(imported.directions)}, values equal: {ok}")
    n_embd = len(next(iter(ours_vectors.values())))
    n_layer = 30
    plain_ours = ours([])
    steered_ours = ours(["--control-vector-scaled", vec, str(SCALE)])
    plain_llama = llama_text({}, 0, n_embd, n_layer)
    results = {shift: llama_text(ours_vectors, shift, n_embd, n_layer) for shift in (-1, 0, 1)}
    print(f"unsteered  ours: {plain_ours!r}\n           llama.cpp: {plain_llama!r}")
    print(f"steered    ours: {steered_ours!r}\n           llama.cpp: {results[0]!r}")
    print(f"block-1    llama.cpp: {results[-1]!r}\nblock+1    llama.cpp: {results[1]!r}")
    same = steered_ours == results[0]
    moved = steered_ours != plain_ours
    off = results[-1] != results[0] and results[1] != results[0]
    print(f"steered texts equal: {same}; steering changes the text: {moved}; "
          f"off-by-one differs: {off}")
    sys.exit(0 if ok and same and moved and off else 1)


if __name__ == "__main__":
    main()
