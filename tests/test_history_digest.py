"""``recompprof history digest`` (every question in one process, one document) and what one question
costs at start: the query path loads neither pyarrow nor the event model nor torch (docs/history.md,
"Speed"). The lake is written by the real ``recompprof export`` from generated runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from generated_runs import generate
from history_fleet import BUILD, NEW, Fleet, write_fleet
from recorded_runs import cli
from recordings import clean_env

# What one question must not import: the event model (pydantic), pyarrow (and numpy under it), torch,
# and hashlib (OpenSSL's load: 10-30 ms, a tenth of a question's start-up).
HEAVY = ("pydantic", "pyarrow", "numpy", "torch", "recompprof._model.events", "hashlib")
# What DuckDB's Python client imports to convert a list bound as a parameter (a few ms at start).
CONVERTERS = ("uuid", "platform")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two generated 2-rank runs of one job (the second worse), exported by the real command."""
    where = tmp_path_factory.mktemp("digest")
    lake = where / "lake"
    runs = []
    for seed, worse in ((3, False), (4, True)):
        run = where / f"run{seed}"
        generate(run, ranks=2, per_rank=1500, seed=seed, worse=worse)
        runs.append(str(run))
    done = cli("export", *runs, "--to", str(lake))
    assert done.returncode == 0, done.stderr
    return lake


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet") / "lake"
    write_fleet(root, Fleet())
    return root


