"""Snapshot every output of the offline commands over a recorded corpus, and compare two snapshots.

    PYTHONPATH=TREE:TREE/exporters .venv/bin/python scripts/snapshot_outputs.py CORPUS OUT
    .venv/bin/python scripts/snapshot_outputs.py --compare OUT_A OUT_B

The first form runs, with the recompprof this interpreter imports (``python -m recompprof._cli.main``), each
command of ``commands(CORPUS)`` over the runs ``scripts/record_corpus.py`` recorded: ``report`` (terminal at
three widths, ``--html``, ``--rank``, ``--strict``), ``check`` (no rule, each rule, each flag that accepts a
run it would refuse), ``diff`` between pairs of runs, ``ingest`` of each TORCH_TRACE (the event logs it
writes are kept byte for byte), and ``watch --once``. Each command NAME leaves ``NAME.out``, ``NAME.err`` and
``NAME.rc`` in OUT, and any file it writes under ``NAME.files/``.

What would make two snapshots of the same tree differ is fixed, not masked:
- the environment is built from nothing but PATH, HOME and PYTHONPATH, plus fixed COLUMNS, LINES, TZ,
  locale, TERM, NO_COLOR and PYTHONHASHSEED;
- files the commands write go to one fixed scratch folder (so their paths in the output do not depend on
  OUT), and every command runs in it;
- the wall clock: ``report --html`` prints when it was generated and ``watch`` prints the time and how
  long ago each rank's last event was, so every command runs under libfaketime with the realtime clock
  stopped at ``FIXED_NOW`` (the monotonic clock and file times are left real). Without libfaketime the
  snapshot refuses to run.

``--compare`` lists the files only one snapshot has and prints a unified diff of each file that differs;
it exits 1 when anything differs, 0 when the two are byte-identical.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SCRATCH = Path("/tmp/recompprof-golden-scratch")
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
FIXED_NOW = "2026-11-27 16:00:00"  # UTC (TZ=UTC); after the corpus was recorded
FIXED_ENV = {
    "COLUMNS": "120",
    "LINES": "40",
    "TZ": "UTC",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
    "OMP_NUM_THREADS": "1",
}
FORBID_ALL = ("size", "python_constant", "global", "module_attribute", "grad_mode", "other")


def environment(hashseed: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "PYTHONPATH") if k in os.environ}
    env.update(FIXED_ENV, PYTHONHASHSEED=hashseed)
    env.update(
        LD_PRELOAD=str(FAKETIME_LIB), FAKETIME=FIXED_NOW, DONT_FAKE_MONOTONIC="1", NO_FAKE_STAT="1"
    )
    return env


def commands(corpus: Path) -> dict[str, list[str]]:
    """Every command of the snapshot by name; ``{scratch}`` stands for the command's scratch folder."""
    runs = sorted(p.name for p in corpus.iterdir() if (p / "run").is_dir())
    out: dict[str, list[str]] = {}

    def run(name: str) -> str:
        return str(corpus / name / "run")

    for name in runs:
        r = run(name)
        out[f"{name}.report"] = ["report", r]
        out[f"{name}.report-w100"] = ["report", r, "--width", "100"]
        out[f"{name}.report-w200"] = ["report", r, "--width", "200"]
        out[f"{name}.report-strict"] = ["report", r, "--strict"]
        out[f"{name}.report-html"] = ["report", r, "--html", "{scratch}/report.html"]
        out[f"{name}.report-rank0"] = ["report", r, "--rank", "0"]
        out[f"{name}.report-rank1"] = ["report", r, "--rank", "1"]
        out[f"{name}.check-norule"] = ["check", r]
        out[f"{name}.check-max0"] = ["check", r, "--max-recompiles", "0"]
        out[f"{name}.check-max100"] = ["check", r, "--max-recompiles", "100"]
        out[f"{name}.check-after"] = ["check", r, "--max-recompiles", "1", "--after-step", "4"]
        out[f"{name}.check-limits"] = [
            "check",
            r,
            "--max-total-recompiles",
            "1",
            "--max-compile-seconds",
            "0",
            "--max-recompile-seconds",
            "0",
            "--max-limit-hits",
            "0",
            "--max-graph-breaks",
            "0",
            "--max-failures",
            "0",
        ]
        out[f"{name}.check-loose"] = [
            "check",
            r,
            "--max-total-recompiles",
            "100000",
            "--max-compile-seconds",
            "1e9",
            "--max-recompile-seconds",
            "1e9",
            "--max-limit-hits",
            "100000",
            "--max-graph-breaks",
            "100000",
            "--max-failures",
            "100000",
        ]
        out[f"{name}.check-forbid"] = ["check", r] + [
            a for c in FORBID_ALL for a in ("--forbid", c)
        ]
        out[f"{name}.check-forbid-size"] = ["check", r, "--forbid", "size"]
        out[f"{name}.check-forbid-bad"] = ["check", r, "--forbid", "no_such_category"]
        out[f"{name}.check-running"] = [
            "check",
            r,
            "--max-recompiles",
            "100",
            "--fail-on-running-compile",
        ]
        out[f"{name}.check-incomplete"] = [
            "check",
            r,
            "--max-recompiles",
            "100",
            "--accept-incomplete-runs",
        ]
        out[f"{name}.check-gaps"] = ["check", r, "--max-recompiles", "100", "--accept-log-gaps"]
        out[f"{name}.check-accept-all"] = [
            "check",
            r,
            "--max-recompiles",
            "0",
            "--fail-on-running-compile",
            "--accept-incomplete-runs",
            "--accept-log-gaps",
            "--accept-dark-signals",
            "--allow-skipped",
        ]
        out[f"{name}.watch-once"] = ["watch", r, "--once"]
        out[f"{name}.watch-once-w100"] = ["watch", r, "--once", "--width", "100"]
        if name.startswith(
            "large"
        ):  # seconds each: keep the commands that take other paths through the code
            for variant in (
                "report-w100",
                "report-w200",
                "report-strict",
                "report-rank1",
                "check-norule",
                "check-max100",
                "check-after",
                "check-forbid-size",
                "check-forbid-bad",
                "check-running",
                "check-incomplete",
                "check-gaps",
                "watch-once-w100",
            ):
                del out[f"{name}.{variant}"]
    for name in runs:
        if name.startswith("large"):
            continue
        for log in sorted((corpus / name / "run").glob("*.jsonl")):
            out[f"{name}.report-file-{log.stem}"] = ["report", str(log)]
    traces = sorted(p.name for p in corpus.iterdir() if (p / "trace").is_dir())
    for name in traces:
        t = str(corpus / name / "trace")
        out[f"{name}.trace-report"] = ["report", t]
        out[f"{name}.trace-report-html"] = ["report", t, "--html", "{scratch}/report.html"]
        out[f"{name}.trace-check"] = ["check", t, "--max-recompiles", "0"]
        out[f"{name}.trace-check-after"] = [
            "check",
            t,
            "--max-recompiles",
            "0",
            "--after-step",
            "2",
        ]
        out[f"{name}.ingest"] = ["ingest", t, "-o", "{scratch}/out"]
        out[f"{name}.ingest-redact"] = ["ingest", t, "-o", "{scratch}/out", "--redact"]
        out[f"{name}.ingest-default-dir"] = ["ingest", t]
        out[f"{name}.ingest-exists"] = [
            "sh",
            "ingest",
            t,
            "-o",
            "{scratch}/out",
        ]  # twice: the second refuses
        out[f"{name}.ingest-overwrite"] = ["sh-overwrite", "ingest", t, "-o", "{scratch}/out"]
        out[f"{name}.trace-diff-live"] = ["diff", str(corpus / name / "run"), t]
    pairs = [
        ("live", "ingested"),
        ("ingested", "live"),
        ("live", "profile"),
        ("profile", "live"),
        ("live", "gapped"),
        ("live", "midcompile"),
        ("killed", "killed2"),
        ("multirank", "killed2"),
        ("live", "live"),
        ("large", "large_b"),
        ("large_b", "large"),
    ]
    for a, b in pairs:
        if a in runs and b in runs:
            out[f"diff.{a}-{b}"] = ["diff", run(a), run(b)]
            if a.startswith("large"):
                out[f"diff.{a}-{b}-time5"] = ["diff", run(a), run(b), "--max-time-increase", "5"]
                continue
            out[f"diff.{a}-{b}-w100"] = ["diff", run(a), run(b), "--width", "100"]
            out[f"diff.{a}-{b}-time5"] = ["diff", run(a), run(b), "--max-time-increase", "5"]
            out[f"diff.{a}-{b}-time0"] = [
                "diff",
                run(a),
                run(b),
                "--max-time-increase",
                "0",
                "--allow-skipped",
            ]
    for name in ("multirank", "killed2"):  # two ranks' runs of one job, each log on its own
        logs = sorted((corpus / name / "run").glob("*.jsonl")) if name in runs else []
        if len(logs) == 2:
            out[f"diff.{name}-rank0-rank1"] = ["diff", str(logs[0]), str(logs[1])]
            out[f"diff.{name}-rank1-rank0"] = ["diff", str(logs[1]), str(logs[0])]
    return out


