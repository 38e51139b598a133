/*
 * test_mpfr_round_array.c — the array roundings of binary64 input and of
 * pairs hi + lo against the GNU MPFR oracle, on large random samples.
 *
 * test_round_array.c holds these vector kernels bit-identical to the
 * scalar choke point on every edge class; this suite checks, on random
 * data shaped as the training runs produce it (values spread over and
 * beyond each format's range, pairs whose low part decides), that the
 * kernels give the oracle's answer:
 *  - emu_round_array_f64 in every deterministic mode against
 *    emu_ref_round of the value;
 *  - emu_round_pairs_f32_unguarded under stochastic rounding (64-bit and
 *    r-bit) against ref_sr_round (mpfr_check.h: the definition of the
 *    modes, from MPFR and the word) of the exact sum hi + lo, with the
 *    words the choke point draws for each index.
 * Each element's value (sign of zero included) and the counts of the
 * whole array, rebuilt from the oracle's flags, must agree.  The arrays
 * have no ternary, so it is not compared.  Stochastic rounding is checked
 * with tininess before rounding: after rounding, ref_sr_round takes the
 * underflow flag of the directed mode it lands on, where the choke point
 * rounds the value stochastically (same word) with an unbounded exponent
 * range, and the two definitions disagree on a few values just below
 * 2^emin (which the kernel leaves to the choke point anyway;
 * test_round_array holds it equal to the choke point under both rules).
 *
 * CTest runs the suite once per instruction-set level of the kernels
 * (EMU_ISA), as test_round_array.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/ref.h>

#include "internal.h" /* emu_round_pairs_f32_unguarded */
#include "mpfr_check.h"
#include "testutil.h"

static const emu_format *carrier[64];
static int n_carrier;
static mpfr_t exact;

static void find_carrier_formats(void)
{
    for (size_t i = 0; i < emu_format_count() && n_carrier < 64; i++)
        if (emu_format_at(i)->fits_carrier)
            carrier[n_carrier++] = emu_format_at(i);
}

/* A value around f's range: a random binade from below its subnormals
 * to above its max, a random significand of random length (short ones
 * land on the format's grid and its ties), a random sign. */
static double random_value(test_rng *g, const emu_format *f)
{
    uint64_t w = test_next(g);
    int e = f->emin - f->p - 3 + (int)(w % (uint64_t)(f->emax - f->emin
                                                      + f->p + 6));
    int len = 1 + (int)test_below(g, 52);
    double m = 1.0 + ldexp((double)(test_next(g) >> (64 - len)), -len);
    return ldexp((w >> 63) ? -m : m, e);
}

/* A low part for hi: below its half ulp, of random size, either sign. */
static double random_lo(test_rng *g, double hi)
{
    int e;
    frexp(hi, &e);
    uint64_t w = test_next(g);
    double s = (w & 1) ? -1.0 : 1.0;
    if ((w & 7) == 2)
        return 0.0;
    if ((w & 7) == 3)
        return s * ldexp(1.0, e - 54); /* a binary64 tie */
    double m = 1.0 + (double)(test_next(g) >> 12) * 0x1p-52;
    return s * ldexp(m, e - 55 - (int)test_below(g, 30));
}

enum { N = 1 << 15 };
static double in_h[N], in_l[N], out_d[N];
static float out_f[N];

/* binary64 input, deterministic modes, both tininess rules and
 * saturation. */
START_TEST(test_f64_vs_mpfr)
{
    const emu_format *f = carrier[_i];
    test_rng g = test_rng_make(0xa64 + (uint64_t)_i);
    const size_t rounds = test_scaled(3, 1);
    unsigned long long before = n_mismatch;
    for (size_t round = 0; round < rounds; round++) {
        for (size_t i = 0; i < N; i++)
            in_h[i] = random_value(&g, f);
        for (int m = 0; m < TEST_DET_MODES; m++)
            for (int cfg = 0; cfg < 4; cfg++) {
                emu_array_rounding a;
                memset(&a, 0, sizeof a);
                a.rnd.mode = (emu_rnd)m;
                a.rnd.tininess = (cfg & 1) ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
                a.rnd.saturate = cfg >> 1;
                emu_round_counts got = { 0 }, want = { 0 };
                ck_assert(emu_round_array_f64(f, out_d, in_h, N, &a, &got,
                                              NULL) == 0);
                for (size_t i = 0; i < N; i++) {
                    emu_status ws;
                    mpfr_set_d(exact, in_h[i], MPFR_RNDN);
                    double y = emu_ref_round(f, exact, &a.rnd, &ws);
                    emu_round_counts_add(&want, in_h[i], y, ws.flags);
                    n_checked++;
                    if (!test_same(y, out_d[i]) && n_mismatch++ < PRINT_LIMIT)
                        fprintf(stderr, "%s %s cfg %d: %a: MPFR %a, array "
                                "%a\n", f->name, emu_rnd_name(a.rnd.mode),
                                cfg, in_h[i], y, out_d[i]);
                }
                ck_assert_msg(!*test_counts_diff(&want, &got), "%s %s cfg %d: "
                              "counts differ from MPFR's in %s", f->name,
                              emu_rnd_name(a.rnd.mode), cfg,
                              test_counts_diff(&want, &got));
            }
    }
    ck_assert_msg(n_mismatch == before, "%s: %llu values differ from MPFR",
                  f->name, n_mismatch - before);
}
END_TEST

