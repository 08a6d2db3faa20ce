"""The report's run-wide figure families, each with its ``add`` and ``merge`` side by side.

A family is one attribute of :class:`~recompprof._analysis.report.model.Report`: its fields are report
figures, its ``add`` methods fold events into them (called by the
:class:`~recompprof._analysis.report.fold.Folder`) and its ``merge`` adds the same figures of a part
folded from later events (called by :meth:`Report.merge <recompprof._analysis.report.model.Report.merge>`),
so one fold and a merge of parts are the same rules.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping, ValuesView

from recompprof._analysis.report import bounded
from recompprof._analysis.report.bounded import (
    CAPTURE_SIGNALS,
    MAX_BREAK_GROUPS,
    MAX_BREAK_HINTS,
    MAX_CAUSES,
    MAX_FUNCTIONS,
    MAX_LISTED,
    MAX_STEPS_LISTED,
    OTHER_BREAKS,
    MergeContext,
)
from recompprof._model.events import (
    Compile,
    GraphBreak,
    Reason,
    SessionEnd,
    SessionStart,
    SignalChange,
    short_path,
)
from recompprof._model.steady import example, torch_remedy, torch_rule


@dataclasses.dataclass
class RunFigures:
    """What the run's sessions say: runs, ranks, modes, settings, signals, wall time and internal errors."""

    runs: list[str] = dataclasses.field(default_factory=list)
    ranks: set[int] = dataclasses.field(default_factory=set)
    modes: set[str] = dataclasses.field(default_factory=set)
    profile_mechanisms: set[str] = dataclasses.field(default_factory=set)
    recompile_limit: int | None = None
    warmup_steps: int = 0
    # Events read and the last step seen: build_report's loop counts them itself (every event, no call).
    events: int = 0
    last_step: int = 0
    # Each rank's wall seconds, summed over its sessions (one after another: a process that attached
    # twice, a restarted rank), as its compile seconds are.
    wall_by_rank: dict[int, float] = dataclasses.field(default_factory=dict)
    # When the run's last session ended (a compile's time stands in for a missing end): what a cause's
    # hindsight verdict, settled or not, is measured against.
    ended: float = 0.0
    internal_errors: Counter[str] = dataclasses.field(default_factory=Counter)
    # Capture signals that were off from the start or went dark mid-run, with why: the counts miss them.
    signals_dark: dict[str, str] = dataclasses.field(default_factory=dict)
    # The torch release of each session (a fix hint names only the remedies that release has) and
    # the most launcher restarts a session had been through (a restart that warms up again is told).
    torch_versions: set[str] = dataclasses.field(default_factory=set)
    restarts: int = 0
    # Read from TORCH_TRACE logs (recompprof ingest): no mode and no warm-up setting were recorded, and training
    # steps only for forward compiles of a run recompprof was attached to (steps_from_trace).
    from_torch_trace: bool = False
    steps_from_trace: bool = False
    # What merging needs: each signal's last why from a session end.
    signals_off_last: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def steady_basis(self) -> str | None:
        """What the run's steady-state verdicts rest on: ``"steps"`` (a step past ``warmup_steps``), ``"repeats"``
        (the job advanced no step: only a change that recompiled a frame before), None (an ingested trace:
        no verdict). docs/steady-state.md#what-the-live-verdict-knows-and-what-the-report-knows."""
        if self.from_torch_trace and not self.modes:
            return None
        return "steps" if self.last_step > 0 else "repeats"

    def add_read(self, events: int, last_step: int) -> None:
        """What the fold's loop counted itself: the events it folded and the last step they named."""
        self.events, self.last_step = events, last_step

    def add_start(self, event: SessionStart) -> None:
        self.ranks.add(event.rank)
        if event.signals.get("torch_trace"):  # ingested: the event's mode is a placeholder
            self.from_torch_trace = True
            self.steps_from_trace = self.steps_from_trace or bool(
                event.signals.get("step_in_trace")
            )
        else:
            self.modes.add(event.mode)
        if event.profile_mechanism:
            self.profile_mechanisms.add(event.profile_mechanism)
        self.recompile_limit = event.recompile_limit
        self.warmup_steps = event.warmup_steps
        if torch_version := event.versions.get("torch"):
            self.torch_versions.add(torch_version)
        self.restarts = max(self.restarts, event.restart_count)
        if event.run_id not in self.runs and len(self.runs) < MAX_LISTED:
            self.runs.append(event.run_id)
        for name in CAPTURE_SIGNALS:
            if event.signals.get(name) is False:
                self.signals_dark.setdefault(name, "off from the start")

    @property
    def wall_seconds(self) -> float:
        """The longest rank's wall seconds, over all its sessions (0 where no session ended)."""
        return max(self.wall_by_rank.values(), default=0.0)

    def add_signal(self, event: SignalChange) -> None:
        # Only the signals the counts come from (step_in_trace, say, feeds TORCH_TRACE's steps alone).
        if not event.live and event.signal in CAPTURE_SIGNALS:
            self.signals_dark.setdefault(event.signal, event.reason or "went dark")

    def add_end(self, event: SessionEnd) -> None:
        for name in (
            self.signals_dark.keys() & event.signals_off.keys()
        ):  # the why, as the session saw it
            self.signals_dark[name] = event.signals_off[name]
        self.signals_off_last.update(event.signals_off)
        wall = self.wall_by_rank.get(event.rank, 0.0) + event.totals.get("wall_seconds", 0.0)
        self.wall_by_rank[event.rank] = wall
        self.ended = max(self.ended, event.time)
        self.internal_errors.update(event.internal_errors)

    def merge(self, part: RunFigures, ctx: MergeContext) -> None:
        for run in part.runs:
            if run not in self.runs and len(self.runs) < MAX_LISTED:
                self.runs.append(run)
        if part.ranks:  # it read a session start: the last one's settings stand
            self.recompile_limit, self.warmup_steps = part.recompile_limit, part.warmup_steps
        self.ranks |= part.ranks
        self.modes |= part.modes
        self.torch_versions |= part.torch_versions
        self.restarts = max(self.restarts, part.restarts)
        self.profile_mechanisms |= part.profile_mechanisms
        self.from_torch_trace = self.from_torch_trace or part.from_torch_trace
        self.steps_from_trace = self.steps_from_trace or part.steps_from_trace
        # A signal dark in both: every later session end that names it has the last word; new ones as the part saw them.
        for name in self.signals_dark:
            if name in part.signals_off_last:
                self.signals_dark[name] = part.signals_off_last[name]
        for name, why in part.signals_dark.items():
            self.signals_dark.setdefault(name, why)
        self.signals_off_last.update(part.signals_off_last)
        self.events += part.events
        self.last_step = max(self.last_step, part.last_step)
        for rank, wall in part.wall_by_rank.items():
            self.wall_by_rank[rank] = self.wall_by_rank.get(rank, 0.0) + wall
        self.ended = max(self.ended, part.ended)
        self.internal_errors.update(part.internal_errors)


