"""The GPU check (scripts/gpu-check.sh, docs/gpu.md) rehearsed on CPU, so it cannot rot between devices.

The rehearsal is the script itself with ``--rehearse``: the same install into a ``--target`` folder,
the gpu-marked tests (which skip here), the tiny Llama under Inductor on CPU compared with TORCH_LOGS and
TORCH_TRACE, and the overhead measurement's code path; the checks that need CUDA are listed as not run.
What needs a GPU (the CUDA workloads' verdicts) cannot run here; the rehearsal says so in its report.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from needs import starts
from recordings import clean_env

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
CHECK = ROOT / "scripts" / "gpu_check"
NEEDS_CUDA = {"reduce_overhead", "device_change", "llama_autotune"}
# A pure-Python distribution the test builds into a wheel: what the rehearsal installs from its wheel folder.
PROBE_PROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "gpu-check-carried"
version = "1.2.3"
"""


def load(name: str) -> ModuleType:
    """A module of scripts/gpu_check/, loaded from its file (the scripts are no package)."""
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", CHECK / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def gpu_marked() -> int:
    """How many tests carry the gpu marker (counted from the sources, not from pytest)."""
    return sum(
        path.read_text().count("@pytest.mark.gpu\n") for path in (ROOT / "tests").glob("test_*.py")
    )


def run_check(*args: str, where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=where,
        env=clean_env(PYTHON=sys.executable),
    )


@pytest.fixture(scope="module")
@starts("workload", "inductor")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One rehearsal, with a wheel folder holding one real wheel built here."""
    base = tmp_path_factory.mktemp("gpu-check")
    project = base / "project"
    (project / "gpu_check_carried").mkdir(parents=True)
    (project / "gpu_check_carried" / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text(PROBE_PROJECT)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-w", str(base / "wheels"), str(project)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    done = run_check(
        "--rehearse",
        "--out",
        str(base / "out"),
        "--work",
        str(base / "work"),
        "--wheels",
        str(base / "wheels"),
        where=base,
    )
    report = json.loads((base / "out" / "report.json").read_text())
    return {"done": done, "out": base / "out", "work": base / "work", "report": report}


def checks(rehearsal: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in rehearsal["report"]["checks"]}


@pytest.mark.workload
@pytest.mark.inductor
def test_rehearsal_passes_and_lists_what_needs_cuda(rehearsal: dict[str, Any]) -> None:
    """The rehearsal exits 0 with every check it can run passed, and names each CUDA-only check as not run."""
    done = rehearsal["done"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    status = {name: c["status"] for name, c in checks(rehearsal).items()}
    assert {n for n, s in status.items() if s == "needs_cuda"} == NEEDS_CUDA
    assert {n for n, s in status.items() if s != "needs_cuda"} == set(status) - NEEDS_CUDA
    assert all(s in ("pass", "warn") for n, s in status.items() if n not in NEEDS_CUDA), status
    assert "Traceback" not in done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("needs CUDA, not run here:")
    assert set(last.split(":", 1)[1].replace(",", " ").split()) == NEEDS_CUDA


@pytest.mark.workload
@pytest.mark.inductor
def test_rehearsal_installs_wheels_and_the_tree_into_the_target(rehearsal: dict[str, Any]) -> None:
    """The carried wheel lands in the install folder, and every check process imports recompprof from
    the --target install of the working tree, not from the checkout or the environment."""
    install = checks(rehearsal)["install"]["figures"]
    assert install["installed"] == ["gpu_check_carried-1.2.3"]
    assert Path(install["wheels_into"], "gpu_check_carried", "__init__.py").exists()
    site = rehearsal["work"] / "site"
    assert Path(install["imports"]["recompprof"]).is_relative_to(site)
    assert Path(install["imports"]["recompprof_otel"]).is_relative_to(site)
    llama = checks(rehearsal)["llama_default"]["figures"]
    assert Path(llama["recompprof_from"]).is_relative_to(site)


@pytest.mark.workload
@pytest.mark.inductor
def test_rehearsal_compares_live_logs_and_trace_on_inductor(rehearsal: dict[str, Any]) -> None:
    """The tiny Llama under Inductor on CPU recompiles once; recompprof live, TORCH_LOGS and TORCH_TRACE
    say the same, and each compile's phases sum to its duration with Inductor's own phases non-zero."""
    llama = checks(rehearsal)["llama_default"]
    assert llama["failures"] == []
    sources = llama["figures"]["sources"]
    assert sources["live"] == sources["logs"] == sources["trace"]
    assert sources["live"]["recompiles"] == 1
    compiles = llama["figures"]["compiles"]
    assert [c["id"] for c in compiles] == ["0/0", "0/1"]
    for compile_ in compiles:
        assert sum(compile_["phases_s"].values()) == pytest.approx(compile_["duration_s"], abs=5e-3)
        assert (
            compile_["phases_s"]["inductor_lowering"] > 0 and compile_["phases_s"]["code_gen"] > 0
        )
    assert llama["figures"]["torch_records"] == {"compiles": 2, "runtime": 0}


@pytest.mark.workload
@pytest.mark.inductor
def test_rehearsal_collects_every_gpu_test_and_measures_overhead(rehearsal: dict[str, Any]) -> None:
    """Every gpu-marked test is collected and skips without CUDA; the overhead run interleaves attached and
    detached blocks with Prometheus scraped."""
    found = checks(rehearsal)
    gpu = found["gpu_tests"]["figures"]["gpu"]
    assert (gpu["skipped"], gpu["passed"], gpu["failed"]) == (gpu_marked(), 0, 0)
    overhead = found["overhead"]["figures"]
    assert overhead["step_us"]["off"]["n"] == overhead["step_us"]["on"]["n"] == overhead["rounds"]
    assert overhead["scrapes_served"] > 0


@pytest.mark.workload
@pytest.mark.inductor
def test_rehearsal_report_fits_what_the_device_tool_brings_back(rehearsal: dict[str, Any]) -> None:
    """The report is at most 8 files of at most 16 MiB, the text report is what was printed last, and the
    archive holds each workload's event log and trace."""
    out: Path = rehearsal["out"]
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert [p.name for p in files] == [
        "pytest.txt",
        "report.json",
        "report.txt",
        "runs.tar.gz",
        "texts.json",
    ]
    assert all(p.stat().st_size <= 16 * 2**20 for p in files)
    assert rehearsal["done"].stdout.rstrip().endswith((out / "report.txt").read_text().rstrip())
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert {"llama_default/run", "llama_default/trace", "llama_default/stderr.txt"} <= set(names)


