"""The generated Grafana dashboards: fresh, lint-clean, and every query returning data from a real run.

Grafana itself cannot run here, so these tests check the dashboard JSON the way grafana's
dashboard-linter does and run every query against a real Prometheus scraping real training runs.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import promql_parser
import pytest
from metric_contract import SERIES, metric_names
from servers import REPO, free_port, prometheus, train_process, wait_for_line

sys.path.insert(0, str(REPO))

from needs import starts

from dashboards import DEFAULT
from dashboards.generate import dashboards, stale

JSON_DIR = REPO / "dashboards/json"
VARIABLES = ("datasource", "namespace", "job", "rank", "frame")
SCOPE = {"namespace", "job", "rank"}
ALLOWED_RANGES = {"$__rate_interval", "$__range"}
SLOW_COMPILE = 4.0


def _committed() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(JSON_DIR.glob("*.json"))}


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def _targets(board: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in _panels(board):
        for target in panel["targets"]:
            yield panel, target


def _substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", "30s").replace("$__range", "5m")
    return re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), m.group(0)), expr)


def _variable_queries(board: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, selector, label) of each label_values() variable, in dashboard order."""
    out = []
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"])
            assert match, var["query"]
            out.append((var["name"], match.group(1), match.group(2)))
    return out


def test_committed_files_match_a_fresh_generation() -> None:
    """Every generated file in the repository equals what `python -m dashboards.generate` writes now."""
    assert stale() == [], "run: python -m dashboards.generate"
    assert set(_committed()) == set(dashboards())


def test_dashboards_have_the_variables_and_a_datasource_variable() -> None:
    """Each dashboard has datasource, namespace, job, rank and frame variables, queried via ${datasource}."""
    for name, board in _committed().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert tuple(variables) == VARIABLES, name
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for var in list(variables.values())[1:]:
            assert var["datasource"]["uid"] == "${datasource}"


def test_every_panel_has_title_description_unit_and_templated_datasource() -> None:
    """Every panel has a title, a description, a unit and uses the datasource variable, as the linter asks."""
    for name, board in _committed().items():
        for panel in _panels(board):
            assert panel.get("title"), (name, panel["id"])
            assert panel.get("description"), (name, panel["title"])
            assert panel["fieldConfig"]["defaults"].get("unit"), (name, panel["title"])
            assert panel["datasource"]["uid"] == "${datasource}", (name, panel["title"])
            assert panel["targets"], (name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}"


def test_uids_and_panel_ids_are_unique() -> None:
    """Dashboard uids are unique and match the config; panel ids are unique within each dashboard."""
    boards = _committed()
    uids = [b["uid"] for b in boards.values()]
    assert sorted(uids) == sorted({DEFAULT.overview_uid, DEFAULT.frame_uid})
    for board in boards.values():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        refs = [[t["refId"] for t in p["targets"]] for p in _panels(board)]
        assert all(len(r) == len(set(r)) for r in refs)


def test_every_query_parses_and_selects_job_and_rank() -> None:
    """Every query is valid PromQL, selects contract metrics only, and scopes every selector to namespace/job/rank."""
    for name, board in _committed().items():
        for panel, target in _targets(board):
            expr = target["expr"]
            parsed = promql_parser.parse(_substitute(expr, {v: ".*" for v in VARIABLES}))
            assert (
                metric_names(
                    target["expr"].replace("$__rate_interval", "1m").replace("$__range", "5m")
                )
                <= SERIES
            )

            def check(node: object, where: str = f"{name}: {panel['title']}") -> None:
                if isinstance(node, promql_parser.VectorSelector) and node.name:
                    labels = {m.name for m in node.matchers.matchers}
                    assert labels >= SCOPE, f"{where}: {node.name} lacks {SCOPE - labels}"

            promql_parser.walk(parsed, check)


