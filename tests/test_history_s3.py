"""The history lake on an object store, over HTTP: moto's standalone server, which emulates Amazon S3,
started by these tests on 127.0.0.1 (a real server process and real HTTP requests; pyarrow's own S3
filesystem is the client)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow.fs")
pytest.importorskip("moto.server")
duckdb = pytest.importorskip("duckdb")

from arrival_plans import Baseline, Plan, check, draw_plan, lake_objects, make_runs  # noqa: E402
from generated_runs import generate  # noqa: E402
from needs import starts  # noqa: E402
from servers import MOTO_ENVIRONMENT, free_port, moto_s3  # noqa: E402

from recompprof._history.export import export  # noqa: E402
from recompprof._history.layout import Lake  # noqa: E402
from recompprof._history.sessions import base_of  # noqa: E402
from recompprof._history.tables import TABLES  # noqa: E402


@pytest.fixture(scope="module")
@starts("servers")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3-compatible server (moto, emulating S3) on 127.0.0.1, with a bucket ``lake``."""
    with moto_s3(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in MOTO_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated two-rank run."""
    where = tmp_path_factory.mktemp("s3run") / "run"
    generate(where, ranks=2, per_rank=1500, seed=3)
    return where


def _cut_short(run: Path, short: Path) -> Path:
    """``run`` cut to its first 200 lines a log: the same object names when exported, fewer rows."""
    short.mkdir()
    for log in run.glob("*.jsonl"):
        (short / log.name).write_text("".join(log.read_text().splitlines(keepends=True)[:200]))
    return short


def _uri(endpoint: str, prefix: str) -> str:
    return f"s3://lake/{prefix}?endpoint_override={endpoint}&scheme=http&region=us-east-1"


def test_export_to_s3_writes_the_bytes_a_local_export_writes(
    s3_endpoint: str, run: Path, tmp_path: Path
) -> None:
    """An export to an S3 URI writes, as whole objects under the same names, the bytes an export to a
    local path writes; exporting again leaves the same objects (no second copy, no temporary object)."""
    uri = _uri(s3_endpoint, "same")
    export([run], uri)
    local = tmp_path / "lake"
    export([run], str(local))
    lake = Lake(uri)
    objects = lake_objects(lake)
    expected = {str(p.relative_to(local)): p.read_bytes() for p in local.rglob("*") if p.is_file()}
    assert len(objects) == 4 and objects == expected
    export([run], uri)
    assert lake_objects(lake) == objects
    assert [f.run_part for t in TABLES for f in lake.files(t)] == ["scale-3"] * 4


def test_a_run_exported_whole_replaces_per_rank_objects(s3_endpoint: str, run: Path) -> None:
    """Per-rank objects of a run are deleted from the bucket once the run is exported whole."""
    uri = _uri(s3_endpoint, "replace")
    export([run], uri, per_rank=True)
    lake = Lake(uri)
    assert len(lake.files("runs")) == 2
    result = export([run], uri)
    assert len(result.replaced) == 8
    assert {base_of(f.writer) for t in TABLES for f in lake.files(t)} == {"all"}


def test_duckdb_reads_what_was_exported_to_s3(s3_endpoint: str, run: Path) -> None:
    """The rows an S3 export wrote read back through pyarrow's dataset API into DuckDB, with the
    sessions and compiles the run holds."""
    import pyarrow.dataset as ds

    uri = _uri(s3_endpoint, "query")
    result = export([run], uri)
    lake = Lake(uri)
    compiles = ds.dataset(
        [f.path for f in lake.files("compiles")], filesystem=lake.fs, format="parquet"
    ).to_table()
    con = duckdb.connect()
    con.register("compiles", compiles)
    [(rows, ranks)] = con.execute("SELECT COUNT(*), COUNT(DISTINCT rank) FROM compiles").fetchall()
    assert rows == result.rows["compiles"] and ranks == 2


def test_session_end_export_to_s3(s3_endpoint: str, tmp_path: Path) -> None:
    """A session whose ``history_uri`` names an S3 lake exports its log there when it ends: its
    ``runs`` row, under its own per-rank name, with its labels."""
    import recompprof

    uri = _uri(s3_endpoint, "session")
    session = recompprof.attach(
        run_dir=tmp_path / "run", history_uri=uri, labels={"team": "infra"}, history_timeout=120
    )
    session.detach()
    files = Lake(uri).files("runs")
    assert [base_of(f.writer) for f in files] == [f"rank00000-{session.identity.pid}"]
    import pyarrow.parquet as pq

    table = pq.read_table(files[0].path, filesystem=Lake(uri).fs)
    assert table.column("team").to_pylist() == ["infra"]
    assert table.column("ended").to_pylist() == [True]


def test_a_bucket_of_both_versions_is_read_through_the_new_names(
    s3_endpoint: str, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bucket whose rank-0 objects hold the old column names (export version 3) answers through
    the object-store views (pyarrow's dataset, old names declared) as a local lake of the same run
    exported afresh does."""
    import json

    import pyarrow.parquet as pq

    from recompprof._cli.main import main
    from recompprof._history.columns import RENAMED

    uri = _uri(s3_endpoint, "renamed")
    per_rank = ["export", str(run), "--per-rank", "--to"]
    assert main([*per_rank, uri]) == 0 and main([*per_rank, str(tmp_path / "fresh")]) == 0
    lake = Lake(uri)
    for table, renamed in RENAMED.items():
        back = {new: old for old, new in renamed.items()}
        for f in lake.files(table):
            if "rank00000" in f.path:
                with lake.fs.open_input_file(f.path) as handle:
                    rows = pq.read_table(handle)
                rows = rows.rename_columns([back.get(n, n) for n in rows.column_names])
                with lake.fs.open_output_stream(f.path) as stream:
                    pq.write_table(rows, stream)
    capsys.readouterr()
    query = (
        "SELECT (SELECT ROUND(SUM(compile_s), 6) FROM compiles) AS c, "
        "(SELECT COUNT(compile_s) FROM compiles) AS n, (SELECT ROUND(SUM(wall_s), 6) FROM runs) AS w"
    )
    answers = []
    for where in (uri, str(tmp_path / "fresh")):
        assert main(["history", "sql", "--lake", where, query, "--format", "json"]) == 0
        answers.append(json.loads(capsys.readouterr().out)["results"][0]["rows"])
    assert answers[0] == answers[1] and answers[0][0]["c"] > 0 and answers[0][0]["w"] > 0


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_a_question_on_an_s3_lake_runs_in_a_process_of_its_own(
    s3_endpoint: str, run: Path, tmp_path: Path, scheme: str
) -> None:
    """``recompprof history top-causes --lake s3://...`` run as a user runs it, in a fresh process
    with nothing imported before it, answers what it answers over the same run exported to a local
    path: the engine scans the object store's Arrow datasets (it crashed with "Python Arrow objects
    cannot be scanned" when only DuckDB's engine module was loaded)."""
    import json
    import subprocess
    import sys

    uri = _uri(s3_endpoint, f"fresh-{scheme}")
    export([run], uri)
    local = tmp_path / "lake"
    export([run], str(local))
    answers = {}
    for lake in (scheme + uri.removeprefix("s3"), str(local)):
        command = [sys.executable, "-m", "recompprof._cli.main", "history", "top-causes"]
        command += ["--lake", lake, "--since", "2000-01-01", "--all", "--format", "json"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        answers[lake] = json.loads(done.stdout)["results"]
    remote, here = answers.values()
    assert remote == here and here[0]["rows"], answers


def test_arrival_plans_on_s3_hold_each_session_once(s3_endpoint: str, tmp_path: Path) -> None:
    """Seeded arrival plans (whole, per-rank, partial-folder and closed-day exports, with and without
    labels, compactions) carried out on an S3 lake, where files are uploaded whole and replaced by
    deleting objects: every table equals one whole export of the same runs, read from the objects
    and as the questions read the store, and ``runs`` lists each session once."""
    runs = make_runs(tmp_path / "runs")
    baseline = Baseline(runs, tmp_path / "baseline")
    rng = random.Random(4646)
    failures = []
    for number in range(3):
        steps = draw_plan(rng, runs)
        plan = Plan(runs, _uri(s3_endpoint, f"arrivals-{number}"), tmp_path / f"plan-{number}")
        for step in steps:
            plan.do(step)
        problems = check(baseline, plan)
        if problems:
            failures.append(f"{' '.join(map(str, steps))}: {problems}")
    assert not failures, "\n".join(failures)


def test_an_answer_is_made_again_when_a_file_it_read_changed_and_flagged_when_they_never_settle(
    s3_endpoint: str, run: Path, tmp_path: Path
) -> None:
    """On an object store a command's answer stands only if every file it read still has the size
    and time it was listed with (``Engine.settled``). A re-export that lengthens the run's files
    during the first reading makes the answer again from a fresh listing, which counts the longer
    run; files that change during every reading give the fourth answer, flagged ``unsettled``."""
    from recompprof._history import engine, views

    uri = _uri(s3_endpoint, "settling")
    short = _cut_short(run, tmp_path / "short")
    export([short], uri)
    count = "SELECT COUNT(*) FROM compiles"
    computed: list[int] = []

    def once_replaced(runner: engine.Engine) -> int:
        [(rows,)] = runner.query(count).rows
        computed.append(rows)
        if len(computed) == 1:
            export([run], uri)  # a job's export replaces every object the answer read
        return rows

    runner = engine.Engine(views.reader(uri), views.select(views.reader(uri)))
    answer = runner.settled(lambda: once_replaced(runner))
    whole = engine.Engine(views.reader(uri), views.select(views.reader(uri)))
    assert len(computed) == 2 and computed[0] < answer == whole.query(count).rows[0][0]
    assert not runner.unsettled

    sources = [short, run]

    def always_replaced(runner: engine.Engine) -> int:
        [(rows,)] = runner.query(count).rows
        computed.append(rows)
        # the files change again each time: the first change away from the whole run exported above
        export([sources[(len(computed) + 1) % 2]], uri)
        return rows

    computed.clear()
    runner = engine.Engine(views.reader(uri), views.select(views.reader(uri)))
    runner.settled(lambda: always_replaced(runner))
    assert len(computed) == 4 and runner.unsettled


def test_the_cli_warns_when_the_files_of_its_answer_never_settled(
    s3_endpoint: str,
    run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Commands on an S3 lake whose files a job's export replaces during every one of a command's
    four readings (each real export is run after the question's queries, by the question itself):
    the answer is printed with a warning that the files kept changing and to ask again, where the
    answer's other warnings go: stderr for a table or csv, the document's ``warnings`` for json, each
    question's in a digest. An answer that settled says nothing of it. (``history sql`` failed there
    with "this is a recompprof bug" before: made again, it locked its connection a second time, and a
    locked DuckDB refuses every setting.)"""
    import json

    from recompprof._cli.main import main
    from recompprof._history import engine

    uri = _uri(s3_endpoint, "unsettled")
    short = _cut_short(run, tmp_path / "short")
    export([run], uri)
    warning = "files changed while every one of 4 reads of them ran (jobs are exporting)"
    on_stderr = (
        ["top-causes"],
        ["sql", "SELECT COUNT(*) FROM compiles"],
        ["cost", "--format", "csv"],
    )
    in_json = (
        ["top-causes", "--format", "json"],
        ["sql", "SELECT 1 FROM runs", "--format", "json"],
    )

    def warned() -> list[int]:
        """How many times each command warned (a digest: each of its questions)."""
        counts = []
        for command in on_stderr:
            assert main(["history", *command, "--lake", uri]) == 0
            told = capsys.readouterr()
            counts.append(told.err.count(f"recompprof: warning: {warning}") if told.out else -1)
        for command in in_json:
            assert main(["history", *command, "--lake", uri]) == 0
            document = json.loads(capsys.readouterr().out)
            counts.append(sum(w.startswith(warning) for w in document["warnings"]))
        assert main(["history", "digest", "--lake", uri, "--format", "json"]) == 0
        questions = json.loads(capsys.readouterr().out)["questions"].values()
        counts += [sum(w.startswith(warning) for w in q["warnings"]) for q in questions]
        return counts

    assert set(warned()) == {0}
    sources = [short, run]

    def exporting(real: Callable[..., object]) -> Callable[..., object]:
        def question(*args: object) -> object:
            answer = real(*args)
            sources.reverse()
            export([sources[0]], uri)  # a job's export replaces every object the answer read
            return answer

        return question

    for question in ("ask", "free_query", "digest"):
        monkeypatch.setattr(engine, question, exporting(getattr(engine, question)))
    counts = warned()
    assert len(counts) > len(on_stderr) + len(in_json) + 3 and set(counts) == {1}, counts


def test_an_s3_lake_uri_with_an_empty_folder_name_is_one_line(
    s3_endpoint: str, run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An S3 lake URI with ``//`` in its path (pyarrow refuses any key under it) is one line naming
    the URI, exit 2, for a question and for an export (before: "this is a recompprof bug")."""
    from recompprof._cli.main import main

    uri = _uri(s3_endpoint, "a//b")
    for argv in (["history", "top-causes", "--lake", uri], ["export", str(run), "--to", uri]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "an empty folder name ('//') in lake/a//b" in err, err
        assert uri in err


def test_keys_in_a_lake_uri_are_never_printed_nor_put_on_a_command_line(
    s3_endpoint: str, run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """An S3 URI carrying its keys (``s3://KEY:SECRET@bucket``, which pyarrow takes): ``export`` and
    a failing ``history`` command print the URI with the secret as ``***``, and a session's own
    export hands the URI to its child in the environment, not on the command line any user of the
    node can read; a failed one warns without the secret either."""
    import subprocess
    import sys

    import recompprof
    from recompprof import _internal
    from recompprof.testing import raise_internal_errors

    secret = "s3cr3t%2Fkey"
    for name in MOTO_ENVIRONMENT:  # the URI's keys are the only ones
        if name.startswith("AWS_") and "KEY" in name:
            monkeypatch.delenv(name)
    uri = _uri(s3_endpoint, "keys").replace("s3://", f"s3://AKIDTEST:{secret}@")
    cli = [sys.executable, "-m", "recompprof._cli.main"]
    done = subprocess.run([*cli, "export", str(run), "--to", uri], capture_output=True, text=True)
    assert done.returncode == 0 and Lake(uri).files("runs"), done.stderr
    assert "AKIDTEST:***@lake/keys" in done.stdout and secret not in done.stdout + done.stderr
    broken = uri.replace("lake/keys", "lake//keys")
    done = subprocess.run(
        [*cli, "history", "top-causes", "--lake", broken], capture_output=True, text=True
    )
    assert done.returncode == 2 and "AKIDTEST:***@" in done.stderr, done.stderr
    assert secret not in done.stdout + done.stderr

    children: list[tuple[list[str], dict[str, str]]] = []
    real_run = subprocess.run

    def watched(args: list[str], **kwargs: Any) -> Any:
        children.append((list(args), kwargs["env"]))
        return real_run(args, **kwargs)

    monkeypatch.setattr(subprocess, "run", watched)
    session = recompprof.attach(run_dir=tmp_path / "run", history_uri=uri, history_timeout=120)
    session.detach()
    [(argv, env)] = children
    assert not any(secret in part for part in argv) and env["RECOMPPROF_HISTORY_URI"] == uri
    assert f"rank00000-{session.identity.pid}" in {
        base_of(f.writer) for f in Lake(uri).files("runs")
    }

    _internal.reset()  # the warning is logged at a component's first error in the process
    with raise_internal_errors(False), caplog.at_level("WARNING"):
        session = recompprof.attach(
            run_dir=tmp_path / "broken", history_uri=broken, history_timeout=120
        )
        session.detach()
    assert _internal.counts().get("history") == 1
    assert "AKIDTEST:***@" in caplog.text and "empty folder name" in caplog.text
    assert secret not in caplog.text


def test_a_session_whose_object_store_is_unreachable_says_so_within_its_deadline(
    tmp_path: Path, caplog: Any
) -> None:
    """A session whose ``history_uri`` names an S3 endpoint where nothing listens, at its end with the
    default ``history_timeout`` (30 s, SIGTERM's usual grace): the export fails at its first request
    and the job's warning says the lake cannot be reached. (Every request was tried 3 times, about
    6 s each, before the first failure: the export was killed at its deadline after 30 s, and the
    warning said only ``TimeoutExpired``.) The event log stays for a later ``recompprof export``."""
    import recompprof
    from recompprof import _internal
    from recompprof.testing import raise_internal_errors

    uri = _uri(f"127.0.0.1:{free_port()}", "nowhere")
    _internal.reset()
    with raise_internal_errors(False), caplog.at_level("WARNING"):
        session = recompprof.attach(run_dir=tmp_path / "run", history_uri=uri)
        session.detach()
    assert _internal.counts().get("history") == 1
    assert "cannot reach the lake" in caplog.text and "TimeoutExpired" not in caplog.text
    assert session.event_log_path is not None and session.event_log_path.exists()
