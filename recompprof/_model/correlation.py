"""What torch reports apart about one compile, joined: its frame and its graph breaks.

Held by the compile assembler (``recompprof._model.assembler``) that the live recorder and ``ingest``
share, so a live run and its TORCH_TRACE give the same events.
"""

from __future__ import annotations

import collections
from typing import Any

from recompprof._model.breaks import parse_graph_break
from recompprof._model.events import Frame, GraphBreak

# compile id -> frame, to attribute lazily compiled backwards and late breaks
MAX_REMEMBERED_COMPILES = 4096


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
        self._pending_breaks: collections.OrderedDict[str, list[GraphBreak]] = (
            collections.OrderedDict()
        )
        # frame id -> (frame, what the caller needs again for it, e.g. the code key the live session reads reasons by)
        self._of_frame_id: collections.OrderedDict[str, tuple[Frame, Any]] = (
            collections.OrderedDict()
        )

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
        return {
            "frame_of_compile": len(self._frame_of_compile),
            "pending_breaks": len(self._pending_breaks),
            "frame_ids": len(self._of_frame_id),
        }


def graph_break_event(
    payload: str,
    *,
    time: float,
    rank: int,
    step: int | None,
    frame: Frame | None,
    compile_id: str | None,
    redact: bool,
) -> GraphBreak:
    """The ``GraphBreak`` event for one ``dynamo_graph_break_reason`` payload (live or from a trace)."""
    text = parse_graph_break(payload, redact)
    return GraphBreak(
        time=time,
        rank=rank,
        step=step,
        frame=frame,
        compile_id=compile_id,
        reason=text.reason,
        user_location=text.user_location,
        explanation=text.explanation,
        hints=list(text.hints),
        skipped_frame=text.skipped_frame,
    )
