#!/usr/bin/env bash
# Experiment 6: block-scaled and per-tensor-scaled GEMM operands — FP8 with
# per-tensor scales (delayed and current), MXFP8, MXFP4, NVFP4 — trained on
# the same model and data.  See README.md.
#   ./run.sh           full run (Fashion-MNIST: the MLP for one epoch, the
#                      CNN on half an epoch; the README's numbers)
#   ./run.sh --quick   a few dozen steps on the synthetic data (CI)
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    MLP_LEN=(--steps 20)
    CNN_LEN=(--steps 6)
    # A sampled output costs one MPFR dot product per operand set.
    REF=(--ref-rate 0.0009765625)          # 1/1024
else
    DATA=(--data fashion-mnist)
    MLP_LEN=(--epochs 1)                    # 937 steps of 64
    CNN_LEN=(--epochs 1 --train-examples 30000)   # 468 steps of 64
    REF=(--ref-rate 0.00390625)            # 1/256
fi
OPT=(--batch 64 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine
     --lr-final 0.0005 --seed 1)

# The presets: binary32 everywhere except the GEMM operands, which each
# matmul / convolution quantizes right before reading them (forward x and
# W, weight gradient dY and x, input gradient dY and W), blocked along its
# reduction axis:
#   fp8-delayed  E4M3 forward, E5M2 gradients, one binary32 scale per
#                tensor from the largest amax of the last 16 steps
#   fp8-current  the same, scale from the tensor's own amax
#   mxfp8        OCP MX: E4M3 elements, blocks of 32, E8M0 scales (floor)
#   mxfp4        OCP MX: E2M1 elements, blocks of 32, E8M0 scales (floor)
#                for x and W; gradients with ceil-rule scales (never clip)
#                and rounded stochastically
#   nvfp4        E2M1, blocks of 16 (weights 16x16 tiles), E4M3 scales by
#                the amax rule, binary32 tensor scale; gradients SR
# Variants of MXFP4 (MLP, seeds 1 and 2), the four gradient recipes
# {floor, ceil} scale rule x {SR, nearest}: the previous preset's recipe,
# floor-rule scales + SR (mxfp4-floor-sr: clipping biases SR), nearest
# rounding with ceil scales (mxfp4-rne) and with floor scales
# (mxfp4-floor-rne); the preset itself is ceil + SR.

# Longest runs first (two at a time).
for p in nvfp4 fp8-delayed fp8-current mxfp8 mxfp4 fp32; do
    train "cnn-$p" --preset "$p" --model cnn "${DATA[@]}" "${CNN_LEN[@]}" "${OPT[@]}" "${REF[@]}"
done
for p in nvfp4 fp8-delayed fp8-current mxfp8 mxfp4 fp32; do
    train "mlp-$p" --preset "$p" --model mlp:784-256-128-10 "${DATA[@]}" "${MLP_LEN[@]}" "${OPT[@]}" "${REF[@]}"
done
# The MXFP4 gradient recipes, each with seeds 1 and 2 (the training noise
# of a single run is large at 4 bits); mxfp4 itself with seed 2 as well.
MLP=(--model mlp:784-256-128-10 "${DATA[@]}" "${MLP_LEN[@]}" "${OPT[@]}" "${REF[@]}")
train mlp-mxfp4-seed2 --preset mxfp4 "${MLP[@]}" --seed 2
for seed in 1 2; do
    sfx=; [ $seed = 1 ] || sfx=-seed$seed
    train "mlp-mxfp4-floor-sr$sfx" --preset mxfp4 --set q.act_grad=mxfp4 "${MLP[@]}" --seed $seed
    train "mlp-mxfp4-rne$sfx" --preset mxfp4 --set q.act_grad.mode=rne "${MLP[@]}" --seed $seed
    train "mlp-mxfp4-floor-rne$sfx" --preset mxfp4 --set q.act_grad=mxfp4 \
        --set q.act_grad.mode=rne "${MLP[@]}" --seed $seed
done

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
