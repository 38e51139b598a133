/*
 * test_mpfr_round.c — the rounding choke point emu_round2(hi, lo) against
 * the GNU MPFR oracle's emu_ref_round of the exact sum hi + lo.
 *
 * Arithmetic hands emu_round2 an unevaluated pair whose low part decides
 * what hi alone cannot: which side of a tie, whether a value on the grid
 * is exact, which way a directed mode goes.  Here lo is never zero, and
 * the pairs are drawn to put that decision on a knife edge:
 *
 *  - hi anywhere around the format's range, lo anywhere below hi's half
 *    ulp (down to 2^-1074);
 *  - hi on or a few double ulps from a tie of the format, lo tiny;
 *  - hi on the format's grid, lo tiny of either sign;
 *  - binary64 targets, where hi is always on the grid: lo = ±ulp/2 (an
 *    exact tie), just inside it, and tiny; at the overflow threshold too;
 *  - values just below 2^emin, where tininess before and after rounding
 *    disagree: such cases must be found for every format, and differ by
 *    the underflow flag alone;
 *  - pairs whose parts overlap (lo up to 2^60 times hi), which emu_round2
 *    normalises, and sums beyond binary64's range.
 *
 * Every shipped format and a few user formats (flush to zero, saturation,
 * shifted bias, unsigned, wider than binary32), every deterministic mode,
 * both tininess rules, saturation on and off.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/ref.h>

#include "testutil.h"

/* ---- checking against the oracle: check_one (mpfr_check.h) compares
 * value, sign of zero, ternary sign and all seven flags, and prints what
 * replays a mismatch. */
#include "mpfr_check.h"

#define EXPECT_NO_NEW_MISMATCH(before, checked, what)                        \
    ck_assert_msg(n_mismatch == (before), "%s: %llu of %llu results differ " \
                  "from MPFR", (what), n_mismatch - (before),                \
                  n_checked - (checked))

/* ---- formats ---------------------------------------------------------- */

enum { MAX_FORMATS = 64 };
static const emu_format *formats[MAX_FORMATS];
static size_t n_formats;

static const char *const user_specs[] = {
    "e3m2,nosubnormals", "e5m2,nosubnormals", "e4m3,saturate",
    "e5m2,bias=20",      "e4m3,unsigned",     "e9m30",
    "e11m52,nosubnormals",
};
static emu_format user[sizeof user_specs / sizeof user_specs[0]];

static void collect_formats(void)
{
    for (size_t i = 0; i < emu_format_count(); i++)
        formats[n_formats++] = emu_format_at(i);
    for (size_t i = 0; i < sizeof user_specs / sizeof user_specs[0]; i++) {
        emu_error err;
        if (emu_format_parse_inline(&user[i], user_specs[i], &err)) {
            char msg[600];
            emu_error_format(&err, msg, sizeof msg);
            fprintf(stderr, "test setup: %s\n", msg);
            abort();
        }
        formats[n_formats++] = &user[i];
    }
}

/* ---- the exact value and the two roundings ----------------------------- */

/* hi + lo exactly: two doubles span at most 2^1024 .. 2^-1074. */
static mpfr_t exact;

static void check_pair(const emu_format *f, double hi, double lo,
                       const emu_rounding *r, emu_status *ref_st)
{
    mpfr_set_d(exact, hi, MPFR_RNDN);
    if (mpfr_add_d(exact, exact, lo, MPFR_RNDN) != 0)
        ck_abort_msg("hi + lo = %a + %a not exact in MPFR", hi, lo);
    emu_status ws, gs;
    double want = emu_ref_round(f, exact, r, &ws);
    double got = emu_round2(f, hi, lo, r, &gs);
    double v[2] = { hi, lo };
    check_one("round2", NULL, f, r, 2, NULL, v, want, ws, got, gs);
    if (ref_st)
        *ref_st = ws;
}

static double ulp_of(double x)
{
    int e;
    frexp(x, &e);
    double u = ldexp(1.0, e - 53);
    return u < 0x1p-1074 ? 0x1p-1074 : u;
}

/* A double with random significand, sign s, binade e (clamped to where
 * doubles are normal, and to below overflow). */
static double random_double(uint64_t w, long e)
{
    if (e > 1023)
        e = 1023;
    if (e < -1022)
        e = -1022;
    double m = 1.0 + ldexp((double)(w >> 12), -52);
    return ldexp((w & 1) ? -m : m, (int)e);
}

/* A non-zero lo with |lo| below |hi|'s half ulp, of random size, down
 * to the smallest double.  0 if no non-zero double fits. */
