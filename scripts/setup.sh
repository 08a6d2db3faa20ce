#!/usr/bin/env bash
# Create or reuse .venv and install recompprof with everything the demo and the tests need.
# torch is pinned to the local CPU build first, so no CUDA packages are ever pulled. Everything else is
# installed at the versions the suite last passed with (constraints/tested.txt): a library's new release
# reaches .venv only when that file is moved on purpose (docs/compatibility.md, "Test dependencies").
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RECOMPPROF_VENV:-.venv}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp="$VENV/.recompprof-setup"
PINS="constraints/tested.txt"
want="$(cat pyproject.toml setup.py scripts/setup.sh "$PINS" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$VENV/bin/python" -m pip install -q -c "$PINS" --upgrade pip
    "$VENV/bin/python" -m pip install -q -c "$PINS" "torch==2.13.0" numpy  # torch warns "Failed to initialize NumPy" without it
    "$VENV/bin/python" -m pip install -q -c "$PINS" -e ".[prometheus,otel,otel-grpc,dev]"
    # rotel (a real OTLP collector, alpha) is optional: its tests skip with the reason if it cannot install.
    "$VENV/bin/python" -m pip install -q -c "$PINS" rotel || echo "setup: rotel did not install; the rotel tests will skip" >&2
    echo "$want" > "$stamp"
fi