def run_one(
    args: list[str], scratch: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    cli = [sys.executable, "-m", "recompprof._cli.main"]
    if args[0].startswith("sh"):  # ingest into a folder that already holds its logs
        first = [a.replace("{scratch}", str(scratch)) for a in args[1:]]
        subprocess.run(cli + first, cwd=scratch, env=env, capture_output=True, timeout=600)
        if args[0] == "sh-overwrite":
            first.append("--overwrite")
        return subprocess.run(cli + first, cwd=scratch, env=env, capture_output=True, timeout=600)
    return subprocess.run(
        cli + [a.replace("{scratch}", str(scratch)) for a in args],
        cwd=scratch,
        env=env,
        capture_output=True,
        timeout=600,
    )


def snapshot(corpus: Path, out: Path, only: str | None, hashseed: str) -> int:
    if not FAKETIME_LIB.exists():
        raise SystemExit(
            f"{FAKETIME_LIB} is missing (apt-get install faketime): the snapshot needs a fixed clock"
        )
    corpus = corpus.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = environment(hashseed)
    started = time.monotonic()
    todo = commands(corpus)
    for name, args in todo.items():
        if only and only not in name:
            continue
        if SCRATCH.exists():
            shutil.rmtree(SCRATCH)
        SCRATCH.mkdir(parents=True)
        t0 = time.monotonic()
        proc = run_one(args, SCRATCH, env)
        (out / f"{name}.out").write_bytes(proc.stdout)
        (out / f"{name}.err").write_bytes(proc.stderr)
        (out / f"{name}.rc").write_text(f"{proc.returncode}\n")
        written = sorted(p for p in SCRATCH.rglob("*") if p.is_file())
        if written:
            for path in written:
                dest = out / f"{name}.files" / path.relative_to(SCRATCH)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)
        print(f"{time.monotonic() - t0:6.2f} s  rc {proc.returncode}  {name}", flush=True)
    shutil.rmtree(SCRATCH, ignore_errors=True)
    print(f"{len(todo)} commands in {time.monotonic() - started:.0f} s -> {out}")
    return 0


