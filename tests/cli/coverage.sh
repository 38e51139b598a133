#!/bin/sh
# emu coverage: the class counts of a hand-made E4M3 file, each line
# chosen for what it exercises (so the expected counts follow by
# construction; emu verify first confirms the lines are right), a
# signalling NaN in binary16, and the errors.
# Usage: sh coverage.sh /path/to/emu
set -u
EMU=${1:?usage: coverage.sh /path/to/emu}
fail() { echo "FAIL coverage: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
SET="--op mul --format e4m3 --mode rne --saturate"

# line: A B RESULT FLAGS            what it is
cat > "$tmp/v" <<'END'
00 00 00 00
01 38 01 00
7e 38 7e 00
7f 38 7f 00
39 3c 3e 01
39 3b 3c 01
7e 40 7e 05
01 01 00 03
3a 3b 3e 01
END
# 0 * 0: zeros, exact          | 2^-9 * 1: subnormal, exact
# 448 * 1: max, exact          | NaN * 1: NaN
# 1.125 * 1.5 = 1.6875: a tie (halfway between 1.625 and 1.75)
# 1.125 * 1.375 = 1.546875: 3/8 ulp above 1.5, a near-tie
# 448 * 2: overflow, saturated | 2^-9 * 2^-9: underflow to zero
# 1.25 * 1.375 = 1.71875: 3/4 ulp above 1.625, plain inexact
# shellcheck disable=SC2086
"$EMU" verify $SET "$tmp/v" > "$tmp/out" 2>&1 || fail "the hand-made file is wrong: $(cat "$tmp/out")"
# shellcheck disable=SC2086
"$EMU" coverage $SET "$tmp/v" > "$tmp/out" 2>&1 || fail "exit $?: $(cat "$tmp/out")"

# row NAME COUNTS...: the line of that class has exactly these columns.
row() {
    name=$1
    shift
    got=$(awk -v n="$name" '{ k = $1; i = 2 } $1 == "other" { k = "other " $2; i = 3 }
          k == n { s = $i; for (j = i + 1; j <= NF && $j ~ /^[0-9]+$/; j++) s = s " " $j; print s; exit }' "$tmp/out")
    [ "$got" = "$*" ] || fail "$name: '$got', want '$*'
$(cat "$tmp/out")"
}
#        A B result
row zero 1 1 2
row subnormal 2 1 1
row normal 3 7 3
row max 2 0 2
row inf 0 0 0
row nan 1 0 1
row snan 0 0 0
row exact 3
row tie 1
row near-tie 1
row "other inexact" 2
row overflow 1
row underflow 1
row inexact 5
row infinite 0
row invalid 0
grep -qx "missed: B:max B:nan" "$tmp/out" || fail "missed line: $(grep missed "$tmp/out")"
grep -q "9 lines, mul, e4m3 -> e4m3, mode rne, saturate" "$tmp/out" || fail "title: $(head -n 1 "$tmp/out")"

# The header of emu gen gives the settings; a signalling NaN is its own
# class (binary16: 7D00 has the quiet bit clear).
"$EMU" gen --op add --format binary16 --mode rz > "$tmp/g" || fail "gen"
{ head -n 2 "$tmp/g"; echo "7D00 3C00 7E00 10"; } > "$tmp/s"
"$EMU" coverage "$tmp/s" > "$tmp/out" 2>&1 || fail "header file: $(cat "$tmp/out")"
row snan 1 0 0
row invalid 1

# What cannot happen is not "missed": a square root is never a tie and
# stays in range; a comparison raises no inexact.
"$EMU" gen --op sqrt --format binary16 --exhaustive | "$EMU" coverage - > "$tmp/out" 2>&1
grep -qx "missed: nothing" "$tmp/out" || fail "sqrt: $(grep missed "$tmp/out")"
"$EMU" gen --op lt --format e5m2 | "$EMU" coverage - > "$tmp/out" 2>&1
grep -qx "missed: nothing" "$tmp/out" || fail "lt: $(grep missed "$tmp/out")"

# Errors: a malformed line (named, exit 2), no vectors, no file.
printf '00 00 00 00\n0g 00 00 00\n' > "$tmp/bad"
# shellcheck disable=SC2086
"$EMU" coverage $SET "$tmp/bad" > "$tmp/out" 2>&1
[ $? -eq 2 ] || fail "malformed line: exit not 2"
grep -q "bad:2: malformed line" "$tmp/out" || fail "malformed line not named: $(cat "$tmp/out")"
# shellcheck disable=SC2086
printf '# nothing\n' | "$EMU" coverage $SET - > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "no test vectors" "$tmp/out" || fail "empty input: $(cat "$tmp/out")"
"$EMU" coverage "$tmp/none" > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "none" "$tmp/out" || fail "missing file: $(cat "$tmp/out")"
echo "coverage: class counts, missed classes and errors as constructed"
