#!/bin/sh
# emu train --model resnet:N (batch norm, residual additions, global
# average pooling, stride-2 shortcuts):
#   1. an emulated preset (fp16-mpt) trains a few steps on the embedded
#      data: finite, falling loss; the statistics name the batch-norm
#      reduction sites, the running statistics, the gradient additions of
#      the residual branches and the pooling; layers_steps.csv has a row
#      per parameter layer with torchvision's names;
#   2. a run stopped after 3 steps (EMU_TRAIN_STOP_AFTER) and resumed ends
#      with exactly the files of the uninterrupted run (the batch-norm
#      running statistics are in the checkpoint, and evaluation uses them);
#   3. the other emulated presets (bf16-sr, fp8-e5m2 with its exempt first
#      and last layers, mxfp8's scaled GEMM operands) run to the end with a
#      finite loss;
#   4. refusals: a block count that is not 1..9, and the per-layer adaptive
#      loss scaling, which the residual branches do not support.
# Usage: sh train_resnet.sh /path/to/emu
set -u
EMU=${1:?usage: train_resnet.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_resnet: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_resnet.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib/train_common.sh"

COMMON="--model resnet:1 --train-examples 192 --test-examples 40 --batch 16
        --epochs 1 --stats-every 2 --ref-rate 0.001 --lr 0.05"

# 1. fp16-mpt, the uninterrupted run.
mkdir -p "$tmp/full"
# shellcheck disable=SC2086
(cd "$tmp/full" && "$EMU" train $COMMON --preset fp16-mpt --out r) \
    > "$tmp/full/log" 2>&1 || fail "fp16-mpt run failed: $(cat "$tmp/full/log")"
r=$tmp/full/r
[ "$(rows "$r")" -eq 12 ] || fail "12 steps expected, steps.csv has $(rows "$r")"
# loss column 4: finite everywhere, the mean of the last 4 below the first 4
awk -F, 'NR > 1 { if ($4 != $4 + 0 || $4 == "nan" || $4 == "inf") bad = 1;
                  if (NR <= 5) a += $4; if (NR > 9) b += $4 }
         END { exit bad || !(b < a) }' "$r/steps.csv" ||
    fail "the loss is not finite or does not fall: $(cut -d, -f4 "$r/steps.csv" | tr '\n' ' ')"
for site in layer2.0.bn1.mean layer2.0.bn1.var layer2.0.bn1.xc layer2.0.bn1 \
            layer2.0.bn1.running_var layer2.0.bn1.dweight layer2.0.bn1.dinput \
            layer1.0.grad_add layer2.0.grad_add layer3.0.grad_add \
            layer2.0.downsample.0.conv layer2.0.downsample.1.var \
            layer1.0.add avgpool avgpool.dinput fc.matmul conv1.conv; do
    grep -q "^\"$site\"," "$r/ops.csv" || fail "ops.csv has no site $site"
done
# the shortcut's gradient sum of a block without downsampling is an
# act_grad site with every output counted
awk -F, -v s='"layer1.0.grad_add"' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
    $1 == s { found = 1; if ($c["role"] != "act_grad" || $c["results"] + 0 <= 0) bad = 1 }
    END { exit !found || bad }' "$r/ops.csv" ||
    fail "layer1.0.grad_add is not an act_grad site with results: $(grep '^"layer1.0.grad_add",' "$r/ops.csv")"
for layer in conv1 bn1 layer1.0.conv1 layer1.0.bn2 layer2.0.downsample.0 \
             layer2.0.downsample.1 layer3.0.bn2 fc; do
    grep -q "^0,$layer," "$r/layers_steps.csv" ||
        fail "layers_steps.csv has no row for $layer"
done
grep -q '"name": "layer3.0.downsample.1"' "$r/meta.json" ||
    fail "meta.json does not list layer3.0.downsample.1"

# 2. Stopped after 3 steps, resumed: the same run.
mkdir -p "$tmp/cut"
# shellcheck disable=SC2086
(cd "$tmp/cut" && EMU_TRAIN_STOP_AFTER=3 "$EMU" train $COMMON --preset fp16-mpt \
    --out r) > "$tmp/cut/log" 2>&1
rc=$?
[ $rc -eq 143 ] || fail "stopped after 3 steps: exit $rc (want 143): $(cat "$tmp/cut/log")"
(cd "$tmp/cut" && "$EMU" train --resume r) > "$tmp/cut/log" 2>&1 ||
    fail "the resume failed: $(cat "$tmp/cut/log")"
same_run "$tmp/full/r" "$tmp/cut/r"

# 3. The other presets run to the end.
for preset in bf16-sr fp8-e5m2 mxfp8; do
    # shellcheck disable=SC2086
    "$EMU" train $COMMON --steps 3 --preset $preset --out "$tmp/$preset" --quiet \
        > "$tmp/log" 2>&1 || { fail "$preset failed: $(cat "$tmp/log")"; continue; }
    awk -F, 'NR > 1 && ($4 == "nan" || $4 == "inf" || $4 != $4 + 0) { bad = 1 }
             END { exit bad }' "$tmp/$preset/steps.csv" ||
        fail "$preset: a loss is not finite"
done
grep -q '"name": "conv1", "exempt": true' "$tmp/fp8-e5m2/meta.json" &&
    grep -q '"name": "fc", "exempt": true' "$tmp/fp8-e5m2/meta.json" &&
    grep -q '"name": "bn1", "exempt": false' "$tmp/fp8-e5m2/meta.json" ||
    fail "fp8-e5m2: conv1 and fc should be exempt, bn1 not"
grep -q '^"layer2.0.conv1.q.w",' "$tmp/mxfp8/ops.csv" ||
    fail "mxfp8: the convolutions' weights are not quantized"

# 4. Refusals.
for bad in 0 10 x 1x ""; do
    "$EMU" train --model "resnet:$bad" --steps 1 --out "$tmp/bad" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "resnet:$bad: exit $rc (want 2)"
    grep -q "resnet:" "$tmp/err" && grep -q "1..9" "$tmp/err" ||
        fail "resnet:$bad: the message does not name the value and the range: $(cat "$tmp/err")"
    [ ! -e "$tmp/bad" ] || fail "resnet:$bad: created its folder"
done
"$EMU" train --model resnet:1 --preset adaptive --steps 1 --out "$tmp/bad" \
    > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "adaptive" "$tmp/err" ||
    fail "adaptive scaling on resnet: exit $rc, $(cat "$tmp/err")"

[ $fails -eq 0 ] || exit 1
echo "train_resnet: all checks passed"
