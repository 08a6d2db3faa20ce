"""The sentences more than one view says: the terminal and HTML reports, ``check``, ``ingest`` and ``watch``
word a cause, a cut list, the run's counts and what its log cannot vouch for from here, so they say it alike.

Only words: no layout (tables, markup) and no figures (the report model counts; this module phrases).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from recompprof._model.status import describe_at_end, describe_unseen_backward

if TYPE_CHECKING:  # check imports this module for every command's parser: not the report model
    from recompprof._analysis.report.figures import CauseReport
    from recompprof._analysis.report.frames import FrameReport
    from recompprof._analysis.report.model import Report
    from recompprof._analysis.report.sessions import LogGap, Sessions

FIX_FIRST = 10  # causes shown in the "fix these first" list
CAUSE_STEPS = 8  # steps listed for a cause (the rest counted)
FRAME_STEPS = 12  # recompile steps listed for a frame (the rest counted)
LISTED_RANKS = 16  # ranks named in a line about sessions (the rest counted)

# session_end totals -> what they count, as the report says it.
_COUNTS = (
    ("compiles", "compile(s)"),
    ("recompiles", "recompile(s)"),
    ("graph_breaks", "graph break(s)"),
    ("recompile_limit_hits", "recompile-limit hit(s)"),
)


def first_of(
    items: Sequence[object],
    shown: int,
    *,
    total: int | None = None,
    sep: str = ", ",
    more: str = " (+{})",
) -> str:
    """The first ``shown`` of ``items`` joined by ``sep``, then ``more`` (``{}``: how many were left out of
    ``total``, by default ``len(items)``) when any were: ``1, 2, 3 (+4)``, ``0, 1 ...``, ``a; b; +2 more``."""
    left = (len(items) if total is None else total) - min(shown, len(items))
    listed = sep.join(str(item) for item in items[:shown])
    return listed + more.format(left) if left > 0 else listed


# A subject named by the wrapped function's parameters: rooted in one of them, ``L['name']…``.
_BOUND = re.compile(r"(type\()?L\['([A-Za-z_]\w{0,100})'\](.*)", re.S)


def parameter_shown(parameter: str) -> str:
    """A subject named by the wrapped function's parameters as the user writes it: ``L['input_ids']`` is
    ``input_ids``, ``L['past_key_values'].layers[0].keys`` is ``past_key_values.layers[0].keys``."""
    m = _BOUND.fullmatch(parameter)
    return f"{m.group(1) or ''}{m.group(2)}{m.group(3)}" if m else parameter


def subject_text(subject: str, parameter: str | None = None) -> str:
    """A subject as shown: by the wrapped function's parameters where a wrapper's were bound to them
    (``Reason.parameter``), torch's spelling kept beside it: ``input_ids (L['kwargs']['input_ids'])``."""
    return f"{parameter_shown(parameter)} ({subject})" if parameter and subject else subject


def cause_label(
    category: str,
    subject: str,
    frame: str | None = None,
    *,
    terse: bool = False,
    parameter: str | None = None,
) -> str:
    """A cause (or a reason group, without ``frame``): ``Model.forward · size · L['x']``, ``-`` for a missing
    subject; ``terse`` (a line of ``check``): ``Model.forward size L['x']``, a subject that only repeats its
    category (``grad_mode``) or is missing said not at all. ``parameter``: see :func:`subject_text`."""
    subject = subject_text(subject, parameter)
    if terse:
        parts = [category] if not subject or subject in ("-", category) else [category, subject]
    else:
        parts = [category, subject or "-"]
    return (" " if terse else " · ").join(parts if frame is None else [frame, *parts])


def cause_steps(cause: CauseReport, shown: int = CAUSE_STEPS) -> str:
    return first_of(cause.steps, shown, total=cause.steps_total) if cause.steps else "-"


def frame_steps(frame: FrameReport) -> str:
    """The steps a frame recompiled at, the first few and how many more (empty: none)."""
    return first_of(frame.recompile_steps, FRAME_STEPS, total=frame.recompile_steps_total)


