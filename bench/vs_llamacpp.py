#!/usr/bin/env python3
"""Undercurrent against llama.cpp on the same GGUF files, side by side in one run.

Three parts, each optional:

1. Formats (--quantize-from SRC.gguf --types f16,bf16,q8_0,...): makes every type from one
   F32/F16 source twice, with `undercurrent quantize` and with llama.cpp's quantizer
   (llama-cpp-python's llama_model_quantize), reports whether the two files hold the same
   tensor types and bytes, and adds llama.cpp's file of each type to the models measured.

2. Single sequence (every --model and every made file): rounds that alternate the engines (ours
   first in odd rounds, llama.cpp first in even ones). Each round, each engine runs a prompt of
   --prefill lengths (random token ids; the prefill tokens/s of each) and, after the first,
   decodes --decode greedy tokens (decode tokens/s over the tokens after the first). Prints the
   medians of the rounds and the ratios ours / llama.cpp, at each --threads; for decode, whose
   memory bandwidth drifts with the host's load, also the range of each round's own ratio and
   their median (the paired ratio).
   Ours: `undercurrent bench --batch 1 --format json` (the serving engine's own timings), once
   per --matmul mode. llama.cpp: the PyPI package llama-cpp-python (compiled from source for this
   CPU), loaded once per model and thread count, timed around its eval calls (the prompt in one
   call, then one call per token with a greedy argmax, as our engine samples each token).
   Neither side counts process start-up or model loading.

3. Serving (--serve MODEL --llama-server BIN): our `serve` and llama.cpp's `llama-server`
   (continuous batching, --parallel slots = the largest concurrency) on the same file and
   threads, in --serve-rounds rounds that alternate the engines (medians and each round's
   ratio reported); at each --concurrency N clients stream /v1/completions in a
   closed loop (--serve-max-tokens tokens each with ignore_eos). Request k's prompt is
   --serve-prompt-words random words seeded by k: the same sequence for both engines, and no
   prompt is ever repeated, so llama-server's prompt cache (which restores the KV of a prompt it
   has seen) cannot skip prefill that our engine computes: both measure batched compute.
   After --serve-warmup seconds of load a --serve-seconds window opens; output tokens/s counts
   the tokens that arrived inside it (each response's usage, its tokens spread from its first
   token to its end), so neither the ramp-up nor the tail of the last requests counts. Also
   requests/s and time to first token p50 / p99 of the requests started in the window.

Roofline: the read bandwidth `llm_bench --bandwidth-only` measures at each thread count (the
best of its read loops; measured in every single-sequence round, as the host's bandwidth drifts,
and the best round kept) and the bandwidth each engine's decode implies (decode tokens/s times
the bytes a token streams: every tensor of the file but a token embedding that is only
gathered); each engine's decode is reported as a fraction of the larger of all of these, so a
weak read loop cannot flatter the fractions.

Compute roofline, for prefill: the peak of every multiply-add instruction the kernels use,
`llm_bench --compute-only` at each thread count. A file's prefill runs on one kind of them: F32
FMA for F16/F32 weights (both engines; ours at --matmul exact for every type), BF16 pairs for BF16
(vdpbf16ps: llama.cpp and ours at int8), int8 dot products for the quantized types. Each
engine's prefill at the longest --prefill is reported as matmul work per token (2 x the weights
a prompt token multiplies: all but the embedding and the LM head) times tokens/s over that
kind's best peak. Attention is left out, so the
fractions are lower bounds, and 1 / llama.cpp's fraction is an upper bound on the ratio any
engine can reach over it on this machine.

Records the CPU's instruction sets and llama.cpp's build (system_info) in the output.

Usage (from the repository root; the venv needs llama-cpp-python, gguf and numpy):
  python3 bench/vs_llamacpp.py --undercurrent build/release/bin/undercurrent \\
      --quantize-from build/models/tinyllama-f32.gguf --types q8_0,q4_0,q4_k_m --work-dir /tmp/q \\
      --model build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --threads 1,2 --rounds 3 --json out.json
  python3 bench/vs_llamacpp.py --undercurrent build/release/bin/undercurrent \\
      --serve M.gguf --llama-server llama.cpp/build/bin/llama-server --concurrency 1,4,16,64
"""
import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

