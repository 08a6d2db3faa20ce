"""A WSGI server bounded in threads and connections, for the pull endpoint.

prometheus_client's ``ThreadingWSGIServer`` starts a thread per connection that waits for the request as
long as the client keeps the socket open (with TLS the handshake even runs on the accepting thread, so one
silent client stops every scrape). Here one thread accepts every connection, negotiates TLS and reads the
request head without blocking; a request gets one of at most :data:`MAX_HANDLERS` threads only once its
whole head has arrived, so clients that trickle their heads hold no handler and a scraper, which sends its
request at once, is answered while they wait. Admission is fair: a head must arrive within
:data:`HEADER_SECONDS` of the connect and within :data:`HEAD_BYTES`, and one peer address keeps at most
:data:`PER_PEER_WAITING` connections waiting for their heads (a new one sheds that peer's oldest).
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
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from recompprof.exporter import contain

# Every connection is closed this long after it was accepted, whatever it sent (TLS handshake, request and
# response included): Prometheus gives up on a scrape after its scrape_timeout (10 s by default) anyway.
CONNECTION_SECONDS = 10.0
# A request head (TLS handshake included) must have arrived whole this long after the connect, or the
# connection is closed: a scraper sends it at once, a few round trips even on a slow network.
HEADER_SECONDS = 5.0
# A head larger than this is answered 431 unread (real ones are well under 1 KiB; http.server's own
# limit is 64 KiB per line).
HEAD_BYTES = 65536
# Threads answering requests at once; more requests wait for one (an answer takes milliseconds).
MAX_HANDLERS = 4
# Connections accepted whose head has not arrived, kept at once; past it the oldest of the peer holding the
# most is closed. A scraper sends its request right after connecting, so only slow clients are closed so.
MAX_WAITING = 64
# Of those, what one peer address may hold; a new connection from a peer at the cap closes its oldest.
PER_PEER_WAITING = 16
# Requests whose head arrived while every handler was busy; past it a new one is closed unanswered.
MAX_QUEUED = 16
# Connections accepted per second at most (bursts of up to MAX_WAITING at once); the others wait in the
# kernel's backlog, costing the job nothing. Clients that reconnect the moment they are cut off would
# otherwise keep the accepting thread busy (3,500 accepts a second, half a core, from 20 clients).
ACCEPTS_PER_SECOND = 100.0

_TOO_LARGE_BODY = b"request head over 64 KiB\n"
_TOO_LARGE = (
    b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY)
)


@dataclass
class _Waiting:
    """A connection whose request head is still arriving."""

    address: Any
    accepted: float
    handshaking: bool
    head: bytearray = field(default_factory=bytearray)

    @property
    def peer(self) -> Any:
        return self.address[0] if isinstance(self.address, tuple) else self.address


class QuietHandler(WSGIRequestHandler):
    server: BoundedServer

    def setup(self) -> None:
        """Read the head already received, then the socket, through :class:`_Deadline`, so the connection's
        deadline bounds the whole exchange."""
        self.connection = self.request
        stream = _Deadline(self.request, self.server.deadline.at, self.server.deadline.head)
        self.rfile = io.BufferedReader(stream)
        self.wfile = io.BufferedWriter(stream)

    def log_message(self, format: str, *args: Any) -> None:  # signature of the base class
        """Scrapes every few seconds would flood the training log."""


class _Deadline(io.RawIOBase):
    """A connection whose every read and write may take only the time left until ``deadline`` (monotonic):
    a client that reads the answer a byte at a time cannot hold a handler longer. Reads return ``head``
    (the bytes the accepting thread read) first."""

    def __init__(self, sock: socket.socket, deadline: float, head: bytes = b"") -> None:
        self._sock = sock
        self._deadline = deadline
        self._head = memoryview(head)

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
        if self._head:
            size = min(len(buffer), len(self._head))
            buffer[:size] = self._head[:size]
            self._head = self._head[size:]
            return size
        self._arm()
        return self._sock.recv_into(buffer)

    def write(self, data: Any) -> int:  # io's signature: any bytes-like object
        view = memoryview(data).cast("B")
        size = len(view)
        # send, not sendall: TLS's sendall would give each of its sends the whole timeout
        while view:
            self._arm()
            view = view[self._sock.send(view) :]
        return size


def head_complete(head: bytes | bytearray) -> bool:
    """Whether ``head`` holds a whole request head (the blank line after the headers, as http.server
    reads it: CRLF or bare LF)."""
    return b"\n\r\n" in head or b"\n\n" in head


class BoundedServer(WSGIServer):
    """Connections cost no thread until their request head is in: :meth:`run` (one thread) accepts them,
    negotiates TLS and reads their heads with a selector, then queues complete requests for at most
    :data:`MAX_HANDLERS` handler threads. A head not in by :data:`HEADER_SECONDS` closes its connection; past
    :data:`PER_PEER_WAITING` per peer or :data:`MAX_WAITING` in all, the oldest waiting one is closed."""

    request_queue_size = 64  # the listen backlog: a burst of connections is accepted, not refused
    tls: ssl.SSLContext | None = None

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        # the deadline and received head of the connection a handler thread is answering
        self.deadline = threading.local()
        self.waiting: dict[socket.socket, _Waiting] = {}  # oldest first
        self._ready: queue.SimpleQueue[tuple[socket.socket, Any, float, bytes] | None] = (
            queue.SimpleQueue()
        )
        self._handlers: list[threading.Thread] = []
        self._idle = 0  # handler threads waiting for a request
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tokens = float(MAX_WAITING)  # accepts allowed now (a token bucket)
        self._tokens_at = time.monotonic()
        self._wake_read, self._wake_write = socket.socketpair()
        # last: a failed bind calls server_close, which closes the pair
        super().__init__(address, handler)

    def run(self) -> None:
        """Accept connections and hand each to a handler once its head is in, until :meth:`stop`."""
        self.socket.setblocking(False)
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_read, selectors.EVENT_READ)
            listening = False
            while not self._stop.is_set():
                wait = self._refill()
                if listening != (wait == 0):
                    listening = wait == 0
                    if listening:
                        selector.register(self.socket, selectors.EVENT_READ)
                    else:
                        selector.unregister(self.socket)
                for key, _ in selector.select(self._timeout(wait)):
                    if key.fileobj is self.socket:
                        self._accept(selector)
                    elif key.fileobj is not self._wake_read and key.fileobj in self.waiting:
                        self._progress(selector, key.fileobj)
                now = time.monotonic()
                while self.waiting:
                    conn, pending = next(iter(self.waiting.items()))
                    if now - pending.accepted < HEADER_SECONDS:
                        break
                    self._drop(selector, conn)
            for conn in list(self.waiting):
                self._drop(selector, conn)
        # run is the only thread that starts handlers: none starts after this
        for _ in self._handlers:
            self._ready.put(None)

    def _refill(self) -> float:
        """Add the accepts earned since the last call; returns how long until one is allowed (0: now)."""
        now = time.monotonic()
        self._tokens = min(
            float(MAX_WAITING), self._tokens + (now - self._tokens_at) * ACCEPTS_PER_SECOND
        )
        self._tokens_at = now
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / ACCEPTS_PER_SECOND

    def _timeout(self, wait: float) -> float | None:
        """How long the selector may sleep: until the next accept is allowed or the oldest head is due."""
        due = [wait] if wait else []
        oldest = next(iter(self.waiting.values()), None)
        if oldest is not None:
            due.append(max(oldest.accepted + HEADER_SECONDS - time.monotonic(), 0.0))
        return min(due) if due else None

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
        while self._tokens >= 1:
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except (
                OSError
            ):  # out of file descriptors, or the client gave up already: free one, try later
                if self.waiting:
                    self._shed(selector, next(iter(self.waiting)))
                time.sleep(0.05)
                return
            self._tokens -= 1
            pending = _Waiting(address, time.monotonic(), handshaking=self.tls is not None)
            self._make_room(selector, pending.peer)
            conn.setblocking(False)
            if self.tls is not None:
                try:
                    conn = self.tls.wrap_socket(
                        conn, server_side=True, do_handshake_on_connect=False
                    )
                except (OSError, ValueError):  # the client is gone already
                    conn.close()
                    continue
            self.waiting[conn] = pending
            selector.register(conn, selectors.EVENT_READ)

    def _make_room(self, selector: selectors.BaseSelector, peer: Any) -> None:
        """Before admitting a connection from ``peer``: at the peer's cap close its oldest waiting
        connection, at the overall cap the oldest of the peer that holds the most."""
        by_peer: dict[Any, list[socket.socket]] = {}
        for conn, pending in self.waiting.items():
            by_peer.setdefault(pending.peer, []).append(conn)
        own = by_peer.get(peer, [])
        if len(own) >= PER_PEER_WAITING:
            self._shed(selector, own[0])
        elif len(self.waiting) >= MAX_WAITING:
            self._shed(selector, max(by_peer.values(), key=len)[0])

    def _shed(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        """Close ``conn`` to make room, unless what it has sent by now completes its head."""
        self._progress(selector, conn)
        if conn in self.waiting:
            self._drop(selector, conn)

    def _progress(self, selector: selectors.BaseSelector, conn: Any) -> None:
        """Read what ``conn`` has sent (TLS: negotiate first) without blocking; dispatch it once its
        head is complete or too large, close it when the client is gone."""
        pending = self.waiting[conn]
        try:
            if pending.handshaking:
                conn.do_handshake()
                pending.handshaking = False
            while len(pending.head) <= HEAD_BYTES and not head_complete(pending.head):
                data = conn.recv(HEAD_BYTES + 1 - len(pending.head))
                if not data:  # the client closed its side before a whole head
                    self._drop(selector, conn)
                    return
                pending.head += data
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return  # nothing more to read now (a handshake waiting to write is retried on the next read)
        except (OSError, ValueError):  # a reset, a failed handshake
            self._drop(selector, conn)
            return
        selector.unregister(conn)
        del self.waiting[conn]
        self._dispatch(conn, pending)

    def _drop(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        selector.unregister(conn)
        del self.waiting[conn]
        conn.close()

    def _dispatch(self, conn: socket.socket, pending: _Waiting) -> None:
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
            self._ready.put((conn, pending.address, pending.accepted, bytes(pending.head)))

    def _handle_requests(self) -> None:
        while True:
            item = self._ready.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            conn, address, accepted, head = item
            try:
                self._answer(conn, address, accepted + CONNECTION_SECONDS, head)
            finally:
                conn.close()
                with self._lock:
                    self._idle += 1

    def _answer(self, conn: socket.socket, address: Any, deadline: float, head: bytes) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            conn.settimeout(left)
            if not head_complete(head):
                _refuse_too_large(conn, deadline)
                return
            self.deadline.at = deadline
            self.deadline.head = head
            with contain("prometheus.server"):
                try:
                    self.finish_request(conn, address)
                except OSError:  # a timeout or a reset: the client's doing, nothing to report
                    return
            self.shutdown_request(conn)
        except OSError:  # the client went away
            pass
        finally:
            conn.close()


def _refuse_too_large(conn: socket.socket, deadline: float) -> None:
    """Answer 431 to a head over :data:`HEAD_BYTES`, then read (and drop) what the client still sends for
    at most a second, so the answer is not lost to a reset from closing over unread bytes."""
    stream = _Deadline(conn, deadline)
    stream.write(_TOO_LARGE)
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
    until = min(deadline, time.monotonic() + 1.0)
    with contextlib.suppress(OSError):
        while time.monotonic() < until:
            conn.settimeout(max(until - time.monotonic(), 0.001))
            if not conn.recv(65536):
                return
