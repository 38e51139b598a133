/*
 * test_stochastic.c — stochastic rounding: where results land, how often
 * they round up, reproducibility, and unbiasedness.
 *
 * The expectations are computed here, independently of round.c: the two
 * neighbours of an exact value come from a sorted table of every decoded
 * value of the format, and the probability of rounding away from zero is
 * the distance ratio F = (|x| - |near|) / ulp, exact in double arithmetic
 * for these formats (the subtraction is exact by Sterbenz's lemma or
 * because near is 0, the division is by a power of two).  With r random
 * bits the probability is quantized: floor(F 2^r) / 2^r
 * (README, Rounding: the srN row).
 *
 * The frequency tests are binomial hypothesis tests with a stated size:
 * see freq_draws().
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Check's ck_assert records every passing check with a write to a file;
 * over loops of millions of cases that is most of the run time, so the
 * suites test first and call into Check only to fail. */
#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

static const char *const formats[] = { "binary16", "bfloat16", "e4m3", "e5m2" };
enum { N_FORMATS = 4 };

typedef struct sr_mode {
    emu_rnd mode;
    unsigned bits; /* 64 for EMU_RS */
} sr_mode;

static const sr_mode modes[] = {
    { EMU_RS, 64 },       { EMU_RS_BITS, 1 },  { EMU_RS_BITS, 2 },
    { EMU_RS_BITS, 3 },   { EMU_RS_BITS, 8 },  { EMU_RS_BITS, 13 },
    { EMU_RS_BITS, 23 },
};
enum { N_MODES = sizeof modes / sizeof modes[0] };

static emu_rounding rounding_of(sr_mode m, emu_rng *rng)
{
    emu_rounding r;
    memset(&r, 0, sizeof r);
    r.mode = m.mode;
    r.sr_bits = m.bits;
    r.rng = rng;
    return r;
}

/* ---- the value table -------------------------------------------------- */

typedef struct table {
    const emu_format *f;
    double *v; /* finite values, increasing, zeros merged */
    size_t n;
} table;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static table make_table(const emu_format *f)
{
    table t = { f, malloc(sizeof(double) << f->bits), 0 };
    ck_assert_ptr_nonnull(t.v);
    for (uint64_t p = 0; p < (1ull << f->bits); p++) {
        double x = emu_decode(f, (emu_bits){ p });
        if (isfinite(x))
            t.v[t.n++] = x == 0.0 ? 0.0 : x;
    }
    qsort(t.v, t.n, sizeof *t.v, cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < t.n; i++)
        if (u == 0 || t.v[i] != t.v[u - 1])
            t.v[u++] = t.v[i];
    t.n = u;
    return t;
}

/* The format's values below and above the exact value hi + lo (|lo| at
 * most half an ulp of hi in binary64, so hi + lo never passes a format
 * value that hi has not).  Beyond the range the missing side is ±inf,
 * standing for "overflow". */
static void neighbours(const table *t, double hi, double lo, double *below,
                       double *above)
{
    size_t a = 0, b = t->n; /* first index with v > hi, by bisection */
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (t->v[m] <= hi)
            a = m + 1;
        else
            b = m;
    }
    /* v[a-1] <= hi < v[a] */
    double le = a > 0 ? t->v[a - 1] : -INFINITY;
    double gt = a < t->n ? t->v[a] : INFINITY;
    if (le == hi) {
        if (lo > 0.0) {
            *below = hi;
            *above = gt;
        } else if (lo < 0.0) {
            *below = a > 1 ? t->v[a - 2] : -INFINITY;
            *above = hi;
        } else {
            *below = *above = hi;
        }
        return;
    }
    *below = le;
    *above = gt;
}

/* Is y what rounding to `side` gives?  ±inf sides mean overflow: inf for
 * formats whose rule is inf, NaN for e4m3's. */
static bool is_side(const emu_format *f, double y, double side)
{
    if (isinf(side)) {
        if (f->overflow == EMU_OVERFLOW_NAN)
            return isnan(y);
        return y == side;
    }
    return y == side;
}

/* ---- (a) every result is a neighbour ---------------------------------- */

