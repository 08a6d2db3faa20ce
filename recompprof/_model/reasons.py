"""Guard-failure reason strings: split, classify into the closed category vocabulary, bound, redact.

Torch reports one string per failing cache entry. Its shape changed over releases: no compile-id
prefix in 2.4 (several reasons joined by newlines), a ``"0/1: "`` prefix with ``"; "``-joined reasons
from 2.5, and a ``"User stack trace:"`` block appended from 2.11. Torch's wording is not an API, so
unknown text becomes the ``other`` category; a bug of ours is an internal error (``recompprof._internal``:
counted and logged in production, raised under tests) and the text still yields an ``other`` reason.

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

from recompprof import _internal
from recompprof._model.events import MAX_SUBJECT, MAX_TEXT, Reason

Kinds = Mapping[str, str]

__all__ = ["FIX_HINTS", "clean_text", "resolvable_subjects", "graph_break_text", "parse_guard_failure", "parse_recompiles_log", "user_location"]

FIX_HINTS: dict[str, str] = {
    "size": "Mark the varying dimension dynamic (torch._dynamo.mark_dynamic(x, dim)) or compile with dynamic=True; or pad/bucket sizes.",
    "stride": "Pass contiguous tensors (x.contiguous()) or keep one memory layout for this input.",
    "ndim": "Keep the input's number of dimensions fixed (reshape/unsqueeze before the compiled call).",
    "dtype": "Cast the input to one dtype before the compiled call.",
    "device": "Move inputs to one device before the compiled call.",
    "requires_grad": "Keep requires_grad consistent for this input (detach it, or always require grad).",
    "dispatch_keys": "Avoid mixing inference-mode, conjugate/negative views or subclasses for this input; materialise (x.clone(), x.resolve_conj()) first.",
    "python_constant": "Turn the changing Python value (LR, step, flag, enum member, a cache object's flag) into a tensor argument, or hoist it out of the compiled function; a value that takes a few states compiles once per state.",
    "global": "Hoist or freeze the global: pass it as a tensor argument, or stop reassigning it between calls.",
    "module_attribute": "Avoid toggling module attributes (training, flags) between calls; compile one variant per mode or set it once.",
    "object_identity": "Reuse the same object (function, module, class) across calls instead of creating a new one each step.",
    "type": "Pass the same kind of value each call (always a tensor or always None, always a list or always a tuple).",
    "container_length": "Keep the list/tuple length fixed, or stack the items into one tensor.",
    "dict_keys": "Keep the dict's keys (and their order) fixed across calls.",
    "aliasing": "Pass distinct tensors consistently (or always the same tensor twice); clone an input when it aliases another.",
    "grad_mode": "Call the compiled function under one grad mode, or compile separate train/eval functions.",
    "autocast": "Enter autocast consistently: always inside, or always outside, the compiled call.",
    "global_state": "Set global torch state (default dtype, deterministic algorithms, function modes) once before compiling.",
    "symbolic_shape": "A dynamic-shape guard failed: avoid branching on sizes, or mark the range with torch._dynamo.mark_dynamic(x, dim, min=, max=).",
    "mark_dynamic": "Apply mark_dynamic to this input on every call, or on none.",
    "backend_mismatch": "Reuse one backend object (or torch.compile wrapper) instead of creating a new one each call.",
    "invalidated": "Keep the guarded object alive (do not recreate modules/classes per step) so cached code stays valid.",
    "other": "recompprof cannot tell what changed (or what holds it): inspect the reason text; if recompiles are expected, raise the recompile limit with evidence from this report.",
}

_ID = r"!?\d+/\d+(?:/\d+)?(?:_\d+)?"
_PREFIX = re.compile(rf"\s*\[?({_ID})\]?:\s?")
_STACK = re.compile(r"\n[ \t]*(?:-[ \t]*)?User stack trace:")
_FILE_LINE = re.compile(r'File "([^"\n]{1,1000})", line (\d{1,9})')
# A guarded source: L['x'], G['x'], x, self; then attributes, subscripts and calls like .size()[0].
_SOURCE = r"(?:[LG]\[\s*['\"][^'\"\]\n]{0,100}['\"]\s*\]|[A-Za-z_]\w{0,100})(?:\.\w{1,100}(?:\(\))?|\[[^\[\]\n]{0,100}\]){0,20}"
_TENSOR = re.compile(r"tensor '(.{1,300}?)' ([a-z_ ]{1,30}?) mismatch")
# The subject may itself be a call (type(L['m']).__call__.__code__): everything up to the trailing ", <id>)".
# torch 2.10 annotates with the object's repr ("type=<code object f at 0x...>"), later with its type.
# An enum member's repr (2.10-2.12's annotation of one) is "<Reduction.MEAN: 'mean'>": group 6 is its class.
_CHECK = re.compile(r"___check_(obj|type)_id\(\s*([^\n]{1,500}?)\s*,\s*(-?\d{1,30})\s*\)"
                    r"(?:,\s*type=<(?:class '([^'\n]{1,300})'|([\w.]{1,300}) object\b|([A-Za-z_][\w.]{0,300})\.\w{1,100}: ))?")
_TYPE_OF = re.compile(r"^type\(\s*(.{1,400}?)\s*\)(.*)$")
# "to be a tensor type, ' but found" up to 2.14, "to be <class 'torch.Tensor'>, but found" from 2.15; the name
# itself may hold quotes (kwargs['attention_mask']).
_EXPECTED_TYPE = re.compile(r"expected type of '([^\n]{1,300}?)' to be (?:an? [\w. ]{1,100}? type|<class '[^'\n]{1,300}'>)\W+but found ")
_CLASS_ANNOTATION = re.compile(r"<class '[^'\n]{0,300}'>")
_LEN = re.compile(rf"(?:len|___tuple_iterator_len)\(\s*({_SOURCE})\s*\)")
_KEYS = re.compile(rf"(?:list\(dict\.keys\(\s*({_SOURCE})\s*\)\)|list\(\s*({_SOURCE})\.keys\(\)\s*\))")
_CONTAINS = re.compile(rf"___dict_contains\([^,\n]{{0,200}},\s*({_SOURCE})\)")
_DIM_MARK = re.compile(r"_has_dynamo_dim_marking|_dynamo_(?:weak_|strict_)?(?:dynamic|unbacked|static)_indices")
_SYMBOLIC = re.compile(r"\b(?:Eq|Ne|Mod|FloorDiv|Max|Min)\(|\bs\d+\b|\bu\d+\b|<=|>=|(?<![=!<>])[<>](?!=)")
_VALUE = re.compile(
    rf"^(?:not\s+)?(?:hasattr\(\s*({_SOURCE})\s*,|(?:float|int|bool|str|complex)\(\s*({_SOURCE})\s*\)\s*[=!]=|({_SOURCE})\s*(?:==|!=|is)\s)"
)
_IS_NONE = re.compile(rf"^({_SOURCE})\s+is\s+(?:not\s+)?None\s*$")
_DEALLOC = re.compile(rf"because\s+({_SOURCE})\s+got deallocated")
_DUPLICATE = re.compile(r"Duplicate tensors? found:?\s*(.*)")
# What an identity-guarded object is, by its type's name (the last dotted part of torch's annotation).
_SCALAR_KINDS = frozenset({"bool", "int", "float", "str", "bytes", "complex", "NoneType", "dtype", "device",
                           "layout", "memory_format", "qscheme", "SymInt", "SymFloat", "SymBool", "ellipsis"})
_CODE_KINDS = frozenset({"function", "code", "method", "builtin_function_or_method", "method-wrapper",
                         "wrapper_descriptor", "method_descriptor", "classmethod", "staticmethod", "partial",
                         "module", "type", "cell", "frame", "OpOverload", "OpOverloadPacket"})
_DUNDER_TAIL = re.compile(r"\.__\w+__$")
_GUARD_START = re.compile(rf"(?:tensor '|Tensor device|___|GLOBAL_STATE|len\(|list\(|not |hasattr\(|Duplicate|Cache line|BACKEND_MATCH|\d|\(|[A-Z][a-z]*\(|{_SOURCE}\s*(?:==|!=|is\b|<|>))")
_COMMENT = re.compile(r"(?<!\s)\s+#\s")  # the lookbehind keeps long blank runs linear
_NOT_LOCAL = {"G", "L", "torch", "utils_device", "dict", "list", "len", "type", "not", "Eq", "Ne", "True", "False", "None"}
_TENSOR_KINDS = {
    "size": "size", "stride": "stride", "rank": "ndim", "dtype": "dtype", "requires_grad": "requires_grad",
    "dispatch key set": "dispatch_keys", "device index": "device", "device": "device",
}
_TENSOR_ATTRS = {".dtype": "dtype", ".device": "device", ".requires_grad": "requires_grad", ".ndimension()": "ndim"}
_LOG_PREFIX = re.compile(r"^[VIWEDC]\d{4} [\d:.]+ +\d+ \S+\] (?:\[[^\]\n]{0,100}\] ){0,4}")
_ROOT = re.compile(r"[LG]\[[^\]\n]{0,200}\]|\w{0,200}")
_MAX_INPUT = 64 * 1024
_GUARD_HEADER = re.compile(r"guard \d+ failures:")
_NO_TEXT = "(torch gave no text: every guard passed, so the cache entry was refused for its backend)"


def _clean(text: str, limit: int) -> str:
    # Lone surrogates would break JSON serialisation downstream; NULs break some sinks.
    return text[:limit].encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


def clean_text(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as a bounded string that every sink accepts (no lone surrogates, no NULs)."""
    return _clean(text if isinstance(text, str) else str(text), limit)


