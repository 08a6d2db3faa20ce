"""Every file the lake writes carries page checksums: a compacted day as well as an export's file, so
``history verify`` and every question see a page broken behind a good footer the same way, whichever
command wrote the file (docs/history.md, "Damaged files")."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from generated_runs import generate
from parquet_damage import flip_a_value
from read_only import read_only

from recompprof._cli.main import main
from recompprof._history import compact, daily
from recompprof._history.layout import Lake
from recompprof._history.tables import DESCRIPTION

QUESTIONS = [
    ["top-causes", "--all"],
    ["cost"],
    ["latency"],
    ["limit-hits"],
    ["divergence"],
    ["sql", "SELECT COUNT(*) AS n FROM compiles"],
]


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two generated ranks exported by the real command, then compacted by it: one file per table."""
    where = tmp_path_factory.mktemp("checksums")
    generate(where / "run", ranks=2, per_rank=1500, seed=8)
    lake = where / "lake"
    assert main(["export", str(where / "run"), "--to", str(lake)]) == 0
    assert main(["history", "compact", "--lake", str(lake), "--through", "2030-01-01"]) == 0
    return lake


def _page_checksums(path: Path) -> list[bool]:
    """For each column chunk of the file's first row group, whether its first page header holds a
    CRC: a flipped byte in that page fails to read with verification on exactly when it does."""
    meta = pq.ParquetFile(path).metadata.row_group(0)
    data = path.read_bytes()
    out = []
    for i in range(meta.num_columns):
        chunk = meta.column(i)
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        out.append(_header_has_crc(data, start))
    return out


def _header_has_crc(data: bytes, at: int) -> bool:
    """Whether the Thrift compact PageHeader at ``at`` holds field 4 (crc): fields 1-3 are i32s,
    written as zigzag varints, so field 4 is the next field header after them."""
    position = at
    field = 0
    while True:
        header = data[position]
        position += 1
        if header == 0:  # stop: no crc
            return False
        delta, kind = header >> 4, header & 0x0F
        field = field + delta if delta else field
        if field == 4:
            return True
        if field > 4 or kind != 5:  # a struct or a later field: past where crc would be
            return False
        while data[position] & 0x80:  # skip the varint
            position += 1
        position += 1


def test_compacted_files_carry_page_checksums(compacted):
    """Each compacted day's file has a CRC in every column chunk's first page header, as an export's
    files do, and each column's description in its field's metadata."""
    handle = Lake(str(compacted))
    for table in ("runs", "compiles", "guard_failures", "graph_breaks"):
        for path, _ in daily.compacted(handle, table).values():
            assert all(_page_checksums(Path(path))), (table, path)
            described = pq.read_schema(path).field("run_id").metadata or {}
            assert described.get(DESCRIPTION), (table, path)
    raw = next((compacted / "v1" / "compiles").rglob("*.parquet"))
    assert all(_page_checksums(raw))


def test_a_page_broken_in_a_compacted_file_is_named_and_left_out(compacted, tmp_path, capsys):
    """A byte flipped in a compacted file's page, its footer intact, is named by `history verify`
    (exit 1) with its column, and every question then leaves that file out and says so."""
    own = tmp_path / "lake"
    shutil.copytree(compacted, own)
    parts = sorted(Path(p) for p, _ in daily.compacted(Lake(str(own)), "compiles").values())
    part = parts[0]
    rest = sum(pq.read_metadata(p).num_rows for p in parts[1:])
    flip_a_value(part, "duration_s")
    code = main(["history", "verify", "--lake", str(own)])
    out, err = capsys.readouterr()
    assert code == 1 and "1 bad" in out, out + err
    assert f"{part.name} is bad: column duration_s: " in err and "dt=" in err
    for question in QUESTIONS:
        argv = ["history", question[0], "--lake", str(own), "--format", "json", *question[1:]]
        code = main([*argv, *([] if question[0] == "sql" else ["--since", "5000d"])])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        document = json.loads(captured.out)
        warned = [w for w in document["warnings"] if "history verify" in w]
        assert len(warned) == 1 and f"{part.name} (column duration_s: " in warned[0], question
        if question[0] == "sql":
            assert document["results"][0]["rows"] == [{"n": rest}]


