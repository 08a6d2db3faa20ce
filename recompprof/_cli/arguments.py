"""Argument types the subcommands share: what a value given on the command line must be.

A path or lake given empty is refused, not read as the current folder (``Path("")`` is ``.``). On a
command line an empty value is an unset shell variable far more often than a choice: ``recompprof
check "$RUN_DIR"`` or ``history compare RUN --lake "$LAKE"`` in a CI step whose variable is not set
would otherwise answer about whatever the step's folder holds, often nothing, and a gate that finds
nothing passes. (A setting read from the environment is different: an empty variable there means its
default, see :mod:`recompprof._capture.settings`.)
"""

from __future__ import annotations

import argparse
from pathlib import Path


def path(text: str) -> Path:
    """A file or folder argument."""
    if not text:
        raise argparse.ArgumentTypeError(
            "empty (an unset variable?); give a path ('.' is this folder)"
        )
    return Path(text)


def uri(text: str) -> str:
    """A lake's root: a path or an object store URI."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "empty (an unset variable?); give the lake's root: a path or s3://..."
        )
    return text
