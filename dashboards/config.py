"""The one configuration behind the dashboards, the recording rules and the alerts (a mixin's ``_config``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """Selectors, thresholds and windows; every generated file is a function of one of these."""

    # Extra matchers put on every series selector, e.g. 'cluster="gpu-a"'; empty selects everything.
    selector: str = ""
    # Target labels that together name one training job (add "cluster" for several clusters).
    job_labels: tuple[str, ...] = ("namespace", "job")

    # TorchCompileRecompilesHigh: more than `recompiles_threshold` recompiles on one rank within
    # `recompiles_window`, held for `recompiles_for`.
    recompiles_threshold: int = 10
    recompiles_window: str = "15m"
    recompiles_for: str = "5m"
    # Steady-state recompiles, recompile-limit hits and compile failures: any within `event_window`.
    event_window: str = "15m"
    # TorchCompileTimeShareHigh: share of wall-clock time spent compiling.
    compile_time_share: float = 0.2
    compile_time_window: str = "30m"
    compile_time_for: str = "15m"
    # TorchCompileRankDivergence: a frame recompiles on some ranks of a job but not on all.
    divergence_window: str = "30m"
    divergence_for: str = "10m"
    # TorchCompileGraphBreaksIncreasing: new graph breaks after the first `graph_breaks_window`.
    graph_breaks_window: str = "30m"
    graph_breaks_for: str = "15m"
    # TorchCompileLongCompile: one compile has run on a rank for more than `long_compile_seconds`,
    # held for `long_compile_for`.
    long_compile_seconds: int = 300
    long_compile_for: str = "1m"
    # TorchCompileRanksOutOfStep: some ranks of a job compiling while the others are not, for
    # `out_of_step_for` (keep it well under the job's collective timeout, 10m for NCCL by default).
    out_of_step_for: str = "3m"

    # The runbook every alert links to; the alert's anchor is appended.
    runbook_url: str = "https://github.com/recompprof/recompprof/blob/main/docs/alerts.md"
    rule_group_prefix: str = "recompprof"

    overview_uid: str = "recompprof-overview"
    frame_uid: str = "recompprof-frame"
    dashboard_tags: tuple[str, ...] = ("pytorch", "torch.compile", "recompprof")
    refresh: str = "30s"
    time_from: str = "now-3h"
    top_n: int = 10

    # Kubernetes: the `release` label kube-prometheus-stack selects rules and monitors on.
    release_label: str = "kube-prometheus-stack"
    namespace: str = "monitoring"

    def replace(self, **changes: object) -> Config:
        """A copy with ``changes`` applied (for test variants with short windows)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @property
    def level(self) -> str:
        """The aggregation level in recording-rule names: the job labels plus rank."""
        return "_".join((*self.job_labels, "rank"))


DEFAULT = Config()
