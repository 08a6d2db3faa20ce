"""Every fix hint, proven: applied to a minimal repro of its category, the recompiles go (or stay bounded).

A hint is only worth showing if it works. Each proof below runs one small real job twice under
recompprof, as written (the hint not applied) and with the hint applied, on the same changing inputs:
as written it must recompile, filed under the category whose hint is being proven (so the proof is
about the hint the report shows for that cause); applied, it must recompile no more than the hint
claims (``at_most``: 0 where the hint removes the cause, the number of states where it says "one
compile per state"). Torch's own remedies (recompprof._model.remedies) are proven the same way on every
release that shows them; scripts/compat.sh runs this file on every torch release.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from scenarios import SCENARIOS

import recompprof
from recompprof._model.events import Compile
from recompprof._model.fix_hints import FIX_HINTS
from recompprof._model.remedies import PGO, REMEDIES, fix_hints, release

pytestmark = pytest.mark.torch_compat

TORCH = torch.__version__
Job = Callable[[bool], None]  # runs the repro; True: with the hint applied


@dataclass(frozen=True)
class Proof:
    category: str
    applies: str  # what the hint tells the user to do (a phrase of the hint's text)
    job: Job
    at_most: int = 0  # recompiles left with the hint applied
    remedy: str = (
        ""  # a torch remedy of recompprof._model.remedies, proven instead of the base hint
    )


PROOFS: dict[str, Proof] = {}


def proof(category: str, applies: str, at_most: int = 0, remedy: str = "") -> Callable[[Job], Job]:
    def register(job: Job) -> Job:
        PROOFS[job.__name__] = Proof(category, applies, job, at_most, remedy)
        return job

    return register


def _eager(fn: Any, **kw: Any) -> Any:
    return torch.compile(fn, backend="eager", **kw)


# --- tensor properties -------------------------------------------------------------------------


@proof("size", "mark_dynamic")
def size_marked_dynamic(apply: bool) -> None:
    def sized(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(sized)
    for n in (2, 3, 4, 5):
        x = torch.ones(n)
        if apply:
            torch._dynamo.mark_dynamic(x, 0)
        f(x)


@proof("size", "dynamic=True")
def size_compiled_dynamic(apply: bool) -> None:
    def sized_all(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(sized_all, dynamic=True) if apply else _eager(sized_all)
    for n in (2, 3, 4, 5):
        f(torch.ones(n))


@proof("size", "mark_unbacked", remedy="mark_unbacked")
def size_from_one_unbacked(apply: bool) -> None:
    def from_one(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(from_one)
    for n in (1, 2, 3):  # torch specialises a size of 1 even under automatic dynamic
        x = torch.ones(n)
        if apply:
            torch._dynamo.decorators.mark_unbacked(x, 0)
        f(x)


@proof("stride", "contiguous")
def stride_made_contiguous(apply: bool) -> None:
    def strided(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(strided)
    for x in (torch.ones(2, 3), torch.ones(3, 2).t()):
        f(x.contiguous() if apply else x)


@proof("ndim", "reshape")
def ndim_reshaped(apply: bool) -> None:
    def shaped(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(shaped)
    for x in (torch.ones(4), torch.ones(2, 2)):
        f(x.reshape(2, 2) if apply else x)


@proof("dtype", "Cast")
def dtype_cast(apply: bool) -> None:
    def typed(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(typed)
    for x in (torch.ones(2), torch.ones(2, dtype=torch.float64)):
        f(x.float() if apply else x)


@proof("requires_grad", "detach")
def requires_grad_detached(apply: bool) -> None:
    def grads(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(grads)
    for x in (torch.ones(2), torch.ones(2, requires_grad=True)):
        f(x.detach() if apply else x)


@proof("dispatch_keys", "clone")
def dispatch_keys_materialised(apply: bool) -> None:
    def keyed(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(keyed)
    with torch.inference_mode():
        inference = torch.ones(2)
    for x in (torch.ones(2), inference):
        f(x.clone() if apply else x)  # cloned outside inference mode: a normal tensor


@proof("aliasing", "clone an input")
def aliasing_cloned(apply: bool) -> None:
    def aliased(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    f, t = _eager(aliased), torch.ones(2)
    f(torch.ones(2), torch.ones(2))
    f(t, t.clone() if apply else t)


@proof("mark_dynamic", "on every call")
def mark_dynamic_every_call(apply: bool) -> None:
    def marked(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(marked)
    for i in range(3):
        x = torch.ones(2)
        if apply or i > 0:
            torch._dynamo.mark_dynamic(x, 0)
        f(x)


# --- Python values -------------------------------------------------------------------------------


@proof("python_constant", "tensor argument")
def python_constant_as_tensor(apply: bool) -> None:
    def scaled(x: torch.Tensor, mode: Any) -> torch.Tensor:
        return x * mode

    f = _eager(scaled)
    for value in (True, False, True):  # a flag: never made dynamic by torch
        f(torch.ones(2), torch.tensor(float(value)) if apply else value)


@proof("python_constant", "compiles once per state", at_most=1)
def python_constant_states(apply: bool) -> None:
    def moded(x: torch.Tensor, mode: str) -> torch.Tensor:
        return x + 1 if mode == "add" else x - 1

    f = _eager(moded)
    modes = ("add", "sub") * 3 if apply else ("add", "sub", "mul", "div")
    for mode in modes:  # applied: the value keeps to its few states
        f(torch.ones(2), mode)


@proof("python_constant", "eager_on_recompile", remedy="eager_on_recompile")
def python_constant_served_eagerly(apply: bool) -> None:
    def served(x: torch.Tensor, mode: str) -> torch.Tensor:
        return x + 1 if mode == "add" else x - 1

    f = _eager(served)
    f(torch.ones(2), "add")
    stance = torch.compiler.set_stance("eager_on_recompile") if apply else _nothing()
    with stance:
        for mode in ("sub", "mul", "div"):
            f(torch.ones(2), mode)


_SCALE = 1.0


@proof("global", "tensor argument")
def global_as_argument(apply: bool) -> None:
    global _SCALE

    def uses_global(x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        return x * (_SCALE if scale is None else scale)

    f = _eager(uses_global)
    try:
        for value in (1.0, 2.0, 3.0):
            _SCALE = value
            f(torch.ones(2), torch.tensor(value)) if apply else f(torch.ones(2))
    finally:
        _SCALE = 1.0


class _Flagged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.use_bias = True
        self.scale = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1 if self.use_bias else x
        return x * self.scale


@proof("module_attribute", "set it once")
def module_attribute_set_once(apply: bool) -> None:
    model = _Flagged()
    f = _eager(model)
    for flag in (True, False, True):
        model.use_bias = True if apply else flag
        f(torch.ones(2))


@proof(
    "module_attribute",
    "allow_unspec_int_on_nn_module",
    at_most=1,
    remedy="allow_unspec_int_on_nn_module",
)
def module_int_attribute_unspecialised(apply: bool) -> None:
    model = _Flagged()
    f = _eager(model)
    patch = torch._dynamo.config.patch(allow_unspec_int_on_nn_module=True) if apply else _nothing()
    with patch:
        for scale in (1, 2, 3, 4, 5):  # one warm-up recompile makes it dynamic
            model.scale = scale
            f(torch.ones(2))


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2


@proof("object_identity", "Reuse the same object")
def object_reused(apply: bool) -> None:
    def apply_fn(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return fn(x)

    f = _eager(apply_fn)
    for fn in (_double, _halve, _double):
        f(torch.ones(2), _double if apply else fn)


@proof("type", "same kind of value")
def type_kept(apply: bool) -> None:
    def typed_items(x: torch.Tensor, items: Any) -> torch.Tensor:
        return x * 2 if isinstance(items, list) else x * 3

    f = _eager(typed_items)
    for items in ([1], (1,)):
        f(torch.ones(2), list(items) if apply else items)


@proof("container_length", "stack the items into one tensor", at_most=1)
def container_stacked(apply: bool) -> None:
    def summed(xs: Any) -> torch.Tensor:
        return xs.sum(0) if isinstance(xs, torch.Tensor) else sum(xs)

    f = _eager(summed)
    for n in (2, 3, 4, 5):  # stacked: one size, made dynamic after its first change
        xs = [torch.ones(2)] * n
        f(torch.stack(xs) if apply else xs)


@proof("dict_keys", "keys")
def dict_keys_fixed(apply: bool) -> None:
    def keyed_batch(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return sum(batch.values())  # type: ignore[return-value]

    f = _eager(keyed_batch)
    for key in ("input", "target"):
        f({"input" if apply else key: torch.ones(2)})


# --- global state --------------------------------------------------------------------------------


@proof("grad_mode", "one grad mode")
def grad_mode_kept(apply: bool) -> None:
    def graded(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(graded)
    f(torch.ones(2))
    with torch.no_grad() if not apply else _nothing():
        f(torch.ones(2))


@proof("grad_mode", "one variant each", at_most=1)
def grad_mode_phases(apply: bool) -> None:
    def phased(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(phased)
    modes = (True, False) * 3 if apply else (True, False)
    for step, training in enumerate(modes):  # applied: train and eval alternate for 3 epochs
        with torch.enable_grad() if training else torch.no_grad():
            f(torch.ones(2))
        if not apply and step == 1:
            with torch.inference_mode():
                f(torch.ones(2))  # as written: a third grad mode on top


@proof("autocast", "consistently")
def autocast_kept(apply: bool) -> None:
    def casted(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = _eager(casted)
    f(torch.ones(2))
    inside = _nothing() if apply else torch.autocast("cpu", dtype=torch.bfloat16)
    with inside:
        f(torch.ones(2))


@proof("global_state", "once before compiling")
def global_state_set_once(apply: bool) -> None:
    def stated(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    before = torch.are_deterministic_algorithms_enabled()
    try:
        if apply:
            torch.use_deterministic_algorithms(not before)
        f = _eager(stated)
        f(torch.ones(2))
        torch.use_deterministic_algorithms(not before)
        f(torch.ones(2))
    finally:
        torch.use_deterministic_algorithms(before)


@proof("symbolic_shape", "a branch")
def symbolic_shape_unbranched(apply: bool) -> None:
    def branchy(x: torch.Tensor) -> torch.Tensor:
        if apply:
            return torch.where(torch.arange(x.shape[0]) >= 0, x * 2, x * 3)
        return x * 2 if x.shape[0] >= 4 else x * 3

    f, first = _eager(branchy), torch.ones(5)
    torch._dynamo.mark_dynamic(first, 0)
    f(first)
    f(torch.ones(2))


# --- compiled objects ------------------------------------------------------------------------------


@proof("backend_mismatch", "Reuse one backend")
def backend_reused(apply: bool) -> None:
    def backed(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return gm.forward

    for _ in range(2):
        chosen = backend if apply else (lambda gm, example_inputs: gm.forward)
        torch.compile(backed, backend=chosen)(torch.ones(2))


class _Config:
    factor = 2


@proof("invalidated", "alive")
def invalidated_kept_alive(apply: bool) -> None:
    import gc

    def configured(x: torch.Tensor, cfg: type) -> torch.Tensor:
        return x * cfg.factor  # type: ignore[attr-defined]

    def make() -> type:
        if apply:
            return _Config  # one class, kept alive

        class Config:
            factor = 2

        return Config

    f, cfg = _eager(configured), make()
    f(torch.ones(2), cfg)
    del cfg
    gc.collect()
    f(torch.ones(2), make())


# --- helpers ---------------------------------------------------------------------------------------


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _recompiles(job: Job, apply: bool, tmp_path: Path) -> list[Compile]:
    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path / ("applied" if apply else "as-written")) as session:
        job(apply)
    compiles = [e for e in session.recent_events() if isinstance(e, Compile) and not e.backward]
    return [c for c in compiles if c.is_recompile]


def _explained(compile: Compile) -> str | None:
    return next((r.category for r in compile.reasons if r.explains_change), None)


def _remedy(name: str) -> Any:
    return next(r for r in REMEDIES if r.name == name)


@pytest.mark.parametrize("name", sorted(PROOFS))
def test_hint_removes_the_recompiles_it_claims(name: str, tmp_path: Path) -> None:
    """As written the repro recompiles for the proof's category; with the hint applied it recompiles at most as claimed."""
    p = PROOFS[name]
    if p.remedy and release(TORCH) < (since := _remedy(p.remedy).since):
        # before its floor torch lacks the remedy, or has it without effect on the repro's cause
        # (recompprof._model.remedies): either way the report does not show it, so there is no claim
        pytest.skip(f"torch {TORCH}: the report shows {p.remedy} from {since} on, not here")
    scenario = SCENARIOS.get(p.category)
    older = scenario.on(release(TORCH) or (0, 0)) if scenario is not None else None
    if older is not None and older.category is None:  # torch gives no reason of this category here
        pytest.skip(f"torch {TORCH}: {older.why}")
    hint = fix_hints(TORCH)[p.category]
    assert p.applies in hint, f"the {p.category} hint does not say {p.applies!r}: {hint}"
    as_written = _recompiles(p.job, False, tmp_path)
    assert as_written, "the repro did not recompile: it proves nothing"
    assert p.category in {_explained(c) for c in as_written}, [_explained(c) for c in as_written]
    applied = _recompiles(p.job, True, tmp_path)
    assert len(applied) <= p.at_most < len(as_written), (len(applied), len(as_written))