_QUOTED = re.compile(r"'[^'\n]{0,4096}'|\"[^\"\n]{0,4096}\"|ConstantVariable\([^)\n]{0,4096}\)")


def graph_break_text(text: object, redact: bool = False) -> str:
    """A graph-break reason for the event log; redacted, only its first line with quoted literals removed."""
    text = clean_text(text)
    if not redact:
        return text
    first = text.strip().splitlines()[0] if text.strip() else "graph break"
    return _QUOTED.sub("<redacted>", first)[:MAX_SUBJECT]


def _local(subject: str) -> str:
    """Put a bare local name back into ``L['name']`` form (torch >= 2.6 strips it for display)."""
    m = re.match(r"([A-Za-z_]\w*)(.*)$", subject, re.S)
    if m is None or m.group(1) in _NOT_LOCAL or m.group(1).startswith("__"):
        return subject
    return f"L['{m.group(1)}']{m.group(2)}"


_CLOSED_OVER = re.compile(r"\.(?:__closure__|cell_contents|__defaults__|__kwdefaults__)\b|^(?:L\[['\"])?___stack\d+")
# One access after a subject's root: an attribute (a method call like .size() included) or a subscript.
_ACCESS = re.compile(r"\.([A-Za-z_]\w{0,100})(?:\(\))?|\[[^\[\]\n]{0,100}\]")
# What the live resolver (recompprof._torch.sources) appends to a type name where isinstance says more than
# the name can: "Reduction:enum" (an enum.Enum member), "Block:module" (a torch.nn.Module).
ENUM_KIND, MODULE_KIND = "enum", "module"


