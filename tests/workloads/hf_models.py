"""Real Hugging Face ``transformers`` jobs under ``recompprof.attach()``: tiny models built from configs.

No hub access: every model is built from a config with random weights (1-2 layers, hidden 32,
vocabulary 96). Each workload compiles the model in place (``model.compile(backend=...)``, so
``generate()`` goes through the compiled ``__call__`` too) and runs the phases a real job has:

- ``llama`` / ``gpt2``: training steps with dynamic padding (each batch padded to its longest
  sequence, so lengths vary), an eval pass under ``model.eval()`` + ``torch.no_grad()``, then
  ``generate()`` of a few new tokens. GPT-2's loss path has graph breaks (some that Dynamo cannot
  resume from); Llama compiles in one graph.
- ``distill``: a teacher (``LlamaForCausalLM``) and a student (``MistralForCausalLM``), two classes
  whose ``forward`` is the *same* code object (transformers' ``can_return_tuple`` wrapper), so they
  share one Dynamo cache and one recompile limit; the limit is lowered so the pair runs into it.
- ``llama_inductor``: a short Llama eval under Inductor, where compile phases matter.

Settings come from ``RECOMPPROF_*`` variables (the event log goes to ``RECOMPPROF_RUN_DIR``), so the
same run can also be recorded by ``TORCH_LOGS`` and ``TORCH_TRACE``::

    RECOMPPROF_RUN_DIR=run TORCH_TRACE=trace TORCH_LOGS=recompiles,graph_breaks \\
        python tests/workloads/hf_models.py llama
"""

from __future__ import annotations

import argparse
import sys
import warnings

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)
from transformers.utils import logging as hf_logging

import recompprof

VOCAB = 96
PAD = 0
# Longest sequence of each training batch: the batch is padded to it, so the shape varies per batch.
TRAIN_LENGTHS = ((3, 5), (7, 4), (6, 2))


def tiny_llama(layers: int = 1) -> LlamaForCausalLM:
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=PAD,
            bos_token_id=1,
            eos_token_id=2,
        )
    )


def tiny_mistral() -> MistralForCausalLM:
    return MistralForCausalLM(
        MistralConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=PAD,
            bos_token_id=1,
            eos_token_id=2,
            sliding_window=None,
        )
    )


def tiny_gpt2() -> GPT2LMHeadModel:
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=1,
            n_head=4,
            n_positions=64,
            pad_token_id=PAD,
            bos_token_id=1,
            eos_token_id=2,
        )
    )


def padded_batch(lengths: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Sequences of the given lengths, right-padded to the longest (dynamic padding, as a collator does)."""
    longest = max(lengths)
    ids = torch.full((len(lengths), longest), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(3, VOCAB, (n,))
        mask[row, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def train(model: torch.nn.Module) -> None:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for lengths in TRAIN_LENGTHS:
        loss = model(**padded_batch(lengths)).loss
        loss.backward()
        opt.step()
        opt.zero_grad()


def evaluate(model: torch.nn.Module) -> None:
    model.eval()
    with torch.no_grad():
        batch = padded_batch((5, 3))
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])


def generate(model: torch.nn.Module) -> None:
    model.eval()
    prompt = torch.randint(3, VOCAB, (1, 4))
    with torch.no_grad():
        model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=3,
            do_sample=False,
            pad_token_id=PAD,
        )


def distill(backend: str) -> None:
    """Teacher under no_grad, student trained on the teacher's logits; both compiled in place."""
    torch._dynamo.config.recompile_limit = 3
    teacher, student = tiny_llama(layers=2), tiny_mistral()
    teacher.eval()
    teacher.compile(backend=backend)
    student.compile(backend=backend)
    opt = torch.optim.AdamW(student.parameters(), lr=1e-3)
    with recompprof.attach():
        for lengths in TRAIN_LENGTHS:
            batch = padded_batch(lengths)
            with torch.no_grad():
                target = teacher(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
                ).logits
            logits = student(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).logits
            loss = torch.nn.functional.kl_div(
                logits.log_softmax(-1), target.softmax(-1), reduction="batchmean"
            )
            loss.backward()
            opt.step()
            opt.zero_grad()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=["llama", "gpt2", "distill", "llama_inductor"])
    parser.add_argument("--backend", default="aot_eager")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    if args.workload == "distill":
        distill(args.backend)
    elif args.workload == "llama_inductor":
        model = tiny_llama()
        model.compile(backend="inductor")
        with recompprof.attach():
            evaluate(model)
            model.eval()
            with torch.no_grad():
                batch = padded_batch((4, 7))
                model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    else:
        model = tiny_llama() if args.workload == "llama" else tiny_gpt2()
        model.compile(backend=args.backend)
        with recompprof.attach():
            train(model)
            evaluate(model)
            generate(model)
    print("WORKLOAD DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
