/*
 * test_mpfr_arith16.c — binary16 and bfloat16 against the GNU MPFR oracle
 * (libemu/ref.c).
 *
 * Exhaustive where 2^16 allows it: sqrt of every value; every 16-bit
 * pattern (binary16, bfloat16, dlfloat) converted into every shipped
 * format, every tf32 pattern into binary16 and bfloat16; add, sub, mul
 * and div on every pair of significands (mul, div) or around every tie
 * (add, sub).  Sampled where it does not: 10^6 random pairs per operation
 * and mode, biased towards operands whose results interact (close
 * exponents for add, results spread over the whole range for mul and
 * div); 10^7 random binary32 values into binary16, bfloat16, e4m3 and
 * e5m2 in every mode, plus every binary32 and binary64 value within a
 * few ulps of a tie of those formats — the inputs on which rounding twice
 * (via binary32, or via a truncated remainder) would show.
 *
 * Settings: each check runs under one of two settings, {tininess after,
 * saturation off} and {tininess before, saturation on}.  A single result
 * is either tiny or overflowing, never both, so the pair meets each rule
 * in each state.  Random checks pick a setting at random.
 *
 * The exhaustive loops check every input in every mode and setting at
 * full scale (the release stage); under the sanitizer stage's reduced
 * scale, each input in one of them (test_exhaustive_pick): the same
 * inputs and the same code paths, instrumented, at a sixth to a twelfth
 * of the cost.
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

/* ---- cases ------------------------------------------------------------ */

static const char *const arith_formats[] = { "binary16", "bfloat16" };
enum { N_ARITH = 2 };

/* The two settings of the header comment. */
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

static uint64_t top_field(const emu_format *f)
{
    return field_mask(f->ebits);
}

static emu_bits make_bits(const emu_format *f, unsigned sign, uint64_t e,
                          uint64_t frac)
{
    emu_bits b = { (e << f->mbits) | frac };
    if (sign && f->is_signed)
        b.v |= 1ull << (f->ebits + f->mbits);
    return b;
}

/* A random finite pattern of f whose value has exponent in [elo, ehi]
 * (field 0, the subnormals, stands for every exponent below emin).  One
 * random word per try: the test's own generator is a visible part of the
 * run time. */
static emu_bits finite_bits(test_rng *g, const emu_format *f, long elo,
                            long ehi)
{
    long lo = elo + f->bias, hi = ehi + f->bias;
    long top = (long)top_field(f);
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
            lo = hi = top - 1; /* the top field holds no finite value */
    }
}

/* Exponent of the binade of a finite non-zero value. */
static int exponent_of(double v)
{
    int e;
    frexp(v, &e);
    return e - 1;
}

typedef double (*binop_fn)(const emu_format *, double, double,
                           const emu_rounding *, emu_status *);

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, N_BINOPS };
static const struct {
    const char *name;
    binop_fn emu, ref;
} binops[N_BINOPS] = {
    { "add", emu_add, emu_ref_add },
    { "sub", emu_sub, emu_ref_sub },
    { "mul", emu_mul, emu_ref_mul },
    { "div", emu_div, emu_ref_div },
};

static void check_binop(int op, const emu_format *f, emu_bits a, emu_bits b,
                        const emu_rounding *r)
{
    double v[2] = { emu_decode(f, a), emu_decode(f, b) };
    uint64_t bits[2] = { a.v, b.v };
    emu_status ws, gs;
    double want = binops[op].ref(f, v[0], v[1], r, &ws);
    double got = binops[op].emu(f, v[0], v[1], r, &gs);
    check_one(binops[op].name, f, f, r, 2, bits, v, want, ws, got, gs);
}

static void check_convert(const emu_format *src, uint64_t bits, double v,
                          const emu_format *dst, const emu_rounding *r)
{
    emu_status ws, gs;
    double want = emu_ref_convert(dst, v, r, &ws);
    double got = emu_convert(dst, v, r, &gs);
    check_one("convert", src, dst, r, 1, &bits, &v, want, ws, got, gs);
}

