"""``recompprof history``: every question answered by the embedded DuckDB over a real Parquet lake, its
figures checked against the rows themselves (read with pyarrow), its formats, exit codes, bound
parameters, and the faults a lake can hold (docs/history.md)."""

from __future__ import annotations

import csv
import datetime
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from generated_runs import generate
from history_fleet import BUILD, NEW, Fleet, write_fleet
from needs import starts
from recorded_runs import cli, record

from recompprof._analysis.report.fold import build_report
from recompprof._analysis.runs import load
from recompprof._cli.main import main

SINCE = "2026-10-01"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lake") / "lake"
    write_fleet(root, Fleet())
    return root


@pytest.fixture
def own_lake(lake: Path, tmp_path: Path) -> Path:
    """A copy of the lake a test may damage."""
    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)
    return copy


def history(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["history", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rows_of(root: Path, table: str) -> pa.Table:
    """Every raw row of ``table``, read with pyarrow (the check the SQL answers are held to)."""
    return ds.dataset(
        root / "v1" / table, format="parquet", partitioning="hive", exclude_invalid_files=False
    ).to_table()


def as_json(out: str) -> dict:
    return json.loads(out)


def test_top_causes_sums_the_seconds_charged_to_each_cause(lake, capsys):
    """top-causes: per model and cause, the steady-state recompiles and the seconds charged to the
    cause, costliest first; the total equals the rows' own sum."""
    code, out, err = history(
        capsys, "top-causes", "--lake", str(lake), "--since", SINCE, "--format", "json"
    )
    assert code == 0
    rows = as_json(out)["results"][0]["rows"]
    assert rows, out
    seconds = [r["seconds"] for r in rows]
    assert seconds == sorted(seconds, reverse=True)
    compiles = rows_of(lake, "compiles")
    mask = pc.and_(pc.is_valid(compiles["cause_category"]), compiles["steady_state"])
    expected = pc.sum(pc.filter(compiles["duration_s"], mask)).as_py()
    assert sum(seconds) == pytest.approx(expected, abs=0.001 * len(rows))
    assert {r["model"] for r in rows} <= set(pc.unique(compiles["model"]).to_pylist())


def test_top_causes_by_team_and_all_recompiles(lake, capsys):
    """--by team groups by team; --all takes every recompile, not only steady-state ones (more seconds)."""
    _, steady, _ = history(
        capsys,
        "top-causes",
        "--lake",
        str(lake),
        "--since",
        SINCE,
        "--by",
        "team",
        "--format",
        "json",
    )
    _, every, _ = history(
        capsys,
        "top-causes",
        "--lake",
        str(lake),
        "--since",
        SINCE,
        "--by",
        "team",
        "--all",
        "--format",
        "json",
    )
    steady_rows, every_rows = (
        as_json(steady)["results"][0]["rows"],
        as_json(every)["results"][0]["rows"],
    )
    assert "team" in steady_rows[0] and "model" not in steady_rows[0]
    assert sum(r["seconds"] for r in every_rows) > sum(r["seconds"] for r in steady_rows)


QUESTIONS = [
    ["top-causes", "--all", "--by", "job"],
    ["cost", "--by", "job"],
    ["limit-hits"],
    ["divergence"],
    ["latency", "--by", "job"],
    ["regressions", "--baseline", "torch=2.14.1", "--candidate", f"torch={NEW}"],
]


@pytest.mark.parametrize("question", QUESTIONS, ids=lambda q: q[0])
def test_every_question_takes_job_team_and_model_filters(lake, capsys, question):
    """--team (and --job, --model) narrow every question to that team's rows: what it counts is the
    team's part of the unfiltered answer (the same rows where a row names its job), the session count
    is the team's, and the scope says so."""
    since = [] if question[0] == "regressions" else ["--since", SINCE]
    compiles = rows_of(lake, "compiles").to_pylist()
    team_of = {r["job"]: r["team"] for r in compiles}
    for team in sorted(set(team_of.values())):
        _, whole, _ = history(capsys, *question, *since, "--lake", str(lake), "--format", "json")
        _, part, _ = history(
            capsys, *question, *since, "--team", team, "--lake", str(lake), "--format", "json"
        )
        whole_doc, part_doc = as_json(whole), as_json(part)
        assert f"team {team}" in part_doc["sessions"]["scope"]
        assert part_doc["sessions"]["sessions"] < whole_doc["sessions"]["sessions"]
        for w, p in zip(whole_doc["results"], part_doc["results"], strict=True):
            if "job" in w["columns"] and question[0] not in ("divergence",):
                assert (
                    p["rows"]
                    == [r for r in w["rows"] if team_of[r["job"]] == team][: len(p["rows"])]
                )
            assert len(p["rows"]) <= len(w["rows"]) or question[0] in ("limit-hits", "divergence")
    code, out, _ = history(capsys, *question, *since, "--job", "no-such-job", "--lake", str(lake))
    assert code == 0 and "(no rows)" in out


def test_top_causes_by_frame_with_a_fix_hint_and_an_example_run(lake, capsys):
    """top-causes --by frame groups by the frame's name and key; every cause row carries the report's fix
    hint for its category and a run id that has it."""
    from recompprof._model.fix_hints import FIX_HINTS

    code, out, _ = history(
        capsys, "top-causes", "--by", "frame", "--all", "--since", SINCE, "--lake", str(lake),
        "--format", "json",
    )  # fmt: skip
    rows = as_json(out)["results"][0]["rows"]
    assert code == 0 and rows and "frame_name" in rows[0] and "model" not in rows[0]
    compiles = [r for r in rows_of(lake, "compiles").to_pylist() if r["cause_category"]]
    for row in rows:
        assert row["fix_hint"] == FIX_HINTS.get(row["cause_category"])  # none for an unknown one
        assert any(
            c["run_id"] == row["example_run"] and c["frame_key"] == row["frame_key"]
            and c["cause_category"] == row["cause_category"]
            for c in compiles
        )  # fmt: skip


def test_cost_gives_compile_hours_per_team_and_week(lake, capsys):
    """cost: compile hours and the part lost to recompiles, per team and week, summing to the rows' totals."""
    code, out, _ = history(
        capsys, "cost", "--lake", str(lake), "--since", SINCE, "--format", "json"
    )
    assert code == 0
    rows = as_json(out)["results"][0]["rows"]
    compiles = rows_of(lake, "compiles")
    total = pc.sum(compiles["compile_s"]).as_py() / 3600
    assert sum(r["compile_hours"] for r in rows) == pytest.approx(total, abs=1e-4 * len(rows))
    assert all(r["recompile_hours"] <= r["compile_hours"] for r in rows)
    assert {datetime.date.fromisoformat(r["week"]).weekday() for r in rows} == {0}


def test_regressions_find_the_job_that_recompiles_more_and_exit_1(lake, capsys):
    """regressions: the job that recompiles 4x as often on the new torch is found per session; exit 1."""
    code, out, _ = history(
        capsys,
        "regressions",
        "--lake",
        str(lake),
        "--baseline",
        "torch=2.14.1",
        "--candidate",
        f"torch={NEW}",
    )
    assert code == 1
    assert "job1" in out and "1 finding(s)" in out
    # The fleet runs +cu128 builds: a bare release matches each build of it, a build only itself.
    code, out, _ = history(
        capsys,
        "regressions",
        "--lake",
        str(lake),
        "--baseline",
        f"torch=2.14.1{BUILD}",
        "--candidate",
        f"torch={NEW}{BUILD}",
    )
    assert code == 1 and "job1" in out
    code, out, _ = history(
        capsys,
        "regressions",
        "--lake",
        str(lake),
        "--baseline",
        "torch=2.14.1+cpu",
        "--candidate",
        f"torch={NEW}+cpu",
    )
    assert code == 0 and "job1" not in out
    code, out, _ = history(
        capsys,
        "regressions",
        "--lake",
        str(lake),
        "--baseline",
        "torch=2.14.1",
        "--candidate",
        "torch=2.14.1",
    )
    assert code == 0 and "ok" in out


def test_compare_is_a_ci_gate(lake, capsys):
    """compare: a run with guard failures beyond its job's last runs and the slack exits 1 and lists
    them; a run with no earlier run of its job, or fewer than the minimum baseline, passes with a note;
    a run not in the lake is a usage error."""
    runs = rows_of(lake, "runs").to_pylist()
    last = max(runs, key=lambda r: r["start_time"])["run_id"]
    first_of_job = {}
    for r in sorted(runs, key=lambda r: r["start_time"]):
        first_of_job.setdefault(r["job"], r["run_id"])
    code, out, err = history(capsys, "compare", first_of_job["job3"], "--lake", str(lake))
    assert code == 0 and "nothing to compare with" in err
    code, out, err = history(capsys, "compare", last, "--lake", str(lake), "--format", "json")
    answer = as_json(out)
    assert code == 0 and answer["results"] == [] and not answer["findings"]
    assert answer["baseline_runs"] < answer["min_baseline"] and "nothing is compared" in err
    code, out, err = history(
        capsys, "compare", last, "--lake", str(lake), "--format", "json", "--min-baseline", "1"
    )
    answer = as_json(out)
    assert code == (1 if answer["findings"] else 0)
    for row in answer["results"][0]["rows"]:
        assert row["this_run"] > row["allowed"] >= row["baseline_max"] + 2
    code, out, err = history(capsys, "compare", "no-such-run", "--lake", str(lake))
    assert code == 2 and "not in the lake" in err and "Traceback" not in err


def test_compare_takes_team_and_model_filters(lake, capsys):
    """compare --team/--model narrow the run and its baseline to that team's or model's rows, as
    --job names the job: the run's own team answers as the unfiltered gate does and the scope says
    the filter. A team, model or job the run's sessions do not have is a usage error (exit 2) naming
    what the run has: the gate would compare none of its rows and pass (it did, exit 0)."""
    runs = rows_of(lake, "runs").to_pylist()
    last = max(runs, key=lambda r: r["start_time"])
    args = ("compare", last["run_id"], "--lake", str(lake), "--format", "json")
    gate = ("--min-baseline", "1", "--max-failure-increase", "0")
    _, whole, _ = history(capsys, *args, *gate)
    _, own, _ = history(capsys, *args, *gate, "--team", last["team"], "--model", last["model"])
    whole_doc, own_doc = as_json(whole), as_json(own)
    assert f"team {last['team']}, model {last['model']}" in own_doc["sessions"]["scope"]
    assert own_doc["results"] == whole_doc["results"] and whole_doc["baseline_runs"] >= 1
    assert own_doc["sessions"]["sessions"] == whole_doc["sessions"]["sessions"] > 0
    other = next(r["team"] for r in runs if r["team"] != last["team"])
    code, out, err = history(capsys, *args, *gate, "--team", other)
    assert code == 2 and out == ""
    assert f"has team {last['team']!r}, not {other!r}: --team leaves the run out" in err
    code, out, err = history(capsys, *args, *gate, "--job", "another-job")
    assert code == 2 and out == "" and "not 'another-job': the gate would compare nothing" in err


def test_limit_hits_divergence_and_latency(lake, capsys):
    """limit-hits names the frame at the limit; divergence the jobs whose ranks disagree; latency gives
    ordered percentiles per model and torch version."""
    code, out, _ = history(
        capsys, "limit-hits", "--lake", str(lake), "--since", SINCE, "--format", "json"
    )
    rows = as_json(out)["results"][0]["rows"]
    compiles = rows_of(lake, "compiles")
    hits = pc.sum(pc.equal(compiles["outcome"], "limit_hit")).as_py()
    assert code == 0 and rows[0]["frame_name"] == "Block4.forward" and rows[0]["hits"] == hits
    code, out, _ = history(
        capsys, "divergence", "--lake", str(lake), "--since", SINCE, "--format", "json"
    )
    rows = as_json(out)["results"][0]["rows"]
    assert code == 0 and rows and all(r["divergent_frames"] > 0 for r in rows)
    code, out, _ = history(
        capsys, "latency", "--lake", str(lake), "--since", SINCE, "--format", "json"
    )
    rows = as_json(out)["results"][0]["rows"]
    assert code == 0 and {r["torch_version"] for r in rows} == {f"2.14.1{BUILD}", f"{NEW}{BUILD}"}
    assert all(r["p50_s"] <= r["p90_s"] <= r["p99_s"] <= r["max_s"] for r in rows)


def test_latency_percentiles_are_the_exact_interpolated_ones(lake, capsys):
    """latency's p50/p90/p99 (DuckDB reads all three from one list aggregate) are each group's exact
    linearly interpolated percentiles of its rows, as pyarrow computes them."""
    code, out, _ = history(
        capsys, "latency", "--lake", str(lake), "--since", SINCE, "--format", "json"
    )
    rows = as_json(out)["results"][0]["rows"]
    compiles = rows_of(lake, "compiles")
    kept = compiles.filter(
        pc.and_(
            pc.and_(compiles["counts_as_compile"], pc.invert(compiles["backward"])),
            pc.equal(compiles["outcome"], "ok"),
        )
    )
    assert code == 0 and rows
    for row in rows:
        mine = kept.filter(
            pc.and_(
                pc.equal(kept["model"], row["model"]),
                pc.equal(kept["torch_version"], row["torch_version"]),
            )
        )["duration_s"]
        expected = pc.quantile(mine, q=[0.5, 0.9, 0.99], interpolation="linear").to_pylist()
        assert row["compiles"] == len(mine)
        got = [row["p50_s"], row["p90_s"], row["p99_s"]]
        assert got == pytest.approx([round(v, 3) for v in expected], abs=0.0011), row


@pytest.mark.parametrize("argv", [["top-causes", "--since", SINCE], ["sql", "SELECT 1 AS one"]])
def test_every_command_says_when_sessions_are_partial(lake, capsys, argv):
    """Sessions that did not end or went dark are counted in one warning line, as check says them."""
    runs = rows_of(lake, "runs")
    not_ended = pc.sum(pc.invert(runs["ended"])).as_py()
    code, out, err = history(capsys, *argv, "--lake", str(lake))
    assert code == 0
    assert f"of {runs.num_rows} rank session(s)" in err
    assert f"{not_ended} did not end" in err and "dark" in err


def _csv_header(out: str) -> bool:
    table = list(csv.reader(io.StringIO(out)))
    return table[0] == ["team", "week", "compile_hours", "recompile_hours", "runs"]


@pytest.mark.parametrize(
    "command, fmt, shown",
    [
        ("cost", "csv", _csv_header),
        ("latency", "html", lambda out: out.startswith("<!doctype html>") and "<svg" in out),
        ("limit-hits", "html", lambda out: "<svg" not in out and "<table>" in out),
    ],
    ids=["csv-header", "html-trend-chart", "html-table-no-chart"],
)
def test_formats(lake, capsys, command, fmt, shown):
    """csv parses with a header; html draws an SVG chart for a trend, a plain table otherwise."""
    _, out, _ = history(capsys, command, "--lake", str(lake), "--since", SINCE, "--format", fmt)
    assert shown(out) and (fmt != "html" or command != "latency" or "p90_s" in out), out[:300]


def test_csv_holds_what_json_holds(lake, capsys):
    """csv is for programs: a float with every digit the json has, booleans as ``true``/``false``,
    a list or map as JSON, NULL as nothing (before: 6 significant digits, ``1.23457e+06``, ``True``,
    Python's repr of a list); a question's csv reads back to its json's rows."""
    text = (
        "SELECT 16682.455386211994::DOUBLE AS s, 1234567.891::DOUBLE AS big, true AS b,"
        " ['x', 'y'] AS l, MAP {'k': 'v'} AS m, NULL AS n, DATE '2026-11-30' AS d"
    )
    _, out, _ = history(capsys, "sql", "--lake", str(lake), text, "--format", "csv")
    assert list(csv.reader(io.StringIO(out))) == [
        ["s", "big", "b", "l", "m", "n", "d"],
        ["16682.455386211994", "1234567.891", "true", '["x", "y"]', '{"k": "v"}', "", "2026-11-30"],
    ]
    since = ("--since", SINCE)
    _, as_csv, _ = history(capsys, "cost", "--lake", str(lake), *since, "--format", "csv")
    _, as_json_text, _ = history(capsys, "cost", "--lake", str(lake), *since, "--format", "json")
    [header, *rows] = list(csv.reader(io.StringIO(as_csv)))
    expected = [
        [row[c] if isinstance(row[c], str) else repr(row[c]) for c in header]
        for row in as_json(as_json_text)["results"][0]["rows"]
    ]
    assert rows == expected and rows


@pytest.mark.parametrize(
    "argv, code, stream, said",
    [
        # A value trying to break out of its quotes matches nothing: no rows, no error.
        (
            ["regressions", "--baseline", "torch=2.14.1", "--candidate", "torch=2.15.0' OR '1'='1"],
            0,
            "out",
            "ok",
        ),
        (["compare", "x'); DROP VIEW runs; --"], 2, "err", "not in the lake"),
        (["top-causes", "--since", "last week"], 2, "err", "--since"),
        # Spark reads \ as an escape: both are escaped.
        (["compare", "a\\'b", "--print-sql", "--dialect", "spark"], 0, "out", "'a\\\\\\'b'"),
    ],
    ids=["quote-in-version", "sql-in-run", "bad-since", "spark-backslash"],
)
def test_parameters_are_bound_as_literals(lake, capsys, argv, code, stream, said):
    """A value that tries to break out of its quotes stays a value: nothing injected is run."""
    got, out, err = history(capsys, *argv, "--lake", str(lake))
    assert got == code and said in (out if stream == "out" else err), (out, err)


MACROS = ("WEEK(x)", "SIZE(x)", "run-PCTL(a, 0.5)")


@pytest.mark.parametrize("value", MACROS)
def test_a_value_spelled_like_a_macro_runs_as_text(lake, capsys, value):
    """A value that reads like one of the texts' macros stays a value on DuckDB: the regressions gate
    matches no version (no crash), a job of that name narrows a question to no row, compare names it
    as typed among the jobs the run does not have, and a run id of that name is not in the lake."""
    code, out, err = history(
        capsys, "regressions", "--lake", str(lake), "--baseline", f"torch={value}",
        "--candidate", "torch=2.15.0",
    )  # fmt: skip
    assert code == 0 and "recompprof history regressions: ok" in out and "bug" not in err
    runs = rows_of(lake, "runs").to_pylist()
    run = runs[-1]["run_id"]
    code, out, err = history(capsys, "compare", run, "--lake", str(lake), "--job", value)
    assert code == 2 and f"not {value!r}: the gate would compare nothing" in err
    code, out, err = history(
        capsys, "top-causes", "--lake", str(lake), "--since", SINCE, "--job", value,
        "--format", "json",
    )  # fmt: skip
    answer = as_json(out)
    assert code == 0 and answer["results"][0]["rows"] == []
    assert f"job {value}" in answer["sessions"]["scope"] and answer["sessions"]["sessions"] == 0
    code, out, err = history(capsys, "compare", value, "--lake", str(lake))
    assert code == 2 and f"run {value!r} is not in the lake" in err


@pytest.mark.parametrize("dialect", ["duckdb", "spark", "trino", "clickhouse"])
@pytest.mark.parametrize("value", MACROS)
def test_a_printed_text_keeps_every_value_as_typed(lake, capsys, dialect, value):
    """--print-sql binds each value after the macros are spelled: in every dialect the run id, the job,
    the version and a --team filter appear as the quoted text that was typed, never expanded."""
    from recompprof._history import questions

    quoted = questions.DIALECTS[dialect].string(value)
    printed = "--print-sql", "--dialect", dialect, "--lake", str(lake)
    _, out, _ = history(capsys, "compare", value, "--job", value, *printed)
    assert out.count(quoted) >= 3, out
    _, out, _ = history(
        capsys, "regressions", "--baseline", f"torch={value}", "--candidate", "torch=2.15.0",
        *printed,
    )  # fmt: skip
    assert out.count(quoted) >= 4, out
    _, out, _ = history(capsys, "top-causes", "--team", value, *printed)
    assert f"team = {quoted}" in out, out


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e309", "-1"])
@pytest.mark.parametrize(
    "option",
    ["--max-failure-increase-pct", "--max-time-increase", "--max-time-increase-s"],
)
@pytest.mark.parametrize(
    "command",
    [["compare", "some-run"], ["digest", "--run", "some-run"], ["compare", "x", "--print-sql"]],
    ids=["compare", "digest", "printed"],
)
def test_a_gate_slack_that_is_not_a_finite_non_negative_number_is_one_line(
    lake, capsys, command, option, value
):
    """compare's slack options take a finite number, none negative: nan, inf, a number past a
    float's range or a negative one is one line naming the option, exit 2, in compare, in a digest
    that holds a run, and with --print-sql (before, nan and inf were spliced into the query as bare
    words: "this is a recompprof bug", and printed SQL no engine runs)."""
    code, out, err = history(
        capsys, command[0], *command[1:], "--lake", str(lake), f"{option}={value}"
    )
    assert code == 2 and not out and err.count("\n") == 1 and f"error: {option} must " in err, err


def test_by_takes_only_a_closed_set_of_columns(lake):
    """--by is a choice, never a column name spliced into the text."""
    with pytest.raises(SystemExit) as exit_info:
        main(["history", "top-causes", "--lake", str(lake), "--by", "model; DROP VIEW runs"])
    assert exit_info.value.code == 2


def test_sql_runs_any_query_over_the_views(lake, capsys):
    """history sql runs free SQL over the four views; a bad query is one line, exit 2."""
    code, out, _ = history(
        capsys, "sql", "--lake", str(lake), "SELECT COUNT(*) AS n FROM compiles", "--format", "json"
    )
    assert code == 0
    assert as_json(out)["results"][0]["rows"][0]["n"] == rows_of(lake, "compiles").num_rows
    code, out, err = history(capsys, "sql", "--lake", str(lake), "SELECT nope FROM compiles")
    assert code == 2 and err.count("\n") == 1 and "the query failed" in err


@pytest.mark.parametrize(
    "text, said",
    [
        ("COPY (SELECT 1 AS x) TO '{outside}/copied.csv'", "one SELECT"),
        ("COPY (SELECT 1 AS x) TO '{lake}/v1/copied.csv'", "one SELECT"),
        ("SELECT 1; DROP VIEW runs", "one SELECT"),
        ("SET enable_external_access = true", "one SELECT"),
        ("SELECT * FROM read_csv('/etc/passwd')", "the lake's views and nothing else"),
        ("SELECT * FROM read_text('{outside}/secret.txt')", "the lake's views and nothing else"),
        ("SELECT * FROM glob('/etc/*')", "the lake's views and nothing else"),
        # EXPLAIN ANALYZE runs the statement it plans: it wrote into the lake, over a lake file
        ("EXPLAIN ANALYZE COPY (SELECT * FROM runs LIMIT 0) TO '{a_file}' (FORMAT parquet)", "EXPLAIN COPY"),
        ("EXPLAIN (ANALYZE) COPY (SELECT 1 AS x) TO '{outside}/copied.csv'", "EXPLAIN COPY"),
        ("EXPLAIN /* plan */ ANALYZE CREATE TABLE t AS SELECT 1", "EXPLAIN CREATE"),
        # DuckDB's own temporary directory, .tmp under the working directory, was allowed too
        ("SELECT * FROM read_text('.tmp/secret.txt')", "the lake's views and nothing else"),
        ("SELECT * FROM read_text('{cwd}/.tmp/secret.txt')", "the lake's views and nothing else"),
    ],
    ids=[
        "copy-out", "copy-into-lake", "two-statements", "set", "read-etc", "read-file", "glob",
        "explain-analyze-over-a-lake-file", "explain-analyze-copy-out", "explain-analyze-create",
        "read-the-working-directorys-tmp", "read-the-working-directorys-tmp-by-its-path",
    ],
)  # fmt: skip
def test_sql_is_locked_to_the_lake(own_lake, tmp_path, capsys, monkeypatch, text, said):
    """history sql runs one query and reads the lake only: writing a file (anywhere, the lake too,
    an EXPLAIN ANALYZE of a write among them), reading one outside it (the working directory's
    ``.tmp`` too), a second statement or a setting is refused with one line, exit 2, and nothing is
    written."""
    outside, cwd = tmp_path / "outside", tmp_path / "cwd"
    outside.mkdir()
    (outside / "secret.txt").write_text("the-content-of-a-private-file")
    (cwd / ".tmp").mkdir(parents=True)
    (cwd / ".tmp" / "secret.txt").write_text("the-content-of-a-private-file")
    monkeypatch.chdir(cwd)
    before = {p.relative_to(own_lake): p.read_bytes() for p in own_lake.rglob("*") if p.is_file()}
    a_file = sorted(own_lake.rglob("*.parquet"))[0]
    code, out, err = history(
        capsys,
        "sql",
        "--lake",
        str(own_lake),
        text.format(outside=outside, lake=own_lake, a_file=a_file, cwd=cwd),
    )
    assert code == 2 and err.count("\n") == 1 and said in err and "the-content" not in out + err
    assert sorted(outside.iterdir()) == [outside / "secret.txt"]
    assert sorted((cwd / ".tmp").iterdir()) == [cwd / ".tmp" / "secret.txt"]
    after = {p.relative_to(own_lake): p.read_bytes() for p in own_lake.rglob("*") if p.is_file()}
    assert after == before


def test_sql_explains_a_query_and_runs_explain_analyze_of_one(lake, capsys):
    """An EXPLAIN of a query, and an EXPLAIN ANALYZE (which runs it), are answered like a query."""
    for text in ("EXPLAIN SELECT COUNT(*) FROM runs", "EXPLAIN ANALYZE SELECT COUNT(*) FROM runs"):
        code, out, err = history(capsys, "sql", "--lake", str(lake), text, "--format", "json")
        assert code == 0 and as_json(out)["results"][0]["rows"], err


def test_sql_still_reads_the_lake_itself(lake, capsys):
    """Locked, history sql still answers from the views and may read the lake's own files directly."""
    glob = f"{lake}/v1/runs/*/*.parquet"
    code, out, err = history(
        capsys, "sql", "--lake", str(lake), "--format", "json",
        f"SELECT (SELECT COUNT(*) FROM runs) AS v, COUNT(*) AS f FROM read_parquet('{glob}')",
    )  # fmt: skip
    row = as_json(out)["results"][0]["rows"][0]
    assert code == 0 and row["v"] == row["f"] == rows_of(lake, "runs").num_rows


@pytest.mark.parametrize(
    "dialect, spelled",
    [
        # DuckDB takes a column's percentiles from one list aggregate (computed once).
        ("duckdb", "quantile_cont(duration_s, [0.5, 0.9, 0.99])[1]"),
        ("spark", "percentile_approx(duration_s, 0.5)"),
        ("trino", "approx_percentile(duration_s, 0.5)"),
        ("clickhouse", "quantile(0.5)(duration_s)"),
    ],
)
def test_print_sql_switches_percentiles_by_dialect(lake, capsys, dialect, spelled):
    """--print-sql prints the views and the query for each engine, percentiles spelled its way."""
    code, out, _ = history(
        capsys, "latency", "--lake", str(lake), "--print-sql", "--dialect", dialect
    )
    assert code == 0 and spelled in out
    assert out.count("VIEW") >= 4


@pytest.mark.parametrize("dialect", ["trino", "clickhouse", "spark", "duckdb"])
@pytest.mark.parametrize(
    "command",
    [
        ["top-causes"],
        ["cost"],
        ["limit-hits"],
        ["divergence"],
        ["latency"],
        ["regressions", "--baseline", "torch=2.14.1", "--candidate", "torch=2.15.0"],
        ["compare", "run-001-0001"],
    ],
    ids=lambda command: command[0],
)
def test_print_sql_parses_in_each_dialect(lake, capsys, dialect, command):
    """Every printed statement (views and query) parses as its engine's SQL."""
    sqlglot = pytest.importorskip("sqlglot")  # optional: Trino and ClickHouse are not run here
    _, out, _ = history(capsys, *command, "--lake", str(lake), "--print-sql", "--dialect", dialect)
    statements = [
        "\n".join(line for line in s.splitlines() if not line.startswith("--"))
        for s in out.split(";\n")
    ]
    parsed = [s for s in statements if s.strip() and not s.startswith("CALL ")]
    assert len(parsed) >= 5
    for statement in parsed:
        assert sqlglot.parse(statement, read=dialect), statement


# A bucket on an S3-compatible store nobody listens on: opening it fails, printing for it must not.
UNREACHABLE = "s3a://bucket/lake?endpoint_override=127.0.0.1:9&scheme=http"


@pytest.mark.parametrize("dialect", ["duckdb", "spark", "trino", "clickhouse"])
def test_print_sql_opens_nothing_when_given_the_marker(capsys, dialect):
    """--print-sql --through prints every engine's views and query from the lake's URI alone (no
    credentials, no store reached), in the lake's own scheme (s3a:// for Spark) or, for ClickHouse's
    s3(), the S3-compatible endpoint's URL; without --through it must read the marker, and a lake it
    cannot open is one line that says how to print without opening it."""
    printed = "--print-sql", "--dialect", dialect, "--lake", UNREACHABLE
    code, out, err = history(capsys, "cost", *printed, "--through", "2026-11-01")
    assert code == 0 and err == "" and "compacted through 2026-11-01" in out
    if dialect == "clickhouse":
        assert "s3('http://127.0.0.1:9/bucket/lake/v1/compiles/*/*.parquet', 'Parquet', '" in out
    else:
        assert "'s3a://bucket/lake/v1-daily/compiles" in out
    code, out, err = history(capsys, "cost", *printed)
    assert code == 2 and err.count("\n") == 1 and "--through none" in err


def test_trino_ddl_states_the_timestamp_precision(lake, capsys):
    """Trino's Hive tables take no time zone: the DDL declares microseconds, timestamp(6), and says
    the catalog setting that keeps them (the connector rounds to milliseconds by default)."""
    code, out, _ = history(capsys, "cost", "--lake", str(lake), "--print-sql", "--dialect", "trino")
    ddl = out[out.index("CREATE TABLE") :]
    assert code == 0 and "start_time timestamp(6)," in ddl and "with time zone" not in ddl
    assert "hive.timestamp-precision=MICROSECONDS" in out


def test_the_dialects_are_one_family():
    """Each engine is one module of recompprof._history.dialects that spells every kind of column and
    every macro; the questions and views hold no engine's spelling of their own."""
    import inspect

    from recompprof._history import dialects, questions, views
    from recompprof._history.dialects.base import KINDS

    assert set(dialects.DIALECTS) == {"duckdb", "spark", "trino", "clickhouse"}
    for name, dialect in dialects.DIALECTS.items():
        assert inspect.getmodule(dialect.source).__name__ == f"recompprof._history.dialects.{name}"
        assert set(dialect.types) == set(KINDS)
        assert "PCTL" not in dialect.expand("SELECT PCTL(x, 0.5), WEEK(d), SIZE(l)")
    for module in (questions, views):
        source = inspect.getsource(module)
        for spelled in ("percentile_approx", "toMonday", "cardinality(", "Nullable(", "STRING"):
            assert spelled not in source, (module.__name__, spelled)


# ---- faults -------------------------------------------------------------------------------------


def _files(root: Path, table: str) -> list[Path]:
    return sorted((root / "v1" / table).rglob("*.parquet"))


def _figure(capsys, root: Path) -> tuple[int, float, str]:
    code, out, err = history(
        capsys,
        "sql",
        "--lake",
        str(root),
        "SELECT SUM(compile_s) AS s FROM compiles",
        "--format",
        "json",
    )
    rows = as_json(out)["results"][0]["rows"] if code == 0 else [{"s": None}]
    return code, rows[0]["s"], err


def _sum_of(paths: list[Path]) -> float:
    return sum(pc.sum(pq.read_table(p)["compile_s"]).as_py() for p in paths)


def test_a_corrupt_or_truncated_file_is_named_and_the_rest_answered(own_lake, capsys):
    """A truncated file (an exporter killed mid-write) and one of garbage are left out with a warning
    naming them and counting them; the figure is the sum over the other files, exactly."""
    files = _files(own_lake, "compiles")
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])
    files[1].write_bytes(b"not parquet at all")
    code, figure, err = _figure(capsys, own_lake)
    assert code == 0 and "Traceback" not in err
    assert f"compiles: 2 of {len(files)} file(s) left out, unreadable" in err
    assert files[0].name in err and files[1].name in err
    assert figure == pytest.approx(_sum_of(files[2:]))


