"""A real DDP training job (gloo, CPU) under ``recompprof.attach()`` where one rank recompiles alone.

Every rank trains the same small model on batches of ``--batch`` rows; at ``--diverge-step`` the
rank ``--diverge-rank`` alone gets ``--diverge-batch`` rows, so only that rank recompiles the model's
frame (the pattern that stalls NCCL jobs in production). recompprof settings come from
``RECOMPPROF_*`` variables. Ranks come from torchrun (``torchrun --standalone --nproc_per_node=2``)
or, with ``--init tcp://host:port``, from ``SLURM_PROCID``/``SLURM_NTASKS`` set by hand.

Each rank prints ``RANK <r> TRAINING DONE`` and writes ``<summary-dir>/rank<r>.json`` (pid, event log,
metrics URL, identity, totals), then holds (endpoint up) until ``--release`` exists or ``--hold``
seconds pass.

    torchrun --standalone --nproc_per_node=2 tests/workloads/ddp_diverge.py --steps 6 --diverge-step 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import recompprof


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _init(method: str | None) -> None:
    if method is None:
        dist.init_process_group("gloo")  # torchrun's env:// variables
    else:
        dist.init_process_group(
            "gloo",
            init_method=method,
            rank=int(os.environ["SLURM_PROCID"]),
            world_size=int(os.environ["SLURM_NTASKS"]),
        )


def hold(args: argparse.Namespace) -> None:
    """Stay up ``--hold`` seconds at most, or until the ``--release`` file exists."""
    deadline = time.monotonic() + args.hold
    while time.monotonic() < deadline and not (args.release and Path(args.release).exists()):
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--diverge-step", type=int, default=3, help="loop step at which one rank sees a new shape"
    )
    parser.add_argument("--diverge-rank", type=int, default=1, help="-1: no rank diverges")
    parser.add_argument("--diverge-batch", type=int, default=12)
    parser.add_argument("--backend", default="eager", choices=("eager", "aot_eager"))
    parser.add_argument(
        "--init", default=None, help="tcp://host:port to rendezvous without torchrun"
    )
    parser.add_argument("--summary-dir", type=Path, default=None)
    parser.add_argument(
        "--hold", type=float, default=0.0, help="most seconds to stay up after training"
    )
    parser.add_argument("--release", default=None, help="stop holding as soon as this file exists")
    args = parser.parse_args()

    _init(args.init)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    compiled = torch.compile(model, backend=args.backend)
    with recompprof.attach() as session:
        for step in range(args.steps):
            rows = (
                args.diverge_batch
                if (rank == args.diverge_rank and step == args.diverge_step)
                else args.batch
            )
            loss = compiled(torch.randn(rows, 16)).pow(2).mean()
            loss.backward()  # gloo all-reduce of the gradients: every rank takes part every step
            opt.step()
            opt.zero_grad()
        snap = session.snapshot()
        exporter = next((e for e in session.exporters if e.name == "prometheus"), None)
        summary = {
            "rank": rank,
            "pid": os.getpid(),
            "event_log": str(session.event_log_path),
            "metrics_url": getattr(exporter, "url", None),
            "compiles": snap.compiles_total,
            "recompiles": snap.recompiles_total,
            "step": session.current_step,
            "identity": {
                k: getattr(session.identity, k)
                for k in (
                    "rank",
                    "local_rank",
                    "world_size",
                    "local_world_size",
                    "run_id",
                    "launcher",
                )
            },
        }
        if args.summary_dir is not None:
            args.summary_dir.mkdir(parents=True, exist_ok=True)
            tmp = args.summary_dir / f".rank{rank}.json"
            tmp.write_text(json.dumps(summary))
            tmp.replace(args.summary_dir / f"rank{rank}.json")  # readers never see half a file
        print(
            f"RANK {rank} TRAINING DONE compiles={snap.compiles_total} recompiles={snap.recompiles_total}",
            flush=True,
        )
        hold(args)
    dist.destroy_process_group()
    print(f"RANK {rank} DETACHED", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Everything this rank writes is written and closed by now (the session detached above). Leave
    # without the interpreter's teardown: with gloo, torch's C++ threads can abort it ("terminate
    # called without an active exception", exit -6) even after destroy_process_group(), as one
    # rank here did once (tests/test_history_identity.py), a teardown crash known upstream
    # (pytorch/pytorch#190489). A rank that failed earlier still exits with its own code.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
