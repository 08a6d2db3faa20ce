"""What the report and ``ingest`` say about one real run agrees, in the same words, and the tables stay readable.

The run: the CPU workload under ``attach()`` and ``TORCH_TRACE`` with ``aot_eager`` (so backward compiles) and
``recompile_limit`` 2 (so limit hits).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from needs import starts
from recorded_runs import RecordedRun, cli, record

from recompprof._analysis.render.plaintext import units
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._eventlog.reader import read_run


@pytest.fixture(scope="module")
@starts("workload")
def limited(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return record(
        tmp_path_factory.mktemp("limited"),
        "--steps",
        "12",
        "--recompile-limit",
        "2",
        "--backend",
        "aot_eager",
    )


def test_a_limit_hit_explains_no_change(limited: RecordedRun) -> None:
    """Changes (recompiles a reason explains) add up to the recompiles, per frame and per category: a compile the
    recompile limit refused compiled nothing, so its reasons are guard failures but no change."""
    report = build_report(read_run(limited.run_dir))
    assert report.limit_hits > 0 and report.recompiles > 0
    for frame in report.frames.values():
        assert sum(g.changes for g in frame.reasons.values()) == frame.recompiles, frame.label
    assert sum(report.frames.categories.values()) == report.recompiles


def test_ingest_states_the_counts_the_report_states(limited: RecordedRun, tmp_path: Path) -> None:
    """`recompprof ingest` prints the counts of what it wrote in the words and figures of the report's header
    (forward compiles, backward ones apart, recompiles, limit hits, graph breaks, failures)."""
    out = tmp_path / "ingested"
    done = cli("ingest", str(limited.trace_dir), "-o", str(out))
    assert done.returncode == 0, done.stderr
    report = cli("report", str(out), "--width", "400")
    header = re.search(r"compiles \d+ .*\| failures \d+", report.stdout)
    assert header is not None and "(+" in header.group(0)  # the backward compiles, apart
    assert header.group(0) in done.stdout


def _pieces(word: str) -> set[str]:
    """The parts of ``word`` a wrapped label may show on one line: runs of its path parts (cut after a ``/``)."""
    parts = units(word)
    return {"".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}


@pytest.mark.parametrize("width", [80, 120, 160])
def test_tables_wrap_labels_between_words_and_path_parts(limited: RecordedRun, width: int) -> None:
    """At 80, 120 and 160 columns the report fits the width, and every word it prints is a whole word of the
    unwrapped report or a part of one cut after a '/' (a path), never a word cut anywhere else; where the tables
    cannot fit (80 columns), each row prints as a record."""
    report = build_report(read_run(limited.run_dir))
    whole = set(render_text(report, width=1000).split())
    allowed = whole | {piece for word in whole for piece in _pieces(word)} | {"·"}
    text = render_text(report, width=width)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    cut = sorted(
        {token for token in text.split() if token not in allowed and set(token) != {"─"}}
    )  # not a rule
    assert cut == [], f"words cut inside at {width} columns: {cut[:10]}"
    labels = [frame.label for frame in report.frames.values()]
    assert any(
        label in text for label in labels
    )  # whole: in a column that holds it, or on a record's first line
    as_records = (
        re.search(r"^ {4}Compiles \d+ .* · Recompiles \d+ · ", text, re.MULTILINE) is not None
    )
    if (
        width != 120
    ):  # the frames table fits 160 columns, not 80 (120 depends on the labels' lengths)
        assert as_records == (width == 80), text
