"""A rank session is in the lake once, whichever way it arrived (docs/history.md, "Identity").

A session arrives in a file of its run's whole export (writer ``all``), of its own export (writer
``rank00003-12345``, at its end or each closed day while it runs), or of a whole export of a folder
that holds some of the run's logs. Each data file names, in its footer (key ``recompprof.sessions``),
the run and the sessions it holds, each as (rank, pid, start in microseconds), and its writer name
ends with a digest of them (``all-s3f9a0c1e2b``): files of two jobs that share a run id (torchrun's
``none``, two trace folders named alike, a reused run directory) hold other sessions, so they never
share a name and never replace each other.

The one rule, applied by the export that writes a session (never by a reader, so every engine's
views stay plain globs): the newest export of a session holds it. Once its files are committed, every
other file of the run, on the tables and days the export covered, gives its rows of those sessions up:
a file left with none is deleted, one that holds other sessions too is rewritten without them (under
the name of the sessions it keeps). A file at the export's own name holding other sessions (a digest
collision, a file written by hand) is never replaced: the export refuses with one line. A file written
again keeps other exports' sessions, and an export of one of them may be running at that moment: the
rewritten file then yields each session its own export's file holds as fully
(:func:`_yield_to_own_exports`). Two exports of the same session at once could each take it from the
other's file: an export whose own file of a day was given up since takes nothing from that day, and
each export looks for its sessions once settled (:func:`unheld`) and exports again where they are in
no file.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from recompprof._history.layout import (
    ALL_RANKS,
    Lake,
    LakeFile,
    parse_path,
    partition,
    run_part,
)
from recompprof._history.names import LakeError
from recompprof._history.tables import writer_options

KEY = b"recompprof.sessions"
# A session: rank, pid and start (microseconds since the epoch; None for a file of an exporter before
# this one, whose footer names no sessions: its sessions are its rows' (rank, pid)).
Session = tuple[int, int, int | None]
_DIGEST = re.compile(r"^(.*)-s([0-9a-f]{10})$")
_TIME_COLUMN = {"runs": "start_time"}  # the column a row's session is told by (else "time")


def start_of(seconds: float) -> int:
    """A session's start as the footer keeps it: whole microseconds (as the timestamp columns)."""
    return round(seconds * 1e6)


def digest(sessions: Iterable[Session]) -> str:
    text = "\n".join(f"{r}:{p}:{s}" for r, p, s in sorted(sessions, key=_order))
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def writer_name(base: str, sessions: Iterable[Session]) -> str:
    """The writer part of a file name: ``base`` (``all`` or ``rank00003-12345``) and the digest."""
    return f"{base}-s{digest(sessions)}"


def base_of(writer: str) -> str:
    """``all`` or ``rank00003-12345``: the writer name without its digest (an older one has none)."""
    found = _DIGEST.match(writer)
    return found.group(1) if found else writer


def metadata(run_id: str, sessions: Iterable[Session]) -> dict[bytes, bytes]:
    listed = [list(s) for s in sorted(sessions, key=_order)]
    text = json.dumps({"run_id": run_id, "sessions": listed}, separators=(",", ":"))
    return {KEY: text.encode()}


def _order(session: Session) -> tuple[int, int, int]:
    return session[0], session[1], session[2] if session[2] is not None else -1


def same(a: Session, b: Session) -> bool:
    """One session: rank and pid agree, and the start where both know it."""
    return a[:2] == b[:2] and (a[2] is None or b[2] is None or a[2] == b[2])


def held(lake: Lake, path: str) -> tuple[set[Session], pq.ParquetFile | None]:
    """The sessions a file holds (its footer, else its rows' rank and pid) and the file, opened; an
    unreadable file holds nothing this rule may touch (the readers name it)."""
    try:
        handle = lake.fs.open_input_file(path)
        found = pq.ParquetFile(handle)
    except (OSError, pa.ArrowException, ValueError):
        return set(), None
    listed = (found.metadata.metadata or {}).get(KEY)
    if listed is not None:
        try:
            return {(r, p, s) for r, p, s in json.loads(listed)["sessions"]}, found
        except (ValueError, KeyError, TypeError):
            return set(), None
    try:
        keys = found.read(columns=["rank", "pid"])
    except (OSError, pa.ArrowException, ValueError, KeyError):
        return set(), None
    pairs = zip(keys["rank"].to_pylist(), keys["pid"].to_pylist(), strict=True)
    return {(r, p, None) for r, p in set(pairs)}, found


