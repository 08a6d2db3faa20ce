"""recompprof's monitoring mixin: Grafana dashboards, recording rules and alerts from one configuration.

Regenerate the committed files with ``python -m dashboards.generate`` (``--check`` to verify them).
"""

from __future__ import annotations

from dashboards.config import DEFAULT, Config

__all__ = ["DEFAULT", "Config"]
