#!/usr/bin/env python3
"""What compiling a JSON schema costs a request, and that it does not stall other clients (not a
test).

Starts one `undercurrent serve` and runs --rounds rounds. A round sends, one after the other,
max_tokens 1 chat requests: plain; with a schema never seen before (a typical tool-parameters
schema: five fields, an enum, bounded numbers and strings, a nested object, an array; a
per-round property name defeats the cache); and the same schema again (a cache hit). The
compile time of a round is fresh - cached. While the fresh request is in flight, a second
thread times GET /v1/models: it is answered by another handler thread, so its latency during a
compile shows whether the compile blocks other requests. Reports medians.

Example (SmolLM2):
  build/venv/bin/python bench/grammar_compile_time.py --binary build/ci/bin/undercurrent \\
      --model SmolLM2-135M-Instruct.Q4_1.gguf --rounds 7
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request

from serve_process import ServeProcess


def schema(tag):
    return {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "location": {"type": "object", "properties": {
                "lat": {"type": "number", "minimum": -90, "maximum": 90},
                "lon": {"type": "number", "minimum": -180, "maximum": 180}},
                "required": ["lat", "lon"]},
            "fields": {"type": "array", "items": {"enum": ["wind", "rain", "uv"]},
                       "maxItems": 3},
            tag: {"type": "boolean"},
        },
        "required": ["city", "unit", tag],
        "additionalProperties": False,
    }


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()
    return time.perf_counter() - start


def get(url):
    start = time.perf_counter()
    with urllib.request.urlopen(url + "/v1/models", timeout=600) as resp:
        resp.read()
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default="build/ci/bin/undercurrent")
    p.add_argument("--model", required=True)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    server = ServeProcess(args.binary, args.model, ["--served-model-name", "m",
                                                   "--max-model-len", "512"])
    base = {"model": "m", "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "Weather in Paris as JSON."}]}
    try:
        post(server.url, {**base, "response_format": {"type": "json_object"}})  # compiler built
        plain, fresh, cached, models = [], [], [], []
        for r in range(args.rounds):
            plain.append(post(server.url, base))
            body = {**base, "response_format": {"type": "json_schema", "json_schema": {
                "name": "w", "schema": schema(f"flag_{r}_{time.time_ns()}")}}}
            side = []
            t = threading.Thread(target=lambda: side.append(get(server.url)))
            t.start()
            fresh.append(post(server.url, body))
            t.join()
            models.append(side[0])
            cached.append(post(server.url, body))
            print(f"round {r}: plain {plain[-1] * 1e3:.1f} ms, fresh schema "
                  f"{fresh[-1] * 1e3:.1f} ms, cached {cached[-1] * 1e3:.1f} ms, /v1/models "
                  f"meanwhile {models[-1] * 1e3:.1f} ms", flush=True)
        compile_ms = statistics.median(f - c for f, c in zip(fresh, cached)) * 1e3
        print(f"medians: plain {statistics.median(plain) * 1e3:.1f} ms, fresh "
              f"{statistics.median(fresh) * 1e3:.1f} ms, cached "
              f"{statistics.median(cached) * 1e3:.1f} ms, compile (fresh - cached) "
              f"{compile_ms:.1f} ms, /v1/models during a compile "
              f"{statistics.median(models) * 1e3:.1f} ms")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