#define EXPECT_NO_NEW_MISMATCH(before, checked, what)                        \
    ck_assert_msg(n_mismatch == (before), "%s: %llu of %llu results differ " \
                  "from MPFR", (what), n_mismatch - (before),                \
                  n_checked - (checked))

/* ---- exhaustive ------------------------------------------------------- */

START_TEST(test_sqrt_all)
{
    const emu_format *f = test_format(arith_formats[_i]);
    unsigned long long before = n_mismatch, checked = n_checked;
    for (unsigned k = 0; k < 2; k++)
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_rounding r = setting((emu_rnd)m, k);
            for (uint64_t i = 0; i < 65536; i++) {
                double v = emu_decode(f, (emu_bits){ i });
                emu_status ws, gs;
                double want = emu_ref_sqrt(f, v, &r, &ws);
                double got = emu_sqrt(f, v, &r, &gs);
                check_one("sqrt", f, f, &r, 1, &i, &v, want, ws, got, gs);
            }
        }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* Every 16-bit shipped format, every pattern, into every shipped format. */
static const char *const sources16[] = { "binary16", "bfloat16", "dlfloat" };

START_TEST(test_convert_from16)
{
    const emu_format *src = test_format(sources16[_i]);
    unsigned long long before = n_mismatch, checked = n_checked;
    ck_assert_int_eq(src->bits, 16);
    for (size_t t = 0; t < emu_format_count(); t++) {
        const emu_format *dst = emu_format_at(t);
        for (unsigned k = 0; k < 2; k++)
            for (int m = 0; m < TEST_DET_MODES; m++) {
                emu_rounding r = setting((emu_rnd)m, k);
                for (uint64_t i = 0; i < 65536; i++)
                    if (test_exhaustive_pick(i + t, k * TEST_DET_MODES + (unsigned)m,
                                             2 * TEST_DET_MODES))
                        check_convert(src, i, emu_decode(src, (emu_bits){ i }),
                                      dst, &r);
            }
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, src->name);
}
END_TEST

/* tf32 has 19 bits: all of them into the two 16-bit formats (the other
 * direction is in test_convert_from16). */
START_TEST(test_convert_tf32)
{
    const emu_format *src = test_format("tf32");
    const emu_format *dst = test_format(arith_formats[_i]);
    unsigned long long before = n_mismatch, checked = n_checked;
    for (unsigned k = 0; k < 2; k++)
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_rounding r = setting((emu_rnd)m, k);
            for (uint64_t i = 0; i < (1ull << src->bits); i++)
                if (test_exhaustive_pick(i, k * TEST_DET_MODES + (unsigned)m,
                                         2 * TEST_DET_MODES))
                    check_convert(src, i, emu_decode(src, (emu_bits){ i }),
                                  dst, &r);
        }
    EXPECT_NO_NEW_MISMATCH(before, checked, dst->name);
}
END_TEST

/* Every pair of significands, for mul and div, with the exponents placed
 * so that the result lands in one of five regions: the middle, around the
 * overflow threshold, around 2^emin (tininess), around the smallest
 * subnormal, and below it.  binary16's million pairs take the regions in
 * turn; bfloat16's 16384 pairs take all five. */
