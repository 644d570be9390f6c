"""The exceptions the package raises. Every one is a `ProbingError`, and also the built-in type
a caller would catch for that kind of mistake (ValueError, TypeError, KeyError, RuntimeError)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ProbingError(Exception):
    """Base class of every error the package raises on purpose."""


class ProbingValueError(ProbingError, ValueError):
    """A value is out of range or malformed."""


class ProbingTypeError(ProbingError, TypeError):
    """A value has the wrong type."""


class ProbingRuntimeError(ProbingError, RuntimeError):
    """An operation is not possible in the current state (e.g. a closed model)."""


class ProbeDefinitionError(ProbingError, TypeError):
    """A probe class or function cannot be used as a probe (refused when defined or registered)."""


class SpecValidationError(ProbingError, ValueError):
    """A spec does not parse or does not fit the model. The message names the file, the line and
    the field (``FILE:LINE: extraction_points[I] 'NAME'.FIELD: MESSAGE``)."""


def did_you_mean(word: object, known: Iterable[str]) -> str:
    """`` Did you mean: 'x'?`` for the closest known name, or an empty string."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" Did you mean: {close[0]!r}?" if close else ""
