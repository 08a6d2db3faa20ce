"""The fleet questions ``recompprof history`` answers: one portable SQL text each (docs/history.md).

Each text runs unchanged on DuckDB, Spark SQL, Trino and ClickHouse over the lake's four views, except
for the few functions that have no common spelling, written here as macros that each engine's
:class:`~recompprof._history.dialects.Dialect` spells (:mod:`recompprof._history.dialects`):
``PCTL(x, p)`` (a percentile), ``WEEK(d)`` (the Monday of ``d``'s week) and ``SIZE(list)``.
The rest keeps to the subset every engine reads alike (``CASE WHEN`` inside sums, no ``FILTER``, no
lambdas, ``CAST(... AS DOUBLE)`` before dividing, a total ``ORDER BY``).

Parameters are bound here, as SQL literals, after the macros are spelled: a value a user typed only
ever reaches a text as a quoted string, a date or an integer, and a column a user picks (``--by``)
only from a closed set. The verdicts (what counts as a compile or a recompile, which cause a
compile's seconds are charged to, steady state) are columns the exporter computed with the event
model's rules: the texts sum them and never re-derive one.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from recompprof._errors import CommandError
from recompprof._history.dialects import DIALECTS, DUCKDB
from recompprof._history.dialects.base import Dialect

__all__ = ["COMMANDS", "DIALECTS", "DUCKDB", "Dialect", "Params", "bind"]

# A candidate job regresses when its recompiles per session grow past 1.2x the baseline's plus one;
# a cause, when its recompiles per session grow past 2x plus one (small counts are noise).
JOB_GROWTH = 1.2
CAUSE_GROWTH = 2.0
# compare, the CI gate (docs/history.md "The gate's rule"): a (frame, category) of the run is a finding
# when its guard failures pass the baseline's most by more than the larger of FAILURE_SLACK and
# FAILURE_TOLERANCE of that most; its compile seconds (its slowest rank's), when they pass the
# baseline's most by more than the larger of TIME_SLACK_S and TIME_TOLERANCE of it. Measured on 25
# real runs of one job with random input shapes and 6 regressed ones (tests/test_history_gate.py): no
# finding on noise, a new steady cause and one cause's recompiles x1.5 found every time.
FAILURE_SLACK = 2
FAILURE_TOLERANCE = 0.25
TIME_TOLERANCE = 0.10
TIME_SLACK_S = 5.0
# Fewer finished runs than this before the candidate: too few to know the job's noise (a note, exit 0).
MIN_BASELINE = 5
TOP_FINDINGS = 10  # compare's summary: the worst first, then how many more
TOP_ROWS = 20

# The columns a user may group by (--by): denormalised onto every table, so each question can use them.
GROUPS = ("model", "team", "job")
# top-causes may also group by frame (the function the recompiles are in: name and its key).
FRAME = "frame"
FRAME_COLUMNS = "frame_name, frame_key"
# The columns a question's rows may be narrowed to (--job/--team/--model), on every table.
FILTERS = ("job", "team", "model")
# The keys --baseline/--candidate may compare: a bare release (``2.13.0``) is matched against the
# release column (every build of it: ``+cpu``, ``+cu128``), any other value against the full version.
VERSION_KEYS = {"torch": ("torch_release", "torch_version")}
_RELEASE = re.compile(r"\d+(?:\.\d+)*")

# The columns the texts read, as DuckDB types them: a view gives a column no file has yet (a lake of an
# older exporter) as null of this type, and a file typing one of them as another kind is left out
# (another schema version). The full vocabulary is recompprof._history.columns' (tests check this
# against it).
_DIMS = {"job": "VARCHAR", "team": "VARCHAR", "model": "VARCHAR", "torch_version": "VARCHAR"}
_KEY = {
    "run_id": "VARCHAR",
    "rank": "INTEGER",
    "pid": "INTEGER",
    **_DIMS,
    "torch_release": "VARCHAR",
}
READS: dict[str, dict[str, str]] = {
    "runs": {
        **_KEY,
        "start_time": "TIMESTAMP WITH TIME ZONE",
        "world_size": "INTEGER",
        "ended": "BOOLEAN",
        "signals_off": "VARCHAR[]",
        "log_gap": "BOOLEAN",
        "recompiles": "BIGINT",
        "compile_s": "DOUBLE",
    },
    "compiles": {
        **_KEY,
        "backward": "BOOLEAN",
        "frame_key": "VARCHAR",
        "frame_name": "VARCHAR",
        "outcome": "VARCHAR",
        "counts_as_compile": "BOOLEAN",
        "counts_as_recompile": "BOOLEAN",
        "compile_s": "DOUBLE",
        "duration_s": "DOUBLE",
        "cause_category": "VARCHAR",
        "cause_subject": "VARCHAR",
        "steady_state": "BOOLEAN",
    },
    "guard_failures": {
        **_KEY,
        "frame_key": "VARCHAR",
        "frame_name": "VARCHAR",
        "category": "VARCHAR",
        "counts_as_change": "BOOLEAN",
        "count": "INTEGER",
    },
    "graph_breaks": dict(_KEY),
}


@dataclass(frozen=True)
class Query:
    """One SQL text of a question, with the title its answer is shown under."""

    title: str
    text: str
    # A chart answers it better than a table (the HTML page draws one): (x column, y columns, series).
    trend: tuple[str, tuple[str, ...], str | None] | None = None


@dataclass(frozen=True)
class Bound:
    """A question's texts with their parameters bound, ready for one engine."""

    command: str
    queries: tuple[Query, ...]
    # The rank sessions the question reads, as a predicate over ``runs``: their completeness is said.
    scope: str
    scope_words: str
    # Rows of these queries are findings (regressions, compare: exit 1).
    gate: bool = False
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Params:
    """What a user asked, validated (:func:`since_date`, :func:`group`, :func:`version_pair`)."""

    since: dt.date | None = None
    by: str = "model"
    steady_only: bool = True
    key: str = "torch"
    baseline: str = ""
    candidate: str = ""
    run: str = ""
    job: str = ""
    last: int = 50
    time_tolerance: float = TIME_TOLERANCE
    time_slack_s: float = TIME_SLACK_S
    failure_slack: int = FAILURE_SLACK
    failure_tolerance: float = FAILURE_TOLERANCE
    min_baseline: int = MIN_BASELINE
    top: int = TOP_FINDINGS  # compare: the findings shown, worst first (0: all)
    # --job/--team/--model: (column, value) pairs every table's rows are narrowed to.
    only: tuple[tuple[str, str], ...] = ()


