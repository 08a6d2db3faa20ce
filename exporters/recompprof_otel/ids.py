"""Trace and span ids from a private random generator.

The SDK's default generator draws from the global ``random`` module, and Dynamo saves and restores
that module's state around every compile: spans created on the compile path would then get the
*same* ids compile after compile. A generator of our own, seeded from the OS, is immune to that
(and never consumes the training job's random stream).
"""

from __future__ import annotations

import os
import random

from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import IdGenerator

from recompprof.exporter import Owner


class PrivateRandomIdGenerator(IdGenerator):
    """Random W3C ids drawn from a ``random.Random`` owned by recompprof, reseeded in a forked child."""

    def __init__(self) -> None:
        self._owner = Owner()
        self._random = random.Random(os.urandom(32))
        # The trace id the next root span takes (a compile's own ``trace_id``); used once, then random again.
        self.next_trace_id: int | None = None

    def _rng(self) -> random.Random:
        if self._owner.forked():  # a forked child must not repeat its parent's ids
            self._owner.claim()
            self._random = random.Random(os.urandom(32))
        return self._random

    def generate_span_id(self) -> int:
        rng = self._rng()
        span_id = rng.getrandbits(64)
        while span_id == trace.INVALID_SPAN_ID:
            span_id = rng.getrandbits(64)
        return span_id

    def generate_trace_id(self) -> int:
        if self.next_trace_id is not None:
            trace_id, self.next_trace_id = self.next_trace_id, None
            return trace_id
        rng = self._rng()
        trace_id = rng.getrandbits(128)
        while trace_id == trace.INVALID_TRACE_ID:
            trace_id = rng.getrandbits(128)
        return trace_id

    def is_trace_id_random(self) -> bool:
        return True
