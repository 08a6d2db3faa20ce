"""The view ``recompprof watch`` shows: plain text of a :class:`~recompprof._analysis.watching.Watch` at one moment.

One row per rank (what it does now, the step of its last event, its counts), a totals line, the causes
of the most steady-state recompiles. Names from the logs are escaped (``plaintext``): the CLI draws this
text on a terminal as it is.
"""

from __future__ import annotations

import time
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from recompprof._analysis.render.plaintext import Wrapped, console
from recompprof._analysis.render.wording import cause_label, first_of
from recompprof._analysis.watching import RankState, Watch
from recompprof._eventlog.tail import RunTail
from recompprof._model.events import HEARTBEAT_SECONDS
from recompprof._model.status import describe, describe_unseen_backward

CAUSES_SHOWN = 5
# A compile writes a compile_running every HEARTBEAT_SECONDS: this long without one, its process may be gone.
SILENT_SECONDS = 3 * HEARTBEAT_SECONDS
COLUMNS = (
    "rank",
    "step",
    "compiles",
    "recompiles",
    "steady\nstate",
    "limit\nhits",
    "last\nevent",
    "now",
)


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


def _clock(when: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(when))


def _doing(rank: RankState, now: float) -> str:
    """The "now" cell: the live status line while a compile runs (the one ``recompprof run`` draws)."""
    state = rank.now(now)
    if state.state == "compiling" and state.compiling is not None:
        silent = now - rank.last_time
        if silent < SILENT_SECONDS:
            return describe(rank.rank, state.compiling)
        return (
            f"{describe(rank.rank, state.compiling)}; nothing from it for {silent:.0f} s "
            f"(a running compile says so every {HEARTBEAT_SECONDS:g} s): its process may be gone"
        )
    if state.state == "idle":
        return describe_unseen_backward(rank.rank) if state.backward_unknown else "idle"
    ended = f"ended {_clock(state.ended_at or 0.0)} UTC"
    if state.compiling is not None:  # session_end names the compile it interrupted
        return f"{ended} while {describe(rank.rank, state.compiling).removeprefix(f'rank {rank.rank} ')}"
    return ended


def _row(rank: RankState, now: float) -> tuple[str, ...]:
    counts = rank.counts
    return (
        str(rank.rank),
        "-" if rank.last_step is None else str(rank.last_step),
        str(counts.compiles),
        str(counts.recompiles),
        str(counts.steady_state_recompiles),
        str(rank.limit_hits),
        _ago(now - rank.last_time),
        _doing(rank, now),
    )


def _shown(ranks: list[RankState], now: float, room: int) -> list[RankState]:
    """At most ``room`` ranks, those compiling first, in rank order."""
    if len(ranks) <= room:
        return ranks
    busy = [r for r in ranks if r.now(now).state == "compiling"]
    rest = [r for r in ranks if r.now(now).state != "compiling"]
    return sorted((busy + rest)[: max(room, 1)], key=lambda r: r.rank)


def _summary(watch: Watch, now: float) -> str:
    total = watch.totals()
    compiling = [
        str(r.rank)
        for r in sorted(watch.ranks.values(), key=lambda r: r.rank)
        if r.now(now).state == "compiling"
    ]
    ended = sum(1 for r in watch.ranks.values() if r.session.ended is not None)
    return (
        f"total: compiles {total.compiles} | recompiles {total.recompiles} | steady-state "
        f"{total.steady_state_recompiles} | limit hits {sum(total.limit_hits.values())} | compiling now: "
        f"{'rank' + ('s ' if len(compiling) > 1 else ' ') + ', '.join(compiling) if compiling else 'none'} | "
        f"ended {ended} of {len(watch.ranks)}"
    )


def _header(watch: Watch, tail: RunTail, run_dir: str, now: float, interval: float | None) -> str:
    world = f" of {watch.world_size}" if watch.world_size > len(watch.ranks) else ""
    runs = ", ".join(watch.run_ids) or "?"
    every = f" (every {interval:g} s)" if interval else ""
    return (
        f"recompprof watch {run_dir} | run {runs} | ranks {len(watch.ranks)}{world} | "
        f"logs {tail.logs} | {_clock(now)} UTC{every}"
    )