def test_a_file_broken_behind_a_good_footer_is_dropped_when_read(own_lake, capsys):
    """A file whose data pages are damaged but whose footer reads is found when DuckDB reads it: left
    out, named, and the query answered from the rest."""
    files = _files(own_lake, "compiles")
    data = bytearray(files[0].read_bytes())
    group = pq.ParquetFile(files[0]).metadata.row_group(0)
    chunk = group.column(
        group.to_dict()["columns"].index(
            next(c for c in group.to_dict()["columns"] if c["path_in_schema"] == "compile_s")
        )
    )
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    for i in range(start, start + chunk.total_compressed_size):
        data[i] ^= 0x5A
    files[0].write_bytes(bytes(data))
    code, figure, err = _figure(capsys, own_lake)
    assert code == 0 and files[0].name in err and "left out" in err
    assert figure == pytest.approx(_sum_of(files[1:]))


def test_a_file_of_another_schema_version_is_left_out_and_named(own_lake, capsys):
    """A file whose columns have other types (another schema version) is left out by name; one that
    only lacks newer columns is read, those columns unknown, and said so."""
    files = _files(own_lake, "compiles")
    table = pq.read_table(files[0])
    table = table.set_column(
        table.schema.get_field_index("rank"), "rank", pc.cast(table["rank"], pa.string())
    )
    pq.write_table(table, files[0])
    older = pq.read_table(files[1]).drop_columns(["dynamo_config_sha", "inductor_config_sha"])
    pq.write_table(older, files[1])
    code, figure, err = _figure(capsys, own_lake)
    assert code == 0
    assert "1 of" in err and "of another schema version" in err and files[0].name in err
    assert "predate column(s) dynamo_config_sha, inductor_config_sha" in err
    assert figure == pytest.approx(_sum_of(files[1:]))


