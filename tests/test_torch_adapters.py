"""Torch adapters bow out politely when internals are missing, and never raise into torch."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import recompprof
from recompprof import _internal
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile
from recompprof._model.vocabulary import PHASES
from recompprof._torch import versions
from recompprof._torch.phases import exclusive_phases
from recompprof.testing import raise_internal_errors

pytestmark = pytest.mark.torch_compat


def test_missing_guard_failures_turns_that_signal_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without torch's guard_failures record, attach still succeeds, says the signal is off, and compiles are still recorded."""
    import torch._dynamo.utils as utils

    monkeypatch.delattr(utils, "guard_failures")
    with recompprof.attach(run_dir=tmp_path) as session:
        torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    assert session.signals["guard_failures"] is False
    assert "guard_failures" in session.signals_off["guard_failures"]
    assert any(isinstance(e, Compile) for e in read_file(session.event_log_path))


def test_altered_metrics_record_is_counted_not_raised(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A CompilationMetrics record of an unexpected shape is counted as an internal error and never reaches torch."""
    import torch._dynamo.utils as utils

    raise_internal_errors(False)
    # the function recompprof takes records from (before 2.6 there is only the log call); torch's own would choke
    hook = (
        "add_compilation_metrics_to_chromium"
        if hasattr(utils, "add_compilation_metrics_to_chromium")
        else "log_compilation_event"
    )
    monkeypatch.setattr(utils, hook, lambda metrics: None)
    with recompprof.attach(run_dir=tmp_path):
        record = type("CompilationMetrics", (), {})()  # no fields at all
        getattr(utils, hook)(record)
        out = torch.compile(lambda x: x * 3, backend="eager")(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 3.0))
    assert _internal.counts().get("torch.compile_metrics") == 1


def test_failing_exporter_never_reaches_the_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An exporter that raises on every event is counted and logged once while training goes on."""
    raise_internal_errors(False)

    class Broken:
        name = "broken"

        def start(self, session: object) -> None: ...

        def on_event(self, event: object) -> None:
            raise RuntimeError("sink down")

        def shutdown(self, timeout: float = 5.0) -> None: ...

    from recompprof._capture import exporting

    monkeypatch.setattr(exporting, "load", lambda name, settings: Broken())
    with recompprof.attach(run_dir=tmp_path, exporters=["otel"]):
        torch.compile(lambda x: x - 1, backend="eager")(torch.ones(2))
    assert _internal.counts()["exporter.broken"] >= 3  # session_start, compile, session_end


def test_compiles_from_several_threads_are_all_recorded(tmp_path: Path) -> None:
    """Compiles running in four threads at once each produce exactly one compile event."""
    fns = [torch.compile(lambda x, k=k: x * k, backend="eager") for k in range(4)]
    with recompprof.attach(run_dir=tmp_path) as session:
        threads = [threading.Thread(target=fn, args=(torch.ones(3),)) for fn in fns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    compiles = [e for e in read_file(session.event_log_path) if isinstance(e, Compile)]
    assert len(compiles) == 4
    assert len({c.compile_id for c in compiles}) == 4


def test_detach_while_another_thread_compiles(tmp_path: Path) -> None:
    """Detaching while another thread keeps compiling neither raises nor loses the log's integrity."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def compile_loop() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                torch.compile(lambda x, n=n: x + n, backend="eager")(torch.ones(2))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    worker = threading.Thread(target=compile_loop)
    session = recompprof.attach(run_dir=tmp_path)
    worker.start()
    import time

    time.sleep(0.5)
    session.detach()
    time.sleep(0.3)
    stop.set()
    worker.join()
    assert not errors
    events = list(read_file(session.event_log_path))
    assert events[-1].kind == "session_end"


def test_version_gates_follow_the_minimum_table() -> None:
    """Feature flags come from one table of minimum versions (e.g. force_backend from 2.6, recompile_limit name from 2.7)."""
    old = versions.TorchInfo("2.5.1", (2, 5))
    new = versions.TorchInfo("2.13.0", (2, 13))
    assert not old.has("force_backend") and new.has("force_backend")
    assert (
        old.limit_config_name == "cache_size_limit" and new.limit_config_name == "recompile_limit"
    )
    assert versions.parse("2.13.0+cpu") == (2, 13) and versions.parse("garbage") == (0, 0)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (  # cold Inductor forward, recorded on torch 2.13 CPU
            dict(
                is_forward=True,
                duration_us=13627299,
                dynamo_cumulative_compile_time_us=13627299,
                aot_autograd_cumulative_compile_time_us=13293167,
                inductor_cumulative_compile_time_us=12400881,
                inductor_code_gen_cumulative_compile_time_us=12282360,
                triton_compile_time_us=949049,
            ),
            dict(
                dynamo_trace=0.334132,
                aot_autograd=0.892286,
                inductor_lowering=0.118521,
                code_gen=11.333311,
                kernel_compile=0.949049,
                other=0.0,
            ),
        ),
        (  # Inductor backward, recorded on torch 2.13 CPU
            dict(
                is_forward=False,
                duration_us=1286977,
                backward_cumulative_compile_time_us=1286977,
                inductor_cumulative_compile_time_us=1280310,
                inductor_code_gen_cumulative_compile_time_us=1236273,
                triton_compile_time_us=1008037,
            ),
            dict(
                dynamo_trace=0.0,
                aot_autograd=0.006667,
                inductor_lowering=0.044037,
                code_gen=0.228236,
                kernel_compile=1.008037,
                other=0.0,
            ),
        ),
        (  # torch 2.4/2.5 field names (seconds, no duration_us, no kernel compile field); constructed values
            dict(
                compile_id="0/0",
                entire_frame_compile_time_s=2.5,
                backend_compile_time_s=2.0,
                inductor_compile_time_s=1.5,
                code_gen_time_s=1.0,
            ),
            dict(
                dynamo_trace=0.5,
                aot_autograd=0.5,
                inductor_lowering=0.5,
                code_gen=1.0,
                kernel_compile=0.0,
                other=0.0,
            ),
        ),
        (  # eager backend: no Inductor fields at all
            dict(
                is_forward=True,
                duration_us=29783,
                dynamo_cumulative_compile_time_us=29783,
                aot_autograd_cumulative_compile_time_us=156,
            ),
            dict(
                dynamo_trace=0.029627,
                aot_autograd=0.000156,
                inductor_lowering=0.0,
                code_gen=0.0,
                kernel_compile=0.0,
                other=0.0,
            ),
        ),
    ],
)
def test_exclusive_phases_from_nested_cumulative_fields(
    fields: dict[str, object], expected: dict[str, float]
) -> None:
    """Nested cumulative torch timings become exclusive phases that sum to the compile's duration."""
    record = SimpleNamespace(**fields)
    total, phases = exclusive_phases(record)
    assert list(phases) == list(PHASES)
    assert phases == pytest.approx(expected, abs=1e-9)
    assert sum(phases.values()) == pytest.approx(total)


def test_guard_set_fingerprint_ignores_dynamo_numbering_and_order() -> None:
    """guard_set hashes the guard parts with Dynamo's per-compile global numbers normalised and in sorted order:
    the digest equals hashing each normalised part (NUL-terminated) in sorted order, including parts that hold a NUL."""
    import hashlib

    from recompprof._torch.guard_failures import _NUMBERED_GLOBAL, guard_set

    def reference(parts: list[str]) -> str:
        digest = hashlib.blake2b(digest_size=8)
        for part in sorted(_NUMBERED_GLOBAL.sub("___", p) for p in parts):
            digest.update(part.encode("utf-8", "replace") + b"\0")
        return digest.hexdigest()

    def code(parts: list[str]) -> SimpleNamespace:
        return SimpleNamespace(guard_manager=SimpleNamespace(code_parts=parts))

    parts = [
        "___check_obj_id(G['__builtins_dict___4'], 7)",
        "L['x'].size()[0] == 3",
        "caf\u00e9 \ud800",
    ]
    renumbered = [parts[2], parts[1], "___check_obj_id(G['__builtins_dict___12'], 7)"]
    assert guard_set(code(parts)) == reference(parts)
    assert guard_set(code(renumbered)) == guard_set(code(parts))
    assert guard_set(code(["L['y'].size()[0] == 3", parts[0]])) != guard_set(code(parts))
    with_nul = ["a\0b___3", "c___1"]
    assert guard_set(code(with_nul)) == reference(with_nul)
    assert guard_set(code([])) is None


def test_internal_contain_counts_errors_but_not_exits() -> None:
    """_internal.contain counts and swallows an Exception (re-raises it in strict mode), and lets KeyboardInterrupt through uncounted."""
    try:
        with raise_internal_errors(False), _internal.contain("test.contain", "a hint"):
            raise ValueError("contained")
        assert _internal.counts()["test.contain"] == 1
        with pytest.raises(ValueError, match="strict"), _internal.contain("test.contain"):
            raise ValueError("strict")
        assert _internal.counts()["test.contain"] == 2
        with pytest.raises(KeyboardInterrupt), _internal.contain("test.exit"):
            raise KeyboardInterrupt
        assert "test.exit" not in _internal.counts()
    finally:
        _internal.reset()


def test_public_strict_mode_switch() -> None:
    """recompprof.testing.raise_internal_errors switches internal errors between re-raised and counted-only:
    called, the mode stays; as a context manager, the previous mode is back after the block."""
    assert (
        _internal.raising()
    )  # the suite runs strict, through this same switch (tests/conftest.py)
    with raise_internal_errors(False):
        assert not _internal.raising()
        with _internal.contain("test.switch"):
            raise ValueError("counted only")
    assert _internal.raising()
    raise_internal_errors(False)
    assert not _internal.raising()
    with (
        raise_internal_errors(),
        pytest.raises(ValueError, match="raised"),
        _internal.contain("test.switch"),
    ):
        raise ValueError("raised")
    assert not _internal.raising()
    assert _internal.counts()["test.switch"] == 2
