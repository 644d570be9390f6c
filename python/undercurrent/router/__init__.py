"""Async probe queues' overflow policies (0.1's `OverflowPolicy`) and per-(request, point)
metrics (0.1's `MetricsSink`, `InMemoryMetricsRegistry`, `MetricsSnapshot`).

A model opened with ``metrics_sink=`` reports to it: every Python probe call as it happens
(``record_activation`` with its wall time, ``record_probe_error`` when it raises), and, when a
request ends, each async point's records dropped by its queue (``record_drop``, once per record)
and its final queue depth. The engine's own Prometheus metrics (``undercurrent serve``'s
/metrics) cover the built-in probes too."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum


class OverflowPolicy(str, Enum):
    """What a full async queue does with a new record: drop the oldest queued one, drop the new
    one, or make the engine wait for room."""

    DROP_OLDEST = "drop_oldest"
    DROP_NEWEST = "drop_newest"
    BLOCK = "block"


class MetricsSink(ABC):
    """Receives per-(request, extraction point) events. Called from the engine's threads (an
    inline point's step, an async worker): implementations are thread-safe and quick."""

    @abstractmethod
    def record_queue_depth(self, request_id: str, extraction_point_name: str, depth: int) -> None: ...

    @abstractmethod
    def record_drop(self, request_id: str, extraction_point_name: str) -> None: ...

    @abstractmethod
    def record_activation(self, request_id: str, extraction_point_name: str, latency_seconds: float) -> None: ...

    @abstractmethod
    def record_probe_error(self, request_id: str, extraction_point_name: str) -> None: ...


@dataclass(frozen=True)
class MetricsSnapshot:
    """One (request, point)'s counters at one moment: records waiting in its queue, records its
    queue dropped, probe calls made (failed ones included), calls that raised, and the mean wall
    time of a call (None before the first)."""

    queue_depth: int
    drop_count: int
    activation_count: int
    error_count: int
    avg_activation_latency_seconds: float | None


class InMemoryMetricsRegistry(MetricsSink):
    """A `MetricsSink` that keeps the counters in memory; `snapshot` reads them. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str], list[float]] = {}  # depth, drops, calls, errors, seconds

    def _add(self, key: tuple[str, str], slot: int, value: float) -> None:
        with self._lock:
            c = self._counters.setdefault(key, [0, 0, 0, 0, 0.0])
            c[slot] += value

    def register(self, request_id: str, extraction_point_name: str) -> None:
        """Starts a zeroed entry, so that a snapshot before the first event reads zeros."""
        self._add((request_id, extraction_point_name), 0, 0)

    def forget(self, request_id: str, extraction_point_name: str) -> None:
        """Drops one entry."""
        with self._lock:
            self._counters.pop((request_id, extraction_point_name), None)

    def record_queue_depth(self, request_id: str, extraction_point_name: str, depth: int) -> None:
        with self._lock:
            self._counters.setdefault((request_id, extraction_point_name), [0, 0, 0, 0, 0.0])[0] = depth

    def record_drop(self, request_id: str, extraction_point_name: str) -> None:
        self._add((request_id, extraction_point_name), 1, 1)

    def record_activation(self, request_id: str, extraction_point_name: str, latency_seconds: float) -> None:
        with self._lock:
            c = self._counters.setdefault((request_id, extraction_point_name), [0, 0, 0, 0, 0.0])
            c[2] += 1
            c[4] += latency_seconds

    def record_probe_error(self, request_id: str, extraction_point_name: str) -> None:
        self._add((request_id, extraction_point_name), 3, 1)

    def snapshot(self, request_id: str, extraction_point_name: str) -> MetricsSnapshot | None:
        """The entry's counters, or None when nothing was recorded for it."""
        with self._lock:
            c = self._counters.get((request_id, extraction_point_name))
            if c is None:
                return None
            depth, drops, calls, errors, seconds = c
        return MetricsSnapshot(int(depth), int(drops), int(calls), int(errors), seconds / calls if calls else None)

    def keys(self) -> list[tuple[str, str]]:
        """Every (request_id, extraction_point_name) with an entry."""
        with self._lock:
            return list(self._counters)


__all__ = ["InMemoryMetricsRegistry", "MetricsSink", "MetricsSnapshot", "OverflowPolicy"]
