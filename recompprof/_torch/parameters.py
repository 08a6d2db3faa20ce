"""Name a guard's subject by the parameters of the function a decorator's wrapper calls.

A decorated method compiles the decorator's wrapper (``def wrapped_func(*args, **kwargs)``,
``def wrapper(self, *args, **kwargs)``), so torch names what it guards by the wrapper's parameters:
``L['kwargs']['input_ids']``, ``L['args'][0]``. The user wrote ``forward(self, input_ids, ...)``. Where it is
provable, a subject is also named as torch names it when the wrapped function itself is compiled
(``L['input_ids']``); everywhere else there is no such name (None) and torch's spelling stands alone.

Provable means, from the wrapper's bytecode and the live function its closure holds (docs/categories.md,
"Subjects named by a wrapper's parameters"):

- the wrapper calls one closure function ``f`` as ``f(p0, ..., *args, **kwargs)``, the leading ``p`` plain
  loads, its own ``*args``/``**kwargs`` unpacked as they are, every call of ``f`` alike, and ``f`` used
  otherwise only to read its metadata (``f.__name__``);
- ``args`` is never rebound (a tuple cannot change otherwise), nor a leading parameter it passes on;
- ``kwargs`` is never rebound and never escapes: it is only read (``k in kwargs``, ``kwargs[k]``,
  ``kwargs.get``, ``len(kwargs)``, ``**kwargs``) or has keys the code names stored, popped or deleted
  (``kwargs.pop("return_dict")``; ``kwargs[new] = kwargs.pop(old)`` with ``old``/``new`` in the decorator's
  closure). Those keys are renamed or dropped on the way, so they are not mapped; any other key is;
- positional ``i`` binds to ``f``'s ``i``-th positional parameter (after the leading ones, and after ``self``
  for a bound method), or into ``f``'s own ``*args``; a key to ``f``'s parameter of that name (not
  positional-only), or into ``f``'s own ``**kwargs``. Where ``f`` is itself such a wrapper (stacked
  decorators) the name goes on through it.

All of it runs on the compile path (a recompile), never per step; the bytecode verdict is cached per code
object. Bytecode the rules do not know (a newer Python) proves nothing: torch's spelling stays.
"""

from __future__ import annotations

import dis
import inspect
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from recompprof._model.subjects import argument_root

MAX_DEPTH = 16  # stacked decorators followed at most

