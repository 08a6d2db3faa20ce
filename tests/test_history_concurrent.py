"""Questions asked while a job exports: a file replaced under a query is read again, never an error or
a file left out.

A long job with ``history_every`` (or a straggler re-exporting, or ``compact``) replaces a lake file
while a dashboard or a CI gate asks a question. DuckDB opens a file once to plan a query and again to
scan it, so the scan can meet the new file's bytes under the old file's layout and fail (``Invalid
data``, ``bytes outside file``). Here a real writer process re-exports a growing generated run into a
real lake as fast as it can while real questions run against it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from generated_runs import generate
from read_only import read_only

pytest.importorskip("duckdb")  # the lake's reader

HERE = Path(__file__).resolve().parent

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from recompprof._history.export import export

    full, run, lake, stop = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    lines = full.read_text().splitlines(keepends=True)
    rounds, grown = 0, 40
    while not stop.exists():
        (run / full.name).write_text("".join(lines[: min(grown, len(lines))]))
        export([run], lake)
        rounds, grown = rounds + 1, grown + 37
        if grown > len(lines):  # start small again: the file shrinks as well as grows
            grown = 40
    print(rounds, flush=True)
    """
)


def _asked(runner: Any) -> tuple[Any, list[tuple[Any, ...]]]:
    """One command's queries, as the CLI makes them (``Engine.settled`` around them): a question, and
    the run's sessions and counted compiles."""
    from recompprof._history import engine
    from recompprof._history.questions import Params

    counts = (
        "SELECT (SELECT COUNT(*) FROM runs),"
        " (SELECT COUNT(*) FROM compiles WHERE counts_as_compile)"
    )
    return engine.ask(runner, "top-causes", Params()), runner.query(counts).rows


def _ask_while_exporting(
    tmp_path: Path, lake: str, seconds: float, read_only: bool = False
) -> None:
    """Questions asked in a loop for ``seconds`` while another process re-exports a growing run into
    ``lake`` (each export replaces the run's files with longer or shorter ones): every answer comes
    back, no file is left out as unreadable, and every answer holds the run's one session and its
    compiles; and ``history verify``, run between them, finds no file bad. (Two tables read by one
    query may come from two exports: the lake has no snapshot across tables, docs/history.md says
    so.) ``read_only``: the questions are asked by another process that sees the local lake through a
    read-only bind mount of its folder (a dashboard's mount), in a mount namespace of its own."""
    from recompprof._history.export import export

    full, run, stop = tmp_path / "full", tmp_path / "run", tmp_path / "stop"
    generate(full, ranks=1, per_rank=3000, seed=11)
    [log] = full.glob("*.jsonl")
    run.mkdir()
    (run / log.name).write_text("".join(log.read_text().splitlines(keepends=True)[:40]))
    export([run], lake)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(log), str(run), lake, str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if read_only:
            asked = _ask_through_a_read_only_mount(Path(lake), tmp_path / "mounted", seconds)
        else:
            asked = _ask_in_a_loop(lake, seconds)
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=120)
    rounds = int(out.split()[-1])
    assert rounds >= 20, f"the writer replaced the files only {rounds} times"
    assert asked["answers"] >= ENOUGH and not any(asked[k] for k in _WRONG), json.dumps(
        {k: v if k == "answers" else v[:5] for k, v in asked.items()}
    )


# Answers a test asks for at least: three loops of this test at once on 2 cores gave 9 in 25 s.
ENOUGH = 10
# What an answer of _ask_in_a_loop can get wrong, each a list of what went wrong.
_WRONG = ("failures", "left_out", "bad", "wrong")


