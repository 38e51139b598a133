#!/usr/bin/env bash
# Runs every experiment, then (unless --no-notebooks) executes the notebooks
# on their results.
#   experiments/run_all.sh --quick   the CI run: a few minutes in all,
#                                    results in */results-quick/; an
#                                    experiment with committed quick results
#                                    fails unless it reproduces them bit for
#                                    bit (see common.sh)
#   experiments/run_all.sh           the full runs behind the READMEs
#                                    (up to ~20 minutes each on 2 free cores)
# Environment: EMU (the emu program), EMU_BUILD (the build folder),
# EMU_EXP_JOBS (runs at a time within an experiment, default 2),
# EMU_EXP_AT_ONCE (experiments at a time, default 2), EMU_EXP_WORK (raw
# run folders).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ARGS=()
NOTEBOOKS=1
for a in "$@"; do
    case $a in
    --quick|--full) ARGS+=("$a") ;;
    --no-notebooks) NOTEBOOKS=0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "$0: unknown argument '$a'" >&2; exit 2 ;;
    esac
done
AT_ONCE=${EMU_EXP_AT_ONCE:-2}
case $AT_ONCE in ''|0|*[!0-9]*)
    echo "$0: EMU_EXP_AT_ONCE must be a positive integer, not '$AT_ONCE'" >&2
    exit 2 ;;
esac

# The experiments are independent (each its own work and results folders),
# and one alone keeps two cores only ~1.4 busy (its serial summaries, the
# tail of its job list): AT_ONCE of them run side by side.  Each one's
# output goes to a log, printed whole when it ends, so the logs never
# interleave; a failure lets the others finish, then fails the whole.
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/emu-run-all.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
declare -A NAME_OF=() START_OF=()
failed=()
t0=$(date +%s)

# reap: waits for one experiment to end, prints its log and status.
reap() {
    local pid status=0
    wait -n -p pid || status=$?
    local name=${NAME_OF[$pid]}
    unset "NAME_OF[$pid]"
    echo "== experiment $name: $([ $status = 0 ] && echo ok || echo "FAILED ($status)")," \
         "$(( $(date +%s) - START_OF[$name] ))s"
    cat "$LOGS/$name.log"
    [ $status = 0 ] || failed+=("$name")
}

for exp in "$HERE"/[0-9][0-9]-*/; do
    name=$(basename "$exp")
    while [ ${#NAME_OF[@]} -ge "$AT_ONCE" ]; do reap; done
    START_OF[$name]=$(date +%s)
    "$exp/run.sh" "${ARGS[@]}" > "$LOGS/$name.log" 2>&1 &
    NAME_OF[$!]=$name
done
while [ ${#NAME_OF[@]} -gt 0 ]; do reap; done

if [ ${#failed[@]} -gt 0 ]; then
    echo "$0: failed: ${failed[*]} (their logs are above)" >&2
    exit 1
fi
if [ $NOTEBOOKS = 1 ]; then
    "$HERE/../notebooks/run.sh" "${ARGS[@]}"
fi
echo "all experiments: $(( $(date +%s) - t0 ))s"
