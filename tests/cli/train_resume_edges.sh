#!/bin/sh
# emu train --resume at the edges: a run killed while it was writing a
# checkpoint (its logs already rewritten, checkpoint.bin not yet) must
# still resume to the uninterrupted run's results; a checkpoint copied in
# from another run's folder (another configuration) must be refused with
# nothing changed; resuming a run that has completed must not change its
# results, and one stopped between its final checkpoint and its final
# meta.json must be marked completed as the uninterrupted run is; a
# checkpoint taken at the end of an epoch (before that epoch's
# evaluation) must resume to the same results, evaluation included.
# Usage: sh train_resume_edges.sh /path/to/emu
set -u
EMU=${1:?usage: train_resume_edges.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_resume_edges: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_resume_edges.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib/train_common.sh"

COMMON="--train-examples 512 --test-examples 64 --batch 32 --epochs 3
        --checkpoint-every 5 --stats-every 2 --model mlp:784-16-10"

# killed NAME ARGS...: $tmp/NAME/r, a run killed after a whole checkpoint.
killed() {
    name=$1
    shift
    mkdir -p "$tmp/$name"
    tries=0
    # shellcheck disable=SC2086
    until kill_mid_run "$tmp/$name/r" 0 sh -c 'cd "$1" && shift && exec "$@"' \
            sh "$tmp/$name" "$EMU" train $COMMON --out r --force "$@"; do
        tries=$((tries + 1))
        [ $tries -lt 5 ] || { fail "$name: the run always ended before it could be killed"; exit 1; }
    done
}

mkdir -p "$tmp/full"
# shellcheck disable=SC2086
(cd "$tmp/full" && "$EMU" train $COMMON --out r --preset fp32) > "$tmp/full/log" 2>&1 ||
    fail "the uninterrupted run failed: $(cat "$tmp/full/log")"
killed cut --preset fp32
killed other --preset bf16-sr

# 1. Killed between the logs and the checkpoint of step c2 (the next one
# after the checkpoint at c1): the logs hold the rows of steps < c2, the
# checkpoint is at c1.
c1=$(rows "$tmp/cut/r")
c2=$((c1 + 5))
mkdir -p "$tmp/torn"
cp -R "$tmp/cut/r" "$tmp/torn/r"
for f in steps.csv ops_steps.csv layers_steps.csv eval.csv; do
    col=1
    [ $f = eval.csv ] && col=2 # epoch,step,...: the step that ended the epoch
    awk -F, -v c=$col -v s=$c2 'NR == 1 || $c + 0 < s || ($c + 0 == s && c == 2)' \
        "$tmp/full/r/$f" > "$tmp/torn/r/$f"
done
(cd "$tmp/torn" && "$EMU" train --resume r) > "$tmp/torn.log" 2>&1 ||
    fail "resume after a torn checkpoint failed: $(cat "$tmp/torn.log")"
same_run "$tmp/full/r" "$tmp/torn/r"

# 2. A checkpoint from another run (another preset) copied into this run's
# folder: the folder's logs and meta.json are of one configuration, the
# checkpoint of another.
cp "$tmp/other/r/checkpoint.bin" "$tmp/cut/r/checkpoint.bin"
expect_refusal "a checkpoint from another configuration" "$tmp/cut/r" "configuration" \
    train --resume "$tmp/cut/r" --quiet

# 3. Resuming a completed run: refused, or a no-op that keeps the results.
mkdir -p "$tmp/done"
cp -R "$tmp/full/r" "$tmp/done/r"
before=$(snapshot "$tmp/done/r")
if (cd "$tmp/done" && "$EMU" train --resume r) > "$tmp/done.log" 2>&1; then
    same_run "$tmp/full/r" "$tmp/done/r"
else
    grep -q "complete" "$tmp/done.log" ||
        fail "resume of a completed run: refused without saying why: $(cat "$tmp/done.log")"
    [ "$before" = "$(snapshot "$tmp/done/r")" ] || fail "resume of a completed run: files changed"
fi

# 3b. Stopped after the final checkpoint but before the final meta.json
# (save_all writes meta last): every other file is the finished run's, and
# meta.json is still a periodic checkpoint's.  The resume must mark it
# completed with the final evaluation's numbers, the uninterrupted run's
# meta.json byte for byte but the time; a language model's loss,
# perplexity and bits per character included.
unfinish() {
    sed -e 's/"completed": true/"completed": false/' \
        -e 's/"test_accuracy": [^,]*,/"test_accuracy": null,/' \
        -e '/"test_loss"\|"test_perplexity"\|"test_bits_per_char"/d' \
        "$1/meta.json" > "$1/meta.tmp" && mv "$1/meta.tmp" "$1/meta.json"
}
LM="--model gpt:1-16-2-8 --data text --steps 6 --batch 4 --eval-windows 8"
mkdir -p "$tmp/lmfull"
# shellcheck disable=SC2086
(cd "$tmp/lmfull" && "$EMU" train $LM --out r) > "$tmp/lmfull/log" 2>&1 ||
    fail "the uninterrupted language-model run failed: $(cat "$tmp/lmfull/log")"
for case in full lmfull; do
    rm -rf "$tmp/unfin"
    mkdir -p "$tmp/unfin"
    cp -R "$tmp/$case/r" "$tmp/unfin/r"
    unfinish "$tmp/unfin/r"
    grep -q '"completed": false' "$tmp/unfin/r/meta.json" ||
        fail "$case: could not unmark the copy's meta.json"
    (cd "$tmp/unfin" && "$EMU" train --resume r) > "$tmp/unfin.log" 2>&1 ||
        fail "$case: resume of a run stopped before its final meta.json failed: $(cat "$tmp/unfin.log")"
    grep -q "now says so" "$tmp/unfin.log" ||
        fail "$case: the resume does not say it completed the run: $(cat "$tmp/unfin.log")"
    grep -v '"seconds"' "$tmp/$case/r/meta.json" > "$tmp/x"
    grep -v '"seconds"' "$tmp/unfin/r/meta.json" > "$tmp/y"
    cmp -s "$tmp/x" "$tmp/y" ||
        fail "$case: meta.json after the resume differs: $(diff "$tmp/x" "$tmp/y")"
    [ "$case" = lmfull ] || same_run "$tmp/$case/r" "$tmp/unfin/r"
done

# 4. Killed after the checkpoint that ends epoch 0 (16 steps an epoch, a
# checkpoint every 8): the resumed run must still evaluate epoch 0, and
# with stochastic rounding (the evaluation's ops advance the op counter)
# every later step depends on it.
# MPFR sampling (--ref-rate) only measures, and makes each step slow
# enough that the kill lands in the window between that checkpoint and the
# next step's row: without it the run outgrew the 10 ms polling.
EPOCH="--preset bf16-sr --checkpoint-every 8 --ref-rate 0.05"
mkdir -p "$tmp/efull" "$tmp/ecut"
# shellcheck disable=SC2086
(cd "$tmp/efull" && "$EMU" train $COMMON $EPOCH --out r) > "$tmp/efull/log" 2>&1 ||
    fail "the uninterrupted run failed: $(cat "$tmp/efull/log")"
tries=0
while :; do
    # shellcheck disable=SC2086
    kill_mid_run "$tmp/ecut/r" 15 sh -c 'cd "$1" && shift && exec "$@"' \
        sh "$tmp/ecut" "$EMU" train $COMMON $EPOCH --out r --force &&
        [ "$(rows "$tmp/ecut/r")" -eq 16 ] && break
    tries=$((tries + 1))
    [ $tries -lt 20 ] || { fail "could not stop the run at the end of epoch 0"; break; }
done
if [ "$(rows "$tmp/ecut/r")" -eq 16 ]; then
    (cd "$tmp/ecut" && "$EMU" train --resume r) > "$tmp/ecut/log" 2>&1 ||
        fail "resume at the end of an epoch failed: $(cat "$tmp/ecut/log")"
    same_run "$tmp/efull/r" "$tmp/ecut/r"
fi

[ "$fails" -eq 0 ] || exit 1
echo "train_resume_edges: ok"
