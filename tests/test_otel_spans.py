"""Span building: compile events become the span tree, attributes, links and status of the Spans contract."""

from __future__ import annotations

import threading

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_helpers import FRAME, StandInSession, compile_event
from otlp_receiver import OtlpReceiver, clear_otel_env, tree

from recompprof._model.events import Frame, Reason, RecompileLimitHit
from recompprof_otel import OtelExporter, SpanBuilder, phase_intervals


@pytest.fixture(autouse=True)
def otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def _export(
    events: list, session: StandInSession | None = None
) -> tuple[OtelExporter, StandInSession]:
    session = session or StandInSession()
    exporter = OtelExporter(session.settings)
    exporter.start(session)  # type: ignore[arg-type]
    for event in events:
        exporter.on_event(event)
    exporter.shutdown(5.0)
    return exporter, session


def test_phase_intervals_are_ordered_contiguous_and_sum_to_duration() -> None:
    """Phase spans follow PHASES order end to end from the start and together last the compile's duration."""
    start = 1_000_000_000
    got = phase_intervals(
        start, {"other": 0.2, "dynamo_trace": 0.25, "aot_autograd": 0.15}, start + 600_000_000
    )
    assert [p for p, _, _ in got] == ["dynamo_trace", "aot_autograd", "other"]
    assert got[0][1] == start and got[-1][2] == start + 600_000_000
    assert all(a[2] == b[1] for a, b in zip(got, got[1:]))


def test_phase_intervals_never_run_past_the_root() -> None:
    """Phase totals that overshoot the duration (rounding) are clipped at the root's end, skipping empty phases."""
    got = phase_intervals(0, {"dynamo_trace": 0.5, "code_gen": 0.0, "other": 0.2}, 600_000_000)
    assert [p for p, _, _ in got] == ["dynamo_trace", "other"]
    assert got[-1][2] == 600_000_000 and all(b <= e for _, b, e in got)


def test_an_unknown_steady_state_verdict_is_an_attribute_of_its_own(receiver: OtlpReceiver) -> None:
    """A recompile whose steady-state verdict is unknown carries ``recompprof.steady_state_unknown`` (the
    subject) beside ``steady_state`` false; a known verdict carries no such attribute."""
    unknown = "instance of L['self'].layer_idx"
    _export(
        [
            compile_event("0/1", is_recompile=True, steady_state=True),
            compile_event(
                "0/2", is_recompile=True, steady_state=False, steady_state_unknown=unknown
            ),
        ]
    )
    spans = receiver.wait_for(lambda s: len(s) == 8)
    roots = {
        s["attributes"]["recompprof.compile_id"]: s["attributes"]
        for s in spans
        if s["name"] == "torch_compile.frame"
    }
    assert roots["0/1"]["recompprof.steady_state"] is True
    assert "recompprof.steady_state_unknown" not in roots["0/1"]
    assert roots["0/2"]["recompprof.steady_state"] is False
    assert roots["0/2"]["recompprof.steady_state_unknown"] == unknown


def test_compile_becomes_root_span_with_phase_children(receiver: OtlpReceiver) -> None:
    """One compile gives a root torch_compile.frame span with contract attributes and one child per phase."""
    event = compile_event()
    _export([event])
    spans = receiver.wait_for(lambda s: len(s) == 4)
    (root,) = [s for s in spans if s["name"] == "torch_compile.frame"]
    assert root["parent_span_id"] == ""
    attrs = root["attributes"]
    assert attrs["code.function.name"] == "forward" and attrs["code.file.path"] == FRAME.file
    assert attrs["code.line.number"] == 33
    assert attrs["recompprof.compile_id"] == "0/0" and attrs["recompprof.rank"] == 3
    assert attrs["recompprof.step"] == 7 and attrs["recompprof.is_recompile"] is False
    assert root["status"] == "UNSET" and root["kind"] == 1  # SPAN_KIND_INTERNAL
    assert root["start_ns"] == round(event.start_time * 1e9)
    assert root["end_ns"] - root["start_ns"] == pytest.approx(0.6e9, abs=2)
    children = sorted(tree(spans)[root["span_id"]], key=lambda s: s["start_ns"])
    assert [c["name"] for c in children] == [
        "torch_compile.phase dynamo_trace",
        "torch_compile.phase aot_autograd",
        "torch_compile.phase other",
    ]
    assert {c["trace_id"] for c in children} == {root["trace_id"]}
    assert children[0]["start_ns"] == root["start_ns"] and children[-1]["end_ns"] == root["end_ns"]
    assert all(a["end_ns"] == b["start_ns"] for a, b in zip(children, children[1:]))
    assert root["scope"] == "recompprof"


