"""The ``recompprof`` command: argument parsing and dispatch to the module that does the work.

Exit codes (every command): 0 success; 1 the run broke a rule (``check``) or regressed (``diff``);
2 usage error or input that cannot be read, or was read only in part where the figures must be whole.
``run`` returns the program's own exit status (127 when the command is not found).
Commands raise their errors; :func:`exit_code` is the one table from error class to exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recompprof._errors import CommandError, RecompprofError, RuleBroken

if TYPE_CHECKING:
    from recompprof._analysis.check import Violation
    from recompprof._analysis.report.runs import Run

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
  2  usage error, unreadable or empty input, or (check, diff) lines or files that could not be read
     (pass --allow-skipped to accept a partial read); check: counts that are incomplete (a dark signal,
     a rank without session_end, a gap in a log: pass --accept-dark-signals, --accept-incomplete-runs,
     --accept-log-gaps)"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recompprof",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES,
        description="Recompilation and guard-failure profiler for torch.compile.",
    )
    parser.add_argument("--version", action="version", version=f"recompprof {_version()}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)

    from recompprof._cli import demo, launch, watch

    p = sub.add_parser(
        "demo",
        help="train a small model on CPU that recompiles, with live metrics and a report",
        formatter_class=_Formatter,
        description=demo.__doc__,
    )
    demo.add_arguments(p)

    p = sub.add_parser(
        "run",
        help="profile an unmodified program: recompprof run [options] -- python train.py",
        formatter_class=_Formatter,
        description=launch.__doc__,
        epilog="exit code: the program's own (127: command not found; 2: a bad setting)",
    )
    p.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="where every process writes its event log "
        "(RECOMPPROF_RUN_DIR; default recompprof-runs/<run id>)",
    )
    p.add_argument(
        "--quiet", action="store_true", help="do not print the summary when the program ends"
    )
    launch.add_settings_options(p)
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- the program and its arguments")

    p = sub.add_parser(
        "report",
        help="the report of a run (terminal, or --html FILE)",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES,
    )
    p.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN_DIR",
        help="run directory, one event log, or a TORCH_TRACE directory",
    )
    p.add_argument(
        "--html", type=Path, metavar="FILE", help="also write a self-contained HTML report here"
    )
    p.add_argument("--rank", type=int, action="append", help="only these ranks (repeatable)")
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="text width (default: the terminal's, else $COLUMNS, else 120)",
    )
    p.add_argument("--strict", action="store_true", help="exit 2 if any line could not be read")

    p = sub.add_parser(
        "check",
        help="CI gate: exit 1 when the run breaks a rule",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES + "\n\nRules apply per rank; --after-step drops what happened before "
        "that many training steps had completed.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument(
        "--max-recompiles", type=int, metavar="N", help="most recompiles any one frame may have"
    )
    p.add_argument(
        "--max-total-recompiles", type=int, metavar="N", help="most recompiles over all frames"
    )
    p.add_argument(
        "--after-step", type=int, metavar="S", help="only count events at training step >= S"
    )
    p.add_argument(
        "--max-compile-seconds", type=float, metavar="T", help="most seconds spent compiling"
    )
    p.add_argument(
        "--max-recompile-seconds",
        type=float,
        metavar="T",
        help="most compile seconds lost to recompiles (their backward compiles included)",
    )
    p.add_argument(
        "--forbid",
        action="append",
        default=[],
        metavar="CATEGORY",
        help="fail when a recompile is caused by this reason category (repeatable)",
    )
    p.add_argument("--max-limit-hits", type=int, metavar="N", help="most recompile-limit hits")
    p.add_argument("--max-graph-breaks", type=int, metavar="N", help="most graph breaks")
    p.add_argument("--max-failures", type=int, metavar="N", help="most compile failures")
    p.add_argument(
        "--fail-on-running-compile",
        action="store_true",
        help="fail when a rank's run ended with a compile still running (a stall, or a job stopped mid-compile)",
    )
    p.add_argument(
        "--allow-skipped",
        action="store_true",
        help="accept a run some of whose lines could not be read",
    )
    p.add_argument(
        "--accept-dark-signals",
        action="store_true",
        help="accept a run in which a capture signal was off or went dark (its counts are incomplete)",
    )
    p.add_argument(
        "--accept-incomplete-runs",
        action="store_true",
        help="accept a run in which a rank ended without session_end (killed, crashed or still running)",
    )
    p.add_argument(
        "--accept-log-gaps",
        action="store_true",
        help="accept a run whose session_end counts events its log lacks (a full disk, a deleted log)",
    )

    p = sub.add_parser(
        "diff",
        help="what got better or worse between two runs (exit 1 on regressions)",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES,
    )
    p.add_argument("run_a", type=Path, metavar="RUN_A", help="the baseline")
    p.add_argument("run_b", type=Path, metavar="RUN_B", help="the candidate")
    p.add_argument(
        "--max-time-increase",
        type=float,
        metavar="PCT",
        help="also count compile time growing by more than PCT percent as a regression",
    )
    p.add_argument(
        "--allow-skipped",
        action="store_true",
        help="accept runs some of whose lines could not be read",
    )
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="text width (default: the terminal's, else $COLUMNS, else 120)",
    )

    p = sub.add_parser(
        "watch",
        help="follow a running job's event logs: what each rank compiles now, live",
        formatter_class=_Formatter,
        description=watch.__doc__,
        epilog="exit codes: 0 every rank ended, Ctrl-C, or --once; 2 a path that is no readable run directory",
    )
    watch.add_arguments(p)

    p = sub.add_parser(
        "ingest",
        help="convert TORCH_TRACE logs into recompprof event logs",
        formatter_class=_Formatter,
        epilog=_EXIT_CODES,
    )
    p.add_argument(
        "trace_dir",
        type=Path,
        metavar="TORCH_TRACE_DIR",
        help="the TORCH_TRACE directory (or one log)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="RUN_DIR",
        help="default recompprof-runs/torch-trace-<name>",
    )
    p.add_argument("--overwrite", action="store_true", help="replace event logs already in RUN_DIR")
    p.add_argument(
        "--redact", action="store_true", help="keep no source text (only categories and subjects)"
    )
    return parser


def _version() -> str:
    from recompprof._version import __version__

    return __version__


def exit_code(exc: BaseException) -> int:
    """The exit code of a command that ended with ``exc`` (the first matching row of the table)."""
    return next((code for cls, code in _EXIT_CODES_BY_ERROR if isinstance(exc, cls)), EXIT_USAGE)


def _err(message: str) -> None:
    """One line on stderr; names from the input in it are shown escaped (see recompprof._analysis.plaintext)."""
    from recompprof._analysis.plaintext import (
        escape,
    )  # imports rich: only when there is something to say

    print(escape(f"recompprof: {message}"), file=sys.stderr)


def _say(line: str) -> None:
    """One line on stdout, escaped like :func:`_err`."""
    from recompprof._analysis.plaintext import escape

    print(escape(line))


def _width(asked: int | None) -> int:
    """``--width``, else $COLUMNS, else the terminal's width; 120 when piped. At least 100: narrower tables cannot
    hold their columns without breaking words."""
    import shutil

    return max(100, asked or shutil.get_terminal_size((120, 24)).columns)


def _explain(exc: BaseException) -> None:
    """The one line a command that ended with ``exc`` prints (none for a closed pipe)."""
    if isinstance(exc, KeyboardInterrupt):
        _err("interrupted")
    elif isinstance(exc, BrokenPipeError):
        sys.stderr.close()
    elif isinstance(exc, RecompprofError):
        _err(f"error: {exc}")
    else:
        detail = " ".join(str(exc).split())[:300]
        _err(
            f"error: unexpected {type(exc).__name__} ({detail}); this is a recompprof bug, please report it "
            "with the input that caused it"
        )


def _open(*paths: Path) -> list[Run]:
    """The runs at ``paths`` (read lazily); raises RunError when one cannot be opened, after printing
    the errors of the others, so every bad path is named."""
    from recompprof._analysis.report.runs import RunError, load

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
    from recompprof._analysis.report.runs import RunError

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
    from recompprof._analysis.report.fold import build_report
    from recompprof._analysis.report.merging import build_run_report
    from recompprof._analysis.text import render_text

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
    if run.source == "torch_trace":
        report.notes.append(
            "read from TORCH_TRACE logs: "
            + (
                "training steps are those recompprof, attached to the job, handed torch for each forward compile"
                if report.run.steps_from_trace
                else "no training steps are recorded"
            )
        )
    print(render_text(report, width=_width(args.width)), end="")
    if args.html:
        from recompprof._analysis.html_report import render_html

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


# The violations that say a rank's counts are incomplete, and the option that accepts each.
_INCOMPLETE_COUNTS = {
    "signal_dark": "--accept-dark-signals",
    "incomplete": "--accept-incomplete-runs",
    "log_gap": "--accept-log-gaps",
}


def _warn(violations: list[Violation], refused: dict[str, str]) -> list[Violation]:
    """Say what is not a rule's verdict on stderr (counts the run cannot vouch for: errors unless accepted; a
    compile the run ended with, without its rule: a warning); raise if any is refused; the rules' violations."""
    from recompprof._analysis.check import RUNNING_COMPILE_NOTE, CheckInputError

    for violation in violations:
        if violation.rule in _INCOMPLETE_COUNTS:
            _err(("error: " if violation.rule in refused else "warning: ") + str(violation))
    options = list(dict.fromkeys(refused[v.rule] for v in violations if v.rule in refused))
    if options:
        raise CheckInputError(
            f"this run's counts are incomplete; pass {' and '.join(options)} to check it anyway"
        )
    for violation in violations:
        if violation.rule == RUNNING_COMPILE_NOTE:
            _err(f"warning: {violation} (pass --fail-on-running-compile to fail on it)")
    return [
        v for v in violations if v.rule not in _INCOMPLETE_COUNTS and v.rule != RUNNING_COMPILE_NOTE
    ]


