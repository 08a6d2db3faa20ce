"""Profile mode: the mode, what it does to cache entries, its limits, its gates and its counts."""
