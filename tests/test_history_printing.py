"""``--print-sql`` with the compaction marker given prints every engine's texts from the lake's URI
alone: no lake opened, no credentials, and neither pyarrow nor DuckDB imported (docs/history.md,
"Engines"), so a scheduler or a notebook can print the views on a machine without the lake's
dependencies or its keys."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from recorded_runs import clean_env

# A bucket on an S3-compatible store nobody listens on: opening it fails, printing for it must not.
UNREACHABLE = "s3a://bucket/lake?endpoint_override=127.0.0.1:9&scheme=http"
# A module -X importtime names, by its top-level package.
_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s+(?P<name>[\w.]+)$", re.M)


@pytest.mark.workload  # the real command in a process of its own (tests/needs.py)
@pytest.mark.parametrize("dialect", ["duckdb", "spark", "trino", "clickhouse"])
def test_print_sql_imports_neither_pyarrow_nor_duckdb(dialect):
    """A real `recompprof history cost --print-sql --through` process prints the views and the query
    for an unreachable bucket, with no AWS credentials in its environment, and imports no module of
    pyarrow or DuckDB (as `python -X importtime` lists them)."""
    env = clean_env()
    for name in list(env):
        if name.startswith("AWS_"):
            del env[name]
    argv = ["history", "cost", "--lake", UNREACHABLE, "--print-sql", "--dialect", dialect]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "recompprof._cli.main", *argv]
        + ["--through", "2026-11-01"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "compacted through 2026-11-01" in done.stdout and "compile_s" in done.stdout
    imported = {m["name"].partition(".")[0] for m in _IMPORTED.finditer(done.stderr)}
    assert "recompprof" in imported  # importtime did list the imports
    assert not imported & {"pyarrow", "duckdb"}, sorted(imported & {"pyarrow", "duckdb"})
