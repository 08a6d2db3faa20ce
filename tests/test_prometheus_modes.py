"""Textfile, Pushgateway and multiprocess modes against real node_exporter, Pushgateway and Prometheus."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_helpers import compile_event, feed, frame, make_session
from servers import (
    free_port,
    http_get,
    node_exporter,
    prometheus,
    pushgateway,
    read_summary,
    train_process,
    wait_for_line,
)

from recompprof import _internal
from recompprof.testing import raise_internal_errors
from recompprof_prometheus import PrometheusExporter

pytestmark = pytest.mark.servers


def series(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {
        frozenset(s.labels.items()): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


def wait_until(fn, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def test_textfile_is_read_by_node_exporter(tmp_path: Path) -> None:
    """Textfile mode writes recompprof_<job>_<rank>.prom, rewrites it after new compiles, and node_exporter serves it."""
    textdir = tmp_path / "textfile"
    session = make_session(
        rank=3,
        prometheus_mode="textfile",
        prometheus_textfile_dir=textdir,
        prometheus_job="llama",
        prometheus_push_interval=0.2,
    )
    feed(session)
    exporter = PrometheusExporter(session.settings)
    exporter.start(session)
    try:
        path = textdir / "recompprof_llama_3.prom"
        assert wait_until(path.exists)
        with node_exporter(tmp_path, textdir) as url:
            body = http_get(f"{url}/metrics").decode()
            compiles = series(body, "torch_compile_compiles_total")
            assert compiles[frozenset({"rank": "3", "frame": frame().label}.items())] == 3
            assert series(body, "node_textfile_scrape_error") == {frozenset(): 0.0}
            session.aggregates.add_compile(compile_event(frame(), recompile=True))
            exporter.on_event(compile_event(frame(), recompile=True))

            def updated() -> bool:
                text = http_get(f"{url}/metrics").decode()
                return (
                    series(text, "torch_compile_compiles_total")[
                        frozenset({"rank": "3", "frame": frame().label}.items())
                    ]
                    == 4
                )

            assert wait_until(updated)
    finally:
        exporter.shutdown()
    assert (
        "torch_compile_compiles_total" in path.read_text()
    )  # the final state stays for the textfile collector
    assert [p.name for p in textdir.iterdir()] == [path.name]  # no temporary files left behind


def test_unwritable_textfile_dir_is_logged_once_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A textfile directory that cannot be created is one warning and a count per failed write, never an exception."""
    raise_internal_errors(
        False
    )  # production mode for this test (the autouse fixture restores strict)
    caplog.set_level(logging.WARNING, logger="recompprof")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    session = make_session(
        prometheus_mode="textfile",
        prometheus_textfile_dir=blocker / "sub",
        prometheus_push_interval=0.1,
    )
    exporter = PrometheusExporter(session.settings)
    exporter.start(session)
    # a periodic write has failed (and the final one at shutdown fails too)
    assert wait_until(lambda: _internal.counts().get("prometheus.textfile", 0) >= 1)
    exporter.shutdown()
    assert _internal.counts()["prometheus.textfile"] >= 2
    assert len([r for r in caplog.records if "prometheus.textfile" in r.getMessage()]) == 1


def test_pushgateway_push_repush_and_delete(tmp_path: Path) -> None:
    """Pushgateway mode pushes group {job, rank}, re-pushes new totals, and deletes the group on a clean shutdown."""
    with pushgateway(tmp_path) as gateway:
        session = make_session(
            rank=2,
            prometheus_mode="pushgateway",
            prometheus_pushgateway_url=gateway,
            prometheus_job="trainjob",
            prometheus_push_interval=0.2,
        )
        feed(session)
        exporter = PrometheusExporter(session.settings)
        exporter.start(session)
        key = frozenset(
            {"job": "trainjob", "rank": "2", "frame": frame().label, "instance": ""}.items()
        )
        try:
            assert wait_until(
                lambda: (
                    key
                    in series(
                        http_get(f"{gateway}/metrics").decode(), "torch_compile_compiles_total"
                    )
                )
            )
            body = http_get(f"{gateway}/metrics").decode()
            assert series(body, "torch_compile_compiles_total")[key] == 3
            pushed = series(body, "push_time_seconds")
            session.aggregates.add_compile(compile_event(frame(), recompile=True))
            exporter.on_event(compile_event(frame(), recompile=True))

            def repushed() -> bool:
                text = http_get(f"{gateway}/metrics").decode()
                return (
                    series(text, "torch_compile_compiles_total").get(key) == 4
                    and series(text, "push_time_seconds") != pushed
                )

            assert wait_until(repushed)
            groups = json.loads(http_get(f"{gateway}/api/v1/metrics"))["data"]
            assert [g["labels"] for g in groups] == [{"job": "trainjob", "rank": "2"}]
        finally:
            exporter.shutdown()
        # The Pushgateway answers a DELETE (202 Accepted) before it has applied it: wait for that, bounded.
        assert wait_until(
            lambda: "torch_compile_compiles_total" not in http_get(f"{gateway}/metrics").decode()
        )
        assert json.loads(http_get(f"{gateway}/api/v1/metrics"))["data"] == []


