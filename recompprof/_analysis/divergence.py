"""Rank divergence: frames that compile differently on some ranks of a job than on the others.

A rank that recompiles (or hits the recompile limit and falls back to eager) while its peers have
already entered the next collective is the classic cause of NCCL timeouts and hangs; after the fact
it shows as a frame whose per-rank behaviour differs. This module reads the per-rank fields of a
:class:`~recompprof._analysis.report.Report` (so it costs one pass over the events, however many ranks),
finds the frames whose recompile count, limit hits or set of reason categories differ across ranks,
names the odd ranks out and the step at which each first went its own way, and renders that as a
per-rank matrix and a "diverging" table.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from recompprof._analysis import plaintext

if TYPE_CHECKING:  # types only: reporting imports this module, never the other way at run time
    from recompprof._analysis.report import FrameReport, Report

# Up to this many ranks the matrix has one column per rank; beyond, ranks with equal cells are grouped.
MAX_RANK_COLUMNS = 8
MAX_MATRIX_FRAMES = 20
MAX_LISTED_RANKS = 16

ASPECTS = ("recompiles", "limit hits", "reason categories")


@dataclasses.dataclass(frozen=True)
class RankCell:
    """What one frame did on one rank."""

    compiles: int = 0
    recompiles: int = 0
    limit_hits: int = 0
    categories: frozenset[str] = frozenset()

    @property
    def behaviour(self) -> tuple[int, int, frozenset[str]]:
        """The part of a cell that must agree across ranks (compiles may differ benignly, e.g. an eval-only rank)."""
        return self.recompiles, self.limit_hits, self.categories

    def text(self) -> str:
        cell = f"{self.compiles}/{self.recompiles}"
        if self.limit_hits:
            cell += f" L{self.limit_hits}"
        return cell


@dataclasses.dataclass
class Divergence:
    """One frame whose behaviour differs across ranks."""

    frame: FrameReport
    ranks: list[int]  # the odd ranks out
    baseline_ranks: list[int]  # the ranks that behaved like the majority
    baseline: RankCell
    aspects: list[str]  # subset of ASPECTS that differ
    first_steps: dict[int, int | None]  # odd rank -> first step of its divergent recompile or limit hit
    cells: dict[int, RankCell]

    def describe(self) -> str:
        """One line: frame, ranks, steps and what differs."""
        return (f"{self.frame.label}: {_ranks_with_steps(self.first_steps)} ({', '.join(self.aspects)} differ from "
                f"{_rank_list(self.baseline_ranks)})")


def all_ranks(report: Report) -> list[int]:
    """Ranks that started a session or recorded a compile in ``report``."""
    ranks = set(report.ranks)
    for frame in report.frames.values():
        ranks.update(frame.compiles_by_rank)
        ranks.update(frame.limit_hits_by_rank)
    return sorted(ranks)


def cell(frame: FrameReport, rank: int) -> RankCell:
    """The cell of ``frame`` on ``rank`` (zeros when the rank never compiled it)."""
    return RankCell(
        compiles=frame.compiles_by_rank.get(rank, 0),
        recompiles=frame.recompiles_by_rank.get(rank, 0),
        limit_hits=frame.limit_hits_by_rank.get(rank, 0),
        categories=frozenset(frame.categories_by_rank.get(rank, ())),
    )


def find(report: Report) -> list[Divergence]:
    """Diverging frames of ``report`` (fold events with ``reporting.build_report`` first), most recompiles first."""
    ranks = all_ranks(report)
    if len(ranks) < 2:
        return []
    found = [d for f in report.frames.values() if (d := _diverges(f, ranks)) is not None]
    return sorted(found, key=lambda d: (-sum(c.recompiles + c.limit_hits for c in d.cells.values()), d.frame.label))


def _diverges(frame: FrameReport, ranks: Sequence[int]) -> Divergence | None:
    cells = {r: cell(frame, r) for r in ranks}
    behaviours = Counter(c.behaviour for c in cells.values())
    if len(behaviours) < 2:
        return None
    # The majority is the baseline; on a tie the quietest behaviour is, so the ranks that recompiled are named.
    baseline_behaviour = min(behaviours, key=lambda b: (-behaviours[b], b[0] + b[1], len(b[2]), sorted(b[2])))
    baseline_ranks = [r for r in ranks if cells[r].behaviour == baseline_behaviour]
    baseline = cells[baseline_ranks[0]]
    odd = [r for r in ranks if cells[r].behaviour != baseline_behaviour]
    aspects = [name for name, index in zip(ASPECTS, range(3))
               if any(cells[r].behaviour[index] != baseline_behaviour[index] for r in odd)]
    return Divergence(frame, odd, baseline_ranks, baseline, aspects,
                      {r: _first_divergent_step(frame, r, baseline_ranks[0]) for r in odd}, cells)


def _first_divergent_step(frame: FrameReport, rank: int, baseline_rank: int) -> int | None:
    """The earliest step at which ``rank`` did something the baseline rank did not do."""
    candidates: list[int] = []
    mine, theirs = Counter(frame.recompile_steps_by_rank.get(rank, [])), Counter(frame.recompile_steps_by_rank.get(baseline_rank, []))
    extra = mine - theirs
    if extra:
        candidates.append(min(extra))
    if frame.limit_hits_by_rank.get(rank, 0) > frame.limit_hits_by_rank.get(baseline_rank, 0):
        step = frame.first_limit_hit_step_by_rank.get(rank)
        if step is not None:
            candidates.append(step)
    theirs_categories = frame.categories_by_rank.get(baseline_rank, Counter())
    for category, step in frame.category_first_step_by_rank.get(rank, {}).items():
        if category not in theirs_categories:
            candidates.append(step)
    if not candidates and mine != theirs:
        # Fewer recompiles than the baseline: the step where the baseline recompiled and this rank did not.
        missing = theirs - mine
        if missing:
            candidates.append(min(missing))
    return min(candidates) if candidates else None


# -- rendering ---------------------------------------------------------------------------------------

def _rank_list(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``ranks 0-2, 5`` (ranges, capped)."""
    runs: list[tuple[int, int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    shown = ", ".join(parts[:MAX_LISTED_RANKS]) + (f" (+{len(parts) - MAX_LISTED_RANKS} more)" if len(parts) > MAX_LISTED_RANKS else "")
    return ("rank " if len(ranks) == 1 else "ranks ") + shown


def _ranks_with_steps(first_steps: dict[int, int | None]) -> str:
    """``{1: 3, 5: 3, 7: None}`` -> ``ranks 1, 5 at step 3; rank 7``."""
    by_step: dict[int | None, list[int]] = {}
    for rank, step in first_steps.items():
        by_step.setdefault(step, []).append(rank)
    parts = [f"{_rank_list(ranks)} at step {step}" if step is not None else _rank_list(ranks)
             for step, ranks in sorted(by_step.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]
    return "; ".join(parts)


def _categories(c: RankCell) -> str:
    return ", ".join(sorted(c.categories)) or "-"


def _matrix(report: Report, ranks: Sequence[int], diverging: dict[str, Divergence]) -> Table:
    frames = sorted(report.frames.values(),
                    key=lambda f: (f.key not in diverging, -f.recompiles, -f.compiles, f.label))[:MAX_MATRIX_FRAMES]
    table = Table(title="Compiles per frame and rank (compiles/recompiles, Ln = recompile-limit hits; * = diverging)",
                  title_justify="left")
    table.add_column("Frame", no_wrap=True, overflow="fold")
    if len(ranks) <= MAX_RANK_COLUMNS:
        for r in ranks:
            table.add_column(f"rank {r}", justify="right")
        for f in frames:
            table.add_row(("* " if f.key in diverging else "") + f.label, *(cell(f, r).text() for r in ranks))
    else:
        table.add_column("Ranks with the same cell", overflow="fold")
        for f in frames:
            groups: dict[str, list[int]] = {}
            for r in ranks:
                groups.setdefault(cell(f, r).text(), []).append(r)
            text = "; ".join(f"{_rank_list(rs)}: {value}" for value, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])))
            table.add_row(("* " if f.key in diverging else "") + f.label, text)
    return table


