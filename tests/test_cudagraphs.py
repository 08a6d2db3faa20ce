"""CUDA-graph skips: torch's "skipping cudagraphs due to …" texts, the closed vocabulary, and the Compile event.

What runs here on CPU is real: torch's ``cudagraphs`` backend refuses CPU graphs and records why in the
compile's ``CompilationMetrics`` record, live and in a TORCH_TRACE. (Inductor's ``mode="reduce-overhead"``
on CPU records no reason: torch only logs skips for graphs that have a CUDA device; it only bumps a counter.)
Tests marked ``gpu`` assert GPU behaviour and skip without a CUDA device.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from recorded_runs import clean_env

import recompprof
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_file, read_run
from recompprof._model.cudagraphs import CUDAGRAPH_SKIPS, SKIP_HINTS, classify_skip
from recompprof._model.events import Compile, Reason
from recompprof._torch.records import cudagraph_skip, runtime_work

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (none here)"
)
needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def _compiles(session: recompprof._capture.session.Session) -> list[Compile]:
    assert session.event_log_path is not None
    return [
        e for e in read_file(session.event_log_path) if isinstance(e, Compile) and not e.backward
    ]


def _scale(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() + 1) * 2


# -- parsing --------------------------------------------------------------------------------------

# Built from the format strings in torch 2.13's sources (cudagraph_utils.py, output_code.py,
# compile_fx.py, lowering.py, ir.py, cudagraph_trees.py, _dynamo/backends/cudagraphs.py), wrapped the
# way torch wraps them (a second "skipping cudagraphs due to" prefix where output_code re-logs a
# lowering reason). They are constructed texts, not recordings from a GPU.
_STACK = 'Found from : \n   File "train.py", line 12, in step\n    y = x.cpu()\n'
TORCH_TEXTS = {
    f"skipping cudagraphs due to skipping cudagraphs due to cpu device (arg0_1). {_STACK}": "cpu_device",
    "skipping cudagraphs due to cpu device (primals_3)": "cpu_device",
    "skipping cudagraphs due to skipping cudagraphs due to multiple devices: device(type='cuda', index=0), "
    "device(type='cuda', index=1)": "multiple_devices",
    "skipping cudagraphs due to multiple devices: device(type='xpu', index=0)": "non_cuda_device",
    f"skipping cudagraphs due to mutated inputs (2 instances). {_STACK}": "mutated_inputs",
    "skipping cudagraphs due to mutated inputs": "mutated_inputs",
    f"skipping cudagraphs due to input storage mutation (1 instances). Found from:\n {_STACK}": "storage_mutation",
    "skipping cudagraphs due to ['non-Tensor inputs']": "non_tensor_inputs",
    "skipping cudagraphs due to ['mutated inputs', 'non-Tensor inputs']": "mutated_inputs",
    "skipping cudagraphs due to graph with symbolic shapes inputs and "
    "config.triton.cudagraph_skip_dynamic_graphs=True. Found from x.view(-1)\n": "dynamic_shapes",
    "skipping cudagraphs due to disabling cudagraphs due to incompatible op aten._local_scalar_dense.default "
    f"{_STACK}": "incompatible_ops",
    "skipping cudagraphs due to skipping cudagraphs due to incompatible op (item)": "incompatible_ops",
    "skipping cudagraphs due to index_put_ fallback with boolean indexing is not compatible with CUDA graphs": "incompatible_ops",
    "skipping cudagraphs due to control flow operator: torch.cond.": "control_flow",
    "skipping cudagraphs due to control flow operator: torch.while_loop.": "control_flow",
    "skipping cudagraphs due to sparsity not handled. Please file issue for sparse inference weights.": "sparse_tensors",
    "skipping cudagraphs due to cudagraph capture requires the caching allocator; current allocator is uncached": "uncached_allocator",
    "skipping cudagraph due to function 3 exceeding max re-recording limit (=128) on cudagraph node 7 due to "
    "static input data pointer changed.\ninput name: arg1_1. data pointer changed from 1 to 2.": "rerecord_limit",
    "skipping cudagraphs due to bisector": "disabled_by_config",
    "disabling cudagraphs due to override_cudagraphs annotation": "disabled_by_config",
    "disabling cudagraphs for backward due to override_cudagraphs annotation": "disabled_by_config",
    "skipping cudagraphs due to ['force_disable_cudagraph_TESTING_ONLY']": "disabled_by_config",
    "skipping cudagraphs due to cpp-wrapper does not support graph partition yet": "disabled_by_config",
}


# Recorded on an NVIDIA H200 with torch 2.11 (scripts/gpu-check.sh, 2026-11-30): the compile record's
# text for an input mutated with the cudagraph trees' support for it off, and the text torch logs at run
# time for one found by the trees (support on). The stack is the check's own workload file.
GPU_TEXTS = {
    "skipping cudagraphs due to skipping cudagraphs due to mutated inputs (1 instances). Found from : \n"
    '   File "/work/main/scripts/gpu_check/workload.py", line 69, in mutates\n    x.add_(1)\n': "mutated_inputs",
    "skipping cudagraphs due to mutated inputs (1 instances). Found from : \n"
    '   File "/work/main/scripts/gpu_check/workload.py", line 73, in mutates_too\n    x.mul_(2)\n': "mutated_inputs",
}


@pytest.mark.parametrize("text", list(GPU_TEXTS))
def test_skip_texts_recorded_on_a_gpu_classify(text: str) -> None:
    """The skip texts a GPU run of torch produced land in the category the constructed ones predicted."""
    assert classify_skip(text) == GPU_TEXTS[text]


@pytest.mark.parametrize("text", list(TORCH_TEXTS))
def test_torch_skip_texts_classify(text: str) -> None:
    """Every skip text torch 2.13 can build (constructed from its format strings) lands in its category."""
    assert classify_skip(text) == TORCH_TEXTS[text]


def test_vocabulary_is_closed_and_hinted() -> None:
    """The vocabulary is closed, every category has a one-line hint, and every category but 'other' is reachable."""
    assert set(SKIP_HINTS) == set(CUDAGRAPH_SKIPS)
    assert all(hint and "\n" not in hint for hint in SKIP_HINTS.values())
    assert set(TORCH_TEXTS.values()) == set(CUDAGRAPH_SKIPS) - {"other"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "skipping cudagraphs due to",
        "x" * 200_000,
        "\udcff\x00 skipping",
        None,
        42,
        "skipping cudagraphs due to something new in torch 3.0",
    ],
)
def test_unknown_or_hostile_text_is_other(text: Any) -> None:
    """Empty, unknown, huge, non-string or surrogate-laden input is 'other', never an exception."""
    assert classify_skip(text) == "other"


def test_record_fields_and_runtime_records() -> None:
    """A record's skip is read from an object or a trace dict and bounded; runtime records are told apart from compiles."""
    skip = cudagraph_skip(
        {"cudagraph_skip_reason": "skipping cudagraphs due to cpu device (x)" + "y" * 10_000}
    )
    assert skip is not None and skip.category == "cpu_device" and len(skip.text) == 4096
    assert cudagraph_skip({"cudagraph_skip_reason": None}) is None
    assert runtime_work({"is_runtime": True, "runtime_cudagraphify_time_us": 2500}) == (
        "cudagraph_record",
        0.0025,
    )
    assert runtime_work({"is_runtime": True, "runtime_triton_autotune_time_us": 10}) == (
        "autotune",
        1e-05,
    )
    assert runtime_work({"is_runtime": False, "runtime_cudagraphify_time_us": 5}) is None


