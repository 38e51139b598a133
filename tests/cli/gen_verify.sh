#!/bin/sh
# emu gen | emu verify round-trips for many formats, ops and modes; the
# header carries the settings; -o writes atomically; the line format is
# TestFloat's (field widths, flags as two hex digits).
# Usage: sh gen_verify.sh /path/to/emu
set -u
EMU=${1:?usage: gen_verify.sh /path/to/emu}
fail() { echo "FAIL gen_verify: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

trips=0
roundtrip() {
    trips=$((trips + 1))
    "$EMU" gen "$@" --count 300 --seed 42 > "$tmp/v" || fail "gen $* exited $?"
    "$EMU" verify "$tmp/v" > "$tmp/out" 2>&1 ||
        fail "verify of gen $* exited $?: $(tail -n 3 "$tmp/out")"
    grep -q " 0 mismatches" "$tmp/out" || fail "gen $*: $(cat "$tmp/out")"
}

# Every format x op x mode (270 round trips).  With EMU_TEST_SCALE below 1
# (check.sh's sanitizer run) a covering subset: each format x op pair
# once, under mode number (format + op) mod 5, which still gives every
# format and every op each of the five modes (54 round trips).
full=$(awk -v s="${EMU_TEST_SCALE:-1}" 'BEGIN { print (s + 0 >= 1) }')
i=0
for f in binary16 bf16 e4m3 e5m2 e2m1 e3m2 e4m3fnuz e8m0 'e3m4,bias=5,nosubnormals'; do
    j=0
    for op in add mul div sqrt fma lt; do
        k=0
        for m in rne rz ro sr sr5; do
            if [ "$full" = 1 ] || [ $(((i + j) % 5)) -eq $k ]; then
                roundtrip --op "$op" --format "$f" --mode "$m"
            fi
            k=$((k + 1))
        done
        j=$((j + 1))
    done
    i=$((i + 1))
done
roundtrip --op sub --format tf32 --mode rd --tiny before
roundtrip --op eq --format binary32 --mode rne
roundtrip --op le --format e5m2fnuz --mode ru --saturate
roundtrip --op convert --in binary32 --out e4m3 --mode rne --saturate
roundtrip --op convert --in binary64 --out bf16 --mode rna
roundtrip --op convert --in e4m3 --out binary16 --mode rz
roundtrip --op add --in e4m3 --out binary16 --mode rne
roundtrip --op fma --in e5m2 --out bf16 --mode sr --level 2
# A user's format whose eXmY shape is also a registered name (e8m0, which
# is unsigned): the header must still name this signed 9-bit format.
printf 'name = s8\nexponent = 8\nmantissa = 0\nspecials = fn\n' > "$tmp/s8.fmt"
roundtrip --op convert --in binary32 --out "$tmp/s8.fmt" --mode rne

# Line format: widths and flags of a few known lines.
"$EMU" gen --op add --format binary16 > "$tmp/add" || fail "gen add exited $?"
grep -q '^3C00 3C00 4000 00$' "$tmp/add" || fail "missing '3C00 3C00 4000 00' in binary16 add"
grep -q '^7BFF 7BFF 7C00 05$' "$tmp/add" || fail "missing '7BFF 7BFF 7C00 05' in binary16 add"
"$EMU" gen --op lt --format e4m3 > "$tmp/lt" || fail "gen lt exited $?"
grep -q '^38 40 1 00$' "$tmp/lt" || fail "missing '38 40 1 00' in e4m3 lt"
"$EMU" gen --op sqrt --format e2m1 > "$tmp/sq" || fail "gen sqrt exited $?"
awk '!/^#/ && NF != 3 { exit 1 }' "$tmp/sq" || fail "sqrt lines should have 3 fields"

# Exhaustive: every pair of an 8-bit format, checked.
"$EMU" gen --op mul --format e4m3 --mode rz --exhaustive -o "$tmp/ex.tv" 2>/dev/null ||
    fail "gen --exhaustive exited $?"
n=$(grep -vc '^#' "$tmp/ex.tv")
[ "$n" -eq 65536 ] || fail "exhaustive e4m3 mul has $n lines, want 65536"
"$EMU" verify "$tmp/ex.tv" > /dev/null || fail "exhaustive e4m3 mul does not verify"
for leftover in "$tmp"/ex.tv.tmp-*; do
    [ -e "$leftover" ] && fail "gen -o left a temporary file: $leftover"
done
"$EMU" gen --op fma --format binary16 --exhaustive > /dev/null 2>&1
[ $? -eq 2 ] || fail "exhaustive fma binary16 should be refused"

# Level 2 is larger than level 1; --count adds exactly N lines.
l1=$("$EMU" gen --op add --format e5m2 | grep -vc '^#')
l2=$("$EMU" gen --op add --format e5m2 --level 2 | grep -vc '^#')
c=$("$EMU" gen --op add --format e5m2 --count 77 | grep -vc '^#')
[ "$l2" -gt "$l1" ] || fail "level 2 ($l2) not larger than level 1 ($l1)"
[ "$c" -eq $((l1 + 77)) ] || fail "--count 77 gave $c lines, level 1 has $l1"

# Settings on the command line override the header: a wrong mode is seen.
"$EMU" gen --op add --format bf16 --mode rz --count 500 > "$tmp/rz"
"$EMU" verify --mode ru "$tmp/rz" > "$tmp/out" 2>&1
[ $? -eq 1 ] || fail "verifying rz vectors as ru should find mismatches"
# Stochastic vectors verify only with their seed.
"$EMU" gen --op mul --format bf16 --mode sr --seed 9 --count 2000 > "$tmp/sr"
"$EMU" verify "$tmp/sr" > /dev/null || fail "sr vectors fail with their own seed"
"$EMU" verify --seed 10 "$tmp/sr" > /dev/null 2>&1
[ $? -eq 1 ] || fail "sr vectors should mismatch under another seed"

# Bad options exit 2.
for args in "--format binary16" "--op add" "--op nop --format e4m3" \
            "--op add --format binary64" "--op add --format e4m3 --level 3"; do
    # shellcheck disable=SC2086
    "$EMU" gen $args > /dev/null 2>&1
    [ $? -eq 2 ] || fail "emu gen $args should exit 2"
done
want=$([ "$full" = 1 ] && echo 279 || echo 63)
[ "$trips" -eq "$want" ] || fail "$trips round trips ran, $want expected"
echo "gen_verify: all $trips round trips verified"
