/*
 * test_mpfr_int.c — the integer conversions and the quiet comparisons
 * (emu_to_int, emu_to_uint, emu_from_int, emu_from_uint, emu_min, emu_max,
 * emu_unordered) against GNU MPFR.
 *
 * To an integer, the oracle rounds with MPFR's own integer functions
 * (mpfr_rint in the directed modes and nearest-even, mpfr_round for ties
 * away, mpfr_trunc plus the odd bit for round-to-odd, the stochastic
 * definition of mpfr_check.h), then applies the contract of emu/arith.h:
 * out of range or NaN gives invalid and the saturated value, NaN the most
 * negative (signed) or the largest (unsigned); where arith.h is silent,
 * IEEE 754 (7.2: invalid alone, no inexact) and round.h (ternary 0 when
 * there is no rounded value to compare).  Inputs: every pattern of every shipped format of at most 16
 * bits (each in one mode under the sanitizer stage's reduced scale), and
 * random doubles about every width's boundaries and the ties.
 *
 * From an integer: the exact integer in MPFR, then the oracle's rounding
 * (emu_ref_round, libemu/ref.c), so value, ternary and all flags are
 * checked, in every mode, with and without saturation.  Inputs: every
 * integer up to 2^12, every representable integer of the formats of at
 * most 16 bits with its neighbours and the midpoints beside it, the
 * int64/uint64 extremes, and random integers of every bit length.
 *
 * Minimum and maximum are IEEE 754-2019's minimum/maximum, as emu/arith.h
 * documents them: NaN if either operand is NaN (unlike MPFR's mpfr_min,
 * which is minNum and returns the number), -0 below +0 (as mpfr_min and
 * mpfr_max order zeros).  Every pair of patterns of the formats of at most
 * 8 bits, every pattern of the 16-bit ones against the specials and their
 * neighbours, and random binary32 pairs.
 */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/ref.h>

#include "mpfr_check.h"
#include "testutil.h"

static const int widths[] = { 8, 16, 32, 64 };
enum { N_WIDTHS = sizeof widths / sizeof widths[0] };

/* Every mode: the six deterministic ones, then stochastic with 64, 1, 7
 * and 13 random bits. */
static const struct {
    emu_rnd mode;
    unsigned bits;
} modes[] = {
    { EMU_RNE, 0 }, { EMU_RNA, 0 }, { EMU_RZ, 0 },       { EMU_RU, 0 },
    { EMU_RD, 0 },  { EMU_RO, 0 },  { EMU_RS, 64 },      { EMU_RS_BITS, 1 },
    { EMU_RS_BITS, 7 }, { EMU_RS_BITS, 13 },
};
enum { N_MODES = sizeof modes / sizeof modes[0] };

static emu_rounding rounding_of(int m, bool saturate, emu_rng *rng)
{
    emu_rounding r = { .mode = modes[m].mode, .sr_bits = modes[m].bits,
                       .saturate = saturate, .rng = rng };
    return r;
}

/* The word the library will draw next from rng (the documented source of
 * stochastic rounding's randomness), without drawing it. */
static uint64_t next_word(const emu_rng *rng)
{
    emu_rng copy = *rng;
    return emu_rng_next(&copy);
}

static int sgn(int t)
{
    return (t > 0) - (t < 0);
}

/* x = u, exactly (two 32-bit halves: unsigned long may be 32 bits). */
static void set_u64(mpfr_ptr x, uint64_t u)
{
    mpfr_set_ui(x, (unsigned long)(u >> 32), MPFR_RNDN);
    mpfr_mul_2ui(x, x, 32, MPFR_RNDN);
    mpfr_add_ui(x, x, (unsigned long)(u & 0xffffffffu), MPFR_RNDN);
}

/* |x| for an integer-valued x below 2^64 in magnitude. */
static uint64_t get_u64(mpfr_srcptr x)
{
    mpfr_t t, h;
    mpfr_inits2(128, t, h, (mpfr_ptr)0);
    mpfr_abs(t, x, MPFR_RNDN);
    mpfr_div_2ui(h, t, 32, MPFR_RNDN);
    uint64_t hi = mpfr_get_ui(h, MPFR_RNDZ);
    set_u64(h, hi << 32);
    mpfr_sub(t, t, h, MPFR_RNDN); /* exact: the low 32 bits */
    uint64_t lo = mpfr_get_ui(t, MPFR_RNDZ);
    mpfr_clears(t, h, (mpfr_ptr)0);
    return hi << 32 | lo;
}

