"""Profile mode's mechanism on real torch.compile (CPU): every guard failure is seen while each frame stays at the limit."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from types import CodeType
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from recompprof._torch.profile import mode as profile_module  # noqa: E402
from recompprof._torch.profile.mode import MECHANISM_EVICT, MECHANISM_UNLIMITED, ProfileMode  # noqa: E402
from recompprof._torch.versions import torch_info  # noqa: E402

INFO = torch_info()
LIMIT, ACCUMULATED = INFO.limit_config_name, INFO.accumulated_limit_config_name
# The mechanism under test needs internals newer than the oldest supported torch; below their gate
# these tests do not apply, and tests/test_versions.py checks the fallback that runs instead.
needs_force_backend = pytest.mark.skipif(
    not INFO.has("force_backend"), reason=INFO.why_off("force_backend")
)
needs_evict = pytest.mark.skipif(
    not INFO.has("profile_evict"), reason=INFO.why_off("profile_evict")
)
pytestmark = [pytest.mark.torch_compat, needs_force_backend]


def _debug_get_cache_entry_list(code: CodeType) -> list[Any]:
    return torch._C._dynamo.eval_frame._debug_get_cache_entry_list(code)  # type: ignore[no-any-return]


Failure = tuple[CodeType, "str | None", list[str]]


class Recorder:
    """Collects on_guard_failure calls."""

    def __init__(self) -> None:
        self.calls: list[Failure] = []

    def __call__(self, code: CodeType, compile_id: str | None, reasons: list[str]) -> None:
        self.calls.append((code, compile_id, list(reasons)))

    def for_code(self, name: str) -> list[Failure]:
        return [call for call in self.calls if call[0].co_name == name]


@pytest.fixture()
def modes() -> Iterator[list[ProfileMode]]:
    """Profile modes a test creates; each is uninstalled afterwards even if the test failed."""
    created: list[ProfileMode] = []
    yield created
    for mode in created:
        mode.uninstall()


def make(
    modes: list[ProfileMode],
    limit: int | None,
    recorder: Recorder | None = None,
    reuse: Recorder | None = None,
) -> ProfileMode:
    mode = ProfileMode(limit, recorder)
    mode.on_reuse = reuse  # set: evicted entries are parked and re-enabled
    modes.append(mode)
    mode.install()
    return mode


def live_ours(code: CodeType, mode: ProfileMode) -> int:
    # torch 2.6 cache entries do not name their backend; every entry of these tests is compiled under the mode
    return sum(
        1
        for entry in _debug_get_cache_entry_list(code)
        if getattr(entry, "backend", mode.observer) is mode.observer and entry.code is not None
    )


def code_of(fn: Any) -> CodeType:
    return fn._torchdynamo_orig_callable.__code__  # type: ignore[no-any-return]


@needs_evict
def test_every_string_change_seen_at_limit_one(modes: list[ProfileMode]) -> None:
    """A string argument taking 10 values is 9 guard failures at recompile_limit=1, each reported once, in torch's format."""

    @torch.compile(backend="eager")
    def scale(x: Any, tag: str) -> Any:
        return x * len(tag)

    recorder = Recorder()
    mode = make(modes, 1, recorder)
    x = torch.ones(3)
    for i in range(10):
        assert torch.equal(scale(x, "a" * (i + 1)), x * (i + 1))
    calls = recorder.for_code("scale")
    assert len(calls) == 9
    for i, (_code, compile_id, reasons) in enumerate(calls):
        assert len(reasons) == 1
        assert reasons[0].startswith(f"0/{i}: ")
        assert f"tag == '{'a' * (i + 1)}'" in reasons[0]
        assert compile_id == f"0/{i + 1}"
    assert getattr(torch._dynamo.config, LIMIT) == 1
    assert live_ours(code_of(scale), mode) == 1
    assert mode.stats["traces"] == 10
    assert mode.stats["evictions"] == 9
    assert not torch._dynamo.utils.guard_failures.get(code_of(scale))


