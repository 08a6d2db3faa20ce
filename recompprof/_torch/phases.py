"""Exclusive compile phases from torch's nested, cumulative ``CompilationMetrics`` fields.

This is the one place the mapping lives. torch reports *nested* cumulative times (microseconds)::

    duration_us (forward: == dynamo_cumulative_compile_time_us; backward: backward_cumulative_...)
      aot_autograd_cumulative_compile_time_us      the backend_compile region (AOT autograd + Inductor,
      |                                            or any custom backend); absent for backward records
      +- inductor_cumulative_compile_time_us       compile_fx: lowering + scheduling + code generation
         +- inductor_code_gen_cumulative_...       code generation, including loading the module
            +- triton_compile_time_us              kernel compile (Triton on GPU, C++ on CPU)

recompprof reports *exclusive* phases that sum to the compile's duration::

    dynamo_trace      = duration - backend          (bytecode tracing, guards; 0 for backward)
    aot_autograd      = backend - inductor          (whole backend time for non-Inductor backends)
    inductor_lowering = inductor - code_gen
    code_gen          = code_gen - kernel_compile
    kernel_compile    = triton_compile_time
    other             = duration - sum(above)       (only where torch's nesting does not hold)

A missing field counts as 0, so its time stays in the enclosing phase. Every value is clamped at 0.

torch 2.4 and 2.5 record the same nesting in seconds, under other names (no kernel compile field, so
kernel compile time stays in ``code_gen``); a record without ``duration_us`` is read from them::

    entire_frame_compile_time_s > backend_compile_time_s > inductor_compile_time_s > code_gen_time_s
"""

from __future__ import annotations

from typing import Any

_US = 1e-6


def _us(metrics: Any, name: str) -> float:
    value = getattr(metrics, name, None)
    return float(value) * _US if isinstance(value, (int, float)) and value > 0 else 0.0


def _s(metrics: Any, name: str) -> float:
    value = getattr(metrics, name, None)
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


def exclusive_phases(metrics: Any) -> tuple[float, dict[str, float]]:
    """``(duration_seconds, {phase: exclusive seconds})`` for one ``CompilationMetrics`` record."""
    if (
        getattr(metrics, "duration_us", None) is None
        and getattr(metrics, "entire_frame_compile_time_s", None) is not None
    ):
        return _phases(
            _s(metrics, "entire_frame_compile_time_s"),
            _s(metrics, "backend_compile_time_s"),
            _s(metrics, "inductor_compile_time_s"),
            _s(metrics, "code_gen_time_s"),
            0.0,
        )
    backward = getattr(metrics, "is_forward", True) is False
    total = _us(metrics, "duration_us") or _us(metrics, "dynamo_cumulative_compile_time_us")
    if backward:
        total = total or _us(metrics, "backward_cumulative_compile_time_us")
    backend = total if backward else _us(metrics, "aot_autograd_cumulative_compile_time_us")
    return _phases(
        total,
        backend,
        _us(metrics, "inductor_cumulative_compile_time_us"),
        _us(metrics, "inductor_code_gen_cumulative_compile_time_us"),
        _us(metrics, "triton_compile_time_us"),
    )


def _phases(
    total: float, backend: float, inductor: float, code_gen: float, kernel: float
) -> tuple[float, dict[str, float]]:
    """Exclusive phases from nested cumulative times (each clamped to the one enclosing it)."""
    backend = min(backend, total)
    inductor = min(inductor, backend)
    code_gen = min(code_gen, inductor)
    kernel = min(kernel, code_gen) if code_gen else 0.0
    phases = {
        "dynamo_trace": total - backend,
        "aot_autograd": backend - inductor,
        "inductor_lowering": inductor - code_gen,
        "code_gen": code_gen - kernel,
        "kernel_compile": kernel,
    }
    phases = {name: max(0.0, seconds) for name, seconds in phases.items()}
    phases["other"] = max(0.0, total - sum(phases.values()))
    return total, phases
