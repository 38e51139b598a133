#!/bin/sh
# A damaged checkpoint.bin is refused, naming the offsets that fail, and
# changes nothing: one byte flipped at every offset of the header, of
# every section's header, at the start, middle and end of every
# section's body, and of the trailer (each flip must be reported with a
# range of offsets that holds it; with EMU_TEST_SCALE below 1, check.sh's
# sanitizer run, only the first and last byte of each field of the
# header, the section headers and the trailer, and the body bytes above:
# each field's checks still run instrumented, with fewer process starts
# under ASan); the file cut at every section boundary and one byte short;
# a byte added.  The control: the intact checkpoint
# resumes.  The layout is libemu/nn_ckpt.h's.
# Usage: sh train_checkpoint.sh /path/to/emu
set -u
EMU=${1:?usage: train_checkpoint.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_checkpoint: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_checkpoint.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib/train_common.sh"

# A run stopped after 2 of its 8 steps (EMU_TRAIN_STOP_AFTER acts as
# SIGTERM): a checkpoint to resume.
r=$tmp/r
EMU_TRAIN_STOP_AFTER=2 "$EMU" train --quiet --train-examples 128 --test-examples 32 \
    --batch 16 --model mlp:784-8-10 --out "$r" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 143 ] || fail "the stopped run exited $rc (want 143): $(cat "$tmp/out")"
ck=$r/checkpoint.bin
[ -s "$ck" ] || { fail "no checkpoint"; exit 1; }
size=$(wc -c < "$ck")

# u32 OFF / u64 OFF: the little-endian integer at offset OFF of $ck.
byte() { od -An -tu1 -j "$1" -N1 "$ck" | tr -d ' '; }
u32() { echo $(($(byte "$1") | $(byte $(($1 + 1))) << 8 | $(byte $(($1 + 2))) << 16 | $(byte $(($1 + 3))) << 24)); }
u64() { echo $(($(u32 "$1") | $(u32 $(($1 + 4))) << 32)); }

[ "$(u64 16)" -eq "$size" ] || fail "the header gives $(u64 16) bytes, the file has $size"

# flip OFF: $tmp/c is the run with byte OFF of its checkpoint inverted;
# the resume must fail with exit 2, name a range of offsets holding OFF,
# and leave the folder unchanged.  The folder is copied once, and the
# byte put back after each flip that changed nothing (each process costs
# tens of milliseconds here, and more under ASan).
full=$(awk -v s="${EMU_TEST_SCALE:-1}" 'BEGIN { print (s + 0 >= 1) }')
flips=0
cp -R "$r" "$tmp/c"
poke() { printf "\\$(printf %03o "$2")" |
             dd of="$tmp/c/checkpoint.bin" bs=1 seek="$1" conv=notrunc 2> /dev/null; }
flip() {
    off=$1
    b=$(byte "$off")
    poke "$off" $((b ^ 255))
    before=$(snapshot "$tmp/c")
    "$EMU" train --resume "$tmp/c" --quiet > "$tmp/out" 2> "$tmp/err"
    rc=$?
    flips=$((flips + 1))
    if [ "$before" = "$(snapshot "$tmp/c")" ]; then
        poke "$off" "$b"
    else
        fail "byte $off flipped: the folder changed"
        rm -rf "$tmp/c"
        cp -R "$r" "$tmp/c"
    fi
    [ $rc -eq 2 ] || { fail "byte $off flipped: exit $rc (want 2): $(cat "$tmp/err")"; return; }
    range=$(sed -n '/.*offset \([0-9]*\)\(\.\.[0-9]*\)\{0,1\}[: (].*/{s//\1\2/p;q;}' "$tmp/err")
    lo=${range%%..*}
    hi=${range##*..}
    [ -n "$lo" ] && [ "$lo" -le "$off" ] && [ "$off" -le "$hi" ] ||
        fail "byte $off flipped: the message does not name a range holding it: $(cat "$tmp/err")"
}

# The control.
cp -R "$r" "$tmp/good"
"$EMU" train --resume "$tmp/good" --quiet > "$tmp/out" 2>&1 ||
    fail "the intact checkpoint does not resume: $(cat "$tmp/out")"

# field POS LEN: flips the field's bytes (its first and last only when
# not $full).
field() {
    f=0
    while [ $f -lt "$2" ]; do
        if [ "$full" = 1 ] || [ $f -eq 0 ] || [ $f -eq $(($2 - 1)) ]; then
            flip $(($1 + f))
        fi
        f=$((f + 1))
    done
}

# Header: magic, version, section count, file size, crc32.
field 0 8; field 8 4; field 12 4; field 16 8; field 24 4
# Sections.
pos=28 ends=""
for tag in CONF POLI STAT LAYR TENS SITE TIME; do
    [ "$(dd if="$ck" bs=1 skip=$pos count=4 2> /dev/null)" = "$tag" ] ||
        { fail "no section $tag at offset $pos"; break; }
    len=$(u64 $((pos + 4)))
    field $pos 4; field $((pos + 4)) 8; field $((pos + 12)) 4  # tag, length, crc32
    body=$((pos + 16))
    if [ "$len" -gt 0 ]; then
        flip $body
        flip $((body + len / 2))
        flip $((body + len - 1))
    fi
    pos=$((body + len))
    ends="$ends $pos"
done
[ $pos -eq $((size - 12)) ] || fail "the sections end at $pos, the trailer is at $((size - 12))"
# Trailer: end magic, crc32.
field $((size - 12)) 8; field $((size - 4)) 4
cmp -s "$tmp/c/checkpoint.bin" "$ck" || fail "the flipped bytes were not all put back"
echo "train_checkpoint: $flips flipped bytes refused"

# Cut short: at every section boundary, one byte short, inside the header.
for n in 0 7 27 28 $ends $((size - 1)); do
    rm -rf "$tmp/c"
    cp -R "$r" "$tmp/c"
    head -c "$n" "$ck" > "$tmp/c/checkpoint.bin"
    expect_refusal "checkpoint cut to $n of $size bytes" "$tmp/c" "truncated at offset $n" \
        train --resume "$tmp/c" --quiet
done
# A byte too many.
rm -rf "$tmp/c"
cp -R "$r" "$tmp/c"
printf x >> "$tmp/c/checkpoint.bin"
expect_refusal "a byte appended" "$tmp/c" "offset $size: the file goes on for 1 bytes" \
    train --resume "$tmp/c" --quiet

[ "$fails" -eq 0 ] || exit 1
echo "train_checkpoint: ok"
