"""The lake's schema as files hold it: every column described in its Parquet field, and docs/history.md's
column tables true to the files a real export writes (docs/history.md, "Tables")."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from generated_runs import generate  # noqa: E402
from needs import starts  # noqa: E402
from recorded_runs import RecordedRun, record  # noqa: E402

from recompprof._history.export import export  # noqa: E402
from recompprof._history.names import ROOT  # noqa: E402
from recompprof._history.tables import DESCRIPTION, TABLES  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "history.md"
_ROW = re.compile(r"^\|(?P<names>[^|]*)\|(?P<types>[^|]*)\|")


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    """The real CPU job tests/test_history_export.py records (same arguments: recorded once)."""
    return record(
        tmp_path_factory.mktemp("recorded"),
        "--steps",
        "12",
        RECOMPPROF_LABELS="team=vision,model=resnet",
        RECOMPPROF_HISTORY_URI="{here}/lake",
        TORCH_COMPILE_JOB_ID="job-7",
    )


@pytest.fixture(scope="module")
def schemas(recorded: RecordedRun, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The schema of each table as the files of a real export hold it: of the real job, and of a small
    generated run (real event models) for the tables the job has no rows of (graph breaks)."""
    lake = tmp_path_factory.mktemp("lake")
    generated = tmp_path_factory.mktemp("generated") / "run"
    generate(generated, ranks=1, per_rank=400, seed=5)
    export([recorded.run_dir, generated], str(lake))
    found = {}
    for table in TABLES:
        files = sorted((lake / ROOT / table).rglob("*.parquet"))
        assert files, f"the export wrote no {table} file"
        found[table] = pq.read_schema(files[0])
    return found


def _documented_type(kind: object) -> str:
    """How docs/history.md spells an Arrow type."""
    if pa.types.is_timestamp(kind):
        return "TIMESTAMP"
    if pa.types.is_list(kind):
        return f"LIST<{_documented_type(kind.value_type)}>"
    if pa.types.is_map(kind):
        return f"MAP<{_documented_type(kind.key_type)}, {_documented_type(kind.item_type)}>"
    return {
        pa.string(): "STRING",
        pa.int32(): "INT32",
        pa.int64(): "INT64",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOL",
    }[kind]


def _tables_of(section: str) -> list[dict[str, str | None]]:
    """The column tables of a part of the page: each as column -> documented type (None: "as above")."""
    tables: list[dict[str, str | None]] = []
    current: dict[str, str | None] | None = None
    for line in section.splitlines():
        match = _ROW.match(line)
        if match is None or set(match["names"].strip()) <= {"-"}:
            current = None if match is None else current
            continue
        names = re.findall(r"`([^`]+)`", match["names"])
        if match["names"].strip() == "column":  # a table's header
            current = {}
            tables.append(current)
            continue
        assert current is not None, line
        if "(the fact columns)" in match["names"]:
            current["(the fact columns)"] = None
            continue
        types = [t.strip() for t in re.split(r",\s*(?![^<]*>)", match["types"].strip()) if t]
        if not types:
            current.update(dict.fromkeys(names))
        else:
            assert len(types) in (1, len(names)), f"docs/history.md: {line}"
            for name, kind in zip(names, types * len(names) if len(types) == 1 else types):
                current[name] = kind
    return tables


def _documented() -> dict[str, dict[str, str]]:
    """Each table's columns and types as docs/history.md's "Tables" documents them."""
    text = DOC.read_text()
    part = text[text.index("\n## Tables\n") : text.index("\n## Versioning\n")]
    preamble, *sections = re.split(r"\n### ", part)
    fact, added = _tables_of(preamble)
    tables = {}
    for section in sections:
        table = re.match(r"`(\w+)`", section)
        assert table is not None, section[:80]
        (columns,) = _tables_of(section)
        found: dict[str, str] = {}
        if columns.pop("(the fact columns)", False) is None:
            found.update({k: v for k, v in fact.items() if v is not None})
        for name, kind in columns.items():
            found[name] = kind if kind is not None else fact[name]  # "as above": the fact columns'
        found.update({k: v for k, v in added.items() if v is not None})
        tables[table[1]] = found
    return tables


@pytest.mark.workload
def test_every_column_of_a_real_export_has_a_description(schemas: dict[str, object]) -> None:
    """Each column of every table a real export writes carries a non-empty description in its
    Parquet field's metadata, and no two columns of a table share one."""
    for table, schema in schemas.items():
        texts = {}
        for field in schema:
            text = (field.metadata or {}).get(DESCRIPTION, b"").decode()
            assert text.strip(), f"{table}.{field.name} has no description"
            texts[field.name] = text
        repeated = {t for t in texts.values() if list(texts.values()).count(t) > 1}
        assert not repeated, f"{table}: columns share a description: {repeated}"


@pytest.mark.workload
def test_the_docs_column_tables_are_the_real_schema(schemas: dict[str, object]) -> None:
    """docs/history.md documents every column of every table a real export writes, documents no
    column the files lack, and gives each the type the files hold."""
    documented = _documented()
    assert set(documented) == set(TABLES)
    for table, schema in schemas.items():
        real = {field.name: _documented_type(field.type) for field in schema}
        docs = documented[table]
        assert sorted(set(real) - set(docs)) == [], f"{table}: columns not in docs/history.md"
        assert sorted(set(docs) - set(real)) == [], f"{table}: documented columns not in the files"
        wrong = {name: (docs[name], kind) for name, kind in real.items() if docs[name] != kind}
        assert wrong == {}, f"{table}: documented type vs the files' type"


