"""A rank compiling while the others wait in a collective, for real: torchrun, two ranks, gloo, CPU.

In each job both ranks compile ``Model.forward`` for the same batch and meet in an all-reduce; then
rank 1 alone gets a batch of another size and recompiles it, slowly (its backend sleeps), while rank
0 goes straight into the next all-reduce (``tests/workloads/stall_ranks.py``).

- With a short process-group timeout, rank 0 fails with torch's own collective timeout and torchrun
  ends the job. Scraped during the stall, rank 1's endpoint says it is compiling the frame, for a
  growing number of seconds, and rank 0's that it is not; afterwards rank 1's log, ``report`` and
  ``check`` name rank 1, the frame, what changed and how long the compile had run.
- Without the timeout, a real Prometheus scraping both ranks and evaluating the generated rules
  (low thresholds) fires TorchCompileLongCompile and TorchCompileRanksOutOfStep while the compile
  still runs, and resolves them once it has ended and the ranks meet again.

Each job runs in its own process group, killed if anything is left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from alerting import FAST
from rank_jobs import TORCHRUN, alive, job_env, refused, scrape
from servers import REPO, WORKLOADS, free_port_pair, prometheus

import recompprof
from recompprof._model.events import Compile, CompileStart, Event, SessionEnd

sys.path.insert(0, str(REPO))

from needs import starts

from dashboards import rules

STALL_RANK = 1
PG_TIMEOUT = 5  # seconds: the short process-group timeout of the first job
FRAME = "Model.forward (workloads/stall_ranks.py:"
JOB_TIMEOUT = 180.0  # seconds for a whole job, start to exit, on a busy 2-core machine
# The generated rules with thresholds a test can wait for: a compile running for more than 3 s (held
# for 1 s), ranks out of step for 3 s.
STALL_RULES = FAST.replace(long_compile_seconds=3, long_compile_for="1s", out_of_step_for="3s")
STALL_ALERTS = ("TorchCompileLongCompile", "TorchCompileRanksOutOfStep")
# The report's and check's line for a rank whose log ends with a compile running.
RUNNING_AT_END = re.compile(
    r"rank 1 was compiling `Model\.forward` \(recompile: (?P<cause>[^)]*)\) "
    r"for (?P<bound>at least )?(?P<seconds>\d+) s when the run ended"
)


@dataclasses.dataclass
class Job:
    """One torchrun job of the stall workload; each rank's stdout and stderr go to its own file."""

    proc: subprocess.Popen[bytes]
    tmp: Path
    base_port: int

    @property
    def run_dir(self) -> Path:
        return self.tmp / "run"

    def rank_output(self, rank: int, stream: str) -> str:
        """What rank ``rank`` wrote to ``stream`` (``stdout`` or ``stderr``), as torchrun redirected it."""
        found = list((self.tmp / "logs").glob(f"*/attempt_0/{rank}/{stream}.log"))
        return found[0].read_text(errors="replace") if found else ""

    def output(self) -> str:
        """torchrun's own output (its agent's log and the failure summary)."""
        return (self.tmp / "torchrun.log").read_text(errors="replace")

    def pids(self) -> dict[int, int]:
        """Each rank's pid, from its event log's name (``rank<r>-<pid>.jsonl``)."""
        return {
            int(p.stem[4:9]): int(p.stem.split("-")[1]) for p in self.run_dir.glob("rank*.jsonl")
        }

    def events(self) -> dict[int, list[Event]]:
        """Every rank's events, read back with the public reader."""
        by_rank: dict[int, list[Event]] = {}
        for event in recompprof.read_run(self.run_dir):
            by_rank.setdefault(event.rank, []).append(event)
        return by_rank

    def wait(self, timeout: float = JOB_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the job did not end within {timeout} s:\n{self.output()[-3000:]}"
            ) from None


