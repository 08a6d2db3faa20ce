"""Compare two runs: per frame and reason category, what got better or worse.

Frames are matched by identity (``events.Frame.key``: the compiled code's ``dir/file:line`` and the
instance's class, never the display name), so runs from different checkouts compare and a live run
matches its own ingested TORCH_TRACE; figures are summed over ranks. A *regression* is any count that grew: recompiles of a frame,
recompiles explained by a category, recompile-limit hits, compile failures, graph breaks. Compile
time is noisy, so it (a frame's compile seconds, and the seconds lost to each cause) only counts as a
regression past ``max_time_increase`` (a fraction) when given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rich.table import Table

from recompprof import plaintext
from recompprof.events import Event
from recompprof.merging import build_run_reports
from recompprof.reporting import CauseReport, FrameReport, Report

# Compile-time growth below this many seconds is never a regression (timer noise on tiny compiles).
TIME_FLOOR_SECONDS = 0.5
SECONDS_LOST = "seconds lost to"


@dataclasses.dataclass(frozen=True)
class Change:
    frame: str
    what: str  # "recompiles", "category size", "limit hits", ...
    before: float
    after: float
    regression: bool

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclasses.dataclass
class Diff:
    changes: list[Change]
    before: Report
    after: Report

    @property
    def mode_warning(self) -> str | None:
        """Why the two runs' figures are not comparable, when their modes differ (None when they match)."""
        a, b = sorted(self.before.modes), sorted(self.after.modes)
        if not a or not b or a == b:  # ingested TORCH_TRACE runs record no mode
            return None
        return (f"WARNING: comparing a {'/'.join(a)} run with a {'/'.join(b)} run. Profile mode compiles every frame "
                "with recompprof's observer backend at recompile_limit (default 1), evicting older variants, so "
                "it counts a recompile for every input change (also changes a monitored job's cache would have "
                "hit) and its compile seconds leave out AOTAutograd and Inductor. Differences below may come "
                "from the mode, not the code: compare runs of the same mode.")

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if not c.regression and c.delta < 0]


def _figures(frame: FrameReport | None, causes: list[CauseReport]) -> dict[str, float]:
    if frame is None and not causes:
        return {}
    figures = _frame_figures(frame) if frame is not None else {}
    for cause in causes:  # seconds lost per cause, compared like compile seconds (timer noise)
        key = f"{SECONDS_LOST} {cause.category} {cause.subject or '-'}"
        figures[key] = round(figures.get(key, 0.0) + cause.seconds, 3)
    return figures


def _causes_by_frame(report: Report) -> dict[str, list[CauseReport]]:
    out: dict[str, list[CauseReport]] = {}
    for cause in report.causes.values():
        out.setdefault(cause.frame_key, []).append(cause)
    return out


def _label(key: str, *reports: tuple[Report, dict[str, list[CauseReport]]]) -> str:
    """The label shown for frame ``key``: the later run's, where it has the frame."""
    for report, causes in reports:
        if key in report.frames:
            return report.frames[key].label
        if key in causes:
            return causes[key][0].frame
    return key


def _frame_figures(frame: FrameReport) -> dict[str, float]:
    figures: dict[str, float] = {
        "compiles": frame.compiles,
        "recompiles": frame.recompiles,
        "limit hits": sum(frame.limit_hits.values()),
        "failures": sum(frame.failures.values()),
        "graph breaks": frame.graph_breaks,
        "compile seconds": round(frame.compile_seconds, 3),
    }
    for group in frame.reasons.values():
        key = f"category {group.category}"
        figures[key] = figures.get(key, 0) + group.changes
    return figures


def compare(before: Iterable[Event], after: Iterable[Event], *, max_time_increase: float | None = None,
            workers: int | None = None) -> Diff:
    """What changed from run ``before`` to run ``after``.

    Large event-log runs are folded file by file in forked worker processes (``workers``, default one
    per CPU; see :mod:`recompprof.merging`), with only the figures a diff compares; the result is the
    same either way.
    """
    a, b = build_run_reports([before, after], detail=False, workers=workers)
    ca, cb = _causes_by_frame(a), _causes_by_frame(b)
    changes: list[Change] = []
    for key in sorted(set(a.frames) | set(b.frames) | set(ca) | set(cb)):
        label = _label(key, (b, cb), (a, ca))
        fa, fb = _figures(a.frames.get(key), ca.get(key, [])), _figures(b.frames.get(key), cb.get(key, []))
        for what in dict.fromkeys([*fa, *fb]):
            x, y = fa.get(what, 0), fb.get(what, 0)
            if x == y:
                continue
            if what == "compile seconds" or what.startswith(SECONDS_LOST):
                worse = (max_time_increase is not None and y - x > TIME_FLOOR_SECONDS
                         and y > x * (1 + max_time_increase))
            else:
                # More first compiles is not a regression by itself (a new frame, a new code path).
                worse = y > x and what != "compiles"
            changes.append(Change(label, what, x, y, worse))
    return Diff(changes, a, b)


def render(diff: Diff, width: int = 120) -> str:
    """The diff as a plain-text table plus a one-line verdict."""
    console, out = plaintext.console(width)
    a, b = diff.before, diff.after
    console.print(f"recompprof diff: recompiles {a.recompiles} -> {b.recompiles}, limit hits {a.limit_hits} -> {b.limit_hits}, "
                  f"graph breaks {a.graph_breaks} -> {b.graph_breaks}, failures {a.failures} -> {b.failures}, "
                  f"compile time {a.compile_seconds:.2f} s -> {b.compile_seconds:.2f} s, "
                  f"lost to recompiles {a.recompile_seconds:.2f} s -> {b.recompile_seconds:.2f} s")
    if diff.mode_warning:
        console.print(diff.mode_warning)
    if diff.changes:
        table = Table(title_justify="left")
        for col in ("Frame", "Figure", "Before", "After", "Change", "Verdict"):
            table.add_column(col, justify="right" if col in ("Before", "After", "Change") else "left")
        order = sorted(diff.changes, key=lambda c: (not c.regression, c.delta >= 0, c.frame, c.what))
        for c in order:
            verdict = "worse" if c.regression else ("better" if c.delta < 0 else "changed")
            table.add_row(c.frame, c.what, _fmt(c.before), _fmt(c.after), ("+" if c.delta > 0 else "") + _fmt(c.delta), verdict)
        console.print(table)
    regressions = diff.regressions
    if regressions:
        console.print(f"{len(regressions)} regression(s)")
    else:
        console.print(f"no regressions ({len(diff.improvements)} improvement(s))")
    return out.getvalue()


def _fmt(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.3f}"
