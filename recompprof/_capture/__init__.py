"""Live capture: the session, the torch adapters' recorder, the running totals and the exporter interface.
It reaches torch only through ``recompprof._torch``."""
