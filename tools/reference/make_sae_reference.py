#!/usr/bin/env python3
"""Tiny sparse autoencoders in SAELens's format and their encodings by sae-lens, for
src/probe/probes/trained/sae_test.cc.

Writes tests/testdata/probes/sae/<name>/{cfg.json, sae_weights.safetensors} (saved by sae-lens's
own save_model) for five SAEs over hidden size 64 with 256 features, seeded (torch.manual_seed
per SAE), with weights, biases and thresholds drawn so that a fair share of features fire:
  standard        ReLU, b_dec subtracted from the input (apply_b_dec_to_input)
  standard_nobdec ReLU, apply_b_dec_to_input false
  jumprelu        JumpReLU with per-feature thresholds
  topk            TopK, k 12
  topk_rescaled   TopK, k 12, rescale_acts_by_decoder_norm (pre-activations times |W_dec row|)
and tests/testdata/probes/sae/reference.json: the named features' activations, as sae-lens's
encode() gives them in float32, for every token of the recorded streams of
tests/testdata/probes/aggregate/streams.json (make_aggregate_reference.py).

Needs torch, numpy, sae-lens. Usage: python3 tools/reference/make_sae_reference.py
"""
import json
import os

import numpy as np
import torch
from sae_lens import (JumpReLUSAE, JumpReLUSAEConfig, StandardSAE, StandardSAEConfig, TopKSAE,
                      TopKSAEConfig)
import sae_lens

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/testdata/probes/sae")
STREAMS = os.path.join(ROOT, "tests/testdata/probes/aggregate/streams.json")
D_IN, D_SAE, K = 64, 256, 12
FEATURES = [0, 3, 17, 64, 99, 128, 200, 255]


def make(name, seed):
    torch.manual_seed(seed)
    if name.startswith("standard"):
        sae = StandardSAE(StandardSAEConfig(d_in=D_IN, d_sae=D_SAE,
                                            apply_b_dec_to_input=name == "standard"))
    elif name == "jumprelu":
        sae = JumpReLUSAE(JumpReLUSAEConfig(d_in=D_IN, d_sae=D_SAE))
    else:
        sae = TopKSAE(TopKSAEConfig(d_in=D_IN, d_sae=D_SAE, k=K,
                                    rescale_acts_by_decoder_norm=name == "topk_rescaled"))
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(D_IN, D_SAE) / np.sqrt(D_IN))
        sae.W_dec.copy_(torch.randn(D_SAE, D_IN) * (0.5 + torch.rand(D_SAE, 1)) / np.sqrt(D_SAE))
        sae.b_enc.copy_(torch.randn(D_SAE) * 0.3)
        sae.b_dec.copy_(torch.randn(D_IN) * 0.2)
        if name == "jumprelu":
            sae.threshold.copy_(torch.rand(D_SAE) * 0.8)
    return sae


def main():
    with open(STREAMS) as f:
        streams = [np.asarray(s, dtype=np.float32) for s in json.load(f)["streams"]]
    reference = {"meta": {"script": "tools/reference/make_sae_reference.py",
                          "sae_lens": sae_lens.__version__, "torch": torch.__version__},
                 "features": FEATURES, "saes": {}}
    for seed, name in enumerate(["standard", "standard_nobdec", "jumprelu", "topk",
                                 "topk_rescaled"]):
        sae = make(name, 100 + seed)
        sae.eval()
        path = os.path.join(OUT, name)
        os.makedirs(path, exist_ok=True)
        sae.save_model(path)
        encoded = []
        with torch.no_grad():
            for s in streams:
                acts = sae.encode(torch.from_numpy(s)).numpy()
                encoded.append(acts[:, FEATURES].astype(float).tolist())
        active = float(np.mean([np.mean(np.asarray(e) > 0) for e in encoded]))
        reference["saes"][name] = {"encoded": encoded}
        print(f"{name}: {active:.2f} of the named features active per token")
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
