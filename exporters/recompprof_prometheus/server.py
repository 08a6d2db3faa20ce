"""The pull endpoint: a threaded WSGI server with optional TLS and basic auth.

prometheus_client 0.26's ``start_http_server`` has TLS options but no hook for authentication, so
this assembles the same parts (``ThreadingWSGIServer``, its content negotiation and, for anything
unusual, ``make_wsgi_app``) with a small auth layer and the faster writer from ``render``.
"""

from __future__ import annotations

import base64
import binascii
import errno
import gzip
import hmac
import logging
import os
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.core import Metric
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder, gzip_accepted, make_wsgi_app
from prometheus_client.registry import Collector, CollectorRegistry

from recompprof.settings import ConfigError
from recompprof_prometheus.render import Renderer, Unsupported

log = logging.getLogger("recompprof")
# Port search tries this many candidates (stepping by the local world size) before giving up.
SEARCH_TRIES = 32
# Linger at shutdown with prometheus_linger_seconds unset: one observed scrape interval (x1.5 + 1 s), at
# most AUTO_LINGER_MAX; the interval is taken as AUTO_LINGER_UNKNOWN when only one scrape was seen.
AUTO_LINGER_MAX = 60.0
AUTO_LINGER_UNKNOWN = 15.0

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class PortInUse(ConfigError):
    """The metrics port is taken; the message names the port and the setting that chooses it."""


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # signature of the base class
        """Scrapes every few seconds would flood the training log."""


def check_credentials(credentials: str) -> None:
    """Raise ConfigError unless ``credentials`` is "user:password" with a non-empty user."""
    user, sep, _ = credentials.partition(":")
    if not sep or not user:
        raise ConfigError("recompprof setting 'prometheus_basic_auth' (RECOMPPROF_PROMETHEUS_BASIC_AUTH): "
                          "expected 'user:password'")


def basic_auth(app: WSGIApp, credentials: str) -> WSGIApp:
    """Wrap ``app`` so it answers 401 unless the request carries ``credentials`` ("user:password")."""
    check_credentials(credentials)
    expected = base64.b64encode(credentials.encode()).decode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, token = header.partition(" ")
        try:
            ok = scheme.lower() == "basic" and hmac.compare_digest(
                base64.b64decode(token, validate=True), base64.b64decode(expected))
        except (binascii.Error, ValueError):
            ok = False
        if ok:
            return app(environ, start_response)
        start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="recompprof"'),
                                            ("Content-Type", "text/plain")])
        return [b"401 Unauthorized\n"]

    return guarded


def tls_context(certfile: Path | None, keyfile: Path | None) -> ssl.SSLContext | None:
    """A server TLS context from the two settings, or None when neither is set."""
    if certfile is None and keyfile is None:
        return None
    if certfile is None or keyfile is None:
        raise ConfigError("recompprof settings 'prometheus_certfile' and 'prometheus_keyfile' "
                          "(RECOMPPROF_PROMETHEUS_CERTFILE/_KEYFILE) must be set together")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile=str(certfile), keyfile=str(keyfile))
    return ctx


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
        if (environ["REQUEST_METHOD"] != "GET" or environ.get("PATH_INFO") == "/favicon.ico"
                or "name[]" in parse_qs(environ.get("QUERY_STRING", ""))):
            return general(environ, start_response)
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        openmetrics = content_type.startswith("application/openmetrics-text")
        if openmetrics and "version=1." not in content_type:
            return general(environ, start_response)  # OpenMetrics 2.0 and later: leave it to prometheus_client
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


class MetricsServer:
    """One HTTP(S) endpoint serving ``registry``; ``port`` is the port actually bound."""

    def __init__(self, registry: CollectorRegistry, addr: str, port: int, *,
                 tls: ssl.SSLContext | None = None, credentials: str | None = None) -> None:
        self.scrapes = ScrapeLog()
        app = metrics_app(registry, self.scrapes)
        if credentials:
            app = basic_auth(app, credentials)
        family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class: Any = type("_Server", (ThreadingWSGIServer,), {"address_family": family})
        self._httpd = make_server(addr, port, app, server_class, handler_class=_QuietHandler)
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self.addr = addr
        self.port: int = self._httpd.server_address[1]
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="recompprof-prometheus", daemon=True)
        self._thread.start()
        # A forked child (DataLoader worker) inherits the listening socket but not the thread serving it:
        # close its copy, or scrapes queue on it unanswered and the port stays bound after the parent closes.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _close_in_child(ref))

    def linger(self, most: float | None) -> float:
        """Keep serving until a scrape that began after this call has finished, at most ``most`` seconds
        (``None``: one observed scrape interval x1.5 + 1 s, at most :data:`AUTO_LINGER_MAX`); returns seconds waited.

        Without it the last scrape of a job misses its end. With ``None`` a server never scraped does not
        wait (nothing is scraping it); an explicit ``most`` waits for a first scrape too (a short job).
        """
        if most == 0 or (most is None and self.scrapes.count == 0):
            return 0.0
        if most is None:
            interval = self.scrapes.interval if self.scrapes.interval is not None else AUTO_LINGER_UNKNOWN
            most = min(interval * 1.5 + 1.0, AUTO_LINGER_MAX)
        start = time.monotonic()
        self.scrapes.wait_for_scrape_after(start, most)
        return time.monotonic() - start

    def close(self, timeout: float = 5.0) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout)


def _close_in_child(ref: weakref.ReferenceType[MetricsServer]) -> None:
    server = ref()
    if server is not None:
        server._httpd.socket.close()


def serve(registry: CollectorRegistry, addr: str, base_port: int, offset: int, *, search: bool, stride: int = 1,
          tls: ssl.SSLContext | None = None, credentials: str | None = None) -> MetricsServer:
    """Bind ``base_port + offset``; when taken, raise :class:`PortInUse` or, with ``search``, try the next
    candidates ``+ stride`` apart (stride = local world size, so ranks never take each other's ports)."""
    port = base_port + offset
    tries = SEARCH_TRIES if search else 1
    for attempt in range(tries):
        candidate = port + attempt * max(stride, 1)
        if candidate > 65535:
            break
        try:
            server = MetricsServer(registry, addr, candidate, tls=tls, credentials=credentials)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        if attempt:
            log.warning("recompprof: Prometheus port %d on %s was taken; serving metrics on port %d instead "
                        "(prometheus_port_search is on)", port, addr, server.port)
        return server
    where = f"prometheus_port {base_port}" + (f" + local rank {offset}" if offset else "")
    if search:
        raise PortInUse(f"recompprof: no free Prometheus port on {addr} from {port} ({where}) after {tries} tries; "
                        f"set prometheus_port / RECOMPPROF_PROMETHEUS_PORT to a free range")
    raise PortInUse(
        f"recompprof: Prometheus port {port} ({where}) on {addr} is already in use, so this rank serves no "
        f"metrics; set prometheus_port / RECOMPPROF_PROMETHEUS_PORT to a free base port, or "
        f"prometheus_port_search / RECOMPPROF_PROMETHEUS_PORT_SEARCH=1 to take the next free one")
