"""`ProbeResult`: a probe's conclusion for one (request, extraction point), from ``on_end``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .signal import ProbeSignal


@dataclass
class ProbeResult:
    """Exactly one per (request, extraction point), even when the point never matched.

    ``verdict`` is probe-defined; ``signal_history`` lists the signals the probe emitted, in order.
    """

    request_id: str
    extraction_point_name: str
    verdict: Any = None
    signal_history: list[ProbeSignal] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
