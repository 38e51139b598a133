#!/bin/sh
# emu train with a language model (issue #13): a tiny gpt trains a few
# steps on the embedded text and on Debian's fortunes and writes the LM
# columns (bits per character and perplexity, each consistent with the
# loss), the evaluation rows and the data record in meta.json; a run
# stopped and resumed ends with exactly the files of an uninterrupted one;
# and bad input is refused with a clear message: text data with an image
# model and images with a language model, a window of 0, longer than the
# gpt's context or than the data, and text files that are missing, empty,
# hold a byte outside the vocabulary (named by offset and value) or more
# text than --data-max-bytes (naming the folder and the limit); a folder
# run stopped and resumed keeps its limit.
# Usage: sh train_lm.sh /path/to/emu
set -u
EMU=${1:?usage: train_lm.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_lm: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_lm.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib/train_common.sh"

# 640 characters of training text make an epoch of 640 / (4 * 16) = 10
# steps: two epochs, so an evaluation falls in the middle of the run.
LM="--model gpt:1-16-2-16 --data text --train-examples 640 --test-examples 400
    --batch 4 --seq-len 16 --eval-windows 6 --epochs 2 --optimizer adam
    --lr 0.003 --checkpoint-every 4 --stats-every 3 --preset bf16-sr"

# shellcheck disable=SC2086
if ! "$EMU" train $LM --out "$tmp/full" > "$tmp/log" 2>&1; then
    # The one reason to skip: the gpt model's sequence ops (branches
    # nn-lm and ops-seq of issue #13) are not in this build yet.
    if grep -q "not merged yet" "$tmp/log"; then
        echo "train_lm: skipped: the gpt model cannot run in this build: $(tail -1 "$tmp/log")"
        exit 77
    fi
    fail "the training run failed: $(cat "$tmp/log")"
    exit 1
fi
cat "$tmp/log"
r=$tmp/full

# ---- the files ---------------------------------------------------------------

for f in $FILES weights.safetensors; do
    [ -s "$r/$f" ] || fail "$f is missing"
done
head -1 "$r/steps.csv" | grep -q '^step,epoch,lr,loss,bits_per_char,perplexity,accuracy,loss_scale,' ||
    fail "steps.csv header: $(head -1 "$r/steps.csv")"
[ "$(rows "$r")" = 20 ] || fail "steps.csv has $(rows "$r") rows, want 20 (2 epochs of 10)"
# bits_per_char = loss / ln 2 and perplexity = exp(loss), to 1e-7 relative.
awk -F, 'NR > 1 {
    if ($4 <= 0 || $4 > 10) { print "loss " $4 " at step " $1; bad = 1 }
    b = $4 / log(2); p = exp($4)
    if ((b - $5)^2 > (1e-7 * b)^2 || (p - $6)^2 > (1e-7 * p)^2) {
        print "step " $1 ": loss " $4 " bits " $5 " perplexity " $6; bad = 1 }
    if ($7 < 0 || $7 > 1) { print "accuracy " $7; bad = 1 }
} END { exit bad }' "$r/steps.csv" > "$tmp/awk" || fail "steps.csv: $(cat "$tmp/awk")"
[ "$(head -1 "$r/eval.csv")" = "epoch,step,test_loss,test_accuracy,test_perplexity,test_bits_per_char" ] ||
    fail "eval.csv header: $(head -1 "$r/eval.csv")"
[ "$(sed 1d "$r/eval.csv" | cut -d, -f1,2 | tr '\n' ' ')" = "0,10 1,20 " ] ||
    fail "eval.csv rows: $(cat "$r/eval.csv")"
awk -F, 'NR > 1 { b = $3 / log(2); p = exp($3)
    if ((b - $6)^2 > (1e-7 * b)^2 || (p - $5)^2 > (1e-7 * p)^2) bad = 1 }
    END { exit bad }' "$r/eval.csv" || fail "eval.csv columns disagree: $(cat "$r/eval.csv")"
for key in '"seq_len": 16' '"vocab": 97' '"eval_windows": 6' \
           '"source": "embedded story generator, seed 1"' \
           '"generator_bits_per_char": ' '"train_tokens": 640' \
           '"test_bits_per_char": ' '"completed": true'; do
    grep -q -- "$key" "$r/meta.json" || fail "meta.json lacks $key"
done
grep -Eq 'done: 20 steps .*validation loss [0-9.]+, perplexity [0-9.]+ \([0-9.]+ bits/char\)' \
    "$tmp/log" || fail "no end-of-run summary with loss and perplexity"
grep -q 'epoch 0: validation loss' "$tmp/log" || fail "no evaluation line"

# ---- stopped and resumed ----------------------------------------------------------

# Stopped after 7 steps (between checkpoints), resumed, stopped after 6
# more (past the mid-run evaluation), resumed to the end.
# shellcheck disable=SC2086
EMU_TRAIN_STOP_AFTER=7 "$EMU" train $LM --out "$tmp/cut" > "$tmp/log" 2>&1
rc=$?
[ $rc = 143 ] || fail "the stopped run exited $rc, want 143: $(cat "$tmp/log")"
EMU_TRAIN_STOP_AFTER=6 "$EMU" train --resume "$tmp/cut" > "$tmp/log" 2>&1
rc=$?
[ $rc = 143 ] || fail "the first resume exited $rc, want 143: $(cat "$tmp/log")"
grep -q "resuming at step 7 " "$tmp/log" || fail "first resume: $(cat "$tmp/log")"
"$EMU" train --resume "$tmp/cut" > "$tmp/log" 2>&1 || fail "resume: $(cat "$tmp/log")"
grep -q "resuming at step 13 " "$tmp/log" || fail "second resume: $(cat "$tmp/log")"
same_run "$r" "$tmp/cut"
echo "stopped at steps 7 and 13, resumed: the files equal the uninterrupted run's"

