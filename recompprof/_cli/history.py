"""recompprof history: fleet questions over a lake that `recompprof export` wrote (docs/history.md).

  recompprof history top-causes  --lake URI [--since 7d] [--by model|team|job|frame] [--all]
  recompprof history cost        --lake URI [--since 30d] [--by team]
  recompprof history regressions --lake URI --baseline torch=2.14.1 --candidate torch=2.15.0
  recompprof history compare RUN --lake URI [--baseline last:50] [--job J] [--min-baseline 5] [--top 10]
  recompprof history limit-hits | divergence | latency --lake URI [--since 7d]
  recompprof history digest      --lake URI [--since 7d] [--run RUN] [--format table|json]
  recompprof history sql --lake URI 'SELECT ...'
  recompprof history verify --lake URI
  recompprof history compact --lake URI [--through DATE] [--check]

Every question takes --job/--team/--model to narrow its rows; digest asks them all in one process
(for a dashboard or a daily mail). DuckDB answers them embedded. --print-sql --dialect
spark|trino|clickhouse|duckdb prints the view definitions and the query for a fleet's own engine instead.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path

from recompprof._cli import arguments
from recompprof._errors import CommandError

EXIT_OK, EXIT_FINDINGS = 0, 1
GROUPS = ("model", "team", "job")  # --by, and the --job/--team/--model filters

_QUESTIONS = {
    "top-causes": ("the costliest recompile causes, by model, team or job", "7d", "model"),
    "cost": ("compile hours per week and the part lost to recompiles", "30d", "team"),
    "regressions": ("jobs and causes that recompile more on a new version (exit 1)", None, None),
    "compare": ("CI gate: did this run add guard failures or compile time? (exit 1)", None, None),
    "limit-hits": ("frames that hit the recompile limit", "7d", None),
    "divergence": ("frames some ranks recompiled and others did not", "7d", None),
    "latency": ("compile latency percentiles per model and torch version", "30d", "model"),
}
_EXITS = (
    "exit codes: 0 answered; 1 regressions/compare found something; "
    "2 bad input (an unknown option value, a lake path that does not exist, a failed sql query)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="question", metavar="QUESTION", required=True)
    for name, (help_text, since, by) in _QUESTIONS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=_EXITS)
        if name == "compare":
            p.add_argument("run", metavar="RUN", help="the run id to hold to its job's history")
            p.add_argument("--baseline", default="last:50", help="last:N finished runs of the job")
            p.add_argument("--job", default="", help="the job (default: the one its sessions name)")
            _gate_arguments(p)
        if name == "regressions":
            p.add_argument("--baseline", required=True, metavar="torch=VERSION")
            p.add_argument("--candidate", required=True, metavar="torch=VERSION")
        if since is not None:
            p.add_argument(
                "--since", default=since, help=f"days back (7d) or a date (default {since})"
            )
        if by is not None:
            choices = ("model", "team", "job", "frame") if name == "top-causes" else GROUPS
            p.add_argument("--by", default=by, choices=choices, help=f"(default {by})")
        for column in GROUPS if name != "compare" else ("team", "model"):
            p.add_argument(f"--{column}", default="", help=f"only the rows of this {column}")
        if name == "top-causes":
            p.add_argument(
                "--all", action="store_true", help="every recompile, not only steady-state ones"
            )
        _common(p)
    _add_digest(sub)
    p = sub.add_parser(
        "sql", help="any SELECT over the views runs, compiles, guard_failures, graph_breaks"
    )
    p.add_argument("text", metavar="SQL")
    _common(p)
    p = sub.add_parser(
        "verify",
        help="decode every file of the lake and name each bad one (every question then leaves "
        "them out; exit 1 when one is bad)",
    )
    p.add_argument("--lake", required=True, type=arguments.uri, metavar="URI")
    p.add_argument("--format", default="table", choices=("table", "json"))
    p = sub.add_parser(
        "compact",
        help="merge each closed day into one file per table (query time follows file count)",
    )
    p.add_argument("--lake", required=True, type=arguments.uri, metavar="URI")
    p.add_argument(
        "--through",
        default=None,
        metavar="DATE",
        help="compact raw days up to this date, at most yesterday (default: 3 days ago, UTC)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="also re-compact compacted days that raw files arrived for late",
    )


def _add_digest(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    what = (
        "every question in one process, printed as one document (a dashboard's or a daily mail's): "
        "top-causes, cost, regressions (the two newest torch releases unless --baseline/--candidate), "
        "compare (with --run), limit-hits, divergence, latency"
    )
    p = sub.add_parser("digest", help=what, description=what, epilog=_EXITS)
    p.add_argument("--since", default="7d", help="days back (7d) or a date (default 7d)")
    p.add_argument(
        "--by", default=None, choices=GROUPS, help="(default: each question's own, as alone)"
    )
    p.add_argument("--baseline", default=None, metavar="torch=VERSION")
    p.add_argument("--candidate", default=None, metavar="torch=VERSION")
    p.add_argument("--run", default="", metavar="RUN", help="hold this run to its job's history")
    p.add_argument("--all", action="store_true", help="top-causes: every recompile")
    for column in GROUPS:
        p.add_argument(f"--{column}", default="", help=f"only the rows of this {column}")
    _gate_arguments(p)
    p.add_argument(
        "--lake",
        required=True,
        type=arguments.uri,
        metavar="URI",
        help="the lake's root: a path or s3://...",
    )
    p.add_argument("--format", default="table", choices=("table", "json"))
    p.add_argument("--output", type=arguments.path, default=None, help="write the document to FILE")


def _gate_arguments(p: argparse.ArgumentParser) -> None:
    """compare's rule (docs/history.md "The gate's rule"), each slack a flag with the measured default."""
    from recompprof._history import questions as q

    p.add_argument(
        "--max-failure-increase",
        type=int,
        default=q.FAILURE_SLACK,
        metavar="N",
        help="guard failures of a frame and category count as added beyond the baseline's most plus "
        f"the larger of N and PCT%% of it (N={q.FAILURE_SLACK})",
    )
    p.add_argument(
        "--max-failure-increase-pct",
        type=float,
        default=q.FAILURE_TOLERANCE * 100,
        metavar="PCT",
        help=f"(PCT={q.FAILURE_TOLERANCE * 100:g})",
    )
    p.add_argument(
        "--max-time-increase",
        type=float,
        default=q.TIME_TOLERANCE * 100,
        metavar="PCT",
        help="compile seconds count as added beyond the baseline's most plus the larger of "
        f"PCT%% of it and S seconds (PCT={q.TIME_TOLERANCE * 100:g})",
    )
    p.add_argument(
        "--max-time-increase-s",
        type=float,
        default=q.TIME_SLACK_S,
        metavar="S",
        help=f"(S={q.TIME_SLACK_S:g})",
    )
    p.add_argument(
        "--min-baseline",
        type=int,
        default=q.MIN_BASELINE,
        metavar="N",
        help=f"fewer earlier finished runs than N: a note, exit 0 (default {q.MIN_BASELINE})",
    )
    p.add_argument(
        "--top",
        type=int,
        default=q.TOP_FINDINGS,
        metavar="N",
        help=f"show the N worst findings and count the rest (0: all; default {q.TOP_FINDINGS})",
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lake",
        required=True,
        type=arguments.uri,
        metavar="URI",
        help="the lake's root: a path or s3://...",
    )
    p.add_argument("--format", default="table", choices=("table", "csv", "json", "html"))
    p.add_argument("--output", type=arguments.path, default=None, help="write the answer to FILE")
    p.add_argument(
        "--print-sql",
        action="store_true",
        help="print the view definitions and the query instead of running them",
    )
    p.add_argument(
        "--dialect", default="duckdb", choices=("duckdb", "spark", "trino", "clickhouse")
    )
    p.add_argument(
        "--through",
        default=None,
        metavar="DATE|none",
        help="with --print-sql: the lake's compaction marker, so that nothing is opened "
        "(default: read from the lake)",
    )


