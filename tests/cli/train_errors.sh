#!/bin/sh
# emu train refuses bad input with a clear message and exit status 2, and
# overwrites nothing: unknown presets, options and policy keys,
# contradictory policies, bad numbers, bad models, missing or corrupt
# Fashion-MNIST files (IDX files made here: a good set first, as a control,
# then one fault each), and an output folder that holds a run.
# Usage: sh train_errors.sh /path/to/emu
set -u
EMU=${1:?usage: train_errors.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_errors: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_errors.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

# expect_error WHAT PATTERN ARGS...: emu train ARGS exits 2 and its
# message matches PATTERN (a grep -E expression, case-insensitive).  With
# $o as the output folder, the refused run must not have written into it
# (an empty folder left behind is tolerated).
QUICK="--quiet --train-examples 64 --test-examples 32 --batch 16 --steps 2"
o=$tmp/never
expect_error() {
    what=$1 pat=$2
    shift 2
    "$EMU" train "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc (want 2) for: emu train $*: $(cat "$tmp/err")"
    grep -Eqi -- "$pat" "$tmp/err" || fail "$what: message lacks '$pat': $(cat "$tmp/err")"
    if [ -e "$o" ]; then
        [ -z "$(ls -A "$o")" ] || fail "$what: the refused run wrote $(ls "$o" | tr '\n' ' ')"
        rm -rf "$o"
    fi
}

# ---- options and policies ------------------------------------------------------

expect_error "unknown preset" "unknown preset 'fp7'.*fp16-mpt" --preset fp7 --out "$o"
expect_error "unknown option" "unknown option '--colour'" --colour red --out "$o"
expect_error "unknown policy key" "colour" --set colour=red --out "$o"
expect_error "policy key without value" "weight" --set weight= --out "$o"
expect_error "unknown format" "e9m9m9|format" --set weight=e9m9m9 --out "$o"
expect_error "unknown rounding mode" "rounding mode" --set act_grad.mode=sideways --out "$o"
expect_error "master narrower than the weights" "master.*narrower" \
    --preset fp16-mpt --set master=e5m2 --out "$o"
expect_error "bf16 master for fp16 weights" "narrower" \
    --preset fp16-mpt --set master=bfloat16 --out "$o"
expect_error "zero loss scale" "scale.*positive" --preset fp16-mpt --set scale=0 --out "$o"
expect_error "negative loss scale" "scale.*positive" --set scaling=static --set scale=-8 --out "$o"
expect_error "infinite loss scale" "scale" --preset fp16-mpt --set scale=inf --out "$o"
expect_error "loss scale not a power of two" "power of two" --preset fp16-mpt --set scale=1000 --out "$o"
expect_error "growth <= 1" "growth" --preset fp16-mpt --set growth=1 --out "$o"
expect_error "backoff >= 1" "backoff" --preset fp16-mpt --set backoff=2 --out "$o"
expect_error "interval 0" "interval" --preset fp16-mpt --set interval=0 --out "$o"
expect_error "adaptive target 0" "target" --preset adaptive --set target=0 --out "$o"
expect_error "Kahan with a master copy" "kahan.*master" --preset fp16-mpt --set update=kahan --out "$o"
expect_error "accumulator key twice" "'acc' is given twice in 'sequential,acc=binary16,acc=binary32'" \
    --set accum=sequential,acc=binary16,acc=binary32 --out "$o"
expect_error "scaled-format key twice" "'block' is given twice" --set q.all=mxfp8,block=4,block=8 --out "$o"
expect_error "tensor-scaling key twice" "'history' is given twice" --preset fp8-delayed \
    --set tensor_scaling=delayed,history=4,history=8 --out "$o"
expect_error "format key twice" "'bias' is given twice" --set weight=e3m4,bias=5,bias=6 --out "$o"
expect_error "unknown exempt layers" "exempt.*first" --set exempt=middle --out "$o"
expect_error "loss multiplier 3" "loss_mult.*power of two" --loss-mult 3 --out "$o"
expect_error "loss multiplier 0" "--loss-mult: '0' must be > 0" --loss-mult 0 --out "$o"
expect_error "negative learning rate" "--lr: '-0.1' must be > 0" --lr -0.1 --out "$o"
expect_error "learning rate -1" "^emu train: --lr: '-1' must be > 0$" --lr -1 --out "$o"
expect_error "learning rate 0" "--lr: '0' must be > 0" --lr 0 --out "$o"
expect_error "negative clipping norm" "--clip-norm: '-1' must be >= 0" --clip-norm -1 --out "$o"
expect_error "clipping norm nan" "--clip-norm: 'nan' is not a number" --clip-norm nan --out "$o"
expect_error "negative warm-up" "--warmup: '-1'" --warmup -1 --out "$o"
expect_error "warm-up longer than the run" "3 warm-up steps \(--warmup\) in a run of 2 steps" \
    $QUICK --warmup 3 --out "$o"
expect_error "unknown schedule" "--lr-schedule: 'linear' is not constant, step or cosine" \
    --lr-schedule linear --out "$o"
expect_error "negative final lr" "--lr-min: '-0.1' must be >= 0" --lr-min -0.1 --out "$o"
expect_error "learning rate not a number" "--lr: 'fast' is not a number" --lr fast --out "$o"
expect_error "learning rate infinite" "--lr: 'inf' is not finite" --lr inf --out "$o"
expect_error "learning rate overflowing" "--lr: '1e999' is not finite" --lr 1e999 --out "$o"
expect_error "momentum -1" "--momentum: '-1' must lie in \[0, 1\)" --momentum -1 --out "$o"
expect_error "momentum 5" "--momentum: '5' must lie in \[0, 1\)" --momentum 5 --out "$o"
expect_error "weight decay -1" "--weight-decay: '-1' must be >= 0" --weight-decay -1 --out "$o"
expect_error "batch 0" "batch" --batch 0 --out "$o"
expect_error "threads 0" "threads" --threads 0 --out "$o"
expect_error "ref rate 2" "^emu train: --ref-rate: '2' must lie in \[0, 1\]$" --ref-rate 2 --out "$o"
# A scale multiplies the binary32 loss: 2^128 is beyond it.
expect_error "static loss scale 2^128" "scale.*2\^128 or more" \
    --set scaling=static --set scale=0x1p128 --out "$o"
expect_error "static loss scale 2^200" "scale.*2\^128 or more" \
    --set scaling=static --set scale=0x1p200 --out "$o"
expect_error "maximal loss scale 2^128" "max_scale.*2\^128 or more" \
    --preset fp16-mpt --set max_scale=0x1p128 --out "$o"
expect_error "loss scale 2^127 times loss_mult 2" "loss_mult.*2\^128" \
    --set scaling=static --set scale=0x1p127 --loss-mult 2 --out "$o"
expect_error "unknown optimizer" "optimizer" --optimizer rmsprop --out "$o"
expect_error "unknown schedule" "schedule" --schedule linear --out "$o"
expect_error "unknown data set" "--data" --data cifar --out "$o"
expect_error "positional argument" "unexpected argument" fp32 --out "$o"
expect_error "unknown model" "unknown model" --model resnet50 $QUICK --out "$o"
expect_error "MLP with the wrong input size" "784|inputs" --model mlp:100-10 $QUICK --out "$o"
expect_error "MLP with the wrong output size" "outputs|classes" --model mlp:784-32-7 $QUICK --out "$o"
expect_error "CNN with one width" "two conv" --model cnn:6 $QUICK --out "$o"
expect_error "fewer examples than a batch" "batch" --train-examples 8 --batch 16 --out "$o"
printf 'lr = 0.1\nsideways = 3\n' > "$tmp/bad.cfg"
expect_error "unknown key in a config file" "sideways" --config "$tmp/bad.cfg" --out "$o"
expect_error "missing config file" "nonexistent.cfg" --config "$tmp/nonexistent.cfg" --out "$o"
mkdir -p "$tmp/cfgdir"
expect_error "config file that is a folder" "--config .*cfgdir: cannot read" --config "$tmp/cfgdir" --out "$o"
printf '# rate\nlr = -1\n' > "$tmp/neg.cfg"
expect_error "bad value in a config file" "neg.cfg:2: lr: '-1' must be > 0" --config "$tmp/neg.cfg" --out "$o"
printf 'lr = 0.1\nbatch = 16\nlr = 0.2\n' > "$tmp/dup.cfg"
expect_error "option twice in a config file" "dup.cfg:3: 'lr' is set again \(first at .*dup.cfg:1\)" \
    --config "$tmp/dup.cfg" --out "$o"
printf 'weight = bfloat16\n\nweight = binary16\n' > "$tmp/dup2.cfg"
expect_error "policy key twice in a config file" "dup2.cfg:3: 'weight' is set again \(first at .*dup2.cfg:1\)" \
    --config "$tmp/dup2.cfg" --out "$o"
printf 'lr = 0.1\nweight = e9m9m9\n' > "$tmp/fmt.cfg"
expect_error "bad policy value in a config file" "fmt.cfg:2: weight=e9m9m9" --config "$tmp/fmt.cfg" --out "$o"
grep -q -- "--set" "$tmp/err" && fail "a config-file error is reported as --set: $(cat "$tmp/err")"

# ---- Fashion-MNIST files -----------------------------------------------------------

# be32 N: N as 4 big-endian bytes.
be32() {
    printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))"
    printf "\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"
}
# images FILE N H W [MAGIC]: an IDX image file of N random H x W images.
images() {
    { be32 "${5:-2051}"; be32 "$2"; be32 "$3"; be32 "$4"
      head -c $(($2 * $3 * $4)) /dev/urandom; } > "$1"
}
# labels FILE N [CLASSES] [MAGIC]: N labels 0, 1, ... CLASSES-1, 0, ...
labels() {
    { be32 "${4:-2049}"; be32 "$2"
      i=0
      while [ $i -lt "$2" ]; do
          printf "\\$(printf %03o $((i % ${3:-10})))"
          i=$((i + 1))
      done; } > "$1"
}
TI=train-images-idx3-ubyte TL=train-labels-idx1-ubyte
EI=t10k-images-idx3-ubyte EL=t10k-labels-idx1-ubyte
# dataset NAME: a good small set in $tmp/NAME (gzip-compressed), to break.
dataset() {
    mkdir -p "$tmp/$1"
    images "$tmp/$1/$TI" 64 28 28
    labels "$tmp/$1/$TL" 64
    images "$tmp/$1/$EI" 32 28 28
    labels "$tmp/$1/$EL" 32
    gzip -f "$tmp/$1/$TI" "$tmp/$1/$TL" "$tmp/$1/$EI" "$tmp/$1/$EL"
}
FM="--data fashion-mnist --quiet --batch 16 --steps 2"

