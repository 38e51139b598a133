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
# EMU_EXP_JOBS (runs at a time, default 2), EMU_EXP_WORK (raw run folders).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ARGS=()
NOTEBOOKS=1
for a in "$@"; do
    case $a in
    --quick|--full) ARGS+=("$a") ;;
    --no-notebooks) NOTEBOOKS=0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "$0: unknown argument '$a'" >&2; exit 2 ;;
    esac
done
t0=$(date +%s)
for exp in "$HERE"/[0-9][0-9]-*/; do
    "$exp/run.sh" "${ARGS[@]}"
done
if [ $NOTEBOOKS = 1 ]; then
    "$HERE/../notebooks/run.sh" "${ARGS[@]}"
fi
echo "all experiments: $(( $(date +%s) - t0 ))s"
