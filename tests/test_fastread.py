"""The offline commands' fast reader (``eventlog.scan_file``, msgspec views) keeps, skips and counts
exactly what the validated reader (``eventlog.read_file``, pydantic models) does, with the same values,
and the report, check and diff built from it are the same.

Inputs: a real recorded run (the CPU workload under ``attach()``), logs of every event kind built from
the reason texts recorded from torch 2.13 (tests/fixtures/reasons) with the real reason parser, and
hypothesis mutations of their lines (wrong types, lax-mode coercions, bounds, duplicate keys, bad bytes).
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
from generated_runs import (
    reason_pool,  # every recorded torch 2.13 guard-failure text, parsed by the real parser
)
from hypothesis import HealthCheck, example, given, settings, strategies as st
from needs import starts
from recorded_runs import RecordedRun, record

from recompprof._analysis.check import Rules, check
from recompprof._analysis.diff import compare
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.model import Report
from recompprof._analysis.runs import EventStream
from recompprof._eventlog import fastread
from recompprof._eventlog.reader import ReadStats, read_file, read_run, run_files, scan_file
from recompprof._eventlog.writer import write_events
from recompprof._model.events import (
    Compile,
    Event,
    Frame,
    GraphBreak,
    RecompileLimitHit,
    SessionEnd,
    SessionStart,
    SignalChange,
)


def plain(event: Any) -> dict[str, Any]:
    """An event (model or view) as plain data, for comparing values."""
    data = event.model_dump() if hasattr(event, "model_dump") else msgspec.to_builtins(event)
    data["kind"] = event.kind
    return data


def same_values(a: Any, b: Any) -> bool:
    return repr(sorted(plain(a).items())) == repr(sorted(plain(b).items()))  # repr: NaN equals NaN


def fixture_log(path: Path, seed: int = 0, n: int = 300) -> None:
    """A log of every event kind, with the recorded torch 2.13 reason texts parsed by the real parser."""
    pool = [reason for parsed in reason_pool() for reason in parsed]
    rng = random.Random(seed)
    frames = [Frame(name=f"fn{i}", file=f"/job/m{i % 3}.py", line=10 * i) for i in range(5)]
    events: list[Any] = [
        SessionStart(
            time=1.0,
            step=0,
            run_id="fx",
            host="h",
            pid=1,
            versions={"torch": "2.13.0"},
            mode="profile",
            recompile_limit=8,
            signals={"guard_failures": True},
            profile_mechanism="evict",
        )
    ]
    for i in range(n):
        frame = rng.choice(frames)
        roll = rng.random()
        if roll < 0.1:
            events.append(
                GraphBreak(
                    time=2.0 + i,
                    step=i,
                    frame=frame if roll < 0.05 else None,
                    reason="Unsupported: print",
                    hints=["use a log"],
                    count=rng.randint(1, 3),
                )
            )
        elif roll < 0.15:
            events.append(
                RecompileLimitHit(
                    time=2.0 + i,
                    step=i,
                    frame=frame,
                    limit="recompile_limit",
                    value=8,
                    last_reason=rng.choice(pool),
                )
            )
        elif roll < 0.17:
            events.append(
                SignalChange(
                    time=2.0 + i, signal="guard_failures", live=False, reason="hook removed"
                )
            )
        else:
            reasons = [
                r.model_copy(update={"explains_change": k == 0, "entry": f"0/{k}"})
                for k, r in enumerate(rng.sample(pool, rng.randint(0, 4)))
            ]
            failed = roll > 0.95
            events.append(
                Compile(
                    time=2.0 + i,
                    step=i,
                    frame=frame,
                    compile_id=f"{i % 7}/{i}",
                    is_recompile=bool(reasons),
                    reasons=reasons,
                    reasons_omitted={"size": 3} if roll > 0.9 else {},
                    outcome="failed" if failed else "ok",
                    fail_type="BackendCompilerFailed" if failed else None,
                    fail_reason="boom" if failed else None,
                    duration=rng.uniform(0, 2),
                    phases={"dynamo_trace": 0.5, "other": 0.25},
                    backward=roll < 0.3,
                    guard_set=f"g{i % 4}",
                    cache_lookups={"fx_graph": {"hit": 1, "miss": 2}},
                    cache_seconds_saved=0.5,
                    call_site=["train.py:3 in step"],
                    trace_seconds_by_function={"f": 0.1},
                    cudagraph_skip="cpu_device" if roll > 0.97 else None,
                    steady_state=i > 100,
                )
            )
    events.append(
        SessionEnd(
            time=1e4,
            totals={"wall_seconds": 99.0},
            internal_errors={"x": 1},
            signals_off={"guard_failures": "hook removed"},
        )
    )
    path.unlink(missing_ok=True)  # the writer appends
    write_events(path, events)


def report_fields(report: Report) -> dict[str, Any]:
    """Every figure of a report (what only the fold needs aside)."""
    return {
        f.name: getattr(report, f.name)
        for f in dataclasses.fields(report)
        if not f.metadata.get("fold_state")
    }


def assert_same_read(path: Path) -> None:
    slow_stats, fast_stats = ReadStats(), ReadStats()
    slow, fast = list(read_file(path, slow_stats)), list(scan_file(path, fast_stats))
    assert slow_stats == fast_stats
    assert len(slow) == len(fast)
    assert all(same_values(a, b) for a, b in zip(slow, fast, strict=True))


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return record(tmp_path_factory.mktemp("fastread-recorded"), "--steps", "6")  # as test_cli_fuzz


def test_views_have_the_fields_defaults_and_properties_of_their_models() -> None:
    """Each view is derived from its model: same field names in order, same defaults, ``kind`` and ``Frame.label``."""
    for model in (*fastread.EVENT_MODELS, Frame):
        view = next(v for v in fastread.VIEWS if v.__name__ == model.__name__ + "View")
        assert list(view.__struct_fields__) == [n for n in model.model_fields if n != "kind"]
        for info in msgspec.structs.fields(view):
            field = model.model_fields[info.name]
            default = (
                info.default_factory()
                if info.default_factory is not msgspec.NODEFAULT
                else info.default
            )
            if (
                info.name == "schema_version"
            ):  # required on a line read, whatever the model's default for writing
                assert info.required
            else:
                assert info.required if field.is_required() else default == field.default
        if "kind" in model.model_fields:
            assert view.kind == model.model_fields["kind"].default
    frame = fastread.DECODER.decode(
        b'{"schema_version":1,"time":1,"kind":"recompile_limit_hit","frame":'
        b'{"name":"f","file":"/a/b/c.py","line":7},"limit":"recompile_limit","value":8}'
    ).frame
    assert frame.label == Frame(name="f", file="/a/b/c.py", line=7).label == "f (b/c.py:7)"


def test_every_event_type_model_and_view_has_its_models_handler_in_the_folds() -> None:
    """The folds dispatch on the event's type: each event model and its view are filed under the model's
    handler (``fastread.by_type``), in the report's fold and in the session tally alike."""
    from recompprof._analysis.report import fold, sessions as completeness

    for table in (fold._HANDLERS, completeness._TALLY):
        assert set(table) == {
            *fastread.EVENT_MODELS,
            *(fastread.VIEW_OF[m] for m in fastread.EVENT_MODELS),
        }
        for model in fastread.EVENT_MODELS:
            assert table[fastread.VIEW_OF[model]] is table[model]
            assert fastread.VIEW_OF[model].__name__ == model.__name__ + "View"


