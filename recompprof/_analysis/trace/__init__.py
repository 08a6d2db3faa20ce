"""TORCH_TRACE ingest: torch's structured-log records, their frames, and the events they become."""
