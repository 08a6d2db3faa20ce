"""docs/events.md documents every field of every event kind, read from the event models themselves."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from recompprof._model.events import Event

DOC = Path(__file__).resolve().parents[1] / "docs" / "events.md"


def _event_models() -> list[type[BaseModel]]:
    union = typing.get_args(Event)[0]  # Annotated[A | B | ..., discriminator]
    models = list(typing.get_args(union))
    assert models and all(issubclass(model, BaseModel) for model in models)
    return models


def _nested_models(model: type[BaseModel]) -> set[type[BaseModel]]:
    """Models a field of ``model`` holds (``Frame``, ``Reason``), also inside ``X | None`` and ``list[X]``."""
    found: set[type[BaseModel]] = set()
    pending = [field.annotation for field in model.model_fields.values()]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.add(annotation)
        pending.extend(typing.get_args(annotation))
    return found


def _sections() -> dict[str, set[str]]:
    """Each ``## heading`` of the page (``""`` for the text above the first) -> the words in its code spans."""
    sections: dict[str, set[str]] = {}
    heading = ""
    for part in re.split(r"^## (.*)$", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE):
        if part.startswith("`") and part.endswith("`") or part == "Reason categories":
            heading = part.strip("`")
            continue
        words = {
            word for span in re.findall(r"`([^`]+)`", part) for word in re.findall(r"\w+", span)
        }
        sections[heading] = sections.get(heading, set()) | words
    return sections


def _kind(model: type[BaseModel]) -> str:
    default = model.model_fields["kind"].default
    assert isinstance(default, str)
    return default


def test_every_event_field_is_documented_under_its_kind() -> None:
    """Each field of each event kind is named in that kind's section of docs/events.md; the fields every
    event has (``schema_version``, ``kind``, ``time``, ``rank``, ``step``) in the page's opening."""
    sections = _sections()
    models = _event_models()
    common = set.intersection(*(set(model.model_fields) for model in models))
    assert {"kind", "time", "rank", "step", "schema_version"} <= common
    missing = sorted(f"(all kinds).{name}" for name in common - sections[""])
    for model in models:
        kind = _kind(model)
        assert kind in sections, f"docs/events.md has no section for `{kind}`"
        missing += sorted(
            f"{kind}.{name}" for name in set(model.model_fields) - common - sections[kind]
        )
    assert not missing, f"event fields docs/events.md does not document: {missing}"


def test_every_field_of_a_nested_model_is_documented_where_it_appears() -> None:
    """The fields of ``Frame`` and ``Reason`` are listed in the section of a kind that carries them."""
    sections = _sections()
    nested: dict[type[BaseModel], list[str]] = {}
    for model in _event_models():
        for inner in _nested_models(model):
            nested.setdefault(inner, []).append(_kind(model))
    assert {model.__name__ for model in nested} >= {"Frame", "Reason"}
    for inner, kinds in nested.items():
        undocumented = [
            name for name in inner.model_fields if not any(name in sections[kind] for kind in kinds)
        ]
        assert not undocumented, (
            f"{inner.__name__} fields not in docs/events.md ({', '.join(kinds)}): {undocumented}"
        )
