"""Compile caches: a cold Inductor run misses, a warm restart of the same job hits and reports the seconds saved.

Real Inductor on CPU (the caches belong to it), one tiny model, a fresh cache directory per test, each run
in its own process like a restart from a checkpoint (so nothing is served from in-memory caches).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile

pytestmark = [pytest.mark.workload, pytest.mark.inductor]

REPO = Path(__file__).resolve().parent.parent

JOB = textwrap.dedent("""
    import sys, torch, recompprof
    torch.manual_seed(0)
    assert torch._inductor.config.fx_graph_cache and torch._functorch.config.enable_autograd_cache
    model = torch.nn.Linear(8, 4)
    compiled = torch.compile(model)  # Inductor, which owns the FX graph and AOTAutograd caches
    with recompprof.attach(run_dir=sys.argv[1]), torch.no_grad():
        compiled(torch.randn(4, 8))
""")


def _run(tmp_path: Path, name: str, cache_dir: Path, trace: Path | None = None) -> list[Compile]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)}
    if trace is not None:
        env["TORCH_TRACE"] = str(trace)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [e for e in read_run(tmp_path / name) if isinstance(e, Compile)]


def test_warm_restart_hits_the_caches_and_reports_seconds_saved(tmp_path: Path) -> None:
    """Cold: FX graph and AOTAutograd caches miss, nothing saved. Warm (same job, same cache dir): both hit,
    torch's seconds saved are reported; the report shows the hit rate; ingest of the warm run's TORCH_TRACE
    yields the same cache fields as the live event log."""
    cache_dir = tmp_path / "inductor-cache"
    cold = _run(tmp_path, "cold", cache_dir)
    assert [e.cache_lookups for e in cold] == [
        {"fx_graph": {"miss": 1}, "aot_autograd": {"miss": 1}}
    ]
    assert cold[0].cache_seconds_saved is None
    warm = _run(tmp_path, "warm", cache_dir, trace=tmp_path / "trace")
    assert [e.cache_lookups for e in warm] == [{"fx_graph": {"hit": 1}, "aot_autograd": {"hit": 1}}]
    assert warm[0].cache_seconds_saved is not None and warm[0].cache_seconds_saved > 0
    report = build_report(read_run(tmp_path / "warm"))
    assert report.cache_hit_rate("fx_graph") == 1.0 and report.cache_hit_rate("aot_autograd") == 1.0
    assert report.compilation.cache_seconds_saved == pytest.approx(warm[0].cache_seconds_saved)
    text = render_text(report)
    assert "Compile caches (seconds saved by hits:" in text and "100 %" in text
    ingested = [
        e
        for events in read_trace(tmp_path / "trace").events
        for e in events
        if isinstance(e, Compile)
    ]
    assert [(e.cache_lookups, e.cache_seconds_saved) for e in ingested] == [
        (e.cache_lookups, e.cache_seconds_saved) for e in warm
    ]
