#!/bin/sh
# A damaged checkpoint.bin is refused, naming the offsets that fail, and
# changes nothing: one byte flipped at every offset of the header, of
# every section's header, at the start, middle and end of every
# section's body, and of the trailer (each flip must be reported with a
# range of offsets that holds it); the file cut at every section boundary
# and one byte short; a byte added.  The control: the intact checkpoint
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
# and leave the folder unchanged.
flips=0
flip() {
    off=$1
    rm -rf "$tmp/c"
    cp -R "$r" "$tmp/c"
    b=$(byte "$off")
    printf "\\$(printf %03o $((b ^ 255)))" |
        dd of="$tmp/c/checkpoint.bin" bs=1 seek="$off" conv=notrunc 2> /dev/null
    before=$(snapshot "$tmp/c")
    "$EMU" train --resume "$tmp/c" --quiet > "$tmp/out" 2> "$tmp/err"
    rc=$?
    flips=$((flips + 1))
    [ $rc -eq 2 ] || { fail "byte $off flipped: exit $rc (want 2): $(cat "$tmp/err")"; return; }
    [ "$before" = "$(snapshot "$tmp/c")" ] || fail "byte $off flipped: the folder changed"
    range=$(sed -n 's/.*offset \([0-9]*\)\(\.\.[0-9]*\)\{0,1\}[: (].*/\1\2/p' "$tmp/err" | head -n 1)
    lo=${range%%..*}
    hi=${range##*..}
    [ -n "$lo" ] && [ "$lo" -le "$off" ] && [ "$off" -le "$hi" ] ||
        fail "byte $off flipped: the message does not name a range holding it: $(cat "$tmp/err")"
}

# The control.
cp -R "$r" "$tmp/good"
"$EMU" train --resume "$tmp/good" --quiet > "$tmp/out" 2>&1 ||
    fail "the intact checkpoint does not resume: $(cat "$tmp/out")"

# Header.
off=0
while [ $off -lt 28 ]; do flip $off; off=$((off + 1)); done
# Sections.
pos=28 ends=""
for tag in CONF POLI STAT LAYR TENS SITE TIME; do
    [ "$(dd if="$ck" bs=1 skip=$pos count=4 2> /dev/null)" = "$tag" ] ||
        { fail "no section $tag at offset $pos"; break; }
    len=$(u64 $((pos + 4)))
    i=0
    while [ $i -lt 16 ]; do flip $((pos + i)); i=$((i + 1)); done
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
# Trailer.
off=$((size - 12))
while [ $off -lt "$size" ]; do flip $off; off=$((off + 1)); done
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
