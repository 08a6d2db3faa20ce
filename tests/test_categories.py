"""Every recompile cause, through attach(): the right count, frame and category for each scenario."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from scenarios import SCENARIOS, eager

import recompprof
from recompprof._model.events import Compile, GraphBreak
from recompprof._torch.versions import torch_info

pytestmark = pytest.mark.torch_compat


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_recorded_with_count_frame_and_category(name: str, tmp_path: Path) -> None:
    """Each real recompile scenario yields its recompile count on its frame, explained by its category and subject."""
    scenario = SCENARIOS[name]
    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path) as session:
        scenario.run(eager)
    compiles = [e for e in session.recent_events() if isinstance(e, Compile) and not e.backward]
    mine = [c for c in compiles if c.frame.name.endswith(scenario.frame)]
    recompiles = [c for c in mine if c.is_recompile]
    older = scenario.on(
        torch_info().major_minor
    )  # older torch reports less: what it yields there, and why
    expected = older.recompiles if older and older.recompiles is not None else scenario.recompiles
    assert len(recompiles) == expected, [c.frame for c in compiles]
    explained = [next((r for r in c.reasons if r.explains_change), None) for c in recompiles]
    if older:
        assert {r.category if r else None for r in explained} <= {older.category}, older.why
        if older.category != scenario.category:
            return
    else:
        assert {r.category for r in explained if r} == {scenario.category} and None not in explained
    subject = older.subject if older and older.subject is not None else scenario.subject
    if subject:
        assert any(r is not None and r.subject == subject for r in explained)


def test_compile_failure_recorded_with_error_type(tmp_path: Path) -> None:
    """A backend that raises is recorded as a failed compile with its exception type, and the exception still reaches the user."""

    def exploding_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> None:
        raise RuntimeError("backend exploded")

    def fails(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    with (
        recompprof.attach(run_dir=tmp_path) as session,
        pytest.raises(Exception, match="backend exploded"),
    ):
        torch.compile(fails, backend=exploding_backend)(torch.ones(2))
    failed = [
        e for e in session.recent_events() if isinstance(e, Compile) and e.outcome == "failed"
    ]
    assert len(failed) == 1 and failed[0].frame.name == "fails"
    assert failed[0].fail_type == "BackendCompilerFailed"
    assert session.snapshot().compile_failures["BackendCompilerFailed"] == 1


def test_graph_break_recorded_with_reason(tmp_path: Path) -> None:
    """A graph break inside a compiled function is recorded on its frame with torch's type, explanation, hints and the user's line."""

    def breaks(x: torch.Tensor) -> torch.Tensor:
        x = x + 1
        print("side effect")  # Dynamo cannot trace print: graph break
        return x * 2

    with recompprof.attach(run_dir=tmp_path) as session:
        torch.compile(breaks, backend="eager")(torch.ones(2))
    graph_breaks = [e for e in session.recent_events() if isinstance(e, GraphBreak)]
    assert len(graph_breaks) == 1 and graph_breaks[0].frame is not None
    gb = graph_breaks[0]
    assert gb.frame.name == "breaks"
    if (
        gb.explanation is not None
    ):  # torch >= 2.7 writes a graph-break type, an explanation and hints
        assert (
            gb.reason == "Failed to trace builtin operator"
            and "print" in gb.explanation
            and gb.hints
        )
    else:  # older torch: the exception's text
        assert "print" in gb.reason
    line = breaks.__code__.co_firstlineno + 2  # the print
    if torch_info().has("graph_break_trace"):
        assert gb.user_location == f"{__file__}:{line}"
    else:  # read from counters['graph_break'], which keep no location
        assert gb.user_location is None
    assert session.snapshot().graph_breaks == 1


def test_skipped_resume_frame_is_not_a_compile(tmp_path: Path) -> None:
    """A compiled optimizer step breaks the graph in torch's step hook; the resumed frame has nothing left to
    compile, so torch skips it (no cache entry: it runs eagerly). Its record is no compile: it adds to no frame's
    compile count, and its trace seconds are still compile time."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.resume_execution import ContinueExecutionCache

    from recompprof._model.counting import costs_seconds, counts_as_compile

    torch._dynamo.reset()
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)

    @torch.compile(backend="eager")
    def train_step() -> None:
        opt.step()

    with recompprof.attach(run_dir=tmp_path) as session:
        for _ in range(2):
            model(torch.ones(2, 4)).sum().backward()
            train_step()
            scheduler.step()
    resumed = {
        code.co_name: len(_debug_get_cache_entry_list(code))
        for codes in list(ContinueExecutionCache.cache.values.values())
        for code in codes.values()
    }
    skipped = {name for name, entries in resumed.items() if entries == 0 and "_in_wrapper_" in name}
    assert skipped, resumed  # torch installed nothing for the resumed hook frame
    compiles = [e for e in session.recent_events() if isinstance(e, Compile)]
    assert [
        e.frame.name for e in compiles if e.frame.name in skipped and counts_as_compile(e)
    ] == []
    [record] = [e for e in compiles if e.frame.name in skipped]
    assert not record.installed_code and costs_seconds(record)
    counted = [e for e in compiles if counts_as_compile(e)]
    assert session.snapshot().compiles_total == len(counted) and all(
        e.installed_code for e in counted
    )


