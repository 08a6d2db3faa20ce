"""Names and lines as the user wrote them: nested functions and closures × graph breaks, a class FSDP2 generates,
and call sites through a library, live and ingested.

The grid (``tests/workloads/user_frames.py``, host × 0-2 graph breaks) is recorded once with recompprof,
``TORCH_LOGS`` and ``TORCH_TRACE``; each compile's expected name is read from torch's own compile frame (the
code's qualified name) and checked against torch's ``TORCH_LOGS`` (``Recompiling function <name>``), never
from recompprof. FSDP2 runs for real on two gloo ranks (``tests/workloads/fsdp_frames.py``).
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from agreement import Recorded, log_records, record
from needs import starts

from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, Event

pytestmark = pytest.mark.torch_compat

WORKLOADS = Path(__file__).resolve().parent / "workloads"
_RECOMPILING = re.compile(r"^Recompiling function (\S+) in ")


@pytest.fixture(scope="module")
@starts("workload")
def grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recorded, dict[str, Any]]:
    where = tmp_path_factory.mktemp("user_frames")
    run = record(WORKLOADS / "user_frames.py", ["out"], where, timeout=900)
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    return run, json.loads((where / "out" / "expected.json").read_text())


@pytest.fixture(scope="module")
@starts("workload")
def fsdp(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    where = tmp_path_factory.mktemp("fsdp_frames")
    run = record(WORKLOADS / "fsdp_frames.py", ["out", str(_free_port())], where, timeout=600)
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    return run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _forward(events: Any) -> dict[tuple[int, str], Compile]:
    return {(e.rank, e.compile_id): e for e in events if isinstance(e, Compile) and not e.backward}


def _ingested(run: Recorded) -> dict[tuple[int, str], Compile]:
    return _forward(e for per in read_trace(run.trace_dir).events for e in per)


def _short(qualname: str) -> str:
    return qualname.rsplit("<locals>.", 1)[-1]


def test_the_grid_compiles_every_host_and_break_count(
    grid: tuple[Recorded, dict[str, Any]],
) -> None:
    """Every combination compiled its function and one resume function per graph break, and torch logged each
    recompile under the name of the code it compiled."""
    run, expected = grid
    compiles = expected["compiles"]
    per = {n: sum(w["combination"] == n for w in compiles.values()) for n in range(12)}
    # each frame compiles twice (two lengths, dynamic=False): 1 + breaks frames per combination
    assert per == {n: 2 * (1 + breaks) for n, (_, breaks) in enumerate(expected["grid"])}
    logged = {
        cid: m.group(1)
        for cid, _, text in log_records(run.stderr)
        if cid is not None and (m := _RECOMPILING.match(text))
    }
    assert logged == {cid: w["co_name"] for cid, w in compiles.items() if cid.endswith("/1")}


def test_live_and_ingest_name_every_compile_as_torch_does(
    grid: tuple[Recorded, dict[str, Any]],
) -> None:
    """Each compile, resume functions of nested functions and of methods of nested classes included, is named
    by its code's qualified name as torch names it (``torch_dynamo_resume_in_select_positive_4_at_60``, never
    the ``__resume_at_<offset>_<n>`` global torch stores it under), live and ingested alike."""
    run, expected = grid
    live, traced = _forward(read_run(run.run_dir)), _ingested(run)
    wrong = {
        cid: (want["qualname"], live[(0, cid)].frame.name, traced[(0, cid)].frame.name)
        for cid, want in expected["compiles"].items()
        if not live[(0, cid)].frame.name == traced[(0, cid)].frame.name == _short(want["qualname"])
    }
    assert not wrong, (len(wrong), len(expected["compiles"]), list(wrong.items())[:6])
    resumed = [w for w in expected["compiles"].values() if "resume_in" in w["co_name"]]
    assert len(resumed) == 2 * 4 * (1 + 2)  # 2 compiles × 4 hosts × 3 resume frames (0 + 1 + 2)
    owners = {
        live[(0, cid)].frame.owner
        for cid, w in expected["compiles"].items()
        if w["co_name"] == "forward"
    }
    assert owners == {f"Net{n}" for n in range(6, 12)}


def _user_line() -> str:
    """``file:line`` of the workload's line that calls the library (its ``# the user's line`` comment)."""
    path = WORKLOADS / "user_frames.py"
    lines = path.read_text().splitlines()
    at = next(n for n, text in enumerate(lines, 1) if text.endswith("# the user's line"))
    return f"{path}:{at} in main"


def test_the_report_shows_the_users_line_with_the_library_frames_below_it(
    grid: tuple[Recorded, dict[str, Any]],
) -> None:
    """A compile reached through a library (a package in a ``site-packages`` folder) is shown "at" the user's
    own line, the innermost frame outside the library, with the library's frames kept below it."""
    run, _ = grid
    events: list[Event] = list(read_run(run.run_dir))
    text = render_text(build_report(events), width=200)
    entries = text.split("Fix these first", 1)[1]
    at = [line.strip() for line in entries.splitlines() if line.strip().startswith("at ")]
    through_library = [a for a in at if "user_frames_generated" not in a]
    assert through_library and all(a == f"at {_user_line()}" for a in through_library), at
    block = entries.split(f"at {_user_line()}", 1)[1].splitlines()[1:3]
    assert [line.strip().split(" in ")[-1] for line in block] == ["run", "_inner"], block
    assert all("site-packages/fakelib/__init__.py" in line for line in block), block
    recorded = [e for e in events if isinstance(e, Compile) and e.call_site]
    assert all(
        e.call_site[-3] == _user_line() for e in recorded if "site-packages" in e.call_site[-1]
    )