def test_spans_are_built_on_the_export_thread_not_the_compiling_one(receiver: OtlpReceiver) -> None:
    """With its own provider, the exporter builds a compile's spans on its export thread: ``on_event``
    (the compiling thread) only hands the event over, and the spans still say when the compile ran."""
    session = StandInSession()
    exporter = OtelExporter(session.settings)
    exporter.start(session)  # type: ignore[arg-type]
    builder = exporter._builder
    assert builder is not None
    built_on: list[str] = []
    compile_span = builder.compile_span

    def recording(event):  # type: ignore[no-untyped-def]
        built_on.append(threading.current_thread().name)
        return compile_span(event)

    builder.compile_span = recording  # type: ignore[method-assign]
    event = compile_event()
    exporter.on_event(event)
    spans = receiver.wait_for(lambda s: len(s) == 4)  # the worker runs every 50 ms here
    exporter.shutdown(5.0)
    assert built_on == ["recompprof-otel-export"]
    (root,) = [s for s in spans if s["name"] == "torch_compile.frame"]
    assert root["start_ns"] == round(event.start_time * 1e9)
    assert root["attributes"]["recompprof.compile_id"] == "0/0"


def test_resource_names_service_and_rank(receiver: OtlpReceiver) -> None:
    """The resource carries service.name recompprof and the rank identity, host and process."""
    _export([compile_event()])
    resource = receiver.wait_for(lambda s: len(s) == 4)[0]["resource"]
    assert resource["service.name"] == "recompprof"
    assert resource["recompprof.rank"] == 3 and resource["recompprof.local_rank"] == 1
    assert resource["recompprof.world_size"] == 8 and resource["recompprof.run_id"] == "run-42"
    assert resource["host.name"] and resource["process.pid"] > 0
    assert resource["recompprof.torch.version"] == "2.13.0+cpu"


