"""`ActivationRecord`: one captured activation of one (request, extraction point, layer, token)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProbingValueError


@dataclass
class ActivationRecord:
    """``tensor`` is the activation, float32 ``[hidden]``: a ``torch.Tensor`` when torch is
    installed (a view of the step's batch, no copy), else a numpy array. ``generated_index`` is
    ``token_pos - prompt_len`` for a generated token, else None (this engine's addition)."""

    request_id: str
    extraction_point_name: str
    layer: int
    token_pos: int
    tensor_type: str
    tensor: Any
    is_generated: bool
    timestamp: float = field(default_factory=time.time)
    generated_index: int | None = None

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ProbingValueError(f"ActivationRecord.request_id must be a non-empty string (got {self.request_id!r})")
        if not self.extraction_point_name:
            raise ProbingValueError(
                "ActivationRecord.extraction_point_name must be a non-empty string "
                f"(got {self.extraction_point_name!r})"
            )
        if self.layer < 0:
            raise ProbingValueError(f"ActivationRecord.layer must be >= 0 (got {self.layer!r})")
        if self.token_pos < 0:
            raise ProbingValueError(f"ActivationRecord.token_pos must be >= 0 (got {self.token_pos!r})")
        if self.tensor is None:
            raise ProbingValueError("ActivationRecord.tensor must not be None")

    def metadata(self) -> dict[str, Any]:
        """Every field but the tensor."""
        return {
            "request_id": self.request_id,
            "extraction_point_name": self.extraction_point_name,
            "layer": self.layer,
            "token_pos": self.token_pos,
            "tensor_type": self.tensor_type,
            "is_generated": self.is_generated,
            "timestamp": self.timestamp,
        }
