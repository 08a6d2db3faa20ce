"""An OTLP/HTTP receiver for tests: a real HTTP server decoding real OTLP protobuf requests.

``OtlpReceiver`` accepts ``POST /v1/traces`` and ``/v1/metrics`` (gzip or deflate bodies too) and keeps
the decoded spans as plain dicts. ``hanging_endpoint`` accepts connections and never answers (a stuck
collector); ``refused_endpoint`` is a port with nothing listening (a collector that is down).
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}


def any_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as a Python value (arrays become lists)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


def _span_dict(span: Any, resource: dict[str, Any], scope: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "kind": span.kind,
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "attributes": attributes(span.attributes),
        "links": [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "attributes": attributes(link.attributes),
            }
            for link in span.links
        ],
        "status": STATUS_CODES.get(span.status.code, str(span.status.code)),
        "status_message": span.status.message,
        "resource": resource,
        "scope": scope.name,
        "scope_version": scope.version,
    }


class OtlpReceiver:
    """A running receiver; ``endpoint`` is the base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[dict[str, Any]] = []  # path, headers, raw size per request
        self.spans: list[dict[str, Any]] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self._lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                response = receiver._accept(self.path, dict(self.headers), body)
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(response)))
                self.end_headers()
                self.wfile.write(response)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _accept(self, path: str, headers: dict[str, str], body: bytes) -> bytes:
        with self._lock:
            self.requests.append(
                {
                    "path": path,
                    "headers": {k.lower(): v for k, v in headers.items()},
                    "size": len(body),
                }
            )
            if self.status != 200:
                self._lock.notify_all()
                return b""
            if path.endswith("/v1/traces"):
                request = ExportTraceServiceRequest.FromString(body)
                for rs in request.resource_spans:
                    res = attributes(rs.resource.attributes)
                    for ss in rs.scope_spans:
                        self.spans.extend(_span_dict(span, res, ss.scope) for span in ss.spans)
                self._lock.notify_all()
                return ExportTraceServiceResponse().SerializeToString()
            if path.endswith("/v1/metrics"):
                self.metrics.append(ExportMetricsServiceRequest.FromString(body))
                self._lock.notify_all()
                return ExportMetricsServiceResponse().SerializeToString()
            self._lock.notify_all()
            return b""

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Wait until ``predicate(spans)`` holds; returns a copy of the spans."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self.spans):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"receiver never saw the expected spans; got {[s['name'] for s in self.spans]}"
                    )
                self._lock.wait(remaining)
            return list(self.spans)

    def metric_names(self) -> set[str]:
        with self._lock:
            return {
                m.name
                for req in self.metrics
                for rm in req.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            }

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def hanging_endpoint() -> Iterator[str]:
    """A base URL whose server accepts TCP connections, reads, and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = server.accept()
                held.append(conn)  # keep it open, never reply

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


def refused_endpoint() -> str:
    """A base URL on a port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def tree(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Child spans grouped by their parent's span id."""
    children: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        if span["parent_span_id"]:
            children.setdefault(span["parent_span_id"], []).append(span)
    return children


def clear_otel_env(monkeypatch: Any) -> None:
    """Remove every OTEL_* variable so a test sees only what it sets."""
    import os

    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)