_OPTIMIZER_JOB = """
import sys
import torch
import recompprof

model = torch.nn.Linear(4, 4)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)


@torch.compile(backend="eager")
def train_step():
    opt.step()


with recompprof.attach(run_dir=sys.argv[1]):
    for _ in range(2):
        model(torch.ones(2, 4)).sum().backward()
        train_step()
        scheduler.step()
"""


@pytest.mark.workload
def test_skipped_frame_is_no_compile_in_ingest_too(tmp_path: Path) -> None:
    """The same job under attach() and TORCH_TRACE: the ingested trace marks the skipped resumed frame as
    having installed no code, as the live events do, and both count the same compiles."""
    import subprocess
    import sys

    from recorded_runs import clean_env

    from recompprof._analysis.trace.ingest import read_trace
    from recompprof._eventlog.reader import read_run
    from recompprof._model.counting import counts_as_compile

    script = tmp_path / "job.py"
    script.write_text(_OPTIMIZER_JOB)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run")],
        env=clean_env(TORCH_TRACE=str(tmp_path / "trace")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    live = [e for e in read_run(tmp_path / "run") if isinstance(e, Compile)]
    traced = [
        e
        for per_file in read_trace(tmp_path / "trace").events
        for e in per_file
        if isinstance(e, Compile)
    ]

    def skipped(events: list[Compile]) -> list[str]:
        return sorted(e.compile_id for e in events if not e.installed_code)

    assert skipped(live) == skipped(traced) and len(skipped(live)) == 1
    assert sorted(e.compile_id for e in live if counts_as_compile(e)) == sorted(
        e.compile_id for e in traced if counts_as_compile(e)
    )


def test_resolver_names_enum_members_and_modules_by_isinstance() -> None:
    """The live resolver reports what isinstance says, whatever a class is called: an enum member of a class not
    named like one, an nn.Module, a plain object (a KV cache), a plain value; nothing for what it cannot reach."""
    from scenarios import Reduction, _KVCache

    from recompprof._torch.sources import type_name

    f_locals = {
        "reduction": Reduction.SUM,
        "kwargs": {"past_key_values": _KVCache()},
        "self": torch.nn.Linear(1, 1),
    }
    assert type_name("L['reduction']", f_locals, {}) == "Reduction:enum"
    assert type_name("L['self']", f_locals, {}) == "Linear:module"
    assert type_name("L['kwargs']['past_key_values']", f_locals, {}) == "_KVCache"
    assert type_name("L['kwargs']['past_key_values'].is_updated[0]", f_locals, {}) == "bool"
    assert type_name("L['kwargs']['missing']", f_locals, {}) is None


def test_flag_of_a_real_encoder_decoder_cache_is_a_constant(tmp_path: Path) -> None:
    """transformers' EncoderDecoderCache (T5/BART generate) is no nn.Module: its per-layer is_updated flag flipping
    from prefill to decode is a python_constant on that object, resolved live, not a module attribute."""
    pytest.importorskip(
        "transformers",
        reason="the transformers extra is not installed (pip install recompprof[transformers])",
    )
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    def cross_attention(x: torch.Tensor, **kwargs: object) -> torch.Tensor:
        cache = kwargs["past_key_values"]
        return x * 2 if cache.is_updated[0] else x + 1  # type: ignore[attr-defined]  # reuse cross-attention states once computed

    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    cache.is_updated[0] = False
    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path) as session:
        compiled = torch.compile(cross_attention, backend="eager")
        compiled(torch.ones(2), past_key_values=cache)
        cache.is_updated[0] = True
        compiled(torch.ones(2), past_key_values=cache)
    [recompile] = [e for e in session.recent_events() if isinstance(e, Compile) and e.is_recompile]
    [explaining] = [r for r in recompile.reasons if r.explains_change]
    assert (explaining.category, explaining.subject) == (
        "python_constant",
        "L['kwargs']['past_key_values'].is_updated[0]",
    )


def test_profile_mode_hides_a_backend_mismatch(tmp_path: Path) -> None:
    """A new backend callable per torch.compile recompiles for backend_mismatch in monitor mode; profile mode forces
    its one observer backend (where torch has force_backend), which removes that guard: no recompile is seen
    (docs/profile-mode.md says so). Where it keeps the job's backend, the recompile is still there."""
    scenario = SCENARIOS["backend_mismatch"]
    seen = {}
    for mode in ("monitor", "profile"):
        torch._dynamo.reset()
        with recompprof.attach(mode=mode, run_dir=tmp_path / mode) as session:
            scenario.run(eager)
        seen[mode] = [
            r.category
            for e in session.recent_events()
            if isinstance(e, Compile) and e.frame.name == scenario.frame and e.is_recompile
            for r in e.reasons
            if r.explains_change
        ]
        forced = bool(session.signals.get("profile_backend"))
    assert seen["monitor"] == ["backend_mismatch"]
    assert seen["profile"] == ([] if forced else ["backend_mismatch"])
    assert forced == torch_info().has("force_backend")