@dataclasses.dataclass
class BreakGroup:
    """Graph breaks with one reason at one place of the user's code."""

    reason: str  # torch's graph-break type
    location: str  # the user's file:line ("" where torch gave none)
    skipped_frame: bool  # torch could not resume after the break: the whole frame ran eagerly
    count: int = 0
    frame: str = ""  # label of the first frame seen breaking here
    hints: list[str] = dataclasses.field(default_factory=list)  # torch's, bounded

    @property
    def where(self) -> str:
        """The location with its file shortened to the last two path parts, as frame labels have it."""
        return short_path(self.location) if self.location else "-"


@dataclasses.dataclass
class Breaks:
    """Graph breaks by reason, place and whether the frame ran eagerly (bounded)."""

    groups: dict[tuple[str, str, bool], BreakGroup] = dataclasses.field(default_factory=dict)

    def add(self, event: GraphBreak, label: str) -> None:
        """Count a break in its group, new groups past MAX_BREAK_GROUPS in one for the rest."""
        reason = (
            event.reason.strip().splitlines()[0][:200] if event.reason.strip() else "graph break"
        )
        key = (reason, event.user_location or "", event.skipped_frame)
        groups = self.groups
        group = groups.get(key)
        if group is None:
            if len(groups) >= MAX_BREAK_GROUPS:
                group = groups.setdefault(OTHER_BREAKS, BreakGroup(*OTHER_BREAKS))
            else:
                hints = [h[:300] for h in event.hints[:MAX_BREAK_HINTS]]
                group = groups[key] = BreakGroup(*key, frame=label, hints=hints)
        group.count += event.count

    def ranked(self) -> list[BreakGroup]:
        """Graph-break groups, most breaks first (frames that ran eagerly first among equals)."""
        return sorted(
            self.groups.values(),
            key=lambda g: (-g.count, not g.skipped_frame, g.reason, g.location),
        )

    def merge(self, part: Breaks, ctx: MergeContext) -> None:
        for key in bounded.new_keys(self.groups, part.groups, MAX_BREAK_GROUPS):
            self.groups[key] = dataclasses.replace(part.groups[key], count=0)
        for key, group in part.groups.items():
            self.groups[key].count += group.count


