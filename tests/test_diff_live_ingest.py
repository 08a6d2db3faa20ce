"""A real 2-rank ``torch.compile(DDP(model))`` job (torchrun, gloo, CPU) recorded live and by ``TORCH_TRACE``:
``recompprof diff <run> <ingest of its own trace>`` finds nothing.

DDP's compiled forward is torch's own wrapper around the module, and its ``_inside_ddp_forward`` context
manager makes Dynamo compile contextlib's ``helper`` and ``_GeneratorContextManagerBase.__init__`` (run by a
``_GeneratorContextManager``) as frames of their own: the shapes where live capture and ingest named two
identities. Ingest names what the trace holds and says "unknown" (no class) where it holds nothing, which
``diff`` matches to the live frame at the same code (docs/frames.md).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from needs import starts
from rank_jobs import TORCHRUN, job_env
from recorded_runs import cli
from servers import WORKLOADS

from recompprof._analysis.diff import compare, render
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, Frame

JOB_TIMEOUT = 300


@pytest.fixture(scope="module")
@starts("workload")
def ddp_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One torchrun job, rank 1 recompiling at step 3, recorded by recompprof and by TORCH_TRACE."""
    where = tmp_path_factory.mktemp("ddp")
    done = subprocess.run(
        [
            TORCHRUN,
            "--standalone",
            "--nproc_per_node=2",
            str(WORKLOADS / "ddp_diverge.py"),
            "--steps",
            "5",
            "--diverge-step",
            "3",
        ],
        env=job_env(
            {"RECOMPPROF_RUN_DIR": str(where / "run"), "TORCH_TRACE": str(where / "trace")}
        ),
        cwd=where,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return where


def _frames(events: list[object]) -> dict[tuple[int | None, str], Frame]:
    return {
        (e.rank, e.compile_id): e.frame for e in events if isinstance(e, Compile) and not e.backward
    }


def test_ingest_gives_every_ddp_compile_the_live_identity_or_an_unknown_class(
    ddp_job: Path,
) -> None:
    """Every compile of the job, rank by rank, has the same code object live and ingested, and the same class
    or none (unknown); DDP's compiled forward is ``DistributedDataParallel.forward`` in both, never ``inner``."""
    live = _frames(list(read_run(ddp_job / "run")))
    traced = _frames([e for per in read_trace(ddp_job / "trace").events for e in per])
    assert live.keys() == traced.keys() and len(live) >= 8
    for key, frame in live.items():
        other = traced[key]
        assert (other.code_file, other.code_line) == (frame.code_file, frame.code_line), key
        assert other.owner in (frame.owner, None), (key, frame.label, other.label)
    forward = {f.label for f in traced.values() if f.code_file.endswith("external_utils.py")}
    assert forward and all(
        label.startswith("DistributedDataParallel.forward (parallel/distributed.py:")
        for label in forward
    ), forward
    assert forward == {f.label for f in live.values() if f.code_file.endswith("external_utils.py")}
    # A subclass running an inherited method that never reads self: the class is unknown in the trace.
    init = {(f.name, f.owner) for f in traced.values() if f.name.endswith(".__init__")}
    assert init == {("_GeneratorContextManagerBase.__init__", None)}, init


def test_diff_of_the_ddp_run_against_its_own_ingested_trace_exits_0(ddp_job: Path) -> None:
    """``recompprof ingest`` of the job's trace, then ``recompprof diff <run> <ingested>``: exit 0, no frame listed."""
    ingested = ddp_job / "ingested"
    done = cli("ingest", str(ddp_job / "trace"), "-o", str(ingested), "--overwrite")
    assert done.returncode == 0, done.stdout + done.stderr
    for before, after in ((ddp_job / "run", ingested), (ingested, ddp_job / "run")):
        diffed = cli("diff", str(before), str(after))
        assert diffed.returncode == 0, diffed.stdout + diffed.stderr
        assert "no regressions (0 improvement(s))" in diffed.stdout, diffed.stdout
        assert "Frame" not in diffed.stdout, diffed.stdout


def test_recompiles_moved_into_or_out_of_other_are_changed_not_better(ddp_job: Path) -> None:
    """The job's recompiles classified ``other`` on one side (as a trace without live objects may): the
    known category and ``other`` are both listed as ``changed``, either way round, with no regression and no
    improvement."""
    known = list(read_run(ddp_job / "run"))
    unknown = [
        e.model_copy(
            update={"reasons": [r.model_copy(update={"category": "other"}) for r in e.reasons]}
        )
        if isinstance(e, Compile) and e.reasons
        else e
        for e in known
    ]
    assert any(isinstance(e, Compile) and e.reasons for e in known)
    for before, after in ((known, unknown), (unknown, known)):
        diff = compare(before, after)
        moved = [c for c in diff.changes if c.what.startswith("category ")]
        assert moved and {c.verdict for c in moved} == {"changed"}, render(diff)
        assert diff.regressions == [] and diff.improvements == [], render(diff)
        assert "better" not in render(diff)
