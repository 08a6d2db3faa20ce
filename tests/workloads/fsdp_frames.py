"""FSDP2 on two gloo ranks (CPU): ``fully_shard`` swaps the model's class for a generated ``FSDP<Name>``.

Each rank (``torch.multiprocessing.spawn``, ``RANK``/``WORLD_SIZE``/``MASTER_*`` set as a launcher would)
shards a small ``Classifier`` (its layer, then the whole model), compiles it (``backend="eager"``) under
``recompprof.attach()`` (settings from ``RECOMPPROF_*``, so ``TORCH_TRACE`` records the same run) and trains
two steps with two batch sizes: the forward compiles, breaks its graph once, and recompiles. Each rank writes
``OUT_DIR/rank<N>.json``: the class ``fully_shard`` made, its bases, and the class the user wrote.

    python tests/workloads/fsdp_frames.py OUT_DIR PORT
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hidden(x).relu()
        torch._dynamo.graph_break()
        return self.head(h)


def rank_main(rank: int, out: str, port: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    import recompprof

    dist.init_process_group("gloo")
    model = Classifier()
    fully_shard(model.hidden)
    fully_shard(model)
    cls = type(model)
    (Path(out) / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "generated": cls.__name__,
                "module": cls.__module__,
                "bases": [b.__name__ for b in cls.__bases__],
                "user": Classifier.__name__,
            }
        )
    )
    compiled = torch.compile(model, backend="eager")
    with recompprof.attach():
        for batch in (3, 4):
            compiled(torch.randn(batch, 4)).sum().backward()
    dist.destroy_process_group()


def main(out: Path, port: str) -> int:
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(rank_main, args=(str(out.resolve()), port), nprocs=2, join=True)
    print("WORKLOAD DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
