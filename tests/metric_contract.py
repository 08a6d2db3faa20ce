"""The metrics contract of docs/prometheus.md, written once: each family's type and labels, and the
series Prometheus stores for them.

The collector tests check a scrape against it, tests/test_metric_names.py checks the one table of
names (recompprof/_model/metric_names.py) against it, and the rules and dashboards tests check that
every PromQL query they ship reads only its series.
"""

from __future__ import annotations

import promql_parser

# docs/prometheus.md, the metrics contract: name -> (type, labels). Every series also carries `rank` (see docs/prometheus.md).
CONTRACT: dict[str, tuple[str, set[str]]] = {
    "torch_compile_compiles": ("counter", {"rank", "frame"}),
    "torch_compile_recompiles": ("counter", {"rank", "frame"}),
    "torch_compile_steady_state_recompiles": ("counter", {"rank", "frame"}),
    "torch_compile_guard_failures": ("counter", {"rank", "frame", "reason"}),
    "torch_compile_recompile_limit_hits": ("counter", {"rank", "frame", "limit"}),
    "torch_compile_compile_failures": ("counter", {"rank", "error_type"}),
    "torch_compile_graph_breaks": ("counter", {"rank"}),
    "torch_compile_duration_seconds": ("histogram", {"rank"}),
    "torch_compile_phase_seconds": ("counter", {"rank", "phase"}),
    "torch_compile_cache_entries": ("gauge", {"rank", "frame"}),
    "torch_compile_frame_compile_seconds": ("counter", {"rank", "frame"}),
    "torch_compile_recompile_seconds": ("counter", {"rank", "frame", "reason"}),
    "torch_compile_cache_lookups": ("counter", {"rank", "cache", "result"}),
    "torch_compile_cache_saved_seconds": ("counter", {"rank"}),
    "torch_compile_cudagraph_skips": ("counter", {"rank", "reason"}),
    "torch_compile_recompile_limit": ("gauge", {"rank", "limit"}),
    "torch_compile_last_compile_timestamp_seconds": ("gauge", {"rank"}),
    "torch_compile_training_step": ("gauge", {"rank"}),
    "torch_compile_compiling": ("gauge", {"rank"}),
    "torch_compile_compile_running_seconds": ("gauge", {"rank", "frame"}),
    "recompprof_build_info": (
        "gauge",
        {"rank", "version", "torch_version", "triton_version", "python_version"},
    ),
    "recompprof_process_info": ("gauge", {"rank", "local_rank", "world_size"}),
    "recompprof_events_dropped": ("counter", {"rank", "reason"}),
    "recompprof_internal_errors": ("counter", {"rank", "component"}),
}


def _series(family: str, kind: str) -> set[str]:
    """The series Prometheus stores for a family: counters add _total, histograms their three parts."""
    if kind == "counter":
        return {family + "_total"}
    if kind == "histogram":
        return {family + part for part in ("_bucket", "_sum", "_count")}
    return {family}


# Every series of the contract: the only series the generated rules and dashboards may read.
SERIES = {series for family, (kind, _) in CONTRACT.items() for series in _series(family, kind)}


def metric_names(expr: str) -> set[str]:
    """Every series name a PromQL expression selects."""
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names