START_TEST(test_significand_pairs)
{
    const emu_format *f = test_format(arith_formats[_i / 2]);
    const int op = _i % 2 ? OP_DIV : OP_MUL;
    const uint64_t nsig = 1ull << f->mbits;
    const long target[5] = { 0, f->emax, f->emin - 1, f->qmin, f->qmin - 2 };
    const int all_regions = nsig * nsig <= 65536;
    test_rng g = test_rng_make(0x5161 + (uint64_t)_i);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (uint64_t i = 0; i < nsig; i++)
        for (uint64_t j = 0; j < nsig; j++) {
            uint64_t pair = i * nsig + j;
            for (int reg = 0; reg < 5; reg++) {
                if (!all_regions && (uint64_t)reg != pair % 5)
                    continue;
                long T = target[reg];
                /* Product: ea + eb = T; quotient: ea - eb = T (give or
                 * take the one binade the significands add). */
                long lo, hi;
                if (op == OP_MUL) {
                    lo = T - f->emax > f->emin ? T - f->emax : f->emin;
                    hi = T - f->emin < f->emax ? T - f->emin : f->emax;
                } else {
                    lo = T + f->emin > f->emin ? T + f->emin : f->emin;
                    hi = T + f->emax < f->emax ? T + f->emax : f->emax;
                }
                if (lo > hi)
                    continue;
                long ea = lo + (long)test_below(&g, (uint64_t)(hi - lo + 1));
                long eb = op == OP_MUL ? T - ea : ea - T;
                emu_bits a = make_bits(f, (unsigned)test_below(&g, 2),
                                       (uint64_t)(ea + f->bias), i);
                emu_bits b = make_bits(f, (unsigned)test_below(&g, 2),
                                       (uint64_t)(eb + f->bias), j);
                for (int m = 0; m < TEST_DET_MODES; m++) {
                    if (!test_exhaustive_pick(pair + (uint64_t)reg, (unsigned)m,
                                              TEST_DET_MODES))
                        continue;
                    emu_rounding r = setting((emu_rnd)m, (unsigned)(pair + reg));
                    check_binop(op, f, a, b, &r);
                }
            }
        }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* The pattern of a positive value v of f, by bisection on the patterns
 * (increasing with the value below the sign bit; NaN counts as above all). */
static emu_bits positive_pattern(const emu_format *f, double v)
{
    uint64_t lo = 0, hi = (1ull << (f->bits - 1)) - 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        double d = emu_decode(f, (emu_bits){ mid });
        if (isnan(d) || d >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return (emu_bits){ lo };
}

/* Sums on and next to every tie: for each positive finite a whose half
 * ulp h is a value of the format, a ± h (an exact tie) and a ± h' for the
 * two values h' of the format on each side of h (the nearest a sum of two
 * values of the format can come to a tie without being one), both signs
 * of a, through add and through sub. */
START_TEST(test_add_ties)
{
    const emu_format *f = test_format(arith_formats[_i]);
    unsigned long long before = n_mismatch, checked = n_checked;
    const uint64_t sign_bit = 1ull << (f->bits - 1);
    static const emu_rounding exact; /* RNE, to test representability */

    for (uint64_t pa = 1; pa < sign_bit; pa++) {
        double a = emu_decode(f, (emu_bits){ pa });
        if (!isfinite(a) || a < f->min_normal * 2)
            continue;
        double h = ldexp(1.0, exponent_of(a) - f->p);
        double u = ldexp(1.0, exponent_of(h) - f->p + 1); /* ulp of h */
        double cand[5] = { h, h + u, h + 2 * u, h - u / 2, h - u };
        for (int c = 0; c < 5; c++) {
            emu_status s;
            double bv = cand[c];
            if (emu_ref_convert(f, bv, &exact, &s) != bv || s.ternary != 0)
                continue; /* not a value of f (below its subnormals) */
            emu_bits bb = positive_pattern(f, bv);
            ck_assert_msg(emu_decode(f, bb) == bv, "no pattern for %a", bv);
            for (unsigned sa = 0; sa < 2; sa++)
                for (unsigned sb = 0; sb < 2; sb++) {
                    emu_bits A = { pa | (sa ? sign_bit : 0) };
                    emu_bits B = { bb.v | (sb ? sign_bit : 0) };
                    for (int m = 0; m < TEST_DET_MODES; m++) {
                        if (!test_exhaustive_pick(pa + (uint64_t)c + 2 * sa + sb,
                                                  (unsigned)m, TEST_DET_MODES))
                            continue;
                        emu_rounding r = setting((emu_rnd)m, sa ^ sb);
                        check_binop(OP_ADD, f, A, B, &r);
                        check_binop(OP_SUB, f, A, B, &r);
                    }
                }
        }
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* The edges of the range: pairs drawn from the lowest binades (sums and
 * differences of subnormals, products and quotients crossing 2^emin),
 * from the top binades (overflow by rounding and by magnitude), and every
 * pair of the special values and their neighbours. */
START_TEST(test_edges)
{
    const emu_format *f = test_format(arith_formats[_i]);
    test_rng g = test_rng_make(0xed9e + (uint64_t)_i);
    const uint64_t n = test_scaled(100000, 1000);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (uint64_t k = 0; k < n; k++) {
        int op = (int)(k % N_BINOPS);
        emu_bits a, b;
        if (k & 4) {
            a = finite_bits(&g, f, f->emin - 1, f->emin + 1);
            b = op >= OP_MUL ? finite_bits(&g, f, -2, 2)
                             : finite_bits(&g, f, f->emin - 1, f->emin + 1);
        } else {
            a = finite_bits(&g, f, f->emax - 1, f->emax);
            b = op >= OP_MUL ? finite_bits(&g, f, -1, 1)
                             : finite_bits(&g, f, f->emax - 2, f->emax);
        }
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_rounding r = setting((emu_rnd)m, (unsigned)(k >> 3));
            check_binop(op, f, a, b, &r);
        }
    }

    /* Specials: zeros, infinities, a quiet and a signaling NaN, the ends
     * of the subnormal and normal ranges, and plain values. */
    const uint64_t sign_bit = 1ull << (f->bits - 1);
    const uint64_t top = top_field(f), quiet = 1ull << (f->mbits - 1);
    const uint64_t mmask = field_mask(f->mbits);
    uint64_t specials[] = {
        0,                                   /* +0 */
        top << f->mbits,                     /* inf */
        (top << f->mbits) | quiet,           /* qNaN */
        (top << f->mbits) | 1,               /* sNaN */
        1,                                   /* min subnormal */
        mmask,                               /* max subnormal */
        1ull << f->mbits,                    /* min normal */
        ((top - 1) << f->mbits) | mmask,     /* max */
        ((top - 1) << f->mbits),             /* 2^emax */
        (uint64_t)f->bias << f->mbits,       /* 1 */
        ((uint64_t)f->bias << f->mbits) | quiet, /* 1.5 */
        ((uint64_t)(f->bias + 1) << f->mbits) | 1, /* 2 + ulp */
    };
    const size_t ns = sizeof specials / sizeof specials[0];
    for (size_t i = 0; i < 2 * ns; i++)
        for (size_t j = 0; j < 2 * ns; j++) {
            emu_bits a = { specials[i / 2] | (i % 2 ? sign_bit : 0) };
            emu_bits b = { specials[j / 2] | (j % 2 ? sign_bit : 0) };
            for (int op = 0; op < N_BINOPS; op++)
                for (unsigned k = 0; k < 2; k++)
                    for (int m = 0; m < TEST_DET_MODES; m++) {
                        emu_rounding r = setting((emu_rnd)m, k);
                        check_binop(op, f, a, b, &r);
                    }
        }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* ---- sampled ---------------------------------------------------------- */

/* 10^6 random pairs for one (format, operation) and every mode.  A
 * quarter are uniform patterns (specials included); the rest choose b's
 * exponent from a's so that the result matters: within p + 3 binades for
 * add and sub, anywhere from below the subnormals to beyond max for mul
 * and div. */
START_TEST(test_random_pairs)
{
    const emu_format *f = test_format(arith_formats[_i / N_BINOPS]);
    const int op = _i % N_BINOPS;
    const uint64_t n = test_scaled(1000000, 1000);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (int m = 0; m < TEST_DET_MODES; m++) {
        test_rng g = test_rng_make(0xa16 + (uint64_t)_i);
        for (uint64_t k = 0; k < n; k++) {
            /* One word steers the case: which kind (bits 0-1), the
             * exponent offset (bits 8-31), the setting (bits 60-63). */
            uint64_t w = test_next(&g);
            emu_bits a, b;
            if ((w & 3) == 0) {
                a = test_random_bits(&g, f);
                b = test_random_bits(&g, f);
            } else {
                a = finite_bits(&g, f, f->emin - 1, f->emax);
                double av = emu_decode(f, a);
                long ea = av == 0.0 ? f->emin : exponent_of(av);
                uint64_t x = (w >> 8) & 0xffffff;
                if (op <= OP_SUB) {
                    long d = (long)(x % (2 * (uint64_t)f->p + 7)) - (f->p + 3);
                    b = finite_bits(&g, f, ea + d, ea + d);
                } else {
                    long T = f->qmin - 2 +
                             (long)(x % (uint64_t)(f->emax - f->qmin + 5));
                    long eb = op == OP_MUL ? T - ea : ea - T;
                    b = finite_bits(&g, f, eb, eb);
                }
            }
            emu_rounding r = setting((emu_rnd)m, 0);
            r.tininess = (w >> 63) ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
            r.saturate = ((w >> 60) & 3) == 3;
            check_binop(op, f, a, b, &r);
        }
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

static const char *const narrow32[] = { "binary16", "bfloat16", "e4m3",
                                        "e5m2" };
enum { N_NARROW = 4 };

static float f32_of_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t bits_of_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* 10^7 random binary32 values, each into the four narrow formats, in the
 * mode _i.  Half are uniform bit patterns (every exponent of binary32,
 * NaN and inf included); half have exponents in and around the range of
 * one of the targets, in turn. */
START_TEST(test_random_binary32)
{
    const emu_format *b32 = test_format("binary32");
    const emu_format *dst[N_NARROW];
    for (int t = 0; t < N_NARROW; t++)
        dst[t] = test_format(narrow32[t]);
    const uint64_t n = test_scaled(10000000, 10000);
    test_rng g = test_rng_make(0xb32);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (uint64_t k = 0; k < n; k++) {
        uint64_t w = test_next(&g);
        uint32_t u = (uint32_t)w;
        if (w >> 63) {
            const emu_format *t = dst[k % N_NARROW];
            long lo = t->qmin - 4, hi = t->emax + 3;
            long e = lo + (long)((w >> 32) % (uint64_t)(hi - lo + 1));
            long field = e + 127 < 0 ? 0 : e + 127 > 254 ? 254 : e + 127;
            u = (u & 0x807fffffu) | ((uint32_t)field << 23);
        }
        double x = (double)f32_of_bits(u);
        emu_rounding r = setting((emu_rnd)_i, (unsigned)(w >> 62));
        for (int t = 0; t < N_NARROW; t++)
            check_convert(b32, u, x, dst[t], &r);
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, emu_rnd_name((emu_rnd)_i));
}
END_TEST

/* The tie points of f: midpoints of consecutive non-negative values, from
 * (0, min) to (max, the value max would have after it).  Returns the
 * number written (at most cap). */
static size_t tie_points(const emu_format *f, double *out, size_t cap)
{
    const uint64_t npos = f->is_signed ? 1ull << (f->bits - 1) : 1ull << f->bits;
    size_t n = 0;
    double prev = 0.0;
    for (uint64_t i = 1; i < npos && n < cap; i++) {
        double v = emu_decode(f, (emu_bits){ i });
        if (!isfinite(v) || v <= prev)
            continue;
        out[n++] = prev + (v - prev) / 2;
        prev = v;
    }
    if (n < cap)
        out[n++] = f->max + ldexp(1.0, f->emax - f->mbits - 1);
    return n;
}

/* Every binary32 value within 3 ulps of a tie of each narrow format,
 * both signs, every mode, both settings. */
START_TEST(test_ties_binary32)
{
    const emu_format *b32 = test_format("binary32");
    const emu_format *f = test_format(narrow32[_i]);
    static double ties[70000];
    size_t nt = tie_points(f, ties, sizeof ties / sizeof ties[0]);
    unsigned long long before = n_mismatch, checked = n_checked;
    ck_assert(nt > 8);

    for (size_t i = 0; i < nt; i++) {
        float t = (float)ties[i];
        ck_assert_msg((double)t == ties[i], "tie %a is not a binary32",
                      ties[i]);
        float x = t;
        for (int s = 0; s < 3; s++)
            x = nextafterf(x, 0.0f);
        for (int s = 0; s < 7; s++, x = nextafterf(x, INFINITY))
            for (unsigned neg = 0; neg < 2; neg++) {
                float y = neg ? -x : x;
                for (unsigned k = 0; k < 2; k++)
                    for (int m = 0; m < TEST_DET_MODES; m++) {
                        if (!test_exhaustive_pick(i * 7 + (uint64_t)s + neg,
                                                  k * TEST_DET_MODES + (unsigned)m,
                                                  2 * TEST_DET_MODES))
                            continue;
                        emu_rounding r = setting((emu_rnd)m, k);
                        check_convert(b32, bits_of_f32(y), (double)y, f, &r);
                    }
            }
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

/* binary64 into the 16-bit formats: every double within 3 ulps of a tie,
 * and random doubles around the range. */
START_TEST(test_binary64)
{
    const emu_format *b64 = test_format("binary64");
    const emu_format *f = test_format(arith_formats[_i]);
    static double ties[70000];
    size_t nt = tie_points(f, ties, sizeof ties / sizeof ties[0]);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (size_t i = 0; i < nt; i++) {
        double x = ties[i];
        for (int s = 0; s < 3; s++)
            x = nextafter(x, 0.0);
        for (int s = 0; s < 7; s++, x = nextafter(x, INFINITY))
            for (unsigned neg = 0; neg < 2; neg++) {
                double y = neg ? -x : x;
                uint64_t u;
                memcpy(&u, &y, sizeof u);
                for (int m = 0; m < TEST_DET_MODES; m++) {
                    emu_rounding r = setting((emu_rnd)m, (unsigned)(i + neg));
                    check_convert(b64, u, y, f, &r);
                }
            }
    }

    test_rng g = test_rng_make(0xb64 + (uint64_t)_i);
    const uint64_t n = test_scaled(1000000, 1000);
    for (uint64_t k = 0; k < n; k++) {
        uint64_t w = test_next(&g);
        long e = f->qmin - 4 + (long)(test_next(&g) %
                                      (uint64_t)(f->emax - f->qmin + 8));
        uint64_t u = (w & 0x800fffffffffffffull) |
                     ((uint64_t)(e + 1023) << 52);
        double y;
        memcpy(&y, &u, sizeof y);
        emu_rounding r = setting((emu_rnd)(k % TEST_DET_MODES),
                                 (unsigned)(w >> 60));
        check_convert(b64, u, y, f, &r);
    }
    EXPECT_NO_NEW_MISMATCH(before, checked, f->name);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("mpfr_arith16");
    TCase *ex = tcase_create("exhaustive");
    tcase_set_timeout(ex, 0);
    tcase_add_loop_test(ex, test_sqrt_all, 0, N_ARITH);
    tcase_add_loop_test(ex, test_convert_from16, 0,
                        (int)(sizeof sources16 / sizeof sources16[0]));
    tcase_add_loop_test(ex, test_convert_tf32, 0, N_ARITH);
    tcase_add_loop_test(ex, test_significand_pairs, 0, 2 * N_ARITH);
    tcase_add_loop_test(ex, test_add_ties, 0, N_ARITH);
    tcase_add_loop_test(ex, test_edges, 0, N_ARITH);
    suite_add_tcase(s, ex);

    TCase *rnd = tcase_create("sampled");
    tcase_set_timeout(rnd, 0);
    tcase_add_loop_test(rnd, test_random_pairs, 0, N_ARITH * N_BINOPS);
    tcase_add_loop_test(rnd, test_random_binary32, 0, TEST_DET_MODES);
    tcase_add_loop_test(rnd, test_ties_binary32, 0, N_NARROW);
    tcase_add_loop_test(rnd, test_binary64, 0, N_ARITH);
    suite_add_tcase(s, rnd);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    fprintf(stderr, "mpfr_arith16: %llu results checked, %llu mismatches\n",
            n_checked, n_mismatch);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
