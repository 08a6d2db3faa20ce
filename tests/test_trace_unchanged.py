"""TORCH_TRACE reads the same with recompprof attached as without it, byte for byte, but for the training step
recompprof hands torch for each compile record (``recompile_user_contexts``, from torch 2.9).

The job (tests/workloads/trace_calls.py) runs three times: twice without recompprof, once with it. What
differs between any two runs is masked in all three: each line's time and pid, timings, and any other token
that differs between the two runs without recompprof (addresses, ids, digests of timed payloads); everything
else must match line for line.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._logging
from recorded_runs import TESTS, clean_env

import recompprof
from recompprof._eventlog.reader import read_run
from recompprof._model.events import GraphBreak
from recompprof._torch.versions import torch_info

JOB = TESTS / "workloads" / "trace_calls.py"
# Tokens that may differ between two runs: addresses, uuids (in compiled functions' names), payload digests and
# numbers (times, pids, ids).
_TOKEN = re.compile(
    r"0x[0-9a-f]+|[0-9a-f]{8}(?:[-_][0-9a-f]{4}){3}[-_][0-9a-f]{12}|[0-9a-f]{32}|\d+(?:\.\d+)?"
)


def _trace(trace: Path, *args: str) -> list[str]:
    """The TORCH_TRACE lines of one run of the job, times and pids masked (every run in one working directory:
    torch records it)."""
    env = clean_env(
        TORCH_TRACE=str(trace), PYTHONPATH=":".join([str(TESTS / "workloads"), *sys.path])
    )
    proc = subprocess.run(
        [sys.executable, str(JOB), *args],
        env=env,
        cwd=trace.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [log] = trace.glob("*.log")
    return [_normal(line) for line in log.read_text(encoding="utf-8").splitlines()]


# The glog prefix of every line ("V1124 01:35:20.300000 12347 file:line]"): its time and pid.
_PREFIX = re.compile(r"^([A-Z])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")
# Timings (times, durations, overheads in s, ms or us), which two runs may by chance share.
_TIMING = re.compile(r'("(?:ts|dur|[a-z_]*(?:time|_s|_ms|_us))": )-?\d+(?:\.\d+)?(?:e-?\d+)?')
_STEP = re.compile(r'"recompile_user_contexts": \["recompprof step \d+"\]')


def _normal(line: str) -> str:
    return _TIMING.sub(r"\1*", _PREFIX.sub(r"\1<time> <pid> ", line))


def _masked(line: str, volatile: set[int]) -> tuple[list[str], list[str]]:
    """A line as its text between tokens and its tokens, with the ``volatile`` tokens masked."""
    tokens = _TOKEN.findall(line)
    return _TOKEN.split(line), ["*" if i in volatile else t for i, t in enumerate(tokens)]


def _differences(a: list[str], b: list[str], attached: list[str]) -> list[str]:
    """Lines where ``attached`` differs from ``a`` outside what differs between ``a`` and ``b`` (two runs without)."""
    assert len(a) == len(b), (
        "two runs without recompprof differ in length: the job is not deterministic"
    )
    found = (
        [f"{len(attached)} lines with recompprof, {len(a)} without"]
        if len(attached) != len(a)
        else []
    )
    for number, (x, y, z) in enumerate(zip(a, b, attached, strict=False)):
        x_tokens, y_tokens = _TOKEN.findall(x), _TOKEN.findall(y)
        assert _TOKEN.split(x) == _TOKEN.split(y) and len(x_tokens) == len(y_tokens), (
            f"line {number + 1}: {x[:300]!r} vs {y[:300]!r}"
        )
        volatile = {i for i, (p, q) in enumerate(zip(x_tokens, y_tokens, strict=True)) if p != q}
        if _masked(x, volatile) != _masked(z, volatile):
            found.append(f"line {number + 1}:\n  without: {x[:300]}\n  with:    {z[:300]}")
    return found


@pytest.mark.workload
def test_torch_trace_is_unchanged_by_recompprof(tmp_path: Path) -> None:
    """A TORCH_TRACE of a job that compiles (graph breaks, a recompile, a backward) and calls trace_structured
    outside any compile (so torch records the caller's stack) is byte-identical with recompprof attached, up to
    what differs between any two runs and the step in each compile record; and recompprof still records every
    graph break the trace holds."""
    a, b = _trace(tmp_path / "trace_a"), _trace(tmp_path / "trace_b")
    attached = _trace(tmp_path / "trace_attached", "--attach", str(tmp_path / "run"))
    compiles = sum('{"compilation_metrics": ' in line for line in attached)
    stepped = sum(bool(_STEP.search(line)) for line in attached)
    assert stepped == (compiles if torch_info().has("recompile_user_context") else 0)
    attached = [_STEP.sub('"recompile_user_contexts": null', line) for line in attached]
    differences = _differences(a, b, attached)
    assert not differences, "\n".join(differences[:5])
    breaks = [e for e in read_run(tmp_path / "run") if isinstance(e, GraphBreak)]
    traced = sum('"name": "dynamo_graph_break_reason"' in line for line in attached)
    if torch_info().has(
        "graph_break_trace"
    ):  # older torch traces no breaks (they are read from its counters)
        assert traced >= 3 and sum(e.count for e in breaks) == traced


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _log_outside_compile() -> None:
    torch._logging.trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": "late_handler", "encoding": "string"},
        payload_fn=lambda: "payload",
    )


def test_trace_handler_added_after_attach_gets_each_records_own_caller(tmp_path: Path) -> None:
    """With a trace handler added after attach (recompprof then wraps trace_structured), the record of a call
    outside a compile is stamped with its caller's file and line, and the ``str`` records torch interns on the
    way keep torch's own; graph breaks are still recorded."""
    trace_log = logging.getLogger("torch.__trace")  # torch._logging._internal.trace_log
    handler = _Records()
    with recompprof.attach(run_dir=str(tmp_path / "run")) as session:
        assert session.signals["graph_breaks"]
        trace_log.addHandler(handler)
        try:
            _log_outside_compile()
            torch.compile(_breaks, backend="eager")(torch.ones(2))
        finally:
            trace_log.removeHandler(handler)
    [ours] = [
        r for r in handler.records if r.metadata.get("artifact", {}).get("name") == "late_handler"
    ]  # type: ignore[attr-defined]
    assert (ours.pathname, ours.funcName) == (__file__, "_log_outside_compile")
    interned = [r for r in handler.records if "str" in r.metadata]  # type: ignore[attr-defined]
    assert interned and all(r.pathname.endswith("structured.py") for r in interned)
    assert any(isinstance(e, GraphBreak) for e in read_run(tmp_path / "run"))


def _breaks(x: torch.Tensor) -> torch.Tensor:
    x = x + 1
    print("break")
    return x * 2
