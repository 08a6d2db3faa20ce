"""The text report's header line (run, ranks, mode, steps, steady-state basis, counts, compile time) wraps
at the width between its `` | ``-separated fields, never inside one, and each line fits the width: in
``render_text`` and in ``recompprof report`` at the terminal's width ($COLUMNS), on a real recorded run."""

from __future__ import annotations

import pytest
from needs import starts
from recorded_runs import RecordedRun, cli, record

from recompprof import build_report, read_run
from recompprof._analysis.render.text import render_text

WIDTHS = (80, 100)


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return record(
        tmp_path_factory.mktemp("header"), "--steps", "12", trace=False
    )  # as the CLI tests


def _one_line(run: RecordedRun) -> str:
    """The header line as a report wide enough for it prints it."""
    return render_text(build_report(read_run(run.run_dir)), width=1000).splitlines()[2]


def _header(text: str, one_line: str) -> list[str]:
    """The lines the header line took: those after the title whose words, joined, give the one-line form."""
    lines = [line.rstrip() for line in text.splitlines()[2:]]
    for count in range(1, len(lines) + 1):
        if " ".join(lines[:count]) == one_line:
            return lines[:count]
    raise AssertionError(f"the header line is not at the top of the report: {lines[:6]}")


def _assert_wrapped_between_fields(lines: list[str], one_line: str, width: int) -> None:
    fields = one_line.split(" | ")
    assert len(lines) > 1, f"a header of {len(one_line)} columns fits {width}: no wrap was tested"
    assert all(len(line) <= width for line in lines), [len(line) for line in lines]
    assert all(line.endswith(" |") for line in lines[:-1]), lines  # each break replaces a " | "
    assert [part for line in lines for part in line.removesuffix(" |").split(" | ")] == fields


@pytest.mark.parametrize("width", WIDTHS)
def test_render_text_wraps_the_header_between_fields(recorded: RecordedRun, width: int) -> None:
    """render_text at the width: the header's lines are its fields in order, a line break only where a
    `` | `` was, and no line wider than the width."""
    one_line = _one_line(recorded)
    text = render_text(build_report(read_run(recorded.run_dir)), width=width)
    _assert_wrapped_between_fields(_header(text, one_line), one_line, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_report_command_wraps_the_header_at_the_terminal_width(
    recorded: RecordedRun, width: int
) -> None:
    """``COLUMNS=<width> recompprof report RUN``: the header fits the terminal, broken between fields,
    even where the tables keep their least width of 100 columns."""
    one_line = _one_line(recorded)
    done = cli("report", str(recorded.run_dir), COLUMNS=str(width))
    assert done.returncode == 0, done.stderr
    _assert_wrapped_between_fields(_header(done.stdout, one_line), one_line, width)


def test_a_field_wider_than_the_line_wraps_between_its_words(recorded: RecordedRun) -> None:
    """At a width narrower than a field, that field alone is broken (between words); the others stay whole
    and every line fits."""
    one_line = _one_line(recorded)
    widest = max(one_line.split(" | "), key=len)
    width = len(widest) - 4
    text = render_text(build_report(read_run(recorded.run_dir)), width=width)
    lines = _header(text, one_line)
    assert all(len(line) <= width for line in lines), lines
    whole = [f for f in one_line.split(" | ") if len(f) + 2 <= width]
    pieces = {part for line in lines for part in line.removesuffix(" |").split(" | ")}
    assert set(whole) <= pieces, set(whole) - pieces
