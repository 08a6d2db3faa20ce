"""The report counts true recompiles, names the reason that explains each, and stays readable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from recorded_runs import clean_env

import recompprof
from recompprof._analysis.render.html import render_html
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.merging import build_run_report
from recompprof._analysis.runs import load
from recompprof._model.events import Compile, Frame, Reason

SCALE = 1.0


def test_true_recompiles_not_one_per_cache_entry(tmp_path: Path) -> None:
    """Five recompiles of one frame are reported as 5 (the old CompileProfiler said 15: one per failing cache entry)."""

    def f(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    compiled = torch.compile(f, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        for tag in ("a", "bb", "ccc", "dddd", "eeeee", "ffffff"):
            compiled(torch.ones(2), tag)
    report = recompprof.report(session)
    frame = next(fr for fr in report.frames.values() if fr.name == "f")
    assert (frame.compiles, frame.recompiles) == (6, 5)
    group = frame.reasons[("python_constant", "L['tag']")]
    assert group.changes == 5 and group.failures == 1 + 2 + 3 + 4 + 5


def test_explaining_reason_is_the_new_change_not_the_newest_entry(tmp_path: Path) -> None:
    """When a global changes after a requires_grad variant was compiled, the recompile is explained by the global."""
    global SCALE
    SCALE = 1.0

    def g(x: torch.Tensor) -> torch.Tensor:
        return x * SCALE

    compiled = torch.compile(g, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        compiled(torch.ones(3))
        compiled(torch.ones(3, requires_grad=True))  # new variant: requires_grad
        compiled(torch.ones(3))  # cache hit on the first entry (it becomes most recently used)
        SCALE = 2.0
        compiled(torch.ones(3, requires_grad=True))
    recompiles = [e for e in session.recent_events() if e.kind == "compile" and e.is_recompile]
    explained = [next(r for r in e.reasons if r.explains_change) for e in recompiles]
    assert [r.category for r in explained] == ["requires_grad", "global"]
    assert explained[1].subject == "G['SCALE']"


def test_rendered_report_has_tables_hints_and_phases(tmp_path: Path) -> None:
    """The text report lists frames, compiles, recompile steps, reason categories with fix hints and phases."""
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        for batch in (2, 3, 5):
            compiled(torch.randn(batch, 4)).sum().backward()
            opt.step()
    text = str(recompprof.report())
    assert "Linear.forward (modules/linear.py:" in text
    assert "size" in text and "mark_dynamic" in text
    assert "dynamo_trace" in text and "Recompile steps" in text
    assert render_text(build_report(session.recent_events())) == text


def test_empty_report_says_no_compiles() -> None:
    """A session that compiled nothing reports that plainly."""
    with recompprof.attach():
        pass
    assert "No compiles recorded." in str(recompprof.report())


def test_reasons_capped_per_event_with_exact_totals(tmp_path: Path) -> None:
    """A frame with 80 variants keeps at most 64 reasons per event, yet counts every guard failure exactly."""
    from recompprof._model.explaining import MAX_REASONS_PER_EVENT

    def h(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    compiled = torch.compile(h, backend="eager")
    with (
        torch._dynamo.config.patch(recompile_limit=100),
        recompprof.attach(run_dir=tmp_path) as session,
    ):
        for i in range(80):
            compiled(torch.ones(2), f"t{i}")
    events = [e for e in session.recent_events() if e.kind == "compile"]
    assert max(len(e.reasons) for e in events) == MAX_REASONS_PER_EVENT
    assert all(e.reasons[0].explains_change for e in events if e.reasons)
    expected = sum(range(80))  # recompile k fails against each of the k entries before it
    assert sum(len(e.reasons) + sum(e.reasons_omitted.values()) for e in events) == expected
    snap = session.snapshot()
    assert snap.frames[events[0].frame.label].guard_failures["python_constant"] == expected
    report = recompprof.report(session)
    frame = report.frames[events[0].frame.key]
    assert sum(g.failures for g in frame.reasons.values()) == expected
    assert frame.recompiles == 79


def test_fix_first_ranks_causes_by_seconds_lost_with_their_backward(tmp_path: Path) -> None:
    """Each recompile's seconds, plus those of its backward (same compile id), go to the cause that explains it;
    the report ranks causes by seconds, opens with that list, and agrees with the live aggregates."""
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x: torch.Tensor, scale: float) -> torch.Tensor:
        return (model(x) * scale).sum()

    compiled = torch.compile(
        step, backend="aot_eager", dynamic=False
    )  # static: each backward compiles lazily
    with recompprof.attach(run_dir=tmp_path, recompile_limit=8) as session:
        for batch, scale in ((2, 1.0), (3, 1.0), (3, 2.0), (5, 3.0)):
            compiled(torch.randn(batch, 4), scale).backward()
            opt.step()
    events = [e for e in session.recent_events() if e.kind == "compile"]
    expected: dict[tuple[str, str], float] = {}
    cause_of_id: dict[str, tuple[str, str]] = {}
    for e in events:
        if not e.backward and e.is_recompile:
            reason = next(r for r in e.reasons if r.explains_change)
            cause_of_id[e.compile_id] = (reason.category, reason.subject)
    for e in events:
        if e.compile_id in cause_of_id:
            key = cause_of_id[e.compile_id]
            expected[key] = expected.get(key, 0.0) + e.duration
    assert any(
        e.backward and e.compile_id in cause_of_id for e in events
    )  # a recompile's backward was charged
    report = recompprof.report(session)
    got = {(c.category, c.subject): c.seconds for c in report.causes.values()}
    assert got == pytest.approx(expected) and len(got) >= 2
    ranked = report.ranked_causes()
    assert [c.seconds for c in ranked] == sorted((c.seconds for c in ranked), reverse=True)
    assert sum(c.recompiles for c in ranked) == report.recompiles
    snap = session.snapshot()
    by_category: dict[str, float] = {}
    for (category, _), seconds in expected.items():
        by_category[category] = by_category.get(category, 0.0) + seconds
    live = {k: v for t in snap.frames.values() for k, v in t.recompile_seconds.items()}
    assert live == pytest.approx(by_category)
    text = render_text(report)
    assert text.index("Fix these first: compile time lost per cause") < text.index("Frames")
    assert (
        f"Recompiles cost {report.recompile_seconds:.2f} s of {report.compile_seconds:.2f} s"
        in text
    )
    assert "mark_dynamic" in text.split("Frames")[0]  # the size cause's fix hint is in the list


def test_fix_first_example_shows_reason_and_call_site() -> None:
    """A cause's example is the explaining reason's text and the recompile's user call site (innermost last)."""
    frame = Frame(name="step", file="/src/train.py", line=10)
    reason = Reason(
        text="tensor 'x' size mismatch at index 0. expected 2, actual 3",
        category="size",
        subject="L['x']",
        explains_change=True,
    )
    events = [
        Compile(time=1.0, frame=frame, compile_id="0/0", is_recompile=False, duration=1.0),
        Compile(
            time=2.0,
            step=4,
            frame=frame,
            compile_id="0/1",
            is_recompile=True,
            duration=0.5,
            reasons=[reason],
            call_site=["/src/train.py:80 in main", "/src/train.py:55 in train_step"],
        ),
    ]
    report = build_report(events)
    (cause,) = report.ranked_causes()
    assert (cause.category, cause.subject, cause.recompiles, cause.steps) == (
        "size",
        "L['x']",
        1,
        [4],
    )
    assert cause.example == reason.text and cause.call_site[-1] == "/src/train.py:55 in train_step"
    assert report.recompile_seconds == pytest.approx(0.5)
    text = render_text(report, width=250)
    assert "at /src/train.py:55 in train_step" in text and "33.3 %" in text
    page = render_html(report)
    row = page.split('id="fix-first-table"')[1].split("</table>")[0]
    assert (
        "/src/train.py:80 in main\n/src/train.py:55 in train_step" in row
        and "size mismatch at index 0" in row
    )


