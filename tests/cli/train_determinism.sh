#!/bin/sh
# emu train is a pure function of its settings and seed: two runs with the
# same seed write the same results folder (every file, bit for bit, but for
# the timing: steps.csv's 'seconds' column, meta.json's "seconds" and the
# elapsed time in checkpoint.bin), stochastic rounding included; another
# seed gives another run; and the thread count changes nothing.
# Usage: sh train_determinism.sh /path/to/emu
set -u
EMU=${1:?usage: train_determinism.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_determinism: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_determinism.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

# Small runs that still cross an epoch (8 steps each), write per-op rows
# and several checkpoints.
SMALL="--train-examples 256 --test-examples 64 --batch 32 --epochs 2 --steps 12
       --stats-every 3 --checkpoint-every 4"
# FILES, ckpt_diffs, same_files
. "$(dirname "$0")/lib/train_common.sh"

# run NAME ARGS...: a run in $tmp/NAME/r.  The output folder's name is part
# of the checkpoint's saved settings, so every run uses the same name.
run() {
    d=$tmp/$1
    shift
    mkdir -p "$d"
    # shellcheck disable=SC2086
    (cd "$d" && "$EMU" train --quiet --out r $SMALL "$@") > "$d/log" 2>&1 ||
        fail "emu train $* exited non-zero: $(cat "$d/log")"
}

# same_results A B T: the folders of runs A and B hold the same results
# (T > 0: B ran on T threads, A on one).
same_results() {
    same_files "$tmp/$1/r" "$tmp/$2/r" "$1 and $2" "$3"
    # The comparisons must have had something to compare.
    rows=$(($(wc -l < "$tmp/$1/r/steps.csv") - 1))
    [ "$rows" -eq 12 ] || fail "$1: $rows step rows, expected 12"
    grep -q '"completed": true' "$tmp/$1/r/meta.json" || fail "$1: not completed"
}

# different A B: the runs differ in their losses and in their weights.
different() {
    a=$tmp/$1/r b=$tmp/$2/r
    cut -d, -f4 "$a/steps.csv" > "$tmp/x"
    cut -d, -f4 "$b/steps.csv" > "$tmp/y"
    ! cmp -s "$tmp/x" "$tmp/y" || fail "$1 and $2: the same losses with different seeds"
    n=$(ckpt_diffs "$a/checkpoint.bin" "$b/checkpoint.bin" 0)
    [ "$n" -gt 1000 ] || fail "$1 and $2: checkpoints differ in only $n bytes"
}

MLP="--model mlp:784-32-10"
CNN="--model cnn:4-8-32"

# binary32 with the fast (BLAS) accumulator.
run fp32_a --preset fp32 $MLP --seed 1
run fp32_b --preset fp32 $MLP --seed 1
run fp32_s2 --preset fp32 $MLP --seed 2
run fp32_t2 --preset fp32 $MLP --seed 1 --threads 2
same_results fp32_a fp32_b 0
same_results fp32_a fp32_t2 2
different fp32_a fp32_s2

# Stochastic rounding everywhere in the update: its streams follow the seed.
run sr_a --preset bf16-sr $CNN --seed 7
run sr_b --preset bf16-sr $CNN --seed 7
run sr_s2 --preset bf16-sr $CNN --seed 8
run sr_t2 --preset bf16-sr $CNN --seed 7 --threads 2
same_results sr_a sr_b 0
same_results sr_a sr_t2 2
different sr_a sr_s2

# The emulated accumulator (binary32 steps, sequential order) and SR
# gradients of the FP8 recipe, threaded.
run seq_t1 --preset fp16-mpt $CNN --set accum=sequential,acc=binary32
run seq_t2 --preset fp16-mpt $CNN --set accum=sequential,acc=binary32 --threads 2
same_results seq_t1 seq_t2 2
run fp8_t1 --preset fp8-e5m2 --model mlp:784-32-16-10
run fp8_t2 --preset fp8-e5m2 --model mlp:784-32-16-10 --threads 2
same_results fp8_t1 fp8_t2 2

[ "$fails" -eq 0 ] || exit 1
echo "train_determinism: ok"
