"""The collector: the metric names of docs/prometheus.md, types and labels, pre-created series, buckets, exemplars."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from metric_contract import CONTRACT
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from prometheus_helpers import compile_event, feed, frame, make_session, scrape
from servers import need

from recompprof import _internal
from recompprof._model.aggregates import DURATION_BUCKETS, ERROR_TYPES
from recompprof._model.events import Frame, Reason
from recompprof._model.vocabulary import CACHE_RESULTS, CACHES, CATEGORIES, LIMITS, PHASES
from recompprof.testing import raise_internal_errors
from recompprof_prometheus import SnapshotCollector


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset({"rank": "0", **labels}.items()))]


def test_families_match_the_design_contract() -> None:
    """Every metric of the contract is exported with its type and exactly its labels, and nothing else is."""
    session = make_session()
    feed(session)
    fams = {f.name: f for f in text_string_to_metric_families(scrape(session))}
    assert set(fams) == set(CONTRACT)
    for name, (typ, labels) in CONTRACT.items():
        assert fams[name].type == typ, name
        for s in fams[name].samples:
            got = set(s.labels) - {"le"}
            if name == "recompprof_build_info":
                assert labels <= got, got
            elif name == "recompprof_process_info":
                assert labels <= got <= labels | {"local_world_size", "launcher"}, got
            else:
                assert got == labels, (name, got)


def test_values_follow_the_aggregates() -> None:
    """Compiles, recompiles, guard failures by category, limit hits, failures and phase seconds equal what was fed."""
    session = make_session()
    feed(session)
    text, label = scrape(session), frame().label
    assert value(text, "torch_compile_compiles_total", frame=label) == 3
    assert value(text, "torch_compile_recompiles_total", frame=label) == 2
    assert value(text, "torch_compile_guard_failures_total", frame=label, reason="size") == 2
    assert (
        value(text, "torch_compile_guard_failures_total", frame=label, reason="python_constant")
        == 1
    )
    assert value(text, "torch_compile_guard_failures_total", frame=label, reason="global") == 1
    assert (
        value(
            text, "torch_compile_recompile_limit_hits_total", frame=label, limit="recompile_limit"
        )
        == 1
    )
    assert value(text, "torch_compile_compile_failures_total", error_type="Unsupported") == 1
    assert value(text, "torch_compile_graph_breaks_total") == 1
    assert value(text, "torch_compile_cache_entries", frame=label) == 3
    assert value(text, "torch_compile_recompile_limit", limit="recompile_limit") == 8
    assert value(text, "torch_compile_phase_seconds_total", phase="dynamo_trace") == pytest.approx(
        0.75 * (0.3 + 2.0 + 0.04 + 0.3)
    )
    assert value(text, "torch_compile_duration_seconds_count") == 4
    assert value(text, "torch_compile_duration_seconds_sum") == pytest.approx(2.64)
    assert value(text, "torch_compile_duration_seconds_bucket", le="0.05") == 1
    assert value(text, "torch_compile_duration_seconds_bucket", le="0.5") == 3
    assert value(text, "torch_compile_duration_seconds_bucket", le="+Inf") == 4


def test_known_label_values_exist_at_zero() -> None:
    """Every phase, error type and this exporter's components exist at 0 before any compile; a known frame has every category and limit."""
    session = make_session()
    text = scrape(session)
    for phase in PHASES:
        assert value(text, "torch_compile_phase_seconds_total", phase=phase) == 0
    for error_type in ERROR_TYPES:
        assert value(text, "torch_compile_compile_failures_total", error_type=error_type) == 0
    assert value(text, "recompprof_internal_errors_total", component="prometheus.server") == 0
    assert "torch_compile_last_compile_timestamp_seconds" not in text  # no fake 1970 timestamp
    session.aggregates.add_compile(compile_event(frame(), recompile=False))
    text = scrape(session)
    for category in CATEGORIES:
        assert (
            value(text, "torch_compile_guard_failures_total", frame=frame().label, reason=category)
            == 0
        )
    for limit in LIMITS:
        assert (
            value(
                text, "torch_compile_recompile_limit_hits_total", frame=frame().label, limit=limit
            )
            == 0
        )


def test_recompile_seconds_follow_the_cause_and_the_backward() -> None:
    """Recompile seconds go to the frame and category of the explaining reason; a backward with the forward's
    compile id adds to the same cause; first compiles and limit hits add nothing; per-frame seconds count all."""
    session = make_session()
    agg, f, label = session.aggregates, frame(), frame().label
    agg.add_compile(compile_event(f, recompile=False, duration=1.0, compile_id="0/0"))
    size = Reason(text="size changed", category="size", subject="L['x']", explains_change=True)
    agg.add_compile(
        compile_event(f, recompile=True, duration=2.0, compile_id="0/1").model_copy(
            update={"reasons": [Reason(text="old", category="dtype"), size]}
        )
    )
    agg.add_compile(
        compile_event(
            Frame(name="<backward>", file="<unknown>", line=0),
            recompile=False,
            duration=0.5,
            compile_id="0/1",
            backward=True,
        )
    )
    agg.add_compile(
        compile_event(
            f,
            recompile=True,
            duration=7.0,
            compile_id="0/2",
            outcome="limit_hit",
            categories=("global",),
        )
    )
    text = scrape(session)
    assert value(
        text, "torch_compile_recompile_seconds_total", frame=label, reason="size"
    ) == pytest.approx(2.5)
    assert (
        "torch_compile_recompile_seconds_total",
        frozenset({"rank": "0", "frame": label, "reason": "dtype"}.items()),
    ) not in samples(text)
    assert (
        "torch_compile_recompile_seconds_total",
        frozenset({"rank": "0", "frame": label, "reason": "global"}.items()),
    ) not in samples(text)
    assert value(text, "torch_compile_frame_compile_seconds_total", frame=label) == pytest.approx(
        3.0
    )
    reasons = {
        s.labels["reason"]
        for fam in text_string_to_metric_families(text)
        if fam.name == "torch_compile_recompile_seconds"
        for s in fam.samples
    }
    assert reasons <= set(CATEGORIES)


