"""The divergence section: the per-rank matrix and the "diverging" table of the frames that
:func:`recompprof._analysis.report.divergence.find` finds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console

from recompprof._analysis.render import plaintext
from recompprof._analysis.render.plaintext import Fitted
from recompprof._analysis.render.wording import running_at_end
from recompprof._analysis.report.divergence import Divergence, RankCell, all_ranks, cell, find
from recompprof._model.ranks import MAX_LISTED_RANKS, rank_list

if TYPE_CHECKING:
    from recompprof._analysis.report.model import Report

# Up to this many ranks the matrix has one column per rank; beyond, ranks with equal cells are grouped.
MAX_RANK_COLUMNS = 8
MAX_MATRIX_FRAMES = 20


def describe(divergence: Divergence) -> str:
    """One line: frame, ranks, steps and what differs."""
    return (
        f"{divergence.frame.label}: {_ranks_with_steps(divergence.first_steps)} ({', '.join(divergence.aspects)} differ from "
        f"{rank_list(divergence.baseline_ranks)})"
    )


class DescribedDivergence(Divergence):
    """A :class:`~recompprof._analysis.report.divergence.Divergence` that says itself in one line: what
    ``recompprof.find_divergence`` gives (public as ``recompprof.Divergence``)."""

    def describe(self) -> str:
        """One line: frame, ranks, steps and what differs."""
        return describe(self)


def find_divergence(report: Report) -> list[DescribedDivergence]:
    """:func:`~recompprof._analysis.report.divergence.find`, each divergence able to say itself."""
    return [
        DescribedDivergence(**{f.name: getattr(d, f.name) for f in dataclasses.fields(d)})
        for d in find(report)
    ]


def cell_text(rank_cell: RankCell) -> str:
    """``compiles/recompiles``, and ``Ln`` for recompile-limit hits."""
    text = f"{rank_cell.compiles}/{rank_cell.recompiles}"
    if rank_cell.limit_hits:
        text += f" L{rank_cell.limit_hits}"
    return text


def _ranks_with_steps(first_steps: dict[int, int | None]) -> str:
    """``{1: 3, 5: 3, 7: None}`` -> ``ranks 1, 5 at step 3; rank 7``."""
    by_step: dict[int | None, list[int]] = {}
    for rank, step in first_steps.items():
        by_step.setdefault(step, []).append(rank)
    parts = [
        f"{rank_list(ranks)} at step {step}" if step is not None else rank_list(ranks)
        for step, ranks in sorted(by_step.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    ]
    return "; ".join(parts)


def _categories(c: RankCell) -> str:
    return ", ".join(sorted(c.categories)) or "-"


MATRIX_TITLE = (
    "Compiles per frame and rank (compiles/recompiles, Ln = recompile-limit hits; * = diverging)"
)
DIVERGING_TITLE = (
    "Diverging across ranks (a rank that recompiles while its peers wait in a collective can "
    "stall or time out the job)"
)
DIVERGING_COLUMNS = (
    "Frame",
    "Diverging ranks (first divergent step)",
    "Differs in",
    "These ranks",
    "Other ranks",
)


def matrix_rows(
    report: Report, ranks: Sequence[int], diverging: dict[str, Divergence]
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The matrix's columns and rows: one column per rank up to ``MAX_RANK_COLUMNS`` ranks, else ranks
    with equal cells grouped into ranges."""
    frames = sorted(
        report.frames.values(),
        key=lambda f: (f.key not in diverging, -f.recompiles, -f.compiles, f.label),
    )[:MAX_MATRIX_FRAMES]
    rows: list[tuple[str, ...]]
    if len(ranks) <= MAX_RANK_COLUMNS:
        columns = ("Frame", *(f"rank {r}" for r in ranks))
        rows = [
            (
                ("* " if f.key in diverging else "") + f.label,
                *(cell_text(cell(f, r)) for r in ranks),
            )
            for f in frames
        ]
        return columns, rows
    rows = []
    for f in frames:
        groups: dict[str, list[int]] = {}
        for r in ranks:
            groups.setdefault(cell_text(cell(f, r)), []).append(r)
        text = "; ".join(
            f"{rank_list(rs)}: {value}"
            for value, rs in sorted(groups.items(), key=lambda kv: -len(kv[1]))
        )
        rows.append((("* " if f.key in diverging else "") + f.label, text))
    return ("Frame", "Ranks with the same cell"), rows


