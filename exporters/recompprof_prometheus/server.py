"""The pull endpoint: a WSGI server with optional TLS and basic auth, bounded in threads and connections.

prometheus_client 0.26's ``start_http_server`` has TLS options but no hook for authentication, and
its ``ThreadingWSGIServer`` starts a thread per connection that waits for the request as long as the
client keeps the socket open (with TLS the handshake even runs on the accepting thread, so one silent
client stops every scrape). This serves the same content negotiation (``make_wsgi_app`` for anything
unusual) with a small auth layer, the faster writer from ``render``, and a server of its own: one
thread waits for all connections, a request gets one of at most :data:`MAX_HANDLERS` threads only once
its first bytes arrived, and every connection is closed :data:`CONNECTION_SECONDS` after it was accepted.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import gzip
import hmac
import io
import logging
import os
import queue
import selectors
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted, make_wsgi_app
from prometheus_client.registry import Collector, CollectorRegistry

from recompprof import _internal
from recompprof._capture.settings import ConfigError
from recompprof_prometheus.render import Renderer, Unsupported

log = logging.getLogger("recompprof")
# Port search tries this many candidates (stepping by the local world size) before giving up.
SEARCH_TRIES = 32
# Linger at shutdown with prometheus_linger_seconds unset: one observed scrape interval (x1.5 + 1 s), at
# most AUTO_LINGER_MAX; the interval is taken as AUTO_LINGER_UNKNOWN when only one scrape was seen.
AUTO_LINGER_MAX = 60.0
AUTO_LINGER_UNKNOWN = 15.0
# Every connection is closed this long after it was accepted, whatever it sent (TLS handshake, request and
# response included): Prometheus gives up on a scrape after its scrape_timeout (10 s by default) anyway.
CONNECTION_SECONDS = 10.0
# Threads answering requests at once; more requests wait for one (an answer takes milliseconds).
MAX_HANDLERS = 4
# Connections accepted but silent (no byte yet) kept at once; past it the oldest is closed. A scraper sends
# its request right after connecting, so only idle clients are ever closed so.
MAX_WAITING = 64
# Requests that arrived while every handler was busy; past it a new one is closed unanswered.
MAX_QUEUED = 16

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class PortInUse(ConfigError):
    """The metrics port is taken; the message names the port and the setting that chooses it."""


class _QuietHandler(WSGIRequestHandler):
    server: _BoundedServer

    def setup(self) -> None:
        """Read and write through :class:`_Deadline`, so the connection's deadline bounds the whole exchange."""
        self.connection = self.request
        stream = _Deadline(self.request, self.server.deadline.at)
        self.rfile = io.BufferedReader(stream)
        self.wfile = io.BufferedWriter(stream)

    def log_message(self, format: str, *args: Any) -> None:  # signature of the base class
        """Scrapes every few seconds would flood the training log."""


