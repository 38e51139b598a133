/*
 * test_accum.c — the accumulator models against their definitions.
 *
 * Every model of emu/accum.h is recomputed here a second, independent way:
 * sequential, pairwise, blocked and Kahan as loops of MPFR-rounded scalar
 * additions (emu_ref_add/sub, the oracle of libemu/ref.c), the fused unit
 * from its definition in MPFR (truncation by mpfr_prec_round toward zero,
 * exact sum, one emu_ref_round), the exact model from mpfr_dot.  The swamping
 * counts are recomputed from their definition with MPFR exponents.
 * Stochastic accumulation is checked against stochastic rounding built from
 * its definition in MPFR (ref_sr_round, mpfr_check.h) with the words the
 * documented index rule names.
 *
 * Then the fast paths: the inline rounding of one accumulator step against
 * the choke point emu_round2_word on random and edge-case pairs, and the
 * GEMM engine against emu_accum_dot for every model, shape, layout and
 * thread count.
 */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "mpfr_check.h"
#include "testutil.h"

/* Library-private: the engine and the step rounding under test. */
#include "ops_internal.h"

/* The caller's OpenBLAS thread count, which the fast model must not see
 * (EMU_TEST_OPENBLAS: the library links OpenBLAS; tests/CMakeLists.txt). */
#ifdef EMU_TEST_OPENBLAS
void openblas_set_num_threads(int n);
static void blas_threads(int n)
{
    openblas_set_num_threads(n);
}
#else
static void blas_threads(int n)
{
    (void)n;
}
#endif


static const emu_format *fmt_named(const char *spec)
{
    static emu_format user[8];
    static char names[8][64];
    static int n_user;
    const emu_format *f = emu_format_find(spec);
    if (f)
        return f;
    for (int i = 0; i < n_user; i++)
        if (!strcmp(names[i], spec))
            return &user[i];
    emu_error err;
    ck_assert_msg(n_user < 8, "too many user formats");
    snprintf(names[n_user], sizeof names[n_user], "%s", spec);
    if (emu_format_parse_inline(&user[n_user], spec, &err)) {
        char buf[600];
        emu_error_format(&err, buf, sizeof buf);
        ck_abort_msg("format %s: %s", spec, buf);
    }
    return &user[n_user++];
}

/* Accumulator formats the models are checked in: the shipped carrier
 * formats people accumulate in, and user formats with and without
 * subnormals, saturating, and with an odd bias. */
static const char *const acc_specs[] = {
    "binary16", "bfloat16", "binary32", "e4m3", "e5m2", "tf32",
    "e5m6,nosubnormals", "e4m3,saturate", "e6m9,bias=40",
};
enum { N_ACC = sizeof acc_specs / sizeof acc_specs[0] };

/* ---- data -------------------------------------------------------------- */

/* A value of fmt: random sign, exponent in [elo, ehi], random fraction,
 * rounded to nearest into fmt; occasionally zero, and with `specials`
 * occasionally inf or NaN. */
static float rand_val(test_rng *g, const emu_format *f, int elo, int ehi,
                      bool specials)
{
    uint64_t w = test_next(g);
    unsigned pick = (unsigned)(w & 63);
    if (pick == 0)
        return (w >> 8) & 1 ? -0.0f : 0.0f;
    if (specials && pick == 1)
        return (w >> 8) & 1 ? -INFINITY : INFINITY;
    if (specials && pick == 2)
        return NAN;
    int e = elo + (int)test_below(g, (uint64_t)(ehi - elo + 1));
    double m = 1.0 + ldexp((double)(test_next(g) >> 11), -53);
    double x = ldexp(m, e);
    if ((w >> 9) & 1)
        x = -x;
    double v = emu_round(f, x, NULL, NULL);
    if (!specials && !isfinite(v))
        v = x < 0.0 ? -f->max : f->max; /* beyond the input format's range */
    return (float)v;
}

static void rand_vec(test_rng *g, const emu_format *f, float *v, size_t n,
                     int elo, int ehi, bool specials)
{
    for (size_t i = 0; i < n; i++)
        v[i] = rand_val(g, f, elo, ehi, specials);
}

static uint64_t bits_of(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static const char *mode_name(emu_rnd m)
{
    return emu_rnd_name(m);
}

/* ---- 1. one accumulator step: fast path vs the choke point ------------- */

static const char *const step_specs[] = {
    "binary16", "bfloat16", "binary32", "e4m3", "e5m2", "e4m3fnuz",
    "e5m6,nosubnormals", "e4m3,saturate", "e6m9,bias=40", "e2m1", "e3m2",
    "e8m0", "tf32",
};
enum { N_STEP = sizeof step_specs / sizeof step_specs[0] };

/* A double near the interesting points of f: around 2^emin, max, the
 * grid's midpoints, or anywhere in range, with the bits below the format's
 * last place patterned to produce ties and near-ties. */
static double step_value(test_rng *g, const emu_format *f)
{
    uint64_t w = test_next(g);
    int e;
    switch (w & 7) {
    case 0:
        e = f->emin - 1 + (int)test_below(g, 3);
        break;
    case 1:
        e = f->emax - 1 + (int)test_below(g, 3);
        break;
    case 2:
        e = f->emin - f->p - 2 + (int)test_below(g, (uint64_t)f->p + 3);
        break;
    default:
        e = f->emin - f->p + (int)test_below(g, (uint64_t)(f->emax - f->emin + f->p + 2));
        break;
    }
    if (e > 200)
        e = 200;
    if (e < -300)
        e = -300;
    uint64_t frac = test_next(g) >> 12; /* 52 random fraction bits */
    int d = 53 - f->p;                  /* bits below the format's ulp */
    uint64_t below = (uint64_t)1 << (d - 1);
    switch ((w >> 3) & 7) {
    case 0: /* exact tie */
        frac = (frac & ~((below << 1) - 1)) | below;
        break;
    case 1: /* just below a tie */
        frac = (frac & ~((below << 1) - 1)) | (below - 1);
        break;
    case 2: /* on the grid */
        frac &= ~((below << 1) - 1);
        break;
    case 3: /* one double ulp above the grid */
        frac = (frac & ~((below << 1) - 1)) | 1;
        break;
    default:
        break;
    }
    double x = ldexp(1.0 + ldexp((double)frac, -52), e);
    if (w >> 63)
        x = -x;
    if (((w >> 6) & 31) == 0)
        x = f->max * (1.0 + ldexp((double)test_below(g, 5), -f->p - 1));
    return x;
}

static const struct {
    emu_rnd mode;
    unsigned bits;
} step_modes[] = {
    { EMU_RNE, 0 }, { EMU_RNA, 0 }, { EMU_RZ, 0 }, { EMU_RU, 0 }, { EMU_RD, 0 },
    { EMU_RO, 0 }, { EMU_RS, 64 }, { EMU_RS_BITS, 1 }, { EMU_RS_BITS, 7 },
    { EMU_RS_BITS, 13 }, { EMU_RS_BITS, 64 },
};
enum { N_STEP_MODES = sizeof step_modes / sizeof step_modes[0] };

START_TEST(step_fast_equals_choke_point)
{
    test_rng g = test_rng_make(0xacc1);
    const uint64_t per = test_scaled(25000, 2000);
    for (int fi = 0; fi < N_STEP; fi++) {
        const emu_format *f = fmt_named(step_specs[fi]);
        for (int sat = 0; sat < 2; sat++)
            for (int m = 0; m < N_STEP_MODES; m++) {
                emu_rounding r = { .mode = step_modes[m].mode,
                                   .sr_bits = step_modes[m].bits,
                                   .saturate = sat != 0 };
                uint64_t fast_hits = 0;
                for (uint64_t k = 0; k < per; k++) {
                    double hi = step_value(&g, f), lo = 0.0;
                    uint64_t w = test_next(&g);
                    if (w & 1) {
                        /* A valid pair: TwoSum of hi and a much smaller
                         * value, possibly exactly half an ulp of hi. */
                        int eh = ilogb(hi);
                        double y = (w & 2) ? ldexp(1.0, eh - 53)
                                           : ldexp(1.0 + ldexp((double)(w >> 12), -52),
                                                   eh - 54 - (int)test_below(&g, 30));
                        if (w & 4)
                            y = -y;
                        double s = hi + y;
                        double bv = s - hi, av = s - bv;
                        lo = (hi - av) + (y - bv);
                        hi = s;
                    }
                    if ((w & 0x1f0) == 0x10)
                        hi = (w & 0x200) ? -0.0 : 0.0, lo = 0.0;
                    if ((w & 0xff0) == 0x20)
                        hi = (w & 0x200) ? -INFINITY : NAN, lo = 0.0;
                    bool fast;
                    uint64_t word = test_next(&g);
                    if ((w & 0x3000) == 0x1000)
                        word = (w & 0x4000) ? ~(uint64_t)0 : 0; /* extremes */
                    double got = emu_accum_round_step(f, &r, hi, lo, word, &fast);
                    emu_status st;
                    double want = emu_round2_word(f, hi, lo, &r, word, &st);
                    fast_hits += fast;
                    EXPECT(test_same(got, want),
                           "%s %s (%u bits)%s: hi %a (0x%016" PRIx64 ") lo %a, "
                           "word 0x%016" PRIx64 ": fast path %d gave %a, "
                           "emu_round2_word %a", f->name, mode_name(r.mode),
                           r.sr_bits, sat ? " sat" : "", hi, bits_of(hi), lo,
                           word, fast, got, want);
                }
                /* The fast path must actually be exercised where it applies. */
                if (f->is_signed && f->has_zero)
                    EXPECT(fast_hits > per / 4, "%s %s: fast path taken only "
                           "%" PRIu64 " of %" PRIu64 " times", f->name,
                           mode_name(r.mode), fast_hits, per);
            }
    }
}
END_TEST

/* ---- 2. models against independent MPFR computations -------------------- */

static emu_accum model_of(emu_accum_kind kind, const emu_format *acc,
                          emu_rnd mode)
{
    emu_accum a;
    emu_accum_default(&a);
    a.kind = kind;
    a.acc = *acc;
    a.rnd.mode = mode;
    return a;
}

/* The term of the definition: exact product, or rounded into prod. */
static double ref_term(const emu_accum *a, const float *x, const float *y,
                       size_t i)
{
    if (!y)
        return x[i];
    if (a->round_products)
        return emu_ref_mul(&a->prod, x[i], y[i], &a->rnd, NULL);
    return (double)x[i] * y[i];
}

/* Quantum exponent of f at |v| (libemu/round.c's q), from MPFR's exponent. */
static long ref_quantum(const emu_format *f, double v)
{
    mpfr_t t;
    mpfr_init2(t, 53);
    mpfr_set_d(t, v, MPFR_RNDN);
    long e = mpfr_zero_p(t) ? LONG_MIN : (long)mpfr_get_exp(t) - 1;
    mpfr_clear(t);
    if (e >= f->emin)
        return e - f->p + 1;
    return f->subnormals ? f->emin - f->p + 1 : f->emin;
}

/* Bits of t below 2^q, from MPFR's view of t's significand. */
static int ref_bits_below(double t, long q)
{
    mpfr_t x;
    mpfr_init2(x, 53);
    mpfr_set_d(x, t, MPFR_RNDN);
    long msb = (long)mpfr_get_exp(x) - 1;
    long lsb = (long)mpfr_get_exp(x) - (long)mpfr_min_prec(x);
    mpfr_clear(x);
    long top = msb < q - 1 ? msb : q - 1;
    long n = top - lsb + 1;
    return n < 0 ? 0 : (int)n;
}

static void ref_count(emu_accum_counts *c, const emu_format *acc, double s,
                      double t, double s_new)
{
    c->adds++;
    if (t != 0.0 && s_new == s) {
        c->absorbed++;
        c->lost_bits[EMU_LOST_BINS - 1]++;
    } else if (t == 0.0 || !isfinite(t) || !isfinite(s_new)) {
        c->lost_bits[0]++;
    } else {
        c->lost_bits[ref_bits_below(t, ref_quantum(acc, s_new))]++;
    }
}

static double ref_sequential(const emu_accum *a, const float *x,
                             const float *y, size_t n, emu_accum_counts *c)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double t = ref_term(a, x, y, i);
        double s_new = emu_ref_add(&a->acc, s, t, &a->rnd, NULL);
        ref_count(c, &a->acc, s, t, s_new);
        s = s_new;
    }
    return s;
}

