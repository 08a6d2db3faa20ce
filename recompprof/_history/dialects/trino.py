"""Trino, through its Hive connector (a metastore is needed even for plain files)."""

from __future__ import annotations

from recompprof._history.dialects.base import Dialect, Where, literal


def _source(
    where: Where, table: str, suffix: str, under: str, columns: list[tuple[str, str]]
) -> tuple[str, str]:
    declared = DIALECT.declared([*columns, ("dt", "date")], sep=",\n  ")
    name = f"hive.recompprof.{table}_{suffix}"
    setup = (
        f"CREATE TABLE IF NOT EXISTS {name} (\n  {declared}\n) WITH "
        f"(external_location = {literal(where.uri(under))}, format = 'PARQUET', "
        "partitioned_by = ARRAY['dt']);\n"
        f"CALL hive.system.sync_partition_metadata('recompprof', '{table}_{suffix}', 'FULL');\n"
    )
    return setup, name


def _preamble(where: Where) -> str:
    return (
        "-- Hive connector (catalog `hive`, e.g. hive.metastore=file); schema `recompprof`;\n"
        "-- the lake's times are microseconds (UTC): hive.timestamp-precision=MICROSECONDS in the\n"
        "-- catalog, or the connector's default MILLISECONDS rounds them\n"
        "CREATE SCHEMA IF NOT EXISTS hive.recompprof;\n"
    )


DIALECT = Dialect(
    "trino",
    percentile="approx_percentile({x}, {p})",
    week="CAST(date_trunc('week', {d}) AS DATE)",
    size="cardinality({x})",
    types={
        "string": "varchar",
        "int32": "integer",
        "int64": "bigint",
        "double": "double",
        "bool": "boolean",
        # The Hive connector's tables take no time zone; the values are UTC instants (Parquet's
        # isAdjustedToUTC), read at the precision stated here when the catalog allows it.
        "timestamp": "timestamp(6)",
        "list": "array(varchar)",
        "map": "map(varchar, varchar)",
        "date": "date",
    },
    source=_source,
    view="CREATE OR REPLACE VIEW hive.recompprof.{table} AS\n{body};\n",
    preamble=_preamble,
)
