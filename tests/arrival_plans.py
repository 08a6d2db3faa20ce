"""Arrival plans for the history lake: generated multi-rank runs spanning UTC days, random plans of the
ways a rank session reaches a lake (whole, per-rank, partial-folder and closed-day exports, with and
without labels, compactions), carried out with the real CLI in process, and the invariant each plan's
lake is held to: one plain whole export of the same runs (docs/history.md, "Identity"). Used by
tests/test_history_arrivals.py (a local lake) and tests/test_history_s3.py (an object store)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import duckdb
import pyarrow.fs as pafs
from generated_runs import generate

from recompprof._capture import history as live
from recompprof._cli.main import main
from recompprof._history import engine, views
from recompprof._history.layout import Lake
from recompprof._history.rows import day_of
from recompprof._history.tables import TABLES

DAY = 86400.0
LABELS = {"team": "vision", "model": "tiny"}
# When each generated run begins: 20:00 UTC, so its first day is short and it spans four UTC days.
FIRST = datetime.datetime(2023, 11, 14, 20, tzinfo=datetime.timezone.utc).timestamp()


@dataclasses.dataclass(frozen=True)
class GeneratedRun:
    """One generated run directory: its name, run id and rank logs."""

    folder: Path
    run_id: str
    logs: tuple[Path, ...]

    def session(self, log: int) -> tuple[int, int]:
        """The rank and pid of a log (from its name, as the exporter reads them)."""
        rank, _, pid = self.logs[log].stem.removeprefix("rank").partition("-")
        return int(rank), int(pid)


def _spread(log: Path, job: str, run_id: str, begin: float, days: int = 3) -> str:
    """``log``'s events moved to start at ``begin`` and cross ``days`` UTC midnights (a day's jump
    after each part of its events), under ``run_id`` and ``job``: its new text."""
    events = [json.loads(line) for line in log.read_text().splitlines()]
    origin = events[0]["time"]
    part = len(events) // (days + 1) + 1
    jumps = 0
    for index, event in enumerate(events):
        # a compile and the recompile_limit_hit that names its limit are logged together: never a
        # day apart
        if index // part > jumps and event["kind"] != "recompile_limit_hit":
            jumps += 1
        shift = begin - origin + jumps * DAY
        event["time"] += shift
        if event.get("start_time") is not None:
            event["start_time"] += shift
    events[0]["run_id"], events[0]["job"] = run_id, job
    return "".join(json.dumps(e) + "\n" for e in events)


def _make_run(
    where: Path, run_id: str, ranks: int, events: int, seed: int, late: float
) -> GeneratedRun:
    """``ranks`` generated rank logs of one job, each from ``late`` s after :data:`FIRST`."""
    generate(where, ranks=ranks, per_rank=events, seed=seed)
    for log in where.glob("*.jsonl"):
        log.write_text(_spread(log, where.name, run_id, FIRST + late))
    return GeneratedRun(where, run_id, tuple(sorted(where.glob("*.jsonl"))))


def _restart(run: GeneratedRun, rank: int, pid: int, seed: int, at: float) -> GeneratedRun:
    """``run`` with rank ``rank`` restarted at ``at``: a second log of that rank, another pid."""
    scratch = run.folder.parent / f"{run.folder.name}-{pid}"
    generate(scratch, ranks=1, per_rank=300, seed=seed)
    [log] = scratch.glob("*.jsonl")
    lines = _spread(log, run.folder.name, run.run_id, at, days=1).splitlines(keepends=True)
    start = json.loads(lines[0])
    start["rank"], start["pid"] = rank, pid
    restarted = run.folder / f"rank{rank:05d}-{pid}.jsonl"
    restarted.write_text(json.dumps(start) + "\n" + "".join(_with_rank(lines[1:], rank)))
    return dataclasses.replace(run, logs=tuple(sorted(run.folder.glob("*.jsonl"))))


def _with_rank(lines: list[str], rank: int) -> list[str]:
    events = [json.loads(line) for line in lines]
    for event in events:
        event["rank"] = rank
    return [json.dumps(e) + "\n" for e in events]


def _attach_again(run: GeneratedRun, log: int, seed: int) -> None:
    """A second session in one of ``run``'s logs: the process attached again after detaching."""
    path = run.logs[log]
    rank, pid = run.session(log)
    last = json.loads(path.read_text().splitlines()[-1])["time"]
    scratch = run.folder.parent / f"{run.folder.name}-again"
    generate(scratch, ranks=1, per_rank=200, seed=seed)
    [other] = scratch.glob("*.jsonl")
    lines = _spread(other, run.folder.name, run.run_id, last + 600, days=1).splitlines(True)
    start = json.loads(lines[0])
    start["rank"], start["pid"] = rank, pid
    with path.open("a") as out:
        out.write(json.dumps(start) + "\n" + "".join(_with_rank(lines[1:], rank)))


