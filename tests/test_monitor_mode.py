"""Monitor mode observes jobs compiled with any backend and changes nothing torch does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import recompprof
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile, RecompileLimitHit
from recompprof._model.vocabulary import PHASES
from recompprof._torch.versions import torch_info

pytestmark = pytest.mark.torch_compat

SCALE = 1.0
LIMIT = torch_info().limit_config_name  # cache_size_limit before 2.7


def _train(backend: str, steps: int = 6) -> dict[str, Any]:
    """A small training run whose batch size and a global change; returns what torch did."""
    global SCALE
    torch.manual_seed(0)
    torch._dynamo.reset()
    SCALE = 1.0
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x: torch.Tensor) -> torch.Tensor:
        return model(x).pow(2).mean() * SCALE

    compiled = torch.compile(step, backend=backend)
    losses = []
    for i in range(steps):
        if i == steps - 1:
            SCALE = 2.0
        x = torch.randn(4 + (i % 2), 8, generator=torch.Generator().manual_seed(i))
        loss = compiled(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    import torch._dynamo.utils as utils

    return {
        "losses": losses,
        "frames_ok": utils.counters["frames"]["ok"],
        "unique_graphs": utils.counters["stats"]["unique_graphs"],
        "recompile_limit": getattr(torch._dynamo.config, LIMIT),
        "accumulated_recompile_limit": getattr(
            torch._dynamo.config, torch_info().accumulated_limit_config_name
        ),
        "weights": [p.detach().clone() for p in model.parameters()],
    }


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["losses"] == b["losses"]
    assert all(torch.equal(x, y) for x, y in zip(a["weights"], b["weights"]))
    for key in ("frames_ok", "unique_graphs", "recompile_limit", "accumulated_recompile_limit"):
        assert a[key] == b[key], key


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_monitor_changes_nothing(backend: str, tmp_path: Path) -> None:
    """The same job with and without recompprof compiles the same graphs under the same limits and computes identical results."""
    import torch._dynamo.utils as utils

    utils.counters.clear()
    without = _train(backend)
    utils.counters.clear()
    before = {
        id(m) for m in utils._compilation_metrics
    }  # torch's own buffer of the records it made
    with recompprof.attach(run_dir=tmp_path) as session:
        with_ = _train(backend)
    made = [m for m in utils._compilation_metrics if id(m) not in before]
    _same(without, with_)
    compiles = [e for e in read_file(session.event_log_path) if isinstance(e, Compile)]
    forward = [c for c in compiles if not c.backward]
    # every forward compile torch recorded is an event (frames_ok is not a compile count on 2.7: it is 6 for these 3)
    assert len(forward) == len([m for m in made if getattr(m, "is_forward", None) is not False]) > 0
    backward = [c for c in compiles if c.backward]
    if backend == "aot_eager" and torch_info().has(
        "backward_compiles"
    ):  # AOT autograd compiles the backward lazily
        assert backward and all(b.frame == forward[0].frame for b in backward)
    elif backend == "aot_eager":  # older torch logs no record for it, and the session says so
        assert backward == [] and session.signals["backward_compiles"] is False


@pytest.mark.workload
@pytest.mark.inductor
def test_monitor_observes_inductor_and_its_phases(tmp_path: Path) -> None:
    """Under Inductor, monitor mode changes nothing and reports exclusive phases that sum to each compile's duration."""
    import torch._dynamo.utils as utils
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    # Cold compiles, so lowering and code generation really run (a cache hit skips them).
    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        utils.counters.clear()
        without = _train("inductor", steps=2)
        utils.counters.clear()
        with recompprof.attach(run_dir=tmp_path) as session:
            with_ = _train("inductor", steps=2)
    _same(without, with_)
    compiles = [e for e in read_file(session.event_log_path) if isinstance(e, Compile)]
    assert len([c for c in compiles if not c.backward]) == with_["frames_ok"]
    for c in compiles:
        assert set(c.phases) == set(PHASES)
        assert sum(c.phases.values()) == pytest.approx(c.duration, rel=1e-6, abs=1e-6)
        assert all(v >= 0 for v in c.phases.values())
    assert all(c.phases["inductor_lowering"] > 0 and c.phases["code_gen"] > 0 for c in compiles)
    assert any(c.phases["kernel_compile"] > 0 for c in compiles)
    assert any(c.backward for c in compiles), "the lazily compiled backward is recorded"


def test_limit_hit_recorded_without_changing_the_fallback(tmp_path: Path) -> None:
    """A frame past torch's recompile_limit is recorded as a limit hit (limit, value, last reason) and still falls back to eager."""
    old = getattr(torch._dynamo.config, LIMIT)
    setattr(torch._dynamo.config, LIMIT, 2)
    try:

        def scaled(x: torch.Tensor, tag: str) -> torch.Tensor:
            return x * len(tag)

        compiled = torch.compile(scaled, backend="eager")
        with recompprof.attach(run_dir=tmp_path) as session:
            outputs = [
                compiled(torch.ones(2), tag).sum().item() for tag in ("a", "bb", "ccc", "dddd")
            ]
        assert outputs == [2.0, 4.0, 6.0, 8.0]
        events = list(read_file(session.event_log_path))
        hits = [e for e in events if isinstance(e, RecompileLimitHit)]
        if not torch_info().has(
            "recompile_limit_hits"
        ):  # older torch logs no record of the hit; the session says so
            assert hits == [] and session.signals["recompile_limit_hits"] is False
            return
        assert hits and hits[0].limit == "recompile_limit" and hits[0].value == 2
        assert hits[0].frame.name == "scaled"
        assert hits[0].last_reason is not None and hits[0].last_reason.category == "python_constant"
        snap = session.snapshot()
        assert sum(f.limit_hits["recompile_limit"] for f in snap.frames.values()) == len(hits)
    finally:
        setattr(torch._dynamo.config, LIMIT, old)
