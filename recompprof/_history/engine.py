"""The embedded engine: DuckDB over the lake's views, and the answers it gives (data, never sentences).

An :class:`Answer` holds each query's rows plus what the reader must know to trust them: the files
left out (by :mod:`~recompprof._history.health`, or here when DuckDB finds a broken page behind a good
footer: the file is dropped and the query run again), the tables with no files yet, and how many of
the sessions in range did not end or had a dark signal. :mod:`recompprof._history.render` words it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from recompprof._errors import CommandError
from recompprof._history import pins, questions, views
from recompprof._history.columns import TABLES
from recompprof._history.dialects.base import literal
from recompprof._history.health import Skipped
from recompprof._history.questions import Params
from recompprof._model import ranks

_MAX_RETRIES = 50  # files dropped for broken pages, one per retry
# Reads the lake again from its listing after a read error, before any file is called broken: a file
# replaced while DuckDB read it (a running job's periodic export, a re-export, compaction) fails that one
# read (DuckDB opens a file once to plan and again to scan). A local lake is read again through hard
# links, or descriptors held open where the reader may not write it (recompprof._history.pins), which no
# writer replaces; an object store is read again as it is, where another replacement can fail that read
# too.
_MAX_REREADS = 3
# The reads of a command's queries before an answer is given unsettled (Engine.settled).
SETTLE_READS = _MAX_REREADS + 1

T = TypeVar("T")


@dataclass
class Result:
    title: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    trend: tuple[str, tuple[str, ...], str | None] | None = None
    # The rows found, where only the first of them are kept (compare's --top); None: all are kept.
    total: int | None = None


@dataclass(frozen=True)
class Completeness:
    """The rank sessions a question read, and how many of them are partial."""

    scope: str
    sessions: int
    not_ended: int
    dark: int
    log_gaps: int

    @property
    def partial(self) -> bool:
        return bool(self.not_ended or self.dark or self.log_gaps)


@dataclass
class Answer:
    command: str
    results: list[Result] = field(default_factory=list)
    completeness: Completeness | None = None
    skipped: list[Skipped] = field(default_factory=list)
    missing: dict[str, Counter[str]] = field(default_factory=dict)
    empty_tables: list[str] = field(default_factory=list)
    lost_at_compaction: dict[str, list[str]] = field(default_factory=dict)
    late: dict[str, list[str]] = field(default_factory=dict)
    baseline_runs: int | None = None  # compare: the runs the gate held the candidate to
    min_baseline: int = 0  # compare: fewer baseline runs than this are too few to gate on
    # compare: the run's world size and the ranks below it with no session in the lake (an export
    # that has not arrived, a rank that did not attach): the gate holds only the ranks it has.
    world_size: int = 0
    missing_ranks: list[int] = field(default_factory=list)
    gate: bool = False
    # The lake's files changed while every one of the command's reads ran (Engine.settled): this is
    # the last read's answer, and it may mix a file's old and new rows.
    unsettled: bool = False

    @property
    def too_few(self) -> bool:
        """compare found fewer earlier runs than it needs to know the job's noise: nothing is gated."""
        return self.baseline_runs is not None and self.baseline_runs < self.min_baseline

    @property
    def findings(self) -> bool:
        return self.gate and not self.too_few and any(r.rows for r in self.results)

    @property
    def found(self) -> int:
        """How many findings in all (a summary keeps the worst of them)."""
        return sum(len(r.rows) if r.total is None else r.total for r in self.results)


