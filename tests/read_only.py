"""A command run where a lake is mounted read-only, as a dashboard's host mounts a fleet's lake: a
read-only bind mount in a mount namespace of the command's own (``unshare``), while the test's own
processes keep writing the lake at its real path."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def read_only(
    lake: Path, mounted: Path, command: list[str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``command`` run where ``lake`` is bound read-only at ``mounted`` (as a user namespace's root
    where the test is not root): it may not write, link or remove a file there. Skips the test where
    the machine allows no such mount (no ``unshare``, namespaces refused)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to mount the lake read-only")
    mounted.mkdir()
    namespace = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "-r", "--mount"]
    script = 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && shift 2 && exec "$@"'
    bound = [*namespace, "sh", "-c", script, "sh", str(lake), str(mounted)]
    probe = subprocess.run([*bound, "touch", str(mounted / "written")], capture_output=True)
    if b"Read-only file system" not in probe.stderr:
        pytest.skip(f"this machine refuses a read-only bind mount: {probe.stderr.decode().strip()}")
    return subprocess.run([*bound, *command], capture_output=True, text=True, timeout=timeout)
