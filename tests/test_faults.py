"""Faults around a real training job: full or vanishing sinks, the process being stopped, torch internals changed.

Each fault must leave training's results exactly as without it, be logged once with what to do, be
counted in ``recompprof_internal_errors_total``, and never raise into the job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from needs import starts
from otlp_receiver import OtlpReceiver
from recorded_runs import ROOT, clean_env

import recompprof
from recompprof import _internal
from recompprof._eventlog import writer as eventlog
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile, SessionEnd
from recompprof.testing import raise_internal_errors

# A small job with a size recompile every step for the first three steps; prints its final weights.
TRAIN = """
import contextlib, json, logging, sys, torch, recompprof
from prometheus_client import generate_latest
messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("recompprof").addHandler(handler)

def train(**settings):
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(lambda x: model(x).pow(2).mean(), backend="eager")
    with (recompprof.attach(**settings) if settings else contextlib.nullcontext()) as session:
        for i in range(8):
            step(torch.randn(4 + i % 3, 8)).backward()
            opt.step()
            opt.zero_grad()
    return model.weight.detach().clone(), session

baseline, _ = train()
weights, session = train(run_dir=sys.argv[1], exporters=["prometheus"], prometheus_mode="textfile",
                         prometheus_textfile_dir=sys.argv[2], prometheus_push_interval=0.1)
print(json.dumps({"same_weights": torch.equal(baseline, weights), "errors": session.snapshot().internal_errors,
                  "exposition": generate_latest(session.exporters[0].registry).decode(), "messages": messages}))
"""


@contextlib.contextmanager
def full_filesystem(where: Path) -> Iterator[tuple[Path, object]]:
    """A directory with no free space: a filled 64 KiB tmpfs where mounting works (root), else RLIMIT_FSIZE=0."""
    where.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    if not mounted:

        def no_file_growth() -> None:
            signal.signal(
                signal.SIGXFSZ, signal.SIG_IGN
            )  # writes fail with EFBIG instead of killing the process
            resource.setrlimit(
                resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1])
            )

        yield where, no_file_growth
        return
    try:
        for sub in ("run", "textfile"):
            (where / sub).mkdir()
        with contextlib.suppress(OSError), open(where / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield where, None
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.workload
def test_full_run_and_textfile_directories_never_stop_training(tmp_path: Path) -> None:
    """With no space left for the event log and the textfile, training ends with the same weights; each sink is logged once and counted."""
    with full_filesystem(tmp_path / "full") as (full, preexec):
        proc = subprocess.run(
            [sys.executable, "-c", TRAIN, str(full / "run"), str(full / "textfile")],
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=ROOT,
            timeout=120,
            check=False,
            preexec_fn=preexec,
        )  # type: ignore[arg-type]
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["same_weights"]
    for component in ("eventlog", "prometheus.textfile"):
        assert result["errors"].get(component, 0) >= 1, result["errors"]
        assert (
            f'recompprof_internal_errors_total{{component="{component}",rank="0"}}'
            in result["exposition"]
        )
        logged = [m for m in result["messages"] if f"internal error in {component} " in m]
        assert len(logged) == 1 and "free space" in logged[0], result["messages"]
    assert (
        "Traceback" not in proc.stderr.split("internal error in")[0]
    )  # nothing escaped before the first warning


def test_event_log_deleted_while_running_is_reopened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting the live event log is noticed on the next check, logged once with advice, counted, and a new log is started.

    The check runs at most once a second (tests/test_eventlog.py times that); here it runs on every event.
    """
    monkeypatch.setattr(eventlog, "REOPEN_CHECK_SECONDS", 0.0)
    caplog.set_level(logging.WARNING, logger="recompprof")
    fns = [
        torch.compile(f, backend="eager")
        for f in (lambda x: x * 2, lambda x: x + 1, lambda x: x - 1)
    ]
    with recompprof.attach(run_dir=tmp_path) as session:
        fns[0](torch.ones(2))
        assert session.event_log_path is not None
        session.event_log_path.unlink()
        fns[1](torch.ones(2))
        session.event_log_path.unlink()
        fns[2](torch.ones(2))
    events = list(read_file(session.event_log_path))
    assert [e.kind for e in events] == [
        "compile_start",
        "compile",
        "session_end",
    ]  # the last compile, from its start
    assert events[-1].internal_errors["eventlog.deleted"] == 2  # type: ignore[union-attr]
    assert session.snapshot().internal_errors == {"eventlog.deleted": 2}
    warnings = [r.getMessage() for r in caplog.records if "eventlog.deleted" in r.getMessage()]
    assert len(warnings) == 1 and "do not clean up a live run directory" in warnings[0]