def since_date(text: str, *, today: dt.date | None = None, option: str = "--since") -> dt.date:
    """``7d`` (days before today, UTC) or ``2026-11-20``."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    days = re.fullmatch(r"(\d{1,5})d", text.strip())
    if days:
        return today - dt.timedelta(days=int(days[1]))
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError:
        raise CommandError(
            f"{option} {text!r}: give a number of days (7d) or a date (2026-11-20)"
        ) from None


def group(text: str, *, frame: bool = False) -> str:
    """A ``--by`` column from the closed set (``frame`` too where the question allows it)."""
    allowed = (*GROUPS, FRAME) if frame else GROUPS
    if text not in allowed:
        raise CommandError(f"--by {text!r}: one of {', '.join(allowed)}")
    return text


def narrowed(pairs: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``--job/--team/--model`` values, each a printable text bound as a quoted literal."""
    return tuple(
        (column, value_text(value, f"--{column}"))
        for column, value in pairs.items()
        if column in FILTERS and value
    )


def version_pair(text: str, option: str) -> tuple[str, str]:
    """``torch=2.15.0`` -> (``torch``, ``2.15.0``): every build of release 2.15.0; ``torch=2.15.0+cu128``
    that build alone."""
    key, sep, value = text.partition("=")
    if not sep or key not in VERSION_KEYS or not value:
        raise CommandError(
            f"{option} {text!r}: give KEY=VERSION with KEY one of {', '.join(VERSION_KEYS)} "
            "(e.g. torch=2.15.0)"
        )
    return key, value_text(value, option)


def value_text(value: str, option: str) -> str:
    """A free value (a version, a run id, a job): any printable text; it is bound as a quoted literal."""
    if not value or not value.isprintable() or len(value) > 512:
        raise CommandError(f"{option}: give a printable value of at most 512 characters")
    return value


def last_runs(text: str) -> int:
    """``last:50`` -> 50."""
    match = re.fullmatch(r"last:(\d{1,6})", text.strip())
    if not match or int(match[1]) < 1:
        raise CommandError(f"--baseline {text!r}: give last:N, N >= 1 (e.g. last:50)")
    return int(match[1])


# ---- the texts ---------------------------------------------------------------------------------

