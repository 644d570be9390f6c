"""What the engine calls for a probe type implemented in Python (src/apps/python/py_probe_type.h):
one `ProbeBridge` per registered name. Inline points call `activate` once per engine step with
every request's records of the point; the engine thread holds the GIL only during these calls.
A probe's exception fails only its own record (the point's intervention policy decides)."""

from __future__ import annotations

import importlib.util
import json
import math
import threading
import time
from typing import Any

import numpy as np

from .core.context import RequestContext
from .core.probe import ProbeFactory
from .core.result import ProbeResult
from .core.signal import ProbeAction, ProbeSignal
from .spec.activation_record import ActivationRecord

_torch: Any = None
_torch_checked = False


class NumpyTensor(np.ndarray):
    """A numpy activation with the few torch.Tensor methods 0.1's probes call on
    ``record.tensor`` (``norm``, ``float``, ``numpy``; ``item`` is numpy's), for installs
    without torch."""

    def norm(self, p: float = 2, dim: Any = None) -> Any:
        return np.linalg.norm(np.asarray(self, dtype=np.float32), ord=p, axis=dim)

    def float(self) -> NumpyTensor:
        return self.astype(np.float32, copy=False)

    def numpy(self) -> np.ndarray:
        return np.asarray(self)


def _as_tensors(block: Any) -> Any:
    """The step's activations [n, hidden] as a torch tensor when torch is installed (no copy),
    else a `NumpyTensor` view. torch is imported here, on the first record, never before."""
    global _torch, _torch_checked
    if not _torch_checked:
        _torch_checked = True
        if importlib.util.find_spec("torch") is not None:
            import torch

            _torch = torch
    return _torch.from_numpy(block) if _torch is not None else block.view(NumpyTensor)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (TypeError, ValueError):
            pass
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "value") and isinstance(getattr(value, "value"), str):
        return value.value
    return repr(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default, allow_nan=True)


def _signal_json(s: ProbeSignal) -> dict[str, Any]:
    action = s.action.value if isinstance(s.action, ProbeAction) else str(s.action)
    return {"action": action, "confidence": s.confidence, "metadata": s.metadata, "timestamp": s.timestamp}


def signal_from_engine(d: dict[str, Any]) -> ProbeSignal:
    return ProbeSignal(
        action=ProbeAction(d.get("action", "continue")),
        metadata=dict(d.get("metadata") or {}),
        confidence=d.get("confidence"),
        timestamp=d.get("timestamp") or 0.0,
    )


class ProbeBridge:
    """Spawns and calls the probes of one registered name for one model."""

    def __init__(self, name: str, factory: ProbeFactory, points: dict[str, Any], metrics: Any = None) -> None:
        self.name = name
        self.metrics = metrics  # a MetricsSink, or None
        self.calls = 0  # activate calls made (each carries one or more records)
        self.factory = factory
        self.points = points  # extraction point name -> ExtractionPoint (RequestContext config)
        self._results: dict[tuple[str, str], ProbeResult] = {}
        self._lock = threading.Lock()

    def check(self, point_name: str, args_json: str) -> str | None:
        """None when the point's probe_args fit the probe, else the problem (at registration)."""
        try:
            self.factory.spawn("check", point_name or "check", **json.loads(args_json))
        except Exception as exc:  # noqa: BLE001 (the message goes into the spec error)
            return f"probe {self.name!r} ({self.factory.probe_cls.__qualname__}) refused probe_args: {exc}"
        return None

    def spawn(self, request_id: str, point_name: str, args_json: str) -> Any:
        return self.factory.spawn(request_id, point_name, **json.loads(args_json))

    def _context(self, request_id: str, metadata_json: str, point_name: str) -> RequestContext:
        return RequestContext(request_id, json.loads(metadata_json), self.points.get(point_name))

    def start(self, instance: Any, request_id: str, metadata_json: str, point_name: str) -> None:
        instance.on_start(self._context(request_id, metadata_json, point_name))

    def activate(self, instances: list[Any], metadata: list[tuple], block: Any) -> list[Any]:
        self.calls += 1
        tensors = _as_tensors(block)
        out: list[Any] = []
        for i, (instance, meta) in enumerate(zip(instances, metadata)):
            if instance is None:
                out.append(("__error__", "the probe was never started"))
                continue
            request_id, point, layer, token_pos, is_generated, generated_index, tensor_type, timestamp = meta
            record = ActivationRecord(
                request_id,
                point,
                layer,
                token_pos,
                tensor_type,
                tensors[i],
                is_generated,
                timestamp,
                generated_index if is_generated else None,
            )
            started = time.perf_counter() if self.metrics is not None else 0.0
            try:
                signal = instance.on_activation(record)
            except Exception as exc:  # noqa: BLE001 (the point's intervention policy decides)
                if self.metrics is not None:
                    self.metrics.record_activation(request_id, point, time.perf_counter() - started)
                    self.metrics.record_probe_error(request_id, point)
                out.append(("__error__", f"{type(exc).__name__}: {exc}"))
                continue
            if self.metrics is not None:
                self.metrics.record_activation(request_id, point, time.perf_counter() - started)
            if signal is None:
                out.append(None)
            elif not isinstance(signal, ProbeSignal):
                out.append(
                    (
                        "__error__",
                        f"{type(instance).__qualname__}.on_activation returned {type(signal).__name__}; "
                        "it must return a ProbeSignal or None",
                    )
                )
            else:
                action = signal.action.value if isinstance(signal.action, ProbeAction) else str(signal.action)
                confidence = signal.confidence
                if confidence is not None:
                    confidence = float(confidence)
                    if math.isnan(confidence):
                        confidence = None
                out.append((action, confidence, _dumps(signal.metadata), float(signal.timestamp or 0.0)))
        return out

    def end(self, instance: Any, request_id: str, metadata_json: str, point_name: str) -> tuple[str, str, str]:
        result = instance.on_end(self._context(request_id, metadata_json, point_name))
        if not isinstance(result, ProbeResult):
            raise TypeError(
                f"{type(instance).__qualname__}.on_end returned {type(result).__name__}; it must return a ProbeResult"
            )
        with self._lock:
            self._results[(request_id, point_name)] = result
        return (
            _dumps(result.verdict),
            _dumps([_signal_json(s) for s in result.signal_history]),
            _dumps(result.metadata),
        )

    def take_result(self, request_id: str, point_name: str) -> ProbeResult | None:
        """The ProbeResult object on_end returned (verdict untouched), once."""
        with self._lock:
            return self._results.pop((request_id, point_name), None)
