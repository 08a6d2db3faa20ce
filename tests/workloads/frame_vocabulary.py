"""A generated grid of the shapes Python wraps a function in, compiled and called, with what each compile ran.

The grid is decorator kind × stacking depth (0 to 2) × host: ``SOURCE`` writes one Python module holding every
combination as user code would (classes, decorators written in the class body, a graph break inside the
function the user wrote, so Dynamo compiles each wrapper on the way down as a frame of its own). Decorator
kinds: ``functools.wraps`` ``*args/**kwargs`` (transformers' ``can_return_tuple``), bare (no ``wraps``),
named parameters, a ``deprecate_kwarg``-style factory (``wrapped_func(*args, **kwargs)``, transformers 5.24),
and ``wrapper(self, *args, **kwargs)``. Hosts: a module-level function, a method, one stack on two methods of a
class (the second compiled), one stack on two methods where the compiled one calls the other (no graph
break: one compile of the outermost wrapper, which reads class attributes in both), a method inherited by a
subclass, an overriding ``forward`` calling ``super()``,
a property getter returning the loss function (transformers' ``loss_function``), and a bound method held in
an instance attribute (``self.loss_function = self.compute_loss``).

Run as a script (``frame_vocabulary.py OUT_DIR``), it writes the module, compiles every combination
(``backend="eager"``) under ``recompprof.attach()`` (settings from ``RECOMPPROF_*``, so ``TORCH_TRACE`` records
the same run), and writes ``OUT_DIR/expected.json``: for each compile id, the function that compile ran,
read from torch's own compile frame (its code object, the closure cells it compiles with, the first argument)
and the generated module's table of user functions, never from recompprof.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import types
from pathlib import Path
from typing import Any

from dynamo_compiling import compile_frame

KINDS = ("wraps", "bare", "named", "deprecate", "selfargs")
DEPTHS = (0, 1, 2)
HOSTS = ("function", "method", "shared", "calls", "inherited", "override", "property", "bound")

_DECORATORS = """
import functools
import torch


