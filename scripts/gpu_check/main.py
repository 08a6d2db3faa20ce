"""The GPU check: everything recompprof does on a CUDA device, verified in one short run (docs/gpu.md).

Run by ``scripts/gpu-check.sh`` on the device machine (or here, ``--rehearse``, on CPU). Standard library
only: torch, recompprof and the carried wheels are used by the processes it starts, never imported
here, so a broken environment is reported in one line instead of a traceback.

Exit status: 0 every check that ran passed; 1 a check failed; 2 bad arguments; 3 no CUDA device
(nothing run; the checks it would have made are listed); 4 the environment cannot run the check
(torch not importable, no wheels carried, an install that failed: the line names which).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import report
from plan import PLAN, Check

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_CUDA, EXIT_SETUP = 0, 1, 2, 3, 4
# Test files run whole on the device, beside every gpu-marked test: the torch-facing files whose
# results a CUDA device changes (CUDA graphs, compile records and their phases).
DEVICE_FILES = ("tests/test_cudagraphs.py", "tests/test_torch_adapters.py")
# The device's interpreter, which scripts/gpu-bundle.sh builds the wheels for, as pip names its wheels.
DEVICE_PYTHON = (3, 12)
DEVICE_TAGS = [
    "--only-binary=:all:",
    "--python-version=3.12",
    "--implementation=cp",
    "--abi=cp312",
    *(
        f"--platform={p}"
        for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
    ),
]
# What a check's processes must not inherit: the caller's recorders and pytest's own state.
NOT_INHERITED = ("TORCH_TRACE", "TORCH_LOGS", "COLUMNS", "LINES", "PYTHONPATH")

# Run with the install folder first on the path: where recompprof and its exporters come from.
IMPORTS = """
import importlib, json
out = {}
for name in ("recompprof", "recompprof_prometheus", "recompprof_otel", "pydantic", "prometheus_client",
             "opentelemetry.sdk", "msgspec"):
    try:
        module = importlib.import_module(name)
        out[name] = getattr(module, "__file__", None) or str(list(module.__path__)[0])
    except Exception as exc:
        out[name] = f"not importable: {type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass
class Result:
    check: Check
    status: str = "not_run"  # pass, warn, fail, error, needs_cuda, not_run
    seconds: float = 0.0
    note: str = ""
    failures: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


class SetupError(Exception):
    """The environment cannot run the check; the message is the one line to print."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check.sh",
        description="Verify recompprof on a CUDA device in one run (docs/gpu.md).",
    )
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="the CPU rehearsal: run what can run without CUDA, list the rest",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT") or "gpu-check-out"),
        help="where the report goes (default: $OUT, else ./gpu-check-out)",
    )
    parser.add_argument(
        "--wheels",
        type=Path,
        default=ROOT / ".whl",
        help="the carried wheels (default: .whl/, built by scripts/gpu-bundle.sh)",
    )
    parser.add_argument(
        "--site",
        type=Path,
        default=None,
        help="the --target folder to install into (default: WORK/site)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="scratch space for the runs (default: /tmp/recompprof-gpu-check)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=540.0,
        help="seconds for all checks; later checks are not started once it is spent (default 540)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated check names to run (environment and install always run)",
    )
    args = parser.parse_args(argv)
    names = {check.name for check in PLAN}
    unknown = [n for n in args.only.split(",") if n and n not in names]
    if unknown:
        parser.error(
            f"--only: unknown check {', '.join(unknown)} (checks: {', '.join(sorted(names))})"
        )
    return args


def child_env(site: Path | None, **extra: str) -> dict[str, str]:
    """This environment for a check's process: none of the caller's recorders or pytest state, and the
    install folder (if any) as the only PYTHONPATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RECOMPPROF_", "PYTEST_")) and k not in NOT_INHERITED
    }
    env.update(PYTHONUNBUFFERED="1", **extra)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def run_child(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float, log: str
) -> tuple[int | None, float]:
    """``cmd`` with stdout in ``{log}stdout.txt`` and stderr in ``{log}stderr.txt``; (exit status, None
    if it ran out of time, and seconds). On a timeout its whole process group is killed (compile workers)."""
    began = time.monotonic()
    with open(f"{log}stdout.txt", "w") as out, open(f"{log}stderr.txt", "w") as err:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True
        )
        try:
            rc: int | None = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    return rc, time.monotonic() - began


def tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def last_json(path: Path) -> dict[str, Any] | None:
    return last_json_text(path.read_text(errors="replace")) if path.exists() else None


class GpuCheck:
    """One run of the plan: the probe's facts, the folders, the clock and each check's result."""

    def __init__(self, args: argparse.Namespace, probe: dict[str, Any]) -> None:
        self.args = args
        self.probe = probe
        self.rehearse = args.rehearse
        self.device = "cpu" if args.rehearse else "cuda"
        self.work = (args.work or Path("/tmp/recompprof-gpu-check")).resolve()
        self.site = (args.site or self.work / "site").resolve()
        self.out = args.out.resolve()
        self.began = time.monotonic()
        self.texts: dict[str, dict[str, list[str]]] = {}
        self.logs: list[Path] = []
        self.py = sys.executable
        self.results = [Result(check) for check in PLAN]
        self.env = child_env(
            self.site,
            # Every compile really compiles (the phases are under test), in a cache of this run's own.
            TORCHINDUCTOR_FX_GRAPH_CACHE="0",
            TORCHINDUCTOR_AUTOGRAD_CACHE="0",
            TORCHINDUCTOR_CACHE_DIR=str(self.work / "inductor-cache"),
            RECOMPPROF_PROMETHEUS_LINGER_SECONDS="0",
            **({"TORCHINDUCTOR_COMPILE_THREADS": "1"} if self.rehearse else {}),
        )

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.began)

    # -- the checks, by name -----------------------------------------------------------------

    def environment(self, result: Result) -> None:
        facts = {**self.probe, **report.driver()}
        result.figures.update(facts)
        gates = report.version_gates(ROOT, facts.get("torch") or "")
        result.figures.update(gates)
        if not gates["in_tested_range"]:
            result.status = "warn"
            result.note = gates["range_note"]

    def install(self, result: Result) -> None:
        wheels = sorted(self.args.wheels.glob("*.whl")) if self.args.wheels.is_dir() else []
        if not wheels and not self.rehearse:
            raise SetupError(
                f"no wheels in {self.args.wheels}: run scripts/gpu-bundle.sh here and carry .whl "
                "(docs/gpu.md)"
            )
        pip = [self.py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        pip += ["--no-cache-dir", "--upgrade", "--target"]
        steps = []
        if wheels:
            # Wheels for another interpreter (the rehearsal's, here) install with the device's tags into
            # a folder of their own, off the path: the set is checked, this interpreter keeps its own.
            same = sys.version_info[:2] == DEVICE_PYTHON
            into = self.site if same else self.work / "wheels-for-device"
            tags = [] if same else DEVICE_TAGS
            steps.append((pip + [str(into), *tags, *map(str, wheels)], "the carried wheels"))
            result.figures["wheels_into"] = str(into)
            if not same:
                result.note = (
                    f"the wheels are for CPython {DEVICE_PYTHON[0]}.{DEVICE_PYTHON[1]}: installed with "
                    f"its tags into {into}, off this Python {sys.version.split()[0]}'s path"
                )
        else:
            result.note = "no wheels carried: the rehearsal uses this environment's packages"
        # The carried build tools (setuptools) build recompprof, installed apart: the runs never see them.
        tools = sorted((self.args.wheels / "build").glob("*.whl"))
        build_env = dict(os.environ)
        if tools:
            into = self.work / "build-tools"
            steps.append((pip + [str(into), *map(str, tools)], "the carried build tools"))
            build_env["PYTHONPATH"] = str(into)
            result.figures["build_tools"] = [w.name for w in tools]
        tree = pip + [str(self.site), "--no-build-isolation", str(self.source())]
        steps.append((tree, "recompprof from the working tree"))
        for cmd, what in steps:
            env = build_env if what.startswith("recompprof") else None
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=self.work, env=env)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise SetupError(f"installing {what} failed: {last}")
        if wheels:
            installed = Path(result.figures["wheels_into"]).glob("*.dist-info")
            result.figures["installed"] = sorted(
                d.name.removesuffix(".dist-info") for d in installed
            )
        done = subprocess.run(
            [self.py, "-c", IMPORTS], capture_output=True, text=True, env=self.env, cwd=self.work
        )
        found = json.loads(done.stdout) if done.returncode == 0 else {}
        result.figures["wheels"] = [w.name for w in wheels]
        result.figures["imports"] = found
        origin = found.get("recompprof", "")
        if not origin.startswith(str(self.site)):
            raise SetupError(
                f"recompprof does not import from {self.site} after the install: "
                f"{origin or done.stderr[-300:]}"
            )
        missing = [n for n, where in found.items() if where.startswith("not importable")]
        # msgspec is optional: without it the offline commands read with pydantic.
        result.failures += [f"{n}: {found[n]}" for n in missing if n != "msgspec"]

    def fresh(self, name: str) -> Path:
        """An empty folder for one check's run (a second run on a warm machine starts clean)."""
        where = self.work / name
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        return where

    def source(self) -> Path:
        """A copy of what builds recompprof, so that the build's own files (build/, *.egg-info) land
        there and not in the working tree."""
        source = self.work / "source"
        shutil.rmtree(source, ignore_errors=True)
        junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
        for name in ("recompprof", "exporters"):
            shutil.copytree(ROOT / name, source / name, ignore=junk)
        for name in ("pyproject.toml", "setup.py", "README.md"):
            shutil.copy2(ROOT / name, source / name)
        return source

    def gpu_tests(self, result: Result, limit: float) -> None:
        marked = sorted(
            str(p.relative_to(ROOT))
            for p in (ROOT / "tests").glob("test_*.py")
            if "pytest.mark.gpu" in p.read_text(errors="replace")
        )
        runs = [("gpu", ["-m", "gpu", *marked])]
        if not self.rehearse:
            runs.append(("device_files", ["-m", "not gpu", *DEVICE_FILES]))
        began = time.monotonic()
        for name, selection in runs:
            junit = self.work / f"pytest-{name}.xml"
            junit.unlink(missing_ok=True)  # a killed run writes none: no stale counts
            cmd = [self.py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
            cmd += [f"--junitxml={junit}", *selection]
            log = f"{self.work}/pytest-{name}-"
            rc, _ = run_child(cmd, ROOT, self.env, limit - (time.monotonic() - began), log)
            self.logs += [Path(f"{log}stdout.txt"), Path(f"{log}stderr.txt")]
            counts = report.junit_counts(junit)
            result.figures[name] = {"files": selection[2:], "exit": rc, **counts}
            if rc is None:
                result.failures.append(f"pytest {name}: ran out of time")
            elif rc != 0:
                result.failures.append(f"pytest {name}: exit {rc}; {counts['failed_names'][:10]}")
        if self.rehearse:
            gpu = result.figures["gpu"]
            result.note = f"{gpu['skipped']} gpu-marked tests collected and skipped without CUDA"
            if gpu["passed"] or not gpu["skipped"]:
                result.failures.append(f"expected every gpu-marked test skipped on CPU: {gpu}")

    def workload(self, result: Result, limit: float) -> None:
        name = result.check.name
        where = self.fresh(name)
        program = name
        # max-autotune benchmarks every GEMM configuration of each matrix product: one layer's worth
        layers = "1" if name == "llama_autotune" else "2"
        if self.rehearse:  # forward passes of one layer: each CPU compile costs seconds here
            program, layers = "llama_eval", "1"
        logs = "recompiles,graph_breaks" + (",cudagraphs" if name == "reduce_overhead" else "")
        env = {
            **self.env,
            "RECOMPPROF_RUN_DIR": str(where / "run"),
            "TORCH_TRACE": str(where / "trace"),
            "TORCH_LOGS": logs,
        }
        cmd = [self.py, str(HERE / "workload.py"), program, "--device", self.device]
        rc, seconds = run_child(cmd + ["--layers", layers], where, env, limit, f"{where}/")
        result.figures["workload_s"] = round(seconds, 1)
        model = re.search(r"^MODEL (.*)$", (where / "stdout.txt").read_text(), re.MULTILINE)
        result.figures["model"] = model.group(1) if model else None
        if rc != 0 or "WORKLOAD DONE" not in (where / "stdout.txt").read_text():
            why = "ran out of time" if rc is None else f"exited {rc}"
            result.failures.append(f"{program} {why}:\n{tail(where / 'stderr.txt')}")
            return
        log = f"{self.work}/verify-{name}-"
        rc, _ = run_child(
            [self.py, str(HERE / "verify.py"), name, str(where), self.device],
            where,
            self.env,
            max(self.left(), 60),
            log,
        )
        verdict = last_json(Path(f"{log}stdout.txt"))
        if rc != 0 or verdict is None:
            result.failures.append(f"verify {name} exited {rc}:\n{tail(Path(f'{log}stderr.txt'))}")
            return
        result.failures += verdict["failures"]
        result.figures.update(verdict["figures"])
        if any(verdict["texts"].values()):
            self.texts[name] = verdict["texts"]

    def overhead(self, result: Result, limit: float) -> None:
        where = self.fresh("overhead")
        cmd = [self.py, str(HERE / "overhead.py"), "--device", self.device]
        if self.rehearse:
            cmd += [
                "--layers",
                "1",
                "--backend",
                "eager",
                "--reps",
                "0",
                "--rounds",
                "4",
                "--block",
                "10",
            ]
        else:
            cmd += ["--train", "--reps", "2", "--rounds", "20", "--block", "50"]
        env = {**self.env, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
        rc, seconds = run_child(cmd, where, env, limit, f"{where}/")
        self.logs.append(where / "stderr.txt")
        figures = last_json(where / "stdout.txt")
        if rc != 0 or figures is None:
            why = "ran out of time" if rc is None else f"exited {rc}"
            result.failures.append(f"overhead.py {why}:\n{tail(where / 'stderr.txt')}")
            return
        result.figures.update(figures, seconds=round(seconds, 1))
        result.failures += [] if figures["scrapes_served"] else ["Prometheus was never scraped"]
        if self.rehearse:
            result.note = (
                "CPU figures on a shared machine: the code path is rehearsed, not the cost"
            )

    # -- running the plan ----------------------------------------------------------------------

    def run(self) -> None:
        """Each check in turn; a SetupError stops the run (its result says so)."""
        self.work.mkdir(parents=True, exist_ok=True)
        only = set(filter(None, self.args.only.split(",")))
        for result in self.results:
            check = result.check
            if self.rehearse and check.rehearsal is None:
                result.status, result.note = "needs_cuda", "not run: needs a CUDA device"
                continue
            if only and check.name not in only | {"environment", "install"}:
                result.note = "not run: not named by --only"
                continue
            if self.left() < 20:
                result.note = "not run: the time budget was spent"
                continue
            limit = min(check.timeout * (3 if self.rehearse else 1), self.left())
            print(f"gpu-check: {check.name} ...", flush=True)
            began = time.monotonic()
            try:
                if check.name == "environment":
                    self.environment(result)
                elif check.name == "install":
                    self.install(result)
                elif check.name == "gpu_tests":
                    self.gpu_tests(result, limit)
                elif check.name == "overhead":
                    self.overhead(result, limit)
                else:
                    self.workload(result, limit)
            except SetupError as exc:
                result.status = "error"
                result.failures.append(str(exc))
                result.seconds = time.monotonic() - began
                raise
            except Exception as exc:  # noqa: BLE001 - one check's bug is reported, the others still run
                result.status = "error"
                result.failures.append(f"{type(exc).__name__}: {exc}")
            result.seconds = time.monotonic() - began
            if result.status == "not_run":
                result.status = "fail" if result.failures else "pass"
            print(f"gpu-check: {check.name}: {result.status} ({result.seconds:.0f} s)", flush=True)


def no_cuda(probe: dict[str, Any]) -> str:
    """The one line (and the list) printed when there is no CUDA device."""
    lines = [
        f"gpu-check: no CUDA device: torch {probe.get('torch')} in {probe.get('executable')} sees none; "
        f"nothing was run (exit {EXIT_NO_CUDA}; --rehearse runs the CPU rehearsal). It would have checked:"
    ]
    lines += [f"  - {check.name}: {check.verifies}" for check in PLAN]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    done = subprocess.run(
        [sys.executable, str(HERE / "probe.py")],
        capture_output=True,
        text=True,
        env=child_env(None),
    )
    probe = last_json_text(done.stdout)
    if probe is None or "error" in probe:
        why = probe["error"] if probe else (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"gpu-check: torch cannot be imported by {sys.executable}: {why} (exit {EXIT_SETUP})")
        return EXIT_SETUP
    if not probe["cuda"] and not args.rehearse:
        print(no_cuda(probe))
        return EXIT_NO_CUDA
    check = GpuCheck(args, probe)
    code = EXIT_OK
    try:
        check.run()
    except SetupError as exc:
        print(f"gpu-check: {exc} (exit {EXIT_SETUP})")
        code = EXIT_SETUP
    if code == EXIT_OK and any(r.status in ("fail", "error") for r in check.results):
        code = EXIT_FAILED
    print(report.write(check, code))
    return code


def last_json_text(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object (how a child hands back its result)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
