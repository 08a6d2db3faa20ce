"""Capture fidelity: one small scenario per way the live capture was found wrong on code it did not write.

Each test reproduces one way capture went wrong, found by running PyTorch's own recompile tests and tiny
Hugging Face models under recompprof (see tests/test_real_models.py); its docstring states the behaviour
it holds. Ground truth
is what torch itself reports for the same calls (its limit warnings, its graph-break log, its
guard-failure text), established when these scenarios were written (torch 2.13, CPU, eager backend).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import recompprof
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._capture.session import Session
from recompprof._model.events import Compile, GraphBreak, RecompileLimitHit, SessionEnd
from recompprof._model.reasons import parse_guard_failure


@pytest.fixture(autouse=True)
def static_shapes() -> Iterator[None]:
    """Every new size is a recompile (no automatic dynamic shapes), so counts are exact."""
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        yield


def _compiles(session: Session) -> list[Compile]:
    return [e for e in session.recent_events() if isinstance(e, Compile) and not e.backward]


def _recompile_three_times(**compile_kw: Any) -> None:
    def fidelity_fn(x: torch.Tensor) -> torch.Tensor:
        return x.cos() + 1

    compiled = torch.compile(fidelity_fn, backend="eager", dynamic=False, **compile_kw)
    for n in (3, 4, 5):
        compiled(torch.ones(n))


def _not_silent(session: Session, caplog: pytest.LogCaptureFixture, what: str) -> None:
    """Either the compiles were captured, or recompprof said loudly (a WARNING) that it lost them."""
    captured = len(_compiles(session))
    warned = [
        r
        for r in caplog.records
        if r.name.startswith("recompprof")
        and r.levelno >= logging.WARNING
        and what in r.getMessage()
    ]
    assert captured == 3 or (warned and session.signals.get("compile_metrics") is False), (
        f"captured {captured} of 3 compiles, signals {session.signals}, no recompprof warning naming {what!r}"
    )


# -- capture going dark without a word ----------------------------------------------------------


def test_metrics_turned_off_after_attach_is_not_silent(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    """With ``log_compilation_metrics = False`` set after attach (as Dynamo's own TestCase does, with
    RECOMPPROF_ATTACH=1), recompprof still captures every compile, or warns that it lost them and marks the
    compile signal off."""
    caplog.set_level(logging.INFO)
    with (
        recompprof.attach(run_dir=str(tmp_path / "run")) as session,
        torch._dynamo.config.patch(log_compilation_metrics=False),
    ):
        _recompile_three_times()
        _not_silent(session, caplog, "log_compilation_metrics")


def test_metrics_off_before_attach_is_not_silent(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    """With ``log_compilation_metrics = False`` already set at attach, recompprof still captures every
    compile, or warns (not only at INFO) that it cannot and marks the compile signal off."""
    caplog.set_level(logging.INFO)
    with (
        torch._dynamo.config.patch(log_compilation_metrics=False),
        recompprof.attach(run_dir=str(tmp_path / "run")) as session,
    ):
        _recompile_three_times()
        _not_silent(session, caplog, "log_compilation_metrics")


def test_logging_disabled_by_the_user_is_not_silent(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    """With ``logging.disable(logging.INFO)`` in the user's program (which drops torch's INFO metrics record
    before any filter sees it), recompprof still captures every compile, or warns and marks the signal off."""
    caplog.set_level(logging.INFO)
    with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
        logging.disable(logging.INFO)
        try:
            _recompile_three_times()
        finally:
            logging.disable(logging.NOTSET)
        _not_silent(session, caplog, "logging")


def test_user_quietening_torch_loggers_is_not_silent(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    """With ``torch._utils_internal``'s logger set to WARNING after attach (the user quietening torch's
    loggers), recompprof still captures every compile, or warns and marks the signal off."""
    caplog.set_level(logging.INFO)
    logger = logging.getLogger("torch._utils_internal")
    with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
        before = logger.level
        logger.setLevel(logging.WARNING)
        try:
            _recompile_three_times()
        finally:
            logger.setLevel(before)
        _not_silent(session, caplog, "torch._utils_internal")


# -- limit hits that raise ---------------------------------------------------------------------------

RAISING_LIMITS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    # name: (dynamo config, torch.compile kwargs, the limit torch reports in its warning)
    "fullgraph": ({"recompile_limit": 1}, {"fullgraph": True}, "recompile_limit"),
    "fail_on_recompile_limit_hit": (
        {"recompile_limit": 1, "fail_on_recompile_limit_hit": True},
        {},
        "recompile_limit",
    ),
    "recompile_limit_kwarg_fullgraph": (
        {},
        {"fullgraph": True, "recompile_limit": 1},
        "recompile_limit",
    ),
    "accumulated": (
        {
            "recompile_limit": 8,
            "accumulated_recompile_limit": 2,
            "fail_on_recompile_limit_hit": True,
        },
        {"isolate_recompiles": True},
        "accumulated_recompile_limit",
    ),
}


@pytest.mark.parametrize("case", sorted(RAISING_LIMITS))
def test_raising_limit_hit_is_a_limit_hit(case: str, tmp_path: Any) -> None:
    """A limit hit that raises ``FailOnRecompileLimitHit`` (fullgraph=True, fail_on_recompile_limit_hit, the
    accumulated limit) is a limit hit of its frame, not a compile failure."""
    config, kw, limit = RAISING_LIMITS[case]

    def raising_fn(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    with (
        torch._dynamo.config.patch(**config),
        recompprof.attach(run_dir=str(tmp_path / "run")) as session,
    ):
        first, second = (
            torch.compile(raising_fn, backend="eager", dynamic=False, **kw) for _ in range(2)
        )
        first(torch.ones(3))
        if (
            case == "accumulated"
        ):  # a second isolated region fills the code object's accumulated limit
            second(torch.ones(4))
        with pytest.raises(torch._dynamo.exc.FailOnRecompileLimitHit):
            first(torch.ones(5))
    events = session.recent_events()
    hits = [e for e in events if isinstance(e, RecompileLimitHit)]
    assert [(h.limit, h.frame.name) for h in hits] == [(limit, "raising_fn")]
    refused = [e for e in _compiles(session) if e.compile_id == hits[0].compile_id]
    assert [e.outcome for e in refused] == ["limit_hit"]
    (end,) = [e for e in events if isinstance(e, SessionEnd)]
    assert end.totals["compile_failures"] == 0 and end.totals["recompile_limit_hits"] == 1


# -- graph breaks --------------------------------------------------------------------------------------

_log = logging.getLogger("recompprof.tests.fidelity")


def _warns(y: torch.Tensor) -> torch.Tensor:
    _log.warning("a logging call Dynamo cannot trace")  # the graph break
    return y * 2


_BREAK_LINE = _warns.__code__.co_firstlineno + 1


def test_graph_break_torch_cannot_handle_gracefully_is_recorded(tmp_path: Any) -> None:
    """A graph break inside a ``try`` block (torch: "Failed to handle graph break gracefully. Skipping the
    function", and likewise "cannot resume from" breaks, 3 of GPT-2's 5), which never reaches
    ``counters["graph_break"]``, is recorded live: both breaks torch logs here, at compile 0/0 and 1/0."""

    def breaks_in_try(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        try:
            y = _warns(y)
        finally:
            pass
        return y + 1

    with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
        torch.compile(breaks_in_try, backend="eager")(torch.ones(3))
    breaks = [e for e in session.recent_events() if isinstance(e, GraphBreak)]
    assert sorted((b.compile_id, b.count) for b in breaks) == [("0/0", 1), ("1/0", 1)]


def test_graph_break_keeps_explanation_hints_and_user_location(tmp_path: Any) -> None:
    """A live graph-break event carries torch's explanation and hints and the user's file:line of the
    break (torch logs "Graph break in user code at <file>:<line>")."""

    def breaks_once(x: torch.Tensor) -> torch.Tensor:
        return _warns(x + 1) + 1

    with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
        torch.compile(breaks_once, backend="eager")(torch.ones(3))
    first = next(e for e in session.recent_events() if isinstance(e, GraphBreak))
    assert first.reason == "logging.Logger method not supported for non-export cases"
    assert first.explanation and "logging.Logger methods are not supported" in first.explanation
    assert any("ignore_logging_functions" in hint for hint in first.hints), first.hints
    assert first.user_location == f"{__file__}:{_BREAK_LINE}"


# -- type reasons ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (torch.ones(2), 1),
        (torch.nn.Parameter(torch.ones(2)), torch.ones(2)),
    ],
    ids=["tensor_to_int", "parameter_to_tensor"],
)
def test_type_change_reason_is_type(before: Any, after: Any, tmp_path: Any) -> None:
    """Torch's "expected type of 'y' to be a tensor type, ' but found <class 'int'>" (and the same for a
    Parameter replaced by a plain tensor) is a ``type`` reason on ``L['y']``, not ``symbolic_shape``."""

    def typed_fn(x: torch.Tensor, y: Any) -> torch.Tensor:
        return x + y

    with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
        compiled = torch.compile(typed_fn, backend="eager")
        compiled(torch.ones(2), before)
        compiled(torch.ones(2), after)
    (recompile,) = [e for e in _compiles(session) if e.is_recompile]
    explaining = next(r for r in recompile.reasons if r.explains_change)
    assert "expected type of 'y'" in explaining.text
    assert (explaining.category, explaining.subject) == ("type", "L['y']")


def test_type_reason_text_parses_as_type() -> None:
    """The parser alone: torch 2.13's wording of a tensor-to-other type change is categorised ``type``."""
    (reason,) = parse_guard_failure(
        "0/0: expected type of 'b' to be a tensor type, ' but found <class 'int'>"
    )
    assert (reason.category, reason.subject) == ("type", "L['b']")


