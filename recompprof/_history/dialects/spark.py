"""Apache Spark SQL (tested in local mode by tests/test_history_spark.py)."""

from __future__ import annotations

from recompprof._history.dialects.base import Dialect, Where, literal


def _source(
    where: Where, table: str, suffix: str, under: str, columns: list[tuple[str, str]]
) -> tuple[str, str]:
    # The columns declared (a file lacking one reads it as null: an older exporter's, or the old
    # names in a newer one's), the partition column dt among them.
    declared = DIALECT.declared([*columns, ("dt", "date")])
    setup = (
        f"CREATE OR REPLACE TEMPORARY VIEW {table}_{suffix} ({declared}) USING parquet "
        f"OPTIONS (path {literal(where.uri(under))});\n"
    )
    return setup, f"{table}_{suffix}"


# Spark reads s3a:// through Hadoop's S3A connector, which no Spark distribution bundles: the
# hadoop-aws jar of the Hadoop release Spark ships, and the AWS SDK v2 bundle it depends on (Hadoop
# 3.4 and later), from Maven. spark.jars.packages resolves the second from the first.
_S3A_JARS = (
    "-- s3a:// needs Hadoop's S3A connector: org.apache.hadoop:hadoop-aws at the version of the\n"
    "-- Hadoop this Spark ships (its jars/hadoop-client-api-VERSION.jar) and the AWS SDK v2 bundle\n"
    "-- it depends on (software.amazon.awssdk:bundle): spark.jars.packages=org.apache.hadoop:\n"
    "-- hadoop-aws:VERSION brings both\n"
)


def _preamble(where: Where) -> str:
    if where.scheme not in ("s3", "s3a", "s3n"):
        return ""
    lines = [_S3A_JARS]
    if where.scheme != "s3a":
        lines.append("-- Spark outside EMR reads buckets as s3a://: give --lake s3a://...\n")
    if where.endpoint:
        lines.append(
            f"-- an S3-compatible store: spark.hadoop.fs.s3a.endpoint={where.endpoint_scheme}://"
            f"{where.endpoint}, spark.hadoop.fs.s3a.path.style.access=true"
            + (
                ", spark.hadoop.fs.s3a.connection.ssl.enabled=false"
                if where.endpoint_scheme == "http"
                else ""
            )
            + "\n"
        )
    return "".join(lines)


DIALECT = Dialect(
    "spark",
    # Exact percentiles cost Spark 3x the time of approximate ones on a fleet month (docs/history.md).
    percentile="percentile_approx({x}, {p})",
    week="CAST(date_trunc('week', {d}) AS DATE)",
    size="size({x})",
    types={
        "string": "STRING",
        "int32": "INT",
        "int64": "BIGINT",
        "double": "DOUBLE",
        "bool": "BOOLEAN",
        "timestamp": "TIMESTAMP",
        "list": "ARRAY<STRING>",
        "map": "MAP<STRING, STRING>",
        "date": "DATE",
    },
    source=_source,
    view="CREATE OR REPLACE TEMPORARY VIEW {table} AS\n{body};\n",
    preamble=_preamble,
    backslash_escapes=True,
)
