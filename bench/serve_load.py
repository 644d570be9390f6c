#!/usr/bin/env python3
"""Load benchmark for `undercurrent serve` under attack (not a test).

Starts the server on a free loopback port, then for --duration seconds runs:
  * --clients streaming completion clients in a loop; each request is dropped mid-stream with
    probability --disconnect-rate (a client that goes away);
  * --slowloris clients that dribble a request head one byte at a time and reconnect whenever the
    server cuts them off;
  * --idle sockets that connect and never send;
  * --attackers clients that cycle through the attacks of the second hardening round: an 8 MiB
    body announced without the API key (with --api-key) and mostly sent, 8e6 '[' as a JSON body,
    a Transfer-Encoding/Content-Length smuggling pair, a 4 MB unknown field name; their answers
    are counted by status, apart from the well-behaved clients' errors;
  * one liveness prober: GET /health every 100 ms, its latency percentiles reported.
Every second it samples the server's resident memory and open file descriptors. At the end it
prints (and writes as JSON with --json) completions/s, latency and time-to-first-token
percentiles, errors, peak RSS and the fd counts at start and end.

Standard library only. Example:
  build/venv/bin/python bench/serve_load.py --binary build/ci/bin/undercurrent \
      --model models/stories260K --duration 600
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time

from serve_process import ServeProcess


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * (len(values) - 1)))))
    return values[k]


def proc_sample(pid):
    rss = 0
    hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024.0
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024.0
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, hwm, fds


class Stats:
    def __init__(self):
        self.completed = 0
        self.dropped = 0
        self.errors = []
        self.latency = []
        self.ttft = []
        self.tokens = 0
        self.slowloris_cutoffs = 0
        self.attacks = {}
        self.health_ms = []
        self.health_errors = 0


def auth_header(args):
    return f"Authorization: Bearer {args.api_key}\r\n".encode() if args.api_key else b""


async def stream_once(port, body, drop_after, stats, auth=b""):
    start = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        payload = json.dumps(body).encode()
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + auth + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 120)
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            rest = await asyncio.wait_for(reader.read(4096), 10)
            stats.errors.append(f"status {status}: {rest[:200]!r}")
            return
        events = 0
        first = None
        done = False
        buf = b""
        while not done:
            # Chunked transfer coding: size line, data, CRLF.
            size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), 120)
            size = int(size_line.strip(), 16)
            if size == 0:
                break
            buf += await asyncio.wait_for(reader.readexactly(size + 2), 120)
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    continue
                data = event[6:]
                if data == b"[DONE]":
                    done = True
                    break
                events += 1
                if first is None:
                    first = time.monotonic()
                if drop_after is not None and events >= drop_after:
                    stats.dropped += 1
                    return
        if not done:
            stats.errors.append("stream ended without [DONE]")
            return
        stats.completed += 1
        stats.tokens += events
        stats.latency.append(time.monotonic() - start)
        if first is not None:
            stats.ttft.append(first - start)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except Exception:
            pass


async def client_loop(port, args, stats, deadline, rng):
    prompts = ["Once upon a time", "The little dog", "Lily and Ben went to the park",
               "One day, a cat"]
    while time.monotonic() < deadline:
        body = {"prompt": rng.choice(prompts), "max_tokens": args.max_tokens,
                "temperature": 0.8, "stream": True}
        drop = rng.randint(1, max(1, args.max_tokens // 2)) \
            if rng.random() < args.disconnect_rate else None
        try:
            await stream_once(port, body, drop, stats, auth_header(args))
        except Exception as e:  # a failure the server caused
            stats.errors.append(f"{type(e).__name__}: {e}")
            await asyncio.sleep(0.1)


async def slowloris_loop(port, stats, deadline):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        try:
            i = 0
            while time.monotonic() < deadline:
                writer.write(head[i:i + 1] if i < len(head) else b"a")
                await writer.drain()
                i += 1
                try:
                    data = await asyncio.wait_for(reader.read(1), 1.0)
                    if not data:
                        stats.slowloris_cutoffs += 1
                        break
                except asyncio.TimeoutError:
                    pass
        except (ConnectionError, OSError):
            stats.slowloris_cutoffs += 1
        finally:
            writer.close()


async def idle_loop(port, deadline):
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        try:
            await asyncio.wait_for(reader.read(1), max(0.1, deadline - time.monotonic()))
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            writer.close()


async def attack_once(port, name, payload, send_limit=None):
    """Sends `payload` (at most `send_limit` bytes of it) and returns the answer's status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        data = payload if send_limit is None else payload[:send_limit]
        for i in range(0, len(data), 1 << 20):
            writer.write(data[i:i + (1 << 20)])
            try:
                await asyncio.wait_for(writer.drain(), 10)
            except (ConnectionError, OSError, asyncio.TimeoutError):
                break  # the server answered and closed before the rest: the point
        head = await asyncio.wait_for(reader.read(64), 30)
        return head[9:12].decode(errors="replace") if head else "closed"
    except (ConnectionError, OSError, asyncio.TimeoutError) as e:
        return type(e).__name__
    finally:
        writer.close()


