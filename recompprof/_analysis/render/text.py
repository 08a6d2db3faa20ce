"""The terminal report: ``render_text`` draws a :class:`~recompprof._analysis.report.model.Report` as tables."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

from rich.console import Console

from recompprof._analysis.render import divergence, plaintext
from recompprof._analysis.render.wording import (
    FIX_FIRST,
    automatic_dynamic_notes,
    cause_label,
    cause_steps,
    completeness_warnings,
    counts_line,
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
    steady_unknown_notes,
    subject_text,
)
from recompprof._analysis.report.bounded import MAX_FRAMES
from recompprof._analysis.report.frames import FrameReport
from recompprof._analysis.report.model import Report
from recompprof._model import call_sites
from recompprof._model.cudagraphs import SKIP_HINTS
from recompprof._model.escaping import escape
from recompprof._model.vocabulary import CACHE_RESULTS, CACHES, PHASES

EXAMPLE_CHARS = 160  # of a reason's example text in the terminal "why" table
WHY_ROWS_PER_FRAME = (
    5  # reason groups per frame in the terminal report's "why" table, then one row for the rest
)
BREAK_ROWS = 20  # graph-break groups in the terminal table (the HTML report lists more)


def _clip(text: str, limit: int = EXAMPLE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying so (the HTML report keeps the whole example)."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _print_fix_first(
    console: Console, report: Report, hints: dict[str, str], *, steps: bool = True
) -> None:
    ranked = report.ranked_causes()
    total = report.compile_seconds
    if not ranked:
        console.line()
        console.print(
            "Fix these first: nothing - no recompiles, so no compile time was lost to them."
        )
        return
    console.line()
    console.print(
        f"Recompiles cost {report.recompile_seconds:.2f} s of {total:.2f} s compile time "
        f"({share(report.recompile_seconds, total)}), {len(ranked)} cause(s)."
    )
    # A list, not a table: the reason text and the call site stay readable at any width.
    console.print("Fix these first: compile time lost per cause")
    for rank, cause in enumerate(ranked[:FIX_FIRST], start=1):
        console.print(
            f"{rank:>2}. {cause_label(cause.category, cause.subject, cause.frame, parameter=cause.parameter)}: "
            f"{cause.recompiles} recompile(s), {cause.seconds:.3f} s lost ({share(cause.seconds, total)})"
            + (f", steps {cause_steps(cause)}" if steps else "")
        )
        user, library = call_sites.split(cause.call_site) if cause.call_site else ("", [])
        for line in (
            f"why: {cause.example}" if cause.example else "",
            f"at {user}" if user else "",
            *(f"  via {frame}" for frame in library),  # the library frames below the user's line
            f"fix: {fix}" if (fix := fix_text(cause, hints, report)) else "",
        ):
            # Wrapped here, between words, so continuation lines keep the indent; one print per line (the console
            # shows a newline inside a text escaped), escaped first (textwrap would turn a newline into a space).
            for part in textwrap.wrap(
                escape(line),
                max(console.width, 40),
                initial_indent="    ",
                subsequent_indent="    ",
                break_long_words=False,
                break_on_hyphens=False,
            ):
                console.print(part, soft_wrap=True)
    if len(ranked) > FIX_FIRST:
        console.print(f"  ... {more_causes(ranked)}")


def _print_breaks(console: Console, report: Report) -> None:
    if not report.breaks.groups:
        return
    ranked = report.breaks.ranked()
    rows: list[tuple[str, ...]] = [
        (
            g.reason,
            g.where,
            g.frame or "-",
            "ran eagerly" if g.skipped_frame else "resumed",
            str(g.count),
        )
        for g in ranked[:BREAK_ROWS]
    ]
    rest = ranked[BREAK_ROWS:]
    if rest:
        rows.append(
            ("...", f"{len(rest)} more place(s)", "-", "-", str(sum(g.count for g in rest)))
        )
    console.print(
        plaintext.table(
            "Graph breaks (where: the user's code that broke the graph; ran eagerly: torch could "
            "not resume after the break and ran the whole frame without compiling it)",
            ("Reason", "Where", "Frame", "Then", "Count"),
            rows,
            right=("Count",),
            fold=("Reason", "Where", "Frame"),
        )
    )
    hints: dict[str, list[str]] = {}  # once per reason shown, torch's own hints
    for group in ranked[:BREAK_ROWS]:
        if group.hints and group.reason not in hints:
            hints[group.reason] = group.hints
    if hints:
        console.print(
            plaintext.table(
                "Graph-break hints (torch's)",
                ("Reason", "Hint"),
                [(reason, hint) for reason, listed in hints.items() for hint in listed],
                fold=("Reason", "Hint"),
            )
        )


def _print_caches(console: Console, report: Report) -> None:
    if not any(report.compilation.cache_lookups.values()):
        return
    rows = []
    for cache in CACHES:
        counts = [report.compilation.cache_lookups[(cache, r)] for r in CACHE_RESULTS]
        rate = report.cache_hit_rate(cache)
        rows.append(
            (cache, *(str(n) for n in counts), "-" if rate is None else f"{100 * rate:.0f} %")
        )
    console.print(
        plaintext.table(
            f"Compile caches (seconds saved by hits: {report.compilation.cache_seconds_saved:.2f} s)",
            ("Cache", *CACHE_RESULTS, "Hit rate"),
            rows,
            right=(*CACHE_RESULTS, "Hit rate"),
        )
    )


def render_summary(report: Report, width: int = 100) -> str:
    """A few lines for the end of ``recompprof run``: the counts and the costliest cause."""
    console, out = plaintext.console(width)
    steady = sum(f.steady_state_recompiles for f in report.frames.values())
    unknown = sum(f.steady_state_unknown for f in report.frames.values())
    steady_text = f"{steady} steady-state" + (f", {unknown} unknown" if unknown else "")
    console.print(
        f"recompprof: {report.compiles} compile(s), {report.recompiles} recompile(s) "
        f"({steady_text}, {report.automatic_dynamic_recompiles} automatic dynamic), "
        f"{report.limit_hits} limit hit(s), {report.graph_breaks} graph break(s), {report.failures} failure(s); "
        f"{report.compile_seconds:.2f} s compiling, {report.recompile_seconds:.2f} s lost to recompiles"
    )
    _print_warnings(console, report)
    ranked = report.ranked_causes()
    if ranked:
        top = ranked[0]
        console.print(
            f"top cause: {cause_label(top.category, top.subject, top.frame, parameter=top.parameter)}: "
            f"{top.recompiles} recompile(s), "
            f"{top.seconds:.3f} s" + (f" - {top.example}" if top.example else "")
        )
    return out.getvalue()


def render_text(report: Report, width: int = 160, header_width: int | None = None) -> str:
    """The report as plain text tables (no colour codes), for terminals and logs. The header's text wraps
    at ``header_width`` (default ``width``): the terminal's own width where the tables keep a wider least
    width of their own."""
    report.require_detail()
    console, out = plaintext.console(width)
    _print_header(console, report, header_width or width)
    frames = frames_in_order(report)
    if not frames:
        console.line()
        console.print("No compiles recorded.")
        return out.getvalue()
    hints = hints_for(report)
    _print_fix_first(console, report, hints, steps=report.steps_known)
    _print_frames(console, report, frames)
    _print_why(console, frames, hints)
    for section in _SECTIONS:
        section(console, report)
    _print_limits(console, report, frames)
    _print_internal_errors(console, report)
    return out.getvalue()


_FIELD_SEPARATOR = " | "


def _run_fields(report: Report) -> list[str]:
    """The header line's fields, in order: run, ranks, mode, steps, steady-state basis, counts, compile time."""
    ranks = ", ".join(str(r) for r in sorted(report.run.ranks)) or "0"
    compile_time = f"compile time {report.compile_seconds:.2f} s" + (
        f" of {report.run.wall_seconds:.1f} s wall"
        if report.run.wall_seconds and len(report.run.ranks) <= 1
        else " summed over ranks"
        if len(report.run.ranks) > 1
        else ""
    )
    return [
        f"run {', '.join(report.run.runs) or '?'}",  # whole: a run id may hold a " | " of its own
        f"ranks {ranks}",
        *describe_source(report).split(_FIELD_SEPARATOR),
        *counts_line(report).split(_FIELD_SEPARATOR),
        compile_time,
    ]


