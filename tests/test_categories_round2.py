"""Verdicts, second round: each category decided by what the guard checks and what the object
is, on real torch.compile runs: a shared non-tensor attribute replaced on one side, a keyword argument
that came or went through ``**kwargs``, grad mode and autocast changed at once, a dict's value read
through ``dict.__getitem__`` under a symbolic size, torch's submodule spellings, and the compiled
variants torch holds when entries differ only by an ``is`` guard."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from scenarios import SCENARIOS
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import recompprof
from recompprof import FIX_HINTS
from recompprof._model.events import Compile, Reason
from recompprof._model.reasons import parse_guard_failure
from recompprof._torch.versions import torch_info

pytestmark = pytest.mark.torch_compat
INFO = torch_info()


def _as_newer_torch_writes(text: str) -> str:
    """torch's text with its sources as newer releases print them (``a``, ``self.q``), older ones print
    ``L['a']``, ``L['self'].q``: the test reads what the guard says, not which spelling."""
    return text.replace("L['", "").replace("']", "")


def recompile_reasons(tmp_path: Path, run: Callable[[], None]) -> list[Reason]:
    """The reasons of every recompile ``run`` causes, as a live session files them."""
    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path) as session:
        run()
    return [
        r
        for e in session.recent_events()
        if isinstance(e, Compile) and e.is_recompile
        for r in e.reasons
    ]


def torch_texts(code: Any) -> list[str]:
    """The guard-failure strings torch itself recorded for ``code`` (what a TORCH_TRACE holds)."""
    from torch._dynamo.utils import guard_failures

    return [str(t) for t in guard_failures.get(code, [])]


class Leaf(torch.nn.Module):
    def __init__(self, active: list[str]) -> None:
        super().__init__()
        self.active = active

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (2 if self.active[0] == "a" else 3)


class Pair(torch.nn.Module):
    """Two layers holding one list, as PEFT's LoRA layers hold one ``_active_adapter``."""

    def __init__(self) -> None:
        super().__init__()
        shared = ["a"]
        self.q_proj, self.v_proj = Leaf(shared), Leaf(shared)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q_proj(x) + self.v_proj(x)


def test_shared_module_attribute_replaced_on_one_side_is_a_module_attribute(
    tmp_path: Path,
) -> None:
    """``q_proj.active is v_proj.active`` failing on two modules' lists (torch's DUPLICATE_INPUT guard on
    a non-tensor object) is a module attribute, with the module-attribute fix, not tensor aliasing; the
    subject reads as the user writes it (``L['self'].q_proj.active``, not ``_modules['q_proj']``); from
    the text alone (ingest) nothing says whether the objects are tensors, so it is ``other``."""
    model = Pair()
    compiled = torch.compile(model, backend="eager")

    def run() -> None:
        compiled(torch.ones(2))
        model.v_proj.active = ["a"]  # set_adapter gives one layer a new object
        compiled(torch.ones(2))

    [reason] = recompile_reasons(tmp_path, run)
    assert (reason.category, reason.subject) == ("module_attribute", "L['self'].q_proj.active")
    assert _as_newer_torch_writes(reason.text).startswith(
        "self.q_proj.active is self.v_proj.active"
    ), reason.text
    assert "tensor" not in FIX_HINTS[reason.category]
    [text] = torch_texts(Pair.forward.__code__)
    assert [r.category for r in parse_guard_failure(text)] == ["other"]


def test_shared_tensor_replaced_on_one_side_stays_aliasing(tmp_path: Path) -> None:
    """The same ``a is c`` guard on tensors is aliasing live; from the text alone torch writes it alike for
    tensors and other objects, so it is ``other`` (unknown), not a guess."""

    def add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a + b + c

    compiled = torch.compile(add, backend="eager")
    t, u = torch.ones(2), torch.ones(2)
    [reason] = recompile_reasons(tmp_path, lambda: (compiled(t, u, t), compiled(t, u, u)))
    assert (reason.category, _as_newer_torch_writes(reason.text.split("  #")[0])) == (
        "aliasing",
        "a is c",
    )
    assert [r.category for r in parse_guard_failure(torch_texts(add.__code__)[0])] == ["other"]


