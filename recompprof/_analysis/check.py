"""The CI gate: rules over a run's report, one violation (one line) per rank, frame and rule broken.

Every rule is evaluated per rank, on a report built from that rank's events; ``after_step`` first
drops what happened before that many training steps had completed (warm-up). Besides the rules'
violations, :func:`check` returns the counts a rank cannot vouch for, which the CLI refuses the run on
unless told to accept them (:data:`UNTRUSTED`: a dark capture signal, a session without
``session_end``, a log with a gap), and notes that are no rule's verdict (a compile the run ended
with, when no rule asks about it). :data:`OPTIONS` is the one table of the options: the ``Rules``
fields, the CLI's flags and help, and the rule each evaluates.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from recompprof._analysis.render.wording import cause_label, completeness_warnings, first_of
from recompprof._analysis.report import workers as parallel
from recompprof._errors import RecompprofError
from recompprof._model.events import Event
from recompprof._model.status import describe_at_end, describe_unseen_backward
from recompprof._model.vocabulary import CATEGORIES

if TYPE_CHECKING:
    from recompprof._analysis.report.frames import FrameReport
    from recompprof._analysis.report.model import Report
    from recompprof._analysis.report.sessions import SessionFold

# The CLI builds its parser from OPTIONS on every command: the report model (fold, completeness) is
# imported only when a run is checked.


class CheckInputError(RecompprofError, ValueError):
    """The rules cannot be applied to this run (e.g. ``after_step`` on a run without steps)."""


@dataclasses.dataclass(frozen=True)
class Rules:
    """What a run must satisfy; ``None`` leaves a rule off."""

    max_recompiles: int | None = None  # per frame and rank
    max_total_recompiles: int | None = None  # per rank, all frames
    after_step: int | None = None
    max_compile_seconds: float | None = None  # per rank
    # per rank: compile seconds lost to recompiles (all causes)
    max_recompile_seconds: float | None = None
    # per rank: recompiles in steady state (recompprof._model.steady: with steps or without)
    max_steady_state_recompiles: int | None = None
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
        """No rule is set (``after_step`` alone is none)."""
        return all(
            getattr(self, option.name) in (None, ()) or getattr(self, option.name) is False
            for option in OPTIONS
            if option.find is not None
        )


@dataclasses.dataclass(frozen=True)
class Violation:
    """One finding, one line: a broken rule's (``rule``: its name), an untrusted count's (``rule``: its
    :data:`UNTRUSTED` name) or a note's (``rule``: :data:`RUNNING_COMPILE_NOTE`,
    :data:`UNSEEN_BACKWARD_NOTE`)."""

    rule: str
    rank: int
    frame: str | None
    message: str

    def __str__(self) -> str:
        return self.message


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What :func:`check` found, by kind, each in rank order."""

    violations: list[Violation] = dataclasses.field(default_factory=list)  # rules broken
    # Counts a rank cannot vouch for (rule: an UNTRUSTED name): the CLI refuses the run unless accepted.
    untrusted: list[Violation] = dataclasses.field(default_factory=list)
    # A compile a rank's run ended with, when no rule asks about it: said, never failed on.
    notes: list[Violation] = dataclasses.field(default_factory=list)

    def findings(self) -> list[Violation]:
        """All of them, rank by rank: the untrusted counts, the notes, then the broken rules."""
        return sorted([*self.untrusted, *self.notes, *self.violations], key=lambda v: v.rank)

    @classmethod
    def joined(cls, parts: Iterable[CheckResult]) -> CheckResult:
        """The results of several ranks as one, in the order given."""
        whole = cls()
        for part in parts:
            whole.violations.extend(part.violations)
            whole.untrusted.extend(part.untrusted)
            whole.notes.extend(part.notes)
        return whole


@runtime_checkable
class RankedEvents(Protocol):
    """Events that can be read one rank at a time, without holding any (:class:`recompprof._analysis.runs.EventStream`)."""

    def ranks(self) -> list[int] | None:
        """The ranks the events belong to, or None where that is not known before reading them."""

    def of_rank(self, rank: int) -> Iterator[Event]:
        """The events of ``rank`` alone."""