async def attacker_loop(port, args, stats, deadline):
    auth = auth_header(args)
    deep = b"[" * 8000000
    huge_field = b'{"prompt": "x", "' + b"k" * (4 << 20) + b'": 1}'
    attacks = []
    if args.api_key:
        attacks.append(("unauthenticated_8mib_body",
                        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Length: 8388608\r\n\r\n" + b"[" * (7 << 20), None))
    attacks.append(("deep_json", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth +
                    f"Content-Length: {len(deep)}\r\n\r\n".encode() + deep, None))
    small = b'{"prompt": "Once", "max_tokens": 2}'
    attacks.append(("smuggling", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth +
                    b"Transfer-Encoding: chunked, identity\r\n" +
                    f"Content-Length: {len(small)}\r\n\r\n".encode() + small +
                    b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", None))
    attacks.append(("unknown_4mb_field", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth +
                    f"Content-Length: {len(huge_field)}\r\n\r\n".encode() + huge_field, None))
    i = 0
    while time.monotonic() < deadline:
        name, payload, limit = attacks[i % len(attacks)]
        i += 1
        try:
            status = await attack_once(port, name, payload, limit)
        except OSError as e:
            status = type(e).__name__
        key = f"{name}:{status}"
        stats.attacks[key] = stats.attacks.get(key, 0) + 1
        await asyncio.sleep(0.05)


async def health_loop(port, stats, deadline):
    while time.monotonic() < deadline:
        start = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.read(64), 30)
            writer.close()
            if head.startswith(b"HTTP/1.1 200"):
                stats.health_ms.append((time.monotonic() - start) * 1000)
            else:
                stats.health_errors += 1
        except (ConnectionError, OSError, asyncio.TimeoutError):
            stats.health_errors += 1
        await asyncio.sleep(0.1)


async def sampler(pid, samples, deadline):
    while time.monotonic() < deadline:
        samples.append((time.monotonic(),) + proc_sample(pid))
        await asyncio.sleep(1.0)


async def run(port, pid, args):
    stats = Stats()
    samples = []
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.duration
    tasks = [sampler(pid, samples, deadline)]
    tasks += [client_loop(port, args, stats, deadline, random.Random(rng.random()))
              for _ in range(args.clients)]
    tasks += [slowloris_loop(port, stats, deadline) for _ in range(args.slowloris)]
    tasks += [idle_loop(port, deadline) for _ in range(args.idle)]
    tasks += [attacker_loop(port, args, stats, deadline) for _ in range(args.attackers)]
    tasks.append(health_loop(port, stats, deadline))
    started = time.monotonic()
    await asyncio.gather(*tasks)
    return stats, samples, time.monotonic() - started


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/ci/bin/undercurrent")
    p.add_argument("--model", default="models/stories260K")
    p.add_argument("--duration", type=float, default=600)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--slowloris", type=int, default=200)
    p.add_argument("--idle", type=int, default=200)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--disconnect-rate", type=float, default=0.2)
    p.add_argument("--threads", type=int, default=1, help="engine threads")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--attackers", type=int, default=0,
                   help="clients cycling through the hostile requests above")
    p.add_argument("--api-key", default="", help="serve with this key; clients send it")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("serve_args", nargs="*", help="extra `serve` flags (after --)")
    args = p.parse_args()

    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.clients + args.slowloris + args.idle + args.attackers + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

    extra = ["--threads", str(args.threads)] + (["--api-key", args.api_key] if args.api_key
                                                 else []) + args.serve_args
    try:
        server = ServeProcess(args.binary, args.model, extra)
    except RuntimeError as e:
        sys.exit(str(e))
    port = server.port
    time.sleep(0.5)
    rss0, _, fds0 = proc_sample(server.pid)
    stats, samples, wall = asyncio.run(run(port, server.pid, args))
    time.sleep(2.0)  # let the last connections close
    rss1, hwm, fds1 = proc_sample(server.pid)
    t = time.monotonic()
    code = server.stop(timeout=120)
    stop_s = time.monotonic() - t

    rss_series = [s[1] for s in samples]
    half = len(rss_series) // 2
    result = {
        "duration_s": round(wall, 1),
        "clients": args.clients, "slowloris": args.slowloris, "idle": args.idle,
        "completions": stats.completed,
        "completions_per_s": round(stats.completed / wall, 2),
        "output_tokens_per_s": round(stats.tokens / wall, 1),
        "dropped_by_clients": stats.dropped,
        "errors": len(stats.errors),
        "first_errors": stats.errors[:5],
        "latency_p50_s": round(percentile(stats.latency, 50), 3),
        "latency_p99_s": round(percentile(stats.latency, 99), 3),
        "ttft_p50_s": round(percentile(stats.ttft, 50), 3),
        "ttft_p99_s": round(percentile(stats.ttft, 99), 3),
        "slowloris_cut_off": stats.slowloris_cutoffs,
        "attackers": args.attackers,
        "attacks": dict(sorted(stats.attacks.items())),
        "health_probes": len(stats.health_ms),
        "health_errors": stats.health_errors,
        "health_p50_ms": round(percentile(stats.health_ms, 50), 1),
        "health_p99_ms": round(percentile(stats.health_ms, 99), 1),
        "rss_mib_start": round(rss0, 1),
        "rss_mib_end": round(rss1, 1),
        "rss_mib_peak": round(hwm, 1),
        "rss_mib_median_first_half": round(statistics.median(rss_series[:half]), 1) if half else None,
        "rss_mib_median_second_half": round(statistics.median(rss_series[half:]), 1) if half else None,
        "fds_start": fds0,
        "fds_end": fds1,
        "fds_max": max(s[3] for s in samples) if samples else None,
        "sigterm_exit_code": code,
        "sigterm_seconds": round(stop_s, 2),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if not stats.errors and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