def _owner(subject: str) -> str | None:
    """The object ``subject`` first reads an attribute of, reached by names and subscripts only
    (``L['kw']['cache'].flags[0]`` -> ``L['kw']['cache']``; ``L['self'].config.x`` -> ``L['self']``: state
    reached through a module is the module's); None if it reads no attribute."""
    root = _ROOT.match(subject)
    if root is None or not root.group(0) or subject.startswith("type("):
        return None
    pos, owner = root.end(), None
    while pos < len(subject):
        step = _ACCESS.match(subject, pos)
        if step is None:
            return None
        if owner is None and step.group(1) is not None and not step.group(1).startswith("__"):
            owner = subject[:pos]
        pos = step.end()
    return owner


def _holder(subject: str, kinds: Kinds) -> str:
    """What holds the attributes ``subject`` reads (its :func:`_owner`): "module" (an nn.Module), "object"
    (resolved: anything else) or "unknown" (nothing says)."""
    owner = _owner(subject)
    kind = kinds.get(owner) if owner is not None else None
    if kind is not None:
        return "module" if _kind_base(kind) == MODULE_KIND else "object"
    # Text alone: the compiled method's own object (a forward's module), or nn.Module's own training flag.
    return "module" if subject.startswith("L['self']") or subject.endswith(".training") else "unknown"


