"""The Prometheus exporter's settings: ``prometheus_*``, each also read from ``RECOMPPROF_PROMETHEUS_*``.

Imported by recompprof at every ``attach()`` (entry point ``recompprof.exporter_settings``), with or
without the ``prometheus`` extra, so it needs nothing but recompprof's exporter interface. Checks of a
value alone live here; checks of a combination, a file or an address run when the exporter is built
(``recompprof_prometheus.exporter``).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from recompprof.exporter import ExporterSettings, no_booleans

_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


class PrometheusSettings(ExporterSettings):
    """Where and how the Prometheus exporter publishes (docs/prometheus.md)."""

    secret: ClassVar[frozenset[str]] = frozenset({"prometheus_basic_auth"})

    prometheus_port: int = Field(default=9464, ge=0, le=65535)
    prometheus_addr: str = "127.0.0.1"
    prometheus_mode: Literal["pull", "multiprocess", "textfile", "pushgateway"] = "pull"
    prometheus_port_search: bool = False
    prometheus_textfile_dir: Path | None = None
    prometheus_pushgateway_url: str | None = None
    # At least 0.1 s: a period near zero would rewrite the textfile, push or refresh the mmap files
    # without pause, a busy thread beside training.
    prometheus_push_interval: float = Field(default=15.0, ge=0.1, le=86_400)
    prometheus_job: str = "recompprof"
    # Seconds the pull endpoint keeps serving after detach for a scrape of the final values (and a
    # Pushgateway group is kept before it is deleted); None: one scrape (push) interval, 0: off.
    prometheus_linger_seconds: float | None = Field(default=None, ge=0, le=600)
    prometheus_certfile: Path | None = None
    prometheus_keyfile: Path | None = None
    prometheus_basic_auth: str | None = None  # "user:password"

    @field_validator(
        "prometheus_port", "prometheus_push_interval", "prometheus_linger_seconds", mode="before"
    )
    @classmethod
    def _prometheus_no_booleans(cls, value: Any) -> Any:
        return no_booleans(value)

    @field_validator("prometheus_addr")
    @classmethod
    def _prometheus_address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not _HOSTNAME.fullmatch(value):
                raise ValueError(
                    "an IP address or host name is needed (127.0.0.1 serves only this host)"
                ) from None
        return value

    @field_validator("prometheus_basic_auth")
    @classmethod
    def _prometheus_credentials(cls, value: str | None) -> str | None:
        if value is not None:
            user, colon, _ = value.partition(":")
            if not colon or not user:
                raise ValueError("expected 'user:password' with a non-empty user")
        return value

    @field_validator("prometheus_linger_seconds", mode="before")
    @classmethod
    def _prometheus_auto_linger(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in {"auto", ""}:
            return None
        return value
