"""Event-log lines decoded straight into read-only views, for the offline commands' single pass.

Validating each line into the pydantic models of :mod:`recompprof._model.events` and parsing its JSON were
most of what ``report``/``check``/``diff`` cost at a million events. Here msgspec decodes and
validates a line in one C pass into a *view*: a frozen struct with exactly the fields, defaults,
``Literal`` choices and length bounds of its model, derived from the model at import (one schema,
no copy to keep in step). A view has its model's attributes (``kind`` included) and properties, and no
pydantic methods: the models are the one typed event protocol, and a view satisfies its model's. The
folds (``recompprof._analysis.report.fold``, ``recompprof._analysis.report.sessions``) are typed on the models and
dispatch on the event's type through one table per fold, :func:`by_type`, which files each view under its
model's handler, so they take views and models alike; ``eventlog.read_file`` still yields models.

msgspec is stricter than pydantic's lax mode (no ``"1"`` for an int, no ``1.0`` for an int, no NaN),
so what it accepts pydantic accepts with the same values; anything it refuses goes through the
validated reader, which keeps or skips the line (and counts why) exactly as before. Non-finite numbers
are among what it refuses (``NaN`` and ``Infinity`` are not JSON; ``1e999`` is out of range), and the
validated reader counts their line corrupt (``eventlog._finite``): no view ever holds one, at no cost
per line here (``tests/test_unreadable_input.py`` holds both readers to it). Two rules are the
reader's, not the model's, and ``eventlog.scan_file`` or the view keeps them: a line must carry a
``schema_version`` the reader supports (required here, and a ``Literal``), and its bytes must be UTF-8
even where msgspec skips them. A model constraint or validator a view cannot express fails the
import, so the two cannot drift apart silently.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from annotated_types import MaxLen

from recompprof._model import events

try:
    import msgspec
except ImportError:  # optional at runtime: without it the offline commands use the validated reader
    msgspec = None  # type: ignore[assignment]

NESTED_MODELS: tuple[type[events._Model], ...] = (
    events.Frame,
    events.Reason,
    events.Running,
)  # fields of events
EVENT_MODELS: tuple[type[events._Event], ...] = (
    events.SessionStart,
    events.Compile,
    events.CompileStart,
    events.CompileRunning,
    events.GraphBreak,
    events.RecompileLimitHit,
    events.SignalChange,
    events.SessionEnd,
)


def _wire_type(annotation: Any, views: dict[type, type]) -> Any:
    """``annotation`` with nested models replaced by their views."""
    if annotation in views:
        return views[annotation]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return Union[tuple(_wire_type(a, views) for a in args)]  # noqa: UP007 - built from a runtime tuple
    if origin is list:
        return list[_wire_type(args[0], views)]  # type: ignore[misc]
    if origin is dict:
        return dict[_wire_type(args[0], views), _wire_type(args[1], views)]  # type: ignore[misc]
    return annotation


def _constrained(annotation: Any, meta: Any) -> Any:
    if get_origin(annotation) in (
        Union,
        types.UnionType,
    ):  # e.g. str | None: the bound belongs on the str
        return Union[tuple(Annotated[a, meta] if a is str else a for a in get_args(annotation))]  # noqa: UP007
    return Annotated[annotation, meta]


def _meta(owner: str, metadata: list[Any]) -> Any:
    """The msgspec constraints of a field's pydantic ones (``max_length``, ``pattern``), or None."""
    bounds: dict[str, Any] = {}
    for bound in metadata:
        if isinstance(bound, MaxLen):
            bounds["max_length"] = bound.max_length
        elif set(getattr(bound, "__dict__", ())) == {"pattern"} and isinstance(bound.pattern, str):
            # pydantic matches with Rust's regex, where a final $ is the end of the text; in Python's
            # re it also matches before a final newline, so it becomes \Z.
            pattern = bound.pattern
            bounds["pattern"] = (
                pattern[:-1] + r"\Z"
                if pattern.endswith("$") and not pattern.endswith(r"\$")
                else pattern
            )
        else:  # a view that checked less than its model would keep lines the validated reader skips
            raise TypeError(
                f"{owner}: recompprof._eventlog.fastread cannot carry over {bound!r}; extend it"
            )
    return msgspec.Meta(**bounds) if bounds else None


def _view(model: type[events._Model], views: dict[type, type]) -> type:
    """The msgspec struct with ``model``'s fields (and its ``kind`` as the tag and a class attribute)."""
    decorators = model.__pydantic_decorators__
    if decorators.validators or decorators.field_validators or decorators.model_validators:
        raise TypeError(
            f"{model.__name__} has validators: recompprof._eventlog.fastread cannot carry them over; extend it"
        )
    fields: list[tuple[Any, ...]] = []
    kind = None
    for name, info in model.model_fields.items():
        if name == "kind":
            kind = info.default
            continue
        annotation = _wire_type(info.annotation, views)
        if (
            name == "schema_version"
        ):  # the reader's rule: a version it does not know is never a view
            annotation = Literal[tuple(sorted(events.SUPPORTED_SCHEMA_VERSIONS))]
        meta = _meta(f"{model.__name__}.{name}", info.metadata)
        if meta is not None:
            annotation = _constrained(annotation, meta)
        # The reader needs schema_version on the line (a line without one is skipped, not read as
        # the current version): the model's default is for writing.
        required = info.is_required() or name == "schema_version"
        fields.append((name, annotation) if required else (name, annotation, info.default))
    namespace: dict[str, Any] = {
        "__doc__": f"A read-only view of :class:`{model.__module__}.{model.__name__}`."
    }
    for attr, value in vars(
        model
    ).items():  # properties (Frame.label) work on any object with the fields
        if isinstance(value, property):
            namespace[attr] = value
    tagged: dict[str, Any] = {}
    if kind is not None:
        namespace["kind"] = kind
        tagged = {"tag_field": "kind", "tag": kind}
    view = msgspec.defstruct(
        model.__name__ + "View",
        fields,
        module=__name__,
        namespace=namespace,
        kw_only=True,
        frozen=True,
        gc=False,
        **tagged,
    )
    return view


def _views() -> tuple[type, ...]:
    """The views of Frame, Reason, Running and every event model, nested models first."""
    if msgspec is None:
        return ()
    views: dict[type, type] = {}
    models: tuple[type[events._Model], ...] = (*NESTED_MODELS, *EVENT_MODELS)
    for model in models:
        views[model] = _view(model, views)
    return tuple(views.values())


VIEWS = _views()
VIEW_OF: dict[type, type] = dict(
    zip((*NESTED_MODELS, *EVENT_MODELS), VIEWS, strict=False)
)  # model -> its view

H = TypeVar("H")


def by_type(handlers: Mapping[type[events._Event], H]) -> dict[type, H]:
    """``handlers`` by event model, each model's view under its model's handler: a table to dispatch on
    ``type(event)`` (one dict lookup), for models and views alike. A view has its model's fields and
    properties, so a handler typed on the model reads either."""
    table: dict[type, H] = dict(handlers)
    for model, handler in handlers.items():
        if model in VIEW_OF:
            table[VIEW_OF[model]] = handler
    return table


# Decodes one line into the view of its ``kind``; raises on anything else (msgspec.DecodeError, mostly).
DECODER = msgspec.json.Decoder(Union[VIEWS[len(NESTED_MODELS) :]]) if msgspec is not None else None  # noqa: UP007
