"""Two jobs pointed at one Prometheus multiprocess directory serve only their own series, and say so.

A shared ``PROMETHEUS_MULTIPROC_DIR`` (set once in a cluster profile, or a CI runner's environment)
held two jobs' files side by side, and each job's endpoint summed in the other's: job A served job B's
ranks with no warning. The files are now keyed by job (run id) and rank; local rank 0 serves its own
job's, and logs one warning naming the directory and counting the other job's files.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import free_port, http_get, train_process, wait_for_line

from recompprof_prometheus.multiprocess import job_key


def _ranks(url: str) -> dict[str, float]:
    """Compiles served at ``url``, by rank label."""
    text = http_get(url).decode()
    compiles: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "torch_compile_compiles":
            for sample in family.samples:
                rank = sample.labels["rank"]
                compiles[rank] = compiles.get(rank, 0.0) + sample.value
    return compiles


@pytest.mark.workload
def test_two_jobs_sharing_a_multiprocess_dir_serve_only_their_own_ranks(tmp_path: Path) -> None:
    """Job A (run id job-a, rank 0) and job B (run id job-b, rank 1), each its node's local rank 0, share
    one PROMETHEUS_MULTIPROC_DIR: A's endpoint serves rank 0 only, B's rank 1 only, and each process
    logs a warning naming PROMETHEUS_MULTIPROC_DIR, the directory and the 3 files of the other job."""
    mpdir = tmp_path / "shared-multiproc"
    jobs = {"job-a": ("0", free_port()), "job-b": ("1", free_port())}
    procs = {}
    for run_id, (rank, port) in jobs.items():
        env = {
            "RECOMPPROF_EXPORTERS": "prometheus",
            "RECOMPPROF_PROMETHEUS_MODE": "multiprocess",
            "RECOMPPROF_PROMETHEUS_PORT": str(port),
            "RECOMPPROF_PROMETHEUS_PUSH_INTERVAL": "1",
            "PROMETHEUS_MULTIPROC_DIR": str(mpdir),
            "RECOMPPROF_RUN_ID": run_id,
            "RECOMPPROF_RUN_DIR": str(tmp_path / run_id),
            "RANK": rank,
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "1",
        }
        procs[run_id] = train_process(env, "--steps", "4", "--hold", "90")
    served: dict[str, dict[str, float]] = {}
    try:
        for proc in procs.values():
            wait_for_line(proc, "TRAINING DONE", timeout=300)
        deadline = time.monotonic() + 30
        while True:  # both jobs' files written (the mirror refreshes every second)
            served = {
                run_id: _ranks(f"http://127.0.0.1:{port}/metrics")
                for run_id, (_, port) in jobs.items()
            }
            if all(served[run_id].get(rank, 0) > 0 for run_id, (rank, _) in jobs.items()):
                break
            assert time.monotonic() < deadline, served
            time.sleep(0.5)
        time.sleep(1.5)  # one more refresh of both jobs' files
        served = {
            run_id: _ranks(f"http://127.0.0.1:{port}/metrics") for run_id, (_, port) in jobs.items()
        }
    finally:
        for proc in procs.values():
            proc.terminate()
        output = {run_id: proc.communicate(timeout=60)[0] for run_id, proc in procs.items()}
    print(f"\nserved: {served}")
    assert set(served["job-a"]) == {"0"}, served
    assert set(served["job-b"]) == {"1"}, served
    for run_id, text in output.items():
        warnings = [
            line for line in text.splitlines() if "another job" in line or "other job" in line
        ]
        print(f"{run_id}: {warnings}")
        assert len(warnings) == 1, text[-3000:]
        assert "PROMETHEUS_MULTIPROC_DIR" in warnings[0] and str(mpdir) in warnings[0]
        assert "3 metric files" in warnings[0]


def test_job_keys_are_distinct_and_safe_in_file_names() -> None:
    """Run ids that differ only in punctuation get different keys; a key has no ``_`` (which
    MultiProcessCollector splits file names on) and no path separator, and a long one is cut to 96."""
    ids = ["slurm-42.0", "slurm_42.0", "slurm 42.0", "slurm/42.0", "x" * 300, "x" * 299 + "y", "é"]
    keys = [job_key(run_id) for run_id in ids]
    assert keys[0] == "slurm-42.0"
    assert len(set(keys)) == len(ids)
    assert all("_" not in key and "/" not in key and len(key) <= 96 for key in keys)