def _between_fields(fields: list[str], width: int) -> list[str]:
    """``fields`` joined by " | " in lines of at most ``width`` columns, broken only where a " | " was (a
    line that goes on ends with " |"), so no count is parted from its name; only a field wider than a line
    of its own is broken, between its words (:func:`plaintext.wrap`)."""
    lines: list[str] = []
    line = ""
    for index, field in enumerate(fields):
        tail = 0 if index == len(fields) - 1 else len(" |")  # a line ending here goes on
        if line and len(line) + len(_FIELD_SEPARATOR) + len(field) + tail <= width:
            line += _FIELD_SEPARATOR + field
            continue
        if line:
            lines.append(line + " |")
        *whole, line = plaintext.wrap(field, width - tail) if len(field) + tail > width else [field]
        lines += whole
    return [*lines, line]


def _print_warnings(console: Console, report: Report, width: int | None = None) -> None:
    """A compile the run ended with (first: it is what stalled or ended the job), then what the figures
    cannot vouch for: dark signals, sessions without an end, gaps in a log."""
    for line in running_at_end(report.sessions):
        console.print(line, soft_wrap=True)
    for name, why in report.run.signals_dark.items():
        console.print(
            f"WARNING: signal {name} was dark ({why}): what it records is incomplete in this run",
            width=width,
        )
    for _, line in completeness_warnings(report):
        console.print(f"WARNING: {line}", soft_wrap=True)