def test_otel_service_name_and_resource_attributes_win(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_SERVICE_NAME overrides the default name and OTEL_RESOURCE_ATTRIBUTES is merged over ours."""
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=pod-7,host.name=node-a,service.name=ignored"
    )
    _export([compile_event()])
    resource = receiver.wait_for(lambda s: len(s) == 4)[0]["resource"]
    assert resource["service.name"] == "trainer"
    assert resource["k8s.pod.name"] == "pod-7" and resource["host.name"] == "node-a"
    assert resource["recompprof.rank"] == 3


def test_recompile_links_to_previous_compile_and_carries_reasons(receiver: OtlpReceiver) -> None:
    """A recompile is its own trace, linked to the previous compile of the same frame, with its guard failures."""
    _export([compile_event("0/0"), compile_event("0/1", is_recompile=True)])
    roots = receiver.wait_for(lambda s: sum(x["name"] == "torch_compile.frame" for x in s) == 2)
    first, second = sorted(
        (s for s in roots if s["name"] == "torch_compile.frame"),
        key=lambda s: s["attributes"]["recompprof.compile_id"],
    )
    assert first["trace_id"] != second["trace_id"] and first["links"] == []
    (link,) = second["links"]
    assert (link["trace_id"], link["span_id"]) == (first["trace_id"], first["span_id"])
    assert link["attributes"] == {
        "recompprof.link.reason": "recompile_of",
        "recompprof.compile_id": "0/0",
    }
    attrs = second["attributes"]
    assert attrs["recompprof.is_recompile"] is True
    assert attrs["recompprof.guard_failure.reason"] == "size"
    assert attrs["recompprof.guard_failure.subject"] == "L['x']"
    assert attrs["recompprof.guard_failure.categories"] == ["python_constant", "size"]
    assert attrs["recompprof.guard_failure.reason_categories"] == ["size", "python_constant"]
    assert attrs["recompprof.guard_failure.reasons"][0].startswith("tensor 'x' size mismatch")
    assert attrs["recompprof.guard_failure.explains_change"] == [True, False]
    assert attrs["recompprof.guard_failure.count"] == 2


def test_spans_carry_the_attributed_cause_caches_and_call_site(receiver: OtlpReceiver) -> None:
    """A recompile span and its backward's span carry the cause (frame, category, subject, seconds) the report
    charges them to; a first compile carries none; cache lookups and the call site are attributes too."""
    call_site = ["train.py:40 in main", "train.py:12 in step"]
    _export(
        [
            compile_event("0/0"),
            compile_event(
                "0/1",
                is_recompile=True,
                call_site=call_site,
                cache_lookups={"fx_graph": {"hit": 2}},
                cache_seconds_saved=0.4,
            ),
            compile_event(
                "0/1",
                backward=True,
                frame=Frame(name="<backward>", file="<unknown>", line=0),
                duration=0.2,
                phases={"aot_autograd": 0.2},
            ),
        ]
    )
    spans = receiver.wait_for(lambda s: sum(x["name"] == "torch_compile.frame" for x in s) == 3)
    roots = {
        (s["attributes"]["recompprof.compile_id"], s["attributes"]["recompprof.backward"]): s[
            "attributes"
        ]
        for s in spans
        if s["name"] == "torch_compile.frame"
    }
    assert not any(k.startswith("recompprof.cause.") for k in roots[("0/0", False)])
    recompile, backward = roots[("0/1", False)], roots[("0/1", True)]
    for attrs, seconds in ((recompile, 0.6), (backward, 0.2)):
        assert attrs["recompprof.cause.frame"] == FRAME.label
        assert (
            attrs["recompprof.cause.category"] == "size"
            and attrs["recompprof.cause.subject"] == "L['x']"
        )
        assert attrs["recompprof.cause.seconds"] == pytest.approx(seconds)
    assert recompile["recompprof.cache.fx_graph.hit"] == 2
    assert recompile["recompprof.cache.seconds_saved"] == pytest.approx(0.4)
    assert recompile["recompprof.call_site"] == call_site


def test_links_follow_each_frame_separately() -> None:
    """Recompiles of two frames each link to their own frame's previous compile; backward compiles are separate."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    builder = SpanBuilder(provider.get_tracer("t"))
    other = Frame(name="loss_fn", file="/src/loss.py", line=5)
    a0 = builder.compile_span(compile_event("0/0"))
    b0 = builder.compile_span(compile_event("1/0", frame=other))
    a1 = builder.compile_span(compile_event("0/1", is_recompile=True))
    bwd = builder.compile_span(compile_event("0/1", is_recompile=True, backward=True))
    b1 = builder.compile_span(compile_event("1/1", is_recompile=True, frame=other))
    assert a0 and b0 and a1 and bwd and b1
    assert [link.context for link in a1.links] == [a0.get_span_context()]
    assert [link.context for link in b1.links] == [b0.get_span_context()]
    assert list(bwd.links) == []


def test_link_memory_is_bounded() -> None:
    """The frame -> last compile map keeps at most max_frames entries, forgetting the least recent."""
    provider = TracerProvider()
    builder = SpanBuilder(provider.get_tracer("t"), max_frames=2)
    frames = [Frame(name=f"f{i}", file="/x.py", line=i) for i in range(3)]
    for i, frame in enumerate(frames):
        builder.compile_span(compile_event(f"{i}/0", frame=frame))
    again = builder.compile_span(compile_event("0/1", is_recompile=True, frame=frames[0]))
    assert again is not None and list(again.links) == []
    assert len(builder._last) == 2


def test_failed_compile_sets_error_status_and_type(receiver: OtlpReceiver) -> None:
    """A failed compile's root span has status ERROR, the failure as description and error.type from fail_type."""
    _export(
        [
            compile_event(
                outcome="failed", fail_type="BackendCompilerFailed", fail_reason="backend raised X"
            )
        ]
    )
    root = next(
        s for s in receiver.wait_for(lambda s: len(s) == 4) if s["name"] == "torch_compile.frame"
    )
    assert root["status"] == "ERROR" and root["status_message"] == "backend raised X"
    assert root["attributes"]["error.type"] == "BackendCompilerFailed"
    assert root["attributes"]["recompprof.outcome"] == "failed"


def test_limit_hit_gives_one_error_span(receiver: OtlpReceiver) -> None:
    """A limit hit reported as a compile outcome and as its own event gives exactly one ERROR span."""
    reason = Reason(
        text="L['factor'] == 1.0",
        category="python_constant",
        subject="L['factor']",
        explains_change=True,
    )
    hit = compile_event(
        "0/8",
        is_recompile=True,
        outcome="limit_hit",
        fail_type=None,
        fail_reason="cache_size_limit reached",
        duration=0.0,
        phases={},
    )
    event = RecompileLimitHit(
        time=hit.time,
        rank=3,
        step=7,
        frame=FRAME,
        compile_id="0/8",
        limit="recompile_limit",
        value=8,
        last_reason=reason,
    )
    lone = RecompileLimitHit(
        time=hit.time,
        rank=3,
        step=9,
        frame=FRAME,
        compile_id="0/9",
        limit="recompile_limit",
        value=8,
        last_reason=reason,
    )
    _export([compile_event("0/7"), hit, event, lone])
    spans = receiver.wait_for(lambda s: sum(x["name"] == "torch_compile.frame" for x in s) == 3)
    errors = [s for s in spans if s["status"] == "ERROR"]
    assert sorted(s["attributes"]["recompprof.compile_id"] for s in errors) == ["0/8", "0/9"]
    for span in errors:
        assert span["attributes"]["error.type"] == "recompile_limit_hit"
        assert span["attributes"]["recompprof.outcome"] == "limit_hit"
        assert len(span["links"]) == 1
    assert (
        next(s for s in errors if s["attributes"]["recompprof.compile_id"] == "0/9")["attributes"][
            "recompprof.guard_failure.reason"
        ]
        == "python_constant"
    )


def test_each_compile_is_sent_under_the_trace_id_it_carries(receiver: OtlpReceiver) -> None:
    """A compile's span tree is sent under the event's own ``trace_id`` (the id the session's duration
    exemplar names), a compile without one gets a fresh id, and the exporter says it sends traces."""
    ids = ["4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7a3ce929d0e0e4736"]
    exporter, _ = _export(
        [
            compile_event("0/0", trace_id=ids[0]),
            compile_event("0/1", is_recompile=True, trace_id=ids[1]),
            compile_event("1/0", frame=Frame(name="other", file="/src/o.py", line=1)),
        ]
    )
    spans = receiver.wait_for(
        lambda s: sum(x["name"] == "torch_compile.frame" for x in s) == 3 and len(s) == 12
    )
    by_id = {
        s["attributes"]["recompprof.compile_id"]: s["trace_id"]
        for s in spans
        if s["name"] == "torch_compile.frame"
    }
    assert (by_id["0/0"], by_id["0/1"]) == (ids[0], ids[1])
    assert by_id["1/0"] not in ids and int(by_id["1/0"], 16) != 0
    assert {s["trace_id"] for s in spans if s["name"] != "torch_compile.frame"} == set(
        by_id.values()
    )  # phases follow
    assert exporter.traces is True


def test_borrowed_tracer_provider_is_used_and_global_left_alone() -> None:
    """A tracer provider passed to attach receives the spans; the global provider is never set."""
    before = trace.get_tracer_provider()
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter, _ = _export([compile_event()], StandInSession(tracer_provider=provider))
    assert exporter.processor is None
    names = sorted(s.name for s in memory.get_finished_spans())
    assert names[-1] == "torch_compile.phase other" and "torch_compile.frame" in names
    assert trace.get_tracer_provider() is before
    provider.shutdown()
