"""What the GPU check runs: each check, what it verifies, whether it needs CUDA, and how long it may take.

One table, read by the run (``main.py``), the no-CUDA message and docs/gpu.md. A check's ``rehearsal``
is how the CPU rehearsal runs it (``None``: it needs CUDA and is listed as not run). Each timeout bounds
one check; the run as a whole is bounded by ``--budget`` (9 of the 10 minutes a device command may
take): it starts no check once that is spent (reporting the rest as not run), and gives the last one
started only what is left. The order is the order of priority.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    verifies: str
    timeout: float  # seconds on the device
    rehearsal: str | None  # how the CPU rehearsal runs it; None: needs CUDA


PLAN: tuple[Check, ...] = (
    Check(
        "environment",
        "GPU, driver, torch, triton and CUDA versions; torch within the tested range; the version "
        "gates this torch turns off",
        30,
        "the same, on the CPU build",
    ),
    Check(
        "install",
        "the carried wheels (.whl/) and recompprof from the working tree install with no index into "
        "a --target folder; recompprof, its Prometheus and OpenTelemetry exporters import from there",
        60,
        "the same, into a temporary folder",
    ),
    Check(
        "gpu_tests",
        "pytest: every gpu-marked test (CUDA-graph skips and re-records, the CPU->CUDA device "
        "category, the device hint proof) and the torch-facing files a CUDA device changes "
        "(tests/test_cudagraphs.py, tests/test_torch_adapters.py)",
        150,
        "the gpu-marked tests only, which skip without CUDA: collection and the command line",
    ),
    Check(
        "llama_default",
        "a tiny Llama (from a config, random weights) trained under Inductor mode='default' with "
        "changing lengths: live, TORCH_LOGS and TORCH_TRACE agree; recompprof's compiles are torch's; "
        "phases sum to each compile's duration, live and ingested; Triton seconds in kernel_compile",
        120,
        "forward passes of the same model under Inductor on CPU (C++ kernels), one layer",
    ),
    Check(
        "reduce_overhead",
        "mode='reduce-overhead' with changing lengths: CUDA-graph recordings per frame (torch's runtime "
        "records, none counted as a compile); skips with their category live and ingested (CPU tensor and "
        "dynamic shapes with graph partitioning off, mutated input), no skip for a CPU op graph "
        "partitioning splits off, and the run-time skip torch only logs; torch's raw texts kept",
        150,
        None,
    ),
    Check(
        "device_change",
        "a function compiled for cuda:0 called with a CPU tensor: a recompile of category 'device' "
        "in all three sources",
        60,
        None,
    ),
    Check(
        "overhead",
        "compile time with and without recompprof (fresh compiles, caches off), then training-step "
        "time with everything on (event log, Prometheus scraped, OpenTelemetry) against off, "
        "interleaved in one process, with quartiles",
        180,
        "forward steps on CPU, few rounds, no compile timing (a CPU compile takes ~20 s here): the "
        "figures mean nothing, the code path is what is rehearsed",
    ),
    Check(
        "llama_autotune",
        "the tiny Llama's forward (one layer) under mode='max-autotune': autotune seconds (at compile and at first "
        "launch), phases summing to each compile's duration, the three sources agreeing",
        180,
        None,
    ),
)


def needs_cuda() -> list[Check]:
    return [check for check in PLAN if check.rehearsal is None]