/* A random exact value hi + lo: on a random finite value of the format,
 * between two values, just beyond max, or a hi + lo pair straddling a
 * value. */
static void random_exact(test_rng *g, const table *t, double *hi, double *lo)
{
    size_t i = (size_t)test_below(g, t->n);
    double v = t->v[i];
    double next = i + 1 < t->n ? t->v[i + 1]
                               : t->v[i] + (t->v[i] - t->v[i - 1]);
    double frac = (double)(test_next(g) >> 11) * 0x1p-53;
    *lo = 0.0;
    switch (test_below(g, 5)) {
    case 0:
        *hi = v; /* exact */
        break;
    case 1: /* straddling v with a tail below binary64's precision */
        *hi = v;
        if (v != 0.0) {
            *lo = ldexp((double)(int64_t)(test_next(g) >> 12) - 0x1p51,
                        ilogb(v) - 52 - 53);
        }
        break;
    case 2: /* beyond max by up to two quanta */
        *hi = t->f->max + 2.0 * frac * (t->f->max - t->v[t->n - 2]);
        break;
    default:
        *hi = v + frac * (next - v);
        if (*hi != 0.0 && test_below(g, 2))
            *lo = ldexp((double)(int64_t)(test_next(g) >> 12) - 0x1p51,
                        ilogb(*hi) - 52 - 53);
        break;
    }
    if (test_below(g, 2)) {
        *hi = -*hi;
        *lo = -*lo;
    }
}

START_TEST(test_results_are_neighbours)
{
    const table t = make_table(test_format(formats[_i]));
    const emu_format *f = t.f;
    const uint64_t n = test_scaled(60000, 1000);
    test_rng g = test_rng_make(0x5a + (uint64_t)_i);
    for (size_t m = 0; m < N_MODES; m++) {
        emu_rng rng = emu_rng_make(11, m);
        emu_rounding r = rounding_of(modes[m], &rng);
        for (uint64_t k = 0; k < n; k++) {
            double hi, lo, below, above;
            random_exact(&g, &t, &hi, &lo);
            neighbours(&t, hi, lo, &below, &above);
            emu_status st;
            double y = emu_round2(f, hi, lo, &r, &st);
            bool ok = is_side(f, y, below) || is_side(f, y, above);
            if (hi > f->max + (f->max - t.v[t.n - 2]) ||
                hi < -f->max - (f->max - t.v[t.n - 2]))
                ok = is_side(f, y, hi > 0 ? INFINITY : -INFINITY);
            EXPECT(ok, "%s %s%u: round(%a + %a) = %a, not a neighbour (%a, %a)",
                   f->name, emu_rnd_name(modes[m].mode), modes[m].bits, hi, lo,
                   y, below, above);
            if (below == above) {
                EXPECT(st.ternary == 0 && !(st.flags & EMU_FLAG_INEXACT),
                       "%s: exact %a: ternary %d flags %#x", f->name, hi,
                       st.ternary, st.flags);
            } else if (!isnan(y)) {
                /* ternary: above the exact value iff it took `above`. */
                int want = y == above || (isinf(y) && y > 0) ? 1 : -1;
                EXPECT(st.ternary == want && (st.flags & EMU_FLAG_INEXACT),
                       "%s %s%u: round(%a + %a) = %a: ternary %d flags %#x",
                       f->name, emu_rnd_name(modes[m].mode), modes[m].bits,
                       hi, lo, y, st.ternary, st.flags);
            }
        }
    }
    free(t.v);
}
END_TEST

/* ---- (b) the probability of rounding up ------------------------------- */

/* One test position: the exact value sign * (near + F_target * ulp) + lo,
 * whose neighbours are sign * near and sign * (near + ulp). */
typedef struct position {
    const char *what;
    double near, ulp, f_target;
    int lo_exp; /* lo = ±2^(ilogb(hi) + lo_exp) if lo_sign != 0 */
    int lo_sign;
} position;

enum { N_POSITIONS = 11 };

