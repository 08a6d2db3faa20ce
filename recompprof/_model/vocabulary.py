"""The event model's closed vocabularies: guard-failure categories, compile phases, outcomes, compile
caches and their results, recompile limits.

They are the model's own definitions (``recompprof._model.events`` types its fields with them), kept in
a module of their own that imports nothing heavy, so what restates them (the lake's columns,
``recompprof._history.tables``) derives them from here instead of spelling them again.
"""

from __future__ import annotations

from typing import Literal, get_args

Category = Literal[
    "size",
    "stride",
    "ndim",
    "dtype",
    "device",
    "requires_grad",
    "dispatch_keys",
    "python_constant",
    "global",
    "module_attribute",
    "object_identity",
    "type",
    "container_length",
    "dict_keys",
    "aliasing",
    "grad_mode",
    "autocast",
    "global_state",
    "symbolic_shape",
    "mark_dynamic",
    "backend_mismatch",
    "invalidated",
    "other",
]
CATEGORIES: tuple[str, ...] = get_args(Category)

Phase = Literal[
    "dynamo_trace", "aot_autograd", "inductor_lowering", "code_gen", "kernel_compile", "other"
]
PHASES: tuple[str, ...] = get_args(Phase)

Outcome = Literal["ok", "failed", "limit_hit"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
# Compile caches torch reports per compile in CompilationMetrics, and what a lookup did.
CacheName = Literal["fx_graph", "aot_autograd"]
CACHES: tuple[str, ...] = get_args(CacheName)
CacheResult = Literal["hit", "miss", "bypass"]
CACHE_RESULTS: tuple[str, ...] = get_args(CacheResult)
LimitName = Literal["recompile_limit", "accumulated_recompile_limit"]
LIMITS: tuple[str, ...] = get_args(LimitName)