def more_causes(ranked: Sequence[CauseReport]) -> str:
    """``3 more cause(s), 0.120 s``: the causes past the "fix these first" list, and the time they cost."""
    return f"{len(ranked) - FIX_FIRST} more cause(s), {sum(c.seconds for c in ranked[FIX_FIRST:]):.3f} s"


def share(seconds: float, total: float) -> str:
    return f"{100 * seconds / total:.1f} %" if total > 0 else "-"


def fix_text(cause: CauseReport, hints: dict[str, str], report: Report | None = None) -> str:
    """The fix a "fix these first" entry gives, by what the cause is (recompprof._model.steady): torch's own
    warm-up says it fixed itself and what would avoid even that; a bounded set says so, and settled in
    hindsight never advises the fix it may already be (buckets); otherwise the category's hint. Torch's
    own remedy, where its reason text names one, is said first; the traced code specialising a dim again
    is never "will not recur"."""
    from recompprof._model.steady import ZERO_ONE

    if cause.specialised:
        return specialised_text(cause.specialised)
    if cause.tier == 2 and cause.rule == ZERO_ONE and not cause.made_dynamic:
        return zero_one_text(cause)
    if cause.tier == 2 and cause.made_dynamic:
        return _warmup_text(cause, report)
    hint = hints.get(cause.category, "")
    if cause.category == "symbolic_shape" and _TORCH_OP.search(cause.example):
        hint = (
            "the guard is installed inside torch's own op (torch/_higher_order_ops), not by your code: pad or "
            "bucket that length to a few sizes (a mark_dynamic range makes torch raise ConstraintViolationError "
            "there)."
        )
    elif cause.category == "module_attribute" and _INT_EQUALITY.search(cause.example):
        hint = per_value_text(cause, report)
    elif cause.torch_remedy:
        hint = f"torch's own remedy (from its reason text): {cause.torch_remedy}. {hint}"
    if cause.steady_state or report is None or cause.tier != 1:
        return hint
    if cause.steady_state_unknown and not report.settled(cause):
        return (
            f"{cause.recompiles + 1} variants so far; steady state unknown for {cause.steady_state_unknown} "
            f"past {_bounded()}: nothing names the instance holding {cause.subject} (a trace has no identity "
            "guard on self), so new instances (a bounded set) and one instance's value changing (steady "
            f"state) read alike; a live session tells them apart: {hint}"
        )
    if report.settled(cause):
        if cause.category == "size":  # the set may be the buckets it pads to: not advised again
            hint = (
                "mark the dim dynamic (torch._dynamo.mark_dynamic(x, dim)) or compile with dynamic=True, one "
                "graph for every size."
            )
        return (
            f"settled after {cause.recompiles + 1} variants (the run went on with no other compile of it): a "
            "bounded set, compiled once each, that costs no more if it is by design (buckets, states, "
            f"instances). To compile fewer: {hint}"
        )
    return (
        f"{cause.recompiles + 1} variants so far, no more than a bounded set explains (steady state past "
        f"{_bounded()}): {hint}"
    )


# A shape guard torch's own op installs (its source line calls the op, or torch names the op's file): the
# recursion of associative_scan on the length guards each halving's parity.
_TORCH_OP = re.compile(r"_higher_order_ops|\bassociative_scan\(")
_INT_EQUALITY = re.compile(r"\s==\s-?\d+\s*(?:#|$)")


def _bounded() -> int:
    from recompprof._model.steady import BOUNDED_VARIANTS

    return BOUNDED_VARIANTS


def zero_one_text(cause: CauseReport) -> str:
    """Torch's 0/1 specialisation: once per dynamic graph, fixed itself; its own remedy avoids even that."""
    remedy = cause.torch_remedy or "torch._dynamo.decorators.mark_unbacked(tensor, dim)"
    return (
        "nothing to fix: one-time warm-up, torch's 0/1 specialisation (a dynamic dim never holds a size of 0 "
        "or 1, so the first call at that size compiled once more for this graph; later ones reuse it). To "
        f"avoid even this recompile, torch's remedy: {remedy} before the first call."
    )


