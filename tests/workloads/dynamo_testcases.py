"""Dynamo's own ``TestCase`` (which runs ``torch._dynamo.reset()`` in ``setUp`` and ``tearDown``) with recompprof
attached: ``python dynamo_testcases.py`` runs the cases below with unittest and prints ``OK`` when all pass.

Each case compiles with ``backend="eager"``, some recompile, one hits the recompile limit, one breaks its graph; compile ids restart at
``0/0`` in every case. torch's test helpers import ``expecttest`` (a test dependency of this repo).
"""

from __future__ import annotations

import unittest

import torch
import torch._dynamo.test_case

import recompprof


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def shifted(x: torch.Tensor, n: int) -> torch.Tensor:
    return x + n


def broken(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


class FirstCompiles(torch._dynamo.test_case.TestCase):
    def test_one_compile(self) -> None:
        self.assertEqual(torch.compile(double, backend="eager")(torch.ones(3)).sum().item(), 6.0)

    def test_two_frames(self) -> None:
        torch.compile(double, backend="eager")(torch.ones(3))
        torch.compile(shifted, backend="eager")(torch.ones(3), 1)


class Recompiles(torch._dynamo.test_case.TestCase):
    def test_value_recompiles(self) -> None:
        f = torch.compile(shifted, backend="eager", dynamic=False)
        for n in range(3):
            f(torch.ones(3), n)

    def test_size_recompiles(self) -> None:
        f = torch.compile(double, backend="eager", dynamic=False)
        for size in (2, 3, 4):
            f(torch.ones(size))


class RecompileLimit(torch._dynamo.test_case.TestCase):
    def test_limit_hit(self) -> None:
        f = torch.compile(shifted, backend="eager", dynamic=False)
        with torch._dynamo.config.patch(recompile_limit=1, automatic_dynamic_shapes=False):
            for n in range(3):
                f(torch.ones(3), n)


class GraphBreaks(torch._dynamo.test_case.TestCase):
    def test_graph_break(self) -> None:
        torch.compile(broken, backend="eager")(torch.ones(3))


if __name__ == "__main__":
    session = recompprof.attach()
    result = unittest.main(exit=False, verbosity=0).result
    session.detach()
    print("OK" if result.wasSuccessful() else "FAILED", flush=True)