def _params(args: argparse.Namespace) -> object:
    from recompprof._history import questions as q

    values: dict[str, object] = {}
    command = args.question
    if getattr(args, "since", None) is not None:
        values["since"] = q.since_date(args.since)
    if getattr(args, "by", None) is not None:
        values["by"] = q.group(args.by, frame=command == "top-causes")
    # compare's --job names the job whose history the run is held to; its --team/--model narrow
    values["only"] = q.narrowed(
        {c: getattr(args, c, "") for c in q.FILTERS if c != "job" or command != "compare"}
    )
    if command in ("top-causes", "digest"):
        values["steady_only"] = not args.all
    if command == "regressions" or (command == "digest" and (args.baseline or args.candidate)):
        values.update(_versions(args))
    if command == "digest" and args.run:
        q.value_text(args.run, "--run")
    if command == "compare":
        values["run"] = q.value_text(args.run, "RUN")
        values["job"] = q.value_text(args.job, "--job") if args.job else ""
        values["last"] = q.last_runs(args.baseline)
    if command in ("compare", "digest"):
        values.update(_gate(args))
    return q.Params(**values)  # type: ignore[arg-type]


def _versions(args: argparse.Namespace) -> dict[str, str]:
    """regressions' key and the two versions it holds apart (--baseline, --candidate)."""
    from recompprof._history import questions as q

    if args.baseline is None or args.candidate is None:
        raise CommandError("give both --baseline and --candidate (or neither)")
    key, before = q.version_pair(args.baseline, "--baseline")
    key2, after = q.version_pair(args.candidate, "--candidate")
    if key != key2:
        raise CommandError("--baseline and --candidate must name the same key (torch=...)")
    return {"key": key, "baseline": before, "candidate": after}


