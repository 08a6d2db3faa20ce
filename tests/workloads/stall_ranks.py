"""Two ranks out of step: one rank recompiles, slowly, while the other waits for it in an all-reduce.

Run under ``torchrun --nproc_per_node=2`` (gloo, CPU), attached with ``recompprof.attach()`` (settings
from ``RECOMPPROF_*`` variables). Every rank compiles ``Model.forward`` for a batch of 4, the ranks
meet in one all-reduce, then rank ``--stall-rank`` alone calls the model with a batch of 6: its
recompile sleeps ``--compile-seconds`` in the backend, while every other rank goes straight into the
next all-reduce and waits there. With ``--pg-timeout`` (seconds, the process group's timeout) shorter
than the compile, the waiting ranks fail with torch's collective timeout and torchrun ends the job;
without it the recompile ends, the ranks meet, and each prints ``RANK <r> DONE`` and holds (metrics
endpoint up) until ``--release`` exists or ``--hold`` seconds pass.

``--ready-dir`` (an empty directory): before the process group starts, each rank waits there until
every rank has compiled once, so a short process-group timeout measures the stall, not the ranks'
start-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from ddp_diverge import hold  # the script directory is on sys.path

import recompprof


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1


def _wait_for_ranks(ready_dir: Path, rank: int, world: int) -> None:
    ready_dir.mkdir(parents=True, exist_ok=True)
    (ready_dir / f"rank{rank}").touch()
    while len(list(ready_dir.glob("rank*"))) < world:
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stall-rank", type=int, default=1)
    parser.add_argument(
        "--compile-seconds", type=float, default=20.0, help="how long the stalling recompile sleeps"
    )
    parser.add_argument(
        "--pg-timeout", type=float, default=None, help="process group timeout in seconds"
    )
    parser.add_argument("--ready-dir", type=Path, default=None)
    parser.add_argument(
        "--hold", type=float, default=0.0, help="most seconds to stay up after the stall"
    )
    parser.add_argument("--release", default=None, help="stop holding as soon as this file exists")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    compiles = 0

    def slow_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        nonlocal compiles
        compiles += 1
        if compiles > 1:
            time.sleep(args.compile_seconds)
        return gm.forward

    session = recompprof.attach()
    model = torch.compile(Model(), backend=slow_backend, dynamic=False)
    model(torch.ones(4))
    if args.ready_dir is not None:
        _wait_for_ranks(args.ready_dir, rank, world)
    timeout = {} if args.pg_timeout is None else {"timeout": timedelta(seconds=args.pg_timeout)}
    dist.init_process_group("gloo", **timeout)
    dist.all_reduce(torch.ones(1))  # every rank has compiled: from here on they should stay in step
    print(f"RANK {rank} IN STEP", flush=True)
    if rank == args.stall_rank:
        model(torch.ones(6))  # a batch of another size: this rank alone recompiles
    dist.all_reduce(torch.ones(1))  # the others wait here for the recompiling rank
    print(f"RANK {rank} DONE", flush=True)
    hold(args)
    session.detach()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's teardown, where gloo's C++ threads can abort a rank that has
    # written all it writes (see ddp_diverge.py, whose ranks did so once).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
