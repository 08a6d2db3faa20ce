"""Verdicts on one recorded workload of the GPU check; prints one JSON object.

Reads the workload's directory (``run/``: recompprof's event log, ``trace/``: TORCH_TRACE, ``stderr.txt``:
TORCH_LOGS, ``torch_records.json``: torch's own CompilationMetrics records) and checks:

- the three sources agree on recompiles, reasons, categories, limit hits and graph breaks
  (``tests/agreement.py``, the comparison the suite makes on CPU runs);
- recompprof's compiles are exactly torch's compile records (runtime records, such as CUDA-graph
  recordings and autotuning at first launch, are no compiles);
- each compile's exclusive phases sum to its duration, the same live and ingested;
- what the workload is for: Triton compile seconds in ``kernel_compile`` (CUDA), CUDA-graph re-records
  per frame and skips with their category, the ``device`` category of a CPU->CUDA change.

It also collects torch's raw texts (CUDA-graph skips and re-records) for CPU-side fixtures.

    python scripts/gpu_check/verify.py WORKLOAD DIR DEVICE
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch._inductor.config as inductor_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from agreement import (
    Recorded,
    describe,
    diff,
    known_as_unknown,
    log_records,
    summarise,
)

import recompprof
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile

# The skip each function of the reduce_overhead workload is written to cause at compile time (with
# graph partitioning off where torch has it), and the function whose CPU op graph partitioning (torch's
# default) puts in a partition of its own instead: graphed in part, no skip.
EXPECTED_SKIPS = {"with_cpu": "cpu_device", "mutates": "mutated_inputs", "sized": "dynamic_shapes"}
PARTITIONED = "with_cpu_partitioned"
MAX_TEXT = 4000


class Verdict:
    """Failures, figures and texts of one workload, in the order found."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.figures: dict[str, Any] = {}
        self.texts: dict[str, list[str]] = defaultdict(list)

    def require(self, ok: bool, failure: str) -> None:
        if not ok:
            self.failures.append(failure)


def compiles(events: list[Any]) -> list[Compile]:
    return [e for e in events if isinstance(e, Compile)]


def phases_hold(verdict: Verdict, live: list[Compile], traced: list[Compile]) -> None:
    """Each compile's phases sum to its duration; forward compiles agree live and ingested."""
    worst = 0.0
    for event in live:
        off = abs(sum(event.phases.values()) - event.duration)
        worst = max(worst, off)
        verdict.require(
            off <= 1e-3 + 1e-3 * event.duration,
            f"compile {event.compile_id} ({event.frame.name}): phases sum to "
            f"{sum(event.phases.values()):.4f} s, duration {event.duration:.4f} s",
        )
    verdict.figures["phase_sum_worst_s"] = worst
    by_id = {e.compile_id: e for e in traced if not e.backward}
    for event in (e for e in live if not e.backward):
        other = by_id.get(event.compile_id)
        if other is None:
            verdict.failures.append(f"compile {event.compile_id}: not in the ingested trace")
            continue
        same = abs(event.duration - other.duration) <= 1e-6 and all(
            abs(event.phases.get(p, 0.0) - other.phases.get(p, 0.0)) <= 1e-6
            for p in {*event.phases, *other.phases}
        )
        verdict.require(same, f"compile {event.compile_id}: phases differ live and ingested")
    verdict.figures["compiles"] = [
        {
            "id": e.compile_id,
            "frame": e.frame.name,
            "backward": e.backward,
            "recompile": e.is_recompile,
            "duration_s": round(e.duration, 4),
            "phases_s": {k: round(v, 4) for k, v in e.phases.items()},
            "triton_compile_s": e.triton_compile_s,
            "cudagraph_skip": e.cudagraph_skip,
        }
        for e in live
    ]


def counts_hold(verdict: Verdict, live: list[Compile], records: list[dict[str, Any]]) -> None:
    """recompprof counts torch's compile records and none of its runtime records."""
    compiled = [r for r in records if not r.get("is_runtime")]
    runtime = [r for r in records if r.get("is_runtime")]
    verdict.figures["torch_records"] = {"compiles": len(compiled), "runtime": len(runtime)}
    verdict.require(
        len(live) == len(compiled),
        f"recompprof recorded {len(live)} compiles, torch {len(compiled)} compile records "
        f"(and {len(runtime)} runtime records)",
    )


def triton_in_kernel_compile(verdict: Verdict, live: list[Compile]) -> None:
    """On CUDA, Inductor's Triton compile seconds are the kernel_compile phase: all of them, or (where
    torch's Triton seconds exceed the code generation that encloses them, as parallel compile workers
    may make them) as much as code generation took, which the figures name."""
    timed = [e for e in live if e.triton_compile_s]
    verdict.require(bool(timed), "no compile reported Triton compile seconds")
    clamped = []
    for event in timed:
        kernel, triton = event.phases.get("kernel_compile", 0.0), event.triton_compile_s or 0.0
        verdict.require(
            0.0 < kernel <= triton + 1e-3,
            f"compile {event.compile_id}: kernel_compile {kernel:.4f} s, Triton compile {triton:.4f} s",
        )
        if kernel < triton - 1e-3:
            clamped.append({"id": event.compile_id, "kernel_compile_s": kernel, "triton_s": triton})
    verdict.figures["triton_over_code_gen"] = clamped


