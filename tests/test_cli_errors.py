"""The error hierarchy and the one table that maps errors to the command's exit codes (docs/cli.md)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from recorded_runs import clean_env, cli

from recompprof import CommandError, RecompprofError, RuleBroken
from recompprof._cli import main as cli_module

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
# A row of the error table in docs/cli.md: | `package.Class` ... | code | when |
_ROW = re.compile(r"^\| `(recompprof[\w.]*)\.(\w+)`[^|]*\| (\d+) \|", re.MULTILINE)

# Every error class recompprof raises on purpose, by its public name, with the builtin base callers catch it by.
CLASSES: dict[str, type[BaseException]] = {
    "recompprof.ConfigError": ValueError,
    "recompprof.ExporterUnavailable": ValueError,
    "recompprof_prometheus.server.PortInUse": ValueError,
    "recompprof.CommandError": Exception,
    "recompprof.RunError": Exception,
    "recompprof.EventLogError": Exception,
    "recompprof.IngestError": Exception,
    "recompprof.CheckInputError": ValueError,
    "recompprof_otel.environment.OtelConfigWarning": ValueError,
    "recompprof_prometheus.render.Unsupported": Exception,
    "recompprof.testing.RecompiledError": AssertionError,
    "recompprof.integrations.SteadyStateRecompileError": RuntimeError,
}


def _load(dotted: str) -> type[BaseException]:
    module, _, name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls, type) and issubclass(cls, BaseException)
    return cls


def _instance(cls: type[BaseException]) -> BaseException:
    return cls("message", []) if cls.__name__ == "RecompiledError" else cls("message")


def _documented() -> dict[str, int]:
    return {
        f"{module}.{name}": int(code)
        for module, name, code in _ROW.findall(DOC.read_text(encoding="utf-8"))
    }


def test_every_error_has_the_common_base_and_keeps_its_builtin_base() -> None:
    """Each error class derives from RecompprofError and still from the builtin base existing callers catch."""
    for dotted, builtin in CLASSES.items():
        cls = _load(dotted)
        assert issubclass(cls, RecompprofError), dotted
        assert issubclass(cls, builtin), dotted
        assert isinstance(_instance(cls), RecompprofError)


def test_docs_list_every_error_class_and_the_table_gives_its_documented_code() -> None:
    """docs/cli.md names every error class once, and exit_code() returns the code the docs give for it."""
    documented = _documented()
    assert set(documented) == set(CLASSES)
    for dotted, code in documented.items():
        assert cli_module.exit_code(_instance(_load(dotted))) == code, dotted
    # The codes themselves: rules the user set -> 1 (like a failed check), everything else -> 2.
    assert documented["recompprof.testing.RecompiledError"] == cli_module.EXIT_VIOLATIONS == 1
    assert documented["recompprof.integrations.SteadyStateRecompileError"] == 1
    assert documented["recompprof.ConfigError"] == cli_module.EXIT_USAGE == 2


def test_exit_codes_of_what_is_not_a_recompprof_error() -> None:
    """Ctrl-C exits 130, a closed pipe 0, and any other exception (a recompprof bug) 2."""
    assert cli_module.exit_code(KeyboardInterrupt()) == 130
    assert cli_module.exit_code(BrokenPipeError()) == 0
    assert cli_module.exit_code(ZeroDivisionError("x")) == 2
    assert cli_module.exit_code(RuleBroken("x")) == 1
    assert cli_module.exit_code(CommandError("x")) == 2


def test_main_prints_one_error_line_and_returns_the_table_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A RunError (missing path) and a CommandError (no rule) each end main() with one stderr line and code 2."""
    missing = tmp_path / "absent"
    assert cli_module.main(["report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"recompprof: error: {missing}: no such file or directory"]
    assert cli_module.main(["check", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("recompprof: error: no rule given") and len(err.splitlines()) == 1


def test_diff_names_both_unreadable_runs(tmp_path: Path) -> None:
    """diff with two bad paths reports both, one line each, then exits 2 (the real command)."""
    done = cli("diff", str(tmp_path / "a"), str(tmp_path / "b"))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and str(tmp_path / "a") in lines[0] and str(tmp_path / "b") in lines[1]
    assert all(line.startswith("recompprof: error:") for line in lines)


def _trace_dir_without_logs(tmp_path: Path) -> Path:
    """A directory whose only entry named like a TORCH_TRACE log is a directory: no log can be read."""
    from recompprof._analysis.trace.records import TRACE_PREFIX

    (tmp_path / f"{TRACE_PREFIX}rank_0.log").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("make", "cause", "message"),
    [
        (
            lambda tmp: tmp / "absent",
            "recompprof._eventlog.reader.EventLogError",
            "{path}: no such file or directory",
        ),
        (
            _trace_dir_without_logs,
            "recompprof._analysis.trace.ingest.IngestError",
            "{path}: no TORCH_TRACE logs",
        ),
        (
            lambda tmp: tmp / ("x" * 5000),
            "builtins.OSError",
            "cannot read {path}: File name too long",
        ),
    ],
    ids=["event-log", "torch-trace", "os"],
)
def test_a_run_error_keeps_the_error_that_caused_it(
    make: Any, cause: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path that cannot be read as a run raises RunError whose cause is the reader's own error (its class and
    fields reachable as ``__cause__``), while main() still prints the one documented line and exits 2."""
    from recompprof._analysis.runs import RunError, load

    path = make(tmp_path)
    with pytest.raises(RunError) as raised:
        load(path)
    assert isinstance(raised.value.__cause__, _load(cause))
    assert str(raised.value).startswith(message.format(path=path))
    assert cli_module.main(["report", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"recompprof: error: {raised.value}"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_an_answer_written_to_a_full_disk_is_one_line_not_a_bug(tmp_path: Path) -> None:
    """Standard output on a full disk (``/dev/full``: every write fails with ENOSPC) ends the real
    command with one line saying it could not write, exit 2, not "this is a recompprof bug"; a
    closed pipe still exits 0 quietly."""
    lake = tmp_path / "lake"
    lake.mkdir()
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "recompprof._cli.main", "history", "sql", "--lake", str(lake),
             "SELECT range AS n FROM range(5000)"],
            stdout=full, stderr=subprocess.PIPE, text=True, env=clean_env(), timeout=120,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "recompprof: error: cannot write the output: No space left on device"
    )
    assert "recompprof bug" not in done.stderr