def _size_then_scale(
    session_kwargs: dict[str, object], compile_kwargs: dict[str, object], tmp_path: Path
) -> list[Compile]:
    """Steps 0-5 call one compiled function with a growing batch; at step 4 a bool flag flips too (torch
    never makes a bool dynamic)."""
    compiled = torch.compile(
        lambda x, flag: x * 2 if flag else x * 3, backend="eager", **compile_kwargs
    )
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    with recompprof.attach(run_dir=tmp_path, **session_kwargs) as session:
        for step in range(6):
            compiled(torch.ones(2 + step, 3), step < 4)
            opt.step()
    return [e for e in session.recent_events() if isinstance(e, Compile)]


def test_automatic_dynamic_recompile_is_expected_warmup_not_steady_state(tmp_path: Path) -> None:
    """With warmup_steps=0, torch's one automatic-dynamic recompile (first size change of dim 0) is not steady
    state and the report explains it; the later recompile on a flipped bool is a new variant (a flag's
    second state), no steady state either, though past the warm-up steps."""
    compiles = _size_then_scale({}, {}, tmp_path)
    recompiles = [c for c in compiles if c.is_recompile]
    assert [(c.step, c.automatic_dynamic, c.steady_state) for c in recompiles] == [
        (1, "dim 0 of L['x']", False),
        (4, None, False),
    ]
    report = build_report(compiles)
    frame = next(iter(report.frames.values()))
    assert (
        frame.recompiles,
        frame.steady_state_recompiles,
        report.automatic_dynamic_recompiles,
    ) == (2, 0, 1)
    text = render_text(report, width=200)
    assert "torch made it dynamic and recompiled once" in text and "This will not recur for" in text
    assert "dim 0 of L['x']" in text


