"""The history lake's four tables as Arrow schemas: :mod:`recompprof._history.columns`' columns, each
with its Arrow type and its description in its field's metadata (docs/history.md), and how a file of
them is written.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from recompprof._history import columns as _columns
from recompprof._history.columns import (
    CACHE_COLUMNS,
    COLUMNS,
    COMPRESSION,
    DATE_COLUMN,
    EXPORT_VERSION,
    FACT_KEY,
    PHASE_COLUMNS,
    REMOTE_CACHE_COLUMNS,
    REMOTE_RESULTS,
    RENAMED,
    STATISTICS,
    TABLES,
    Column,
)

__all__ = [
    "CACHE_COLUMNS",
    "DATE_COLUMN",
    "DESCRIPTION",
    "DIMENSIONS",
    "EXPORT_VERSION",
    "FACT_KEY",
    "PHASE_COLUMNS",
    "REMOTE_CACHE_COLUMNS",
    "REMOTE_RESULTS",
    "RENAMED",
    "SCHEMAS",
    "SESSION_KEY",
    "STATISTICS",
    "TABLES",
    "TIMESTAMP",
    "legacy_fields",
    "writer_options",
]

TIMESTAMP = pa.timestamp("us", tz="UTC")
# Each kind of column as Arrow types it.
ARROW: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "double": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": TIMESTAMP,
    "list": pa.list_(pa.string()),
    "map": pa.map_(pa.string(), pa.string()),
    "date": pa.date32(),
}

# The key of a column's description in its Parquet field's metadata (what ``DESCRIBE`` and catalog
# crawlers show beside the column).
DESCRIPTION = b"description"


def _field(column: Column) -> pa.Field:
    return pa.field(
        column.name, ARROW[column.kind], metadata={DESCRIPTION: column.description.encode()}
    )


SCHEMAS: dict[str, pa.Schema] = {
    table: pa.schema([_field(c) for c in columns]) for table, columns in COLUMNS.items()
}
SESSION_KEY = [_field(c) for c in _columns.SESSION_KEY]
DIMENSIONS = [_field(c) for c in _columns.DIMENSIONS]


def legacy_fields(table: str) -> list[pa.Field]:
    """The columns of ``table`` an older exporter wrote under another name (:data:`RENAMED`), by
    their old names, each typed as its new one."""
    schema = SCHEMAS[table]
    return [pa.field(old, schema.field(new).type) for old, new in RENAMED.get(table, {}).items()]


def writer_options(schema: pa.Schema) -> dict[str, Any]:
    """How a file of ``schema`` is written (an export's, or one rewritten without some sessions):
    dictionary pages for text columns only (numbers and flags are smaller and cheaper plain),
    statistics on :data:`STATISTICS`."""
    texts = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_list(f.type)]
    return {
        "compression": COMPRESSION,
        "use_dictionary": texts,
        "write_statistics": [name for name in schema.names if name in STATISTICS],
        "write_page_checksum": True,  # history verify tells a damaged page from a good one
    }