class _Deadline(io.RawIOBase):
    """A connection whose every read and write may take only the time left until ``deadline`` (monotonic):
    a client that trickles its request or reads the answer a byte at a time cannot hold a handler longer."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("connection deadline passed")
        self._sock.settimeout(left)

    def readinto(self, buffer: Any) -> int:  # io's signature: any writable buffer
        self._arm()
        return self._sock.recv_into(buffer)

    def write(self, data: Any) -> int:  # io's signature: any bytes-like object
        view = memoryview(data).cast("B")
        size = len(view)
        while view:  # send, not sendall: TLS's sendall would give each of its sends the whole timeout
            self._arm()
            view = view[self._sock.send(view):]
        return size


class _BoundedServer(WSGIServer):
    """Connections cost no thread while silent: :meth:`run` (one thread) accepts them and waits for their first
    bytes with a selector, then queues them for at most :data:`MAX_HANDLERS` handler threads. Idle ones are closed
    at their deadline, or earlier when more than :data:`MAX_WAITING` are waiting; TLS is negotiated by the handler
    (under the deadline), never by the accepting thread."""

    request_queue_size = 64  # the listen backlog: a burst of connections is accepted, not refused
    tls: ssl.SSLContext | None = None

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        self.deadline = threading.local()  # the deadline of the connection a handler thread is answering
        self.waiting: dict[socket.socket, tuple[Any, float]] = {}  # oldest first: (client address, accepted at)
        self._ready: queue.SimpleQueue[tuple[socket.socket, Any, float] | None] = queue.SimpleQueue()
        self._handlers: list[threading.Thread] = []
        self._idle = 0  # handler threads waiting for a request
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake_read, self._wake_write = socket.socketpair()
        super().__init__(address, handler)  # last: a failed bind calls server_close, which closes the pair

    def run(self) -> None:
        """Accept connections and hand each to a handler once it has sent something, until :meth:`stop`."""
        self.socket.setblocking(False)
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self._stop.is_set():
                oldest = next(iter(self.waiting.values()), None)
                timeout = None if oldest is None else max(oldest[1] + CONNECTION_SECONDS - time.monotonic(), 0.0)
                for key, _ in selector.select(timeout):
                    if key.fileobj is self.socket:
                        self._accept(selector)
                    elif key.fileobj is not self._wake_read and key.fileobj in self.waiting:
                        conn: Any = key.fileobj
                        selector.unregister(conn)
                        address, accepted = self.waiting.pop(conn)
                        self._dispatch(conn, address, accepted)
                now = time.monotonic()
                while self.waiting:
                    conn, (_, accepted) = next(iter(self.waiting.items()))
                    if now - accepted < CONNECTION_SECONDS:
                        break
                    self._drop(selector, conn)
            for conn in list(self.waiting):
                self._drop(selector, conn)
        for _ in self._handlers:  # run is the only thread that starts handlers: none starts after this
            self._ready.put(None)

    def stop(self) -> None:
        """End :meth:`run` and the handler threads; requests being answered end by their deadline."""
        self._stop.set()
        with contextlib.suppress(OSError):  # closed already
            self._wake_write.send(b"\0")

    def server_close(self) -> None:
        super().server_close()
        self._wake_read.close()
        self._wake_write.close()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        while True:
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors, or the client gave up already: free one, try later
                if self.waiting:
                    self._drop(selector, next(iter(self.waiting)))
                time.sleep(0.05)
                return
            if len(self.waiting) >= MAX_WAITING:
                self._drop(selector, next(iter(self.waiting)))
            self.waiting[conn] = (address, time.monotonic())
            selector.register(conn, selectors.EVENT_READ)

    def _drop(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        selector.unregister(conn)
        del self.waiting[conn]
        conn.close()

    def _dispatch(self, conn: socket.socket, address: Any, accepted: float) -> None:
        with self._lock:
            if self._ready.qsize() >= MAX_QUEUED:
                conn.close()
                return
            if self._ready.qsize() >= self._idle and len(self._handlers) < MAX_HANDLERS:
                thread = threading.Thread(target=self._handle_requests, name="recompprof-prometheus-handler",
                                          daemon=True)
                self._handlers.append(thread)
                self._idle += 1
                thread.start()
            self._ready.put((conn, address, accepted))

    def _handle_requests(self) -> None:
        while True:
            item = self._ready.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            conn, address, accepted = item
            try:
                self._answer(conn, address, accepted + CONNECTION_SECONDS)
            finally:
                conn.close()
                with self._lock:
                    self._idle += 1

    def _answer(self, conn: socket.socket, address: Any, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            conn.settimeout(left)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)  # the handshake, bounded by the timeout
            self.deadline.at = deadline
            with _internal.contain("prometheus.server"):
                try:
                    self.finish_request(conn, address)
                except OSError:  # a timeout or a reset: the client's doing, nothing to report
                    return
            self.shutdown_request(conn)
        except OSError:  # a failed or timed-out TLS handshake
            pass
        finally:
            conn.close()


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
        server_class: Any = type("_Server", (_BoundedServer,), {"address_family": family, "tls": tls})
        self._httpd: _BoundedServer = make_server(addr, port, app, server_class, handler_class=_QuietHandler)
        self.addr = addr
        self.port: int = self._httpd.server_address[1]
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self._httpd.run, name="recompprof-prometheus", daemon=True)
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
        self._httpd.stop()
        self._thread.join(timeout)
        self._httpd.server_close()


def _close_in_child(ref: weakref.ReferenceType[MetricsServer]) -> None:
    server = ref()
    if server is not None:
        server._httpd.socket.close()
        for conn in list(server._httpd.waiting):  # idle clients would otherwise see no EOF until the child exits
            conn.close()


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
