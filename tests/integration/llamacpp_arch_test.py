#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) loads the GPT-2, GPT-NeoX, OLMo-2 and mixture-of-experts GGUF
fixtures and agrees with transformers' greedy continuation.

tests/testdata/arch/<case>/model.gguf is written by tools/reference/make_interp_arch_fixtures.py
and make_moe_fixtures.py under llama.cpp's tensor names and metadata (general.architecture gpt2 /
gptneox / olmo2 / qwen3moe / qwen2moe / olmoe / gpt-oss, Mixtral as llama with stacked
experts): if the names or the metadata were a private dialect, llama.cpp would refuse the file or
compute another model. For each case: the reference's input ids are evaluated, 16 tokens decoded
greedily by argmax and compared with reference.json's greedy ids; llama.cpp's largest |logit - transformers|
over the prompt is printed (its own kernels: F16 KV cache, tanh GELU for NeoX, MXFP4 experts
against int8-quantized activations for gpt-oss).

Usage: llamacpp_arch_test.py TESTDATA_ARCH_DIR. Exits 77 (skipped) when llama_cpp cannot be
imported: scripts/install-deps.sh does not install llama-cpp-python (built from source).
"""
import json
import os
import sys

try:
    import llama_cpp
    import numpy as np
except ImportError as e:
    print(f"skipped: llama_cpp is not importable ({e}); pip install llama-cpp-python to run")
    sys.exit(77)

CASES = ["gpt2", "gptneox_parallel", "gptneox_sequential", "olmo2", "qwen3moe", "qwen2moe", "olmoe",
         "mixtral", "gptoss_mxfp4"]


def yarn_args(llm):
    """llama-cpp-python passes its own YaRN betas (32 and 1) over the file's: hand it the file's."""
    arch = llm.metadata.get("general.architecture")
    args = {}
    for key in ("beta_fast", "beta_slow"):
        value = llm.metadata.get(f"{arch}.rope.scaling.yarn_{key}")
        if value is not None:
            args[f"yarn_{key}"] = float(value)
    return args


def main():
    root = sys.argv[1]
    failures = 0
    for case in CASES:
        with open(os.path.join(root, case, "reference.json"), encoding="utf-8") as f:
            ref = json.load(f)
        ids = ref["input_ids"]
        expected = ref["greedy"]["new_ids"]
        path = os.path.join(root, case, "model.gguf")
        llm = llama_cpp.Llama(path, n_ctx=64, n_threads=2, logits_all=True, verbose=False)
        if yarn_args(llm):
            llm = llama_cpp.Llama(path, n_ctx=64, n_threads=2, logits_all=True, verbose=False,
                                  **yarn_args(llm))
        arch = llm.metadata.get("general.architecture")
        llm.eval(ids)
        prompt = np.array(llm.scores[: len(ids)])
        worst = float(np.abs(prompt - np.array(ref["logits"], dtype=np.float32)).max())
        got = []
        for _ in range(len(expected)):
            got.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([got[-1]])
        ok = got == expected
        failures += 0 if ok else 1
        print(f"{case} ({arch}): greedy {'equal' if ok else 'DIFFERENT'}; llama.cpp max "
              f"|dlogit| over the prompt {worst:.4g}" + ("" if ok else f"\n  got {got}\n  want {expected}"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
