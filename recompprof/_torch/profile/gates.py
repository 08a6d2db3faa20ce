"""What profile mode needs from torch's internals, checked before it installs anything.

Each check returns "" when the mechanism can run on this torch, else why not; profile mode then falls
back (docs/profile-mode.md, "Version gate" and "Fallback").
"""

from __future__ import annotations

from recompprof._torch.versions import torch_info


def evict_mechanism_missing() -> str:
    """Why the evict mechanism cannot run on this torch ("" when it can)."""
    info = torch_info()
    if not info.has("profile_evict"):
        return info.why_off("profile_evict")
    try:
        import torch._C._dynamo.eval_frame as c_eval_frame
        import torch._dynamo.cache_size as cache_size
        import torch._dynamo.eval_frame as eval_frame
        import torch._dynamo.guards as guards
    except ImportError as exc:
        return f"torch._dynamo internals not importable ({exc})"
    needs = {
        "torch._dynamo.eval_frame._create_wrapped_callback": getattr(
            eval_frame, "_create_wrapped_callback", None
        ),
        "torch._dynamo.eval_frame._callback_from_stance": getattr(
            eval_frame, "_callback_from_stance", None
        ),
        "torch._C._dynamo.eval_frame._debug_get_cache_entry_list": getattr(
            c_eval_frame, "_debug_get_cache_entry_list", None
        ),
        "torch._C._dynamo.eval_frame._ExtraState.invalidate": getattr(
            getattr(c_eval_frame, "_ExtraState", None), "invalidate", None
        ),
        "torch._C._dynamo.eval_frame._CacheEntry.backend": getattr(
            getattr(c_eval_frame, "_CacheEntry", None), "backend", None
        ),
        "torch._dynamo.guards.DeletedGuardManagerWrapper": getattr(
            guards, "DeletedGuardManagerWrapper", None
        ),
        "torch._dynamo.guards.get_guard_fail_reason_helper": getattr(
            guards, "get_guard_fail_reason_helper", None
        ),
        "torch._dynamo.cache_size._has_same_id_matched_objs": getattr(
            cache_size, "_has_same_id_matched_objs", None
        ),
    }
    missing = [name for name, value in needs.items() if value is None]
    return f"missing {', '.join(missing)}" if missing else ""


def park_mechanism_missing() -> str:
    """Why evicted entries cannot be parked on this torch ("" when they can; evict still runs without it)."""
    info = torch_info()
    if not info.has("profile_park"):
        return info.why_off("profile_park")
    try:
        import dataclasses

        import torch._dynamo.types as dynamo_types
    except ImportError as exc:
        return f"torch._dynamo.types not importable ({exc})"
    guarded_code = getattr(dynamo_types, "GuardedCode", None)
    fields = (
        {f.name for f in dataclasses.fields(guarded_code)}
        if dataclasses.is_dataclass(guarded_code)
        else set()
    )
    missing = [
        name
        for name in ("code", "guard_manager", "compile_id", "trace_annotation")
        if name not in fields
    ]
    if missing:
        return f"torch._dynamo.types.GuardedCode has no field(s) {', '.join(missing)}"
    if getattr(dynamo_types, "wrap_guarded_code", None) is None:
        return "missing torch._dynamo.types.wrap_guarded_code"
    return ""


def force_backend_missing() -> str:
    """Why the observer backend cannot be forced on this torch ("" when it can)."""
    import inspect

    import torch._dynamo

    info = torch_info()
    if not info.has("force_backend"):
        return info.why_off("force_backend")
    set_stance = getattr(torch._dynamo, "set_stance", None)
    if set_stance is None or "force_backend" not in inspect.signature(set_stance).parameters:
        return "torch._dynamo.set_stance(force_backend=...) missing (torch < 2.6)"
    return ""