def _by_subject(subject: str, kinds: Kinds) -> str:
    """Category of a value guard, from what its subject is in the user's terms."""
    if "param_groups" in subject or re.search(r"\[['\"](?:lr|learning_rate|momentum|weight_decay|betas|eps)['\"]\]$", subject):
        return "python_constant"
    for suffix, category in _TENSOR_ATTRS.items():
        if subject.endswith(suffix):
            return category
    if _CLOSED_OVER.search(subject):  # a closed-over or default value, or a value on a resumed frame's stack
        return "python_constant"
    if _owner(subject) is not None or subject.startswith("L['self']"):
        holder = _holder(subject, kinds)
        if holder != "object":  # a plain object's attribute (a cache's flag, a config field) is a value like any other
            return "module_attribute" if holder == "module" else "other"
    if subject.startswith("G["):
        return "global"
    return "python_constant"


def _subject_of_check(raw: str) -> str:
    """The guarded subject in normalised form; ``type(x).attr`` stays a call on the normalised ``x``."""
    m = _TYPE_OF.match(raw)
    if m:
        return f"type({_local(m.group(1))}){m.group(2)}"
    return _local(raw)


@functools.lru_cache(maxsize=1)
def _singletons() -> dict[int, str]:
    # Objects at fixed addresses for the interpreter's lifetime: the id names the value exactly here.
    return {id(obj): type(obj).__name__ for obj in (True, False, None, Ellipsis, *range(-5, 257))}


def _singleton_kind(object_id: str) -> str | None:
    try:
        return _singletons().get(int(object_id))
    except ValueError:
        return None


def _kind_name(kind: str) -> str:
    return kind.partition(":")[0].rsplit(".", 1)[-1]


def _kind_base(kind: str) -> str:
    return kind.partition(":")[2]


def _kind_group(kind: str) -> str:
    if _kind_name(kind) in _SCALAR_KINDS or _kind_base(kind) == ENUM_KIND:
        return "scalar"
    return "code" if _kind_name(kind) in _CODE_KINDS else "object"


def _identity_category(subject: str, expected: str | None, current: str | None, kinds: Kinds) -> str:
    """Category of a failed ``___check_obj_id`` guard from what the guarded object is.

    ``expected`` is the kind torch guarded (its annotation, or a singleton's id), ``current`` the kind
    the live object has now (``kinds``); a kind that changed between calls is a ``type`` change.
    """
    if (expected and current and _kind_name(expected) != _kind_name(current)
            and not (_kind_group(expected) == _kind_group(current) == "scalar")):
        return "type"
    kind = current or expected
    attribute = _owner(subject) is not None and not _DUNDER_TAIL.search(subject)
    if kind is not None:
        group = _kind_group(kind)
        if group == "scalar":
            category = _by_subject(subject, kinds)
            # It was None and no longer is (nothing resolved says otherwise): the argument's kind changed.
            none_before = expected is not None and _kind_name(expected) == "NoneType" and current is None
            return "type" if category == "python_constant" and none_before else category
        if group == "code":
            return "object_identity"
        if not attribute:
            return "object_identity"
    # An attribute that is an object (or nothing says what it is): by what holds it.
    if attribute:
        return {"module": "module_attribute", "object": "object_identity"}.get(_holder(subject, kinds), "other")
    if subject.startswith("G[") and not _DUNDER_TAIL.search(subject):
        return "global"
    return "object_identity"


