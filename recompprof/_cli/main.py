"""The ``recompprof`` command: argument parsing and dispatch to the module that does the work.

Exit codes (every command): 0 success; 1 the run broke a rule (``check``) or regressed (``diff``);
2 usage error or input that cannot be read, or was read only in part where the figures must be whole.
``run`` returns the program's own exit status (127 when the command is not found).
Commands raise their errors; :func:`exit_code` is the one table from error class to exit code.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recompprof._cli import arguments
from recompprof._errors import CommandError, RecompprofError, RuleBroken

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]
    from recompprof._analysis.check import CheckResult
    from recompprof._analysis.runs import Run

EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# The exit code of a command that ends with an exception, most specific class first (docs/cli.md
# "Exit codes" lists it per error class). RecompprofError covers ConfigError (and ExporterUnavailable,
# PortInUse), RunError, EventLogError, IngestError, CheckInputError and CommandError.
_EXIT_CODES_BY_ERROR: tuple[tuple[type[BaseException], int], ...] = (
    (KeyboardInterrupt, EXIT_INTERRUPTED),
    (BrokenPipeError, EXIT_OK),  # `recompprof report RUN | head`
    (RuleBroken, EXIT_VIOLATIONS),  # RecompiledError, SteadyStateRecompileError
    (RecompprofError, EXIT_USAGE),
    (Exception, EXIT_USAGE),  # input nobody foresaw: a recompprof bug, still one line
)

_EXIT_CODES = """exit codes:
  0  success (check: every rule holds; diff: no regressions)
  1  check: at least one rule broken; diff: at least one regression
  2  usage error, unreadable or empty input, or (check, diff) lines or files that could not be read,
     or ranks of the run's world size with no log (pass --allow-skipped to accept a partial read);
     check: counts that are incomplete (a dark signal, a rank without session_end, a gap in a log:
     pass --accept-dark-signals, --accept-incomplete-runs, --accept-log-gaps)"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recompprof",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES,
        description="Recompilation and guard-failure profiler for torch.compile.",
    )
    parser.add_argument("--version", action="version", version=f"recompprof {_version()}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    # Only the named command's parser is built when argv names one: building every command's
    # options imports what each needs (the demo's settings model, check's rules), which every
    # quick command (`history`, `report`) would otherwise pay at start. Help and typos get them all.
    chosen = argv[0] if argv and argv[0] in _COMMANDS else None
    for name, add in _COMMANDS.items():
        if chosen in (None, name):
            add(sub)
    return parser


def _add_demo(sub: Commands) -> None:
    from recompprof._cli import demo

    p = sub.add_parser(
        "demo",
        help="train a small model on CPU that recompiles, with live metrics and a report",
        formatter_class=_Formatter,
        description=demo.__doc__,
    )
    demo.add_arguments(p)


def _add_run(sub: Commands) -> None:
    from recompprof._cli import launch

    p = sub.add_parser(
        "run",
        help="profile an unmodified program: recompprof run [options] -- python train.py",
        formatter_class=_Formatter,
        description=launch.__doc__,
        epilog="exit code: the program's own (127: command not found; 2: a bad setting)",
    )
    p.add_argument(
        "--run-dir",
        type=arguments.path,
        default=None,
        help="where every process writes its event log "
        "(RECOMPPROF_RUN_DIR; default recompprof-runs/<run id>)",
    )
    p.add_argument(
        "--quiet", action="store_true", help="do not print the summary when the program ends"
    )
    launch.add_settings_options(p)
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- the program and its arguments")


def _add_report(sub: Commands) -> None:
    p = sub.add_parser(
        "report",
        help="the report of a run (terminal, or --html FILE)",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES,
    )
    p.add_argument(
        "run_dir",
        type=arguments.path,
        metavar="RUN_DIR",
        help="run directory, one event log, or a TORCH_TRACE directory",
    )
    p.add_argument(
        "--html",
        type=arguments.path,
        metavar="FILE",
        help="also write a self-contained HTML report here",
    )
    p.add_argument("--rank", type=int, action="append", help="only these ranks (repeatable)")
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="text width (default: the terminal's, else $COLUMNS, else 120)",
    )
    p.add_argument("--strict", action="store_true", help="exit 2 if any line could not be read")


