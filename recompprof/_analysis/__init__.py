"""Offline analysis: reading runs (event logs and ``TORCH_TRACE`` files), folding them into a report, and what
is built on the report: the text and HTML renderers, ``check``, ``diff`` and divergence across ranks."""
