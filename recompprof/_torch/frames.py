"""Name the user's function for a compile as the user knows it, and find the call site that triggered it.

Dynamo compiles *code objects*, and a code object's own name is often not the user's: every
``torch.compile(module)`` goes through ``torch._dynamo.external_utils.inner`` on older torch; a
decorated method (Hugging Face's ``can_return_tuple``, ``functools.wraps`` wrappers, torch's own hook
around ``Optimizer.step``) compiles the decorator's ``wrapper``, shared by every class it decorates.
While a compile runs (our callbacks are called inside it), torch's ``_compile`` frame is on the stack
and holds the code, its frame's locals and globals, and its closure. From those we name:

- a torch wrapper around a module: ``<ModuleClass>.forward``;
- a method: the call's first argument (the first parameter, or ``args[0]`` of ``def wrapper(*args)``)
  is an instance whose class has an attribute that is this code's function, or a decorated function
  whose ``__wrapped__`` chain holds it (stacked decorators included): ``<InstanceClass>.<attribute>``,
  so two classes sharing one decorated code object are two frames, and an ``AdamW`` running the
  ``step`` it inherits from ``Adam`` is ``AdamW.step``. One decorator on several methods is one wrapper code
  object for all of them: the method is the one whose wrapper holds this compile's closure cells (never the
  first decorated attribute), or, when nothing tells, the wrapper's own name;
- a decorated function: the wrapped function's qualified name (chosen by the closure the same way);
- anything else: the code's qualified name.

File and line are those of the function the user wrote (the innermost decorator target, not the
decorator); the code object's own file and line stay the frame's identity (``events.Frame.key``).
"""

from __future__ import annotations

import collections
import functools
import inspect
import os
import sys
import sysconfig
import types
from dataclasses import dataclass
from typing import Any, NamedTuple

from recompprof._model import call_sites, generated_classes
from recompprof._model.compile_id import UNKNOWN, spelled
from recompprof._torch.versions import torch_info

_WRAPPER_FILES = ("_dynamo/external_utils.py", "_dynamo\\external_utils.py")
_MAX_DEPTH = 80
_MAX_CALL_SITE = 5
_MAX_CACHED = 1024
# Globals Dynamo writes into the user's module: the function resuming after a graph break
# ("__resume_at_24_3", whose code is "torch_dynamo_resume_in_<function>_at_<line>") and the compiled
# graph. They hold the code being compiled but are torch's names, never the user's.
_GENERATED_GLOBALS = ("__resume_at_", "__compiled_fn")


@dataclass(slots=True)
class Compiling:
    """What torch's ``_compile`` frame holds about the code being compiled (read-only by convention: a
    frozen dataclass sets each field through ``object.__setattr__``, and one is made twice per compile)."""

    code: types.CodeType
    f_locals: dict[str, Any]
    f_globals: dict[str, Any]
    closure: tuple[Any, ...] | None
    compile_id: str | None
    caller: (
        types.FrameType | None
    )  # the frame that called into the compiled code (and torch's wrappers)
    # what the compile produced, once it has (None while tracing or on failure)
    guarded_code: Any = None
    # The frame's cache entries torch counts this compile against (its CompilationMetrics.cache_size: those of
    # its isolate_recompiles region, with the same ID_MATCH'd objects); None where torch holds no such count.
    cache_entries: int | None = None


def is_torch_wrapper(filename: str) -> bool:
    return filename.endswith(_WRAPPER_FILES)


# torch's ``_compile`` code object, once a walk found it by name: later walks look for this object alone (an
# identity test per frame walked, where its name and file were compared), and walk by name again where
# they find none (a compile of another ``_compile``, or none running).
_compile_code: types.CodeType | None = None


def compiling(start: types.FrameType | None = None) -> Compiling | None:
    """The compile in progress on this thread's stack, or None outside one."""
    global _compile_code
    first: types.FrameType | None = start or sys._getframe(1)
    known = _compile_code
    frame = first
    if known is not None:
        for _ in range(_MAX_DEPTH):
            if frame is None or frame.f_code is known:
                break
            frame = frame.f_back
        else:
            frame = None
        if frame is not None:
            return _read(frame)
        frame = first
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "_compile" and "convert_frame" in code.co_filename:
            _compile_code = code
            return _read(frame)
        frame = frame.f_back
    return None