def _imported(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the real command with Python's import timing on (``-X importtime``): its result, and every
    module it imported."""
    done = cli(*argv, timeout=120, PYTHONPROFILEIMPORTTIME="1")
    modules = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return done, modules


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)}


@pytest.mark.parametrize(
    "argv",
    [
        ["top-causes", "--since", "2000-01-01"],
        ["compare", "scale-4", "--job", "scale-4"],
        ["sql", "SELECT COUNT(*) AS n FROM compiles"],
        ["digest", "--since", "2000-01-01", "--run", "scale-4", "--format", "json"],
    ],
    ids=lambda a: a[0],
)
def test_a_question_imports_neither_pyarrow_nor_the_event_model(exported, argv):
    """One history command, run as users run it, answers from a local lake through DuckDB's engine
    alone: it imports ``_duckdb`` (not the ``duckdb`` package's Python layer, a tenth of a second more),
    none of pyarrow, numpy, pydantic's event model, torch or hashlib, nor what DuckDB's client loads
    to convert a bound list."""
    done, modules = _imported("history", argv[0], "--lake", str(exported), *argv[1:])
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "_duckdb" in modules and "duckdb" not in modules
    assert _heavy(modules) == set()
    assert modules.isdisjoint(CONVERTERS)  # the footers' paths are literals, not a bound list


def test_import_recompprof_keeps_its_api_lazily():
    """``import recompprof`` loads no heavy module, and its public names still resolve on use."""
    program = (
        "import json, sys, recompprof; before = sorted(sys.modules); "
        "from recompprof import Compile, Report, build_report; "
        "print(json.dumps(before)); print(Compile.__name__, Report.__name__, build_report.__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=clean_env()
    )
    assert done.returncode == 0, done.stderr
    before, names = done.stdout.splitlines()
    assert _heavy(set(json.loads(before))) == set()
    assert names == "Compile Report build_report"


def _json(*argv: str) -> dict:
    done = cli("history", *argv)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_digest_holds_each_questions_own_answer(exported):
    """digest --format json holds, per question, exactly the document that question prints alone with
    the same options (top-causes, cost, regressions, compare, limit-hits, divergence, latency)."""
    lake = ("--lake", str(exported))
    since = ("--since", "2000-01-01")
    versions = ("--baseline", "torch=2.13.0", "--candidate", "torch=2.13.0")
    gate = ("--min-baseline", "1")
    digest = _json(
        "digest", *lake, *since, *versions, "--run", "scale-4", *gate, "--format", "json"
    )
    alone = {
        "top-causes": _json("top-causes", *lake, *since, "--format", "json"),
        "cost": _json("cost", *lake, *since, "--format", "json"),
        "regressions": _json("regressions", *lake, *versions, "--format", "json"),
        "compare": _json("compare", "scale-4", *lake, *gate, "--format", "json"),
        "limit-hits": _json("limit-hits", *lake, *since, "--format", "json"),
        "divergence": _json("divergence", *lake, *since, "--format", "json"),
        "latency": _json("latency", *lake, *since, "--format", "json"),
    }
    assert list(digest["questions"]) == list(alone)
    assert digest["questions"] == alone
    assert digest["left_out"] == {}
    assert alone["top-causes"]["results"][0]["rows"] and alone["latency"]["results"][0]["rows"]
    assert digest["findings"] == any(a["findings"] for a in alone.values())


def test_digest_text_is_one_document_with_every_question(exported):
    """The text digest shows every question's table under its name, with its warnings and verdict;
    without --run compare is left out, said so, and regressions compares the lake's releases."""
    done = cli("history", "digest", "--lake", str(exported), "--since", "2000-01-01")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for name in ("top-causes", "cost", "limit-hits", "divergence", "latency"):
        assert f"== recompprof history {name} ==" in out
    assert "== recompprof history compare ==\nleft out: no run given" in out
    assert "== recompprof history regressions ==\nleft out: fewer than two torch releases" in out
    # Each question's own table, as it prints alone.
    alone = cli("history", "latency", "--lake", str(exported), "--since", "2000-01-01").stdout
    assert alone in out


def test_a_digest_whose_run_is_not_in_the_lake_leaves_compare_out_and_says_why(exported):
    """digest --run RUN for a run not in the lake (not exported yet, a typo): compare is left out with
    the line compare alone gives, and every other question is answered, exit 0 (before: the whole
    digest stopped with that line, exit 2)."""
    lake = ("--lake", str(exported))
    alone = cli("history", "compare", "no-such-run", *lake)
    assert alone.returncode == 2
    digest = _json(
        "digest", *lake, "--since", "2000-01-01", "--run", "no-such-run", "--format", "json"
    )
    assert digest["left_out"]["compare"] == alone.stderr.strip().removeprefix("recompprof: error: ")
    assert "compare" not in digest["questions"] and digest["questions"]["top-causes"]["results"]


def test_a_digest_whose_filter_leaves_its_run_out_leaves_compare_out_and_says_why(exported):
    """digest --run RUN --team T where RUN's sessions have another team: compare would hold none of
    the run's rows and pass, so it is left out with the line compare alone gives (exit 2 there), and
    the other questions are answered for team T, exit 0."""
    lake = ("--lake", str(exported))
    runs = _json("sql", *lake, "SELECT DISTINCT run_id FROM runs", "--format", "json")
    run = runs["results"][0]["rows"][0]["run_id"]
    alone = cli("history", "compare", run, *lake, "--team", "no-such-team")
    assert alone.returncode == 2 and "--team leaves the run out" in alone.stderr
    digest = _json(
        "digest", *lake, "--since", "2000-01-01", "--run", run, "--team", "no-such-team",
        "--format", "json",
    )  # fmt: skip
    assert digest["left_out"]["compare"] == alone.stderr.strip().removeprefix("recompprof: error: ")
    assert "compare" not in digest["questions"] and "top-causes" in digest["questions"]


def test_digest_compares_the_two_newest_releases_and_filters_every_question(fleet):
    """Without --baseline/--candidate, digest's regressions hold the newest torch release to the one
    before it (the fleet's regressing job found, exit 1); --team narrows every question."""
    lake = ("--lake", str(fleet))
    since = ("--since", "2026-10-01")
    digest = _json("digest", *lake, *since, "--format", "json")
    alone = _json(
        "regressions", *lake, "--baseline", "torch=2.14.1", "--candidate", f"torch={NEW}",
        "--format", "json",
    )  # fmt: skip
    assert digest["questions"]["regressions"] == alone
    assert "job1" in {r["job"] for r in alone["results"][0]["rows"]} and digest["findings"]
    team = _json("digest", *lake, *since, "--team", "speech", "--format", "json")
    for name, document in team["questions"].items():
        assert "team speech" in document["sessions"]["scope"], name
        assert document["sessions"]["sessions"] < digest["questions"][name]["sessions"]["sessions"]
    versions = _json("sql", *lake, "SELECT DISTINCT torch_version FROM runs", "--format", "json")
    assert {r["torch_version"] for r in versions["results"][0]["rows"]} == {
        f"2.14.1{BUILD}",
        f"{NEW}{BUILD}",
    }


def test_the_query_paths_columns_are_the_tables_own():
    """The columns the questions read (given a type where no file has them yet) and the tables the
    views name are the lake's own vocabulary, typed as DuckDB reads the lake's Arrow types."""
    import duckdb
    import pyarrow as pa

    from recompprof._history import questions, tables, views

    assert views.TABLES == tables.TABLES and set(questions.READS) == set(tables.TABLES)
    con = duckdb.connect()
    for table, columns in questions.READS.items():
        con.register("empty", pa.Table.from_batches([], schema=tables.SCHEMAS[table]))
        described = {r[0]: r[1] for r in con.execute("DESCRIBE SELECT * FROM empty").fetchall()}
        assert {c: described.get(c) for c in columns} == columns, table


def test_a_questions_views_hold_what_it_reads_and_sql_every_column(exported):
    """The canonical questions' views give only the columns the questions read (each is bound on every
    query), while ``history sql`` over the same engine, and as its own command, reads any column."""
    from recompprof._history import engine, questions, views

    lake = views.reader(str(exported))
    runner = engine.Engine(lake, views.select(lake), questions_only=True)
    for table, reads in questions.READS.items():
        columns = {r[0] for r in runner.con.execute(f"DESCRIBE {table}").fetchall()}
        assert columns == {*reads, "dt"}, table
    answer = engine.free_query(runner, "SELECT COUNT(frame_file) AS n FROM compiles")
    assert answer.results[0].rows[0][0] > 0
    alone = _json(
        "sql",
        "--lake",
        str(exported),
        "SELECT frame_label FROM compiles LIMIT 1",
        "--format",
        "json",
    )
    assert alone["results"][0]["rows"][0]["frame_label"]