def test_variants_count_the_cache_entries_torch_holds(tmp_path: Path) -> None:
    """Two entries whose guards differ only by the ``is`` guard (``c is a`` then ``c is b``: the text
    torch fingerprints is the same) are two compiled variants: the report counts what torch holds."""

    def add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a + b + c

    torch._dynamo.reset()
    compiled = torch.compile(add, backend="eager")
    t, u = torch.ones(2), torch.ones(2)
    with recompprof.attach(run_dir=tmp_path) as session:
        compiled(t, u, t)
        compiled(t, u, u)
    held = len(_debug_get_cache_entry_list(add.__code__))
    compiles = [e for e in session.recent_events() if isinstance(e, Compile)]
    # Torch 2.13 fingerprints both entries alike (one guard set: the undercount under test); 2.15
    # prints the ``is`` guard among the entry's guards, so there the fingerprints differ too.
    assert held == 2 and len(compiles) == 2
    [frame] = [f for f in recompprof.report(session).frames.values() if f.name == "add"]
    assert frame.variants_needed == held


def passes_through(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator as transformers 5 puts on every forward: all arguments through ``*args, **kwargs``."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapped


@passes_through
def forward(sample: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    return sample * 2 if mask is None else sample * mask


def test_keyword_argument_that_came_or_went_is_dict_keys(tmp_path: Path) -> None:
    """``len(kwargs) == 1`` failing (a keyword argument left out on the next call) is about which keys a
    dict holds: ``dict_keys`` with the keyword-argument fix, live and from the text alone; a positional
    argument that came through ``*args`` stays a container length."""
    compiled = torch.compile(forward, backend="eager")

    def run() -> None:
        compiled(torch.ones(2), mask=torch.ones(2))
        compiled(torch.ones(2))

    [reason] = recompile_reasons(tmp_path, run)
    assert (reason.category, reason.subject) == ("dict_keys", "L['kwargs']")
    assert "keyword argument" in FIX_HINTS["dict_keys"]
    texts = torch_texts(forward.__code__)  # the wrapper's code: the frame torch compiled
    assert {r.category for t in texts for r in parse_guard_failure(t)} == {"dict_keys"}
    assert [r.category for r in parse_guard_failure("0/0: len(args) == 1")] == ["container_length"]


def test_grad_mode_and_autocast_changed_at_once_are_both_filed(tmp_path: Path) -> None:
    """``GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled`` is two changes, each with its own fix:
    one reason filed under ``grad_mode``, one under ``autocast``."""

    def matmul(x: torch.Tensor) -> torch.Tensor:
        return x @ x

    compiled = torch.compile(matmul, backend="eager")

    def run() -> None:
        compiled(torch.ones(2, 2))
        with torch.no_grad(), torch.autocast("cpu"):
            compiled(torch.ones(2, 2))

    reasons = recompile_reasons(tmp_path, run)
    autocast = SCENARIOS[
        "autocast"
    ]  # its subject as each release writes it (no device on 2.7 - 2.10)
    older = autocast.on(INFO.major_minor)
    both = [("grad_mode", "grad_mode"), ("autocast", (older and older.subject) or autocast.subject)]
    if not INFO.has("autocast_in_global_state"):
        both = both[:1]  # torch names the grad mode alone: the autocast change is not seen
    assert [(r.category, r.subject) for r in reasons] == both


def test_symbolic_size_of_a_dicts_value_is_a_shape_guard(tmp_path: Path) -> None:
    """A ``ModelOutput`` passed in (T5's ``encoder_outputs``) whose first value's length was made dynamic
    and is 1 now fails ``2 <= dict.__getitem__(x, list(dict.keys(x))[0]).size()[1]``: a symbolic-shape
    guard on that value (``x.values()[0].size()[1]``), not a dict's keys."""
    transformers = pytest.importorskip("transformers")
    output = transformers.modeling_outputs.BaseModelOutput

    def decode(ids: torch.Tensor, encoder_outputs: Any) -> torch.Tensor:
        return ids.sum() + encoder_outputs[0].sum(1)  # how T5 reads its encoder's output

    compiled = torch.compile(decode, backend="eager")

    def run() -> None:
        for length in (3, 5, 1):
            compiled(torch.ones(1), output(last_hidden_state=torch.ones(1, length, 4)))

    reasons = recompile_reasons(tmp_path, run)
    shape = [r for r in reasons if "<=" in r.text]
    assert shape and {(r.category, r.subject) for r in shape} == {
        ("symbolic_shape", "L['encoder_outputs'].values()[0].size()[1]")
    }, [(r.category, r.subject, r.text) for r in reasons]


def test_torch_submodule_spellings_read_as_the_user_writes_them() -> None:
    """PEFT's 182-character subjects in torch's ``__dict__['_modules']['x']`` spelling read as attribute
    paths (``layers[0]`` for a numbered child), in the subject and in the shown guard, so the example
    keeps both sides of an ``is`` guard; a parameter keeps torch's spelling (``_parameters`` says it is one)."""
    peft = (
        "0/6: L['self'].__dict__['_modules']['base_model'].__dict__['_modules']['model']"
        ".__dict__['_modules']['layers']._modules['0'].__dict__['_modules']['q_proj']._active_adapter"
        " is L['self'].__dict__['_modules']['base_model'].__dict__['_modules']['model']"
        ".__dict__['_modules']['layers']._modules['0'].__dict__['_modules']['v_proj']._active_adapter"
        "  # if self.disable_adapters:  # peft/tuners/lora/layer.py:700 in forward"
    )
    [reason] = parse_guard_failure(peft)
    assert reason.subject == "L['self'].base_model.model.layers[0].q_proj._active_adapter"
    assert reason.text.startswith(
        "L['self'].base_model.model.layers[0].q_proj._active_adapter is "
        "L['self'].base_model.model.layers[0].v_proj._active_adapter  # if self.disable_adapters:"
    )
    [weight] = parse_guard_failure(
        "0/1: tensor 'L['self']._modules['lin']._parameters['weight']' size mismatch at index 0. "
        "expected 2, actual 3"
    )
    assert weight.subject == "L['self'].lin._parameters['weight']"


def test_peft_adapter_switch_is_a_module_attribute_and_variants_are_what_torch_holds(
    tmp_path: Path,
) -> None:
    """PEFT LoRA on a tiny Llama (random weights, no hub), switched between two adapters: the
    ``q_proj._active_adapter is v_proj._active_adapter`` guard (set_adapter gives each layer a new
    object) is a module attribute of the LoRA layers, its subject the path the user writes, and the
    report's compiled variants are the cache entries torch holds for the frame."""
    pytest.importorskip("peft", reason="PEFT is an optional test dependency (the dev extra)")
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    lora = {"r": 2, "target_modules": ["q_proj", "v_proj"]}
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(**lora))
    model.add_adapter("other", LoraConfig(**lora))
    model.eval()
    ids = torch.randint(3, 64, (1, 5))
    compiled = torch.compile(model, backend="eager")

    def run() -> None:
        with torch.no_grad():
            compiled(input_ids=ids)  # as built: the layers share one active-adapter object
            for adapter in ("other", "default"):
                model.set_adapter(adapter)
                compiled(input_ids=ids)

    torch._dynamo.reset()
    with recompprof.attach(run_dir=tmp_path) as session:
        run()
    reasons = [
        r
        for e in session.recent_events()
        if isinstance(e, Compile) and e.is_recompile
        for r in e.reasons
    ]
    layers = "L['self'].base_model.model.model.layers[0].self_attn"
    shared = [r for r in reasons if " is " in r.text]
    assert shared and {(r.category, r.subject) for r in shared} == {
        ("module_attribute", f"{layers}.q_proj._active_adapter")
    }, [(r.category, r.subject, r.text[:200]) for r in reasons]
    assert "v_proj._active_adapter  #" in shared[0].text[:300]  # both sides fit the example
    [frame] = [f for f in recompprof.report(session).frames.values() if f.compiles > 1]
    held = len(_debug_get_cache_entry_list(type(model).forward.__code__))
    assert frame.variants_needed == held