def _read(frame: types.FrameType) -> Compiling | None:
    """What torch's ``_compile`` frame ``frame`` holds now (None: no code object where torch keeps it)."""
    f = frame.f_locals
    target = f.get("code")
    if not isinstance(target, types.CodeType):
        return None
    compile_id = f.get("compile_id")
    return Compiling(
        code=target,
        f_locals=local if isinstance(local := f.get("locals"), dict) else {},
        f_globals=globs if isinstance(globs := f.get("globals"), dict) else {},
        closure=f.get("closure") if isinstance(f.get("closure"), tuple) else None,
        compile_id=None if spelled(compile_id) == UNKNOWN else str(compile_id),
        caller=frame.f_back,
        guarded_code=f.get("guarded_code"),
        cache_entries=_cache_entries(f.get("cache_size")),
    )


def _cache_entries(cache_size: Any) -> int | None:
    count = getattr(cache_size, "num_cache_entries_with_same_id_matched_objs", None)
    return count if isinstance(count, int) else None


class Named(NamedTuple):
    """The user's function behind a compiled code object, and the class of the instance it ran on (a named
    tuple: each compile start builds one and looks its frame up by it, and a tuple hashes and compares in C,
    where a frozen dataclass runs Python for each)."""

    name: str
    file: str
    line: int
    owner: str | None = None  # the instance's class name (None for a plain function)


# What a code's calls were named, where the name follows from the code and a class alone: a method without
# a closure (the class of its first argument) and torch's wrapper around a module (the module's class). A
# frame's recompiles are named as its first compile was, without walking its class again. Only codes and
# classes are held, never an instance (a model let go must be freed), so a call whose closure decides its
# name (a decorator's wrapper, torch's wrapper around a function) or a nested function, whose module is
# searched, is worked out each time. Keyed by the code's id, the code held with its name, so no id is reused
# while it is kept (bounded: cleared when full).
_NAMED: dict[tuple[int, type], tuple[types.CodeType, Named]] = {}


def resolve(name: str, filename: str, line: int, ctx: Compiling | None) -> Named:
    """The user's function behind the compiled code ``name``/``filename``/``line``."""
    if (
        ctx is None
        or (ctx.code.co_name, ctx.code.co_firstlineno) != (name, line)
        or ctx.code.co_filename != filename
    ):
        return Named(name, filename, line)
    code = ctx.code
    cls = _naming_class(ctx)
    if cls is None:
        return _resolve(name, filename, line, ctx)
    known = _NAMED.get((id(code), cls))
    if known is not None and known[0] is code:
        return known[1]
    named = _resolve(name, filename, line, ctx)
    if named.owner is None and is_torch_wrapper(filename):
        return named  # not named by the module's class after all (a forward without code)
    if len(_NAMED) >= _MAX_CACHED:
        _NAMED.clear()
    _NAMED[(id(code), cls)] = (code, named)
    return named


def _naming_class(ctx: Compiling) -> type | None:
    """The class that, with the code, decides the name of this call (see ``_NAMED``); None where more does."""
    code = ctx.code
    if is_torch_wrapper(code.co_filename):
        target = _wrapper_fn(ctx)  # a module (not a function or a partial): named by its class
        cls = type(target)
        known = _NAMED.get((id(code), cls))
        if known is not None and known[0] is code:
            # a module of this class named this wrapper's calls before: no ``hasattr`` of a module's
            # missing ``__code__`` (nn.Module.__getattr__ raises and formats an AttributeError for it)
            return cls
        return cls if hasattr(target, "forward") and not hasattr(target, "__code__") else None
    if code.co_freevars or "<locals>" in getattr(code, "co_qualname", "<locals>"):
        return None
    return type(_first_argument(code, ctx.f_locals))


