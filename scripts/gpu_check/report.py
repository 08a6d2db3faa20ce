"""The GPU check's report: the facts it gathers about the machine, and the files it writes.

Five files under ``--out`` (the device tool brings back at most 8, 16 MiB each):

- ``report.txt``: what ran, the versions, each check's status, figures and failures (also printed last);
- ``report.json``: the same, whole;
- ``texts.json``: torch's raw texts (CUDA-graph skips, re-records, runtime records) by workload, to become
  CPU-side fixtures;
- ``pytest.txt``: the test runs' output;
- ``runs.tar.gz``: each workload's event log, TORCH_TRACE, stderr and torch records (traces left out
  if the archive would pass 12 MiB).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

MAX_ARCHIVE = 12 * 2**20
MAX_LOG = 2 * 2**20
STATUS_WORDS = {
    "pass": "passed",
    "warn": "passed, with a warning",
    "fail": "FAILED",
    "error": "ERROR",
    "needs_cuda": "not run: needs CUDA",
    "not_run": "not run",
}


def driver() -> dict[str, Any]:
    """The driver version and GPU name as nvidia-smi gives them (None where it is missing)."""
    if shutil.which("nvidia-smi") is None:
        return {"driver": None}
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    )
    first = (done.stdout.strip().splitlines() or [""])[0]
    parts = [p.strip() for p in first.split(",")]
    return {"driver": parts[0] or None, "nvidia_smi_gpu": parts[1] if len(parts) > 1 else None}


def _versions_table(root: Path) -> Any:
    """recompprof's version table, loaded from its file: it imports nothing but the standard library."""
    spec = importlib.util.spec_from_file_location(
        "_gpu_check_versions", root / "recompprof" / "_torch" / "versions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def tested_releases(root: Path) -> list[str]:
    """The torch releases scripts/compat.sh tests, oldest first (its DEFAULT_VERSIONS)."""
    text = (root / "scripts" / "compat.sh").read_text()
    match = re.search(r"^DEFAULT_VERSIONS=\(([^)]*)\)", text, re.MULTILINE)
    return match.group(1).split() if match else []


def version_gates(root: Path, torch_version: str) -> dict[str, Any]:
    """Where this torch stands against the tested range, and each version gate it turns off (and why)."""
    table = _versions_table(root)
    releases = tested_releases(root)
    here = table.parse(torch_version)
    oldest = table.SUPPORTED
    newest = table.parse(releases[-1]) if releases else oldest
    info = table.TorchInfo(torch_version, here)
    off = {name: info.why_off(name) for name in table.GATES if not info.has(name)}
    span = f"{oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]}"
    if here < oldest:
        note = f"torch {torch_version} is older than the tested range ({span}): recompprof does not support it"
    elif here > newest:
        note = (
            f"torch {torch_version} is newer than the tested range ({span}): every gate is on, and none "
            "was verified on this release"
        )
    else:
        note = f"torch {torch_version} is within the tested range ({span})"
    return {
        "tested_range": span,
        "in_tested_range": oldest <= here <= newest,
        "range_note": note,
        "gates_off": off,
    }


def junit_counts(path: Path) -> dict[str, Any]:
    """Passed, failed, skipped and errored tests of a pytest junit file, with the failures' names and
    the skip reasons (empty counts if pytest wrote none)."""
    counts: dict[str, Any] = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    counts["failed_names"], counts["skip_reasons"] = [], {}
    if not path.exists():
        return counts
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None:
            counts["failed"] += 1
            counts["failed_names"].append(name)
        elif case.find("error") is not None:
            counts["errors"] += 1
            counts["failed_names"].append(name)
        elif (skip := case.find("skipped")) is not None:
            counts["skipped"] += 1
            reason = (skip.get("message") or "").strip()
            counts["skip_reasons"][reason] = counts["skip_reasons"].get(reason, 0) + 1
        else:
            counts["passed"] += 1
    return counts


def _figures_text(name: str, figures: dict[str, Any]) -> list[str]:
    """The few figures of a check worth a line in the text report (all are in report.json)."""
    lines = []
    if name == "environment":
        keys = ("gpu", "driver", "torch", "cuda_build", "triton", "transformers", "python")
        lines.append(", ".join(f"{k} {figures.get(k)}" for k in keys))
        lines.append(figures.get("range_note", ""))
        for gate, why in figures.get("gates_off", {}).items():
            lines.append(f"gate off: {gate}: {why}")
    elif name == "install":
        lines.append(
            f"{len(figures.get('wheels', []))} wheels; recompprof from {figures.get('imports', {}).get('recompprof')}"
        )
    elif name == "gpu_tests":
        for run in ("gpu", "device_files"):
            if run in figures:
                f = figures[run]
                lines.append(
                    f"{run}: {f['passed']} passed, {f['failed']} failed, {f['errors']} errors, "
                    f"{f['skipped']} skipped {f['skip_reasons'] or ''}"
                )
    elif name == "overhead":
        step, comp = figures.get("step_us", {}), figures.get("compile_s", {})
        ratio = figures.get("step_ratio", {})
        if step:
            lines.append(
                f"{figures.get('step')} on {figures.get('device')}: {step['off']['median']:.1f} us off, "
                f"{step['on']['median']:.1f} us on; paired ratio {ratio['median']:.4f} "
                f"(quartiles {ratio['q1']:.4f} to {ratio['q3']:.4f}, {ratio['n']} pairs); "
                f"{figures.get('scrapes_served')} scrapes served"
            )
        if comp and comp["off"]["n"]:
            off, on = comp["off"], comp["on"]
            # A difference inside both variants' spread is one the few compiles cannot tell from noise.
            overlap = on["q1"] <= off["q3"] and off["q1"] <= on["q3"]
            lines.append(
                f"compile: {off['median']:.2f} s off, {on['median']:.2f} s on "
                f"(ratio {figures.get('compile_ratio'):.3f}, {off['n']} each; quartiles "
                f"{off['q1']:.2f}-{off['q3']:.2f} and {on['q1']:.2f}-{on['q3']:.2f}"
                f"{': they overlap, not resolved' if overlap else ''})"
            )
    else:
        if "sources" in figures:
            lines.append("sources: " + "; ".join(f"{k} {v}" for k, v in figures["sources"].items()))
        for compile_ in figures.get("compiles", [])[:12]:
            phases = ", ".join(f"{k} {v:.3f}" for k, v in compile_["phases_s"].items() if v)
            lines.append(
                f"{compile_['id']}{' bwd' if compile_['backward'] else ''} {compile_['frame']}: "
                f"{compile_['duration_s']:.3f} s ({phases})"
                + (
                    f", cudagraph skip {compile_['cudagraph_skip']}"
                    if compile_["cudagraph_skip"]
                    else ""
                )
            )
        for key in (
            "cudagraph_recordings_per_frame",
            "inductor_counters",
            "autotune_s",
            "torch_records",
        ):
            if key in figures:
                lines.append(f"{key}: {figures[key]}")
    return [line for line in lines if line]


def render(check: Any, code: int) -> str:
    facts = check.probe
    lines = [
        f"recompprof GPU check{' (CPU rehearsal)' if check.rehearse else ''}: exit {code}, "
        f"{time.monotonic() - check.began:.0f} s, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"device {facts.get('gpu') or 'cpu'}; torch {facts.get('torch')} (CUDA {facts.get('cuda_build')}); "
        f"python {facts.get('python')}",
    ]
    for result in check.results:
        head = f"[{STATUS_WORDS[result.status]}] {result.check.name} ({result.seconds:.0f} s)"
        lines.append(head + (f": {result.note}" if result.note else ""))
        lines += [f"    {line}" for line in _figures_text(result.check.name, result.figures)]
        for failure in result.failures:
            lines += [f"    ! {line}" for line in failure.splitlines()[:40]]
    skipped = [r.check.name for r in check.results if r.status == "needs_cuda"]
    if skipped:
        lines.append(f"needs CUDA, not run here: {', '.join(skipped)}")
    return "\n".join(lines)


def _archive(check: Any, path: Path, traces: bool) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for result in check.results:
            where = check.work / result.check.name
            if not where.is_dir():
                continue
            for item in sorted(where.iterdir()):
                if item.name == "trace" and not traces:
                    continue
                tar.add(item, arcname=f"{result.check.name}/{item.name}")


def write(check: Any, code: int) -> str:
    """Write the report's files under ``check.out``; return the text report."""
    out = check.out
    out.mkdir(parents=True, exist_ok=True)
    text = render(check, code)
    (out / "report.txt").write_text(text + "\n")
    whole = {
        "rehearsal": check.rehearse,
        "exit": code,
        "seconds": round(time.monotonic() - check.began, 1),
        "probe": check.probe,
        "checks": [
            {
                "name": r.check.name,
                "verifies": r.check.verifies,
                "status": r.status,
                "seconds": round(r.seconds, 1),
                "note": r.note,
                "failures": r.failures,
                "figures": r.figures,
            }
            for r in check.results
        ],
    }
    (out / "report.json").write_text(json.dumps(whole, indent=1, default=str))
    (out / "texts.json").write_text(json.dumps(check.texts, indent=1))
    with open(out / "pytest.txt", "w") as log:
        for path in check.logs:
            if path.exists():
                log.write(f"==> {path.name}\n{path.read_text(errors='replace')[-MAX_LOG:]}\n")
    archive = out / "runs.tar.gz"
    _archive(check, archive, traces=True)
    if archive.stat().st_size > MAX_ARCHIVE:
        _archive(check, archive, traces=False)
    return text