# -- real torch on CPU ----------------------------------------------------------------------------


@pytest.mark.parametrize("redact", [False, True])
def test_cudagraphs_backend_on_cpu_records_cpu_device_skip(tmp_path: Path, redact: bool) -> None:
    """torch's cudagraphs backend on CPU tensors skips CUDA graphs; the live Compile event carries 'cpu_device' and torch's text (text dropped under redact)."""
    fn = torch.compile(_scale, backend="cudagraphs")
    with recompprof.attach(run_dir=tmp_path, redact=redact) as session:
        fn(torch.randn(8))
    (compile_event,) = _compiles(session)
    record = torch._dynamo.utils._compilation_metrics[-1]
    assert record.cudagraph_skip_reason.startswith("skipping cudagraphs due to")
    assert "cpu device" in record.cudagraph_skip_reason
    assert compile_event.cudagraph_skip == "cpu_device"
    if redact:
        assert compile_event.cudagraph_skip_reason is None
    else:
        assert compile_event.cudagraph_skip_reason == record.cudagraph_skip_reason


def test_compiles_without_cudagraphs_carry_no_skip(tmp_path: Path) -> None:
    """A compile that never asked for CUDA graphs (aot_eager) has no cudagraph_skip."""
    fn = torch.compile(_scale, backend="aot_eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        fn(torch.randn(8))
    (compile_event,) = _compiles(session)
    assert compile_event.cudagraph_skip is None and compile_event.cudagraph_skip_reason is None


def test_runtime_records_reach_the_session_and_are_not_compiles(tmp_path: Path) -> None:
    """torch's runtime-record path, driven on CPU exactly as cudagraph_trees and CompiledFxGraph.__call__ drive it
    on a GPU (dynamo_timed into runtime_cudagraphify_time_us outside a compile, then the runtime context's finish):
    the is_runtime record is emitted and the session does not count it as a compile.

    Only the recording itself is simulated (no CUDA graph is captured on CPU); the record and its path are torch's.
    """
    from torch._dynamo.utils import dynamo_timed, get_runtime_metrics_context

    fn = torch.compile(_scale, backend="eager")
    before = {
        id(m) for m in torch._dynamo.utils._compilation_metrics
    }  # a bounded buffer: compare by identity
    with recompprof.attach(run_dir=tmp_path) as session:
        fn(torch.randn(8))
        with dynamo_timed(
            "CUDAGraphNode.record",
            log_pt2_compile_event=True,
            dynamo_compile_column_us="runtime_cudagraphify_time_us",
        ):
            torch.randn(256, 256).sum()
        get_runtime_metrics_context().finish()
    runtime = [
        r for r in torch._dynamo.utils._compilation_metrics if id(r) not in before and r.is_runtime
    ]
    assert len(runtime) == 1 and runtime_work(runtime[0])[0] == "cudagraph_record"  # type: ignore[index]
    assert len(_compiles(session)) == 1


_TRACED = """
import torch, recompprof
def scale(x):
    return (x.sin() + 1) * 2
fn = torch.compile(scale, backend="cudagraphs")
with recompprof.attach():
    fn(torch.randn(8))
"""


@pytest.mark.workload
def test_ingest_carries_the_skip_as_attach_does(tmp_path: Path) -> None:
    """One process under attach() and TORCH_TRACE: ingest of the trace gives the same cudagraph skip and text as the live log."""
    run_dir, trace_dir = tmp_path / "run", tmp_path / "trace"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_TRACED)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(RECOMPPROF_RUN_DIR=str(run_dir), TORCH_TRACE=str(trace_dir)),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    live = [e for e in read_run(run_dir) if isinstance(e, Compile)]
    traced = [
        e for per_file in read_trace(trace_dir).events for e in per_file if isinstance(e, Compile)
    ]
    assert [(e.compile_id, e.cudagraph_skip, e.cudagraph_skip_reason) for e in traced] == [
        (e.compile_id, e.cudagraph_skip, e.cudagraph_skip_reason) for e in live
    ]
    assert [e.cudagraph_skip for e in live] == ["cpu_device"]
    assert "skipping cudagraphs due to" in (live[0].cudagraph_skip_reason or "")


