"""``recompprof run``: attach to unmodified programs (and every torchrun rank) through the sitecustomize bootstrap."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from recorded_runs import ROOT, clean_env, cli

from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, SessionStart

SCRIPT = textwrap.dedent("""
    import os, sys
    import torch

    f = torch.compile(lambda x, k: x * k, backend="eager")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    for step in range(4):
        f(torch.ones(2 + step % 2), 1.0 if step < 3 else 2.0)
        opt.step()
    print("shadowed sitecustomize ran:", os.environ.get("SHADOWED_SITECUSTOMIZE"), flush=True)
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
""")


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.workload
def test_run_profiles_an_unmodified_script(tmp_path: Path) -> None:
    """The script's compiles land in the run dir, its exit status comes back, settings apply, and a prior sitecustomize still runs."""
    shadowed = tmp_path / "site"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text(
        "import os\nos.environ['SHADOWED_SITECUSTOMIZE'] = 'yes'\n"
    )
    run_dir = tmp_path / "run"
    done = cli(
        "run",
        "--run-dir",
        str(run_dir),
        "--warmup-steps",
        "2",
        "--redact",
        "--",
        sys.executable,
        str(_script(tmp_path)),
        "3",
        cwd=tmp_path,
        PYTHONPATH=str(shadowed),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "shadowed sitecustomize ran: yes" in done.stdout
    assert (
        len(list(run_dir.glob("*.jsonl"))) == 1
    )  # the .pth hook and the sitecustomize attach once, not twice
    events = list(read_run(run_dir))
    (start,) = [e for e in events if isinstance(e, SessionStart)]
    assert start.warmup_steps == 2
    compiles = [e for e in events if isinstance(e, Compile)]
    assert [c.is_recompile for c in compiles] == [False, True, True]
    assert {r.category for c in compiles for r in c.reasons if r.explains_change} == {
        "size",
        "python_constant",
    }
    assert [c.step for c in compiles] == [0, 1, 3]
    # A short summary, not the full report: counts, the top cause, and where the report and the logs are.
    summary = done.stderr.strip().splitlines()
    assert len(summary) <= 8, done.stderr
    assert "3 compile(s), 2 recompile(s)" in done.stderr and "0 limit hit(s)" in done.stderr
    assert "graph break(s)" in done.stderr and "top cause:" in done.stderr
    assert f"recompprof report {run_dir}" in done.stderr and f"event logs: {run_dir}" in done.stderr
    assert "Why they recompiled" not in done.stderr


@pytest.mark.workload
def test_run_attaches_every_torchrun_rank(tmp_path: Path) -> None:
    """Under torchrun each rank writes its own event log into one run; the launcher writes none."""
    run_dir = tmp_path / "run"
    done = cli(
        "run",
        "--run-dir",
        str(run_dir),
        "--quiet",
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(_script(tmp_path)),
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    logs = sorted(p.name for p in run_dir.glob("*.jsonl"))
    assert len(logs) == 2 and logs[0].startswith("rank00000-") and logs[1].startswith("rank00001-")
    starts = [e for e in read_run(run_dir) if isinstance(e, SessionStart)]
    assert sorted(s.rank for s in starts) == [0, 1] and {s.world_size for s in starts} == {2}
    assert len({s.run_id for s in starts}) == 1
    report = cli("report", str(run_dir))
    assert (
        report.returncode == 0 and "ranks 0, 1" in report.stdout and "recompiles 4" in report.stdout
    )


@pytest.mark.workload
def test_run_usage_errors(tmp_path: Path) -> None:
    """A bad setting or a missing command fails before anything runs; an unknown program exits 127."""
    bad = cli("run", "--mode", "fast", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert bad.returncode == 2 and "'mode'" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "recompprof-runs").exists()
    empty = cli("run", cwd=tmp_path)
    assert empty.returncode == 2 and "no command" in empty.stderr
    missing = cli("run", "--quiet", "--", "no-such-program-xyz", cwd=tmp_path)
    assert missing.returncode == 127 and "command not found" in missing.stderr


@pytest.mark.workload
def test_run_without_torch_writes_nothing(tmp_path: Path) -> None:
    """A program that never imports torch gets no session, and run says there is nothing to report."""
    run_dir = tmp_path / "run"
    done = cli(
        "run", "--run-dir", str(run_dir), "--", sys.executable, "-c", "print('hello')", cwd=tmp_path
    )
    assert done.returncode == 0 and "hello" in done.stdout
    assert not list(run_dir.glob("*.jsonl")) if run_dir.exists() else True
    assert "no report" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.workload
def test_attach_variable_alone_attaches_the_installed_package(tmp_path: Path) -> None:
    """`RECOMPPROF_ATTACH=1 python train.py`, with nothing on PYTHONPATH, writes an event log: the package's
    recompprof-attach.pth hook (here from the editable install scripts/setup.sh makes) attaches after torch."""
    run_dir = tmp_path / "run"
    env = clean_env(RECOMPPROF_ATTACH="1", RECOMPPROF_RUN_DIR=str(run_dir))
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, str(_script(tmp_path))],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    compiles = [e for e in read_run(run_dir) if isinstance(e, Compile)]
    assert [c.is_recompile for c in compiles] == [False, True, True]


def test_pth_hook_costs_nothing_unset_and_waits_for_torch(tmp_path: Path) -> None:
    """Without RECOMPPROF_ATTACH the hook loads nothing; with it, a program that never imports torch loads only the
    small start-up module (not recompprof) and writes no event log."""
    probe = (
        "import sys; print('_recompprof_autoattach' in sys.modules, 'recompprof' in sys.modules)"
    )
    env = clean_env(RECOMPPROF_RUN_DIR=str(tmp_path / "run"))
    env.pop("PYTHONPATH", None)
    unset = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert unset.stdout.split() == ["False", "False"] and unset.stderr == ""
    env["RECOMPPROF_ATTACH"] = "1"
    waiting = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert waiting.stdout.split() == ["True", "False"] and waiting.stderr == ""
    assert not (tmp_path / "run").exists()


@pytest.mark.workload
def test_regular_install_ships_the_pth_hook(tmp_path: Path) -> None:
    """A wheel built from the source tree puts recompprof-attach.pth at the root of site-packages (in RECORD, so
    uninstall removes it); installed into a fresh venv, RECOMPPROF_ATTACH=1 alone attaches from that install."""
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("recompprof-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "recompprof-attach.pth" in names and "recompprof/_bootstrap/autoattach.py" in names
    record = (
        zipfile.ZipFile(wheel)
        .read(next(n for n in names if n.endswith(".dist-info/RECORD")))
        .decode()
    )
    assert "recompprof-attach.pth," in record
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    assert (site / "recompprof-attach.pth").is_file()
    # The dependencies (torch, pydantic, rich) come from the test environment, after the fresh install.
    (site / "zz-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run_dir = tmp_path / "run"
    env = clean_env(RECOMPPROF_ATTACH="1", RECOMPPROF_RUN_DIR=str(run_dir))
    env.pop("PYTHONPATH", None)
    where = subprocess.run(
        [str(python), "-c", "import recompprof; print(recompprof.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr
    done = subprocess.run(
        [str(python), str(_script(tmp_path))],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert len([e for e in read_run(run_dir) if isinstance(e, Compile)]) == 3
