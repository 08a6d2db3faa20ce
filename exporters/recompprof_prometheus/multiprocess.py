"""Multiprocess mode: every rank mirrors its families into mmap files, local rank 0 serves them all.

prometheus_client's multiprocess mode cannot run custom collectors and picks its value class from
``PROMETHEUS_MULTIPROC_DIR`` when it is first imported, so instead of switching the whole process
into that mode this module writes the files ``MultiProcessCollector`` reads, directly, with the
absolute values of the same families the pull endpoint serves. Files are named by rank, not pid
(``counter_recompprof-r3.db``): a restarted rank overwrites its own file instead of leaving a dead
pid's counters to be summed with the new ones.

A rank's files belong to the live process that holds the lock ``recompprof-r3.lock`` (a POSIX record
lock, released when that process ends, never inherited by its forked children). A second live process
claiming the same rank in the same directory (two jobs sharing ``PROMETHEUS_MULTIPROC_DIR``, a run id
reused) writes, removes and serves nothing there, instead of clearing the first one's values.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.mmap_dict import MmapedDict, mmap_key

from recompprof.exporter import ConfigError

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from recompprof.exporter import Identity

log = logging.getLogger("recompprof")
ENV = "PROMETHEUS_MULTIPROC_DIR"
# Gauges here carry a rank label, so each series has one writer and "max" is simply its value.
GAUGE_MODE = "max"
_OURS = re.compile(r"^(counter|histogram|gauge_max)_recompprof-r(\d+)\.db(?:\.new)?$")
_PREFIXES = {"counter": "counter", "gauge": f"gauge_{GAUGE_MODE}", "histogram": "histogram"}


def directory(identity: Identity) -> Path:
    """``$PROMETHEUS_MULTIPROC_DIR``, else a per-user, per-run directory every local rank agrees on."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    safe_run = re.sub(r"[^A-Za-z0-9_.-]", "_", identity.run_id)
    return Path(tempfile.gettempdir()) / f"recompprof-prometheus-{os.getuid()}-{safe_run}"


def prepare(path: Path, identity: Identity) -> int:
    """Create ``path`` (0700) or check an existing one is a real directory we own, claim this rank's files,
    then clear stale ones; returns the descriptor holding the claim (:class:`MmapMirror` releases it).

    Each rank removes only its own files; local rank 0 also removes files of ranks that are not on
    this node now (a previous, larger job) and that no live process holds. Nobody removes a live
    sibling's file, so there is no start-up race between ranks.
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
    claim = _claim(path, identity.rank, identity.pid)
    first = identity.rank - identity.local_rank
    node_ranks = range(first, first + identity.local_world_size)
    try:
        for name in os.listdir(path):
            match = _OURS.match(name)
            if match is None:
                continue
            rank = int(match.group(2))
            if rank == identity.rank or (
                identity.local_rank == 0 and rank not in node_ranks and not _held(path, rank)
            ):
                (path / name).unlink(missing_ok=True)
    except BaseException:
        os.close(claim)
        raise
    return claim


def _lock_path(path: Path, rank: int) -> Path:
    return path / f"recompprof-r{rank}.lock"  # not *.db: MultiProcessCollector never reads it


def _claim(path: Path, rank: int, pid: int) -> int:
    """Lock ``rank``'s files for this process, or raise ConfigError naming the live process that holds them."""
    fd = os.open(_lock_path(path, rank), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"recompprof: rank {rank}'s multiprocess metric files in {path} belong to live process "
            f"{holder}, so this process writes and serves none; two processes claim rank {rank}: "
            f"give each job its own {ENV} or RECOMPPROF_RUN_ID"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(pid).encode(), 0)
    return fd


def _held(path: Path, rank: int) -> bool:
    """Whether a live process holds ``rank``'s files (tested without taking the lock)."""
    try:
        fd = os.open(_lock_path(path, rank), os.O_RDONLY)
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


class MmapMirror:
    """Writes families into this rank's mmap files; only changed values are rewritten.

    An mmap file cannot forget a key, so when a series ends (the running compile's age, once the compile is
    over) its file is written anew beside it and renamed over it: a reader sees the old file or the new one,
    never a series the families no longer hold.
    """

    def __init__(self, path: Path, rank: int, claim: int | None = None) -> None:
        self.path = path
        self._rank = rank
        self._claim = claim  # the descriptor whose lock makes this rank's files ours; closed last
        self._files: dict[str, MmapedDict] = {}
        self._last: dict[
            str, dict[str, float]
        ] = {}  # by file prefix: each key's value as last written

    def _name(self, prefix: str) -> Path:
        return self.path / f"{prefix}_recompprof-r{self._rank}.db"

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
