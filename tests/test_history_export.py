"""``recompprof export``: runs into the history lake, with the report's own figures (docs/history.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pq = pytest.importorskip("pyarrow.parquet")

from generated_runs import generate  # noqa: E402
from lake_sql import sql  # noqa: E402
from needs import starts  # noqa: E402
from recorded_runs import RecordedRun, clean_env, cli, record  # noqa: E402

from recompprof._analysis.report.fold import build_report  # noqa: E402
from recompprof._analysis.runs import load  # noqa: E402
from recompprof._history import (  # noqa: E402
    export as export_module,
    rows as rows_module,
)
from recompprof._history.export import export  # noqa: E402
from recompprof._history.layout import Lake  # noqa: E402
from recompprof._history.rows import TextPolicy  # noqa: E402
from recompprof._history.sessions import base_of  # noqa: E402
from recompprof._history.tables import SCHEMAS, TABLES  # noqa: E402


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    """A real CPU job under attach() and TORCH_TRACE, with labels, a job id and the lake at session end."""
    return record(
        tmp_path_factory.mktemp("recorded"),
        "--steps",
        "12",
        RECOMPPROF_LABELS="team=vision,model=resnet",
        RECOMPPROF_HISTORY_URI="{here}/lake",
        TORCH_COMPILE_JOB_ID="job-7",
    )


@pytest.fixture(scope="module")
@starts("workload")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CPU job in profile mode."""
    where = tmp_path_factory.mktemp("profiled")
    return record(where, "--steps", "12", trace=False, RECOMPPROF_MODE="profile").run_dir


@pytest.fixture(scope="module")
@starts("workload")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CPU job that hits the recompile limit."""
    # the run test_ingest reads too (with TORCH_TRACE: the export reads only the event log)
    return record(
        tmp_path_factory.mktemp("limited"), "--steps", "12", "--recompile-limit", "2"
    ).run_dir


@pytest.fixture(scope="module")
def multirank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated three-rank run (real event models and reason parser)."""
    where = tmp_path_factory.mktemp("multirank") / "run"
    generate(where, ranks=3, per_rank=2000, seed=11)
    return where


def _report_figures(path: Path) -> dict[str, float]:
    report = build_report(load(path).events)
    frames = report.frames.values()
    return {
        "events": report.run.events,
        "steps": report.run.last_step,
        "compiles": report.compiles,
        "recompiles": report.recompiles,
        "steady_state_recompiles": sum(f.steady_state_recompiles for f in frames),
        "backward_compiles": sum(f.backward_compiles for f in frames),
        "limit_hits": report.limit_hits,
        "failures": report.failures,
        "guard_failures": sum(sum(f.guard_failures.values()) for f in frames),
        "graph_breaks": report.graph_breaks,
        "compile_seconds": report.compile_seconds,
        "recompile_seconds": report.recompile_seconds,
        "sessions": len(report.run.ranks),
        "incomplete": sum(i.sessions for i in report.sessions.incomplete.values()),
    }


_RUNS_TOTALS = """
SELECT SUM(events), MAX(steps), SUM(compiles), SUM(recompiles), SUM(steady_state_recompiles),
       SUM(backward_compiles), SUM(limit_hits), SUM(failures), SUM(guard_failures), SUM(graph_breaks),
       SUM(compile_s), SUM(recompile_s), COUNT(DISTINCT rank),
       SUM(CASE WHEN ended THEN 0 ELSE 1 END)
FROM runs"""
_FACT_TOTALS = """
SELECT (SELECT SUM(CASE WHEN counts_as_compile THEN 1 ELSE 0 END) FROM compiles),
       (SELECT SUM(CASE WHEN counts_as_recompile THEN 1 ELSE 0 END) FROM compiles),
       (SELECT SUM(CASE WHEN steady_state_recompile THEN 1 ELSE 0 END) FROM compiles),
       (SELECT SUM(CASE WHEN backward THEN 1 ELSE 0 END) FROM compiles),
       (SELECT COUNT(*) FROM compiles WHERE limit_name IS NOT NULL),
       (SELECT SUM(CASE WHEN outcome = 'failed' THEN 1 ELSE 0 END) FROM compiles),
       (SELECT SUM(compile_s) FROM compiles),
       (SELECT COALESCE(SUM(CASE WHEN cause_category IS NOT NULL THEN duration_s END), 0)
        FROM compiles)"""


