"""A backward compiled lazily at the first ``.backward()`` is seen live like a forward compile: its
``compile_start`` (``backward``), ``Session.status()``, the Prometheus gauge, the heartbeat and, for a job
killed during it, ``report``, ``check --fail-on-running-compile`` and ``watch`` (real torch.compile with
aot_autograd and a slow backward compiler, real processes, a real scrape)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from functorch.compile import make_boxed_func
from needs import starts
from prometheus_client.parser import text_string_to_metric_families
from recorded_runs import clean_env, cli
from servers import free_port, http_get
from torch._dynamo.backends.common import aot_autograd

import recompprof
from recompprof._eventlog.reader import read_file
from recompprof._model.events import HEARTBEAT_SECONDS, Compile, CompileStart
from recompprof._torch.versions import GATES, Gate, torch_info

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"
BACKWARD_LINE = r"rank 0 was compiling the backward of `Model\.forward` for at least (\d+) s when"

MAY_LINE = (
    "rank 0: a backward compile may have been running when {} ended "
    "(its torch marks no backward compile's start)"
)
marks_backward = pytest.mark.skipif(
    not torch_info().has("backward_compile_start"),
    reason="this torch marks no backward compile's start (covered by the 'may be running' tests)",
)
# Runs a workload as on a torch whose compile-start callbacks name no trigger (below the gate).
BELOW_GATE = (
    "import dataclasses, runpy, sys; from recompprof._torch import versions as v; "
    "g = v.GATES['backward_compile_start']; "
    "v.GATES['backward_compile_start'] = dataclasses.replace(g, since=(99, 0)); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * 2).sum()


class HeldBackward:
    """A backward compiler that holds torch's lazy backward compile open until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __deepcopy__(self, memo: dict[int, object]) -> HeldBackward:
        # Lightning, once imported anywhere in the process (the suite imports it), wraps torch.compile and
        # deep-copies its arguments; a copy of this compiler would never be released: it is shared state.
        return self

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        self.entered.set()
        self.release.wait(60)
        return make_boxed_func(gm.forward)


