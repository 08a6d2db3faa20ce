"""Detach: the frames profile mode compiled go back to the job with their full recompile budget.

Where nothing can be running them, ``reset_code`` (what ``torch._dynamo.reset_code_caches`` does):
the job's backend starts them afresh, counters included. Otherwise the observer's live entries are
invalidated (safe at any time) so they stop using up the job's limit (docs/profile-mode.md, "Detach").
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from recompprof._internal import contain
from recompprof._torch.profile.cache import RETIRED_MARK, invalidate, is_dead, region_entries
from recompprof._torch.profile.parking import ParkedEntries


def retire_frames(
    codes: list[CodeType], parked: ParkedEntries, observed: Callable[[Any], bool]
) -> None:
    """Hand ``codes`` back to the job; ``observed(entry)`` says whether profile mode's observer compiled an entry."""
    import torch._C._dynamo.eval_frame as c_eval_frame
    from torch._dynamo import convert_frame

    with convert_frame.compile_lock:
        # Parked entries first: their guard managers point at dead nodes that reset_code frees.
        parked.release_all()
        busy = _codes_on_stacks() if codes else set()
        compiling = _compiling_now()
        for code in codes:
            with contain("profile.retire"):
                if not compiling and not (busy & _codes_of(code)):
                    c_eval_frame.reset_code(code)
                    continue
                for entry in region_entries(code):
                    if not is_dead(entry) and observed(entry):
                        invalidate(entry, f"Cache line {RETIRED_MARK}")


def _codes_of(code: CodeType) -> set[int]:
    ids = {id(code)}
    for entry in region_entries(code):
        if entry.code is not None:
            ids.add(id(entry.code))
    return ids


def _codes_on_stacks() -> set[int]:
    ids: set[int] = set()
    for top in sys._current_frames().values():
        frame: FrameType | None = top
        while frame is not None:
            ids.add(id(frame.f_code))
            frame = frame.f_back
    return ids


def _compiling_now() -> bool:
    try:
        from torch._guards import CompileContext

        return CompileContext.current_compile_id() is not None
    except Exception:  # noqa: BLE001 - unknown means "assume yes": take the always-safe path
        return True
