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


def scans_python_objects() -> None:
    """Make the engine able to scan Python objects (an object store's Arrow datasets, registered by
    name): the package's Python layer sets up what the engine looks for when it meets one, so it is
    imported, once, by a command that registers them. A local lake never needs it."""
    import duckdb  # noqa: F401 - imported for its side effect on the engine
