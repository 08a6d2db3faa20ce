"""Real jobs whose recompiles recompprof must *judge* right: frame, cause, steady state, fix.

No hub access: every model is built from a tiny config with random weights. Each workload runs the
phases a real job has, under ``recompprof.attach()`` (or a framework's recompprof callback), so the
same run can be recorded by recompprof, ``TORCH_LOGS`` and ``TORCH_TRACE`` at once
(``tests/agreement.py``)::

    RECOMPPROF_RUN_DIR=run TORCH_TRACE=trace TORCH_LOGS=recompiles,graph_breaks \\
        python tests/workloads/verdict_models.py bert

- ``bert``: ``BertForSequenceClassification`` trained with dynamic padding (each batch padded to its
  longest sequence), then evaluated under ``no_grad`` with ``attention_mask=None``, then with a mask.
- ``t5``: ``T5ForConditionalGeneration.generate()`` on a 7-token prompt, then on a 12-token one.
- ``moe``: ``Qwen2MoeForCausalLM`` training steps with dynamic padding and the router's auxiliary loss
  (``output_router_logits``: transformers' output-capturing hooks graph-break, so the stacked decorators
  of the base model's ``forward`` are compiled as frames of their own).
- ``optim``: a compiled ``AdamW.step`` whose float LR a scheduler changes every step.
- ``vit``: ``ViTForImageClassification`` on images of varying size (``interpolate_pos_encoding``).
- ``trainer``: Hugging Face ``Trainer(torch_compile=True)`` with recompprof's callback.
- ``lightning``: a Lightning module wrapping a compiled RoBERTa, with recompprof's callback.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from hf_models import (  # the same tiny vocabulary and dynamic padding as the other HF workloads
    PAD,
    VOCAB,
    padded_batch as token_batch,
)
from verdict_cli import BACKEND, main

import recompprof

# Longest sequence of each training batch (dynamic padding): a new length at the second step, then more.
TRAIN_LENGTHS = ((3, 5), (7, 4), (6, 2), (9, 8))
PROMPTS = (7, 12)  # generate() prompt lengths: the second call prefills a longer prompt
LRS_STEPS = 12  # optimizer steps, each with a new float LR
# ViT input sizes (patch 16): a new size at the second call (torch makes height and width dynamic), then one
# patch per row (16), which the dynamic graph excluded (its flatten guard), then sizes the dynamic graph takes.
IMAGE_SIZES = (32, 48, 16, 64, 80)


def padded_batch(lengths: tuple[int, ...], labels: str = "tokens") -> dict[str, torch.Tensor]:
    """Sequences of the given lengths, right-padded to the longest (as a collator with dynamic padding does), with
    next-token labels ("tokens"), a class per sequence ("classes") or none."""
    batch = token_batch(lengths)
    if labels == "classes":
        batch["labels"] = torch.randint(0, 2, (len(lengths),))
    elif labels == "none":
        del batch["labels"]
    return batch


# -- models ------------------------------------------------------------------------------------------


def tiny_bert() -> Any:
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(
        BertConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            pad_token_id=PAD,
            num_labels=2,
        )
    )


def tiny_roberta() -> Any:
    from transformers import RobertaConfig, RobertaForSequenceClassification

    return RobertaForSequenceClassification(
        RobertaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=72,
            pad_token_id=1,
            num_labels=2,
        )
    )


def tiny_t5() -> Any:
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(
        T5Config(
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=1,
            num_decoder_layers=1,
            num_heads=4,
            pad_token_id=PAD,
            eos_token_id=2,
            decoder_start_token_id=PAD,
        )
    )


def tiny_qwen2_moe() -> Any:
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    return Qwen2MoeForCausalLM(
        Qwen2MoeConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=PAD,
            bos_token_id=1,
            eos_token_id=2,
        )
    )


def tiny_vit() -> Any:
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(
        ViTConfig(
            image_size=32,
            patch_size=16,
            num_channels=3,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            num_labels=3,
        )
    )


# -- workloads ---------------------------------------------------------------------------------------


def bert() -> None:
    """Training steps with dynamic padding, then an evaluation under no_grad: without a mask, then with one."""
    model = tiny_bert()
    model.compile(backend=BACKEND)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with recompprof.attach():
        model.train()
        for lengths in TRAIN_LENGTHS:
            model(**padded_batch(lengths, "classes")).loss.backward()
            opt.step()
            opt.zero_grad()
        model.eval()
        with torch.no_grad():
            batch = padded_batch((6, 4), labels="none")
            model(input_ids=batch["input_ids"], attention_mask=None)
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])


def t5() -> None:
    """Two greedy generate() calls whose prompts differ in length: the second prefill is a new shape."""
    model = tiny_t5()
    model.eval()
    model.compile(backend=BACKEND)
    with recompprof.attach(), torch.no_grad():
        for length in PROMPTS:
            prompt = torch.randint(3, VOCAB, (1, length))
            model.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=False
            )


def moe() -> None:
    """Mixture-of-experts training steps with dynamic padding and the router's load-balancing loss."""
    model = tiny_qwen2_moe()
    model.config.output_router_logits = True
    model.compile(backend=BACKEND)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with recompprof.attach():
        model.train()
        for lengths in TRAIN_LENGTHS:
            model(**padded_batch(lengths)).loss.backward()
            opt.step()
            opt.zero_grad()


