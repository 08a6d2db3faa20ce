"""Write runs into a history lake: ``recompprof export RUN_DIR... --to URI`` (docs/history.md).

Each run directory, event log or TORCH_TRACE directory is exported as Parquet rows of the tables
``runs``, ``compiles``, ``guard_failures`` and ``graph_breaks`` under ``URI/v1/`` (a path, or an
object-store URI such as ``s3://bucket/lake``). Exporting again rewrites the same files: it never
adds a second copy of a run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

from recompprof._cli import arguments
from recompprof._errors import CommandError

# The variable of the history_uri setting: the lake a job's own exports write to, and export's default.
HISTORY_URI = "RECOMPPROF_HISTORY_URI"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dirs",
        type=arguments.path,
        nargs="+",
        metavar="RUN_DIR",
        help="run directory, one event log, or a TORCH_TRACE directory",
    )
    parser.add_argument(
        "--to",
        type=arguments.uri,
        metavar="URI",
        help="the lake: a local or shared path, or s3://bucket/prefix (any pyarrow filesystem URI); "
        "default RECOMPPROF_HISTORY_URI, the history_uri setting's variable",
    )
    parser.add_argument(
        "--per-rank",
        action="store_true",
        help="one file per rank session (writer rank<r>-<pid>) instead of one per run (writer all)",
    )
    parser.add_argument(
        "--labels",
        default=None,
        metavar="K=V,...",
        help="labels added to every session exported (over those it recorded), e.g. team=x,model=y; "
        "remembered for the run, and --labels '' forgets them",
    )
    parser.add_argument(
        "--after-day",
        type=_day,
        metavar="YYYY-MM-DD",
        help="only the compile, guard-failure and graph-break rows of later UTC days (runs rows "
        "always): what a session exports at its end after exporting its closed days",
    )
    parser.add_argument(
        "--through-day",
        type=_day,
        metavar="YYYY-MM-DD",
        help="only the compile, guard-failure and graph-break rows up to this UTC day (runs rows always)",
    )
    parser.add_argument(
        "--no-text",
        action="store_true",
        help="leave out reason, failure and graph-break texts (for lakes that must not hold source)",
    )
    parser.add_argument(
        "--redact",
        action="store_true",
        help="as the redact setting (RECOMPPROF_REDACT): no texts, and paths cut to their last two parts",
    )


def _day(text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def main(args: argparse.Namespace) -> int:
    from recompprof._capture.lake_uri import shown
    from recompprof._capture.settings import check_labels, parse_labels
    from recompprof._history.export import Window, export
    from recompprof._history.rows import TextPolicy
    from recompprof._model.escaping import escape

    try:  # None: not given (those remembered for the run apply); {} given empty: forget them
        labels = None if args.labels is None else check_labels(parse_labels(args.labels))
    except ValueError as exc:
        raise CommandError(f"--labels: {exc}") from None
    to = args.to or os.environ.get(HISTORY_URI, "").strip()
    if not to:
        raise CommandError(f"--to: no lake given (neither --to nor {HISTORY_URI} is set)")
    redact = args.redact or _redact_from_environment()
    result = export(
        args.run_dirs,
        to,
        per_rank=args.per_rank,
        labels=labels,
        text=TextPolicy(redact=redact, no_text=args.no_text),
        window=Window(args.after_day, args.through_day),
    )
    for run in result.runs:  # what could not be read is said; the runs rows count it too
        run.finish()
        for line in run.warnings + run.problems:
            print(escape(f"recompprof: warning: {line}"), file=sys.stderr)
    files = sum(len(paths) for paths in result.files.values())
    rows = ", ".join(f"{table} {count}" for table, count in result.rows.items())
    print(
        escape(
            f"exported {result.sessions} session(s) to {shown(to)}: {files} file(s); rows: {rows}"
        )
    )
    for run_id, labels in sorted(result.remembered.items()):  # never applied silently
        given = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        print(
            escape(
                f"  labels {given} remembered for run {run_id!r} (given to an earlier export of "
                "that run id) applied; --labels replaces them"
            )
        )
    if result.replaced:  # a session is in the lake once: its older files gave it up
        print(
            f"  replaced {len(result.replaced)} older file(s) holding the same session(s) "
            "(deleted, or rewritten with their other sessions)"
        )
    return 0


def _redact_from_environment() -> bool:
    """The ``redact`` setting from ``RECOMPPROF_REDACT``, read as attach() reads it."""
    from pydantic import TypeAdapter, ValidationError

    from recompprof._capture.settings import ConfigError

    value = os.environ.get("RECOMPPROF_REDACT")
    if value is None:
        return False
    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        raise ConfigError(
            f"recompprof setting 'redact' (environment variable RECOMPPROF_REDACT): "
            f"not a boolean; got {value!r}"
        ) from None