def autotune(verdict: Verdict, records: list[dict[str, Any]]) -> None:
    """Autotuning seconds torch reports, at compile time and at first launch (runtime records)."""
    at_compile = sum(r.get("compile_time_autotune_time_us") or 0 for r in records) / 1e6
    at_launch = sum(r.get("runtime_triton_autotune_time_us") or 0 for r in records) / 1e6
    verdict.figures["autotune_s"] = {"at_compile": at_compile, "at_first_launch": at_launch}


def cudagraphs(verdict: Verdict, live: list[Compile], traced: list[Compile], run: Recorded) -> None:
    """Re-records per frame (torch's runtime records), skips by category live and ingested, raw texts."""
    records = json.loads((run.where / "torch_records.json").read_text())
    # torch's runtime records name no frame (co_name None on torch 2.11): their compile id does.
    frames = {e.compile_id: e.frame.name for e in live}
    per_frame: dict[str, int] = defaultdict(int)
    for record in records:
        if record.get("is_runtime") and record.get("runtime_cudagraphify_time_us"):
            cid = record.get("compile_id")
            per_frame[record.get("co_name") or frames.get(cid, f"? ({cid})")] += 1
    verdict.figures["cudagraph_recordings_per_frame"] = dict(per_frame)
    counted = run.where / "torch_counters.json"
    if counted.is_file():
        inductor = json.loads(counted.read_text())
        verdict.figures["inductor_counters"] = {
            k: inductor.get(k, 0) for k in ("cudagraph_partitions", "cudagraph_skips")
        }
    verdict.require(
        max(per_frame.values(), default=0) >= 3,
        f"no frame recorded 3 CUDA graphs (one per length): {dict(per_frame)}",
    )
    skips = {e.compile_id: (e.frame.name, e.cudagraph_skip) for e in live if e.cudagraph_skip}
    verdict.figures["cudagraph_skips"] = {cid: list(v) for cid, v in skips.items()}
    for function, category in EXPECTED_SKIPS.items():
        found = [c for name, c in skips.values() if name.split(".")[-1] == function]
        verdict.require(category in found, f"{function}: skip {category} not recorded ({found})")
    if hasattr(inductor_config, "graph_partition"):
        partitioned = [e for e in live if e.frame.name.split(".")[-1] == PARTITIONED]
        verdict.require(
            bool(partitioned) and all(e.cudagraph_skip is None for e in partitioned),
            f"{PARTITIONED}: a compile without a skip expected (graph partitioning on), got "
            f"{[e.cudagraph_skip for e in partitioned]}",
        )
    ingested = {e.compile_id: e.cudagraph_skip for e in traced if e.cudagraph_skip}
    verdict.require(
        ingested == {cid: c for cid, (_, c) in skips.items()},
        f"skips differ live {skips} and ingested {ingested}",
    )
    for event in live:
        if event.cudagraph_skip_reason:
            verdict.texts["cudagraph_skip_reason"].append(event.cudagraph_skip_reason[:MAX_TEXT])
    for _cid, artifact, message in log_records(run.stderr):
        if artifact == "__cudagraphs" or "skipping cudagraphs" in message:
            verdict.texts["torch_logs_cudagraphs"].append(message[:MAX_TEXT])
    verdict.texts["runtime_records"] = [
        json.dumps({k: r.get(k) for k in ("compile_id", "co_name", "runtime_cudagraphify_time_us")})
        for r in records
        if r.get("is_runtime")
    ]


def device_category(verdict: Verdict, summaries: dict[str, Any]) -> None:
    """Each source files the CPU->CUDA change under the guard category 'device'."""
    for name, summary in summaries.items():
        found = {category for rows in summary.categories.values() for _, category in rows}
        verdict.require("device" in found, f"{name}: no 'device' category ({sorted(found)})")


def verify(workload: str, where: Path, device: str) -> Verdict:
    run = Recorded(
        where,
        (where / "stdout.txt").read_text(errors="replace"),
        (where / "stderr.txt").read_text(errors="replace"),
        0,
        0.0,
    )
    verdict = Verdict()
    verdict.figures["recompprof_from"] = str(Path(recompprof.__file__).parent)
    live = compiles(list(read_run(run.run_dir)))
    traced = compiles([e for per_file in read_trace(run.trace_dir).events for e in per_file])
    records = json.loads((where / "torch_records.json").read_text())
    summaries = summarise(run)
    found = diff(known_as_unknown(summaries))
    verdict.figures["sources"] = {name: s.totals() for name, s in summaries.items()}
    verdict.require(
        not found, "live, TORCH_LOGS and TORCH_TRACE disagree:\n" + describe(summaries, found)
    )
    verdict.require(bool(live), "recompprof recorded no compile")
    verdict.require(bool(summaries["live"].recompiles), "no recompile recorded")
    counts_hold(verdict, live, records)
    phases_hold(verdict, live, traced)
    if workload in ("llama_default", "llama_autotune") and device.startswith("cuda"):
        triton_in_kernel_compile(verdict, live)
    if workload == "llama_autotune":
        autotune(verdict, records)
    if workload == "reduce_overhead":
        cudagraphs(verdict, live, traced, run)
    if workload == "device_change":
        device_category(verdict, summaries)
    return verdict


def main() -> int:
    workload, where, device = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    verdict = verify(workload, where, device)
    print(
        json.dumps(
            {
                "ok": not verdict.failures,
                "failures": verdict.failures,
                "figures": verdict.figures,
                "texts": verdict.texts,
            },
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
