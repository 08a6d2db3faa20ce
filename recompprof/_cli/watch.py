"""``recompprof watch RUN_DIR``: follow a running job's event logs, every rank's, and show what each rank is doing now.

One row per rank: what it is doing (compiling which frame, why and for how long; idle; ended), the step
of its last event, its compiles, recompiles, steady-state recompiles and recompile-limit hits; a totals
line; the causes of the most steady-state recompiles. On a terminal the view is redrawn in place every
``--interval`` seconds (Ctrl-C leaves it); piped, a plain-text block is printed when something changed, and
every minute while a compile runs. It stops by itself once every rank's log has its ``session_end``
(``--follow`` keeps watching, for restarts); ``--once`` prints the view once and exits.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from recompprof._analysis.plaintext import Wrapped, console, escape
from recompprof._analysis.runs import RunError
from recompprof._analysis.watching import RankState, Watch
from recompprof._errors import CommandError
from recompprof._eventlog.format import LOG_GLOB
from recompprof._eventlog.tail import RunTail
from recompprof._model.status import describe

PIPED_REPEAT = 60.0  # seconds: piped, the view is printed again this often while a compile runs
CAUSES_SHOWN = 5
PIPED_WIDTH = 10_000  # piped: no line is wrapped or cut (a log is read with grep), unless --width says otherwise
COLUMNS = ("rank", "step", "compiles", "recompiles", "steady\nstate", "limit\nhits", "last\nevent", "now")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory the job writes (RECOMPPROF_RUN_DIR)")
    parser.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between refreshes (default 2)")
    parser.add_argument("--once", action="store_true", help="print the current state once and exit")
    parser.add_argument("--follow", action="store_true",
                        help="keep watching after every rank has ended (a restarted job writes new logs)")
    parser.add_argument("--width", type=int, default=None,
                        help="text width (default: the terminal's; piped, lines are not wrapped)")


class _Follower:
    """The run directory's logs, read a little more at each :meth:`refresh`, folded into :class:`Watch`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.tail = RunTail(run_dir)
        self.watch = Watch()
        self.waiting = ""  # why there is nothing to show yet (or why the directory cannot be read now)

    def refresh(self) -> None:
        try:
            for log, event in self.tail.poll():
                self.watch.add(log, event)
        except FileNotFoundError:
            self.waiting = f"waiting for {self.run_dir} to be created"
        except NotADirectoryError as exc:
            raise RunError(f"{self.run_dir}: not a directory; watch follows the run directory a job writes") from exc
        except OSError as exc:
            self.waiting = f"cannot read {self.run_dir} ({exc.strerror or exc}); trying again"
        else:
            self.waiting = ("" if self.watch.ranks else f"waiting for the first events of {self.tail.logs} log(s)"
                            if self.tail.logs else f"waiting for event logs ({LOG_GLOB}) in {self.run_dir}")

    def finish(self) -> None:
        for log, event in self.tail.finish():
            self.watch.add(log, event)


def _check_path(run_dir: Path, *, once: bool) -> None:
    """Refuse what cannot become a run directory; a directory not there yet is waited for (not with ``--once``)."""
    try:
        info = run_dir.stat()
    except FileNotFoundError:
        if once:
            raise RunError(f"{run_dir}: no such directory") from None
        return
    except OSError as exc:
        raise RunError(f"{run_dir}: cannot be read ({exc.strerror or exc})") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise RunError(f"{run_dir}: a file, not a run directory; watch follows the directory a job writes its "
                       "event logs into (recompprof report reads a single log)")
    if not os.access(run_dir, os.R_OK | os.X_OK):
        raise RunError(f"{run_dir}: directory is not readable")


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
        return describe(rank.rank, state.compiling)
    if state.state == "idle":
        return "idle"
    ended = f"ended {_clock(state.ended_at or 0.0)} UTC"
    if state.compiling is not None:  # session_end names the compile it interrupted
        return f"{ended} while {describe(rank.rank, state.compiling).removeprefix(f'rank {rank.rank} ')}"
    return ended


def _row(rank: RankState, now: float) -> tuple[str, ...]:
    counts = rank.counts
    return (str(rank.rank), "-" if rank.last_step is None else str(rank.last_step), str(counts.compiles),
            str(counts.recompiles), str(counts.steady_state_recompiles), str(rank.limit_hits),
            _ago(now - rank.last_time), _doing(rank, now))


