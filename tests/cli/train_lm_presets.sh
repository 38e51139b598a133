#!/bin/sh
# The precision policy's op classes on the language models (issue #13):
# emulated presets (bf16-sr, fp16-mpt, fp8-hybrid and the scaled mxfp8)
# train a tiny gpt and a tiny lstm a few steps on the embedded text, and
# ops.csv names the sites the issue lists (h0.ln1.mean/var/rstd,
# h0.attn.scores, h0.attn.softmax and the softmax's gradients, the lstm's
# gates, cell and hidden state, the loss) in the formats the policy says:
# normalisation statistics, softmax and loss in binary32 in the
# low-precision presets, the softmax in binary16 under fp16-mpt (the
# paper's), the roles' formats everywhere else; --set overrides each
# class (and softmax=activation gives back the activation format);
# meta.json records the classes of a model that has them and leaves them
# out of an image run's record (which stays as it was).
# Usage: sh train_lm_presets.sh /path/to/emu
set -u
EMU=${1:?usage: train_lm_presets.sh /path/to/emu}
case $EMU in /*) ;; *) EMU=$(pwd)/$EMU ;; esac
fails=0
fail() { echo "FAIL train_lm_presets: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d ./train_lm_presets.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

GPT="--model gpt:1-16-2-16 --data text --train-examples 640 --test-examples 400
     --batch 4 --seq-len 16 --eval-windows 4 --steps 3 --quiet"
LSTM="--model lstm:1-16 --data text --train-examples 640 --test-examples 400
      --batch 4 --seq-len 16 --eval-windows 4 --steps 3 --quiet"

# run NAME ARGS...: trains into $tmp/NAME, failing the test if it fails.
run() {
    name=$1
    shift
    # shellcheck disable=SC2068
    "$EMU" train $@ --out "$tmp/$name" > "$tmp/$name.log" 2>&1 ||
        fail "$name: the run failed: $(cat "$tmp/$name.log")"
}

# expect RUN SITE ROLE FORMAT: ops.csv of RUN has SITE with ROLE and FORMAT.
expect() {
    got=$(awk -F, -v s="\"$2\"" '$1 == s { print $3 "," $4 }' "$tmp/$1/ops.csv" | tr -d '"')
    [ "$got" = "$3,$4" ] || fail "$1: site $2: got '${got:-no such site}', want $3,$4"
}

# meta RUN CLASS FORMAT MODE: meta.json's policy records CLASS so.
meta() {
    grep -q "\"$2\": {\"format\": \"$3\", \"spec\": \"[^\"]*\", \"mode\": \"$4\"}" \
        "$tmp/$1/meta.json" || fail "$1: meta.json lacks $2 = $3 $4: $(grep "\"$2\"" "$tmp/$1/meta.json")"
}

# ---- gpt --------------------------------------------------------------------------

# shellcheck disable=SC2086
run gpt-bf16 $GPT --preset bf16-sr
for s in h0.ln1.mean h0.ln1.var h0.ln1.rstd h0.ln2.var ln_f.rstd; do
    expect gpt-bf16 $s other binary32
done
for s in h0.attn.scores h0.attn.softmax h0.attn.datt h0.attn.dscores; do
    expect gpt-bf16 $s activation binary32
done
expect gpt-bf16 h0.ln1 activation bfloat16
expect gpt-bf16 h0.attn activation bfloat16
expect gpt-bf16 h0.attn.dq act_grad bfloat16
expect gpt-bf16 loss other binary32
expect gpt-bf16 loss.dlogits act_grad bfloat16
meta gpt-bf16 norm_stats binary32 rne
meta gpt-bf16 softmax binary32 rne
meta gpt-bf16 loss binary32 rne

# The scaled recipe: GEMM operands in MXFP8 (the transformer's linears
# quantized like any layer's), everything else, the classes included,
# binary32.
# shellcheck disable=SC2086
run gpt-mxfp8 $GPT --preset mxfp8
expect gpt-mxfp8 h0.ln1.var other binary32
expect gpt-mxfp8 h0.attn.softmax activation binary32
expect gpt-mxfp8 h0.attn.qkv.q.x activation mxfp8
expect gpt-mxfp8 h0.attn.qkv.q.w weight mxfp8
expect gpt-mxfp8 h0.mlp.fc.q.dy act_grad mxfp8
expect gpt-mxfp8 loss other binary32

# fp16-mpt: the softmax stored in binary16, as Micikevicius et al. do.
# shellcheck disable=SC2086
run gpt-fp16 $GPT --preset fp16-mpt
expect gpt-fp16 h0.attn.softmax activation binary16
expect gpt-fp16 h0.attn.dscores activation binary16
expect gpt-fp16 h0.ln1.rstd other binary32
meta gpt-fp16 softmax binary16 rne

# fp8-hybrid: E4M3 activations, but scores and probabilities binary32
# (before the classes they were E4M3, their gradients too).
# shellcheck disable=SC2086
run gpt-fp8 $GPT --preset fp8-hybrid
expect gpt-fp8 h0.attn activation e4m3
expect gpt-fp8 h0.attn.softmax activation binary32
expect gpt-fp8 h0.attn.dscores activation binary32
expect gpt-fp8 h0.ln1.var other binary32

# Overrides: each class takes a format and a rounding; softmax=activation
# is the old behaviour.
# shellcheck disable=SC2086
run gpt-set $GPT --preset fp8-hybrid --set norm_stats=bfloat16 \
    --set norm_stats.mode=sr --set softmax=activation --set loss=binary16
expect gpt-set h0.ln1.mean other bfloat16
expect gpt-set h0.ln1.var other bfloat16
expect gpt-set h0.attn.softmax activation e4m3
expect gpt-set h0.attn.dscores activation e4m3
expect gpt-set loss other binary16
meta gpt-set norm_stats bfloat16 sr
meta gpt-set loss binary16 rne
grep -q '"softmax": {"format": "activation"}' "$tmp/gpt-set/meta.json" ||
    fail "gpt-set: meta.json does not record softmax=activation"
# shellcheck disable=SC2086
run gpt-set2 $GPT --preset bf16-sr --set softmax=e5m2 --set softmax.mode=rz
expect gpt-set2 h0.attn.scores activation e5m2
meta gpt-set2 softmax e5m2 rz

# A rounding for a softmax that has no format of its own, and a bad format.
# shellcheck disable=SC2086
if "$EMU" train $GPT --preset bf16-sr --set softmax=activation \
        --set softmax.mode=sr --out "$tmp/bad" > "$tmp/bad.log" 2>&1 ||
   ! grep -q "softmax.mode.*give it a format first" "$tmp/bad.log"; then
    fail "softmax.mode without a softmax format: $(cat "$tmp/bad.log")"
fi
# shellcheck disable=SC2086
if "$EMU" train $GPT --preset bf16-sr --set norm_stats=e9m99 \
        --out "$tmp/bad2" > "$tmp/bad2.log" 2>&1 ||
   ! grep -q "norm_stats" "$tmp/bad2.log"; then
    fail "norm_stats=e9m99 accepted or not named: $(cat "$tmp/bad2.log")"
fi

# ---- lstm --------------------------------------------------------------------------

# No normalisation, no softmax: the gates, cell and hidden state in the
# roles' formats, the loss binary32; the record leaves out the classes
# (none differs from what a record without them meant).
# shellcheck disable=SC2086
run lstm-bf16 $LSTM --preset bf16-sr
for s in lstm.l0.gates lstm.l0.act lstm.l0.c lstm.l0.h; do
    expect lstm-bf16 $s activation bfloat16
done
expect lstm-bf16 lstm.l0.dgates act_grad bfloat16
expect lstm-bf16 loss other binary32
grep -q '"softmax"\|"norm_stats"' "$tmp/lstm-bf16/meta.json" &&
    fail "lstm-bf16: meta.json records classes the model has no op of"
# shellcheck disable=SC2086
run lstm-mxfp8 $LSTM --preset mxfp8
expect lstm-mxfp8 lstm.l0.c activation binary32
expect lstm-mxfp8 decoder.q.x activation mxfp8
expect lstm-mxfp8 loss other binary32

# ---- an image run's record ---------------------------------------------------------

# Its policy record is the one it had before the classes existed.
run mlp-bf16 --preset bf16-sr --model mlp --steps 2 --quiet
grep -q '"softmax"\|"norm_stats"\|"loss": {' "$tmp/mlp-bf16/meta.json" &&
    fail "mlp-bf16: meta.json records op classes"
expect mlp-bf16 loss other binary32

[ "$fails" = 0 ] && echo "train_lm_presets: all checks passed"
exit $((fails > 0))
