"""What one ``CompilationMetrics`` record means, shared by the live session and ``ingest``.

Both read the same torch record (live from the logger, or from a TORCH_TRACE file) and must turn it
into the same events, so the rules live here once: outcome and limit detection, cache outcome,
which reason explains the change, and the ``Compile`` / ``RecompileLimitHit`` events themselves.
"""

from __future__ import annotations

import collections
import re
from typing import Any

from recompprof._torch.phases import exclusive_phases
from recompprof.events import LIMITS, Compile, Frame, Reason, RecompileLimitHit
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


def limit_hit(fail_reason: Any) -> tuple[str, int | None] | None:
    """``(limit name, its value)`` if ``fail_reason`` is torch's recompile-limit fallback, else None."""
    if not fail_reason:
        return None
    text = str(fail_reason)
    if reached := _REACHED.search(text):  # torch 2.5-2.7: "cache_size_limit reached"; the value is not in it
        name = _LIMIT_ALIASES.get(reached.group(1), reached.group(1))
        return (name if name in LIMITS else "recompile_limit"), None
    if "recompile limit exceeded" not in text.lower():
        return None
    match = _LIMIT.search(text)
    name = _LIMIT_ALIASES.get(match.group(1), match.group(1)) if match else "recompile_limit"
    value = _LIMIT_VALUE.search(text)
    return (name if name in LIMITS else "recompile_limit"), (int(value.group(1)) if value else None)


def cache_outcome(m: Any) -> str | None:
    """``miss`` if any compile cache missed, ``hit`` if one hit, else None."""
    def count(*names: str) -> int:
        return sum(getattr(m, n, None) or 0 for n in names)

    if count("inductor_fx_local_cache_miss_count", "aotautograd_local_cache_miss_count"):
        return "miss"
    return "hit" if count("inductor_fx_local_cache_hit_count", "aotautograd_local_cache_hit_count") else None


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

    def explain(self, frame: Frame, texts: list[str]) -> tuple[list[Reason], dict[str, int]]:
        """``(kept reasons, omitted counts by category)`` for one compile of ``frame``."""
        parsed = [r for text in texts for r in parse_guard_failure(text, redact=self.redact)]
        if not parsed:
            return [], {}
        seen = self._seen.pop(frame.label, None) or collections.OrderedDict()
        self._seen[frame.label] = seen
        if len(self._seen) > MAX_FRAMES_REMEMBERED:
            self._seen.popitem(last=False)
        keys = [hash((r.category, r.subject, r.text)) for r in parsed]
        explaining = next((i for i, key in enumerate(keys) if key not in seen), 0)
        for key in keys:
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
        return kept, dict(omitted)


def _fail_type(value: Any) -> str:
    """The exception's class name; torch before 2.5 records ``str(type(exc))``, "<class 'torch._dynamo.exc.X'>"."""
    text = clean_text(value, 200)
    match = _CLASS_REPR.fullmatch(text.strip())
    return match.group(1) if match else text


def reason_texts(m: Any, from_guard_failures: list[str]) -> list[str]:
    """The reason texts of a compile: torch's per-entry list, else its single ``recompile_reason``."""
    if from_guard_failures:
        return from_guard_failures
    reason = getattr(m, "recompile_reason", None)
    return [str(reason)] if reason and str(reason) != NO_REASON else []  # invalidated entries only show here


def compile_events(
    m: Any, *, time: float, rank: int, step: int | None, frame: Frame, explained: tuple[list[Reason], dict[str, int]],
    graph_breaks: int, redact: bool, steady_state: bool, limit_value: int | None = None,
) -> tuple[Compile, RecompileLimitHit | None]:
    """The ``Compile`` event for record ``m`` and, if it was a limit hit, the ``RecompileLimitHit``.

    ``explained`` is what :meth:`ReasonExplainer.explain` returned for it.
    """
    reasons, omitted = explained
    forward = getattr(m, "is_forward", True) is not False
    hit = limit_hit(getattr(m, "fail_reason", None))
    duration, phases = exclusive_phases(m)
    fail_reason = getattr(m, "fail_reason", None)
    start = getattr(m, "start_time_us", None)
    compile_id = getattr(m, "compile_id", None)
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
        graph_breaks=graph_breaks, cache=cache_outcome(m), backward=not forward, steady_state=steady_state,
    )
    if hit is None:
        return event, None
    limit, value = hit
    return event, RecompileLimitHit(
        time=time, rank=rank, step=step, frame=frame, compile_id=event.compile_id, limit=limit,
        value=value if value is not None else limit_value,
        last_reason=next((r for r in reasons if r.explains_change), None),
    )
