"""0.1's advanced-tier sinks and metrics on the bundled tiny model: `WebhookLogSink` POSTs to a
real local HTTP server (with redaction from `redact_keys` / `drop_keys` / `chain`),
`FileLogSink` writes NDJSON, and `InMemoryMetricsRegistry` counts Python probe calls, errors
and queue drops per (request, point)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from undercurrent import (
    FileLogSink,
    InMemoryMetricsRegistry,
    MetricsSnapshot,
    Probe,
    ProbeAction,
    ProbedModel,
    ProbeResult,
    ProbeSignal,
    ProbingError,
    WebhookLogSink,
    chain,
    drop_keys,
    redact_keys,
)


class FlagSecond(Probe):
    probe_kind = "single_shot"

    def on_start(self, ctx):
        self.flagged = False

    def on_activation(self, record):
        if record.generated_index == 1:
            self.flagged = True
            return ProbeSignal(ProbeAction.FLAG, confidence=0.5, metadata={"secret": "s3cret", "note": "n"})
        if record.generated_index == 3:
            raise RuntimeError("boom")
        return None

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name, verdict=self.flagged,
                           metadata={"text": "generated words", "debug": {"raw": [1, 2]}})


SPEC = {"extraction_points": [
    {"name": "flag", "layers": [2], "tensor_type": "residual_stream", "position": "generated[*]",
     "probe_type": "flag_second", "probe_kind": "single_shot"},
]}


class Receiver:
    """A local HTTP endpoint that keeps every JSON body POSTed to it."""

    def __init__(self):
        self.bodies: list[dict] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                n = int(self.headers.get("Content-Length", 0))
                bodies.append(json.loads(self.rfile.read(n)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_webhook_sink_posts_signals_and_results_to_a_real_server(tiny_model, tmp_path):
    receiver = Receiver()
    try:
        sink = WebhookLogSink(receiver.url, redact=chain(redact_keys("secret"), drop_keys("debug")))
        with ProbedModel.from_pretrained(tiny_model, spec=SPEC, probes={"flag_second": FlagSecond},
                                         log_sink=[sink, FileLogSink(tmp_path / "log.ndjson")], threads=1) as model:
            outs = model.generate(["Once upon a time", "The little dog"], max_new_tokens=6, ignore_eos=True)
        # Closing the model flushed the webhook's queue.
    finally:
        receiver.close()
    ids = {o.request_id for o in outs}
    signals = [b for b in receiver.bodies if b["kind"] == "signal" and b["payload"]["action"] == "flag"]
    results = [b for b in receiver.bodies if b["kind"] == "result"]
    assert {b["request_id"] for b in signals} == ids and {b["request_id"] for b in results} == ids
    assert all(b["extraction_point_name"] == "flag" for b in signals + results)
    assert all(b["payload"]["metadata"]["secret"] == "[REDACTED]" for b in signals)
    assert all(b["payload"]["metadata"]["note"] == "n" for b in signals)
    for b in results:
        assert b["payload"]["verdict"] is True
        assert b["payload"]["metadata"]["text"] == "[REDACTED]"  # prompt text: redacted by default
        assert "debug" not in b["payload"]["metadata"]
    # The file sink got the same records, unredacted.
    lines = [json.loads(x) for x in (tmp_path / "log.ndjson").read_text().splitlines()]
    assert {x["request_id"] for x in lines if x["kind"] == "result"} == ids
    assert any(x["kind"] == "signal" and x["payload"]["metadata"].get("secret") == "s3cret" for x in lines)


def test_sinks_refuse_what_the_engine_cannot_run(tiny_model):
    with pytest.raises(TypeError, match="redact_keys, drop_keys and chain"):
        ProbedModel.from_pretrained(tiny_model, spec=SPEC, probes={"flag_second": FlagSecond},
                                    log_sink=WebhookLogSink("http://127.0.0.1:9/x", redact=lambda r: r))
    with pytest.raises(ValueError, match="WebhookLogSink.url"):
        ProbedModel.from_pretrained(tiny_model, spec=SPEC, probes={"flag_second": FlagSecond},
                                    log_sink=WebhookLogSink("ftp://example"))
    with pytest.raises(ProbingError, match="log_sink"):
        ProbedModel.from_pretrained(tiny_model, log_sink=object())


class Slow(Probe):
    probe_kind = "trajectory"

    def on_start(self, ctx):
        self.n = 0

    def on_activation(self, record):
        import time

        time.sleep(0.002)
        self.n += 1

    def on_end(self, ctx):
        return ProbeResult(ctx.request_id, self.extraction_point_name, verdict=self.n)


def test_metrics_registry_counts_calls_errors_and_drops(tiny_model):
    metrics = InMemoryMetricsRegistry()
    spec = {"extraction_points": SPEC["extraction_points"] + [
        {"name": "slow", "layers": [0, 1, 2, 3, 4], "tensor_type": "residual_stream", "position": "generated[*]",
         "probe_type": "slow", "probe_kind": "trajectory", "execution_mode": "async", "queue_depth": 2,
         "overflow_policy": "drop_newest"},
    ]}
    with ProbedModel.from_pretrained(tiny_model, spec=spec, probes={"flag_second": FlagSecond, "slow": Slow},
                                     metrics_sink=metrics, threads=1) as model:
        out = model.generate("Once upon a time", max_new_tokens=8, ignore_eos=True)
    flag = metrics.snapshot(out.request_id, "flag")
    assert isinstance(flag, MetricsSnapshot)
    assert flag.activation_count == 8  # generated[*] at one layer
    assert flag.error_count == 1 and flag.drop_count == 0
    assert flag.avg_activation_latency_seconds is not None and flag.avg_activation_latency_seconds >= 0
    slow = metrics.snapshot(out.request_id, "slow")
    processed = out.probe_results["slow"].verdict
    assert slow.activation_count == processed
    assert slow.drop_count == 8 * 5 - processed > 0  # drop_newest on a queue of 2
    assert slow.queue_depth == 0
    assert metrics.snapshot(out.request_id, "nope") is None
    with pytest.raises(TypeError, match="MetricsSink"):
        ProbedModel.from_pretrained(tiny_model, metrics_sink=object())
