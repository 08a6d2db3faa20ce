"""The version table: each gate agrees with what the installed torch really has, and the adapters read it.

Run on every release by scripts/compat.sh, the agreement tests pin each gate to the release where
torch changed: a gate whose version is wrong fails on the release just below or at the change.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from scenarios import SCENARIOS, run_scenario

import recompprof
from recompprof._model.events import Compile, GraphBreak
from recompprof._torch import versions
from recompprof._torch.versions import GATES, Gate, torch_info

pytestmark = pytest.mark.torch_compat

INFO = torch_info()
ROOT = Path(__file__).resolve().parents[1]


def _metrics_fields() -> set[str]:
    from torch._dynamo.utils import CompilationMetrics

    return {f.name for f in dataclasses.fields(CompilationMetrics)}


def _reason_strings(scenario: str) -> list[str]:
    observed = run_scenario(SCENARIOS[scenario])
    assert observed.guard_failures, (
        f"scenario {scenario} recorded no reason on torch {torch.__version__}"
    )
    return observed.guard_failures


def _has_compilation_metrics() -> bool:
    import torch._utils_internal as utils_internal

    return callable(getattr(utils_internal, "log_compilation_event", None)) and bool(
        _metrics_fields()
    )


def _metrics_records(job: Callable[[], None]) -> list[object]:
    """The CompilationMetrics records torch logs while ``job`` runs (read straight from its logger)."""
    import logging

    records: list[object] = []

    class Take(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if (
                isinstance(record.args, tuple)
                and record.args
                and type(record.args[0]).__name__ == "CompilationMetrics"
            ):
                records.append(record.args[0])
            return False

    logger, take = logging.getLogger("torch._utils_internal"), Take()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addFilter(take)
    try:
        torch._dynamo.reset()
        job()
    finally:
        logger.removeFilter(take)
        logger.setLevel(level)
        torch._dynamo.reset()
    return records


def _limit_hit_job() -> None:
    name = INFO.limit_config_name
    old = getattr(torch._dynamo.config, name)
    setattr(torch._dynamo.config, name, 1)
    try:
        compiled = torch.compile(lambda x, tag: x * len(tag), backend="eager")
        for tag in ("a", "bb", "ccc"):
            compiled(torch.ones(2), tag)
    finally:
        setattr(torch._dynamo.config, name, old)


def _backward_job() -> None:
    x = torch.ones(2, requires_grad=True)
    torch.compile(lambda t: (t * 2).sum(), backend="aot_eager")(x).backward()


def _traces_graph_breaks() -> bool:
    import torch._logging as torch_logging

    names: list[str] = []
    original = torch_logging.trace_structured

    def spy(name: str, *args: Any, **kwargs: Any) -> Any:
        metadata_fn = kwargs.get("metadata_fn", args[0] if args else None)
        metadata = metadata_fn() if name == "artifact" and callable(metadata_fn) else None
        if isinstance(metadata, dict):
            names.append(str(metadata.get("name")))
        return original(name, *args, **kwargs)

    def breaks(x: torch.Tensor) -> torch.Tensor:
        print("", end="")  # a graph break
        return x + 1

    torch_logging.trace_structured = spy
    try:
        torch._dynamo.reset()
        torch.compile(breaks, backend="eager")(torch.ones(2))
    finally:
        torch_logging.trace_structured = original
        torch._dynamo.reset()
    return "dynamo_graph_break_reason" in names


def _has_force_backend() -> bool:
    set_stance = getattr(torch._dynamo, "set_stance", None)
    return set_stance is not None and "force_backend" in inspect.signature(set_stance).parameters


def _has_evict_internals() -> bool:
    from recompprof._torch.profile import gates

    with _gate_moved("profile_evict", (0, 0)):  # ask torch, not the table
        return gates.evict_mechanism_missing() == ""


def _parks_and_reenables() -> bool:
    """A, B, A at profile limit 1 with on_reuse: the return to A runs the parked entry, with no third trace."""
    from recompprof._torch.profile.mode import ProfileMode

    def alternating(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x + (1 if tag == "A" else 2)

    torch._dynamo.reset()
    mode = ProfileMode(1)
    mode.on_reuse = lambda *args: None
    with (
        _gate_moved("profile_evict", (0, 0)),
        _gate_moved("profile_park", (0, 0)),
    ):  # ask torch, not the table
        try:
            mode.install()
            compiled = torch.compile(alternating, backend="eager")
            for tag in "ABA":
                compiled(torch.zeros(2), tag)
        except Exception:  # noqa: BLE001 - an older torch failing here does not have it
            return False
        finally:
            mode.uninstall()
            torch._dynamo.reset()
    return mode.parking and mode.stats["reenabled"] == 1 and mode.stats["traces"] == 2


def _reasons_at_compile_start() -> bool:
    """Whether a recompile's guard failures are in ``guard_failures`` when torch's start callbacks run."""
    from torch._dynamo.callback import callback_handler

    def shift(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    seen: list[int] = []

    def on_start(*_: object) -> None:
        seen.append(len(torch._dynamo.utils.guard_failures.get(shift.__code__, ())))

    callback_handler.register_start_callback(on_start)
    try:
        compiled = torch.compile(shift, backend="eager", dynamic=False)
        compiled(torch.ones(2))
        compiled(torch.ones(3))
    finally:
        if on_start in callback_handler.start_callbacks:
            callback_handler.remove_start_callback(on_start)
        torch._dynamo.reset()
    return len(seen) == 2 and seen[1] > 0


def _backward_start_named() -> bool:
    """Whether a lazily compiled backward runs the start callbacks with a LAZY_BACKWARD trigger."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return False
    triggers: list[str] = []

    def on_start(*args: object) -> None:
        trigger = getattr(args[0], "callback_trigger", None) if args else None
        triggers.append(getattr(trigger, "name", ""))

    callback_handler.register_start_callback(on_start)
    try:
        torch._dynamo.reset()
        callback_handler.register_start_callback(on_start)
        _backward_job()
    finally:
        if on_start in callback_handler.start_callbacks:
            callback_handler.remove_start_callback(on_start)
        torch._dynamo.reset()
    return "LAZY_BACKWARD" in triggers


