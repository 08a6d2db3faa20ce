"""What a test needs, said by markers, and the check that keeps the markers true.

The markers (registered in pyproject.toml, listed in docs/testing.md):

- ``workload``: records a real torch run, a job in a process of its own (a Python script or ``-c``
  program that imports torch, ``torchrun``, ``recompprof run`` or ``demo``, or a recording of
  ``recordings.py``, even one this session already holds);
- ``servers``: starts a real server binary (Prometheus, Alertmanager, Pushgateway, node_exporter,
  Chromium, Java for Spark, moto's S3 server);
- ``inductor``: compiles with Inductor (C++ code generation, slow on CPU);
- ``gpu``: needs a CUDA device.

The quick tier (``scripts/test.sh --quick``) leaves out what ``workload`` and ``servers`` name, so a test
that starts one without its marker would slip into the edit loop and slow it. Every run of the suite
therefore watches what each test starts (``subprocess.Popen`` in the test's process, and the recordings
it asks for) and fails a test that starts a workload or a server its markers do not name. ``inductor``
and ``gpu`` are not watched: an in-process Inductor compile starts nothing to see.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
import recordings

_F = TypeVar("_F", bound=Callable[..., Any])

WATCHED = ("workload", "servers")
# What the quick tier leaves out (but for QUICK_RUN's tests).
HEAVY = ("workload", "servers", "inductor", "gpu")
# Programs that are real servers (or start one): by the name of what is executed.
SERVER_PROGRAMS = {
    "prometheus",
    "prometheus-alertmanager",
    "alertmanager",
    "prometheus-pushgateway",
    "pushgateway",
    "prometheus-node-exporter",
    "node_exporter",
    "chromium",
    "chromium-browser",
    "java",
    "spark-submit",
}
# A Python program is a job when it imports torch (an import probe that only looks for torch in
# sys.modules is not).
_IMPORTS_TORCH = re.compile(
    r"(?:^|;)\s*(?:import\s+(?:[\w.]+\s*,\s*)*torch\b|from\s+torch\b)", re.MULTILINE
)
# Inductor's compile-worker pool (torch/_inductor/compile_worker/__main__.py): torch starts it itself from
# an in-process compile (2.4 and 2.6 for aot_eager compiles too), so it is no job of the test's, as an
# in-process Inductor compile is not.
_TORCH_COMPILE_WORKERS = re.compile(
    r"[/\\]torch[/\\]_inductor[/\\]compile_worker[/\\]__main__\.py$"
)
# recompprof commands that run a job (the others read files).
JOB_COMMANDS = {"run", "demo"}


def kind_of(args: Any) -> str | None:
    """``workload``, ``servers`` or None for a command line as ``subprocess.Popen`` takes it."""
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    if not argv:
        return None
    program = Path(argv[0]).name
    if program in SERVER_PROGRAMS:
        return "servers"
    if program == "torchrun":
        return "workload"
    if program == "recompprof":
        return _recompprof_command(argv[1:])
    if not program.startswith("python"):
        return None  # tmux, openssl, rsync, promtool, git, a shell script's own tools...
    rest = argv[1:]
    if rest[:2] == ["-m", "moto.server"]:
        return "servers"
    if rest[:2] == ["-m", "recompprof._cli.main"]:
        return _recompprof_command(rest[2:])
    if rest[:1] == ["-m"] and rest[1:2] and rest[1] in ("pip", "venv", "pytest"):
        return None  # a pytest inside checks its own tests' markers
    if rest[:1] == ["-c"] and rest[1:2]:
        return "workload" if _IMPORTS_TORCH.search(rest[1]) else None
    if rest[:1] and _TORCH_COMPILE_WORKERS.search(rest[0]):
        return None  # torch's own worker pool, started by a compile in the test's process
    if rest[:1] and rest[0].endswith(".py"):
        return "workload" if _imports_torch(Path(rest[0])) else None
    return "workload"  # ``-m`` something else, or options: counted as a job, to be safe


def _imports_torch(script: Path) -> bool:
    try:
        return bool(_IMPORTS_TORCH.search(script.read_text(errors="replace")))
    except OSError:
        return True  # cannot tell: counted as a job, to be safe


def _recompprof_command(rest: Sequence[str]) -> str | None:
    return "workload" if rest[:1] and rest[0] in JOB_COMMANDS else None


def starts(*kinds: str) -> Callable[[_F], _F]:
    """Say what a fixture starts (``@pytest.fixture`` above it): every test that uses the fixture, directly or
    through another, gets those markers (``mark_fixture_users``), so a recording shared by many tests is
    declared once, where it is made."""
    unknown = set(kinds) - set(HEAVY)
    if unknown:
        raise ValueError(f"starts(): unknown kinds {sorted(unknown)}; known: {HEAVY}")

    def declare(fixture: _F) -> _F:
        fixture.__recompprof_starts__ = kinds  # type: ignore[attr-defined]
        return fixture

    return declare


def mark_fixture_users(items: list[pytest.Item]) -> None:
    """Give each test the markers of the fixtures it uses (``starts``)."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        kinds: set[str] = set()
        for name in item.fixturenames:  # the closure: fixtures used through other fixtures too
            for definition in info.name2fixturedefs.get(name, ()):
                kinds.update(getattr(definition.func, "__recompprof_starts__", ()))
        for kind in sorted(kinds):
            if item.get_closest_marker(kind) is None:
                item.add_marker(kind)


