"""docs/cli.md's error table covers every error class recompprof defines, and a lake error ends the real
command with the code the table gives it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from recorded_runs import cli

from recompprof._cli import main as cli_module
from recompprof._history.names import LakeError

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cli.md"
# A row of the error table: | `dotted.or.bare.Class` (remarks) | code | when |
_ROW = re.compile(r"^\| `(?:[\w.]*\.)?(\w+)`[^|]*\| (\d+) \|", re.MULTILINE)


def _documented() -> dict[str, int]:
    return {name: int(code) for name, code in _ROW.findall(DOC.read_text(encoding="utf-8"))}


def _error_classes() -> dict[str, set[str]]:
    """Every class in recompprof's and the exporters' sources that derives from RecompprofError, with the
    names of its bases (read from the source: no optional dependency has to be importable)."""
    bases: dict[str, set[str]] = {}
    for path in [*(ROOT / "recompprof").rglob("*.py"), *(ROOT / "exporters").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                named = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                bases.setdefault(node.name, set()).update(named)
    errors = {"RecompprofError"}
    while grown := {c for c, named in bases.items() if named & errors} - errors:
        errors |= grown
    return {name: bases[name] for name in errors - {"RecompprofError"}}


def test_every_error_class_has_a_row_or_a_documented_base() -> None:
    """Each RecompprofError class is a row of the table, or inherits a row's code from a documented base
    (a subclass of RunError exits as RunError does), or is a base all of whose subclasses are rows."""
    documented = set(_documented())
    errors = _error_classes()
    assert {"LakeError", "RunError", "ConfigError"} <= set(errors)

    def covered(name: str) -> bool:
        return name in documented or bool(errors[name] & documented)

    children = {name: {c for c, named in errors.items() if name in named} for name in errors}
    missing = [
        name
        for name in errors
        if not covered(name) and not (children[name] and all(map(covered, children[name])))
    ]
    assert not missing, missing


def _record_a_run(run: Path) -> None:
    """A real run: one function compiled and recompiled under attach()."""
    import torch

    import recompprof

    def scale(x: torch.Tensor, k: int) -> torch.Tensor:
        return x * k

    torch._dynamo.reset()
    with recompprof.attach(run_dir=run):
        compiled = torch.compile(scale, backend="eager")
        for k in (2, 3):
            compiled(torch.ones(2), k)


def test_a_lake_error_exits_with_its_documented_code(tmp_path: Path) -> None:
    """A lake that does not exist (history) and a lake path that is a file (export) each end the real
    command with one ``recompprof: error:`` line and the code the table gives LakeError."""
    code = _documented()["LakeError"]
    assert cli_module.exit_code(LakeError("x")) == code == cli_module.EXIT_USAGE
    missing = tmp_path / "no-lake"
    done = cli("history", "top-causes", "--lake", str(missing))
    assert done.returncode == code
    assert done.stderr.splitlines() == [
        f"recompprof: error: {missing}: no such lake (the path does not exist)"
    ]
    run = tmp_path / "run"
    _record_a_run(run)
    a_file = tmp_path / "lake-file"
    a_file.write_text("")
    done = cli("export", str(run), "--to", str(a_file))
    assert done.returncode == code, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"recompprof: error: {a_file}: cannot write {a_file}/v1/")
