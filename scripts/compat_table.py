"""Fold scripts/compat.sh results (one folder per torch version) into one Markdown table.

Usage: python scripts/compat_table.py RESULTS_DIR VERSION... ; exits 1 when a supported version
(>= versions.SUPPORTED, read from recompprof/_torch/versions.py) failed to install or failed a test.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The monitor-mode signals the probe reports, one column each: every signal a version gate of
# recompprof/_torch/versions.py can turn off is here under its signal name (tests/test_compat_table.py).
SIGNALS = (
    "compile_metrics",
    "phase_times",
    "guard_failures",
    "graph_breaks",
    "recompile_limit_hits",
    "backward_compiles",
    "backward_compile_start",
    "optimizer_steps",
)


def _versions_module() -> Any:
    # Loaded by path: this runs outside any venv, without torch or recompprof's dependencies.
    spec = importlib.util.spec_from_file_location(
        "_versions", ROOT / "recompprof" / "_torch" / "versions.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _junit(path: Path) -> tuple[int, int, int] | None:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return total - failed - skipped, failed, skipped


def main(argv: list[str]) -> int:
    out, versions = Path(argv[0]), argv[1:]
    versions_module = _versions_module()
    supported, parse = versions_module.SUPPORTED, versions_module.parse
    header = [
        "torch",
        *SIGNALS,
        "profile",
        "tests passed/failed/skipped",
        "install s",
        "tests s",
        "recompprof",
    ]
    rows, notes, bad = [], [], []
    for version in sorted(
        versions, key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit())
    ):
        d = out / version
        run, probe = _load(d / "run.json"), _load(d / "probe.json")
        monitor, profile = probe.get("monitor", {}), probe.get("profile", {})
        signals = monitor.get("signals", {})
        cells = [probe.get("torch", version)]
        for name in SIGNALS:
            cells.append("live" if signals.get(name) else "off" if name in signals else "?")
            if name in monitor.get("signals_off", {}) and not signals.get(name):
                notes.append(f"- {version} `{name}` off: {monitor['signals_off'][name]}")
        mechanism = profile.get("mechanism") or "?"
        if profile.get("signals", {}).get("profile_backend") is False:
            mechanism += " (backend not forced)"
            notes.append(
                f"- {version} profile backend: {profile.get('signals_off', {}).get('profile_backend', '')}"
            )
        if profile.get("why_off"):
            notes.append(
                f"- {version} profile mechanism `{profile.get('mechanism')}`: {profile['why_off']}"
            )
        cells.append(mechanism)
        counts = _junit(d / "junit.xml")
        if run.get("install_rc"):
            cells.append("install failed")
        elif counts is None:
            cells.append("no test results")
        else:
            cells.append("{} / {} / {}".format(*counts))
        cells += [
            str(run.get("install_s", "?")),
            str(run.get("tests_s", "?")),
            run.get("commit") or "?",
        ]
        rows.append(cells)
        failed = (
            bool(run.get("install_rc"))
            or counts is None
            or counts[1] > 0
            or run.get("tests_rc") not in (0, None)
        )
        if failed and parse(version) >= supported:
            bad.append(version)
    lines = [
        f"torch compatibility matrix, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"Python {sys.version.split()[0]}; "
        f"supported: torch >= {'.'.join(map(str, supported))}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if notes:
        lines += ["", *notes]
    if bad:
        lines += ["", f"FAILED supported versions: {', '.join(bad)}"]
    print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