# llama.cpp's ftype numbers (llama.h) for the types `undercurrent quantize` makes.
FTYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9,
          "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "bf16": 32}


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
              "avx512_bf16", "avx512vbmi", "avx_vnni", "amx_int8", "amx_bf16"]
    return [f for f in wanted if f in flags]


# ---------------------------------------------------------------------------------------------
# 1. Formats


def quantize_both(binary, source, qtype, work_dir):
    """Makes `qtype` from `source` with ours and with llama.cpp; returns (ours, theirs, report)."""
    base = os.path.splitext(os.path.basename(source))[0]
    ours = os.path.join(work_dir, f"{base}.{qtype}.ours.gguf")
    theirs = os.path.join(work_dir, f"{base}.{qtype}.llamacpp.gguf")
    t0 = time.perf_counter()
    subprocess.run([binary, "quantize", source, ours, "--type", qtype, "--force"], check=True,
                   capture_output=True, text=True)
    ours_s = time.perf_counter() - t0
    theirs_s = None  # None: an earlier run's file, newer than the source, was kept
    if not (os.path.exists(theirs) and os.path.getmtime(theirs) > os.path.getmtime(source)):
        theirs_s = quantize_llamacpp(source, theirs, qtype)
    return ours, theirs, compare_tensors(ours, theirs) | {"ours_seconds": ours_s,
                                                          "llamacpp_seconds": theirs_s}