def _tear(path: Path) -> None:
    """Cut a log's last line in half, as a rank killed mid-write leaves it."""
    text = path.read_text()
    last = text.rstrip("\n").rpartition("\n")[2]
    path.write_text(text[: len(text) - len(last) // 2 - 1])


def make_runs(where: Path) -> list[GeneratedRun]:
    """Three runs: two jobs that both say run id ``none`` (same ranks and pids, as in containers;
    starts 7 s apart), one of them with a rank restarted (another pid) and one with a log torn at
    its end; and a third with its own id, one of whose processes attached twice (two sessions, one
    log)."""
    first = _make_run(where / "job-a", "none", ranks=3, events=700, seed=21, late=0.0)
    first = _restart(first, rank=1, pid=1701, seed=24, at=FIRST + 1.4 * DAY)
    second = _make_run(where / "job-b", "none", ranks=2, events=500, seed=22, late=7.0)
    _tear(second.logs[1])
    third = _make_run(where / "job-c", "job-c", ranks=2, events=500, seed=23, late=3.0)
    _attach_again(third, 1, seed=25)
    return [first, second, third]


def lake_objects(lake: Lake) -> dict[str, bytes]:
    """Every object of ``lake`` (an object store's), by its name under the lake's prefix."""
    found = {}
    for info in lake.fs.get_file_info(pafs.FileSelector(lake.base, recursive=True)):
        if info.type == pafs.FileType.File:
            with lake.fs.open_input_stream(info.path) as stream:
                found[info.path.removeprefix(lake.base + "/")] = stream.read()
    return found


class CommandFailed(Exception):
    """A command of a plan exited with an error."""


def run_cli(*argv: str) -> None:
    code = main(list(argv))
    if code:
        raise CommandFailed(f"exit {code}: recompprof {' '.join(argv)}")


def _glob(lake: Path, table: str) -> str:
    return f"read_parquet('{lake}/v1/{table}/*/*.parquet', hive_partitioning=true)"


def raw_tables(lake: Path) -> Any:
    """Every raw file of each table (``v1/``, read as plain globs: no reader's rule can hide a row)."""
    con = duckdb.connect()
    for table in TABLES:
        if list((lake / "v1" / table).glob("*/*.parquet")):
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM {_glob(lake, table)}")
    return con


def read_tables(uri: str) -> tuple[Any, list[str]]:
    """Each table as every question reads it (the compacted days up to the marker, raw after), and
    the raw files the readers name as arrived after their day's compaction."""
    found = views.reader(uri)
    selection = views.select(found)
    runner = engine.Engine(found, selection)
    late = sorted(p for checked in selection.tables.values() for p in checked.late)
    for table, checked in selection.tables.items():
        if not checked.good:  # a table of no files: as absent (its view has the questions' columns)
            runner.con.execute(f"DROP VIEW {table}")
    return runner.con, late


class Baseline:
    """One plain whole export of every run into an empty lake, without labels and with them."""

    def __init__(self, runs: list[GeneratedRun], where: Path) -> None:
        self.lakes = {False: where / "plain", True: where / "labeled"}
        for labels, lake in self.lakes.items():
            given = ["--labels", labels_option()] if labels else []
            for run in runs:
                run_cli("export", str(run.folder), "--to", str(lake), *given)
        con = raw_tables(self.lakes[False])
        self.columns = {
            t: [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall() if r[0] != "dt"]
            for t in TABLES
        }

        # Each baseline row as (table, job, rank, day, labeled) -> a hash of all its columns.
        self.rows: dict[tuple[str, str, int, int, str, bool], Counter[int]] = {}
        for labeled, lake in self.lakes.items():
            con = raw_tables(lake)
            for table in TABLES:
                for job, rank, pid, day, digest in self._hashes(con, table):
                    key = (table, job, rank, pid, day, labeled)
                    self.rows.setdefault(key, Counter())[digest] += 1

    def _hashes(self, con: Any, table: str) -> list[tuple[str, int, int, str, int]]:
        """Each row of ``table`` in ``con``: its session's job and rank, its day, a hash of every
        column (in the baseline's order and types)."""
        columns = ", ".join(f'"{c}"' for c in self.columns[table])
        return con.execute(  # type: ignore[no-any-return]
            f"SELECT job, rank, pid, dt::VARCHAR, hash({columns}) FROM {table}"
        ).fetchall()

    def differences(self, con: Any, flags: list[Flag]) -> list[str]:
        """What the tables of ``con`` hold that the expected rows do not, and the reverse: the rows
        of the baseline of each (job, rank, pid, table, day) in ``flags``, labeled as it says."""
        wanted: dict[tuple[str, str, int, int, str], Counter[int]] = {}
        for job, rank, pid, table, day, labeled in flags:
            rows = self.rows.get((table, job, rank, pid, day, labeled))
            if rows:
                wanted[(table, job, rank, pid, day)] = rows
        present = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        found: dict[tuple[str, str, int, int, str], Counter[int]] = {}
        for table in TABLES:
            if table in present:
                for job, rank, pid, day, digest in self._hashes(con, table):
                    found.setdefault((table, job, rank, pid, day), Counter())[digest] += 1
        lines = []
        for key in sorted(set(wanted) | set(found)):
            extra = found.get(key, Counter()) - wanted.get(key, Counter())
            missing = wanted.get(key, Counter()) - found.get(key, Counter())
            table, job, rank, pid, day = key
            for what, rows in (("extra", extra), ("missing", missing)):
                if rows:
                    lines.append(
                        f"{table}: {rows.total()} {what} row(s) of {job} rank {rank} pid {pid} "
                        f"on {day}"
                    )
        return lines


def labels_option() -> str:
    return ",".join(f"{k}={v}" for k, v in LABELS.items())


@dataclasses.dataclass(frozen=True)
class Step:
    """One arrival: ``kind`` of export (``whole``, ``rank``, ``partial``, ``tick``, ``end``) of run
    ``run``'s ``ranks``, or a compaction (``compact``, ``check``); ``labels``: given ``--labels``;
    ``at``: a tick's moment (the log as it stood then); ``through``: a compaction's last day."""

    kind: str
    run: int = 0
    ranks: tuple[int, ...] = ()
    labels: bool = False
    at: float | None = None
    through: str | None = None

    def __str__(self) -> str:
        if self.kind in ("compact", "check"):
            return f"{self.kind}({self.through or ''})"
        when = (
            f"@{datetime.datetime.fromtimestamp(self.at, datetime.timezone.utc):%d %H:%M}"
            if self.at
            else ""
        )
        return (
            f"{self.kind}(run{self.run}{list(self.ranks)}{when}{'+labels' if self.labels else ''})"
        )


def _start_of(log: Path) -> float:
    with log.open() as lines:
        return float(json.loads(next(lines))["time"])


def draw_plan(rng: random.Random, runs: list[GeneratedRun]) -> list[Step]:
    """2-6 arrivals; a session whose closed days are exported while it runs (``tick``) ends with its
    end-of-session export (``end``) later in the plan, as a live job does."""
    chosen = [0] if rng.random() < 0.4 else rng.sample(range(len(runs)), rng.randint(2, 3))
    steps: list[Step] = []
    live_ticks: dict[tuple[int, int], float] = {}
    for _ in range(rng.randint(2, 6)):
        run = rng.choice(chosen)
        logs = len(runs[run].logs)
        labels = rng.random() < 0.25
        kind = rng.choice(("whole", "rank", "partial", "tick", "compact", "check", "whole", "rank"))
        if kind == "whole":
            steps.append(Step("whole", run, tuple(range(logs)), labels))
        elif kind == "rank":
            steps.append(Step("rank", run, (rng.randrange(logs),), labels))
        elif kind == "partial":
            subset = tuple(sorted(rng.sample(range(logs), rng.randint(1, logs - 1))))
            steps.append(Step("partial", run, subset, labels))
        elif kind == "tick":
            rank = rng.randrange(logs)
            last = live_ticks.get((run, rank), _start_of(runs[run].logs[rank]))
            at = last + rng.choice((0.5, 1.0, 1.5, 2.0)) * DAY + rng.uniform(-3600, 3600)
            live_ticks[(run, rank)] = at
            steps.append(Step("tick", run, (rank,), at=at))
        else:
            through = rng.choice([*map(str, _days()[:6]), None])
            steps.append(Step(kind, through=through if kind == "compact" else None))
    for (run, rank), _ in live_ticks.items():
        last = max(
            i
            for i, s in enumerate(steps)
            if s.kind == "tick" and (s.run, s.ranks) == (run, (rank,))
        )
        steps.insert(rng.randint(last + 1, len(steps)), Step("end", run, (rank,)))
    return steps


@dataclasses.dataclass
class Arrived:
    """One export as the model sees it: which sessions (run, rank), the fact days it wrote (after
    ``after``, up to ``cut``: a running session's log ends that day) and whether labels applied."""

    sessions: set[tuple[int, int]]
    after: datetime.date | None
    cut: datetime.date | None
    labeled: bool

    def wrote(self, session: tuple[int, int], table: str, day: datetime.date) -> bool:
        if session not in self.sessions:
            return False
        if table == "runs":
            return True
        return (self.after is None or day > self.after) and (self.cut is None or day <= self.cut)


class Plan:
    """Carries a plan out on one lake, as a fleet would: the real CLI in process, the live path's own
    command line (:func:`recompprof._capture.history._command`) for a running session's exports."""

    def __init__(self, runs: list[GeneratedRun], lake: Path | str, scratch: Path) -> None:
        """``lake``: a local folder, or an object store's URI."""
        self.runs, self.scratch, self.uri = runs, scratch, str(lake)
        if isinstance(lake, Path):
            lake.mkdir(parents=True)  # a compaction may come first
        self.closed: dict[tuple[int, int], datetime.date | None] = {}
        self.remembered: dict[str, bool] = {}
        self.arrived: list[Arrived] = []

    def do(self, step: Step) -> None:
        if step.kind in ("compact", "check"):
            extra = ["--through", step.through] if step.through else []
            run_cli(
                "history",
                "compact",
                "--lake",
                self.uri,
                *extra,
                *(["--check"] if step.kind == "check" else []),
            )
            return
        run = self.runs[step.run]
        given = ["--labels", ",".join(f"{k}={v}" for k, v in LABELS.items())] if step.labels else []
        labeled = step.labels or self.remembered.get(run.run_id, False)
        if step.labels:
            self.remembered[run.run_id] = True
        after = cut = None
        if step.kind == "whole":
            run_cli("export", str(run.folder), "--to", self.uri, *given)
        elif step.kind == "rank":
            run_cli("export", str(run.logs[step.ranks[0]]), "--to", self.uri, "--per-rank", *given)
        elif step.kind == "partial":
            folder = self._folder(f"node-{len(self.arrived)}")
            for rank in step.ranks:
                shutil.copy(run.logs[rank], folder)
            run_cli("export", str(folder), "--to", self.uri, *given)
        else:  # a running session's export: the log so far (a tick) or whole (its end)
            key = (step.run, step.ranks[0])
            after = self.closed.get(key)
            log = run.logs[step.ranks[0]]
            if step.kind == "tick":
                assert step.at is not None
                log = self._log_at(log, step.at)
                cut = day_of(step.at)
            with mock.patch.dict(os.environ, live._environment(self.uri, False), clear=True):
                run_cli(*live._command(log, False, after)[3:])
            if step.kind == "tick":  # the days it closed, by the live path's rule
                assert step.at is not None
                started = datetime.datetime.fromtimestamp(step.at, datetime.timezone.utc)
                self.closed[key] = live.closed_by(started)
        self.arrived.append(Arrived({(step.run, r) for r in step.ranks}, after, cut, labeled))

    def files(self) -> Path:
        """The lake's files in a local folder: the lake itself, or a copy of an object store's."""
        if "://" not in self.uri:
            return Path(self.uri)
        copy = self.scratch / f"copy-{len(self.arrived)}"
        for name, data in lake_objects(Lake(self.uri)).items():
            target = copy / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return copy

    def _folder(self, name: str) -> Path:
        folder = self.scratch / name
        folder.mkdir(parents=True)
        return folder

    def _log_at(self, log: Path, at: float) -> Path:
        """``log`` as it stood at ``at``: the lines written before (all of a torn log past its end)."""
        lines = log.read_text().splitlines(keepends=True)
        kept = [line for line in lines if line.endswith("\n") and json.loads(line)["time"] < at]
        if len(kept) == len(lines) - 1 and not lines[-1].endswith("\n"):
            kept = lines
        copy = self._folder(f"live-{len(self.arrived)}") / log.name
        copy.write_text("".join(kept))
        return copy

    def expected(self) -> list[Flag]:
        """Which rows of the baseline the lake must hold: each (job, rank, table, day) some export
        wrote, labeled as the export that last wrote it was."""
        flags = []
        for index, run in enumerate(self.runs):
            for log in range(len(run.logs)):
                rank, pid = run.session(log)
                for table in TABLES:
                    for day in _days():
                        last = [a for a in self.arrived if a.wrote((index, log), table, day)]
                        if last:
                            labeled = last[-1].labeled
                            flags.append((run.folder.name, rank, pid, table, str(day), labeled))
        return flags


Flag = tuple[str, int, int, str, str, bool]  # job, rank, pid, table, day, labeled


def _days() -> list[datetime.date]:
    """Every UTC day a generated run has rows on (and one after)."""
    first = day_of(FIRST)
    return [first + datetime.timedelta(days=n) for n in range(7)]


def _runs_once(con: Any) -> bool:
    if not con.execute("SELECT 1 FROM duckdb_views() WHERE view_name = 'runs'").fetchall():
        return True
    [(rows, sessions)] = con.execute(
        "SELECT COUNT(*), COUNT(DISTINCT (run_id, job, rank, pid, start_time)) FROM runs"
    ).fetchall()
    return bool(rows == sessions)


def check(baseline: Baseline, plan: Plan) -> list[str]:
    """The invariant, read raw and as the questions read it (after a ``compact --check`` where a
    file arrived late for a compacted day: until then the questions name it, as documented)."""
    flags = plan.expected()
    raw = raw_tables(plan.files())
    problems = baseline.differences(raw, flags)
    if not _runs_once(raw):
        problems.append("runs lists a session twice")
    read, late = read_tables(plan.uri)
    found = baseline.differences(read, flags)
    if found and not late:
        problems += ["read: " + line for line in found]
    if late:
        run_cli("history", "compact", "--lake", plan.uri, "--check")
        read, late = read_tables(plan.uri)
        problems += ["read after --check: " + line for line in baseline.differences(read, flags)]
        problems += [f"late after --check: {late}"] if late else []
    return problems
