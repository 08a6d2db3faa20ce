"""Training steps in TORCH_TRACE: while attached, recompprof hands torch the step for each recompile's record
(``register_hook_for_recompile_user_context``), and ``recompprof ingest`` reads it back into ``Compile.step``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from recorded_runs import TESTS, clean_env, cli, record

import recompprof
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile
from recompprof._torch.versions import torch_info

needs_hooks = pytest.mark.skipif(
    not torch_info().has("recompile_user_context"),
    reason="this torch has no recompile user-context hooks (the gate's off path is "
    "tested in tests/test_versions.py)",
)


def _forward_compiles(run: Path) -> dict[str, Compile]:
    return {e.compile_id: e for e in read_run(run) if isinstance(e, Compile) and not e.backward}


@pytest.mark.workload
@needs_hooks
def test_ingested_trace_of_attached_run_has_the_steps_of_its_compiles(tmp_path: Path) -> None:
    """Each forward compile ingested from an attached run's TORCH_TRACE has the training step the live event
    has, and the report of the ingested run lists its recompile steps instead of saying steps are unknown."""
    recorded = record(tmp_path, "--steps", "12")
    assert cli("ingest", str(recorded.trace_dir), "-o", str(tmp_path / "ingested")).returncode == 0
    live, ingested = _forward_compiles(recorded.run_dir), _forward_compiles(tmp_path / "ingested")
    assert len(live) > 2 and live.keys() == ingested.keys()
    assert {cid: e.step for cid, e in ingested.items()} == {cid: e.step for cid, e in live.items()}
    assert (
        len({e.step for e in live.values()}) > 2
    )  # the steps differ, so a constant would not pass
    text = render_text(build_report(read_run(tmp_path / "ingested")))
    assert "steps unknown" not in text
    recompile_steps = sorted(e.step or 0 for e in live.values() if e.is_recompile)
    assert ", ".join(map(str, recompile_steps)) in text


@needs_hooks
def test_step_hook_lives_while_attached_only(tmp_path: Path) -> None:
    """Attach registers one step hook with torch beside the job's own; detach takes out only recompprof's."""
    from torch._dynamo import utils

    def jobs_own() -> str:
        return "epoch 3"

    utils.register_hook_for_recompile_user_context(jobs_own)
    try:
        with recompprof.attach(run_dir=tmp_path) as session:
            hooks = list(utils.get_hook_for_recompile_user_context() or [])
            assert session.signals["step_in_trace"] and len(hooks) == 2
            session.step(to=41)
            assert sorted(h() for h in hooks) == ["epoch 3", "recompprof step 41"]
        assert utils.get_hook_for_recompile_user_context() == [jobs_own]
    finally:
        utils.reset_recompile_user_contexts()
    torch._dynamo.reset()


@pytest.mark.workload
def test_trace_of_a_run_without_recompprof_has_no_steps(tmp_path: Path) -> None:
    """A TORCH_TRACE written without recompprof gives compiles with no step, and the report says steps are unknown."""
    env = clean_env(
        TORCH_TRACE=str(tmp_path / "trace"),
        PYTHONPATH=":".join([str(TESTS / "workloads"), *sys.path]),
    )
    done = subprocess.run(
        [sys.executable, str(TESTS / "workloads" / "trace_calls.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert cli("ingest", str(tmp_path / "trace"), "-o", str(tmp_path / "ingested")).returncode == 0
    compiles = _forward_compiles(tmp_path / "ingested")
    assert compiles and all(e.step is None for e in compiles.values())
    assert "from TORCH_TRACE (no mode) | steps unknown" in " ".join(
        render_text(build_report(read_run(tmp_path / "ingested"))).split()
    )