/* ---- to an integer: the oracle ----------------------------------------- */

typedef struct int_result {
    uint64_t v; /* the integer (two's complement for signed results) */
    emu_status st;
} int_result;

/* y = x rounded to an integer by r (word for the stochastic modes). */
static void ref_integral(mpfr_ptr y, mpfr_srcptr x, const emu_rounding *r,
                         uint64_t word)
{
    switch (r->mode) {
    case EMU_RNE:
        mpfr_rint(y, x, MPFR_RNDN);
        break;
    case EMU_RNA:
        mpfr_round(y, x);
        break;
    case EMU_RZ:
        mpfr_trunc(y, x);
        break;
    case EMU_RU:
        mpfr_ceil(y, x);
        break;
    case EMU_RD:
        mpfr_floor(y, x);
        break;
    case EMU_RO: {
        mpfr_trunc(y, x);
        mpfr_t h;
        mpfr_init2(h, mpfr_get_prec(y));
        mpfr_div_2ui(h, y, 1, MPFR_RNDN);
        if (!mpfr_integer_p(x) && mpfr_integer_p(h))
            mpfr_add_si(y, y, mpfr_signbit(x) ? -1 : 1, MPFR_RNDN);
        mpfr_clear(h);
        break;
    }
    default: {
        mpfr_trunc(y, x);
        mpfr_t F;
        mpfr_init2(F, 2 * mpfr_get_prec(x) + 64);
        mpfr_sub(F, x, y, MPFR_RNDN); /* exact */
        mpfr_abs(F, F, MPFR_RNDN);
        if (!mpfr_zero_p(F) && ref_sr_away(F, r, word))
            mpfr_add_si(y, y, mpfr_signbit(x) ? -1 : 1, MPFR_RNDN);
        mpfr_clear(F);
        break;
    }
    }
}

static int_result ref_to_int(double a, int width, bool is_signed,
                             const emu_rounding *r, uint64_t word)
{
    int_result res = { 0, { 0, 0 } };
    /* The range [lo, hi] as two's complement patterns. */
    const uint64_t umax = width == 64 ? ~(uint64_t)0 : ((uint64_t)1 << width) - 1;
    const uint64_t hi = is_signed ? umax >> 1 : umax;
    const uint64_t lo = is_signed ? ~(umax >> 1) : 0;
    if (isnan(a)) {
        res.st.flags = EMU_FLAG_INVALID;
        res.v = is_signed ? lo : hi;
        return res;
    }
    mpfr_t x, y;
    mpfr_inits2(64, x, y, (mpfr_ptr)0); /* a double, its integer +-1 */
    mpfr_set_d(x, a, MPFR_RNDN);
    if (isinf(a))
        mpfr_set(y, x, MPFR_RNDN);
    else
        ref_integral(y, x, r, word);
    bool in_range;
    if (is_signed)
        in_range = mpfr_cmp_si_2exp(y, 1, width - 1) < 0 &&
                   mpfr_cmp_si_2exp(y, -1, width - 1) >= 0;
    else
        in_range = mpfr_cmp_ui(y, 0) >= 0 && mpfr_cmp_ui_2exp(y, 1, width) < 0;
    if (!in_range) {
        res.st.flags = EMU_FLAG_INVALID;
        res.v = mpfr_sgn(y) > 0 ? hi : lo;
    } else {
        uint64_t m = get_u64(y);
        res.v = mpfr_sgn(y) < 0 ? (uint64_t)0 - m : m;
        if (!mpfr_integer_p(x)) {
            res.st.flags = EMU_FLAG_INEXACT;
            res.st.ternary = mpfr_cmp(y, x);
        }
    }
    mpfr_clears(x, y, (mpfr_ptr)0);
    return res;
}

/* The library's answer for the same question, drawing from rng. */
static int_result emu_to_integer(double a, int width, bool is_signed,
                                 const emu_rounding *r)
{
    int_result res;
    if (is_signed)
        res.v = (uint64_t)emu_to_int(a, width, r, &res.st);
    else
        res.v = emu_to_uint(a, width, r, &res.st);
    return res;
}

static unsigned long long n_int_checked;

/* a converted to every width, signed and unsigned, in every mode; a is
 * input number `input` of an exhaustive loop (test_exhaustive_pick: in
 * one mode under the sanitizer stage's reduced scale) or ALL_MODES. */
