"""Code whose compiled frames are not the functions the user wrote, under ``recompprof.attach()``.

- ``optimizer``: a compiled ``AdamW.step`` (torch wraps every optimizer's ``step`` in a
  ``def wrapper(*args, **kwargs)`` hook) whose learning rate changes once;
- ``decorated``: two ``nn.Module`` classes whose ``forward`` share one ``functools.wraps`` decorator
  written ``def wrapper(*args, **kwargs)``, so one code object serves both classes, and a class whose
  ``forward`` its base class wraps when the class is defined (no decorator in its source);
- ``llama``: a tiny Hugging Face Llama (random weights, no hub): transformers' decorators on ``forward``.

Settings come from ``RECOMPPROF_*`` variables, so one run is also recorded by ``TORCH_TRACE``::

    RECOMPPROF_RUN_DIR=run TORCH_TRACE=trace python tests/workloads/named_frames.py optimizer decorated llama
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from typing import Any

import torch

import recompprof


def logged(func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    @logged
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).relu()


class Decoder(Encoder):
    @logged
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).sigmoid()


class Hooked(torch.nn.Module):
    """Wraps each subclass's ``forward`` when the subclass is defined (as transformers' checkpointing layers do)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        forward = cls.forward

        @functools.wraps(forward)
        def forward_with_hook(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            return forward(self, *args, **kwargs)

        cls.forward = forward_with_hook  # type: ignore[method-assign]


class Block(Hooked):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).tanh()


def optimizer(backend: str) -> None:
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    step = torch.compile(opt.step, backend=backend)
    for lr in (0.01, 0.01, 0.02):
        model(torch.randn(2, 4)).sum().backward()
        for group in opt.param_groups:
            group["lr"] = lr
        step()
        opt.zero_grad()


def decorated(backend: str) -> None:
    encoder, decoder = (
        torch.compile(Encoder(), backend=backend),
        torch.compile(Decoder(), backend=backend),
    )
    block = torch.compile(Block(), backend=backend)
    for rows in (2, 3):
        encoder(torch.randn(rows, 4))
        decoder(torch.randn(rows, 4))
        block(torch.randn(rows, 4))


def llama(backend: str) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=96,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )
    )
    model.compile(backend=backend)
    for length in (3, 5):
        model(input_ids=torch.randint(3, 96, (2, length))).logits.sum().backward()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("parts", nargs="+", choices=["optimizer", "decorated", "llama"])
    parser.add_argument("--backend", default="eager")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    with recompprof.attach():
        for part in args.parts:
            {"optimizer": optimizer, "decorated": decorated, "llama": llama}[part](args.backend)
    print("WORKLOAD DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