def per_value_text(cause: CauseReport, report: Report | None) -> str:
    """An int attribute of an nn.Module, one graph per value: per instance under regional compilation
    (``block.compile()`` with ``layer_idx``), or per state. Torch's remedy, and the limit that holds them."""
    frame = report.frames.get(cause.frame_key) if report is not None else None
    graphs = f" (this frame compiled {frame.compiles} graphs)" if frame is not None else ""
    return (
        f"each value of {cause.subject} compiled its own graph ({cause.recompiles + 1} values so far): torch "
        "keeps int attributes of an nn.Module constant, one graph per instance (layer_idx under regional "
        "compilation) or per state. To compile one graph for all: "
        "torch._dynamo.config.allow_unspec_int_on_nn_module = True. To keep a graph per value, raise "
        "torch._dynamo.config.recompile_limit to at least the instances x the variants each compiles"
        f"{graphs}, or the rest of the job runs eagerly past the limit."
    )


def _warmup_text(cause: CauseReport, report: Report | None) -> str:
    frame = report.frames.get(cause.frame_key) if report is not None else None
    guard = frame.changed_again.get(cause.made_dynamic) if frame is not None else None
    if guard is not None:
        guard = guard.split("  # ", 1)[0].strip()  # the guard, without torch's source comment
        return (
            f"this first change was a one-time warm-up: torch made {cause.made_dynamic} dynamic, but the traced "
            f"code specialised it again (guard: {guard}) and it recompiled again: those later recompiles are "
            "listed as their own cause; find what the code does with that size (a branch, an assert, a "
            f"reshape to a fixed shape). To avoid even this first recompile, {warmup_avoidance(cause.made_dynamic)}."
        )
    return (
        f"nothing to fix: one-time warm-up, torch made {cause.made_dynamic} dynamic after its first change and "
        f"it will not recur. To avoid even this recompile, {warmup_avoidance(cause.made_dynamic)}."
    )


def specialised_text(specialised: str) -> str:
    """The fix of a scalar the traced code kept specialised in the very compile that was to make it dynamic:
    a tensor or dynamic=True cannot help (the code needs the number), so say what can."""
    name = specialised.removeprefix("value of ")
    return (
        f"the traced code needs {name} as a Python number (torch tried it dynamic and the same compile "
        f"guarded it to its new value again), so every new value recompiles: keep it constant while the "
        "job runs, or move what uses it out of the compiled function."
    )


def warmup_avoidance(made_dynamic: str) -> str:
    """How to start with a dim or scalar dynamic, so torch's automatic dynamic has nothing to warm up."""
    if made_dynamic.startswith("value of "):
        return "pass it as a 0-dim tensor (e.g. lr=torch.tensor(0.01)) or compile with dynamic=True"
    return "mark the dim dynamic before the first call (torch._dynamo.mark_dynamic(tensor, dim))"


def describe_source(report: Report) -> str:
    """``mode monitor | steps 12``, or what an ingested run can say instead (it has neither)."""
    if report.run.from_torch_trace and not report.run.modes:
        steps = (
            f"recompile steps up to {report.run.last_step}"
            if report.run.steps_from_trace
            else "steps unknown"
        )
        return f"from TORCH_TRACE (no mode) | {steps}"
    return (
        f"mode {', '.join(sorted(report.run.modes)) or '?'} | steps {steps_seen(report)}"
        f" | {steady_basis(report)}"
    )


def steady_basis(report: Report) -> str:
    """What the steady-state verdicts rest on, as the report's header says it."""
    bound = f"a change past {_bounded()} variants"
    if report.run.steady_basis == "repeats":
        return f"steady state by repeats (no step advanced: {bound})"
    return f"steady state by steps (warm-up {report.run.warmup_steps}), {bound}"


