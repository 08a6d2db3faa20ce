"""All guard-failure reasons of each recompile, read from torch's ``guard_failures`` record.

Dynamo appends one reason string per failing cache entry to ``guard_failures[code]`` on every
recompile (before the limit check, so limit hits are covered too). We only remember how far we have
read each list and take the new tail: we never copy torch's O(N^2) lists.
"""

from __future__ import annotations

import weakref
from types import CodeType

from recompprof._torch.versions import torch_info


class GuardFailureReader:
    """Hands out the reasons appended since the last read, per code object."""

    def __init__(self) -> None:
        self._read: weakref.WeakKeyDictionary[CodeType, int] = weakref.WeakKeyDictionary()
        self.live = False
        self.why_off = ""

    def install(self) -> None:
        info = torch_info()
        if not info.has("guard_failures"):
            self.why_off = info.why_off("guard_failures")
            return
        try:
            from torch._dynamo.utils import guard_failures  # noqa: F401
        except ImportError as exc:
            self.why_off = f"torch._dynamo.utils.guard_failures missing ({exc})"
            return
        self.live = True
        self.skip_existing()

    def uninstall(self) -> None:
        self.live = False

    def skip_existing(self) -> None:
        """Treat everything torch recorded before now as already read."""
        from torch._dynamo.utils import guard_failures

        for code, reasons in list(guard_failures.items()):
            self._read[code] = len(reasons)

    def take(self, name: str, filename: str, firstlineno: int) -> tuple[CodeType | None, list[str]]:
        """New reasons of the code object named by ``name``, ``filename``, ``firstlineno``."""
        if not self.live:
            return None, []
        from torch._dynamo.utils import guard_failures

        for code, reasons in list(guard_failures.items()):
            if code.co_name == name and code.co_firstlineno == firstlineno and code.co_filename == filename:
                start = self._read.get(code, 0)
                if start > len(reasons):  # torch._dynamo.reset() cleared it
                    start = 0
                self._read[code] = len(reasons)
                return code, list(reasons[start:])
        return None, []