def test_compaction_writes_row_group_by_row_group(compacted, tmp_path, monkeypatch):
    """Compaction writes its sorted output in row groups of at most ROW_GROUP rows, as its reader
    streams them, sorted still: the day is never gathered into one table."""
    own = tmp_path / "lake"
    shutil.copytree(compacted, own)
    shutil.rmtree(own / "v1-daily")
    monkeypatch.setattr(compact, "ROW_GROUP", 500)
    handle = Lake(str(own))
    done = compact.compact(handle, daily.through(Lake(str(compacted))))
    assert done.days and not done.skipped
    path = Path(next(iter(daily.compacted(handle, "compiles").values()))[0])
    meta = pq.ParquetFile(path).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert len(sizes) > 2 and max(sizes) == 500, sizes
    table = pq.read_table(path, columns=["job", "frame_key", "time"]).to_pylist()
    keys = [(r["job"] is None, r["job"] or "", r["frame_key"], r["time"]) for r in table]
    assert keys == sorted(keys)


def test_compaction_leaves_out_a_raw_file_whose_checksum_fails(tmp_path, capsys):
    """A raw file with a byte flipped behind its good footer (it still decodes, to a wrong value) is
    left out of its compacted day and named, by compact and then by every question, rather than
    copied into the compacted file under a checksum of its own."""
    generate(tmp_path / "run", ranks=2, per_rank=600, seed=9)
    lake = tmp_path / "lake"
    assert main(["export", str(tmp_path / "run"), "--to", str(lake), "--per-rank"]) == 0
    capsys.readouterr()
    raw = sorted((lake / "v1" / "compiles").rglob("*.parquet"))
    assert len(raw) == 2
    bad, good = raw
    flip_a_value(bad, "duration_s")
    assert main(["history", "compact", "--lake", str(lake), "--through", "2030-01-01"]) == 0
    err = capsys.readouterr().err
    assert f"left out {bad}" in err and "unreadable" in err, err
    [part] = (lake / "v1-daily" / "compiles").rglob("part-0.parquet")
    assert pq.read_metadata(part).num_rows == pq.read_metadata(good).num_rows
    main(["history", "sql", "--lake", str(lake), "SELECT COUNT(*) FROM compiles"])
    err = capsys.readouterr().err
    assert "could not be read when their day was compacted" in err and bad.name in err


def test_verify_on_a_lake_mounted_read_only_says_what_it_found_and_that_it_could_not_record_it(
    compacted, tmp_path
):
    """`history verify` run by a host that mounts the lake read-only (a real read-only bind mount):
    the bad file is named and the exit is 1, as anywhere; the record it cannot write is one warning
    line, and the json says ``recorded: false``. (Before, the command stopped with exit 2 on the
    write, and what it had decoded was never said.)"""
    own = tmp_path / "lake"
    shutil.copytree(compacted, own)
    part = sorted(Path(p) for p, _ in daily.compacted(Lake(str(own)), "compiles").values())[0]
    flip_a_value(part, "duration_s")
    verify = [str(Path(sys.executable).with_name("recompprof")), "history", "verify"]
    mounted = tmp_path / "mounted"
    done = read_only(own, mounted, [*verify, "--lake", str(mounted), "--format", "json"], 300)
    document = json.loads(done.stdout)
    assert done.returncode == 1, done.stderr
    assert [Path(b["name"]).name for b in document["bad"]] == [part.name]
    assert document["recorded"] is False and document["decoded"] > 1
    [warning] = done.stderr.splitlines()
    assert warning.startswith(
        f"recompprof: warning: {mounted}: cannot write {mounted}/_verified.json"
    )
    assert warning.endswith("not recorded: questions still read the files found bad")
    assert not (own / "_verified.json").exists()
