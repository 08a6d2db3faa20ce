"""Clients that connect to the metrics port and send nothing (or trickle bytes) cost the training job no threads.

A real training job serves its metrics; hundreds of silent sockets are opened to that port. The job's
thread count must stay bounded, its file descriptors too, the silent sockets must be closed by the job
within the connection deadline, and a real scrape (urllib and a real Prometheus, over HTTPS with basic
auth as well) must still be answered while they are open.
"""

from __future__ import annotations

import base64
import contextlib
import os
import resource
import select
import socket
import ssl
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_helpers import running
from servers import free_port, prometheus, self_signed, train_process, wait_for_line

from recompprof_prometheus.bounded import (
    CONNECTION_SECONDS,
    HEADER_SECONDS,
    MAX_HANDLERS,
    MAX_QUEUED,
    MAX_WAITING,
)

IDLE = 500
CREDENTIALS = "scraper:s3cret"


def _raise_fd_limit(needed: int) -> None:
    """Allow this test ``needed`` descriptors if the hard limit does (many CI machines default to 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert soft == resource.RLIM_INFINITY or soft >= needed, (
        f"RLIMIT_NOFILE hard limit too low for {needed} sockets"
    )


def _count(pid: int, what: str) -> int:
    return len(os.listdir(f"/proc/{pid}/{what}"))


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset), without waiting."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def _wait_closed(socks: list[socket.socket], opened: list[float], timeout: float) -> list[float]:
    """Wait until the server closed every socket; returns how long each lived (connect to EOF)."""
    lived = [-1.0] * len(socks)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and min(lived) < 0:
        for i, sock in enumerate(socks):
            if lived[i] < 0 and _closed_by_peer(sock):
                lived[i] = time.monotonic() - opened[i]
        time.sleep(0.1)
    return lived


@pytest.mark.workload
@pytest.mark.servers
@pytest.mark.parametrize("secure", [False, True], ids=["http", "https+basic-auth"])
def test_idle_sockets_cost_the_job_no_threads_and_are_closed(tmp_path: Path, secure: bool) -> None:
    """500 silent sockets to a training job's metrics port add no thread and at most MAX_WAITING descriptors to the
    job, a scrape (urllib, and a real Prometheus) is answered while they are open, and the job closes every one of
    them within CONNECTION_SECONDS of its connect (the oldest at once once PER_PEER_WAITING from its address wait)."""
    _raise_fd_limit(IDLE + 256)
    port = free_port()
    env = {
        "RECOMPPROF_EXPORTERS": "prometheus",
        "RECOMPPROF_PROMETHEUS_PORT": str(port),
        "RECOMPPROF_RUN_DIR": str(tmp_path / "run"),
    }
    context: ssl.SSLContext | None = None
    headers: dict[str, str] = {}
    scrape: dict[str, object] = {}
    if secure:
        cert, key = self_signed(tmp_path)
        env |= {
            "RECOMPPROF_PROMETHEUS_CERTFILE": str(cert),
            "RECOMPPROF_PROMETHEUS_KEYFILE": str(key),
            "RECOMPPROF_PROMETHEUS_BASIC_AUTH": CREDENTIALS,
        }
        context = ssl.create_default_context(cafile=str(cert))
        headers = {"Authorization": "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()}
        user, _, password = CREDENTIALS.partition(":")
        scrape = {
            "scheme": "https",
            "tls_config": {"ca_file": str(cert)},
            "basic_auth": {"username": user, "password": password},
        }
    url = f"{'https' if secure else 'http'}://127.0.0.1:{port}/metrics"
    job = train_process(env, "--steps", "3", "--hold", "120")
    try:
        wait_for_line(job, "TRAINING DONE")
        with prometheus(
            tmp_path,
            extra_scrape_configs=[
                {
                    "job_name": "job",
                    "scrape_interval": "1s",
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                    **scrape,
                }
            ],
        ) as prom:
            prom.wait_for('up{job="job"} == 1')
            threads, fds = _count(job.pid, "task"), _count(job.pid, "fd")
            idle: list[socket.socket] = []
            opened: list[float] = []
            most_threads = threads
            try:
                for _ in range(IDLE):
                    idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
                    opened.append(time.monotonic())
                    if len(idle) % 50 == 0:
                        most_threads = max(most_threads, _count(job.pid, "task"))
                all_open_at = time.time()
                still_open = sum(not _closed_by_peer(s) for s in idle)
                assert still_open > 0, (
                    "every idle socket was closed before the scrape: nothing was tested"
                )

                began = time.monotonic()
                request = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(
                    request, context=context, timeout=CONNECTION_SECONDS
                ) as resp:
                    assert resp.status == 200 and b"torch_compile_compiles_total" in resp.read()
                answered_in = time.monotonic() - began
                most_threads = max(most_threads, _count(job.pid, "task"))
                job_fds = _count(job.pid, "fd")

                lived = _wait_closed(idle, opened, CONNECTION_SECONDS + 10)
                most_threads = max(most_threads, _count(job.pid, "task"))
            finally:
                for sock in idle:
                    sock.close()
            # Prometheus's last scrape before the deadline of the newest idle sockets began after all were open and worked.
            at = all_open_at + CONNECTION_SECONDS - 1
            sample = prom.api("query", query='up{job="job"}', time=f"{at:.3f}")["result"]
            stamp = prom.api("query", query='timestamp(up{job="job"})', time=f"{at:.3f}")["result"]
    finally:
        job.terminate()
        job.wait(30)
    print(
        f"\njob threads: {threads} before, at most {most_threads} with {IDLE} idle sockets; "
        f"descriptors {fds} before, {job_fds} with them; scrape answered in {answered_in:.3f} s; "
        f"idle sockets lived {min(lived):.2f}-{max(lived):.2f} s"
    )
    assert most_threads <= threads + MAX_HANDLERS
    assert job_fds <= fds + MAX_WAITING + MAX_QUEUED + MAX_HANDLERS
    assert answered_in < 5
    assert min(lived) >= 0, (
        f"{sum(t < 0 for t in lived)} idle socket(s) still open {CONNECTION_SECONDS + 10} s later"
    )
    assert max(lived) < CONNECTION_SECONDS + 5
    assert sample and sample[0]["value"][1] == "1"
    assert float(stamp[0]["value"][1]) >= all_open_at


def test_trickling_clients_hold_a_bounded_number_of_threads_until_the_deadline() -> None:
    """Clients that send part of a request and then a byte every half second occupy no handler thread
    (a request gets one only once its whole head is in), are cut off HEADER_SECONDS after connecting
    whatever they send, and a scrape is answered meanwhile, at once."""
    clients = 3 * MAX_HANDLERS
    with running(prometheus_port=free_port()) as exporter:
        assert exporter.server is not None
        port = exporter.server.port
        threads = threading.active_count()
        socks, opened = [], []
        for _ in range(clients):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.0\r\nX-Slow: ")
            socks.append(sock)
            opened.append(time.monotonic())
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.5):
                for sock in socks:
                    with contextlib.suppress(OSError):  # cut off by the server
                        sock.send(b"a")

        feeder = threading.Thread(target=trickle, daemon=True)
        feeder.start()
        try:
            time.sleep(1)
            most_threads = threading.active_count() - 1  # less the feeder
            began = time.monotonic()
            with urllib.request.urlopen(exporter.url, timeout=CONNECTION_SECONDS + 5) as resp:
                assert b"torch_compile_compiles_total" in resp.read()
            answered_in = time.monotonic() - began
            lived = _wait_closed(socks, opened, CONNECTION_SECONDS + 10)
        finally:
            stop.set()
            feeder.join()
            for sock in socks:
                sock.close()
    print(
        f"\n{clients} trickling clients: threads {threads} -> {most_threads}; scrape answered in {answered_in:.2f} s; "
        f"clients cut off after {min(lived):.2f}-{max(lived):.2f} s"
    )
    assert most_threads <= threads + MAX_HANDLERS
    assert answered_in < 2
    assert min(lived) >= 0
    assert HEADER_SECONDS - 1 < max(lived) < HEADER_SECONDS + 3
