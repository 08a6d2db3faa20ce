"""Security: the metrics endpoint stays on loopback unless told otherwise, and ``redact=True`` lets no secret out.

A secret planted in a guarded global, a string argument, a module attribute, a source comment shown in
"User stack trace" blocks, a graph-break message and a backend's error message must appear in none of
the bytes that leave the process: event log, OTLP requests, /metrics, the textfile, the terminal and
HTML reports, and recompprof's own log output.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from otlp_receiver import OtlpReceiver
from servers import free_port, http_get

import recompprof
from recompprof._cli.main import main
from recompprof_prometheus.writers import TextfileOutput

SECRET = "s3cr3t"
TOKEN = SECRET + "-global-1"


def _non_loopback_address() -> str | None:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(
            ("192.0.2.254", 9)
        )  # no packet is sent; this picks the outgoing interface's address
        address = s.getsockname()[0]
        return None if address.startswith("127.") else address
    return None


def test_metrics_endpoint_binds_loopback_by_default() -> None:
    """With the default address the endpoint listens on 127.0.0.1 only: a non-loopback address of this host is refused."""
    port = free_port()
    with recompprof.attach(
        exporters=["prometheus"], prometheus_port=port, event_log=False
    ) as session:
        server = session.exporters[0].server  # type: ignore[attr-defined]
        assert (
            server.addr == "127.0.0.1"
            and session.exporters[0].url == f"http://127.0.0.1:{port}/metrics"
        )  # type: ignore[attr-defined]
        assert b"torch_compile_" in http_get(f"http://127.0.0.1:{port}/metrics")
        other = _non_loopback_address()
        if other is None:
            pytest.skip("this host has no non-loopback IPv4 address")
        with pytest.raises(OSError), socket.create_connection((other, port), timeout=2):
            pass


def test_configured_address_is_reachable_and_basic_auth_guards_it() -> None:
    """prometheus_addr=0.0.0.0 serves on the host's other addresses, and basic auth answers 401 there without credentials."""
    import urllib.error

    other = _non_loopback_address()
    if other is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    port = free_port()
    with recompprof.attach(
        exporters=["prometheus"],
        prometheus_port=port,
        prometheus_addr="0.0.0.0",
        prometheus_basic_auth="scraper:pw",
        event_log=False,
    ):
        with pytest.raises(urllib.error.HTTPError) as denied:
            http_get(f"http://{other}:{port}/metrics")
        assert denied.value.code == 401


class RawReceiver(OtlpReceiver):
    """The test receiver, also keeping every request body exactly as it arrived (after decompression)."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    def _accept(self, path: str, headers: dict[str, str], body: bytes) -> bytes:
        self.bodies.append(body)
        return super()._accept(path, headers, body)


class Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.secret = SECRET + "-attr-1"

    def forward(self, x: torch.Tensor, word: str) -> torch.Tensor:
        if (
            self.secret == SECRET + "-attr-1"
            and word == SECRET + "-arg-1"
            and TOKEN == SECRET + "-global-1"
        ):
            return x + 1  # s3cr3t-comment-in-source
        return x - 1  # s3cr3t-comment-in-source


def leaky_backend(gm: Any, example_inputs: Any) -> Any:
    raise RuntimeError(f"backend failed on {SECRET}-backend-message")


def breaker(x: torch.Tensor) -> torch.Tensor:
    x = x + 1  # s3cr3t-comment-in-source
    torch._dynamo.graph_break(msg=f"{SECRET}-graph-break-message")
    return x * 2


def test_redact_lets_no_planted_secret_leave_the_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """With redact=True no planted secret reaches the event log, OTLP bytes, /metrics, textfile, reports or recompprof's logs."""
    global TOKEN
    caplog.set_level(logging.DEBUG, logger="recompprof")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    model = Holder()
    compiled = torch.compile(model, backend="eager")
    run_dir = tmp_path / "run"
    with RawReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        with recompprof.attach(
            run_dir=run_dir, redact=True, exporters=["prometheus", "otel"], prometheus_port=0
        ) as session:
            compiled(torch.ones(2), SECRET + "-arg-1")
            TOKEN = SECRET + "-global-2"
            compiled(torch.ones(2), SECRET + "-arg-1")
            TOKEN = SECRET + "-global-1"
            model.secret = SECRET + "-attr-2"
            compiled(torch.ones(2), SECRET + "-arg-1")
            model.secret = SECRET + "-attr-1"
            compiled(torch.ones(2), SECRET + "-arg-2")
            torch.compile(breaker, backend="eager")(torch.ones(2))
            with torch._dynamo.config.patch(suppress_errors=True):
                torch.compile(lambda x: x.sin(), backend=leaky_backend)(torch.ones(2))
            metrics = http_get(session.exporters[0].url)  # type: ignore[attr-defined]
            textfile = TextfileOutput(
                session.exporters[0].registry, tmp_path / "textfile", "job", 0
            )  # type: ignore[attr-defined]
            textfile.flush()
        receiver.wait_for(
            lambda spans: len([s for s in spans if s["name"] == "torch_compile.frame"]) >= 5
        )
        otlp = b"".join(receiver.bodies)
    TOKEN = SECRET + "-global-1"

    events = list(session.recent_events())
    kinds = {e.kind for e in events}
    assert {"compile", "graph_break"} <= kinds
    assert any(
        getattr(e, "outcome", None) == "failed" for e in events
    )  # the backend failure was recorded
    assert any(r.category == "global" for e in events for r in getattr(e, "reasons", []))

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["report", str(run_dir), "--html", str(tmp_path / "report.html")]) == 0
    outputs = {
        "event log": b"".join(p.read_bytes() for p in run_dir.glob("*.jsonl")),
        "OTLP": otlp,
        "/metrics": metrics,
        "textfile": textfile.path.read_bytes(),
        "report": out.getvalue().encode() + err.getvalue().encode(),
        "HTML report": (tmp_path / "report.html").read_bytes(),
        "session report": str(recompprof.report(session)).encode(),
        # torch's own log lines are torch's business; recompprof's (with any traceback) are ours.
        "recompprof logs": "\n".join(
            caplog.handler.format(r) for r in caplog.records if r.name.startswith("recompprof")
        ).encode()
        or b"(none)",
    }
    leaks = [where for where, data in outputs.items() if SECRET.encode() in data]
    assert not leaks, f"secret found in: {', '.join(leaks)}"
    assert all(outputs.values())  # every sink really received something
