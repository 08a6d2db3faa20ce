"""Record the golden corpus for the offline-wing restructure: real runs, made the way the suite makes them.

    PYTHONPATH=OLD:OLD/exporters .venv/bin/python scripts/record_corpus.py CORPUS_DIR [--only NAME ...]

Run it with the tree BEFORE the restructure on the path (the recorder and ingest of that tree write the
corpus). Each run is a folder of CORPUS_DIR:

- ``live``: tests/workloads/train_recompiles.py (backend eager, 12 steps) under RECOMPPROF_RUN_DIR and
  TORCH_TRACE at once (tests/recorded_runs.py): ``live/run`` and ``live/trace``;
- ``ingested``: ``recompprof ingest live/trace -o ingested/run``;
- ``profile``: the same workload with RECOMPPROF_MODE=profile;
- ``multirank``: torchrun --standalone --nproc_per_node=2 tests/workloads/ddp_diverge.py (gloo, CPU; rank 1
  recompiles alone at step 3, as tests/test_multirank.py runs it), with TORCH_TRACE too (``multirank/trace``);
- ``killed``: tests/workloads/train_until_told.py killed by SIGKILL after ``STEP 39`` (tests/test_incomplete_runs.py);
- ``killed2``: two ranks of train_until_told.py in one run dir, rank 1 killed after ``STEP 20``, rank 0 ends;
- ``midcompile``: train_recompiles.py with ``--slow-compile 30``, killed by SIGKILL 14 s into its first
  recompile (a log whose last compile is running, with a ``compile_running`` event);
- ``gapped``: a copy of ``live/run`` with three lines cut from the middle of its JSONL (session_end then
  counts more than the log holds: a gap, as tests/test_terminal_escapes.py makes one);
- ``large`` and ``large_b``: the generator of tests/generated_runs.py, which bench_scale.py times
  (``--ranks``/``--per-rank``; B is its "worse" run; default 2 ranks x 30,000 events, 72 MB each: past the 64 MB at which report, check and diff
  fold in worker processes), for the offline speed pair.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable
TORCHRUN = str(Path(PY).with_name("torchrun"))


def tree() -> Path:
    """The recompprof tree this interpreter imports (its tests/ and benchmarks/ hold the workloads)."""
    import recompprof

    return Path(recompprof.__file__).resolve().parent.parent


def clean_env(**extra: str) -> dict[str, str]:
    drop = (
        "TORCH_TRACE",
        "TORCH_LOGS",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RECOMPPROF_", "SLURM_")) and k not in drop
    }
    return {**env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra}


def fresh(where: Path) -> Path:
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    return where


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    (cwd / "job.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(
            f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )


def wait_for(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdout is not None
    for got in proc.stdout:
        if got.strip() == line:
            return
    raise SystemExit(f"the workload ended (exit {proc.wait()}) before printing {line!r}")


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def live(corpus: Path) -> None:
    where = fresh(corpus / "live")
    env = clean_env(RECOMPPROF_RUN_DIR=str(where / "run"), TORCH_TRACE=str(where / "trace"))
    run(
        [
            PY,
            str(tree() / "tests/workloads/train_recompiles.py"),
            "--backend",
            "eager",
            "--steps",
            "12",
        ],
        where,
        env,
    )


def ingested(corpus: Path) -> None:
    where = fresh(corpus / "ingested")
    run(
        [
            PY,
            "-m",
            "recompprof._cli.main",
            "ingest",
            str(corpus / "live/trace"),
            "-o",
            str(where / "run"),
        ],
        where,
        clean_env(),
    )


def profile(corpus: Path) -> None:
    where = fresh(corpus / "profile")
    env = clean_env(RECOMPPROF_RUN_DIR=str(where / "run"), RECOMPPROF_MODE="profile")
    run(
        [
            PY,
            str(tree() / "tests/workloads/train_recompiles.py"),
            "--backend",
            "eager",
            "--steps",
            "12",
        ],
        where,
        env,
    )


def multirank(corpus: Path) -> None:
    where = fresh(corpus / "multirank")
    env = clean_env(RECOMPPROF_RUN_DIR=str(where / "run"), TORCH_TRACE=str(where / "trace"))
    run(
        [
            TORCHRUN,
            "--standalone",
            "--nproc_per_node=2",
            str(tree() / "tests/workloads/ddp_diverge.py"),
            "--diverge-step",
            "3",
        ],
        where,
        env,
        timeout=240,
    )


def _until_told(run_dir: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, str(tree() / "tests/workloads/train_until_told.py"), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_env(RECOMPPROF_RUN_DIR=str(run_dir), **env),
    )


def killed(corpus: Path) -> None:
    where = fresh(corpus / "killed")
    proc = _until_told(where / "run", "--steps", "100000")
    try:
        wait_for(proc, "STEP 39")
    finally:
        kill(proc)


def killed2(corpus: Path) -> None:
    where = fresh(corpus / "killed2")
    world = {"WORLD_SIZE": "2", "RECOMPPROF_RUN_ID": "two-ranks"}
    done = _until_told(where / "run", "--steps", "12", RANK="0", **world)
    dying = _until_told(where / "run", "--steps", "100000", RANK="1", **world)
    try:
        wait_for(dying, "STEP 20")
    finally:
        kill(dying)
    assert done.stdout is not None
    done.stdout.read()
    if done.wait(120) != 0:
        raise SystemExit("rank 0 of killed2 failed")


def midcompile(corpus: Path) -> None:
    """Killed while its first recompile sleeps in the backend, after a ``compile_running`` event was logged."""
    where = fresh(corpus / "midcompile")
    run_dir = where / "run"
    proc = subprocess.Popen(
        [
            PY,
            str(tree() / "tests/workloads/train_recompiles.py"),
            "--backend",
            "eager",
            "--steps",
            "12",
            "--slow-compile",
            "30",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(RECOMPPROF_RUN_DIR=str(run_dir)),
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            lines = [
                json.loads(x)
                for p in run_dir.glob("*.jsonl")
                for x in p.read_text().splitlines()
                if x.strip()
            ]
            if any(e["kind"] == "compile_running" for e in lines):
                break
            time.sleep(0.5)
        else:
            raise SystemExit("midcompile: no compile_running event within 180 s")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def gapped(corpus: Path) -> None:
    """``live/run`` with three lines cut from the middle of its log: compiles the session_end still counts."""
    where = fresh(corpus / "gapped")
    (log,) = sorted((corpus / "live/run").glob("*.jsonl"))
    lines = log.read_text().splitlines(keepends=True)
    compiles = [i for i, line in enumerate(lines) if '"kind":"compile"' in line]
    middle = compiles[len(compiles) // 2]
    cut = set(range(middle - 1, middle + 2))
    (where / "run").mkdir()
    (where / "run" / log.name).write_text(
        "".join(line for i, line in enumerate(lines) if i not in cut)
    )


def large(corpus: Path, ranks: int, per_rank: int) -> None:
    sys.path.insert(0, str(tree() / "tests"))
    from generated_runs import generate  # the suite's synthetic run (bench_scale.py times it too)

    for name, worse in (("large", False), ("large_b", True)):
        where = fresh(corpus / name)
        size = generate(where / "run", ranks, per_rank, seed=1, worse=worse)
        print(f"{name}: {ranks} ranks x {per_rank} events, {size / 1e6:.1f} MB")


RUNS = (
    "live",
    "ingested",
    "profile",
    "multirank",
    "killed",
    "killed2",
    "midcompile",
    "gapped",
    "large",
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--only", nargs="*", choices=RUNS, default=list(RUNS))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--per-rank", type=int, default=30_000)
    args = parser.parse_args()
    args.corpus.mkdir(parents=True, exist_ok=True)
    corpus = args.corpus.resolve()
    for name in args.only:
        started = time.monotonic()
        if name == "large":
            large(corpus, args.ranks, args.per_rank)
        else:
            globals()[name](corpus)
        print(f"{name}: recorded in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