def _print_header(console: Console, report: Report, width: int) -> None:
    console.print("recompprof report")
    console.print("=================")
    # Escaped before measuring (a control character in a run id prints as several columns).
    for line in _between_fields([escape(field) for field in _run_fields(report)], width):
        console.print(line, width=width)
    _print_warnings(console, report, width)
    if report.run.profile_mechanisms:
        console.print(
            f"profile mode mechanism: {', '.join(sorted(report.run.profile_mechanisms))} "
            "(evict: each frame held at recompile_limit live entries; unlimited: limit lifted)",
            width=width,
        )
    notes = list(report.notes)
    if report.frames.dropped:
        notes.append(
            f"{report.frames.dropped} event(s) of frames past the first {MAX_FRAMES} are not shown"
        )
    notes += automatic_dynamic_notes(report) + steady_unknown_notes(report) + restart_notes(report)
    for note in notes:
        console.print(f"note: {note}", width=width)


def _frame_row(report: Report, f: FrameReport) -> tuple[str, ...]:
    steps_known = report.steps_known
    return (
        f.label,
        str(f.compiles) + (f" (+{f.backward_compiles} bwd)" if f.backward_compiles else ""),
        str(f.recompiles),
        steady_cell(f),  # the verdict needs no steps: ingested runs have it too
        (frame_steps(f) or "-") if steps_known else "-",
        ", ".join(f"{k} x{v}" for k, v in f.limit_hits.items()) or "0",
        str(f.graph_breaks),
        str(sum(f.failures.values())),
        f"{f.compile_seconds:.3f}",
    )


def _print_frames(console: Console, report: Report, frames: list[FrameReport]) -> None:
    counts = (
        "Compiles",
        "Recompiles",
        "Steady-state",
        "Limit hits",
        "Graph breaks",
        "Failures",
        "Compile s",
    )
    console.print(
        plaintext.table(
            "Frames",
            (
                "Frame",
                "Compiles",
                "Recompiles",
                "Steady-state",
                "Recompile steps",
                "Limit hits",
                "Graph breaks",
                "Failures",
                "Compile s",
            ),
            [_frame_row(report, f) for f in frames],
            right=counts,
            fold=("Frame", "Recompile steps"),
        )
    )


def _why_rows(frames: list[FrameReport]) -> tuple[list[tuple[str, ...]], list[str]]:
    """The "why" table's rows, and the categories they show in order (for the hints under it)."""
    rows: list[tuple[str, ...]] = []
    shown: dict[str, None] = {}
    for f in frames:
        groups = f.top_reasons()
        rows += [
            (
                f.label,
                g.category,
                subject_text(g.subject, g.parameter) or "-",
                str(g.changes),
                str(g.failures),
                _clip(g.example) or "-",
            )
            for g in groups[:WHY_ROWS_PER_FRAME]
        ]
        shown.update(dict.fromkeys(g.category for g in groups[:WHY_ROWS_PER_FRAME]))
        rest = groups[WHY_ROWS_PER_FRAME:]
        if rest:  # a long tail here would bury every other frame (the HTML report lists more)
            rows.append(
                (
                    f.label,
                    "...",
                    f"{len(rest)} more group(s)",
                    str(sum(g.changes for g in rest)),
                    str(sum(g.failures for g in rest)),
                    "-",
                )
            )
    return rows, list(shown)


