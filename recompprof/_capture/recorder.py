"""The compile-path recorder: turns what the torch adapters report into events, in order.

The adapters (``recompprof._capture.adapters``) call it on the compile path, never per training step: a
compile record (``on_torch_record``), a graph break (``on_graph_break``) and, in profile mode, the
guard failures profile mode computed itself (``on_profile_guard_failure``). It joins them with the
same :class:`~recompprof._model.assembler.CompileAssembler` that ``ingest`` uses, so a live run and its
TORCH_TRACE give the same events, and hands each event to the session's ``emit``. What else it reads of
the live adapters (the step, torch's guard failures, ...) it is given as :class:`CompileSignals`.
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time
from collections.abc import Callable
from types import CodeType
from typing import TYPE_CHECKING, Any, Protocol

from recompprof import _internal
from recompprof._model.assembler import Bind, CompileAssembler, Seen
from recompprof._model.compile_id import UNKNOWN, CompileId, spelled
from recompprof._model.compile_record import CompileRecord
from recompprof._model.compiles import is_recompile
from recompprof._model.correlation import MAX_REMEMBERED_COMPILES
from recompprof._model.events import (
    Compile,
    CompileStart,
    Event,
    Frame,
    GraphBreak,
    RecompileLimitHit,
)
from recompprof._model.texts import clean_text, graph_break_text
from recompprof._model.trusted import copied, trusted
from recompprof._torch import frames as torch_frames, parameters as torch_parameters
from recompprof._torch.guard_failures import guard_set, installed_guards
from recompprof._torch.limits import configured_limits
from recompprof._torch.records import read_record
from recompprof._torch.sources import ModuleInstances, type_name
from recompprof._torch.versions import torch_info

if TYPE_CHECKING:
    from recompprof._capture.settings import Settings

MAX_PENDING_REASONS = 64  # profile-mode reason lists held per code object until its compile reports
MAX_STARTED_TRACES = 8  # trace ids of started compiles held until their records come
# What a failed read of torch loses, said once per component. These reads run at every compile (cold
# there): each is contained by a ``try``/``except`` doing what ``contain`` does (``_internal.caught``),
# which costs nothing until it catches, where a context manager is two more calls per read.
_START_REASONS_LOST = "guard-failure reasons are missing from compile starts"
_REASONS_LOST = "guard-failure reasons are missing from compile events"
_BREAKS_LOST = "graph breaks are not recorded"


class CompileSignals(Protocol):
    """What the recorder reads of the live torch adapters on the compile path (``adapters.Readings``)."""

    @property
    def step(self) -> int: ...

    @property
    def own_reason(self) -> Callable[[str], bool] | None:
        """Tells profile mode's own reasons from the job's (None outside profile mode)."""

    def guard_reasons(
        self, name: str, file: str, line: int, compile_id: str | None = None
    ) -> list[str]: ...

    def pending_reasons(self, code: CodeType, compile_id: str | None = None) -> list[str]:
        """The guard-failure texts of ``code`` not yet taken, left untaken."""

    def counted_breaks(self) -> list[tuple[str, int]]: ...

    def trace_seconds(self) -> dict[str, float] | None: ...


class CompileRecorder:
    """The correlation state of one session's compile path (bounded; serialised by the session lock)."""

    def __init__(
        self,
        settings: Settings,
        rank: int,
        emit: Callable[[Event], None],
        lock: threading.RLock,
        closed: Callable[[], bool],
        signals: CompileSignals,
    ) -> None:
        self.settings = settings
        self.rank = rank
        self.signals = signals
        self.trace_ids = False  # give each compile a trace id (an exporter sends it as a trace)
        self.assembler = CompileAssembler(settings.redact, trusted=True)
        self.pending_reasons: dict[CodeType, list[tuple[str | None, list[str]]]] = {}
        # the compile running now (set at its start, cleared at its end)
        self.running: CompileStart | None = None
        # told when a compile ends (the status line clears)
        self.ended: Callable[[], None] | None = None
        self.reasons_at_start = torch_info().has("reasons_before_compile_start")
        # (compile id, backward) -> the trace id its compile_start carried, taken by its record (bounded:
        # a start whose record never comes is forgotten after MAX_STARTED_TRACES later starts).
        self._start_traces: collections.OrderedDict[tuple[str, bool], str] = (
            collections.OrderedDict()
        )
        self.generation: int | None = None  # torch._dynamo.reset() calls seen (None: none yet)
        # the nn.Module instances whose own constants recompiled each frame (per-instance variants)
        self._instances = ModuleInstances()
        self._send, self._lock, self._closed = emit, lock, closed

    def _emit(self, event: Event) -> None:
        # A compile and its limit hit are built with their generation; a graph break is copied with it.
        if (
            self.generation is not None
            and isinstance(event, (Compile, GraphBreak, RecompileLimitHit))
            and event.generation != self.generation
        ):
            event = copied(event, {"generation": self.generation})
        self._send(event)

    # -- adapter callbacks ---------------------------------------------------------------------
    def on_compile_start(self, compile_id: str | None, backward: bool = False) -> None:
        """torch began compiling a frame, or (``backward``) the backward of one: record what is known now
        (a ``compile_start``)."""
        if backward:
            self._backward_started(compile_id or UNKNOWN)
            return
        ctx = torch_frames.compiling()
        if (
            ctx is None
        ):  # no frame compiles: runtime work (CUDA-graph recording), or a backward unseen
            return
        with self._lock:
            if self._closed():
                return
            code = ctx.code
            compile_id = compile_id or ctx.compile_id or UNKNOWN
            code_key = (code.co_name, code.co_filename, code.co_firstlineno)
            frame = self.assembler.frame(compile_id, code_key, lambda: _frame(code_key, ctx))
            texts: list[str] = []
            if self.reasons_at_start:
                try:
                    texts = self.signals.pending_reasons(code, compile_id)
                except Exception as exc:  # noqa: BLE001 - counted; raised again under the tests
                    _internal.caught("torch.guard_failures", exc, _START_REASONS_LOST)
            own_reason = self.signals.own_reason
            if own_reason is not None:
                texts = [t for t in texts if not own_reason(t)]
            trace_id = self._start_trace((compile_id, False)) if self.trace_ids else None
            event = trusted(
                CompileStart,
                {
                    "time": time.time(),
                    "rank": self.rank,
                    "step": self.signals.step,
                    "frame": frame,
                    "compile_id": compile_id,
                    "generation": self.generation,
                    "is_recompile": _starts_recompile(ctx, compile_id, bool(texts)),
                    "reason": self.assembler.trigger(
                        frame, texts, _resolver(ctx), _binder(ctx, code_key)
                    ),
                    "trace_id": trace_id,
                },
            )
            self.running = event
            self._emit(event)

    def _backward_started(self, compile_id: str) -> None:
        """torch began the lazy compile of a backward: its frame and compile id are its forward's (the
        forward's compile ended long before); it is no recompile and has no reason of its own."""
        with self._lock:
            if self._closed():
                return
            key = (compile_id, True)
            event = trusted(
                CompileStart,
                {
                    "time": time.time(),
                    "rank": self.rank,
                    "step": self.signals.step,
                    "frame": self.assembler.backward_frame(compile_id),
                    "compile_id": compile_id,
                    "generation": self.generation,
                    "is_recompile": False,
                    "backward": True,
                    "trace_id": self._start_trace(key) if self.trace_ids else None,
                },
            )
            self.running = event
            self._emit(event)

    def _start_trace(self, key: tuple[str, bool]) -> str:
        """A trace id for the compile starting now (its compile id, whether a backward), kept for its
        compile record (the span opens under it)."""
        trace_id = self._start_traces[key] = new_trace_id()
        self._start_traces.move_to_end(key)
        if len(self._start_traces) > MAX_STARTED_TRACES:
            self._start_traces.popitem(last=False)
        return trace_id

    def on_compile_end(self) -> None:
        """torch's compile ended, failed or not."""
        self.running = None
        if self.ended is not None:
            self.ended()

    def on_reset(self) -> None:
        """``torch._dynamo.reset()`` ran (no compile can be running then): compile ids restart at ``0/0``, so what
        was correlated by compile id is let go (graph breaks still held are emitted first) and the next
        events carry the next generation."""
        with self._lock:
            if not self._closed():
                self.flush()
            self.assembler.forget_compiles()
            self._start_traces.clear()
            self.pending_reasons.clear()
            self.running = None
            self.generation = (self.generation or 0) + 1

    def on_torch_record(self, metrics: Any) -> None:
        """One ``CompilationMetrics`` record from torch."""
        with self._lock:
            if self._closed():
                return
            record = read_record(metrics, live=True)
            if (
                record.runtime_work is not None
            ):  # GPU runtime work (CUDA-graph recording, first-launch
                return  # autotune) arrives as an is_runtime record: not a compile
            self.record_compile(record)

    def on_profile_guard_failure(
        self, code: CodeType, compile_id: str | None, texts: list[str]
    ) -> None:
        with self._lock:
            pending = self.pending_reasons.setdefault(code, [])
            if len(pending) < MAX_PENDING_REASONS:
                pending.append((compile_id, texts))
            if (
                len(self.pending_reasons) > MAX_REMEMBERED_COMPILES
            ):  # frames whose compile never reported
                del self.pending_reasons[next(iter(self.pending_reasons))]

    def on_profile_reuse(
        self,
        code: CodeType,
        compile_id: str | None,
        texts: list[str],
        scope: tuple[dict[str, Any], dict[str, Any]] | None = None,
    ) -> None:
        """Profile mode ran a parked variant again: the recompile a job at the session limit meets here,
        recorded with its reasons; no trace ran, so it takes no compile time.

        ``scope``: the locals and globals of the call that runs it (None: not found). Its subjects are
        resolved and its module instances looked up there, as monitor mode does for a compile, so both
        modes explain and judge alike; it compiles no variant, so it is counted as none and changes no
        later verdict (docs/profile-mode.md)."""
        with self._lock:
            own_reason = self.signals.own_reason
            if self._closed() or own_reason is None:
                return
            # The re-enabled variant's own compile named its frame (no compile runs now to name it from).
            frame = self.assembler.frame_of(compile_id)
            code_key = (code.co_name, code.co_filename, code.co_firstlineno)
            if frame is None:
                by_id = self.assembler.known(compile_id or "")
                frame = (
                    by_id[0]
                    if by_id is not None
                    else self.assembler.frame(
                        compile_id or UNKNOWN, code_key, lambda: _frame(code_key, None)
                    )
                )
            # here alone: the rest of the recorder is another's to keep fast
            from recompprof._model.steady import torch_rule, verdict

            resolve = instance = None
            if scope is not None:
                f_locals, f_globals = scope
                instances = self._instances
                resolve = lambda s: type_name(s, f_locals, f_globals)  # noqa: E731
                instance = lambda s: instances.of(code_key, s, f_locals, f_globals)  # noqa: E731
            explained = self.assembler.explainer.explain(
                frame,
                [t for t in texts if not own_reason(t)],
                resolve,
                instance=instance,
                remember=False,
            )
            reasons, omitted = explained.reasons, explained.omitted
            step = self.signals.step
            steady, unknown = verdict(
                past_warmup=step >= self.settings.warmup_steps,
                rule=torch_rule(next((r for r in reasons if r.explains_change), None), None),
                variants=explained.variants,
                instance_unknown=explained.instance_unknown,
            )
            self._emit(
                Compile(
                    time=time.time(),
                    rank=self.rank,
                    step=step,
                    frame=frame,
                    compile_id=compile_id or UNKNOWN,
                    is_recompile=True,
                    reasons=reasons,
                    reasons_omitted=omitted,
                    steady_state=steady,
                    steady_state_unknown=unknown,
                )
            )

    def on_graph_break(self, payload: str, compile_id: str | None) -> None:
        with self._lock:
            if self._closed():
                return
            frame = self.assembler.frame_of(compile_id)
            if frame is None:
                ctx = torch_frames.compiling()
                if ctx is not None:
                    code = ctx.code
                    key = (code.co_name, code.co_filename, code.co_firstlineno)
                    frame = self.assembler.frame(
                        compile_id or ctx.compile_id or UNKNOWN, key, lambda: _frame(key, ctx)
                    )
            for ready in self.assembler.graph_break(
                payload,
                time=time.time(),
                rank=self.rank,
                step=self.signals.step,
                frame=frame,
                compile_id=compile_id,
            ):
                self._emit(ready)

    def flush(self) -> None:
        """Emit the graph breaks still held for a compile record that never came (at detach)."""
        for event in self.assembler.flush():
            self._emit(event)

    # -- one compile ---------------------------------------------------------------------------------
    def _take_pending(self, code_key: tuple[str, str, int]) -> list[str]:
        for code in list(self.pending_reasons):
            if (code.co_name, code.co_filename, code.co_firstlineno) == code_key:
                return [t for _, texts in self.pending_reasons.pop(code) for t in texts]
        return []

    def record_compile(self, m: CompileRecord) -> None:
        now, step = time.time(), self.signals.step
        compile_id = spelled(m.compile_id)
        running = self.running
        if (
            running is not None and running.compile_id == compile_id
        ):  # its end was not seen (callbacks reset)
            self.running = None
        if m.backward:
            seen = self._seen(m, compile_id, now, step, None)
        else:
            seen = self._forward(m, compile_id, now, step)
        for out in self.assembler.compile(m, seen):
            self._emit(out)

    def _seen(
        self, m: CompileRecord, compile_id: str, now: float, step: int, frame: Frame | None
    ) -> Seen:
        """What every compile record is seen with: when, where, the step, the limits and the trace id."""
        return Seen(
            time=now,
            rank=self.rank,
            step=step,
            frame=frame,
            steady_state=step >= self.settings.warmup_steps,
            no_step=step == 0,
            # Only a failed compile can be a limit hit; reading torch's config costs ~30 us per record.
            limits=configured_limits() if m.fail_type is not None or m.fail_reason else None,
            trace_id=self._trace_id(compile_id, m.backward),
            generation=self.generation,
        )

    def _trace_id(self, compile_id: str, backward: bool) -> str | None:
        """The trace id of a compile: the one its start opened (a backward's start is keyed apart: it
        shares its forward's compile id), else a new one (a limit hit, a compile whose start was not seen)."""
        if not self.trace_ids:
            return None
        started = self._start_traces.pop((compile_id, backward), None)
        return started or new_trace_id()

    def _forward(self, m: CompileRecord, compile_id: str, now: float, step: int) -> Seen:
        """What the compile path saw of forward compile ``m``: its frame, reasons, call site, guard set,
        profile times, the graph breaks torch counted, and how its subjects bind to the parameters of the
        function its code passes its arguments to."""
        ctx = torch_frames.compiling()
        frame, code_key = self._name_frame(m, compile_id, ctx)
        seen = self._seen(m, compile_id, now, step, frame)
        seen.call_site = torch_frames.call_site(ctx, self.settings.redact)
        seen.resolve = _resolver(ctx)
        seen.instance = self._instance(ctx, code_key)
        if ctx is not None:
            try:
                seen.guard_set = guard_set(ctx.guarded_code)
            except Exception as exc:  # noqa: BLE001 - as above
                _internal.caught("torch.guard_set", exc)
            seen.installed = _installed(ctx.guarded_code)
        texts: list[str] = []
        # A changed torch internal loses this compile's reasons, never the compile itself.
        try:
            texts = self.signals.guard_reasons(*code_key, compile_id)
        except Exception as exc:  # noqa: BLE001 - as above
            _internal.caught("torch.guard_failures", exc, _REASONS_LOST)
        texts += self._take_pending(code_key)
        own_reason = self.signals.own_reason
        if own_reason is not None:
            texts = [t for t in texts if not own_reason(t)]
        seen.texts = texts
        seen.held = compile_id
        try:
            seen.breaks = [
                GraphBreak(
                    time=seen.time,
                    rank=self.rank,
                    step=seen.step,
                    frame=seen.frame,
                    compile_id=compile_id,
                    reason=graph_break_text(text, self.settings.redact),
                    count=count,
                )
                for text, count in self.signals.counted_breaks()
            ]
        except Exception as exc:  # noqa: BLE001 - as above
            _internal.caught("torch.graph_breaks", exc, _BREAKS_LOST)
        seen.trace_seconds = self.signals.trace_seconds()
        seen.bind = _binder(ctx, code_key)
        return seen

    def _instance(
        self, ctx: torch_frames.Compiling | None, code_key: tuple[str, str, int]
    ) -> Callable[[str], int | None] | None:
        """Looks up the nn.Module instance holding a guard's subject in the call being compiled."""
        if ctx is None:
            return None
        instances = self._instances
        return lambda subject: instances.of(code_key, subject, ctx.f_locals, ctx.f_globals)

    def _name_frame(
        self, m: CompileRecord, compile_id: str, ctx: torch_frames.Compiling | None
    ) -> tuple[Frame, tuple[str, str, int]]:
        """The frame of a forward compile and the code key its reasons are read by."""
        known = self.assembler.known(compile_id)
        if (
            m.code_name is None and ctx is not None
        ):  # limit-hit records name no function; torch's frame does
            code_key = (ctx.code.co_name, ctx.code.co_filename, ctx.code.co_firstlineno)
            return self.assembler.frame(
                compile_id, code_key, lambda: _frame(code_key, ctx)
            ), code_key
        if m.code_name is None and known is not None:
            frame, code_key = known
            return frame, code_key
        code_key = (m.code_name or "<unknown>", m.code_file or "<unknown>", m.code_line or 0)
        return self.assembler.frame(compile_id, code_key, lambda: _frame(code_key, ctx)), code_key


