"""Steady state: what it means, and every verdict that follows from it (docs/steady-state.md).

A recompile is in **steady state** when its cause will keep costing compile time as the job goes on.
Two kinds of recompile do not, however late they come:

- one torch makes once by its own rules (:func:`torch_rule`): automatic dynamic (the first change of a
  dim or an int/float makes it dynamic), 0/1 specialisation (a dynamic graph never holds a size of 0 or
  1, so the first such size compiles once more for that graph);
- one variant of a bounded set: a flag's states, buckets, per-instance constants, the modes a job
  enters. Once each variant is compiled, nothing recompiles again, unless the set keeps growing.

What a live verdict can know at the moment of a recompile is what came before it, never the rest of the
run: so (:func:`is_steady`) a recompile made by torch's own rule is warm-up; one before ``warmup_steps``
is warm-up; otherwise the cause's variants on the frame are counted, and a recompile is steady state only
once they exceed what a bounded set explains (:data:`BOUNDED_VARIANTS`). An ``nn.Module``'s own constant
(``layer_idx`` under regional compilation) counts its variants per instance where live capture can tell
the instance (``recompprof._model.explaining``): a new instance is a variant of the bounded set of
instances, the same instance's value changing again counts toward the bound. Where nothing names the
instance (``ingest``: a trace has no identity guard on ``self``) a verdict past the bound is unknown
(:func:`verdict`): neither steady nor a variant is claimed. The first recompile of a change
(a first eval, a decode step after a prefill) is a new variant, with steps or without. What the report
knows in hindsight (:func:`settled`): a cause whose recompiles stopped while the run went on settled
after its variants, steady or not.
"""

from __future__ import annotations

import re

from recompprof._model.events import Reason

# Variants of one change on one frame that a bounded set explains. torch's own default recompile_limit:
# the number of variants torch itself caches per code object before it gives up and runs the frame
# eagerly. A set that fits in it (five batch buckets, two flag states, prefill and decode, the instances
# a default limit admits) is what torch is built to serve compiled; a change that compiles more variants of
# one frame than that grows past torch's own budget (a limit raised to let it, or cache entries dropped as
# fast as they are made).
BOUNDED_VARIANTS = 8

# The least time a run must go on after a cause's last recompile to call it settled in hindsight.
SETTLE_SECONDS = 1.0

AUTOMATIC_DYNAMIC = "automatic dynamic"
ZERO_ONE = "0/1 specialisation"

# The text torch writes with its shape guard that keeps a dynamic dim off sizes 0 and 1 ("2 <=
# L['x'].size()[0]") where the guard is its own, not the user's code's: the same guard from a user's
# ``if x.shape[0] >= 2`` has no such text and is not torch's rule.
_ZERO_ONE_TEXT = "0/1 specialization in the framework"
# torch's own remedy, where its reason text names one (never cut from what is shown: torch_remedy).
_TORCH_REMEDY = re.compile(r"(?:try|using)\s+(torch\.[\w.]+(?:\([^)\n]{0,80}\))?(?:\s*=\s*\w+)?)")


def torch_rule(reason: Reason | None, automatic_dynamic: str | None) -> str | None:
    """The rule by which torch made this recompile once, by itself (None: none of torch's own).

    ``automatic_dynamic``: what the compile made dynamic (:func:`recompprof._model.explaining.automatic_dynamic`).
    A shape guard ``2 <= x.size()[N]`` is torch keeping a dynamic dim off 0 and 1: the first size 0 or 1
    compiles one static entry for that graph, and later calls at that size reuse it.
    """
    if automatic_dynamic is not None:
        return AUTOMATIC_DYNAMIC
    if reason is not None and zero_one(reason):
        return ZERO_ONE
    return None


def zero_one(reason: Reason) -> bool:
    """The reason is torch's 0/1 specialisation guard against a dynamic entry, as torch's own text says
    (redacted, or a user's branch on the size: not claimed)."""
    return reason.category == "symbolic_shape" and _ZERO_ONE_TEXT in reason.text


def is_steady(*, past_warmup: bool, rule: str | None, variants: int) -> bool:
    """The live verdict of a forward recompile.

    ``past_warmup``: at or after ``warmup_steps``; ``rule``: :func:`torch_rule`; ``variants``: the variants
    of its change on this frame, this one and the entry compiled before the first change included.
    """
    return past_warmup and rule is None and variants > BOUNDED_VARIANTS


def verdict(
    *, past_warmup: bool, rule: str | None, variants: int, instance_unknown: str | None = None
) -> tuple[bool, str | None]:
    """The verdict of a forward recompile, ``(steady, unknown)``: :func:`is_steady`, unless it rests on
    what cannot be known, then ``(False, what)``.

    ``instance_unknown``: the subject of an ``nn.Module``'s own constant whose variants were counted per
    frame because nothing names its instance (a trace: torch installs no identity guard on ``self``).
    Within the bound it is a variant either way; past it, a new instance (a variant of the bounded set of
    instances) and one instance's value changing again (steady state) read alike, so neither is claimed.
    """
    steady = is_steady(past_warmup=past_warmup, rule=rule, variants=variants)
    if steady and instance_unknown is not None:
        return False, f"instance of {instance_unknown}"
    return steady, None


def settled(first: float, last: float, end: float) -> bool:
    """In hindsight: a cause settled when the run went on after its last recompile at least as long again
    as its variants took to compile (``first`` to ``last``), and :data:`SETTLE_SECONDS` at least, without
    compiling another. recompprof counts no calls (that would be work per call), so the run's time stands
    for them; a cause whose last recompile came at the run's end has not settled."""
    return end - last >= max(last - first, SETTLE_SECONDS)


def torch_remedy(text: str) -> str | None:
    """The remedy torch's own reason text names (``torch._dynamo.decorators.mark_unbacked(tensor, dim)``),
    or None: shown as the hint it is, never cut from the reason."""
    match = _TORCH_REMEDY.search(text)
    return match.group(1) if match else None


def example(text: str, limit: int = 300) -> str:
    """A reason text as a report keeps it: cut at ``limit`` characters, but never cutting torch's own remedy
    (:func:`torch_remedy`), which follows the cut when it lies past it."""
    if len(text) <= limit:
        return text
    remedy = torch_remedy(text[limit:]) or (
        None if (whole := torch_remedy(text)) is None or whole in text[:limit] else whole
    )
    return text[:limit] + (f" ... {remedy}" if remedy else "")