@pytest.mark.workload
@pytest.mark.torch_compat
@pytest.mark.parametrize("source", ["event_log", "torch_trace"])
def test_guard_latency_and_remote_cache_lookups_reach_the_compiles_table(
    recorded: RecordedRun, source: str, tmp_path: Path
) -> None:
    """A real job's compiles carry torch's guard latency (in seconds, on every compile that installed
    code) and the remote cache's lookups (0, not null, where torch splits them and no remote cache
    answered) into the lake, from its event log and from its TORCH_TRACE alike."""
    duckdb = pytest.importorskip("duckdb")
    run = recorded.run_dir if source == "event_log" else recorded.trace_dir
    export([run], str(tmp_path / "lake"))
    files = str(tmp_path / "lake" / ROOT / "compiles" / "**" / "*.parquet")
    rows = duckdb.sql(
        "SELECT installed_code, backward, guard_latency_s, fx_graph_remote_hit, "
        "fx_graph_remote_miss, aot_autograd_remote_hit, aot_autograd_remote_miss "
        f"FROM read_parquet('{files}')"
    ).fetchall()
    installed = [row for row in rows if row[0] and not row[1]]
    assert installed, "the job installed no compiled code"
    for row in installed:
        assert row[2] is not None and 0 < row[2] < 1, f"guard latency {row[2]!r} is no seconds"
    import torch._dynamo.utils as utils  # what this torch's record reports

    fields = {f.name for f in dataclasses.fields(utils.CompilationMetrics)}
    split = "inductor_fx_remote_cache_hit_count" in fields
    for row in rows:
        assert row[3:] == ((0, 0, 0, 0) if split else (None, None, None, None)), row


def test_remote_cache_lookups_split_torch_counts_and_are_none_where_torch_has_none() -> None:
    """A record's remote cache counts become the remote part of its cache lookups (local ones stay
    only in the totals); a record of a torch that has no remote counts says None, not an empty split."""
    from recompprof._analysis.trace.records import TraceMetrics
    from recompprof._torch.records import read_record

    record = read_record(
        TraceMetrics(
            {
                "compile_id": "0/1",
                "co_name": "f",
                "guard_latency_us": 250,
                "inductor_fx_local_cache_hit_count": 1,
                "inductor_fx_remote_cache_hit_count": 2,
                "inductor_fx_remote_cache_miss_count": 0,
                "aotautograd_local_cache_hit_count": 0,
                "aotautograd_remote_cache_miss_count": 1,
            }
        )
    )
    assert record.cache_lookups == {"fx_graph": {"hit": 3}, "aot_autograd": {"miss": 1}}
    assert record.remote_cache_lookups == {"fx_graph": {"hit": 2}, "aot_autograd": {"miss": 1}}
    assert record.guard_latency_s == pytest.approx(250e-6)
    bare = read_record(TraceMetrics({"compile_id": "0/0", "co_name": "f"}))
    assert bare.remote_cache_lookups is None and bare.guard_latency_s is None


def test_remote_cache_columns_are_null_unknown_and_zero_where_torch_split_none(
    tmp_path: Path,
) -> None:
    """The lake's remote cache columns are null for a compile whose torch does not split lookups, 0
    for one whose torch does and whose remote cache answered none, and the count where it answered."""
    duckdb = pytest.importorskip("duckdb")
    from recompprof._model.events import Compile, Frame, SessionStart, to_json

    frame = Frame(name="f", file="/srv/job/model.py", line=3)
    lines = [
        to_json(
            SessionStart(
                time=1.7e9,
                run_id="r",
                host="h",
                pid=7,
                versions={"torch": "2.13.0"},
                mode="monitor",
            )
        )
    ]
    splits: list[dict[str, dict[str, int]] | None] = [None, {}, {"fx_graph": {"hit": 2}}]
    for i, remote in enumerate(splits):
        lines.append(
            to_json(
                Compile(
                    time=1.7e9 + i + 1,
                    frame=frame,
                    compile_id=f"0/{i}",
                    is_recompile=i > 0,
                    cache_lookups={"fx_graph": {"hit": 3}},
                    remote_cache_lookups=remote,  # type: ignore[arg-type]
                )
            )
        )
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank00000-7.jsonl").write_text("\n".join(lines) + "\n")
    export([run], str(tmp_path / "lake"))
    files = str(tmp_path / "lake" / ROOT / "compiles" / "**" / "*.parquet")
    rows = duckdb.sql(
        "SELECT fx_graph_hit, fx_graph_remote_hit, fx_graph_remote_miss, aot_autograd_remote_hit, "
        f"aot_autograd_remote_miss FROM read_parquet('{files}') ORDER BY time"
    ).fetchall()
    assert rows == [
        (3, None, None, None, None),
        (3, 0, 0, 0, 0),
        (3, 2, 0, 0, 0),
    ]
