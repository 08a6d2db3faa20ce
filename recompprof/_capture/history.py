"""Export a session's event log to the history lake while it runs and when it ends (``history_uri``).

Every export runs as ``recompprof export LOG --to URI --per-rank`` in a child process, so the job's
memory and threads are untouched, and the child is killed at the deadline (``history_timeout``): a
slow or unreachable lake costs the job's exit at most that long. While the session runs, a thread
exports every ``history_every`` seconds the days closed since the last export and the day so far, so
a week-long job's compiles are queryable within that period rather than at its end, and reach each
day before compaction closes it; at the end only the days after the last closed one exported remain
(``--after-day``), with the session's ``runs`` row. Each export of a session writes its files under
the same names (docs/history.md, "Identity"), so a later one replaces an earlier one's days.
Whatever goes wrong is counted as an internal error (``history``) and logged once; the event log
stays the source of truth, and ``recompprof export`` exports it later (docs/history.md, "Export at
session end").
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import threading
from pathlib import Path

from recompprof import _internal
from recompprof._capture.lake_uri import shown


class HistoryExportFailed(RuntimeError):
    """An export to the lake did not finish (its last line of output says why)."""


def _command(log: Path, redact: bool, after: datetime.date | None) -> list[str]:
    """The child's command line; the lake is in its environment (:func:`_environment`)."""
    command = [sys.executable, "-m", "recompprof._cli.main", "export", str(log)]
    command += ["--per-rank", *(["--redact"] if redact else [])]
    if after is not None:
        command += ["--after-day", after.isoformat()]
    return command


def _environment(uri: str, redact: bool) -> dict[str, str]:
    """The child must not attach itself (the start-up hook) nor pose as this rank. It is given the
    lake in ``RECOMPPROF_HISTORY_URI`` (export's default ``--to``), never on its command line, which
    any user of the node may read (``ps``) and which would show keys a URI carries; and the
    session's own ``redact``, which ``attach(redact=...)`` may have set against the variable."""
    env = {key: value for key, value in os.environ.items() if key != "RECOMPPROF_ATTACH"}
    return {**env, "RECOMPPROF_HISTORY_URI": uri, "RECOMPPROF_REDACT": "1" if redact else "0"}


def _hint(log: Path, uri: str) -> str:
    return (
        f"the event log {log} was not exported to the history lake {shown(uri)} (setting history_uri / "
        f"RECOMPPROF_HISTORY_URI); it stays on disk: export it with `recompprof export`"
    )


def _finished(
    done: subprocess.CompletedProcess[bytes] | subprocess.Popen[bytes], err: bytes
) -> str:
    """Why an export failed ("" when it did not)."""
    if done.returncode == 0:
        return ""
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def export_at_end(
    log: Path, uri: str, timeout: float, redact: bool, after: datetime.date | None = None
) -> None:
    """Export ``log`` to the lake at ``uri`` within ``timeout`` seconds (only the fact rows of days
    after ``after``, where the session exported its closed days while it ran); never raises."""
    hint = _hint(log, uri)
    try:
        done = subprocess.run(
            _command(log, redact, after),
            env=_environment(uri, redact),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        _internal.record("history", exc, f"{hint} within {timeout:g} s (history_timeout)")
        return
    except (OSError, ValueError) as exc:
        _internal.record("history", exc, hint)
        return
    why = _finished(done, done.stderr)
    if why:
        _internal.record("history", HistoryExportFailed(why), hint)


# A periodic export is off the exit path: it may take longer than history_timeout, up to this.
_PERIODIC_TIMEOUT = 300.0
# A day is closed once an export starts this long after its midnight. A compile that hits the
# recompile limit and the recompile_limit_hit that names the limit are logged together; a midnight
# between the two would otherwise close the compile's day before its limit is in the log.
CLOSING_MARGIN = datetime.timedelta(minutes=1)


def closed_by(started: datetime.datetime) -> datetime.date:
    """The last UTC day an export that started at ``started`` (aware, UTC) closes: every row of it
    is in the log by then."""
    return (started - CLOSING_MARGIN).date() - datetime.timedelta(days=1)


class PeriodicExport:
    """The thread that exports the session's log every ``every`` seconds while it runs.

    ``closed`` is the last UTC day whose rows are all in the lake: :func:`closed_by` the start of an
    export that succeeded (a day's events are in the log once it is over, less
    :data:`CLOSING_MARGIN`). :meth:`stop` ends the thread and any export in flight, so the
    end-of-session export is the last to write the session's files.
    """

    def __init__(self, log: Path, uri: str, every: float, timeout: float, redact: bool) -> None:
        self.log, self.uri, self.every, self.timeout, self.redact = log, uri, every, timeout, redact
        self.closed: datetime.date | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by now() and stop(): the thread's wait ends early
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()  # the thread starts a child, stop() kills it
        self._thread = threading.Thread(target=self._run, name="recompprof-history", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def now(self) -> None:
        """Export at once rather than at the period's end (SIGTERM where the process goes on); safe
        in a signal handler: it only sets an event."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            if self._child is not None and self._child.poll() is None:
                self._child.kill()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.every)
            self._wake.clear()
            if self._stop.is_set():
                return
            with _internal.contain("history", "a periodic export to the lake failed"):
                self._export_once()

    def _export_once(self) -> None:
        closes = closed_by(datetime.datetime.now(datetime.timezone.utc))
        with self._lock:
            if self._stop.is_set():
                return
            self._child = subprocess.Popen(
                _command(self.log, self.redact, self.closed),
                env=_environment(self.uri, self.redact),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        child = self._child
        try:
            _, err = child.communicate(timeout=max(self.timeout, _PERIODIC_TIMEOUT))
        except subprocess.TimeoutExpired as exc:
            child.kill()
            child.communicate()
            _internal.record(
                "history", exc, f"{_hint(self.log, self.uri)} within {exc.timeout:g} s"
            )
            return
        if self._stop.is_set():
            return  # killed by stop(): the end-of-session export writes instead
        why = _finished(child, err)
        if why:
            _internal.record("history", HistoryExportFailed(why), _hint(self.log, self.uri))
            return
        self.closed = closes
