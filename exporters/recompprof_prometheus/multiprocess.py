"""Multiprocess mode: every rank mirrors its families into mmap files, local rank 0 serves them all.

prometheus_client's multiprocess mode cannot run custom collectors and picks its value class from
``PROMETHEUS_MULTIPROC_DIR`` when it is first imported, so instead of switching the whole process
into that mode this module writes the files ``MultiProcessCollector`` reads, directly, with the
absolute values of the same families the pull endpoint serves. Files are named by job (run id) and
rank, not pid (``counter_recompprof-<run id>-r3.db``): a restarted rank overwrites its own file instead
of leaving a dead pid's counters to be summed with the new ones, and two jobs given one directory
(a ``PROMETHEUS_MULTIPROC_DIR`` set for the whole cluster) never serve each other's ranks: local rank 0
serves its own job's files (:class:`JobCollector`) and warns once about the others'.

A rank's files belong to the live process that holds the lock ``recompprof-<run id>-r3.lock`` (a POSIX
record lock, released when that process ends, never inherited by its forked children). A second live
process claiming the same rank of the same job in the same directory (a run id reused) writes, removes
and serves nothing there, instead of clearing the first one's values.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import stat
import tempfile
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from recompprof.exporter import ConfigError

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from recompprof.exporter import Identity

log = logging.getLogger("recompprof")
ENV = "PROMETHEUS_MULTIPROC_DIR"
# Gauges here carry a rank label, so each series has one writer and "max" is simply its value.
GAUGE_MODE = "max"
# A recompprof file: kind, job key (absent in files of recompprof before job keys), rank.
_OURS = re.compile(
    r"^(counter|histogram|gauge_max)_recompprof-(?:([A-Za-z0-9.~-]+)-)?r(\d+)\.db(?:\.new)?$"
)
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")
_KEY_MAX = 96
_PREFIXES = {"counter": "counter", "gauge": f"gauge_{GAUGE_MODE}", "histogram": "histogram"}


def job_key(run_id: str) -> str:
    """``run_id`` as it appears in file names: letters, digits, ``.`` and ``-`` kept, any other character
    written ``~XX`` per UTF-8 byte (so two run ids never share a key; no ``_``, which
    ``MultiProcessCollector`` splits names on), a long one cut and completed by its hash."""
    key = "".join(
        c if c in _KEY_CHARS else "".join(f"~{b:02x}" for b in c.encode()) for c in run_id
    )
    if len(key) > _KEY_MAX:
        key = key[: _KEY_MAX - 17] + "~" + hashlib.sha256(run_id.encode()).hexdigest()[:16]
    return key


def directory(identity: Identity) -> Path:
    """``$PROMETHEUS_MULTIPROC_DIR``, else a per-user, per-run directory every local rank agrees on."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    safe_run = re.sub(r"[^A-Za-z0-9_.-]", "_", identity.run_id)
    return Path(tempfile.gettempdir()) / f"recompprof-prometheus-{os.getuid()}-{safe_run}"