def _fsdp2_runs_on_cpu() -> bool:
    """Whether this torch's FSDP2 can shard on CPU (gloo): public ``fully_shard``, and a CPU stream that records
    events (FSDP2's all-gather calls ``record_event`` on it; torch 2.6's CPU stream has none)."""
    import torch

    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        return False
    return hasattr(torch.cpu.Stream, "record_event")


@pytest.mark.skipif(
    not _fsdp2_runs_on_cpu(),
    reason="this torch's FSDP2 cannot run on CPU: no torch.distributed.fsdp.fully_shard, or no CPU "
    "Stream.record_event",
)
def test_a_class_fsdp2_generates_is_named_as_the_users_class(fsdp: Recorded) -> None:
    """FSDP2's ``fully_shard`` swaps the model's class for a generated ``FSDPClassifier``. Every compile of
    the model's forward on both ranks, as torch's trace lists them, is one compile live and ingested: the
    code of ``Classifier.forward``, or torch's wrapper ``inner`` around the module where torch compiles
    through it (2.7, 2.8 and 2.10 compile the wrapper as a frame of its own, its graph broken in FSDP's
    hook, and ``forward`` as the next frame; 2.13 compiles ``forward`` alone). Live, each is ``Classifier.forward``,
    owned by the class the user wrote, and so is each ingested; where torch's guard dumps name no classes
    (type ids only, before 2.9), ingest can name no owner and keeps the wrapper's own name, ``inner``
    (docs/frames.md, "Known limits"). The forward's recompiles are those torch logs on each rank."""
    made = [json.loads((fsdp.where / "out" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(m["generated"] == "FSDP" + m["user"] != m["user"] for m in made), made
    code = _forward_codes(fsdp.trace_dir)
    assert {rank for rank, _ in code} == {0, 1}, code
    live, traced = _forward(read_run(fsdp.run_dir)), _ingested(fsdp)
    user = ("Classifier.forward", "Classifier")
    named = _trace_names_classes(fsdp.trace_dir)
    as_live = {k for k, c in live.items() if (c.frame.name, c.frame.owner) == user}
    assert as_live == set(code), (sorted(as_live), code)
    expected = {
        "forward": ("Classifier.forward", "Classifier" if named else None),
        "inner": user if named else ("inner", None),
    }
    names = {name for name, _ in expected.values()}
    as_ingested = {
        k: (c.frame.name, c.frame.owner) for k, c in traced.items() if c.frame.name in names
    }
    assert as_ingested == {k: expected[name] for k, name in code.items()}
    recompiled = {k for k in code if live[k].is_recompile}
    assert recompiled == {k for k in code if traced[k].is_recompile}
    logged = _logged_recompiles(fsdp.stderr)
    assert {k: n for k, n in logged.items() if n in expected} == {k: code[k] for k in recompiled}
    assert {rank for rank, _ in recompiled} == {0, 1}, logged  # the second batch size recompiled it


_WRAPPER = "_dynamo/external_utils.py"


def _forward_codes(trace_dir: Path) -> dict[tuple[int, str], str]:
    """torch's own list of the model's forward compiles, from the raw ``TORCH_TRACE`` (each compile's
    ``compilation_metrics`` names its code): ``(rank, compile id)`` to ``forward`` (the workload's
    ``Classifier.forward``) or ``inner`` (torch's wrapper around a compiled module), read without recompprof."""
    out: dict[tuple[int, str], str] = {}
    for path in sorted(trace_dir.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '{"compilation_metrics": ' not in line or "] " not in line:
                continue
            record = json.loads(line.split("] ", 1)[1])
            metrics = record["compilation_metrics"]
            name, file = metrics.get("co_name"), str(metrics.get("co_filename"))
            if (name, Path(file).name) == ("forward", "fsdp_frames.py") or (
                name == "inner" and file.replace("\\", "/").endswith(_WRAPPER)
            ):
                out[(int(record["rank"]), metrics["compile_id"])] = name
    return out


# "[rank1]:V1130 04:14:26.492000 16765 torch/_dynamo/guards.py:3006] [1/1] [__recompiles] Recompiling function
# forward in /…/fsdp_frames.py:28": torch's own log line of a recompile on one rank
_RANK_RECOMPILING = re.compile(
    r"^\[rank(\d+)\]:[VIWEDC]\d{4} .*?\] \[(\d+/\d+)(?:_\d+)?\] \[__recompiles\] "
    r"Recompiling function (\S+) in "
)


def _logged_recompiles(stderr: str) -> dict[tuple[int, str], str]:
    """Each recompile torch logged (``TORCH_LOGS=recompiles``): ``(rank, compile id)`` to the code's name."""
    return {
        (int(m.group(1)), m.group(2)): m.group(3)
        for line in stderr.splitlines()
        if (m := _RANK_RECOMPILING.match(line))
    }


def _trace_names_classes(trace_dir: Path) -> bool:
    """Whether torch's guard dumps in a trace name the class of what they guard (``type=<class '...'>``): the
    only place a trace names a module's class."""
    return any("type=<class '" in p.read_text() for p in trace_dir.glob("*.log"))
