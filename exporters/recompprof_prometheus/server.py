"""The pull endpoint: one HTTP(S) server per process, with optional TLS and basic auth, and its port.

prometheus_client 0.26's ``start_http_server`` has TLS options but no hook for authentication, and its
server gives every connection a thread for as long as the client holds it open; this endpoint serves
:func:`~recompprof_prometheus.app.metrics_app` from a server of its own,
:class:`~recompprof_prometheus.bounded.BoundedServer`, bounded in threads and connections.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import ssl
import threading
import time
import weakref
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server

from prometheus_client.registry import CollectorRegistry

from recompprof.exporter import ConfigError
from recompprof_prometheus.app import ScrapeLog, basic_auth, metrics_app
from recompprof_prometheus.bounded import BoundedServer, QuietHandler

log = logging.getLogger("recompprof")
# Port search tries this many candidates (stepping by the local world size) before giving up.
SEARCH_TRIES = 32
# Linger at shutdown with prometheus_linger_seconds unset: one observed scrape interval (x1.5 + 1 s), at
# most AUTO_LINGER_MAX; the interval is taken as AUTO_LINGER_UNKNOWN when only one scrape was seen.
AUTO_LINGER_MAX = 60.0
AUTO_LINGER_UNKNOWN = 15.0


class PortInUse(ConfigError):
    """The metrics port is taken; the message names the port and the setting that chooses it."""


def tls_context(certfile: Path | None, keyfile: Path | None) -> ssl.SSLContext | None:
    """A server TLS context from the two settings, or None when neither is set."""
    if certfile is None and keyfile is None:
        return None
    if certfile is None or keyfile is None:
        raise ConfigError(
            "recompprof settings 'prometheus_certfile' and 'prometheus_keyfile' "
            "(RECOMPPROF_PROMETHEUS_CERTFILE/_KEYFILE) must be set together"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile=str(certfile), keyfile=str(keyfile))
    return ctx


class MetricsServer:
    """One HTTP(S) endpoint serving ``registry``; ``port`` is the port actually bound."""

    def __init__(
        self,
        registry: CollectorRegistry,
        addr: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        credentials: str | None = None,
    ) -> None:
        self.scrapes = ScrapeLog()
        app = metrics_app(registry, self.scrapes)
        if credentials:
            app = basic_auth(app, credentials)
        family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
            0
        ][0]
        server_class: Any = type(
            "_Server", (BoundedServer,), {"address_family": family, "tls": tls}
        )
        self._httpd: BoundedServer = make_server(
            addr, port, app, server_class, handler_class=QuietHandler
        )
        self.addr = addr
        self.port: int = self._httpd.server_address[1]
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(
            target=self._httpd.run, name="recompprof-prometheus", daemon=True
        )
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
            interval = (
                self.scrapes.interval if self.scrapes.interval is not None else AUTO_LINGER_UNKNOWN
            )
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
        for conn in list(
            server._httpd.waiting
        ):  # idle clients would otherwise see no EOF until the child exits
            conn.close()


def serve(
    registry: CollectorRegistry,
    addr: str,
    base_port: int,
    offset: int,
    *,
    search: bool,
    stride: int = 1,
    tls: ssl.SSLContext | None = None,
    credentials: str | None = None,
) -> MetricsServer:
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
            log.warning(
                "recompprof: Prometheus port %d on %s was taken; serving metrics on port %d instead "
                "(prometheus_port_search is on)",
                port,
                addr,
                server.port,
            )
        return server
    where = f"prometheus_port {base_port}" + (f" + local rank {offset}" if offset else "")
    if search:
        raise PortInUse(
            f"recompprof: no free Prometheus port on {addr} from {port} ({where}) after {tries} tries; "
            f"set prometheus_port / RECOMPPROF_PROMETHEUS_PORT to a free range"
        )
    raise PortInUse(
        f"recompprof: Prometheus port {port} ({where}) on {addr} is already in use, so this rank serves no "
        f"metrics; set prometheus_port / RECOMPPROF_PROMETHEUS_PORT to a free base port, or "
        f"prometheus_port_search / RECOMPPROF_PROMETHEUS_PORT_SEARCH=1 to take the next free one"
    )
