#!/bin/sh
# emu train --warmup / --lr-schedule cosine / --clip-norm: the learning
# rate of each step in steps.csv against the formula in binary64 (warm-up
# start and end, the cosine's midpoint and end); clipping adds the
# grad_norm column and the clip.* sites, scales the gradients only when
# the norm exceeds C, and leaves a run without it as it was (no column,
# no site).  The clipping's arithmetic itself is checked against binary64
# in test_nn (clip_grad_norm).
# Usage: sh train_optim.sh /path/to/emu
set -u
EMU=${1:?usage: train_optim.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_optim: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_optim.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

Q="--quiet --preset fp32 --model mlp:784-16-10 --train-examples 640
   --test-examples 32 --batch 32 --stats-every 0"
# col FILE NAME: the column NAME of a CSV file, one value a line.
col() {
    awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
                          c { print $c }' "$1"
}
# near STEP GOT WANT: relative difference below 1e-8 (%.9g in steps.csv).
near() {
    awk -v s="$1" -v g="$2" -v w="$3" 'BEGIN {
        d = g - w; if (d < 0) d = -d; m = w < 0 ? -w : w;
        if (d > 1e-8 * m + 1e-300) { printf "step %s: lr %s, want %.17g\n", s, g, w; exit 1 } }'
}

# ---- the schedule: 20 steps, 5 of warm-up, cosine to 0.01 over steps 5..19
# shellcheck disable=SC2086
"$EMU" train $Q --steps 20 --lr 0.1 --warmup 5 --lr-schedule cosine --lr-min 0.01 \
    --out "$tmp/sched" > "$tmp/log" 2>&1 || fail "schedule run: $(cat "$tmp/log")"
col "$tmp/sched/steps.csv" lr > "$tmp/lr"
[ "$(wc -l < "$tmp/lr")" -eq 20 ] || fail "schedule: $(wc -l < "$tmp/lr") lr values, want 20"
for s in 0 4 5 12 19; do
    want=$(awk -v s=$s 'BEGIN { lr = 0.1; lo = 0.01; w = 5; n = 20;
        if (s < w) { print lr * (s + 1) / w; exit }
        t = (s - w) / (n - w - 1); printf "%.17g\n", lo + 0.5 * (lr - lo) * (1 + cos(3.14159265358979323846 * t)) }')
    got=$(sed -n "$((s + 1))p" "$tmp/lr")
    msg=$(near $s "$got" "$want") || fail "schedule: $msg"
done
# The named points: warm-up end = lr, the cosine's midpoint, its end = lr-min.
[ "$(sed -n 5p "$tmp/lr")" = 0.1 ] || fail "warm-up end: lr $(sed -n 5p "$tmp/lr"), want 0.1"
[ "$(sed -n 13p "$tmp/lr")" = 0.055 ] || fail "midpoint: lr $(sed -n 13p "$tmp/lr"), want 0.055"
[ "$(sed -n 20p "$tmp/lr")" = 0.01 ] || fail "end: lr $(sed -n 20p "$tmp/lr"), want 0.01"
grep -q '"warmup": 5, "clip_norm": 0' "$tmp/sched/meta.json" ||
    fail "meta.json does not record the warm-up"
# The warm-up with the constant schedule: lr after it.
# shellcheck disable=SC2086
"$EMU" train $Q --steps 6 --lr 0.1 --warmup 2 --out "$tmp/const" > "$tmp/log" 2>&1 ||
    fail "constant run: $(cat "$tmp/log")"
[ "$(col "$tmp/const/steps.csv" lr | tr '\n' ' ')" = "0.05 0.1 0.1 0.1 0.1 0.1 " ] ||
    fail "warm-up then constant: $(col "$tmp/const/steps.csv" lr | tr '\n' ' ')"

# ---- clipping --------------------------------------------------------------
# shellcheck disable=SC2086
"$EMU" train $Q --steps 6 --out "$tmp/off" > "$tmp/log" 2>&1 || fail "run without clipping"
head -1 "$tmp/off/steps.csv" | grep -q grad_norm && fail "grad_norm without clipping"
grep -q '"clip\.\|\.clip"' "$tmp/off/ops.csv" && fail "clip sites without clipping"
grep -q warmup "$tmp/off/meta.json" && fail "meta.json names the new options when off"
# A C far below the norm: every step clipped; far above: none.
for c in 0.01 1000000; do
    # shellcheck disable=SC2086
    "$EMU" train $Q --steps 6 --clip-norm $c --out "$tmp/c$c" > "$tmp/log" 2>&1 ||
        fail "--clip-norm $c: $(cat "$tmp/log")"
    col "$tmp/c$c/steps.csv" grad_norm > "$tmp/norms"
    [ "$(wc -l < "$tmp/norms")" -eq 6 ] || fail "--clip-norm $c: $(wc -l < "$tmp/norms") norms"
    awk '!($1 > 0 && $1 < 1e30) { exit 1 }' "$tmp/norms" ||
        fail "--clip-norm $c: a norm that is not finite and positive: $(tr '\n' ' ' < "$tmp/norms")"
    for site in clip.sumsq clip.sum clip.norm; do
        grep -q "^\"$site\",[^,]*,weight_grad," "$tmp/c$c/ops.csv" ||
            fail "--clip-norm $c: no weight_grad site $site in ops.csv"
    done
done
grep -q '^"fc1.w.clip"' "$tmp/c0.01/ops.csv" || fail "C = 0.01 clipped nothing"
grep -q '^"fc1.w.clip"' "$tmp/c1000000/ops.csv" && fail "C = 1e6 clipped"
# The first step's norm is the same with any C (the same gradients), and
# with C = 1e6 the run is the run without clipping.
[ "$(sed -n 1p "$tmp/norms")" = "$(col "$tmp/c0.01/steps.csv" grad_norm | sed -n 1p)" ] ||
    fail "the first step's norm depends on C"
[ "$(col "$tmp/off/steps.csv" loss)" = "$(col "$tmp/c1000000/steps.csv" loss)" ] ||
    fail "an unreached C changed the losses"
[ "$(col "$tmp/off/steps.csv" loss)" != "$(col "$tmp/c0.01/steps.csv" loss)" ] ||
    fail "C = 0.01 did not change the losses"

[ $fails -eq 0 ] && echo "train_optim: all checks passed"
exit $((fails > 0))
