"""Rank divergence stays readable: the text tables at 80 columns and up with the longest frame labels real runs
produce, and the HTML page with the text report's whole divergence detail (checked in headless Chromium).

The labels are those live capture and ingest give DDP's compiled forward, its ``_inside_ddp_forward`` context
manager and the resume function of contextlib's ``__init__`` (tests/test_diff_live_ingest.py records them), and a
transformers 5 model's stacked decorators; rank 1 alone recompiles them at step 3.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from recompprof._analysis.render.html import render_html
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.model import Report
from recompprof._model.events import Compile, Event, Frame, Reason, SessionStart

SITE = "/venv/lib/python3.11/site-packages"
LIB = "/root/.pyenv/versions/3.11.7/lib/python3.11"
DDP = f"{SITE}/torch/nn/parallel/distributed.py"
# One row a frame: its label, where it is defined, torch's code object (file, first line), the instance's class.
FRAMES = [
    Frame(name=name, file=file, line=line, code_file=code_file, code_line=code_line, owner=owner)
    for name, file, line, code_file, code_line, owner in [
        (
            "DistributedDataParallel.forward",
            DDP,
            1884,
            f"{SITE}/torch/_dynamo/external_utils.py",
            67,
            "DistributedDataParallel",
        ),
        (
            "DistributedDataParallel._inside_ddp_forward",
            DDP,
            1695,
            f"{LIB}/contextlib.py",
            299,
            "DistributedDataParallel",
        ),
        (
            "_GeneratorContextManagerBase.torch_dynamo_resume_in___init___at_105",
            f"{LIB}/contextlib.py",
            105,
            f"{LIB}/contextlib.py",
            105,
            None,
        ),
        (
            "Qwen2MoeForCausalLM.forward",
            f"{SITE}/transformers/models/qwen2_moe/modeling_qwen2_moe.py",
            604,
            f"{SITE}/transformers/utils/generic.py",
            937,
            "Qwen2MoeForCausalLM",
        ),
    ]
]
STEP = 3


def _events() -> list[Event]:
    events: list[Event] = [
        SessionStart(
            time=0.0,
            rank=rank,
            step=0,
            run_id="job",
            local_rank=rank,
            world_size=2,
            host="h",
            pid=100 + rank,
            versions={},
            mode="monitor",
            recompile_limit=8,
        )
        for rank in (0, 1)
    ]
    for number, frame in enumerate(FRAMES):
        for rank in (0, 1):
            events.append(
                Compile(
                    time=1.0,
                    rank=rank,
                    step=0,
                    frame=frame,
                    compile_id=f"{number}/0",
                    is_recompile=False,
                )
            )
        events.append(
            Compile(
                time=2.0,
                rank=1,
                step=STEP,
                frame=frame,
                compile_id=f"{number}/1",
                is_recompile=True,
                reasons=[
                    Reason(
                        text="tensor 'L['args'][0]' size mismatch at index 0. expected 8, actual 12",
                        category="size",
                        subject="L['args'][0]",
                        explains_change=True,
                    )
                ],
            )
        )
    return events


@pytest.fixture(scope="module")
def report() -> Report:
    return build_report(_events())


def _section(text: str) -> str:
    """The matrix and the diverging table (the one-line list between them is soft-wrapped on purpose: one
    line per diverging frame, for grep)."""
    matrix = text[text.index("Compiles per frame and rank") : text.index("DIVERGING:")]
    table = text[text.index("Diverging across ranks") :]
    return matrix + table[: table.index("Limits:")] if "Limits:" in table else matrix + table


@pytest.mark.parametrize("width", [80, 100, 120, 160])
def test_divergence_tables_fit_the_width_and_keep_every_figure_whole(
    report: Report, width: int
) -> None:
    """At 80 columns and up, no line of the divergence section is wider than the console; every header word,
    every figure (``1/0``, ``2/1``, the step, the categories) prints whole, never cut inside a word, and each
    label prints in full, wrapped only between words and after a path's ``/``."""
    section = _section(render_text(report, width=width))
    lines = section.splitlines()
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    words = {w for line in lines for w in line.replace("│", " ").replace("┃", " ").split()}
    # Column names print whole (in the table's header, or before each value of a row printed as a record).
    for header in (
        "rank",
        "Diverging",
        "ranks",
        "(first",
        "divergent",
        "step)",
        "Differs",
        "These",
    ):
        assert header in words, (header, section)
    # Figures are never cut: each prints as a whole word (cells wrap between words only).
    for figure in ("1/0", "2/1", "step", str(STEP), "size", "-", "recompiles", "0:"):
        assert figure in words or figure + "," in words, (figure, section)
    joined = "".join(section.split())
    for frame in FRAMES:
        assert "".join(frame.label.split()) in joined.replace("│", "").replace("*", ""), (
            frame.label,
            section,
        )


CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)


@pytest.mark.servers
@pytest.mark.skipif(CHROMIUM is None, reason="needs a Chromium binary")
def test_html_shows_the_divergence_detail_the_text_report_has(
    report: Report, tmp_path: Path
) -> None:
    """The HTML page of a multi-rank run, as Chromium renders it, holds what the text report says of
    divergence: each diverging frame with its odd rank and first divergent step, what differs, what the odd
    rank and the others did, and the per-rank matrix of compiles/recompiles."""
    page = tmp_path / "report.html"
    page.write_text(render_html(report))
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    profile.mkdir()
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    section = dom[dom.index('<section id="divergence">') :]
    section = section[: section.index("</section>")]
    for frame in FRAMES:
        described = f"{frame.label}: rank 1 at step {STEP} (recompiles, reason categories differ from rank 0)"
        assert described in section.replace("&lt;", "<").replace("&gt;", ">"), described
    table = section[section.index('id="diverging-table"') : section.index('id="rank-matrix"')]
    assert table.count("<tr>") == 1 + len(FRAMES)
    assert "recompiles 1, limit hits 0, reasons size" in table
    assert "rank 0: recompiles 0, limit hits 0, reasons -" in table
    matrix = section[section.index('id="rank-matrix"') :]
    assert "<th>rank 0</th><th>rank 1</th>" in matrix
    assert matrix.count("<td>1/0</td><td>2/1</td>") == len(FRAMES)
