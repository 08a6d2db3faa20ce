"""Profile mode: force recompprof's observer backend and see every guard failure at a low recompile limit.

Mechanism ``evict`` (torch 2.13): every entry into a compiled region gets Dynamo's frame callback
from ``_create_wrapped_callback``; we wrap that callback. It runs on a cache miss *before* Dynamo
counts the frame's cache entries, outside any compile. When the frame already holds
``recompile_limit`` live entries compiled by the observer, Dynamo would hit the limit and make the
frame run-only; instead we compute the guard-failure reasons against those entries ourselves (torch's
own ``get_guard_fail_reason_helper``, torch's "0/3: ..." format), report them, and invalidate the
least recently used entry exactly as torch does when a guarded object dies. Invalidated entries are
marked so the limit check does not count them. The frame then compiles afresh, stays at
``recompile_limit`` live entries, and the next change misses again and is seen.

Parking (on top of evict, where torch has the internals): the evicted entry is invalidated the same way
but its compiled code and guard manager are kept ("parked", a few per frame). When a later miss is a
return to a parked variant (its guards pass on the frame), the callback hands that code back to the
eval-frame code as the compile result, without calling Dynamo: the switch is reported and no retrace runs.

Mechanism ``unlimited`` (``recompile_limit=None``, or the internals above are missing): lift both
limits for the session, as the 2.4 CompileProfiler did; torch computes every reason itself.

See docs/profile-mode.md for safety arguments, trade-offs and measurements.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from recompprof._internal import contain
from recompprof._torch.patching import replace
from recompprof._torch.versions import torch_info

log = logging.getLogger("recompprof")

MECHANISM_EVICT = "evict"
MECHANISM_UNLIMITED = "unlimited"

GuardFailureCallback = Callable[[CodeType, "str | None", "list[str]"], None]

_EVICTED_MARK = "evicted by recompprof profile mode"
_PARKED_MARK = "parked by recompprof profile mode"
_RETIRED_MARK = "retired by recompprof profile mode at detach"
# Not an identifier, so never a frame local: cache_size._has_same_id_matched_objs then finds the
# entry's "ID_MATCH'd object" missing from the frame and leaves the entry out of the limit count.
_UNCOUNTED_KEY = "<recompprof:uncounted>"


class _Sentinel:
    """A live object whose weakref marks an entry as not counting toward recompile limits."""


# Module-level and never freed: if it died, marked entries would start counting again.
_SENTINEL = _Sentinel()
_SENTINEL_REF = weakref.ref(_SENTINEL)


class RecompprofObserver:
    """Observation-only backend: runs the captured graph as it is (no AOTAutograd, no Inductor), counting graphs and ops."""

    def __init__(self) -> None:
        self.graphs = 0
        self.ops = 0

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs += 1
        self.ops += sum(1 for node in gm.graph.nodes if "call" in node.op)
        return gm.forward


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
        "torch._dynamo.eval_frame._create_wrapped_callback": getattr(eval_frame, "_create_wrapped_callback", None),
        "torch._dynamo.eval_frame._callback_from_stance": getattr(eval_frame, "_callback_from_stance", None),
        "torch._C._dynamo.eval_frame._debug_get_cache_entry_list": getattr(
            c_eval_frame, "_debug_get_cache_entry_list", None),
        "torch._C._dynamo.eval_frame._ExtraState.invalidate": getattr(
            getattr(c_eval_frame, "_ExtraState", None), "invalidate", None),
        "torch._C._dynamo.eval_frame._CacheEntry.backend": getattr(
            getattr(c_eval_frame, "_CacheEntry", None), "backend", None),
        "torch._dynamo.guards.DeletedGuardManagerWrapper": getattr(guards, "DeletedGuardManagerWrapper", None),
        "torch._dynamo.guards.get_guard_fail_reason_helper": getattr(guards, "get_guard_fail_reason_helper", None),
        "torch._dynamo.cache_size._has_same_id_matched_objs": getattr(cache_size, "_has_same_id_matched_objs", None),
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
    fields = {f.name for f in dataclasses.fields(guarded_code)} if dataclasses.is_dataclass(guarded_code) else set()
    missing = [name for name in ("code", "guard_manager", "compile_id", "trace_annotation") if name not in fields]
    if missing:
        return f"torch._dynamo.types.GuardedCode has no field(s) {', '.join(missing)}"
    if getattr(dynamo_types, "wrap_guarded_code", None) is None:
        return "missing torch._dynamo.types.wrap_guarded_code"
    return ""


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
            self.parked: _Parked | None = None
            super().__init__(reason)
            self.id_matched_objs = {_UNCOUNTED_KEY: _SENTINEL_REF}

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


class _Parked:
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


def _park(entry: Any, reason: str) -> _Parked:
    """Invalidate an entry as ``_invalidate`` does, keeping what it takes to re-enable it without a retrace.

    The real guard manager is pointed back at the dead node, so that torch's own finalizer still reaches
    the node when a guarded object dies while the entry is parked (it invalidates the node again, which
    releases the parked entry: an ID_MATCH could otherwise pass on a new object at a reused address).
    """
    manager = entry.guard_manager
    extra_state = manager.extra_state
    marker = _marker_class()(reason)
    parked = _Parked(entry, marker)
    extra_state.invalidate(entry, marker)
    manager.cache_entry, manager.extra_state = entry, extra_state
    marker.parked = parked
    return parked


def _force_backend_missing() -> str:
    import inspect

    import torch._dynamo

    info = torch_info()
    if not info.has("force_backend"):
        return info.why_off("force_backend")
    set_stance = getattr(torch._dynamo, "set_stance", None)
    if set_stance is None or "force_backend" not in inspect.signature(set_stance).parameters:
        return "torch._dynamo.set_stance(force_backend=...) missing (torch < 2.6)"
    return ""


def _region_entries(code: CodeType) -> list[Any]:
    """The frame's cache entries in the current isolate_recompiles region, newest (most recently used) first."""
    import torch._C._dynamo.eval_frame as c_eval_frame

    by_region = getattr(c_eval_frame, "_get_cache_entries_for_region", None)
    region_id = getattr(c_eval_frame, "get_eval_frame_isolate_recompiles_id", None)
    if by_region is not None and region_id is not None:
        return list(by_region(code, region_id()))
    return list(c_eval_frame._debug_get_cache_entry_list(code))