# A resume with another window length is another run.
expect_refusal "resume with another window" "$tmp/cut" "resume" \
    train --resume "$tmp/cut" --seq-len 8

# ---- fortunes -------------------------------------------------------------------

if [ -f /usr/share/games/fortunes/cookie ]; then
    "$EMU" train --model gpt:1-16-2-32 --data fortunes --batch 2 --steps 2 \
        --eval-windows 2 --quiet --out "$tmp/fort" > "$tmp/log" 2>&1 ||
        fail "fortunes run: $(cat "$tmp/log")"
    grep -q 'cookie (245093 bytes)' "$tmp/fort/meta.json" ||
        fail "meta.json does not list the fortunes files read"
    grep -q '"seq_len": 32' "$tmp/fort/meta.json" ||
        fail "the gpt's own T is not the default window"
else
    echo "fortunes: /usr/share/games/fortunes/cookie missing (package fortunes); that case skipped"
fi

# ---- a folder of text files, its size limit ------------------------------------

# 12 records in three files; a run under a raised limit stopped after 1 of
# 3 steps and resumed ends as the uninterrupted one (the checkpoint keeps
# the limit: the resume reads the folder again under it).
mkdir -p "$tmp/texts"
for f in a b c; do
    for k in 1 2 3 4; do printf 'record %s%s, some words\n%%\n' $f $k; done > "$tmp/texts/$f"
done
FT="--model gpt:1-16-2-8 --data fortunes --data-dir $tmp/texts --batch 2
    --steps 3 --checkpoint-every 1 --eval-windows 2 --data-max-bytes 4000 --quiet"
# shellcheck disable=SC2086
"$EMU" train $FT --out "$tmp/tf" > "$tmp/log" 2>&1 || fail "folder run: $(cat "$tmp/log")"
# shellcheck disable=SC2086
EMU_TRAIN_STOP_AFTER=1 "$EMU" train $FT --out "$tmp/tfcut" > "$tmp/log" 2>&1
[ $? = 143 ] || fail "the stopped folder run: $(cat "$tmp/log")"
"$EMU" train --resume "$tmp/tfcut" > "$tmp/log" 2>&1 || fail "folder resume: $(cat "$tmp/log")"
same_run "$tmp/tf" "$tmp/tfcut"

# ---- refusals -----------------------------------------------------------------

o=$tmp/never
expect_error() {
    what=$1 pat=$2
    shift 2
    "$EMU" train "$@" --quiet --out "$o" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc (want 2) for: emu train $*: $(cat "$tmp/err")"
    grep -Eqi -- "$pat" "$tmp/err" || fail "$what: message lacks '$pat': $(cat "$tmp/err")"
    if [ -e "$o" ]; then
        [ -z "$(ls -A "$o")" ] || fail "$what: the refused run wrote $(ls "$o" | tr '\n' ' ')"
        rm -rf "$o"
    fi
}
T="--model gpt:1-16-2-16 --batch 2 --steps 1"
expect_error "text with an image model" "--data text is text, for a language model.*mlp" \
    --model mlp:784-16-10 --data text
expect_error "images with a language model" "is a language model; --data synthetic is images" \
    --model gpt --data synthetic
expect_error "a window of 0" "--seq-len: '0' is not a whole number" $T --data text --seq-len 0
expect_error "a window beyond the gpt's context" "seq" $T --data text --seq-len 17
expect_error "a window longer than the data" "context of 16 tokens is longer than the data.*holds 10" \
    $T --data text --train-examples 10
expect_error "a window longer than the validation data" "text/val.*longer than the data" \
    $T --data text --test-examples 16
expect_error "a window for an image model" "seq_len.*language models only" \
    --model mlp:784-16-10 --seq-len 8 --steps 1
printf 'one\n%%\ntwo caf\303\251\n%%\n' > "$tmp/bad.txt"
expect_error "a byte outside the vocabulary" "bad.txt.*byte 13 is 0xc3, outside the vocabulary" \
    $T --data fortunes --data-dir "$tmp/bad.txt"
: > "$tmp/empty.txt"
expect_error "an empty file" "empty.txt.*empty" $T --data fortunes --data-dir "$tmp/empty.txt"
expect_error "a missing file" "nothing-here.*cannot open" $T --data fortunes \
    --data-dir "$tmp/nothing-here"
size=$(cat "$tmp/texts/a" "$tmp/texts/b" "$tmp/texts/c" | wc -c)
expect_error "a folder over the size limit" \
    "texts: the folder's text files hold $size bytes of text, more than the limit of 100 bytes.*--data-max-bytes" \
    $T --data fortunes --data-dir "$tmp/texts" --data-max-bytes 100
expect_error "a file over the size limit" \
    "texts/a: the file holds more text than the limit of 20 bytes" \
    $T --data fortunes --data-dir "$tmp/texts/a" --data-max-bytes 20
expect_error "a size limit without files" "data_max_bytes.*--data fortunes only" \
    $T --data text --data-max-bytes 100
expect_error "an unknown data set" "'words' is not synthetic, fashion-mnist, text or fortunes" \
    $T --data words

[ $fails -eq 0 ] || exit 1
echo "train_lm: all checks passed"
