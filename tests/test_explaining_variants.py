"""The explaining reason of a recompile when the frame holds several variants (docs/steady-state.md).

Torch lists one reason per cached entry, each that entry's first failing guard, so an entry of another
variant fails on the flag that tells the variants apart at any recompile. The reason that explains the
change is the one torch makes dynamic now, against the entry compiled under the same variant; torch's
own record (no further compile for the next batch size) is the ground truth.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import recompprof
from recompprof._analysis.render.text import render_text
from recompprof._model.events import Compile, Reason


def _forward_compiles(session: recompprof.Session) -> list[Compile]:
    return [e for e in session.recent_events() if isinstance(e, Compile) and not e.backward]


def _explaining(event: Compile) -> Reason:
    return next(r for r in event.reasons if r.explains_change)


def test_flag_variant_then_batch_is_explained_by_the_batch_dim() -> None:
    """f(x, flag) over batches 1, 2, 3 and both flag values: the flag-False batch-2 call fails the flag-True
    entries on the flag and the flag-False batch-1 entry on the batch dim from an expected 1. Torch makes
    that dim dynamic (batch 3 compiles nothing), so the recompile is explained by the size against entry
    0/1, it is automatic dynamic warm-up and not steady state."""

    def f(x: torch.Tensor, flag: bool) -> torch.Tensor:
        return x * 2 if flag else x + 1

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="eager")
    with recompprof.attach(event_log=False) as session:
        for batch in (1, 2):
            for flag in (True, False):
                compiled(torch.ones(batch, 4), flag)
        before_batch_3 = len(_forward_compiles(session))
        for flag in (True, False):
            compiled(torch.ones(3, 4), flag)
    compiles = _forward_compiles(session)
    assert len(compiles) == before_batch_3 == 4  # torch: batch 3 reuses the dynamic entries
    decode_like = compiles[3]
    assert any(r.subject == "L['flag']" for r in decode_like.reasons)
    reason = _explaining(decode_like)
    assert (reason.category, reason.subject, reason.entry) == ("size", "L['x']", "0/1")
    assert (decode_like.automatic_dynamic, decode_like.steady_state) == ("dim 0 of L['x']", False)


def test_static_cache_generate_decode_at_a_new_batch_is_the_batch_dim(tmp_path: Path) -> None:
    """A tiny Llama's generate(cache_implementation="static") with model.forward compiled, batches 1, 2, 3
    and prompt lengths 5 and 9. The decode at batch 2 fails the batch-2 prefill entry on what tells prefill
    from decode (the keyword arguments) and the batch-1 decode entry on the batch dim from an expected 1:
    it is explained by that dim, automatic dynamic. Batch 3 compiles nothing (torch's truth), and no
    recompile of this generation job (no step) is steady state."""
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
    model.forward = torch.compile(model.forward, backend="eager")
    after_batch: dict[tuple[int, int], int] = {}
    with recompprof.attach(run_dir=tmp_path) as session, torch.no_grad():
        for length in (5, 9):
            for batch in (1, 2, 3):
                ids = torch.randint(3, 128, (batch, length))
                model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=3,
                    min_new_tokens=3,
                    do_sample=False,
                    cache_implementation="static",
                )
                after_batch[(length, batch)] = len(_forward_compiles(session))
    assert after_batch[(5, 3)] == after_batch[(5, 2)]
    assert after_batch[(9, 3)] == after_batch[(9, 2)]
    recompiles = [e for e in _forward_compiles(session) if e.is_recompile]
    decode_batch_2 = recompiles[after_batch[(5, 2)] - 2]  # the last compile of batch 2, length 5
    reason = _explaining(decode_batch_2)
    assert (reason.category, reason.subject) == ("size", "L['kwargs']['input_ids']")
    assert "expected 1, actual 2" in reason.text
    assert decode_batch_2.automatic_dynamic == "dim 0 of L['kwargs']['input_ids']"
    assert not any(e.steady_state for e in recompiles), [
        (e.compile_id, _explaining(e).text) for e in recompiles if e.steady_state
    ]
    for event in recompiles:  # a variant flag never explains a size that changed from 1
        batch_change = [r for r in event.reasons if "expected 1, actual 2" in r.text]
        if batch_change and event.automatic_dynamic is None:
            pytest.fail(f"{event.compile_id} explained by {_explaining(event).text}")
    report = recompprof.report(session)
    assert sum(f.steady_state_recompiles for f in report.frames.values()) == 0
    assert "steady state by repeats" in " ".join(render_text(report, width=200).split())