def test_every_category_hint_has_a_proof() -> None:
    """Each category's hint is proven by one proof at least; the exceptions are named with their reason."""
    unprovable = {
        "device": "needs a second real device: a CPU-only machine has only meta, which cannot be moved to",
        "other": "no one remedy: recompprof could not tell what changed (the limit is proven below)",
    }
    proven = {p.category for p in PROOFS.values()}
    assert set(FIX_HINTS) - proven == set(unprovable)


def test_every_remedy_shown_is_proven() -> None:
    """Each remedy of torch's that the reports can show has a proof on each category it is shown for."""
    shown = {(r.name, category) for r in REMEDIES for category in r.categories}
    assert shown == {(p.remedy, p.category) for p in PROOFS.values() if p.remedy}


def test_remedies_are_gated_by_release() -> None:
    """A release before a remedy's never shows it, nor does a run with one session on such a release; an unknown release shows none."""
    for remedy in REMEDIES:
        before = f"{remedy.since[0]}.{remedy.since[1] - 1}.0"
        for category in remedy.categories:
            assert remedy.text not in fix_hints(before)[category]
            assert remedy.text not in fix_hints()[category]
            assert remedy.text not in fix_hints(TORCH, before)[category]
            assert remedy.text in fix_hints(f"{remedy.since[0]}.{remedy.since[1]}.0")[category]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the second device)")
