"""Frames of a TORCH_TRACE named as live capture names them, from the trace and the source files.

A trace names only the compiled code object (``co_name``, ``co_filename``, ``co_firstlineno``). The
class of the instance a method ran on comes from the compile's guard tree, which names the type of each
argument it guards ("source=L['self'], ..., type=<class 'm.Net'>"); whether the code is a method, and
what a decorator's wrapper decorates, come from the source files, read where they can be (on the machine
that ran the job); which of several methods one wrapper wraps, from where the compile read what it guards
(each guard's comment). The rules, and where they fall short, are in docs/frames.md.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from recompprof._model import generated_classes
from recompprof._model.events import Frame

# The guard tree torch dumps for each compile names the type of each argument it guards, and of ``args[0]``:
# "source=L['self'], accessed_by=FrameLocalsGuardAccessor(key='self', framelocals_idx=0), type=<class 'm.Net'>".
_LOCAL_TYPE = re.compile(
    r"source=L\['(\w{1,200})'\](\[0\])?, accessed_by=\w{1,100}\(([^)]{0,200})\), type=<class '([\w.<>]{1,300})'>"
)
_TENSOR_SOURCE = re.compile(r"check_tensor\(L\['(\w{1,200})'\](\[0\])?,")
# The code Dynamo generates to resume a function after a graph break: "torch_dynamo_resume_in_forward_at_20".
_RESUME = re.compile(r"torch_dynamo_resume_in_(\w{1,200})_at_(\d{1,9})")
# torch's own wrapper around a compiled module (``inner``, which calls the module it closes over as ``fn``).
_TORCH_WRAPPER_FILES = ("_dynamo/external_utils.py", "_dynamo\\external_utils.py")
# Where a guard's object was read, from the comment torch writes after each guard of the tree:
# "...  # output = func(self, *args, **kwargs)  # utils/generic.py:943 in wrapper".
_TRACED_AT = re.compile(r"([^\s#()]{1,500}\.py):(\d{1,9}) in (\w{1,200})")


def name_frame(
    code_name: str,
    file: str,
    line: int,
    guarded: GuardedArgs | None,
    known_files: Iterable[str],
    scripts: Iterable[str],
) -> Frame:
    """The frame of the code ``code_name`` at ``file:line``: identity (code, owner) and display name.

    ``guarded``: what the compile's guard tree says of its arguments; ``known_files``: the files the trace
    names (to find a class's module next to them); ``scripts``: the files run as ``__main__``.
    """
    guarded = guarded or GuardedArgs({}, None, frozenset())
    known_files, scripts = tuple(known_files), tuple(scripts)  # each is read more than once
    if file.endswith(_TORCH_WRAPPER_FILES):
        module = _module_forward(file, line, guarded, known_files, scripts)
        if module is not None:
            return module
    name = qualified_name(file, line, code_name)
    definition = _definitions(file).get((line, code_name))
    cls = _user_class(_owner(guarded, definition))
    if cls is None:
        return Frame(name=name, file=file, line=line, code_file=file, code_line=line)
    owner, method, user_file, user_line = (
        cls.rsplit(".", 1)[-1],
        name.rsplit(".", 1)[-1],
        file,
        line,
    )
    wrapped = (
        _wrapped_method(cls, definition, known_files, scripts, guarded.traced)
        if definition is not None
        else None
    )
    if wrapped is not None:  # a decorator's wrapper: the method it decorates, as the user wrote it
        method, user_file, user_line = wrapped
    return Frame(
        name=f"{owner}.{method}",
        file=user_file,
        line=user_line,
        code_file=file,
        code_line=line,
        owner=owner,
    )


def _module_forward(
    file: str,
    line: int,
    guarded: GuardedArgs,
    known_files: Iterable[str],
    scripts: Iterable[str],
) -> Frame | None:
    """torch's wrapper around a compiled module, named as live names it: ``<Module>.forward`` at the
    forward's line, the module's class read from the guard on the ``fn`` the wrapper calls, when the
    class's source defines or inherits a ``forward`` (a ``functools.partial`` does not)."""
    cls = guarded.classes.get("fn")
    if cls is None or "." not in cls or "fn" in guarded.tensors:
        return None
    module, _, owner = cls.rpartition(".")
    user = generated_classes.user_class_name(module, owner)
    if user is not None:  # FSDP2's FSDP<Name>, defined in torch: the user's <Name> is named instead
        owner, where = user, _generated_forward(user, known_files, scripts) or (file, line)
    else:
        found = _method_of(cls, lambda node: node.name == "forward", known_files, scripts)
        if found is None:
            return None
        where = found[1:]
    return Frame(
        name=f"{owner}.forward",
        file=where[0],
        line=where[1],
        code_file=file,
        code_line=line,
        owner=owner,
    )


def _generated_forward(
    user: str, known_files: Iterable[str], scripts: Iterable[str]
) -> tuple[str, int] | None:
    """Where the user's class ``user``, which torch generated a class around (FSDP2 on torch that compiles
    it through its wrapper, 2.9), defines ``forward``. The trace names only the generated class, so the
    user's is looked up by name in the files the trace names; None unless exactly one defines it."""
    found = {
        hit
        for source in sorted(set(known_files) | set(scripts))
        for hit in _class_methods(source, user, lambda node: node.name == "forward")
    }
    return found.pop()[1:] if len(found) == 1 else None


def _wrapped_method(
    cls: str,
    wrapper: _Definition,
    known_files: Iterable[str],
    scripts: Iterable[str],
    traced: frozenset[tuple[str, int, str]] = frozenset(),
) -> tuple[str, str, int] | None:
    """``(attribute, file, first line)`` of the method of class ``cls`` (``module.QualName``) that the
    decorator defining ``wrapper`` decorates in the class's source, when exactly one method is, or when
    what the compile traced says which of several it is (:func:`_traced_method`); else the attribute a
    wrapper installed at run time says or is assigned to (``@wraps(cls.forward)``, ``cls.step =
    hook(cls.step)``: torch's hook around every ``Optimizer.step``)."""
    if wrapper.kind != "nested":
        return None
    decorators = frozenset(
        part.rsplit(".", 1)[-1] for part in wrapper.qualname.split(".<locals>.")[:-1]
    )
    candidates = _methods_of(
        cls,
        lambda node: any(_decorator_name(d) in decorators for d in node.decorator_list),
        known_files,
        scripts,
    )
    if len(candidates) > 1:  # one wrapper code object for several methods
        return _traced_method(candidates, traced)
    found = candidates[0] if candidates else None
    attribute = wrapper.wraps or _installed_as(wrapper.file, decorators)
    if found is None and attribute is not None:
        found = _method_of(cls, lambda node: node.name == attribute, known_files, scripts)
    return found


def _traced_method(
    candidates: list[tuple[str, str, int]], traced: frozenset[tuple[str, int, str]]
) -> tuple[str, str, int] | None:
    """Which of several methods one decorator's wrapper wraps this compile ran, from where the compile read
    the objects it guards (``traced``: ``(path, line, function)`` of each guard's comment). A compile traces
    the wrapper, the method it wraps and what that method calls, so the method is one whose body the
    guards were read in; of those, the one no other of the candidates names in its body (CLIP's
    ``forward`` calls ``get_text_features``, so a compile that read guards in both ran ``forward``). None
    when no candidate or several such are seen, or the one seen is named by another candidate (it may
    have been reached from that one, whose body read nothing guarded)."""
    seen = [c for c in candidates if _traced_in(c, traced)]
    named = {
        c[0]: {o[0] for o in candidates if o != c and c[0] in _names_in(o)} for c in candidates
    }
    roots = [c for c in seen if not named[c[0]]]
    return roots[0] if len(roots) == 1 else None


def _traced_in(method: tuple[str, str, int], traced: frozenset[tuple[str, int, str]]) -> bool:
    """Whether a guard was read in the body of ``method`` (``(name, file, first line)``)."""
    name, file, first = method
    definition = _definitions(file).get((first, name))
    if definition is None:
        return False
    where = file.replace(os.sep, "/")
    return any(
        function == name and first <= line <= definition.last and where.endswith(path)
        for path, line, function in traced
    )


def _names_in(method: tuple[str, str, int]) -> frozenset[str]:
    """Every name and attribute the body of ``method`` (``(name, file, first line)``) mentions."""
    name, file, first = method
    definition = _definitions(file).get((first, name))
    return definition.names if definition is not None else frozenset()


def _method_of(
    cls: str,
    pick: Callable[[ast.FunctionDef | ast.AsyncFunctionDef], bool],
    known_files: Iterable[str],
    scripts: Iterable[str],
) -> tuple[str, str, int] | None:
    """``(name, file, first line)`` of the one method of class ``cls`` (``module.QualName``), or of a base
    class, that ``pick`` picks, in the class's source file."""
    found = _methods_of(cls, pick, known_files, scripts)
    return found[0] if len(found) == 1 else None


def _methods_of(
    cls: str,
    pick: Callable[[ast.FunctionDef | ast.AsyncFunctionDef], bool],
    known_files: Iterable[str],
    scripts: Iterable[str],
) -> list[tuple[str, str, int]]:
    """``(name, file, first line)`` of the methods of class ``cls`` (``module.QualName``) that ``pick``
    picks, in the class's source file: those of the class, else of its nearest base that has any."""
    parts = cls.split(".")
    files = set(scripts) if parts[0] == "__main__" else set()
    known = set(known_files)
    for end in range(
        len(parts) - 1, 0, -1
    ):  # the module is some prefix of the class's qualified name
        files.update(_module_files("/".join(parts[:end]), known))
    for file in sorted(files):
        found = _class_methods(file, parts[-1], pick)
        if found:
            return found
    return []


@functools.lru_cache(maxsize=256)
def _installed(file: str) -> dict[str, frozenset[str]]:
    """For each function ``file`` calls in an assignment to an attribute (``cls.step = hook(cls.step)``),
    the attributes it is assigned to."""
    try:
        tree = ast.parse(Path(file).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = _decorator_name(node.value)
            for target in node.targets:
                if called is not None and isinstance(target, ast.Attribute):
                    out.setdefault(called, set()).add(target.attr)
    return {called: frozenset(attrs) for called, attrs in out.items()}


def _installed_as(file: str, decorators: frozenset[str]) -> str | None:
    """The one attribute that the decorator(s) defining a wrapper are installed on at run time in ``file``."""
    attributes = {a for d in decorators for a in _installed(file).get(d, ())}
    return next(iter(attributes)) if len(attributes) == 1 else None


def qualified_name(file: str, line: int, name: str) -> str:
    """``Class.method`` for the function defined at ``file:line``, as live capture names it.

    A trace names only the code object, so its class comes from the source file where it can be read
    (on the machine that ran the job). What the trace cannot tell, it leaves as the code's name: the
    attribute a decorator's wrapper stands for (live capture names that attribute).
    """
    definitions = _definitions(file)
    found = definitions.get((line, name))
    if found is not None:
        return found.qualname.rsplit("<locals>.", 1)[-1]
    resume = _RESUME.fullmatch(name)
    if (
        resume is not None
    ):  # Dynamo's resume function: named in the scope of the function it resumes
        function, at = resume.group(1), int(resume.group(2))
        starts = [first for first, defined in definitions if defined == function and first <= at]
        if starts:
            scope = (
                definitions[(max(starts), function)]
                .qualname.rsplit("<locals>.", 1)[-1]
                .rpartition(".")[0]
            )
            return f"{scope}.{name}" if scope else name
    return name


@dataclasses.dataclass(frozen=True)
class _Definition:
    """A function as its source defines it."""

    qualname: str
    kind: str  # "method" (in a class body), "nested" (in a function: a decorator's wrapper, say) or "function"
    first: (
        str | None
    )  # what its first positional argument is: "self" (the parameter's name), "args[0]", or None
    # the attribute its ``@wraps(...)`` names (``@wraps(cls.forward)``), if it does
    wraps: str | None = None
    file: str = ""  # the source file that defines it
    last: int = 0  # the last line of its body
    names: frozenset[str] = frozenset()  # every name and attribute its body mentions


@functools.lru_cache(maxsize=256)
def _definitions(file: str) -> dict[tuple[int, str], _Definition]:
    """(first line, name) -> definition of every function in ``file``; empty if it cannot be read."""
    try:
        tree = ast.parse(Path(file).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[tuple[int, str], _Definition] = {}

    def visit(node: ast.AST, prefix: str, kind: str, scope: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                # A static or class method's first argument is no instance.
                static = kind == "method" and any(
                    isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                    for d in child.decorator_list
                )
                out[(first, child.name)] = out[(child.lineno, child.name)] = _Definition(
                    qualname,
                    "function" if static else kind,
                    _first_argument(child.args),
                    _wrapped_attribute(child, scope),
                    file,
                    child.end_lineno or child.lineno,
                    _mentioned(child),
                )
                visit(child, f"{qualname}.<locals>.", "nested", child)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", "method", None)
            else:
                visit(child, prefix, kind, scope)

    visit(tree, "", "function", None)
    return out


def _module_files(module_path: str, known: set[str]) -> list[str]:
    """Source files of module ``a/b/c`` next to the files the trace names (``.../a/x.py`` puts it at
    ``.../a/b/c.py``), that exist on this machine."""
    top = f"/{module_path.split('/', 1)[0]}/"
    roots = {file[:index] for file in known if (index := file.replace(os.sep, "/").rfind(top)) >= 0}
    # a top-level module of one file names itself: ``.../out/gen.py`` is module ``gen``
    roots.update(
        file[: -len(end)]
        for file in known
        for end in (f"/{module_path}.py", f"/{module_path}/__init__.py")
        if file.replace(os.sep, "/").endswith(end)
    )
    return [
        path
        for root in sorted(roots)[:16]
        for path in (f"{root}/{module_path}.py", f"{root}/{module_path}/__init__.py")
        if os.path.isfile(path)
    ]


@functools.lru_cache(maxsize=256)
def _classes(file: str) -> dict[str, list[ast.ClassDef]]:
    """Class definitions in ``file`` by name; empty if it cannot be read."""
    try:
        tree = ast.parse(Path(file).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, list[ast.ClassDef]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            out.setdefault(node.name, []).append(node)
    return out


def _class_methods(
    file: str,
    cls: str,
    pick: Callable[[ast.FunctionDef | ast.AsyncFunctionDef], bool],
    depth: int = 0,
) -> list[tuple[str, str, int]]:
    """``(name, file, first line)`` of the methods of class ``cls`` that ``pick`` picks: those of its body,
    else those of its first base (defined in the same file or imported into it relatively, ``from .adam
    import Adam``) that has any; empty when the class is not there once."""
    found = _classes(file).get(cls, [])
    if len(found) != 1 or depth > 8:
        return []
    methods = [
        (node.name, file, min([node.lineno, *(d.lineno for d in node.decorator_list)]))
        for node in found[0].body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and pick(node)
    ]
    if methods:
        return methods
    for base in found[0].bases:
        if not isinstance(base, ast.Name):
            continue
        where = file if base.id in _classes(file) else _imported_from(file, base.id)
        if where is not None and (inherited := _class_methods(where, base.id, pick, depth + 1)):
            return inherited
    return []


def _imported_from(file: str, name: str) -> str | None:
    """The file a relative import in ``file`` takes ``name`` from (``from .adam import Adam``), if it exists."""
    return _relative_imports(file).get(name)


@functools.lru_cache(maxsize=256)
def _relative_imports(file: str) -> dict[str, str]:
    """Name -> source file of every relative ``from .module import name`` at the top of ``file``."""
    try:
        tree = ast.parse(Path(file).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.level and node.module):
            continue
        parents = Path(file).parents
        if node.level - 1 >= len(parents):
            continue
        path = parents[node.level - 1].joinpath(*node.module.split(".")).with_suffix(".py")
        if path.is_file():
            out.update({alias.asname or alias.name: str(path) for alias in node.names})
    return out


def _wrapped_attribute(
    function: ast.FunctionDef | ast.AsyncFunctionDef, scope: ast.AST | None
) -> str | None:
    """``forward`` for a function decorated ``@wraps(cls.forward)``, or ``@wraps(forward)`` after
    ``forward = cls.forward`` in the enclosing function ``scope``."""
    for decorator in function.decorator_list:
        if not (
            isinstance(decorator, ast.Call)
            and _decorator_name(decorator) == "wraps"
            and decorator.args
        ):
            continue
        target = decorator.args[0]
        if isinstance(target, ast.Attribute):
            return target.attr
        if isinstance(target, ast.Name) and scope is not None:
            found = _assigned_attribute(scope, target.id)
            if found is not None:
                return found
    return None


def _assigned_attribute(scope: ast.AST, name: str) -> str | None:
    """``forward`` when ``scope`` assigns ``name = something.forward``."""
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Attribute)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ):
            return node.value.attr
    return None


def _decorator_name(node: ast.expr) -> str | None:
    """``deco`` of ``@deco``, ``@module.deco`` and ``@deco(...)``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _mentioned(function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """The names and attributes a function's body mentions (``self.get_text_features`` and ``forward``)."""
    out: set[str] = set()
    for statement in function.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name):
                out.add(node.id)
            elif isinstance(node, ast.Attribute):
                out.add(node.attr)
    return frozenset(out)


def _first_argument(args: ast.arguments) -> str | None:
    positional = [*args.posonlyargs, *args.args]
    if positional:
        return positional[0].arg
    return f"{args.vararg.arg}[0]" if args.vararg is not None else None


@dataclasses.dataclass(frozen=True)
class GuardedArgs:
    """What one compile's guard tree says of the frame's arguments: classes by source (``self``,
    ``args[0]``), the first local's name, and the sources that are tensors."""

    classes: dict[str, str]
    first_local: str | None
    tensors: frozenset[str]
    # where the compile read what it guards: ``(path, line, function)`` of each guard's comment
    traced: frozenset[tuple[str, int, str]] = frozenset()


def guarded_args(payload: str) -> GuardedArgs:
    """What the guard tree ``payload`` of one compile says of the frame's arguments."""
    classes: dict[str, str] = {}
    first_local = None
    for match in _LOCAL_TYPE.finditer(payload):
        local, item, accessor, cls = match.groups()
        source = f"{local}[0]" if item else local
        classes.setdefault(source, cls)
        if not item and accessor.endswith("framelocals_idx=0"):
            first_local = local
    tensors = frozenset(
        f"{local}[0]" if item else local for local, item in _TENSOR_SOURCE.findall(payload)
    )
    traced = frozenset(
        (path, int(line), function)
        # A match never spans lines; searched only where a line names a .py file, as the pattern is slow
        # over the long lines of other text a tree holds (the global state's JSON): ~0.7 ms per compile.
        for text in payload.split("\n")
        if ".py:" in text
        for path, line, function in _TRACED_AT.findall(text)
    )
    return GuardedArgs(classes, first_local, tensors, traced)


def _user_class(cls: str | None) -> str | None:
    """``module.Name`` of the user's class where torch generated ``cls`` around it (FSDP2's ``FSDP<Name>``:
    :mod:`recompprof._model.generated_classes`); the trace names only the generated class, so the user's
    class's module is unknown: the generated one's stays."""
    if cls is None:
        return None
    module, _, name = cls.rpartition(".")
    user = generated_classes.user_class_name(module, name)
    return f"{module}.{user}" if user is not None else cls


def _owner(guarded: GuardedArgs, definition: _Definition | None) -> str | None:
    """The name of the class of the instance a compiled function ran as a method of, by the rule live
    capture follows (see docs/frames.md): its first argument (``args[0]`` of a ``def wrapper(*args)``),
    its class taken from the guard tree, when the source defines the function in a class body, or
    nested in a function (a decorator's wrapper) with ``self`` or ``*args`` first; never a tensor or a
    builtin. A method that never reads ``self`` (or a compile that installed no guards) says nothing of
    it: the class is unknown (None), and the frame is named by the function's qualified name.
    Without the source: ``self`` or ``args[0]`` as the first local."""
    source = _instance_source(guarded, definition)
    if source is None:
        return None
    if source.endswith("[0]") and guarded.first_local not in (None, source[:-3]):
        return None  # *args is not the first local: the tuple guarded is another one
    cls = guarded.classes.get(source)
    if cls is None:  # the instance's class is unknown (a subclass may run the method it inherits)
        return None
    if "." not in cls or source in guarded.tensors:  # builtins print without a module
        return None
    return cls


def _instance_source(guarded: GuardedArgs, definition: _Definition | None) -> str | None:
    """The argument that would be the instance (``self``, ``args[0]``), if the function can be a method."""
    if definition is None:
        return {"self": "self", "args": "args[0]"}.get(guarded.first_local or "")
    source = definition.first
    if definition.kind == "function" or source is None:
        return None
    if definition.kind == "nested" and source != "self" and not source.endswith("[0]"):
        return None
    return source
