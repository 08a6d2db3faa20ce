"""Generated steady-state cases: small real jobs whose continuation says whether their recompiles recur.

Each case is a function of its own (generated source, so every case is a frame of its own), compiled with
a backend that counts torch's compiles, run in two phases: the warm phase meets the case's variants (a
bucket set, a flag's states, block instances, train and eval), the continuation goes on as the job would
(more requests, more steps). Torch's compiles in the continuation are the ground truth of steady state:
a case whose continuation compiles again has a cause that keeps costing compile time; one whose
continuation compiles nothing had a bounded set (or torch's own one-time rules). The counts are written
to ``truth.json`` (in the working directory) for ``tests/test_steady_verdicts.py``.

    RECOMPPROF_RUN_DIR=run TORCH_TRACE=trace python tests/workloads/steady_cases.py
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import recompprof

# Each case: its kind and its size. A few hundred compiles in all (docs/testing.md: small real runs).
CASES: dict[str, tuple[str, int]] = {
    "zero_one": ("zero_one", 8),
    **{f"buckets_{k}": ("buckets", k) for k in (2, 3, 5, 8)},
    **{f"states_{k}": ("states", k) for k in (2, 3)},
    **{f"instances_{n}": ("instances", n) for n in (3, 6, 10)},
    "modes": ("modes", 2),
    "frozen_regional": ("frozen_regional", 4),
    "parity_unspec": ("parity_unspec", 6),
    **{f"growing_{n}": ("growing", n) for n in (12, 20)},
    "counter": ("counter", 16),
    "instances_raised": ("instances", 12),
    "rebuilt": ("rebuilt", 20),
    "passed_raised": ("passed", 12),
    "widths_raised": ("widths", 12),
    "rates_raised": ("rates", 12),
}
# Cases run only when named, under a limit raised to INSTANCES_LIMIT: 12 block instances (compiled
# regionally, or passed to one compiled function; or compiled regionally with weights of 12 widths, or
# with 12 drop rates, floats torch does not specialise), and a block rebuilt every call with a new
# layer_idx (unbounded), where live and ingested verdicts differ by design (a trace names no
# instance: docs/steady-state.md).
NAMED_ONLY = frozenset(
    {"instances_raised", "rebuilt", "passed_raised", "widths_raised", "rates_raised"}
)
INSTANCES_LIMIT = 16
GROWING_LIMIT = (
    64  # the recompile_limit a growing case runs under (a job that raised it to keep compiling)
)

# The regionally compiled kinds: each block's class and its constructor's argument for block i (a
# layer_idx, a width: its weights' own shapes, a drop rate: a float torch makes a symbol).
REGIONAL: dict[str, tuple[str, Callable[[int], Any]]] = {
    "instances": ("Block", lambda i: i),
    "parity_unspec": ("Block", lambda i: i),
    "widths": ("Wide", lambda i: 4 + i),
    "rates": ("Rated", lambda i: 0.01 * (i + 1)),
}

COUNTS: dict[str, list[int]] = {}
PHASE: dict[str, int] = {}

SOURCE = """
import torch


def {name}_fn(x, state=None):
    if state is None:
        return x * 2 + 1
    return x * (len(str(state)) + 1) if state else x - 1


def {name}_apply(x, block):
    return block(x) - 1


