"""The code, tests, docs and benchmarks read on their own: no tracker numbers, and benchmarks import recompprof as users do."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "benchmarks").glob("*.md")),
]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))
SOURCES = [
    path
    for folder in ("recompprof", "exporters", "tests", "dashboards", "deploy", "scripts")
    for path in sorted((ROOT / folder).rglob("*"))
    if path.suffix in {".py", ".sh", ".yml", ".yaml", ".md"}
    and path.name != Path(__file__).name
    and "fixtures" not in path.parts
] + [ROOT / "pyproject.toml"]
# "issue 15", "issue-15", "issue #8", "Bug (1)": a number only the tracker can explain.
_TRACKER = re.compile(r"\bissue[- ]?#?\d+|\bbug \(?\d+\)?", re.IGNORECASE)
_PATH_EDIT = re.compile(r"sys\.path\.(?:insert|append|extend)|sys\.path\s*[+]?=")


def test_no_issue_or_bug_numbers_anywhere() -> None:
    """Code, tests, docs and benchmarks name behaviours and topics, never tracker numbers."""
    found = [
        f"{path.relative_to(ROOT)}: {m.group(0)!r}"
        for path in [*PAGES, *BENCHMARKS, *SOURCES]
        for m in _TRACKER.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_benchmarks_do_not_edit_the_import_path() -> None:
    """Benchmarks import the recompprof the environment has, and their shared set-up from benchmarks/_common.py
    (the script's own folder is on the path already), never by editing ``sys.path``."""
    edits = [
        path.name for path in BENCHMARKS if _PATH_EDIT.search(path.read_text(encoding="utf-8"))
    ]
    assert not edits, edits
    assert (ROOT / "benchmarks" / "_common.py").exists()
