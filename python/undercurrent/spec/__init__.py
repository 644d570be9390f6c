"""Specs: the YAML file of extraction points (and steering) that says what to capture and which
probe reads it. Parsing and validation are the engine's (the same as ``undercurrent validate``):
a problem names the file, the line and the field."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import SpecValidationError
from .activation_record import ActivationRecord


class TensorType(str, Enum):
    RESIDUAL_STREAM = "residual_stream"
    ATTN_OUT = "attn_out"
    MLP_OUT = "mlp_out"
    KV = "kv"
    FINAL_NORM = "final_norm"
    # Mixture-of-experts layers only: num_experts values per token, not hidden_size.
    ROUTER_LOGITS = "router_logits"
    EXPERT_WEIGHTS = "expert_weights"


class ProbeKind(str, Enum):
    SINGLE_SHOT = "single_shot"
    TRAJECTORY = "trajectory"


class ExecutionMode(str, Enum):
    INLINE = "inline"
    ASYNC = "async"


class InterventionMode(str, Enum):
    REJECT = "reject"
    BLOCK_UNTIL_SIGNAL = "block_until_signal"


class TimeoutAction(str, Enum):
    CONTINUE = "continue"
    ABORT = "abort"


@dataclass
class InterventionPolicy:
    mode: InterventionMode = InterventionMode.REJECT
    timeout_ms: int | None = None
    on_timeout: TimeoutAction = TimeoutAction.CONTINUE


@dataclass
class ExtractionPoint:
    """One extraction point, as in a spec's ``extraction_points`` list."""

    name: str
    layers: list[int] | int
    tensor_type: str
    position: str
    probe_type: str
    probe_kind: str = "single_shot"
    execution_mode: str = "inline"
    probe_args: dict[str, Any] = field(default_factory=dict)
    stride: int | None = None
    until: str | None = None
    queue_depth: int | None = None
    overflow_policy: str | None = None
    intervention: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if value is None or (key == "probe_args" and not value):
                continue
            d[key] = value.value if isinstance(value, Enum) else value
        return d

    @classmethod
    def _from_engine(cls, d: dict[str, Any]) -> ExtractionPoint:
        intervention = d.get("intervention")
        return cls(
            name=d["name"],
            layers=list(d["layers"]),
            tensor_type=d["tensor_type"],
            position=d["position"],
            probe_type=d["probe_type"],
            probe_kind=d["probe_kind"],
            execution_mode=d["execution_mode"],
            probe_args=dict(d.get("probe_args") or {}),
            queue_depth=d.get("queue_depth"),
            overflow_policy=d.get("overflow_policy"),
            intervention=intervention,
        )


@dataclass
class ProbeSpec:
    """A parsed, validated spec. ``source`` is the file it came from (relative paths in it, e.g.
    probe weights, resolve against its folder) or None for text; ``text`` is what was parsed."""

    extraction_points: list[ExtractionPoint]
    text: str | None = None
    source: Path | None = None

    def point(self, name: str) -> ExtractionPoint:
        for p in self.extraction_points:
            if p.name == name:
                return p
        raise KeyError(name)


def _core() -> Any:
    from .. import _core

    return _core


def _parse(source: str, name: str, is_path: bool) -> list[ExtractionPoint]:
    core = _core()
    try:
        points = json.loads(core.parse_spec(source, name, is_path))
    except core.Error as exc:
        raise SpecValidationError(exc.args[1] if len(exc.args) > 1 else str(exc)) from None
    return [ExtractionPoint._from_engine(p) for p in points]


def load_spec(spec: Any) -> ProbeSpec:
    """A `ProbeSpec` from a YAML file path, a YAML string, a dict, a list of `ExtractionPoint`
    (or dicts), or a `ProbeSpec` (returned as is). Raises `SpecValidationError`."""
    if isinstance(spec, ProbeSpec):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        if isinstance(spec, os.PathLike) or ("\n" not in text and text.endswith((".yaml", ".yml", ".json"))):
            path = Path(text)
            if not path.is_file():
                raise SpecValidationError(f"{text}: no such spec file")
            return ProbeSpec(_parse(str(path), "", True), path.read_text(), path)
        return ProbeSpec(_parse(text, "spec", False), text, None)
    if isinstance(spec, list):
        spec = {"extraction_points": [p.to_dict() if isinstance(p, ExtractionPoint) else p for p in spec]}
    if isinstance(spec, dict):
        spec = dict(spec)
        spec["extraction_points"] = [
            p.to_dict() if isinstance(p, ExtractionPoint) else p for p in spec.get("extraction_points", [])
        ]
        spec.setdefault("version", "1")
        text = json.dumps(spec)  # JSON is YAML
        return ProbeSpec(_parse(text, "spec", False), text, None)
    raise SpecValidationError(
        f"spec must be a YAML file path, a YAML string, a dict, a list of ExtractionPoint or a ProbeSpec, "
        f"got {type(spec).__name__}"
    )


__all__ = [
    "ActivationRecord",
    "ExecutionMode",
    "ExtractionPoint",
    "InterventionMode",
    "InterventionPolicy",
    "ProbeKind",
    "ProbeSpec",
    "SpecValidationError",
    "TensorType",
    "TimeoutAction",
    "load_spec",
]