def test_an_empty_table_or_lake_answers_empty_with_a_note(own_lake, tmp_path, capsys):
    """A table with no files yet gives no rows and a note, not an error; so does an empty lake."""
    shutil.rmtree(own_lake / "v1" / "graph_breaks")
    code, out, err = history(
        capsys,
        "sql",
        "--lake",
        str(own_lake),
        "SELECT COUNT(*) AS n FROM graph_breaks",
        "--format",
        "json",
    )
    assert code == 0 and as_json(out)["results"][0]["rows"][0]["n"] == 0
    assert "graph_breaks has no files yet" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = history(capsys, "top-causes", "--lake", str(empty))
    assert code == 0 and "(no rows)" in out and "compiles has no files yet" in err


def test_a_lakes_own_root_folder_given_as_the_lake_is_one_line_naming_the_lake(
    own_lake, tmp_path, capsys
):
    """``--lake LAKE/v1`` (or ``LAKE/v1-daily``) for a question, ``verify``, ``compact`` or an export's
    ``--to``: one line saying it is the lake's folder and naming the lake, exit 2, nothing written
    (before, questions answered "no rows" with a note that every table had no files yet, and an
    export made a second lake inside the first)."""
    assert (
        main(["history", "compact", "--lake", str(own_lake), "--through", str(Fleet().start)]) == 0
    )
    capsys.readouterr()
    run = tmp_path / "run"
    generate(run, ranks=1, per_rank=50, seed=1)
    before = sorted(p.relative_to(own_lake) for p in own_lake.rglob("*"))
    for root in ("v1", "v1-daily"):
        inner = str(own_lake / root)
        for argv in (
            ["history", "top-causes", "--lake", inner],
            ["history", "verify", "--lake", inner],
            ["history", "compact", "--lake", inner],
            ["export", str(run), "--to", inner],
        ):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            said = f"{inner}: is a lake's {root}/ folder, not a lake; give its parent ({own_lake})"
            assert err == f"recompprof: error: {said}\n", (argv, err)
    assert sorted(p.relative_to(own_lake) for p in own_lake.rglob("*")) == before


