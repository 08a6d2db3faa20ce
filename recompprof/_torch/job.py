"""torch's own name for the job a process belongs to: ``torch.compiler.config.job_id``."""

from __future__ import annotations

from typing import Any

from recompprof import _internal


def torch_job_id() -> str | None:
    """``torch.compiler.config.job_id`` (set from ``TORCH_COMPILE_JOB_ID``: "uniquely identifies a
    training job … multiple attempts of the same job"), None where it is unset or this torch has none."""
    with _internal.contain("torch.job_id", "torch's job id is not read; the job falls back"):
        try:
            import torch.compiler.config as config
        except ImportError:  # torch before 2.5: no such config
            return None
        value: Any = getattr(config, "job_id", None)
        return str(value) if value else None
    return None
