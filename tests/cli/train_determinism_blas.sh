#!/bin/sh
# A run does not depend on the BLAS's own thread count either: the fast
# accumulator's sgemm (when libemu uses OpenBLAS) must give the same
# results with OPENBLAS_NUM_THREADS=1 and 2, or the promise "deterministic
# whatever the thread count" holds only on machines with the same number
# of cores.  (Without OpenBLAS both runs use libemu's own loop.)
# Usage: sh train_determinism_blas.sh /path/to/emu
set -u
EMU=${1:?usage: train_determinism_blas.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
# Without OpenBLAS there is no BLAS thread count to vary: skipped (77).
if command -v ldd > /dev/null 2>&1 && ! ldd "$EMU" 2>/dev/null | grep -q openblas; then
    echo "train_determinism_blas: skipped: $EMU does not use OpenBLAS"
    exit 77
fi
fails=0
fail() { echo "FAIL train_determinism_blas: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_determinism_blas.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

for t in 1 2; do
    mkdir -p "$tmp/t$t"
    (cd "$tmp/t$t" && OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t "$EMU" train --quiet \
        --out r --preset fp32 --model cnn:4-8-32 --train-examples 256 \
        --test-examples 64 --batch 32 --steps 6) > "$tmp/log" 2>&1 ||
        fail "emu train with $t BLAS threads failed: $(cat "$tmp/log")"
done
for f in steps.csv ops.csv hist.csv eval.csv; do
    sed 's/,[^,]*$//' "$tmp/t1/r/$f" > "$tmp/x" # steps.csv: the timing column
    sed 's/,[^,]*$//' "$tmp/t2/r/$f" > "$tmp/y"
    [ $f = steps.csv ] || { cp "$tmp/t1/r/$f" "$tmp/x"; cp "$tmp/t2/r/$f" "$tmp/y"; }
    cmp -s "$tmp/x" "$tmp/y" ||
        fail "$f differs between 1 and 2 BLAS threads: $(diff "$tmp/x" "$tmp/y" | head -4)"
done
[ "$fails" -eq 0 ] || exit 1
echo "train_determinism_blas: ok"
