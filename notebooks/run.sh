#!/usr/bin/env bash
# Executes every notebook headless on the experiments' result files and
# fails on any error.  Figures are saved as PNG beside the results
# (experiments/<exp>/<results>/figures/); the executed copies of the
# notebooks go to notebooks/executed-<mode>/ (not committed), so the
# notebooks themselves stay free of outputs.
#   notebooks/run.sh            on the committed full results (results/)
#   notebooks/run.sh --quick    on the quick results (results-quick/), as CI
#   notebooks/run.sh [--quick] NAME.ipynb ...   only those notebooks
# NB_JOBS: notebooks at a time (default 2).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MODE=full
NBS=()
for a in "$@"; do
    case $a in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *.ipynb) NBS+=("$HERE/$(basename "$a")") ;;
    *) echo "$0: unknown argument '$a'" >&2; exit 2 ;;
    esac
done
[ ${#NBS[@]} -gt 0 ] || NBS=("$HERE"/*.ipynb)
if [ "$MODE" = quick ]; then export EMU_RESULTS=results-quick; else export EMU_RESULTS=results; fi
# Debian's Jupyter (jupyter-nbconvert, python3-ipykernel); the kernel is
# Debian's python3 with numpy, pandas and matplotlib.
NBCONVERT=${NBCONVERT:-jupyter-nbconvert}
command -v "$NBCONVERT" >/dev/null || NBCONVERT="jupyter nbconvert"
OUT=$HERE/executed-$MODE
mkdir -p "$OUT"
export MPLBACKEND=module://matplotlib_inline.backend_inline
# Each notebook runs in its own kernel, most of its ~10 s the kernel's
# start and imports: NB_JOBS of them (default 2) at a time.
NB_JOBS=${NB_JOBS:-2}
case $NB_JOBS in ''|0|*[!0-9]*)
    echo "$0: NB_JOBS must be a positive integer, not '$NB_JOBS'" >&2; exit 2 ;;
esac
declare -A NB_OF=() START_OF=()
fail=0
# reap: waits for one notebook to end and says how it went.
reap() {
    local pid status=0
    wait -n -p pid || status=$?
    local nb=${NB_OF[$pid]}
    unset "NB_OF[$pid]"
    local base
    base=$(basename "$nb" .ipynb)
    if [ $status = 0 ]; then
        echo "ok    $base.ipynb ($(( $(date +%s) - START_OF[$base] ))s)"
    else
        echo "FAIL  $base.ipynb: see $OUT/$base.log" >&2
        tail -20 "$OUT/$base.log" >&2
        fail=1
    fi
}
for nb in "${NBS[@]}"; do
    while [ ${#NB_OF[@]} -ge "$NB_JOBS" ]; do reap; done
    base=$(basename "$nb" .ipynb)
    START_OF[$base]=$(date +%s)
    $NBCONVERT --to notebook --execute --ExecutePreprocessor.timeout=600 \
        --ExecutePreprocessor.kernel_name=python3 \
        --output-dir "$OUT" "$nb" >"$OUT/$base.log" 2>&1 &
    NB_OF[$!]=$nb
done
while [ ${#NB_OF[@]} -gt 0 ]; do reap; done
exit $fail
