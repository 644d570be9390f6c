"""`@probe`: a stateless single_shot probe written as a function ``fn(record) -> score``.

What the function returns per activation: None (nothing, not counted); a bool (True flags);
a number (flags when ``threshold`` is set and score >= threshold; else only recorded); or a
`ProbeSignal` (passed through). A flagged activation emits a signal with the probe's ``action``
("abort", the default, or "flag"), confidence the score (1.0 for True) and metadata
``{"score", "probe"}``; any other non-None return emits CONTINUE with the same metadata. The
verdict is ``{"flagged", "max_score", "n"}``. ``threshold`` and ``action`` may be overridden by
a point's probe_args; other probe_args reach the function as keyword-only arguments.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from typing import Any

from ..errors import ProbeDefinitionError, ProbingTypeError, ProbingValueError, did_you_mean
from .context import RequestContext
from .probe import Probe
from .registry import ProbeRegistry, default_registry
from .result import ProbeResult
from .signal import ProbeAction, ProbeSignal

_ACTIONS = {"abort": ProbeAction.ABORT, "flag": ProbeAction.FLAG}
_RESERVED = {"threshold", "action"}


def _threshold(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ProbingTypeError(f"{where}: threshold must be a number or None (got {value!r})")
    return float(value)


def _action(value: Any, where: str) -> ProbeAction:
    if isinstance(value, ProbeAction) and value in _ACTIONS.values():
        return value
    if isinstance(value, str) and value in _ACTIONS:
        return _ACTIONS[value]
    raise ProbingValueError(f"{where}: action must be one of {sorted(_ACTIONS)}, got {value!r}.{did_you_mean(value, _ACTIONS)}")


def _signature(fn: Callable[..., Any]) -> tuple[frozenset[str], frozenset[str], bool]:
    """(keyword-only names, required ones, takes **kwargs); refuses anything but ``(record, *, ...)``."""
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError) as exc:
        raise ProbeDefinitionError(f"@probe: cannot inspect the signature of {name}: {exc}") from exc
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        raise ProbeDefinitionError(f"@probe: {name} takes *args; a function probe gets exactly one record")
    if len(positional) != 1:
        raise ProbeDefinitionError(
            f"@probe: {name} must take exactly one positional parameter (the ActivationRecord), got "
            f"{len(positional)}; make options keyword-only: `def fn(record, *, option=...)`"
        )
    keyword = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    if keyword & _RESERVED:
        raise ProbeDefinitionError(
            f"@probe: {name} declares {', '.join(sorted(keyword & _RESERVED))}; @probe handles threshold "
            "and action itself and never passes them to the function"
        )
    required = {p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    return frozenset(keyword), frozenset(required), any(p.kind is p.VAR_KEYWORD for p in params)


class FunctionProbe(Probe):
    """The base of the classes `@probe` makes."""

    probe_kind = "single_shot"
    fn: Callable[..., Any]
    probe_name: str
    default_threshold: float | None = None
    default_action: ProbeAction = ProbeAction.ABORT
    _keyword: frozenset[str] = frozenset()
    _required: frozenset[str] = frozenset()
    _var_keyword: bool = False

    def __init__(self, *, threshold: Any = ..., action: Any = ..., **fn_kwargs: Any) -> None:
        super().__init__()
        cls = type(self)
        where = f"probe {cls.probe_name!r}"
        self.threshold = cls.default_threshold if threshold is ... else _threshold(threshold, where)
        self.action = cls.default_action if action is ... else _action(action, where)
        unknown = sorted(set(fn_kwargs) - cls._keyword)
        if unknown and not cls._var_keyword:
            accepted = sorted(cls._keyword | _RESERVED)
            raise ProbingTypeError(
                f"{where}: unexpected argument(s) {', '.join(unknown)}.{did_you_mean(unknown[0], accepted)} "
                f"{cls.fn.__qualname__} accepts: {', '.join(accepted)}"
            )
        missing = sorted(cls._required - set(fn_kwargs))
        if missing:
            raise ProbingTypeError(f"{where}: {cls.fn.__qualname__} requires keyword argument(s) {', '.join(missing)}")
        self.fn_kwargs = dict(fn_kwargs)
        self._history: list[ProbeSignal] = []
        self._flagged = False
        self._max_score: float | None = None
        self._n = 0

    def on_start(self, request_ctx: RequestContext) -> None:
        pass

    def on_activation(self, record: Any) -> ProbeSignal | None:
        signal = self._signal(type(self).fn(record, **self.fn_kwargs))
        if signal is None:
            return None
        self._n += 1
        self._flagged = self._flagged or signal.action is not ProbeAction.CONTINUE
        self._history.append(signal)
        return signal

    def _signal(self, value: Any) -> ProbeSignal | None:
        if value is None or isinstance(value, ProbeSignal):
            return value
        name = type(self).probe_name
        if isinstance(value, bool):
            return ProbeSignal(
                action=self.action if value else ProbeAction.CONTINUE,
                confidence=1.0 if value else None,
                metadata={"score": None, "probe": name},
            )
        if isinstance(value, numbers.Real):
            score = float(value)
            self._max_score = score if self._max_score is None else max(self._max_score, score)
            flagged = self.threshold is not None and score >= self.threshold
            return ProbeSignal(
                action=self.action if flagged else ProbeAction.CONTINUE,
                confidence=score,
                metadata={"score": score, "probe": name},
            )
        raise ProbingTypeError(
            f"probe {name!r}: {type(self).fn.__qualname__} returned {type(value).__name__} ({value!r:.80}); a "
            "function probe returns float, int, bool, ProbeSignal or None (convert tensors with float() or .item())"
        )

    def on_end(self, request_ctx: RequestContext) -> ProbeResult:
        return ProbeResult(
            request_id=request_ctx.request_id,
            extraction_point_name=self.extraction_point_name,
            verdict={"flagged": self._flagged, "max_score": self._max_score, "n": self._n},
            signal_history=list(self._history),
        )


def probe(
    name: Any = None,
    /,
    *,
    threshold: float | None = None,
    action: str = "abort",
    registry: ProbeRegistry | None = None,
    register: bool = True,
) -> Any:
    """``@probe("name", threshold=..., action=...)`` (or bare ``@probe``, named after the
    function): makes a `FunctionProbe` subclass from the function and registers it (unless
    ``register=False``). The class keeps the function as ``.fn``."""
    if callable(name) and not isinstance(name, str):
        return probe(None, threshold=threshold, action=action, registry=registry, register=register)(name)
    if name is not None and (not isinstance(name, str) or not name):
        raise ProbingValueError(f"@probe: the name must be a non-empty string, got {name!r}")
    where = f"@probe({name!r})"
    default_threshold = _threshold(threshold, where)
    default_action = _action(action, where)

    def decorate(fn: Callable[..., Any]) -> type[FunctionProbe]:
        if not callable(fn):
            raise ProbeDefinitionError(f"@probe: expected a function, got {fn!r}")
        keyword, required, var_keyword = _signature(fn)
        probe_name = name or fn.__name__
        cls = type(
            getattr(fn, "__name__", "FunctionProbe"),
            (FunctionProbe,),
            {
                "fn": staticmethod(fn),
                "probe_name": probe_name,
                "default_threshold": default_threshold,
                "default_action": default_action,
                "_keyword": keyword,
                "_required": required,
                "_var_keyword": var_keyword,
                "__module__": getattr(fn, "__module__", __name__),
                "__qualname__": getattr(fn, "__qualname__", probe_name),
                "__doc__": fn.__doc__,
            },
        )
        if register:
            (registry if registry is not None else default_registry).register(probe_name, cls, override=True)
        return cls

    return decorate
