"""The rules that file one failed guard into the closed category vocabulary, in the order they are tried.

Each rule reads one guard expression (its compile id, stack block and source comment removed) and
returns ``(category, subject)`` when it recognises the expression's shape, else None; the first rule
that recognises it wins, and an expression none recognises is ``other``. Torch's wording is not an
API: a rule matches the shapes torch's releases write (docs/categories.md lists them). To add a
category, add it to ``events.Category`` and ``fix_hints.FIX_HINTS``, write its rule here and put it in
:data:`RULES` before any rule that would claim the same text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from recompprof._model.subjects import (
    ENUM_KIND,
    SOURCE,
    Kinds,
    by_subject,
    identity_category,
    is_dict_kind,
    is_module_kind,
    is_tensor_kind,
    local,
    none_changed,
    owner,
    readable,
    singleton_kind,
    subject_of_check,
)

Found = tuple[str, str] | None
Rule = Callable[[str, Kinds], Found]

__all__ = ["RULES", "classify"]

_TENSOR = re.compile(r"tensor '(.{1,300}?)' ([a-z_ ]{1,30}?) mismatch")
_TENSOR_KINDS = {
    "size": "size",
    "stride": "stride",
    "rank": "ndim",
    "dtype": "dtype",
    "requires_grad": "requires_grad",
    "dispatch key set": "dispatch_keys",
    "device index": "device",
    "device": "device",
}
_KEY_SETS = re.compile(r"DispatchKeySet\(([^)]{0,1000})\)")
# The subject may itself be a call (type(L['m']).__call__.__code__): everything up to the trailing ", <id>)".
# torch 2.10 annotates with the object's repr ("type=<code object f at 0x...>"), later with its type.
# An enum member's repr (2.10-2.12's annotation of one) is "<Reduction.MEAN: 'mean'>": group 6 is its class.
_CHECK = re.compile(
    r"___check_(obj|type)_id\(\s*([^\n]{1,500}?)\s*,\s*(-?\d{1,30})\s*\)"
    r"(?:,\s*type=<(?:class '([^'\n]{1,300})'|([\w.]{1,300}) object\b|([A-Za-z_][\w.]{0,300})\.\w{1,100}: ))?"
)
# "to be a tensor type, ' but found" up to 2.14, "to be <class 'torch.Tensor'>, but found" from 2.15; the name
# itself may hold quotes (kwargs['attention_mask']).
_EXPECTED_TYPE = re.compile(
    r"expected type of '([^\n]{1,300}?)' to be (?:an? [\w. ]{1,100}? type|<class '[^'\n]{1,300}'>)\W+but found "
)
_CLASS_ANNOTATION = re.compile(r"<class '[^'\n]{0,300}'>")
_LEN = re.compile(rf"(?:len|___tuple_iterator_len)\(\s*({SOURCE})\s*\)")
_KEYS = re.compile(
    rf"(?:list\(dict\.keys\(\s*({SOURCE})\s*\)\)|list\(\s*({SOURCE})\.keys\(\)\s*\))"
)
_CONTAINS = re.compile(rf"___dict_contains\([^,\n]{{0,200}},\s*({SOURCE})\)")
_DIM_MARK = re.compile(
    r"_has_dynamo_dim_marking|_dynamo_(?:weak_|strict_)?(?:dynamic|unbacked|static)_indices"
)
_DIM_MARKED = re.compile(rf"\(\s*({SOURCE})\s*,\s*'_dynamo")
_TORCH_STATE = re.compile(r"(?:___check_torch_function_mode_stack|utils_device\.|torch\.)")
_SIZE_CALL = re.compile(r"\.(?:size|stride|storage_offset)\(\)")
_SIZE_SUBJECT = re.compile(rf"{SOURCE}\.(?:size|stride|storage_offset)\(\)(?:\[\d+\])?")
_SYMBOLIC = re.compile(
    r"\b(?:Eq|Ne|Mod|FloorDiv|Max|Min)\(|\bs\d+\b|\bu\d+\b|<=|>=|(?<![=!<>])[<>](?!=)"
)
_COMPARISON = re.compile(rf"^{SOURCE}\s*(?:==|!=|is)")
_VALUE = re.compile(
    rf"^(?:not\s+)?(?:hasattr\(\s*({SOURCE})\s*,|(?:float|int|bool|str|complex)\(\s*({SOURCE})\s*\)\s*[=!]=|({SOURCE})\s*(?:==|!=|is)\s)"
)
# A relation on an unspecialised int (torch made it a symbol): ``(self.layer_idx % 2) == 1``, ``(n // 4) == 2``.
_SCALAR_RELATION = re.compile(
    rf"^\(+\s*({SOURCE})\s*(?:%|//|\*|\+|-)\s*\d+\s*\)+\s*(?:==|!=|<=|>=|<|>)\s"
)
# The same pinned to a value, in any arithmetic torch's printer writes: one source among numbers,
# ``2*self.k == 6``, and a float torch does not specialise,
# ``(1.0 + ((-1)*self.drop_path.drop_prob)) == 0.9272727221250534``.
_RELATION_SOURCE = re.compile(rf"(?<![\w.'\]])(?![su]\d+\b)({SOURCE})")
_NUMBERS = r"(?:[\s\d.()+\-*/%]|(?<=\d)[eE](?=[-+]?\d))*"
_PINNED = re.compile(rf"^{_NUMBERS}\s(?:==|!=)\s{_NUMBERS}$")
_IS_NONE = re.compile(rf"^({SOURCE})\s+is\s+(?:not\s+)?None\s*$")
_SAME_OBJECT = re.compile(rf"^{SOURCE}\s+is\s+(?!None\b|not\b){SOURCE}\s*$")
_NOT = re.compile(rf"^not\s+{SOURCE}$")
_DEALLOC = re.compile(rf"because\s+({SOURCE})\s+got deallocated")
_DUPLICATE = re.compile(r"Duplicate tensors? found:?\s*(.*)")
_QUOTED_SOURCE = re.compile(rf"['\"]({SOURCE})['\"]")
_TENSOR_HELD = re.compile(r"\._(?:parameters|buffers)\[")


def _invalidated(expr: str, kinds: Kinds) -> Found:
    """A cache entry torch invalidated because a guarded object died."""
    if "Cache line invalidated" not in expr and "got deallocated" not in expr:
        return None
    m = _DEALLOC.search(expr)
    return "invalidated", local(m.group(1)) if m else ""


def _backend(expr: str, kinds: Kinds) -> Found:
    return (
        ("backend_mismatch", "")
        if "BACKEND_MATCH" in expr or "___check_current_backend" in expr
        else None
    )


def _duplicate(expr: str, kinds: Kinds) -> Found:
    """Two inputs that were the same tensor and are not now (or the reverse)."""
    if (m := _DUPLICATE.search(expr)) is None:
        return None
    return "aliasing", ", ".join(local(name) for name in _QUOTED_SOURCE.findall(m.group(1)))


def _device_index(expr: str, kinds: Kinds) -> Found:
    return ("device", "") if "Tensor device index mismatch" in expr else None


def _tensor(expr: str, kinds: Kinds) -> Found:
    """``tensor 'x' size mismatch``: the tensor property that changed."""
    if (m := _TENSOR.search(expr)) is None:
        return None
    category = _TENSOR_KINDS.get(m.group(2), "other")
    if category == "dispatch_keys" and _backend_changed(expr):
        category = "device"
    elif category == "dispatch_keys" and (autocast := _autocast_changed(expr)):
        return "autocast", autocast  # before 2.5 autocast shows only as a tensor's dispatch keys
    return category, local(m.group(1))


def _autocast_changed(expr: str) -> str:
    """``autocast(<device>)_enabled`` (the subject newer torch names) when only Autocast keys differ, else ""."""
    sets = _KEY_SETS.findall(expr)
    if len(sets) != 2:
        return ""
    expected, actual = ({key.strip() for key in keys.split(",")} for keys in sets)
    changed = expected ^ actual
    if not changed or not all(key.startswith("Autocast") for key in changed):
        return ""
    return " ".join(
        sorted(f"autocast({key.removeprefix('Autocast').lower()})_enabled" for key in changed)
    )


def _backend_changed(expr: str) -> bool:
    """True when a dispatch-key mismatch is really a device change (CPU -> Meta, CPU -> CUDA ...)."""
    sets = _KEY_SETS.findall(expr)
    return len(sets) == 2 and sets[0].split(",")[0].strip() != sets[1].split(",")[0].strip()


def _mark_dynamic(expr: str, kinds: Kinds) -> Found:
    if not _DIM_MARK.search(expr):
        return None
    m = _DIM_MARKED.search(expr)
    return "mark_dynamic", local(m.group(1)) if m else ""


def _global_state(expr: str, kinds: Kinds) -> Found:
    """torch's global-state guard: grad mode, autocast, or other global state, with what changed (the
    first change; :func:`global_state_changes` files each of several)."""
    changes = global_state_changes(expr)
    return changes[0] if changes else None


def _state_category(change: str) -> str:
    if change == "grad_mode":
        return "grad_mode"
    return "autocast" if "autocast" in change else "global_state"


def global_state_changes(expr: str) -> list[tuple[str, str]]:
    """``GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled``: one (category, subject) per kind of
    change, in torch's order (both grad mode and autocast changed: both are filed, each with its fix);
    [] when ``expr`` is no global-state guard."""
    if "GLOBAL_STATE" not in expr and "___check_global_state" not in expr:
        return []
    changed = expr.split("changed:", 1)[1].split() if "changed:" in expr else []
    by_category: dict[str, list[str]] = {}
    for change in changed:
        by_category.setdefault(_state_category(change), []).append(change)
    if not by_category:
        return [("global_state", "")]
    return [(category, " ".join(names)) for category, names in by_category.items()]


def _torch_state(expr: str, kinds: Kinds) -> Found:
    """Function modes, the default device, a torch setting."""
    if not _TORCH_STATE.match(expr):
        return None
    return "global_state", expr.split(" ", 1)[0].split("(", 1)[0]


def _expected_type(expr: str, kinds: Kinds) -> Found:
    """An argument that was a tensor (or a list...) and now is not."""
    m = _EXPECTED_TYPE.search(expr)
    return ("type", local(m.group(1))) if m else None


def _identity(expr: str, kinds: Kinds) -> Found:
    """``___check_obj_id`` / ``___check_type_id``: by what the guarded object is (see ``subjects``)."""
    if (m := _CHECK.search(expr)) is None:
        return None
    subject = subject_of_check(m.group(2))
    if m.group(1) == "type":
        return "type", subject
    expected = (
        m.group(4)
        or m.group(5)
        or (f"{m.group(6)}:{ENUM_KIND}" if m.group(6) else singleton_kind(m.group(3)))
    )
    return identity_category(subject, expected, kinds.get(subject), kinds), subject


def _sized(subject: str, kinds: Kinds) -> str:
    """A length guard's category by what the container is: a dict's length is which keys it holds (a
    keyword argument that came or went through ``**kwargs``); a list's or tuple's is its length."""
    kind = kinds.get(subject)
    if kind is not None:
        return "dict_keys" if is_dict_kind(kind) else "container_length"
    # Text alone: ``**kwargs`` is a dict (the name every wrapper gives it).
    return "dict_keys" if subject == "L['kwargs']" else "container_length"


def _length(expr: str, kinds: Kinds) -> Found:
    if (m := _LEN.search(expr)) is None:
        return None
    subject = local(m.group(1))
    return _sized(subject, kinds), subject


def _keys(expr: str, kinds: Kinds) -> Found:
    m = _KEYS.search(expr)
    return ("dict_keys", local(m.group(1) or m.group(2))) if m else None


def _contains(expr: str, kinds: Kinds) -> Found:
    """A key in a dict, or an attribute in an object's ``__dict__``."""
    if (m := _CONTAINS.search(expr)) is None:
        return None
    return "module_attribute" if m.group(1).endswith(".__dict__") else "dict_keys", local(
        m.group(1)
    )


