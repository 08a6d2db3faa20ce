"""The CI gate: rules over a run's report, one violation (one line) per rank, frame and rule broken.

Every rule is evaluated per rank, on a report built from that rank's events; ``after_step`` first
drops what happened before that many training steps had completed (warm-up). Besides the rules, a
rank whose counts cannot be trusted whole gives a violation the CLI refuses the run on unless told
to accept it: a dark capture signal (``signal_dark``), a session without ``session_end``
(``incomplete``) and a log with a gap (``log_gap``).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

from recompprof._analysis.report import workers as parallel
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.frames import FrameReport
from recompprof._analysis.report.model import Report
from recompprof._analysis.report.sessions import SessionFold
from recompprof._analysis.text import completeness_warnings
from recompprof._errors import RecompprofError
from recompprof._model.events import CATEGORIES, Event
from recompprof._model.status import describe_at_end


class CheckInputError(RecompprofError, ValueError):
    """The rules cannot be applied to this run (e.g. ``after_step`` on a run without steps)."""


@dataclasses.dataclass(frozen=True)
class Rules:
    """What a run must satisfy; ``None`` leaves a rule off."""

    max_recompiles: int | None = None  # per frame and rank
    max_total_recompiles: int | None = None  # per rank, all frames
    after_step: int | None = None
    max_compile_seconds: float | None = None  # per rank
    max_recompile_seconds: float | None = (
        None  # per rank: compile seconds lost to recompiles (all causes)
    )
    forbid: tuple[str, ...] = ()  # reason categories that may not cause a recompile
    max_limit_hits: int | None = None  # per rank
    max_graph_breaks: int | None = None  # per rank
    max_failures: int | None = None  # per rank
    fail_on_running_compile: bool = False  # a rank whose run ended with a compile running

    def __post_init__(self) -> None:
        unknown = [c for c in self.forbid if c not in CATEGORIES]
        if unknown:
            raise CheckInputError(
                f"unknown category {', '.join(unknown)}; categories: {', '.join(CATEGORIES)}"
            )

    @property
    def empty(self) -> bool:
        return all(
            getattr(self, f.name) in (None, ()) or getattr(self, f.name) is False
            for f in dataclasses.fields(self)
            if f.name != "after_step"
        )


@dataclasses.dataclass(frozen=True)
class Violation:
    rule: str
    rank: int
    frame: str | None
    message: str

    def __str__(self) -> str:
        return self.message


@runtime_checkable
class RankedEvents(Protocol):
    """Events that can be read one rank at a time, without holding any (:class:`recompprof._analysis.report.runs.EventStream`)."""

    def ranks(self) -> list[int] | None:
        """The ranks the events belong to, or None where that is not known before reading them."""

    def of_rank(self, rank: int) -> Iterator[Event]:
        """The events of ``rank`` alone."""


def check(events: Iterable[Event], rules: Rules, *, workers: int | None = None) -> list[Violation]:
    """The violations of ``rules`` in ``events`` (empty when the run passes).

    ``events`` that can stream one rank at a time (:class:`RankedEvents`) are folded rank by rank without
    holding any, in up to ``workers`` processes (default: one per CPU for a large run, see
    :mod:`recompprof._analysis.report.workers`); anything else is grouped by rank in memory.
    The ranks are independent, so the violations, in rank order, are the same either way.
    """
    per_rank: dict[int, Iterable[Event]]
    if isinstance(events, RankedEvents) and (ranks := events.ranks()) is not None:
        if workers is None:
            workers = parallel.default_workers([events], len(ranks))
        if workers > 1 and len(ranks) > 1 and parallel.can_fork([events]):
            return _check_in_workers(events, ranks, rules, workers)
        per_rank = {rank: events.of_rank(rank) for rank in ranks}
    else:
        per_rank = _by_rank(events)
    return [
        violation
        for rank in sorted(per_rank)
        for violation in _check_rank(rank, _report(per_rank[rank], rules.after_step), rules)
    ]


def _by_rank(events: Iterable[Event]) -> dict[int, Iterable[Event]]:
    grouped: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        grouped[event.rank].append(event)
    return dict(grouped)


def _check_in_workers(
    stream: RankedEvents, ranks: list[int], rules: Rules, workers: int
) -> list[Violation]:
    """Each rank checked in a forked worker (see :mod:`recompprof._analysis.report.workers`), violations in rank order."""
    found = parallel.map_forked(
        lambda rank: _check_rank(rank, _report(stream.of_rank(rank), rules.after_step), rules),
        [stream],
        ranks,
        workers,
    )
    return [violation for violations in found for violation in violations]


def _report(events: Iterable[Event], step: int | None) -> Report:
    """One rank's report; events before ``step`` still count in its sessions (their ``session_end``
    totals include them), so leaving them out of the figures is no gap."""
    if not step:  # nothing to drop: no per-event filter to pay for
        return build_report(events)
    sessions = SessionFold()
    return build_report(_dropping_before(events, step, sessions), sessions=sessions)


_COUNTED = frozenset({"compile", "recompile_limit_hit", "graph_break"})  # kinds: views fold too


def _dropping_before(events: Iterable[Event], step: int, sessions: SessionFold) -> Iterator[Event]:
    for event in events:
        if event.kind in _COUNTED:
            if event.step is None:
                raise CheckInputError(
                    "--after-step needs training steps, and this run has events without one "
                    "(ingested from TORCH_TRACE, or recorded without step tracking)"
                )
            if event.step < step:
                sessions.tally(event)
                continue
        yield event


@dataclasses.dataclass(frozen=True)
class _Scope:
    """One rank's report under the rules, and the words every violation of it starts with."""

    rank: int
    report: Report
    rules: Rules
    frames: list[FrameReport]  # most recompiles first

    @property
    def where(self) -> str:
        return f"rank {self.rank}"

    @property
    def after(self) -> str:
        return f" after step {self.rules.after_step}" if self.rules.after_step else ""