static double ref_pairwise_rec(const emu_accum *a, const float *x,
                               const float *y, size_t first, size_t n,
                               emu_accum_counts *c)
{
    if (n == 1)
        return ref_term(a, x, y, first);
    size_t nl = n - n / 2;
    double l = ref_pairwise_rec(a, x, y, first, nl, c);
    double r = ref_pairwise_rec(a, x, y, first + nl, n - nl, c);
    double s = emu_ref_add(&a->acc, l, r, &a->rnd, NULL);
    if (fabs(l) >= fabs(r))
        ref_count(c, &a->acc, l, r, s);
    else
        ref_count(c, &a->acc, r, l, s);
    return s;
}

static double ref_pairwise(const emu_accum *a, const float *x, const float *y,
                           size_t n, emu_accum_counts *c)
{
    if (n == 0)
        return 0.0;
    if (n == 1) {
        double t = ref_term(a, x, y, 0);
        double s = emu_ref_add(&a->acc, 0.0, t, &a->rnd, NULL);
        ref_count(c, &a->acc, 0.0, t, s);
        return s;
    }
    return ref_pairwise_rec(a, x, y, 0, n, c);
}

static double ref_blocked(const emu_accum *a, const float *x, const float *y,
                          size_t n, emu_accum_counts *c)
{
    double w = 0.0, s = 0.0;
    size_t in_block = 0;
    for (size_t i = 0; i < n; i++) {
        double t = ref_term(a, x, y, i);
        double s_new = emu_ref_add(&a->acc, s, t, &a->rnd, NULL);
        ref_count(c, &a->acc, s, t, s_new);
        s = s_new;
        if (++in_block == a->block || i + 1 == n) {
            double w_new = emu_ref_add(&a->wide, w, s, &a->rnd, NULL);
            ref_count(c, &a->wide, w, s, w_new);
            w = w_new;
            s = 0.0;
            in_block = 0;
        }
    }
    return w;
}

static double ref_kahan(const emu_accum *a, const float *x, const float *y,
                        size_t n, emu_accum_counts *cnt)
{
    const emu_format *f = &a->acc;
    double s = 0.0, c = 0.0;
    for (size_t i = 0; i < n; i++) {
        double p = ref_term(a, x, y, i);
        double yv = emu_ref_sub(f, p, c, &a->rnd, NULL);
        double t = emu_ref_add(f, s, yv, &a->rnd, NULL);
        double d = emu_ref_sub(f, t, s, &a->rnd, NULL);
        c = emu_ref_sub(f, d, yv, &a->rnd, NULL);
        ref_count(cnt, f, s, yv, t);
        s = t;
    }
    return s;
}

/* The fused unit from its definition, in MPFR.  Finite terms only. */
static double ref_fused(const emu_accum *a, const float *x, const float *y,
                        size_t n, emu_accum_counts *c)
{
    const long w = (long)a->fused_w;
    double s = 0.0;
    mpfr_t v[65], sum;
    mpfr_ptr pv[65];
    ck_assert(a->fused_k <= 64);
    for (int i = 0; i < 65; i++) {
        mpfr_init2(v[i], 64);
        pv[i] = v[i];
    }
    mpfr_init2(sum, 256);
    for (size_t i0 = 0; i0 < n; i0 += a->fused_k) {
        size_t m = n - i0 < a->fused_k ? n - i0 : a->fused_k;
        double t[64];
        mpfr_set_d(v[0], s, MPFR_RNDN);
        for (size_t i = 0; i < m; i++) {
            t[i] = ref_term(a, x, y, i0 + i);
            mpfr_set_d(v[i + 1], t[i], MPFR_RNDN);
        }
        if (!isfinite(s)) {
            /* An accumulator that overflowed stays inf or NaN. */
            s = emu_ref_round(&a->acc, v[0], &a->rnd, NULL);
            c->adds += m;
            c->lost_bits[0] += m;
            continue;
        }
        long E = LONG_MIN;
        for (size_t i = 0; i <= m; i++)
            if (!mpfr_zero_p(v[i]) && (long)mpfr_get_exp(v[i]) - 1 > E)
                E = (long)mpfr_get_exp(v[i]) - 1;
        long Q = E == LONG_MIN ? 0 : E - w + 1;
        for (size_t i = 0; i <= m && E != LONG_MIN; i++) {
            if (mpfr_zero_p(v[i]))
                continue;
            long bits = (long)mpfr_get_exp(v[i]) - 1 - Q + 1; /* kept bits */
            if (bits <= 0)
                mpfr_set_zero(v[i], 1);
            else
                mpfr_prec_round(v[i], bits, MPFR_RNDZ);
        }
        mpfr_sum(sum, pv, m + 1, MPFR_RNDN); /* exact at 256 bits */
        if (mpfr_zero_p(sum))
            mpfr_set_zero(sum, 1);
        double s_new = emu_ref_round(&a->acc, sum, &a->rnd, NULL);
        for (size_t i = 0; i < m; i++) {
            c->adds++;
            if (t[i] == 0.0) {
                c->lost_bits[0]++;
            } else if (ilogb(t[i]) < Q) {
                c->absorbed++;
                c->lost_bits[EMU_LOST_BINS - 1]++;
            } else if (!isfinite(s_new)) {
                c->lost_bits[0]++;
            } else {
                long q = ref_quantum(&a->acc, s_new);
                c->lost_bits[ref_bits_below(t[i], q > Q ? q : Q)]++;
            }
        }
        for (size_t i = 0; i <= m; i++)
            mpfr_set_prec(v[i], 64);
        s = s_new;
    }
    for (int i = 0; i < 65; i++)
        mpfr_clear(v[i]);
    mpfr_clear(sum);
    return s;
}

