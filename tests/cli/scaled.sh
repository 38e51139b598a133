#!/bin/sh
# emu scaled: block-scaled formats from the command line.  Hand-computed
# blocks of MXFP4, MXINT8, MXFP8 and NVFP4 (the arithmetic is in the
# comments, from the OCP MX and NVFP4 rules, not from the library), their
# packed bytes, quant -> pack -> unpack round trips for every preset, the
# per-block statistics against an awk recomputation, CSV that pandas reads
# with no options (when pandas is installed), every input error with its
# exit status and message, and --pack leaving no partial file on error.
# Usage: sh scaled.sh /path/to/emu
set -u
EMU=${1:?usage: scaled.sh /path/to/emu}
fail() { echo "FAIL scaled: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# field CSV ROW COLUMN: one cell of a CSV file (row 1 = first data row),
# the column by header name, so that the test does not depend on order.
field() {
    awk -F, -v row="$2" -v col="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
        NR == row + 1 { print (c ? $c : "NO-COLUMN-" col); exit }' "$1"
}
# column CSV NAME: a whole column, space-separated.
column() {
    awk -F, -v col="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
        { printf "%s%s", (NR > 2 ? " " : ""), (c ? $c : "NO-COLUMN") }
        END { print "" }' "$1"
}
expect_col() { # CSV NAME WANT
    got=$(column "$1" "$2")
    [ "$got" = "$3" ] || fail "$1: column $2 is '$got', want '$3'"
}
expect_field() { # CSV ROW NAME WANT
    got=$(field "$1" "$2" "$3")
    [ "$got" = "$4" ] || fail "$1: row $2 $3 is '$got', want '$4'"
}

# ---- MXFP4 (E2M1 elements, E8M0 scales, blocks of 32) ------------------
# E2M1 values: 0 0.5 1 1.5 2 3 4 6; its top binade is [4, 6], so
# emax_elem = 2, and the OCP rule gives scale = 2^(floor(log2 amax) - 2).
# amax 1 -> 2^-2 = 0.25, E8M0 code 127 - 2 = 125 = 0x7d.  x / 0.25:
#   1 -> 4          -> 4   = 1       code 0110 = 0x6
#   0.3 -> 1.2      -> 1   = 0.25    0010 = 0x2 (1.2 is nearer 1 than 1.5)
#  -0.7 -> -2.8     -> -3  = -0.75   1101 = 0xd
#   0.1 -> 0.4      -> 0.5 = 0.125   0001 = 0x1
#   0.05 -> 0.2     -> 0   = 0       0000: flushed (0.2 < 0.25)
#   0.9 -> 3.6      -> 4   = 1       0x6
#   0.625 -> 2.5    -> tie of 2 (1.0b * 2^1, even) and 3 (1.1b * 2^1):
#                      rne 2 = 0.5 (0x4), rna 3 = 0.75 (0x5)
"$EMU" scaled quant mxfp4 --csv 1 0.3 -0.7 0.1 0.05 0.9 0.625 \
    > "$tmp/fp4.csv" || fail "quant mxfp4 exited $?"
expect_col "$tmp/fp4.csv" input "1 0.3 -0.7 0.1 0.05 0.9 0.625"
expect_col "$tmp/fp4.csv" elem "4 1 -3 0.5 0 4 2"
expect_col "$tmp/fp4.csv" elem_bits "0x6 0x2 0xd 0x1 0x0 0x6 0x4"
expect_col "$tmp/fp4.csv" scale "0.25 0.25 0.25 0.25 0.25 0.25 0.25"
expect_col "$tmp/fp4.csv" value "1 0.25 -0.75 0.125 0 1 0.5"
expect_col "$tmp/fp4.csv" block "0 0 0 0 0 0 0"
"$EMU" scaled quant mxfp4 --csv --mode rna 0.625 1 > "$tmp/rna.csv" ||
    fail "quant --mode rna"
expect_col "$tmp/rna.csv" value "0.75 1"
expect_col "$tmp/rna.csv" elem_bits "0x5 0x6"

# Clipping: amax 1.75 still has floor(log2) = 0, scale 0.25, and
# 1.75 / 0.25 = 7 lies above max_elem = 6: the element clips to 6 (1.5).
# Per block: amax 1.75, scale 0x7d, 1 clipped, 1 flushed (0.05).
"$EMU" scaled quant mxfp4 --csv --blocks 1 0.3 -0.7 0.1 0.05 0.9 0.625 1.75 \
    > "$tmp/fp4b.csv" || fail "quant --blocks"
expect_field "$tmp/fp4b.csv" 1 amax 1.75
expect_field "$tmp/fp4b.csv" 1 scale 0.25
expect_field "$tmp/fp4b.csv" 1 scale_bits 0x7d
expect_field "$tmp/fp4b.csv" 1 clipped 1
expect_field "$tmp/fp4b.csv" 1 flushed 1
expect_field "$tmp/fp4b.csv" 1 n 8
"$EMU" scaled quant mxfp4 --csv 1 0.3 -0.7 0.1 0.05 0.9 0.625 1.75 \
    > "$tmp/fp4e.csv" || fail "quant 1.75"
expect_field "$tmp/fp4e.csv" 8 value 1.5
# rel_l2 = sqrt(sum (v - x)^2 / sum x^2), recomputed here from the printed
# inputs (decimal, so good to ~1e-7) and values.
want=$(awk -F, 'NR > 1 { d = $NF - $3; e += d * d; r += $3 * $3 }
                END { printf "%.9g", sqrt(e / r) }' "$tmp/fp4e.csv")
got=$(field "$tmp/fp4b.csv" 1 rel_l2)
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d;
    exit !(d <= 1e-5 * b) }' || fail "rel_l2 $got, recomputed $want"
# The text form carries the same numbers, and a total line.
"$EMU" scaled quant mxfp4 1 0.3 -0.7 0.1 0.05 0.9 0.625 1.75 > "$tmp/fp4.txt" ||
    fail "quant (text)"
grep -q '^# total: 8 elements, 1 block .* 1 clipped, 1 flushed' "$tmp/fp4.txt" ||
    fail "no total line: $(cat "$tmp/fp4.txt")"
grep -Eq '^ +7 +0 +1\.75 +6 +0x7 +0\.25 +1\.5$' "$tmp/fp4.txt" ||
    fail "text row 7: $(cat "$tmp/fp4.txt")"

# Packed bytes of 1 0.3 -0.7 0.1: codes 6 2 d 1, two per byte with
# element 0 in the low nibble (0x26, 0x1d), then the scale byte 0x7d.
"$EMU" scaled quant mxfp4 --pack "$tmp/fp4.bin" 1 0.3 -0.7 0.1 > /dev/null ||
    fail "--pack"
bytes=$(od -An -tx1 "$tmp/fp4.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$bytes" = "26 1d 7d" ] || fail "mxfp4 packed '$bytes', want '26 1d 7d'"
bytes=$("$EMU" scaled quant mxfp4 --pack - 1 0.3 -0.7 0.1 | od -An -tx1 |
        tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$bytes" = "26 1d 7d" ] || fail "--pack - gave '$bytes'"
"$EMU" scaled unpack mxfp4 --shape 4 --csv "$tmp/fp4.bin" > "$tmp/un.csv" ||
    fail "unpack mxfp4"
expect_col "$tmp/un.csv" value "1 0.25 -0.75 0.125"
expect_col "$tmp/un.csv" elem_bits "0x6 0x2 0xd 0x1"

# ---- MXINT8: elements k/64, |k| <= 127 (emax_elem = 0) ---------------
# amax 1 -> scale 2^0 = 1 (0x7f).  0.3 * 64 = 19.2 -> 19: 0.296875, byte
# 0x13; -0.3 -> -19, two's complement 0xed; 1 = 64/64 -> 0x40; -1 -> 0xc0.
"$EMU" scaled quant mxint8 --csv --pack "$tmp/i8.bin" 0.3 -0.3 1 -1 \
    > "$tmp/i8.csv" || fail "quant mxint8"
expect_col "$tmp/i8.csv" value "0.296875 -0.296875 1 -1"
expect_col "$tmp/i8.csv" elem_bits "0x13 0xed 0x40 0xc0"
bytes=$(od -An -tx1 "$tmp/i8.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$bytes" = "13 ed 40 c0 7f" ] || fail "mxint8 packed '$bytes'"
# -128 (0x80) is not an MXINT8 element here: unpack refuses it.
printf '\200\177' > "$tmp/bad8.bin"
"$EMU" scaled unpack mxint8 --shape 1 "$tmp/bad8.bin" > /dev/null \
    2> "$tmp/err"
[ $? -eq 2 ] || fail "unpack of a -128 element should exit 2"
grep -q -- "-128" "$tmp/err" || fail "no -128 in: $(cat "$tmp/err")"

# ---- MXFP6 E2M3 packing: four 6-bit codes in three bytes ------------------
# amax 4 -> 2^(2 - 2) = 1 (E2M3's top binade is [4, 7.5]: emax_elem 2).
# Codes (bias 1): 4 = 1.000b * 2^2 -> 0 11 000 = 0x18; 1 -> 0 01 000 =
# 0x08; 0.5 is subnormal 0.100b * 2^0 -> 0 00 100 = 0x04; -1 -> 0x28.  As
# one little-endian bit stream: 0x18 | 0x08 << 6 | 0x04 << 12 | 0x28 << 18
# = 0xa04218 -> bytes 18 42 a0, then the scale 2^0 = 0x7f.
bytes=$("$EMU" scaled quant mxfp6-e2m3 --pack - 4 1 0.5 -1 | od -An -tx1 |
        tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$bytes" = "18 42 a0 7f" ] || fail "mxfp6-e2m3 packed '$bytes', want '18 42 a0 7f'"

# ---- MXFP8 (E4M3, emax_elem 8) on a 2x3 matrix -------------------------
# Along the last axis (default): row 1 2 3 has amax 3 -> 2^(1-8) = 2^-7;
# row 4 5 6 has amax 6 -> 2^(2-8) = 2^-6.  Elements x / s are integers
# (128 256 384, 256 320 384), all exact in E4M3; 128 = 2^7 is exponent
# field 7 + 7 = 14: code 0 1110 000 = 0x70.  Along axis 0 the blocks are
# the columns (amax 4, 5, 6: all 2^-6), and element (r, c) is in block c.
printf '1 2 3\n4 5 6\n' | "$EMU" scaled quant mxfp8 --shape 2x3 --csv - \
    > "$tmp/m.csv" || fail "quant mxfp8 2x3"
expect_col "$tmp/m.csv" block "0 0 0 1 1 1"
expect_col "$tmp/m.csv" scale "0.0078125 0.0078125 0.0078125 0.015625 0.015625 0.015625"
expect_col "$tmp/m.csv" elem "128 256 384 256 320 384"
expect_field "$tmp/m.csv" 1 elem_bits 0x70
expect_col "$tmp/m.csv" value "1 2 3 4 5 6"
expect_col "$tmp/m.csv" i1 "0 1 2 0 1 2"
printf '1 2 3\n4 5 6\n' | "$EMU" scaled quant mxfp8 --shape 2x3 --axis 0 \
    --csv - > "$tmp/m0.csv" || fail "quant mxfp8 --axis 0"
expect_col "$tmp/m0.csv" block "0 1 2 0 1 2"
expect_col "$tmp/m0.csv" scale "0.015625 0.015625 0.015625 0.015625 0.015625 0.015625"

# ---- NVFP4 (E2M1, E4M3 scales = RNE(amax / (6 g)), blocks of 16) -----
# With g = 1: block 0 (3 1 0.4 and 13 zeros): s = 3/6 = 0.5 exactly
# (E4M3 0 0110 000 = 0x30); 3/0.5 = 6, 1/0.5 = 2, 0.4/0.5 = 0.8 -> 1 (0.5).
# Block 1 (5 1 2): 5/6 = 0.8333 lies between the E4M3 neighbours 0.8125
# (1.101b * 2^-1, code 0x35) and 0.875, nearer 0.8125; then 5/0.8125 =
# 6.15 clips to 6 (4.875), 1/0.8125 = 1.23 -> 1, 2/0.8125 = 2.46 -> 2.
# Packed: 19 elements -> 10 bytes, 2 scale bytes, g = 1.0f -> 00 00 80 3f.
set -- 3 1 0.4 0 0 0 0 0 0 0 0 0 0 0 0 0 5 1 2
"$EMU" scaled quant nvfp4 --tensor-scale 1 --csv --pack "$tmp/nv.bin" "$@" \
    > "$tmp/nv.csv" || fail "quant nvfp4"
expect_col "$tmp/nv.csv" value "3 1 0.5 0 0 0 0 0 0 0 0 0 0 0 0 0 4.875 0.8125 1.625"
expect_field "$tmp/nv.csv" 1 scale 0.5
expect_field "$tmp/nv.csv" 17 scale 0.8125
expect_field "$tmp/nv.csv" 1 tensor_scale 1
"$EMU" scaled quant nvfp4 --tensor-scale 1 --csv --blocks "$@" \
    > "$tmp/nvb.csv" || fail "quant nvfp4 --blocks"
expect_col "$tmp/nvb.csv" scale_bits "0x30 0x35"
expect_col "$tmp/nvb.csv" clipped "0 1"
expect_col "$tmp/nvb.csv" n "16 3"
size=$(wc -c < "$tmp/nv.bin" | tr -d ' ')
[ "$size" -eq 16 ] || fail "nvfp4 packed $size bytes, want 16"
tail=$(od -An -tx1 -j 10 "$tmp/nv.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$tail" = "30 35 00 00 80 3f" ] || fail "nvfp4 scales and g: '$tail'"

# ---- round trips: quant -> pack -> unpack, every preset -----------------
# 4 x 40 values over several binades, blocks of 32 (16) leave partial
# blocks; along both axes.  unpack must give back index, block, element,
# code, scale and value exactly.
awk 'BEGIN { for (i = 0; i < 160; i++)
    printf "%.6g%s", sin(i * 1.7) * exp((i % 13) - 6), (i % 10 == 9) ? "\n" : " " }' \
    > "$tmp/data.txt"
# (MXINT8 included: two's complement has no -0, and quantization gives +0,
# so its round trip is exact too.)
for spec in mxfp8 mxfp8-e5m2 mxfp6-e2m3 mxfp6-e3m2 mxfp4 mxint8 nvfp4 \
            'mxfp8,block=16x16' 'elem=e4m3,scale=none,tensor=yes' \
            'elem=e3m2,scale=e4m3,block=8,rule=amax,scale_mode=ru'; do
    for axis in -1 0; do
        "$EMU" scaled quant "$spec" --shape 4x40 --axis "$axis" --csv \
            --pack "$tmp/rt.bin" - < "$tmp/data.txt" > "$tmp/q.csv" ||
            fail "quant $spec --axis $axis"
        "$EMU" scaled unpack "$spec" --shape 4x40 --axis "$axis" --csv \
            "$tmp/rt.bin" > "$tmp/u.csv" || fail "unpack $spec --axis $axis"
        # quant's columns less the input, which unpack cannot know.
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "input") c = i }
                 { out = ""; for (i = 1; i <= NF; i++) if (i != c)
                       out = out (out == "" ? "" : ",") $i; print out }' \
            "$tmp/q.csv" > "$tmp/q2.csv"
        cmp -s "$tmp/q2.csv" "$tmp/u.csv" ||
            fail "$spec --axis $axis: unpack differs from quant: $(diff "$tmp/q2.csv" "$tmp/u.csv" | head -5)"
        rows=$(($(wc -l < "$tmp/u.csv") - 1))
        [ "$rows" -eq 160 ] || fail "$spec: $rows rows"
    done
