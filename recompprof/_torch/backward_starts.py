"""The start of a lazily compiled backward, told apart among torch's compile-start callbacks.

Torch compiles a graph's backward at its first ``.backward()``, long after the forward's compile ended,
and runs the same compile-start callbacks for it (``CompileMetricsTap`` has one registered). From 2.8
each call names its trigger (``CallbackArgs.callback_trigger``): ``LAZY_BACKWARD`` for this compile,
``DYNAMO`` for a frame's, others for runtime work that is no compile (CUDA-graph recording). This
adapter hands the tap the test that picks the backward's out, so a backward compile gets its
``compile_start`` (``backward``), the running compile, the heartbeat and the gauge like a forward's.
Below the ``backward_compile_start`` gate the signal is off and says why: a backward compile then runs
unseen, and every consumer says one may be running.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recompprof._torch.versions import torch_info

if TYPE_CHECKING:
    from recompprof._torch.compile_metrics import CompileMetricsTap


class BackwardStarts:
    """Has ``tap`` report a lazily compiled backward's start as one (signal ``backward_compile_start``)."""

    def __init__(self, tap: CompileMetricsTap) -> None:
        self._tap = tap
        self.live = False
        self.reason_off = ""

    def install(self) -> None:
        info = torch_info()
        if not info.has("backward_compile_start"):
            self.reason_off = info.why_off("backward_compile_start")
            return
        from torch._dynamo.callback import CallbackTrigger

        trigger = getattr(CallbackTrigger, "LAZY_BACKWARD", None)
        if trigger is None:
            self.reason_off = "torch._dynamo.callback.CallbackTrigger has no LAZY_BACKWARD"
            return
        if not self._tap.starts_seen:
            self.reason_off = (
                "torch's compile-start callbacks are not seen (compile_metrics is off)"
            )
            return

        def is_backward(args: tuple[Any, ...]) -> bool:
            return bool(args) and getattr(args[0], "callback_trigger", None) is trigger

        self._tap.is_backward = is_backward
        self.live = True

    def uninstall(self) -> None:
        self._tap.is_backward = None
        self.live = False
