#!/usr/bin/env bash
# Experiment 2: FP8 training (Mellempudi et al., "Mixed Precision Training
# With 8-bit Floating Point", 2019).  See README.md.
#   ./run.sh           full run (Fashion-MNIST, the CNN; the README's numbers)
#   ./run.sh --quick   a minute or so on the synthetic data (CI)
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    LEN=(--epochs 1)
else
    DATA=(--data fashion-mnist)
    LEN=(--epochs 1)
fi
COMMON=("${DATA[@]}" "${LEN[@]}" --model cnn --batch 64 --optimizer sgd
        --lr 0.05 --momentum 0.9 --schedule cosine --lr-final 0.0005 --seed 1)

KEEP_HIST=1 train fp32 --preset fp32 "${COMMON[@]}"
# The recipe (preset fp8-e5m2): E5M2 weights, activations, errors and
# gradients; FP32 accumulation; FP16 master weights; conv1 and fc3 in FP16.
# Rounding of errors, gradients and the master update: stochastic (sr) or
# nearest-even (rne).  Loss scaling: none, dynamic (GradScaler: 2^16,
# halve on overflow, double after 2000 clean steps), enhanced (dynamic
# with a floor of 256 below which it never backs off).
for rnd in sr rne; do
    R=()
    [ $rnd = rne ] && R=(--set act_grad.mode=rne --set weight_grad.mode=rne --set update=plain)
    train "fp8-$rnd-none" --preset fp8-e5m2 --set scaling=none --set scale=1 "${R[@]}" "${COMMON[@]}"
    train "fp8-$rnd-dynamic" --preset fp8-e5m2 --set scaling=dynamic "${R[@]}" "${COMMON[@]}"
    train "fp8-$rnd-enhanced" --preset fp8-e5m2 "${R[@]}" "${COMMON[@]}"
done
# GradScaler's interval of 2000 clean steps before growing is longer than
# this run: the scale never moves unless something overflows.  With an
# interval of 50 it grows until gradients overflow E5M2 and backs off,
# which is where a floor can matter.
train fp8-sr-dynamic-i50 --preset fp8-e5m2 --set scaling=dynamic --set interval=50 "${COMMON[@]}"
train fp8-sr-enhanced-i50 --preset fp8-e5m2 --set interval=50 "${COMMON[@]}"

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