done
# The per-block table of unpack has the scales quant chose.
"$EMU" scaled quant mxfp4 --shape 4x40 --blocks --csv - < "$tmp/data.txt" |
    cut -d, -f1,2,4,5 > "$tmp/qb.csv"
"$EMU" scaled quant mxfp4 --shape 4x40 --pack "$tmp/rt.bin" - \
    < "$tmp/data.txt" > /dev/null
"$EMU" scaled unpack mxfp4 --shape 4x40 --blocks --csv "$tmp/rt.bin" \
    > "$tmp/ub.csv" || fail "unpack --blocks"
cmp -s "$tmp/qb.csv" "$tmp/ub.csv" || fail "block tables differ"

# Stdin: several values a line, commas, comments, blank lines.
printf '# header\n1, 0.3\n\n-0.7 0.1 # tail\n' |
    "$EMU" scaled quant mxfp4 --csv - > "$tmp/s.csv" || fail "stdin"
expect_col "$tmp/s.csv" value "1 0.25 -0.75 0.125"

# Stochastic rounding: the same seed, the same elements.
a=$("$EMU" scaled quant mxfp4 --mode sr --seed 5 --csv - < "$tmp/data.txt")
b=$("$EMU" scaled quant mxfp4 --mode sr --seed 5 --csv - < "$tmp/data.txt")
c=$("$EMU" scaled quant mxfp4 --mode sr --seed 6 --csv - < "$tmp/data.txt")
[ "$a" = "$b" ] || fail "sr with one seed differs"
[ "$a" != "$c" ] || fail "sr with two seeds agrees on 160 elements"

