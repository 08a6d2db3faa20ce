"""Suite-wide fixtures: internal errors fail tests, every test starts from a clean torch and session, and a real OTLP receiver for the tests that ask for one."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import needs
import recordings
from generated_runs import generate
from suite_timing import register as register_timing

from recompprof import _internal
from recompprof.testing import raise_internal_errors


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--recordings",
        metavar="DIR",
        default=None,
        help="keep real-run recordings in DIR and reuse them while their key matches "
        "(default: recorded afresh once per session; tests/recordings.py)",
    )
    parser.addoption(
        "--quick",
        action="store_true",
        help="the edit loop's tier: leave out tests marked workload, servers, inductor or gpu, "
        "but for one shared real run's (tests/needs.py)",
    )
    parser.addoption(
        "--timing-files",
        type=int,
        default=0,
        metavar="N",
        help="print wall and CPU seconds of the N slowest test files at the end (0: off)",
    )


def pytest_configure(config: pytest.Config) -> None:
    register_timing(config)
    needs.register(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs.mark_fixture_users(items)
    needs.quick_tier(config, items)
    needs.heavy_first(items)


def _session_dir(factory: pytest.TempPathFactory) -> Path:
    """The temporary directory of the whole session: pytest-xdist's workers each have one below it."""
    base = factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


def _recordings_root(config: pytest.Config, session: Path) -> Path:
    kept = config.getoption("--recordings")
    return Path(kept).resolve() if kept else session / "recordings"


@pytest.fixture(scope="session", autouse=True)
def recording_cache(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Where this session's real runs are recorded, each once (``recordings.py``): shared by every
    pytest-xdist worker of the session (their common temporary directory), or ``--recordings DIR``."""
    session = _session_dir(tmp_path_factory)
    root = _recordings_root(request.config, session)
    recordings.configure(
        root,
        keep=bool(request.config.getoption("--recordings")),
        requests=session / "recording-requests.log",
    )
    return root


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """How many real runs the session recorded for how many requests (``recordings.summary``)."""
    factory = getattr(
        config, "_tmp_path_factory", None
    )  # pytest's own, as the tmp_path fixtures use
    if factory is None or "PYTEST_XDIST_WORKER" in os.environ:
        return
    session = _session_dir(factory)
    line = recordings.summary(session / "recording-requests.log", _recordings_root(config, session))
    if line:
        terminalreporter.write_line(line)


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
    """No RECOMPPROF_* or terminal size leaks in from the environment (pytest-xdist's workers set
    COLUMNS=80); event logs go to the test's tmp dir; no session outlives a test."""
    for key in list(os.environ):
        if key.startswith("RECOMPPROF_") and key != "RECOMPPROF_VENV":
            monkeypatch.delenv(key)
    for key in ("COLUMNS", "LINES"):
        monkeypatch.delenv(key, raising=False)
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
