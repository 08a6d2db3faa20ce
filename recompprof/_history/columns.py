"""The history lake's four tables: their columns, kinds and descriptions, in the standard library alone
(docs/history.md). :mod:`recompprof._history.tables` makes them Arrow schemas; the printed views
(``--print-sql``) read them here, so printing imports no pyarrow.

The lake is derived from the event logs (the JSONL stays the durable record), one row per rank session
(``runs``), per ``compile`` event (``compiles``), per guard-failure reason of a forward compile
(``guard_failures``) and per ``graph_break`` event (``graph_breaks``). Columns are named as the event
fields they come from, every time in seconds ending ``_s``; the verdicts (what counts as a compile,
which cause a compile's seconds are charged to) are columns computed by the event model's rules at
export, so a query sums them and never re-derives them. Like the events, columns are only ever added
(``EXPORT_VERSION`` says which exporter wrote a file), or renamed with the old name read as the new
one (:data:`RENAMED`); removing or changing one needs a new root (``v2``,
:mod:`recompprof._history.layout`).

The Hive partition column ``dt`` (the UTC date of each row's time) is in the path, not in the files.
"""

from __future__ import annotations

from typing import NamedTuple

from recompprof._model.vocabulary import CACHE_RESULTS, CACHES, OUTCOMES, PHASES

# Which exporter wrote a file: raised when a column is added or a figure's rule changes (see
# docs/history.md, "Versioning"); readers take every version of one root.
# 2: torch_release on every table; runs.steps null where no step was counted. 3: compiles' guard
# latency and remote cache lookups. 4: one unit suffix, ``_s`` (:data:`RENAMED`).
EXPORT_VERSION = 4

TABLES = ("runs", "compiles", "guard_failures", "graph_breaks")

# Columns renamed at export version 4, old name -> new, by table: exporters up to version 3 wrote the
# old names. Every reader takes a file's old column as the new one (the views, the printed ones
# too), and compaction writes a day under the new names.
RENAMED: dict[str, dict[str, str]] = {
    "runs": {
        "compile_seconds": "compile_s",
        "recompile_seconds": "recompile_s",
        "wall_seconds": "wall_s",
    },
    "compiles": {"compile_seconds": "compile_s", "cache_seconds_saved": "cache_saved_s"},
}

# The kinds of column (recompprof._history.tables gives each its Arrow type; each printed dialect its
# engine's): a timestamp is microseconds, UTC; a list holds strings, a map strings by string.
TIMESTAMP = "timestamp"
_STR = "string"
_I32 = "int32"
_I64 = "int64"
_F64 = "double"
_BOOL = "bool"
_STRS = "list"
_MAP = "map"


class Column(NamedTuple):
    """One column: its name, its kind (:data:`KINDS`) and its description (the one place a column is
    described in code; docs/history.md's tables are held to the same names and types by a test)."""

    name: str
    kind: str
    description: str


KINDS = (_STR, _I32, _I64, _F64, _BOOL, TIMESTAMP, _STRS, _MAP, "date")


def _fields(*columns: tuple[str, str, str]) -> list[Column]:
    return [Column(*column) for column in columns]


def _or(values: tuple[str, ...]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}"


# The rank session a row belongs to: pid tells a restarted rank's second log from its first.
SESSION_KEY = _fields(
    ("run_id", _STR, "the run (shared by its ranks)"),
    ("rank", _I32, "the rank"),
    ("pid", _I32, "the rank's process: a restarted rank's second session has another"),
)
# Denormalised onto every row, so most fleet questions need one table (Parquet dictionary-encodes them).
DIMENSIONS = _fields(
    ("torch_version", _STR, "torch's version in the session"),
    (
        "job",
        _STR,
        "the session's job (torch's job id, else the launcher's run id, else the run id)",
    ),
    ("team", _STR, "the session's label team (null without)"),
    ("model", _STR, "the session's label model (null without)"),
)
# Columns added since v1's first tables, at the end of every table (EXPORT_VERSION 2).
_ADDED = (
    (
        "torch_release",
        _STR,
        "torch's release without its build or pre-release parts (2.13.0 for 2.13.0+cpu): "
        "what versions are compared by",
    ),
)