def _add_check(sub: Commands) -> None:
    p = sub.add_parser(
        "check",
        help="CI gate: exit 1 when the run breaks a rule",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES + "\n\nRules apply per rank; --after-step drops what happened before "
        "that many training steps had completed.",
    )
    p.add_argument("run_dir", type=arguments.path, metavar="RUN_DIR")
    _add_check_options(p)


def _add_diff(sub: Commands) -> None:
    p = sub.add_parser(
        "diff",
        help="what got better or worse between two runs (exit 1 on regressions)",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES,
    )
    p.add_argument("run_a", type=arguments.path, metavar="RUN_A", help="the baseline")
    p.add_argument("run_b", type=arguments.path, metavar="RUN_B", help="the candidate")
    p.add_argument(
        "--max-time-increase",
        type=float,
        metavar="PCT",
        help="also count compile time growing by more than PCT percent as a regression",
    )
    p.add_argument(
        "--allow-skipped",
        action="store_true",
        help="accept runs some of whose lines, logs or ranks' logs could not be read or are missing",
    )
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="text width (default: the terminal's, else $COLUMNS, else 120)",
    )


def _add_watch(sub: Commands) -> None:
    from recompprof._cli import watch

    p = sub.add_parser(
        "watch",
        help="follow a running job's event logs: what each rank compiles now, live",
        formatter_class=_Formatter,
        description=watch.__doc__,
        epilog="exit codes: 0 every rank ended, Ctrl-C, or --once; 2 a path that is no readable run directory",
    )
    watch.add_arguments(p)


def _add_ingest(sub: Commands) -> None:
    p = sub.add_parser(
        "ingest",
        help="convert TORCH_TRACE logs into recompprof event logs",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES,
    )
    p.add_argument(
        "trace_dir",
        type=arguments.path,
        metavar="TORCH_TRACE_DIR",
        help="the TORCH_TRACE directory (or one log)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=arguments.path,
        metavar="RUN_DIR",
        help="default recompprof-runs/torch-trace-<name>",
    )
    p.add_argument("--overwrite", action="store_true", help="replace event logs already in RUN_DIR")
    p.add_argument(
        "--redact", action="store_true", help="keep no source text (only categories and subjects)"
    )


def _add_export(sub: Commands) -> None:
    from recompprof._cli import export

    p = sub.add_parser(
        "export",
        help="write runs into a history lake (Parquet tables; docs/history.md)",
        formatter_class=_Formatter,
        description=export.__doc__,
        epilog=_EXIT_CODES,
    )
    export.add_arguments(p)


def _add_history(sub: Commands) -> None:
    from recompprof._cli import history

    p = sub.add_parser(
        "history",
        help="fleet questions over an exported lake (top causes, cost, regressions, a CI gate, SQL)",
        formatter_class=_Formatter,
        description=history.__doc__,
    )
    history.add_arguments(p)


_COMMANDS: dict[str, Callable[[Commands], None]] = {
    "demo": _add_demo,
    "run": _add_run,
    "report": _add_report,
    "check": _add_check,
    "diff": _add_diff,
    "watch": _add_watch,
    "ingest": _add_ingest,
    "export": _add_export,
    "history": _add_history,
}


def _add_check_options(parser: argparse.ArgumentParser) -> None:
    """``check``'s options, from its one table of rules (and of the counts a run may be accepted without)."""
    from recompprof._analysis.check import OPTIONS, UNTRUSTED

    for option in OPTIONS:
        if option.value == "switch":
            parser.add_argument(option.flag, action="store_true", help=option.help)
        elif option.value == "categories":
            parser.add_argument(
                option.flag, action="append", default=[], metavar=option.metavar, help=option.help
            )
        else:
            number = int if option.value == "int" else float
            parser.add_argument(option.flag, type=number, metavar=option.metavar, help=option.help)
    parser.add_argument(
        "--allow-skipped",
        action="store_true",
        help="accept a run some of whose lines, logs or ranks' logs could not be read or are missing",
    )
    for untrusted in UNTRUSTED:
        parser.add_argument(untrusted.flag, action="store_true", help=untrusted.help)


def _version() -> str:
    from recompprof._version import __version__

    return __version__


def exit_code(exc: BaseException) -> int:
    """The exit code of a command that ended with ``exc`` (the first matching row of the table)."""
    return next((code for cls, code in _EXIT_CODES_BY_ERROR if isinstance(exc, cls)), EXIT_USAGE)


