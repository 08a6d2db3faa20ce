"""The lake on an existing distributed engine: Apache Spark in local mode runs the view definitions
``--print-sql --dialect spark`` prints and every canonical question, and returns the rows DuckDB
returns over the same lake (half of it compacted, so both roots and the marker are exercised).

Needs Java 17+ (scripts/system-deps.sh installs openjdk-17-jre-headless) and pyspark (the dev extra).
The same lake is also read as ``s3a://`` from moto's S3 server through Hadoop's real S3A connector
(its jars: scripts/s3a-jars.sh, which scripts/test.sh runs).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from history_fleet import NEW, Fleet, write_fleet
from needs import starts
from servers import REPO, moto_s3, s3_store

from recompprof._history import compact, daily, engine, questions, views
from recompprof._history.columns import RENAMED
from recompprof._history.dialects import DIALECTS
from recompprof._history.dialects.base import Where
from recompprof._history.layout import Lake

if shutil.which("java") is None:
    pytest.skip(
        "java not found: Spark needs Java 17+ (scripts/system-deps.sh installs "
        "openjdk-17-jre-headless)",
        allow_module_level=True,
    )
pyspark_sql = pytest.importorskip("pyspark.sql", reason="pyspark is not installed (the dev extra)")

FLEET = Fleet(days=3, runs_per_day=4)
# Spark's exact percentile interpolates as DuckDB's quantile_cont does; the printed text uses the
# approximate one (checked to run below), which a fleet month needs.
SPARK_EXACT = dataclasses.replace(DIALECTS["spark"], percentile="percentile({x}, {p})")

# Hadoop's S3A connector as scripts/s3a-jars.sh takes it from PyPI (no Maven here): hadoop-aws 3.3.1
# and the AWS SDK v1 bundle it calls. Pyspark 4.3 ships Hadoop 3.5, whose defaults an S3A of 3.3
# cannot read (durations written "60s", SDK v2 credential providers), so the session states those
# settings as 3.3 reads them. A user with the matching hadoop-aws from Maven needs none of them.
S3A_JARS = [
    REPO / ".s3a-jars" / "hadoop-aws-3.3.1.jar",
    REPO / ".s3a-jars" / "aws-java-sdk-bundle-1.11.901.jar",
]
S3A_OLD_CONNECTOR = {
    "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "fs.s3a.threads.keepalivetime": "60",
    "fs.s3a.connection.establish.timeout": "30000",
    "fs.s3a.connection.timeout": "200000",
    "fs.s3a.connection.ttl": "300000",
    "fs.s3a.connection.request.timeout": "0",
    "fs.s3a.connection.acquisition.timeout": "60000",
    "fs.s3a.connection.idle.time": "60000",
    "fs.s3a.multipart.purge.age": "86400",
}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    root = tmp_path_factory.mktemp("spark") / "lake"
    write_fleet(root, FLEET)
    _without_labels(root, FLEET.start + datetime.timedelta(days=FLEET.days - 1))
    _old_names(root, FLEET.start + datetime.timedelta(days=1))
    handle = Lake(str(root))
    compact.compact(handle, FLEET.start)  # the first day compacted, the others raw
    return handle


def _without_labels(root: Path, day: datetime.date) -> None:
    """A copy of one run of ``day`` with no team or model label (a NULL group, which Spark sorts first
    unless told otherwise), under a run id of its own."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for table in ("runs", "compiles", "guard_failures"):
        folder = root / "v1" / table / f"dt={day}"
        source = sorted(folder.glob("*.parquet"))[0]
        rows = pq.read_table(source)
        for column in ("team", "model"):
            i = rows.schema.get_field_index(column)
            rows = rows.set_column(i, column, pa.nulls(len(rows), rows.schema.field(i).type))
        i = rows.schema.get_field_index("run_id")
        rows = rows.set_column(
            i, "run_id", pc.binary_join_element_wise("unlabelled-", rows["run_id"], "")
        )
        pq.write_table(rows, folder / f"unlabelled-{source.name}")


def _old_names(root: Path, day: datetime.date) -> None:
    """``day``'s raw files as export version 3 wrote them: the renamed columns under their old names
    (``compile_seconds`` ...), so the views read files of both versions."""
    import pyarrow.parquet as pq

    for table, renamed in RENAMED.items():
        back = {new: old for old, new in renamed.items()}
        for path in (root / "v1" / table / f"dt={day}").glob("*.parquet"):
            rows = pq.read_table(path)
            pq.write_table(rows.rename_columns([back.get(n, n) for n in rows.column_names]), path)


@pytest.fixture(scope="module")
@starts("servers")
def spark(lake: Lake) -> Iterator[Any]:
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("recompprof-history-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.jars", ",".join(str(j) for j in S3A_JARS if j.exists()))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    for statement in views.printed(Where.of(lake.uri), "spark", daily.through(lake)).split(";\n"):
        body = "\n".join(line for line in statement.splitlines() if not line.startswith("--"))
        if body.strip():
            session.sql(body)
    yield session
    session.stop()


