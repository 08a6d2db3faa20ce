"""Each distinct real run recorded once per test session, and shared by every test that reads it.

A recording is one workload process (``python script *args`` with some environment) run with its
recorders on: recompprof's event log in ``run/``, ``TORCH_TRACE`` in ``trace/`` where asked, its
stdout and stderr (``TORCH_LOGS`` goes there). Many test files read the same run (the CPU training
job with twelve steps, say); recording it again for each of them cost a job's time each and proved
nothing new. Here a run is keyed by what decides what it records:

- the workload: its script, arguments, extra environment and the time it may take;
- the code that runs: every source file of recompprof, its exporters and ``tests/workloads/``;
- the interpreter and every installed distribution's version (torch, transformers, ...);
- the variables of the test process that the workload inherits and torch reads (``TORCH*``, ...).

The first test that needs a run records it under a lock; the others (in this process or in another
pytest-xdist worker) wait for it and take a copy (``copy_into``), so a test may change its copy as it
likes. A run that fails is recorded once too: every test that needs it fails with its output.

Recordings live for one test session, in its temporary directory. ``pytest --recordings=DIR`` keeps
them in DIR and reuses them in later sessions while the key matches (the quick tier does this); a
change to any of the above records afresh. Delete DIR to re-record everything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# Sources whose change changes what a recording holds (the workloads import tests/workloads/ only).
_SOURCES = (ROOT / "recompprof", ROOT / "exporters", TESTS / "workloads")
# Variables of the test process that reach a workload and change what torch does.
_INHERITED = ("TORCH", "OMP_", "MKL_", "CUDA_", "PYTHONHASHSEED")
# A failed recording is reused only by the session that made it; a later session tries again.
_SESSION = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"{os.getpid()}-{time.time_ns()}"


@dataclasses.dataclass(frozen=True)
class Workload:
    """One real run: ``python script *args`` in a directory of its own (its working directory), with
    ``env`` added to a clean environment (``clean_env``). ``args`` name files relative to that
    directory; an ``env`` value names it as ``{here}`` (``RECOMPPROF_RUN_DIR={here}/run``)."""

    script: Path
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    timeout: float = 600.0

    def describe(self) -> dict[str, object]:
        script = self.script.resolve()
        return {
            # by place (frames name the file) and by content (a script a test writes itself)
            "script": str(script.relative_to(ROOT) if script.is_relative_to(ROOT) else script),
            "script_sha256": hashlib.sha256(script.read_bytes()).hexdigest(),
            "args": list(self.args),
            "env": sorted(self.env),
            "timeout": self.timeout,
        }


@dataclasses.dataclass(frozen=True)
class Recording:
    """A finished workload process: its directory, output and exit status."""

    where: Path
    stdout: str
    stderr: str
    returncode: int
    seconds: float

    @property
    def run_dir(self) -> Path:
        return self.where / "run"

    @property
    def trace_dir(self) -> Path:
        return self.where / "trace"

    def failure(self, workload: Workload) -> str:
        """Why this recording cannot be used: the command, its exit status and its output's end."""
        command = " ".join([workload.script.name, *workload.args])
        return (
            f"recording of `{command}` exited {self.returncode} after {self.seconds:.0f} s "
            f"(recorded once this session, {self.where}):\n"
            f"--- stderr (end)\n{self.stderr[-4000:]}\n--- stdout (end)\n{self.stdout[-1000:]}"
        )


_PREFIX = 10  # characters of the fingerprint that start every key

_root: Path | None = None
_requests: Path | None = None
# Called with each workload a test asks for, recorded or not (tests/needs.py notes it).
watchers: list[Callable[[Workload], None]] = []


# What the test process's own environment must not hand a job: recompprof's and torch's recorders, and
# the runner's terminal size (pytest-xdist's workers set COLUMNS=80 and LINES=24).
_NOT_INHERITED = ("TORCH_TRACE", "TORCH_LOGS", "COLUMNS", "LINES")


# What every job gets unless its test says otherwise: no linger at detach. A job whose endpoint a test
# scraped would otherwise wait ~20 s at its end for a next scrape that never comes (tests/conftest.py
# does the same in-process; tests/test_prometheus_linger.py is where the linger itself is tested).
JOB_DEFAULTS = {"RECOMPPROF_PROMETHEUS_LINGER_SECONDS": "0"}


def clean_env(**extra: str) -> dict[str, str]:
    """The environment with no RECOMPPROF_*, TORCH_TRACE, TORCH_LOGS or terminal size leaking in, the
    ``JOB_DEFAULTS``, and ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RECOMPPROF_") and k not in _NOT_INHERITED
    }
    return {**env, **JOB_DEFAULTS, **extra}


def configure(root: Path, *, keep: bool, requests: Path | None = None) -> None:
    """Where this session's recordings go, and where each request for one is logged (``requests``, a
    file of this session's: ``summary`` reads it). In a directory kept across sessions (``keep``),
    recordings made by other code or in another environment are removed: they can never be used."""
    global _root, _requests
    root.mkdir(parents=True, exist_ok=True)
    _root, _requests = root, requests
    if keep:
        current = fingerprint()[:_PREFIX]
        for old in root.iterdir():
            if old.is_dir() and not old.name.startswith(current):
                shutil.rmtree(old, ignore_errors=True)
                Path(f"{old}.lock").unlink(missing_ok=True)


@functools.cache
def fingerprint() -> str:
    """What every recording's key shares: the code that runs and the environment it runs in."""
    digest = hashlib.sha256()
    for source in _SOURCES:
        for path in sorted(source.rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    versions = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
    )
    inherited = sorted((k, v) for k, v in os.environ.items() if k.startswith(_INHERITED))
    digest.update(json.dumps([sys.version, versions, inherited]).encode())
    return digest.hexdigest()


