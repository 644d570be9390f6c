"""What a probe says about one activation (`ProbeSignal`) and what it can ask for (`ProbeAction`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ProbeAction(str, Enum):
    """What the engine does with a signal. Only an inline point's ABORT stops generation."""

    CONTINUE = "continue"
    ABORT = "abort"
    FLAG = "flag"
    ESCALATE = "escalate"  # this engine: hold the request for the point's classifier


@dataclass
class ProbeSignal:
    """Returned by ``Probe.on_activation`` when an activation warrants a message."""

    action: ProbeAction = ProbeAction.CONTINUE
    metadata: dict[str, Any] = field(default_factory=dict)
    confidence: float | None = None
    timestamp: float = field(default_factory=time.time)
