#!/usr/bin/env python3
"""Contrastive steering vectors computed by numpy from transformers' activations, for
tests/integration/steering/steer_vector_test.cc (`undercurrent steer-vector`).

Writes tests/testdata/steering/:
  positive.jsonl, negative.jsonl   paired examples (prompt_ids: BOS + the model's SentencePiece
                                   tokens, so both sides see the same ids)
  steer_vectors.json               per block: mean_diff = mean(pos) - mean(neg), and pca_diff as
                                   repeng computes it (first principal component of the centered
                                   paired differences, by SVD, signed so that positives project
                                   above their negatives in most pairs)
The activations are each example's residual stream after each decoder block at its last token
(a forward hook on model.model.layers[N]; not output_hidden_states, whose last entry is after
the final norm), from the bundled stories260K run by transformers in float32.

Needs torch, transformers, sentencepiece, numpy. Usage: python3 tools/reference/make_steer_vector_reference.py
"""
import json
import os

import numpy as np
import torch
import sentencepiece
from transformers import AutoModelForCausalLM

from refutil import dump_json, versions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models/stories260K")
OUT = os.path.join(ROOT, "tests/testdata/steering")

PAIRS = [
    ("Lily was very happy and she smiled", "Lily was very sad and she cried"),
    ("Tom laughed with his best friend", "Tom cried alone in his room"),
    ("The sun was warm and the day was fun", "The rain was cold and the day was bad"),
    ("She loved the pretty red ball", "She hated the ugly broken ball"),
    ("They played and sang all day", "They were scared and hid all day"),
    ("The dog was kind and happy", "The dog was mean and angry"),
]


def last_token_streams(model, ids):
    streams = {}
    handles = []
    for layer, block in enumerate(model.model.layers):
        def hook(_m, _i, out, layer=layer):
            t = out[0] if isinstance(out, tuple) else out
            streams[layer] = t[0, -1].detach().numpy().astype(np.float64)
        handles.append(block.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in handles:
        h.remove()
    return streams


def main():
    tok = sentencepiece.SentencePieceProcessor(model_file=os.path.join(MODEL, "tokenizer.model"))
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    model.eval()
    pos_ids = [[1] + tok.encode(p) for p, _ in PAIRS]  # BOS, as the model's tokenizer adds it
    neg_ids = [[1] + tok.encode(n) for _, n in PAIRS]
    for name, all_ids in (("positive.jsonl", pos_ids), ("negative.jsonl", neg_ids)):
        with open(os.path.join(OUT, name), "w") as f:
            for i, ids in enumerate(all_ids):
                f.write(json.dumps({"id": i, "prompt_ids": ids}) + "\n")
    pos = [last_token_streams(model, ids) for ids in pos_ids]
    neg = [last_token_streams(model, ids) for ids in neg_ids]
    layers = []
    for layer in range(model.config.num_hidden_layers):
        p = np.stack([s[layer] for s in pos])
        n = np.stack([s[layer] for s in neg])
        mean_diff = p.mean(0) - n.mean(0)
        x = p - n
        x = x - x.mean(0)
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        v = vt[0]
        larger = np.sum(p @ v > n @ v)
        smaller = np.sum(p @ v < n @ v)
        if smaller > larger:
            v = -v
        layers.append({"layer": layer, "mean_diff": [float(e) for e in mean_diff],
                       "pca_diff": [float(e) for e in v]})
        print(f"layer {layer}: |mean_diff| {np.linalg.norm(mean_diff):.4f}")
    dump_json({"meta": {"script": "tools/reference/make_steer_vector_reference.py",
                        "model": "models/stories260K", "versions": versions()},
               "layers": layers}, os.path.join(OUT, "steer_vectors.json"))


if __name__ == "__main__":
    main()
