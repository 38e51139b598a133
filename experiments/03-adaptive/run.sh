#!/usr/bin/env bash
# Experiment 3: per-layer adaptive loss scaling (Zhao et al., "Adaptive Loss
# Scaling for Mixed Precision Training", 2019).  See README.md.
#   ./run.sh           full run (Fashion-MNIST; the README's numbers)
#   ./run.sh --quick   a minute or so on the synthetic data (CI)
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

SHIFT=0.000244140625   # 2^-12
if [ "$MODE" = quick ]; then
    DATA=(--data synthetic --train-examples 2000 --test-examples 500)
    LEN=(--epochs 1)
else
    DATA=(--data fashion-mnist)
    LEN=(--epochs 1)
fi
# The deep plain MLP: 8 hidden layers of 128, ReLU, no normalisation.
COMMON=("${DATA[@]}" "${LEN[@]}" --model mlp:784-128x8-10 --batch 64
        --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine
        --lr-final 0.0005 --seed 1)

# Every run keeps its gradient histograms: the zero fraction of each
# layer's input gradient, against FP32's, is Zhao et al.'s underflow rate.
export KEEP_HIST=1
train fp32 --preset fp32 "${COMMON[@]}"
# FP16 with FP32 masters.  On the plain loss few gradients underflow in
# this model (fp16-plain-none shows how few); the comparison runs on the
# loss times 2^-12, where the gradients sit at FP16's lower edge as in SSD.
train fp16-plain-none --preset fp16-mpt --set scaling=none "${COMMON[@]}"
for v in none s8 s128 s1024 dynamic adaptive; do
    case $v in
    none) P=(--preset fp16-mpt --set scaling=none) ;;
    s*) P=(--preset fp16-mpt --set scaling=static --set scale=${v#s}) ;;
    dynamic) P=(--preset fp16-mpt) ;;
    adaptive) P=(--preset adaptive --set target=0.001) ;;
    esac
    train "fp16-$v" "${P[@]}" "${COMMON[@]}" --loss-mult $SHIFT
done

run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
