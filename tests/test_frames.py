"""Frames named as the user knows them, one identity per compiled code object and instance class, on every path.

Real compiled code whose compiled frame is not the function the user wrote: torch's own hook around
``Optimizer.step`` (``def wrapper(*args, **kwargs)``), a ``functools.wraps`` decorator shared by two
module classes, transformers 5's stacked decorators on ``Qwen2MoeModel.forward``, profile mode's
re-enabled variants, and a live run against ``recompprof ingest`` of its own ``TORCH_TRACE``.
"""

from __future__ import annotations

import inspect
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from agreement import record
from needs import starts
from recorded_runs import cli
from workloads.named_frames import Decoder, Encoder  # a decorator shared by two module classes

import recompprof
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_file, read_run
from recompprof._model.events import Compile, Event, Frame, GraphBreak
from recompprof._torch.versions import torch_info
from recompprof.testing import capture_events

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "named_frames.py"


def _forward_compiles(events: list[Event]) -> list[Compile]:
    return [e for e in events if isinstance(e, Compile) and not e.backward]


def _user_code(function: Any) -> tuple[str, int]:
    code = inspect.unwrap(function).__code__
    return code.co_filename, code.co_firstlineno


def _distinct(frames: set[Frame]) -> None:
    """Two identities never share a label, and one identity is always the same frame."""
    assert len({f.key for f in frames}) == len({f.label for f in frames}) == len(frames), sorted(
        f.label for f in frames
    )


@pytest.mark.parametrize("optimizer", [torch.optim.Adam, torch.optim.AdamW])
def test_compiled_optimizer_step_named_by_the_instance_class(
    optimizer: type[torch.optim.Optimizer],
) -> None:
    """A compiled ``opt.step`` runs torch's ``def wrapper(*args, **kwargs)`` hook, then the step itself: both
    frames are ``<InstanceClass>.step`` (``AdamW.step`` also where AdamW inherits Adam's step) at the line
    of the step as written, and they stay two frames, with two keys and two labels."""
    model = torch.nn.Linear(4, 4)
    opt = optimizer(model.parameters(), lr=0.01)
    step = torch.compile(opt.step, backend="eager")
    with capture_events() as events:
        for lr in (0.01, 0.01, 0.02):
            model(torch.randn(2, 4)).sum().backward()
            for group in opt.param_groups:
                group["lr"] = lr
            step()
            opt.zero_grad()
    frames = {
        e.frame for e in _forward_compiles(events) if "torch_dynamo_resume" not in e.frame.name
    }
    cls = optimizer.__name__
    assert {f.name for f in frames} == {f"{cls}.step"}, sorted(f.label for f in frames)
    assert {f.owner for f in frames} == {cls}
    assert {(f.file, f.line) for f in frames} == {_user_code(optimizer.step)}
    hook = type(opt).step.__code__  # torch's hook, installed on the instance's class
    assert (hook.co_filename, hook.co_firstlineno) in {(f.code_file, f.code_line) for f in frames}
    assert len(frames) >= 2
    _distinct(frames)


def test_wraps_decorator_shared_by_two_module_classes_is_two_frames() -> None:
    """One ``def wrapper(*args, **kwargs)`` code object decorating two classes' ``forward`` is two frames, each
    named by its class at its own ``forward``, one code object (the decorator's) behind both; the report keeps
    them apart."""
    encoder, decoder = (
        torch.compile(Encoder(), backend="eager"),
        torch.compile(Decoder(), backend="eager"),
    )
    with capture_events() as events:
        for rows in (2, 3):
            encoder(torch.randn(rows, 4))
            decoder(torch.randn(rows, 4))
    compiles = _forward_compiles(events)
    wrapper = Encoder.forward.__code__
    named = {(e.frame.name, e.frame.file, e.frame.line) for e in compiles}
    assert named == {
        ("Encoder.forward", *_user_code(Encoder.forward)),
        ("Decoder.forward", *_user_code(Decoder.forward)),
    }
    assert {(e.frame.code_file, e.frame.code_line) for e in compiles} == {
        (wrapper.co_filename, wrapper.co_firstlineno)
    }
    _distinct({e.frame for e in compiles})
    report = build_report(events)
    assert sorted((f.name, f.compiles) for f in report.frames.values()) == [
        ("Decoder.forward", 2),
        ("Encoder.forward", 2),
    ]


