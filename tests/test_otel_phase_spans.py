"""Phase spans on a provider recompprof owns skip the SDK's per-span machinery (a cost on the compile path) and
export the same bytes.

Both paths run on real SDK tracer providers with identically seeded id generators; what each hands its span
processor is encoded with the OTLP protobuf encoder the exporter uses and compared byte for byte.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from otel_helpers import compile_event

from recompprof_otel import SpanBuilder


class SeededIds(IdGenerator):
    def __init__(self) -> None:
        self._random = random.Random(15)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


class Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self.spans.append(span)


class PhaseSampler(Sampler):
    """Drops the aot_autograd phase span, keeps the rest and adds an attribute to the dynamo_trace one."""

    def should_sample(
        self,
        parent_context,
        trace_id,
        name,
        kind=None,  # type: ignore[no-untyped-def]
        attributes=None,
        links=None,
        trace_state=None,
    ) -> SamplingResult:
        if name.endswith("aot_autograd"):
            return SamplingResult(Decision.DROP)
        extra = {"sampler.note": "kept"} if name.endswith("dynamo_trace") else {}
        return SamplingResult(Decision.RECORD_AND_SAMPLE, {**(attributes or {}), **extra})

    def get_description(self) -> str:
        return "PhaseSampler"


def _encoded(
    fast: bool, sampler: Sampler | None = None, limits: SpanLimits | None = None
) -> tuple[bytes, list[str]]:
    collect = Collect()
    provider = TracerProvider(
        id_generator=SeededIds(), sampler=sampler, span_limits=limits, shutdown_on_exit=False
    )
    provider.add_span_processor(collect)
    builder = SpanBuilder(
        provider.get_tracer("recompprof", "0.1.0"), processor=collect if fast else None
    )
    events = [
        compile_event("0/0", start=1000.0),
        compile_event(
            "0/1", is_recompile=True, start=1001.0, phases={"dynamo_trace": 0.1, "code_gen": 0.5}
        ),
        compile_event("0/2", is_recompile=True, start=1002.0, outcome="failed", fail_type="Boom"),
    ]
    for event in events:
        builder.compile_span(event)
    spans: Sequence[ReadableSpan] = collect.spans
    return encode_spans(spans).SerializeToString(), [s.name for s in spans]


def test_phase_spans_of_an_owned_provider_encode_to_the_same_bytes() -> None:
    """Phase spans handed straight to the processor encode exactly like those built by tracer.start_span."""
    fast, names = _encoded(True)
    assert names.count("torch_compile.frame") == 3 and len(names) == 3 + 3 + 2 + 3
    assert fast == _encoded(False)[0]


def test_the_tracers_sampler_and_limits_still_decide_phase_spans() -> None:
    """A sampler that drops or annotates phase spans, and attribute limits, act the same on both paths."""
    fast, names = _encoded(True, sampler=PhaseSampler())
    assert (
        "torch_compile.phase aot_autograd" not in names
        and "torch_compile.phase dynamo_trace" in names
    )
    assert fast == _encoded(False, sampler=PhaseSampler())[0]
    limited, _ = _encoded(
        True, limits=SpanLimits(max_span_attributes=1, max_span_attribute_length=4)
    )
    assert (
        limited
        == _encoded(False, limits=SpanLimits(max_span_attributes=1, max_span_attribute_length=4))[0]
    )
