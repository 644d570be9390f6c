"""Probe registries: probe_type name -> `ProbeFactory`.

`default_registry` is what `register_probe` / `@probe` fill and what `ProbedModel` uses unless
given ``probes=``. A name that is not registered is looked up once among the installed
distributions' entry points in the ``undercurrent.probes`` group (loaded on that miss only).
The C++ built-in probe types (linear, mlp, norm_gate, ...) need no registration: a spec names
them and they run in the engine.
"""

from __future__ import annotations

import builtins
import inspect
import logging
import threading
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

from ..errors import ProbingError, ProbingTypeError, ProbingValueError, did_you_mean
from .probe import VALID_PROBE_KINDS, Probe, ProbeFactory

ENTRY_POINT_GROUP = "undercurrent.probes"
logger = logging.getLogger("undercurrent")
_P = TypeVar("_P")


class ProbeNotFoundError(ProbingError, KeyError):
    """No probe registered under a name; the message suggests the closest one."""

    def __init__(self, name: str, known: builtins.list[str]) -> None:
        shown = ", ".join(repr(k) for k in known) if known else "(none)"
        self.name = name
        self.message = (
            f"no probe registered for probe_type={name!r}.{did_you_mean(name, known)} "
            f"Known probe types: {shown}. Register one with @register_probe({name!r}) or "
            f"@probe({name!r}), or install a package that provides it in the "
            f"{ENTRY_POINT_GROUP!r} entry-point group."
        )
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


def _check_probe_cls(name: str, probe_cls: Any) -> None:
    if not (isinstance(probe_cls, type) and issubclass(probe_cls, Probe)):
        raise ProbingTypeError(
            f"register_probe({name!r}): expected a subclass of undercurrent.core.Probe, got {probe_cls!r}"
        )
    if getattr(probe_cls, "probe_kind", None) not in VALID_PROBE_KINDS:
        raise ProbingTypeError(
            f"register_probe({name!r}): {probe_cls.__name__}.probe_kind must be one of {VALID_PROBE_KINDS}, "
            f"got {getattr(probe_cls, 'probe_kind', None)!r}"
        )
    if inspect.isabstract(probe_cls):
        missing = ", ".join(sorted(probe_cls.__abstractmethods__))
        raise ProbingTypeError(f"register_probe({name!r}): {probe_cls.__name__} is abstract (implement {missing})")


class ProbeRegistry:
    """Thread-safe name -> ProbeFactory map."""

    def __init__(self, *, load_entry_points: bool = True) -> None:
        self._lock = threading.RLock()
        self._factories: dict[str, ProbeFactory] = {}
        self._load_entry_points = load_entry_points

    def register(self, name: str, probe: Any = None, /, *, override: bool = False, **probe_kwargs: Any) -> Any:
        """``register(name, ProbeClass | ProbeFactory, **kwargs)``, or as a class decorator
        ``@registry.register(name, **kwargs)``. A name already taken is a ValueError unless
        ``override=True`` (or the class is a redefinition of the same module.qualname)."""
        if not isinstance(name, str) or not name:
            raise ProbingValueError(f"a probe name must be a non-empty string, got {name!r}")
        if probe is None:

            def decorator(cls: _P) -> _P:
                self._add(name, cls, probe_kwargs, override)
                return cls

            return decorator
        self._add(name, probe, probe_kwargs, override)
        return probe

    def _add(self, name: str, probe: Any, kwargs: dict[str, Any], override: bool) -> None:
        if isinstance(probe, ProbeFactory):
            factory = ProbeFactory(probe.probe_cls, {**probe.probe_kwargs, **kwargs})
        else:
            factory = ProbeFactory(probe, dict(kwargs))
        _check_probe_cls(name, factory.probe_cls)
        with self._lock:
            old = self._factories.get(name)
            if old is not None and not override and not _same_definition(old.probe_cls, factory.probe_cls):
                raise ProbingValueError(
                    f"probe_type {name!r} is already registered ({old.probe_cls.__qualname__}); "
                    "pass override=True to replace it"
                )
            self._factories[name] = factory

    def unregister(self, name: str) -> None:
        with self._lock:
            if name not in self._factories:
                raise ProbeNotFoundError(name, self._known())
            del self._factories[name]

    def get(self, name: str) -> ProbeFactory:
        with self._lock:
            factory = self._factories.get(name)
        if factory is None and self._load_entry_points:
            factory = self._from_entry_point(name)
        if factory is None:
            raise ProbeNotFoundError(name, self._known())
        return factory

    def list(self) -> builtins.list[str]:
        return self._known()

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._factories

    def __len__(self) -> int:
        with self._lock:
            return len(self._factories)

    def __repr__(self) -> str:
        return f"ProbeRegistry({self._known()})"

    def _known(self) -> builtins.list[str]:
        with self._lock:
            return sorted(self._factories)

    def _from_entry_point(self, name: str) -> ProbeFactory | None:
        matches: builtins.list[EntryPoint] = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not matches:
            return None
        loaded = matches[0].load()
        with self._lock:
            if name not in self._factories:  # loading may have registered it already
                self._add(name, loaded, {}, override=False)
            return self._factories[name]


def _same_definition(old: type, new: type) -> bool:
    return (old.__module__, old.__qualname__) == (new.__module__, new.__qualname__)


default_registry = ProbeRegistry()


def register_probe(name: str, probe: Any = None, /, *, override: bool = False, **probe_kwargs: Any) -> Any:
    """`ProbeRegistry.register` on the default registry."""
    return default_registry.register(name, probe, override=override, **probe_kwargs)


def unregister_probe(name: str) -> None:
    default_registry.unregister(name)


def get_probe_factory(name: str) -> ProbeFactory:
    return default_registry.get(name)


def list_probes() -> builtins.list[str]:
    return default_registry.list()


