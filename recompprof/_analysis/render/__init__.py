"""Presentation: the shared wording and the layouts (terminal, HTML, watch) drawn from the report model."""
