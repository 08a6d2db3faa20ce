"""The recompprof overview dashboard: how much a training job recompiles, why, and what it costs."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from dashboards.config import Config
from dashboards.panels import (
    bar_panel,
    heatmap_panel,
    link,
    over_range,
    query,
    series,
    stat_panel,
    state_panel,
    table_panel,
    threshold_line,
    timeseries_panel,
    variables,
)

RATE = "$__rate_interval"
RANGE = "$__range"
FRAME = 'frame=~"$frame"'


def build(cfg: Config) -> dashboard.Dashboard:
    def s(metric: str, *matchers: str) -> str:
        return series(cfg, metric, *matchers)

    recompiles = s("torch_compile_recompiles_total", FRAME)
    steady = s("torch_compile_steady_state_recompiles_total", FRAME)
    guards = s("torch_compile_guard_failures_total", FRAME)
    limit_hits = s("torch_compile_recompile_limit_hits_total", FRAME)
    failures = s("torch_compile_compile_failures_total")
    phases = s("torch_compile_phase_seconds_total")
    buckets = s("torch_compile_duration_seconds_bucket")
    lost = s("torch_compile_recompile_seconds_total", FRAME)
    lookups = s("torch_compile_cache_lookups_total")
    saved = s("torch_compile_cache_saved_seconds_total")
    hits = s("torch_compile_cache_lookups_total", 'result="hit"')
    decided = s(
        "torch_compile_cache_lookups_total", 'result=~"hit|miss"'
    )  # a bypass could not have hit
    who = "namespace, job, rank"
    compiling = f"max by ({who}) ({s('torch_compile_compiling')})"
    frame_link = dashboard.DashboardLink("Frame drill-down").url(
        f"/d/{cfg.frame_uid}?${{__url_time_range}}&${{datasource:queryparam}}"
        "&${namespace:queryparam}&${job:queryparam}&${rank:queryparam}"
        "&var-frame=${__field.labels.frame}"
    )

    board = (
        dashboard.Dashboard("torch.compile recompilations")
        .uid(cfg.overview_uid)
        .description(
            "Recompiles, guard failures and compile time of torch.compile in training jobs, "
            "exported by recompprof."
        )
        .tags(list(cfg.dashboard_tags))
        .refresh(cfg.refresh)
        .time(cfg.time_from, "now")
        .variables(variables(cfg, frame_multi=True))
        .link(link("Frame drill-down", cfg.frame_uid))
        .with_row(dashboard.Row("Summary"))
        .with_panel(
            stat_panel(
                "Recompiles",
                "Recompiles in the selected time range, all selected ranks and frames.",
                "short",
                [query(f"sum({over_range(recompiles)}) or vector(0)", instant=True)],
            )
        )
        .with_panel(
            stat_panel(
                "Steady-state recompiles",
                "Recompiles in steady state (docs/steady-state.md: past the warm-up steps and past what a "
                "bounded set of variants explains) in the selected time range.",
                "short",
                [query(f"sum({over_range(steady)}) or vector(0)", instant=True)],
            )
        )
        .with_panel(
            stat_panel(
                "Recompile-limit hits",
                "Times a frame hit a recompile limit in the range; such a frame runs eagerly afterwards.",
                "short",
                [query(f"sum({over_range(limit_hits)}) or vector(0)", instant=True)],
            )
        )
        .with_panel(
            stat_panel(
                "Compile failures",
                "Compiles that raised in the selected time range.",
                "short",
                [query(f"sum({over_range(failures)}) or vector(0)", instant=True)],
            )
        )
        .with_panel(
            stat_panel(
                "Time compiling",
                "Share of wall-clock time the slowest selected rank spent compiling over the time range.",
                "percentunit",
                [query(f"max(sum by ({who}) (rate({phases}[{RANGE}])))", instant=True)],
            )
        )
        .with_panel(
            stat_panel(
                "Ranks",
                "Processes reporting (recompprof_process_info) right now.",
                "short",
                [query(f"count({s('recompprof_process_info')})", instant=True)],
            )
        )
        .with_row(dashboard.Row("Compiling now"))
        .with_panel(
            stat_panel(
                "Ranks compiling now",
                "Selected ranks with a compile running right now (torch_compile_compiling).",
                "short",
                [query(f"sum({compiling}) or vector(0)", instant=True)],
                h=8,
            )
        )
        .with_panel(
            state_panel(
                "Compiling now by rank",
                "When each rank was compiling. One rank compiling while the others are not is the stall that "
                "ends in a collective timeout: the others wait for it at their next collective "
                "(alert TorchCompileRanksOutOfStep).",
                {0: ("not compiling", "transparent"), 1: ("compiling", "orange")},
                [query(compiling, "{{job}} rank {{rank}}")],
                w=10,
            )
        )
        .with_panel(
            threshold_line(
                timeseries_panel(
                    "Running compile age by rank and frame",
                    "How long the compile running on each rank has run, by frame (every frame, whatever the frame "
                    f"variable: a first compile's frame has no other series yet). The dashed line is the "
                    f"TorchCompileLongCompile threshold ({cfg.long_compile_seconds} s).",
                    "s",
                    [
                        query(
                            f"max by ({who}, frame) ({s('torch_compile_compile_running_seconds')})",
                            "{{job}} rank {{rank}} {{frame}}",
                        )
                    ],
                    w=10,
                ),
                cfg.long_compile_seconds,
            )
        )
        .with_row(dashboard.Row("Recompiles"))
        .with_panel(
            timeseries_panel(
                "Recompiles per minute by job, rank and frame",
                "How often each frame recompiles on each rank. Bursts at start-up are warm-up; a line that "
                "stays up is a frame that keeps recompiling.",
                "cpm",
                [
                    query(
                        f"sum by ({who}, frame) (rate({recompiles}[{RATE}])) * 60",
                        "{{job}} rank {{rank}} {{frame}}",
                    )
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                "Steady-state recompiles per minute",
                "Recompiles in steady state, per frame: a change past what a bounded set of variants "
                "explains keeps costing compile time and usually has a fix (see the reason categories).",
                "cpm",
                [
                    query(
                        f"sum by ({who}, frame) (rate({steady}[{RATE}])) * 60",
                        "{{job}} rank {{rank}} {{frame}}",
                    )
                ],
            )
        )
        .with_panel(
            bar_panel(
                "Top frames by recompiles",
                f"The {cfg.top_n} frames that recompiled most in the time range; click a bar to drill down.",
                "short",
                [
                    query(
                        f"topk({cfg.top_n}, sum by (namespace, job, frame) ({over_range(recompiles)}))",
                        "{{job}} {{frame}}",
                        instant=True,
                    )
                ],
                links=[frame_link],
            )
        )
        .with_panel(
            bar_panel(
                "Top reason categories",
                f"The {cfg.top_n} guard-failure categories (what changed) behind recompiles in the time range.",
                "short",
                [
                    query(
                        f"topk({cfg.top_n}, sum by (reason) ({over_range(guards)}))",
                        "{{reason}}",
                        instant=True,
                    )
                ],
            )
        )
        .with_row(dashboard.Row("Guard failures and limits"))
        .with_panel(
            timeseries_panel(
                "Guard failures per minute by category",
                "Guard failures by reason category over time, all selected ranks and frames.",
                "cpm",
                [query(f"sum by (reason) (rate({guards}[{RATE}])) * 60", "{{reason}}")],
                stack=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Recompile-limit hits",
                "A hit means torch stopped compiling the frame and runs it eagerly from then on.",
                "short",
                [
                    query(
                        f"sum by ({who}, frame, limit) (increase({limit_hits}[{RATE}]))",
                        "{{job}} rank {{rank}} {{frame}} {{limit}}",
                    )
                ],
                bars=True,
            )
        )
        .with_row(dashboard.Row("Compile time"))
        .with_panel(
            bar_panel(
                "Compile time lost per cause",
                f"The {cfg.top_n} causes (frame and reason category of the change that forced each recompile) that "
                "cost the most compile seconds in the time range, backward compiles included: fix the top ones first.",
                "s",
                [
                    query(
                        f"topk({cfg.top_n}, sum by (namespace, job, frame, reason) ({over_range(lost)}))",
                        "{{job}} {{frame}} · {{reason}}",
                        instant=True,
                    )
                ],
                links=[frame_link],
            )
        )
        .with_panel(
            bar_panel(
                "Compile-cache hit rate",
                "Share of FX graph and AOTAutograd cache lookups that hit, in the time range (bypasses excluded: "
                "they could not hit). A warm restart should be near 100 %.",
                "percentunit",
                [
                    query(
                        f"sum by (cache) ({over_range(hits)}) / sum by (cache) ({over_range(decided)})",
                        "{{cache}}",
                        instant=True,
                    )
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                "Compile-cache lookups",
                "Compile-cache lookups per interval by cache and result, and the compile seconds hits saved "
                "(as torch reports them).",
                "short",
                [
                    query(
                        f"sum by (cache, result) (increase({lookups}[{RATE}]))",
                        "{{cache}} {{result}}",
                    ),
                    query(f"sum(increase({saved}[{RATE}]))", "seconds saved", ref="B"),
                ],
                bars=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Share of wall-clock time compiling",
                "Seconds spent compiling per second of wall-clock time, per rank (1 = compiling all the time).",
                "percentunit",
                [query(f"sum by ({who}) (rate({phases}[{RATE}]))", "{{job}} rank {{rank}}")],
            )
        )
        .with_panel(
            timeseries_panel(
                "Compile time by phase",
                "Share of wall-clock time in each exclusive compile phase, stacked: the top of the stack is the "
                "total share compiling.",
                "percentunit",
                [query(f"sum by (phase) (rate({phases}[{RATE}]))", "{{phase}}")],
                stack=True,
            )
        )
        .with_panel(
            heatmap_panel(
                "Compile duration",
                "Distribution of compile durations (one per compile, all phases). Exemplars link a compile to "
                "its trace.",
                "s",
                [
                    query(
                        f"sum by (le) (increase({buckets}[{RATE}]))",
                        "{{le}}",
                        fmt=PromQueryFormat.HEATMAP,
                        exemplar=True,
                    )
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                "Compile duration quantiles",
                "Median and 95th percentile compile duration; the dots are exemplars linking to the traces.",
                "s",
                [
                    query(
                        f"histogram_quantile(0.5, sum by (le) (rate({buckets}[{RATE}])))",
                        "p50",
                        exemplar=True,
                    ),
                    query(
                        f"histogram_quantile(0.95, sum by (le) (rate({buckets}[{RATE}])))",
                        "p95",
                        ref="B",
                        exemplar=True,
                    ),
                ],
            )
        )
        .with_row(dashboard.Row("Health"))
        .with_panel(
            timeseries_panel(
                "Graph breaks",
                "New graph breaks per interval and rank; each break splits a frame into more compiled graphs.",
                "short",
                [
                    query(
                        f"sum by ({who}) (increase({s('torch_compile_graph_breaks_total')}[{RATE}]))",
                        "{{job}} rank {{rank}}",
                    )
                ],
                bars=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Compile failures",
                "Compiles that raised, by exception class; the training step then runs without that graph.",
                "short",
                [
                    query(
                        f"sum by ({who}, error_type) (increase({failures}[{RATE}]))",
                        "{{job}} rank {{rank}} {{error_type}}",
                    )
                ],
                bars=True,
            )
        )
        .with_panel(
            table_panel(
                "Ranks that diverge",
                "Frames that recompiled on some ranks of a job but not on all, in the time range, with each "
                "recompiling rank's count. Ranks that should run the same program but recompile differently "
                "see different inputs or state.",
                "short",
                [query(_divergence(cfg, recompiles), instant=True, fmt=PromQueryFormat.TABLE)],
            )
        )
        .with_panel(
            table_panel(
                "Build and process info",
                "recompprof, torch and Python versions and the rank layout of every process.",
                "none",
                [
                    query(s("recompprof_build_info"), instant=True, fmt=PromQueryFormat.TABLE),
                    query(
                        s("recompprof_process_info"),
                        ref="B",
                        instant=True,
                        fmt=PromQueryFormat.TABLE,
                    ),
                ],
            )
        )
    )
    return board


def _divergence(cfg: Config, recompiles: str) -> str:
    per_rank = f"sum by (namespace, job, rank, frame) ({over_range(recompiles)})"
    ranks = f"count by (namespace, job) ({series(cfg, 'recompprof_process_info')})"
    diverging = f"count by (namespace, job, frame) ({per_rank} > 0) < on (namespace, job) group_left {ranks}"
    return f"({per_rank} > 0) and on (namespace, job, frame) ({diverging})"
