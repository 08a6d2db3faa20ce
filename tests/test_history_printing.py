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


@pytest.mark.parametrize("dialect", ["duckdb", "spark", "trino", "clickhouse"])
def test_printed_texts_name_the_bucket_without_the_keys_a_uri_carries(dialect, capsys):
    """A lake URI carrying its keys (``s3://KEY:SECRET@bucket/...``, as pyarrow takes them): every
    engine's printed views name the bucket and its prefix, never the keys (they named the bucket
    ``KEY:SECRET@bucket``: the secret printed, and a path no engine could read)."""
    from recompprof._cli.main import main

    uri = UNREACHABLE.replace("s3a://", "s3a://AKIDTEST:s3cr3t@")
    argv = ["history", "cost", "--lake", uri, "--print-sql", "--dialect", dialect]
    assert main([*argv, "--through", "none"]) == 0
    printed = capsys.readouterr()
    assert "s3cr3t" not in printed.out + printed.err and "AKIDTEST" not in printed.out
    assert re.search(r"\bbucket/lake/v1/compiles", printed.out), printed.out[:2000]