def compare(a: Path, b: Path, context_lines: int) -> int:
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    differ = 0
    for rel in sorted(files_a - files_b):
        print(f"only in {a}: {rel}")
        differ += 1
    for rel in sorted(files_b - files_a):
        print(f"only in {b}: {rel}")
        differ += 1
    for rel in sorted(files_a & files_b):
        one, two = (a / rel).read_bytes(), (b / rel).read_bytes()
        if one == two:
            continue
        differ += 1
        print(f"DIFFERS: {rel}")
        lines = difflib.unified_diff(
            one.decode("utf-8", "replace").splitlines(),
            two.decode("utf-8", "replace").splitlines(),
            str(a / rel),
            str(b / rel),
            lineterm="",
            n=context_lines,
        )
        for i, line in enumerate(lines):
            if i >= 200:
                print("    ... (cut at 200 diff lines)")
                break
            print("    " + line[:400])
    same = len(files_a & files_b)
    print(
        f"{len(files_a)} vs {len(files_b)} files; {differ} difference(s)"
        if differ
        else f"IDENTICAL: {same} files, byte for byte"
    )
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "paths",
        nargs=2,
        type=Path,
        metavar="PATH",
        help="CORPUS OUT, or with --compare OUT_A OUT_B",
    )
    parser.add_argument("--compare", action="store_true", help="compare two snapshots instead")
    parser.add_argument("--only", default=None, help="only commands whose name holds this text")
    parser.add_argument(
        "--hashseed", default="0", help="PYTHONHASHSEED for the commands (default 0)"
    )
    parser.add_argument(
        "--context", type=int, default=2, help="--compare: lines of context in each diff"
    )
    args = parser.parse_args()
    if args.compare:
        return compare(*args.paths, args.context)
    return snapshot(*args.paths, args.only, args.hashseed)


if __name__ == "__main__":
    sys.exit(main())