static void make_positions(const emu_format *f, position pos[N_POSITIONS])
{
    const double eps = f->epsilon;
    const double top_ulp = ldexp(eps, f->emax);
    const position p[N_POSITIONS] = {
        { "normal", 1.0 + eps, eps, 0.3, 0, 0 },
        { "subnormal", 3 * f->min_subnormal, f->min_subnormal, 0.7, 0, 0 },
        { "below a binade", 16.0 - 8 * eps, 8 * eps, 0.55, 0, 0 },
        { "above a binade", 16.0, 16 * eps, 0.15, 0, 0 },
        { "below 2^emin", f->min_normal - f->min_subnormal, f->min_subnormal,
          0.9, 0, 0 },
        { "below max", f->max - top_ulp, top_ulp, 0.42, 0, 0 },
        { "beyond max", f->max, top_ulp, 0.61, 0, 0 },
        { "tiny F", 1.0 + eps, eps, 0x1p-20, 0, 0 },
        { "just above half (hi+lo)", 2.0 + 2 * eps, 2 * eps, 0.5, -54, 1 },
        { "just below half (hi+lo)", 2.0 + 2 * eps, 2 * eps, 0.5, -54, -1 },
        { "quarter", 0.25, 0.25 * eps, 0.25, 0, 0 },
    };
    memcpy(pos, p, sizeof p);
}

/* The exact probability of rounding away from zero, from F = Fh + Fl
 * (Fh = (|hi| - near) / ulp, Fl = |lo| signed / ulp, |Fl| 2^r < 1). */
static double p_up(double fh, double fl, unsigned bits)
{
    if (bits >= 64)
        return fh + fl; /* floor(F 2^64) / 2^64 to 2^-53 */
    double t = ldexp(fh, (int)bits);
    double a = floor(t);
    if (a == t && fl < 0.0)
        a -= 1.0; /* F just below a multiple of 2^-r */
    return ldexp(a, -(int)bits);
}

/* Draws per position: a relative bias of 1% in P is a shift of 0.01 P N
 * in the count, detectable at 5 sigma when 0.01 P N >= 5 sqrt(N P (1 - P)),
 * i.e. N >= 250000 (1 - P) / P.  N is clamped to [50000, 2000000]: below
 * P = 0.11 the cap makes the test less sensitive than 1% (tiny F, where
 * it still catches any systematic bias of order P).  P = 0 needs no
 * statistics: any up is a failure. */
static uint64_t freq_draws(double p)
{
    double n = p > 0.0 ? ceil(250000.0 * (1.0 - p) / p) : 50000.0;
    if (n < 50000.0)
        n = 50000.0;
    if (n > 2000000.0)
        n = 2000000.0;
    return test_scaled((uint64_t)n, 2000);
}