# Summed per run first, then per cause: a run count without COUNT(DISTINCT), which engines plan as a
# second pass over the rows (a quarter of this question's CPU on DuckDB).
_TOP_CAUSES = """
WITH per_run AS (
  SELECT {by}, cause_category, cause_subject, run_id,
         SUM(CASE WHEN counts_as_recompile THEN 1 ELSE 0 END) AS recompiles,
         SUM(duration_s) AS seconds
  FROM compiles
  WHERE dt >= {since} AND cause_category IS NOT NULL{steady}{only}
  GROUP BY {by}, cause_category, cause_subject, run_id)
SELECT {by}, cause_category, cause_subject, SUM(recompiles) AS recompiles,
       ROUND(SUM(seconds), 3) AS seconds, COUNT(run_id) AS runs,
       MAX(run_id) AS example_run, {fix_hint} AS fix_hint
FROM per_run
GROUP BY {by}, cause_category, cause_subject
ORDER BY seconds DESC NULLS LAST, recompiles DESC, {by_order}, cause_category NULLS LAST,
         cause_subject NULLS LAST
LIMIT {top}"""

_COST = """
WITH per_run AS (
  SELECT {by}, WEEK(dt) AS week, run_id, SUM(compile_s) AS compile_s,
         SUM(CASE WHEN cause_category IS NOT NULL THEN duration_s ELSE 0 END) AS recompile_s
  FROM compiles
  WHERE dt >= {since}{only}
  GROUP BY {by}, WEEK(dt), run_id)
SELECT {by}, week, ROUND(SUM(compile_s) / 3600, 6) AS compile_hours,
       ROUND(SUM(recompile_s) / 3600, 6) AS recompile_hours, COUNT(run_id) AS runs
FROM per_run
GROUP BY {by}, week
ORDER BY week, recompile_hours DESC NULLS LAST, compile_hours DESC NULLS LAST, {by_order}"""

_REGRESSED_JOBS = """
WITH per_job AS (
  SELECT job,
         SUM(CASE WHEN {before} THEN 1 ELSE 0 END) AS before_sessions,
         SUM(CASE WHEN {after} THEN 1 ELSE 0 END) AS after_sessions,
         AVG(CASE WHEN {before} THEN CAST(recompiles AS DOUBLE) END) AS before_avg,
         AVG(CASE WHEN {after} THEN CAST(recompiles AS DOUBLE) END) AS after_avg
  FROM runs WHERE ({before} OR {after}){only} GROUP BY job)
SELECT job, before_sessions, after_sessions,
       ROUND(before_avg, 2) AS recompiles_per_session_before,
       ROUND(after_avg, 2) AS recompiles_per_session_after
FROM per_job
WHERE before_sessions > 0 AND after_sessions > 0 AND after_avg > {job_growth} * before_avg + 1
ORDER BY after_avg - before_avg DESC, job NULLS LAST"""

# Only the compiles of jobs with sessions on both sides are counted (the rows the join keeps): an
# engine skips the other jobs' rows as it reads them (DuckDB: every row when no job has both, as when
# the candidate is not in the lake yet), instead of counting the whole range and joining none.
_REGRESSED_CAUSES = """
WITH sessions AS (
  SELECT job,
         SUM(CASE WHEN {before} THEN 1 ELSE 0 END) AS before_sessions,
         SUM(CASE WHEN {after} THEN 1 ELSE 0 END) AS after_sessions
  FROM runs WHERE ({before} OR {after}){only} GROUP BY job),
causes AS (
  SELECT job, cause_category,
         SUM(CASE WHEN {before} THEN 1 ELSE 0 END) AS before_n,
         SUM(CASE WHEN {after} THEN 1 ELSE 0 END) AS after_n
  FROM compiles
  WHERE counts_as_recompile AND cause_category IS NOT NULL AND ({before} OR {after}){only}
    AND job IN (SELECT job FROM sessions WHERE before_sessions > 0 AND after_sessions > 0)
  GROUP BY job, cause_category)
SELECT c.job, c.cause_category, c.before_n, c.after_n,
       ROUND(CAST(c.before_n AS DOUBLE) / s.before_sessions, 2) AS per_session_before,
       ROUND(CAST(c.after_n AS DOUBLE) / s.after_sessions, 2) AS per_session_after
FROM causes c JOIN sessions s ON s.job = c.job
WHERE s.before_sessions > 0 AND s.after_sessions > 0
  AND CAST(c.after_n AS DOUBLE) / s.after_sessions
      > {cause_growth} * CAST(c.before_n AS DOUBLE) / s.before_sessions + 1
ORDER BY CAST(c.after_n AS DOUBLE) / s.after_sessions - CAST(c.before_n AS DOUBLE) / s.before_sessions
         DESC, c.job NULLS LAST, c.cause_category NULLS LAST
LIMIT {top}"""