def _sizes(expr: str, kinds: Kinds) -> Found:
    if not _SIZE_CALL.search(expr):
        return None
    m = _SIZE_SUBJECT.search(expr)
    return "symbolic_shape", local(m.group(0)) if m else ""


def _is_none(expr: str, kinds: Kinds) -> Found:
    """It was None and is not now, or the reverse: the argument's kind changed."""
    if (m := _IS_NONE.match(expr)) is None:
        return None
    subject = local(m.group(1))
    return none_changed(subject, kinds), subject


def _same_object(expr: str, kinds: Kinds) -> Found:
    """``a is b``: two sources that held one object and do not now (torch's DUPLICATE_INPUT guard, on
    tensors and other objects alike): by what the object is. Tensors are aliasing; any other object is
    a shared object that was replaced on one side: ``module_attribute`` when a module holds it (PEFT's
    ``q_proj._active_adapter is v_proj._active_adapter``), else ``object_identity``."""
    if not _SAME_OBJECT.match(expr):
        return None
    subject = local(expr.split(" is ", 1)[0].strip())
    kind = kinds.get(subject)
    if kind is not None:
        tensor = is_tensor_kind(kind)
    elif _TENSOR_HELD.search(subject):  # a parameter or buffer: a tensor by its path
        tensor = True
    else:  # nothing resolved: a tensor or not (torch writes both alike), recompprof cannot tell
        return "other", subject
    if tensor:
        return "aliasing", subject
    held = owner(subject)
    held_kind = kinds.get(held) if held is not None else None
    if held_kind is not None and is_module_kind(held_kind):
        return "module_attribute", subject
    return "object_identity", subject


