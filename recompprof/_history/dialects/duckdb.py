"""DuckDB, embedded (the CLI's engine) and printed for a notebook or another program."""

from __future__ import annotations

from recompprof._history.dialects.base import Dialect, Where, literal


def _source(where: Where, table: str, suffix: str, under: str) -> tuple[str, str]:
    opts = "hive_partitioning = true, union_by_name = true, hive_types = {'dt': 'DATE'}"
    return "", f"read_parquet({literal(where.uri(under + '/*/*.parquet'))}, {opts})"


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
