"""Decorators imported by ``frame_shapes.py`` from another module, as transformers' ``deprecate_kwarg`` is: the
decorated function is a global of the module that uses the decorator, not of the decorator's own."""

from __future__ import annotations

import functools
from typing import Any


def imported_decorator(func: Any) -> Any:
    @functools.wraps(func)
    def wrapped_func(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapped_func


def imported_bare_decorator(func: Any) -> Any:
    def wrapped_func(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapped_func
