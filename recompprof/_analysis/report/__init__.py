"""The report model: its figure families, the fold that builds them from a run's events, and the merge of parts folded in workers."""