def test_compare_says_why_it_cannot_find_its_run(own_lake, capsys):
    """compare's run missing while ``runs`` files were left out as unreadable is one line naming them,
    exit 2 (before: only "not in the lake", the files' warning never printed)."""
    [(run,)] = history_rows(own_lake, "SELECT run_id FROM runs ORDER BY run_id LIMIT 1")
    [runs_file] = (own_lake / "v1" / "runs").rglob(f"{run}__*.parquet")
    runs_file.write_bytes(b"not parquet")
    code, out, err = history(capsys, "compare", run, "--lake", str(own_lake))
    assert code == 2 and err.count("\n") == 1, err
    assert (
        "is not in the lake (no rank session of it in runs); 1 runs file(s) could not be read"
        in err
    )
    assert runs_file.name in err


def history_rows(lake: Path, text: str) -> list[tuple]:
    """The rows of ``history sql`` over ``lake``."""
    from recompprof._history import engine, views

    runner = engine.Engine(views.reader(str(lake)), views.select(views.reader(str(lake))))
    return runner.query(text).rows


def test_a_lake_path_that_does_not_exist_is_one_line_exit_2(tmp_path, capsys):
    """A lake that does not exist: one error line naming it, exit 2, no traceback."""
    code, out, err = history(capsys, "top-causes", "--lake", str(tmp_path / "nowhere"))
    assert code == 2
    assert err.count("\n") == 1 and "no such lake" in err and "nowhere" in err