def optim() -> None:
    """A compiled AdamW step; a scheduler sets a new float LR after every step (the LR is not a tensor)."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    step = torch.compile(opt.step, backend=BACKEND)
    with recompprof.attach():
        for _ in range(LRS_STEPS):
            model(torch.randn(4, 8)).sum().backward()
            step()
            opt.zero_grad()
            sched.step()


def vit() -> None:
    """Image classification on images of varying size, the position embeddings interpolated to each."""
    model = tiny_vit()
    model.eval()
    model.compile(backend=BACKEND)
    with recompprof.attach(), torch.no_grad():
        for size in IMAGE_SIZES:
            model(pixel_values=torch.randn(1, 3, size, size), interpolate_pos_encoding=True)


def trainer() -> None:
    """Hugging Face Trainer with torch_compile=True and recompprof's callback: BERT, dynamic padding, eval."""
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments

    from recompprof.integrations.transformers import RecompprofCallback

    # Two sequences per batch: steps of length 5, 7, 6, 9 (a new padding length at step 1).
    lengths = [5, 5, 7, 7, 6, 6, 9, 9]

    class Sequences(Dataset):  # type: ignore[type-arg]
        def __init__(self, lengths: list[int]) -> None:
            self.items = [torch.randint(3, VOCAB, (n,)) for n in lengths]

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": self.items[i], "label": i % 2}

    def collate(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = padded_batch(tuple(len(b["input_ids"]) for b in items), labels="none")
        for row, b in enumerate(items):
            batch["input_ids"][row, : len(b["input_ids"])] = b["input_ids"]
        batch["labels"] = torch.tensor([b["label"] for b in items])
        return batch

    args = TrainingArguments(
        output_dir="trainer-out",
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        max_steps=4,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=4,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-3,
        train_sampling_strategy="sequential",
        torch_compile=True,
        torch_compile_backend=BACKEND,
    )
    Trainer(
        model=tiny_bert(),
        args=args,
        train_dataset=Sequences(lengths),
        eval_dataset=Sequences([4, 6]),
        data_collator=collate,
        callbacks=[RecompprofCallback()],
    ).train()


def lightning() -> None:
    """Lightning fit of a compiled RoBERTa classifier: dynamic padding, validation under inference mode."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from recompprof.integrations.lightning import RecompprofCallback

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = tiny_roberta()
            self.model.compile(backend=BACKEND)

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.model(**batch).loss

        def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
            self.model(**batch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    train = [padded_batch(lengths, "classes") for lengths in TRAIN_LENGTHS]
    val = [padded_batch((6, 4), "classes")]
    fit = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[RecompprofCallback()],
        default_root_dir="lightning-out",
    )
    fit.fit(Classifier(), DataLoader(train, batch_size=None), DataLoader(val, batch_size=None))


WORKLOADS = {
    "bert": bert,
    "t5": t5,
    "moe": moe,
    "optim": optim,
    "vit": vit,
    "trainer": trainer,
    "lightning": lightning,
}


if __name__ == "__main__":
    sys.exit(main(WORKLOADS))