if command -v gzip > /dev/null 2>&1; then
    # The control: a good set trains.
    dataset good
    "$EMU" train $FM --data-dir "$tmp/good" --out "$tmp/good_run" > "$tmp/out" 2>&1 ||
        fail "the good IDX set does not train: $(cat "$tmp/out")"
    grep -q '"train": "fashion-mnist/train"' "$tmp/good_run/meta.json" 2> /dev/null ||
        fail "the good IDX set's run does not record fashion-mnist in meta.json"

    mkdir -p "$tmp/empty"
    expect_error "no files" "$TI.gz.*cannot open" $FM --data-dir "$tmp/empty" --out "$o"

    dataset magic
    images "$tmp/magic/$TI" 64 28 28 2052
    gzip -f "$tmp/magic/$TI"
    expect_error "wrong magic" "$TI.gz.*magic 0x00000804" $FM --data-dir "$tmp/magic" --out "$o"

    dataset swapped # labels where the images should be
    cp "$tmp/swapped/$TL.gz" "$tmp/swapped/$TI.gz"
    expect_error "labels for images" "$TI.gz.*magic" $FM --data-dir "$tmp/swapped" --out "$o"

    dataset cut_gz # the compressed stream cut short
    size=$(wc -c < "$tmp/cut_gz/$TI.gz")
    head -c $((size / 2)) "$tmp/good/$TI.gz" > "$tmp/cut_gz/$TI.gz"
    expect_error "truncated gzip file" "$TI.gz.*(truncated|corrupt)" $FM --data-dir "$tmp/cut_gz" --out "$o"

    dataset cut_idx # a whole gzip file whose IDX data stop early
    { gzip -dc "$tmp/good/$TI.gz" | head -c $((16 + 63 * 784)); } | gzip > "$tmp/cut_idx/$TI.gz"
    expect_error "truncated IDX data" "$TI.gz.*truncated" $FM --data-dir "$tmp/cut_idx" --out "$o"

    dataset long_idx # trailing bytes
    { gzip -dc "$tmp/good/$TI.gz"; printf 'xyz'; } | gzip > "$tmp/long_idx/$TI.gz"
    expect_error "IDX file with trailing bytes" "$TI.gz.*trailing" $FM --data-dir "$tmp/long_idx" --out "$o"

    # A gzip bomb: a good file followed by 300 MB of zeros, 1.4 MB on
    # disk.  Refused at the first byte beyond the data the header promises,
    # without inflating the rest: the peak memory stays far below 300 MB.
    dataset bomb
    { gzip -dc "$tmp/good/$TI.gz"; head -c 300000000 /dev/zero; } | gzip -1 > "$tmp/bomb/$TI.gz"
    expect_error "gzip bomb" "$TI.gz: byte 50192: data beyond the 50176 bytes the header promises" \
        $FM --data-dir "$tmp/bomb" --out "$o"
    if /usr/bin/time -v true > /dev/null 2>&1; then
        /usr/bin/time -v "$EMU" train $FM --data-dir "$tmp/bomb" --out "$o" > /dev/null 2> "$tmp/time"
        kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time")
        echo "train_errors: the gzip bomb ($(wc -c < "$tmp/bomb/$TI.gz") bytes) peaked at $kb KB"
        [ "$kb" -lt 100000 ] || fail "the gzip bomb cost $kb KB of memory"
    fi

    # Headers that lie.  The images' array is allocated at the size the
    # header promises, so a promise no file of its size can keep (a gzip
    # stream inflates at most 1032 bytes a byte; a plain file holds its
    # size) is refused before that, naming the header's bytes; one within
    # the bound is refused as truncated, at the cost of the data present
    # (the pages past it are never touched).
    lie() { # lie COUNT: the good images under a header promising COUNT
        { be32 2051; be32 "$1"; be32 28; be32 28
          gzip -dc "$tmp/good/$TI.gz" | tail -c +17; }
    }
    dataset liar_far
    lie 1000000 | gzip > "$tmp/liar_far/$TI.gz"
    expect_error "a header promising more than a gzip file can hold" \
        "$TI.gz: bytes 4-15: the header promises 784000000 data bytes, more than a gzip file of [0-9]+ bytes can hold" \
        $FM --data-dir "$tmp/liar_far" --out "$o"
    dataset liar_plain
    lie 65 > "$tmp/liar_plain/$TI.gz"
    expect_error "a header promising more than a plain file holds" \
        "$TI.gz: bytes 4-15: the header promises 50960 data bytes, more than a plain file of 50192 bytes can hold" \
        $FM --data-dir "$tmp/liar_plain" --out "$o"
    dataset liar_near
    lie 20000 | gzip > "$tmp/liar_near/$TI.gz"
    expect_error "a header promising more images than the file holds" \
        "$TI.gz: 50176 data bytes after the header, the header promises 15680000 \\(file truncated\\)" \
        $FM --data-dir "$tmp/liar_near" --out "$o"
    if /usr/bin/time -v true > /dev/null 2>&1; then
        /usr/bin/time -v "$EMU" train $FM --data-dir "$tmp/liar_near" --out "$o" > /dev/null 2> "$tmp/time"
        kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time")
        echo "train_errors: the lying header (20000 images promised, 64 present) peaked at $kb KB"
        [ "$kb" -lt 100000 ] || fail "the lying header cost $kb KB of memory"
    fi

    dataset count # 60 labels for 64 images
    labels "$tmp/count/$TL" 60
    gzip -f "$tmp/count/$TL"
    expect_error "label count" "60 labels for 64 images" $FM --data-dir "$tmp/count" --out "$o"

    dataset garbage # not gzip, not IDX
    head -c 5000 /dev/urandom > "$tmp/garbage/$EI.gz"
    expect_error "garbage test images" "$EI.gz" $FM --data-dir "$tmp/garbage" --out "$o"

    # A test set that does not fit the model trained on the training set:
    # other image sizes, labels beyond the training set's classes.
    dataset shape
    images "$tmp/shape/$EI" 32 40 40
    gzip -f "$tmp/shape/$EI"
    expect_error "test images of another size" "$EI|test" $FM --data-dir "$tmp/shape" --out "$o"
    dataset classes
    labels "$tmp/classes/$EL" 32 60
    gzip -f "$tmp/classes/$EL"
    expect_error "test labels beyond the training classes" "$EL|test|class" $FM \
        --data-dir "$tmp/classes" --out "$o"
    else
    echo "train_errors: gzip not found, Fashion-MNIST file checks skipped"