class SecondsByName(dict[str, float]):
    """Seconds by name, read most first (what ``Counter.most_common`` gives, for float values)."""

    def most_common(self, n: int | None = None) -> list[tuple[str, float]]:
        ranked = sorted(
            self.items(), key=lambda item: -item[1]
        )  # stable: ties in insertion order, as Counter's
        return ranked if n is None else ranked[:n]


@dataclasses.dataclass
class Compilation:
    """Run-wide figures of compile events: cudagraph skips, failure messages, compile caches and Dynamo
    trace time by function."""

    cudagraph_skips: Counter[tuple[str, str]] = dataclasses.field(
        default_factory=Counter
    )  # (frame, reason)
    failure_messages: list[tuple[str, str, str]] = dataclasses.field(
        default_factory=list
    )  # frame, type, message
    cache_lookups: Counter[tuple[str, str]] = dataclasses.field(
        default_factory=Counter
    )  # (cache, result)
    cache_seconds_saved: float = 0.0
    trace_seconds_by_function: SecondsByName = dataclasses.field(default_factory=SecondsByName)

    def add(self, event: Compile, label: str) -> None:
        """Fold a compile of a kept frame (``label``)."""
        if event.cudagraph_skip is not None:
            key = (label, event.cudagraph_skip)
            if key in self.cudagraph_skips or len(self.cudagraph_skips) < MAX_LISTED:
                self.cudagraph_skips[key] += 1
        if event.outcome == "failed" and len(self.failure_messages) < MAX_LISTED:
            message = (event.fail_reason or "").strip().splitlines()
            self.failure_messages.append(
                (label, event.fail_type or "unknown", message[0][:200] if message else "")
            )
        if event.cache_lookups:
            for cache, results in event.cache_lookups.items():
                for result, count in results.items():
                    self.cache_lookups[(cache, result)] += count
        self.cache_seconds_saved += event.cache_seconds_saved or 0.0
        if event.trace_seconds_by_function:
            by_function = self.trace_seconds_by_function
            for function, seconds in event.trace_seconds_by_function.items():
                if function in by_function or len(by_function) < MAX_FUNCTIONS:
                    by_function[function] = by_function.get(function, 0.0) + seconds

    def merge(self, part: Compilation, ctx: MergeContext) -> None:
        for key in bounded.new_keys(self.cudagraph_skips, part.cudagraph_skips, MAX_LISTED):
            self.cudagraph_skips[key] = 0
        self.cudagraph_skips.update(part.cudagraph_skips)
        bounded.extend(self.failure_messages, part.failure_messages, MAX_LISTED)
        self.cache_lookups.update(part.cache_lookups)
        self.cache_seconds_saved += part.cache_seconds_saved
        for key in bounded.new_keys(
            self.trace_seconds_by_function, part.trace_seconds_by_function, MAX_FUNCTIONS
        ):
            self.trace_seconds_by_function[key] = 0.0
        for key, seconds in part.trace_seconds_by_function.items():
            self.trace_seconds_by_function[key] += seconds


