"""Functions defined inside functions, with graph breaks, called through a library: names and lines as written.

The grid is host × graph breaks (0 to 2): ``source()`` writes one module whose builders each define, inside
themselves, a nested function, a closure (it reads a variable of its builder), a method of a class defined
in the builder, or such a method reading a variable of its builder; each breaks the graph 0, 1 or 2 times,
so Dynamo compiles the function and one resume function per break (``torch_dynamo_resume_in_<name>_at_<line>``,
whose function torch also stores as a ``__resume_at_<offset>_<n>`` global of the user's module).

Every compiled function is called through a library placed in a ``site-packages`` folder of its own
(``fakelib.run``, which calls ``_inner``, which calls the compiled function), from one line of this file
marked ``# the user's line``, twice with two lengths (``dynamic=False``): each frame compiles, then recompiles.

Run as a script (``user_frames.py OUT_DIR``), it writes the module and the library under ``OUT_DIR``, runs the
grid under ``recompprof.attach()`` (settings from ``RECOMPPROF_*``, so ``TORCH_TRACE`` records the same run),
and writes ``OUT_DIR/expected.json``: for each compile id, the code torch compiled, read from torch's own
compile frame (its name and qualified name), never from recompprof.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from dynamo_compiling import compile_frame

HOSTS = ("nested", "closure", "method", "closure_method")
BREAKS = (0, 1, 2)

_LIBRARY = """
def run(fn, x):
    return _inner(fn, x)


def _inner(fn, x):
    return fn(x)
"""


def grid() -> list[tuple[str, int]]:
    return list(itertools.product(HOSTS, BREAKS))


def _body(breaks: int, indent: str, scaled: bool) -> str:
    """A body that breaks the graph ``breaks`` times, reading ``scale`` (a closure variable) when ``scaled``."""
    lines = [f"{indent}y = x * {'scale' if scaled else '2'}"]
    for n in range(breaks):
        lines += [f"{indent}torch._dynamo.graph_break()", f"{indent}y = y + {n + 1}"]
    lines.append(f"{indent}return y.sum() + x.shape[0]")
    return "\n".join(lines) + "\n"


def _builder(n: int, host: str, breaks: int) -> str:
    scaled = host.startswith("closure")
    head = f"def build_{n}():\n    scale = 3\n"
    if host in ("nested", "closure"):
        name = f"select_positive_{n}"
        return f"{head}\n    def {name}(x):\n{_body(breaks, ' ' * 8, scaled)}\n    return {name}\n"
    return (
        f"{head}\n    class Net{n}(torch.nn.Module):\n        def forward(self, x):\n"
        f"{_body(breaks, ' ' * 12, scaled)}\n    return Net{n}()\n"
    )


def source() -> str:
    """The generated module: one builder per combination, then ``BUILDERS``."""
    parts = ["import torch\n"]
    for n, (host, breaks) in enumerate(grid()):
        parts.append(f"\n\n# combination {n}: {host}, {breaks} graph break(s)\n")
        parts.append(_builder(n, host, breaks))
    parts.append(f"\n\nBUILDERS = [{', '.join(f'build_{n}' for n in range(len(grid())))}]\n")
    return "".join(parts)


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(out: Path) -> int:
    import torch

    import recompprof

    out = out.resolve()
    library = out / "lib" / "python3" / "site-packages" / "fakelib"
    library.mkdir(parents=True, exist_ok=True)
    (library / "__init__.py").write_text(_LIBRARY)
    (out / "user_frames_generated.py").write_text(source())
    module = _load("user_frames_generated", out / "user_frames_generated.py")
    fakelib = _load("fakelib", library / "__init__.py")
    expected: dict[str, Any] = {}
    combination = [-1]

    def on_start(args: Any = None) -> None:
        # newer torch passes the callback its CallbackArgs, 2.4 - 2.6 pass nothing; _compile's own
        # compile_id is the same id on every release.
        frame = compile_frame()
        if frame is not None:
            code = frame.f_locals["code"]
            compile_id = args.compile_id if args is not None else frame.f_locals["compile_id"]
            expected[str(compile_id)] = {
                "combination": combination[0],
                "co_name": code.co_name,
                "qualname": code.co_qualname,
                "file": code.co_filename,
                "line": code.co_firstlineno,
            }

    torch._dynamo.callback_handler.register_start_callback(on_start)
    with recompprof.attach():
        for n, build in enumerate(module.BUILDERS):
            combination[0] = n
            compiled = torch.compile(build(), backend="eager", dynamic=False)
            for length in (3, 4):
                fakelib.run(compiled, torch.randn(length))  # the user's line
    (out / "expected.json").write_text(
        json.dumps({"grid": [list(c) for c in grid()], "compiles": expected})
    )
    print("WORKLOAD DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
