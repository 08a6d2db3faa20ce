"""Attach recompprof to an unmodified program: ``recompprof run`` puts this directory on PYTHONPATH.

Python imports ``sitecustomize`` at start-up. This one (1) runs the ``sitecustomize`` it shadows, if
any, so site set-up is unchanged, and (2) when ``RECOMPPROF_ATTACH=1``, attaches recompprof right
after ``torch`` is first imported, with settings from the ``RECOMPPROF_*`` variables. Processes that
never import torch get no session and no event log; launchers (torchrun) and Inductor's compile
workers are skipped. Every child process inherits the environment, so each torchrun rank attaches.
Nothing here may raise: a failure prints one line and the program runs on without recompprof.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# Command lines of processes that must not attach: launchers and compile workers never run the model.
_SKIP = ("torch.distributed.run", "torch.distributed.launch", "torchrun", "torch._inductor.compile_worker",
         "compile_worker/__main__")


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _wanted() -> bool:
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

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
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


try:
    _chain()
except Exception as exc:  # noqa: BLE001
    sys.stderr.write(f"recompprof: the shadowed sitecustomize failed: {exc!r}\n")

if _wanted():
    if "torch" in sys.modules:
        _attach()
    else:
        sys.meta_path.insert(0, _AttachAfterTorch())
