"""Attach recompprof at interpreter start when ``RECOMPPROF_ATTACH=1``; standard library only, never raises.

Two start-up hooks load this file, under the module name ``_recompprof_autoattach`` (not as part of the
``recompprof`` package, whose import costs half a second of CPU that processes without torch never pay):

- ``recompprof-attach.pth``, which installing the package puts into site-packages: Python runs it in every
  interpreter of that environment. Unless ``RECOMPPROF_ATTACH`` is set it does nothing but read the variable.
- ``sitecustomize`` in this directory, which ``recompprof run`` puts on ``PYTHONPATH`` (for launchers that
  run a Python where recompprof is importable but not installed, e.g. from a source tree).

Whichever runs first starts; the other finds the module in ``sys.modules`` already started. recompprof
attaches right after ``torch`` is first imported, with settings from the ``RECOMPPROF_*`` variables.
Processes that never import torch get no session and no event log; launchers (torchrun) and Inductor's
compile workers are skipped. A failure prints one line and the program runs on without recompprof.
"""

from __future__ import annotations

import os
import sys
from typing import Any

MODULE_NAME = "_recompprof_autoattach"
# Command lines of processes that must not attach: launchers and compile workers never run the model.
_SKIP = ("torch.distributed.run", "torch.distributed.launch", "torchrun", "torch._inductor.compile_worker",
         "compile_worker/__main__")
_started = False


def wanted() -> bool:
    if os.environ.get("RECOMPPROF_ATTACH", "").strip().lower() not in ("1", "true", "yes", "on"):
        return False
    argv = " ".join(getattr(sys, "orig_argv", sys.argv)[1:4])
    return not any(marker in argv for marker in _SKIP)


def _attach() -> None:
    try:
        import recompprof

        recompprof.attach()
    except Exception as exc:  # noqa: BLE001 - the user's program must run even if recompprof cannot
        sys.stderr.write(f"recompprof: not attached in process {os.getpid()}: {exc}\n")


class _AttachAfterTorch:
    """A one-shot import hook: lets ``torch`` import normally, then attaches."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_attach(module: object) -> None:
            exec_module(module)
            _attach()

        loader.exec_module = exec_then_attach  # this loader instance only serves this one import
        return spec


def start() -> None:
    """Attach now if torch is already imported, else right after it is; once per process."""
    global _started
    if _started or not wanted():
        return
    _started = True
    if "torch" in sys.modules:
        _attach()
    else:
        sys.meta_path.insert(0, _AttachAfterTorch())
