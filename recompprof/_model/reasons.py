"""Guard-failure reason strings: split, classify into the closed category vocabulary, bound, redact.

Torch reports one string per failing cache entry. Its shape changed over releases: no compile-id
prefix in 2.4 (several reasons joined by newlines), a ``"0/1: "`` prefix with ``"; "``-joined reasons
from 2.5, and a ``"User stack trace:"`` block appended from 2.11. Torch's wording is not an API, so
unknown text becomes the ``other`` category; a bug of ours is an internal error (``recompprof._internal``:
counted and logged in production, raised under tests) and the text still yields an ``other`` reason.

This module splits a string into single guards and assembles the ``Reason`` events; which category a
guard falls in is decided by the ordered rules of :mod:`recompprof._model.guard_rules`, and what a
guard's subject is (a module attribute, a global, an object) by :mod:`recompprof._model.subjects`.
TORCH_LOGS ``recompiles`` messages are split into per-entry strings by :func:`parse_recompiles_log`.
docs/categories.md has every rule.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from recompprof import _internal
from recompprof._model.events import MAX_SUBJECT, MAX_TEXT, Reason
from recompprof._model.guard_rules import classify as _classify
from recompprof._model.subjects import ENUM_KIND, MODULE_KIND, SOURCE, Kinds, owner, readable
from recompprof._model.texts import clean_text, graph_break_text

__all__ = [
    "ENUM_KIND",
    "MODULE_KIND",
    "Kinds",
    "clean_text",
    "graph_break_text",
    "parse_guard_failure",
    "parse_recompiles_log",
    "resolvable_subjects",
    "user_location",
]


_ID = r"!?\d+/\d+(?:/\d+)?(?:_\d+)?"
_PREFIX = re.compile(rf"\s*\[?({_ID})\]?:\s?")
_LOG_COPY = re.compile(r"^\s*-\s+(?=\[?!?\d+/\d+)")
_STACK = re.compile(r"\n[ \t]*(?:-[ \t]*)?User stack trace:")
_FILE_LINE = re.compile(r'File "([^"\n]{1,1000})", line (\d{1,9})')
_GUARD_START = re.compile(
    rf"(?:tensor '|Tensor device|___|GLOBAL_STATE|len\(|list\(|not |hasattr\(|Duplicate|Cache line|BACKEND_MATCH|\d|\(|[A-Z][a-z]*\(|{SOURCE}\s*(?:==|!=|is\b|<|>))"
)
_COMMENT = re.compile(r"(?<!\s)\s+#\s")  # the lookbehind keeps long blank runs linear
_COMMENT_GAP = re.compile(r"(?<!\s)\s{2,}#\s")
_OPERATOR = re.compile(r"\s(==|!=|is not|is|<=|>=|<|>)\s")
_LOG_PREFIX = re.compile(r"^[VIWEDC]\d{4} [\d:.]+ +\d+ \S+\] (?:\[[^\]\n]{0,100}\] ){0,4}")
_MAX_INPUT = 64 * 1024
_GUARD_HEADER = re.compile(r"guard \d+ failures:")
_NO_TEXT = (
    "(torch gave no text: every guard passed, so the cache entry was refused for its backend)"
)


def _redacted(category: str, subject: str, expr: str) -> str:
    """Only the category, the subject and the comparison: no literal values, no source text."""
    op = _OPERATOR.search(expr)
    if subject and op and category not in ("aliasing", "symbolic_shape"):
        return f"{subject} {op.group(1)} <redacted>"
    return f"{category} guard failed on {subject}" if subject else f"{category} guard failed"


def _shown(part: str) -> str:
    """One guard as shown: its expression with torch's access spellings as the user writes them
    (``subjects.readable``: a 182-character PEFT path is half as long, and both sides of an ``is`` fit
    the report's example), then torch's source comment as torch wrote it."""
    comment = _COMMENT.search(part)
    cut = comment.start() if comment else len(part)
    return _COMMENT_GAP.sub("  # ", readable(part[:cut]) + part[cut:])


def _split(body: str) -> list[str]:
    """Split one entry's body into single reasons (joined by newlines before 2.5, by '; ' after)."""
    parts: list[str] = []
    for line in body.split("\n", 256)[:256]:
        commented = False
        for piece in line.split("; ", 64)[:64]:
            # A '; ' inside a trailing source comment ("# a = 1; b = 2") does not start a new guard.
            if commented and not _GUARD_START.match(piece.lstrip()):
                parts[-1] += "; " + piece
            elif piece.strip():
                parts.append(piece.strip())
                commented = _COMMENT.search(piece) is not None
    return parts[:64]


# Categories the live objects can refine: what a guard's subject is, and what holds it.
_BY_OBJECT = frozenset(
    {
        "object_identity",
        "python_constant",
        "module_attribute",
        "global",
        "type",
        "other",
        "aliasing",
        "container_length",
        "dict_keys",
    }
)


def resolvable_subjects(reasons: list[Reason]) -> set[str]:
    """The subjects (and the objects holding them) whose live kinds would refine these reasons' categories."""
    out: set[str] = set()
    for reason in reasons:
        if reason.subject and reason.category in _BY_OBJECT:
            out.add(reason.subject)
            if (held_by := owner(reason.subject)) is not None:
                out.add(held_by)
    return out


def parse_guard_failure(
    text: str, *, redact: bool = False, kinds: Kinds | None = None
) -> list[Reason]:
    """One torch guard-failure string (any version's format) as one ``Reason`` per failing guard.

    ``kinds`` maps a subject in recompprof's form (``L['self'].training``, ``G['flag']``) to the type
    name of the object as resolved in the live process (``"bool"``, ``"function"``), with
    ``":enum"`` / ``":module"`` appended for an enum member / an nn.Module (``"Reduction:enum"``,
    ``"Linear:module"``); it decides between python_constant / global / module_attribute /
    object_identity / type where the text alone cannot, for a guarded object and for the object
    holding a guarded attribute (see :func:`resolvable_subjects`).
    """
    frozen = frozenset(kinds.items()) if kinds else frozenset()
    if isinstance(text, str) and len(text) <= _MAX_CACHED:
        return list(_parse_cached(text, redact, frozen))
    return list(_parse_safely(text, redact, frozen))


def parse_guard_failures(
    texts: Iterable[str], *, redact: bool = False, kinds: Kinds | None = None
) -> list[Reason]:
    """The reasons of every text in ``texts``, in order: :func:`parse_guard_failure` of each, joined. One call
    per compile: on the N-th recompile of a frame torch lists N texts, almost all of them parsed before."""
    frozen = frozenset(kinds.items()) if kinds else frozenset()
    out: list[Reason] = []
    for text in texts:
        if isinstance(text, str) and len(text) <= _MAX_CACHED:
            out += _parse_cached(text, redact, frozen)
        else:
            out += _parse_safely(text, redact, frozen)
    return out


# Torch repeats each old cache entry's reason text on every later recompile of the frame, so most
# parses are repeats; Reasons are frozen, so sharing them is safe.
_MAX_CACHED = 4096


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str, redact: bool, kinds: frozenset[tuple[str, str]]) -> tuple[Reason, ...]:
    return _parse_safely(text, redact, kinds)


