"""Recording rules and alerts, as the plain Prometheus rules document, from one :class:`Config`."""

from __future__ import annotations

from typing import Any

import yaml

from dashboards.config import Config
from dashboards.promql import by, increase_with_new, selector

ALERTS = (
    "TorchCompileRecompilesHigh",
    "TorchCompileSteadyStateRecompiles",
    "TorchCompileRecompileLimitHit",
    "TorchCompileCompileFailures",
    "TorchCompileTimeShareHigh",
    "TorchCompileRankDivergence",
    "TorchCompileGraphBreaksIncreasing",
    "TorchCompileLongCompile",
    "TorchCompileRanksOutOfStep",
)


def recorded(cfg: Config) -> dict[str, str]:
    """Names of the recording rules the alerts use, keyed by what they hold."""
    jobs = "_".join(cfg.job_labels)
    return {
        "recompiles": f"{cfg.level}:torch_compile_recompiles:increase{cfg.recompiles_window}",
        "frame_recompiles": f"{cfg.level}_frame:torch_compile_recompiles:increase{cfg.divergence_window}",
        "compile_share": f"{cfg.level}:torch_compile_phase_seconds:rate{cfg.compile_time_window}",
        "ranks": f"{jobs}:recompprof_process_info:count",
    }


def recording_rules(cfg: Config) -> list[dict[str, Any]]:
    names = recorded(cfg)
    job = by(*cfg.job_labels)
    recompiles = selector(cfg, "torch_compile_recompiles_total")
    return [
        {
            "record": names["recompiles"],
            "expr": f"sum by ({job}, rank) ({increase_with_new(recompiles, cfg.recompiles_window)})",
        },
        {
            "record": names["frame_recompiles"],
            "expr": f"sum by ({job}, rank, frame) ({increase_with_new(recompiles, cfg.divergence_window)})",
        },
        {
            # Phases are exclusive and sum to the compile time, so their summed rate is the share
            # of wall-clock time spent compiling.
            "record": names["compile_share"],
            "expr": f"sum by ({job}, rank) "
            f"(rate({selector(cfg, 'torch_compile_phase_seconds_total')}[{cfg.compile_time_window}]))",
        },
        {
            "record": names["ranks"],
            "expr": f"count by ({job}) ({selector(cfg, 'recompprof_process_info')})",
        },
    ]


def _rank_of_job(cfg: Config, word: str = "rank") -> str:
    return f"{word} {{{{ $labels.rank }}}} of {_job(cfg)}"


def _job(cfg: Config) -> str:
    return "/".join(f"{{{{ $labels.{label} }}}}" for label in cfg.job_labels)


def _alert(
    cfg: Config,
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    for_: str = "0s",
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ not in ("0s", "0m", "0"):
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": f"{cfg.runbook_url}#{name.lower()}",
    }
    return rule


def _alert_scoped(cfg: Config, metric: str, labels: tuple[str, ...]) -> tuple[str, str]:
    """A selector for an annotation's template query, matching the alert's own ``labels``, and its printf arguments.

    Indexed verbs, so the selector may appear several times in the query while the arguments are given once.
    """
    matchers = ", ".join(f"{label}=%[{i}]q" for i, label in enumerate(labels, start=1))
    if cfg.selector:
        matchers = f"{cfg.selector}, {matchers}"
    return f"{metric}{{{matchers}}}", " ".join(f"$labels.{label}" for label in labels)


def _compiling_ranks(cfg: Config) -> str:
    """An annotation fragment naming each rank of the alerting job that is compiling, its frame and for how long.

    Rendered from ``torch_compile_compile_running_seconds`` when Prometheus renders the annotation; the
    longest-running compiles first, at most ``top_n`` of them; "unknown" when no rank of the job reports one.
    """
    running, args = _alert_scoped(cfg, "torch_compile_compile_running_seconds", cfg.job_labels)
    promql = f"sort_desc(topk({cfg.top_n}, max by (rank, frame) ({running})))"
    return (
        f"{{{{ range $i, $c := printf `{promql}` {args} | query }}}}{{{{ if $i }}}}; {{{{ end }}}}"
        f"rank {{{{ $c.Labels.rank }}}} on {{{{ $c.Labels.frame }}}} for {{{{ $c.Value | humanizeDuration }}}}"
        f"{{{{ else }}}}unknown{{{{ end }}}}"
    )


def _top_cause(cfg: Config) -> str:
    """An annotation fragment naming the cause that cost the alerting rank the most compile seconds.

    Prometheus runs the query when it renders the annotation (template ``query``); the alert's own job
    labels and rank select the series. Without recompile seconds (only first compiles) it renders nothing.
    """
    lost, args = _alert_scoped(
        cfg, "torch_compile_recompile_seconds_total", (*cfg.job_labels, "rank")
    )
    promql = f"topk(1, sum by (frame, reason) ({increase_with_new(lost, cfg.compile_time_window)}))"
    return (
        f"{{{{ with printf `{promql}` {args} | query }}}}{{{{ with first . }}}} Top cause: {{{{ .Labels.reason }}}} "
        f"in {{{{ .Labels.frame }}}}, {{{{ .Value | humanizeDuration }}}} lost to recompiles; see the "
        f'report\'s "fix these first" list.{{{{ end }}}}{{{{ end }}}}'
    )


