"""Small PromQL builders shared by the dashboards and the rules, so both select series the same way."""

from __future__ import annotations

from dashboards.config import Config


def selector(cfg: Config, metric: str, *matchers: str) -> str:
    """``metric{...}`` with the configured selector and ``matchers`` (empty braces left out)."""
    parts = [m for m in (cfg.selector, *matchers) if m]
    return f"{metric}{{{', '.join(parts)}}}" if parts else metric


def by(*labels: str) -> str:
    return ", ".join(labels)


def increase_with_new(series: str, window: str) -> str:
    """Increase of counter ``series`` over ``window``, counting series born inside the window.

    ``increase()`` needs two samples, so a series that first appears already above zero (a frame that
    hits the recompile limit once, a job that recompiled before its first scrape) would read as no
    increase. A series absent ``window`` ago has its whole value counted instead.
    """
    return f"({series} unless {series} offset {window}) or increase({series}[{window}])"
