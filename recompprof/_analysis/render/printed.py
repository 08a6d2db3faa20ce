"""The report a user prints: the report model, whose ``str`` is the terminal report.

The model imports no renderer; the package face (``recompprof.report()``, ``recompprof.build_report``)
hands users this subclass, so ``print(recompprof.report())`` draws the report.
"""

from __future__ import annotations

import dataclasses

from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.model import Report


class PrintedReport(Report):
    """A :class:`~recompprof._analysis.report.model.Report` that prints as the terminal report."""

    def __str__(self) -> str:
        return render_text(self)


def printed(report: Report) -> PrintedReport:
    """``report``'s figures (shared, not copied) as a report that prints as the terminal report."""
    return PrintedReport(
        **{field.name: getattr(report, field.name) for field in dataclasses.fields(report)}
    )
