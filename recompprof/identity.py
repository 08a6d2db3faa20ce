"""Who this process is in its job: rank, local rank, world size, run id, host, pid."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import uuid
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Identity:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    run_id: str
    host: str
    pid: int
    launcher: str  # "torchrun" | "slurm" | "single"


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return default


def detect(env: Mapping[str, str] | None = None) -> Identity:
    """Rank identity from torchrun's variables, else Slurm's, else a single process.

    The run id is shared by every rank of one job (``TORCHELASTIC_RUN_ID`` or ``SLURM_JOB_ID``);
    ``RECOMPPROF_RUN_ID`` overrides it, and a single process gets a fresh time-ordered one.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        launcher = "torchrun"
        rank, world = _int(env, "RANK", 0), _int(env, "WORLD_SIZE", 1)
        local_rank = _int(env, "LOCAL_RANK", rank)
        local_world = _int(env, "LOCAL_WORLD_SIZE", world)
        run_id = env.get("TORCHELASTIC_RUN_ID") or env.get("SLURM_JOB_ID") or ""
    elif "SLURM_PROCID" in env:
        launcher = "slurm"
        rank, world = _int(env, "SLURM_PROCID", 0), _int(env, "SLURM_NTASKS", 1)
        local_rank = _int(env, "SLURM_LOCALID", 0)
        local_world = _int(env, "SLURM_NTASKS_PER_NODE", world) if env.get("SLURM_NTASKS_PER_NODE", "").isdigit() else world
        run_id = "slurm-" + env["SLURM_JOB_ID"] if env.get("SLURM_JOB_ID") else ""
    else:
        launcher, rank, local_rank, world, local_world, run_id = "single", 0, 0, 1, 1, ""
    run_id = env.get("RECOMPPROF_RUN_ID") or run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    return Identity(rank, local_rank, world, local_world, run_id, socket.gethostname(), os.getpid(), launcher)