RUNS = tuple(
    [
        *SESSION_KEY,
        *DIMENSIONS,
        *_fields(
            ("local_rank", _I32, "the rank on its host, from session_start"),
            ("world_size", _I32, "ranks in the job, from session_start"),
            ("host", _STR, "the host the rank ran on"),
            ("launcher", _STR, "what started the rank: torchrun, slurm or single"),
            ("restart_count", _I32, "the launcher's restarts of the job before this session"),
            ("mode", _STR, "monitor or profile"),
            ("source", _STR, "event_log, or torch_trace for an ingested trace"),
            ("profile_mechanism", _STR, "profile mode: evict or unlimited"),
            ("recompile_limit", _I32, "the session's recompile limit (null: unlimited or unknown)"),
            ("warmup_steps", _I32, "the session's warm-up steps"),
            ("python_version", _STR, "Python's version (null where empty)"),
            ("recompprof_version", _STR, "recompprof's version in the session"),
            ("triton_version", _STR, "Triton's version (null where empty)"),
            ("cuda_version", _STR, "CUDA's version (null where empty)"),
            ("labels", _MAP, "every label of the session"),
            ("start_time", TIMESTAMP, "its session_start (else its first event)"),
            ("end_time", TIMESTAMP, "its last event"),
            # completeness: what the log can vouch for
            (
                "ended",
                _BOOL,
                "a session_end was logged: false for a rank killed, crashed or running",
            ),
            ("signals_off", _STRS, "capture signals that were off or went dark"),
            ("events_dropped", _I64, "events the session counted as dropped, all sinks"),
            ("log_gap", _BOOL, "the session_end counts events the log lacks"),
            ("skipped_lines", _I64, "lines of the session's log the reader could not read"),
            ("compiling_at_end", _STR, "the frame of the compile the session left running"),
            ("internal_errors", _I64, "recompprof's internal errors in the session"),
            # totals, by the report's counting rules
            ("events", _I64, "events read (all but compile_start and compile_running)"),
            ("compiles", _I64, "forward compiles that happened"),
            ("recompiles", _I64, "compiles of a frame that already had compiled code"),
            ("steady_state_recompiles", _I64, "recompiles past the warm-up"),
            ("backward_compiles", _I64, "lazily compiled backwards"),
            ("limit_hits", _I64, "recompile_limit_hit events"),
            ("failures", _I64, "compiles that failed"),
            ("guard_failures", _I64, "guard failures, one per failing cache entry"),
            ("graph_breaks", _I64, "graph breaks of a frame (their counts)"),
            ("steps", _I64, "the last step seen (null: no step counted)"),
            ("compile_s", _F64, "compile time in seconds (forward and backward)"),
            ("recompile_s", _F64, "compile seconds charged to a cause: lost to recompiles"),
            ("wall_s", _F64, "the session's wall time in seconds, from its session_end"),
            ("export_version", _I32, "the exporter's table version"),
            ("exporter_version", _STR, "the recompprof that exported the row"),
            *_ADDED,
        ),
    ]
)

# A compile's exclusive phases and cache lookups, one column each: named from the event model's own
# vocabularies (recompprof._model.vocabulary), never spelled again here.
PHASE_COLUMNS = tuple(f"{phase}_s" for phase in PHASES)
CACHE_COLUMNS = tuple(f"{cache}_{result}" for cache in CACHES for result in CACHE_RESULTS)
# The lookups the remote cache answered: torch splits hits and misses (it counts no bypass).
REMOTE_RESULTS = tuple(result for result in CACHE_RESULTS if result != "bypass")
REMOTE_CACHE_COLUMNS = tuple(
    f"{cache}_remote_{result}" for cache in CACHES for result in REMOTE_RESULTS
)

# The frame columns of every fact table: frame_key is the identity diff matches on (docs/frames.md).
_FRAME = _fields(
    ("frame_key", _STR, "the frame's identity: its code object and owner class, as diff matches"),
    ("frame_name", _STR, "the user's function as written"),
)
_POSITION = _fields(
    ("time", TIMESTAMP, "when the event was logged (a compile's end)"),
    ("step", _I64, "the training step (null where unknown)"),
    ("compile_id", _STR, "torch's compile id (0/3)"),
    ("generation", _I32, "torch._dynamo.reset() calls seen before it (null: none)"),
)