def _ask_in_a_loop(lake: str, seconds: float) -> dict[str, Any]:
    """Questions asked on ``lake`` for ``seconds`` (longer where fewer than ``ENOUGH`` were answered),
    and ``history verify`` between them: how many were answered, and what went wrong (_WRONG): an
    error, a file left out, a file called bad, an answer without the run's one session or its
    compiles that was not flagged unsettled ("flagged" holds those that were)."""
    from recompprof._history import engine, health, views
    from recompprof._history.columns import TABLES

    asked: dict[str, Any] = {"answers": 0, "flagged": [], **{k: [] for k in _WRONG}}
    deadline = time.monotonic() + seconds
    # and past it, on a loaded machine, until ENOUGH answers (up to three times as long)
    last = deadline + 2 * seconds
    while time.monotonic() < deadline or (asked["answers"] < ENOUGH and time.monotonic() < last):
        try:
            runner = engine.Engine(views.reader(lake), views.select(views.reader(lake)))
            answer, [(sessions, rows)] = runner.settled(partial(_asked, runner))
        except Exception as error:  # noqa: BLE001 - every failure is counted, then asserted
            asked["failures"].append(f"{type(error).__name__}: {error}")
            continue
        asked["answers"] += 1
        asked["left_out"] += [f"{s.path}: {s.detail}" for s in runner.selection.skipped] + [
            f"{s.path}: {s.detail}" for s in answer.skipped
        ]
        if sessions != 1 or rows == 0:
            # An answer the lake changed under on every reading is returned flagged (the CLI warns;
            # Engine.settled): it may miss a table's rows. Only an unflagged wrong answer is wrong.
            asked["flagged" if runner.unsettled else "wrong"].append((sessions, rows))
        opened = views.open_lake(lake)
        files = {table: views.every_file(opened, table) for table in TABLES}
        asked["bad"] += [f"{b.name}: {b.why}" for b in health.verify(opened, files)]
    return asked


ASKER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from test_history_concurrent import _ask_in_a_loop

    print(json.dumps(_ask_in_a_loop(sys.argv[2], float(sys.argv[3]))), flush=True)
    """
)


def _ask_through_a_read_only_mount(lake: Path, mounted: Path, seconds: float) -> dict[str, Any]:
    """_ask_in_a_loop in a process that sees ``lake`` read-only at ``mounted`` (read_only)."""
    asker = [sys.executable, "-c", ASKER, str(HERE), str(mounted), str(seconds)]
    done = read_only(lake, mounted, asker, seconds + 300)
    assert done.returncode == 0, done.stderr[-2000:]
    asked: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return asked


def test_a_question_asked_while_a_file_is_replaced_neither_fails_nor_leaves_it_out(
    tmp_path: Path,
) -> None:
    """On a local lake (see ``_ask_while_exporting``): a replaced file is read again through links."""
    _ask_while_exporting(tmp_path, str(tmp_path / "lake"), seconds=20)


def test_a_lake_mounted_read_only_asked_while_a_file_is_replaced_neither_fails_nor_leaves_it_out(
    tmp_path: Path,
) -> None:
    """A dashboard reading a read-only mount of a local lake (see ``_ask_while_exporting``): it may
    make no hard link, so a read that failed is read again through descriptors it holds open."""
    _ask_while_exporting(tmp_path, str(tmp_path / "lake"), seconds=20, read_only=True)


@pytest.mark.servers
def test_an_object_store_lake_asked_while_a_file_is_replaced_neither_fails_nor_leaves_it_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an S3 lake (moto's server on 127.0.0.1; see ``_ask_while_exporting``). pyarrow reads an
    object's footer in two requests, its size and then its tail: an upload between them read the new
    object's tail at the old one's size, and the file was left out as unreadable (20 of 174 answers
    left one out, 4 of them the run's only ``runs`` file, before the footer was read again); and
    ``verify``, reading a column per request, called replaced files bad. (This writer replaces the
    run's objects faster than a question reads them, so most answers here never settle and are
    flagged: ``Engine.settled`` is held to its rule in tests/test_history_s3.py.)"""
    pytest.importorskip("moto.server")
    from servers import MOTO_ENVIRONMENT, moto_s3

    for name, value in MOTO_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "moto").mkdir()
    with moto_s3(tmp_path / "moto") as endpoint:
        lake = f"s3://lake/busy?endpoint_override={endpoint}&scheme=http&region=us-east-1"
        _ask_while_exporting(tmp_path, lake, seconds=25)


