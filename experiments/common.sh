# experiments/common.sh — sourced by every experiment's run.sh.
#
# An experiment is a job list: run.sh calls train/job once per run, which
# append one line each (one `emu train ...` or one program call) to
# $EXP/jobs-<mode>.txt; run_jobs runs the list with tools/runjobs.sh (GNU
# parallel on the local cores; the same list runs unchanged as a Slurm
# array, one line per task), then collects the runs into $RESULTS; the
# experiment's summarize.py and finish follow.  Paths (ROOT, BUILD, EMU,
# PY, JOBS, RESULTS, WORK, JOBLIST): tools/env.sh, from the experiment
# folder EXP (which the caller sets) and MODE (quick | full: run.sh
# --quick or default).  Every run is fixed by its options and seed.
#
# Quick mode reproduces its committed results bit for bit: when
# results-quick/ holds a previous run, finish compares the new results with
# it (tools/compare_results.py: every CSV and JSON value except wall times
# and the run_info.json record) and fails on any difference; when they are
# the same it puts the previous folder back, so that a passing quick run
# leaves committed files untouched.

set -euo pipefail

MODE=full
KEEP=0
COLLECT_ONLY=0
LIST_ONLY=0
for a in "$@"; do
    case $a in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    --keep) KEEP=1 ;;
    --collect) COLLECT_ONLY=1 ;;
    --list) LIST_ONLY=1 ;;
    -h|--help)
        echo "usage: $0 [--quick] [--keep | --list | --collect]"
        echo "  --quick    seconds to a minute or two, for CI (results-quick/);"
        echo "             default: the full run behind the README (results/)"
        echo "  --keep     skip training runs already completed in the work"
        echo "             folder (to complete an interrupted run)"
        echo "  --list     only write the job list (jobs-<mode>.txt), e.g. to"
        echo "             run it as a Slurm array (see tools/runjobs.sh)"
        echo "  --collect  only collect the runs of the job list and summarize"
        echo "             (after the jobs ran elsewhere, e.g. under Slurm)"
        exit 0 ;;
    *) echo "$0: unknown argument '$a'" >&2; exit 2 ;;
    esac
done

# shellcheck source=tools/env.sh
. "$EXP/../tools/env.sh"

if [ ! -x "$EMU" ] && [ $LIST_ONLY = 0 ]; then
    echo "$0: $EMU not found: build first (cmake -B build && cmake --build build)" >&2
    exit 1
fi

mkdir -p "$RESULTS" "$WORK"
rm -f "$JOBLIST"   # train and job write it anew
COLLECT=()       # run folders to trim into $RESULTS after the jobs
COLLECT_HIST=()  # 1 where the run's gradient histograms are kept
COPY=()          # other files the jobs write into $WORK, copied as is
T_START=$(date +%s)
# In quick mode the committed results-quick/ is the reference the new run
# must reproduce (see finish): a copy, taken before the run (or before
# collecting the runs of a job list run elsewhere).
QUICK_REF=
if [ "$MODE" = quick ] && [ $LIST_ONLY = 0 ] && [ -f "$RESULTS/run_info.json" ]; then
    QUICK_REF=$WORK/reference
    rm -rf "$QUICK_REF"
    cp -r "$RESULTS" "$QUICK_REF"
fi

# q ARGS...: a shell-quoted copy of ARGS, one string.
q() { printf '%q ' "$@" | sed 's/ $//'; }

# train RUN [emu train options...]: appends one training run to the job
# list; its raw folder is $WORK/RUN, its trimmed copy $RESULTS/RUN (see
# tools/collect.py).  KEEP_HIST=1 train ...: also keep its gradient
# histograms, measured at every step (--hist-every 1: the whole run's
# gradients, not emu train's default sample of every --stats-every'th step).
train() {
    local run=$1
    shift
    local every=()
    [ "${KEEP_HIST:-0}" = 1 ] && every=(--hist-every 1)
    echo "emu train --quiet --force --checkpoint-every 0 --out $(q "$run" "$@" "${every[@]}")" >> "$JOBLIST"
    COLLECT+=("$run")
    COLLECT_HIST+=("${KEEP_HIST:-0}")
}

# job [--copy FILE]... COMMAND...: appends any other command (run in
# $WORK, the experiments' programs on PATH); each --copy FILE names a file
# (or folder) the command writes in $WORK, copied into $RESULTS after the
# jobs.  A lone '>' word stays unquoted, so `job --copy f.csv prog ARGS '>'
# f.csv` redirects the program's output.
job() {
    while [ "$1" = --copy ]; do COPY+=("$2"); shift 2; done
    local w line=
    for w in "$@"; do
        if [ "$w" = '>' ]; then line+="> "; else line+="$(q "$w") "; fi
    done
    echo "${line% }" >> "$JOBLIST"
}

# run_jobs: runs the job list (tools/runjobs.sh: GNU parallel, JOBS at a
# time), then collects.  Fails if any job failed.
run_jobs() {
    touch "$JOBLIST"
    if [ $LIST_ONLY = 1 ]; then
        echo "$NAME ($MODE): $(wc -l < "$JOBLIST") jobs in $JOBLIST"
        exit 0
    fi
    if [ $COLLECT_ONLY = 0 ]; then
        EMU_EXP_KEEP=$KEEP EMU="$EMU" EMU_BUILD="$BUILD" \
            bash "$TOOLS/runjobs.sh" "$JOBLIST"
    fi
    collect_jobs
}