fi

# ---- an output folder that holds a run ------------------------------------------------

r=$tmp/run
o=$tmp/never
"$EMU" train $QUICK --preset fp32 --seed 1 --out "$r" > "$tmp/out" 2>&1 ||
    fail "the first run failed: $(cat "$tmp/out")"
before=$( (cd "$r" && cksum ./* 2> /dev/null) )
expect_error "existing output folder" "resume.*force|force.*resume" $QUICK --preset fp32 --seed 2 --out "$r"
expect_error "existing output folder, another preset" "force" $QUICK --preset bf16-sr --out "$r"
[ "$before" = "$( (cd "$r" && cksum ./* 2> /dev/null) )" ] || fail "a refused run changed the files of $r"
# --force with a setting that is refused must leave the old run alone.
expect_error "--force with a bad model" "unknown model" $QUICK --model resnet50 --out "$r" --force
expect_error "--force with a bad policy" "narrower" $QUICK --preset fp16-mpt --set master=e5m2 \
    --out "$r" --force
expect_error "--force with missing data" "cannot open" $QUICK --data fashion-mnist \
    --data-dir "$tmp/nonexistent" --out "$r" --force
[ "$before" = "$( (cd "$r" && cksum ./* 2> /dev/null) )" ] ||
    fail "a refused run with --force changed or removed the files of $r: $(ls "$r" | tr '\n' ' ')"
"$EMU" train $QUICK --preset fp32 --seed 2 --out "$r" --force > "$tmp/out" 2>&1 ||
    fail "--force did not replace the run: $(cat "$tmp/out")"
grep -q '"seed": 2' "$r/meta.json" || fail "--force: meta.json is not the new run's"
touch "$tmp/file"
expect_error "output path is a file" "not a folder" $QUICK --out "$tmp/file"

# A folder that is not a run (no libemu meta.json) but holds files is
# never written into, --force or not: they may be a user's own.
u=$tmp/user
mkdir -p "$u"
echo "my own numbers" > "$u/steps.csv"
echo "my notes" > "$u/summary.txt"
before=$(cd "$u" && cksum ./*)
o=$tmp/never
expect_error "a folder of other files" "user: is not empty and holds no run.*(steps.csv|summary.txt)" \
    $QUICK --out "$u"
expect_error "a folder of other files, --force" "user: is not empty and holds no run" \
    $QUICK --out "$u" --force
echo '{"not": "libemu"}' > "$u/meta.json"
expect_error "a folder with another program's meta.json" "user: is not empty and holds no run" \
    $QUICK --out "$u" --force
rm "$u/meta.json"
[ "$before" = "$(cd "$u" && cksum ./*)" ] || fail "a refused run changed the user's files in $u"
mkdir -p "$tmp/emptydir"
"$EMU" train $QUICK --out "$tmp/emptydir" > "$tmp/out" 2>&1 ||
    fail "an empty folder is refused: $(cat "$tmp/out")"

# A resume without the run's meta.json says that, not "another configuration".
rm "$r/meta.json"
expect_error "resume without meta.json" "no meta.json" --resume "$r"

[ "$fails" -eq 0 ] || exit 1
echo "train_errors: ok"
