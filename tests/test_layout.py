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
# History (the Parquet lake) stands on analysis: it reads runs and the fold's counting rules.
# The faces (the CLI, integrations, testing, the public package) sit on top and may import any part.
CORE = ("_foundation", "_model", "_eventlog", "_torch", "_analysis", "_capture", "_history")
RANK = {
    "_foundation": 0,
    "_model": 1,
    "_eventlog": 2,
    "_torch": 2,
    "_analysis": 3,
    "_capture": 3,
    "_history": 4,
}
FOUNDATION = {"recompprof._errors", "recompprof._internal", "recompprof._version"}
# What the event model and its rules may import: no torch and no I/O.
MODEL_ALLOWED = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "functools",
    "hashlib",
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


# The offline wing's layers, lowest first: a layer imports only layers below it (and itself). The
# models (the report and its fold; the per-rank state ``watch`` shows) are the ground; the commands
# (runs, check, diff) sit on top of everything.
OFFLINE = "recompprof._analysis."
OFFLINE_RANK = {"report": 0, "watching": 0, "trace": 1, "render": 1}


def _offline_layer(name: str) -> str | None:
    if not name.startswith(OFFLINE):
        return None
    layer = name.removeprefix(OFFLINE).split(".")[0]
    return layer if layer in OFFLINE_RANK else "commands"


def test_the_offline_layers_import_one_way() -> None:
    """The models import no renderer, no trace reader, no command and not each other; the renderers and
    the trace reader stand on the models and not on each other; only the commands use them all."""
    wrong = []
    for name, deps in GRAPH.items():
        layer = _offline_layer(name)
        if layer is None or layer == "commands":
            continue
        for dep in deps:
            other = _offline_layer(dep)
            if other is None or other == layer:
                continue
            if other == "commands" or OFFLINE_RANK[other] >= OFFLINE_RANK[layer]:
                wrong.append(f"{name} -> {dep}")
    assert not wrong


# The modules a user imports: only they hand on names defined elsewhere.
FACES = {"recompprof", "recompprof.exporter", "recompprof.testing", "recompprof.integrations"}


def _defined(path: Path) -> set[str]:
    """The names a module binds itself (functions, classes, assignments), at any depth of its top-level
    statements (a definition under ``if``/``try`` counts); not the names it imports."""
    names = set()
    for top in ast.parse(path.read_text(encoding="utf-8")).body:
        for node in ast.walk(top):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def test_names_are_imported_from_the_module_that_defines_them() -> None:
    """A name is imported from the module that defines it; a private module never passes on a name it
    imported (re-exports are for the package faces alone), so moving a name moves its imports with it."""
    defined = {name: _defined(path) for name, path in MODULES.items()}
    wrong = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module not in MODULES:
                continue
            if node.module in FACES:
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}" in MODULES
                if not submodule and alias.name not in defined[node.module]:
                    wrong.append(f"{name}: {alias.name} from {node.module}")
    assert not wrong
