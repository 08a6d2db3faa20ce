"""Turn compile events into spans: one trace per compile, one child span per phase.

A compile's root span starts at its ``compile_start`` (with that event's time) and ends at its ``compile``
(``open_spans``); a compile that had no start (a lazily compiled backward, a profile-mode re-use, a limit
hit) gets its root span from the ``compile`` alone, with the start time torch reported. The phase
children are created at the compile with explicit times. Torch reports each phase as an exclusive total,
not as intervals, so the child spans are *reconstructed*: laid end to end from the compile's start in
``events.PHASES`` order, each as long as its exclusive total. They sum to the compile's duration but
do not claim the real interleaving (Dynamo and AOT autograd can alternate within one compile).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from recompprof.exporter import (
    PHASES,
    CauseTracker,
    Compile,
    CompileStart,
    Frame,
    Reason,
    RecompileLimitHit,
    Running,
    is_limit_hit,
)
from recompprof_otel.open_spans import OpenSpan, OpenSpans

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.trace import Span, Tracer

ROOT_SPAN = "torch_compile.frame"
PHASE_SPAN = "torch_compile.phase"
# Bounds on what one span carries, so a frame with hundreds of cache entries cannot bloat a span.
MAX_REASONS = 32
MAX_STATUS_TEXT = 1024
MAX_TRACKED_FRAMES = 1024
LIMIT_HIT_ERROR = "recompile_limit_hit"
RUN_ENDED_ERROR = "run_ended_while_compiling"  # the session ended while the compile ran
END_LOST_ERROR = "compile_end_not_recorded"  # the compile's record never came
MAX_CALL_SITE = 8

FrameKey = tuple[str, bool]  # (events.Frame.key, backward)
# Per phase, built once: the child span's name and attributes never vary.
_PHASE_NAMES = {phase: f"{PHASE_SPAN} {phase}" for phase in PHASES}
_PHASE_ATTRS: dict[str, dict[str, Any]] = {
    phase: {"recompprof.phase": phase, "recompprof.phase.reconstructed": True} for phase in PHASES
}
_UNSET = Status(StatusCode.UNSET)


def phase_intervals(
    start_ns: int, phases: Mapping[str, float], end_ns: int
) -> list[tuple[str, int, int]]:
    """``(phase, start_ns, end_ns)`` laid end to end from ``start_ns`` in PHASES order, never past ``end_ns``."""
    out: list[tuple[str, int, int]] = []
    cursor = start_ns
    for phase in PHASES:
        seconds = phases.get(phase)
        if not seconds or seconds <= 0:
            continue
        stop = min(cursor + round(seconds * 1e9), max(end_ns, cursor))
        out.append((phase, cursor, stop))
        cursor = stop
    return out


def spans_of(event: object) -> int:
    """How many spans ``event`` would give (what is counted as dropped when it cannot be handed over): a
    compile its root and a child per phase, a limit hit one, a compile start none until its compile."""
    if isinstance(event, Compile):
        start_ns, end_ns = _bounds(event)
        return 1 + len(phase_intervals(start_ns, dict(event.phases.items()), end_ns))
    return 1 if isinstance(event, RecompileLimitHit) else 0


def _primary(reasons: Sequence[Reason]) -> Reason | None:
    for reason in reasons:
        if reason.explains_change:
            return reason
    return reasons[0] if reasons else None


def reason_attributes(reasons: Sequence[Reason]) -> dict[str, object]:
    """Guard-failure attributes: the explaining reason on its own, all of them (capped) as arrays."""
    attrs: dict[str, object] = {"recompprof.guard_failure.count": len(reasons)}
    primary = _primary(reasons)
    if primary is None:
        return attrs
    shown = list(reasons[:MAX_REASONS])
    attrs.update(
        {
            "recompprof.guard_failure.reason": primary.category,
            "recompprof.guard_failure.subject": primary.subject,
            "recompprof.guard_failure.detail": primary.text,
            "recompprof.guard_failure.categories": sorted({r.category for r in reasons}),
            "recompprof.guard_failure.reasons": [r.text for r in shown],
            "recompprof.guard_failure.reason_categories": [r.category for r in shown],
            "recompprof.guard_failure.subjects": [r.subject for r in shown],
            "recompprof.guard_failure.explains_change": [r.explains_change for r in shown],
        }
    )
    entries = [r.entry or "" for r in shown]
    if any(entries):
        attrs["recompprof.guard_failure.entries"] = entries
    return attrs


def _frame_attributes(frame: Frame) -> dict[str, object]:
    return {
        "code.function.name": frame.name,
        "code.file.path": frame.file,
        "code.line.number": frame.line,
    }


def _bounds(event: Compile) -> tuple[int, int]:
    """The compile's start and end in ns since the epoch (with no start reported, it ends at the event's time)."""
    duration_ns = round(event.duration * 1e9)
    if event.start_time is None:
        end_ns = round(event.time * 1e9)
        return end_ns - duration_ns, end_ns
    start_ns = round(event.start_time * 1e9)
    return start_ns, start_ns + duration_ns


def _start_attributes(start: CompileStart) -> dict[str, Any]:
    """What a compile's start says of it: its frame, id, rank, step and the guard failure that triggered it."""
    attrs: dict[str, Any] = {
        **_frame_attributes(start.frame),
        "recompprof.compile_id": start.compile_id,
        "recompprof.rank": start.rank,
        "recompprof.is_recompile": start.is_recompile,
        "recompprof.backward": start.backward,
        "recompprof.frame": start.frame.label,
        **reason_attributes([start.reason] if start.reason is not None else []),
    }
    if start.step is not None:
        attrs["recompprof.step"] = start.step
    if start.generation is not None:
        attrs["recompprof.generation"] = start.generation
    return attrs