enum { ALL_MODES = -1 };
static void check_to_int(double a, emu_rng *rng, int64_t input)
{
    for (int m = 0; m < N_MODES; m++) {
        if (input != ALL_MODES &&
            !test_exhaustive_pick((uint64_t)input, (unsigned)m, N_MODES))
            continue;
        for (int w = 0; w < N_WIDTHS; w++)
            for (int s = 0; s < 2; s++) {
                emu_rounding r = rounding_of(m, false, rng);
                uint64_t word = next_word(rng);
                int_result want = ref_to_int(a, widths[w], s, &r, word);
                int_result got = emu_to_integer(a, widths[w], s, &r);
                n_int_checked++;
                EXPECT(got.v == want.v && got.st.flags == want.st.flags &&
                       sgn(got.st.ternary) == sgn(want.st.ternary),
                       "%s%d(%a), mode %s (sr bits %u, word 0x%016" PRIx64
                       "): got 0x%" PRIx64 " ternary %d flags 0x%x, MPFR says 0x%"
                       PRIx64 " ternary %d flags 0x%x", s ? "int" : "uint",
                       widths[w], a, emu_rnd_name(r.mode), r.sr_bits, word, got.v,
                       got.st.ternary, got.st.flags, want.v, want.st.ternary,
                       want.st.flags);
            }
    }
}

/* ---- the formats ------------------------------------------------------- */

enum { MAX_FORMATS = 64 };
static const emu_format *narrow[MAX_FORMATS]; /* shipped, <= 16 bits */
static size_t n_narrow;

static void collect_formats(void)
{
    for (size_t i = 0; i < emu_format_count(); i++)
        if (emu_format_at(i)->bits <= 16)
            narrow[n_narrow++] = emu_format_at(i);
}

/* ---- to an integer: the tests ------------------------------------------ */

/* Every pattern of a shipped format of at most 16 bits. */
START_TEST(to_int_every_pattern)
{
    const emu_format *f = narrow[_i];
    emu_rng rng = emu_rng_make(0x1e7, (uint64_t)_i);
    for (uint64_t b = 0; b < (uint64_t)1 << f->bits; b++)
        check_to_int(emu_decode(f, (emu_bits){ b }), &rng, (int64_t)b);
}
END_TEST

/* A double at a place where an integer conversion can go wrong: beside a
 * width's limits, on and beside ties, beyond 2^53 where every double is an
 * integer, tiny, huge, and the specials. */
static double interesting_double(test_rng *g)
{
    uint64_t w = test_next(g);
    double sign = (w & 1) ? -1.0 : 1.0;
    int e = (int)test_below(g, 67); /* integer part of up to 66 bits */
    double n = e == 0 ? 0.0 : ldexp((double)(test_next(g) >> 11), e - 53);
    n = floor(n);
    double frac;
    switch ((w >> 1) & 7) {
    case 0:
        frac = 0.5; /* a tie */
        break;
    case 1:
        frac = 0.0;
        break;
    case 2: /* just beside a tie or an integer */
        frac = 0.5 + ldexp((double)((int)test_below(g, 5) - 2), -(int)test_below(g, 60) - 2);
        break;
    case 3: { /* a width's limit, +-1, +-1/2 */
        static const double off[] = { -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0 };
        n = ldexp(1.0, widths[test_below(g, N_WIDTHS)] - (int)test_below(g, 2));
        frac = off[test_below(g, 7)];
        break;
    }
    case 4: { /* specials and extremes */
        static const double sp[] = { 0.0, INFINITY, NAN, DBL_MAX, DBL_TRUE_MIN,
                                     DBL_MIN, 0x1p-1, 0x1.fffffffffffffp-1,
                                     0x1p63, 0x1p64, 0x1.fffffffffffffp62,
                                     0x1.fffffffffffffp63, 0x1p52, 0x1p53 };
        return sign * sp[test_below(g, sizeof sp / sizeof sp[0])];
    }
    default:
        frac = ldexp((double)(test_next(g) >> 11), -53);
        break;
    }
    return sign * (n + frac); /* the sum rounds only where n is huge */
}

START_TEST(to_int_random_doubles)
{
    test_rng g = test_rng_make(0x17e6);
    emu_rng rng = emu_rng_make(0x1e8, 0);
    const uint64_t n = test_scaled(100000, 2000);
    for (uint64_t i = 0; i < n; i++)
        check_to_int(interesting_double(&g), &rng, ALL_MODES);
}
END_TEST

/* The documented results of the invalid cases, spelled out once beside
 * the oracle's general rule, in every mode. */
