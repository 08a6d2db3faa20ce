"""Many ranks for real: torchrun + DDP (gloo, CPU) and hand-set Slurm variables, two processes each.

In every job only rank 1 sees a new batch shape at loop step 3, so only rank 1 recompiles the model's
frames. The tests check what each rank exports (its own port, its own rank label), what it writes
(one event log per rank in one shared run directory named by the job's run id), what the offline
report says (the diverging frame, rank and step), and that a real Prometheus scraping both ranks
fires the generated TorchCompileRankDivergence alert through Alertmanager. Each job has a hard
timeout and runs in its own process group, which is killed if anything is left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from alerting import FAST, Webhook
from rank_jobs import TORCHRUN, alive, job_env, refused, scrape
from servers import REPO, WORKLOADS, alertmanager, free_port, free_port_pair, prometheus

from recompprof._analysis.render.divergence import render_divergence
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report import divergence
from recompprof._analysis.report.fold import build_report
from recompprof._eventlog.reader import read_file, read_run
from recompprof._model.counting import counts_as_compile
from recompprof._model.events import Compile, Frame, Reason, RecompileLimitHit, SessionStart

sys.path.insert(0, str(REPO))

from needs import starts

from dashboards import rules

JOB_TIMEOUT = 240.0  # seconds for a whole two-rank job, start to exit, on a busy 2-core machine
DIVERGE_STEP = 3
MODEL_FRAME = "Net.forward (workloads/ddp_diverge.py:"


@dataclasses.dataclass
class Job:
    """Processes of one multi-rank job, each in its own session so a stuck job can be killed whole."""

    procs: list[subprocess.Popen[bytes]]
    log: Path
    summary_dir: Path
    release: Path
    cwd: Path

    def summaries(self, ranks: int = 2, timeout: float = JOB_TIMEOUT) -> dict[int, dict[str, Any]]:
        """Wait until every rank has trained and written its summary."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = sorted(self.summary_dir.glob("rank*.json"))
            if len(found) == ranks:
                return {int(p.stem[4:]): json.loads(p.read_text()) for p in found}
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        raise RuntimeError(f"ranks did not finish training:\n{self.output()[-4000:]}")

    def finish(self, timeout: float = 60.0) -> list[int]:
        """Let the ranks leave their hold and exit; kill the process groups past ``timeout``."""
        self.release.touch()
        deadline = time.monotonic() + timeout
        codes: list[int] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(-999)
        self.kill()
        return codes

    def kill(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(
                    proc.pid, signal.SIGKILL
                )  # whatever is left of the group (ranks of torchrun)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextlib.contextmanager
def _job(tmp: Path, commands: Sequence[tuple[list[str], dict[str, str]]]) -> Iterator[Job]:
    tmp.mkdir(parents=True, exist_ok=True)
    job = Job([], tmp / "job.log", tmp / "summaries", tmp / "release", tmp)
    hold = [
        "--summary-dir",
        str(job.summary_dir),
        "--hold",
        str(JOB_TIMEOUT),
        "--release",
        str(job.release),
    ]
    with open(job.log, "wb") as out:
        for args, env in commands:
            job.procs.append(
                subprocess.Popen(
                    args + hold,
                    env=job_env(env),
                    cwd=tmp,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    try:
        yield job
    finally:
        job.kill()


def torchrun_job(
    tmp: Path, env: dict[str, str], *args: str
) -> contextlib.AbstractContextManager[Job]:
    """``torchrun --standalone --nproc_per_node=2`` running the DDP workload (cwd ``tmp``, default run dir)."""
    cmd = [
        TORCHRUN,
        "--standalone",
        "--nproc_per_node=2",
        str(WORKLOADS / "ddp_diverge.py"),
        "--diverge-step",
        str(DIVERGE_STEP),
        *args,
    ]
    return _job(tmp, [(cmd, env)])


def slurm_job(
    tmp: Path, env: dict[str, str], job_id: str
) -> contextlib.AbstractContextManager[Job]:
    """Two ranks started by hand with the variables ``srun`` sets (no torchrun), rendezvous over TCP."""
    init = f"tcp://127.0.0.1:{free_port()}"
    commands = []
    for rank in (0, 1):
        slurm = {
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
            "SLURM_NTASKS": "2",
            "SLURM_NTASKS_PER_NODE": "2",
            "SLURM_JOB_ID": job_id,
            "SLURM_NODEID": "0",
        }
        commands.append(
            (
                [
                    sys.executable,
                    str(WORKLOADS / "ddp_diverge.py"),
                    "--init",
                    init,
                    "--diverge-step",
                    str(DIVERGE_STEP),
                ],
                {**env, **slurm},
            )
        )
    return _job(tmp, commands)


def recompiles_by_frame(samples: dict[str, list[Any]], rank: str) -> dict[str, float]:
    return {
        s.labels["frame"]: s.value
        for s in samples["torch_compile_recompiles"]
        if s.name.endswith("_total") and s.labels["rank"] == rank
    }


def model_frame(values: dict[str, float]) -> float | None:
    """The model frame's value, or None while its series has not been written yet."""
    found = [v for frame, v in values.items() if frame.startswith(MODEL_FRAME)]
    assert len(found) <= 1, values
    return found[0] if found else None


# -- torchrun + DDP, pull mode, a real Prometheus + Alertmanager --------------------------------------


@dataclasses.dataclass
class DdpRun:
    base_port: int
    summaries: dict[int, dict[str, Any]]
    scrapes: dict[int, dict[str, list[Any]]]
    alert: dict[str, Any] | None
    alert_error: str
    rule_values: dict[str, float]
    exit_codes: list[int]
    output: str
    run_dir: Path
    report_text: str


@pytest.fixture(scope="module")
@starts("servers", "workload")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> DdpRun:
    """One torchrun job (2 ranks, rank 1 diverges) scraped by Prometheus with fast rules and Alertmanager."""
    tmp = tmp_path_factory.mktemp("ddp")
    base = free_port_pair()
    rules_file = tmp / "rules.yaml"
    rules_file.write_text(rules.render(FAST))
    scrape_config = {
        "job_name": "train",
        "scrape_interval": "1s",
        "static_configs": [
            {
                "targets": [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"],
                "labels": {"namespace": "ml"},
            }
        ],
    }
    hook = Webhook()
    try:
        with (
            alertmanager(tmp, hook.url) as am,
            prometheus(
                tmp,
                (),
                job="unused",
                extra_scrape_configs=[scrape_config],
                rule_files=[rules_file],
                alertmanager=am,
            ) as prom,
            torchrun_job(
                tmp / "job",
                {"RECOMPPROF_EXPORTERS": "prometheus", "RECOMPPROF_PROMETHEUS_PORT": str(base)},
            ) as job,
        ):
            summaries = job.summaries()
            scrapes = {rank: scrape(s["metrics_url"]) for rank, s in summaries.items()}
            alert, alert_error = None, ""
            try:
                alert = hook.wait_for("TorchCompileRankDivergence", timeout=90)
            except TimeoutError as exc:
                alert_error = str(exc)
            frame_rule = rules.recorded(FAST)["frame_recompiles"]
            rule_values = {
                f"{r['metric']['rank']} {r['metric']['frame']}": float(r["value"][1])
                for r in prom.query(frame_rule)
            }
            codes = job.finish()
            output = job.output()
    finally:
        hook.server.shutdown()
    run_id = summaries[0]["identity"]["run_id"]
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "recompprof._cli.main",
            "report",
            str(job.cwd / "recompprof-runs" / run_id),
            "--width",
            "250",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert report.returncode == 0, report.stderr
    return DdpRun(
        base,
        summaries,
        scrapes,
        alert,
        alert_error,
        rule_values,
        codes,
        output,
        job.cwd / "recompprof-runs" / run_id,
        report.stdout,
    )


@pytest.mark.servers
def test_each_rank_serves_metrics_on_base_port_plus_local_rank_with_its_rank_label(
    ddp_run: DdpRun,
) -> None:
    """Rank r of a torchrun job serves on prometheus_port + r and labels every series rank="r"."""
    for rank, summary in ddp_run.summaries.items():
        assert summary["metrics_url"] == f"http://127.0.0.1:{ddp_run.base_port + rank}/metrics"
        samples = ddp_run.scrapes[rank]
        assert {s.labels.get("rank") for fam in samples.values() for s in fam} == {str(rank)}
        (info,) = samples["recompprof_process_info"]
        assert info.labels == {
            "rank": str(rank),
            "local_rank": str(rank),
            "world_size": "2",
            "local_world_size": "2",
            "launcher": "torchrun",
        }
    assert model_frame(recompiles_by_frame(ddp_run.scrapes[0], "0")) == 0
    assert model_frame(recompiles_by_frame(ddp_run.scrapes[1], "1")) == 1


@pytest.mark.servers
def test_ranks_write_one_log_each_into_the_run_dir_named_by_the_shared_run_id(
    ddp_run: DdpRun,
) -> None:
    """Both ranks share torchrun's run id, and each writes rank<r>-<pid>.jsonl under recompprof-runs/<run id>."""
    ids = {s["identity"]["run_id"] for s in ddp_run.summaries.values()}
    assert len(ids) == 1 and ids != {""}
    run_id = ids.pop()
    expected = {f"rank{rank:05d}-{s['pid']}.jsonl" for rank, s in ddp_run.summaries.items()}
    assert {p.name for p in ddp_run.run_dir.iterdir()} == expected
    for rank, summary in ddp_run.summaries.items():
        events = list(read_file(Path(summary["event_log"])))
        assert {e.rank for e in events} == {rank}
        (start,) = [e for e in events if isinstance(e, SessionStart)]
        assert (start.run_id, start.world_size, start.local_rank, start.pid) == (
            run_id,
            2,
            rank,
            summary["pid"],
        )
        assert events[-1].kind == "session_end"
        forward = [e.compile_id for e in events if isinstance(e, Compile) and not e.backward]
        # A frame torch traced and skipped (it installed no code) is an event but no compile (docs/events.md).
        compiled = [e for e in events if isinstance(e, Compile) and counts_as_compile(e)]
        assert len(forward) == len(set(forward)) and len(compiled) == summary["compiles"]


@pytest.mark.servers
def test_report_names_the_diverging_frame_rank_and_step(ddp_run: DdpRun) -> None:
    """`recompprof report` over the run dir shows a per-rank matrix and names the model frame, rank 1 and step 3."""
    found = divergence.find(build_report(read_run(ddp_run.run_dir)))
    model = [d for d in found if d.frame.label.startswith(MODEL_FRAME)]
    assert len(model) == 1
    assert (model[0].ranks, model[0].baseline_ranks, model[0].first_steps) == (
        [1],
        [0],
        {1: DIVERGE_STEP},
    )
    assert {d.frame.name for d in found} <= {"Net.forward", "DistributedDataParallel.forward"}
    text = ddp_run.report_text
    matrix = text[text.index("Compiles per frame and rank") :]
    assert "rank 0" in matrix.splitlines()[2] and "rank 1" in matrix.splitlines()[2]
    section = text[text.index("DIVERGING:") :]
    line = next(ln for ln in section.splitlines() if MODEL_FRAME in ln)
    assert (
        f"rank 1 at step {DIVERGE_STEP}" in line and "recompiles" in line and "from rank 0" in line
    )


@pytest.mark.servers
def test_prometheus_fires_the_rank_divergence_alert_for_the_frame(ddp_run: DdpRun) -> None:
    """A real Prometheus scraping both ranks with the generated rules fires TorchCompileRankDivergence for the model frame."""
    assert ddp_run.alert is not None, ddp_run.alert_error
    labels = ddp_run.alert["labels"]
    assert (labels["namespace"], labels["job"], labels["severity"]) == ("ml", "train", "warning")
    assert labels["frame"].startswith(MODEL_FRAME) or labels["frame"].startswith(
        "DistributedDataParallel.forward"
    )
    assert "recompiled on 1 ranks of ml/train" in ddp_run.alert["annotations"]["description"]
    assert {k: v for k, v in ddp_run.rule_values.items() if MODEL_FRAME in k and v > 0}.keys() == {
        k for k in ddp_run.rule_values if k.startswith("1 ") and MODEL_FRAME in k
    }


@pytest.mark.servers
def test_torchrun_job_exits_cleanly_and_leaves_no_process(ddp_run: DdpRun) -> None:
    """Both ranks detach and exit 0 once released, and none of their processes outlives torchrun."""
    assert ddp_run.exit_codes == [0], ddp_run.output[-3000:]
    assert "RANK 0 DETACHED" in ddp_run.output and "RANK 1 DETACHED" in ddp_run.output
    assert not [s["pid"] for s in ddp_run.summaries.values() if alive(s["pid"])]
    assert all(refused(ddp_run.base_port + rank) for rank in (0, 1))


# -- torchrun, multiprocess mode: one endpoint per node ------------------------------------------------


@pytest.mark.workload
@pytest.mark.servers
def test_multiprocess_mode_serves_every_local_rank_from_one_endpoint(tmp_path: Path) -> None:
    """In multiprocess mode local rank 0 alone serves, on the base port, the series of both ranks with their rank labels."""
    base = free_port_pair()
    env = {
        "RECOMPPROF_EXPORTERS": "prometheus",
        "RECOMPPROF_PROMETHEUS_PORT": str(base),
        "RECOMPPROF_PROMETHEUS_MODE": "multiprocess",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "mp"),
    }
    with torchrun_job(tmp_path / "job", env) as job:
        summaries = job.summaries()
        assert summaries[0]["metrics_url"] == f"http://127.0.0.1:{base}/metrics"
        assert summaries[1]["metrics_url"] is None
        # Ranks mirror their totals into the shared directory shortly after each compile.
        deadline = time.monotonic() + 30
        while True:
            samples = scrape(summaries[0]["metrics_url"])
            per_rank = {r: recompiles_by_frame(samples, r) for r in ("0", "1")}
            ready = model_frame(per_rank["0"]) is not None and model_frame(per_rank["1"]) == 1
            if ready or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert model_frame(per_rank["0"]) == 0 and model_frame(per_rank["1"]) == 1
        info = {s.labels["rank"]: s.labels for s in samples["recompprof_process_info"]}
        assert sorted(info) == ["0", "1"]
        assert {lbl["local_rank"] for lbl in info.values()} == {"0", "1"}
        assert refused(base + 1)
        codes = job.finish()
    assert codes == [0], job.output()[-3000:]
    assert not [s["pid"] for s in summaries.values() if alive(s["pid"])]


# -- Slurm variables set by hand, no torchrun -----------------------------------------------------------


@pytest.mark.workload
def test_slurm_ranks_take_identity_run_id_log_names_and_labels_from_slurm_variables(
    tmp_path: Path,
) -> None:
    """Processes started with SLURM_PROCID/LOCALID/NTASKS/JOB_ID get those ranks, run id slurm-<job id>, logs and labels."""
    base = free_port_pair()
    env = {"RECOMPPROF_EXPORTERS": "prometheus", "RECOMPPROF_PROMETHEUS_PORT": str(base)}
    with slurm_job(tmp_path / "job", env, job_id="4242") as job:
        summaries = job.summaries()
        scrapes = {rank: scrape(s["metrics_url"]) for rank, s in summaries.items()}
        codes = job.finish()
    assert codes == [0, 0], job.output()[-3000:]
    run_dir = job.cwd / "recompprof-runs" / "slurm-4242"
    for rank, summary in summaries.items():
        assert summary["identity"] == {
            "rank": rank,
            "local_rank": rank,
            "world_size": 2,
            "local_world_size": 2,
            "run_id": "slurm-4242",
            "launcher": "slurm",
        }
        assert summary["metrics_url"] == f"http://127.0.0.1:{base + rank}/metrics"
        (info,) = scrapes[rank]["recompprof_process_info"]
        assert info.labels["rank"] == str(rank) and info.labels["launcher"] == "slurm"
        assert Path(summary["event_log"]) == run_dir / f"rank{rank:05d}-{summary['pid']}.jsonl"
    assert len(list(run_dir.iterdir())) == 2
    (model,) = [
        d
        for d in divergence.find(build_report(read_run(run_dir)))
        if d.frame.label.startswith(MODEL_FRAME)
    ]
    assert (model.ranks, model.first_steps) == ([1], {1: DIVERGE_STEP})


# -- the analysis itself, on event streams of known shape ---------------------------------------------

_FRAME = Frame(name="step_fn", file="/job/train.py", line=10)


def _start(rank: int) -> SessionStart:
    return SessionStart(
        time=0.0,
        rank=rank,
        step=0,
        run_id="job",
        local_rank=rank,
        world_size=4,
        host="h",
        pid=rank,
        versions={},
        mode="monitor",
        recompile_limit=8,
    )


def _compile(rank: int, step: int, recompile: bool, category: str = "size") -> Compile:
    reasons = (
        [Reason(text="guard failed", category=category, subject="L['x']", explains_change=True)]
        if recompile
        else []
    )
    return Compile(
        time=0.0,
        rank=rank,
        step=step,
        frame=_FRAME,
        compile_id=f"0/{step}",
        is_recompile=recompile,
        reasons=reasons,
    )


def test_ranks_that_agree_do_not_diverge() -> None:
    """Four ranks recompiling the same frame at the same steps for the same reason show no divergence."""
    events = [_start(r) for r in range(4)] + [
        _compile(r, s, s > 0) for r in range(4) for s in (0, 5)
    ]
    assert divergence.find(build_report(events)) == []
    assert "No frame diverges across ranks 0-3" in render_divergence(build_report(events))


def test_a_different_reason_category_on_one_rank_is_divergence() -> None:
    """Equal recompile counts but a python_constant change on rank 2 (size elsewhere) names rank 2 at its step."""
    events = [_start(r) for r in range(4)] + [_compile(r, 0, False) for r in range(4)]
    events += [_compile(r, 7, True, "python_constant" if r == 2 else "size") for r in range(4)]
    (found,) = divergence.find(build_report(events))
    assert (found.ranks, found.baseline_ranks, found.aspects, found.first_steps) == (
        [2],
        [0, 1, 3],
        ["reason categories"],
        {2: 7},
    )


def test_a_limit_hit_on_some_ranks_is_divergence_and_is_rendered() -> None:
    """Ranks 1 and 3 hitting the recompile limit at step 9 diverge, and the report's text names them and the step."""
    events = [_start(r) for r in range(4)] + [_compile(r, 0, False) for r in range(4)]
    events += [
        RecompileLimitHit(
            time=0.0,
            rank=r,
            step=9,
            frame=_FRAME,
            compile_id="0/9",
            limit="recompile_limit",
            value=8,
        )
        for r in (1, 3)
    ]
    report = build_report(events)
    (found,) = divergence.find(report)
    assert (found.ranks, found.aspects, found.first_steps) == ([1, 3], ["limit hits"], {1: 9, 3: 9})
    assert report.diverging_frames() == [report.frames[_FRAME.key]]
    text = render_text(report, width=250)
    assert (
        "step_fn (job/train.py:10): ranks 1, 3 at step 9 (limit hits differ from ranks 0, 2)"
        in text
    )


def test_many_ranks_group_into_ranges_in_the_matrix() -> None:
    """With more ranks than columns, the matrix groups ranks with equal cells into ranges."""
    events = [_start(r) for r in range(12)] + [_compile(r, 0, False) for r in range(12)]
    events += [_compile(r, 4, True) for r in (5, 6, 7)]
    text = render_divergence(build_report(events), width=250)
    assert "ranks 0-4, 8-11: 1/0; ranks 5-7: 2/1" in text
    assert "ranks 5-7 at step 4" in text
