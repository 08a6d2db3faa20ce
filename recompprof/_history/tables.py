"""The history lake's four tables: their columns and types, as Arrow schemas (docs/history.md).

The lake is derived from the event logs (the JSONL stays the durable record), one row per rank session
(``runs``), per ``compile`` event (``compiles``), per guard-failure reason of a forward compile
(``guard_failures``) and per ``graph_break`` event (``graph_breaks``). Columns are named as the event
fields they come from; the verdicts (what counts as a compile, which cause a compile's seconds are charged
to) are columns computed by the event model's rules at export, so a query sums them and never re-derives
them. Like the events, columns are only ever added (``EXPORT_VERSION`` says which exporter wrote a file);
removing or changing one needs a new root (``v2``, :mod:`recompprof._history.layout`).

The Hive partition column ``dt`` (the UTC date of each row's time) is in the path, not in the files.
"""

from __future__ import annotations

import pyarrow as pa

# Which exporter wrote a file: raised when a column is added or a figure's rule changes (see
# docs/history.md, "Versioning"); readers take every version of one root.
EXPORT_VERSION = 2  # 2: torch_release on every table; runs.steps null where no step was counted

TABLES = ("runs", "compiles", "guard_failures", "graph_breaks")

TIMESTAMP = pa.timestamp("us", tz="UTC")
_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()
_F64 = pa.float64()
_BOOL = pa.bool_()
_STRS = pa.list_(pa.string())


def _fields(*columns: tuple[str, pa.DataType]) -> list[pa.Field]:
    return [pa.field(name, kind) for name, kind in columns]


# The rank session a row belongs to: pid tells a restarted rank's second log from its first.
SESSION_KEY = _fields(("run_id", _STR), ("rank", _I32), ("pid", _I32))
# Denormalised onto every row, so most fleet questions need one table (Parquet dictionary-encodes them).
DIMENSIONS = _fields(("torch_version", _STR), ("job", _STR), ("team", _STR), ("model", _STR))
# Columns added since v1's first tables, at the end of every table (EXPORT_VERSION 2): torch's
# release without its build (``2.13.0`` for ``2.13.0+cpu``), what versions are compared by.
_ADDED = (("torch_release", _STR),)

RUNS = pa.schema(
    [
        *SESSION_KEY,
        *DIMENSIONS,
        *_fields(
            ("local_rank", _I32),
            ("world_size", _I32),
            ("host", _STR),
            ("launcher", _STR),
            ("restart_count", _I32),
            ("mode", _STR),
            ("source", _STR),  # "event_log", or "torch_trace" (recompprof ingest)
            ("profile_mechanism", _STR),
            ("recompile_limit", _I32),
            ("warmup_steps", _I32),
            ("python_version", _STR),
            ("recompprof_version", _STR),
            ("triton_version", _STR),
            ("cuda_version", _STR),
            ("labels", pa.map_(pa.string(), pa.string())),
            ("start_time", TIMESTAMP),
            ("end_time", TIMESTAMP),
            # completeness: what the log can vouch for
            ("ended", _BOOL),
            ("signals_off", _STRS),
            ("events_dropped", _I64),
            ("log_gap", _BOOL),
            ("skipped_lines", _I64),
            ("compiling_at_end", _STR),
            ("internal_errors", _I64),
            # totals, by the report's counting rules
            ("events", _I64),
            ("compiles", _I64),
            ("recompiles", _I64),
            ("steady_state_recompiles", _I64),
            ("backward_compiles", _I64),
            ("limit_hits", _I64),
            ("failures", _I64),
            ("guard_failures", _I64),
            ("graph_breaks", _I64),
            ("steps", _I64),
            ("compile_seconds", _F64),
            ("recompile_seconds", _F64),
            ("wall_seconds", _F64),
            ("export_version", _I32),
            ("exporter_version", _STR),
            *_ADDED,
        ),
    ]
)

PHASE_COLUMNS = (
    "dynamo_trace_s",
    "aot_autograd_s",
    "inductor_lowering_s",
    "code_gen_s",
    "kernel_compile_s",
    "other_s",
)
CACHE_COLUMNS = tuple(
    f"{cache}_{result}"
    for cache in ("fx_graph", "aot_autograd")
    for result in ("hit", "miss", "bypass")
)