@pytest.mark.workload
def test_without_cuda_it_says_so_in_one_line_and_lists_the_checks(tmp_path: Path) -> None:
    """Without CUDA and without --rehearse the check runs nothing: one line says so, every check it would
    have made is listed, and it exits 3 with no traceback and no report."""
    done = run_check("--out", str(tmp_path / "out"), where=tmp_path)
    plan = load("plan")
    lines = done.stdout.splitlines()
    assert done.returncode == 3
    assert lines[0].startswith("gpu-check: no CUDA device: torch ") and "exit 3" in lines[0]
    assert [line.split(":", 1)[0].strip(" -") for line in lines[1:]] == [c.name for c in plan.PLAN]
    assert done.stderr == "" and not (tmp_path / "out").exists()


def test_unknown_check_name_is_one_usage_line(tmp_path: Path) -> None:
    """A check name --only does not know is refused with exit 2 and a line naming it and the known ones."""
    done = subprocess.run(
        [sys.executable, str(CHECK / "main.py"), "--only", "llama_defualt"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--only: unknown check llama_defualt (checks: " in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("release", ["2.3.1", "2.11.0", "2.99.0"])
def test_report_names_the_release_and_the_gates_it_turns_off(release: str) -> None:
    """Against the tested range (versions.py's oldest to compat.sh's newest), the report says where the device's
    torch falls and lists exactly the version gates whose release is later than it."""
    from recompprof._torch.versions import GATES, SUPPORTED, parse

    report = load("report")
    found = report.version_gates(ROOT, release)
    newest = parse(report.tested_releases(ROOT)[-1])
    assert found["in_tested_range"] == (SUPPORTED <= parse(release) <= newest)
    assert release in found["range_note"]
    word = (
        "older" if parse(release) < SUPPORTED else "newer" if parse(release) > newest else "within"
    )
    assert word in found["range_note"]
    assert set(found["gates_off"]) == {n for n, g in GATES.items() if g.since > parse(release)}
    assert all(release in why for why in found["gates_off"].values())


@pytest.mark.workload
def test_a_wheel_that_does_not_install_is_named_and_exits_4(tmp_path: Path) -> None:
    """A carried wheel pip cannot install stops the check after the install with exit 4 and one line naming
    what failed (pip's own last line), no traceback; the report says so and runs nothing after it."""
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip archive")
    done = run_check(
        "--rehearse",
        "--out",
        str(tmp_path / "out"),
        "--work",
        str(tmp_path / "work"),
        "--wheels",
        str(tmp_path / "wheels"),
        where=tmp_path,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    (line,) = [
        line for line in done.stdout.splitlines() if line.startswith("gpu-check: installing")
    ]
    assert "the carried wheels failed: " in line and line.endswith("(exit 4)")
    assert "Traceback" not in done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["install"] == "error"
    assert {s for n, s in status.items() if n not in ("environment", "install")} <= {
        "not_run",
        "needs_cuda",
    }


def test_without_torch_it_says_so_in_one_line(tmp_path: Path) -> None:
    """Run by an interpreter that has no torch (a fresh venv), the check exits 4 with one line naming the
    interpreter and the import error, and no traceback."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True
    )
    python = tmp_path / "venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), str(CHECK / "main.py")], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 4
    assert done.stdout.splitlines() == [
        f"gpu-check: torch cannot be imported by {python}: "
        "ModuleNotFoundError: No module named 'torch' (exit 4)"
    ]
    assert done.stderr == ""
