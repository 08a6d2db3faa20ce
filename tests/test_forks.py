"""recompprof._capture.forks: an object tells the process that made it from a child forked off it (real os.fork)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from recompprof._capture import forks

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _in_child(check: Callable[[], bool]) -> int:
    """Run ``check()`` in a real forked child; returns the child's exit status (0: check returned True)."""
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only, never return into pytest
        try:
            os._exit(0 if check() else 1)
        except BaseException:  # noqa: BLE001 - whatever happens, the forked child must not return into pytest
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_owner_is_not_forked_in_its_own_process() -> None:
    """An Owner made here reports forked() False here, and forked_from() is False for this pid."""
    owner = forks.Owner()
    assert owner.pid == os.getpid()
    assert not owner.forked()
    assert not forks.forked_from(os.getpid())


def test_owner_is_forked_in_a_child_until_the_child_claims_it() -> None:
    """In a forked child the parent's Owner reports forked(); after claim() the child owns it."""
    owner = forks.Owner()
    parent = os.getpid()

    def child_sees_fork_then_claims() -> bool:
        seen = owner.forked() and forks.forked_from(parent)
        owner.claim()
        return seen and not owner.forked() and owner.pid == os.getpid() != parent

    assert _in_child(child_sees_fork_then_claims) == 0
    assert (
        not owner.forked() and owner.pid == parent
    )  # the child's claim did not touch the parent's object


def test_exporters_use_the_helper_for_fork_checks() -> None:
    """No exporter compares os.getpid() itself any more: each fork check goes through recompprof._capture.forks."""
    exporters = Path(__file__).resolve().parents[1] / "exporters"
    offenders = [
        str(p) for p in exporters.rglob("*.py") if "os.getpid()" in p.read_text(encoding="utf-8")
    ]
    assert offenders == []