def _shown(ranks: list[RankState], now: float, room: int) -> list[RankState]:
    """At most ``room`` ranks, those compiling first, in rank order."""
    if len(ranks) <= room:
        return ranks
    busy = [r for r in ranks if r.now(now).state == "compiling"]
    rest = [r for r in ranks if r.now(now).state != "compiling"]
    return sorted((busy + rest)[:max(room, 1)], key=lambda r: r.rank)


def _summary(watch: Watch, now: float) -> str:
    total = watch.totals()
    compiling = [str(r.rank) for r in sorted(watch.ranks.values(), key=lambda r: r.rank) if r.now(now).state == "compiling"]
    ended = sum(1 for r in watch.ranks.values() if r.session.ended is not None)
    return (f"total: compiles {total.compiles} | recompiles {total.recompiles} | steady-state "
            f"{total.steady_state_recompiles} | limit hits {sum(total.limit_hits.values())} | compiling now: "
            f"{'rank' + ('s ' if len(compiling) > 1 else ' ') + ', '.join(compiling) if compiling else 'none'} | "
            f"ended {ended} of {len(watch.ranks)}")


def _header(follower: _Follower, now: float, interval: float | None) -> str:
    watch = follower.watch
    world = f" of {watch.world_size}" if watch.world_size > len(watch.ranks) else ""
    runs = ", ".join(watch.run_ids) or "?"
    every = f" (every {interval:g} s)" if interval else ""
    return (f"recompprof watch {follower.run_dir} | run {runs} | ranks {len(watch.ranks)}{world} | "
            f"logs {follower.tail.logs} | {_clock(now)} UTC{every}")


def render(follower: _Follower, now: float, width: int, *, height: int | None = None, interval: float | None = None) -> str:
    """The view as plain text of ``width`` columns (names from the logs escaped); ``height``: rows to fit into."""
    out, buffer = console(width)
    watch = follower.watch
    out.print(_header(follower, now, interval))
    notes = [follower.waiting] if follower.waiting else []
    notes += [f"cannot read {path.name}: {why}" for path, why in list(follower.tail.unreadable.items())[:3]]
    if follower.tail.stats.skipped:
        notes.append(follower.tail.stats.describe())
    for note in notes:
        out.print(note)
    ranks = sorted(watch.ranks.values(), key=lambda r: r.rank)
    if ranks:
        out.print(_summary(watch, now))  # above the table: a terminal too short for every row still shows it
        # Rows that fit under the header, notes, summary and the table's head (a compiling row may wrap once).
        busy = sum(1 for r in ranks if r.now(now).state == "compiling")
        room = len(ranks) if height is None else max(1, height - 7 - len(notes) - busy)
        shown = _shown(ranks, now, room)
        if len(shown) < len(ranks):
            hidden = [r for r in ranks if r.rank not in {s.rank for s in shown}]
            busy = sum(1 for r in hidden if r.now(now).state == "compiling")
            out.print(f"({len(hidden)} more rank(s) not shown, {busy} of them compiling)")
        out.print(_table([_row(r, now) for r in shown], expand=height is not None))
        room = CAUSES_SHOWN if height is None else min(CAUSES_SHOWN, height - 9 - len(notes) - len(shown))
        _print_causes(out, watch, room, width)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def _table(rows: list[tuple[str, ...]], *, expand: bool) -> Table:
    """The ranks' table: counts never wrap; the "now" column takes the rest, wrapped between words."""
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, expand=expand)
    for column in COLUMNS[:-1]:
        grid.add_column(Text(column), justify="left" if column == "last\nevent" else "right", no_wrap=True)
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
        where = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks[:8]))}" + (" ..." if len(ranks) > 8 else "")
        what = f"{cause.frame} · {cause.category} · {cause.subject}" if cause.subject else cause.frame
        line = f"{cause.recompiles:>5}  {what} ({where})" + (f": {cause.example}" if cause.example else "")
        out.print(line if len(line) <= width else line[:width - 3] + "...")


