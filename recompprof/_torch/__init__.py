"""The only place recompprof touches torch internals: one adapter per signal, version-gated.

Each adapter has ``install()`` / ``uninstall()``, leaves torch exactly as it found it, and says at
install time whether its signal is live (``live``) and, if not, why (``reason_off``): the ``Adapter``
protocol of :mod:`recompprof._capture.adapters`. Core modules get plain values from here, never torch objects.
"""
