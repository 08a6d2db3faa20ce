"""Attach recompprof to an unmodified program: ``recompprof run`` puts this directory on PYTHONPATH.

Python imports ``sitecustomize`` at start-up. This one (1) runs the ``sitecustomize`` it shadows, if
any, so site set-up is unchanged, and (2) when ``RECOMPPROF_ATTACH=1``, starts ``autoattach.py`` here
(attach right after ``torch`` is first imported; see that file). An installed recompprof's
``recompprof-attach.pth`` may have started it already; it then runs once, not twice.
Nothing here may raise: a failure prints one line and the program runs on without recompprof.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


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


def _start() -> None:
    import importlib.util

    module = sys.modules.get("_recompprof_autoattach")
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "_recompprof_autoattach", os.path.join(_HERE, "autoattach.py")
        )
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[spec.name] = module  # type: ignore[union-attr]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    module.start()


try:
    _chain()
except Exception as exc:  # noqa: BLE001
    sys.stderr.write(f"recompprof: the shadowed sitecustomize failed: {exc!r}\n")

if os.environ.get("RECOMPPROF_ATTACH"):
    try:
        _start()
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write(
            f"recompprof: RECOMPPROF_ATTACH is set but recompprof could not start: {exc!r}\n"
        )
