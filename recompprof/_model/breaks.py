"""Graph-break texts, as torch writes them to its ``dynamo_graph_break_reason`` artifact.

Live capture and ``ingest`` read the same artifact (live from torch's structured-trace call, ingest
from a TORCH_TRACE file), so both parse it here. Torch writes three shapes:

- ``Graph break in user code at FILE:LINE`` / ``Graph Break Reason: <prefix>:`` then torch's message:
  the graph-break type on its first line, ``Explanation:`` and ``Hint:`` lines, a debug context;
- ``Graph break: torch.compile cannot properly resume from this graph break, which results in a
  skip.`` (the whole frame runs eagerly), the user stack, then the exception with torch's message;
- anything else (older torch, verbose errors): its first line is the reason.

Like reason parsing, this is pure string work that never raises into the job: a failure is a bug of
ours and goes through the internal-error policy (counted, logged once, re-raised in strict mode).
"""

from __future__ import annotations

import dataclasses
import re

from recompprof._internal import contain
from recompprof._model.events import MAX_TEXT
from recompprof._model.texts import clean_text, graph_break_text

# "Graph Break Reason:" from 2.7; plain "Reason:" (torch's exception text, no type line) before.
_HEADER = re.compile(
    r"Graph break in user code at ([^\n]{1,1000})\n(?:Graph Break )?Reason: ", re.S
)
_SKIP = "Graph break: torch.compile cannot properly resume"
_FILE_LINE = re.compile(r'File "([^"\n]{1,1000})", line (\d{1,9})')
_EXCEPTION = re.compile(r"^torch\._dynamo\.exc\.\w+: (.+)$", re.M)
_MAX_INPUT = 256 * 1024
_MAX_HINTS = 8


@dataclasses.dataclass(frozen=True)
class BreakText:
    reason: str  # torch's graph-break type (its message's first line)
    user_location: str | None = None  # file:line of the user code that broke the graph
    explanation: str | None = None
    hints: tuple[str, ...] = ()
    skipped_frame: bool = False  # torch could not resume and ran the whole frame eagerly


def parse_graph_break(payload: object, redact: bool = False) -> BreakText:
    """One ``dynamo_graph_break_reason`` payload as a reason, location, explanation and hints."""
    text = clean_text(payload, _MAX_INPUT)
    parsed = None
    with contain(
        "breaks.parse",
        "a graph-break text could not be parsed; its first line is kept as the reason",
    ):
        parsed = _parse(text)
    if (
        parsed is None
    ):  # a bug of ours (torch's wording only changes which shape matches): keep the first line
        parsed = BreakText(reason=_first_line(text))
    if (
        redact
    ):  # keep torch's own words (type) and the location; explanations and hints quote user values
        return BreakText(
            reason=graph_break_text(parsed.reason, True),
            user_location=parsed.user_location,
            skipped_frame=parsed.skipped_frame,
        )
    return parsed


def _parse(text: str) -> BreakText:
    traceback_at = text.find("\nTraceback (most recent call last):")
    head = text if traceback_at < 0 else text[:traceback_at]
    if header := _HEADER.match(head):
        body = head[header.end() :]
        paragraphs = body.split("\n\n", 1)
        skipped = False
        if (
            len(paragraphs) == 2
            and paragraphs[0].rstrip().endswith(":")
            and "\n" not in paragraphs[0].strip()
        ):
            # "Encountered graph break when attempting to trace ...:" adds nothing; "Failed to handle graph
            # break gracefully. Skipping the function ...:" says the whole frame ran eagerly.
            skipped = "Skipping the function" in paragraphs[0]
            body = paragraphs[1]
        body = re.split(
            r"\n(?:Stack variable source attribution:|User code traceback:)", body, maxsplit=1
        )[0]
        return dataclasses.replace(
            _message(body, clean_text(header.group(1), 1000)), skipped_frame=skipped
        )
    if head.startswith(_SKIP):
        frames = _FILE_LINE.findall(head)
        where = f"{frames[-1][0]}:{frames[-1][1]}" if frames else None
        exceptions = _EXCEPTION.findall(text[traceback_at:]) if traceback_at >= 0 else []
        if not exceptions:
            return BreakText(
                reason="torch.compile cannot resume from this graph break",
                user_location=where,
                skipped_frame=True,
            )
        message = text[traceback_at:].split(f": {exceptions[-1]}", 1)[
            1
        ]  # the exception's message, after its type line
        return dataclasses.replace(_message(exceptions[-1] + message, where), skipped_frame=True)
    frames = _FILE_LINE.findall(head)
    return BreakText(
        reason=_first_line(head),
        user_location=f"{frames[-1][0]}:{frames[-1][1]}" if frames else None,
    )


def _message(body: str, where: str | None) -> BreakText:
    """torch's graph-break message: type line, ``Explanation:`` (indented continuation) and ``Hint:`` lines."""
    lines = body.strip("\n").splitlines()
    reason = lines[0].strip() if lines else ""
    explanation: list[str] = []
    hints: list[str] = []
    current: list[str] | None = None
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("Explanation:"):
            explanation = [stripped[len("Explanation:") :].strip()]
            current = explanation
        elif stripped.startswith("Hint:"):
            hints.append(stripped[len("Hint:") :].strip())
            current = None
        elif not stripped or stripped.startswith(("Developer debug context:", "For more details")):
            current = None
        elif current is not None and line.startswith("    "):
            current.append(stripped)
    return BreakText(
        reason=clean_text(reason or "graph break", MAX_TEXT),
        user_location=where,
        explanation=clean_text(" ".join(explanation), MAX_TEXT) if explanation else None,
        hints=tuple(clean_text(h, 1000) for h in hints[:_MAX_HINTS]),
    )


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return clean_text(line.strip(), MAX_TEXT)
    return "graph break"
