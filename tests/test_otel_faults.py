"""Faults: a down or hanging collector, bad OTEL_* values, OTEL_SDK_DISABLED, a full queue, fork, missing grpc."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

import pytest
from otel_helpers import StandInSession, compile_event
from otlp_receiver import OtlpReceiver, clear_otel_env, hanging_endpoint, refused_endpoint

from recompprof import _internal
from recompprof._capture.exporting import ExporterUnavailable
from recompprof_otel import OtelExporter
from recompprof_otel.environment import read


@pytest.fixture(autouse=True)
def otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def _started() -> tuple[OtelExporter, StandInSession]:
    session = StandInSession()
    exporter = OtelExporter(session.settings)
    exporter.start(session)  # type: ignore[arg-type]
    return exporter, session


def _emit_many(exporter: OtelExporter, n: int) -> float:
    """Emit n compiles; returns the slowest on_event call in seconds."""
    worst = 0.0
    for i in range(n):
        event = compile_event(f"0/{i}", is_recompile=i > 0)
        begin = time.perf_counter()
        exporter.on_event(event)
        worst = max(worst, time.perf_counter() - begin)
    return worst


def test_refused_endpoint_costs_nothing_and_counts_drops(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing listening, on_event stays fast, shutdown returns promptly and the spans count as export_failed."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", refused_endpoint())
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    exporter, _ = _started()
    worst = _emit_many(exporter, 20)
    time.sleep(0.3)  # let the worker try (and fail) at least once
    begin = time.monotonic()
    exporter.shutdown(5.0)
    elapsed = time.monotonic() - begin
    assert worst < 0.05, f"on_event took {worst:.3f}s with the collector down"
    assert elapsed < 2.5, f"shutdown took {elapsed:.1f}s"
    dropped = exporter.dropped()
    assert sum(dropped.values()) == 80 and dropped.get("export_failed", 0) > 0
    assert exporter.exported() == 0


def test_hanging_endpoint_is_bounded_by_the_shutdown_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A collector that accepts and never answers cannot hold detach past its timeout; the spans count as dropped."""
    with hanging_endpoint() as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "30")
        exporter, _ = _started()
        worst = _emit_many(exporter, 20)
        begin = time.monotonic()
        exporter.shutdown(1.0)
        elapsed = time.monotonic() - begin
    assert worst < 0.05, f"on_event took {worst:.3f}s with the collector hanging"
    assert elapsed < 2.0, f"shutdown took {elapsed:.1f}s against a hanging collector"
    assert sum(exporter.dropped().values()) == 80 and exporter.exported() == 0


def test_full_queue_drops_and_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a tiny queue and a stuck collector, spans past the queue bound are dropped and counted as queue_full."""
    with hanging_endpoint() as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
        monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
        exporter, _ = _started()
        _emit_many(exporter, 25)
        exporter.shutdown(0.5)
    dropped = exporter.dropped()
    assert dropped["queue_full"] > 0
    assert sum(dropped.values()) == 100


def test_malformed_otel_values_are_logged_once_counted_and_replaced(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Bad OTEL_* values fall back to defaults with one warning and one count; spans still arrive."""
    with OtlpReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        for name, value in {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/carrier-pigeon",
            "OTEL_BSP_MAX_QUEUE_SIZE": "lots",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "-3",
            "OTEL_TRACES_SAMPLER": "sometimes",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "soon",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "zip",
            "OTEL_SDK_DISABLED": "maybe",
        }.items():
            monkeypatch.setenv(name, value)
        with caplog.at_level(logging.WARNING, logger="recompprof"):
            exporter, _ = _started()
            exporter.on_event(compile_event())
            exporter.shutdown(5.0)
        rx.wait_for(lambda s: len(s) == 4)
    assert _internal.counts()["otel.config"] == 1
    warnings = [
        r for r in caplog.records if r.name == "recompprof" and "otel.config" in r.getMessage()
    ]
    assert len(warnings) == 1
    text = warnings[0].getMessage()  # a recompprof error: its message on the one line, no traceback
    for name in (
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_BSP_MAX_QUEUE_SIZE",
        "OTEL_TRACES_SAMPLER",
        "OTEL_SDK_DISABLED",
    ):
        assert name in text


