"""Where the suite's time goes: wall and CPU seconds per test file, printed at the end of a run.

pytest's ``--durations`` lists single phases of single tests, and a module fixture's cost lands on
whichever test asked for it first. This plug-in sums each file's setup, call and teardown, as wall
seconds and as CPU seconds (the test process's and the children it waited for: most of this suite's
work is real training jobs run as subprocesses), so a file that grows slow shows up by name, and a
file whose wall time is far above its CPU time is waiting on something (a sleep, a server, a bound).

Under pytest-xdist each worker measures its own tests and sends the figures with the test's report
(``user_properties``); the controller adds them up. ``--timing-files=N`` (an option of
tests/conftest.py) sets the rows shown (0: none).
"""

from __future__ import annotations

import resource
from collections import defaultdict
from collections.abc import Generator
from typing import Any

import pytest

_CPU_KEY = pytest.StashKey[dict[str, float]]()
_PROPERTY = "cpu_seconds"


def _cpu_seconds() -> float:
    """User and system CPU of this process and of its children that have been waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class SuiteTiming:
    """Measures each test phase's CPU where it runs; adds up wall and CPU per file where reports arrive."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)

    def _measure(self, item: pytest.Item, when: str) -> Generator[None, Any, Any]:
        began = _cpu_seconds()
        try:
            return (yield)
        finally:
            item.stash.setdefault(_CPU_KEY, {})[when] = _cpu_seconds() - began

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._measure(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._measure(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._measure(item, "teardown"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        spent = item.stash.get(_CPU_KEY, {}).get(call.when)
        if spent is not None:
            report.user_properties.append((_PROPERTY, round(spent, 3)))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        where = report.nodeid.split("::", 1)[0]
        self.wall[where] += report.duration
        self.cpu[where] += sum(v for k, v in report.user_properties if k == _PROPERTY)
        if report.when == "call":
            self.tests[where] += 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.rows <= 0 or not self.wall:
            return
        write = terminalreporter.write_line
        terminalreporter.section(f"time per test file (the {self.rows} slowest by wall)")
        write(f"{'wall s':>8} {'cpu s':>8} {'tests':>6}  file")
        for where in sorted(self.wall, key=self.wall.__getitem__, reverse=True)[: self.rows]:
            write(f"{self.wall[where]:8.1f} {self.cpu[where]:8.1f} {self.tests[where]:6d}  {where}")
        write(
            f"{sum(self.wall.values()):8.1f} {sum(self.cpu.values()):8.1f} "
            f"{sum(self.tests.values()):6d}  all files (summed over workers)"
        )


def register(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteTiming(config.getoption("--timing-files")), "suite-timing")