def _matrix(report: Report, ranks: Sequence[int], diverging: dict[str, Divergence]) -> Fitted:
    columns, rows = matrix_rows(report, ranks, diverging)
    # Every column may wrap between words: a rank column is as wide as "rank 12" where the width allows,
    # never narrower than its figures; a label too long for the width prints the rows as records.
    grouped = columns[1] == "Ranks with the same cell"
    return plaintext.table(
        MATRIX_TITLE, columns, rows, right=() if grouped else columns[1:], fold=columns
    )


def diverging_rows(found: list[Divergence]) -> list[tuple[str, ...]]:
    """One row per diverging frame, in ``DIVERGING_COLUMNS`` order: the frame, the odd ranks with their
    first divergent step, what differs, what the odd ranks did and what the others did."""
    rows: list[tuple[str, ...]] = []
    for d in found:
        odd = d.cells[d.ranks[0]]
        mine = (
            f"recompiles {odd.recompiles}, limit hits {odd.limit_hits}, reasons {_categories(odd)}"
        )
        if len({d.cells[r].behaviour for r in d.ranks}) > 1:
            mine = "vary: " + "; ".join(
                f"rank {r}: {d.cells[r].recompiles} recompiles" for r in d.ranks[:MAX_LISTED_RANKS]
            )
        theirs = (
            f"{rank_list(d.baseline_ranks)}: recompiles {d.baseline.recompiles}, "
            f"limit hits {d.baseline.limit_hits}, reasons {_categories(d.baseline)}"
        )
        rows.append(
            (d.frame.label, _ranks_with_steps(d.first_steps), ", ".join(d.aspects), mine, theirs)
        )
    return rows


def _diverging_table(found: list[Divergence]) -> Fitted:
    # Every column wraps between words: a long frame label never squeezes the others into letters.
    return plaintext.table(
        DIVERGING_TITLE, DIVERGING_COLUMNS, diverging_rows(found), fold=DIVERGING_COLUMNS
    )


def no_divergence(ranks: Sequence[int]) -> str:
    """What the report says when no frame diverges across ``ranks``."""
    return (
        f"No frame diverges across {rank_list(ranks)}: every rank recompiled the same frames "
        "the same number of times for the same kinds of reason."
    )


def diverging_headline(found: list[Divergence]) -> str:
    return f"{len(found)} frame(s) compile differently across ranks:"


def print_divergence(console: Console, report: Report) -> None:
    """Print the per-rank matrix and the diverging section on ``console`` (nothing for a one-rank report)."""
    ranks = all_ranks(report)
    if len(ranks) < 2:
        return
    stalled = running_at_end(
        report.sessions
    )  # the rank a collective waited on when the job ended, if it was compiling
    for line in stalled:
        console.print(f"At the end: {line}", soft_wrap=True)
    if not report.frames:
        return
    if stalled:
        console.line()
    found = find(report)
    console.print(_matrix(report, ranks, {d.frame.key: d for d in found}))
    if not found:
        console.line()
        console.print(no_divergence(ranks))
        return
    console.line()
    console.print(f"DIVERGING: {diverging_headline(found)}")
    for d in found:
        console.print(f"  {describe(d)}", soft_wrap=True)
    console.print(_diverging_table(found))


def render_divergence(report: Report, width: int = 160) -> str:
    """The divergence section as plain text (empty for a one-rank report)."""
    console, out = plaintext.console(width)
    print_divergence(console, report)
    return out.getvalue()
