"""Torch's texts made safe for every sink: bounded, no lone surrogates, no NULs; graph-break text redacted; and any
text made safe to show on a terminal or in a log line (:func:`escape`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from recompprof._model.escaping import escape
from recompprof._model.events import MAX_SUBJECT, MAX_TEXT

__all__ = ["clean_text", "escape", "graph_break_text", "shortened"]

_QUOTED = re.compile(r"'[^'\n]{0,4096}'|\"[^\"\n]{0,4096}\"|ConstantVariable\([^)\n]{0,4096}\)")


def clean_text(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as a bounded string that every sink accepts (no lone surrogates, no NULs)."""
    text = text if isinstance(text, str) else str(text)
    # Lone surrogates would break JSON serialisation downstream; NULs break some sinks.
    return text[:limit].encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


def shortened(name: str, limit: int = MAX_SUBJECT, size: Callable[[str], int] = len) -> str:
    """``name`` where its ``size`` (characters, or what its place counts: a file name's bytes) fits in
    ``limit``, else the head of whole characters that fits with ``~`` and a digest of the whole name:
    a name derived from another (a job or a file name from a 300-character launcher run id) stays
    within its place, and two long names stay two."""
    if size(name) <= limit:
        return name
    tail = "~" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    head = ""
    for char in name:  # size() grows with each character: a few dozen calls at most
        if size(head + char + tail) > limit:
            break
        head += char
    return head + tail


def graph_break_text(text: object, redact: bool = False) -> str:
    """A graph-break reason for the event log; redacted, only its first line with quoted literals removed."""
    text = clean_text(text)
    if not redact:
        return text
    first = text.strip().splitlines()[0] if text.strip() else "graph break"
    return _QUOTED.sub("<redacted>", first)[:MAX_SUBJECT]
