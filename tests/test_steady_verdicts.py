"""Steady state as docs/steady-state.md defines it, judged against what torch does when the run goes on.

One recording (``tests/workloads/steady_cases.py``, live and ``TORCH_TRACE`` at once) runs a generated
suite of small cases, each a frame of its own: torch's 0/1 specialisation, bounded sets (k buckets under
``dynamic=False``, a flag's k states, k block instances with ``layer_idx`` under regional compilation,
training then a first eval), several failures on one subject (a frozen embedding before regionally
compiled blocks), a parity guard on an unspecialised module int, and unbounded sets (a new length every
call, a module counter that changes every call, under a raised limit). Each case's continuation (more
requests, more steps) is torch's ground truth: its compile count says whether the cause recurs. The
expected verdicts are read from that count, never from recompprof.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from agreement import Recorded, record
from needs import starts

import recompprof
from recompprof._analysis.check import CheckInputError, Rules, check
from recompprof._analysis.render.text import render_text
from recompprof._analysis.render.wording import fix_text, hints_for
from recompprof._analysis.report.figures import CauseReport
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.model import Report
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, Event, Reason
from recompprof._model.explaining import _held_by_instance
from recompprof._model.steady import BOUNDED_VARIANTS, ZERO_ONE
from recompprof._model.vocabulary import CATEGORIES
from recompprof._torch.versions import torch_info

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "steady_cases.py"
SOURCES = ("live", "trace")
# The expected verdicts are torch's own behaviour and texts (its 0/1-specialisation text, recompile_limit,
# regional compilation's guards) as 2.13 and the newest release show them; the suite has not been run on
# older releases, so it does not claim them (docs/testing.md: the newest release runs it, as torch_compat).
OLDEST_JUDGED = (2, 13)
pytestmark = [
    pytest.mark.torch_compat,
    pytest.mark.skipif(
        torch_info().major_minor < OLDEST_JUDGED,
        reason=f"the generated steady-state suite is judged on torch >= 2.13, not {torch.__version__}",
    ),
]


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    run = record(WORKLOAD, (), tmp_path_factory.mktemp("steady"))
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    return run


@pytest.fixture(scope="module")
def truth(recorded: Recorded) -> dict[str, dict[str, int | str]]:
    """Per case, torch's compiles in the warm phase and in the continuation (its counting backend)."""
    return json.loads((recorded.where / "truth.json").read_text())


@pytest.fixture(scope="module")
def events(recorded: Recorded) -> dict[str, list[Event]]:
    return {
        "live": list(read_run(recorded.run_dir)),
        "trace": [e for per_file in read_trace(recorded.trace_dir).events for e in per_file],
    }


@pytest.fixture(scope="module")
def reports(events: dict[str, list[Event]]) -> dict[str, Report]:
    return {source: build_report(evs) for source, evs in events.items()}


def _recompiles(events: list[Event], case: str) -> list[Compile]:
    return [
        e
        for e in events
        if isinstance(e, Compile)
        and e.is_recompile
        and not e.backward
        and e.outcome == "ok"
        and e.frame.name.startswith(f"{case}_")
    ]


def _explaining(event: Compile) -> Reason:
    return next(r for r in event.reasons if r.explains_change)


def _causes(report: Report, case: str) -> list[CauseReport]:
    return [c for c in report.ranked_causes() if c.frame.startswith(f"{case}_")]


@pytest.mark.parametrize("source", SOURCES)
def test_generated_suite_steady_state_matches_whether_torch_compiles_again(
    source: str, events: dict[str, list[Event]], truth: dict[str, dict[str, int | str]]
) -> None:
    """Every generated case, live and ingested: a case has steady-state recompiles exactly when torch
    compiled it again in its continuation (an unbounded set past the bound), and none where the
    continuation compiled nothing (torch's own rules, bounded sets), however many steps came first; where
    the verdict is unknown (ingested, a module's own constant past the bound: a trace names no instance)
    it is counted apart, never as steady state, and only there."""
    wrong, unknown = {}, set()
    for case, seen in truth.items():
        recurs = int(seen["after"]) > 0
        recompiles = _recompiles(events[source], case)
        steady = sum(e.steady_state for e in recompiles)
        if any(e.steady_state_unknown for e in recompiles):
            unknown.add(case)
            if steady:
                wrong[case] = (steady, seen)
        elif (steady > 0) != recurs:
            wrong[case] = (steady, seen)
    assert not wrong
    assert unknown == ({"counter"} if source == "trace" else set())
    assert {c for c, seen in truth.items() if int(seen["after"]) > 0} == {
        "growing_12",
        "growing_20",
        "counter",
    }


