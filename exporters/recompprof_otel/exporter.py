"""``OtelExporter``: every compile as an OpenTelemetry trace, sent over OTLP off the training thread.

Lifecycle: ``start`` builds (or borrows) a tracer provider, ``on_event`` turns compile events into
spans (a compile's root span opens at its ``compile_start`` and ends at its ``compile``), ``shutdown``
flushes within its deadline. With a provider recompprof owns, ``on_event`` only hands the event over
(a bounded queue, about a microsecond): the export thread builds its spans before each batch, so the
compiling thread pays nothing for span building; with a borrowed provider the spans are built in
``on_event``, so the application's processors see them at once. The session calls ``shutdown`` at
detach, at interpreter exit and on SIGTERM. A forked child (DataLoader workers) emits nothing. The
global tracer provider is never touched.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from recompprof.exporter import (
    Compile,
    CompileStart,
    Exporter,
    Owner,
    RecompileLimitHit,
    SessionEnd,
    contain,
    record,
)
from recompprof_otel import environment, resource, transport
from recompprof_otel.ids import PrivateRandomIdGenerator
from recompprof_otel.processor import QUEUE_FULL, BoundedBatchProcessor
from recompprof_otel.spans import SpanBuilder, spans_of

if TYPE_CHECKING:
    from recompprof.exporter import Event, SessionView
    from recompprof_otel.metrics import OtelMetrics
    from recompprof_otel.settings import OtelSettings

log = logging.getLogger("recompprof.otel")

# Once the collector looks down at shutdown (an export failed, or one has hung for over a second), the
# flush waits at most this much longer: an ending job should not sit out the OTLP retry back-off.
DOWN_COLLECTOR_FLUSH_S = 0.5


def _bounded(fn: Callable[[], Any], timeout: float, name: str) -> bool:
    """Run ``fn`` on a daemon thread and wait at most ``timeout`` s; True if it finished."""

    def run() -> None:
        with contain(name):
            fn()

    thread = threading.Thread(target=run, name=f"recompprof-{name}", daemon=True)
    thread.start()
    thread.join(max(timeout, 0.0))
    return not thread.is_alive()


class OtelExporter(Exporter):
    """Exports each compile as a trace (root ``torch_compile.frame``, children per phase) over OTLP."""

    name = "otel"

    settings: OtelSettings

    def __init__(self, settings: OtelSettings) -> None:
        self.settings = settings
        self.env = environment.read()
        # Checked here so a missing grpc package fails attach with a clear message, like a missing extra.
        if not self.env.disabled:
            transport.check_protocol(self.env.traces_protocol)
            if settings.otel_metrics:
                transport.check_protocol(self.env.metrics_protocol)
        self.tracer_provider: Any = None
        self.processor: BoundedBatchProcessor | None = None
        self.metrics: OtelMetrics | None = None
        self._builder: SpanBuilder | None = None
        self._ids: PrivateRandomIdGenerator | None = None
        # Read by the session after start: compiles then carry the trace id their span is sent under.
        self.traces = False
        self._owns_provider = False
        self._owner = Owner()
        self._active = False
        # Events handed over by the compiling thread, with that thread's id, for the export thread to build
        # (only with a provider recompprof owns); bounded by OTEL_BSP_MAX_QUEUE_SIZE.
        self._handed: collections.deque[tuple[Event, int]] = collections.deque()
        self._max_handed = 0
        self._building = threading.RLock()  # one builder at a time: the export thread, or a flush

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, session: SessionView) -> None:
        if self.env.problems:
            record(
                "otel.config",
                environment.OtelConfigWarning("; ".join(self.env.problems)),
                "bad OTEL_* value(s) replaced by defaults",
            )
        if self.env.disabled:
            log.info("recompprof: OTEL_SDK_DISABLED=true; the otel exporter sends nothing")
            return
        res = resource.build(session.identity, session.versions)
        provider = session.tracer_provider
        if provider is None:
            self.processor = BoundedBatchProcessor(
                transport.span_exporter(self.env.traces_protocol, self.env.request_timeout_s),
                max_queue_size=self.env.max_queue_size,
                max_export_batch_size=self.env.max_export_batch_size,
                schedule_delay_s=self.env.schedule_delay_s,
            )
            # shutdown_on_exit=False: the SDK's own atexit flush is unbounded; the session's detach is not.
            provider = TracerProvider(
                resource=res, shutdown_on_exit=False, id_generator=PrivateRandomIdGenerator()
            )
            provider.add_span_processor(self.processor)
            self._owns_provider = True
        self.tracer_provider = provider
        tracer = provider.get_tracer("recompprof", session.versions.get("recompprof") or None)
        if hasattr(tracer, "id_generator"):
            # Also on a borrowed SDK provider: only recompprof's own tracer gets the private generator.
            self._ids = tracer.id_generator = PrivateRandomIdGenerator()
        self._builder = SpanBuilder(
            tracer, processor=self.processor if self._owns_provider else None
        )
        if self._owns_provider and self.processor is not None:
            self._max_handed = self.env.max_queue_size
            self.processor.produce = self._build_handed
        if self.settings.otel_metrics:
            from recompprof_otel.metrics import OtelMetrics

            self.metrics = OtelMetrics(
                transport.metric_exporter(self.env.metrics_protocol),
                res,
                session.snapshot,
                session.identity.rank,
                self.dropped,
                {
                    "version": session.versions.get("recompprof", ""),
                    "torch_version": session.versions.get("torch", ""),
                },
            )
        self._owner.claim()
        self._active = True
        # a tracer that takes no ids of ours cannot name its traces
        self.traces = self._ids is not None
        # A weak reference: fork handlers cannot be unregistered and must not keep a detached exporter alive.
        after_fork = weakref.WeakMethod(self._after_fork_in_child)
        os.register_at_fork(
            after_in_child=lambda: (method := after_fork()) is not None and method()
        )

    def _after_fork_in_child(self) -> None:
        # The child shares nothing it could safely use (threads, sockets, locks): it stays silent.
        self._active = False

    def on_event(self, event: Event) -> None:
        # Called on the compile path for every event, cold there: few Python calls but the hand-over's.
        if not self._active or self._owner.forked() or self._builder is None:
            return
        processor = self.processor
        if self._max_handed and processor is not None:
            # Handed to the export thread; spans are timed by the event, not by when they are built.
            handed = self._handed
            waiting = len(handed)
            if waiting >= self._max_handed:
                with contain("otel.span"):
                    processor.drop(QUEUE_FULL, spans_of(event))
                return
            handed.append((event, threading.get_ident()))
            if not processor.started or waiting + 1 >= processor.batch_size:
                processor.handed_over(waiting + 1)
            return
        with contain("otel.span"):
            self._build(event, threading.get_ident())

    def _build_handed(self) -> None:
        """Build the spans of every event handed over so far, in order (the export thread, or a flush)."""
        with self._building:
            handed = self._handed
            while handed:
                event, thread = handed.popleft()
                with contain("otel.span"):
                    self._build(event, thread)

    def _build(self, event: Event, thread: int) -> None:
        """The spans of one event (``thread``: the thread that emitted it, where its compile runs)."""
        assert self._builder is not None
        if isinstance(event, Compile):
            if self._ids is not None and event.trace_id is not None:
                self._ids.next_trace_id = int(
                    event.trace_id, 16
                )  # the trace its duration exemplar names
            try:
                root = self._builder.compile_span(event)
            finally:
                if self._ids is not None:
                    # a duplicate (no span) must not pass its id on
                    self._ids.next_trace_id = None
            if root is not None and self.metrics is not None:
                self.metrics.record_compile(event, trace.set_span_in_context(root))
        elif isinstance(event, CompileStart):
            if (
                self._ids is not None and event.trace_id is not None
            ):  # the trace its compile will name
                self._ids.next_trace_id = int(event.trace_id, 16)
                try:
                    self._builder.start_compile(event, thread)
                finally:
                    self._ids.next_trace_id = None
        elif isinstance(event, RecompileLimitHit):
            self._builder.limit_hit_span(event)
        elif isinstance(event, SessionEnd):
            self._builder.end_open(round(event.time * 1e9), event.compiling)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Flush spans (and metrics) for at most ``timeout`` seconds; idempotent."""
        if not self._active or self._owner.forked():
            return
        self._active = False
        if self._builder is not None:
            self._build_handed()  # what the export thread has not built yet
            with contain("otel.span"), self._building:
                self._builder.end_open(
                    time.time_ns()
                )  # no session_end came: the open spans' ends are unknown
        provider = self.tracer_provider
        if self._owns_provider and self.processor is not None:
            processor = self.processor
            _bounded(
                lambda: processor.shutdown(int(timeout * 1000), DOWN_COLLECTOR_FLUSH_S),
                timeout + 0.5,
                "otel.shutdown",
            )
        elif provider is not None and hasattr(provider, "force_flush"):
            # A borrowed provider belongs to the application: flush what we gave it, never shut it down.
            _bounded(lambda: provider.force_flush(int(timeout * 1000)), timeout, "otel.flush")
        if self.metrics is not None:
            metrics = self.metrics
            _bounded(lambda: metrics.shutdown(timeout), timeout, "otel.metrics")

    # -- introspection ------------------------------------------------------------------------
    def dropped(self) -> dict[str, int]:
        """Spans that never reached the collector, by reason (empty with a borrowed provider)."""
        return self.processor.dropped() if self.processor is not None else {}

    def exported(self) -> int:
        """Spans the collector accepted."""
        return self.processor.counts["exported"] if self.processor is not None else 0