@needs_evict
def test_alternating_inputs_every_switch_seen(modes: list[ProfileMode]) -> None:
    """Without parking (no on_reuse), inputs alternating A,B,A,B at limit 1 make every switch a reported guard failure, at one trace per switch."""

    @torch.compile(backend="eager")
    def pick(x: Any, tag: str) -> Any:
        return x + (1 if tag == "A" else 2)

    recorder = Recorder()
    mode = make(modes, 1, recorder)
    x = torch.zeros(2)
    tags = ["A", "B"] * 4
    for tag in tags:
        assert torch.equal(pick(x, tag), x + (1 if tag == "A" else 2))
    assert len(recorder.for_code("pick")) == len(tags) - 1
    assert mode.stats["traces"] == len(tags)
    assert live_ours(code_of(pick), mode) == 1


@needs_evict
def test_limit_two_keeps_two_entries_and_sees_each_miss(modes: list[ProfileMode]) -> None:
    """At recompile_limit=2 a frame keeps two live entries, alternation between them hits the cache, and each miss reports both entries' failures."""

    @torch.compile(backend="eager")
    def scale(x: Any, tag: str) -> Any:
        return x * len(tag)

    recorder = Recorder()
    mode = make(modes, 2, recorder)
    x = torch.ones(2)
    for tag in ["a", "bb", "a", "bb", "ccc", "dddd"]:
        scale(x, tag)
    calls = recorder.for_code("scale")
    assert [len(reasons) for _, _, reasons in calls] == [1, 2, 2]
    assert live_ours(code_of(scale), mode) == 2
    assert mode.stats["traces"] == 4


class Branchy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.tag = "t"

    def forward(self, x: Any) -> Any:
        h = self.lin(x)
        torch._dynamo.graph_break()
        return h * len(self.tag)


@needs_evict
def test_graph_break_frames_each_change_seen(modes: list[ProfileMode]) -> None:
    """A change read after a graph break is seen in the resume function on every call, and no frame exceeds the limit."""
    model = Branchy()
    compiled = torch.compile(model, backend="eager")
    recorder = Recorder()
    mode = make(modes, 1, recorder)
    x = torch.ones(2, 4)
    for i in range(6):
        model.tag = "t" * (i + 1)
        compiled(x)
    resumed = [call for call in recorder.calls if "tag" in call[2][0]]
    assert len(resumed) == 5
    assert all(call[0].co_name.startswith("torch_dynamo_resume_in_forward") for call in resumed)
    for frame in mode.stats["frames"].values():
        assert frame["peak_live"] <= 1


class Trainable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 1)
        self.use_relu = False

    def forward(self, x: Any) -> Any:
        h = self.fc(x)
        return torch.relu(h) if self.use_relu else h


@needs_evict
def test_training_step_forward_backward(modes: list[ProfileMode]) -> None:
    """Forward+backward+optimizer steps train under the observer while a flag flipping every step is reported each time."""
    torch.manual_seed(0)
    model = Trainable()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="aot_eager")
    recorder = Recorder()
    mode = make(modes, 1, recorder)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    losses = []
    for step in range(6):
        model.use_relu = step % 2 == 1
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        assert model.fc.weight.grad is not None
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert len(recorder.for_code("forward")) == 5
    assert all("use_relu" in call[2][0] for call in recorder.for_code("forward"))
    assert losses[-1] < losses[0]
    assert mode.stats["graphs"] == 6


@needs_evict
def test_uninstall_restores_torch(modes: list[ProfileMode]) -> None:
    """Uninstall restores config values, the stance and the callback factory, and leaves frames it never compiled untouched."""
    import torch._dynamo.eval_frame as eval_frame

    @torch.compile(backend="eager")
    def untouched(x: Any) -> Any:
        return x - 1

    untouched(torch.ones(2))
    before_entries = [
        (str(e.compile_id), e.backend, e.code)
        for e in _debug_get_cache_entry_list(code_of(untouched))
    ]
    config = torch._dynamo.config
    before = (getattr(config, LIMIT), getattr(config, ACCUMULATED))
    stance, factory = eval_frame._stance, eval_frame._create_wrapped_callback
    mode = make(modes, 1)
    assert (getattr(config, LIMIT), getattr(config, ACCUMULATED)) == (1, sys.maxsize)
    assert eval_frame._stance.backend is mode.observer
    mode.uninstall()
    assert (getattr(config, LIMIT), getattr(config, ACCUMULATED)) == before
    assert eval_frame._stance is stance
    assert eval_frame._create_wrapped_callback is factory
    after_entries = [
        (str(e.compile_id), e.backend, e.code)
        for e in _debug_get_cache_entry_list(code_of(untouched))
    ]
    assert after_entries == before_entries
    mode.uninstall()  # idempotent