def test_unreachable_pushgateway_is_logged_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pushing to a port nobody listens on is one warning and a count per failed push, and shutdown still returns."""
    raise_internal_errors(
        False
    )  # production mode for this test (the autouse fixture restores strict)
    caplog.set_level(logging.WARNING, logger="recompprof")
    session = make_session(
        prometheus_mode="pushgateway",
        prometheus_pushgateway_url=f"http://127.0.0.1:{free_port()}",
        prometheus_push_interval=0.1,
    )
    exporter = PrometheusExporter(session.settings)
    exporter.start(session)
    # a periodic write has failed (and the final one at shutdown fails too)
    assert wait_until(lambda: _internal.counts().get("prometheus.pushgateway", 0) >= 1)
    started = time.monotonic()
    exporter.shutdown()
    assert time.monotonic() - started < 15
    assert _internal.counts()["prometheus.pushgateway"] >= 2
    records = [r for r in caplog.records if "prometheus.pushgateway" in r.getMessage()]
    # A condition of the machine (URLError is an OSError): one line with the reason, the traceback only at DEBUG.
    assert (
        len(records) == 1
        and records[0].exc_info is None
        and "Connection refused" in records[0].getMessage()
    )


@pytest.mark.workload
def test_multiprocess_two_ranks_behind_one_endpoint(tmp_path: Path) -> None:
    """Two training processes (local ranks 0 and 1) write one multiprocess dir; local rank 0's one endpoint, scraped by Prometheus, has both ranks' exact totals."""
    port, mpdir = free_port(), tmp_path / "multiproc"
    mpdir.mkdir(mode=0o700)
    (mpdir / "counter_recompprof-modes-r1.db").write_bytes(
        b"stale from an earlier attempt of this run"
    )  # removed by rank 1 at start
    procs, summaries = [], []
    for rank in (0, 1):
        summary = tmp_path / f"summary{rank}.json"
        summaries.append(summary)
        env = {
            "RECOMPPROF_EXPORTERS": "prometheus",
            "RECOMPPROF_PROMETHEUS_MODE": "multiprocess",
            "RECOMPPROF_PROMETHEUS_PORT": str(port),
            "PROMETHEUS_MULTIPROC_DIR": str(mpdir),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "RECOMPPROF_RUN_ID": "modes",  # one job: its ranks share a run id
            "RECOMPPROF_RUN_DIR": str(tmp_path / "run"),
            "RECOMPPROF_PROMETHEUS_PUSH_INTERVAL": "1",
        }
        procs.append(
            train_process(
                env,
                "--steps",
                "6",
                "--changes",
                str(2 + rank),
                "--hold",
                "60",
                "--summary",
                str(summary),
            )
        )
    try:
        for proc in procs:
            wait_for_line(proc, "TRAINING DONE", timeout=300)
        expected = [read_summary(s) for s in summaries]
        with prometheus(tmp_path, [f"127.0.0.1:{port}"]) as prom:
            for rank, want in enumerate(expected):
                prom.wait_for(
                    f'sum(torch_compile_compiles_total{{rank="{rank}"}}) == {want["compiles"]}',
                    timeout=60,
                )
                prom.wait_for(
                    f'sum(torch_compile_recompiles_total{{rank="{rank}"}}) == {want["recompiles"]}',
                    timeout=30,
                )
            assert len(prom.targets_up()) == 1
            assert {r["metric"]["rank"] for r in prom.query("recompprof_build_info")} == {"0", "1"}
            assert (
                prom.scalar("count(torch_compile_phase_seconds_total)") == 12
            )  # 6 phases x 2 ranks
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
    assert sorted(p.name for p in mpdir.glob("*.db")) == sorted(  # beside each rank's lock file
        f"{kind}_recompprof-modes-r{rank}.db"
        for kind in ("counter", "gauge_max", "histogram")
        for rank in (0, 1)
    )


@pytest.mark.workload
def test_sigterm_flushes_and_deletes_the_pushgateway_group(tmp_path: Path) -> None:
    """A training process stopped with SIGTERM pushes its final totals and deletes its Pushgateway group before exiting."""
    with pushgateway(tmp_path) as gateway:
        summary = tmp_path / "summary.json"
        proc = train_process(
            {
                "RECOMPPROF_EXPORTERS": "prometheus",
                "RECOMPPROF_PROMETHEUS_MODE": "pushgateway",
                "RECOMPPROF_PROMETHEUS_PUSHGATEWAY_URL": gateway,
                "RECOMPPROF_PROMETHEUS_JOB": "sigterm",
                "RECOMPPROF_PROMETHEUS_PUSH_INTERVAL": "0.5",
                "RECOMPPROF_RUN_DIR": str(tmp_path / "run"),
            },
            "--steps",
            "6",
            "--changes",
            "2",
            "--hold",
            "120",
            "--summary",
            str(summary),
        )
        try:
            wait_for_line(proc, "TRAINING DONE", timeout=300)
            want = read_summary(summary)["compiles"]

            def pushed_final() -> bool:
                text = http_get(f"{gateway}/metrics").decode()
                return (
                    sum(
                        v
                        for k, v in series(text, "torch_compile_compiles_total").items()
                        if ("job", "sigterm") in k
                    )
                    == want
                )

            assert wait_until(pushed_final, timeout=30)
            proc.terminate()
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0
        assert json.loads(http_get(f"{gateway}/api/v1/metrics"))["data"] == []