def _err(message: str) -> None:
    """One line on stderr; names from the input in it are shown escaped (see recompprof._model.texts),
    and a URI's secret as ``***`` (:func:`recompprof._capture.lake_uri.shown`), whatever said it."""
    from recompprof._capture.lake_uri import shown
    from recompprof._model.escaping import escape

    print(escape(shown(f"recompprof: {message}")), file=sys.stderr)


def _say(line: str) -> None:
    """One line on stdout, escaped like :func:`_err`."""
    from recompprof._model.escaping import escape

    print(escape(line))


def _columns(asked: int | None) -> int:
    """``--width``, else $COLUMNS, else the terminal's width; 120 when piped."""
    import shutil

    return asked or shutil.get_terminal_size((120, 24)).columns


def _width(asked: int | None) -> int:
    """:func:`_columns`, at least 100: narrower tables cannot hold their columns without breaking words."""
    return max(100, _columns(asked))


# A write the disk or a quota refused (standard output redirected to a full disk, say).
_FULL = (errno.ENOSPC, errno.EDQUOT)


def _explain(exc: BaseException) -> None:
    """The one line a command that ended with ``exc`` prints (none for a closed pipe)."""
    if isinstance(exc, KeyboardInterrupt):
        _err("interrupted")
    elif isinstance(exc, BrokenPipeError):
        sys.stderr.close()
    elif isinstance(exc, RecompprofError):
        _err(f"error: {exc}")
    elif isinstance(exc, OSError) and exc.errno in _FULL:  # the machine's state, never a bug
        _err(f"error: cannot write {exc.filename or 'the output'}: {exc.strerror}")
    else:
        detail = " ".join(str(exc).split())[:300]
        _err(
            f"error: unexpected {type(exc).__name__} ({detail}); this is a recompprof bug, please report it "
            "with the input that caused it"
        )


def _open(*paths: Path) -> list[Run]:
    """The runs at ``paths`` (read lazily); raises RunError when one cannot be opened, after printing
    the errors of the others, so every bad path is named."""
    from recompprof._analysis.runs import RunError, load

    runs: list[Run] = []
    failed: list[RunError] = []
    for path in paths:
        try:
            runs.append(load(path))
        except RunError as exc:
            failed.append(exc)
    for error in failed[:-1]:
        _err(f"error: {error}")
    if failed:
        raise failed[-1]
    return runs


def _finish(run: Run, *, strict: bool) -> None:
    """After the pass that computed the figures: print what was skipped; raises RunError if they must not be shown."""
    from recompprof._analysis.runs import RunError

    run.finish()
    for line in run.warnings:
        _err(f"warning: {line}")
    for line in run.problems:
        _err(("error: " if strict else "warning: ") + line)
    if strict and run.problems:
        raise RunError(
            "the figures would be incomplete; pass --allow-skipped to accept them anyway"
        )


def _report(args: argparse.Namespace) -> int:
    from recompprof._analysis.render.text import render_text
    from recompprof._analysis.report.fold import build_report
    from recompprof._analysis.report.merging import build_run_report
    from recompprof._analysis.runs import TORCH_TRACE

    [run] = _open(args.run_dir)
    wanted = set(args.rank or ())
    if wanted:
        report = build_report(e for e in run.events if e.rank in wanted)
    else:
        report = build_run_report(run.events)  # a large run in worker processes, one per CPU
    _finish(run, strict=args.strict)
    if wanted and not report.run.events:
        raise CommandError(
            f"no events of rank(s) {', '.join(map(str, args.rank))} in {args.run_dir}"
        )
    if run.source == TORCH_TRACE:
        report.notes.append(
            "read from TORCH_TRACE logs: "
            + (
                "training steps are those recompprof, attached to the job, handed torch for each forward compile"
                if report.run.steps_from_trace
                else "no training steps are recorded"
            )
        )
    # The header's text wraps at the terminal itself (between fields); only tables need 100 columns.
    print(render_text(report, width=_width(args.width), header_width=_columns(args.width)), end="")
    if args.html:
        from recompprof._analysis.render.html import render_html

        text = render_html(
            report,
            title=f"recompprof report: {args.run_dir.name}",
            warnings=run.warnings + run.problems,
        )
        try:
            args.html.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot write {args.html}: {exc.strerror or exc}") from exc
        _say(f"HTML report: {args.html}")
    return EXIT_OK


