"""Corrupt, truncated, huge and adversarial event logs and TORCH_TRACE directories never crash the CLI.

Inputs are mutations of a real recorded run (the CPU workload under ``attach()`` and ``TORCH_TRACE``).
Every command must end with exit 0, 1 or 2 and say what it skipped in ``recompprof:`` lines on stderr,
never with a traceback; a 200 MB line must be skipped without being held in memory.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from needs import starts
from recorded_runs import RecordedRun, clean_env, cli, record

from recompprof._cli.main import main

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HUGE = 200 * 1024 * 1024


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return record(tmp_path_factory.mktemp("fuzz-recorded"), "--steps", "6")


def run_cli(*args: str) -> tuple[int, str, str]:
    """``recompprof._cli.main.main`` in-process with stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def assert_clean_exit(code: int, err: str) -> None:
    assert code in (0, 1, 2), err
    assert "Traceback" not in err
    assert "recompprof bug" not in err, err  # the safety net in main() must never be what caught it
    assert all(line.startswith("recompprof: ") for line in err.splitlines()), err


def _nested(depth: int) -> bytes:
    return (
        b'{"schema_version": 1, "kind": "compile", "frame": '
        + b'{"a": [' * depth
        + b"1"
        + b"]}" * depth
        + b"}"
    )


def _wrong_type(line: bytes, key: str, value: object) -> bytes:
    try:
        data = json.loads(line)
    except (
        ValueError,
        RecursionError,
    ):  # a line an earlier mutation made unparseable stays as it is
        return line
    if not isinstance(data, dict) or not data:
        return line
    target = data
    if isinstance(data.get("frame"), dict) and key.startswith("frame."):
        target, key = data["frame"], key.split(".", 1)[1]
    target[key] = value
    return json.dumps(data, allow_nan=True).encode() + b"\n"


JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["\udcff", "\x00", "NaN", "0/0", "../../etc/passwd"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
FIELDS = st.sampled_from(
    [
        "kind",
        "schema_version",
        "time",
        "step",
        "rank",
        "frame",
        "frame.name",
        "frame.line",
        "compile_id",
        "reasons",
        "phases",
        "duration",
        "outcome",
        "totals",
        "limit",
        "value",
        "count",
        "reason",
        "is_recompile",
        "cache_entries",
        "versions",
        "mode",
    ]
)
MUTATION = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("duplicate"), st.floats(0, 1)),
    st.tuples(st.just("swap"), st.floats(0, 1), st.floats(0, 1)),
    st.tuples(st.just("huge"), st.floats(0, 1), st.integers(10_000, 2_000_000)),
    st.tuples(st.just("wrong_type"), st.floats(0, 1), FIELDS, JSON_VALUES),
    st.tuples(st.just("nested"), st.floats(0, 1), st.integers(100, 200_000)),
    st.tuples(st.just("garbage"), st.floats(0, 1), st.binary(max_size=200)),
)


