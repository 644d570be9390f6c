"""The same measurement as python_probe_overhead.py, on Undercurrent 0.1 itself (its default
Hugging Face transformers backend): the same 16 prompts, 64 new tokens each (min_new_tokens
forces all 64, as ignore_eos does here), the same `@probe` inline and trajectory `Probe` async on
generated[*] at layers 10 and 20, against no probes. Run it in an environment where
`undercurrent` is 0.1.0 from PyPI (with torch and transformers), never this package's venv:

    python -m venv --system-site-packages uc01-venv && uc01-venv/bin/pip install --no-deps \
        undercurrent==0.1.0
    uc01-venv/bin/python bench/undercurrent01_overhead.py HF_MODEL_DIR [THREADS=2 [REPEATS=3]]

0.1 runs the prompts of a list one at a time on this backend (its max_concurrency is 1), so
its tokens/s is that of 16 sequential generations. Prints each configuration's median
tokens/s (wall) and tokens per CPU-second, with ratios to the unprobed median, in the format
of python_probe_overhead.py; run that one right after it on the same machine to compare.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402 (0.1 needs it; it sets the thread count below)
import undercurrent  # noqa: E402

# The probes (registered by @probe at import), prompts and spec of the engine's benchmark.
from python_probe_overhead import PROMPTS, TOKENS, BenchNorm, spec  # noqa: E402

if not undercurrent.__version__.startswith("0.1"):
    sys.exit(f"this measures Undercurrent 0.1; the undercurrent imported here is {undercurrent.__version__}")


def main(model_path: str, threads: int, repeats: int) -> None:
    torch.set_num_threads(threads)
    opts = {"torch_dtype": torch.float32}
    configs = {
        "no probe": undercurrent.ProbedModel.from_pretrained(model_path, **opts),
        "async Probe": undercurrent.ProbedModel.from_pretrained(
            model_path, spec=spec("async"), probes={"bench_norm_async": BenchNorm}, **opts),
        "inline @probe": undercurrent.ProbedModel.from_pretrained(model_path, spec=spec("inline"), **opts),
    }
    gen = {"max_new_tokens": TOKENS, "min_new_tokens": TOKENS, "temperature": 0}
    rates: dict[str, list[float]] = {name: [] for name in configs}
    cpu_rates: dict[str, list[float]] = {name: [] for name in configs}
    for model in configs.values():  # warm-up
        model.generate(PROMPTS[:2], max_new_tokens=8, temperature=0)
    names = list(configs)
    for rep in range(repeats):
        for name in names[rep % 3:] + names[: rep % 3]:  # each configuration goes first in turn
            model = configs[name]
            start, cpu_start = time.perf_counter(), time.process_time()
            outs = model.generate(PROMPTS, **gen)
            took, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            for o in outs:
                if o.aborted:
                    sys.exit(f"{name}: a probe aborted {o.request_id} ({o.abort_reason})")
            tokens = TOKENS * len(outs)  # min_new_tokens = max_new_tokens: every prompt gets TOKENS
            rates[name].append(tokens / took)
            cpu_rates[name].append(tokens / cpu)
            print(f"round {rep + 1} {name:14s} {tokens / took:8.1f} tokens/s  {tokens / cpu:8.1f} tokens per "
                  "CPU-second", flush=True)  # progress: a loaded machine may not finish every round
    base = statistics.median(rates["no probe"])
    cpu_base = statistics.median(cpu_rates["no probe"])
    print(f"undercurrent {undercurrent.__version__} (transformers backend, float32, {threads} threads)")
    for name, r in rates.items():
        m, c = statistics.median(r), statistics.median(cpu_rates[name])
        print(f"{name:14s} {m:8.1f} tokens/s  ratio {m / base:.3f} | {c:8.1f} tokens per CPU-second  "
              f"ratio {c / cpu_base:.3f}  (medians of {repeats})")
    for model in configs.values():
        model.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
