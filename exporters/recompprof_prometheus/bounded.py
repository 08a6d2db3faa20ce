"""A WSGI server bounded in threads and connections, for the pull endpoint.

prometheus_client's ``ThreadingWSGIServer`` starts a thread per connection that waits for the request as
long as the client keeps the socket open (with TLS the handshake even runs on the accepting thread, so one
silent client stops every scrape). Here one thread waits for all connections, a request gets one of at
most :data:`MAX_HANDLERS` threads only once its first bytes arrived, and every connection is closed
:data:`CONNECTION_SECONDS` after it was accepted.
"""

from __future__ import annotations

import contextlib
import io
import queue
import selectors
import socket
import ssl
import threading
import time
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from recompprof.exporter import contain

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


class QuietHandler(WSGIRequestHandler):
    server: BoundedServer

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
        while (
            view
        ):  # send, not sendall: TLS's sendall would give each of its sends the whole timeout
            self._arm()
            view = view[self._sock.send(view) :]
        return size


class BoundedServer(WSGIServer):
    """Connections cost no thread while silent: :meth:`run` (one thread) accepts them and waits for their first
    bytes with a selector, then queues them for at most :data:`MAX_HANDLERS` handler threads. Idle ones are closed
    at their deadline, or earlier when more than :data:`MAX_WAITING` are waiting; TLS is negotiated by the handler
    (under the deadline), never by the accepting thread."""

    request_queue_size = 64  # the listen backlog: a burst of connections is accepted, not refused
    tls: ssl.SSLContext | None = None

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        # the deadline of the connection a handler thread is answering
        self.deadline = threading.local()
        self.waiting: dict[
            socket.socket, tuple[Any, float]
        ] = {}  # oldest first: (client address, accepted at)
        self._ready: queue.SimpleQueue[tuple[socket.socket, Any, float] | None] = (
            queue.SimpleQueue()
        )
        self._handlers: list[threading.Thread] = []
        self._idle = 0  # handler threads waiting for a request
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake_read, self._wake_write = socket.socketpair()
        super().__init__(
            address, handler
        )  # last: a failed bind calls server_close, which closes the pair

    def run(self) -> None:
        """Accept connections and hand each to a handler once it has sent something, until :meth:`stop`."""
        self.socket.setblocking(False)
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self._stop.is_set():
                oldest = next(iter(self.waiting.values()), None)
                timeout = (
                    None
                    if oldest is None
                    else max(oldest[1] + CONNECTION_SECONDS - time.monotonic(), 0.0)
                )
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
        for (
            _
        ) in self._handlers:  # run is the only thread that starts handlers: none starts after this
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
            except (
                OSError
            ):  # out of file descriptors, or the client gave up already: free one, try later
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
                thread = threading.Thread(
                    target=self._handle_requests, name="recompprof-prometheus-handler", daemon=True
                )
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
                conn = self.tls.wrap_socket(
                    conn, server_side=True
                )  # the handshake, bounded by the timeout
            self.deadline.at = deadline
            with contain("prometheus.server"):
                try:
                    self.finish_request(conn, address)
                except OSError:  # a timeout or a reset: the client's doing, nothing to report
                    return
            self.shutdown_request(conn)
        except OSError:  # a failed or timed-out TLS handshake
            pass
        finally:
            conn.close()