def _reset_clears_callbacks() -> bool:
    """Whether ``torch._dynamo.reset()`` empties ``callback_handler`` through its ``clear()``."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return False
    cleared: list[bool] = []
    original = callback_handler.clear

    def clear() -> None:
        cleared.append(True)
        original()

    callback_handler.clear = clear  # type: ignore[method-assign]
    try:
        torch._dynamo.reset()
    finally:
        del callback_handler.clear
    return cleared == [True]


def _recompile_texts(around_second: Callable[[], Any]) -> list[str]:
    """torch's guard-failure texts for ``t @ t`` called once, then once inside ``around_second()``."""
    from torch._dynamo.utils import guard_failures

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t @ t

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager")
    try:
        compiled(torch.ones(2, 2))
        with around_second():
            compiled(torch.ones(2, 2))
        return [str(t) for t in guard_failures.get(fn.__code__, [])]
    finally:
        torch._dynamo.reset()


def _function_mode() -> Any:
    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    return Passing()


# What torch has, observed directly (never from the version number).
OBSERVED: dict[str, Callable[[], bool]] = {
    "compilation_metrics": _has_compilation_metrics,
    "phase_times": lambda: (
        {"aot_autograd_cumulative_compile_time_us", "inductor_cumulative_compile_time_us"}
        <= _metrics_fields()
        or {"entire_frame_compile_time_s", "backend_compile_time_s"} <= _metrics_fields()
    ),
    "guard_failures": lambda: hasattr(torch._dynamo.utils, "guard_failures"),
    "recompile_limit_hits": lambda: any(
        "limit" in str(getattr(r, "fail_reason", "") or "").lower()
        for r in _metrics_records(_limit_hit_job)
    ),
    "backward_compiles": lambda: any(
        getattr(r, "is_forward", None) is False for r in _metrics_records(_backward_job)
    ),
    "graph_breaks": lambda: (
        "graph_break" in torch._dynamo.utils.counters or hasattr(torch._dynamo.utils, "counters")
    ),
    "graph_break_trace": _traces_graph_breaks,
    "recompile_limit_name": lambda: hasattr(torch._dynamo.config, "recompile_limit"),
    "recompile_user_context": lambda: (
        hasattr(torch._dynamo.utils, "register_hook_for_recompile_user_context")
        and "recompile_user_contexts" in _metrics_fields()
    ),
    "force_backend": _has_force_backend,
    "profile_evict": _has_evict_internals,
    "profile_park": _parks_and_reenables,
    "compile_id_in_reasons": lambda: all(
        re.match(r"\d+/\d+: ", t) for t in _reason_strings("size")
    ),
    "user_stack_in_reasons": lambda: all(
        "\nUser stack trace:" in t for t in _reason_strings("global")
    ),
    "type_in_identity_reasons": lambda: all(
        "type=<class 'code'>" in t for t in _reason_strings("object_identity")
    ),
    "backend_in_reasons": lambda: all(
        "BACKEND_MATCH" in t for t in _reason_strings("backend_mismatch")
    ),
    "reasons_before_compile_start": _reasons_at_compile_start,
    "reset_clears_callbacks": _reset_clears_callbacks,
    "module_tensors_by_value": lambda: (
        getattr(torch._dynamo.config, "inline_inbuilt_nn_modules", False) is True
    ),
    "function_mode_guard": lambda: bool(_recompile_texts(_function_mode)),
    "default_device_guard": lambda: (
        bool(texts := _recompile_texts(lambda: torch.device("meta")))
        and not any("dispatch key" in t for t in texts)
    ),
    "autocast_in_global_state": lambda: all(
        "GLOBAL_STATE" in t for t in _reason_strings("autocast")
    ),
    "closure_in_compile": lambda: (
        "closure" in inspect.signature(torch._dynamo.convert_frame._compile).parameters
    ),
    "backward_compile_start": _backward_start_named,
}


