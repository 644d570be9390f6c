"""ProbedModel on the bundled tiny Llama (models/stories260K): 0.1's front-door behaviours
(tests/test_model.py, the ones that use public names only) and this engine's: one continuous
batch, token-exact inline ABORT from a Python probe, Python and built-in probes in one spec, the
GIL released during generation, Ctrl-C, and bad input as 0.1's exception types."""

from __future__ import annotations

import _thread
import threading
import time

import numpy as np
import pytest

from undercurrent import (
    ExtractionPoint,
    GenerationOutput,
    Probe,
    ProbeAction,
    ProbedModel,
    ProbeNotFoundError,
    ProbeResult,
    ProbeSignal,
    ProbingError,
    SpecValidationError,
    load_spec,
    probe,
)
from undercurrent.core import ProbeRegistry

PROMPT = "Once upon a time there was a little"


class Recorder(Probe):
    """Keeps every record it gets (copies of the tensors) in a class-wide log keyed by request."""

    probe_kind = "trajectory"
    log: dict = None  # set per test (a dict would be refused as shared class state)

    def on_start(self, ctx):
        self.seen = []

    def on_activation(self, record):
        self.seen.append((record.token_pos, record.layer, np.array(record.tensor, dtype=np.float32, copy=True)))
        Recorder.log.setdefault(record.request_id, []).append(record)
        return None

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name, verdict=[(p, l) for p, l, _ in self.seen])


class AbortAt(Probe):
    """ABORT (confidence 0.9) at generated index `at`, layer `layer`, for requests whose prompt
    length equals `prompt_len` (0: every request)."""

    probe_kind = "single_shot"

    def __init__(self, at: int = 3, layer: int = 3, prompt_len: int = 0):
        super().__init__()
        self.at, self.layer, self.prompt_len = at, layer, prompt_len
        self.tokens = []

    def on_start(self, ctx):
        self.len = ctx.prompt_metadata["prompt_len"]

    def on_activation(self, record):
        self.tokens.append(record.token_pos)
        if self.prompt_len and self.len != self.prompt_len:
            return None
        if record.generated_index == self.at and record.layer == self.layer:
            return ProbeSignal(ProbeAction.ABORT, {"why": "test"}, 0.9)
        return None

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name, verdict=max(self.tokens, default=None))


def point(name, probe_type, position="generated[*]", layers=(1, 3), mode="inline", kind="single_shot", **args):
    return {
        "name": name,
        "layers": list(layers),
        "tensor_type": "residual_stream",
        "position": position,
        "probe_type": probe_type,
        "probe_kind": kind,
        "execution_mode": mode,
        "probe_args": args,
    }


@pytest.fixture
def registry():
    reg = ProbeRegistry(load_entry_points=False)
    reg.register("recorder", Recorder)
    reg.register("abort_at", AbortAt)
    Recorder.log = {}
    return reg


def test_generate_without_a_spec(tiny_model):
    with ProbedModel.from_pretrained(tiny_model, threads=1) as model:
        out = model.generate(PROMPT, max_new_tokens=8, temperature=0.0)
    assert isinstance(out, GenerationOutput)
    assert out.prompt == PROMPT and out.text and out.probe_results == {}
    assert len(out.token_ids) == 8 and out.finish_reason == "length" and not out.aborted
    assert out.usage == {"prompt_tokens": len(out.prompt_token_ids), "completion_tokens": 8}


def test_a_list_runs_in_one_batch_and_equals_each_prompt_alone(tiny_model):
    prompts = [PROMPT, "Lily liked to", "The sun", "Tom had a big red ball and he"]
    with ProbedModel.from_pretrained(tiny_model, threads=1) as model:
        together = model.generate(prompts, max_new_tokens=12)
        alone = [model.generate(p, max_new_tokens=12) for p in prompts]
    assert [o.prompt for o in together] == prompts
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert len({o.request_id for o in together}) == len(prompts)


