"""The verdict corpus, second round: real library jobs whose recompiles recompprof must judge right.

No hub access: every model is built from a tiny config with random weights. As in
``verdict_models.py``, each workload runs under ``recompprof.attach()`` with its settings from
``RECOMPPROF_*`` variables, so one run can be recorded by recompprof, ``TORCH_LOGS`` and
``TORCH_TRACE`` at once (``tests/agreement.py``)::

    RECOMPPROF_RUN_DIR=run TORCH_TRACE=trace TORCH_LOGS=recompiles,graph_breaks \\
        python tests/workloads/verdict_models_2.py llama_static

- ``llama_static``: Hugging Face's recipe ``model.forward = torch.compile(model.forward)`` with
  ``generate(cache_implementation="static")`` over batches of 1, 2 and 3 prompts, then a longer
  prompt: prefill and decode are two variants, the batch dim warms up once.
- ``llama_dynamic``: the same model compiled in place, ``generate()`` with the default dynamic cache
  over three prompt lengths (the third compiles nothing: torch made the length dynamic).
- ``peft_lora``: a PEFT LoRA Llama trained a few steps, evaluated with ``disable_adapter()``, then a
  second adapter added and switched to with ``set_adapter()``.
- ``clip``: ``torch.compile(CLIPModel)`` on text and image batches of three sizes.
- ``unet``: a diffusers ``UNet2DConditionModel`` denoising loop with classifier-free guidance (the
  batch doubled), an int timestep per step, then a second and a third resolution (the third compiles
  nothing: torch made the resolution dynamic on its first change).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from hf_models import PAD, VOCAB, tiny_llama  # the tiny Llama of the other HF workloads
from verdict_cli import BACKEND, main

import recompprof


def tokens(batch: int, length: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length))


def _generate(model: Any, batch: int, length: int, **kw: Any) -> None:
    with torch.no_grad():
        model.generate(
            tokens(batch, length),
            attention_mask=torch.ones(batch, length, dtype=torch.long),
            max_new_tokens=3,
            do_sample=False,
            pad_token_id=PAD,
            **kw,
        )


def llama_static() -> None:
    """HF's static-cache recipe: the forward compiled, generate() over batches 1, 2, 3, then a longer prompt."""
    model = tiny_llama(layers=2).eval()
    model.forward = torch.compile(model.forward, backend=BACKEND)
    with recompprof.attach():
        for batch in (1, 2, 3):
            _generate(model, batch, 5, cache_implementation="static")
        _generate(model, 1, 9, cache_implementation="static")


def llama_dynamic() -> None:
    """The model compiled in place; generate() with the default (dynamic) cache on three prompt lengths."""
    model = tiny_llama(layers=2).eval()
    model.compile(backend=BACKEND)
    with recompprof.attach():
        for length in (5, 9, 7):
            _generate(model, 1, length)


def peft_lora() -> None:
    """LoRA training steps, an evaluation without the adapter, then a second adapter switched to."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_llama(layers=2).train(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    )
    compiled = torch.compile(model, backend=BACKEND)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    with recompprof.attach():
        for length in (6, 6, 6):
            ids = tokens(2, length)
            compiled(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
        model.eval()
        with torch.no_grad():
            ids = tokens(2, 6)
            with model.disable_adapter():
                compiled(input_ids=ids)
            model.add_adapter("second", LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
            model.set_adapter("second")
            compiled(input_ids=ids)
            model.set_adapter("default")
            compiled(input_ids=ids)


def clip() -> None:
    """torch.compile(CLIPModel) on text and image batches of three sizes."""
    from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPVisionConfig

    model = CLIPModel(
        CLIPConfig(
            text_config=CLIPTextConfig(
                vocab_size=VOCAB,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                max_position_embeddings=32,
                projection_dim=16,
            ).to_dict(),
            vision_config=CLIPVisionConfig(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                image_size=32,
                patch_size=16,
                projection_dim=16,
            ).to_dict(),
            projection_dim=16,
        )
    ).eval()
    compiled = torch.compile(model, backend=BACKEND)
    with recompprof.attach(), torch.no_grad():
        for batch in (2, 3, 4):
            compiled(input_ids=tokens(batch, 7), pixel_values=torch.randn(batch, 3, 32, 32))


def unet() -> None:
    """A denoising loop with classifier-free guidance and an int timestep, then two more resolutions."""
    from diffusers import UNet2DConditionModel

    model = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=8,
    ).eval()
    compiled = torch.compile(model, backend=BACKEND)
    text = torch.randn(2, 7, 32)  # conditional and unconditional prompt embeddings (CFG)
    with recompprof.attach(), torch.no_grad():
        for size in (8, 16, 12):
            latents = torch.randn(1, 4, size, size)
            for t in (999, 666, 333):
                both = torch.cat([latents] * 2)
                noise = compiled(both, t, encoder_hidden_states=text).sample
                uncond, cond = noise.chunk(2)
                latents = latents - 0.1 * (uncond + 7.5 * (cond - uncond))


WORKLOADS = {
    "llama_static": llama_static,
    "llama_dynamic": llama_dynamic,
    "peft_lora": peft_lora,
    "clip": clip,
    "unet": unet,
}


if __name__ == "__main__":
    sys.exit(main(WORKLOADS))
