"""The pull endpoint: port per local rank, the taken-port policy, port search, TLS and basic auth."""

from __future__ import annotations

import base64
import logging
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_helpers import feed, make_session, running
from servers import free_port, free_port_pair, http_get, occupied, self_signed

from recompprof import _internal
from recompprof._capture.settings import ConfigError
from recompprof.testing import raise_internal_errors
from recompprof_prometheus import PortInUse, PrometheusExporter


def test_pull_serves_on_base_port_plus_local_rank() -> None:
    """Local rank 1 serves on prometheus_port + 1, bound to loopback, with the run's totals."""
    base = free_port_pair()
    with running(prometheus_port=base, local_rank=1, world=2) as exporter:
        assert exporter.url == f"http://127.0.0.1:{base + 1}/metrics"
        body = http_get(exporter.url).decode()
    assert "torch_compile_compiles_total{" in body
    assert exporter.server is not None


def test_shutdown_stops_the_server() -> None:
    """After shutdown the port is free again and connections are refused."""
    port = free_port()
    with running(prometheus_port=port) as exporter:
        assert exporter.url
    with pytest.raises(OSError):
        http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_taken_port_raises_a_config_error_in_strict_mode() -> None:
    """Under strict internal errors a taken port raises PortInUse (a ConfigError) naming the port and the setting."""
    port = free_port()
    with occupied(port), pytest.raises(ConfigError) as err, running(prometheus_port=port):
        pass
    assert isinstance(err.value, PortInUse)
    assert str(port) in str(err.value) and "RECOMPPROF_PROMETHEUS_PORT" in str(err.value)


def test_taken_port_is_logged_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """In production a taken port leaves no endpoint, logs one warning for two failures and counts both."""
    raise_internal_errors(
        False
    )  # production mode for this test (the autouse fixture restores strict)
    port = free_port()
    caplog.set_level(logging.WARNING, logger="recompprof")
    with occupied(port):
        with running(prometheus_port=port) as first:
            assert first.url is None
        with running(prometheus_port=port) as second:
            assert second.url is None
    assert _internal.counts()["prometheus.server"] == 2
    warnings = [r for r in caplog.records if "prometheus.server" in r.getMessage()]
    assert len(warnings) == 1
    assert (
        f"port {port}" in warnings[0].getMessage() and "prometheus_port" in warnings[0].getMessage()
    )
    assert (
        warnings[0].exc_info is None
    )  # an expected condition: one line, the traceback only at DEBUG


def test_port_search_takes_the_next_free_port(caplog: pytest.LogCaptureFixture) -> None:
    """With prometheus_port_search a taken port moves the endpoint one local world size up, and says so in the log."""
    base = free_port_pair()  # the suite's other processes take ports meanwhile
    caplog.set_level(logging.WARNING, logger="recompprof")
    with (
        occupied(base),
        running(prometheus_port=base, prometheus_port_search=True, world=1) as exporter,
    ):
        assert exporter.url == f"http://127.0.0.1:{base + 1}/metrics"
        assert b"torch_compile_compiles_total" in http_get(exporter.url)
    assert any(
        f"port {base}" in r.getMessage() and str(base + 1) in r.getMessage() for r in caplog.records
    )


def test_tls_and_basic_auth(tmp_path: Path) -> None:
    """With a certificate and basic auth the endpoint speaks HTTPS, answers 401 without credentials and 200 with them."""
    cert, key = self_signed(tmp_path)
    ctx = ssl.create_default_context(cafile=str(cert))
    with running(
        prometheus_port=free_port(),
        prometheus_certfile=cert,
        prometheus_keyfile=key,
        prometheus_basic_auth="scraper:s3cret",
    ) as exporter:
        assert exporter.url and exporter.url.startswith("https://")
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(exporter.url, context=ctx, timeout=5)
        assert denied.value.code == 401
        wrong = urllib.request.Request(
            exporter.url,
            headers={"Authorization": "Basic " + base64.b64encode(b"scraper:x").decode()},
        )
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(wrong, context=ctx, timeout=5)
        good = urllib.request.Request(
            exporter.url,
            headers={"Authorization": "Basic " + base64.b64encode(b"scraper:s3cret").decode()},
        )
        with urllib.request.urlopen(good, context=ctx, timeout=5) as resp:
            assert resp.status == 200 and b"torch_compile_compiles_total" in resp.read()
        with pytest.raises(OSError):  # plain HTTP is not served
            http_get(exporter.url.replace("https://", "http://"), timeout=2)


def test_half_configured_tls_is_a_config_error() -> None:
    """A certfile without a keyfile fails at attach (the exporter's constructor) with a ConfigError naming both settings."""
    with (
        pytest.raises(ConfigError, match="prometheus_keyfile"),
        running(prometheus_port=free_port(), prometheus_certfile=Path("/nonexistent.pem")),
    ):
        pass


def test_malformed_basic_auth_is_a_config_error() -> None:
    """A prometheus_basic_auth value without a colon fails at attach with a ConfigError naming the setting."""
    with (
        pytest.raises(ConfigError, match="prometheus_basic_auth"),
        running(prometheus_port=free_port(), prometheus_basic_auth="nocolon"),
    ):
        pass


@pytest.mark.servers
def test_exemplars_reach_prometheus(tmp_path: Path) -> None:
    """A trace id added with session.add_exemplar is stored by a real Prometheus (OpenMetrics scrape) on the duration histogram."""
    from servers import prometheus

    session = make_session(prometheus_port=free_port())
    feed(session)
    session.add_exemplar(2.0, "4bf92f3577b34da6a3ce929d0e0e4736")
    exporter = PrometheusExporter(session.settings)
    exporter.start(session)
    try:
        assert exporter.server is not None
        with prometheus(tmp_path, [f"127.0.0.1:{exporter.server.port}"]) as prom:
            prom.wait_for("torch_compile_duration_seconds_count", timeout=30)

            def stored(result: list[dict[str, object]]) -> bool:
                return any(
                    e["labels"].get("trace_id") == "4bf92f3577b34da6a3ce929d0e0e4736"  # type: ignore[index]
                    for series in result
                    for e in series["exemplars"]
                )  # type: ignore[attr-defined]

            deadline = time.monotonic() + 30
            while not stored(
                prom.api(
                    "query_exemplars",
                    query="torch_compile_duration_seconds_bucket",
                    start=time.time() - 600,
                    end=time.time() + 60,
                )
            ):
                assert time.monotonic() < deadline, "no exemplar stored"
                time.sleep(0.5)
    finally:
        exporter.shutdown()


@pytest.mark.parametrize(
    "mode,setting",
    [("textfile", "prometheus_textfile_dir"), ("pushgateway", "prometheus_pushgateway_url")],
)
def test_mode_without_its_destination_fails_at_attach(mode: str, setting: str) -> None:
    """textfile without a directory, or pushgateway without a URL, raises a ConfigError naming the missing setting."""
    session = make_session(prometheus_mode=mode)
    with pytest.raises(ConfigError, match=setting):
        PrometheusExporter(session.settings)
