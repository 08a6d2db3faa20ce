"""One workload of the GPU check, run in a process of its own under ``recompprof.attach()``.

The check starts it with ``RECOMPPROF_RUN_DIR``, ``TORCH_LOGS`` and ``TORCH_TRACE`` set, so one run
is recorded three ways. Beside recompprof's event log it writes ``torch_records.json``: torch's own
``CompilationMetrics`` records of the process, runtime records (CUDA-graph recordings, autotuning at
first launch) included, read without recompprof, so the check can count what recompprof must and
must not count as compiles; and ``torch_counters.json``, Inductor's counters (CUDA-graph partitions
and skips among them).

    python scripts/gpu_check/workload.py llama_default --device cuda
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from llama import batch, loss_of, tiny_llama
from torch._dynamo.utils import counters

import recompprof

# Sequence lengths of the training batches: the batch is padded to its longest, so shapes change.
TRAIN = ((5, 8), (12, 7), (9, 16))
# reduce-overhead: each length replayed three times (warm-up, recording, replay).
GRAPH_LENGTHS = (8, 16, 24, 8)


def llama_training(device: str, mode: str, layers: int, kind: str, steps: int) -> str:
    """Training steps of the tiny Llama compiled with Inductor ``mode``, shapes changing per batch."""
    model, made = tiny_llama(layers, kind)
    model.to(device).train()
    model.compile(mode=mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with recompprof.attach():
        for lengths in TRAIN[:steps]:
            loss_of(model(**batch(lengths, device))).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        _sync(device)
    return made


def llama_eval(device: str, mode: str, layers: int, kind: str) -> str:
    """Forward passes only (no_grad) under Inductor ``mode``: two shapes, so one recompile."""
    model, made = tiny_llama(layers, kind)
    model.to(device).eval()
    model.compile(mode=mode)
    with recompprof.attach(), torch.no_grad():
        for lengths in ((6, 4), (10, 3)):
            model(**{k: v for k, v in batch(lengths, device).items() if k != "labels"})
        _sync(device)
    return made


def reduce_overhead(device: str, layers: int, kind: str) -> str:
    """CUDA graphs: the Llama with changing lengths (re-records), then one function per skip reason."""
    model, made = tiny_llama(layers, kind)
    model.to(device).eval()
    model.compile(mode="reduce-overhead")

    def with_cpu(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sum(), y * 2

    def with_cpu_partitioned(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.cos().sum(), y * 2  # the same CPU kernel as with_cpu's: C++ compiled once

    def mutates(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    def mutates_too(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + 1

    def sized(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * x.shape[0]

    inductor = torch._inductor.config
    # Graph partitioning (torch's default where the option exists) graphs the CUDA part and runs a CPU
    # or dynamic-shape op in a partition of its own, recording no skip: the whole-graph skips need it off.
    whole = {"graph_partition": False} if hasattr(inductor, "graph_partition") else {}
    with recompprof.attach():
        with torch.no_grad():
            for n in GRAPH_LENGTHS:
                for _ in range(3):
                    model(input_ids=batch((n, n), device)["input_ids"])
        # skip at compile: a CPU tensor among CUDA ones, partitioning off
        with inductor.patch(whole):
            torch.compile(with_cpu, mode="reduce-overhead")(
                torch.randn(8, device=device), torch.randn(8)
            )
        # no skip: the same with partitioning as torch sets it (the CPU op gets a partition)
        torch.compile(with_cpu_partitioned, mode="reduce-overhead")(
            torch.randn(8, device=device), torch.randn(8)
        )
        # skip at compile: input mutation with the cudagraph trees' support for it off
        with inductor.patch({"triton.cudagraph_support_input_mutation": False}):
            torch.compile(mutates, mode="reduce-overhead")(torch.randn(8, device=device))
        # skip at run time (support on, the default): torch only logs it
        fn = torch.compile(mutates_too, mode="reduce-overhead")
        for _ in range(3):
            fn(torch.randn(8, device=device))
        # skip at compile: symbolic shapes with cudagraph_skip_dynamic_graphs on, partitioning off
        with inductor.patch({"triton.cudagraph_skip_dynamic_graphs": True, **whole}):
            dyn = torch.compile(sized, mode="reduce-overhead", dynamic=True)
            for n in (4, 6):
                dyn(torch.randn(n, device=device))
        _sync(device)
    return made


def device_change(device: str) -> str:
    """A function compiled for the CUDA device, then called with a CPU tensor: a 'device' recompile."""

    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    fn = torch.compile(scale, backend="eager")
    with recompprof.attach():
        fn(torch.randn(8, device=device))
        fn(torch.randn(8))
    return "-"


def torch_records() -> list[dict[str, Any]]:
    """torch's CompilationMetrics records of this process: every field that is a plain value, but for
    the configs (long JSON the report has no use for)."""
    from torch._dynamo import utils

    out = []
    for record in list(getattr(utils, "_compilation_metrics", ())):
        fields = vars(record) if hasattr(record, "__dict__") else {}
        out.append(
            {
                k: v
                for k, v in fields.items()
                if (
                    isinstance(v, (int, float, bool))
                    or v is None
                    or (isinstance(v, str) and len(v) <= 8192)
                )
                and not k.endswith("_config")
            }
        )
    return out


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "workload",
        choices=[
            "llama_default",
            "llama_eval",
            "llama_autotune",
            "reduce_overhead",
            "device_change",
        ],
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--llama", default="auto", choices=["auto", "hf", "plain"])
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    if args.workload == "llama_default":
        made = llama_training(args.device, "default", args.layers, args.llama, args.steps)
    elif args.workload == "llama_eval":
        made = llama_eval(args.device, "default", args.layers, args.llama)
    elif args.workload == "llama_autotune":
        made = llama_eval(args.device, "max-autotune", args.layers, args.llama)
    elif args.workload == "reduce_overhead":
        made = reduce_overhead(args.device, args.layers, args.llama)
    else:
        made = device_change(args.device)
    Path("torch_records.json").write_text(json.dumps(torch_records(), default=str))
    # Inductor's own counts (CUDA-graph partitions and skips among them): what torch's partition tests
    # assert, kept so a device run shows them whatever the check expects.
    Path("torch_counters.json").write_text(json.dumps(dict(counters["inductor"])))
    print(f"MODEL {made}", flush=True)
    print("WORKLOAD DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
