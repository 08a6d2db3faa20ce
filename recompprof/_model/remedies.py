"""Torch's own remedies for a recompile cause: which release has each, and the hint that names it.

A category's fix hint (``reasons.FIX_HINTS``) says what to change in the user's code. Where torch
itself offers a switch for the cause (mark a dim dynamic, stop specialising an int module attribute,
serve new variants eagerly), the hint also names that switch, but only for a release that has it:
the report knows the torch version of the run it reads, and a remedy that version lacks is not
shown. Each remedy here is proven by a test in tests/test_hint_proofs.py that applies it to a
minimal repro of its category and shows the recompile gone (or bounded, as the text claims); the
compat matrix runs those tests on every release. docs/categories.md lists the remedies and proofs.

A remedy torch offers but that could not be proven here is left out, and docs/categories.md says
why: ``torch._dynamo.config.enable_compiler_collectives`` fails on CPU process groups (gloo) in
torch 2.13 and needs two GPUs to show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from recompprof._model.fix_hints import FIX_HINTS

__all__ = ["PGO", "REMEDIES", "Remedy", "fix_hints", "has_pgo", "release"]


@dataclass(frozen=True)
class Remedy:
    """Torch's ``text`` remedy for the ``categories``, in every release from ``since`` on."""

    name: str
    since: tuple[int, int]
    categories: frozenset[str]
    text: str


REMEDIES: tuple[Remedy, ...] = (
    Remedy(
        "mark_unbacked",
        (2, 5),
        frozenset({"size"}),
        "for a dim that changes from 0 or 1 (torch always specialises those): "
        "torch._dynamo.decorators.mark_unbacked(x, dim) before the call",
    ),
    # From 2.8: torch 2.7 keeps constant only the int attributes of torch.nn's own modules (and of
    # modules compiled without inlining); one of a module the user wrote is an int like any other, made
    # dynamic at its first change whether the switch is on or off, so its proof on 2.7.1 recompiles
    # once either way (5 values: 1 → 1). 2.8 keeps it constant unless the switch is on (4 → 1).
    Remedy(
        "allow_unspec_int_on_nn_module",
        (2, 8),
        frozenset({"module_attribute"}),
        "for an int attribute of an nn.Module (a step or layer counter): "
        "torch._dynamo.config.allow_unspec_int_on_nn_module = True lets torch make it dynamic",
    ),
    Remedy(
        "eager_on_recompile",
        (2, 6),
        frozenset({"python_constant"}),
        "in an inference service that must not stall on a new variant: "
        'torch.compiler.set_stance("eager_on_recompile") runs new variants eagerly instead of '
        "recompiling",
    ),
)

# Profile-guided automatic dynamic: torch keeps which dims and scalars it made dynamic under the job
# id, and a restart of the job starts with them dynamic instead of warming up again. Torch 2.6 has it
# off unless TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO=1, so the job id alone changes nothing there (its
# proof on 2.6.0: 1, 1 with a job id); the proof passes on 2.9.1 on, and 2.7 - 2.8 were not run.
PGO = Remedy(
    "pgo",
    (2, 9),
    frozenset(),
    "set TORCH_COMPILE_JOB_ID to the same value on every restart of the job (and keep torch's cache "
    "directory, TORCHINDUCTOR_CACHE_DIR, across restarts): torch's profile-guided automatic dynamic "
    "then starts those dims and scalars dynamic instead of recompiling for them again",
)


def release(version: str | None) -> tuple[int, int] | None:
    """``(2, 13)`` for ``"2.13.0+cpu"``; None when the run did not say which torch it ran."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _shown(remedy: Remedy, torch_versions: tuple[str, ...]) -> bool:
    """Shown only where every session's torch is known to have it: an unknown release shows none."""
    have = [release(version) for version in torch_versions]
    return bool(have) and all(r is not None and r >= remedy.since for r in have)


def has_pgo(*torch_versions: str) -> bool:
    return _shown(PGO, torch_versions)


def fix_hints(*torch_versions: str) -> dict[str, str]:
    """Every category's fix hint for a run on these torch releases, with the remedies all of them have."""
    hints = dict(FIX_HINTS)
    for remedy in REMEDIES:
        if _shown(remedy, torch_versions):
            for category in remedy.categories:
                hints[category] += f" Torch's remedy {remedy.text}."
    return hints