def _resolve(name: str, filename: str, line: int, ctx: Compiling) -> Named:
    """:func:`resolve` of a call of the code being compiled, worked out."""
    code = ctx.code
    if is_torch_wrapper(filename):
        return _torch_wrapper_target(ctx) or Named(name, filename, line)
    owner = _method_owner(code, ctx.f_locals, ctx.closure)
    if owner is not None:
        cls, attr, function = owner
        if function is None:  # one of several methods, and which one this call wraps is unknown
            return Named(f"{cls.__name__}.{code.co_name}", filename, line, cls.__name__)
        target = _unwrap(function)
        return Named(
            f"{cls.__name__}.{attr}",
            target.__code__.co_filename,
            target.__code__.co_firstlineno,
            cls.__name__,
        )
    found = _global_function(code, ctx.f_globals, ctx.closure)
    if found is not None:
        key, function = found
        target = _unwrap(function)
        # a bare wrapper: its global's name
        shown = _short(target.__qualname__) if target is not function else key
        return Named(shown, target.__code__.co_filename, target.__code__.co_firstlineno)
    return Named(_short(getattr(code, "co_qualname", name)), filename, line)


def _short(qualname: str) -> str:
    """A qualified name without its enclosing functions: ``Model.forward``, not ``main.<locals>.Model.forward``."""
    return qualname.rsplit("<locals>.", 1)[-1]


def _wrapper_fn(ctx: Compiling) -> Any:
    """What torch's wrapper calls (its closure's ``fn``), None where it holds none."""
    names = ctx.code.co_freevars
    if "fn" not in names:
        return None
    if ctx.closure is None and not torch_info().has("closure_in_compile"):
        # torch hands _compile no closure; the frame's locals hold its free variables' values
        return ctx.f_locals.get("fn")
    if ctx.closure is None or len(ctx.closure) != len(names):
        return None
    try:
        return ctx.closure[names.index("fn")].cell_contents
    except ValueError:  # empty cell
        return None


def _torch_wrapper_target(ctx: Compiling) -> Named | None:
    target = _wrapper_fn(ctx)
    if target is None:
        return None
    for _ in range(16):
        if not isinstance(target, functools.partial):
            break
        target = target.func
    if hasattr(target, "forward") and not hasattr(target, "__code__"):  # an nn.Module
        forward = _unwrap(getattr(type(target), "forward", None))
        code = getattr(forward, "__code__", None)
        if code is not None:
            cls = generated_classes.user_class(type(target))
            return Named(
                f"{cls.__name__}.forward", code.co_filename, code.co_firstlineno, cls.__name__
            )
    target = _unwrap(target)
    code = getattr(target, "__code__", None)
    if code is not None:
        return Named(
            _short(getattr(target, "__qualname__", code.co_name)),
            code.co_filename,
            code.co_firstlineno,
        )
    return None


_Found = tuple[
    tuple[str, Any, Any], ...
]  # (attribute, the attribute's function, the function with the code)
_owners: collections.OrderedDict[tuple[type, types.CodeType], _Found] = collections.OrderedDict()


def _first_argument(code: types.CodeType, f_locals: dict[str, Any]) -> Any:
    """The call's first positional argument: the first parameter, or ``args[0]`` of a ``def f(*args)``."""
    if code.co_argcount >= 1 and code.co_varnames:
        return f_locals.get(code.co_varnames[0])
    varargs = code.co_argcount + code.co_kwonlyargcount  # where the *args name sits in co_varnames
    if code.co_flags & inspect.CO_VARARGS and len(code.co_varnames) > varargs:
        args = f_locals.get(code.co_varnames[varargs])
        if isinstance(args, tuple) and args:
            return args[0]
    return None


def _method_owner(
    code: types.CodeType, f_locals: dict[str, Any], closure: tuple[Any, ...] | None
) -> tuple[type, str, Any] | None:
    """``(class, attribute, function)`` when the code runs as a method of its first argument's class: an
    attribute of that class is the code's function, or a decorator's wrapper whose ``__wrapped__`` chain
    reaches it. ``function`` is None when several attributes hold this code and the closure cannot tell which."""
    instance = _first_argument(code, f_locals)
    if instance is None or isinstance(instance, (type, types.ModuleType, types.FunctionType)):
        return None
    cls = generated_classes.user_class(type(instance))  # FSDP2's FSDP<Name>: the user's <Name>
    key = (cls, code)
    if key not in _owners:
        _owners[key] = _find_in_class(cls, code)
        while len(_owners) > _MAX_CACHED:
            _owners.popitem(last=False)
    found = _this_call(_owners[key], code, closure)
    if found is None:
        return None
    return (cls, found[0], found[1]) if found[1] is not None else (cls, code.co_name, None)


