"""What the compile path does not spend: work whose result is known already, inside a real compile.

Each compile's recompprof work runs cold (the compiler evicts its code and data between two compiles), so
what it costs follows what it touches: these tests pin down work the compile path no longer does at all,
each against a real ``torch.compile`` or torch's own texts.
"""

from __future__ import annotations

import builtins
import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo.utils as dynamo_utils

import recompprof
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile
from recompprof._torch import frames, records
from recompprof._torch.versions import torch_info

pytestmark = pytest.mark.torch_compat
# Backward compiles are recorded from the gate on; below it only the forward compiles are (docs/compatibility.md).
BACKWARD = torch_info().has("backward_compiles")


class _Unhashable(str):
    """A text that fails if anything hashes it (a dict lookup would)."""

    def __hash__(self) -> int:
        raise AssertionError("the text was hashed")


# The config text as torch writes it into each compile's record, from the function that writes it; older torch
# builds the text inline (2.6) or writes none (2.4), and there the two tests that read it do not apply.
needs_config_text = pytest.mark.skipif(
    not hasattr(dynamo_utils, "_get_dynamo_config_for_logging"),
    reason="this torch has no torch._dynamo.utils._get_dynamo_config_for_logging (the records' config text)",
)


@needs_config_text
def test_a_config_text_seen_before_is_matched_without_hashing_it() -> None:
    """A record's config text equal to one read before gets the same hash and settings by comparison alone:
    torch writes the text afresh for every compile, so hashing it for a lookup would read it twice."""
    text = dynamo_utils._get_dynamo_config_for_logging()
    assert isinstance(text, str) and len(text) > 1000
    sha = records.config_sha(text)
    settings = records.dynamic_settings({"dynamo_config": text})
    assert sha == hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    fresh = _Unhashable("".join(list(text)))  # an equal text, another object, as the next record's
    assert records.config_sha(fresh) == sha
    assert records.dynamic_settings({"dynamo_config": fresh}) == settings
    assert settings.automatic is not None  # torch's text says how automatic dynamic is set


def _compile_steps(
    tmp_path: Path, batches: tuple[int, ...], watch: pytest.MonkeyPatch, patch: Any
) -> list[Compile]:
    """Forward compiles of a small model, one per batch size (static shapes), under an attached session;
    ``patch(watch)`` is applied after the first step and undone before the detach, so what it sets up sees
    the later compiles alone (and not the attach or the detach)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    with recompprof.attach(run_dir=tmp_path) as session:
        for i, batch in enumerate(batches):
            if i == 1:
                patch(watch)
            compiled(torch.randn(batch, 4)).sum().backward()
        watch.undo()
    return [
        e for e in read_file(session.event_log_path) if isinstance(e, Compile) and not e.backward
    ]


def test_a_call_site_classifies_each_file_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A recompile's call site walks the same files as the compile before it, and none of them is classified
    again (library or not): the answer is kept per file, and the call site still names this test's line."""
    asked: Counter[str] = Counter()
    is_library = frames.call_sites.is_library

    def counted(path: str) -> bool:
        asked[path] += 1
        return is_library(path)

    def patch(watch: pytest.MonkeyPatch) -> None:
        watch.setattr(frames.call_sites, "is_library", counted)

    compiles = _compile_steps(tmp_path, (2, 3, 5), monkeypatch, patch)
    assert [c.is_recompile for c in compiles] == [False, True, True]
    assert asked == Counter()  # the two recompiles classified nothing: every file was known
    for compile in compiles:
        assert compile.call_site[-1].startswith(f"{__file__}:")
        assert compile.call_site[-1].endswith(" in _compile_steps")