def render(
    watch: Watch,
    tail: RunTail,
    now: float,
    width: int,
    *,
    waiting: str = "",
    height: int | None = None,
    interval: float | None = None,
) -> str:
    """The view as plain text of ``width`` columns (names from the logs escaped); ``waiting``: why there is nothing
    to show yet; ``height``: the rows to fit into (a terminal), else every rank is shown."""
    out, buffer = console(width)
    out.print(_header(watch, tail, str(tail.run_dir), now, interval))
    notes = [waiting] if waiting else []
    notes += [f"cannot read {path.name}: {why}" for path, why in list(tail.unreadable.items())[:3]]
    notes += [f"{path.name} {why}" for path, why in list(tail.restarted.items())[:3]]
    if tail.stats.skipped:
        notes.append(tail.stats.describe())
    for note in notes:
        out.print(note)
    ranks = sorted(watch.ranks.values(), key=lambda r: r.rank)
    if ranks:
        out.print(
            _summary(watch, now)
        )  # above the table: a terminal too short for every row still shows it
        # Rows that fit under the header, notes, summary and the table's head (a compiling row may wrap once).
        busy = sum(1 for r in ranks if r.now(now).state == "compiling")
        room = len(ranks) if height is None else max(1, height - 7 - len(notes) - busy)
        shown = _shown(ranks, now, room)
        if len(shown) < len(ranks):
            hidden = [r for r in ranks if r.rank not in {s.rank for s in shown}]
            busy = sum(1 for r in hidden if r.now(now).state == "compiling")
            out.print(f"({len(hidden)} more rank(s) not shown, {busy} of them compiling)")
        out.print(_table([_row(r, now) for r in shown], expand=height is not None))
        room = (
            CAUSES_SHOWN
            if height is None
            else min(CAUSES_SHOWN, height - 9 - len(notes) - len(shown))
        )
        _print_causes(out, watch, room, width)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def _table(rows: list[tuple[str, ...]], *, expand: bool) -> Table:
    """The ranks' table: counts never wrap; the "now" column takes the rest, wrapped between words."""
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, expand=expand)
    for column in COLUMNS[:-1]:
        grid.add_column(
            Text(column), justify="left" if column == "last\nevent" else "right", no_wrap=True
        )
    grid.add_column(COLUMNS[-1], overflow="fold", ratio=1)
    for row in rows:
        grid.add_row(*row[:-1], Wrapped(row[-1]))
    return grid


def _print_causes(out: Any, watch: Watch, room: int, width: int) -> None:
    causes = watch.top_causes(room) if room > 0 else []
    if not causes:
        return
    out.line()
    out.print("steady-state recompiles by cause:")
    for cause in causes:
        ranks = sorted(cause.ranks)
        where = (
            f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {first_of(ranks, 8, more=' ...')}"
        )
        what = (
            cause_label(cause.category, cause.subject, cause.frame, parameter=cause.parameter)
            if cause.subject
            else cause.frame
        )
        line = f"{cause.recompiles:>5}  {what} ({where})" + (
            f": {cause.example}" if cause.example else ""
        )
        out.print(line if len(line) <= width else line[: width - 3] + "...")


def signature(watch: Watch, tail: RunTail, now: float) -> tuple[object, ...]:
    """What the view shows but the ages: a piped watch prints a new block when it changes."""
    ranks = tuple(
        (
            r.rank,
            r.now(now).state,
            _running_id(r, now),
            r.counts.compiles,
            r.counts.recompiles,
            r.counts.steady_state_recompiles,
            r.limit_hits,
            r.last_step,
            r.sessions,
        )
        for r in sorted(watch.ranks.values(), key=lambda r: r.rank)
    )
    return ranks, tail.logs, tuple(tail.unreadable.items()), tail.stats.skipped, tail.restarts


def _running_id(rank: RankState, now: float) -> str | None:
    compiling = rank.now(now).compiling
    return None if compiling is None else compiling.compile_id


def any_compiling(watch: Watch, now: float) -> bool:
    return any(r.now(now).state == "compiling" for r in watch.ranks.values())


def ended_line(watch: Watch) -> str:
    """The line a watch that stops by itself ends with."""
    return (
        f"all {len(watch.ranks)} rank(s) ended (every log has its session_end); watch stops "
        "(--follow keeps watching)"
    )
