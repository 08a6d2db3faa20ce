"""A job whose TORCH_TRACE must read the same with recompprof attached as without it.

Besides compiles (a graph break torch resumes after, one it cannot resume from, a size recompile made
dynamic, a lazily compiled backward), user and framework code call ``torch._logging.trace_structured``
outside any compile, which makes torch record the caller's stack (interning each file name as a
``str`` record) and stamp each record with its caller's file and line.

    TORCH_TRACE=<dir> python tests/workloads/trace_calls.py [--attach RUN_DIR]
"""

from __future__ import annotations

import sys

import torch
import torch._logging
import unresumable


def framework_log(tag: str) -> None:
    """Like a framework's own structured log call, made between compiles."""
    torch._logging.trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": f"framework_{tag}", "encoding": "string"},
        payload_fn=lambda: f"payload of {tag}",
    )


def broken(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    print("break")  # a graph break torch resumes after
    return x.sum()


def main() -> None:
    session = None
    if "--attach" in sys.argv:
        import recompprof

        session = recompprof.attach(run_dir=sys.argv[sys.argv.index("--attach") + 1])
    framework_log("before")
    torch._logging.trace_structured(
        "user_event", metadata_fn=lambda: {"n": 1}
    )  # a record of the user's own kind
    compiled = torch.compile(broken, backend="aot_eager")
    for size in (3, 4, 5):
        x = torch.ones(size, requires_grad=True)
        compiled(x).backward()
        framework_log(f"step{size}")
    unresumable.run()
    framework_log("after")
    if session is not None:
        session.detach()


if __name__ == "__main__":
    main()