def _this_call(
    found: _Found, code: types.CodeType, closure: tuple[Any, ...] | None
) -> tuple[str, Any] | None:
    """Of the attributes whose functions hold ``code``, the one whose function is this call's: one shared
    decorator's wrapper is one code object for every method it decorates, and only the wrapper's closure
    (the cells holding the function it wraps) says which method this call runs. ``(attribute, None)`` when
    it stays undecided."""
    if code.co_freevars and closure is not None and len(closure) == len(code.co_freevars):
        found = tuple(f for f in found if _same_cells(_attr(f[2], "__closure__"), closure))
    functions = {id(f[2]) for f in found}
    if not found:
        return None
    if len(functions) > 1:
        return found[0][0], None
    named = [
        f for f in found if f[0] == _attr(_unwrap(f[1]), "__name__")
    ]  # an alias: the name it was defined by
    return (named or found)[0][:2]


def _same_cells(cells: Any, closure: tuple[Any, ...]) -> bool:
    return (
        isinstance(cells, tuple)
        and len(cells) == len(closure)
        and all(a is b for a, b in zip(cells, closure))
    )


def _find_in_class(cls: type, code: types.CodeType) -> _Found:
    found: list[tuple[str, Any, Any]] = []
    seen: set[str] = set()
    mro = getattr(cls, "__mro__", ())
    for klass in mro:
        for attr, value in list(vars(klass).items()):
            if attr in seen:  # shadowed by a class earlier in the MRO
                continue
            seen.add(attr)
            # A function, classmethod / staticmethod, property accessor or cached_property.
            for function in (
                _attr(value, "__func__"),
                _attr(value, "fget"),
                _attr(value, "fset"),
                _attr(value, "func"),
                value,
            ):
                holders = _holding(function, code)
                found.extend((attr, function, holder) for holder in holders)
                if holders:
                    break
    if found:
        return tuple(found)
    # Defined in the body of one of these classes but no attribute holds it (replaced, or wrapped without
    # __wrapped__): the code's own function.
    defining = getattr(code, "co_qualname", "").rpartition(".")[0]
    if defining and any(getattr(klass, "__qualname__", None) == defining for klass in mro):
        function = types.SimpleNamespace(__code__=code)
        return ((code.co_name, function, function),)
    return ()


def _holding(function: Any, code: types.CodeType) -> list[Any]:
    """``function`` and the functions in its ``__wrapped__`` chain whose code is ``code``: several when one
    decorator is stacked on itself (two ``deprecate_kwarg`` on one ``forward``), each with its own closure."""
    held = []
    for _ in range(16):
        if function is None:
            break
        if _attr(function, "__code__") is code:
            held.append(function)
        function = _attr(function, "__wrapped__")
    return held


def _attr(value: Any, name: str) -> Any:
    """``getattr(value, name, None)`` that survives objects whose attribute lookup raises."""
    try:
        return getattr(value, name, None)
    except Exception:  # noqa: BLE001 - a foreign __getattr__ (lazy modules, proxies): not a function
        return None


def _global_function(
    code: types.CodeType, f_globals: dict[str, Any], closure: tuple[Any, ...] | None
) -> tuple[str, Any] | None:
    """``(name, function)``: the module-level function whose code this is, or whose decorators' wrappers hold
    it (the one whose wrapper holds this call's closure, when one decorator wraps several). Looked up in the
    decorator's module and in the modules of the functions its closure holds (a decorator imported from
    another module: the decorated function is a global of its own module, not of the decorator's)."""
    if "<locals>" not in getattr(code, "co_qualname", "<locals>"):
        return None  # not a closure: the code's own qualified name is the user's
    namespaces = [f_globals]
    for cell in closure or ():
        held = _attr(_cell_contents(cell), "__globals__")
        if isinstance(held, dict) and all(held is not n for n in namespaces):
            namespaces.append(held)
    for namespace in namespaces:
        found = tuple(
            (key, value, holder)
            for key, value in list(namespace.items())
            if not key.startswith(_GENERATED_GLOBALS)
            for holder in _holding(value, code)
        )
        chosen = _this_call(found, code, closure)
        if chosen is not None and chosen[1] is not None:
            return chosen
    return None


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except (ValueError, AttributeError):  # an empty cell, or not a cell
        return None


