"""The HTML report's charts, drawn as SVG (so the page reads the same with scripts blocked)."""

from __future__ import annotations

import html
from collections import Counter

from recompprof._analysis.report.frames import FrameReport
from recompprof._analysis.report.model import Report
from recompprof._model.vocabulary import CATEGORIES, PHASES

MAX_FRAMES_CHARTED = 12
_PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#1f77b4",
    "#d62728",
)
PHASE_COLORS = dict(
    zip(PHASES, ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#e15759", "#bab0ac"), strict=True)
)
CATEGORY_COLORS = {c: _PALETTE[i % len(_PALETTE)] for i, c in enumerate(CATEGORIES)}
CHART_WIDTH = 960


def escape(value: object) -> str:
    """``value`` as HTML text or attribute value."""
    return html.escape(str(value), quote=True)


_e = escape  # short: the markup below calls it on every value


def steps_chart(report: Report, frames: list[FrameReport]) -> str:
    charted = [f for f in frames if f.recompiles][:MAX_FRAMES_CHARTED]
    if not charted:
        return '<p class="empty" id="steps-empty">No recompiles: every frame compiled once.</p>'
    if report.run.last_step == 0:
        return (
            '<p class="empty" id="steps-empty">This run has no training-step information (e.g. ingested from '
            "TORCH_TRACE); see the per-frame counts below.</p>"
        )
    label_w, row_h, top, right = 300, 30, 12, 24
    plot_w = CHART_WIDTH - label_w - right
    height = top + row_h * len(charted) + 40
    last = max(report.run.last_step, 1)

    def x(step: int) -> float:
        return label_w + plot_w * step / last

    parts = [
        f'<svg class="chart chart-steps" viewBox="0 0 {CHART_WIDTH} {height}" role="img" '
        f'aria-label="Recompiles over training steps per frame">'
    ]
    for tick in _ticks(last):
        parts.append(
            f'<line class="grid" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top}" y2="{top + row_h * len(charted)}"/>'
            f'<text class="axis" x="{x(tick):.1f}" y="{top + row_h * len(charted) + 16}" text-anchor="middle">{tick}</text>'
        )
    parts.append(
        f'<text class="axis" x="{label_w + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle">training step</text>'
    )
    for row, frame in enumerate(charted):
        y = top + row * row_h + row_h / 2
        parts.append(
            f'<text class="label" x="{label_w - 8}" y="{y + 4:.1f}" text-anchor="end">{_e(_short(frame.label, 42))}'
            f"<title>{_e(frame.label)}</title></text>"
        )
        parts.append(
            f'<line class="lane" x1="{label_w}" x2="{label_w + plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        for step, count in sorted(Counter(frame.recompile_steps).items()):
            radius = min(4 + 2 * (count - 1), 12)
            parts.append(
                f'<circle class="recompile" cx="{x(step):.1f}" cy="{y:.1f}" r="{radius}">'
                f"<title>{_e(frame.label)}: {count} recompile(s) at step {step}</title></circle>"
            )
        hidden = frame.recompile_steps_total - len(frame.recompile_steps)
        if hidden > 0:
            parts.append(
                f'<text class="axis" x="{label_w + plot_w + 2}" y="{y + 4:.1f}">+{hidden}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _ticks(last: int) -> list[int]:
    step = max(1, _nice(last / 8))
    return list(range(0, last + 1, step))


def _nice(raw: float) -> int:
    for base in (
        1,
        2,
        5,
        10,
        20,
        25,
        50,
        100,
        200,
        250,
        500,
        1000,
        2000,
        5000,
        10000,
        20000,
        50000,
        100000,
    ):
        if base >= raw:
            return base
    return int(raw)


def category_chart(report: Report) -> str:
    failures: Counter[str] = Counter()
    changes: Counter[str] = Counter()
    for frame in report.frames.values():
        for group in frame.reasons.values():
            failures[group.category] += group.failures
            changes[group.category] += group.changes
    rows = sorted(
        (c for c in failures if failures[c] or changes[c]),
        key=lambda c: (-changes[c], -failures[c], c),
    )
    if not rows:
        return '<p class="empty" id="categories-empty">No guard failures recorded.</p>'
    label_w, row_h, top, right = 170, 30, 8, 90
    plot_w = CHART_WIDTH - label_w - right
    height = top + row_h * len(rows) + 30
    peak = max(max(failures.values()), max(changes.values()), 1)
    parts = [
        f'<svg class="chart chart-categories" viewBox="0 0 {CHART_WIDTH} {height}" role="img" '
        f'aria-label="Guard failures by category">'
    ]
    for row, category in enumerate(rows):
        y = top + row * row_h
        color = CATEGORY_COLORS.get(category, "#888")
        wf = plot_w * failures[category] / peak
        wc = plot_w * changes[category] / peak
        parts.append(
            f'<text class="label" x="{label_w - 8}" y="{y + 19}" text-anchor="end">{_e(category)}</text>'
        )
        parts.append(
            f'<rect class="bar failures" data-category="{_e(category)}" x="{label_w}" y="{y + 4}" width="{wf:.1f}" '
            f'height="{row_h - 8}" fill="{color}" fill-opacity="0.35"><title>{_e(category)}: '
            f"{failures[category]} guard failure(s)</title></rect>"
        )
        parts.append(
            f'<rect class="bar changes" data-category="{_e(category)}" x="{label_w}" y="{y + 8}" width="{wc:.1f}" '
            f'height="{row_h - 16}" fill="{color}"><title>{_e(category)}: {changes[category]} recompile(s) '
            f"explained</title></rect>"
        )
        parts.append(
            f'<text class="value" x="{label_w + max(wf, wc) + 6:.1f}" y="{y + 19}">'
            f"{changes[category]} / {failures[category]}</text>"
        )
    legend_y = top + row_h * len(rows) + 18
    parts.append(
        f'<text class="axis" x="{label_w}" y="{legend_y}">solid: recompiles explained · pale: guard failures '
        "(one per failing cache entry)</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def phase_chart(report: Report, frames: list[FrameReport]) -> str:
    total = sum(report.frames.phases.values())
    if total <= 0:
        return '<p class="empty" id="phases-empty">No compile time recorded.</p>'
    charted = sorted(
        (f for f in frames if f.compile_seconds > 0), key=lambda f: -f.compile_seconds
    )[:MAX_FRAMES_CHARTED]
    rows: list[tuple[str, dict[str, float], float]] = [("all frames", report.frames.phases, total)]
    rows += [(f.label, f.phases, f.compile_seconds) for f in charted]
    label_w, row_h, top, right = 300, 28, 34, 80
    plot_w = CHART_WIDTH - label_w - right
    height = top + row_h * len(rows) + 10
    parts = [
        f'<svg class="chart chart-phases" viewBox="0 0 {CHART_WIDTH} {height}" role="img" aria-label="Compile time by phase">'
    ]
    lx = 8
    for phase in PHASES:
        parts.append(
            f'<rect x="{lx}" y="6" width="12" height="12" fill="{PHASE_COLORS[phase]}"/>'
            f'<text class="axis" x="{lx + 16}" y="16">{_e(phase)}</text>'
        )
        lx += 16 + 8 * len(phase) + 18
    for row, (label, phases, seconds) in enumerate(rows):
        y = top + row * row_h
        parts.append(
            f'<text class="label{" total" if row == 0 else ""}" x="{label_w - 8}" y="{y + 18}" text-anchor="end">'
            f"{_e(_short(label, 42))}<title>{_e(label)}</title></text>"
        )
        x = float(label_w)
        # Frames are scaled to the whole run, so bar lengths compare across rows.
        for phase in PHASES:
            value = phases.get(phase, 0.0)
            if value <= 0:
                continue
            w = plot_w * value / total
            parts.append(
                f'<rect class="seg" data-phase="{phase}" x="{x:.1f}" y="{y + 4}" width="{max(w, 0.5):.1f}" height="{row_h - 8}" '
                f'fill="{PHASE_COLORS[phase]}"><title>{_e(label)}: {phase} {value:.3f} s '
                f"({100 * value / seconds if seconds else 0:.0f} %)</title></rect>"
            )
            x += w
        parts.append(f'<text class="value" x="{x + 6:.1f}" y="{y + 18}">{seconds:.2f} s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
