"""Panel, query and variable helpers over grafana-foundation-sdk, so every panel is built the same way."""

from __future__ import annotations

from grafana_foundation_sdk.builders import (
    bargauge,
    common as common_builders,
    dashboard,
    heatmap,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardLinkType,
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.heatmap import HeatmapColorMode
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from dashboards.config import Config
from dashboards.promql import increase_with_new, selector

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# Matchers every query carries; ``frame`` is added where the panel is about frames.
SCOPE = ('namespace=~"$namespace"', 'job=~"$job"', 'rank=~"$rank"')


def series(cfg: Config, metric: str, *matchers: str) -> str:
    """``metric`` scoped to the dashboard's variables (and the configured selector)."""
    return selector(cfg, metric, *SCOPE, *matchers)


def over_range(counter: str) -> str:
    """Increase of ``counter`` over the dashboard's time range, counting series born inside it."""
    return f"({increase_with_new(counter, '$__range')})"


def query(
    expr: str,
    legend: str = "",
    *,
    ref: str = "A",
    instant: bool = False,
    fmt: PromQueryFormat | None = None,
    exemplar: bool = False,
) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant()
    else:
        q = q.range()
    if fmt is not None:
        q = q.format(fmt)
    return q.exemplar(exemplar)


def _common(panel, title: str, description: str, unit: str, queries, w: int, h: int):  # type: ignore[no-untyped-def]
    panel = (
        panel.title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .span(w)
        .height(h)
    )
    for q in queries:
        panel = panel.with_target(q)
    return panel


def timeseries_panel(
    title: str,
    description: str,
    unit: str,
    queries: list[prometheus.Dataquery],
    *,
    stack: bool = False,
    bars: bool = False,
    w: int = 12,
    h: int = 8,
) -> timeseries.Panel:
    panel = _common(timeseries.Panel(), title, description, unit, queries, w, h).min(0)
    if stack:
        panel = panel.stacking(
            common_builders.StackingConfig().mode(common.StackingMode.NORMAL)
        ).fill_opacity(40)
    if bars:
        panel = panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(80)
    return panel.legend(
        common_builders.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["max", "lastNotNull"])
    )


def state_panel(
    title: str,
    description: str,
    states: dict[int, tuple[str, str]],
    queries: list[prometheus.Dataquery],
    *,
    w: int = 12,
    h: int = 8,
) -> statetimeline.Panel:
    """A state timeline whose values are ``states``: value -> (text, colour)."""
    mapping = ValueMap(
        {
            str(value): ValueMappingResult(text=text, color=color, index=index)
            for index, (value, (text, color)) in enumerate(states.items())
        }
    )
    return (
        _common(statetimeline.Panel(), title, description, "none", queries, w, h)
        .mappings([mapping])
        .merge_values(True)
        .show_value(common.VisibilityMode.NEVER)
        .legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .placement(common.LegendPlacement.BOTTOM)
        )
    )


def threshold_line(panel: timeseries.Panel, value: float) -> timeseries.Panel:
    """Draw ``value`` (an alert's threshold) as a dashed red line across a time series panel."""
    return panel.thresholds(
        dashboard.ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(None, "green"), Threshold(value, "red")])
    ).thresholds_style(
        common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)
    )


def stat_panel(
    title: str,
    description: str,
    unit: str,
    queries: list[prometheus.Dataquery],
    *,
    w: int = 4,
    h: int = 4,
) -> stat.Panel:
    return (
        _common(stat.Panel(), title, description, unit, queries, w, h)
        .graph_mode(common.BigValueGraphMode.NONE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
    )


def bar_panel(
    title: str,
    description: str,
    unit: str,
    queries: list[prometheus.Dataquery],
    *,
    w: int = 12,
    h: int = 8,
    links: list[dashboard.DashboardLink] | None = None,
) -> bargauge.Panel:
    panel = (
        _common(bargauge.Panel(), title, description, unit, queries, w, h)
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.BASIC)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
    )
    return panel.data_links(links) if links else panel


def table_panel(
    title: str,
    description: str,
    unit: str,
    queries: list[prometheus.Dataquery],
    *,
    w: int = 12,
    h: int = 8,
) -> table.Panel:
    return _common(table.Panel(), title, description, unit, queries, w, h)


def heatmap_panel(
    title: str,
    description: str,
    unit: str,
    queries: list[prometheus.Dataquery],
    *,
    w: int = 12,
    h: int = 8,
) -> heatmap.Panel:
    return (
        _common(heatmap.Panel(), title, description, unit, queries, w, h)
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit(unit))
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.LE))
        .color(
            heatmap.HeatmapColorOptions().mode(HeatmapColorMode.SCHEME).scheme("Oranges").steps(64)
        )
        .exemplars_color("rgba(255,0,255,0.7)")
    )


def variables(
    cfg: Config, *, frame_multi: bool
) -> list[dashboard.QueryVariable | dashboard.DatasourceVariable]:
    """datasource, namespace, job, rank and frame, each narrowing the next."""
    info = "recompprof_process_info"

    def var(
        name: str,
        label: str,
        source: str,
        *,
        multi: bool = True,
        sort: VariableSort = VariableSort.ALPHABETICAL_ASC,
    ) -> dashboard.QueryVariable:
        v = (
            dashboard.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(f"label_values({source}, {name})")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(sort)
        )
        return v.multi(True).include_all(True).all_value(".*") if multi else v

    return [
        dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        var("namespace", "Namespace", selector(cfg, info)),
        var("job", "Job", selector(cfg, info, 'namespace=~"$namespace"')),
        var(
            "rank",
            "Rank",
            selector(cfg, info, 'namespace=~"$namespace"', 'job=~"$job"'),
            sort=VariableSort.NUMERICAL_ASC,
        ),
        var(
            "frame",
            "Frame",
            selector(cfg, "torch_compile_compiles_total", *SCOPE),
            multi=frame_multi,
        ),
    ]


def link(title: str, uid: str) -> dashboard.DashboardLink:
    """A link to another recompprof dashboard keeping the time range and the variables."""
    return (
        dashboard.DashboardLink(title)
        .type(DashboardLinkType.LINK)
        .url(f"/d/{uid}")
        .icon("dashboard")
        .include_vars(True)
        .keep_time(True)
        .tooltip(title)
    )
