"""Start and stop the real servers tests talk to: Prometheus, Alertmanager, Pushgateway, node_exporter,
moto's S3 server.

Each runs on 127.0.0.1 with its storage under a temporary directory and is stopped by the caller
(use them as context managers). Tests that need a missing binary skip with the install command.
Around them: free and occupied ports, a self-signed certificate, and the CPU training workload
(started, its output read, its summary waited for).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = Path(__file__).resolve().parent / "workloads"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair() -> int:
    """A base port whose successor is free too (ranks serve base + local rank)."""
    for _ in range(50):
        base = free_port()
        with contextlib.suppress(OSError), socket.socket() as s:
            s.bind(("127.0.0.1", base + 1))
            return base
    raise RuntimeError("no two adjacent free ports")


@contextlib.contextmanager
def occupied(port: int) -> Iterator[socket.socket]:
    """Hold ``port`` on 127.0.0.1 with a listening socket, as another program would."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield s


def need(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(
            f"{binary} not installed (apt-get install {package}; scripts/system-deps.sh does it)"
        )
    return path


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key, written under ``tmp``: (cert, key)."""
    openssl = need("openssl", "openssl")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            http_get(url, timeout=2)
            return
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last = exc
            time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s: {last}")


@contextlib.contextmanager
def _process(args: Sequence[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT)
    try:
        try:
            wait_http(ready_url, proc=proc)
        except Exception:  # noqa: BLE001 - whatever kept it from starting, show the server's own log
            raise RuntimeError(
                f"{args[0]} failed to start:\n{log.read_text(errors='replace')[-3000:]}"
            ) from None
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Prometheus:
    """A running Prometheus with a query helper."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.url = url
        self.workdir = workdir

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params)
        body = json.loads(http_get(f"{self.url}/api/v1/{path}?{query}"))
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus {path} failed: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; returns the result vector."""
        return self.api("query", query=expr)["result"]

    def scalar(self, expr: str) -> float:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else 0.0

    def wait_for(
        self, expr: str, timeout: float = 60.0, predicate: Any = bool
    ) -> list[dict[str, Any]]:
        """Poll ``expr`` until ``predicate(result)`` holds."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if predicate(result):
                return result
            time.sleep(0.5)
        raise TimeoutError(f"{expr!r} never satisfied the predicate; last result {result}")

    def targets_up(self) -> list[dict[str, Any]]:
        return [t for t in self.api("targets")["activeTargets"] if t["health"] == "up"]


@contextlib.contextmanager
def prometheus(
    tmp: Path,
    targets: Sequence[str] = (),
    *,
    scrape_interval: str = "1s",
    rule_files: Sequence[Path] = (),
    alertmanager: str | None = None,
    honor_labels: bool = False,
    job: str = "train",
    extra_scrape_configs: Sequence[dict[str, Any]] = (),
    evaluation_interval: str = "1s",
) -> Iterator[Prometheus]:
    """Run Prometheus scraping ``targets`` (host:port) under job ``job``."""
    binary = need("prometheus", "prometheus")
    workdir = tmp / f"prometheus-{free_port()}"
    workdir.mkdir(parents=True)
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": honor_labels,
                "static_configs": [{"targets": list(targets)}],
            },
            *extra_scrape_configs,
        ],
    }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    args = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--enable-feature=exemplar-storage",
        "--web.enable-lifecycle",
    ]
    url = f"http://127.0.0.1:{port}"
    with _process(args, workdir / "prometheus.log", f"{url}/-/ready"):
        yield Prometheus(url, workdir)


@contextlib.contextmanager
def alertmanager(tmp: Path, webhook_url: str) -> Iterator[str]:
    """Run Alertmanager sending every alert to ``webhook_url`` at once; yields host:port."""
    binary = need("prometheus-alertmanager", "prometheus-alertmanager")
    workdir = tmp / f"alertmanager-{free_port()}"
    workdir.mkdir(parents=True)
    config = {
        "route": {
            "receiver": "hook",
            "group_by": ["alertname"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {"name": "hook", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}
        ],
    }
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port, cluster = free_port(), free_port()
    args = [
        binary,
        f"--config.file={workdir / 'alertmanager.yml'}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--cluster.listen-address=127.0.0.1:{cluster}",
    ]
    with _process(args, workdir / "alertmanager.log", f"http://127.0.0.1:{port}/-/ready"):
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def pushgateway(tmp: Path) -> Iterator[str]:
    """Run a Pushgateway; yields its base URL."""
    binary = need("prometheus-pushgateway", "prometheus-pushgateway")
    port = free_port()
    args = [binary, f"--web.listen-address=127.0.0.1:{port}"]
    url = f"http://127.0.0.1:{port}"
    with _process(args, tmp / f"pushgateway-{port}.log", f"{url}/-/ready"):
        yield url


# What a client of moto's server needs in its environment: any keys, a region, and no look for an
# EC2 instance's credentials (which would wait on a metadata server that is not there).
MOTO_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def s3_store(endpoint: str) -> Any:
    """pyarrow's S3 filesystem on the S3-compatible server at ``endpoint`` (moto takes any keys)."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        endpoint_override=endpoint,
        scheme="http",
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        allow_bucket_creation=True,
    )


@contextlib.contextmanager
def moto_s3(tmp: Path, bucket: str = "lake") -> Iterator[str]:
    """Run moto's standalone server, which emulates Amazon S3 over HTTP, with ``bucket`` made;
    yields its ``host:port``."""
    port = free_port()
    args = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with _process(args, tmp / f"moto-{port}.log", f"http://127.0.0.1:{port}/"):
        s3_store(f"127.0.0.1:{port}").create_dir(bucket)
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def node_exporter(tmp: Path, textfile_dir: Path) -> Iterator[str]:
    """Run node_exporter with only the textfile collector; yields its base URL."""
    binary = need("prometheus-node-exporter", "prometheus-node-exporter")
    port = free_port()
    args = [
        binary,
        f"--web.listen-address=127.0.0.1:{port}",
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfile_dir}",
    ]
    url = f"http://127.0.0.1:{port}"
    with _process(args, tmp / f"node-exporter-{port}.log", f"{url}/metrics"):
        yield url


def train_process(
    env: dict[str, str],
    *args: str,
    script: str = "train_recompiles.py",
    stdout: Any = subprocess.PIPE,
) -> subprocess.Popen[str]:
    """Start a real CPU training workload from ``tests/workloads`` with ``env`` added."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    return subprocess.Popen(
        [sys.executable, str(WORKLOADS / script), *args],
        env=full_env,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(REPO),
    )


def wait_for_line(proc: subprocess.Popen[str], marker: str, timeout: float = 180.0) -> list[str]:
    """Read ``proc``'s output until a line containing ``marker``; returns the lines read."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"workload exited {proc.returncode} before {marker!r}:\n{''.join(lines)[-4000:]}"
                )
            continue
        lines.append(line)
        if marker in line:
            return lines
    raise TimeoutError(f"no {marker!r} within {timeout}s:\n{''.join(lines)[-4000:]}")


def read_summary(path: Path, timeout: float = 30.0) -> dict[str, Any]:
    """The workload's --summary JSON; it is written just after the TRAINING DONE line, so wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
