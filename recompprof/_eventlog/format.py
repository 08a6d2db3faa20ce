"""How event logs are named, for the writer that names them and the reader that finds them."""

from __future__ import annotations

import re

SUFFIX = ".jsonl"
LOG_GLOB = f"rank*{SUFFIX}"  # the files the writer's log_path names
LOG_NAME = re.compile(rf"rank(\d+)-\d+{re.escape(SUFFIX)}")  # log_path's names, with the rank
