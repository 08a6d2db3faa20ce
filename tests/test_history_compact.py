"""``recompprof history compact``: one file per table and day, the ``_through`` marker every reader
obeys (nothing counted twice, nothing lost), and raw files that arrive late taken in by the next."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from history_fleet import Fleet, write_fleet

from recompprof._cli.main import main
from recompprof._history import compact, daily
from recompprof._history.layout import Lake

FLEET = Fleet(days=4)
QUESTIONS = (
    ["top-causes", "--since", "2026-10-01"],
    ["cost", "--since", "2026-10-01"],
    ["regressions", "--baseline", "torch=2.14.1", "--candidate", "torch=2.15.0"],
    ["limit-hits", "--since", "2026-10-01"],
    ["divergence", "--since", "2026-10-01"],
    ["latency", "--since", "2026-10-01"],
    ["sql", "SELECT COUNT(*) AS n, ROUND(SUM(compile_s), 6) AS s FROM compiles"],
    ["sql", "SELECT COUNT(*) AS n FROM guard_failures"],
    ["sql", "SELECT COUNT(*) AS n, SUM(recompiles) AS r FROM runs"],
)


@pytest.fixture(scope="module")
def raw_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("raw") / "lake"
    write_fleet(root, FLEET)
    return root


@pytest.fixture
def lake(raw_lake: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "lake"
    shutil.copytree(raw_lake, copy)
    return copy


def answers(capsys: pytest.CaptureFixture[str], root: Path) -> list[object]:
    out = []
    for argv in QUESTIONS:
        main(["history", *argv[:1], "--lake", str(root), *argv[1:], "--format", "json"])
        document = json.loads(capsys.readouterr().out)
        out.append([r["rows"] for r in document["results"]])
    return out


def _day(n: int) -> datetime.date:
    return FLEET.start + datetime.timedelta(days=n)


def test_compaction_changes_no_answer(lake, capsys):
    """Every question gives the same rows before and after compacting two of four days, and after
    compacting all of them: the compacted days replace their raw files, never add to them."""
    before = answers(capsys, lake)
    assert main(["history", "compact", "--lake", str(lake), "--through", str(_day(1))]) == 0
    assert "compacted through 2026-11-02" in capsys.readouterr().out
    assert answers(capsys, lake) == before
    assert main(["history", "compact", "--lake", str(lake), "--through", str(_day(3))]) == 0
    capsys.readouterr()
    assert answers(capsys, lake) == before


def test_one_sorted_file_per_table_and_day_with_its_sources(lake):
    """Each compacted day is one file, sorted by job, frame and time, beside the list of raw files it
    covered; the marker names the last day."""
    handle = Lake(str(lake))
    done = compact.compact(handle, _day(1))
    assert done.through == _day(1) and not done.skipped
    assert daily.through(handle) == _day(1)
    for table in ("runs", "compiles", "guard_failures", "graph_breaks"):
        parts = sorted((lake / "v1-daily" / table).rglob("*.parquet"))
        assert [p.parent.name for p in parts] == ["dt=2026-11-01", "dt=2026-11-02"]
        for part in parts:
            raw = sorted((lake / "v1" / table / part.parent.name).glob("*.parquet"))
            listed = (part.parent / "_sources").read_text().splitlines()
            assert sorted(line.rsplit(" ", 1)[0] for line in listed) == [p.name for p in raw]
            assert pq.read_metadata(part).num_rows == sum(pq.read_metadata(p).num_rows for p in raw)
    rows = pq.read_table(lake / "v1-daily" / "compiles" / "dt=2026-11-01" / "part-0.parquet")
    keys = list(zip(*(rows[c].to_pylist() for c in ("job", "frame_key", "time"))))
    assert keys == sorted(keys)


def test_a_compaction_stopped_before_its_marker_counts_nothing_twice(lake, capsys):
    """Compacted files written but the marker not moved (a compaction killed half way): readers stay on
    the raw files, and the answers do not change."""
    before = answers(capsys, lake)
    handle = Lake(str(lake))
    compact.compact(handle, _day(2))
    (lake / "v1-daily" / "_through").write_text(f"{_day(0)}\n")
    assert answers(capsys, lake) == before


def test_late_raw_files_are_warned_about_then_taken_in_by_the_next_compaction(
    lake, tmp_path, capsys
):
    """A raw file that arrives for a compacted day is not read, and every query names it; the next
    compaction (no option needed) compacts that day again and the figures include it."""
    late_fleet = Fleet(days=1, runs_per_day=2, seed=99)
    extra = tmp_path / "extra"
    write_fleet(extra, late_fleet)
    assert main(["history", "compact", "--lake", str(lake), "--through", str(_day(1))]) == 0
    capsys.readouterr()
    moved = []
    for source in sorted((extra / "v1").rglob("*.parquet")):
        target = lake / "v1" / source.relative_to(extra / "v1")
        target = target.with_name("late-" + target.name)
        shutil.copy(source, target)
        moved.append(target)
    count = ["sql", "--lake", str(lake), "SELECT COUNT(*) AS n FROM compiles", "--format", "json"]
    main(["history", *count])
    captured = capsys.readouterr()
    n_before = json.loads(captured.out)["results"][0]["rows"][0]["n"]
    assert "arrived after their day was compacted" in captured.err
    assert "compact --check" in captured.err
    # each named with its day's folder: a run's files of two days share a name
    assert all(t.parent.name.startswith("dt=") for t in moved)
    assert all(f"{t.parent.name}/{t.name}" in captured.err for t in moved[:3])
    through = str(_day(1))
    assert main(["history", "compact", "--lake", str(lake), "--through", through]) == 0
    assert "compacted again" in capsys.readouterr().err
    main(["history", *count])
    captured = capsys.readouterr()
    late_rows = sum(pq.read_metadata(p).num_rows for p in moved if "compiles" in p.parts)
    assert json.loads(captured.out)["results"][0]["rows"][0]["n"] == n_before + late_rows
    assert "arrived after" not in captured.err


def test_an_unreadable_raw_file_is_said_after_compaction_too(lake, capsys):
    """A raw file that cannot be read when its day is compacted is recorded in the compacted file, and
    every later query still names it (its rows are not counted)."""
    bad = sorted((lake / "v1" / "compiles" / "dt=2026-11-01").glob("*.parquet"))[0]
    bad.write_bytes(b"garbage")
    assert main(["history", "compact", "--lake", str(lake), "--through", str(_day(0))]) == 0
    assert bad.name in capsys.readouterr().err
    main(["history", "sql", "--lake", str(lake), "SELECT COUNT(*) FROM compiles"])
    err = capsys.readouterr().err
    assert "could not be read when their day was compacted" in err and bad.name in err


def test_print_sql_views_obey_the_marker(lake, capsys):
    """The printed views read compacted days up to the marker and raw days after it."""
    compact.compact(Lake(str(lake)), _day(1))
    main(["history", "top-causes", "--lake", str(lake), "--print-sql", "--dialect", "spark"])
    out = capsys.readouterr().out
    assert "WHERE dt <= DATE '2026-11-02'" in out and "WHERE dt > DATE '2026-11-02'" in out
    assert "v1-daily/compiles" in out


def test_compaction_removes_temporary_files_killed_exporters_left(lake, monkeypatch, capsys):
    """Hidden ``.*.tmp`` files untouched for longer than the bound (an exporter killed mid-write) are
    deleted by the next compaction, in both roots; a fresh one (an export writing now) and every data
    file stay. On a local lake, touched is by the inode's change time: a fresh file whose modification
    time says a day ago stays too. (The bound is cut to 3 s here, as a change time cannot be set back.)"""
    monkeypatch.setattr(compact, "TEMPORARY_AGE", datetime.timedelta(seconds=3))
    day = lake / "v1" / "compiles" / f"dt={_day(0)}"
    data = sorted(p for p in lake.rglob("*.parquet"))
    old = day / ".run-7__all-s0123456789.parquet.4242-0.tmp"
    daily_old = lake / "v1-daily" / "runs" / f"dt={_day(0)}" / ".part-0.parquet.1-0.tmp"
    daily_old.parent.mkdir(parents=True)
    for path in (old, daily_old):
        path.write_bytes(b"PAR1 half a file")
    time.sleep(3.3)
    fresh = day / ".run-8__all-s0123456789.parquet.4243-0.tmp"
    fresh.write_bytes(b"PAR1 half a file")
    a_day_ago = time.time() - 86400 - 60
    os.utime(fresh, (a_day_ago, a_day_ago))
    assert main(["history", "compact", "--lake", str(lake), "--through", str(_day(0))]) == 0
    assert "removed 2 hidden temporary file(s) untouched for 3 s" in capsys.readouterr().err
    assert not old.exists() and not daily_old.exists() and fresh.exists()
    assert all(p.exists() for p in data)


def test_a_readers_link_to_a_file_older_than_a_day_outlives_compaction(lake, capsys):
    """A question's hard link to a lake file (``recompprof._history.pins``) shares the file's
    modification time, days old here, but was made now: compaction leaves it, so the question's
    reread is not taken from under it; released, it is gone and the file stays."""
    from recompprof._history.pins import Pins

    file = sorted((lake / "v1" / "compiles" / f"dt={_day(0)}").glob("*.parquet"))[0]
    three_days_ago = time.time() - 3 * 86400
    os.utime(file, (three_days_ago, three_days_ago))
    pins = Pins()
    pins.take([str(file)], str(lake))
    link = Path(pins.links[str(file)])
    assert link.name.startswith(".") and link.name.endswith(".tmp")
    assert link.stat().st_mtime < time.time() - 2 * 86400  # the file's own age
    assert main(["history", "compact", "--lake", str(lake), "--through", str(_day(0))]) == 0
    assert "removed" not in capsys.readouterr().err
    assert link.exists() and link.read_bytes() == file.read_bytes()
    pins.release()
    assert not link.exists() and file.exists()


def test_a_marker_that_holds_no_date_is_one_line_from_every_reader(lake, capsys):
    """A ``_through`` marker that holds no date stops a question (the local reader) and a compaction
    (the reader through pyarrow's filesystems) with the same one line naming the marker and the mend;
    the lake's files are untouched, and the answers come back once the marker holds its day again."""
    assert main(["history", "compact", "--lake", str(lake), "--through", str(_day(0))]) == 0
    capsys.readouterr()
    before = answers(capsys, lake)
    marker = lake / "v1-daily" / "_through"
    good = marker.read_text()
    files = sorted(p for p in lake.rglob("*.parquet"))
    marker.write_text("not-a-day\n")
    expected = (
        f"{lake}: v1-daily/_through holds 'not-a-day', not a date; "
        "run `recompprof history compact --check` after fixing it"
    )
    for argv in (["top-causes"], ["compact", "--through", str(_day(1))]):
        code = main(["history", argv[0], "--lake", str(lake), *argv[1:]])
        err = capsys.readouterr().err
        assert code != 0 and expected in err and len(err.strip().splitlines()) == 1
    assert sorted(p for p in lake.rglob("*.parquet")) == files
    marker.write_text(good)
    assert answers(capsys, lake) == before


def test_a_through_day_that_has_not_ended_compacts_through_yesterday(lake, capsys):
    """``--through`` today or later (``2999-12-31``, "everything"): compaction stops at yesterday (UTC)
    and says so in one note, so a run exported today is still counted by every question. (Before,
    the marker moved to 2999-12-31 and a run exported after that compaction was left out of every
    answer until the next one, with only a warning.)"""
    today = datetime.datetime.now(datetime.timezone.utc).date()
    yesterday = today - datetime.timedelta(days=1)
    assert main(["history", "compact", "--lake", str(lake), "--through", "2999-12-31"]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"recompprof: note: --through 2999-12-31: that day has not ended (today is {today}, UTC); "
        f"compacting through {yesterday}\n"
    )
    assert f"compacted through {yesterday}" in captured.out
    assert daily.through(Lake(str(lake))) == yesterday