def _signature(follower: _Follower, now: float) -> tuple[object, ...]:
    """What the piped view prints a new block for: anything but the ages changing."""
    ranks = tuple((r.rank, r.now(now).state, _running_id(r, now), r.counts.compiles, r.counts.recompiles,
                   r.counts.steady_state_recompiles, r.limit_hits, r.last_step, r.sessions)
                  for r in sorted(follower.watch.ranks.values(), key=lambda r: r.rank))
    tail = follower.tail
    return ranks, follower.waiting, tail.logs, tuple(tail.unreadable.items()), tail.stats.skipped


def _running_id(rank: RankState, now: float) -> str | None:
    compiling = rank.now(now).compiling
    return None if compiling is None else compiling.compile_id


def _any_compiling(follower: _Follower, now: float) -> bool:
    return any(r.now(now).state == "compiling" for r in follower.watch.ranks.values())


def _ended_line(follower: _Follower) -> str:
    return (f"all {len(follower.watch.ranks)} rank(s) ended (every log has its session_end); watch stops "
            "(--follow keeps watching)")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM leaves like Ctrl-C, through the ``finally`` that restores the terminal."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _live(follower: _Follower, args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    screen = Console(highlight=False, markup=False, emoji=False)
    reading = Text(escape(f"recompprof watch {follower.run_dir}: reading its event logs ..."))  # a large run takes seconds
    with Live(reading, console=screen, auto_refresh=False, transient=False, redirect_stdout=False,
              redirect_stderr=False, vertical_overflow="crop") as live:
        while True:
            follower.refresh()
            now = time.time()
            done = follower.watch.all_ended() and not args.follow
            width, height = _terminal_size(screen)
            screen.size = (width, height)  # so Live crops to the terminal as it is now
            text = render(follower, now, args.width or width, height=height, interval=args.interval)
            if done:
                text += _ended_line(follower) + "\n"
            live.update(Text(text.rstrip("\n"), no_wrap=True, overflow="crop"), refresh=True)
            if done:
                return 0
            time.sleep(args.interval)


def _terminal_size(screen: Any) -> tuple[int, int]:
    """The terminal's size now (it may have been resized): asked of the terminal itself, since a $COLUMNS
    exported by a shell goes stale when the window changes."""
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):
        return screen.width, screen.height
    return max(size.columns, 40), max(size.lines, 10)


def _piped(follower: _Follower, args: argparse.Namespace) -> int:
    width = args.width or PIPED_WIDTH
    last: tuple[object, ...] | None = None
    printed = 0.0
    while True:
        follower.refresh()
        now = time.time()
        signature = _signature(follower, now)
        if signature != last or (_any_compiling(follower, now) and now - printed >= PIPED_REPEAT):
            sys.stdout.write(("\n" if last is not None else "") + render(follower, now, width))
            sys.stdout.flush()
            last, printed = signature, now
        if follower.watch.all_ended() and not args.follow:
            print(_ended_line(follower), flush=True)
            return 0
        time.sleep(args.interval)


def _once(follower: _Follower, args: argparse.Namespace) -> int:
    follower.refresh()
    follower.finish()
    if not follower.tail.logs:
        raise RunError(f"{args.run_dir}: no recompprof event logs ({LOG_GLOB}) found")
    if not follower.watch.ranks:
        raise RunError(f"{args.run_dir}: no events in its {follower.tail.logs} event log(s)")
    for path, why in follower.tail.unreadable.items():
        print(escape(f"recompprof: warning: cannot read {path}: {why}"), file=sys.stderr)
    if follower.tail.stats.skipped:
        print(escape(f"recompprof: warning: {args.run_dir}: {follower.tail.stats.describe()}"), file=sys.stderr)
    sys.stdout.write(render(follower, time.time(), args.width or PIPED_WIDTH))
    return 0


def main(args: argparse.Namespace) -> int:
    if not args.interval > 0:
        raise CommandError("--interval must be a positive number of seconds")
    if args.width is not None and args.width < 40:
        raise CommandError("--width must be at least 40")
    _check_path(args.run_dir, once=args.once)
    follower = _Follower(args.run_dir)
    if args.once:
        return _once(follower, args)
    try:
        with _sigterm_as_interrupt():
            return _live(follower, args) if sys.stdout.isatty() else _piped(follower, args)
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how a watch ends
