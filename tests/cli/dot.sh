#!/bin/sh
# emu dot: vectors of a dot-product unit.  gen | verify round-trips for
# every accumulator model; hand-made cases whose results follow from the
# models' definitions (swamping in a binary16 accumulator, the exact sum);
# a corrupted result is reported with its line number (exit 1); malformed
# lines exit 2 with their line numbers; bad options are refused.
# Usage: sh dot.sh /path/to/emu
set -u
EMU=${1:?usage: dot.sh /path/to/emu}
fail() { echo "FAIL dot: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

for accum in 'sequential,acc=binary16' 'pairwise,acc=bfloat16' \
             'blocked,acc=binary16,wide=binary32,block=4' \
             'fused,k=4,w=14,acc=binary32' 'kahan,acc=binary16' exact fast \
             'sequential,acc=binary16,mode=sr'; do
    for in in e4m3 e5m2 binary16; do
        "$EMU" dot gen --in "$in" --accum "$accum" --k 12 --count 200 --seed 7 \
            -o "$tmp/v.tv" 2> /dev/null || fail "gen --in $in --accum $accum"
        "$EMU" dot verify "$tmp/v.tv" > "$tmp/out" 2>&1 ||
            fail "verify of --in $in --accum $accum: $(tail -n 2 "$tmp/out")"
        grep -q "200 lines checked, 0 mismatches" "$tmp/out" ||
            fail "--in $in --accum $accum: $(cat "$tmp/out")"
    done
done

# 1 + 2^-12 + 2^-12 (binary16 operands, products with 1): a binary16
# accumulator absorbs both small addends (each is below half an ulp of 1),
# the exact sum is 1 + 2^-11.  Results in binary32.
case3='3C00 3C00 0C00 3C00 0C00 3C00'
check() { # ACCUM RESULT
    printf '%s %s 00\n' "$case3" "$2" |
        "$EMU" dot verify --in binary16 --out binary32 --accum "$1" --k 3 - \
            > "$tmp/out" 2>&1 || fail "$1: want $2: $(cat "$tmp/out")"
}
check exact 3F801000
check 'sequential,acc=binary16' 3F800000
check 'sequential,acc=binary32' 3F801000
# Kahan in binary16 keeps the lost 2^-12 in its compensation, but the
# second addition is a tie that rounds to 1 and the final sum is s, not
# s - c: still 1.  With a third 2^-12 the compensated addend 3 * 2^-12 is
# three quarters of an ulp and lifts the sum to 1 + 2^-10 (the exact sum,
# 1 + 3 * 2^-12, is 3F801800; plain binary16 accumulation stays at 1).
check 'kahan,acc=binary16' 3F800000
case3="$case3 0C00 3C00"
check4() {
    printf '%s %s 00\n' "$case3" "$2" |
        "$EMU" dot verify --in binary16 --out binary32 --accum "$1" --k 4 - \
            > "$tmp/out" 2>&1 || fail "$1: want $2: $(cat "$tmp/out")"
}
check4 'kahan,acc=binary16' 3F802000
check4 exact 3F801800
check4 'sequential,acc=binary16' 3F800000

# A corrupted result: exit 1, the line named.
"$EMU" dot gen --in e4m3 --accum exact --k 4 --count 20 > "$tmp/v.tv" ||
    fail "gen exact"
awk 'NR == 5 { $(NF - 1) = "7F800000" } { print }' "$tmp/v.tv" > "$tmp/bad.tv"
"$EMU" dot verify "$tmp/bad.tv" > "$tmp/out" 2>&1
[ $? -eq 1 ] || fail "a wrong result should exit 1: $(cat "$tmp/out")"
grep -q "bad.tv:5:" "$tmp/out" || fail "the mismatch is not named: $(cat "$tmp/out")"

# Malformed lines: exit 2, each with its line number.
printf '38 38 38 38 40000000 00\n38 zz 38 38 40000000 00\n38 38 38 00\n' |
    "$EMU" dot verify --in e4m3 --out binary32 --accum exact --k 2 - \
        > "$tmp/out" 2>&1
[ $? -eq 2 ] || fail "malformed lines should exit 2"
grep -q "<stdin>:2: malformed line: field 2 'zz'" "$tmp/out" ||
    fail "line 2 not reported: $(cat "$tmp/out")"
grep -q "<stdin>:3: malformed line: 4 fields, expected 6" "$tmp/out" ||
    fail "line 3 not reported: $(cat "$tmp/out")"

# Bad options.
refuse() { # PATTERN ARGS...
    pat=$1
    shift
    "$EMU" dot "$@" > "$tmp/out" 2>&1 < /dev/null
    [ $? -eq 2 ] || fail "emu dot $* should exit 2"
    grep -q -- "$pat" "$tmp/out" || fail "emu dot $*: message lacks '$pat': $(cat "$tmp/out")"
}
refuse "missing --in" gen --accum exact
refuse "missing --accum" gen --in e4m3
refuse "accumulator 'fused,k=0'" gen --in e4m3 --accum fused,k=0
refuse "binary64 is not held by binary32" gen --in binary64 --accum exact
refuse "--k: '0'" gen --in e4m3 --accum exact --k 0
refuse "neither gen nor verify" check --in e4m3 --accum exact

# A bad header: exit 2, the file, line and key named (not an option).
H="#! emu-dot in=e4m3 out=binary32 accum=exact mode=rne"
hdr_refuse() { # PATTERN HEADER-LINE
    { echo "# dot vectors"; echo "$2"; echo '38 38 38 38 40000000 00'; } > "$tmp/h.tv"
    refuse "h.tv:$1" verify "$tmp/h.tv"
}
hdr_refuse "2: header key 'k': '0' is not a length from 1 to 256" "$H k=0"
hdr_refuse "2: header key 'seed': 'x'" "$H k=2 seed=x"
hdr_refuse "2: header key 'in': format spec 'e4m3x'" "#! emu-dot in=e4m3x accum=exact k=2"
hdr_refuse "2: header key 'in': binary64 is not held by binary32" "#! emu-dot in=binary64 accum=exact k=2"
hdr_refuse "2: header key 'accum':" "#! emu-dot in=e4m3 accum=fused,k=0 k=2"
hdr_refuse "2: header key 'mode': 'rnx' is not a rounding mode" "#! emu-dot in=e4m3 accum=exact mode=rnx k=2"
hdr_refuse "2: header key 'kk' is unknown" "$H kk=2"
hdr_refuse "2: header key 'k' given twice on the line" "$H k=2 k=3"
refuse "is a directory" verify "$tmp"
exit 0
