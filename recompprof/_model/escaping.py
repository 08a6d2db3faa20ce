"""Any text made safe to show on a terminal or in a log line (:func:`escape`), in the standard library
alone: the commands that print lines and never read an event (``history``, errors) need not load the
event model for it. :mod:`recompprof._model.texts` re-exports it with the rest of the text rules."""

from __future__ import annotations

import re

__all__ = ["escape"]

# C0 and C1 controls and DEL; lone surrogates; and the invisible characters a terminal acts on or that
# reorder or hide text: Arabic letter mark, zero-width characters, left-to-right/right-to-left marks,
# line and paragraph separators, bidirectional embeddings, overrides and isolates, word joiners, BOM.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def escape(text: str) -> str:
    """``text`` with each control, bidirectional or invisible formatting character shown as its Python escape
    (``\\x1b``, ``\\n``, ``\\u202e``), so no text can move the cursor, recolour, clear or forge lines."""
    return _UNSAFE.sub(_escaped, text)
