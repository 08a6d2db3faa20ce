"""A real CPU training job under ``recompprof.attach()`` that a test can kill, starve of disk, or let finish.

Every step prints ``STEP <n>`` (flushed) once ``optimizer.step()`` has run. The first ``--recompile-steps``
steps change the batch size (forward and, with ``aot_eager``, backward recompiles), the forward has a
graph break, and ``--recompile-limit`` makes torch refuse recompiles past it (limit hits). Then it trains
without compiling. ``--wait-at S`` prints ``WAITING`` after step S and blocks until a line (or EOF)
arrives on stdin: the test kills it there, or reads its run while it is still running.

``--starve-after A --free-after B``: after step A the event log's file system is full (``--fill PATH``: a
file written in it until the disk is full, removed after step B) or, without ``--fill``, the process's
own ``RLIMIT_FSIZE`` is lowered to the log's size (raised again after step B). Events of the steps in
between cannot be written; the session goes on, and its ``session_end`` counts them.

    python tests/workloads/train_until_told.py --steps 40 --backend aot_eager --wait-at 39
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys

import torch

import recompprof


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        torch._dynamo.graph_break()
        return self.fc2(h)


def _fill(path: str) -> None:
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:  # the disk is full: what this is for
            pass


def _starve(fill: str | None, log: str) -> None:
    if fill:
        _fill(fill)
    else:
        signal.signal(
            signal.SIGXFSZ, signal.SIG_IGN
        )  # writes past the limit fail with EFBIG instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(log), resource.RLIM_INFINITY))


def _free(fill: str | None) -> None:
    if fill:
        os.remove(fill)
    else:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument(
        "--recompile-steps", type=int, default=8, help="steps whose batch size changes"
    )
    parser.add_argument(
        "--sizes", default=None, help="batch sizes those steps cycle through (default 2, 3, 4, ...)"
    )
    parser.add_argument("--recompile-limit", type=int, default=None)
    parser.add_argument("--wait-at", type=int, default=None, help="block on stdin after this step")
    parser.add_argument("--starve-after", type=int, default=None)
    parser.add_argument("--free-after", type=int, default=None)
    parser.add_argument("--fill", default=None, help="a file to fill the log's file system with")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else None

    torch.manual_seed(0)
    if args.recompile_limit is not None:
        torch._dynamo.config.recompile_limit = args.recompile_limit
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend=args.backend, dynamic=False)
    with recompprof.attach() as session:
        for step in range(args.steps):
            if step == args.starve_after:
                assert session.event_log_path is not None
                _starve(args.fill, str(session.event_log_path))
            if step == args.free_after:
                _free(args.fill)
            batch = (
                4
                if step >= args.recompile_steps
                else sizes[step % len(sizes)]
                if sizes
                else 2 + step
            )
            loss = compiled(torch.randn(batch, 16)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(f"STEP {step}", flush=True)
            if step == args.wait_at:
                print("WAITING", flush=True)
                sys.stdin.readline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