# The frame columns of every fact table: frame_key is the identity diff matches on (docs/frames.md).
_FRAME = _fields(("frame_key", _STR), ("frame_name", _STR))
_POSITION = _fields(("time", TIMESTAMP), ("step", _I64), ("compile_id", _STR), ("generation", _I32))

COMPILES = pa.schema(
    [
        *SESSION_KEY,
        *DIMENSIONS,
        *_POSITION,
        *_fields(("start_time", TIMESTAMP), ("backward", _BOOL)),
        *_FRAME,
        *_fields(
            ("frame_file", _STR),
            ("frame_line", _I32),
            ("frame_owner", _STR),
            ("frame_label", _STR),
            # outcome
            ("is_recompile", _BOOL),
            ("cache_entries", _I32),
            ("outcome", _STR),
            ("fail_type", _STR),
            ("fail_reason", _STR),
            ("installed_code", _BOOL),
            ("limit_name", _STR),
            ("limit_value", _I32),
            # verdicts, by recompprof._model.counting (sum these; never re-derive them)
            ("counts_as_compile", _BOOL),
            ("counts_as_recompile", _BOOL),
            ("steady_state_recompile", _BOOL),
            ("compile_seconds", _F64),  # duration_s where it is compile time, else 0
            # time
            ("duration_s", _F64),
            *((name, _F64) for name in PHASE_COLUMNS),
            # graph
            ("guard_count", _I32),
            ("graph_op_count", _I32),
            ("graph_breaks", _I32),
            # the cause its seconds are charged to (recompprof._model.causes); null: not lost time
            ("cause_category", _STR),
            ("cause_subject", _STR),
            ("reason_count", _I32),
            ("reasons_omitted", _I32),
            # classification
            ("steady_state", _BOOL),
            ("automatic_dynamic", _STR),
            # caches
            ("cache", _STR),
            ("cache_seconds_saved", _F64),
            *((name, _I32) for name in CACHE_COLUMNS),
            # other
            ("guard_set", _STR),
            ("trace_id", _STR),
            ("call_site", _STRS),
            ("cudagraph_skip", _STR),
            # more of torch's compile record (null where the torch release does not report it)
            ("graph_node_count", _I32),
            ("graph_input_count", _I32),
            ("shape_env_guard_count", _I32),
            ("accumulated_cache_size", _I32),
            ("param_numel", _I64),
            ("param_bytes", _I64),
            ("triton_compile_s", _F64),
            ("restart_count", _I32),
            ("dynamo_config_sha", _STR),
            ("inductor_config_sha", _STR),
            *_ADDED,
        ),
    ]
)

GUARD_FAILURES = pa.schema(
    [
        *SESSION_KEY,
        *DIMENSIONS,
        *_POSITION,
        *_FRAME,
        *_fields(
            ("position", _I32),  # the reason's place in its compile's list; null: omitted reasons
            ("entry", _STR),  # compile id of the cache entry that failed
            ("category", _STR),
            ("subject", _STR),
            ("explains_change", _BOOL),
            # explains_change of a recompile (counting.py): what the report counts as a change
            ("counts_as_change", _BOOL),
            ("steady_state", _BOOL),
            ("text", _STR),  # empty under redact or --no-text
            ("count", _I32),  # 1, or the reasons an event left out past its cap (position null)
            *_ADDED,
        ),
    ]
)

GRAPH_BREAKS = pa.schema(
    [
        *SESSION_KEY,
        *DIMENSIONS,
        *_POSITION,
        *_FRAME,
        *_fields(
            ("reason", _STR),
            ("explanation", _STR),
            ("hints", _STRS),
            ("user_location", _STR),
            ("skipped_frame", _BOOL),
            ("count", _I32),
            *_ADDED,
        ),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "runs": RUNS,
    "compiles": COMPILES,
    "guard_failures": GUARD_FAILURES,
    "graph_breaks": GRAPH_BREAKS,
}
# The columns every fact table (compiles, guard_failures, graph_breaks) starts with, in order.
FACT_KEY = tuple(field.name for field in [*SESSION_KEY, *DIMENSIONS, *_POSITION])
# The column each table's dt partition is the UTC date of.
DATE_COLUMN = {
    "runs": "start_time",
    "compiles": "time",
    "guard_failures": "time",
    "graph_breaks": "time",
}