def _diverging_table(found: list[Divergence]) -> Table:
    table = Table(title="Diverging across ranks (a rank that recompiles while its peers wait in a collective can "
                        "stall or time out the job)", title_justify="left")
    for col in ("Frame", "Diverging ranks (first divergent step)", "Differs in", "These ranks", "Other ranks"):
        table.add_column(col, no_wrap=col == "Frame", overflow="fold")
    for d in found:
        odd = d.cells[d.ranks[0]]
        mine = f"recompiles {odd.recompiles}, limit hits {odd.limit_hits}, reasons {_categories(odd)}"
        if len({d.cells[r].behaviour for r in d.ranks}) > 1:
            mine = "vary: " + "; ".join(f"rank {r}: {d.cells[r].recompiles} recompiles" for r in d.ranks[:MAX_LISTED_RANKS])
        theirs = (f"{_rank_list(d.baseline_ranks)}: recompiles {d.baseline.recompiles}, "
                  f"limit hits {d.baseline.limit_hits}, reasons {_categories(d.baseline)}")
        table.add_row(d.frame.label, _ranks_with_steps(d.first_steps), ", ".join(d.aspects), mine, theirs)
    return table


def print_divergence(console: Console, report: Report) -> None:
    """Print the per-rank matrix and the diverging section on ``console`` (nothing for a one-rank report)."""
    ranks = all_ranks(report)
    if len(ranks) < 2 or not report.frames:
        return
    found = find(report)
    console.print(_matrix(report, ranks, {d.frame.key: d for d in found}))
    if not found:
        console.line()
        console.print(f"No frame diverges across {_rank_list(ranks)}: every rank recompiled the same frames "
                      "the same number of times for the same kinds of reason.")
        return
    console.line()
    console.print(f"DIVERGING: {len(found)} frame(s) compile differently across ranks:")
    for d in found:
        console.print(f"  {d.describe()}", soft_wrap=True)
    console.print(_diverging_table(found))


def render_divergence(report: Report, width: int = 160) -> str:
    """The divergence section as plain text (empty for a one-rank report)."""
    console, out = plaintext.console(width)
    print_divergence(console, report)
    return out.getvalue()