START_TEST(test_up_frequency)
{
    const table t = make_table(test_format(formats[_i]));
    const emu_format *f = t.f;
    position pos[N_POSITIONS];
    make_positions(f, pos);
    enum { CHUNK = 4096 };
    static uint64_t words[CHUNK];

    for (size_t k = 0; k < N_POSITIONS; k++)
        for (int sign = 1; sign >= -1; sign -= 2) {
            const position *q = &pos[k];
            double hi = q->near + q->f_target * q->ulp;
            double lo = q->lo_sign ? q->lo_sign * ldexp(1.0, ilogb(hi) + q->lo_exp)
                                   : 0.0;
            const double fh = (hi - q->near) / q->ulp; /* exact */
            const double fl = lo / q->ulp;
            hi *= sign;
            lo *= sign;
            /* The construction must give the neighbours it claims. */
            double below, above;
            neighbours(&t, hi, lo, &below, &above);
            double near_s = sign * q->near;
            double far_s = q->near + q->ulp > f->max ? sign * INFINITY
                                                     : sign * (q->near + q->ulp);
            ck_assert_msg((sign > 0 ? below : above) == near_s &&
                          (sign > 0 ? above : below) == far_s,
                          "%s position '%s': neighbours %a %a, built for %a %a",
                          f->name, q->what, below, above, near_s, far_s);

            for (size_t m = 0; m < N_MODES; m++) {
                const double p = p_up(fh, fl, modes[m].bits);
                const uint64_t n = freq_draws(p);
                emu_rounding r = rounding_of(modes[m], NULL);
                const uint64_t seed = 1000 + k, stream = (uint64_t)m;
                uint64_t ups = 0;
                /* Neumaier sum of the results, for the mean. */
                double sum = 0.0, comp = 0.0;
                for (uint64_t base = 0; base < n; base += CHUNK) {
                    size_t c = n - base < CHUNK ? (size_t)(n - base) : CHUNK;
                    emu_random_fill(seed, stream, base, words, c);
                    for (size_t j = 0; j < c; j++) {
                        double y = emu_round2_word(f, hi, lo, &r, words[j],
                                                   NULL);
                        bool up = is_side(f, y, far_s);
                        EXPECT(up || y == near_s, "%s %s%u '%s': round(%a + "
                               "%a) = %a, neighbours %a %a", f->name,
                               emu_rnd_name(modes[m].mode), modes[m].bits,
                               q->what, hi, lo, y, near_s, far_s);
                        ups += up;
                        if (isfinite(y)) {
                            double s = sum + y;
                            comp += fabs(sum) >= fabs(y) ? (sum - s) + y
                                                         : (y - s) + sum;
                            sum = s;
                        }
                    }
                }
                const double expect = p * (double)n;
                const double sigma = sqrt((double)n * p * (1.0 - p));
                if (p == 0.0) {
                    EXPECT(ups == 0, "%s %s%u '%s' (%s): %a + %a, F = %a + %a:"
                           " P(up) = 0 exactly, but %" PRIu64 " of %" PRIu64
                           " draws went up", f->name,
                           emu_rnd_name(modes[m].mode), modes[m].bits, q->what,
                           sign > 0 ? "+" : "-", hi, lo, fh, fl, ups, n);
                    continue;
                }
                EXPECT(fabs((double)ups - expect) <= 5.0 * sigma,
                       "%s %s%u '%s' (%s): %a + %a, F = %a + %a: %" PRIu64
                       " of %" PRIu64 " draws up, expected %.1f (P = %a), "
                       "%.1f sigma off", f->name, emu_rnd_name(modes[m].mode),
                       modes[m].bits, q->what, sign > 0 ? "+" : "-", hi, lo,
                       fh, fl, ups, n, expect, p,
                       ((double)ups - expect) / sigma);
                /* Unbiased: full-precision SR's mean is the exact value
                 * (within 5 sigma of the mean, ulp sqrt(P(1-P)/N)).  Not
                 * beyond max, where "up" is not a number. */
                if (modes[m].bits == 64 && isfinite(far_s)) {
                    double mean = (sum + comp) / (double)n;
                    double exact = hi + lo;
                    double sm = q->ulp * sqrt(p * (1.0 - p) / (double)n);
                    EXPECT(fabs(mean - exact) <= 5.0 * sm + fabs(exact) * 0x1p-50,
                           "%s sr '%s' (%s): mean of %" PRIu64 " draws %a, "
                           "exact value %a + %a (%.2f sigma)", f->name,
                           q->what, sign > 0 ? "+" : "-", n, mean, hi, lo,
                           (mean - exact) / sm);
                }
            }
        }
    free(t.v);
}
END_TEST

/* ---- (c) reproducibility ---------------------------------------------- */