/* hi = RN(exact dot), lo = RN(exact - hi), from mpfr_dot. */
static double ref_exact(const float *x, const float *y, size_t n, double *lo)
{
    mpfr_t *xs = malloc((n + 1) * sizeof *xs), *ys = malloc((n + 1) * sizeof *ys);
    mpfr_ptr *px = malloc((n + 1) * sizeof *px), *py = malloc((n + 1) * sizeof *py);
    for (size_t i = 0; i < n; i++) {
        mpfr_init2(xs[i], 24);
        mpfr_init2(ys[i], 24);
        mpfr_set_flt(xs[i], x[i], MPFR_RNDN);
        mpfr_set_flt(ys[i], y ? y[i] : 1.0f, MPFR_RNDN);
        px[i] = xs[i];
        py[i] = ys[i];
    }
    mpfr_t d;
    mpfr_init2(d, 2048);
    mpfr_dot(d, px, py, n, MPFR_RNDN);
    double hi = mpfr_get_d(d, MPFR_RNDN);
    *lo = 0.0;
    if (mpfr_number_p(d) && !mpfr_zero_p(d)) {
        mpfr_sub_d(d, d, hi, MPFR_RNDN);
        *lo = mpfr_get_d(d, MPFR_RNDN);
    }
    for (size_t i = 0; i < n; i++) {
        mpfr_clear(xs[i]);
        mpfr_clear(ys[i]);
    }
    mpfr_clear(d);
    free(xs);
    free(ys);
    free(px);
    free(py);
    return hi;
}

static void expect_counts(const emu_accum_counts *got,
                          const emu_accum_counts *want, const char *what)
{
    char diff[400];
    size_t used = 0;
    diff[0] = '\0';
    for (int b = 0; b < EMU_LOST_BINS && used < sizeof diff; b++)
        if (got->lost_bits[b] != want->lost_bits[b])
            used += (size_t)snprintf(diff + used, sizeof diff - used,
                                     " [%d] %" PRIu64 " vs %" PRIu64, b,
                                     got->lost_bits[b], want->lost_bits[b]);
    EXPECT(got->adds == want->adds && got->absorbed == want->absorbed &&
           !diff[0],
           "%s: adds %" PRIu64 " absorbed %" PRIu64 ", expected %" PRIu64
           " and %" PRIu64 "; lost_bits (got vs expected):%s", what, got->adds,
           got->absorbed, want->adds, want->absorbed, diff);
}

static void print_vec(char *buf, size_t size, const float *v, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && i < 6 && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%a", i ? " " : "",
                                 (double)v[i]);
    if (n > 6 && used < size)
        snprintf(buf + used, size - used, " ...");
}

typedef double (*ref_fn)(const emu_accum *, const float *, const float *,
                         size_t, emu_accum_counts *);

/* Runs model `a` and its reference on random vectors of lengths 0..maxn
 * (inputs in `in`, exponents elo..ehi), comparing values and counts. */
static void check_model(const emu_accum *a, ref_fn ref, const emu_format *in,
                        int elo, int ehi, bool specials, size_t maxn,
                        uint64_t cases, uint64_t seed)
{
    test_rng g = test_rng_make(seed);
    float x[300], y[300];
    char spec[160];
    emu_accum_string(a, spec, sizeof spec);
    ck_assert(maxn <= 300);
    for (uint64_t c = 0; c < cases; c++) {
        size_t n = c < 3 ? c : (size_t)test_below(&g, maxn + 1);
        rand_vec(&g, in, x, n, elo, ehi, specials);
        rand_vec(&g, in, y, n, elo, ehi, specials);
        bool plain = (c & 7) == 7; /* y = NULL: a plain sum */
        emu_accum_counts got, want;
        memset(&got, 0, sizeof got);
        memset(&want, 0, sizeof want);
        double lo;
        double v = emu_accum_dot(&lo, &got, a, x, 1, plain ? NULL : y, 1, n,
                                 NULL);
        double r = ref(a, x, plain ? NULL : y, n, &want);
        char xs[200], ys[200];
        print_vec(xs, sizeof xs, x, n);
        print_vec(ys, sizeof ys, y, n);
        EXPECT(test_same(v, r) && lo == 0.0,
               "%s, case %" PRIu64 " (seed %#" PRIx64 "), n %zu%s: got %a "
               "(lo %a), reference %a; x = %s; y = %s", spec, c, seed, n,
               plain ? " (sum)" : "", v, lo, r, xs, ys);
        char what[300];
        snprintf(what, sizeof what, "%s counts, case %" PRIu64 ", n %zu", spec,
                 c, n);
        expect_counts(&got, &want, what);
    }
}

/* Input formats and exponent ranges per accumulator: products reaching
 * well into the accumulator's subnormals and toward its overflow. */
static void ranges_for(const emu_format *acc, int *elo, int *ehi)
{
    *elo = acc->emin / 2 - 3;
    *ehi = acc->emax / 2 + 1;
    if (*elo < -70)
        *elo = -70;
    if (*ehi > 60)
        *ehi = 60;
}

static void check_all_accs(emu_accum_kind kind, ref_fn ref, bool specials,
                           uint64_t cases)
{
    for (int fi = 0; fi < N_ACC; fi++) {
        const emu_format *acc = fmt_named(acc_specs[fi]);
        int elo, ehi;
        ranges_for(acc, &elo, &ehi);
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_accum a = model_of(kind, acc, (emu_rnd)m);
            a.block = 5;
            a.fused_k = 4;
            a.fused_w = 14;
            a.wide = *fmt_named("binary32");
            check_model(&a, ref, fmt_named("binary16"), elo, ehi, specials, 40,
                        cases, 0x5e9 + (uint64_t)fi * 16 + (uint64_t)m);
            /* Rounded products, into a narrow product format. */
            a.round_products = true;
            a.prod = *fmt_named("bfloat16");
            check_model(&a, ref, fmt_named("bfloat16"), elo, ehi, specials, 40,
                        cases / 2, 0x7e9 + (uint64_t)fi * 16 + (uint64_t)m);
        }
    }
}

START_TEST(sequential_vs_mpfr)
{
    check_all_accs(EMU_ACCUM_SEQUENTIAL, ref_sequential, true,
                   test_scaled(120, 20));
    /* Long sums in binary16: swamping territory. */
    emu_accum a = model_of(EMU_ACCUM_SEQUENTIAL, fmt_named("binary16"), EMU_RNE);
    check_model(&a, ref_sequential, fmt_named("binary16"), -6, 2, false, 300,
                test_scaled(60, 10), 0x10);
}
END_TEST

START_TEST(pairwise_vs_mpfr)
{
    check_all_accs(EMU_ACCUM_PAIRWISE, ref_pairwise, true, test_scaled(60, 10));
}
END_TEST

START_TEST(blocked_vs_mpfr)
{
    check_all_accs(EMU_ACCUM_BLOCKED, ref_blocked, true, test_scaled(60, 10));
    /* The FP8 recipe: e5m2 partial sums promoted to binary32 every 16. */
    emu_accum a = model_of(EMU_ACCUM_BLOCKED, fmt_named("e5m2"), EMU_RNE);
    a.block = 16;
    check_model(&a, ref_blocked, fmt_named("e4m3"), -4, 3, false, 300,
                test_scaled(60, 10), 0x11);
}
END_TEST

START_TEST(kahan_vs_mpfr)
{
    check_all_accs(EMU_ACCUM_KAHAN, ref_kahan, true, test_scaled(60, 10));
}
END_TEST

START_TEST(fused_vs_mpfr)
{
    check_all_accs(EMU_ACCUM_FUSED, ref_fused, false, test_scaled(60, 10));
    /* Wider units and alignment windows beyond 53 bits. */
    static const unsigned ks[] = { 1, 2, 8, 16, 64 }, ws[] = { 3, 11, 24, 40, 60 };
    for (int i = 0; i < 5; i++) {
        emu_accum a = model_of(EMU_ACCUM_FUSED, fmt_named("binary32"), EMU_RNE);
        a.fused_k = ks[i];
        a.fused_w = ws[i];
        check_model(&a, ref_fused, fmt_named("binary16"), -14, 15, false, 200,
                    test_scaled(30, 5), 0x12 + (uint64_t)i);
    }
}
END_TEST