class Engine:
    """DuckDB with the lake's views; one per command."""

    def __init__(
        self, lake: views.Readable, selection: views.Selection, questions_only: bool = False
    ) -> None:
        self.con = selection.connection or views.connect()
        from recompprof._history import duck

        self._duckdb = duck.load()
        self.lake = lake
        self.selection = selection
        # The views give only the columns the canonical questions read (``history sql`` reads any).
        self._questions_only = questions_only
        self.dropped: list[Skipped] = []
        # An object store's files kept changing while a command read them (see settled()).
        self.unsettled = False
        # The connection lock() locked (a locked connection refuses every SET, the lock's own too);
        # None: not locked. A new connection (_select_again) is locked again.
        self._locked: Any = None
        self._spill: str | None = None  # the locked engine's private temporary directory
        # The session counts of each scope asked (a digest's questions share theirs).
        self._counted: dict[str, tuple[int, int, int, int]] = {}
        # After a read error: the links the views read instead of a local lake's files, removed when
        # the engine goes (or at exit).
        self._pins = pins.Pins()
        weakref.finalize(self, self._pins.release)
        try:
            self._create_views()
        except self._duckdb.Error as error:
            # A view binds its files: one gone since the listing (a whole-run export deletes the run's
            # per-rank files) fails it, as a replaced file fails a query.
            if not self._reading(error):
                raise
            self._select_again()

    def lock(self) -> None:
        """From now on the engine reads the lake and nothing else: no file outside the lake's folder (and
        its own private temporary directory) is read or written (``COPY ... TO``, ``read_csv('/etc/...')``,
        ``ATTACH``, ``INSTALL`` all refused; :func:`free_query` runs no statement that writes),
        and no later statement can undo it. ``history sql`` runs a text a bot or a dashboard may pass
        on from anyone; the canonical questions are this module's own texts. Locking again (a
        command's queries made again, :meth:`settled`) changes nothing."""
        if self._locked is self.con:
            return
        # DuckDB allows its temporary directory too (by default ``.tmp`` under the working
        # directory, anyone's files): a private one, removed with the engine, is all it may spill to.
        if self._spill is None:
            import shutil  # history sql alone locks: the questions' start-up stays without them

            from recompprof._history import scratch

            self._spill = scratch.folder("spill")
            weakref.finalize(self, shutil.rmtree, self._spill, True)
        self.con.execute(f"SET temp_directory = {literal(self._spill)}")
        if self.lake.local:
            # and the folder of links to the files it holds open, if it holds any (pins.Pins)
            folders = [self.lake.base, *filter(None, [self._pins.folder])]
            allowed = ", ".join(literal(folder + "/") for folder in folders)
            self.con.execute(f"SET allowed_directories = [{allowed}]")
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")
        self._locked = self.con

    def _create_views(self) -> None:
        self._counted.clear()  # the files behind the views changed
        statements, datasets = views.duckdb_views(
            self.lake, self.selection, self._questions_only, self._pins.links
        )
        if datasets:
            from recompprof._history import duck

            duck.scans_python_objects()
        for name, dataset in datasets.items():
            self.con.register(name, dataset)
        for statement in statements:
            self.con.execute(statement)

    def query(self, sql: str, title: str = "", trend: Any = None) -> Result:
        """Run ``sql``; after a read error the lake is read again (a file may have been replaced under
        the query); a file whose pages are still broken is dropped (and said) and the query rerun."""
        rereads = 0
        for _ in range(_MAX_RETRIES):
            try:
                cursor = self.con.execute(sql)
                columns = [d[0] for d in cursor.description or ()]
                return Result(title, columns, [tuple(r) for r in cursor.fetchall()], trend)
            except self._duckdb.Error as error:
                if self._reading(error) and rereads < _MAX_REREADS:
                    rereads += 1
                    self._select_again()
                    continue
                if not self._drop_broken(str(error)) and not self._probe(error, sql):
                    raise
        raise CommandError(f"{self.lake.uri}: too many unreadable files; see the warnings")

    def settled(self, compute: Callable[[], T]) -> T:
        """``compute()`` (one command's queries), made again from a fresh listing when a file it read
        changed meanwhile (up to 3 times).

        An object store keeps no snapshot of an object across the requests that read it: a query whose
        object a running job's export replaced during its scan has failed (and was read again, in
        :meth:`query`) and has also, once in about a thousand such scans, counted no row without an
        error (a filter DuckDB gave pyarrow's scan). So after the queries the files are listed again,
        and the answer stands only if every file it read is the one the selection listed. A lake whose
        files change faster than a command reads them never settles: the answer of a fourth run is
        returned and :attr:`unsettled` says so (the CLI warns). A local lake is read through links
        after any failure, and is not listed again.
        """
        for _ in range(_MAX_REREADS):
            result = compute()
            if not self._changed():
                return result
            self._select_again()
        self.unsettled = True
        return compute()

    def _changed(self) -> bool:
        """Whether a file the views read has another size or time than when the selection listed it."""
        listed = self.selection.stamps
        if listed is None or isinstance(self.lake, views.LocalLake):  # a local lake has no stamps
            return False
        now = views.stamps(self.lake, tuple(self.selection.tables))
        read = [p for checked in self.selection.tables.values() for p in checked.good]
        return any(p in listed and now.get(p, listed[p]) != listed[p] for p in read)

    def _reading(self, error: Exception) -> bool:
        """Whether ``error`` came from reading the files, not from the query's own text."""
        d = self._duckdb
        return not isinstance(
            error, (d.ParserException, d.BinderException, d.CatalogException, d.PermissionException)
        )

    def _select_again(self) -> None:
        """The lake listed and its footers read afresh, through a new connection (the old one's
        metadata cache may hold a replaced file's footer), into the same :class:`Selection` the
        command holds, and the views made again (up to 3 times, as a view binds its files); the lock,
        if taken, taken again."""
        for attempt in range(_MAX_REREADS):
            fresh = views.select(self.lake, tuple(self.selection.tables))
            for table, checked in self.selection.tables.items():
                # a file dropped for broken pages in this command stays dropped
                kept = fresh.tables[table]
                dropped = [
                    s for s in checked.skipped if s.why == "unreadable" and s.path in kept.good
                ]
                kept.skipped += dropped
                kept.good = [p for p in kept.good if p not in {s.path for s in dropped}]
            self.selection.through = fresh.through
            self.selection.tables = fresh.tables
            self.selection.stamps = fresh.stamps
            old, self.con = self.con, fresh.connection or views.connect()
            self.selection.connection = self.con
            old.close()
            self._hold()
            try:
                self._create_views()
                break
            except self._duckdb.Error as error:
                if not self._reading(error) or attempt == _MAX_REREADS - 1:
                    raise
        if self._locked is not None:
            self.lock()

    def _hold(self) -> None:
        """Hold the files the views read (a local lake: hard links, or open descriptors where the lake
        refuses links), so that the next read meets no replaced file; where neither can be had, the
        files are read as they are."""
        self._pins.release()
        if not self.lake.local:
            return
        # A file gone since the listing: that read fails, and the next lists the lake again.
        with contextlib.suppress(FileNotFoundError):
            self._pins.take(
                [p for checked in self.selection.tables.values() for p in checked.good],
                self.lake.base,
            )

    def _drop(self, table: str, path: str, why: str) -> None:
        checked = self.selection.tables[table]
        checked.good.remove(path)
        checked.skipped.append(Skipped(table, path, "unreadable", _first_line(why)))

    def _drop_broken(self, message: str) -> bool:
        """Drop the file DuckDB's error names, if it names one of ours."""
        for table, checked in self.selection.tables.items():
            for path in checked.good:
                if path in message or self._pins.links.get(path, path) in message:
                    self._drop(table, path, message)
                    self._create_views()
                    return True
        return False

    def _probe(self, error: Exception, sql: str) -> bool:
        """An error reading data that names no file (a damaged page): decode each file of the tables
        ``sql`` reads, whole, and drop those that fail. Errors in the query itself are not probed."""
        if not self._reading(error):
            return False
        import pyarrow as pa
        import pyarrow.parquet as pq

        found = False
        for table in sorted(_tables_read([sql])):
            for path in list(self.selection.tables[table].good):
                try:
                    if isinstance(self.lake, views.LocalLake):
                        pq.ParquetFile(self._pins.links.get(path, path)).read()
                    else:
                        with self.lake.fs.open_input_file(path) as handle:
                            pq.ParquetFile(handle).read()
                except (OSError, pa.ArrowException, ValueError) as broken:
                    self._drop(table, path, f"{error}; {broken}")
                    found = True
        if found:
            self._create_views()
        return found