def steps_seen(report: Report) -> str:
    """The training steps of the run, or the last one seen when a rank's session ended without saying."""
    last = report.run.last_step
    return f">= {last} (last seen)" if report.sessions.incomplete else str(last)


def _when(seconds: float) -> str:
    """An event's time as a UTC date; a time no date can show (a corrupt log's) as the number the log holds
    (``time 1e+300``): the reader sees what the log says, and nothing is an error of recompprof's."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):  # no date: a time far outside any run
        return f"time {seconds:g}"


def completeness_warnings(report: Report) -> list[tuple[str, str]]:
    """What the log cannot vouch for, one line per rank and verdict: ``("incomplete", line)`` for
    sessions without session_end, ``("log_gap", line)`` for gaps."""
    lines = []
    for rank, ended in report.sessions.incomplete.items():
        step = "unknown" if ended.step is None else ended.step
        more = f"; {ended.sessions} of its sessions ended so" if ended.sessions > 1 else ""
        compiling = (
            ""
            if ended.compiling is None
            else "; " + describe_at_end(rank, ended.compiling, lower_bound=True, ended="its log")
        )
        if rank in report.sessions.unseen_backward:
            compiling = "; " + describe_unseen_backward(rank, ended="its log")
        lines.append(
            (
                "incomplete",
                f"rank {rank} ended without session_end: killed, crashed or still running "
                f"(last event at {_when(ended.time)}, step {step}{more}){compiling}",
            )
        )
    for rank, gap in report.sessions.log_gaps.items():
        more = f" ({gap.sessions} sessions have gaps; the latest shown)" if gap.sessions > 1 else ""
        lines.append(
            (
                "log_gap",
                f"rank {rank}: the event log has a gap: {gap_detail(gap)}{more}; "
                "the figures miss what the log lacks",
            )
        )
    return lines


def steady_cell(frame: FrameReport) -> str:
    """A frame's steady-state recompiles as a table shows them, those of unknown verdict apart."""
    return steady_figure(frame.steady_state_recompiles, frame.steady_state_unknown)


def steady_figure(steady: int, unknown: int) -> str:
    """Steady-state recompiles with those of unknown verdict apart (``0 (+4 unknown)``), never summed."""
    return f"{steady}" + (f" (+{unknown} unknown)" if unknown else "")


def steady_unknown_notes(report: Report) -> list[str]:
    """What the recompiles of unknown steady-state verdict are, where there are any."""
    frames = [f for f in report.frames.values() if f.steady_state_unknown]
    if not frames:
        return []
    total = sum(f.steady_state_unknown for f in frames)
    listed = first_of([f"{f.label} x{f.steady_state_unknown}" for f in frames], 5, sep="; ")
    return [
        f"{total} recompile(s) have an unknown steady-state verdict ({listed}): an nn.Module's own constant "
        "past the bound whose instance nothing names (a trace: torch guards no identity on self), so new "
        "instances and one instance's value changing read alike; counted neither as steady state nor as "
        "variants (docs/steady-state.md)."
    ]


def automatic_dynamic_notes(report: Report) -> list[str]:
    """The one-time recompiles of automatic dynamic, explained; and each dim or scalar torch made dynamic
    that recompiled again (the traced code specialised it), with the guard that did, never "will not recur"."""
    made = [(f, dim) for f in report.frames.values() for dim in dict.fromkeys(f.automatic_dynamic)]
    if not made:
        return []
    settled = [f"{f.label}: {dim}" for f, dim in made if dim not in f.changed_again]
    again = [(f.label, dim, f.changed_again[dim]) for f, dim in made if dim in f.changed_again]
    notes = [
        f"{report.automatic_dynamic_recompiles} recompile(s) were automatic dynamic warming up: after the first "
        "change of a tensor dim or an int/float argument torch made it dynamic and recompiled once; these are "
        "not counted as steady state (docs/steady-state.md)."
    ]
    if settled:
        listed = first_of(settled, 5, sep="; ", more="; +{} more")
        notes[0] += f" This will not recur for {listed}."
    for label, dim, guard in again[:5]:
        notes.append(
            f"{label}: torch made {dim} dynamic, but the traced code specialised it again and it recompiled "
            f"again (guard: {guard}); its later recompiles are no warm-up: variants of a set, steady state once "
            "past what a bounded set explains."
        )
    if len(again) > 5:
        notes.append(
            f"{len(again) - 5} more dim(s) or scalar(s) made dynamic were specialised again."
        )
    return notes


