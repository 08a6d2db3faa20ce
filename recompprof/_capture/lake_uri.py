"""What a lake URI must name, checked where it is given: the ``history_uri`` setting at ``attach`` and
the lake's own opening (``export --to``, ``--lake``). The standard library alone: settings and the
lake's query path both import it."""

from __future__ import annotations


def names_no_place(uri: str) -> bool:
    """Whether a lake URI with a scheme names no bucket or folder (``s3://``, ``file://``): pyarrow
    would refuse the first, and take the second as the filesystem's root."""
    scheme, sep, rest = uri.partition("://")
    return bool(sep) and not rest.partition("?")[0].strip("/")