def _check_rank(rank: int, report: Report, rules: Rules) -> list[Violation]:
    scope = _Scope(
        rank, report, rules, sorted(report.frames.values(), key=lambda f: (-f.recompiles, f.label))
    )
    return [violation for rule in _RULES for violation in rule(scope)]


def _untrusted_counts(scope: _Scope) -> Iterator[Violation]:
    """Counts the report cannot vouch for: the CLI exits 2 on these unless told to accept them."""
    for name, why in scope.report.run.signals_dark.items():
        yield Violation(
            "signal_dark", scope.rank, None, f"{scope.where}: signal {name} was dark ({why})"
        )
    for rule, line in completeness_warnings(scope.report):
        yield Violation(rule, scope.rank, None, line)


def _max_recompiles(scope: _Scope) -> Iterator[Violation]:
    limit = scope.rules.max_recompiles
    if limit is None:
        return
    for f in scope.frames:
        if f.recompiles > limit:
            yield Violation(
                "max_recompiles",
                scope.rank,
                f.label,
                f"{scope.where} {f.label}: {f.recompiles} recompile(s){scope.after} > max {limit}"
                f"{_steps(f)}{_why(f)}",
            )


def _max_total_recompiles(scope: _Scope) -> Iterator[Violation]:
    limit, report = scope.rules.max_total_recompiles, scope.report
    if limit is not None and report.recompiles > limit:
        yield Violation(
            "max_total_recompiles",
            scope.rank,
            None,
            f"{scope.where}: {report.recompiles} recompile(s){scope.after} across {len(report.frames)} "
            f"frame(s) > max {limit}",
        )


def _forbidden(scope: _Scope) -> Iterator[Violation]:
    for category in scope.rules.forbid:
        for f in scope.frames:
            # Only the reason that explains a recompile counts: failures against older cache entries are not causes.
            groups = [g for g in f.reasons.values() if g.category == category and g.changes]
            if groups:
                subjects = ", ".join(
                    sorted({g.subject for g in groups if g.subject not in ("", "-", category)})[:5]
                )
                yield Violation(
                    "forbid",
                    scope.rank,
                    f.label,
                    f"{scope.where} {f.label}: forbidden category {category}{scope.after}: "
                    f"{sum(g.changes for g in groups)} recompile(s)"
                    + (f" caused by {subjects}" if subjects else ""),
                )


