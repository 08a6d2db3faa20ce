"""The frame rule, generated over the shapes Python wraps a function in (``tests/workloads/frame_shapes.py``).

Each shape runs twice: eagerly under ``sys.setprofile``, which records every call of the shapes' code in order
(so the function a wrapper wraps is the first function the user wrote that ran once the wrapper was entered:
a contextmanager's generator runs after its ``helper`` returned), then compiled (``backend="eager"``) under
``recompprof.attach``. Each compiled frame must be named after the user function its own call ran, by the
instance's class for a method, at that function's file and line; the expectation is never read from recompprof.
"""

from __future__ import annotations

import contextlib
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from agreement import Recorded, record
from needs import starts
from workloads import frame_shapes, shape_decorators
from workloads.frame_shapes import BARE, SHAPES, USER

import recompprof
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_file, read_run
from recompprof._model.events import Compile, Frame
from recompprof._torch.frames import Compiling, is_torch_wrapper, resolve

_TORCH_WRAPPER = ("<torch's wrapper>", 0)
_WRAPPERS = {
    "wrapper",
    "checked",
    "outer",
    "wrapped_func",
    "helper",
    "inner",
}  # the shapes' and torch's wrappers' names
# contextlib's helper, one code object for every such method
_HELPER = frame_shapes.SyncedModule.no_sync.__code__


def _short(qualname: str) -> str:
    return qualname.rsplit("<locals>.", 1)[-1]


def _recorded_calls(function: Any, args: tuple[Any, ...]) -> list[tuple[types.CodeType, Any]]:
    """Every call of the shapes' code (and contextlib's helper) ``function(*args)`` makes, in order, with the
    call's first argument."""
    calls: list[tuple[types.CodeType, Any]] = []
    ours = (frame_shapes.__file__, shape_decorators.__file__)

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and (code.co_filename in ours or code is _HELPER):
            first = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
            calls.append((code, first))

    sys.setprofile(profile)
    try:
        function(*args)
    finally:
        sys.setprofile(None)
    return calls


def _expected(code: types.CodeType, first: Any) -> tuple[str, str | None]:
    """``(name, owner)`` of a user function as it ran: a method by its instance's class, else its qualified name."""
    qualname = _short(code.co_qualname)
    defining = qualname.rpartition(".")[0]
    if (
        defining
        and not isinstance(first, type)
        and any(k.__qualname__.endswith(defining) for k in type(first).__mro__)
    ):
        return f"{type(first).__name__}.{code.co_name}", type(first).__name__
    return qualname, None


def _wrapped(
    calls: list[tuple[types.CodeType, Any]],
) -> dict[tuple[str, int], list[tuple[str, str | None, str, int]]]:
    """For each code object, one ``(name, owner, file, line)`` per call: the first user function entered from then on."""
    wraps: dict[tuple[str, int], list[tuple[str, str | None, str, int]]] = {}
    for i, (code, _) in enumerate(calls):
        target = next(((c, first) for c, first in calls[i:] if c in USER), None)
        if target is None:
            continue
        name, owner = _expected(*target)
        where = (
            (code.co_filename, code.co_firstlineno)
            if code in BARE
            else (target[0].co_filename, target[0].co_firstlineno)
        )
        wraps.setdefault((code.co_filename, code.co_firstlineno), []).append((name, owner, *where))
    return wraps


def _where(frame: Frame) -> tuple[str, int]:
    return (
        _TORCH_WRAPPER
        if is_torch_wrapper(frame.code_file or "")
        else (frame.code_file or "", frame.code_line or 0)
    )


def _is_subsequence(part: list[Any], whole: list[Any]) -> bool:
    rest = iter(whole)
    return all(item in rest for item in part)


def _frames(function: Any, args: tuple[Any, ...], run_dir: Path) -> list[Frame]:
    torch._dynamo.reset()  # the decorators' wrappers are shared by shapes: no shape reuses another's cache
    with recompprof.attach(run_dir=run_dir) as session:
        torch.compile(function, backend="eager")(*args)
    assert session.event_log_path is not None
    return [
        e.frame
        for e in read_file(session.event_log_path)
        if isinstance(e, Compile) and not e.backward
    ]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_compiled_frame_is_named_after_the_function_its_call_wraps(
    shape: str, tmp_path: Path
) -> None:
    """Every compiled frame of the shape's code is named after the user function its own call ran (the
    instance's class for a method), with that function's file and line (a bare wrapper's own), in call order."""
    function, args = SHAPES[shape]()
    calls = _recorded_calls(function, args)
    wraps = _wrapped(calls)
    frames = [
        f
        for f in _frames(function, args, tmp_path / "run")
        if "torch_dynamo_resume_in_" not in f.name
    ]
    first = next(
        _expected(c, arg) + (c.co_filename, c.co_firstlineno) for c, arg in calls if c in USER
    )
    wraps[_TORCH_WRAPPER] = [
        first
    ]  # torch's own wrapper around a partial or a module wraps the function called
    checked = 0
    for where, expected in wraps.items():
        got = [(f.name, f.owner, f.file, f.line) for f in frames if _where(f) == where]
        assert _is_subsequence(got, expected), (where, got, expected)
        checked += len(got)
    assert checked, [f.label for f in frames]
    assert not [f.label for f in frames if f.name.split(".")[-1] in _WRAPPERS]


