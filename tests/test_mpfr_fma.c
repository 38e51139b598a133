/*
 * test_mpfr_fma.c — fused multiply-add against the GNU MPFR oracle
 * (libemu/ref.c).
 *
 * fma is where a single rounding is hardest to get right: the exact
 * a * b + c can cancel to nothing, sit a hair off a tie, or carry a c far
 * below the product's last bit that must still decide the rounding.
 *
 *  - every triple of the 4- and 6-bit formats;
 *  - 10^6 random triples per mode for binary16, bfloat16, e4m3, e5m2,
 *    tf32 and binary32, 10^5 for the other carrier formats, drawn to hit
 *    those cases: massive cancellation, c below the product's sticky bit,
 *    a product below c's, results around 2^emin and max, products that
 *    are exact ties with a small c deciding them;
 *  - explicit edge cases: exact zero results and their signs, zero
 *    products and zero/inf/NaN c, and the classic double-rounding trap
 *    (rounding through a format twice as wide breaks the tie the wrong
 *    way).
 *
 * Settings: as in test_mpfr_arith16.c, {tininess after, saturation off}
 * and {tininess before, saturation on}; random cases pick at random.
 */
#include <check.h>
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

/* ---- patterns --------------------------------------------------------- */

static emu_rounding setting(emu_rnd mode, unsigned k)
{
    emu_rounding r;
    memset(&r, 0, sizeof r);
    r.mode = mode;
    r.tininess = (k & 1) ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
    r.saturate = (k & 1) != 0;
    return r;
}

static uint64_t field_mask(int n)
{
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

static uint64_t sign_bit(const emu_format *f)
{
    return f->is_signed ? 1ull << (f->bits - 1) : 0;
}

static emu_bits make_bits(const emu_format *f, unsigned sign, uint64_t e,
                          uint64_t frac)
{
    emu_bits b = { (e << f->mbits) | frac };
    if (sign)
        b.v |= sign_bit(f);
    return b;
}

/* A random finite pattern of f with exponent in [elo, ehi] (field 0 for
 * anything below emin).  One random word per try. */
static emu_bits finite_bits(test_rng *g, const emu_format *f, long elo,
                            long ehi)
{
    long lo = elo + f->bias, hi = ehi + f->bias;
    long top = (long)field_mask(f->ebits);
    lo = lo < 0 ? 0 : lo > top ? top : lo;
    hi = hi < lo ? lo : hi > top ? top : hi;
    for (;;) {
        uint64_t w = test_next(g);
        uint64_t e = (uint64_t)lo + (w & 0xffff) % (uint64_t)(hi - lo + 1);
        emu_bits b = make_bits(f, (unsigned)(w >> 16) & 1, e,
                               (w >> 20) & field_mask(f->mbits));
        if (isfinite(emu_decode(f, b)))
            return b;
        if (lo == hi && lo == top)
            lo = hi = top - 1;
    }
}

/* The pattern of a value of f: sign, then bisection on the magnitudes
 * (increasing with the pattern below the sign bit; NaN above them all). */
static emu_bits pattern_of(const emu_format *f, double v)
{
    /* fnuz has no -0: its pattern is the NaN. */
    bool neg = signbit(v) && !(v == 0.0 && f->specials == EMU_SPECIALS_FNUZ);
    uint64_t s = neg ? sign_bit(f) : 0;
    double m = fabs(v);
    uint64_t lo = 0, hi = (f->is_signed ? sign_bit(f) : 1ull << f->bits) - 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        double d = emu_decode(f, (emu_bits){ mid });
        if (isnan(d) || d >= m)
            hi = mid;
        else
            lo = mid + 1;
    }
    return (emu_bits){ lo | s };
}

static void check_fma(const emu_format *f, emu_bits a, emu_bits b, emu_bits c,
                      const emu_rounding *r)
{
    double v[3] = { emu_decode(f, a), emu_decode(f, b), emu_decode(f, c) };
    uint64_t bits[3] = { a.v, b.v, c.v };
    emu_status ws, gs;
    double want = emu_ref_fma(f, v[0], v[1], v[2], r, &ws);
    double got = emu_fma(f, v[0], v[1], v[2], r, &gs);
    check_one("fma", f, f, r, 3, bits, v, want, ws, got, gs);
}

/* ---- exhaustive ------------------------------------------------------- */

static const char *const tiny_formats[] = { "e2m1", "e2m3", "e3m2",
                                            "e3m2,nosubnormals" };

