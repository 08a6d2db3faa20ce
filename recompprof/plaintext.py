"""Plain text for the terminal: the console reports render into, and the escaping of what they show.

Names and texts in an event log (frame names, file paths, reasons, messages, run ids) are whatever the
log says, so they may hold terminal escape sequences, carriage returns or newlines that would rewrite or
forge lines on the user's terminal. Everything printed through :func:`console`, and every line the CLI
writes itself (:func:`escape`), shows such characters as Python escapes (``\\x1b``, ``\\n``, ``\\u202e``)
instead. Line breaks therefore come only from the console's layout: one ``print`` per line,
``console.line()`` for a blank line, never a newline inside the text.
"""

from __future__ import annotations

import io
import re
from typing import Any

from rich.console import Console
from rich.text import Text

# C0 and C1 controls and DEL; lone surrogates; and the invisible characters a terminal acts on or that
# reorder or hide text: Arabic letter mark, zero-width characters, left-to-right/right-to-left marks,
# line and paragraph separators, bidirectional embeddings, overrides and isolates, word joiners, BOM.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def escape(text: str) -> str:
    """``text`` with each control, bidirectional or invisible formatting character shown as its Python escape
    (``\\x1b``, ``\\n``, ``\\u202e``), so no text can move the cursor, recolour, clear or forge lines."""
    return _UNSAFE.sub(_escaped, text)


class _EscapingConsole(Console):
    """Every string rich renders (printed text, table cells, titles, and their measured widths) is escaped first."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(escape(text), **kwargs)


def console(width: int) -> tuple[Console, io.StringIO]:
    """A console of ``width`` columns writing into the returned buffer: no colour codes, no highlighting,
    the same bytes whether or not stdout is a terminal (reports are also read in logs and CI). No markup
    and no emoji codes either: reason texts and labels are printed as torch wrote them (``[bold]`` and
    ``:warning:`` included), and skipping rich's markup parse makes large reports faster. Control
    characters in any text are shown escaped (:func:`escape`)."""
    out = io.StringIO()
    return _EscapingConsole(file=out, width=width, color_system=None, force_terminal=False, highlight=False,
                            markup=False, emoji=False), out
