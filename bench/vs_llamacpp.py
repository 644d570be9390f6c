#!/usr/bin/env python3
"""Undercurrent against llama.cpp on the same GGUF files, measured in one run.

For each model and thread count, runs rounds that alternate the two engines (ours first in
odd rounds, llama.cpp first in even ones) on one sequence: a prompt of --prompt-len random token
ids, then --gen-len greedy tokens. Prints the medians of the rounds and the
ratios ours / llama.cpp for prefill and decode tokens/s.

Ours: `undercurrent bench --batch 1 --format json` (the serving engine's own timings: prefill
over the prompt, decode over the tokens after the first), once per --matmul mode given.
llama.cpp: the PyPI package llama-cpp-python (it compiles llama.cpp from source for this CPU;
`pip install llama-cpp-python`), default settings, loaded once per model and thread count,
timed around its eval calls (prompt in one call, then one call per token with a greedy argmax,
as our engine samples each token too). Neither side counts process start-up or model loading.

Usage:
  python3 bench/vs_llamacpp.py --undercurrent build/release/bin/undercurrent \\
      --model build/models/gemma3/gemma-3-270m-q4_k_m.gguf --model SmolLM2-135M-Instruct.Q4_1.gguf \\
      --threads 1,2 --rounds 5 [--matmul int8,exact] [--json out.json]
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time


def cpu_flags():
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    wanted = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
              "avx512_bf16", "avx_vnni", "amx_int8", "amx_bf16"]
    return [f for f in wanted if f in flags]


def ours(binary, model, threads, prompt_len, gen_len, matmul):
    cmd = [binary, "bench", "--model", model, "--batch", "1", "--prompt-len", str(prompt_len),
           "--max-tokens", str(gen_len), "--repetitions", "1", "--threads", str(threads),
           "--matmul", matmul, "--format", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return j["prefill_tokens_per_second"], j["decode_tokens_per_second"]


class LlamaCpp:
    def __init__(self, model, threads, prompt_len, gen_len):
        import llama_cpp
        self.llama_cpp = llama_cpp
        n_ctx = prompt_len + gen_len + 8
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=max(prompt_len, 512),
                                   n_threads=threads, n_threads_batch=threads, seed=0,
                                   verbose=False)
        self.vocab = self.llm.n_vocab()

    def run(self, prompt, gen_len):
        import numpy as np
        llm = self.llm
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        prefill_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(gen_len - 1):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        decode_s = time.perf_counter() - start
        return len(prompt) / prefill_s, (gen_len - 1) / decode_s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--undercurrent", required=True, help="path of the undercurrent binary")
    ap.add_argument("--model", action="append", required=True, help="GGUF file (repeatable)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--matmul", default="int8,exact", help="our modes to measure")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    import llama_cpp

    modes = a.matmul.split(",")
    info = {
        "machine": platform.machine(),
        "cpu_flags": cpu_flags(),
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "prompt_len": a.prompt_len,
        "gen_len": a.gen_len,
        "rounds": a.rounds,
    }
    print(f"# CPU flags: {' '.join(info['cpu_flags'])}")
    print(f"# llama.cpp (llama-cpp-python {info['llama_cpp_python']}): "
          f"{info['llama_cpp_system_info']}")
    print(f"# one sequence: {a.prompt_len} prompt tokens, {a.gen_len} generated; medians of "
          f"{a.rounds} interleaved rounds")
    results = []
    header = f"{'model':<34} {'thr':>3} {'engine':<16} {'prefill tok/s':>13} {'decode tok/s':>12} " \
             f"{'prefill x':>9} {'decode x':>8}"
    print(header)
    for model in a.model:
        name = os.path.basename(model)
        for threads in [int(t) for t in a.threads.split(",")]:
            peer = LlamaCpp(model, threads, a.prompt_len, a.gen_len)
            rng = random.Random(1234)
            samples = {m: ([], []) for m in modes + ["llama.cpp"]}
            for r in range(a.rounds):
                prompt = [rng.randrange(1, peer.vocab) for _ in range(a.prompt_len)]
                order = modes + ["llama.cpp"] if r % 2 == 0 else ["llama.cpp"] + modes
                for engine in order:
                    if engine == "llama.cpp":
                        p, d = peer.run(prompt, a.gen_len)
                    else:
                        p, d = ours(a.undercurrent, model, threads, a.prompt_len, a.gen_len,
                                    engine)
                    samples[engine][0].append(p)
                    samples[engine][1].append(d)
            del peer
            base_p = statistics.median(samples["llama.cpp"][0])
            base_d = statistics.median(samples["llama.cpp"][1])
            for engine in ["llama.cpp"] + modes:
                p = statistics.median(samples[engine][0])
                d = statistics.median(samples[engine][1])
                label = engine if engine == "llama.cpp" else f"ours --matmul {engine}"
                print(f"{name:<34} {threads:>3} {label:<16} {p:>13.1f} {d:>12.1f} "
                      f"{p / base_p:>9.2f} {d / base_d:>8.2f}", flush=True)
                results.append({"model": name, "threads": threads, "engine": label,
                                 "prefill_tokens_per_second": p, "decode_tokens_per_second": d,
                                 "prefill_ratio": p / base_p, "decode_ratio": d / base_d,
                                 "prefill_runs": samples[engine][0],
                                 "decode_runs": samples[engine][1]})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"info": info, "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