COMPILES = tuple(
    [
        *SESSION_KEY,
        *DIMENSIONS,
        *_POSITION,
        *_fields(
            ("start_time", TIMESTAMP, "when torch started the compile"),
            ("backward", _BOOL, "a lazily compiled backward (its forward's compile_id)"),
        ),
        *_FRAME,
        *_fields(
            ("frame_file", _STR, "the function's file (shortened under redact)"),
            ("frame_line", _I32, "the function's line"),
            ("frame_owner", _STR, "the class of the instance it ran as a method of"),
            ("frame_label", _STR, "name (dir/file:line), as the report shows it"),
            # outcome
            ("is_recompile", _BOOL, "as on the event: the frame had cache entries"),
            ("cache_entries", _I32, "cache entries the compile is counted against"),
            ("outcome", _STR, _or(OUTCOMES)),
            ("fail_type", _STR, "torch's exception type"),
            ("fail_reason", _STR, "torch's exception text (null under redact or --no-text)"),
            ("installed_code", _BOOL, "false when torch installed nothing (a skipped frame)"),
            ("limit_name", _STR, "the recompile limit hit"),
            ("limit_value", _I32, "the value of the limit hit"),
            # verdicts, by recompprof._model.counting (sum these; never re-derive them)
            ("counts_as_compile", _BOOL, "counted in compiles"),
            ("counts_as_recompile", _BOOL, "counted in recompiles"),
            ("steady_state_recompile", _BOOL, "counted in steady_state_recompiles"),
            ("compile_s", _F64, "duration_s where it is compile time, else 0"),
            # time
            ("duration_s", _F64, "the compile's seconds"),
            *(
                (name, _F64, f"seconds of the {phase} phase, exclusive (null: not measured)")
                for name, phase in zip(PHASE_COLUMNS, PHASES, strict=True)
            ),
            # graph
            ("guard_count", _I32, "guards of the installed entry, as torch counted them"),
            ("graph_op_count", _I32, "ops of the graph, as torch counted them"),
            ("graph_breaks", _I32, "graph breaks in the compile, as torch counted them"),
            # the cause its seconds are charged to (recompprof._model.causes); null: not lost time
            ("cause_category", _STR, "category of the cause its seconds are charged to"),
            ("cause_subject", _STR, "subject of the cause its seconds are charged to"),
            ("reason_count", _I32, "guard-failure reasons listed"),
            ("reasons_omitted", _I32, "guard-failure reasons past the per-event cap"),
            # classification
            ("steady_state", _BOOL, "a cause that keeps costing compile time (steady state)"),
            ("automatic_dynamic", _STR, "what torch's automatic dynamic made dynamic"),
            # caches
            ("cache", _STR, "compile-cache outcome: hit, miss or null"),
            ("cache_saved_s", _F64, "compile seconds a cache hit saved, as torch says"),
            *(
                (f"{cache}_{result}", _I32, f"{cache} cache lookups that were a {result}")
                for cache in CACHES
                for result in CACHE_RESULTS
            ),
            # other
            ("guard_set", _STR, "fingerprint of the installed entry's guards"),
            ("trace_id", _STR, "the OpenTelemetry trace of this compile"),
            ("call_site", _STRS, "the user frames that called the compiled code, innermost last"),
            ("cudagraph_skip", _STR, "why CUDA graphs were not used (a category)"),
            # more of torch's compile record (null where the torch release does not report it)
            ("graph_node_count", _I32, "nodes of the graph"),
            ("graph_input_count", _I32, "inputs of the graph"),
            ("shape_env_guard_count", _I32, "symbolic-shape guards"),
            ("accumulated_cache_size", _I32, "cache entries of the code object"),
            ("param_numel", _I64, "elements of the compiled module(s)' parameters"),
            ("param_bytes", _I64, "bytes of the compiled module(s)' parameters"),
            ("triton_compile_s", _F64, "seconds of duration_s compiling Triton kernels"),
            ("restart_count", _I32, "Dynamo's restarts of the trace within this compile"),
            ("dynamo_config_sha", _STR, "hash of Dynamo's config"),
            ("inductor_config_sha", _STR, "hash of Inductor's config"),
            *_ADDED,
            # EXPORT_VERSION 3 (null where the torch release does not report them)
            (
                "guard_latency_s",
                _F64,
                "seconds torch measured evaluating the new entry's guards once",
            ),
            *(
                (
                    f"{cache}_remote_{result}",
                    _I32,
                    f"{cache} cache lookups that were a {result} of the remote cache",
                )
                for cache in CACHES
                for result in REMOTE_RESULTS
            ),
        ),
    ]
)

GUARD_FAILURES = tuple(
    [
        *SESSION_KEY,
        *DIMENSIONS,
        *_POSITION,
        *_FRAME,
        *_fields(
            ("position", _I32, "the reason's place in its compile's list (null: omitted reasons)"),
            ("entry", _STR, "compile id of the cache entry that failed"),
            ("category", _STR, "the reason's category"),
            ("subject", _STR, "the reason's subject"),
            ("explains_change", _BOOL, "the reason that explains the recompile"),
            ("counts_as_change", _BOOL, "explains_change of a counted recompile"),
            ("steady_state", _BOOL, "the compile's steady-state verdict"),
            ("text", _STR, "torch's text (empty under redact or --no-text)"),
            ("count", _I32, "1, or the reasons an event left out past its cap (position null)"),
            *_ADDED,
        ),
    ]
)

GRAPH_BREAKS = tuple(
    [
        *SESSION_KEY,
        *DIMENSIONS,
        *_POSITION,
        *_FRAME,
        *_fields(
            ("reason", _STR, "torch's graph-break type"),
            ("explanation", _STR, "torch's explanation (null under redact or --no-text)"),
            ("hints", _STRS, "torch's hints (empty under redact or --no-text)"),
            ("user_location", _STR, "file:line of the user code that broke the graph"),
            ("skipped_frame", _BOOL, "torch could not resume: the frame ran eagerly"),
            ("count", _I32, "breaks this event stands for"),
            *_ADDED,
        ),
    ]
)

COLUMNS: dict[str, tuple[Column, ...]] = {
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

# Snappy, as compaction writes: half zstd's CPU for ~10 % more bytes (still ~1/13 of the JSONL).
COMPRESSION = "snappy"
# Statistics (what lets a reader skip a row group) where questions filter: the session, the time, the
# frame, the cause; the other columns' cost an export a tenth of its writing and prune nothing.
STATISTICS = frozenset(
    {
        *FACT_KEY,
        "start_time",
        "end_time",
        "frame_key",
        "category",
        "cause_category",
        "torch_release",
    }
)
