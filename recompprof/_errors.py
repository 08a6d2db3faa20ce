"""The base classes of the errors recompprof raises on purpose.

Every such error derives from :class:`RecompprofError`, so ``except RecompprofError`` catches them all;
each also keeps the builtin base callers already catch (``ConfigError`` is a ``ValueError``,
``RecompiledError`` an ``AssertionError``). The classes themselves live with their concept
(``recompprof._capture.settings.ConfigError``, ``recompprof._analysis.runs.RunError``, ...); the ``recompprof`` command
maps them to exit codes in one table (``recompprof._cli.main.exit_code``, listed in docs/cli.md).
"""

from __future__ import annotations


class RecompprofError(Exception):
    """An error recompprof raises on purpose; its message is one line naming the setting, path or rule."""


class CommandError(RecompprofError):
    """A command cannot do what its arguments ask (``check`` with no rule, a negative limit, an output
    file it cannot write)."""


class RuleBroken(RecompprofError):
    """Code recompiled where a rule the user set forbids it (``assert_no_recompiles``, a callback's
    ``fail_on_steady_state_recompiles``): the job's own failure, not recompprof's."""
