"""Settings: ``attach()`` argument > ``RECOMPPROF_*`` environment variable > default.

Every setting is a field of :class:`CoreSettings`, :class:`StatusSettings` or an installed exporter's
:class:`ExporterSettings` (found by ``recompprof._capture.plugins``); ``Settings`` is all of them, composed
once per process. A setting's environment variable is ``RECOMPPROF_`` + its name in upper case. A bad
value fails at attach with a :class:`ConfigError` naming the setting and what it allows.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, cast

from pydantic import Field, ValidationError, create_model, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from recompprof import _internal
from recompprof._capture import plugins
from recompprof._capture.lake_uri import names_no_place, shown
from recompprof._errors import RecompprofError
from recompprof._model.naming import as_text

ENV_PREFIX = "RECOMPPROF_"
# Variables the tool reads that are not attach() settings (the run id is part of the process identity).
# RECOMPPROF_PARENT is exported by an attached process to its children (recompprof/_bootstrap/lineage.py).
_NON_SETTING_ENV = {
    "RECOMPPROF_VENV",
    "RECOMPPROF_ATTACH",
    "RECOMPPROF_RUN_ID",
    "RECOMPPROF_PARENT",
}


# Labels: names as in Prometheus and SQL identifiers; values bounded like a reason's subject.
LABEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
MAX_LABEL = 200
MAX_LABELS = 32
# The lake's URI schemes pyarrow's filesystems open (a plain path needs none).
HISTORY_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")


def parse_labels(text: str) -> dict[str, str]:
    """``"team=x,model=y"`` as a dict; raises ValueError naming a part without ``=`` or a name given
    twice."""
    labels: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"{part.strip()!r} is not name=value")
        if key.strip() in labels:  # which one was meant cannot be known
            raise ValueError(f"label {key.strip()!r} is given twice")
        labels[key.strip()] = value.strip()
    return labels


def check_text(value: str) -> str:
    """``value`` as it is where it is UTF-8 text; else a ValueError naming the first byte that is not.
    An environment variable or an argument in another encoding reaches Python as lone surrogates,
    which no event log line, JSON document or lake column can hold: the job's log would be lost."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        spelled = as_text(value[exc.start])  # the byte as the run id would spell it: \xff
        raise ValueError(f"not UTF-8 text ({spelled} at character {exc.start})") from None
    return value


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` as they are; raises ValueError naming the first that the ``labels`` setting (and
    ``export --labels``) refuses: a name not ``LABEL_KEY``, a value over ``MAX_LABEL`` characters or
    not UTF-8 text, more than ``MAX_LABELS``."""
    for key, text in labels.items():
        if not LABEL_KEY.fullmatch(key):
            raise ValueError(f"label name {key!r} must match {LABEL_KEY.pattern}")
        if len(text) > MAX_LABEL:
            raise ValueError(f"label {key!r} is longer than {MAX_LABEL} characters")
        try:
            check_text(text)
        except ValueError as exc:
            raise ValueError(f"label {key!r}: {exc}") from None
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels")
    return labels


class ConfigError(RecompprofError, ValueError):
    """A setting has a value recompprof cannot use; the message names the setting."""


class _Part(BaseSettings):
    """What every group of settings shares: the variable prefix, unknown names refused, defaults checked.

    A part's validator is built when first used (``defer_build``): only the composed ``Settings`` is.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, defer_build=True
    )


class ExporterSettings(_Part):
    """The base of an exporter's settings model: one field per setting, each named after the exporter
    (``prometheus_port`` for ``prometheus``), read from ``RECOMPPROF_`` + the name in upper case and
    checked by the model's own validators at ``attach()``, with the core's settings."""

    # Settings whose values are never repeated in a message (they hold a password).
    secret: ClassVar[frozenset[str]] = frozenset()


class CoreSettings(_Part):
    """The session's own settings (the compile status ones follow the exporters' in the listing)."""

    mode: Literal["monitor", "profile"] = "monitor"
    run_dir: Path | None = None
    event_log: bool = True
    # The names allowed are those of the installed exporters (the composed Settings narrows the type).
    exporters: Annotated[list[str], NoDecode] = []
    recompile_limit: int | None = Field(default=1, ge=1)
    warmup_steps: int = Field(default=0, ge=0)
    max_frames: int = Field(default=50, ge=1, le=10_000)
    recent_events: int = Field(default=1000, ge=0, le=1_000_000)
    redact: bool = False
    # Profile mode: record Dynamo tracing time per user function (torch's TORCH_COMPILE_DYNAMO_PROFILER).
    dynamo_profiler: bool = False
    # auto: a global optimizer step hook counts steps until session.step() is called; manual: only session.step()
    step_source: Literal["auto", "manual"] = "auto"
    # Fleet history (docs/history.md): the job this run belongs to (default: torch.compiler.config.job_id,
    # else the launcher's run id), free labels ("team=x,model=y") on session_start and every lake row,
    # and the lake this session's log is exported to while it runs (every history_every seconds: the
    # days closed since, and the day so far) and when it ends (off by default), within a deadline.
    job: str | None = Field(default=None, min_length=1, max_length=200)
    labels: Annotated[dict[str, str], NoDecode] = {}
    history_uri: str | None = None
    history_timeout: float = Field(default=30.0, gt=0, le=600)
    history_every: float = Field(default=3600.0, ge=1, le=86400)

    @field_validator("labels", mode="before")
    @classmethod
    def _parse_labels(cls, value: Any) -> Any:
        return parse_labels(value) if isinstance(value, str) else value

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        return check_labels(value)

    @field_validator("run_dir", "job", "history_uri", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        # A deploy template's empty value (RECOMPPROF_RUN_DIR: "") means the default: an empty
        # run_dir was the working directory, an empty job a ConfigError.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("history_uri")
    @classmethod
    def _check_history_uri(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = check_text(value.strip())
        scheme = value.partition("://")[0].lower() if "://" in value else ""
        if scheme and scheme not in HISTORY_SCHEMES:
            raise ValueError(
                f"unknown scheme {scheme!r}: a path, or one of {', '.join(HISTORY_SCHEMES)}"
            )
        if names_no_place(value):
            raise ValueError(f"{shown(value)!r} names no bucket or folder for the lake")
        # A path is the one meant when attach() was called: the job may change its directory after
        # (Hydra's job.chdir), and the export at its end would write the lake somewhere else.
        return value if scheme else str(Path(value).expanduser().absolute())

    @field_validator("run_dir")
    @classmethod
    def _absolute_run_dir(cls, value: Path | None) -> Path | None:
        # As history_uri: the directory meant when attach() was called, whatever the job's later one.
        return None if value is None else value.expanduser().absolute()

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
        "history_timeout",
        "history_every",
        mode="before",
    )
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        return no_booleans(value)

    @field_validator("recompile_limit", mode="before")
    @classmethod
    def _none_means_unlimited(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in {"none", "unlimited", ""}:
            return None
        return value


class StatusSettings(_Part):
    """The running compile's log lines and status line."""

    # A compile running this long is logged (off a terminal), and again every compile_status_every seconds
    # (at least 1: a log line per second is the most a person reads, and the status thread looks ~20 times a second).
    compile_status_after: float = Field(default=30.0, ge=0, le=86_400)
    compile_status_every: float = Field(default=60.0, ge=1, le=86_400)
    # A one-line status of the running compile on stderr when it is a terminal (recompprof run / demo set it).
    status_line: bool = False

    @field_validator("compile_status_after", "compile_status_every", mode="before")
    @classmethod
    def _status_no_booleans(cls, value: Any) -> Any:
        return no_booleans(value)


def no_booleans(value: Any) -> Any:
    """A ``mode="before"`` check for a number setting: pydantic would take True as 1."""
    if isinstance(value, bool):
        raise ValueError("a number is needed, not a boolean")
    return value


if TYPE_CHECKING:

    class Settings(StatusSettings, CoreSettings):
        """Everything ``attach()`` can be told (as the core reads it; the exporters' fields are theirs)."""


def __getattr__(name: str) -> Any:
    if name == "Settings":
        return settings_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_composed: type[Settings] | None = None
_composing = threading.RLock()


def settings_class() -> type[Settings]:
    """``Settings``: the core's settings, then each installed exporter's, then the compile status ones.

    Composed once per process from the exporters installed (``recompprof._capture.plugins``); the
    ``exporters`` setting allows their names.
    """
    global _composed
    with _composing:
        if _composed is None:
            parts = {
                name: _exporter_settings(name, where.settings)
                for name, where in plugins.installed().items()
            }
            own = [part for part in parts.values() if part is not None]
            bases: tuple[type[_Part], ...] = (StatusSettings, *reversed(own), CoreSettings)
            allowed: Any = Annotated[list[Literal[tuple(parts)]], NoDecode]  # type: ignore[misc]
            composed = create_model(
                "Settings",
                __base__=bases,
                __module__=__name__,
                __doc__="Everything ``attach()`` can be told.",
                exporters=(allowed, []),
            )
            _composed = cast("type[Settings]", composed)
    return _composed


def _exporter_settings(name: str, target: str | None) -> type[ExporterSettings] | None:
    """The settings model of exporter ``name``; None if it has none, or one recompprof cannot use
    (counted and logged as an internal error: an exporter's fault must not stop every attach)."""
    if target is None:
        return None
    with _internal.contain(f"exporter.{name}", "its settings are not known; the exporter has none"):
        module, _, attr = target.partition(":")
        model = getattr(importlib.import_module(module), attr)
        if not (isinstance(model, type) and issubclass(model, ExporterSettings)):
            raise ConfigError(f"{target} is not a recompprof.exporter.ExporterSettings")
        # Named after the exporter, a field cannot shadow another's setting, nor a validator another's
        # (pydantic keeps one validator per name in the composed class).
        foreign = [
            member
            for member in [*model.model_fields, *_validators(model)]
            if not member.lstrip("_").startswith(f"{name}_")
        ]
        if foreign:
            raise ConfigError(
                f"{target}: the fields and validators of exporter {name!r} must be named "
                f"'{name}_...': " + ", ".join(foreign)
            )
        return model
    return None


def _validators(model: type[ExporterSettings]) -> list[str]:
    found = model.__pydantic_decorators__
    return [
        *found.field_validators,
        *found.model_validators,
        *found.field_serializers,
        *found.model_serializers,
    ]


def load(**overrides: Any) -> Settings:
    """Build the settings, turning pydantic's errors into one message per bad setting."""
    model = settings_class()
    unknown = sorted(set(overrides) - set(model.model_fields))
    if unknown:
        raise ConfigError(
            f"unknown recompprof setting(s): {', '.join(unknown)}; "
            f"known settings: {', '.join(model.model_fields)}"
        )
    try:
        resolved = model(
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
    known = {ENV_PREFIX + name.upper() for name in settings_class().model_fields} | _NON_SETTING_ENV
    return sorted(k for k in os.environ if k.startswith(ENV_PREFIX) and k not in known)


def _describe(exc: ValidationError, overrides: dict[str, Any]) -> str:
    lines = []
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else "?"
        source = (
            "argument" if name in overrides else f"environment variable {ENV_PREFIX}{name.upper()}"
        )
        allowed = _allowed(name)
        value = "<not shown>" if name in _secret() else repr(err.get("input"))
        lines.append(
            f"recompprof setting {name!r} ({source}): {err['msg']}; got {value}"
            + (f"; allowed: {allowed}" if allowed else "")
        )
    return "\n".join(lines)


def _allowed(name: str) -> str:
    field = settings_class().model_fields.get(name)
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


def _secret() -> frozenset[str]:
    """The settings whose values no message repeats: those each exporter declares secret."""
    return frozenset().union(*(getattr(base, "secret", ()) for base in settings_class().__mro__))