def test_stacked_decorators_each_code_object_its_own_frame() -> None:
    """transformers 5 stacks decorators on ``Qwen2MoeModel.forward`` (two; 5.24 adds ``deprecate_kwarg``): with a
    graph break below it, each wrapper and the forward is a compiled code object, all named
    ``Qwen2MoeModel.forward`` at the forward's line, never ``wrapper``; the report rows of each code object hold
    the cache entries torch holds for it, and no label names two identities."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.Qwen2MoeForCausalLM(
        transformers.Qwen2MoeConfig(
            vocab_size=96,
            hidden_size=32,
            intermediate_size=64,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_experts=4,
            num_experts_per_tok=2,
            max_position_embeddings=64,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )
    )
    # A graph break inside the base model makes Dynamo compile each function on the way down as its own frame.
    model.model.layers[0].register_forward_pre_hook(
        lambda module, args: torch._dynamo.graph_break()
    )
    model.compile(backend="aot_eager")
    with capture_events() as events:
        for length in (3, 5):
            ids = torch.randint(3, 96, (2, length))
            model(input_ids=ids, labels=ids).loss.backward()
    compiles = _forward_compiles(events)
    assert not [e.frame.label for e in compiles if "wrapper" in e.frame.name]
    chains = {}
    for cls in (transformers.Qwen2MoeModel, transformers.Qwen2MoeForCausalLM):
        chain, function = [], cls.forward
        while function is not None:
            chain.append(function.__code__)
            function = getattr(function, "__wrapped__", None)
        chains[cls.__name__] = chain
        # transformers 5.24's deprecate_kwarg puts one more wrapper in both chains (and on create_causal_mask): one
        # code object the two classes and the mask functions share, so a frame belongs to a chain by code and class.
        frames = {
            e.frame
            for e in compiles
            if (e.frame.code_file, e.frame.code_line)
            in {(c.co_filename, c.co_firstlineno) for c in chain}
            and e.frame.owner == cls.__name__
        }
        assert {(f.name, f.file, f.line) for f in frames} == {
            (f"{cls.__name__}.forward", *_user_code(cls.forward))
        }
        assert len(frames) == len(chain)
        _distinct(frames)
    assert not [
        e.frame.label for e in compiles if e.frame.name == "wrapped_func"
    ]  # 5.24: create_causal_mask's too
    report = build_report(events)
    entries = torch._C._dynamo.eval_frame._debug_get_cache_entry_list
    code_of = {e.frame.key: (e.frame.code_file, e.frame.code_line) for e in compiles}
    held, rows = {}, Counter[tuple[str | None, int | None]]()
    for key, row in report.frames.items():
        rows[code_of.get(key, (None, None))] += row.compiles
    for code in {code for chain in chains.values() for code in chain}:
        if entries(code):  # a frame that ran eagerly after its compile holds none
            held[(code.co_filename, code.co_firstlineno)] = len(entries(code))
    # Each row is one code object seen through one class; the rows of one code object hold its cache entries.
    assert len(held) >= 2 and {where: rows[where] for where in held} == held
    # One code object wrapping two functions for one owner is one cache, so one identity under each call's own name
    # (5.24: deprecate_kwarg's wrapper around create_causal_mask and create_sliding_window_causal_mask).
    frames = {e.frame for e in compiles}
    assert all(
        len({f.key for f in frames if f.label == label}) == 1 for label in {f.label for f in frames}
    )


class _Tagged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * self.scale + len(tag)


@pytest.mark.skipif(
    not torch_info().has("profile_evict"), reason=torch_info().why_off("profile_evict")
)
def test_profile_mode_names_a_frame_one_way(tmp_path: Path) -> None:
    """Profile mode re-enables a parked variant without a compile: that recompile is the same frame (name and
    identity) as the compiles, never the bare code name."""
    model = torch.compile(_Tagged(), backend="eager")
    with recompprof.attach(mode="profile", run_dir=tmp_path) as session:
        for tag in ["a", "bb"] * 3:
            model(torch.ones(2), tag)
    assert session.event_log_path is not None
    compiles = _forward_compiles(list(read_file(session.event_log_path)))
    assert any(e.duration == 0.0 and e.is_recompile for e in compiles), "no variant was re-enabled"
    assert {(e.frame.name, e.frame.key) for e in compiles} == {
        ("_Tagged.forward", compiles[0].frame.key)
    }
    assert compiles[0].frame.owner == "_Tagged"


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    run = record(
        WORKLOAD, ["optimizer", "decorated", "llama"], tmp_path_factory.mktemp("named"), timeout=600
    )
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    return run


def test_live_and_ingest_give_each_compile_one_identity(recorded: Any) -> None:
    """Live capture and ingest of the same run's TORCH_TRACE give every compile the same frame identity, and
    (where the trace names the decorated method) the same display name; graph breaks land on the same frames."""
    live = list(read_run(recorded.run_dir))
    traced = [e for per_file in read_trace(recorded.trace_dir).events for e in per_file]
    frames = [
        {e.compile_id: e.frame for e in _forward_compiles(events)} for events in (live, traced)
    ]
    assert frames[0].keys() == frames[1].keys() and len(frames[0]) >= 8
    assert {cid: f.key for cid, f in frames[0].items()} == {
        cid: f.key for cid, f in frames[1].items()
    }
    names = {f.name for f in frames[0].values()}
    assert {
        "AdamW.step",
        "Encoder.forward",
        "Decoder.forward",
        "Block.forward",
        "LlamaForCausalLM.forward",
    } <= names, names
    assert not {n for n in names if n.endswith("wrapper") or n == "Adam.step"}, names
    # The trace names no decorator's target: ingest finds it in the class's source where a decorator is written,
    # so only torch's hook around Optimizer.step (installed at run time, written on no method) is named otherwise.
    hook = inspect.getsourcefile(torch.optim.Optimizer)
    named_otherwise = {cid for cid, f in frames[0].items() if frames[1][cid] != f}
    assert {frames[0][cid].code_file for cid in named_otherwise} <= {hook}
    assert {f.owner for cid, f in frames[0].items() if cid not in named_otherwise} >= {
        "Encoder",
        "Decoder",
        "Block",
        "LlamaForCausalLM",
        "AdamW",
    }
    breaks = [
        Counter(
            (e.compile_id, e.frame.key if e.frame else None)
            for e in events
            if isinstance(e, GraphBreak)
        )
        for events in (live, traced)
    ]
    assert breaks[0] == breaks[1] and breaks[0]


def test_diff_of_a_run_against_its_own_trace_finds_nothing(recorded: Any) -> None:
    """``recompprof diff <live run> <its TORCH_TRACE>`` matches every frame and reports no change (exit 0)."""
    done = cli("diff", str(recorded.run_dir), str(recorded.trace_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no regressions (0 improvement(s))" in done.stdout and "Frame" not in done.stdout, (
        done.stdout
    )


def test_each_compile_is_named_once_and_each_event_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile's frame is decided once for all its events (start, graph breaks, record), and its reasons
    carry the wrapped function's parameter from the start: no event is rewritten after it is built."""
    from recompprof._torch import frames as torch_frames

    named: Counter[str | None] = Counter()
    resolve = torch_frames.resolve

    def counted(name: str, file: str, line: int, ctx: Any) -> Any:
        named[ctx.compile_id if ctx is not None else None] += 1
        return resolve(name, file, line, ctx)

    monkeypatch.setattr(torch_frames, "resolve", counted)
    rewritten: list[object] = []
    model_copy = Compile.model_copy

    def copied(self: Compile, *, update: Any = None, deep: bool = False) -> Compile:
        if update and {"reasons", "frame"} & set(update):
            rewritten.append(update)
        return model_copy(self, update=update, deep=deep)

    monkeypatch.setattr(Compile, "model_copy", copied)

    def logged(func: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        wrapper.__wrapped__ = func  # type: ignore[attr-defined]
        return wrapper

    @logged
    def step(sample: torch.Tensor) -> torch.Tensor:
        y = sample * 2
        torch._dynamo.graph_break()
        return y + 1

    compiled = torch.compile(step, backend="eager", dynamic=False)
    with recompprof.attach(run_dir=tmp_path / "run") as session:
        for length in (2, 3, 4):
            compiled(torch.ones(length))
    events = session.recent_events()
    compiles = _forward_compiles(events)
    assert len({c.compile_id for c in compiles}) == len(compiles) >= 6
    assert set(named) == {c.compile_id for c in compiles}
    assert all(n == 1 for n in named.values()), named
    breaks = [e for e in events if isinstance(e, GraphBreak)]
    assert breaks and all(
        b.frame == next(c.frame for c in compiles if c.compile_id == b.compile_id) for b in breaks
    )
    bound = [r for c in compiles for r in c.reasons if r.parameter is not None]
    assert bound and {r.parameter for r in bound} == {"L['sample']"}, bound
    assert not rewritten, rewritten