@needs_evict
def test_frames_compiled_before_attach_get_their_budget_back(modes: list[ProfileMode]) -> None:
    """A frame the job compiled before attach is not cut off by the session limit, and after detach it recompiles on the job's backend with a fresh budget."""

    @torch.compile(backend="eager")
    def scale(x: Any, tag: str) -> Any:
        return x * len(tag)

    x = torch.ones(2)
    scale(x, "a")
    job_backend = _debug_get_cache_entry_list(code_of(scale))[0].backend
    recorder = Recorder()
    mode = make(modes, 1, recorder)
    for tag in ["a", "bb", "ccc"]:
        scale(x, tag)
    assert len(recorder.for_code("scale")) == 2
    mode.uninstall()
    assert _debug_get_cache_entry_list(code_of(scale)) == []
    for tag in ["a", "bb"]:
        scale(x, tag)
    entries = _debug_get_cache_entry_list(code_of(scale))
    assert [e.backend for e in entries] == [job_backend, job_backend]
    assert [e.compile_id.frame_compile_id for e in entries] == [1, 0]


@needs_evict  # the per-frame stats come from the wrapped frame callback, which needs the same internals
def test_unlimited_when_limit_is_none(modes: list[ProfileMode]) -> None:
    """recompile_limit=None lifts both limits, keeps every entry and leaves the reasons to torch's guard_failures."""

    @torch.compile(backend="eager")
    def scale(x: Any, tag: str) -> Any:
        return x * len(tag)

    recorder = Recorder()
    mode = make(modes, None, recorder)
    assert mode.mechanism == MECHANISM_UNLIMITED
    assert getattr(torch._dynamo.config, LIMIT) == sys.maxsize
    x = torch.ones(2)
    for i in range(10):
        scale(x, "a" * (i + 1))
    assert recorder.calls == []
    assert live_ours(code_of(scale), mode) == 10
    reasons = torch._dynamo.utils.guard_failures[code_of(scale)]
    assert len(reasons) == sum(range(1, 10))  # torch's O(N^2): every entry fails on every recompile
    assert mode.stats["frames"][next(iter(mode.stats["frames"]))]["peak_live"] == 10


