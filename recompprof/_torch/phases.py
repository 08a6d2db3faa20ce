"""Exclusive compile phases from torch's nested, cumulative ``CompilationMetrics`` fields.

This is the one place the mapping lives. torch reports *nested* cumulative times (microseconds)::

    duration_us (forward: == dynamo_cumulative_compile_time_us; backward: backward_cumulative_...)
      aot_autograd_cumulative_compile_time_us      the backend_compile region (AOT autograd + Inductor,
      |                                            or any custom backend); absent for backward records
      +- inductor_cumulative_compile_time_us       compile_fx: lowering + scheduling + code generation
         +- inductor_code_gen_cumulative_...       code generation, including loading the module
            +- triton_compile_time_us              kernel compile: Triton's precompile, and the wait
                                                   for kernels compiled in worker processes

recompprof reports *exclusive* phases that sum to the compile's duration::

    dynamo_trace      = duration - backend          (bytecode tracing, guards; 0 for backward)
    aot_autograd      = backend - inductor          (whole backend time for non-Inductor backends)
    inductor_lowering = inductor - code_gen
    code_gen          = code_gen - kernel_compile
    kernel_compile    = triton_compile_time
    other             = duration - sum(above)       (only where torch's nesting does not hold)

A missing field counts as 0, so its time stays in the enclosing phase. Every value is clamped at 0.

C++ kernels are timed there only where torch waits for them among worker processes' kernels; compiled
in the process (one compile thread) or before that wait, their time is in ``code_gen``. Measured on an
H200 with 16 cores (torch 2.11): a function with one CPU op spent 50 s in ``code_gen`` and 0.004 s in
``kernel_compile``.

torch 2.4 and 2.5 record the same nesting in seconds, under other names (no kernel compile field, so
kernel compile time stays in ``code_gen``); a record without ``duration_us`` is read from them::

    entire_frame_compile_time_s > backend_compile_time_s > inductor_compile_time_s > code_gen_time_s
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_US = 1e-6


def _us(value: Any) -> float:
    return float(value) * _US if isinstance(value, (int, float)) and value > 0 else 0.0


def _s(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


def exclusive_phases(metrics: Any) -> tuple[float, dict[str, float]]:
    """``(duration_seconds, {phase: exclusive seconds})`` for one ``CompilationMetrics`` record."""
    return phases_of(lambda name: getattr(metrics, name, None))


def phases_of(get: Callable[[str], Any]) -> tuple[float, dict[str, float]]:
    """:func:`exclusive_phases` of the record whose field ``name`` is ``get(name)`` (None: absent)."""
    if get("duration_us") is None and get("entire_frame_compile_time_s") is not None:
        return _phases(
            _s(get("entire_frame_compile_time_s")),
            _s(get("backend_compile_time_s")),
            _s(get("inductor_compile_time_s")),
            _s(get("code_gen_time_s")),
            0.0,
        )
    backward = get("is_forward") is False
    total = _us(get("duration_us")) or _us(get("dynamo_cumulative_compile_time_us"))
    if backward:
        total = total or _us(get("backward_cumulative_compile_time_us"))
    backend = total if backward else _us(get("aot_autograd_cumulative_compile_time_us"))
    return _phases(
        total,
        backend,
        _us(get("inductor_cumulative_compile_time_us")),
        _us(get("inductor_code_gen_cumulative_compile_time_us")),
        _us(get("triton_compile_time_us")),
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
