"""DuckDB as the questions load it: its engine alone (docs/history.md, "Speed").

The ``duckdb`` package is the engine (the ``_duckdb`` extension) plus a Python layer (relations,
expressions, types, ``importlib.metadata`` for its version) that the questions never use: importing the
package costs a question about 0.1 s of CPU, the engine alone a fifth of that. The connection, the
exceptions and ``connect`` are the engine's own, so both read alike; a DuckDB that does not ship the
engine as its own module is loaded whole.
"""

from __future__ import annotations

from types import ModuleType


def load() -> ModuleType:
    """The module holding DuckDB's ``connect`` and exceptions; ImportError when DuckDB is missing."""
    try:
        import _duckdb
    except ImportError:
        import duckdb

        return duckdb
    return _duckdb
