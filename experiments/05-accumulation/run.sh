#!/usr/bin/env bash
# Experiment 5: accumulation in hardware dot-product units.  GEMM error
# against MPFR as K grows, per accumulator model, and swamping rates.
# See README.md and accum_sweep.c.
#   ./run.sh           full run (1000 dot products per K; the README's numbers)
#   ./run.sh --quick   seconds (CI)
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then DOTS=20; else DOTS=1000; fi
BIN=$(build_program accum_sweep "$EXP/accum_sweep.c")
# binary16 inputs and e4m3 inputs (DeepSeek-V3's FP8
# GEMM), K = 64 ... 16384.
for input in binary16 e4m3; do
    job --copy "sweep_$input.csv" "$BIN" --input $input --dots $DOTS \
        --kmax 16384 --seed 1 '>' "sweep_$input.csv"
done
run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
