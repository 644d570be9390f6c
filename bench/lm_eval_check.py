#!/usr/bin/env python3
"""lm-evaluation-harness against `undercurrent serve`, beside lm-eval's own `hf` model (not a test).

Runs the two local tasks of bench/lm_eval/ (no hub: a loglikelihood task, `uc_multiple_choice`,
and a generate-until task, `uc_generate`, both read from JSONL files) twice:
  1. `--model local-completions` against `undercurrent serve --model DIR` started here on a free
     loopback port (the harness sends token ids and reads `logprobs` / `echo`);
  2. `--model hf` (transformers, F32, CPU) on the same Hugging Face directory;
then compares, document by document, the answer each chose (the argmax of the choices'
log-likelihoods; the generated text) and prints both accuracies, the agreements, and the largest
difference between the two log-likelihoods of any choice.

Needs lm-eval (PyPI `lm-eval`), torch and transformers in the Python that runs it; the engine
needs none of them. A GGUF-only model can be turned into a Hugging Face directory with
transformers (`from_pretrained(dir, gguf_file=...)`, then `save_pretrained`).

Example (SmolLM2-135M-Instruct as an F32 Hugging Face directory):
  python bench/lm_eval_check.py --binary build/ci/bin/undercurrent --model MODEL_DIR
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

from serve_process import ServeProcess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TASKS = ["uc_multiple_choice", "uc_generate"]


def run_lm_eval(model, model_args, out_dir, limit):
    cmd = [sys.executable, "-m", "lm_eval", "--model", model, "--model_args", model_args,
           "--tasks", ",".join(TASKS), "--include_path", os.path.join(HERE, "lm_eval"),
           "--log_samples", "--output_path", out_dir, "--batch_size", "1"]
    if model == "hf":
        cmd += ["--device", "cpu"]
    if limit:
        cmd += ["--limit", str(limit)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def load_samples(out_dir, task):
    files = glob.glob(os.path.join(out_dir, "**", f"samples_{task}_*.jsonl"), recursive=True)
    if not files:
        raise RuntimeError(f"no samples for {task} under {out_dir}")
    with open(sorted(files)[-1]) as f:
        return {s["doc_id"]: s for s in map(json.loads, f)}


def chosen(sample, task):
    if task == "uc_multiple_choice":
        lls = [float(r[0]) for r in sample["filtered_resps"]]
        return lls.index(max(lls)), lls
    return sample["filtered_resps"][0], None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default="build/ci/bin/undercurrent")
    p.add_argument("--model", required=True, help="a Hugging Face model directory")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--limit", type=int, default=0, help="documents per task (0: all)")
    a = p.parse_args()
    model_dir = os.path.abspath(a.model)
    work = tempfile.mkdtemp(prefix="uc-lm-eval-")
    server = ServeProcess(os.path.abspath(a.binary), model_dir,
                          ["--served-model-name", "uc"] +
                          (["--threads", str(a.threads)] if a.threads else []))
    try:
        run_lm_eval("local-completions",
                    f"model=uc,base_url={server.url}/v1/completions,tokenizer_backend=huggingface,"
                    f"tokenizer={model_dir},num_concurrent=4,max_retries=1,timeout=600",
                    os.path.join(work, "serve"), a.limit)
    finally:
        server.stop()
    run_lm_eval("hf", f"pretrained={model_dir},dtype=float32", os.path.join(work, "hf"), a.limit)
    for task in TASKS:
        ours, theirs = load_samples(os.path.join(work, "serve"), task), load_samples(
            os.path.join(work, "hf"), task)
        agree, max_diff = 0, 0.0
        acc = {"serve": 0.0, "hf": 0.0}
        metric = "acc" if task == "uc_multiple_choice" else "exact_match"
        for doc_id, s in ours.items():
            t = theirs[doc_id]
            c_ours, ll_ours = chosen(s, task)
            c_theirs, ll_theirs = chosen(t, task)
            agree += c_ours == c_theirs
            if ll_ours is not None:
                max_diff = max(max_diff, max(abs(x - y) for x, y in zip(ll_ours, ll_theirs)))
            acc["serve"] += s[metric] / len(ours)
            acc["hf"] += t[metric] / len(ours)
        line = (f"{task}: {len(ours)} documents, {metric} serve {acc['serve']:.4f} / hf "
                f"{acc['hf']:.4f}, same answer chosen on {agree}/{len(ours)}")
        if task == "uc_multiple_choice":
            line += f", largest log-likelihood difference {max_diff:.2e}"
        print(line, flush=True)
    print(f"(lm-eval outputs under {work})")


if __name__ == "__main__":
    main()
