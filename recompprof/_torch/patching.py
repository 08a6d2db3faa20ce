"""Swap a torch module attribute for a wrapper and get back the undo that restores it only if still ours."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def replace(owner: Any, name: str, new: Any) -> Callable[[], None]:
    """Set ``owner.name = new``; the returned undo puts the original back unless someone replaced ``new`` since."""
    original = getattr(owner, name)
    setattr(owner, name, new)

    def undo() -> None:
        if getattr(owner, name) is new:
            setattr(owner, name, original)

    return undo