def _first_line(message: str) -> str:
    return " ".join(message.split())[:200]


_TABLE_NAMES = re.compile(r"\b(" + "|".join(TABLES) + r")\b")


def _tables_read(sqls: list[str]) -> set[str]:
    return {m for sql in sqls for m in _TABLE_NAMES.findall(sql)}


def completeness(engine: Engine, scope: str, words: str) -> Completeness:
    counted = engine._counted.get(scope)
    if counted is None:
        row = engine.query(questions.completeness(scope)).rows[0]
        sessions, not_ended, dark, gaps = (int(v or 0) for v in row)
        counted = engine._counted[scope] = (sessions, not_ended, dark, gaps)
    return Completeness(words, *counted)


def _frame(answer: Answer, engine: Engine, read: set[str]) -> Answer:
    """What the answer must say about the files behind it."""
    for table, checked in engine.selection.tables.items():
        answer.skipped.extend(checked.skipped)
        if table not in read:
            continue
        if not checked.good:
            answer.empty_tables.append(table)
        if checked.missing:
            answer.missing[table] = checked.missing
        if checked.late:
            answer.late[table] = checked.late
        if checked.lost_at_compaction:
            answer.lost_at_compaction[table] = checked.lost_at_compaction
    return answer


def ask(engine: Engine, command: str, params: Params) -> Answer:
    """Answer one of the canonical questions (``questions.COMMANDS``)."""
    if command == "compare":
        params = _compare_params(engine, params)
    bound = questions.bind(command, params)
    answer = Answer(command, gate=bound.gate)
    if command == "compare":
        found = engine.query(questions.compare_baseline(params)).rows[0][0]
        answer.baseline_runs = int(found or 0)
        answer.min_baseline = max(1, params.min_baseline)
        answer.world_size, answer.missing_ranks = _run_ranks(engine, params)
    if not answer.too_few:
        for q in bound.queries:
            result = engine.query(q.text, q.title, q.trend)
            if command == "compare" and params.top and len(result.rows) > params.top:
                result.total = len(result.rows)
                result.rows = result.rows[: params.top]  # ordered worst first
            answer.results.append(result)
    answer.completeness = completeness(engine, bound.scope, bound.scope_words)
    return _frame(answer, engine, _tables_read([q.text for q in bound.queries]) | {"runs"})