def test_environment_defaults_to_http_protobuf_and_reads_protocols() -> None:
    """With no protocol set the default is http/protobuf; the signal-specific variable wins over the generic one."""
    assert read({}).traces_protocol == "http/protobuf"
    env = read(
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        }
    )
    assert (env.traces_protocol, env.metrics_protocol) == ("http/protobuf", "grpc")
    assert (
        read(
            {"OTEL_BSP_MAX_QUEUE_SIZE": "4", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "9"}
        ).max_export_batch_size
        == 4
    )


def test_sdk_disabled_sends_nothing_and_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_SDK_DISABLED=true makes the exporter a no-op: no request, no export thread, and it asks for no
    trace ids (so compiles carry none and no exemplar names a trace that was never sent)."""
    with OtlpReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        exporter, session = _started()
        exporter.on_event(compile_event())
        exporter.shutdown(1.0)
        time.sleep(0.2)
        assert rx.requests == []
    assert exporter.processor is None and exporter.traces is False
    assert not any(t.name == "recompprof-otel-export" for t in threading.enumerate())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_exports_nothing_and_has_no_export_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child forked after spans were sent (a DataLoader worker) emits no span and runs no export thread."""
    with OtlpReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        exporter, _ = _started()
        exporter.on_event(compile_event("0/0"))
        assert exporter.processor is not None and exporter.processor.force_flush(5000)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, never return into pytest
            code = 0
            try:
                exporter.on_event(compile_event("0/1", is_recompile=True))
                exporter.shutdown(1.0)
                threads = [t.name for t in threading.enumerate() if t.name.startswith("recompprof")]
                os.write(write_end, ",".join(threads).encode() or b"none")
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        os.close(write_end)
        _, status = os.waitpid(pid, 0)
        child_threads = os.read(read_end, 1000).decode()
        os.close(read_end)
        exporter.on_event(compile_event("0/2", is_recompile=True))
        exporter.shutdown(5.0)
        spans = rx.wait_for(lambda s: len(s) == 8)
        time.sleep(0.2)
        spans = list(rx.spans)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_threads == "none"
    assert sorted({s["attributes"].get("recompprof.compile_id") for s in spans} - {None}) == [
        "0/0",
        "0/2",
    ]
    assert {s["resource"]["process.pid"] for s in spans} == {os.getpid()}


def test_grpc_without_its_package_fails_attach_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking for grpc without opentelemetry-exporter-otlp-proto-grpc names the variable and the extra to install."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    with pytest.raises(ExporterUnavailable, match=r"OTEL_EXPORTER_OTLP_PROTOCOL=grpc.*otel-grpc"):
        OtelExporter(StandInSession().settings)


def test_bsp_export_timeout_bounds_each_request_unless_an_otlp_timeout_is_set() -> None:
    """OTEL_BSP_EXPORT_TIMEOUT becomes the OTLP request timeout, and an OTLP exporter timeout takes precedence."""
    assert read({"OTEL_BSP_EXPORT_TIMEOUT": "1500"}).request_timeout_s == 1.5
    assert (
        read(
            {"OTEL_BSP_EXPORT_TIMEOUT": "1500", "OTEL_EXPORTER_OTLP_TIMEOUT": "20"}
        ).request_timeout_s
        is None
    )
    assert read({}).request_timeout_s is None


def test_bsp_export_timeout_ends_a_hanging_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a collector that never answers, each export gives up after OTEL_BSP_EXPORT_TIMEOUT and is counted."""
    with hanging_endpoint() as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "300")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
        exporter, _ = _started()
        _emit_many(exporter, 1)
        # the OTLP exporter's own default (10 s) would not fail in time
        deadline = time.monotonic() + 5
        while not exporter.dropped().get("export_failed") and time.monotonic() < deadline:
            time.sleep(0.1)
        exporter.shutdown(1.0)
    assert exporter.dropped().get("export_failed", 0) > 0, exporter.dropped()
