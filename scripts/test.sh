#!/usr/bin/env bash
# The test command: sets everything up on a fresh machine, lints and type-checks, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/setup.sh
# Lint and types first (configuration in pyproject.toml): a finding stops the run before pytest starts.
echo "scripts/test.sh: ruff check ." >&2
.venv/bin/ruff check . || { echo "scripts/test.sh: FAILED: ruff found problems (try: .venv/bin/ruff check --fix .)" >&2; exit 1; }
echo "scripts/test.sh: ruff format --check ." >&2
.venv/bin/ruff format --check . >/dev/null || { echo "scripts/test.sh: FAILED: files not formatted (run: .venv/bin/ruff format .)" >&2; .venv/bin/ruff format --check . >&2 || true; exit 1; }
echo "scripts/test.sh: mypy (recompprof, exporters)" >&2
.venv/bin/mypy || { echo "scripts/test.sh: FAILED: mypy found type errors" >&2; exit 1; }
exec .venv/bin/python -m pytest "$@"
