#!/bin/sh
# emu train --threads N gives the one-thread run's files bit for bit: the
# MLP and the CNN at their default sizes (batch 64: their GEMMs are split
# into row blocks and their commits into parts), the ResNet, and briefly a
# gpt and an lstm, with 1, 2 and 3 threads, under binary32, a mixed
# precision recipe and stochastic rounding, and with MPFR sampling on
# (the chunks then stay on one thread, the GEMMs do not).  Every output
# file is compared but for the timing and the saved --threads setting.
# Usage: sh train_threads.sh /path/to/emu
set -u
EMU=${1:?usage: train_threads.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_threads: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_threads.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

# FILES, same_files
. "$(dirname "$0")/lib/train_common.sh"

# run NAME THREADS ARGS...: a run in $tmp/NAME/tTHREADS/r (the folder's
# name is saved in the checkpoint: the same in every run).
run() {
    d=$tmp/$1/t$2
    t=$2
    shift 2
    mkdir -p "$d"
    # shellcheck disable=SC2086
    (cd "$d" && "$EMU" train --quiet --out r --threads "$t" "$@") > "$d/log" 2>&1 ||
        fail "emu train --threads $t $* exited non-zero: $(cat "$d/log")"
}

# same NAME T: run NAME with T threads wrote what the one-thread run wrote
# (an eval.csv that neither run wrote is not missing).
same() {
    same_files "$tmp/$1/t1/r" "$tmp/$1/t$2/r" "$1 --threads $2" "$2" eval-optional
    grep -q '"completed": true' "$tmp/$1/t1/r/meta.json" || fail "$1: not completed"
}

# each NAME ARGS...: NAME with 1, 2 and 3 threads, compared.
each() {
    name=$1
    shift
    for t in 1 2 3; do
        run "$name" "$t" "$@"
    done
    same "$name" 2
    same "$name" 3
}

SMALL="--train-examples 384 --test-examples 64 --batch 64 --steps 6
       --stats-every 2 --checkpoint-every 3"

each mlp_fp32 --model mlp --preset fp32 $SMALL
each mlp_sr --model mlp --preset bf16-sr $SMALL --momentum 0.9
each mlp_ref --model mlp --preset fp16-mpt $SMALL --ref-rate 0.01
each cnn_fp32 --model cnn --preset fp32 $SMALL --momentum 0.9
each cnn_fp8 --model cnn --preset fp8-e5m2 $SMALL
each resnet --model resnet:1 --preset fp16-mpt --train-examples 96 \
     --test-examples 32 --batch 16 --steps 3 --stats-every 1
LM="--data text --train-examples 640 --test-examples 200 --batch 4
    --seq-len 16 --eval-windows 2 --steps 3 --stats-every 1"
each gpt --model gpt:1-16-2-16 --preset bf16-sr --optimizer adam --lr 0.003 $LM
each lstm --model lstm:1-16 --preset fp32 $LM

[ "$fails" -eq 0 ] || exit 1
echo "train_threads: ok"