static double random_lo(test_rng *g, double hi)
{
    double half = ulp_of(hi) / 2;
    if (half < 0x1p-1074)
        return 0.0;
    uint64_t w = test_next(g);
    if ((w & 15) == 0)
        return (w & 16) ? -0x1p-1074 : 0x1p-1074;
    if ((w & 15) == 1)
        return (w & 16) ? -half : half; /* the largest allowed */
    int eh;
    frexp(half, &eh); /* half = 2^(eh-1) */
    long e = eh - 2 - (long)((w >> 8) % 64);
    double lo = random_double(w >> 5, e);
    return fabs(lo) < 0x1p-1074 ? ((w & 16) ? -0x1p-1074 : 0x1p-1074) : lo;
}

/* A random value of f's grid, its tie with the next value up, and the
 * binade of f where it lies: from one random pattern. */
static bool grid_point(test_rng *g, const emu_format *f, double *v,
                       double *tie)
{
    for (int tries = 0; tries < 100; tries++) {
        emu_bits b = test_random_bits(g, f);
        double x = emu_decode(f, b);
        if (!isfinite(x) || f->p > 52)
            continue;
        double a = fabs(x);
        /* The next value above a: the quantum at a's binade. */
        int e;
        frexp(a, &e);
        long be = a == 0.0 ? f->emin : e - 1;
        if (be < f->emin)
            be = f->emin;
        long q = be - f->p + 1;
        if (!f->subnormals && a < f->min_normal)
            q = f->emin;
        double next = a + ldexp(1.0, (int)q);
        *v = x;
        *tie = copysign(a + (next - a) / 2, x);
        return true;
    }
    return false;
}

/* ---- the tests -------------------------------------------------------- */