def _classify(expr: str, kinds: Mapping[str, str]) -> tuple[str, str]:
    """(category, subject) for one reason with its compile id and stack block removed."""
    if "Cache line invalidated" in expr or "got deallocated" in expr:
        m = _DEALLOC.search(expr)
        return "invalidated", _local(m.group(1)) if m else ""
    if "BACKEND_MATCH" in expr or "___check_current_backend" in expr:
        return "backend_mismatch", ""
    if m := _DUPLICATE.search(expr):
        names = re.findall(rf"['\"]({_SOURCE})['\"]", m.group(1))
        return "aliasing", ", ".join(_local(n) for n in names)
    if "Tensor device index mismatch" in expr:
        return "device", ""
    if m := _TENSOR.search(expr):
        category = _TENSOR_KINDS.get(m.group(2), "other")
        if category == "dispatch_keys" and _backend_changed(expr):
            category = "device"
        elif category == "dispatch_keys" and (autocast := _autocast_changed(expr)):
            return "autocast", autocast  # before 2.5 autocast shows only as a tensor's dispatch keys
        return category, _local(m.group(1))
    if _DIM_MARK.search(expr):
        m = re.search(rf"\(\s*({_SOURCE})\s*,\s*'_dynamo", expr)
        return "mark_dynamic", _local(m.group(1)) if m else ""
    if "GLOBAL_STATE" in expr or "___check_global_state" in expr:
        changed = expr.split("changed:", 1)[1].split() if "changed:" in expr else []
        category = "grad_mode" if changed[:1] == ["grad_mode"] else "autocast" if changed and "autocast" in changed[0] else "global_state"
        return category, " ".join(changed)
    if re.match(r"(?:___check_torch_function_mode_stack|utils_device\.|torch\.)", expr):
        return "global_state", expr.split(" ", 1)[0].split("(", 1)[0]
    if m := _EXPECTED_TYPE.search(expr):  # an argument that was a tensor (or a list...) and now is not
        return "type", _local(m.group(1))
    if m := _CHECK.search(expr):
        subject = _subject_of_check(m.group(2))
        if m.group(1) == "type":
            return "type", subject
        expected = m.group(4) or m.group(5) or (f"{m.group(6)}:{ENUM_KIND}" if m.group(6) else _singleton_kind(m.group(3)))
        return _identity_category(subject, expected, kinds.get(subject), kinds), subject
    if m := _LEN.search(expr):
        return "container_length", _local(m.group(1))
    if m := _KEYS.search(expr):
        return "dict_keys", _local(m.group(1) or m.group(2))
    if m := _CONTAINS.search(expr):  # a key in a dict, or an attribute in an object's __dict__
        return "module_attribute" if m.group(1).endswith(".__dict__") else "dict_keys", _local(m.group(1))
    if re.search(r"\.(?:size|stride|storage_offset)\(\)", expr):
        m = re.search(rf"{_SOURCE}\.(?:size|stride|storage_offset)\(\)(?:\[\d+\])?", expr)
        return "symbolic_shape", _local(m.group(0)) if m else ""
    if m := _IS_NONE.match(expr):  # it was None and is not now, or the reverse: the argument's kind changed
        subject = _local(m.group(1))
        category = _by_subject(subject, kinds)
        return "type" if category == "python_constant" else category, subject
    if re.match(rf"^{_SOURCE}\s+is\s+(?!None\b|not\b){_SOURCE}\s*$", expr):
        return "aliasing", _local(expr.split(" is ", 1)[0].strip())
    if re.match(rf"^not\s+{_SOURCE}$", expr):
        return "container_length", _local(expr[3:].strip())
    if _SYMBOLIC.search(_CLASS_ANNOTATION.sub("", expr)) and not re.match(rf"^{_SOURCE}\s*(?:==|!=|is)", expr):
        return "symbolic_shape", ""
    if m := _VALUE.match(expr):
        subject = _local(m.group(1) or m.group(2) or m.group(3))
        return "module_attribute" if m.group(1) else _by_subject(subject, kinds), subject
    return "other", ""