def test_range_selectors_use_grafana_intervals() -> None:
    """Rates and increases use $__rate_interval (over time) or $__range (over the dashboard's range)."""
    for board in _committed().values():
        for panel, target in _targets(board):
            for window in re.findall(r"\[([^\]]+)\]", target["expr"]):
                assert window in ALLOWED_RANGES, f"{panel['title']}: [{window}]"
            over_time = panel["type"] in ("timeseries", "heatmap")
            if over_time and re.search(r"\b(rate|increase)\(", target["expr"]):
                assert "$__rate_interval" in target["expr"], panel["title"]


def test_duration_panels_request_exemplars() -> None:
    """Panels over the compile-duration histogram ask for exemplars, which link to the compile's trace."""
    for board in _committed().values():
        duration = [
            t for _, t in _targets(board) if "torch_compile_duration_seconds_bucket" in t["expr"]
        ]
        assert duration and all(t["exemplar"] for t in duration)


# -- against a real Prometheus scraping real training runs ---------------------------------------


@pytest.fixture(scope="module")
@starts("servers", "workload")
def scraped_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two ranks of one job scraped from their start under namespace "ml": rank 0 changes four things
    and hits a recompile limit of 2, rank 1 never recompiles (so the frame diverges across ranks).
    Rank 0's first recompile is slow (SLOW_COMPILE seconds), so scrapes catch it running.
    Rank 0 also exports spans (to a sink that accepts them), which gives its histogram exemplars."""
    tmp = tmp_path_factory.mktemp("dash")
    sink = _otlp_sink()
    ports = [free_port(), free_port()]
    procs: list[Any] = []
    scrape = {
        "job_name": "train",
        "scrape_interval": "1s",
        "static_configs": [
            {"targets": [f"127.0.0.1:{p}" for p in ports], "labels": {"namespace": "ml"}}
        ],
    }
    with prometheus(tmp, (), job="unused", extra_scrape_configs=[scrape]) as prom:
        for rank, (port, changes) in enumerate(zip(ports, ("4", "0"))):
            env = {
                "RECOMPPROF_EXPORTERS": "prometheus",
                "RECOMPPROF_PROMETHEUS_PORT": str(port),
                "RECOMPPROF_RUN_DIR": str(tmp / f"run{rank}"),
                "RANK": str(rank),
                "LOCAL_RANK": "0",
                "WORLD_SIZE": "2",
                "RECOMPPROF_WARMUP_STEPS": "2",
            }
            if rank == 0:
                env |= {
                    "RECOMPPROF_EXPORTERS": "prometheus,otel",
                    "OTEL_BSP_SCHEDULE_DELAY": "200",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_port}",
                }
            slow = ("--slow-compile", str(SLOW_COMPILE)) if rank == 0 else ()
            procs.append(
                train_process(
                    env,
                    "--steps",
                    "12",
                    "--hold",
                    "120",
                    "--backend",
                    "eager",
                    "--changes",
                    changes,
                    "--recompile-limit",
                    "2",
                    *slow,
                )
            )
        try:
            for proc in procs:
                wait_for_line(proc, "TRAINING DONE")
            prom.wait_for(
                'count(recompprof_process_info{job="train"})',
                30,
                lambda r: r and r[0]["value"][1] == "2",
            )
            # Enough samples after training for rate() over 30s windows.
            prom.wait_for(
                'count_over_time(torch_compile_training_step{rank="0"}[30s])',
                30,
                lambda r: r and float(r[0]["value"][1]) >= 8,
            )
            yield prom
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)
            sink.shutdown()


def _otlp_sink() -> ThreadingHTTPServer:
    """An HTTP server that accepts (and drops) every OTLP export, so the span exporter succeeds."""

    class Accept(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _resolve_variables(prom: Any, board: dict[str, Any]) -> dict[str, str]:
    """Resolve the variables as Grafana would: multi-value ones to their All value, single ones to a value."""
    values: dict[str, str] = {}
    for var_name, sel, label in _variable_queries(board):
        found = prom.api(f"label/{label}/values", **{"match[]": _substitute(sel, values)})
        assert found, f"variable {var_name}: label_values({sel}, {label}) is empty"
        var = next(v for v in board["templating"]["list"] if v["name"] == var_name)
        values[var_name] = var["allValue"] if var.get("includeAll") else found[0]
    return values


def _over_the_run(prom: Any, expr: str) -> list[dict[str, Any]]:
    """``expr`` as Grafana runs a range query, over the whole life of the fixture's Prometheus (1s steps)."""
    end = time.time()
    return prom.api("query_range", query=expr, start=end - 900, end=end, step=1)["result"]


