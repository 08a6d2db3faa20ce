"""Monitor mode's added compile work, as CPU time inside the compile path.

A real Inductor job (MLP forward and backward, static shapes: every new batch size is a recompile and
a backward compile) runs ``--shapes`` compiling steps per round, alternately detached and attached
(monitor mode, event log, Prometheus endpoint and OTel to a local receiver), ``--rounds`` rounds, order
flipped every round, ``torch._dynamo.reset()`` before each. Inductor's FX-graph and AOTAutograd caches
are off (each round really lowers and generates code; the C++ build is cached on disk for both sides).

While attached, every entry point recompprof has on the compile path is timed in CPU time of the
compiling thread (``time.thread_time_ns``), by wrappers this benchmark adds around recompprof's private
parts (the session's adapters, recorder and writer; production code is not changed):

- the compile-record hook (``CompileMetricsTap._take``: event building, reasons, event log, exporters'
  ``on_event``; the aggregates' fold where a full batch falls inside it);
- the ``torch._logging.trace_structured`` wrapper (graph breaks), called ~100 times per compile: the
  calls of each kind (artifact or not) are counted during the compiles and multiplied by the wrapper's
  cost per call measured around a no-op in the same run (timing each call directly is also printed, but
  rests on subtracting timer costs about as large as the wrapper itself);
- the compile-start callback (``reconcile``), and the compile start and end (the ``compile_start``
  event with its fan-out: event log, exporters, where the OTel exporter opens the compile's root span;
  the running compile the live status reads). Its fan-out is printed on its own line.

The session folds events into its aggregates when the totals are read (a scrape, ``snapshot()``, the
session's end) or every ``FOLD_EVERY`` events: the fold's CPU is printed on its own line, wherever it ran.

Printed: recorder CPU per compile record (target <= 1 ms), the compile start and end per compile_start
event (target <= 0.3 ms), and the recorder's CPU as a share of the compiling steps' CPU time (target <=
0.5 %), the other threads' CPU during compiles (attached - detached), and the wall
and CPU ratio attached / detached of the compiling steps (paired per round).

    .venv/bin/python benchmarks/bench_compile_cpu.py                      # ~1-2 minutes
    .venv/bin/python benchmarks/bench_compile_cpu.py --rounds 4 --shapes 4 --profile   # + cProfile of the recorder
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import statistics
import tempfile
import time
from collections import Counter
from typing import Any

from _common import otel_to_receiver, process_cpu


def inner_bias_ns(wrap: Any, n: int = 100_000) -> float:
    """What an outer timer sees of ``wrap(fn)`` beyond what the inner timer books, per call (wrapper, clock reads)."""
    booked: Counter[str] = Counter()

    def noop(*a: Any, **k: Any) -> None:
        return None

    inner = wrap(noop, booked)
    clock = time.thread_time_ns
    t0 = clock()
    for _ in range(n):
        inner("artifact", payload_fn=None)
    return (clock() - t0 - booked["trace_inner"]) / n


def hook_cost_ns(n: int = 50_000) -> dict[str, float]:
    """CPU ns recompprof's trace_structured wrapper adds per call, by kind, around a no-op torch function."""
    import torch._logging as torch_logging

    from recompprof._torch.graph_breaks import GraphBreakTap

    def noop(*a: Any, **k: Any) -> None:
        return None

    saved = torch_logging.trace_structured
    torch_logging.trace_structured = noop
    tap = GraphBreakTap(lambda payload, compile_id: None)
    tap.install()
    hooked = torch_logging.trace_structured
    out: dict[str, list[float]] = {"artifact": [], "other": []}

    def metadata() -> dict[str, str]:
        return {"name": "inductor_output_code", "filename": "x.py"}

    def payload() -> str:
        return "..."

    try:
        for _ in range(5):
            for kind, name in (("artifact", "artifact"), ("other", "inductor_post_grad_graph")):
                per = []
                for fn in (noop, hooked):
                    t0 = time.thread_time_ns()
                    for _ in range(n):
                        fn(name, metadata_fn=metadata, payload_fn=payload)
                    per.append((time.thread_time_ns() - t0) / n)
                out[kind].append(per[1] - per[0])
    finally:
        tap.uninstall()
        torch_logging.trace_structured = saved
    return {kind: statistics.median(v) for kind, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds; each runs both variants")
    parser.add_argument(
        "--shapes", type=int, default=3, help="compiling steps (batch sizes) per variant and round"
    )
    parser.add_argument("--backend", default="inductor")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print a cProfile of the recorder's handlers (record hook, compile start and end)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also time the recorder's own steps (read_record, frames, guard set, reasons, ...)",
    )
    parser.add_argument(
        "--profile-out", metavar="FILE", help="with --profile: also save the pstats data to FILE"
    )
    args = parser.parse_args()

    receiver = otel_to_receiver()

    import torch
    import torch._logging as torch_logging

    import recompprof
    from recompprof._capture.session import FOLD_EVERY

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.backend == "inductor":
        import torch._functorch.config as functorch_config
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = False
        functorch_config.enable_autograd_cache = False
    torch._dynamo.config.recompile_limit = 1000
    torch._dynamo.config.accumulated_recompile_limit = 10_000

    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    clock = time.thread_time_ns

    # Inner timer around torch's own trace_structured, installed before any attach so recompprof's
    # wrapper calls it: recompprof's share of that wrapper = outer - inner.
    def wrap_inner(fn: Any, booked: Counter[str]) -> Any:
        def inner_trace(*a: Any, **k: Any) -> Any:
            booked["kind." + ("artifact" if a and a[0] == "artifact" else "other")] += 1
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                booked["trace_inner"] += clock() - t0

        return inner_trace

    inner_trace = wrap_inner(torch_logging.trace_structured, spent)
    torch_logging.trace_structured = inner_trace

    # Python's cyclic GC runs whenever allocations cross a threshold, so a full collection of the job's
    # (torch's) objects can fall inside any allocating call: the share that fell inside the recorder is shown.
    depth = {"n": 0, "gc_start": 0}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if depth["n"] > 0:
            if phase == "start":
                depth["gc_start"] = clock()
            elif depth["gc_start"]:
                spent["gc_inside_recorder"] += clock() - depth["gc_start"]
                depth["gc_start"] = 0

    gc.callbacks.append(on_gc)
    # CPU time, as above
    profiler = cProfile.Profile(time.thread_time_ns, 1e-9) if args.profile else None

    # The fan-out (emit, exporters, event log) runs inside the record hook and inside the compile start:
    # booked under "start." while the compile start is on the stack, so each entry point's parts add up.
    starting = {"n": 0}

    def timed(name: str, fn: Any, profile: bool = False) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            key = f"start.{name}" if starting["n"] and name != "compile_start" else name
            starting["n"] += name == "compile_start"
            depth["n"] += 1
            t0 = clock()
            if profile and profiler is not None:
                profiler.enable()
            try:
                return fn(*a, **k)
            finally:
                if profile and profiler is not None:
                    profiler.disable()
                took = clock() - t0
                spent[key] += took
                calls[key] += 1
                depth["n"] -= 1
                starting["n"] -= name == "compile_start"
                if name == "record":
                    backward = a and getattr(a[0], "is_forward", None) is False
                    per_record.append((sessions["n"], took, "backward" if backward else "forward"))

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    if (
        args.breakdown
    ):  # module-level names the recorder calls: wrapped once, nested inside "record"
        import recompprof._capture.recorder as recorder_module
        import recompprof._eventlog.writer as writer_module
        import recompprof._model.aggregates as aggregates_module
        import recompprof._model.assembler as assembler_module
        import recompprof._model.explaining as explaining_module
        import recompprof._torch.frames as frames_module
        import recompprof._torch.records as records_module

        for module, names in (
            (
                recorder_module,
                ("read_record", "guard_set", "configured_limits", "_binder", "_frame"),
            ),
            (records_module, ("config_sha", "phases_of", "fields_of")),
            (writer_module, ("json_line",)),
            (assembler_module, ("compile_events", "_bound_all", "in_order")),
            (frames_module, ("compiling", "call_site", "resolve")),
            (explaining_module.ReasonExplainer, ("explain",)),
            (aggregates_module.Aggregates, ("add",)),
        ):
            for fn_name in names:
                setattr(module, fn_name, timed(f"step.{fn_name}", getattr(module, fn_name)))

    tmp = tempfile.mkdtemp()
    per_record: list[
        tuple[int, int, str]
    ] = []  # (session number, record hook ns, forward / backward)
    sessions = {"n": 0}

    def attach() -> Any:
        sessions["n"] += 1
        session = recompprof.attach(
            run_dir=tmp,
            exporters=["prometheus", "otel"],
            prometheus_port=0,
            prometheus_linger_seconds=0,
            recompile_limit=1000,
        )
        tap = session._adapters.metrics
        tap._take = timed(
            "record", tap._take, profile=True
        )  # instance attributes: the hooks call these
        tap.reconcile = timed("start_callback", tap.reconcile)
        # The compile start (the compile_start event, the running compile) and end, called from torch's callbacks.
        tap._on_start = timed("compile_start", tap._on_start, profile=True)
        tap._on_end = timed("compile_start", tap._on_end, profile=True)
        # Breakdown of the record hook (nested inside it): every event's fan-out, and the OTel exporter's share.
        # The recorder holds the session's emit as its own attribute: wrap it there.
        session._recorder._emit = timed("emit", session._recorder._emit)
        # The aggregates' fold, wherever it runs: at a read of the totals (the session's end here) or in a
        # full batch inside an emit; shown apart so the work that left the compile path is still counted.
        session._fold = timed("fold", session._fold)
        for exporter in session.exporters:
            exporter.on_event = timed(f"on_event.{exporter.name}", exporter.on_event)
        if session._writer is not None:
            session._writer.write = timed("eventlog", session._writer.write)
        hooked = torch_logging.trace_structured
        if hooked is not inner_trace:
            torch_logging.trace_structured = timed("trace_outer", hooked)
        return session

    def detach(session: Any) -> None:
        torch_logging.trace_structured = getattr(
            torch_logging.trace_structured, "__wrapped__", inner_trace
        )
        session.detach()  # puts inner_trace back
        torch_logging.trace_structured = inner_trace

    def job(first_batch: int) -> tuple[float, float, float]:
        """Compiling steps (one new batch size each): wall, this thread's CPU, other threads' CPU."""
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)
        )
        compiled = torch.compile(model, backend=args.backend, dynamic=False)
        w0, c0, p0 = time.perf_counter(), time.thread_time(), process_cpu()
        for i in range(args.shapes):
            compiled(torch.randn(first_batch + i, 64)).pow(2).mean().backward()
        wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
        return wall, cpu, (process_cpu() - p0) - cpu

    # Warm-up: both variants once (imports, the C++ build of every kernel into the disk cache).
    torch._dynamo.reset()
    job(8)
    torch._dynamo.reset()
    s = attach()
    job(8)
    detach(s)
    spent.clear()
    calls.clear()

    rows: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for r in range(args.rounds):
        for on in (False, True) if r % 2 == 0 else (True, False):
            # Reset before attaching: torch._dynamo.reset() also drops the compile callbacks, so the first
            # compile after it would run without its compile start.
            torch._dynamo.reset()
            session = attach() if on else None
            before = dict(spent)
            rows[on].append(job(8))
            if session is not None:
                for key in ("trace_inner", "kind.artifact", "kind.other"):
                    spent[
                        key.replace("kind.", "kind_on.")
                        if key.startswith("kind")
                        else "trace_inner_on"
                    ] += spent[key] - before.get(key, 0)
                detach(session)
    receiver.terminate()

    records = calls["record"]
    outer_calls = calls["trace_outer"]
    bias = statistics.median(inner_bias_ns(wrap_inner) for _ in range(5))
    trace_direct = spent["trace_outer"] - spent["trace_inner_on"] - outer_calls * bias
    # The direct figure rests on subtracting timer costs about as large as the wrapper itself; the
    # estimate below (calls of each kind x the wrapper's cost per call, measured around a no-op) does not.
    per_kind = hook_cost_ns()
    kinds = {kind: spent[f"kind_on.{kind}"] for kind in per_kind}
    trace_own = sum(kinds[kind] * per_kind[kind] for kind in per_kind)
    recorder = (
        spent["record"] + spent["start_callback"] + spent["compile_start"] + max(trace_own, 0.0)
    )
    compile_cpu_on = sum(r[1] for r in rows[True])
    per_record_ms = recorder / max(records, 1) / 1e6
    share = recorder / 1e9 / compile_cpu_on
    print(
        f"backend {args.backend}; {args.rounds} rounds x {args.shapes} compiling steps per variant; "
        f"{records} compile records attached ({records / args.rounds:.0f} per round)"
    )
    print(
        f"compiling steps, detached: median wall {statistics.median(r[0] for r in rows[False]):.3f} s, "
        f"CPU {statistics.median(r[1] for r in rows[False]):.3f} s per round"
    )
    print(
        f"compiling steps, attached: median wall {statistics.median(r[0] for r in rows[True]):.3f} s, "
        f"CPU {statistics.median(r[1] for r in rows[True]):.3f} s per round"
    )
    print(
        f"recorder CPU on the compile path, per compile record: {per_record_ms * 1e3:.0f} us "
        f"(record hook {spent['record'] / max(records, 1) / 1e3:.0f} us, trace_structured wrapper "
        f"{trace_own / max(records, 1) / 1e3:.1f} us: {kinds['artifact']:.0f} artifact calls x {per_kind['artifact']:.0f} ns + "
        f"{kinds['other']:.0f} others x {per_kind['other']:.0f} ns; timed directly {trace_direct / max(records, 1) / 1e3:.0f} us "
        f"after subtracting a timer bias of {bias:.0f} ns/call), start callback "
        f"{spent['start_callback'] / max(records, 1) / 1e3:.1f} us, compile start and end "
        f"{spent['compile_start'] / max(records, 1) / 1e3:.1f} us over {calls['compile_start'] // 2} starts); "
        f"target <= 1 ms: "
        f"{'met' if per_record_ms <= 1 else 'NOT met'}"
    )
    parts = ", ".join(
        f"{name} {spent[name] / max(records, 1) / 1e3:.0f} us"
        for name in sorted(spent)
        if name == "emit" or name.startswith(("on_event", "step.")) or name == "eventlog"
    )
    print(
        f"  of the record hook, per record: {parts}; cyclic GC pauses that fell inside the recorder "
        f"{spent['gc_inside_recorder'] / max(records, 1) / 1e3:.0f} us (recorder without them: "
        f"{(recorder - spent['gc_inside_recorder']) / max(records, 1) / 1e3:.0f} us)"
    )
    print(
        f"  the aggregates' fold (off the compile path: at reads of the totals, at the session's end, or "
        f"each {FOLD_EVERY} events): {spent['fold'] / max(records, 1) / 1e3:.1f} us per record, "
        f"{calls['fold']} folds"
    )
    # torch runs the start and end callbacks for a lazily compiled backward too, which records nothing: the
    # compile_start events are the emits made inside the compile start.
    events = calls["start.emit"]
    at_start = ", ".join(
        f"{name[6:]} {spent[name] / max(events, 1) / 1e3:.1f} us"
        for name in sorted(spent)
        if name.startswith("start.")
    )
    print(
        f"  of the compile start and end ({calls['compile_start'] // 2} callback pairs, {events} compile_start "
        f"events), per compile_start event: {spent['compile_start'] / max(events, 1) / 1e3:.1f} us in all; "
        f"{at_start or 'no fan-out'}"
    )
    per_start_ms = spent["compile_start"] / max(events, 1) / 1e6
    print(
        f"compile start and end per compile_start event: {per_start_ms * 1e3:.0f} us; target <= 0.3 ms: "
        f"{'met' if per_start_ms <= 0.3 else 'NOT met'}"
    )
    firsts = [ns for i, (n, ns, _) in enumerate(per_record) if i == 0 or per_record[i - 1][0] != n]
    later = [ns for i, (n, ns, _) in enumerate(per_record) if i > 0 and per_record[i - 1][0] == n]
    if firsts and later:
        # The first record of a session is a forward compile, the later ones forward recompiles and backwards
        # (cheaper: no frame, call site, guard set or reasons): compare it with the later forwards.
        later_forwards = [
            ns
            for i, (n, ns, kind) in enumerate(per_record)
            if i > 0 and per_record[i - 1][0] == n and kind == "forward"
        ]
        backwards = [ns for _, ns, kind in per_record if kind == "backward"]
        print(
            f"  record hook, first record of each session (a forward compile) median "
            f"{statistics.median(firsts) / 1e3:.0f} us; later records median {statistics.median(later) / 1e3:.0f} us, "
            f"mean {statistics.mean(later) / 1e3:.0f} us; of them forward recompiles median "
            f"{statistics.median(later_forwards or [0]) / 1e3:.0f} us, backwards "
            f"{statistics.median(backwards or [0]) / 1e3:.0f} us"
        )
    print(
        f"recorder CPU / compiling-step CPU: {share * 100:.3f} % (target <= 0.5 %: "
        f"{'met' if share <= 0.005 else 'NOT met'})"
    )
    other = statistics.median(r[2] for r in rows[True]) - statistics.median(
        r[2] for r in rows[False]
    )
    print(
        f"other threads' CPU during the compiling steps, attached - detached: {other * 1e3:+.1f} ms per round "
        f"({other / max(records / args.rounds, 1) * 1e3:+.2f} ms per record)"
    )
    wall = [a[0] / b[0] for a, b in zip(rows[True], rows[False])]
    cpu = [a[1] / b[1] for a, b in zip(rows[True], rows[False])]
    print(
        f"ratio attached / detached per round: wall median {statistics.median(wall):.4f} "
        f"[{min(wall):.4f}-{max(wall):.4f}], CPU median {statistics.median(cpu):.4f} [{min(cpu):.4f}-{max(cpu):.4f}]"
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        if args.profile_out:
            profiler.dump_stats(args.profile_out)


if __name__ == "__main__":
    main()
