#!/bin/sh
# emu train's histogram steps: by default the log2 histograms (hist.csv)
# are measured on every --stats-every'th step, with --hist-every N on every
# Nth; the "*.dinput" sites on every step; the counters on every step
# whatever either says.  So:
#   - every other file of a run (steps, per-op counters, layer rows, weights,
#     evaluation) is the same whichever steps are histogrammed;
#   - a site's histogram holds exactly its results of the histogram steps
#     (counted from ops_steps.csv's per-step rows), and of every step for
#     a parameter layer's input gradient ("<layer>.dinput", whose zeros
#     layers_steps.csv reads every step), plus what it measured outside
#     the steps (the initial weights' loads);
#   - the default follows --stats-every;
#   - meta.json records the steps used.
# Usage: sh train_hist_every.sh /path/to/emu
set -u
EMU=${1:?usage: train_hist_every.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_hist_every: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_hist_every.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

# Seven steps of an FP16 MLP: inexact results, underflow, a dynamic scale.
SMALL="--preset fp16-mpt --model mlp:784-16-10 --data synthetic
       --train-examples 448 --test-examples 64 --batch 64 --steps 7
       --checkpoint-every 0 --quiet"
run() {
    name=$1
    shift
    # shellcheck disable=SC2086
    "$EMU" train $SMALL --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 ||
        fail "$name: emu train failed: $(cat "$tmp/$name.log")"
}
run every1 --stats-every 3 --hist-every 1
run default --stats-every 3
run rows1 --stats-every 1 --hist-every 3

# The same run but for hist.csv (and ops.json, which holds it), the timing
# column aside.
for f in steps.csv ops.csv ops_steps.csv layers_steps.csv eval.csv \
         weights.safetensors summary.txt; do
    case $f in
    steps.csv) a=$(sed 's/,[^,]*$//' "$tmp/every1/$f")
               b=$(sed 's/,[^,]*$//' "$tmp/default/$f") ;;
    *) a=$(od -An -tx1 "$tmp/every1/$f"); b=$(od -An -tx1 "$tmp/default/$f") ;;
    esac
    [ "$a" = "$b" ] || fail "$f differs between --hist-every 1 and the default"
done
cmp -s "$tmp/every1/hist.csv" "$tmp/default/hist.csv" &&
    fail "hist.csv is the same with histograms every step and every third"
# The default is --stats-every's steps: 0, 3 and 6 in both.
cmp -s "$tmp/default/hist.csv" "$tmp/rows1/hist.csv" ||
    fail "the default's histograms are not those of --hist-every 3"
grep -q '"stats_every": 3, "hist_every": 3,' "$tmp/default/meta.json" ||
    fail "meta.json does not record hist_every 3: $(grep config "$tmp/default/meta.json")"
grep -q '"hist_every": 1,' "$tmp/every1/meta.json" ||
    fail "meta.json does not record hist_every 1"

# check DIR EVERY: each site's rounded-value histogram total against its
# results: those of the steps s with s % EVERY == 0 (every step for the
# layers of layers_steps.csv's "<layer>.dinput"), from ops_steps.csv (which
# must hold every step), plus the results outside the steps (ops.csv's
# total less the steps' sum).
check() {
    awk -F, -v every="$2" -v dir="$1" '
        FNR == 1 { file++; next }
        file == 1 { always[$2 ".dinput"] = 1; next }
        file == 2 { gsub(/"/, "", $2); steps[$2] += $6
                    if ($1 % every == 0 || ($2 in always)) want[$2] += $6
                    next }
        file == 3 { gsub(/"/, "", $1); total[$1] += $5; next }
        file == 4 { gsub(/"/, "", $1); if ($5 == "rounded") hist[$1] += $8 }
        END {
            n = 0
            for (s in total) {
                w = want[s] + total[s] - steps[s]
                if (hist[s] + 0 != w) {
                    printf "%s: site %s: %d values in its histogram, %d wanted\n",
                           dir, s, hist[s], w
                    bad++
                }
                n++
            }
            if (n < 10) { printf "%s: only %d sites\n", dir, n; bad++ }
            exit bad > 0
        }' "$1/layers_steps.csv" "$1/ops_steps.csv" "$1/ops.csv" "$1/hist.csv"
}
# ops_steps.csv has every step in rows1 only; every1's histograms must
# hold every result (ops.csv), rows1's those of steps 0, 3 and 6.
check "$tmp/rows1" 3 || fail "rows1: histograms and results disagree"
grep -q '^"relu1.dinput",' "$tmp/rows1/ops.csv" &&
    grep -q '^"fc2.dinput",' "$tmp/rows1/ops.csv" ||
    fail "the model lacks the input-gradient sites this test counts"
awk -F, '
    FNR == 1 { file++; next }
    file == 1 { gsub(/"/, "", $1); total[$1] += $5; next }
    { gsub(/"/, "", $1); if ($5 == "rounded") hist[$1] += $8 }
    END { for (s in total) if (hist[s] + 0 != total[s]) {
              printf "site %s: %d in its histogram, %d results\n", s, hist[s], total[s]
              bad++ }
          exit bad > 0 }' "$tmp/every1/ops.csv" "$tmp/every1/hist.csv" ||
    fail "every1: a histogram does not hold every result"

# The parameter layers' input gradients are histogrammed at every step,
# and nothing else: the ReLU's is not.
grep -q '^"fc2.dinput",.*,rounded,' "$tmp/rows1/hist.csv" ||
    fail "fc2.dinput has no histogram"

# Bad values are refused, naming the option.
for v in 0 -1 x; do
    if "$EMU" train $SMALL --out "$tmp/bad" --hist-every "$v" > "$tmp/bad.log" 2>&1; then
        fail "--hist-every $v was accepted"
    else
        grep -q 'hist-every' "$tmp/bad.log" ||
            fail "--hist-every $v: the error does not name the option: $(cat "$tmp/bad.log")"
    fi
done

[ "$fails" -eq 0 ] || exit 1
echo "train_hist_every: ok"
