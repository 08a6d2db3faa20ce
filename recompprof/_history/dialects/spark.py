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


def _preamble(where: Where) -> str:
    if where.endpoint:
        return (
            f"-- an S3-compatible store: spark.hadoop.fs.s3a.endpoint={where.endpoint_scheme}://"
            f"{where.endpoint}, spark.hadoop.fs.s3a.path.style.access=true\n"
        )
    if where.scheme == "s3":
        return "-- Spark outside EMR reads buckets as s3a://: give --lake s3a://...\n"
    return ""


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