# A job that trains, says so, and waits to be stopped; the final step count only reaches the sinks at exit.
STOPPABLE = """
import os, signal, sys, time, torch, recompprof
# A job whose Ctrl-C works: a runner started in the background by a shell hands its children SIGINT
# ignored (Python then keeps it ignored), and a job that cannot be stopped measures nothing here.
signal.signal(signal.SIGINT, signal.default_int_handler)
style = sys.argv[1]
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = torch.compile(lambda x: model(x).pow(2).mean(), backend="eager")

def train():
    for i in range(20):
        step(torch.randn(4 + min(i, 2), 8)).backward()
        opt.step()
        opt.zero_grad()
        time.sleep(0.05 if i >= 3 else 0)
    print("TRAINING DONE", flush=True)
    time.sleep(300)

if style == "context":
    with recompprof.attach():
        train()
elif style == "plain":
    recompprof.attach()
    train()
else:  # "none": the same job without recompprof, for the machine's own exit time
    train()
"""


def _stop(
    proc: subprocess.Popen[str], signum: int, before: Callable[[], None] = lambda: None
) -> float:
    """Wait for the job to say it trained, send it `signum`, and return the seconds it took to exit.

    The wait is long (300 s, still below the 600 s span-export delay the jobs set, so a timer can never
    pass for the stop): the bound is asserted by the caller against the machine's own pace.
    """
    assert proc.stdout is not None
    assert "TRAINING DONE" in proc.stdout.readline()
    time.sleep(0.3)
    before()
    started = time.monotonic()
    proc.send_signal(signum)
    try:
        proc.wait(300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return time.monotonic() - started


def _assert_no_spans_yet(receiver: OtlpReceiver) -> None:
    assert not receiver.spans  # the span queue only drains at exit


@pytest.fixture(scope="module")
@starts("workload")
def plain_exit_seconds() -> float:
    """How long this machine, loaded as it is now, takes to exit the same job without recompprof on Ctrl-C.

    Interpreter teardown of a torch process is most of a stopped job's exit time, and it grows with the
    machine's load (30 s and more at load 9): a fixed bound measured the machine, not recompprof.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPABLE, "none"],
        env=clean_env(RECOMPPROF_ATTACH="0"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return _stop(proc, signal.SIGINT)


@pytest.mark.workload
@pytest.mark.parametrize(
    ("signum", "style"),
    [(signal.SIGTERM, "plain"), (signal.SIGINT, "context"), (signal.SIGINT, "plain")],
)
def test_stop_signal_flushes_every_sink_within_a_bound(
    tmp_path: Path, plain_exit_seconds: float, signum: int, style: str
) -> None:
    """SIGTERM or Ctrl-C writes session_end, the final textfile and every span at once, with or without a context manager.

    "At once": within 10 s, or on a loaded machine within 3x the time the same job takes to exit without
    recompprof (plus 5 s); the sinks' own timers (1 h, 10 min) would take far longer.
    """
    textdir, run_dir = tmp_path / "textfile", tmp_path / "run"
    with OtlpReceiver() as receiver:
        env = clean_env(
            RECOMPPROF_ATTACH="0",
            RECOMPPROF_RUN_DIR=str(run_dir),
            RECOMPPROF_EXPORTERS="prometheus,otel",
            RECOMPPROF_PROMETHEUS_MODE="textfile",
            RECOMPPROF_PROMETHEUS_TEXTFILE_DIR=str(textdir),
            RECOMPPROF_PROMETHEUS_PUSH_INTERVAL="3600",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_BSP_SCHEDULE_DELAY="600000",
            PYTHONUNBUFFERED="1",
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", STOPPABLE, style],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        elapsed = _stop(proc, signum, before=lambda: _assert_no_spans_yet(receiver))
        stderr = proc.stderr.read() if proc.stderr else ""
        bound = max(10.0, 3 * plain_exit_seconds + 5)
        assert elapsed < bound, (
            f"took {elapsed:.1f}s to exit (without recompprof: {plain_exit_seconds:.1f}s)"
        )
        assert proc.returncode in (-signum, 128 + signum, 1), stderr
        events = list(read_file(next(run_dir.glob("*.jsonl"))))
        compiles = [e for e in events if isinstance(e, Compile) and not e.backward]
        assert isinstance(events[-1], SessionEnd) and events[-1].totals["steps"] == 20
        roots = [s for s in receiver.spans if s["name"] == "torch_compile.frame"]
        assert (
            len(roots) == len([e for e in events if isinstance(e, Compile)]) and len(compiles) >= 2
        )
    text = next(textdir.glob("*.prom")).read_text()
    assert 'torch_compile_training_step{rank="0"} 20.0' in text  # written only by the final flush
    assert "recompprof" not in stderr.split("KeyboardInterrupt")[0].replace("recompprof.attach", "")


# -- torch internals missing or changed ---------------------------------------------------------------


def _train_steps(fn: object, steps: int = 3) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(lambda x: model(x).sum(), backend="eager")
    for i in range(steps):
        compiled(torch.ones(2 + i, 4)).backward()
        opt.step()
        opt.zero_grad()
    return model.weight.detach().clone()


@pytest.mark.parametrize(
    ("missing", "signal_name"),
    [
        ([("torch.optim.optimizer", "register_optimizer_step_post_hook")], "optimizer_steps"),
        # compile records: the unconditional hand-off, and the log call it falls back to
        (
            [
                ("torch._dynamo.utils", "add_compilation_metrics_to_chromium"),
                ("torch._dynamo.utils", "log_compilation_event"),
            ],
            "compile_metrics",
        ),
    ],
)
def test_missing_torch_internal_turns_its_signal_off(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    missing: list[tuple[str, str]],
    signal_name: str,
) -> None:
    """Without the torch internals a signal is read from, attach succeeds, names the signal off and why, and training is unchanged."""
    expected = _train_steps(None)
    torch._dynamo.reset()
    for module, attr in missing:
        monkeypatch.delattr(
            sys.modules[module] if module in sys.modules else __import__(module, fromlist=["x"]),
            attr,
        )
    attr = missing[-1][1]
    caplog.set_level(logging.INFO, logger="recompprof")
    with recompprof.attach(run_dir=tmp_path) as session:
        weights = _train_steps(None)
    assert torch.equal(weights, expected)
    assert session.signals[signal_name] is False
    assert attr in session.signals_off[signal_name]
    attached = [r.getMessage() for r in caplog.records if "recompprof attached" in r.getMessage()]
    assert (
        len(attached) == 1
        and f"off: {signal_name} (" in attached[0]
        or f"; {signal_name} (" in attached[0]
    )


def test_altered_guard_failures_keep_the_compile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """guard_failures of an unexpected shape cost reasons only: every compile is still recorded."""
    from torch._dynamo import utils

    raise_internal_errors(False)
    with recompprof.attach(run_dir=tmp_path) as session:
        monkeypatch.setattr(
            utils, "guard_failures", ["not", "a", "dict"]
        )  # after attach: the reader is live
        weights = _train_steps(None)
    compiles = [
        e for e in read_file(session.event_log_path) if isinstance(e, Compile) and not e.backward
    ]  # type: ignore[arg-type]
    assert [c.is_recompile for c in compiles] == [False, True] and torch.isfinite(weights).all()
    assert "torch.guard_failures" in _internal.counts()


def test_unreadable_recompile_limit_is_counted() -> None:
    """A recompile limit torch's config no longer holds as a number is counted as an internal error (raised in
    strict mode) and, in production, reported as unknown (None) without raising into the job."""
    from torch._dynamo import config

    from recompprof._torch.limits import configured_limit, configured_limits
    from recompprof._torch.versions import torch_info

    with config.patch(torch_info().limit_config_name, "no longer a number"):
        with pytest.raises(ValueError):
            configured_limit("recompile_limit")
        with raise_internal_errors(False):
            limits = configured_limits()
    assert limits["recompile_limit"] is None and limits["accumulated_recompile_limit"] is not None
    assert _internal.counts()["torch.limits"] == 2


def test_optimizer_hook_that_raises_is_contained(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A register_optimizer_step_post_hook that raises turns step counting off; session.step() still counts."""
    from torch.optim import optimizer

    def broken(hook: object) -> object:
        raise TypeError("signature changed")

    raise_internal_errors(False)
    monkeypatch.setattr(optimizer, "register_optimizer_step_post_hook", broken)
    with recompprof.attach(run_dir=tmp_path) as session:
        _train_steps(None)
        assert session.step() == 1
    assert (
        session.signals["optimizer_steps"] is False
        and "signature changed" in session.signals_off["optimizer_steps"]
    )
    assert _internal.counts()["torch.optimizer_steps"] == 1