def test_live_and_ingested_verdicts_agree_compile_by_compile(
    events: dict[str, list[Event]], truth: dict[str, dict[str, int | str]]
) -> None:
    """The live session and ``ingest`` of its own trace give each recompile the same verdict, explaining
    reason and automatic-dynamic mark, but where the trace cannot know: a module counter past the bound
    (``L['self'].calls``), steady state live and unknown ingested, never a verdict the trace cannot give."""

    def verdicts(source: str) -> dict[tuple[str, str], tuple[bool | None, str, str, str | None]]:
        return {
            (case, e.compile_id): (
                None if e.steady_state_unknown else e.steady_state,
                _explaining(e).category,
                _explaining(e).subject,
                e.automatic_dynamic,
            )
            for case in truth
            for e in _recompiles(events[source], case)
        }

    live, trace = verdicts("live"), verdicts("trace")
    unknown = {key for key, verdict in trace.items() if verdict[0] is None}
    assert {case for case, _ in unknown} == {"counter"}
    assert all(live[key][0] is True and live[key][1:] == trace[key][1:] for key in unknown)
    assert {k: v for k, v in live.items() if k not in unknown} == {
        k: v for k, v in trace.items() if k not in unknown
    }
    assert len(live) > 60


@pytest.mark.parametrize("source", SOURCES)
def test_zero_one_specialisation_is_warmup_with_torch_remedy(
    source: str, events: dict[str, list[Event]], reports: dict[str, Report]
) -> None:
    """Batches 8, 4, 1, then any of 1..8: torch made dim 0 dynamic, then its 0/1 specialisation compiled
    batch 1 once (``2 <= x.size()[0]``) and the rest compiled nothing. Neither recompile is steady state;
    the cause ranks as warm-up that fixed itself, never as a dim the traced code specialised again, and
    the fix says torch's own remedy, mark_unbacked, which the reason text carries past any cut."""
    first, zero_one = _recompiles(events[source], "zero_one")
    assert first.automatic_dynamic == "dim 0 of L['x']"
    reason = _explaining(zero_one)
    assert (reason.category, reason.subject) == ("symbolic_shape", "L['x'].size()[0]")
    assert not first.steady_state and not zero_one.steady_state
    report = reports[source]
    cause = next(c for c in _causes(report, "zero_one") if c.category == "symbolic_shape")
    assert (cause.tier, cause.rule) == (2, ZERO_ONE)
    assert cause.torch_remedy == "torch._dynamo.decorators.mark_unbacked(tensor, dim)"
    fix = fix_text(cause, hints_for(report), report)
    assert "0/1 specialisation" in fix and "mark_unbacked(tensor, dim)" in fix
    assert "specialised it again" not in fix and "branch" not in fix
    frame = report.frames[cause.frame_key]
    assert "dim 0 of L['x']" not in frame.changed_again


@pytest.mark.parametrize("source", SOURCES)
def test_bucketed_server_is_a_bounded_set_not_steady_state(
    source: str,
    events: dict[str, list[Event]],
    reports: dict[str, Report],
    truth: dict[str, dict[str, int | str]],
) -> None:
    """A ``dynamic=False`` server padding to 2, 3, 5 or 8 buckets compiles once per bucket, then serves
    100 requests compiling nothing: no recompile is steady state, and the fix says the set settled after
    its variants rather than only advising to pad or bucket, the fix already applied."""
    for k in (2, 3, 5, 8):
        case = f"buckets_{k}"
        recompiles = _recompiles(events[source], case)
        assert len(recompiles) == k - 1 == int(truth[case]["warm"]) - 1
        assert int(truth[case]["after"]) == 0
        assert not any(e.steady_state for e in recompiles)
    report = reports[source]
    (cause,) = _causes(report, "buckets_5")
    assert cause.tier == 1 and report.settled(cause)
    fix = fix_text(cause, hints_for(report), report)
    assert fix.startswith("settled after 5 variants") and "costs no more if it is by design" in fix
    assert "pad" not in fix and "bucket sizes" not in fix  # the fix the server already applied


