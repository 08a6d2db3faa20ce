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

from recompprof._model.breaks import parse_graph_break
from recompprof._model.cudagraphs import CudagraphSkip
from recompprof._model.events import (
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
from recompprof._model.reasons import clean_text, parse_guard_failure, resolvable_subjects

_LIMIT = re.compile(r"Limit type: (\w+)")
_LIMIT_VALUE = re.compile(r"currently set to (\d+)")
_REACHED = re.compile(r"^((?:accumulated_)?(?:cache_size|recompile)_limit) reached")
_CLASS_REPR = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>")
_LIMIT_ALIASES = {"cache_size_limit": "recompile_limit", "accumulated_cache_size_limit": "accumulated_recompile_limit"}
NO_REASON = "Unable to find recompilation reasons"
MAX_SEEN_REASONS = 4096  # reason hashes remembered per frame
MAX_FRAMES_REMEMBERED = 256
MAX_REASONS_PER_EVENT = 64


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
    has_guarded_code: bool | None = None
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


def _frame_compile_count(compile_id: Any) -> int | None:
    match = re.match(r"!?\d+/(\d+)", str(compile_id or ""))
    return int(match.group(1)) if match else None


_SIZE_MISMATCH = re.compile(r"size mismatch at index (\d+)")
_SIZE_OF = re.compile(r"^(.*)\.size\(\)\[(\d+)\]$")
# A scalar's equality guard: "k == 2", "self.param_groups[0]['lr'] == 0.01" (before a source comment).
_SCALAR_LITERAL = re.compile(r"\s==\s(-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|inf|nan))\s*(?:#|$)")
_SCALAR_CATEGORIES = frozenset({"python_constant", "global", "module_attribute"})


def changed_subject(reason: Reason) -> str | None:
    """What a reason says changed, as the unit torch's automatic dynamic decides on, or None.

    A tensor dim (``"dim 0 of L['x']"``) for a size mismatch or a dynamic-shape guard on ``x.size()[0]``;
    a scalar's value (``"value of L['lr']"``) for an int or float equality guard. Under ``redact`` a
    size text keeps no index: ``"a dim of L['x']"``.
    """
    subject = reason.subject
    if not subject:
        return None
    if reason.category == "size":
        match = _SIZE_MISMATCH.search(reason.text)
        if match is not None:
            return f"dim {match.group(1)} of {subject}"
        return f"a dim of {subject}" if reason.text.startswith("size guard failed") else None  # redacted text
    if reason.category == "symbolic_shape":
        match = _SIZE_OF.match(subject)
        return f"dim {match.group(2)} of {match.group(1)}" if match else None
    if reason.category in _SCALAR_CATEGORIES and _scalar_literal(reason) is not None:
        return f"value of {subject}"
    return None


def _scalar_literal(reason: Reason) -> str | None:
    """The int or float literal a scalar equality guard compared with (None: another guard, or redacted)."""
    match = _SCALAR_LITERAL.search(reason.text)
    return match.group(1) if match else None


class Explained(tuple[Any, ...]):
    """``(kept reasons, omitted counts by category)``, plus ``first_change``: False when what the explaining
    reason changed (a tensor dim, a scalar's value: :func:`changed_subject`) already changed on this frame,
    so it is not automatic dynamic warming up: that happens once per dim or scalar."""

    first_change: bool = True


class ReasonExplainer:
    """Parses reason texts, marks the one that explains each recompile, and caps what is kept.

    A new input fails every cached entry of the frame, and torch lists one reason per entry, most
    recently used entry first, each the *first* guard of that entry that failed (so an entry of
    another variant, a decode step against a prefill, fails on what tells the variants apart, not
    on what changed). The reason that explains the change is, in this order: the subject that failed
    against every entry; else the first reason (most recently used entry first) whose subject never
    failed on this frame before (the variants' own differences have failed before); else the first
    reason whose text is new; else the first. docs/steady-state.md has the rule and its grounds.
    An event keeps the explaining reason and the first others up to ``MAX_REASONS_PER_EVENT``; the
    rest are counted by category. Memory is bounded per frame (hashes of recent reasons and subjects)
    and in frames (least recently compiled dropped).
    """

    def __init__(self, redact: bool = False) -> None:
        self.redact = redact
        self._seen: collections.OrderedDict[str, collections.OrderedDict[int, None]] = collections.OrderedDict()

    def explain(
        self, frame: Frame, texts: list[str], resolve: Callable[[str], str | None] | None = None,
    ) -> tuple[list[Reason], dict[str, int]]:
        """``(kept reasons, omitted counts by category)`` for one compile of ``frame``.

        ``resolve(subject)`` gives the kind of a guarded object in the live process (None if it cannot
        tell; see ``parse_guard_failure``'s ``kinds``); guards are then classified by what the object is.
        """
        parsed = [r for text in texts for r in parse_guard_failure(text, redact=self.redact)]
        if resolve is not None and parsed:
            kinds = {s: kind for s in resolvable_subjects(parsed) if (kind := resolve(s)) is not None}
            if kinds:
                parsed = [r for text in texts for r in parse_guard_failure(text, redact=self.redact, kinds=kinds)]
        if not parsed:
            return Explained(([], {}))
        seen = self._seen.pop(frame.key, None) or collections.OrderedDict()
        self._seen[frame.key] = seen
        if len(self._seen) > MAX_FRAMES_REMEMBERED:
            self._seen.popitem(last=False)
        explaining = _explaining(parsed, seen)
        for reason in parsed:
            for key in (hash((reason.category, reason.subject, reason.text)), hash(("subject", reason.subject))):
                seen[key] = None
                seen.move_to_end(key)
        first_change = True
        changed = changed_subject(parsed[explaining])
        if changed is not None:  # remembered in the same bounded history, once per dim or scalar
            key = hash(("changed", changed))
            first_change = key not in seen
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
        explained.first_change = first_change
        return explained


def _explaining(parsed: list[Reason], seen: collections.OrderedDict[int, None]) -> int:
    """The index of the reason that explains the change (the rule of :class:`ReasonExplainer`)."""
    entries: dict[str | None, set[str]] = {}
    for reason in parsed:
        entries.setdefault(reason.entry, set()).add(reason.subject)
    if len(entries) > 1:  # the subject every entry failed on
        common = set.intersection(*entries.values()) - {""}
        if common:
            return next(i for i, r in enumerate(parsed) if r.subject in common)
    new_subject = next((i for i, r in enumerate(parsed) if r.subject and hash(("subject", r.subject)) not in seen), None)
    if new_subject is not None:
        return new_subject
    return next((i for i, r in enumerate(parsed) if hash((r.category, r.subject, r.text)) not in seen), 0)


def _fail_type(value: Any) -> str:
    """The exception's class name; torch before 2.5 records ``str(type(exc))``, "<class 'torch._dynamo.exc.X'>"."""
    text = clean_text(value, 200)
    match = _CLASS_REPR.fullmatch(text.strip())
    return match.group(1) if match else text


def automatic_dynamic(m: CompileRecord, reasons: list[Reason], first_change: bool = True) -> str | None:
    """What torch's automatic dynamic made dynamic with this recompile (``"dim 0 of L['x']"``,
    ``"value of L['lr']"``), or None.

    With ``automatic_dynamic_shapes`` on (torch's default, unless ``dynamic=False``), the first time a
    tensor dim, or an int or float torch does not specialise, changes on a frame, torch records it as
    dynamic and recompiles once with a symbol; later values reuse that graph. So a recompile explained
    by that first change is a one-time warm-up, as the compile's own ``dynamo_config`` decides (see
    docs/steady-state.md): not when the same dim or scalar changed before on this frame
    (``first_change`` False: it stayed static, or the code specialised it again), unless the cached
    graph held the dim at size 0 or 1, which torch never makes dynamic.
    """
    reason = next((r for r in reasons if r.explains_change), None)
    if reason is None or reason.category == "symbolic_shape" or not (first_change or _from_zero_or_one(reason)):
        return None
    changed = changed_subject(reason)
    config = m.dynamo_config
    if changed is None or config.get("automatic_dynamic_shapes") is False or config.get("assume_static_by_default") is False:
        return None
    if reason.category == "size":
        if "_parameters" in reason.subject and config.get("force_parameter_static_shapes", True) is not False:
            return None
        return changed
    return changed if _scalar_made_dynamic(reason, config) else None


_FROM_ZERO_OR_ONE = re.compile(r"size mismatch at index \d+\. expected [01],")


def _from_zero_or_one(reason: Reason) -> bool:
    """A size mismatch from an expected 0 or 1: torch compiles sizes 0 and 1 static even in a dynamic dim, so
    a graph traced at that size recompiles once for the first other size, which takes the dim dynamic."""
    return reason.category == "size" and _FROM_ZERO_OR_ONE.search(reason.text) is not None


def _scalar_made_dynamic(reason: Reason, config: dict[str, Any]) -> bool:
    """torch makes this scalar dynamic on its first change (its builder's rules; unknown config: no).

    Floats unless ``specialize_float`` (on before torch 2.6), nan or inf. Ints unless ``specialize_int``,
    a global, an ``nn.Module`` attribute (unless ``allow_unspec_int_on_nn_module``) or a default argument.
    """
    literal = _scalar_literal(reason)
    if literal is None:
        return False
    subject = reason.subject
    if any(c in literal for c in ".ein"):
        return config.get("specialize_float") is False and literal.lstrip("-") not in ("inf", "nan")
    if config.get("specialize_int") is not False or subject.startswith("G[") or "__defaults__" in subject \
            or "__kwdefaults__" in subject:
        return False
    return reason.category != "module_attribute" or config.get("allow_unspec_int_on_nn_module") is True


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
    first = getattr(explained, "first_change", True)
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
        call_site=call_site or [], guard_set=guard_set, installed_code=installed_code(m),
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
