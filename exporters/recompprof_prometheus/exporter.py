"""``PrometheusExporter``: picks the mode, wires collector and output, and owns their lifetime.

Exit paths: the session calls :meth:`shutdown` on detach, at interpreter exit and on SIGTERM (its
handler chains to any earlier one), so this exporter installs no signal handler of its own (two
chained handlers would restore each other out of order); an ``atexit`` hook is kept only as a
safety net for sessions that never detach.

Settings that cannot work (a mode without its directory or URL, half a TLS pair, a certificate or key
that cannot be read or loaded, a ``prometheus_addr`` that does not resolve or is not an address of this
host, a malformed ``prometheus_basic_auth``) raise ``ConfigError`` naming the setting from the
constructor, i.e. at ``attach()`` and in ``recompprof run`` before the program starts.
Port-taken policy: attach never fails because of the metrics port. By default the error (naming the
port and ``prometheus_port``) is logged once and counted in ``recompprof_internal_errors_total``
and training goes on without an endpoint; ``prometheus_port_search`` takes the next free port
instead. Under ``recompprof.testing.raise_internal_errors(True)`` (the strict mode tests run in) the same
error is raised as a ``ConfigError``.
"""

from __future__ import annotations

import atexit
import logging
import socket
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.registry import CollectorRegistry

from recompprof.exporter import ConfigError, Exporter, Owner, contain
from recompprof_prometheus import app, multiprocess, server
from recompprof_prometheus.collector import SnapshotCollector
from recompprof_prometheus.writers import (
    CallbackOutput,
    Output,
    Periodic,
    PushgatewayOutput,
    TextfileOutput,
)

if TYPE_CHECKING:
    from recompprof.exporter import Event, SessionView
    from recompprof_prometheus.settings import PrometheusSettings

log = logging.getLogger("recompprof")
# Multiprocess files are refreshed this soon after a compile event (and every push interval).
MIRROR_GAP = 0.5


class PrometheusExporter(Exporter):
    """Exports a session's totals as Prometheus metrics (pull, multiprocess, textfile or pushgateway)."""

    name = "prometheus"
    traces = False  # it sends no traces: compiles need no trace id for it

    settings: PrometheusSettings

    def __init__(self, settings: PrometheusSettings) -> None:
        _validate(
            settings
        )  # runs in attach(), outside the session's guard: bad settings fail there
        self.settings = settings
        self.collector: SnapshotCollector | None = None
        self.registry: CollectorRegistry | None = None
        self.server: server.MetricsServer | None = None
        self.periodic: Periodic | None = None
        self._atexit_installed = False
        self._stopped = False
        self._owner = Owner()
        self._rank = 0

    # -- Exporter interface --------------------------------------------------------------------
    def start(self, session: SessionView) -> None:
        s = self.settings
        identity = session.identity
        self._rank = identity.rank
        self.collector = SnapshotCollector(session.snapshot, identity, session.versions)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        if s.prometheus_mode == "pull":
            with contain("prometheus.server"):
                self.server = self._serve(
                    self.registry, identity.local_rank, identity.local_world_size
                )
        elif s.prometheus_mode == "multiprocess":
            with contain("prometheus.multiprocess"):
                self._start_multiprocess(session)
        elif s.prometheus_mode == "textfile":
            with contain("prometheus.textfile"):
                assert s.prometheus_textfile_dir is not None
                self._start_periodic(
                    TextfileOutput(
                        self.registry, s.prometheus_textfile_dir, s.prometheus_job, identity.rank
                    )
                )
        elif s.prometheus_mode == "pushgateway":
            with contain("prometheus.pushgateway"):
                assert s.prometheus_pushgateway_url
                linger = s.prometheus_linger_seconds
                self._start_periodic(
                    PushgatewayOutput(
                        self.registry,
                        s.prometheus_pushgateway_url,
                        s.prometheus_job,
                        identity.rank,
                        linger=s.prometheus_push_interval if linger is None else linger,
                    )
                )
        if self.periodic is not None or self.server is not None:
            atexit.register(self._at_exit)
            self._atexit_installed = True

    def on_event(self, event: Event) -> None:
        if self.periodic is not None:
            self.periodic.poke()

    def shutdown(self, timeout: float = 5.0) -> None:
        if self._stopped or self._owner.forked():
            # In a forked child (atexit, inherited SIGTERM handler) the server thread and the periodic
            # writer exist only in the parent: joining them would hang, pushing would duplicate the rank.
            return
        self._stopped = True
        self._uninstall_handlers()
        s = self.settings
        if self.periodic is not None:
            self.periodic.close(clean=True, timeout=timeout)
        if (
            self.server is not None
            and s.prometheus_textfile_dir is not None
            and s.prometheus_mode == "pull"
        ):
            # Pull mode with a textfile directory too: the final values also land where node_exporter reads.
            with contain("prometheus.textfile", TextfileOutput.hint):
                assert self.registry is not None
                TextfileOutput(
                    self.registry, s.prometheus_textfile_dir, s.prometheus_job, self._rank
                ).flush()
        if self.server is not None:
            with contain("prometheus.server"):
                waited = self.server.linger(s.prometheus_linger_seconds)
                if waited:
                    log.debug("recompprof: served the final values for %.1f s after detach", waited)
                self.server.close(timeout)

    def dropped(self) -> dict[str, int]:
        """Nothing is dropped: every scrape and push reads the whole snapshot."""
        return {}

    # -- modes ----------------------------------------------------------------------------------
    def _serve(self, registry: CollectorRegistry, offset: int, stride: int) -> server.MetricsServer:
        s = self.settings
        tls = server.tls_context(s.prometheus_certfile, s.prometheus_keyfile)
        srv = server.serve(
            registry,
            s.prometheus_addr,
            s.prometheus_port,
            offset,
            search=s.prometheus_port_search,
            stride=stride,
            tls=tls,
            credentials=s.prometheus_basic_auth,
        )
        if (
            s.prometheus_basic_auth
            and tls is None
            and s.prometheus_addr not in ("127.0.0.1", "::1", "localhost")
        ):
            log.warning(
                "recompprof: Prometheus basic auth without TLS sends the password in clear text; "
                "set prometheus_certfile and prometheus_keyfile"
            )
        log.info(
            "recompprof: serving Prometheus metrics on %s://%s:%d/metrics",
            srv.scheme,
            srv.addr,
            srv.port,
        )
        return srv

    def _start_multiprocess(self, session: SessionView) -> None:
        identity = session.identity
        path = multiprocess.directory(identity)
        claim = multiprocess.prepare(path, identity)
        assert self.collector is not None
        collector = self.collector
        mirror = multiprocess.MmapMirror(path, identity.run_id, identity.rank, claim)
        self._start_periodic(
            CallbackOutput(
                "prometheus.multiprocess",
                lambda: mirror.write(collector.families(session.snapshot())),
                mirror.close,
            ),
            min_gap=MIRROR_GAP,
        )
        if identity.local_rank == 0:
            pod = CollectorRegistry(auto_describe=False)
            pod.register(multiprocess.JobCollector(path, identity.run_id))
            with contain("prometheus.server"):
                self.server = self._serve(pod, 0, 1)

    def _start_periodic(self, output: Output, min_gap: float = 1.0) -> None:
        self.periodic = Periodic(output, self.settings.prometheus_push_interval, min_gap=min_gap)
        self.periodic.start()

    # -- exit paths -----------------------------------------------------------------------------
    def _at_exit(self) -> None:
        self.shutdown()

    def _uninstall_handlers(self) -> None:
        if self._atexit_installed:
            self._atexit_installed = False
            atexit.unregister(self._at_exit)

    # -- introspection (tests, docs) ----------------------------------------------------------------
    @property
    def url(self) -> str | None:
        """The endpoint this process serves, if any."""
        if self.server is None:
            return None
        return f"{self.server.scheme}://{self.server.addr}:{self.server.port}/metrics"


