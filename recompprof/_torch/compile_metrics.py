"""Live ``CompilationMetrics``: one record per compile, taken where torch hands it on.

torch builds one record per compile in ``torch._dynamo.utils.record_compilation_metrics``, appends it
to the bounded buffer ``utils._compilation_metrics`` and passes it to
``utils.add_compilation_metrics_to_chromium`` *unconditionally*; only after that does it consult
``config.log_compilation_metrics`` (which Dynamo's own ``TestCase`` and some frameworks turn off)
before logging it. We wrap that unconditional call (looked up as a module global at call time), so:

- capture does not depend on ``log_compilation_metrics`` (set before or after attach);
- logging is left alone: no logger level, filter or handler of the user's is touched.

Where that function is missing (older torch) we wrap ``utils.log_compilation_event`` instead and keep
``log_compilation_metrics`` on for the session (restored at detach if nobody changed it).

Either hook could be bypassed (another tool rebinding the same global, a reload). :meth:`reconcile`
compares torch's own record buffer with what reached us; it runs at every compile start (torch's
compile callbacks) and at detach. Records that reached the buffer but not us are fed late, and the
loss is reported: late records through ``on_late``; records that fell off the bounded buffer unseen
through ``on_lost`` (the signal is then dark for that stretch).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any

from recompprof import _internal
from recompprof._model.compile_id import UNKNOWN, spelled
from recompprof._torch.patching import replace
from recompprof._torch.versions import torch_info

log = logging.getLogger("recompprof")

_MAX_REMEMBERED = 512  # ids of records seen, to recognise them in torch's buffer (its maxlen is 64)
# The hooks below run at every compile, cold there: each contains its work with a ``try``/``except`` that
# does what ``contain`` does (``_internal.caught``), which costs nothing until it catches, where a context
# manager is two more calls per hook.


class CompileMetricsTap:
    """Calls ``on_metrics(record)`` for every ``CompilationMetrics`` torch records."""

    def __init__(
        self,
        on_metrics: Callable[[Any], None],
        on_late: Callable[[int, str], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
        on_start: Callable[[str | None, bool], None] | None = None,
        on_end: Callable[[], None] | None = None,
        on_reset: Callable[[], None] | None = None,
    ) -> None:
        self._on_metrics = on_metrics
        self._on_start, self._on_end = (
            on_start,
            on_end,
        )  # a compile began (its compile id, whether a lazily compiled backward) / ended, failed or not
        # Tells a lazily compiled backward's start callback (set by backward_starts.BackwardStarts).
        self.is_backward: Callable[[tuple[Any, ...]], bool] | None = None
        self._on_reset = on_reset  # torch._dynamo.reset() ran
        self._on_late = on_late
        self._on_lost = on_lost
        self._undo: list[Callable[[], None]] = []
        # id -> record (kept alive)
        self._seen: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._start_callback: Callable[..., None] | None = None
        # torch's callback_handler, where the start callback is registered
        self._handler: Any = None
        self._utils: Any = None  # torch._dynamo.utils, whose record buffer reconcile reads
        self._end_callback: Callable[..., None] | None = None
        self.hook = ""  # which torch function is wrapped
        self.live = False
        self.reason_off = ""

    # -- install / uninstall ---------------------------------------------------------------------
    def install(self) -> None:
        info = torch_info()
        if not info.has("compilation_metrics"):
            self.reason_off = info.why_off("compilation_metrics")
            return
        import torch._dynamo.utils as utils

        self._utils = utils  # read at every compile start (reconcile): imported once
        if callable(getattr(utils, "add_compilation_metrics_to_chromium", None)):
            self._wrap(utils, "add_compilation_metrics_to_chromium")
        elif callable(getattr(utils, "log_compilation_event", None)):
            self._wrap(utils, "log_compilation_event")
            self._keep_logging_on()
        else:
            self.reason_off = (
                "torch._dynamo.utils has neither add_compilation_metrics_to_chromium nor "
                "log_compilation_event (this torch hands compile records elsewhere)"
            )
            return
        self._skip_buffered(utils)
        self._register_start_callback()
        self.live = True

    def uninstall(self) -> None:
        if not self.live:
            return
        self.reconcile()
        while self._undo:
            self._undo.pop()()
        self.live = False

    def _wrap(self, module: Any, name: str) -> None:
        original = getattr(module, name)
        tap = self

        def hooked(metrics: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                tap._take(metrics)
            except Exception as exc:  # noqa: BLE001 - counted; raised again under the tests
                _internal.caught("torch.compile_metrics", exc)
            return original(metrics, *args, **kwargs)

        hooked.__wrapped__ = original  # type: ignore[attr-defined]
        self._undo.append(replace(module, name, hooked))
        self.hook = f"torch._dynamo.utils.{name}"

    def _keep_logging_on(self) -> None:
        import torch._dynamo.config as config

        if getattr(config, "log_compilation_metrics", True):
            return
        config.log_compilation_metrics = True
        log.info(
            "recompprof: torch._dynamo.config.log_compilation_metrics was False; turned on for this session "
            "(this torch passes compile records on only through that log)"
        )

        def restore() -> None:
            if config.log_compilation_metrics is True:
                config.log_compilation_metrics = False

        self._undo.append(restore)

    def _register_start_callback(self) -> None:
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:  # no compile callbacks: reconcile runs at detach only
            return

        def on_compile_start(*args: Any) -> None:  # CallbackArgs from torch 2.8, nothing before
            try:
                self.reconcile()
            except Exception as exc:  # noqa: BLE001 - counted; raised again under the tests
                _internal.caught("torch.compile_metrics.reconcile", exc)
            if self._on_start is not None:
                try:
                    compile_id = spelled(getattr(args[0], "compile_id", None) if args else None)
                    is_backward = self.is_backward
                    self._on_start(
                        compile_id if compile_id != UNKNOWN else None,
                        is_backward is not None and is_backward(args),
                    )
                except Exception as exc:  # noqa: BLE001 - as above
                    _internal.caught("torch.compile_start", exc)

        def on_compile_end(*_: Any) -> None:
            if self._on_end is not None:
                try:
                    self._on_end()
                except Exception as exc:  # noqa: BLE001 - as above
                    _internal.caught("torch.compile_end", exc)

        callback_handler.register_start_callback(on_compile_start)
        callback_handler.register_end_callback(on_compile_end)
        self._start_callback, self._end_callback = on_compile_start, on_compile_end
        self._handler = callback_handler

        def remove() -> None:
            if on_compile_start in callback_handler.start_callbacks:
                callback_handler.remove_start_callback(on_compile_start)
            if on_compile_end in callback_handler.end_callbacks:
                callback_handler.remove_end_callback(on_compile_end)

        self._undo.append(remove)
        self._watch_resets(callback_handler)

    @property
    def starts_seen(self) -> bool:
        """Whether torch's compile-start callbacks reach the tap."""
        return self.live and self._start_callback is not None

    def _watch_resets(self, handler: Any) -> None:
        """``torch._dynamo.reset()`` clears every compile callback (``callback_handler.clear()``), ours included,
        and restarts compile ids: put ours back as it clears them, before any compile can start, and report
        the reset. torch has no reset hook; this wraps the one handler's ``clear`` (an instance attribute,
        removed at uninstall)."""
        original = getattr(handler, "clear", None)
        if (
            not torch_info().has("reset_clears_callbacks")
            or not callable(original)
            or "clear" in vars(handler)
        ):
            return
        tap = self

        def clear(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:
                with _internal.contain("torch.reset"):
                    tap._ensure_start_callback()
                    if tap._on_reset is not None:
                        tap._on_reset()

        clear.__wrapped__ = original  # type: ignore[attr-defined]
        handler.clear = clear

        def unwatch() -> None:
            if vars(handler).get("clear") is clear:
                del handler.clear

        self._undo.append(unwatch)

    def _skip_buffered(self, utils: Any) -> None:
        for record in list(getattr(utils, "_compilation_metrics", ())):
            self._remember(record)

    # -- records ---------------------------------------------------------------------------------
    def _remember(self, record: Any) -> None:
        self._seen[id(record)] = record
        while len(self._seen) > _MAX_REMEMBERED:
            self._seen.popitem(last=False)

    def _take(self, metrics: Any) -> None:
        if type(metrics).__name__ != "CompilationMetrics" or id(metrics) in self._seen:
            return
        self._remember(metrics)
        self._ensure_start_callback()
        self._on_metrics(metrics)

    def _ensure_start_callback(self) -> None:
        # torch._dynamo.reset() clears every compile callback, ours included: put it back.
        callback_handler = self._handler
        if self._start_callback is None or callback_handler is None:
            return
        if self._start_callback not in callback_handler.start_callbacks:
            callback_handler.register_start_callback(self._start_callback)
        if (
            self._end_callback is not None
            and self._end_callback not in callback_handler.end_callbacks
        ):
            callback_handler.register_end_callback(self._end_callback)

    def reconcile(self) -> int:
        """Feed records torch buffered that never reached the hook; returns how many."""
        if not self.live:
            return 0
        buffer = getattr(self._utils, "_compilation_metrics", None)
        if not buffer or id(buffer[-1]) in self._seen:
            return 0
        records = list(buffer)
        unseen = [r for r in records if id(r) not in self._seen]
        if not unseen:
            return 0
        # The buffer is bounded: if none of it is known, older unseen records may have fallen off.
        lost = len(records) == buffer.maxlen and id(records[0]) not in self._seen
        for record in unseen:
            self._take(record)
        why = f"compile records stopped reaching {self.hook} (another tool may have replaced it)"
        if self._on_late is not None:
            self._on_late(len(unseen), why)
        if lost and self._on_lost is not None:
            self._on_lost(
                f"{why}; torch's buffer of the last {buffer.maxlen} records overflowed, "
                "so earlier compiles were lost"
            )
        return len(unseen)
