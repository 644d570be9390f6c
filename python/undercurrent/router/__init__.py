"""Async probe queues' overflow policies (0.1's `OverflowPolicy`)."""

from __future__ import annotations

from enum import Enum


class OverflowPolicy(str, Enum):
    """What a full async queue does with a new record: drop the oldest queued one, drop the new
    one, or make the engine wait for room."""

    DROP_OLDEST = "drop_oldest"
    DROP_NEWEST = "drop_newest"
    BLOCK = "block"


__all__ = ["OverflowPolicy"]