/* Random pairs in three shapes (see the header), every mode. */
START_TEST(test_random_pairs)
{
    const emu_format *f = formats[_i];
    const uint64_t n = test_scaled(100000, 1000);
    test_rng g = test_rng_make(0x70d + (uint64_t)_i);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (uint64_t k = 0; k < n; k++) {
        uint64_t w = test_next(&g);
        double hi = 0.0, lo = 0.0, v, tie;
        switch (w & 3) {
        case 0:
        case 1: { /* anywhere around the range */
            long lo_e = (f->subnormals ? f->qmin : f->emin) - 3;
            long span = f->emax + 3 - lo_e;
            hi = random_double(test_next(&g),
                               lo_e + (long)((w >> 8) % (uint64_t)span));
            break;
        }
        case 2: /* on or next to a tie */
            if (!grid_point(&g, f, &v, &tie))
                continue;
            hi = tie;
            for (uint64_t s = (w >> 8) % 5; s > 2; s--)
                hi = nextafter(hi, (w >> 12) & 1 ? INFINITY : -INFINITY);
            break;
        default: /* on the grid */
            if (!grid_point(&g, f, &v, &tie))
                continue;
            hi = v;
            break;
        }
        if (hi == 0.0)
            continue;
        lo = random_lo(&g, hi);
        if (lo == 0.0)
            continue;
        emu_rounding r;
        memset(&r, 0, sizeof r);
        r.tininess = (w >> 63) ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
        r.saturate = ((w >> 60) & 3) == 3;
        for (int m = 0; m < TEST_DET_MODES; m++) {
            r.mode = (emu_rnd)m;
            check_pair(f, hi, lo, &r, NULL);
        }
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* binary64: hi is always a value, so lo alone decides.  lo = ±ulp/2 makes
 * an exact tie between hi and its neighbour, lo just inside ulp/2 stays
 * on hi's side for nearest modes, lo tiny only moves directed modes; at
 * DBL_MAX an exact tie overflows. */
START_TEST(test_binary64)
{
    const emu_format *f = test_format("binary64");
    test_rng g = test_rng_make(0xb64);
    const uint64_t n = test_scaled(100000, 1000);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (uint64_t k = 0; k < n + 4; k++) {
        uint64_t w = test_next(&g);
        double hi;
        if (k < 4)
            hi = k & 1 ? -DBL_MAX : DBL_MAX;
        else
            hi = random_double(test_next(&g),
                               -1020 + (long)((w >> 8) % 2044));
        double u = ulp_of(hi), lo;
        switch (k < 4 ? (k >> 1) : (w >> 4) % 4) {
        case 0:
            lo = u / 2;
            break;
        case 1:
            lo = u / 2 - ldexp(u, -1 - (int)((w >> 20) % 52));
            break;
        case 2:
            lo = ldexp(u, -2 - (int)((w >> 20) % 60));
            break;
        default: /* a power of two: its lower neighbour is u/2 away, so
                  * lo = -u/4 (toward zero) is an exact tie below it */
            hi = copysign(ldexp(1.0, ilogb(hi)), hi);
            u = ulp_of(hi);
            lo = -u / 4;
            break;
        }
        if ((w >> 3) & 1)
            lo = -lo;
        if (hi < 0.0)
            lo = -lo;
        if (lo == 0.0)
            continue;
        for (unsigned s = 0; s < 2; s++) {
            emu_rounding r;
            memset(&r, 0, sizeof r);
            r.tininess = s ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
            r.saturate = s != 0;
            for (int m = 0; m < TEST_DET_MODES; m++) {
                r.mode = (emu_rnd)m;
                check_pair(f, hi, lo, &r, NULL);
            }
        }
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* Values just below 2^emin: tiny before rounding, but those that round
 * (with an unbounded exponent) up to 2^emin are not tiny after.  The
 * oracle must show such cases in every format whose values leave room
 * for lo below 2^emin; they must differ in the underflow flag only; and
 * the emulator must agree with the oracle under both rules. */
START_TEST(test_tininess_rules)
{
    const emu_format *f = formats[_i];
    if (f->emin - f->p - 70 < -1074)
        return; /* no room below 2^emin for a non-zero lo (binary64) */
    unsigned long long before = n_mismatch, checked = n_checked;
    unsigned differ = 0;
    const double m = f->min_normal;

    /* j < 2^(p+2) keeps hi above 2^(emin-1). */
    const int jmax = f->p >= 4 ? 24 : (1 << (f->p + 2)) - 1;
    for (int j = 1; j <= jmax; j++) {
        /* m - j quarters of the half quantum above p bits: from just
         * below 2^emin down past the unbounded tie at m - 2^(emin-p-1). */
        double hi = m - j * ldexp(1.0, f->emin - f->p - 3);
        for (int l = -1; l <= 1; l++) {
            double lo = l * ldexp(1.0, f->emin - 70);
            for (int sign = 0; sign < 2; sign++) {
                double h = sign ? -hi : hi, lw = sign ? -lo : lo;
                for (int mo = 0; mo < TEST_DET_MODES; mo++)
                    for (int sat = 0; sat < 2; sat++) {
                        emu_rounding r;
                        memset(&r, 0, sizeof r);
                        r.mode = (emu_rnd)mo;
                        r.saturate = sat;
                        emu_status sa, sb;
                        r.tininess = EMU_TINY_AFTER;
                        check_pair(f, h, lw, &r, &sa);
                        r.tininess = EMU_TINY_BEFORE;
                        check_pair(f, h, lw, &r, &sb);
                        if (sa.flags == sb.flags)
                            continue;
                        differ++;
                        ck_assert_msg((sa.flags ^ sb.flags) ==
                                          EMU_FLAG_UNDERFLOW &&
                                          (sb.flags & EMU_FLAG_UNDERFLOW),
                                      "%s: %a + %a mode %s: tininess rules "
                                      "differ by flags 0x%x (after) vs 0x%x "
                                      "(before)", f->name, h, lw,
                                      emu_rnd_name(r.mode), sa.flags,
                                      sb.flags);
                    }
            }
        }
    }
    ck_assert_msg(differ > 0, "%s: no value below 2^emin where tininess "
                  "before and after rounding differ", f->name);
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* Pairs whose parts overlap (|lo| above ulp(hi)/2, often above |hi|):
 * emu_round2 normalises them (round.h), so every deterministic mode must
 * give MPFR's rounding of the exact sum; stochastic modes, with the same
 * word, what the pair normalised by MPFR (hi' = RN(hi + lo), lo' the exact
 * rest) gives.  Then the case, binary32 (1, 2^60) toward +inf, and
 * sums beyond binary64's range: an overflow where the format stops below
 * 2^1023, refused (invalid) for binary64. */
START_TEST(test_overlapping_pairs)
{
    const emu_format *f = formats[_i];
    const uint64_t n = test_scaled(20000, 300);
    test_rng g = test_rng_make(0x0e1a + (uint64_t)_i);
    unsigned long long before = n_mismatch, checked = n_checked;
    mpfr_t h2;
    mpfr_init2(h2, 53);
    for (uint64_t k = 0; k < n; k++) {
        uint64_t w = test_next(&g);
        long lo_e = (f->subnormals ? f->qmin : f->emin) - 3;
        long span = f->emax + 3 - lo_e;
        long eh = lo_e + (long)((w >> 8) % (uint64_t)span);
        double hi = random_double(test_next(&g), eh);
        /* lo from 60 binades below hi's to 60 above: most overlap */
        double lo = random_double(test_next(&g), eh - 60 + (long)((w >> 20) % 121));
        if ((w & 7) == 0)
            hi = 0.0; /* a zero hi with a non-zero lo */
        emu_rounding r;
        memset(&r, 0, sizeof r);
        r.tininess = (w >> 63) ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
        r.saturate = ((w >> 60) & 3) == 3;
        const test_fpstate caller0 = test_oracle_enter();
        const bool beyond = !isfinite(hi + lo) &&
                            !(fabs(hi) >= 0x1p1023 && fabs(lo) <= 0x1p970);
        test_oracle_leave(caller0);
        if (f->emax >= 1023 && beyond) {
            /* beyond binary64 in a format reaching 2^1023: refused */
            emu_status st;
            double v = emu_round2(f, hi, lo, &r, &st);
            n_checked++;
            if (!(st.flags & EMU_FLAG_INVALID) || !isnan(v)) {
                n_mismatch++;
                fprintf(stderr, "%s: (%a, %a): %a flags %#x, want the "
                        "refusal\n", f->name, hi, lo, v, st.flags);
            }
            continue;
        }
        for (int m = 0; m < TEST_DET_MODES; m++) {
            r.mode = (emu_rnd)m;
            check_pair(f, hi, lo, &r, NULL);
        }
        /* stochastic: against the pair normalised by MPFR */
        const test_fpstate caller = test_oracle_enter();
        mpfr_set_d(exact, hi, MPFR_RNDN);
        mpfr_add_d(exact, exact, lo, MPFR_RNDN);          /* exact */
        mpfr_set(h2, exact, MPFR_RNDN);
        const double nh = mpfr_get_d(h2, MPFR_RNDN);
        mpfr_sub_d(exact, exact, nh, MPFR_RNDN);          /* exact */
        const double nl = mpfr_get_d(exact, MPFR_RNDN);   /* exact */
        test_oracle_leave(caller);
        const uint64_t word = test_next(&g);
        r.mode = (w >> 40) & 1 ? EMU_RS : EMU_RS_BITS;
        r.sr_bits = 1 + (unsigned)((w >> 41) % 64);
        emu_status sa, sb;
        const double a = emu_round2_word(f, hi, lo, &r, word, &sa);
        const double b = emu_round2_word(f, nh, nl, &r, word, &sb);
        n_checked++;
        if (!((a == b && signbit(a) == signbit(b)) || (isnan(a) && isnan(b))) ||
            sa.flags != sb.flags || sa.ternary != sb.ternary) {
            n_mismatch++;
            fprintf(stderr, "%s: %s (%a, %a) word %#llx: %a flags %#x, "
                    "normalised (%a, %a): %a flags %#x\n", f->name,
                    emu_rnd_name(r.mode), hi, lo, (unsigned long long)word, a,
                    sa.flags, nh, nl, b, sb.flags);
        }
    }
    mpfr_clear(h2);
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

START_TEST(test_overlap_cases)
{
    unsigned long long before = n_mismatch, checked = n_checked;
    const emu_format *b32 = test_format("binary32");
    emu_rounding r;
    memset(&r, 0, sizeof r);
    r.mode = EMU_RU;
    emu_status st;
    double v = emu_round2(b32, 1.0, 0x1p60, &r, &st);
    ck_assert_msg(v == 0x1.000002p60 && (st.flags & EMU_FLAG_INEXACT) &&
                  st.ternary > 0, "binary32 (1, 2^60) ru: %a flags %#x "
                  "ternary %d, want 0x1.000002p60, inexact, above", v,
                  st.flags, st.ternary);
    /* sums beyond binary64: MPFR's overflow for every format below 2^1023 */
    const double big[][2] = { { DBL_MAX, DBL_MAX }, { -DBL_MAX, -0x1p1000 },
                              { 0x1p1000, DBL_MAX } };
    for (size_t i = 0; i < n_formats; i++)
        for (size_t k = 0; k < 3; k++)
            for (int m = 0; m < TEST_DET_MODES; m++) {
                const emu_format *f = formats[i];
                r.mode = (emu_rnd)m;
                if (f->emax < 1023) {
                    check_pair(f, big[k][0], big[k][1], &r, NULL);
                    continue;
                }
                v = emu_round2(f, big[k][0], big[k][1], &r, &st);
                ck_assert_msg((st.flags & EMU_FLAG_INVALID) &&
                              (f->has_nan ? isnan(v) : v == 0.0),
                              "%s: (%a, %a) %s: %a flags %#x, want the "
                              "refusal (invalid)", f->name, big[k][0],
                              big[k][1], emu_rnd_name(r.mode), v, st.flags);
            }
    EXPECT_NO_NEW_MISMATCH(before, checked, "sums beyond binary64");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("mpfr_round");
    TCase *tc = tcase_create("round2");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_random_pairs, 0, (int)n_formats);
    tcase_add_test(tc, test_binary64);
    tcase_add_loop_test(tc, test_tininess_rules, 0, (int)n_formats);
    tcase_add_loop_test(tc, test_overlapping_pairs, 0, (int)n_formats);
    tcase_add_test(tc, test_overlap_cases);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    mpfr_init2(exact, 2200);
    collect_formats();
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    mpfr_clear(exact);
    mpfr_free_cache();
    fprintf(stderr, "mpfr_round: %llu results checked, %llu mismatches\n",
            n_checked, n_mismatch);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
