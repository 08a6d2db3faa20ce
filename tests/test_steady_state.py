"""Steady state or warm-up, the explaining reason and the "fix these first" order, on real compiles.

Each verdict is held against what torch really does: a scalar or a tensor dim torch makes dynamic after
its first change recompiles once (warm-up), one the traced code specialises again keeps recompiling
(steady state), and the reason that explains a recompile is what changed, not what tells two cached
variants apart (docs/steady-state.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import recompprof
from recompprof._analysis.render.html import render_html
from recompprof._analysis.render.text import render_text
from recompprof._model.events import Compile

GLOBAL_INT = 1


def _recompiles(session: recompprof.Session) -> list[Compile]:
    return [
        e
        for e in session.recent_events()
        if isinstance(e, Compile) and e.is_recompile and not e.backward
    ]


def _explaining(event: Compile) -> tuple[str, str, str]:
    reason = next(r for r in event.reasons if r.explains_change)
    return reason.category, reason.subject, reason.text


def test_compiled_optimizer_under_an_lr_scheduler_recompiles_once_as_warmup(tmp_path: Path) -> None:
    """A compiled Adam step under a StepLR scheduler: 12 LR changes, one recompile (torch makes the float LR
    dynamic after its first change). It is warm-up, not steady state, in the event, the live counters and
    the report, and "fix these first" says it fixed itself instead of advising to turn it into a tensor."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)

    @torch.compile(backend="eager")
    def step() -> None:
        opt.step()

    with recompprof.attach(run_dir=tmp_path) as session:
        for _ in range(12):
            model(torch.randn(2, 4)).sum().backward()
            step()
            sched.step()
    recompiles = _recompiles(session)
    assert len(recompiles) == 1
    (lr,) = recompiles
    assert _explaining(lr)[:2] == ("python_constant", "L['self'].param_groups[0]['lr']")
    assert (lr.automatic_dynamic, lr.steady_state) == (
        "value of L['self'].param_groups[0]['lr']",
        False,
    )
    live = session.snapshot()
    report = recompprof.report(session)
    assert sum(f.steady_state_recompiles for f in live.frames.values()) == 0
    assert sum(f.steady_state_recompiles for f in report.frames.values()) == 0
    assert report.automatic_dynamic_recompiles == 1
    text = " ".join(render_text(report, width=200).split())
    fix_first = text[text.index("Fix these first") : text.index("Frames")]
    assert "nothing to fix: one-time warm-up" in fix_first and "0-dim tensor" in fix_first
    assert "Turn the changing Python scalar" not in fix_first
    assert "This will not recur for" in text


def test_scalars_are_warmup_only_where_torch_makes_them_dynamic(tmp_path: Path) -> None:
    """A local int and a local float are made dynamic on their first change (one warm-up recompile each);
    a global int, an nn.Module's int attribute and a bool are always specialised, and a float is too
    under specialize_float=True: each of their changes recompiles. Three values are variants a bounded set
    explains, so none of them is steady state (docs/steady-state.md), nor a bool flipped once."""
    global GLOBAL_INT

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.offset = 1

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.offset

    def by_global(x: torch.Tensor) -> torch.Tensor:
        return x + GLOBAL_INT

    module = Scaled()

    def run(fn, calls):  # type: ignore[no-untyped-def]
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="eager")
        with recompprof.attach(run_dir=tmp_path / str(len(list(tmp_path.iterdir())))) as session:
            for call in calls:
                compiled(*call())
        return [(e.automatic_dynamic, e.steady_state) for e in _recompiles(session)]

    def set_global(value: int) -> tuple[torch.Tensor]:
        global GLOBAL_INT
        GLOBAL_INT = value
        return (torch.ones(2),)

    def set_offset(value: int) -> tuple[torch.Tensor]:
        module.offset = value
        return (torch.ones(2),)

    ones = torch.ones(2)
    assert run(lambda x, n: x * n, [lambda v=v: (ones, v) for v in (2, 3, 4, 5)]) == [
        ("value of L['n']", False)
    ]
    assert run(lambda x, k: x * k, [lambda v=v: (ones, v) for v in (2.0, 3.0, 4.0)]) == [
        ("value of L['k']", False)
    ]
    repeats = [(None, False), (None, False)]
    assert run(by_global, [lambda v=v: set_global(v) for v in (2, 3, 4)]) == repeats
    assert run(module, [lambda v=v: set_offset(v) for v in (2, 3, 4)]) == repeats
    assert run(lambda x, b: x * 2 if b else x, [lambda v=v: (ones, v) for v in (True, False)]) == [
        (None, False)
    ]
    with torch._dynamo.config.patch(specialize_float=True):
        assert run(lambda x, k: x * k, [lambda v=v: (ones, v) for v in (2.0, 3.0, 4.0)]) == repeats