def _internal_error(where: str, exc: Exception) -> None:
    """A bug of ours: counted and logged once (production), raised under tests; never raised into torch."""
    _internal.record(
        f"reasons.{where}", exc, "a guard-failure reason could not be parsed; it is kept as 'other'"
    )
    if _internal.raising():
        raise exc


def _parse_safely(text: str, redact: bool, kinds: frozenset[tuple[str, str]]) -> tuple[Reason, ...]:
    try:
        return tuple(_parse(text, redact, dict(kinds)))
    except Exception as exc:  # noqa: BLE001 - recorded; the contract is to never raise into torch
        _internal_error("parse", exc)
        return (Reason(text="<unparseable guard failure>", category="other"),)


def _parse(text: str, redact: bool, kinds: Kinds) -> list[Reason]:
    text = clean_text(text, _MAX_INPUT)
    stack = _STACK.search(text)
    body = text[: stack.start()] if stack else text
    body = _LOG_COPY.sub("", body)  # a reason copied from a TORCH_LOGS line
    m = _PREFIX.match(body)
    entry = m.group(1) if m else None
    reasons: list[Reason] = []
    for part in _split(body[m.end() :] if m else body):
        expr = _COMMENT.split(part, 1)[0].strip()
        for category, found in _classify(expr, kinds):
            subject = clean_text(found, MAX_SUBJECT)
            shown = _redacted(category, subject, expr) if redact else _shown(part)
            reasons.append(
                Reason(
                    text=clean_text(shown, MAX_TEXT),
                    category=category,
                    subject=subject,
                    entry=entry,
                )
            )
    if not reasons:  # every failing entry yields at least one reason
        # Torch found no failing guard: before 2.10 it then writes nothing ("" on 2.4, "0/0: " later) and the
        # entry was refused for its backend, the one check made outside the guards (2.10 names it BACKEND_MATCH).
        shown = "backend_mismatch guard failed" if redact else _NO_TEXT
        reasons.append(Reason(text=shown, category="backend_mismatch", entry=entry))
    return reasons


