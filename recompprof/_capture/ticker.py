"""Says what is compiling while a compile runs long: a one-line status on a terminal, else log lines.

A background thread started with the session reads ``Session.status()`` (a few attribute reads, no lock
the compile path holds) a few times a second; nothing runs on the training step path. Off a terminal (or
without ``status_line``) it logs one WARNING line when a compile has run ``compile_status_after`` seconds
and one every ``compile_status_every`` seconds after. With ``status_line`` (set by ``recompprof run`` and
``recompprof demo``) and stderr a terminal, it redraws one status line in place each second while a
compile runs and clears it when the compile ends. Frame names and reasons are shown escaped
(:func:`recompprof._model.texts.escape`, as the offline commands show them). Either way, once a compile has run
``HEARTBEAT_SECONDS`` and every ``HEARTBEAT_SECONDS`` after, it has the session write a small
``compile_running`` event: a log whose process is then killed outright still says how long it compiled.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from recompprof import _internal
from recompprof._model.escaping import escape
from recompprof._model.events import HEARTBEAT_SECONDS
from recompprof._model.status import Status, describe

if TYPE_CHECKING:
    from recompprof._capture.settings import Settings
    from recompprof._model.events import Running

log = logging.getLogger("recompprof")

_CLEAR = "\r\x1b[K"  # carriage return, erase to the end of the line


class CompileTicker:
    """The thread that tells people which compile is running and for how long."""

    def __init__(
        self,
        status: Callable[[], Status],
        settings: Settings,
        stream: TextIO | None = None,
        still_running: Callable[[Running], None] | None = None,
    ) -> None:
        self._status = status
        # records a long compile as still running (the event log's heartbeat)
        self._still_running = still_running
        self._after, self._every = settings.compile_status_after, settings.compile_status_every
        self._stream = stream if stream is not None else sys.stderr
        self._line = settings.status_line and _is_terminal(self._stream)
        self._period = 1.0 if self._line else max(0.05, min(1.0, self._after / 4, self._every / 4))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False
        self._lock = threading.Lock()  # the thread draws, the compile path clears (compile_ended)
        # (compile id, start) of the compile being watched
        self._compile: tuple[str, float] | None = None
        self._next_log = 0.0
        self._next_beat = HEARTBEAT_SECONDS

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="recompprof-compile-status", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (at detach) and clear the status line if one is drawn."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        self.compile_ended()

    def compile_ended(self) -> None:
        """Clear the status line now (called at a compile's end, so the job's next output starts on a clean line)."""
        if not self._line:
            return
        with _internal.contain("status"), self._lock:
            if self._drawn:
                self._write(_CLEAR)
                self._drawn = False

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            with _internal.contain("status", "the compile status line is off"):
                self.tick()

    def tick(self) -> None:
        """Look once: record a long compile as still running; draw, clear or log."""
        status = self._status()
        running = status.compiling
        if running is None:
            self._compile = None
            self.compile_ended()
            return
        if self._compile != (running.compile_id, running.started):
            self._compile = (running.compile_id, running.started)
            self._next_log, self._next_beat = self._after, HEARTBEAT_SECONDS
        if running.seconds >= self._next_beat:
            if self._still_running is not None:
                self._still_running(running)
            self._next_beat = _after(self._next_beat, running.seconds, HEARTBEAT_SECONDS)
        if self._line:
            with self._lock:
                if self._status().compiling is not None:  # not ended meanwhile
                    self._write(_CLEAR + escape(describe(status.rank, running)))
                    self._drawn = True
            return
        if running.seconds >= self._next_log:
            log.warning("recompprof: %s", escape(describe(status.rank, running)))
            self._next_log = _after(self._next_log, running.seconds, self._every)

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()


def _after(due: float, now: float, every: float) -> float:
    """The next time due after ``now``, on the schedule ``due``, ``due + every``, ...: computed, not stepped to, so
    no period (however small) and no jump of the clock can keep the thread in a loop."""
    if due > now:
        return due
    return max(due + (math.floor((now - due) / every) + 1) * every, math.nextafter(now, math.inf))


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
