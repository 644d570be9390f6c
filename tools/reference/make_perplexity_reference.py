#!/usr/bin/env python3
"""llama.cpp's perplexity on tests/testdata/perplexity/stories.txt (the bar for
`undercurrent perplexity`).

llama.cpp's perplexity tool (tools/perplexity, the default mode) is not part of the PyPI package
llama-cpp-python, so this script runs its method on llama.cpp's own tokenizer and logits through
the package's API: the whole text tokenized once with llama.cpp's `add_special` (BOS when the
vocabulary adds one); floor(n / ctx) chunks of ctx tokens, each evaluated from an empty cache with
its first token replaced by BOS (when added); the log-softmax of the next token at positions
[ctx / 2, ctx - 1) of each chunk (max logit in float32, sum of exp in float64, as
`log_softmax` in perplexity.cpp); PPL = exp(mean NLL) and its standard error as the tool prints.

With --llama-perplexity BIN it also runs llama.cpp's perplexity tool itself (`BIN -m MODEL -f
TEXT -c CTX -b CTX -t 2`, built from the llama.cpp sources the package vendors) and records
its final estimate as `tool_ppl` / `tool_ppl_stderr`. The two builds need not agree: the
package's repacks Q4_0 / Q4_K weights into interleaved rows and multiplies them with other
kernels (its system_info lists REPACK), which moves Gemma 3's perplexity by about 1%.

Output: tests/testdata/perplexity/reference.json, read by tests/integration/perplexity_test.cc:
per model (the sha256 of its GGUF) and context, llama.cpp's token count, chunk count, scored
tokens, PPL, its standard error and the running PPL after every chunk (and the tool's PPL).
llama.cpp's logits depend on the CPU paths it was built with: `meta.system_info` and
`meta.tool_system_info` record them.

Models: tests/testdata/stories260K/stories260K.gguf (committed), SmolLM2-135M-Instruct Q4_1
($UC_SMOLLM2_GGUF or build/models/smollm2/, from scripts/fetch-smollm2.sh) and Gemma 3 270M
Q4_K_M ($UC_GEMMA3_GGUF or build/models/gemma3/, from scripts/fetch-gemma3.sh); a model that is
not there is left out with a note.

Usage: python3 tools/reference/make_perplexity_reference.py [--llama-perplexity BIN]  (~2 min)
Requires: llama-cpp-python, numpy.
"""
import math
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = os.path.join(ROOT, "tests/testdata/perplexity/stories.txt")
OUT = os.path.join(ROOT, "tests/testdata/perplexity/reference.json")

MODELS = [
    ("stories260K", os.path.join(ROOT, "tests/testdata/stories260K/stories260K.gguf"), [64, 128]),
    ("smollm2", os.environ.get("UC_SMOLLM2_GGUF",
                               os.path.join(ROOT, "build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")),
     [128]),
    ("gemma3", os.environ.get("UC_GEMMA3_GGUF",
                              os.path.join(ROOT, "build/models/gemma3/gemma-3-270m-q4_k_m.gguf")),
     [128]),
]


def log_softmax_nll(logits, token):
    max_logit = np.float32(logits.max())
    sum_exp = float(np.sum(np.exp((logits - max_logit).astype(np.float32)), dtype=np.float64))
    return -(float(np.float32(logits[token] - max_logit)) - math.log(sum_exp))


def perplexity(llama_cpp, path, text, ctx):
    llm = llama_cpp.Llama(model_path=path, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx, logits_all=True,
                          n_threads=2, seed=0, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    bos = llama_cpp.llama_vocab_bos(vocab)
    tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    n_chunks = len(tokens) // ctx
    first = ctx // 2
    nll = nll2 = 0.0
    count = 0
    running = []
    for c in range(n_chunks):
        chunk = list(tokens[c * ctx:(c + 1) * ctx])
        if add_bos:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        scores = np.asarray(llm.scores[:ctx], dtype=np.float32)
        for j in range(first, ctx - 1):
            v = log_softmax_nll(scores[j], tokens[c * ctx + j + 1])
            nll += v
            nll2 += v * v
            count += 1
        running.append(math.exp(nll / count))
    mean = nll / count
    ppl = math.exp(mean)
    var = nll2 / count - mean * mean
    stderr = math.sqrt(var / (count - 1)) * ppl if var > 0 else 0.0
    return {"context": ctx, "add_bos": add_bos, "tokens": len(tokens), "chunks": n_chunks,
            "scored_tokens": count, "ppl": ppl, "ppl_stderr": stderr, "running_ppl": running}


def run_tool(binary, path, ctx):
    """llama-perplexity's final estimate and system_info line."""
    out = subprocess.run([binary, "-m", path, "-f", TEXT, "-c", str(ctx), "-b", str(ctx), "-t", "2"],
                         capture_output=True, text=True, check=True)
    text = out.stdout + out.stderr
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
    if m is None:
        raise RuntimeError(f"{binary} printed no final estimate for {path}")
    info = re.search(r"system_info: (.*)", text)
    return float(m.group(1)), float(m.group(2)), info.group(1).strip() if info else ""


def main():
    import argparse
    import llama_cpp

    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-perplexity", help="llama.cpp's perplexity tool")
    args = ap.parse_args()
    tool_info = ""

    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    models = {}
    notes = []
    for name, path, contexts in MODELS:
        if not os.path.exists(path):
            notes.append(f"{name}: {path} not found, left out")
            continue
        models[name] = {"sha256": refutil.sha256_file(path), "file": os.path.basename(path),
                        "runs": [perplexity(llama_cpp, path, text, ctx) for ctx in contexts]}
        for r in models[name]["runs"]:
            if args.llama_perplexity:
                r["tool_ppl"], r["tool_ppl_stderr"], tool_info = run_tool(args.llama_perplexity,
                                                                          path, r["context"])
            print(f"{name} ctx {r['context']}: {r['tokens']} tokens, PPL {r['ppl']:.4f} "
                  f"+/- {r['ppl_stderr']:.5f}, tool {r.get('tool_ppl')}")
    meta = refutil.versions("llama_cpp_python")
    meta["system_info"] = llama_cpp.llama_print_system_info().decode()
    meta["tool_system_info"] = tool_info
    meta["text_sha256"] = refutil.sha256_file(TEXT)
    meta["notes"] = notes
    refutil.dump_json({"meta": meta, "models": models}, OUT)


if __name__ == "__main__":
    main()