class {name}_Block(torch.nn.Module):
    def __init__(self, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if self.layer_idx % 2 == 1:
            return self.lin(x) * 2
        return self.lin(x) + self.layer_idx


class {name}_Wide(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = torch.nn.Linear(4, width)
        self.out = torch.nn.Linear(width, 4)

    def forward(self, x):
        return self.out(self.lin(x).relu())


class {name}_Rated(torch.nn.Module):
    def __init__(self, rate):
        super().__init__()
        self.rate = rate
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):  # stochastic depth as timm writes it: the rate's value pins the mask
        keep = 1 - self.rate
        mask = x.new_empty(x.shape[0], 1).bernoulli_(keep)
        return self.lin(x) * mask / keep


class {name}_Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.training:
            return self.lin(x).relu() + self.calls
        return self.lin(x) + self.calls
"""


def generated(name: str, where: Path) -> Any:
    """The case's own module: its functions and classes are frames no other case shares."""
    path = where / f"case_{name}.py"
    # Lines of their own: code objects of equal bytecode, name and first line compare equal whatever
    # their file (torch keys its guard-failure lists by code object), so each case starts lower.
    path.write_text(
        "\n" * (3 * list(CASES).index(name)) + textwrap.dedent(SOURCE.format(name=name))
    )
    spec = importlib.util.spec_from_file_location(f"case_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def counting(name: str) -> Callable[..., Any]:
    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        COUNTS[name][PHASE[name]] += 1
        return gm.forward

    return backend


def run_case(name: str, kind: str, size: int, module: Any, opt_params: list[Any]) -> None:
    backend = counting(name)
    rng = random.Random(size)
    fn = getattr(module, f"{name}_fn")

    def warm() -> None:
        PHASE[name] = 0

    def go_on() -> None:
        PHASE[name] = 1

    if kind == "zero_one":  # torch's 0/1 specialisation: batches 8, 4, then 1, then any of 1..8
        f = torch.compile(fn, backend=backend)
        warm()
        for b in (8, 4, 1):
            f(torch.randn(b, 3))
        go_on()
        for _ in range(60):
            f(torch.randn(rng.randint(1, size), 3))
    elif kind == "buckets":  # a dynamic=False server padding to k buckets
        f = torch.compile(fn, backend=backend, dynamic=False)
        buckets = [2**i for i in range(size)]
        warm()
        for b in buckets:
            f(torch.randn(b, 3))
        go_on()
        for _ in range(100):
            f(torch.randn(rng.choice(buckets), 3))
            time.sleep(0.002)  # the request's own work
    elif kind == "states":  # a flag (or mode string) of k states
        f = torch.compile(fn, backend=backend)
        states = [True, False, "mode-b"][:size]
        warm()
        for s in states:
            f(torch.randn(4, 3), s)
        go_on()
        for _ in range(60):
            f(torch.randn(4, 3), rng.choice(states))
            time.sleep(0.002)
    elif kind in REGIONAL:  # regional compilation: each block compiled on its own, one code object
        block_class, argument = REGIONAL[kind]
        blocks = [getattr(module, f"{name}_{block_class}")(argument(i)) for i in range(size)]
        for block in blocks:
            block.compile(backend=backend)
        limit = INSTANCES_LIMIT if name in NAMED_ONLY else torch._dynamo.config.recompile_limit
        with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=limit):
            warm()
            h = torch.randn(5, 4)
            for block in blocks:
                h = block(h)
            go_on()
            for _ in range(20):
                h = torch.randn(5, 4)
                for block in blocks:
                    h = block(h)
                time.sleep(0.01)
    elif kind == "passed":  # one compiled function, called with each of k blocks in turn
        blocks = [getattr(module, f"{name}_Block")(i) for i in range(size)]
        apply = torch.compile(getattr(module, f"{name}_apply"), backend=backend)
        with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=INSTANCES_LIMIT):
            warm()
            for block in blocks:
                apply(torch.randn(5, 4), block)
            go_on()
            for _ in range(20):
                for block in blocks:
                    apply(torch.randn(5, 4), block)
                time.sleep(0.01)
    elif kind == "rebuilt":  # a block rebuilt every call with a new layer_idx: unbounded instances
        make = getattr(module, f"{name}_Block")
        with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=2 * size):
            warm()
            for i in range(size):
                if i == size // 2:
                    go_on()
                # a new model compiled every call; the previous one is gone (torch.compile(module)
                # holds no reference cycle, unlike module.compile(), which only the cyclic GC frees)
                torch.compile(make(i), backend=backend)(torch.randn(5, 4))
    elif (
        kind == "frozen_regional"
    ):  # a frozen embedding before regionally compiled blocks, new lengths
        emb = torch.nn.Embedding(16, 4)
        emb.weight.requires_grad_(False)
        blocks = [getattr(module, f"{name}_Block")(0) for _ in range(size)]
        for block in blocks:
            block.compile(backend=backend)
        params = [p for b in blocks for p in b.parameters()]
        opt = torch.optim.SGD(params, lr=0.01)
        warm()
        for length in (5, 7):
            h = emb(torch.randint(0, 16, (length,)))
            for block in blocks:
                h = block(h)
            h.sum().backward()
            opt.step()
            opt.zero_grad()
        go_on()
        for length in range(8, 20):
            h = emb(torch.randint(0, 16, (length,)))
            for block in blocks:
                h = block(h)
            h.sum().backward()
            opt.step()
            opt.zero_grad()
    elif kind == "modes":  # training steps, then the first eval; then both again
        model = getattr(module, f"{name}_Model")()
        model.calls = 0
        compiled = torch.compile(model, backend=backend)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def phase() -> None:
            model.train()
            for _ in range(3):
                model.calls = 0
                compiled(torch.randn(4, 4)).sum().backward()
                opt.step()
                opt.zero_grad()
            model.eval()
            with torch.no_grad():
                model.calls = 0
                compiled(torch.randn(4, 4))

        warm()
        phase()
        go_on()
        for _ in range(4):
            phase()
    elif (
        kind == "growing"
    ):  # dynamic=False, a new length every call, under a raised limit: unbounded
        f = torch.compile(fn, backend=backend, dynamic=False)
        with torch._dynamo.config.patch(recompile_limit=GROWING_LIMIT):
            warm()
            for length in range(1, size // 2 + 1):
                f(torch.randn(length, 3))
            go_on()
            for length in range(size // 2 + 1, size + 1):
                f(torch.randn(length, 3))
    elif kind == "counter":  # a module int attribute that changes every call: unbounded
        model = getattr(module, f"{name}_Model")()
        compiled = torch.compile(model, backend=backend)
        with torch._dynamo.config.patch(recompile_limit=GROWING_LIMIT), torch.no_grad():
            warm()
            for _ in range(size // 2):
                compiled(torch.randn(4, 4))
            go_on()
            for _ in range(size // 2):
                compiled(torch.randn(4, 4))
    else:
        raise SystemExit(f"unknown case kind {kind}")


def main() -> int:
    chosen = sys.argv[1:] or [name for name in CASES if name not in NAMED_ONLY]
    where = Path.cwd() / "generated_cases"
    where.mkdir(exist_ok=True)
    sys.path.insert(0, str(where))
    modules = {name: generated(name, where) for name in chosen}
    truth: dict[str, dict[str, Any]] = {}
    with recompprof.attach():
        for name in chosen:
            kind, size = CASES[name]
            COUNTS[name] = [0, 0]
            PHASE[name] = 0
            unspec = kind == "parity_unspec"
            with torch._dynamo.config.patch(allow_unspec_int_on_nn_module=unspec):
                run_case(name, kind, size, modules[name], [])
            truth[name] = {
                "kind": kind,
                "size": size,
                "warm": COUNTS[name][0],
                "after": COUNTS[name][1],
            }
    Path("truth.json").write_text(json.dumps(truth, indent=1))
    print("WORKLOAD DONE", json.dumps(truth), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