@dataclasses.dataclass
class CauseReport:
    """Recompiles one cause (frame x category x subject) explains, and the compile seconds they cost."""

    frame: str
    category: str
    subject: str
    recompiles: int = 0
    seconds: float = 0.0  # recompiles and their backward compiles, all phases
    steps: list[int] = dataclasses.field(default_factory=list)
    steps_total: int = 0
    example: str = ""  # a reason text
    call_site: list[str] = dataclasses.field(default_factory=list)  # innermost last
    steady_state: int = 0  # of its recompiles, those counted as steady state
    # of its recompiles, those whose verdict is unknown (Compile.steady_state_unknown): neither steady nor not
    steady_state_unknown: int = 0
    warmup: int = (
        0  # of its recompiles, made once by torch's own rule (recompprof._model.steady.torch_rule)
    )
    rule: str = ""  # the first of those rules ("automatic dynamic", "0/1 specialisation")
    made_dynamic: str = ""  # what torch made dynamic with the first of those ("dim 0 of L['x']")
    # The remedy torch's own reason text names (``torch._dynamo.decorators.mark_unbacked(tensor, dim)``),
    # shown as the hint whatever the example's length.
    torch_remedy: str = ""
    first_time: float = (
        0.0  # its first and last recompile: the hindsight verdict (settled) reads them
    )
    last_time: float = 0.0
    specialised: str = (
        ""  # a scalar the traced code kept specialised in its own compile ("value of ...")
    )
    frame_key: str = ""  # the frame's identity (``frame`` is its label): causes are keyed by it
    # The subject by the wrapped function's parameters (``Reason.parameter``): shown, never keyed on.
    parameter: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """The cause's identity (its key in ``Report.causes``): frame key, category, subject."""
        return (self.frame_key or self.frame, self.category, self.subject)

    @property
    def tier(self) -> int:
        """Where it ranks in "fix these first": 0 it recompiled in steady state, 1 only as variants of a set
        not past its bound, or in declared warm-up (before ``warmup_steps``, or steps unknown), 2 only as
        torch's own warm-up (automatic dynamic, 0/1 specialisation: fixed itself)."""
        if self.steady_state:
            return 0
        return 2 if self.warmup >= self.recompiles else 1


