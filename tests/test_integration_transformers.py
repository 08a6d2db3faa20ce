"""The Hugging Face Trainer callback with the real ``transformers``/``accelerate`` packages on CPU.

A one-layer Llama built from a config (random weights; the hub is not reachable) trains with
``torch_compile=True`` (``eager`` backend), dynamic padding (each batch padded to its longest
sequence), gradient accumulation 2 and an evaluation every 2 steps. The training data is read in order:
the first step's batches have length 5, the second step's 7 (a size recompile at global step 1);
later lengths reuse the dynamic graph. The Trainer evaluates with the uncompiled model, so evaluation
compiles nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "transformers",
    reason="the transformers extra is not installed (pip install recompprof[transformers])",
)
pytest.importorskip(
    "accelerate",
    reason="the transformers extra is not installed (pip install recompprof[transformers])",
)

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

import recompprof
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile, Event, SessionEnd, SessionStart
from recompprof._model.steady import BOUNDED_VARIANTS
from recompprof.integrations.transformers import RecompprofCallback, SteadyStateRecompileError

SCALARS = (
    "recompprof/recompiles",
    "recompprof/steady_state_recompiles",
    "recompprof/compile_seconds",
    "recompprof/recompile_limit_hits",
)
# Two sequences per micro-batch, two micro-batches per step: steps of length 5, 7, 6, 9.
TRAIN_LENGTHS = [5, 5, 5, 5, 7, 7, 7, 7, 6, 6, 6, 6, 9, 9, 9, 9]


class Sequences(Dataset):
    def __init__(self, lengths: list[int], seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.items = [torch.randint(1, 64, (n,), generator=g) for n in lengths]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.items[i]}


def pad_to_longest(batch: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Dynamic padding: each batch is as long as its longest sequence."""
    n = max(len(b["input_ids"]) for b in batch)
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    mask = torch.zeros(len(batch), n, dtype=torch.long)
    for i, b in enumerate(batch):
        ids[i, : len(b["input_ids"])] = b["input_ids"]
        mask[i, : len(b["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def build(
    tmp_path: Path,
    callbacks: list[TrainerCallback],
    compile: bool = True,
    lengths: list[int] = TRAIN_LENGTHS,
    **kwargs: Any,
) -> Trainer:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    options: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=4,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-3,
        train_sampling_strategy="sequential",
    )
    if compile:
        options.update(torch_compile=True, torch_compile_backend="eager")
    options.update(kwargs)
    return Trainer(
        model=LlamaForCausalLM(config),
        args=TrainingArguments(**options),
        train_dataset=Sequences(lengths, 0),
        eval_dataset=Sequences([4, 6], 1),
        data_collator=pad_to_longest,
        callbacks=callbacks,
    )


class StepProbe(TrainerCallback):
    """Records, for every event, the step it carries and the Trainer's global step at that moment."""

    def __init__(self, callback: RecompprofCallback) -> None:
        self.callback = callback
        self.seen: list[tuple[Event, int]] = []
        self.logged: list[set[str]] = []

    def on_log(
        self,
        args: Any,
        state: Any,
        control: Any,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        self.logged.append(set(logs or {}))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        assert (
            self.callback.session is not None
        )  # the recompprof callback runs first and has attached
        self.callback.session.add_listener(
            lambda event: self.seen.append((event, state.global_step))
        )


class Interrupt(TrainerCallback):
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 2:
            raise KeyboardInterrupt


@pytest.fixture
def trainer_log() -> Iterator[list[str]]:
    """Messages of the transformers.trainer logger at INFO (transformers' loggers do not propagate to the root)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("transformers.trainer")
    handler, level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_train_events_carry_global_steps_and_scalars_reach_log_history(
    tmp_path: Path, trainer_log: list[str]
) -> None:
    """Events carry state.global_step (accumulation 2): the padding-length recompile at step 1; the
    default warm-up runs through the first evaluation (eval_steps 2 -> 3 steps), so it is not steady
    state; every log_history entry (each logging step, each evaluation, the final summary) has the
    scalars, and a callback listed before this one receives them too; the report goes to the
    transformers.trainer logger; the session is detached after train."""
    callback = RecompprofCallback()
    probe = StepProbe(callback)
    trainer = build(
        tmp_path, [probe, callback]
    )  # the probe stands for a reporting callback listed before
    assert (
        trainer.callback_handler.callbacks[0] is callback
    )  # moved first, so the others see its scalars
    trainer.train()

    assert recompprof.current() is None and callback.session is None
    compiles = [(e, gs) for e, gs in probe.seen if isinstance(e, Compile)]
    assert compiles and all(e.step == gs for e, gs in compiles)

    events = list(read_file(next((tmp_path / "run").glob("rank00000-*.jsonl"))))
    assert next(e for e in events if isinstance(e, SessionStart)).warmup_steps == 3
    forward = [e for e in events if isinstance(e, Compile) and not e.backward]
    assert [(e.step, e.is_recompile, e.steady_state) for e in forward] == [
        (0, False, False),
        (1, True, False),
    ]
    assert {r.category for r in forward[1].reasons} == {"size"}
    end = next(e for e in events if isinstance(e, SessionEnd))
    assert end.step == 4 and end.totals["recompiles"] == 1

    history = trainer.state.log_history
    assert [h["step"] for h in history] == [
        1,
        2,
        2,
        3,
        4,
        4,
        4,
    ]  # 4 training logs, 2 evaluations, the summary
    assert all(set(SCALARS) <= set(h) for h in history)
    assert len(probe.logged) == len(history) and all(set(SCALARS) <= keys for keys in probe.logged)
    assert [h["recompprof/recompiles"] for h in history] == [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert "train_runtime" in history[-1]
    assert history[-1]["recompprof/compile_seconds"] == pytest.approx(
        end.totals["compile_seconds"], rel=1e-6
    )
    assert {h["recompprof/steady_state_recompiles"] for h in history} == {0.0}

    summary = [m for m in trainer_log if m.startswith("recompprof (rank 0)")]
    assert len(summary) == 1 and "1 recompiles" in summary[0] and "recompprof report" in summary[0]


def test_fail_on_steady_state_recompiles_stops_train(tmp_path: Path) -> None:
    """With automatic dynamic shapes off (the limit raised), a sequence length that grows with every batch
    recompiles each time: the recompile past the bound of a bounded set's variants is steady state, and train
    raises a clear error at the end of that step naming the frame and step, the session detached with its
    event log closed. The variants before it never raise (a few lengths are a bounded set)."""
    callback = RecompprofCallback(warmup_steps=1, fail_on_steady_state_recompiles=True)
    growing = [
        n for n in range(5, 17) for _ in range(2)
    ]  # a new longest length in every batch of two
    trainer = build(tmp_path, [callback], lengths=growing, max_steps=6)
    with (
        pytest.raises(
            SteadyStateRecompileError,
            match=r"steady-state recompile of .* at step \d+, after the warm-up "
            r"of 1 steps: tensor 'kwargs\['input_ids'\]' size mismatch",
        ),
        torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=32),
    ):
        trainer.train()
    assert recompprof.current() is None
    events = list(read_file(next((tmp_path / "run").glob("rank*.jsonl"))))
    assert isinstance(events[-1], SessionEnd)
    forward = [e for e in events if isinstance(e, Compile) and not e.backward]
    verdicts = [e.steady_state for e in forward]
    assert verdicts[:BOUNDED_VARIANTS] == [False] * BOUNDED_VARIANTS
    assert verdicts[BOUNDED_VARIANTS:] and all(verdicts[BOUNDED_VARIANTS:])
    # stopped at the end of the step of the first steady-state recompile, not later
    assert trainer.state.global_step == (forward[BOUNDED_VARIANTS].step or 0) + 1


def test_exception_out_of_train_detaches(tmp_path: Path) -> None:
    """transformers has no exception hook: a KeyboardInterrupt raised out of train still detaches the
    session (the callback wraps the Trainer's train when the Trainer is built with it)."""
    callback = RecompprofCallback()
    trainer = build(tmp_path, [callback, Interrupt()], compile=False)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert recompprof.current() is None and callback.session is None
    events = list(read_file(next((tmp_path / "run").glob("rank*.jsonl"))))
    assert isinstance(events[-1], SessionEnd) and events[-1].step == 2