class _PosCache(torch.nn.Module):
    """Position embeddings memoised per image size, as rotary and interpolated embeddings are: the dict
    lookup by size specialises the dim torch made dynamic."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[str, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = f"{x.shape[2]}"
        if key not in self.cache:
            self.cache[key] = torch.zeros(x.shape[2])
        return x + self.cache[key]


def test_a_dim_specialised_again_recompiles_and_the_report_says_where(tmp_path: Path) -> None:
    """The first size change of dim 2 is automatic dynamic warm-up; the traced code specialises the dim
    again, so each later size recompiles: variants (steady state only past the bound), and the report
    names the dim as specialised again with the guard that failed, never promising it will not recur."""
    torch._dynamo.reset()
    compiled = torch.compile(_PosCache(), backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        for size in (32, 48, 64, 80):
            compiled(torch.randn(1, 3, size))
    recompiles = _recompiles(session)
    assert [(e.automatic_dynamic, e.steady_state) for e in recompiles] == [
        ("dim 2 of L['x']", False),
        (None, False),
        (None, False),
    ]
    report = recompprof.report(session)
    assert sum(f.steady_state_recompiles for f in report.frames.values()) == 0
    for text in (" ".join(render_text(report, width=200).split()), render_html(report)):
        assert "torch made dim 2 of L[" in text and "specialised it again" in text
        assert "expected 48, actual 64" in text
        assert "will not recur for" not in text


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_second_prefill_of_generate_is_explained_by_the_mask_length(
    family: str, tmp_path: Path
) -> None:
    """Two generate() calls (prompt lengths 7 and 12) on a tiny T5 / BART: the second prefill fails the
    decode entries on the cache's is_updated flag (what tells prefill from decode) and the first prefill's
    entry on the attention mask's length. The mask's length is what changed: it explains the recompile,
    which is torch making that dim dynamic (warm-up). Only the first decode step's recompile is explained
    by is_updated (a bool, never made dynamic): a variant compiled once in a job that steps no optimizer,
    so no recompile is steady state (docs/steady-state.md#jobs-without-steps); the rest are warm-up."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "t5":
        config = transformers.T5Config(
            vocab_size=64,
            d_model=16,
            d_kv=8,
            d_ff=32,
            num_layers=1,
            num_decoder_layers=1,
            num_heads=2,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        )
        model = transformers.T5ForConditionalGeneration(config).eval()
    else:
        config = transformers.BartConfig(
            vocab_size=64,
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            max_position_embeddings=64,
            decoder_start_token_id=2,
            pad_token_id=1,
            eos_token_id=2,
            bos_token_id=0,
            forced_eos_token_id=None,
        )
        model = transformers.BartForConditionalGeneration(config).eval()
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, backend="aot_eager")
    with recompprof.attach(run_dir=tmp_path) as session, torch.no_grad():
        for length in (7, 12):
            ids = torch.randint(3, 64, (1, length))
            model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=4,
                min_new_tokens=4,
                do_sample=False,
            )
    recompiles = _recompiles(session)
    explained = [_explaining(e)[:2] for e in recompiles]
    second_prefill = next(
        e
        for e in recompiles
        if any(
            "expected 7, actual 12" in r.text and "attention_mask" in r.subject for r in e.reasons
        )
    )
    assert _explaining(second_prefill)[:2] == ("size", "L['kwargs']['attention_mask']")
    assert second_prefill.automatic_dynamic == "dim 1 of L['kwargs']['attention_mask']"
    assert not any(e.steady_state for e in recompiles)
    assert sum("is_updated" in subject for _, subject in explained) == 1
    assert all(
        e.automatic_dynamic is not None for e in recompiles if "is_updated" not in _explaining(e)[1]
    )


