/*
 * testutil.h — what every test suite shares: sample sizes, a seeded
 * generator for test data, and value comparison that sees -0 and NaN.
 *
 * Test data come from their own Philox stream (not from the library's
 * stochastic-rounding streams), so that a failing case can be replayed
 * from its seed and index, which every failure message prints.
 */
#ifndef EMU_TESTUTIL_H
#define EMU_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>

#include <emu/emu.h>
/* The suites hold the library against MPFR and plug ops into the choke
 * point: the two opt-in headers that emu/emu.h leaves out. */
#include <emu/extend.h>
#include <emu/ref.h>

/* EMU_TEST_SCALE times EMU_TEST_LEVEL_SCALE from the environment (each
 * default 1.0; the product clamped to [0.001, 1000]); n times it, at
 * least `floor`. */
/* A suite run from a hostile caller (EMU_TEST_HOST_ENV) brackets the
 * oracle's own host arithmetic (mpfr_get_d of a subnormal flushes under
 * FTZ) with these: the default state inside, the caller's back after. */
typedef struct test_fpstate {
    unsigned csr;
    int round;
} test_fpstate;
test_fpstate test_oracle_enter(void);
void test_oracle_leave(test_fpstate saved);

uint64_t test_scaled(uint64_t n, uint64_t floor);

/* The sanitizer stage's share of a long exhaustive MPFR loop.  Such a
 * loop checks every input under each of n settings (modes, tininess and
 * saturation, targets); under a reduced scale (EMU_TEST_SCALE times
 * EMU_TEST_LEVEL_SCALE below 1, the sanitizer stage of tests/check.sh)
 * it checks each input under one of them only, setting (input % n), so
 * that every input and every setting still runs instrumented, at 1/n of
 * the cost.  At full scale (the release stage) every pair runs.  True if
 * setting s of n is to be checked on input i.  Not for the rounding
 * paths' own exhaustive loops (test_round_array, test_mpfr_round): those
 * run whole at every scale. */
bool test_exhaustive_pick(uint64_t i, unsigned s, unsigned n);

/* For the suites CTest runs once per instruction-set level of the array
 * kernels (EMU_ISA=baseline|avx2|avx512): prints the level in use, and
 * returns true (skip: exit 77) if EMU_ISA names a level that this CPU or
 * build does not have, which would otherwise test another level twice. */
bool test_isa_skip(void);

/* A stream of 64-bit test words. */
typedef struct test_rng {
    uint64_t seed, index;
} test_rng;

test_rng test_rng_make(uint64_t seed);
uint64_t test_next(test_rng *g);
/* Uniform integer in [0, n). */
uint64_t test_below(test_rng *g, uint64_t n);

/* A random bit pattern of fmt (any pattern, specials included). */
emu_bits test_random_bits(test_rng *g, const emu_format *fmt);

/* Same value: both NaN, or equal with the same sign (so -0 != +0). */
bool test_same(double a, double b);

/* Empty string if two array roundings' counts agree, else the name of the
 * first differing field. */
const char *test_counts_diff(const emu_round_counts *a,
                             const emu_round_counts *b);

/* A shipped format by name; aborts the test run if missing. */
const emu_format *test_format(const char *name);

/* A check that costs nothing when it passes.  Check's ck_assert records
 * every passing check's location (to a file, in no-fork mode), which
 * dominates exhaustive loops; call Check only on failure. */
#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond))                                                        \
            ck_abort_msg(__VA_ARGS__);                                      \
    } while (0)

/* Check's passing assertions (ck_assert*, mark_point) call _mark_point,
 * which writes the location to Check's message file: one write() call
 * per passing check, in no-fork mode too.  That location only names where
 * a forked test that dies was last seen; in no-fork mode (CK_FORK=no, as
 * CTest runs every suite) nothing reads it, and the writes were most of
 * some suites' time (4.6 million in test_ops_conv, 5 million in
 * test_dpi).  Each suite includes this header after <check.h>, so its
 * checks call test_mark_point, which records the location in fork mode
 * only.  A failing check is reported as before. */
void test_mark_point(const char *file, int line);
#define _mark_point(file, line) test_mark_point(file, line)

/* Ops take their rounding and accumulator model as arguments: these are
 * the ones a test passes where it does not vary them (nearest-even, and
 * emu_accum_default's sequential binary32 model). */
extern const emu_rounding test_rne;
const emu_accum *test_default_accum(void);

/* The deterministic modes, for loops: EMU_RNE .. EMU_RO. */
enum { TEST_DET_MODES = EMU_RO + 1 };

#endif