# A NaN makes its block's E8M0 scale NaN (0xff): the whole block is NaN.
"$EMU" scaled quant mxfp4 --csv --blocks 1 nan 2 > "$tmp/nan.csv" ||
    fail "quant with a NaN"
expect_field "$tmp/nan.csv" 1 scale_bits 0xff
expect_field "$tmp/nan.csv" 1 scale nan

# ---- formats ------------------------------------------------------------
"$EMU" scaled formats --csv > "$tmp/f.csv" || fail "formats --csv"
for p in mxfp8 mxfp8-e5m2 mxfp6-e2m3 mxfp6-e3m2 mxfp4 mxint8 nvfp4; do
    grep -q "^$p," "$tmp/f.csv" || fail "formats lacks $p"
done
# Bits per element: element + 8/32 for MX, 4 + 8/16 for NVFP4 (the
# tensor scale is per tensor, not per element); max: 6 * 448 for NVFP4
# with g = 1, 6 * 2^127 for MXFP4.
row=$(grep '^nvfp4,' "$tmp/f.csv")
case $row in nvfp4,e2m1,e4m3,16,amax/rne,binary32,4.5,2688,*) ;;
    *) fail "nvfp4 row: $row" ;; esac
row=$(grep '^mxfp4,' "$tmp/f.csv")
max=$(echo "$row" | cut -d, -f8)
awk -v m="$max" 'BEGIN { w = 6; for (i = 0; i < 127; i++) w *= 2;
    exit !(m == w) }' || fail "mxfp4 max $max, want 6 * 2^127"