@pytest.mark.parametrize("source", SOURCES)
def test_per_instance_layer_idx_is_a_bounded_set_with_torch_remedy_and_limit(
    source: str, events: dict[str, list[Event]], reports: dict[str, Report]
) -> None:
    """Blocks compiled one by one (``block.compile()``) with a ``layer_idx`` int: one graph per instance,
    none steady state (3, 6 and 10 blocks; at 10 torch's limit cuts in). The fix line names torch's
    remedy, ``allow_unspec_int_on_nn_module``, and the ``recompile_limit`` to set instead."""
    for n in (3, 6, 10):
        recompiles = _recompiles(events[source], f"instances_{n}")
        assert len(recompiles) == min(n, 8) - 1
        assert not any(e.steady_state for e in recompiles)
        assert {(_explaining(e).category, _explaining(e).subject) for e in recompiles} == {
            ("module_attribute", "L['self'].layer_idx")
        }
    report = reports[source]
    assert report.frames[next(c.frame_key for c in _causes(report, "instances_10"))].limit_hits
    (cause,) = _causes(report, "instances_10")
    fix = fix_text(cause, hints_for(report), report)
    assert "allow_unspec_int_on_nn_module = True" in fix
    assert "recompile_limit to at least the instances x the variants" in fix
    assert "tried it dynamic" not in fix
    assert "allow_unspec_int_on_nn_module" in cause.torch_remedy


@pytest.mark.parametrize("source", SOURCES)
def test_frozen_embedding_length_change_is_explained_by_the_size_not_requires_grad(
    source: str, events: dict[str, list[Event]], reports: dict[str, Report]
) -> None:
    """A frozen embedding before regionally compiled blocks: one frame holds a requires_grad=0 and a
    requires_grad=1 variant. A new length fails the other variant's entry on requires_grad and the same
    variant's entry on the size: the change is the size (torch made it dynamic, later lengths compiled
    nothing), warm-up; and the requires_grad hint never tells to detach an input that needs a gradient."""
    first, *lengths = _recompiles(events[source], "frozen_regional")
    assert _explaining(first).category == "requires_grad"
    assert lengths and all(
        (_explaining(e).category, e.automatic_dynamic, e.steady_state)
        == ("size", "dim 0 of L['x']", False)
        for e in lengths
    )
    report = reports[source]
    causes = {c.category: c for c in _causes(report, "frozen_regional")}
    assert causes["size"].tier == 2
    fix = fix_text(causes["requires_grad"], hints_for(report), report)
    assert "Only if the input needs no gradient, detach it" in fix


@pytest.mark.parametrize("source", SOURCES)
def test_first_eval_after_training_steps_is_a_new_variant_not_steady_state(
    source: str, events: dict[str, list[Event]], truth: dict[str, dict[str, int | str]]
) -> None:
    """Three training steps, then the first eval under no_grad: the eval variant compiles once at a step
    past warm-up (0) and is no steady state; four more train/eval rounds compile nothing (torch)."""
    (first_eval,) = _recompiles(events[source], "modes")
    assert _explaining(first_eval).category == "grad_mode"
    assert not first_eval.steady_state
    assert int(truth["modes"]["after"]) == 0
    if source == "live":
        assert (first_eval.step or 0) > 0


