#!/bin/sh
# Builds the libFuzzer harnesses with clang (-fsanitize=fuzzer,address,
# undefined) and runs each for SECONDS (default 30), seeded from
# formats/*.fmt, tests/data/* and checkpoints of short runs.
#
#   fuzz/run.sh [SECONDS]
#   EMU_FUZZ_BUILD=dir  build directory (default build-fuzz in the repo)
#   CC=clang-15         another clang
#   JOBS=n              harnesses run at a time (default 2)
#
# The growing corpora live in $EMU_FUZZ_BUILD/corpus/<harness>, so a second
# run resumes where the first stopped; crash inputs go to
# $EMU_FUZZ_BUILD/artifacts/.  Exit status: 0 if no harness crashed.
set -eu
secs=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${EMU_FUZZ_BUILD:-$root/build-fuzz}
cc=${CC:-clang}

# Line tables only (-g1): enough for the crash reports' stack traces.
CC=$cc cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    -DEMU_BUILD_FUZZ=ON -DEMU_BUILD_TESTS=OFF -DEMU_BUILD_BENCH=OFF > "$build.cmake.log" 2>&1 ||
    { cat "$build.cmake.log" >&2; exit 2; }
cmake --build "$build" -j2 --target fuzz_format_spec fuzz_vectors fuzz_scaled \
    fuzz_vec_header fuzz_dot_header fuzz_tensorfile fuzz_text > "$build.build.log" 2>&1 ||
    { tail -n 40 "$build.build.log" >&2; exit 2; }
# fuzz_checkpoint, and emu to write its seeds.
cmake --build "$build" -j2 --target fuzz_checkpoint emu >> "$build.build.log" 2>&1 ||
    { tail -n 40 "$build.build.log" >&2; exit 2; }

seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds/fuzz_format_spec" "$seeds/fuzz_vectors" "$seeds/fuzz_scaled" \
    "$build/corpus/fuzz_format_spec" "$build/corpus/fuzz_vectors" \
    "$build/corpus/fuzz_scaled" "$build/artifacts"

