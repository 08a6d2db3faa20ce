"""Read one torch ``CompilationMetrics`` record (live, or a trace's dict of it) into a plain record.

Live capture and ``ingest`` both call :func:`read_record`: this is the one module that knows torch's field
names and what each torch release writes in them, so the model (``recompprof._model.compile_record``)
reads recompprof's :class:`CompileRecord` alone. Every field torch may leave out or rename reads as None /
empty.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

from recompprof._model.compile_record import CompileRecord, DynamicSettings
from recompprof._model.cudagraphs import CudagraphSkip, classify_skip
from recompprof._model.texts import clean_text
from recompprof._torch.phases import phases_of

# torch's recompile_reason when it found none (an invalidated entry's reason shows only there)
NO_REASON = "Unable to find recompilation reasons"
_CLASS_REPR = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>")
T = TypeVar("T")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return str(value) if value else None


Get = Callable[[str], Any]  # a record's field by torch's name (None: the record has no such field)


def fields_of(m: Any) -> Get:
    """How to read record ``m``'s fields: a trace's dict, a live record's own attributes (a dataclass
    instance's ``__dict__``: one dict lookup a field on the compile path), else ``getattr``."""
    if isinstance(m, dict):
        return m.get
    own = getattr(m, "__dict__", None)
    # dataclasses.is_dataclass of an instance, without its Python call (an instance's __dict__ is a dict)
    if isinstance(own, dict) and hasattr(type(m), "__dataclass_fields__"):
        return own.get
    return lambda name: getattr(m, name, None)


def cache_outcome(m: Any) -> Literal["hit", "miss"] | None:
    """``miss`` if any compile cache missed, ``hit`` if one hit, else None."""
    return _cache_outcome(fields_of(m))


def _cache_outcome(get: Get) -> Literal["hit", "miss"] | None:
    if (get("inductor_fx_local_cache_miss_count") or 0) + (
        get("aotautograd_local_cache_miss_count") or 0
    ):
        return "miss"
    hits = (get("inductor_fx_local_cache_hit_count") or 0) + (
        get("aotautograd_local_cache_hit_count") or 0
    )
    return "hit" if hits else None


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
    return _cache_lookups(fields_of(m))


def _cache_lookups(get: Get) -> Any:
    usage = get("feature_usage")
    usage = usage if isinstance(usage, dict) else {}
    out: dict[str, dict[str, int]] = {}  # keys from the closed sets events.CACHES / CACHE_RESULTS
    for cache, fields, feature in _CACHE_FIELDS:
        results: dict[str, int] = {}
        for result, names in fields:
            n = 0
            for name in names:
                value = get(name)
                n += value if isinstance(value, int) and value > 0 else 0
            if n:
                results[result] = n
        if not results and feature in usage:
            results = {"bypass": 1}
        if results:
            out[cache] = results
    return out


# (cache, ((result, torch's count of the remote cache's lookups of that result), ...))
_REMOTE_FIELDS = (
    (
        "fx_graph",
        (
            ("hit", "inductor_fx_remote_cache_hit_count"),
            ("miss", "inductor_fx_remote_cache_miss_count"),
        ),
    ),
    (
        "aot_autograd",
        (
            ("hit", "aotautograd_remote_cache_hit_count"),
            ("miss", "aotautograd_remote_cache_miss_count"),
        ),
    ),
)


def remote_cache_lookups(m: Any) -> Any:  # dict[CacheName, dict[CacheResult, int]] | None
    """The lookups of :func:`cache_lookups` the remote cache answered, ``{cache: {result: count}}``
    (counts above 0 only); None where the record has none of torch's remote counts (a torch release
    that does not split them)."""
    return _remote_cache_lookups(fields_of(m))


def _remote_cache_lookups(get: Get) -> Any:
    out: dict[str, dict[str, int]] = {}
    reported = False
    for cache, fields in _REMOTE_FIELDS:
        for result, name in fields:
            value = get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                reported = True
                if value > 0:
                    out.setdefault(cache, {})[result] = value
    return out if reported else None


def cache_seconds_saved(m: Any) -> float | None:
    """Compile seconds the FX graph cache hits of ``m`` saved (torch's ``remote_cache_time_saved_s``,
    which despite its name sums local and remote hits)."""
    return _cache_seconds_saved(fields_of(m)("remote_cache_time_saved_s"))


