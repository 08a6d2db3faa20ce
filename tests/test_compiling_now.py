"""Compiling now: a ``compile_start`` for every compile, the running compile in ``Session.status()`` and in
``session_end.compiling`` when a session ends during a compile (real torch.compile, real processes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from folds import assert_same, figures
from held_compiles import HeldBackend, Model, held_compile
from otlp_receiver import OtlpReceiver, attributes, clear_otel_env
from prometheus_client.parser import text_string_to_metric_families
from servers import free_port, http_get
from slow_jobs import stop_during_recompile

import recompprof
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile, CompileStart, Running, SessionEnd

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"


def _wait(predicate, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := predicate()) is not None:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


@pytest.fixture
def held() -> Iterator[tuple[recompprof.Session, HeldBackend, threading.Thread]]:
    with held_compile() as value:
        yield value


def test_status_shows_the_running_compile_until_it_ends(held) -> None:  # type: ignore[no-untyped-def]
    """While a recompile runs, ``status().compiling`` names its frame, compile id and triggering guard
    failure with a growing age; once it ends, ``compiling`` is None."""
    session, backend, worker = held
    assert backend.entered.wait(60)
    first = session.status().compiling
    assert first is not None
    assert (first.frame.name, first.compile_id) == ("Model.forward", "0/1")
    assert (
        first.reason is not None
        and first.reason.category == "size"
        and first.reason.subject == "L['x']"
    )
    time.sleep(0.3)
    later = session.status().compiling
    assert (
        later is not None
        and later.started == first.started
        and later.seconds >= first.seconds + 0.25
    )
    backend.release.set()
    worker.join(60)
    assert session.status().compiling is None
    assert session.status().rank == 0


def test_compile_start_precedes_and_matches_its_compile(tmp_path: Path) -> None:
    """Every compile has a ``compile_start`` before it in the event log with the same frame (name and
    identity) and compile id; the recompile's start carries the reason that explains the finished
    compile, which keeps its reasons."""
    session = recompprof.attach()
    model = torch.compile(Model(), backend="eager", dynamic=False)
    model(torch.ones(4))
    model(torch.ones(6))
    session.detach()
    assert session.event_log_path is not None
    events = list(read_file(session.event_log_path))
    starts = [(i, e) for i, e in enumerate(events) if isinstance(e, CompileStart)]
    compiles = [(i, e) for i, e in enumerate(events) if isinstance(e, Compile)]
    assert (
        [s.compile_id for _, s in starts] == [c.compile_id for _, c in compiles] == ["0/0", "0/1"]
    )
    for (i, start), (j, done) in zip(starts, compiles, strict=True):
        assert i < j
        assert start.frame == done.frame and start.is_recompile == done.is_recompile
    assert starts[0][1].reason is None
    explaining = [r for r in compiles[1][1].reasons if r.explains_change]
    assert starts[1][1].reason == explaining[0]
    assert not session.status().compiling


def _without_starts(src: Path, dst: Path) -> None:
    dst.mkdir()
    for path in src.glob("*.jsonl"):
        lines = [
            line
            for line in path.read_text().splitlines(keepends=True)
            if '"compile_start"' not in line
        ]
        (dst / path.name).write_text("".join(lines))


def test_a_run_with_compile_starts_folds_to_the_same_report(tmp_path: Path) -> None:
    """``compile_start`` events change no count: a real run folds to the same report (but for knowing that
    the rank's log records compile starts), and ``report`` and ``check`` print the same, with and without them."""
    session = recompprof.attach()
    model = torch.compile(Model(), backend="eager", dynamic=False)
    for n in (4, 6, 8):
        model(torch.ones(n))
    session.detach()
    assert session.event_log_path is not None
    run = session.event_log_path.parent
    bare = tmp_path / "bare"
    _without_starts(run, bare)
    assert any('"compile_start"' in p.read_text() for p in run.glob("*.jsonl"))
    with_starts = build_report(read_file(session.event_log_path))
    without = build_report(read_file(bare / session.event_log_path.name))
    # Only what the starts tell: that the rank's log can say it ended with no compile running.
    assert (with_starts.sessions.records_starts, without.sessions.records_starts) == ({0}, set())
    with_figures, without_figures = figures(with_starts), figures(without)
    with_figures["sessions"]["records_starts"] = without_figures["sessions"]["records_starts"] = []
    assert_same(with_figures, without_figures)
    assert render_text(with_starts) == render_text(without)
    for command in (
        ["report", "--width", "100"],
        ["check", "--max-recompiles", "1", "--max-compile-seconds", "600"],
    ):
        outs = [
            subprocess.run(
                [sys.executable, "-m", "recompprof._cli.main", *command, str(d)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            for d in (run, bare)
        ]
        assert outs[0].returncode in (0, 1) and "compile" in outs[0].stdout, outs[
            0
        ].stderr  # it ran and read the run
        assert (outs[0].returncode, outs[0].stdout.replace(str(run), "RUN")) == (
            outs[1].returncode,
            outs[1].stdout.replace(str(bare), "RUN"),
        ), command


@pytest.mark.workload
def test_session_end_names_the_compile_running_at_sigterm(tmp_path: Path) -> None:
    """A job killed with SIGTERM during a slow recompile writes ``session_end.compiling``: the frame,
    compile id, start, how long it had run and the guard failure that triggered it."""
    run = tmp_path / "run"
    env = {
        **os.environ,
        "RECOMPPROF_RUN_DIR": str(run),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    }
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOADS / "slow_compile.py"), "300"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    start = stop_during_recompile(proc, run, held=1.0)
    ends = [
        json.loads(line)
        for p in run.glob("*.jsonl")
        for line in p.read_text().splitlines()
        if '"session_end"' in line
    ]
    assert len(ends) == 1, proc.stdout.read() if proc.stdout else ""
    end = SessionEnd.model_validate(ends[0])
    assert isinstance(end.compiling, Running)
    assert (end.compiling.frame, end.compiling.compile_id, end.compiling.started) == (
        start.frame,
        "0/1",
        start.time,
    )
    assert end.compiling.frame.name == "Model.forward"
    assert end.compiling.seconds >= 1.0
    assert end.compiling.reason is not None and end.compiling.reason.subject == "L['x']"


def test_session_end_has_no_compiling_after_a_finished_compile() -> None:
    """A session that ends between compiles writes ``session_end.compiling`` as None."""
    session = recompprof.attach()
    torch.compile(Model(), backend="eager")(torch.ones(2))
    session.detach()
    assert session.event_log_path is not None
    end = [e for e in read_file(session.event_log_path) if isinstance(e, SessionEnd)]
    assert len(end) == 1 and end[0].compiling is None


def _gauges(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = http_get(f"http://127.0.0.1:{port}/metrics").decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
        if f.name in ("torch_compile_compiling", "torch_compile_compile_running_seconds")
    }


def test_prometheus_gauges_show_the_running_compile() -> None:
    """Scraped from the real endpoint during a recompile: ``torch_compile_compiling`` is 1 and
    ``torch_compile_compile_running_seconds{frame}`` grows between scrapes; after it, 0 and no age series."""
    port = free_port()
    with held_compile(exporters=["prometheus"], prometheus_port=port) as (session, backend, worker):
        assert backend.entered.wait(60)
        first = _gauges(port)
        assert first["torch_compile_compiling"] == [({"rank": "0"}, 1.0)]
        [(labels, age)] = first["torch_compile_compile_running_seconds"]
        assert labels["rank"] == "0" and labels["frame"].startswith("Model.forward")
        time.sleep(0.5)
        [(_, later)] = _gauges(port)["torch_compile_compile_running_seconds"]
        assert later >= age + 0.4
        backend.release.set()
        worker.join(60)
        after = _gauges(port)
        assert after["torch_compile_compiling"] == [({"rank": "0"}, 0.0)]
        assert after["torch_compile_compile_running_seconds"] == []
        text = http_get(f"http://127.0.0.1:{port}/metrics").decode()
        assert (
            f'torch_compile_compiles_total{{frame="{labels["frame"]}",rank="0"}} 2.0' in text
        )  # the same frame label
        session.detach()


def _job_env(run: Path, **settings: str) -> dict[str, str]:
    env = {
        **os.environ,
        "RECOMPPROF_RUN_DIR": str(run),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    }
    env.pop("RECOMPPROF_STATUS_LINE", None)
    env.update({f"RECOMPPROF_{name.upper()}": value for name, value in settings.items()})
    return env


@pytest.mark.workload
def test_off_a_terminal_a_long_compile_is_logged_after_the_threshold_and_periodically(
    tmp_path: Path,
) -> None:
    """Piped stderr: a recompile running past ``compile_status_after`` is logged once then every
    ``compile_status_every`` seconds, naming rank, frame, trigger and age; the fast first compile is not."""
    proc = subprocess.run(
        [sys.executable, str(WORKLOADS / "slow_compile.py"), "3"],
        capture_output=True,
        text=True,
        timeout=180,
        env=_job_env(tmp_path / "run", compile_status_after="0.5", compile_status_every="1"),
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "compiling `" in line]
    assert 2 <= len(lines) <= 4, proc.stderr
    for line in lines:
        assert re.fullmatch(
            r"recompprof: rank 0 compiling `Model\.forward` \(recompile: size of `L\['x'\]` dim 0 "
            r"changed\), \d+ s",
            line,
        ), line
    ages = [int(line.rsplit(", ", 1)[1].split()[0]) for line in lines]
    assert ages == sorted(ages) and ages[-1] - ages[0] >= len(lines) - 2
    assert "\r" not in proc.stderr


@pytest.mark.workload
def test_recompprof_run_draws_a_status_line_on_a_terminal(tmp_path: Path) -> None:
    """``recompprof run`` on a terminal (a pty): while the slow recompile runs, one status line is redrawn in
    place (carriage return, erase line) with a growing age, and cleared when the compile ends; no log line."""
    import pty

    master, slave = pty.openpty()
    env = _job_env(tmp_path / "run")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "recompprof._cli.main",
            "run",
            "--run-dir",
            str(tmp_path / "run"),
            "--",
            sys.executable,
            str(WORKLOADS / "slow_compile.py"),
            "3",
        ],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the pty closes when the job exits
                break
            if not chunk:
                break
            out += chunk
        proc.wait(120)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    drawn = re.findall(
        r"\r\x1b\[Krank 0 compiling `Model\.forward` \(recompile: size of `L\['x'\]` dim 0 changed\), (\d+) s",
        text,
    )
    assert len(drawn) >= 2 and int(drawn[-1]) >= 2, text
    assert [int(a) for a in drawn] == sorted(int(a) for a in drawn)
    done = text.index("DONE")
    assert text.rfind("\r\x1b[K", 0, done) > text.rfind(
        "compiling `", 0, done
    )  # cleared before the job went on
    assert "recompprof: rank 0 compiling" not in text


def test_the_status_thread_stops_at_detach() -> None:
    """The status thread runs while the session is attached and is gone after detach."""
    session = recompprof.attach()
    assert any(t.name == "recompprof-compile-status" for t in threading.enumerate())
    session.detach()
    assert not any(t.name == "recompprof-compile-status" for t in threading.enumerate())


def test_the_status_thread_is_joined_at_detach_whatever_its_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a period the settings refuse (1e-20 s, forced past validation) while a long compile is logged, the
    status thread is still gone after detach, instead of spinning on its schedule and outliving the session."""
    from recompprof._capture import settings as settings_module

    load = settings_module.load
    monkeypatch.setattr(
        settings_module,
        "load",
        lambda **kw: load(**kw).model_copy(
            update={"compile_status_after": 0.0, "compile_status_every": 1e-20}
        ),
    )
    with held_compile() as (session, backend, worker):
        assert backend.entered.wait(60)
        time.sleep(
            0.5
        )  # the thread looks every 0.05 s: it has seen the running compile and logged it
        backend.release.set()
        worker.join(60)
        session.detach()
    assert not [t for t in threading.enumerate() if t.name == "recompprof-compile-status"]


def _otel_gauges(receiver: OtlpReceiver) -> list[dict[str, list[tuple[dict[str, object], float]]]]:
    """The two compiling gauges of each metrics export the receiver got, in order."""
    exports = []
    for req in list(receiver.metrics):
        got: dict[str, list[tuple[dict[str, object], float]]] = {
            "torch_compile.compiling": [],
            "torch_compile.compile_running": [],
        }
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name in got:
                        got[m.name] += [
                            (
                                attributes(p.attributes),
                                p.as_double if p.HasField("as_double") else p.as_int,
                            )
                            for p in m.gauge.data_points
                        ]
        exports.append(got)
    return exports


def test_otel_gauges_show_the_running_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """With otel_metrics, exports during a recompile carry ``torch_compile.compiling`` 1 and a growing
    ``torch_compile.compile_running`` for the frame; exports after it carry 0 and no age."""
    clear_otel_env(monkeypatch)
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
        with held_compile(exporters=["otel"], otel_metrics=True) as (session, backend, worker):
            assert backend.entered.wait(60)
            during = _wait(
                lambda: (
                    (e := [x for x in _otel_gauges(receiver) if x["torch_compile.compile_running"]])
                    and len(e) >= 2
                    and e
                    or None
                ),
                30,
            )
            assert all(x["torch_compile.compiling"] == [({"rank": "0"}, 1)] for x in during)
            ages = [x["torch_compile.compile_running"][0][1] for x in during]
            assert ages[-1] > ages[0]
            frame = during[0]["torch_compile.compile_running"][0][0]["frame"]
            assert isinstance(frame, str) and frame.startswith("Model.forward")
            backend.release.set()
            worker.join(60)
            seen = len(receiver.metrics)
            after = _wait(lambda: (e := _otel_gauges(receiver)[seen + 1 :]) and e or None, 30)
            assert after[-1]["torch_compile.compiling"] == [({"rank": "0"}, 0)]
            assert after[-1]["torch_compile.compile_running"] == []
            session.detach()


def _minus_one(x: torch.Tensor) -> torch.Tensor:
    return x - 1


def test_the_running_compile_frame_label_is_bounded_by_the_frame_cap() -> None:
    """Past ``max_frames`` the age series of a running compile carries the ``other`` frame, like every
    per-frame metric; ``status()`` still names the frame itself."""
    port = free_port()
    session = recompprof.attach(exporters=["prometheus"], prometheus_port=port, max_frames=1)
    backend = HeldBackend()
    torch.compile(Model(), backend=backend)(torch.ones(2))
    worker = threading.Thread(
        target=torch.compile(_minus_one, backend=backend), args=(torch.ones(2),)
    )
    worker.start()
    try:
        assert backend.entered.wait(60)
        [(labels, _)] = _gauges(port)["torch_compile_compile_running_seconds"]
        assert labels["frame"] == "other"
        running = session.status().compiling
        assert running is not None and running.frame.name == "_minus_one"
    finally:
        backend.release.set()
        worker.join(60)
    session.detach()


def test_a_long_compile_writes_heartbeats_to_the_event_log_only(tmp_path: Path) -> None:
    """A compile running past ``HEARTBEAT_SECONDS`` gets a ``compile_running`` line in the event log naming it,
    with how long it had run; ``recent_events()`` and ``capture_events()`` listeners never get one."""
    from recompprof._model.events import HEARTBEAT_SECONDS, CompileRunning
    from recompprof.testing import capture_events

    with (
        held_compile(run_dir=str(tmp_path)) as (session, backend, worker),
        capture_events() as captured,
    ):
        assert backend.entered.wait(60)
        time.sleep(HEARTBEAT_SECONDS + 1.5)
        backend.release.set()
        worker.join(60)
    recent, path = session.recent_events(), session.event_log_path
    session.detach()
    assert path is not None
    beats = [
        CompileRunning.model_validate_json(line)
        for line in path.read_text().splitlines()
        if '"compile_running"' in line
    ]
    assert [b.compile_id for b in beats] == ["0/1"] and HEARTBEAT_SECONDS <= beats[
        0
    ].seconds < HEARTBEAT_SECONDS + 1.5
    assert not [e for e in [*recent, *captured] if e.kind == "compile_running"]
    assert [(e.kind, e.compile_id) for e in captured if e.kind == "compile"] == [
        ("compile", "0/1")
    ]  # it listened
