"""Small, real torch.compile recompile scenarios: one user function recompiled for one known reason.

Each ``scenario_<name>(compile)`` takes a ``compile`` callable (``lambda fn: torch.compile(fn,
backend="eager")``), calls the compiled function so that it recompiles for exactly one reason, and is
registered in ``SCENARIOS`` with what it should produce: the category, the number of recompiles, the
user function's name (the frame) and the guarded subject. Call ``torch._dynamo.reset()`` before each
scenario: the user functions are nested, so their code objects (and torch's caches) outlive one run.
``run_scenario`` does that and observes torch directly (``guard_failures`` and the recompiles log).
"""

from __future__ import annotations

import contextlib
import copy
import enum
import gc
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

Compile = Callable[[Any], Any]

SCALE = 1.0  # the guarded module global of scenario_global
_OPT = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)


@dataclass(frozen=True)
class Older:
    """How a scenario comes out on torch older than ``version``, where torch reports less (docs/compatibility.md)."""

    version: tuple[int, int]
    category: str | None  # the explaining reason's category; None: the recompile carries no reason
    why: str
    recompiles: int | None = None  # None: as declared
    logged: bool = True  # torch logs the recompile under TORCH_LOGS=recompiles
    subject: str | None = None  # None: as declared
    since: tuple[int, int] = (0, 0)  # applies from this version up to (not including) ``version``
    # from the text alone in another process (ingest), where that differs
    text_category: str | None = None


@dataclass(frozen=True)
class Scenario:
    """What a scenario is expected to produce on torch 2.13 (CPU), and on older torch where it differs."""

    name: str
    run: Callable[[Compile], None]
    category: str
    recompiles: int
    frame: str
    subject: str
    # invalidated entries never reach guard_failures (torch returns before appending); only the log has them
    in_guard_failures: bool = True
    older: tuple[
        Older, ...
    ] = ()  # oldest first: the first whose range holds the running torch applies
    # What the text alone gives (``recompprof ingest``: no live objects), where only the live objects tell.
    text_category: str | None = None

    def on(self, version: tuple[int, int]) -> Older | None:
        """The degraded outcome on torch ``version``, or None where the declaration above holds."""
        return next((o for o in self.older if o.since <= version < o.version), None)

    def from_text(self, version: tuple[int, int], same_process: bool) -> str:
        """The category the reason text alone yields on torch ``version``: parsed in the process that ran the
        scenario (its True/False/None ids still name them) or in another one (a recording, ``ingest``)."""
        older = self.on(version)
        if older is not None:
            return (
                (None if same_process else older.text_category) or older.category or self.category
            )
        return self.text_category or self.category


SCENARIOS: dict[str, Scenario] = {}


EXTRA: dict[
    str, Scenario
] = {}  # not one-reason scenarios; used for the recompiles_verbose recording


def _scenario(
    category: str, frame: str, subject: str, recompiles: int = 1, registry: bool = True, **kw: Any
) -> Callable[[Callable[[Compile], None]], Callable[[Compile], None]]:
    def register(fn: Callable[[Compile], None]) -> Callable[[Compile], None]:
        name = fn.__name__.removeprefix("scenario_")
        (SCENARIOS if registry else EXTRA)[name] = Scenario(
            name, fn, category, recompiles, frame, subject, **kw
        )
        return fn

    return register


def eager(fn: Any) -> Any:
    """The default ``compile`` callable: Dynamo with the eager backend (no Inductor)."""
    return torch.compile(fn, backend="eager")


@_scenario("size", "size_fn", "L['x']")
def scenario_size(compile: Compile) -> None:
    def size_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(size_fn)
    f(torch.ones(2))
    f(torch.ones(3))


@_scenario("stride", "stride_fn", "L['x']")
def scenario_stride(compile: Compile) -> None:
    def stride_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(stride_fn)
    f(torch.ones(2, 3))
    f(torch.ones(3, 2).t())


@_scenario("ndim", "ndim_fn", "L['x']")
def scenario_ndim(compile: Compile) -> None:
    def ndim_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(ndim_fn)
    f(torch.ones(2))
    f(torch.ones(2, 2))


@_scenario("dtype", "dtype_fn", "L['x']")
def scenario_dtype(compile: Compile) -> None:
    def dtype_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(dtype_fn)
    f(torch.ones(2))
    f(torch.ones(2, dtype=torch.float64))


@_scenario("requires_grad", "requires_grad_fn", "L['x']")
def scenario_requires_grad(compile: Compile) -> None:
    def requires_grad_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(requires_grad_fn)
    f(torch.ones(2))
    f(torch.ones(2, requires_grad=True))