case $row in mxfp4,e2m1,e8m0,32,floor,none,4.25,*) ;;
    *) fail "mxfp4 row: $row" ;; esac
"$EMU" scaled formats 'mxfp8,block=16x16' > "$tmp/f.txt" ||
    fail "formats SPEC"
grep -q '16x16' "$tmp/f.txt" || fail "formats SPEC: $(cat "$tmp/f.txt")"
"$EMU" scaled --help > /dev/null || fail "--help exited $?"

# ---- CSV that pandas reads with no options -------------------------------
PY=
for py in python3 /usr/bin/python3; do
    if "$py" -c 'import pandas' 2> /dev/null; then PY=$py; break; fi
done
if [ -n "$PY" ]; then
    "$EMU" scaled quant nvfp4 --csv 1 -2 inf 0.5 > "$tmp/p1.csv"
    "$PY" - "$tmp" <<'EOF' || fail "pandas could not read the CSV"
import sys, math
import pandas as pd
d = sys.argv[1]
q = pd.read_csv(d + "/fp4.csv")
assert list(q.columns) == ["index", "block", "input", "elem", "elem_bits",
                           "scale", "value"], list(q.columns)
assert list(q["value"]) == [1, 0.25, -0.75, 0.125, 0, 1, 0.5], list(q["value"])
assert q["input"].dtype.kind == "f" and q["scale"].dtype.kind == "f"
b = pd.read_csv(d + "/fp4b.csv")
assert b.loc[0, "clipped"] == 1 and b.loc[0, "scale_bits"] == "0x7d"
n = pd.read_csv(d + "/nan.csv")
assert math.isnan(n.loc[0, "scale"])
p = pd.read_csv(d + "/p1.csv")        # inf input, NaN block
assert math.isinf(p.loc[2, "input"]) and p["value"].isna().all()
f = pd.read_csv(d + "/f.csv")
assert len(f) == 7 and f.loc[f["name"] == "nvfp4", "max"].item() == 2688
u = pd.read_csv(d + "/u.csv")
assert len(u) == 160
EOF
else
    echo "scaled: pandas not installed, CSV read check skipped" >&2
