"""Parked entries: evicted cache entries kept so that a return to their variant re-enables them without a retrace.

An entry is parked by invalidating its cache node exactly as an eviction does, while its compiled code
and its real guard manager are kept (docs/profile-mode.md, "Parked entries" and "Why parking is safe").
"""

from __future__ import annotations

import functools
from types import CodeType
from typing import Any

from recompprof._torch.profile.cache import SENTINEL_REF, UNCOUNTED_KEY


@functools.lru_cache(maxsize=1)
def _marker_class() -> type:
    """The wrapper a parked entry's dead cache node holds (built on first use: torch is imported lazily).

    Torch clears ``cache_entry`` on the node's guard manager whenever the node is invalidated again (a
    guarded object died: torch's own finalizer, which we re-point at the node) or freed (``reset_code``,
    ``torch._dynamo.reset()``, the code object dying). Either way the parked entry must never come back,
    and its real guard manager must stop pointing at the node: the setter does both.
    """
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    class ParkedMarker(DeletedGuardManagerWrapper):
        def __init__(self, reason: str) -> None:
            self.parked: Parked | None = None
            super().__init__(reason)
            self.id_matched_objs = {UNCOUNTED_KEY: SENTINEL_REF}

        @property
        def cache_entry(self) -> Any:
            return self.__dict__.get("_cache_entry")

        @cache_entry.setter
        def cache_entry(self, value: Any) -> None:
            self.__dict__["_cache_entry"] = value
            parked = self.__dict__.get("parked")
            if value is None and parked is not None:
                parked.release()

    return ParkedMarker


class Parked:
    """An evicted entry kept for re-enabling: its compiled code, its real guard manager, its dead cache node."""

    __slots__ = ("code", "compile_id", "guard_manager", "marker", "released", "trace_annotation")

    def __init__(self, entry: Any, marker: Any) -> None:
        self.code = entry.code
        self.guard_manager = entry.guard_manager
        self.compile_id = entry.compile_id
        self.trace_annotation = entry.trace_annotation
        self.marker = marker
        self.released = False

    def release(self) -> None:
        """Never re-enable this entry; unlink its guard manager from the dead node (safe to call twice)."""
        self.released = True
        self.marker.parked = None
        self.guard_manager.cache_entry = None
        self.guard_manager.extra_state = None

    def reenabled(self) -> Any:
        """The compile result that brings this variant back: the eval-frame code installs it as a new cache
        entry (front of the list, linked to the guard manager) and runs it, as it does any compile's."""
        from torch._dynamo.types import GuardedCode, wrap_guarded_code

        return wrap_guarded_code(
            GuardedCode(self.code, self.guard_manager, self.compile_id, self.trace_annotation)
        )


def park(entry: Any, reason: str) -> Parked:
    """Invalidate an entry as ``cache.invalidate`` does, keeping what it takes to re-enable it without a retrace.

    The real guard manager is pointed back at the dead node, so that torch's own finalizer still reaches
    the node when a guarded object dies while the entry is parked (it invalidates the node again, which
    releases the parked entry: an ID_MATCH could otherwise pass on a new object at a reused address).
    """
    manager = entry.guard_manager
    extra_state = manager.extra_state
    marker = _marker_class()(reason)
    parked = Parked(entry, marker)
    extra_state.invalidate(entry, marker)
    manager.cache_entry, manager.extra_state = entry, extra_state
    marker.parked = parked
    return parked


class ParkedEntries(dict[int, list[Parked]]):
    """id(code) -> the frame's parked entries, most recently parked first."""

    def park(self, code: CodeType, entry: Any, reason: str, max_parked: int) -> None:
        """Park ``entry``; past ``max_parked`` per frame, the least recently parked become plain evictions."""
        bucket = self.setdefault(id(code), [])
        bucket.insert(0, park(entry, reason))
        for dropped in bucket[max_parked:]:
            dropped.release()
        del bucket[max_parked:]
        # Entries torch released (a guarded object died, a frame's code was freed) are dropped here,
        # outside torch's invalidation, so what they hold is freed even for frames that never miss again.
        for key in list(self):
            kept = [parked for parked in self[key] if not parked.released]
            if kept:
                self[key] = kept
            else:
                del self[key]

    def take(self, code: CodeType, f_locals: Any) -> Parked | None:
        """The most recently parked variant of this frame whose guards pass now, unparked; None if none does."""
        bucket = self.get(id(code))
        if not bucket:
            return None
        bucket[:] = [
            parked for parked in bucket if not parked.released
        ]  # torch invalidated or freed the rest
        for parked in bucket:
            try:
                passes = bool(parked.guard_manager.check(f_locals))
            except Exception:  # noqa: BLE001 - torch's guard code raised: not a match; Dynamo compiles instead
                passes = False
            if passes:
                bucket.remove(parked)
                parked.release()  # unlinked from its dead node; the eval-frame code links it to the new one
                return parked
        return None

    def release_all(self) -> None:
        """Release every parked entry (detach): their guard managers are unlinked and nothing is kept."""
        for bucket in self.values():
            for parked in bucket:
                parked.release()
        self.clear()
