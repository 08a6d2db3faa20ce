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


def test_a_new_prompt_length_is_explained_against_the_prefill_entry() -> None:
    """f(ids, cache) as a dynamic-cache generate calls it: prefill (length 5, no cache), decode (length 1,
    cache 5), decode (cache 6), then a prefill of length 9. That prefill fails the decode entries on the
    length held at 1 (static in any graph) and on the cache's type, and the first prefill's entry on the
    length 5 -> 9: torch makes the length dynamic now (length 12 compiles nothing), so the recompile is
    explained by that size against the prefill entry it shares its variant with, as a warm-up."""

    def f(ids: torch.Tensor, cache: torch.Tensor | None) -> torch.Tensor:
        h = ids.float().sum(-1, keepdim=True)
        return h * 2 if cache is None else h + cache.sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="eager")
    with recompprof.attach(event_log=False) as session:
        compiled(torch.ones(1, 5), None)
        compiled(torch.ones(1, 1), torch.ones(1, 5))
        compiled(torch.ones(1, 1), torch.ones(1, 6))
        compiled(torch.ones(1, 9), None)
        before_length_12 = len(_forward_compiles(session))
        compiled(torch.ones(1, 12), None)
    compiles = _forward_compiles(session)
    assert len(compiles) == before_length_12 == 4  # torch: length 12 reuses the dynamic entry
    second_prefill = compiles[3]
    assert {r.entry for r in second_prefill.reasons} == {"0/0", "0/1", "0/2"}
    reason = _explaining(second_prefill)
    assert (reason.category, reason.subject, reason.entry) == ("size", "L['ids']", "0/0")
    assert "expected 5, actual 9" in reason.text
    assert (second_prefill.automatic_dynamic, second_prefill.steady_state) == (
        "dim 1 of L['ids']",
        False,
    )


# A static cache's generate in miniature: prefill and decode told apart by a keyword argument, the batch
# 1 then 2 (torch makes the prompt length dynamic too: it saw 5 and 1), then a longer prompt with a longer
# cache, a plain object's int; then a still longer one, which compiles nothing.
_CACHE_LENGTH_SCRIPT = """
import torch, recompprof

class Cache:
    def __init__(self, max_len):
        self.max_len = max_len

def forward(**kw):
    h = kw["ids"].float().sum(-1, keepdim=True) * kw["cache"].max_len
    return h + kw["pos"] if "pos" in kw else h

step = torch.compile(forward, backend="eager")
with recompprof.attach():
    for batch, length, max_len in ((1, 5, 7), (2, 5, 7), (1, 9, 11), (1, 13, 15)):
        step(ids=torch.ones(batch, length), cache=Cache(max_len))
        step(ids=torch.ones(batch, 1), cache=Cache(max_len), pos=1.0)
"""


@pytest.mark.workload
def test_a_plain_objects_int_is_explained_alike_live_and_ingested(tmp_path: Path) -> None:
    """The longer prompt's prefill (0/4) fails the newest prefill entry on the cache's int (7 -> 11, a
    plain object's attribute torch makes dynamic now: the longest prompt compiles nothing) and the first
    prefill's entry on the prompt length, which torch already made dynamic. Live and ingested from
    TORCH_TRACE, it is explained by the int against entry 0/2; ingest, which cannot see what holds it, may
    call its category ``other``, never claims it warmed up, and ``diff`` finds no regression."""
    from agreement import record

    from recompprof._analysis.diff import compare
    from recompprof._analysis.trace.ingest import read_trace
    from recompprof._eventlog.reader import read_run

    script = tmp_path / "cache_length.py"
    script.write_text(_CACHE_LENGTH_SCRIPT)
    run = record(script, [], tmp_path / "job", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    live_events = list(read_run(run.run_dir))
    traced_events = [e for events in read_trace(run.trace_dir).events for e in events]
    subject = "L['kw']['cache'].max_len"
    for source, events in (("live", live_events), ("trace", traced_events)):
        compiles = {e.compile_id: e for e in events if isinstance(e, Compile) and not e.backward}
        assert sorted(compiles) == [f"0/{n}" for n in range(6)], (source, sorted(compiles))
        longer = compiles["0/4"]
        assert {r.entry for r in longer.reasons} == {"0/0", "0/1", "0/2", "0/3"}
        reason = _explaining(longer)
        categories = {"python_constant"} if source == "live" else {"python_constant", "other"}
        assert (reason.subject, reason.entry) == (subject, "0/2"), (source, reason)
        assert reason.category in categories, (source, reason)
        if reason.category == "python_constant":
            assert longer.automatic_dynamic == f"value of {subject}", source
        else:
            assert longer.automatic_dynamic is None, source
    assert compare(live_events, traced_events).regressions == []
