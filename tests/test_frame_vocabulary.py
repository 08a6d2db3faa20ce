"""The frame rule over a generated grid (decorator kind × stacking depth × host, tests/workloads/frame_vocabulary.py),
live and ingested.

One recorded run compiles every combination (``backend="eager"``) under ``recompprof.attach()`` and
``TORCH_TRACE``. For each compile, the workload reads the function it ran from torch's own compile frame (the
code object, the closure cells it compiles with: each wrapper's ``func`` cell followed down to the function the
user wrote, and the first argument for the instance's class); the expectation is never read from recompprof.
Live capture must name every compile exactly so; ingest of the trace must give the same code object and either
the same name and class, or, where docs/frames.md says the trace cannot tell, the documented "unknown": no class
(the function's qualified name), or the wrapper's own name by the live class. Never another function.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agreement import Recorded, record
from needs import starts

from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, Frame

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "frame_vocabulary.py"


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recorded, dict[str, Any]]:
    where = tmp_path_factory.mktemp("vocabulary")
    run = record(WORKLOAD, ["out"], where, timeout=900)  # out/ of the run's own directory
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    return run, json.loads((where / "out" / "expected.json").read_text())


def _compiles(events: Any) -> dict[str, Frame]:
    return {e.compile_id: e.frame for e in events if isinstance(e, Compile) and not e.backward}


def _live_matches(frame: Frame, want: dict[str, Any]) -> bool:
    named = (frame.name, frame.owner) == (want["name"], want["owner"])
    # A bare wrapper (no functools.wraps) on the way shows where its own code is (docs/frames.md).
    return named and (want["bare"] or (frame.file, frame.line) == (want["file"], want["line"]))


def test_the_grid_covers_every_kind_depth_and_host(
    recorded: tuple[Recorded, dict[str, Any]],
) -> None:
    """Every combination of the grid compiled at least one frame whose function is known."""
    _, expected = recorded
    grid = expected["grid"]
    combinations = Counter(want["combination"] for want in expected["compiles"].values())
    # 31 stacks on 8 hosts, less the 10 stacks holding a bare wrapper on "calls" (frame_vocabulary.grid)
    assert len(grid) == 31 * 8 - 10 and set(combinations) == set(range(len(grid)))


def test_live_names_every_compile_after_the_function_it_ran(
    recorded: tuple[Recorded, dict[str, Any]],
) -> None:
    """Each compile live capture records is named after the function its call ran, by the instance's class for
    a method, at that function's file and line."""
    run, expected = recorded
    live = _compiles(read_run(run.run_dir))
    wrong = {
        cid: (want, live[cid].label, live[cid].owner)
        for cid, want in expected["compiles"].items()
        if not _live_matches(live[cid], want)
    }
    assert not wrong, (len(wrong), len(expected["compiles"]), list(wrong.items())[:8])


def test_ingest_names_every_compile_as_live_or_as_a_documented_unknown(
    recorded: tuple[Recorded, dict[str, Any]],
) -> None:
    """Ingest gives every compile the live code object, and the live name and class, or the documented unknown:
    no class with the function's qualified name, or the wrapper's own name by the live class."""
    run, expected = recorded
    traced = _compiles(e for per in read_trace(run.trace_dir).events for e in per)
    outcome: Counter[str] = Counter()
    wrong = {}
    for cid, want in expected["compiles"].items():
        frame = traced[cid]
        code = want["code"]
        assert (frame.code_file, frame.code_line) == (code[0], code[1]), cid
        if _live_matches(frame, want):
            outcome["as live"] += 1
        elif frame.owner is None and frame.name == want["name"].replace(
            f"{want['owner']}.", _defining(want), 1
        ):
            outcome["no class"] += 1
        elif frame.owner == want["owner"] and frame.name == ".".join(
            filter(None, (want["owner"], code[2]))
        ):
            outcome["wrapper's own name"] += 1
        else:
            wrong[cid] = (want, frame.label, frame.owner)
    assert not wrong, (len(wrong), outcome, list(wrong.items())[:8])
    print(
        f"grid {len(expected['grid'])} combinations, {len(expected['compiles'])} compiles: {outcome}"
    )


def _defining(want: dict[str, Any]) -> str:
    """The prefix a method's qualified name has (its defining class), read from the generated source."""
    source = Path(want["file"]).read_text().splitlines()
    for line in reversed(source[: want["line"]]):
        if line.startswith("class "):
            return line.split()[1].split("(")[0] + "."
    return ""
