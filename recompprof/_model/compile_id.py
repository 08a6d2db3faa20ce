"""Torch's compile id, parsed once: what every reader and writer of a compile id goes through.

Torch writes ``<frame id>/<frame compile id>`` ("3/1": the frame's second compile), prefixed
``!<compiled autograd id>`` for a compile under compiled autograd ("!0/3/1", or "!0" for the compiled
autograd graph itself), and suffixed ``_<attempt>`` when it restarted the analysis ("3/1_2"); this is
``torch._guards.CompileId`` and ``TraceId`` (their ``__str__`` and ``from_string``). Logs from before a
compile id was known say "?" or nothing: those parse to None.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

# How an event spells a compile's id where torch gave none (a backward compiled by ``aot_module_simplified``
# called directly, a record from before a compile id was known): one spelling on every event of it.
UNKNOWN = "?"


def spelled(value: object) -> str:
    """A compile id as events write it: torch's text, or :data:`UNKNOWN` where torch gave none (``None``, or
    the text ``"None"`` torch's callbacks pass for a compile without one)."""
    text = str(value) if value is not None else ""
    return text if text and text != "None" else UNKNOWN


_ATTEMPT = r"(?:_(?P<attempt>[0-9]+))?"
_PATTERNS = (  # torch's COMPILE_ID_PATTERN and CA_COMPILE_ID_PATTERN, with TraceId's attempt
    re.compile(r"(?P<frame_id>[0-9]+)/(?P<frame_compile_id>[0-9]+)" + _ATTEMPT),
    re.compile(
        r"!(?P<compiled_autograd_id>[0-9]+)(?:/(?P<frame_id>[0-9]+)/(?P<frame_compile_id>[0-9]+))?"
        + _ATTEMPT
    ),
)


@dataclasses.dataclass(frozen=True, slots=True)
class CompileId:
    """One compile id: the frame, its compile count, the attempt, and the compiled autograd graph, if any."""

    frame_id: int | None
    frame_compile_id: int | None
    attempt: int = 0  # torch restarted the analysis this many times
    compiled_autograd_id: int | None = None

    @classmethod
    def parse(cls, text: object) -> CompileId | None:
        """The compile id ``text`` writes in torch's grammar; None for anything else (None, "?", "3")."""
        if not isinstance(text, str):
            return None
        for pattern in _PATTERNS:
            if match := pattern.fullmatch(text):
                found = {
                    name: int(value)
                    for name, value in match.groupdict().items()
                    if value is not None
                }
                return cls(
                    frame_id=found.get("frame_id"),
                    frame_compile_id=found.get("frame_compile_id"),
                    attempt=found.get("attempt", 0),
                    compiled_autograd_id=found.get("compiled_autograd_id"),
                )
        return None

    @classmethod
    def of_record(cls, metadata: Mapping[str, Any]) -> CompileId | None:
        """The compile (whatever its attempt) a torch structured-log record's metadata names by its frame
        (``frame_id``, ``frame_compile_id``, and ``compiled_autograd_id`` under compiled autograd); None if none."""
        frame_id, frame_compile_id = metadata.get("frame_id"), metadata.get("frame_compile_id")
        if not isinstance(frame_id, int) or not isinstance(frame_compile_id, int):
            return None
        autograd = metadata.get("compiled_autograd_id")
        return cls(
            frame_id,
            frame_compile_id,
            compiled_autograd_id=autograd if isinstance(autograd, int) else None,
        )

    @property
    def is_later(self) -> bool:
        """Not its frame's first compile: a recompile of the frame (or a limit hit refusing one)."""
        return self.frame_compile_id is not None and self.frame_compile_id > 0

    def __str__(self) -> str:
        frame = f"{self.frame_id}/{self.frame_compile_id}" if self.frame_id is not None else ""
        if self.compiled_autograd_id is not None:
            frame = f"!{self.compiled_autograd_id}" + (f"/{frame}" if frame else "")
        return f"{frame}_{self.attempt}" if self.attempt else frame
