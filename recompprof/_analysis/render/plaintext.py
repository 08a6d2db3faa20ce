"""Plain text for the terminal: the console reports render into, and the escaping of what they show.

Names and texts in an event log (frame names, file paths, reasons, messages, run ids) are whatever the
log says, so they may hold terminal escape sequences, carriage returns or newlines that would rewrite or
forge lines on the user's terminal. Everything printed through :func:`console`, and every line the CLI
writes itself (:func:`escape`), shows such characters as Python escapes (``\\x1b``, ``\\n``, ``\\u202e``)
instead. Line breaks therefore come only from the console's layout: one ``print`` per line,
``console.line()`` for a blank line, never a newline inside the text. Table cells wrap labels between words and path parts, never inside a
word (:class:`Wrapped`, :class:`Fitted`).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from recompprof._model.escaping import escape


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
    return _EscapingConsole(
        file=out,
        width=width,
        color_system=None,
        force_terminal=False,
        highlight=False,
        markup=False,
        emoji=False,
    ), out


_UNIT = re.compile(r"[^\s/]*/+|[^\s/]+")  # a path part with its separator, or a word's last part


def units(word: str) -> list[str]:
    """``word`` cut after each ``/``: the places a label may wrap inside a word (a path)."""
    return _UNIT.findall(word)


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken between words or after a path's ``/``; only a
    part still wider than the column is cut, into column-wide pieces."""
    width = max(width, 1)
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        line = ""
        for word in paragraph.split():
            if line and len(line) + 1 + len(word) <= width:
                line += " " + word
                continue
            if len(word) <= width:
                if line:
                    lines.append(line)
                line = word
                continue
            spaced = bool(line)  # the word's first part follows a space; the others follow a "/"
            for part in units(word):
                sep = " " if spaced else ""
                if line and len(line) + len(sep) + len(part) <= width:
                    line += sep + part
                else:
                    if line:
                        lines.append(line)
                    while len(part) > width:
                        lines.append(part[:width])
                        part = part[width:]
                    line = part
                spaced = False
        lines.append(line)
    return lines


class Wrapped:
    """A table cell that wraps like :func:`wrap` (rich itself folds a long word at any character)."""

    def __init__(self, text: str) -> None:
        self.text = escape(
            text
        )  # rendered as a Text of its own, not through the console's render_str

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        parts = [part for word in self.text.split() for part in units(word)] or [""]
        longest = max(len(line) for line in self.text.splitlines() or [""])
        return Measurement(
            min(max(len(p) for p in parts), options.max_width), min(longest, options.max_width)
        )

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text("\n".join(wrap(self.text, options.max_width)), no_wrap=True, overflow="crop")


class Fitted:
    """``table`` where it fits the width; narrower, each row as a record (its first cell, then ``column value``
    pairs), wrapped like :func:`wrap`, so no cell is cut inside a word."""

    def __init__(
        self,
        table: Table,
        columns: tuple[str, ...],
        rows: list[tuple[str, ...]],
        needed: int,
        wrapping: dict[int, tuple[int, int]],
    ) -> None:
        # needed: the table's width with each wrapping column at its minimum; wrapping: column -> (min, max) width
        self.table, self.columns, self.rows, self.needed, self.wrapping = (
            table,
            columns,
            rows,
            needed,
            wrapping,
        )

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.needed <= options.max_width:
            # Size the wrapping columns here (rich's own shrinking would go below their minimum, cutting words):
            # the column that needs the least to print whole first, each as wide as its longest line while space
            # is left (a short label before a long reason text).
            spare = options.max_width - self.needed
            for index, (least, most) in sorted(
                self.wrapping.items(), key=lambda item: item[1][1] - item[1][0]
            ):
                grow = min(most - least, spare)
                spare -= grow
                self.table.columns[index].width = least + grow
            yield self.table
            return
        width = options.max_width
        lines = wrap(escape(str(self.table.title or "")), width)
        for row in (tuple(escape(cell) for cell in row) for row in self.rows):
            lines += ["  " + line for line in wrap(row[0], width - 2)]
            pairs = " · ".join(
                f"{column} {cell}" for column, cell in zip(self.columns[1:], row[1:], strict=True)
            )
            lines += ["    " + line for line in wrap(pairs, width - 4)]
        yield Text("\n".join(lines), no_wrap=True, overflow="crop")


def table(
    title: str,
    columns: tuple[str, ...],
    rows: list[tuple[str, ...]],
    *,
    right: Iterable[str] = (),
    fold: Iterable[str] = (),
) -> Fitted:
    """A table whose headers never break inside a word, at any width.

    Short columns (counts, categories) get a fixed width: their longest header word or cell. Only the
    ``fold`` columns (frame labels, reason texts, hints) share the rest; their cells wrap between words and
    after a path's ``/`` (:class:`Wrapped`), and only a part wider than the whole column is cut.
    They are never narrower than their longest header word. Where even that does not fit the width, each row
    prints as a record instead (:class:`Fitted`).
    """
    # At least as wide as the title (within the console), so a narrow table does not wrap its title.
    grid = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, min_width=len(title))
    right, fold = set(right), set(fold)
    # the table's edges, each cell's padding and the gaps between columns
    needed = 2 + 3 * len(columns) - 1
    wrapping: dict[int, tuple[int, int]] = {}
    for i, col in enumerate(columns):
        word = max(len(w) for w in col.split())
        if col in fold:
            grid.add_column(
                col, justify="right" if col in right else "left", overflow="fold", min_width=word
            )
            least = max([word, *(len(p) for row in rows for w in row[i].split() for p in units(w))])
            wrapping[i] = (
                least,
                max(
                    [least, len(col), *(len(line) for row in rows for line in row[i].splitlines())]
                ),
            )
            needed += least
        else:
            cells = max((len(line) for row in rows for line in row[i].splitlines()), default=0)
            grid.add_column(
                col, justify="right" if col in right else "left", width=max(word, cells)
            )
            needed += max(word, cells)
    folded = [i for i, col in enumerate(columns) if col in fold]
    for row in rows:
        grid.add_row(*(Wrapped(cell) if i in folded else cell for i, cell in enumerate(row)))
    return Fitted(grid, columns, rows, needed, wrapping)