def _params(lake: Lake) -> questions.Params:
    duck = engine.Engine(lake, views.select(lake))
    last = duck.query("SELECT run_id, job FROM runs ORDER BY start_time DESC, run_id LIMIT 1").rows
    run, job = last[0]
    return questions.Params(
        since=datetime.date(2026, 10, 1),
        baseline="2.14.1",
        candidate=NEW,
        run=run,
        job=job,
        last=50,
    )


def _plain(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, datetime.datetime):
        return value.date().isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _same(duck_rows: list[tuple[Any, ...]], spark_rows: list[tuple[Any, ...]]) -> bool:
    if len(duck_rows) != len(spark_rows):
        return False
    for a, b in zip(duck_rows, spark_rows):
        for x, y in zip(a, b, strict=True):
            x, y = _plain(x), _plain(y)
            if isinstance(x, float) or isinstance(y, float):
                if x is None or y is None or abs(float(x) - float(y)) > 0.0011:
                    return False
            elif x != y:
                return False
    return True


def test_spark_returns_the_rows_duckdb_returns_for_every_question(lake, spark):
    """Every canonical question (each --by of those that group, frame too for top-causes, with and
    without a --job filter) and the completeness count give the same rows in the same order on Spark
    local mode as on DuckDB, from the same portable texts: a NULL group (a run with no team or model
    label) sorts last on both."""
    duck = engine.Engine(lake, views.select(lake))
    base = _params(lake)
    asked = []
    for name in questions.COMMANDS:
        groups = (*questions.GROUPS, questions.FRAME) if name == "top-causes" else questions.GROUPS
        for by in groups if name in ("top-causes", "cost", "latency") else ("model",):
            params = dataclasses.replace(
                base, by=by, only=(("job", base.job),) if by == "job" else ()
            )
            for dq, sq in zip(
                questions.bind(name, params, DIALECTS["duckdb"]).queries,
                questions.bind(name, params, SPARK_EXACT).queries,
            ):
                duck_rows = duck.query(dq.text).rows
                spark_rows = [tuple(r) for r in spark.sql(sq.text).collect()]
                assert _same(duck_rows, spark_rows), (name, by, dq.title, duck_rows, spark_rows)
                asked.append((name, bool(duck_rows)))
    scope = "dt >= DATE '2026-10-01'"
    duck_rows = duck.query(questions.completeness(scope, DIALECTS["duckdb"])).rows
    spark_rows = [tuple(r) for r in spark.sql(questions.completeness(scope, SPARK_EXACT)).collect()]
    assert _same(duck_rows, spark_rows)
    assert duck_rows[0][1] > 0  # the fleet has sessions that did not end: the count is exercised
    # the comparison is not vacuous: most questions have rows on this fleet
    answered = {name for name, has in asked if has}
    assert {"top-causes", "cost", "divergence", "latency"} <= answered, asked


def test_the_printed_spark_text_runs_with_approximate_percentiles(lake, spark):
    """latency as printed for Spark (percentile_approx) runs and gives DuckDB's groups and counts."""
    params = _params(lake)
    printed = questions.bind("latency", params, DIALECTS["spark"]).queries[0].text
    assert "percentile_approx" in printed
    rows = [tuple(r) for r in spark.sql(printed).collect()]
    duck = engine.Engine(lake, views.select(lake))
    expected = duck.query(questions.bind("latency", params).queries[0].text).rows
    assert [r[:3] for r in rows] == [r[:3] for r in expected]
    assert all(r[3] <= r[4] <= r[5] <= r[6] for r in rows)


def test_views_read_both_roots(lake, spark):
    """The Spark views take the compacted first day and the raw later days: every day once."""
    days = spark.sql("SELECT dt, COUNT(*) AS n FROM compiles GROUP BY dt ORDER BY dt").collect()
    duck = engine.Engine(lake, views.select(lake))
    expected = duck.query("SELECT dt, COUNT(*) AS n FROM compiles GROUP BY dt ORDER BY dt").rows
    assert [(r[0], r[1]) for r in days] == expected
    assert len(expected) == FLEET.days
    assert Path(daily.part_path(lake, "compiles", FLEET.start)).exists()


def test_views_read_the_old_column_names(lake, spark):
    """A raw day whose files hold the old names (export version 3) is read through the renamed
    columns on Spark, as on DuckDB: every day's compile seconds, none null."""
    query = (
        "SELECT dt, ROUND(SUM(compile_s), 3), COUNT(compile_s), COUNT(*) FROM compiles "
        "GROUP BY dt ORDER BY dt"
    )
    days = [tuple(r) for r in spark.sql(query).collect()]
    duck = engine.Engine(lake, views.select(lake))
    assert _same(duck.query(query).rows, days)
    assert len(days) == FLEET.days and all(r[1] > 0 and r[2] == r[3] for r in days)
    import pyarrow.parquet as pq

    old = next((Path(lake.base) / "v1" / "runs" / f"dt={days[1][0]}").glob("*.parquet"))
    assert "compile_seconds" in pq.read_schema(old).names  # the day read is of the old version


