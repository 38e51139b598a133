#!/bin/sh
# emu formats: every shipped formats/*.fmt appears, once, in the table and
# in the CSV, and the CSV columns agree with the spec files.
# Usage: sh formats.sh /path/to/emu
set -u
EMU=${1:?usage: formats.sh /path/to/emu}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL formats: $*" >&2; exit 1; }

table=$("$EMU" formats) || fail "emu formats exited $?"
csv=$("$EMU" formats --csv) || fail "emu formats --csv exited $?"
nfiles=0
for f in "$ROOT"/formats/*.fmt; do
    nfiles=$((nfiles + 1))
    name=$(sed -n 's/^name *= *\([^ #]*\).*/\1/p' "$f")
    e=$(sed -n 's/^exponent *= *\([0-9]*\).*/\1/p' "$f")
    m=$(sed -n 's/^mantissa *= *\([0-9]*\).*/\1/p' "$f")
    [ -n "$name" ] || fail "no name in $f"
    echo "$table" | grep -q "^$name " || fail "table lacks $name (from $f)"
    row=$(echo "$csv" | grep "^$name,") || fail "CSV lacks $name"
    # ebits and mbits are fields 4 and 5 once the quoted aliases are gone.
    got=$(echo "$row" | sed 's/"[^"]*"/A/' | cut -d, -f4,5)
    [ "$got" = "$e,$m" ] || fail "$name: CSV says e,m = $got, $f says $e,$m"
done
[ "$nfiles" -eq 17 ] || fail "expected 17 shipped formats, found $nfiles files"
rows=$(echo "$csv" | tail -n +2 | wc -l)
[ "$rows" -eq "$nfiles" ] || fail "CSV has $rows rows for $nfiles spec files"
trows=$(echo "$table" | tail -n +2 | wc -l)
[ "$trows" -eq "$nfiles" ] || fail "table has $trows rows for $nfiles spec files"

# --load adds a row.
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
printf 'name = myfp7\nexponent = 3\nmantissa = 3\nbias = 2\n' > "$tmp/my.fmt"
"$EMU" --load "$tmp/my.fmt" formats --csv | grep -q '^myfp7,' ||
    fail "--load my.fmt did not add myfp7"
"$EMU" formats --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown option should exit 2"
echo "formats: $nfiles formats listed"
