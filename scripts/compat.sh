#!/usr/bin/env bash
# The torch compatibility matrix: for each torch version, a fresh venv with that torch from the registry,
# recompprof installed into it, the torch-facing tests (pytest -m torch_compat) and a probe of which
# signals are live and which profile-mode mechanism runs. Prints one table; exits non-zero when a
# supported version (>= the oldest in recompprof/_torch/versions.py SUPPORTED) fails to install or test.
#
#   scripts/compat.sh                     # every version below
#   scripts/compat.sh 2.6.0 2.15.0        # some versions
#   --keep            keep each venv (default: removed after its run; each is ~5 GB)
#   --install-only    only create the venvs (implies --keep); a later run reuses them
#   --no-prefetch     install each version only when its turn comes (one venv at a time; default: the
#                     next version installs while the current one is tested, two venvs at a time)
#   --out DIR         results: per-version JSON, junit XML, recorded reason strings, table.md
#                     (default: compat-results/)
#   COMPAT_VENVS=DIR  where the venvs go (default: .compat-venvs/)
#
# The Linux wheels on PyPI are CUDA builds (torch + nvidia-* packages, ~5 GB); they run on CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DEFAULT_VERSIONS=(2.4.1 2.5.1 2.6.0 2.7.1 2.8.0 2.9.1 2.10.0 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
PY="${PYTHON:-python3}"
VENVS="${COMPAT_VENVS:-$ROOT/.compat-venvs}"
OUT="$ROOT/compat-results"
KEEP=0
INSTALL_ONLY=0
PREFETCH=1
versions=()
while [ $# -gt 0 ]; do
    case "$1" in
        --keep) KEEP=1 ;;
        --install-only) INSTALL_ONLY=1; KEEP=1 ;;
        --no-prefetch) PREFETCH=0 ;;
        --out) OUT="$2"; shift ;;
        --out=*) OUT="${1#--out=}" ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) echo "compat.sh: unknown option $1" >&2; exit 2 ;;
        *) versions+=("$1") ;;
    esac
    shift
