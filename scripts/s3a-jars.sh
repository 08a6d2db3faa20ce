#!/usr/bin/env bash
# Hadoop's S3A connector, for the Spark test that reads an s3a:// lake (tests/test_history_spark.py).
#
# Spark reads s3a:// through the hadoop-aws jar and the AWS SDK it calls, which no Spark distribution
# (nor the pyspark wheel) bundles and which users take from Maven. This project's machines reach only
# package registries, so the jars come from PyPI: the sdist of sagemaker_pyspark 1.4.5 carries Apache
# Hadoop's hadoop-aws 3.3.1 and Amazon's aws-java-sdk-bundle 1.11.901, unmodified. Only those two are
# taken out, into .s3a-jars/, each checked against its SHA-256. Run again, it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.s3a-jars
PY="${PYTHON:-.venv/bin/python}"
declare -A SHA256=(
    [hadoop-aws-3.3.1.jar]=6be50ad8a8b445d2802381b085b2a3ede5c29d353450a6a21f16b2fefa962b6e
    [aws-java-sdk-bundle-1.11.901.jar]=b87175b32a16544cc1b37cf40390eb375833e62bed67f8ce6cde4b7ad6429ead
)
good() { [ -f "$DEST/$1" ] && [ "$(sha256sum "$DEST/$1" | cut -d' ' -f1)" = "${SHA256[$1]}" ]; }
missing=0
for jar in "${!SHA256[@]}"; do good "$jar" || missing=1; done
[ "$missing" = 0 ] && exit 0

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download -q --no-deps --no-binary :all: "sagemaker_pyspark==1.4.5" -d "$work"
mkdir -p "$DEST"
"$PY" - "$work"/sagemaker_pyspark-1.4.5.tar.gz "$DEST" "${!SHA256[@]}" <<'PY'
import sys, tarfile
from pathlib import Path

sdist, dest, names = sys.argv[1], Path(sys.argv[2]), set(sys.argv[3:])
with tarfile.open(sdist) as archive:
    for member in archive:
        name = Path(member.name).name
        if member.isfile() and name in names and "/deps/jars/" in member.name:
            (dest / name).write_bytes(archive.extractfile(member).read())
PY
for jar in "${!SHA256[@]}"; do
    good "$jar" || { echo "s3a-jars: $jar missing or not the expected bytes" >&2; exit 1; }
done