def _compare_params(engine: Engine, params: Params) -> Params:
    """compare's job: the one its run's sessions name (``--job`` when they name several)."""
    run = questions.DUCKDB.string(params.run)
    jobs = engine.query(f"SELECT DISTINCT job FROM runs WHERE run_id = {run} ORDER BY job").rows
    if not jobs:
        left_out = (
            engine.selection.tables["runs"].skipped if "runs" in engine.selection.tables else []
        )
        raise CommandError(
            f"run {params.run!r} is not in the lake (no rank session of it in runs)"
            + (
                f"; {len(left_out)} runs file(s) could not be read and were left out, and it may be "
                f"in one: {', '.join(s.path.rpartition('/')[2] for s in left_out[:3])}"
                if left_out
                else ""
            )
        )
    _held_to_filters(engine, params, run)
    names = [j[0] for j in jobs if j[0] is not None]
    if params.job and params.job not in names:
        raise CommandError(
            f"run {params.run!r} names job(s) {', '.join(map(repr, names)) or 'none'}, not "
            f"{params.job!r}: the gate would compare nothing"
        )
    if params.job:
        return params
    if len(names) != 1:
        raise CommandError(
            f"run {params.run!r} names {len(names)} jobs ({', '.join(map(str, names)) or 'none'}); "
            "pass --job"
        )
    return dataclasses.replace(params, job=names[0])


def _run_ranks(engine: Engine, params: Params) -> tuple[int, list[int]]:
    """The largest world size the run's sessions announce, and the ranks below it with none."""
    where = questions.literals(params, questions.DUCKDB)
    rows = engine.query(
        f"SELECT rank, world_size FROM runs WHERE run_id = {where['run']} AND job = {where['job']}"
        f"{where['only']}"
    ).rows
    world = max((w or 0 for _, w in rows), default=0)
    return world, ranks.missing(world, (rank for rank, _ in rows))


def _held_to_filters(engine: Engine, params: Params, run: str) -> None:
    """Refuse a ``--job/--team/--model`` that leaves the run itself out: the gate would compare no
    row of it and pass (a CI step's filter that does not name the run's team, say)."""
    for column, value in params.only:
        where = f"run_id = {run} AND {column} = {questions.DUCKDB.string(value)}"
        if not engine.query(f"SELECT 1 FROM runs WHERE {where} LIMIT 1").rows:
            found = engine.query(
                f"SELECT DISTINCT {column} FROM runs WHERE run_id = {run} ORDER BY 1"
            ).rows
            named = ", ".join(repr(r[0]) if r[0] is not None else "none" for r in found)
            raise CommandError(
                f"run {params.run!r} has {column} {named}, not {value!r}: --{column} leaves the run "
                "out and the gate would compare nothing"
            )


# The statements ``history sql`` runs: one query (DESCRIBE and SUMMARIZE are queries to DuckDB too),
# or an EXPLAIN of one.
_QUERIES = ("SELECT",)


