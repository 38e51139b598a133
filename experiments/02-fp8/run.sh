#!/usr/bin/env bash
# Experiment 2: FP8 training (Mellempudi et al., "Mixed Precision Training
# With 8-bit Floating Point", 2019).  See README.md.
#   ./run.sh           full run (Fashion-MNIST; the README's numbers): four
#                      studies, 5 seeds each: the CNN (~40 s of one core
#                      a run), the MLPs (~15 s a run) and the ResNet (~50 s
#                      a run on 6,000 images)
#   ./run.sh --quick   well under a minute on the synthetic data, 2 seeds (CI)
# The runs are the job list jobs-<mode>.txt (see ../common.sh and
# ../tools/runjobs.sh for running it as a Slurm array).
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    CNN_LEN=(--steps 30)
    DEEP_LEN=(--steps 40)
    FIT=(--data synthetic --train-examples 256 --test-examples 500 --epochs 6)
    RDATA=(--data synthetic --train-examples 640 --test-examples 200)
    CNN_SEEDS=(1 2)
    SEEDS=(1 2)
    RSEEDS=(1 2)
else
    DATA=(--data fashion-mnist)
    CNN_LEN=(--epochs 1)
    DEEP_LEN=(--epochs 1)
    FIT=(--data fashion-mnist --train-examples 2000 --epochs 30)
    # The ResNet as experiment 3 runs it: one epoch of 6,000 images (93
    # steps), tested on 2,000.
    RDATA=(--data fashion-mnist --train-examples 6000 --test-examples 2000)
    CNN_SEEDS=(1 2 3 4 5)
    SEEDS=(1 2 3 4 5)
    RSEEDS=(1 2 3 4 5)
fi
SGD=(--batch 64 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine
     --lr-final 0.0005)
# Nearest-even instead of stochastic rounding for the errors, the weight
# gradients and the FP16 master-weight update.
RNE=(--set act_grad.mode=rne --set weight_grad.mode=rne --set update=plain)
# 2^-24: the deep MLP's loss multiplier (its gradients 2^24x smaller, as if
# the loss were tiny), so that the loss scale, not E5M2's range at scale 1,
# decides what underflows.
TINY=5.9604644775390625e-08

# A seed fixes the initial weights and the data order, the same for every
# variant of a study, so the comparisons are paired by seed (run folder
# RUN-seedN).

# 1. The recipe, on the LeNet-style CNN: preset fp8-e5m2 (E5M2 weights,
# activations, errors and gradients; FP32 accumulation; FP16 master weights
# and momentum; conv1 and fc3 exempt in FP16; stochastic rounding of the
# errors, gradients and update; enhanced loss scaling as the preset has it:
# GradScaler from 2^16 with a constant floor of 256).  Against FP32, with
# nearest-even rounding, and without loss scaling.
for seed in "${CNN_SEEDS[@]}"; do
    C=("${DATA[@]}" "${CNN_LEN[@]}" --model cnn "${SGD[@]}" --seed "$seed")
    KEEP_HIST=$([ "$seed" = 1 ] && echo 1 || echo 0) \
        train "cnn-fp32-seed$seed" --preset fp32 "${C[@]}"
    train "cnn-sr-seed$seed" --preset fp8-e5m2 "${C[@]}"
    train "cnn-rne-seed$seed" --preset fp8-e5m2 "${RNE[@]}" "${C[@]}"
    train "cnn-sr-none-seed$seed" --preset fp8-e5m2 --set scaling=none "${C[@]}"
done

# 2. Enhanced against dynamic loss scaling where the scale matters: the
# deep MLP (eight hidden layers of 128) in E5M2 with the loss x2^-24.
# Dynamic scaling starts at 2^16 (GradScaler) and doubles after `interval`
# clean steps: with GradScaler's 2000 it never moves in this run, with 100
# (a realistic interval for a run this short) it climbs a binade per 100
# steps.  Enhanced (the paper's rule): the same dynamic scaling (interval
# 100), with a floor that starts at 2^16 and doubles every 25 steps, never
# backed off below.  Nothing overflows here, so the floor acts as a faster
# growth schedule: dynamic scaling with an interval of 25 is its control.
# Static 2^24: where the scale should be from the start (loss x1).
# The cap of every scale is 2^32, so that none is held by libemu's default
# cap of 2^24.
for seed in "${SEEDS[@]}"; do
    D=("${DATA[@]}" "${DEEP_LEN[@]}" --model mlp:784-128x8-10 "${SGD[@]}" --seed "$seed")
    F=(--preset fp8-e5m2 --loss-mult $TINY --set max_scale=4294967296)
    train "deep-fp32-seed$seed" --preset fp32 "${D[@]}"
    train "deep-none-seed$seed" "${F[@]}" --set scaling=none "${D[@]}"
    train "deep-dynamic2000-seed$seed" "${F[@]}" --set scaling=dynamic "${D[@]}"
    train "deep-dynamic100-seed$seed" "${F[@]}" --set scaling=dynamic --set interval=100 "${D[@]}"
    train "deep-dynamic25-seed$seed" "${F[@]}" --set scaling=dynamic --set interval=25 "${D[@]}"
    train "deep-enhanced-seed$seed" "${F[@]}" --set scaling=enhanced --set interval=100 \
        --set floor=65536 --set floor_growth=2 --set floor_every=25 "${D[@]}"
    train "deep-static-seed$seed" "${F[@]}" --set scaling=static --set scale=16777216 "${D[@]}"
done

# 3. Stochastic against nearest rounding where the model overfits: the MLP
# 784-256-128-10 on a training subset for many epochs (the paper saw
# nearest rounding overfit, stochastic rounding regularise).  Loss scaling
# dynamic with an interval of 100.
for seed in "${SEEDS[@]}"; do
    O=("${FIT[@]}" --model mlp:784-256-128-10 "${SGD[@]}" --seed "$seed")
    train "fit-fp32-seed$seed" --preset fp32 "${O[@]}"
    train "fit-sr-seed$seed" --preset fp8-e5m2 --set scaling=dynamic --set interval=100 "${O[@]}"
    train "fit-rne-seed$seed" --preset fp8-e5m2 --set scaling=dynamic --set interval=100 \
        "${RNE[@]}" "${O[@]}"
done

# 4. The recipe on the ResNet-8 (resnet:1: a stem conv, three stages of one
# basic block with batch norm and residual adds, the classifier), the
# paper's "first and last layers exempt": preset fp8-e5m2 keeps the first
# and last layers with parameters (the stem conv and the classifier) in
# FP16 and everything else, batch norm included, in E5M2.  Against FP32 and
# with nearest-even rounding (the paper's "SR helps").  Seed 1's runs keep
# their gradient histograms.
for seed in "${RSEEDS[@]}"; do
    R=("${RDATA[@]}" --epochs 1 --model resnet:1 "${SGD[@]}" --seed "$seed")
    export KEEP_HIST=$([ "$seed" = 1 ] && echo 1 || echo 0)
    train "resnet-fp32-seed$seed" --preset fp32 "${R[@]}"
    train "resnet-sr-seed$seed" --preset fp8-e5m2 "${R[@]}"
    train "resnet-rne-seed$seed" --preset fp8-e5m2 "${RNE[@]}" "${R[@]}"
done
unset KEEP_HIST

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