done
[ ${#versions[@]} -gt 0 ] || versions=("${DEFAULT_VERSIONS[@]}")
mkdir -p "$OUT" "$VENVS"
OUT="$(cd "$OUT" && pwd)"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1  # ~5 GB per version: never fill the pip cache
# A machine-wide pip configuration may cap torch (a `constraint` file in /etc/xdg/pip or pip.conf; this
# project's machines cap torch<=2.14.1), which makes `pip install torch==2.15.0` unresolvable. The matrix
# must install exactly the release it is asked for, so its own venvs get an empty constraint: the
# environment variable replaces the configured file for this script's pip calls only, and the machine's
# configuration is left as it is (its index, find-links and certificates still apply).
export PIP_CONSTRAINT=/dev/null
# recompprof's own runtime and test tools at the versions the suite last passed with (constraints/tested.txt);
# torch's dependencies stay as each torch release wants them (its pins differ from release to release).
TOOL_PINS="$VENVS/tool-constraints.txt"
grep -i -E '^(pydantic|pydantic[-_]core|pydantic[-_]settings|annotated[-_]types|typing[-_]inspection|python[-_]dotenv|rich|markdown[-_]it[-_]py|mdurl|pygments|msgspec|pytest|pluggy|iniconfig|hypothesis|attrs|sortedcontainers)==' \
    "$ROOT/constraints/tested.txt" >"$TOOL_PINS"

log() { echo "compat.sh [$(date -u +%H:%M:%S)] $*" >&2; }

installed_torch() {  # the torch version a venv holds, or nothing
    "$1/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null
}

setup_venv() {  # $1 version, $2 venv; returns non-zero on failure
    local v="$1" venv="$2"
    if [ -x "$venv/bin/python" ] && [ "$(installed_torch "$venv")" = "$v" ]; then
        log "torch $v: reusing $venv"
    else
        rm -rf "$venv"
        "$PY" -m venv "$venv" || return 1
        log "torch $v: installing from the registry into $venv"
        "$venv/bin/python" -m pip install -q "torch==$v" || return 1
    fi
    # recompprof (from this checkout) and what the torch-facing tests import; torch is already satisfied.
    "$venv/bin/python" -m pip install -q -c "$TOOL_PINS" -e "$ROOT" "pytest>=8" "hypothesis>=6.100" || return 1
}

install_version() {  # $1 version: the venv, with install.log, install.rc and install.s in $OUT/<v>
    local v="$1" dir="$OUT/$1" t0 rc=0
    mkdir -p "$dir"
    t0=$(date +%s)
    setup_venv "$v" "$VENVS/torch-$v" >"$dir/install.log" 2>&1 || rc=$?
    echo "$rc" >"$dir/install.rc"
    echo $(($(date +%s) - t0)) >"$dir/install.s"
}

test_version() {  # $1 version: probe, recorded reason strings, the torch-facing tests; then run.json
    local v="$1" venv="$VENVS/torch-$1" dir="$OUT/$1" t1 rc_install rc_tests=0
    rc_install="$(cat "$dir/install.rc" 2>/dev/null || echo 1)"
    t1=$(date +%s)
    if [ "$rc_install" -ne 0 ]; then
        log "torch $v: install FAILED (see $dir/install.log)"
        tail -5 "$dir/install.log" >&2
    else
        log "torch $v: probing signals, recording reason strings, running pytest -m torch_compat"
        "$venv/bin/python" scripts/compat_probe.py >"$dir/probe.json" 2>"$dir/probe.log" || true
        "$venv/bin/python" tests/fixtures/reasons/record.py --out "$dir" >"$dir/record.log" 2>&1 || true
        # Only the files with torch-facing tests: the others import exporters' packages not installed here.
        "$venv/bin/python" -m pytest -m "torch_compat and not inductor" -q -p no:cacheprovider -o addopts="" -rfEs \
            --junitxml="$dir/junit.xml" $(grep -l "torch_compat" tests/test_*.py) >"$dir/pytest.log" 2>&1 || rc_tests=$?
        log "torch $v: $(tail -1 "$dir/pytest.log")"
    fi
    printf '{"version": "%s", "install_rc": %d, "tests_rc": %d, "install_s": %d, "tests_s": %d, "commit": "%s"}\n' \
        "$v" "$rc_install" "$rc_tests" "$(cat "$dir/install.s" 2>/dev/null || echo 0)" $(($(date +%s) - t1)) \
        "$(git -C "$ROOT" describe --always --dirty 2>/dev/null)" >"$dir/run.json"
}

# Each next version installs (network-bound) while the current one is tested (CPU-bound): at most two
# venvs exist at a time.
install_version "${versions[0]}"
for i in "${!versions[@]}"; do
    v="${versions[$i]}" next="${versions[$((i + 1))]:-}" pid=""
    if [ $i -gt 0 ] && [ $PREFETCH -eq 0 ]; then
        install_version "$v"
    fi
    if [ -n "$next" ] && [ $PREFETCH -eq 1 ]; then
        install_version "$next" &
        pid=$!
    fi
    [ $INSTALL_ONLY -eq 1 ] || test_version "$v"
    [ $KEEP -eq 1 ] || rm -rf "$VENVS/torch-$v"
    [ -z "$pid" ] || wait "$pid"
done
[ $INSTALL_ONLY -eq 1 ] && exit 0
"$PY" scripts/compat_table.py "$OUT" "${versions[@]}" >"$OUT/table.md"
rc=$?
cat "$OUT/table.md"
if [ $rc -ne 0 ]; then  # fail loudly: what failed, where the logs are
    for v in "${versions[@]}"; do
        if ! grep -q '"install_rc": 0, "tests_rc": 0' "$OUT/$v/run.json" 2>/dev/null; then
            echo "---- torch $v: $OUT/$v/ (install.log, pytest.log)" >&2
            grep -E "^(FAILED|ERROR)" "$OUT/$v/pytest.log" >&2 2>/dev/null || tail -20 "$OUT/$v/install.log" >&2
        fi
    done
fi
exit $rc
