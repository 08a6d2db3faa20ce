"""Record one run three ways and compare: recompprof live, ``TORCH_LOGS`` and ``recompprof ingest`` of ``TORCH_TRACE``.

``record(script, args, where)`` runs a workload in a subprocess (once per test session: ``recordings.py``)
with recompprof attached (its event log in ``where/run``), ``TORCH_LOGS=recompiles,graph_breaks`` (read back from stderr) and
``TORCH_TRACE=where/trace``. ``summarise_*`` turn each source into one comparable ``Summary``, keyed
by Dynamo compile id (``"0/3"``), the one key all three share: torch's logs name a frame only by its
code object, so frames are compared by compile id and their names are checked separately.

- live: the event log, read with ``recompprof._eventlog.reader.read_run``
- logs: torch's own messages, split into records; reasons with ``recompprof._model.reasons.parse_recompiles_log``
- trace: ``recompprof._analysis.trace.ingest.read_trace`` (what ``recompprof ingest`` writes)

``diff(a, b, c)`` says, per aspect and compile id, where the sources disagree (empty when they agree).

The verdict corpora (``tests/test_verdicts.py``, ``tests/test_verdict_corpus.py``) share the fixtures and
helpers at the end: events and summaries per workload, forward compiles, ``recompprof diff`` of a run against
its own trace, and the report's "Fix these first" blocks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from recordings import Recording, Workload, copy_into, recorded

from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.model import Report
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, Event, GraphBreak, RecompileLimitHit
from recompprof._model.reasons import parse_guard_failure, parse_recompiles_log

SOURCES = ("live", "logs", "trace")
ASPECTS = (
    "recompiles",
    "reasons",
    "categories",
    "limit_hits",
    "graph_breaks",
    "graph_break_locations",
)

# "V1123 00:04:40.537000 9517 torch/_dynamo/guards.py:5396] [0/1] [__recompiles] message"
_LOG_LINE = re.compile(
    r"^([VIWEDC]\d{4} [\d:.]+ +\d+ \S+\]) (?:\[(!?\d+/\d+)(?:_\d+)?\] )?(?:\[(__\w+)\] )?(.*)$"
)
_RECOMPILING = re.compile(r"^Recompiling function (\S+) in (.*):(\d+)$")
_LIMIT = re.compile(r"^torch\._dynamo hit config\.(\w+) \((\d+)\)")
_BREAK = re.compile(r"^Graph break (?:\([^)]*\) )?in user code at (.*)$")
_BREAK_REASON = "Graph Break Reason: "
_LIMIT_NAMES = {
    "cache_size_limit": "recompile_limit",
    "accumulated_cache_size_limit": "accumulated_recompile_limit",
}


# A run recorded three ways (``recordings.Recording``: its directory, stdout, stderr, exit status).
Recorded = Recording


@dataclasses.dataclass
class Summary:
    """What one source says about a run, by compile id (forward compiles only)."""

    recompiles: list[str] = dataclasses.field(default_factory=list)  # compile ids, in order
    reasons: dict[str, list[tuple[str, str]]] = dataclasses.field(
        default_factory=dict
    )  # id -> sorted (entry, text)
    categories: dict[str, list[tuple[str, str]]] = dataclasses.field(
        default_factory=dict
    )  # id -> sorted (text, category)
    limit_hits: dict[str, str] = dataclasses.field(default_factory=dict)  # id -> limit name
    graph_breaks: dict[str, list[str]] = dataclasses.field(
        default_factory=dict
    )  # id -> sorted reason headlines
    graph_break_locations: dict[str, list[str]] = dataclasses.field(
        default_factory=dict
    )  # id -> sorted file:line
    frames: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # id -> frame name as this source names it
    compile_failures: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # id -> fail type (recompprof sources)

    def totals(self) -> dict[str, int]:
        return {
            "recompiles": len(self.recompiles),
            "reasons": sum(len(v) for v in self.reasons.values()),
            "limit_hits": len(self.limit_hits),
            "graph_breaks": sum(len(v) for v in self.graph_breaks.values()),
        }


@dataclasses.dataclass(frozen=True)
class Job:
    """One workload run: ``python script *args`` in ``where`` with extra environment ``env``."""

    script: Path
    args: tuple[str, ...]
    where: Path
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def record(
    script: Path, args: Iterable[str], where: Path, *, timeout: float = 600, **env: str
) -> Recorded:
    """``python script *args`` with all three recorders on, recorded once per session; a copy in ``where``."""
    return record_all([Job(script, tuple(args), where, env)], timeout=timeout)[0]


def record_all(jobs: list[Job], *, timeout: float = 600) -> list[Recorded]:
    """The jobs recorded with all three recorders on (those not yet recorded this session run side by side,
    each its own process), each copied into its ``where``."""
    workloads = [
        Workload(
            job.script,
            job.args,
            (
                ("RECOMPPROF_RUN_DIR", "{here}/run"),
                ("TORCH_TRACE", "{here}/trace"),
                ("TORCH_LOGS", "recompiles,graph_breaks"),
                *sorted(job.env.items()),
            ),
            timeout,
        )
        for job in jobs
    ]
    return [copy_into(run, job.where) for run, job in zip(recorded(workloads), jobs)]


def record_workloads(jobs: dict[str, Job], *, timeout: float = 900) -> dict[str, Recorded]:
    """``record_all`` by name, each job required to have run to its ``WORKLOAD DONE`` line."""
    runs = dict(zip(jobs, record_all(list(jobs.values()), timeout=timeout)))
    for name, run in runs.items():
        assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, (
            f"{name} failed:\n{run.stderr[-4000:]}"
        )
    return runs


# -- the three readers --------------------------------------------------------------------------


def headline(reason: str) -> str:
    """The first line of a graph-break reason that names the break (torch's wrapper lines removed)."""
    text = reason.strip()
    if text.startswith(_BREAK_REASON):
        text = text[len(_BREAK_REASON) :]
    lines = [line.strip() for line in text.splitlines()]
    # "Encountered graph break when attempting to trace X:" / "... cannot resume from ... encountered:" / "Failed to
    # handle graph break gracefully. Skipping the function ... Graph break encountered:" wrap the reason.
    while lines and (
        not lines[0]
        or (lines[0].startswith("Encountered graph break") and lines[0].endswith(":"))
        or lines[0].endswith("Graph break encountered:")
    ):
        lines.pop(0)
    return lines[0] if lines else text


def _short(location: str | None) -> str:
    return location.strip() if location else "<none>"


def _reason_rows(texts: Iterable[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    parsed = [r for text in texts for r in parse_guard_failure(text)]
    return sorted((r.entry or "", r.text) for r in parsed), sorted(
        (r.text, r.category) for r in parsed
    )


def summarise_events(events: Iterable[Event]) -> Summary:
    """The summary of recompprof events (an event log, or what ingest read from a trace)."""
    out = Summary()
    for event in events:
        if isinstance(event, Compile) and not event.backward:
            cid = event.compile_id
            out.frames[cid] = event.frame.name
            if event.is_recompile:
                out.recompiles.append(cid)
                rows = [(r.entry or "", r.text) for r in event.reasons]
                out.reasons[cid] = sorted(rows)
                out.categories[cid] = sorted((r.text, r.category) for r in event.reasons)
            if event.outcome == "failed":
                out.compile_failures[cid] = event.fail_type or "?"
        elif isinstance(event, RecompileLimitHit):
            out.limit_hits[event.compile_id or "?"] = event.limit
        elif isinstance(event, GraphBreak):
            cid = event.compile_id or "?"
            out.graph_breaks.setdefault(cid, []).extend([headline(event.reason)] * event.count)
            out.graph_break_locations.setdefault(cid, []).extend(
                [_short(event.user_location)] * event.count
            )
    for table in (out.graph_breaks, out.graph_break_locations):
        for cid in table:
            table[cid].sort()
    return out


def summarise_live(recorded: Recorded) -> Summary:
    return summarise_events(read_run(recorded.run_dir))


def summarise_trace(recorded: Recorded) -> Summary:
    return summarise_events(
        e for per_file in read_trace(recorded.trace_dir).events for e in per_file
    )


def log_records(stderr: str) -> list[tuple[str | None, str | None, str]]:
    """torch's log records on stderr as ``(compile id, artifact, message)``; a record's lines share one prefix."""
    records: list[tuple[str | None, str | None, str]] = []
    current: tuple[str, str | None, str | None] | None = None
    lines: list[str] = []

    def flush() -> None:
        if current is not None:
            records.append((current[1], current[2], "\n".join(lines)))

    for raw in stderr.splitlines():
        match = _LOG_LINE.match(raw)
        if match is None:
            flush()
            current, lines = None, []
            continue
        prefix, cid, artifact, message = match.groups()
        starts = bool(_RECOMPILING.match(message) or _LIMIT.match(message) or _BREAK.match(message))
        key = (prefix, cid, artifact)
        if current != key or starts:
            flush()
            current, lines = key, []
        lines.append(message)
    flush()
    return records


def summarise_logs(recorded: Recorded) -> Summary:
    """The summary of ``TORCH_LOGS=recompiles,graph_breaks`` output (and torch's limit warnings) on stderr."""
    out = Summary()
    for cid, artifact, message in log_records(recorded.stderr):
        first = message.split("\n", 1)[0]
        if cid is None:
            continue
        cid = cid.lstrip("!")
        if artifact == "__recompiles" and (m := _RECOMPILING.match(first)):
            out.recompiles.append(cid)
            out.frames[cid] = m.group(1)
            out.reasons[cid], out.categories[cid] = _reason_rows(parse_recompiles_log(message))
        elif (m := _LIMIT.match(first)) is not None:
            out.limit_hits[cid] = _LIMIT_NAMES.get(m.group(1), m.group(1))
        elif artifact == "__graph_breaks" and (m := _BREAK.match(first)):
            body = message.split("\n", 1)[1] if "\n" in message else ""
            body = body.split("\nUser code traceback:", 1)[0]
            out.graph_breaks.setdefault(cid, []).append(headline(body))
            out.graph_break_locations.setdefault(cid, []).append(_short(m.group(1)))
    for table in (out.graph_breaks, out.graph_break_locations):
        for key in table:
            table[key].sort()
    return out


def summarise(recorded: Recorded) -> dict[str, Summary]:
    return {
        "live": summarise_live(recorded),
        "logs": summarise_logs(recorded),
        "trace": summarise_trace(recorded),
    }


# -- comparing ----------------------------------------------------------------------------------


def diff(
    summaries: dict[str, Summary], aspects: Iterable[str] = ASPECTS
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{aspect: {compile id: {source: value}}}`` for every compile id where the sources disagree."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for aspect in aspects:
        values = {name: getattr(s, aspect) for name, s in summaries.items()}
        if aspect == "recompiles":
            if len({tuple(v) for v in values.values()}) > 1:
                out[aspect] = {"(all)": values}
            continue
        keys = sorted({k for v in values.values() for k in v}, key=_id_order)
        found = {k: {name: v.get(k) for name, v in values.items()} for k in keys}
        found = {k: per for k, per in found.items() if len({repr(x) for x in per.values()}) > 1}
        if found:
            out[aspect] = found
    return out


def _id_order(cid: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", cid)) or (1 << 30,)


def describe(summaries: dict[str, Summary], found: dict[str, dict[str, dict[str, Any]]]) -> str:
    """A readable account of a diff: totals per source, then each disagreement."""
    lines = ["totals: " + "; ".join(f"{name} {s.totals()}" for name, s in summaries.items())]
    for aspect, per_id in found.items():
        for cid, per_source in per_id.items():
            lines.append(f"{aspect} {cid}:")
            lines.extend(f"    {name}: {value!r}"[:600] for name, value in per_source.items())
    return "\n".join(lines)


def torch_compiles(recorded: Recorded) -> dict[str, dict[str, Any]]:
    """torch's own record of each forward compile in the raw ``TORCH_TRACE`` (its ``compilation_metrics``, with
    ``dynamo_config`` parsed), by compile id: the code object (``co_name``, ``co_filename``, ``co_firstlineno``)
    and the config the compile ran under, read without recompprof."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(recorded.trace_dir.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '{"compilation_metrics": ' not in line or "] " not in line:
                continue
            metrics = json.loads(line.split("] ", 1)[1])["compilation_metrics"]
            config = metrics.get("dynamo_config")
            metrics["dynamo_config"] = (
                json.loads(config) if isinstance(config, str) else (config or {})
            )
            out[metrics["compile_id"]] = metrics
    return out


def by_frame(summary: Summary) -> dict[str, list[str]]:
    """Compile ids per frame name (how a report would group them)."""
    out: dict[str, list[str]] = defaultdict(list)
    for cid, name in summary.frames.items():
        out[name].append(cid)
    return dict(out)


# -- what the verdict corpora share (tests/test_verdicts.py, tests/test_verdict_corpus.py) ------------
# Each corpus module defines its ``recorded`` fixture (its workloads run by ``record_workloads``) and imports the
# fixtures below, which read it.

# Categories only the live process can decide, from the guarded object itself (docs/categories.md): from the text
# alone (TORCH_LOGS, an ingested trace) such a reason may be "other", recompprof's unknown, never a guess.
BY_OBJECT = {"python_constant", "module_attribute", "global", "object_identity", "type", "aliasing"}
# How "Fix these first" says a cause was torch's warm-up.
WARMUP_WORDS = re.compile(r"one[- ]time", re.IGNORECASE)


@pytest.fixture(scope="module", name="summaries")
def summaries_fixture(recorded: dict[str, Recorded]) -> dict[str, dict[str, Summary]]:
    """Each workload's summary by source."""
    return {name: summarise(run) for name, run in recorded.items()}


@pytest.fixture(scope="module", name="events")
def events_fixture(recorded: dict[str, Recorded]) -> dict[tuple[str, str], list[Event]]:
    """Each workload's events by ``(workload, source)``: live (its event log) and ingested from its trace."""
    out: dict[tuple[str, str], list[Event]] = {}
    for name, run in recorded.items():
        out[(name, "live")] = list(read_run(run.run_dir))
        out[(name, "trace")] = [
            e for per_file in read_trace(run.trace_dir).events for e in per_file
        ]
    return out


def forward(events: list[Event]) -> dict[str, Compile]:
    """Forward compiles by compile id."""
    return {e.compile_id: e for e in events if isinstance(e, Compile) and not e.backward}


def known_as_unknown(summaries: dict[str, Summary]) -> dict[str, Summary]:
    """The summaries with each live category both text sources call ``other`` read as ``other``, where the live
    category is one decided by the guarded object: the text sources cannot know it, and do not claim to."""
    live, logs, trace = summaries["live"], summaries["logs"], summaries["trace"]
    categories = {}
    for cid, rows in live.categories.items():
        text_says = set(logs.categories.get(cid, [])) & set(trace.categories.get(cid, []))
        categories[cid] = sorted(
            (text, "other")
            if (text, "other") in text_says and category in BY_OBJECT
            else (text, category)
            for text, category in rows
        )
    return {**summaries, "live": dataclasses.replace(live, categories=categories)}


def diff_against_own_trace(recorded: Recorded, where: Path) -> subprocess.CompletedProcess[str]:
    """``recompprof ingest`` of the run's TORCH_TRACE into ``where`` (required to succeed), then what
    ``recompprof diff <live> <ingested>`` did."""
    cli = [str(Path(sys.executable).parent / "recompprof")]
    ingested = where / "ingested"
    done = subprocess.run(
        [*cli, "ingest", str(recorded.trace_dir), "-o", str(ingested)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return subprocess.run(
        [*cli, "diff", str(recorded.run_dir), str(ingested)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def fix_first_blocks(report: Report) -> list[str]:
    """The "Fix these first" list of the terminal report, one block of text per cause, in the order shown."""
    text = render_text(report, width=400)
    listed = text.split("Fix these first", 1)[1].split("\nFrames", 1)[0]
    return [block for block in re.split(r"\n(?=\s*\d+\. )", listed)[1:] if block.strip()]