# Inputs that once failed (fuzz/regress/HARNESS-what) start every run of
# their harness, so a regression is found at once, not by chance.
for f in "$root"/fuzz/regress/*; do
    [ -f "$f" ] || continue
    h=$(basename "$f"); h=${h%%-*}
    mkdir -p "$seeds/$h" && cp "$f" "$seeds/$h/"
done

# Spec seeds: every shipped spec file and a few inline specs.
cp "$root"/formats/*.fmt "$seeds/fuzz_format_spec/"
i=0
for s in 'e4m3,nosubnormals,saturate' 'e5m10,bias=14' 'e3m4,bias=5,fn' \
         'binary16,saturate' 'e8m0,unsigned,nozero,nosubnormals,fn' 'e2m1,finite' \
         'e8m0,signed'; do
    i=$((i + 1))
    printf '%s' "$s" > "$seeds/fuzz_format_spec/inline$i"
done

# Vector seeds: three layout bytes (operands-1, operand bits-1, result
# bits-1, each taken modulo the harness's range), then lines of a data file.
for f in "$root"/tests/data/*.tv; do
    base=$(basename "$f" .tv)
    case $base in
        *sqrt*) layout='\000\017\017' ;;
        *f32_to_f16*) layout='\000\037\017' ;;
        *_eq_* | *_lt_* | *_le_*) layout='\001\017\000' ;;
        *) layout='\001\017\017' ;;
    esac
    { printf "$layout"; head -n 40 "$f"; } > "$seeds/fuzz_vectors/$base"
done

# Scaled-format seeds: a spec line, three layout bytes (rows, columns,
# axis and mode), then binary32 data: 1.0, -3.5, 1e-40, inf, NaN, 448...
i=0
for s in mxfp8 mxfp4 nvfp4 mxint8 'mxfp6-e3m2,block=7' 'mxfp8,block=4x3' \
         'elem=e4m3,scale=none,tensor=yes' 'elem=e5m2,scale=e4m3,block=5,rule=amax,scale_mode=ru'; do
    i=$((i + 1))
    { printf '%s\n\003\040\005' "$s"
      printf '\000\000\200\077\000\000\140\300\131\131\021\000\000\000\200\177\000\000\300\177\000\000\340\103'
    } > "$seeds/fuzz_scaled/seed$i"
done

# Checkpoint seeds: short runs of small models under policies with
# different state (master weights and a dynamic scale; delayed FP8
# scaling with its amax histories; MX operands; Kahan buffers).  Their
# final weights (weights.safetensors) seed the tensor-file reader.
mkdir -p "$seeds/fuzz_checkpoint" "$build/corpus/fuzz_checkpoint" \
    "$seeds/fuzz_tensorfile" "$build/corpus/fuzz_tensorfile"
i=0
for pol in fp16-mpt fp8-delayed mxfp4 bf16-kahan; do
    i=$((i + 1))
    "$build/cli/emu" train --quiet --preset $pol --model mlp:784-4-10 --train-examples 32 \
        --test-examples 16 --batch 16 --steps 1 --stats-every 0 --out "$seeds/run$i" > /dev/null 2>&1 &&
        cp "$seeds/run$i/checkpoint.bin" "$seeds/fuzz_checkpoint/seed$i" &&
        cp "$seeds/run$i/weights.safetensors" "$seeds/fuzz_tensorfile/seed$i"
    rm -rf "$seeds/run$i"
done
# Tensor-file seeds in the other dtypes, with escapes and metadata (the
# 8-byte length, the JSON header, the data).
tf_seed() { # NAME JSON DATA(printf escapes)
    n=$(printf '%s' "$2" | wc -c)
    { printf "\\$(printf %o $((n % 256)))\\$(printf %o $((n / 256 % 256)))\\0\\0\\0\\0\\0\\0"
      printf '%s' "$2"; printf "$3"; } > "$seeds/fuzz_tensorfile/$1"
}
tf_seed f16 '{"__metadata__":{"k":"v\u00e9"},"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}' '\000\074\001\200'
tf_seed mixed '{"b":{"dtype":"BF16","shape":[],"data_offsets":[8,10]},"d":{"dtype":"F64","shape":[1,1],"data_offsets":[0,8]}}' \
    '\232\231\231\231\231\231\271\077\200\077'

# Header seeds: the headers emu gen and emu dot gen write.
for h in fuzz_vec_header fuzz_dot_header; do
    mkdir -p "$seeds/$h" "$build/corpus/$h"
done
cat > "$seeds/fuzz_vec_header/gen" <<'HDR'
# emu gen (libemu 0.1.0): add, e4m3 -> e4m3, mode rne, tininess after, level 1, seed 0
#! emu-vectors op=add in=e4m3,bias=7,specials=fn,overflow=nan,subnormals=yes,signed=yes,zero=yes out=e4m3,bias=7,specials=fn,overflow=nan,subnormals=yes,signed=yes,zero=yes mode=rne tiny=after saturate=no seed=0
HDR
printf '#! emu-vectors op=convert in=binary32 out=bf16 mode=sr13 tiny=before saturate=yes seed=5\n' \
    > "$seeds/fuzz_vec_header/sr"
cat > "$seeds/fuzz_dot_header/gen" <<'HDR'
# emu dot gen: 3 products of e5m2
#! emu-dot in=e5m2 out=binary16 accum=kahan,acc=binary16,prod=exact,mode=rne mode=rz k=3 seed=9
HDR
printf '#! emu-dot in=e4m3 accum=fused,k=4,w=14,acc=binary32 k=16\n' > "$seeds/fuzz_dot_header/fused"

# Text seeds: a control byte (bit 0: one file or a folder of files cut at
# NUL bytes; bits 1..3: the window length), a limit byte (16 L bytes, 0:
# the default), then text: records separated by "%" lines, from Debian's
# fortunes where installed (the first 3 KiB of a few files) and made up.
mkdir -p "$seeds/fuzz_text" "$build/corpus/fuzz_text"
i=0
for f in cookie riddles tao; do
    i=$((i + 1))
    if [ -f "/usr/share/games/fortunes/$f" ]; then
        { printf '\006\000'; head -c 3072 "/usr/share/games/fortunes/$f"; } > "$seeds/fuzz_text/fortunes$i"
    fi
done
recs=''
for k in 1 2 3 4 5 6 7 8 9 10 11 12; do recs="$recs$(printf 'rec %s\tx\n%%' $k)
"; done
{ printf '\002\000'; printf '%s' "$recs"; } > "$seeds/fuzz_text/file"
{ printf '\005\000'; printf '%s' "$recs" | head -c 60; printf '\000';
  printf '%s' "$recs" | tail -c +61; } > "$seeds/fuzz_text/folder"
{ printf '\003\010'; printf '%s' "$recs"; } > "$seeds/fuzz_text/limit"

harnesses="fuzz_format_spec fuzz_vectors fuzz_scaled fuzz_vec_header fuzz_dot_header fuzz_checkpoint fuzz_tensorfile fuzz_text"

# One harness: run it, then report on it.  Each harness has its own
# corpus, log and artifact prefix, so JOBS of them run side by side.
fuzz_one() { # HARNESS -> exit status 0 or 1, report in $build/$1.report
    h=$1 rc=0
    {
        echo "== $h: $secs s"
        if ! "$build/fuzz/$h" -max_total_time="$secs" -print_final_stats=1 \
                -artifact_prefix="$build/artifacts/$h-" \
                "$build/corpus/$h" "$seeds/$h" > "$build/$h.log" 2>&1; then
            echo "$h: FAILED (see $build/$h.log and $build/artifacts/)"
            grep -E 'ERROR|SUMMARY|fuzz_|abort' "$build/$h.log" | head -n 20
            rc=1
        fi
        grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|^#[0-9]+.*DONE' \
            "$build/$h.log" || true
        echo "corpus: $(ls "$build/corpus/$h" | wc -l) inputs"
    } > "$build/$h.report"
    return $rc
}

# JOBS harnesses at a time (default 2, the CI machine's cores), each for
# the full SECONDS; the reports are printed in the list's order.
jobs=${JOBS:-2}
status=0
set -- $harnesses
while [ $# -gt 0 ]; do
    batch='' pids=''
    while [ $# -gt 0 ] && [ "$(echo $batch | wc -w)" -lt "$jobs" ]; do
        fuzz_one "$1" & pids="$pids $!" batch="$batch $1"
        shift
    done
    for p in $pids; do wait "$p" || status=1; done
    for h in $batch; do cat "$build/$h.report"; done
done
exit $status
