#!/bin/sh
# Instructions (callgrind Ir) per training step of `emu train`, the method of
# bench/profiles/instructions.txt: per step = (I(S2 steps) - I(S1 steps)) / (S2 - S1),
# so set-up and the final evaluation cancel.  Counts, not times: the figures do
# not depend on the load of a shared machine.
#   sh bench/instr_step.sh EMU PRESET MODEL [S1 S2 [extra emu train options]]
# Prints "PRESET MODEL per-step-Ir DIR"; the callgrind files stay in DIR
# (callgrind_annotate DIR/cg.S2 for attribution).
set -eu
emu=$1; preset=$2; model=$3; s1=${4:-10}; s2=${5:-20}
shift 3; if [ $# -ge 2 ]; then shift 2; else set --; fi
# The image models train on 1280 Fashion-MNIST examples; the language models
# on the embedded text, whole (--train-examples counts characters there, and
# 1280 would end the epoch after a step), with the validation split at 4096
# characters.
case $model in
    gpt*|lstm*) data="--data text --test-examples 4096" ;;
    *) data="--train-examples 1280 --test-examples 64" ;;
esac
dir=$(mktemp -d "${TMPDIR:-/tmp}/instr_step.XXXXXX")
ir() {
    n=$1; shift
    OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.$n" \
        "$emu" train --preset "$preset" --model "$model" --steps "$n" \
        $data --out "$dir/run.$n" --force --quiet \
        "$@" 2>"$dir/log.$n"
    sed -n 's/^summary: //p;s/^totals: //p' "$dir/cg.$n" | head -1
}
a=$(ir "$s1" "$@"); b=$(ir "$s2" "$@")
echo "$preset $model $(( (b - a) / (s2 - s1) )) $dir"
