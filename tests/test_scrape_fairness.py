"""Scrapes are still answered while slow clients keep the metrics port busy (fair admission).

Clients that trickle a request head a byte at a time, and reconnect as soon as the endpoint cuts them
off, once held every handler thread and every queue slot, so real scrapes went unanswered (0 of 28 in
40 s). A request now gets a handler only once its whole head has arrived; a head must arrive within
HEADER_SECONDS of the connect and HEAD_BYTES in size; a peer address keeps at most PER_PEER_WAITING
connections waiting for their head (a new one sheds that peer's oldest). Real sockets throughout.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
import urllib.request

from prometheus_helpers import running
from servers import free_port

from recompprof_prometheus.bounded import (
    HEAD_BYTES,
    HEADER_SECONDS,
    MAX_HANDLERS,
    PER_PEER_WAITING,
)

CLIENTS = 20
WINDOW = 15.0  # seconds of scraping under the load
SCRAPE_EVERY = 0.5
SCRAPE_TIMEOUT = 5.0


class _Trickler(threading.Thread):
    """Sends half a request head, then a byte every 0.2 s; reconnects at once when cut off."""

    def __init__(self, port: int, stop: threading.Event, source: str = "127.0.0.1") -> None:
        super().__init__(daemon=True)
        self.port, self.stop, self.source = port, stop, source
        self.connects = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                sock = socket.create_connection(
                    ("127.0.0.1", self.port), timeout=2, source_address=(self.source, 0)
                )
            except OSError:
                self.stop.wait(0.05)
                continue
            self.connects += 1
            with sock, contextlib.suppress(OSError):
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: job\r\nX-Slow: ")
                while not self.stop.is_set():
                    readable, _, _ = select.select([sock], [], [], 0.2)
                    if readable:  # EOF or reset: the endpoint cut this client off
                        break
                    sock.send(b"a")


def _cpu_seconds(thread_name: str) -> float:
    """CPU time (user + system) the named thread of this process has used so far."""
    (thread,) = [t for t in threading.enumerate() if t.name == thread_name]
    with open(f"/proc/self/task/{thread.native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scrape(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as resp:
            return resp.status == 200 and b"torch_compile_compiles_total" in resp.read()
    except OSError:
        return False


def test_scrapes_are_answered_under_reconnecting_trickling_clients() -> None:
    """With 20 clients trickling request heads and reconnecting whenever cut off, at least 90 % of
    scrapes (one every 0.5 s for 15 s, each with a 5 s timeout) are answered, and the endpoint still
    runs at most MAX_HANDLERS handler threads, its accepting thread busy for at most a tenth of the
    window (the clients reconnect the moment they are cut off)."""
    stop = threading.Event()
    with running(prometheus_port=free_port()) as exporter:
        assert exporter.server is not None and exporter.url is not None
        port = exporter.server.port
        threads = threading.active_count()
        clients = [_Trickler(port, stop) for _ in range(CLIENTS)]
        for client in clients:
            client.start()
        answered = total = 0
        most_threads = 0
        try:
            time.sleep(1)  # every client connected and trickling
            cpu = _cpu_seconds("recompprof-prometheus")
            end = time.monotonic() + WINDOW
            while time.monotonic() < end:
                began = time.monotonic()
                total += 1
                answered += _scrape(exporter.url)
                most_threads = max(most_threads, threading.active_count() - CLIENTS)
                time.sleep(max(0.0, SCRAPE_EVERY - (time.monotonic() - began)))
            cpu = _cpu_seconds("recompprof-prometheus") - cpu
        finally:
            stop.set()
            for client in clients:
                client.join(5)
    connects = sum(c.connects for c in clients)
    print(
        f"\n{CLIENTS} trickling clients ({connects} connects): {answered} of {total} scrapes "
        f"answered in {WINDOW:.0f} s; threads {threads} -> at most {most_threads}; "
        f"accepting thread {cpu:.2f} s of CPU"
    )
    assert connects > CLIENTS, "no client was ever cut off: the load did not reconnect"
    assert total >= 10
    assert answered >= 0.9 * total
    assert most_threads <= threads + MAX_HANDLERS
    assert cpu <= 0.1 * WINDOW


def test_a_peer_flooding_silent_connections_sheds_only_its_own() -> None:
    """A peer (127.0.0.2) opening 100 silent connections (more than MAX_WAITING) keeps at most
    PER_PEER_WAITING of them open, its newest, while another peer's silent connection, opened first
    and so the oldest, stays open until its header deadline, and a scrape from that peer is answered."""
    with running(prometheus_port=free_port()) as exporter:
        assert exporter.server is not None and exporter.url is not None
        port = exporter.server.port
        other = socket.create_connection(("127.0.0.1", port), timeout=5)
        opened = time.monotonic()
        flood = [
            socket.create_connection(
                ("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0)
            )
            for _ in range(100)
        ]
        try:
            # accepts are paced (ACCEPTS_PER_SECOND): wait until the endpoint has taken them all
            closed = [False] * len(flood)
            while time.monotonic() < opened + HEADER_SECONDS - 1:
                closed = [c or _closed(s) for c, s in zip(closed, flood, strict=True)]
                if closed.count(False) <= PER_PEER_WAITING:
                    break
                time.sleep(0.1)
            time.sleep(0.2)  # nothing else is closed once they are all in
            open_flood = [not (c or _closed(s)) for c, s in zip(closed, flood, strict=True)]
            other_open = not _closed(other)
            answered = _scrape(exporter.url)
            before_deadline = time.monotonic() < opened + HEADER_SECONDS
        finally:
            for sock in (other, *flood):
                sock.close()
    kept = sum(open_flood)
    print(f"\nflooding peer: {kept} of {len(flood)} connections left open")
    assert 0 < kept <= PER_PEER_WAITING
    assert all(open_flood[-kept:]), "the newest flood connections are the ones kept"
    assert before_deadline, "the flood took longer than the header deadline: nothing was tested"
    assert other_open and answered


def test_an_oversized_request_head_is_answered_431_at_once() -> None:
    """A 10 MB request head gets a 431 answer within a second, costing no handler beyond it."""
    with running(prometheus_port=free_port()) as exporter:
        assert exporter.server is not None and exporter.url is not None
        port = exporter.server.port
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        head = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 10_000_000 + b"\r\n\r\n"

        def send() -> None:
            with contextlib.suppress(OSError):  # the endpoint stops reading after HEAD_BYTES
                sock.sendall(head)

        sender = threading.Thread(target=send, daemon=True)
        began = time.monotonic()
        sender.start()
        try:
            answer = sock.recv(4096)
            took = time.monotonic() - began
            status = answer.split(b"\r\n", 1)[0]
        finally:
            sock.close()
            sender.join(5)
    print(f"\n10 MB head: {status!r} in {took:.3f} s")
    assert answer.startswith(b"HTTP/1.0 431 ")
    assert took < 1.0
    assert len(head) > HEAD_BYTES


def _closed(sock: socket.socket) -> bool:
    """Whether the endpoint closed ``sock`` (EOF or reset), without waiting."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True
