#!/usr/bin/env bash
# The speed pair of the offline-wing restructure: the tree before it (OLD) against the tree after
# it (NEW), each command run from its own tree, in turn (OLD NEW OLD NEW ...), the ratio NEW/OLD taken pair by
# pair so it holds when the machine's speed drifts during the run.
#
#   scripts/bench_restructure.sh OLD_TREE NEW_TREE [RUNS]            # run every pair, RUNS counted runs each
#   scripts/bench_restructure.sh OLD_TREE NEW_TREE --commands        # print the pairs: NAME<TAB>NEW<TAB>OLD
#
# (a) offline: `report`, `check` and `diff` over the generated run of scripts/record_corpus.py ($CORPUS/large
#     and $CORPUS/large_b: 2 ranks x 30,000 events, 72 MB each, so folded in worker processes);
# (b) recorder: benchmarks/bench_soak.py synthetic (compile records through the session's on_torch_record,
#     event log + Prometheus + OTel on, OTel collector down), $EVENTS records; each tree runs its own copy of
#     the benchmark (it reads the recorder's private maps, whose paths the restructure may move). Its own
#     us/event figure is printed too: the whole process includes importing torch, and its wall time the OTel
#     exporter's retries against the collector that is down, so quote its CPU ratio.
#
# Environment: CORPUS (required: the folder scripts/record_corpus.py wrote), PY (default this checkout's
# .venv/bin/python), EVENTS
# (default 20000), OUT (where the benchmark's output is kept; default a new folder under /tmp).
# Target: every median ratio NEW/OLD <= 1.03.
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,20p' "$0"
    exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
MODE=${3:-5}
[ -n "${CORPUS:-}" ] || { echo "bench_restructure.sh: set CORPUS to the folder scripts/record_corpus.py wrote" >&2; exit 2; }
CORPUS=$(realpath "$CORPUS")
PY=${PY:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
EVENTS=${EVENTS:-20000}
OUT=${OUT:-$(mktemp -d /tmp/bench-restructure.XXXXXX)}
mkdir -p "$OUT"

# Every command runs in a fixed, minimal environment: only its own tree on the path.
base="env -i PATH=/usr/bin:/bin HOME=$HOME TZ=UTC LC_ALL=C.UTF-8 COLUMNS=120 PYTHONHASHSEED=0 OMP_NUM_THREADS=1"
cli() {  # cli TREE ARGS...: the recompprof command of TREE
    local tree=$1
    shift
    echo "$base PYTHONPATH=$tree:$tree/exporters $PY -m recompprof._cli.main $*"
}
soak() {  # soak TREE TAG: the recorder benchmark of TREE, its output appended to $OUT/soak-TAG.txt
    local tree=$1 tag=$2
    echo "sh -c 'cd $tree && exec $base PYTHONPATH=$tree:$tree/exporters $PY benchmarks/bench_soak.py synthetic --events $EVENTS --sample $((EVENTS / 4)) --warmup $((EVENTS / 4)) --otel down >>$OUT/soak-$tag.txt 2>&1'"
}

pairs() {
    local large=$CORPUS/large/run large_b=$CORPUS/large_b/run
    printf 'report\t%s\t%s\n' "$(cli "$NEW" report "$large")" "$(cli "$OLD" report "$large")"
    printf 'check\t%s\t%s\n' "$(cli "$NEW" check "$large" --max-recompiles 0)" "$(cli "$OLD" check "$large" --max-recompiles 0)"
    printf 'diff\t%s\t%s\n' "$(cli "$NEW" diff "$large" "$large_b")" "$(cli "$OLD" diff "$large" "$large_b")"
    printf 'recorder\t%s\t%s\n' "$(soak "$NEW" new)" "$(soak "$OLD" old)"
}

if [ "$MODE" = "--commands" ]; then
    pairs
    exit 0
fi
for tree in "$OLD" "$NEW"; do
    [ -f "$tree/recompprof/__init__.py" ] || { echo "$tree is no recompprof tree" >&2; exit 2; }
done
[ -d "$CORPUS/large/run" ] && [ -d "$CORPUS/large_b/run" ] || {
    echo "$CORPUS/large and large_b are missing: scripts/record_corpus.py CORPUS --only large" >&2
    exit 2
}

echo "OLD $OLD ($(git -C "$OLD" rev-parse --short HEAD 2>/dev/null || echo '?'))  NEW $NEW ($(git -C "$NEW" rev-parse --short HEAD 2>/dev/null || echo '?'))  runs $MODE  events $EVENTS  load $(cut -d' ' -f1-3 /proc/loadavg)"
pairs | "$PY" -c '
import os, shlex, statistics, subprocess, sys, time

runs = int(sys.argv[1])

def timed(cmd):
    """Wall seconds, CPU seconds (the child and every child it waited for) and peak RSS MB of one run."""
    t0 = time.monotonic()
    proc = subprocess.Popen(shlex.split(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode

def fmt(xs, unit="s"):
    return f"{statistics.median(xs):7.2f} {unit} [{min(xs):.2f}-{max(xs):.2f}]"

for line in sys.stdin:
    name, new, old = line.rstrip("\n").split("\t")
    timed(old), timed(new)  # one warm-up each (page cache, .pyc files)
    got = {"old": [], "new": []}
    for _ in range(runs):
        got["old"].append(timed(old))
        got["new"].append(timed(new))
    codes = {k: sorted({r[3] for r in v}) for k, v in got.items()}
    wall = [n[0] / o[0] for o, n in zip(got["old"], got["new"])]
    cpu = [n[1] / o[1] for o, n in zip(got["old"], got["new"])]
    print(f"{name}:")
    for k in ("old", "new"):
        rows = got[k]
        print(f"  {k}  wall {fmt([r[0] for r in rows])}  cpu {fmt([r[1] for r in rows])}  "
              f"peak {statistics.median(r[2] for r in rows):.0f} MB  exit {codes[k]}")
    ratio = "x"
    print(f"  new/old  wall {fmt(wall, ratio)}  cpu {fmt(cpu, ratio)}", flush=True)
' "$MODE"
for tag in old new; do
    if [ -f "$OUT/soak-$tag.txt" ]; then
        echo "recorder $tag, the benchmark's own figure (every run, warm-up first):"
        grep '^synthetic:' "$OUT/soak-$tag.txt" | sed 's/^/  /'
    fi
done
echo "output kept in $OUT"
