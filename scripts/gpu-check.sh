#!/usr/bin/env bash
# The GPU check: one command that verifies recompprof on a CUDA device (docs/gpu.md). It installs the
# carried wheels (.whl/, from scripts/gpu-bundle.sh) and recompprof from this working tree into a
# --target folder, then runs the gpu-marked tests, real CUDA workloads compared with TORCH_LOGS and
# TORCH_TRACE, and the overhead measurement, within --budget seconds (default 540), and writes its report
# under $OUT (else ./gpu-check-out).
#
#   scripts/gpu-check.sh               on the device machine
#   scripts/gpu-check.sh --rehearse    the CPU rehearsal: what runs without CUDA; the rest listed
#   PYTHON=.venv/bin/python scripts/gpu-check.sh --rehearse
#
# Exit status: 0 every check that ran passed; 1 a check failed; 2 bad arguments; 3 no CUDA device
# (nothing run, the checks listed); 4 the environment cannot run it (torch missing, no wheels, install failed).
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check/main.py "$@"
