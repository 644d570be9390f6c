"""Where signals and results go. `FileLogSink` and `WebhookLogSink` are written by the engine
(probe/sinks: one NDJSON line, or one JSON POST, per signal and per result — the records of
``undercurrent generate --log-file`` / ``--webhook``), off the step path. `chain`, `redact_keys`
and `drop_keys` transform record dicts (0.1's helpers); given as a sink's ``redact=``, the engine
applies the same keys (a plain Python function cannot run there and is refused).

`LogSink` is 0.1's interface for a sink written in Python: subclass it (or give any object with
``write_signal(request_id, extraction_point_name, signal)`` and ``write_result(request_id,
extraction_point_name, result)``) and pass it as ``log_sink=``, alone or in a list with the
engine's sinks. It gets the records the engine writes to a FileLogSink (every signal of an async
point, every FLAG / ABORT of an inline one, circuit-breaker trips, one result per request and
point, inline points included), as `ProbeSignal` / `ProbeResult` objects, in the order written,
on the thread that called ``generate`` once the batch has finished (the engine's threads never
wait for Python). A sink that raises is logged on the ``undercurrent`` logger and counted
(``ProbedModel.log_sink_errors``); generation goes on."""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

Record = dict[str, Any]


# 0.1's DEFAULT_PROMPT_TEXT_KEYS: what a webhook redacts unless include_prompt_text=True (the
# engine's list, probe/sinks/redaction.h, holds these and a few more).
DEFAULT_PROMPT_TEXT_KEYS = ("prompt", "prompts", "prompt_text", "text", "input_text", "output_text",
                            "generated_text", "completion", "response", "messages")


def _redaction(redact: Any, prompt_text: bool) -> dict[str, Any]:
    """The engine's redaction options for a sink's ``redact=`` (built by the helpers below)."""
    out: dict[str, Any] = {"redact_prompt_text": prompt_text, "redact_keys": [], "drop_keys": []}
    if redact is None:
        return out
    steps = getattr(redact, "_uc_steps", None)
    if steps is None:
        raise TypeError(
            f"redact={redact!r}: the engine writes this sink, so redact must be built from redact_keys, "
            "drop_keys and chain (a plain Python function cannot run there)"
        )
    replacements = {r for kind, _, r in steps if kind == "redact"}
    if len(replacements) > 1:
        raise ValueError(f"redact: one replacement string per sink, got {sorted(map(repr, replacements))}")
    for kind, keys, replacement in steps:
        out[f"{kind}_keys"].extend(keys)
        if kind == "redact":
            out["replacement"] = replacement
    return out


@dataclass(frozen=True)
class FileLogSink:
    """Signals and results appended to ``path`` as NDJSON by the engine; ``redact`` (from
    `redact_keys` / `drop_keys` / `chain`) is applied to every record first."""

    path: str | os.PathLike[str]
    redact: Callable[[Record], Record] | None = None

    def _engine(self) -> dict[str, Any]:
        return {"kind": "file", "path": os.fspath(self.path), "redaction": _redaction(self.redact, False)}


@dataclass(frozen=True)
class WebhookLogSink:
    """Signals and results POSTed as JSON to ``url`` by the engine's sender thread (never on
    the step path): a failed POST is retried ``max_retries`` times with exponential backoff
    (``backoff_base * 2**n`` seconds, jittered), each attempt bounded by ``request_timeout``;
    a record that exhausts its retries, or meets a full queue (``queue_maxsize``), is appended
    to ``dead_letter_path`` (NDJSON) when given, else dropped and counted. Prompt text is
    redacted unless ``include_prompt_text``; ``redact`` adds keys. ``bearer_token_env`` names
    an environment variable whose value is sent as ``Authorization: Bearer``. Records still
    queued when the model closes are delivered first (bounded)."""

    url: str
    max_retries: int = 2
    backoff_base: float = 0.1
    request_timeout: float = 5.0
    dead_letter_path: str | os.PathLike[str] | None = None
    queue_maxsize: int = 1000
    redact: Callable[[Record], Record] | None = None
    include_prompt_text: bool = False
    bearer_token_env: str | None = None

    def _engine(self) -> dict[str, Any]:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise ValueError(f"WebhookLogSink.url: expected http://... or https://..., got {self.url!r}")
        return {
            "kind": "webhook",
            "url": self.url,
            "max_retries": int(self.max_retries),
            "backoff_base": float(self.backoff_base),
            "request_timeout": float(self.request_timeout),
            "dead_letter_path": os.fspath(self.dead_letter_path) if self.dead_letter_path is not None else "",
            "queue_maxsize": int(self.queue_maxsize),
            "bearer_token_env": self.bearer_token_env or "",
            "redaction": _redaction(self.redact, not self.include_prompt_text),
        }


