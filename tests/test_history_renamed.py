"""A lake holding files of export version 3 (the old column names ``compile_seconds``,
``recompile_seconds``, ``wall_seconds``, ``cache_seconds_saved``) beside files of the current exporter
gives every answer a lake exported afresh gives: through the CLI's views, the printed ones and after
compaction, which writes the new names (docs/history.md, "Versioning").

The old files are the current exporter's, rewritten as export version 3 wrote them: its columns under
their old names, ``export_version`` 3; nothing else of the schema changed between the two versions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from generated_runs import generate

from recompprof._cli.main import main
from recompprof._history.columns import RENAMED
from recompprof._history.tables import TABLES

OLD_VERSION = 3
QUESTIONS = [
    ["top-causes", "--all", "--since", "5000d"],
    ["cost", "--since", "5000d"],
    ["latency", "--since", "5000d"],
    ["limit-hits", "--since", "5000d"],
    ["divergence", "--since", "5000d"],
    [
        "sql",
        "SELECT ROUND(SUM(compile_s), 6) c, ROUND(SUM(recompile_s), 6) r, SUM(wall_s) w FROM runs",
    ],
    ["sql", "SELECT ROUND(SUM(compile_s), 6) AS c, COUNT(cache_saved_s) AS n FROM compiles"],
]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two generated runs, exported by the current exporter."""
    where = tmp_path_factory.mktemp("renamed")
    for seed in (1, 2):
        generate(where / f"run{seed}", ranks=2, per_rank=800, seed=seed)
    lake = where / "lake"
    assert main(["export", str(where / "run1"), str(where / "run2"), "--to", str(lake)]) == 0
    return lake


def _as_version_3(path: Path, table: str) -> None:
    """Rewrite one file as export version 3 wrote it: the renamed columns under their old names."""
    data = pq.read_table(path)
    new_to_old = {new: old for old, new in RENAMED.get(table, {}).items()}
    data = data.rename_columns([new_to_old.get(n, n) for n in data.column_names])
    if "export_version" in data.column_names:
        at = data.column_names.index("export_version")
        old = pa.array([OLD_VERSION] * data.num_rows, pa.int32())
        data = data.set_column(at, "export_version", old)
    pq.write_table(data, path, write_page_checksum=True)


@pytest.fixture(scope="module")
def mixed(fresh: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same lake with run scale-1's files (every table) as export version 3 wrote them."""
    lake = tmp_path_factory.mktemp("mixed") / "lake"
    shutil.copytree(fresh, lake)
    rewritten = 0
    for table in TABLES:
        for path in (lake / "v1" / table).rglob("*.parquet"):
            if path.name.startswith("scale-1__"):
                _as_version_3(path, table)
                rewritten += 1
    assert rewritten >= len(TABLES)
    return lake


def answers(capsys: pytest.CaptureFixture[str], lake: Path) -> list[object]:
    """Each question's rows and its warnings, as JSON."""
    out = []
    for argv in QUESTIONS:
        code = main(["history", argv[0], "--lake", str(lake), *argv[1:], "--format", "json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        document = json.loads(captured.out)
        out.append(([r["rows"] for r in document["results"]], document["warnings"]))
    return out


def test_a_lake_of_both_versions_answers_as_one_exported_afresh(fresh, mixed, capsys):
    """Every question over a lake whose run scale-1 files hold the old names answers as the fresh lake does,
    with no note that a column is missing; the old files are read (their seconds are in the sums)."""
    expected = answers(capsys, fresh)
    [[totals]], _ = expected[5]  # type: ignore[misc]
    assert totals["c"] > 0 and totals["r"] > 0 and totals["w"] > 0
    assert answers(capsys, mixed) == expected
    old = next((mixed / "v1" / "runs").rglob("scale-1__*.parquet"))
    assert "compile_seconds" in pq.read_schema(old).names


def test_a_lake_of_old_files_only_answers_the_same(fresh, tmp_path, capsys):
    """A lake all of whose files hold the old names (an older lake, untouched) answers as a fresh
    export of the same runs does."""
    lake = tmp_path / "lake"
    shutil.copytree(fresh, lake)
    for table in TABLES:
        for path in (lake / "v1" / table).rglob("*.parquet"):
            _as_version_3(path, table)
    assert answers(capsys, lake) == answers(capsys, fresh)


def test_compaction_writes_the_new_names(fresh, mixed, tmp_path, capsys):
    """Compacting a lake of both versions writes each day under the new names only, the old files'
    values in them, and every answer stays the fresh lake's."""
    lake = tmp_path / "lake"
    shutil.copytree(mixed, lake)
    assert main(["history", "compact", "--lake", str(lake), "--through", "2030-01-01"]) == 0
    capsys.readouterr()
    for table, renamed in RENAMED.items():
        [part] = (lake / "v1-daily" / table).rglob("part-0.parquet")
        names = pq.read_schema(part).names
        assert set(renamed.values()) <= set(names) and not set(renamed) & set(names)
    runs = pq.read_table(next((lake / "v1-daily" / "runs").rglob("part-0.parquet")))
    assert runs["wall_s"].null_count == 0
    assert answers(capsys, lake) == answers(capsys, fresh)


def _printed(lake: Path, query: str) -> list[tuple[object, ...]]:
    """``query`` run by a fresh DuckDB over the views `--print-sql --dialect duckdb` prints."""
    text = _print(lake)
    con = duckdb.connect()
    for statement in text.split(";\n"):
        lines = [x for x in statement.splitlines() if not x.lstrip().startswith("--")]
        if "".join(lines).strip():
            con.execute("\n".join(lines))
    return con.execute(query).fetchall()


def _print(lake: Path) -> str:
    argv = ["history", "sql", "SELECT 1", "--lake", str(lake), "--print-sql"]
    capture = _Capture()
    with capture:
        assert main([*argv, "--dialect", "duckdb", "--through", "none"]) == 0
    return capture.text


class _Capture:
    """stdout of one CLI call (the printed texts)."""

    def __enter__(self) -> None:
        import contextlib
        import io

        self._buffer = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self._buffer)
        self._redirect.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._redirect.__exit__(*exc)
        self.text = self._buffer.getvalue()


def test_printed_views_read_both_versions(fresh, mixed):
    """DuckDB running the printed views over the lake of both versions sums the same seconds as over
    the fresh lake: the views read each file's old name as the new column."""
    query = (
        "SELECT (SELECT ROUND(SUM(compile_s), 6) FROM runs), (SELECT ROUND(SUM(wall_s), 6) FROM runs),"
        " (SELECT ROUND(SUM(compile_s), 6) FROM compiles), (SELECT COUNT(*) FROM compiles)"
    )
    expected = _printed(fresh, query)
    assert expected[0][0] > 0
    assert _printed(mixed, query) == expected
    total = sum(
        pc.sum(pq.read_table(p)["compile_s"]).as_py()
        for p in (fresh / "v1" / "runs").rglob("*.parquet")
    )
    assert expected[0][0] == pytest.approx(total, abs=1e-5)
