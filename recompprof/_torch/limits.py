"""The recompile limits configured in ``torch._dynamo.config``, as plain values."""

from __future__ import annotations

from recompprof._internal import contain
from recompprof._model.vocabulary import LIMITS
from recompprof._torch.versions import torch_info


def configured_limit(name: str) -> int | None:
    """The value of limit ``name`` (``recompile_limit`` / ``accumulated_recompile_limit``), None if unknown."""
    with contain(
        "torch.limits", f"the configured {name} is unknown (torch._dynamo.config changed)"
    ):
        from torch._dynamo import config

        info = torch_info()
        attr = (
            info.limit_config_name
            if name == "recompile_limit"
            else info.accumulated_limit_config_name
        )
        value = getattr(config, attr)
        return int(value) if value is not None else None
    return None  # counted above: a renamed or retyped config only loses this figure


def configured_limits() -> dict[str, int | None]:
    """Every limit of ``events.LIMITS`` by name."""
    return {name: configured_limit(name) for name in LIMITS}
