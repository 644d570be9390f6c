"""A LogSink written in Python (0.1's write_signal / write_result) as log_sink=: it gets the
records the engine writes to a FileLogSink for the same run (the oracle: the engine's own NDJSON
file), honours a chain()-built redact through _apply_redaction, sits in a list beside the
engine's sinks, and a sink that raises is reported (logged and counted), never fatal."""

from __future__ import annotations

import json
import logging

import pytest

from undercurrent import (FileLogSink, LogSink, ProbeAction, ProbedModel, ProbeResult, ProbeSignal, chain,
                          drop_keys, redact_keys)
from undercurrent.sinks import to_jsonable

PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to"]


def spec() -> dict:
    # An async Python trajectory probe (every signal goes to the sinks) and an inline built-in
    # linear probe that flags (its FLAGs and its results go to the sinks too).
    return {"extraction_points": [
        {"name": "watch", "layers": [2], "tensor_type": "residual_stream", "position": "generated[*]",
         "probe_type": "sink_norm", "probe_kind": "trajectory", "execution_mode": "async"},
        {"name": "gate", "layers": [4], "tensor_type": "residual_stream", "position": "generated[*]",
         "probe_type": "norm_gate", "probe_kind": "single_shot", "probe_args": {"threshold": 0.0, "action": "flag"}},
    ]}


class SinkNorm:
    probe_kind = "trajectory"

    def on_start(self, ctx):
        self.n = 0

    def on_activation(self, record):
        self.n += 1
        return ProbeSignal(confidence=float(record.tensor.norm()), metadata={"n": self.n})

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name, verdict=self.n)


def probes():
    from undercurrent import Probe

    cls = type("SinkNormProbe", (SinkNorm, Probe), {})
    return {"sink_norm": cls}


class Collecting(LogSink):
    """0.1's custom-sink recipe: records through to_jsonable and _apply_redaction."""

    def __init__(self, redact=None):
        super().__init__(redact=redact)
        self.records = []

    def write_signal(self, request_id, extraction_point_name, signal):
        assert isinstance(signal, ProbeSignal)
        self._write("signal", request_id, extraction_point_name, signal)

    def write_result(self, request_id, extraction_point_name, result):
        assert isinstance(result, ProbeResult)
        self._write("result", request_id, extraction_point_name, result)

    def _write(self, kind, request_id, point, payload):
        record = self._apply_redaction({"kind": kind, "request_id": request_id, "extraction_point_name": point,
                                        "payload": to_jsonable(payload)})
        if record is not None:
            self.records.append(record)


def key(r: dict) -> tuple:
    p = r["payload"]
    return (r["kind"], r["request_id"], r["extraction_point_name"],
            p.get("action"), p.get("confidence"), json.dumps(p.get("verdict")))


def test_a_python_sink_gets_the_records_the_engine_writes_to_a_file(tiny_model, tmp_path):
    mine = Collecting()
    path = tmp_path / "records.ndjson"
    with ProbedModel.from_pretrained(tiny_model, spec=spec(), probes=probes(), threads=1,
                                     log_sink=[FileLogSink(path), mine]) as model:
        outs = model.generate(PROMPTS, max_new_tokens=6, ignore_eos=True)
        assert model.log_sink_errors == 0
    file_records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(file_records) > 0
    assert sorted(map(key, mine.records)) == sorted(map(key, file_records))
    ids = {o.request_id for o in outs}
    results = [r for r in mine.records if r["kind"] == "result"]
    assert {(r["request_id"], r["extraction_point_name"]) for r in results} == {
        (i, p) for i in ids for p in ("watch", "gate")}
    assert all(r["payload"]["verdict"] == 6 for r in results if r["extraction_point_name"] == "watch")
    signals = [r for r in mine.records if r["kind"] == "signal" and r["extraction_point_name"] == "watch"]
    assert len(signals) == 6 * len(PROMPTS)  # every signal of the async point


def test_a_chain_redaction_applies_in_a_python_sink(tiny_model):
    mine = Collecting(redact=chain(redact_keys("confidence"), drop_keys("metadata")))
    with ProbedModel.from_pretrained(tiny_model, spec=spec(), probes=probes(), threads=1, log_sink=mine) as model:
        model.generate(PROMPTS[:1], max_new_tokens=3, ignore_eos=True)
    signals = [r for r in mine.records if r["kind"] == "signal"]
    assert signals
    assert all(r["payload"]["confidence"] == "[REDACTED]" and "metadata" not in r["payload"] for r in signals)

    dropping = Collecting(redact=chain(redact_keys("confidence"), lambda r: None))
    with ProbedModel.from_pretrained(tiny_model, spec=spec(), probes=probes(), threads=1, log_sink=dropping) as m:
        m.generate(PROMPTS[:1], max_new_tokens=3, ignore_eos=True)
    assert dropping.records == []


class Raising(LogSink):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def write_signal(self, request_id, extraction_point_name, signal):
        self.calls += 1
        raise RuntimeError("sink down")

    def write_result(self, request_id, extraction_point_name, result):
        self.calls += 1
        raise RuntimeError("sink down")


def test_a_raising_sink_is_reported_and_generation_goes_on(tiny_model, caplog):
    bad, good = Raising(), Collecting()
    with caplog.at_level(logging.ERROR, logger="undercurrent"):
        with ProbedModel.from_pretrained(tiny_model, spec=spec(), probes=probes(), threads=1,
                                         log_sink=[bad, good]) as model:
            outs = model.generate(PROMPTS, max_new_tokens=4, ignore_eos=True)
            assert all(len(o.token_ids) == 4 for o in outs)
            assert model.log_sink_errors == bad.calls > 0
            again = model.generate(PROMPTS[0], max_new_tokens=2, ignore_eos=True)  # still usable
            assert len(again.token_ids) == 2
    assert any("Raising.write_" in r.getMessage() and r.exc_info and str(r.exc_info[1]) == "sink down"
               for r in caplog.records)
    assert len(good.records) > 0  # the other sink got every record


def test_a_duck_typed_sink_without_the_base_class_works(tiny_model):
    class Plain:
        def __init__(self):
            self.kinds = []

        def write_signal(self, request_id, point, signal):
            self.kinds.append(("signal", signal.action))

        def write_result(self, request_id, point, result):
            self.kinds.append(("result", point))

    plain = Plain()
    with ProbedModel.from_pretrained(tiny_model, spec=spec(), probes=probes(), threads=1, log_sink=plain) as model:
        model.generate(PROMPTS[0], max_new_tokens=2, ignore_eos=True)
    assert ("result", "watch") in plain.kinds and ("signal", ProbeAction.CONTINUE) in plain.kinds


def test_log_sink_that_is_not_a_sink_is_refused(tiny_model):
    with pytest.raises(TypeError, match="write_signal and write_result"):
        ProbedModel.from_pretrained(tiny_model, log_sink=object())