def alert_rules(cfg: Config) -> list[dict[str, Any]]:
    names = recorded(cfg)
    job = by(*cfg.job_labels)
    where, where_start = _rank_of_job(cfg), _rank_of_job(cfg, "Rank")
    value = '{{ printf "%.0f" $value }}'
    event = cfg.event_window

    def new_events(metric: str, *labels: str) -> str:
        return f"sum by ({by(*cfg.job_labels, *labels)}) ({increase_with_new(selector(cfg, metric), event)}) > 0"

    breaks = selector(cfg, "torch_compile_graph_breaks_total")
    running = selector(cfg, "torch_compile_compile_running_seconds")
    compiling = selector(cfg, "torch_compile_compiling")
    return [
        _alert(
            cfg,
            "TorchCompileRecompilesHigh",
            f"{names['recompiles']} > {cfg.recompiles_threshold}",
            "warning",
            "torch.compile keeps recompiling.",
            f"{where_start} recompiled {value} times in the last {cfg.recompiles_window} "
            f"(threshold {cfg.recompiles_threshold}).",
            cfg.recompiles_for,
        ),
        _alert(
            cfg,
            "TorchCompileSteadyStateRecompiles",
            new_events("torch_compile_steady_state_recompiles_total", "rank", "frame"),
            "warning",
            "torch.compile keeps recompiling in steady state.",
            f"Frame {{{{ $labels.frame }}}} on {where} recompiled {value} times in steady state in the "
            f"last {event} (a change past what a bounded set of variants explains, see "
            "docs/steady-state.md).",
        ),
        _alert(
            cfg,
            "TorchCompileRecompileLimitHit",
            new_events("torch_compile_recompile_limit_hits_total", "rank", "frame", "limit"),
            "warning",
            "A frame hit the torch.compile recompile limit and now runs eagerly.",
            f"Frame {{{{ $labels.frame }}}} on {where} hit {{{{ $labels.limit }}}} {value} times in the "
            f"last {event}; it falls back to eager execution.",
        ),
        _alert(
            cfg,
            "TorchCompileCompileFailures",
            new_events("torch_compile_compile_failures_total", "rank", "error_type"),
            "warning",
            "torch.compile failed to compile.",
            f"{{{{ $labels.error_type }}}} failed {value} compiles on {where} in the last {event}.",
        ),
        _alert(
            cfg,
            "TorchCompileTimeShareHigh",
            f"{names['compile_share']} > {cfg.compile_time_share}",
            "warning",
            "A training job spends a large share of its time compiling.",
            f"{where_start} spent {{{{ $value | humanizePercentage }}}} of the last {cfg.compile_time_window} "
            f"compiling (threshold {cfg.compile_time_share:.0%})." + _top_cause(cfg),
            cfg.compile_time_for,
        ),
        _alert(
            cfg,
            "TorchCompileRankDivergence",
            f"count by ({job}, frame) ({names['frame_recompiles']} > 0)\n"
            f"  < on ({job}) group_left\n{names['ranks']}",
            "warning",
            "A frame recompiles on some ranks of a job but not on all.",
            f"Frame {{{{ $labels.frame }}}} recompiled on {value} ranks of {_job(cfg)} in the last "
            f"{cfg.divergence_window}, not on all of them.",
            cfg.divergence_for,
        ),
        _alert(
            cfg,
            "TorchCompileGraphBreaksIncreasing",
            f"sum by ({job}, rank) (increase({breaks}[{cfg.graph_breaks_window}]) "
            f"and {breaks} offset {cfg.graph_breaks_window}) > 0",
            "info",
            "torch.compile graph breaks keep increasing.",
            f"{where_start} had {value} new graph breaks in the last {cfg.graph_breaks_window}, after its "
            f"first {cfg.graph_breaks_window}.",
            cfg.graph_breaks_for,
        ),
        _alert(
            cfg,
            "TorchCompileLongCompile",
            f"max by ({job}, rank, frame) ({running}) > {cfg.long_compile_seconds}",
            "warning",
            "One torch.compile compile has been running for a long time.",
            f"{where_start} has been compiling frame {{{{ $labels.frame }}}} for "
            f"{{{{ $value | humanizeDuration }}}} (threshold {cfg.long_compile_seconds}s); the rank does "
            "not train meanwhile, and the other ranks wait for it at their next collective.",
            cfg.long_compile_for,
        ),
        _alert(
            cfg,
            "TorchCompileRanksOutOfStep",
            f"count by ({job}) ({compiling} == 1)\n  and on ({job})\ncount by ({job}) ({compiling} == 0)",
            "warning",
            "Some ranks of a job are compiling while the others are not.",
            f"Ranks of {_job(cfg)} out of step for more than {cfg.out_of_step_for}: {value} compiling while "
            f"the others are not, which wait at their next collective until it completes or times out. "
            f"Compiling: {_compiling_ranks(cfg)}.",
            cfg.out_of_step_for,
        ),
    ]


def rules_document(cfg: Config) -> dict[str, Any]:
    """The plain rules file: one group of recording rules, one of alerts."""
    return {
        "groups": [
            {"name": f"{cfg.rule_group_prefix}.rules", "rules": recording_rules(cfg)},
            {"name": f"{cfg.rule_group_prefix}.alerts", "rules": alert_rules(cfg)},
        ]
    }


def render(cfg: Config) -> str:
    """The rules file as YAML text."""
    header = (
        "# Generated by `python -m dashboards.generate` from dashboards/config.py; do not edit.\n"
    )
    return header + dump(rules_document(cfg))


def prometheus_rule(rules_yaml: str, cfg: Config) -> dict[str, Any]:
    """Wrap a plain rules file as a prometheus-operator PrometheusRule object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "recompprof",
            "labels": {"app.kubernetes.io/name": "recompprof", "release": cfg.release_label},
        },
        "spec": yaml.safe_load(rules_yaml),
    }


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump(document: Any) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=1_000_000, allow_unicode=True)
