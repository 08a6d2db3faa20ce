"""Capture fidelity on code shaped like other people's: torch's test settings, raising limit hits,
graph breaks torch cannot resume from, decorated methods, logging edge cases, profile-mode stance loss."""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import recompprof
from recompprof import _internal
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._cli.main import main as cli_main
from recompprof._eventlog.reader import read_file, read_run
from recompprof._model.events import (
    Compile,
    GraphBreak,
    RecompileLimitHit,
    SessionEnd,
    SignalChange,
)
from recompprof.testing import raise_internal_errors

WORKLOADS = Path(__file__).parent / "workloads"


def _events(session: recompprof._capture.session.Session) -> list[Any]:
    assert session.event_log_path is not None
    return list(read_file(session.event_log_path))


def _forward_compiles(events: list[Any]) -> list[Compile]:
    return [e for e in events if isinstance(e, Compile) and not e.backward]


@pytest.mark.parametrize("when", ["before", "after"])
def test_compiles_recorded_with_log_compilation_metrics_off(tmp_path: Path, when: str) -> None:
    """With torch's log_compilation_metrics off (as Dynamo's TestCase sets it) before or after attach, every compile is recorded."""
    fn = torch.compile(lambda x, tag: x * len(tag), backend="eager")
    old = torch._dynamo.config.log_compilation_metrics
    try:
        if when == "before":
            torch._dynamo.config.log_compilation_metrics = False
        with recompprof.attach(run_dir=tmp_path) as session:
            torch._dynamo.config.log_compilation_metrics = False
            for tag in ("a", "bb", "ccc"):
                fn(torch.ones(2), tag)
    finally:
        torch._dynamo.config.log_compilation_metrics = old
    compiles = _forward_compiles(_events(session))
    assert len(compiles) == 3 and sum(c.is_recompile for c in compiles) == 2
    assert session.signals["compile_metrics"] is True


