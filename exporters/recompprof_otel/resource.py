"""The OpenTelemetry resource of one rank: service, rank identity, host and process.

Precedence: ``OTEL_SERVICE_NAME`` > ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES`` > ``recompprof``;
every other attribute set in ``OTEL_RESOURCE_ATTRIBUTES`` wins over recompprof's own value, so a
deployment can, for example, name the host after the pod.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry.sdk.resources import OTELResourceDetector, Resource

if TYPE_CHECKING:
    from recompprof.exporter import Identity

DEFAULT_SERVICE_NAME = "recompprof"


def identity_attributes(identity: Identity, versions: Mapping[str, str]) -> dict[str, str | int]:
    """Resource attributes recompprof contributes for this process."""
    attrs: dict[str, str | int] = {
        "recompprof.rank": identity.rank,
        "recompprof.local_rank": identity.local_rank,
        "recompprof.world_size": identity.world_size,
        "recompprof.local_world_size": identity.local_world_size,
        "recompprof.run_id": identity.run_id,
        "recompprof.launcher": identity.launcher,
        "host.name": identity.host,
        "process.pid": identity.pid,
        "process.executable.name": os.path.basename(sys.executable or "python"),
        "process.runtime.name": sys.implementation.name,
        "process.runtime.version": ".".join(map(str, sys.version_info[:3])),
    }
    for key, value in versions.items():
        if value:
            attrs["recompprof.version" if key == "recompprof" else f"recompprof.{key}.version"] = (
                str(value)
            )
    return attrs


def build(identity: Identity, versions: Mapping[str, str]) -> Resource:
    """Resource.create() (SDK defaults, detectors, ``OTEL_RESOURCE_ATTRIBUTES``) filled in with ours."""
    env = Resource.create()
    merged = dict(env.attributes)
    explicit_name = OTELResourceDetector().detect().attributes.get("service.name")
    if not explicit_name:
        merged["service.name"] = DEFAULT_SERVICE_NAME
    for key, value in identity_attributes(identity, versions).items():
        merged.setdefault(key, value)
    return Resource(merged, env.schema_url)
