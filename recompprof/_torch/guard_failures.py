"""All guard-failure reasons of each recompile, read from torch's ``guard_failures`` record.

Dynamo appends one reason string per failing cache entry to ``guard_failures[code]`` on every
recompile (before the limit check, so limit hits are covered too). We only remember how far we have
read each list and take the new tail: we never copy torch's O(N^2) lists.
"""

from __future__ import annotations

import hashlib
import re
import weakref
from types import CodeType
from typing import Any

from recompprof._torch.versions import torch_info

_NUMBERED_GLOBAL = re.compile(r"___\d+\b")


def guard_set(guarded_code: Any) -> str | None:
    """A short fingerprint of the guards a compile installed (its ``GuardedCode``), or None if unknown."""
    guarded_code = getattr(
        guarded_code, "guarded_code", guarded_code
    )  # ConvertFrameReturn wraps it from 2.6
    parts = getattr(getattr(guarded_code, "guard_manager", None), "code_parts", None)
    if not parts:
        return None
    # Dynamo numbers the globals it installs per compile (G['__builtins_dict___4']): the same guard either way.
    # One regex pass and one hash update over the NUL-joined parts (it is on the compile path): the same
    # digest as normalising and hashing part by part, which is kept for the rare part holding a NUL.
    texts = [str(p) for p in parts]
    joined = "\0".join(texts)
    if joined.count("\0") == len(texts) - 1:
        normalised = sorted(_NUMBERED_GLOBAL.sub("___", joined).split("\0"))
    else:
        normalised = sorted(_NUMBERED_GLOBAL.sub("___", t) for t in texts)
    return hashlib.blake2b(
        ("\0".join(normalised) + "\0").encode("utf-8", "replace"), digest_size=8
    ).hexdigest()


def installed_guards(guarded_code: Any) -> list[str]:
    """The guards a compile installed, as torch prints them without their source comments: the guard
    tree's code parts and its shape-env guards (epilogue lambda guards, ``G['cfg'].ls == 0.2``). Read
    only when a rule asks (a recompile explained by a scalar's change); empty when torch has neither."""
    guarded_code = getattr(guarded_code, "guarded_code", guarded_code)
    manager = getattr(guarded_code, "guard_manager", None)
    texts = [str(p) for p in getattr(manager, "code_parts", None) or ()]
    epilogue = getattr(getattr(manager, "root", None), "get_epilogue_lambda_guards", None)
    for guard in epilogue() if epilogue is not None else ():
        texts += [str(part).split("#")[0].rstrip() for part in guard.verbose_code_parts()]
    return texts


class GuardFailureReader:
    """Hands out the reasons appended since the last read, per code object."""

    def __init__(self) -> None:
        self._read: weakref.WeakKeyDictionary[CodeType, int] = weakref.WeakKeyDictionary()
        self.live = False
        self.reason_off = ""

    def install(self) -> None:
        info = torch_info()
        if not info.has("guard_failures"):
            self.reason_off = info.why_off("guard_failures")
            return
        try:
            from torch._dynamo.utils import guard_failures  # noqa: F401
        except ImportError as exc:
            self.reason_off = f"torch._dynamo.utils.guard_failures missing ({exc})"
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

    def peek(self, code: CodeType) -> list[str]:
        """New reasons of ``code`` since the last :meth:`take`, left unread (a compile start reads them
        before its compile's record takes them)."""
        if not self.live:
            return []
        from torch._dynamo.utils import guard_failures

        reasons = list(guard_failures.get(code, ()))
        start = self._read.get(code, 0)
        return reasons[start:] if start <= len(reasons) else reasons

    def take(self, name: str, filename: str, firstlineno: int) -> tuple[CodeType | None, list[str]]:
        """New reasons of the code object named by ``name``, ``filename``, ``firstlineno``."""
        if not self.live:
            return None, []
        from torch._dynamo.utils import guard_failures

        for code, reasons in list(guard_failures.items()):
            if (
                code.co_name == name
                and code.co_firstlineno == firstlineno
                and code.co_filename == filename
            ):
                start = self._read.get(code, 0)
                if start > len(reasons):  # torch._dynamo.reset() cleared it
                    start = 0
                self._read[code] = len(reasons)
                return code, list(reasons[start:])
        return None, []