START_TEST(exact_vs_mpfr_dot)
{
    test_rng g = test_rng_make(0xe8ac7);
    emu_accum a = model_of(EMU_ACCUM_EXACT, fmt_named("binary32"), EMU_RNE);
    float x[400], y[400];
    const uint64_t cases = test_scaled(600, 50);
    for (uint64_t c = 0; c < cases; c++) {
        size_t n = c < 2 ? c : (size_t)test_below(&g, 400);
        /* Full binary32 range (products from 2^-298 to 2^254), narrow
         * ranges with heavy cancellation, and specials now and then. */
        int elo = (c & 3) == 0 ? -149 : (c & 3) == 1 ? -5 : -40;
        int ehi = (c & 3) == 0 ? 127 : (c & 3) == 1 ? 5 : 40;
        const emu_format *in = fmt_named("binary32");
        rand_vec(&g, in, x, n, elo, ehi, (c & 15) == 5);
        rand_vec(&g, in, y, n, elo, ehi, false);
        if ((c & 3) == 1 && n > 1) {
            /* Cancel exactly: the second half negates the first. */
            for (size_t i = n / 2; i < n; i++) {
                x[i] = -x[i - n / 2];
                y[i] = y[i - n / 2];
            }
        }
        emu_accum_counts cnt;
        memset(&cnt, 0, sizeof cnt);
        double lo, rlo;
        bool plain = (c & 7) == 3;
        double v = emu_accum_dot(&lo, &cnt, &a, x, 1, plain ? NULL : y, 1, n,
                                 NULL);
        double r = ref_exact(x, plain ? NULL : y, n, &rlo);
        char xs[200], ys[200];
        print_vec(xs, sizeof xs, x, n);
        print_vec(ys, sizeof ys, y, n);
        EXPECT(test_same(v, r) && test_same(lo, rlo),
               "exact, case %" PRIu64 ", n %zu: got %a + %a, mpfr_dot %a + %a; "
               "x = %s; y = %s", c, n, v, lo, r, rlo, xs, ys);
        EXPECT(cnt.adds == n && cnt.absorbed == 0 && cnt.lost_bits[0] == n,
               "exact counts: adds %" PRIu64 " absorbed %" PRIu64, cnt.adds,
               cnt.absorbed);
    }
}
END_TEST

/* u + v, exact in MPFR, rounded into f by stochastic mode r with word. */
static double ref_sr_sum(const emu_format *f, double u, double v,
                         const emu_rounding *r, uint64_t word)
{
    mpfr_t x;
    mpfr_init2(x, 2200); /* any sum of two doubles exactly */
    mpfr_set_d(x, u, MPFR_RNDN);
    mpfr_add_d(x, x, v, MPFR_RNDN);
    emu_status st;
    double res = ref_sr_round(f, x, r, word, &st);
    mpfr_clear(x);
    return res;
}

/* Stochastic accumulation: each step rounds with the word the index rule
 * names (product i: word i; accumulator rounding r: word n + r). */
START_TEST(stochastic_words)
{
    test_rng g = test_rng_make(0x5705);
    const emu_format *acc = fmt_named("bfloat16");
    const uint64_t seed = 77, stream = 0x8000000000000003ull;
    float x[64], y[64];
    for (int bits = 0; bits < 2; bits++)
        for (int rp = 0; rp < 2; rp++) {
            emu_accum a = model_of(EMU_ACCUM_SEQUENTIAL, acc,
                                   bits ? EMU_RS_BITS : EMU_RS);
            a.rnd.sr_bits = bits ? 7 : 64;
            a.round_products = rp;
            a.prod = *fmt_named("binary16");
            for (uint64_t c = 0; c < test_scaled(100, 10); c++) {
                size_t n = (size_t)test_below(&g, 64);
                rand_vec(&g, fmt_named("binary16"), x, n, -8, 8, false);
                rand_vec(&g, fmt_named("binary16"), y, n, -8, 8, false);
                uint64_t dot = test_below(&g, 1000);
                emu_accum_rng rng = { seed, stream, dot };
                double v = emu_accum_dot(NULL, NULL, &a, x, 1, y, 1, n, &rng);
                uint64_t base = dot * EMU_ACCUM_WORDS_PER_DOT;
                double s = 0.0;
                for (size_t i = 0; i < n; i++) {
                    double t = (double)x[i] * y[i]; /* exact */
                    if (rp)
                        t = ref_sr_sum(&a.prod, t, 0.0, &a.rnd,
                                       emu_random64(seed, stream, base + i));
                    s = ref_sr_sum(acc, s, t, &a.rnd,
                                   emu_random64(seed, stream, base + n + i));
                }
                EXPECT(test_same(v, s), "sr%u prod %d case %" PRIu64 ": got %a, "
                       "expected %a", a.rnd.sr_bits, rp, c, v, s);
            }
        }
}
END_TEST

/* Hand-made swamping: 1 + t in a binary16 accumulator. */
START_TEST(swamping_by_hand)
{
    emu_accum a = model_of(EMU_ACCUM_SEQUENTIAL, fmt_named("binary16"), EMU_RNE);
    static const struct {
        float t;
        double sum;
        uint64_t absorbed;
        int lost; /* bin of the second addition */
    } cases[] = {
        { 0x1p-12f, 1.0, 1, EMU_LOST_BINS - 1 },   /* far below half an ulp */
        { 0x1p-11f, 1.0, 1, EMU_LOST_BINS - 1 },   /* a tie, to even: gone  */
        { 0x1p-10f, 1.0 + 0x1p-10, 0, 0 },         /* exactly one ulp: kept */
        { 0x3p-12f, 1.0 + 0x1p-10, 0, 2 },         /* 0.75 ulp: 2 bits lost */
        { 0x3p-11f, 1.0 + 0x2p-10, 0, 1 },         /* 1.5 ulp, tie to even  */
        { 0x1p-24f, 1.0, 1, EMU_LOST_BINS - 1 },
        { -0x1p-12f, 1.0, 1, EMU_LOST_BINS - 1 },  /* below 1, ulp 2^-11    */
        { -0x1p-11f, 1.0 - 0x1p-11, 0, 0 },
        { 0.0f, 1.0, 0, 0 },                       /* zero adds lose nothing */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float x[2] = { 1.0f, cases[c].t };
        emu_accum_counts cnt;
        memset(&cnt, 0, sizeof cnt);
        double v = emu_accum_dot(NULL, &cnt, &a, x, 1, NULL, 0, 2, NULL);
        EXPECT(v == cases[c].sum, "1 + %a in binary16: %a, expected %a",
               (double)cases[c].t, v, cases[c].sum);
        EXPECT(cnt.adds == 2 && cnt.absorbed == cases[c].absorbed,
               "1 + %a: adds %" PRIu64 " absorbed %" PRIu64 ", expected 2, %"
               PRIu64, (double)cases[c].t, cnt.adds, cnt.absorbed,
               cases[c].absorbed);
        /* The first addition (0 + 1) loses nothing. */
        uint64_t want0 = 1 + (cases[c].lost == 0);
        EXPECT(cnt.lost_bits[0] == want0 && cnt.lost_bits[cases[c].lost] >= 1,
               "1 + %a: lost_bits[0] = %" PRIu64 ", lost_bits[%d] = %" PRIu64,
               (double)cases[c].t, cnt.lost_bits[0], cases[c].lost,
               cnt.lost_bits[cases[c].lost]);
    }
    /* The shared bookkeeping directly: an update absorbed by a weight. */
    emu_accum_counts cnt;
    memset(&cnt, 0, sizeof cnt);
    const emu_format *b16 = fmt_named("binary16");
    emu_accum_count_add(&cnt, b16, 1.0, 0x1p-12, 1.0);
    emu_accum_count_add(&cnt, b16, 1.0, 0x5p-12, 1.0 + 0x1p-10);
    ck_assert_uint_eq(cnt.adds, 2);
    ck_assert_uint_eq(cnt.absorbed, 1);
    ck_assert_uint_eq(cnt.lost_bits[EMU_LOST_BINS - 1], 1);
    ck_assert_uint_eq(cnt.lost_bits[2], 1); /* 0x5p-12 = 2^-10 + 2^-12: bits -11, -12 */
}
END_TEST

/* ---- 3. the GEMM engine against emu_accum_dot --------------------------- */

typedef struct layout {
    ptrdiff_t rs, cs; /* strides of a rows x cols view */
    size_t size;      /* elements to allocate */
} layout;

/* Row-major, transposed, padded rows, or strided both ways. */
static layout make_layout(int kind, size_t rows, size_t cols)
{
    layout l;
    switch (kind) {
    case 0:
        l.rs = (ptrdiff_t)cols, l.cs = 1;
        break;
    case 1:
        l.rs = 1, l.cs = (ptrdiff_t)rows;
        break;
    case 2:
        l.rs = (ptrdiff_t)cols + 3, l.cs = 1;
        break;
    default:
        l.rs = 2 * (ptrdiff_t)cols + 1, l.cs = 2;
        break;
    }
    l.size = rows * cols * 4 + 8;
    return l;
}

