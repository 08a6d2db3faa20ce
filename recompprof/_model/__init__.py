"""The event model and its rules: what a compile, a guard failure or a graph break is, and how they are
categorised, counted and explained. No torch and no I/O here: capture, the event log and analysis all build on it."""