@pytest.mark.workload  # the recorded runs, by name (request.getfixturevalue)
@pytest.mark.parametrize("which", ["multirank", "recorded", "ingested", "profiled", "limited"])
def test_runs_and_compiles_totals_equal_the_report(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Every figure of ``report`` (events, last step, compiles, recompiles, steady-state and backward
    compiles, limit hits, failures, guard failures, graph breaks, compile and recompile seconds,
    sessions, sessions that did not end) equals the sums of the exported ``runs`` rows, and the
    ``compiles`` rows' verdict columns sum to the same: multi-rank, live, ingested, profile-mode and
    limit-hitting runs alike."""
    if which == "ingested":
        trace = request.getfixturevalue("recorded").trace_dir
        path = tmp_path / "ingested"
        done = cli("ingest", str(trace), "-o", str(path))
        assert done.returncode == 0, done.stderr
    elif which == "recorded":
        path = request.getfixturevalue("recorded").run_dir
    else:
        path = request.getfixturevalue(which)
    lake = tmp_path / "lake"
    export([path], str(lake))
    figures = _report_figures(path)
    [row] = sql(lake, _RUNS_TOTALS)
    got = dict(zip(list(figures), row, strict=True))
    for name in ("compile_seconds", "recompile_seconds"):
        assert got.pop(name) == pytest.approx(figures.pop(name), rel=1e-9, abs=1e-9)
    assert got == figures
    [facts] = sql(lake, _FACT_TOTALS)
    report = build_report(load(path).events)
    assert facts[:6] == (
        figures["compiles"],
        figures["recompiles"],
        figures["steady_state_recompiles"],
        figures["backward_compiles"],
        figures["limit_hits"],
        figures["failures"],
    )
    assert facts[6] == pytest.approx(report.compile_seconds, rel=1e-9, abs=1e-9)
    assert facts[7] == pytest.approx(report.recompile_seconds, rel=1e-9, abs=1e-9)
    [(reasons,)] = sql(lake, "SELECT SUM(count) FROM guard_failures")
    assert (reasons or 0) == figures["guard_failures"]
    if which == "limited":
        assert figures["limit_hits"] > 0
    if which == "multirank":
        assert figures["sessions"] == 3 and figures["failures"] > 0


def test_session_end_export_labels_and_job(recorded: RecordedRun) -> None:
    """With RECOMPPROF_HISTORY_URI set, the session exported its own log when it ended (a per-rank
    file), with the job from TORCH_COMPILE_JOB_ID and the labels of RECOMPPROF_LABELS on
    session_start and on every table's rows; the compile rows carry more of torch's record."""
    lake = recorded.run_dir.parent / "lake"
    files = {table: Lake(str(lake)).files(table) for table in TABLES}
    assert files["runs"] and all(f.writer.startswith("rank00000-") for f in files["runs"])
    start = json.loads(next(recorded.run_dir.glob("*.jsonl")).read_text().splitlines()[0])
    assert start["job"] == "job-7" and start["labels"] == {"team": "vision", "model": "resnet"}
    for table in ("runs", "compiles", "guard_failures"):
        rows = sql(lake, f"SELECT DISTINCT job, team, model, torch_version FROM {table}")
        assert [r[:3] for r in rows] == [("job-7", "vision", "resnet")]
        assert rows[0][3]
    [(labels, ended)] = sql(lake, "SELECT labels, ended FROM runs")
    assert dict(labels) == {"model": "resnet", "team": "vision"} and ended
    [row] = sql(
        lake,
        "SELECT MIN(graph_node_count), MIN(graph_input_count), COUNT(dynamo_config_sha), "
        "COUNT(*) FROM compiles WHERE NOT backward",
    )
    assert row[0] > 0 and row[1] > 0 and row[2] == row[3]


def test_export_twice_is_the_same_bytes(multirank: Path, tmp_path: Path) -> None:
    """Exporting a run again rewrites the same files with the same bytes: no second copy, no change."""
    lake = tmp_path / "lake"
    export([multirank], str(lake))
    first = {p: p.read_bytes() for p in sorted(lake.rglob("*")) if p.is_file()}
    export([multirank], str(lake))
    second = {p: p.read_bytes() for p in sorted(lake.rglob("*")) if p.is_file()}
    assert len(first) == 4 and first == second


def test_row_groups_are_compactions_not_one_per_batch(multirank: Path, tmp_path: Path) -> None:
    """An exported file holds its rows in row groups of ``ROW_GROUP`` rows (as a compacted day does),
    not one per buffered batch: the rows are the same, in the same order, however they are grouped,
    and exporting again writes the same bytes."""
    lake = tmp_path / "lake"
    export([multirank], str(lake))
    failures = Lake(str(lake)).files("guard_failures")[0].path
    found = pq.ParquetFile(failures).metadata
    assert found.num_rows > export_module.BATCH_ROWS  # several batches, one row group
    assert found.num_row_groups == -(-found.num_rows // export_module.ROW_GROUP)
    # Small batches and groups: several groups, each a whole number of batches; the same rows.
    small = tmp_path / "small"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export_module, "BATCH_ROWS", 1000)
        patch.setattr(export_module, "ROW_GROUP", 3000)
        export([multirank], str(small))
        first = {p: p.read_bytes() for p in sorted(small.rglob("*.parquet"))}
        export([multirank], str(small))
        assert {p: p.read_bytes() for p in sorted(small.rglob("*.parquet"))} == first
    for table in TABLES:
        [one] = Lake(str(lake)).files(table)
        [other] = Lake(str(small)).files(table)
        grouped = pq.ParquetFile(other.path).metadata
        sizes = [grouped.row_group(i).num_rows for i in range(grouped.num_row_groups)]
        assert all(n == 3000 for n in sizes[:-1]) and 0 < sizes[-1] <= 3000
        assert pq.read_table(other.path).equals(pq.read_table(one.path))


@pytest.mark.parametrize("text", [TextPolicy(), TextPolicy(redact=True)], ids=["plain", "redact"])
def test_rows_converted_as_read_are_the_rows_of_the_batch(
    multirank: Path, tmp_path: Path, text: TextPolicy
) -> None:
    """A compile's fields and its reasons are converted to Arrow a few rows at a time as they are
    read (``rows.HOT_ROWS``), also where a compile's reasons straddle two batches: every table holds
    the same rows, in the same order, as when each batch is converted at once."""
    whole, hot = tmp_path / "whole", tmp_path / "hot"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export_module, "BATCH_ROWS", 7)  # a compile's reasons often straddle batches
        patch.setattr(rows_module, "HOT_ROWS", 10**9)  # each batch converted when it is written
        export([multirank], str(whole), text=text)
        patch.setattr(rows_module, "HOT_ROWS", 3)
        export([multirank], str(hot), text=text)
    for table in TABLES:
        [one] = Lake(str(whole)).files(table)
        [other] = Lake(str(hot)).files(table)
        assert pq.read_table(other.path).equals(pq.read_table(one.path))
    [(straddled,)] = sql(hot, "SELECT COUNT(*) FROM guard_failures WHERE position > 0")
    assert straddled > 7  # reasons past a compile's first, so some batches split a compile


def test_a_batch_of_several_sessions_gives_each_row_its_own_key(
    multirank: Path, tmp_path: Path
) -> None:
    """Rows of several sessions in one batch (a log whose ranks' lines alternate, small batches)
    each carry their own session's key, and a limit hit's row its limit though other ranks' rows
    filled batches before its ``recompile_limit_hit`` came: the fact tables hold the same rows as the
    export of the ranks' own logs."""
    logs = [path.read_text().splitlines() for path in sorted(multirank.glob("*.jsonl"))]
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    lines = [line for group in zip(*logs, strict=False) for line in group]
    (mixed / "rank00000-1.jsonl").write_text("\n".join(lines) + "\n")
    apart, together = tmp_path / "apart", tmp_path / "together"
    export([multirank], str(apart))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export_module, "BATCH_ROWS", 7)  # many batches, most of two or three ranks
        patch.setattr(rows_module, "HOT_ROWS", 3)
        export([mixed], str(together))
    for table, left_out in (
        ("compiles", "run_id, job"),
        ("guard_failures", "run_id, job"),
        ("graph_breaks", "run_id, job"),
    ):
        query = f"SELECT * EXCLUDE ({left_out}) FROM {table} ORDER BY ALL"
        assert sql(together, query) == sql(apart, query)
    [(ranks,)] = sql(together, "SELECT COUNT(DISTINCT (rank, pid)) FROM compiles")
    assert ranks == len(logs) == 3
    named = "SELECT COUNT(limit_name) FROM compiles WHERE outcome = 'limit_hit'"
    assert sql(together, named)[0][0] > 0  # limit hits whose rows were compared, limits and all


def test_export_leaves_arrows_allocator_as_it_was(multirank: Path, tmp_path: Path) -> None:
    """An export (the CLI's, or a program's own call) takes Arrow's buffers from the system allocator
    while it runs and puts the process's default allocator back."""
    pa = pytest.importorskip("pyarrow")
    before = pa.default_memory_pool()
    export([multirank], str(tmp_path / "lake"))
    assert pa.default_memory_pool().backend_name == before.backend_name


def test_a_run_exported_whole_replaces_its_per_rank_files(multirank: Path, tmp_path: Path) -> None:
    """Per-rank files (as sessions write at their end) are replaced by the run's ``all`` files, so the
    rows are never counted twice."""
    lake = tmp_path / "lake"
    export([multirank], str(lake), per_rank=True)
    writers = {base_of(f.writer) for f in Lake(str(lake)).files("compiles")}
    assert len(writers) == 3 and ALL not in writers
    result = export([multirank], str(lake))
    assert len(result.replaced) == 12
    assert {base_of(f.writer) for t in TABLES for f in Lake(str(lake)).files(t)} == {ALL}
    [(sessions,)] = sql(lake, "SELECT COUNT(*) FROM runs")
    assert sessions == 3


ALL = "all"


def test_redact_and_no_text(multirank: Path, tmp_path: Path) -> None:
    """Under redact the lake holds no reason or failure text and paths cut to their last two parts;
    --no-text drops the texts and keeps the paths."""
    redacted, plain, no_text = tmp_path / "r", tmp_path / "p", tmp_path / "n"
    export([multirank], str(redacted), text=TextPolicy(redact=True))
    export([multirank], str(plain))
    export([multirank], str(no_text), text=TextPolicy(no_text=True))
    texts = "SELECT COUNT(*) FROM guard_failures WHERE text <> ''"
    assert sql(plain, texts)[0][0] > 0
    assert sql(redacted, texts)[0][0] == 0 and sql(no_text, texts)[0][0] == 0
    files = "SELECT DISTINCT frame_file FROM compiles"
    assert all(f.count("/") == 1 for (f,) in sql(redacted, files))
    assert any(f.count("/") > 1 for (f,) in sql(no_text, files))
    failed = "SELECT COUNT(fail_reason) FROM compiles"
    assert sql(plain, failed)[0][0] > 0 and sql(redacted, failed)[0][0] == 0


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def test_killed_rank_and_gap_are_exported_as_such(multirank: Path, tmp_path: Path) -> None:
    """A rank killed mid-compile exports with ended=false and the compile it left running; a rank whose
    log lacks compiles its session_end counted exports with log_gap=true."""
    run = tmp_path / "run"
    shutil.copytree(multirank, run)
    killed, gapped = sorted(run.glob("*.jsonl"))[:2]
    lines = _lines(killed)[:-1]  # no session_end
    last = json.loads(next(line for line in reversed(lines) if '"kind":"compile"' in line))
    start = {
        "schema_version": 1,
        "kind": "compile_start",
        "time": last["time"] + 1,
        "rank": last["rank"],
        "frame": last["frame"],
        "compile_id": "99/0",
        "is_recompile": False,
    }
    killed.write_text("".join(lines) + json.dumps(start) + "\n")
    *kept, end_line = _lines(gapped)
    end = json.loads(end_line)
    end["totals"]["compiles"] = sum('"kind":"compile"' in line for line in kept) + 5
    gapped.write_text("".join(kept) + json.dumps(end) + "\n")
    lake = tmp_path / "lake"
    export([run], str(lake))
    rows = sql(lake, "SELECT rank, ended, log_gap, compiling_at_end FROM runs ORDER BY rank")
    assert rows[0][1:3] == (False, False) and rows[0][3]
    assert rows[1][1:] == (True, True, None)
    assert rows[2][1:] == (True, False, None)


def test_a_corrupt_file_in_the_lake_does_not_stop_an_export(
    multirank: Path, tmp_path: Path
) -> None:
    """A truncated Parquet file another exporter left (killed mid-write, on a filesystem without
    rename) and a temporary file do not affect an export: its own files are written whole and read."""
    lake = tmp_path / "lake"
    export([multirank], str(lake))
    good = next((lake / "v1" / "compiles").rglob("*.parquet"))
    torn = good.parent / "other-run__all.parquet"
    torn.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (good.parent / ".other-run__all.parquet.1-0.tmp").write_bytes(b"PAR1")
    shutil.rmtree(lake / "v1" / "runs")
    export([multirank], str(lake))
    assert pq.read_table(good).num_rows > 0
    assert len(Lake(str(lake)).files("runs")) == 1
    assert torn.read_bytes() == good.read_bytes()[: good.stat().st_size // 2]


def test_two_exporters_of_one_run_at_once(multirank: Path, tmp_path: Path) -> None:
    """Two ``recompprof export`` processes writing the same run into one lake at the same time leave
    one file per table and day, each whole, with the bytes one export writes."""
    lake, alone = tmp_path / "lake", tmp_path / "alone"
    export([multirank], str(alone))
    command = [sys.executable, "-m", "recompprof._cli.main", "export", str(multirank)]
    procs = [
        subprocess.Popen(
            [*command, "--to", str(lake)],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    written = sorted(p.relative_to(lake) for p in lake.rglob("*") if p.is_file())
    assert written == sorted(p.relative_to(alone) for p in alone.rglob("*") if p.is_file())
    for name in written:
        assert (lake / name).read_bytes() == (alone / name).read_bytes()


def test_a_lake_that_cannot_be_written_is_one_line_and_exit_2(
    multirank: Path, tmp_path: Path
) -> None:
    """A lake path that cannot be written (under a regular file; a table's folder that is a file) is
    one line naming the lake, exit code 2, no traceback; what the lake already held stays as it was,
    and no temporary file is left."""
    blocker = tmp_path / "lake"
    blocker.write_text("not a directory")
    done = cli("export", str(multirank), "--to", str(blocker / "sub"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert str(blocker / "sub") in done.stderr and "cannot write" in done.stderr
    assert blocker.read_text() == "not a directory"
    lake = tmp_path / "ok"
    export([multirank], str(lake))
    before = {p: p.read_bytes() for p in lake.rglob("*.parquet")}
    shutil.rmtree(lake / "v1" / "graph_breaks")
    (lake / "v1" / "graph_breaks").write_text("in the way")  # one table cannot be written
    again = cli("export", str(multirank), "--to", str(lake))
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "graph_breaks" in again.stderr and "Traceback" not in again.stderr
    left = {p: p.read_bytes() for p in lake.rglob("*.parquet")}
    assert left == {p: b for p, b in before.items() if "graph_breaks" not in str(p)}
    assert not [p for p in lake.rglob("*") if p.name.startswith(".")]


def test_export_writes_to_the_history_uri_variable_when_given_no_lake(
    multirank: Path, tmp_path: Path
) -> None:
    """``export`` without ``--to`` writes to ``RECOMPPROF_HISTORY_URI`` (the lake a job's own exports
    write to), ``--to`` wins over it, and with neither it is one line naming both, exit 2."""
    lake, other = tmp_path / "lake", tmp_path / "other"
    done = cli("export", str(multirank), RECOMPPROF_HISTORY_URI=str(lake))
    assert done.returncode == 0 and f"to {lake}:" in done.stdout, done.stderr
    done = cli("export", str(multirank), "--to", str(other), RECOMPPROF_HISTORY_URI=str(lake))
    assert done.returncode == 0 and f"to {other}:" in done.stdout, done.stderr
    rows = "SELECT run_id, rank, pid, compiles FROM runs ORDER BY ALL"
    assert sql(lake, rows) == sql(other, rows) and sql(lake, rows)
    done = cli("export", str(multirank))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--to" in done.stderr and "RECOMPPROF_HISTORY_URI" in done.stderr


def test_bad_labels_and_bad_input_are_one_line(multirank: Path, tmp_path: Path) -> None:
    """``--labels`` that are not name=value, or that the ``labels`` setting refuses (an empty name, a
    leading digit, a value over 200 characters, more than 32), and a path that is no run, are one
    line each, exit 2, and write nothing."""
    many = ",".join(f"l{i}=x" for i in range(33))
    for labels in ("team", "=x", "1team=x", f"team={'v' * 201}", many):
        done = cli("export", str(multirank), "--to", str(tmp_path / "lake"), "--labels", labels)
        assert done.returncode == 2 and "--labels" in done.stderr, (labels, done.stderr)
        assert done.stderr.count("\n") == 1 and not (tmp_path / "lake").exists(), labels
    done = cli("export", str(tmp_path / "nothing"), "--to", str(tmp_path / "lake"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert not (tmp_path / "lake").exists()


def test_labels_given_to_export_reach_every_table(multirank: Path, tmp_path: Path) -> None:
    """``--labels`` adds labels to every exported session (an ingested or older run recorded none):
    the team and model columns of every table, and the runs' label map."""
    lake = tmp_path / "lake"
    done = cli("export", str(multirank), "--to", str(lake), "--labels", "team=nlp,model=llama")
    assert done.returncode == 0, done.stderr
    for table in TABLES:
        assert sql(lake, f"SELECT DISTINCT team, model FROM {table}") == [("nlp", "llama")]


def test_every_file_has_its_tables_schema(multirank: Path, tmp_path: Path) -> None:
    """Every file written holds exactly its table's columns and types (docs/history.md)."""
    lake = tmp_path / "lake"
    export([multirank], str(lake))
    for table in TABLES:
        for found in Lake(str(lake)).files(table):
            assert pq.read_schema(found.path).remove_metadata() == SCHEMAS[table]


def test_session_end_export_failure_is_counted_never_raised(tmp_path: Path) -> None:
    """An unwritable lake at session end is counted as an internal error (``history``) and the job
    goes on: detach returns, the event log stays."""
    import recompprof
    from recompprof import _internal
    from recompprof.testing import raise_internal_errors

    blocker = tmp_path / "lake"
    blocker.write_text("")
    with raise_internal_errors(False):
        session = recompprof.attach(
            run_dir=tmp_path / "run", history_uri=str(blocker / "x"), history_timeout=120
        )
        session.detach()
    assert _internal.counts().get("history") == 1
    assert session.event_log_path is not None and session.event_log_path.exists()


def test_torch_record_fields_read_where_present_and_none_where_absent() -> None:
    """The added record fields read torch's values where a record has them (a trace's dict config
    hashes as its JSON text with sorted keys does) and None where a torch release has no such field."""
    from recompprof._analysis.trace.records import TraceMetrics
    from recompprof._torch.records import read_record

    config = {"b": 1, "a": [2, 3]}
    full = read_record(
        TraceMetrics(
            {
                "compile_id": "0/1",
                "co_name": "f",
                "graph_node_count": 12,
                "graph_input_count": 3,
                "shape_env_guard_count": 2,
                "accumulated_cache_size": 4,
                "param_numel": 1000,
                "param_bytes": 4000,
                "triton_compile_time_us": 2_500_000,
                "restart_reasons": ["a", "b"],
                "dynamo_config": config,
                "inductor_config": json.dumps(config, sort_keys=True),
            }
        )
    )
    assert (full.graph_node_count, full.graph_input_count, full.shape_env_guard_count) == (12, 3, 2)
    assert (full.accumulated_cache_size, full.param_numel, full.param_bytes) == (4, 1000, 4000)
    assert full.triton_compile_s == 2.5 and full.restart_count == 2
    assert full.dynamo_config_sha == full.inductor_config_sha and len(full.dynamo_config_sha) == 16
    bare = read_record(TraceMetrics({"compile_id": "0/0", "co_name": "f"}))
    assert all(
        getattr(bare, name) is None
        for name in (
            "graph_node_count",
            "graph_input_count",
            "shape_env_guard_count",
            "accumulated_cache_size",
            "param_numel",
            "param_bytes",
            "triton_compile_s",
            "restart_count",
            "dynamo_config_sha",
            "inductor_config_sha",
        )
    )


def test_session_end_export_past_its_deadline_is_stopped_and_counted(tmp_path: Path) -> None:
    """An export at session end that does not finish within ``history_timeout`` is killed and counted
    as an internal error (``history``); detach returns and nothing half-written shows in the lake."""
    import time

    import recompprof
    from recompprof import _internal
    from recompprof.testing import raise_internal_errors

    lake = tmp_path / "lake"
    with raise_internal_errors(False):
        session = recompprof.attach(
            run_dir=tmp_path / "run", history_uri=str(lake), history_timeout=0.05
        )
        began = time.monotonic()
        session.detach()
        took = time.monotonic() - began
    assert _internal.counts().get("history") == 1
    assert took < 30  # the child was killed at the deadline, not waited for
    assert not [p for p in lake.rglob("*.parquet") if not p.name.startswith(".")]


_NO_STEPS = """
import torch, recompprof
f = torch.compile(lambda x: x.sin() + 1, backend="eager", dynamic=False)
with recompprof.attach(step_source="manual"):
    for n in (2, 3, 4):
        f(torch.randn(n))
"""


@pytest.mark.workload
def test_a_session_without_steps_has_null_steps_and_torch_release(tmp_path: Path) -> None:
    """A real job that counts no training step (inference: no optimizer step, none told) exports
    ``steps`` null, not 0; and every table's ``torch_release`` is torch's release without its build
    (``2.13.0`` for ``2.13.0+cpu``)."""
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", _NO_STEPS],
        env=clean_env(RECOMPPROF_RUN_DIR=str(run)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lake = tmp_path / "lake"
    assert cli("export", str(run), "--to", str(lake)).returncode == 0
    [(steps, compiles)] = sql(lake, "SELECT steps, compiles FROM runs")
    assert steps is None and compiles >= 3
    import torch

    release = torch.__version__.split("+")[0]
    for table in ("runs", "compiles"):
        [(version, found)] = sql(lake, f"SELECT DISTINCT torch_version, torch_release FROM {table}")
        assert version == torch.__version__ and found == release and "+" not in found


@pytest.mark.parametrize("given", [False, True])
def test_a_sessions_export_redacts_as_its_session_does_not_as_the_variable_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: bool
) -> None:
    """``attach(redact=...)`` against the opposite ``RECOMPPROF_REDACT``: the session's export child
    redacts the lake's texts as the session does (it read the variable, which the job's own argument
    had overruled, so ``redact=False`` was redacted)."""
    import torch

    import recompprof

    monkeypatch.setenv("RECOMPPROF_REDACT", "0" if given else "1")
    lake = tmp_path / "lake"
    session = recompprof.attach(
        mode="profile", run_dir=tmp_path / "run", history_uri=str(lake), redact=given
    )
    f = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
    f(torch.ones(2))
    f(torch.ones(3))
    session.detach()
    texts = [text for (text,) in sql(lake, "SELECT text FROM guard_failures")]
    assert texts and all((text == "") == given for text in texts), texts