def _empty(expr: str, kinds: Kinds) -> Found:
    """``not L['xs']``: a container that was empty and is not now."""
    if not _NOT.match(expr):
        return None
    subject = local(expr[3:].strip())
    return _sized(subject, kinds), subject


def _symbolic(expr: str, kinds: Kinds) -> Found:
    """A relation between symbolic sizes (``Eq(s0, 3)``, ``2 <= s1``), not a comparison of a value."""
    if _SYMBOLIC.search(_CLASS_ANNOTATION.sub("", expr)) and not _COMPARISON.match(expr):
        return "symbolic_shape", ""
    return None


def _scalar_relation(expr: str, kinds: Kinds) -> Found:
    """A shape guard on a scalar torch made a symbol (an int under ``allow_unspec_int_on_nn_module``, a
    local int, a float torch does not specialise): the subject is that scalar, the category its holder's,
    as for its value guard (``self.layer_idx == 3``): one source, no call (a size is ``_sizes``'), and
    nothing but numbers and arithmetic around it; the value guard itself is ``_value``'s."""
    if (m := _SCALAR_RELATION.match(expr)) is not None:
        source = m.group(1)
    else:
        if (" == " not in expr and " != " not in expr) or _COMPARISON.match(expr):
            return None  # a bound, or a value guard (``_value``'s): read no further
        sources = {m.group(1) for m in _RELATION_SOURCE.finditer(expr)}
        if len(sources) != 1:
            return None
        (source,) = sources
        if "()" in source or not _PINNED.match(expr.replace(source, "0")):
            return None
    subject = local(source)
    if subject.startswith("L['self']."):
        return "module_attribute", subject
    return by_subject(subject, kinds), subject