@pytest.mark.parametrize(
    ("module", "attr", "mechanism"),
    [
        ("torch._C._dynamo.eval_frame", "_debug_get_cache_entry_list", "unlimited"),
        ("torch._dynamo", "set_stance", "evict"),
    ],
)
def test_profile_mode_without_its_torch_hooks_still_attaches(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    module: str,
    attr: str,
    mechanism: str,
) -> None:
    """Profile mode missing the callback factory falls back to lifting the limit, and missing set_stance keeps the job's backend; both say so."""
    monkeypatch.delattr(sys.modules[module], attr)
    limit = torch._dynamo.config.recompile_limit
    with recompprof.attach(run_dir=tmp_path, mode="profile") as session:
        weights = _train_steps(None)
    assert torch.isfinite(weights).all()
    assert torch._dynamo.config.recompile_limit == limit
    start = next(iter(read_file(session.event_log_path)))  # type: ignore[arg-type]
    assert start.profile_mechanism == mechanism  # type: ignore[union-attr]
    assert session.signals["profile_backend"] is (attr != "set_stance")
    assert attr in session.signals_off.get("profile_backend", attr)
    compiles = [
        e for e in read_file(session.event_log_path) if isinstance(e, Compile) and not e.backward
    ]  # type: ignore[arg-type]
    assert len(compiles) == 2