# -- on a GPU (skipped without one) ---------------------------------------------------------------


def _device_reasons(compiles: list[Compile]) -> list[Reason]:
    return [r for c in compiles for r in c.reasons if r.explains_change]


@pytest.mark.gpu
@needs_cuda
def test_gpu_cpu_to_cuda_change_is_a_device_recompile(tmp_path: Path) -> None:
    """A function compiled for cuda:0 and then called with a CPU tensor recompiles with reason category 'device'."""
    fn = torch.compile(_scale, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        fn(torch.randn(8, device="cuda:0"))
        fn(torch.randn(8))
    compiles = _compiles(session)
    assert [c.is_recompile for c in compiles] == [False, True]
    assert [r.category for r in _device_reasons(compiles)] == ["device"]


@pytest.mark.gpu
@needs_two_gpus
def test_gpu_cuda0_to_cuda1_change_is_a_device_recompile(tmp_path: Path) -> None:
    """A function compiled for cuda:0 and then called on cuda:1 recompiles with reason category 'device'."""
    fn = torch.compile(_scale, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        fn(torch.randn(8, device="cuda:0"))
        fn(torch.randn(8, device="cuda:1"))
    compiles = _compiles(session)
    assert [c.is_recompile for c in compiles] == [False, True]
    assert [r.category for r in _device_reasons(compiles)] == ["device"]


# Inductor's graph partitioning (on by default where torch has the option): a CPU op or a
# dynamic-shape op goes into a partition of its own that runs without CUDA graphs, the rest is still
# graphed, and torch records no skip. A torch without the option never partitions.
PARTITIONS = hasattr(torch._inductor.config, "graph_partition")
needs_partitioning = pytest.mark.skipif(
    not PARTITIONS, reason="this torch has no graph partitioning"
)


def _partitioning(on: bool) -> Any:
    """Graph partitioning set on or off, where torch has it."""
    if not PARTITIONS:
        return contextlib.nullcontext()
    return torch._inductor.config.patch(graph_partition=on)


@pytest.mark.gpu
@pytest.mark.inductor
@needs_cuda
def test_gpu_reduce_overhead_with_a_cpu_input_records_cpu_device(tmp_path: Path) -> None:
    """Inductor reduce-overhead on a graph with a CUDA and a CPU tensor, graph partitioning off, skips
    CUDA graphs for the whole graph; the event says 'cpu_device' with torch's text."""
    fn = torch.compile(lambda x, y: (x.sum(), y * 2), mode="reduce-overhead")
    with _partitioning(False), recompprof.attach(run_dir=tmp_path) as session:
        fn(torch.randn(8, device="cuda"), torch.randn(8))
    (compile_event,) = _compiles(session)
    assert compile_event.cudagraph_skip == "cpu_device"
    assert "cpu device" in (compile_event.cudagraph_skip_reason or "")


@pytest.mark.gpu
@pytest.mark.inductor
@needs_cuda
@needs_partitioning
def test_gpu_reduce_overhead_partitions_a_cpu_op_and_records_no_skip(tmp_path: Path) -> None:
    """With graph partitioning on (torch's default; on an H200 with torch 2.11 the CPU op got a partition
    of its own), the CUDA part is still graphed: torch counts partitions and no skip (the measure torch's
    own partition tests take; caches off, as a cached graph is not partitioned again), and the event
    carries no skip either: recompprof invents none."""
    from torch._dynamo.utils import counters

    fn = torch.compile(lambda x, y: (x.sum(), y * 2), mode="reduce-overhead")
    before = dict(counters["inductor"])
    with (
        _partitioning(True),
        torch.compiler.config.patch(force_disable_caches=True),  # a cache hit would not partition
        recompprof.attach(run_dir=tmp_path) as session,
    ):
        fn(torch.randn(8, device="cuda"), torch.randn(8))
    (compile_event,) = _compiles(session)
    grew = {
        k: counters["inductor"][k] - before.get(k, 0)
        for k in ("cudagraph_partitions", "cudagraph_skips")
    }
    assert grew["cudagraph_partitions"] > 0 and grew["cudagraph_skips"] == 0, grew
    assert compile_event.cudagraph_skip is None
    assert compile_event.cudagraph_skip_reason is None


@pytest.mark.gpu
@pytest.mark.inductor
@needs_cuda
def test_gpu_reduce_overhead_input_mutation_records_mutated_inputs(tmp_path: Path) -> None:
    """With input-mutation support off, reduce-overhead on a function mutating its input records 'mutated_inputs' at compile."""

    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    fn = torch.compile(bump, mode="reduce-overhead")
    with (
        torch._inductor.config.patch({"triton.cudagraph_support_input_mutation": False}),
        recompprof.attach(run_dir=tmp_path) as session,
    ):
        fn(torch.randn(8, device="cuda"))
    (compile_event,) = _compiles(session)
    assert compile_event.cudagraph_skip == "mutated_inputs"


@pytest.mark.gpu
@pytest.mark.inductor
@needs_cuda
def test_gpu_reduce_overhead_new_shapes_rerecord_and_are_not_compiles(tmp_path: Path) -> None:
    """A dynamic compile called with three sizes records (at least) three CUDA graphs: torch emits runtime records
    for them, and the session counts exactly torch's compiles, none of the runtime records."""
    fn = torch.compile(_scale, mode="reduce-overhead", dynamic=True)
    before = len(torch._dynamo.utils._compilation_metrics)
    with recompprof.attach(run_dir=tmp_path) as session:
        for size in (4, 8, 16):
            for _ in range(3):  # warm-up run, then the recording, then a replay
                fn(torch.randn(size, device="cuda"))
        torch.cuda.synchronize()
    records = list(torch._dynamo.utils._compilation_metrics)[before:]
    recordings = [r for r in records if (runtime_work(r) or ("",))[0] == "cudagraph_record"]
    compiled = [r for r in records if not r.is_runtime and r.is_forward is not False]
    assert len(recordings) >= 3
    assert len(_compiles(session)) == len(compiled) < len(compiled) + len(recordings)


def test_cudagraph_skip_reaches_the_metric_and_the_report(tmp_path: Path) -> None:
    """A real CUDA-graphs skip on CPU is counted in torch_compile_cudagraph_skips_total{reason} (every reason of the closed list present) and listed in the report with its fix hint."""
    from prometheus_client import CollectorRegistry, generate_latest

    from recompprof._analysis.render.text import render_text
    from recompprof._analysis.report.fold import build_report
    from recompprof._model.cudagraphs import CUDAGRAPH_SKIPS, SKIP_HINTS
    from recompprof_prometheus.collector import SnapshotCollector

    fn = torch.compile(_scale, backend="cudagraphs")
    with recompprof.attach(run_dir=tmp_path) as session:
        fn(torch.randn(8))
        registry = CollectorRegistry()
        registry.register(SnapshotCollector(session.snapshot, session.identity, session.versions))
        text = generate_latest(registry).decode()
    lines = [
        line
        for line in text.splitlines()
        if line.startswith("torch_compile_cudagraph_skips_total{")
    ]
    assert len(lines) == len(CUDAGRAPH_SKIPS)
    assert any('reason="cpu_device"' in line and line.endswith(" 1.0") for line in lines), lines
    report = render_text(build_report(_compiles(session)), width=400)
    assert (
        "CUDA graphs skipped" in report
        and "cpu_device" in report
        and SKIP_HINTS["cpu_device"][:40] in report
    )


def test_skip_classifier_errors_go_through_the_internal_error_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the skip classifier raises in strict mode and, in production, is counted as an internal error
    while the skip is filed as 'other' (it never raises into torch)."""
    from recompprof import _internal
    from recompprof._model import cudagraphs
    from recompprof.testing import raise_internal_errors

    def broken(*args: object) -> object:
        raise RuntimeError("classifier bug")

    monkeypatch.setattr(cudagraphs, "_devices_category", broken)
    text = "skipping cudagraphs due to multiple devices: device(type='cuda', index=0), device(type='cuda', index=1)"
    with pytest.raises(RuntimeError, match="classifier bug"):
        classify_skip(text)
    with raise_internal_errors(False):
        assert classify_skip(text) == "other"
    assert _internal.counts()["cudagraphs.classify"] == 2
