"""Final values reach Prometheus: at detach the pull endpoint keeps serving until a scrape has read them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry
from servers import free_port, http_get, prometheus, wait_http

from recompprof_prometheus import server

pytestmark = pytest.mark.servers

JOB = textwrap.dedent("""
    import sys, time, torch, recompprof
    port, linger, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    fn = torch.compile(lambda x: (x * 2).sum(), backend="eager")
    with recompprof.attach(exporters=["prometheus"], prometheus_port=port, prometheus_linger_seconds=linger,
                           step_source="manual", event_log=False) as session:
        for step in range(steps):
            fn(torch.ones(4))
            session.step()
            time.sleep(0.1)
        fn(torch.ones(7, 3))  # the end of the run: a recompile and the last step, just before detach
        session.step()
        detach_started = time.monotonic()
    print(f"LINGERED {time.monotonic() - detach_started:.2f}", flush=True)
""")


@pytest.mark.workload
def test_final_totals_are_scraped_after_detach(tmp_path: Path) -> None:
    """A real Prometheus (1 s scrapes) holds the job's last step and its last recompile, made just before detach;
    the endpoint lingered less than its bound (it stops as soon as a scrape read the final values)."""
    port, steps = free_port(), 40
    script = tmp_path / "job.py"
    script.write_text(JOB)
    with prometheus(tmp_path, [f"127.0.0.1:{port}"], scrape_interval="1s") as prom:
        out = subprocess.run(
            [sys.executable, str(script), str(port), "5", str(steps)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        lingered = float(out.stdout.split("LINGERED ")[1].split()[0])
        # 0 when a scrape that began after detach's linger started had already finished (on a loaded machine the
        # handler can start a scrape sent just before): it read the final values, so there is nothing to wait for.
        assert 0 <= lingered < 5
        last_step = prom.wait_for("max_over_time(torch_compile_training_step[5m])", timeout=10)
        assert float(last_step[0]["value"][1]) == steps + 1
        recompiles = prom.query("max_over_time(torch_compile_recompiles_total[5m])")
        assert sum(float(r["value"][1]) for r in recompiles) == 1
        lost = prom.query("max_over_time(torch_compile_recompile_seconds_total[5m])")
        assert [r["metric"]["reason"] for r in lost] == ["ndim"]
        assert float(lost[0]["value"][1]) > 0


def test_linger_is_bounded_and_ends_at_the_next_scrape() -> None:
    """Auto linger never waits for a server nobody scraped; an explicit bound waits at most that long for a
    first scrape; a scrape that starts after the linger began ends it at once."""
    srv = server.MetricsServer(CollectorRegistry(), "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        assert srv.linger(None) == 0.0
        started = time.monotonic()
        assert 0.5 <= srv.linger(0.5) < 1.5 and time.monotonic() - started < 1.5
        wait_http(url)
        timer = threading.Timer(0.3, lambda: http_get(url))
        timer.start()
        waited = srv.linger(10)
        timer.join()
        assert 0.25 <= waited < 3
        assert srv.scrapes.count == 2
    finally:
        srv.close()
