"""The durable event log: one JSON-lines file per process in a run directory, written by capture and read by analysis."""
