#!/bin/sh
# The whole test suite, as CI runs it (README.md's test command):
#   1. a RelWithDebInfo build and every CTest at full sample sizes;
#   1b. a baseline build without the CPU clones (-DEMU_NO_TARGET_CLONES)
#      and the suites that hold each fast path bit-identical to its scalar
#      reference, so the code a machine without AVX2/AVX-512 runs is
#      checked too (the release build runs only this machine's clone);
#   2. the same suite under AddressSanitizer + UndefinedBehaviorSanitizer,
#      with random samples scaled down (EMU_TEST_SCALE) — the rounding
#      paths' exhaustive loops are never scaled, so every rounding path
#      still runs instrumented; the long exhaustive MPFR loops of the
#      arithmetic suites check each input in one of their settings, round
#      robin (test_exhaustive_pick: every input and every setting runs);
#   3. the install check: a separate program built against the installed
#      library through pkg-config and through CMake's find_package;
#   4. a short bounded run of each fuzz harness (clang's libFuzzer);
#   5. every experiment in its quick mode, then every notebook executed
#      headless on those results (experiments/run_all.sh --quick).
# Set JOBS to change the parallelism (default 2, the CI machine's cores).
set -eu
cd "$(dirname "$0")/.."
jobs=${JOBS:-2}

step() { printf '\n== %s\n' "$*"; }

# The builds below carry line tables only (-g1: file, line and function
# for the sanitizers' and the fuzzers' stack traces), not the variables'
# locations: GCC's variable tracking was a third of the sanitizer build's
# compile time.  Debug information never changes the generated code.
lines_only="-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"

step "release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$lines_only"
cmake --build build -j"$jobs"
ctest --test-dir build -j"$jobs" --output-on-failure

step "baseline build (no target clones): fast paths against their scalar references"
base_suites="test_round_array test_accum test_matmul test_rng test_scaled"
cmake -S . -B build-base -DCMAKE_BUILD_TYPE=RelWithDebInfo "$lines_only" \
      -DCMAKE_C_FLAGS=-DEMU_NO_TARGET_CLONES -DEMU_BUILD_BENCH=OFF \
      -DEMU_BUILD_EXPERIMENTS=OFF
# shellcheck disable=SC2086 # one target per word
cmake --build build-base -j"$jobs" --target $base_suites
EMU_TEST_SCALE=0.1 ctest --test-dir build-base -j"$jobs" --output-on-failure --no-tests=error \
    -R "^($(echo $base_suites | tr ' ' '|'))\$"

step "ASan + UBSan build and tests (EMU_TEST_SCALE=0.05, without the slow label)"
# Some runs at a forced lower instruction-set level are left out here.
# The array-rounding kernels and the choke point's histogram kernels are
# one C source compiled once per level (no intrinsics: round_array.c,
# stats.c), so the instrumented run at this machine's level goes through
# the same source lines; and gelu's AVX2 intrinsics are what this
# machine's own level runs (its baseline level, the scalar path, does
# run instrumented).  The release stage above holds every level
# bit-identical.  The forced levels of the suites with intrinsics of
# their own (test_rng, test_stochastic, test_ops_optim) all run here.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "$lines_only" -DEMU_SANITIZE=ON \
      -DEMU_BUILD_BENCH=OFF
cmake --build build-asan -j"$jobs"
EMU_TEST_SCALE=0.05 ASAN_OPTIONS=detect_leaks=1 \
    ctest --test-dir build-asan -j"$jobs" --output-on-failure -LE slow \
    -E '^(test_(mpfr_)?round_array[.](baseline|avx2)|test_choke_point[.](baseline|avx2)|test_(ops_elementwise|transcendental)[.]avx2)$'

step "install check"
sh tests/install_check.sh build

step "fuzzing (bounded)"
sh fuzz/run.sh 12

step "experiments (quick) and notebooks"
EMU="$PWD/build/cli/emu" EMU_BUILD="$PWD/build" bash experiments/run_all.sh --quick
step "bench against PyTorch (quick)"; /usr/bin/python3 bench/train_vs_torch.py --quick --emu build/cli/emu

step "all checks passed"
