#!/bin/sh
# emu train --resume: a run killed after a checkpoint and resumed ends with
# exactly the results of an uninterrupted run with the same seed (every
# file but the timing, as in train_determinism.sh); a resume with other
# options, of a folder without a run, or from a truncated or corrupt
# checkpoint is refused with a clear message and changes no file.
# Usage: sh train_resume.sh /path/to/emu
set -u
EMU=${1:?usage: train_resume.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_resume: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_resume.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib/train_common.sh"

# resume_case NAME ARGS...: the uninterrupted run, then a run killed,
# resumed, killed again, resumed to the end; the results must be equal.
# Long enough (3 epochs, MPFR sampling) to be caught in the middle.
COMMON="--train-examples 512 --test-examples 64 --batch 32 --epochs 3
        --checkpoint-every 5 --stats-every 2 --ref-rate 0.002"
resume_case() {
    name=$1
    shift
    mkdir -p "$tmp/$name/full" "$tmp/$name/cut"
    # shellcheck disable=SC2086
    (cd "$tmp/$name/full" && "$EMU" train $COMMON --out r "$@") > "$tmp/$name/log" 2>&1 ||
        { fail "$name: the uninterrupted run failed"; return; }
    tries=0
    # shellcheck disable=SC2086
    until kill_mid_run "$tmp/$name/cut/r" 0 sh -c \
            'cd "$1" && shift && exec "$@"' sh "$tmp/$name/cut" "$EMU" train $COMMON \
            --out r --force "$@"; do
        tries=$((tries + 1))
        [ $tries -lt 5 ] || { fail "$name: the run always ended before it could be killed"; return; }
    done
    first=$(rows "$tmp/$name/cut/r")
    cp -R "$tmp/$name/cut/r" "$tmp/$name/killed"
    # Resumed, killed once more if it can be, and resumed to the end (the
    # last part with the options of the uninterrupted run: --quiet is saved).
    if kill_mid_run "$tmp/$name/cut/r" "$first" sh -c 'cd "$1" && exec "$2" train --resume r' \
           sh "$tmp/$name/cut" "$EMU"; then
        second=$(rows "$tmp/$name/cut/r")
        (cd "$tmp/$name/cut" && "$EMU" train --resume r) > "$tmp/$name/log" 2>&1 ||
            fail "$name: resume failed: $(cat "$tmp/$name/log")"
        grep -q "resuming at step $second " "$tmp/$name/log" ||
            fail "$name: the resume does not say it resumes at step $second: $(cat "$tmp/$name/log")"
        echo "$name: killed at step $first, then at $second; resumed to the end"
    else
        echo "$name: killed at step $first; resumed to the end"
    fi
    grep -q '"completed": true' "$tmp/$name/cut/r/meta.json" ||
        fail "$name: the resumed run is not marked completed"
    same_run "$tmp/$name/full/r" "$tmp/$name/cut/r"
}

# FP16 with master weights, momentum and a dynamic loss scale that grows
# every 3 clean steps: optimizer state, scale and its counter carry over.
resume_case mpt --preset fp16-mpt --model mlp:784-32-16-10 --set interval=3
# Per-layer adaptive scales (their statistics carry over), stochastic
# rounding of the errors (the op counter carries over), a cosine schedule.
resume_case adaptive --preset adaptive --model mlp:784-16x4-10 \
    --loss-mult 0.0000152587890625 --set act_grad.mode=sr --schedule cosine
# Zhao et al.'s per-layer rule: nothing carries over but what every run
# has (its factors come from each step's operands); the caps are saved.
resume_case layerwise --preset layerwise --model mlp:784-16x4-10 \
    --loss-mult 0.0000152587890625 --set act_grad.mode=sr --set total_max=4096
# Delayed FP8 scaling: the amax histories and tensor scales carry over;
# so do the histogram steps (--hist-every, the checkpoint's last optional
# setting, written after the zeros of the ones before it).
resume_case fp8delayed --preset fp8-delayed --model mlp:784-32-16-10 \
    --set tensor_scaling=delayed,history=4 --hist-every 3
# Warm-up, cosine decay and gradient clipping under a dynamic loss scale:
# the lr is a function of the step, the clipping of the gradients alone.
resume_case clipsched --preset fp16-mpt --model mlp:784-32-16-10 \
    --warmup 10 --lr-schedule cosine --lr-min 0.001 --clip-norm 0.5
# Kahan-compensated AdamW in bfloat16: the compensation and both moments carry
# over; the step buffer is rewritten every step and not saved.
resume_case kahanadam --preset bf16-kahan --model mlp:784-32-16-10 \
    --optimizer adam --lr 1e-3 --weight-decay 0.01

# ---- refusals ------------------------------------------------------------

k=$tmp/mpt/killed
expect_refusal "resume with another option" "$k" "resume" train --resume "$k" --lr 0.1
expect_refusal "resume with another clipping norm" "$tmp/clipsched/killed" "resume" \
    train --resume "$tmp/clipsched/killed" --clip-norm 1
expect_refusal "resume with a preset" "$k" "resume" train --resume "$k" --preset fp32
printf 'lr = 0.1\n' > "$tmp/cfg"
expect_refusal "resume with a config file" "$k" "resume" train --resume "$k" --config "$tmp/cfg"
mkdir -p "$tmp/empty"
expect_refusal "resume of a folder without a run" "$tmp/empty" "checkpoint" \
    train --resume "$tmp/empty"
expect_refusal "resume of a missing folder" "$tmp/empty" "checkpoint" \
    train --resume "$tmp/empty/nonexistent"

# Truncated checkpoints: empty, inside the header, inside the saved
# settings, inside the tensors, one byte short.
size=$(wc -c < "$k/checkpoint.bin")
for n in 0 40 2000 $((size / 2)) $((size - 1)); do
    rm -rf "$tmp/trunc"
    cp -R "$k" "$tmp/trunc"
    head -c "$n" "$k/checkpoint.bin" > "$tmp/trunc/checkpoint.bin"
    expect_refusal "checkpoint truncated to $n of $size bytes" "$tmp/trunc" "truncated" \
        train --resume "$tmp/trunc" --quiet
done
# Not a checkpoint at all.
rm -rf "$tmp/bad"
cp -R "$k" "$tmp/bad"
printf 'XXXXXXXX' | dd of="$tmp/bad/checkpoint.bin" conv=notrunc 2> /dev/null
expect_refusal "checkpoint with a wrong magic number" "$tmp/bad" "not a libemu checkpoint" \
    train --resume "$tmp/bad" --quiet

[ "$fails" -eq 0 ] || exit 1
echo "train_resume: ok"
