"""What one compile record means, shared by the live session and ``ingest``.

Both read the same torch record (live from the logger, or from a TORCH_TRACE file; read into a plain
:class:`CompileRecord` by ``recompprof._torch.records``) and must turn it into the same events, in
the same order, so the rules live here once: outcome and limit detection, which reason explains the
change, the ``Compile`` / ``RecompileLimitHit`` events themselves, and the :class:`Correlation` of
what torch reports apart about one compile (its frame, its graph breaks).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Callable
from typing import Any, Literal, cast

from recompprof.breaks import parse_graph_break
from recompprof.cudagraphs import CudagraphSkip
from recompprof.events import (
    LIMITS,
    CacheName,
    CacheResult,
    Category,
    Compile,
    Event,
    Frame,
    GraphBreak,
    LimitName,
    Phase,
    Reason,
    RecompileLimitHit,
)
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


MAX_REMEMBERED_COMPILES = 4096  # compile id -> frame, to attribute lazily compiled backwards and late breaks


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
    phases: dict[Phase, float] = dataclasses.field(default_factory=dict)  # exclusive, summing to duration
    guard_count: int | None = None
    graph_op_count: int | None = None
    cache: Literal["hit", "miss"] | None = None
    cache_lookups: dict[CacheName, dict[CacheResult, int]] = dataclasses.field(default_factory=dict)
    cache_seconds_saved: float | None = None
    cudagraph_skip: CudagraphSkip | None = None
    runtime_work: tuple[str, float] | None = None  # a GPU runtime record (CUDA-graph recording, autotune): no compile
    dynamo_config: dict[str, Any] = dataclasses.field(default_factory=dict)  # the compile's Dynamo settings


# torch raises these instead of falling back to eager when the limit is hit under fullgraph=True or
# config.fail_on_recompile_limit_hit (FailOnCacheLimitHit before the limits were renamed).
_RAISING_LIMIT_HITS = ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")


def limit_hit(m: CompileRecord, limits: dict[str, int | None] | None = None) -> tuple[str, int | None] | None:
    """``(limit name, its value)`` if record ``m`` is a recompile-limit hit, else None.

    A hit either falls back to eager (``fail_reason`` is torch's "recompile limit exceeded … Limit type:
    …" text, "<limit> reached" on 2.5-2.7) or raises ``FailOnRecompileLimitHit``, whose message names no
    limit: then it is the accumulated limit when the frame's compile count reached it, else the
    per-frame limit (torch's own order of checks). ``limits`` are the configured values, for hits whose
    text names none.
    """
    fail_reason, fail_type = m.fail_reason, _fail_type(m.fail_type) if m.fail_type else ""
    limits = limits or {}
    if fail_type in _RAISING_LIMIT_HITS:
        accumulated = limits.get("accumulated_recompile_limit")
        frame_compile = _frame_compile_count(m.compile_id)
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


_SIZE_MISMATCH = re.compile(r"size mismatch at index (\d+)")


class Explained(tuple[Any, ...]):
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
        seen = self._seen.pop(frame.key, None) or collections.OrderedDict()
        self._seen[frame.key] = seen
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


def automatic_dynamic(m: CompileRecord, reasons: list[Reason], first_size_change: bool = True) -> str | None:
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
    config = m.dynamo_config
    if config.get("automatic_dynamic_shapes") is False or config.get("assume_static_by_default") is False:
        return None
    if "_parameters" in reason.subject and config.get("force_parameter_static_shapes", True) is not False:
        return None
    match = _SIZE_MISMATCH.search(reason.text)
    if match is not None:
        return f"dim {match.group(1)} of {reason.subject}"
    return f"a dim of {reason.subject}" if reason.text.startswith("size guard failed") else None  # redacted text


def reason_texts(m: CompileRecord, from_guard_failures: list[str]) -> list[str]:
    """The reason texts of a compile: torch's per-entry list, else its single ``recompile_reason``."""
    if from_guard_failures:
        return from_guard_failures
    reason = m.recompile_reason
    return [reason] if reason and reason != NO_REASON else []  # invalidated entries only show here


def compile_events(
    m: CompileRecord, *, time: float, rank: int, step: int | None, frame: Frame,
    explained: tuple[list[Reason], dict[str, int]], graph_breaks: int, redact: bool, steady_state: bool,
    limits: dict[str, int | None] | None = None, call_site: list[str] | None = None, guard_set: str | None = None,
    trace_id: str | None = None,
) -> tuple[Compile, RecompileLimitHit | None]:
    """The ``Compile`` event for record ``m`` and, if it was a limit hit, the ``RecompileLimitHit``.

    ``explained`` is what :meth:`ReasonExplainer.explain` returned for it.
    """
    reasons, omitted = explained
    hit = limit_hit(m, limits)
    skip = m.cudagraph_skip
    failed = bool(m.fail_type)
    first = getattr(explained, "first_size_change", True)
    dynamic = automatic_dynamic(m, reasons, first) if m.is_forward and hit is None and not failed else None
    event = Compile(
        time=time, rank=rank, step=step, frame=frame,
        compile_id=m.compile_id if m.compile_id is not None else "?",
        is_recompile=m.is_forward and (bool(m.cache_size) or bool(reasons)),
        cache_entries=m.cache_size,
        outcome="limit_hit" if hit else ("failed" if m.fail_type else "ok"),
        fail_type=_fail_type(m.fail_type) if m.fail_type else None,
        fail_reason=None if redact or not m.fail_reason else clean_text(m.fail_reason),
        reasons=reasons,
        reasons_omitted=cast("dict[Category, int]", omitted),
        start_time=m.start_time,
        duration=m.duration, phases=m.phases,
        guard_count=m.guard_count, graph_op_count=m.graph_op_count,
        graph_breaks=graph_breaks, cache=m.cache, backward=not m.is_forward, steady_state=steady_state and dynamic is None, automatic_dynamic=dynamic,
        cache_lookups=m.cache_lookups, cache_seconds_saved=m.cache_seconds_saved,
        call_site=call_site or [], guard_set=guard_set,
        cudagraph_skip=skip.category if skip else None,
        cudagraph_skip_reason=skip.text if skip and not redact else None,
        trace_id=trace_id,
        trace_seconds_by_function={},  # given, not defaulted: pydantic deep-copies a mutable default per event
    )
    if hit is None:
        return event, None
    limit, value = hit
    return event, RecompileLimitHit(
        time=time, rank=rank, step=step, frame=frame, compile_id=event.compile_id, limit=cast("LimitName", limit),
        value=value,
        last_reason=next((r for r in reasons if r.explains_change), None),
    )


def in_order(event: Compile, breaks: list[GraphBreak], hit: RecompileLimitHit | None) -> list[Event]:
    """The events of one compile record in the order both paths emit them: the compile, the graph
    breaks its trace reported (each with the compile's frame), then the limit hit."""
    return [event, *(b if b.frame == event.frame else b.model_copy(update={"frame": event.frame}) for b in breaks),
            *([hit] if hit is not None else [])]


class Correlation:
    """Joins what torch reports apart about one compile, for the live session and ``ingest`` alike.

    A graph break is reported while its frame is traced, before the compile's record: it is held
    until that record (so it is emitted after its compile) and emitted at once if the compile is
    already recorded (a break torch cannot resume from comes after the record). The frame of each
    Dynamo frame id ("3" of "3/1") is remembered, because a limit hit's record names no function.
    Everything is bounded: past ``max_remembered`` compile ids the oldest are forgotten and their
    held breaks emitted as they are.
    """

    def __init__(self, max_remembered: int = MAX_REMEMBERED_COMPILES) -> None:
        self._max = max_remembered
        self._frame_of_compile: collections.OrderedDict[str, Frame] = collections.OrderedDict()
        self._pending_breaks: collections.OrderedDict[str, list[GraphBreak]] = collections.OrderedDict()
        # frame id -> (frame, what the caller needs again for it, e.g. the code key the live session reads reasons by)
        self._of_frame_id: collections.OrderedDict[str, tuple[Frame, Any]] = collections.OrderedDict()

    def frame_of(self, compile_id: str | None) -> Frame | None:
        """The frame of a recorded forward compile."""
        return self._frame_of_compile.get(compile_id) if compile_id is not None else None

    def frame_of_frame_id(self, frame_id: str) -> tuple[Frame, Any] | None:
        return self._of_frame_id.get(frame_id)

    def name_frame_id(self, frame_id: str, frame: Frame, extra: Any = None) -> None:
        """Remember that Dynamo frame id ``frame_id`` compiles ``frame``."""
        self._of_frame_id[frame_id] = (frame, extra)
        self._of_frame_id.move_to_end(frame_id)
        if len(self._of_frame_id) > self._max:
            self._of_frame_id.popitem(last=False)

    def add_break(self, event: GraphBreak) -> list[GraphBreak]:
        """The breaks to emit now: ``event`` unless it waits for its compile's record, plus any evicted."""
        if event.compile_id is None or event.compile_id in self._frame_of_compile:
            return [event]
        self._pending_breaks.setdefault(event.compile_id, []).append(event)
        if len(self._pending_breaks) > self._max:
            return self._pending_breaks.pop(next(iter(self._pending_breaks)))
        return []

    def compiled(self, compile_id: str, frame: Frame) -> list[GraphBreak]:
        """Record the forward compile ``compile_id`` of ``frame``; returns the breaks held for it."""
        self._frame_of_compile[compile_id] = frame
        if len(self._frame_of_compile) > self._max:
            self._frame_of_compile.popitem(last=False)
        return self._pending_breaks.pop(compile_id, [])

    def flush(self) -> list[GraphBreak]:
        """Every held break (their compile never reported: a crash mid-compile, or the end of the run)."""
        out = [b for breaks in self._pending_breaks.values() for b in breaks]
        self._pending_breaks.clear()
        return out

    def sizes(self) -> dict[str, int]:
        """How much is remembered (for the soak benchmark)."""
        return {"frame_of_compile": len(self._frame_of_compile), "pending_breaks": len(self._pending_breaks),
                "frame_ids": len(self._of_frame_id)}


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