def _autocast_changed(expr: str) -> str:
    """``autocast(<device>)_enabled`` (the subject newer torch names) when only Autocast keys differ, else ""."""
    sets = re.findall(r"DispatchKeySet\(([^)]{0,1000})\)", expr)
    if len(sets) != 2:
        return ""
    expected, actual = ({key.strip() for key in keys.split(",")} for keys in sets)
    changed = expected ^ actual
    if not changed or not all(key.startswith("Autocast") for key in changed):
        return ""
    return " ".join(sorted(f"autocast({key.removeprefix('Autocast').lower()})_enabled" for key in changed))


def _backend_changed(expr: str) -> bool:
    """True when a dispatch-key mismatch is really a device change (CPU -> Meta, CPU -> CUDA ...)."""
    sets = re.findall(r"DispatchKeySet\(([^)]{0,1000})\)", expr)
    return len(sets) == 2 and sets[0].split(",")[0].strip() != sets[1].split(",")[0].strip()


def _redacted(category: str, subject: str, expr: str) -> str:
    """Only the category, the subject and the comparison: no literal values, no source text."""
    op = re.search(r"\s(==|!=|is not|is|<=|>=|<|>)\s", expr)
    if subject and op and category not in ("aliasing", "symbolic_shape"):
        return f"{subject} {op.group(1)} <redacted>"
    return f"{category} guard failed on {subject}" if subject else f"{category} guard failed"


def _split(body: str) -> list[str]:
    """Split one entry's body into single reasons (joined by newlines before 2.5, by '; ' after)."""
    parts: list[str] = []
    for line in body.split("\n", 256)[:256]:
        commented = False
        for piece in line.split("; ", 64)[:64]:
            # A '; ' inside a trailing source comment ("# a = 1; b = 2") does not start a new guard.
            if commented and not _GUARD_START.match(piece.lstrip()):
                parts[-1] += "; " + piece
            elif piece.strip():
                parts.append(piece.strip())
                commented = _COMMENT.search(piece) is not None
    return parts[:64]


# Categories the live objects can refine: what a guard's subject is, and what holds it.
_BY_OBJECT = frozenset({"object_identity", "python_constant", "module_attribute", "global", "type", "other"})


def resolvable_subjects(reasons: list[Reason]) -> set[str]:
    """The subjects (and the objects holding them) whose live kinds would refine these reasons' categories."""
    out: set[str] = set()
    for reason in reasons:
        if reason.subject and reason.category in _BY_OBJECT:
            out.add(reason.subject)
            if (owner := _owner(reason.subject)) is not None:
                out.add(owner)
    return out


def parse_guard_failure(text: str, *, redact: bool = False, kinds: Kinds | None = None) -> list[Reason]:
    """One torch guard-failure string (any version's format) as one ``Reason`` per failing guard.

    ``kinds`` maps a subject in recompprof's form (``L['self'].training``, ``G['flag']``) to the type
    name of the object as resolved in the live process (``"bool"``, ``"function"``), with
    ``":enum"`` / ``":module"`` appended for an enum member / an nn.Module (``"Reduction:enum"``,
    ``"Linear:module"``); it decides between python_constant / global / module_attribute /
    object_identity / type where the text alone cannot, for a guarded object and for the object
    holding a guarded attribute (see :func:`resolvable_subjects`).
    """
    frozen = frozenset(kinds.items()) if kinds else frozenset()
    if isinstance(text, str) and len(text) <= _MAX_CACHED:
        return list(_parse_cached(text, redact, frozen))
    return list(_parse_safely(text, redact, frozen))


# Torch repeats each old cache entry's reason text on every later recompile of the frame, so most
# parses are repeats; Reasons are frozen, so sharing them is safe.
_MAX_CACHED = 4096


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str, redact: bool, kinds: frozenset[tuple[str, str]]) -> tuple[Reason, ...]:
    return _parse_safely(text, redact, kinds)


def _internal_error(where: str, exc: Exception) -> None:
    """A bug of ours: counted and logged once (production), raised under tests; never raised into torch."""
    _internal.record(f"reasons.{where}", exc, "a guard-failure reason could not be parsed; it is kept as 'other'")
    if _internal.raising():
        raise exc


