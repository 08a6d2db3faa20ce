"""A compile's call site: which of the frames that called into the compiled code is the user's own line.

A call site lists the frames outside torch, the standard library and recompprof, innermost last. Some of
them are an installed library's (transformers' ``generate()`` calls the model from ``_prefill``): those sit
in a ``site-packages`` (or Debian's ``dist-packages``) folder. The user's line is the innermost frame
outside one: the line of *their* code that led to the compile. The library frames it went through stay,
shown below it.
"""

from __future__ import annotations

_LIBRARY_DIRS = ("site-packages", "dist-packages")


def is_library(path: str) -> bool:
    """Whether ``path`` (a file, or a ``file:line in function`` call-site line) is an installed package's."""
    parts = path.replace("\\", "/").split("/")
    return any(part in _LIBRARY_DIRS for part in parts)


def library_path(path: str) -> str:
    """An installed package's file from its ``site-packages`` folder on: what redaction keeps of it (the
    package's own layout, nothing of the machine's), still recognisable as a library's."""
    parts = path.replace("\\", "/").split("/")
    at = max(i for i, part in enumerate(parts) if part in _LIBRARY_DIRS)
    return "/".join(parts[at:])


def split(call_site: list[str]) -> tuple[str, list[str]]:
    """``(the user's line, the library frames below it, outermost first)`` of a call site (innermost last).

    Where every line is a library's, the innermost line stands for the user's, with none below it."""
    for at in range(len(call_site) - 1, -1, -1):
        if not is_library(call_site[at]):
            return call_site[at], call_site[at + 1 :]
    return call_site[-1], []