/* Pairs under stochastic rounding: full 64-bit words and r-bit ones. */
START_TEST(test_pairs_vs_mpfr)
{
    const emu_format *f = carrier[_i];
    if (!f->is_signed || !f->has_zero)
        return; /* ref_sr_round's domain: signed formats with a zero */
    static const unsigned bits[] = { 64, 1, 3, 8, 13, 23 };
    test_rng g = test_rng_make(0x5a1 + (uint64_t)_i);
    const size_t rounds = test_scaled(2, 1);
    unsigned long long before = n_mismatch;
    for (size_t round = 0; round < rounds; round++) {
        for (size_t i = 0; i < N; i++) {
            in_h[i] = random_value(&g, f);
            in_l[i] = random_lo(&g, in_h[i]);
        }
        for (size_t b = 0; b < sizeof bits / sizeof bits[0]; b++)
            for (int sat = 0; sat < 2; sat++) {
                emu_array_rounding a;
                memset(&a, 0, sizeof a);
                a.rnd.mode = bits[b] == 64 ? EMU_RS : EMU_RS_BITS;
                a.rnd.sr_bits = bits[b];
                a.rnd.saturate = sat;
                a.rnd.tininess = EMU_TINY_BEFORE;
                a.seed = 77 + round;
                a.stream = 5 + b;
                a.first_index = 1000 * round;
                emu_round_counts got = { 0 }, want = { 0 };
                emu_round_pairs_f32_unguarded(f, out_f, in_h, in_l, N, &a,
                                              &got);
                for (size_t i = 0; i < N; i++) {
                    uint64_t word = emu_random64(a.seed, a.stream,
                                                 a.first_index + i);
                    emu_status ws;
                    mpfr_set_d(exact, in_h[i], MPFR_RNDN);
                    mpfr_add_d(exact, exact, in_l[i], MPFR_RNDN);
                    double y = ref_sr_round(f, exact, &a.rnd, word, &ws);
                    emu_round_counts_add(&want, in_h[i], y, ws.flags);
                    n_checked++;
                    if (d2u((float)y) != d2u((double)out_f[i])
                        && !(isnan(y) && isnan(out_f[i]))
                        && n_mismatch++ < PRINT_LIMIT)
                        fprintf(stderr, "%s sr%u sat %d: %a + %a word 0x%016"
                                PRIx64 ": MPFR %a, array %a\n", f->name,
                                bits[b], sat, in_h[i], in_l[i], word, y,
                                (double)out_f[i]);
                }
                ck_assert_msg(!*test_counts_diff(&want, &got), "%s sr%u sat %d: "
                              "counts differ from MPFR's in %s", f->name,
                              bits[b], sat, test_counts_diff(&want, &got));
            }
    }
    ck_assert_msg(n_mismatch == before, "%s: %llu values differ from MPFR",
                  f->name, n_mismatch - before);
}
END_TEST

int main(void)
{
    if (test_isa_skip())
        return 77;
    mpfr_init2(exact, 2200);
    find_carrier_formats();
    Suite *s = suite_create("mpfr_round_array");
    TCase *tc = tcase_create("arrays");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_f64_vs_mpfr, 0, n_carrier);
    tcase_add_loop_test(tc, test_pairs_vs_mpfr, 0, n_carrier);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    mpfr_clear(exact);
    mpfr_free_cache();
    fprintf(stderr, "mpfr_round_array: %llu results checked, %llu "
            "mismatches\n", n_checked, n_mismatch);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
