"""The frame drill-down dashboard: one frame's compiles, recompile reasons, cache and compile phases."""

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
    timeseries_panel,
    variables,
)

RATE = "$__rate_interval"
RANGE = "$__range"
FRAME = 'frame="$frame"'


def build(cfg: Config) -> dashboard.Dashboard:
    def s(metric: str, *matchers: str) -> str:
        return series(cfg, metric, *matchers)

    compiles = s("torch_compile_compiles_total", FRAME)
    recompiles = s("torch_compile_recompiles_total", FRAME)
    guards = s("torch_compile_guard_failures_total", FRAME)
    limit_hits = s("torch_compile_recompile_limit_hits_total", FRAME)
    entries = s("torch_compile_cache_entries", FRAME)
    lost = s("torch_compile_recompile_seconds_total", FRAME)
    limit = s("torch_compile_recompile_limit", 'limit="recompile_limit"')
    phases = s("torch_compile_phase_seconds_total")
    buckets = s("torch_compile_duration_seconds_bucket")
    who = "namespace, job, rank"
    return (
        dashboard.Dashboard("torch.compile frame drill-down")
        .uid(cfg.frame_uid)
        .description(
            "One compiled frame (function and source line): its compiles, why it recompiles, how "
            "full its cache is, and the compile phases of the ranks running it."
        )
        .tags(list(cfg.dashboard_tags))
        .refresh(cfg.refresh)
        .time(cfg.time_from, "now")
        .variables(variables(cfg, frame_multi=False))
        .link(link("Overview", cfg.overview_uid))
        .with_row(dashboard.Row("$frame"))
        .with_panel(
            stat_panel(
                "Compiles",
                "Compiles of this frame in the time range, all selected ranks.",
                "short",
                [query(f"sum({over_range(compiles)}) or vector(0)", instant=True)],
            )
        )
        .with_panel(
            stat_panel(
                "Recompiles",
                "Recompiles of this frame in the time range, all selected ranks.",
                "short",
                [query(f"sum({over_range(recompiles)}) or vector(0)", instant=True)],
            )
        )
        .with_panel(
            stat_panel(
                "Cache entries",
                "Compiled variants the frame holds now (largest over the selected ranks).",
                "short",
                [query(f"max({entries})", instant=True)],
            )
        )
        .with_panel(
            stat_panel(
                "Recompile-limit hits",
                "Times this frame hit a recompile limit in the time range.",
                "short",
                [query(f"sum({over_range(limit_hits)}) or vector(0)", instant=True)],
            )
        )
        .with_panel(
            timeseries_panel(
                "Compiles and recompiles per minute",
                "Compiles (first and later) and recompiles of this frame per rank.",
                "cpm",
                [
                    query(
                        f"sum by ({who}) (rate({compiles}[{RATE}])) * 60", "compiles rank {{rank}}"
                    ),
                    query(
                        f"sum by ({who}) (rate({recompiles}[{RATE}])) * 60",
                        "recompiles rank {{rank}}",
                        ref="B",
                    ),
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                "Recompile reasons per minute",
                "Guard failures of this frame by reason category: what changed between calls.",
                "cpm",
                [query(f"sum by (reason) (rate({guards}[{RATE}])) * 60", "{{reason}}")],
                stack=True,
            )
        )
        .with_panel(
            bar_panel(
                "Compile time lost per cause",
                "Compile seconds this frame's recompiles (and their backward compiles) cost in the time range, by "
                "the reason category of the change that forced them.",
                "s",
                [
                    query(
                        f"sort_desc(sum by (reason) ({over_range(lost)}))",
                        "{{reason}}",
                        instant=True,
                    )
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                "Cache entries and recompile limit",
                "Compiled variants the frame holds per rank, against torch's recompile limit: at the limit "
                "the frame runs eagerly.",
                "short",
                [
                    query(f"max by ({who}) ({entries})", "entries rank {{rank}}"),
                    query(f"max by ({who}) ({limit})", "limit rank {{rank}}", ref="B"),
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                "Recompile-limit hits",
                "Hits of this frame per rank and limit.",
                "short",
                [
                    query(
                        f"sum by ({who}, limit) (increase({limit_hits}[{RATE}]))",
                        "rank {{rank}} {{limit}}",
                    )
                ],
                bars=True,
            )
        )
        .with_row(dashboard.Row("Compile phases of the selected ranks"))
        .with_panel(
            timeseries_panel(
                "Compile time by phase",
                "Share of wall-clock time in each compile phase on the selected ranks (phase metrics are per "
                "rank, not per frame; the frame's own phases are in its traces).",
                "percentunit",
                [query(f"sum by (phase) (rate({phases}[{RATE}]))", "{{phase}}")],
                stack=True,
            )
        )
        .with_panel(
            heatmap_panel(
                "Compile duration",
                "Compile durations on the selected ranks; exemplars open the trace of one compile with its "
                "phase spans.",
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
    )