# ---- real runs: real torch.compile jobs, exported with `recompprof export` -------------------------

WORKLOAD = Path(__file__).parent / "workloads" / "train_recompiles.py"


@pytest.fixture(scope="module")
@starts("workload")
def real_lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """Two real CPU jobs of one job id, labelled, exported by the real command: ``base`` changes two
    things between steps (size, a Python constant), ``cand`` four (also a global and a module
    attribute): the candidate adds guard failures its job's history does not have."""
    where = tmp_path_factory.mktemp("real")
    lake = where / "lake"
    runs = {}
    for name, changes in (("base", "2"), ("cand", "4")):
        recorded = record(
            where / name,
            *("--steps", "12", "--changes", changes),
            trace=False,
            RECOMPPROF_LABELS="team=vision,model=tinynet",
            TORCH_COMPILE_JOB_ID="train-tinynet",
        )
        runs[name] = recorded.run_dir
    exported = cli("export", str(runs["base"]), str(runs["cand"]), "--to", str(lake))
    assert exported.returncode == 0, exported.stderr
    return lake, runs


def test_real_runs_cost_and_causes_agree_with_the_report(real_lake, capsys):
    """On real exported runs, cost's compile hours and the part lost to recompiles, and top-causes'
    seconds per cause, add up to the report's compile and recompile seconds of the same runs."""
    lake, runs = real_lake
    reports = [build_report(load(path).events) for path in runs.values()]
    compile_s = sum(r.compile_seconds for r in reports)
    recompile_s = sum(r.recompile_seconds for r in reports)
    assert recompile_s > 0
    code, out, err = history(
        capsys, "cost", "--lake", str(lake), "--since", "30d", "--format", "json"
    )
    rows = as_json(out)["results"][0]["rows"]
    assert code == 0 and [r["team"] for r in rows] == ["vision"] and rows[0]["runs"] == 2
    assert rows[0]["compile_hours"] * 3600 == pytest.approx(compile_s, abs=0.004)
    assert rows[0]["recompile_hours"] * 3600 == pytest.approx(recompile_s, abs=0.004)
    code, out, _ = history(
        capsys, "top-causes", "--lake", str(lake), "--since", "30d", "--all", "--format", "json"
    )
    rows = as_json(out)["results"][0]["rows"]
    assert code == 0 and {r["model"] for r in rows} == {"tinynet"}
    assert sum(r["seconds"] for r in rows) == pytest.approx(recompile_s, abs=0.001 * len(rows))
    assert sum(r["recompiles"] for r in rows) == sum(r.recompiles for r in reports)
    for command in ("limit-hits", "divergence", "latency"):
        code, out, err = history(capsys, command, "--lake", str(lake), "--since", "30d")
        assert code == 0, err
    code, out, _ = history(
        capsys, "latency", "--lake", str(lake), "--since", "30d", "--format", "json"
    )
    assert as_json(out)["results"][0]["rows"][0]["compiles"] == sum(r.compiles for r in reports)