@pytest.mark.parametrize("source", SOURCES)
def test_parity_guard_on_an_unspecialised_module_int_is_that_attribute(
    source: str, events: dict[str, list[Event]]
) -> None:
    """Under ``allow_unspec_int_on_nn_module``, ``if self.layer_idx % 2 == 1`` installs
    ``(self.layer_idx % 2) == 1``: the guard is that attribute's (module_attribute, ``L['self'].layer_idx``),
    not ``other`` without a subject, and its one recompile per parity is no steady state."""
    recompiles = _recompiles(events[source], "parity_unspec")
    parity = [e for e in recompiles if "% 2" in _explaining(e).text]
    assert parity
    for e in parity:
        reason = _explaining(e)
        assert (reason.category, reason.subject) == ("module_attribute", "L['self'].layer_idx")
        assert not e.steady_state


@pytest.mark.parametrize("source", SOURCES)
def test_torch_remedy_is_never_cut_from_the_report(
    source: str, events: dict[str, list[Event]]
) -> None:
    """The reason texts of 0/1 specialisation and of a module int attribute carry torch's own remedy past
    300 characters; the rendered report still names both (as the fix line)."""
    kept = [
        e
        for e in events[source]
        if not isinstance(e, Compile) or e.frame.name.startswith(("zero_one_", "instances_10_"))
    ]
    text = " ".join(render_text(build_report(kept), width=400).split())
    assert "mark_unbacked(tensor, dim)" in text
    assert "allow_unspec_int_on_nn_module = True" in text


@pytest.mark.parametrize("source", SOURCES)
def test_unbounded_sets_turn_steady_past_the_bound(
    source: str, events: dict[str, list[Event]], reports: dict[str, Report]
) -> None:
    """A new length every call under ``dynamic=False`` and a module counter that changes every call (a
    raised limit): the first variants are no steady state (the live verdict cannot yet tell them from a
    bounded set), every recompile past the bound is, and the report does not call the last one settled.
    Ingested, the counter past the bound is unknown (a trace cannot tell it from new instances)."""
    bounded = BOUNDED_VARIANTS - 1  # recompiles within the bound: the first entry is a variant too
    for case in ("growing_20", "counter"):
        recompiles = _recompiles(events[source], case)
        verdicts = [e.steady_state for e in recompiles]
        assert verdicts[:bounded] == [False] * bounded
        assert not any(e.steady_state_unknown for e in recompiles[:bounded])
        if case == "counter" and source == "trace":
            unknown = {e.steady_state_unknown for e in recompiles[bounded:]}
            assert not any(verdicts) and unknown == {"instance of L['self'].calls"}
        else:
            assert verdicts[bounded:] and all(verdicts[bounded:])
    report = reports[source]
    (counter,) = _causes(report, "counter")
    assert not report.settled(counter)
    if source == "live":
        assert counter.tier == 0
    else:
        assert counter.tier == 1 and counter.steady_state_unknown == len(verdicts) - bounded
        fix = fix_text(counter, hints_for(report), report)
        assert f"steady state unknown for {counter.steady_state_unknown}" in fix


def test_check_gates_steady_state_without_steps(events: dict[str, list[Event]]) -> None:
    """``check --max-steady-state-recompiles 0`` fails the run on the unbounded cases and names them, while
    the bounded cases alone pass it."""
    result = check(events["live"], Rules(max_steady_state_recompiles=0))
    (violation,) = result.violations
    assert violation.rule == "max_steady_state_recompiles"
    assert "counter_Model.forward" in violation.message and "growing_" in violation.message
    bounded = [
        e
        for e in events["live"]
        if not isinstance(e, Compile) or not e.frame.name.startswith(("growing_", "counter_"))
    ]
    assert not check(bounded, Rules(max_steady_state_recompiles=0)).violations


def test_serving_job_without_steps_is_caught_and_after_step_refuses(tmp_path: Path) -> None:
    """A serving loop that never steps an optimizer and keeps meeting new lengths under ``dynamic=False``
    (limit raised) is caught by ``check --max-steady-state-recompiles``; ``--after-step 1`` refuses it
    with one line instead of passing on nothing."""
    torch._dynamo.reset()
    serve = torch.compile(lambda x: x.sum(0), backend="eager", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=32), recompprof.attach(run_dir=tmp_path):
        for length in range(1, 13):
            serve(torch.randn(length, 2))
    events = list(read_run(tmp_path))
    recompiles = [e for e in events if isinstance(e, Compile) and e.is_recompile]
    assert len(recompiles) == 11 and {e.step for e in recompiles} == {0}
    (violation,) = check(events, Rules(max_steady_state_recompiles=0)).violations
    # 12 lengths, 12 variants: those past the bound are steady state
    assert f"{12 - BOUNDED_VARIANTS} steady-state recompile(s)" in violation.message
    with pytest.raises(CheckInputError, match="never reached step 1"):
        check(events, Rules(after_step=1, max_recompiles=0))