static void gemm_case(const emu_accum *a, test_rng *g, size_t M, size_t N,
                      size_t K, int la, int lb, bool init, const char *spec)
{
    layout A = make_layout(la, M, K), B = make_layout(lb, K, N);
    float *av = malloc(A.size * sizeof *av), *bv = malloc(B.size * sizeof *bv);
    float *cf = malloc(M * N * sizeof *cf);
    double *cv = malloc(M * N * sizeof *cv);
    const emu_format *in = fmt_named("binary16");
    bool specials = a->kind != EMU_ACCUM_FUSED && test_below(g, 8) == 0;
    rand_vec(g, in, av, A.size, -10, 6, specials);
    rand_vec(g, in, bv, B.size, -10, 6, false);
    rand_vec(g, in, cf, M * N, -4, 8, false);
    for (size_t o = 0; o < M * N; o++)
        cv[o] = cf[o];
    double *hi = malloc(M * N * sizeof *hi), *lo = malloc(M * N * sizeof *lo);
    const uint64_t seed = 5, stream = 9, dot0 = test_below(g, 100);
    emu_accum_counts want;
    memset(&want, 0, sizeof want);
    /* The definition, one dot product at a time (the initial value, when
     * given, checked through the engine's own n = 0 .. K agreement below). */
    double *whi = malloc(M * N * sizeof *whi), *wlo = malloc(M * N * sizeof *wlo);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            emu_accum_rng rng = { seed, stream, dot0 + i * N + j };
            whi[i * N + j] = emu_accum_dot(&wlo[i * N + j], &want, a,
                                           av + (ptrdiff_t)i * A.rs, A.cs,
                                           bv + (ptrdiff_t)j * B.cs, B.rs, K,
                                           &rng);
        }
    for (int threads = 1; threads <= 3; threads++) {
        emu_accum_counts got;
        memset(&got, 0, sizeof got);
        int rc = emu_gemm_accum_ex(a, M, N, K, av, A.rs, A.cs, bv, B.rs, B.cs,
                                   init ? cv : NULL, hi, lo, seed, stream, dot0,
                                   &got, threads);
        ck_assert_int_eq(rc, 0);
        if (init)
            continue; /* compared with threads = 1 below */
        for (size_t o = 0; o < M * N; o++) {
            bool same = test_same(hi[o], whi[o]) &&
                        (a->kind != EMU_ACCUM_EXACT || test_same(lo[o], wlo[o]));
            EXPECT(same, "%s: M %zu N %zu K %zu layouts %d/%d threads %d: "
                   "output (%zu, %zu) = %a + %a, emu_accum_dot %a + %a", spec,
                   M, N, K, la, lb, threads, o / N, o % N, hi[o], lo[o],
                   whi[o], wlo[o]);
        }
        char what[300];
        snprintf(what, sizeof what, "%s gemm counts (M %zu N %zu K %zu, "
                 "threads %d)", spec, M, N, K, threads);
        expect_counts(&got, &want, what);
    }
    if (init) {
        /* Thread independence with initial values, and against the
         * generic path: a K = 0 product returns the initial values, and
         * the fast engine equals the per-dot engine (threads 1 vs 2). */
        double *h1 = malloc(M * N * sizeof *h1), *l1 = malloc(M * N * sizeof *l1);
        emu_accum_counts c1, c2;
        memset(&c1, 0, sizeof c1);
        memset(&c2, 0, sizeof c2);
        emu_gemm_accum_ex(a, M, N, K, av, A.rs, A.cs, bv, B.rs, B.cs, cv, h1,
                          l1, seed, stream, dot0, &c1, 1);
        emu_gemm_accum_ex(a, M, N, K, av, A.rs, A.cs, bv, B.rs, B.cs, cv, hi,
                          lo, seed, stream, dot0, &c2, 2);
        for (size_t o = 0; o < M * N; o++)
            EXPECT(test_same(hi[o], h1[o]), "%s with init: threads 1 vs 2 at "
                   "%zu: %a vs %a", spec, o, h1[o], hi[o]);
        expect_counts(&c2, &c1, spec);
        free(h1);
        free(l1);
    }
    free(av);
    free(bv);
    free(cv);
    free(cf);
    free(hi);
    free(lo);
    free(whi);
    free(wlo);
}

START_TEST(gemm_equals_dot)
{
    test_rng g = test_rng_make(0x6e33);
    static const char *const accs[] = { "binary16", "bfloat16", "binary32",
                                        "e4m3", "e5m6,nosubnormals" };
    const uint64_t shapes = test_scaled(6, 2);
    for (int kind = 0; kind < EMU_ACCUM_COUNT; kind++) {
        if (kind == EMU_ACCUM_FAST)
            continue; /* its own test: the BLAS order is the library's */
        for (int fi = 0; fi < 5; fi++)
            for (int m = 0; m <= EMU_RS; m++) {
                if ((kind == EMU_ACCUM_EXACT) && (m == EMU_RS || fi > 0))
                    continue;
                emu_accum a = model_of((emu_accum_kind)kind, fmt_named(accs[fi]),
                                       (emu_rnd)m);
                a.block = 7;
                a.fused_k = 5;
                a.fused_w = 20;
                a.round_products = (m & 1) && fi != 2;
                a.prod = *fmt_named("bfloat16");
                char spec[160];
                emu_accum_string(&a, spec, sizeof spec);
                for (uint64_t s = 0; s < shapes; s++) {
                    size_t M = 1 + (size_t)test_below(&g, 9);
                    size_t N = 1 + (size_t)test_below(&g, 40);
                    size_t K = (size_t)test_below(&g, 60);
                    if (s == 0)
                        K = 1;
                    if (s == 1)
                        N = 1;
                    gemm_case(&a, &g, M, N, K, (int)test_below(&g, 4),
                              (int)test_below(&g, 4), s == 2, spec);
                }
            }
    }
}
END_TEST

/* The sequential model's vector kernel on bigger shapes (several column
 * panels, long K) in every deterministic mode. */
START_TEST(gemm_sequential_big)
{
    test_rng g = test_rng_make(0x6e34);
    static const char *const accs[] = { "binary16", "bfloat16", "binary32",
                                        "e4m3", "e5m2", "e4m3fnuz",
                                        "e5m6,nosubnormals" };
    for (int fi = 0; fi < 7; fi++)
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_accum a = model_of(EMU_ACCUM_SEQUENTIAL, fmt_named(accs[fi]),
                                   (emu_rnd)m);
            char spec[160];
            emu_accum_string(&a, spec, sizeof spec);
            gemm_case(&a, &g, 5, 37 + (size_t)test_below(&g, 30),
                      100 + (size_t)test_below(&g, 200), (int)test_below(&g, 4),
                      (int)test_below(&g, 4), false, spec);
            a.kind = EMU_ACCUM_BLOCKED;
            a.block = 16;
            emu_accum_string(&a, spec, sizeof spec);
            gemm_case(&a, &g, 4, 33, 150, 0, 0, false, spec);
            /* Kahan's long runs: the AVX-512 kernel's exactness bound
             * (kahan_v8_mode) over many steps, met and failed, with and
             * without initial values */
            a.kind = EMU_ACCUM_KAHAN;
            emu_accum_string(&a, spec, sizeof spec);
            gemm_case(&a, &g, 3, 20 + (size_t)test_below(&g, 20),
                      150 + (size_t)test_below(&g, 100), (int)test_below(&g, 4),
                      (int)test_below(&g, 4), m & 1, spec);
        }
}
END_TEST

/* Sums whose binary64 rounding lands exactly on a midpoint of the
 * accumulator's grid while the exact sum lies just below it: s has an odd
 * last bit, t = ulp(s)/2 (1 - 2^-46) = (ulp(s)/2 (1 + 2^-23)) (1 - 2^-23).
 * Rounding the binary64 sum to nearest-even would step up; the exact sum
 * rounds down.  (The engine's nearest-mode shortcut must notice.) */
START_TEST(gemm_double_rounding_traps)
{
    test_rng g = test_rng_make(0xd0b1e);
    static const char *const accs[] = { "binary32", "binary16", "bfloat16",
                                        "e5m6,nosubnormals" };
    for (int fi = 0; fi < 4; fi++)
        for (int m = 0; m < 2; m++) {
            const emu_format *f = fmt_named(accs[fi]);
            emu_accum a = model_of(EMU_ACCUM_SEQUENTIAL, f, m ? EMU_RNA : EMU_RNE);
            const size_t M = 5, N = 19, K = 2;
            float av[M * K], bv[K * N];
            for (size_t i = 0; i < M; i++) {
                /* s: a p-bit value with an odd last bit, in range */
                int e = (int)test_below(&g, 6) - 2;
                double frac = (double)(test_next(&g) >> (64 - (f->p - 1))) * 2 + 1;
                double sv = ldexp(1.0 + ldexp(frac, 1 - f->p), e);
                sv = emu_round(f, sv, NULL, NULL);
                int es = ilogb(sv);
                av[i * K] = (float)sv;
                av[i * K + 1] = (float)ldexp(1.0 + 0x1p-23, es - f->p); /* ulp/2 (1 + 2^-23) */
            }
            for (size_t j = 0; j < N; j++) {
                float sg = (j & 1) ? -1.0f : 1.0f;
                bv[j] = sg;
                bv[N + j] = sg * (1.0f - 0x1p-23f);
            }
            double hi[M * N], lo[M * N];
            ck_assert_int_eq(emu_gemm_accum(&a, M, N, K, av, (ptrdiff_t)K, 1, bv,
                                            (ptrdiff_t)N, 1, hi, lo, 0, 0, NULL, 1), 0);
            for (size_t i = 0; i < M; i++)
                for (size_t j = 0; j < N; j++) {
                    double want = ref_sequential(&a, av + i * K, NULL, 0, NULL);
                    emu_accum_counts unused;
                    memset(&unused, 0, sizeof unused);
                    float x[2] = { av[i * K], av[i * K + 1] }, y[2] = { bv[j], bv[N + j] };
                    want = ref_sequential(&a, x, y, 2, &unused);
                    EXPECT(test_same(hi[i * N + j], want),
                           "%s %s: %a * %a + %a * %a = %a, MPFR steps give %a",
                           f->name, mode_name(a.rnd.mode), (double)x[0],
                           (double)y[0], (double)x[1], (double)y[1],
                           hi[i * N + j], want);
                }
        }
}
END_TEST

