"""The public API: what ``recompprof`` declares, what the docs tell users to import, and its import cost."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import recompprof

ROOT = Path(__file__).resolve().parents[1]
# Pages a user reads; docs/architecture.md describes the private parts for contributors.
USER_DOCS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "architecture.md"),
]
ALL_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The public modules besides the package itself; each declares what it exports.
FACES = [
    "recompprof.testing",
    "recompprof.integrations",
    "recompprof.integrations.lightning",
    "recompprof.integrations.transformers",
    "recompprof.pytest_plugin",
    "recompprof.exporter",
]

# `recompprof.attach`, `recompprof.testing.capture_events()`, `recompprof._model.causes`, ...
_DOTTED = re.compile(r"(?<![\w/.-])recompprof(?:\.\w+)+")
# `recompprof/_torch/versions.py`, `benchmarks/bench_scale.py`, `tests/test_cli_fuzz.py::test_x`
# (`recompprof/` followed by a private part or a file: `recompprof/compile_seconds` is a logged metric name;
# a path running into a placeholder, `tests/fixtures/reasons/torch<version>.txt`, is no path).
_PATH = re.compile(
    r"(?<![\w/.<-])((?:recompprof/(?:_|\w+\.py)|(?:exporters|benchmarks|scripts|tests|deploy|dashboards|docs)/)"
    r"[\w./-]*\w)(?![\w/<{*-]|\.\w)"
)
# Telemetry names are dotted too (`recompprof.compile_id` is a span attribute, `recompprof.events_dropped` an
# OTel instrument, `recompprof.io/scrape` a Kubernetes label): the strings the exporters, the metric-name
# table and the deploy files really emit; and the entry-point groups pyproject.toml declares
# (`recompprof.exporters`), which exporters of other distributions name.
_TELEMETRY = {
    "py": re.compile(r"[\"'](recompprof\.[\w.]+)"),
    "yaml": re.compile(r"recompprof\.[\w.]+"),
    "toml": re.compile(r'^\[project\.entry-points\."(recompprof\.[\w.]+)"\]', re.MULTILINE),
}


def _telemetry_names() -> set[str]:
    names: set[str] = set()
    sources = [
        *((path, "py") for path in (ROOT / "exporters").rglob("*.py")),
        (ROOT / "recompprof" / "_model" / "metric_names.py", "py"),
        *((path, "yaml") for path in (ROOT / "deploy").rglob("*.yaml")),
        (ROOT / "pyproject.toml", "toml"),
    ]
    for path, kind in sources:
        names.update(_TELEMETRY[kind].findall(path.read_text(encoding="utf-8", errors="replace")))
    return {name.rstrip(".") for name in names if not name.startswith("recompprof._")}


def _is_telemetry(name: str, telemetry: set[str]) -> bool:
    # `recompprof.cache.` is the prefix of the attributes the exporter builds (`recompprof.cache.fx_graph.hit`)
    return any(
        known == name or known.startswith(name + ".") or name.startswith(known + ".")
        for known in telemetry
    )


def _resolve(dotted: str) -> object:
    """Follow ``recompprof.a.b`` as a user would: attributes, then public submodules (``recompprof.testing``)."""
    parts = dotted.split(".")
    value: object = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        if hasattr(value, part):
            value = getattr(value, part)
        else:
            value = importlib.import_module(".".join(parts[:i]))
    return value


def _python_mentions(pages: list[Path]) -> dict[str, list[str]]:
    telemetry = _telemetry_names()
    found: dict[str, list[str]] = {}
    for page in pages:
        for name in _DOTTED.findall(page.read_text(encoding="utf-8")):
            if not _is_telemetry(name, telemetry):
                found.setdefault(name, []).append(page.name)
    return found


def test_every_name_in_all_imports() -> None:
    """Every name the package and each public module declare in ``__all__`` exists there."""
    for module in [recompprof, *(importlib.import_module(face) for face in FACES)]:
        assert isinstance(module, ModuleType)
        exported = module.__all__
        assert exported and len(exported) == len(set(exported)), module.__name__
        missing = [name for name in exported if not hasattr(module, name)]
        assert not missing, f"{module.__name__}.__all__ names what it lacks: {missing}"
    assert set(recompprof.__all__) <= set(dir(recompprof))


def test_public_names_are_public_and_private_names_are_not_exported() -> None:
    """``__all__`` holds no private name, and every public error derives from RecompprofError."""
    assert not [
        name for name in recompprof.__all__ if name.startswith("_") and name != "__version__"
    ]
    errors = [
        name
        for name in recompprof.__all__
        if name.endswith("Error") or name == "ExporterUnavailable"
    ]
    for name in errors:
        assert issubclass(getattr(recompprof, name), recompprof.RecompprofError), name


def test_every_public_error_is_in_the_exit_code_table() -> None:
    """Each error class the package exports (other than the bases ``RecompprofError`` and ``RuleBroken``) is a
    row of docs/cli.md's error table, under its public name."""
    table = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    errors = [
        name
        for name in recompprof.__all__
        if isinstance(getattr(recompprof, name), type)
        and issubclass(getattr(recompprof, name), recompprof.RecompprofError)
    ]
    assert set(errors) >= {"ConfigError", "RunError", "CheckInputError"}
    missing = [
        name
        for name in errors
        if name not in {"RecompprofError", "RuleBroken"} and f"| `recompprof.{name}`" not in table
    ]
    assert not missing, missing