_GATE_OPTIONS = (
    "max_failure_increase",
    "max_failure_increase_pct",
    "max_time_increase",
    "max_time_increase_s",
    "min_baseline",
    "top",
)


def _gate(args: argparse.Namespace) -> dict[str, object]:
    """compare's slack and limits (each a finite number, none negative)."""
    for option in _GATE_OPTIONS:
        value = getattr(args, option)
        if not math.isfinite(value):  # nan, inf or 1e309: no slack a gate can hold a run to
            raise CommandError(f"--{option.replace('_', '-')} must be a finite number, not {value}")
        if value < 0:
            raise CommandError(f"--{option.replace('_', '-')} must not be negative")
    return {
        "failure_slack": args.max_failure_increase,
        "failure_tolerance": args.max_failure_increase_pct / 100,
        "time_tolerance": args.max_time_increase / 100,
        "time_slack_s": args.max_time_increase_s,
        "min_baseline": args.min_baseline,
        "top": args.top,
    }


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from exc
    print(f"written: {output}")


def _say(kind: str, line: str) -> None:
    """A warning or note on stderr, escaped, a URI's secret shown as ``***`` (as main._err)."""
    from recompprof._capture.lake_uri import shown
    from recompprof._model.escaping import escape

    print(escape(shown(f"recompprof: {kind}: {line}")), file=sys.stderr)


def _marker(args: argparse.Namespace) -> datetime.date | None:
    """The compaction marker the printed views obey: --through (nothing opened), else the lake's."""
    from recompprof._history import questions as q, views
    from recompprof._history.names import LakeError

    if args.through == "none":
        return None
    if args.through is not None:
        return q.since_date(args.through, option="--through")
    try:
        return views.marker(views.reader(args.lake))
    except LakeError as error:
        raise CommandError(
            f"{error} (to print without opening the lake, give its compaction marker: "
            "--through DATE, or --through none before the first compaction)"
        ) from None


def _print_sql(args: argparse.Namespace, params: object) -> int:
    from recompprof._history import questions as q, views
    from recompprof._history.dialects.base import Where

    dialect = q.DIALECTS[args.dialect]
    text = views.printed(Where.of(args.lake), args.dialect, _marker(args))
    if args.question == "sql":
        text += f"\n{args.text.strip().rstrip(';')};\n"
    else:
        bound = q.bind(args.question, params, dialect)  # type: ignore[arg-type]
        for query in bound.queries:
            text += f"\n-- {query.title}\n{query.text};\n"
        text += f"\n-- completeness of the sessions read\n{q.completeness(bound.scope, dialect)};\n"
    _emit(text, args.output)
    return EXIT_OK


def _compact(args: argparse.Namespace) -> int:
    from recompprof._history import compact as c, questions as q, views

    lake = views.open_lake(args.lake)
    today = datetime.datetime.now(datetime.timezone.utc).date()
    through = None
    if args.through is not None:
        through = q.since_date(args.through, option="--through")
        if through >= today:
            # A day still open would be compacted without the rows jobs export into it later: the
            # marker past them, every question would leave those out until a compaction took them.
            closed = today - datetime.timedelta(days=1)
            _say(
                "note",
                f"--through {through}: that day has not ended (today is {today}, UTC); "
                f"compacting through {closed}",
            )
            through = closed
    elif not args.check:
        through = today - datetime.timedelta(days=c.GRACE_DAYS)
    done = c.compact(lake, through, check=args.check)
    for s in done.skipped:
        _say("warning", f"{s.table}: left out {s.path} ({s.why}: {s.detail})")
    for table, day in done.redone:
        _say("note", f"{table} {day}: raw files arrived after compaction; compacted again")
    if done.removed:
        _say(
            "note",
            f"removed {len(done.removed)} hidden temporary file(s) untouched for "
            f"{_age(c.TEMPORARY_AGE)} (left by exports or questions that were killed)",
        )
    files = sum(d[2] for d in done.days)
    rows = sum(d[3] for d in done.days)
    print(
        f"recompprof history compact: {len(done.days)} table-day(s) from {files} raw file(s), "
        f"{rows} row(s); compacted through {done.through or 'nothing yet'}"
    )
    return EXIT_OK


