"""Resolve a guard's subject (``L['self'].training``, ``G['cfg']['mode']``) to what the live object is.

A ``___check_obj_id`` guard says only that an object's identity changed; what the object *is* decides
what the user should change (a flag is a constant, a function is an identity, a module's attribute is
an attribute, an enum member a constant; an attribute is a module attribute only on an nn.Module,
so the object holding it is resolved too). During the compile that the failure caused, torch's ``_compile`` frame holds the new
call's locals and globals, so the subject can be looked up there. Only plain access chains are
followed (names, ``.attr``, ``['key']``, ``[0]``); nothing is called and no property runs, so the lookup
has no side effects on the user's objects.
"""

from __future__ import annotations

import collections
import enum
import re
import weakref
from typing import Any

import torch

from recompprof._model.subjects import DICT_KIND, ENUM_KIND, MODULE_KIND, TENSOR_KIND

_ROOT = re.compile(r"""^([LG])\[\s*(['"])([^'"\]\n]{1,200})\2\s*\]""")
_STEP = re.compile(
    r"""^(?:\.([A-Za-z_]\w{0,100})|\[\s*(['"])([^'"\]\n]{0,200})\2\s*\]|\[\s*(-?\d{1,9})\s*\])"""
)
_MISSING = object()


def type_name(subject: str, f_locals: dict[str, Any], f_globals: dict[str, Any]) -> str | None:
    """The kind of the object ``subject`` names in these locals/globals, or None if it cannot be found safely.

    The kind is its type's name, with ``":enum"`` appended for an ``enum.Enum`` member and ``":module"``
    for a ``torch.nn.Module`` (isinstance decides, not the class's name): ``"bool"``, ``"Reduction:enum"``,
    ``"Linear:module"``, ``"EncoderDecoderCache"``.
    """
    value, _ = _lookup(subject, f_locals, f_globals)
    return None if value is _MISSING else kind(value)


class ModuleInstances:
    """The ``nn.Module`` instances whose own constants recompiled each frame, held weakly.

    :meth:`of` names the instance holding a guard's subject (``L['self']`` for ``L['self'].layer_idx``):
    the instance whose constant the guard failed on (docs/steady-state.md, per-instance constants). A set
    of instances is bounded only while it stays: once an instance counted on a frame is gone (a module
    rebuilt every step), the frame's later instances are unknown (None), so they count toward the frame's
    bound. A weak reference also keeps a dead instance's reused ``id`` from passing for it. Bounded:
    instances per frame, and frames (least recently asked dropped); asked only for a recompile's
    explaining reason.
    """

    def __init__(self, max_frames: int = 256, max_instances: int = 4096) -> None:
        self._frames: collections.OrderedDict[object, dict[int, weakref.ref[Any]]] = (
            collections.OrderedDict()
        )
        self._max_frames, self._max_instances = max_frames, max_instances

    def of(
        self, frame: object, subject: str, f_locals: dict[str, Any], f_globals: dict[str, Any]
    ) -> int | None:
        """The identity of the module holding ``subject`` on ``frame``, or None (unknown)."""
        _, holder = _lookup(subject, f_locals, f_globals)
        if not isinstance(holder, torch.nn.Module):
            return None
        held = self._frames.pop(frame, None) or {}
        self._frames[frame] = held
        if len(self._frames) > self._max_frames:
            self._frames.popitem(last=False)
        if any(ref() is None for ref in held.values()):
            return None
        if id(holder) not in held:
            if len(held) >= self._max_instances:
                return None
            held[id(holder)] = weakref.ref(holder)
        return id(holder)


def _lookup(subject: str, f_locals: dict[str, Any], f_globals: dict[str, Any]) -> tuple[Any, Any]:
    """The object ``subject`` names and the one its last step was read from (``_MISSING`` where not found)."""
    match = _ROOT.match(subject)
    if match is None:
        return _MISSING, _MISSING
    scope = f_locals if match.group(1) == "L" else f_globals
    value, holder = scope.get(match.group(3), _MISSING), _MISSING
    rest = subject[match.end() :]
    while rest and value is not _MISSING:
        step = _STEP.match(rest)
        if step is None:
            return _MISSING, _MISSING
        value, holder = _step(value, step), value
        rest = rest[step.end() :]
    return value, holder


def kind(value: Any) -> str:
    """``value``'s kind as ``recompprof._model.subjects`` reads it (see :func:`type_name`)."""
    name = type(value).__name__
    if isinstance(value, enum.Enum):
        return f"{name}:{ENUM_KIND}"
    if isinstance(value, torch.nn.Module):
        return f"{name}:{MODULE_KIND}"
    if isinstance(value, torch.Tensor) and name != "Tensor":
        return f"{name}:{TENSOR_KIND}"
    if isinstance(value, dict) and name != "dict":
        return f"{name}:{DICT_KIND}"
    return name


def _step(value: Any, step: re.Match[str]) -> Any:
    attr, key, index = step.group(1), step.group(3), step.group(4)
    if attr is not None:
        return _attribute(value, attr)
    container_key: Any = key if key is not None else int(index)
    if isinstance(value, torch.nn.Module):  # layers[0]: a ModuleList's or Sequential's child
        children = getattr(value, "__dict__", {}).get("_modules")
        return (
            children.get(str(container_key), _MISSING) if isinstance(children, dict) else _MISSING
        )
    if isinstance(value, (dict, list, tuple)):
        try:
            return value[container_key]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return _MISSING


def _attribute(value: Any, name: str) -> Any:
    """``value.name`` from instance and class dictionaries only: no descriptors, properties or __getattr__ run."""
    if name == "__dict__":
        return getattr(value, "__dict__", _MISSING)
    instance_dict = getattr(value, "__dict__", None)
    if isinstance(instance_dict, dict) and name in instance_dict:
        return instance_dict[name]
    if isinstance(value, torch.nn.Module) and isinstance(instance_dict, dict):
        # A submodule, parameter or buffer: the subject reads it as ``.q_proj`` (subjects.readable).
        for held in ("_modules", "_parameters", "_buffers"):
            found = instance_dict.get(held)
            if isinstance(found, dict) and name in found:
                return found[name]
    for klass in type(value).__mro__:
        if name in vars(klass):
            found = vars(klass)[name]
            return found if callable(found) or not hasattr(found, "__get__") else _MISSING
    return _MISSING