def test_a_warm_compile_path_runs_no_import_statement(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Once a session is attached and a compile has run, recompprof's hooks run no import statement at a
    compile's start, record or end: each looks the module up and costs microseconds, cold inside a compile."""
    imports: Counter[tuple[str, str]] = Counter()
    real_import = builtins.__import__

    def counted(name: str, globals: Any = None, *args: Any, **kwargs: Any) -> Any:
        caller = (globals or {}).get("__name__", "")
        if caller.startswith(("recompprof", "recompprof_")):
            imports[(caller, name)] += 1
        return real_import(name, globals, *args, **kwargs)

    def patch(watch: pytest.MonkeyPatch) -> None:
        watch.setattr(builtins, "__import__", counted)

    compiles = _compile_steps(tmp_path, (2, 3, 5), monkeypatch, patch)
    # torch 2.6 runs an import statement of its own with the eval-frame hook on, and so compiles this
    # counter too (a frame of its own, rightly reported): the model's frame is the one under test
    compiles = [c for c in compiles if c.frame is not None and c.frame.name == "Sequential.forward"]
    assert [c.is_recompile for c in compiles] == [False, True, True]
    assert all(c.reasons for c in compiles[1:])  # the recompiles' guard failures were read
    assert imports == Counter(), imports


class _Counted(str):
    """A text that counts the comparisons that find it equal to another."""

    matched = 0

    def __eq__(self, other: object) -> bool:
        equal = str.__eq__(self, other)
        if equal is True:
            _Counted.matched += 1
        return equal

    __hash__ = str.__hash__


@needs_config_text
def test_a_records_dynamo_config_is_compared_once() -> None:
    """A record's dynamo config text seen before is matched once for both what it says of automatic dynamic
    and its hash: each comparison reads the text seen before, cold by the next compile."""
    text = dynamo_utils._get_dynamo_config_for_logging()
    first = records.read_record({"compile_id": "0/0", "dynamo_config": text})
    _Counted.matched = 0
    again = records.read_record(
        {"compile_id": "0/1", "dynamo_config": _Counted("".join(list(text)))}
    )
    assert _Counted.matched == 1
    assert (again.dynamic, again.dynamo_config_sha) == (first.dynamic, first.dynamo_config_sha)
    assert again.dynamo_config_sha == hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def test_a_compile_without_reasons_runs_no_explainer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A first compile and every backward have no guard-failure reasons: their start and record parse
    nothing, while a recompile's are still explained."""
    from recompprof._model.explaining import ReasonExplainer

    parsed: list[int] = []
    parse = ReasonExplainer._parse

    def counted(self: ReasonExplainer, frame: Any, texts: list[str], resolve: Any) -> Any:
        parsed.append(len(texts))
        return parse(self, frame, texts, resolve)

    monkeypatch.setattr(ReasonExplainer, "_parse", counted)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    with recompprof.attach(run_dir=tmp_path) as session:
        compiled(torch.randn(2, 4)).sum().backward()
        first = list(parsed)
        compiled(torch.randn(3, 4)).sum().backward()
    compiles = [e for e in read_file(session.event_log_path) if isinstance(e, Compile)]
    assert [(c.backward, c.is_recompile) for c in compiles] == [
        (backward, recompile)
        for backward, recompile in [(False, False), (True, False), (False, True), (True, False)]
        if BACKWARD or not backward
    ]
    assert first == []  # the first compile and its backward: nothing parsed
    assert parsed and all(parsed)  # the recompile's start and record, each with its texts
    recompile = next(c for c in compiles if c.is_recompile)
    assert recompile.reasons and recompile.reasons[0].explains_change


def test_a_recompiles_frame_is_named_as_its_first_compile_was(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A frame's recompiles reuse the name its first compile worked out (same code, first argument's class,
    closure and globals): what the code wraps or runs as a method of is looked up once, and every compile
    names the same method."""
    walked: list[str] = []
    wrapper_target, method_owner = frames._torch_wrapper_target, frames._method_owner

    def target(ctx: Any) -> Any:
        walked.append("torch wrapper")
        return wrapper_target(ctx)

    def owner(code: Any, f_locals: Any, closure: Any) -> Any:
        walked.append("method")
        return method_owner(code, f_locals, closure)

    def patch(watch: pytest.MonkeyPatch) -> None:
        watch.setattr(frames, "_torch_wrapper_target", target)
        watch.setattr(frames, "_method_owner", owner)

    frames._NAMED.clear()
    patch(monkeypatch)  # from the first compile on
    compiles = _compile_steps(tmp_path, (2, 3, 5), monkeypatch, patch)
    assert [c.is_recompile for c in compiles] == [False, True, True]
    assert len(walked) == 1  # the first compile's start; the recompiles reused its name
    assert {c.frame.name for c in compiles} == {"Sequential.forward"}
    assert {c.frame.owner for c in compiles} == {"Sequential"}


def test_a_model_let_go_is_freed_though_its_frame_was_named(tmp_path: Path) -> None:
    """Naming a compile keeps no instance: a compiled model the job lets go (and torch resets) is freed while
    the session runs, its frame's name kept by the code and class alone."""
    import gc
    import weakref

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    alive = weakref.ref(model)
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    with recompprof.attach(run_dir=tmp_path) as session:
        for batch in (2, 3):
            compiled(torch.randn(batch, 4)).sum().backward()
        del model, compiled
        torch._dynamo.reset()
        gc.collect()
        assert alive() is None
    compiles = [e for e in read_file(session.event_log_path) if isinstance(e, Compile)]
    assert {c.frame.name for c in compiles} == {"Sequential.forward"}
    assert len(compiles) == (
        4 if BACKWARD else 2
    )  # two forwards, and their backwards where recorded


def test_a_recompile_asks_its_module_for_no_attribute_it_lacks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A compiled module's recompiles are named by the class that named its first compile, without asking
    the module whether it has a ``__code__`` (nn.Module's ``__getattr__`` raises an AttributeError for
    that, with its message formatted, at every compile start), and still name the same method."""
    asked: list[str] = []

    def counted(obj: object, name: str) -> bool:
        if name == "__code__" and isinstance(obj, torch.nn.Module):
            asked.append(type(obj).__name__)
        return hasattr(obj, name)

    def patch(watch: pytest.MonkeyPatch) -> None:
        watch.setattr(frames, "hasattr", counted, raising=False)

    frames._NAMED.clear()
    compiles = _compile_steps(tmp_path, (2, 3, 5), monkeypatch, patch)
    assert [c.is_recompile for c in compiles] == [False, True, True]
    assert asked == []  # the two recompiles' starts and records
    assert {c.frame.name for c in compiles} == {"Sequential.forward"}
    assert {c.frame.owner for c in compiles} == {"Sequential"}
