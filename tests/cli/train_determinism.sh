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
FILES="meta.json steps.csv ops_steps.csv layers_steps.csv eval.csv ops.csv
       hist.csv ops.json summary.txt checkpoint.bin"

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

# The checkpoint bytes that may differ (libemu/nn_ckpt.h): the last 36,
# the TIME section with the run's elapsed seconds and the trailer's crc32;
# with THREADS=1, also the one byte of the saved --threads setting (1 in
# the first run, 2 in the other) and so the crc32 of its section, CONF
# (bytes 41-44).
ckpt_diffs() {
    size=$(wc -c < "$1")
    cmp -l "$1" "$2" 2>/dev/null | awk -v t="$3" -v end=$((size - 36)) '
        $1 > end { next }
        t && $1 >= 41 && $1 <= 44 { next }
        t && !seen && $2 == 1 && $3 == 2 { seen = 1; next }
        { n++ }
        END { print n + 0 }'
}

# same_run A B THREADS: the folders of runs A and B hold the same results.
same_run() {
    a=$tmp/$1/r b=$tmp/$2/r
    for f in $FILES; do
        [ -s "$a/$f" ] || { fail "$1: $f missing or empty"; continue; }
        [ -s "$b/$f" ] || { fail "$2: $f missing or empty"; continue; }
        case $f in
        steps.csv)
            sed 's/,[^,]*$//' "$a/$f" > "$tmp/x"
            sed 's/,[^,]*$//' "$b/$f" > "$tmp/y"
            ;;
        meta.json)
            grep -v '"seconds"' "$a/$f" | sed 's/"threads": [0-9]*/"threads": T/' > "$tmp/x"
            grep -v '"seconds"' "$b/$f" | sed 's/"threads": [0-9]*/"threads": T/' > "$tmp/y"
            ;;
        checkpoint.bin)
            [ "$(wc -c < "$a/$f")" -eq "$(wc -c < "$b/$f")" ] ||
                { fail "$1 and $2: checkpoints of different sizes"; continue; }
            n=$(ckpt_diffs "$a/$f" "$b/$f" "$3")
            [ "$n" -eq 0 ] ||
                fail "$1 and $2: checkpoint.bin differs in $n bytes besides the timing" \
                     "(first: $(cmp "$a/$f" "$b/$f"))"
            continue
            ;;
        *)
            cp "$a/$f" "$tmp/x"
            cp "$b/$f" "$tmp/y"
            ;;
        esac
        cmp -s "$tmp/x" "$tmp/y" ||
            fail "$1 and $2: $f differs: $(diff "$tmp/x" "$tmp/y" | head -4)"
    done
    # The comparisons must have had something to compare.
    rows=$(($(wc -l < "$a/steps.csv") - 1))
    [ "$rows" -eq 12 ] || fail "$1: $rows step rows, expected 12"
    grep -q '"completed": true' "$a/meta.json" || fail "$1: not completed"
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
same_run fp32_a fp32_b 0
same_run fp32_a fp32_t2 1
different fp32_a fp32_s2

# Stochastic rounding everywhere in the update: its streams follow the seed.
run sr_a --preset bf16-sr $CNN --seed 7
run sr_b --preset bf16-sr $CNN --seed 7
run sr_s2 --preset bf16-sr $CNN --seed 8
run sr_t2 --preset bf16-sr $CNN --seed 7 --threads 2
same_run sr_a sr_b 0
same_run sr_a sr_t2 1
different sr_a sr_s2

# The emulated accumulator (binary32 steps, sequential order) and SR
# gradients of the FP8 recipe, threaded.
run seq_t1 --preset fp16-mpt $CNN --set accum=sequential,acc=binary32
run seq_t2 --preset fp16-mpt $CNN --set accum=sequential,acc=binary32 --threads 2
same_run seq_t1 seq_t2 1
run fp8_t1 --preset fp8-e5m2 --model mlp:784-32-16-10
run fp8_t2 --preset fp8-e5m2 --model mlp:784-32-16-10 --threads 2
same_run fp8_t1 fp8_t2 1

[ "$fails" -eq 0 ] || exit 1
echo "train_determinism: ok"
