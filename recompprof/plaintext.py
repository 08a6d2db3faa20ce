"""Plain text from rich: the console the terminal report, diff and divergence sections render into."""

from __future__ import annotations

import io

from rich.console import Console


def console(width: int) -> tuple[Console, io.StringIO]:
    """A console of ``width`` columns writing into the returned buffer: no colour codes, no highlighting,
    the same bytes whether or not stdout is a terminal (reports are also read in logs and CI). No markup
    and no emoji codes either: reason texts and labels are printed as torch wrote them (``[bold]`` and
    ``:warning:`` included), and skipping rich's markup parse makes large reports faster."""
    out = io.StringIO()
    return Console(file=out, width=width, color_system=None, force_terminal=False, highlight=False,
                   markup=False, emoji=False), out