/* fast: binary32 host arithmetic; with BLAS the order is the library's, so
 * the check is an error bound.  (Thread independence: gemm_fast_threads.) */
START_TEST(gemm_fast)
{
    test_rng g = test_rng_make(0xfa57);
    emu_accum a = model_of(EMU_ACCUM_FAST, fmt_named("binary32"), EMU_RNE);
    for (int c = 0; c < 20; c++) {
        size_t M = 1 + (size_t)test_below(&g, 30), N = 1 + (size_t)test_below(&g, 30);
        size_t K = 1 + (size_t)test_below(&g, 100);
        int la = (int)test_below(&g, 4), lb = (int)test_below(&g, 4);
        layout A = make_layout(la, M, K), B = make_layout(lb, K, N);
        float *av = malloc(A.size * sizeof *av), *bv = malloc(B.size * sizeof *bv);
        rand_vec(&g, fmt_named("binary16"), av, A.size, -4, 4, false);
        rand_vec(&g, fmt_named("binary16"), bv, B.size, -4, 4, false);
        double *h1 = malloc(M * N * sizeof *h1);
        emu_accum_counts cnt;
        memset(&cnt, 0, sizeof cnt);
        ck_assert_int_eq(emu_gemm_accum(&a, M, N, K, av, A.rs, A.cs, bv, B.rs,
                                        B.cs, h1, NULL, 1, 2, &cnt, 1), 0);
        ck_assert_uint_eq(cnt.adds, 0);
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) {
                double exact = 0.0, mag = 0.0;
                for (size_t k = 0; k < K; k++) {
                    double p = (double)av[(ptrdiff_t)i * A.rs + (ptrdiff_t)k * A.cs] *
                               bv[(ptrdiff_t)k * B.rs + (ptrdiff_t)j * B.cs];
                    exact += p; /* exact: products of binary16 in a short range */
                    mag += fabs(p);
                }
                double v = h1[i * N + j];
                EXPECT(v == (float)v && fabs(v - exact) <= (double)K * 0x1p-23 * mag,
                       "fast (%zu, %zu) of %zux%zux%zu: %a, exact %a", i, j, M,
                       N, K, v, exact);
            }
        free(av);
        free(bv);
        free(h1);
    }
}
END_TEST

/* fast, thread independence.  The model never splits work over our threads
 * (the argument is ignored) and OpenBLAS's sgemm changes its summation
 * order with its own thread count, so gemm_fast pins OpenBLAS to one
 * thread: the result must not depend on what the caller set either.  The
 * shapes are ones where OpenBLAS 0.3 gives different bits at 1, 2 and 3
 * threads; a serial BLAS, or the plain loop without one, passes trivially. */
START_TEST(gemm_fast_threads)
{
    static const size_t shapes[][3] = { { 200, 300, 500 }, { 1000, 8, 1000 },
                                        { 8, 8, 20000 } };
    test_rng g = test_rng_make(0xfa58);
    emu_accum a = model_of(EMU_ACCUM_FAST, fmt_named("binary32"), EMU_RNE);
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const size_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
        float *av = malloc(M * K * sizeof *av), *bv = malloc(K * N * sizeof *bv);
        double *h1 = malloc(M * N * sizeof *h1), *h = malloc(M * N * sizeof *h);
        ck_assert(av && bv && h1 && h);
        rand_vec(&g, fmt_named("bfloat16"), av, M * K, -10, 10, false);
        rand_vec(&g, fmt_named("bfloat16"), bv, K * N, -10, 10, false);
        blas_threads(1);
        ck_assert_int_eq(emu_gemm_accum(&a, M, N, K, av, (ptrdiff_t)K, 1, bv,
                                        (ptrdiff_t)N, 1, h1, NULL, 1, 2, NULL, 1), 0);
        for (int bt = 1; bt <= 3; bt++)
            for (int threads = 1; threads <= 3; threads++) {
                blas_threads(bt);
                ck_assert_int_eq(emu_gemm_accum(&a, M, N, K, av, (ptrdiff_t)K, 1,
                                                bv, (ptrdiff_t)N, 1, h, NULL, 1, 2,
                                                NULL, threads), 0);
                for (size_t o = 0; o < M * N; o++)
                    EXPECT(test_same(h[o], h1[o]), "fast %zux%zux%zu: output "
                           "(%zu, %zu) is %a with %d threads and OpenBLAS at %d, "
                           "%a with 1 and 1", M, N, K, o / N, o % N, h[o],
                           threads, bt, h1[o]);
            }
        blas_threads(1);
        free(av);
        free(bv);
        free(h1);
        free(h);
    }
}
END_TEST

/* The sequential model's stochastic dot product recomputed from the
 * words (stream, base + i) for product i and (stream, base + n + i) for
 * accumulator rounding i, as stochastic_words does. */
static double seq_sr_dot(const emu_accum *a, const float *x, const float *y,
                         size_t n, uint64_t seed, uint64_t stream,
                         uint64_t base)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double t = emu_round2_word(&a->prod, (double)x[i] * y[i], 0.0, &a->rnd,
                                   emu_random64(seed, stream, base + i), NULL);
        double hi = s + t, bv = hi - s, av = hi - bv;
        double lo = isfinite(hi) ? (s - av) + (t - bv) : 0.0;
        s = emu_round2_word(&a->acc, hi, lo, &a->rnd,
                            emu_random64(seed, stream, base + n + i), NULL);
    }
    return s;
}

/* A dot product longer than EMU_ACCUM_SHORT_DOT terms needs more than
 * EMU_ACCUM_WORDS_PER_DOT words: it takes them from its size class's
 * stream (accum.h), where dot d's range [d 2^25, (d + 1) 2^25) meets no
 * other dot product's, instead of running into dot d + 1's range of the
 * op's stream.  Checked against the words recomputed by hand, and against
 * the old overlapping rule (whose result must differ: the test can tell
 * the two apart).  The longest short dot keeps the op-stream rule. */
START_TEST(long_dot_own_words)
{
    test_rng g = test_rng_make(0x10d0);
    const uint64_t seed = 5, stream = 9, dot = 3;
    const size_t n = EMU_ACCUM_SHORT_DOT + 1 + (size_t)test_below(&g, 1000);
    ck_assert(5 * (uint64_t)n + 1 > EMU_ACCUM_WORDS_PER_DOT &&
              5 * (uint64_t)n + 1 <= (uint64_t)1 << 25);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    ck_assert(x && y);
    /* products below binary16's max, sums far below binary32's */
    rand_vec(&g, fmt_named("binary16"), x, n, -4, 4, false);
    rand_vec(&g, fmt_named("binary16"), y, n, -4, 4, false);
    emu_accum a = model_of(EMU_ACCUM_SEQUENTIAL, fmt_named("binary32"), EMU_RS);
    a.rnd.sr_bits = 64;
    a.round_products = true;
    a.prod = *fmt_named("binary16");
    emu_accum_rng rng = { seed, stream, dot };
    double v = emu_accum_dot(NULL, NULL, &a, x, 1, y, 1, n, &rng);
    double own = seq_sr_dot(&a, x, y, n, seed,
                            stream ^ EMU_ACCUM_LONG_STREAM(25), dot << 25);
    double old = seq_sr_dot(&a, x, y, n, seed, stream,
                            dot * EMU_ACCUM_WORDS_PER_DOT);
    EXPECT(test_same(v, own) && !test_same(own, old),
           "dot of %zu terms: got %a, from its own words %a, from the old "
           "overlapping ones %a", n, v, own, old);
    /* the longest short dot: the op's stream, as before */
    const size_t m = EMU_ACCUM_SHORT_DOT;
    v = emu_accum_dot(NULL, NULL, &a, x, 1, y, 1, m, &rng);
    old = seq_sr_dot(&a, x, y, m, seed, stream, dot * EMU_ACCUM_WORDS_PER_DOT);
    EXPECT(test_same(v, old), "dot of %zu terms: got %a, want %a from the "
           "op's stream", m, v, old);
    free(x);
    free(y);
}
END_TEST

