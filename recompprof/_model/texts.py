"""Torch's texts made safe for every sink: bounded, no lone surrogates, no NULs; graph-break text redacted; and any
text made safe to show on a terminal or in a log line (:func:`escape`)."""

from __future__ import annotations

import re

from recompprof._model.escaping import escape
from recompprof._model.events import MAX_SUBJECT, MAX_TEXT

__all__ = ["clean_text", "escape", "graph_break_text"]

_QUOTED = re.compile(r"'[^'\n]{0,4096}'|\"[^\"\n]{0,4096}\"|ConstantVariable\([^)\n]{0,4096}\)")


def clean_text(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as a bounded string that every sink accepts (no lone surrogates, no NULs)."""
    text = text if isinstance(text, str) else str(text)
    # Lone surrogates would break JSON serialisation downstream; NULs break some sinks.
    return text[:limit].encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


def graph_break_text(text: object, redact: bool = False) -> str:
    """A graph-break reason for the event log; redacted, only its first line with quoted literals removed."""
    text = clean_text(text)
    if not redact:
        return text
    first = text.strip().splitlines()[0] if text.strip() else "graph break"
    return _QUOTED.sub("<redacted>", first)[:MAX_SUBJECT]