@pytest.mark.servers
def test_an_object_store_lake_compacted_while_a_file_is_replaced_is_compacted_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compact`` in a loop on an S3 lake (moto's server on 127.0.0.1) while a real writer process
    re-exports a growing run into it: no compaction fails and none calls a file unreadable; once the
    writer stops, one more compaction gives the answers the raw files give. A day's objects are read
    in several requests each; one replaced between them failed the day's read, and the file, read
    alone again, decoded: the compaction stopped with "cannot compact" within seconds (or, where that
    read met a replacement too, left a good file out as unreadable). Now the day is read again."""
    pytest.importorskip("moto.server")
    import datetime

    from servers import MOTO_ENVIRONMENT, moto_s3

    from recompprof._history import compact, engine, views
    from recompprof._history.export import export
    from recompprof._history.layout import Lake

    for name, value in MOTO_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    full, run, stop = tmp_path / "full", tmp_path / "run", tmp_path / "stop"
    generate(full, ranks=1, per_rank=3000, seed=11)
    [log] = full.glob("*.jsonl")
    run.mkdir()
    (run / log.name).write_text("".join(log.read_text().splitlines(keepends=True)[:40]))
    (tmp_path / "moto").mkdir()
    counts = "SELECT (SELECT COUNT(*) FROM compiles), (SELECT COUNT(*) FROM guard_failures)"
    with moto_s3(tmp_path / "moto") as endpoint:
        lake = f"s3://lake/compacting?endpoint_override={endpoint}&scheme=http&region=us-east-1"
        export([run], lake)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(log), str(run), lake, str(stop)],
            stdout=subprocess.PIPE,
            text=True,
        )
        compactions, failures, left_out = 0, [], []
        try:
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline:
                compactions += 1
                try:
                    done = compact.compact(Lake(lake), datetime.date(2030, 1, 1))
                except Exception as error:  # noqa: BLE001 - every failure is counted, then asserted
                    failures.append(f"{type(error).__name__}: {error}")
                    continue
                left_out += [f"{s.path}: {s.detail}" for s in done.skipped]
        finally:
            stop.touch()
            out, _ = writer.communicate(timeout=120)
        compact.compact(Lake(lake), datetime.date(2030, 1, 1))
        runner = engine.Engine(views.reader(lake), views.select(views.reader(lake)))
        [compacted] = runner.query(counts).rows
        opened = Lake(lake)
        opened.fs.delete_file(f"{opened.base}/v1-daily/_through")  # readers turn to the raw files
        runner = engine.Engine(views.reader(lake), views.select(views.reader(lake)))
        [raw] = runner.query(counts).rows
    rounds = int(out.split()[-1])
    assert rounds >= 10, f"the writer replaced the files only {rounds} times"
    assert compactions >= 5 and not failures and not left_out, (
        compactions,
        failures[:3],
        left_out[:3],
    )
    assert compacted == raw and raw[0] > 0, (compacted, raw)


def _a_run_exported_short(tmp_path: Path) -> tuple[Path, Path]:
    """A generated 2-rank run (``full``) and a lake holding it cut short, per rank: exporting ``full``
    renames a longer file over each of the lake's files."""
    from recompprof._history.export import export

    full, short, lake = tmp_path / "full", tmp_path / "short", tmp_path / "lake"
    generate(full, ranks=2, per_rank=400, seed=5)
    short.mkdir()
    for log in full.glob("*.jsonl"):  # the same run, cut short: the same file names, fewer rows
        (short / log.name).write_text("".join(log.read_text().splitlines(keepends=True)[:60]))
    export([short], str(lake), per_rank=True)
    return full, lake


def test_a_read_that_failed_is_read_again_through_links_that_no_writer_replaces(
    tmp_path: Path,
) -> None:
    """After a read error the engine reads a local lake through hard links to its files: a file
    replaced after that is still read as it was, so the second read cannot fail the way the first did;
    the links are hidden from every listing and gone with the engine."""
    import gc

    from recompprof._history import engine, views
    from recompprof._history.export import export

    full, lake = _a_run_exported_short(tmp_path)
    count = "SELECT COUNT(*) FROM compiles"

    runner = engine.Engine(views.reader(str(lake)), views.select(views.reader(str(lake))))
    [gone, kept] = sorted((lake / "v1" / "compiles").rglob("*.parquet"))
    gone.unlink()  # the views' file is gone: the next read fails, and the lake is read again
    [(before,)] = runner.query(count).rows
    links = sorted(p.name for p in lake.rglob(".*.tmp"))
    assert len(links) == len(list(lake.rglob("*.parquet")))  # each file left, once

    export([full], str(lake), per_rank=True)  # a writer renames a longer file over each one
    [(after,)] = runner.query(count).rows
    fresh = engine.Engine(views.reader(str(lake)), views.select(views.reader(str(lake))))
    [(now,)] = fresh.query(count).rows
    assert before == after != now, (before, after, now)
    assert not views.select(views.reader(str(lake))).skipped

    del runner
    gc.collect()
    assert not list(lake.rglob(".*.tmp"))
    assert kept.exists()


HOLDER = textwrap.dedent(
    """
    import gc, json, os, sys
    from pathlib import Path
    from recompprof._history import engine, views
    from recompprof._history.export import export

    lake, mounted, full = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    count = "SELECT COUNT(*) FROM compiles"
    runner = engine.Engine(views.reader(mounted), views.select(views.reader(mounted)))
    runner.lock()  # history sql's lock: the lake's folder and the held files' links alone
    [gone, kept] = sorted((lake / "v1" / "compiles").rglob("*.parquet"))
    gone.unlink()  # the views' file is gone: the next read fails, and the lake is read again
    [(before,)] = runner.query(count).rows
    held = runner._pins.folder or ""
    links = sorted(os.path.relpath(p, held) for p in runner._pins.links.values())
    export([full], str(lake), per_rank=True)  # a writer renames a longer file over each one
    [(after,)] = runner.query(count).rows
    fresh = engine.Engine(views.reader(mounted), views.select(views.reader(mounted)))
    [(now,)] = fresh.query(count).rows
    del runner
    gc.collect()
    print(json.dumps({"counts": [before, after, now], "links": links,
                      "held_left": bool(held) and os.path.exists(held), "kept": kept.exists()}))
    """
)


def test_a_lake_the_reader_may_not_write_is_read_again_through_descriptors_it_holds(
    tmp_path: Path,
) -> None:
    """A read-only mount refuses hard links: after a read error the engine holds each file open and
    reads it through a symbolic link, in a private folder, to ``/proc/<pid>/fd/<n>`` at the file's own
    path under the lake (so its day is read from the folder). A file replaced after that is still read
    as it was, also under ``history sql``'s lock; the folder goes with the engine. (Before, such a
    lake was read again as it is, and a replacement during that read failed the question.)"""

    full, lake = _a_run_exported_short(tmp_path)
    holder = [sys.executable, "-c", HOLDER, str(lake), str(tmp_path / "mounted"), str(full)]
    done = read_only(lake, tmp_path / "mounted", holder, 300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])

    before, after, now = seen["counts"]
    assert before == after != now, seen
    days = {p.parent.relative_to(lake) for p in lake.rglob("*.parquet")}
    assert {str(Path(link).parent) for link in seen["links"]} == {str(d) for d in days}
    assert len(seen["links"]) == len(list(lake.rglob("*.parquet"))) - 1  # each file left, once
    assert not seen["held_left"] and seen["kept"]
    assert not list(lake.rglob(".*.tmp"))  # no hard link was made


