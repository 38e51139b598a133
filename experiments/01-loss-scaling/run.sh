#!/usr/bin/env bash
# Experiment 1: gradient histograms and loss scaling (Micikevicius et al.,
# "Mixed Precision Training", 2017).  See README.md.
#   ./run.sh           full run (Fashion-MNIST and Debian's fortunes; the
#                      README's numbers): 19 MLP training runs x 5 seeds,
#                      each ~15 s of one core, and 10 LSTM language-model
#                      runs x 5 seeds, each ~15 s
#   ./run.sh --quick   a minute or so on the synthetic data and the
#                      embedded text, 2 seeds (CI)
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
    LM_DATA=(--data text --train-examples 20000 --test-examples 2000)
    LM_LEN=(--steps 10 --eval-windows 8)
    LM_MODEL=(--model lstm:1-32 --batch 4 --seq-len 32)
    LM_SEEDS=(1 2)
else
    DATA=(--data fashion-mnist)
    LEN=(--epochs 1)
    RULE=(--data fashion-mnist --steps 937)
    SEEDS=(1 2 3 4 5)   # a run takes well under a CPU-minute: 5 seeds
    LM_DATA=(--data fortunes)
    LM_LEN=(--steps 400 --eval-windows 128)
    LM_MODEL=(--model lstm:1-128 --batch 16 --seq-len 64)
    LM_SEEDS=(1 2 3 4 5)
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

# The LSTM language model (the paper's recurrent models): PyTorch's word
# language model on characters, one LSTM layer, Adam with a cosine schedule
# ending at a hundredth of the learning rate (as the MLP's recipe; the
# master-copy ablation needs a schedule that ends small).  The metric is the
# validation loss in bits per character.  Runs lstm-VARIANT-seedN.
LM_SHIFT=0.00390625   # 2^-8: chosen from the FP32 histogram (README)
LM_OPT=(--optimizer adam --lr 0.01 --schedule cosine --lr-final 0.0001)
for seed in "${LM_SEEDS[@]}"; do
    COMMON=("${LM_MODEL[@]}" "${LM_DATA[@]}" "${LM_LEN[@]}" "${LM_OPT[@]}" --seed "$seed")
    KEEP_HIST=$([ "$seed" = 1 ] && echo 1 || echo 0) \
        train "lstm-fp32-seed$seed" --preset fp32 "${COMMON[@]}"
    # FP16 with FP32 master weights: no scaling, static 8 and 2^10, dynamic;
    # on the plain loss and on the loss times 2^-8.
    for variant in plain shift8; do
        mult=(); [ $variant = shift8 ] && mult=(--loss-mult $LM_SHIFT)
        train "lstm-fp16-$variant-s1-seed$seed" --preset fp16-mpt --set scaling=none \
            "${COMMON[@]}" "${mult[@]}"
        for s in 8 1024; do
            train "lstm-fp16-$variant-s$s-seed$seed" --preset fp16-mpt --set scaling=static \
                --set scale=$s "${COMMON[@]}" "${mult[@]}"
        done
        train "lstm-fp16-$variant-dynamic-seed$seed" --preset fp16-mpt "${COMMON[@]}" "${mult[@]}"
    done
    # No master copy (Adam's updates rounded straight into FP16 weights),
    # against lstm-fp16-plain-dynamic: the same dynamic scaling.
    train "lstm-fp16-nomaster-seed$seed" --preset fp16-no-master "${COMMON[@]}"
done

# The 2^-11 rule, update by update (same model, data order and policy as
# sgd0.005-nomaster-seed1; see update_rule.c).
RULE_BIN=$(build_program update_rule "$EXP/update_rule.c")
job --copy update_rule_steps.csv --copy update_rule_ratio.csv \
    "$RULE_BIN" --out update_rule "${RULE[@]}" --lr 0.005 --momentum 0 --scale 1024

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