def _max_compile_seconds(scope: _Scope) -> Iterator[Violation]:
    limit, report = scope.rules.max_compile_seconds, scope.report
    if limit is not None and report.compile_seconds > limit:
        top = max(report.frames.values(), key=lambda f: f.compile_seconds)
        yield Violation(
            "max_compile_seconds",
            scope.rank,
            None,
            f"{scope.where}: {report.compile_seconds:.2f} s compiling{scope.after} > max {limit:g} s "
            f"(most in {top.label}: {top.compile_seconds:.2f} s)",
        )


def _max_recompile_seconds(scope: _Scope) -> Iterator[Violation]:
    limit, report = scope.rules.max_recompile_seconds, scope.report
    if limit is not None and report.recompile_seconds > limit:
        costliest = report.ranked_causes()[:3]
        causes = "; ".join(
            f"{c.frame} {_cause(c.category, c.subject)}: {c.seconds:.2f} s x{c.recompiles}"
            for c in costliest
        )
        yield Violation(
            "max_recompile_seconds",
            scope.rank,
            costliest[0].frame,
            f"{scope.where}: {report.recompile_seconds:.2f} s lost to recompiles{scope.after} > max "
            f"{limit:g} s (fix first: {causes})",
        )


def _max_counts(scope: _Scope) -> Iterator[Violation]:
    """Recompile-limit hits, graph breaks and compile failures over their maximum."""
    report, rules = scope.report, scope.rules
    for rule, value, limit, what in (
        ("max_limit_hits", report.limit_hits, rules.max_limit_hits, "recompile-limit hit(s)"),
        ("max_graph_breaks", report.graph_breaks, rules.max_graph_breaks, "graph break(s)"),
        ("max_failures", report.failures, rules.max_failures, "compile failure(s)"),
    ):
        if limit is not None and value > limit:
            yield Violation(
                rule,
                scope.rank,
                None,
                f"{scope.where}: {value} {what}{scope.after} > max {limit}{_where(report, rule)}",
            )


RUNNING_COMPILE_NOTE = "compile_running_note"  # not a rule: a fact the CLI says without failing


def _running_compile(scope: _Scope) -> Iterator[Violation]:
    """A compile the rank's run ended with: a stall, or the job stopped in the middle of compiling. A violation
    under ``fail_on_running_compile``, else a note (the CLI says it in a warning line and passes)."""
    rule = "compile_running_at_end" if scope.rules.fail_on_running_compile else RUNNING_COMPILE_NOTE
    for rank, end in scope.report.sessions.compiling_at_end.items():
        yield Violation(
            rule,
            rank,
            end.running.frame.label,
            describe_at_end(rank, end.running, lower_bound=end.lower_bound),
        )


# Every rule, in the order its violations are listed.
_RULES: tuple[Callable[[_Scope], Iterator[Violation]], ...] = (
    _untrusted_counts,
    _running_compile,
    _max_recompiles,
    _max_total_recompiles,
    _forbidden,
    _max_compile_seconds,
    _max_recompile_seconds,
    _max_counts,
)


def _steps(frame: FrameReport) -> str:
    if not frame.recompile_steps or not any(frame.recompile_steps):
        return ""
    shown = ", ".join(str(s) for s in frame.recompile_steps[:8])
    return f" at step(s) {shown}" + (" ..." if frame.recompile_steps_total > 8 else "")


def _why(frame: FrameReport) -> str:
    top = [g for g in frame.top_reasons() if g.changes][:3]
    return (
        (" (" + "; ".join(f"{_cause(g.category, g.subject)} x{g.changes}" for g in top) + ")")
        if top
        else ""
    )


def _cause(category: str, subject: str) -> str:
    """``size L['x']``; a subject that only repeats its category (``grad_mode``) is said once."""
    return category if not subject or subject in ("-", category) else f"{category} {subject}"


def _where(report: Report, rule: str) -> str:
    counts = {
        "max_limit_hits": lambda f: sum(f.limit_hits.values()),
        "max_graph_breaks": lambda f: f.graph_breaks,
        "max_failures": lambda f: sum(f.failures.values()),
    }[rule]
    worst = sorted(
        ((counts(f), f.label) for f in report.frames.values() if counts(f)), reverse=True
    )[:3]
    return (" (" + ", ".join(f"{label}: {n}" for n, label in worst) + ")") if worst else ""