def _check(args: argparse.Namespace) -> int:
    from recompprof._analysis.check import CheckInputError, Rules, check

    try:
        rules = Rules(
            max_recompiles=args.max_recompiles,
            max_total_recompiles=args.max_total_recompiles,
            after_step=args.after_step,
            max_compile_seconds=args.max_compile_seconds,
            max_recompile_seconds=args.max_recompile_seconds,
            forbid=tuple(args.forbid),
            max_limit_hits=args.max_limit_hits,
            max_graph_breaks=args.max_graph_breaks,
            max_failures=args.max_failures,
            fail_on_running_compile=args.fail_on_running_compile,
        )
    except CheckInputError as exc:
        raise CheckInputError(f"--forbid: {exc}") from exc
    if rules.empty:
        raise CommandError(
            "no rule given; pass at least one of --max-recompiles, --max-total-recompiles, "
            "--max-compile-seconds, --max-recompile-seconds, --forbid, --max-limit-hits, "
            "--max-graph-breaks, --max-failures, --fail-on-running-compile"
        )
    negative = [
        name
        for name in (
            "max_recompiles",
            "max_total_recompiles",
            "after_step",
            "max_compile_seconds",
            "max_recompile_seconds",
            "max_limit_hits",
            "max_graph_breaks",
            "max_failures",
        )
        if (getattr(args, name) or 0) < 0
    ]
    if negative:
        raise CommandError(f"--{negative[0].replace('_', '-')} must not be negative")
    [run] = _open(args.run_dir)
    violations = check(run.events, rules)
    _finish(run, strict=not args.allow_skipped)
    # Counts that cannot be trusted whole: refused unless accepted (then still said, as warnings).
    refused = {
        rule: option
        for rule, option in _INCOMPLETE_COUNTS.items()
        if not getattr(args, option[2:].replace("-", "_"))
    }
    violations = _warn(violations, refused)
    for violation in violations:
        _say(f"FAIL {violation.rule}: {violation}")
    if violations:
        _say(f"recompprof check: {len(violations)} violation(s) in {args.run_dir}")
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
    from recompprof._analysis.ingest import ingest
    from recompprof._analysis.text import counts_line

    out = args.output or Path("recompprof-runs") / f"torch-trace-{args.trace_dir.resolve().name}"
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
    args = _parser().parse_args(argv)
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
        return {"report": _report, "check": _check, "diff": _diff, "ingest": _ingest}[
            args.subcommand
        ](args)
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - every error is one line, never a traceback
        _explain(exc)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