def test_user_logging_of_compile_records_is_untouched(tmp_path: Path) -> None:
    """A user who lowers torch._utils_internal to INFO after attach sees every record; detach keeps the level they set."""
    logger = logging.getLogger("torch._utils_internal")
    before = logger.level
    fn = torch.compile(lambda x, tag: x + len(tag), backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        assert (
            logger.level == before and not logger.filters
        )  # attach changes nothing about this logger
        with _assert_logs(logger) as seen:
            for k in range(5):
                fn(torch.ones(2), "x" * k)
        logger.setLevel(logging.DEBUG)
    try:
        assert len([r for r in seen if type(r.args[0]).__name__ == "CompilationMetrics"]) == 5
        assert logger.level == logging.DEBUG  # the user's level survives detach
        assert len(_forward_compiles(_events(session))) == 5
    finally:
        logger.setLevel(before)


class _assert_logs:
    """Collect INFO records of ``logger`` the way ``unittest.assertLogs`` does (level lowered, own handler)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger, self.records = logger, []  # type: ignore[var-annotated]

    def __enter__(self) -> list[logging.LogRecord]:
        self.old = self.logger.level
        self.handler = logging.Handler()
        self.handler.emit = self.records.append  # type: ignore[method-assign]
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)
        return self.records

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.old)


def test_bypassed_compile_hook_is_recovered_and_a_lost_stretch_goes_dark(tmp_path: Path) -> None:
    """If the compile-record hook is bypassed mid-run, records are recovered at the next compile; if some are lost, the signal is marked dark and check exits 2."""
    import torch._dynamo.utils as utils

    raise_internal_errors(
        False
    )  # production mode for this test (the autouse fixture restores strict)
    fn = torch.compile(lambda x, tag: x * len(tag), backend="eager")
    with recompprof.attach(run_dir=tmp_path / "run") as session:
        fn(torch.ones(2), "a")
        hooked = utils.add_compilation_metrics_to_chromium
        # another tool replaces the function
        utils.add_compilation_metrics_to_chromium = hooked.__wrapped__
        try:
            fn(torch.ones(2), "bb")  # missed by the hook, recovered at the next compile start
            fn(torch.ones(2), "ccc")
            assert len(_forward_compiles(session.recent_events())) >= 2
            assert session.signals["compile_metrics"] is True
            utils.set_compilation_metrics_limit(
                1
            )  # torch keeps one record: the next misses overflow it
            for tag in ("dddd", "eeeee", "ffffff"):
                fn(torch.ones(2), tag)
        finally:
            utils.add_compilation_metrics_to_chromium = hooked
            utils.set_compilation_metrics_limit(utils.DEFAULT_COMPILATION_METRICS_LIMIT)
    events = _events(session)
    assert _internal.counts().get("torch.compile_metrics.late", 0) >= 1
    dark = [e for e in events if isinstance(e, SignalChange)]
    assert len(dark) == 1 and dark[0].signal == "compile_metrics" and not dark[0].live
    end = next(e for e in events if isinstance(e, SessionEnd))
    assert "compile_metrics" in end.signals_off
    assert "signal compile_metrics was dark" in render_text(build_report(events))
    assert cli_main(["check", str(tmp_path / "run"), "--max-recompiles", "100"]) == 2
    assert (
        cli_main(
            ["check", str(tmp_path / "run"), "--max-recompiles", "100", "--accept-dark-signals"]
        )
        == 0
    )


@pytest.mark.parametrize("how", ["fullgraph", "fail_on_recompile_limit_hit", "accumulated"])
def test_raising_limit_hits_are_limit_hits(tmp_path: Path, how: str) -> None:
    """A limit hit that raises FailOnRecompileLimitHit (fullgraph, fail_on_recompile_limit_hit, accumulated limit) is recorded as a limit hit, not a failure, and the job sees the same exception."""
    from torch._dynamo.exc import FailOnRecompileLimitHit

    config = torch._dynamo.config
    patches: dict[str, Any] = {"recompile_limit": 2}
    if how == "fail_on_recompile_limit_hit":
        patches["fail_on_recompile_limit_hit"] = True
    if how == "accumulated":
        patches = {
            "recompile_limit": 100,
            "accumulated_recompile_limit": 2,
            "fail_on_recompile_limit_hit": True,
        }

    def scale(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    fn = torch.compile(scale, backend="eager", fullgraph=how == "fullgraph")
    raised = 0
    with config.patch(**patches), recompprof.attach(run_dir=tmp_path) as session:
        for k in range(1, 5):
            try:
                fn(torch.ones(2), "x" * k)
            except FailOnRecompileLimitHit:
                raised += 1
    events = _events(session)
    hits = [e for e in events if isinstance(e, RecompileLimitHit)]
    assert raised >= 1 and len(hits) == raised
    expected = "accumulated_recompile_limit" if how == "accumulated" else "recompile_limit"
    assert {h.limit for h in hits} == {expected} and {h.value for h in hits} == {2}
    assert all(h.frame.name == "scale" for h in hits)
    report = build_report(events)
    assert report.limit_hits == raised and report.failures == 0


@pytest.mark.workload
def test_graph_breaks_torch_cannot_resume_from_are_counted(tmp_path: Path) -> None:
    """Breaks torch cannot resume from (the frame runs eagerly) are recorded like TORCH_TRACE records them, with explanation and location; counters['graph_break'] misses them."""
    script = tmp_path / "job.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(WORKLOADS)!r})
import unresumable, recompprof, torch
from torch._dynamo.utils import counters
with recompprof.attach(run_dir={str(tmp_path / "live")!r}):
    unresumable.run()
print("COUNTERS", sum(counters["graph_break"].values()))
""")
    trace = tmp_path / "trace"
    out = subprocess.run(
        [sys.executable, str(script)],
        env={**_env(), "TORCH_TRACE": str(trace)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    counters_total = int(out.split("COUNTERS ")[1].split()[0])
    assert cli_main(["ingest", str(trace), "-o", str(tmp_path / "ingested")]) == 0
    live = [e for e in read_run(tmp_path / "live") if isinstance(e, GraphBreak)]
    ingested = [e for e in read_run(tmp_path / "ingested") if isinstance(e, GraphBreak)]

    def key(e: GraphBreak) -> tuple[object, ...]:
        return (
            e.compile_id,
            e.reason,
            e.user_location,
            e.skipped_frame,
            e.frame.label if e.frame else None,
        )

    assert sorted(map(key, live)) == sorted(map(key, ingested))
    assert any(e.skipped_frame for e in live) and counters_total < len(live)
    skipped = next(e for e in live if e.skipped_frame)
    assert (
        skipped.explanation and skipped.user_location and "unresumable.py" in skipped.user_location
    )


def _env() -> dict[str, str]:
    import os

    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TORCH_LOGS", "TORCH_TRACE", "RECOMPPROF_"))
    }


def _returns_tuple(func: Any) -> Any:
    """A decorator shared by several classes' methods, like Hugging Face's ``can_return_tuple``."""

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return func(self, *args, **kwargs)

    return wrapper


class _Base(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(width, width)

    @_returns_tuple
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).relu()


class Teacher(_Base):
    pass


class Student(_Base):
    pass


def test_decorated_methods_are_named_by_class(tmp_path: Path) -> None:
    """Two classes sharing one decorated forward are two frames named Teacher.forward and Student.forward, at the forward the user wrote, with the user's call site."""
    teacher, student = (
        torch.compile(Teacher(4), backend="eager"),
        torch.compile(Student(4), backend="eager"),
    )
    with recompprof.attach(run_dir=tmp_path) as session:
        for batch in (2, 3):
            teacher(torch.ones(batch, 4))
            student(torch.ones(batch, 4))
    compiles = _forward_compiles(_events(session))
    names = {c.frame.name for c in compiles}
    assert names == {"Teacher.forward", "Student.forward"}
    forward = _Base.forward.__wrapped__.__code__  # type: ignore[attr-defined]
    assert {(c.frame.file, c.frame.line) for c in compiles} == {
        (forward.co_filename, forward.co_firstlineno)
    }
    report = build_report(_events(session))
    assert {f.name for f in report.frames.values()} == names
    this_file = __file__
    for c in compiles:
        assert (
            c.call_site
            and c.call_site[-1].startswith(f"{this_file}:")
            and "test_decorated_methods" in c.call_site[-1]
        )
        assert len(c.call_site) <= 5


def test_decorated_function_named_by_its_qualified_name(tmp_path: Path) -> None:
    """A compiled, decorated module-level function is named by the function the user wrote, not the decorator's wrapper."""
    sys.path.insert(0, str(WORKLOADS))
    try:
        import decorated
    finally:
        sys.path.remove(str(WORKLOADS))
    fn = torch.compile(decorated.train_step, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        fn(torch.ones(2))
    (compile_,) = _forward_compiles(_events(session))
    target = decorated.train_step.__wrapped__.__code__
    assert compile_.frame.name == "train_step"
    assert (compile_.frame.file, compile_.frame.line) == (target.co_filename, target.co_firstlineno)


def test_redacted_call_sites_keep_only_short_paths(tmp_path: Path) -> None:
    """With redact on, call sites carry no directory of the machine's and no source text: the user's frames
    their last two path parts, an installed library's its path from ``site-packages`` on."""
    fn = torch.compile(lambda x: x + 1, backend="eager")
    with recompprof.attach(run_dir=tmp_path, redact=True) as session:
        fn(torch.ones(2))
    (compile_,) = _forward_compiles(_events(session))
    paths = [line.split(":")[0] for line in compile_.call_site]
    assert paths and all(p.count("/") <= 1 or p.startswith("site-packages/") for p in paths)
    assert paths[-1] == "tests/test_capture.py"  # the user's own line, innermost


def test_profile_mode_after_user_resets_the_stance(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """When user code resets the compile stance in profile mode, recompprof notices at the next compile, releases its limit so fullgraph code keeps working, and says so once."""

    def step(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    fn = torch.compile(step, backend="eager", fullgraph=True)
    limit_before = torch._dynamo.config.recompile_limit
    with recompprof.attach(run_dir=tmp_path, mode="profile") as session:
        fn(torch.ones(2), "a")
        torch.compiler.set_stance("default")
        outs = [
            fn(torch.ones(2), tag).sum().item() for tag in ("bb", "ccc", "dddd")
        ]  # limit 1 would raise here
        assert torch._dynamo.config.recompile_limit == limit_before
    assert outs == [4.0, 6.0, 8.0]
    assert session.signals["profile_backend"] is False
    events = _events(session)
    changes = [e for e in events if isinstance(e, SignalChange)]
    assert (
        len(changes) == 1
        and changes[0].signal == "profile_backend"
        and "set_stance" in changes[0].reason
    )
    assert torch._dynamo.config.recompile_limit == limit_before


def test_exception_in_torchs_reason_helper_is_torchs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception raised inside torch's get_guard_fail_reason_helper is reported as torch's, not as a recompprof internal error."""
    import torch._dynamo.guards as guards

    def broken(*args: Any, **kwargs: Any) -> str:
        raise KeyError("torch internals moved")

    monkeypatch.setattr(guards, "get_guard_fail_reason_helper", broken)
    fn = torch.compile(lambda x, tag: x * len(tag), backend="eager")
    caplog.set_level(logging.WARNING, logger="recompprof")
    with recompprof.attach(run_dir=tmp_path, mode="profile") as session:
        for tag in ("a", "bb", "ccc"):
            fn(torch.ones(2), tag)
    assert not _internal.counts()
    warnings = [
        r.getMessage() for r in caplog.records if "get_guard_fail_reason_helper" in r.getMessage()
    ]
    assert len(warnings) == 1 and "torch error, not a recompprof one" in warnings[0]
    recompiles = [c for c in _forward_compiles(_events(session)) if c.is_recompile]
    assert recompiles and all("KeyError" in r.text for c in recompiles for r in c.reasons)


def test_profile_mode_reports_the_variants_the_job_needs(tmp_path: Path) -> None:
    """Profile mode retraces evicted variants (A, B, C, A, B, C ...); the report counts the distinct guard sets the job needs, not the retraces."""

    def f(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    fn = torch.compile(f, backend="eager")
    with recompprof.attach(run_dir=tmp_path / "profile", mode="profile") as profiled:
        for tag in ["a", "bb", "ccc"] * 3:
            fn(torch.ones(2), tag)
    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path / "monitor") as monitored:
        for tag in ["a", "bb", "ccc"] * 3:
            fn(torch.ones(2), tag)
    (profile_frame,) = build_report(_events(profiled)).frames.values()
    (monitor_frame,) = build_report(_events(monitored)).frames.values()
    assert profile_frame.compiles == 9 and profile_frame.variants_needed == 3
    assert monitor_frame.compiles == monitor_frame.variants_needed == 3
    assert "f (tests/test_capture.py" in render_text(build_report(_events(profiled)))
    assert "3 variants" in render_text(build_report(_events(profiled)))


def test_identity_guard_is_classified_by_the_live_object() -> None:
    """An identity guard whose text names no type (torch before 2.13) is classified by the object the subject resolves to in the live frame: a function is an object identity, a flag on the module an attribute."""
    from recompprof._model.events import Frame
    from recompprof._model.explaining import ReasonExplainer
    from recompprof._torch.sources import type_name

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = torch.relu
            self.training_flag = True

    f_locals = {"self": Block(), "scale": 2}
    f_globals = {"helper": _returns_tuple, "table": {"mode": "fast"}}
    assert type_name("L['self'].act", f_locals, f_globals) == "builtin_function_or_method"
    assert type_name("L['self'].training_flag", f_locals, f_globals) == "bool"
    assert type_name("G['table']['mode']", f_locals, f_globals) == "str"
    assert type_name("G['helper']", f_locals, f_globals) == "function"
    assert type_name("L['missing'].x", f_locals, f_globals) is None
    assert (
        type_name("L['self'].__class__.__mro__", f_locals, f_globals) is None
    )  # no descriptors are run

    frame = Frame(name="Block.forward", file="m.py", line=1)
    texts = ["0/0: ___check_obj_id(L['self'].act, 140000000000)"]
    resolve = lambda subject: type_name(subject, f_locals, f_globals)  # noqa: E731
    (by_text,) = ReasonExplainer().explain(frame, texts).reasons
    (by_object,) = ReasonExplainer().explain(frame, texts, resolve).reasons
    assert by_text.category == "module_attribute" and by_object.category == "object_identity"


@pytest.mark.parametrize(
    ("payload", "reason", "location", "explanation", "skipped"),
    [
        # torch 2.13's shape (recorded from this suite's unresumable workload, traceback trimmed)
        (
            "Graph break in user code at /w/t.py:8\nGraph Break Reason: Failed to handle graph break gracefully. Skipping the "
            "function and falling back to eager. Graph break encountered:\n\nFailed to trace builtin operator\n  Explanation: "
            "Dynamo does not know how to trace builtin operator `print`\n  Hint: Avoid calling builtin `print`.\n\n  Developer "
            'debug context: builtin print\n\nUser code traceback:\n  File "/w/t.py", line 8, in f\n',
            "Failed to trace builtin operator",
            "/w/t.py:8",
            "Dynamo does not know how to trace builtin operator `print`",
            True,
        ),
        # torch 2.6's shape: "Reason:" and the exception's text, no type line
        (
            "Graph break in user code at /w/t.py:63\nReason: Unsupported: builtin: print [<class 'x'>] False\nUser code "
            'traceback:\n  File "/w/t.py", line 63, in breaks\n',
            "Unsupported: builtin: print [<class 'x'>] False",
            "/w/t.py:63",
            None,
            False,
        ),
        # the frame torch cannot resume from, reported from convert_frame
        (
            "Graph break: torch.compile cannot properly resume from this graph break, which results in a skip.\ntorch.compile "
            "will skip tracing the frame f (/w/t.py line 3) and fall back to eager.\nThe graph break occurred in the following "
            'user code:\n  File "/w/t.py", line 5, in f\n    g()\n\nTraceback (most recent call last):\n  File "x.py", line 1'
            ", in y\ntorch._dynamo.exc.Unsupported: Call to `torch._dynamo.graph_break()`\n  Explanation: User-inserted graph "
            "break.\n  Hint: Remove the call.\n",
            "Call to `torch._dynamo.graph_break()`",
            "/w/t.py:5",
            "User-inserted graph break.",
            True,
        ),
        ("", "graph break", None, None, False),
    ],
)
def test_graph_break_texts_of_every_shape(
    payload: str, reason: str, location: str | None, explanation: str | None, skipped: bool
) -> None:
    """Each shape of torch's graph-break text yields its type, the user's file:line, the explanation and whether the frame was skipped."""
    from recompprof._model.breaks import parse_graph_break

    parsed = parse_graph_break(payload)
    assert (parsed.reason, parsed.user_location, parsed.explanation, parsed.skipped_frame) == (
        reason,
        location,
        explanation,
        skipped,
    )
    redacted = parse_graph_break(payload, redact=True)
    assert redacted.explanation is None and redacted.hints == () and "'x'" not in redacted.reason


def test_call_site_of_the_built_in_demo_is_its_training_loop(tmp_path: Path) -> None:
    """The demo's own loop (recompprof/_cli/demo.py) is user code: its recompiles name the loop's line as the call site."""
    assert (
        cli_main(["demo", "--steps", "8", "--run-dir", str(tmp_path / "run"), "--port", "0"]) == 0
    )
    compiles = [e for e in read_run(tmp_path / "run") if isinstance(e, Compile) and not e.backward]
    assert compiles and all(
        c.call_site and c.call_site[-1].split(":")[0].endswith("recompprof/_cli/demo.py")
        for c in compiles
    ), [c.call_site for c in compiles]


def test_every_measure_of_a_compile_record_reaches_its_compile_event() -> None:
    """What torch measured of a compile (start, duration, phases, guard and op counts, cache lookups and
    savings) reaches the Compile event unchanged, and the record's own kind of values stay out of it."""
    from recompprof._model.compile_record import CompileRecord
    from recompprof._model.compiles import CompileContext, compile_events
    from recompprof._model.events import Frame
    from recompprof._model.explaining import Explained

    record = CompileRecord(
        compile_id="2/1",
        code_name="forward",
        code_file="/src/net.py",
        code_line=7,
        cache_entries=1,
        start_time=1_700_000_000.5,
        duration=0.75,
        phases={"dynamo_trace": 0.5, "code_gen": 0.25},
        guard_count=12,
        graph_op_count=40,
        installed_code=True,
        cache="miss",
        cache_lookups={"fx_graph": {"miss": 2}},
        cache_seconds_saved=0.0,
    )
    frame = Frame(name="forward", file="/src/net.py", line=7)
    event, hit = compile_events(
        record,
        CompileContext(
            time=1_700_000_001.0,
            rank=3,
            step=9,
            frame=frame,
            explained=Explained([], {}),
            graph_breaks=2,
            call_site=["a.py:1 in f"],
        ),
    )
    measured = {
        "start_time": 1_700_000_000.5,
        "duration": 0.75,
        "phases": {"dynamo_trace": 0.5, "code_gen": 0.25},
        "guard_count": 12,
        "graph_op_count": 40,
        "cache": "miss",
        "cache_lookups": {"fx_graph": {"miss": 2}},
        "cache_seconds_saved": 0.0,
    }
    assert {name: getattr(event, name) for name in measured} == measured
    assert (
        event.compile_id,
        event.cache_entries,
        event.is_recompile,
        event.graph_breaks,
        event.call_site,
    ) == ("2/1", 1, True, 2, ["a.py:1 in f"])
    assert hit is None and event.outcome == "ok" and event.installed_code
