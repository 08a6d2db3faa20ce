"""One compile's events, assembled from its record and what was seen of it: for live capture and ``ingest``.

torch reports one compile in pieces: its graph breaks while it traces, its guard-failure reasons, then its
record. :class:`CompileAssembler` holds what joins the pieces (the frame of each frame id and the breaks
waiting for their compile's record, :class:`~recompprof._model.correlation.Correlation`; the reasons seen
on each frame, :class:`~recompprof._model.explaining.ReasonExplainer`) and turns one plain record into its
events, in the order both paths emit them. The live recorder and ``ingest`` each read their own source
into a :class:`Seen` and call :meth:`CompileAssembler.compile`, so a live run and its TORCH_TRACE give
the same events.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

from recompprof import _internal
from recompprof._model.compile_id import CompileId, spelled
from recompprof._model.compile_record import CompileRecord, reason_texts
from recompprof._model.compiles import CompileContext, compile_events, in_order
from recompprof._model.correlation import MAX_REMEMBERED_COMPILES, Correlation, graph_break_event
from recompprof._model.events import MAX_SUBJECT, Event, Frame, GraphBreak, Reason
from recompprof._model.explaining import Explained, InstalledGuards, ReasonExplainer
from recompprof._model.texts import clean_text
from recompprof._model.trusted import copied

Resolve = Callable[
    [str], "str | None"
]  # a guarded subject -> the kind of object it is, where known
# A guarded subject -> the identity of the nn.Module holding it as its own attribute, where known (live
# capture only: a trace names no object).
Instance = Callable[[str], "int | None"]
# A guarded subject -> the parameter of the function a decorator's wrapper passes it to, where it binds
# (``recompprof._torch.parameters``): live capture only, the trace holds no closure.
Bind = Callable[[str], "str | None"]
CodeKey = tuple[str, str, int]  # a code object's (co_name, co_filename, co_firstlineno)


@dataclasses.dataclass(slots=True)
class Seen:
    """What the caller saw of one compile besides its record: when and where it ran, and what came apart.

    ``texts``: the compile's guard-failure reasons (None for a backward, which has no reasons of its own,
    not even its record's); ``held``: the compile id its graph breaks wait under (None: it takes none);
    ``breaks``: graph breaks the caller read for it itself, emitted after the held ones; ``limits``: the
    configured recompile limits, for a limit hit whose text names none (None: not read).
    """

    time: float
    rank: int
    step: int | None
    frame: Frame | None  # None: a backward's, which is its forward's
    texts: list[str] | None = None
    held: str | None = None
    breaks: list[GraphBreak] = dataclasses.field(default_factory=list)
    resolve: Resolve | None = None
    instance: Instance | None = None
    steady_state: bool = False
    no_step: bool = False  # the job has advanced no step: steady state is judged by repeats
    limits: dict[str, int | None] | None = None
    call_site: list[str] = dataclasses.field(default_factory=list)
    guard_set: str | None = None
    bind: Bind | None = None
    trace_id: str | None = None
    trace_seconds: dict[str, float] | None = None  # seconds of tracing by function (profile)
    installed: InstalledGuards | None = None  # the guards the compile installed (None: unknown)
    generation: int | None = None  # torch._dynamo.reset() calls seen before it (live)


def _key_of(compile_id: str | CompileId) -> str:
    """The key the frame of ``compile_id``'s frame id is known by ("3" of "3/1" and "!0/3/1"); an id without
    a frame id (unknown, "?"; a compiled autograd graph, "!0") is its own key."""
    parsed = CompileId.parse(compile_id) if isinstance(compile_id, str) else compile_id
    if parsed is not None and parsed.frame_id is not None:
        return str(parsed.frame_id)
    return str(compile_id)


class CompileAssembler:
    """Joins what torch reports apart about each compile and turns each compile record into its events.

    Serialised by its caller (the live session's lock; ``ingest`` reads one process at a time).
    """

    def __init__(self, redact: bool = False, trusted: bool = False) -> None:
        self.redact = redact
        # The caller's values are its own, of the declared types (the live recorder): events are built
        # without validation (recompprof._model.trusted); a trace's are validated.
        self.trusted = trusted
        self.correlation = Correlation()
        self.explainer = ReasonExplainer(redact)
        self._key: tuple[str | CompileId, str] | None = None  # the last compile id's frame key
        # the frame each compile was named with, by (compile id, code): named once
        self._named: collections.OrderedDict[tuple[str, CodeKey], Frame] = collections.OrderedDict()

    # -- frames --------------------------------------------------------------------------------
    def frame(self, compile_id: str, code: CodeKey, name: Callable[[], Frame]) -> Frame:
        """The frame compile ``compile_id`` of ``code`` runs: the one place a compile's frame is decided.
        ``name()`` names it the first time any of its events asks (its start, a graph break, its record),
        and every later event of that compile gets the same frame; its frame id is named with it (for a
        limit hit whose record names no code)."""
        key = (compile_id, code)
        frame = self._named.get(key)
        if frame is None:
            frame = self._named[key] = name()
            if len(self._named) > MAX_REMEMBERED_COMPILES:
                self._named.popitem(last=False)
            self.name(compile_id, frame, code)
        return frame

    def frame_of(self, compile_id: str | None) -> Frame | None:
        """The frame of a recorded forward compile."""
        return self.correlation.frame_of(compile_id)

    def known(self, compile_id: str | CompileId) -> tuple[Frame, Any] | None:
        """The frame the frame id of ``compile_id`` was named with, and what the caller kept with it."""
        return self.correlation.frame_of_frame_id(self._frame_key(compile_id))

    def name(self, compile_id: str | CompileId, frame: Frame, extra: Any = None) -> None:
        """Remember that the frame id of ``compile_id`` compiles ``frame`` (with ``extra``)."""
        self.correlation.name_frame_id(self._frame_key(compile_id), frame, extra)

    def _frame_key(self, compile_id: str | CompileId) -> str:
        # A forward is looked up, then named, by one compile id: parsed once.
        if self._key is None or self._key[0] != compile_id:
            self._key = (compile_id, _key_of(compile_id))
        return self._key[1]

    def forget_compiles(self) -> None:
        """Let go of what was joined by compile id (``torch._dynamo.reset()`` restarts compile ids)."""
        self.correlation = Correlation()
        self._named.clear()

    # -- what comes before a compile's record ----------------------------------------------------
    def graph_break(
        self,
        payload: str,
        *,
        time: float,
        rank: int,
        step: int | None,
        frame: Frame | None,
        compile_id: str | None,
    ) -> list[GraphBreak]:
        """The graph breaks to emit now for one graph-break payload: none while its compile's record is
        awaited (it comes out with that compile), plus any older ones let go."""
        event = graph_break_event(
            payload,
            time=time,
            rank=rank,
            step=step,
            frame=frame,
            compile_id=compile_id,
            redact=self.redact,
        )
        return self.correlation.add_break(event)

    def trigger(
        self, frame: Frame, texts: list[str], resolve: Resolve | None, bind: Bind | None = None
    ) -> Reason | None:
        """The reason that will explain the compile of ``frame`` that ``texts`` trigger (at its start)."""
        return _bound(self.explainer.trigger(frame, texts, resolve), bind)

    def explain(self, frame: Frame, texts: list[str]) -> Explained:
        """The kept reasons and the omitted counts by category of a recompile that has no record
        (profile mode's return to a parked variant)."""
        return self.explainer.explain(frame, texts)

    # -- one compile -----------------------------------------------------------------------------
    def compile(self, record: CompileRecord, seen: Seen) -> list[Event]:
        """The events of compile ``record`` in emitting order: its ``compile``, the graph breaks held for
        it and those in ``seen``, then its limit hit."""
        frame = seen.frame if seen.frame is not None else self._backward_frame(record)
        texts = reason_texts(record, seen.texts) if seen.texts is not None else []
        breaks = self.correlation.compiled(seen.held, frame) if seen.held is not None else []
        breaks += seen.breaks
        event, hit = compile_events(
            record,
            CompileContext(
                time=seen.time,
                rank=seen.rank,
                step=seen.step,
                frame=frame,
                explained=_bound_all(
                    self.explainer.explain(
                        frame, texts, seen.resolve, seen.installed, seen.instance
                    ),
                    seen.bind,
                ),
                graph_breaks=sum(b.count for b in breaks),
                redact=self.redact,
                steady_state=seen.steady_state,
                no_step=seen.no_step,
                limits=seen.limits,
                call_site=seen.call_site,
                guard_set=seen.guard_set,
                trace_id=seen.trace_id,
                generation=seen.generation,
                trace_seconds=seen.trace_seconds,
                trusted=self.trusted,
            ),
        )
        return in_order(event, breaks, hit)

    def _backward_frame(self, record: CompileRecord) -> Frame:
        return self.backward_frame(spelled(record.compile_id))

    def backward_frame(self, compile_id: str) -> Frame:
        """A lazily compiled backward's frame: its forward's, which has its compile id."""
        return self.correlation.frame_of(compile_id) or Frame(
            name="<backward>", file="<unknown>", line=0
        )

    def flush(self) -> list[GraphBreak]:
        """Every graph break still held: its compile's record never came (a crash, the end of the run)."""
        return self.correlation.flush()


def _bound(reason: Reason | None, bind: Bind | None) -> Reason | None:
    """``reason`` with its subject also named by the wrapped function's parameter, where that binds."""
    if reason is None or bind is None or not reason.subject or reason.parameter is not None:
        return reason
    parameter = None
    with _internal.contain("torch.parameters", "subjects keep torch's spelling only"):
        parameter = bind(reason.subject)
    if parameter is None or len(parameter) > MAX_SUBJECT:
        return reason
    return copied(reason, {"parameter": clean_text(parameter, MAX_SUBJECT)})


def _bound_all(explained: Explained, bind: Bind | None) -> Explained:
    """The compile's reasons bound to parameters before its events are built (its limit hit's reason is one
    of them): each event is built once, never rewritten."""
    if bind is None or not explained.reasons:
        return explained
    reasons = [_bound(r, bind) or r for r in explained.reasons]
    if all(a is b for a, b in zip(reasons, explained.reasons)):
        return explained
    return dataclasses.replace(explained, reasons=reasons)
