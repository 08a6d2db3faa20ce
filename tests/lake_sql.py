"""A lake's tables as plain DuckDB views over its files, for tests that check what was written.

Deliberately not the CLI's views (``recompprof._history.views``): a test of the writer reads the
files themselves, so a reader's rule cannot hide a row that was lost or written twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from recompprof._history.layout import Lake
from recompprof._history.tables import TABLES


def sql(lake: Path, query: str) -> list[tuple[Any, ...]]:
    """``query`` over every table the lake holds files of, each a view of ``v1/<table>/*/*.parquet``."""
    con = duckdb.connect()
    for table in TABLES:
        if Lake(str(lake)).files(table):
            con.execute(
                f"CREATE VIEW {table} AS SELECT * FROM read_parquet("
                f"'{lake}/v1/{table}/*/*.parquet', hive_partitioning=true)"
            )
    return con.execute(query).fetchall()
