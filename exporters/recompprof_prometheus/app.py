"""What the pull endpoint answers: the metrics of a registry, optionally behind basic auth.

The same content negotiation as prometheus_client's ``make_wsgi_app`` (which still answers anything
unusual), rendered by the faster writer from ``render``; finished scrapes are logged for the linger at
shutdown.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hmac
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted, make_wsgi_app
from prometheus_client.registry import Collector, CollectorRegistry

from recompprof.exporter import ConfigError
from recompprof_prometheus.render import Renderer, Unsupported

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def check_credentials(credentials: str) -> None:
    """Raise ConfigError unless ``credentials`` is "user:password" with a non-empty user."""
    user, sep, _ = credentials.partition(":")
    if not sep or not user:
        raise ConfigError(
            "recompprof setting 'prometheus_basic_auth' (RECOMPPROF_PROMETHEUS_BASIC_AUTH): "
            "expected 'user:password'"
        )


def basic_auth(app: WSGIApp, credentials: str) -> WSGIApp:
    """Wrap ``app`` so it answers 401 unless the request carries ``credentials`` ("user:password")."""
    check_credentials(credentials)
    expected = base64.b64encode(credentials.encode()).decode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, token = header.partition(" ")
        try:
            ok = scheme.lower() == "basic" and hmac.compare_digest(
                base64.b64decode(token, validate=True), base64.b64decode(expected)
            )
        except (binascii.Error, ValueError):
            ok = False
        if ok:
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [("WWW-Authenticate", 'Basic realm="recompprof"'), ("Content-Type", "text/plain")],
        )
        return [b"401 Unauthorized\n"]

    return guarded


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


class ScrapeLog:
    """Scrapes of ``/metrics`` that finished (body fully written), for the linger at shutdown."""

    def __init__(self) -> None:
        self.count = 0
        self.interval: float | None = None  # between the starts of the last two scrapes
        self._last_start: float | None = None
        self._newest_start = float("-inf")  # start of the most recently begun scrape that finished
        self._cond = threading.Condition()

    def done(self, started: float) -> None:
        with self._cond:
            if self._last_start is not None and started > self._last_start:
                self.interval = started - self._last_start
            self._last_start = started
            self._newest_start = max(self._newest_start, started)
            self.count += 1
            self._cond.notify_all()

    def wait_for_scrape_after(self, moment: float, timeout: float) -> bool:
        """Wait until a scrape that began at or after ``moment`` (monotonic) finished, at most ``timeout`` s."""
        with self._cond:
            return self._cond.wait_for(lambda: self._newest_start >= moment, max(timeout, 0.0))


class _Body(list[bytes]):
    """A response body whose ``close`` (called by the server once it is written) records the scrape."""

    def __init__(self, chunks: list[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(chunks)
        self._on_close = on_close

    def close(self) -> None:
        self._on_close()


def metrics_app(registry: CollectorRegistry, scrapes: ScrapeLog | None = None) -> WSGIApp:
    """Serve ``registry`` like ``make_wsgi_app`` does (content negotiation, gzip), rendering with :class:`Renderer`."""
    renderer = Renderer()
    general = make_wsgi_app(registry)
    log_scrapes = scrapes or ScrapeLog()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] == "GET" and environ.get("PATH_INFO") != "/favicon.ico":
            started = time.monotonic()
            return _Body(list(_serve(environ, start_response)), lambda: log_scrapes.done(started))
        return _serve(environ, start_response)

    def _serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if (
            environ["REQUEST_METHOD"] != "GET"
            or environ.get("PATH_INFO") == "/favicon.ico"
            or "name[]" in parse_qs(environ.get("QUERY_STRING", ""))
        ):
            return general(environ, start_response)
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        openmetrics = content_type.startswith("application/openmetrics-text")
        if openmetrics and "version=1." not in content_type:
            return general(
                environ, start_response
            )  # OpenMetrics 2.0 and later: leave it to prometheus_client
        families = list(registry.collect())
        try:
            body = renderer.openmetrics(families) if openmetrics else renderer.text(families)
        except Unsupported:
            body = encoder(_Fixed(families))
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            # Level 1: the exposition is repetitive, and level 9 costs several ms per scrape for ~10% less.
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app