def test_python_probe_sees_every_record_in_order(tiny_model, registry):
    spec = {"extraction_points": [point("rec", "recorder", layers=(0, 2), kind="trajectory")]}
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry, threads=1) as model:
        out = model.generate(PROMPT, max_new_tokens=6)
    records = Recorder.log[out.request_id]
    prompt_len = len(out.prompt_token_ids)
    # generated[*] at layers 0 and 2: all six generated tokens (the last one is run through the
    # model once more for the point), in (token_pos, layer) order.
    expected = [(prompt_len + g, layer) for g in range(6) for layer in (0, 2)]
    assert [(r.token_pos, r.layer) for r in records] == expected
    assert all(r.is_generated and r.generated_index == r.token_pos - prompt_len for r in records)
    assert records[0].tensor.shape == (model_hidden(tiny_model),)
    assert out.probe_results["rec"].verdict == expected


def model_hidden(path):
    import json
    import os

    with open(os.path.join(path, "config.json")) as f:
        return json.load(f)["hidden_size"]


def test_inline_python_abort_at_generated_3_returns_exactly_4_tokens(tiny_model, registry):
    spec = {"extraction_points": [point("gate", "abort_at")]}
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry, threads=1) as model:
        outs = model.generate([PROMPT, "Lily liked to"], max_new_tokens=20)
        unprobed = model.generate(PROMPT, max_new_tokens=20)
    for out in outs:
        assert out.aborted and out.finish_reason == "abort"
        assert len(out.token_ids) == 4
        assert out.abort_point == "gate"
        assert out.abort_signal.action is ProbeAction.ABORT and out.abort_signal.confidence == 0.9
        assert "extraction point 'gate' aborted generation" in out.abort_reason
        # Nothing after the triggering token reached the probe.
        assert out.probe_results["gate"].verdict == len(out.prompt_token_ids) + 3
    assert outs[0].token_ids == unprobed.token_ids[:4]


def test_abort_leaves_co_batched_requests_alone(tiny_model, registry):
    prompts = [PROMPT, "Lily liked to"]
    with ProbedModel.from_pretrained(tiny_model, threads=1) as plain:
        expected = plain.generate(prompts, max_new_tokens=10)
    gated_len = len(expected[0].prompt_token_ids)
    spec = {"extraction_points": [point("gate", "abort_at", prompt_len=gated_len, at=2)]}
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry, threads=1) as model:
        gated, other = model.generate(prompts, max_new_tokens=10)
    assert gated.aborted and len(gated.token_ids) == 3
    assert not other.aborted and other.token_ids == expected[1].token_ids


def test_python_and_builtin_probes_mix_in_one_spec(tiny_model, registry):
    spec = {
        "extraction_points": [
            point("norm", "norm_gate", threshold=1e9, action="flag"),
            point("rec", "recorder", kind="trajectory"),
        ]
    }
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry, threads=1) as model:
        out = model.generate(PROMPT, max_new_tokens=5)
    norms = out.probe_results["norm"]
    assert norms.verdict["n"] == 10 and norms.verdict["flagged"] is False
    # The built-in's scores are the norms of exactly the records the Python probe got.
    records = Recorder.log[out.request_id]
    scores = [s.confidence for s in norms.signal_history]
    assert scores == pytest.approx([float(np.linalg.norm(np.asarray(r.tensor))) for r in records], rel=1e-5)


def test_async_python_probe_runs_off_the_step_path(tiny_model, registry):
    spec = {"extraction_points": [point("obs", "recorder", mode="async", kind="trajectory")]}
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry, threads=1) as model:
        out = model.generate(PROMPT, max_new_tokens=5)
    result = out.probe_results["obs"]
    assert len(result.verdict) == 10
    assert result.metadata["queue"]["processed"] == 10


class SlowStart(Probe):
    """Async trajectory probe whose first call sleeps, so that records pile up in its queue."""

    probe_kind = "trajectory"

    def on_start(self, ctx):
        self.seen = []

    def on_activation(self, record):
        if not self.seen:
            time.sleep(0.2)
        self.seen.append((record.token_pos, record.layer))

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name, verdict=self.seen)


