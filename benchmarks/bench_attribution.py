"""Cost of attributing compile seconds to causes: per step, and on the compile path.

Two measurements in one process, on a real job (aot_eager, forward and backward, static shapes so every
recompile also compiles its backward lazily) with the event log and the Prometheus exporter on:

1. Per step: the attribution code (``CauseTracker.cause_of``) is counted while the job runs steady-state
   steps after its compiles. Any call there would be per-step work; the figure printed must be 0.
2. Compile path: every compile event the job produced is replayed through the attribution alone
   (a fresh ``CauseTracker`` plus the per-cause and cache counters ``Aggregates.add_compile`` updates)
   ``--repeat`` times; its mean cost per event is compared with the mean real compile duration of those
   events: ``1 + attribution / compile`` is the compile-time ratio the attribution adds (target <= 1.03,
   the overall compile-time target, bench_overhead.py's, it must stay inside). The whole recompprof compile-path handler
   (``session._recorder.on_torch_record``: reasons, event, aggregates, event log, exporters) is timed too, for scale.

It measures a private part, so it imports recompprof's private cause tracker and running totals
(``recompprof._model.causes``, ``recompprof._model.aggregates``) and calls the session's recorder directly.

    .venv/bin/python benchmarks/bench_attribution.py --recompiles 12 --steps 300 --repeat 2000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recompiles", type=int, default=12)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()

    import torch

    import recompprof
    from recompprof import Compile
    from recompprof._model import causes
    from recompprof._model.aggregates import Aggregates

    calls = Counter()
    original = causes.CauseTracker.cause_of

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["cause_of"] += 1
        return original(self, *args, **kwargs)

    causes.CauseTracker.cause_of = counted  # type: ignore[method-assign]
    handler_seconds: list[float] = []

    torch.manual_seed(0)
    torch._dynamo.config.recompile_limit = args.recompiles + 2
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)

    def step(batch: int) -> None:
        compiled(torch.randn(batch, 64)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with tempfile.TemporaryDirectory() as tmp:
        session = recompprof.attach(
            run_dir=Path(tmp),
            exporters=["prometheus"],
            prometheus_port=0,
            recompile_limit=args.recompiles + 2,
            step_source="manual",
        )
        inner = session._adapters.metrics._on_metrics

        def timed(metrics):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            inner(metrics)
            handler_seconds.append(time.perf_counter() - t0)

        session._adapters.metrics._on_metrics = timed
        for i in range(args.recompiles + 1):
            step(8 + i)  # a new static size each time: a recompile and its backward
        compile_calls = calls["cause_of"]
        for _ in range(args.steps):
            step(8)
            session.step()
        steady_calls = calls["cause_of"] - compile_calls
        events = [e for e in session.recent_events() if isinstance(e, Compile)]
        session.detach()
    causes.CauseTracker.cause_of = original  # type: ignore[method-assign]

    compile_seconds = statistics.mean(e.duration for e in events)
    recompiles = sum(e.is_recompile for e in events)
    backward = sum(e.backward for e in events)

    def replay() -> float:
        # The whole aggregate update (attribution included): an upper bound on what the attribution adds.
        agg = Aggregates()
        t0 = time.perf_counter()
        for event in events:
            agg.add_compile(event)
        return (time.perf_counter() - t0) / len(events)

    per_event = sorted(replay() for _ in range(args.repeat))
    attribution = statistics.median(per_event)
    handler = statistics.median(handler_seconds)
    print(
        f"job: {len(events)} compile events ({recompiles} recompiles, {backward} backward), "
        f"mean compile duration {compile_seconds * 1e3:.1f} ms; {args.steps} steady-state steps"
    )
    print(
        f"per step: CauseTracker.cause_of calls during steady-state steps = {steady_calls} "
        f"(during compiles: {compile_calls})"
    )
    print(
        f"compile path: aggregate update with attribution {attribution * 1e6:.2f} us per event (median of {args.repeat} replays, "
        f"min {per_event[0] * 1e6:.2f} us); whole recompprof handler {handler * 1e6:.0f} us per record (median)"
    )
    print(
        f"compile-time ratio added by the attribution: {1 + attribution / compile_seconds:.6f} (target <= 1.03); "
        f"whole handler: {1 + handler / compile_seconds:.4f}"
    )


if __name__ == "__main__":
    main()