class Refused(LakeError):
    """A file at the export's own name holds other sessions: it is not replaced."""


def check_target(lake: Lake, path: str, run_id: str, sessions: set[Session]) -> None:
    """Refuse (one line) to replace the file at ``path`` when it holds sessions other than these."""
    try:
        if lake.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return
    except OSError:
        return  # cannot tell: the commit says whether the lake can be written
    found, _ = held(lake, path)
    if found == sessions:
        return
    raise Refused(
        f"{lake.uri}: {path} holds {len(found)} other session(s) than the {len(sessions)} of run "
        f"{run_id!r} being exported: not replaced (nothing was written; export it under another run "
        "id with RECOMPPROF_RUN_ID, or move that file away)"
    )


def settle(
    lake: Lake,
    run_id: str,
    sessions: set[Session],
    scope: Iterable[tuple[str, datetime.date]],
    written: set[str],
) -> list[str]:
    """Apply the rule for the sessions of ``run_id`` just committed in ``written``: every other file
    of the run on ``scope``'s (table, day)s gives them up. Returns the files deleted or rewritten."""
    replaced = []
    rewritten = []  # files written again here, holding other exports' sessions
    for table, day in sorted(set(scope)):
        others = _run_files(lake, table, day, run_id)
        mine = {path for path in written if _on(lake, path, table, day)}
        if mine and not mine & {other.path for other in others}:
            # Another export of these sessions gave up this day's file since it was committed: that
            # export holds them here now, and taking them from its files too would leave them nowhere.
            continue
        for other in others:
            if other.path in written:
                continue
            found, parquet = held(lake, other.path)
            if parquet is None:
                continue
            given = {t for t in found if any(same(t, s) for s in sessions)}
            if not given:
                continue
            kept = found - given
            if kept:
                again = _rewrite(lake, table, other, parquet, run_id, kept, given)
                if again is not None:
                    rewritten.append((table, day, again))
            lake.delete(other.path)
            replaced.append(other.path)
    for table, day, path in rewritten:
        replaced += _yield_to_own_exports(lake, run_id, table, day, path)
    return replaced


def unheld(
    lake: Lake, run_id: str, placed: dict[tuple[str, datetime.date], set[Session]]
) -> set[Session]:
    """The sessions an export's committed files named (``placed``: by their table and day) that no
    file of the run on that table and day names now: lost to another export of them that settled at
    the same moment (each took them from the other's file). Every export of a session asks this after
    it settles, so the last one to take a session from a file sees it gone
    (:func:`recompprof._history.export.export` exports again)."""
    lost: set[Session] = set()
    for (table, day), sessions in sorted(placed.items()):
        found: set[Session] = set()
        for other in _run_files(lake, table, day, run_id):
            found |= held(lake, other.path)[0]
        lost |= {s for s in sessions if not any(same(s, f) for f in found)}
    return lost


def _on(lake: Lake, path: str, table: str, day: datetime.date) -> bool:
    """``path`` is a file of ``table`` for ``day``."""
    return path.startswith(f"{lake.table_dir(table)}/{partition(day)}/")


# How many times a file written again yields sessions in turn (each time it holds fewer).
_YIELDS = 8


