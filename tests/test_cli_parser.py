"""The command line builds only the parser of the command it was given.

Building every command's options imports what each needs (the demo's settings model with
pydantic-settings, check's rule table); a quick command such as ``history`` or ``report`` must not
pay for that at start. Help and an unknown command still see every command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from generated_runs import generate

from recompprof._cli import arguments, main as main_module

PROBE = """
import sys
from recompprof._cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    print("exit", done.code, file=sys.stderr)
print("loaded:" + ",".join(m for m in ("pydantic_settings", "recompprof._analysis.check") if m in sys.modules))
"""


def _loaded(*argv: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120
    )
    last = done.stdout.splitlines()[-1]
    assert last.startswith("loaded:"), done.stdout + done.stderr
    return last.removeprefix("loaded:"), done.stderr


@pytest.mark.parametrize("command", ["history", "export", "report", "diff", "ingest"])
def test_a_quick_command_imports_neither_the_demo_settings_nor_the_check_rules(
    command: str,
) -> None:
    loaded, stderr = _loaded(command, "--help")
    assert "exit 0" in stderr
    assert loaded == ""


def test_top_level_help_and_an_unknown_command_still_list_every_command() -> None:
    for argv in (["--help"], ["histroy"]):
        done = subprocess.run(
            [sys.executable, "-m", "recompprof._cli.main", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        text = done.stdout + done.stderr
        for command in ("demo", "run", "report", "check", "diff", "watch", "ingest", "export"):
            assert command in text, (argv, command)
        assert "history" in text


def test_check_still_gets_its_rule_options() -> None:
    loaded, stderr = _loaded("check", "--help")
    assert "exit 0" in stderr
    assert "recompprof._analysis.check" in loaded


def _every_action(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
    """Every argument of ``parser`` and of its subcommands, with the command line that reaches it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for where, inner in _every_action(sub):
                    yield f"{name} {where}".strip(), inner
        else:
            yield "", action


def test_every_path_and_lake_argument_refuses_an_empty_value() -> None:
    """No argument is typed as a bare ``Path`` (which reads "" as "."): each path takes
    ``arguments.path`` and each lake ``arguments.uri``, which refuse it."""
    parser = main_module._parser([])
    typed = {}
    for command, action in _every_action(parser):
        name = action.dest
        assert action.type is not Path, f"{command} {name}: type=Path reads '' as '.'"
        if name in ("lake", "to") or action.type in (arguments.path, arguments.uri):
            typed[f"{command} {name}"] = action.type
    assert typed["report run_dir"] is arguments.path
    assert typed["export to"] is typed["history compare lake"] is arguments.uri
    assert all(t in (arguments.path, arguments.uri) for t in typed.values()), typed


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["report", ""], "RUN_DIR"),
        (["check", "", "--max-recompiles", "1000"], "RUN_DIR"),
        (["diff", "", "."], "RUN_A"),
        (["watch", ""], "RUN_DIR"),
        (["export", "", "--to", "lake"], "RUN_DIR"),
        (["export", ".", "--to", ""], "--to"),
        (["history", "top-causes", "--lake", ""], "--lake"),
        (["history", "compare", "run-x", "--lake", ""], "--lake"),
        (["report", ".", "--html", ""], "--html"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_an_empty_path_is_an_error_naming_it_not_the_current_folder(
    argv: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unset variable on a command line (`report "$RUN"`) ends with exit 2 and one error naming the
    argument, even where the folder the command runs in holds a run and a lake it could have read
    (before, `report ""` reported this folder's run and exited 0)."""
    monkeypatch.chdir(tmp_path)
    generate(tmp_path, ranks=1, per_rank=200, seed=3)
    assert main_module.main(["export", ".", "--to", "lake"]) == 0
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as done:
        main_module.main(argv)
    assert done.value.code == 2
    last = err.getvalue().splitlines()[-1]
    assert last.startswith(f"recompprof {argv[0]}"), last
    assert f"error: argument {named}: empty (an unset variable?)" in last, last
