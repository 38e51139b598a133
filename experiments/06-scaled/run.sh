#!/usr/bin/env bash
# Experiment 6: block-scaled and per-tensor-scaled GEMM operands — FP8 with
# per-tensor (delayed) scales, MXFP8, MXFP4 and its gradient recipes, NVFP4
# — trained on the same model and data, over seeds.  See README.md.
#   ./run.sh           full run (Fashion-MNIST; the README's numbers): the
#                      MLP for one epoch, 8 variants x 5 seeds; the CNN on
#                      half an epoch, 4 variants, seed 1 (the mechanism:
#                      clipping, flushing and error per layer)
#   ./run.sh --quick   a few dozen steps on the synthetic data, 2 seeds (CI)
# The runs are the job list jobs-<mode>.txt (see ../common.sh and
# ../tools/runjobs.sh for running it as a Slurm array).
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    MLP_LEN=(--steps 20)
    CNN_LEN=(--steps 6)
    SEEDS=(1 2)
else
    DATA=(--data fashion-mnist)
    MLP_LEN=(--epochs 1)                    # 937 steps of 64
    CNN_LEN=(--epochs 1 --train-examples 30000)   # 468 steps of 64
    # An MLP run takes ~20 s of CPU without MPFR sampling, ~35 s with it,
    # under the minute below which experiments/README.md asks for 5 seeds.
    SEEDS=(1 2 3 4 5)
fi
# MPFR sampling (a sampled output costs one MPFR dot product per operand
# set; at 1/256 it was three quarters of a run's CPU) in seed 1 only, the
# run whose error split and quantization errors the summaries and figures
# show; the other seeds give accuracies and clip/flush counts, which the
# sampling does not change (the same losses, batch accuracies and test
# accuracy bit for bit with and without it: checked on 100 mxfp4 steps).
ref() { if [ "$1" = 1 ]; then REF=(--ref-rate 0.0009765625); else REF=(--ref-rate 0); fi; }
OPT=(--batch 64 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine
     --lr-final 0.0005)

# The presets: binary32 everywhere except the GEMM operands, which each
# matmul / convolution quantizes right before reading them (forward x and
# W, weight gradient dY and x, input gradient dY and W), blocked along its
# reduction axis:
#   fp8-delayed  E4M3 forward, E5M2 gradients, one binary32 scale per
#                tensor from the largest amax of the last 16 steps
#   mxfp8        OCP MX: E4M3 elements, blocks of 32, E8M0 scales (floor)
#   mxfp4        OCP MX: E2M1 elements, blocks of 32, E8M0 scales (floor)
#                for x and W; gradients with ceil-rule scales (never clip)
#                and rounded stochastically
#   nvfp4        E2M1, blocks of 16 (weights 16x16 tiles), E4M3 scales by
#                the amax rule, binary32 tensor scale; gradients SR
# and the other three MXFP4 gradient recipes, {floor, ceil} scale rule x
# {SR, nearest}: floor-rule scales + SR (mxfp4-floor-sr: clipping biases
# SR), nearest rounding with ceil scales (mxfp4-rne) and with floor scales
# (mxfp4-floor-rne).  (fp8-current, per-tensor scales from the tensor's own
# amax, was dropped with the seeds to fit the full run in ~20 minutes: no
# claim under test names it, and its single-seed run clipped and flushed
# like fp8-delayed.)
# variant -> policy
policy() {
    case $1 in
    mxfp4-floor-sr) P=(--preset mxfp4 --set q.act_grad=mxfp4) ;;
    mxfp4-rne) P=(--preset mxfp4 --set q.act_grad.mode=rne) ;;
    mxfp4-floor-rne) P=(--preset mxfp4 --set q.act_grad=mxfp4
                        --set q.act_grad.mode=rne) ;;
    *) P=(--preset "$1") ;;
    esac
}

# The CNN once, seed 1 (first: its runs are the longest); every MLP
# variant once per seed (folder mlp-VARIANT-seedN; a seed fixes the
# initial weights, the batches and the stochastic rounding, so that
# comparisons pair by seed).
for v in nvfp4 mxfp8 mxfp4 fp32; do
    policy $v
    ref 1
    train "cnn-$v-seed1" "${P[@]}" --model cnn "${DATA[@]}" "${CNN_LEN[@]}" \
        "${OPT[@]}" "${REF[@]}" --seed 1
done
for seed in "${SEEDS[@]}"; do
    for v in nvfp4 fp8-delayed mxfp8 mxfp4 mxfp4-floor-sr mxfp4-rne \
             mxfp4-floor-rne fp32; do
        policy $v
        ref "$seed"
        train "mlp-$v-seed$seed" "${P[@]}" --model mlp:784-256-128-10 "${DATA[@]}" \
            "${MLP_LEN[@]}" "${OPT[@]}" "${REF[@]}" --seed "$seed"
    done
done

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