def test_falls_back_to_unlimited_when_internals_missing(
    modes: list[ProfileMode], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the internals eviction needs, install logs why and lifts the limit instead."""
    monkeypatch.setattr(profile_module, "evict_mechanism_missing", lambda: "missing torch.thing")
    with caplog.at_level(logging.WARNING, logger="recompprof"):
        mode = make(modes, 1)
    assert mode.mechanism == MECHANISM_UNLIMITED
    assert mode.why_off == "missing torch.thing"
    assert getattr(torch._dynamo.config, LIMIT) == sys.maxsize
    assert "falls back to lifting the recompile limit" in caplog.text


@needs_evict
def test_is_own_reason_marks_profile_artifacts(modes: list[ProfileMode]) -> None:
    """Reasons from evicted or retired entries and from the forced backend are profile mode's own; real changes are not."""
    mode = make(modes, 1)
    assert mode.mechanism == MECHANISM_EVICT
    assert mode.is_own_reason(
        "0/1: Cache line evicted by recompprof profile mode (recompile_limit=1)"
    )
    assert mode.is_own_reason("0/0: Cache line retired by recompprof profile mode at detach")
    assert mode.is_own_reason(
        "0/0: BACKEND_MATCH failure: ... New backend: RecompprofObserver (id=0x1)."
    )
    assert not mode.is_own_reason("0/0: tag == 'a'")
    assert not mode.is_own_reason("0/0: Cache line invalidated because L['m'] got deallocated")


@needs_evict
def test_entry_invalidated_by_torch_does_not_cut_the_frame_off(modes: list[ProfileMode]) -> None:
    """An observer entry torch itself invalidates (a guarded object died) neither counts toward the limit nor hides the next change."""
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    @torch.compile(backend="eager")
    def scale(x: Any, tag: str) -> Any:
        return x * len(tag)

    recorder = Recorder()
    mode = make(modes, 1, recorder)
    x = torch.ones(2)
    scale(x, "a")
    scale(x, "bb")
    (entry,) = [e for e in _debug_get_cache_entry_list(code_of(scale)) if e.code is not None]
    entry.guard_manager.extra_state.invalidate(
        entry, DeletedGuardManagerWrapper("Cache line invalidated because X got deallocated")
    )
    for tag in ["ccc", "dddd", "eeeee"]:
        assert torch.equal(scale(x, tag), x * len(tag))
    assert len(recorder.for_code("scale")) == 3  # bb, then dddd and eeeee; ccc met no live entry
    assert live_ours(code_of(scale), mode) == 1
    assert mode.stats["traces"] == 5


def _alternate(fn: Any, tags: list[str]) -> None:
    x = torch.zeros(2)
    for tag in tags:
        assert torch.equal(fn(x, tag), x + (1 if tag == "A" else 2))


@needs_evict
def test_parked_variants_come_back_without_a_retrace(modes: list[ProfileMode]) -> None:
    """With on_reuse set, A,B,A,B at limit 1 reports all 7 switches (1 compile, 6 re-enabled variants) while tracing only as often as the unlimited observer."""

    def pick(x: Any, tag: str) -> Any:
        return x + (1 if tag == "A" else 2)

    tags = ["A", "B"] * 4
    unlimited = make(modes, None)
    compiled = torch.compile(pick, backend="eager")
    _alternate(compiled, tags)
    unlimited_traces = unlimited.stats["traces"]
    unlimited.uninstall()
    torch._dynamo.reset()

    recorder, reuse = Recorder(), Recorder()
    mode = make(modes, 1, recorder, reuse)
    assert mode.parking and mode.why_no_parking == ""
    compiled = torch.compile(pick, backend="eager")
    _alternate(compiled, tags)
    compiled_switch = recorder.for_code("pick")
    reused = reuse.for_code("pick")
    assert len(compiled_switch) + len(reused) == len(tags) - 1
    assert [cid for _, cid, _ in compiled_switch] == ["0/1"]
    # each re-enabled switch names the variant that runs again and the live entry that failed
    assert [cid for _, cid, _ in reused] == ["0/0", "0/1"] * 3
    for (_, _, reasons), previous in zip(
        reused, tags[1:]
    ):  # the live entry that failed was the previous tag's
        assert len(reasons) == 1 and reasons[0].split("\n")[0].split("#")[0].rstrip().endswith(
            f"tag == '{previous}'"
        )
    assert mode.stats["traces"] == unlimited_traces == 2
    assert mode.stats["reenabled"] == 6 and mode.stats["evictions"] == 7
    assert live_ours(code_of(compiled), mode) == 1
    assert mode.stats["frames"][next(iter(mode.stats["frames"]))]["peak_live"] == 1


@needs_evict
def test_parked_flag_flips_while_training(modes: list[ProfileMode]) -> None:
    """Forward+backward+SGD with a flag flipping each step: all 5 flips reported, the forward frame traced twice, and the model still trains."""
    torch.manual_seed(0)
    model = Trainable()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="aot_eager")
    recorder, reuse = Recorder(), Recorder()
    mode = make(modes, 1, recorder, reuse)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    losses = []
    for step in range(6):
        model.use_relu = step % 2 == 1
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    flips = recorder.for_code("forward") + reuse.for_code("forward")
    assert len(flips) == 5
    assert all("use_relu" in reasons[0] for _, _, reasons in flips)
    assert len(reuse.for_code("forward")) == 4
    forward = next(v for k, v in mode.stats["frames"].items() if k.startswith("forward"))
    assert forward["traces"] == 2 and forward["reenabled"] == 4
    assert losses[-1] < losses[0]


@needs_evict
def test_parked_entry_whose_guarded_object_died_is_never_reenabled(
    modes: list[ProfileMode],
) -> None:
    """A parked entry ID-guarding a class is released when torch invalidates it on the class's death, so a later call retraces instead of running it."""
    import gc

    @torch.compile(backend="eager")
    def scaled(x: Any, cls: Any) -> Any:
        return x * cls.k

    def make_class(k: int) -> Any:
        return type("Scale", (), {"k": k})

    recorder, reuse = Recorder(), Recorder()
    mode = make(modes, 1, recorder, reuse)
    x = torch.ones(2)
    first, second = make_class(2), make_class(3)
    scaled(x, first)
    scaled(x, second)  # parks the entry compiled for `first`
    (parked,) = mode._parked[id(code_of(scaled))]
    assert not parked.released
    del first
    gc.collect()
    assert (
        parked.released
    )  # torch's finalizer reached the dead node through the parked guard manager
    assert parked.guard_manager.cache_entry is None and parked.guard_manager.extra_state is None
    for _ in range(3):  # new classes, possibly at the freed address
        assert torch.equal(scaled(x, make_class(2)), x * 2)
    assert mode.stats["reenabled"] == 0
    assert reuse.calls == []