@pytest.mark.servers
def test_every_dashboard_query_returns_data(scraped_runs: Any) -> None:
    """Every variable and panel query of both dashboards returns data from Prometheus scraping real runs:
    an instant query now, a range query (a panel over time) somewhere over the runs."""
    prom = scraped_runs
    empty = []
    for name, board in _committed().items():
        values = _resolve_variables(prom, board)
        for panel, target in _targets(board):
            expr = _substitute(target["expr"], values)
            if not (prom.query(expr) if target["instant"] else _over_the_run(prom, expr)):
                empty.append(f"{name}: {panel['title']}: {expr}")
    assert not empty, "queries without data:\n" + "\n".join(empty)


@pytest.mark.servers
def test_compiling_now_panels_show_the_slow_compile_on_its_rank(scraped_runs: Any) -> None:
    """'Compiling now by rank' shows rank 0 compiling during its slow recompile and both ranks not compiling
    at the end; 'Running compile age' shows that compile's frame on rank 0, seconds old, and nothing now."""
    board = _committed()["recompprof-overview.json"]
    everything = {v: ".*" for v in VARIABLES}

    def expr(title: str) -> str:
        return _substitute(
            next(t for p, t in _targets(board) if p["title"] == title)["expr"], everything
        )

    states = {
        r["metric"]["rank"]: [float(v) for _, v in r["values"]]
        for r in _over_the_run(scraped_runs, expr("Compiling now by rank"))
    }
    assert set(states) == {"0", "1"}
    assert 1.0 in states["0"]
    assert states["0"][-1] == states["1"][-1] == 0.0
    ages = _over_the_run(scraped_runs, expr("Running compile age by rank and frame"))
    slow = [
        r for r in ages if r["metric"]["rank"] == "0" and max(float(v) for _, v in r["values"]) >= 2
    ]
    assert slow and all(r["metric"]["frame"].startswith("Net.forward (") for r in slow), ages
    assert scraped_runs.query(expr("Running compile age by rank and frame")) == []


@pytest.mark.servers
def test_duration_exemplars_carry_trace_ids(scraped_runs: Any) -> None:
    """The compile-duration histogram the dashboards plot has exemplars with a trace_id for Grafana to link."""
    end = time.time()
    data = scraped_runs.api(
        "query_exemplars",
        query='torch_compile_duration_seconds_bucket{job="train"}',
        start=end - 600,
        end=end,
    )
    trace_ids = {e["labels"].get("trace_id") for series in data for e in series["exemplars"]}
    assert trace_ids and all(t and re.fullmatch(r"[0-9a-f]{32}", t) for t in trace_ids)


@pytest.mark.servers
def test_divergence_panel_names_the_rank_that_recompiles(scraped_runs: Any) -> None:
    """The 'Ranks that diverge' query lists the frame on rank 0 (which recompiled) and not on rank 1."""
    board = _committed()["recompprof-overview.json"]
    target = next(t for p, t in _targets(board) if p["title"] == "Ranks that diverge")
    result = scraped_runs.query(_substitute(target["expr"], {v: ".*" for v in VARIABLES}))
    assert {r["metric"]["rank"] for r in result} == {"0"}
    assert all(r["metric"]["frame"].startswith("Net.forward (") for r in result)