def _age(span: datetime.timedelta) -> str:
    """A bound as one says it: ``a day``, ``2 days``, ``90 s``."""
    if span.total_seconds() % 86400 == 0:
        days = int(span.total_seconds() // 86400)
        return "a day" if days == 1 else f"{days} days"
    return f"{span.total_seconds():g} s"


def _verify(args: argparse.Namespace) -> int:
    import json

    from recompprof._history import health, views
    from recompprof._history.columns import TABLES
    from recompprof._history.names import LakeError

    lake = views.open_lake(args.lake)
    files = {table: views.every_file(lake, table) for table in TABLES}
    decoded = sum(len(f) for f in files.values())
    bad = health.verify(lake, files)
    recorded = True
    try:
        health.write_verified(lake, bad, decoded)
    except LakeError as error:  # a read-only mount: what was found is still said, and exits so
        recorded = False
        _say("warning", f"{error}; not recorded: questions still read the files found bad")
    if args.format == "json":
        document = {"decoded": decoded, "bad": [vars(b) for b in bad], "recorded": recorded}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        for b in bad:
            _say("warning", f"{b.table}: {b.name} is bad: {b.why}")
        print(
            f"recompprof history verify: {decoded} file(s) decoded, {len(bad)} bad"
            + (
                f"; recorded in {health.VERIFIED}: every question leaves them out"
                if bad and recorded
                else ""
            )
        )
    return EXIT_FINDINGS if bad else EXIT_OK


def _digest(args: argparse.Namespace, params: object) -> int:
    from recompprof._history import engine, render, views

    lake = views.reader(args.lake)
    selection = views.select(lake)
    runner = engine.Engine(lake, selection, questions_only=True)
    own = {name: by for name, (_, _, by) in _QUESTIONS.items() if by and args.by is None}
    answers, left_out = runner.settled(
        lambda: engine.digest(runner, params, args.run, own)  # type: ignore[arg-type]
    )
    for answer in answers:
        answer.unsettled = runner.unsettled
    files = {t: len(c.good) + len(c.skipped) for t, c in selection.tables.items()}
    if args.format == "json":
        text = render.digest_json(answers, files, left_out)
    else:
        text = render.digest_text(answers, files, left_out)
    _emit(text, args.output)
    return EXIT_FINDINGS if any(a.findings for a in answers) else EXIT_OK


def main(args: argparse.Namespace) -> int:
    if args.question == "compact":
        return _compact(args)
    if args.question == "verify":
        return _verify(args)
    params = _params(args) if args.question != "sql" else None
    if args.question == "digest":
        return _digest(args, params)
    if args.print_sql:
        return _print_sql(args, params)
    if args.dialect != "duckdb":
        raise CommandError(
            "--dialect only applies with --print-sql (the embedded engine is DuckDB)"
        )
    from recompprof._history import engine, render, views

    lake = views.reader(args.lake)
    selection = views.select(lake)
    runner = engine.Engine(lake, selection, questions_only=args.question != "sql")
    if args.question == "sql":
        answer = runner.settled(lambda: engine.free_query(runner, args.text))
    else:
        answer = runner.settled(
            lambda: engine.ask(runner, args.question, params)  # type: ignore[arg-type]
        )
    answer.unsettled = runner.unsettled
    files = {t: len(c.good) + len(c.skipped) for t, c in selection.tables.items()}
    for line in render.warnings(answer, files):
        _say("warning", line)
    for line in render.notes(answer):
        _say("note", line)
    if args.format == "csv":
        text = render.csv_text(answer)
    elif args.format == "json":
        text = render.json_text(answer, files)
    elif args.format == "html":
        text = render.html_page(answer, files, f"recompprof history {args.question}")
    else:
        text = render.table_text(answer)
        final = render.verdict(answer)
        if final:
            text += final + "\n"
    _emit(text, args.output)
    return EXIT_FINDINGS if answer.findings else EXIT_OK
