"""The exporter interface, the read-only view of a session an exporter gets, and lookup by name.

The core never imports an exporter package: exporters are found by entry point
(``recompprof._capture.plugins``), imported when chosen, with a typed error for unknown names. Exporters
are written against the public face of this module, :mod:`recompprof.exporter`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from recompprof._capture import plugins
from recompprof._capture.settings import ConfigError

if TYPE_CHECKING:
    from recompprof._capture.identity import Identity
    from recompprof._capture.settings import ExporterSettings, Settings
    from recompprof._model.aggregates import Snapshot
    from recompprof._model.events import Event


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


class Exporter:
    """A sink for one session; the base class of every exporter, each method a safe default that does nothing.

    The exporter is built with the session's settings (an instance of its own settings model, among the
    others): the constructor checks what the fields alone cannot (a combination, a file, an address) and
    raises :class:`ConfigError` naming the setting, at ``attach()`` and in ``recompprof run`` before the
    program starts. ``start`` and ``shutdown`` run at attach and detach. ``on_event`` is the session's event
    stream: it runs on the compile path (never on the per-step hot path) and must not block. Exporters read
    running totals with ``session.snapshot()`` at scrape or push time instead of counting on the compile
    path, and never write into the session: what they need to share travels with the event. The session
    reads two things back: ``traces``, True by the end of ``start`` when the exporter sends each compile as
    a trace named by ``Compile.trace_id`` (the session then gives every compile a trace id, chosen at its
    ``compile_start``), and ``dropped()``, what the exporter could not deliver, by reason (reported as
    ``events_dropped`` ``<name>_<reason>``). The session calls each of these under its internal-error guard.
    """

    name: ClassVar[str] = ""
    traces: bool = False
    settings: ExporterSettings

    def __init__(self, settings: ExporterSettings) -> None:
        self.settings = settings

    def start(self, session: SessionView) -> None:
        """Begin exporting (open a port, start a thread); the job goes on without an exporter that fails here."""

    def on_event(self, event: Event) -> None:
        """One event of the session, on the compile path: hand it on, never block."""

    def shutdown(self, timeout: float = 5.0) -> None:
        """Flush and stop within ``timeout`` seconds (at detach, at interpreter exit, on SIGTERM)."""

    def dropped(self) -> dict[str, int]:
        """What could not be delivered so far, by reason."""
        return {}


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
    """Instantiate the exporter called ``name`` (``prometheus``, ``otel`` or one installed by entry point)
    for ``settings``."""
    found = plugins.installed()
    where = found.get(name)
    if where is None:
        raise ExporterUnavailable(
            f"recompprof setting 'exporters': unknown exporter {name!r}; allowed: {', '.join(sorted(found))}"
        )
    module_name, _, attr = where.exporter.partition(":")
    try:
        factory: Any = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        if where.extra is None:
            raise ExporterUnavailable(
                f"recompprof setting 'exporters': exporter {name!r} ({where.exporter}) cannot be "
                f"imported: {exc}"
            ) from exc
        raise ExporterUnavailable(
            f"recompprof setting 'exporters': exporter {name!r} needs the '{where.extra}' extra "
            f"(pip install 'recompprof[{where.extra}]'): {exc}"
        ) from exc
    exporter: Exporter = factory(settings)
    return exporter
