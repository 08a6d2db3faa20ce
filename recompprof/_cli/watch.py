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

from recompprof._cli import arguments
from recompprof._errors import CommandError
from recompprof._eventlog.format import LOG_GLOB

# The parser of every command reads this module's arguments: what the view needs (rich, the event models) is
# imported when watch runs.

PIPED_REPEAT = 60.0  # seconds: piped, the view is printed again this often while a compile runs
MIN_INTERVAL, MAX_INTERVAL = (
    0.1,
    86_400.0,
)  # seconds between refreshes: no busy loop, and time.sleep can take it
PIPED_WIDTH = 10_000  # piped: no line is wrapped or cut (a log is read with grep), unless --width says otherwise


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        type=arguments.path,
        metavar="RUN_DIR",
        help="the run directory the job writes (RECOMPPROF_RUN_DIR)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between refreshes (default 2)",
    )
    parser.add_argument("--once", action="store_true", help="print the current state once and exit")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep watching after every rank has ended (a restarted job writes new logs)",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=None,
        help="text width (default: the terminal's; piped, lines are not wrapped)",
    )


class _Follower:
    """The run directory's logs, read a little more at each :meth:`refresh`, folded into a ``Watch``."""

    def __init__(self, run_dir: Path) -> None:
        from recompprof._analysis.watching import Watch
        from recompprof._eventlog.tail import RunTail

        self.run_dir = run_dir
        self.tail = RunTail(run_dir)
        self.watch = Watch()
        # why there is nothing to show yet (or why the directory cannot be read now)
        self.waiting = ""

    def refresh(self) -> None:
        from recompprof._analysis.runs import RunError

        try:
            self._poll()
        except FileNotFoundError:
            self.waiting = f"waiting for {self.run_dir} to be created"
        except NotADirectoryError as exc:
            raise RunError(
                f"{self.run_dir}: not a directory; watch follows the run directory a job writes"
            ) from exc
        except OSError as exc:
            self.waiting = f"cannot read {self.run_dir} ({exc.strerror or exc}); trying again"
        else:
            self.waiting = (
                ""
                if self.watch.ranks
                else f"waiting for the first events of {self.tail.logs} log(s)"
                if self.tail.logs
                else f"waiting for event logs ({LOG_GLOB}) in {self.run_dir}"
            )

    def _poll(self) -> None:
        from recompprof._analysis.watching import Watch
        from recompprof._eventlog.tail import RunTail

        restarts = self.tail.restarts
        for log, event in self.tail.poll():
            self.watch.add(log, event)
        if self.tail.restarts > restarts:
            # A log now holds other content: what the fold took from its old content is no longer the
            # run's, and a fold cannot take it back. Fold every log again, as ``--once`` would now.
            restarted, restarts = self.tail.restarted, self.tail.restarts
            self.tail, self.watch = RunTail(self.run_dir), Watch()
            for log, event in self.tail.poll():
                self.watch.add(log, event)
            self.tail.restarted.update(restarted)
            self.tail.restarts += restarts

    def finish(self) -> None:
        for log, event in self.tail.finish():
            self.watch.add(log, event)

    def view(
        self, now: float, width: int, *, height: int | None = None, interval: float | None = None
    ) -> str:
        from recompprof._analysis.render.watch import render

        return render(
            self.watch,
            self.tail,
            now,
            width,
            waiting=self.waiting,
            height=height,
            interval=interval,
        )

    def signature(self, now: float) -> tuple[object, ...]:
        from recompprof._analysis.render.watch import signature

        return signature(self.watch, self.tail, now), self.waiting


def _check_path(run_dir: Path, *, once: bool) -> None:
    """Refuse what cannot become a run directory; a directory not there yet is waited for (not with ``--once``)."""
    from recompprof._analysis.runs import RunError

    try:
        info = run_dir.stat()
    except FileNotFoundError:
        if once:
            raise RunError(f"{run_dir}: no such directory") from None
        return
    except OSError as exc:
        raise RunError(f"{run_dir}: cannot be read ({exc.strerror or exc})") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise RunError(
            f"{run_dir}: a file, not a run directory; watch follows the directory a job writes its "
            "event logs into (recompprof report reads a single log)"
        )
    if not os.access(run_dir, os.R_OK | os.X_OK):
        raise RunError(f"{run_dir}: directory is not readable")


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
    from rich.text import Text

    from recompprof._analysis.render.watch import ended_line
    from recompprof._model.escaping import escape

    screen = Console(highlight=False, markup=False, emoji=False)
    reading = Text(
        escape(f"recompprof watch {follower.run_dir}: reading its event logs ...")
    )  # a large run takes seconds
    with Live(
        reading,
        console=screen,
        auto_refresh=False,
        transient=False,
        redirect_stdout=False,
        redirect_stderr=False,
        vertical_overflow="crop",
    ) as live:
        while True:
            follower.refresh()
            now = time.time()
            done = follower.watch.all_ended() and not args.follow
            width, height = _terminal_size(screen)
            screen.size = (width, height)  # so Live crops to the terminal as it is now
            text = follower.view(now, args.width or width, height=height, interval=args.interval)
            if done:
                text += ended_line(follower.watch) + "\n"
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
    from recompprof._analysis.render.watch import any_compiling, ended_line

    width = args.width or PIPED_WIDTH
    last: tuple[object, ...] | None = None
    printed = 0.0
    while True:
        follower.refresh()
        now = time.time()
        signature = follower.signature(now)
        if signature != last or (
            any_compiling(follower.watch, now) and now - printed >= PIPED_REPEAT
        ):
            sys.stdout.write(("\n" if last is not None else "") + follower.view(now, width))
            sys.stdout.flush()
            last, printed = signature, now
        if follower.watch.all_ended() and not args.follow:
            print(ended_line(follower.watch), flush=True)
            return 0
        time.sleep(args.interval)


def _once(follower: _Follower, args: argparse.Namespace) -> int:
    from recompprof._analysis.runs import RunError
    from recompprof._model.escaping import escape

    follower.refresh()
    follower.finish()
    if not follower.tail.logs:
        raise RunError(f"{args.run_dir}: no recompprof event logs ({LOG_GLOB}) found")
    if not follower.watch.ranks:
        raise RunError(f"{args.run_dir}: no events in its {follower.tail.logs} event log(s)")
    for path, why in follower.tail.unreadable.items():
        print(escape(f"recompprof: warning: cannot read {path}: {why}"), file=sys.stderr)
    if follower.tail.stats.skipped:
        print(
            escape(f"recompprof: warning: {args.run_dir}: {follower.tail.stats.describe()}"),
            file=sys.stderr,
        )
    sys.stdout.write(follower.view(time.time(), args.width or PIPED_WIDTH))
    return 0


def main(args: argparse.Namespace) -> int:
    if (
        not MIN_INTERVAL <= args.interval <= MAX_INTERVAL
    ):  # NaN and infinities too (time.sleep(inf) overflows)
        raise CommandError(
            f"--interval must be a number of seconds from {MIN_INTERVAL} to {MAX_INTERVAL:.0f} "
            f"(got {args.interval})"
        )
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
