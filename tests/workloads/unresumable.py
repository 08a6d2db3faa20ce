"""Graph breaks torch cannot resume from (the whole frame then runs eagerly), as library code makes them.

Hugging Face's ``logger.warning_once`` is an ``lru_cache``-wrapped function that Dynamo cannot trace;
called inside a ``try`` block or a context manager Dynamo cannot carry across a break, it makes torch
skip the frame instead of resuming after the break.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(None)
def warning_once(message: str) -> None:
    print(message)


def in_try(x: torch.Tensor) -> torch.Tensor:
    try:
        warning_once("careful")  # unresumable: a break inside try
        return x + 1
    finally:
        pass


def in_hooks(x: torch.Tensor) -> torch.Tensor:
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        warning_once("hooks")
        return x * 2


def resumable(x: torch.Tensor) -> torch.Tensor:
    x = x + 1
    print("resumable")  # a plain break torch resumes after
    return x * 3


def run() -> None:
    for fn in (in_try, in_hooks, resumable):
        torch.compile(fn, backend="eager")(torch.ones(2))