def test_parity_guards_of_torch_associative_scan_advise_padding_not_branching(
    tmp_path: Path,
) -> None:
    """``associative_scan`` over a length torch made dynamic installs parity guards of its own (``(x.size()[0]
    % 2) == 0``, then of each halving): every new length recompiles (torch). The fix says the guard is
    torch's op's and to pad or bucket the length, never to avoid branching in the user's code or to mark a
    ``mark_dynamic`` range, which makes torch raise there."""
    from torch._higher_order_ops.associative_scan import associative_scan

    def cumulative(x: torch.Tensor) -> torch.Tensor:
        return associative_scan(lambda a, b: a + b, x, dim=0, combine_mode="generic")

    torch._dynamo.reset()
    compiled = torch.compile(cumulative, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        for length in (4, 6, 7, 9, 10):
            compiled(torch.randn(length, 3))
    report = recompprof.report(session)
    recompiles = [e for e in session.recent_events() if isinstance(e, Compile) and e.is_recompile]
    assert len(recompiles) >= 3 and not any(e.steady_state for e in recompiles)
    (cause,) = [c for c in report.ranked_causes() if c.category == "symbolic_shape"]
    fix = fix_text(cause, hints_for(report), report)
    assert "inside torch's own op" in fix and "pad or bucket that length" in fix, cause.example
    assert "branch" not in fix


@pytest.fixture(scope="module")
@starts("workload")
def raised_instances(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    run = record(
        WORKLOAD,
        ("instances_raised", "rebuilt", "passed_raised", "widths_raised", "rates_raised"),
        tmp_path_factory.mktemp("instances"),
    )
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    return run


def test_instances_past_the_bound_are_variants_per_instance_live_and_unknown_ingested(
    raised_instances: Recorded,
) -> None:
    """Twelve regionally compiled blocks with a ``layer_idx`` under a limit raised to 16: live, every
    block's first compile is a variant of its own instance, none steady state even past 8 (torch compiles
    nothing in the steps after); ingested, the trace names no instance (a new block and one block's value
    changing read alike), so past 8 the verdict is unknown: neither steady state nor a variant."""
    truth = json.loads((raised_instances.where / "truth.json").read_text())["instances_raised"]
    assert (truth["warm"], truth["after"]) == (12, 0)
    live = list(read_run(raised_instances.run_dir))
    trace = [e for per_file in read_trace(raised_instances.trace_dir).events for e in per_file]
    for source, events in (("live", live), ("trace", trace)):
        recompiles = _recompiles(events, "instances_raised")
        assert len(recompiles) == 11, source
        assert {(_explaining(e).category, _explaining(e).subject) for e in recompiles} == {
            ("module_attribute", "L['self'].layer_idx")
        }
        assert (
            not build_report(events)
            .frames[next(c.frame_key for c in _causes(build_report(events), "instances_raised"))]
            .limit_hits
        )
    assert not any(e.steady_state for e in _recompiles(live, "instances_raised"))
    assert not any(e.steady_state_unknown for e in _recompiles(live, "instances_raised"))
    bounded = BOUNDED_VARIANTS - 1
    verdicts = [
        (e.steady_state, e.steady_state_unknown) for e in _recompiles(trace, "instances_raised")
    ]
    unknown = "instance of L['self'].layer_idx"
    assert verdicts == [(False, None)] * bounded + [(False, unknown)] * (11 - bounded)


@pytest.mark.parametrize(
    ("case", "category", "subject", "guard"),
    [
        ("widths_raised", "size", "L['self'].lin._parameters['bias']", "size mismatch at index 0"),
        ("rates_raised", "module_attribute", "L['self'].rate", "((-1)*self.rate)) == "),
    ],
)
def test_blocks_differing_by_a_constant_of_their_own_are_variants_per_instance(
    raised_instances: Recorded, case: str, category: str, subject: str, guard: str
) -> None:
    """Twelve regionally compiled blocks (limit raised to 16) that differ by a constant of their own
    instance, as a ``layer_idx`` is: their weights' widths (a new block fails the others' entries on
    its parameter's size), or a float drop rate (stochastic depth: once torch makes the float a symbol,
    a relation pins it, ``(1.0 + ((-1)*self.rate)) == 0.98``, which is that attribute's, not ``other``
    without a subject). Live, every block's first compile is a variant of its own instance, none steady
    state past 8 (torch compiles nothing in the steps after); ingested, no instance is named, so past 8
    the verdict is unknown, as for any module's own constant."""
    truth = json.loads((raised_instances.where / "truth.json").read_text())[case]
    assert (truth["warm"], truth["after"]) == (12, 0)
    live = _recompiles(list(read_run(raised_instances.run_dir)), case)
    trace = _recompiles(
        [e for per_file in read_trace(raised_instances.trace_dir).events for e in per_file], case
    )
    for events in (live, trace):
        explaining = [_explaining(e) for e in events]
        assert [(r.category, r.subject) for r in explaining] == [(category, subject)] * 11
        assert sum(guard in r.text for r in explaining) >= BOUNDED_VARIANTS
    assert [(e.steady_state, e.steady_state_unknown) for e in live] == [(False, None)] * 11
    bounded = BOUNDED_VARIANTS - 1
    assert [(e.steady_state, e.steady_state_unknown) for e in trace] == [
        (False, None)
    ] * bounded + [(False, f"instance of {subject}")] * (11 - bounded)


# Subjects as torch 2.13 writes them, and the one whose holder is the module instance, for each
# tensor category that makes the reason a constant of that instance (``module_attribute`` says so of
# any subject: the parser gives it to a module's attribute alone).
_PER_INSTANCE = {
    "L['self'].layer_idx": {},
    "L['self'].lin._parameters['bias']": dict.fromkeys(
        ("size", "stride", "ndim", "dtype", "device", "requires_grad"),
        "L['self'].lin._parameters",
    ),
    "L['self']._modules['bn']._buffers['running_mean']": dict.fromkeys(
        ("size", "stride", "ndim", "dtype", "device", "requires_grad"),
        "L['self']._modules['bn']._buffers",
    ),
    "L['x']": {},  # an input: the frame's, whatever the category
    "G['model'].lin._parameters['bias'].grad": {},  # a tensor read off a parameter, not it
    "L['self'].lin._parameters": {},  # the dict itself
}


@pytest.mark.parametrize("category", CATEGORIES)
def test_a_modules_own_constants_are_counted_per_instance_and_nothing_else(category: str) -> None:
    """Every reason category over the subjects torch writes: a reason is counted per module instance
    exactly where it is that instance's constant (a module's own attribute, ``module_attribute``; a
    size, stride, rank, dtype, device or requires_grad of a module's own parameter or buffer, looked
    up through the dict holding it), and per frame everywhere else (an input, a tensor read off a
    parameter, a parameter's own value guarded as a constant)."""
    for subject, held in _PER_INSTANCE.items():
        reason = Reason(text="t", category=category, subject=subject)
        expected = subject if category == "module_attribute" else held.get(category)
        assert _held_by_instance(reason) == expected, subject


def test_an_attribute_whose_holder_a_trace_cannot_tell_is_unknown_past_the_bound(
    raised_instances: Recorded,
) -> None:
    """Twelve blocks passed in turn to one compiled function (``L['block'].layer_idx``): live knows the
    holder is a module and calls each block a variant of its own instance; a trace does not say what holds
    the attribute (category ``other``: a module or a plain object), so past 8 ingest says unknown, never
    steady state (torch compiles nothing in the steps after)."""
    truth = json.loads((raised_instances.where / "truth.json").read_text())["passed_raised"]
    assert (truth["warm"], truth["after"]) == (12, 0)
    live = _recompiles(list(read_run(raised_instances.run_dir)), "passed_raised")
    trace = _recompiles(
        [e for per_file in read_trace(raised_instances.trace_dir).events for e in per_file],
        "passed_raised",
    )
    subject = "L['block'].layer_idx"
    assert [(_explaining(e).category, _explaining(e).subject) for e in live] == [
        ("module_attribute", subject)
    ] * 11
    assert [(_explaining(e).category, _explaining(e).subject) for e in trace] == [
        ("other", subject)
    ] * 11
    assert [(e.steady_state, e.steady_state_unknown) for e in live] == [(False, None)] * 11
    bounded = BOUNDED_VARIANTS - 1
    assert [(e.steady_state, e.steady_state_unknown) for e in trace] == [
        (False, None)
    ] * bounded + [(False, f"instance of {subject}")] * (11 - bounded)


def test_unknown_verdicts_are_said_by_report_and_check(raised_instances: Recorded) -> None:
    """The ingested twelve blocks' unknown verdicts reach the report and ``check`` as unknown: the
    Steady-state column, the HTML page's card and a note, and ``check --max-steady-state-recompiles 0``
    passes with a note naming them, never counting them as steady or calling them variants."""
    from recompprof._analysis.check import STEADY_UNKNOWN_NOTE
    from recompprof._analysis.render.html import render_html

    trace = [e for per_file in read_trace(raised_instances.trace_dir).events for e in per_file]
    kept = [
        e
        for e in trace
        if not isinstance(e, Compile) or e.frame.name.startswith("instances_raised_")
    ]
    past = 11 - (BOUNDED_VARIANTS - 1)
    text = " ".join(render_text(build_report(kept), width=400).split())
    assert f"0 (+{past} unknown)" in text
    assert f"{past} recompile(s) have an unknown steady-state verdict" in text
    card = re.search(r'id="kpi-steady"><div class="v">([^<]*)<', render_html(build_report(kept)))
    assert card is not None and card.group(1) == f"0 (+{past} unknown)"
    result = check(kept, Rules(max_steady_state_recompiles=0))
    assert not result.violations
    (note,) = [n for n in result.notes if n.rule == STEADY_UNKNOWN_NOTE]
    assert f"{past} recompile(s) of unknown steady-state verdict" in note.message


def test_unknown_verdicts_are_null_in_the_lake(raised_instances: Recorded, tmp_path: Path) -> None:
    """The ingested twelve blocks exported to the lake: ``steady_state_recompile`` and ``steady_state`` are
    NULL for the recompiles of unknown verdict, false for the variants within the bound."""
    pytest.importorskip(
        "duckdb"
    )  # the lake's reader (absent from the newest-torch venv: not torch's)
    from lake_sql import sql

    from recompprof._history.export import export

    past = 11 - (BOUNDED_VARIANTS - 1)
    lake = tmp_path / "lake"
    export([raised_instances.trace_dir], str(lake))
    rows = sql(
        lake,
        "SELECT steady_state_recompile, steady_state, COUNT(*) FROM compiles "
        "WHERE frame_name LIKE 'instances_raised_%' AND counts_as_recompile GROUP BY ALL ORDER BY ALL",
    )
    assert rows == [(False, False, BOUNDED_VARIANTS - 1), (None, None, past)]


def test_a_module_rebuilt_every_call_is_no_bounded_set_of_instances(
    raised_instances: Recorded,
) -> None:
    """A model rebuilt and compiled every call with a new ``layer_idx`` (limit raised): its instances do
    not stay, so live they count toward the frame's bound as one growing change and turn steady past
    it, as torch keeps compiling in the continuation; ingested (no instance named) they are unknown there."""
    truth = json.loads((raised_instances.where / "truth.json").read_text())["rebuilt"]
    assert int(truth["after"]) > 0
    verdicts = [
        e.steady_state for e in _recompiles(list(read_run(raised_instances.run_dir)), "rebuilt")
    ]
    assert len(verdicts) == 19
    assert not any(verdicts[: BOUNDED_VARIANTS - 1]) and all(verdicts[BOUNDED_VARIANTS:])
    trace = [e for per_file in read_trace(raised_instances.trace_dir).events for e in per_file]
    ingested = _recompiles(trace, "rebuilt")
    assert not any(e.steady_state for e in ingested)
    assert all(e.steady_state_unknown for e in ingested[BOUNDED_VARIANTS:])


class _Block(torch.nn.Module):
    """A regionally compiled block: one graph per ``layer_idx`` (torch keeps a module int constant)."""

    def __init__(self, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + self.layer_idx


def _regional_run(mode: str, run_dir: Path, blocks: int = 9, steps: int = 4) -> list[Compile]:
    """``blocks`` blocks compiled one by one (limit raised to 16), called ``steps`` times in ``mode``."""
    torch._dynamo.reset()
    model = [_Block(i) for i in range(blocks)]
    for block in model:
        block.compile(backend="eager")
    with (
        torch.no_grad(),
        torch._dynamo.config.patch(recompile_limit=16),
        recompprof.attach(mode=mode, run_dir=run_dir),  # type: ignore[arg-type]
    ):
        for _ in range(steps):
            h = torch.randn(3, 4)
            for block in model:
                h = block(h)
    return [e for e in read_run(run_dir) if isinstance(e, Compile) and e.is_recompile]


@pytest.mark.parametrize("blocks", [9, 12])
def test_profile_and_monitor_give_regional_blocks_the_same_verdicts(
    tmp_path: Path, blocks: int
) -> None:
    """Nine or twelve regionally compiled blocks with a ``layer_idx`` (the job's limit 16), run in monitor
    and in profile mode: each compile has the same verdict in both (none steady state), and profile mode's
    returns to a parked block (its limit of 1 meets one at every block; it parks as many as the job's
    cache holds, so past 8 blocks too none is retraced), judged per instance as monitor's compiles are
    and compiling no variant, are no steady state either, however many steps come."""
    monitor = _regional_run("monitor", tmp_path / "monitor", blocks)
    profile = _regional_run("profile", tmp_path / "profile", blocks)
    compiled = [e for e in profile if e.duration > 0]
    reused = [e for e in profile if e.duration == 0]

    def verdicts(events: list[Compile]) -> dict[str, tuple[bool, str | None, str, str]]:
        return {
            e.compile_id: (
                e.steady_state,
                e.steady_state_unknown,
                _explaining(e).category,
                _explaining(e).subject,
            )
            for e in events
        }

    assert len(monitor) == blocks - 1 and verdicts(compiled) == verdicts(monitor)
    assert not any(e.steady_state for e in monitor)
    assert len(reused) >= 3 * blocks
    assert {
        (e.steady_state, e.steady_state_unknown, _explaining(e).category, _explaining(e).subject)
        for e in reused
    } == {(False, None, "module_attribute", "L['self'].layer_idx")}


class _Config:
    """A plain object of settings read by a compiled function (its attribute: no module's)."""

    scale = 1


_CONFIG = _Config()


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * _CONFIG.scale


def test_profile_reuse_classifies_its_subject_as_monitor_does(tmp_path: Path) -> None:
    """A global object's attribute cycling through three values, in monitor and in profile mode: profile
    mode's returns to a parked variant look the subject up in the call that runs it, as monitor's compiles
    do, so their reason is the same change (``global``, not ``other``: a holder the text cannot tell)."""
    found = {}
    for mode in ("monitor", "profile"):
        torch._dynamo.reset()
        compiled = torch.compile(_scaled, backend="eager")
        with recompprof.attach(mode=mode, run_dir=tmp_path / mode):  # type: ignore[arg-type]
            for i in range(6):
                _CONFIG.scale = i % 3 + 1
                compiled(torch.randn(2))
        found[mode] = [
            (e.duration > 0, _explaining(e).category, _explaining(e).subject, e.steady_state)
            for e in read_run(tmp_path / mode)
            if isinstance(e, Compile) and e.is_recompile
        ]
    subject = "G['_CONFIG'].scale"
    assert set(found["monitor"]) == {(True, "global", subject, False)}
    assert len(found["profile"]) == 5
    assert set(found["profile"]) == {
        (True, "global", subject, False),
        (False, "global", subject, False),
    }
