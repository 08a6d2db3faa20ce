"""The metrics contract of docs/prometheus.md, written once: each family's type and labels.

The collector tests check a scrape against it, and tests/test_metric_names.py checks the one table of
names (recompprof/_model/metric_names.py) against it.
"""

from __future__ import annotations

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
