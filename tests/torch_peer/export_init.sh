#!/bin/sh
# --export and --init-from: a run started from the initial weights another
# run began with (written by the peer program, tests/torch_peer/peer.c)
# repeats that run bit for bit -- its losses, every steps.csv column but
# the time, and its final weights file byte for byte -- under nearest,
# stochastic (the op counter is put back after loading) and master-weight
# policies; --export copies the folder's weights.safetensors; a run from a
# file stopped and resumed ends where an uninterrupted one does without
# reading the file again (the checkpoint holds the weights), and keeps the
# file's record in meta.json; bad files and options are refused naming
# the option, the file and the tensor.
# Usage: sh export_init.sh /path/to/emu /path/to/torch_peer
set -u
EMU=${1:?usage: export_init.sh EMU PEER}
PEER=${2:?usage: export_init.sh EMU PEER}
fails=0
fail() { echo "FAIL export_init: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/export_init.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
SMALL="--train-examples 128 --test-examples 32 --batch 16 --stats-every 0 --quiet"

# steps.csv without its last column (seconds).
rows() { sed 's/,[^,]*$//' "$1"; }

for case in "fp16-mpt mlp:784-32-10" "bf16-sr cnn:4-8-16-12" "fp32 mlp-gelu:784-16-10"; do
    set -- $case
    pol=$1 arch=$2
    d=$tmp/$pol
    mkdir -p "$d"
    "$PEER" init "$arch" "$pol" 3 "$d/w0.safetensors" || fail "$pol: peer init"
    # shellcheck disable=SC2086
    "$EMU" train --preset "$pol" --model "$arch" --seed 3 --steps 3 $SMALL \
        --out "$d/a" > "$d/log" 2>&1 || fail "$pol: run a: $(cat "$d/log")"
    # shellcheck disable=SC2086
    "$EMU" train --preset "$pol" --model "$arch" --seed 3 --steps 3 $SMALL \
        --init-from "$d/w0.safetensors" --export "$d/b.safetensors" \
        --out "$d/b" > "$d/log" 2>&1 || fail "$pol: run b: $(cat "$d/log")"
    [ "$(rows "$d/a/steps.csv")" = "$(rows "$d/b/steps.csv")" ] ||
        fail "$pol: steps.csv of the run from the file differs:
$(diff "$d/a/steps.csv" "$d/b/steps.csv")"
    cmp -s "$d/a/weights.safetensors" "$d/b/weights.safetensors" ||
        fail "$pol: the final weights differ"
    cmp -s "$d/b/weights.safetensors" "$d/b.safetensors" ||
        fail "$pol: --export is not the folder's weights.safetensors"
    grep -q "\"init_from\": {\"path\": \"$d/w0.safetensors\", \"bytes\": [0-9]*, \"fnv1a64\": \"[0-9a-f]\{16\}\"}," "$d/b/meta.json" ||
        fail "$pol: meta.json does not record the file: $(grep init_from "$d/b/meta.json")"
    grep -q init_from "$d/a/meta.json" && fail "$pol: init_from in a run without it"
done

# Stopped after 2 of 4 steps, the file removed, resumed (with --export):
# the checkpoint wins, and the run ends as an uninterrupted one.
d=$tmp/resume
mkdir -p "$d"
"$PEER" init mlp:784-32-10 fp16-mpt 3 "$d/w0.safetensors"
cp "$d/w0.safetensors" "$d/w1.safetensors"
# shellcheck disable=SC2086
"$EMU" train --preset fp16-mpt --model mlp:784-32-10 --seed 3 --steps 4 $SMALL \
    --init-from "$d/w1.safetensors" --out "$d/full" > "$d/log" 2>&1 || fail "resume: full run"
# shellcheck disable=SC2086
EMU_TRAIN_STOP_AFTER=2 "$EMU" train --preset fp16-mpt --model mlp:784-32-10 --seed 3 \
    --steps 4 $SMALL --init-from "$d/w0.safetensors" --out "$d/part" > "$d/log" 2>&1
[ $? = 143 ] || fail "resume: the stop hook did not stop the run: $(cat "$d/log")"
rm "$d/w0.safetensors"
"$EMU" train --resume "$d/part" --quiet --export "$d/part.safetensors" > "$d/log" 2>&1 ||
    fail "resume: --resume: $(cat "$d/log")"
cmp -s "$d/full/weights.safetensors" "$d/part/weights.safetensors" ||
    fail "resume: the resumed run's weights differ"
cmp -s "$d/part/weights.safetensors" "$d/part.safetensors" || fail "resume: --export"
grep -q "\"init_from\": {\"path\": \"$d/w0.safetensors\"" "$d/part/meta.json" ||
    fail "resume: meta.json lost init_from"

# Refusals: each names the option, the file and what is wrong.
expect() { # WHAT PATTERN ARGS...
    what=$1 pat=$2
    shift 2
    "$EMU" "$@" > "$tmp/out" 2>&1
    rc=$?
    [ $rc = 2 ] || fail "$what: exit $rc, expected 2: $(cat "$tmp/out")"
    grep -Eq -e "$pat" "$tmp/out" || fail "$what: message lacks /$pat/: $(cat "$tmp/out")"
}
w=$tmp/fp16-mpt/w0.safetensors
expect "a missing file" "--init-from $tmp/none: cannot open" \
    train $SMALL --init-from "$tmp/none" --out "$tmp/x"
[ -e "$tmp/x" ] && fail "a refused --init-from made the output folder"
expect "another model's file" "--init-from $w: key 'weights': does not fit the model mlp:784-16-10: fc1.weight has shape \[32, 784\], the model \[16, 784\]" \
    train $SMALL --model mlp:784-16-10 --init-from "$w" --out "$tmp/x"
head -c 100 "$w" > "$tmp/cut.safetensors"
expect "a truncated file" "cut.safetensors: key 'header': a header of" \
    train $SMALL --init-from "$tmp/cut.safetensors" --out "$tmp/x"
expect "an empty --init-from" "--init-from: '' is empty" train --init-from "" --out "$tmp/x"
expect "--init-from with --resume" "only --threads, --quiet and --export" \
    train --resume "$tmp/resume/part" --init-from "$w"
expect "weights show without a file" "show: expected a FILE" weights show
expect "weights with another verb" "'list' is not a verb" weights list "$w"
expect "weights show of a damaged file" "cut.safetensors: key 'header'" \
    weights show "$tmp/cut.safetensors"

# emu weights show: names, dtypes, shapes, and statistics that numpy agrees with.
"$EMU" weights show "$w" > "$tmp/show" 2>&1 || fail "weights show: $(cat "$tmp/show")"
grep -Eq '^fc1\.weight +F32 +\[32,784\] +25088 ' "$tmp/show" || fail "weights show: $(cat "$tmp/show")"
grep -Eq '^fc2\.bias +F32 +\[10\] +10 +0 +0 +0 +0$' "$tmp/show" || fail "weights show: biases start at 0: $(cat "$tmp/show")"
grep -q '^# arch: mlp:784-32-10$' "$tmp/show" || fail "weights show: metadata"

[ $fails = 0 ] && echo "export_init: all passed"
exit $((fails > 0))
