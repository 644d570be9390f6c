"""Undercurrent: activation probing for live LLM inference.

    from undercurrent import ProbedModel, probe

    @probe("norm")
    def norm(record) -> float:
        return float(record.tensor.norm())

    spec = {"extraction_points": [{"name": "last", "layers": [0], "tensor_type": "residual_stream",
            "position": "prompt[-1]", "probe_type": "norm", "probe_kind": "single_shot"}]}
    with ProbedModel.from_pretrained("path/to/model.gguf", spec=spec) as model:
        out = model.generate("The weather today is", max_new_tokens=20)
    print(out.text, out.probe_results["last"].verdict)

Names load lazily: ``import undercurrent`` imports neither the engine nor torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    # Front door
    "ProbedModel": ".model",
    "GenerationOutput": ".model",
    "probe": ".core",
    "register_probe": ".core",
    "Probe": ".core",
    "ExtractionPoint": ".spec",
    "load_spec": ".spec",
    "ProbingError": ".errors",
    # vLLM-style layer
    "LLM": ".llm",
    "SamplingParams": ".llm",
    "RequestOutput": ".llm",
    "CompletionOutput": ".llm",
    "Activations": ".llm",
    "Calibration": ".llm",
    "reserved_kv_cache_bytes": ".model",
    # Advanced
    "ActivationRecord": ".spec",
    "ExecutionMode": ".spec",
    "FileLogSink": ".sinks",
    "LogSink": ".sinks",
    "InMemoryMetricsRegistry": ".router",
    "InterventionMode": ".spec",
    "InterventionPolicy": ".spec",
    "OverflowPolicy": ".router",
    "ProbeAction": ".core",
    "ProbeFactory": ".core",
    "MetricsSink": ".router",
    "MetricsSnapshot": ".router",
    "ProbeKind": ".spec",
    "ProbeNotFoundError": ".core",
    "ProbeResult": ".core",
    "ProbeSignal": ".core",
    "ProbeSpec": ".spec",
    "RequestContext": ".core",
    "SpecValidationError": ".spec",
    "TensorType": ".spec",
    "TimeoutAction": ".spec",
    "WebhookLogSink": ".sinks",
    "chain": ".sinks",
    "drop_keys": ".sinks",
    "redact_keys": ".sinks",
}

__all__ = [
    # Front door
    "ProbedModel",
    "GenerationOutput",
    "probe",
    "register_probe",
    "Probe",
    "ExtractionPoint",
    "load_spec",
    "ProbingError",
    "__version__",
    # Advanced
    "ActivationRecord",
    "ExecutionMode",
    "FileLogSink",
    "LogSink",
    "InMemoryMetricsRegistry",
    "InterventionMode",
    "InterventionPolicy",
    "MetricsSink",
    "MetricsSnapshot",
    "OverflowPolicy",
    "ProbeAction",
    "ProbeFactory",
    "ProbeKind",
    "ProbeNotFoundError",
    "ProbeResult",
    "ProbeSignal",
    "ProbeSpec",
    "RequestContext",
    "SpecValidationError",
    "TensorType",
    "TimeoutAction",
    "WebhookLogSink",
    "chain",
    "drop_keys",
    "redact_keys",
    # vLLM-style layer (beyond 0.1)
    "LLM",
    "SamplingParams",
    "RequestOutput",
    "CompletionOutput",
    "Activations",
    "Calibration",
    "reserved_kv_cache_bytes",
]


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("undercurrent")
    except PackageNotFoundError:  # imported from a build tree (PYTHONPATH)
        from ._core import __version__ as built

        return built


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    else:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
