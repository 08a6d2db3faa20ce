"""The standard ``OTEL_*`` variables recompprof reads itself, checked once at start.

Most ``OTEL_*`` variables are read by the SDK classes (resource, sampler, OTLP exporters). This module
reads only what a manual set-up must decide itself (the OTLP protocol, ``OTEL_SDK_DISABLED``, the
batch processor sizes, because recompprof runs its own bounded processor) and checks the values the
SDK would otherwise silently replace, so a bad value is logged once and counted instead of lost.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from recompprof.exporter import RecompprofError

HTTP_PROTOBUF = "http/protobuf"
GRPC = "grpc"
PROTOCOLS = (HTTP_PROTOBUF, GRPC)

# Defaults of the OpenTelemetry specification (sdk-environment-variables.md, "Batch Span Processor").
DEFAULT_SCHEDULE_DELAY_MS = 5000
DEFAULT_EXPORT_TIMEOUT_MS = 30000
DEFAULT_MAX_QUEUE_SIZE = 2048
DEFAULT_MAX_EXPORT_BATCH_SIZE = 512

_SAMPLERS = frozenset(
    {
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    }
)
_COMPRESSIONS = frozenset({"none", "gzip", "deflate"})


class OtelConfigWarning(RecompprofError, ValueError):
    """One or more ``OTEL_*`` variables had values that were replaced by a default."""


@dataclasses.dataclass(frozen=True)
class OtelEnvironment:
    """What recompprof decided from the ``OTEL_*`` variables."""

    disabled: bool
    traces_protocol: str
    metrics_protocol: str
    schedule_delay_s: float
    # OTEL_BSP_EXPORT_TIMEOUT bounds each export request, unless an OTLP exporter timeout is set (it is
    # more specific); None leaves the OTLP exporter's own default.
    request_timeout_s: float | None
    max_queue_size: int
    max_export_batch_size: int
    problems: tuple[str, ...]


def _protocol(env: Mapping[str, str], signal: str, problems: list[str]) -> str:
    specific = f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL"
    for name in (specific, "OTEL_EXPORTER_OTLP_PROTOCOL"):
        raw = env.get(name, "").strip()
        if not raw:
            continue
        value = raw.lower()
        if value in PROTOCOLS:
            return value
        problems.append(
            f"{name}={raw!r} is not supported (allowed: {', '.join(PROTOCOLS)}); using {HTTP_PROTOBUF}"
        )
        return HTTP_PROTOBUF
    # The SDK's auto-configuration would pick grpc here; the specification's default is http/protobuf.
    return HTTP_PROTOBUF


def _int(env: Mapping[str, str], name: str, default: int, problems: list[str], minimum: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        problems.append(f"{name}={raw!r} is not an integer; using {default}")
        return default
    if value < minimum:
        problems.append(f"{name}={raw!r} is below {minimum}; using {default}")
        return default
    return value


def _float(env: Mapping[str, str], name: str, problems: list[str]) -> None:
    raw = env.get(name, "").strip()
    if raw:
        try:
            if float(raw) <= 0:
                raise ValueError
        except ValueError:
            problems.append(f"{name}={raw!r} is not a positive number; the SDK uses its default")


def read(env: Mapping[str, str] | None = None) -> OtelEnvironment:
    """Read and check the ``OTEL_*`` variables (``os.environ`` unless ``env`` is given)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    disabled_raw = env.get("OTEL_SDK_DISABLED", "").strip().lower()
    if disabled_raw not in {"", "true", "false"}:
        problems.append(
            f"OTEL_SDK_DISABLED={disabled_raw!r} is not true or false; treated as false"
        )
    traces = _protocol(env, "TRACES", problems)
    metrics = _protocol(env, "METRICS", problems)
    delay = _int(env, "OTEL_BSP_SCHEDULE_DELAY", DEFAULT_SCHEDULE_DELAY_MS, problems, 0)
    timeout = _int(env, "OTEL_BSP_EXPORT_TIMEOUT", DEFAULT_EXPORT_TIMEOUT_MS, problems, 0)
    queue = _int(env, "OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_MAX_QUEUE_SIZE, problems, 1)
    batch = _int(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_MAX_EXPORT_BATCH_SIZE, problems, 1)
    if batch > queue:
        problems.append(
            f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={batch} exceeds OTEL_BSP_MAX_QUEUE_SIZE={queue}; using {queue}"
        )
        batch = queue
    sampler = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if sampler and sampler not in _SAMPLERS:
        problems.append(
            f"OTEL_TRACES_SAMPLER={sampler!r} is unknown; the SDK uses parentbased_always_on"
        )
    if sampler.endswith("traceidratio"):
        arg = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
        try:
            if not 0.0 <= float(arg) <= 1.0:
                raise ValueError
        except ValueError:
            problems.append(
                f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not a ratio in [0, 1]; the SDK uses 1.0"
            )
    for name in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
        _float(env, name, problems)
    for name in ("OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"):
        raw = env.get(name, "").strip()
        if raw and raw.lower() not in _COMPRESSIONS:
            problems.append(
                f"{name}={raw!r} is unknown (allowed: gzip, deflate, none); no compression is used"
            )
    return OtelEnvironment(
        disabled=disabled_raw == "true",
        traces_protocol=traces,
        metrics_protocol=metrics,
        schedule_delay_s=delay / 1000.0,
        request_timeout_s=timeout / 1000.0
        if "OTEL_BSP_EXPORT_TIMEOUT" in env
        and not any(
            env.get(name, "").strip()
            for name in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        )
        else None,
        max_queue_size=queue,
        max_export_batch_size=batch,
        problems=tuple(problems),
    )
