"""A faster exposition writer, byte-identical to prometheus_client's for the families it accepts.

At the frame cap one rank exports ~1,500 series; prometheus_client's generic writers re-validate and
re-escape every label name of every sample (~20 µs a sample here), which alone exceeded the 20 ms
scrape budget. Label sets repeat from scrape to scrape, so their rendered form is cached. Families
with names outside the legacy character set, native histograms or timestamps are not accepted
(:class:`Unsupported`) and the caller falls back to prometheus_client's writer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from recompprof.exporter import RecompprofError

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_FamilyCache = dict[int, tuple[Metric, str]]
_CACHE_LIMIT = 20_000  # label sets are closed vocabularies; this only guards against a misuse


class Unsupported(RecompprofError):
    """The families need prometheus_client's general writer."""


def _escape_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Renderer:
    """Renders families as Prometheus text 0.0.4 or OpenMetrics 1.0; keeps a cache of label strings."""

    def __init__(self) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}
        self._values: dict[float, str] = {}
        self._text_cache: _FamilyCache = {}
        self._om_cache: _FamilyCache = {}

    def _labelstr(self, labels: dict[str, str]) -> str:
        key = tuple(labels.items())
        text = self._labels.get(key)
        if text is None:
            for name in labels:
                if not _LABEL_NAME.match(name):
                    raise Unsupported(name)
            inner = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(labels.items()))
            text = "{" + inner + "}" if inner else ""
            if len(self._labels) > _CACHE_LIMIT:
                self._labels.clear()
            self._labels[key] = text
        return text

    def _value(self, value: float) -> str:
        text = self._values.get(value)
        if text is None:
            text = floatToGoString(value)
            if len(self._values) > _CACHE_LIMIT:
                self._values.clear()
            self._values[value] = text
        return text

    def text(self, families: Iterable[Metric]) -> bytes:
        """Prometheus text format 0.0.4 (what ``prometheus_client.generate_latest`` writes)."""
        self._text_cache, body = self._render(families, self._text_cache, self._text_family)
        return body.encode()

    def openmetrics(self, families: Iterable[Metric]) -> bytes:
        """OpenMetrics 1.0 text (what ``prometheus_client.openmetrics.exposition.generate_latest`` writes)."""
        self._om_cache, body = self._render(families, self._om_cache, self._om_family)
        return (body + "# EOF\n").encode()

    @staticmethod
    def _render(
        families: Iterable[Metric], cache: _FamilyCache, render: Callable[[Metric], str]
    ) -> tuple[_FamilyCache, str]:
        # A family object handed in again unchanged (the collector's per-frame families between
        # compiles) reuses its text; the cache keeps only the families of the latest call.
        fresh: _FamilyCache = {}
        chunks = []
        for metric in families:
            hit = cache.get(id(metric))
            chunk = hit[1] if hit is not None and hit[0] is metric else render(metric)
            fresh[id(metric)] = (metric, chunk)
            chunks.append(chunk)
        return fresh, "".join(chunks)

    def _text_family(self, metric: Metric) -> str:
        name, typ = metric.name, metric.type
        if typ == "counter":
            name += "_total"
        elif typ == "unknown":
            typ = "untyped"
        elif typ not in ("gauge", "histogram", "summary"):
            raise Unsupported(typ)
        if not _METRIC_NAME.match(name):
            raise Unsupported(name)
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out = [f"# HELP {name} {doc}\n# TYPE {name} {typ}\n"]
        created = metric.name + "_created"
        for s in metric.samples:
            if s.timestamp is not None or s.native_histogram is not None or s.name == created:
                raise Unsupported(s.name)
            out.append(f"{s.name}{self._labelstr(s.labels)} {self._value(s.value)}\n")
        return "".join(out)

    def _om_family(self, metric: Metric) -> str:
        name = metric.name
        if not _METRIC_NAME.match(name):
            raise Unsupported(name)
        out = [
            f"# HELP {name} {_escape_value(metric.documentation)}\n# TYPE {name} {metric.type}\n"
        ]
        if metric.unit:
            out.append(f"# UNIT {name} {metric.unit}\n")
        for s in metric.samples:
            if s.timestamp is not None or s.native_histogram is not None:
                raise Unsupported(s.name)
            line = f"{s.name}{self._labelstr(s.labels)} {self._value(s.value)}"
            if s.exemplar is not None:
                if not s.name.endswith("_bucket"):
                    raise Unsupported(s.name)
                ex = s.exemplar
                exlabels = ",".join(
                    f'{k}="{_escape_value(v)}"' for k, v in sorted(ex.labels.items())
                )
                line += f" # {{{exlabels}}} {floatToGoString(ex.value)}"
                if ex.timestamp is not None:
                    line += f" {ex.timestamp}"
            out.append(line + "\n")
        return "".join(out)