# The baseline: the last N runs of the job that started before the candidate and whose every rank
# session ended (a killed run is no baseline).
_BASE_RUNS = """base_runs AS (
  SELECT run_id, MIN(start_time) AS started FROM runs
  WHERE job = {job} AND run_id <> {run}{only}
  GROUP BY run_id
  HAVING MIN(CASE WHEN ended THEN 1 ELSE 0 END) = 1
     AND MIN(start_time) < (SELECT MIN(start_time) FROM runs WHERE run_id = {run})
  ORDER BY started DESC, run_id DESC
  LIMIT {last})"""

_COMPARE_BASELINE = (
    "WITH "
    + _BASE_RUNS
    + """
SELECT COUNT(*) AS baseline_runs FROM base_runs"""
)

# The gate's rule for guard failures (FAILURE_SLACK, FAILURE_TOLERANCE): a (frame, category) the run
# failed more often than the baseline's most plus the larger slack; the worst excess first. Only the
# job's rows are read (a compacted day is sorted by job: the other jobs' row groups are skipped).
_COMPARE_GUARDS = (
    "WITH "
    + _BASE_RUNS
    + """,
per_run AS (
  SELECT run_id, frame_key, category, MAX(frame_name) AS frame_name, SUM(count) AS n
  FROM guard_failures
  WHERE counts_as_change AND job = {job}
    AND (run_id = {run} OR run_id IN (SELECT run_id FROM base_runs)){only}
  GROUP BY run_id, frame_key, category),
base AS (
  SELECT frame_key, category, SUM(n) AS total, MAX(n) AS max_n
  FROM per_run WHERE run_id <> {run} GROUP BY frame_key, category),
judged AS (
  SELECT c.frame_name, c.frame_key, c.category, c.n,
         CAST(COALESCE(b.total, 0) AS DOUBLE) / NULLIF((SELECT COUNT(*) FROM base_runs), 0) AS mean_n,
         COALESCE(b.max_n, 0) AS max_n,
         COALESCE(b.max_n, 0) + GREATEST(CAST({failure_slack} AS DOUBLE),
                                         {failure_tolerance} * CAST(COALESCE(b.max_n, 0) AS DOUBLE))
           AS allowed
  FROM per_run c LEFT JOIN base b ON b.frame_key = c.frame_key AND b.category = c.category
  WHERE c.run_id = {run})
SELECT frame_name, frame_key, category, n AS this_run, ROUND(mean_n, 2) AS baseline_mean,
       max_n AS baseline_max, ROUND(allowed, 2) AS allowed
FROM judged
WHERE n > allowed
ORDER BY n - allowed DESC, frame_key NULLS LAST, category NULLS LAST"""
)

# A run's compile time is its slowest rank's: ranks compile side by side.
_COMPARE_SECONDS = (
    "WITH "
    + _BASE_RUNS
    + """,
per_run AS (
  SELECT run_id, MAX(compile_s) AS compile_s
  FROM runs WHERE (run_id = {run} OR run_id IN (SELECT run_id FROM base_runs)){only}
  GROUP BY run_id),
base AS (SELECT AVG(compile_s) AS mean_s, MAX(compile_s) AS max_s FROM per_run WHERE run_id <> {run})
SELECT ROUND(c.compile_s, 3) AS this_run_compile_s, ROUND(b.mean_s, 3) AS baseline_mean_s,
       ROUND(b.max_s, 3) AS baseline_max_s
FROM per_run c, base b
WHERE c.run_id = {run} AND b.max_s IS NOT NULL
  AND c.compile_s > b.max_s + GREATEST(CAST({time_slack} AS DOUBLE), {time_tolerance} * b.max_s)"""
)

# Counted per run first: the distinct jobs and runs are then counted over those few rows, where
# COUNT(DISTINCT) over the hits themselves reads them into three aggregates (DuckDB).
_LIMIT_HITS = """
WITH per_run AS (
  SELECT frame_name, frame_key, job, run_id, COUNT(*) AS hits
  FROM compiles
  WHERE outcome = 'limit_hit' AND dt >= {since}{only}
  GROUP BY frame_name, frame_key, job, run_id)
SELECT frame_name, frame_key, SUM(hits) AS hits, COUNT(DISTINCT job) AS jobs,
       COUNT(DISTINCT run_id) AS runs
FROM per_run
GROUP BY frame_name, frame_key
ORDER BY hits DESC, frame_name NULLS LAST, frame_key NULLS LAST
LIMIT {top}"""