def test_recorded_run_reads_and_reports_the_same(recorded: RecordedRun) -> None:
    """On a real recorded run every line is a view, with the validated reader's values; report, check and diff agree."""
    files = run_files(recorded.run_dir)
    for path in files:
        assert_same_read(path)
        assert all(not hasattr(e, "model_dump") for e in scan_file(path))  # the fast path was taken
    slow, fast = build_report(read_run(recorded.run_dir)), build_report(EventStream(files))
    assert report_fields(slow) == report_fields(fast) and slow.recompiles > 0
    assert render_text(slow) == render_text(fast)
    rules = Rules(max_recompiles=0, forbid=("size", "python_constant"), max_graph_breaks=0)
    assert (
        check(read_run(recorded.run_dir), rules).findings()
        == check(EventStream(files), rules).findings()
    )
    assert check(
        EventStream(files), rules
    ).findings()  # the rules do fire, so the comparison compares violations


def test_fixture_log_reads_and_reports_the_same(tmp_path: Path) -> None:
    """A log of every kind with the recorded torch 2.13 reasons: same events, same report, same diff."""
    a, b = tmp_path / "a" / "rank00000-1.jsonl", tmp_path / "b" / "rank00000-1.jsonl"
    fixture_log(a, seed=1)
    fixture_log(b, seed=2, n=400)
    assert_same_read(a)
    slow, fast = build_report(read_file(a)), build_report(scan_file(a))
    assert report_fields(slow) == report_fields(fast)
    assert (
        slow.limit_hits
        and slow.graph_breaks
        and slow.failures
        and slow.causes
        and slow.run.signals_dark
    )
    slow_diff = compare(read_file(a), read_file(b))
    fast_diff = compare(scan_file(a), scan_file(b))
    assert slow_diff.changes == fast_diff.changes and slow_diff.changes


