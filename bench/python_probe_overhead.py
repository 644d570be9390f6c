"""What a Python probe costs: SmolLM2-135M (or any local model), 16 prompts in one batch, 64
tokens each, with no probe, a Python `@probe` (a norm score) inline on generated[*] at 2
layers, and the same score from a trajectory `Probe` subclass at an async point (the spec
allows only trajectory probes there; its calls are batched per queue serve). The three models
stay open and their runs alternate (REPEATS rounds, default 5); prints each configuration's
median tokens/s (wall) and tokens per CPU-second of this process (less sensitive to other load
on a shared machine), each with its ratio to the unprobed median.

    PYTHONPATH=build/ci/python build/venv/bin/python bench/python_probe_overhead.py MODEL.gguf \
        [THREADS=2 [REPEATS=5]]
"""

from __future__ import annotations

import statistics
import sys
import time

from undercurrent import Probe, ProbedModel, ProbeResult, ProbeSignal, probe

PROMPTS = [f"Write a short story about a {w}." for w in (
    "cat", "dog", "ship", "robot", "tree", "river", "king", "city",
    "storm", "clock", "garden", "mountain", "train", "lamp", "bird", "door")]
TOKENS = 64
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 5


@probe("bench_norm")
def bench_norm(record) -> float:
    return float(record.tensor.norm())


class BenchNorm(Probe):
    probe_kind = "trajectory"

    def on_start(self, ctx):
        self.n = 0

    def on_activation(self, record):
        self.n += 1
        return ProbeSignal(confidence=float(record.tensor.norm()))

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name, verdict=self.n)


def spec(mode: str) -> dict:
    inline = mode == "inline"
    return {"extraction_points": [{
        "name": "p", "layers": [10, 20], "tensor_type": "residual_stream", "position": "generated[*]",
        "probe_type": "bench_norm" if inline else "bench_norm_async",
        "probe_kind": "single_shot" if inline else "trajectory", "execution_mode": mode}]}


def main(model_path: str, threads: int) -> None:
    # Three engines stay open: each gets a KV cache for this workload only, not a share of memory.
    opts = {"threads": threads, "kv_cache_memory": "256MiB", "max_model_len": 256}
    configs = {
        "no probe": ProbedModel.from_pretrained(model_path, **opts),
        "async Probe": ProbedModel.from_pretrained(model_path, spec=spec("async"),
                                                   probes={"bench_norm_async": BenchNorm}, **opts),
        "inline @probe": ProbedModel.from_pretrained(model_path, spec=spec("inline"), **opts),
    }
    rates: dict[str, list[float]] = {name: [] for name in configs}
    cpu_rates: dict[str, list[float]] = {name: [] for name in configs}
    for model in configs.values():  # warm-up
        model.generate(PROMPTS[:2], max_new_tokens=8, ignore_eos=True)
    names = list(configs)
    for rep in range(REPEATS):
        for name in names[rep % 3:] + names[: rep % 3]:  # each configuration goes first in turn
            model = configs[name]
            start, cpu_start = time.perf_counter(), time.process_time()
            outs = model.generate(PROMPTS, max_new_tokens=TOKENS, ignore_eos=True)
            took, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            tokens = sum(len(o.token_ids) for o in outs)
            rates[name].append(tokens / took)
            cpu_rates[name].append(tokens / cpu)
            print(f"round {rep + 1} {name:14s} {tokens / took:8.1f} tokens/s  {tokens / cpu:8.1f} tokens per "
                  "CPU-second", flush=True)  # progress: a loaded machine may not finish every round
    base = statistics.median(rates["no probe"])
    cpu_base = statistics.median(cpu_rates["no probe"])
    for name, r in rates.items():
        m, c = statistics.median(r), statistics.median(cpu_rates[name])
        print(f"{name:14s} {m:8.1f} tokens/s  ratio {m / base:.3f} | {c:8.1f} tokens per CPU-second  "
              f"ratio {c / cpu_base:.3f}  (medians of {REPEATS})")
    for model in configs.values():
        model.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2)
