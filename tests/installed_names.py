"""Names the installed libraries give, read from their code rather than written into the tests.

A library's release can rename an argument (transformers 5.24: a model's KV cache ``past_key_values`` ->
``cache``) and torch then guards the new name. recompprof reports the name the code has, so a test that
expects a subject naming a library's argument reads that name from the installed release; its verdict
(category, subject, entry) is then the same on either side of the rename.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any


def cache_keyword(model: type) -> str:
    """The keyword a transformers model's ``forward`` takes its KV cache by: the parameter annotated with
    transformers' ``Cache``. ``generate()`` passes the cache under it, so torch guards ``kwargs['<it>']``."""
    from transformers import Cache

    parameters = inspect.signature(inspect.unwrap(model.forward)).parameters.values()
    for parameter in parameters:
        annotation = parameter.annotation
        if isinstance(annotation, str):
            if re.search(r"\bCache\b", annotation):
                return parameter.name
        elif annotation is Cache or Cache in typing.get_args(annotation):
            return parameter.name
    raise LookupError(f"{model.__name__}.forward takes no Cache")


def renamed_keywords(function: Callable[..., Any]) -> set[str]:
    """Both names of every keyword a transformers ``deprecate_kwarg`` wrapper in ``function``'s decorator chain
    renames (its closure's ``old_name`` and ``new_name``): keys the wrapper moves from one to the other."""
    out: set[str] = set()
    while function is not None:
        code = function.__code__
        cells = dict(zip(code.co_freevars, function.__closure__ or ()))
        for name in ("old_name", "new_name"):
            if name in cells and isinstance(cells[name].cell_contents, str):
                out.add(cells[name].cell_contents)
        function = getattr(function, "__wrapped__", None)
    return out
