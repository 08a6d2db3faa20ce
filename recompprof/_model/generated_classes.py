"""Classes torch generates around the user's: shown by the name of the class the user wrote.

torch's composable distributed APIs swap a module's class for one they generate: FSDP2's ``fully_shard``
makes ``FSDP<Name>``, a subclass of ``(FSDPModule, <Name>)`` defined in ``torch.distributed.fsdp``, and
``replicate`` makes ``DDP<Name>`` (``Replicate<Name>`` where it names its wrapper so). A frame compiled on
such a module is the user's ``<Name>.forward``: the generated class is torch's, one to one with the user's.
"""

from __future__ import annotations

_PREFIXES = ("FSDP", "DDP", "Replicate")
_TORCH_MODULES = "torch.distributed."


def user_class_name(module: str, name: str) -> str | None:
    """The name of the user's class behind the class ``module.name`` torch generated, or None when torch did
    not generate it (any class outside ``torch.distributed``, or not named ``<prefix><Name>``)."""
    if not module.startswith(_TORCH_MODULES):
        return None
    for prefix in _PREFIXES:
        rest = name[len(prefix) :]
        if name.startswith(prefix) and rest[:1].isupper():
            return rest
    return None


def user_class(cls: type) -> type:
    """The class the user wrote behind ``cls`` where torch generated ``cls`` around it (its base of that
    name), else ``cls``."""
    name = user_class_name(getattr(cls, "__module__", "") or "", cls.__name__)
    if name is None:
        return cls
    return next((base for base in cls.__mro__[1:] if base.__name__ == name), cls)