@_scenario("dispatch_keys", "dispatch_keys_fn", "L['x']")
def scenario_dispatch_keys(compile: Compile) -> None:
    def dispatch_keys_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(dispatch_keys_fn)
    f(torch.ones(2))
    with torch.inference_mode():
        inference = torch.ones(2)
    f(inference)  # an inference tensor has no Autograd dispatch key


@_scenario("device", "device_fn", "L['x']")
def scenario_device(compile: Compile) -> None:
    def device_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(device_fn)
    f(torch.ones(2))
    f(torch.ones(2, device="meta"))  # the only second device on a CPU-only machine


@_scenario("python_constant", "int_arg_fn", "L['n']")
def scenario_python_constant_int(compile: Compile) -> None:
    def int_arg_fn(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n

    f = compile(int_arg_fn)
    f(torch.ones(2), 2)
    f(torch.ones(2), 3)  # automatic dynamic makes n symbolic now: a third value would not recompile


@_scenario("python_constant", "float_arg_fn", "L['scale']")
def scenario_python_constant_float(compile: Compile) -> None:
    def float_arg_fn(x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * scale

    f = compile(float_arg_fn)
    f(torch.ones(2), 0.5)
    f(torch.ones(2), 0.25)


@_scenario("python_constant", "str_arg_fn", "L['mode']", recompiles=2)
def scenario_python_constant_str(compile: Compile) -> None:
    def str_arg_fn(x: torch.Tensor, mode: str) -> torch.Tensor:
        return x + 1 if mode == "add" else x - 1

    f = compile(str_arg_fn)
    f(torch.ones(2), "add")
    f(torch.ones(2), "sub")
    f(torch.ones(2), "mul")  # strings never become dynamic: the second recompile fails both entries


@_scenario("python_constant", "lr_fn", "G['_OPT'].param_groups[0]['lr']")
def scenario_python_constant_lr(compile: Compile) -> None:
    def lr_fn(x: torch.Tensor) -> torch.Tensor:
        return x * _OPT.param_groups[0]["lr"]

    f = compile(lr_fn)
    try:
        f(torch.ones(2))
        _OPT.param_groups[0]["lr"] = 0.05
        f(torch.ones(2))
    finally:
        _OPT.param_groups[0]["lr"] = 0.1


@_scenario("global", "global_fn", "G['SCALE']")
def scenario_global(compile: Compile) -> None:
    global SCALE

    def global_fn(x: torch.Tensor) -> torch.Tensor:
        return x * SCALE

    f = compile(global_fn)
    try:
        f(torch.ones(2))
        SCALE = 2.0
        f(torch.ones(2))
    finally:
        SCALE = 1.0


class _Branchy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.use_bias = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1 if self.use_bias else x
        return x * 2 if self.training else x * 3


@_scenario("module_attribute", "module_step", "L['model'].training")
def scenario_module_attribute(compile: Compile) -> None:
    def module_step(x: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
        return model(x)

    f, model = compile(module_step), _Branchy()
    f(torch.ones(2), model)
    model.eval()
    f(torch.ones(2), model)


@_scenario("module_attribute", "forward", "L['self'].use_bias")
def scenario_module_attribute_flag(compile: Compile) -> None:
    model = _Branchy()
    f = compile(model)
    f(torch.ones(2))
    model.use_bias = False
    f(torch.ones(2))


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2


@_scenario("object_identity", "apply_fn", "L['fn'].__code__")
def scenario_object_identity(compile: Compile) -> None:
    def apply_fn(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return fn(x)

    f = compile(apply_fn)
    f(torch.ones(2), _double)
    f(torch.ones(2), _halve)


@_scenario("type", "type_fn", "L['items']")
def scenario_type(compile: Compile) -> None:
    def type_fn(x: torch.Tensor, items: Any) -> torch.Tensor:
        return x * 2 if isinstance(items, list) else x * 3

    f = compile(type_fn)
    f(torch.ones(2), [1])
    f(torch.ones(2), (1,))


@_scenario("container_length", "length_fn", "L['xs']")
def scenario_container_length(compile: Compile) -> None:
    def length_fn(xs: list[torch.Tensor]) -> torch.Tensor:
        return sum(xs)  # type: ignore[return-value]

    f = compile(length_fn)
    f([torch.ones(2), torch.ones(2)])
    f([torch.ones(2), torch.ones(2), torch.ones(2)])


@_scenario("dict_keys", "dict_keys_fn", "L['batch']")
def scenario_dict_keys(compile: Compile) -> None:
    def dict_keys_fn(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return sum(batch.values())  # type: ignore[return-value]

    f = compile(dict_keys_fn)
    f({"input": torch.ones(2)})
    f({"target": torch.ones(2)})


@_scenario("aliasing", "alias_fn", "L['a'], L['b']")
def scenario_aliasing(compile: Compile) -> None:
    def alias_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    f, t = compile(alias_fn), torch.ones(2)
    f(torch.ones(2), torch.ones(2))
    f(t, t)


@_scenario("grad_mode", "grad_mode_fn", "grad_mode")
def scenario_grad_mode(compile: Compile) -> None:
    def grad_mode_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(grad_mode_fn)
    f(torch.ones(2))
    with torch.no_grad():
        f(torch.ones(2))


@_scenario(
    "autocast",
    "autocast_fn",
    "autocast(cpu)_enabled",
    older=(
        Older(
            (2, 11),
            "autocast",
            "torch 2.7-2.10 write 'GLOBAL_STATE changed: autocast' without the device",
            subject="autocast",
            since=(2, 7),
        ),
    ),
)
def scenario_autocast(compile: Compile) -> None:
    def autocast_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = compile(autocast_fn)
    f(torch.ones(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        f(torch.ones(2))


@_scenario("global_state", "global_state_fn", "deterministic_algorithms")
def scenario_global_state(compile: Compile) -> None:
    def global_state_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f, before = compile(global_state_fn), torch.are_deterministic_algorithms_enabled()
    f(torch.ones(2))
    try:
        torch.use_deterministic_algorithms(not before)
        f(torch.ones(2))
    finally:
        torch.use_deterministic_algorithms(before)


@_scenario("symbolic_shape", "symbolic_fn", "L['x'].size()[0]")
def scenario_symbolic_shape(compile: Compile) -> None:
    def symbolic_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] >= 4 else x * 3

    f, first = compile(symbolic_fn), torch.ones(5)
    torch._dynamo.mark_dynamic(first, 0)  # compiled dynamic, with the guard 4 <= x.size()[0]
    f(first)
    f(torch.ones(2))


@_scenario("mark_dynamic", "mark_dynamic_fn", "")
def scenario_mark_dynamic(compile: Compile) -> None:
    def mark_dynamic_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f, marked = compile(mark_dynamic_fn), torch.ones(2)
    f(torch.ones(2))
    torch._dynamo.mark_dynamic(marked, 0)
    f(marked)


@_scenario(
    "backend_mismatch",
    "backend_fn",
    "",
    older=(
        Older(
            (2, 10),
            "backend_mismatch",
            "torch < 2.10 writes no text for an entry refused for its backend (every "
            "guard passed): the reason is empty, and its log lists no entry",
        ),
    ),
)
def scenario_backend_mismatch(compile: Compile) -> None:
    """Ignores ``compile``: the point is a backend callable created anew for each torch.compile."""

    def backend_fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    for _ in range(2):
        torch.compile(backend_fn, backend=lambda gm, example_inputs: gm.forward)(torch.ones(2))


def _make_class() -> type:
    class Config:
        factor = 2

    return Config


@_scenario(
    "invalidated",
    "invalidated_fn",
    "L['cfg']",
    in_guard_failures=False,
    older=(
        Older(
            (2, 6),
            None,
            "torch < 2.6 drops an invalidated entry without a recompile or a reason",
            recompiles=0,
            logged=False,
        ),
        Older(
            (2, 7),
            None,
            "torch < 2.7 logs the invalidated entry but records no reason (no CompilationMetrics.recompile_reason)",
        ),
    ),
)
def scenario_invalidated(compile: Compile) -> None:
    def invalidated_fn(x: torch.Tensor, cfg: type) -> torch.Tensor:
        return x * cfg.factor  # type: ignore[attr-defined]

    f, cfg = compile(invalidated_fn), _make_class()
    f(torch.ones(2), cfg)
    del cfg
    gc.collect()  # the guarded class dies: torch invalidates the cache entry that held it by id
    f(torch.ones(2), _make_class())


@_scenario("type", "kwarg_type_fn", "L['kwargs']['attention_mask']")
def scenario_type_kwarg(compile: Compile) -> None:
    """A keyword argument that was a tensor is None now (an HF model's ``attention_mask``)."""

    def kwarg_type_fn(x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        mask = kwargs["attention_mask"]
        return x * 2 if mask is None else x * mask

    f = compile(kwarg_type_fn)
    f(torch.ones(2), attention_mask=torch.ones(2))
    f(torch.ones(2), attention_mask=None)


@_scenario(
    "type",
    "none_to_tensor_fn",
    "L['mask']",
    older=(
        Older(
            (2, 8),
            "type",
            "torch < 2.8 guards None by id (___check_obj_id): the id names None only in the process "
            "that ran it; from the text alone in another process it is an unknown object",
            text_category="object_identity",
        ),
    ),
)
def scenario_type_none_to_tensor(compile: Compile) -> None:
    """An argument that was None is a tensor now (torch 2.8+ guards it ``mask is None``)."""

    def none_to_tensor_fn(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return x * 2 if mask is None else x * mask

    f = compile(none_to_tensor_fn)
    f(torch.ones(2), None)
    f(torch.ones(2), torch.ones(2))


class Reduction(enum.Enum):
    """An enum whose class name does not say it is one."""

    MEAN = "mean"
    SUM = "sum"


@_scenario(
    "python_constant",
    "enum_fn",
    "L['reduction']",
    text_category="object_identity",
    older=(
        Older(
            (2, 13),
            "python_constant",
            "torch 2.10-2.12 annotate the guarded member with its repr, "
            "type=<Reduction.MEAN: 'mean'>, which names an enum member",
            since=(2, 10),
        ),
    ),
)
def scenario_enum_member(compile: Compile) -> None:
    """An enum member argument changes (an identity guard): a constant, whatever the enum class is called."""

    def enum_fn(x: torch.Tensor, reduction: Reduction) -> torch.Tensor:
        return x.mean() if reduction is Reduction.MEAN else x.sum()

    f = compile(enum_fn)
    f(torch.ones(2), Reduction.MEAN)
    f(torch.ones(2), Reduction.SUM)


class _KVCache:
    """Like transformers' EncoderDecoderCache: a plain object (not an nn.Module) with a per-layer flag."""

    def __init__(self) -> None:
        self.is_updated = {0: False}


@_scenario(
    "python_constant",
    "cache_flag_fn",
    "L['kwargs']['past_key_values'].is_updated[0]",
    text_category="other",
)
def scenario_cache_flag(compile: Compile) -> None:
    """A flag on a cache object passed as a keyword argument flips (prefill, then decode)."""

    def cache_flag_fn(x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return x + 1 if kwargs["past_key_values"].is_updated[0] else x - 1

    f, cache = compile(cache_flag_fn), _KVCache()
    f(torch.ones(2), past_key_values=cache)
    cache.is_updated[0] = True
    f(torch.ones(2), past_key_values=cache)


@_scenario("symbolic_shape", "two_guards_fn", "L['x'].size()[0]", registry=False)
def scenario_two_guards(compile: Compile) -> None:
    """Two shape guards fail at once; only recompiles_verbose reports both (joined by "; ")."""

    def two_guards_fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2 if x.shape[0] >= 4 else x * 3
        return y + 1 if x.shape[1] >= 4 else y - 1

    f, first = compile(two_guards_fn), torch.ones(5, 5)
    torch._dynamo.mark_dynamic(first, 0)
    torch._dynamo.mark_dynamic(first, 1)
    f(first)
    f(torch.ones(2, 2))


@dataclass
class Observation:
    """What torch itself reported while a scenario ran."""

    guard_failures: list[str] = field(default_factory=list)
    log_messages: list[str] = field(default_factory=list)

    @property
    def recompiles(self) -> int:
        return len(self.log_messages)


class _Collect(logging.Handler):
    def __init__(self, frame: str, into: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.prefix, self.into = f"Recompiling function {frame} in ", into

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(self.prefix):
            self.into.append(message)


@contextlib.contextmanager
def _recompiles_log(frame: str, into: list[str], verbose: bool = False) -> Iterator[None]:
    """Turn on TORCH_LOGS=recompiles (or recompiles_verbose) for the block, collecting one frame's messages."""
    internal = torch._logging._internal
    state = copy.deepcopy(internal._get_log_state())
    logger = logging.getLogger(
        "torch._dynamo.guards.__recompiles" + ("_verbose" if verbose else "")
    )
    handler = _Collect(frame, into)
    torch._logging.set_logs(**{"recompiles_verbose" if verbose else "recompiles": True})
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        internal._set_log_state(state)
        torch._logging._init_logs()


def run_scenario(
    scenario: Scenario, compile: Compile = eager, verbose: bool = False
) -> Observation:
    """Run one scenario from a clean Dynamo state and return torch's own reports for its frame.

    ``verbose`` turns on recompiles_verbose, which makes torch report every failing guard of an
    entry (joined by "; ") instead of the first.
    """
    from torch._dynamo.utils import guard_failures

    torch._dynamo.reset()
    observed = Observation()
    with _recompiles_log(scenario.frame, observed.log_messages, verbose):
        scenario.run(compile)
    for code, reasons in guard_failures.items():
        if code.co_name == scenario.frame:
            observed.guard_failures.extend(reasons)
    torch._dynamo.reset()
    return observed
