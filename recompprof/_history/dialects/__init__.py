"""The engines a lake's questions and views are written for: one module per engine, one family.

A question is one SQL text (:mod:`recompprof._history.questions`) and the views one rule
(:mod:`recompprof._history.views`); what has no common spelling is a :class:`Dialect`'s, and each
engine's is in a module of its own (``duckdb``, ``spark``, ``trino``, ``clickhouse``): the macros
``PCTL(x, p)`` (a percentile), ``WEEK(d)`` (the Monday of ``d``'s week) and ``SIZE(list)``, string and
date literals, each kind of column's type, and how a view reads a table's files. Adding an engine is
adding a module here and naming it in :data:`DIALECTS`.

Where the lake is comes from its URI alone (:class:`Where`): printing an engine's texts opens nothing,
so it needs no credentials.
"""

from __future__ import annotations

from recompprof._history.dialects import clickhouse, duckdb, spark, trino
from recompprof._history.dialects.base import Dialect

__all__ = ["DIALECTS", "DUCKDB", "ENGINES"]

DIALECTS: dict[str, Dialect] = {
    m.DIALECT.name: m.DIALECT for m in (duckdb, spark, trino, clickhouse)
}
ENGINES = tuple(DIALECTS)
DUCKDB = DIALECTS["duckdb"]