def _kinds(d: Any, sql: str) -> list[str]:
    """The kind of each statement in ``sql``, an EXPLAIN's as ``EXPLAIN <kind>`` of the statement it
    plans (``EXPLAIN ANALYZE`` runs it: ``EXPLAIN ANALYZE COPY ... TO`` writes a file). The explained
    statement is the text from the first token after EXPLAIN where one whole statement parses (past
    ``ANALYZE``, options and comments); one that never parses is ``EXPLAIN ?``. Raises ``d.Error``."""
    kinds = []
    for statement in d.extract_statements(sql):
        kind = statement.type.name
        if kind == "EXPLAIN":
            text = statement.query
            inner = "?"
            for position, _ in d.tokenize(text)[1:]:
                try:
                    found = _kinds(d, text[position:])
                except d.Error:
                    continue
                if len(found) == 1:
                    inner = found[0]
                    break
            kind = f"EXPLAIN {inner}"
        kinds.append(kind)
    return kinds


def _runs_a_query(kind: str) -> bool:
    """Whether a statement of ``kind`` (:func:`_kinds`) reads and does nothing else."""
    return (
        kind.removeprefix("EXPLAIN ") in _QUERIES
        if kind.startswith("EXPLAIN ")
        else kind in _QUERIES
    )


def free_query(engine: Engine, sql: str) -> Answer:
    """``history sql``: one query over the views (the only free-form text), the engine locked to the
    lake first (:meth:`Engine.lock`)."""
    d = engine._duckdb
    if engine._questions_only:  # a text may read any column
        engine._questions_only = False
        engine._create_views()
    try:
        kinds = _kinds(d, sql)
    except d.Error as error:
        raise CommandError(f"the query failed: {_first_line(str(error))}") from None
    if len(kinds) != 1 or not _runs_a_query(kinds[0]):
        raise CommandError(
            "history sql runs one SELECT (or WITH ... SELECT, or an EXPLAIN of one) over the "
            "lake's views; given: " + (", ".join(kinds) or "no statement")
        )
    engine.lock()
    try:
        result = engine.query(sql, "")
    except d.PermissionException as error:
        raise CommandError(
            f"history sql reads the lake's views and nothing else: {_first_line(str(error))}"
        ) from None
    except d.Error as error:
        raise CommandError(f"the query failed: {_first_line(str(error))}") from None
    answer = Answer("sql", results=[result])
    answer.completeness = completeness(engine, "true", "the whole lake")
    return _frame(answer, engine, _tables_read([sql]) | {"runs"})


# The questions a digest asks, in the order it shows them (every canonical one).
DIGEST = tuple(questions.COMMANDS)


def digest(
    engine: Engine, params: Params, run: str = "", by: dict[str, str] | None = None
) -> tuple[list[Answer], dict[str, str]]:
    """``history digest``: every canonical question over one engine, as each command alone answers it
    with ``params``; and the questions left out, each with why. regressions compares ``params``'
    versions, else the lake's two newest torch releases (by the first session of each); compare
    holds ``run`` to its job's history, and is left out without one. ``by``: a question's own grouping
    where ``params`` names none (each command's default)."""
    answers: list[Answer] = []
    left_out: dict[str, str] = {}
    compare_only = tuple((c, v) for c, v in params.only if c != "job")
    for command in DIGEST:
        asked = params
        if by and command in by:
            asked = dataclasses.replace(params, by=by[command])
        if command == "regressions" and not params.baseline:
            newest = _newest_releases(engine, params)
            if len(newest) < 2:
                left_out[command] = (
                    "fewer than two torch releases in the lake "
                    "(--baseline/--candidate name the versions)"
                )
                continue
            asked = dataclasses.replace(params, baseline=newest[1], candidate=newest[0])
        if command == "compare":
            if not run:
                left_out[command] = "no run given (--run RUN holds it to its job's history)"
                continue
            job = dict(params.only).get("job", "")
            asked = dataclasses.replace(params, run=run, job=job, only=compare_only)
            try:
                answers.append(ask(engine, command, asked))
            except CommandError as error:  # a run not in the lake (yet): the other questions stand
                left_out[command] = str(error)
            continue
        answers.append(ask(engine, command, asked))
    return answers, left_out


def _newest_releases(engine: Engine, params: Params) -> list[str]:
    only = questions.literals(params, questions.DUCKDB)["only"]
    rows = engine.query(
        "SELECT torch_release FROM runs WHERE torch_release IS NOT NULL"
        f"{only} GROUP BY torch_release ORDER BY MIN(start_time) DESC, torch_release DESC LIMIT 2"
    ).rows
    return [r[0] for r in rows]
