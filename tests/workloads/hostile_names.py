"""A job whose compiled function's name and source file hold terminal controls, and whose recompile is slow.

``python hostile_names.py SECONDS``: the function ``step`` is compiled from source under a file name holding
``EVIL`` and renamed ``EVIL`` (its code's name and qualified name too): an OSC title sequence ended by BEL, a
colour sequence, a carriage return, a C1 CSI and a right-to-left override. It is compiled for a batch of 4
(fast), then called with a batch of 6, whose recompile sleeps SECONDS in the backend; prints ``DONE`` after.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

import recompprof

EVIL = "step\x1b]0;pwned\x07\x1b[31m\rFORGED\x9b2J\u202eevil"
SOURCE = "def step(x):\n    return x * 2 + 1\n"


def main() -> None:
    # Imported here, run as a script (its folder on the path): the tests import this module only for EVIL.
    from slow_compile import slow_after_first

    namespace: dict[str, Any] = {}
    exec(
        compile(SOURCE, f"/tmp/{EVIL}.py", "exec"), namespace
    )  # a file name no real source would have
    step = namespace["step"]
    step.__code__ = step.__code__.replace(co_name=EVIL, co_qualname=EVIL)
    step.__name__ = step.__qualname__ = EVIL

    recompprof.attach()
    compiled = torch.compile(step, backend=slow_after_first(float(sys.argv[1])), dynamic=False)
    compiled(torch.ones(4))
    print("FIRST", flush=True)
    compiled(torch.ones(6))
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
