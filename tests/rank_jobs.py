"""Jobs of several ranks, launched for real (torchrun, Slurm variables): the launcher and a clean
environment for it, ports for ranks that serve base + local rank, and what a job leaves behind."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from recordings import JOB_DEFAULTS
from servers import http_get

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
# Launcher variables that must not leak from the test's own environment into a job.
_LAUNCHER_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "PROMETHEUS_MULTIPROC_DIR",
)


def job_env(extra: dict[str, str]) -> dict[str, str]:
    """This environment without recompprof, Slurm or launcher variables, with the ``JOB_DEFAULTS``
    (recordings.py), unbuffered, one thread, and ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RECOMPPROF_", "SLURM_")) and k not in _LAUNCHER_VARS
    }
    return {**env, **JOB_DEFAULTS, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (zombies count as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def scrape(url: str) -> dict[str, list[Any]]:
    """Samples of a /metrics page by family name."""
    text = http_get(url).decode()
    return {fam.name: fam.samples for fam in text_string_to_metric_families(text)}


def refused(port: int) -> bool:
    """Whether nothing listens on ``port`` on 127.0.0.1 any more (a connection is refused)."""
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False
