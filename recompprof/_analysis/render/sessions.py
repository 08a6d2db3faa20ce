"""The words for what a run's logs cannot vouch for: a log gap's detail, and the compile each rank's
session ended with (:class:`recompprof._analysis.report.sessions.Sessions`)."""

from __future__ import annotations

from recompprof._analysis.report.sessions import LogGap, Sessions
from recompprof._model.status import describe_at_end

_LISTED_RANKS = 16  # ranks named in a line; more are counted

# session_end totals -> what they count, as the report says it.
_COUNTS = (
    ("compiles", "compile(s)"),
    ("recompiles", "recompile(s)"),
    ("graph_breaks", "graph break(s)"),
    ("recompile_limit_hits", "recompile-limit hit(s)"),
)


def gap_detail(gap: LogGap) -> str:
    """What the latest gapped session's ``session_end`` counts beyond its log, said in words."""
    parts = [
        f"{_number(value)} {dict(_COUNTS)[key]}, the log holds {logged}"
        for key, value, logged in gap.missing
    ]
    said = ["session_end counts " + "; ".join(parts)] if parts else []
    if gap.writer_dropped:
        said.append(f"the writer could not write {gap.writer_dropped} event(s)")
    return "; ".join(said)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def running_at_end(sessions: Sessions) -> list[str]:
    """One line per rank whose run ended with a compile running, naming the ranks that were not:
    ``rank 1 was compiling `Model.forward` (recompile: ...) for 612 s when the run ended; rank 0 was
    not compiling``."""
    idle = sessions.not_compiling_at_end
    others = f"; {_ranks(idle)} {'was' if len(idle) == 1 else 'were'} not compiling" if idle else ""
    return [
        describe_at_end(rank, end.running, lower_bound=end.lower_bound) + others
        for rank, end in sessions.compiling_at_end.items()
    ]


def _ranks(ranks: list[int]) -> str:
    """``rank 0`` / ``ranks 0, 2, 3`` (the first few of many, and how many more)."""
    shown = ", ".join(map(str, ranks[:_LISTED_RANKS]))
    more = f" (+{len(ranks) - _LISTED_RANKS} more)" if len(ranks) > _LISTED_RANKS else ""
    return ("rank " if len(ranks) == 1 else "ranks ") + shown + more
