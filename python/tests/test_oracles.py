"""Oracles on the real chat model (SmolLM2-135M GGUF, label `model`): a Python probe's records
and `LLM.capture`'s arrays equal `undercurrent capture`'s rows bit for bit; an inline Python ABORT at generated[3] returns
exactly 4 tokens; the built-in probes give the same verdicts from Python as `generate --spec`."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from oracle_probes import AbortAt3, Keep
from undercurrent import LLM, ProbedModel, SamplingParams

pytestmark = pytest.mark.model

PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "2 + 2 ="]
LAYERS = [3, 17]


def spec_yaml(probe_type, extra=""):
    return (
        'version: "1"\nextraction_points:\n'
        f"  - {{name: p, layers: {LAYERS}, tensor_type: residual_stream, position: 'generated[*]',\n"
        f"     probe_type: {probe_type}, probe_kind: {'trajectory' if probe_type == 'keep' else 'single_shot'}{extra}}}\n"
        f"  - {{name: last, layers: {LAYERS}, tensor_type: residual_stream, position: 'prompt[-1]',\n"
        f"     probe_type: {probe_type}, probe_kind: {'trajectory' if probe_type == 'keep' else 'single_shot'}{extra}}}\n"
    )


def write_prompts(path, n_tokens):
    with open(path, "w") as f:
        for i, p in enumerate(PROMPTS):
            f.write(json.dumps({"id": f"p{i}", "prompt": p, "max_tokens": n_tokens, "temperature": 0}) + "\n")


def test_python_probe_records_equal_capture_rows_bit_for_bit(smollm2, cli, root, tmp_path):
    (tmp_path / "spec.yaml").write_text(spec_yaml("norm_gate", ", probe_args: {threshold: 1000000000.0}"))
    write_prompts(tmp_path / "prompts.jsonl", 6)
    subprocess.run(
        [cli, "capture", "--model", smollm2, "--spec", str(tmp_path / "spec.yaml"), "--prompts",
         str(tmp_path / "prompts.jsonl"), "--out", str(tmp_path / "acts"), "--threads", "2"],
        check=True, capture_output=True, text=True,
    )
    sys.path.insert(0, str(root / "examples"))
    try:
        from undercurrent_dataset import Dataset
    finally:
        sys.path.pop(0)
    ds = Dataset(str(tmp_path / "acts"))
    with ProbedModel.from_pretrained(smollm2, spec=spec_yaml("keep"), probes={"keep": Keep}, threads=2) as model:
        outs = model.generate(PROMPTS, max_new_tokens=6, temperature=0.0)
    compared = 0
    for i, out in enumerate(outs):
        for point in ("p", "last"):
            ours = out.probe_results[point].verdict
            rows = ds.rows(prompt_index=i, point=point)
            assert [(r["token_pos"], r["layer"]) for r in rows] == [(pos, layer) for pos, layer, _ in ours]
            theirs = ds.activations(rows)
            for k, (_, _, tensor) in enumerate(ours):
                assert np.array_equal(tensor, theirs[k]), (i, point, k)
                compared += 1
    assert compared == len(PROMPTS) * (6 + 1) * len(LAYERS)  # every generated token, the last prompt one
    # LLM.capture gives the dataset's rows, in its order, bit for bit.
    with LLM(smollm2, threads=2) as llm:
        acts = llm.capture(PROMPTS, str(tmp_path / "spec.yaml"), SamplingParams(max_tokens=6, temperature=0.0))
    rows = ds.rows()
    assert [(int(i), acts.points[p], int(layer), int(pos)) for i, p, layer, pos in
            zip(acts.prompt_index, acts.point, acts.layer, acts.token_pos)] == \
        [(r["prompt_index"], r["point"], r["layer"], r["token_pos"]) for r in rows]
    assert np.array_equal(acts.values, ds.activations(rows))


def test_inline_python_abort_at_generated_3_returns_exactly_4_tokens(smollm2):
    spec = spec_yaml("gate").split("  - {name: last")[0]
    with ProbedModel.from_pretrained(smollm2, spec=spec, probes={"gate": AbortAt3}, threads=2) as model:
        outs = model.generate(PROMPTS, max_new_tokens=16, temperature=0.0, ignore_eos=True)
        plain = model.generate(PROMPTS[0], max_new_tokens=16, temperature=0.0, ignore_eos=True)
    for out in outs:
        assert out.aborted and len(out.token_ids) == 4 and out.abort_point == "p"
    assert outs[0].token_ids == plain.token_ids[:4]


def test_builtin_verdicts_equal_generate_spec(smollm2, cli, tmp_path):
    spec = spec_yaml("norm_gate", ", probe_args: {threshold: 40.0, action: flag}")
    (tmp_path / "spec.yaml").write_text(spec)
    write_prompts(tmp_path / "prompts.jsonl", 8)
    run = subprocess.run(
        [cli, "generate", "--model", smollm2, "--spec", str(tmp_path / "spec.yaml"), "--prompts",
         str(tmp_path / "prompts.jsonl"), "--json", "--threads", "2"],
        check=True, capture_output=True, text=True,
    )
    cli_verdicts = {}
    for line in run.stdout.splitlines():
        j = json.loads(line)
        rid = j.get("request_id", j.get("id"))
        cli_verdicts[rid] = {name: v["verdict"] for name, v in j["probing"].items()}
    with ProbedModel.from_pretrained(smollm2, spec=str(tmp_path / "spec.yaml"), threads=2) as model:
        outs = model.generate(PROMPTS, max_new_tokens=8, temperature=0.0)
    for i, out in enumerate(outs):
        ours = {name: r.verdict for name, r in out.probe_results.items()}
        assert ours == cli_verdicts[f"p{i}"], i