# collect_jobs: trims every run of the list into $RESULTS and copies the
# other outputs; run folders in $RESULTS that the list no longer makes
# (renamed runs, the older single-seed folders) are removed, so that the
# summaries never mix them in.
collect_jobs() {
    local i hist d keep
    for d in "$RESULTS"/*/; do
        [ -f "$d/meta.json" ] || continue
        keep=0
        for i in "${COLLECT[@]}"; do
            [ "$(basename "$d")" = "$i" ] && { keep=1; break; }
        done
        if [ $keep = 0 ]; then
            echo "  removed (not in the job list): $(basename "$d")"
            rm -rf "${d:?}"
        fi
    done
    for i in "${!COLLECT[@]}"; do
        hist=
        [ "${COLLECT_HIST[$i]}" = 1 ] && hist=--hist
        "$PY" "$TOOLS/collect.py" "$WORK/${COLLECT[$i]}" "$RESULTS/${COLLECT[$i]}" $hist
    done
    for i in "${COPY[@]}"; do
        rm -rf "${RESULTS:?}/$i"
        cp -r "$WORK/$i" "$RESULTS/$i"
    done
}

# finish: records how long the experiment took, in which mode, and from
# which commit (with "+changes" when libemu, cli or the experiment's
# scripts differ from it); in quick mode, compares with the reference.
finish() {
    local t=$(( $(date +%s) - T_START ))
    # CPU time of everything this script ran (`times`, second line: the
    # children's user and system time): on a busy machine the wall time
    # says little about the cost.
    # (`times` in a command substitution would time the subshell.)
    local cpu commit
    times > "$WORK/times.txt"
    cpu=$(tail -1 "$WORK/times.txt" | awk '{
        s = 0
        for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] }
        printf "%.0f", s }')
    commit=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
    if [ "$commit" != unknown ] &&
       ! git -C "$ROOT" diff --quiet HEAD -- libemu cli experiments/common.sh \
           experiments/tools "$EXP"/*.sh "$EXP"/*.py "$EXP"/*.c 2>/dev/null; then
        commit="$commit+changes"
    fi
    printf '{"experiment": "%s", "mode": "%s", "commit": "%s", "jobs_ran": "%s", "seconds": %d, "cpu_seconds": %s, "jobs": %d, "date": "%s"}\n' \
        "$NAME" "$MODE" "$commit" "$([ $COLLECT_ONLY = 1 ] && echo elsewhere || echo here)" \
        "$t" "$cpu" "$JOBS" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$RESULTS/run_info.json"
    echo "$NAME ($MODE): ${t}s wall, ${cpu}s CPU; results in $RESULTS (commit $commit)"
    if [ -n "$QUICK_REF" ]; then
        if "$PY" "$TOOLS/compare_results.py" "$QUICK_REF" "$RESULTS"; then
            # The same results: leave the folder as it was, wall times and
            # run_info.json (its commit still made these results)
            # included, so that a passing run changes no committed file.
            cp "$RESULTS/run_info.json" "$WORK/run_info.json"
            rm -rf "${RESULTS:?}"
            mv "$QUICK_REF" "$RESULTS"
            echo "$NAME (quick): the same results as before the run, bit for bit" \
                 "($RESULTS left as it was; this run's record: $WORK/run_info.json)"
        else
            echo "$0: the quick results differ from the ones in $RESULTS before this" \
                 "run (kept in $QUICK_REF); if the change is intended, commit the new ones" >&2
            return 1
        fi
    fi
}

# build_program TARGET SOURCE: makes an experiment's C program available
# to the jobs by its name: built by CMake when experiments/ is part of the
# build ($BUILD/experiments, on the jobs' PATH), or else compiled into
# $WORK/bin against the built static library.  Prints TARGET.
build_program() {
    local target=$1 src=$2
    if [ -f "$BUILD/Makefile" ] || [ -f "$BUILD/build.ninja" ]; then
        if cmake --build "$BUILD" --target "$target" >/dev/null 2>&1 &&
           [ -x "$BUILD/experiments/$target" ]; then
            echo "$target"
            return 0
        fi
    fi
    mkdir -p "$WORK/bin"
    local out=$WORK/bin/$target
    local libs
    libs=$(pkg-config --libs mpfr gmp zlib 2>/dev/null || echo "-lmpfr -lgmp -lz")
    if pkg-config --exists openblas 2>/dev/null; then
        libs="$libs $(pkg-config --libs openblas)"
    fi
    # shellcheck disable=SC2086
    cc -std=c11 -O2 -Wall -Wextra -Wpedantic -ffp-contract=off -fno-fast-math \
        -I"$ROOT/libemu/include" -I"$BUILD/libemu/include" "$src" \
        "$BUILD/libemu/libemu.a" $libs -lm -o "$out" >&2
    echo "$target"
}
