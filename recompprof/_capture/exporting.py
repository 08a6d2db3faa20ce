"""The exporter interface and lookup by name (lazy import, typed error for unknown names).

The core never imports an exporter package: exporters are found through the ``recompprof.exporters``
entry-point group (falling back to the known module paths when running from a source tree).
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol

from recompprof._capture.settings import ConfigError

if TYPE_CHECKING:
    from recompprof._capture.session import Session
    from recompprof._capture.settings import Settings
    from recompprof._model.events import Event

_KNOWN = {
    "prometheus": ("recompprof_prometheus:PrometheusExporter", "prometheus"),
    "otel": ("recompprof_otel:OtelExporter", "otel"),
}


class Exporter(Protocol):
    """A sink for one session.

    ``on_event`` runs on the compile path (never on the per-step hot path) and must not block;
    ``start`` and ``shutdown`` run at attach and detach. Exporters read running totals with
    ``session.snapshot()`` at scrape or push time instead of counting on the compile path, and never
    write into the session: what they need to share travels with the event. An exporter that sends
    each compile as a trace named by ``Compile.trace_id`` sets ``traces = True`` by the end of
    ``start``; the session then gives every compile a trace id (optional attribute, False if absent).
    """

    name: str

    def start(self, session: Session) -> None: ...

    def on_event(self, event: Event) -> None: ...

    def shutdown(self, timeout: float = 5.0) -> None: ...


class ExporterUnavailable(ConfigError):
    """An exporter was named that does not exist or whose extra is not installed."""


def load(name: str, settings: Settings) -> Exporter:
    """Instantiate the exporter called ``name`` (``prometheus`` or ``otel``) for ``settings``."""
    target = None
    for ep in metadata.entry_points(group="recompprof.exporters"):
        if ep.name == name:
            target = ep.value
    if target is None and name in _KNOWN:
        target = _KNOWN[name][0]
    if target is None:
        raise ExporterUnavailable(
            f"recompprof setting 'exporters': unknown exporter {name!r}; allowed: {', '.join(sorted(_KNOWN))}"
        )
    module_name, _, attr = target.partition(":")
    try:
        factory: Any = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        extra = _KNOWN.get(name, (None, name))[1]
        raise ExporterUnavailable(
            f"recompprof setting 'exporters': exporter {name!r} needs the '{extra}' extra "
            f"(pip install 'recompprof[{extra}]'): {exc}"
        ) from exc
    return factory(settings)
