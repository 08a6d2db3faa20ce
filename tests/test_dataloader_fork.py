"""Forked children of an attached process: DataLoader workers and bare ``os.fork`` children.

A child inherits the session, its hooks, its open event log, its exporter objects and the metrics
server's listening socket. It must record nothing (even when it compiles), start no server or thread,
leave the port to the parent, and exit promptly however it ends (returning, ``sys.exit`` with
atexit hooks, SIGTERM from DataLoader or multiprocessing shutdown). Each scenario runs as a real
process with a hard timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from needs import starts
from recordings import clean_env
from servers import free_port

from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile, SessionEnd, SessionStart

TIMEOUT = 180.0

_LOADER_JOB = textwrap.dedent("""
    import json, os, socket, sys, threading, urllib.request
    from pathlib import Path

    import torch
    from torch.utils.data import DataLoader, Dataset

    import recompprof

    out, port, ending = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    @torch.compile(backend="eager")
    def scale(x):
        return x * 2

    class Rows(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            x = scale(torch.full((4,), float(i)))  # a compile inside the forked worker
            info = out / f"worker-{os.getpid()}.json"
            if not info.exists():
                info.write_text(json.dumps({"pid": os.getpid(), "parent": os.getppid(),
                                            "threads": sorted(t.name for t in threading.enumerate())}))
            return x

    def port_state():
        with socket.socket() as s:
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
            except ConnectionRefusedError:
                return "refused"
            except OSError as exc:
                return type(exc).__name__
            return "accepted"

    torch.manual_seed(0)
    model = torch.compile(torch.nn.Linear(4, 1), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    session = recompprof.attach(exporters=["prometheus"], prometheus_port=port)
    loader = DataLoader(Rows(), batch_size=4, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        for i, batch in enumerate(loader):
            if epoch == 1 and i == 0:
                batch = batch[:3]  # one new shape: the parent recompiles once
            model(batch).sum().backward()
            opt.step()
            opt.zero_grad()
    workers = [w.pid for w in loader._iterator._workers]
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    snap = session.snapshot()
    parent_threads = sorted(t.name for t in threading.enumerate())
    session.detach()  # the persistent workers are still alive here
    result = {"pid": os.getpid(), "workers": workers, "compiles": snap.compiles_total,
              "recompiles": snap.recompiles_total, "event_log": str(session.event_log_path), "metrics": metrics,
              "parent_threads": parent_threads, "port_after_detach": port_state(),
              "workers_alive_after_detach": [os.path.exists(f"/proc/{p}") for p in workers]}
    (out / "result.json").write_text(json.dumps(result))
    if ending == "del":
        del loader  # workers are told to stop and joined
    # ending == "exit": the interpreter exits with the workers alive; multiprocessing terminates them (SIGTERM)
    print("PARENT DONE", flush=True)
""")

_FORK_JOB = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path

    import torch

    import recompprof

    out, port, ending = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    session = recompprof.attach(exporters=["prometheus"], prometheus_port=port)
    double = torch.compile(lambda x: x * 2, backend="eager")
    double(torch.ones(3))
    pid = os.fork()
    if pid == 0:
        double(torch.ones(5))  # a recompile in the child: must not be recorded
        if ending == "exit":
            sys.exit(0)  # runs the inherited atexit hooks
        time.sleep(60)
        os._exit(0)
    if ending == "sigterm":
        time.sleep(1)
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print(f"CHILD EXITED {os.waitstatus_to_exitcode(status)}", flush=True)
            break
        time.sleep(0.1)
    else:
        print("CHILD HUNG", flush=True)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    print(f"PARENT {os.getpid()} compiles={session.snapshot().compiles_total}", flush=True)
    session.detach()
""")


def _run(tmp: Path, script: str, ending: str) -> tuple[subprocess.CompletedProcess[str], int, Path]:
    """Run ``script`` in a fresh session (killed whole at the timeout); returns the result, port and run dir."""
    path = tmp / "job.py"
    path.write_text(script)
    port = free_port()
    run_dir = tmp / "run"
    # clean_env: no linger at detach (the job scrapes its own endpoint once; the exporter would then wait
    # ~20 s for the next scrape of a puller that does not exist)
    env = clean_env(RECOMPPROF_RUN_DIR=str(run_dir), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, str(path), str(tmp), str(port), ending],
        env=env,
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        pytest.fail(f"job did not exit within {TIMEOUT}s:\n{stdout[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # nothing of the job may outlive it
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout), port, run_dir


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _loader_run(
    tmp: Path, ending: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], list[dict[str, Any]]]:
    done, _, _ = _run(tmp, _LOADER_JOB, ending)
    assert done.returncode == 0 and "PARENT DONE" in done.stdout, done.stdout[-3000:]
    result = json.loads((tmp / "result.json").read_text())
    workers = [json.loads(p.read_text()) for p in sorted(tmp.glob("worker-*.json"))]
    return done, result, workers


@pytest.fixture(scope="module")
@starts("workload")
def loader_deleted(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    """One run of the DataLoader job that deletes its loader (workers told to stop and joined)."""
    where = tmp_path_factory.mktemp("loader-del")
    _, result, workers = _loader_run(where, "del")
    return where, result, workers


def test_dataloader_workers_record_nothing_and_serve_nothing(
    loader_deleted: tuple[Path, dict[str, Any], list[dict[str, Any]]],
) -> None:
    """With num_workers=2 under attach(), workers that compile add no events, files or threads; the parent alone serves."""
    tmp_path, result, workers = loader_deleted
    assert sorted(w["pid"] for w in workers) == sorted(result["workers"])
    assert all(w["parent"] == result["pid"] for w in workers)
    for worker in workers:
        assert not [t for t in worker["threads"] if "recompprof" in t], worker["threads"]
    assert "recompprof-prometheus" in result["parent_threads"]

    (log,) = (tmp_path / "run").iterdir()  # one log, the parent's
    assert log.name == f"rank00000-{result['pid']}.jsonl"
    events = list(read_file(log))
    assert [type(e) for e in events if isinstance(e, (SessionStart, SessionEnd))] == [
        SessionStart,
        SessionEnd,
    ]
    compiles = [e for e in events if isinstance(e, Compile) and not e.backward]
    assert len(compiles) == len({e.compile_id for e in compiles}) == result["compiles"] == 2
    assert {e.frame.name for e in compiles} == {
        "Linear.forward"
    }  # the workers' `scale` compiles are not recorded
    assert [e.step for e in compiles if e.is_recompile] == [4]
    served = [
        ln
        for ln in result["metrics"].splitlines()
        if ln.startswith("torch_compile_compiles_total{")
    ]
    assert len(served) == 1 and served[0].endswith(" 2.0")


def test_port_is_released_at_detach_while_workers_live(
    loader_deleted: tuple[Path, dict[str, Any], list[dict[str, Any]]],
) -> None:
    """After detach, the metrics port refuses connections even though persistent workers that inherited it still run."""
    _, result, _ = loader_deleted
    assert result["workers_alive_after_detach"] == [True, True]
    assert result["port_after_detach"] == "refused"


@pytest.mark.workload
def test_exit_with_persistent_workers_alive_is_clean(tmp_path: Path) -> None:
    """The interpreter exits 0 promptly when persistent workers are still alive and get terminated at exit."""
    done, result, _ = _loader_run(tmp_path, "exit")
    assert not [pid for pid in result["workers"] if _alive(pid)]
    assert "Traceback" not in done.stdout, done.stdout[-3000:]


@pytest.mark.workload
@pytest.mark.parametrize("ending", ["exit", "sigterm"])
def test_forked_child_exits_promptly_and_records_nothing(tmp_path: Path, ending: str) -> None:
    """A bare os.fork child that recompiles and then calls sys.exit (atexit) or gets SIGTERM ends at once, silently."""
    done, _, run_dir = _run(tmp_path, _FORK_JOB, ending)
    assert done.returncode == 0, done.stdout[-3000:]
    expected = 0 if ending == "exit" else -signal.SIGTERM
    assert f"CHILD EXITED {expected}" in done.stdout, done.stdout[-3000:]
    (log,) = run_dir.iterdir()
    compiles = [e for e in read_file(log) if isinstance(e, Compile)]
    assert len(compiles) == 1 and not compiles[0].is_recompile
