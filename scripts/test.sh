#!/usr/bin/env bash
# The test command: sets everything up on a fresh machine, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