def test_real_runs_compare_flags_the_run_that_added_guard_failures(real_lake, capsys):
    """compare, the CI gate, on real runs: held to one earlier run it notes the baseline is too small
    and passes; told to gate on one run with no slack, the candidate that recompiles for two more
    reasons exits 1 and names them; the job's first run has no baseline and passes."""
    lake, _ = real_lake
    _, out, _ = history(
        capsys,
        "sql",
        "--lake",
        str(lake),
        "SELECT run_id FROM runs ORDER BY start_time",
        "--format",
        "json",
    )
    base, cand = (row["run_id"] for row in as_json(out)["results"][0]["rows"])
    code, out, err = history(capsys, "compare", cand, "--lake", str(lake))
    assert code == 0 and "only 1 earlier finished run(s)" in err  # one run: the job's noise unknown
    strict = ("--min-baseline", "1", "--max-failure-increase", "0")
    code, out, err = history(
        capsys, "compare", cand, "--lake", str(lake), "--format", "json", *strict
    )
    answer = as_json(out)
    assert code == 1 and answer["findings"] and answer["baseline_runs"] == 1
    added = {row["category"] for row in answer["results"][0]["rows"]}
    assert added and all(row["baseline_max"] == 0 for row in answer["results"][0]["rows"])
    code, out, err = history(capsys, "compare", base, "--lake", str(lake))
    assert code == 0 and "nothing to compare with" in err


