"""The version table: which torch release changed each internal recompprof reads, in one place.

Every adapter asks ``torch_info().has(gate)`` (or reads a name from ``TorchInfo``) instead of testing
the version itself; below a gate's version the signal is off and says why (``Gate.off``), never a
guess. Adapters still check that the internal is really there, so a gate that is wrong for some
build turns the signal off with the reason instead of failing. tests/test_versions.py pins each gate
to the release where torch changed (on the installed torch: the gate agrees with what torch has),
and scripts/compat.sh runs those tests on every release from 2.4 to the newest.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass

# The oldest torch recompprof supports (pyproject's torch extra says the same); the matrix in
# docs/compatibility.md is run from here on.
SUPPORTED = (2, 4)


@dataclass(frozen=True)
class Gate:
    """Torch has ``what`` from release ``since`` on; below it recompprof does ``off``."""

    since: tuple[int, int]
    what: str
    off: str


GATES: dict[str, Gate] = {
    # --- signals (monitor mode)
    "compilation_metrics": Gate(
        (2, 4),
        "CompilationMetrics passed to torch._utils_internal.log_compilation_event on every compile",
        "no compile events",
    ),
    "phase_times": Gate(
        (2, 4),
        "nested per-phase times in CompilationMetrics (*_compile_time_s; *_cumulative_compile_time_us "
        "and triton_compile_time_us from 2.6, see phases.py)",
        "each compile's whole duration is reported as dynamo_trace",
    ),
    "recompile_limit_hits": Gate(
        (2, 6),
        "CompilationMetrics records (fail_reason '<limit> reached') for frames stopped by the recompile limit",
        "recompile-limit hits are not recorded (torch only logs a warning)",
    ),
    "backward_compiles": Gate(
        (2, 6),
        "CompilationMetrics records for lazily compiled backward graphs (is_forward=False)",
        "backward compiles are not recorded; their compile time is missing",
    ),
    "backward_compile_start": Gate(
        (2, 8),
        "compile-start callbacks that name their trigger (CallbackArgs.callback_trigger), LAZY_BACKWARD for "
        "a backward compiled at the first .backward()",
        "a backward compile's start is not seen: while one runs, status(), the gauge and the offline commands "
        "say a backward compile may be running",
    ),
    "guard_failures": Gate(
        (2, 4),
        "torch._dynamo.utils.guard_failures[code]: one reason string per failing cache entry",
        "recompiles carry only CompilationMetrics.recompile_reason",
    ),
    "reasons_before_compile_start": Gate(
        (2, 6),
        "guard failures computed (torch._dynamo.utils.guard_failures) before the compile-start callbacks run",
        "compile_start events carry no reason (is_recompile is still set from the compile id)",
    ),
    "reset_clears_callbacks": Gate(
        (2, 4),
        "torch._dynamo.callback.callback_handler, whose clear() torch._dynamo.reset() calls (recompprof puts its "
        "compile callbacks back there and counts the reset)",
        "a reset is not seen: the first compile after it has no compile_start, and events carry no reset generation",
    ),
    "graph_breaks": Gate(
        (2, 4), 'torch._dynamo.utils.counters["graph_break"]', "no graph-break events"
    ),
    "graph_break_trace": Gate(
        (2, 6),
        "every graph break passed to torch._logging.trace_structured as a dynamo_graph_break_reason artifact",
        "graph breaks are read from counters['graph_break'], which misses breaks torch cannot resume from "
        "and has no location, explanation or hints",
    ),
    "recompile_user_context": Gate(
        (2, 9),
        "torch._dynamo.utils.register_hook_for_recompile_user_context: hooks called on each compile, whose "
        "strings its CompilationMetrics record keeps (recompile_user_contexts)",
        "TORCH_TRACE logs carry no training steps (ingested compiles have none)",
    ),
    "recompile_limit_name": Gate(
        (2, 7),
        "torch._dynamo.config.recompile_limit / accumulated_recompile_limit",
        "the same limits are read and set under their old names cache_size_limit / accumulated_cache_size_limit",
    ),
    "closure_in_compile": Gate(
        (2, 6),
        "the compiled frame's closure passed to torch._dynamo.convert_frame._compile (its closure argument)",
        "torch.compile(module)'s wrapper is named from the frame's locals (they hold its free variables' values); "
        "a decorator's wrapper shared by several methods cannot be told apart by its closure cells",
    ),
    # --- profile mode
    "force_backend": Gate(
        (2, 6),
        "torch._dynamo.set_stance(..., force_backend=)",
        "profile mode keeps the job's own backend and lifts the recompile limit (mechanism 'unlimited')",
    ),
    "profile_evict": Gate(
        (2, 10),
        "cache entries that name their backend (_CacheEntry.backend; profile mode's evict mechanism also "
        "needs _ExtraState.invalidate, DeletedGuardManagerWrapper and eval_frame._create_wrapped_callback)",
        "profile mode lifts the recompile limit instead (mechanism 'unlimited')",
    ),
    "profile_park": Gate(
        (2, 10),
        "frame callbacks that may return a torch._dynamo.types.GuardedCode (code, guard_manager, compile_id, "
        "trace_annotation) via wrap_guarded_code, installed by the eval-frame code as a new cache entry",
        "profile mode evicts without parking: each return to an evicted variant retraces it",
    ),
    # --- what torch guards (the rules file what torch reports; below these it reports something else)
    "module_tensors_by_value": Gate(
        (2, 5),
        "inlined nn.Module calls (config.inline_inbuilt_nn_modules on by default): a module's tensor attributes "
        "guarded by their properties (size, stride, dtype ...)",
        "a module's tensor attribute is guarded by identity: a replaced one is filed module_attribute, whatever "
        "changed about it",
    ),
    "function_mode_guard": Gate(
        (2, 5),
        "a TORCH_FUNCTION_STATE guard on every compiled frame (the torch-function mode stack)",
        "a TorchFunctionMode entered around a call recompiles nothing, so there is nothing to file",
    ),
    "default_device_guard": Gate(
        (2, 6),
        "a default device set around a call (torch.device(...) as a context manager) reported by a global "
        "guard (the torch-function mode stack, DEFAULT_DEVICE) before the tensors' guards",
        "a default device set around a call is reported as its new tensors' device (their dispatch keys): "
        "filed device, not global_state",
    ),
    "autocast_in_global_state": Gate(
        (2, 7),
        "autocast in the GLOBAL_STATE guard ('GLOBAL_STATE changed: autocast'; with the device from 2.11)",
        "autocast shows only as a tensor's dispatch-key change (filed autocast); changed together with grad "
        "mode, torch reports the grad mode alone and the autocast change is not filed",
    ),
    # --- reason text formats (the parser reads every format; recorded fixtures pin where each starts)
    "compile_id_in_reasons": Gate(
        (2, 5),
        'a "<frame>/<compile>: " prefix on each entry\'s reasons, several joined by "; "',
        "reasons carry no compile id (Reason.entry is None); several are joined by newlines",
    ),
    "user_stack_in_reasons": Gate(
        (2, 11), 'a "User stack trace:" block after each reason', "no user location for a reason"
    ),
    "type_in_identity_reasons": Gate(
        (2, 13),
        "___check_obj_id(...) reasons annotated with type=<class '...'>",
        "identity guards are classified by the id (True/False/None/small ints), by the live objects (attach) and by "
        "the subject's shape",
    ),
    "backend_in_reasons": Gate(
        (2, 10),
        'a "BACKEND_MATCH failure" reason for a cache entry refused for its backend',
        'the reason is empty ("0/0: "; "" on 2.4): every guard passed, and recompprof files it as backend_mismatch',
    ),
}

MIN_VERSIONS: dict[str, tuple[int, int]] = {name: gate.since for name, gate in GATES.items()}


def parse(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


@dataclass(frozen=True)
class TorchInfo:
    version: str
    major_minor: tuple[int, int]

    def has(self, gate: str) -> bool:
        return self.major_minor >= GATES[gate].since

    def why_off(self, gate: str) -> str:
        """Why a gated signal is off on this torch: the version, what it lacks, what recompprof does instead."""
        g = GATES[gate]
        return f"torch {self.version} < {g.since[0]}.{g.since[1]} has no {g.what}: {g.off}"

    @property
    def limit_config_name(self) -> str:
        return "recompile_limit" if self.has("recompile_limit_name") else "cache_size_limit"

    @property
    def accumulated_limit_config_name(self) -> str:
        return (
            "accumulated_recompile_limit"
            if self.has("recompile_limit_name")
            else "accumulated_cache_size_limit"
        )


@functools.lru_cache(maxsize=1)
def torch_info() -> TorchInfo:
    import torch

    return TorchInfo(torch.__version__, parse(torch.__version__))


def versions() -> dict[str, str]:
    """Versions that go on ``session_start`` and ``recompprof_build_info``."""
    from recompprof._version import __version__

    out = {
        "python": sys.version.split()[0],
        "recompprof": __version__,
        "torch": "",
        "triton": "",
        "cuda": "",
    }
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda or ""
    except ImportError:
        pass
    if "triton" in sys.modules or _importable("triton"):
        try:
            import triton

            out["triton"] = triton.__version__
        except Exception:  # noqa: BLE001 - a broken triton must not stop attach
            pass
    return out


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
