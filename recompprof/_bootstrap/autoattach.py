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
compile workers are skipped, and so are helpers of a recompprof process (its DataLoader and pool workers,
whatever their start method; ``lineage.py``, loaded by path from this directory, says which). A failure
prints one line and the program runs on without recompprof.
"""

from __future__ import annotations

import os
import sys
from typing import Any

MODULE_NAME = "_recompprof_autoattach"
# Command lines of processes that must not attach: launchers and compile workers never run the model.
_SKIP = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "torchrun",
    "torch._inductor.compile_worker",
    "compile_worker/__main__",
)
_started = False
_start_pid = 0
_lineage: Any = None


def lineage() -> Any:
    """``lineage.py`` of this directory, loaded by path (importing ``recompprof`` costs half a second)."""
    global _lineage
    if _lineage is None:
        import importlib.util

        name = "_recompprof_lineage"
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(
                name, os.path.join(os.path.dirname(__file__), "lineage.py")
            )
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[name] = module
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        _lineage = module
    return _lineage


def wanted() -> bool:
    if os.environ.get("RECOMPPROF_ATTACH", "").strip().lower() not in ("1", "true", "yes", "on"):
        return False
    argv = " ".join(getattr(sys, "orig_argv", sys.argv)[1:4])
    return not any(marker in argv for marker in _SKIP)


def _attach() -> None:
    try:
        # Decided when torch is imported, with the rank variables of that moment.
        if lineage().helper_of(forked=os.getpid() != _start_pid) is not None:
            return
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
    global _started, _start_pid
    if _started or not wanted():
        return
    _started, _start_pid = True, os.getpid()
    if lineage().helper_of() is None:
        lineage().mark(
            lineage().PENDING
        )  # workers started before torch is imported are helpers too
    if "torch" in sys.modules:
        _attach()
    else:
        sys.meta_path.insert(0, _AttachAfterTorch())
