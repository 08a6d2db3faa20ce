"""A wrapper frame's guard subjects named by the wrapped function's parameters, judged against torch.

Ground truth is torch's own subject: the same calls are compiled once through a decorator's wrapper and once
on the wrapped function itself (``backend="eager"``, ``dynamic=False``: every changed argument is a real
guard failure and a recompile), and the reason that explains each recompile of the wrapper must name, in its
``parameter``, exactly the subject torch gives for the same change of the wrapped function (``L['sample']``
for ``L['args'][0]``), or nothing where the wrapper cannot be proven to pass the argument on unchanged (a
renamed, popped or rebound argument, a ``**kwargs`` dict that escapes). The grid is wrapper shape x wrapped
function (a module's ``forward``, a function with keyword-only defaults, one with its own ``*args``/``**kwargs``).
The ``subject`` itself stays torch's spelling in both runs (it is the identity other parts key on).
"""

from __future__ import annotations

import functools
import html
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from recompprof._analysis.render.html import render_html
from recompprof._analysis.render.text import render_text
from recompprof._analysis.render.wording import cause_label, parameter_shown
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.watching import Watch
from recompprof._model.events import Compile, Reason
from recompprof._model.subjects import argument_root
from recompprof._torch.parameters import bind, plan
from recompprof.testing import capture_events

Call = tuple[tuple[Any, ...], dict[str, Any]]


class Cfg:
    """A plain object passed by keyword: its attribute's guard is a path below the argument."""

    def __init__(self, flag: bool) -> None:
        self.flag = flag


# -- the wrapped functions -----------------------------------------------------------------------------


def forward(self: Any, sample: Any, timestep: Any, *, scale: float = 1.0, cfg: Any = None) -> Any:
    out = sample * timestep * scale
    return out + 1 if cfg is not None and cfg.flag else out


def keyword_only(x: Any, n: int = 2, *, scale: float = 1.0, cfg: Any = None) -> Any:
    out = x * n * scale
    return out - 1 if cfg is not None and cfg.flag else out


def variadic(x: Any, *rest: Any, **opts: Any) -> Any:
    return x * rest[0] * opts["scale"] + (1 if opts["cfg"].flag else 0)


@dataclass(frozen=True)
class Target:
    name: str
    function: Callable[..., Any]
    method: bool  # a module's forward (compiled as the module)
    calls: Callable[[], list[Call]]  # each differs from the one before in one argument


def _tensor_calls() -> list[Call]:
    cfg = Cfg(True)
    calls: list[Call] = []
    for x, n, scale, flag in (
        (torch.ones(2), 3, 2.0, True),
        (torch.ones(3), 3, 2.0, True),  # a tensor's size, passed by position
        (torch.ones(3), 4, 2.0, True),  # an int, by position
        (torch.ones(3), 4, 3.0, True),  # a float, by keyword
        (torch.ones(3), 4, 3.0, False),  # an attribute of an object passed by keyword
    ):
        calls.append(((x, n), {"scale": scale, "cfg": cfg, "flag": flag}))
    return calls


TARGETS = (
    Target("module_forward", forward, True, _tensor_calls),
    Target("keyword_only_defaults", keyword_only, False, _tensor_calls),
    Target("own_varargs", variadic, False, _tensor_calls),
)


# -- the wrappers ------------------------------------------------------------------------------------