def _yield_to_own_exports(
    lake: Lake, run_id: str, table: str, day: datetime.date, path: str
) -> list[str]:
    """The file at ``path``, written again without this export's sessions, gives up each session it
    kept that its own export (a per-rank file) now holds as fully: returns the files deleted.

    Two ranks ending together export at once, each giving up its session from the run's whole-run file
    by writing that file again without it: each new file keeps the other's session, so both sessions
    were in the lake twice. The other export's own file is committed before it gives up its session
    from any file, and this check runs after the file it would find was written: whichever comes
    last sees the other's file, so no ordering leaves both. A session's copy is kept where it is
    fresher (more events in ``runs``, more rows in the other tables): a per-rank file an older export
    left, which a newer whole export is about to give up, never takes a session's newer rows."""
    done: list[str] = []
    for _ in range(_YIELDS):
        found, parquet = held(lake, path)
        mine = parse_path(path)
        if parquet is None or mine is None:
            return done
        rows = parquet.read()
        yielded: set[Session] = set()
        for other in _run_files(lake, table, day, run_id):
            if other.path == path or base_of(other.writer) == ALL_RANKS:
                continue
            theirs, handle = held(lake, other.path)
            shared = {k for k in found - yielded if any(same(k, t) for t in theirs)}
            if not shared or handle is None:
                continue
            their_rows = handle.read()
            for k in shared:
                if _freshness(their_rows, table, theirs, k) >= _freshness(rows, table, found, k):
                    yielded.add(k)
        if not yielded:
            return done
        kept = found - yielded
        again = _rewrite(lake, table, mine, parquet, run_id, kept, yielded) if kept else None
        lake.delete(path)
        done.append(path)
        if again is None:
            return done
        path = again
    return done


def _freshness(rows: pa.Table, table: str, every: set[Session], session: Session) -> int:
    """How much of ``session``'s log a file's ``rows`` hold: its ``runs`` row's events, else its rows."""
    mask = _rows_of(rows, table, every, {session})
    if table == "runs":
        events = pc.sum(rows.filter(mask)["events"]).as_py()
        return int(events or 0)
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def _run_files(lake: Lake, table: str, day: datetime.date, run_id: str) -> list[LakeFile]:
    folder = f"{lake.table_dir(table)}/{partition(day)}"
    part = run_part(run_id)
    return [f for f in lake.files(table, folder) if f.run_part == part]


def _rewrite(
    lake: Lake,
    table: str,
    other: LakeFile,
    parquet: pq.ParquetFile,
    run_id: str,
    kept: set[Session],
    given: set[Session],
) -> str | None:
    """Write ``other`` again without the rows of ``given``, named for the sessions it keeps, and return
    its path; nothing where none of its rows is theirs (a file's footer names its writer's sessions,
    also those with no row on its table and day)."""
    rows = parquet.read()
    mask = _rows_of(rows, table, kept | given, given)
    left = rows.filter(pc.invert(mask))
    if not left.num_rows:
        return None
    left = left.replace_schema_metadata({**(rows.schema.metadata or {}), **metadata(run_id, kept)})
    base = base_of(other.writer)
    path = lake.path_of(table, other.day, run_id, writer_name(base, kept))
    options = writer_options(left.schema)
    lake.write(path, lambda stream: pq.write_table(left, stream, **options))
    return path


def _rows_of(rows: pa.Table, table: str, every: set[Session], chosen: set[Session]) -> pa.Array:
    """Which rows belong to the ``chosen`` sessions: by rank and pid, and where one process held two
    sessions (attached twice), by the row's time against the later session's start."""
    mask = pa.array([False] * rows.num_rows, pa.bool_())
    ranks, pids = rows["rank"], rows["pid"]
    times = rows[_TIME_COLUMN.get(table, "time")]
    stamp = pa.timestamp("us", tz="UTC")
    for rank, pid, start in chosen:
        mine = pc.and_(pc.equal(ranks, rank), pc.equal(pids, pid))
        starts = sorted(s[2] for s in every if s[:2] == (rank, pid) and s[2] is not None)
        if start is not None and len(starts) > 1:
            at = starts.index(start)
            if at > 0:
                mine = pc.and_(mine, pc.greater_equal(times, pa.scalar(start).cast(stamp)))
            if at + 1 < len(starts):
                mine = pc.and_(mine, pc.less(times, pa.scalar(starts[at + 1]).cast(stamp)))
        mask = pc.or_(mask, pc.fill_null(mine, False))
    return mask
