"""Per-step cost of recompprof, measured directly: the step hook and a compiled call.

recompprof's only per-step work is the optimizer step hook (``recompprof/_torch/steps.py``). Three
measurements, each interleaved (blocks alternate A/B, order flipped every round) so machine noise hits
both sides alike, and each timed in CPU time of this thread (``time.thread_time_ns``: other processes'
load does not count) and wall time:

1. hook alone: ``StepCounter._on_step`` called ``--calls`` times against an empty method with the same
   signature (the baseline call): the hook's own cost per call, in ns.
2. through torch: ``optimizer.step()`` of an optimizer whose update does nothing (so torch's step wrapper
   and hook dispatch are all there is) with the counter's global hook registered (``StepCounter.install``,
   what ``attach()`` does) vs not, in short interleaved blocks: the cost the hook adds to a training step.
3. compiled call: a ``torch.compile``d function (eager backend) called with ``recompprof.attach()``
   (no exporters, no event log) vs detached: anything else recompprof might add per call (guard
   evaluation, logging hooks). Expected 0 within noise.

Target: <= 1 us added per training step. Measurements 1 and 2 call the private step counter
(``recompprof._torch.steps.StepCounter``) directly.

    .venv/bin/python benchmarks/bench_step_hook.py            # ~1 minute
    .venv/bin/python benchmarks/bench_step_hook.py --calls 2000000 --torch-calls 400000
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from collections.abc import Callable


def interleaved(
    a: Callable[[int], None],
    b: Callable[[int], None],
    calls: int,
    blocks: int,
    setup: Callable[[bool], None] | None = None,
) -> dict[str, list[float]]:
    """Per-call CPU and wall ns of ``a`` and ``b`` (each runs ``calls`` calls in ``blocks`` blocks, ABBA...)."""
    per_block = max(calls // blocks, 1)
    out: dict[str, list[float]] = {"a_cpu": [], "b_cpu": [], "a_wall": [], "b_wall": []}
    for r in range(blocks):
        for which in ("a", "b") if r % 2 == 0 else ("b", "a"):
            if setup is not None:
                setup(which == "b")
                gc.collect()  # what attach()/detach() allocated or freed is not collected inside the next block
            fn = a if which == "a" else b
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            fn(per_block)
            c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            out[f"{which}_cpu"].append((c1 - c0) / per_block)
            out[f"{which}_wall"].append((w1 - w0) / per_block)
    if setup is not None:
        setup(False)
    return out


def report(
    title: str, label_a: str, label_b: str, res: dict[str, list[float]], calls: int
) -> float:
    """Print medians, the median of paired differences (b - a) and the fastest blocks (the least disturbed
    by other load); returns the paired CPU difference in ns."""
    print(f"\n{title} ({calls:,} calls per variant, {len(res['a_cpu'])} block pairs)")
    diff_cpu = 0.0
    for clock in ("cpu", "wall"):
        a, b = res[f"a_{clock}"], res[f"b_{clock}"]
        diffs = [y - x for x, y in zip(a, b)]
        q = statistics.quantiles(diffs, n=4)
        print(
            f"  {clock:4}: {label_a} {statistics.median(a):8.1f} ns/call, {label_b} {statistics.median(b):8.1f} ns/call; "
            f"added {statistics.median(diffs):+7.1f} ns (paired median; quartiles {q[0]:+.1f} to {q[2]:+.1f}), "
            f"ratio {statistics.median(b) / statistics.median(a):.4f}; fastest blocks {min(a):.1f} vs {min(b):.1f} "
            f"({min(b) - min(a):+.1f} ns)"
        )
        if clock == "cpu":
            diff_cpu = statistics.median(diffs)
    return diff_cpu


class _Empty:
    def _on_step(self, optimizer: object, args: object, kwargs: object) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2_000_000, help="hook-alone calls per variant")
    parser.add_argument(
        "--torch-calls", type=int, default=400_000, help="optimizer.step() calls per variant"
    )
    parser.add_argument(
        "--compiled-calls", type=int, default=100_000, help="compiled-function calls per variant"
    )
    parser.add_argument("--blocks", type=int, default=20)
    args = parser.parse_args()

    import torch

    import recompprof
    from recompprof._torch.steps import StepCounter

    torch.set_num_threads(1)
    param = torch.nn.Parameter(torch.zeros(1))

    class NoUpdate(torch.optim.Optimizer):
        """An optimizer whose update does nothing: optimizer.step() is torch's wrapper and its hooks only."""

        def __init__(self) -> None:
            super().__init__([param], {})

        def step(self, closure=None):  # type: ignore[no-untyped-def, override]
            return None

    opt = NoUpdate()
    call_args: tuple[object, ...] = ()
    call_kwargs: dict[str, object] = {}

    # 1. The hook alone, against an empty call of the same shape.
    counter, empty = StepCounter(), _Empty()
    counter._on_step(
        opt, call_args, call_kwargs
    )  # adopt the optimizer, as the first real step does

    def run_empty(n: int) -> None:
        f = empty._on_step
        for _ in range(n):
            f(opt, call_args, call_kwargs)

    def run_hook(n: int) -> None:
        f = counter._on_step
        for _ in range(n):
            f(opt, call_args, call_kwargs)

    hook_ns = report(
        "1. hook alone: StepCounter._on_step vs an empty method",
        "empty",
        "hook",
        interleaved(run_empty, run_hook, args.calls, args.blocks),
        args.calls,
    )

    # 2. optimizer.step() through torch, with the step counter's hook registered vs not.
    installed = StepCounter()

    def hook_on(on: bool) -> None:
        installed.uninstall()
        if on:
            installed.install()

    def run_steps(n: int) -> None:
        s = opt.step
        for _ in range(n):
            s()

    torch_ns = report(
        "2. optimizer.step() (no-op update): hook not registered vs registered",
        "without",
        "with",
        interleaved(run_steps, run_steps, args.torch_calls, args.blocks * 10, setup=hook_on),
        args.torch_calls,
    )
    assert installed.step > 0 and installed._owner is not None and installed._owner() is opt

    # 3. A compiled call, detached vs attached (the whole of attach(), not just the step hook).
    tmp = tempfile.mkdtemp()
    state: dict[str, object] = {"session": None}

    def attach(on: bool) -> None:
        session = state["session"]
        if session is not None:
            session.detach()  # type: ignore[attr-defined]
            state["session"] = None
        if on:
            state["session"] = recompprof.attach(run_dir=tmp, exporters=[], event_log=False)

    fn = torch.compile(lambda x: x + 1, backend="eager")
    x = torch.zeros(1)
    fn(x)

    def run_compiled(n: int) -> None:
        for _ in range(n):
            fn(x)

    compiled_ns = report(
        "3. compiled call (eager backend): detached vs attached",
        "detached",
        "attached",
        interleaved(run_compiled, run_compiled, args.compiled_calls, args.blocks * 2, setup=attach),
        args.compiled_calls,
    )

    print(
        f"\nadded per training step (CPU): hook alone {hook_ns:+.0f} ns, through optimizer.step() {torch_ns:+.0f} ns, "
        f"per compiled call {compiled_ns:+.0f} ns (target <= 1000 ns per step: "
        f"{'met' if max(hook_ns, torch_ns) <= 1000 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
