"""Print, as JSON, what recompprof sees on the installed torch: which signals attach turns on (and why
not), which profile-mode mechanism runs, and what a tiny recompiling job yields in each mode.
Run by scripts/compat.sh inside each version's venv."""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import torch

import recompprof
from recompprof._model.events import Compile


def _job() -> None:
    def probe_fn(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    f = torch.compile(probe_fn, backend="eager")
    for tag in ("a", "bb", "ccc"):
        f(torch.ones(2), tag)


def _observe(mode: str) -> dict[str, Any]:
    torch._dynamo.reset()
    with (
        tempfile.TemporaryDirectory() as run_dir,
        recompprof.attach(mode=mode, run_dir=run_dir) as session,
    ):
        _job()
    compiles = [
        e for e in session.recent_events() if isinstance(e, Compile) and e.frame.name == "probe_fn"
    ]
    return {
        "signals": session.signals,
        "signals_off": session.signals_off,
        "mechanism": getattr(session._profile, "mechanism", None),
        "why_off": getattr(session._profile, "why_off", ""),
        "compiles": len(compiles),
        "recompile_categories": [
            r.category for c in compiles if c.is_recompile for r in c.reasons if r.explains_change
        ],
    }


def _park() -> dict[str, Any]:
    """Profile mode's parking on A, B, A, B at limit 1: switches reported, traces, re-enabled variants."""
    from recompprof._torch.profile.mode import ProfileMode

    def alternating(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x + (1 if tag == "A" else 2)

    torch._dynamo.reset()
    switches: list[str] = []
    mode = ProfileMode(1, lambda code, cid, reasons: switches.append("compile"))
    mode.on_reuse = lambda code, cid, reasons: switches.append("reuse")
    mode.install()
    try:
        compiled = torch.compile(alternating, backend="eager")
        for tag in "ABAB":
            compiled(torch.ones(2), tag)
    finally:
        mode.uninstall()
    stats = mode.stats
    return {
        "parking": mode.parking,
        "why_no_parking": mode.why_no_parking,
        "switches_seen": len(switches),
        "traces": stats["traces"],
        "reenabled": stats.get("reenabled", 0),
    }


def main() -> None:
    out = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "monitor": _observe("monitor"),
        "profile": _observe("profile"),
        "park": _park(),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
