#!/usr/bin/env python3
"""SAEs saved by sae-lens for the tiny GPT-2 fixture (tests/testdata/arch/gpt2) on
blocks.1.hook_resid_pre, and their feature activations as sae-lens computes them on
transformer-lens's HookedTransformer of the same checkpoint, for
tests/integration/architectures_test.cc (SaeLensGpt2Test).

Writes tests/testdata/probes/sae_gpt2/:
  <arch>/cfg.json, <arch>/sae_weights.safetensors   sae-lens's own save_model, for
      standard  StandardSAE, apply_b_dec_to_input true
      jumprelu  JumpReLUSAE with per-feature thresholds
      topk      TopKSAE, k 8
    each d_in 64 (the fixture's hidden size), d_sae 96, with metadata hook_name
    "blocks.1.hook_resid_pre" and model_name "tiny-gpt2" (sae-lens writes them into cfg.json),
    torch.manual_seed(200 + index) weights scaled to the hook's activations (pre-activations of
    standard deviation ~0.5) so that a fair share of features fire.
  reference.json
    input_ids                 the 24 ids of tests/testdata/arch/gpt2/reference.json
    hook_resid_pre, hook_resid_mid
                              transformer-lens's run_with_cache of blocks.L.<hook>, for
                              L = 1 ([positions][64]; resid_mid also for L = 0, keyed by L)
    saes.<arch>.features      sae.encode(blocks.1.hook_resid_pre) of every position, every
                              feature ([positions][96]), run by sae-lens in float64 on the
                              saved float32 weights and the float32 activations (sae-lens's
                              float32 encode rounds pre-activations by ~1e-6, the size of the
                              test's bar; written rounded to float32)
    saes.<arch>.active        the fraction of (position, feature) pairs that fire

The HookedTransformer is built from the checkpoint without TransformerLens's weight processing
(fold_ln, center_writing_weights, center_unembed all off: from_pretrained_no_processing's
meaning), so its residual stream is the checkpoint's own; the config says so
(model_from_pretrained_kwargs). The script first checks that the HookedTransformer's logits and
its blocks.1.hook_resid_pre equal transformers' logits and hidden_states[1] (<= 1e-4; the largest
difference is meta.hooked_transformer_vs_transformers_max_abs).

Needs torch, transformers, transformer-lens, sae-lens, numpy (versions in reference.json "meta").
Usage: python3 tools/reference/make_sae_gpt2_reference.py
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
import torch

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refutil import dump_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CKPT = os.path.join(ROOT, "tests/testdata/arch/gpt2")
OUT = os.path.join(ROOT, "tests/testdata/probes/sae_gpt2")
HOOK = "blocks.1.hook_resid_pre"
D_SAE, K = 96, 8


def hooked_transformer():
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(CKPT, attn_implementation="eager").eval()
    c = hf.config
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_heads=c.n_head, d_head=c.n_embd // c.n_head,
        d_mlp=c.n_inner, d_vocab=c.vocab_size, n_ctx=c.n_positions, act_fn="gelu_new",
        normalization_type="LN", eps=c.layer_norm_epsilon, positional_embedding_type="standard",
        original_architecture="GPT2LMHeadModel", default_prepend_bos=False, dtype=torch.float32)
    model = HookedTransformer(cfg)
    model.load_and_process_state_dict(convert_gpt2_weights(hf, cfg), fold_ln=False,
                                      center_writing_weights=False, center_unembed=False,
                                      fold_value_biases=False, refactor_factored_attn_matrices=False)
    return hf, model.eval()


def make_sae(arch, seed, scale):
    from sae_lens import (JumpReLUSAE, JumpReLUSAEConfig, StandardSAE, StandardSAEConfig, TopKSAE,
                          TopKSAEConfig)
    from sae_lens.saes.sae import SAEMetadata

    metadata = SAEMetadata(hook_name=HOOK, model_name="tiny-gpt2", hook_head_index=None,
                           model_from_pretrained_kwargs={"center_writing_weights": False,
                                                         "fold_ln": False})
    common = dict(d_in=64, d_sae=D_SAE, metadata=metadata)
    torch.manual_seed(seed)
    if arch == "standard":
        sae = StandardSAE(StandardSAEConfig(apply_b_dec_to_input=True, **common))
    elif arch == "jumprelu":
        sae = JumpReLUSAE(JumpReLUSAEConfig(**common))
    else:
        sae = TopKSAE(TopKSAEConfig(k=K, **common))
    with torch.no_grad():
        # Pre-activations of standard deviation ~0.5: two float32 forward passes (ours,
        # transformer-lens's) of a residual stream of rms `scale` differ by ~1e-6 of it, which
        # W_enc carries into the features; at std 1 one feature of 6912 missed the test's floor
        # (1e-5 of 0.1) by 0.3%.
        sae.W_enc.copy_(torch.randn(64, D_SAE) / (16.0 * scale))
        sae.W_dec.copy_(torch.randn(D_SAE, 64) / np.sqrt(D_SAE))
        sae.b_enc.copy_(torch.randn(D_SAE) * 0.3)
        sae.b_dec.copy_(torch.randn(64) * 0.2 * scale)
        if arch == "jumprelu":
            sae.threshold.copy_(torch.rand(D_SAE) * 0.8)
    return sae.eval()


def main():
    import sae_lens
    import transformers

    torch.set_num_threads(2)
    ids = json.load(open(os.path.join(CKPT, "reference.json")))["input_ids"]
    hf, model = hooked_transformer()
    tokens = torch.tensor([ids])
    with torch.no_grad():
        want = hf(tokens).logits[0]
        logits, cache = model.run_with_cache(tokens)
    gap = float((logits[0] - want).abs().max())
    assert gap <= 1e-4, f"HookedTransformer logits differ from transformers' by {gap}"
    resid = cache[HOOK][0]
    with torch.no_grad():
        hidden = hf(tokens, output_hidden_states=True).hidden_states[1][0]
    gap = max(gap, float((resid - hidden).abs().max()))
    assert gap <= 1e-4, f"{HOOK} differs from transformers' hidden_states[1] by {gap}"
    scale = float(resid.pow(2).mean().sqrt())
    reference = {
        "meta": {"script": "tools/reference/make_sae_gpt2_reference.py",
                 "torch": torch.__version__, "transformers": transformers.__version__,
                 "transformer_lens": importlib.metadata.version("transformer-lens"),
                 "sae_lens": sae_lens.__version__, "numpy": np.__version__,
                 "hooked_transformer_vs_transformers_max_abs": gap},
        "input_ids": ids,
        "hook_resid_pre": {"1": resid.numpy().tolist()},
        "hook_resid_mid": {str(l): cache[f"blocks.{l}.hook_resid_mid"][0].numpy().tolist()
                           for l in range(model.cfg.n_layers)},
        "saes": {},
    }
    for index, arch in enumerate(["standard", "jumprelu", "topk"]):
        sae = make_sae(arch, 200 + index, scale)
        path = os.path.join(OUT, arch)
        os.makedirs(path, exist_ok=True)
        sae.save_model(path)
        with torch.no_grad():  # float64: a float32 encode rounds by ~1e-6, the bar's size
            feats = sae.to(torch.float64).encode(resid.to(torch.float64)).numpy()
        active = float(np.mean(feats > 0))
        reference["saes"][arch] = {"features": feats.tolist(), "active": active}
        print(f"{arch}: {active:.2f} of (position, feature) pairs fire")
    dump_json(reference, os.path.join(OUT, "reference.json"))


if __name__ == "__main__":
    main()
