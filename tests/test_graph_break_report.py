"""Graph breaks in the terminal and HTML reports: reason, the user's file:line, torch's hints, whether the
frame ran eagerly (torch could not resume), and a count, bounded however many distinct breaks a job has."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from needs import starts
from recorded_runs import TESTS, clean_env

from recompprof._analysis.render.html import render_html
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.bounded import MAX_BREAK_GROUPS
from recompprof._analysis.report.fold import build_report
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Frame, GraphBreak
from recompprof._torch.versions import torch_info

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)
# Below this gate torch's counters give breaks with no place, hints or eager flag to show.
traced_breaks = pytest.mark.skipif(
    not torch_info().has("graph_break_trace"), reason="torch traces no graph breaks"
)


@pytest.fixture(scope="module")
@starts("workload")
def breaks_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real job with a break torch resumes after and two it cannot resume from (tests/workloads/unresumable.py)."""
    where = tmp_path_factory.mktemp("breaks")
    script = where / "job.py"
    script.write_text(
        "import recompprof, unresumable\nwith recompprof.attach(run_dir='run'):\n    unresumable.run()\n"
    )
    env = clean_env(PYTHONPATH=":".join([str(TESTS / "workloads"), *sys.path]))
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return where / "run"


def _breaks(run: Path) -> list[GraphBreak]:
    return [e for e in read_run(run) if isinstance(e, GraphBreak)]


@traced_breaks
def test_terminal_report_shows_where_hints_and_eager_frames(breaks_run: Path) -> None:
    """Each graph break row names the user's file:line and whether the frame ran eagerly; torch's hints are listed."""
    events = _breaks(breaks_run)
    resumed = next(e for e in events if not e.skipped_frame)
    assert resumed.hints and all(e.user_location for e in events)
    text = render_text(build_report(read_run(breaks_run)), width=160)
    table = text.split("Graph breaks")[-1]
    for event in events:
        assert event.user_location is not None
        file, line = event.user_location.rsplit(":", 1)
        assert f"{Path(file).name}:{line}" in table
    flat = " ".join(table.split())
    # torch 2.13 skips the frames of the two unresumable breaks (2.10 fails their compile instead)
    rows = flat.split(" Count ", 1)[1]  # past the title and the header
    assert ("ran eagerly" in rows) == any(e.skipped_frame for e in events) and resumed.hints[0][
        :40
    ] in rows


@pytest.mark.servers
@traced_breaks
def test_html_report_shows_where_hints_and_eager_frames(breaks_run: Path, tmp_path: Path) -> None:
    """The HTML graph-break table has one row per reason and place, with the file:line, eager flag, count and hints;
    headless Chromium renders it."""
    events = _breaks(breaks_run)
    page = tmp_path / "report.html"
    page.write_text(render_html(build_report(read_run(breaks_run))))
    dom = page.read_text()
    if CHROMIUM is not None:
        profile = tmp_path / "profile"
        done = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        dom = done.stdout
        assert 'data-ready="1"' in dom, done.stderr[-2000:]
    table = dom.split('id="graph-breaks-table"')[1].split("</table>")[0]
    rows = re.findall(r'<tr data-eager="(yes|no)">', table)
    assert sorted(rows) == sorted("yes" if e.skipped_frame else "no" for e in events)
    for event in events:
        assert event.user_location and event.user_location in table
        for hint in event.hints:
            assert (
                hint.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")[:40] in table
            )


def test_thousands_of_distinct_breaks_stay_bounded() -> None:
    """Graph breaks at 5,000 distinct places fold into at most MAX_BREAK_GROUPS groups plus one for the rest, every
    break counted; the terminal table shows a bounded number of rows."""
    frame = Frame(name="forward", file="/src/net.py", line=10)
    events = [
        GraphBreak(
            time=0.0,
            frame=frame,
            compile_id="0/0",
            reason=f"Unsupported op {i % 7}",
            user_location=f"/src/model.py:{i}",
            hints=[f"hint {i}"],
        )
        for i in range(5000)
    ]
    report = build_report(events)
    assert len(report.breaks.groups) <= MAX_BREAK_GROUPS + 1
    assert sum(g.count for g in report.breaks.groups.values()) == 5000 == report.graph_breaks
    table = render_text(report, width=160).split("Graph breaks")[-1]
    assert table.count("model.py:") <= 25 and "more" in table


def test_graph_break_parser_errors_go_through_the_internal_error_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the graph-break parser raises in strict mode and, in production, is counted as an internal
    error while the break keeps its first line as the reason (it never raises into torch)."""
    from recompprof import _internal
    from recompprof._model import breaks
    from recompprof.testing import raise_internal_errors

    def broken(*args: object) -> object:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(breaks, "_message", broken)
    text = "Graph break in user code at /w/train.py:7\nGraph Break Reason: Unsupported Tensor.item() call\n"
    with pytest.raises(RuntimeError, match="parser bug"):
        breaks.parse_graph_break(text)
    with raise_internal_errors(False):
        parsed = breaks.parse_graph_break(text)
    assert (
        parsed.reason == "Graph break in user code at /w/train.py:7"
        and parsed.user_location is None
    )
    # counted both times: once raised (strict), once swallowed (production)
    assert _internal.counts()["breaks.parse"] == 2