def test_files_deleted_between_the_listing_and_the_views_are_listed_again(tmp_path: Path) -> None:
    """A question lists the lake, then a whole-run export deletes the run's per-rank files before the
    question's views are made: the views bind the lake listed again, and the answer holds the run's
    every compile once, not an error."""
    from recompprof._history import engine, views
    from recompprof._history.export import export

    run, lake = tmp_path / "run", tmp_path / "lake"
    generate(run, ranks=2, per_rank=300, seed=3)
    export([run], str(lake), per_rank=True)
    listed = views.select(views.reader(str(lake)))
    export([run], str(lake))  # the whole run replaces (deletes) the per-rank files listed above
    assert not any(p.exists() for p in map(Path, listed.tables["compiles"].good))

    runner = engine.Engine(views.reader(str(lake)), listed)
    [(rows, sessions)] = runner.query(
        "SELECT (SELECT COUNT(*) FROM compiles), (SELECT COUNT(*) FROM runs)"
    ).rows
    assert sessions == 2 and not runner.selection.skipped
    whole = engine.Engine(views.reader(str(lake)), views.select(views.reader(str(lake))))
    assert rows == whole.query("SELECT COUNT(*) FROM compiles").rows[0][0] > 0


REBUILDER = textwrap.dedent(
    """
    import datetime, shutil, sys
    from pathlib import Path
    from recompprof._history import compact
    from recompprof._history.layout import Lake

    root, stop, done = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    rounds = 0
    while not stop.exists():
        # docs/history.md's rebuild: the marker first (readers turn to the raw files), then the root
        (root / "v1-daily" / "_through").unlink(missing_ok=True)
        shutil.rmtree(root / "v1-daily", ignore_errors=True)
        compact.compact(Lake(str(root)), datetime.date(2026, 11, 2))
        compact.compact(Lake(str(root)), datetime.date(2026, 11, 4))
        rounds += 1
        done.write_text(str(rounds))
    print(rounds, flush=True)
    """
)