def _print_why(console: Console, frames: list[FrameReport], hints: dict[str, str]) -> None:
    rows, shown = _why_rows(frames)
    if not rows:
        console.line()
        console.print("No guard failures recorded.")
        return
    console.print(
        plaintext.table(
            "Why they recompiled (changes = recompiles explained; guard failures = one per failing "
            "cache entry; example = one reason text torch gave)",
            ("Frame", "Category", "Subject", "Changes", "Guard failures", "Example"),
            rows,
            right=("Changes", "Guard failures"),
            fold=("Frame", "Subject", "Example"),
        )
    )
    # Once per category, not on every row: the same advice repeated per frame only made the table long.
    console.print(
        plaintext.table(
            "Fix hints",
            ("Category", "Fix hint"),
            [(category, hints[category]) for category in shown if hints.get(category)],
            fold=("Fix hint",),
        )
    )


def _print_phases(console: Console, report: Report) -> None:
    total = sum(report.frames.phases.values()) or 1.0
    console.print(
        plaintext.table(
            "Compile time by phase (exclusive, seconds)",
            ("Phase", "Seconds", "Share"),
            [
                (
                    phase,
                    f"{report.frames.phases.get(phase, 0.0):.3f}",
                    f"{100 * report.frames.phases.get(phase, 0.0) / total:.1f} %",
                )
                for phase in PHASES
            ],
            right=("Seconds", "Share"),
        )
    )


def _print_trace_functions(console: Console, report: Report) -> None:
    if not report.compilation.trace_seconds_by_function:
        return
    console.print(
        plaintext.table(
            "Dynamo trace time by user function (exclusive; profile mode, dynamo_profiler)",
            ("Function", "Seconds"),
            [
                (function, f"{seconds:.3f}")
                for function, seconds in report.compilation.trace_seconds_by_function.most_common(
                    15
                )
            ],
            right=("Seconds",),
            fold=("Function",),
        )
    )


def _print_cudagraph_skips(console: Console, report: Report) -> None:
    if not report.compilation.cudagraph_skips:
        return
    console.print(
        plaintext.table(
            "CUDA graphs skipped",
            ("Frame", "Reason", "Compiles", "Fix"),
            [
                (label, reason, str(count), SKIP_HINTS.get(reason, ""))
                for (label, reason), count in report.compilation.cudagraph_skips.most_common(20)
            ],
            right=("Compiles",),
            fold=("Frame", "Fix"),
        )
    )


def _print_failures(console: Console, report: Report) -> None:
    if not report.compilation.failure_messages:
        return
    console.print(
        plaintext.table(
            "Compile failures",
            ("Frame", "Type", "Message"),
            list(report.compilation.failure_messages),
            fold=("Frame", "Type", "Message"),
        )
    )


def _print_limits(console: Console, report: Report, frames: list[FrameReport]) -> None:
    busy = [f for f in frames if f.compiles > 1 or f.limit_hits]
    if not busy:
        return
    console.line()
    console.print(
        "Limits: each frame needed this many compiled variants "
        f"(torch.compile falls back to eager past recompile_limit, {report.run.recompile_limit} here):"
    )
    for f in busy:
        cut = " - the limit cut in" if f.limit_hits else ""
        console.print(f"  {f.label}: {f.variants_needed} variants{cut}")


def _print_internal_errors(console: Console, report: Report) -> None:
    if report.run.internal_errors:
        console.line()
        console.print(
            "recompprof internal errors: "
            + ", ".join(f"{k} x{v}" for k, v in report.run.internal_errors.items())
        )


# The sections between the "why" table and the limits, in the order they print; each prints nothing it has no figures for.
_SECTIONS: tuple[Callable[[Console, Report], None], ...] = (
    _print_phases,
    _print_caches,
    _print_trace_functions,
    _print_cudagraph_skips,
    _print_breaks,
    _print_failures,
    divergence.print_divergence,
)
