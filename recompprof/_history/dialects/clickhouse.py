"""ClickHouse, reading the files in place: file() for a local lake, s3() for a bucket."""

from __future__ import annotations

from recompprof._history.dialects.base import Dialect, Where, literal


def _source(
    where: Where, table: str, suffix: str, under: str, columns: list[tuple[str, str]]
) -> tuple[str, str]:
    # The columns declared: a file lacking one reads it as null (the view's SETTINGS allow missing
    # columns), an older exporter's or the old names in a newer one's; dt comes from the path.
    declared = literal(DIALECT.declared(columns))
    if where.local:
        return "", f"file({literal(where.uri(under + '/*/*.parquet'))}, 'Parquet', {declared})"
    # s3() takes an HTTP(S) URL: the bucket's, or an S3-compatible store's (path style) as the lake's
    # URI names it (endpoint_override=).
    return "", f"s3({literal(where.http(under + '/*/*.parquet'))}, 'Parquet', {declared})"


def _preamble(where: Where) -> str:
    if where.local:
        return "-- file() reads under the server's user_files_path\n"
    return "-- s3(): credentials from the server's configuration (or add them as arguments)\n"


DIALECT = Dialect(
    "clickhouse",
    percentile="quantile({p})({x})",
    week="toMonday({d})",
    size="length({x})",
    types={
        "string": "Nullable(String)",
        "int32": "Nullable(Int32)",
        "int64": "Nullable(Int64)",
        "double": "Nullable(Float64)",
        "bool": "Nullable(Bool)",
        "timestamp": "Nullable(DateTime64(6, 'UTC'))",
        "list": "Array(String)",
        "map": "Map(String, String)",
        "date": "Date",
    },
    source=_source,
    view=(
        "CREATE OR REPLACE VIEW {table} AS\n{body}\nSETTINGS use_hive_partitioning = 1, "
        "input_format_parquet_allow_missing_columns = 1;\n"
    ),
    preamble=_preamble,
    date="toDate('{d}')",
    backslash_escapes=True,
)
