"""The live recorder builds its events without re-validating its own values (recompprof._model.trusted):
the lines it writes are the ones pydantic's validation would have written, and its bounds still hold."""

from __future__ import annotations

import os
from pathlib import Path

import pydantic
import pytest
import torch

import recompprof
from recompprof._capture.recorder import new_trace_id
from recompprof._eventlog.writer import json_line
from recompprof._model.events import EVENT_ADAPTER, Compile, CompileStart, Frame, to_json
from recompprof._model.trusted import trusted


def _step(fn: object, n: int) -> None:
    fn(torch.randn(n, 4))  # type: ignore[operator]


def test_live_events_are_the_lines_validation_writes(tmp_path: Path) -> None:
    """Every line a live session writes (compile starts, compiles, backward compiles, a graph break, events
    after a torch._dynamo.reset() with their generation) reads back through the validating reader and
    serialises to the same bytes."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = (x * 2).sum()
        torch._dynamo.graph_break()
        return x + y

    model = torch.nn.Linear(4, 2)
    with recompprof.attach(run_dir=tmp_path) as session:
        compiled = torch.compile(fn, backend="eager", dynamic=False)
        trained = torch.compile(model, backend="aot_eager", dynamic=False)
        for n in (2, 3):
            _step(compiled, n)
            trained(torch.randn(n, 4)).sum().backward()
        torch._dynamo.reset()
        _step(torch.compile(fn, backend="eager", dynamic=False), 5)
        path = session.event_log_path
    assert path is not None
    lines = path.read_text().splitlines()
    events = [EVENT_ADAPTER.validate_json(line) for line in lines]
    assert [to_json(e) for e in events] == lines
    compiles = [e for e in events if isinstance(e, Compile)]
    starts = [e for e in events if isinstance(e, CompileStart)]
    assert any(e.backward for e in compiles) and any(e.is_recompile for e in compiles)
    assert any(e.kind == "graph_break" for e in events)
    # The compile after the reset carries its generation, as its start does.
    assert compiles[-1].generation == 1 and starts[-1].generation == 1


def test_a_value_past_a_declared_bound_raises_as_validation_does() -> None:
    """A trusted build whose text is past the model's bound (or whose trace id is not one) raises pydantic's
    error, so no line the reader would refuse is written."""
    frame = Frame(name="f", file="a.py", line=1)
    values = {"time": 1.0, "frame": frame, "compile_id": "0/1", "is_recompile": True}
    assert to_json(trusted(Compile, values)) == to_json(Compile(**values))
    with pytest.raises(pydantic.ValidationError):
        trusted(Compile, {**values, "specialised": "value of " + "x" * 300})
    with pytest.raises(pydantic.ValidationError):
        trusted(Compile, {**values, "trace_id": "not a trace id"})
    with pytest.raises(pydantic.ValidationError):
        trusted(Compile, {"time": 1.0, "frame": frame})  # required fields missing


def test_a_forked_child_draws_other_trace_ids() -> None:
    """Trace ids come from a generator of recompprof's own: a forked child reseeds it, so its ids differ
    from the ones its parent draws next."""
    new_trace_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write, new_trace_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert len(child) == 32 and child != new_trace_id()


def test_an_event_log_line_is_to_json_in_utf8() -> None:
    """The writer's line is ``to_json`` of the event and a newline, encoded as UTF-8 (non-ASCII text too)."""
    event = Compile(
        time=1.5,
        frame=Frame(name="Modèle.forward", file="/données/m.py", line=3),
        compile_id="0/1",
        is_recompile=True,
        fail_reason="échec ☃",
    )
    assert json_line(event) == (to_json(event) + "\n").encode("utf-8")


def test_copied_is_model_copy_without_its_machinery() -> None:
    """trusted.copied gives the model pydantic's model_copy gives: the same values, line and fields set, the
    original left as it was."""
    from recompprof._model.events import Reason
    from recompprof._model.trusted import copied

    reason = Reason(
        text="tensor 'x' size mismatch at index 0. expected 2, actual 3", category="size"
    )
    frame = Frame(name="f", file="/a/b.py", line=3, code_file="/a/b.py", code_line=3)
    event = Compile(time=1.5, frame=frame, compile_id="0/1", is_recompile=True, reasons=[reason])
    for model, update in (
        (reason, {"explains_change": True}),
        (reason, {"parameter": "L['input_ids']"}),
        (event, {"generation": 2}),
    ):
        got, expected = copied(model, update), model.model_copy(update=update)
        assert got == expected and got is not model
        assert got.model_dump_json(exclude_none=True) == expected.model_dump_json(exclude_none=True)
        assert got.model_fields_set == expected.model_fields_set
        assert all(getattr(got, k) == v for k, v in update.items())
    assert reason.explains_change is False and reason.parameter is None and event.generation is None
