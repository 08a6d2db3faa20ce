"""A third exporter, installed as a real distribution, loads by entry point like the in-tree two.

The exporter below is written against ``recompprof.exporter`` alone and installed the way pip leaves a
package: the package beside a ``*.dist-info`` holding its ``entry_points.txt``, on the ``PYTHONPATH`` of
a fresh interpreter, so recompprof finds it through ``importlib.metadata`` as it would in production.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from recorded_runs import ROOT, clean_env, cli

SETTINGS = """
from pydantic import Field, field_validator

from recompprof.exporter import ExporterSettings


class SinkSettings(ExporterSettings):
    sink_path: str | None = None
    sink_every: int = Field(default=1, ge=1)

    @field_validator("sink_path")
    @classmethod
    def _sink_absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("an absolute path is needed")
        return value
"""

EXPORTER = '''
import json

from recompprof.exporter import CATEGORIES, ConfigError, Exporter, contain, metric_names


class SinkExporter(Exporter):
    """Appends each event's kind to a JSON-lines file, and the totals at shutdown."""

    name = "sink"

    def __init__(self, settings):
        super().__init__(settings)
        if settings.sink_path is None:
            raise ConfigError(
                "recompprof setting 'sink_path' (RECOMPPROF_SINK_PATH) is required with exporters=sink"
            )
        self.file = None

    def start(self, session):
        self.session = session
        self.file = open(self.settings.sink_path, "a")
        self._write({"started": session.identity.rank, "every": self.settings.sink_every})

    def on_event(self, event):
        with contain("sink"):
            self._write({"kind": event.kind})

    def shutdown(self, timeout=5.0):
        totals = self.session.snapshot().totals()
        self._write({"compiles": totals["compiles"], "metric": metric_names.COMPILES.family,
                     "categories": len(CATEGORIES)})
        self.file.close()

    def _write(self, line):
        self.file.write(json.dumps(line) + "\\n")
        self.file.flush()
'''

ENTRY_POINTS = """\
[recompprof.exporters]
sink = recompprof_sink:SinkExporter

[recompprof.exporter_settings]
sink = recompprof_sink.settings:SinkSettings
"""

JOB = """
import torch
import recompprof

f = torch.compile(lambda x: x * 2, backend="eager")
with recompprof.attach(exporters=["sink"]):
    f(torch.ones(2))
    f(torch.ones(3))  # a recompile: another size
"""


def _install(site: Path) -> None:
    """Lay out ``recompprof-sink`` 0.1 as an installed distribution under ``site``."""
    package = site / "recompprof_sink"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(EXPORTER), encoding="utf-8")
    (package / "settings.py").write_text(textwrap.dedent(SETTINGS), encoding="utf-8")
    info = site / "recompprof_sink-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: recompprof-sink\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")


def _env(site: Path | None, **settings: str) -> dict[str, str]:
    path = [str(ROOT), str(ROOT / "exporters")]
    return {"PYTHONPATH": os.pathsep.join([*([str(site)] if site else []), *path]), **settings}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    where = tmp_path / "site"
    _install(where)
    return where


@pytest.mark.workload
def test_a_third_exporter_is_chosen_by_setting_and_receives_the_jobs_events(
    site: Path, tmp_path: Path
) -> None:
    """``exporters=["sink"]`` loads the installed exporter by its entry point; its own settings come from
    ``RECOMPPROF_SINK_*``, and it receives every event of a real ``torch.compile`` job and its totals."""
    out = tmp_path / "sink.jsonl"
    env = clean_env(
        **_env(site, RECOMPPROF_SINK_PATH=str(out), RECOMPPROF_SINK_EVERY="3"),
        RECOMPPROF_RUN_DIR=str(tmp_path / "run"),
    )
    done = subprocess.run(
        [sys.executable, "-c", JOB], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ignoring environment variable" not in done.stderr, done.stderr
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {"started": 0, "every": 3}
    kinds = [line["kind"] for line in lines if "kind" in line]
    assert kinds[0] == "session_start" and kinds[-1] == "session_end", kinds
    assert kinds.count("compile") == 2 and kinds.count("compile_start") == 2, kinds
    assert lines[-1]["compiles"] == 2 and lines[-1]["metric"] == "torch_compile_compiles"


@pytest.mark.workload
@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--sink-every", "0"], "recompprof setting 'sink_every' (argument): Input should be"),
        (
            ["--sink-path", "relative.jsonl"],
            "'sink_path' (argument): Value error, an absolute path",
        ),
        ([], "recompprof setting 'sink_path' (RECOMPPROF_SINK_PATH) is required"),
    ],
    ids=["field", "validator", "constructor"],
)
def test_a_third_exporters_bad_setting_is_refused_before_the_program_starts(
    site: Path, tmp_path: Path, options: list[str], named: str
) -> None:
    """``recompprof run --exporters sink`` with a value the sink's settings or constructor refuse exits 2
    with one line naming the setting, and never starts the program."""
    done = cli(
        "run",
        "--exporters",
        "sink",
        *options,
        "--",
        sys.executable,
        "-c",
        "open('started', 'w')",
        cwd=tmp_path,
        **_env(site),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("recompprof: error: ") and named in done.stderr, done.stderr
    assert not (tmp_path / "started").exists()


@pytest.mark.workload
def test_without_the_distribution_the_third_exporter_is_unknown(tmp_path: Path) -> None:
    """The same request with the distribution absent names the exporters that are installed."""
    done = cli(
        "run", "--exporters", "sink", "--", sys.executable, "-c", "pass", cwd=tmp_path, **_env(None)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "recompprof setting 'exporters'" in done.stderr, done.stderr
    assert "allowed: prometheus, otel" in done.stderr, done.stderr


def test_an_in_tree_exporters_settings_are_checked_without_its_extra(tmp_path: Path) -> None:
    """With ``prometheus_client`` missing, a bad ``prometheus_*`` value is still refused naming the setting
    (the settings model needs no extra), and choosing the exporter names the extra to install."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["prometheus_client"] = None  # as if the prometheus extra were not installed
        import recompprof
        try:
            recompprof.attach(prometheus_port="x")
        except recompprof.ConfigError as exc:
            print(exc)
        try:
            recompprof.attach(exporters=["prometheus"])
        except recompprof.ExporterUnavailable as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(**_env(None), RECOMPPROF_RUN_DIR=str(tmp_path / "run")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    refused, unavailable = done.stdout.splitlines()
    assert refused.startswith("recompprof setting 'prometheus_port' (argument): "), refused
    assert "needs the 'prometheus' extra (pip install 'recompprof[prometheus]')" in unavailable
