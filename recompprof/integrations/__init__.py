"""Training-framework callbacks: one callback attaches recompprof for the trainer's run.

``recompprof.integrations.lightning.RecompprofCallback`` (extra ``lightning``) and
``recompprof.integrations.transformers.RecompprofCallback`` (extra ``transformers``). This package
imports neither framework; each submodule imports only its own. See docs/integrations.md.
"""

from recompprof.integrations._common import SteadyStateRecompileError

__all__ = ["SteadyStateRecompileError"]
