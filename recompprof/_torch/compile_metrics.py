"""Live ``CompilationMetrics``: one record per compile, read from torch's own logger.

torch passes each record to ``log_compilation_event``, which calls ``log.info("%s", metrics)`` on
logger ``torch._utils_internal``. That logger normally sits at WARNING, so the record is dropped
before any handler sees it. We lower that one logger to INFO and add a *filter*: the filter hands
the record to recompprof and lets it (and any other INFO record of that logger) continue only if
the logger's own level would have let it through, so nothing new appears on the user's handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from recompprof import _internal
from recompprof._torch.versions import torch_info

LOGGER = "torch._utils_internal"


class CompileMetricsTap(logging.Filter):
    """Calls ``on_metrics(record)`` for every ``CompilationMetrics`` torch logs."""

    def __init__(self, on_metrics: Callable[[Any], None]) -> None:
        super().__init__()
        self._on_metrics = on_metrics
        self._logger = logging.getLogger(LOGGER)
        self._prior_level: int | None = None
        self.live = False
        self.why_off = ""

    def install(self) -> None:
        info = torch_info()
        if not info.has("compilation_metrics"):
            self.why_off = info.why_off("compilation_metrics")
            return
        import torch._dynamo.config as dynamo_config

        if not getattr(dynamo_config, "log_compilation_metrics", True):
            self.why_off = "torch._dynamo.config.log_compilation_metrics is False"
            return
        import torch._utils_internal as utils_internal

        if not callable(getattr(utils_internal, "log_compilation_event", None)):  # records go elsewhere, if anywhere
            self.why_off = "torch._utils_internal.log_compilation_event missing (this torch logs compiles elsewhere)"
            return
        self._prior_level = self._logger.level
        if self._logger.getEffectiveLevel() > logging.INFO:
            self._logger.setLevel(logging.INFO)
        self._logger.addFilter(self)
        self.live = True

    def uninstall(self) -> None:
        if not self.live:
            return
        self._logger.removeFilter(self)
        if self._prior_level is not None and self._logger.level == logging.INFO:
            self._logger.setLevel(self._prior_level)
        self.live = False

    def _level_without_us(self) -> int:
        if self._prior_level:
            return self._prior_level
        parent = self._logger.parent
        return parent.getEffectiveLevel() if parent is not None else logging.WARNING

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        metrics = args[0] if isinstance(args, tuple) and len(args) == 1 else None
        if metrics is not None and type(metrics).__name__ == "CompilationMetrics":
            with _internal.guard("torch.compile_metrics"):
                self._on_metrics(metrics)
        return record.levelno >= self._level_without_us()
