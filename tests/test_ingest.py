"""``recompprof ingest`` and TORCH_TRACE reading, checked against attach() and tlparse on the same real runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from needs import starts
from recorded_runs import RecordedRun, cli, record

from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.model import Report
from recompprof._analysis.trace.ingest import IngestError, read_trace, trace_files
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, RecompileLimitHit
from recompprof._torch.versions import torch_info


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return record(tmp_path_factory.mktemp("recorded"), "--steps", "12")


@pytest.fixture(scope="module")
@starts("workload")
def limited(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return record(tmp_path_factory.mktemp("limited"), "--steps", "12", "--recompile-limit", "2")


def _summary(report: Report) -> dict[str, tuple[int, int, list[str]]]:
    return {
        label: (
            f.compiles,
            f.recompiles,
            sorted(g.category for g in f.reasons.values() if g.changes),
        )
        for label, f in report.frames.items()
    }


def test_trace_and_attach_agree(recorded: RecordedRun) -> None:
    """One process recorded by attach() and by TORCH_TRACE gives the same frames, compile ids, recompiles and categories."""
    live = list(read_run(recorded.run_dir))
    traced = [e for per_file in read_trace(recorded.trace_dir).events for e in per_file]
    ids = [
        [e.compile_id for e in events if isinstance(e, Compile) and not e.backward]
        for events in (live, traced)
    ]
    assert ids[0] == ids[1] and len(ids[0]) >= 4
    live_report, trace_report = build_report(live), build_report(traced)
    assert _summary(live_report) == _summary(trace_report)
    assert live_report.recompiles == trace_report.recompiles >= 3
    assert (
        set(live_report.frames.categories)
        == set(trace_report.frames.categories)
        >= {"size", "python_constant"}
    )
    assert (
        abs(live_report.compile_seconds - trace_report.compile_seconds)
        < 0.05 * live_report.compile_seconds + 0.01
    )


def test_ingested_trace_ranks_the_same_causes(recorded: RecordedRun) -> None:
    """The "fix these first" causes of an ingested TORCH_TRACE equal those of the live event log of the same
    process: same frames, categories, subjects and recompiles, and the same seconds within timer noise."""
    live = build_report(read_run(recorded.run_dir))
    traced = build_report(e for per_file in read_trace(recorded.trace_dir).events for e in per_file)
    assert {k: c.recompiles for k, c in live.causes.items()} == {
        k: c.recompiles for k, c in traced.causes.items()
    }
    assert len(live.causes) >= 3
    for key, cause in live.causes.items():
        assert abs(cause.seconds - traced.causes[key].seconds) < 0.05 * cause.seconds + 0.01, key


def _tlparse_compiles(trace_file: Path, out: Path) -> tuple[set[str], int]:
    exe = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    subprocess.run(
        [exe, "--no-browser", "--overwrite", "-o", str(out), str(trace_file)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    directory = json.loads((out / "compile_directory.json").read_text())
    with_metrics: set[str] = set()
    reasons = 0
    for key, entry in directory.items():
        names = [a["name"] for a in entry.get("artifacts", [])]
        match = re.fullmatch(r"\[(\d+/\d+)(?:_\d+)?\]", key)
        if match and any(n.startswith("compilation_metrics") for n in names):
            with_metrics.add(match.group(1))
        reasons += sum(n.startswith("recompile_reasons") for n in names)
    return with_metrics, reasons


def test_compile_ids_match_tlparse(
    recorded: RecordedRun, limited: RecordedRun, tmp_path: Path
) -> None:
    """Ingest finds the compile ids tlparse lists with compilation metrics, and one set of reasons per recompile_reasons artifact."""
    for index, run in enumerate((recorded, limited)):
        (trace_file,) = trace_files(run.trace_dir)
        tl_ids, tl_reasons = _tlparse_compiles(trace_file, tmp_path / f"tl{index}")
        events = read_trace(run.trace_dir).events[0]
        compiles = [e for e in events if isinstance(e, Compile) and not e.backward]
        assert {e.compile_id for e in compiles} == tl_ids
        assert sum(bool(e.reasons) for e in compiles) == tl_reasons > 0


def test_limit_hit_is_attributed_to_its_frame(limited: RecordedRun) -> None:
    """A compile refused by the recompile limit becomes a limit hit of the right frame, with the limit and its reasons."""
    events = read_trace(limited.trace_dir).events[0]
    hits = [e for e in events if isinstance(e, RecompileLimitHit)]
    assert hits, "the workload with --recompile-limit 2 must hit the limit"
    assert {h.frame.name for h in hits} == {"Net.forward"}
    assert {(h.limit, h.value) for h in hits} == {("recompile_limit", 2)}
    refused = [e for e in events if isinstance(e, Compile) and e.outcome == "limit_hit"]
    assert len(refused) == len(hits) and all(e.reasons for e in refused)
    assert build_report(events).frames[hits[0].frame.key].limit_hits["recompile_limit"] == len(hits)


def test_ingest_cli_round_trip(recorded: RecordedRun, tmp_path: Path) -> None:
    """`recompprof ingest` writes event logs the other commands read, and refuses to mix with existing logs."""
    out = tmp_path / "ingested"
    done = cli("ingest", str(recorded.trace_dir), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "compiles " in done.stdout and len(list(out.glob("rank*.jsonl"))) == 1
    report = cli("report", str(out))
    assert report.returncode == 0 and "recompiles 4" in report.stdout
    # An ingested run has no mode: the report says so instead of inventing one. Its steps are the ones recompprof,
    # attached to the recorded run, handed torch (tests/test_trace_steps.py), where this torch keeps them.
    flat = " ".join(report.stdout.split())
    steps = (
        "recompile steps up to 11"
        if torch_info().has("recompile_user_context")
        else "steps unknown"
    )
    assert f"from TORCH_TRACE (no mode) | {steps}" in flat
    assert "mode monitor" not in flat and "steps 0" not in flat and "0, 0" not in flat
    again = cli("ingest", str(recorded.trace_dir), "-o", str(out))
    assert (
        again.returncode == 2
        and "--overwrite" in again.stderr
        and len(again.stderr.splitlines()) == 1
    )
    assert cli("ingest", str(recorded.trace_dir), "-o", str(out), "--overwrite").returncode == 0
    assert len(list(out.glob("rank*.jsonl"))) == 1


def test_a_trace_folder_with_a_long_name_is_ingested_into_a_run_folder_that_fits(
    recorded: RecordedRun, tmp_path: Path
) -> None:
    """``recompprof ingest TRACE_DIR`` without ``-o`` whose folder's name is 250 characters: the run
    goes to ``recompprof-runs/`` under a name of at most 200 bytes (``torch-trace-`` and 250 more
    could not be made), and reads back with every compile."""
    long = tmp_path / ("t" * 250)
    shutil.copytree(recorded.trace_dir, long)
    done = cli("ingest", str(long), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [out] = (tmp_path / "recompprof-runs").iterdir()
    assert out.name.startswith("torch-trace-ttt") and len(out.name.encode()) <= 200
    report = cli("report", str(out))
    assert report.returncode == 0 and "recompiles 4" in report.stdout


def test_a_trace_folder_named_in_bytes_that_are_not_utf8_is_ingested(
    recorded: RecordedRun, tmp_path: Path
) -> None:
    """``recompprof ingest`` of a folder whose name is not UTF-8 (``trace\\xff``, as a file system
    may hold): it ingests (it failed with "this is a recompprof bug"), the run id spells the byte
    ``\\xff``, and the run reads back with every compile."""
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/trace\xff"))
    shutil.copytree(recorded.trace_dir, odd)
    done = cli("ingest", str(odd), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [out] = (tmp_path / "recompprof-runs").iterdir()
    [log] = out.glob("rank*.jsonl")
    assert json.loads(log.read_text().splitlines()[0])["run_id"] == "torch-trace-trace\\xff"
    report = cli("report", str(out))
    assert report.returncode == 0 and "recompiles 4" in report.stdout


def test_commands_read_trace_dirs_directly(recorded: RecordedRun) -> None:
    """report, check and diff accept a TORCH_TRACE directory as a run, and agree with the attach() run (steps too,
    where torch keeps the ones recompprof handed it; without steps, check refuses --after-step)."""
    report = cli("report", str(recorded.trace_dir))
    assert cli("diff", str(recorded.run_dir), str(recorded.trace_dir)).returncode == 0
    live = cli("check", str(recorded.run_dir), "--max-recompiles", "0", "--after-step", "3")
    check = cli("check", str(recorded.trace_dir), "--max-recompiles", "0", "--after-step", "3")
    if torch_info().has("recompile_user_context"):
        assert report.returncode == 0 and "handed torch for each forward compile" in " ".join(
            report.stdout.split()
        )
        assert check.returncode == live.returncode == 1 and check.stdout.replace(
            str(recorded.trace_dir), ""
        ) == live.stdout.replace(str(recorded.run_dir), "")
    else:
        assert report.returncode == 0 and "no training steps" in report.stdout
        assert check.returncode == 2 and "training steps" in check.stderr


def test_torn_and_stray_trace_lines_are_counted(recorded: RecordedRun, tmp_path: Path) -> None:
    """A trace cut mid-payload, with a stray line, still yields its complete compiles and says what it skipped."""
    (source,) = trace_files(recorded.trace_dir)
    lines = source.read_text().splitlines(keepends=True)
    metrics = [i for i, line in enumerate(lines) if '"compilation_metrics"' in line]
    damaged = tmp_path / "trace"
    damaged.mkdir()
    # Keep everything up to the last compile's metrics, then half of the next record's payload.
    cut = metrics[-1] + 4
    (damaged / source.name).write_text("garbage that is not a record\n" + "".join(lines[:cut]))
    run = read_trace(damaged)
    assert run.stats.stray_lines == 1
    assert sum(isinstance(e, Compile) for e in run.events[0]) == len(metrics)
    report = cli("report", str(damaged))
    assert (
        report.returncode == 0 and "skipped" in report.stderr and "Traceback" not in report.stderr
    )
    gate = cli("check", str(damaged), "--max-recompiles", "10")
    assert gate.returncode == 2 and "--allow-skipped" in gate.stderr
    assert cli("check", str(damaged), "--max-recompiles", "10", "--allow-skipped").returncode == 0


@pytest.mark.parametrize("case", ["missing", "empty", "no_traces", "binary", "unreadable"])
def test_ingest_bad_paths(case: str, tmp_path: Path) -> None:
    """Ingest of a missing, empty, trace-less, binary or unreadable path exits 2 with one line and no traceback."""
    target = tmp_path / "in"
    if case != "missing":
        target.mkdir()
    if case == "no_traces":
        (target / "notes.txt").write_text("hello\n")
    if case == "binary":
        (target / "dedicated_log_torch_trace_x.log").write_bytes(bytes(range(256)) * 64)
    if case == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("permissions do not stop root")
        (target / "dedicated_log_torch_trace_x.log").write_text("x\n")
        target.chmod(0)
    try:
        done = cli("ingest", str(target), "-o", str(tmp_path / "out"))
    finally:
        if target.exists():
            target.chmod(0o755)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) <= 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("recompprof: ")
    if case in ("missing", "empty", "no_traces"):
        with pytest.raises(IngestError):
            trace_files(target)


def test_reason_payload_shapes(recorded: RecordedRun) -> None:
    """Both recompile_reasons payload shapes (a bare string for one reason, a JSON list for several) are read."""
    events = read_trace(recorded.trace_dir).events[0]
    counts = Counter(len(e.reasons) for e in events if isinstance(e, Compile) and e.is_recompile)
    assert counts[1] >= 1 and any(n > 1 for n in counts)


def test_records_of_unexpected_shape_are_counted_by_kind(
    recorded: RecordedRun, tmp_path: Path
) -> None:
    """A record of a kind ingest reads, edited to a shape torch never writes, is skipped and counted under its
    kind (and in the total the commands report); every other record of the trace is read as before."""
    (source,) = trace_files(recorded.trace_dir)
    lines = source.read_text().splitlines(keepends=True)
    edits = {
        "compilation_metrics": ("co_firstlineno", "line one"),
        "dynamo_start": ("stack", 5),
        "artifact": None,
    }
    for i, line in enumerate(lines):
        prefix, brace, meta_text = line.partition("] {")
        meta = json.loads(brace[-1:] + meta_text) if brace else {}
        kind = next(iter(meta), None)
        if kind not in edits or (
            kind == "artifact" and meta[kind].get("name") != "recompile_reasons"
        ):
            continue
        edit = edits.pop(kind)
        if edit is None:
            meta[kind] = [meta[kind]["name"]]  # a list where torch writes an object
        else:
            meta[kind][edit[0]] = edit[1]
        lines[i] = f"{prefix}] {json.dumps(meta)}\n"
    assert not edits
    edited = tmp_path / "trace"
    edited.mkdir()
    (edited / source.name).write_text("".join(lines))
    whole, damaged = read_trace(recorded.trace_dir), read_trace(edited)
    assert whole.stats.bad_records == 0 and whole.stats.bad_record_kinds == {}
    assert damaged.stats.bad_record_kinds == {
        "compilation_metrics": 1,
        "dynamo_start": 1,
        "artifact": 1,
    }
    assert (
        damaged.stats.bad_records == 3
        and "3 record(s) with fields of unexpected types" in damaged.stats.describe()
    )
    compiles = [
        [e.compile_id for e in run.events[0] if isinstance(e, Compile)] for run in (whole, damaged)
    ]
    assert len(compiles[1]) == len(compiles[0]) - 1 and set(compiles[1]) < set(compiles[0])


def test_guard_tree_with_a_long_line_is_read_in_linear_time() -> None:
    """A guard tree whose global-state line is long (a large JSON of torch's state) is read in time linear in
    its size: the sites where a guard was traced are still found, in milliseconds, not the seconds the
    site pattern took when tried at every position of that line."""
    from recompprof._analysis.trace.frames import guarded_args

    state = ",".join(f'"k{i}":{i}' for i in range(20_000))  # ~280 KB, one line, no spaces
    payload = "\n".join(
        [
            "TREE_GUARD_MANAGER:",
            "+- RootGuardManager",
            f"| +- GLOBAL_STATE: ___check_global_state() against {{{state}}}",
            "| +- GuardManager: source=L['k'], accessed_by=FrameLocalsGuardAccessor(key='k', "
            "framelocals_idx=0), type=<class 'int'>, tag_safe=(False, False)",
            "| | +- EQUALS_MATCH: L['k'] == 499        #   # model/net.py:6 in forward",
        ]
    )
    began = time.process_time()
    guarded = guarded_args(payload)
    took = time.process_time() - began
    assert guarded.traced == frozenset({("model/net.py", 6, "forward")})
    assert guarded.first_local == "k" and guarded.classes == {"k": "int"}
    assert took < 0.15, f"reading one guard tree took {took:.2f} s of CPU"