def hints_for(report: Report) -> dict[str, str]:
    """The fix hints for this report's run: torch's remedies only where every session's release has them."""
    from recompprof._model.remedies import fix_hints  # the rules' tables: not for every parser

    return fix_hints(*sorted(report.run.torch_versions))


def restart_notes(report: Report) -> list[str]:
    """A restarted job that warmed up again: torch's profile-guided automatic dynamic would have started
    it dynamic, and the warm-up repeats on every restart until the job says who it is."""
    from recompprof._model.remedies import PGO, has_pgo

    warmed = report.automatic_dynamic_recompiles
    if not (report.run.restarts and warmed and has_pgo(*report.run.torch_versions)):
        return []
    return [
        f"This job had been restarted {report.run.restarts} time(s) (TORCHELASTIC_RESTART_COUNT) and "
        f"warmed up again: its {warmed} automatic-dynamic recompile(s) repeat on every restart. To "
        f"start dynamic instead, {PGO.text}."
    ]


def counts_line(report: Report) -> str:
    """``compiles 8 (+8 bwd) | recompiles 7 | limit hits 1 | graph breaks 0 | failures 0``: the report's header
    counts, in the words every command uses for them."""
    backward = sum(f.backward_compiles for f in report.frames.values())
    return (
        f"compiles {report.compiles}"
        + (f" (+{backward} bwd)" if backward else "")
        + f" | recompiles {report.recompiles} | limit hits {report.limit_hits} | graph breaks {report.graph_breaks}"
        f" | failures {report.failures}"
    )


def frames_in_order(report: Report) -> list[FrameReport]:
    """The frames as both reports list them: most recompiles first, then most compile time."""
    return sorted(
        report.frames.values(), key=lambda f: (-f.recompiles, -f.compile_seconds, f.label)
    )


def gap_detail(gap: LogGap) -> str:
    """What the latest gapped session's ``session_end`` counts beyond its log, said in words."""
    parts = [
        f"{_number(value)} {dict(_COUNTS)[key]}, the log holds {logged}"
        for key, value, logged in gap.missing
    ]
    said = ["session_end counts " + "; ".join(parts)] if parts else []
    if gap.writer_dropped:
        said.append(f"the writer could not write {gap.writer_dropped} event(s)")
    return "; ".join(said)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def running_at_end(sessions: Sessions) -> list[str]:
    """One line per rank whose run ended with a compile running, naming the ranks that were not:
    ``rank 1 was compiling `Model.forward` (recompile: ...) for 612 s when the run ended; rank 0 was
    not compiling``."""
    idle = sessions.not_compiling_at_end
    others = f"; {_ranks(idle)} {'was' if len(idle) == 1 else 'were'} not compiling" if idle else ""
    return [
        describe_at_end(rank, end.running, lower_bound=end.lower_bound) + others
        for rank, end in sessions.compiling_at_end.items()
    ] + [
        describe_unseen_backward(rank, ended="the run") for rank in sorted(sessions.unseen_backward)
    ]


def _ranks(ranks: list[int]) -> str:
    """``rank 0`` / ``ranks 0, 2, 3`` (the first few of many, and how many more)."""
    listed = first_of(ranks, LISTED_RANKS, more=" (+{} more)")
    return ("rank " if len(ranks) == 1 else "ranks ") + listed
