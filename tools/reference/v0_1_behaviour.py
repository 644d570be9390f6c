#!/usr/bin/env python3
"""What Undercurrent v0.1 itself does where a migrating user compares it with us.

Produces tests/testdata/v0_1/ (or --out):
  running_mean.json   v0.1's TrajectoryScoreProbe (our built-in `running_mean`) on sequences of
                      activations: every signal it emits (as its sinks log them: action,
                      confidence, metadata) and its result (verdict, metadata)
  validate.json       `undercurrent validate FILE` and `undercurrent validate --strict FILE`
                      on every spec of tests/testdata/spec_compat/ (run in that folder, so paths
                      are the bare file names): the exit code and the text printed (exit null
                      where v0.1 itself crashed, with the exception as the text)
  inspect_model.json  `undercurrent inspect-model DIR --format json` on the bundled Hugging Face
                      checkpoints (only their config.json is read), with and without the flags
                      --backend, --trust-remote-code and --revision; each run's exit code and
                      report

Requirements: pip install 'undercurrent==0.1.*' torch transformers (inspect-model builds the
model on torch's meta device; nothing else needs torch). Tested with undercurrent 0.1.0,
torch 2.9, transformers 4.57 on Python 3.11.
Usage: python3 tools/reference/v0_1_behaviour.py [--out DIR]
Deterministic apart from the versions recorded in each file's "meta".
"""

import argparse
import contextlib
import io
import json
import os
import pathlib
import sys

import undercurrent
from undercurrent.cli import main as cli_main
from undercurrent.core.context import RequestContext
from undercurrent.core.examples.trajectory_score import TrajectoryScoreProbe
from undercurrent.sinks.serialize import to_jsonable
from undercurrent.spec import ActivationRecord

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "testdata" / "spec_compat"


def meta():
    versions = {"generator": "tools/reference/v0_1_behaviour.py",
                "undercurrent": undercurrent.__version__,
                "python": ".".join(map(str, sys.version_info[:3]))}
    for name in ("torch", "transformers", "pydantic", "yaml"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            pass
    return versions


def run_cli(argv, cwd):
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_main(argv)
            except SystemExit as e:  # argparse usage errors
                code = e.code
            except Exception as e:  # v0.1 crashes on a few inputs (an uncaught PyYAML error)
                code = None
                print(f"crashed: {type(e).__name__}: {e}")
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()


# Activations as lists of floats; TrajectoryScoreProbe scores each by its mean.
RUNNING_MEAN_CASES = [
    {"name": "crosses_at_third", "threshold": 0.8,
     "activations": [[0.5, 0.5], [1.0, 0.8], [1.2, 1.2], [0.0, 0.0]]},
    {"name": "never_crosses", "threshold": 2.0,
     "activations": [[1.0, 3.0, -1.0], [0.25, 0.25, 0.25]]},
    {"name": "crosses_at_first", "threshold": 0.5, "activations": [[0.75], [0.0], [2.0]]},
    {"name": "no_activations", "threshold": 0.8, "activations": []},
]


def running_mean():
    cases = []
    for case in RUNNING_MEAN_CASES:
        probe = TrajectoryScoreProbe.spawn("r", "traj", threshold=case["threshold"])
        ctx = RequestContext(request_id="r", prompt_metadata={}, extraction_point_config=None)
        probe.on_start(ctx)
        signals = []
        for i, values in enumerate(case["activations"]):
            record = ActivationRecord(request_id="r", extraction_point_name="traj", layer=0,
                                      token_pos=i, tensor_type="residual_stream", tensor=values,
                                      is_generated=True)
            signal = probe.on_activation(record)
            if signal is not None:
                logged = to_jsonable(signal)
                signals.append({"index": i, "action": logged["action"],
                                "confidence": logged["confidence"],
                                "metadata": logged["metadata"]})
        result = to_jsonable(probe.on_end(ctx))
        cases.append({**case, "signals": signals, "verdict": result["verdict"],
                      "result_metadata": result["metadata"]})
    return {"meta": meta(), "cases": cases}


def validate():
    files = sorted(p.name for p in CORPUS.iterdir() if p.suffix in (".yaml", ".json")
                   and p.name != "manifest.json")
    cases = []
    for name in files:
        code, text, _ = run_cli(["validate", name], CORPUS)
        strict_code, strict_text, _ = run_cli(["validate", "--strict", name], CORPUS)
        cases.append({"file": name, "exit": code, "text": text,
                      "strict_exit": strict_code, "strict_text": strict_text})
    return {"meta": meta(), "cases": cases}


INSPECT_RUNS = [
    [],
    ["--backend", "hf"],
    ["--backend", "vllm"],
    ["--trust-remote-code"],
    ["--revision", "main"],
]


def inspect_model():
    runs = []
    for model in ("stories260K-hf", "tiny-gqa2/hf"):
        for flags in INSPECT_RUNS:
            argv = ["inspect-model", model, "--format", "json", *flags]
            code, text, err = run_cli(argv, ROOT / "tests" / "testdata")
            runs.append({"model": model, "flags": flags, "exit": code,
                         "report": json.loads(text) if code == 0 else None,
                         "stderr": err if code != 0 else ""})
    return {"meta": meta(), "runs": runs}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "tests" / "testdata" / "v0_1"))
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, make in (("running_mean", running_mean), ("validate", validate),
                       ("inspect_model", inspect_model)):
        with open(out / f"{name}.json", "w", encoding="utf-8") as f:
            json.dump(make(), f, indent=1, sort_keys=False, ensure_ascii=False)
            f.write("\n")
        print(f"wrote {out / (name + '.json')}")


if __name__ == "__main__":
    main()
