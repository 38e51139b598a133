#!/bin/sh
# A run stopped early resumes to the uninterrupted run's results:
#   1. stopped as if by SIGTERM after 3 steps (EMU_TRAIN_STOP_AFTER, no
#      timing involved): exit 143, a message saying how to resume, and a
#      checkpoint at step 3; its resume stopped again after 4 more steps,
#      then resumed to the end;
#   2. killed with SIGKILL right after the checkpoint a run writes at its
#      start (long before its first periodic one): resumable;
#   3. real SIGINT and SIGTERM sent once the run has started: exit 130 or
#      143 with a checkpoint (or 0 if the run ended first), resumable.
# Usage: sh train_stop.sh /path/to/emu
set -u
EMU=${1:?usage: train_stop.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_stop: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_stop.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib/train_common.sh"

# No periodic checkpoint before the end: only the start checkpoint and
# the stop's can make these runs resumable.
COMMON="--train-examples 512 --test-examples 64 --batch 32 --epochs 2
        --stats-every 3 --model mlp:784-16-10 --preset bf16-sr"
mkdir -p "$tmp/full"
# shellcheck disable=SC2086
(cd "$tmp/full" && "$EMU" train $COMMON --out r) > "$tmp/full/log" 2>&1 ||
    fail "the uninterrupted run failed: $(cat "$tmp/full/log")"

# resume NAME: resumes $tmp/NAME/r to its end and compares it.
resume() {
    (cd "$tmp/$1" && "$EMU" train --resume r) > "$tmp/$1/log" 2>&1 ||
        fail "$1: the resume failed: $(cat "$tmp/$1/log")"
    same_run "$tmp/full/r" "$tmp/$1/r"
}

# 1. Stopped by the test hook, twice.
mkdir -p "$tmp/hook"
# shellcheck disable=SC2086
(cd "$tmp/hook" && EMU_TRAIN_STOP_AFTER=3 "$EMU" train $COMMON --out r) > "$tmp/hook/log" 2>&1
rc=$?
[ $rc -eq 143 ] || fail "stopped after 3 steps: exit $rc (want 143)"
grep -q "stopped by signal 15 after step 3 of 32.*--resume r" "$tmp/hook/log" ||
    fail "stopped after 3 steps: the message does not say so: $(cat "$tmp/hook/log")"
[ "$(rows "$tmp/hook/r")" -eq 3 ] && [ "$(meta_steps "$tmp/hook/r")" -eq 3 ] ||
    fail "stopped after 3 steps: the folder holds $(rows "$tmp/hook/r") steps"
(cd "$tmp/hook" && EMU_TRAIN_STOP_AFTER=4 "$EMU" train --resume r) > "$tmp/hook/log" 2>&1
rc=$?
[ $rc -eq 143 ] && [ "$(rows "$tmp/hook/r")" -eq 7 ] ||
    fail "the resume stopped after 4 more steps: exit $rc, $(rows "$tmp/hook/r") steps"
resume hook

# 2. SIGKILL after the start checkpoint: poll for it, then kill at once.
# The run may reach its end first on a fast machine: then the resume is
# a no-op and the comparison still holds.
mkdir -p "$tmp/kill"
# shellcheck disable=SC2086
(cd "$tmp/kill" && exec "$EMU" train $COMMON --out r) > /dev/null 2>&1 &
pid=$!
while kill -0 $pid 2> /dev/null && [ ! -f "$tmp/kill/r/checkpoint.bin" ]; do
    sleep 0.01 2> /dev/null || sleep 1
done
kill -KILL $pid 2> /dev/null && echo "train_stop: killed at step $(meta_steps "$tmp/kill/r")"
wait $pid 2> /dev/null
resume kill

# 3. Real signals, sent once the start checkpoint is there.
for sig in INT TERM; do
    mkdir -p "$tmp/$sig"
    # shellcheck disable=SC2086
    (cd "$tmp/$sig" && exec "$EMU" train $COMMON --out r) > "$tmp/$sig.log" 2>&1 &
    pid=$!
    while kill -0 $pid 2> /dev/null && [ ! -f "$tmp/$sig/r/checkpoint.bin" ]; do
        sleep 0.01 2> /dev/null || sleep 1
    done
    kill -$sig $pid 2> /dev/null
    wait $pid
    rc=$?
    want=130
    [ $sig = TERM ] && want=143
    if [ $rc -eq $want ]; then
        grep -q "stopped by signal" "$tmp/$sig.log" ||
            fail "SIG$sig: the message does not say the run stopped: $(cat "$tmp/$sig.log")"
        grep -q '"completed": false' "$tmp/$sig/r/meta.json" ||
            fail "SIG$sig: the stopped run is marked completed"
        echo "train_stop: SIG$sig stopped the run at step $(meta_steps "$tmp/$sig/r")"
    elif [ $rc -ne 0 ]; then
        fail "SIG$sig: exit $rc (want $want, or 0 if the run ended first): $(cat "$tmp/$sig.log")"
    fi
    resume $sig
done

[ "$fails" -eq 0 ] || exit 1
echo "train_stop: ok"