def quantize_llamacpp(source, out, qtype):
    """llama.cpp's quantizer (llama_model_quantize, no importance matrix); returns seconds."""
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[qtype]
    params.nthread = os.cpu_count() or 1
    t0 = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(source.encode(), out.encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama.cpp could not quantize {source} to {qtype} (rc {rc})")
    return time.perf_counter() - t0


def compare_tensors(a, b):
    """Per tensor name: same ggml type, same bytes."""
    import gguf
    ra, rb = gguf.GGUFReader(a), gguf.GGUFReader(b)
    ta = {t.name: t for t in ra.tensors}
    tb = {t.name: t for t in rb.tensors}
    same_type = same_bytes = 0
    differing = []
    for name, t in tb.items():
        u = ta.get(name)
        if u is None:
            differing.append(f"{name}: missing in ours")
            continue
        if u.tensor_type == t.tensor_type:
            same_type += 1
            if bytes(u.data.tobytes()) == bytes(t.data.tobytes()):
                same_bytes += 1
            else:
                differing.append(f"{name}: bytes differ")
        else:
            differing.append(f"{name}: {u.tensor_type.name} vs {t.tensor_type.name}")
    return {"tensors": len(tb), "same_type": same_type, "same_bytes": same_bytes,
            "ours_bytes": os.path.getsize(a), "llamacpp_bytes": os.path.getsize(b),
            "differing": differing[:10]}


# ---------------------------------------------------------------------------------------------
# 2. Single sequence


def expert_share(reader):
    """The part of a stacked expert tensor (blk.N.ffn_*_exps) one token uses: the file's
    <arch>.expert_used_count / <arch>.expert_count (1 for a dense model)."""
    def field(key):
        f = reader.fields.get(key)
        return int(f.parts[f.data[0]][0]) if f is not None else None

    arch_field = reader.fields["general.architecture"]
    arch = bytes(arch_field.parts[arch_field.data[0]]).decode()
    used, total = field(arch + ".expert_used_count"), field(arch + ".expert_count")
    return used / total if used and total else 1.0


def bytes_per_token(model):
    """Bytes one decode token streams: every tensor but a token embedding that is only gathered
    (one tied to the output is the LM head and is read whole); of a mixture of experts' stacked
    expert tensors, the share of the experts a token is routed to."""
    import gguf
    r = gguf.GGUFReader(model)
    names = {t.name for t in r.tensors}
    tied = "output.weight" not in names
    share = expert_share(r)
    return int(sum(int(t.n_bytes) * (share if "_exps." in t.name else 1.0)
                   for t in r.tensors if tied or t.name != "token_embd.weight"))


# {threads: read bandwidths (bytes/s) measured during the single-sequence rounds}.
BANDWIDTH_SAMPLES = {}
# Per --matmul mode of ours: the arithmetic each kind of weight ran on (`undercurrent bench`).
ARITHMETIC = {}


def measured_bandwidth(llm_bench, threads):
    """{threads: best read bandwidth in bytes/s} from llm_bench --bandwidth-only."""
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([llm_bench, "--bandwidth-only", "--threads", ",".join(map(str, threads)),
                        "--json", f.name], check=True, capture_output=True, text=True)
        rows = json.load(open(f.name))
    return {r["threads"]: r["bandwidth_gb_s"] * 1e9 for r in rows}


def roofline(single, bandwidth, model_bytes):
    """Adds each row's roofline fraction; returns the printed table's lines."""
    lines = []
    keys = sorted({(r["model"], r["threads"]) for r in single})
    for name, threads in keys:
        rows = [r for r in single if r["model"] == name and r["threads"] == threads]
        b = model_bytes[name]
        implied = {r["engine"]: r["decode_tokens_per_second"] * b for r in rows}
        ceiling = max([bandwidth[threads]] + list(implied.values()))
        cells = []
        for r in rows:
            r["decode_bytes_per_token"] = b
            r["roofline_bandwidth"] = ceiling
            r["roofline_fraction"] = implied[r["engine"]] / ceiling
            cells.append(f"{r['engine']} {100 * r['roofline_fraction']:5.1f}%")
        lines.append(f"{name:<44} {threads:>3} {b / 2**20:8.1f} MiB  measured "
                     f"{bandwidth[threads] / 1e9:6.2f} GB/s  roofline {ceiling / 1e9:6.2f} GB/s  "
                     + "  ".join(cells))
    return lines


def measured_peaks(llm_bench, threads):
    """{threads: {kind: best ops/s}} from llm_bench --compute-only."""
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([llm_bench, "--compute-only", "--threads", ",".join(map(str, threads)),
                        "--json", f.name], check=True, capture_output=True, text=True)
        rows = json.load(open(f.name))
    return {r["threads"]: {k: v * 1e9 for k, v in r["best_gops"].items()} for r in rows}


def matmul_work(model):
    """(operations per prompt token, dominant weight type): 2 x the elements of every tensor of
    two or more dimensions but the token embedding (gathered) and the LM head (a prompt's logits
    are computed for its last token only), and the type holding most of those bytes; of a
    mixture of experts' stacked expert tensors, the share of the experts a token is routed to."""
    import gguf
    r = gguf.GGUFReader(model)
    share = expert_share(r)
    ops = 0
    bytes_by_type = {}
    for t in r.tensors:
        if len(t.shape) < 2 or t.name in ("token_embd.weight", "output.weight"):
            continue
        ops += int(2 * int(t.n_elements) * (share if "_exps." in t.name else 1.0))
        name = t.tensor_type.name
        bytes_by_type[name] = bytes_by_type.get(name, 0) + int(t.n_bytes)
    return ops, max(bytes_by_type, key=bytes_by_type.get)


def peak_kind(weight_type, row):
    """The multiply-add kind an engine's prefill runs on for weights of `weight_type`. Ours says
    which (`undercurrent bench`'s matmul_arithmetic: at --matmul exact F32 FMA whatever the type;
    BF16 at int8 on vdpbf16ps or F32 FMA by the CPU); llama.cpp: F32 FMA for F32/F16, vdpbf16ps
    for BF16, int8 dot products for the quantized types."""
    if weight_type in ("F32", "F16"):
        return "f32"
    key = "bf16" if weight_type == "BF16" else "quantized"
    if row.get("matmul_arithmetic"):
        return row["matmul_arithmetic"][key]
    return "bf16" if weight_type == "BF16" else "int8"


def compute_roofline(single, peaks, work, prefill):
    """Adds each row's prefill compute fraction; returns the printed table's lines."""
    lines = []
    key = f"prefill{prefill}_tokens_per_second"
    for name, threads in sorted({(r["model"], r["threads"]) for r in single}):
        rows = [r for r in single if r["model"] == name and r["threads"] == threads and key in r]
        if name not in work or not rows:
            continue
        ops, wtype = work[name]
        cells = []
        for r in rows:
            kind = peak_kind(wtype, r)
            peak = peaks[threads].get(kind)
            if not peak:
                cells.append(f"{r['engine']} (no {kind} peak)")
                continue
            r["prefill_compute_kind"] = kind
            r["prefill_compute_peak_ops"] = peak
            r["prefill_compute_fraction"] = r[key] * ops / peak
            cells.append(f"{r['engine']} {100 * r['prefill_compute_fraction']:5.1f}% of {kind} "
                         f"{peak / 1e9:6.1f}")
            if r["engine"] == "llama.cpp":
                cells.append(f"ratio ceiling {1 / r['prefill_compute_fraction']:4.2f}x")
        lines.append(f"{name:<44} {threads:>3} {wtype:<5} {ops / 1e9:6.2f} GOP/token  "
                     + "  ".join(cells))
    return lines


def ours_single(binary, model, threads, prompt_len, gen_len, matmul):
    cmd = [binary, "bench", "--model", model, "--batch", "1", "--prompt-len", str(prompt_len),
           "--max-tokens", str(gen_len), "--repetitions", "1", "--threads", str(threads),
           "--matmul", matmul, "--format", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    ARITHMETIC[matmul] = j.get("matmul_arithmetic", {})
    return j["prefill_tokens_per_second"], j["decode_tokens_per_second"]


class LlamaCpp:
    # False: llama.cpp's weight repacking and extra buffer types (AMX tiles, interleaved
    # quantized rows) off, for builds where they crash on a model (--llamacpp-no-repack).
    extra_bufts = True

    def __init__(self, model, threads, max_len):
        import llama_cpp
        import llama_cpp.llama as llama_module
        if not LlamaCpp.extra_bufts:
            defaults = llama_module.llama_cpp.llama_model_default_params

            def plain_params():
                params = defaults()
                params.use_extra_bufts = False
                return params
            llama_module.llama_cpp.llama_model_default_params = plain_params
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=max_len + 8, n_batch=max_len + 8,
                                   n_ubatch=512, n_threads=threads, n_threads_batch=threads,
                                   seed=0, verbose=False)
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
        return len(prompt) / prefill_s, (gen_len - 1) / decode_s if gen_len > 1 else 0.0


def round_ratios(samples, engine, key):
    """Each round's ours / llama.cpp for one measurement (the engines ran back to back)."""
    return [o / t for o, t in zip(samples[engine][key], samples["llama.cpp"][key])]


def measure_single(a, model, threads, modes, results):
    """One model at one thread count: every round runs each prefill length on every engine."""
    prefills = [int(p) for p in a.prefill.split(",")]
    peer = LlamaCpp(model, threads, max(prefills) + a.decode)
    rng = random.Random(1234)
    engines = modes + ["llama.cpp"]
    # samples[engine][("prefill", P) | ("decode",)] -> list
    samples = {e: {} for e in engines}
    round_bandwidth = []  # the read loop's bandwidth in each round, bytes/s
    for r in range(a.rounds):
        # The read loop runs in every round beside the engines, so the roofline sees the
        # bandwidth the host gave while they ran, not at one moment after them.
        sample = measured_bandwidth(a.llm_bench, [threads])[threads]
        BANDWIDTH_SAMPLES.setdefault(threads, []).append(sample)
        round_bandwidth.append(sample)
        order = engines if r % 2 == 0 else engines[::-1]
        for i, p in enumerate(prefills):
            prompt = [rng.randrange(1, peer.vocab) for _ in range(p)]
            gen = a.decode if i == 0 else 2  # decode after the first prefill length only
            for engine in order:
                if engine == "llama.cpp":
                    pf, dc = peer.run(prompt, gen)
                else:
                    pf, dc = ours_single(a.undercurrent, model, threads, p, gen, engine)
                samples[engine].setdefault(("prefill", p), []).append(pf)
                if i == 0:
                    samples[engine].setdefault(("decode",), []).append(dc)
    del peer
    name = os.path.basename(model)
    base = {k: statistics.median(v) for k, v in samples["llama.cpp"].items()}
    for engine in ["llama.cpp"] + modes:
        med = {k: statistics.median(v) for k, v in samples[engine].items()}
        label = engine if engine == "llama.cpp" else f"ours {engine}"
        cells = []
        row = {"model": name, "threads": threads, "engine": label}
        if engine != "llama.cpp":
            row["matmul_arithmetic"] = ARITHMETIC.get(engine, {})
        for p in prefills:
            k = ("prefill", p)
            cells.append(f"{med[k]:>9.1f} {med[k] / base[k]:>5.2f}x")
            row[f"prefill{p}_tokens_per_second"] = med[k]
            row[f"prefill{p}_ratio"] = med[k] / base[k]
            row[f"prefill{p}_runs"] = samples[engine][k]
        k = ("decode",)
        cells.append(f"{med[k]:>9.1f} {med[k] / base[k]:>5.2f}x")
        row["decode_tokens_per_second"] = med[k]
        row["decode_ratio"] = med[k] / base[k]
        row["decode_runs"] = samples[engine][k]
        for p in prefills:
            row[f"prefill{p}_round_ratios"] = round_ratios(samples, engine, ("prefill", p))
        row["decode_round_ratios"] = round_ratios(samples, engine, k)
        row["decode_paired_ratio"] = statistics.median(row["decode_round_ratios"])
        row["round_read_bandwidth_gb_s"] = [b / 1e9 for b in round_bandwidth]
        if engine != "llama.cpp":
            # Memory-bound decode drifts with the host's load: each round's own ratio (the two
            # engines ran back to back) shows the spread, and their median pairs the rounds.
            # The read loop's range over the same rounds says how far the host's bandwidth
            # moved while they ran.
            ratios = row["decode_round_ratios"]
            cells.append(f"  (rounds {min(ratios):.2f}-{max(ratios):.2f}, paired "
                         f"{row['decode_paired_ratio']:.2f}x; read loop "
                         f"{min(round_bandwidth) / 1e9:.0f}-{max(round_bandwidth) / 1e9:.0f} "
                         "GB/s)")
        print(f"{name:<44} {threads:>3} {label:<12} " + " ".join(cells), flush=True)
        results.append(row)


# ---------------------------------------------------------------------------------------------
# 3. Serving


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError("server did not become ready")


def stream_completion(port, prompt, max_tokens):
    """One streamed completion: (start, first token, end) as perf_counter times, and the
    completion and prompt tokens of its usage."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "temperature": 0, "ignore_eos": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first = None
    tokens = prompt_tokens = 0
    with urllib.request.urlopen(req, timeout=900) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            j = json.loads(data)
            if first is None and j.get("choices") and j["choices"][0].get("text"):
                first = time.perf_counter()
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
                prompt_tokens = j["usage"].get("prompt_tokens", 0)
    end = time.perf_counter()
    return start, first if first is not None else end, end, tokens, prompt_tokens


def tokens_in_window(record, w0, w1):
    """The completion tokens of one request that arrived within [w0, w1]: the first at its first
    token time, the rest spread evenly up to its end."""
    _, first, end, n = record[:4]
    if n <= 0:
        return 0.0
    count = 1.0 if w0 <= first <= w1 else 0.0
    if n > 1 and end > first:
        overlap = max(0.0, min(end, w1) - max(first, w0))
        count += (n - 1) * overlap / (end - first)
    return count


def serve_prompt(k, words_per_prompt):
    """Request k's prompt: random words from a small vocabulary, seeded by k (never repeated)."""
    rng = random.Random(1000003 * k + 7)
    words = ("the cat dog sun tree house river small big happy sad ran jumped saw friend day "
             "little girl boy played park ball").split()
    return " ".join(rng.choice(words) for _ in range(words_per_prompt))


def load_level(port, clients, seconds, warmup, max_tokens, words_per_prompt):
    """`clients` closed-loop streaming clients. They start requests until warmup + seconds have
    passed, then finish the ones in flight. Output tokens/s counts only the tokens that arrived
    in the window [warmup, warmup + seconds] (steady state: no ramp-up, no tail of the last
    requests); TTFT percentiles are over the requests that started in that window."""
    lock = threading.Lock()
    records = []
    t0 = time.perf_counter()
    w0, w1 = t0 + warmup, t0 + warmup + seconds

    def client(i):
        k = clients * 1_000_000 + i  # unique across levels too
        while time.perf_counter() < w1:
            rec = stream_completion(port, serve_prompt(k, words_per_prompt), max_tokens)
            k += clients
            with lock:
                records.append(rec)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tokens = sum(tokens_in_window(r, w0, w1) for r in records)
    ttfts = sorted(r[1] - r[0] for r in records if w0 <= r[0] <= w1) or \
        sorted(r[1] - r[0] for r in records)
    ended = sum(1 for r in records if w0 <= r[2] <= w1)
    # The prompt's length in tokens, as the engine counted it (both read the file's vocabulary):
    # with a vocabulary that lacks whole words a word is several tokens, and the load leans to
    # prefill.
    prompts = [r[4] for r in records if r[4] > 0]
    prompt_tokens = statistics.mean(prompts) if prompts else 0.0

    def pct(p):
        return ttfts[min(len(ttfts) - 1, int(round(p / 100 * (len(ttfts) - 1))))]
    return {"clients": clients, "requests": len(records), "output_tokens": tokens,
            "seconds": seconds, "output_tokens_per_second": tokens / seconds,
            "requests_per_second": ended / seconds, "prompt_tokens_per_request": prompt_tokens,
            "ttft_p50": pct(50), "ttft_p99": pct(99)}


def run_server(command, levels, a, engine, round_index, results):
    """Starts one engine's server, loads it at each level in turn, stops it; returns its records
    by level."""
    port = free_port()
    proc = subprocess.Popen(command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    by_level = {}
    try:
        wait_ready(port, proc)
        stream_completion(port, serve_prompt(-1, a.serve_prompt_words), 4)  # warm-up
        for clients in levels:
            r = load_level(port, clients, a.serve_seconds, a.serve_warmup, a.serve_max_tokens,
                           a.serve_prompt_words)
            r["engine"], r["round"] = engine, round_index
            by_level[clients] = r
            print(f"serve round {round_index + 1} {engine:<10} {clients:>3} clients: "
                  f"{r['output_tokens_per_second']:7.1f} output tok/s, "
                  f"{r['requests_per_second']:6.2f} req/s "
                  f"({r['prompt_tokens_per_request']:.0f} prompt tokens each), "
                  f"TTFT p50 {r['ttft_p50']:6.2f} s p99 {r['ttft_p99']:6.2f} s", flush=True)
            results.append(r)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return by_level


def measure_serving(a, results):
    """--serve-rounds rounds that alternate the engines (ours first in odd rounds, llama.cpp
    first in even ones, as the single-sequence rounds do); prints each level's medians over the
    rounds and the ratio of the medians, and each round's own ratio (the spread between rounds
    is this machine's noise)."""
    levels = [int(c) for c in a.concurrency.split(",")]
    # Room for a word of up to 8 tokens (a vocabulary without whole words falls back to bytes).
    ctx_per_slot = 8 * a.serve_prompt_words + a.serve_max_tokens + 64
    servers = {
        "ours": lambda port: [a.undercurrent, "serve", "--model", a.serve, "--port", str(port),
                              "--threads", str(a.serve_threads), "--matmul", a.serve_matmul,
                              "--max-num-seqs", str(max(levels)),
                              "--kv-cache-memory", a.serve_kv_memory],
        "llama.cpp": lambda port: [a.llama_server, "-m", a.serve, "--port", str(port),
                                   "-t", str(a.serve_threads), "-tb", str(a.serve_threads),
                                   "-np", str(max(levels)), "-c", str(ctx_per_slot * max(levels)),
                                   "-cb", "--no-webui"],
    }
    rounds = []  # [{engine: {clients: record}}]
    for i in range(a.serve_rounds):
        order = list(servers) if i % 2 == 0 else list(reversed(servers))
        rounds.append({e: run_server(servers[e], levels, a, e, i, results) for e in order})

    def median(engine, clients, key):
        return statistics.median(r[engine][clients][key] for r in rounds)
    print(f"# serving, medians of {a.serve_rounds} interleaved rounds")
    print(f"{'clients':>7} {'output tok/s ours/theirs':>25} {'x':>6} {'x each round':>20} "
          f"{'TTFT p50 ours/theirs':>21} {'TTFT p99 ours/theirs':>21} "
          f"{'prompt tok/req ours/theirs':>27}")
    for clients in levels:
        o = median("ours", clients, "output_tokens_per_second")
        t = median("llama.cpp", clients, "output_tokens_per_second")
        each = ",".join(f"{r['ours'][clients]['output_tokens_per_second'] / theirs:.2f}"
                        for r in rounds
                        for theirs in [r["llama.cpp"][clients]["output_tokens_per_second"]])

        def pair(key):
            return f"{median('ours', clients, key):.2f}/{median('llama.cpp', clients, key):.2f}"
        p50, p99 = pair("ttft_p50"), pair("ttft_p99")
        prompts = "/".join(f"{median(e, clients, 'prompt_tokens_per_request'):.0f}"
                           for e in ("ours", "llama.cpp"))
        print(f"{clients:>7} {o:>12.1f}/{t:<12.1f} {o / t:>6.2f} {each:>20} {p50:>21} {p99:>21} "
              f"{prompts:>27}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--undercurrent", required=True, help="path of the undercurrent binary")
    ap.add_argument("--model", action="append", default=[], help="GGUF file (repeatable)")
    ap.add_argument("--quantize-from", help="F32/F16 GGUF to make --types from, both ways")
    ap.add_argument("--types", default="f16,bf16,q8_0,q4_0,q4_1,q4_k_m,q5_k_m,q6_k")
    ap.add_argument("--work-dir", default="build/vs_llamacpp", help="where made files go")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefill", default="128,512",
                    help="prompt lengths (decode follows the first)")
    ap.add_argument("--decode", type=int, default=128, help="generated tokens")
    ap.add_argument("--decode-only", action="append", default=[],
                    help="GGUF measured with --decode only (a short prompt): large models")
    ap.add_argument("--matmul", default="exact,int8",
                    help="our modes to measure (exact, the default path, and int8)")
    ap.add_argument("--serve", help="GGUF for the serving comparison")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--serve-seconds", type=float, default=120,
                    help="measured window per concurrency level (after --serve-warmup)")
    ap.add_argument("--serve-rounds", type=int, default=3,
                    help="serving rounds, the engines alternating (medians reported)")
    ap.add_argument("--serve-warmup", type=float, default=30,
                    help="seconds of load before the window opens (ramp-up not counted)")
    ap.add_argument("--serve-max-tokens", type=int, default=64)
    ap.add_argument("--serve-prompt-words", type=int, default=32)
    ap.add_argument("--serve-threads", type=int, default=2)
    ap.add_argument("--serve-matmul", default="int8")
    ap.add_argument("--serve-kv-memory", default="2GiB")
    ap.add_argument("--llm-bench", help="llm_bench binary (default: beside --undercurrent)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--llamacpp-no-repack", action="store_true",
                    help="llama.cpp without its extra buffer types (weight repacking, AMX): "
                         "for builds that crash on a model with them; say so beside the numbers")
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    LlamaCpp.extra_bufts = not a.llamacpp_no_repack
    if not a.llm_bench:
        a.llm_bench = os.path.join(os.path.dirname(a.undercurrent), "llm_bench")
    import llama_cpp

    info = {"machine": platform.machine(), "cpu_flags": cpu_flags(),
            "llama_cpp_python": llama_cpp.__version__,
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "rounds": a.rounds, "prefill": a.prefill, "decode": a.decode,
            "llama_cpp_extra_bufts": LlamaCpp.extra_bufts}
    print(f"# CPU flags: {' '.join(info['cpu_flags'])}")
    print(f"# llama.cpp (llama-cpp-python {info['llama_cpp_python']}): "
          f"{info['llama_cpp_system_info']}"
          f"{'' if LlamaCpp.extra_bufts else ' (extra buffer types off: --llamacpp-no-repack)'}")
    out = {"info": info, "quantize": [], "single": [], "serving": []}
    models = list(a.model)
    if a.quantize_from:
        os.makedirs(a.work_dir, exist_ok=True)
        for qtype in a.types.split(","):
            ours, theirs, report = quantize_both(a.undercurrent, a.quantize_from, qtype, a.work_dir)
            report["type"] = qtype
            out["quantize"].append(report)
            print(f"# quantize {qtype}: {report['same_type']}/{report['tensors']} tensors of "
                  f"llama.cpp's type, {report['same_bytes']} byte-identical; ours "
                  f"{report['ours_seconds']:.1f} s, llama.cpp "
                  + (f"{report['llamacpp_seconds']:.1f} s" if report["llamacpp_seconds"]
                     else "(an earlier run's file)")
                  + (f"; e.g. {report['differing'][:3]}" if report["differing"] else ""),
                  flush=True)
            models.append(theirs)
    modes = a.matmul.split(",")
    if models or a.decode_only:
        print(f"# single sequence, medians of {a.rounds} interleaved rounds: tokens/s and "
              f"ours / llama.cpp")
        prefills = a.prefill.split(",")
        print(f"{'model':<44} {'thr':>3} {'engine':<12} " +
              " ".join(f"{'prefill ' + p:>16}" for p in prefills) + f" {'decode':>16}")
        for threads in [int(t) for t in a.threads.split(",")]:
            for model in models:
                measure_single(a, model, threads, modes, out["single"])
        saved = a.prefill
        a.prefill = "16"
        if a.decode_only:
            print(f"{'model (decode only: a 16-token prompt)':<44} {'thr':>3} {'engine':<12} "
                  f"{'prefill 16':>16} {'decode':>16}")
        for model in a.decode_only:
            for threads in [int(t) for t in a.threads.split(",")]:
                measure_single(a, model, threads, modes, out["single"])
        a.prefill = saved
        threads = [int(t) for t in a.threads.split(",")]
        # The best the read loop reached in any round: the host's bandwidth drifts, and the
        # highest it showed is the honest ceiling (a lower one would flatter every fraction).
        bandwidth = {t: max(BANDWIDTH_SAMPLES[t]) for t in threads}
        info["read_bandwidth_gb_s"] = {t: b / 1e9 for t, b in bandwidth.items()}
        info["read_bandwidth_samples_gb_s"] = {t: [b / 1e9 for b in BANDWIDTH_SAMPLES[t]]
                                               for t in threads}
        for t in threads:
            samples = BANDWIDTH_SAMPLES[t]
            print(f"# read bandwidth, {t} thread(s): best {max(samples) / 1e9:.2f} GB/s of "
                  f"{len(samples)} rounds (median {statistics.median(samples) / 1e9:.2f}, "
                  f"lowest {min(samples) / 1e9:.2f})")
        model_bytes = {os.path.basename(m): bytes_per_token(m) for m in models + a.decode_only}
        print("# decode roofline: fraction of max(measured read bandwidth, every engine's "
              "implied decode bandwidth)")
        for line in roofline(out["single"], bandwidth, model_bytes):
            print(line)
        peaks = measured_peaks(a.llm_bench, threads)
        info["compute_peaks_gops"] = {t: {k: v / 1e9 for k, v in p.items()}
                                      for t, p in peaks.items()}
        longest = max(int(p) for p in a.prefill.split(","))
        work = {os.path.basename(m): matmul_work(m) for m in models}
        print(f"# prefill {longest} compute roofline: matmul work x tokens/s over the best peak "
              "(GOP/s) of the multiply-add kind the format runs on; attention not counted, so "
              "fractions are lower bounds and the ratio ceiling (1 / llama.cpp's fraction) an "
              "upper bound")
        for line in compute_roofline(out["single"], peaks, work, longest):
            print(line)
    if a.serve:
        if not a.llama_server:
            sys.exit("--serve needs --llama-server (llama.cpp's server binary)")
        measure_serving(a, out["serving"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
