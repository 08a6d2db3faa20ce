"""How a history answer is shown: a terminal table, CSV, JSON, or an HTML page with a chart where a
trend is the answer; and every sentence the answers say about the files and sessions behind them."""

from __future__ import annotations

import datetime
import decimal
import io
import json
from collections.abc import Iterable
from typing import Any

from recompprof._history.engine import SETTLE_READS, Answer, Completeness, Result
from recompprof._history.health import Skipped
from recompprof._model.escaping import escape
from recompprof._model.ranks import rank_list

FORMATS = ("table", "csv", "json", "html")
_SHOWN_NAMES = 3  # file names listed in a warning, then "and N more"
_WHY = {
    "unreadable": "unreadable (corrupt or truncated)",
    "schema": "of another schema version",
    "verify": "found bad by `history verify`",
}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else repr(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return f"{float(value):.6g}"
    return str(value)


def _machine_cell(value: Any) -> str:
    """A value as ``--format csv`` writes it, for a program to read back: every digit of a float
    (Python's shortest spelling that reads back the same), ``true``/``false``, a list or map as JSON,
    nothing for NULL. The table rounds for people; csv does not."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(_plain(value))
    plain = _plain(value)
    return repr(plain) if isinstance(plain, float) else str(plain)


def _plain(value: Any) -> Any:
    """A value as JSON holds it."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _name(path: str) -> str:
    """A data file as a warning names it: its day's folder and its name (a run's files of two days
    share a name)."""
    folder, _, name = path.rpartition("/")
    day = folder.rpartition("/")[2]
    return f"{day}/{name}" if day.startswith("dt=") else name or path


def _names(paths: list[str]) -> str:
    shown = ", ".join(_name(p) for p in paths[:_SHOWN_NAMES])
    more = len(paths) - _SHOWN_NAMES
    return shown + (f" and {more} more" if more > 0 else "")


def _each(skipped: list[Skipped]) -> str:
    """The files left out, each with its own reason (the first few, then how many more)."""
    shown = ", ".join(f"{_name(s.path)} ({s.detail})" for s in skipped[:_SHOWN_NAMES])
    more = len(skipped) - _SHOWN_NAMES
    return shown + (f" and {more} more" if more > 0 else "")


def warnings(answer: Answer, files: dict[str, int]) -> list[str]:
    """The lines an answer's reader must see first: files that changed under every read, files left
    out, partial sessions, lost raw files.
    ``files``: how many files each table has in all (read and left out)."""
    out = []
    if answer.unsettled:
        out.append(
            f"files changed while every one of {SETTLE_READS} reads of them ran (jobs are "
            "exporting); this answer may mix a file's old and new rows: ask again"
        )
    groups: dict[tuple[str, str], list[Skipped]] = {}
    for s in answer.skipped:
        groups.setdefault((s.table, s.why), []).append(s)
    for (table, why), skipped in groups.items():
        out.append(
            f"{table}: {len(skipped)} of {files.get(table, len(skipped))} file(s) left out, "
            f"{_WHY.get(why, why)}: {_each(skipped)}; their rows are not counted"
        )
    for table, names in answer.lost_at_compaction.items():
        out.append(
            f"{table}: {len(names)} raw file(s) could not be read when their day was compacted: "
            f"{_names(names)}; their rows are not counted"
        )
    for table, paths in answer.late.items():
        out.append(
            f"{table}: {len(paths)} raw file(s) arrived after their day was compacted and are not "
            f"counted: {_names(paths)}; run `recompprof history compact --check`"
        )
    if answer.missing_ranks:
        have = "has" if len(answer.missing_ranks) == 1 else "have"
        out.append(
            f"the run's world size is {answer.world_size} and {rank_list(answer.missing_ranks)} "
            f"{have} no session in the lake (an export that has not arrived, a rank that did not "
            "attach): the gate holds only the ranks it has"
        )
    if answer.completeness is not None and answer.completeness.partial:
        out.append(_partial(answer.completeness))
    return out


def _partial(c: Completeness) -> str:
    parts = []
    if c.not_ended:
        parts.append(f"{c.not_ended} did not end (killed, crashed or still running)")
    if c.dark:
        parts.append(f"{c.dark} had a capture signal off or dark")
    if c.log_gaps:
        parts.append(f"{c.log_gaps} have a gap in their log")
    return (
        f"of {c.sessions} rank session(s) in range ({c.scope}), {', '.join(parts)}: "
        "their counts are partial"
    )


def notes(answer: Answer) -> list[str]:
    out = [f"{t} has no files yet: its rows are none" for t in answer.empty_tables]
    for table, missing in answer.missing.items():
        columns = ", ".join(sorted(missing))
        out.append(
            f"{table}: some files predate column(s) {columns} (written by an older exporter): "
            "unknown (null) there"
        )
    if answer.baseline_runs == 0:
        out.append("no earlier finished run of this job in the lake: nothing to compare with")
    elif answer.too_few:
        out.append(
            f"only {answer.baseline_runs} earlier finished run(s) of this job in the lake: the gate "
            f"needs {answer.min_baseline} to know the job's noise, so nothing is compared yet "
            "(--min-baseline)"
        )
    for result in answer.results:
        if result.total is not None:
            out.append(
                f"{result.title}: the worst {len(result.rows)} of {result.total} shown (--top 0: all)"
            )
    return out


def verdict(answer: Answer) -> str | None:
    """The gate's last line (regressions, compare)."""
    if not answer.gate:
        return None
    if answer.baseline_runs == 0:
        return f"recompprof history {answer.command}: ok (no baseline)"
    if answer.too_few:
        return (
            f"recompprof history {answer.command}: ok (a baseline of {answer.baseline_runs} run(s), "
            f"fewer than {answer.min_baseline})"
        )
    of = "" if answer.baseline_runs is None else f" against {answer.baseline_runs} run(s)"
    if answer.found:
        return f"recompprof history {answer.command}: {answer.found} finding(s){of}"
    return f"recompprof history {answer.command}: ok{of}"


# ---- layouts -------------------------------------------------------------------------------------


def table_text(answer: Answer) -> str:
    blocks = []
    for result in answer.results:
        blocks.append(_table(result, title=len(answer.results) > 1 or answer.gate))
    return "\n".join(blocks)


def _table(result: Result, *, title: bool) -> str:
    head = f"{result.title}:\n" if title and result.title else ""
    if not result.rows:
        return head + "  (no rows)\n"
    cells = [[escape(_cell(v)) for v in row] for row in result.rows]
    widths = [
        max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(result.columns)
    ]
    numeric = [
        all(
            isinstance(row[i], (int, float, decimal.Decimal)) or row[i] is None
            for row in result.rows
        )
        and any(row[i] is not None for row in result.rows)
        for i in range(len(result.columns))
    ]

    def line(values: Iterable[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip() + "\n"

    out = [head, line(escape(c) for c in result.columns), line("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "".join(out)


def csv_text(answer: Answer) -> str:
    buffer = io.StringIO()
    import csv  # the table and JSON answers never need it (each import is start-up time)

    writer = csv.writer(buffer, lineterminator="\n")
    for n, result in enumerate(answer.results):
        if n:
            buffer.write("\n")
        writer.writerow(result.columns)
        writer.writerows([_machine_cell(v) for v in row] for row in result.rows)
    return buffer.getvalue()


def json_text(answer: Answer, files: dict[str, int]) -> str:
    return json.dumps(json_document(answer, files), indent=2) + "\n"


def json_document(answer: Answer, files: dict[str, int]) -> dict[str, Any]:
    """An answer as ``--format json`` prints it (a digest holds one per question)."""
    document: dict[str, Any] = {
        "command": answer.command,
        "results": [
            {
                "title": r.title,
                "columns": r.columns,
                "rows": [dict(zip(r.columns, (_plain(v) for v in row))) for row in r.rows],
                "total_rows": len(r.rows) if r.total is None else r.total,
            }
            for r in answer.results
        ],
        "warnings": warnings(answer, files),
        "notes": notes(answer),
        "findings": answer.findings,
    }
    if answer.baseline_runs is not None:
        document["baseline_runs"] = answer.baseline_runs
        document["min_baseline"] = answer.min_baseline
        document["world_size"] = answer.world_size
        document["missing_ranks"] = answer.missing_ranks
    if answer.completeness is not None:
        c = answer.completeness
        document["sessions"] = {
            "scope": c.scope,
            "sessions": c.sessions,
            "not_ended": c.not_ended,
            "dark": c.dark,
            "log_gaps": c.log_gaps,
        }
    return document


# ---- a digest: every question in one document ---------------------------------------------------


def digest_text(answers: list[Answer], files: dict[str, int], skipped: dict[str, str]) -> str:
    """Every answer under its command's name, each with the warnings and notes it would print, then
    the questions left out (and why): one document for a mail or a dashboard."""
    blocks = []
    for answer in answers:
        lines = [f"== recompprof history {answer.command} =="]
        lines += [f"warning: {escape(w)}" for w in warnings(answer, files)]
        lines += [f"note: {escape(n)}" for n in notes(answer)]
        body = table_text(answer)
        final = verdict(answer)
        blocks.append("\n".join(lines) + "\n" + body + (final + "\n" if final else ""))
    blocks.extend(
        f"== recompprof history {command} ==\nleft out: {why}\n" for command, why in skipped.items()
    )
    return "\n".join(blocks)


def digest_json(answers: list[Answer], files: dict[str, int], skipped: dict[str, str]) -> str:
    """The digest as JSON: each question's document exactly as its own ``--format json`` gives it."""
    document = {
        "command": "digest",
        "questions": {a.command: json_document(a, files) for a in answers},
        "left_out": skipped,
        "findings": any(a.findings for a in answers),
    }
    return json.dumps(document, indent=2) + "\n"


# ---- HTML ----------------------------------------------------------------------------------------

_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f")
_CSS = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{padding:3px 10px;border-bottom:1px solid #ddd}
td.n{text-align:right}.warn{color:#a33}.note{color:#555}svg text{font:11px sans-serif}"""


def _e(value: object) -> str:
    import html  # only the HTML page needs it

    return html.escape(str(value), quote=True)


def html_page(answer: Answer, files: dict[str, int], title: str) -> str:
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>",
    ]
    parts.extend(f"<p class='warn'>warning: {_e(w)}</p>" for w in warnings(answer, files))
    parts.extend(f"<p class='note'>note: {_e(n)}</p>" for n in notes(answer))
    for result in answer.results:
        if result.title:
            parts.append(f"<h2>{_e(result.title)}</h2>")
        if result.trend is not None and result.rows:
            parts.append(chart(result))
        parts.append(_html_table(result))
    parts.append("</body></html>\n")
    return "".join(parts)


def _html_table(result: Result) -> str:
    if not result.rows:
        return "<p class='note'>(no rows)</p>"
    head = "".join(f"<th>{_e(c)}</th>" for c in result.columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='n'>{_e(_cell(v))}</td>"
            if isinstance(v, (int, float, decimal.Decimal))
            else f"<td>{_e(_cell(v))}</td>"
            for v in row
        )
        + "</tr>"
        for row in result.rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def chart(result: Result) -> str:
    """Grouped bars: one group per x value (a week, a torch version), one bar per series and measure."""
    assert result.trend is not None
    x_name, measures, series_name = result.trend
    col = {c: i for i, c in enumerate(result.columns)}
    xs = sorted({_cell(r[col[x_name]]) for r in result.rows})
    series = sorted({_cell(r[col[series_name]]) for r in result.rows}) if series_name else [""]
    values: dict[tuple[str, str, str], float] = {}
    for row in result.rows:
        s = _cell(row[col[series_name]]) if series_name else ""
        for m in measures:
            values[(_cell(row[col[x_name]]), s, m)] = float(row[col[m]] or 0)
    bars = [(s, m) for s in series for m in measures]
    top = max(values.values(), default=0) or 1.0
    width, height, left, bottom = 960, 320, 60, 60
    group_w = (width - left - 20) / max(len(xs), 1)
    bar_w = max(2.0, (group_w - 10) / max(len(bars), 1))
    plot_h = height - bottom - 20
    out = [
        f"<svg class='chart' viewBox='0 0 {width} {height + 20 * len(bars)}' role='img' "
        f"aria-label='{_e(', '.join(measures))} by {_e(x_name)}'>",
        f"<line x1='{left}' x2='{width - 20}' y1='{20 + plot_h}' y2='{20 + plot_h}' stroke='#999'/>",
        f"<text x='4' y='16'>{_e(f'{top:.4g}')}</text>",
    ]
    for i, x in enumerate(xs):
        gx = left + i * group_w + 5
        for j, key in enumerate(bars):
            v = values.get((x, *key), 0.0)
            h = plot_h * v / top
            out.append(
                f"<rect x='{gx + j * bar_w:.1f}' y='{20 + plot_h - h:.1f}' width='{bar_w - 1:.1f}' "
                f"height='{h:.1f}' fill='{_PALETTE[j % len(_PALETTE)]}'>"
                f"<title>{_e(x)} {_e(key[0])} {_e(key[1])}: {v:.4g}</title></rect>"
            )
        out.append(
            f"<text x='{gx + group_w / 2 - 5:.1f}' y='{height - bottom + 38}' "
            f"text-anchor='middle'>{_e(x)}</text>"
        )
    for j, (s, m) in enumerate(bars):
        y = height + 20 * j
        out.append(
            f"<rect x='{left}' y='{y - 10}' width='12' height='12' fill='{_PALETTE[j % len(_PALETTE)]}'/>"
            f"<text x='{left + 18}' y='{y}'>{_e(s)} {_e(m)}</text>"
        )
    out.append("</svg>")
    return "".join(out)
