"""The check's model: a tiny Llama built from a config (random weights; the device cannot reach the hub).

transformers' ``LlamaForCausalLM`` where transformers is installed (the device image has it, so it
is not bundled: it and its tokenizers would take a third of the 64 MiB a call may carry). Without it,
``PlainLlama``: the same block in plain torch (RMSNorm, rotary embeddings, grouped-query attention
through ``scaled_dot_product_attention``, a SwiGLU MLP, tied nothing), so the check still runs; the
report names which one ran.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 128
PAD = 0
HIDDEN, FFN, HEADS, KV_HEADS = 64, 128, 4, 2


def tiny_llama(layers: int = 1, kind: str = "auto") -> tuple[nn.Module, str]:
    """``(model, "transformers <version>" | "plain torch")``; ``kind`` is ``auto``, ``hf`` or ``plain``."""
    if kind == "hf" or (kind == "auto" and importlib.util.find_spec("transformers")):
        import transformers
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        config = transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=FFN,
            num_hidden_layers=layers,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            max_position_embeddings=128,
            pad_token_id=PAD,
            bos_token_id=1,
            eos_token_id=2,
            # no key/value cache object among the outputs: CUDA graphs hand back only tensors
            use_cache=False,
        )
        return transformers.LlamaForCausalLM(config), f"transformers {transformers.__version__}"
    return PlainLlama(layers), "plain torch"


def batch(lengths: tuple[int, ...], device: str) -> dict[str, torch.Tensor]:
    """Sequences of these lengths right-padded to the longest (dynamic padding): ids, mask, labels."""
    longest = max(lengths)
    ids = torch.full((len(lengths), longest), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(3, VOCAB, (n,))
        mask[row, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "labels": labels.to(device),
    }


def loss_of(output: Any) -> torch.Tensor:
    return output.loss if hasattr(output, "loss") else output["loss"]


class _RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _rotate(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        head = HIDDEN // HEADS
        self.head = head
        self.norm1, self.norm2 = _RMSNorm(HIDDEN), _RMSNorm(HIDDEN)
        self.q = nn.Linear(HIDDEN, HEADS * head, bias=False)
        self.kv = nn.Linear(HIDDEN, 2 * KV_HEADS * head, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.gate_up = nn.Linear(HIDDEN, 2 * FFN, bias=False)
        self.down = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, HEADS, self.head).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, KV_HEADS, self.head).permute(2, 0, 3, 1, 4)
        q, k = q * cos + _rotate(q) * sin, k * cos + _rotate(k) * sin
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(attn.transpose(1, 2).reshape(b, t, HIDDEN))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class PlainLlama(nn.Module):
    """A Llama-style decoder in plain torch, returning ``{"loss", "logits"}`` like the HF model."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(_Block() for _ in range(layers))
        self.norm = _RMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        head = HIDDEN // HEADS
        self.register_buffer(
            "inv_freq", 1.0 / (10000 ** (torch.arange(0, head, 2).float() / head)), persistent=False
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).float()
        freqs = torch.outer(positions, self.inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos()[None, None], angles.sin()[None, None]
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(
                logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        return out