def _is_dead(entry: Any) -> bool:
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    return isinstance(entry.guard_manager, DeletedGuardManagerWrapper)


def _invalidate(entry: Any, reason: str) -> None:
    """Kill one cache entry the way torch does when a guarded object is freed, and stop it counting."""
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    old = entry.guard_manager
    extra_state = old.extra_state
    deleted = DeletedGuardManagerWrapper(reason)
    deleted.id_matched_objs = {_UNCOUNTED_KEY: _SENTINEL_REF}
    extra_state.invalidate(entry, deleted)
    # torch's own weakref finalizers (CheckFunctionManager.invalidate) would invalidate it again,
    # replacing our counting-exempt wrapper; they skip a manager whose cache_entry is None.
    old.cache_entry = None
    old.extra_state = None


def _same_instance(frame: Any, id_matched: dict[str, Any]) -> bool:
    """cache_size._has_same_id_matched_objs without our exemption key: does the entry belong to this module instance?"""
    f_locals = frame.f_locals
    for name, ref in id_matched.items():
        if name == _UNCOUNTED_KEY or ref() is None:
            continue
        try:
            frame_ref = weakref.ref(f_locals.get(name))
        except TypeError:
            return False
        if frame_ref is not ref:
            return False
    return True


def _frame_label(code: CodeType) -> str:
    return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"


class _FrameStats:
    __slots__ = ("label", "traces", "evictions", "reenabled", "failures_reported", "peak_live")

    def __init__(self, label: str) -> None:
        self.label = label
        self.traces = 0
        self.evictions = 0
        self.reenabled = 0
        self.failures_reported = 0
        self.peak_live = 0


