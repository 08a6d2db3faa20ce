"""Guard-failure reasons of code objects that CPython compares equal (docs/frames.md).

CPython's code equality ignores the file name, so one helper in two files (same bytecode, name and first
line) is two frames whose code objects compare equal, and torch keys its ``guard_failures`` lists by code
object: both frames' reasons land in one list. Each compile must still get its own frame's reasons.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

import recompprof
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, CompileStart
from recompprof._torch.versions import torch_info

# torch-facing: it reads torch's guard_failures lists, keyed by code object in every release. torch 2.4's
# reasons carry no compile id, so there the two frames' reasons cannot be told apart (docs/frames.md).
pytestmark = [
    pytest.mark.torch_compat,
    pytest.mark.skipif(
        torch_info().major_minor < (2, 5), reason="torch 2.4's reasons name no cache entry"
    ),
]

HELPER = """import torch


def helper(x, n):
    return x * n
"""


def _module(where: Path, name: str) -> ModuleType:
    where.mkdir()
    path = where / f"{name}.py"
    path.write_text(HELPER)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_equal_functions_in_two_files_keep_their_own_reasons(tmp_path: Path) -> None:
    """The same helper in two files, one recompiling on a size and the other on an int, in turns: each
    frame's recompiles (their compile starts too) carry all of its own guard failures and none of the
    other's, though torch's list mixes them."""
    first, second = _module(tmp_path / "a", "helper_a"), _module(tmp_path / "b", "helper_b")
    assert first.helper.__code__ == second.helper.__code__  # what makes torch's list one
    torch._dynamo.reset()
    compiled_a = torch.compile(first.helper, backend="eager", dynamic=False)
    compiled_b = torch.compile(second.helper, backend="eager", dynamic=False)
    with recompprof.attach(run_dir=tmp_path / "run"):
        compiled_a(torch.randn(2), 1)
        compiled_b(torch.randn(3), 1)
        for size, n in (
            (4, 2),
            (5, 3),
        ):  # interleaved: each frame fails while the other's list grows
            compiled_a(torch.randn(size), 1)  # a: the size changes
            compiled_b(torch.randn(3), n)  # b: the int changes
    events = list(read_run(tmp_path / "run"))
    by_file: dict[str, list[tuple[str, str]]] = {"helper_a.py": [], "helper_b.py": []}
    for e in events:
        if isinstance(e, Compile) and e.is_recompile:
            by_file[Path(e.frame.file).name] += [(r.category, r.subject) for r in e.reasons]
        elif isinstance(e, CompileStart) and e.is_recompile and e.reason is not None:
            by_file[Path(e.frame.file).name].append((e.reason.category, e.reason.subject))
    assert by_file["helper_a.py"] and set(by_file["helper_a.py"]) == {("size", "L['x']")}
    assert by_file["helper_b.py"] and set(by_file["helper_b.py"]) == {("python_constant", "L['n']")}
    recompiles = [e for e in events if isinstance(e, Compile) and e.is_recompile]
    # one reason per cache entry of its own frame: the second recompile of each fails two entries
    assert [len(e.reasons) for e in recompiles] == [1, 1, 2, 2]