def _mutate(data: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    target = data
    if key.startswith(("frame.", "reasons.")):
        outer, key = key.split(".", 1)
        target = data.get(outer)
        if isinstance(target, list):
            target = target[0] if target else None
        if not isinstance(target, dict):
            return data
    if value is DELETE:
        target.pop(key, None)
    else:
        target[key] = value
    return data


DELETE = object()
VALUES = st.one_of(
    st.just(DELETE),
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(
        ["1", "1.5", "true", "\udcff", "size", "compile", "x" * 4097, "y" * 201, "ok", "limit_hit"]
    ),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["size", "other", "hit"]), st.integers(), max_size=2),
    st.sampled_from([1.0, 0, 1, 2.0, -0.0, 10**20, 1e300]),
)
KEYS = st.sampled_from(
    [
        "kind",
        "schema_version",
        "time",
        "step",
        "rank",
        "frame",
        "frame.name",
        "frame.line",
        "frame.file",
        "compile_id",
        "is_recompile",
        "reasons",
        "reasons.text",
        "reasons.category",
        "reasons.subject",
        "reasons.explains_change",
        "reasons.entry",
        "reasons_omitted",
        "phases",
        "duration",
        "outcome",
        "cache",
        "cache_lookups",
        "totals",
        "limit",
        "value",
        "last_reason",
        "count",
        "reason",
        "hints",
        "live",
        "signal",
        "versions",
        "mode",
        "recompile_limit",
        "signals",
        "guard_set",
        "extra_field",
    ]
)
RAW_EDITS = st.sampled_from(
    ["none", "duplicate_key", "bad_utf8", "bom", "truncate", "crlf", "trailing", "nan_token"]
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10**6),
    edits=st.lists(st.tuples(KEYS, VALUES), max_size=3),
    raw_edit=RAW_EDITS,
    pick=st.floats(0, 1),
)
@example(seed=0, edits=[("kind", "\udcff")], raw_edit="duplicate_key", pick=0.0)
def test_mutated_lines_are_kept_skipped_and_counted_the_same(
    tmp_path: Path, seed: int, edits: list[tuple[str, Any]], raw_edit: str, pick: float
) -> None:
    """Any mutation of a real line is either a view with the validated values or the validated reader's verdict."""
    path = tmp_path / f"rank00000-{seed}.jsonl"
    fixture_log(path, seed=seed, n=12)
    lines = path.read_bytes().splitlines(keepends=True)
    i = int(pick * (len(lines) - 1))
    data = json.loads(lines[i])
    for key, value in edits:
        data = _mutate(data, key, value)
    raw = json.dumps(data, allow_nan=True).encode()
    raw = {
        "none": raw,
        # The kind written as JSON: a mutated kind may hold a quote or a lone surrogate.
        "duplicate_key": raw[:-1]
        + b', "time": 5, "kind": '
        + json.dumps(str(data.get("kind"))).encode()
        + b"}",
        "bad_utf8": raw[:-1] + b', "x": "\xff"}',
        "bom": b"\xef\xbb\xbf" + raw,
        "truncate": raw[: len(raw) // 2],
        "crlf": raw + b"\r",
        "trailing": raw + b" x",
        "nan_token": raw.replace(b'"time": ', b'"time": NaN, "t": ', 1),
    }[raw_edit]
    lines[i] = raw + b"\n"
    if pick > 0.5:  # the mutated line last, without its newline: a torn tail when it does not parse
        lines.append(lines.pop(i)[:-1])
    path.write_bytes(b"".join(lines))
    assert_same_read(path)


def test_without_msgspec_the_commands_read_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """msgspec is optional at runtime: without a decoder ``scan_file`` is ``read_file``."""
    path = tmp_path / "rank00000-1.jsonl"
    fixture_log(path, n=20)
    monkeypatch.setattr(fastread, "DECODER", None)
    events: list[Event] = list(scan_file(path))
    assert events and all(hasattr(e, "model_dump") for e in events)
    assert [plain(e) for e in events] == [plain(e) for e in read_file(path)]


def test_constraints_carry_over_with_the_validated_verdicts() -> None:
    """``max_length`` and ``pattern`` (with pydantic's end-of-text ``$``) accept and refuse what pydantic does;
    a constraint a view cannot express fails loudly instead of checking less."""
    from pydantic import Field

    from recompprof._model.events import _Model

    class Traced(_Model):
        trace_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")
        note: str = Field(default="", max_length=3)

    decoder = msgspec.json.Decoder(fastread._view(Traced, {}))
    for value in (
        {"trace_id": "a" * 32},
        {"trace_id": "a" * 32 + "\n"},
        {"trace_id": "A" * 32},
        {"trace_id": None},
        {"trace_id": "x" + "a" * 32},
        {"note": "abc"},
        {"note": "abcd"},
        {"note": "\U0001f600" * 3},
    ):
        raw = json.dumps(value).encode()
        try:
            Traced.model_validate_json(raw)
            expected = True
        except ValueError:
            expected = False
        try:
            decoder.decode(raw)
            got = True
        except msgspec.ValidationError:
            got = False
        assert got == expected, value

    class Bounded(_Model):
        count: int = Field(default=0, ge=0)

    with pytest.raises(
        TypeError, match=r"Bounded.count: recompprof._eventlog.fastread cannot carry over"
    ):
        fastread._view(Bounded, {})