def redact_keys(*keys: str, replacement: Any = "[REDACTED]") -> Callable[[Record], Record]:
    """A transform replacing the values of ``keys`` (at any depth) with ``replacement``."""
    wanted = set(keys)

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (replacement if k in wanted else walk(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    walk._uc_steps = [("redact", list(keys), replacement)]  # type: ignore[attr-defined]
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

    walk._uc_steps = [("drop", list(keys), None)]  # type: ignore[attr-defined]
    return walk


def chain(*transforms: Callable[[Record], Record]) -> Callable[[Record], Record]:
    """The transforms applied left to right."""

    def run(record: Record) -> Record | None:
        for t in transforms:
            record = t(record)
            if record is None:  # a step dropped it (0.1)
                return None
        return record

    steps = [getattr(t, "_uc_steps", None) for t in transforms]
    if all(s is not None for s in steps):
        run._uc_steps = [step for s in steps for step in s]  # type: ignore[attr-defined]
    return run


def to_jsonable(value: Any) -> Any:
    """`value` as JSON-safe data (0.1's helper for custom sinks): dataclasses as dicts, enums as
    their value, mappings with str keys, sequences as lists, tensors and arrays as a summary
    ({__summary__, type, shape, dtype}, never their values), anything else as str."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"__summary__": "bytes", "length": len(value)}
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return {"__summary__": "tensor", "type": type(value).__name__, "shape": [int(d) for d in value.shape],
                "dtype": str(value.dtype)}
    try:
        return str(value)
    except Exception:  # noqa: BLE001 (logging never raises on a hostile __str__)
        return f"<unserializable {type(value).__name__}>"


_logger = logging.getLogger("undercurrent")


class LogSink(ABC):
    """A sink written in Python (0.1's interface): implement ``write_signal`` and
    ``write_result``. To honour a ``redact=`` argument, call ``super().__init__(redact=redact)``
    and pass each record dict through ``self._apply_redaction(record)`` before writing it (it
    returns None when the record must be dropped; a redact function that raises, or returns
    something other than a dict or None, drops the record and is counted in
    ``redaction_error_count``). Here ``redact`` may be any function, `chain` of them included,
    since the sink runs in Python."""

    _redaction_counter_lock = threading.Lock()

    def __init__(self, *, redact: Callable[[Record], Record | None] | None = None) -> None:
        self._redact = redact
        self._redaction_error_count = 0

    @property
    def redaction_error_count(self) -> int:
        return getattr(self, "_redaction_error_count", 0)

    def _apply_redaction(self, record: Record) -> Record | None:
        redact = getattr(self, "_redact", None)
        if redact is None:
            return record
        try:
            redacted = redact(copy.deepcopy(record))
        except Exception as exc:  # noqa: BLE001 (a failing redaction drops the record, never leaks it)
            self._count_redaction_error()
            _logger.warning("%s: redact function raised %s; dropping record", type(self).__name__, type(exc).__name__)
            return None
        if redacted is not None and not isinstance(redacted, dict):
            self._count_redaction_error()
            _logger.warning("%s: redact function returned %s (expected dict or None); dropping record",
                            type(self).__name__, type(redacted).__name__)
            return None
        return redacted

    def _count_redaction_error(self) -> None:
        with LogSink._redaction_counter_lock:
            self._redaction_error_count = getattr(self, "_redaction_error_count", 0) + 1

    @abstractmethod
    def write_signal(self, request_id: str, extraction_point_name: str, signal: Any) -> None:
        """One `ProbeSignal` of a probe."""

    @abstractmethod
    def write_result(self, request_id: str, extraction_point_name: str, result: Any) -> None:
        """One request's `ProbeResult` at a point, after its probe's on_end."""


def is_python_sink(sink: Any) -> bool:
    """Whether `sink` is written in Python (0.1's write_signal / write_result), not by the engine."""
    return not isinstance(sink, (FileLogSink, WebhookLogSink)) and all(
        callable(getattr(sink, m, None)) for m in ("write_signal", "write_result"))


__all__ = ["DEFAULT_PROMPT_TEXT_KEYS", "FileLogSink", "LogSink", "WebhookLogSink", "chain", "drop_keys",
           "redact_keys", "to_jsonable"]