def _validate(s: PrometheusSettings) -> None:
    """Reject settings combinations that cannot work, naming the setting and its variable."""

    def need(name: str) -> None:
        raise ConfigError(
            f"recompprof setting {name!r} (RECOMPPROF_{name.upper()}) is required with "
            f"prometheus_mode={s.prometheus_mode}"
        )

    if s.prometheus_mode == "textfile" and s.prometheus_textfile_dir is None:
        need("prometheus_textfile_dir")
    if s.prometheus_mode == "pushgateway" and not s.prometheus_pushgateway_url:
        need("prometheus_pushgateway_url")
    if (s.prometheus_certfile is None) != (s.prometheus_keyfile is None):
        raise ConfigError(
            "recompprof settings 'prometheus_certfile' and 'prometheus_keyfile' "
            "(RECOMPPROF_PROMETHEUS_CERTFILE/_KEYFILE) must be set together"
        )
    if s.prometheus_certfile is not None and s.prometheus_keyfile is not None:
        _check_tls(s.prometheus_certfile, s.prometheus_keyfile)
    if s.prometheus_basic_auth is not None:
        app.check_credentials(s.prometheus_basic_auth)
    if s.prometheus_mode in ("pull", "multiprocess"):
        _check_address(s.prometheus_addr)


def _setting(name: str) -> str:
    return f"recompprof setting {name!r} (RECOMPPROF_{name.upper()})"


def _check_tls(certfile: Path, keyfile: Path) -> None:
    """Both files readable, and together a certificate with its private key."""
    for name, path in (("prometheus_certfile", certfile), ("prometheus_keyfile", keyfile)):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise ConfigError(
                f"{_setting(name)}: cannot read {path}: {exc.strerror or exc}"
            ) from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
            certfile=str(certfile), keyfile=str(keyfile)
        )
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"recompprof settings 'prometheus_certfile' {str(certfile)!r} and 'prometheus_keyfile' "
            f"{str(keyfile)!r}: not a PEM certificate and its private key ({exc})"
        ) from None


def _check_address(addr: str) -> None:
    """``addr`` resolves and this host can listen on it (probed on a free port)."""
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            addr, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(
            f"{_setting('prometheus_addr')}: cannot resolve {addr!r} "
            f"({getattr(exc, 'strerror', None) or exc})"
        ) from None
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.bind(sockaddr)
    except OSError as exc:
        raise ConfigError(
            f"{_setting('prometheus_addr')}: cannot listen on {addr!r}, not an address of this host "
            f"({exc.strerror or exc}); 127.0.0.1 serves this host only, 0.0.0.0 every address"
        ) from None