# -- frames named as the user knows them --------------------------------------------------------------------


def _returns_tuple(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator shaped like transformers' ``can_return_tuple``: every decorated forward shares one code object."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        as_tuple = kwargs.pop("as_tuple", False)
        out = fn(self, *args, **kwargs)
        return (out,) if as_tuple else out

    return wrapper


class Teacher(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    @_returns_tuple
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).relu()


class Student(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    @_returns_tuple
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).tanh()


def test_decorated_forward_is_named_by_class(tmp_path: Any) -> None:
    """A module whose forward is decorated (transformers' ``can_return_tuple``) is named
    ``Teacher.forward``, not after the decorator's inner function ``wrapper``."""
    teacher = Teacher()
    teacher.compile(backend="eager")
    with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
        teacher(torch.ones(2, 4))
        teacher(torch.ones(3, 4))
    assert {e.compile_id: e.frame.name for e in _compiles(session)} == {
        "0/0": "Teacher.forward",
        "0/1": "Teacher.forward",
    }


def test_two_classes_sharing_decorated_code_are_two_frames(tmp_path: Any) -> None:
    """Two classes whose decorated forwards share one code object (one Dynamo frame) are reported as two
    frames, ``Teacher.forward`` and ``Student.forward``, never merged into one ``wrapper`` frame."""
    teacher, student = Teacher(), Student()
    teacher.compile(backend="eager")
    student.compile(backend="eager")
    with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
        teacher(torch.ones(2, 4))
        student(torch.ones(2, 4))
    names = [(e.compile_id, e.frame.name) for e in _compiles(session)]
    assert names == [("0/0", "Teacher.forward"), ("0/1", "Student.forward")]
    report = build_report(session.recent_events())
    assert sorted(f.name for f in report.frames.values()) == ["Student.forward", "Teacher.forward"]


# -- profile mode ----------------------------------------------------------------------------------------


def _shapes_fn(x: torch.Tensor) -> torch.Tensor:
    return x.cos() + 1


def test_profile_mode_after_user_set_stance_default(tmp_path: Any) -> None:
    """When the user calls ``torch.compiler.set_stance("default")`` inside a profile session, profile mode
    does not leave Dynamo held at its limit of 1 (a limit hit of recompprof's making, and later guard
    failures unseen): each of the three new shapes is reported, and no limit hit is recorded."""
    compiled = torch.compile(_shapes_fn, backend="eager")
    with recompprof.attach(mode="profile", run_dir=str(tmp_path / "run")) as session:
        torch.compiler.set_stance("default")
        for n in (3, 4, 5, 6):
            compiled(torch.ones(n))
    events = session.recent_events()
    assert not [e for e in events if isinstance(e, RecompileLimitHit)]
    reported = [r for e in events if isinstance(e, Compile) for r in e.reasons if r.explains_change]
    assert sorted(r.category for r in reported) == ["size", "size", "size"]


def test_profile_variants_needed_are_distinct_variants(tmp_path: Any) -> None:
    """Profile mode evicts entries to stay at its limit, so returning to a seen shape retraces; the report's
    "variants needed" counts distinct variants, not those retraces: shapes 3, 4, 5, 6, 3, 4 need 4, not 6."""
    compiled = torch.compile(_shapes_fn, backend="eager")
    with recompprof.attach(mode="profile", run_dir=str(tmp_path / "run")) as session:
        for n in (3, 4, 5, 6, 3, 4):
            compiled(torch.ones(n))
    text = render_text(build_report(session.recent_events()))
    line = next(line for line in text.splitlines() if "_shapes_fn" in line and "variants" in line)
    assert line.strip().endswith(": 4 variants"), line


# -- more reasons filed under a misleading category (found in torch's own recompile tests) --------


class _Callable:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def test_replaced_dunder_call_is_object_identity(tmp_path: Any) -> None:
    """Replacing a class's ``__call__`` fails ``___check_obj_id(type(foo).__call__.__code__, ...), type=<class
    'code'>``: an ``object_identity`` reason on that source, not ``symbolic_shape`` (from the ``<class ...>`` text)."""

    def calls_it(x: torch.Tensor, foo: Any) -> torch.Tensor:
        return foo(x)

    original = _Callable.__call__
    try:
        with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
            compiled = torch.compile(calls_it, backend="eager")
            compiled(torch.ones(2), _Callable())
            _Callable.__call__ = lambda self, x: x + 2  # type: ignore[method-assign]
            compiled(torch.ones(2), _Callable())
    finally:
        _Callable.__call__ = original  # type: ignore[method-assign]
    (recompile,) = [e for e in _compiles(session) if e.is_recompile]
    explaining = next(r for r in recompile.reasons if r.explains_change)
    assert "___check_obj_id" in explaining.text and "__call__" in explaining.text
    assert explaining.category == "object_identity", explaining


def test_closed_over_int_is_python_constant(tmp_path: Any) -> None:
    """A function closing over an int that changes fails ``g.__closure__[0].cell_contents == 0``: a Python
    constant (the fix is to pass it as a tensor), not a ``module_attribute`` (whose hint says to stop toggling
    module attributes)."""

    def adder(k: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def add(y: torch.Tensor) -> torch.Tensor:
            return y + k

        return add

    def applies(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return fn(x)

    with (
        torch._dynamo.config.patch(automatic_dynamic_shapes=False),
        recompprof.attach(run_dir=str(tmp_path / "run")) as session,
    ):
        compiled = torch.compile(applies, backend="eager")
        compiled(torch.ones(2), adder(0))
        compiled(torch.ones(2), adder(1))
    (recompile,) = [e for e in _compiles(session) if e.is_recompile]
    explaining = next(r for r in recompile.reasons if r.explains_change)
    assert "cell_contents" in explaining.text
    assert explaining.category == "python_constant", explaining


def test_resumed_loop_bound_is_python_constant() -> None:
    """The parser: torch's reason for a changed ``range`` bound held on a resume function's stack (from
    torch's test_loop_torture) is a ``python_constant``, not a ``module_attribute``."""
    text = (
        "0/0: ___stack0.stop == 575  # for _ in range(iters):  # test_recompile_ux.py:77 in "
        "torch_dynamo_resume_in_loop_torture_at_77"
    )
    (reason,) = parse_guard_failure(text)
    assert reason.category == "python_constant", reason
