"""recompprof._model.metric_names: the one table the Prometheus collector and the OTel metrics both name their metrics from."""

from __future__ import annotations

import re
from pathlib import Path

from metric_contract import CONTRACT
from prometheus_client.parser import text_string_to_metric_families
from prometheus_helpers import feed, make_session, scrape

from recompprof._model import metric_names as names
from recompprof_otel.metrics import INSTRUMENTS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_collector_exports_exactly_the_table_with_its_kinds() -> None:
    """A scrape has one family per table row (the documented contract), each of the row's kind."""
    session = make_session()
    feed(session)
    kinds = {f.name: f.type for f in text_string_to_metric_families(scrape(session))}
    assert kinds == {m.family: m.kind for m in names.ALL}
    assert set(kinds) == set(CONTRACT)


def test_otel_instruments_translate_to_the_table_names() -> None:
    """Each OTel instrument is a table row, and the OTLP-to-Prometheus rule turns its name into the row's name."""
    rows = {m.otel: m for m in names.ALL if m.otel}
    assert {name for name, _, _ in INSTRUMENTS} == set(rows)
    for name, unit, exposed in INSTRUMENTS:
        row = rows[name]
        assert (unit, exposed) == (row.otel_unit, row.exposed)
        translated = (
            name.replace(".", "_")
            + ("_seconds" if unit == "s" else "")
            + ("_total" if row.kind == "counter" else "")
        )
        assert translated == exposed, name
    # The two families OTel does not send are Prometheus-only by design.
    assert {m.family for m in names.ALL if not m.otel} == {
        "torch_compile_cudagraph_skips",
        "recompprof_process_info",
    }


def test_the_otel_docs_table_is_the_table() -> None:
    """docs/opentelemetry.md lists exactly the table's instruments, with their unit, kind and Prometheus name."""
    text = (
        (DOCS / "opentelemetry.md")
        .read_text(encoding="utf-8")
        .split("## Optional OpenTelemetry metrics")[1]
    )
    lines = re.findall(r"^\| `(?:torch_compile|recompprof)\.\w+` \|.*\|$", text, re.MULTILINE)
    rows = [tuple(cell.strip().strip("`") for cell in line.strip("|").split("|")) for line in lines]
    assert sorted(rows) == sorted(
        (m.otel, m.otel_unit, m.kind, m.exposed) for m in names.ALL if m.otel
    )


def test_every_exposed_name_is_documented() -> None:
    """docs/prometheus.md (the contract) names every series name of the table."""
    text = (DOCS / "prometheus.md").read_text(encoding="utf-8")
    assert [m.exposed for m in names.ALL if m.exposed not in text] == []