def test_real_runs_regressions_match_torchs_release_not_its_build(real_lake, capsys):
    """The real jobs ran torch's +cpu build: --baseline torch=<release> (no build) reads their
    sessions, as it would a +cu128 build's; the build's full version reads them too."""
    lake, _ = real_lake
    _, out, _ = history(
        capsys,
        "sql",
        "--lake",
        str(lake),
        "SELECT DISTINCT torch_version, torch_release FROM runs",
        "--format",
        "json",
    )
    [row] = as_json(out)["results"][0]["rows"]
    version, release = row["torch_version"], row["torch_release"]
    assert version != release and version.startswith(release + "+")
    for value in (release, version):
        code, out, err = history(
            capsys,
            "regressions",
            "--lake",
            str(lake),
            "--baseline",
            f"torch={value}",
            "--candidate",
            "torch=99.0",
            "--format",
            "json",
        )
        assert code == 0, err
        assert as_json(out)["sessions"]["sessions"] == 2  # the two runs' one rank each


@pytest.mark.servers
def test_a_lake_on_an_object_store_over_http(tmp_path, capsys, monkeypatch):
    """The same questions over an S3 lake: moto's standalone server (it emulates Amazon S3) started on
    127.0.0.1, pyarrow's S3 filesystem the client; compaction and the marker work there too, and the
    answers equal those of the same fleet on a local path."""
    pytest.importorskip("moto.server")
    import socket
    import time

    import pyarrow.fs as pafs
    from servers import MOTO_ENVIRONMENT

    for name, value in MOTO_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "moto did not start"
                time.sleep(0.1)
        pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True
        ).create_dir("lake")
        uri = f"s3://lake/fleet?endpoint_override=127.0.0.1:{port}&scheme=http"
        fleet = Fleet(days=2, runs_per_day=3)
        write_fleet(uri, fleet)
        write_fleet(tmp_path / "local", fleet)
        question = ["top-causes", "--since", SINCE, "--all", "--format", "json"]
        _, local, _ = history(capsys, question[0], "--lake", str(tmp_path / "local"), *question[1:])
        _, remote, err = history(capsys, question[0], "--lake", uri, *question[1:])
        assert as_json(remote)["results"] == as_json(local)["results"] and "did not end" in err
        # history sql, locked to the lake, still reads an object store's views.
        count = ["sql", "SELECT COUNT(*) AS n FROM compiles", "--format", "json"]
        _, remote_n, _ = history(capsys, count[0], "--lake", uri, *count[1:])
        _, local_n, _ = history(capsys, count[0], "--lake", str(tmp_path / "local"), *count[1:])
        assert as_json(remote_n)["results"] == as_json(local_n)["results"]
        # Spark's own scheme for the same bucket (the docs' Spark example gives s3a://).
        s3a = "s3a" + uri[2:]
        _, hadoop, err = history(capsys, question[0], "--lake", s3a, *question[1:])
        assert as_json(hadoop)["results"] == as_json(local)["results"] and "did not end" in err
        assert main(["history", "compact", "--lake", uri, "--through", str(fleet.start)]) == 0
        capsys.readouterr()
        _, compacted, _ = history(capsys, question[0], "--lake", uri, *question[1:])
        assert as_json(compacted)["results"] == as_json(local)["results"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_slow_query_prints_no_progress_bar_into_the_answer(lake, capfd):
    """DuckDB draws a progress bar on stdout once a query runs past progress_bar_time (2 s): under
    load that corrupted `--format json` written to stdout. The engine turns the bar off."""
    from recompprof._history import engine, views

    opened = views.open_lake(str(lake))
    runner = engine.Engine(opened, views.select(opened))
    runner.con.execute("SET progress_bar_time = 0")  # as if every query were slow
    capfd.readouterr()
    runner.query("SELECT SUM(i) FROM range(200000000) t(i)")
    assert capfd.readouterr().out == ""