def _forward_compiler(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
    return make_boxed_func(gm.forward)


def _gauges(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = http_get(f"http://127.0.0.1:{port}/metrics").decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
        if f.name in ("torch_compile_compiling", "torch_compile_compile_running_seconds")
    }


@marks_backward
def test_status_and_gauge_show_a_running_backward_compile(tmp_path: Path) -> None:
    """While torch compiles a backward at the first ``.backward()``, every ``status()`` polled from another
    thread names it (the forward's frame and compile id, ``backward``), the scraped gauge is 1 with its
    frame's age series; after it, ``compiling`` is None and the gauge 0; the log has its ``compile_start``
    before its ``compile``, both ``backward``."""
    port = free_port()
    session = recompprof.attach(run_dir=tmp_path, exporters=["prometheus"], prometheus_port=port)
    held = HeldBackward()
    backend = aot_autograd(fw_compiler=_forward_compiler, bw_compiler=held)
    loss = torch.compile(Model(), backend=backend)(torch.ones(4, requires_grad=True))
    assert session.status().compiling is None
    worker = threading.Thread(target=loss.backward)
    worker.start()
    try:
        assert held.entered.wait(60)
        polls = []
        poller = threading.Thread(
            target=lambda: [polls.append(session.status().compiling) for _ in range(20)]
        )
        poller.start()
        poller.join(60)
        during = _gauges(port)
    finally:
        held.release.set()
        worker.join(60)
    seen = [p for p in polls if p is not None and p.backward]
    print(f"status polls that saw the backward compile: {len(seen)}/{len(polls)}")
    assert len(seen) == len(polls) == 20
    assert {(p.frame.name, p.compile_id, p.is_recompile) for p in seen} == {
        ("Model.forward", "0/0", False)
    }
    assert during["torch_compile_compiling"] == [({"rank": "0"}, 1.0)]
    [(labels, _)] = during["torch_compile_compile_running_seconds"]
    assert labels["frame"].startswith("Model.forward")
    assert session.status().compiling is None
    after = _gauges(port)
    assert after["torch_compile_compiling"] == [({"rank": "0"}, 0.0)]
    assert after["torch_compile_compile_running_seconds"] == []
    assert session.signals["backward_compile_start"] is True
    path = session.event_log_path
    session.detach()
    assert path is not None
    flow = [
        (e.kind, e.compile_id, e.backward)
        for e in read_file(path)
        if isinstance(e, (CompileStart, Compile))
    ]
    assert flow == [
        ("compile_start", "0/0", False),
        ("compile", "0/0", False),
        ("compile_start", "0/0", True),
        ("compile", "0/0", True),
    ]


def _run_killed(
    run: Path, command: list[str], started: Callable[[Path], bool], after: float = 0.0
) -> None:
    """Run ``command`` as a job writing to ``run`` and SIGKILL it ``after`` seconds past ``started(run)``."""
    env = clean_env(
        RECOMPPROF_RUN_DIR=str(run),
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    )
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not started(run):
            assert proc.poll() is None and time.monotonic() < deadline, "the job did not get there"
            time.sleep(0.1)
        time.sleep(after)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
@starts("workload")
def killed_in_backward(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job killed with SIGKILL while its backward compile (300 s) runs, past its first heartbeat."""
    if not torch_info().has("backward_compile_start"):
        pytest.skip("this torch marks no backward compile's start")
    run = tmp_path_factory.mktemp("killed_backward") / "run"
    _run_killed(run, [sys.executable, str(WORKLOADS / "slow_backward.py"), "300"], _backward_beat)
    return run


def _lines(run: Path, kind: str) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in run.glob("*.jsonl")
        for line in path.read_text().splitlines()
        if f'"kind":"{kind}"' in line
    ]


def _backward_beat(run: Path) -> bool:
    return any(b.get("backward") for b in _lines(run, "compile_running"))


def test_a_killed_backward_compile_left_its_start_and_heartbeat(killed_in_backward: Path) -> None:
    """The killed job's log has the backward's ``compile_start`` (no ``compile`` after it) and a
    ``compile_running`` heartbeat of it, written ``HEARTBEAT_SECONDS`` in."""
    starts = [s for s in _lines(killed_in_backward, "compile_start") if s.get("backward")]
    assert len(starts) == 1 and starts[0]["compile_id"] == "0/0"
    assert not [c for c in _lines(killed_in_backward, "compile") if c.get("backward")]
    [beat] = [b for b in _lines(killed_in_backward, "compile_running") if b.get("backward")]
    assert beat["compile_id"] == "0/0" and float(beat["seconds"]) >= HEARTBEAT_SECONDS  # type: ignore[arg-type]


def test_report_names_the_backward_compile_a_killed_job_ran(killed_in_backward: Path) -> None:
    """``report`` says the rank was compiling the backward of its frame, for at least the heartbeat's age."""
    done = cli("report", str(killed_in_backward), "--width", "200")
    assert done.returncode == 0, done.stderr
    found = re.search(BACKWARD_LINE, done.stdout)
    assert found is not None, done.stdout
    assert int(found.group(1)) >= HEARTBEAT_SECONDS


def test_check_fails_on_the_running_backward_compile(killed_in_backward: Path) -> None:
    """``check --fail-on-running-compile`` refuses the killed rank (exit 2) naming the backward compile, and
    with the rank accepted fails on it (exit 1)."""
    refused = cli("check", str(killed_in_backward), "--fail-on-running-compile")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert re.search(BACKWARD_LINE, refused.stderr), refused.stderr
    failed = cli(
        "check", str(killed_in_backward), "--fail-on-running-compile", "--accept-incomplete-runs"
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    fails = [line for line in failed.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and re.search(BACKWARD_LINE, fails[0]), failed.stdout


def test_watch_shows_the_backward_compile_not_idle(killed_in_backward: Path) -> None:
    """``watch --once`` on the killed job's run shows the rank compiling the backward, not idle."""
    done = subprocess.run(
        [sys.executable, "-m", "recompprof._cli.main", "watch", str(killed_in_backward), "--once"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"compiling the backward of `Model\.forward`", done.stdout), done.stdout
    assert "idle" not in done.stdout


def test_below_the_gate_status_says_a_backward_compile_may_be_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a torch that marks no backward compile's start, the signal ``backward_compile_start`` is off with
    the table's reason and ``status()`` says, while a backward compiles (and between compiles), that no
    compile is known running but a backward compile may be (``backward_unknown``), never a plain idle."""
    monkeypatch.setitem(GATES, "backward_compile_start", _moved(GATES["backward_compile_start"]))
    session = recompprof.attach(run_dir=tmp_path)
    held = HeldBackward()
    backend = aot_autograd(fw_compiler=_forward_compiler, bw_compiler=held)
    loss = torch.compile(Model(), backend=backend)(torch.ones(4, requires_grad=True))
    worker = threading.Thread(target=loss.backward)
    worker.start()
    try:
        assert held.entered.wait(60)
        polls = [session.status() for _ in range(20)]
    finally:
        held.release.set()
        worker.join(60)
    assert session.signals["backward_compile_start"] is False
    assert GATES["backward_compile_start"].off in session.signals_off["backward_compile_start"]
    assert all(p.compiling is None and p.backward_unknown for p in polls)
    session.detach()


def _moved(gate: Gate) -> Gate:
    return dataclasses.replace(gate, since=(99, 0))


@pytest.fixture(scope="module")
@starts("workload")
def killed_unseen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job on a torch that marks no backward compile's start, killed with SIGKILL after its forward
    compile, during its slow (300 s) backward compile."""
    run = tmp_path_factory.mktemp("killed_unseen") / "run"
    command = [sys.executable, "-c", BELOW_GATE, str(WORKLOADS / "slow_backward.py"), "300"]
    # The backward compile begins as the forward's record is written; it sleeps 300 s.
    _run_killed(run, command, lambda r: bool(_lines(r, "compile")), after=2.0)
    return run


def test_below_the_gate_report_check_and_watch_say_a_backward_may_have_run(
    killed_unseen: Path,
) -> None:
    """Killed during a backward compile torch marks no start of: ``report`` says a backward compile may have
    been running (not "not compiling"), ``check --accept-incomplete-runs --fail-on-running-compile`` passes
    with that note (it is not known), and ``watch --once`` says it instead of idle."""
    assert not _lines(killed_unseen, "compile_start")[1:]  # the forward's start only
    report = cli("report", str(killed_unseen), "--width", "250")
    assert report.returncode == 0, report.stderr
    assert MAY_LINE.format("the run") in report.stdout, report.stdout
    assert MAY_LINE.format("its log") in report.stdout, report.stdout
    assert "not compiling" not in report.stdout
    checked = cli(
        "check", str(killed_unseen), "--fail-on-running-compile", "--accept-incomplete-runs"
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert MAY_LINE.format("the run") in checked.stderr
    assert (
        "pass --fail-on-running-compile" not in checked.stderr
    )  # it is not known: no rule fails on it
    done = subprocess.run(
        [sys.executable, "-m", "recompprof._cli.main", "watch", str(killed_unseen), "--once"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0: a backward compile may be running" in done.stdout, done.stdout
    assert "idle" not in done.stdout