def mutate(lines: list[bytes], mutations: list[tuple[object, ...]]) -> bytes:
    """Apply ``mutations`` (positions given as fractions of the input) to a log's lines."""
    lines = list(lines)
    for op, *args in mutations:
        at = min(int(float(args[0]) * len(lines)), len(lines) - 1) if lines else 0  # type: ignore[arg-type]
        if op == "truncate":
            data = b"".join(lines)
            lines = [data[: int(float(args[0]) * len(data))]]  # type: ignore[arg-type]
        elif not lines:
            lines = [b"\n"]
        elif op == "flip":
            line = bytearray(lines[at])
            if line:
                line[len(line) // 2] ^= int(args[1]) or 1  # type: ignore[call-overload]
            lines[at] = bytes(line)
        elif op == "duplicate":
            lines.insert(at, lines[at])
        elif op == "swap":
            other = min(int(float(args[1]) * len(lines)), len(lines) - 1)  # type: ignore[arg-type]
            lines[at], lines[other] = lines[other], lines[at]
        elif op == "huge":
            lines.insert(
                at,
                b'{"schema_version": 1, "kind": "graph_break", "time": 1, "reason": "'
                + b"x" * int(args[1])
                + b'"}\n',
            )  # type: ignore[call-overload]
        elif op == "wrong_type":
            lines[at] = _wrong_type(lines[at], str(args[1]), args[2])
        elif op == "nested":
            lines.insert(at, _nested(int(args[1])) + b"\n")  # type: ignore[call-overload]
        elif op == "garbage":
            lines.insert(at, bytes(args[1]) + b"\n")  # type: ignore[arg-type]
    return b"".join(lines)


def _event_log(recorded: RecordedRun) -> Path:
    return next(recorded.run_dir.rglob("*.jsonl"))


@FUZZ
@given(mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_event_logs_never_crash_report_check_or_diff(
    recorded: RecordedRun,
    tmp_path_factory: pytest.TempPathFactory,
    mutations: list[tuple[object, ...]],
) -> None:
    """report, check and diff on a mutated real event log exit 0/1/2 with recompprof: lines, never a traceback."""
    original = _event_log(recorded)
    target = tmp_path_factory.mktemp("mutated") / "rank00000-1.jsonl"
    target.write_bytes(mutate(original.read_bytes().splitlines(keepends=True), mutations))
    for args in (
        ["report", str(target)],
        ["report", str(target), "--strict", "--width", "60"],
        ["check", str(target), "--max-recompiles", "1", "--forbid", "size"],
        [
            "check",
            str(target),
            "--max-total-recompiles",
            "0",
            "--after-step",
            "2",
            "--allow-skipped",
        ],
        ["diff", str(original), str(target), "--allow-skipped", "--max-time-increase", "10"],
    ):
        code, _, err = run_cli(*args)
        assert_clean_exit(code, err)


@FUZZ
@given(mutations=st.lists(MUTATION, min_size=1, max_size=3))
def test_mutated_torch_traces_never_crash_ingest_or_report(
    recorded: RecordedRun,
    tmp_path_factory: pytest.TempPathFactory,
    mutations: list[tuple[object, ...]],
) -> None:
    """ingest and report on a mutated real TORCH_TRACE log exit 0/2 with recompprof: lines, never a traceback."""
    original = next(recorded.trace_dir.glob("dedicated_log_torch_trace*.log"))
    where = tmp_path_factory.mktemp("mutated-trace")
    trace = where / "trace"
    trace.mkdir()
    (trace / original.name).write_bytes(
        mutate(original.read_bytes().splitlines(keepends=True), mutations)
    )
    code, _, err = run_cli("ingest", str(trace), "-o", str(where / "out"))
    assert_clean_exit(code, err)
    code, _, err = run_cli("report", str(trace))
    assert_clean_exit(code, err)


def test_skipped_lines_are_counted_in_one_warning(recorded: RecordedRun, tmp_path: Path) -> None:
    """A log with a corrupt line, a nested bomb and an unknown kind is reported with one warning line of counts."""
    lines = _event_log(recorded).read_bytes().splitlines(keepends=True)
    log = tmp_path / "rank00000-1.jsonl"
    log.write_bytes(
        b"".join(
            [
                lines[0],
                b"{not json\n",
                _nested(100_000) + b"\n",
                b'{"schema_version": 1, "kind": "from_the_future", "time": 1}\n',
                *lines[1:],
            ]
        )
    )
    code, out, err = run_cli("report", str(log))
    assert code == 0 and "recompil" in out.lower()
    assert "skipped 2 corrupt line(s)" in err and "1 line(s) of an event kind" in err
    code, _, err = run_cli("check", str(log), "--max-recompiles", "100")
    assert code == 2 and "--allow-skipped" in err and "Traceback" not in err


@pytest.mark.workload
@pytest.mark.parametrize("kind", ["event_log", "torch_trace"])
def test_a_200mb_line_is_skipped_without_loading_it(
    recorded: RecordedRun, tmp_path: Path, kind: str
) -> None:
    """A 200 MB single line is counted as skipped by the real command, whose peak memory stays far below its size."""
    if kind == "event_log":
        source = _event_log(recorded)
        path = tmp_path / "rank00000-1.jsonl"
        huge = b'{"schema_version": 1, "kind": "graph_break", "time": 1, "reason": "'
    else:
        source = next(recorded.trace_dir.glob("dedicated_log_torch_trace*.log"))
        path = tmp_path / "trace" / source.name
        path.parent.mkdir()
        huge = b'V1121 06:14:19.540000 9596 torch/_dynamo/utils.py:2350] {"str": ["'
    lines = source.read_bytes().splitlines(keepends=True)
    with open(path, "wb") as f:
        f.writelines(lines[:3])
        f.write(huge)
        chunk = b"a" * (1 << 20)
        f.writelines(chunk for _ in range(HUGE // len(chunk)))
        f.write(b'"}\n')
        f.writelines(lines[3:])
    # An intermediate interpreter reports the peak RSS of the command alone.
    probe = (
        "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(p.stderr, file=sys.stderr)"
    )
    target = path if kind == "event_log" else path.parent
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            probe,
            sys.executable,
            "-m",
            "recompprof._cli.main",
            "report",
            str(target),
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    code, peak_kib = (int(x) for x in proc.stdout.split())
    assert code == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "recompprof: warning:" in proc.stderr
    assert peak_kib < 150 * 1024, f"peak RSS {peak_kib} KiB for a {HUGE >> 20} MB line"


def test_real_command_on_garbage_is_one_line(tmp_path: Path) -> None:
    """The installed command run as a subprocess on a binary file and a missing path prints one error line and exits 2."""
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(bytes(range(256)) * 64)
    for target in (junk, tmp_path / "missing"):
        proc = cli("report", str(target))
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("recompprof: error:"), (
            proc.stderr
        )
