"""Children of an attached process that are not ranks: spawn, forkserver and pool workers never pose as a rank.

Every scenario runs real processes: ``recompprof run`` or ``RECOMPPROF_ATTACH=1`` on a script whose
DataLoader or ``multiprocessing`` workers import torch and compile, with the metrics read from the real
endpoint. A worker started by a recompprof process with that process's rank variables writes no log,
serves nothing and leaves the parent's multiprocess metric files alone; a child given rank variables of
its own is a rank and attaches.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from recorded_runs import clean_env, cli
from servers import free_port

from recompprof._bootstrap import lineage
from recompprof._eventlog.reader import read_file, read_run
from recompprof._model.events import Compile, SessionStart

_LOADER_JOB = textwrap.dedent("""
    import json, os, sys, time, urllib.request
    from pathlib import Path

    import torch
    from torch.utils.data import DataLoader, Dataset

    scale = torch.compile(lambda x: x * 2, backend="eager")

    class Rows(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return scale(torch.full((4,), float(i)))  # the worker imports torch and compiles

    def served(port):
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                   if line.startswith("torch_compile_compiles_total{"))

    def settle(port, expected):
        deadline = time.monotonic() + 10  # the multiprocess files are rewritten within 0.5 s of a compile
        while served(port) != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        return served(port)

    if __name__ == "__main__":
        out, port, method = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
        f = torch.compile(lambda x: x + 1, backend="eager", dynamic=False)
        for n in range(1, 6):
            f(torch.ones(n))
        before = settle(port, 5)
        loader = DataLoader(Rows(), batch_size=4, num_workers=2, multiprocessing_context=method)
        workers = sum(len(batch) for batch in loader)
        del loader
        after_workers = settle(port, 5)
        f(torch.ones(6))
        after_next = settle(port, 6)
        (out / "result.json").write_text(json.dumps({"pid": os.getpid(), "rows": workers, "before": before,
                                                     "after_workers": after_workers, "after_next": after_next}))
""")


@pytest.mark.workload
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawned_dataloader_workers_leave_rank_0_alone_in_multiprocess_mode(
    tmp_path: Path, method: str
) -> None:
    """Under `recompprof run` with prometheus_mode=multiprocess, DataLoader workers started with spawn or
    forkserver (each importing torch and compiling) write no log and print nothing, and rank 0's served
    torch_compile_compiles_total stays 5 after they exit and becomes 6 after the next compile."""
    script = tmp_path / "job.py"
    script.write_text(_LOADER_JOB)
    port, run_dir = free_port(), tmp_path / "run"
    done = cli(
        "run",
        "--run-dir",
        str(run_dir),
        "--quiet",
        "--exporters",
        "prometheus",
        "--prometheus-mode",
        "multiprocess",
        "--prometheus-port",
        str(port),
        "--",
        sys.executable,
        str(script),
        str(tmp_path),
        str(port),
        method,
        cwd=tmp_path,
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prom"),
        RECOMPPROF_RUN_ID="loader-job",
        timeout=400,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", (
        done.stderr
    )  # no PortInUse, no traceback, no "not attached" line per worker
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["rows"] == 8
    assert (result["before"], result["after_workers"], result["after_next"]) == (5, 5, 6)
    assert [p.name for p in run_dir.glob("*.jsonl")] == [f"rank00000-{result['pid']}.jsonl"]
    assert sorted(p.name for p in (tmp_path / "prom").iterdir()) == [
        "counter_recompprof-loader-job-r0.db",
        "gauge_max_recompprof-loader-job-r0.db",
        "histogram_recompprof-loader-job-r0.db",
        "recompprof-loader-job-r0.lock",
    ]


_LINEAGE_JOB = textwrap.dedent("""
    import multiprocessing as mp, os, sys

    import torch

    def work(tag):
        torch.compile(lambda x: x - 1, backend="eager")(torch.ones(3))
        return tag

    if __name__ == "__main__":
        torch.compile(lambda x: x * 3, backend="eager")(torch.ones(2))
        ctx = mp.get_context("spawn")
        helper = ctx.Process(target=work, args=("helper",))  # the parent's rank variables: a helper
        helper.start(); helper.join()
        os.environ.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")  # given rank variables of its own: a rank
        rank = ctx.Process(target=work, args=("rank",))
        rank.start(); rank.join()
        print("exit codes", helper.exitcode, rank.exitcode, flush=True)
""")

_WRAPPER = textwrap.dedent("""
    import multiprocessing as mp, subprocess, sys

    def work(n):
        import torch  # only the pool workers import torch: the wrapper never attaches
        return float(torch.compile(lambda x: x + n, backend="eager")(torch.zeros(1)))

    if __name__ == "__main__":
        with mp.get_context("spawn").Pool(2) as pool:
            print("pool", pool.map(work, [1, 2]), flush=True)
        sys.exit(subprocess.call([sys.executable, sys.argv[1]]))  # a program it runs is not a helper