_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF"})
_PAIRED_LOADS = frozenset({"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})
_STORES = frozenset(
    {
        "STORE_FAST",
        "DELETE_FAST",
        "STORE_DEREF",
        "DELETE_DEREF",
        "LOAD_FAST_AND_CLEAR",
        "STORE_FAST_LOAD_FAST",
        "STORE_FAST_STORE_FAST",
    }
)
_SIMPLE = frozenset(
    {"LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF"}
)
_SKIPPED = frozenset({"NOP", "CACHE", "EXTENDED_ARG", "RESUME", "COPY_FREE_VARS", "MAKE_CELL"})
_CALLS = frozenset({"CALL", "PRECALL", "CALL_FUNCTION"})
_TRUTH = frozenset(
    {
        "TO_BOOL",
        "UNARY_NOT",
        "POP_JUMP_IF_FALSE",
        "POP_JUMP_IF_TRUE",
        "POP_JUMP_FORWARD_IF_FALSE",
        "POP_JUMP_FORWARD_IF_TRUE",
        "POP_JUMP_BACKWARD_IF_FALSE",
        "POP_JUMP_BACKWARD_IF_TRUE",
        "JUMP_IF_FALSE_OR_POP",
        "JUMP_IF_TRUE_OR_POP",
        "CONTAINS_OP",
        "IS_OP",
    }
)
# Methods that read a dict, and the ones that change it at the one key they are given first.
_READ_METHODS = frozenset(
    {"get", "keys", "values", "items", "copy", "__contains__", "__getitem__", "__len__"}
)
_KEYED_METHODS = frozenset({"pop", "setdefault"})
# Builtins that only read what they are given (looked up as globals: a module global of that name shadows it).
_READ_BUILTINS = frozenset({"len", "bool", "dict", "list", "tuple", "sorted", "set", "iter"})
# What a wrapper may read of the function it calls without calling it.
_FUNCTION_METADATA = frozenset(
    {
        "__name__",
        "__qualname__",
        "__module__",
        "__doc__",
        "__code__",
        "__defaults__",
        "__kwdefaults__",
        "__annotations__",
    }
)


@dataclass(frozen=True)
class _Key:
    """A dict key the wrapper's code names: a constant, or a closure cell read when binding."""

    const: Any = None
    cell: str | None = None


@dataclass(frozen=True)
class Plan:
    """What a wrapper's bytecode proves: it calls the closure function ``callee`` with ``leading`` (the
    wrapper's parameter passed at each position, None for any other value), then its ``*args`` when
    ``star`` and its ``**kwargs`` when ``keywords``; ``touched`` are the keys it may change on the way."""

    callee: str
    leading: tuple[str | None, ...]
    star: bool
    keywords: bool
    touched: tuple[_Key, ...]
    varargs: str | None
    varkw: str | None


_plans: weakref.WeakKeyDictionary[types.CodeType, Plan | None] = weakref.WeakKeyDictionary()


def plan(code: types.CodeType, globals_: dict[str, Any] | None = None) -> Plan | None:
    """The pass-through ``code`` proves, or None (cached per code object)."""
    try:
        return _plans[code]
    except KeyError:
        pass
    try:
        found = _plan(code, globals_ or {})
    except (ValueError, TypeError, IndexError, AttributeError):
        found = None  # bytecode these rules do not know proves nothing
    _plans[code] = found
    return found


def _varargs_names(code: types.CodeType) -> tuple[str | None, str | None]:
    at = code.co_argcount + code.co_kwonlyargcount
    varargs = code.co_varnames[at] if code.co_flags & inspect.CO_VARARGS else None
    at += bool(varargs)
    varkw = code.co_varnames[at] if code.co_flags & inspect.CO_VARKEYWORDS else None
    return varargs, varkw


@dataclass(frozen=True)
class _Ins:
    opname: str
    arg: int | None
    argval: Any
    argrepr: str


def _instructions(code: types.CodeType) -> list[_Ins]:
    """``code``'s instructions with no-ops dropped and paired loads and stores split in two."""
    out: list[_Ins] = []
    for ins in dis.get_instructions(code):
        name = ins.opname
        if name in _SKIPPED:
            continue
        if name in _PAIRED_LOADS or name in ("STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"):
            first, second = ins.argval
            one = "STORE_FAST" if name.startswith("STORE_FAST_") else "LOAD_FAST"
            two = "STORE_FAST" if name == "STORE_FAST_STORE_FAST" else "LOAD_FAST"
            out += [_Ins(one, None, first, first), _Ins(two, None, second, second)]
            continue
        out.append(_Ins(name, ins.arg, ins.argval, ins.argrepr))
    return out


def _is_load(ins: _Ins, name: str | None) -> bool:
    return name is not None and ins.opname in _LOADS and ins.argval == name


def _nested(code: types.CodeType) -> list[types.CodeType]:
    """Code objects defined in ``code`` (comprehensions before 3.12, lambdas, inner functions), all depths."""
    found = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += [const, *_nested(const)]
    return found


def _plan(code: types.CodeType, globals_: dict[str, Any]) -> Plan | None:
    varargs, varkw = _varargs_names(code)
    if varargs is None and varkw is None:
        return None
    ins = _instructions(code)
    calls = [c for j in range(len(ins)) if (c := _call(ins, j, code, varargs, varkw)) is not None]
    if not calls or len({c[:4] for c in calls}) != 1:
        return None  # no pass-through call, or calls of different shapes
    callee, leading, star, keywords = calls[0][:4]
    consumed = {j for c in calls for j in c[4]}
    nested = _nested(code)
    if not _callee_only_called(ins, code, callee) or any(callee in n.co_freevars for n in nested):
        return None  # the function is called otherwise, or escapes into an inner function
    rebound = _rebound(ins, nested)
    star = star and varargs not in rebound
    leading = tuple(p if p not in rebound else None for p in leading)
    touched: list[_Key] = []
    keywords = keywords and _keywords_kept(ins, nested, varkw, consumed, touched, globals_)
    if not (star or keywords or any(leading)):
        return None
    return Plan(callee, leading, star, keywords, tuple(touched), varargs, varkw)


def _rebound(ins: Sequence[_Ins], nested: Sequence[types.CodeType] = ()) -> set[Any]:
    """The names ``ins`` store to, and the cells the inner functions ``nested`` store to (``nonlocal``)."""
    found = {i.argval for i in ins if i.opname in _STORES}
    for inner in nested:
        found |= set(inner.co_freevars) & _rebound(_instructions(inner))
    return found


def _keywords_kept(
    ins: Sequence[_Ins],
    nested: Sequence[types.CodeType],
    varkw: str | None,
    consumed: set[int],
    touched: list[_Key],
    globals_: dict[str, Any],
) -> bool:
    """``kwargs`` is never rebound and every use of it, in the wrapper and in the inner functions that
    close over it, reads it or changes a key the code names."""
    if varkw in _rebound(ins) or not _dict_kept(ins, varkw, consumed, touched, globals_):
        return False
    for inner in nested:
        if varkw not in inner.co_freevars:
            continue
        inner_ins = _instructions(inner)
        if varkw in _rebound(inner_ins):
            return False
        if not _dict_kept(inner_ins, varkw, set(), touched, globals_):
            return False
    return True


_Call = tuple[str, tuple[str | None, ...], bool, bool, list[int]]


def _call(
    ins: Sequence[_Ins], j: int, code: types.CodeType, varargs: str | None, varkw: str | None
) -> _Call | None:
    """The pass-through call starting at ``ins[j]`` (the load of a closure function):
    ``(callee, leading, star, keywords, indexes of its loads of args and kwargs)``, or None."""
    first = ins[j]
    if first.opname != "LOAD_DEREF" or first.argval not in code.co_freevars:
        return None
    k = j + 1
    if k < len(ins) and ins[k].opname == "PUSH_NULL":
        k += 1
    positional = _positional(ins, k, code, varargs)
    if positional is None:
        return None
    k, leading, star, consumed = positional
    keywords = (
        k + 3 < len(ins)
        and ins[k].opname == "BUILD_MAP"
        and ins[k].arg == 0
        and _is_load(ins[k + 1], varkw)
        and ins[k + 2].opname == "DICT_MERGE"
    )
    if keywords:
        consumed.append(k + 1)
        k += 3
    if k >= len(ins) or ins[k].opname != "CALL_FUNCTION_EX" or ins[k].arg != int(keywords):
        return None
    return first.argval, leading, star, keywords, consumed


def _positional(
    ins: Sequence[_Ins], k: int, code: types.CodeType, varargs: str | None
) -> tuple[int, tuple[str | None, ...], bool, list[int]] | None:
    """A call's positional arguments from ``ins[k]``: ``*args`` alone, ``(p0, ..., *args)`` built as a
    list, or ``(p0, ...)`` without ``*args``; ``(next index, leading, star, index of the args load)``."""
    if k < len(ins) and _is_load(ins[k], varargs):
        return k + 1, (), True, [k]
    leading: list[str | None] = []
    while k < len(ins) and ins[k].opname in _SIMPLE and not _is_load(ins[k], varargs):
        own = ins[k].opname != "LOAD_CONST" and ins[k].argval in code.co_varnames
        leading.append(ins[k].argval if own else None)
        k += 1
    if k >= len(ins):
        return None
    if ins[k].opname == "BUILD_LIST" and ins[k].arg == len(leading):
        return (k + 4, tuple(leading), True, [k + 1]) if _extended(ins, k, varargs) else None
    built = ins[k].opname == "BUILD_TUPLE" and ins[k].arg == len(leading)
    empty = not leading and ins[k].opname == "LOAD_CONST" and ins[k].argval == ()
    return (k + 1, tuple(leading), False, []) if built or empty else None


def _extended(ins: Sequence[_Ins], k: int, varargs: str | None) -> bool:
    """``ins[k]`` (a BUILD_LIST of the leading arguments) is extended by ``*args`` and made a tuple."""
    if k + 3 >= len(ins):
        return False
    to_tuple = ins[k + 3]
    return (
        _is_load(ins[k + 1], varargs)
        and ins[k + 2].opname == "LIST_EXTEND"
        and "LIST_TO_TUPLE" in to_tuple.opname + " " + to_tuple.argrepr
    )


def _callee_only_called(ins: Sequence[_Ins], code: types.CodeType, callee: str) -> bool:
    """Every load of the called function is a pass-through call's, or reads its metadata."""
    calls = 0
    for j, i in enumerate(ins):
        if i.opname in _STORES and i.argval == callee:
            return False
        if not _is_load(i, callee) and not (i.opname == "LOAD_CLOSURE" and i.argval == callee):
            continue
        if i.opname == "LOAD_DEREF" and _call(ins, j, code, *_varargs_names(code)) is not None:
            calls += 1
            continue
        following = ins[j + 1] if j + 1 < len(ins) else None
        if following is None or following.opname != "LOAD_ATTR":
            return False
        if following.argval not in _FUNCTION_METADATA:
            return False
    return calls > 0


def _key(ins: _Ins) -> _Key | None:
    """The key a load names, where it is one the code fixes: a constant, or a closure cell."""
    if ins.opname == "LOAD_CONST":
        return _Key(const=ins.argval)
    if ins.opname == "LOAD_DEREF":
        return _Key(cell=ins.argval)
    return None


def _dict_kept(
    ins: Sequence[_Ins],
    name: str | None,
    consumed: set[int],
    touched: list[_Key],
    globals_: dict[str, Any],
) -> bool:
    """Every use of the dict ``name`` reads it or changes a key the code names (added to ``touched``)."""
    for j, i in enumerate(ins):
        if j in consumed:
            continue
        if i.opname == "LOAD_CLOSURE" and i.argval == name:
            continue  # an inner function's uses are checked on its own code
        if not _is_load(i, name):
            continue
        after = ins[j + 1] if j + 1 < len(ins) else None
        then = ins[j + 2] if j + 2 < len(ins) else None
        if not _dict_use(ins, j, after, then, touched, globals_):
            return False
    return True


def _dict_use(
    ins: Sequence[_Ins],
    j: int,
    after: _Ins | None,
    then: _Ins | None,
    touched: list[_Key],
    globals_: dict[str, Any],
) -> bool:
    """The use of the dict loaded at ``ins[j]`` (followed by ``after`` and ``then``) reads it, or changes
    a key the code names (added to ``touched``)."""
    if after is None:
        return False
    if after.opname in _TRUTH or after.opname in ("DICT_MERGE", "DICT_UPDATE", "GET_ITER"):
        return True  # `k in kwargs`, `if kwargs:`, `{**kwargs}`, `g(**kwargs)`, `for k in kwargs`: read
    if after.opname in ("LOAD_ATTR", "LOAD_METHOD"):
        return _method_use(after, then, touched)
    if then is not None and after.opname in _SIMPLE:
        return _subscript_use(after, then, touched)
    before = ins[j - 1] if j > 0 else None
    return (
        before is not None
        and before.opname == "LOAD_GLOBAL"
        and before.argval in _READ_BUILTINS
        and before.argval not in globals_
        and after.opname in _CALLS
        and after.arg == 1
    )


def _method_use(method: _Ins, then: _Ins | None, touched: list[_Key]) -> bool:
    """``kwargs.get(...)`` reads; ``kwargs.pop(key, ...)`` changes ``key``, where the code names it."""
    if method.argval in _READ_METHODS:
        return True
    key = _key(then) if then is not None and method.argval in _KEYED_METHODS else None
    if key is not None:
        touched.append(key)
    return key is not None


def _subscript_use(index: _Ins, then: _Ins, touched: list[_Key]) -> bool:
    """``kwargs[k]`` reads; ``kwargs[key] = ...`` and ``del kwargs[key]`` change ``key``, where the code
    names it."""
    if then.opname == "BINARY_SUBSCR" or (then.opname == "BINARY_OP" and "[" in then.argrepr):
        return True
    key = _key(index) if then.opname in ("STORE_SUBSCR", "DELETE_SUBSCR") else None
    if key is not None:
        touched.append(key)
    return key is not None


# -- binding a subject -------------------------------------------------------------------------------


def _cells(code: types.CodeType, closure: Sequence[Any] | None) -> dict[str, Any] | None:
    if closure is None or len(closure) != len(code.co_freevars):
        return None
    out = {}
    for name, cell in zip(code.co_freevars, closure):
        try:
            out[name] = cell.cell_contents
        except (ValueError, AttributeError):  # an empty cell
            continue
    return out


def _touched_keys(found: Plan, cells: dict[str, Any]) -> set[Any] | None:
    keys: set[Any] = set()
    for key in found.touched:
        if key.cell is None:
            keys.add(key.const)
        elif key.cell in cells:
            keys.add(cells[key.cell])
        else:
            return None  # a key read from somewhere this cannot see
    return keys


def _function(value: Any) -> tuple[types.FunctionType, int] | None:
    """A plain Python function and how many positions its bound ``self`` takes (a bound method)."""
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        return value.__func__, 1
    if isinstance(value, types.FunctionType):
        return value, 0
    return None


def _into(function: types.FunctionType, item: int | str, rest: str, depth: int) -> str | None:
    """The subject ``rest`` below positional ``item`` (an int) or keyword ``item`` of a call of ``function``,
    in ``function``'s own names (through its own pass-through, if it is a wrapper itself)."""
    code = function.__code__
    varargs, varkw = _varargs_names(code)
    if isinstance(item, int):
        if item < code.co_argcount:  # a wrapper's own leading parameter goes on through it too
            subject = f"L['{code.co_varnames[item]}']{rest}"
        elif varargs is None:
            return None
        else:
            subject = f"L['{varargs}'][{item - code.co_argcount}]{rest}"
    else:
        first = code.co_posonlyargcount
        if item in code.co_varnames[first : code.co_argcount + code.co_kwonlyargcount]:
            subject = f"L['{item}']{rest}"
        elif varkw is None:
            return None
        else:
            subject = f"L['{varkw}'][{item!r}]{rest}"
    deeper = (
        bind(subject, code, function.__closure__, function.__globals__, depth + 1)
        if depth < MAX_DEPTH
        else None
    )
    return deeper or subject


def bind(
    subject: str,
    code: types.CodeType,
    closure: Sequence[Any] | None,
    globals_: dict[str, Any] | None = None,
    depth: int = 0,
) -> str | None:
    """``subject`` (a guard's, in the frame of ``code`` run with ``closure``) named by the parameters of the
    function ``code`` passes its arguments to, as torch names it when that function is compiled itself;
    None where that is not provable or names nothing else."""
    root = argument_root(subject)
    if root is None:
        return None
    prefix, name, item, rest = root
    found = plan(code, globals_)
    cells = _cells(code, closure) if found is not None else None
    if found is None or cells is None or found.callee not in cells:
        return None
    target = _function(cells[found.callee])
    if target is None:
        return None
    function, offset = target
    position: int | str
    if item is None:  # one of the wrapper's own parameters, passed on in a leading position
        if name not in found.leading:
            return None
        position = offset + found.leading.index(name)
    elif isinstance(item, int):
        if name != found.varargs or not found.star:
            return None
        position = offset + len(found.leading) + item
    else:
        touched = _touched_keys(found, cells)
        if name != found.varkw or not found.keywords or touched is None or item in touched:
            return None
        position = item
    bound = _into(function, position, rest, depth)
    if bound is None:
        return None
    shown = prefix + bound
    return shown if shown != subject else None


def binder(
    code: types.CodeType, closure: Sequence[Any] | None, globals_: dict[str, Any] | None
) -> Callable[[str], str | None]:
    """:func:`bind` for the subjects of one compile of ``code``."""
    return lambda subject: bind(subject, code, closure, globals_)