def test_fix_first_ranks_a_new_variant_before_the_warmup_that_fixed_itself(tmp_path: Path) -> None:
    """BERT trained with dynamic padding, then evaluated: the sequence-length change is automatic dynamic
    warm-up (one-time), the switch to eval a new variant (the first entry into a mode: no steady state,
    though past warm-up steps). "Fix these first" lists the variant's cause first, and the warm-up cause
    says it is one-time and how to avoid even that (mark the dim dynamic up front), in the terminal and
    the HTML report alike."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    model = transformers.BertForSequenceClassification(config)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        for length in (8, 12, 16):
            ids = torch.randint(1, 64, (2, length))
            compiled(
                input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.tensor([0, 1])
            ).loss.backward()
            opt.step()
            opt.zero_grad()
        model.eval()
        with torch.no_grad():
            ids = torch.randint(1, 64, (2, 16))
            compiled(input_ids=ids, attention_mask=torch.ones_like(ids))
    recompiles = _recompiles(session)
    assert [e.steady_state for e in recompiles] == [False, False]
    assert recompiles[0].automatic_dynamic is not None and recompiles[
        0
    ].automatic_dynamic.startswith("dim 1 of ")
    steady_category = _explaining(recompiles[1])[0]
    report = recompprof.report(session)
    text = " ".join(render_text(report, width=200).split())
    fix_first = text[text.index("Fix these first") : text.index("Frames")]
    steady_at, warmup_at = fix_first.index(f"· {steady_category} ·"), fix_first.index("· size ·")
    assert steady_at < warmup_at
    assert (
        "nothing to fix: one-time warm-up" in fix_first[warmup_at:]
        and "mark_dynamic" in fix_first[warmup_at:]
    )
    assert "Mark the varying dimension dynamic" not in fix_first
    rows = (
        render_html(report)
        .split('id="fix-first-table"')[1]
        .split("</table>")[0]
        .split("<tr data-cause=")[1:]
    )
    assert [row.split('"')[1] for row in rows] == [steady_category, "size"]
    assert "nothing to fix: one-time warm-up" in rows[1] and "nothing to fix" not in rows[0]
    assert [c.tier for c in report.ranked_causes()] == [1, 2]


_LR_SCRIPT = """
import torch, recompprof
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
step = torch.compile(lambda: opt.step(), backend="eager")
with recompprof.attach():
    for _ in range(12):
        model(torch.randn(2, 4)).sum().backward()
        step()
        sched.step()
"""


@pytest.mark.workload
def test_live_and_ingested_runs_give_the_same_warmup_verdicts(tmp_path: Path) -> None:
    """A compiled AdamW step under a scheduler, recorded live and by TORCH_TRACE in one process: the ingested
    run marks the same recompile as the LR made dynamic (warm-up), explained by the same reason."""
    from recorded_runs import clean_env

    from recompprof._analysis.trace.ingest import read_trace
    from recompprof._eventlog.reader import read_run

    script = tmp_path / "lr.py"
    script.write_text(_LR_SCRIPT)
    env = clean_env(RECOMPPROF_RUN_DIR=str(tmp_path / "run"), TORCH_TRACE=str(tmp_path / "trace"))
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    live = [e for e in read_run(tmp_path / "run") if isinstance(e, Compile) and e.is_recompile]
    traced = [
        e
        for events in read_trace(tmp_path / "trace").events
        for e in events
        if isinstance(e, Compile) and e.is_recompile
    ]
    verdicts = [
        [(e.compile_id, e.automatic_dynamic, _explaining(e)[:2]) for e in events]
        for events in (live, traced)
    ]
    assert verdicts[0] == verdicts[1]
    assert [v[1] for v in verdicts[0]] == ["value of L['self'].param_groups[0]['lr']"]
    assert not live[0].steady_state
