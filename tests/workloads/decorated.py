"""A module-level function behind a ``functools.wraps`` decorator, as training libraries write them."""

from __future__ import annotations

import functools
from typing import Any

import torch


def logged(func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


@logged
def train_step(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sum()
