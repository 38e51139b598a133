#!/bin/sh
# --profile (ieee, ocp, riscv) on emu round, gen, verify and dot: the
# patterns and flags each profile gives the issue's cases, the header
# round trip gen -> verify, and clear errors for unknown names.
# Usage: sh profiles.sh /path/to/emu
set -u
EMU=${1:?usage: profiles.sh /path/to/emu}
fail() { echo "FAIL profiles: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# check FORMAT VALUE BITS FLAGS [options]: the row emu round prints.
check() {
    fmt=$1 val=$2 bits=$3 flags=$4
    shift 4
    row=$("$EMU" round "$@" "$fmt" rne "$val" | tail -n 1) ||
        fail "emu round $* $fmt rne $val exited $?"
    set -- $row
    [ "$4" = "$bits" ] && [ "$6" = "$flags" ] ||
        fail "$fmt $val: want bits $bits flags $flags, got: $row"
}

# Saturation is OCP's saturation mode in every profile: inf gives max.
for p in ieee ocp riscv; do
    check e5m2 inf 0x7b none --saturate --profile "$p"
    check e5m2 -inf 0xfb none --saturate --profile "$p"
    check e4m3 inf 0x7e invalid --saturate --profile "$p"
    check e5m2 inf 0x7c none --profile "$p"
done
# The default NaN: 0x7E (quiet bit) under ieee, 0x7F on RISC-V; ocp keeps
# the sign.
check e5m2 nan 0x7e none
check e5m2 -nan 0x7e none --profile ieee
check e5m2 -nan 0x7f none --profile riscv
check e5m2 -nan 0xfe none --profile ocp
check e4m3 -nan 0xff none --profile ocp

# Unknown names: exit 2, the message names the option and the profiles.
for cmd in "round e5m2 rne 1" "gen --op add --format e5m2" \
           "verify --op add --format e5m2 -" \
           "dot gen --in e5m2 --accum exact"; do
    # shellcheck disable=SC2086
    "$EMU" $cmd --profile x86 < /dev/null > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "$cmd --profile x86 exited $rc, want 2"
    grep -q "profile: 'x86' is not a profile (ieee, ocp, riscv)" "$tmp/err" ||
        fail "$cmd --profile x86: $(cat "$tmp/err")"
done

# Widening E5M2 0x7D: a signalling NaN under ieee (invalid, 10), quiet
# under riscv; the header carries the profile to verify.
"$EMU" gen --op convert --in e5m2 --out binary16 --exhaustive \
    --profile riscv > "$tmp/riscv.tv" || fail "gen --profile riscv exited $?"
grep -q '^#! emu-vectors .* profile=riscv$' "$tmp/riscv.tv" ||
    fail "no profile in the header: $(grep '^#!' "$tmp/riscv.tv")"
grep -q '^7D 7E00 00$' "$tmp/riscv.tv" || fail "riscv: 0x7D is not quiet"
"$EMU" gen --op convert --in e5m2 --out binary16 --exhaustive \
    > "$tmp/ieee.tv" || fail "gen exited $?"
grep -q '^7D 7E00 10$' "$tmp/ieee.tv" || fail "ieee: 0x7D does not signal"
grep -q '^#! emu-vectors .* profile=ieee$' "$tmp/ieee.tv" ||
    fail "no profile=ieee in the header"

"$EMU" verify --exact-nan "$tmp/riscv.tv" > "$tmp/out" 2>&1 ||
    fail "verify of riscv vectors exited $?: $(tail -n 3 "$tmp/out")"
grep -q " 0 mismatches" "$tmp/out" || fail "riscv round trip: $(cat "$tmp/out")"
# The option wins over the header: the same file under ieee mismatches.
"$EMU" verify --profile ieee "$tmp/riscv.tv" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "verify --profile ieee of riscv vectors exited $rc"
grep -q " 2 mismatches" "$tmp/out" || fail "ieee over riscv: $(cat "$tmp/out")"
# Mismatch reports name the NaN class under the profile in force.
grep -q "convert 7D (snan)" "$tmp/out" || fail "ieee: 0x7D not reported snan"
"$EMU" verify --profile riscv "$tmp/ieee.tv" > "$tmp/out" 2>&1
grep -q "convert 7D (qnan)" "$tmp/out" || fail "riscv: 0x7D not reported qnan"
# A header without the key predates profiles: ieee.
sed 's/ profile=ieee$//' "$tmp/ieee.tv" > "$tmp/old.tv"
"$EMU" verify "$tmp/old.tv" > "$tmp/out" 2>&1 ||
    fail "verify of a header without profile exited $?: $(cat "$tmp/out")"
# A header naming an unknown profile is an error, not ieee.
sed 's/ profile=ieee$/ profile=arm/' "$tmp/ieee.tv" > "$tmp/bad.tv"
"$EMU" verify "$tmp/bad.tv" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "verify of profile=arm exited $rc, want 2"
grep -q "bad.tv:2: header key 'profile': 'arm' is not a profile" "$tmp/out" ||
    fail "profile=arm: $(cat "$tmp/out")"

# ocp keeps NaN sign and payload through arithmetic: exact NaNs round-trip.
for p in ieee ocp riscv; do
    "$EMU" gen --op add --format e5m2 --exhaustive --profile "$p" |
        "$EMU" verify --exact-nan - > "$tmp/out" 2>&1 ||
        fail "add e5m2 --profile $p round trip: $(tail -n 3 "$tmp/out")"
done
"$EMU" gen --op add --format e5m2 --exhaustive --profile ocp |
    grep -q '^FF 7D FF 10$' || fail "ocp: -NaN 0xFF + sNaN 0x7D is not 0xFF"

# emu dot: the header carries the profile, verify reads it back.
"$EMU" dot gen --in e5m2 --accum exact,acc=binary16 --out e5m2 --k 4 \
    --count 400 --profile riscv -o "$tmp/dot.tv" 2> /dev/null ||
    fail "dot gen --profile riscv exited $?"
grep -q '^#! emu-dot .* profile=riscv$' "$tmp/dot.tv" ||
    fail "no profile in the dot header"
"$EMU" dot verify --exact-nan "$tmp/dot.tv" > "$tmp/out" 2>&1 ||
    fail "dot verify exited $?: $(tail -n 3 "$tmp/out")"
# Under ieee the same NaN results are 0x7E, not riscv's 0x7F.
grep -q ' 7F 00$' "$tmp/dot.tv" || fail "dot: no NaN result in 400 cases"
"$EMU" dot verify --exact-nan --profile ieee "$tmp/dot.tv" > "$tmp/out" 2>&1 &&
    fail "dot verify --profile ieee found no mismatch"
exit 0
