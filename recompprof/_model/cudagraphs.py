"""Why CUDA graphs were skipped: torch's "skipping cudagraphs due to …" text in a closed vocabulary.

With ``mode="reduce-overhead"`` (or the ``cudagraphs`` backend) torch wraps a compiled graph in CUDA
graphs unless something rules it out; it then runs the graph without them and logs one text, which
the compile's record carries when the skip happens during a compile (``recompprof._torch.records``
reads it). The text is built in layers, so a prefix can repeat ("skipping cudagraphs due to
skipping cudagraphs due to cpu device (arg0_1). Found from : <user stack>"), a list of reasons can
appear in Python repr, and a user stack can follow. Pure string work: torch's wording is not an API,
so unknown text becomes ``other``; a failure is a bug of ours and goes through the internal-error
policy (counted, logged once, re-raised in strict mode), the text then staying ``other``.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from recompprof._internal import contain

__all__ = [
    "CUDAGRAPH_SKIPS",
    "SKIP_HINTS",
    "CudagraphSkip",
    "classify_skip",
]

SkipCategory = Literal[
    "cpu_device",
    "multiple_devices",
    "non_cuda_device",
    "mutated_inputs",
    "storage_mutation",
    "non_tensor_inputs",
    "dynamic_shapes",
    "incompatible_ops",
    "control_flow",
    "sparse_tensors",
    "uncached_allocator",
    "rerecord_limit",
    "disabled_by_config",
    "other",
]
CUDAGRAPH_SKIPS: tuple[str, ...] = SkipCategory.__args__  # type: ignore[attr-defined]

SKIP_HINTS: dict[str, str] = {
    "cpu_device": "Move every input, buffer and constant of the compiled region to the GPU (a CPU scalar tensor is enough to skip); or keep the CPU work outside it.",
    "multiple_devices": "Keep the compiled region on one CUDA device: move inputs to it before the call.",
    "non_cuda_device": "CUDA graphs need CUDA tensors: drop mode='reduce-overhead' for this device, or move the region to CUDA.",
    "mutated_inputs": "Stop mutating inputs in place inside the compiled region (return the new value instead), or mutate only parameters/buffers.",
    "storage_mutation": "Avoid Tensor.set_() on an input inside the compiled region; assign a new tensor outside it.",
    "non_tensor_inputs": "Pass only tensors and ints into the compiled graph; hoist other Python objects out of it.",
    "dynamic_shapes": "Pad or bucket input sizes to a few fixed shapes, or set torch._inductor.config.triton.cudagraph_skip_dynamic_graphs=False.",
    "incompatible_ops": "Move the op torch names (CPU sync, data-dependent output, boolean-mask indexing) out of the region, or enable graph partitioning (torch._inductor.config.graph_partition=True).",
    "control_flow": "torch.cond/while_loop regions are not graphed: hoist the branch out of the compiled region or enable graph partitioning.",
    "sparse_tensors": "Densify sparse tensors before the compiled region, or compile it without CUDA graphs.",
    "uncached_allocator": "Re-enable the CUDA caching allocator (unset PYTORCH_NO_CUDA_MEMORY_CACHING, caching_allocator_enable(True)).",
    "rerecord_limit": "The graph was re-recorded too often (inputs' addresses keep changing): keep static inputs alive and in place, or raise torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit.",
    "disabled_by_config": "CUDA graphs were turned off on purpose (bisector, override_cudagraphs annotation, testing flag, cpp-wrapper with graph partition): remove that setting if graphs are wanted.",
    "other": "Inspect torch's text; set TORCH_LOGS=cudagraphs to see every skip and re-record.",
}

# Checked in order against the text with prefixes and stack traces removed; first match wins.
# The re-record limit goes first: its text ends with the reason that caused the re-records.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (category, re.compile(pattern, re.I))
    for category, pattern in (
        ("rerecord_limit", r"exceeding max re-?recording limit"),
        ("uncached_allocator", r"caching allocator|allocator is uncached"),
        ("disabled_by_config", r"bisector|override_cudagraphs|force_disable_cudagraph|cpp-wrapper"),
        ("storage_mutation", r"input storage mutation"),
        ("mutated_inputs", r"mutated inputs|mutation on inputs"),
        ("cpu_device", r"\bcpu device\b"),
        ("multiple_devices", r"multiple devices"),
        ("dynamic_shapes", r"symbolic shape|dynamic shape|cudagraph_skip_dynamic_graphs"),
        ("control_flow", r"control flow operator"),
        ("sparse_tensors", r"sparsity|sparse"),
        ("incompatible_ops", r"incompatible op|not compatible with cuda graphs"),
        ("non_tensor_inputs", r"non-tensor inputs"),
    )
)
_PREFIX = re.compile(
    r"^\s*(?:(?:skipping|disabling) cudagraphs? (?:for backward )?due to\s*)+", re.I
)
_STACK = re.compile(r"\.?\s*Found from\b", re.I)
_DEVICES = re.compile(r"device\(type='(\w{1,30})'")
_MAX_INPUT = 64 * 1024


class CudagraphSkip(NamedTuple):
    category: str
    text: str  # torch's text, bounded (the stack trace included)


def classify_skip(text: object) -> str:
    """The skip category (one of :data:`CUDAGRAPH_SKIPS`) of torch's skip text."""
    with contain(
        "cudagraphs.classify",
        "a CUDA-graph skip text could not be classified; it is kept as 'other'",
    ):
        head = _STACK.split(_PREFIX.sub("", str(text)[:_MAX_INPUT]), maxsplit=1)[0]
        for category, pattern in _RULES:
            if pattern.search(head):
                return _devices_category(head) if category == "multiple_devices" else category
    return "other"  # no rule matched, or (a bug of ours, counted) classifying failed


def _devices_category(head: str) -> str:
    # "multiple devices: device(type='xpu', index=0)" lists one device when it is simply not CUDA.
    found = _DEVICES.findall(head)
    return "non_cuda_device" if len(found) == 1 and found[0] != "cuda" else "multiple_devices"
