"""pytest plugin (entry point ``pytest11``): the ``no_recompiles`` fixture.

    def test_train_step_is_stable(no_recompiles):
        for batch in batches:            # first compiles are fine; any recompile fails the test
            train_step(model, batch)

The check runs when the test body returns, so a recompile is reported as the test's failure (frame,
compile id, the reason that explains it and a fix), not as a teardown error. ``no_recompiles.reset()``
forgets a deliberate warm-up; ``no_recompiles.max_recompiles = N`` allows N.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from recompprof.testing import RecompileWatch

__all__ = ["no_recompiles", "pytest_runtest_call"]

_WATCH = pytest.StashKey[RecompileWatch]()


@pytest.fixture
def no_recompiles(request: pytest.FixtureRequest) -> Iterator[RecompileWatch]:
    """A :class:`~recompprof.testing.RecompileWatch` over the test body; the test fails if it recompiles."""
    watch = RecompileWatch().start()
    request.node.stash[_WATCH] = watch
    try:
        yield watch
    finally:
        watch.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    __tracebackhide__ = True
    result = yield
    watch = item.stash.get(_WATCH, None)
    if watch is not None:
        watch.check()
    return result
