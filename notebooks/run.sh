#!/usr/bin/env bash
# Executes every notebook headless on the experiments' result files and
# fails on any error.  Figures are saved as PNG beside the results
# (experiments/<exp>/<results>/figures/); the executed copies of the
# notebooks go to notebooks/executed-<mode>/ (not committed), so the
# notebooks themselves stay free of outputs.
#   notebooks/run.sh            on the committed full results (results/)
#   notebooks/run.sh --quick    on the quick results (results-quick/), as CI
#   notebooks/run.sh [--quick] NAME.ipynb ...   only those notebooks
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
fail=0
for nb in "${NBS[@]}"; do
    t0=$(date +%s)
    if $NBCONVERT --to notebook --execute --ExecutePreprocessor.timeout=600 \
        --ExecutePreprocessor.kernel_name=python3 \
        --output-dir "$OUT" "$nb" >"$OUT/$(basename "$nb" .ipynb).log" 2>&1; then
        echo "ok    $(basename "$nb") ($(( $(date +%s) - t0 ))s)"
    else
        echo "FAIL  $(basename "$nb"): see $OUT/$(basename "$nb" .ipynb).log" >&2
        tail -20 "$OUT/$(basename "$nb" .ipynb).log" >&2
        fail=1
    fi
done
exit $fail