def test_questions_asked_while_the_compacted_days_are_rebuilt_count_every_row_once(
    tmp_path: Path,
) -> None:
    """A real process rebuilds the compacted root over and over (the marker deleted, the root deleted,
    two days compacted and the marker moved, then two more) while questions are asked: every answer
    holds every row once. A listing that met a moved marker or a deleted day (read the marker, then
    found its days gone) is listed again, never answered with those days left out (34 of 884 answers
    lacked two days, and 209 files were called unreadable, before)."""
    from history_fleet import Fleet, write_fleet

    from recompprof._history import engine, views

    lake, stop, done = tmp_path / "lake", tmp_path / "stop", tmp_path / "rounds"
    write_fleet(lake, Fleet(days=4))
    counts = (
        "SELECT (SELECT COUNT(*) FROM compiles), (SELECT COUNT(*) FROM guard_failures),"
        " (SELECT COUNT(*) FROM runs)"
    )

    def ask() -> tuple[tuple[int, ...], list[str]]:
        runner = engine.Engine(views.reader(str(lake)), views.select(views.reader(str(lake))))
        return runner.query(counts).rows[0], [s.path for s in runner.selection.skipped]

    truth, _ = ask()
    rebuilder = subprocess.Popen(
        [sys.executable, "-c", REBUILDER, str(lake), str(stop), str(done)],
        stdout=subprocess.PIPE,
        text=True,
    )
    answers, wrong, left_out = 0, [], []

    def rebuilt() -> int:
        return int(done.read_text() or 0) if done.exists() else 0

    try:
        # 15 s, and longer on a loaded machine until the root was rebuilt 5 times (at most 120 s)
        start = time.monotonic()
        while time.monotonic() < start + 15 or (rebuilt() < 5 and time.monotonic() < start + 120):
            got, skipped = ask()
            answers += 1
            left_out += skipped
            if got != truth:
                wrong.append(got)
    finally:
        stop.touch()
        out, _ = rebuilder.communicate(timeout=120)
    rounds = int(out.split()[-1])
    assert rounds >= 5, f"the compacted root was rebuilt only {rounds} times"
    assert answers >= 20 and not wrong and not left_out, (answers, truth, wrong[:3], left_out[:3])