@dataclasses.dataclass
class Causes(Mapping[tuple[str, str, str], CauseReport]):
    """Recompiles and their compile seconds by cause (frame key x category x subject), bounded; read
    as a mapping of the causes by key."""

    by_key: dict[tuple[str, str, str], CauseReport] = dataclasses.field(default_factory=dict)
    # What merging needs: the ranks of backward compiles whose forward this report never saw.
    orphan_backward_ranks: set[int] = dataclasses.field(default_factory=set, repr=False)

    def __getitem__(self, key: tuple[str, str, str]) -> CauseReport:
        return self.by_key[key]

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        return iter(self.by_key)

    def __len__(self) -> int:
        return len(self.by_key)

    def values(self) -> ValuesView[CauseReport]:
        return self.by_key.values()

    def add_orphan(self, event: Compile) -> None:
        """A backward compile whose forward is in no event folded here."""
        self.orphan_backward_ranks.add(event.rank)

    def add(
        self, event: Compile, label: str, key: tuple[str, str, str], reason: Reason | None
    ) -> None:
        """Charge a compile that cost seconds to its cause ``key`` (frame key, category, subject), of
        the frame labelled ``label``; ``reason``: the event's explaining reason
        (:func:`recompprof._model.causes.explaining_reason`)."""
        cause = self.by_key.get(key)
        if cause is None:
            cause = self._new_cause(label, *key)
        cause.seconds += event.duration
        if event.backward:
            return
        cause.recompiles += 1
        cause.steps_total += 1
        time = event.time
        if not cause.first_time or time < cause.first_time:  # min(), without the call
            cause.first_time = time
        if time > cause.last_time:
            cause.last_time = time
        if event.steady_state:
            cause.steady_state += 1
        elif event.steady_state_unknown is not None:
            cause.steady_state_unknown += 1
        automatic_dynamic = event.automatic_dynamic
        rule = torch_rule(reason, automatic_dynamic)
        if rule is not None:
            cause.warmup += 1
            cause.rule = cause.rule or rule
        if automatic_dynamic is not None:
            cause.made_dynamic = cause.made_dynamic or automatic_dynamic
        if event.specialised is not None:
            cause.specialised = cause.specialised or event.specialised
        if event.step is not None and len(cause.steps) < MAX_STEPS_LISTED:
            cause.steps.append(event.step)
        if not cause.example or not cause.call_site:
            _keep_first_example(cause, reason, event)

    def _new_cause(self, label: str, frame_key: str, category: str, subject: str) -> CauseReport:
        """A cause's entry, new causes of a frame past MAX_CAUSES in one for its other subjects."""
        causes = self.by_key
        if len(causes) >= MAX_CAUSES:
            key = (frame_key, category, "(other subjects)")
            return causes.setdefault(key, CauseReport(label, category, key[2], frame_key=frame_key))
        cause = causes[(frame_key, category, subject)] = CauseReport(
            label, category, subject, frame_key=frame_key
        )
        return cause

    def merge(self, part: Causes, ctx: MergeContext) -> None:
        """``ctx.earlier_ranks``: ranks that compiled in the events before ``part``'s, where a
        backward's forward may be."""
        bounded.check(not part.orphan_backward_ranks & ctx.earlier_ranks)
        self.orphan_backward_ranks |= part.orphan_backward_ranks
        causes = self.by_key
        for key in bounded.new_keys(causes, part.by_key, MAX_CAUSES):
            cause = part.by_key[key]
            causes[key] = CauseReport(
                cause.frame, cause.category, cause.subject, frame_key=cause.frame_key
            )
        for key, part_cause in part.by_key.items():
            cause = causes[key]
            cause.recompiles += part_cause.recompiles
            cause.seconds += part_cause.seconds
            bounded.extend(cause.steps, part_cause.steps, MAX_STEPS_LISTED)
            cause.steps_total += part_cause.steps_total
            if not cause.example:
                cause.example, cause.parameter = part_cause.example, part_cause.parameter
                cause.torch_remedy = part_cause.torch_remedy
            if part_cause.recompiles:
                cause.first_time = min(
                    cause.first_time or part_cause.first_time, part_cause.first_time
                )
                cause.last_time = max(cause.last_time, part_cause.last_time)
            cause.rule = cause.rule or part_cause.rule
            cause.call_site = cause.call_site or part_cause.call_site
            cause.steady_state += part_cause.steady_state
            cause.steady_state_unknown += part_cause.steady_state_unknown
            cause.warmup += part_cause.warmup
            cause.made_dynamic = cause.made_dynamic or part_cause.made_dynamic
            cause.specialised = cause.specialised or part_cause.specialised


def _keep_first_example(cause: CauseReport, reason: Reason | None, event: Compile) -> None:
    """A cause shows its first recompile's reason, torch's remedy in it and where it was called."""
    if not cause.example:
        cause.example = example(reason.text) if reason is not None else ""
        cause.parameter = (reason.parameter if reason is not None else None) or ""
        cause.torch_remedy = (torch_remedy(reason.text) if reason is not None else None) or ""
    if not cause.call_site and event.call_site:
        cause.call_site = list(event.call_site[-5:])
