"""``recompprof run [options] -- COMMAND ...``: profile an unmodified program (and every torchrun rank).

The command runs as a child with ``RECOMPPROF_ATTACH=1``, the chosen settings as ``RECOMPPROF_*``
variables, and :mod:`recompprof._bootstrap` first on ``PYTHONPATH``; its ``sitecustomize`` attaches in
every Python process that imports torch. All processes share one run directory and run id, so the
report afterwards covers every rank.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recompprof._capture import exporting, settings as settings_module
from recompprof._capture.identity import new_run_id, run_folder
from recompprof._errors import CommandError
from recompprof._model.naming import as_text

BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "_bootstrap"
EXIT_NOT_FOUND = 127
# Settings that make no sense to pass per command line here, or are set by ``run`` itself.
_NOT_OPTIONS = {"run_dir"}


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    """One option per ``attach()`` setting, named after it (``--recompile-limit`` -> ``recompile_limit``)."""
    group = parser.add_argument_group(
        "settings (same as attach(); each sets its RECOMPPROF_* variable)"
    )
    for name, field in settings_module.Settings.model_fields.items():
        if name in _NOT_OPTIONS:
            continue
        flag = "--" + name.replace("_", "-")
        env = settings_module.ENV_PREFIX + name.upper()
        if field.annotation is bool:
            group.add_argument(
                flag,
                dest=f"setting_{name}",
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{env} (default {field.default})",
            )
        else:
            shown = field.default if field.default not in (None, []) else "unset"
            group.add_argument(
                flag,
                dest=f"setting_{name}",
                metavar="VALUE",
                default=None,
                help=f"{env} (default {shown})",
            )


def chosen_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        key.removeprefix("setting_"): value
        for key, value in vars(args).items()
        if key.startswith("setting_") and value is not None
    }


def child_environment(
    base: Mapping[str, str], overrides: Mapping[str, Any], run_dir: Path, run_id: str
) -> dict[str, str]:
    """The child's environment: ours plus the settings, the attach switch and the bootstrap path."""
    env = dict(base)
    for name, value in overrides.items():
        env[settings_module.ENV_PREFIX + name.upper()] = _env_value(value)
    env["RECOMPPROF_RUN_DIR"] = str(run_dir)
    env.setdefault("RECOMPPROF_RUN_ID", run_id)
    env["RECOMPPROF_ATTACH"] = "1"
    env.setdefault(
        "RECOMPPROF_STATUS_LINE", "1"
    )  # drawn only where the child's stderr is a terminal
    paths = [str(BOOTSTRAP_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def main(args: argparse.Namespace) -> int:
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CommandError(
            "no command given; usage: recompprof run [options] -- python train.py ..."
        )
    overrides = chosen_settings(args)
    run_id = as_text(os.environ.get("RECOMPPROF_RUN_ID") or new_run_id())
    run_dir = Path(
        args.run_dir
        or os.environ.get("RECOMPPROF_RUN_DIR")
        or Path("recompprof-runs") / run_folder(run_id)
    ).resolve()
    env = child_environment(os.environ, overrides, run_dir, run_id)
    validate(run_dir, overrides)
    code = _run_child(command, env)
    if not args.quiet:
        _summarise(run_dir)
    return code


def validate(run_dir: Path, overrides: Mapping[str, Any]) -> None:
    """Raise the ConfigError ``attach()`` would raise in every rank, before the program starts: the settings
    and their combinations, and what each chosen exporter checks when it is built (its extra installed,
    Prometheus' address, TLS files and credentials). Nothing is started or written."""
    resolved = settings_module.load(run_dir=run_dir, **overrides)
    for name in dict.fromkeys(resolved.exporters):
        exporting.load(name, resolved)


def _run_child(command: list[str], env: dict[str, str]) -> int:
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        print(f"recompprof run: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except PermissionError:
        print(f"recompprof run: permission denied: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND - 1
    # Ctrl-C reaches the child through the terminal; we wait for it to finish writing its logs.
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
    return 128 - code if code < 0 else code


def _summarise(run_dir: Path) -> None:
    """A few lines on stderr: the counts, the costliest cause, and where the full report is."""
    from recompprof._analysis.render.text import render_summary
    from recompprof._analysis.report.fold import build_report
    from recompprof._analysis.runs import RunError, load

    try:
        run = load(run_dir)
    except RunError as exc:
        print(f"recompprof run: no report: {exc}", file=sys.stderr)
        return
    report = build_report(run.events)
    try:
        run.finish()
    except RunError as exc:
        print(f"recompprof run: no report: {exc}", file=sys.stderr)
        return
    for line in run.problems + run.warnings:
        print(f"recompprof: warning: {line}", file=sys.stderr)
    print(render_summary(report), end="", file=sys.stderr)
    print(
        f"event logs: {run_dir}\n"
        f"  full report: recompprof report {run_dir}   (--html report.html for the HTML one)\n"
        f"  CI gate:     recompprof check {run_dir} --max-recompiles 0 --after-step N",
        file=sys.stderr,
    )
