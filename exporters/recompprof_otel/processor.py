"""A bounded batching span processor that counts every span it does not deliver.

Why not the SDK's BatchSpanProcessor: it drops silently when full (a log line, no count), restarts
its worker thread in every forked child (each DataLoader worker would get one), and its flush at exit
can wait on a hanging collector past any deadline. This one keeps the same ``OTEL_BSP_*`` meaning,
starts its thread on the first span, does nothing in a forked child, and bounds every wait.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExportResult

from recompprof.exporter import Owner, record

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("recompprof.otel")

# Drop reasons (label values of the dropped counter).
QUEUE_FULL = "queue_full"
EXPORT_FAILED = "export_failed"
SHUTDOWN = "shutdown"
FORKED_CHILD = "forked_child"
# An export still running after this long means a collector that is down (retrying) or hanging.
SLOW_EXPORT_S = 1.0


class BoundedBatchProcessor(SpanProcessor):
    """Queue ended spans (bounded), export them in batches on one background thread."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int,
        max_export_batch_size: int,
        schedule_delay_s: float,
    ) -> None:
        self._exporter = exporter
        self._max_queue = max_queue_size
        self.batch_size = max_export_batch_size  # read by a producer too (see ``started``)
        self._delay = max(schedule_delay_s, 0.01)  # 0 would make the worker spin
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        # Reentrant: a SIGTERM handler may flush while the main thread is inside on_end.
        self._cond = threading.Condition(threading.RLock())
        self._wake = threading.Event()
        self._accepted = 0  # spans queued so far
        self._settled = 0  # spans exported, failed or dropped after being queued
        self._owner = Owner()
        self._thread: threading.Thread | None = None
        # Read by a producer before it calls ``handed_over`` (a call it skips when neither changes anything).
        self.started = False  # the worker thread was started
        self._stopping = False
        self._in_flight = 0  # spans handed to the exporter whose export has not returned
        self._export_began = 0.0
        self._last_failed = False
        self.counts: Counter[str] = Counter()
        # Builds the spans of events handed over by the compiling thread (OtelExporter): run by the worker
        # before each batch, and by a flush first, so what was handed over before a flush is in it.
        self.produce: Callable[[], None] | None = None

    # -- SpanProcessor ----------------------------------------------------------------------
    def on_start(self, span: object, parent_context: object = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            return
        if self._owner.forked():
            # Checked before taking the lock: another thread may have held it at fork time.
            self.counts[FORKED_CHILD] += 1
            return
        with self._cond:
            if self._stopping:
                self.counts[SHUTDOWN] += 1
                return
            if len(self._queue) >= self._max_queue:
                self.counts[QUEUE_FULL] += 1
                return
            self._queue.append(span)
            self._accepted += 1
            if self._thread is None:
                self._start_thread()
            if len(self._queue) >= self.batch_size:
                self._wake.set()

    def force_flush(self, timeout_millis: int = 30000, down_timeout_s: float | None = None) -> bool:
        """Wait until every span queued so far is exported or failed; False on timeout.

        With ``down_timeout_s``, once the collector looks down the wait ends that long after.
        """
        deadline = time.monotonic() + timeout_millis / 1000.0
        if self._owner.forked():
            return True
        if self.produce is not None:
            self.produce()
        with self._cond:
            if self._thread is None:
                return not self._queue
            target = self._accepted
            self._wake.set()
            while self._settled < target:
                now = time.monotonic()
                if down_timeout_s is not None and self._looks_down(now):
                    deadline = min(deadline, now + down_timeout_s)
                    down_timeout_s = None
                remaining = deadline - now
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                # Short waits while the collector's health is unknown, to notice a stuck export early.
                self._cond.wait(remaining if down_timeout_s is None else min(remaining, 0.1))
        return True

    def shutdown(self, timeout_millis: int = 30000, down_timeout_s: float | None = None) -> None:
        """Flush for at most ``timeout_millis`` (see force_flush), then stop; what is left is counted as dropped."""
        if self._owner.forked():
            return
        with self._cond:
            if self._stopping:
                return
        flushed = self.force_flush(timeout_millis, down_timeout_s)
        with self._cond:
            self._stopping = True
            # Queued spans and a batch stuck in a hanging export are given up; the stuck export's
            # eventual result is ignored (see _export) so nothing is counted twice.
            left = len(self._queue) + self._in_flight
            self._queue.clear()
            self._in_flight = 0
            self._settled += left
            if left:
                self.counts[SHUTDOWN] += left
            self._wake.set()
            thread = self._thread
        if not flushed:
            log.warning(
                "recompprof: OpenTelemetry collector unreachable or slow at shutdown; %d span(s) not "
                "delivered (counted as dropped, reason 'shutdown')",
                left,
            )
        try:
            # Interrupts the OTLP exporter's retry back-off; a request blocked on a socket ends at its timeout.
            self._exporter.shutdown()
        except Exception as exc:  # noqa: BLE001 - a broken exporter must not break detach
            record("otel.export", exc)
        if thread is not None:
            thread.join(0.1)

    # -- worker ------------------------------------------------------------------------------
    def drop(self, reason: str, spans: int) -> None:
        """Count ``spans`` that never reached the queue (work handed over that did not fit) as dropped."""
        with self._cond:
            self.counts[reason] += spans

    def handed_over(self, waiting: int) -> None:
        """Work for ``produce`` was handed over, ``waiting`` items in all: start the worker if it has not
        started, and wake it once a batch is waiting (else it runs at its schedule, as for spans)."""
        if self._thread is None:
            with self._cond:
                if self._thread is None and not self._stopping:
                    self._start_thread()
        if waiting >= self.batch_size:
            self._wake.set()

    def _start_thread(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="recompprof-otel-export", daemon=True
        )
        self._thread.start()
        self.started = True

    def _take(self) -> list[ReadableSpan]:
        with self._cond:
            count = min(self.batch_size, len(self._queue))
            self._in_flight = count
            self._export_began = time.monotonic()
            return [self._queue.popleft() for _ in range(count)]

    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            if self.produce is not None:
                self.produce()
            while batch := self._take():
                self._export(batch)
            with self._cond:
                if self._stopping:
                    return

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        ok = False
        try:
            ok = self._exporter.export(batch) is SpanExportResult.SUCCESS
        except Exception as exc:  # noqa: BLE001 - exporters should not raise; count it if one does
            record("otel.export", exc)
        with self._cond:
            self._last_failed = not ok
            if self._in_flight:  # zero once shutdown has already counted this batch as dropped
                self._in_flight = 0
                self.counts["exported" if ok else EXPORT_FAILED] += len(batch)
                self._settled += len(batch)
            self._cond.notify_all()

    def _looks_down(self, now: float) -> bool:
        stuck = self._in_flight > 0 and now - self._export_began > SLOW_EXPORT_S
        return self._last_failed or stuck

    def dropped(self) -> dict[str, int]:
        """Spans that never reached the collector, by reason."""
        with self._cond:
            return {k: v for k, v in self.counts.items() if k != "exported"}
