"""Folding a large run in forked worker processes: what ``report``, ``check`` and ``diff`` share.

Decoding and folding a million events is CPU-bound Python, so a large run is split into independent
tasks (a file, a rank, a run) folded in up to one process per CPU. Workers are forked: they inherit
the event streams (and the task function) instead of having them pickled, and hand back only their
result and what their reads recorded (``EventStream.take_progress``), which the streams here absorb in
task order, so ``finish`` reads nothing twice and counts every skipped line once.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

# Runs whose logs total less than this are folded in this process: a second process costs more than it saves.
PARALLEL_MIN_BYTES = 64 * 2**20


def cpus() -> int:
    """The CPUs this process may run on."""
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def default_workers(streams: Sequence[Any], tasks: int) -> int:
    """Processes worth forking for ``tasks`` over ``streams``: one per CPU (at most one per task) for
    logs of at least :data:`PARALLEL_MIN_BYTES`, else 1 (this process)."""
    try:
        size = sum(path.stat().st_size for stream in streams for path in stream.files)
    except (AttributeError, OSError):  # not streams of files, or one vanished: reading will say so
        return 1
    return min(cpus(), tasks) if size >= PARALLEL_MIN_BYTES else 1


def can_fork(streams: Sequence[Any]) -> bool:
    """The streams record their reads for a worker to hand back (``recompprof._analysis.runs.EventStream``)."""
    return all(hasattr(stream, "take_progress") and hasattr(stream, "absorb") for stream in streams)


# what forked workers run, and on which streams
_JOB: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def map_forked(
    function: Callable[[Any], Any], streams: Sequence[Any], tasks: Sequence[Any], workers: int
) -> list[Any]:
    """``function(task)`` for every task, in up to ``workers`` forked processes, results in task order.

    ``function`` reads ``streams``; each absorbs what the workers' reads recorded. An exception a task
    raises is raised here.
    """
    global _JOB
    _JOB = (function, streams)
    # What the workers inherit stays out of their garbage collections: traversing it would cost time
    # and copy every page it touches.
    gc.freeze()
    try:
        # SIGTERM is held back from fork to the worker's initializer: a SIGTERM that ``Pool.terminate``
        # sends in between would run a handler inherited from this process, which returns, and the
        # worker would wait on the task queue for good, with this process joining it (a CI run hung
        # so, on a task that raised at once). The threads the pool starts inherit the mask too.
        held = _hold_sigterm()
        try:
            pool = multiprocessing.get_context("fork").Pool(
                min(workers, len(tasks)), initializer=_worker_signals
            )
        finally:
            _release_sigterm(held)
        try:
            done = pool.map(_run, tasks, chunksize=1)
            pool.close()  # the workers exit once the queue is drained: no signal needed
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()
    finally:
        gc.unfreeze()
        _JOB = None
    results = []
    for result, progress in done:
        for stream, read in zip(streams, progress, strict=True):
            stream.absorb(read)
        results.append(result)
    return results


def _worker_signals() -> None:
    """A worker ends on SIGTERM (``Pool.terminate``): a handler inherited from the parent (an attached
    session's, or the job's own) would run there and could return, leaving the worker blocked on the
    task queue and the parent waiting for it forever. A SIGTERM sent since the fork was held back
    (:func:`_hold_sigterm`) and ends the worker here."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _hold_sigterm() -> bool:
    """SIGTERM blocked in this thread (and so in what it forks and the threads it starts); whether it
    was unblocked before. A signal sent to the process meanwhile waits, or goes to another thread."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    return signal.SIGTERM not in before


def _release_sigterm(held: bool) -> None:
    if held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _run(task: Any) -> tuple[Any, list[Any]]:
    assert _JOB is not None  # set by map_forked before the fork
    function, streams = _JOB
    for stream in streams:  # what this worker read for its earlier tasks went back with them
        stream.take_progress()
    result = function(task)
    return result, [stream.take_progress() for stream in streams]