@pytest.mark.gpu
def test_device_hint_on_two_devices(tmp_path: Path) -> None:
    """With a second real device, moving inputs to one device before the call removes the recompile."""

    def placed(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def job(apply: bool) -> None:
        f = _eager(placed)
        for x in (torch.ones(2), torch.ones(2, device="cuda")):
            f(x.to("cuda") if apply else x)

    assert "one device" in fix_hints(TORCH)["device"]
    assert len(_recompiles(job, False, tmp_path)) == 1
    assert not _recompiles(job, True, tmp_path)


def test_recompile_limit_bounds_the_variants(tmp_path: Path) -> None:
    """The "other" hint's remedy: raising the recompile limit lets a frame keep every variant it needs compiled."""

    def varied(x: torch.Tensor, mode: str) -> torch.Tensor:
        return x + len(mode)

    modes = (
        "a",
        "bb",
        "ccc",
        "dddd",
        "eeeee",
        "ffffff",
        "ggggggg",
        "hhhhhhhh",
        "iiiiiiiii",
        "j" * 10,
    )
    name = (
        "recompile_limit"
        if hasattr(torch._dynamo.config, "recompile_limit")
        else "cache_size_limit"
    )
    compiled: dict[int, int] = {}
    for limit in (8, 16):
        torch._dynamo.reset()
        with (
            torch._dynamo.config.patch(**{name: limit}),
            recompprof.attach(run_dir=tmp_path / str(limit)) as session,
        ):
            f = _eager(varied)
            for _ in range(2):
                for mode in modes:
                    f(torch.ones(2), mode)
        events = session.recent_events()
        compiled[limit] = sum(
            1 for e in events if isinstance(e, Compile) and e.outcome == "ok" and not e.backward
        )
    assert compiled == {8: 8, 16: len(modes)}
    assert "recompile limit" in FIX_HINTS["other"]


_PGO_JOB = textwrap.dedent(
    """
    import torch, recompprof
    from recompprof._model.events import Compile
    def warmed(x):
        return x * 2
    with recompprof.attach(run_dir={run_dir!r}) as session:
        f = torch.compile(warmed, backend="eager")
        for n in (4, 8, 16):
            f(torch.ones(n))
    print(sum(1 for e in session.recent_events() if isinstance(e, Compile) and e.is_recompile))
    """
)


@pytest.mark.workload
@pytest.mark.skipif(
    release(TORCH) < PGO.since,
    reason=f"torch {TORCH}: the restart remedy is shown from {PGO.since} (2.6 keeps local PGO off by default)",
)
def test_pgo_remedy_removes_warmup_on_restart(tmp_path: Path) -> None:
    """The restart remedy: with TORCH_COMPILE_JOB_ID set, a restarted job starts dynamic and does not warm up again."""

    def restarts(job_id: str | None) -> list[int]:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"cache-{job_id}")}
        env.pop("TORCH_COMPILE_JOB_ID", None)
        if job_id:
            env["TORCH_COMPILE_JOB_ID"] = job_id
        found = []
        for attempt in range(2):
            script = _PGO_JOB.format(run_dir=str(tmp_path / f"{job_id}-{attempt}"))
            done = subprocess.run(
                [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, done.stderr[-2000:]
            found.append(int(done.stdout.strip().splitlines()[-1]))
        return found

    assert "TORCH_COMPILE_JOB_ID" in PGO.text
    assert restarts(None) == [1, 1]  # every restart warms up again
    assert restarts("proof-job") == [1, 0]  # the restart starts dynamic


def test_fix_hints_is_a_fresh_table_per_call() -> None:
    """fix_hints builds a new dict per call: a caller changing it cannot change another report's hints."""
    first = fix_hints(TORCH)
    first["size"] = "changed"
    assert fix_hints(TORCH)["size"] != "changed"


def _warmup_job(tmp_path: Path) -> recompprof.Session:
    def warming(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path) as session:
        f = _eager(warming)
        for n in (4, 8, 16):  # one automatic-dynamic warm-up recompile
            f(torch.ones(n))
    return session


def test_restarted_job_that_warms_up_again_is_pointed_at_pgo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job on its second attempt (TORCHELASTIC_RESTART_COUNT=1) that warmed up again is told to set TORCH_COMPILE_JOB_ID, in text and HTML."""
    from recompprof._analysis.render.html import render_html

    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    report = recompprof.report(_warmup_job(tmp_path))
    shown = release(TORCH) >= PGO.since
    assert ("TORCH_COMPILE_JOB_ID" in str(report)) is shown
    assert ("TORCH_COMPILE_JOB_ID" in render_html(report)) is shown


def test_first_attempt_is_not_pointed_at_pgo(tmp_path: Path) -> None:
    """A job's first attempt warming up is expected: no restart note."""
    assert "TORCH_COMPILE_JOB_ID" not in str(recompprof.report(_warmup_job(tmp_path)))


def test_report_shows_the_remedies_of_the_release_it_ran(tmp_path: Path) -> None:
    """The report of a run names a torch remedy only when that run's torch release has it."""
    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path) as session:
        python_constant_served_eagerly(False)
    text = str(recompprof.report(session))
    remedy = _remedy("eager_on_recompile")
    assert ("eager_on_recompile" in text) is (release(TORCH) >= remedy.since)


def test_compiling_twice_does_not_separate_variants(tmp_path: Path) -> None:
    """What the grad_mode and module_attribute hints warn against: two torch.compile wrappers of one function share its cache, so each mode still recompiles it."""

    def shared(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def two_wrappers(apply: bool) -> None:
        train, evaluate = _eager(shared), _eager(shared)
        train(torch.ones(2))
        with torch.no_grad():
            evaluate(torch.ones(2))

    recompiled = _recompiles(two_wrappers, False, tmp_path)
    assert [_explained(c) for c in recompiled] == ["grad_mode"]
    assert "does not separate them" in FIX_HINTS["grad_mode"]
    assert "does not separate them" in FIX_HINTS["module_attribute"]
