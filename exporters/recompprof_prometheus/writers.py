"""Push-style outputs: textfile (node_exporter), Pushgateway, and the periodic thread that drives them.

Each output has ``flush()`` (write the current snapshot once) and ``close(clean)``. A
:class:`Periodic` thread calls ``flush`` every interval and soon after the compile path marks the
data dirty, never more often than ``min_gap``; the training loop itself never waits on it.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from prometheus_client.exposition import delete_from_gateway, push_to_gateway, write_to_textfile
from prometheus_client.registry import CollectorRegistry

from recompprof.exporter import contain

# A push at exit must not hold up interpreter shutdown or a SIGTERM grace period for long.
PUSH_TIMEOUT = 5.0
LINGER_MAX = 60.0  # the longest a final Pushgateway group is kept before it is deleted
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class Output(Protocol):
    component: str

    def flush(self) -> None: ...

    def close(self, clean: bool) -> None: ...


class TextfileOutput:
    """Writes ``<dir>/recompprof_<job>_<rank>.prom`` atomically (write to a temp name, then rename)."""

    component = "prometheus.textfile"
    hint = "cannot write the textfile; check that prometheus_textfile_dir exists, is writable and has free space"

    def __init__(self, registry: CollectorRegistry, directory: Path, job: str, rank: int) -> None:
        self.registry = registry
        self.path = directory / f"recompprof_{_UNSAFE.sub('_', job)}_{rank}.prom"

    def flush(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(self.path), self.registry)

    def close(self, clean: bool) -> None:
        # The file stays: it is the job's final record, and node_textfile_mtime_seconds dates it.
        pass


class PushgatewayOutput:
    """PUTs the families to the Pushgateway group ``{job, rank}``; deletes the group on a clean exit."""

    component = "prometheus.pushgateway"
    hint = "cannot push; check prometheus_pushgateway_url and that the Pushgateway is reachable from this host"

    def __init__(
        self, registry: CollectorRegistry, url: str, job: str, rank: int, linger: float = 0.0
    ) -> None:
        self.registry = registry
        self.url = url
        self.job = job
        self.grouping_key = {"rank": str(rank)}
        self.linger = min(linger, LINGER_MAX)

    def flush(self) -> None:
        push_to_gateway(
            self.url, self.job, self.registry, grouping_key=self.grouping_key, timeout=PUSH_TIMEOUT
        )

    def close(self, clean: bool) -> None:
        # The Pushgateway never forgets a group; a job that ended normally should not linger there, but
        # only once Prometheus had the time to scrape its final values (pushed just before this).
        if clean:
            time.sleep(self.linger)
            delete_from_gateway(
                self.url, self.job, grouping_key=self.grouping_key, timeout=PUSH_TIMEOUT
            )


class CallbackOutput:
    """Adapts a plain function (the multiprocess mirror) to :class:`Output`."""

    def __init__(
        self, component: str, flush: Callable[[], None], close: Callable[[], None]
    ) -> None:
        self.component = component
        self._flush = flush
        self._close = close

    def flush(self) -> None:
        self._flush()

    def close(self, clean: bool) -> None:
        self._close()


class Periodic:
    """Runs ``output.flush`` on a daemon thread: every ``interval`` and ``min_gap`` after :meth:`poke`."""

    def __init__(self, output: Output, interval: float, min_gap: float = 1.0) -> None:
        self.output = output
        self.interval = interval
        self.min_gap = min(min_gap, interval)
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one flush at a time (thread, SIGTERM and exit may race)
        self._closed = False
        self._finished = False
        self._thread = threading.Thread(
            target=self._run, name=f"recompprof-{output.component}", daemon=True
        )

    def start(self) -> None:
        # The first write happens on the thread too: a black-holed Pushgateway must not hold up attach.
        self._dirty.set()
        self._thread.start()

    def poke(self) -> None:
        """Mark the data changed; cheap and non-blocking (called on the compile path)."""
        self._dirty.set()

    def flush(self) -> None:
        with self._lock, contain(self.output.component, getattr(self.output, "hint", "")):
            if (
                not self._finished
            ):  # after close() (a pushgateway group is deleted) nothing is written again
                self.output.flush()

    def _run(self) -> None:
        last = time.monotonic() - self.min_gap
        while not self._stop.is_set():
            self._dirty.wait(max(0.0, self.interval - (time.monotonic() - last)))
            if self._stop.is_set():
                return
            wait = self.min_gap - (time.monotonic() - last)
            if wait > 0 and self._stop.wait(wait):
                return
            self._dirty.clear()
            last = time.monotonic()
            with contextlib.suppress(
                Exception
            ):  # already counted by the guard; the thread must live on
                self.flush()

    def close(self, clean: bool, timeout: float = 5.0) -> None:
        """Stop the thread, flush the final values, then let the output clean up (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._dirty.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.flush()
        with self._lock, contain(self.output.component):
            self._finished = True
            self.output.close(clean)