def key(workload: Workload) -> str:
    """The recording's directory name: what all keys share, then this workload's own part."""
    described = json.dumps(workload.describe(), sort_keys=True)
    own = hashlib.sha256((fingerprint() + described).encode()).hexdigest()
    return f"{fingerprint()[:_PREFIX]}-{own[:16]}"


def recorded(workloads: Sequence[Workload]) -> list[Recording]:
    """The recordings of ``workloads``, recording those this session (or a kept directory) lacks.

    Missing ones run side by side, each its own process, as a fleet's jobs would."""
    if _root is None:
        raise RuntimeError("recordings.configure() was not called (tests/conftest.py does it)")
    for workload in workloads:
        for watcher in watchers:
            watcher(workload)
    keys = [key(w) for w in workloads]
    with _locked(sorted(set(keys))):
        found = {k: _load(_root / k) for k in keys}
        missing = {k: w for k, w in zip(keys, workloads) if found[k] is None}
        for k, recording in zip(missing, _run(list(missing.items()))):
            found[k] = recording
    if _requests is not None:
        with open(_requests, "a") as log:  # one short line per write: appends do not interleave
            for k in keys:
                log.write(f"{k} {'recorded' if k in missing else 'reused'}\n")
    return [found[k] for k in keys]  # type: ignore[misc]


def summary(requests: Path, root: Path) -> str | None:
    """How many real runs a session recorded (and their job time) for how many requests."""
    try:
        lines = [line.split() for line in requests.read_text().splitlines()]
    except OSError:
        return None
    made = {k for k, how in lines if how == "recorded"}
    seconds = sum(json.loads((root / k / "result.json").read_text())["seconds"] for k in made)
    return (
        f"recordings: {len(made)} real run(s) recorded ({seconds:.0f} s of job time) for "
        f"{len(lines)} request(s) from tests; {len({k for k, _ in lines})} distinct"
    )


def record_one(workload: Workload) -> Recording:
    return recorded([workload])[0]


def copy_into(recording: Recording, where: Path) -> Recording:
    """A copy of ``recording``'s files in ``where`` (created), for a test to read or change."""
    shutil.copytree(recording.where, where, dirs_exist_ok=True, symlinks=True)
    (where / "result.json").unlink(missing_ok=True)
    return dataclasses.replace(recording, where=where)


@contextlib.contextmanager
def _locked(keys: list[str]) -> Iterator[None]:
    """Hold each key's lock file (in a fixed order, so two workers never wait on each other)."""
    assert _root is not None
    with contextlib.ExitStack() as stack:
        for k in keys:
            handle = stack.enter_context(open(_root / f"{k}.lock", "w"))
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _load(where: Path) -> Recording | None:
    """The recording in ``where``, if one finished there and may be used by this session."""
    try:
        result = json.loads((where / "result.json").read_text())
    except (OSError, ValueError):
        return None
    if result["returncode"] != 0 and result["session"] != _SESSION:
        return None
    return Recording(
        where,
        (where / "stdout.txt").read_text(),
        (where / "stderr.txt").read_text(),
        result["returncode"],
        result["seconds"],
    )


def _run(todo: list[tuple[str, Workload]]) -> list[Recording]:
    assert _root is not None
    started = []
    for k, workload in todo:
        where = _root / k
        shutil.rmtree(where, ignore_errors=True)  # a run killed half-way in an earlier session
        where.mkdir()
        env = clean_env(**dict(workload.env))
        env = {name: value.replace("{here}", str(where)) for name, value in env.items()}
        out = open(where / "stdout.txt", "w+")  # noqa: SIM115
        err = open(where / "stderr.txt", "w+")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(workload.script), *workload.args],
            env=env,
            cwd=where,
            stdout=out,
            stderr=err,
            text=True,
        )
        started.append((where, workload, proc, out, err, time.monotonic()))
    done = []
    for where, workload, proc, out, err, began in started:
        try:
            proc.wait(timeout=max(1.0, began + workload.timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            print(f"killed at the {workload.timeout:.0f} s timeout", file=err, flush=True)
        with out, err:
            out.seek(0)
            err.seek(0)
            recording = Recording(
                where, out.read(), err.read(), proc.returncode, time.monotonic() - began
            )
        result = {
            "returncode": recording.returncode,
            "seconds": round(recording.seconds, 3),
            "session": _SESSION,
            "workload": workload.describe(),
        }
        (where / "result.json").write_text(json.dumps(result, indent=1))
        done.append(recording)
    return done
