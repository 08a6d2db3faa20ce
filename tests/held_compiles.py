"""A compile held open: a small model whose recompile blocks in its backend until the test releases it,
so a test can look at a session while Dynamo's compile is still running (real torch.compile)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

import recompprof


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1


class HeldBackend:
    """A backend that holds its second compile (the recompile) open until released: Dynamo's compile
    stays running meanwhile."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls > 1:
            self.entered.set()
            self.release.wait(60)
        return gm.forward

    def __deepcopy__(self, memo: dict[int, object]) -> HeldBackend:
        return self  # one backend, shared (Lightning, once imported, deep-copies torch.compile's arguments)


@contextlib.contextmanager
def held_compile(
    **settings: object,
) -> Iterator[tuple[recompprof.Session, HeldBackend, threading.Thread]]:
    """A session, and a compiled model whose recompile runs (held) in a background thread."""
    session = recompprof.attach(**settings)
    backend = HeldBackend()
    model = torch.compile(Model(), backend=backend, dynamic=False)
    model(torch.ones(4))
    worker = threading.Thread(target=model, args=(torch.ones(6),))
    worker.start()
    try:
        yield session, backend, worker
    finally:
        backend.release.set()
        worker.join(60)