@pytest.fixture(autouse=True)
def _fresh_info() -> Iterator[None]:
    versions.torch_info.cache_clear()
    yield
    versions.torch_info.cache_clear()


@pytest.mark.parametrize("gate", sorted(GATES))
def test_gate_agrees_with_installed_torch(gate: str) -> None:
    """Each gate of the table is open exactly when the installed torch has the internal it names."""
    assert set(OBSERVED) == set(GATES)
    observed = OBSERVED[gate]()
    since = ".".join(map(str, GATES[gate].since))
    assert INFO.has(gate) == observed, (
        f"torch {torch.__version__}: GATES[{gate!r}] (since {since}) says {INFO.has(gate)}, torch has it: {observed}"
    )


class _gate_moved:
    """Move one gate's version for a block (to prove an adapter reads it)."""

    def __init__(self, gate: str, since: tuple[int, int]) -> None:
        self.gate, self.since = gate, since

    def __enter__(self) -> None:
        self.old = GATES[self.gate]
        GATES[self.gate] = dataclasses.replace(self.old, since=self.since)

    def __exit__(self, *exc: object) -> None:
        GATES[self.gate] = self.old


FUTURE = (99, 0)


@pytest.mark.parametrize(
    ("gate", "signal"),
    [
        ("compilation_metrics", "compile_metrics"),
        ("guard_failures", "guard_failures"),
        ("graph_breaks", "graph_breaks"),
        ("phase_times", "phase_times"),
        ("recompile_limit_hits", "recompile_limit_hits"),
        ("backward_compiles", "backward_compiles"),
        ("backward_compile_start", "backward_compile_start"),
        ("recompile_user_context", "step_in_trace"),
    ],
)
def test_monitor_adapters_read_their_gate(gate: str, signal: str, tmp_path: Path) -> None:
    """With a gate moved past the installed torch, attach turns that signal off with the table's reason."""
    with _gate_moved(gate, FUTURE), recompprof.attach(run_dir=tmp_path) as session:
        torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    assert session.signals[signal] is False
    why = session.signals_off[signal]
    assert f"< 99.0 has no {GATES[gate].what}" in why and GATES[gate].off in why


def test_graph_breaks_fall_back_to_counters_below_the_trace_gate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Below graph_break_trace, graph breaks are read from counters['graph_break']: still recorded, and the log says what is missed."""

    def breaks(x: torch.Tensor) -> torch.Tensor:
        print("", end="")  # a graph break
        return x + 1

    caplog.set_level(logging.INFO, logger="recompprof")
    with _gate_moved("graph_break_trace", FUTURE), recompprof.attach(run_dir=tmp_path) as session:
        torch.compile(breaks, backend="eager")(torch.ones(2))
    assert session.signals["graph_breaks"] is True
    assert any(isinstance(e, GraphBreak) for e in session.recent_events())
    assert any("counters['graph_break']" in r.getMessage() for r in caplog.records)


def test_profile_mode_reads_its_gates(tmp_path: Path) -> None:
    """Profile mode falls back to 'unlimited' below profile_evict and keeps the job's backend below force_backend."""
    with (
        _gate_moved("profile_evict", FUTURE),
        recompprof.attach(mode="profile", run_dir=tmp_path) as session,
    ):
        pass
    assert (
        session._profile.mechanism == "unlimited"
        and GATES["profile_evict"].off in session._profile.why_off
    )
    with (
        _gate_moved("force_backend", FUTURE),
        recompprof.attach(mode="profile", run_dir=tmp_path) as session,
    ):
        pass
    assert session.signals["profile_backend"] is False
    assert GATES["force_backend"].off in session.signals_off["profile_backend"]


