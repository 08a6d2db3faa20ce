"""The drift report of scripts/newest-libs.sh: which versions moved and which tests changed outcome.

Usage: newest_libs_report.py OUT LIB... — OUT holds pinned.xml, newest.xml (junit) and
pinned-versions.txt, newest-versions.txt (pip freeze); the LIBs are listed first in the version table.
Prints Markdown. Exit status 0 whatever changed (the difference is the result), 2 when an input is missing.

newest_libs_report.py --select JUNIT FILE... prints the junit XML of JUNIT's test cases from those test
files only: the pinned side taken from a run of the whole suite (the CI gate's) instead of a second run.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def read_versions(path: Path) -> dict[str, str]:
    """pip freeze lines as {normalised name: version}."""
    versions = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep:
            versions[re.sub(r"[-_.]+", "-", name).lower()] = version
    return versions


def read_outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """junit XML as {test id: (outcome, first line of its message)}."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                lines = (child.get("message") or child.text or "").strip().splitlines()
                message = lines[0][:160] if lines else ""
                break
        outcomes[test_id] = (outcome, message)
    return outcomes


def select(junit: Path, files: list[str]) -> str:
    """JUNIT's test cases of ``files`` (``tests/test_x.py`` is the class name ``tests.test_x``), as junit XML."""
    modules = {f.removesuffix(".py").replace("/", ".") for f in files}
    suites = ET.Element("testsuites")
    chosen = ET.SubElement(suites, "testsuite", name="pytest")
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.get("classname", "") in modules:
            chosen.append(case)
    return ET.tostring(suites, encoding="unicode")


def main(out: Path, libs: list[str]) -> int:
    needed = [
        out / name
        for name in ("pinned.xml", "newest.xml", "pinned-versions.txt", "newest-versions.txt")
    ]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        print(f"newest_libs_report: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    pinned_v, newest_v = read_versions(needed[2]), read_versions(needed[3])
    moved = sorted(
        n for n in pinned_v.keys() | newest_v.keys() if pinned_v.get(n) != newest_v.get(n)
    )
    moved.sort(key=lambda n: n not in libs)  # the tried libraries first
    print("## Versions that moved (pinned → newest)\n")
    print("| package | pinned | newest |\n|---|---|---|")
    for name in moved:
        print(f"| {name} | {pinned_v.get(name, '—')} | {newest_v.get(name, '—')} |")
    if not moved:
        print("| (none) | | |")

    pinned, newest = read_outcomes(needed[0]), read_outcomes(needed[1])
    changed = sorted(
        t
        for t in pinned.keys() | newest.keys()
        if pinned.get(t, ("absent",))[0] != newest.get(t, ("absent",))[0]
    )
    counts = {side: _tally(results) for side, results in (("pinned", pinned), ("newest", newest))}
    print(f"\n## Tests: pinned {counts['pinned']}; newest {counts['newest']}\n")
    if not changed:
        print("No test changed outcome.")
        return 0
    print(f"{len(changed)} changed outcome:\n")
    print("| test | pinned | newest | newest's message |\n|---|---|---|---|")
    for test in changed:
        was, now = pinned.get(test, ("absent", "")), newest.get(test, ("absent", ""))
        message = now[1].replace("|", "\\|")
        print(f"| `{test}` | {was[0]} | {now[0]} | {message} |")
    return 0


def _tally(results: dict[str, tuple[str, str]]) -> str:
    counts: dict[str, int] = {}
    for outcome, _ in results.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--select"]:
        print(select(Path(sys.argv[2]), sys.argv[3:]))
        sys.exit(0)
    sys.exit(main(Path(sys.argv[1]), [re.sub(r"[-_.]+", "-", n).lower() for n in sys.argv[2:]]))
