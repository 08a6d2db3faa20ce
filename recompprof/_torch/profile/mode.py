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

This module holds the mode itself: install and uninstall, the frame callback, settling a frame's cache
on a miss. What it does to cache entries is in ``cache`` (exempt, invalidate),
``parking`` (park, re-enable) and ``retire`` (detach); the limits and the stance it
sets, with their undo, in ``stance``; what it needs from torch in ``gates``; its counts
in ``stats``.

See docs/profile-mode.md for safety arguments, trade-offs and measurements.
"""

from __future__ import annotations

import logging
import sys
import time
import weakref
from collections.abc import Callable
from types import CodeType
from typing import Any

from recompprof._internal import contain
from recompprof._model.compile_id import CompileId
from recompprof._torch.patching import replace
from recompprof._torch.profile.cache import (
    EVICTED_MARK,
    PARKED_MARK,
    RETIRED_MARK,
    count_again,
    exempt_entries,
    invalidate,
    is_dead,
    region_entries,
)
from recompprof._torch.profile.gates import (
    evict_mechanism_missing,
    force_backend_missing,
    park_mechanism_missing,
)
from recompprof._torch.profile.parking import Parked, ParkedEntries
from recompprof._torch.profile.retire import retire_frames
from recompprof._torch.profile.stance import SessionSettings
from recompprof._torch.profile.stats import ProfileCounts
from recompprof._torch.versions import torch_info

log = logging.getLogger("recompprof")

__all__ = [
    "MECHANISM_EVICT",
    "MECHANISM_UNLIMITED",
    "ProfileMode",
    "RecompprofObserver",
]

MECHANISM_EVICT = "evict"
MECHANISM_UNLIMITED = "unlimited"

GuardFailureCallback = Callable[[CodeType, "str | None", "list[str]"], None]
# What settling a miss reports: (the callback to call, the compile id it gets, the reasons).
Report = tuple[GuardFailureCallback, "str | None", "list[str]"]


class RecompprofObserver:
    """Observation-only backend: runs the captured graph as it is (no AOTAutograd, no Inductor), counting graphs and ops."""

    def __init__(self) -> None:
        self.graphs = 0
        self.ops = 0

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs += 1
        self.ops += sum(1 for node in gm.graph.nodes if "call" in node.op)
        return gm.forward


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
                reenabled = mode._before_compile(
                    frame, args[1] if len(args) > 1 else kwargs.get("frame_state")
                )
            if (
                reenabled is not None
            ):  # a parked variant runs again: no compile, so no _after_compile either
                return reenabled
        result = None
        try:
            result = self._torchdynamo_orig_backend(frame, *args, **kwargs)
            return result
        finally:
            if mode.active:
                with contain("profile.after_compile"):
                    mode._after_compile(frame, result, time.perf_counter() - start)


# Parked variants kept per frame: at least torch's default recompile_limit, and at most MAX_PARKED
# whatever the job's limit (each holds a guard manager and its compiled code).
MIN_PARKED = 8
MAX_PARKED = 64


def parked_per_frame(job_limit: object) -> int:
    """How many evicted variants profile mode parks per frame: as many as the job's own cache would
    hold (its ``recompile_limit``, 8 by default), so that a return to one of them is a reuse, as in the
    job, and not a retrace the job would not make (a 10th regional block under a limit of 16); at least
    :data:`MIN_PARKED`, at most :data:`MAX_PARKED`."""
    if not isinstance(job_limit, int) or isinstance(job_limit, bool):
        return MIN_PARKED
    return min(max(job_limit, MIN_PARKED), MAX_PARKED)


class ProfileMode:
    """Compiles through the observer backend at a recompile limit and reports every guard failure.

    ``on_guard_failure(orig_code, compile_id, reasons)`` receives the failures this class computes
    itself (the ones torch would have computed at a limit hit, when the evict mechanism forestalls
    it); ``compile_id`` is the id the compile that follows will get ("3/7"), or None if unknown.
    Failures torch computes itself stay in ``torch._dynamo.utils.guard_failures``.

    Parking is on when ``on_reuse`` is set before ``install`` (and torch has the internals). A miss
    that returns to a parked variant compiles nothing: its failures go to ``on_reuse(orig_code,
    entry_compile_id, reasons)``, where ``entry_compile_id`` is the re-enabled entry's own id ("3/1").
    ``max_parked`` bounds the parked variants kept per frame (None: :func:`parked_per_frame`).
    """

    # None: as many as the job's own cache holds (parked_per_frame), read at install; else this bound
    max_parked: int | None = None

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
        # evicted entries are parked for re-enabling (evict mechanism, internals present)
        self.parking = False
        self.why_no_parking = ""
        self.on_reuse: GuardFailureCallback | None = None
        self._parked = ParkedEntries()
        self.parked_bound = MIN_PARKED  # set at install
        self.forced_backend = False
        self.why_not_forced = ""  # why the observer backend could not be forced, if it could not
        self.why_limits_unfollowed = (
            ""  # why writes of the limits cannot be followed, if they cannot
        )
        self.active = False
        self._undo: list[Callable[[], None]] = []
        self._counts = ProfileCounts()
        self._touched: dict[int, weakref.ref[CodeType]] = {}
        self._uncounted: list[
            weakref.ref[Any]
        ] = []  # foreign guard managers we exempted from the count
        self.on_stance_change: Callable[[bool], None] | None = None
        self._settings = SessionSettings(self._undo, self._stance_changed)

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

        self._choose_mechanism()
        info = torch_info()
        # Evicted entries never count toward recompile_limit, but every compile still counts toward the
        # accumulated cap (frame_compile_id and the entry total): lift it for either mechanism.
        limit = self.recompile_limit
        if self.mechanism != MECHANISM_EVICT or limit is None:  # None: the unlimited mechanism
            limit = sys.maxsize
        job_limit = getattr(config, info.limit_config_name, None)
        self._settings.set_limit(config, info.limit_config_name, limit)
        self._settings.set_limit(config, info.accumulated_limit_config_name, sys.maxsize)
        bound = self.max_parked
        self.parked_bound = bound if bound is not None else parked_per_frame(job_limit)
        self.why_limits_unfollowed = self._settings.follow_limits(config, lambda: self.active)
        if self.why_limits_unfollowed:
            log.warning(
                "recompprof: profile mode cannot follow the job's writes of the recompile limits (%s): a "
                "config.patch ending under the job's own stance may put profile mode's limit back",
                self.why_limits_unfollowed,
            )

        why_no_force = self.why_not_forced = force_backend_missing()
        if why_no_force:
            log.warning(
                "recompprof: profile mode cannot force its observer backend: %s; compiles keep the "
                "job's own backend",
                why_no_force,
            )
        else:
            self._force_backend(eval_frame)
        if hasattr(eval_frame, "_create_wrapped_callback"):
            self._wrap_callbacks(eval_frame)
        self.active = True

    def _choose_mechanism(self) -> None:
        """Evict (parking where the owner takes ``on_reuse`` and torch has the internals), else unlimited."""
        if self.mechanism == MECHANISM_EVICT:
            self.why_off = evict_mechanism_missing()
            if self.why_off:
                log.warning(
                    "recompprof: profile mode falls back to lifting the recompile limit "
                    "(mechanism 'unlimited'): the evict mechanism needs %s",
                    self.why_off,
                )
                self.mechanism = MECHANISM_UNLIMITED
        if self.mechanism == MECHANISM_EVICT and self.on_reuse is None:
            # A re-enabled variant is no compile: only an owner that takes on_reuse can record it.
            self.why_no_parking = "on_reuse is not set"
        elif self.mechanism == MECHANISM_EVICT:
            self.why_no_parking = park_mechanism_missing()
            if self.why_no_parking:
                log.warning(
                    "recompprof: profile mode evicts without parking (a return to an evicted variant "
                    "retraces it): %s",
                    self.why_no_parking,
                )
        self.parking = self.mechanism == MECHANISM_EVICT and not self.why_no_parking

    def _wrap_callbacks(self, eval_frame: Any) -> None:
        """Replace the factory of Dynamo's frame callbacks: the observer's come back wrapped."""
        original = eval_frame._create_wrapped_callback

        def wrapped_callback_factory(compiler_fn: Any) -> Any:
            inner = original(compiler_fn)
            with contain("profile.wrap_callback"):
                if self.active and self._is_ours(compiler_fn):
                    return _ProfileCallback(self, inner)
            return inner

        self._undo.append(replace(eval_frame, "_create_wrapped_callback", wrapped_callback_factory))

    def _force_backend(self, eval_frame: Any) -> None:
        restore_stance = self._settings.force_backend(eval_frame, self.observer)
        self.forced_backend = True
        self._settings.follow_stance(eval_frame, lambda: self.active)
        # Frames compiled by the observer are handed back after the stance is back (see _retire_frames).
        self._undo.append(self._retire_frames)
        self._undo.append(restore_stance)

    def uninstall(self) -> None:
        """Restore torch: callback factory, stance and config values; reset the frames this mode compiled."""
        if not self._undo and not self.active:
            return
        self.active = False
        while self._undo:
            undo = self._undo.pop()
            with contain("profile.uninstall"):
                undo()

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

    def _settle(self, frame: Any, frame_state: Any, limit: int) -> tuple[Any, Report | None]:
        """(the compile result of a re-enabled parked variant or None, what to report or None)."""
        code = frame.f_code
        entries = region_entries(code)
        if not entries:
            return None, None
        live_ours, this_instance = exempt_entries(frame, entries, self.observer, self._uncounted)
        f_locals = frame.f_locals
        back = self._parked.take(code, f_locals) if self.parking else None
        if not live_ours and back is None:
            return None, None
        reasons = self._reasons(live_ours, f_locals)
        # Dynamo keeps entries in most-recently-hit order: the least recently used go. A re-enabled
        # variant takes the freed live slot, as a compile would.
        victims = this_instance[limit - 1 :]
        self._evict(code, victims, limit)
        self._counts.settled(code, len(victims), len(reasons), back is not None)
        report = self._report(back, frame_state, reasons)
        return (back.reenabled() if back is not None else None), report

    def _evict(self, code: CodeType, victims: list[Any], limit: int) -> None:
        for entry in victims:
            if self.parking:
                self._parked.park(
                    code,
                    entry,
                    f"Cache line {PARKED_MARK} (recompile_limit={limit})",
                    self.parked_bound,
                )
            else:
                invalidate(entry, f"Cache line {EVICTED_MARK} (recompile_limit={limit})")

    def _report(self, back: Parked | None, frame_state: Any, reasons: list[str]) -> Report | None:
        """A miss that compiles goes to ``on_guard_failure`` with the next compile's id; a re-enabled
        variant to ``on_reuse`` with its own entry's id."""
        compile_id: str | None
        if back is not None:
            callback, compile_id = self.on_reuse, str(back.compile_id)
        else:
            callback, compile_id = self.on_guard_failure, self._next_compile_id(frame_state)
        return (callback, compile_id, reasons) if callback is not None and reasons else None

    def _reasons(self, entries: list[Any], f_locals: Any) -> list[str]:
        from torch._dynamo.guards import get_guard_fail_reason_helper

        return [self._reason(get_guard_fail_reason_helper, entry, f_locals) for entry in entries]

    def _reason(self, helper: Any, entry: Any, f_locals: Any) -> str:
        """torch's reason text for one failing entry; an exception inside torch's helper is torch's, not ours."""
        try:
            return str(helper(entry.guard_manager, f_locals, entry.compile_id, self.observer))
        except Exception as exc:  # noqa: BLE001 - torch's own code failed: report it as such, keep going
            if self._counts.torch_error():
                log.warning(
                    "recompprof: torch's own get_guard_fail_reason_helper raised %s: %s (a torch error, "
                    "not a recompprof one; the guard failure is recorded without its reason)",
                    type(exc).__name__,
                    exc,
                )
            return f"{entry.compile_id}: <torch's get_guard_fail_reason_helper raised {type(exc).__name__}>"

    def _stance_changed(self, ours: bool) -> None:
        if self.on_stance_change is not None:
            self.on_stance_change(ours)

    def _after_compile(self, frame: Any, result: Any, seconds: float) -> None:
        if getattr(result, "guarded_code", None) is None:
            return
        code = frame.f_code
        live = 1 + sum(
            1
            for entry in region_entries(code)  # + the entry Dynamo installs on return
            if not is_dead(entry) and self._observed(entry)
        )
        self._counts.traced(code, seconds, live)
        self._touched.setdefault(id(code), weakref.ref(code))

    @staticmethod
    def _next_compile_id(frame_state: Any) -> str | None:
        from torch._dynamo import convert_frame

        frame_id = frame_state.get("_id") if isinstance(frame_state, dict) else None
        counter = getattr(convert_frame, "FRAME_COMPILE_COUNTER", None)
        if isinstance(frame_id, int) and counter is not None:
            return str(CompileId(frame_id, counter[frame_id]))
        return None

    # ------------------------------------------------------------------ detach

    def _retire_frames(self) -> None:
        """Give the frames this mode compiled back to the job with their full recompile budget (``retire``),
        and take the exemption mark back off the entries of others."""
        codes = [code for ref in self._touched.values() if (code := ref()) is not None]
        self._touched.clear()
        retire_frames(codes, self._parked, self._observed)
        count_again(self._uncounted)

    # ------------------------------------------------------------------ reading

    @staticmethod
    def is_own_reason(text: str) -> bool:
        """True for reason strings caused by profile mode itself (evicted entries, the forced backend)."""
        return (
            EVICTED_MARK in text
            or RETIRED_MARK in text
            or PARKED_MARK in text
            or ("BACKEND_MATCH" in text and RecompprofObserver.__name__ in text)
        )

    @property
    def torch_errors(self) -> int:
        """Exceptions raised inside torch's own reason helper."""
        return self._counts.torch_errors

    @property
    def stats(self) -> dict[str, Any]:
        """Totals and per-frame counts: Dynamo traces, evictions, parked variants re-enabled, reported failures, compile seconds."""
        counts = self._counts.totals()
        return {
            "mechanism": self.mechanism,
            "recompile_limit": self.recompile_limit,
            "why_off": self.why_off,
            "traces": counts["traces"],
            "evictions": counts["evictions"],
            "parking": self.parking,
            "reenabled": counts["reenabled"],
            "failures_reported": counts["failures_reported"],
            "compile_seconds": counts["compile_seconds"],
            "graphs": self.observer.graphs,
            "ops": self.observer.ops,
            "frames": counts["frames"],
        }
