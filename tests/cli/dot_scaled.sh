#!/bin/sh
# emu dot gen|verify --scaled: block-scaled dot-product vectors (MX,
# NVFP4).  gen's files verify under every preset and several accumulator
# models; hand-made lines whose results follow by hand (sums of ones,
# scale 2, a NaN scale, NVFP4's tensor scales with an inexact product);
# corrupted and malformed lines are named.
# Usage: sh dot_scaled.sh /path/to/emu
set -u
EMU=${1:?usage: dot_scaled.sh /path/to/emu}
fail() { echo "FAIL dot_scaled: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

for f in mxfp8 mxfp8-e5m2 mxfp6-e2m3 mxfp6-e3m2 mxfp4 nvfp4; do
    for a in exact fused,k=32,w=25,acc=binary32 sequential,acc=binary16; do
        "$EMU" dot gen --scaled $f --accum $a --k 40 --count 300 --seed 7 \
            -o "$tmp/g.tv" 2> /dev/null || fail "gen $f $a exited $?"
        # verify finds the settings in the header alone
        "$EMU" dot verify "$tmp/g.tv" > "$tmp/out" 2>&1 ||
            fail "$f $a does not verify: $(cat "$tmp/out")"
        grep -q "300 lines checked, 0 mismatches" "$tmp/out" || fail "$f $a: $(cat "$tmp/out")"
    done
done

# K = 32 ones times ones: 32 (42000000); scale 2^1 on A: 64 (42800000);
# a NaN scale (E8M0 FF): NaN.
ones=$(printf '38 %.0s' $(seq 32))
{
    echo "$ones 7F $ones 7F 42000000 00"
    echo "$ones 80 $ones 7F 42800000 00"
    echo "$ones FF $ones 7F 7FC00000 00"
} > "$tmp/mx"
"$EMU" dot verify --scaled mxfp8 "$tmp/mx" > "$tmp/out" 2>&1 ||
    fail "hand-made MXFP8 lines: $(cat "$tmp/out")"
# NVFP4, K = 16: ones (E2M1 2) with E4M3 scales 1 (38); tensor scales 1
# and 2 give 32; 1.5 and 1.3333334 (3FAAAAAB = 11184811 * 2^-23) give
# 16 * 1.5 * 11184811 * 2^-23 = 268435464 * 2^-23, 8 * 2^-23 above 32:
# below half of binary32's ulp there (2^-18), so 32, inexact.
n1=$(printf '2 %.0s' $(seq 16))
{
    echo "$n1 38 $n1 38 3F800000 40000000 42000000 00"
    echo "$n1 38 $n1 38 3FC00000 3FAAAAAB 42000000 01"
} > "$tmp/nv"
"$EMU" dot verify --scaled nvfp4 "$tmp/nv" > "$tmp/out" 2>&1 ||
    fail "hand-made NVFP4 lines: $(cat "$tmp/out")"

# The tensor scales must be applied without error: binary16 elements,
# S = 1*1 + 2^-12 * 2^-11 = 1 + 2^-23, g = (1 + 2^-23)(1 - 2^-24), so
# S g = 1 + 2^-23 + 2^-24 - 2^-70: 2^-70 below the midpoint of 3F800001
# and 3F800002, which binary64 alone would round onto (a tie, to even).
echo "3C00 0C00 3C00 1000 3F800001 3F7FFFFF 3F800001 01" > "$tmp/g"
"$EMU" dot verify --scaled elem=binary16,scale=none,tensor=yes --k 2 \
    "$tmp/g" > "$tmp/out" 2>&1 || fail "exact tensor scaling: $(cat "$tmp/out")"

# A wrong result is named by its line; a wrong field count, a code too
# wide and a value beyond binary32 (448 * 2^127) are malformed.
sed '2s/42800000/42800001/' "$tmp/mx" > "$tmp/bad"
"$EMU" dot verify --scaled mxfp8 "$tmp/bad" > "$tmp/out" 2>&1
[ $? -eq 1 ] && grep -q "bad:2: expected 42800001" "$tmp/out" || fail "mismatch: $(cat "$tmp/out")"
{
    echo "$ones 7F $ones 7F 42000000"
    echo "$ones 17F $ones 7F 42000000 00"
    echo "7E $(printf '38 %.0s' $(seq 31)) FE $ones 7F 42000000 00"
} > "$tmp/bad"
"$EMU" dot verify --scaled mxfp8 "$tmp/bad" > "$tmp/out" 2>&1
[ $? -eq 2 ] || fail "malformed lines: exit not 2: $(cat "$tmp/out")"
grep -q "bad:1: malformed line: 67 fields, expected 68" "$tmp/out" || fail "field count: $(cat "$tmp/out")"
grep -q "bad:2: malformed line: field 33 (17F) is wider than 8 bits" "$tmp/out" || fail "wide code: $(cat "$tmp/out")"
grep -q "bad:3: malformed line: dot_scaled: a\[0\] times its scale (0x1.cp+135) is not a binary32" "$tmp/out" || fail "range: $(cat "$tmp/out")"
"$EMU" dot gen --scaled mxint8 > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "integer" "$tmp/out" || fail "mxint8 not refused: $(cat "$tmp/out")"
"$EMU" dot gen --scaled mxfp9 > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "mxfp9" "$tmp/out" || fail "bad spec not named: $(cat "$tmp/out")"
echo "dot_scaled: MX and NVFP4 vectors generate, verify, and name bad lines"
