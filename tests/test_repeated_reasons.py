"""A trace repeats each cache entry's reason text on every later recompile of its frame (O(N²) texts for N
recompiles): the explainer derives what a text says once, and its verdicts are those of deriving it anew."""

from __future__ import annotations

from pathlib import Path

import pytest
from agreement import record

from recompprof._analysis.trace.ingest import read_trace
from recompprof._analysis.trace.records import recompile_reasons
from recompprof._eventlog.reader import read_run
from recompprof._model import explaining, reasons
from recompprof._model.events import Compile, Event

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "repeated_reasons.py"


def _reason_texts(trace_dir: Path) -> list[list[str]]:
    """Each ``recompile_reasons`` artifact of the raw trace: the texts torch listed for one recompile."""
    (log,) = trace_dir.glob("dedicated_log_torch_trace*.log")
    lines = log.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if '"name": "recompile_reasons"' in line:
            payload = []
            for more in lines[i + 1 :]:
                if not more.startswith("\t"):
                    break
                payload.append(more[1:])
            out.append(recompile_reasons("\n".join(payload)))
    return out


def _verdicts(events: list[Event]) -> list[tuple[str, str, str, str | None, bool, str | None]]:
    """Per recompile: compile id, the explaining reason's category and subject, the automatic-dynamic
    verdict and the steady-state verdict (and what of it is unknown)."""
    out = []
    for e in events:
        if isinstance(e, Compile) and e.is_recompile and not e.backward:
            reason = next(r for r in e.reasons if r.explains_change)
            out.append(
                (
                    str(e.compile_id),
                    reason.category,
                    reason.subject,
                    e.automatic_dynamic,
                    e.steady_state,
                    e.steady_state_unknown,
                )  # fmt: skip
            )
    return out


@pytest.mark.workload
def test_a_repeated_reason_text_is_parsed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingesting a real trace of 12 compiles of one frame looks each distinct reason text up once (11), not
    once per listing (66), and its verdicts equal live capture's and those of an explainer that remembers
    only 2 texts (so derives them again)."""
    run = record(WORKLOAD, [], tmp_path)
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    listed = _reason_texts(run.trace_dir)
    assert sum(map(len, listed)) == 66 and len({t for texts in listed for t in texts}) == 11
    before = reasons._parse_cached.cache_info()
    traced = read_trace(run.trace_dir)
    after = reasons._parse_cached.cache_info()
    assert (after.hits + after.misses) - (before.hits + before.misses) == 11
    ingested = _verdicts(traced.events[0])
    assert [v[1:3] for v in ingested] == [("python_constant", "L['k']")] * 11
    assert ingested == _verdicts(list(read_run(run.run_dir)))
    monkeypatch.setattr(explaining, "MAX_TEXTS_REMEMBERED", 2)
    again = read_trace(run.trace_dir)
    assert [e.model_dump() for e in again.events[0]] == [e.model_dump() for e in traced.events[0]]
