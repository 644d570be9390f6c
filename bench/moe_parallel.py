#!/usr/bin/env python3
"""How a mixture of experts runs on the cores of one machine: one process with every thread,
tensor parallelism (every expert sliced over the ranks) and expert parallelism (whole experts per
rank, `--enable-expert-parallel`), side by side in one run.

For every --model and every --matmul mode, rounds rotate the layouts (each round starts with
the next one, so none always runs first). Each run is `undercurrent generate` on --batch
requests (default one) of --prefill random token ids (seeded; the same ids every run) that then
decode --decode tokens past EOS: prefill tokens/s up to the last first token, decode tokens/s
over the tokens after each request's first (the engine's own per-request metrics; start-up and
loading not counted). The ranks run under mpirun (the command re-executes itself with --tp), one
thread each (--threads = cores / ranks); the single process gets every core. Prints the median
of the rounds per layout and the ratios to tensor parallelism, and the largest peak resident set
of any one process of the job (mmapped weights count once they are touched: a rank that reads a
slice of every expert touches every page of row-split matrices).

Usage (from the repository root):
  python3 bench/moe_parallel.py --undercurrent build/release/bin/undercurrent \\
      --model olmoe-q4km.gguf --ranks 2 --rounds 3 --prefill 512 --decode 128 \\
      --matmul int8,exact [--json out.json]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile


def layouts(ranks, cores):
    per_rank = max(1, cores // ranks)
    return [
        ("one process", ["--threads", str(cores)]),
        (f"TP {ranks}", ["--tp", str(ranks), "--threads", str(per_rank)]),
        (f"EP {ranks}", ["--tp", str(ranks), "--threads", str(per_rank),
                         "--enable-expert-parallel"]),
    ]


def run(binary, model, prompts, decode, matmul, flags):
    """One generate run of every request in `prompts` together: (prefill tok/s, decode tok/s,
    peak RSS GiB of its largest process). With several requests, prefill counts every prompt
    token up to the last first token, decode every later token up to the last one's end."""
    cmd = ["/usr/bin/time", "-f", "UC_MAXRSS_KB %M", binary, "generate", "--model", model,
           "--prompts", prompts, "--max-tokens", str(decode), "--ignore-eos", "--json",
           "--matmul", matmul] + flags
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    outs = [json.loads(l) for l in done.stdout.splitlines() if l.startswith("{")]
    ttft = max(o["metrics"]["time_to_first_token_seconds"] for o in outs)
    latency = max(o["metrics"]["latency_seconds"] for o in outs)
    prefill_tps = sum(o["usage"]["prompt_tokens"] for o in outs) / ttft
    decode_tps = sum(o["usage"]["completion_tokens"] - 1 for o in outs) / (latency - ttft)
    # GNU time's %M: the largest resident set of the command or any descendant it waited for.
    rss_kb = [int(l.split()[1]) for l in done.stderr.splitlines() if l.startswith("UC_MAXRSS_KB")]
    return prefill_tps, decode_tps, rss_kb[-1] / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--undercurrent", required=True, help="path of the undercurrent binary")
    ap.add_argument("--model", action="append", required=True, help="MoE GGUF file (repeatable)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1, help="requests served together")
    ap.add_argument("--matmul", default="int8,exact")
    ap.add_argument("--json", help="write the rounds and medians here")
    a = ap.parse_args()

    rng = random.Random(0)
    results = []
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(a.batch):
            ids = [rng.randrange(256, 4096) for _ in range(a.prefill)]
            f.write(json.dumps({"id": f"bench{i}", "prompt_ids": ids}) + "\n")
        prompts = f.name
    try:
        for model in a.model:
            for matmul in a.matmul.split(","):
                runs = {name: [] for name, _ in layouts(a.ranks, a.cores)}
                order = layouts(a.ranks, a.cores)
                for r in range(a.rounds):
                    for name, flags in order[r % len(order):] + order[:r % len(order)]:
                        runs[name].append(run(a.undercurrent, model, prompts, a.decode, matmul,
                                              flags))
                print(f"\n{os.path.basename(model)}, --matmul {matmul}, {a.rounds} rounds "
                      f"({a.batch} x (prefill {a.prefill}, decode {a.decode}); medians; ratio to "
                      f"TP {a.ranks})")
                print(f"{'layout':<12} {'prefill tok/s':>14} {'decode tok/s':>13} "
                      f"{'prefill x':>10} {'decode x':>9} {'peak RSS GiB':>13}")
                tp = f"TP {a.ranks}"
                base_p = statistics.median(x[0] for x in runs[tp])
                base_d = statistics.median(x[1] for x in runs[tp])
                for name, samples in runs.items():
                    p = statistics.median(x[0] for x in samples)
                    d = statistics.median(x[1] for x in samples)
                    rss = max(x[2] for x in samples)
                    print(f"{name:<12} {p:14.1f} {d:13.2f} {p / base_p:10.2f} {d / base_d:9.2f} "
                          f"{rss:13.2f}")
                    results.append({"model": model, "matmul": matmul, "layout": name,
                                    "rounds": samples, "prefill_tps": p, "decode_tps": d,
                                    "peak_rss_gib": rss})
    finally:
        os.unlink(prompts)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
