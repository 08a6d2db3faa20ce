"""Settings: ``attach()`` argument > ``RECOMPPROF_*`` environment variable > default.

Every setting is a field below; its environment variable is ``RECOMPPROF_`` + the name in upper
case. A bad value fails at attach with a :class:`ConfigError` naming the setting and what it allows.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from recompprof._errors import RecompprofError

ENV_PREFIX = "RECOMPPROF_"
# Environment variables of ours that are not settings (read by scripts or at interpreter start).
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
# Variables the tool reads that are not attach() settings (the run id is part of the process identity).
# RECOMPPROF_PARENT is exported by an attached process to its children (recompprof/_bootstrap/lineage.py).
_NON_SETTING_ENV = {
    "RECOMPPROF_VENV",
    "RECOMPPROF_ATTACH",
    "RECOMPPROF_RUN_ID",
    "RECOMPPROF_PARENT",
}
# Settings whose values are never repeated in a message (they hold a password).
_SECRET = {"prometheus_basic_auth"}


class ConfigError(RecompprofError, ValueError):
    """A setting has a value recompprof cannot use; the message names the setting."""


class Settings(BaseSettings):
    """Everything ``attach()`` can be told."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    mode: Literal["monitor", "profile"] = "monitor"
    run_dir: Path | None = None
    event_log: bool = True
    exporters: Annotated[list[Literal["prometheus", "otel"]], NoDecode] = []
    recompile_limit: int | None = Field(default=1, ge=1)
    warmup_steps: int = Field(default=0, ge=0)
    max_frames: int = Field(default=50, ge=1, le=10_000)
    recent_events: int = Field(default=1000, ge=0, le=1_000_000)
    redact: bool = False
    # Profile mode: record Dynamo tracing time per user function (torch's TORCH_COMPILE_DYNAMO_PROFILER).
    dynamo_profiler: bool = False
    # auto: a global optimizer step hook counts steps until session.step() is called; manual: only session.step()
    step_source: Literal["auto", "manual"] = "auto"

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
    otel_metrics: bool = False
    # A compile running this long is logged (off a terminal), and again every compile_status_every seconds
    # (at least 1: a log line per second is the most a person reads, and the status thread looks ~20 times a second).
    compile_status_after: float = Field(default=30.0, ge=0, le=86_400)
    compile_status_every: float = Field(default=60.0, ge=1, le=86_400)
    # A one-line status of the running compile on stderr when it is a terminal (recompprof run / demo set it).
    status_line: bool = False

    @field_validator("exporters", mode="before")
    @classmethod
    def _split_exporters(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip().lower() for part in value.split(",") if part.strip()]
        return value

    @field_validator(
        "recompile_limit",
        "warmup_steps",
        "max_frames",
        "recent_events",
        "prometheus_port",
        "prometheus_push_interval",
        "prometheus_linger_seconds",
        "compile_status_after",
        "compile_status_every",
        mode="before",
    )
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would take True as 1
            raise ValueError("a number is needed, not a boolean")
        return value

    @field_validator("prometheus_addr")
    @classmethod
    def _address(cls, value: str) -> str:
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
    def _credentials(cls, value: str | None) -> str | None:
        if value is not None:
            user, colon, _ = value.partition(":")
            if not colon or not user:
                raise ValueError("expected 'user:password' with a non-empty user")
        return value

    @field_validator("prometheus_linger_seconds", mode="before")
    @classmethod
    def _auto_linger(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in {"auto", ""}:
            return None
        return value

    @field_validator("recompile_limit", mode="before")
    @classmethod
    def _none_means_unlimited(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in {"none", "unlimited", ""}:
            return None
        return value


def load(**overrides: Any) -> Settings:
    """Build the settings, turning pydantic's errors into one message per bad setting."""
    unknown = sorted(set(overrides) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(
            f"unknown recompprof setting(s): {', '.join(unknown)}; "
            f"known settings: {', '.join(Settings.model_fields)}"
        )
    try:
        resolved = Settings(
            **{k: v for k, v in overrides.items() if v is not None or k == "recompile_limit"}
        )
    except ValidationError as exc:
        raise ConfigError(_describe(exc, overrides)) from None
    if resolved.dynamo_profiler and resolved.mode != "profile":
        raise ConfigError(
            "recompprof setting 'dynamo_profiler' (RECOMPPROF_DYNAMO_PROFILER) needs mode='profile': "
            "the Dynamo profiler adds a timer to every traced call, so monitor mode never turns it on"
        )
    return resolved


def unknown_environment() -> list[str]:
    """``RECOMPPROF_*`` variables that name no setting (likely typos)."""
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields} | _NON_SETTING_ENV
    return sorted(k for k in os.environ if k.startswith(ENV_PREFIX) and k not in known)


def _describe(exc: ValidationError, overrides: dict[str, Any]) -> str:
    lines = []
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else "?"
        source = (
            "argument" if name in overrides else f"environment variable {ENV_PREFIX}{name.upper()}"
        )
        allowed = _allowed(name)
        value = "<not shown>" if name in _SECRET else repr(err.get("input"))
        lines.append(
            f"recompprof setting {name!r} ({source}): {err['msg']}; got {value}"
            + (f"; allowed: {allowed}" if allowed else "")
        )
    return "\n".join(lines)


def _allowed(name: str) -> str:
    field = Settings.model_fields.get(name)
    if field is None:
        return ""
    text = str(field.annotation)
    for marker in ("Literal[", "list[Literal["):
        if marker in text:
            inner = text.split("Literal[", 1)[1].split("]", 1)[0]
            return inner.replace("'", "")
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    bounds = [
        f"{sym} {getattr(m, key)}"
        for m in field.metadata
        for key, sym in symbols.items()
        if hasattr(m, key)
    ]
    name = getattr(field.annotation, "__name__", text)
    return f"{name} {', '.join(bounds)}".strip()