# Approximate where divergence.py is exact: a rank with no compile of the frame at all is absent, not 0.
_DIVERGENCE = """
WITH per_rank AS (
  SELECT run_id, job, frame_key, rank,
         SUM(CASE WHEN counts_as_recompile THEN 1 ELSE 0 END) AS rc
  FROM compiles WHERE dt >= {since}{only} GROUP BY run_id, job, frame_key, rank),
divergent AS (
  SELECT run_id, job, frame_key FROM per_rank
  GROUP BY run_id, job, frame_key HAVING MIN(rc) = 0 AND MAX(rc) > 0)
SELECT job, COUNT(*) AS divergent_frames, COUNT(DISTINCT run_id) AS runs
FROM divergent
GROUP BY job
ORDER BY divergent_frames DESC, job NULLS LAST
LIMIT {top}"""

_LATENCY = """
SELECT {by}, torch_version, COUNT(*) AS compiles,
       ROUND(PCTL(duration_s, 0.5), 3) AS p50_s,
       ROUND(PCTL(duration_s, 0.9), 3) AS p90_s,
       ROUND(PCTL(duration_s, 0.99), 3) AS p99_s,
       ROUND(MAX(duration_s), 3) AS max_s
FROM compiles
WHERE counts_as_compile AND NOT backward AND outcome = 'ok' AND dt >= {since}{only}
GROUP BY {by}, torch_version
ORDER BY {by_order}, torch_version NULLS LAST"""

# Completeness of the sessions a question read, said by every command (as ``check`` does).
COMPLETENESS = """
SELECT COUNT(*) AS sessions,
       SUM(CASE WHEN ended THEN 0 ELSE 1 END) AS not_ended,
       SUM(CASE WHEN SIZE(signals_off) > 0 THEN 1 ELSE 0 END) AS dark,
       SUM(CASE WHEN log_gap THEN 1 ELSE 0 END) AS log_gaps
FROM runs WHERE {scope}"""

# The same per day: Q9 of docs/history.md (`history sql` users read it there).
COMPLETENESS_BY_DAY = """
SELECT dt, COUNT(*) AS sessions, SUM(CASE WHEN ended THEN 0 ELSE 1 END) AS not_ended,
       SUM(CASE WHEN SIZE(signals_off) > 0 THEN 1 ELSE 0 END) AS dark
FROM runs GROUP BY dt ORDER BY dt DESC"""


def _narrowed_words(params: Params) -> str:
    return "".join(f", {column} {value}" for column, value in params.only)


def _since_scope(params: Params, values: dict[str, str]) -> tuple[str, str]:
    return "dt >= {since}{only}", f"since {params.since}{_narrowed_words(params)}"


def _versions_scope(params: Params, values: dict[str, str]) -> tuple[str, str]:
    return (
        "({before} OR {after}){only}",
        f"{params.key} {params.baseline} or {params.candidate}{_narrowed_words(params)}",
    )


def _job_scope(params: Params, values: dict[str, str]) -> tuple[str, str]:
    return "job = {job}{only}", f"job {params.job}{_narrowed_words(params)}"


@dataclass(frozen=True)
class Command:
    """One ``recompprof history`` command: its texts, what its rows mean, and its scope."""

    name: str
    queries: tuple[Query, ...]
    scope: Callable[[Params, dict[str, str]], tuple[str, str]]
    gate: bool = False


COMMANDS = {
    c.name: c
    for c in (
        Command(
            "top-causes",
            (Query("recompile causes, costliest first (seconds charged to each)", _TOP_CAUSES),),
            _since_scope,
        ),
        Command(
            "cost",
            (
                Query(
                    "compile hours per week, and the part lost to recompiles",
                    _COST,
                    trend=("week", ("compile_hours", "recompile_hours"), "{by}"),
                ),
            ),
            _since_scope,
        ),
        Command(
            "regressions",
            (
                Query("jobs that recompile more per session", _REGRESSED_JOBS),
                Query("causes that recompile more per session", _REGRESSED_CAUSES),
            ),
            _versions_scope,
            gate=True,
        ),
        Command(
            "compare",
            (
                Query("guard failures beyond the baseline's most", _COMPARE_GUARDS),
                Query("compile seconds beyond the baseline's most", _COMPARE_SECONDS),
            ),
            _job_scope,
            gate=True,
        ),
        Command(
            "limit-hits",
            (Query("frames that hit the recompile limit", _LIMIT_HITS),),
            _since_scope,
        ),
        Command(
            "divergence",
            (Query("frames some ranks recompiled and others did not, per job", _DIVERGENCE),),
            _since_scope,
        ),
        Command(
            "latency",
            (
                Query(
                    "compile latency percentiles (forward compiles that installed code)",
                    _LATENCY,
                    trend=("torch_version", ("p50_s", "p90_s"), "{by}"),
                ),
            ),
            _since_scope,
        ),
    )
}


