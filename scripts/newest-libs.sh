#!/usr/bin/env bash
# Drift check: the tests that run real libraries (transformers, accelerate, lightning, peft, diffusers)
# under the versions the suite is pinned to (.venv, constraints/tested.txt) and again in a fresh venv with
# the newest releases of everything but torch; prints which versions moved and which tests changed outcome.
# The pins keep CI reproducible; this shows what users on the newest releases meet. It never fails because
# a test changed (exit 0, the difference is the result); it exits non-zero only when it could not run.
#
#   scripts/newest-libs.sh            # the real-library test files, pinned vs newest
#   --all                             # every test file (what moving the pins needs)
#   --freeze                          # then, if every test passed under the newest releases, write their
#                                     # versions to constraints/tested.txt (review and commit it)
#   --out DIR                         # results: junit XML and versions per side, report.md
#                                     # (default: newest-results/)
#   --pinned-junit FILE               # the pinned side's outcomes from a run of the same tests under .venv
#                                     # (CI passes the gate's own junit XML): the pinned side is not run again
#   NEWEST_VENV=DIR                   # the newest side's venv (default: .newest-venv/, made anew each run)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PYTHON:-python3}"
VENV="${NEWEST_VENV:-$ROOT/.newest-venv}"
OUT="$ROOT/newest-results"
ALL=0
FREEZE=0
PINNED_JUNIT=""
# pytest-xdist workers, as scripts/test.sh runs the gate (0: none)
WORKERS="${RECOMPPROF_TEST_WORKERS:-3}"
while [ $# -gt 0 ]; do
    case "$1" in
        --all) ALL=1 ;;
        --freeze) FREEZE=1; ALL=1 ;;
        --out) OUT="$2"; shift ;;
        --out=*) OUT="${1#--out=}" ;;
        --pinned-junit) PINNED_JUNIT="$2"; shift ;;
        --pinned-junit=*) PINNED_JUNIT="${1#--pinned-junit=}" ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "newest-libs.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
log() { echo "newest-libs.sh [$(date -u +%H:%M:%S)] $*" >&2; }

# The libraries whose releases are tried; the tests that import any of them are the ones that can change.
LIBS=(transformers accelerate lightning peft diffusers)
if [ $ALL -eq 1 ]; then
    files=(tests/test_*.py)
else
    # Named anywhere in the file: imported at the top, inside a test, by importorskip or in a child's code.
    mapfile -t files < <(grep -l -w -E "$(IFS='|'; echo "${LIBS[*]}")" tests/test_*.py)
fi

scripts/setup.sh || { log "FAILED: scripts/setup.sh (the pinned side)"; exit 1; }

# The newest side: torch stays the pinned CPU build (the torch matrix is scripts/compat.sh); everything
# else resolves afresh, ignoring constraints/tested.txt.
log "installing the newest releases into $VENV"
rm -rf "$VENV"
"$PY" -m venv "$VENV" || exit 1
echo "torch==2.13.0" >"$OUT/torch-pin.txt"
{
    "$VENV/bin/python" -m pip install -q --upgrade pip &&
    "$VENV/bin/python" -m pip install -q -c "$OUT/torch-pin.txt" "torch==2.13.0" numpy &&
    "$VENV/bin/python" -m pip install -q -c "$OUT/torch-pin.txt" -e ".[prometheus,otel,otel-grpc,dev]" "${LIBS[@]}" &&
    { "$VENV/bin/python" -m pip install -q -c "$OUT/torch-pin.txt" rotel || true; }
} >"$OUT/newest-install.log" 2>&1 || {
    log "FAILED: the newest releases do not install beside torch 2.13.0 (see $OUT/newest-install.log)"
    grep -v "is ignored" "$OUT/newest-install.log" | tail -5 >&2
    exit 1
}

workers=()
[ "$WORKERS" = 0 ] || workers=(-n "$WORKERS" --dist loadscope)
freeze() {  # $1 side name, $2 venv
    "$2/bin/python" -m pip freeze --all 2>/dev/null | grep -v -E "^(-e |#)" >"$OUT/$1-versions.txt"
}
run_side() {  # $1 side name, $2 venv
    freeze "$1" "$2"
    log "$1: pytest on ${#files[@]} test files"
    "$2/bin/python" -m pytest -q -p no:cacheprovider -o addopts="" "${workers[@]}" --junitxml="$OUT/$1.xml" \
        "${files[@]}" >"$OUT/$1-pytest.log" 2>&1
    log "$1: $(tail -1 "$OUT/$1-pytest.log")"
}
if [ -n "$PINNED_JUNIT" ]; then
    # The same tests already ran under .venv (the gate): their outcomes are the pinned side.
    [ -f "$PINNED_JUNIT" ] || { log "FAILED: --pinned-junit $PINNED_JUNIT: no such file"; exit 1; }
    freeze pinned "$ROOT/.venv"
    "$ROOT/.venv/bin/python" scripts/newest_libs_report.py --select "$PINNED_JUNIT" "${files[@]}" \
        >"$OUT/pinned.xml" || { log "FAILED: cannot read --pinned-junit $PINNED_JUNIT"; exit 1; }
    log "pinned: the outcomes of $PINNED_JUNIT for ${#files[@]} test files"
else
    run_side pinned "$ROOT/.venv"
fi
run_side newest "$VENV"

"$ROOT/.venv/bin/python" scripts/newest_libs_report.py "$OUT" "${LIBS[@]}" | tee "$OUT/report.md"
[ ${PIPESTATUS[0]} -eq 0 ] || exit 1

if [ $FREEZE -eq 1 ]; then
    if grep -q -E '(failures|errors)="[1-9]' "$OUT/newest.xml"; then
        log "not freezing: some tests fail under the newest releases (report above)"
        exit 1
    fi
    { sed -n '/^[^#]/q;p' constraints/tested.txt
      grep -v -E "^torch==" "$OUT/newest-versions.txt" | sort -f; } >"$OUT/tested.txt"
    mv "$OUT/tested.txt" constraints/tested.txt
    log "constraints/tested.txt now holds the newest versions: review with git diff, run scripts/test.sh, commit"
fi
