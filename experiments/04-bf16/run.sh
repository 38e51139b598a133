#!/usr/bin/env bash
# Experiment 4: 16-bit-only BF16 training (Zamirai et al., "Revisiting
# BFloat16 Training", 2020).  See README.md.
#   ./run.sh           full run (Fashion-MNIST; the README's numbers)
#   ./run.sh --quick   a minute or so on the synthetic data (CI)
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    LEN=(--epochs 2)
else
    DATA=(--data fashion-mnist)
    LEN=(--epochs 3)
fi
# SGD with momentum, the learning rate decaying (cosine) to a small value:
# late updates are far below half an ulp of a BF16 weight.
COMMON=("${DATA[@]}" "${LEN[@]}" --model mlp:784-256-128-10 --batch 64
        --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine
        --lr-final 0.0001 --seed 1)

KEEP_HIST=1 train fp32 --preset fp32 "${COMMON[@]}"
# Everything BF16 (weights, activations, gradients, momentum; FP32
# accumulation); the weight update rounded to nearest, stochastically, or
# Kahan-compensated; and the ablation with only the weights in FP32.
for p in bf16-nearest bf16-sr bf16-kahan bf16-fp32w; do
    train "$p" --preset $p "${COMMON[@]}"
done

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