""")


@pytest.mark.workload
def test_a_child_attaches_only_with_rank_variables_of_its_own(tmp_path: Path) -> None:
    """RECOMPPROF_ATTACH=1 on a torch-free wrapper: its spawn pool workers (torch imported only there) do not
    attach, the program it runs with subprocess does (rank 0), that program's spawned helper does not, and
    the child it gives RANK=1/WORLD_SIZE=2 attaches as rank 1: exactly two logs, ranks 0 and 1."""
    (tmp_path / "job.py").write_text(_LINEAGE_JOB)
    (tmp_path / "wrapper.py").write_text(_WRAPPER)
    run_dir = tmp_path / "run"
    env = clean_env(
        RECOMPPROF_ATTACH="1", RECOMPPROF_RUN_DIR=str(run_dir), RECOMPPROF_RUN_ID="lineage"
    )
    done = subprocess.run(
        [sys.executable, str(tmp_path / "wrapper.py"), str(tmp_path / "job.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pool [1.0, 2.0]" in done.stdout and "exit codes 0 0" in done.stdout
    assert done.stderr == "", done.stderr
    starts = sorted(
        (e for e in read_run(run_dir) if isinstance(e, SessionStart)), key=lambda e: e.rank
    )
    assert [(s.rank, s.world_size, s.launcher) for s in starts] == [
        (0, 1, "single"),
        (1, 2, "torchrun"),
    ]
    for start in starts:
        (log,) = run_dir.glob(f"rank{start.rank:05d}-*.jsonl")
        compiles = [e for e in read_file(log) if isinstance(e, Compile)]
        assert len(compiles) == 1, (
            start.rank,
            compiles,
        )  # the parent's own compile; the rank's `work`


_EXPLICIT_JOB = textwrap.dedent("""
    import multiprocessing as mp, sys, warnings

    import torch

    import recompprof

    session = recompprof.attach()  # module level: a spawned child runs this again when it imports the script

    def work():
        torch.compile(lambda x: x - 1, backend="eager")(torch.ones(3))
        print("child attached:", session.attached, recompprof._capture.session.current() is None, flush=True)

    if __name__ == "__main__":
        torch.compile(lambda x: x * 3, backend="eager")(torch.ones(2))
        child = mp.get_context("spawn").Process(target=work)
        child.start(); child.join()
        print("parent attached:", session.attached, "child exit", child.exitcode, flush=True)
""")


@pytest.mark.workload
def test_explicit_attach_in_a_spawned_helper_does_not_attach(tmp_path: Path) -> None:
    """A script that calls recompprof.attach() at module level: its spawned child runs that call again; the
    child gets a session that is not attached (one RuntimeWarning saying why), writes no log, and the
    parent's log holds only the parent's compile."""
    (tmp_path / "job.py").write_text(_EXPLICIT_JOB)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(tmp_path / "job.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean_env(RECOMPPROF_RUN_DIR=str(run_dir)),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "child attached: False True" in done.stdout
        and "parent attached: True child exit 0" in done.stdout
    )
    assert done.stderr.count("RuntimeWarning: recompprof: not attached in process") == 1, (
        done.stderr
    )
    (log,) = run_dir.glob("*.jsonl")
    assert len([e for e in read_file(log) if isinstance(e, Compile)]) == 1


def test_rank_key_is_what_the_rank_variables_say() -> None:
    """Two environments claim the same rank exactly when their launcher's rank variables agree: WORLD_SIZE
    alone (set for mp.spawn workers) or MASTER_PORT is no rank, RANK with WORLD_SIZE or SLURM_PROCID is."""
    single = lineage.rank_key({})
    assert lineage.rank_key({"WORLD_SIZE": "4", "MASTER_PORT": "29500"}) == single == "single"
    assert lineage.rank_key({"RANK": "1", "WORLD_SIZE": "4"}) != lineage.rank_key(
        {"RANK": "0", "WORLD_SIZE": "4"}
    )
    assert lineage.rank_key({"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"}) != lineage.rank_key(
        {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}
    )  # srun inside the batch script
    env = {"RANK": "0", "WORLD_SIZE": "2"}
    previous, value = lineage.mark(lineage.ATTACHED, env)
    assert (
        previous is None and lineage.helper_of(env) is None
    )  # its own marker: not a helper of itself
    lineage.restore(previous, value, env)
    assert lineage.VARIABLE not in env


_CLAIMANT = textwrap.dedent("""
    import json, sys, time, urllib.request

    import torch

    import recompprof

    port, compiles, wait = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "wait"

    def served():
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                   if line.startswith("torch_compile_compiles_total{"))

    def settle(expected):
        deadline = time.monotonic() + 10
        while served() != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        return served()

    session = recompprof.attach(exporters=["prometheus"], prometheus_mode="multiprocess", prometheus_port=port,
                                event_log=False)
    f = torch.compile(lambda x: x + 1, backend="eager", dynamic=False)
    for n in range(1, compiles + 1):
        f(torch.ones(n))
    if wait:
        print("ready", settle(compiles), flush=True)
        sys.stdin.readline()  # the other claimant runs now
        after = settle(compiles)
        f(torch.ones(compiles + 1))
        print("result", json.dumps([after, settle(compiles + 1)]), flush=True)
    session.detach()
""")


@pytest.mark.workload
def test_a_second_live_process_claiming_the_same_rank_leaves_the_first_ones_metric_files(
    tmp_path: Path,
) -> None:
    """Two single-process jobs given one run id (RECOMPPROF_RUN_ID reused) and one
    PROMETHEUS_MULTIPROC_DIR both claim rank 0 of that run: the second
    writes and serves nothing there and says so in one line naming the first one's pid; the first keeps
    serving its own counts (5 while the second runs and after it ends, 6 after its next compile)."""
    script = tmp_path / "claimant.py"
    script.write_text(_CLAIMANT)
    env = clean_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prom"), RECOMPPROF_RUN_ID="reused")
    first = subprocess.Popen(
        [sys.executable, str(script), str(free_port()), "5", "wait"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline().split() == ["ready", "5.0"]
        second = subprocess.run(
            [sys.executable, str(script), str(free_port()), "2", "go"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        first.stdin.write("go\n")
        first.stdin.flush()
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 0 and first.returncode == 0, second.stderr + err
    assert json.loads(out.split("result", 1)[1]) == [5, 6]
    assert err == "", err
    (line,) = second.stderr.splitlines()
    assert (
        f"rank 0's multiprocess metric files in {tmp_path / 'prom'} belong to live process {first.pid}"
        in line
    )