def test_size_changes_without_automatic_dynamic_are_variants_until_the_bound(
    tmp_path: Path,
) -> None:
    """Under dynamic=False every size change recompiles (nothing turns dynamic): five sizes are variants a
    bounded set explains, so none is automatic dynamic and none is steady state yet."""
    compiles = _size_then_scale({}, {"dynamic": False}, tmp_path)
    recompiles = [c for c in compiles if c.is_recompile]
    assert len(recompiles) == 5
    assert all(c.automatic_dynamic is None and not c.steady_state for c in recompiles)


# Four static shapes in one process; argv[2] objects allocated first move the process's objects
# (whatever the machine's address randomisation), as a restarted process's are moved.
_RESTARTED_RANK = """
import sys, torch, recompprof
pad = [object() for _ in range(int(sys.argv[2]))]
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
compiled = torch.compile(model, backend="eager", dynamic=False)
with recompprof.attach(run_dir=sys.argv[1]):
    for batch in (2, 3, 4, 5):
        compiled(torch.randn(batch, 8))
"""


@pytest.mark.workload
def test_a_restarted_ranks_variants_are_counted_per_process(tmp_path: Path) -> None:
    """A rank restarted into its run folder (two processes of rank 0, each compiling four static
    shapes): each process needed 4 variants and the report says 4, folded in one process or merged
    from workers, not the 8 guard-set fingerprints the two wrote (torch's guards name objects by
    their ids, so a fingerprint is compared within its own process)."""
    for pad in (0, 50_000):
        subprocess.run(
            [sys.executable, "-c", _RESTARTED_RANK, str(tmp_path), str(pad)],
            env=clean_env(RANK="0", WORLD_SIZE="1"),
            check=True,
            capture_output=True,
        )
    logs = sorted(tmp_path.glob("rank00000-*.jsonl"))
    events = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
    assert len(logs) == 2
    assert len({e["guard_set"] for e in events if "guard_set" in e}) == 8
    for report in (
        build_report(load(tmp_path).events),
        build_run_report(load(tmp_path).events, workers=2),
    ):
        (frame,) = report.frames.values()
        assert (frame.compiles, frame.variants_needed) == (8, 4)
        assert f"{frame.label}: 4 variants" in render_text(report, width=200)


def test_a_process_attached_twice_reads_its_compile_time_against_both_sessions_wall(
    tmp_path: Path,
) -> None:
    """One process attached twice to one run folder (two sessions of rank 0, one after the other):
    the header's wall time is both sessions' (the sum of their session ends' wall seconds), as its
    compile time is, so compile time never reads as more than the wall time it ran in."""
    compiled = torch.compile(torch.nn.Linear(8, 4), backend="eager", dynamic=False)
    for sizes in ((2, 3), (4, 5, 6)):
        with recompprof.attach(run_dir=tmp_path):
            for size in sizes:
                compiled(torch.randn(size, 8))
    (log,) = tmp_path.glob("*.jsonl")
    ends = [json.loads(line) for line in log.read_text().splitlines() if '"session_end"' in line]
    walls = [end["totals"]["wall_seconds"] for end in ends]
    report = build_report(load(tmp_path).events)
    assert len(walls) == 2 and report.run.wall_seconds == pytest.approx(sum(walls))
    assert report.compile_seconds <= report.run.wall_seconds
    assert f"of {sum(walls):.1f} s wall" in render_text(report, width=200)


