"""The category rule tested over torch's own vocabulary: one trigger per guard kind × the subjects
that carry it, with torch as the ground truth.

Each cell is a tiny real function compiled with ``backend="eager"`` and called twice, with a change
between the calls that fails exactly one guard kind of torch's guard builder
(``torch/_dynamo/guards.py``: TENSOR_MATCH's size, stride, rank, dtype, requires_grad and dispatch
keys; TYPE_MATCH; ID_MATCH; EQUALS_MATCH / CONSTANT_MATCH on a string and a bool; NONE_MATCH;
SEQUENCE_LENGTH; DICT_KEYS_MATCH; DUPLICATE_INPUT on tensors and on other objects; the dynamic-dim
marks; SHAPE_ENV; GLOBAL_STATE; TORCH_FUNCTION_STATE; DEFAULT_DEVICE; DUAL_LEVEL;
FUNCTORCH_STACK_MATCH; AUTOGRAD_SAVED_TENSORS_HOOKS), carried by each kind of subject
(:data:`SUBJECTS`). The expected category comes from :func:`expected`, the rule written once from
what the guard checks and what holds the object; torch's recompile reason is the input. A cell torch
cannot produce is listed in :data:`CANNOT` with the reason (counted in the test ids as skips).

The live category must be the expected one; the text alone (what ``ingest`` has) must give the same
category or ``other`` (recompprof's "unknown"), never another category.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import recompprof
from recompprof import FIX_HINTS
from recompprof._model.events import Compile, Reason
from recompprof._model.reasons import parse_guard_failure
from recompprof._torch.versions import torch_info

pytestmark = pytest.mark.torch_compat
INFO = torch_info()

Read = Callable[[torch.Tensor, Any, Any], torch.Tensor]


# -- what the compiled code reads (Dynamo inlines these; each installs the guard kind under test) --


def read_tensor(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t + x.sum()


def read_value(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t * (2 if x == "a" else 3)


def read_flag(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t * (2 if x else 3)


def read_optional(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t * 2 if x is None else t + x


def read_first(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t + x[0]


def read_length(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t * len(x)


def read_keys(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t * sum(x.values())


def read_call(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return x(t)


def read_tensors(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t + x + y


def read_lists(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t * (2 if x[0] == "a" else 3) + (1 if y[0] == "a" else 0)


def read_branch(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return t.sum() + (x.sum() if x.shape[0] > 5 else x.sum() * 2)


def double(t: torch.Tensor) -> torch.Tensor:
    return t * 2


def triple(t: torch.Tensor) -> torch.Tensor:
    return t * 3


def _inference(t: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return t.clone()


def _one_list() -> tuple[list[str], list[str]]:
    shared = ["a"]
    return shared, shared


def _marked(size: int) -> torch.Tensor:
    t = torch.ones(size)
    torch._dynamo.mark_dynamic(t, 0)
    return t


@dataclasses.dataclass(frozen=True)
class Trigger:
    """One guard kind: what the code reads, and the values of the two calls (``x`` and ``y``)."""

    guard: str  # torch's guard kind (guards.py's builder method) and what fails
    read: Read
    first: Callable[[], tuple[Any, Any]]
    second: Callable[[Any, Any], tuple[Any, Any]]  # from the first call's values


_SHARED = torch.ones(2)
TRIGGERS: dict[str, Trigger] = {
    "size": Trigger(
        "TENSOR_MATCH size",
        read_tensor,
        lambda: (torch.ones(2), None),
        lambda x, y: (torch.ones(3), y),
    ),
    "stride": Trigger(
        "TENSOR_MATCH stride",
        read_tensor,
        lambda: (torch.ones(2, 3), None),
        lambda x, y: (torch.ones(3, 2).t(), y),
    ),
    "ndim": Trigger(
        "TENSOR_MATCH rank",
        read_tensor,
        lambda: (torch.ones(2), None),
        lambda x, y: (torch.ones(2, 1), y),
    ),
    "dtype": Trigger(
        "TENSOR_MATCH dtype",
        read_tensor,
        lambda: (torch.ones(2), None),
        lambda x, y: (torch.ones(2, dtype=torch.float64), y),
    ),
    "requires_grad": Trigger(
        "TENSOR_MATCH requires_grad",
        read_tensor,
        lambda: (torch.ones(2), None),
        lambda x, y: (torch.ones(2, requires_grad=True), y),
    ),
    "dispatch_keys": Trigger(
        "TENSOR_MATCH dispatch keys (an inference tensor)",
        read_tensor,
        lambda: (torch.ones(2), None),
        lambda x, y: (_inference(torch.ones(2)), y),
    ),
    "value": Trigger(
        "EQUALS_MATCH on a str", read_value, lambda: ("a", None), lambda x, y: ("b", y)
    ),
    "flag": Trigger(
        "ID_MATCH / BOOL_MATCH on a bool", read_flag, lambda: (True, None), lambda x, y: (False, y)
    ),
    "none": Trigger(
        "NONE_MATCH (None, then a tensor)",
        read_optional,
        lambda: (None, None),
        lambda x, y: (torch.ones(2), y),
    ),
    "type": Trigger(
        "TYPE_MATCH (a list, then a tuple)",
        read_first,
        lambda: ([torch.ones(2)], None),
        lambda x, y: ((x[0],), y),
    ),
    "length": Trigger(
        "SEQUENCE_LENGTH on a list",
        read_length,
        lambda: ([1, 2], None),
        lambda x, y: ([1, 2, 3], y),
    ),
    "keys": Trigger(
        "DICT_KEYS_MATCH", read_keys, lambda: ({"a": 1}, None), lambda x, y: ({"b": 1}, y)
    ),
    "identity": Trigger(
        "ID_MATCH on a function", read_call, lambda: (double, None), lambda x, y: (triple, y)
    ),
    "alias_tensor": Trigger(
        "DUPLICATE_INPUT on tensors (one tensor, then two)",
        read_tensors,
        lambda: (_SHARED, _SHARED),
        lambda x, y: (x, torch.ones(2)),
    ),
    "alias_object": Trigger(
        "DUPLICATE_INPUT on lists (one list, then two)",
        read_lists,
        _one_list,
        lambda x, y: (x, ["a"]),
    ),
    "mark_dynamic": Trigger(
        "the dynamic-dim marks (not marked, then marked)",
        read_tensor,
        lambda: (torch.ones(3), None),
        lambda x, y: (_marked(3), y),
    ),
    "symbolic_shape": Trigger(
        "SHAPE_ENV (a marked dim past a branch on its size)",
        read_branch,
        lambda: (_marked(3), None),
        lambda x, y: (_marked(7), y),
    ),
}


# The triggers that replace a tensor by another (a new size, a mark ...): what changed is the tensor's property.
_TENSOR_TRIGGERS = frozenset(
    {
        "size",
        "stride",
        "ndim",
        "dtype",
        "requires_grad",
        "dispatch_keys",
        "mark_dynamic",
        "symbolic_shape",
    }
)


def expected(trigger: str, subject: str) -> str:
    """The category rule: what the guard checks first, then what holds the object.

    A tensor's property, a type, a length, a dict's keys, a function's identity, a dynamic-dim mark and
    a symbolic relation are what changed wherever the tensor or value lives. A Python value (a string,
    a flag, None) is a value of what holds it: a module's attribute, a global, else a constant (a None
    that came or went is the argument's kind: ``type``). One object held in two places and then not is
    aliasing for tensors; any other object is the module's attribute on a module, else an identity.
    Below ``module_tensors_by_value`` torch guards a module's tensor by identity alone: replacing it is
    then the module's attribute, whatever changed about the tensor.
    """
    holder = {"module attribute": "module_attribute", "global": "global"}.get(subject)
    by_identity = holder == "module_attribute" and not INFO.has("module_tensors_by_value")
    if by_identity and trigger in _TENSOR_TRIGGERS:  # the module's tensor was replaced
        return holder
    if trigger in ("value", "flag"):
        return holder or "python_constant"
    if trigger == "none":
        return holder or "type"
    if trigger == "alias_object":
        return "module_attribute" if subject == "module attribute" else "object_identity"
    return {
        "length": "container_length",
        "keys": "dict_keys",
        "identity": "object_identity",
        "alias_tensor": "aliasing",
    }.get(trigger, trigger)


# -- where the object lives: each subject compiles a function that reads x and y from there --------


class Cell:
    """A compiled function reading ``x`` and ``y`` from one kind of subject; :meth:`call` runs it."""

    def __init__(self, read: Read) -> None:
        self.read = read

    def set(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y

    def call(self) -> None:
        raise NotImplementedError


class Argument(Cell):
    def __init__(self, read: Read) -> None:
        super().__init__(read)

        def fn(t: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
            return read(t, x, y)

        self.fn = torch.compile(fn, backend="eager")

    def call(self) -> None:
        self.fn(torch.ones(2), self.x, self.y)


class Holder(torch.nn.Module):
    def __init__(self, read: Read) -> None:
        super().__init__()
        self.read = read

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.read(t, self.x, self.y)


class ModuleAttribute(Cell):
    def __init__(self, read: Read) -> None:
        super().__init__(read)
        self.module = Holder(read)
        self.fn = torch.compile(self.module, backend="eager")

    def set(self, x: Any, y: Any) -> None:
        self.module.x, self.module.y = x, y

    def call(self) -> None:
        self.fn(torch.ones(2))


class Config:
    """A plain object passed in (a config, a cache): not a module."""


class ObjectAttribute(Cell):
    def __init__(self, read: Read) -> None:
        super().__init__(read)
        self.config = Config()

        def fn(t: torch.Tensor, cfg: Config) -> torch.Tensor:
            return read(t, cfg.x, cfg.y)  # type: ignore[attr-defined]

        self.fn = torch.compile(fn, backend="eager")

    def set(self, x: Any, y: Any) -> None:
        self.config.x, self.config.y = x, y  # type: ignore[attr-defined]

    def call(self) -> None:
        self.fn(torch.ones(2), self.config)


class Global(Cell):
    def __init__(self, read: Read) -> None:
        super().__init__(read)
        self.scope: dict[str, Any] = {"read": read}
        exec("def fn(t):\n    return read(t, X, Y)\n", self.scope)
        self.fn = torch.compile(self.scope["fn"], backend="eager")

    def set(self, x: Any, y: Any) -> None:
        self.scope["X"], self.scope["Y"] = x, y

    def call(self) -> None:
        self.fn(torch.ones(2))


class Closure(Cell):
    def __init__(self, read: Read) -> None:
        super().__init__(read)
        x: Any = None
        y: Any = None

        def fn(t: torch.Tensor) -> torch.Tensor:
            return read(t, x, y)

        def assign(a: Any, b: Any) -> None:
            nonlocal x, y
            x, y = a, b

        self.fn, self.assign = torch.compile(fn, backend="eager"), assign

    def set(self, x: Any, y: Any) -> None:
        self.assign(x, y)

    def call(self) -> None:
        self.fn(torch.ones(2))


class KeywordArgument(Cell):
    def __init__(self, read: Read) -> None:
        super().__init__(read)

        def fn(t: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            return read(t, kwargs["x"], kwargs["y"])

        self.fn = torch.compile(fn, backend="eager")

    def call(self) -> None:
        self.fn(torch.ones(2), x=self.x, y=self.y)


class ListItem(Cell):
    def __init__(self, read: Read) -> None:
        super().__init__(read)

        def fn(t: torch.Tensor, xs: list[Any]) -> torch.Tensor:
            return read(t, xs[0], xs[1])

        self.fn = torch.compile(fn, backend="eager")

    def call(self) -> None:
        self.fn(torch.ones(2), [self.x, self.y])


SUBJECTS: dict[str, type[Cell]] = {
    "argument": Argument,
    "module attribute": ModuleAttribute,
    "object attribute": ObjectAttribute,
    "global": Global,
    "closure cell": Closure,
    "kwargs item": KeywordArgument,
    "list item": ListItem,
}

# Cells torch cannot produce, with the reason (each is a skipped test id).
CANNOT: dict[tuple[str, str], str] = {}


# -- global state: no subject; the change is around the second call --------------------------------


@contextlib.contextmanager
def function_mode() -> Iterator[None]:
    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    with Passing():
        yield


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


@contextlib.contextmanager
def default_dtype() -> Iterator[None]:
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(torch.float32)


@contextlib.contextmanager
def grad_and_autocast() -> Iterator[None]:
    with torch.no_grad(), torch.autocast("cpu"):
        yield


def around_second(enter: Callable[[], Any]) -> Callable[[Callable[..., Any]], None]:
    """Call once as is, then once inside ``enter()``."""

    def run(compiled: Callable[..., Any]) -> None:
        compiled(torch.ones(2, 2))
        with enter():
            compiled(torch.ones(2, 2))

    return run


def vmap_first(compiled: Callable[..., Any]) -> None:
    """Call once under ``vmap`` (torch guards the functorch stack), then once as is."""
    torch.func.vmap(compiled)(torch.ones(3, 2, 2))
    compiled(torch.ones(2, 2))


# name -> (torch's guard kind, the two calls, the expected categories in torch's order)
STATES: dict[str, tuple[str, Callable[[Callable[..., Any]], None], list[str]]] = {
    "grad_mode": ("GLOBAL_STATE grad_mode", around_second(torch.no_grad), ["grad_mode"]),
    "autocast": (
        "GLOBAL_STATE autocast",
        around_second(lambda: torch.autocast("cpu")),
        ["autocast"],
    ),
    "grad_mode+autocast": (
        "GLOBAL_STATE, two changes",
        around_second(grad_and_autocast),
        ["grad_mode", "autocast"],
    ),
    "deterministic": (
        "GLOBAL_STATE deterministic algorithms",
        around_second(deterministic),
        ["global_state"],
    ),
    "default_dtype": ("GLOBAL_STATE default dtype", around_second(default_dtype), ["global_state"]),
    "function_mode": ("TORCH_FUNCTION_STATE", around_second(function_mode), ["global_state"]),
    "default_device": (
        "DEFAULT_DEVICE",
        around_second(lambda: torch.device("meta")),
        ["global_state"],
    ),
    "functorch_stack": ("FUNCTORCH_STACK_MATCH", vmap_first, ["global_state"]),
    "dual_level": ("DUAL_LEVEL", around_second(contextlib.nullcontext), ["global_state"]),
    "saved_tensors_hooks": (
        "AUTOGRAD_SAVED_TENSORS_HOOKS",
        around_second(contextlib.nullcontext),
        ["global_state"],
    ),
}
STATE_CANNOT: dict[str, str] = {
    "dual_level": "torch guards the forward-AD level only when the compiled code enters dual_level() "
    "itself, and a nested level is unsupported there (Nested forward mode AD is not supported); a call "
    "inside an outer dual_level() does not recompile",
    "saved_tensors_hooks": "entering saved_tensors_hooks() around a call (either order, inputs that "
    "require grad) recompiles nothing on this torch: its guard passes",
}


# -- running a cell --------------------------------------------------------------------------------


def _recompiles(tmp_path: Path, run: Callable[[], None]) -> tuple[list[Reason], list[str]]:
    """The live reasons of ``run``'s recompiles, and torch's own texts for them (what ingest reads)."""
    from torch._dynamo.utils import guard_failures

    torch._dynamo.reset()
    before = {code: len(texts) for code, texts in guard_failures.items()}
    with recompprof.attach(run_dir=tmp_path) as session:
        run()
    reasons = [
        r
        for e in session.recent_events()
        if isinstance(e, Compile) and e.is_recompile and not e.backward
        for r in e.reasons
    ]
    texts = [
        str(t)
        for code, all_texts in guard_failures.items()
        for t in all_texts[before.get(code, 0) :]
    ]
    return reasons, texts


def _check(reasons: list[Reason], texts: list[str], want: list[str]) -> None:
    assert reasons, "torch did not recompile"
    explaining = next(r for r in reasons if r.explains_change)
    live = [explaining.category]
    if len(want) > 1:  # one guard, several changes: every one is filed
        live = [r.category for r in reasons if r.text == explaining.text]
    described = [(r.category, r.subject, r.text[:160]) for r in reasons]
    assert live == want, described
    assert all(FIX_HINTS[c] and FIX_HINTS[c] != FIX_HINTS["other"] for c in want)
    # The text alone: the same category, or "other" where only the live object can tell; never another.
    text_says = {r.category for t in texts for r in parse_guard_failure(t)}
    assert text_says & (set(want) | {"other"}), (text_says, texts)
    explained_text = [
        r.category for t in texts for r in parse_guard_failure(t) if r.text == explaining.text
    ]
    assert set(explained_text) <= set(want) | {"other"}, (explained_text, texts)


GRID = [(trigger, subject) for trigger in TRIGGERS for subject in SUBJECTS]


@pytest.mark.parametrize(("trigger", "subject"), GRID, ids=[f"{t}-{s}" for t, s in GRID])
def test_guard_kind_on_subject_is_filed_by_the_rule(
    trigger: str, subject: str, tmp_path: Path
) -> None:
    """A change that fails exactly this guard kind on this kind of subject is filed under the category
    the rule gives (what the guard checks, then what holds the object), with that category's fix."""
    if (trigger, subject) in CANNOT:
        pytest.skip(CANNOT[trigger, subject])
    spec = TRIGGERS[trigger]
    cell = SUBJECTS[subject](spec.read)

    def run() -> None:
        x, y = spec.first()
        cell.set(x, y)
        cell.call()
        cell.set(*spec.second(x, y))
        cell.call()

    reasons, texts = _recompiles(tmp_path, run)
    _check(reasons, texts, [expected(trigger, subject)])