class NeedsCheck:
    """Notes what the running test starts; fails a passing phase whose test lacks the marker for it."""

    def __init__(self) -> None:
        self.started: dict[str, str] = {}  # kind -> the first command line of that kind
        self._original: Callable[..., None] | None = None

    def install(self) -> None:
        original = subprocess.Popen.__init__
        check = self

        def noting(popen: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
            check.note(kind_of(args), args)
            original(popen, args, *rest, **kw)

        self._original = original
        subprocess.Popen.__init__ = noting  # type: ignore[method-assign]
        recordings.watchers.append(
            lambda workload: self.note(
                kind_of([sys.executable, str(workload.script)]), workload.script
            )
        )

    def uninstall(self) -> None:
        if self._original is not None:
            subprocess.Popen.__init__ = self._original  # type: ignore[method-assign]
        recordings.watchers.clear()

    def note(self, kind: str | None, what: Any) -> None:
        if kind is not None and kind not in self.started:
            text = " ".join(map(str, what)) if isinstance(what, (list, tuple)) else str(what)
            self.started[kind] = text.replace(sys.executable, "python")[:200]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        self.started = {}
        try:
            return (yield)
        finally:
            self.started = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        unmarked = [k for k in WATCHED if k in self.started and item.get_closest_marker(k) is None]
        if unmarked and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(
                f"this test starts a {kind} ({self.started[kind]}) but is not marked "
                f"@pytest.mark.{kind}: the quick tier would run it (tests/needs.py)"
                for kind in unmarked
            )
        for kind in unmarked:
            del self.started[kind]  # said once, at the phase that started it
        return report


def register(config: pytest.Config) -> None:
    check = NeedsCheck()
    check.install()
    config.add_cleanup(check.uninstall)
    config.pluginmanager.register(check, "needs-check")


# The tests of one shared real run stay in the quick tier (the CPU training job, recorded once and kept
# with --recordings): the edit loop stays honest about real torch.
QUICK_RUN = "test_cli_report.py"


def quick_tier(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--quick``: deselect what HEAVY names, but for the tests of QUICK_RUN."""
    if not config.getoption("--quick"):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        heavy = any(item.get_closest_marker(name) for name in HEAVY)
        (drop if heavy and item.path.name != QUICK_RUN else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def heavy_first(items: list[pytest.Item]) -> None:
    """Put the modules that hold a HEAVY test first, each module's tests together and in order.

    pytest-xdist hands a worker a whole module at a time (``--dist loadscope``), in this order. The
    long ones (a corpus of real models recorded side by side takes minutes) then start while the
    thousands of quick tests are left to fill in around them, instead of one of them starting last
    and running on alone at the end."""
    first_index: dict[str, int] = {}
    heavy: set[str] = set()
    for index, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        first_index.setdefault(module, index)
        if any(item.get_closest_marker(name) for name in HEAVY):
            heavy.add(module)
    items.sort(key=lambda item: _module_rank(item, first_index, heavy))


def _module_rank(
    item: pytest.Item, first_index: dict[str, int], heavy: set[str]
) -> tuple[int, int]:
    module = item.nodeid.split("::", 1)[0]
    return (0 if module in heavy else 1, first_index[module])