def _value(expr: str, kinds: Kinds) -> Found:
    """A Python value compared with its old one: by what its subject is (see ``subjects.by_subject``)."""
    if (m := _VALUE.match(expr)) is None:
        return None
    subject = local(m.group(1) or m.group(2) or m.group(3))
    return "module_attribute" if m.group(1) else by_subject(subject, kinds), subject


# Tried in this order; the first rule that recognises an expression decides it.
RULES: tuple[Rule, ...] = (
    _invalidated,
    _backend,
    _duplicate,
    _device_index,
    _tensor,
    _mark_dynamic,
    _global_state,
    _torch_state,
    _expected_type,
    _identity,
    _length,
    _keys,
    _contains,
    _sizes,
    _is_none,
    _same_object,
    _empty,
    _scalar_relation,
    _symbolic,
    _value,
)


def classify(expr: str, kinds: Kinds) -> list[tuple[str, str]]:
    """(category, subject) for one guard expression with its compile id and stack block removed: one
    pair, or one per kind of change where one guard says several (:func:`global_state_changes`).

    Torch's access spellings are read as the user writes them first (``subjects.readable``)."""
    expr = readable(expr)
    if several := global_state_changes(expr):
        return several
    for rule in RULES:
        if (found := rule(expr, kinds)) is not None:
            return [found]
    return [("other", "")]
