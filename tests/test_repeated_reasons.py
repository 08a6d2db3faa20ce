"""A trace repeats each cache entry's reason text on every later recompile of its frame (O(N²) texts for N
recompiles): the explainer derives what a text says once, and its verdicts are those of deriving it anew."""

from __future__ import annotations

from pathlib import Path

import pytest
from agreement import record

from recompprof._analysis.trace import ingest as ingest_module, records
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


@pytest.mark.workload
def test_each_listed_text_is_decoded_once_and_each_compile_parsed_from_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingesting a real trace of 12 compiles of one frame decodes each text of its reason lists from JSON
    once (11, not the 65 its lists hold) and builds each compile's parse from the texts new since the
    frame's last compile (11 texts, not 66), with the events of a reader and explainer that take every
    text anew."""
    run = record(WORKLOAD, [], tmp_path)
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    listed = _reason_texts(run.trace_dir)
    assert sum(len(texts) for texts in listed if len(texts) > 1) == 65
    decoded: list[int] = []
    loads = records.json.loads

    def counting_loads(text: str) -> object:
        value = loads(text)
        if text.startswith("["):  # a reason list (metadata lines are objects)
            decoded.append(len(value))
        return value

    parsed: list[int] = []
    init = explaining._Parsed.__init__

    def counting_init(self: explaining._Parsed, texts: list[explaining._Text]) -> None:
        parsed.append(len(texts))
        init(self, texts)

    monkeypatch.setattr(records.json, "loads", counting_loads)
    monkeypatch.setattr(explaining._Parsed, "__init__", counting_init)
    traced = read_trace(run.trace_dir)
    assert sum(decoded) == 11 and sum(parsed) == 11
    # anew: no list read from the one before, and each compile's parse built from all its texts
    monkeypatch.setattr(ingest_module, "MAX_REASON_CHARS", 0)
    monkeypatch.setattr(
        explaining.ReasonExplainer,
        "_extended",
        lambda self, key, texts: explaining._Parsed(self._known(texts)),
    )
    decoded.clear()
    parsed.clear()
    anew = read_trace(run.trace_dir)
    assert sum(decoded) == 65 and sum(parsed) == 66
    assert [e.model_dump() for e in anew.events[0]] == [e.model_dump() for e in traced.events[0]]
    assert [v[1:3] for v in _verdicts(traced.events[0])] == [("python_constant", "L['k']")] * 11


@pytest.mark.workload
def test_a_trace_read_in_small_chunks_gives_the_same_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real trace read a few characters at a time (every record, payload line and run of payload
    lines cut at every place) gives the records and counts of reading it in its usual chunks."""
    run = record(WORKLOAD, [], tmp_path)
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    (log,) = run.trace_dir.glob("dedicated_log_torch_trace*.log")

    def read() -> tuple[list[records.TraceRecord], records.RecordCounts]:
        counts = records.RecordCounts()
        with log.open(encoding="utf-8", errors="replace") as handle:
            return list(records.read_records(handle, 2026, counts)), counts

    whole, counts = read()
    assert counts.records == len(whole) > 100 and not counts.stray_lines + counts.bad_payloads
    assert sum(1 for r in whole if r.payload) > 50
    for chunk in (1, 2, 3, 7, 64):
        monkeypatch.setattr(records, "CHUNK", chunk)
        assert read() == (whole, counts), chunk


@pytest.mark.workload
@pytest.mark.parametrize("remembered", [5, 9, 14])
def test_a_frames_history_drops_the_keys_moving_each_at_once_would(
    remembered: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame's history of reason keys, whose moves wait until the oldest must be dropped, drops the
    same keys (so gives the same events) as one that moves each key when it is touched, on a real trace
    of 12 compiles of one frame with the history bounded below its keys."""
    run = record(WORKLOAD, [], tmp_path)
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    monkeypatch.setattr(explaining, "MAX_SEEN_REASONS", remembered)
    dropped: list[int] = []
    popitem = explaining._History.popitem

    def counted(self: explaining._History, last: bool = True) -> tuple[int, int | None]:
        dropped.append(1)
        return popitem(self, last)

    monkeypatch.setattr(explaining._History, "popitem", counted)
    waiting = [e.model_dump() for e in read_trace(run.trace_dir).events[0]]
    assert dropped
    for name in ("touch", "touch_all"):
        waits = getattr(explaining._History, name)

        def at_once(self: explaining._History, *args: object, waits: object = waits) -> None:
            waits(self, *args)  # type: ignore[operator]
            self.ordered()

        monkeypatch.setattr(explaining._History, name, at_once)
    assert [e.model_dump() for e in read_trace(run.trace_dir).events[0]] == waiting