@needs_evict
def test_detach_mid_run_with_parked_entries_leaves_torch_clean(modes: list[ProfileMode]) -> None:
    """Detaching while parked entries exist unlinks them, resets the frame, and the job's backend then runs it from nothing."""
    import gc

    @torch.compile(backend="eager")
    def pick(x: Any, tag: str) -> Any:
        return x + (1 if tag == "A" else 2)

    mode = make(modes, 1, Recorder(), Recorder())
    _alternate(pick, ["A", "B", "A", "B", "C"])
    parked = list(mode._parked[id(code_of(pick))])
    assert len(parked) == 2
    mode.uninstall()
    assert mode._parked == {}
    assert all(
        p.released and p.guard_manager.cache_entry is None and p.guard_manager.extra_state is None
        for p in parked
    )
    assert _debug_get_cache_entry_list(code_of(pick)) == []
    del parked
    gc.collect()
    _alternate(pick, ["A", "B", "A"])
    assert [e.backend is mode.observer for e in _debug_get_cache_entry_list(code_of(pick))] == [
        False,
        False,
    ]


@needs_evict
def test_detach_from_inside_the_compiled_frame_releases_parked_entries(
    modes: list[ProfileMode],
) -> None:
    """Detaching while the frame's compiled code is on the stack invalidates instead of resetting, releases parked entries, and later calls still run correctly."""
    mode = make(modes, 1, Recorder(), Recorder())

    @torch._dynamo.disable
    def maybe_detach(flag: bool) -> None:
        if flag:
            mode.uninstall()

    @torch.compile(backend="eager")
    def pick(x: Any, tag: str, detach: bool) -> Any:
        y = x + (1 if tag == "A" else 2)
        maybe_detach(detach)
        return y * 2

    x = torch.zeros(2)
    for tag in ["A", "B", "A"]:
        assert torch.equal(pick(x, tag, False), (x + (1 if tag == "A" else 2)) * 2)
    assert mode.stats["reenabled"] == 1
    assert torch.equal(pick(x, "B", True), (x + 2) * 2)
    assert mode._parked == {} and not mode.active
    live = [e for e in _debug_get_cache_entry_list(code_of(pick)) if e.code is not None]
    assert all(e.backend is not mode.observer for e in live)
    for tag in ["A", "B", "A"]:
        assert torch.equal(pick(x, tag, False), (x + (1 if tag == "A" else 2)) * 2)


@needs_evict
@pytest.mark.parametrize(("job_limit", "parked"), [(None, 8), (4, 8), (16, 16), (1000, 64)])
def test_parked_variants_follow_the_jobs_own_limit(
    modes: list[ProfileMode], job_limit: int | None, parked: int
) -> None:
    """Profile mode parks as many variants per frame as the job's own recompile_limit at install (its
    cache would hold that many), at least torch's default 8 and at most 64; the job's limit comes back
    at uninstall."""
    import torch._dynamo.config as config

    name = INFO.limit_config_name
    before = getattr(config, name)
    patch = {} if job_limit is None else {name: job_limit}
    with config.patch(**patch):
        mode = ProfileMode(1, Recorder())
        mode.on_reuse = Recorder()
        modes.append(mode)
        mode.install()
        assert mode.parked_bound == parked
        mode.uninstall()
        assert getattr(config, name) == (before if job_limit is None else job_limit)


