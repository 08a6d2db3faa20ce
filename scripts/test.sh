#!/usr/bin/env bash
# The test command: sets everything up on a fresh machine, lints and type-checks, then runs the suite.
#
#   scripts/test.sh                 the whole suite: CI's gate (.ci/run), every real run and server
#   scripts/test.sh --quick         the edit loop (under 5 minutes): lint, types, the unit and property
#                                   tests and one shared real run; its recordings are kept in
#                                   .test-recordings/ and reused while nothing they depend on changes
#   scripts/test.sh [--quick] ARGS  ARGS go to pytest (a file, -k, -x, -n 1, --junitxml=...)
#
# Tiers, markers, workers and recordings: docs/testing.md. Each step prints its wall time; pytest prints
# the slowest tests (--durations) and the time per test file, wall and CPU (--timing-files).
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
    shift
fi
# pytest-xdist workers: 3 on this project's 2-core machines measured fastest (docs/testing.md, "Workers");
# RECOMPPROF_TEST_WORKERS overrides (0: no xdist at all).
WORKERS="${RECOMPPROF_TEST_WORKERS:-3}"

step() {  # step NAME COMMAND...: run COMMAND, then say how long it took
    local name="$1" began=$SECONDS rc=0
    shift
    echo "scripts/test.sh: $name" >&2
    "$@" || rc=$?
    echo "scripts/test.sh: $name: $((SECONDS - began)) s" >&2
    return $rc
}

step "system packages (scripts/system-deps.sh)" scripts/system-deps.sh
step "environment (scripts/setup.sh)" scripts/setup.sh
step "the S3A connector for Spark (scripts/s3a-jars.sh)" scripts/s3a-jars.sh
# Lint and types first (configuration in pyproject.toml): a finding stops the run before pytest starts.
step "ruff check ." .venv/bin/ruff check . ||
    { echo "scripts/test.sh: FAILED: ruff found problems (try: .venv/bin/ruff check --fix .)" >&2; exit 1; }
step "ruff format --check ." .venv/bin/ruff format --check . >/dev/null ||
    { echo "scripts/test.sh: FAILED: files not formatted (run: .venv/bin/ruff format .)" >&2;
      .venv/bin/ruff format --check . >&2 || true; exit 1; }
step "mypy (recompprof, exporters)" .venv/bin/mypy ||
    { echo "scripts/test.sh: FAILED: mypy found type errors" >&2; exit 1; }
# The machine's environment may say PYTHONDONTWRITEBYTECODE: compile once here, so the hundreds of job
# processes the suite starts read bytecode instead of compiling recompprof again each (~0.3 s apiece).
step "bytecode (compileall)" .venv/bin/python -m compileall -q recompprof exporters tests

args=(--durations=25 --timing-files=25)
if [ "$WORKERS" != 0 ]; then
    # loadscope: a module's tests stay on one worker, so its module fixtures (servers, jobs) start once.
    args+=(-n "$WORKERS" --dist loadscope)
fi
if [ $QUICK -eq 1 ]; then
    # One token: pytest reads "--recordings DIR" before this suite's options exist, and would take an
    # existing DIR for the tests to run.
    args+=(--quick --recordings=.test-recordings)
fi
step "pytest ${args[*]} $*" .venv/bin/python -m pytest "${args[@]}" "$@"
