#!/usr/bin/env bash
# Experiment 7: the scaled GEMM-operand formats on a GPT — FP8 with
# per-tensor scales, MXFP8, MXFP4 and NVFP4, each FP4 recipe with and
# without its random Hadamard transform — against FP32, over seeds.
# See README.md.
#   ./run.sh           full run (Debian's fortunes; the README's numbers):
#                      7 variants x 5 seeds, 300 steps of gpt:2-64-4-32
#   ./run.sh --quick   a few steps on the embedded text, 2 seeds (CI)
# The runs are the job list jobs-<mode>.txt (see ../common.sh and
# ../tools/runjobs.sh for running it as a Slurm array).
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DATA=(--data text --train-examples 20000 --test-examples 2000)
    LEN=(--steps 6 --warmup 2 --eval-windows 8)
    MODEL=(--model gpt:1-32-2-16 --batch 4)
    SEEDS=(1 2)
else
    DATA=(--data fortunes)
    LEN=(--steps 300 --warmup 30 --eval-windows 128)
    MODEL=(--model gpt:2-64-4-32 --batch 16)
    # A run takes ~30 s of CPU, under the minute below which
    # experiments/README.md asks for 5 seeds.
    SEEDS=(1 2 3 4 5)
fi
# AdamW with the usual transformer schedule: warm-up, then cosine decay to
# a tenth; binary32 everywhere except the GEMM operands of the linear
# layers (and, in mxfp8, attention's products), which each product
# quantizes right before reading them, blocked along its reduction axis.
OPT=(--optimizer adam --lr 3e-3 --weight-decay 0.01 --schedule cosine
     --lr-final 3e-4)

# variant -> policy
policy() {
    case $1 in
    fp32) P=(--preset fp32) ;;
    fp8-delayed) P=(--preset fp8-delayed) ;;
    mxfp8) P=(--preset mxfp8) ;;
    mxfp4) P=(--preset mxfp4) ;;
    # Tseng et al.: the transform on both backward GEMMs' operands
    mxfp4-rht) P=(--preset mxfp4 --set rht=backward) ;;
    nvfp4) P=(--preset nvfp4) ;;
    # NVIDIA: the transform on the weight gradient's operands, 16 x 16
    nvfp4-rht) P=(--preset nvfp4 --set rht=wgrad) ;;
    esac
}

# Every variant once per seed (folder VARIANT-seedN; a seed fixes the
# initial weights, the batches and the stochastic rounding, so that
# comparisons pair by seed).  The slowest first, two at a time.
for seed in "${SEEDS[@]}"; do
    for v in nvfp4-rht nvfp4 mxfp8 mxfp4-rht mxfp4 fp8-delayed fp32; do
        policy $v
        train "$v-seed$seed" "${P[@]}" "${MODEL[@]}" "${DATA[@]}" "${LEN[@]}" \
            "${OPT[@]}" --seed "$seed"
    done
done

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
