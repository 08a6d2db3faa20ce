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

from recompprof._model.compile_id import CompileId
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
    # digest as normalising and hashing part by part, which is kept for the rare part holding a NUL (the
    # split then gives more pieces than parts; no match spans a NUL).
    texts = list(map(str, parts))
    normalised = _NUMBERED_GLOBAL.sub("___", "\0".join(texts)).split("\0")
    if len(normalised) != len(texts):
        normalised = [_NUMBERED_GLOBAL.sub("___", t) for t in texts]
    normalised.sort()
    normalised.append("")  # each part NUL-terminated, the last one too
    return hashlib.blake2b(
        "\0".join(normalised).encode("utf-8", "replace"), digest_size=8
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


# What the reader holds of reasons read off a list for another frame than the one asking: frames, and
# reasons per frame (a frame's reasons are held only from their append to its own compile's record).
MAX_HELD_FRAMES = 64
MAX_HELD_REASONS = 4096
# A reason's own prefix: the compile id of the cache entry that failed ("3/1: ..."), whose frame id is
# the code object's (torch numbers frames per code object, by identity).
_ENTRY_FRAME = re.compile(r"^!?(?:\d+/)?(\d+)/\d+(?:_\d+)?: ")


class _Cursor:
    """How far one of torch's lists was read, held for the code object it is keyed by (by identity, and
    weakly: a code object freed takes its cursor with it, so an ``id`` reused by a new one starts afresh)."""

    __slots__ = ("read", "ref")

    def __init__(self, ref: weakref.ref[CodeType]) -> None:
        self.ref, self.read = ref, 0


class GuardFailureReader:
    """Hands out the reasons appended since the last read, per code object.

    torch keys ``guard_failures`` by code object, and CPython's code equality ignores the file name: the
    same function in two files (same bytecode, name and first line) shares one list, torch's, under
    whichever code object failed first. So lists are read by their key's identity, and each reason goes to
    the frame its own compile-id prefix names (the failing entry's ``3/1``: the frame id torch gives each
    code object); a compile takes its own frame's reasons, those of the other frame are held for its
    compile (bounded). Without a compile id, a list's new reasons go to the code whose file keys it.
    """

    def __init__(self) -> None:
        self._cursors: dict[int, _Cursor] = {}
        self._held: dict[int, list[str]] = {}  # by frame id: read off a list for another frame
        # torch._dynamo.utils, imported at install: an import statement costs microseconds at every read
        self._utils: Any = None
        self.live = False
        self.reason_off = ""

    def install(self) -> None:
        info = torch_info()
        if not info.has("guard_failures"):
            self.reason_off = info.why_off("guard_failures")
            return
        try:
            import torch._dynamo.utils as utils
            from torch._dynamo.utils import guard_failures  # noqa: F401
        except ImportError as exc:
            self.reason_off = f"torch._dynamo.utils.guard_failures missing ({exc})"
            return
        self._utils = utils
        self.live = True
        self.skip_existing()

    def uninstall(self) -> None:
        self.live = False

    def skip_existing(self) -> None:
        """Treat everything torch recorded before now as already read."""
        from torch._dynamo.utils import guard_failures

        for code, reasons in list(guard_failures.items()):
            self._cursor(code).read = len(reasons)

    def _cursor(self, code: CodeType) -> _Cursor:
        """The cursor of the list ``code`` keys (this very object, not an equal one)."""
        key = id(code)
        cursor = self._cursors.get(key)
        if cursor is None or cursor.ref() is not code:
            cursors = self._cursors

            def forget(ref: weakref.ref[CodeType]) -> None:
                # the code object is freed: its id may be reused, never its cursor (only this one goes)
                if (held := cursors.get(key)) is not None and held.ref is ref:
                    del cursors[key]

            cursor = cursors[key] = _Cursor(weakref.ref(code, forget))
        return cursor

    def peek(self, code: CodeType, compile_id: str | None = None) -> list[str]:
        """New reasons of ``code`` since the last :meth:`take`, left unread (a compile start reads them
        before its compile's record takes them); of its frame alone where ``compile_id`` names it."""
        if not self.live:
            return []
        guard_failures = self._utils.guard_failures
        frame_id = _frame_id(compile_id)
        found = [(key, reasons) for key, reasons in list(guard_failures.items()) if key == code]
        if frame_id is None:
            return [t for key, reasons in found for t in self._tail(key, reasons)]
        texts = list(self._held.get(frame_id, ()))
        for key, reasons in found:
            texts += [t for t in self._tail(key, reasons) if _entry_frame(t) == frame_id]
        return texts

    def take(
        self, name: str, filename: str, firstlineno: int, compile_id: str | None = None
    ) -> tuple[CodeType | None, list[str]]:
        """New reasons of the code object named by ``name``, ``filename``, ``firstlineno``: those of its
        frame where ``compile_id`` (its compile's) names one, whichever equal code object keys them."""
        if not self.live:
            return None, []
        guard_failures = self._utils.guard_failures
        frame_id = _frame_id(compile_id)
        own: CodeType | None = None
        texts: list[str] = []
        for code, reasons in list(guard_failures.items()):
            if code.co_name != name or code.co_firstlineno != firstlineno:
                continue
            mine = code.co_filename == filename
            if frame_id is None and not mine:
                continue
            own = code if mine else own
            new = self._tail(code, reasons)
            self._cursor(code).read = len(reasons)
            if frame_id is None:
                return code, new
            for text in new:
                entry = _entry_frame(text)
                if entry == frame_id or (entry is None and mine):
                    texts.append(text)
                elif entry is not None:
                    self._hold(entry, text)
        if frame_id is None:
            return None, []
        return own, self._held.pop(frame_id, []) + texts

    def reset(self) -> None:
        """torch._dynamo.reset() ran: its lists are cleared and its frames numbered afresh."""
        self._cursors.clear()
        self._held.clear()

    def _tail(self, code: CodeType, reasons: list[str]) -> list[str]:
        """The reasons of torch's list keyed by ``code`` past its cursor (all, if torch cleared it since)."""
        start = self._cursor(code).read
        if start > len(reasons):  # torch._dynamo.reset() cleared it (and renumbers frames)
            start = 0
            self._held.clear()
        return list(reasons[start:])

    def _hold(self, frame_id: int, text: str) -> None:
        held = self._held.setdefault(frame_id, [])
        if len(held) < MAX_HELD_REASONS:
            held.append(text)
        if len(self._held) > MAX_HELD_FRAMES:
            del self._held[next(iter(self._held))]


# compile id -> its frame id: a compile's start reads its reasons by it, then its record takes them by it
# (bounded: cleared when full).
_FRAME_IDS: dict[str | None, int | None] = {}
_MAX_FRAME_IDS = 256


def _frame_id(compile_id: str | None) -> int | None:
    if compile_id in _FRAME_IDS:
        return _FRAME_IDS[compile_id]
    parsed = CompileId.parse(compile_id)
    frame_id = parsed.frame_id if parsed is not None else None
    if len(_FRAME_IDS) >= _MAX_FRAME_IDS:
        _FRAME_IDS.clear()
    _FRAME_IDS[compile_id] = frame_id
    return frame_id


def _entry_frame(text: str) -> int | None:
    """The frame id of the cache entry a reason text is of (its ``3/1: `` prefix), None if it names none."""
    match = _ENTRY_FRAME.match(text)
    return int(match.group(1)) if match else None
