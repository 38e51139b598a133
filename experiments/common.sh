# experiments/common.sh — sourced by every experiment's run.sh.
#
# Sets, from the experiment folder EXP (which the caller sets):
#   MODE      quick | full         (run.sh --quick or default)
#   RESULTS   $EXP/results (full, committed) or $EXP/results-quick (CI)
#   WORK      raw run folders: $EMU_EXP_WORK/<experiment>/<mode>, default
#             $EXP/work/<mode> (ignored by git; checkpoints live there)
#   EMU       the emu program; BUILD the CMake build folder (EMU_BUILD)
#   PY        /usr/bin/python3 when it exists (Debian's numpy and pandas)
#   JOBS      runs at a time (EMU_EXP_JOBS, default 2: the machine's cores)
# and the helpers below.  Every run is fixed by its options and seed.

set -euo pipefail

ROOT=$(cd "$EXP/../.." && pwd)
BUILD=${EMU_BUILD:-$ROOT/build}
EMU=${EMU:-$BUILD/cli/emu}
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
JOBS=${EMU_EXP_JOBS:-2}
TOOLS=$ROOT/experiments/tools

MODE=full
KEEP=0
for a in "$@"; do
    case $a in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    --keep) KEEP=1 ;;
    -h|--help)
        echo "usage: $0 [--quick] [--keep]"
        echo "  --quick  seconds to a minute or two, for CI (results-quick/);"
        echo "           default: the full run behind the README (results/)"
        echo "  --keep   skip training runs whose results are already there"
        echo "           (to complete an interrupted run)"
        exit 0 ;;
    *) echo "$0: unknown argument '$a'" >&2; exit 2 ;;
    esac
done

if [ "$MODE" = quick ]; then RESULTS=$EXP/results-quick; else RESULTS=$EXP/results; fi
NAME=$(basename "$EXP")
WORK=${EMU_EXP_WORK:-$EXP/work}
case $WORK in /*) ;; *) WORK=$PWD/$WORK ;; esac
[ -n "${EMU_EXP_WORK:-}" ] && WORK=$WORK/$NAME
WORK=$WORK/$MODE

if [ ! -x "$EMU" ]; then
    echo "$0: $EMU not found: build first (cmake -B build && cmake --build build)" >&2
    exit 1
fi

mkdir -p "$RESULTS" "$WORK"
JOBFILE=$WORK/jobs.txt
: > "$JOBFILE"
T_START=$(date +%s)

# q ARGS...: a shell-quoted copy of ARGS, one string.
q() { printf '%q ' "$@"; }

# train RUN [emu train options...]: queues one training run; its raw folder
# is $WORK/RUN, its trimmed copy $RESULTS/RUN (see tools/collect.py).
# KEEP_HIST=1 train ...: also keep the run's gradient histograms.
train() {
    local run=$1 hist=
    shift
    if [ $KEEP = 1 ] && [ -f "$RESULTS/$run/meta.json" ]; then
        return 0
    fi
    if [ "${KEEP_HIST:-0}" = 1 ]; then hist=--hist; fi
    echo "$(q "$EMU" train --quiet --force --checkpoint-every 0 --out "$WORK/$run" "$@") > $(q "$WORK/$run.log") 2>&1 && $(q "$PY" "$TOOLS/collect.py" "$WORK/$run" "$RESULTS/$run") $hist && echo $(q "  done: $run")" >> "$JOBFILE"
}

# job COMMAND...: queues any other command.
job() {
    echo "$(q "$@")" >> "$JOBFILE"
}

# run_jobs: runs the queued commands, JOBS at a time; fails if any failed
# (and shows the end of that run's log).
run_jobs() {
    local n=0 failed=0 pids=() cmds=() i
    while IFS= read -r cmd; do
        [ -n "$cmd" ] || continue
        while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
            wait -n || failed=1
        done
        bash -c "$cmd" &
        n=$((n + 1))
    done < "$JOBFILE"
    while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
        wait -n || failed=1
    done
    : > "$JOBFILE"
    if [ $failed -ne 0 ]; then
        echo "$0: a run failed; logs in $WORK/*.log:" >&2
        for f in "$WORK"/*.log; do
            if grep -qi 'error\|emu train:' "$f" 2>/dev/null; then
                echo "== $f" >&2
                tail -5 "$f" >&2
            fi
        done
        return 1
    fi
}

# finish: records how long the experiment took and in which mode.
finish() {
    local t=$(( $(date +%s) - T_START ))
    # CPU time of everything this script ran (`times`, second line: the
    # children's user and system time): on a busy machine the wall time
    # says little about the cost.
    # (`times` in a command substitution would time the subshell.)
    local cpu
    times > "$WORK/times.txt"
    cpu=$(tail -1 "$WORK/times.txt" | awk '{
        s = 0
        for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] }
        printf "%.0f", s }')
    printf '{"experiment": "%s", "mode": "%s", "seconds": %d, "cpu_seconds": %s, "jobs": %d, "date": "%s"}\n' \
        "$NAME" "$MODE" "$t" "$cpu" "$JOBS" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$RESULTS/run_info.json"
    echo "$NAME ($MODE): ${t}s wall, ${cpu}s CPU; results in $RESULTS"
}

# build_program TARGET SOURCE: the path of an experiment's C program, built
# by CMake when experiments/ is part of the build, or else compiled here
# against the built static library.
build_program() {
    local target=$1 src=$2
    if [ -f "$BUILD/Makefile" ] || [ -f "$BUILD/build.ninja" ]; then
        if cmake --build "$BUILD" --target "$target" >/dev/null 2>&1 &&
           [ -x "$BUILD/experiments/$target" ]; then
            echo "$BUILD/experiments/$target"
            return 0
        fi
    fi
    local out=$WORK/$target
    local libs
    libs=$(pkg-config --libs mpfr gmp zlib 2>/dev/null || echo "-lmpfr -lgmp -lz")
    if pkg-config --exists openblas 2>/dev/null; then
        libs="$libs $(pkg-config --libs openblas)"
    fi
    # shellcheck disable=SC2086
    cc -std=c11 -O2 -Wall -Wextra -Wpedantic -ffp-contract=off -fno-fast-math \
        -I"$ROOT/libemu/include" -I"$BUILD/libemu/include" "$src" \
        "$BUILD/libemu/libemu.a" $libs -lm -o "$out" >&2
    echo "$out"
}
