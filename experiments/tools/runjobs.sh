#!/usr/bin/env bash
# experiments/tools/runjobs.sh — runs an experiment's job list: one
# independent job per line (an `emu train ...` or one program call),
# written by the experiment's run.sh to experiments/<exp>/jobs-<mode>.txt.
#
#   runjobs.sh JOBLIST            every line, EMU_EXP_JOBS at a time (default
#                                 2), with GNU parallel on the local cores
#   runjobs.sh JOBLIST INDEX      exactly line INDEX (1-based) and nothing else
#   SLURM_ARRAY_TASK_ID=I runjobs.sh JOBLIST
#                                 exactly line I: the same script is a Slurm
#                                 array job, one task per line:
#
#     sbatch --array=1-$(wc -l < experiments/04-bf16/jobs-full.txt) \
#         experiments/tools/runjobs.sh experiments/04-bf16/jobs-full.txt
#
# then, once every task has ended, `experiments/04-bf16/run.sh --collect`
# gathers the results and writes the summaries (as run.sh does after a
# local run).
#
# A job runs in the experiment's work folder ($WORK, see env.sh: run
# folders and `--out` paths are relative to it) with `emu` meaning $EMU and
# the experiments' programs ($EMU_BUILD/experiments) on PATH; its output
# goes to $WORK/logs/<line>.log.  Each line is a complete shell command, so
# a list can be read, edited, or run line by line by hand.  With
# EMU_EXP_KEEP=1 a line whose `--out RUN` folder already holds a completed
# run is skipped (to complete an interrupted run).
# Exit status: 0 when every job run succeeded, else non-zero (the end of a
# failed job's log is printed).
set -euo pipefail

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { print }' "$0" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
case $1 in -h|--help) usage ;; esac
LIST=$1
INDEX=${2:-${SLURM_ARRAY_TASK_ID:-}}
[ -f "$LIST" ] || { echo "runjobs.sh: no job list '$LIST'" >&2; exit 2; }
case $(basename "$LIST") in
jobs-quick.txt) MODE=quick ;;
jobs-full.txt) MODE=full ;;
*) MODE=${EMU_EXP_MODE:-custom} ;;
esac
EXP=$(cd "$(dirname "$LIST")" && pwd)
LIST=$EXP/$(basename "$LIST")
# Found from the job list, not from $0: Slurm runs a copy of this script.
# shellcheck source=env.sh
. "$EXP/../tools/env.sh" 2>/dev/null || . "$(dirname "$0")/env.sh"
N=$(wc -l < "$LIST")

if [ -z "$INDEX" ]; then
    # Every line: this script, once per index, JOBS at a time.  parallel's
    # exit status is the number of failed jobs.
    SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    [ "$N" -gt 0 ] || exit 0
    if ! command -v parallel >/dev/null; then
        echo "runjobs.sh: GNU parallel not found (Debian: apt-get install parallel);" \
             "or run each line by index: runjobs.sh $LIST 1 ... $N" >&2
        exit 1
    fi
    mkdir -p "$WORK/logs"
    seq 1 "$N" | parallel --will-cite --jobs "$JOBS" --line-buffer \
        --joblog "$WORK/logs/joblog.txt" -q bash "$SELF" "$LIST" {} || {
        echo "runjobs.sh: $? of $N jobs of $LIST failed" >&2
        exit 1
    }
    exit 0
fi

case $INDEX in ''|*[!0-9]*) echo "runjobs.sh: index '$INDEX' is not a number" >&2; exit 2 ;; esac
if [ "$INDEX" -lt 1 ] || [ "$INDEX" -gt "$N" ]; then
    echo "runjobs.sh: index $INDEX outside 1..$N ($LIST)" >&2
    exit 2
fi
line=$(sed -n "${INDEX}p" "$LIST")
if [ -z "${line//[[:space:]]/}" ]; then
    echo "runjobs.sh: line $INDEX of $LIST is empty" >&2
    exit 2
fi
# The run folder the line names, if it names one (--out RUN).
run=$(printf '%s\n' "$line" | sed -n 's/.*--out \([^ ]*\).*/\1/p')
mkdir -p "$WORK/logs"
if [ "${EMU_EXP_KEEP:-0}" = 1 ] && [ -n "$run" ] &&
   grep -q '"completed": true' "$WORK/$run/meta.json" 2>/dev/null; then
    echo "  kept: $INDEX/$N ${run}"
    exit 0
fi
log=$WORK/logs/$INDEX.log
t0=$(date +%s)
emu() { "$EMU" "$@"; }
export -f emu
export EMU
status=0
(
    cd "$WORK"
    printf '# %s line %d\n%s\n' "$LIST" "$INDEX" "$line"
    PATH=$BUILD/experiments:$WORK/bin:$PATH bash -c "$line"
) > "$log" 2>&1 || status=$?
if [ $status -ne 0 ]; then
    echo "runjobs.sh: line $INDEX of $LIST failed (exit $status); end of $log:" >&2
    tail -5 "$log" >&2
    exit 1
fi
echo "  done: $INDEX/$N ${run:-job} ($(( $(date +%s) - t0 ))s)"
