"""Read one torch ``CompilationMetrics`` record (live, or a trace's dict of it) into plain values.

Live capture and ``ingest`` both call :func:`read_record`, so the core (``recompprof._model.compiles``)
never reads a torch field itself. Every field torch may leave out or rename reads as None / empty.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from recompprof._model.compiles import CompileRecord
from recompprof._model.cudagraphs import cudagraph_skip, runtime_work
from recompprof._torch.phases import exclusive_phases


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return str(value) if value else None


def cache_outcome(m: Any) -> Literal["hit", "miss"] | None:
    """``miss`` if any compile cache missed, ``hit`` if one hit, else None."""

    def count(*names: str) -> int:
        return sum(getattr(m, n, None) or 0 for n in names)

    if count("inductor_fx_local_cache_miss_count", "aotautograd_local_cache_miss_count"):
        return "miss"
    return (
        "hit"
        if count("inductor_fx_local_cache_hit_count", "aotautograd_local_cache_hit_count")
        else None
    )


# (cache, ((result, torch's count fields), ...), the feature_usage key that says it was consulted)
_CACHE_FIELDS = tuple(
    (
        cache,
        tuple((r, tuple(f"{p}_cache_{r}_count" for p in prefixes)) for r in ("hit", "miss")),
        feature,
    )
    for cache, prefixes, feature in (
        ("fx_graph", ("inductor_fx_local", "inductor_fx_remote"), "fx_cache"),
        ("aot_autograd", ("aotautograd_local", "aotautograd_remote"), "aot_autograd_remote_cache"),
    )
)


def cache_lookups(m: Any) -> Any:  # dict[CacheName, dict[CacheResult, int]]
    """Compile-cache lookups of record ``m``: ``{cache: {result: count}}`` (empty: no cache consulted).

    Hits and misses are torch's own counts (local and remote). torch counts no bypass: a cache it
    consulted (``feature_usage``: ``fx_cache`` / ``aot_autograd_remote_cache`` set) that neither hit
    nor missed was bypassed (an uncacheable graph), and ``fx_cache: False`` means it was turned off.
    """
    usage = getattr(m, "feature_usage", None)
    usage = usage if isinstance(usage, dict) else {}
    out: dict[str, dict[str, int]] = {}  # keys from the closed sets events.CACHES / CACHE_RESULTS
    for cache, fields, feature in _CACHE_FIELDS:
        results: dict[str, int] = {}
        for result, names in fields:
            n = 0
            for name in names:
                value = getattr(m, name, None)
                n += value if isinstance(value, int) and value > 0 else 0
            if n:
                results[result] = n
        if not results and feature in usage:
            results = {"bypass": 1}
        if results:
            out[cache] = results
    return out


def cache_seconds_saved(m: Any) -> float | None:
    """Compile seconds the FX graph cache hits of ``m`` saved (torch's ``remote_cache_time_saved_s``,
    which despite its name sums local and remote hits)."""
    value = getattr(m, "remote_cache_time_saved_s", None)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


# text -> parsed: a job's compiles repeat a few settings texts (a forward's and a backward's differ).
_PARSED_CONFIGS: dict[str, dict[str, Any]] = {}


def dynamo_config(m: Any) -> dict[str, Any]:
    """The record's ``dynamo_config`` (a JSON string in torch's record); empty when it is missing or unreadable."""
    value = getattr(m, "dynamo_config", None)
    if isinstance(value, str):
        # Parsing the ~5 kB text was most of reading a record: parse each distinct text once.
        parsed = _PARSED_CONFIGS.get(value)
        if parsed is None:
            try:
                parsed = json.loads(value)
            except ValueError:
                return {}
            if not isinstance(parsed, dict):
                return {}
            if len(_PARSED_CONFIGS) >= 8:  # bounded: settings changed mid-job
                _PARSED_CONFIGS.clear()
            _PARSED_CONFIGS[value] = parsed
        return dict(parsed)  # a copy: callers own what they get
    return value if isinstance(value, dict) else {}


def read_record(m: Any, *, live: bool = False) -> CompileRecord:
    """The plain values of record ``m`` that recompprof uses.

    ``live``: ``m`` came from torch itself, so it has the fields every torch record has (a compile
    id; a forward's code name); one without them is not torch's shape and raises ``AttributeError``,
    which the adapter counts as an internal error. A trace's record may leave them out.
    """
    if live:
        m.compile_id  # noqa: B018 - the check is the attribute read
        if getattr(m, "is_forward", None) is not False:
            m.co_name  # noqa: B018
    duration, phases = exclusive_phases(m)  # keys: events.PHASES
    start = getattr(m, "start_time_us", None)
    compile_id = getattr(m, "compile_id", None)
    return CompileRecord(
        compile_id=str(compile_id) if compile_id is not None else None,
        co_name=_text(getattr(m, "co_name", None)),
        co_filename=_text(getattr(m, "co_filename", None)),
        co_firstlineno=_int(getattr(m, "co_firstlineno", None)),
        is_forward=getattr(m, "is_forward", None)
        is not False,  # no is_forward before 2.6: forward records only
        fail_type=_text(getattr(m, "fail_type", None)),
        fail_reason=_text(getattr(m, "fail_reason", None)),
        cache_size=_int(getattr(m, "cache_size", None)),
        recompile_reason=_text(getattr(m, "recompile_reason", None)),
        start_time=start * 1e-6 if isinstance(start, (int, float)) and start else None,
        duration=duration,
        phases=phases,  # type: ignore[arg-type]
        guard_count=_int(getattr(m, "guard_count", None)),
        graph_op_count=_int(getattr(m, "graph_op_count", None)),
        has_guarded_code=_bool(getattr(m, "has_guarded_code", None)),
        cache=cache_outcome(m),
        cache_lookups=cache_lookups(m),
        cache_seconds_saved=cache_seconds_saved(m),
        cudagraph_skip=cudagraph_skip(m),
        runtime_work=runtime_work(m),
        dynamo_config=dynamo_config(m),
    )
