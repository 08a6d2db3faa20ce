"""What one torch compile record says by itself: its plain values, its outcome, its reason texts.

Live capture and ``ingest`` both read torch's ``CompilationMetrics`` (live from the logger, or from a
TORCH_TRACE file) into a :class:`CompileRecord` (``recompprof._torch.records``); the rules here read
only the record: whether it was a recompile-limit hit (:func:`limit_hit`), whether torch installed code
for it (:func:`installed_code`), the exception's class name and the reason texts it carries.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

from recompprof._model.compile_id import CompileId
from recompprof._model.cudagraphs import CudagraphSkip
from recompprof._model.events import LIMITS, CacheName, CacheResult, Phase
from recompprof._model.reasons import clean_text

_LIMIT = re.compile(r"Limit type: (\w+)")
_LIMIT_VALUE = re.compile(r"currently set to (\d+)")
_REACHED = re.compile(r"^((?:accumulated_)?(?:cache_size|recompile)_limit) reached")
_CLASS_REPR = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>")
_LIMIT_ALIASES = {
    "cache_size_limit": "recompile_limit",
    "accumulated_cache_size_limit": "accumulated_recompile_limit",
}
NO_REASON = "Unable to find recompilation reasons"


@dataclasses.dataclass(slots=True)
class CompileRecord:
    """The plain values of one torch ``CompilationMetrics`` record (absent fields are None / empty)."""

    compile_id: str | None = None
    co_name: str | None = None
    co_filename: str | None = None
    co_firstlineno: int | None = None
    is_forward: bool = True
    fail_type: str | None = None
    fail_reason: str | None = None
    cache_size: int | None = None
    recompile_reason: str | None = None
    start_time: float | None = None  # seconds since the epoch
    duration: float = 0.0
    phases: dict[Phase, float] = dataclasses.field(
        default_factory=dict
    )  # exclusive, summing to duration
    guard_count: int | None = None
    graph_op_count: int | None = None
    has_guarded_code: bool | None = None
    cache: Literal["hit", "miss"] | None = None
    cache_lookups: dict[CacheName, dict[CacheResult, int]] = dataclasses.field(default_factory=dict)
    cache_seconds_saved: float | None = None
    cudagraph_skip: CudagraphSkip | None = None
    runtime_work: tuple[str, float] | None = (
        None  # a GPU runtime record (CUDA-graph recording, autotune): no compile
    )
    dynamo_config: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # the compile's Dynamo settings


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
    fail_reason, fail_type = m.fail_reason, fail_type_name(m.fail_type) if m.fail_type else ""
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


def installed_code(m: CompileRecord) -> bool:
    """False when torch traced the frame of forward record ``m`` and installed no code for it: it skipped the
    frame (a resumed frame with nothing left to compile, say), which runs eagerly from then on.

    Torch 2.4-2.6 say so in ``has_guarded_code``; 2.8 and later (2.7 not checked) set it for a skip too
    (they wrap "nothing" in a return object), but a skip builds no output graph, so its record has no
    guard count. A record without ``has_guarded_code`` (not torch's) is taken as a compile. A failed or refused
    compile installs nothing either; it is counted as what it is (failed, limit hit).
    """
    if not m.is_forward or m.fail_type or m.fail_reason or m.has_guarded_code is None:
        return True
    return m.has_guarded_code and m.guard_count is not None


def fail_type_name(value: Any) -> str:
    """The exception's class name; torch before 2.5 records ``str(type(exc))``, "<class 'torch._dynamo.exc.X'>"."""
    text = clean_text(value, 200)
    match = _CLASS_REPR.fullmatch(text.strip())
    return match.group(1) if match else text


def reason_texts(m: CompileRecord, from_guard_failures: list[str]) -> list[str]:
    """The reason texts of a compile: torch's per-entry list, else its single ``recompile_reason``."""
    if from_guard_failures:
        return from_guard_failures
    reason = m.recompile_reason
    return [reason] if reason and reason != NO_REASON else []  # invalidated entries only show here