@needs_evict
def test_parked_variants_are_bounded_per_frame(modes: list[ProfileMode]) -> None:
    """At most max_parked variants are parked per frame; a return to one parked longer ago retraces."""

    @torch.compile(backend="eager")
    def scale(x: Any, tag: str) -> Any:
        return x * len(tag)

    recorder, reuse = Recorder(), Recorder()
    mode = ProfileMode(1, recorder)
    mode.on_reuse = reuse
    mode.max_parked = 2
    modes.append(mode)
    mode.install()
    x = torch.ones(2)
    for tag in ["a", "bb", "ccc", "dddd", "ccc", "a"]:
        assert torch.equal(scale(x, tag), x * len(tag))
    # parked after dddd: ccc, bb ("a" dropped); ccc comes back, then "a" must retrace
    assert mode.stats["reenabled"] == 1 and mode.stats["traces"] == 5
    assert len(recorder.for_code("scale")) + len(reuse.for_code("scale")) == 5
    assert len(mode._parked[id(code_of(scale))]) <= 2


def test_evicts_without_parking_when_internals_missing(
    modes: list[ProfileMode], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the internals parking needs, install logs why and evicts as before: each return retraces, and every switch is still reported."""
    if not INFO.has("profile_evict"):
        pytest.skip(INFO.why_off("profile_evict"))
    monkeypatch.setattr(profile_module, "park_mechanism_missing", lambda: "missing torch.thing")
    recorder, reuse = Recorder(), Recorder()
    with caplog.at_level(logging.WARNING, logger="recompprof"):
        mode = make(modes, 1, recorder, reuse)
    assert (
        mode.mechanism == MECHANISM_EVICT
        and not mode.parking
        and mode.why_no_parking == "missing torch.thing"
    )
    assert "evicts without parking" in caplog.text

    @torch.compile(backend="eager")
    def pick(x: Any, tag: str) -> Any:
        return x + (1 if tag == "A" else 2)

    _alternate(pick, ["A", "B"] * 2)
    assert len(recorder.for_code("pick")) == 3 and reuse.calls == []
    assert mode.stats["traces"] == 4


@needs_evict
def test_session_records_every_switch_with_parking(tmp_path: Any) -> None:
    """attach(mode="profile") on A,B,A,B: 7 recompile events for the 7 switches (6 re-enabled variants with no compile time), 2 traces."""
    import recompprof
    from recompprof._eventlog.reader import read_file
    from recompprof._model.events import Compile, SessionEnd

    def pick(x: Any, tag: str) -> Any:
        return x + (1 if tag == "A" else 2)

    compiled = torch.compile(pick, backend="eager")
    with recompprof.attach(mode="profile", run_dir=tmp_path) as session:
        _alternate(compiled, ["A", "B"] * 4)
    assert session._profile is not None and session._profile.parking
    events = list(read_file(session.event_log_path))  # type: ignore[arg-type]
    compiles = [e for e in events if isinstance(e, Compile) and e.frame.name == "pick"]
    recompiles = [e for e in compiles if e.is_recompile]
    assert len(compiles) == 8 and len(recompiles) == 7
    explained = [next(r for r in e.reasons if r.explains_change) for e in recompiles[1:]]
    assert {(r.category, r.subject) for r in explained} == {("python_constant", "L['tag']")}
    reused = [e for e in recompiles if e.duration == 0.0]
    assert [e.compile_id for e in reused] == ["0/0", "0/1"] * 3
    end = next(e for e in events if isinstance(e, SessionEnd))
    assert end.totals["profile_traces"] == 2 and end.totals["profile_reenabled"] == 6


def test_unlimited_session_log_keeps_its_session_start(tmp_path: Any) -> None:
    """attach(mode="profile", recompile_limit=None), the unlimited variant: the log's session_start (limit None,
    which the JSON line leaves out) reads back, so the report knows the run and its mode."""
    import recompprof
    from recompprof._analysis.report.fold import build_report
    from recompprof._eventlog.reader import read_file, read_run
    from recompprof._model.events import SessionStart

    compiled = torch.compile(lambda x, n: x * n, backend="eager")
    with recompprof.attach(mode="profile", recompile_limit=None, run_dir=tmp_path) as session:
        for n in (2, 3, 4):
            compiled(torch.ones(2), n)
    starts = [e for e in read_file(session.event_log_path) if isinstance(e, SessionStart)]  # type: ignore[arg-type]
    assert len(starts) == 1 and starts[0].mode == "profile" and starts[0].recompile_limit is None
    report = build_report(read_run(tmp_path))
    assert report.run.modes == {"profile"} and not report.sessions.incomplete
