"""attach()/detach(): lifecycle, settings, steps and the state torch is left in."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import recompprof
from recompprof import ConfigError
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile, SessionEnd, SessionStart
from recompprof._torch.versions import torch_info


def torch_state() -> dict[str, Any]:
    """Everything recompprof may touch in torch, as comparable values."""
    import torch._dynamo.config as dynamo_config
    import torch.optim.optimizer as optimizer_module

    # Some of these internals are newer than the oldest supported torch: absent ones compare as None.
    callback_handler = getattr(getattr(torch._dynamo, "callback", None), "callback_handler", None)
    recompile_hooks = getattr(
        torch._dynamo.utils, "get_hook_for_recompile_user_context", lambda: None
    )
    metrics_logger = logging.getLogger("torch._utils_internal")
    return {
        "dynamo_config": dynamo_config.get_config_copy(),
        "metrics_logger_level": metrics_logger.level,
        "metrics_logger_filters": list(metrics_logger.filters),
        "metrics_logger_handlers": list(metrics_logger.handlers),
        "optimizer_step_post_hooks": dict(optimizer_module._global_optimizer_post_hooks),
        "optimizer_step_pre_hooks": dict(optimizer_module._global_optimizer_pre_hooks),
        "stance": getattr(torch._dynamo.eval_frame, "_stance", None),
        "start_callbacks": list(getattr(callback_handler, "start_callbacks", [])),
        "end_callbacks": list(getattr(callback_handler, "end_callbacks", [])),
        "recompile_user_context_hooks": list(recompile_hooks() or []),
        "compile_metrics_hook": getattr(
            torch._dynamo.utils, "add_compilation_metrics_to_chromium", None
        ),
        "trace_structured": torch._logging.trace_structured,
        "set_stance": getattr(torch._dynamo.decorators, "_set_stance", None),
    }


@pytest.mark.torch_compat
def test_detach_restores_torch_state_exactly() -> None:
    """Torch's config, loggers, global hooks and stance after detach equal those before attach, in both modes."""
    before = torch_state()
    for mode in ("monitor", "profile"):
        session = recompprof.attach(mode=mode)
        fn = torch.compile(lambda x: x + 1, backend="eager")
        fn(torch.ones(2))
        session.detach()
        assert torch_state() == before, mode


def test_context_manager_and_idempotent_attach(tmp_path: Path) -> None:
    """A second attach warns and returns the live session; the context manager detaches on exit."""
    with recompprof.attach(run_dir=tmp_path) as session:
        with pytest.warns(RuntimeWarning, match="already attached"):
            again = recompprof.attach()
        assert again is session
        assert recompprof.current() is session
    assert recompprof.current() is None
    assert not session.attached
    session.detach()  # a second detach is a no-op


@pytest.mark.filterwarnings("ignore:recompprof is already attached")
def test_attach_is_thread_safe() -> None:
    """Concurrent attach calls from many threads produce exactly one live session."""
    sessions: list[Any] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        sessions.append(recompprof.attach())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(s) for s in sessions}) == 1
    sessions[0].detach()