def test_a_size_change_of_the_same_dim_twice_is_not_warmup() -> None:
    """A dim whose size changes a second time on one frame stayed static (e.g. mark_static): only the first
    size change can be automatic dynamic warming up."""
    from recompprof._model.compile_record import CompileRecord
    from recompprof._model.explaining import ReasonExplainer, automatic_dynamic

    frame = Frame(name="f", file="/src/f.py", line=1)
    explainer = ReasonExplainer()
    first = explainer.explain(
        frame, ["0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"]
    )
    again = explainer.explain(
        frame, ["0/1: tensor 'x' size mismatch at index 0. expected 3, actual 4"]
    )
    other = explainer.explain(
        frame, ["0/2: tensor 'x' size mismatch at index 1. expected 3, actual 5"]
    )
    got = [
        automatic_dynamic(CompileRecord(), list(e.reasons), e.first_change)
        for e in (first, again, other)
    ]
    assert got == ["dim 0 of L['x']", None, "dim 1 of L['x']"]


def test_text_report_shows_reason_examples_and_unbroken_headers() -> None:
    """The terminal report shows each reason group's example text, and no header word is split across lines
    at narrow or wide widths (headers wrap only between words)."""
    frame = Frame(name="LlamaForCausalLM.forward", file="/src/models/modeling_llama.py", line=1200)
    reason = Reason(
        text="tensor 'input_ids' size mismatch at index 1. expected 128, actual 256",
        category="size",
        subject="L['input_ids']",
        explains_change=True,
    )
    events = [
        Compile(time=1.0, step=0, frame=frame, compile_id="0/0", is_recompile=False, duration=1.0),
        Compile(
            time=2.0,
            step=0,
            frame=frame,
            compile_id="0/0",
            is_recompile=False,
            duration=0.5,
            backward=True,
        ),
        Compile(
            time=3.0,
            step=3,
            frame=frame,
            compile_id="0/1",
            is_recompile=True,
            duration=0.5,
            reasons=[reason],
        ),
    ]
    report = build_report(events)
    headers = (
        "Compiles",
        "Recompiles",
        "Steady-state",
        "Recompile",
        "Limit",
        "Graph",
        "breaks",
        "Failures",
        "Category",
        "Subject",
        "Changes",
        "Guard",
        "failures",
        "Example",
    )
    for width in (100, 120, 200):
        text = render_text(report, width=width)
        assert max(len(line) for line in text.splitlines()) <= width
        words = {w for line in text.splitlines() for w in line.split()}
        assert all(h in words for h in headers), (width, text)
        flat = " ".join(text.split())
        assert "expected 128, actual 256" in flat and "(+1 bwd)" in flat


def test_html_shows_backward_compiles_and_unknown_steps_of_ingested_runs() -> None:
    """The HTML report counts backward compiles (per frame and overall); for a run read from TORCH_TRACE it says the
    steps are unknown and names no mode."""
    from recompprof._model.events import SessionStart

    frame = Frame(name="step", file="/src/train.py", line=10)
    start = SessionStart(
        time=0.0,
        run_id="torch-trace-x",
        host="h",
        pid=1,
        versions={},
        mode="monitor",
        recompile_limit=8,
        signals={"torch_trace": True},
    )
    events = [
        start,
        Compile(time=1.0, frame=frame, compile_id="0/0", is_recompile=False, duration=1.0),
        Compile(
            time=2.0, frame=frame, compile_id="0/0", is_recompile=False, duration=0.5, backward=True
        ),
        Compile(
            time=3.0,
            frame=frame,
            compile_id="0/1",
            is_recompile=True,
            duration=0.5,
            reasons=[
                Reason(
                    text="k == 1.0",
                    category="python_constant",
                    subject="L['k']",
                    explains_change=True,
                )
            ],
        ),
    ]
    report = build_report(events)
    page = render_html(report)
    assert '<span class="bwd">(+1 bwd)</span>' in page
    assert 'id="kpi-backward-compiles"><div class="v">1</div>' in page
    assert 'id="kpi-steps"><div class="v">unknown</div>' in page
    assert "from TORCH_TRACE (no mode) · steps unknown" in page and "mode monitor" not in page
    text = render_text(report, width=200)
    assert "from TORCH_TRACE (no mode) | steps unknown" in text and "steps 0" not in text