def wraps(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def bare(func):
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def named_method(func):
    @functools.wraps(func)
    def checked(self, x):
        return func(self, x)

    return checked


def named_function(func):
    @functools.wraps(func)
    def checked(x):
        return func(x)

    return checked


def deprecate(old_name, new_name):
    def decorator(func):
        @functools.wraps(func)
        def wrapped_func(*args, **kwargs):
            if old_name in kwargs:
                kwargs[new_name] = kwargs.pop(old_name)
            return func(*args, **kwargs)

        return wrapped_func

    return decorator


def selfargs(func):
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        return func(self, *args, **kwargs)

    return wrapper


def _break():
    torch._dynamo.graph_break()


class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
"""


def _decorator_lines(stack: tuple[str, ...], method: bool, indent: str) -> str:
    spelled = {
        "wraps": "@wraps",
        "bare": "@bare",
        "named": "@named_method" if method else "@named_function",
        "deprecate": '@deprecate("hidden", "x")',
        "selfargs": "@selfargs",
    }
    return "".join(f"{indent}{spelled[kind]}\n" for kind in stack)


def _combination(n: int, stack: tuple[str, ...], host: str) -> tuple[str, str]:
    """Source of combination ``n`` and the expression building ``(callable, args)`` for it."""
    deco = _decorator_lines(stack, host != "function" and host != "property", "    ")
    top = _decorator_lines(stack, False, "")
    x = "torch.randn(2, 4)"
    if host == "function":
        return (
            f"{top}def f{n}(x):\n    _break()\n    return x.sin() + {n}\n",
            f"(f{n}, ({x},))",
        )
    if host == "method":
        body = f"{deco}    def forward(self, x):\n        _break()\n        return self.proj(x) + {n}\n"
        return f"class M{n}(Base):\n{body}", f"(M{n}(), ({x},))"
    if host == "shared":
        body = (
            f"{deco}    def encode(self, x):\n        return self.proj(x) - {n}\n\n"
            f"{deco}    def forward(self, x):\n        _break()\n        return self.proj(x) * {n}\n"
        )
        return f"class M{n}(Base):\n{body}", f"(M{n}(), ({x},))"
    if host == "calls":  # one stack on two methods, one calling the other: one compile
        body = (
            f"    shift = {n}\n    scale = 2\n\n"
            f"{deco}    def encode(self, x):\n        return self.proj(x) - self.shift\n\n"
            f"{deco}    def forward(self, x):\n        return self.encode(x) * self.scale\n"
        )
        return f"class M{n}(Base):\n{body}", f"(M{n}(), ({x},))"
    if host == "inherited":
        body = f"{deco}    def forward(self, x):\n        _break()\n        return self.proj(x).relu() + {n}\n"
        return f"class P{n}(Base):\n{body}\n\nclass M{n}(P{n}):\n    pass\n", f"(M{n}(), ({x},))"
    if host == "override":
        parent = f"class P{n}(Base):\n    def forward(self, x):\n        _break()\n        return self.proj(x) + {n}\n"
        child = f"class M{n}(P{n}):\n{deco}    def forward(self, x):\n        return super().forward(x) * 2\n"
        return f"{parent}\n\n{child}", f"(M{n}(), ({x},))"
    if host == "property":
        loss = f"{top}def loss{n}(x):\n    _break()\n    return x.pow(2).mean() + {n}\n"
        cls = (
            f"class M{n}(Base):\n    @property\n    def loss_function(self):\n        return loss{n}\n\n"
            f"    def forward(self, x):\n        return self.loss_function(self.proj(x))\n"
        )
        return f"{loss}\n\n{cls}", f"(M{n}(), ({x},))"
    # bound: a method held, bound, in an instance attribute and called through it
    cls = (
        f"class M{n}(Base):\n    def __init__(self):\n        super().__init__()\n"
        f"        self.loss_function = self.compute_loss\n\n"
        f"{deco}    def compute_loss(self, x):\n        _break()\n        return x.pow(2).mean() + {n}\n\n"
        f"    def forward(self, x):\n        return self.loss_function(self.proj(x))\n"
    )
    return cls, f"(M{n}(), ({x},))"


def grid() -> list[tuple[tuple[str, ...], str]]:
    """Every (decorator stack, host) combination: kinds at each depth, on each host."""
    stacks = [s for depth in DEPTHS for s in itertools.product(KINDS, repeat=depth)]
    # "calls" compiles one frame, the outermost wrapper; under a bare wrapper (no __wrapped__) the function it
    # runs is in no table this workload reads it from, so such a combination would compile nothing known.
    return [
        (stack, host)
        for stack in stacks
        for host in HOSTS
        if not (host == "calls" and "bare" in stack)
    ]


def source() -> str:
    """The generated module: the decorators, then one block per combination, then ``COMBINATIONS``."""
    parts, builders = [_DECORATORS], []
    for n, (stack, host) in enumerate(grid()):
        code, builder = _combination(n, stack, host)
        parts.append(f"\n\n# combination {n}: {host}, {' > '.join(stack) or 'undecorated'}\n{code}")
        builders.append(f"    lambda: {builder},")
    parts.append("\n\nCOMBINATIONS = [\n" + "\n".join(builders) + "\n]\n")
    return "".join(parts)


def _first_argument(code: types.CodeType, f_locals: dict[str, Any]) -> Any:
    if code.co_argcount:
        return f_locals.get(code.co_varnames[0])
    args = f_locals.get(code.co_varnames[code.co_kwonlyargcount]) if code.co_varnames else None
    return args[0] if isinstance(args, tuple) and args else None


def _ran(
    module: types.ModuleType, code: types.CodeType, closure: tuple[Any, ...] | None
) -> tuple[types.FunctionType | None, bool]:
    """The user function this compile runs, following the ``func`` cell of each wrapper's closure down from
    the compiled code; and whether a bare wrapper (no ``functools.wraps``) lies on the way."""
    user = {
        v.__code__: v
        for v in _functions(module)
        if v.__module__ == module.__name__ and "<locals>" not in v.__qualname__
    }
    if code in user:
        return user[code], False
    bare = False
    cells = dict(zip(code.co_freevars, closure or (), strict=False))
    for _ in range(8):
        cell = cells.get("func")
        if cell is None:
            return None, bare
        bare = bare or code.co_qualname.startswith("bare.")
        function = cell.cell_contents
        if function.__code__ in user:
            return function, bare
        code = function.__code__
        cells = dict(zip(code.co_freevars, function.__closure__ or (), strict=False))
    return None, bare


def _functions(module: types.ModuleType) -> list[types.FunctionType]:
    """Every user function of the module: module-level, in class bodies, and property getters."""
    found: list[types.FunctionType] = []
    for value in vars(module).values():
        found.append(value)
        if isinstance(value, type):
            for attr in vars(value).values():
                found.append(getattr(attr, "fget", attr))
    out = []
    for value in found:
        while hasattr(value, "__wrapped__"):  # the user function under its decorators
            value = value.__wrapped__
        if isinstance(value, types.FunctionType):
            out.append(value)
    return out


def expected_name(function: types.FunctionType, first: Any) -> tuple[str, str | None]:
    """``(name, owner)``: a method by the class of the instance it ran on, else its qualified name."""
    defining = function.__qualname__.rpartition(".")[0]
    if (
        defining
        and not isinstance(first, type)
        and defining in {k.__qualname__ for k in type(first).__mro__}
    ):
        return f"{type(first).__name__}.{function.__name__}", type(first).__name__
    return function.__qualname__, None


def main(out: Path) -> int:
    import torch

    import recompprof

    out = out.resolve()  # the generated module's frames name it by its absolute path
    out.mkdir(parents=True, exist_ok=True)
    path = out / "vocab_generated.py"
    path.write_text(source())
    spec = importlib.util.spec_from_file_location("vocab_generated", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vocab_generated"] = module
    spec.loader.exec_module(module)
    torch._dynamo.config.recompile_limit = (
        10_000  # one wrapper code object serves every combination
    )
    torch._dynamo.config.accumulated_recompile_limit = 100_000
    expected: dict[str, Any] = {}
    combination = [-1]

    def on_start(args: Any) -> None:
        frame = compile_frame()
        if frame is None:
            return
        code, closure = frame.f_locals["code"], frame.f_locals.get("closure")
        function, bare = _ran(module, code, closure)
        if function is None:
            return
        name, owner = expected_name(function, _first_argument(code, frame.f_locals["locals"]))
        expected[str(args.compile_id)] = {
            "combination": combination[0],
            "name": name,
            "owner": owner,
            "file": function.__code__.co_filename,
            "line": function.__code__.co_firstlineno,
            "bare": bare,
            "code": [code.co_filename, code.co_firstlineno, code.co_name],
        }

    torch._dynamo.callback_handler.register_start_callback(on_start)
    with recompprof.attach():
        for n, build in enumerate(module.COMBINATIONS):
            combination[0] = n
            function, args = build()
            torch.compile(function, backend="eager")(*args)
    (out / "expected.json").write_text(
        json.dumps({"grid": [list(c) for c in grid()], "compiles": expected})
    )
    print("WORKLOAD DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
