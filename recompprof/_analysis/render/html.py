"""The HTML report: one self-contained page (inline CSS, SVG and a little JS; nothing fetched at view time).

The charts are drawn as SVG (:mod:`recompprof._analysis.render.html_charts`), so the page reads the same with
scripts blocked (as some CI artifact viewers do); the script only adds table sorting and filtering. Everything shown comes from the
:class:`~recompprof._analysis.report.model.Report`; this module only lays it out.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from recompprof._analysis.render import html_charts
from recompprof._analysis.render.divergence import (
    DIVERGING_COLUMNS,
    DIVERGING_TITLE,
    MATRIX_TITLE,
    describe,
    diverging_headline,
    diverging_rows,
    matrix_rows,
    no_divergence,
)
from recompprof._analysis.render.html_charts import CATEGORY_COLORS, escape as _e
from recompprof._analysis.render.wording import (
    FIX_FIRST,
    automatic_dynamic_notes,
    cause_steps,
    completeness_warnings,
    describe_source,
    fix_text,
    frame_steps,
    frames_in_order,
    hints_for,
    more_causes,
    restart_notes,
    running_at_end,
    share,
    steady_cell,
    steady_figure,
    steady_unknown_notes,
    subject_text,
)
from recompprof._analysis.report.divergence import all_ranks, find
from recompprof._analysis.report.frames import FrameReport
from recompprof._analysis.report.model import Report
from recompprof._model.vocabulary import CACHE_RESULTS, CACHES
from recompprof._version import __version__

MAX_FRAMES_TABLED = 200
MAX_BREAKS_TABLED = 100


def _num(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


# -- tables ------------------------------------------------------------------------------------------


def _reasons_list(frame: FrameReport, hints: dict[str, str]) -> str:
    """A frame's reason groups, each with its category's fix hint and one example."""
    items = []
    for g in frame.top_reasons()[:20]:
        color = CATEGORY_COLORS.get(g.category, "#888")
        items.append(
            f'<li><span class="chip" style="background:{color}">{_e(g.category)}</span> '
            f"<code>{_e(subject_text(g.subject, g.parameter) or '-')}</code> <b>{g.changes}</b> / {g.failures}"
            f'<div class="hint">{_e(hints.get(g.category, ""))}</div>'
            + (
                f"<details><summary>example</summary><pre>{_e(g.example)}</pre></details>"
                if g.example
                else ""
            )
            + "</li>"
        )
    return "".join(items)


def _frame_row(f: FrameReport, hints: dict[str, str], steps_known: bool, steady_known: bool) -> str:
    limit = ", ".join(f"{k} ×{v}" for k, v in f.limit_hits.items()) or "0"
    return (
        f'<tr data-frame="{_e(f.label)}"><td class="frame" title="{_e(f.file)}:{f.line}">{_e(f.label)}</td>'
        f'<td class="n" data-sort="{f.compiles}">{f.compiles}'
        + (f' <span class="bwd">(+{f.backward_compiles} bwd)</span>' if f.backward_compiles else "")
        + f'</td><td class="n">{f.recompiles}</td><td class="n">{_e(steady_cell(f)) if steady_known else "-"}</td>'
        f'<td>{_e(frame_steps(f) if steps_known else "") or "-"}</td><td class="n{" bad" if f.limit_hits else ""}" '
        f'data-sort="{sum(f.limit_hits.values())}">'
        f'{_e(limit)}</td><td class="n">{f.graph_breaks}</td><td class="n">{sum(f.failures.values())}</td>'
        f'<td class="n">{f.compile_seconds:.3f}</td><td><ul class="reasons">{_reasons_list(f, hints) or "-"}</ul></td></tr>'
    )


def _frames_table(
    frames: list[FrameReport],
    hints: dict[str, str],
    *,
    steps_known: bool = True,
    steady_known: bool = True,
) -> str:
    head = (
        "Frame",
        "Compiles",
        "Recompiles",
        "Steady-state",
        "Recompile steps",
        "Limit hits",
        "Graph breaks",
        "Failures",
        "Compile s",
        "Why (category · subject · changes / guard failures) and how to fix",
    )
    rows = [_frame_row(f, hints, steps_known, steady_known) for f in frames[:MAX_FRAMES_TABLED]]
    more = len(frames) - MAX_FRAMES_TABLED
    foot = f'<p class="note">{more} more frame(s) not shown.</p>' if more > 0 else ""
    return (
        f'<input id="filter" type="search" placeholder="filter frames…" aria-label="filter frames">'
        f'<div class="scroll"><table id="frames" class="sortable"><thead><tr>{"".join(f"<th>{_e(h)}</th>" for h in head)}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>{foot}"
    )


def _fix_first(report: Report, hints: dict[str, str]) -> str:
    ranked = report.ranked_causes()
    if not ranked:
        return "<p class='empty' id='fix-first-empty'>No recompiles, so no compile time was lost to them.</p>"
    total = report.compile_seconds
    peak = ranked[0].seconds or 1.0
    rows = []
    for number, cause in enumerate(ranked[:FIX_FIRST], start=1):
        color = CATEGORY_COLORS.get(cause.category, "#888")
        example = f"<pre class='reason'>{_e(cause.example)}</pre>" if cause.example else ""
        if cause.call_site:
            example += (
                "<div class='k'>call site (innermost last)</div><pre class='call-site'>"
                + _e("\n".join(cause.call_site))
                + "</pre>"
            )
        rows.append(
            f'<tr data-cause="{_e(cause.category)}"><td class="n">{number}</td>'
            f'<td><div class="frame">{_e(cause.frame)}</div><span class="chip" style="background:{color}">'
            f"{_e(cause.category)}</span> <code>{_e(subject_text(cause.subject, cause.parameter) or '-')}</code></td>"
            f'<td class="n">{cause.recompiles}</td><td class="n lost" data-sort="{cause.seconds:.6f}">'
            f'<div class="meter" style="width:{100 * cause.seconds / peak:.0f}%"></div>{cause.seconds:.3f}</td>'
            f'<td class="n">{_e(share(cause.seconds, total))}</td><td>{_e(cause_steps(cause))}</td>'
            f'<td class="hint">{_e(fix_text(cause, hints, report))}</td>'
            f"<td>{'<details><summary>example</summary>' + example + '</details>' if example else '-'}</td></tr>"
        )
    head = ("#", "Cause", "Recompiles", "Seconds lost", "Share", "Steps", "Fix hint", "Example")
    foot = f'<p class="note">{_e(more_causes(ranked))}.</p>' if len(ranked) > FIX_FIRST else ""
    return (
        f'<p id="lost-summary">Recompiles cost <b>{report.recompile_seconds:.2f} s</b> of {total:.2f} s compile '
        f"time ({_e(share(report.recompile_seconds, total))}), {len(ranked)} cause(s).</p>"
        f'<div class="scroll"><table id="fix-first-table"><thead><tr>{"".join(f"<th>{_e(h)}</th>" for h in head)}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{foot}"
    )


def _caches(report: Report) -> str:
    if not any(report.compilation.cache_lookups.values()):
        return (
            "<p class='empty' id='caches-empty'>No compile-cache lookups recorded (backends other than Inductor "
            "use neither the FX graph nor the AOTAutograd cache).</p>"
        )
    rows = []
    for cache in CACHES:
        rate = report.cache_hit_rate(cache)
        rows.append(
            (
                cache,
                *(report.compilation.cache_lookups[(cache, r)] for r in CACHE_RESULTS),
                "-" if rate is None else f"{100 * rate:.0f} %",
            )
        )
    return (
        f'<p id="cache-saved">Seconds saved by cache hits (as torch reports them): '
        f"<b>{report.compilation.cache_seconds_saved:.2f} s</b></p>"
        + _simple_table("caches-table", ("Cache", *CACHE_RESULTS, "Hit rate"), rows)
    )


def _trace_functions(report: Report) -> str:
    if not report.compilation.trace_seconds_by_function:
        return ""
    table = _simple_table(
        "trace-functions-table",
        ("User function", "Dynamo trace seconds (exclusive)"),
        ((f, f"{s:.3f}") for f, s in report.compilation.trace_seconds_by_function.most_common(15)),
    )
    return f'<section id="trace-functions"><h2>Which user functions cost Dynamo trace time</h2>{table}</section>'


def _graph_breaks(report: Report) -> str:
    ranked = report.breaks.ranked()
    rows = []
    for group in ranked[:MAX_BREAKS_TABLED]:
        hints = "".join(f"<li>{_e(h)}</li>" for h in group.hints)
        rows.append(
            f'<tr data-eager="{"yes" if group.skipped_frame else "no"}"><td>{_e(group.reason)}</td>'
            f'<td><code>{_e(group.location or "-")}</code></td><td class="frame">{_e(group.frame or "-")}</td>'
            f"<td>{'<span class=bad>ran eagerly</span>' if group.skipped_frame else 'resumed'}</td>"
            f'<td class="n">{group.count}</td><td class="hint">{f"<ul>{hints}</ul>" if hints else "-"}</td></tr>'
        )
    head = ("Reason", "Where (user code)", "Frame", "Then", "Count", "torch's hints")
    more = ranked[MAX_BREAKS_TABLED:]
    foot = (
        f'<p class="note">{len(more)} more place(s), {sum(g.count for g in more)} graph break(s).</p>'
        if more
        else ""
    )
    return (
        "<p>Where: the user's code that broke the graph. Ran eagerly: torch could not resume after the break and "
        "ran the whole frame without compiling it.</p>"
        f'<div class="scroll"><table id="graph-breaks-table"><thead><tr>{"".join(f"<th>{_e(h)}</th>" for h in head)}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{foot}"
    )


def _simple_table(table_id: str, head: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<table id="{table_id}"><thead><tr>{"".join(f"<th>{_e(h)}</th>" for h in head)}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


# -- page --------------------------------------------------------------------------------------------


def render_html(
    report: Report, *, title: str = "recompprof report", warnings: Iterable[str] = ()
) -> str:
    """The whole report as one HTML document (no external resources)."""
    report.require_detail()
    frames, hints = frames_in_order(report), hints_for(report)
    return _PAGE.format(
        title=_e(title),
        meta=_e(_meta(report)),
        cards=_kpi_cards(report, frames),
        notes=_notes(report, warnings),
        divergence=_divergence(report),
        compiling=_compiling_at_end(report),
        steps=html_charts.steps_chart(report, frames),
        categories=html_charts.category_chart(report),
        phases=html_charts.phase_chart(report, frames),
        table=_frames_section(report, frames, hints),
        limits=_limits(frames),
        limit=_e(report.run.recompile_limit),
        breaks=_breaks(report),
        failures=_failures(report),
        css=_CSS,
        js=_JS,
        fix_first=_fix_first(report, hints),
        caches=_caches(report),
        trace_functions=_trace_functions(report),
    )


def _steps_kpi(report: Report) -> int | str:
    if not report.run.from_torch_trace:
        return report.run.last_step
    return f"≥ {report.run.last_step}" if report.run.steps_from_trace else "unknown"


def _steady_kpi(frames: list[FrameReport]) -> int | str:
    steady = sum(f.steady_state_recompiles for f in frames)
    unknown = sum(f.steady_state_unknown for f in frames)
    return steady_figure(steady, unknown) if unknown else steady


def _kpi_cards(report: Report, frames: list[FrameReport]) -> str:
    kpis: list[tuple[str, str, int | float | str]] = [
        ("compiles", "Compiles", report.compiles),
        ("backward-compiles", "Backward compiles", sum(f.backward_compiles for f in frames)),
        ("recompiles", "Recompiles", report.recompiles),
        ("steady", "Steady-state recompiles", _steady_kpi(frames)),
        ("limit-hits", "Recompile-limit hits", report.limit_hits),
        ("graph-breaks", "Graph breaks", report.graph_breaks),
        ("failures", "Compile failures", report.failures),
        ("compile-seconds", "Compile time (s)", round(report.compile_seconds, 2)),
        ("lost-seconds", "Lost to recompiles (s)", round(report.recompile_seconds, 2)),
        (
            "steps",
            "Training steps" + (" (last seen)" if report.sessions.incomplete else ""),
            _steps_kpi(report),
        ),
    ]
    return "".join(
        f'<div class="kpi{" alert" if key in ("limit-hits", "failures") and value else ""}" id="kpi-{key}">'
        f'<div class="v">{_e(_num(value) if isinstance(value, (int, float)) else value)}</div>'
        f'<div class="k">{_e(label)}</div></div>'
        for key, label, value in kpis
    )


def _notes(report: Report, warnings: Iterable[str]) -> str:
    notes = (
        [line for _, line in completeness_warnings(report)] + list(warnings) + list(report.notes)
    )
    notes += automatic_dynamic_notes(report) + steady_unknown_notes(report) + restart_notes(report)
    diverging = report.diverging_frames()
    if diverging:
        notes.append(
            "Recompiles differ across ranks (risk of collective hangs): "
            + "; ".join(
                f"{f.label}: "
                + ", ".join(
                    f"rank {r} {f.ranks.recompiles_by_rank.get(r, 0)}"
                    for r in sorted(report.run.ranks)
                )
                for f in diverging[:5]
            )
        )
    notes_html = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<ul class="notes" id="notes">{notes_html}</ul>' if notes_html else ""


def _divergence(report: Report) -> str:
    """A multi-rank run's divergence, as the text report has it: each diverging frame with its odd ranks,
    their first divergent step and what differs, what those ranks and the others did, and the per-rank
    matrix of compiles."""
    ranks = all_ranks(report)
    if len(ranks) < 2 or not report.frames:
        return ""
    found = find(report)
    columns, rows = matrix_rows(report, ranks, {d.frame.key: d for d in found})
    if found:
        items = "".join(f'<li class="frame">{_e(describe(d))}</li>' for d in found)
        head = (
            f'<p class="bad">{_e(diverging_headline(found))}</p><ul id="diverging">{items}</ul>'
            f"<p>{_e(DIVERGING_TITLE)}</p>"
            + _simple_table("diverging-table", DIVERGING_COLUMNS, diverging_rows(found))
        )
    else:
        head = f'<p class="empty">{_e(no_divergence(ranks))}</p>'
    return (
        f'<section id="divergence"><h2>Ranks</h2>{head}<p>{_e(MATRIX_TITLE)}</p>'
        f'<div class="scroll">{_simple_table("rank-matrix", columns, rows)}</div></section>'
    )


def _compiling_at_end(report: Report) -> str:
    """The compile the run ended with, above everything else: it is what stalled or ended the job."""
    lines = "".join(f"<li>{_e(line)}</li>" for line in running_at_end(report.sessions))
    return (
        f'<section class="stalled" id="compiling-at-end"><h2>The run ended while compiling</h2><ul>{lines}</ul></section>'
        if lines
        else ""
    )


def _meta(report: Report) -> str:
    return (
        f"run {', '.join(report.run.runs) or '?'} · ranks {', '.join(str(r) for r in sorted(report.run.ranks)) or '0'} · "
        f"{describe_source(report).replace(' | ', ' · ')} · recompile_limit {report.run.recompile_limit} · "
        f"generated {time.strftime('%Y-%m-%d %H:%M:%S')} by recompprof {__version__}"
    )


def _frames_section(report: Report, frames: list[FrameReport], hints: dict[str, str]) -> str:
    if not frames:
        return "<p class='empty'>No compiles recorded.</p>"
    return _frames_table(frames, hints, steps_known=report.steps_known, steady_known=True)


def _limits(frames: list[FrameReport]) -> str:
    busy = [f for f in frames if f.compiles > 1 or f.limit_hits]
    limits = "".join(
        f"<li><b>{_e(f.label)}</b>: needed {f.variants_needed} compiled variant(s)"
        + (
            " — <span class='bad'>the recompile limit cut in; later calls ran eagerly</span>"
            if f.limit_hits
            else ""
        )
        + "</li>"
        for f in busy
    )
    return (
        f"<ul>{limits}</ul>"
        if limits
        else "<p class='empty'>Every frame needed one compiled variant.</p>"
    )


def _breaks(report: Report) -> str:
    return (
        _graph_breaks(report) if report.breaks.groups else "<p class='empty'>No graph breaks.</p>"
    )


def _failures(report: Report) -> str:
    if not report.compilation.failure_messages:
        return "<p class='empty'>No compile failures.</p>"
    return _simple_table(
        "failures-table", ("Frame", "Type", "Message"), report.compilation.failure_messages
    )


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0;font-size:22px}
header .meta{opacity:.75;font-size:12px;margin-top:4px}main{padding:18px 28px;max-width:1200px}
section{background:#fff;border-radius:8px;padding:14px 18px;margin:0 0 18px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
h2{font-size:16px;margin:0 0 10px}.kpis{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:18px}
.kpi{background:#fff;border-radius:8px;padding:10px 16px;min-width:120px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
.kpi .v{font-size:24px;font-weight:600}.kpi .k{font-size:12px;color:#5a6273}.kpi.alert .v{color:#c0392b}
.bwd{color:#5a6273;font-size:12px}
svg.chart{width:100%;height:auto;display:block}svg text{font:12px system-ui,sans-serif;fill:#1d2330}
svg .axis{fill:#5a6273;font-size:11px}svg .grid{stroke:#e4e7ec}svg .lane{stroke:#c9ced8;stroke-dasharray:2 3}
svg .recompile{fill:#e15759;fill-opacity:.85;stroke:#fff}svg .total{font-weight:600}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{border-bottom:1px solid #e4e7ec;padding:6px 8px;
text-align:left;vertical-align:top}th{background:#f0f2f5;cursor:pointer;user-select:none}
.scroll{overflow-x:auto}#frames td:last-child{min-width:280px}code{word-break:break-all}
td.n{text-align:right;font-variant-numeric:tabular-nums}.bad{color:#c0392b;font-weight:600}
ul.reasons{margin:0;padding-left:0;list-style:none}ul.reasons li{margin-bottom:6px}
.chip{color:#fff;border-radius:10px;padding:1px 8px;font-size:12px}.hint{color:#5a6273;font-size:12px}
pre{white-space:pre-wrap;font-size:11px;background:#f5f6f8;padding:6px;max-height:200px;overflow:auto}
.stalled{border-left:4px solid #c0392b}.stalled h2{color:#c0392b}.stalled ul{margin:0;padding-left:18px;font-weight:600}
.notes{background:#fff8e1;border-left:4px solid #f2b600;padding:8px 8px 8px 28px;margin:0 0 18px}
.meter{height:4px;background:#e15759;margin-bottom:2px}#fix-first-table td.lost{min-width:90px}
.empty{color:#5a6273}#filter{margin-bottom:8px;padding:5px 8px;width:280px}.frame{font-family:ui-monospace,monospace;overflow-wrap:anywhere;min-width:200px}
"""

