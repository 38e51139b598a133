#!/bin/sh
# emu verify: a corrupted vector makes it exit 1 and name the line;
# malformed lines make it exit 2 and name each line; blank lines and
# comments are skipped; --max-errors caps the printout, not the count.
# Usage: sh verify_errors.sh /path/to/emu
set -u
EMU=${1:?usage: verify_errors.sh /path/to/emu}
fail() { echo "FAIL verify_errors: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

"$EMU" gen --op add --format binary16 --mode rne > "$tmp/good" || fail "gen exited $?"
"$EMU" verify "$tmp/good" > "$tmp/out" || fail "clean file does not verify: $(cat "$tmp/out")"

# Corrupt one result (line 103) and one flags field (line 2000).
awk 'NR == 103 { $3 = ($3 == "3C00" ? "3C01" : "3C00") }
     NR == 2000 { $4 = ($4 == "00" ? "01" : "00") } { print }' \
    "$tmp/good" > "$tmp/bad"
"$EMU" verify "$tmp/bad" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "corrupted file: exit $rc, want 1"
grep -q ":103: add " "$tmp/out" || fail "line 103 not reported: $(cat "$tmp/out")"
grep -q ":2000: add " "$tmp/out" || fail "line 2000 not reported: $(cat "$tmp/out")"
grep -q " 2 mismatches" "$tmp/out" || fail "summary does not count 2: $(tail -n 1 "$tmp/out")"

# --max-errors 1: one printed, both counted.
"$EMU" verify --max-errors 1 "$tmp/bad" > "$tmp/out" 2>&1
[ "$(grep -c ': add ' "$tmp/out")" -eq 1 ] || fail "--max-errors 1 printed $(grep -c ': add ' "$tmp/out")"
grep -q " 2 mismatches" "$tmp/out" || fail "--max-errors changed the count"

# NaN payloads: any NaN matches unless --exact-nan.
printf '7C00 FC00 FE00 10\n7C01 3C00 7E01 10\n' > "$tmp/nan"
"$EMU" verify --op add --format binary16 "$tmp/nan" > /dev/null ||
    fail "other NaN patterns should match by default"
"$EMU" verify --op add --format binary16 --exact-nan "$tmp/nan" > "$tmp/out" 2>&1
[ $? -eq 1 ] || fail "--exact-nan should reject FE00 for 7E00"
grep -q ':1: ' "$tmp/out" || fail "--exact-nan: line 1 not reported"

# Malformed lines, each reported with its line number; comments skipped.
cat > "$tmp/malformed" <<'VEC'
# a comment, then a blank line

3C00 3C00 4000 00
3C00 3C00 4000
3C00 3G00 4000 00
13C00 3C00 4000 00
3C00 3C00 4000 100
3C00 3C00 4000 00 extra
   3C00 3C00 4000 00   # trailing comment
VEC
"$EMU" verify --op add --format binary16 "$tmp/malformed" > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] || fail "malformed file: exit $rc, want 2"
for want in ":4: malformed line: 3 fields" ":5: malformed line: operand B '3G00' is not hex" \
            ":6: malformed line: operand A '13C00' is wider than 16 bits" \
            ":7: malformed line: flags '100' is wider" ":8: malformed line: 5 fields"; do
    grep -q "$want" "$tmp/err" || fail "missing '$want' in: $(cat "$tmp/err")"
done
[ "$(grep -c malformed "$tmp/err")" -eq 5 ] || fail "expected exactly 5 malformed reports: $(cat "$tmp/err")"
grep -q "2 lines checked, 0 mismatches, 5 malformed" "$tmp/out" ||
    fail "summary: $(cat "$tmp/out")"

# A comparison result must be 0 or 1; e4m3 patterns are 8 bits.
printf '38 40 2 00\n' > "$tmp/cmp"
"$EMU" verify --op lt --format e4m3 "$tmp/cmp" > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "result '2' is wider than 1 bit" "$tmp/err" ||
    fail "comparison result 2 accepted: $(cat "$tmp/err")"
printf '380 40 1 00\n' > "$tmp/wide"
"$EMU" verify --op lt --format e4m3 "$tmp/wide" > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] || fail "9-bit operand accepted for e4m3"

# Standard input, missing settings, missing file.
"$EMU" verify - < "$tmp/good" > /dev/null || fail "verify - failed"
grep -v '^#' "$tmp/good" > "$tmp/noheader"
"$EMU" verify "$tmp/noheader" > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q -- "--op" "$tmp/err" || fail "no settings should exit 2 naming --op"
"$EMU" verify "$tmp/nonexistent" > /dev/null 2>&1
[ $? -eq 2 ] || fail "missing file should exit 2"
# A bad header: exit 2, the file, line and key named (not a command-line
# option), whatever is wrong with it.
header_refused() { # PATTERN HEADER-LINE
    { echo "# vectors"; echo "$2"; echo '3C00 3C00 4000 00'; } > "$tmp/hdr.tv"
    "$EMU" verify "$tmp/hdr.tv" > /dev/null 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "header '$2': exit $rc, want 2"
    grep -q -- "hdr.tv:$1" "$tmp/err" || fail "header '$2': message lacks 'hdr.tv:$1': $(cat "$tmp/err")"
}
H='#! emu-vectors op=add in=binary16 out=binary16'
header_refused "2: header key 'mode': 'rnx' is not a rounding mode" "$H mode=rnx"
header_refused "2: header key 'op': 'plus' is not an operation" "#! emu-vectors op=plus in=binary16"
header_refused "2: header key 'tiny': 'later' is neither" "$H tiny=later"
header_refused "2: header key 'saturate': 'maybe' is neither yes nor no" "$H saturate=maybe"
header_refused "2: header key 'seed': '-1' is not a non-negative integer" "$H seed=-1"
header_refused "2: header key 'in': format spec 'e4m3x'" "#! emu-vectors op=add in=e4m3x out=binary16"
header_refused "2: header key 'mdoe' is unknown" "$H mdoe=rz"
header_refused "2: header item 'rne' is not key=value" "$H rne"
header_refused "2: header key 'mode': empty value" "$H mode="
# A key given twice, on one line or on two: refused, both places named.
header_refused "2: header key 'mode' given twice on the line" "$H mode=rz mode=rne"
printf '#! emu-vectors op=add in=binary16 out=binary16 mode=rz\n#! emu-vectors mode=rne\n3C00 3C00 4000 00\n' > "$tmp/two.tv"
"$EMU" verify "$tmp/two.tv" > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "two.tv:2: header key 'mode' given twice (first at line 1)" "$tmp/err" ||
    fail "a key on two header lines: $(cat "$tmp/err")"
# An option overrides a bad header value (the way to read such a file).
"$EMU" verify --mode rne "$tmp/hdr.tv" > /dev/null 2>&1
{ echo "$H mode=rnx"; echo '3C00 3C00 4000 00'; } > "$tmp/over.tv"
"$EMU" verify --mode rne "$tmp/over.tv" > /dev/null ||
    fail "--mode should override the header's bad mode"

# A directory is not a vector file.
"$EMU" verify "$tmp" > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "is a directory" "$tmp/err" ||
    fail "verify DIR: $(cat "$tmp/err")"
echo "verify_errors: mismatches and malformed lines reported"
