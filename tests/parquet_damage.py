"""Damage a lake's Parquet file the way a bad disk or a torn copy would, for the tests that check it
is found: one byte flipped inside a column's pages, the footer left intact."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq


def flip_a_value(path: Path, column: str) -> None:
    """Flip one byte inside ``column``'s values in the file's first row group: the footer stays good,
    and without a page checksum the page still decodes (to a wrong value)."""
    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(
        meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column
    )
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + chunk.total_compressed_size - 3] ^= 0xFF
    path.write_bytes(bytes(data))
