#!/bin/sh
# emu gen -o DEVICE writes to the device, never replaces it with a regular
# file (as root, `-o /dev/null` used to replace /dev/null).  Needs root
# for mknod: exits 77 (skipped) otherwise.
# Usage: sh output_device.sh /path/to/emu
set -u
EMU=${1:?usage: output_device.sh /path/to/emu}
fail() { echo "FAIL output_device: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

# The same device as /dev/null (char 1,3), made here.
if ! mknod null c 1 3 2> /dev/null; then
    echo "output_device: skipped (mknod needs root)"
    exit 77
fi
"$EMU" gen --op add --format e4m3 -o null 2> err || fail "gen -o null exited $?: $(cat err)"
[ -c null ] || fail "null: no longer a character device"
[ ! -s null ] || fail "null: holds data"
for f in null.tmp-*; do
    [ -e "$f" ] && fail "a temporary file was left behind: $f"
done
"$EMU" scaled quant mxfp8 --shape 1x4 --pack null - <<'IN' > /dev/null 2> err ||
1 2 3 4
IN
    fail "scaled quant --pack null exited $?: $(cat err)"
[ -c null ] || fail "null: replaced by --pack"
echo "output_device: a character device is written in place"