START_TEST(test_same_seed_same_stream)
{
    const emu_format *f = test_format(formats[_i]);
    const size_t n = (size_t)test_scaled(20000, 500);
    double *x = malloc(n * sizeof *x), *a = malloc(n * sizeof *a),
           *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    float *xf = malloc(n * sizeof *xf), *cf = malloc(n * sizeof *cf);
    ck_assert(x && a && b && c && xf && cf);
    test_rng g = test_rng_make(77);
    for (size_t i = 0; i < n; i++) {
        /* Values spread over the format's range, most of them inexact. */
        double e = ldexp((double)test_below(&g, 1u << 20), -20);
        double lg = f->emin - 2 + e * (double)(f->emax - f->emin + 3);
        x[i] = ldexp(1.0 + (double)(test_next(&g) >> 40) * 0x1p-24,
                     (int)floor(lg));
        if (test_below(&g, 2))
            x[i] = -x[i];
        xf[i] = (float)x[i];
    }
    static const sr_mode ms[] = { { EMU_RS, 64 }, { EMU_RS_BITS, 8 },
                                  { EMU_RS_BITS, 1 } };
    for (size_t m = 0; m < 3; m++) {
        const uint64_t seed = 0xabcdef, stream = 5;
        /* A: the sequential generator. */
        emu_rng rng = emu_rng_make(seed, stream);
        emu_rounding r = rounding_of(ms[m], &rng);
        for (size_t i = 0; i < n; i++)
            a[i] = emu_round2(f, x[i], 0.0, &r, NULL);
        /* B: the word of index i, given explicitly. */
        for (size_t i = 0; i < n; i++)
            b[i] = emu_round2_word(f, x[i], 0.0, &r,
                                   emu_random64(seed, stream, i), NULL);
        /* C: the array form in chunks of odd, varying sizes. */
        emu_array_rounding ar;
        memset(&ar, 0, sizeof ar);
        ar.rnd = rounding_of(ms[m], NULL);
        ar.seed = seed;
        ar.stream = stream;
        for (size_t i = 0, len = 1; i < n; i += len, len = len * 3 % 97 + 1) {
            size_t cnt = len < n - i ? len : n - i;
            ar.first_index = i;
            ck_assert_int_eq(emu_round_array_f64(f, c + i, x + i, cnt, &ar,
                                                 NULL, NULL), 0);
            ck_assert_int_eq(emu_round_array_f32(f, cf + i, xf + i, cnt, &ar,
                                                 NULL, NULL), 0);
        }
        for (size_t i = 0; i < n; i++) {
            EXPECT(test_same(a[i], b[i]), "%s %s%u: element %zu (%a): "
                   "sequential rng %a, explicit word %a", f->name,
                   emu_rnd_name(ms[m].mode), ms[m].bits, i, x[i], a[i], b[i]);
            EXPECT(test_same(c[i], b[i]), "%s %s%u: element %zu (%a): "
                   "chunked array %a, scalar %a", f->name,
                   emu_rnd_name(ms[m].mode), ms[m].bits, i, x[i], c[i], b[i]);
            double bf = emu_round2_word(f, (double)xf[i], 0.0, &r,
                                        emu_random64(seed, stream, i), NULL);
            EXPECT(test_same((double)cf[i], bf), "%s %s%u: element %zu "
                   "(binary32 %a): chunked f32 array %a, scalar %a", f->name,
                   emu_rnd_name(ms[m].mode), ms[m].bits, i, (double)xf[i],
                   (double)cf[i], bf);
        }
        /* A generator started part-way gives the words from there on. */
        rng = emu_rng_make(seed, stream);
        rng.index = n / 2;
        for (size_t i = n / 2; i < n; i++) {
            double y = emu_round2(f, x[i], 0.0, &r, NULL);
            EXPECT(test_same(y, b[i]), "%s: rng started at %zu: element %zu "
                   "%a, expected %a", f->name, n / 2, i, y, b[i]);
        }
        /* Another seed, or another stream, gives other roundings of the
         * inexact elements: each differs with probability 2P(1-P), 1/3 on
         * average for P uniform (1/4 for one random bit); a tenth is far
         * below either. */
        for (int which = 0; which < 2; which++) {
            rng = which ? emu_rng_make(seed, stream + 1)
                        : emu_rng_make(seed + 1, stream);
            size_t inexact = 0, differ = 0;
            for (size_t i = 0; i < n; i++) {
                double y = emu_round2(f, x[i], 0.0, &r, NULL);
                emu_status st;
                emu_round2_word(f, x[i], 0.0, &r, 0, &st);
                if (st.flags & EMU_FLAG_INEXACT && isfinite(y)) {
                    inexact++;
                    differ += !test_same(y, b[i]);
                }
            }
            EXPECT(differ * 10 > inexact, "%s %s%u: another %s changed %zu of"
                   " %zu inexact roundings", f->name, emu_rnd_name(ms[m].mode),
                   ms[m].bits, which ? "stream" : "seed", differ, inexact);
        }
    }
    free(x);
    free(a);
    free(b);
    free(c);
    free(xf);
    free(cf);
}
END_TEST

