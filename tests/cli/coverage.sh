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

# Dot errors: a malformed line (file:line), settings mixed with options.
{ head -n 3 "$tmp/d"; echo "38 38 38 40 00"; } > "$tmp/dbad"
"$EMU" coverage "$tmp/dbad" > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "dbad:4: malformed line: 5 fields, expected 6" "$tmp/out" || fail "malformed dot line: $(cat "$tmp/out")"
"$EMU" coverage --op add "$tmp/d" > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "emu-dot' file takes its settings from its header" "$tmp/out" || fail "dot with --op: $(cat "$tmp/out")"

# A hand-made block-scaled file: MXFP8 (E4M3 elements, E8M0 scales, one
# block per operand as K = 2), exact sum, binary32 out.  E8M0 7F is 1,
# 00 the min 2^-127, FE the max 2^127, F6 2^119, FF NaN.
# line: A0 A1 SA B0 B1 SB RESULT FLAGS
cat > "$tmp/s" <<'END'
#! emu-dot-scaled scaled=elem=e4m3,scale=e8m0,block=32,rule=floor,scale_mode=rne,tensor=no,pad=yes accum=exact out=binary32 mode=rne k=2
38 38 7F 38 38 7F 40000000 00
00 7E 7F 00 38 7F 43E00000 00
01 38 00 38 00 FE 3B000000 00
7F 38 7F 38 38 7F 7FC00000 00
38 38 FF 38 38 7F 7FC00000 00
78 18 7F 78 18 7F 47800000 01
78 18 7F 78 14 7F 47800000 01
78 01 7F 78 01 7F 47800000 01
78 00 F6 78 00 F6 7F800000 05
01 00 00 01 00 00 00000000 03
END
# 1 1 + 1 1 = 2: normals, exact    | 0 0 + 448 1 = 448: zeros, A max, exact
# 2^-9 2^-127 . 1 2^127 = 2^-9 (+ 1 2^-127 . 0): A subnormal, SA min,
#   SB max, exact                  | NaN element: a NaN product, NaN result
# NaN scale SA: both products NaN  | 256^2 + (2^-4)^2 = 2^16 + 2^-8: a tie
# 256^2 + 2^-4 1.5 2^-5 = 2^16 + 3/8 ulp: a near-tie
# 256^2 + (2^-9)^2: other inexact  | (256 2^119)^2 = 2^254: a huge product,
#   overflow to inf                | (2^-9 2^-127)^2 = 2^-272: a tiny
#   product, underflow to zero (other inexact)
"$EMU" dot verify "$tmp/s" > "$tmp/out" 2>&1 || fail "the hand-made scaled file is wrong: $(cat "$tmp/out")"
"$EMU" coverage "$tmp/s" > "$tmp/out" 2>&1 || fail "scaled: exit $?: $(cat "$tmp/out")"
#        A B result
row zero 3 4 1
row subnormal 3 2 0
row normal 12 14 6
row max 1 0 0
row inf 0 0 1
row nan 1 0 2
# srow SECTION NAME COUNT: the count of NAME under that section's title.
srow() {
    got=$(awk -v s="$1" -v n="$2" '$0 == s { on = 1; next } /^[^ ]/ { on = 0 }
          on && $1 == n { print ($1 == "other" ? $3 : $2); exit }' "$tmp/out")
    [ "$got" = "$3" ] || fail "$1 $2: '$got', want '$3'
$(cat "$tmp/out")"
}
srow "scales SA" min 2
srow "scales SA" normal 7
srow "scales SA" max 0
srow "scales SA" nan 1
srow "scales SB" min 1
srow "scales SB" normal 8
srow "scales SB" max 1
srow "scales SB" nan 0
srow products zero 4
srow products tiny 1
srow products normal 11
srow products huge 1
srow products inf/nan 3
srow rounding exact 3
srow rounding tie 1
srow rounding near-tie 1
srow rounding other 2
srow rounding overflow 1
srow rounding underflow 1
srow flags inexact 5
srow flags underflow 1
srow flags overflow 1
srow flags invalid 0
# E8M0 has no zero or subnormal, binary32 out no signalling NaN result.
grep -qx "missed: B:max B:nan SA:max SB:nan result:subnormal result:max" "$tmp/out" \
    || fail "scaled missed: $(cat "$tmp/out")"

"$EMU" dot gen --scaled nvfp4 --count 1 > "$tmp/sg0" || fail "dot gen --scaled nvfp4"
# NVFP4 (E2M1, one E4M3 scale per 16, binary32 tensor scales): 1 1 is
# exact, but the tensor scales (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 put it
# halfway between two binary32 values: the rounding sees the scaled value.
{ sed -n 2p "$tmp/sg0"; echo "2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 38 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 38 3F800800 3F800800 3F801000 01"; } > "$tmp/sn"
"$EMU" dot verify "$tmp/sn" > "$tmp/out" 2>&1 || fail "the hand-made NVFP4 line is wrong: $(cat "$tmp/out")"
"$EMU" coverage "$tmp/sn" > "$tmp/out" 2>&1 || fail "nvfp4: exit $?: $(cat "$tmp/out")"
srow rounding tie 1
srow rounding exact 0

# A generated NVFP4 file (K = 16, one E4M3 scale per operand, tensor
# scales): every code and product counted once, every line once.
"$EMU" dot gen --scaled nvfp4 --count 300 --seed 5 > "$tmp/sg" || fail "dot gen --scaled"
"$EMU" coverage "$tmp/sg" > "$tmp/out" 2>&1 || fail "scaled gen file: $(cat "$tmp/out")"
awk '/^class/ { t = 1; next } /^[^ ]/ && !/^class/ && t == 1 && NF == 4 && $1 !~ /^scales/ { a += $2; b += $3; r += $4; next }
     /^scales SA/ { t = 2; next } /^scales SB/ { t = 3; next } /^products/ { t = 4; next } /^[^ ]/ { t = 0 }
     t == 2 { sa += $2 } t == 3 { sb += $2 } t == 4 { q += $2 }
     END { if (a != 4800 || b != 4800 || r != 300 || sa != 300 || sb != 300 || q != 4800) {
             print "A " a " B " b " result " r " SA " sa " SB " sb " products " q; exit 1 } }' "$tmp/out" \
    || fail "scaled totals: $(cat "$tmp/out")"
# Each line has one rounding class or a NaN or inf result (the tensor
# scales keep these sums far from binary32's overflow).
awk '/^rounding/ { on = 1; next } /^flags/ { on = 0 }
     on && $1 == "other" { n += $3 }
     on && ($1 == "exact" || $1 == "tie" || $1 == "near-tie") { n += $2 }
     !on && ($1 == "nan" || $1 == "inf") && NF == 4 { n += $4 }
     END { if (n != 300) { print n; exit 1 } }' "$tmp/out" \
    || fail "scaled rounding classes + NaN/inf results are not the 300 lines: $(cat "$tmp/out")"

# A malformed scaled line is named with its file and line.
{ head -n 3 "$tmp/s"; echo "38 38 7F 38 38 7F 40000000"; } > "$tmp/sbad"
"$EMU" coverage "$tmp/sbad" > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "sbad:4: malformed line: 7 fields, expected 8" "$tmp/out" || fail "malformed scaled line: $(cat "$tmp/out")"

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
