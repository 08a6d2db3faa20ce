"""Profile mode changes only what it set and still holds: a job's own ``config.patch`` of a recompile limit
(even to profile mode's own value), its own ``set_stance`` and its own assignments win, during the session
and at detach, and none of them counts as a recompprof internal error."""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import recompprof  # noqa: E402
from recompprof import _internal  # noqa: E402
from recompprof._model.events import SignalChange  # noqa: E402
from recompprof._torch.versions import torch_info  # noqa: E402

INFO = torch_info()
LIMIT, ACCUMULATED = INFO.limit_config_name, INFO.accumulated_limit_config_name
pytestmark = [
    pytest.mark.torch_compat,
    pytest.mark.skipif(not INFO.has("force_backend"), reason=INFO.why_off("force_backend")),
]
config = torch._dynamo.config
eval_frame = torch._dynamo.eval_frame
# Profile mode's own recompile limit: 1 where it evicts, lifted (sys.maxsize) where torch lacks the internals
# eviction needs and it falls back to the unlimited mechanism (docs/compatibility.md, gate profile_evict).
OURS = 1 if INFO.has("profile_evict") else sys.maxsize


def _limit() -> int:
    return int(getattr(config, LIMIT))


def _stance() -> str:
    return str(eval_frame._stance.stance)


