#!/usr/bin/env python3
"""Control vectors and what transformers does with them, for
tests/integration/steering/steering_test.cc.

Writes tests/testdata/steering/:
  vectors_a.gguf         llama.cpp's control-vector GGUF (general.architecture = controlvector,
                         F32 tensors direction.N), directions for decoder blocks 1 and 3
  vectors_b.safetensors  the same tensor names, blocks 2 and 3
  vectors_c.npy          a float32 [num_layers, hidden] array, rows 0 and 4 non-zero
  bad_hidden.gguf        a controlvector GGUF whose direction.2 has 48 values (the model has 64)
  reference.json         per case: the vectors applied (file, scale), the layer range, the
                         logits at every position of a fixed prompt, and a 16-token greedy
                         continuation (EOS not a stop)
From the bundled stories260K (models/stories260K, Hugging Face layout), run by transformers in
float32. A direction.N vector is added to the output of decoder block N (the residual stream
after layer N), as llama.cpp applies its control vectors: a forward hook on
model.model.layers[N] adds scale * vector to every token's output. Vectors of several files
add up; a layer range [start, end] (inclusive, llama.cpp's --control-vector-layer-range) keeps
only the blocks inside it.

Seeded (numpy default_rng(11)); deterministic. Needs torch, transformers, safetensors, gguf,
numpy. Usage: python3 tools/reference/make_steering_reference.py
"""
import os

import numpy as np
import torch
from gguf import GGUFWriter
from safetensors.numpy import save_file
from transformers import AutoModelForCausalLM

from refutil import dump_json, versions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models/stories260K")
OUT = os.path.join(ROOT, "tests/testdata/steering")
PROMPT = [1, 403, 407, 261, 378, 269, 325, 474, 286, 263, 291, 340, 305, 424, 261, 284, 410, 261]
GREEDY = 16


def write_gguf(path, directions):
    w = GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", "llama")
    w.add_uint32("controlvector.layer_count", len(directions))
    for layer, vec in sorted(directions.items()):
        w.add_tensor(f"direction.{layer}", vec.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run(model, steer):
    """Logits at every position of PROMPT and a greedy continuation, with `steer`
    ({layer: vector}) added to the outputs of those decoder blocks."""
    handles = []
    for layer, vec in steer.items():
        v = torch.from_numpy(vec.astype(np.float32))

        def hook(_module, _inputs, output, v=v):
            if isinstance(output, tuple):
                return (output[0] + v,) + tuple(output[1:])
            return output + v

        handles.append(model.model.layers[layer].register_forward_hook(hook))
    try:
        with torch.no_grad():
            ids = torch.tensor([PROMPT])
            logits = model(ids).logits[0].numpy()
            out = model.generate(ids, max_new_tokens=GREEDY, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)
            new_ids = out[0, len(PROMPT):].tolist()
    finally:
        for h in handles:
            h.remove()
    return logits, new_ids


def combine(parts, layer_range, num_layers):
    steer = {}
    for directions, scale in parts:
        for layer, vec in directions.items():
            steer[layer] = steer.get(layer, 0) + scale * vec
    lo, hi = layer_range if layer_range else (0, num_layers - 1)
    return {l: v for l, v in steer.items() if lo <= l <= hi}


def main():
    os.makedirs(OUT, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    model.eval()
    hidden = model.config.hidden_size
    layers = model.config.num_hidden_layers
    rng = np.random.default_rng(11)

    def direction():
        v = rng.standard_normal(hidden).astype(np.float32)
        return (v / np.linalg.norm(v) * 1.5).astype(np.float32)

    a = {1: direction(), 3: direction()}
    b = {2: direction(), 3: direction()}
    c_rows = np.zeros((layers, hidden), dtype=np.float32)
    c_rows[0] = direction()
    c_rows[4] = direction()
    c = {0: c_rows[0], 4: c_rows[4]}
    write_gguf(os.path.join(OUT, "vectors_a.gguf"), a)
    save_file({f"direction.{l}": v for l, v in b.items()},
              os.path.join(OUT, "vectors_b.safetensors"))
    np.save(os.path.join(OUT, "vectors_c.npy"), c_rows)
    write_gguf(os.path.join(OUT, "bad_hidden.gguf"), {2: direction()[:48]})

    files = {"vectors_a.gguf": a, "vectors_b.safetensors": b, "vectors_c.npy": c}
    cases = [
        ("none", [], None),
        ("a", [("vectors_a.gguf", 1.0)], None),
        ("a_b_scaled", [("vectors_a.gguf", 0.8), ("vectors_b.safetensors", -1.5)], None),
        ("c_range", [("vectors_c.npy", 1.0), ("vectors_a.gguf", 0.5)], (1, 4)),
    ]
    out_cases = []
    for name, parts, layer_range in cases:
        steer = combine([(files[f], s) for f, s in parts], layer_range, layers)
        logits, new_ids = run(model, steer)
        out_cases.append({
            "name": name,
            "vectors": [{"file": f, "scale": s} for f, s in parts],
            "layer_range": list(layer_range) if layer_range else None,
            "steered_layers": sorted(steer),
            "logits": [[float(x) for x in row] for row in logits],
            "argmax": [int(i) for i in logits.argmax(-1)],
            "greedy": new_ids,
        })
        print(f"{name}: layers {sorted(steer)}, greedy {new_ids}")
    dump_json({"meta": {"script": "tools/reference/make_steering_reference.py",
                         "model": "models/stories260K", "versions": versions(),
                         "hook": "model.model.layers[N] forward output + scale * vector"},
               "input_ids": PROMPT, "cases": out_cases}, os.path.join(OUT, "reference.json"))


if __name__ == "__main__":
    main()