START_TEST(to_int_invalid_cases)
{
    emu_rng rng = emu_rng_make(0x1e9, 0);
    for (int m = 0; m < N_MODES; m++) {
        emu_rounding r = rounding_of(m, false, &rng);
        for (int w = 0; w < N_WIDTHS; w++) {
            const int W = widths[w];
            const int64_t smin = W == 64 ? INT64_MIN : -((int64_t)1 << (W - 1));
            const int64_t smax = W == 64 ? INT64_MAX : ((int64_t)1 << (W - 1)) - 1;
            const uint64_t umax = W == 64 ? UINT64_MAX : ((uint64_t)1 << W) - 1;
            const double big = ldexp(1.0, W);
            /* a; its signed result and whether invalid; the same unsigned. */
            const struct {
                double a;
                int64_t s;
                bool s_inv;
                uint64_t u;
                bool u_inv;
            } cases[] = {
                { NAN, smin, true, umax, true },
                { -NAN, smin, true, umax, true },
                { INFINITY, smax, true, umax, true },
                { -INFINITY, smin, true, 0, true },
                { big, smax, true, umax, true },
                { -big, smin, true, 0, true },
                { big / 2.0, smax, true, (uint64_t)1 << (W - 1), false },
                { -big / 2.0, smin, false, 0, true },
                { -big / 2.0 - 1.0, smin, W < 64, 0, true }, /* rounds at 64 */
                { -1.0, -1, false, 0, true },
                { DBL_MAX, smax, true, umax, true },
            };
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                emu_status st;
                int64_t s = emu_to_int(cases[c].a, W, &r, &st);
                EXPECT(s == cases[c].s &&
                       st.flags == (cases[c].s_inv ? EMU_FLAG_INVALID : 0u) &&
                       st.ternary == 0,
                       "int%d(%a) %s: %" PRId64 " flags 0x%x ternary %d, "
                       "expected %" PRId64, W, cases[c].a, emu_rnd_name(r.mode),
                       s, st.flags, st.ternary, cases[c].s);
                uint64_t u = emu_to_uint(cases[c].a, W, &r, &st);
                EXPECT(u == cases[c].u &&
                       st.flags == (cases[c].u_inv ? EMU_FLAG_INVALID : 0u) &&
                       st.ternary == 0,
                       "uint%d(%a) %s: %" PRIu64 " flags 0x%x ternary %d, "
                       "expected %" PRIu64, W, cases[c].a, emu_rnd_name(r.mode),
                       u, st.flags, st.ternary, cases[c].u);
            }
        }
    }
}
END_TEST

/* ---- from an integer --------------------------------------------------- */

static unsigned long long n_from_checked;

/* Stochastic rounding needs a signed format with a zero (mpfr_check.h). */
static bool sr_applies(const emu_format *f)
{
    return f->is_signed && f->has_zero;
}

/* v (the integer m, negated if neg) into f, in every mode, with and
 * without saturation, through emu_from_int (when v fits int64) and
 * emu_from_uint (when v >= 0). */
static void check_from(const emu_format *f, uint64_t m, bool neg, emu_rng *rng)
{
    const bool fits_int = neg ? m <= (uint64_t)1 << 63 : m <= (uint64_t)INT64_MAX;
    mpfr_t x;
    mpfr_init2(x, 64);
    set_u64(x, m);
    if (neg)
        mpfr_neg(x, x, MPFR_RNDN);
    /* Saturation changes only what lies beyond max. */
    const int nsat = (double)m > f->max ? 2 : 1;
    for (int m_i = 0; m_i < N_MODES; m_i++)
        for (int sat = 0; sat < nsat; sat++) {
            emu_rounding r = rounding_of(m_i, sat, rng);
            if (emu_rnd_is_stochastic(r.mode) && !sr_applies(f))
                continue;
            for (int sgnd = 0; sgnd < 2; sgnd++) {
                if (sgnd ? !fits_int : neg)
                    continue;
                emu_status ws, gs;
                double want = emu_rnd_is_stochastic(r.mode)
                            ? ref_sr_round(f, x, &r, next_word(rng), &ws)
                            : emu_ref_round(f, x, &r, &ws);
                double got;
                if (sgnd) {
                    int64_t i = neg ? (int64_t)((uint64_t)0 - m) : (int64_t)m;
                    got = emu_from_int(f, i, &r, &gs);
                } else {
                    got = emu_from_uint(f, m, &r, &gs);
                }
                n_from_checked++;
                EXPECT(test_same(want, got) && sgn(ws.ternary) == sgn(gs.ternary) &&
                       ws.flags == gs.flags,
                       "%s(%s%" PRIu64 ") into %s, %s%s: got %a ternary %d "
                       "flags 0x%x, MPFR says %a ternary %d flags 0x%x",
                       sgnd ? "from_int" : "from_uint", neg ? "-" : "", m,
                       f->name, emu_rnd_name(r.mode), sat ? " saturate" : "",
                       got, gs.ternary, gs.flags, want, ws.ternary, ws.flags);
            }
        }
    mpfr_clear(x);
}

