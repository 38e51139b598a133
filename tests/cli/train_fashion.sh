#!/bin/sh
# On Fashion-MNIST (Debian's dataset-fashion-mnist, which CI installs), the
# fp32 preset trains the LeNet-style CNN to a stated test accuracy in one
# epoch: SGD, lr 0.01, momentum 0.9, batch 64, seed 1.  Measured: 85.8%
# (lr 0.02: 85.7%; the default lr 0.05 reaches only 74.5%); asserted: at
# least 82%.  About 80 s of one core (937 steps of ~60 ms, the test set,
# loading); prints SKIPPED and exits 77 (CTest: skipped) when the data is
# not installed.
# Usage: sh train_fashion.sh /path/to/emu
set -u
EMU=${1:?usage: train_fashion.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
DATA=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
         t10k-labels-idx1-ubyte; do
    if [ ! -f "$DATA/$f.gz" ]; then
        echo "SKIPPED train_fashion: $DATA/$f.gz not found"
        exit 77
    fi
done
fail() { echo "FAIL train_fashion: $*" >&2; exit 1; }
tmp=$(mktemp -d ./train_fashion.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
"$EMU" train --preset fp32 --model cnn --data fashion-mnist --data-dir "$DATA" \
    --epochs 1 --lr 0.01 --momentum 0.9 --batch 64 --seed 1 --out "$tmp/r" \
    > "$tmp/log" 2>&1 || fail "emu train exited non-zero: $(tail -5 "$tmp/log")"
end=$(date +%s)
m=$tmp/r/meta.json
grep -q '"completed": true' "$m" || fail "run not completed"
grep -q '"train": "fashion-mnist/train", "test": "fashion-mnist/test", "train_examples": 60000, "test_examples": 10000' "$m" ||
    fail "meta.json does not record the whole Fashion-MNIST: $(grep '"data"' "$m")"
grep -q "data: fashion-mnist/train (60000 examples)" "$tmp/log" ||
    fail "the run does not say which data it uses: $(head -3 "$tmp/log")"
steps=$(($(wc -l < "$tmp/r/steps.csv") - 1))
[ "$steps" -eq 937 ] || fail "$steps steps, expected 937 (60000 / 64)"
acc=$(sed -n 's/^ *"test_accuracy": \([0-9.e+-]*\),.*/\1/p' "$m")
awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.82) }' ||
    fail "test accuracy ${acc:-missing} after one epoch, expected >= 0.82 (measured 0.858)"
echo "train_fashion: test accuracy $acc after one epoch, $((end - start)) s"