def check(events: Iterable[Event], rules: Rules, *, workers: int | None = None) -> CheckResult:
    """The violations of ``rules`` in ``events`` (none when the run passes), the counts it cannot vouch
    for, and its notes.

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
    return CheckResult.joined(
        _check_rank(rank, _report(per_rank[rank], rules.after_step), rules)
        for rank in sorted(per_rank)
    )


def _by_rank(events: Iterable[Event]) -> dict[int, Iterable[Event]]:
    grouped: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        grouped[event.rank].append(event)
    return dict(grouped)


def _check_in_workers(
    stream: RankedEvents, ranks: list[int], rules: Rules, workers: int
) -> CheckResult:
    """Each rank checked in a forked worker (see :mod:`recompprof._analysis.report.workers`), in rank order."""
    return CheckResult.joined(
        parallel.map_forked(
            lambda rank: _check_rank(rank, _report(stream.of_rank(rank), rules.after_step), rules),
            [stream],
            ranks,
            workers,
        )
    )


def _report(events: Iterable[Event], step: int | None) -> Report:
    """One rank's report; events before ``step`` still count in its sessions (their ``session_end``
    totals include them), so leaving them out of the figures is no gap."""
    from recompprof._analysis.report.fold import build_report
    from recompprof._analysis.report.sessions import SessionFold

    if not step:  # nothing to drop: no per-event filter to pay for
        return build_report(events)
    sessions = SessionFold()
    return build_report(_dropping_before(events, step, sessions), sessions=sessions)


_COUNTED = frozenset({"compile", "recompile_limit_hit", "graph_break"})  # kinds: views fold too


def _dropping_before(events: Iterable[Event], step: int, sessions: SessionFold) -> Iterator[Event]:
    last, dropped = 0, False
    for event in events:
        last = max(last, getattr(event, "step", None) or 0)
        if event.kind in _COUNTED:
            if event.step is None:
                raise CheckInputError(
                    "--after-step needs training steps, and this run has events without one "
                    "(ingested from TORCH_TRACE, or recorded without step tracking)"
                )
            if event.step < step:
                sessions.tally(event)
                dropped = True
                continue
        yield event
    if (
        dropped and last < step
    ):  # else every rule passes on nothing: a job without steps never reaches S
        raise CheckInputError(
            f"--after-step {step}: rank {event.rank} never reached step {step} (last step {last}), so every "
            "event would be dropped and the check would pass on nothing; a job without steps (serving, "
            "generation) is checked by --max-steady-state-recompiles, whose verdict needs no steps"
        )


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


def _check_rank(rank: int, report: Report, rules: Rules) -> CheckResult:
    scope = _Scope(
        rank, report, rules, sorted(report.frames.values(), key=lambda f: (-f.recompiles, f.label))
    )
    return CheckResult(
        violations=[violation for rule in _RULES for violation in rule(scope)],
        untrusted=list(_untrusted_counts(scope)),
        notes=[
            *([] if rules.fail_on_running_compile else _ended_compiling(scope, False)),
            *_unseen_backward(scope),
            *_steady_unknown(scope),
        ],
    )


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
            f"{cause_label(c.category, c.subject, c.frame, terse=True)}: {c.seconds:.2f} s x{c.recompiles}"
            for c in costliest
        )
        yield Violation(
            "max_recompile_seconds",
            scope.rank,
            costliest[0].frame,
            f"{scope.where}: {report.recompile_seconds:.2f} s lost to recompiles{scope.after} > max "
            f"{limit:g} s (fix first: {causes})",
        )


def _max_steady_state_recompiles(scope: _Scope) -> Iterator[Violation]:
    """Recompiles whose cause keeps costing compile time (the verdict of docs/steady-state.md, the same
    with steps or without: a serving job is caught as a training job is), named by cause."""
    limit, report = scope.rules.max_steady_state_recompiles, scope.report
    if limit is None:
        return
    total = sum(f.steady_state_recompiles for f in report.frames.values())
    if total > limit:
        steady = [c for c in report.ranked_causes() if c.steady_state][:3]
        causes = "; ".join(
            f"{cause_label(c.category, c.subject, c.frame, terse=True)} x{c.steady_state}"
            for c in steady
        )
        yield Violation(
            "max_steady_state_recompiles",
            scope.rank,
            steady[0].frame if steady else None,
            f"{scope.where}: {total} steady-state recompile(s){scope.after} > max {limit}"
            + (f" ({causes})" if causes else ""),
        )


def _at_most(
    rule: str,
    what: str,
    limit: Callable[[Rules], int | None],
    total: Callable[[Report], int],
    per_frame: Callable[[FrameReport], int],
) -> Callable[[_Scope], Iterator[Violation]]:
    """The rule that a rank's ``total`` (recompile-limit hits, graph breaks, compile failures) is at most
    its ``limit``; its violation names the frames with the most (``per_frame``)."""

    def find(scope: _Scope) -> Iterator[Violation]:
        bound, value = limit(scope.rules), total(scope.report)
        if bound is not None and value > bound:
            worst = sorted(
                ((n, f.label) for f in scope.report.frames.values() if (n := per_frame(f))),
                reverse=True,
            )[:3]
            where = (" (" + ", ".join(f"{label}: {n}" for n, label in worst) + ")") if worst else ""
            yield Violation(
                rule,
                scope.rank,
                None,
                f"{scope.where}: {value} {what}{scope.after} > max {bound}{where}",
            )

    return find


RUNNING_COMPILE_NOTE = "compile_running_note"  # not a rule: a fact the CLI says without failing
# not a rule either: what is not known (a backward compile torch marks no start of), said without failing
UNSEEN_BACKWARD_NOTE = "backward_unseen_note"
# nor this: recompiles whose steady-state verdict is unknown, said where that rule is asked
STEADY_UNKNOWN_NOTE = "steady_state_unknown_note"


def _ended_compiling(scope: _Scope, broken: bool) -> Iterator[Violation]:
    """A compile the rank's run ended with: a stall, or the job stopped in the middle of compiling. A violation
    (``broken``: under ``fail_on_running_compile``), else a note (the CLI says it in a warning line and passes)."""
    rule = "compile_running_at_end" if broken else RUNNING_COMPILE_NOTE
    for rank, end in scope.report.sessions.compiling_at_end.items():
        yield Violation(
            rule,
            rank,
            end.running.frame.label,
            describe_at_end(rank, end.running, lower_bound=end.lower_bound),
        )


def _unseen_backward(scope: _Scope) -> Iterator[Violation]:
    """A rank killed with no compile known running, on a torch that marks no backward compile's start: a
    backward compile may have been running. Not known, so a note, never a violation (the rank is refused as
    incomplete unless ``--accept-incomplete-runs``)."""
    for rank in sorted(scope.report.sessions.unseen_backward):
        yield Violation(
            UNSEEN_BACKWARD_NOTE, rank, None, describe_unseen_backward(rank, ended="the run")
        )


def _steady_unknown(scope: _Scope) -> Iterator[Violation]:
    """Recompiles whose steady-state verdict is unknown, where ``--max-steady-state-recompiles`` is asked:
    a note, never counted against it (docs/steady-state.md: neither steady nor a variant is claimed)."""
    if scope.rules.max_steady_state_recompiles is None:
        return
    frames = [f for f in scope.frames if f.steady_state_unknown]
    if frames:
        total = sum(f.steady_state_unknown for f in frames)
        yield Violation(
            STEADY_UNKNOWN_NOTE,
            scope.rank,
            frames[0].label,
            f"{scope.where}: {total} recompile(s) of unknown steady-state verdict, not counted by "
            f"--max-steady-state-recompiles ({', '.join(f.label for f in frames[:3])}: an nn.Module's own "
            "constant past the bound whose instance the run does not name, as in a trace)",
        )


def _running_compile(scope: _Scope) -> Iterator[Violation]:
    if scope.rules.fail_on_running_compile:
        yield from _ended_compiling(scope, True)


def _steps(frame: FrameReport) -> str:
    if not frame.recompile_steps or not any(frame.recompile_steps):
        return ""
    shown = first_of(frame.recompile_steps, 8, total=frame.recompile_steps_total, more=" ...")
    return f" at step(s) {shown}"


def _why(frame: FrameReport) -> str:
    top = [g for g in frame.top_reasons() if g.changes][:3]
    return (
        (
            " ("
            + "; ".join(
                f"{cause_label(g.category, g.subject, terse=True)} x{g.changes}" for g in top
            )
            + ")"
        )
        if top
        else ""
    )


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of ``check``: its :class:`Rules` field (``--`` and dashes: its flag), its value, its help;
    for a rule, how it finds violations and where they come in the list."""

    name: str
    value: Literal["int", "float", "categories", "switch"]  # categories: repeatable
    metavar: str | None
    help: str
    find: Callable[[_Scope], Iterator[Violation]] | None = None  # None: no rule (after_step)
    # the rules' violations are listed in this order (a compile the run ended with first)
    place: int = 0

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


