"""Events built from values recompprof made itself, without pydantic's validation.

On the compile path the recorder builds each event from values of its own making, of the declared types
(floats from ``time.time()`` and torch's counters read as floats, closed-set keys, nested models already
built). Validating them again costs more than the rest of building the event: pydantic walks its schema
for every field, cold inside a compile. :func:`trusted` builds the same model as validation would (the
fields in declaration order, so the JSON line is byte for byte the same), checking only the bounds the
model declares (a text's length, the trace id's pattern); a value past one is validated, which raises as
before. What comes from outside (a log, a trace) is validated as it is read, never built here. In strict
mode (the tests) every trusted build is compared with pydantic's.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import BaseModel

from recompprof import _internal

M = TypeVar("M", bound=BaseModel)


class _Plan:
    """What building one model class takes: its fields in order, their defaults, their declared bounds."""

    __slots__ = ("defaults", "required", "mutable", "max_lengths", "patterns")

    def __init__(self, cls: type[BaseModel]) -> None:
        # every field in declaration order (the order the JSON line lists them in), required ones too
        self.defaults: dict[str, Any] = {}
        self.required: set[str] = set()
        self.mutable: dict[str, Any] = {}  # a list or dict default: each model gets its own copy
        self.max_lengths: dict[str, int] = {}
        self.patterns: dict[str, re.Pattern[str]] = {}
        for name, field in cls.model_fields.items():
            if field.is_required():
                self.required.add(name)
            self.defaults[name] = None if field.is_required() else field.default
            if isinstance(field.default, (list, dict, set)):
                self.mutable[name] = field.default
            for bound in field.metadata:
                if getattr(bound, "max_length", None) is not None:
                    self.max_lengths[name] = bound.max_length
                if getattr(bound, "pattern", None) is not None:
                    self.patterns[name] = re.compile(bound.pattern)


_PLANS: dict[type[BaseModel], _Plan] = {}


def trusted(cls: type[M], values: dict[str, Any]) -> M:
    """``cls(**values)`` for values recompprof made itself, of the declared types: no validation but the
    declared bounds (past one, pydantic validates and raises as it did)."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _Plan(cls)
    for name, limit in plan.max_lengths.items():
        value = values.get(name)
        if value is not None and len(value) > limit:
            return cls(**values)
    for name, pattern in plan.patterns.items():
        value = values.get(name)
        if value is not None and not pattern.fullmatch(value):
            return cls(**values)
    if not plan.required <= values.keys():  # a required field not given: pydantic says which
        return cls(**values)
    fields = {**plan.defaults, **values}  # the declared order; a name no field has is ignored
    if len(fields) != len(plan.defaults):
        fields = {name: fields[name] for name in plan.defaults}
    for name, default in plan.mutable.items():
        if name not in values:
            fields[name] = default.copy()
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", fields)
    object.__setattr__(model, "__pydantic_fields_set__", set(values))
    object.__setattr__(model, "__pydantic_extra__", None)
    object.__setattr__(model, "__pydantic_private__", None)
    if _internal.raising():
        _check(cls, values, model)
    return model


def _check(cls: type[BaseModel], values: dict[str, Any], model: BaseModel) -> None:
    """Strict mode: the trusted build must serialise as pydantic's own would."""
    validated = cls(**values)
    built, expected = model.model_dump_json(), validated.model_dump_json()
    if built != expected:
        raise AssertionError(
            f"trusted {cls.__name__} differs from the validated one:\n{built}\n{expected}"
        )


def copied(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=update)`` for fields of ``model`` set to values recompprof made itself: the
    same shallow copy (pydantic validates no update either), without its copy machinery, which costs tens
    of microseconds cold inside a compile. In strict mode (the tests) it is compared with pydantic's."""
    cls = type(model)
    new = cls.__new__(cls)
    object.__setattr__(new, "__dict__", {**model.__dict__, **update})
    object.__setattr__(
        new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys()
    )
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    if _internal.raising():
        expected = model.model_copy(update=update)
        if (
            new.model_dump_json() != expected.model_dump_json()
            or new.model_fields_set != expected.model_fields_set
            or model.__pydantic_extra__ is not None
            or model.__pydantic_private__ is not None
            or not update.keys() <= cls.model_fields.keys()
        ):
            raise AssertionError(f"copied {cls.__name__} differs from model_copy's")
    return new
