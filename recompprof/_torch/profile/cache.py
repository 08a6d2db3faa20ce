"""Profile mode's work on a frame's Dynamo cache entries: list, exempt from the limit count, invalidate.

Nothing here frees a cache entry: an entry is only invalidated, the operation torch itself runs from
weakref finalizers at arbitrary moments (docs/profile-mode.md, "Why it is safe").
"""

from __future__ import annotations

import weakref
from types import CodeType
from typing import Any

EVICTED_MARK = "evicted by recompprof profile mode"
PARKED_MARK = "parked by recompprof profile mode"
RETIRED_MARK = "retired by recompprof profile mode at detach"
# Not an identifier, so never a frame local: cache_size._has_same_id_matched_objs then finds the
# entry's "ID_MATCH'd object" missing from the frame and leaves the entry out of the limit count.
UNCOUNTED_KEY = "<recompprof:uncounted>"


class _Sentinel:
    """A live object whose weakref marks an entry as not counting toward recompile limits."""


# Module-level and never freed: if it died, marked entries would start counting again.
_SENTINEL = _Sentinel()
SENTINEL_REF = weakref.ref(_SENTINEL)


def region_entries(code: CodeType) -> list[Any]:
    """The frame's cache entries in the current isolate_recompiles region, newest (most recently used) first."""
    import torch._C._dynamo.eval_frame as c_eval_frame

    by_region = getattr(c_eval_frame, "_get_cache_entries_for_region", None)
    region_id = getattr(c_eval_frame, "get_eval_frame_isolate_recompiles_id", None)
    if by_region is not None and region_id is not None:
        return list(by_region(code, region_id()))
    return list(c_eval_frame._debug_get_cache_entry_list(code))


def is_dead(entry: Any) -> bool:
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    return isinstance(entry.guard_manager, DeletedGuardManagerWrapper)


def invalidate(entry: Any, reason: str) -> None:
    """Kill one cache entry the way torch does when a guarded object is freed, and stop it counting."""
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    old = entry.guard_manager
    extra_state = old.extra_state
    deleted = DeletedGuardManagerWrapper(reason)
    deleted.id_matched_objs = {UNCOUNTED_KEY: SENTINEL_REF}
    extra_state.invalidate(entry, deleted)
    # torch's own weakref finalizers (CheckFunctionManager.invalidate) would invalidate it again,
    # replacing our counting-exempt wrapper; they skip a manager whose cache_entry is None.
    old.cache_entry = None
    old.extra_state = None


def same_instance(frame: Any, id_matched: dict[str, Any]) -> bool:
    """cache_size._has_same_id_matched_objs without our exemption key: does the entry belong to this module instance?"""
    f_locals = frame.f_locals
    for name, ref in id_matched.items():
        if name == UNCOUNTED_KEY or ref() is None:
            continue
        try:
            frame_ref = weakref.ref(f_locals.get(name))
        except TypeError:
            return False
        if frame_ref is not ref:
            return False
    return True


def exempt_entries(
    frame: Any, entries: list[Any], observer: Any, uncounted: list[weakref.ref[Any]]
) -> tuple[list[Any], list[Any]]:
    """Exempt every entry of the frame from torch's limit count; (the observer's live entries, those of
    them that belong to this module instance), both most recently used first.

    Torch's limit check and its reason computation both key on this count: with every entry exempt,
    torch does neither, and profile mode enforces the limit and reports. Others' entries (the job's
    from before attach; entries torch invalidated when a guarded object died) are added to
    ``uncounted``, to get the mark back off at detach (:func:`count_again`).
    """
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    live_ours, this_instance = [], []
    for entry in entries:  # every miss walks dead entries too: keep the per-entry work small
        manager = entry.guard_manager
        id_matched = manager.id_matched_objs
        dead = isinstance(manager, DeletedGuardManagerWrapper)
        if dead and UNCOUNTED_KEY in id_matched:
            continue
        ours = not dead and entry.backend is observer
        if UNCOUNTED_KEY not in id_matched:
            id_matched[UNCOUNTED_KEY] = SENTINEL_REF
            if not ours:
                uncounted.append(weakref.ref(manager))
        if ours:
            live_ours.append(entry)
            if same_instance(frame, id_matched):
                this_instance.append(entry)
    return live_ours, this_instance


def count_again(uncounted: list[weakref.ref[Any]]) -> None:
    """Take the exemption mark back off the entries of others that :func:`exempt_entries` marked."""
    for ref in uncounted:
        manager = ref()
        if manager is not None:
            manager.id_matched_objs.pop(UNCOUNTED_KEY, None)
    uncounted.clear()