def _unwrap(function: Any) -> Any:
    """The innermost ``__wrapped__`` target (functools.wraps), stopping at anything without code."""
    for _ in range(16):
        inner = _attr(function, "__wrapped__")
        if inner is None or _attr(inner, "__code__") is None:
            return function
        function = inner
    return function


def _skipped_dirs() -> tuple[str, ...]:
    """torch, the standard library and recompprof's own hooks (only ``_torch/`` ever sits on a compile's stack;
    the rest of the package, such as the built-in demo, is user code like any other)."""
    import torch

    dirs = [os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__))]
    stdlib = sysconfig.get_paths().get("stdlib")
    if stdlib:
        dirs.append(stdlib)
    return tuple(os.path.normcase(d) + os.sep for d in dirs)


_SKIPPED: tuple[str, ...] | None = None


# file -> None where a call site skips its frames, else whether it is an installed library's: a deep
# stack's frames repeat the same few files, and each compile's call site walks them all.
_FILE_KINDS: dict[str, bool | None] = {}
_UNSEEN = object()


def _file_kind(filename: str) -> bool | None:
    """What ``_FILE_KINDS`` holds for ``filename``, found and kept."""
    if len(_FILE_KINDS) >= 4096:  # bounded: generated code can name many files
        _FILE_KINDS.clear()
    skipped = os.path.normcase(filename).startswith(_SKIPPED or ()) or filename.startswith(
        "<frozen"
    )
    kind = _FILE_KINDS[filename] = None if skipped else call_sites.is_library(filename)
    return kind


def call_site(ctx: Compiling | None, redact: bool = False) -> list[str]:
    """The user frames that called into the compiled code, innermost last, as ``file:line in function``.

    At most five, and always the user's own line (the innermost frame outside an installed library,
    :mod:`recompprof._model.call_sites`): when more than four library frames lie inside it (transformers'
    ``generate()``), the four innermost of them and the user's line."""
    global _SKIPPED
    if ctx is None:
        return []
    if _SKIPPED is None:
        _SKIPPED = _skipped_dirs()
    lines: list[str] = []
    user = None  # the index in ``lines`` of the user's own line
    frame = ctx.caller
    kinds = _FILE_KINDS
    for _ in range(_MAX_DEPTH):
        if frame is None or (len(lines) >= _MAX_CALL_SITE and user is not None):
            break
        filename = frame.f_code.co_filename
        # a function call only for a file not seen yet
        library = kinds.get(filename, _UNSEEN)
        if library is _UNSEEN:
            library = _file_kind(filename)
        if library is not None:
            if user is None and not library:
                user = len(lines)
            lines.append(_call_line(frame, filename, redact, library is True))
        frame = frame.f_back
    if user is not None and user >= _MAX_CALL_SITE:
        lines = lines[: _MAX_CALL_SITE - 1] + [lines[user]]
    return lines[:_MAX_CALL_SITE][::-1]


# (code, instruction, redact) -> (the code, its call-site line): a frame's recompiles are called from the same
# few instructions, and ``f_lineno`` works the line out from the code's line table at every read (a long
# training function's table is long, and cold inside a compile). The code is held, so its id is not reused
# while its lines are kept (bounded: cleared when full).
_LINES: dict[tuple[int, int, bool], tuple[types.CodeType, str]] = {}


def _call_line(frame: types.FrameType, filename: str, redact: bool, library: bool) -> str:
    code = frame.f_code
    key = (id(code), frame.f_lasti, redact)
    known = _LINES.get(key)
    if known is not None and known[0] is code:
        return known[1]
    if redact:  # a library's file from its site-packages on: its own layout, and still a library's
        filename = (
            call_sites.library_path(filename)
            if library
            else "/".join(filename.replace("\\", "/").split("/")[-2:])
        )
    line = f"{filename[:300]}:{frame.f_lineno} in {code.co_name[:100]}"
    if len(_LINES) >= _MAX_CACHED:
        _LINES.clear()
    _LINES[key] = (code, line)
    return line