def _end_unfinished(
    opened: OpenSpan, end_ns: int, error_type: str, outcome: str, text: str
) -> None:
    """End a root span whose compile record never came, with ERROR ``text`` and what its start said."""
    attrs = {
        **_start_attributes(opened.start),
        "recompprof.outcome": outcome,
        "error.type": error_type,
    }
    opened.span.set_attributes(attrs)
    opened.span.set_status(Status(StatusCode.ERROR, text[:MAX_STATUS_TEXT]))
    opened.span.end(end_time=max(end_ns, opened.start_ns))


def _sdk_tracer(tracer: object) -> bool:
    """Whether ``tracer`` has everything ``SpanBuilder._phase_spans`` reads (the SDK's Tracer does)."""
    return all(
        hasattr(tracer, name)
        for name in (
            "sampler",
            "id_generator",
            "resource",
            "instrumentation_info",
            "_span_limits",
            "_instrumentation_scope",
        )
    )


class SpanBuilder:
    """Builds the span tree of each compile and remembers the last compile of each frame for links."""

    def __init__(
        self,
        tracer: Tracer,
        max_frames: int = MAX_TRACKED_FRAMES,
        processor: SpanProcessor | None = None,
    ) -> None:
        """``processor``: the only span processor of a provider recompprof owns; phase spans then skip the SDK's
        per-span machinery (see ``_phase_spans``). Without it (a borrowed provider) every span goes through
        ``tracer.start_span``, so the application's processors see them as usual."""
        self._tracer = tracer
        self._processor = processor if processor is not None and _sdk_tracer(tracer) else None
        self._phase_attributes: dict[str, BoundedAttributes] = {}
        self._max_frames = max_frames
        # per frame: its last compile's span, compile id and reset generation
        self._last: collections.OrderedDict[FrameKey, tuple[SpanContext, str, int | None]] = (
            collections.OrderedDict()
        )
        # Compile ids of limit hits already turned into a span: torch reports a limit hit both as a
        # compile outcome and as its own event, in either order, and each hit must give one span.
        self._limit_hits: collections.OrderedDict[tuple[FrameKey, str], None] = (
            collections.OrderedDict()
        )
        self._causes = CauseTracker()
        self._open = OpenSpans()

    @staticmethod
    def _key(frame: Frame, backward: bool) -> FrameKey:
        return (frame.key, backward)

    def _remember(
        self, key: FrameKey, context: SpanContext, compile_id: str, generation: int | None
    ) -> None:
        self._last[key] = (context, compile_id, generation)
        self._last.move_to_end(key)
        while len(self._last) > self._max_frames:
            self._last.popitem(last=False)

    def _link(self, key: FrameKey) -> list[Link]:
        previous = self._last.get(key)
        if previous is None:
            return []
        context, compile_id, generation = previous
        attrs: dict[str, Any] = {
            "recompprof.link.reason": "recompile_of",
            "recompprof.compile_id": compile_id,
        }
        if generation is not None:
            attrs["recompprof.generation"] = generation
        return [Link(context, attrs)]

    def _seen_limit_hit(self, key: FrameKey, event: Compile | RecompileLimitHit) -> bool:
        if event.compile_id is None:
            return False
        marker = (
            key,
            f"{event.generation or 0}:{event.compile_id}",
        )  # ids restart after torch._dynamo.reset()
        if marker in self._limit_hits:
            return True
        self._limit_hits[marker] = None
        while len(self._limit_hits) > self._max_frames:
            self._limit_hits.popitem(last=False)
        return False

    def start_compile(self, start: CompileStart, thread: int | None = None) -> Span:
        """Start the root span of a compile that is beginning, at its start (ended by its ``compile``). Its
        attributes are set once, when it ends: from the ``compile`` (all of them), else from this start.
        ``thread``: the thread the compile runs on (default: this one)."""
        key = self._key(start.frame, start.backward)
        start_ns = round(start.time * 1e9)
        # An empty context: a compile is its own trace even if the training loop has a span open.
        root = self._tracer.start_span(
            ROOT_SPAN,
            context=Context(),
            kind=SpanKind.INTERNAL,
            links=self._link(key) if start.is_recompile else [],
            start_time=start_ns,
        )
        for stale in self._open.add(
            start.trace_id or "",
            OpenSpan(root, start, start_ns, threading.get_ident() if thread is None else thread),
        ):
            _end_unfinished(
                stale,
                start_ns,
                END_LOST_ERROR,
                "unknown",
                "recompprof saw no end of this compile: no "
                f"compile record came before compile {start.compile_id} started (the span ends there)",
            )
        return root

    def end_open(self, end_ns: int, running: Running | None = None) -> None:
        """End every span still open when the session ends (at ``end_ns``), with ERROR: the compile the
        ``session_end`` names as ``running`` ran until then; the others' records were lost."""
        for opened in self._open.drain():
            start = opened.start
            if running is not None and (running.compile_id, running.started) == (
                start.compile_id,
                start.time,
            ):
                _end_unfinished(
                    opened,
                    round((running.started + running.seconds) * 1e9),
                    RUN_ENDED_ERROR,
                    "running_at_end",
                    f"the run ended while this compile was running "
                    f"({running.seconds:.1f} s after it started)",
                )
            else:
                _end_unfinished(
                    opened,
                    end_ns,
                    END_LOST_ERROR,
                    "unknown",
                    "recompprof saw no end of this compile: "
                    "no compile record came before the session ended (the span ends there)",
                )

    def compile_span(self, event: Compile) -> Span | None:
        """Emit the span tree of one compile; returns the (ended) root span, or None if it was a duplicate.

        A compile whose ``compile_start`` opened a root span (same trace id) ends that span; the others get
        a root span of their own."""
        key = self._key(event.frame, event.backward)
        limit_hit = is_limit_hit(event)
        opened = self._open.take(event.trace_id)
        if limit_hit and self._seen_limit_hit(key, event) and opened is None:
            return None
        start_ns, end_ns = _bounds(event)
        attrs = self._compile_attributes(event)
        if opened is not None:
            root, start_ns, end_ns = opened.span, opened.start_ns, max(end_ns, opened.start_ns)
            root.set_attributes(attrs)  # type: ignore[arg-type]
        else:
            links = self._link(key) if event.is_recompile or limit_hit else []
            root = self._tracer.start_span(
                ROOT_SPAN,
                context=Context(),
                kind=SpanKind.INTERNAL,
                attributes=attrs,  # type: ignore[arg-type]
                links=links,
                start_time=start_ns,
            )
        intervals = phase_intervals(start_ns, dict(event.phases.items()), end_ns)
        if intervals:
            if self._processor is not None and root.is_recording():
                self._phase_spans(root, intervals)
            else:
                self._sdk_phase_spans(root, intervals)
        if event.outcome != "ok":
            error_type = event.fail_type or (LIMIT_HIT_ERROR if limit_hit else "_OTHER")
            root.set_attribute("error.type", error_type)
            root.set_status(
                Status(StatusCode.ERROR, (event.fail_reason or error_type)[:MAX_STATUS_TEXT])
            )
        root.end(end_time=end_ns)
        if not limit_hit:
            self._remember(key, root.get_span_context(), event.compile_id, event.generation)
        return root

    def _compile_attributes(self, event: Compile) -> dict[str, object]:
        """The root span's attributes: what the compile was, why it ran, the cause it is charged to, caches."""
        attrs: dict[str, object] = {
            **_frame_attributes(event.frame),
            "recompprof.compile_id": event.compile_id,
            "recompprof.rank": event.rank,
            "recompprof.is_recompile": event.is_recompile,
            "recompprof.outcome": event.outcome,
            "recompprof.backward": event.backward,
            "recompprof.steady_state": event.steady_state,
            "recompprof.graph_breaks": event.graph_breaks,
            "recompprof.frame": event.frame.label,
            **reason_attributes(event.reasons),
        }
        optional = {
            "recompprof.step": event.step,
            "recompprof.generation": event.generation,
            "recompprof.cache_entries": event.cache_entries,
            "recompprof.guard_count": event.guard_count,
            "recompprof.graph_op_count": event.graph_op_count,
            "recompprof.cache": event.cache,
            # set beside steady_state false where the verdict is unknown (docs/steady-state.md)
            "recompprof.steady_state_unknown": event.steady_state_unknown,
        }
        attrs.update({k: v for k, v in optional.items() if v is not None})
        cause = self._causes.cause_of(event)
        if cause is not None:  # the cause the report and metrics charge this compile's seconds to
            attrs.update(
                {
                    "recompprof.cause.frame": cause.frame.label,
                    "recompprof.cause.category": cause.category,
                    "recompprof.cause.subject": cause.subject,
                    "recompprof.cause.seconds": event.duration,
                }
            )
        for cache, results in event.cache_lookups.items():
            for result, count in results.items():
                attrs[f"recompprof.cache.{cache}.{result}"] = count
        if event.cache_seconds_saved is not None:
            attrs["recompprof.cache.seconds_saved"] = event.cache_seconds_saved
        if event.call_site:
            attrs["recompprof.call_site"] = list(event.call_site[-MAX_CALL_SITE:])
        return attrs

    def _sdk_phase_spans(self, root: Span, intervals: list[tuple[str, int, int]]) -> None:
        """The phase children through ``tracer.start_span``, so a borrowed provider's processors see them."""
        parent = trace.set_span_in_context(root)
        for phase, begin, stop in intervals:
            self._tracer.start_span(
                _PHASE_NAMES[phase],
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes=_PHASE_ATTRS[phase],
                start_time=begin,
            ).end(end_time=stop)

    def _phase_spans(self, root: Span, intervals: list[tuple[str, int, int]]) -> None:
        """The phase children as finished spans handed straight to our processor (~15 us CPU less each).

        The same steps as the SDK's ``Tracer.start_span`` + ``Span.end`` for an already-finished child, minus
        the mutable span, its lock and its start/end bookkeeping: the tracer's sampler decides (given the parent
        context, as for any child), ids come from the tracer's generator, attributes and limits are the
        tracer's. Only for a provider recompprof owns, whose one processor ignores ``on_start``; the SDK's own
        span self-metrics (``otel.sdk.span.*``, off unless a meter provider is configured) skip these spans.
        """
        tracer: Any = self._tracer
        processor = self._processor
        assert processor is not None
        parent_context = root.get_span_context()
        parent = trace.set_span_in_context(root)
        limits = tracer._span_limits
        trace_id = parent_context.trace_id
        random_flag = (
            TraceFlags.RANDOM_TRACE_ID if parent_context.trace_flags.random_trace_id else 0
        )
        for phase, begin, stop in intervals:
            name = _PHASE_NAMES[phase]
            result = tracer.sampler.should_sample(
                parent, trace_id, name, SpanKind.INTERNAL, _PHASE_ATTRS[phase], ()
            )
            # drawn for a dropped span too, as the SDK does
            span_id = tracer.id_generator.generate_span_id()
            if not result.decision.is_recording():
                continue
            flags = TraceFlags(
                (TraceFlags.SAMPLED if result.decision.is_sampled() else 0) | random_flag
            )
            context = SpanContext(
                trace_id,
                span_id,
                is_remote=False,
                trace_flags=flags,
                trace_state=result.trace_state,
            )
            # A sampler may add or change attributes; those it left alone are cleaned once per phase and
            # shared (immutable, and exporters only read them).
            unchanged = result.attributes == _PHASE_ATTRS[phase]
            attributes = self._phase_attributes.get(phase) if unchanged else None
            if attributes is None:
                attributes = BoundedAttributes(
                    limits.max_span_attributes,
                    result.attributes,
                    immutable=True,
                    max_value_len=limits.max_span_attribute_length,
                )
                if unchanged:
                    self._phase_attributes[phase] = attributes
            processor.on_end(
                ReadableSpan(
                    name=name,
                    context=context,
                    parent=parent_context,
                    resource=tracer.resource,
                    attributes=attributes,
                    events=BoundedList(limits.max_events),
                    links=BoundedList(limits.max_links),
                    kind=SpanKind.INTERNAL,
                    status=_UNSET,
                    start_time=begin,
                    end_time=stop,
                    instrumentation_info=tracer.instrumentation_info,
                    instrumentation_scope=tracer._instrumentation_scope,
                )
            )

    def limit_hit_span(self, event: RecompileLimitHit) -> Span | None:
        """A zero-length error span for a limit hit that no compile event reported."""
        key = self._key(event.frame, False)
        if self._seen_limit_hit(key, event):
            return None
        at = round(event.time * 1e9)
        reasons = [event.last_reason] if event.last_reason is not None else []
        attrs: dict[str, object] = {
            **_frame_attributes(event.frame),
            "recompprof.rank": event.rank,
            "recompprof.is_recompile": True,
            "recompprof.outcome": "limit_hit",
            "recompprof.frame": event.frame.label,
            "recompprof.limit": event.limit,
            "error.type": LIMIT_HIT_ERROR,
            **reason_attributes(reasons),
        }
        if event.compile_id is not None:
            attrs["recompprof.compile_id"] = event.compile_id
        if event.step is not None:
            attrs["recompprof.step"] = event.step
        if event.value is not None:
            attrs["recompprof.limit.value"] = event.value
        root = self._tracer.start_span(
            ROOT_SPAN,
            context=Context(),
            kind=SpanKind.INTERNAL,
            attributes=attrs,  # type: ignore[arg-type]
            links=self._link(key),
            start_time=at,
        )
        root.set_status(
            Status(
                StatusCode.ERROR,
                f"{event.limit} ({event.value}) reached; the frame runs without compiling",
            )
        )
        root.end(end_time=at)
        return root