def _parse_safely(text: str, redact: bool, kinds: frozenset[tuple[str, str]]) -> tuple[Reason, ...]:
    try:
        return tuple(_parse(text, redact, dict(kinds)))
    except Exception as exc:  # noqa: BLE001 - recorded; the contract is to never raise into torch
        _internal_error("parse", exc)
        return (Reason(text="<unparseable guard failure>", category="other"),)


def _parse(text: str, redact: bool, kinds: Kinds) -> list[Reason]:
    text = _clean(text if isinstance(text, str) else str(text), _MAX_INPUT)
    stack = _STACK.search(text)
    body = text[: stack.start()] if stack else text
    body = re.sub(r"^\s*-\s+(?=\[?!?\d+/\d+)", "", body)  # a reason copied from a TORCH_LOGS line
    m = _PREFIX.match(body)
    entry = m.group(1) if m else None
    reasons: list[Reason] = []
    for part in _split(body[m.end() :] if m else body):
        expr = _COMMENT.split(part, 1)[0].strip()
        category, subject = _classify(expr, kinds)
        subject = _clean(subject, MAX_SUBJECT)
        shown = _redacted(category, subject, expr) if redact else re.sub(r"(?<!\s)\s{2,}#\s", "  # ", part)
        reasons.append(Reason(text=_clean(shown, MAX_TEXT), category=category, subject=subject, entry=entry))
    if not reasons:  # every failing entry yields at least one reason
        # Torch found no failing guard: before 2.10 it then writes nothing ("" on 2.4, "0/0: " later) and the
        # entry was refused for its backend, the one check made outside the guards (2.10 names it BACKEND_MATCH).
        shown = "backend_mismatch guard failed" if redact else _NO_TEXT
        reasons.append(Reason(text=shown, category="backend_mismatch", entry=entry))
    return reasons


def user_location(text: str) -> str | None:
    """``file:line`` of the innermost frame in a reason's "User stack trace" block, if it has one."""
    try:
        stack = _STACK.search(text[:_MAX_INPUT])
        if stack is None:
            return None
        frames = _FILE_LINE.findall(text[stack.end() : _MAX_INPUT])
        return _clean(f"{frames[-1][0]}:{frames[-1][1]}", MAX_TEXT) if frames else None
    except Exception as exc:  # noqa: BLE001 - recorded; the contract is to never raise into torch
        _internal_error("user_location", exc)
        return None


def _log_item(line: str) -> str:
    stripped = line.lstrip()
    return stripped[2:] if stripped.startswith("- ") else "" if stripped == "-" else stripped


def parse_recompiles_log(message: str) -> list[str]:
    """Split one TORCH_LOGS ``recompiles``/``recompiles_verbose`` message into per-entry failure strings."""
    try:
        lines = [_LOG_PREFIX.sub("", line) for line in str(message)[: 8 * _MAX_INPUT].splitlines()]
        start = next((i + 1 for i, line in enumerate(lines) if "triggered by the following guard failure" in line), 0)
        lines = lines[start:]
        verbose = any(_GUARD_HEADER.fullmatch(line.strip()) for line in lines)
        with_ids = any(_PREFIX.match(_log_item(line)) for line in lines)
        entries: list[list[str]] = []
        for line in lines:
            item, listed = _log_item(line), line.lstrip().startswith("-")
            if verbose and _GUARD_HEADER.fullmatch(line.strip()):
                entries.append([])
            elif verbose or not listed:
                if entries and line.strip():
                    entries[-1].append(item)
            # Before 2.5 every "- " line is its own entry; later a new entry starts at a compile id.
            elif not entries or not with_ids or _PREFIX.match(item):
                entries.append([item])
            else:
                entries[-1].append(item)
        return ["\n".join(e) for e in entries if any(x.strip() for x in e)]
    except Exception as exc:  # noqa: BLE001 - recorded; the contract is to never raise into torch
        _internal_error("recompiles_log", exc)
        return []
