"""Steady state in jobs that never step an optimizer: generation, evaluation, serving (docs/steady-state.md).

Their step stays 0, so a warm-up counted in steps never ends; the verdict needs none: a recompile is steady
state once its change has compiled more variants of the frame than a bounded set explains. A job that
compiled its variants early and then ran a thousand calls without compiling pages no one; one that keeps
compiling new values of the same change does, past the bound. The report's header says which basis it used.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import recompprof
from recompprof._analysis.render.text import render_text
from recompprof._model.events import Compile
from recompprof._model.steady import BOUNDED_VARIANTS


class _Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, with_loss: bool) -> torch.Tensor:
        logits = self.body(x).mean(dim=1)
        return logits.logsumexp(-1).mean() if with_loss else logits


def _recompiles(session: recompprof.Session) -> list[Compile]:
    return [
        e
        for e in session.recent_events()
        if isinstance(e, Compile) and e.is_recompile and not e.backward
    ]


def _header(session: recompprof.Session) -> str:
    return " ".join(render_text(recompprof.report(session), width=200).split())


def test_eval_loop_that_compiled_its_variants_early_is_not_steady_state() -> None:
    """An eval-only loop: a loss/no-loss flag and a short last batch compile early (the flag once, the batch
    dim once, torch's automatic dynamic), then 1,000 calls compile nothing (torch's truth: the compile count
    stands). No recompile is steady state and the header says the verdict rests on repeats."""
    torch._dynamo.reset()
    model = torch.compile(_Classifier().eval(), backend="eager")
    batches = [torch.randn(8, 10, 16), torch.randn(5, 10, 16)]
    with recompprof.attach(event_log=False) as session, torch.no_grad():
        for x in batches:
            for with_loss in (True, False):
                model(x, with_loss)
        early = len(_recompiles(session))
        for i in range(1000):
            model(batches[i % 2], i % 3 == 0)
        assert len(_recompiles(session)) == early > 0
    assert [e.steady_state for e in _recompiles(session)] == [False] * early
    report = recompprof.report(session)
    assert sum(f.steady_state_recompiles for f in report.frames.values()) == 0
    assert "steady state by repeats" in _header(session)


def test_eval_loop_that_keeps_compiling_turns_steady_past_the_bound() -> None:
    """An eval loop under dynamic=False over ever new sequence lengths (the limit raised): every length
    recompiles (torch makes nothing dynamic); the first variants are what a bounded set explains, and each
    recompile past BOUNDED_VARIANTS variants is steady state."""
    torch._dynamo.reset()
    model = torch.compile(_Classifier().eval(), backend="eager", dynamic=False)
    lengths = range(10, 22)
    with (
        torch._dynamo.config.patch(recompile_limit=32),
        recompprof.attach(event_log=False) as session,
        torch.no_grad(),
    ):
        for length in lengths:
            for _ in range(5):
                model(torch.randn(4, length, 16), False)
    recompiles = _recompiles(session)
    assert len(recompiles) == len(lengths) - 1
    steady = len(lengths) - BOUNDED_VARIANTS
    assert [e.steady_state for e in recompiles] == [False] * (len(recompiles) - steady) + [
        True
    ] * steady
    assert sum(f.steady_state_recompiles for f in session.snapshot().frames.values()) == steady


def test_generate_loop_over_a_few_lengths_is_no_steady_state(tmp_path: Path) -> None:
    """A tiny Llama's generate loop compiled with dynamic=False over three prompt lengths: each new length
    recompiles its prefill (torch's truth), a change that repeats, but three lengths and a decode step are
    variants a bounded set explains: none is steady state, and the report counts them as variants."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, backend="eager", dynamic=False)
    per_length = []
    with recompprof.attach(run_dir=tmp_path) as session, torch.no_grad():
        for length in (5, 7, 9):
            ids = torch.randint(3, 128, (1, length))
            model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=2,
                min_new_tokens=2,
                do_sample=False,
                cache_implementation="static",
            )
            per_length.append(len(_recompiles(session)))
    assert per_length[1] > per_length[0] and per_length[2] > per_length[1]  # each length recompiled
    recompiles = _recompiles(session)
    assert not any(e.steady_state for e in recompiles)
    report = recompprof.report(session)
    assert sum(f.steady_state_recompiles for f in report.frames.values()) == 0


def test_a_job_that_steps_keeps_the_steps_basis(tmp_path: Path) -> None:
    """A training loop whose optimizer steps: a flag flipped at step 2 recompiles once, a new variant (a
    flag's second state), so no steady state even past warmup_steps 0; the header says the basis."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, flag: x * 2 if flag else x * 3, backend="eager")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    with recompprof.attach(run_dir=tmp_path) as session:
        for step in range(4):
            compiled(torch.ones(3), step < 2)
            opt.step()
    (recompile,) = _recompiles(session)
    assert (recompile.step, recompile.steady_state) == (2, False)
    assert "steady state by steps (warm-up 0)" in _header(session)