# Sorting and filtering only; the page is complete without it.
_JS = """
(function(){
  var table=document.getElementById('frames');
  if(table){
    var heads=table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads,function(th,i){
      th.addEventListener('click',function(){
        var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows),asc=th.dataset.dir!=='asc';
        rows.sort(function(a,b){
          var x=a.cells[i].dataset.sort||a.cells[i].textContent,y=b.cells[i].dataset.sort||b.cells[i].textContent;
          var nx=parseFloat(x),ny=parseFloat(y),c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);
          return asc?c:-c;});
        rows.forEach(function(r){body.appendChild(r);});th.dataset.dir=asc?'asc':'desc';});});
    var filter=document.getElementById('filter');
    filter.addEventListener('input',function(){
      var q=filter.value.toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows,function(r){
        r.style.display=r.textContent.toLowerCase().indexOf(q)<0?'none':'';});});
  }
  document.body.setAttribute('data-ready','1');
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{title}</title><style>{css}</style></head>
<body><header><h1>{title}</h1><div class="meta">{meta}</div></header><main>
{compiling}
<div class="kpis">{cards}</div>
{notes}
{divergence}
<section id="fix-first"><h2>Fix these first: compile time lost per cause</h2>{fix_first}</section>
<section id="steps"><h2>Recompiles over training steps, per frame</h2>{steps}</section>
<section id="categories"><h2>Guard failures by category</h2>{categories}</section>
<section id="phases"><h2>Compile time by phase (exclusive)</h2>{phases}</section>
<section id="caches"><h2>Compile caches</h2>{caches}</section>
{trace_functions}
<section id="frames-section"><h2>Frames: why they recompiled and how to fix it</h2>{table}</section>
<section id="limits"><h2>Compiled variants per frame (recompile_limit {limit})</h2>{limits}</section>
<section id="graph-breaks"><h2>Graph breaks</h2>{breaks}</section>
<section id="failures"><h2>Compile failures</h2>{failures}</section>
</main><script>{js}</script></body></html>
"""
