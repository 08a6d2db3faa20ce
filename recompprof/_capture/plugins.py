"""Which exporters are installed: found by entry point, with the two in-tree ones as the fallback.

An exporter is two entry points under one name: its class in the ``recompprof.exporters`` group and,
if it has settings, its settings model in ``recompprof.exporter_settings``. The settings model is read
at every ``attach()`` (so its settings are known, and checked, before any exporter is chosen); the
class only when the exporter is chosen. Running from a source tree, with no entry points installed, the
two in-tree exporters are found by their module paths.
"""

from __future__ import annotations

import dataclasses
import functools
from importlib import metadata

EXPORTERS = "recompprof.exporters"
SETTINGS = "recompprof.exporter_settings"


@dataclasses.dataclass(frozen=True)
class Installed:
    """One exporter: its name, where its class is (``module:attr``), where its settings model is (None:
    it has no settings) and the extra that installs what it needs (None: not one of recompprof's)."""

    name: str
    exporter: str
    settings: str | None = None
    extra: str | None = None


_IN_TREE = (
    Installed(
        "prometheus",
        "recompprof_prometheus:PrometheusExporter",
        "recompprof_prometheus.settings:PrometheusSettings",
        "prometheus",
    ),
    Installed(
        "otel", "recompprof_otel:OtelExporter", "recompprof_otel.settings:OtelSettings", "otel"
    ),
)


@functools.cache
def installed() -> dict[str, Installed]:
    """Every exporter, by name: the in-tree ones first (in their fixed order), then the others by name.

    An entry point replaces the in-tree fallback of the same name; a settings entry point with no
    exporter of its name is ignored. Read once per process (one scan of the installed distributions).
    """
    found = {known.name: known for known in _IN_TREE}
    groups = metadata.entry_points()
    settings = {ep.name: ep.value for ep in groups.select(group=SETTINGS)}
    for ep in groups.select(group=EXPORTERS):
        known = found.get(ep.name)
        found[ep.name] = Installed(
            ep.name,
            ep.value,
            settings.get(ep.name, known.settings if known else None),
            known.extra if known else None,
        )
    order = [known.name for known in _IN_TREE]
    return {name: found[name] for name in order + sorted(set(found) - set(order))}
