"""Splitting an event log's bytes into lines, a block at a time: the one splitter of the file reader and the
run tail, so a log read whole and a log followed while it grows give the same lines.

Splitting a megabyte at a time costs a fraction of reading line by line. No real event comes near
:data:`MAX_LINE`; a longer line comes as :data:`OVERSIZED` and is never held whole in memory.
"""

from __future__ import annotations

BLOCK = 1 << 20  # bytes read at a time
MAX_LINE = 16 * 1024 * 1024
# stands in for a line of MAX_LINE bytes or more: not JSON, so its line is corrupt
OVERSIZED = b"\x00"


class LineSplitter:
    """The lines of a byte stream fed a block at a time, without their newlines.

    :meth:`feed` returns the lines a block completes; the start of a line not yet ended is held (no
    more than ``MAX_LINE`` bytes of it) until a later block ends it, or until :meth:`end`.
    """

    __slots__ = ("_head", "_held")

    def __init__(self) -> None:
        self._head: list[
            bytes
        ] = []  # the start of a line that earlier blocks cut off (dropped once oversized)
        self._held = 0  # its length

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes, an oversized one as :data:`OVERSIZED`."""
        lines = chunk.split(b"\n")
        if len(lines) == 1:  # no line ends in this block
            self._hold(chunk)
            return []
        if self._held:
            held = self._held + len(lines[0])
            lines[0] = OVERSIZED if held >= MAX_LINE else b"".join(self._head) + lines[0]
            self._head.clear()
        tail = lines.pop()  # the start of the next line (empty when the block ends with a newline)
        if max(map(len, lines)) >= MAX_LINE:
            lines = [OVERSIZED if len(line) >= MAX_LINE else line for line in lines]
        self._held = 0
        self._hold(tail)
        return lines

    def end(self) -> tuple[bytes, bool] | None:
        """The last line, which never got its newline, and whether it is torn (an oversized one is corrupt
        instead); None when nothing is held. The splitter starts afresh."""
        if not self._held:
            return None
        oversized = self._held >= MAX_LINE
        last = OVERSIZED if oversized else b"".join(self._head)
        self.reset()
        return last, not oversized

    def reset(self) -> None:
        """Forget the line held (the stream starts again)."""
        self._head.clear()
        self._held = 0

    def _hold(self, part: bytes) -> None:
        self._held += len(part)
        if self._held >= MAX_LINE:
            self._head.clear()
        elif part:
            self._head.append(part)