def test_a_value_spelled_like_a_macro_stays_text_on_spark(lake, spark):
    """A version and a run id that read like the texts' macros (WEEK(x), run-PCTL(a, 0.5)) run on
    Spark as the quoted text typed: the gate's texts parse and match nothing, as on DuckDB."""
    params = dataclasses.replace(
        _params(lake), baseline="WEEK(x)", run="run-PCTL(a, 0.5)", job="SIZE(x)"
    )
    duck = engine.Engine(lake, views.select(lake))
    for name in ("regressions", "compare"):
        for dq, sq in zip(
            questions.bind(name, params, DIALECTS["duckdb"]).queries,
            questions.bind(name, params, DIALECTS["spark"]).queries,
        ):
            assert "'WEEK(x)'" in sq.text or "'run-PCTL(a, 0.5)'" in sq.text
            assert (
                [tuple(r) for r in spark.sql(sq.text).collect()] == duck.query(dq.text).rows == []
            )


@pytest.fixture(scope="module")
@starts("servers")
def s3a_lake(lake: Lake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The module's lake copied, file for file, into bucket ``lake`` of moto's S3 server under
    ``fleet/``; yields the lake's ``s3a://`` URI with the store's endpoint, as a user gives it."""
    import pyarrow.fs as pafs

    with moto_s3(tmp_path_factory.mktemp("moto")) as endpoint:
        store = s3_store(endpoint)
        pafs.copy_files(lake.base, "lake/fleet", pafs.LocalFileSystem(), store)
        yield f"s3a://lake/fleet?endpoint_override={endpoint}&scheme=http"


SINCE = datetime.date(2026, 10, 1)


def _printed(uri: str, through: datetime.date | None, question: str, dialect: str) -> str:
    """``recompprof history QUESTION --print-sql --dialect DIALECT`` for ``uri`` as a user runs it,
    in a process with no AWS credentials at all (printing opens nothing)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    marker = through.isoformat() if through else "none"
    command = [sys.executable, "-m", "recompprof._cli.main", "history", question, "--lake", uri]
    command += ["--since", SINCE.isoformat(), "--print-sql", "--dialect", dialect]
    done = subprocess.run(
        [*command, "--through", marker], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _statements(text: str) -> tuple[list[str], list[str]]:
    """A printed text's statements, comments left out: the views, then the questions."""
    bodies = [
        "\n".join(line for line in part.splitlines() if not line.startswith("--"))
        for part in text.split(";\n")
    ]
    bodies = [body for body in bodies if body.strip()]
    made = [body for body in bodies if body.startswith("CREATE")]
    return made, bodies[len(made) :]


def test_spark_reads_an_s3a_lake_through_the_s3a_connector_as_printed(lake, spark, s3a_lake):
    """The docs' Spark example on an object store: the text printed for ``--lake s3a://...`` (with no
    credentials) names the store's settings; set as printed, Spark's real S3A connector reads the lake
    from moto's S3 server over HTTP, and each question printed so gives the rows DuckDB gives for the
    same question printed for the local copy of the lake."""
    missing = [j.name for j in S3A_JARS if not j.exists()]
    if missing:
        pytest.skip(f"the S3A connector's jars are missing ({missing}): run scripts/s3a-jars.sh")
    session = spark.newSession()  # views of its own: the other tests' stay on the local lake
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in {
        **S3A_OLD_CONNECTOR,
        "fs.s3a.access.key": "testing",
        "fs.s3a.secret.key": "testing",
    }.items():
        hadoop.set(key, value)
    duck = engine.Engine(lake, views.select(lake))
    through = daily.through(lake)
    answered = {}
    for name in ("top-causes", "cost"):
        text = _printed(s3a_lake, through, name, "spark")
        assert "s3a://lake/fleet/v1/compiles" in text and "s3://" not in text
        settings = re.search(r"-- an S3-compatible store: (.*)", text)
        assert settings, text
        printed = dict(item.split("=", 1) for item in settings.group(1).split(", "))
        assert printed["spark.hadoop.fs.s3a.endpoint"].startswith("http://127.0.0.1:")
        for key, value in printed.items():
            hadoop.set(key.removeprefix("spark.hadoop."), value)
        made, asked = _statements(text)
        for body in made:
            session.sql(body)
        _, expected = _statements(_printed(lake.uri, through, name, "duckdb"))
        assert len(asked) == len(expected) >= 2  # the question(s), then the completeness count
        rows = [[tuple(r) for r in session.sql(t).collect()] for t in asked]
        for spark_rows, duck_text in zip(rows, expected):
            duck_rows = duck.query(duck_text).rows
            assert _same(duck_rows, spark_rows), (name, duck_rows, spark_rows)
        answered[name] = len(rows[0])
    days = session.sql("SELECT COUNT(DISTINCT dt) FROM compiles").collect()[0][0]
    assert days == FLEET.days  # both roots read from the store: the compacted day and the raw ones
    assert all(answered.values()), answered  # not vacuous: each question has rows
