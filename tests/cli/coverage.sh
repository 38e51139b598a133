#!/bin/sh
# emu coverage: the class counts of a hand-made E4M3 file and of a
# hand-made dot file, each line chosen for what it exercises (so the
# expected counts follow by construction; emu verify / emu dot verify
# first confirm the lines are right), a signalling NaN in binary16, the
# totals of a generated dot file, and the errors.
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
    got=$(awk -v n="$name" '{ k = $1; i = 2 } $1 == "other" || $1 == "lost" { k = $1 " " $2; i = 3 }
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

# A dot file (K = 2, e4m3 products summed in binary16, rounded to e4m3),
# each line chosen for what it exercises; emu dot verify confirms it.
# line: A0 B0 A1 B1 RESULT FLAGS
cat > "$tmp/d" <<'END'
#! emu-dot in=e4m3 out=e4m3 accum=sequential,acc=binary16 mode=rne k=2
00 00 00 00 00 00
38 38 38 38 40 00
38 38 18 38 38 01
38 38 18 3a 39 01
38 38 08 38 38 01
38 38 01 01 38 00
38 38 b8 38 00 00
7e 38 60 38 7f 05
7f 38 00 00 7f 00
01 3c 00 00 02 03
38 38 01 39 38 01
END
# 0*0 + 0*0: zeros, exact          | 1 + 1 = 2: exact
# 1 + 2^-4: a tie (rne: 1)         | 1 + 2^-4 * 1.25 = 1.078125: near-tie
# 1 + 2^-6: other inexact          | 1 + 2^-9 * 2^-9: the tiny product
#   is absorbed by binary16 (swamping), the sum exactly 1
# 1 - 1: cancellation to zero      | 448 + 32 = 480: overflow (e4m3: NaN)
# NaN * 1: NaN product and result  | 2^-9 * 1.5: a subnormal tie, underflow
# 1 + 2^-9 * 1.125: 2^-12 below binary16's ulp at 1 is lost (not
#   absorbed); 1 + 2^-9 then rounds to 1 in e4m3 (other inexact)
"$EMU" dot verify "$tmp/d" > "$tmp/out" 2>&1 || fail "the hand-made dot file is wrong: $(cat "$tmp/out")"
"$EMU" coverage "$tmp/d" > "$tmp/out" 2>&1 || fail "dot: exit $?: $(cat "$tmp/out")"
grep -q "11 lines, dot K=2, e4m3 -> e4m3, accum sequential,acc=binary16" "$tmp/out" || fail "dot title: $(head -n 1 "$tmp/out")"
#        A B result  (A: the 22 A_i, B: the 22 B_i)
row zero 4 4 2
row subnormal 3 1 1
row normal 13 17 6
row max 1 0 0
row nan 1 0 2
row tiny 1
row huge 0
row inf/nan 1
row cancellation 1
row swamping 1
row "lost bits" 1
row exact 4
row tie 2
row near-tie 1
row "other inexact" 2
row overflow 1
row underflow 1
row inexact 6
row underflow 1
row invalid 0
# products: 4 zero, 1 tiny, 16 normal, 1 inf/nan (the zero row above is
# the operands'; the products' zero row is the second "zero")
[ "$(awk '$1 == "zero" { n++ } n == 2 { print $2; exit }' "$tmp/out")" = 4 ] || fail "zero products: $(cat "$tmp/out")"
[ "$(awk '$1 == "normal" { n++ } n == 2 { print $2; exit }' "$tmp/out")" = 16 ] || fail "normal products: $(cat "$tmp/out")"
grep -qx "missed: B:max B:nan product:huge result:max" "$tmp/out" || fail "dot missed: $(grep missed "$tmp/out")"

# The exact model's value is hi + lo: 256 + 1 + 2^-48 spans more than a
# binary64, so only lo tells this near-tie (rounded up to 258) from the
# tie 256 + 1 (rounded to even, 256) in bfloat16.
cat > "$tmp/x" <<'END'
#! emu-dot in=binary16 out=bf16 accum=exact mode=rne k=3
4C00 4C00 3C00 3C00 0001 0001 4381 01
4C00 4C00 3C00 3C00 0000 0000 4380 01
END
"$EMU" dot verify "$tmp/x" > "$tmp/out" 2>&1 || fail "the hand-made exact dot file is wrong: $(cat "$tmp/out")"
"$EMU" coverage "$tmp/x" > "$tmp/out" 2>&1 || fail "exact dot: exit $?: $(cat "$tmp/out")"
row tie 1
row near-tie 1

# A generated dot file: every A_i, B_i and product counted once, every
# line once among the results (K = 8, 400 lines).
"$EMU" dot gen --in e5m2 --accum fused,k=4,w=14,acc=binary32 --out bf16 --k 8 --count 400 --seed 3 > "$tmp/g" || fail "dot gen"
"$EMU" coverage "$tmp/g" > "$tmp/out" 2>&1 || fail "dot gen file: $(cat "$tmp/out")"
awk '/^class/ { t = 1; next } /^products/ { t = 0; p = 1; next } /^accumulation/ { p = 0 }
     t { a += $2; b += $3; r += $4 } p { q += $2 }
     END { if (a != 3200 || b != 3200 || r != 400 || q != 3200) { print "A " a " B " b " result " r " products " q; exit 1 } }' "$tmp/out" \
    || fail "dot totals: $(cat "$tmp/out")"
# Each line has one rounding class, or a NaN or inf result (no sum of 8
# e5m2 products comes near bfloat16's overflow).
awk '/^rounding/ { on = 1; next } /^flags/ { on = 0 }
     on && $1 == "other" { n += $3 }
     on && ($1 == "exact" || $1 == "tie" || $1 == "near-tie" || $1 == "overflow") { n += $2 }
     !on && ($1 == "nan" || $1 == "inf") { n += $4 }
     END { if (n != 400) { print n; exit 1 } }' "$tmp/out" \
    || fail "dot rounding classes + NaN/inf results are not the 400 lines: $(cat "$tmp/out")"

# Dot errors: a malformed line (file:line), settings mixed with options,
# a block-scaled file (not yet covered).
{ head -n 3 "$tmp/d"; echo "38 38 38 40 00"; } > "$tmp/dbad"
"$EMU" coverage "$tmp/dbad" > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "dbad:4: malformed line: 5 fields, expected 6" "$tmp/out" || fail "malformed dot line: $(cat "$tmp/out")"
"$EMU" coverage --op add "$tmp/d" > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "emu-dot' file takes its settings from its header" "$tmp/out" || fail "dot with --op: $(cat "$tmp/out")"
"$EMU" dot gen --scaled mxfp8 --count 2 > "$tmp/sc" || fail "dot gen --scaled"
"$EMU" coverage "$tmp/sc" > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "sc:2: a '#! emu-dot-scaled' file.*not yet covered" "$tmp/out" || fail "scaled file: $(cat "$tmp/out")"

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
