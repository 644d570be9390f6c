"""LLM.calibrate is `undercurrent calibrate` from Python: for the same model, spec and prompts
file it returns (and writes) the calibrated spec file the CLI writes, byte for byte, and the
same per-point report; measure=True gives `calibrate --measure`'s rates. The oracle is the CLI
run on the same inputs."""

from __future__ import annotations

import json
import random
import subprocess

import numpy as np
import pytest

from undercurrent import LLM, ProbingError

WORDS = ("once upon a time there was little girl named lily who lived in small house near the woods "
         "with her mother dog max every morning she went out to play garden").split()


def write_inputs(tmp_path):
    rng = np.random.default_rng(11)
    (tmp_path / "direction.json").write_text(json.dumps({"weight": (rng.normal(0, 0.125, 64)).tolist()}))
    (tmp_path / "spec.yaml").write_text("""version: "1"
extraction_points:
  - name: direction
    layers: [4]
    tensor_type: residual_stream
    position: generated[*]
    probe_type: linear
    probe_kind: single_shot
    probe_args: {weights: direction.json, action: flag}
  - name: monitor
    layers: [2]
    tensor_type: residual_stream
    position: generated[*]
    probe_type: ema_max
    probe_kind: trajectory
    probe_args: {weights: direction.json, alpha: 0.3, action: flag}
""")
    r = random.Random(1)
    with open(tmp_path / "fit.jsonl", "w") as f:
        for i in range(40):
            prompt = " ".join(r.choice(WORDS) for _ in range(r.randint(3, 9)))
            f.write(json.dumps({"id": f"fit-{i}", "prompt": prompt}) + "\n")


def cli_json(cli, *args):
    out = subprocess.run([cli, *args, "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_calibrate_writes_the_file_the_cli_writes(tiny_model, cli, tmp_path):
    write_inputs(tmp_path)
    spec, prompts = tmp_path / "spec.yaml", tmp_path / "fit.jsonl"
    want = cli_json(cli, "calibrate", "--model", tiny_model, "--spec", str(spec), "--prompts", str(prompts),
                    "--max-tokens", "8", "--target-fpr", "0.1", "--out", str(tmp_path / "cli.yaml"))
    with LLM(tiny_model, threads=1) as llm:
        got = llm.calibrate(str(prompts), str(spec), target_fpr=0.1, max_tokens=8, out=tmp_path / "py.yaml")
        measured = llm.calibrate(str(prompts), str(tmp_path / "py.yaml"), measure=True, max_tokens=8)
    assert (tmp_path / "py.yaml").read_text() == (tmp_path / "cli.yaml").read_text()
    assert got.spec_file == (tmp_path / "cli.yaml").read_text()
    assert got.points == want["points"]
    assert got.requests == 40 and got.model == want["model"]
    assert set(got.thresholds) == {"direction", "monitor"}
    cli_measured = cli_json(cli, "calibrate", "--model", tiny_model, "--spec", str(tmp_path / "py.yaml"),
                            "--prompts", str(prompts), "--max-tokens", "8", "--measure")
    assert measured.points == cli_measured["points"]
    assert all(p["flagged"] == 4 for p in measured.points)  # floor(0.1 x 40) on the fitting prompts


def test_calibrate_takes_a_list_of_prompts(tiny_model, tmp_path):
    write_inputs(tmp_path)
    prompts = [json.loads(line)["prompt"] for line in (tmp_path / "fit.jsonl").read_text().splitlines()]
    with LLM(tiny_model, threads=1) as llm:
        from_list = llm.calibrate(prompts, str(tmp_path / "spec.yaml"), target_fpr=0.1, max_tokens=8)
        from_file = llm.calibrate(str(tmp_path / "fit.jsonl"), str(tmp_path / "spec.yaml"), target_fpr=0.1,
                                  max_tokens=8)
    assert from_list.thresholds == from_file.thresholds
    assert "40 prompts given in Python" in from_list.spec_file


@pytest.mark.parametrize("kwargs, match", [
    ({"target_fpr": 0.0}, "target_fpr"),
    ({"target_fpr": 1.5}, "target_fpr"),
    ({}, "target_fpr"),
    ({"measure": True, "target_fpr": 0.1}, "measure"),
])
def test_calibrate_bad_arguments_name_the_field(tiny_model, tmp_path, kwargs, match):
    write_inputs(tmp_path)
    with LLM(tiny_model, threads=1) as llm:
        with pytest.raises(ProbingError, match=match):
            llm.calibrate(str(tmp_path / "fit.jsonl"), str(tmp_path / "spec.yaml"), **kwargs)


def test_calibrate_a_bad_prompts_file_names_file_and_line(tiny_model, tmp_path):
    write_inputs(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"id": 1, "prompt": "a"}\n{"id": 2, "promt": "b"}\n')
    with LLM(tiny_model, threads=1) as llm:
        with pytest.raises(ProbingError, match=r"bad.jsonl:2"):
            llm.calibrate(str(tmp_path / "bad.jsonl"), str(tmp_path / "spec.yaml"), target_fpr=0.1)
        assert llm.generate("Once upon a time")[0].outputs[0].token_ids  # still usable