static void check_from_both_signs(const emu_format *f, uint64_t m, emu_rng *rng)
{
    check_from(f, m, false, rng);
    if (m != 0) /* an integer zero has no sign */
        check_from(f, m, true, rng);
}

/* Every integer of magnitude up to 2^12, into every shipped format. */
START_TEST(from_int_small)
{
    const emu_format *f = emu_format_at((size_t)_i);
    emu_rng rng = emu_rng_make(0xf1, (uint64_t)_i);
    for (uint64_t m = 0; m <= 4096; m++)
        check_from_both_signs(f, m, &rng);
}
END_TEST

/* Every integer value of a format of at most 16 bits below 2^64, with its
 * neighbours, and the midpoint to the next value with its neighbours: the
 * ties and near-ties of every binade. */
START_TEST(from_int_every_value)
{
    const emu_format *f = narrow[_i];
    emu_rng rng = emu_rng_make(0xf2, (uint64_t)_i);
    double prev = -1.0;
    for (uint64_t b = 0; b < (uint64_t)1 << f->bits; b++) {
        double v = emu_decode(f, (emu_bits){ b });
        if (!(v >= 4096.0) || v >= 0x1p64 || signbit(v))
            continue;
        /* Patterns of one sign increase with b: prev is v's predecessor. */
        uint64_t m = (uint64_t)v;
        for (int d = -1; d <= 1; d++)
            check_from_both_signs(f, m + (uint64_t)(int64_t)d, &rng);
        if (prev >= 4096.0) {
            uint64_t mid = (uint64_t)prev + (m - (uint64_t)prev) / 2;
            for (int d = -1; d <= 1; d++)
                check_from_both_signs(f, mid + (uint64_t)(int64_t)d, &rng);
        }
        prev = v;
    }
    /* The last value's midpoint with the overflow threshold's neighbour. */
    if (f->max < 0x1p63) {
        uint64_t mx = (uint64_t)f->max;
        uint64_t gap = (uint64_t)ldexp(1.0, ilogb(f->max) - f->p + 1);
        for (uint64_t k = 0; k <= 4; k++)
            check_from_both_signs(f, mx + k * gap / 2, &rng);
    }
}
END_TEST

/* The int64/uint64 extremes and random integers of every bit length, into
 * every shipped format. */
START_TEST(from_int_extremes_and_random)
{
    const emu_format *f = emu_format_at((size_t)_i);
    emu_rng rng = emu_rng_make(0xf3, (uint64_t)_i);
    static const uint64_t ext[] = {
        UINT64_MAX, UINT64_MAX - 1, (uint64_t)1 << 63, ((uint64_t)1 << 63) - 1,
        ((uint64_t)1 << 63) + 1, UINT64_MAX - 0x3ff, UINT64_MAX - 0x400,
        UINT64_MAX - 0x7ff, ((uint64_t)1 << 53) + 1, ((uint64_t)1 << 54) + 2,
        ((uint64_t)1 << 24) + 1, ((uint64_t)1 << 25) + 3, 0x7ff, 0x800, 0xfff,
    };
    for (size_t k = 0; k < sizeof ext / sizeof ext[0]; k++)
        check_from_both_signs(f, ext[k], &rng);
    test_rng g = test_rng_make(0xf4 + (uint64_t)_i);
    const uint64_t n = test_scaled(3000, 300);
    for (uint64_t i = 0; i < n; i++) {
        int len = 1 + (int)test_below(&g, 64);
        uint64_t m = test_next(&g) >> (64 - len);
        /* Often a tie at the format's precision: p+1 significant bits. */
        if ((i & 3) == 0 && len > f->p + 1)
            m = (m >> (len - f->p - 1) | 1) << (len - f->p - 1);
        check_from_both_signs(f, m, &rng);
    }
}
END_TEST

/* ---- minimum, maximum, unordered ---------------------------------------- */

