#!/bin/sh
# Vector files made without the emulator — binary16 lines written by hand
# in TestFloat's format, and lines computed by an x86 processor (see
# tests/data/README.md) — must verify with no mismatch.
# Usage: sh testfloat_f16.sh /path/to/emu
set -u
EMU=${1:?usage: testfloat_f16.sh /path/to/emu}
DATA=$(cd "$(dirname "$0")/../data" && pwd)
status=0
files=0
run() {
    file=$1; shift
    files=$((files + 1))
    if ! out=$("$EMU" verify --max-errors 5 "$@" "$DATA/$file" 2>&1); then
        echo "FAIL testfloat_f16: emu verify $* $file:" >&2
        echo "$out" >&2
        status=1
    fi
}
for f in "$DATA"/tf_f16_*.tv "$DATA"/x86_f16_*.tv; do
    base=$(basename "$f" .tv)
    # <source>_f16_<op>_<mode>[_tinybefore]
    op=$(echo "$base" | cut -d_ -f3)
    mode=$(echo "$base" | cut -d_ -f4)
    tiny=after
    case $base in *_tinybefore) tiny=before ;; esac
    run "$(basename "$f")" --op "$op" --format binary16 --mode "$mode" --tiny "$tiny"
done
for f in "$DATA"/x86_f32_to_f16_*.tv; do
    mode=$(basename "$f" .tv | sed 's/.*_//')
    run "$(basename "$f")" --op convert --in binary32 --out binary16 --mode "$mode"
done
[ "$files" -ge 10 ] || { echo "FAIL testfloat_f16: only $files data files found in $DATA" >&2; exit 1; }
[ $status -eq 0 ] && echo "testfloat_f16: $files independent vector files verified"
exit $status
