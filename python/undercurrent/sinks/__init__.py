"""Where signals and results go. `FileLogSink` hands its path to the engine, which writes one
NDJSON line per signal and per result (the same records as ``undercurrent generate
--log-file``). `chain`, `redact_keys` and `drop_keys` transform record dicts (0.1's helpers)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class FileLogSink:
    """Signals and results appended to ``path`` as NDJSON by the engine."""

    path: str | os.PathLike[str]


def redact_keys(*keys: str, replacement: Any = "[REDACTED]") -> Callable[[Record], Record]:
    """A transform replacing the values of ``keys`` (at any depth) with ``replacement``."""
    wanted = set(keys)

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (replacement if k in wanted else walk(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk


def drop_keys(*keys: str) -> Callable[[Record], Record]:
    """A transform removing ``keys`` (at any depth)."""
    wanted = set(keys)

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items() if k not in wanted}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk


def chain(*transforms: Callable[[Record], Record]) -> Callable[[Record], Record]:
    """The transforms applied left to right."""

    def run(record: Record) -> Record:
        for t in transforms:
            record = t(record)
        return record

    return run


__all__ = ["FileLogSink", "chain", "drop_keys", "redact_keys"]