@pytest.mark.parametrize("state", list(STATES))
def test_global_state_change_is_filed_by_what_changed(state: str, tmp_path: Path) -> None:
    """A change of torch's global state around the second call is filed under what changed: grad mode,
    autocast (both, when both changed at once), else global state."""
    if state in STATE_CANNOT:
        pytest.skip(STATE_CANNOT[state])
    if state == "function_mode" and not INFO.has("function_mode_guard"):
        pytest.skip(INFO.why_off("function_mode_guard"))
    _, calls, want = STATES[state]
    if state == "grad_mode+autocast" and not INFO.has("autocast_in_global_state"):
        want = ["grad_mode"]  # torch names the grad mode alone: the autocast change is not seen
    if state == "default_device" and not INFO.has("default_device_guard"):
        want = ["device"]  # torch reports the new tensors' device change

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t @ t

    compiled = torch.compile(fn, backend="eager")
    reasons, texts = _recompiles(tmp_path, lambda: calls(compiled))
    _check(reasons, texts, want)


def test_the_grid_covers_every_trigger_and_subject() -> None:
    """The grid is every trigger on every subject plus the global-state triggers, each cell either run
    or skipped with its reason; the figures the note reports are these."""
    assert len(GRID) == len(TRIGGERS) * len(SUBJECTS) == 17 * 7
    assert set(CANNOT) <= set(GRID) and set(STATE_CANNOT) <= set(STATES)
