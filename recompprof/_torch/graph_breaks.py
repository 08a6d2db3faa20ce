"""Graph breaks, taken where torch writes them to its structured trace.

Every graph break torch reports (a break it resumes after, a break it cannot resume from that makes
the whole frame run eagerly, a break raised while converting the frame) goes through
``torch._logging.trace_structured("artifact", {"name": "dynamo_graph_break_reason"}, payload)``:
the record tlparse and ``TORCH_LOGS=graph_breaks`` count. torch calls that function as a module
attribute whether or not ``TORCH_TRACE`` is set, so we wrap it and hand on the payload; anything
else passes straight through. (``counters["graph_break"]`` misses the breaks torch cannot resume
from.)

When a trace is being written (``TORCH_TRACE`` set), nothing of ours may sit between the caller and
torch: torch stamps each trace line with its caller's file and line, and for a call made outside a
compile records the caller's stack (interning each file name as a ``str`` record, so one more file
shifts every later string id). So then we wrap nothing and read the breaks from the records torch
hands its trace logger, through a logging filter that changes nothing: the trace is byte-for-byte
what it would be without recompprof. Otherwise we wrap; if the job adds a trace handler later (as
torch's own structured-trace tests do), a filter puts the real caller back on the records our
wrapper logs, but a stack torch records for a call outside a compile then shows our wrapper.

Where torch has no such artifact, :class:`GraphBreakCounter` reads the growth of
``counters["graph_break"]`` instead, and says that some breaks may be missed.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from recompprof import _internal
from recompprof._model.compile_id import CompileId
from recompprof._torch.patching import replace
from recompprof._torch.versions import torch_info

ARTIFACT = "dynamo_graph_break_reason"
MAX_TRACKED = 1000  # counter fallback: distinct reason texts remembered


class GraphBreakTap:
    """Calls ``on_break(payload, compile_id)`` for every graph break torch traces."""

    def __init__(self, on_break: Callable[[str, str | None], None]) -> None:
        self._on_break = on_break
        self._undo: Callable[[], None] | None = None
        self.live = False
        self.reason_off = ""

    def install(self) -> None:
        info = torch_info()
        for gate in ("graph_breaks", "graph_break_trace"):
            if not info.has(gate):
                self.reason_off = info.why_off(gate)
                return
        import torch._logging as torch_logging

        original = getattr(torch_logging, "trace_structured", None)
        if not callable(original):
            self.reason_off = "torch._logging.trace_structured missing"
            return
        trace_log = logging.getLogger(TRACE_LOGGER)
        if writes_trace(trace_log):
            reader = _BreakRecords(self._on_break)
            trace_log.addFilter(reader)
            self._undo, self.live = (lambda: trace_log.removeFilter(reader)), True
            return
        on_break = self._on_break
        caller_fix = _TraceCallerFix()
        trace_log.addFilter(caller_fix)

        def hooked(name: str, *args: Any, **kwargs: Any) -> Any:
            if name != "artifact" and not trace_log.handlers:
                return original(name, *args, **kwargs)  # most calls of a compile: nothing to do
            if name == "artifact":
                with _internal.contain("torch.graph_breaks"):
                    metadata_fn = kwargs.get("metadata_fn", args[0] if args else None)
                    metadata = metadata_fn() if callable(metadata_fn) else None
                    if isinstance(metadata, dict) and metadata.get("name") == ARTIFACT:
                        payload_fn = kwargs.get("payload_fn")
                        payload = payload_fn() if callable(payload_fn) else None
                        on_break(str(payload or ""), _compile_id(kwargs.get("compile_id")))
            if not trace_log.handlers:
                return original(name, *args, **kwargs)
            callers = caller_fix.callers()
            callers.append(sys._getframe(1))
            try:
                return original(name, *args, **kwargs)
            finally:
                callers.pop()  # never keep a caller's frame (and its locals) alive

        caller_fix.code = hooked.__code__
        hooked.__wrapped__ = original  # type: ignore[attr-defined]
        undo_wrap = replace(torch_logging, "trace_structured", hooked)

        def restore() -> None:
            undo_wrap()
            trace_log.removeFilter(caller_fix)

        self._undo, self.live = restore, True

    def uninstall(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None
        self.live = False


TRACE_LOGGER = "torch.__trace"  # torch._logging._internal.trace_log


def writes_trace(trace_log: logging.Logger) -> bool:
    """Whether the trace logger has a handler that writes: torch installs a lazy one in every process, which
    removes itself at the first record when no trace directory was given (``root_dir`` None)."""
    return any(
        not (
            type(handler).__name__ == "LazyTraceHandler"
            and getattr(handler, "root_dir", None) is None
            and getattr(handler, "stream", None) is None
        )
        for handler in trace_log.handlers
    )


class _BreakRecords(logging.Filter):
    """Hands on the graph breaks among the records torch logs to its trace; passes every record unchanged."""

    def __init__(self, on_break: Callable[[str, str | None], None]) -> None:
        super().__init__()
        self._on_break = on_break

    def filter(self, record: logging.LogRecord) -> bool:
        metadata = getattr(record, "metadata", None)
        if isinstance(metadata, dict):
            artifact = metadata.get("artifact")
            if isinstance(artifact, dict) and artifact.get("name") == ARTIFACT:
                with _internal.contain("torch.graph_breaks"):
                    explicit = CompileId.of_record(metadata)
                    self._on_break(
                        str(getattr(record, "payload", None) or ""),
                        _compile_id(None) or (str(explicit) if explicit is not None else None),
                    )
        return True


class _TraceCallerFix(logging.Filter):
    """Stamps the trace records our wrapper logged (torch's ``stacklevel`` lands on it) with the frame that
    called ``trace_structured``; records logged deeper (the ``str`` records of names torch interns) keep
    theirs."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()
        self.code: CodeType | None = None

    def callers(self) -> list[FrameType]:
        """This thread's callers of our wrapper, innermost last."""
        callers: list[FrameType] | None = getattr(self._local, "callers", None)
        if callers is None:
            callers = self._local.callers = []
        return callers

    def filter(self, record: logging.LogRecord) -> bool:
        code = self.code
        if (
            code is not None
            and record.funcName == code.co_name
            and record.pathname == code.co_filename
        ):
            callers = self.callers()
            if callers:
                frame = callers[-1]
                record.pathname, record.lineno, record.funcName = (
                    frame.f_code.co_filename,
                    frame.f_lineno,
                    frame.f_code.co_name,
                )
                record.filename = os.path.basename(record.pathname)
                record.module = os.path.splitext(record.filename)[0]
        return True


def _compile_id(explicit: Any) -> str | None:
    if explicit is not None:
        return str(explicit)
    try:
        # looked up, not imported: no import statement runs on the compile path once torch is loaded
        guards: Any = sys.modules.get("torch._guards")
        if guards is None:
            import torch._guards

            guards = torch._guards
        current = guards.CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 - an id is a nicety; the break is still recorded
        return None
    return str(current) if current is not None else None


class GraphBreakCounter:
    """Fallback: the graph breaks (reason, count) added to ``counters["graph_break"]`` since the last read."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._last_total = 0
        self._utils: Any = None
        self.live = False
        self.reason_off = ""

    def install(self) -> None:
        info = torch_info()
        if not info.has("graph_breaks"):
            self.reason_off = info.why_off("graph_breaks")
            return
        try:
            import torch._dynamo.utils as dynamo_utils

            counters = dynamo_utils.counters
        except (ImportError, AttributeError) as exc:
            self.reason_off = f"torch._dynamo.utils.counters missing ({exc})"
            return
        # Read at each take through the module (no import statement on the compile path, and a counters
        # object torch replaces is still followed).
        self._utils = dynamo_utils
        self.live = True
        self._last = dict(list(counters["graph_break"].items())[:MAX_TRACKED])
        self._last_total = sum(counters["graph_break"].values())

    def uninstall(self) -> None:
        self.live = False

    def take(self) -> list[tuple[str, int]]:
        if not self.live:
            return []
        current = self._utils.counters["graph_break"]
        total = sum(current.values())
        if total < self._last_total:  # counters were cleared (torch._dynamo.reset / counters.clear)
            self._last, self._last_total = {}, 0
        if total == self._last_total:
            return []
        new: list[tuple[str, int]] = []
        for reason, count in current.items():
            before = self._last.get(reason, 0)
            if count > before:
                new.append((reason, count - before))
                if reason in self._last or len(self._last) < MAX_TRACKED:
                    self._last[reason] = count
        untracked = total - self._last_total - sum(n for _, n in new)
        if untracked > 0:
            new.append(("(graph break reason not tracked: too many distinct reasons)", untracked))
        self._last_total = total
        return new