def test_internal_errors_are_visible_in_snapshot_and_metrics(tmp_path: Path) -> None:
    """Internal errors counted while training show in session.snapshot() and in the scraped recompprof_internal_errors_total."""
    from prometheus_client import generate_latest

    raise_internal_errors(False)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with recompprof.attach(
        run_dir=blocker / "run", exporters=["prometheus"], prometheus_port=0
    ) as session:
        _train_steps(None)
        text = generate_latest(session.exporters[0].registry).decode()  # type: ignore[attr-defined]
    assert session.snapshot().internal_errors["eventlog"] == 1
    assert 'recompprof_internal_errors_total{component="eventlog",rank="0"} 1.0' in text
    assert os.environ.get("RECOMPPROF_RUN_DIR")  # the suite's own run dir setting was not disturbed


def test_a_sink_that_raises_is_counted_and_the_others_still_get_every_event(
    tmp_path: Path,
) -> None:
    """A listener that raises on every event costs the job nothing: training ends with the same weights,
    each failure is counted under ``listener``, and the event log (a sink beside it) holds every compile."""
    raise_internal_errors(False)
    expected = _train_steps(None)
    torch._dynamo.reset()  # the session's steps compile again
    seen: list[str] = []

    def broken(event: object) -> None:
        seen.append(type(event).__name__)
        raise RuntimeError("a listener's own bug")

    with recompprof.attach(run_dir=tmp_path) as session:
        session.add_listener(broken)
        weights = _train_steps(None)
    assert torch.equal(weights, expected)
    assert session.snapshot().internal_errors["listener"] == len(seen) > 0
    compiles = [e for e in read_file(session.event_log_path) if isinstance(e, Compile)]
    assert len(compiles) == seen.count("Compile") >= 2
