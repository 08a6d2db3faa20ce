"""Name the user's function for a compile, seeing through torch's own wrapper frames.

``torch.compile(module)`` compiles ``torch._dynamo.external_utils.inner``, a wrapper whose closure
holds the module; every compiled module shares that one code object. While the compile is running
(our metrics callback is called inside it) the wrapper's closure is reachable from the ``_compile``
frame on the stack, and we name the module's ``forward`` instead.
"""

from __future__ import annotations

import sys
from typing import Any

_WRAPPER_FILES = ("_dynamo/external_utils.py", "_dynamo\\external_utils.py")
_MAX_DEPTH = 60


def is_torch_wrapper(filename: str) -> bool:
    return filename.endswith(_WRAPPER_FILES)


def resolve_wrapped(name: str, filename: str, line: int) -> tuple[str, str, int]:
    """The user function behind a torch wrapper frame, or the frame itself if it cannot be found."""
    if not is_torch_wrapper(filename):
        return name, filename, line
    target = _wrapped_callable(name, filename, line)
    if target is None:
        return name, filename, line
    if hasattr(target, "forward") and not hasattr(target, "__code__"):  # an nn.Module
        forward = getattr(type(target), "forward", None)
        code = getattr(forward, "__code__", None)
        if code is not None:
            return f"{type(target).__name__}.forward", code.co_filename, code.co_firstlineno
    code = getattr(target, "__code__", None)
    if code is not None:
        return getattr(target, "__qualname__", code.co_name), code.co_filename, code.co_firstlineno
    return name, filename, line


def _wrapped_callable(name: str, filename: str, line: int) -> Any:
    frame = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return None
        if frame.f_code.co_name == "_compile" and "convert_frame" in frame.f_code.co_filename:
            code, closure = frame.f_locals.get("code"), frame.f_locals.get("closure")
            if code is None or closure is None or (code.co_name, code.co_firstlineno) != (name, line):
                return None
            names = code.co_freevars
            if "fn" in names and len(closure) == len(names):
                try:
                    return closure[names.index("fn")].cell_contents
                except ValueError:  # empty cell
                    return None
            return None
        frame = frame.f_back
    return None
