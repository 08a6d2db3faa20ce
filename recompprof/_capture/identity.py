"""Who this process is in its job: rank, local rank, world size, run id, host, pid."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import socket
import time
import uuid
from collections.abc import Mapping

from recompprof._bootstrap import lineage
from recompprof._model.naming import as_text, shortened


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
    restart_count: int = 0  # torchelastic restarts of this job so far


# In a run folder's name, percent-quoted: what would make it a path or hidden, and "%" itself, so two
# run ids never name one folder.
_NOT_IN_A_FOLDER = re.compile(r"[%/\\\x00]|^\.")


def run_folder(run_id: str) -> str:
    """The name of a run's default folder (``recompprof-runs/<this>``): the run id as it is where it
    is one safe file name, else with ``/``, ``\\``, NUL, ``%`` and a leading ``.`` percent-quoted,
    and :func:`shortened` to 200 bytes (under a filesystem's 255) where it is longer."""
    name = _NOT_IN_A_FOLDER.sub(lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), run_id)
    return shortened(name, 200, size=lambda text: len(text.encode("utf-8", "surrogatepass")))


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return default


def new_run_id() -> str:
    """A fresh run id, ordered by start time: ``20261123-031500-3f9a1c``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def detect(env: Mapping[str, str] | None = None) -> Identity:
    """Rank identity from torchrun's variables, else Slurm's, else a single process.

    The run id is shared by every rank of one job (``TORCHELASTIC_RUN_ID`` or ``SLURM_JOB_ID``);
    ``RECOMPPROF_RUN_ID`` overrides it, and a single process gets a fresh time-ordered one.
    torchelastic's ``none`` (``--rdzv-id``'s default: every job launched without one has it) is no
    run id: two such jobs would share one run directory and one name in the history lake.
    """
    env = os.environ if env is None else env
    slurm_run = _slurm_run_id(env)
    launcher = lineage.launcher(
        env
    )  # the rank variables' one definition, shared with the start-up hook
    if launcher == "torchrun":
        rank, world = _int(env, "RANK", 0), _int(env, "WORLD_SIZE", 1)
        local_rank = _int(env, "LOCAL_RANK", rank)
        local_world = _int(env, "LOCAL_WORLD_SIZE", world)
        run_id = (
            _elastic_run_id(env)
            or slurm_run
            or _agent_run_id(env, world)
            or _rendezvous_run_id(env, world)
        )
    elif launcher == "slurm":
        rank, world = _int(env, "SLURM_PROCID", 0), _int(env, "SLURM_NTASKS", 1)
        local_rank = _int(env, "SLURM_LOCALID", 0)
        local_world = (
            _leading_int(env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE"))
            or world
        )
        run_id = slurm_run
    else:
        rank, local_rank, world, local_world, run_id = 0, 0, 1, 1, ""
    run_id = env.get("RECOMPPROF_RUN_ID") or run_id or new_run_id()
    return Identity(
        rank,
        local_rank,
        world,
        local_world,
        as_text(run_id),
        as_text(socket.gethostname()),
        os.getpid(),
        launcher,
        _int(env, "TORCHELASTIC_RESTART_COUNT", 0),
    )


def _slurm_run_id(env: Mapping[str, str]) -> str:
    """``slurm-<job>`` or ``slurm-<job>.<step>``: two srun steps of one allocation are two runs."""
    job = env.get("SLURM_JOB_ID")
    if not job:
        return ""
    step = env.get("SLURM_STEP_ID")
    return f"slurm-{job}.{step}" if step else f"slurm-{job}"


# torchelastic's run id when the launch gave none (``--rdzv-id``'s default), or left it empty.
_NO_RUN_ID = frozenset({"", "none"})


def _elastic_run_id(env: Mapping[str, str]) -> str:
    found = env.get("TORCHELASTIC_RUN_ID", "").strip()
    return "" if found.lower() in _NO_RUN_ID else found


def _agent_run_id(env: Mapping[str, str], world: int) -> str:
    """Under torchrun without a run id: the ranks of one node share their agent (the parent process),
    whose pid and start time no other job on the host has, so ``torchrun-<hash>`` never collides. A
    job on several nodes gets one such id per node (nothing else is shared without a collective):
    give it ``--rdzv-id`` or ``RECOMPPROF_RUN_ID`` to make it one run."""
    if "TORCHELASTIC_RUN_ID" not in env:
        return ""  # no torchelastic agent (a hand-written RANK/WORLD_SIZE set-up)
    agent = os.getppid()
    started = _process_start(agent)
    where = f"{socket.gethostname()}:{agent}:{started}:{env.get('MASTER_ADDR')}:{world}"
    return "torchrun-" + hashlib.sha1(where.encode()).hexdigest()[:12]


def _process_start(pid: int) -> str:
    """A process's start time in clock ticks since boot (Linux), or "" where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()  # field 22 of stat(5), counted after the command's ")"
    except (OSError, IndexError):
        return ""


def _rendezvous_run_id(env: Mapping[str, str], world: int) -> str:
    """Without a launcher's job id, ranks of one job still agree on the rendezvous address."""
    if world > 1 and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        digest = hashlib.sha1(f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}".encode()).hexdigest()[
            :10
        ]
        return f"rdzv-{digest}"
    return ""


def _leading_int(value: str | None) -> int:
    """Slurm writes task counts like ``4`` or ``2(x3)``; the leading number is per node."""
    match = re.match(r"\s*(\d+)", value or "")
    return int(match.group(1)) if match else 0
