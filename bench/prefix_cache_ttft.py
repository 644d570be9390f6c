#!/usr/bin/env python3
"""Time to first token with and without prefix caching (not a test).

Starts `undercurrent serve` twice on free loopback ports, once as is (prefix caching on) and
once with --no-prefix-caching, then alternates rounds between them (the machine may be shared
and noisy: compare medians over rounds of one interleaved run). A round: one request with the
shared system prompt alone (it fills the cache; not timed), then --clients streaming chat
clients at once, each with the system prompt and a different question, greedy, --max-tokens
each. Reports per server TTFT p50/p99 over all rounds' clients, the median of the rounds'
output tokens/s, the ratio of the p50s, and whether the greedy texts were identical.

Example (SmolLM2):
  build/venv/bin/python bench/prefix_cache_ttft.py --binary build/ci/bin/undercurrent \\
      --model SmolLM2-135M-Instruct.Q4_1.gguf --clients 32 --system-tokens 1500 --rounds 3
"""
import argparse
import json
import signal
import statistics
import sys
import threading
import time
import urllib.request

from serve_process import ServeProcess


def percentile(values, p):
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * (len(values) - 1)))))
    return values[k]


def stream_chat(url, messages, max_tokens, out, index):
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    first, text, tokens = None, "", 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk.get("choices", []):
                piece = c.get("delta", {}).get("content") or ""
                if piece and first is None:
                    first = time.monotonic() - start
                text += piece
                tokens += 1 if piece else 0
    out[index] = (first, text, time.monotonic() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default="build/ci/bin/undercurrent")
    p.add_argument("--model", required=True)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--system-tokens", type=int, default=1500, help="about this many tokens")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    words = ("the river carries light and stone through quiet valleys where old mills turn "
             "and children count the boats that pass beneath the bridge at dusk ").split()
    system = " ".join(words[i % len(words)] for i in range(int(args.system_tokens * 0.8)))
    # A timeout's SIGTERM still stops both servers (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    extra = ["--threads", str(args.threads), "--max-num-seqs", str(args.clients + 1)]
    servers = {"cache": ServeProcess(args.binary, args.model, extra),
               "no_cache": ServeProcess(args.binary, args.model,
                                        extra + ["--no-prefix-caching"])}
    ttft = {k: [] for k in servers}
    tps = {k: [] for k in servers}
    texts = {k: [] for k in servers}
    try:
        for rnd in range(args.rounds):
            for name, server in servers.items():
                warm = [None]
                stream_chat(server.url, [{"role": "system", "content": system},
                                         {"role": "user", "content": "Hello."}], 1, warm, 0)
                out = [None] * args.clients
                threads = [threading.Thread(target=stream_chat, args=(
                    server.url,
                    [{"role": "system", "content": system},
                     {"role": "user", "content": f"Question {rnd}-{i}: what comes next?"}],
                    args.max_tokens, out, i)) for i in range(args.clients)]
                start = time.monotonic()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.monotonic() - start
                ttft[name] += [o[0] for o in out]
                tps[name].append(args.clients * args.max_tokens / wall)
                texts[name].append([o[1] for o in out])
                print(f"round {rnd} {name}: ttft p50 {percentile([o[0] for o in out], 50):.3f}s "
                      f"wall {wall:.1f}s", flush=True)
    finally:
        for s in servers.values():
            s.stop()
    for name in servers:
        print(f"{name}: TTFT p50 {percentile(ttft[name], 50):.3f}s p99 "
              f"{percentile(ttft[name], 99):.3f}s, output {statistics.median(tps[name]):.1f} "
              f"tok/s (median of {args.rounds} rounds)")
    print(f"TTFT p50 ratio (no cache / cache): "
          f"{percentile(ttft['no_cache'], 50) / percentile(ttft['cache'], 50):.2f}x")
    print("greedy texts identical:", texts["cache"] == texts["no_cache"])


if __name__ == "__main__":
    main()