def test_every_python_name_in_the_docs_resolves_through_the_public_api() -> None:
    """Each ``recompprof.X`` the README and docs/ name (other than a telemetry name) is reachable as written
    from the public API, and no user page names a private ``recompprof._x`` module path."""
    mentions = _python_mentions(ALL_DOCS)
    assert (
        "recompprof.attach" in mentions and "recompprof.build_report" in mentions
    )  # the scan sees the docs
    for name, pages in mentions.items():
        try:
            _resolve(name)
        except (AttributeError, ImportError) as exc:
            raise AssertionError(
                f"{name} (in {', '.join(sorted(set(pages)))}) does not resolve: {exc}"
            ) from None
    private = {
        name: pages
        for name, pages in _python_mentions(USER_DOCS).items()
        if any(part.startswith("_") for part in name.split(".")[1:])
    }
    assert not private, f"user docs name private module paths: {private}"


def test_every_file_path_in_the_docs_exists() -> None:
    """Each repository path the README and docs/ point at (``recompprof/_torch/versions.py``, ``tests/...``)
    exists, so the docs follow the files when they move."""
    missing = []
    for page in ALL_DOCS:
        for path in _PATH.findall(page.read_text(encoding="utf-8")):
            file = path.split("::")[0].rstrip(".")
            if "*" not in file and not (ROOT / file).exists():
                missing.append(f"{page.name}: {path}")
    assert not missing, missing


def test_importing_recompprof_does_not_import_torch() -> None:
    """``import recompprof`` and the offline names (reading, folding, divergence, errors) leave torch
    unimported, so the offline commands start fast; starting a session is what imports torch."""
    offline = [
        name
        for name in recompprof.__all__
        if name not in {"Session", "attach", "current", "report"}
    ]
    code = (
        "import json, sys, recompprof\n"
        "bare = 'torch' in sys.modules\n"
        f"for name in {offline!r}: getattr(recompprof, name)\n"
        "print(json.dumps([bare, 'torch' in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [False, False]


def _write_rank(run_dir: Path, rank: int, recompiles: int) -> None:
    """One rank's log: a session, the first compile of ``step`` and ``recompiles`` size recompiles."""
    from recompprof._eventlog.writer import log_path, write_events

    frame = recompprof.Frame(
        name="Block.forward",
        file="/src/model.py",
        line=10,
        code_file="/src/model.py",
        code_line=10,
        owner="Block",
    )
    events: list[recompprof.Event] = [
        recompprof.SessionStart(
            time=0.0,
            rank=rank,
            run_id="r",
            world_size=2,
            host="h",
            pid=100 + rank,
            versions={},
            mode="monitor",
        ),
        recompprof.Compile(
            time=1.0,
            rank=rank,
            step=0,
            frame=frame,
            compile_id="0/0",
            is_recompile=False,
            duration=1.0,
        ),
    ]
    for i in range(recompiles):
        reason = recompprof.Reason(
            text="tensor 'x' size mismatch at index 0. expected 8, actual 9",
            category="size",
            subject="L['x']",
            explains_change=True,
            entry="0/0",
        )
        events.append(
            recompprof.Compile(
                time=2.0 + i,
                rank=rank,
                step=5 + i,
                frame=frame,
                compile_id=f"0/{i + 1}",
                is_recompile=True,
                reasons=[reason],
                duration=0.5,
            )
        )
    events.append(
        recompprof.SessionEnd(
            time=9.0,
            rank=rank,
            totals={"compiles": 1.0 + recompiles, "recompiles": float(recompiles)},
        )
    )
    write_events(log_path(run_dir, rank, 100 + rank), events)


def test_the_multi_rank_example_finds_the_diverging_rank(tmp_path: Path) -> None:
    """The Python example of docs/multi-rank.md, run as written on a two-rank log where rank 1 recompiles,
    names rank 1, its first divergent step and the frame, through the public API only."""
    page = (ROOT / "docs" / "multi-rank.md").read_text(encoding="utf-8")
    example = next(
        block
        for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL)
        if "find_divergence" in block
    )
    assert "recompprof._" not in example
    _write_rank(tmp_path, 0, recompiles=0)
    _write_rank(tmp_path, 1, recompiles=2)
    done = subprocess.run(
        [sys.executable, "-c", example.replace("recompprof-runs/<run_id>", str(tmp_path))],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.count("\n") == 1, done.stdout
    assert "Block.forward" in done.stdout and "rank 1" in done.stdout and "step 5" in done.stdout, (
        done.stdout
    )


def test_a_report_built_through_the_public_api_prints_as_the_terminal_report() -> None:
    """``str(recompprof.build_report(events))`` is the text report, as ``print(recompprof.report())`` is."""
    from recompprof._analysis.render.text import render_text

    frame = recompprof.Frame(name="f", file="/x/m.py", line=1)
    events = [
        recompprof.Compile(time=1.0, rank=0, frame=frame, compile_id="0/0", is_recompile=False)
    ]
    report = recompprof.build_report(events)
    assert str(report) == render_text(report) and "recompprof report" in str(report)