def _refuse_untrusted(result: CheckResult, args: argparse.Namespace) -> None:
    """Say the counts the run cannot vouch for on stderr: errors unless accepted, then raise; accepted, warnings."""
    from recompprof._analysis.check import UNTRUSTED, CheckInputError

    refused = {u.name: u.flag for u in UNTRUSTED if not getattr(args, u.flag[2:].replace("-", "_"))}
    for finding in result.untrusted:
        _err(("error: " if finding.rule in refused else "warning: ") + str(finding))
    options = list(dict.fromkeys(refused[f.rule] for f in result.untrusted if f.rule in refused))
    if options:
        raise CheckInputError(
            f"this run's counts are incomplete; pass {' and '.join(options)} to check it anyway"
        )


def _check(args: argparse.Namespace) -> int:
    from recompprof._analysis.check import (
        OPTIONS,
        RUNNING_COMPILE_NOTE,
        CheckInputError,
        Rules,
        check,
    )

    values = {option.name: getattr(args, option.name) for option in OPTIONS}
    try:
        rules = Rules(**{**values, "forbid": tuple(args.forbid)})
    except CheckInputError as exc:
        raise CheckInputError(f"--forbid: {exc}") from exc
    if rules.empty:
        raise CommandError(
            "no rule given; pass at least one of "
            + ", ".join(option.flag for option in OPTIONS if option.find is not None)
        )
    negative = [
        option.flag
        for option in OPTIONS
        if option.value in ("int", "float") and (values[option.name] or 0) < 0
    ]
    if negative:
        raise CommandError(f"{negative[0]} must not be negative")
    [run] = _open(args.run_dir)
    result = check(run.events, rules)
    _finish(run, strict=not args.allow_skipped)
    # Counts that cannot be trusted whole: refused unless accepted (then still said, as warnings).
    _refuse_untrusted(result, args)
    for note in result.notes:
        fail_on = " (pass --fail-on-running-compile to fail on it)"
        _err(f"warning: {note}{fail_on if note.rule == RUNNING_COMPILE_NOTE else ''}")
    for violation in result.violations:
        _say(f"FAIL {violation.rule}: {violation}")
    if result.violations:
        _say(f"recompprof check: {len(result.violations)} violation(s) in {args.run_dir}")
        return EXIT_VIOLATIONS
    _say(f"recompprof check: ok ({args.run_dir})")
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    from recompprof._analysis.diff import compare, render

    pct = args.max_time_increase
    if pct is not None and pct < 0:
        raise CommandError("--max-time-increase must not be negative")
    before, after = _open(args.run_a, args.run_b)
    diff = compare(
        before.events, after.events, max_time_increase=None if pct is None else pct / 100
    )
    _finish(before, strict=not args.allow_skipped)
    _finish(after, strict=not args.allow_skipped)
    print(render(diff, width=_width(args.width)), end="")
    return EXIT_VIOLATIONS if diff.regressions else EXIT_OK


def _ingest(args: argparse.Namespace) -> int:
    from recompprof._analysis.render.wording import counts_line
    from recompprof._analysis.trace.ingest import ingest, trace_run_id
    from recompprof._capture.identity import run_folder

    name = run_folder(trace_run_id(args.trace_dir))  # a long name is shortened
    out = args.output or Path("recompprof-runs") / name
    written, stats = ingest(args.trace_dir, out, redact=args.redact, overwrite=args.overwrite)
    if stats.describe():
        _err(f"warning: {args.trace_dir}: {stats.describe()}")
    _say(
        f"ingested {stats.files} trace log(s) -> {len(written)} event log(s) in {out}: {counts_line(stats.report)}"
    )
    _say(f"  recompprof report {out}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``recompprof`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(argv).parse_args(argv)
    try:
        if args.subcommand == "demo":
            from recompprof._cli import demo

            return demo.main(args)
        if args.subcommand == "run":
            from recompprof._cli import launch

            return launch.main(args)
        if args.subcommand == "watch":
            from recompprof._cli import watch

            return watch.main(args)
        if args.subcommand == "export":
            from recompprof._cli import export

            return export.main(args)
        if args.subcommand == "history":
            from recompprof._cli import history

            return history.main(args)
        return {"report": _report, "check": _check, "diff": _diff, "ingest": _ingest}[
            args.subcommand
        ](args)
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - every error is one line, never a traceback
        _explain(exc)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