def test_profile_mode_sees_every_change_on_this_torch(tmp_path: Path) -> None:
    """Profile mode records each of 9 changes of a string argument as a python_constant recompile, by the
    mechanism the table picks for this torch (evict, or the unlimited fallback), and restores the limit."""
    config = torch._dynamo.config
    before = getattr(config, INFO.limit_config_name)

    def tagged(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    compiled = torch.compile(tagged, backend="eager")
    with recompprof.attach(mode="profile", run_dir=tmp_path) as session:
        for i in range(10):
            assert torch.equal(
                compiled(torch.ones(2), "a" * (i + 1)), torch.full((2,), float(i + 1))
            )
    expected = "evict" if INFO.has("profile_evict") and INFO.has("force_backend") else "unlimited"
    assert session._profile.mechanism == expected
    recompiles = [
        e
        for e in session.recent_events()
        if isinstance(e, Compile) and e.frame.name == "tagged" and e.is_recompile
    ]
    assert len(recompiles) == 9
    explained = [next(r for r in c.reasons if r.explains_change) for c in recompiles]
    assert {(r.category, r.subject) for r in explained} == {("python_constant", "L['tag']")}
    assert getattr(config, INFO.limit_config_name) == before


def test_below_the_reset_gate_a_reset_degrades_to_late_callbacks(tmp_path: Path) -> None:
    """Below the ``reset_clears_callbacks`` gate a reset is not watched: it raises nothing, events carry no
    generation, and the callbacks come back at the next compile record as before."""
    from torch._dynamo.callback import callback_handler

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with _gate_moved("reset_clears_callbacks", FUTURE):
        session = recompprof.attach(run_dir=str(tmp_path))
        assert "clear" not in vars(callback_handler)
        torch._dynamo.reset()
        torch.compile(double, backend="eager")(torch.ones(2))
        assert len(callback_handler.start_callbacks) == 1
        session.detach()
    events = [e for e in session.recent_events() if isinstance(e, Compile)]
    assert [(e.compile_id, e.generation) for e in events] == [("0/0", None)]


def test_limit_config_names_follow_the_table() -> None:
    """The recompile limit is read and set under the name the table gives for the installed torch."""
    name, accumulated = INFO.limit_config_name, INFO.accumulated_limit_config_name
    assert isinstance(getattr(torch._dynamo.config, name), int)
    assert isinstance(getattr(torch._dynamo.config, accumulated), int)
    old = versions.TorchInfo("2.6.0", (2, 6))
    assert (old.limit_config_name, old.accumulated_limit_config_name) == (
        "cache_size_limit",
        "accumulated_cache_size_limit",
    )


def test_why_off_names_version_internal_and_fallback() -> None:
    """A gate's off-reason names the installed version, the release that added the internal, and what recompprof does instead."""
    old = versions.TorchInfo("2.5.1", (2, 5))
    assert not old.has("force_backend") and old.has("compile_id_in_reasons")
    why = old.why_off("force_backend")
    assert why.startswith("torch 2.5.1 < 2.6 has no ") and GATES["force_backend"].off in why
    assert versions.parse("2.13.0+cpu") == (2, 13) and versions.parse("garbage") == (0, 0)
    assert all(isinstance(g, Gate) and g.since >= versions.SUPPORTED for g in GATES.values())


def test_no_version_check_outside_the_table() -> None:
    """No module of recompprof compares torch versions itself: every gate is read from versions.py."""
    pattern = re.compile(
        r"torch\.__version__|major_minor|version\.parse|packaging\.version|TorchVersion"
    )
    offenders = []
    for path in (ROOT / "recompprof").rglob("*.py"):
        if path.name == "versions.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_pyproject_torch_range_matches_supported() -> None:
    """pyproject's torch extra starts at the table's oldest supported release."""
    text = (ROOT / "pyproject.toml").read_text()
    floor = ".".join(map(str, versions.SUPPORTED))
    assert f'torch = ["torch>={floor}"' in text


def test_docs_list_every_gate_with_its_version() -> None:
    """docs/compatibility.md lists each gate of the table with the release it starts at."""
    text = (ROOT / "docs" / "compatibility.md").read_text()
    for name, gate in GATES.items():
        assert f"| `{name}` | {gate.since[0]}.{gate.since[1]} |" in text, name
