"""A frame's history of reason keys (``recompprof._model.explaining._History``) defers moving keys until
the oldest must be dropped; it must keep the order that moving each key when touched keeps."""

from __future__ import annotations

import collections
import random

import pytest

from recompprof._model.explaining import _History


def _eager_touch_all(model: collections.OrderedDict[int, int | None], keys: list[int]) -> None:
    model.update(dict.fromkeys(keys))
    for key in keys:
        model.move_to_end(key)


@pytest.mark.parametrize("seed", range(40))
def test_waiting_moves_keep_the_order_of_moving_each_key_at_once(seed: int) -> None:
    """Random runs of what the explainer does to a frame's history (a compile's keys as a block, most often
    the last block with new keys in front, single keys set and touched, the oldest dropped past a bound)
    leave the same keys, values and order as an OrderedDict that moves each key when it is touched."""
    rng = random.Random(seed)
    history, model = _History(), collections.OrderedDict[int, "int | None"]()
    block: list[int] | None = None
    bound = rng.choice([6, 20, 60, 10_000])
    for step in range(300):
        op = rng.random()
        if op < 0.5:  # a compile's listed keys: new ones in front of the last block's, or anew
            fresh = [rng.randrange(200) for _ in range(rng.randrange(0, 4))]
            if block is not None and rng.random() < 0.1:  # the same compile's keys again
                keys, before = block, None
            elif block is not None and rng.random() < 0.8:
                new = [k for k in dict.fromkeys(reversed(fresh)) if k not in set(block)][::-1]
                keys, before = new + block, block
            else:
                keys, before = list(dict.fromkeys(fresh + [rng.randrange(200)])), None
            history.touch_all(keys, before)
            _eager_touch_all(model, keys)
            block = keys
        elif op < 0.8:  # a variant or changed key: set, then touched
            key, value = 1000 + rng.randrange(20), rng.randrange(5)
            history[key] = value
            model[key] = value
            history.touch(key)
            model.move_to_end(key)
        elif len(history) > bound:  # the oldest dropped
            history.ordered()
            block = None if rng.random() < 0.5 else block
            while len(history) > bound:
                assert history.popitem(last=False) == model.popitem(last=False), step
        assert dict(history) == dict(model)
    history.ordered()
    assert list(history.items()) == list(model.items())