@pytest.mark.parametrize(
    ("kwargs", "env", "needle"),
    [
        ({"mode": "fast"}, {}, "'mode' (argument)"),
        ({}, {"RECOMPPROF_MODE": "turbo"}, "RECOMPPROF_MODE"),
        ({"warmup_steps": -1}, {}, "'warmup_steps'"),
        ({}, {"RECOMPPROF_EXPORTERS": "prometheus,statsd"}, "RECOMPPROF_EXPORTERS"),
        ({"recompile_limit": 0}, {}, "'recompile_limit'"),
        ({"max_frames": "many"}, {}, "'max_frames'"),
        ({"no_such_setting": 1}, {}, "unknown recompprof setting"),
        ({}, {"RECOMPPROF_PROMETHEUS_PORT": "99999"}, "RECOMPPROF_PROMETHEUS_PORT"),
    ],
)
def test_bad_settings_fail_at_attach_naming_the_setting(
    kwargs: dict[str, Any], env: dict[str, str], needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An invalid argument or environment value raises ConfigError naming the setting, and nothing stays attached."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=None) as info:
        recompprof.attach(**kwargs)
    assert needle in str(info.value)
    assert recompprof.current() is None


def test_allowed_values_are_listed_in_the_error() -> None:
    """The error for a closed-set setting lists the values it allows."""
    with pytest.raises(ConfigError) as info:
        recompprof.attach(mode="fast")
    assert "monitor" in str(info.value) and "profile" in str(info.value)


def test_argument_beats_environment_beats_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings resolve argument > RECOMPPROF_* variable > default."""
    monkeypatch.setenv("RECOMPPROF_WARMUP_STEPS", "7")
    monkeypatch.setenv("RECOMPPROF_RECOMPILE_LIMIT", "none")
    with recompprof.attach() as session:
        assert session.settings.warmup_steps == 7
        assert session.settings.recompile_limit is None
        assert session.settings.max_frames == 50
    with recompprof.attach(warmup_steps=3) as session:
        assert session.settings.warmup_steps == 3


def test_unknown_exporter_is_a_config_error() -> None:
    """Naming an exporter that does not exist fails at attach with the allowed names."""
    with pytest.raises(ConfigError, match="allowed: prometheus, otel"):
        recompprof.attach(exporters=["statsd"])


def test_steps_counted_by_optimizer_hook_and_warmup_split(tmp_path: Path) -> None:
    """Each compile carries the optimizer step it happened at; recompiles before warmup_steps are not steady-state,
    and neither are those past it while their change is within a bounded set's variants: a new batch size every
    step (automatic dynamic shapes off, the limit raised) is steady state from the variant past the bound, and
    only from warmup_steps on."""
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    compiled = torch.compile(model, backend="eager")
    with (
        recompprof.attach(run_dir=tmp_path, warmup_steps=10) as session,
        torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=16),
    ):
        for batch in range(1, 13):  # a new size at every step: 12 variants
            compiled(torch.randn(batch, 4)).sum().backward()
            opt.step()
        steps = session.current_step
    events = list(read_file(session.event_log_path))
    compiles = [e for e in events if isinstance(e, Compile) and not e.backward]
    assert steps == 12
    assert [c.step for c in compiles] == list(range(12))
    # past the bound from step 8 (the ninth variant), past the warm-up from step 10
    assert [c.step for c in compiles if c.steady_state] == [10, 11]
    assert all(c.automatic_dynamic is None for c in compiles)
    assert isinstance(events[0], SessionStart) and isinstance(events[-1], SessionEnd)
    assert events[-1].totals["steps"] == 12


def test_manual_step_counter_overrides_optimizer() -> None:
    """session.step() counts steps for loops without an optimizer and takes over from the hook."""
    with recompprof.attach() as session:
        assert session.step() == 1
        assert session.step() == 2
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        assert session.current_step == 2


def test_only_the_first_optimizer_counts_steps() -> None:
    """Two optimizers stepping once each per iteration count one training step, not two."""
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    with recompprof.attach() as session:
        for _ in range(3):
            (a(torch.ones(1, 2)) + b(torch.ones(1, 2))).sum().backward()
            opt_a.step()
            opt_b.step()
        assert session.current_step == 3


@pytest.mark.torch_compat
def test_session_start_says_which_signals_are_live(tmp_path: Path) -> None:
    """The session_start event lists each torch signal and whether it is live."""
    with recompprof.attach(run_dir=tmp_path) as session:
        pass
    start = next(iter(read_file(session.event_log_path)))
    info = torch_info()  # the gated signals are off below their torch version
    assert isinstance(start, SessionStart)
    assert start.signals == {
        "guard_failures": True,
        "graph_breaks": True,
        "optimizer_steps": True,
        "compile_metrics": True,
        "phase_times": True,
        "recompile_limit_hits": info.has("recompile_limit_hits"),
        "backward_compiles": info.has("backward_compiles"),
        "step_in_trace": info.has("recompile_user_context"),
        "backward_compile_start": info.has("backward_compile_start"),
    }
    assert start.versions["torch"] == torch.__version__


def test_metrics_do_not_leak_to_the_users_log_handlers(caplog: pytest.LogCaptureFixture) -> None:
    """Tapping torch's INFO CompilationMetrics record adds nothing to what the user's handlers see."""
    with caplog.at_level(logging.WARNING, logger="torch"), recompprof.attach():
        torch.compile(lambda x: x * 2, backend="eager")(torch.ones(3))
    assert not [r for r in caplog.records if r.name == "torch._utils_internal"]


def test_manual_step_source_installs_no_optimizer_hook() -> None:
    """With step_source=manual, optimizer steps are not counted and no global optimizer hook is installed."""
    import torch.optim.optimizer as optimizer_module

    hooks_before = dict(optimizer_module._global_optimizer_post_hooks)
    with recompprof.attach(step_source="manual") as session:
        assert dict(optimizer_module._global_optimizer_post_hooks) == hooks_before
        model = torch.nn.Linear(2, 1)
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        assert session.current_step == 0
        assert session.step() == 1
        assert session.signals["optimizer_steps"] is False


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_step_to_rejects_what_is_not_a_step(bad: object) -> None:
    """session.step(to=...) names the argument and refuses a negative, fractional, string or bool step, keeping the current step."""
    with recompprof.attach() as session:
        session.step(to=4)
        with pytest.raises(ValueError, match="session.step"):
            session.step(to=bad)  # type: ignore[arg-type]
        assert session.current_step == 4


@pytest.mark.parametrize("name", ["prometheus", "otel"])
def test_builtin_exporters_provide_everything_the_exporter_protocol_declares(name: str) -> None:
    """What the session reads of an exporter (its name, whether it sends traces, what it dropped) is declared
    by the Exporter protocol, and each built-in exporter provides every member of it."""
    from recompprof._capture import exporting, settings

    declared = set(exporting.Exporter.__annotations__) | {
        member
        for member, value in vars(exporting.Exporter).items()
        if callable(value) and not member.startswith("_")
    }
    assert {"name", "traces", "start", "on_event", "shutdown", "dropped"} <= declared
    exporter = exporting.load(name, settings.load(prometheus_port=0))
    assert {member for member in declared if not hasattr(exporter, member)} == set()
    assert isinstance(exporter.traces, bool) and exporter.dropped() == {}


def test_aggregates_fold_when_read_and_never_hold_more_than_a_batch(tmp_path: Path) -> None:
    """The compile path leaves its events' fold to the next read of the totals (a scrape, snapshot(), the
    session's end) or to a full batch: every read counts every event emitted, in order, and no more than
    FOLD_EVERY - 1 events ever wait."""
    from recompprof._capture.session import FOLD_EVERY

    session = recompprof.attach(run_dir=tmp_path, recompile_limit=64)
    try:
        fn = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
        for n in (2, 3, 4):  # a compile and two recompiles of one frame
            fn(torch.ones(n))
        waiting = len(session._unfolded)
        assert waiting > 0  # the compile path folded nothing
        snap = session.snapshot()
        assert session._unfolded == []
        assert (snap.compiles_total, snap.recompiles_total) == (3, 2)
        # Distinct frames, a compile_start and a compile each: more events than a batch, never more waiting.
        most = 0
        for i in range(FOLD_EVERY):
            torch.compile(eval(f"lambda x: x + {i}"), backend="eager")(torch.ones(2))
            most = max(most, len(session._unfolded))
        assert 0 < most < FOLD_EVERY
        assert session.snapshot().compiles_total == 3 + FOLD_EVERY
    finally:
        session.detach()
    ends = [e for e in read_file(next(tmp_path.glob("*.jsonl"))) if isinstance(e, SessionEnd)]
    assert ends[0].totals["compiles"] == 3 + FOLD_EVERY
    assert ends[0].totals["recompiles"] == 2
