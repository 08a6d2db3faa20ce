"""The command line builds only the parser of the command it was given.

Building every command's options imports what each needs (the demo's settings model with
pydantic-settings, check's rule table); a quick command such as ``history`` or ``report`` must not
pay for that at start. Help and an unknown command still see every command.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

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
