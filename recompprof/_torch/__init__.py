"""The only place recompprof touches torch internals: one adapter per signal, version-gated.

Each adapter has ``install()`` / ``uninstall()``, leaves torch exactly as it found it, and says at
install time whether its signal is live (``Adapter.live``) and, if not, why (``Adapter.why_off``).
"""
