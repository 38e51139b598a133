#!/bin/sh
# binary16 against the processor, live: compiles tests/data/f16_x86.c
# (SSE arithmetic + F16C conversions, flags from MXCSR) and checks emu's
# vectors for every op and directed/nearest mode against it.  Skipped
# (exit 77, which CTest reports as skipped) on machines without F16C or a
# C compiler.
# Usage: sh hw_f16.sh /path/to/emu
set -u
EMU=${1:?usage: hw_f16.sh /path/to/emu}
DATA=$(cd "$(dirname "$0")/../data" && pwd)
CC=${CC:-cc}
if ! grep -qw f16c /proc/cpuinfo 2>/dev/null; then
    echo "hw_f16: skipped: this processor has no F16C"
    exit 77
fi
if ! command -v "$CC" > /dev/null 2>&1; then
    echo "hw_f16: skipped: no C compiler ($CC)"
    exit 77
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The emulator's flags must not depend on compiler flags here: the oracle
# is built plainly, without sanitizers.
"$CC" -O1 -mf16c -fno-math-errno -frounding-math -o "$tmp/f16_x86" \
    "$DATA/f16_x86.c" -lm || { echo "FAIL hw_f16: cannot compile f16_x86.c" >&2; exit 1; }

status=0
# $fmt holds one or two options and is split on purpose.
# shellcheck disable=SC2086
check() {
    op=$1 mode=$2 fmt=$3
    shift 3
    "$EMU" gen --op "$op" $fmt --mode "$mode" "$@" > "$tmp/in" || {
        echo "FAIL hw_f16: emu gen --op $op $fmt --mode $mode $* exited $?" >&2; status=1; return; }
    "$tmp/f16_x86" "$op" "$mode" < "$tmp/in" > "$tmp/hw"
    if ! "$EMU" verify --op "$op" $fmt --mode "$mode" --max-errors 5 "$tmp/hw" > "$tmp/out" 2>&1; then
        echo "FAIL hw_f16: $op $mode: emulator and x86 disagree:" >&2
        cat "$tmp/out" >&2
        status=1
    fi
}
for mode in rne rz ru rd; do
    for op in add sub mul div eq lt le; do
        check "$op" "$mode" "--format binary16" --count 20000 --seed 3
    done
    check sqrt "$mode" "--format binary16" --exhaustive
    check convert "$mode" "--in binary32 --out binary16" --level 2 --count 50000 --seed 4
done
[ $status -eq 0 ] && echo "hw_f16: binary16 add sub mul div sqrt eq lt le and binary32->binary16 agree with x86 in rne rz ru rd"
exit $status
