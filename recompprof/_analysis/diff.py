"""Compare two runs: per frame and reason category, what got better or worse.

Frames are matched by identity (``events.Frame.key``: the compiled code's ``dir/file:line`` and the
instance's class, never the display name), so runs from different checkouts compare and a live run
matches its own ingested TORCH_TRACE; figures are summed over ranks. A frame whose class one run could
not know (an ingested compile that failed has no guards to read it from) matches the one frame of the
other run at the same code. A *regression* is any count that grew: recompiles of a frame,
recompiles explained by a category, recompile-limit hits, compile failures, graph breaks; except that
recompiles moved between ``other`` (unknown) and a frame's known categories, no more than the other side
lost, are the same recompiles classified with less or more knowledge (an ingested trace has no live
objects to resolve): "changed", neither worse nor better.
Compile time is noisy, so it (a frame's compile seconds, and the seconds lost to each cause) only counts
as a regression past ``max_time_increase`` (a fraction) when given.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from rich.table import Table

from recompprof._analysis.render import plaintext
from recompprof._analysis.report.figures import CauseReport
from recompprof._analysis.report.frames import FrameReport
from recompprof._analysis.report.merging import build_run_reports
from recompprof._analysis.report.model import Report
from recompprof._model.events import Event

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
    # recompiles moved between ``other`` (unknown) and a known category: classified with more or less
    # knowledge, neither better nor worse ("changed")
    reclassified: bool = False

    @property
    def verdict(self) -> str:
        """``worse``, ``better`` or ``changed`` (a figure that grew without being a regression, or moved
        between ``other`` and a known category)."""
        if self.regression:
            return "worse"
        return "better" if self.delta < 0 and not self.reclassified else "changed"

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
        a, b = sorted(self.before.run.modes), sorted(self.after.run.modes)
        if not a or not b or a == b:  # ingested TORCH_TRACE runs record no mode
            return None
        return (
            f"WARNING: comparing a {'/'.join(a)} run with a {'/'.join(b)} run. Profile mode compiles every frame "
            "with recompprof's observer backend at recompile_limit (default 1), evicting older variants, so "
            "it counts a recompile for every input change (also changes a monitored job's cache would have "
            "hit) and its compile seconds leave out AOTAutograd and Inductor. Differences below may come "
            "from the mode, not the code: compare runs of the same mode."
        )

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == "better"]


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


def compare(
    before: Iterable[Event],
    after: Iterable[Event],
    *,
    max_time_increase: float | None = None,
    workers: int | None = None,
) -> Diff:
    """What changed from run ``before`` to run ``after``.

    Large event-log runs are folded file by file in forked worker processes (``workers``, default one
    per CPU; see :mod:`recompprof._analysis.report.merging`), with only the figures a diff compares; the result is the
    same either way.
    """
    a, b = build_run_reports([before, after], detail=False, workers=workers)
    ca, cb = _causes_by_frame(a), _causes_by_frame(b)
    keys_a, keys_b = set(a.frames) | set(ca), set(b.frames) | set(cb)
    fig_a = _figures_by_frame(a, ca, keys_a, _unknown_owners(keys_a, keys_b))
    fig_b = _figures_by_frame(b, cb, keys_b, _unknown_owners(keys_b, keys_a))
    changes: list[Change] = []
    for key in sorted(fig_a.keys() | fig_b.keys()):
        label = _label(key, (b, cb), (a, ca))
        changes += _frame_changes(label, fig_a.get(key, {}), fig_b.get(key, {}), max_time_increase)
    return Diff(changes, a, b)


def _figures_by_frame(
    report: Report, causes: dict[str, list[CauseReport]], keys: set[str], rename: dict[str, str]
) -> dict[str, dict[str, float]]:
    """Each frame's figures, under the key it is compared by (``rename``: a frame whose class was unknown)."""
    figures: dict[str, dict[str, float]] = {}
    for key in keys:
        mine = _figures(report.frames.get(key), causes.get(key, []))
        into = figures.setdefault(rename.get(key, key), {})
        for what, value in mine.items():
            into[what] = into.get(what, 0) + value
    return figures


