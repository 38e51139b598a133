#!/bin/sh
# emu values: every pattern listed once, NaNs exactly where the format
# puts them, and every listed value read back by `emu round` to the same
# pattern (the decoder and the encoder agree).
# Usage: sh values.sh /path/to/emu
set -u
EMU=${1:?usage: values.sh /path/to/emu}
fail() { echo "FAIL values: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

"$EMU" values e4m3 --csv > "$tmp/e4m3" || fail "values e4m3 exited $?"
n=$(tail -n +2 "$tmp/e4m3" | wc -l)
[ "$n" -eq 256 ] || fail "e4m3: $n patterns, expected 256"
nans=$(awk -F, '$7 == "nan" { printf "%s ", $1 }' "$tmp/e4m3")
[ "$nans" = "0x7f 0xff " ] || fail "e4m3 NaN patterns are '$nans', expected 0x7f 0xff"
"$EMU" values e4m3 | tail -n +2 | wc -l | grep -q '^256$' ||
    fail "e4m3 table does not have 256 rows"

# Expected NaN sets of the other families.
check_nans() {
    "$EMU" values "$1" --csv > "$tmp/v" || fail "values $1 exited $?"
    got=$(awk -F, 'NR > 1 && $7 ~ /nan/ { n++ } END { print n + 0 }' "$tmp/v")
    [ "$got" -eq "$2" ] || fail "$1: $got NaN patterns, expected $2"
}
check_nans e5m2 6        # IEEE: 2 signs x 3 non-zero fractions
check_nans e4m3fnuz 1    # 0x80 only
check_nans e2m1 0
check_nans e8m0 1        # 0xff
check_nans binary16 2046 # 2 x 1023
awk -F, 'NR > 1 && $7 ~ /nan/ && $1 != "0x80" { exit 1 }' \
    "$("$EMU" values e4m3fnuz --csv > "$tmp/f"; echo "$tmp/f")" ||
    fail "e4m3fnuz has a NaN other than 0x80"

# Read every finite value back through emu round (exact decimal input).
for f in e4m3 e5m2 e2m1 e3m2 e2m3 e4m3fnuz e8m0 'e3m4,bias=5,nosubnormals'; do
    "$EMU" values "$f" --csv | tail -n +2 |
        awk -F, '$7 != "nan" && $7 != "qnan" && $7 != "snan" && $7 != "inf"' \
        > "$tmp/fin"
    # A format without subnormals reads its exponent-0 patterns as zero;
    # only the canonical zero comes back from rounding.
    awk -F, '{ print $6 }' "$tmp/fin" > "$tmp/dec"
    # shellcheck disable=SC2046
    "$EMU" round "$f" rne $(cat "$tmp/dec") > "$tmp/round" ||
        fail "$f: emu round refused a listed value"
    awk '{ print $4 }' "$tmp/round" | tail -n +2 > "$tmp/got"
    awk -F, '{ print $1 }' "$tmp/fin" > "$tmp/want"
    paste -d' ' "$tmp/want" "$tmp/got" "$tmp/dec" | awk -v f="$f" '
        $1 != $2 && !(($3 == "0" || $3 == "-0") ) {
            printf "FAIL values: %s value %s (pattern %s) rounds to %s\n", f, $3, $1, $2
            bad = 1 }
        END { exit bad }' >&2 || exit 1
    if [ "$f" = e4m3 ]; then
        ternaries=$(awk 'NR > 1 { print $5 }' "$tmp/round" | sort -u)
        [ "$ternaries" = 0 ] || fail "e4m3 values are not exact: ternary $ternaries"
    fi
done

"$EMU" values binary32 > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] || fail "values binary32 should be refused with exit 2"
grep -q "32 bits" "$tmp/err" || fail "refusal does not say why: $(cat "$tmp/err")"
echo "values: patterns, NaNs and read-back agree"