def _job(seen: list[tuple[str, Any]]) -> None:
    """A job's own scopes, as torch's test files write them: a limit patched to 1 (profile mode's value) as
    a context manager and as a decorator, a stance set inside them and around them, nested; ``seen`` gets
    the limit (and stance) in force at each point inside the job's own scopes, and what its compiles did."""

    def calls(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n

    compiled = torch.compile(calls, backend="eager")

    def compile_three() -> int:
        torch._dynamo.reset()  # fresh frames, as a test case starts
        for n in (1, 2, 3):
            compiled(torch.ones(2), n)
        return len(torch._dynamo.eval_frame._debug_get_cache_entry_list(calls.__code__))

    with config.patch(**{LIMIT: 1}):
        seen.append(("patched", _limit()))
        with torch.compiler.set_stance("force_eager"):
            seen.append(("patched, force_eager", (_limit(), _stance())))
        seen.append(("patched after the stance", _limit()))
        with torch.compiler.set_stance("default"):
            seen.append(("patched, default stance", (_limit(), compile_three())))
        seen.append(("patched after the default stance", _limit()))

    @config.patch(**{LIMIT: 1})
    def test_case() -> None:
        seen.append(("decorated", _limit()))
        with torch.compiler.set_stance("default"):
            seen.append(("decorated, default stance", (_limit(), compile_three())))
            with config.patch(**{LIMIT: 3}):
                seen.append(("decorated, nested patch", (_limit(), compile_three())))
            seen.append(("decorated after the nested patch", _limit()))

    test_case()
    test_case()


def _attached(tmp_path: Path, body: Callable[[], None]) -> list[SignalChange]:
    errors = dict(_internal.counts())
    with recompprof.attach(run_dir=tmp_path / "run", mode="profile") as session:
        body()
    assert _internal.counts() == errors  # the job's own settings are no recompprof fault
    return [e for e in session.recent_events() if isinstance(e, SignalChange)]


def test_the_jobs_own_patched_limits_and_stances_are_in_force_as_without_recompprof(
    tmp_path: Path,
) -> None:
    """In each of the job's own scopes (a ``config.patch`` to 1 as context manager and decorator, a
    ``set_stance`` inside, nested) the limit in force and what its compiles keep are those torch gives
    without recompprof; after detach the limits and the stance are the job's again."""
    before = (_limit(), getattr(config, ACCUMULATED), eval_frame._stance)
    alone: list[tuple[str, Any]] = []
    _job(alone)
    assert (_limit(), getattr(config, ACCUMULATED), eval_frame._stance) == before
    attached: list[tuple[str, Any]] = []
    _attached(tmp_path, lambda: _job(attached))
    assert attached == alone
    assert (_limit(), getattr(config, ACCUMULATED), eval_frame._stance) == before
    assert type(getattr(config, LIMIT)) is int  # recompprof's own value object is gone too


def test_the_jobs_equal_value_and_stance_set_during_the_session_win_at_detach(
    tmp_path: Path,
) -> None:
    """A job that sets the limit to profile mode's own value (1) and a stance of its own during the session,
    and leaves them set, has both after detach, as without recompprof; the stance change is a signal
    going dark, not an internal error."""
    before_limit, before_stance = _limit(), eval_frame._stance

    def job() -> None:
        setattr(config, LIMIT, 1)
        torch.compiler.set_stance("force_eager")

    try:
        changes = _attached(tmp_path, job)
        assert _limit() == 1 and _stance() == "force_eager"
        assert [(c.signal, c.live) for c in changes] == [("profile_backend", False)]
    finally:
        setattr(config, LIMIT, before_limit)
        eval_frame._set_stance(before_stance)


def test_a_stance_set_before_the_jobs_patch_ends_gives_back_profile_modes_limit(
    tmp_path: Path,
) -> None:
    """While the stance is not profile mode's the job has its own limit; once the stance is profile mode's
    again, recompprof's limit is in force again: but only where no patch of the job's is open."""
    job_limit = _limit()
    seen: list[int] = []

    def job() -> None:
        seen.append(_limit())  # profile mode's
        with torch.compiler.set_stance("default"):
            seen.append(_limit())  # the job's own, given back
            with config.patch(**{LIMIT: 1}):
                seen.append(_limit())  # the job's patch
            seen.append(_limit())
        seen.append(_limit())  # profile mode's again

    _attached(tmp_path, job)
    assert seen == [OURS, job_limit, 1, job_limit, OURS]
    assert _limit() == job_limit


_STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")


def _program(seed: int) -> list[tuple[str, Any]]:
    """A job's settings as torch's test files nest them: ``config.patch`` of either limit and ``set_stance``
    scopes (context managers, entered and left in order, like an ``ExitStack`` of ``setUpClass`` and test
    decorators), permanent ``set_stance`` calls that outlive the scope they were made in, and
    ``torch._dynamo.reset()``, with a check of the limits in force after every step; every scope ends."""
    rng = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    depth = 0
    for _ in range(rng.randint(4, 14)):
        choice = rng.choice(["patch", "stance", "exit", "set", "reset"])
        if choice == "patch":
            ops.append(("patch", (rng.choice((LIMIT, ACCUMULATED)), rng.choice((1, 2, 5, 64)))))
            depth += 1
        elif choice == "stance":
            ops.append(("stance", rng.choice(_STANCES)))
            depth += 1
        elif choice == "exit" and depth:
            ops.append(("exit", None))
            depth -= 1
        elif choice == "set":
            ops.append(("set", rng.choice(_STANCES)))
        elif choice == "reset":
            ops.append(("reset", None))
    ops += [("exit", None)] * depth
    return ops


def _run(
    ops: list[tuple[str, Any]], initial: Any
) -> list[tuple[dict[str, int], bool, frozenset[str]]]:
    """Run a generated program; after each step, the limits in force, whether the stance is the one in
    force when it began, and which limits a ``config.patch`` of the job's holds open."""
    seen = []
    with contextlib.ExitStack() as stack:
        scopes: list[tuple[contextlib.ExitStack, str | None]] = []
        for op, arg in ops:
            if op in ("patch", "stance"):
                scope = contextlib.ExitStack()
                stack.enter_context(scope)  # so an exception closes it too
                scope.enter_context(
                    config.patch(**{arg[0]: arg[1]})
                    if op == "patch"
                    else torch.compiler.set_stance(arg)
                )
                scopes.append((scope, arg[0] if op == "patch" else None))
            elif op == "exit":
                scopes.pop()[0].close()
            elif op == "set":
                torch.compiler.set_stance(arg)
            else:
                torch._dynamo.reset()
            limits = {LIMIT: _limit(), ACCUMULATED: int(getattr(config, ACCUMULATED))}
            patched = frozenset(name for _, name in scopes if name is not None)
            seen.append((limits, eval_frame._stance is initial, patched))
    return seen


@pytest.mark.parametrize("seed", range(40))
def test_a_generated_nesting_of_patches_stances_and_resets_keeps_every_limit_whose_it_is(
    seed: int, tmp_path: Path
) -> None:
    """Through a generated nesting of ``config.patch`` × ``set_stance`` × ``reset()``, every limit in force is
    the one torch gives without recompprof, except where profile mode's stance is in force and no patch of
    the job's holds that limit (there it is profile mode's); after detach the job has its own limits back."""
    ops = _program(seed)
    initial = eval_frame._stance
    before = (_limit(), getattr(config, ACCUMULATED))
    try:
        alone = _run(ops, initial)
        after_alone = (_limit(), getattr(config, ACCUMULATED), eval_frame._stance)
        eval_frame._set_stance(initial)
        ours = {LIMIT: OURS, ACCUMULATED: sys.maxsize}
        expected = [
            {n: ours[n] if initial_stance and n not in patched else v for n, v in limits.items()}
            for limits, initial_stance, patched in alone
        ]
        attached: list[dict[str, int]] = []

        def job() -> None:
            attached.extend(limits for limits, _, _ in _run(ops, eval_frame._stance))

        _attached(tmp_path, job)
        assert attached == expected, ops
        assert (_limit(), getattr(config, ACCUMULATED), eval_frame._stance is initial) == (
            after_alone[0],
            after_alone[1],
            after_alone[2] is initial,
        ), ops
        assert type(getattr(config, LIMIT)) is int and type(getattr(config, ACCUMULATED)) is int
    finally:
        eval_frame._set_stance(initial)
        setattr(config, LIMIT, before[0])
        setattr(config, ACCUMULATED, before[1])
