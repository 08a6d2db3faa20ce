"""What the verdict corpus workloads (``verdict_models*.py``) share: the backend they compile with and
their command line, ``python <workload file> NAME``, which runs one job and ends with ``WORKLOAD DONE``
(the line ``tests/agreement.py`` waits for)."""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Callable

import torch

BACKEND = "aot_eager"


def main(workloads: dict[str, Callable[[], None]]) -> int:
    """Run the job named on the command line, quiet and seeded, so each run compiles the same way."""
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=sorted(workloads))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    workloads[args.workload]()
    print("WORKLOAD DONE", flush=True)
    return 0