/* ---- 4. the kernels' fast paths on awkward inputs ------------------------
 * The fused, exact and stochastic sequential kernels decide in integers on
 * the common case and hand anything else to the definition; these inputs
 * sit on the edges of that split: exact cancellation, products far below
 * the accumulator's subnormals, significands too wide for the exact
 * kernel's bins, exponents spread over all of binary32, sums that
 * overflow the accumulator, inf and NaN, zeros of both signs and whole
 * zero rows, and K not a multiple of the fused unit's width. */

/* A binary32 value of kind `kind`:
 *  0 binary16 values in [2^-10, 2^6] (the usual data), 1/8 of them zero;
 *  1 anything binary16 holds, subnormals included, 1/4 zero;
 *  2 full binary32 significands over all of binary32's exponents;
 *  3 ones and powers of two of both signs (exact cancellation);
 *  4 mostly -0, a few +0 and small values (the exact model's zero sign);
 *  5 positive, 20-bit significands (last bit set) in [1, 16): products
 *    40 bits wide within one of the exact kernel's bins, the widest it
 *    takes, whose sums need the bins emptied every 64 terms. */
static float awkward_val(test_rng *g, int kind)
{
    uint64_t w = test_next(g);
    bool neg = (w >> 7) & 1;
    switch (kind) {
    case 0:
        if ((w & 7) == 0)
            return neg ? -0.0f : 0.0f;
        return rand_val(g, fmt_named("binary16"), -10, 6, false);
    case 1:
        if ((w & 3) == 0)
            return neg ? -0.0f : 0.0f;
        return rand_val(g, fmt_named("binary16"), -25, 15, false);
    case 2: {
        int e = -149 + (int)test_below(g, 149 + 128);
        float x = (float)ldexp(1.0 + ldexp((double)(test_next(g) >> 40), -24),
                               e);
        if (!isfinite(x))
            x = FLT_MAX;
        return neg ? -x : x;
    }
    case 3: {
        float x = ldexpf(1.0f, (int)test_below(g, 7) - 3);
        return neg ? -x : x;
    }
    case 5:
        return (float)ldexp((double)((test_next(g) >> 45) | 0x80001), -19 +
                            (int)test_below(g, 4));
    case 6:
        return (float)ldexp((double)((test_next(g) >> 50) | 0x4001) *
                            (neg ? -1.0 : 1.0),
                            -14 - 60 + (int)test_below(g, 121));
    case 7:
    case 8:
        return (float)ldexp((double)((test_next(g) >> 45) | 0x80001), -19 +
                            (kind == 7 ? 7 * (int)test_below(g, 2)
                                       : (int)test_below(g, 41) - 20));
    default:
        if ((w & 15) == 0)
            return (float)ldexp(1.0, (int)test_below(g, 8) - 12);
        return (w & 15) == 1 ? 0.0f : -0.0f;
    }
}

/* One product on the kernels against emu_accum_dot(_init) per output, for
 * 1 to 3 threads, with and without counts. */
static void kernel_case_counts(const emu_accum *a, test_rng *g, size_t M,
                               size_t N, size_t K, int kind, bool init,
                               const char *spec, emu_accum_counts *want_out)
{
    float *av = malloc((M * K + 1) * sizeof *av);
    float *bv = malloc((K * N + 1) * sizeof *bv);
    double *cv = malloc(M * N * sizeof *cv);
    double *hi = malloc(M * N * sizeof *hi), *lo = malloc(M * N * sizeof *lo);
    double *whi = malloc(M * N * sizeof *whi), *wlo = malloc(M * N * sizeof *wlo);
    ck_assert(av && bv && cv && hi && lo && whi && wlo);
    for (size_t i = 0; i < M * K; i++)
        av[i] = awkward_val(g, kind);
    for (size_t i = 0; i < K * N; i++)
        bv[i] = awkward_val(g, kind == 3 ? 3 : kind == 4 ? 0 : kind);
    if (kind == 3)
        /* pairs of terms that cancel exactly: a_2k b_2k = -a_2k+1 b_2k+1 */
        for (size_t i = 0; i < M; i++)
            for (size_t k = 1; k < K; k += 2) {
                av[i * K + k] = av[i * K + k - 1];
                for (size_t j = 0; j < N; j++)
                    bv[k * N + j] = -bv[(k - 1) * N + j];
            }
    if (kind == 4 && M > 1)
        for (size_t k = 0; k < K; k++)
            av[k] = -0.0f; /* row 0: every product a zero */
    /* inf and NaN now and then, in one row or one column */
    if (test_below(g, 5) == 0 && K > 0) {
        float sp = test_below(g, 2) ? NAN : -INFINITY;
        if (test_below(g, 2))
            av[test_below(g, M) * K + test_below(g, K)] = sp;
        else
            bv[test_below(g, K) * N + test_below(g, N)] = sp;
    }
    for (size_t o = 0; o < M * N; o++) {
        float c = kind == 4 ? -0.0f
                            : rand_val(g, fmt_named("binary16"), -4, 8, false);
        cv[o] = emu_round(&a->acc, c, NULL, NULL);
    }
    const uint64_t seed = 11, stream = 3, dot0 = test_below(g, 50);
    emu_accum_counts want;
    memset(&want, 0, sizeof want);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            size_t o = i * N + j;
            emu_accum_rng rng = { seed, stream, dot0 + o };
            whi[o] = init ? emu_accum_dot_init(&wlo[o], &want, a, cv[o],
                                               av + i * K, 1, bv + j,
                                               (ptrdiff_t)N, K, &rng)
                          : emu_accum_dot(&wlo[o], &want, a, av + i * K, 1,
                                          bv + j, (ptrdiff_t)N, K, &rng);
        }
    for (int threads = 1; threads <= 3; threads++)
        for (int counting = 0; counting < 2; counting++) {
            emu_accum_counts got;
            memset(&got, 0, sizeof got);
            ck_assert_int_eq(emu_gemm_accum_ex(a, M, N, K, av, (ptrdiff_t)K, 1,
                                               bv, (ptrdiff_t)N, 1,
                                               init ? cv : NULL, hi, lo, seed,
                                               stream, dot0,
                                               counting ? &got : NULL,
                                               threads),
                             0);
            for (size_t o = 0; o < M * N; o++)
                EXPECT(test_same(hi[o], whi[o]) && test_same(lo[o], wlo[o]),
                       "%s kind %d%s: M %zu N %zu K %zu threads %d: output "
                       "(%zu, %zu) = %a + %a, emu_accum_dot %a + %a", spec,
                       kind, init ? " init" : "", M, N, K, threads, o / N,
                       o % N, hi[o], lo[o], whi[o], wlo[o]);
            if (counting) {
                char what[300];
                snprintf(what, sizeof what, "%s kind %d%s counts (M %zu N %zu "
                         "K %zu, threads %d)", spec, kind, init ? " init" : "",
                         M, N, K, threads);
                expect_counts(&got, &want, what);
            }
        }
    if (want_out)
        *want_out = want;
    free(av);
    free(bv);
    free(cv);
    free(hi);
    free(lo);
    free(whi);
    free(wlo);
}

static void kernel_case(const emu_accum *a, test_rng *g, size_t M, size_t N,
                        size_t K, int kind, bool init, const char *spec)
{
    kernel_case_counts(a, g, M, N, K, kind, init, spec, NULL);
}

/* Shapes: several panels and a partial one, K around the unit's width. */
static void kernel_shapes(const emu_accum *a, test_rng *g, const char *spec,
                          int cases)
{
    for (int c = 0; c < cases; c++) {
        size_t M = 1 + (size_t)test_below(g, 4);
        size_t N = 1 + (size_t)test_below(g, 40);
        size_t K = c == 0 ? 0 : c == 1 ? 1 : (size_t)test_below(g, 150);
        kernel_case(a, g, M, N, K, c % 5, c % 3 == 2, spec);
    }
}

START_TEST(gemm_kernels_fused)
{
    test_rng g = test_rng_make(0xf05ed);
    static const char *const accs[] = { "binary32", "bfloat16", "binary16",
                                        "e4m3", "e5m6,nosubnormals",
                                        "e4m3fnuz" };
    static const unsigned ks[] = { 1, 5, 16, 32 };
    static const unsigned ws[] = { 2, 12, 25, 40 };
    const int cases = (int)test_scaled(10, 5);
    for (int fi = 0; fi < 6; fi++)
        for (int m = 0; m <= EMU_RS_BITS; m++) {
            emu_accum a = model_of(EMU_ACCUM_FUSED, fmt_named(accs[fi]),
                                   (emu_rnd)m);
            a.rnd.sr_bits = m == EMU_RS_BITS ? 5 : 64;
            a.fused_k = ks[test_below(&g, 4)];
            a.fused_w = ws[test_below(&g, 4)];
            char spec[160];
            emu_accum_string(&a, spec, sizeof spec);
            kernel_shapes(&a, &g, spec, cases);
        }
}
END_TEST

