"""Profile mode's ``dynamo_profiler``: which user functions cost Dynamo trace time, without torch's stdout tables."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

import recompprof
from recompprof._capture.settings import ConfigError


def helper(x: torch.Tensor) -> torch.Tensor:
    for _ in range(30):  # many traced ops: an inlined function with trace time of its own
        x = x * 1.01 + 1
    return x


def step(x: torch.Tensor, k: int) -> torch.Tensor:
    return helper(x).sum() * k


def test_trace_time_per_user_function_reaches_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each compile carries Dynamo's exclusive trace seconds per user function (inlined ones included); the report
    ranks them; torch prints nothing; the profiler config is restored at detach."""
    import torch._dynamo.config as config

    before = config.dynamo_profiler
    compiled = torch.compile(step, backend="eager")
    with recompprof.attach(run_dir=tmp_path, mode="profile", dynamo_profiler=True) as session:
        assert session.signals["dynamo_profiler"] is True
        for k in (1, 2):
            compiled(torch.ones(3), k)
    assert config.dynamo_profiler == before
    compiles = [e for e in session.recent_events() if e.kind == "compile" and not e.backward]
    assert len(compiles) == 2 and all(e.trace_seconds_by_function for e in compiles)
    labels = set(compiles[0].trace_seconds_by_function)
    assert any(label.startswith("helper (") for label in labels) and any(
        label.startswith("step (") for label in labels
    )
    report = recompprof.report()
    totals: Counter[str] = Counter()
    for e in compiles:
        totals.update(e.trace_seconds_by_function)
    top, seconds = report.compilation.trace_seconds_by_function.most_common(1)[0]
    # The report ranks the compiles' own seconds (which function is slower is the machine's to say:
    # on a loaded machine step's own tracing once outweighed helper's 30 inlined ops).
    assert top == max(totals, key=lambda label: totals[label]) and seconds > 0
    assert seconds == pytest.approx(totals[top])
    assert "Dynamo trace time by user function" in str(report)
    assert "Dynamo Profiler" not in capsys.readouterr().out


def test_dynamo_profiler_needs_profile_mode() -> None:
    """Asking for the Dynamo profiler in monitor mode fails at attach, naming the setting."""
    with pytest.raises(ConfigError, match="dynamo_profiler.*mode='profile'"):
        recompprof.attach(dynamo_profiler=True)
