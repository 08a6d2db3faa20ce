"""What one ``CompilationMetrics`` record means, shared by the live session and ``ingest``.

Both read the same torch record (live from the logger, or from a TORCH_TRACE file) and must turn it
into the same events, so the rules live here once: outcome and limit detection, cache outcome,
which reason explains the change, and the ``Compile`` / ``RecompileLimitHit`` events themselves.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
import re
from typing import Any

from recompprof._torch.phases import exclusive_phases
from recompprof.breaks import parse_graph_break
from recompprof.cudagraphs import cudagraph_skip
from recompprof.events import LIMITS, Compile, Frame, GraphBreak, Reason, RecompileLimitHit
from recompprof.reasons import clean_text, parse_guard_failure

_LIMIT = re.compile(r"Limit type: (\w+)")
_LIMIT_VALUE = re.compile(r"currently set to (\d+)")
_REACHED = re.compile(r"^((?:accumulated_)?(?:cache_size|recompile)_limit) reached")
_CLASS_REPR = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>")
_LIMIT_ALIASES = {"cache_size_limit": "recompile_limit", "accumulated_cache_size_limit": "accumulated_recompile_limit"}
NO_REASON = "Unable to find recompilation reasons"
MAX_SEEN_REASONS = 4096  # reason hashes remembered per frame
MAX_FRAMES_REMEMBERED = 256
MAX_REASONS_PER_EVENT = 64
# Categories an identity guard can land in from its text alone; the live object's type can refine them.
_BY_OBJECT = frozenset({"object_identity", "python_constant", "module_attribute", "global", "type", "other"})


# torch raises these instead of falling back to eager when the limit is hit under fullgraph=True or
# config.fail_on_recompile_limit_hit (FailOnCacheLimitHit before the limits were renamed).
_RAISING_LIMIT_HITS = ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")


def limit_hit(m: Any, limits: dict[str, int | None] | None = None) -> tuple[str, int | None] | None:
    """``(limit name, its value)`` if record ``m`` is a recompile-limit hit, else None.

    A hit either falls back to eager (``fail_reason`` is torch's "recompile limit exceeded … Limit type:
    …" text, "<limit> reached" on 2.5-2.7) or raises ``FailOnRecompileLimitHit``, whose message names no
    limit: then it is the accumulated limit when the frame's compile count reached it, else the
    per-frame limit (torch's own order of checks). ``limits`` are the configured values, for hits whose
    text names none.
    """
    fail_reason, fail_type = getattr(m, "fail_reason", None), _fail_type(getattr(m, "fail_type", None) or "")
    limits = limits or {}
    if fail_type in _RAISING_LIMIT_HITS:
        accumulated = limits.get("accumulated_recompile_limit")
        frame_compile = _frame_compile_count(getattr(m, "compile_id", None))
        name = ("accumulated_recompile_limit" if accumulated is not None and frame_compile is not None
                and frame_compile >= accumulated else "recompile_limit")
        return name, limits.get(name)
    if not fail_reason:
        return None
    text = str(fail_reason)
    if reached := _REACHED.search(text):  # torch 2.5-2.7: "cache_size_limit reached"; the value is not in it
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


def _frame_compile_count(compile_id: Any) -> int | None:
    match = re.match(r"!?\d+/(\d+)", str(compile_id or ""))
    return int(match.group(1)) if match else None


def cache_outcome(m: Any) -> str | None:
    """``miss`` if any compile cache missed, ``hit`` if one hit, else None."""
    def count(*names: str) -> int:
        return sum(getattr(m, n, None) or 0 for n in names)

    if count("inductor_fx_local_cache_miss_count", "aotautograd_local_cache_miss_count"):
        return "miss"
    return "hit" if count("inductor_fx_local_cache_hit_count", "aotautograd_local_cache_hit_count") else None


def cache_lookups(m: Any) -> dict[str, dict[str, int]]:
    """Compile-cache lookups of record ``m``: ``{cache: {result: count}}`` (empty: no cache consulted).

    Hits and misses are torch's own counts (local and remote). torch counts no bypass: a cache it
    consulted (``feature_usage``: ``fx_cache`` / ``aot_autograd_remote_cache`` set) that neither hit
    nor missed was bypassed (an uncacheable graph), and ``fx_cache: False`` means it was turned off.
    """
    def count(name: str) -> int:
        value = getattr(m, name, None)
        return value if isinstance(value, int) and value > 0 else 0

    usage = getattr(m, "feature_usage", None)
    usage = usage if isinstance(usage, dict) else {}
    out: dict[str, dict[str, int]] = {}
    for cache, prefixes, feature in (
        ("fx_graph", ("inductor_fx_local", "inductor_fx_remote"), "fx_cache"),
        ("aot_autograd", ("aotautograd_local", "aotautograd_remote"), "aot_autograd_remote_cache"),
    ):
        results = {r: sum(count(f"{p}_cache_{r}_count") for p in prefixes) for r in ("hit", "miss")}
        results = {r: n for r, n in results.items() if n}
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


_SIZE_MISMATCH = re.compile(r"size mismatch at index (\d+)")


class Explained(tuple):  # type: ignore[type-arg]
    """``(kept reasons, omitted counts by category)``, plus ``first_size_change``: False when the explaining
    reason is a size change of a tensor dim that already changed on this frame (so it is not automatic
    dynamic shapes warming up: that happens once per dim)."""

    first_size_change: bool = True


class ReasonExplainer:
    """Parses reason texts, marks the one that explains each recompile, and caps what is kept.

    Torch lists one reason per failing cache entry, most recently *used* first, so its first reason
    can describe an older variant. The reason that explains the change is the first one this frame
    has not failed with before; if all are old, the first one. An event keeps the explaining reason
    and the first others up to ``MAX_REASONS_PER_EVENT``; the rest are counted by category. Memory
    is bounded per frame (hashes of recent reasons) and in frames (least recently compiled dropped).
    """

    def __init__(self, redact: bool = False) -> None:
        self.redact = redact
        self._seen: collections.OrderedDict[str, collections.OrderedDict[int, None]] = collections.OrderedDict()

    def explain(
        self, frame: Frame, texts: list[str], resolve: Callable[[str], str | None] | None = None,
    ) -> tuple[list[Reason], dict[str, int]]:
        """``(kept reasons, omitted counts by category)`` for one compile of ``frame``.

        ``resolve(subject)`` gives the type name of a guarded object in the live process (None if it
        cannot tell); identity guards are then classified by what the object is.
        """
        parsed = [r for text in texts for r in parse_guard_failure(text, redact=self.redact)]
        if resolve is not None and parsed:
            kinds = {s: kind for s in {r.subject for r in parsed if r.subject and r.category in _BY_OBJECT}
                     if (kind := resolve(s)) is not None}
            if kinds:
                parsed = [r for text in texts for r in parse_guard_failure(text, redact=self.redact, kinds=kinds)]
        if not parsed:
            return Explained(([], {}))
        seen = self._seen.pop(frame.label, None) or collections.OrderedDict()
        self._seen[frame.label] = seen
        if len(self._seen) > MAX_FRAMES_REMEMBERED:
            self._seen.popitem(last=False)
        keys = [hash((r.category, r.subject, r.text)) for r in parsed]
        explaining = next((i for i, key in enumerate(keys) if key not in seen), 0)
        for key in keys:
            seen[key] = None
            seen.move_to_end(key)
        first_size_change = True
        if parsed[explaining].category == "size":  # remembered in the same bounded history, once per dim
            dim = _SIZE_MISMATCH.search(parsed[explaining].text)
            key = hash(("size-dim", parsed[explaining].subject, dim.group(1) if dim else None))
            first_size_change = key not in seen
            seen[key] = None
            seen.move_to_end(key)
        while len(seen) > MAX_SEEN_REASONS:
            seen.popitem(last=False)
        kept = [parsed[explaining].model_copy(update={"explains_change": True})]
        omitted: collections.Counter[str] = collections.Counter()
        for i, reason in enumerate(parsed):
            if i == explaining:
                continue
            if len(kept) < MAX_REASONS_PER_EVENT:
                kept.append(reason)
            else:
                omitted[reason.category] += 1
        explained = Explained((kept, dict(omitted)))
        explained.first_size_change = first_size_change
        return explained


def _fail_type(value: Any) -> str:
    """The exception's class name; torch before 2.5 records ``str(type(exc))``, "<class 'torch._dynamo.exc.X'>"."""
    text = clean_text(value, 200)
    match = _CLASS_REPR.fullmatch(text.strip())
    return match.group(1) if match else text


def _dynamo_config(m: Any) -> dict[str, Any]:
    """The record's ``dynamo_config`` (a JSON string in torch's record); empty when it is missing or unreadable."""
    value = getattr(m, "dynamo_config", None)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def automatic_dynamic(m: Any, reasons: list[Reason], first_size_change: bool = True) -> str | None:
    """The tensor dim torch made dynamic with this recompile (``"dim 0 of L['x']"``), or None.

    With ``automatic_dynamic_shapes`` on (torch's default, unless ``dynamic=False``), the first time a
    tensor dim of a frame changes size torch records it as dynamic and recompiles once with a symbolic
    size; later sizes reuse that graph. So a recompile whose explaining guard failure is a tensor size
    mismatch is that one-time warm-up, unless the dim is kept static (parameters, by
    ``force_parameter_static_shapes``), automatic dynamic is off for the compile, or the same dim
    changed before on this frame (``first_size_change`` False: it stayed static, so it is no warm-up).
    """
    reason = next((r for r in reasons if r.explains_change), None)
    if reason is None or reason.category != "size" or not reason.subject or not first_size_change:
        return None
    config = _dynamo_config(m)
    if config.get("automatic_dynamic_shapes") is False or config.get("assume_static_by_default") is False:
        return None
    if "_parameters" in reason.subject and config.get("force_parameter_static_shapes", True) is not False:
        return None
    match = _SIZE_MISMATCH.search(reason.text)
    if match is not None:
        return f"dim {match.group(1)} of {reason.subject}"
    return f"a dim of {reason.subject}" if reason.text.startswith("size guard failed") else None  # redacted text


def reason_texts(m: Any, from_guard_failures: list[str]) -> list[str]:
    """The reason texts of a compile: torch's per-entry list, else its single ``recompile_reason``."""
    if from_guard_failures:
        return from_guard_failures
    reason = getattr(m, "recompile_reason", None)
    return [str(reason)] if reason and str(reason) != NO_REASON else []  # invalidated entries only show here


def compile_events(
    m: Any, *, time: float, rank: int, step: int | None, frame: Frame, explained: tuple[list[Reason], dict[str, int]],
    graph_breaks: int, redact: bool, steady_state: bool, limits: dict[str, int | None] | None = None,
    call_site: list[str] | None = None, guard_set: str | None = None,
) -> tuple[Compile, RecompileLimitHit | None]:
    """The ``Compile`` event for record ``m`` and, if it was a limit hit, the ``RecompileLimitHit``.

    ``explained`` is what :meth:`ReasonExplainer.explain` returned for it.
    """
    reasons, omitted = explained
    forward = getattr(m, "is_forward", True) is not False
    hit = limit_hit(m, limits)
    duration, phases = exclusive_phases(m)
    fail_reason = getattr(m, "fail_reason", None)
    start = getattr(m, "start_time_us", None)
    compile_id = getattr(m, "compile_id", None)
    skip = cudagraph_skip(m)
    failed = bool(getattr(m, "fail_type", None))
    first = getattr(explained, "first_size_change", True)
    dynamic = automatic_dynamic(m, reasons, first) if forward and hit is None and not failed else None
    event = Compile(
        time=time, rank=rank, step=step, frame=frame,
        compile_id=str(compile_id) if compile_id is not None else "?",
        is_recompile=forward and (bool(getattr(m, "cache_size", None)) or bool(reasons)),
        cache_entries=getattr(m, "cache_size", None),
        outcome="limit_hit" if hit else ("failed" if getattr(m, "fail_type", None) else "ok"),
        fail_type=_fail_type(m.fail_type) if getattr(m, "fail_type", None) else None,
        fail_reason=None if redact or not fail_reason else clean_text(fail_reason),
        reasons=reasons,
        reasons_omitted=omitted,
        start_time=start * 1e-6 if isinstance(start, (int, float)) and start else None,
        duration=duration, phases=phases,
        guard_count=getattr(m, "guard_count", None), graph_op_count=getattr(m, "graph_op_count", None),
        graph_breaks=graph_breaks, cache=cache_outcome(m), backward=not forward,
        steady_state=steady_state and dynamic is None, automatic_dynamic=dynamic,
        cache_lookups=cache_lookups(m), cache_seconds_saved=cache_seconds_saved(m),
        call_site=call_site or [], guard_set=guard_set,
        cudagraph_skip=skip.category if skip else None,
        cudagraph_skip_reason=skip.text if skip and not redact else None,
    )
    if hit is None:
        return event, None
    limit, value = hit
    return event, RecompileLimitHit(
        time=time, rank=rank, step=step, frame=frame, compile_id=event.compile_id, limit=limit,
        value=value,
        last_reason=next((r for r in reasons if r.explains_change), None),
    )


def graph_break_event(
    payload: str, *, time: float, rank: int, step: int | None, frame: Frame | None, compile_id: str | None, redact: bool,
) -> GraphBreak:
    """The ``GraphBreak`` event for one ``dynamo_graph_break_reason`` payload (live or from a trace)."""
    text = parse_graph_break(payload, redact)
    return GraphBreak(
        time=time, rank=rank, step=step, frame=frame, compile_id=compile_id, reason=text.reason,
        user_location=text.user_location, explanation=text.explanation, hints=list(text.hints),
        skipped_frame=text.skipped_frame,
    )
