#!/bin/sh
# emu round: known roundings, overflow rules, and exact decimal input
# (a decimal is rounded once, not first converted to binary64).
# Usage: sh round.sh /path/to/emu
set -u
EMU=${1:?usage: round.sh /path/to/emu}
fail() { echo "FAIL round: $*" >&2; exit 1; }

# check FORMAT MODE VALUE BITS FLAGS [options]: the row for VALUE.
check() {
    fmt=$1 mode=$2 val=$3 bits=$4 flags=$5
    shift 5
    row=$("$EMU" round "$@" "$fmt" "$mode" "$val" | tail -n 1) ||
        fail "emu round $* $fmt $mode $val exited $?"
    set -- $row
    [ "$4" = "$bits" ] && [ "$6" = "$flags" ] ||
        fail "$fmt $mode $val: want bits $bits flags $flags, got: $row"
}

# 1 + 2^-11 is the binary16 tie between 1 and 1 + 2^-10: even wins.
check binary16 rne 1.00048828125 0x3c00 inexact
check binary16 rne 0x1.002p0 0x3c00 inexact
check binary16 rna 0x1.002p0 0x3c01 inexact
check binary16 ru 0x1.002p0 0x3c01 inexact
check binary16 rz 0x1.002p0 0x3c00 inexact
check binary16 ro 0x1p0 0x3c00 none
check binary16 ro 0x1.002p0 0x3c01 inexact
# Exact decimal input: just above and just below that tie.  Through a
# double both would be the tie itself and round to 1.
check binary16 rne 1.00048828125000000000001 0x3c01 inexact
check binary16 rna 1.00048828124999999999999 0x3c00 inexact
# binary64 itself: the tie 1 + 2^-53 and numbers 2^-120 off it.
check binary64 rne 0x1.00000000000008p0 0x3ff0000000000000 inexact
check binary64 rna 0x1.00000000000008p0 0x3ff0000000000001 inexact
check binary64 rna 0x1.00000000000007ffffffffffffffp0 0x3ff0000000000000 inexact
check binary64 rne 0x1.00000000000008000000000001p0 0x3ff0000000000001 inexact
check binary64 rne 0.1 0x3fb999999999999a inexact
# Subnormals and underflow.
check binary16 rne 3e-8 0x0001 'inexact|underflow|subnormal'
check binary16 rne 2e-8 0x0000 'inexact|underflow'
check binary16 rne -0 0x8000 none
# e4m3: max 448; 464 is the tie 448/480 (480 is NaN), 470 overflows.
check e4m3 rne 460 0x7e inexact
check e4m3 rne 464 0x7e inexact
check e4m3 rne 470 0x7f 'inexact|overflow'
check e4m3 rne 470 0x7e 'inexact|overflow' --saturate
check e4m3 rne 1e6 0x7f 'inexact|overflow'
check e4m3 rne -1e6 0xfe 'inexact|overflow' --saturate
check e4m3 rz 1e6 0x7e 'inexact|overflow'
check e4m3 rne inf 0x7f invalid
check binary16 rne 65520 0x7c00 'inexact|overflow'
# Overflow is judged on the value rounded in the current mode: toward
# zero 65520 is 65504 = max (no overflow), 65536 is beyond it.
check binary16 rz 65520 0x7bff inexact
check binary16 rz 65536 0x7bff 'inexact|overflow'
check binary16 rd -65536 0xfc00 'inexact|overflow'
check e2m1 rne 100 0x7 'inexact|overflow'
check e2m1 rne nan - invalid
# Tininess: 1023 * 2^-24 * (1 + 2^-10) rounds to 2^-14.
check binary16 rne 0x1.ff8p-15 0x03ff subnormal
check binary16 rne 0x1.fffp-15 0x0400 inexact
check binary16 rne 0x1.fffp-15 0x0400 'inexact|underflow' --tiny before

# Outside binary64's range (deterministic modes: test_cli_round.c holds
# them against MPFR).  Stochastic modes: beyond binary64's max overflow is
# certain; 1e-400 is below e4m3's grid by 2^-1320 (rounds up with a
# probability far beneath the random word's resolution) but not exact.
check e4m3 sr 1e400 0x7f 'inexact|overflow'
check e4m3 sr -1e-400 0x80 'inexact|underflow'
check bf16 sr 1e-320 0x0000 'inexact|underflow'

# Stochastic rounding: reproducible for a seed, both neighbours occur.
a=$("$EMU" round bf16 sr --seed 7 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 | awk '{print $4}')
b=$("$EMU" round bf16 sr --seed 7 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 | awk '{print $4}')
[ "$a" = "$b" ] || fail "sr with the same seed differs"
n=$(echo "$a" | tail -n +2 | sort -u | wc -l)
[ "$n" -eq 2 ] || fail "sr of 0.1 into bf16 gave $n distinct results over 8 draws: $a"

# Errors: exit 2 and a message naming the culprit.
# Stochastic rounding into binary64 would need 1e-400 finer than
# binary64's own grid.
for args in "binary16 rnx 1" "binary16 rne 1x" "nosuch rne 1" "binary16 rne" \
            "binary64 sr 1e-400"; do
    # shellcheck disable=SC2086
    "$EMU" round $args > /dev/null 2> /tmp/emu_round_err.$$
    rc=$?
    err=$(cat /tmp/emu_round_err.$$)
    rm -f /tmp/emu_round_err.$$
    [ $rc -eq 2 ] || fail "emu round $args: exit $rc, want 2"
    [ -n "$err" ] || fail "emu round $args: no message"
done
echo "round: all cases agree"