@contextlib.contextmanager
def stall_job(tmp: Path, base: int, *args: str) -> Iterator[Job]:
    """``torchrun --standalone --nproc-per-node 2`` running the stall workload with ``args``; both ranks
    export Prometheus metrics (rank r on ``base`` + r) and log into ``tmp/run``."""
    tmp.mkdir(parents=True, exist_ok=True)
    cmd = [
        TORCHRUN,
        "--standalone",
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(tmp / "logs"),
        "--redirects",
        "3",
        str(WORKLOADS / "stall_ranks.py"),
        "--stall-rank",
        str(STALL_RANK),
        "--ready-dir",
        str(tmp / "ready"),
        *args,
    ]
    env = job_env(
        {
            "RECOMPPROF_EXPORTERS": "prometheus",
            "RECOMPPROF_PROMETHEUS_PORT": str(base),
            "RECOMPPROF_RUN_DIR": str(tmp / "run"),
        }
    )
    with open(tmp / "torchrun.log", "wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    job = Job(proc, tmp, base)
    try:
        yield job
    finally:
        # torchrun starts each rank in a session of its own: kill what is left of each.
        for pid in [proc.pid, *job.pids().values()]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        proc.wait(10)


@dataclasses.dataclass(frozen=True)
class Gauges:
    """A rank's compile status, scraped from its endpoint between ``at`` and ``until`` (time.time())."""

    at: float
    until: float
    compiling: float
    running: dict[str, float]  # torch_compile_compile_running_seconds by frame label


def gauges(job: Job, rank: int) -> Gauges | None:
    """Scrape rank ``rank``'s endpoint; None while it serves nothing yet."""
    at = time.time()
    try:
        samples = scrape(f"http://127.0.0.1:{job.base_port + rank}/metrics")
    except OSError:
        return None
    (compiling,) = [
        s.value for s in samples["torch_compile_compiling"] if s.labels["rank"] == str(rank)
    ]
    running = {
        s.labels["frame"]: s.value
        for s in samples.get("torch_compile_compile_running_seconds", [])
        if s.labels["rank"] == str(rank)
    }
    return Gauges(at, time.time(), compiling, running)


def _recompile_start(events: list[Event]) -> CompileStart:
    (start,) = [e for e in events if isinstance(e, CompileStart) and e.is_recompile]
    return start


def _session_end(events: list[Event]) -> SessionEnd:
    (end,) = [e for e in events if isinstance(e, SessionEnd)]
    return end


def _recompprof(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recompprof._cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )


# -- a short process-group timeout: the job dies of torch's collective timeout -------------------------


@dataclasses.dataclass
class TimedOut:
    exit_code: int
    ended: float  # time.time() once torchrun had exited
    stalled: list[tuple[Gauges, Gauges]]  # (rank 1, rank 0), scraped twice during the stall
    rank0_stderr: str
    output: str
    pids: dict[int, int]
    left: list[int]  # rank pids still alive once torchrun had exited
    events: dict[int, list[Event]]
    base_port: int
    report: subprocess.CompletedProcess[str]
    check: subprocess.CompletedProcess[str]
    check_without_flag: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
@starts("workload")
def timed_out(tmp_path_factory: pytest.TempPathFactory) -> TimedOut:
    """The job with a process-group timeout of PG_TIMEOUT seconds and a recompile of 60 s on rank 1,
    scraped twice, a second apart, as soon as rank 1 reports the compile."""
    tmp = tmp_path_factory.mktemp("timed-out")
    with stall_job(
        tmp, free_port_pair(), "--pg-timeout", str(PG_TIMEOUT), "--compile-seconds", "60"
    ) as job:
        deadline = time.monotonic() + JOB_TIMEOUT
        # Past the warm-up compile: the ranks met in their first all-reduce, and rank 1 compiles again.
        while "IN STEP" not in job.rank_output(STALL_RANK, "stdout") or (
            (status := gauges(job, STALL_RANK)) is None or status.compiling != 1
        ):
            assert time.monotonic() < deadline and job.proc.poll() is None, job.output()[-3000:]
            time.sleep(0.1)
        stalled = []
        for _ in range(2):
            one, zero = gauges(job, STALL_RANK), gauges(job, 0)
            assert one is not None and zero is not None
            stalled.append((one, zero))
            time.sleep(1.0)
        code = job.wait()
        ended = time.time()
        pids = job.pids()
        left = [pid for pid in pids.values() if alive(pid)]
    run = str(job.run_dir)
    return TimedOut(
        code,
        ended,
        stalled,
        job.rank_output(0, "stderr"),
        job.output(),
        pids,
        left,
        job.events(),
        job.base_port,
        _recompprof("report", run, "--width", "250"),
        _recompprof("check", run, "--fail-on-running-compile"),
        _recompprof("check", run, "--max-recompiles", "5"),
    )


def test_the_waiting_rank_fails_with_torchs_collective_timeout(timed_out: TimedOut) -> None:
    """Rank 0 fails in the all-reduce with torch's (gloo's) own timeout after PG_TIMEOUT seconds, torchrun
    stops rank 1 with SIGTERM, the job exits non-zero and no process of it is left."""
    assert timed_out.exit_code != 0
    assert re.search(
        rf"RuntimeError: .*Timed out waiting {PG_TIMEOUT * 1000}ms for recv operation",
        timed_out.rank0_stderr,
    ), timed_out.rank0_stderr[-3000:]
    assert "in all_reduce" in timed_out.rank0_stderr
    killed = rf"exitcode\s*: -{int(signal.SIGTERM)} \(pid: {timed_out.pids[STALL_RANK]}\)"
    assert re.search(killed, timed_out.output), timed_out.output[-3000:]
    assert sorted(timed_out.pids) == [0, 1] and timed_out.left == []
    assert all(refused(timed_out.base_port + rank) for rank in (0, 1))


def test_live_gauges_during_the_stall_name_the_compiling_rank_and_frame(
    timed_out: TimedOut,
) -> None:
    """Scraped during the stall: rank 1 exports compiling 1 and the running seconds of its one compile,
    under the model's frame label, growing between scrapes; rank 0 exports compiling 0 and no running compile."""
    (first_one, _), (later_one, _) = timed_out.stalled
    for one, zero in timed_out.stalled:
        assert (one.compiling, zero.compiling) == (1, 0)
        assert zero.running == {}
        [(frame, _)] = one.running.items()
        assert frame.startswith(FRAME)
    [first], [later] = first_one.running.values(), later_one.running.values()
    assert later - first >= later_one.at - first_one.until >= 0.9
    start = _recompile_start(timed_out.events[STALL_RANK])
    # The age is counted from the compile's start, at the moment of the scrape.
    assert first_one.at - start.time - 0.01 <= first <= first_one.until - start.time + 0.01


def test_the_compiling_ranks_log_names_the_compile_the_job_died_in(timed_out: TimedOut) -> None:
    """Rank 1's session_end (written at torchrun's SIGTERM) names the running recompile, its trigger (dim 0
    of ``L['x']``) and how long it ran: at least as long as the gauges showed and rank 0 waited, no longer
    than the job lived; rank 0's session_end names no compile."""
    events = timed_out.events[STALL_RANK]
    start = _recompile_start(events)
    assert not [e for e in events if isinstance(e, Compile) and e.compile_id == start.compile_id]
    compiling = _session_end(events).compiling
    assert compiling is not None
    assert (compiling.frame, compiling.compile_id, compiling.started) == (
        start.frame,
        start.compile_id,
        start.time,
    )
    assert compiling.frame.name == "Model.forward"
    assert compiling.reason is not None and (
        compiling.reason.category,
        compiling.reason.subject,
    ) == ("size", "L['x']")
    zero_end = _session_end(timed_out.events[0])
    assert zero_end.compiling is None
    last_scraped = max(one.running[f] for one, _ in timed_out.stalled for f in one.running)
    assert compiling.seconds >= last_scraped
    assert (
        compiling.seconds >= zero_end.time - start.time >= PG_TIMEOUT - 1
    )  # rank 0 waited out its timeout
    assert compiling.seconds <= timed_out.ended - start.time


def _stall_seconds(timed_out: TimedOut) -> float:
    compiling = _session_end(timed_out.events[STALL_RANK]).compiling
    assert compiling is not None
    return compiling.seconds


def test_report_names_the_rank_frame_cause_and_stall_length(timed_out: TimedOut) -> None:
    """``recompprof report`` says rank 1 was compiling ``Model.forward`` (size of ``L['x']`` dim 0 changed)
    for as long as its session_end says when the run ended, and that rank 0 was not compiling."""
    assert timed_out.report.returncode == 0, timed_out.report.stderr
    found = RUNNING_AT_END.search(timed_out.report.stdout)
    assert found, timed_out.report.stdout
    assert "size of `L['x']` dim 0" in found["cause"]
    assert not found["bound"] and abs(int(found["seconds"]) - _stall_seconds(timed_out)) <= 1
    assert timed_out.report.stdout[found.end() :].startswith("; rank 0 was not compiling")


def test_check_fails_on_the_compile_running_at_the_end(timed_out: TimedOut) -> None:
    """``check --fail-on-running-compile`` exits 1 with one FAIL line naming rank 1, the frame, the cause
    and the stall length; without the flag the running compile fails nothing."""
    assert timed_out.check.returncode == 1, timed_out.check.stdout + timed_out.check.stderr
    fails = [
        line
        for line in timed_out.check.stdout.splitlines()
        if line.startswith("FAIL compile_running_at_end: ")
    ]
    assert len(fails) == 1, timed_out.check.stdout
    found = RUNNING_AT_END.search(fails[0])
    assert found and "size of `L['x']` dim 0" in found["cause"], fails[0]
    assert abs(int(found["seconds"]) - _stall_seconds(timed_out)) <= 1
    assert timed_out.check_without_flag.returncode == 0, timed_out.check_without_flag.stdout


# -- no timeout: the stall alerts fire in a real Prometheus while the compile runs ---------------------

COMPILE_SECONDS = 20.0  # the stalling recompile of the second job


@dataclasses.dataclass
class Alerted:
    fired: dict[
        str, tuple[float, dict[str, Any]]
    ]  # alert name -> (time.time() first seen firing, the alert)
    resolved: float  # time.time() once neither stall alert was active any more
    compile_start: CompileStart
    compile_end: float  # time.time() at which rank 1's recompile ended (its compile event)
    exit_code: int
    stdout: dict[int, str]
    pids: dict[int, int]
    left: list[int]  # rank pids still alive once torchrun had exited
    base_port: int


def _active(prom: Any) -> dict[str, dict[str, Any]]:
    """The stall alerts Prometheus holds active (pending or firing), by name."""
    return {
        a["labels"]["alertname"]: a
        for a in prom.api("alerts")["alerts"]
        if a["labels"]["alertname"] in STALL_ALERTS
    }


@pytest.fixture(scope="module")
@starts("servers", "workload")
def alerted(tmp_path_factory: pytest.TempPathFactory) -> Alerted:
    """The job without a process-group timeout, rank 1 recompiling for COMPILE_SECONDS, both ranks
    scraped every second by Prometheus evaluating STALL_RULES every second; the ranks hold after the
    stall until both alerts have resolved."""
    tmp = tmp_path_factory.mktemp("alerted")
    rules_file = tmp / "rules.yaml"
    rules_file.write_text(rules.render(STALL_RULES))
    base = free_port_pair()
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
    with (
        prometheus(
            tmp, (), job="unused", extra_scrape_configs=[scrape_config], rule_files=[rules_file]
        ) as prom,
        stall_job(
            tmp / "job",
            base,
            "--compile-seconds",
            str(COMPILE_SECONDS),
            "--hold",
            str(JOB_TIMEOUT),
            "--release",
            str(tmp / "release"),
        ) as job,
    ):
        fired: dict[str, tuple[float, dict[str, Any]]] = {}
        deadline, compiled = time.monotonic() + JOB_TIMEOUT, None
        while True:
            assert time.monotonic() < deadline and job.proc.poll() is None, (
                fired,
                job.output()[-3000:],
            )
            active, now = _active(prom), time.time()
            for name, alert in active.items():
                if alert["state"] == "firing" and name not in fired:
                    fired[name] = (now, alert)
            if len(fired) == len(STALL_ALERTS) and not active:
                break
            if compiled is None and f"RANK {STALL_RANK} DONE" in job.rank_output(
                STALL_RANK, "stdout"
            ):
                compiled = time.monotonic()
            # Once the compile is over, the alerts have a few scrapes to resolve, and none left to fire.
            assert compiled is None or time.monotonic() < compiled + 20, (
                "not fired and resolved",
                fired,
                active,
            )
            time.sleep(0.25)
        resolved = time.time()
        (tmp / "release").touch()
        code = job.wait()
        pids = job.pids()
        left = [pid for pid in pids.values() if alive(pid)]
    events = job.events()[STALL_RANK]
    start = _recompile_start(events)
    (done,) = [e for e in events if isinstance(e, Compile) and e.compile_id == start.compile_id]
    return Alerted(
        fired,
        resolved,
        start,
        done.start_time + done.duration,
        code,
        {rank: job.rank_output(rank, "stdout") for rank in (0, 1)},
        pids,
        left,
        job.base_port,
    )


def _since_epoch(stamp: str) -> float:
    """Prometheus' RFC 3339 time (nanoseconds, ``Z``) as seconds since the epoch."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float(f"0.{fraction or 0}")


@pytest.mark.servers
def test_long_compile_alert_fires_for_rank_1_and_the_frame_while_it_compiles(
    alerted: Alerted,
) -> None:
    """TorchCompileLongCompile fires for rank 1 and the model's frame after the compile passed the threshold
    and before it ended, with the compile's age as its value."""
    seen, alert = alerted.fired["TorchCompileLongCompile"]
    assert alerted.compile_start.time < seen < alerted.compile_end
    labels = alert["labels"]
    assert (labels["namespace"], labels["job"], labels["rank"], labels["severity"]) == (
        "ml",
        "train",
        "1",
        "warning",
    )
    assert labels["frame"].startswith(FRAME)
    assert STALL_RULES.long_compile_seconds < float(alert["value"]) < COMPILE_SECONDS
    assert (
        _since_epoch(alert["activeAt"])
        >= alerted.compile_start.time + STALL_RULES.long_compile_seconds - 1
    )
    assert (
        f"Rank 1 of ml/train has been compiling frame {labels['frame']} for "
        in alert["annotations"]["description"]
    )


@pytest.mark.servers
def test_ranks_out_of_step_alert_names_rank_1_while_it_compiles(alerted: Alerted) -> None:
    """TorchCompileRanksOutOfStep fires for the job, one rank compiling, before the compile ended; its
    description names rank 1, the frame and how long it has compiled."""
    seen, alert = alerted.fired["TorchCompileRanksOutOfStep"]
    assert alerted.compile_start.time < seen < alerted.compile_end
    assert {k: alert["labels"][k] for k in ("namespace", "job", "severity")} == {
        "namespace": "ml",
        "job": "train",
        "severity": "warning",
    }
    assert "rank" not in alert["labels"]
    assert float(alert["value"]) == 1
    assert _since_epoch(alert["activeAt"]) >= alerted.compile_start.time - 1
    assert re.search(
        rf"Compiling: rank 1 on {re.escape(FRAME)}\d+\) for \d", alert["annotations"]["description"]
    ), alert["annotations"]
    assert "rank 0" not in alert["annotations"]["description"]


@pytest.mark.servers
def test_stall_alerts_resolve_once_the_compile_ends_and_the_job_exits_cleanly(
    alerted: Alerted,
) -> None:
    """Both alerts resolve after the compile ended (within a few scrapes), the ranks meet in their all-reduce,
    and the job exits 0 leaving no process."""
    assert alerted.compile_end < alerted.resolved < alerted.compile_end + 15
    assert alerted.compile_end - alerted.compile_start.time >= COMPILE_SECONDS
    assert all(f"RANK {rank} DONE" in alerted.stdout[rank] for rank in (0, 1)), alerted.stdout
    assert alerted.exit_code == 0
    assert sorted(alerted.pids) == [0, 1] and alerted.left == []
    assert all(refused(alerted.base_port + rank) for rank in (0, 1))