class _TraceIds:
    """Random W3C trace ids from a generator of recompprof's own, seeded from the OS: Dynamo saves and
    restores the ``random`` module's state around compiles, so that one would repeat ids, and asking the
    OS for each id is a system call per compile start and record. Reseeded in a forked child, whose ids
    must differ from its parent's."""

    def __init__(self) -> None:
        self.seed()
        os.register_at_fork(after_in_child=self.seed)

    def seed(self) -> None:
        self._random = random.Random(os.urandom(32))

    def new(self) -> str:
        while not (value := self._random.getrandbits(128)):  # never all zeros
            pass
        return f"{value:032x}"


_TRACE_IDS = _TraceIds()


def new_trace_id() -> str:
    """A random W3C trace id (32 hex digits, never all zeros)."""
    return _TRACE_IDS.new()


# (code key, what it resolved to) -> its Frame: each compile of a frame names the same one, built once
# (bounded: cleared when full).
_FRAMES: dict[tuple[tuple[str, str, int], torch_frames.Named], Frame] = {}
MAX_FRAMES_BUILT = 256


def _frame(code_key: tuple[str, str, int], ctx: torch_frames.Compiling | None) -> Frame:
    named = torch_frames.resolve(*code_key, ctx)
    key = (code_key, named)
    frame = _FRAMES.get(key)
    if frame is None:
        if len(_FRAMES) >= MAX_FRAMES_BUILT:
            _FRAMES.clear()
        # A file name from a non-UTF-8 path carries lone surrogates, which the event model rejects.
        frame = _FRAMES[key] = Frame(
            name=clean_text(named.name, 1000),
            file=clean_text(named.file, 1000),
            line=named.line,
            code_file=clean_text(code_key[1], 1000),
            code_line=code_key[2],
            owner=clean_text(named.owner, 1000) if named.owner is not None else None,
        )
    return frame


