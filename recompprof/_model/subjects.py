"""A guard's subject in the user's terms: its normal form, the object holding it, what kind of object it is.

Identity guards (``___check_obj_id(subject, id)``) say nothing about *what* changed, so they are
classified by what the guarded object is: its type from torch's ``type=<class ...>`` annotation (2.13+;
2.10-2.12 annotate with the object's repr, ``type=<code object ...>``, ``type=<Reduction.MEAN: 'mean'>``),
from the id when it is one of this interpreter's singletons (True, False, None, small ints: how 2.6
guards module flags and bools), or from ``kinds`` (what the objects are, resolved in the live process by
the caller); then by the subject's shape (``L['self'].training`` is a module attribute, ``fn.__code__``
an object). An attribute's guard is a module attribute only when the object holding it is an
``nn.Module``; where nothing says what that object is, it is ``other``. docs/categories.md has every rule.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

Kinds = Mapping[str, str]

# What the live resolver (recompprof._torch.sources) appends to a type name where isinstance says more than
# the name can: "Reduction:enum" (an enum.Enum member), "Block:module" (a torch.nn.Module),
# "Parameter:tensor" (a torch.Tensor that is not named Tensor), "BatchEncoding:dict" (a dict subclass).
ENUM_KIND, MODULE_KIND, TENSOR_KIND, DICT_KIND = "enum", "module", "tensor", "dict"

# A guarded source: L['x'], G['x'], x, self; then attributes, subscripts and calls like .size()[0].
SOURCE = r"(?:[LG]\[\s*['\"][^'\"\]\n]{0,100}['\"]\s*\]|[A-Za-z_]\w{0,100})(?:\.\w{1,100}(?:\(\))?|\[[^\[\]\n]{0,100}\]){0,20}"

_NOT_LOCAL = {
    "G",
    "L",
    "torch",
    "utils_device",
    "dict",
    "list",
    "len",
    "type",
    "not",
    "Eq",
    "Ne",
    "True",
    "False",
    "None",
}
_BARE = re.compile(r"([A-Za-z_]\w*)(.*)$", re.S)
_TYPE_OF = re.compile(r"^type\(\s*(.{1,400}?)\s*\)(.*)$")
_ROOT = re.compile(r"[LG]\[[^\]\n]{0,200}\]|\w{0,200}")
# One access after a subject's root: an attribute (a method call like .size() included) or a subscript.
_ACCESS = re.compile(r"\.([A-Za-z_]\w{0,100})(?:\(\))?|\[[^\[\]\n]{0,100}\]")
_CLOSED_OVER = re.compile(
    r"\.(?:__closure__|cell_contents|__defaults__|__kwdefaults__)\b|^(?:L\[['\"])?___stack\d+"
)
_HYPERPARAMETER = re.compile(r"\[['\"](?:lr|learning_rate|momentum|weight_decay|betas|eps)['\"]\]$")
_TENSOR_ATTRS = {
    ".dtype": "dtype",
    ".device": "device",
    ".requires_grad": "requires_grad",
    ".ndimension()": "ndim",
}
_DUNDER_TAIL = re.compile(r"\.__\w+__$")
# What an identity-guarded object is, by its type's name (the last dotted part of torch's annotation).
_SCALAR_KINDS = frozenset(
    {
        "bool",
        "int",
        "float",
        "str",
        "bytes",
        "complex",
        "NoneType",
        "dtype",
        "device",
        "layout",
        "memory_format",
        "qscheme",
        "SymInt",
        "SymFloat",
        "SymBool",
        "ellipsis",
    }
)
_CODE_KINDS = frozenset(
    {
        "function",
        "code",
        "method",
        "builtin_function_or_method",
        "method-wrapper",
        "wrapper_descriptor",
        "method_descriptor",
        "classmethod",
        "staticmethod",
        "partial",
        "module",
        "type",
        "cell",
        "frame",
        "OpOverload",
        "OpOverloadPacket",
    }
)


# torch spells a submodule by the dict holding it (``L['self'].__dict__['_modules']['q_proj']``,
# ``layers._modules['0']``) and an instance attribute by ``__dict__['x']``; the user writes
# ``L['self'].q_proj``, ``layers[0]``. Parameters and buffers keep torch's spelling: ``_parameters``
# is how a subject says it is a parameter (explaining.py reads it).
_MODULE_ITEM = re.compile(
    r"""\.(?:__dict__\[\s*(['"])_modules\1\s*\]|_modules)\[\s*(['"])([A-Za-z_0-9]{1,100})\2\s*\]"""
)
_INSTANCE_ITEM = re.compile(r"""\.__dict__\[\s*(['"])([A-Za-z_]\w{0,100})\1\s*\]""")
# ``dict.__getitem__(X, list(dict.keys(X))[0])``: torch's way to read a dict's first value (a
# ``ModelOutput`` passed in), shown as ``X.values()[0]``; ``dict.__getitem__(X, 'k')`` as ``X['k']``.
_NTH_VALUE = re.compile(
    rf"dict\.__getitem__\(\s*({SOURCE})\s*,\s*list\(dict\.keys\(\s*\1\s*\)\)\[(\d{{1,9}})\]\s*\)"
)
_KEYED_VALUE = re.compile(
    rf"""dict\.__getitem__\(\s*({SOURCE})\s*,\s*((['"])[^'"\n]{{0,100}}\3|-?\d{{1,9}})\s*\)"""
)


def _module_item(m: re.Match[str]) -> str:
    name = m.group(3)
    if name.isdigit():
        return f"[{name}]"
    return f".{name}" if name.isidentifier() else m.group(0)


def readable(text: str) -> str:
    """A guard expression or subject with torch's access spellings written as the user writes them:
    ``L['self'].__dict__['_modules']['q_proj']`` is ``L['self'].q_proj``, ``seq._modules['0']`` is
    ``seq[0]``, ``x.__dict__['n']`` is ``x.n``, and a dict read through ``dict.__getitem__`` a subscript."""
    if "__" not in text and "_modules" not in text:
        return text
    text = _MODULE_ITEM.sub(_module_item, text)
    text = _INSTANCE_ITEM.sub(lambda m: f".{m.group(2)}", text)
    text = _NTH_VALUE.sub(lambda m: f"{m.group(1)}.values()[{m.group(2)}]", text)
    return _KEYED_VALUE.sub(lambda m: f"{m.group(1)}[{m.group(2)}]", text)


def local(subject: str) -> str:
    """Put a bare local name back into ``L['name']`` form (torch >= 2.6 strips it for display)."""
    m = _BARE.match(subject)
    if m is None or m.group(1) in _NOT_LOCAL or m.group(1).startswith("__"):
        return subject
    return f"L['{m.group(1)}']{m.group(2)}"


# A subject rooted in one of the compiled function's arguments: ``L['x']…``, ``L['args'][0]…``,
# ``L['kwargs']['input_ids']…``, each also inside ``type(…)``.
_ARGUMENT = re.compile(
    r"""(type\()?L\['([A-Za-z_]\w{0,100})'\](?:\[(\d{1,9})\]|\[('[^'\\\n]{1,100}'|"[^"\\\n]{1,100}")\])?(.*)""",
    re.S,
)


def argument_root(subject: str) -> tuple[str, str, int | str | None, str] | None:
    """``(prefix, name, item, rest)`` of a subject rooted in a local: ``type(L['args'][0]).x`` is
    ``("type(", "args", 0, ").x")``, ``L['kwargs']['ids'].shape`` is ``("", "kwargs", "ids", ".shape")``,
    ``L['self'].training`` is ``("", "self", None, ".training")``; None for any other subject."""
    m = _ARGUMENT.fullmatch(subject)
    if m is None:
        return None
    prefix, name, index, key, rest = m.groups()
    item: int | str | None = int(index) if index is not None else key[1:-1] if key else None
    return prefix or "", name, item, rest


def subject_of_check(raw: str) -> str:
    """The guarded subject in normalised form; ``type(x).attr`` stays a call on the normalised ``x``."""
    m = _TYPE_OF.match(raw)
    if m:
        return f"type({local(m.group(1))}){m.group(2)}"
    return local(raw)


def owner(subject: str) -> str | None:
    """The object ``subject`` first reads an attribute of, reached by names and subscripts only
    (``L['kw']['cache'].flags[0]`` -> ``L['kw']['cache']``; ``L['self'].config.x`` -> ``L['self']``: state
    reached through a module is the module's); None if it reads no attribute."""
    root = _ROOT.match(subject)
    if root is None or not root.group(0) or subject.startswith("type("):
        return None
    pos, found = root.end(), None
    while pos < len(subject):
        step = _ACCESS.match(subject, pos)
        if step is None:
            return None
        if found is None and step.group(1) is not None and not step.group(1).startswith("__"):
            found = subject[:pos]
        pos = step.end()
    return found


def _holder(subject: str, kinds: Kinds) -> str:
    """What holds the attributes ``subject`` reads (its :func:`owner`): "module" (an nn.Module), "object"
    (resolved: anything else) or "unknown" (nothing says)."""
    held_by = owner(subject)
    kind = kinds.get(held_by) if held_by is not None else None
    if kind is not None:
        return "module" if _kind_base(kind) == MODULE_KIND else "object"
    # Text alone: the compiled method's own object (a forward's module), or nn.Module's own training flag.
    return (
        "module" if subject.startswith("L['self']") or subject.endswith(".training") else "unknown"
    )


def _tensor_attribute(subject: str) -> str | None:
    return next(
        (category for suffix, category in _TENSOR_ATTRS.items() if subject.endswith(suffix)), None
    )


def by_subject(subject: str, kinds: Kinds) -> str:
    """Category of a value guard, from what its subject is in the user's terms."""
    if "param_groups" in subject or _HYPERPARAMETER.search(subject):
        return "python_constant"
    if (category := _tensor_attribute(subject)) is not None:
        return category
    if _CLOSED_OVER.search(
        subject
    ):  # a closed-over or default value, or a value on a resumed frame's stack
        return "python_constant"
    if owner(subject) is not None or subject.startswith("L['self']"):
        holder = _holder(subject, kinds)
        if (
            holder != "object"
        ):  # a plain object's attribute (a cache's flag, a config field) is a value like any other
            return "module_attribute" if holder == "module" else "other"
    return "global" if subject.startswith("G[") else "python_constant"


@functools.lru_cache(maxsize=1)
def _singletons() -> dict[int, str]:
    # Objects at fixed addresses for the interpreter's lifetime: the id names the value exactly here.
    return {id(obj): type(obj).__name__ for obj in (True, False, None, Ellipsis, *range(-5, 257))}


def singleton_kind(object_id: str) -> str | None:
    """The type name of the interpreter singleton with this id (True, None, a small int), else None."""
    try:
        return _singletons().get(int(object_id))
    except ValueError:
        return None


def _kind_name(kind: str) -> str:
    return kind.partition(":")[0].rsplit(".", 1)[-1]


def _kind_base(kind: str) -> str:
    return kind.partition(":")[2]


def is_tensor_kind(kind: str) -> bool:
    return _kind_name(kind) == "Tensor" or _kind_base(kind) == TENSOR_KIND


def is_dict_kind(kind: str) -> bool:
    return _kind_name(kind) == "dict" or _kind_base(kind) == DICT_KIND


def is_module_kind(kind: str) -> bool:
    return _kind_base(kind) == MODULE_KIND


def _kind_group(kind: str) -> str:
    if _kind_name(kind) in _SCALAR_KINDS or _kind_base(kind) == ENUM_KIND:
        return "scalar"
    return "code" if _kind_name(kind) in _CODE_KINDS else "object"


def _kind_changed(expected: str | None, current: str | None) -> bool:
    """Two known kinds of different types, unless both are scalars (a flag that became an int is a value)."""
    return bool(
        expected
        and current
        and _kind_name(expected) != _kind_name(current)
        and not (_kind_group(expected) == _kind_group(current) == "scalar")
    )


def none_changed(subject: str, kinds: Kinds) -> str:
    """A value that was None and is not now, or the reverse: a value of what holds it (a module's
    attribute, a global), else the argument's kind changed (``type``). torch writes it ``x is None``
    (NONE_MATCH) or, before it had that guard, as an identity guard on None's id: one rule for both."""
    category = by_subject(subject, kinds)
    return "type" if category == "python_constant" else category


def _is_none_kind(kind: str | None) -> bool:
    return kind is not None and _kind_name(kind) == "NoneType"


def identity_category(subject: str, expected: str | None, current: str | None, kinds: Kinds) -> str:
    """Category of a failed ``___check_obj_id`` guard from what the guarded object is.

    ``expected`` is the kind torch guarded (its annotation, or a singleton's id), ``current`` the kind
    the live object has now (``kinds``); a None that went is :func:`none_changed`, any other kind that
    changed between calls is a ``type`` change.
    """
    if _is_none_kind(expected) and not _is_none_kind(current):  # it was None and is not now
        return none_changed(subject, kinds)
    if _kind_changed(expected, current):
        return "type"
    kind = current or expected
    attribute = owner(subject) is not None and not _DUNDER_TAIL.search(subject)
    group = _kind_group(kind) if kind is not None else None
    if group == "scalar":
        return by_subject(subject, kinds)
    if group == "code" or (group == "object" and not attribute):
        return "object_identity"
    return _by_shape(subject, attribute, kinds)


def _by_shape(subject: str, attribute: bool, kinds: Kinds) -> str:
    """An identity guard on an attribute that is an object, or on something nothing says the kind of."""
    if attribute:  # by what holds it
        return {"module": "module_attribute", "object": "object_identity"}.get(
            _holder(subject, kinds), "other"
        )
    if subject.startswith("G[") and not _DUNDER_TAIL.search(subject):
        return "global"
    return "object_identity"