fi

# ---- errors: exit 2, a message naming the culprit -------------------------
refuse() { # PATTERN ARGS... (standard input from $stdin_text, if set)
    pat=$1
    shift
    printf '%s' "${stdin_text:-}" | "$EMU" scaled "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "emu scaled $*: exit $rc, want 2"
    grep -q -- "$pat" "$tmp/err" ||
        fail "emu scaled $*: message lacks '$pat': $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] || fail "emu scaled $*: printed output on error"
}
stdin_text=
refuse "argument 2: value 'abc' is not a number" quant mxfp4 1 abc 2
refuse "value '1e39' is beyond binary32's range" quant mxfp4 1e39
stdin_text=$(printf '1 2\n# fine\n3 x4 5\n')
refuse "line 3: value 'x4' is not a number" quant mxfp4 -
stdin_text='1 2 3 4 5'
refuse "--shape 2x3 holds 6 values, but 5 were given" quant mxfp4 --shape 2x3 -
stdin_text=
refuse "--shape: '2xx3'" quant mxfp4 --shape 2xx3 1 2 3 4 5 6
refuse "--shape: '0'" quant mxfp4 --shape 0 1
refuse "--axis 2 is out of range for the 2-dimensional shape 2x2 (-2..1)" \
    quant mxfp4 --shape 2x2 --axis 2 1 2 3 4
