"""The recompile limits configured in ``torch._dynamo.config``, as plain values."""

from __future__ import annotations

from recompprof._model.events import LIMITS
from recompprof._torch.versions import torch_info


def configured_limit(name: str) -> int | None:
    """The value of limit ``name`` (``recompile_limit`` / ``accumulated_recompile_limit``), None if unknown."""
    try:
        from torch._dynamo import config

        info = torch_info()
        attr = info.limit_config_name if name == "recompile_limit" else info.accumulated_limit_config_name
        value = getattr(config, attr)
        return int(value) if value is not None else None
    except Exception:  # noqa: BLE001 - a renamed config only loses this figure
        return None


def configured_limits() -> dict[str, int | None]:
    """Every limit of ``events.LIMITS`` by name."""
    return {name: configured_limit(name) for name in LIMITS}
