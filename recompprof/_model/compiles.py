"""The events of one compile record: the ``Compile`` and, for a limit hit, the ``RecompileLimitHit``.

Built from the plain record (``compile_record``) and what the caller knows of the compile
(:class:`CompileContext`: when and where it ran, the reasons ``explaining`` kept); the one rule of what a
recompile is (:func:`is_recompile`) and the order a compile's events are emitted in (:func:`in_order`).
:class:`recompprof._model.assembler.CompileAssembler` calls these for the live session and ``ingest``.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, cast

from recompprof._model.compile_id import spelled
from recompprof._model.compile_record import CompileRecord, limit_hit
from recompprof._model.events import Compile, Event, Frame, GraphBreak, Reason, RecompileLimitHit
from recompprof._model.explaining import Explained, automatic_dynamic, scalar_made_dynamic
from recompprof._model.steady import torch_rule, verdict
from recompprof._model.texts import clean_text
from recompprof._model.trusted import trusted
from recompprof._model.vocabulary import Category, LimitName

# Fields of the record and the event that share a name but not a meaning: the event derives these.
_DERIVED = frozenset({"compile_id", "fail_reason", "cudagraph_skip"})
# Every other field the record and the event both declare reaches the event as it is: a measure torch reports
# (start, duration, phases, guard and op counts, caches) is added to both classes and nowhere else.
SHARED_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(CompileRecord)
    if f.name in Compile.model_fields and f.name not in _DERIVED
)
# Reads them all in one call, at C speed (a comprehension ran a ``getattr`` in Python per field).
_SHARED = operator.attrgetter(*SHARED_FIELDS)


@dataclasses.dataclass(slots=True)  # not frozen: that costs a microsecond more per compile record
class CompileContext:
    """What the caller knows of one compile beyond torch's record: when and where it ran, and why.

    ``explained`` is what :meth:`ReasonExplainer.explain` returned for the record's reason texts; ``limits``
    are the configured recompile limits, for a limit hit whose text names none (None: not read).
    """

    time: float
    rank: int
    step: int | None
    frame: Frame
    explained: Explained
    graph_breaks: int = 0
    redact: bool = False
    steady_state: bool = False  # at or after ``warmup_steps``: the verdict's only use of steps
    # The job has advanced no training step yet (generation, evaluation, serving): the report's header says
    # its verdicts rest on repeats; the verdict itself is the same (recompprof._model.steady).
    no_step: bool = False
    limits: dict[str, int | None] | None = None
    call_site: list[str] = dataclasses.field(default_factory=list)
    guard_set: str | None = None
    trace_id: str | None = None
    generation: int | None = None  # torch._dynamo.reset() calls seen before it (live)
    trace_seconds: dict[str, float] | None = None  # seconds of tracing by function (profile)
    # The values are the live recorder's own, of the declared types: built without validation
    # (recompprof._model.trusted). A trace's are validated.
    trusted: bool = False


def is_recompile(cache_entries: int | None, guard_failures: bool) -> bool:
    """Whether a forward compile is a recompile: its frame already had cache entries that torch counts it
    against (in its ``isolate_recompiles`` region), or torch reported guard failures for it. The one rule of
    a ``compile`` and of its ``compile_start``."""
    return bool(cache_entries) or guard_failures


def compile_events(
    m: CompileRecord, ctx: CompileContext
) -> tuple[Compile, RecompileLimitHit | None]:
    """The ``Compile`` event for record ``m`` and, if it was a limit hit, the ``RecompileLimitHit``."""
    reasons, omitted = ctx.explained.reasons, ctx.explained.omitted
    hit = limit_hit(m, ctx.limits)
    dynamic = _automatic_dynamic(m, ctx, reasons, hit)
    steady, unknown = steady_state(ctx, reasons, dynamic) if hit is None else (False, None)
    skip = m.cudagraph_skip
    values = dict(zip(SHARED_FIELDS, _SHARED(m)))
    values.update(
        time=ctx.time,
        rank=ctx.rank,
        step=ctx.step,
        frame=ctx.frame,
        compile_id=spelled(m.compile_id),
        generation=ctx.generation,
        is_recompile=not m.backward and is_recompile(m.cache_entries, bool(reasons)),
        outcome="limit_hit" if hit else ("failed" if m.fail_type is not None else "ok"),
        fail_reason=None if ctx.redact or not m.fail_reason else clean_text(m.fail_reason),
        reasons=list(reasons),
        reasons_omitted=cast("dict[Category, int]", omitted),
        graph_breaks=ctx.graph_breaks,
        steady_state=steady,  # a hit compiled nothing
        steady_state_unknown=unknown,
        automatic_dynamic=dynamic,
        specialised=_specialised(m, ctx, reasons),
        call_site=list(ctx.call_site),
        guard_set=ctx.guard_set,
        cudagraph_skip=skip.category if skip else None,
        cudagraph_skip_reason=skip.text if skip and not ctx.redact else None,
        trace_id=ctx.trace_id,
        # given, not defaulted: pydantic deep-copies a mutable default per event
        trace_seconds_by_function={},
    )
    if ctx.trusted:
        if ctx.trace_seconds is not None:
            values["trace_seconds_by_function"] = ctx.trace_seconds
        event = trusted(Compile, values)
    else:
        event = Compile(**values)
        if ctx.trace_seconds is not None:  # as given, not validated (as it always was)
            event = event.model_copy(update={"trace_seconds_by_function": ctx.trace_seconds})
    if hit is None:
        return event, None
    limit, value = hit
    values = dict(
        time=ctx.time,
        rank=ctx.rank,
        step=ctx.step,
        frame=ctx.frame,
        compile_id=event.compile_id,
        generation=ctx.generation,
        limit=cast("LimitName", limit),
        value=value,
        last_reason=next((r for r in reasons if r.explains_change), None),
    )
    return event, trusted(RecompileLimitHit, values) if ctx.trusted else RecompileLimitHit(**values)


def steady_state(
    ctx: CompileContext, reasons: list[Reason], dynamic: str | None
) -> tuple[bool, str | None]:
    """The verdict of a recompile and what it cannot know, by the one rule of
    :mod:`recompprof._model.steady`: past the warm-up steps, made by none of torch's own rules, and its
    change past the variants a bounded set explains (with steps or without: a first eval or a decode step
    is a new variant either way); unknown where that rests on an instance nothing names."""
    explaining = next((r for r in reasons if r.explains_change), None)
    return verdict(
        past_warmup=ctx.steady_state,
        rule=torch_rule(explaining, dynamic),
        variants=ctx.explained.variants,
        instance_unknown=ctx.explained.instance_unknown,
    )


def _specialised(m: CompileRecord, ctx: CompileContext, reasons: list[Reason]) -> str | None:
    """The scalar the compile's installed guards kept at its new value (:class:`Explained`), or None. Only
    a scalar torch would have made dynamic: an int attribute of an nn.Module, which torch keeps constant by
    its own rule, is guarded at its value in every compile without the traced code asking."""
    if not ctx.explained.specialised:
        return None
    reason = next((r for r in reasons if r.explains_change), None)
    if reason is None or not scalar_made_dynamic(reason, m.dynamic):
        return None
    return f"value of {reason.subject}"


def _automatic_dynamic(
    m: CompileRecord, ctx: CompileContext, reasons: list[Reason], hit: tuple[str, int | None] | None
) -> str | None:
    """What automatic dynamic made dynamic with this forward compile (a limit hit or a failure made nothing)."""
    if m.backward or hit is not None or m.fail_type is not None:
        return None
    explained = ctx.explained
    return automatic_dynamic(m, reasons, explained.first_change, explained.specialised)


def in_order(
    event: Compile, breaks: list[GraphBreak], hit: RecompileLimitHit | None
) -> list[Event]:
    """The events of one compile record in the order both paths emit them: the compile, the graph
    breaks its trace reported (each with the compile's frame, and its step where the break has none:
    a trace's breaks carry no step), then the limit hit."""
    return [event, *(_of_compile(b, event) for b in breaks), *([hit] if hit is not None else [])]


def _of_compile(graph_break: GraphBreak, event: Compile) -> GraphBreak:
    update: dict[str, Any] = {}
    if graph_break.frame != event.frame:
        update["frame"] = event.frame
    if graph_break.step is None and event.step is not None:
        update["step"] = event.step
    return graph_break.model_copy(update=update) if update else graph_break
