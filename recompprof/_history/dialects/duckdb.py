"""DuckDB, embedded (the CLI's engine) and printed for a notebook or another program."""

from __future__ import annotations

from recompprof._history.dialects.base import Dialect, Where, literal


def _source(
    where: Where, table: str, suffix: str, under: str, columns: list[tuple[str, str]]
) -> tuple[str, str]:
    opts = "hive_partitioning = true, union_by_name = true, hive_types = {'dt': 'DATE'}"
    files = f"read_parquet({literal(where.uri(under + '/*/*.parquet'))}, {opts})"
    # No rows, every column: UNION ALL BY NAME gives each column no file has (an older exporter's
    # lake, or its old names in a newer one) as null, where read_parquet alone has no such column.
    typed = ", ".join(f"CAST(NULL AS {DIALECT.types[of]}) AS {name}" for name, of in columns)
    return "", f"(SELECT * FROM {files} UNION ALL BY NAME SELECT {typed} WHERE false)"


def _preamble(where: Where) -> str:
    if where.local:
        return ""
    lines = ["-- object store: INSTALL httpfs; LOAD httpfs; credentials through CREATE SECRET\n"]
    if where.endpoint:  # an S3-compatible store (MinIO, Ceph, R2...): path-style URLs
        lines.append(
            f"SET s3_endpoint = {literal(where.endpoint)};\nSET s3_url_style = 'path';\n"
            f"SET s3_use_ssl = {'true' if where.endpoint_scheme == 'https' else 'false'};\n"
        )
    return "".join(lines)


DIALECT = Dialect(
    "duckdb",
    # Every percentile of a column from one list-valued aggregate: DuckDB computes the identical
    # expressions once, where separate quantile_cont calls each keep and sort the column (-25%).
    percentile="quantile_cont({x}, [{ps}])[{i}]",
    week="CAST(date_trunc('week', {d}) AS DATE)",
    size="len({x})",
    types={
        "string": "VARCHAR",
        "int32": "INTEGER",
        "int64": "BIGINT",
        "double": "DOUBLE",
        "bool": "BOOLEAN",
        "timestamp": "TIMESTAMPTZ",
        "list": "VARCHAR[]",
        "map": "MAP(VARCHAR, VARCHAR)",
        "date": "DATE",
    },
    source=_source,
    preamble=_preamble,
)
