#!/bin/sh
# emu info: good formats print their encoding; each kind of bad spec is
# refused (non-zero exit) with the file, line and key in the message.
# Usage: sh info_errors.sh /path/to/emu
set -u
EMU=${1:?usage: info_errors.sh /path/to/emu}
fail() { echo "FAIL info_errors: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# expect_error DESCRIPTION PATTERN... -- ARGS: exit non-zero, stderr
# matching every PATTERN.
expect_error() {
    what=$1; shift
    pats=
    while [ "$1" != "--" ]; do pats="$pats
$1"; shift; done
    shift
    "$EMU" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -ne 0 ] || fail "$what: exit 0 for: emu $*"
    [ $rc -eq 2 ] || fail "$what: exit $rc (want 2) for: emu $*"
    echo "$pats" | while IFS= read -r p; do
        [ -z "$p" ] && continue
        grep -q -- "$p" "$tmp/err" ||
            fail "$what: message lacks '$p': $(cat "$tmp/err")"
    done || exit 1
}

spec() { printf "$2" > "$tmp/$1.fmt"; }
spec unknown   'name = x1\nexponent = 4\nmantissa = 3\ncolour = red\n'
spec zeroexp   'name = x2\nexponent = 0\nmantissa = 3\n'
spec negexp    'name = x3\n# a comment\nexponent = -3\nmantissa = 3\n'
spec absurd    'name = x4\nexponent = 4\nmantissa = 99999999999999999999\n'
spec nonormal  'name = x5\nexponent = 1\nmantissa = 2\nspecials = ieee\n'
spec dup       'name = fp16\nexponent = 5\nmantissa = 10\n'
spec twice     'name = x6\nexponent = 4\nexponent = 5\nmantissa = 3\n'
printf 'name = x7\nexp\001onent = 4\n' > "$tmp/garbage.fmt"
head -c 300 /dev/urandom 2>/dev/null | tr -d '\n' > "$tmp/random.fmt"

expect_error "unknown key" "unknown.fmt:4" "colour" -- info "$tmp/unknown.fmt"
expect_error "0 exponent bits" "zeroexp.fmt:2" "exponent" -- info "$tmp/zeroexp.fmt"
expect_error "negative width" "negexp.fmt:3" "exponent" -- info "$tmp/negexp.fmt"
expect_error "absurd width" "absurd.fmt:3" "mantissa" -- info "$tmp/absurd.fmt"
expect_error "no normal numbers" "nonormal.fmt" "no normal" -- info "$tmp/nonormal.fmt"
expect_error "key given twice" "twice.fmt:3" "exponent" -- info "$tmp/twice.fmt"
expect_error "missing file" "missing.fmt" "cannot open" -- info "$tmp/missing.fmt"
expect_error "duplicate name" "dup.fmt" "fp16" "already" -- --load "$tmp/dup.fmt" info binary16
spec alias    'name = mine2\n# fp16 is taken\n  aliases = m2, fp16\nexponent = 5\nmantissa = 10\n'
expect_error "alias taken" "alias.fmt:3: key 'aliases': 'fp16' is already" -- --load "$tmp/alias.fmt" info binary16
expect_error "name taken, its line" "dup.fmt:1: key 'name'" -- --load "$tmp/dup.fmt" info binary16
expect_error "garbage bytes" "garbage.fmt:2" "0x01" -- info "$tmp/garbage.fmt"
expect_error "random bytes" "random.fmt" -- info "$tmp/random.fmt"
expect_error "inline unknown key" "e4m3,colour=red" "colour" -- info 'e4m3,colour=red'
expect_error "inline 0 exponent bits" "e0m3" "exponent" -- info e0m3
expect_error "inline absurd bias" "bias" -- info 'e4m3,bias=99999'
expect_error "inline no normals" "no normal" -- info 'e1m2,ieee'
expect_error "unknown name" "nosuchformat" -- info nosuchformat
expect_error "no argument" "missing FORMAT" -- info

# Good specs: name, inline spec, file; the encoding is described.
"$EMU" info e4m3 > "$tmp/out" || fail "info e4m3 exited $?"
grep -q "canonical NaN *0x7f" "$tmp/out" || fail "e4m3 canonical NaN is not 0x7f"
grep -q "^max  *448 " "$tmp/out" || fail "e4m3 max is not 448"
"$EMU" info 'e5m10,bias=14' > "$tmp/out" || fail "inline spec refused"
grep -q "^emax  *16$" "$tmp/out" || fail "e5m10,bias=14 should have emax 16"
printf 'name = mine\nexponent = 3\nmantissa = 2\nspecials = fnuz\n' > "$tmp/mine.fmt"
"$EMU" info "$tmp/mine.fmt" > "$tmp/out" || fail "info FILE.fmt exited $?"
grep -q "canonical NaN *0x20" "$tmp/out" || fail "fnuz e3m2 NaN should be 0x20"
"$EMU" --load "$tmp/mine.fmt" info mine > /dev/null || fail "--load then name failed"
head -n 1 "$tmp/out" | grep -q "mine.fmt: declares 'mine'" ||
    fail "info FILE.fmt is not titled with the file: $(head -n 1 "$tmp/out")"
# A file that claims a registered name is titled with its path, and said
# not to be the registered format.
printf 'name = e4m3\nexponent = 5\nmantissa = 2\n' > "$tmp/claims.fmt"
"$EMU" info "$tmp/claims.fmt" > "$tmp/out" || fail "info claims.fmt exited $?"
head -n 1 "$tmp/out" | grep -q "claims.fmt: declares 'e4m3'" ||
    fail "a file claiming e4m3 is titled: $(head -n 1 "$tmp/out")"
grep -q "not the registered e4m3" "$tmp/out" || fail "claims.fmt is not told apart from the built-in e4m3"
for f in $("$EMU" formats --csv | tail -n +2 | cut -d, -f1); do
    "$EMU" info "$f" > /dev/null || fail "info $f exited $?"
done
echo "info_errors: all bad specs refused with file/line/key"
