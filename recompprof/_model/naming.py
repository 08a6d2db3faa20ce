"""Naming: a name derived from another (a job, a run folder, a lake file from a run id) made to fit
its place, short enough (:func:`shortened`) and text every sink takes (:func:`as_text`). The standard
library alone: the lake's layout and a run's folder name use it without loading the event model."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

__all__ = ["as_text", "shortened"]


def shortened(name: str, limit: int, size: Callable[[str], int] = len) -> str:
    """``name`` where its ``size`` (characters, or what its place counts: a file name's bytes)
    fits in ``limit``, else the head of whole characters that fits with ``~`` and a digest of the
    whole name: a name derived from another (a job or a file name from a 300-character launcher run
    id) stays within its place, and two long names stay two."""
    if size(name) <= limit:
        return name
    tail = "~" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    head = ""
    for char in name:  # one size() per character of the head: at most ``limit`` calls
        if size(head + char + tail) > limit:
            break
        head += char
    return head + tail


def as_text(value: str) -> str:
    """``value`` as text every sink takes. Bytes of an environment variable or a file name that are
    not UTF-8 reach Python as lone surrogates, which JSON and the event model refuse (``attach`` and
    ``ingest`` raised): they are spelled ``\\xff``, the same wherever they are read, so the ranks
    of a job still share one run id."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte stands for
        raw = value.encode("utf-8", "backslashreplace")
    return raw.decode("utf-8", "backslashreplace")
