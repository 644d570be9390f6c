"""Where signals and results go. `FileLogSink` and `WebhookLogSink` are written by the engine
(probe/sinks: one NDJSON line, or one JSON POST, per signal and per result — the records of
``undercurrent generate --log-file`` / ``--webhook``), off the step path. `chain`, `redact_keys`
and `drop_keys` transform record dicts (0.1's helpers); given as a sink's ``redact=``, the engine
applies the same keys (a plain Python function cannot run there and is refused)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
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

    def run(record: Record) -> Record:
        for t in transforms:
            record = t(record)
        return record

    steps = [getattr(t, "_uc_steps", None) for t in transforms]
    if all(s is not None for s in steps):
        run._uc_steps = [step for s in steps for step in s]  # type: ignore[attr-defined]
    return run


__all__ = ["DEFAULT_PROMPT_TEXT_KEYS", "FileLogSink", "WebhookLogSink", "chain", "drop_keys", "redact_keys"]