def literals(params: Params, dialect: Dialect, command: str = "") -> dict[str, str]:
    """Every parameter as the SQL text it is bound as (quoted, or from a closed set)."""
    by = group(params.by, frame=command == "top-causes")
    columns = FRAME_COLUMNS if by == FRAME else by
    values = {
        "by": columns,
        "by_order": ", ".join(f"{c.strip()} NULLS LAST" for c in columns.split(",")),
        "steady": " AND steady_state" if params.steady_only else "",
        "only": "".join(f" AND {group(c)} = {dialect.string(v)}" for c, v in params.only),
        "before": _version_match(params.key, params.baseline, dialect),
        "after": _version_match(params.key, params.candidate, dialect),
        "run": dialect.string(params.run),
        # Unknown until the lake is read: the job of the run's sessions (the CLI looks it up first).
        "job": dialect.string(params.job)
        if params.job
        else f"(SELECT MIN(job) FROM runs WHERE run_id = {dialect.string(params.run)})",
        "last": str(int(params.last)),
        "top": str(TOP_ROWS),
        "job_growth": repr(JOB_GROWTH),
        "cause_growth": repr(CAUSE_GROWTH),
        "time_tolerance": repr(float(params.time_tolerance)),
        "time_slack": repr(float(params.time_slack_s)),
        "failure_tolerance": repr(float(params.failure_tolerance)),
        "failure_slack": str(int(params.failure_slack)),
        "since": dialect.date.format(d=(params.since or dt.date(1970, 1, 1)).isoformat()),
        "fix_hint": _fix_hints(dialect) if command == "top-causes" else "NULL",
    }
    return values


def _version_match(key: str, value: str, dialect: Dialect) -> str:
    """The predicate of a --baseline/--candidate value: a release matches each of its builds."""
    release, version = VERSION_KEYS[key]
    return f"{release if _RELEASE.fullmatch(value) else version} = {dialect.string(value)}"


def _fix_hints(dialect: Dialect) -> str:
    """The report's fix hint of each cause category, as one CASE over ``cause_category``: the same
    hint on every engine. Imported only here: the other questions never need them."""
    from recompprof._model.fix_hints import FIX_HINTS

    cases = " ".join(
        f"WHEN {dialect.string(category)} THEN {dialect.string(hint)}"
        for category, hint in sorted(FIX_HINTS.items())
    )
    return f"CASE cause_category {cases} END"


def _fill(template: str, values: Mapping[str, str], dialect: Dialect) -> str:
    """``template`` with its macros spelled for ``dialect`` first, then the values put in: a value is
    never read as a macro, so no value a user typed changes the query's shape (docs/history.md)."""
    return dialect.expand(template.strip()).format(**values)


def bind(command: str, params: Params, dialect: Dialect = DUCKDB) -> Bound:
    """``command``'s texts with ``params`` bound, spelled for ``dialect``."""
    spec = COMMANDS[command]
    values = literals(params, dialect, command)
    scope, words = spec.scope(params, values)
    queries = tuple(
        Query(
            q.title,
            _fill(q.text, values, dialect),
            None
            if q.trend is None
            else (q.trend[0], q.trend[1], q.trend[2] and q.trend[2].format(**values)),
        )
        for q in spec.queries
    )
    return Bound(
        command,
        queries,
        scope=_fill(scope, values, dialect),
        scope_words=words,
        gate=spec.gate,
        params=values,
    )


def completeness(scope: str, dialect: Dialect = DUCKDB) -> str:
    """The completeness text over ``scope`` (a bound predicate: put in after the macros are spelled)."""
    return _fill(COMPLETENESS, {"scope": scope}, dialect)


def compare_baseline(params: Params, dialect: Dialect = DUCKDB) -> str:
    """The text counting the baseline runs ``compare`` found (none: the gate has nothing to hold to)."""
    return _fill(_COMPARE_BASELINE, literals(params, dialect), dialect)
