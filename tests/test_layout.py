"""The package's layout rules (docs/architecture.md): parts that import one way, no circles, simple functions.

Read from the source as text (``ast``), so the rules hold for every import, including those inside
functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from radon import complexity as radon

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "recompprof", ROOT / "exporters"]

# The core parts, lowest first: a part imports only from parts below it (and from itself), so parts
# of one rank (capture and analysis, the two halves over the model and the event log) import neither.
# The faces (the CLI, integrations, testing, the public package) sit on top and may import any part.
CORE = ("_foundation", "_model", "_eventlog", "_torch", "_analysis", "_capture")
RANK = {"_foundation": 0, "_model": 1, "_eventlog": 2, "_torch": 2, "_analysis": 3, "_capture": 3}
FOUNDATION = {"recompprof._errors", "recompprof._internal", "recompprof._version"}
# What the event model and its rules may import: no torch and no I/O.
MODEL_ALLOWED = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "functools",
    "itertools",
    "math",
    "operator",
    "re",
    "time",
    "typing",
    "pydantic",
}


def _modules() -> dict[str, Path]:
    found = {}
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            parts = (
                path.relative_to(source.parent if source.name == "recompprof" else source)
                .with_suffix("")
                .parts
            )
            name = ".".join(parts).removesuffix(".__init__")
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The modules ``name`` imports, resolved to modules of this tree where they are ours."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                out.add(candidate if candidate in MODULES else base)
    return out


GRAPH = {
    name: {dep for dep in _imports(name, path) if dep in MODULES and dep != name}
    for name, path in MODULES.items()
}


def _part(name: str) -> str:
    if name in FOUNDATION:
        return "_foundation"
    bits = name.split(".")
    return bits[1] if bits[0] == "recompprof" and len(bits) > 1 else bits[0]


def test_no_import_circles_between_files() -> None:
    """No file reaches itself through the imports of others (function-level and type-only imports included)."""
    circles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                circles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert not circles


def test_core_parts_import_only_the_parts_below_them() -> None:
    """The flow is one way: foundation <- model <- event log, torch boundary <- analysis, capture (siblings) <- faces."""
    wrong = []
    for name, deps in GRAPH.items():
        part = _part(name)
        if part not in RANK:
            continue
        for dep in deps:
            other = _part(dep)
            if other == part:
                continue
            if other == "_bootstrap" and dep == "recompprof._bootstrap.lineage":
                continue  # standard library only, loaded by path at start-up: below everything in fact
            if other not in RANK or RANK[other] >= RANK[part]:
                wrong.append(f"{name} -> {dep}")
    assert not wrong


def test_the_event_model_has_no_torch_and_no_io() -> None:
    """recompprof._model imports only the standard library's pure modules, pydantic and the foundation."""
    wrong = []
    for name, path in MODULES.items():
        if _part(name) != "_model":
            continue
        for dep in _imports(name, path):
            if dep.split(".")[0] not in MODEL_ALLOWED and _part(dep) not in (
                "_model",
                "_foundation",
            ):
                wrong.append(f"{name} -> {dep}")
    assert not wrong


def test_only_the_torch_boundary_imports_torch_in_the_core() -> None:
    """Torch is reached through recompprof._torch alone: no other core part imports it."""
    wrong = [
        f"{name} -> {dep}"
        for name, path in MODULES.items()
        if _part(name) in CORE and _part(name) != "_torch"
        for dep in _imports(name, path)
        if dep.split(".")[0] == "torch"
    ]
    assert not wrong


def test_no_function_is_more_complex_than_grade_c() -> None:
    """Every function and method scores radon grade C or better (cyclomatic complexity at most 20)."""
    worse = []
    for name, path in MODULES.items():
        for block in radon.cc_visit(path.read_text(encoding="utf-8")):
            for item in [block, *getattr(block, "closures", []), *getattr(block, "methods", [])]:
                if radon.cc_rank(item.complexity) not in "ABC":
                    worse.append(f"{name}:{item.lineno} {item.name} {item.complexity}")
    assert not sorted(set(worse))


def test_exporters_import_only_the_public_exporter_interface() -> None:
    """exporters/ reaches recompprof through ``recompprof.exporter`` alone: no ``recompprof._x`` module."""
    wrong = [
        f"{name} -> {dep}"
        for name, path in MODULES.items()
        if path.is_relative_to(ROOT / "exporters")
        for dep in _imports(name, path)
        if dep.split(".")[0] == "recompprof" and any(p.startswith("_") for p in dep.split(".")[1:])
    ]
    assert not wrong


def test_tests_share_helpers_through_helper_modules_and_never_import_benchmarks() -> None:
    """No file under tests/ imports a test file (shared helpers live in helper modules named for their
    concept), and none imports a benchmark or puts benchmarks/ on the import path (the benchmarks load
    test helpers, never the other way round)."""
    benchmarks = {"benchmarks", *(path.stem for path in (ROOT / "benchmarks").glob("*.py"))}
    path_edits = {"sys.path.insert", "sys.path.append", "sys.path.extend"}
    wrong = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in path_edits:
                if "benchmarks" in ast.unparse(node):
                    wrong.append(f"{where}:{node.lineno} puts benchmarks/ on sys.path")
                continue
            else:
                continue
            for top in {name.split(".")[0] for name in names}:
                if top.startswith("test_") or top in benchmarks:
                    wrong.append(f"{where}:{node.lineno} imports {top}")
    assert not wrong, sorted(wrong)