def test_async_python_probe_is_called_in_batches(tiny_model):
    spec = {"extraction_points": [{**point("obs", "slow", mode="async", kind="trajectory"),
                                   "queue_depth": 1000, "overflow_policy": "block"}]}
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes={"slow": SlowStart}, threads=1) as model:
        outs = model.generate([PROMPT, "The little dog"], max_new_tokens=8, ignore_eos=True)
        calls = model._bridges["slow"].calls
    records = 0
    for out in outs:
        seen = out.probe_results["obs"].verdict
        assert seen == sorted(seen) and len(seen) == 16  # every record, in order, none dropped
        assert out.probe_results["obs"].metadata["queue"]["processed"] == 16
        records += len(seen)
    # Records that queued up while a call ran went to the probe in one call.
    assert calls < records / 2, (calls, records)


def test_function_probe_from_the_default_registry(tiny_model):
    @probe("_test_big_norm", threshold=0.0)
    def big_norm(record) -> float:
        return float(np.linalg.norm(record.tensor))

    spec = {"extraction_points": [point("fn", "_test_big_norm", position="generated[1]", layers=(2,))]}
    try:
        with ProbedModel.from_pretrained(tiny_model, spec=spec, threads=1) as model:
            out = model.generate(PROMPT, max_new_tokens=10)
    finally:
        from undercurrent.core import unregister_probe

        unregister_probe("_test_big_norm")
    assert out.aborted and len(out.token_ids) == 2
    assert out.probe_results["fn"].verdict["flagged"] is True


def test_probe_exception_follows_the_points_policy(tiny_model):
    reg = ProbeRegistry(load_entry_points=False)

    @probe("boom", registry=reg)
    def boom(record):
        raise RuntimeError("probe bug")

    # reject (the default): the engine thread's call failed; generation goes on.
    p = point("b", "boom")
    with ProbedModel.from_pretrained(tiny_model, spec={"extraction_points": [p]}, probes=reg, threads=1) as model:
        out = model.generate(PROMPT, max_new_tokens=10)
    assert not out.aborted and len(out.token_ids) == 10
    # block_until_signal with on_timeout: abort: the failed call aborts at the first record.
    p["intervention"] = {"mode": "block_until_signal", "timeout_ms": 5000, "on_timeout": "abort"}
    with ProbedModel.from_pretrained(tiny_model, spec={"extraction_points": [p]}, probes=reg, threads=1) as model:
        out = model.generate(PROMPT, max_new_tokens=10)
    assert out.aborted and len(out.token_ids) == 1
    assert "intervention fallback after exception" in out.abort_reason


def test_bad_on_activation_return_is_refused(tiny_model):
    class Bad(Probe):
        probe_kind = "single_shot"

        def on_start(self, ctx):
            pass

        def on_activation(self, record):
            return "abort"

        def on_end(self, ctx):
            return ProbeResult(ctx.request_id, self.extraction_point_name)

    p = point("bad", "bad")
    p["intervention"] = {"mode": "block_until_signal", "timeout_ms": 5000, "on_timeout": "abort"}
    with ProbedModel.from_pretrained(tiny_model, spec={"extraction_points": [p]}, probes={"bad": Bad}, threads=1) as m:
        out = m.generate(PROMPT, max_new_tokens=5)
    # The bad return fails the call like an exception: the point's on_timeout (abort) decides.
    assert out.aborted and len(out.token_ids) == 1
    assert out.abort_reason.startswith("extraction point 'bad' aborted generation (intervention fallback")


def test_unknown_probe_type_has_a_did_you_mean(tiny_model, registry):
    spec = {"extraction_points": [point("x", "recorde")]}
    with pytest.raises(ProbeNotFoundError, match="Did you mean: 'recorder'"):
        ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry)


