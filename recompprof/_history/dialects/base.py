"""What every engine's dialect is made of: the :class:`Dialect` itself, where a lake is as its URI
names it (:class:`Where`), the kinds of column and string literals (:mod:`recompprof._history.dialects`)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from recompprof._history.columns import KINDS

__all__ = ["KINDS", "Dialect", "Where", "literal"]


@dataclass(frozen=True)
class Where:
    """A lake's root as other engines name it, read from its URI without opening anything."""

    scheme: str  # "" for a local path; else the URI's (s3, s3a, gs, ...), kept as given
    root: str  # an absolute local path, or bucket/prefix
    endpoint: str = ""  # an S3-compatible store's host[:port] (endpoint_override=)
    endpoint_scheme: str = "https"
    region: str = ""

    @classmethod
    def of(cls, uri: str) -> Where:
        if "://" not in uri:
            return cls("", str(Path(uri).expanduser().absolute()).rstrip("/"))
        parts = urllib.parse.urlsplit(uri)
        if parts.scheme == "file":
            return cls("", urllib.parse.unquote(parts.path).rstrip("/"))
        query = dict(urllib.parse.parse_qsl(parts.query))
        # The bucket without the keys a URI may carry (s3://KEY:SECRET@bucket, pyarrow's): no other
        # engine takes them there, and a printed text must never hold them.
        bucket = parts.netloc.rpartition("@")[2]
        return cls(
            parts.scheme,
            f"{bucket}{parts.path}".rstrip("/"),
            endpoint=query.get("endpoint_override", ""),
            endpoint_scheme=query.get("scheme", "https"),
            region=query.get("region", ""),
        )

    @property
    def local(self) -> bool:
        return not self.scheme

    @property
    def bucket(self) -> str:
        return self.root.partition("/")[0]

    @property
    def key(self) -> str:
        return self.root.partition("/")[2]

    def uri(self, under: str) -> str:
        """``under`` (a path below the root) as a URI in the lake's own scheme."""
        return f"{self.root}/{under}" if self.local else f"{self.scheme}://{self.root}/{under}"

    def http(self, under: str) -> str:
        """``under`` as an HTTP(S) URL of the object store (path style on an S3-compatible one)."""
        if self.endpoint:
            return f"{self.endpoint_scheme}://{self.endpoint}/{self.root}/{under}"
        region = f".{self.region}" if self.region else ""
        path = f"{self.key}/{under}" if self.key else under
        return f"https://{self.bucket}.s3{region}.amazonaws.com/{path}"


def literal(text: str) -> str:
    """A SQL string literal, the quote doubled (paths, and values on engines without \\ escapes)."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class Dialect:
    """How one engine spells what has no portable spelling."""

    name: str
    percentile: str  # with {x} and {p}; or {ps} (every p asked of x in the text) and {i} (which)
    week: str  # with {d}
    size: str  # with {x}
    types: Mapping[str, str]  # each of KINDS (the lake's kinds of column) as this engine types it
    # One root of a table: (statements that must run first, the FROM source), given where the lake
    # is, the table, the root's suffix ("daily" or "raw"), the root's path under the lake and the
    # columns (name, kind) the source must give, null where a file lacks one.
    source: Callable[[Where, str, str, str, list[tuple[str, str]]], tuple[str, str]]
    view: str = "CREATE OR REPLACE VIEW {table} AS\n{body};\n"
    preamble: Callable[[Where], str] = field(default=lambda where: "")
    date: str = "DATE '{d}'"
    backslash_escapes: bool = False  # Spark and ClickHouse read \ in a string literal as an escape

    def string(self, value: str) -> str:
        if self.backslash_escapes:
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return literal(value)

    def declared(self, columns: list[tuple[str, str]], sep: str = ", ") -> str:
        """``columns`` (name, kind) as this engine declares them: ``name TYPE, ...``."""
        return sep.join(f"{name} {self.types[of]}" for name, of in columns)

    def expand(self, text: str) -> str:
        """``text`` with the macros spelled for this engine (a template: values are put in after)."""
        asked: dict[str, list[str]] = {}
        for m in _PCTL.finditer(text):
            asked.setdefault(m["x"], []).append(m["p"])
        text = _PCTL.sub(
            lambda m: self.percentile.format(
                x=m["x"],
                p=m["p"],
                ps=", ".join(asked[m["x"]]),
                i=asked[m["x"]].index(m["p"]) + 1,
            ),
            text,
        )
        text = _WEEK.sub(lambda m: self.week.format(d=m["d"]), text)
        return _SIZE.sub(lambda m: self.size.format(x=m["x"]), text)


_PCTL = re.compile(r"PCTL\((?P<x>[\w.]+), (?P<p>[0-9.]+)\)")
_WEEK = re.compile(r"WEEK\((?P<d>[\w.]+)\)")
_SIZE = re.compile(r"SIZE\((?P<x>[\w.]+)\)")
