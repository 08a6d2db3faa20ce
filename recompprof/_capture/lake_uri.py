"""A lake URI's rules where it is given (the ``history_uri`` setting at ``attach``, ``export --to``,
``--lake``): what it must name, and how it is shown, a secret it carries never printed. The standard
library alone: settings and the lake's query path both import it."""

from __future__ import annotations

import re

# A URI's user information with a secret in it (``s3://KEY:SECRET@bucket``: pyarrow takes an object
# store's keys there), anywhere in a text.
_SECRET = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^\s@]*@")


def names_no_place(uri: str) -> bool:
    """Whether a lake URI with a scheme names no bucket or folder (``s3://``, ``file://``): pyarrow
    would refuse the first, and take the second as the filesystem's root."""
    scheme, sep, rest = uri.partition("://")
    return bool(sep) and not rest.partition("?")[0].strip("/")


def shown(text: str) -> str:
    """``text`` (a lake URI, or a line naming one) with the secret of every URI's user information
    shown as ``***``: a URI that carries an object store's keys is printed by export, by every
    ``history`` error and by the job's warning, and those lines land in CI and job logs."""
    return _SECRET.sub(r"\1:***@", text)