def test_the_clip_shape_names_the_compiled_method(tmp_path: Path) -> None:
    """One decorator on two methods, only the second in the class body compiled: the frame is ``Clip.forward``,
    never the method first in the class body."""
    frames = _frames(frame_shapes.Clip(), (torch.randn(2, 4),), tmp_path / "run")
    assert {f.name for f in frames} == {"Clip.forward"}, [f.label for f in frames]


def test_a_contextmanager_method_is_named_after_the_one_entered(tmp_path: Path) -> None:
    """contextlib's ``helper`` shared by two contextmanager methods is named after the one that ran
    (``inside_forward``), never the first in the class body (``no_sync``)."""
    frames = _frames(frame_shapes.SyncedModule(), (torch.randn(2, 4),), tmp_path / "run")
    helper = {
        f.name
        for f in frames
        if (f.code_file, f.code_line) == (_HELPER.co_filename, _HELPER.co_firstlineno)
    }
    assert helper == {"SyncedModule.inside_forward"}, [f.label for f in frames]


@pytest.mark.parametrize(
    ("method", "closure_of", "expected"),
    [
        ("forward", "forward", "Clip.forward"),
        ("forward", "get_text_features", "Clip.get_text_features"),
        ("forward", None, "Clip.wrapper"),
    ],
)
def test_a_shared_wrapper_is_named_by_its_closure_or_honestly(
    method: str, closure_of: str | None, expected: str
) -> None:
    """The shared wrapper's code is named after the method whose wrapper holds the compile's closure cells; with
    no closure to tell, it is the wrapper's own name at the wrapper's own line, never one of the methods."""
    model = frame_shapes.Clip()
    code = getattr(frame_shapes.Clip, method).__code__
    closure = getattr(frame_shapes.Clip, closure_of).__closure__ if closure_of else None
    ctx = Compiling(
        code=code,
        f_locals={"args": (model, torch.ones(1)), "kwargs": {}},
        f_globals={},
        closure=closure,
        compile_id=None,
        caller=None,
    )
    named = resolve(code.co_name, code.co_filename, code.co_firstlineno, ctx)
    assert (named.name, named.owner) == (expected, "Clip")
    function = getattr(frame_shapes.Clip, closure_of).__wrapped__ if closure_of else None
    where = (
        (function.__code__.co_filename, function.__code__.co_firstlineno)
        if function
        else (code.co_filename, code.co_firstlineno)
    )
    assert (named.file, named.line) == where


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    run = record(Path(frame_shapes.__file__), [], tmp_path_factory.mktemp("shapes"), timeout=600)
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    return run


def _classes(name: str | None) -> list[str]:
    """The class named ``name`` (a shape's or contextlib's) and its bases, by name."""
    found = getattr(frame_shapes, name or "", None) or getattr(contextlib, name or "", None)
    return [k.__name__ for k in getattr(found, "__mro__", ())]


def test_ingest_of_the_shapes_trace_never_names_another_function(recorded: Recorded) -> None:
    """Ingest of the shapes' ``TORCH_TRACE`` gives every compile the live code object, and a class that is live's
    or, where the trace cannot tell (docs/frames.md), none or a base class; the names agree, except that a wrapper
    ingest cannot place keeps its own name: never another function's."""
    live = {
        e.compile_id: e.frame
        for e in read_run(recorded.run_dir)
        if isinstance(e, Compile) and not e.backward
    }
    traced = {
        e.compile_id: e.frame
        for events in read_trace(recorded.trace_dir).events
        for e in events
        if isinstance(e, Compile) and not e.backward
    }
    assert live.keys() == traced.keys() and len(live) >= 40
    for cid, frame in live.items():
        other = traced[cid]
        assert (other.code_file, other.code_line) == (frame.code_file, frame.code_line), cid
        assert other.owner == frame.owner or other.owner in [None, *_classes(frame.owner)], (
            cid,
            frame,
            other,
        )
        if "resume" in frame.name or other.owner != frame.owner:
            continue
        # The function live found, or (a wrapper ingest cannot place) the wrapper's own name.
        assert other.name == frame.name or other.name.split(".")[-1] in _WRAPPERS, (
            cid,
            frame.label,
            other.label,
        )
