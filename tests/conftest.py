"""Suite-wide fixtures: internal errors fail tests, every test starts from a clean torch and session, and a real OTLP receiver for the tests that ask for one."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generated_runs import generate

from recompprof import _internal
from recompprof.testing import raise_internal_errors


@pytest.fixture(scope="session")
def generated_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated three-rank run of 3,000 events per rank (real event models, real reason parser;
    ``generated_runs.generate``), with a corrupt line and a torn tail in rank 1."""
    where = tmp_path_factory.mktemp("generated") / "run"
    generate(where, ranks=3, per_rank=3000, seed=5)
    with next(where.glob("rank00001-*.jsonl")).open("ab") as f:
        f.write(b'{not json}\n{"schema_version": 1, "kind": "comp')
    return where


@pytest.fixture(autouse=True)
def internal_errors_raise() -> Iterator[None]:
    """Turn recompprof's swallowed internal errors into test failures (the public strict-mode switch)."""
    _internal.reset()
    with raise_internal_errors():
        yield


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No RECOMPPROF_* leaks in from the environment; event logs go to the test's tmp dir; no session outlives a test."""
    for key in list(__import__("os").environ):
        if key.startswith("RECOMPPROF_") and key != "RECOMPPROF_VENV":
            monkeypatch.delenv(key)
    monkeypatch.setenv("RECOMPPROF_RUN_DIR", str(tmp_path / "run"))
    # No linger for a final scrape at detach unless a test asks for it (each would wait a scrape interval).
    monkeypatch.setenv("RECOMPPROF_PROMETHEUS_LINGER_SECONDS", "0")
    yield
    from recompprof._capture import session as session_module

    live = session_module.current()
    if live is not None:
        live.detach()
    if "torch" in sys.modules:
        import torch

        torch._dynamo.reset()


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real OTLP/HTTP receiver, with the standard endpoint variable pointing at it."""
    from otlp_receiver import OtlpReceiver

    with OtlpReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        yield rx
