#!/usr/bin/env bash
# The main job: sets everything up on a fresh machine, then runs the built-in demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/recompprof demo "$@"
