"""The code object torch is compiling now, read from torch's own ``_compile`` frame.

The frame workloads use it as ground truth: a compile start callback finds the frame of
``torch/_dynamo/convert_frame.py``'s ``_compile`` below it, whose locals hold the code object (and
closure, and the frame's locals) that Dynamo is converting — what torch names, whatever recompprof says.
"""

from __future__ import annotations

import sys
import types


def compile_frame() -> types.FrameType | None:
    """Torch's ``_compile`` frame under the caller (a compile start callback), or None if not found."""
    frame = sys._getframe(2)
    while frame is not None and not (
        frame.f_code.co_name == "_compile" and "convert_frame" in frame.f_code.co_filename
    ):
        frame = frame.f_back
    return frame