refuse "--axis -3 is out of range" quant mxfp4 --shape 2x2 --axis -3 1 2 3 4
refuse "--axis: 'x'" quant mxfp4 --axis x 1
refuse "unknown preset 'mxfp5'" quant mxfp5 1
refuse "key 'block'" quant mxfp4,block=0 1
refuse "unknown format 'e9m9'" quant elem=e9m9 1
refuse "a 16x16 tile needs a matrix" quant 'mxfp8,block=16x16' 1 2
refuse "pad=no" quant 'mxfp4,block=4,pad=no' 1 2 3
refuse "'rnx' is not a rounding mode" quant mxfp4 --mode rnx 1
refuse "mxfp4 has no tensor scale" quant mxfp4 --tensor-scale 2 1
refuse "'-1' is not a positive finite binary32" quant nvfp4 --tensor-scale -1 1
refuse "no values" quant mxfp4
stdin_text='# nothing'
refuse "no values to quantize on standard input" quant mxfp4 -
stdin_text=
refuse "e3m2 has no NaN" quant elem=e2m1,scale=e3m2 1 inf
refuse "unpack needs --shape" unpack mxfp4 "$tmp/fp4.bin"
refuse "does not apply to unpack" unpack mxfp4 --shape 4 --mode rz "$tmp/fp4.bin"
refuse "No such file" unpack mxfp4 --shape 4 "$tmp/nonexistent.bin"
refuse "not formats, quant or unpack" pack mxfp4 1
# A file of the wrong size: what was expected, and what it is made of.
refuse "fp4.bin: 3 bytes, expected 4 for mxfp4 of shape 5 (3 bytes of element codes + 1 of 1 block scale)" \
    unpack mxfp4 --shape 5 "$tmp/fp4.bin"
