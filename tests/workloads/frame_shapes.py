"""The shapes Python wraps a function in, each a callable to compile and its arguments, for the generated frame suite.

Every function the user wrote is marked ``@user`` (the mark returns the function itself); every decorator's
wrapper is written here too, so a test can tell from the code objects that ran which user function each compiled
frame wraps. ``SHAPES`` maps a shape's name to a builder returning ``(callable, args)``; a graph break inside a
user function makes Dynamo compile the functions on the way down (wrappers included) as frames of their own.

Run as a script, it compiles every shape once under ``recompprof.attach()`` (settings from ``RECOMPPROF_*``), so
one run is also recorded by ``TORCH_TRACE``::

    RECOMPPROF_RUN_DIR=run TORCH_TRACE=trace python tests/workloads/frame_shapes.py
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

try:
    from .shape_decorators import imported_bare_decorator, imported_decorator
except ImportError:  # run as a script
    from shape_decorators import imported_bare_decorator, imported_decorator  # type: ignore[no-redef]

USER: set[types.CodeType] = set()  # the code of every function the user wrote
BARE: set[types.CodeType] = set()  # wrappers that do not say what they wrap (no functools.wraps)


def user(function: Any) -> Any:
    """Mark a function the user wrote (returned unchanged)."""
    USER.add(function.__code__)
    return function


def wraps_decorator(func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def named_args_decorator(func: Any) -> Any:
    @functools.wraps(func)
    def checked(self: Any, x: torch.Tensor) -> Any:
        return func(self, x)

    return checked


def bare_decorator(func: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


BARE.update(decorate(print).__code__ for decorate in (bare_decorator, imported_bare_decorator))


@user
def _break() -> None:
    torch._dynamo.graph_break()


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)


class Clip(Linear):
    """One decorator on two methods: the first in the class body is not the one compiled."""

    @wraps_decorator
    @user
    def get_text_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + 1

    @wraps_decorator
    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * 2


class ClipCalling(Clip):
    """Both decorated methods run: ``forward`` calls the other, which graph-breaks."""

    @wraps_decorator
    @user
    def get_text_features(self, x: torch.Tensor) -> torch.Tensor:
        _break()
        return self.proj(x) + 1

    @wraps_decorator
    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.get_text_features(x) * 2


class ClipNamed(Linear):
    """One decorator with named parameters on two methods, the second broken inside."""

    @named_args_decorator
    @user
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @named_args_decorator
    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _break()
        return self.proj(x)


class ClipBare(Linear):
    """One bare decorator (no ``functools.wraps``) on two methods."""

    @bare_decorator
    @user
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @bare_decorator
    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _break()
        return self.proj(x)


def other_decorator(func: Any) -> Any:
    @functools.wraps(func)
    def outer(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return outer


class Stacked(Linear):
    """Two decorators stacked on ``forward``, and the same two on another method before it."""

    @other_decorator
    @wraps_decorator
    @user
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @other_decorator
    @wraps_decorator
    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _break()
        return self.proj(x)


class SyncedModule(Linear):
    """Two ``contextlib.contextmanager`` methods share contextlib's ``helper``; only the second runs."""

    @contextlib.contextmanager
    @user
    def no_sync(self) -> Any:
        yield 1.0

    @contextlib.contextmanager
    @user
    def inside_forward(self) -> Any:
        yield 2.0

    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.inside_forward() as scale:
            _break()
            return self.proj(x) * scale


class Factory:
    @classmethod
    @user
    def scaled(cls, x: torch.Tensor) -> torch.Tensor:
        return x * 3

    @staticmethod
    @user
    def shifted(x: torch.Tensor) -> torch.Tensor:
        return x - 3

    @user
    def method(self, x: torch.Tensor) -> torch.Tensor:
        return x.cos()


class Base(Linear):
    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _break()
        return self.proj(x).relu()


class Inherits(Base):
    pass


class Overrides(Base):
    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 1


@user
def forward_hook(module: torch.nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
    _break()
    return output * 2


class Hooked(Linear):
    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


@user
def plain(x: torch.Tensor) -> torch.Tensor:
    return x.sin()


@wraps_decorator
@user
def first_decorated(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@wraps_decorator
@user
def second_decorated(x: torch.Tensor) -> torch.Tensor:
    _break()
    return x.tanh()


@bare_decorator
@user
def bare_decorated(x: torch.Tensor) -> torch.Tensor:
    _break()
    return x.exp()


@imported_decorator
@user
def first_imported(x: torch.Tensor) -> torch.Tensor:
    return x + 2


@imported_decorator
@user
def second_imported(x: torch.Tensor) -> torch.Tensor:
    _break()
    return x.tanh() * 2


@imported_bare_decorator
@user
def bare_imported(x: torch.Tensor) -> torch.Tensor:
    _break()
    return x.exp() * 2


class Masked(Linear):
    """A module calling decorated functions from the same module (as a model calls ``create_causal_mask``)."""

    @user
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return second_imported(self.proj(x)) + bare_imported(x)


@user
def scaled_sum(scale: float, x: torch.Tensor) -> torch.Tensor:
    return x.sum() * scale


@user
def enclosing(x: torch.Tensor) -> torch.Tensor:
    @user
    def doubled(y: torch.Tensor) -> torch.Tensor:
        _break()
        return y * 2

    return doubled(x) + 1


def _hooked() -> torch.nn.Module:
    module = Hooked()
    module.register_forward_hook(forward_hook)
    return module


Builder = Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]


def _x() -> torch.Tensor:
    return torch.randn(2, 4)


SHAPES: dict[str, Builder] = {
    "plain function": lambda: (plain, (_x(),)),
    "wraps decorator, two functions, second compiled": lambda: (second_decorated, (_x(),)),
    "bare decorator on a function": lambda: (bare_decorated, (_x(),)),
    "imported decorator, two functions, second compiled": lambda: (second_imported, (_x(),)),
    "imported bare decorator on a function": lambda: (bare_imported, (_x(),)),
    "imported decorators on functions a module calls": lambda: (Masked(), (_x(),)),
    "one decorator on two methods, second compiled": lambda: (Clip(), (_x(),)),
    "one decorator on two methods, both run": lambda: (ClipCalling(), (_x(),)),
    "named-argument decorator on two methods": lambda: (ClipNamed(), (_x(),)),
    "bare decorator on two methods": lambda: (ClipBare(), (_x(),)),
    "stacked decorators on two methods": lambda: (Stacked(), (_x(),)),
    "contextmanager methods": lambda: (SyncedModule(), (_x(),)),
    "bound method compiled directly": lambda: (Clip().forward, (_x(),)),
    "undecorated bound method": lambda: (Factory().method, (_x(),)),
    "classmethod": lambda: (Factory.scaled, (_x(),)),
    "staticmethod": lambda: (Factory.shifted, (_x(),)),
    "functools.partial": lambda: (functools.partial(scaled_sum, 0.5), (_x(),)),
    "nested function": lambda: (enclosing, (_x(),)),
    "lambda": lambda: (user(lambda x: x * 5), (_x(),)),
    "inherited forward": lambda: (Inherits(), (_x(),)),
    "overridden forward calling super": lambda: (Overrides(), (_x(),)),
    "forward hook": lambda: (_hooked(), (_x(),)),
}


def main() -> int:
    import recompprof

    torch.manual_seed(0)
    with recompprof.attach():
        for shape in sorted(SHAPES):
            function, args = SHAPES[shape]()
            torch.compile(function, backend="eager")(*args)
    print("WORKLOAD DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