def _starts_recompile(ctx: torch_frames.Compiling, compile_id: str, guard_failures: bool) -> bool:
    """``is_recompile`` of a compile that is starting, by its compile record's rule; where torch's compile
    frame holds no cache-entry count, a later compile of its frame id."""
    if ctx.cache_entries is not None:
        return is_recompile(ctx.cache_entries, guard_failures)
    parsed = CompileId.parse(compile_id)
    return guard_failures or (parsed is not None and parsed.is_later)


def _resolver(ctx: torch_frames.Compiling | None) -> Callable[[str], str | None] | None:
    """Looks a guard's subject up in the locals and globals of the call that is being compiled."""
    if ctx is None:
        return None
    return lambda subject: type_name(subject, ctx.f_locals, ctx.f_globals)


def _binder(ctx: torch_frames.Compiling | None, code_key: tuple[str, str, int]) -> Bind | None:
    """Names a subject of the compile of ``code_key`` by the parameters of the function its code (a
    decorator's wrapper) passes its arguments to (``recompprof._torch.parameters``); None where torch's
    compile frame is not this code's."""
    if ctx is None:
        return None
    code = ctx.code
    if (code.co_name, code.co_filename, code.co_firstlineno) != code_key:
        return None
    return torch_parameters.binder(code, ctx.closure, ctx.f_globals)


def _installed(guarded_code: object) -> Callable[[], list[str]]:
    """The compile's installed guards, read when the explainer asks (never raising into torch: a changed
    internal reads as none installed, so no scalar is called specialised)."""

    def read() -> list[str]:
        with _internal.contain("torch.installed_guards"):
            return installed_guards(guarded_code)
        return []

    return read
