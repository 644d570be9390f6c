"""The vLLM-style layer on the bundled tiny model: `LLM.generate` with `SamplingParams`,
`LLM.capture` against `undercurrent capture`'s dataset (bit for bit), per-request steering
from numpy against the HTTP server's steering, and the errors bad input gets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.request

import numpy as np
import pytest

from undercurrent import LLM, ProbedModel, ProbingError, SamplingParams, SpecValidationError

PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to"]
GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
POINTS = [
    {"name": "resid", "layers": [1, 3], "tensor_type": "residual_stream", "position": "generated[*]"},
    {"name": "last", "layers": [4], "tensor_type": "mlp_out", "position": "prompt[-1]"},
]


@pytest.fixture(scope="module")
def llm(tiny_model):
    with LLM(tiny_model, threads=1) as model:
        yield model


def test_generate_returns_request_outputs_in_prompt_order(llm, tiny_model):
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.prompt for o in outs] == PROMPTS
    with ProbedModel.from_pretrained(tiny_model, threads=1) as pm:
        for prompt, out in zip(PROMPTS, outs):
            ref = pm.generate(prompt, max_new_tokens=10, ignore_eos=True)
            (c,) = out.outputs
            assert c.token_ids == ref.token_ids and c.text == ref.text
            assert c.finish_reason == "length" and len(c.token_ids) == 10
            assert out.prompt_token_ids == ref.prompt_token_ids
            assert out.usage == {"prompt_tokens": len(ref.prompt_token_ids), "completion_tokens": 10}


def test_token_id_prompts_and_per_prompt_params(llm):
    (text_out,) = llm.generate(PROMPTS[0], GREEDY)
    ids = text_out.prompt_token_ids
    short = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    by_ids, by_dict = llm.generate([ids, {"prompt_token_ids": ids}], [GREEDY, short])
    assert by_ids.prompt is None
    assert by_ids.outputs[0].token_ids == text_out.outputs[0].token_ids
    assert by_dict.outputs[0].token_ids == text_out.outputs[0].token_ids[:3]


def test_n_completions_are_seeded_and_reproducible(llm):
    params = SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=7, ignore_eos=True)
    (a,) = llm.generate(PROMPTS[0], params)
    (b,) = llm.generate(PROMPTS[0], params)
    assert [c.index for c in a.outputs] == [0, 1, 2]
    assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
    assert len({tuple(c.token_ids) for c in a.outputs}) > 1  # seeds 7, 8, 9 differ
    assert a.usage["completion_tokens"] == 36


def test_stop_strings_end_the_text(llm):
    (plain,) = llm.generate(PROMPTS[0], GREEDY)
    word = plain.outputs[0].text.split()[2]
    (stopped,) = llm.generate(PROMPTS[0], SamplingParams(max_tokens=10, temperature=0.0, stop=[word]))
    c = stopped.outputs[0]
    assert c.finish_reason == "stop" and word not in c.text
    assert plain.outputs[0].text.startswith(c.text)


def test_bad_sampling_params_name_the_field():
    with pytest.raises(ProbingError, match="SamplingParams.max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(TypeError, match="SamplingParams.temperature"):
        SamplingParams(temperature="hot")
    with pytest.raises(TypeError):
        SamplingParams(presence_penalty=0.5)  # not supported by the engine: not accepted


def test_engine_refuses_out_of_range_top_p(llm):
    with pytest.raises(ValueError, match="top_p"):
        llm.generate(PROMPTS[0], SamplingParams(top_p=1.5))


def write_prompts(path, params_json):
    with open(path, "w") as f:
        for i, p in enumerate(PROMPTS):
            f.write(json.dumps({"id": f"p{i}", "prompt": p, **params_json}) + "\n")


def load_dataset(root, path):
    sys.path.insert(0, str(root / "examples"))
    try:
        from undercurrent_dataset import Dataset
    finally:
        sys.path.pop(0)
    return Dataset(str(path))


def test_capture_equals_cli_capture_rows_bit_for_bit(llm, tiny_model, cli, root, tmp_path):
    spec = {"extraction_points": [{**p, "probe_type": "capture", "probe_kind": "trajectory"} for p in POINTS]}
    (tmp_path / "spec.json").write_text(json.dumps({"version": "1", **spec}))
    write_prompts(tmp_path / "prompts.jsonl", {"max_tokens": 6, "temperature": 0})
    subprocess.run(
        [cli, "capture", "--model", tiny_model, "--spec", str(tmp_path / "spec.json"), "--prompts",
         str(tmp_path / "prompts.jsonl"), "--out", str(tmp_path / "acts"), "--threads", "1", "--progress", "none"],
        check=True, capture_output=True, text=True,
    )
    ds = load_dataset(root, tmp_path / "acts")
    acts = llm.capture(PROMPTS, POINTS, SamplingParams(max_tokens=6, temperature=0.0))
    rows = ds.rows()
    assert len(acts) == len(rows) == len(PROMPTS) * (6 * 2 + 1)  # generated[0..5] at 2 layers, prompt[-1]
    for k, r in enumerate(rows):
        ours = (int(acts.prompt_index[k]), acts.points[acts.point[k]], int(acts.layer[k]), int(acts.token_pos[k]),
                bool(acts.is_generated[k]), int(acts.token_id[k]))
        theirs = (r["prompt_index"], r["point"], r["layer"], r["token_pos"], r["is_generated"], r["token_id"])
        assert ours == theirs, k
        assert (r["generated_index"] if r["generated_index"] is not None else -1) == acts.generated_index[k]
    assert acts.values.dtype == np.float32 and acts.values.shape == (len(rows), 64)
    assert np.array_equal(acts.values, ds.activations(rows))  # bit for bit
    # Selecting rows, and the generations that went with them.
    assert acts.get("last").shape == (3, 64) and acts.get("resid", layer=3, prompt_index=1).shape == (6, 64)
    assert [len(o.outputs[0].token_ids) for o in acts.outputs] == [6, 6, 6]


def test_capture_refuses_bad_specs_and_sae_arguments(llm):
    with pytest.raises(SpecValidationError, match="layers"):
        llm.capture(PROMPTS[0], [{**POINTS[0], "layers": [99]}])
    with pytest.raises(SpecValidationError, match="tensor_type"):
        llm.capture(PROMPTS[0], [{**POINTS[0], "tensor_type": "resid"}])
    with pytest.raises(ValueError, match="sae_features"):
        llm.capture(PROMPTS[0], POINTS, sae="somewhere")
    with pytest.raises(ValueError, match="no-such-sae"):
        llm.capture(PROMPTS[0], POINTS, sae="no-such-sae", sae_features=[1])


def test_capture_of_router_logits_equals_cli_capture(root, cli, tmp_path):
    """A mixture of experts: router_logits / expert_weights rows are num_experts (8) wide, the
    rows `undercurrent capture` writes (point_widths in its manifest); one call takes one width."""
    model = str(root / "tests" / "testdata" / "arch" / "qwen3moe")
    points = [{"name": "router", "layers": [0, 1], "tensor_type": "router_logits", "position": "generated[*]",
               "probe_type": "capture", "probe_kind": "trajectory"}]
    (tmp_path / "spec.json").write_text(json.dumps({"version": "1", "extraction_points": points}))
    write_prompts(tmp_path / "prompts.jsonl", {"max_tokens": 3, "temperature": 0})
    subprocess.run(
        [cli, "capture", "--model", model, "--spec", str(tmp_path / "spec.json"), "--prompts",
         str(tmp_path / "prompts.jsonl"), "--out", str(tmp_path / "acts"), "--threads", "1", "--progress", "none"],
        check=True, capture_output=True, text=True,
    )
    ds = load_dataset(root, tmp_path / "acts")
    assert ds.manifest["point_widths"] == {"router": 8}
    with LLM(model, threads=1) as moe:
        acts = moe.capture(PROMPTS, points, SamplingParams(max_tokens=3, temperature=0.0))
        assert acts.values.shape == (len(PROMPTS) * 3 * 2, 8)
        assert np.array_equal(acts.values, ds.activations(ds.rows()))
        with pytest.raises(Exception, match="has rows of 64 values, but 'router' has 8"):
            moe.capture(PROMPTS[0], points + [{**POINTS[1], "layers": [1]}])


def start_server(cli, model):
    proc = subprocess.Popen([cli, "serve", "--port", "0", "--model", model, "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    found = threading.Event()
    port: list[int] = []

    def read():
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"listening on http://[^:\s]+:(\d+)", line)
            if m and not port:
                port.append(int(m.group(1)))
                found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(60):
        proc.kill()
        raise AssertionError("server did not start: " + "".join(lines))
    return proc, port[0]


def complete(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["choices"][0]["text"]


def test_steering_from_numpy_equals_the_servers(llm, tiny_model, cli):
    rng = np.random.default_rng(3)
    vec = rng.standard_normal(64).astype(np.float32)
    decode = rng.standard_normal(64).astype(np.float32)
    params = SamplingParams(
        max_tokens=12, temperature=0.0, ignore_eos=True,
        steering_vectors={"residual_stream": {2: {"vector": vec, "scale": 4.0}}},
        decode_steering_vectors={"blocks.1.hook_mlp_out": decode},
    )
    plain, steered = llm.generate([PROMPTS[0], PROMPTS[0]], [GREEDY, params])
    assert steered.outputs[0].token_ids != plain.outputs[0].token_ids
    proc, port = start_server(cli, tiny_model)
    try:
        http = complete(port, {
            "prompt": PROMPTS[0], "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            "steering_vectors": {"residual_stream": {"2": {"vector": vec.tolist(), "scale": 4.0}}},
            "decode_steering_vectors": {"blocks.1.hook_mlp_out": decode.tolist()},
        })
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert steered.outputs[0].text == http


def test_steering_errors_name_the_field(llm):
    bad_len = SamplingParams(steering_vectors={"residual_stream": {1: np.ones(3, np.float32)}})
    with pytest.raises(ValueError, match="steering"):
        llm.generate(PROMPTS[0], bad_len)
    with pytest.raises(ValueError, match=r"steering_vectors\.resid"):
        SamplingParams(steering_vectors={"resid": {1: np.ones(64)}})._steering()
    with pytest.raises(ValueError, match="1-D"):
        SamplingParams(steering_vectors={"mlp_out": {1: np.ones((2, 64))}})._steering()


def test_capture_with_sae_equals_cli_capture_sae(llm, tiny_model, cli, root, tmp_path):
    sae = root / "tests" / "testdata" / "probes" / "sae" / "standard"
    (tmp_path / "spec.json").write_text(json.dumps({"version": "1", "extraction_points": [
        {**POINTS[0], "probe_type": "capture", "probe_kind": "trajectory"}]}))
    write_prompts(tmp_path / "prompts.jsonl", {"max_tokens": 4, "temperature": 0})
    subprocess.run(
        [cli, "capture", "--model", tiny_model, "--spec", str(tmp_path / "spec.json"), "--prompts",
         str(tmp_path / "prompts.jsonl"), "--out", str(tmp_path / "acts"), "--threads", "1", "--progress", "none",
         "--sae", str(sae), "--sae-features", "3,17,200"],
        check=True, capture_output=True, text=True,
    )
    ds = load_dataset(root, tmp_path / "acts")
    acts = llm.capture(PROMPTS, POINTS[:1], SamplingParams(max_tokens=4, temperature=0.0), sae=str(sae),
                       sae_features=[3, 17, 200])
    assert acts.values.shape == (len(PROMPTS) * 4 * 2, 3)
    assert np.array_equal(acts.values, ds.activations(ds.rows()))
    with pytest.raises(ValueError, match="256"):  # feature out of range: the engine's message
        llm.capture(PROMPTS[0], POINTS[:1], sae=str(sae), sae_features=[256])


def test_sae_probe_from_python_gives_the_cli_verdicts(llm, tiny_model, cli, root, tmp_path):
    sae = root / "tests" / "testdata" / "probes" / "sae" / "standard"
    spec = {"version": "1", "extraction_points": [
        {"name": "feat", "layers": [3], "tensor_type": "residual_stream", "position": "generated[*]",
         "probe_type": "sae", "probe_kind": "single_shot",
         "probe_args": {"sae": str(sae), "features": [3, 17], "score": "max", "threshold": 1.0e9, "action": "flag"}}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    write_prompts(tmp_path / "prompts.jsonl", {"max_tokens": 5, "temperature": 0})
    run = subprocess.run(
        [cli, "generate", "--model", tiny_model, "--spec", str(tmp_path / "spec.json"), "--prompts",
         str(tmp_path / "prompts.jsonl"), "--json", "--threads", "1"],
        check=True, capture_output=True, text=True,
    )
    theirs = {}
    for line in run.stdout.splitlines():
        j = json.loads(line)
        theirs[j.get("request_id", j.get("id"))] = j["probing"]["feat"]["verdict"]
    with LLM(tiny_model, spec=str(tmp_path / "spec.json"), threads=1) as probed:
        outs = probed.generate(PROMPTS, SamplingParams(max_tokens=5, temperature=0.0))
    for i, out in enumerate(outs):
        assert out.probe_results[0]["feat"].verdict == theirs[f"p{i}"], i