START_TEST(test_all_triples)
{
    emu_format f;
    emu_error err;
    ck_assert(emu_format_resolve(&f, tiny_formats[_i], &err) == 0);
    const uint64_t n = 1ull << f.bits;
    unsigned long long before = n_mismatch, checked = n_checked;
    for (unsigned k = 0; k < 2; k++)
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_rounding r = setting((emu_rnd)m, k);
            for (uint64_t i = 0; i < n; i++)
                for (uint64_t j = 0; j < n; j++)
                    for (uint64_t l = 0; l < n; l++)
                        check_fma(&f, (emu_bits){ i }, (emu_bits){ j },
                                  (emu_bits){ l }, &r);
        }
    EXPECT_NO_NEW_MISMATCH(before, checked, f.name);
}
END_TEST

/* ---- random ----------------------------------------------------------- */

static const char *const main_formats[] = { "binary16", "bfloat16", "e4m3",
                                            "e5m2",     "tf32",     "binary32" };
static const char *const other_formats[] = {
    "e3m4", "e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz", "e8m0", "dlfloat",
};
enum {
    N_MAIN = sizeof main_formats / sizeof main_formats[0],
    N_OTHER = sizeof other_formats / sizeof other_formats[0]
};

/* a and b with a product around 2^T. */
static void pair_near(test_rng *g, const emu_format *f, long T, emu_bits *a,
                      emu_bits *b)
{
    long lo = T - f->emax > f->emin - 1 ? T - f->emax : f->emin - 1;
    long hi = T - f->emin + 1 < f->emax ? T - f->emin + 1 : f->emax;
    if (lo > hi)
        lo = hi;
    long ea = lo + (long)(test_next(g) % (uint64_t)(hi - lo + 1));
    *a = finite_bits(g, f, ea, ea);
    *b = finite_bits(g, f, T - ea, T - ea);
}

/* One random triple, of the kind the control word w picks. */
static void random_triple(test_rng *g, const emu_format *f, uint64_t w,
                          emu_bits *a, emu_bits *b, emu_bits *c)
{
    const long p = f->p;
    const uint64_t x = (w >> 8) & 0xffffff; /* free random bits */
    const long range = f->emax - f->qmin + 3;
    long T = f->qmin - 1 + (long)(x % (uint64_t)range); /* a product binade */
    switch (w & 7) {
    case 0: /* anything, specials included */
        *a = test_random_bits(g, f);
        *b = test_random_bits(g, f);
        *c = test_random_bits(g, f);
        return;
    case 1: { /* c in the product's neighbourhood */
        pair_near(g, f, T, a, b);
        long d = (long)((x >> 12) % (uint64_t)(2 * p + 7)) - (p + 3);
        *c = finite_bits(g, f, T + d, T + d);
        return;
    }
    case 2: { /* c = -round(a*b), give or take two values: cancellation */
        pair_near(g, f, f->emin + (long)(x % (uint64_t)(f->emax - f->emin + 1)),
                  a, b);
        static const emu_rounding rne;
        double pr = emu_ref_mul(f, emu_decode(f, *a), emu_decode(f, *b), &rne,
                                NULL);
        if (!isfinite(pr) || (!f->is_signed && pr != 0.0)) {
            *c = finite_bits(g, f, T, T);
            return;
        }
        emu_bits cb = pattern_of(f, -pr);
        long d = (long)((x >> 12) % 5) - 2;
        uint64_t mag = cb.v & ~sign_bit(f);
        if ((long)mag + d >= 0)
            mag = (uint64_t)((long)mag + d);
        cb.v = (cb.v & sign_bit(f)) | mag;
        *c = isfinite(emu_decode(f, cb)) ? cb : pattern_of(f, -pr);
        return;
    }
    case 3: { /* c below the product's last bit: only its sign matters */
        pair_near(g, f, T, a, b);
        long ec = T - p - 2 - (long)((x >> 12) % (uint64_t)(2 * p + 1));
        *c = finite_bits(g, f, ec, ec);
        return;
    }
    case 4: { /* the product below c's last bit */
        long ec = f->emin + (long)(x % (uint64_t)(f->emax - f->emin + 1));
        *c = finite_bits(g, f, ec, ec);
        pair_near(g, f, ec - p - 2 - (long)((x >> 12) % (uint64_t)(2 * p + 1)),
                  a, b);
        return;
    }
    case 5: { /* results around 2^emin and the subnormals */
        long t = f->qmin - 2 + (long)(x % (uint64_t)(p + 4));
        pair_near(g, f, t, a, b);
        long d = (long)((x >> 12) % 5) - 2;
        *c = finite_bits(g, f, t + d, t + d);
        return;
    }
    case 6: { /* results around max */
        long t = f->emax - 1 + (long)(x % 3);
        pair_near(g, f, t, a, b);
        long d = (long)((x >> 12) % 4) - 3;
        *c = finite_bits(g, f, t + d, t + d);
        return;
    }
    default: { /* a product on a tie, c small or zero */
        if (p < 3) {
            pair_near(g, f, T, a, b);
            *c = finite_bits(g, f, T - p - 1, T - p - 1);
            return;
        }
        /* An odd significand below 4/3 times 1.5 has exactly p + 1 bits
         * and stays in the binade: a tie. */
        uint64_t lim = ((1ull << (p - 1)) / 3) | 1;
        uint64_t k = (test_next(g) % lim) | 1;
        long ea = T / 2, eb = T - ea;
        ea = ea < f->emin ? f->emin : ea > f->emax ? f->emax : ea;
        eb = eb < f->emin ? f->emin : eb > f->emax ? f->emax : eb;
        *a = make_bits(f, (unsigned)(x >> 20) & 1, (uint64_t)(ea + f->bias), k);
        *b = make_bits(f, (unsigned)(x >> 21) & 1, (uint64_t)(eb + f->bias),
                       1ull << (f->mbits - 1));
        long ec = ea + eb - p - 1 - (long)((x >> 12) % (uint64_t)(p + 8));
        switch ((x >> 22) & 3) {
        case 0:
            *c = pattern_of(f, (x >> 23) & 1 ? -0.0 : 0.0);
            break;
        case 1: /* the smallest c there is */
            *c = make_bits(f, (unsigned)(x >> 23) & 1,
                           f->has_zero && !f->subnormals ? 1 : 0,
                           f->has_zero && f->subnormals ? 1 : 0);
            break;
        default:
            *c = finite_bits(g, f, ec, ec);
            break;
        }
        if (!isfinite(emu_decode(f, *a)) || !isfinite(emu_decode(f, *b)))
            pair_near(g, f, T, a, b);
        return;
    }
    }
}

