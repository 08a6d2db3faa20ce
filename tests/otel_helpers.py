"""Test helpers for the OpenTelemetry exporter: a stand-in session and compile-event factories.

``StandInSession`` is *not* the real session: it carries just what ``OtelExporter.start`` reads
(settings, identity, versions, snapshot, tracer_provider) so span building can be
tested on hand-made ``events.Compile`` objects without torch. End-to-end tests use the real session.
"""

from __future__ import annotations

import time
from typing import Any

from recompprof._capture import settings as settings_module
from recompprof._capture.identity import detect
from recompprof._model.aggregates import Aggregates, Snapshot
from recompprof._model.events import Compile, Frame, Reason

FRAME = Frame(name="forward", file="/src/model/net.py", line=33)


class StandInSession:
    """The parts of a session the exporter reads (it writes nothing back)."""

    def __init__(self, tracer_provider: Any = None, **settings: Any) -> None:
        self.settings = settings_module.load(**settings)
        self.identity = detect(
            {
                "RANK": "3",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "8",
                "LOCAL_WORLD_SIZE": "4",
                "TORCHELASTIC_RUN_ID": "run-42",
            }
        )
        self.versions = {"recompprof": "0.1.0", "torch": "2.13.0+cpu", "python": "3.11"}
        self.tracer_provider = tracer_provider
        self.aggregates = Aggregates()

    def snapshot(self) -> Snapshot:
        return self.aggregates.snapshot()


def compile_event(
    compile_id: str = "0/0",
    *,
    is_recompile: bool = False,
    start: float | None = None,
    frame: Frame = FRAME,
    **fields: Any,
) -> Compile:
    """A compile of ``frame`` that took 0.6 s split over three phases."""
    start = time.time() - 1.0 if start is None else start
    defaults: dict[str, Any] = {
        "time": start + 0.6,
        "rank": 3,
        "step": 7,
        "frame": frame,
        "compile_id": compile_id,
        "is_recompile": is_recompile,
        "start_time": start,
        "duration": 0.6,
        "phases": {"dynamo_trace": 0.25, "aot_autograd": 0.15, "other": 0.2},
    }
    if is_recompile:
        defaults["reasons"] = [
            Reason(
                text="tensor 'x' size mismatch at index 0. expected 8, actual 12",
                category="size",
                subject="L['x']",
                explains_change=True,
                entry="0/0",
            ),
            Reason(
                text="L['factor'] == 1.0",
                category="python_constant",
                subject="L['factor']",
                entry="0/0",
            ),
        ]
    defaults.update(fields)
    return Compile(**defaults)