static void ref_minmax(double a, double b, double *mn, double *mx, bool *un)
{
    mpfr_t x, y, t;
    mpfr_inits2(53, x, y, t, (mpfr_ptr)0);
    mpfr_set_d(x, a, MPFR_RNDN);
    mpfr_set_d(y, b, MPFR_RNDN);
    *un = mpfr_unordered_p(x, y) != 0;
    if (mpfr_nan_p(x) || mpfr_nan_p(y)) {
        /* IEEE 754-2019 minimum/maximum propagate NaN; MPFR's min/max
         * (minNum/maxNum) would return the number. */
        *mn = *mx = NAN;
    } else {
        mpfr_min(t, x, y, MPFR_RNDN); /* -0 for zeros of opposite signs */
        *mn = mpfr_get_d(t, MPFR_RNDN);
        mpfr_max(t, x, y, MPFR_RNDN); /* +0 likewise */
        *mx = mpfr_get_d(t, MPFR_RNDN);
    }
    mpfr_clears(x, y, t, (mpfr_ptr)0);
}

static void check_minmax(double a, double b)
{
    double mn, mx;
    bool un;
    ref_minmax(a, b, &mn, &mx, &un);
    double gmn = emu_min(a, b), gmx = emu_max(a, b);
    bool gun = emu_unordered(a, b);
    EXPECT(test_same(gmn, mn), "min(%a, %a) = %a, MPFR says %a", a, b, gmn, mn);
    EXPECT(test_same(gmx, mx), "max(%a, %a) = %a, MPFR says %a", a, b, gmx, mx);
    EXPECT(gun == un, "unordered(%a, %a) = %d, MPFR says %d", a, b, gun, un);
}

/* Every pair of patterns of each format of at most 8 bits. */
START_TEST(minmax_small_pairs)
{
    const emu_format *f = narrow[_i];
    if (f->bits > 8)
        return;
    for (uint64_t a = 0; a < (uint64_t)1 << f->bits; a++)
        for (uint64_t b = 0; b < (uint64_t)1 << f->bits; b++)
            check_minmax(emu_decode(f, (emu_bits){ a }),
                         emu_decode(f, (emu_bits){ b }));
}
END_TEST

/* Every pattern of the 16-bit formats against the specials, the extremes
 * and its own neighbours. */
START_TEST(minmax_wide)
{
    const emu_format *f = narrow[_i];
    if (f->bits <= 8)
        return;
    const double partners[] = { 0.0, -0.0, INFINITY, -INFINITY, NAN, f->max,
                                -f->max, f->min_value, -f->min_value, 1.0, -1.0 };
    for (uint64_t a = 0; a < (uint64_t)1 << f->bits; a++) {
        double v = emu_decode(f, (emu_bits){ a });
        for (size_t k = 0; k < sizeof partners / sizeof partners[0]; k++) {
            check_minmax(v, partners[k]);
            check_minmax(partners[k], v);
        }
        for (int d = -1; d <= 1; d++) {
            uint64_t nb = (a + (uint64_t)(int64_t)d) & (((uint64_t)1 << f->bits) - 1);
            check_minmax(v, emu_decode(f, (emu_bits){ nb }));
        }
    }
    test_rng g = test_rng_make(0x313);
    const emu_format *b32 = test_format("binary32");
    for (uint64_t i = 0; i < test_scaled(200000, 5000); i++)
        check_minmax(emu_decode(b32, test_random_bits(&g, b32)),
                     emu_decode(b32, test_random_bits(&g, b32)));
}
END_TEST

static Suite *int_suite(void)
{
    Suite *s = suite_create("mpfr_int");
    TCase *tc = tcase_create("to_int");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, to_int_every_pattern, 0, (int)n_narrow);
    tcase_add_test(tc, to_int_random_doubles);
    tcase_add_test(tc, to_int_invalid_cases);
    suite_add_tcase(s, tc);
    tc = tcase_create("from_int");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, from_int_small, 0, (int)emu_format_count());
    tcase_add_loop_test(tc, from_int_every_value, 0, (int)n_narrow);
    tcase_add_loop_test(tc, from_int_extremes_and_random, 0,
                        (int)emu_format_count());
    suite_add_tcase(s, tc);
    tc = tcase_create("minmax");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, minmax_small_pairs, 0, (int)n_narrow);
    tcase_add_loop_test(tc, minmax_wide, 0, (int)n_narrow);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    collect_formats();
    SRunner *sr = srunner_create(int_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("integer conversions checked: %llu to an integer, %llu from one\n",
           n_int_checked, n_from_checked);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