def test_cache_lookups_are_counted_by_cache_and_result() -> None:
    """Every cache x result series exists at 0; lookups and seconds saved add up over compiles."""
    session = make_session()
    text = scrape(session)
    for cache in CACHES:
        for result in CACHE_RESULTS:
            assert value(text, "torch_compile_cache_lookups_total", cache=cache, result=result) == 0
    agg = session.aggregates
    agg.add_compile(
        compile_event(
            frame(),
            recompile=False,
            cache_lookups={"fx_graph": {"miss": 2}, "aot_autograd": {"miss": 1}},
        )
    )
    agg.add_compile(
        compile_event(
            frame(),
            recompile=True,
            cache_lookups={"fx_graph": {"hit": 2}, "aot_autograd": {"bypass": 1}},
            cache_seconds_saved=1.25,
        )
    )
    text = scrape(session)
    assert value(text, "torch_compile_cache_lookups_total", cache="fx_graph", result="hit") == 2
    assert value(text, "torch_compile_cache_lookups_total", cache="fx_graph", result="miss") == 2
    assert (
        value(text, "torch_compile_cache_lookups_total", cache="aot_autograd", result="bypass") == 1
    )
    assert value(text, "torch_compile_cache_saved_seconds_total") == pytest.approx(1.25)


def test_duration_buckets_span_50ms_to_an_hour_without_created_series() -> None:
    """The duration histogram uses DURATION_BUCKETS (0.05 s to 3600 s) and no `_created` series appear in either format."""
    session = make_session()
    feed(session)
    text = scrape(session)
    les = [
        s.labels["le"]
        for f in text_string_to_metric_families(text)
        if f.name == "torch_compile_duration_seconds"
        for s in f.samples
        if s.name.endswith("_bucket")
    ]
    assert [float(le) for le in les[:-1]] == list(DURATION_BUCKETS) and les[-1] == "+Inf"
    assert DURATION_BUCKETS[0] == 0.05 and DURATION_BUCKETS[-1] == 3600
    assert "_created" not in text and "_created" not in scrape(session, openmetrics=True)


def test_frames_past_the_cap_fold_into_other() -> None:
    """With max_frames=2 a third frame is exported as frame="other" and counted in events_dropped{reason="frame_cap"}."""
    session = make_session(max_frames=2)
    for i in range(3):
        session.aggregates.add_compile(compile_event(frame(i), recompile=False))
    text = scrape(session)
    frames = {
        s.labels["frame"]
        for f in text_string_to_metric_families(text)
        if f.name == "torch_compile_compiles"
        for s in f.samples
    }
    assert frames == {frame(0).label, frame(1).label, "other"}
    assert value(text, "recompprof_events_dropped_total", reason="frame_cap") == 1


def test_exemplars_carry_the_trace_id_in_openmetrics_only() -> None:
    """A trace id added with session.add_exemplar appears on its duration bucket in OpenMetrics and never in the text format."""
    session = make_session()
    feed(session)
    session.add_exemplar(2.0, "4bf92f3577b34da6a3ce929d0e0e4736")
    om = scrape(session, openmetrics=True)
    line = next(ln for ln in om.splitlines() if 'le="2.5"' in ln)
    assert '# {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 2.0' in line
    assert "trace_id" not in scrape(session)


def test_internal_errors_come_from_the_snapshot() -> None:
    """An internal error recorded by any component is exported in recompprof_internal_errors_total{component}."""
    session = make_session()
    raise_internal_errors(
        False
    )  # production mode for this test (the autouse fixture restores strict)
    with _internal.contain("prometheus.textfile"):
        raise OSError("disk full")
    with _internal.contain("eventlog"):
        raise OSError("disk full")
    text = scrape(session)
    assert value(text, "recompprof_internal_errors_total", component="prometheus.textfile") == 1
    assert value(text, "recompprof_internal_errors_total", component="eventlog") == 1


def test_promtool_accepts_the_exposition_at_the_frame_cap(tmp_path: Path) -> None:
    """`promtool check metrics` finds no problem in the exposition with 50 frames, every category and phase."""
    promtool = need("promtool", "prometheus")
    session = make_session()
    for i in range(50):
        session.aggregates.add_compile(
            compile_event(frame(i), recompile=True, categories=CATEGORIES)
        )
    text = scrape(session)
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_fast_writer_is_byte_identical_to_prometheus_client() -> None:
    """The endpoint's writer produces exactly prometheus_client's text and OpenMetrics bytes, also across cached scrapes."""
    from recompprof_prometheus.render import Renderer

    session = make_session()
    feed(session)
    session.add_exemplar(2.0, "4bf92f3577b34da6a3ce929d0e0e4736")
    collector = SnapshotCollector(session.snapshot, session.identity, session.versions)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    renderer = Renderer()
    for round_ in range(3):
        session.step()
        if round_ == 2:
            session.aggregates.add_compile(compile_event(frame(7), recompile=False))
        families = collector.families(session.snapshot())

        class Fixed:
            def collect(self, families: list[Any] = families) -> list[Any]:
                return families

        assert renderer.text(families) == generate_latest(Fixed())  # type: ignore[arg-type]
        assert renderer.openmetrics(families) == generate_openmetrics(Fixed())
