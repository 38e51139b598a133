#!/usr/bin/env bash
# Experiment 4: 16-bit-only BF16 training (Zamirai et al., "Revisiting
# BFloat16 Training", 2020).  See README.md.
#   ./run.sh           full run (Fashion-MNIST; the README's numbers):
#                      5 variants x 3 seeds, each ~2 min of one core
#   ./run.sh --quick   half a minute on the synthetic data, 2 seeds (CI)
# The runs are the job list jobs-<mode>.txt (see ../common.sh and
# ../tools/runjobs.sh for running it as a Slurm array).
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    LEN=(--epochs 2)
    SEEDS=(1 2)
else
    DATA=(--data fashion-mnist)
    LEN=(--epochs 3)
    SEEDS=(1 2 3)
fi
# SGD with momentum, the learning rate decaying (cosine) to a small value:
# late updates are far below half an ulp of a BF16 weight.
COMMON=("${DATA[@]}" "${LEN[@]}" --model mlp:784-256-128-10 --batch 64
        --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine
        --lr-final 0.0001)

# Each variant once per seed (run folder VARIANT-seedN); a seed fixes the
# initial weights and the data order, the same for every variant, so the
# differences to FP32 are paired by seed.
for seed in "${SEEDS[@]}"; do
    KEEP_HIST=$([ "$seed" = 1 ] && echo 1 || echo 0) \
        train "fp32-seed$seed" --preset fp32 "${COMMON[@]}" --seed "$seed"
    # Everything BF16 (weights, activations, gradients, momentum; FP32
    # accumulation); the weight update rounded to nearest, stochastically,
    # or Kahan-compensated; and the ablation with only the weights in FP32.
    for p in bf16-nearest bf16-sr bf16-kahan bf16-fp32w; do
        train "$p-seed$seed" --preset $p "${COMMON[@]}" --seed "$seed"
    done
done

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
