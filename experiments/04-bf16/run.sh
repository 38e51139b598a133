#!/usr/bin/env bash
# Experiment 4: 16-bit-only BF16 training (Zamirai et al., "Revisiting
# BFloat16 Training", 2020).  See README.md.
#   ./run.sh           full run (the README's numbers): the MLP and resnet:1
#                      on Fashion-MNIST, 5 variants x 5 seeds each, and
#                      the GPT on fortunes, the same 5 variants x 5 seeds
#   ./run.sh --quick   under a minute on synthetic data, 2 seeds (CI)
# The runs are the job list jobs-<mode>.txt (see ../common.sh and
# ../tools/runjobs.sh for running it as a Slurm array).
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    LEN=(--epochs 2)
    RDATA=(--data synthetic --train-examples 640 --test-examples 200)
    RLEN=(--epochs 1)
    GDATA=(--data text --train-examples 20000 --test-examples 2000)
    GLEN=(--steps 12 --warmup 2 --eval-windows 8)
    GMODEL=(--model gpt:1-32-2-16 --batch 4)
    SEEDS=(1 2)
else
    DATA=(--data fashion-mnist)
    LEN=(--epochs 3)
    RDATA=(--data fashion-mnist --train-examples 6000 --test-examples 2000)
    RLEN=(--epochs 1)
    GDATA=(--data fortunes)
    GLEN=(--steps 300 --warmup 30 --eval-windows 128)
    GMODEL=(--model gpt:2-64-4-32 --batch 16)
    # Every run takes under a minute of one core (MLP ~45 s, resnet ~25 s,
    # GPT ~10 s): 5 seeds.
    SEEDS=(1 2 3 4 5)
fi
# The MLP: SGD with momentum, the learning rate decaying (cosine) to a
# small value: late updates are far below half an ulp of a BF16 weight.
COMMON=("${DATA[@]}" "${LEN[@]}" --model mlp:784-256-128-10 --batch 64
        --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine
        --lr-final 0.0001)
# ResNet-8 (resnet:1, batch norm, residual adds) on a Fashion-MNIST subset
# as in experiment 3, with the recipe of the paper's image models: SGD with
# momentum 0.9 and weight decay 5e-4, the learning rate decaying (cosine)
# from 0.05 to 1e-4 as the MLP's.
RESNET=(--model resnet:1 --batch 64 --optimizer sgd --lr 0.05 --momentum 0.9
        --weight-decay 0.0005 --schedule cosine --lr-final 0.0001)
# The GPT of experiment 7 with AdamW (decoupled weight decay 0.1, GPT-2's),
# warm-up, then cosine decay to a hundredth of the peak (3e-5): Adam's
# steps are about lr per element, so late in the run they fall below half
# an ulp (2^-9 |w|) of every BF16 weight above ~0.015, most of the
# matrices.  bf16-kahan compensates the AdamW step (formed in BF16, then
# added with the compensation: README "Precision policy").
GPT=("${GMODEL[@]}" --optimizer adam --lr 3e-3 --weight-decay 0.1
     --schedule cosine --lr-final 3e-5)

# Each variant once per seed (run folder [MODEL-]VARIANT-seedN); a seed
# fixes the initial weights and the data order, the same for every
# variant, so the differences to FP32 are paired by seed.
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
for seed in "${SEEDS[@]}"; do
    for p in fp32 bf16-nearest bf16-sr bf16-kahan bf16-fp32w; do
        train "gpt-$p-seed$seed" --preset $p "${GDATA[@]}" "${GLEN[@]}" \
            "${GPT[@]}" --seed "$seed"
    done
done
for seed in "${SEEDS[@]}"; do
    for p in fp32 bf16-nearest bf16-sr bf16-kahan bf16-fp32w; do
        train "resnet-$p-seed$seed" --preset $p "${RDATA[@]}" "${RLEN[@]}" \
            "${RESNET[@]}" --seed "$seed"
    done
done

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
