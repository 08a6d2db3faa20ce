"""Monitor mode's one write into torch's own records: the step hook's ``recompile_user_contexts``; and the
``step_in_trace`` signal going dark when torch drops that hook (real torch.compile, torch's own records)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from recorded_runs import cli

import recompprof
from recompprof._eventlog.reader import read_file
from recompprof._model.events import SessionEnd, SignalChange
from recompprof._torch.versions import torch_info

pytestmark = pytest.mark.skipif(
    not torch_info().has("recompile_user_context"),
    reason="this torch has no recompile user contexts (step_in_trace is off)",
)


def _record_of(fn: Any) -> Any:
    """torch's own CompilationMetrics record of compiling ``fn`` (the latest in its buffer)."""
    torch.compile(fn, backend="eager")(torch.ones(2))
    return torch._dynamo.utils._compilation_metrics[-1]


def test_monitor_mode_writes_the_step_into_torchs_compile_records(tmp_path: Path) -> None:
    """Unattached, torch's record of a compile has ``recompile_user_contexts`` None; attached in monitor
    mode it holds ``recompprof step <N>``; after detach it is None again (docs: README "Modes")."""
    assert _record_of(lambda x: x + 1).recompile_user_contexts is None
    with recompprof.attach(run_dir=tmp_path) as session:
        session.step(to=7)
        assert _record_of(lambda x: x + 2).recompile_user_contexts == {"recompprof step 7"}
    assert _record_of(lambda x: x + 3).recompile_user_contexts is None


def test_reset_of_user_contexts_marks_step_in_trace_dark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``torch._dynamo.reset_recompile_user_contexts()`` removes recompprof's hook: at the next compile the
    ``step_in_trace`` signal goes dark (a ``signal`` event, ``signals_off`` at the end, a warning), not
    counted as an internal error, and ``check`` still trusts the run (its counts do not come from that
    signal); that compile's record carries no step."""
    caplog.set_level(logging.WARNING, logger="recompprof")
    with recompprof.attach(run_dir=tmp_path) as session:
        assert _record_of(lambda x: x + 4).recompile_user_contexts == {"recompprof step 0"}
        assert session.signals["step_in_trace"] is True
        torch._dynamo.reset_recompile_user_contexts()
        assert _record_of(lambda x: x + 5).recompile_user_contexts is None
        assert session.signals["step_in_trace"] is False
        assert "reset_recompile_user_contexts" in session.signals_off["step_in_trace"]
        path = session.event_log_path
    assert path is not None
    events = list(read_file(path))
    [change] = [e for e in events if isinstance(e, SignalChange)]
    assert (change.signal, change.live) == ("step_in_trace", False)
    [end] = [e for e in events if isinstance(e, SessionEnd)]
    assert "reset_recompile_user_contexts" in end.signals_off["step_in_trace"]
    assert not end.internal_errors
    assert any("step_in_trace went dark" in r.getMessage() for r in caplog.records)
    checked = cli("check", str(tmp_path), "--max-recompiles", "10")
    assert checked.returncode == 0, checked.stdout + checked.stderr