def prepare(path: Path, identity: Identity) -> int:
    """Create ``path`` (0700) or check an existing one is a real directory we own, claim this rank's files,
    then clear stale ones; returns the descriptor holding the claim (:class:`MmapMirror` releases it).

    Each rank removes only its own files; local rank 0 also removes its job's files of ranks that are
    not on this node now (a previous, larger attempt) and that no live process holds. Nobody removes a
    live sibling's file, so there is no start-up race between ranks, nor another job's.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(
            f"recompprof: {ENV} {path} is not a directory (a symlink or file is not accepted)"
        )
    if st.st_uid != os.getuid():
        raise ConfigError(
            f"recompprof: {ENV} {path} belongs to uid {st.st_uid}, not to this user; "
            f"set {ENV} to a directory of your own"
        )
    if st.st_mode & stat.S_IWOTH:
        log.warning(
            "recompprof: %s %s is world-writable; other users can forge or hide metrics", ENV, path
        )
    job = job_key(identity.run_id)
    claim = _claim(path, job, identity.rank, identity.pid)
    first = identity.rank - identity.local_rank
    node_ranks = range(first, first + identity.local_world_size)
    try:
        for name in os.listdir(path):
            match = _OURS.match(name)
            if match is None or match.group(2) != job:  # not ours, or another job's
                continue
            rank = int(match.group(3))
            if rank == identity.rank or (
                identity.local_rank == 0 and rank not in node_ranks and not _held(path, job, rank)
            ):
                (path / name).unlink(missing_ok=True)
    except BaseException:
        os.close(claim)
        raise
    return claim


def _lock_path(path: Path, job: str, rank: int) -> Path:
    return path / f"recompprof-{job}-r{rank}.lock"  # not *.db: MultiProcessCollector never reads it


def _claim(path: Path, job: str, rank: int, pid: int) -> int:
    """Lock ``rank``'s files for this process, or raise ConfigError naming the live process that holds them."""
    fd = os.open(_lock_path(path, job, rank), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"recompprof: rank {rank}'s multiprocess metric files in {path} belong to live process "
            f"{holder}, so this process writes and serves none; two processes of run {job} claim rank "
            f"{rank}: give each job its own RECOMPPROF_RUN_ID (or {ENV})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(pid).encode(), 0)
    return fd


def _held(path: Path, job: str, rank: int) -> bool:
    """Whether a live process holds ``rank``'s files (tested without taking the lock)."""
    try:
        fd = os.open(_lock_path(path, job, rank), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        # F_GETLK through lockf is not exposed; a shared test lock on a read-only descriptor conflicts only
        # with the holder's exclusive one. Closing it releases nothing else: this process holds no lock there.
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


class JobCollector(Collector):
    """Serves the files of one job (``run_id``) in ``path``, and those of other programs; another job's
    recompprof files are left out, and said once per job found (a warning naming the directory)."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._job = job_key(run_id)
        self._told: set[str] = set()
        self._lock = threading.Lock()  # scrapes run on several handler threads

    def collect(self) -> Iterable[Metric]:
        served, foreign = self._files()
        with self._lock:
            new = foreign.keys() - self._told
            self._told |= new
        if new:
            log.warning(
                "recompprof: %s %s holds %d metric files of %d other job%s (run %s), not this "
                "job's (run %s); local rank 0 serves only its own job's ranks. Give each job its "
                "own %s, or leave it unset (each run then gets a directory of its own)",
                ENV,
                self.path,
                sum(foreign[job] for job in new),
                len(new),
                "" if len(new) == 1 else "s",
                ", ".join(sorted(new)),
                self._job,
                ENV,
            )
        return MultiProcessCollector.merge(served, accumulate=True)

    def _files(self) -> tuple[list[str], Counter[str]]:
        """The ``*.db`` files to serve, and the other jobs' files counted by job key (``?``: a file of
        recompprof before job keys, whose job is unknown)."""
        served: list[str] = []
        foreign: Counter[str] = Counter()
        for name in sorted(os.listdir(self.path)):
            if not name.endswith(".db"):
                continue
            match = _OURS.match(name)
            if match is None or match.group(2) == self._job:
                served.append(str(self.path / name))
            else:
                foreign[match.group(2) or "?"] += 1
        return served, foreign


class MmapMirror:
    """Writes families into this rank's mmap files; only changed values are rewritten.

    An mmap file cannot forget a key, so when a series ends (the running compile's age, once the compile is
    over) its file is written anew beside it and renamed over it: a reader sees the old file or the new one,
    never a series the families no longer hold.
    """

    def __init__(self, path: Path, run_id: str, rank: int, claim: int | None = None) -> None:
        self.path = path
        self._job = job_key(run_id)
        self._rank = rank
        self._claim = claim  # the descriptor whose lock makes this rank's files ours; closed last
        self._files: dict[str, MmapedDict] = {}
        self._last: dict[
            str, dict[str, float]
        ] = {}  # by file prefix: each key's value as last written

    def _name(self, prefix: str) -> Path:
        return self.path / f"{prefix}_recompprof-{self._job}-r{self._rank}.db"

    def _file(self, prefix: str) -> MmapedDict:
        f = self._files.get(prefix)
        if f is None:
            f = self._files[prefix] = MmapedDict(str(self._name(prefix)))
        return f

    def write(self, families: list[Metric]) -> None:
        values = _values(families)
        for prefix in sorted(values.keys() | self._last.keys()):
            now, last = values.get(prefix, {}), self._last.setdefault(prefix, {})
            if last.keys() - now.keys():
                self._replace(prefix, now)
                continue
            for key, value in now.items():
                if last.get(key) != value:
                    self._file(prefix).write_value(key, value, 0.0)
                    last[key] = value

    def _replace(self, prefix: str, values: dict[str, float]) -> None:
        """Make ``prefix``'s file hold exactly ``values``, replacing it whole (rename is atomic)."""
        final = self._name(prefix)
        fresh_path = final.with_name(
            final.name + ".new"
        )  # not *.db: MultiProcessCollector never reads it
        fresh_path.unlink(missing_ok=True)
        fresh = MmapedDict(str(fresh_path))
        for key, value in values.items():
            fresh.write_value(key, value, 0.0)
        os.replace(fresh_path, final)
        old = self._files.pop(prefix, None)
        self._files[prefix] = fresh
        self._last[prefix] = dict(values)
        if old is not None:
            old.close()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        if self._claim is not None:
            os.close(self._claim)
            self._claim = None


def _values(families: list[Metric]) -> dict[str, dict[str, float]]:
    """Each sample of ``families`` as the mmap files hold it: by file prefix, then by mmap key."""
    values: dict[str, dict[str, float]] = {}
    for fam in families:
        prefix = _PREFIXES.get(fam.type)
        if prefix is None:
            continue
        file_values = values.setdefault(prefix, {})
        previous = 0.0
        for sample in fam.samples:
            if sample.name.endswith("_count") and fam.type == "histogram":
                continue  # the collector derives _count from the buckets
            value = sample.value
            if fam.type == "histogram" and sample.name.endswith("_bucket"):
                # The files hold per-bucket counts; the collector accumulates them again.
                value, previous = sample.value - previous, sample.value
            names, label_values = zip(*sorted(sample.labels.items())) if sample.labels else ((), ())
            file_values[
                mmap_key(fam.name, sample.name, list(names), list(label_values), fam.documentation)
            ] = value
    return values
