#!/usr/bin/env python3
"""Decode tokens/s with and without a JSON schema at batch B (not a test).

Starts one `undercurrent serve` and alternates rounds (the machine may be shared and noisy:
compare medians over rounds of one interleaved run): a round sends --batch streaming chat
requests at once, greedy, --max-tokens each with ignore_eos, either plain or with a
response_format json_schema whose string field is too long to close within max_tokens (so both
kinds decode exactly max-tokens tokens). Decode tokens/s of a round: the tokens after each
request's first, summed, over the time from the last first token to the last token. Reports the
median per kind and the ratio schema / plain.

Example (SmolLM2):
  build/venv/bin/python bench/structured_output_speed.py --binary build/ci/bin/undercurrent \\
      --model SmolLM2-135M-Instruct.Q4_1.gguf --batch 8 --max-tokens 64 --rounds 5
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request

from serve_process import ServeProcess

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 4000},
        "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
        "genre": {"enum": ["drama", "comedy", "science fiction"]},
    },
    "required": ["title", "year", "genre"],
}


def stream(url, body, out, index):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk.get("choices", []):
                if c.get("delta", {}).get("content"):
                    times.append(time.perf_counter())
    out[index] = times


def run_round(url, batch, max_tokens, schema):
    threads, out = [], [None] * batch
    for i in range(batch):
        body = {"model": "m", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                "stream": True,
                "messages": [{"role": "user", "content": f"Describe film number {i} as JSON."}]}
        if schema:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "film", "schema": SCHEMA}}
        threads.append(threading.Thread(target=stream, args=(url, body, out, i)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    start = max(t[0] for t in out)
    end = max(t[-1] for t in out)
    # Chunks, not tokens, are timed; the engine emits one chunk per token here (ASCII JSON).
    tokens = sum(len([x for x in t if x > start]) for t in out)
    return tokens / (end - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default="build/ci/bin/undercurrent")
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    server = ServeProcess(args.binary, args.model,
                          ["--served-model-name", "m", "--max-num-seqs", str(args.batch),
                           "--max-model-len", "512"])
    try:
        run_round(server.url, args.batch, 8, True)  # warm-up, compiles the schema
        plain, constrained = [], []
        for r in range(args.rounds):
            plain.append(run_round(server.url, args.batch, args.max_tokens, False))
            constrained.append(run_round(server.url, args.batch, args.max_tokens, True))
            print(f"round {r}: plain {plain[-1]:.1f} tok/s, schema {constrained[-1]:.1f} tok/s",
                  flush=True)
        mp, mc = statistics.median(plain), statistics.median(constrained)
        print(f"median decode tok/s at batch {args.batch}: plain {mp:.1f}, schema {mc:.1f}, "
              f"ratio {mc / mp:.3f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