def test_spec_errors_name_the_field(tiny_model, registry):
    with pytest.raises(SpecValidationError, match=r"extraction_points\[0\] 'x'.*layers"):
        ProbedModel.from_pretrained(tiny_model, spec={"extraction_points": [point("x", "recorder", layers=(99,))]},
                                    probes=registry)
    with pytest.raises(SpecValidationError, match="tensor_type"):
        load_spec({"extraction_points": [dict(point("x", "recorder"), tensor_type="resid")]})


def test_bad_probe_args_are_refused_at_registration(tiny_model, registry):
    spec = {"extraction_points": [point("g", "abort_at", colour="red")]}
    with pytest.raises(ProbingError, match="colour"):
        ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry)


def test_bad_engine_options_and_models_are_refused(tiny_model):
    with pytest.raises(TypeError, match="Did you mean: 'threads'"):
        ProbedModel.from_pretrained(tiny_model, thread=2)
    with pytest.raises(ValueError, match="no such folder"):
        ProbedModel.from_pretrained(tiny_model + "-missing")
    with pytest.raises(ValueError, match="matmul"):
        ProbedModel.from_pretrained(tiny_model, matmul="fp8")


def test_extraction_point_objects_and_load_spec(tiny_model, registry):
    spec = load_spec([ExtractionPoint("rec", [1], "residual_stream", "prompt[-1]", "recorder", "trajectory")])
    assert spec.extraction_points[0].layers == [1]
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry, threads=1) as model:
        out = model.generate(PROMPT, max_new_tokens=2)
    assert out.probe_results["rec"].verdict == [(len(out.prompt_token_ids) - 1, 1)]


def test_closed_model_refuses_generate(tiny_model):
    model = ProbedModel.from_pretrained(tiny_model, threads=1)
    model.close()
    model.close()
    with pytest.raises(ProbingError, match="closed"):
        model.generate("x")


def test_refused_prompts_raise_or_fill_their_slot(tiny_model):
    with ProbedModel.from_pretrained(tiny_model, threads=1, max_model_len=32) as model:
        long = "Once upon a time " * 40
        with pytest.raises(ValueError):
            model.generate(long, max_new_tokens=4)
        outs = model.generate([PROMPT, long], max_new_tokens=4, return_exceptions=True)
    assert isinstance(outs[0], GenerationOutput) and isinstance(outs[1], ProbingError)


def test_on_result_sees_every_output(tiny_model):
    seen = []
    with ProbedModel.from_pretrained(tiny_model, threads=1, on_result=seen.append) as model:
        outs = model.generate([PROMPT, "Lily"], max_new_tokens=3)
    assert sorted(o.request_id for o in seen) == sorted(o.request_id for o in outs)


def test_another_thread_runs_while_generate_runs(tiny_model):
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    with ProbedModel.from_pretrained(tiny_model, threads=1, max_model_len=256) as model:
        t = threading.Thread(target=spin)
        t.start()
        start = time.perf_counter()
        model.generate(["Once upon a time"] * 8, max_new_tokens=200, ignore_eos=True)
        end = time.perf_counter()
        stop.set()
        t.join()
    during = [x for x in ticks if start <= x <= end]
    # The thread ran all along: the GIL was released during the engine's steps.
    assert end - start > 0.05
    assert len(during) >= 5, (len(during), end - start)


def test_keyboard_interrupt_aborts_the_batch_and_the_model_stays_usable(tiny_model, registry):
    spec = {"extraction_points": [point("obs", "recorder", mode="async", kind="trajectory")]}
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes=registry, threads=1, max_model_len=256) as model:
        timer = threading.Timer(0.05, _thread.interrupt_main)
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            model.generate(["Once upon a time"] * 4, max_new_tokens=200, ignore_eos=True)
        timer.join()
        out = model.generate(PROMPT, max_new_tokens=4)
    assert len(out.token_ids) == 4 and len(out.probe_results["obs"].verdict) == 8
