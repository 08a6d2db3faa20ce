"""A synthetic fleet written straight into a history lake, for the query tests and the benchmark.

Real lakes come from ``recompprof export`` of real runs (tests/test_history_queries.py builds those);
this generator makes the shapes real runs rarely give on one machine: a month of a fleet, a job that
regresses on a torch upgrade, frames at the recompile limit, ranks that diverge, sessions that did not
end or went dark. Rows follow the tables' schemas (recompprof/_history/tables.py); the verdict columns
are set consistently (a recompile counts as a compile, its seconds are charged to its cause).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from recompprof._history.layout import Lake
from recompprof._history.tables import SCHEMAS

CATEGORIES = ("size", "python_constant", "grad_mode", "module_attribute", "dtype", "id_match")
TEAMS = ("vision", "speech", "ranking", "llm")
MODELS = ("resnet", "whisper", "dlrm", "llama", "vit", "bert")
BASE = "2.14.1"
NEW = "2.15.0"
# The builds the fleet runs: torch_version is the build (``2.15.0+cu128``), torch_release the release.
BUILD = "+cu128"
UTC = datetime.timezone.utc


@dataclass(frozen=True)
class Fleet:
    """How big: days x runs per day x ranks, compiles and guard failures per rank session."""

    start: datetime.date = datetime.date(2026, 11, 1)
    days: int = 4
    runs_per_day: int = 6
    ranks: int = 2
    compiles_per_session: int = 12
    reasons_per_recompile: int = 2
    recompile_share: float = 0.2  # of the compiles after each frame's first
    jobs: int = 6
    upgrade_day: int = 2  # from this day on, runs use torch NEW
    # This job recompiles 4x as often on NEW (at most 95% of its later compiles): the regression that
    # `history regressions` must find, at any recompile_share below 0.79.
    regressing_job: int = 1
    seed: int = 7


def _timestamps(day: datetime.date, seconds: np.ndarray) -> pa.Array:
    base = int(datetime.datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1e6)
    return pa.array(base + (seconds * 1e6).astype(np.int64), pa.timestamp("us", tz="UTC"))


def _table(name: str, columns: dict[str, pa.Array | np.ndarray | list[object]]) -> pa.Table:
    schema = SCHEMAS[name]
    n = len(next(iter(columns.values())))
    arrays = []
    for f in schema:
        value = columns.get(f.name)
        arrays.append(pa.nulls(n, f.type) if value is None else pa.array(value, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _day(fleet: Fleet, d: int, rng: np.random.Generator) -> dict[str, pa.Table]:
    day = fleet.start + datetime.timedelta(days=d)
    version = NEW if d >= fleet.upgrade_day else BASE
    sessions = fleet.runs_per_day * fleet.ranks
    run_idx = np.repeat(np.arange(fleet.runs_per_day), fleet.ranks)
    rank = np.tile(np.arange(fleet.ranks), fleet.runs_per_day).astype(np.int32)
    job = (run_idx + d) % fleet.jobs
    run_id = np.array([f"run-{d:03d}-{r:04d}" for r in range(fleet.runs_per_day)])[run_idx]
    job_name = np.array([f"job{j}" for j in range(fleet.jobs)])[job]
    team = np.array([TEAMS[j % len(TEAMS)] for j in range(fleet.jobs)])[job]
    model = np.array([MODELS[j % len(MODELS)] for j in range(fleet.jobs)])[job]
    start_s = run_idx * (80000.0 / fleet.runs_per_day) + rank * 0.5
    pid = (1000 + rank).astype(np.int32)

    # compiles: each session compiles its frames; a share are recompiles charged to a cause
    per = fleet.compiles_per_session
    s_of = np.repeat(np.arange(sessions), per)
    n = len(s_of)
    k = np.tile(np.arange(per), sessions)
    frames = 6
    frame = k % frames
    backward = (k % 4) == 3
    regressed = min(0.95, 4 * fleet.recompile_share)
    p_recompile = np.where(
        (job[s_of] == fleet.regressing_job) & (version == NEW), regressed, fleet.recompile_share
    ) * (k >= frames)
    is_recompile = (rng.random(n) < p_recompile) & ~backward
    # divergence: odd ranks of even jobs never recompile frame 0
    is_recompile &= ~((rank[s_of] % 2 == 1) & (job[s_of] % 2 == 0) & (frame == 0))
    limit_hit = is_recompile & (frame == 4) & (rng.random(n) < 0.3)
    outcome = np.where(limit_hit, "limit_hit", "ok")
    duration = np.round(rng.gamma(2.0, 0.4, n), 6)
    counts_as_compile = ~limit_hit & ~backward
    counts_as_recompile = is_recompile & ~limit_hit
    category = np.array(CATEGORIES)[(frame + job[s_of]) % len(CATEGORIES)]
    cause = np.where(is_recompile & ~limit_hit, category, None)
    steady = is_recompile & (k >= frames + 2)
    compile_seconds = np.where(limit_hit, 0.0, duration)
    t = start_s[s_of] + k * 3.0
    frame_names = np.array([f"Block{f}.forward" for f in range(frames)])[frame]
    frame_keys = np.array([f"model.py:{10 * f + 1}#Block{f}" for f in range(frames)])[frame]
    compiles = _table(
        "compiles",
        {
            "run_id": run_id[s_of],
            "rank": rank[s_of],
            "pid": pid[s_of],
            "torch_version": np.full(n, version + BUILD),
            "torch_release": np.full(n, version),
            "job": job_name[s_of],
            "team": team[s_of],
            "model": model[s_of],
            "time": _timestamps(day, t),
            "start_time": _timestamps(day, t - duration),
            "step": (k * 10).astype(np.int64),
            "compile_id": [f"{f}/{c}" for f, c in zip(frame, k // frames)],
            "backward": backward,
            "frame_key": frame_keys,
            "frame_name": frame_names,
            "is_recompile": is_recompile,
            "outcome": outcome,
            "counts_as_compile": counts_as_compile,
            "counts_as_recompile": counts_as_recompile,
            "steady_state_recompile": counts_as_recompile & steady,
            "compile_s": compile_seconds,
            "duration_s": duration,
            "cause_category": cause,
            "cause_subject": np.where(cause != None, "L['x']", None),  # noqa: E711 - elementwise
            "steady_state": steady,
        },
    )
    # guard failures: reasons_per_recompile rows per recompile; the first explains the change
    rec = np.flatnonzero(is_recompile)
    g_of = np.repeat(rec, fleet.reasons_per_recompile)
    pos = np.tile(np.arange(fleet.reasons_per_recompile), len(rec)).astype(np.int32)
    g_cat = np.where(pos == 0, category[g_of], np.array(CATEGORIES)[(pos + 3) % len(CATEGORIES)])
    guard_failures = _table(
        "guard_failures",
        {
            "run_id": run_id[s_of][g_of],
            "rank": rank[s_of][g_of],
            "pid": pid[s_of][g_of],
            "torch_version": np.full(len(g_of), version + BUILD),
            "torch_release": np.full(len(g_of), version),
            "job": job_name[s_of][g_of],
            "team": team[s_of][g_of],
            "model": model[s_of][g_of],
            "time": _timestamps(day, t[g_of] - duration[g_of]),
            "step": (k[g_of] * 10).astype(np.int64),
            "frame_key": frame_keys[g_of],
            "frame_name": frame_names[g_of],
            "position": pos,
            "category": g_cat,
            "subject": np.full(len(g_of), "L['x']"),
            "explains_change": pos == 0,
            "counts_as_change": pos == 0,
            "steady_state": steady[g_of],
            "text": np.full(len(g_of), "tensor 'x' size mismatch at index 0. expected 4, actual 6"),
            "count": np.ones(len(g_of), np.int32),
        },
    )
    # graph breaks: one per session on frame 2
    graph_breaks = _table(
        "graph_breaks",
        {
            "run_id": run_id,
            "rank": rank,
            "pid": pid,
            "torch_version": np.full(sessions, version + BUILD),
            "torch_release": np.full(sessions, version),
            "job": job_name,
            "team": team,
            "model": model,
            "time": _timestamps(day, start_s + 1),
            "frame_key": np.full(sessions, "model.py:21#Block2"),
            "frame_name": np.full(sessions, "Block2.forward"),
            "reason": np.full(sessions, "call_function print"),
            "count": np.ones(sessions, np.int32),
        },
    )
    recompiles = np.bincount(s_of, weights=counts_as_recompile, minlength=sessions).astype(np.int64)
    # completeness: the last session of the day was killed; every 5th run's rank 0 went dark
    ended = np.ones(sessions, bool)
    ended[-1] = False
    dark = (run_idx % 5 == 4) & (rank == 0)
    runs = _table(
        "runs",
        {
            "run_id": run_id,
            "rank": rank,
            "pid": pid,
            "torch_version": np.full(sessions, version + BUILD),
            "torch_release": np.full(sessions, version),
            "job": job_name,
            "team": team,
            "model": model,
            "world_size": np.full(sessions, fleet.ranks, np.int32),
            "start_time": _timestamps(day, start_s),
            "end_time": _timestamps(day, start_s + per * 3.0 + 5),
            "ended": ended,
            "signals_off": [["guard_failures"] if x else [] for x in dark],
            "log_gap": np.zeros(sessions, bool),
            "compiles": np.bincount(s_of, weights=counts_as_compile, minlength=sessions).astype(
                np.int64
            ),
            "recompiles": recompiles,
            "limit_hits": np.bincount(s_of, weights=limit_hit, minlength=sessions).astype(np.int64),
            "compile_s": np.bincount(s_of, weights=compile_seconds, minlength=sessions),
            "export_version": np.ones(sessions, np.int32),
        },
    )
    return {
        "runs": runs,
        "compiles": compiles,
        "guard_failures": guard_failures,
        "graph_breaks": graph_breaks,
    }


def write_fleet(root: Path | str, fleet: Fleet = Fleet()) -> dict[str, int]:
    """Write ``fleet`` into the lake at ``root``, one raw file per table, run and day (as an exporter
    with every rank's log writes them); returns the rows written per table."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    lake = Lake(str(root))
    rng = np.random.default_rng(fleet.seed)
    rows = dict.fromkeys(SCHEMAS, 0)
    for d in range(fleet.days):
        day = fleet.start + datetime.timedelta(days=d)
        for name, table in _day(fleet, d, rng).items():
            rows[name] += table.num_rows
            ids = table["run_id"]
            for run in pc.unique(ids).to_pylist():
                part = table.filter(pc.equal(ids, run))
                lake.write(
                    lake.path_of(name, day, run, "all"),
                    lambda stream, part=part: pq.write_table(part, stream, compression="zstd"),
                )
    return rows
