#!/bin/sh
# The experiments' job runner (experiments/tools/runjobs.sh) runs exactly
# the line it is given, as a Slurm array task would:
#   1. by an index argument or by SLURM_ARRAY_TASK_ID, one line and only
#      that one, in the experiment's work folder, with `emu` the program
#      under test (a real tiny training run among the lines);
#   2. an index outside the list, or not a number, runs nothing and fails;
#   3. without an index, every line runs (GNU parallel), and one failing
#      line fails the whole run while the others still run;
#   4. EMU_EXP_KEEP=1 skips a line whose run folder holds a completed run.
# Usage: sh exp_runjobs.sh /path/to/emu  (exits 77 without GNU parallel or
# bash).
set -u
EMU=${1:?usage: exp_runjobs.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
RUNJOBS=$(cd "$(dirname "$0")/../../experiments/tools" && pwd)/runjobs.sh
command -v bash >/dev/null || { echo "exp_runjobs: no bash"; exit 77; }
command -v parallel >/dev/null || { echo "exp_runjobs: no GNU parallel"; exit 77; }
fails=0
fail() { echo "FAIL exp_runjobs: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./exp_runjobs.XXXXXX) || exit 1
tmp=$(cd "$tmp" && pwd)
trap 'rm -rf "$tmp"' EXIT

# A job list laid out like an experiment's: <exp>/jobs-quick.txt; its work
# folder is $EMU_EXP_WORK/<exp>/quick.
mkdir -p "$tmp/exp/99-test"
LIST=$tmp/exp/99-test/jobs-quick.txt
WORK=$tmp/work/99-test/quick
cat > "$LIST" <<'EOF'
echo one >> one.txt
echo two >> two.txt
emu train --quiet --force --checkpoint-every 0 --out tiny --data synthetic --train-examples 64 --test-examples 32 --steps 2 --batch 32 --model mlp:784-8-10 --seed 3
echo four >> four.txt
EOF
export EMU EMU_EXP_WORK="$tmp/work" EMU_EXP_JOBS=2
unset SLURM_ARRAY_TASK_ID
# The outputs present, in ls's (sorted) order.
outputs() { (cd "$WORK" 2>/dev/null && ls one.txt two.txt four.txt tiny/meta.json 2>/dev/null | tr '\n' ' '); }

# 1. By index, by SLURM_ARRAY_TASK_ID, and the training line.
bash "$RUNJOBS" "$LIST" 2 > "$tmp/out" 2>&1 || fail "index 2 failed: $(cat "$tmp/out")"
[ "$(outputs)" = "two.txt " ] || fail "index 2 ran other lines: $(outputs)"
[ "$(cat "$WORK/two.txt")" = two ] || fail "index 2 ran its line more than once"
grep -q "^echo two >> two.txt\$" "$WORK/logs/2.log" || fail "the log of line 2 does not name its command"
SLURM_ARRAY_TASK_ID=4 bash "$RUNJOBS" "$LIST" > "$tmp/out" 2>&1 ||
    fail "SLURM_ARRAY_TASK_ID=4 failed: $(cat "$tmp/out")"
[ "$(outputs)" = "four.txt two.txt " ] || fail "task 4 ran other lines: $(outputs)"
# An index argument wins over the environment.
SLURM_ARRAY_TASK_ID=4 bash "$RUNJOBS" "$LIST" 1 > "$tmp/out" 2>&1 || fail "index 1 failed"
[ "$(outputs)" = "four.txt one.txt two.txt " ] || fail "index 1 (task 4 set) ran: $(outputs)"
[ "$(cat "$WORK/four.txt")" = four ] || fail "index 1 with task 4 set ran line 4 again"
bash "$RUNJOBS" "$LIST" 3 > "$tmp/out" 2>&1 || fail "the training line failed: $(cat "$tmp/out")"
grep -q '"completed": true' "$WORK/tiny/meta.json" 2>/dev/null ||
    fail "the training line did not complete its run in the work folder"
grep -q '"steps": 2,' "$WORK/tiny/meta.json" 2>/dev/null || fail "the training run has not 2 steps"
[ "$(cat "$WORK/one.txt" "$WORK/two.txt" "$WORK/four.txt" | tr '\n' ' ')" = "one two four " ] ||
    fail "a line ran twice: $(cat "$WORK"/*.txt)"

# 2. Indices that name no line.
for bad in 0 5 x1 -1; do
    bash "$RUNJOBS" "$LIST" "$bad" > "$tmp/out" 2>&1 && fail "index '$bad' succeeded"
done
[ "$(cat "$WORK/one.txt" "$WORK/two.txt" "$WORK/four.txt" | tr '\n' ' ')" = "one two four " ] ||
    fail "a bad index ran a line"

# 4. Keep: the completed run is skipped, the others rerun.
EMU_EXP_KEEP=1 bash "$RUNJOBS" "$LIST" 3 > "$tmp/out" 2>&1 || fail "keep failed"
grep -q "kept: 3/4 tiny" "$tmp/out" || fail "keep did not skip the completed run: $(cat "$tmp/out")"

# 3. Every line, in parallel; then a list with a failing line.
rm -rf "$WORK"
bash "$RUNJOBS" "$LIST" > "$tmp/out" 2>&1 || fail "the whole list failed: $(cat "$tmp/out")"
[ "$(outputs)" = "four.txt one.txt tiny/meta.json two.txt " ] || fail "the whole list ran: $(outputs)"
[ "$(grep -c 'done: ' "$tmp/out")" = 4 ] || fail "not 4 jobs reported done: $(cat "$tmp/out")"
printf 'echo a > a.txt\nexit 3\necho c > c.txt\n' > "$LIST"
rm -rf "$WORK"
bash "$RUNJOBS" "$LIST" > "$tmp/out" 2>&1 && fail "a list with a failing line succeeded"
grep -q "line 2 of .* failed (exit 3)" "$tmp/out" || fail "the failing line is not named: $(cat "$tmp/out")"
[ -f "$WORK/a.txt" ] && [ -f "$WORK/c.txt" ] || fail "a failing line stopped the other lines"

[ $fails -eq 0 ] && echo "exp_runjobs: ok"
exit $((fails > 0))
