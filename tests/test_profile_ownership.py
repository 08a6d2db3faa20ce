"""Profile mode changes only what it set and still holds: a job's own ``config.patch`` of a recompile limit
(even to profile mode's own value), its own ``set_stance`` and its own assignments win, during the session
and at detach, and none of them counts as a recompprof internal error."""

from __future__ import annotations

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
    assert seen == [1, job_limit, 1, job_limit, 1]
    assert _limit() == job_limit
