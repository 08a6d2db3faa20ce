"""Which torch features exist, computed once from the installed version and module contents."""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass

# Oldest torch each signal is read from; below it the adapter stays off and says so.
MIN_VERSIONS = {
    "compilation_metrics": (2, 4),
    "phase_times": (2, 6),  # CompilationMetrics.*_cumulative_compile_time_us
    "guard_failures": (2, 4),
    "graph_breaks": (2, 4),
    "callback_args": (2, 8),  # on_compile_start/end(CallbackArgs); no arguments before
    "recompile_limit_name": (2, 7),  # config.recompile_limit; cache_size_limit before
    "user_stack_in_reasons": (2, 11),
}


def parse(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


@dataclass(frozen=True)
class TorchInfo:
    version: str
    major_minor: tuple[int, int]

    def has(self, feature: str) -> bool:
        return self.major_minor >= MIN_VERSIONS[feature]

    @property
    def limit_config_name(self) -> str:
        return "recompile_limit" if self.has("recompile_limit_name") else "cache_size_limit"

    @property
    def accumulated_limit_config_name(self) -> str:
        return "accumulated_recompile_limit" if self.has("recompile_limit_name") else "accumulated_cache_size_limit"


@functools.lru_cache(maxsize=1)
def torch_info() -> TorchInfo:
    import torch

    return TorchInfo(torch.__version__, parse(torch.__version__))


def versions() -> dict[str, str]:
    """Versions that go on ``session_start`` and ``recompprof_build_info``."""
    from recompprof import __version__

    out = {"python": sys.version.split()[0], "recompprof": __version__, "torch": "", "triton": "", "cuda": ""}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda or ""
    except ImportError:
        pass
    if "triton" in sys.modules or _importable("triton"):
        try:
            import triton

            out["triton"] = triton.__version__
        except Exception:  # noqa: BLE001 - a broken triton must not stop attach
            pass
    return out


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