def user_location(text: str) -> str | None:
    """``file:line`` of the innermost frame in a reason's "User stack trace" block, if it has one."""
    try:
        stack = _STACK.search(text[:_MAX_INPUT])
        if stack is None:
            return None
        frames = _FILE_LINE.findall(text[stack.end() : _MAX_INPUT])
        return clean_text(f"{frames[-1][0]}:{frames[-1][1]}", MAX_TEXT) if frames else None
    except Exception as exc:  # noqa: BLE001 - recorded; the contract is to never raise into torch
        _internal_error("user_location", exc)
        return None


def _log_item(line: str) -> str:
    stripped = line.lstrip()
    return stripped[2:] if stripped.startswith("- ") else "" if stripped == "-" else stripped


def parse_recompiles_log(message: str) -> list[str]:
    """Split one TORCH_LOGS ``recompiles``/``recompiles_verbose`` message into per-entry failure strings."""
    try:
        lines = [_LOG_PREFIX.sub("", line) for line in str(message)[: 8 * _MAX_INPUT].splitlines()]
        start = next(
            (
                i + 1
                for i, line in enumerate(lines)
                if "triggered by the following guard failure" in line
            ),
            0,
        )
        lines = lines[start:]
        verbose = any(_GUARD_HEADER.fullmatch(line.strip()) for line in lines)
        entries = _verbose_entries(lines) if verbose else _listed_entries(lines)
        return ["\n".join(e) for e in entries if any(x.strip() for x in e)]
    except Exception as exc:  # noqa: BLE001 - recorded; the contract is to never raise into torch
        _internal_error("recompiles_log", exc)
        return []


def _verbose_entries(lines: list[str]) -> list[list[str]]:
    """``recompiles_verbose``: each entry starts at a "guard N failures:" header."""
    entries: list[list[str]] = []
    for line in lines:
        if _GUARD_HEADER.fullmatch(line.strip()):
            entries.append([])
        elif entries and line.strip():
            entries[-1].append(_log_item(line))
    return entries


def _listed_entries(lines: list[str]) -> list[list[str]]:
    """``recompiles``: the failures listed as "- " items. Before 2.5 every item is its own entry; later a
    new entry starts at a compile id and the items without one continue it."""
    with_ids = any(_PREFIX.match(_log_item(line)) for line in lines)
    entries: list[list[str]] = []
    for line in lines:
        item = _log_item(line)
        if not line.lstrip().startswith("-"):
            if entries and line.strip():
                entries[-1].append(item)
        elif not entries or not with_ids or _PREFIX.match(item):
            entries.append([item])
        else:
            entries[-1].append(item)
    return entries