class _ProfileCallback:
    """Dynamo's frame callback, wrapped: settle the frame's cache before Dynamo looks at it."""

    def __init__(self, mode: ProfileMode, inner: Any) -> None:
        # C++ and Dynamo find the backend of a callback by walking this attribute.
        self._torchdynamo_orig_backend = inner
        self._mode = mode

    def __call__(self, frame: Any, *args: Any, **kwargs: Any) -> Any:
        mode = self._mode
        start = time.perf_counter()  # compile_seconds includes our own work before the compile
        if mode.active:
            reenabled = None
            with contain("profile.before_compile"):
                reenabled = mode._before_compile(frame, args[1] if len(args) > 1 else kwargs.get("frame_state"))
            if reenabled is not None:  # a parked variant runs again: no compile, so no _after_compile either
                return reenabled
        result = None
        try:
            result = self._torchdynamo_orig_backend(frame, *args, **kwargs)
            return result
        finally:
            if mode.active:
                with contain("profile.after_compile"):
                    mode._after_compile(frame, result, time.perf_counter() - start)


class ProfileMode:
    """Compiles through the observer backend at a recompile limit and reports every guard failure.

    ``on_guard_failure(orig_code, compile_id, reasons)`` receives the failures this class computes
    itself (the ones torch would have computed at a limit hit, when the evict mechanism forestalls
    it); ``compile_id`` is the id the compile that follows will get ("3/7"), or None if unknown.
    Failures torch computes itself stay in ``torch._dynamo.utils.guard_failures``.

    Parking is on when ``on_reuse`` is set before ``install`` (and torch has the internals). A miss
    that returns to a parked variant compiles nothing: its failures go to ``on_reuse(orig_code,
    entry_compile_id, reasons)``, where ``entry_compile_id`` is the re-enabled entry's own id ("3/1").
    ``max_parked`` bounds the parked variants kept per frame.
    """

    max_parked = 8

    def __init__(
        self,
        recompile_limit: int | None = 1,
        on_guard_failure: GuardFailureCallback | None = None,
    ) -> None:
        if recompile_limit is not None and recompile_limit < 1:
            raise ValueError(f"recompile_limit must be >= 1 or None, got {recompile_limit}")
        self.recompile_limit = recompile_limit
        self.on_guard_failure = on_guard_failure
        self.observer = RecompprofObserver()
        self.mechanism = MECHANISM_UNLIMITED if recompile_limit is None else MECHANISM_EVICT
        self.why_off = ""  # why the evict mechanism fell back to unlimited, if it did
        self.parking = False  # evicted entries are parked for re-enabling (evict mechanism, internals present)
        self.why_no_parking = ""
        self.on_reuse: GuardFailureCallback | None = None
        self._parked: dict[int, list[_Parked]] = {}  # id(code) -> parked entries, most recently parked first
        self._reenabled = 0
        self.forced_backend = False
        self.why_not_forced = ""  # why the observer backend could not be forced, if it could not
        self.active = False
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []
        self._frames: dict[int, _FrameStats] = {}
        self._touched: dict[int, weakref.ref[CodeType]] = {}
        self._uncounted: list[weakref.ref[Any]] = []  # foreign guard managers we exempted from the count
        self._traces = 0
        self._evictions = 0
        self._reported = 0
        self._compile_seconds = 0.0
        self._stance: Any = None
        self._stance_ours = True
        self._limits: dict[str, tuple[Any, Any]] = {}  # config name -> (the job's value, ours)
        self.on_stance_change: Callable[[bool], None] | None = None
        self.torch_errors = 0  # exceptions raised inside torch's own reason helper

    # ------------------------------------------------------------------ install / uninstall

    # The Adapter protocol (recompprof._capture.adapters): the signal is the forced observer backend.
    @property
    def live(self) -> bool:
        return self.forced_backend

    @property
    def reason_off(self) -> str:
        return self.why_not_forced

    def install(self) -> None:
        """Force the observer backend and set the limits; every change is undone by ``uninstall``."""
        if self._undo or self.active:
            return
        import torch._dynamo.config as config
        import torch._dynamo.eval_frame as eval_frame

        if self.mechanism == MECHANISM_EVICT:
            self.why_off = evict_mechanism_missing()
            if self.why_off:
                log.warning("recompprof: profile mode falls back to lifting the recompile limit "
                            "(mechanism 'unlimited'): the evict mechanism needs %s", self.why_off)
                self.mechanism = MECHANISM_UNLIMITED
        if self.mechanism == MECHANISM_EVICT and self.on_reuse is None:
            # A re-enabled variant is no compile: only an owner that takes on_reuse can record it.
            self.why_no_parking = "on_reuse is not set"
        elif self.mechanism == MECHANISM_EVICT:
            self.why_no_parking = park_mechanism_missing()
            if self.why_no_parking:
                log.warning("recompprof: profile mode evicts without parking (a return to an evicted variant "
                            "retraces it): %s", self.why_no_parking)
        self.parking = self.mechanism == MECHANISM_EVICT and not self.why_no_parking
        info = torch_info()
        limit_name, accumulated_name = info.limit_config_name, info.accumulated_limit_config_name
        if self.mechanism == MECHANISM_EVICT:
            # Evicted entries never count toward recompile_limit, but every compile still counts
            # toward the accumulated cap (frame_compile_id and the entry total): lift it.
            self._set_config(config, limit_name, self.recompile_limit)
        else:
            self._set_config(config, limit_name, sys.maxsize)
        self._set_config(config, accumulated_name, sys.maxsize)

        why_no_force = self.why_not_forced = _force_backend_missing()
        if why_no_force:
            log.warning("recompprof: profile mode cannot force its observer backend: %s; compiles keep the "
                        "job's own backend", why_no_force)
        else:
            self._force_backend(eval_frame)
        if hasattr(eval_frame, "_create_wrapped_callback"):
            original = eval_frame._create_wrapped_callback

            def wrapped_callback_factory(compiler_fn: Any) -> Any:
                inner = original(compiler_fn)
                with contain("profile.wrap_callback"):
                    if self.active and self._is_ours(compiler_fn):
                        return _ProfileCallback(self, inner)
                return inner

            self._undo.append(replace(eval_frame, "_create_wrapped_callback", wrapped_callback_factory))
        self.active = True

    def uninstall(self) -> None:
        """Restore torch: callback factory, stance and config values; reset the frames this mode compiled."""
        if not self._undo and not self.active:
            return
        self.active = False
        while self._undo:
            undo = self._undo.pop()
            with contain("profile.uninstall"):
                undo()

    def _set_config(self, config: Any, name: str, value: Any) -> None:
        old = getattr(config, name)
        setattr(config, name, value)
        self._limits[name] = (old, value)

        def restore() -> None:
            if not self._stance_ours and getattr(config, name) == old:  # the job's value is back already
                return
            if getattr(config, name) == value:
                setattr(config, name, old)
            else:
                log.warning("recompprof: torch._dynamo.config.%s was changed during the profile session; "
                            "leaving the new value %r", name, getattr(config, name))

        self._undo.append(restore)

    def _force_backend(self, eval_frame: Any) -> None:
        import torch._dynamo

        handle = torch._dynamo.set_stance("default", force_backend=self.observer)
        ours = self._stance = eval_frame._stance
        self.forced_backend = True
        self._watch_stance(eval_frame)
        # Frames compiled by the observer are reset after the stance is back (see _retire_frames).
        self._undo.append(self._retire_frames)

        def restore() -> None:
            if eval_frame._stance is ours:
                eval_frame._set_stance(handle.prev)
            else:
                log.warning("recompprof: the torch.compile stance was changed during the profile session; "
                            "leaving it as it is now")

        self._undo.append(restore)

    def _observed(self, entry: Any) -> bool:
        """Was this cache entry compiled by the observer? Before 2.10 entries do not name their backend:
        then assume so (while the stance is forced, every compile goes to the observer)."""
        return getattr(entry, "backend", self.observer) is self.observer

    def _is_ours(self, compiler_fn: Any) -> bool:
        for _ in range(8):
            if compiler_fn is self.observer:
                return True
            compiler_fn = getattr(compiler_fn, "_torchdynamo_orig_backend", None)
            if compiler_fn is None:
                return False
        return False

    # ------------------------------------------------------------------ the frame callback

    def _before_compile(self, frame: Any, frame_state: Any) -> Any:
        """Settle the frame's cache on a miss; return the compile result when a parked variant runs again."""
        limit = self.recompile_limit
        if self.mechanism != MECHANISM_EVICT or limit is None:
            return None
        from torch._dynamo import convert_frame

        # Serialises with compiles on other threads and with detach, which both hold it too. The
        # owner's callback runs after it is released: it takes the owner's own locks.
        with convert_frame.compile_lock:
            result, report = self._settle(frame, frame_state, limit)
        if report is not None:
            callback, compile_id, reasons = report
            with contain("profile.on_guard_failure"):
                callback(frame.f_code, compile_id, reasons)
        return result

    def _settle(self, frame: Any, frame_state: Any, limit: int) -> tuple[Any, Any]:
        """(the compile result of a re-enabled parked variant or None, (callback, compile_id, reasons) or None)."""
        code = frame.f_code
        entries = _region_entries(code)
        if not entries:
            return None, None
        from torch._dynamo.guards import DeletedGuardManagerWrapper

        live_ours, same_instance = [], []
        observer = self.observer
        for entry in entries:  # every miss walks dead entries too: keep the per-entry work small
            manager = entry.guard_manager
            id_matched = manager.id_matched_objs
            dead = isinstance(manager, DeletedGuardManagerWrapper)
            if dead and _UNCOUNTED_KEY in id_matched:
                continue
            ours = not dead and entry.backend is observer
            if _UNCOUNTED_KEY not in id_matched:
                # Torch's limit check and its reason computation both key on this count: with every
                # entry exempt, torch does neither, and this class enforces the limit and reports.
                # Others' entries (the job's from before attach; entries torch invalidated when a
                # guarded object died) get the mark back off at detach.
                id_matched[_UNCOUNTED_KEY] = _SENTINEL_REF
                if not ours:
                    self._uncounted.append(weakref.ref(manager))
            if ours:
                live_ours.append(entry)
                if _same_instance(frame, id_matched):
                    same_instance.append(entry)
        f_locals = frame.f_locals
        back = self._take_parked(code, f_locals) if self.parking else None
        if not live_ours and back is None:
            return None, None
        from torch._dynamo.guards import get_guard_fail_reason_helper

        reasons = [self._reason(get_guard_fail_reason_helper, entry, f_locals) for entry in live_ours]
        compile_id = str(back.compile_id) if back is not None else self._next_compile_id(frame_state)
        # Dynamo keeps entries in most-recently-hit order: the least recently used go. A re-enabled
        # variant takes the freed live slot, as a compile would.
        victims = same_instance[limit - 1:]
        for entry in victims:
            if self.parking:
                self._park(code, entry, f"Cache line {_PARKED_MARK} (recompile_limit={limit})")
            else:
                _invalidate(entry, f"Cache line {_EVICTED_MARK} (recompile_limit={limit})")
        stats = self._frame(code)
        with self._lock:
            self._evictions += len(victims)
            stats.evictions += len(victims)
            self._reported += len(reasons)
            stats.failures_reported += len(reasons)
            if back is not None:
                self._reenabled += 1
                stats.reenabled += 1
        callback = self.on_guard_failure if back is None else self.on_reuse
        report = (callback, compile_id, reasons) if callback is not None and reasons else None
        if back is None:
            return None, report
        from torch._dynamo.types import GuardedCode, wrap_guarded_code

        # The eval-frame code installs this as a new cache entry (front of the list, linked to the
        # guard manager) and runs it: what it does with any compile result, here without a trace.
        return wrap_guarded_code(GuardedCode(back.code, back.guard_manager, back.compile_id, back.trace_annotation)), report

    def _park(self, code: CodeType, entry: Any, reason: str) -> None:
        bucket = self._parked.setdefault(id(code), [])
        bucket.insert(0, _park(entry, reason))
        for dropped in bucket[self.max_parked:]:  # bounded: the least recently parked become plain evictions
            dropped.release()
        del bucket[self.max_parked:]
        # Entries torch released (a guarded object died, a frame's code was freed) are dropped here,
        # outside torch's invalidation, so what they hold is freed even for frames that never miss again.
        for key in list(self._parked):
            kept = [parked for parked in self._parked[key] if not parked.released]
            if kept:
                self._parked[key] = kept
            else:
                del self._parked[key]

    def _take_parked(self, code: CodeType, f_locals: Any) -> _Parked | None:
        """The most recently parked variant of this frame whose guards pass now, unparked; None if none does."""
        bucket = self._parked.get(id(code))
        if not bucket:
            return None
        bucket[:] = [parked for parked in bucket if not parked.released]  # torch invalidated or freed the rest
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

    def _reason(self, helper: Any, entry: Any, f_locals: Any) -> str:
        """torch's reason text for one failing entry; an exception inside torch's helper is torch's, not ours."""
        try:
            return str(helper(entry.guard_manager, f_locals, entry.compile_id, self.observer))
        except Exception as exc:  # noqa: BLE001 - torch's own code failed: report it as such, keep going
            with self._lock:
                self.torch_errors += 1
                first = self.torch_errors == 1
            if first:
                log.warning("recompprof: torch's own get_guard_fail_reason_helper raised %s: %s (a torch error, "
                            "not a recompprof one; the guard failure is recorded without its reason)",
                            type(exc).__name__, exc)
            return f"{entry.compile_id}: <torch's get_guard_fail_reason_helper raised {type(exc).__name__}>"

    def _watch_stance(self, eval_frame: Any) -> None:
        """Follow stance changes the job makes (``torch.compiler.set_stance``) while the mode is on.

        Without the forced observer the job's backend compiles its frames, and recompprof's low limit
        would make fullgraph code raise: while the stance is not ours the job gets its own limits back
        (and ``on_stance_change(False)`` is called); when it is ours again, the limit is re-applied.
        """
        import torch._dynamo.decorators as decorators

        original = getattr(decorators, "_set_stance", None)
        if not callable(original):
            return
        mode = self

        def watched(stance: Any) -> Any:
            prev = original(stance)
            if mode.active:
                with contain("profile.stance"):
                    mode._stance_changed(eval_frame._stance is mode._stance)
            return prev

        self._undo.append(replace(decorators, "_set_stance", watched))

    def _stance_changed(self, ours: bool) -> None:
        import torch._dynamo.config as config

        if ours == self._stance_ours:
            return
        self._stance_ours = ours
        for name, (job_value, our_value) in self._limits.items():
            if getattr(config, name) == (job_value if ours else our_value):
                setattr(config, name, our_value if ours else job_value)
        if self.on_stance_change is not None:
            self.on_stance_change(ours)

    def _after_compile(self, frame: Any, result: Any, seconds: float) -> None:
        if getattr(result, "guarded_code", None) is None:
            return
        code = frame.f_code
        live = 1 + sum(1 for entry in _region_entries(code)  # + the entry Dynamo installs on return
                       if not _is_dead(entry) and self._observed(entry))
        stats = self._frame(code)
        with self._lock:
            self._traces += 1
            self._compile_seconds += seconds
            stats.traces += 1
            stats.peak_live = max(stats.peak_live, live)
            self._touched.setdefault(id(code), weakref.ref(code))

    @staticmethod
    def _next_compile_id(frame_state: Any) -> str | None:
        from torch._dynamo import convert_frame

        frame_id = frame_state.get("_id") if isinstance(frame_state, dict) else None
        counter = getattr(convert_frame, "FRAME_COMPILE_COUNTER", None)
        if isinstance(frame_id, int) and counter is not None:
            return f"{frame_id}/{counter[frame_id]}"
        return None

    def _frame(self, code: CodeType) -> _FrameStats:
        stats = self._frames.get(id(code))
        if stats is None:
            stats = self._frames.setdefault(id(code), _FrameStats(_frame_label(code)))
        return stats

    # ------------------------------------------------------------------ detach

    def _retire_frames(self) -> None:
        """Give the frames this mode compiled back to the job with their full recompile budget.

        Where nothing can be running them, ``reset_code`` (what ``torch._dynamo.reset_code_caches``
        does): the job's backend starts them afresh, counters included. Otherwise invalidate the
        observer's live entries (safe at any time) so they stop using up the job's limit.
        """
        import torch._C._dynamo.eval_frame as c_eval_frame
        from torch._dynamo import convert_frame

        codes = [code for ref in self._touched.values() if (code := ref()) is not None]
        self._touched.clear()
        with convert_frame.compile_lock:
            # Parked entries first: their guard managers point at dead nodes that reset_code frees.
            for bucket in self._parked.values():
                for parked in bucket:
                    parked.release()
            self._parked.clear()
            busy = self._codes_on_stacks() if codes else set()
            compiling = _compiling_now()
            for code in codes:
                with contain("profile.retire"):
                    if not compiling and not (busy & self._codes_of(code)):
                        c_eval_frame.reset_code(code)
                        continue
                    for entry in _region_entries(code):
                        if not _is_dead(entry) and self._observed(entry):
                            _invalidate(entry, f"Cache line {_RETIRED_MARK}")
        for ref in self._uncounted:
            manager = ref()
            if manager is not None:
                manager.id_matched_objs.pop(_UNCOUNTED_KEY, None)
        self._uncounted.clear()

    @staticmethod
    def _codes_of(code: CodeType) -> set[int]:
        ids = {id(code)}
        for entry in _region_entries(code):
            if entry.code is not None:
                ids.add(id(entry.code))
        return ids

    @staticmethod
    def _codes_on_stacks() -> set[int]:
        ids: set[int] = set()
        for top in sys._current_frames().values():
            frame: FrameType | None = top
            while frame is not None:
                ids.add(id(frame.f_code))
                frame = frame.f_back
        return ids

    # ------------------------------------------------------------------ reading

    @staticmethod
    def is_own_reason(text: str) -> bool:
        """True for reason strings caused by profile mode itself (evicted entries, the forced backend)."""
        return (_EVICTED_MARK in text or _RETIRED_MARK in text or _PARKED_MARK in text
                or ("BACKEND_MATCH" in text and RecompprofObserver.__name__ in text))

    @property
    def stats(self) -> dict[str, Any]:
        """Totals and per-frame counts: Dynamo traces, evictions, parked variants re-enabled, reported failures, compile seconds."""
        with self._lock:
            return {
                "mechanism": self.mechanism,
                "recompile_limit": self.recompile_limit,
                "why_off": self.why_off,
                "traces": self._traces,
                "evictions": self._evictions,
                "parking": self.parking,
                "reenabled": self._reenabled,
                "failures_reported": self._reported,
                "compile_seconds": self._compile_seconds,
                "graphs": self.observer.graphs,
                "ops": self.observer.ops,
                "frames": {
                    stats.label: {"traces": stats.traces, "evictions": stats.evictions, "reenabled": stats.reenabled,
                                  "failures_reported": stats.failures_reported, "peak_live": stats.peak_live}
                    for stats in self._frames.values()
                },
            }


def _compiling_now() -> bool:
    try:
        from torch._guards import CompileContext

        return CompileContext.current_compile_id() is not None
    except Exception:  # noqa: BLE001 - unknown means "assume yes": take the always-safe path
        return True