def test_text_report_prints_reason_text_verbatim_and_bounds_each_frame() -> None:
    """Reason texts reach the terminal as torch wrote them (``[bold]`` and ``:warning:`` are text, not
    markup or an emoji); a frame lists its 5 groups that explained the most recompiles plus one row
    summing the rest, and a long example is cut, saying so."""
    frame = Frame(name="Net.forward", file="/src/net.py", line=7)
    texts = [f"L['cfg'][{i}] == 'a[bold]b :warning: c'" for i in range(7)] + ["Z" * 400]
    events = [
        Compile(time=1.0, step=0, frame=frame, compile_id="0/0", is_recompile=False, duration=1.0)
    ]
    for i, text in enumerate(texts):
        reasons = [
            Reason(
                text=text,
                category="python_constant",
                subject=f"L['cfg'][{i}]",
                explains_change=True,
            )
        ]
        events += [
            Compile(
                time=2.0 + i + k,
                step=i,
                frame=frame,
                compile_id=f"0/{i}",
                is_recompile=True,
                duration=0.5,
                reasons=reasons,
            )
            for k in range(10 - i)
        ]
    text = render_text(build_report(events), width=200)
    why = text[text.index("Why they recompiled") : text.index("Compile time by phase")]
    flat = " ".join(why.split())
    assert "== 'a[bold]b :warning: c'" in flat
    assert "L['cfg'][4]" in flat and "L['cfg'][5]" not in flat
    assert "3 more group(s)" in flat  # groups 5, 6 and the long one: 5 + 4 + 3 recompiles
    row = next(line for line in why.splitlines() if "3 more group(s)" in line)
    assert row.split()[-3:] == ["12", "12", "-"], row  # changes, guard failures, no example
    long_report = render_text(
        build_report(
            [events[0], *[e for e in events if e.reasons and e.reasons[0].text.startswith("Z")]]
        ),
        width=200,
    )
    long_why = long_report[
        long_report.index("Why they recompiled") : long_report.index("Compile time by phase")
    ]
    assert long_why.count("Z") == 157 and "..." in long_why


def _imports(module: str) -> set[str]:
    """Every module ``module``'s source imports, at any level (in functions and TYPE_CHECKING blocks too)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_report_model_imports_no_renderer_and_divergence_no_report() -> None:
    """Imports run one way: the report model and its figure families reach no renderer (``str(report)``
    draws with the renderer its caller gave), and divergence, whose per-rank state the model holds,
    imports no report."""
    renderers = {"recompprof._analysis.render.text", "recompprof._analysis.render.html"}
    for module in ("model", "figures", "frames", "sessions", "bounded", "fold"):
        assert not _imports(f"recompprof._analysis.report.{module}") & renderers, module
    assert not {
        m
        for m in _imports("recompprof._analysis.report.divergence")
        if m.startswith("recompprof._analysis.report.model")
    }


def test_a_recompile_with_no_reason_marked_is_explained_by_its_first() -> None:
    """A log written by hand or an old tool: a recompile that marks a later reason is explained by it, one that
    marks none by its first, for its cause, the cause's example and what the frame says changed."""
    frame = Frame(name="step", file="train.py", line=3)

    def reason(subject: str, value: int, explains: bool) -> Reason:
        return Reason(
            text=f"{subject} == {value}",
            category="python_constant",
            subject=subject,
            explains_change=explains,
        )

    def compile_event(i: int, reasons: list[Reason]) -> Compile:
        return Compile(
            time=float(i),
            rank=0,
            step=i,
            frame=frame,
            compile_id=f"0/{i}",
            is_recompile=bool(reasons),
            reasons=reasons,
            duration=1.0,
        )

    report = build_report(
        [
            compile_event(0, []),
            compile_event(1, [reason("L['a']", 1, False), reason("L['b']", 2, True)]),
            compile_event(2, [reason("L['c']", 3, False), reason("L['d']", 4, False)]),
        ]
    )
    causes = {key[2]: cause for key, cause in report.causes.items()}
    assert sorted(causes) == ["L['b']", "L['c']"]
    assert causes["L['b']"].example == "L['b'] == 2" and causes["L['c']"].example == "L['c'] == 3"
    (kept,) = report.frames.values()
    assert list(kept.changed_again) == ["value of L['b']", "value of L['c']"]
    assert kept.reasons[("python_constant", "L['b']")].changes == 1
    assert kept.reasons[("python_constant", "L['c']")].changes == 0  # marked as explaining nothing
