"""The exporter interface, the read-only view of a session an exporter gets, and lookup by name.

The core never imports an exporter package: exporters are found through the ``recompprof.exporters``
entry-point group (falling back to the known module paths when running from a source tree), by lazy
import, with a typed error for unknown names.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol

from recompprof._capture.settings import ConfigError

if TYPE_CHECKING:
    from recompprof._capture.identity import Identity
    from recompprof._capture.settings import Settings
    from recompprof._model.aggregates import Snapshot
    from recompprof._model.events import Event

_KNOWN = {
    "prometheus": ("recompprof_prometheus:PrometheusExporter", "prometheus"),
    "otel": ("recompprof_otel:OtelExporter", "otel"),
}


class SessionView(Protocol):
    """What an exporter reads of its session, and all it reads: who this rank is, the versions, a source of
    consistent snapshots of the running totals, and the tracer provider the application handed ``attach``
    (None: the exporter builds its own). The session's events reach the exporter through ``on_event``."""

    @property
    def identity(self) -> Identity: ...

    @property
    def versions(self) -> Mapping[str, str]: ...

    @property
    def tracer_provider(self) -> Any: ...

    def snapshot(self) -> Snapshot: ...


@dataclasses.dataclass(frozen=True)
class View:
    """The :class:`SessionView` a session hands its exporters (read-only; nothing flows back through it)."""

    identity: Identity
    versions: Mapping[str, str]
    snapshot: Callable[[], Snapshot]
    tracer_provider: Any = None


class Exporter(Protocol):
    """A sink for one session.

    ``start`` and ``shutdown`` run at attach and detach. ``on_event`` is the session's event stream: it runs on
    the compile path (never on the per-step hot path) and must not block. Exporters read running totals with
    ``session.snapshot()`` at scrape or push time instead of counting on the compile path, and never write
    into the session: what they need to share travels with the event. The session reads two things back:
    ``traces``, True by the end of ``start`` when the exporter sends each compile as a trace named by
    ``Compile.trace_id`` (the session then gives every compile a trace id, chosen at its ``compile_start``),
    and ``dropped()``, what the exporter could not deliver, by reason (reported as ``events_dropped``
    ``<name>_<reason>``). Both are
    optional for an exporter that neither sends traces nor drops anything: the session reads them through
    :func:`sends_traces` and :func:`dropped_by`, which take an exporter without them as False and nothing.
    """

    name: str
    traces: bool

    def start(self, session: SessionView) -> None: ...

    def on_event(self, event: Event) -> None: ...

    def shutdown(self, timeout: float = 5.0) -> None: ...

    def dropped(self) -> dict[str, int]: ...


def sends_traces(exporter: Exporter) -> bool:
    """``exporter.traces``; False for an exporter that does not declare it."""
    return bool(getattr(exporter, "traces", False))


def dropped_by(exporter: Exporter) -> dict[str, int]:
    """``exporter.dropped()``; nothing for an exporter that does not declare it."""
    dropped = getattr(exporter, "dropped", None)
    return dropped() if callable(dropped) else {}


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
