"""Hostile reason texts through the real compile path, and every setting given a bad value.

Guard-failure and graph-break texts carrying label syntax, newlines, ``# HELP`` lines, control
characters, lone surrogates and 100 000 characters must not crash anything, inject Prometheus labels
or series, or exceed OpenTelemetry's attribute length limit. Bad settings fail at attach with one
``ConfigError`` naming the setting.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Any

import pytest
import torch
from otlp_receiver import OtlpReceiver
from prometheus_client.parser import text_string_to_metric_families
from servers import http_get

import recompprof
from recompprof._analysis.render.html import render_html
from recompprof._analysis.render.text import render_text
from recompprof._capture.settings import ENV_PREFIX, ConfigError, Settings
from recompprof._eventlog.reader import read_file
from recompprof._model.cudagraphs import CUDAGRAPH_SKIPS
from recompprof._model.events import Compile, GraphBreak
from recompprof._model.vocabulary import CATEGORIES, LIMITS, PHASES

EVIL = (
    'a"} evil{a="b\n# HELP torch_compile_compiles_total injected\n# TYPE x counter\nx{y="1"} 1\r\x00\x01\x1b[2J\x7f'
    + "\u202e\udcff\ufeff"
    + "Z" * 100_000
)
MODE = EVIL
ATTRIBUTE_LIMIT = 64


class Tagged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tag = EVIL

    def forward(self, x: torch.Tensor, label: str) -> torch.Tensor:
        if self.tag == EVIL and label == EVIL and MODE == EVIL:
            return x + 1
        return x - 1


def breaks(x: torch.Tensor) -> torch.Tensor:
    x = x + 1
    torch._dynamo.graph_break(
        msg=EVIL.replace("\udcff", "")
    )  # torch's own trace logging rejects lone surrogates
    return x * 2


def _label_sets(exposition: str) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        assert family.name.startswith(("torch_compile_", "recompprof_")), family.name
        for sample in family.samples:
            for key, value in sample.labels.items():
                # recompprof_events_dropped_total has its own closed "reason" set (frame_cap, ...)
                values.setdefault(
                    key if family.name.startswith("torch_compile_") else f"recompprof:{key}", set()
                ).add(value)
    return values


def test_hostile_reason_texts_are_contained_everywhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Hostile texts in a guarded global, attribute and argument and in a graph-break message stay bounded, parseable and out of labels."""
    global MODE
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", str(ATTRIBUTE_LIMIT))
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    model = Tagged()
    compiled = torch.compile(model, backend="eager")
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        with recompprof.attach(
            run_dir=tmp_path, exporters=["prometheus", "otel"], prometheus_port=0
        ) as session:
            out = [compiled(torch.ones(2), EVIL)]
            MODE = EVIL[:-1]  # guard on the global fails; its value is in torch's reason text
            out.append(compiled(torch.ones(2), EVIL))
            MODE = EVIL
            model.tag = EVIL[:-2]
            out.append(compiled(torch.ones(2), EVIL))
            out.append(compiled(torch.ones(2), EVIL[:-3]))
            out.append(torch.compile(breaks, backend="eager")(torch.ones(2)))
            exposition = http_get(session.exporters[0].url).decode()  # type: ignore[attr-defined]
        spans = receiver.wait_for(
            lambda s: len([x for x in s if x["name"] == "torch_compile.frame"]) >= 4
        )
    assert [t.tolist() for t in out] == [[2.0, 2.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [4.0, 4.0]]

    events = list(read_file(session.event_log_path))  # type: ignore[arg-type]
    reasons = [r for e in events if isinstance(e, Compile) for r in e.reasons]
    assert {"global", "module_attribute"} <= {r.category for r in reasons}
    assert all(len(r.text) <= 4096 and len(r.subject) <= 200 for r in reasons)
    graph_breaks = [e for e in events if isinstance(e, GraphBreak)]
    assert graph_breaks and all(
        len(e.reason) <= 4096 and "\x00" not in e.reason for e in graph_breaks
    )

    labels = _label_sets(exposition)
    assert (
        labels["reason"] <= set(CATEGORIES) | set(CUDAGRAPH_SKIPS)
        and labels["phase"] <= set(PHASES)
        and labels["limit"] <= set(LIMITS)
    )
    assert labels["rank"] == {"0"}
    assert not any("evil" in v or "\n" in v or "ZZZZ" in v for vs in labels.values() for v in vs)

    for span in spans:
        for key, value in span["attributes"].items():
            for item in value if isinstance(value, list) else [value]:
                assert not isinstance(item, str) or len(item) <= ATTRIBUTE_LIMIT, (key, len(item))
    assert any(
        "evil" in str(s["attributes"].get("recompprof.guard_failure.detail", "")) for s in spans
    )

    report = recompprof.report(session)
    assert "Tagged.forward (tests/test_hostile_input.py" in render_text(report)
    html = render_html(report, title=EVIL[:200])
    assert 'a"} evil' not in html  # quotes are escaped in the page


def _bad_values(name: str, field: Any) -> list[tuple[str, Any]]:
    """(source, value) pairs that must be rejected for ``field``, derived from its type and bounds."""
    annotation = field.annotation
    args = typing.get_args(annotation)
    base = (
        next((a for a in args if a is not type(None)), annotation)
        if type(None) in args
        else annotation
    )
    origin = typing.get_origin(base)
    cases: list[tuple[str, Any]] = []
    if base is bool:
        cases += [("env", "maybe"), ("arg", "maybe"), ("arg", [True])]
    elif base in (int, float):
        cases += [("env", "twelve"), ("arg", "twelve"), ("arg", [1]), ("env", "1e999x")]
        for bound in field.metadata:
            for key, step in (("ge", -1), ("gt", 0), ("le", 1), ("lt", 0)):
                if hasattr(bound, key):
                    edge = getattr(bound, key) + (
                        step if base is int else step or (-1e-9 if key == "gt" else 1e-9)
                    )
                    cases += [("env", str(edge)), ("arg", edge)]
        if base is float:
            cases += [("arg", float("nan")), ("env", "inf")]
    elif origin is typing.Literal:
        cases += [("env", "bogus"), ("arg", "bogus"), ("arg", 3)]
    elif origin is list:
        cases += [("env", "bogus"), ("arg", ["bogus"]), ("arg", 3)]
    elif base in (str, Path):
        cases += [("arg", 12), ("arg", ["a"])]
    elif origin is dict:  # name=value pairs (labels)
        cases += [("env", "team"), ("env", "bad name=x"), ("arg", {"team": 3}), ("arg", ["a"])]
    return cases


CASES = [
    (name, source, value)
    for name, field in Settings.model_fields.items()
    for source, value in _bad_values(name, field)
]


def test_every_setting_has_bad_value_cases() -> None:
    """Every field of Settings gets generated bad-value cases, so a new setting is covered without editing this test."""
    assert {name for name, _, _ in CASES} == set(Settings.model_fields)


@pytest.mark.parametrize(
    ("name", "source", "value"), CASES, ids=[f"{n}-{s}-{v!r}"[:60] for n, s, v in CASES]
)
def test_bad_setting_fails_at_attach_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, source: str, value: Any
) -> None:
    """A wrong type, out-of-range or unknown value is one ConfigError at attach naming the setting, and nothing is left attached."""
    if source == "env":
        monkeypatch.setenv(ENV_PREFIX + name.upper(), str(value))
        kwargs: dict[str, Any] = {}
    else:
        kwargs = {name: value}
    with pytest.raises(ConfigError) as error:
        recompprof.attach(**kwargs)
    message = str(error.value)
    assert f"'{name}'" in message and (ENV_PREFIX + name.upper() in message) == (source == "env")
    assert (
        error.value.__suppress_context__ or error.value.__cause__ is None
    )  # not a chained traceback from pydantic
    assert len(message) < 2000 and recompprof._capture.session.current() is None


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PROMETHEUS_MODE": "textfile"}, "prometheus_textfile_dir"),
        ({"PROMETHEUS_MODE": "pushgateway"}, "prometheus_pushgateway_url"),
        ({"PROMETHEUS_CERTFILE": "/nonexistent/cert.pem"}, "prometheus_keyfile"),
        ({"PROMETHEUS_BASIC_AUTH": "no-colon"}, "prometheus_basic_auth"),
        ({"PROMETHEUS_BASIC_AUTH": ":password-without-user"}, "prometheus_basic_auth"),
    ],
)
def test_exporter_settings_that_cannot_work_fail_at_attach(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    """Prometheus settings that cannot work together, given by environment, fail attach naming the setting and leave torch untouched."""
    import logging

    monkeypatch.setenv("RECOMPPROF_EXPORTERS", "prometheus")
    for key, value in env.items():
        monkeypatch.setenv(ENV_PREFIX + key, value)
    filters = list(logging.getLogger("torch._utils_internal").filters)
    with pytest.raises(ConfigError, match=named):
        recompprof.attach()
    assert recompprof._capture.session.current() is None
    assert logging.getLogger("torch._utils_internal").filters == filters


def test_unknown_argument_and_variable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An unknown attach() argument is a ConfigError listing the known settings; an unknown RECOMPPROF_ variable is a warning."""
    with pytest.raises(
        ConfigError, match="unknown recompprof setting.*prometheus_prot.*known settings: mode"
    ):
        recompprof.attach(prometheus_prot=9000)
    monkeypatch.setenv("RECOMPPROF_PROMETHEUS_PROT", "9000")
    with recompprof.attach(event_log=False):
        pass
    assert any("RECOMPPROF_PROMETHEUS_PROT" in r.getMessage() for r in caplog.records)
    assert os.environ["RECOMPPROF_PROMETHEUS_PROT"] == "9000"