def _cache_seconds_saved(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


# (recompprof's name, torch's dynamo_config key) of the settings automatic dynamic depends on
_DYNAMIC_SETTINGS = (
    ("automatic", "automatic_dynamic_shapes"),
    ("static_by_default", "assume_static_by_default"),
    ("static_parameters", "force_parameter_static_shapes"),
    ("specialize_int", "specialize_int"),
    ("specialize_float", "specialize_float"),
    ("unspec_int_on_modules", "allow_unspec_int_on_nn_module"),
)


class _ByText(Generic[T]):
    """What each of a few long texts was read to, found by comparing texts with ``==`` (their lengths, then
    their bytes) rather than by a dict lookup: torch writes a record's config texts afresh for every compile
    (5-25 kB each), so a dict would first hash each text in full, which costs several times the comparison
    (bounded: cleared when full, as settings changed mid-job)."""

    __slots__ = ("_bound", "_read")

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._read: list[tuple[str, T]] = []

    def get(self, text: str) -> T | None:
        for known, value in self._read:
            if known == text:
                return value
        return None

    def put(self, text: str, value: T) -> T:
        if len(self._read) >= self._bound:
            self._read.clear()
        self._read.append((text, value))
        return value


# a job's compiles repeat a few settings texts (a forward's and a backward's differ)
_READ_SETTINGS: _ByText[DynamicSettings] = _ByText(8)
_NO_SETTINGS = DynamicSettings()


def dynamic_settings(m: Any) -> DynamicSettings:
    """What the record's ``dynamo_config`` (a JSON string in torch's record) says of automatic dynamic;
    nothing when it is missing or unreadable."""
    return _dynamic_settings(fields_of(m)("dynamo_config"))


def _dynamic_settings(value: Any) -> DynamicSettings:
    if isinstance(value, dict):
        return _settings(value)
    if not isinstance(value, str):
        return _NO_SETTINGS
    # Parsing the ~5 kB text was most of reading a record: read each distinct text once.
    settings = _READ_SETTINGS.get(value)
    if settings is None:
        try:
            parsed = json.loads(value)
        except ValueError:
            return _NO_SETTINGS
        if not isinstance(parsed, dict):
            return _NO_SETTINGS
        settings = _READ_SETTINGS.put(value, _settings(parsed))
    return settings


def _settings(config: dict[str, Any]) -> DynamicSettings:
    return DynamicSettings(
        **{
            name: value if isinstance(value := config.get(key), bool) else None
            for name, key in _DYNAMIC_SETTINGS
        }
    )


def cudagraph_skip(m: Any) -> CudagraphSkip | None:
    """The skip a ``CompilationMetrics`` record (or a trace's dict of it) carries, else None."""
    return _cudagraph_skip(fields_of(m)("cudagraph_skip_reason"))


def _cudagraph_skip(text: Any) -> CudagraphSkip | None:
    if not text:
        return None
    return CudagraphSkip(classify_skip(text), clean_text(text))


def runtime_work(m: Any) -> tuple[str, float] | None:
    """``("cudagraph_record" | "autotune", seconds)`` if ``m`` is a *runtime* record, else None.

    On a GPU torch emits extra ``CompilationMetrics`` records with ``is_runtime=True`` after a
    compiled graph runs: time spent recording CUDA graphs (``runtime_cudagraphify_time_us``, one per
    recording: first record and every re-record) or autotuning Triton kernels at first launch
    (``runtime_triton_autotune_time_us``). They are not compiles and must not be counted as such.
    """
    return _runtime_work(fields_of(m))


def _runtime_work(get: Get) -> tuple[str, float] | None:
    if get("is_runtime") is not True:
        return None
    for kind, field in (
        ("cudagraph_record", "runtime_cudagraphify_time_us"),
        ("autotune", "runtime_triton_autotune_time_us"),
    ):
        value = get(field)
        if isinstance(value, (int, float)) and value > 0:
            return kind, float(value) / 1e6
    return "other", 0.0


# a job's compiles repeat a few config texts (a forward's and a backward's differ)
_HASHED: _ByText[str] = _ByText(16)


def config_sha(value: Any) -> str | None:
    """The first 16 hex digits of the sha256 of a config JSON torch's record carries (its text, or a
    trace's dict of it, written back with sorted keys), None where the record has none: which config a
    compile ran with, without the tens of kilobytes of the text."""
    if isinstance(value, dict):
        value = json.dumps(value, sort_keys=True, default=str)
    if not isinstance(value, str) or not value:
        return None
    found = _HASHED.get(value)
    if found is None:
        found = _HASHED.put(
            value, hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:16]
        )
    return found


# A record's dynamo_config read once for both what it says of automatic dynamic and its hash: one
# comparison of the text with those seen before, where each reading would compare it again (cold: the texts
# seen before are out of the CPU caches by the next compile).
_READ_DYNAMO: _ByText[tuple[DynamicSettings, str | None]] = _ByText(8)


