"""Which processes are ranks: a child of a recompprof process that has its parent's rank variables is not one.

Standard library only: the start-up hook (``autoattach.py``) loads this file by path, before ``torch`` or
``recompprof`` is imported; ``recompprof._capture.identity`` and ``recompprof._capture.session`` import it as a module.

A process that is set to attach (``RECOMPPROF_ATTACH=1``, from interpreter start: *pending*) or has
attached (*attached*) exports ``RECOMPPROF_PARENT=<pid>:<state>:<rank key>``; its children inherit it. The
rank key is what the rank variables say (``torchrun,RANK=1,WORLD_SIZE=2,...``, ``slurm,...`` or
``single``). A process is a *helper* of that parent, never a rank of its own, when it inherited the
variable from another process, its own rank key is the same (no rank variables of its own), and

- the parent had attached: any child (``multiprocessing`` with spawn or forkserver, ``subprocess``, a
  forked child), because it would pose as the parent's rank; or
- the parent was still pending and the child was started by ``multiprocessing`` (spawn, forkserver or
  fork): pool and DataLoader workers of a process that had not imported torch yet. A plain program the
  pending process runs (a torch-free wrapper running ``python train.py``) is not a helper: it attaches.

A helper does not attach: no event log, no server, no metric files, no threads. A child given rank
variables of its own (a launcher starting ranks, ``srun`` inside a batch script) is a rank and attaches.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

VARIABLE = "RECOMPPROF_PARENT"
PENDING = "pending"
ATTACHED = "attached"
# The variables each launcher sets that make a process one rank of a job (recompprof._capture.identity reads them).
TORCHRUN = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
)
SLURM = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_ID")
# How multiprocessing starts the main of a spawned child and of the forkserver (Python 3.8 to 3.14).
_MP_ARGV = (
    "from multiprocessing.spawn import spawn_main",
    "from multiprocessing.forkserver import main",
    "--multiprocessing-fork",
)


def launcher(env: Mapping[str, str]) -> str:
    """``torchrun`` (``RANK`` and ``WORLD_SIZE`` set), else ``slurm`` (``SLURM_PROCID`` set), else ``single``."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return "torchrun"
    if "SLURM_PROCID" in env:
        return "slurm"
    return "single"


def rank_key(env: Mapping[str, str]) -> str:
    """What the rank variables make of a process; equal keys claim the same rank of the same job."""
    kind = launcher(env)
    names = TORCHRUN if kind == "torchrun" else SLURM if kind == "slurm" else ()
    return kind + "".join(f",{name}={env.get(name, '')}" for name in names)


def by_multiprocessing() -> bool:
    """True in a process ``multiprocessing`` started: its spawn or forkserver main (seen in the command line
    while the child imports), or any start method once the child runs (``parent_process()``)."""
    argv = getattr(sys, "orig_argv", sys.argv)
    if any(marker in arg for arg in argv for marker in _MP_ARGV):
        return True
    mp = sys.modules.get("multiprocessing")
    parent_process = getattr(mp, "parent_process", None)
    return parent_process is not None and parent_process() is not None


def helper_of(env: Mapping[str, str] | None = None, *, forked: bool = False) -> int | None:
    """The pid of the recompprof process this one is a helper of (see the module docstring), else None.

    ``forked``: the caller knows this process was forked from the one that exported the variable.
    """
    env = os.environ if env is None else env
    pid, state, key = _parse(env.get(VARIABLE, ""))
    if pid is None or pid == os.getpid() or key != rank_key(env):
        return None
    if state == ATTACHED or forked or by_multiprocessing():
        return pid
    return None


def mark(state: str, env: MutableMapping[str, str] | None = None) -> tuple[str | None, str]:
    """Export this process as the parent of its future children; returns (the previous value, the new one)."""
    env = os.environ if env is None else env
    previous = env.get(VARIABLE)
    value = f"{os.getpid()}:{state}:{rank_key(env)}"
    env[VARIABLE] = value
    return previous, value


def restore(previous: str | None, value: str, env: MutableMapping[str, str] | None = None) -> None:
    """Undo :func:`mark` unless something replaced the value since."""
    env = os.environ if env is None else env
    if env.get(VARIABLE) != value:
        return
    if previous is None:
        env.pop(VARIABLE, None)
    else:
        env[VARIABLE] = previous


def _parse(value: str) -> tuple[int | None, str, str]:
    pid, _, rest = value.partition(":")
    state, _, key = rest.partition(":")
    try:
        return int(pid), state, key
    except ValueError:
        return None, "", ""