# Every option, in the order the CLI and docs/cli.md list them.
OPTIONS: tuple[Option, ...] = (
    Option(
        "max_recompiles",
        "int",
        "N",
        "most recompiles any one frame may have",
        _max_recompiles,
        1,
    ),
    Option(
        "max_total_recompiles",
        "int",
        "N",
        "most recompiles over all frames",
        _max_total_recompiles,
        2,
    ),
    Option("after_step", "int", "S", "only count events at training step >= S"),
    Option(
        "max_compile_seconds",
        "float",
        "T",
        "most seconds spent compiling",
        _max_compile_seconds,
        4,
    ),
    Option(
        "max_recompile_seconds",
        "float",
        "T",
        "most compile seconds lost to recompiles (their backward compiles included)",
        _max_recompile_seconds,
        5,
    ),
    Option(
        "max_steady_state_recompiles",
        "int",
        "N",
        "most steady-state recompiles: a change past what a bounded set of variants explains "
        "(docs/steady-state.md; needs no steps, so it gates a serving job too)",
        _max_steady_state_recompiles,
        5,
    ),
    Option(
        "forbid",
        "categories",
        "CATEGORY",
        "fail when a recompile is caused by this reason category (repeatable)",
        _forbidden,
        3,
    ),
    Option(
        "max_limit_hits",
        "int",
        "N",
        "most recompile-limit hits",
        _at_most(
            "max_limit_hits",
            "recompile-limit hit(s)",
            lambda rules: rules.max_limit_hits,
            lambda report: report.limit_hits,
            lambda f: sum(f.limit_hits.values()),
        ),
        6,
    ),
    Option(
        "max_graph_breaks",
        "int",
        "N",
        "most graph breaks",
        _at_most(
            "max_graph_breaks",
            "graph break(s)",
            lambda rules: rules.max_graph_breaks,
            lambda report: report.graph_breaks,
            lambda f: f.graph_breaks,
        ),
        7,
    ),
    Option(
        "max_failures",
        "int",
        "N",
        "most compile failures",
        _at_most(
            "max_failures",
            "compile failure(s)",
            lambda rules: rules.max_failures,
            lambda report: report.failures,
            lambda f: sum(f.failures.values()),
        ),
        8,
    ),
    Option(
        "fail_on_running_compile",
        "switch",
        None,
        "fail when a rank's run ended with a compile still running (a stall, or a job stopped mid-compile)",
        _running_compile,
        0,
    ),
)

_RULES = tuple(
    option.find
    for option in sorted(OPTIONS, key=lambda option: option.place)
    if option.find is not None
)


@dataclasses.dataclass(frozen=True)
class Untrusted:
    """Counts a rank cannot vouch for: the name of its findings, the CLI option that accepts them, its help."""

    name: str
    flag: str
    help: str


UNTRUSTED: tuple[Untrusted, ...] = (
    Untrusted(
        "signal_dark",
        "--accept-dark-signals",
        "accept a run in which a capture signal was off or went dark (its counts are incomplete)",
    ),
    Untrusted(
        "incomplete",
        "--accept-incomplete-runs",
        "accept a run in which a rank ended without session_end (killed, crashed or still running)",
    ),
    Untrusted(
        "log_gap",
        "--accept-log-gaps",
        "accept a run whose session_end counts events its log lacks (a full disk, a deleted log)",
    ),
)
