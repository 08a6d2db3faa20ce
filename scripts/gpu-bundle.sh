#!/usr/bin/env bash
# Builds .whl/: wheels for the device machine's interpreter (CPython 3.12, manylinux x86_64) of what
# recompprof and its prometheus and otel extras need there, at constraints/tested.txt's pins. Run it here,
# before the device call; scripts/gpu-check.sh installs them there with no index (docs/gpu.md).
#
#   scripts/gpu-bundle.sh             into .whl/ (emptied first; git ignores it)
#   PYTHON=.venv/bin/python scripts/gpu-bundle.sh
#
# The device has no pydantic, OpenTelemetry or DuckDB, and cannot reach a registry. Its own torch, numpy,
# transformers and requests stack are used as they are (shadowing them would change what the check
# measures). A pinned release with no wheel for that interpreter is named, and the script exits 1. What
# travels (the working tree plus .whl/) must stay under the device tool's 64 MiB: the script prints the
# sizes and exits 1 when the sum is over.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DEST=.whl
CONSTRAINTS="${CONSTRAINTS:-constraints/tested.txt}"  # the pins (another file: to try a move of a pin)
LIMIT_MIB=64
# The device's interpreter, as pip matches wheels for it (see /work/.library/device/README.md).
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# recompprof's dependencies and its prometheus and otel extras (pyproject.toml).
ROOTS=(pydantic pydantic-settings msgspec rich prometheus_client opentelemetry-api opentelemetry-sdk
       opentelemetry-exporter-otlp-proto-http)
# On the device already, and used by its torch and transformers: not carried.
DEVICE_HAS="requests urllib3 idna certifi charset-normalizer numpy packaging"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# 1. The set: the roots and everything they need, resolved under the pins. Resolved for this machine's
# Python (with the device's platform options, a pin with no wheel there only makes pip say "conflict");
# step 2 then asks for each one's wheel for the device.
if ! "$PY" -m pip install --dry-run --ignore-installed --quiet --report "$scratch/resolved.json" \
        -c "$CONSTRAINTS" "${ROOTS[@]}" >"$scratch/resolve.log" 2>&1; then
    echo "gpu-bundle: pip could not resolve ${ROOTS[*]} under $CONSTRAINTS:" \
        "$(grep -v '^WARNING' "$scratch/resolve.log" | tail -3 | tr '\n' ' ')" >&2
    exit 1
fi
mapfile -t pins < <("$PY" - "$scratch/resolved.json" "$DEVICE_HAS" <<'PYEOF'
import json, re, sys
skip = {re.sub(r"[-_.]+", "-", n).lower() for n in sys.argv[2].split()}
for item in json.load(open(sys.argv[1]))["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if re.sub(r"[-_.]+", "-", name).lower() not in skip:
        print(f"{name}=={version}")
PYEOF
)

# 2. Each wheel on its own, so that every pin without a wheel is named, not only the first; .whl/ is
# replaced only when all are there.
failed=()
for pin in "${pins[@]}"; do
    if ! "$PY" -m pip download --quiet --no-deps "${TARGET[@]}" -d "$scratch/wheels" "$pin" >"$scratch/one.log" 2>&1; then
        failed+=("$pin")
    fi
done
# recompprof itself is built there from the working tree, by this setuptools (pyproject's license
# string needs 77 or later; the device's own may be older): in build/, installed apart from the rest.
build_pin="$(grep -i '^setuptools==' "$CONSTRAINTS" || echo setuptools)"
if ! "$PY" -m pip download --quiet --no-deps "${TARGET[@]}" -d "$scratch/wheels/build" "$build_pin" \
        >"$scratch/one.log" 2>&1; then
    failed+=("$build_pin")
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu-bundle: no wheel for the device's Python (CPython 3.12, manylinux x86_64): ${failed[*]}" >&2
    exit 1
fi
rm -rf "$DEST"
mv "$scratch/wheels" "$DEST"
printf '%s\n' "# scripts/gpu-bundle.sh, $(date -u +%FT%TZ): CPython 3.12 manylinux x86_64" "${pins[@]}" \
    "# build/" "$build_pin" >"$DEST/BUNDLE.txt"

# 3. What travels: the working tree (tracked and untracked-not-ignored files) and the wheels.
tree_bytes="$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null \
    | awk '{s += $1} END {print s + 0}')"
wheel_bytes="$(du -sb "$DEST" | cut -f1)"
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
echo "gpu-bundle: ${#pins[@]} wheels in $DEST and $build_pin in $DEST/build, $(mib "$wheel_bytes") MiB; working tree $(mib "$tree_bytes") MiB;" \
    "together $(mib $((tree_bytes + wheel_bytes))) of $LIMIT_MIB MiB"
ls -1 "$DEST"/*.whl "$DEST"/build/*.whl | sed 's|^|  |'
if [ $((tree_bytes + wheel_bytes)) -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "gpu-bundle: over the device tool's $LIMIT_MIB MiB" >&2
    exit 1
fi