cp "$tmp/fp4.bin" "$tmp/long.bin"
printf '\0' >> "$tmp/long.bin"
refuse "long.bin: 4 bytes, expected 3" unpack mxfp4 --shape 4 "$tmp/long.bin"
refuse "i8.bin: 5 bytes, expected 16 for nvfp4 of shape 19 (10 bytes of element codes + 2 of 2 block scales + 4 of tensor scale)" \
    unpack nvfp4 --shape 19 "$tmp/i8.bin"
# A shape far larger than the file is refused before it is allocated
# (4e13 bytes of elements: ASan used to abort on the allocation).
refuse "fp4.bin: 3 bytes, but mxfp4 of shape 100000000x100000 needs 5000000000000 bytes of element codes alone" \
    unpack mxfp4 --shape 100000000x100000 "$tmp/fp4.bin"
refuse "needs more than SIZE_MAX bytes" \
    unpack mxfp4 --shape 100000000000x1000000000000 "$tmp/fp4.bin"

# ---- --pack is atomic ------------------------------------------------------
# An existing file survives a failed run untouched; a new one is never
# created; and no temporary file is left beside it.
cp "$tmp/fp4.bin" "$tmp/keep.bin"
mkdir "$tmp/pk"
cp "$tmp/fp4.bin" "$tmp/pk/old.bin"
refuse "not a number" quant mxfp4 --pack "$tmp/pk/old.bin" 1 2 zz
refuse "holds 6 values" quant mxfp4 --shape 2x3 --pack "$tmp/pk/new.bin" 1 2
refuse "has no NaN" quant elem=e2m1,scale=e3m2 --pack "$tmp/pk/new.bin" 1 inf
refuse "out of range" quant mxfp4 --axis 3 --pack "$tmp/pk/new.bin" 1 2
cmp -s "$tmp/pk/old.bin" "$tmp/keep.bin" || fail "--pack changed a file on error"
[ ! -e "$tmp/pk/new.bin" ] || fail "--pack created a file on error"
left=$(ls "$tmp/pk" | grep -v '^old\.bin$')
[ -z "$left" ] || fail "--pack left files behind: $left"
# A successful run replaces the file whole.
"$EMU" scaled quant mxint8 --pack "$tmp/pk/old.bin" 0.3 -0.3 1 -1 > /dev/null ||
    fail "--pack over an existing file"
cmp -s "$tmp/pk/old.bin" "$tmp/i8.bin" || fail "--pack did not replace the file"
left=$(ls "$tmp/pk" | grep -v '^old\.bin$')
[ -z "$left" ] || fail "--pack left files behind: $left"
# A directory that does not exist: an error, nothing written.
refuse "no temporary file can be made beside it" quant mxfp4 --pack "$tmp/nodir/x.bin" 1

echo "scaled: all cases agree"