def _dynamo_config(value: Any) -> tuple[DynamicSettings, str | None]:
    """:func:`dynamic_settings` and :func:`config_sha` of a record's ``dynamo_config``."""
    if not isinstance(value, str) or not value:
        return _dynamic_settings(value), config_sha(value)
    found = _READ_DYNAMO.get(value)
    if found is None:
        found = _READ_DYNAMO.put(value, (_dynamic_settings(value), config_sha(value)))
    return found


def restart_count(value: Any) -> int | None:
    """How many times Dynamo restarted the compile's trace: torch records the reasons (a set; a trace's
    list), None where the record has no such field."""
    return len(value) if isinstance(value, (set, frozenset, list, tuple)) else None


def _seconds(value_us: Any) -> float | None:
    return (
        float(value_us) / 1e6
        if isinstance(value_us, (int, float)) and not isinstance(value_us, bool)
        else None
    )


def fail_type_name(value: Any) -> str:
    """The exception's class name; torch before 2.5 records ``str(type(exc))``, "<class 'torch._dynamo.exc.X'>"."""
    text = clean_text(value, 200)
    match = _CLASS_REPR.fullmatch(text.strip())
    return match.group(1) if match else text


def installed_code(
    backward: bool, failed: bool, has_guarded_code: bool | None, guard_count: int | None
) -> bool:
    """False when torch traced the frame of a forward record and installed no code for it: it skipped the
    frame (a resumed frame with nothing left to compile, say), which runs eagerly from then on.

    Torch 2.4-2.6 say so in ``has_guarded_code``; 2.8 and later (2.7 not checked) set it for a skip too
    (they wrap "nothing" in a return object), but a skip builds no output graph, so its record has no
    guard count. A record without ``has_guarded_code`` (not torch's) is taken as a compile. A failed or refused
    compile installs nothing either; it is counted as what it is (failed, limit hit).
    """
    if backward or failed or has_guarded_code is None:
        return True
    return has_guarded_code and guard_count is not None


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
    get = fields_of(m)  # each field read once, by one call
    duration, phases = phases_of(get)  # keys: events.PHASES
    start = get("start_time_us")
    compile_id = get("compile_id")
    backward = get("is_forward") is False  # no is_forward before 2.6: forwards only
    fail_type = _text(get("fail_type"))
    fail_reason = _text(get("fail_reason"))
    guard_count = _int(get("guard_count"))
    has_guarded_code = _bool(get("has_guarded_code"))
    reason = _text(get("recompile_reason"))
    dynamic, dynamo_sha = _dynamo_config(get("dynamo_config"))
    return CompileRecord(
        compile_id=str(compile_id) if compile_id is not None else None,
        code_name=_text(get("co_name")),
        code_file=_text(get("co_filename")),
        code_line=_int(get("co_firstlineno")),
        backward=backward,
        fail_type=fail_type_name(fail_type) if fail_type else None,
        fail_reason=fail_reason,
        cache_entries=_int(get("cache_size")),
        reason_text=reason if reason != NO_REASON else None,
        start_time=start * 1e-6 if isinstance(start, (int, float)) and start else None,
        duration=duration,
        phases=phases,  # type: ignore[arg-type]
        guard_count=guard_count,
        graph_op_count=_int(get("graph_op_count")),
        installed_code=installed_code(
            backward, bool(fail_type or fail_reason), has_guarded_code, guard_count
        ),
        cache=_cache_outcome(get),
        cache_lookups=_cache_lookups(get),
        cache_seconds_saved=_cache_seconds_saved(get("remote_cache_time_saved_s")),
        cudagraph_skip=_cudagraph_skip(get("cudagraph_skip_reason")),
        runtime_work=_runtime_work(get),
        dynamic=dynamic,
        graph_node_count=_int(get("graph_node_count")),
        graph_input_count=_int(get("graph_input_count")),
        shape_env_guard_count=_int(get("shape_env_guard_count")),
        accumulated_cache_size=_int(get("accumulated_cache_size")),
        param_numel=_int(get("param_numel")),
        param_bytes=_int(get("param_bytes")),
        triton_compile_s=_seconds(get("triton_compile_time_us")),
        restart_count=restart_count(get("restart_reasons")),
        dynamo_config_sha=dynamo_sha,
        inductor_config_sha=config_sha(get("inductor_config")),
        guard_latency_s=_seconds(get("guard_latency_us")),
        remote_cache_lookups=_remote_cache_lookups(get),
    )
