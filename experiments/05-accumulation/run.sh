#!/usr/bin/env bash
# Experiment 5: accumulation in hardware dot-product units.  GEMM error
# against MPFR as K grows, per accumulator model, and swamping rates: on
# synthetic operands (accum_sweep.c) and on a trained model's real ones
# (accum_real.c).  See README.md.
#   ./run.sh           full run (the README's numbers): the synthetic sweep
#                      with 1000 dot products per K, and an MLP on
#                      Fashion-MNIST and a GPT on the embedded text, 3 seeds
#   ./run.sh --quick   a minute (CI): 20 dot products per K, tiny models
#                      on the synthetic data, 2 seeds
# The runs are the job list jobs-<mode>.txt (see ../common.sh and
# ../tools/runjobs.sh for running it as a Slurm array).
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"

if [ "$MODE" = quick ]; then
    DOTS=20
    SEEDS=(1 2)
    REAL_DOTS=20
    MLP=(--data synthetic --train-examples 2000 --test-examples 500 --steps 30)
    MLP_REAL=(--data synthetic --train-examples 2000 --batch 512)
    GPT=(--model gpt:1-32-4-16 --data text --train-examples 20000
         --test-examples 2000 --eval-windows 16 --steps 20 --batch 8)
    GPT_REAL=(--data text --train-examples 20000 --batch 16)
else
    DOTS=1000
    SEEDS=(1 2 3)
    REAL_DOTS=500
    MLP=(--data fashion-mnist --epochs 1)
    # A batch of 4096 examples: the weight gradient's K, as the GPT's.
    MLP_REAL=(--data fashion-mnist --batch 4096)
    GPT=(--model gpt:2-128-4-64 --data text --eval-windows 64 --steps 300
         --batch 16)
    # 64 windows of 64 positions: K = 4096 for the weight gradient,
    # DeepSeek-V3's K.
    GPT_REAL=(--data text --batch 64)
fi
BIN=$(build_program accum_sweep "$EXP/accum_sweep.c")
REAL=$(build_program accum_real "$EXP/accum_real.c")

# Synthetic operands: binary16 inputs and e4m3 inputs (DeepSeek-V3's FP8
# GEMM), K = 64 ... 16384.
for input in binary16 e4m3; do
    job --copy "sweep_$input.csv" "$BIN" --input $input --dots $DOTS \
        --kmax 16384 --seed 1 '>' "sweep_$input.csv"
done

# real RUN CSV [accum_real options...]: the last job line (the training run
# RUN, which exports its weights to RUN.safetensors) is followed, in the
# same line, by accum_real on those weights, writing CSV: one job, so that
# the list's lines stay independent.  The CSV is written under a temporary
# name and renamed, so an interrupted job leaves none behind.
real() {
    local run=$1 csv=$2 last
    shift 2
    last=$(tail -n 1 "$JOBLIST")
    sed -i '$d' "$JOBLIST"
    printf '%s --export %s && %s > %s.tmp && mv %s.tmp %s\n' "$last" \
        "$(q "$run.safetensors")" \
        "$(q "$REAL" --weights "$run.safetensors" "$@" --dots "$REAL_DOTS")" \
        "$(q "$csv")" "$(q "$csv")" "$(q "$csv")" >> "$JOBLIST"
    COPY+=("$csv")
}

# Real operands: each model trained in binary32 (the fp32 preset) per seed,
# then its GEMMs' dot products on one real batch (accum_real.c).
for seed in "${SEEDS[@]}"; do
    train "mlp-seed$seed" --preset fp32 "${MLP[@]}" --model mlp:784-256-128-10 \
        --batch 64 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine \
        --lr-final 0.0005 --seed "$seed"
    real "mlp-seed$seed" "real_mlp-seed$seed.csv" "${MLP_REAL[@]}"
    train "gpt-seed$seed" --preset fp32 "${GPT[@]}" --optimizer adam --lr 3e-3 \
        --weight-decay 0.1 --warmup 20 --schedule cosine --lr-final 3e-4 \
        --seed "$seed"
    real "gpt-seed$seed" "real_gpt-seed$seed.csv" "${GPT_REAL[@]}"
done
run_jobs
"$PY" "$EXP/summarize.py" "$RESULTS"
finish
