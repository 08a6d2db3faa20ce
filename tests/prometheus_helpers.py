"""Test helpers for the Prometheus exporter: a real, unattached session fed with real events, scraped
through the collector, or served by a running exporter."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import CollectorRegistry

from recompprof._capture import settings as settings_module
from recompprof._capture.identity import Identity
from recompprof._capture.session import Session
from recompprof._model.events import Compile, Frame, GraphBreak, Reason, RecompileLimitHit
from recompprof_prometheus import PrometheusExporter, SnapshotCollector


def make_session(rank: int = 0, local_rank: int = 0, world: int = 1, **settings: Any) -> Session:
    """A real, unattached Session (no torch hooks) whose aggregates the test feeds with real events."""
    ident = Identity(
        rank,
        local_rank,
        world,
        max(world, 1),
        "run-test",
        "host",
        1234,
        "single" if world == 1 else "torchrun",
    )
    session = Session(settings_module.load(**settings), identity=ident)
    session.aggregates.limits.update({"recompile_limit": 8, "accumulated_recompile_limit": 256})
    return session


def frame(i: int = 0) -> Frame:
    return Frame(name=f"fn{i}", file=f"/src/pkg/model{i}.py", line=10 + i)


def compile_event(
    f: Frame, *, recompile: bool, duration: float = 0.3, categories: tuple[str, ...] = (), **kw: Any
) -> Compile:
    kw.setdefault("compile_id", "0/0")
    return Compile(
        time=time.time(),
        frame=f,
        is_recompile=recompile,
        duration=duration,
        phases={"dynamo_trace": duration * 0.75, "other": duration * 0.25},
        reasons=[Reason(text=f"{c} changed", category=c) for c in categories],
        **kw,
    )  # type: ignore[arg-type]


def feed(session: Session) -> None:
    """A small run: one frame compiled, recompiled twice for size/python_constant, one limit hit, one failure."""
    agg, f = session.aggregates, frame()
    agg.add_compile(compile_event(f, recompile=False, cache_entries=0))
    agg.add_compile(
        compile_event(f, recompile=True, duration=2.0, categories=("size",), cache_entries=1)
    )
    agg.add_compile(
        compile_event(
            f,
            recompile=True,
            duration=0.04,
            categories=("python_constant", "size", "global"),
            cache_entries=2,
            graph_breaks=1,
        )
    )
    # Graph breaks are counted from GraphBreak events (a break torch cannot resume from comes after its compile).
    agg.add_graph_break(GraphBreak(time=time.time(), frame=f, compile_id="0/0", reason="print()"))
    agg.add_limit_hit(
        RecompileLimitHit(time=time.time(), frame=f, limit="recompile_limit", value=8)
    )
    agg.add_compile(
        compile_event(frame(1), recompile=False, outcome="failed", fail_type="Unsupported")
    )


def scrape(session: Session, openmetrics: bool = False) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(session.snapshot, session.identity, session.versions))
    return (generate_openmetrics if openmetrics else generate_latest)(registry).decode()


@contextlib.contextmanager
def running(**settings: object) -> Iterator[PrometheusExporter]:
    """An exporter started over a fed session (``local_rank`` and ``world`` set its identity), shut down after."""
    session = make_session(
        **{k: v for k, v in settings.items() if k not in {"local_rank", "world"}},
        local_rank=int(settings.get("local_rank", 0)),  # type: ignore[arg-type]
        world=int(settings.get("world", 1)),
    )  # type: ignore[arg-type]
    feed(session)
    exporter = PrometheusExporter(session.settings)
    exporter.start(session)
    try:
        yield exporter
    finally:
        exporter.shutdown()
