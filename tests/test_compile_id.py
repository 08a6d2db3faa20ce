"""Torch's compile id grammar, read once (``recompprof._model.compile_id``), against torch's own ``CompileId``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from torch._guards import CompileId as TorchCompileId, TraceId

from recompprof._analysis.trace.ingest import read_trace
from recompprof._model.compile_id import CompileId
from recompprof._model.compile_record import CompileRecord, limit_hit
from recompprof._model.events import Compile

ids = st.integers(min_value=0, max_value=10**6)


@st.composite
def torch_ids(draw: st.DrawFn) -> tuple[TorchCompileId, int]:
    autograd = draw(st.none() | ids)
    frame = (
        draw(st.none() | st.tuples(ids, ids)) if autograd is not None else draw(st.tuples(ids, ids))
    )
    frame_id, frame_compile_id = frame if frame is not None else (None, None)
    return (
        TorchCompileId(
            frame_id=frame_id, frame_compile_id=frame_compile_id, compiled_autograd_id=autograd
        ),
        draw(st.just(0) | ids),
    )


@given(torch_ids())
def test_parse_reads_torchs_compile_and_trace_ids(drawn: tuple[TorchCompileId, int]) -> None:
    """Every id torch writes (a compile id, with its attempt) parses to torch's fields and prints back the same."""
    torch_id, attempt = drawn
    text = str(TraceId(torch_id, attempt))
    parsed = CompileId.parse(text)
    assert parsed is not None
    assert (
        parsed.frame_id,
        parsed.frame_compile_id,
        parsed.compiled_autograd_id,
        parsed.attempt,
    ) == (torch_id.frame_id, torch_id.frame_compile_id, torch_id.compiled_autograd_id, attempt)
    assert str(parsed) == text
    assert parsed.is_later is (
        torch_id.frame_compile_id is not None and torch_id.frame_compile_id > 0
    )
    if attempt == 0:
        assert TorchCompileId.from_string(str(parsed)) == torch_id


@pytest.mark.parametrize(
    "text", [None, "?", "", "3", "3/", "/1", "!", "!0/1", "a/b", "0/1/2", "0/1_", " 0/1", "0/1\n"]
)
def test_what_is_not_torchs_grammar_parses_to_none(text: str | None) -> None:
    """A missing id (None, "?") and anything else torch does not write parse to None."""
    assert CompileId.parse(text) is None


@pytest.mark.parametrize(
    ("compile_id", "limit"),
    [
        ("0/3", "accumulated_recompile_limit"),
        ("0/3_1", "accumulated_recompile_limit"),
        ("!0/0/3", "accumulated_recompile_limit"),
        ("!0/0/2", "recompile_limit"),
    ],
)
def test_a_raised_limit_hit_is_named_by_its_frame_compile_count(
    compile_id: str, limit: str
) -> None:
    """A limit hit that raises names no limit: it is the accumulated one when the frame's compile count (read
    from any form of its compile id, compiled autograd's included) reached it."""
    record = CompileRecord(compile_id=compile_id, fail_type="FailOnRecompileLimitHit")
    assert limit_hit(record, {"recompile_limit": 8, "accumulated_recompile_limit": 3}) == (
        limit,
        {"recompile_limit": 8, "accumulated_recompile_limit": 3}[limit],
    )


def test_ingest_reads_a_metrics_compile_id_with_its_attempt(tmp_path: Path) -> None:
    """A metrics record that names its compile only by a compile id with an attempt ("0/1_1") is the compile of
    frame 0's second compile: it takes that compile's recompile reasons."""
    reasons = json.dumps(["tensor 'L['x']' size mismatch at index 0. expected 2, actual 3"])
    metrics = {
        "compile_id": "0/1_1",
        "co_name": "forward",
        "co_filename": "/job/model.py",
        "co_firstlineno": 3,
        "is_forward": True,
        "has_guarded_code": True,
        "guard_count": 2,
        "entire_frame_compile_time_s": 0.5,
    }
    meta = {
        "artifact": {"name": "recompile_reasons", "encoding": "json"},
        "frame_id": 0,
        "frame_compile_id": 1,
        "attempt": 1,
    }
    (tmp_path / "dedicated_log_torch_trace_rank_0_x.log").write_text(
        f"V1127 11:00:00.000000 1234 torch/_dynamo/x.py:1] {json.dumps(meta)}\n\t{reasons}\n"
        f"V1127 11:00:01.000000 1234 torch/_dynamo/x.py:1] {json.dumps({'compilation_metrics': metrics})}\n"
    )
    compiles = [
        e for events in read_trace(tmp_path).events for e in events if isinstance(e, Compile)
    ]
    assert [(e.compile_id, [r.category for r in e.reasons]) for e in compiles] == [
        ("0/1_1", ["size"])
    ]


def test_a_backward_compiled_without_a_compile_id_has_one_spelling(tmp_path: Path) -> None:
    """A backward compiled by ``aot_module_simplified`` called directly (as torch's own hook tests do) has no
    compile id: its ``compile_start`` and its ``compile`` both spell it ``"?"``, in the session and the log."""
    import torch
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    import recompprof
    from recompprof._eventlog.reader import read_file
    from recompprof._model.events import CompileStart
    from recompprof._torch.versions import torch_info

    if not torch_info().has("backward_compile_start"):
        pytest.skip(torch_info().why_off("backward_compile_start"))

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return ((x * y).sin(),)

    graph = torch.fx.symbolic_trace(fn)
    x, y = torch.randn(3, requires_grad=True), torch.randn(3)
    with recompprof.attach(run_dir=tmp_path / "run") as session:
        compiled = aot_module_simplified(
            graph, (x, y), fw_compiler=lambda g, _: make_boxed_func(g.forward)
        )
        compiled(x, y)[0].sum().backward()
    assert session.event_log_path is not None
    for events in (session.recent_events(), list(read_file(session.event_log_path))):
        ids = [
            (type(e).__name__, e.compile_id)
            for e in events
            if isinstance(e, (CompileStart, Compile)) and e.backward
        ]
        assert ids == [("CompileStart", "?"), ("Compile", "?")], ids