START_TEST(gemm_kernels_exact)
{
    test_rng g = test_rng_make(0xe8ac7);
    emu_accum a = model_of(EMU_ACCUM_EXACT, fmt_named("binary32"), EMU_RNE);
    kernel_shapes(&a, &g, "exact", (int)test_scaled(60, 20));
    /* A long K: the bins emptied into the accumulator more than once
     * (binary32 significands: W = 48 goes to the definition; binary16
     * data of 11 + 11 bits, every 2^24 terms). */
    kernel_case(&a, &g, 2, 20, 3000, 0, false, "exact long");
    kernel_case(&a, &g, 2, 17, 1500, 5, false, "exact wide");
    kernel_case(&a, &g, 3, 18, 700, 6, false, "exact spread");
    kernel_case(&a, &g, 2, 17, 1000, 7, false, "exact wide bins");
    kernel_case(&a, &g, 2, 17, 3000, 8, false, "exact wide spread");
    kernel_case(&a, &g, 2, 33, 300, 6, true, "exact spread init");
}
END_TEST

START_TEST(gemm_kernels_seq_sr)
{
    test_rng g = test_rng_make(0x5e95);
    static const char *const accs[] = { "bfloat16", "binary16", "binary32",
                                        "e4m3", "e5m2", "e5m6,nosubnormals",
                                        "e4m3fnuz", "e4m3,saturate" };
    static const unsigned bits[] = { 64, 1, 13, 63 };
    const int cases = (int)test_scaled(10, 5);
    /* The deterministic kernel on the same data: a saturating accumulator
     * keeps a sum with an inf term finite, which its counts once missed. */
    for (int m = 0; m < TEST_DET_MODES; m++) {
        emu_accum d = model_of(EMU_ACCUM_SEQUENTIAL,
                               fmt_named("e4m3,saturate"), (emu_rnd)m);
        char spec[160];
        emu_accum_string(&d, spec, sizeof spec);
        kernel_shapes(&d, &g, spec, cases);
    }
    for (int fi = 0; fi < 8; fi++)
        for (int bi = 0; bi < 4; bi++) {
            emu_accum a = model_of(EMU_ACCUM_SEQUENTIAL, fmt_named(accs[fi]),
                                   bi ? EMU_RS_BITS : EMU_RS);
            a.rnd.sr_bits = bits[bi];
            char spec[160];
            emu_accum_string(&a, spec, sizeof spec);
            kernel_shapes(&a, &g, spec, cases);
        }
    /* several runs of SR_RUN words, starting at odd indices */
    emu_accum a = model_of(EMU_ACCUM_SEQUENTIAL, fmt_named("bfloat16"), EMU_RS);
    a.rnd.sr_bits = 64;
    kernel_case(&a, &g, 3, 21, 301, 0, false, "sr long");
    kernel_case(&a, &g, 3, 21, 257, 1, true, "sr long init");
}
END_TEST

/* The deterministic lane kernels (sequential, blocked, Kahan, pairwise) on
 * the same data: Kahan's exact-sum shortcut (binary16, FP8) must not be
 * taken where two values of acc can be 2^53 apart. */
START_TEST(gemm_kernels_lanes)
{
    test_rng g = test_rng_make(0x1a7e5);
    static const char *const accs[] = { "binary16", "binary32", "bfloat16",
                                        "e4m3", "e5m2" };
    static const emu_accum_kind kinds[] = { EMU_ACCUM_KAHAN,
                                            EMU_ACCUM_PAIRWISE,
                                            EMU_ACCUM_SEQUENTIAL,
                                            EMU_ACCUM_BLOCKED };
    const int cases = (int)test_scaled(6, 5);
    for (int ki = 0; ki < 4; ki++)
        for (int fi = 0; fi < 5; fi++)
            for (int m = 0; m < TEST_DET_MODES; m++) {
                emu_accum a = model_of(kinds[ki], fmt_named(accs[fi]),
                                       (emu_rnd)m);
                a.block = 9;
                char spec[160];
                emu_accum_string(&a, spec, sizeof spec);
                kernel_shapes(&a, &g, spec, cases);
            }
}
END_TEST

/* Kahan's and the pairwise kernels over longer dot products than
 * gemm_kernels_lanes', on data like bench_gemm's (binary16 values, some
 * subnormal, whose Kahan compensations are often subnormal in binary16):
 * the AVX-512 lanes' rounding of subnormal results and of RD's zero sums,
 * and their swamping bins, against emu_accum_dot with its counts.  Run
 * at each ISA level (tests/CMakeLists.txt), the C lanes face the same. */
START_TEST(gemm_kernels_long_lanes)
{
    test_rng g = test_rng_make(0x10a6e5);
    static const char *const accs[] = { "binary16", "bfloat16", "binary32",
                                        "e5m2", "e4m3" };
    static const emu_accum_kind kinds[] = { EMU_ACCUM_KAHAN,
                                            EMU_ACCUM_PAIRWISE };
    for (int ki = 0; ki < 2; ki++)
        for (int fi = 0; fi < 5; fi++)
            for (int m = 0; m < TEST_DET_MODES; m++) {
                emu_accum a = model_of(kinds[ki], fmt_named(accs[fi]),
                                       (emu_rnd)m);
                char spec[160];
                emu_accum_string(&a, spec, sizeof spec);
                size_t K = 200 + (size_t)test_below(&g, 120);
                kernel_case(&a, &g, 2, 16 + (size_t)test_below(&g, 5), K,
                            m % 2, m % 3 == 1, spec);
            }
}
END_TEST

/* The AVX-512 sequential and blocked lanes count two lanes' swamping bins
 * with one increment of a table of bin pairs that holds bins 0 .. 30 and
 * absorbed additions; larger bins are counted lane by lane (Kahan's and
 * the pairwise lanes, one histogram per lane, face the same data).
 * Products 40 bits wide (kind 7)
 * near the accumulator's magnitude lose up to 39 bits, so both sides of
 * that split meet, with inf and NaN now and then, on full and partial
 * panels (N below, at and above 16), long K, every deterministic mode,
 * against emu_accum_dot's counts; run at each ISA level. */
START_TEST(gemm_kernels_wide_bins)
{
    test_rng g = test_rng_make(0x31b1e5);
    static const char *const accs[] = { "binary16", "bfloat16", "binary32",
                                        "e5m2" };
    static const emu_accum_kind kinds[] = { EMU_ACCUM_SEQUENTIAL,
                                            EMU_ACCUM_BLOCKED,
                                            EMU_ACCUM_KAHAN,
                                            EMU_ACCUM_PAIRWISE };
    static const size_t ns[] = { 7, 16, 37 };
    uint64_t wide = 0, narrow = 0, absorbed = 0;
    for (int ki = 0; ki < 4; ki++)
        for (int fi = 0; fi < 4; fi++)
            for (int m = 0; m < TEST_DET_MODES; m++) {
                emu_accum a = model_of(kinds[ki], fmt_named(accs[fi]),
                                       (emu_rnd)m);
                a.block = 64;
                char spec[160];
                emu_accum_string(&a, spec, sizeof spec);
                emu_accum_counts want;
                size_t K = 150 + (size_t)test_below(&g, 200);
                kernel_case_counts(&a, &g, 2, ns[(ki + fi + m) % 3], K,
                                   7 + m % 2, m % 3 == 2, spec, &want);
                for (int b = 0; b < EMU_LOST_BINS - 1; b++)
                    *(b > 30 ? &wide : &narrow) += want.lost_bits[b];
                absorbed += want.absorbed;
            }
    /* the cases reach every part of the table and past it */
    ck_assert_uint_gt(wide, 0);
    ck_assert_uint_gt(narrow, 0);
    ck_assert_uint_gt(absorbed, 0);
}
END_TEST

static Suite *accum_suite(void)
{
    Suite *s = suite_create("accum");
    TCase *tc = tcase_create("step");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, step_fast_equals_choke_point);
    suite_add_tcase(s, tc);
    tc = tcase_create("models");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sequential_vs_mpfr);
    tcase_add_test(tc, pairwise_vs_mpfr);
    tcase_add_test(tc, blocked_vs_mpfr);
    tcase_add_test(tc, kahan_vs_mpfr);
    tcase_add_test(tc, fused_vs_mpfr);
    tcase_add_test(tc, exact_vs_mpfr_dot);
    tcase_add_test(tc, stochastic_words);
    tcase_add_test(tc, swamping_by_hand);
    suite_add_tcase(s, tc);
    tc = tcase_create("gemm");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, gemm_equals_dot);
    tcase_add_test(tc, gemm_sequential_big);
    tcase_add_test(tc, gemm_double_rounding_traps);
    tcase_add_test(tc, gemm_fast);
    tcase_add_test(tc, gemm_fast_threads);
    suite_add_tcase(s, tc);
    tc = tcase_create("kernels");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, gemm_kernels_fused);
    tcase_add_test(tc, gemm_kernels_exact);
    tcase_add_test(tc, gemm_kernels_seq_sr);
    tcase_add_test(tc, gemm_kernels_lanes);
    tcase_add_test(tc, gemm_kernels_long_lanes);
    tcase_add_test(tc, gemm_kernels_wide_bins);
    suite_add_tcase(s, tc);
    tc = tcase_create("streams");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, long_dot_own_words);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(accum_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
