"""`RequestContext`: what a probe knows about its request (``on_start`` and ``on_end``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequestContext:
    """``prompt_metadata`` holds at least ``model`` and ``prompt_len``;
    ``extraction_point_config`` is the point's `ExtractionPoint`."""

    request_id: str
    prompt_metadata: dict[str, Any]
    extraction_point_config: Any
