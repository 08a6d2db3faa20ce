"""A float the traced code specialises again in the compile that was to make it dynamic, recorded for ingest.

``F.cross_entropy(label_smoothing=...)`` needs a concrete float: each of four values compiles once, and the
compile after the first change installs ``ls == 0.2`` (tests/test_float_respecialised.py). Twice: the float
as an argument (``L['ls']``, a Python value from its text alone) and as a config object's field
(``G['CFG'].ls``, whose holder only the live process can tell from an nn.Module). Run under
``recompprof.attach()`` with its settings from ``RECOMPPROF_*`` and ``TORCH_TRACE`` set, so the live event
log and the trace record the same compiles.

    TORCH_TRACE=<dir> RECOMPPROF_RUN_DIR=<dir> python tests/workloads/float_respecialised.py
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

import recompprof


@dataclasses.dataclass
class _Config:
    ls: float = 0.1


CFG = _Config()


def by_argument(x: torch.Tensor, y: torch.Tensor, ls: float) -> torch.Tensor:
    return F.cross_entropy(x, y, label_smoothing=ls)


def by_config(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x, y, label_smoothing=CFG.ls)


def main() -> None:
    argument = torch.compile(by_argument, backend="eager")
    config = torch.compile(by_config, backend="eager")
    x, y = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])
    with recompprof.attach():
        for value in (0.1, 0.2, 0.3, 0.4):
            argument(x, y, value)
        for value in (0.1, 0.2, 0.3, 0.4):
            CFG.ls = value
            config(x, y)
    print("WORKLOAD DONE", flush=True)


if __name__ == "__main__":
    main()
