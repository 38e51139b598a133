#!/usr/bin/env bash
# Experiment 1: gradient histograms and loss scaling (Micikevicius et al.,
# "Mixed Precision Training", 2017).  See README.md.
#   ./run.sh           full run (Fashion-MNIST; the README's numbers):
#                      19 training runs x 3 seeds, each ~40 s of one core
#   ./run.sh --quick   a minute or so on the synthetic data, 2 seeds (CI)
# The runs are the job list jobs-<mode>.txt (see ../common.sh and
# ../tools/runjobs.sh for running it as a Slurm array).
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

SHIFT=0.000244140625   # 2^-12: the "shifted" variant's loss multiplier
if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    LEN=(--steps 40)
    RULE=(--data synthetic --train-examples 2000 --steps 30)
    SEEDS=(1 2)
else
    DATA=(--data fashion-mnist)
    LEN=(--epochs 1)
    RULE=(--data fashion-mnist --steps 937)
    SEEDS=(1 2 3)
fi
# The recipe: SGD with momentum, learning rate decaying to a small value.
OPT=(--model mlp:784-256-128-10 --batch 64 --optimizer sgd --lr 0.05
     --momentum 0.9 --schedule cosine --lr-final 0.0005)

# Every training run once per seed (run folder RUN-seedN): a seed fixes the
# initial weights and the data order, the same for every run, so the
# comparisons are paired by seed.  The FP32 histograms are kept for seed 1.
for seed in "${SEEDS[@]}"; do
    COMMON=("${DATA[@]}" "${LEN[@]}" "${OPT[@]}" --seed "$seed")

    # FP32 training: the histograms of what the gradients would be.
    KEEP_HIST=$([ "$seed" = 1 ] && echo 1 || echo 0) \
        train "fp32-seed$seed" --preset fp32 "${COMMON[@]}"

    # FP16 (FP32 master weights, FP32 accumulation) with each loss scale, on
    # the plain loss and on the loss times 2^-12 (gradients 4096x smaller).
    for variant in plain shifted; do
        mult=(); [ $variant = shifted ] && mult=(--loss-mult $SHIFT)
        train "fp16-$variant-s1-seed$seed" --preset fp16-mpt --set scaling=none "${COMMON[@]}" "${mult[@]}"
        for s in 8 1024 32768; do
            train "fp16-$variant-s$s-seed$seed" --preset fp16-mpt --set scaling=static \
                --set scale=$s "${COMMON[@]}" "${mult[@]}"
        done
        train "fp16-$variant-dynamic-seed$seed" --preset fp16-mpt "${COMMON[@]}" "${mult[@]}"
    done

    # Without loss scaling, how small can the gradients get before FP16
    # training breaks?  The loss times 2^-16, 2^-20 and 2^-24.
    for sh in 16:1.52587890625e-05 20:9.5367431640625e-07 24:5.9604644775390625e-08; do
        train "fp16-shift${sh%%:*}-s1-seed$seed" --preset fp16-mpt --set scaling=none "${COMMON[@]}" \
            --loss-mult "${sh#*:}"
    done

    # FP16 weights without a master copy (updates rounded straight into FP16),
    # with the same recipe (its partner is fp16-plain-dynamic), and with plain
    # SGD at two constant small learning rates, each against FP32 masters.
    train "fp16-nomaster-seed$seed" --preset fp16-no-master "${COMMON[@]}"
    for lr in 0.005 0.001; do
        SGD=("${DATA[@]}" "${LEN[@]}" --model mlp:784-256-128-10 --batch 64
             --optimizer sgd --lr $lr --momentum 0 --seed "$seed")
        train "sgd$lr-master-seed$seed" --preset fp16-mpt --set scaling=static --set scale=1024 "${SGD[@]}"
        train "sgd$lr-nomaster-seed$seed" --preset fp16-no-master --set scaling=static --set scale=1024 "${SGD[@]}"
    done
done

# The 2^-11 rule, update by update (same model, data order and policy as
# sgd0.005-nomaster-seed1; see update_rule.c).
RULE_BIN=$(build_program update_rule "$EXP/update_rule.c")
job --copy update_rule_steps.csv --copy update_rule_ratio.csv \
    "$RULE_BIN" --out update_rule "${RULE[@]}" --lr 0.005 --momentum 0 --scale 1024

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
