#!/bin/sh
# rtl.sh — the example RTL of examples/hw against libemu, in Verilator:
# every pair of operands through four FP8 multipliers and 100k random
# plus edge cases through three dot-product units, compared op by op with
# the DPI-C golden model; the defective variants must be reported with a
# known mismatching case (whose right answer the `emu` program confirms
# by its own path); and the same units checked the file way, `emu gen`
# vectors in, `emu verify` on what the units wrote.
#
# Exit 77 (CTest's skip) without Verilator, a C++ compiler or make, and in a
# sanitizer build (the simulator is built without the sanitizer runtime).
# Usage: sh rtl.sh /path/to/emu /dir/of/libemu.so [EMU_SANITIZE]
set -u
EMU=${1:?usage: rtl.sh /path/to/emu /dir/of/libemu.so [sanitize]}
LIBDIR=${2:?usage: rtl.sh /path/to/emu /dir/of/libemu.so [sanitize]}
SANITIZE=${3:-OFF}
HW=$(cd "$(dirname "$0")/../../examples/hw" && pwd)
LIBDIR=$(cd "$LIBDIR" && pwd) || exit 1

case $SANITIZE in
ON|on|1|TRUE|true|YES|yes)
    echo "hw_rtl: skipped: sanitizer build (the simulator has no sanitizer runtime)"
    exit 77 ;;
esac
for tool in verilator "${CXX:-g++}" make; do
    if ! command -v "$tool" > /dev/null 2>&1; then
        echo "hw_rtl: skipped: no $tool"
        exit 77
    fi
done

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL hw_rtl: $*" >&2; status=1; }

sh "$HW/build.sh" "$tmp/obj" "-L$LIBDIR" -lemu "-Wl,-rpath,$LIBDIR" ||
    { echo "FAIL hw_rtl: the testbench does not build" >&2; exit 1; }

# ---- op by op through DPI-C --------------------------------------------
"$tmp/obj/Vtb_hw" +max_print=1000000 > "$tmp/run" 2>&1 ||
    { cat "$tmp/run" >&2; fail "the simulation exited $?"; }
for unit in mul_e4m3 mul_e4m3_sat mul_e5m2 mul_e5m2_sat; do
    grep -qx "SUMMARY $unit cases=65536 mismatches=0" "$tmp/run" ||
        { grep "$unit " "$tmp/run" | head -5 >&2; fail "$unit disagrees with libemu"; }
done
for unit in dot_e4m3_w16 dot_e4m3_w26 dot_e5m2_w26; do
    grep -Eqx "SUMMARY $unit cases=1[0-9]{5} mismatches=0" "$tmp/run" ||
        { grep "$unit " "$tmp/run" | head -5 >&2; fail "$unit disagrees with libemu"; }
done

# The defects must be caught, the known case printed with its operands.
# 1.25 * 1.375 = 1.71875 lies between E4M3's 1.625 (3D) and 1.75 (3E),
# nearer 3E: truncation gives 3D.  448 * 448 + 2 * 2 = 200708 exactly
# (48440100); dropping the last aligned bit loses the 4 (48440000).
expect() { # unit, line, what
    grep -Eq "SUMMARY $1 cases=[0-9]+ mismatches=[1-9]" "$tmp/run" ||
        fail "$1: the defective unit was not caught"
    grep -qx "$2" "$tmp/run" || fail "$1: '$2' not reported ($3)"
}
expect mul_e4m3_sat_defect \
    "MISMATCH mul_e4m3_sat_defect a=3a b=3b rtl=3d/01 emu=3e/01" "truncation"
expect dot_e4m3_w16_defect \
    "MISMATCH dot_e4m3_w16_defect a=7e,40,00,00 b=7e,40,00,00 c=00000000 rtl=48440000 emu=48440100" \
    "dropped alignment bit"
printf '3a 3b 3e 01\n' | "$EMU" verify --op mul --format e4m3 --mode rne \
    --saturate - > /dev/null || fail "emu verify rejects 3a*3b = 3e"
DOT="--in e4m3 --accum fused,k=4,w=16,acc=binary32 --k 4"
# shellcheck disable=SC2086
printf '7e 7e 40 40 00 00 00 00 48440100 00\n' |
    "$EMU" dot verify $DOT - > /dev/null || fail "emu dot verify rejects 200708"

# ---- the file way: emu gen in, emu verify out ----------------------------
MUL="--op mul --format e4m3 --mode rne --saturate"
# shellcheck disable=SC2086
"$EMU" gen $MUL --exhaustive -o "$tmp/mul.tv" &&
    "$EMU" dot gen $DOT --count 20000 --seed 5 -o "$tmp/dot.tv" ||
    fail "emu gen / emu dot gen failed"
# $readmemh takes whitespace-separated hex words, but no '#' lines.
grep -v '^#' "$tmp/mul.tv" > "$tmp/mul.hex"
grep -v '^#' "$tmp/dot.tv" > "$tmp/dot.hex"
"$tmp/obj/Vtb_hw" "+mul_in=$tmp/mul.hex" "+mul_out=$tmp/mul.out" \
    +mul_n=65536 "+dot_in=$tmp/dot.hex" "+dot_out=$tmp/dot.out" \
    +dot_n=20000 > "$tmp/files" 2>&1 || { cat "$tmp/files" >&2; fail "file run"; }
# shellcheck disable=SC2086
"$EMU" verify $MUL "$tmp/mul.out" > "$tmp/v1" 2>&1 ||
    { cat "$tmp/v1" >&2; fail "emu verify: the multiplier's file"; }
# shellcheck disable=SC2086
"$EMU" dot verify $DOT "$tmp/dot.out" > "$tmp/v2" 2>&1 ||
    { cat "$tmp/v2" >&2; fail "emu dot verify: the dot unit's file"; }
grep -q '65536 lines checked, 0 mismatches' "$tmp/v1" || fail "mul file: $(cat "$tmp/v1")"
grep -q '20000 lines checked, 0 mismatches' "$tmp/v2" || fail "dot file: $(cat "$tmp/v2")"

[ $status -eq 0 ] && echo "hw_rtl: 4 x 65536 multiplier cases and 3 x $(sed -n 's/^SUMMARY dot_e4m3_w16 cases=\([0-9]*\).*/\1/p' "$tmp/run") dot cases agree with libemu through DPI-C; both defects caught; files checked by emu verify"
exit $status