def passthrough(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapped_func(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapped_func


def first_named(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return func(self, *args, **kwargs)

    return wrapper


def renaming(old: str, new: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A deprecated keyword renamed on the way (transformers' deprecate_kwarg does it)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapped_func(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapped_func

    return decorate


def popping(func: Callable[..., Any]) -> Callable[..., Any]:
    """A keyword the wrapper takes for itself (transformers' can_return_tuple pops return_dict)."""

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        plain = kwargs.pop("return_dict", True)
        out = func(self, *args, **kwargs)
        return out if plain else (out,)

    return wrapper


def prepending(value: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapped_func(*args: Any, **kwargs: Any) -> Any:
            return func(value, *args, **kwargs)

        return wrapped_func

    return decorate


def rebinding(func: Callable[..., Any]) -> Callable[..., Any]:
    """Passes on copies: equal values, but nothing the bytecode can prove to be the caller's."""

    @functools.wraps(func)
    def wrapped_func(*args: Any, **kwargs: Any) -> Any:
        args = tuple(args)
        kwargs = dict(kwargs)
        return func(*args, **kwargs)

    return wrapped_func


def _inspect(found: dict[str, Any]) -> None:
    """A helper that receives the dict itself: it could change any key."""
    found.get("scale")


def escaping(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapped_func(*args: Any, **kwargs: Any) -> Any:
        _inspect(kwargs)
        return func(*args, **kwargs)

    return wrapped_func


def _all(root: tuple[str, str, Any, str]) -> bool:
    return True


def _no_keywords(root: tuple[str, str, Any, str]) -> bool:
    return root[1] != "kwargs"


def _nothing(root: tuple[str, str, Any, str]) -> bool:
    return False


def _keys_but(*keys: str) -> Callable[[tuple[str, str, Any, str]], bool]:
    return lambda root: not (root[1] == "kwargs" and root[2] in keys)


@dataclass(frozen=True)
class Shape:
    """A wrapper: how it decorates, what the wrapped function receives of a call (``passes``), what the
    caller passes (``calls``: a renamed keyword by its old name, say) and which subjects must be named."""

    name: str
    decorate: Callable[[Callable[..., Any]], Callable[..., Any]]
    named: Callable[[tuple[str, str, Any, str]], bool]
    calls: Callable[[Call], Call] = lambda call: call
    passes: Callable[[Call], Call] = lambda call: call
    methods_only: bool = False
    functions_only: bool = False


def _renamed_call(call: Call) -> Call:
    args, kwargs = call
    kwargs = dict(kwargs)
    kwargs["factor"] = kwargs.pop("scale")
    return args, kwargs


def _with_return_dict(call: Call) -> Call:
    args, kwargs = call
    return args, {**kwargs, "return_dict": True}


PREPENDED = torch.ones(2)


def _prepended(call: Call) -> Call:
    return (PREPENDED, *call[0]), call[1]


def _without_first(call: Call) -> Call:
    return call[0][1:], call[1]


SHAPES = (
    Shape("functools.wraps(*args, **kwargs)", passthrough, _all),
    Shape("wrapper(self, *args, **kwargs)", first_named, _all),
    Shape(
        "renames a keyword",
        renaming("factor", "scale"),
        _keys_but("factor", "scale"),
        calls=_renamed_call,
    ),
    Shape(
        "pops a keyword",
        popping,
        _keys_but("return_dict"),
        calls=_with_return_dict,
        methods_only=True,
    ),
    Shape(
        "prepends an argument",
        prepending(PREPENDED),
        _all,
        calls=_without_first,
        passes=lambda call: _prepended(_without_first(call)),
        functions_only=True,
    ),
    Shape("rebinds args and kwargs", rebinding, _nothing),
    Shape("passes kwargs to a helper", escaping, _no_keywords),
    Shape("stacked pass-throughs", lambda f: passthrough(first_named(f)), _all),
    Shape(
        "stacked over a renaming one",
        lambda f: passthrough(renaming("factor", "scale")(f)),
        _keys_but("factor", "scale"),
        calls=_renamed_call,
    ),
    Shape(
        "renaming over a pass-through",
        lambda f: renaming("factor", "scale")(passthrough(f)),
        _keys_but("factor", "scale"),
        calls=_renamed_call,
    ),
)


def _shaped(call: Call) -> Call:
    """A call of the grid as ``target`` takes it: the flag is the ``cfg`` object's, mutated in place."""
    args, kwargs = call
    kwargs = dict(kwargs)
    kwargs["cfg"].flag = kwargs.pop("flag")
    return args, kwargs


def _explaining(
    function: Callable[..., Any], method: bool, calls: list[Call]
) -> list[Reason | None]:
    """The reason that explains the compile each call made (None: it compiled nothing new)."""
    torch._dynamo.reset()
    if method:
        module = type("Module", (torch.nn.Module,), {"forward": function})()
        compiled: Callable[..., Any] = torch.compile(module, backend="eager", dynamic=False)
    else:
        compiled = torch.compile(function, backend="eager", dynamic=False)
    found: list[Reason | None] = []
    for call in calls:
        args, kwargs = _shaped(call)
        with capture_events() as events:
            compiled(*args, **kwargs)
        compiles = [e for e in events if isinstance(e, Compile) and not e.backward]
        reasons = [r for c in compiles for r in c.reasons if r.explains_change]
        found.append(reasons[0] if reasons else None)
    return found


CASES = [
    (shape, target)
    for shape, target in itertools.product(SHAPES, TARGETS)
    if not (shape.methods_only and not target.method)
    and not (shape.functions_only and target.method)
]


@pytest.mark.parametrize(("shape", "target"), CASES, ids=[f"{s.name}-{t.name}" for s, t in CASES])
def test_parameter_is_torchs_subject_for_the_wrapped_function(shape: Shape, target: Target) -> None:
    """Each recompile of the wrapper names, in ``parameter``, torch's subject for the same change compiled on
    the wrapped function itself, where the wrapper provably passes the argument on, and nothing elsewhere."""
    calls = [shape.calls(call) for call in target.calls()]
    wrapped = _explaining(shape.decorate(target.function), target.method, calls)
    # the same change as the wrapped function receives it (a renamed keyword by its new name)
    unwrapped = _explaining(
        target.function, target.method, [shape.passes(call) for call in target.calls()]
    )
    checked = named = 0
    for index, (ours, theirs) in enumerate(zip(wrapped, unwrapped)):
        if ours is None:
            assert theirs is None or index == 0, (index, theirs)
            continue
        root = argument_root(ours.subject)
        assert root is not None, ours.subject
        checked += 1
        if ours.parameter is not None:  # sound: whatever it names is torch's own subject
            assert theirs is not None and ours.parameter == theirs.subject, (index, ours, theirs)
            named += 1
        elif shape.named(root) and theirs is not None:  # complete where the wrapper is provable
            assert ours.subject == theirs.subject, (index, ours, theirs)
        else:
            assert not shape.named(root) or theirs is None, (index, ours, theirs)
    assert checked >= 3, wrapped  # the grid's changes recompiled the wrapper
    if shape.named is _all:
        assert named >= 3, wrapped


# -- the rule on its own ------------------------------------------------------------------------------


def test_argument_root_splits_a_subject_at_the_argument() -> None:
    """The root a wrapper's subject is bound by, and the path below it kept as written."""
    assert argument_root("L['kwargs']['past_key_values'].layers[0].keys") == (
        "",
        "kwargs",
        "past_key_values",
        ".layers[0].keys",
    )
    assert argument_root("type(L['args'][0]).x") == ("type(", "args", 0, ").x")
    assert argument_root("L['self'].training") == ("", "self", None, ".training")
    assert argument_root("G['flag']") is None
    assert (
        parameter_shown("L['past_key_values'].layers[0].keys") == "past_key_values.layers[0].keys"
    )
    assert parameter_shown("type(L['sample']).x") == "type(sample).x"


def test_a_deprecated_keyword_renamed_by_the_closure_is_not_named() -> None:
    """The keys a wrapper's code stores or pops, read from the decorator's closure cells (transformers'
    ``deprecate_kwarg``: ``kwargs[new_name] = kwargs.pop(old_name)``), are neither side of the rename."""
    wrapped = renaming("past_key_value", "past_key_values")(keyword_only)
    code, cells = wrapped.__code__, wrapped.__closure__
    assert bind("L['kwargs']['past_key_value']", code, cells) is None
    assert bind("L['kwargs']['past_key_values'].layers[0]", code, cells) is None
    assert bind("L['kwargs']['scale']", code, cells) == "L['scale']"
    assert bind("L['args'][1]", code, cells) == "L['n']"


def test_unknown_uses_prove_nothing() -> None:
    """A key from a local variable, an update(), a dict passed by keyword: torch's spelling stands alone."""

    def deco(func: Callable[..., Any]) -> Callable[..., Any]:
        def by_local(*args: Any, **kwargs: Any) -> Any:
            key = "scale"
            kwargs[key] = 1.0
            return func(*args, **kwargs)

        def updating(*args: Any, **kwargs: Any) -> Any:
            kwargs.update(scale=1.0)
            return func(*args, **kwargs)

        def extra_keyword(*args: Any, **kwargs: Any) -> Any:
            return func(*args, scale=1.0, **kwargs)

        return by_local, updating, extra_keyword

    for wrapper in deco(keyword_only):
        found = bind("L['kwargs']['cfg']", wrapper.__code__, wrapper.__closure__)
        assert found is None, wrapper.__name__


def test_a_parameter_an_inner_function_rebinds_is_not_named() -> None:
    """``nonlocal self; self = ...`` in an inner function rebinds the wrapper's cell: ``self`` proves nothing,
    while the same wrapper with an inner function that only reads it names ``self`` by the wrapped function's
    first parameter."""

    def deco(func: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
        def rebinding(self: Any, *args: Any, **kwargs: Any) -> Any:
            def inner() -> None:
                nonlocal self
                self = None

            return func(self, *args, **kwargs)

        def reading(self: Any, *args: Any, **kwargs: Any) -> Any:
            def inner() -> Any:
                return self

            return func(self, *args, **kwargs)

        return rebinding, reading

    rebinding, reading = deco(keyword_only)
    assert bind("L['self']", rebinding.__code__, rebinding.__closure__) is None
    assert bind("L['self']", reading.__code__, reading.__closure__) == "L['x']"
    assert bind("L['args'][0]", rebinding.__code__, rebinding.__closure__) == "L['n']"


def test_real_decorators_are_judged_by_their_code() -> None:
    """transformers' and diffusers' own wrappers: pass-throughs are proven, the keys they rename or pop are
    not named, and one that rebinds its arguments proves nothing."""
    generic = pytest.importorskip("transformers.utils.generic")
    deprecation = pytest.importorskip("transformers.utils.deprecation")

    def model_forward(
        self: Any, input_ids: Any = None, past_key_values: Any = None, **kwargs: Any
    ) -> Any:
        return input_ids

    tupled = generic.can_return_tuple(model_forward)
    assert bind("L['args'][0]", tupled.__code__, tupled.__closure__) == "L['input_ids']"
    assert bind("L['kwargs']['return_dict']", tupled.__code__, tupled.__closure__) is None
    renamed = deprecation.deprecate_kwarg(
        "past_key_value", new_name="past_key_values", version="99"
    )(model_forward)
    assert (
        bind("L['kwargs']['input_ids']", renamed.__code__, renamed.__closure__) == "L['input_ids']"
    )
    assert bind("L['kwargs']['past_key_values']", renamed.__code__, renamed.__closure__) is None
    assert (
        bind("L['args'][0].training", renamed.__code__, renamed.__closure__) == "L['self'].training"
    )
    if hasattr(generic, "merge_with_config_defaults"):
        merged = generic.merge_with_config_defaults(model_forward)
        assert plan(merged.__code__) is None or not plan(merged.__code__).star  # type: ignore[union-attr]
        assert bind("L['kwargs']['input_ids']", merged.__code__, merged.__closure__) is None


# -- presentation --------------------------------------------------------------------------------------


def _strip(events: list[Any]) -> list[Any]:
    """The events as a run ingested from TORCH_TRACE has them: no closure, so no ``parameter``."""
    out = []
    for event in events:
        if isinstance(event, Compile) and event.reasons:
            reasons = [r.model_copy(update={"parameter": None}) for r in event.reasons]
            event = event.model_copy(update={"reasons": reasons})
        out.append(event)
    return out


def test_report_and_watch_show_the_parameter_beside_torchs_spelling() -> None:
    """A live run of a wrapped forward: the report's causes and reason groups and watch's causes show
    ``timestep (L['args'][1])``; the same events without ``parameter`` (an ingested trace) are the same
    causes with the same counts, shown in torch's spelling alone."""
    torch._dynamo.reset()
    module = type("Module", (torch.nn.Module,), {"forward": first_named(forward)})()
    compiled = torch.compile(module, backend="eager", dynamic=False)
    with capture_events() as events:
        for timestep in (3, 4, 5):
            compiled(torch.ones(2), timestep, scale=2.0)
    live, ingested = build_report(events), build_report(_strip(events))
    assert set(live.causes) == set(ingested.causes) and live.recompiles == ingested.recompiles == 2
    assert [c.recompiles for c in live.causes.values()] == [
        c.recompiles for c in ingested.causes.values()
    ]
    shown = "timestep (L['args'][1])"
    assert {c.parameter for c in live.causes.values()} == {"L['timestep']"}
    text = render_text(live, width=400)
    assert shown in text and text.count(shown) >= 2, text  # a cause and a reason group
    plain = render_text(ingested, width=400)
    assert shown not in plain and "L['args'][1]" in plain
    escaped = html.escape(shown)
    assert escaped in render_html(live) and escaped not in render_html(ingested)
    watch = Watch()
    for event in events:
        if isinstance(event, Compile):
            watch.add("log", event.model_copy(update={"steady_state": True}))
    (cause,) = watch.top_causes(5)
    assert cause_label(cause.category, cause.subject, parameter=cause.parameter) == (
        f"python_constant · {shown}"
    )
