"""`Probe`: the base class of probes written in Python, and `ProbeFactory`.

A subclass is a factory; the engine spawns one fresh instance per (request, extraction point)
with `Probe.spawn` and calls ``on_start`` once, ``on_activation`` per matching record (in the
canonical (token_pos, layer) order) and ``on_end`` exactly once. Per-request state lives on
``self``: a class-level list, dict, set or bytearray would be shared by every instance, so a
class defining one is refused when it is defined.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ProbeDefinitionError, ProbingRuntimeError, ProbingTypeError, ProbingValueError, did_you_mean
from ..spec.activation_record import ActivationRecord
from .context import RequestContext
from .result import ProbeResult
from .signal import ProbeSignal

VALID_PROBE_KINDS = ("single_shot", "trajectory")
_SHARED_MUTABLE = (list, dict, set, bytearray)


class Probe(ABC):
    """Subclass it, set ``probe_kind`` (``"single_shot"`` or ``"trajectory"``) and implement
    ``on_start``, ``on_activation`` (may return a `ProbeSignal`) and ``on_end`` (returns a
    `ProbeResult`)."""

    probe_kind: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            if not name.startswith("__") and isinstance(value, _SHARED_MUTABLE):
                raise ProbeDefinitionError(
                    f"{cls.__name__}.{name} is a class-level {type(value).__name__}: every spawned "
                    "instance would share it. Keep per-request state on `self`, set in __init__ or on_start."
                )
        kind = vars(cls).get("probe_kind")
        if kind is not None and kind not in VALID_PROBE_KINDS:
            raise ProbeDefinitionError(
                f"{cls.__name__}.probe_kind must be one of {VALID_PROBE_KINDS}, got {kind!r}."
                f"{did_you_mean(kind, VALID_PROBE_KINDS)}"
            )

    def __init__(self) -> None:
        self._request_id: str | None = None
        self._extraction_point_name: str | None = None

    @property
    def request_id(self) -> str:
        if self._request_id is None:
            raise ProbingRuntimeError(f"{type(self).__name__} has no request_id: create it with .spawn(...)")
        return self._request_id

    @property
    def extraction_point_name(self) -> str:
        if self._extraction_point_name is None:
            raise ProbingRuntimeError(
                f"{type(self).__name__} has no extraction_point_name: create it with .spawn(...)"
            )
        return self._extraction_point_name

    @classmethod
    def spawn(cls, request_id: str, extraction_point_name: str, **probe_kwargs: Any) -> Probe:
        """A fresh instance for one (request, extraction point); ``probe_kwargs`` go to ``__init__``."""
        if cls is Probe:
            raise ProbingTypeError("Probe is abstract; call .spawn() on a concrete subclass")
        if getattr(cls, "probe_kind", None) not in VALID_PROBE_KINDS:
            raise ProbeDefinitionError(
                f"{cls.__name__}.probe_kind must be one of {VALID_PROBE_KINDS}, "
                f"got {getattr(cls, 'probe_kind', None)!r}"
            )
        if not request_id:
            raise ProbingValueError(f"Probe.spawn() needs a non-empty request_id (got {request_id!r})")
        if not extraction_point_name:
            raise ProbingValueError(
                f"Probe.spawn() needs a non-empty extraction_point_name (got {extraction_point_name!r})"
            )
        instance = cls(**probe_kwargs)
        instance._request_id = request_id
        instance._extraction_point_name = extraction_point_name
        return instance

    @abstractmethod
    def on_start(self, request_ctx: RequestContext) -> None:
        """Once, before any activation."""

    @abstractmethod
    def on_activation(self, record: ActivationRecord) -> ProbeSignal | None:
        """Once per matching activation; a signal, or None."""

    @abstractmethod
    def on_end(self, request_ctx: RequestContext) -> ProbeResult:
        """Exactly once, when the request ends (also after an abort or with no activation)."""


@dataclass(frozen=True)
class ProbeFactory:
    """A Probe subclass with fixed spawn kwargs (what a registry entry holds)."""

    probe_cls: type[Probe]
    probe_kwargs: dict[str, Any] = field(default_factory=dict)

    def spawn(self, request_id: str, extraction_point_name: str, **extra_kwargs: Any) -> Probe:
        """``extra_kwargs`` (a point's probe_args) win over ``probe_kwargs``."""
        return self.probe_cls.spawn(request_id, extraction_point_name, **{**self.probe_kwargs, **extra_kwargs})
