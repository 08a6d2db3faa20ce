"""scripts/compat_table.py, the torch compatibility matrix: a column for every capture signal that a
version gate (recompprof/_torch/versions.py) can turn off, each filled from what a real session on the
installed torch reports (the probe's ``monitor`` signals)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import recompprof
from recompprof._torch.versions import GATES

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compat_table.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compat_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def monitor(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """The signals (and why off) of a monitor-mode session that compiled one function, as the probe
    reports them."""

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path_factory.mktemp("run")) as session:
        torch.compile(double, backend="eager")(torch.ones(2))
    return {"signals": dict(session.signals), "signals_off": dict(session.signals_off)}


def test_every_signal_a_version_gate_turns_off_has_a_column(
    monitor: dict[str, dict[str, object]],
) -> None:
    """Each signal a session reports under the name of a version gate is a column of the matrix
    (backward_compile_start, gated at 2.8, among them)."""
    gated = set(monitor["signals"]) & set(GATES)
    assert "backward_compile_start" in gated
    assert gated <= set(_script().SIGNALS), gated - set(_script().SIGNALS)


def test_the_matrix_shows_each_signal_as_the_probe_saw_it(
    monitor: dict[str, dict[str, object]], tmp_path: Path
) -> None:
    """Run on a results folder holding this torch's probe, the script prints each signal column as
    live or off as the session had it, and a note with the reason for each signal that is off."""
    version = torch.__version__.split("+")[0]
    folder = tmp_path / version
    folder.mkdir()
    probe = {"torch": torch.__version__, "monitor": monitor, "profile": {}}
    (folder / "probe.json").write_text(json.dumps(probe))
    (folder / "run.json").write_text(json.dumps({"install_rc": 0, "tests_rc": 0}))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), version],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = [line.strip("|").split("|") for line in done.stdout.splitlines() if line.startswith("|")]
    header, cells = ([c.strip() for c in row] for row in (rows[0], rows[2]))
    shown = dict(zip(header, cells))
    signals = monitor["signals"]
    for name in _script().SIGNALS:
        assert shown[name] == ("live" if signals.get(name) else "off" if name in signals else "?")
    assert shown["backward_compile_start"] in ("live", "off")
    for name, why in monitor["signals_off"].items():
        if name in _script().SIGNALS:
            assert f"- {version} `{name}` off: {why}" in done.stdout
