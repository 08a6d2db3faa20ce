"""The HTML report, rendered by real headless Chromium: charts drawn, key figures shown, nothing fetched."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from needs import starts
from recorded_runs import RecordedRun, cli, record

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a Chromium binary")


@pytest.fixture(scope="module")
@starts("workload")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[RecordedRun, Path]:
    where = tmp_path_factory.mktemp("html")
    run = record(where, "--steps", "12", "--recompile-limit", "3", trace=False)
    out = where / "report.html"
    done = cli("report", str(run.run_dir), "--html", str(out))
    assert done.returncode == 0, done.stderr
    return run, out


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_page_is_self_contained(page: tuple[RecordedRun, Path]) -> None:
    """The page loads nothing at view time: no external scripts, styles, images or fonts."""
    text = page[1].read_text()
    assert not re.search(r"<(script|img|link|iframe)[^>]+(src|href)=", text)
    assert "@import" not in text and "url(" not in text
    assert text.count("<svg") == 3


@pytest.mark.servers
def test_chromium_draws_charts_and_figures(page: tuple[RecordedRun, Path], tmp_path: Path) -> None:
    """After its script runs, the DOM holds the three charts, the per-frame table with reasons and hints, and the key figures."""
    done = _chromium(tmp_path, "--dump-dom", page[1].as_uri())
    dom = done.stdout
    assert 'data-ready="1"' in dom, done.stderr[-2000:]
    steps_chart = dom.split('class="chart chart-steps"')[1].split("</svg>")[0]
    assert (
        steps_chart.count('class="recompile"') == 2
    )  # recompiles at steps 1 and 6; the limit refuses the rest
    categories = re.findall(r'class="bar changes" data-category="(\w+)"', dom)
    assert {"size", "python_constant"} <= set(categories)
    assert (
        len(re.findall(r'class="seg" data-phase="dynamo_trace"', dom)) >= 2
    )  # total row + frame row
    kpi = dict(re.findall(r'id="kpi-([\w-]+)"><div class="v">([^<]+)<', dom))
    assert kpi["recompiles"] == "2" and kpi["limit-hits"] != "0" and kpi["steps"] == "12"
    table = dom.split('id="frames"')[1]
    assert "Net.forward (workloads/train_recompiles.py:34)" in table
    assert "mark_dynamic" in table and "python_constant" in table
    assert "the recompile limit cut in" in dom


@pytest.mark.servers
def test_page_opens_with_the_causes_to_fix_first(
    page: tuple[RecordedRun, Path], tmp_path: Path
) -> None:
    """The first section ranks causes by seconds lost with share, fix hint and example; the KPI shows the seconds
    lost; the cache section says this eager run used no compile cache."""
    from recompprof._analysis.report.fold import build_report
    from recompprof._eventlog.reader import read_run

    report = build_report(read_run(page[0].run_dir))
    dom = _chromium(tmp_path, "--dump-dom", page[1].as_uri()).stdout
    assert dom.index('id="fix-first"') < dom.index('id="steps"')
    table = dom.split('id="fix-first-table"')[1].split("</table>")[0]
    rows = re.findall(r'<tr data-cause="(\w+)">', table)
    assert rows == [c.category for c in report.ranked_causes()] and {
        "size",
        "python_constant",
    } <= set(rows)
    seconds = [float(x) for x in re.findall(r'class="n lost" data-sort="([\d.]+)"', table)]
    assert seconds == sorted(seconds, reverse=True) and sum(seconds) == pytest.approx(
        report.recompile_seconds, abs=1e-3
    )
    assert "mark_dynamic" in table and "size mismatch" in table
    kpi = dict(re.findall(r'id="kpi-([\w-]+)"><div class="v">([^<]+)<', dom))
    assert float(kpi["lost-seconds"]) == pytest.approx(round(report.recompile_seconds, 2))
    assert 'id="caches-empty"' in dom


def _png_size_and_ink(path: Path) -> tuple[int, int, float]:
    """Width, height and the share of non-zero bytes in the (filtered) scanlines: ~0 for a blank page."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    return width, height, sum(1 for b in raw[::7] if b) / len(raw[::7])


@pytest.mark.servers
def test_screenshot_is_not_blank(page: tuple[RecordedRun, Path], tmp_path: Path) -> None:
    """A full-page screenshot has the window's size and real ink on it (a blank page has almost none)."""
    shot = tmp_path / "report.png"
    done = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", page[1].as_uri())
    assert shot.exists(), done.stderr[-2000:]
    width, height, ink = _png_size_and_ink(shot)
    assert (width, height) == (1280, 1600)
    assert ink > 0.02
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    empty_shot = tmp_path / "blank.png"
    _chromium(tmp_path, f"--screenshot={empty_shot}", "--window-size=1280,1600", blank.as_uri())
    assert _png_size_and_ink(empty_shot)[2] < ink / 5