@dataclasses.dataclass(frozen=True)
class _Reclassified:
    """How far one frame's recompiles moved between ``other`` (unknown) and its known categories: the same
    recompiles classified with less (or more) knowledge, as a run ingested from a trace cannot resolve what
    only the live objects tell."""

    known: list[str]  # the figures of known categories
    known_fell: float
    known_rose: float
    other_fell: float
    other_rose: float

    def moved(self, what: str) -> bool:
        """Whether ``what`` is a category whose change is (in part) recompiles moved into or out of
        ``other``: ``other`` and the known categories went opposite ways (a cause's seconds lost move with
        its category)."""
        if what.startswith(SECONDS_LOST):
            what = "category " + what.removeprefix(SECONDS_LOST).split()[0]
        if what != OTHER_CATEGORY and what not in self.known:
            return False
        return bool((self.other_rose and self.known_fell) or (self.other_fell and self.known_rose))

    @classmethod
    def of(cls, fa: dict[str, float], fb: dict[str, float]) -> _Reclassified:
        known = [w for w in {*fa, *fb} if w.startswith("category ") and w != OTHER_CATEGORY]
        return cls(
            known,
            sum(max(0.0, fa.get(w, 0) - fb.get(w, 0)) for w in known),
            sum(max(0.0, fb.get(w, 0) - fa.get(w, 0)) for w in known),
            max(0.0, fa.get(OTHER_CATEGORY, 0) - fb.get(OTHER_CATEGORY, 0)),
            max(0.0, fb.get(OTHER_CATEGORY, 0) - fa.get(OTHER_CATEGORY, 0)),
        )


def _worse(
    what: str, x: float, y: float, moved: _Reclassified, max_time_increase: float | None
) -> bool:
    """Whether figure ``what`` going from ``x`` to ``y`` is a regression."""
    if what == "compile seconds" or what.startswith(SECONDS_LOST):
        return (
            max_time_increase is not None
            and y - x > TIME_FLOOR_SECONDS
            and y > x * (1 + max_time_increase)
        )
    if what == OTHER_CATEGORY:  # unknown: worse only past what the known categories lost
        return y - x > moved.known_fell
    if what in moved.known:  # known categories: worse only past what `other` lost
        return y > x and moved.known_rose > moved.other_fell
    # More first compiles is not a regression by itself (a new frame, a new code path).
    return y > x and what != "compiles"


def _frame_changes(
    label: str, fa: dict[str, float], fb: dict[str, float], max_time_increase: float | None
) -> list[Change]:
    moved = _Reclassified.of(fa, fb)
    return [
        Change(
            label,
            what,
            fa.get(what, 0),
            fb.get(what, 0),
            _worse(what, fa.get(what, 0), fb.get(what, 0), moved, max_time_increase),
            moved.moved(what),
        )
        for what in dict.fromkeys([*fa, *fb])
        if fa.get(what, 0) != fb.get(what, 0)
    ]


OTHER_CATEGORY = "category other"


def _unknown_owners(keys: set[str], other: set[str]) -> dict[str, str]:
    """Keys of ``keys`` with no class (``dir/file:line``) that stand for the one frame of ``other`` at that code
    (``dir/file:line Class``): one run could not tell the class, which is no different frame."""
    by_code: dict[str, list[str]] = {}
    for key in other:
        match = _KEY.match(key)
        if match is not None and match.group(2):
            by_code.setdefault(match.group(1), []).append(key)
    return {
        key: by_code[key][0]
        for key in keys
        if key not in other
        and (m := _KEY.match(key)) is not None
        and not m.group(2)
        and len(by_code.get(key, ())) == 1
    }


_KEY = re.compile(
    r"^(.*:\d+)(?: ([\w.]+))?$"
)  # events.Frame.key: "dir/file:line" and the owner's class, if known


def render(diff: Diff, width: int = 120) -> str:
    """The diff as a plain-text table plus a one-line verdict."""
    console, out = plaintext.console(width)
    a, b = diff.before, diff.after
    console.print(
        f"recompprof diff: recompiles {a.recompiles} -> {b.recompiles}, limit hits {a.limit_hits} -> {b.limit_hits}, "
        f"graph breaks {a.graph_breaks} -> {b.graph_breaks}, failures {a.failures} -> {b.failures}, "
        f"compile time {a.compile_seconds:.2f} s -> {b.compile_seconds:.2f} s, "
        f"lost to recompiles {a.recompile_seconds:.2f} s -> {b.recompile_seconds:.2f} s"
    )
    if diff.mode_warning:
        console.print(diff.mode_warning)
    if diff.changes:
        table = Table(title_justify="left")
        for col in ("Frame", "Figure", "Before", "After", "Change", "Verdict"):
            table.add_column(
                col, justify="right" if col in ("Before", "After", "Change") else "left"
            )
        order = sorted(
            diff.changes, key=lambda c: (not c.regression, c.delta >= 0, c.frame, c.what)
        )
        for c in order:
            table.add_row(
                c.frame,
                c.what,
                _fmt(c.before),
                _fmt(c.after),
                ("+" if c.delta > 0 else "") + _fmt(c.delta),
                c.verdict,
            )
        console.print(table)
    regressions = diff.regressions
    if regressions:
        console.print(f"{len(regressions)} regression(s)")
    else:
        console.print(f"no regressions ({len(diff.improvements)} improvement(s))")
    return out.getvalue()


def _fmt(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.3f}"