/* ---- (d) no degeneration, no bias ------------------------------------- */

/* Adding 2^-12 to 1 in binary16 (a quarter of an ulp) 4096 times: round to
 * nearest and toward zero never move; stochastic rounding is a martingale
 * with mean 1 + 4096 * 2^-12 = 2.  Its step variance is at most
 * ulp^2 / 4 with ulp <= 2^-9, so the final value's standard deviation is
 * below sqrt(4096 * 2^-18 / 4) = 2^-4; the test allows 5 of those. */
START_TEST(test_no_truncation)
{
    const emu_format *h = test_format("binary16");
    static const sr_mode ms[] = { { EMU_RS, 64 }, { EMU_RS_BITS, 2 },
                                  { EMU_RS_BITS, 8 }, { EMU_RS_BITS, 13 },
                                  { EMU_RS_BITS, 23 } };
    for (size_t m = 0; m < 5; m++)
        for (uint64_t seed = 1; seed <= 4; seed++) {
            emu_rng rng = emu_rng_make(seed, 0);
            emu_rounding r = rounding_of(ms[m], &rng);
            double x = 1.0;
            for (int i = 0; i < 4096; i++)
                x = emu_round(h, x + 0x1p-12, &r, NULL);
            EXPECT(fabs(x - 2.0) <= 5 * 0x1p-4, "binary16 %s%u seed %" PRIu64
                   ": 1 + 4096 * 2^-12 accumulated to %a (expected 2 +- 5/16)",
                   emu_rnd_name(ms[m].mode), ms[m].bits, seed, x);
        }
    /* The deterministic modes, and 1-bit SR (a quarter ulp has floor(F 2)
     * = 0: one random bit cannot see it), stay at 1. */
    static const sr_mode stuck[] = { { EMU_RNE, 0 }, { EMU_RZ, 0 },
                                     { EMU_RD, 0 }, { EMU_RS_BITS, 1 } };
    for (size_t m = 0; m < 4; m++) {
        emu_rng rng = emu_rng_make(1, 0);
        emu_rounding r = rounding_of(stuck[m], &rng);
        double x = 1.0;
        for (int i = 0; i < 4096; i++)
            x = emu_round(h, x + 0x1p-12, &r, NULL);
        EXPECT(x == 1.0, "binary16 %s%u: 1 + 4096 * 2^-12 gave %a, expected 1",
               emu_rnd_name(stuck[m].mode), stuck[m].bits, x);
    }
}
END_TEST

/* SR without a generator still draws fresh words (never a constant that
 * would turn it into a directed rounding). */
START_TEST(test_default_generator)
{
    const emu_format *h = test_format("binary16");
    emu_rounding r;
    memset(&r, 0, sizeof r);
    r.mode = EMU_RS;
    int ups = 0;
    for (int i = 0; i < 4000; i++)
        ups += emu_round(h, 1.0 + 0x1p-11, &r, NULL) > 1.0;
    /* P = 1/2, sd = sqrt(1000) = 31.6: 5 sigma is 158. */
    EXPECT(abs(ups - 2000) <= 158, "default generator: %d of 4000 up", ups);
}
END_TEST

static Suite *stochastic_suite(void)
{
    Suite *s = suite_create("stochastic");
    TCase *tc = tcase_create("neighbours");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_results_are_neighbours, 0, N_FORMATS);
    suite_add_tcase(s, tc);

    tc = tcase_create("frequency");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_up_frequency, 0, N_FORMATS);
    suite_add_tcase(s, tc);

    tc = tcase_create("reproducible");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_same_seed_same_stream, 0, N_FORMATS);
    suite_add_tcase(s, tc);

    tc = tcase_create("unbiased");
    tcase_add_test(tc, test_no_truncation);
    tcase_add_test(tc, test_default_generator);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (test_isa_skip())
        return 77;
    SRunner *sr = srunner_create(stochastic_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
