"""What one compile record says by itself: its plain values, whether it was a limit hit, its reason texts.

Live capture and ``ingest`` both read torch's own record of a compile (live from the logger, or from a
TORCH_TRACE file) into a :class:`CompileRecord` in ``recompprof._torch.records``, the one place that knows
torch's field names; the rules here read only the plain record: whether it was a recompile-limit hit
(:func:`limit_hit`) and the reason texts it carries (:func:`reason_texts`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

from recompprof._model.compile_id import CompileId
from recompprof._model.cudagraphs import CudagraphSkip
from recompprof._model.vocabulary import LIMITS, CacheName, CacheResult, Phase

_LIMIT = re.compile(r"Limit type: (\w+)")
_LIMIT_VALUE = re.compile(r"currently set to (\d+)")
_REACHED = re.compile(r"^((?:accumulated_)?(?:cache_size|recompile)_limit) reached")
_LIMIT_ALIASES = {
    "cache_size_limit": "recompile_limit",
    "accumulated_cache_size_limit": "accumulated_recompile_limit",
}


@dataclasses.dataclass(frozen=True, slots=True)
class DynamicSettings:
    """What a compile's Dynamo settings say of automatic dynamic shapes (None: the record does not say)."""

    automatic: bool | None = None  # sizes that change are made dynamic
    static_by_default: bool | None = None  # dims start static
    static_parameters: bool | None = None  # parameters' shapes stay static
    specialize_int: bool | None = None
    specialize_float: bool | None = None
    unspec_int_on_modules: bool | None = None  # an int attribute of a module may become dynamic


# Not frozen: a frozen dataclass sets each of its ~30 fields through object.__setattr__, once per compile record.
@dataclasses.dataclass(slots=True)
class CompileRecord:
    """One compile as torch recorded it, in recompprof's terms (what the record leaves out is None / empty).

    A field that the ``compile`` event declares too (``backward``, ``fail_type``, ``cache_entries``, the
    measures) means the same here and reaches the event as it is.
    """

    compile_id: str | None = None  # torch's compile id, as torch wrote it
    # the compiled code object (None: the record names none, a limit hit)
    code_name: str | None = None
    code_file: str | None = None
    code_line: int | None = None
    backward: bool = False  # a lazily compiled backward, which shares its forward's compile id
    fail_type: str | None = None  # the exception's class name (None: the compile raised nothing)
    fail_reason: str | None = None  # torch's text of the failure or refusal
    cache_entries: int | None = None  # the frame's cache entries the compile is counted against
    reason_text: str | None = None  # torch's one recompile reason, where it gives one
    start_time: float | None = None  # seconds since the epoch
    duration: float = 0.0
    phases: dict[Phase, float] = dataclasses.field(
        default_factory=dict
    )  # exclusive, summing to duration
    guard_count: int | None = None
    graph_op_count: int | None = None
    installed_code: bool = True  # False: torch traced the frame and installed nothing (a skip)
    cache: Literal["hit", "miss"] | None = None
    cache_lookups: dict[CacheName, dict[CacheResult, int]] = dataclasses.field(default_factory=dict)
    cache_seconds_saved: float | None = None
    cudagraph_skip: CudagraphSkip | None = None
    # a GPU runtime record (CUDA-graph recording, autotune): no compile
    runtime_work: tuple[str, float] | None = None
    dynamic: DynamicSettings = DynamicSettings()
    # More of torch's record, for the history lake (None: the torch release does not report it).
    graph_node_count: int | None = None
    graph_input_count: int | None = None
    shape_env_guard_count: int | None = None
    accumulated_cache_size: int | None = None
    param_numel: int | None = None
    param_bytes: int | None = None
    triton_compile_s: float | None = None
    restart_count: int | None = None
    dynamo_config_sha: str | None = None
    inductor_config_sha: str | None = None
    guard_latency_s: float | None = None  # torch's guard_latency_us, in seconds
    # The lookups of cache_lookups the remote cache answered (None: torch does not split them).
    remote_cache_lookups: dict[CacheName, dict[CacheResult, int]] | None = None


# torch raises these instead of falling back to eager when the limit is hit under fullgraph=True or
# config.fail_on_recompile_limit_hit (FailOnCacheLimitHit before the limits were renamed).
_RAISING_LIMIT_HITS = ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")


def limit_hit(
    m: CompileRecord, limits: dict[str, int | None] | None = None
) -> tuple[str, int | None] | None:
    """``(limit name, its value)`` if record ``m`` is a recompile-limit hit, else None.

    A hit either falls back to eager (``fail_reason`` is torch's "recompile limit exceeded … Limit type:
    …" text, "<limit> reached" on 2.5-2.7) or raises ``FailOnRecompileLimitHit``, whose message names no
    limit: then it is the accumulated limit when the frame's compile count reached it, else the
    per-frame limit (torch's own order of checks). ``limits`` are the configured values, for hits whose
    text names none.
    """
    fail_reason, fail_type = m.fail_reason, m.fail_type or ""
    limits = limits or {}
    if fail_type in _RAISING_LIMIT_HITS:
        accumulated = limits.get("accumulated_recompile_limit")
        parsed = CompileId.parse(m.compile_id)
        frame_compile = parsed.frame_compile_id if parsed is not None else None
        name = (
            "accumulated_recompile_limit"
            if accumulated is not None
            and frame_compile is not None
            and frame_compile >= accumulated
            else "recompile_limit"
        )
        return name, limits.get(name)
    if not fail_reason:
        return None
    text = str(fail_reason)
    if reached := _REACHED.search(
        text
    ):  # torch 2.5-2.7: "cache_size_limit reached"; the value is not in it
        name = _LIMIT_ALIASES.get(reached.group(1), reached.group(1))
        name = name if name in LIMITS else "recompile_limit"
        return name, limits.get(name)
    if "recompile limit exceeded" not in text.lower():
        return None
    match = _LIMIT.search(text)
    name = _LIMIT_ALIASES.get(match.group(1), match.group(1)) if match else "recompile_limit"
    name = name if name in LIMITS else "recompile_limit"
    value = _LIMIT_VALUE.search(text)
    return name, (int(value.group(1)) if value else limits.get(name))


def reason_texts(m: CompileRecord, from_guard_failures: list[str]) -> list[str]:
    """The reason texts of a compile: torch's per-entry list, else the record's one reason."""
    if from_guard_failures:
        return from_guard_failures
    return [m.reason_text] if m.reason_text else []  # invalidated entries only show here