static void run_random(const emu_format *f, uint64_t n, uint64_t seed)
{
    unsigned long long before = n_mismatch, checked = n_checked;
    for (int m = 0; m < TEST_DET_MODES; m++) {
        test_rng g = test_rng_make(seed);
        for (uint64_t k = 0; k < n; k++) {
            uint64_t w = test_next(&g);
            emu_bits a, b, c;
            random_triple(&g, f, w, &a, &b, &c);
            emu_rounding r = setting((emu_rnd)m, 0);
            r.tininess = (w >> 63) ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
            r.saturate = ((w >> 60) & 3) == 3;
            check_fma(f, a, b, c, &r);
        }
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}

START_TEST(test_random_main)
{
    run_random(test_format(main_formats[_i]), test_scaled(1000000, 1000),
               0xf3a + (uint64_t)_i);
}
END_TEST

START_TEST(test_random_other)
{
    run_random(test_format(other_formats[_i]), test_scaled(100000, 1000),
               0xf3b0 + (uint64_t)_i);
}
END_TEST

/* ---- edge cases ------------------------------------------------------- */

/* Exact zero results: a * b = -c exactly, every sign combination, and
 * zero products against zero, finite, infinite and NaN c. */
START_TEST(test_zeros_and_specials)
{
    const emu_format *f = test_format(main_formats[_i]);
    unsigned long long before = n_mismatch, checked = n_checked;
    /* |a| * |b| = |c| exactly: 1.5 * 2 = 3, 1 * 1 = 1, and a pair near
     * the top of the range. */
    const double triples[][3] = {
        { 1.5, 2.0, 3.0 },
        { 1.0, 1.0, 1.0 },
        { 0.75, ldexp(1.0, f->emax - 1), 0.75 * ldexp(1.0, f->emax - 1) },
        { 0.5, ldexp(1.0, f->emin + 1), ldexp(1.0, f->emin) },
    };
    for (size_t t = 0; t < sizeof triples / sizeof triples[0]; t++)
        for (unsigned s = 0; s < 8; s++) {
            emu_bits a = pattern_of(f, s & 1 ? -triples[t][0] : triples[t][0]);
            emu_bits b = pattern_of(f, s & 2 ? -triples[t][1] : triples[t][1]);
            emu_bits c = pattern_of(f, s & 4 ? -triples[t][2] : triples[t][2]);
            ck_assert_msg(emu_decode(f, c) == (s & 4 ? -triples[t][2]
                                                     : triples[t][2]),
                          "%s: %a is not a value", f->name, triples[t][2]);
            for (unsigned k = 0; k < 2; k++)
                for (int m = 0; m < TEST_DET_MODES; m++) {
                    emu_rounding r = setting((emu_rnd)m, k);
                    check_fma(f, a, b, c, &r);
                }
        }

    /* Every combination of zeros, infinities, NaN and ordinary values. */
    const uint64_t top = field_mask(f->ebits);
    const uint64_t specials[] = {
        0,                                          /* +0 */
        top << f->mbits,                            /* inf */
        (top << f->mbits) | (1ull << (f->mbits - 1)), /* qNaN */
        (top << f->mbits) | 1,                      /* sNaN (or max) */
        (uint64_t)f->bias << f->mbits,              /* 1 */
        1,                                          /* min subnormal */
        ((top - 1) << f->mbits) | field_mask(f->mbits), /* max (IEEE) */
        field_mask(f->bits - 1),                    /* all ones: NaN or max */
    };
    const size_t ns = sizeof specials / sizeof specials[0];
    for (size_t i = 0; i < 2 * ns; i++)
        for (size_t j = 0; j < 2 * ns; j++)
            for (size_t l = 0; l < 2 * ns; l++) {
                emu_bits a = { specials[i / 2] | (i % 2 ? sign_bit(f) : 0) };
                emu_bits b = { specials[j / 2] | (j % 2 ? sign_bit(f) : 0) };
                emu_bits c = { specials[l / 2] | (l % 2 ? sign_bit(f) : 0) };
                for (unsigned k = 0; k < 2; k++)
                    for (int m = 0; m < TEST_DET_MODES; m++) {
                        emu_rounding r = setting((emu_rnd)m, k);
                        check_fma(f, a, b, c, &r);
                    }
            }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* The double-rounding trap: a*b + c = 1 + 2^-p + 2^-(3p-2) lies just
 * above the tie between 1 and 1 + 2^(1-p).  Rounded first to a format
 * with about twice the precision it lands on the tie, which nearest-even
 * then breaks downward to 1; the single rounding gives 1 + 2^(1-p).  In
 * binary16 this is fma(-2^-11 (1 + 2^-10), 1 - 2^-10, 1 + 2^-10). */
START_TEST(test_double_rounding_trap)
{
    const emu_format *f = test_format(main_formats[_i]);
    const int p = f->p;
    const double u = ldexp(1.0, 1 - p); /* ulp of 1 */
    const double a = -ldexp(1.0 + u, -p), b = 1.0 - u, c = 1.0 + u;
    unsigned long long before = n_mismatch, checked = n_checked;
    emu_bits A = pattern_of(f, a), B = pattern_of(f, b), C = pattern_of(f, c);
    ck_assert(emu_decode(f, A) == a && emu_decode(f, B) == b &&
              emu_decode(f, C) == c);
    for (unsigned k = 0; k < 2; k++)
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_rounding r = setting((emu_rnd)m, k);
            check_fma(f, A, B, C, &r);
        }
    /* The known answer, for the oracle itself. */
    emu_rounding rne = setting(EMU_RNE, 0);
    emu_status st;
    double want = emu_ref_fma(f, a, b, c, &rne, &st);
    ck_assert_msg(want == 1.0 + u && st.ternary > 0 &&
                  st.flags == EMU_FLAG_INEXACT,
                  "%s: MPFR oracle gives fma(%a, %a, %a) = %a (ternary %d, "
                  "flags 0x%x), expected %a", f->name, a, b, c, want,
                  st.ternary, st.flags, 1.0 + u);
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("mpfr_fma");
    TCase *ex = tcase_create("exhaustive_and_edges");
    tcase_set_timeout(ex, 0);
    tcase_add_loop_test(ex, test_all_triples, 0,
                        (int)(sizeof tiny_formats / sizeof tiny_formats[0]));
    tcase_add_loop_test(ex, test_zeros_and_specials, 0, N_MAIN);
    tcase_add_loop_test(ex, test_double_rounding_trap, 0, N_MAIN);
    suite_add_tcase(s, ex);

    TCase *rnd = tcase_create("random");
    tcase_set_timeout(rnd, 0);
    tcase_add_loop_test(rnd, test_random_main, 0, N_MAIN);
    tcase_add_loop_test(rnd, test_random_other, 0, N_OTHER);
    suite_add_tcase(s, rnd);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    fprintf(stderr, "mpfr_fma: %llu results checked, %llu mismatches\n",
            n_checked, n_mismatch);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
