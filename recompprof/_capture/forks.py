"""Fork safety: telling the process that set something up from a child forked off it.

A child forked after ``attach()`` (DataLoader workers, ``multiprocessing`` with fork) inherits the
parent's objects but not its threads; sending, joining or flushing from the child would hang or repeat
the parent's data. Each object that owns threads, sockets or ids keeps an :class:`Owner` and does nothing
(or starts afresh) where ``forked()`` is true.
"""

from __future__ import annotations

import os


def forked_from(pid: int) -> bool:
    """True in any process other than ``pid`` (a child forked from it)."""
    return os.getpid() != pid


class Owner:
    """Remembers the process that created it; one ``os.getpid()`` call per check."""

    __slots__ = ("pid",)

    def __init__(self) -> None:
        self.pid = os.getpid()

    def forked(self) -> bool:
        """True in a child forked from the owning process."""
        return os.getpid() != self.pid

    def claim(self) -> None:
        """Make the calling process the owner (a child that starts its own state afresh)."""
        self.pid = os.getpid()
