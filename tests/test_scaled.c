/*
 * test_scaled.c — block-scaled formats (emu/scaled.h) against the spec and
 * against an independent GNU MPFR computation.
 *
 * The oracle here rebuilds a quantization from the header's words alone:
 * block membership from the documented geometry (row-major over the block
 * grid), amax per block, the scale by the documented rule (floor/ceil of
 * an exact log2 from MPFR quotients, or an MPFR rounding into the scale
 * format), the tensor scale amax / (max_elem * max_scale) rounded into
 * binary32 (nearest, or the amax rule's scale_mode), then every element as
 * the exact quotient x / (s g) rounded by MPFR into the element format
 * with saturation (emu_ref_round: MPFR's own rounding, no code shared with
 * round.c).  Counts (clipped, flushed, inexact) and the squared errors are
 * recomputed from exact MPFR differences.
 *
 * Every path of scaled.c is exercised: power-of-two scales (nearest-even
 * through the lean kernel, the other modes through the array rounding,
 * stochastic ones too), other divisors (nvfp4's e4m3 scales, tensor
 * scales: nearest-even through binary32 with boundary cases redone, the
 * other deterministic modes in binary64, stochastic ones through the
 * choke point), and near_boundaries puts quotients next to every rounding
 * boundary, the cases the fast paths must redo.
 *
 * Then: stochastic rounding (reproducibility and a binomial test), packed
 * storage (round trips and hand-written byte layouts), the scaled matmul
 * against MPFR simulations of the exact, sequential and fused accumulator
 * models, per-tensor scaling recipes, spec parsing and error reports, and
 * the statistics site of emu_t_quantize_scaled.
 */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "internal.h" /* emu_scaled_sr_words: the SR fast path, given words */
#include "ops_internal.h" /* emu_quant_keep */
#include "testutil.h"

/* Mismatches printed per test before the rest are only counted: a broken
 * rule fails thousands of cases, and the first few say everything. */
enum { PRINT_MAX = 12 };

static unsigned long long n_fail, test_base;

/* Starts a test: its own PRINT_MAX reports, and its failure count. */
static unsigned long long begin_test(void)
{
    test_base = n_fail;
    return n_fail;
}

static void report(const char *fmtstr, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

static void report(const char *fmtstr, ...)
{
    if (n_fail++ - test_base < PRINT_MAX) {
        va_list ap;
        va_start(ap, fmtstr);
        fprintf(stderr, "MISMATCH ");
        vfprintf(stderr, fmtstr, ap);
        fprintf(stderr, "\n");
        va_end(ap);
    }
}

/* Counts a failed check without stopping, so that one test reports every
 * kind of mismatch it finds; the test fails at its end (FINISH). */
#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond))                                                         \
            report(__VA_ARGS__);                                             \
    } while (0)

#define FINISH(what, before)                                                 \
    ck_assert_msg(n_fail == (before), "%s: %llu mismatches (first %d "       \
                  "printed above)", (what), n_fail - (before), PRINT_MAX)

/* MPFR-checked cases, per check, printed at the end of each test. */
static void tally(const char *what, unsigned long long n)
{
    fprintf(stderr, "test_scaled: %-44s %llu MPFR-checked cases\n", what, n);
}

/* ---- formats and specs --------------------------------------------------- */

static emu_scaled_format sfmt(const char *spec)
{
    emu_scaled_format sf;
    emu_error err;
    if (emu_scaled_format_parse(&sf, spec, &err)) {
        char msg[700];
        emu_error_format(&err, msg, sizeof msg);
        ck_abort_msg("test setup: scaled format '%s': %s", spec, msg);
    }
    return sf;
}

static void sq_alloc(emu_scaled_tensor *q, const emu_scaled_format *sf,
                     int ndim, const size_t *shape, int axis)
{
    emu_error err;
    int rc = emu_scaled_alloc(q, sf, ndim, shape, axis, &err);
    ck_assert_msg(rc == 0, "alloc: %s (%s)", err.message, err.key);
}

static void spec_of(const emu_scaled_format *sf, char *buf, size_t size)
{
    emu_scaled_format_string(sf, buf, size);
}

/* ---- test data ------------------------------------------------------------ */

/* A binary32 value with 1..24 significant bits (short significands make
 * exact ties of small formats common), exponent in [elo, ehi]. */
static float rand_f32(test_rng *g, int elo, int ehi)
{
    int bits = 1 + (int)test_below(g, 24);
    uint64_t m = (test_next(g) >> 40) | (1u << 23);
    m &= ~((UINT64_C(1) << (24 - bits)) - 1);
    int e = elo + (int)test_below(g, (uint64_t)(ehi - elo + 1));
    double x = ldexp((double)m, e - 23);
    if (test_next(g) & 1)
        x = -x;
    return (float)x; /* below 2^-126 this rounds to a subnormal: still data */
}

/* n values: zeros of both signs, binary32 subnormals, huge values and a
 * band of `span` binades around `center`, so that blocks hold anything
 * from constants to many binades.  Sometimes a run of zeros (all-zero
 * blocks). */
static void gen_data(test_rng *g, float *x, size_t n)
{
    int center = (int)test_below(g, 41) - 20;
    int span = (int)test_below(g, 4) == 0 ? 0 : (int)test_below(g, 40);
    for (size_t i = 0; i < n; i++) {
        uint64_t w = test_below(g, 32);
        if (w == 0)
            x[i] = (test_next(g) & 1) ? -0.0f : 0.0f;
        else if (w == 1)
            x[i] = rand_f32(g, -149, -127);
        else if (w == 2)
            x[i] = rand_f32(g, 100, 127);
        else
            x[i] = rand_f32(g, center - span, center + span);
    }
    if (n > 4 && test_below(g, 6) == 0) {
        size_t a = (size_t)test_below(g, n), len = 1 + (size_t)test_below(g, 40);
        for (size_t i = a; i < n && i < a + len; i++)
            x[i] = 0.0f;
    }
}

/* ---- the documented geometry, computed independently ---------------------- */

typedef struct geo {
    int ndim, axis;
    size_t shape[EMU_SCALED_MAX_DIMS], n;
    size_t b0, b1;
    bool blocked;
} geo;

static geo geo_make(const emu_scaled_format *sf, int ndim, const size_t *shape,
                    int axis)
{
    geo G;
    memset(&G, 0, sizeof G);
    G.ndim = ndim;
    G.axis = axis < 0 ? axis + ndim : axis;
    G.n = 1;
    for (int d = 0; d < ndim; d++) {
        G.shape[d] = shape[d];
        G.n *= shape[d];
    }
    G.blocked = sf->block_scaled;
    G.b0 = sf->block[0];
    G.b1 = sf->block[1];
    return G;
}

static size_t cdiv(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* The block grid: the tensor's shape with each blocked dimension divided
 * (rounded up) by the block's extent along it. */
static void grid_shape(const geo *G, size_t *gs)
{
    for (int d = 0; d < G->ndim; d++)
        gs[d] = G->shape[d];
    if (G->b1 > 1) {
        /* b0 along the axis, b1 across it (a matrix). */
        gs[G->axis] = cdiv(G->shape[G->axis], G->b0);
        gs[1 - G->axis] = cdiv(G->shape[1 - G->axis], G->b1);
    } else {
        gs[G->axis] = cdiv(G->shape[G->axis], G->b0);
    }
}

static size_t geo_nblocks(const geo *G)
{
    if (!G->blocked)
        return 1;
    size_t gs[EMU_SCALED_MAX_DIMS], nb = 1;
    grid_shape(G, gs);
    for (int d = 0; d < G->ndim; d++)
        nb *= gs[d];
    return nb;
}

/* Element i's coordinates, divided by the block extents, numbered
 * row-major over the grid. */
static size_t geo_block_of(const geo *G, size_t i)
{
    if (!G->blocked)
        return 0;
    size_t c[EMU_SCALED_MAX_DIMS], gs[EMU_SCALED_MAX_DIMS];
    for (int d = G->ndim - 1; d >= 0; d--) {
        c[d] = i % G->shape[d];
        i /= G->shape[d];
    }
    c[G->axis] /= G->b0;
    if (G->b1 > 1)
        c[1 - G->axis] /= G->b1;
    grid_shape(G, gs);
    size_t b = 0;
    for (int d = 0; d < G->ndim; d++)
        b = b * gs[d] + c[d];
    return b;
}

/* ---- MPFR pieces ------------------------------------------------------------ */

enum { QPREC = 256, WPREC = 320, BIGPREC = 2400 };

/* a / d as MPFR holds it for a later rounding to at most 64 bits: the
 * quotient truncated to QPREC bits, plus a sticky bit far below it when
 * inexact (rounding to odd in effect), so that no rounding into a small
 * format can tell it from the exact quotient.  out has WPREC bits. */
static void quot_sticky(mpfr_ptr out, double a, double d)
{
    mpfr_t t, eps;
    mpfr_init2(t, QPREC);
    mpfr_init2(eps, 2);
    mpfr_set_d(t, a, MPFR_RNDN);
    int tern = mpfr_div_d(t, t, d, MPFR_RNDZ);
    mpfr_set(out, t, MPFR_RNDN); /* exact: WPREC > QPREC */
    if (tern != 0) {
        mpfr_set_si_2exp(eps, mpfr_signbit(t) ? -1 : 1,
                         mpfr_get_exp(t) - QPREC - 16, MPFR_RNDN);
        mpfr_add(out, out, eps, MPFR_RNDN); /* exact: within WPREC bits */
    }
    mpfr_clears(t, eps, (mpfr_ptr)0);
}

static double mround(const emu_format *f, mpfr_srcptr v, emu_rnd mode,
                     bool saturate, emu_status *st)
{
    emu_rounding r;
    memset(&r, 0, sizeof r);
    r.mode = mode;
    r.saturate = saturate;
    return emu_ref_round(f, v, &r, st);
}

/* x * y * z for doubles whose exact product fits 160 bits, as a double
 * (NaN if it is not one exactly, which the callers then report). */
static double exact_prod3(double x, double y, double z)
{
    mpfr_t p;
    mpfr_init2(p, 160);
    mpfr_set_d(p, x, MPFR_RNDN);
    mpfr_mul_d(p, p, y, MPFR_RNDN);
    mpfr_mul_d(p, p, z, MPFR_RNDN);
    double v = mpfr_get_d(p, MPFR_RNDN);
    bool ok = mpfr_cmp_d(p, v) == 0;
    mpfr_clear(p);
    return ok ? v : NAN;
}

/* The powers of two a scale format holds: 2^lo .. 2^hi (min_value of a
 * format is a power of two; max is not, in general). */
static void pow2_bounds(const emu_format *s, int *lo, int *hi)
{
    int e;
    frexp(s->min_value, &e);
    *lo = e - 1;
    frexp(s->max, &e);
    *hi = e - 1;
}

static const emu_format *f32(void)
{
    return test_format("binary32");
}

/* a / d rounded into binary32 with mode m, a >= 0, d > 0.  The header asks
 * for a positive tensor scale; a quotient below binary32's range (possible
 * only for absurd data) is left to the library's choice of the smallest
 * value. */
static double ref_f32_quot(double a, double d, emu_rnd m)
{
    mpfr_t q;
    mpfr_init2(q, WPREC);
    quot_sticky(q, a, d);
    double g = mround(f32(), q, m, true, NULL);
    mpfr_clear(q);
    return g == 0.0 ? (double)FLT_TRUE_MIN : g;
}

static double ref_rn32_quot(double a, double d)
{
    return ref_f32_quot(a, d, EMU_RNE);
}

/* The rounding of the current tensor scale: the amax rule's scale_mode
 * (the header), nearest-even otherwise. */
static emu_rnd tensor_mode(const emu_scaled_format *sf)
{
    return sf->block_scaled && sf->rule == EMU_SCALE_RULE_AMAX ? sf->scale_mode
                                                              : EMU_RNE;
}

/* ---- the reference quantization -------------------------------------------- */

typedef struct ref_q {
    geo G;
    size_t nblocks;
    double g;
    double *scale;            /* per block (NaN: non-finite block)          */
    double *elem;             /* per element (undefined in NaN blocks)      */
    double *rd, *ru;          /* stochastic modes: the two neighbours      */
    emu_block_stats *bs;      /* per block                                  */
    uint64_t clipped, flushed, inexact, nonfinite;
    uint64_t clamp_lo, clamp_hi; /* scale_clamped must lie in [lo, hi]     */
    double err_sq, ref_sq, err_max;
    uint64_t scale_hist[EMU_HIST_BINS];
} ref_q;

static void ref_free(ref_q *r)
{
    free(r->scale);
    free(r->elem);
    free(r->rd);
    free(r->ru);
    free(r->bs);
    memset(r, 0, sizeof *r);
}

/* The block scale by the documented rule; cl_lo and cl_hi: whether this
 * block certainly / possibly counts as scale_clamped. */
static double ref_block_scale(const emu_scaled_format *sf, double a, double g,
                              bool *cl_lo, bool *cl_hi)
{
    const emu_format *e = &sf->elem, *s = &sf->scale;
    *cl_lo = *cl_hi = false;
    int lo, hi;
    pow2_bounds(s, &lo, &hi);
    if (sf->rule == EMU_SCALE_RULE_AMAX) {
        if (a == 0.0)
            return s->min_value;
        mpfr_t q;
        mpfr_init2(q, WPREC);
        quot_sticky(q, a, e->max * g); /* e->max * g exact: <= 48 bits */
        double v = mround(s, q, sf->scale_mode, true, NULL);
        /* "Ideal scale outside the scale format": certainly when the
         * quotient is at least twice the largest scale or rounds to 0;
         * possibly when it is merely beyond max or below min_value. */
        *cl_lo = v == 0.0 || mpfr_cmp_d(q, 2.0 * s->max) >= 0;
        *cl_hi = *cl_lo || mpfr_cmp_d(q, s->max) > 0 ||
                 mpfr_cmp_d(q, s->min_value) < 0;
        mpfr_clear(q);
        return v == 0.0 ? s->min_value : v;
    }
    if (a == 0.0)
        return ldexp(1.0, lo); /* documented: the smallest scale */
    mpfr_t t;
    mpfr_init2(t, QPREC);
    mpfr_set_d(t, a, MPFR_RNDN);
    long k;
    if (sf->rule == EMU_SCALE_RULE_FLOOR) {
        /* floor(log2(a / g)): truncation cannot cross a power of two. */
        mpfr_div_d(t, t, g, MPFR_RNDZ);
        k = (long)mpfr_get_exp(t) - 1 - e->emax;
    } else {
        /* ceil(log2(a / (max g))): rounding up cannot cross one either. */
        mpfr_div_d(t, t, e->max * g, MPFR_RNDU);
        long ex = (long)mpfr_get_exp(t);
        k = mpfr_cmp_si_2exp(t, 1, (mpfr_exp_t)(ex - 1)) == 0 ? ex - 1 : ex;
    }
    mpfr_clear(t);
    if (k < lo || k > hi) {
        *cl_lo = *cl_hi = true;
        k = k < lo ? lo : hi;
    }
    return ldexp(1.0, (int)k);
}

static int hist_bin_of_scale(double s)
{
    int e;
    frexp(s, &e);
    return EMU_HIST_FIRST + (e - 1 - EMU_HIST_EMIN);
}

/* The whole quantization of x by the header's definition. */
static void ref_quantize(ref_q *r, const emu_scaled_format *sf, int ndim,
                         const size_t *shape, int axis, const float *x,
                         const emu_quant_opts *o)
{
    memset(r, 0, sizeof *r);
    r->G = geo_make(sf, ndim, shape, axis);
    const size_t n = r->G.n, nb = geo_nblocks(&r->G);
    r->nblocks = nb;
    r->scale = calloc(nb, sizeof *r->scale);
    r->bs = calloc(nb, sizeof *r->bs);
    r->elem = calloc(n, sizeof *r->elem);
    r->rd = calloc(n, sizeof *r->rd);
    r->ru = calloc(n, sizeof *r->ru);
    ck_assert(r->scale && r->bs && r->elem && r->rd && r->ru);

    /* amax per block, NaN / inf marks */
    bool *bad = calloc(nb, sizeof *bad), *nanb = calloc(nb, sizeof *nanb);
    double *amax = calloc(nb, sizeof *amax), all = 0.0;
    ck_assert(bad && nanb && amax);
    for (size_t i = 0; i < n; i++) {
        size_t b = geo_block_of(&r->G, i);
        double a = fabs((double)x[i]);
        if (isnan(a))
            nanb[b] = true;
        if (!isfinite(a))
            bad[b] = true;
        else if (a > amax[b])
            amax[b] = a;
        if (isfinite(a) && a > all)
            all = a;
    }

    /* the tensor scale */
    r->g = 1.0;
    if (sf->tensor_scale) {
        if (o->tensor_scale > 0.0)
            r->g = o->tensor_scale;
        else if (all > 0.0)
            r->g = ref_f32_quot(all, sf->elem.max *
                                (sf->block_scaled ? sf->scale.max : 1.0),
                                tensor_mode(sf));
    }

    /* block scales */
    for (size_t b = 0; b < nb; b++) {
        r->bs[b].amax = nanb[b] ? NAN : bad[b] ? INFINITY : (float)amax[b];
        if (bad[b] && sf->block_scaled) {
            r->scale[b] = NAN;
            r->nonfinite++;
            continue;
        }
        bool lo = false, hi = false;
        r->scale[b] = sf->block_scaled
                          ? ref_block_scale(sf, amax[b], r->g, &lo, &hi) : 1.0;
        r->clamp_lo += lo;
        r->clamp_hi += hi;
        if (sf->block_scaled)
            r->scale_hist[hist_bin_of_scale(r->scale[b])]++;
    }

    /* elements: the exact quotient rounded once, saturating */
    mpfr_t q;
    mpfr_init2(q, WPREC);
    const emu_format *ef = &sf->elem;
    for (size_t i = 0; i < n; i++) {
        size_t b = geo_block_of(&r->G, i);
        if (isnan(r->scale[b]))
            continue;
        quot_sticky(q, x[i], r->scale[b] * r->g); /* s g exact: <= 48 bits */
        r->elem[i] = emu_rnd_is_stochastic(o->mode)
                         ? NAN /* checked against rd and ru instead */
                         : mround(ef, q, o->mode, true, NULL);
        r->rd[i] = mround(ef, q, EMU_RD, true, NULL);
        r->ru[i] = mround(ef, q, EMU_RU, true, NULL);
        if (sf->int_elem) {
            /* two's complement integers have no -0 (the header) */
            r->elem[i] += 0.0;
            r->rd[i] += 0.0;
            r->ru[i] += 0.0;
        }
    }
    mpfr_clear(q);
    free(bad);
    free(nanb);
    free(amax);
}

/* The statistics of a quantization whose elements are e (the oracle's for
 * deterministic modes; the library's, once checked to be one of the two
 * neighbours, for stochastic ones), from exact MPFR differences. */
static void ref_stats(ref_q *r, const emu_scaled_format *sf, const float *x,
                      const double *e)
{
    const size_t n = r->G.n, nb = r->nblocks;
    mpfr_t q, v, dif, t, tot_e, tot_r;
    mpfr_t *be = malloc(nb * sizeof *be), *br = malloc(nb * sizeof *br);
    ck_assert(be && br);
    mpfr_init2(q, WPREC);
    mpfr_init2(v, 200);
    mpfr_init2(dif, 700);
    mpfr_inits2(BIGPREC, t, tot_e, tot_r, (mpfr_ptr)0);
    mpfr_set_zero(tot_e, 1);
    mpfr_set_zero(tot_r, 1);
    for (size_t b = 0; b < nb; b++) {
        mpfr_inits2(BIGPREC, be[b], br[b], (mpfr_ptr)0);
        mpfr_set_zero(be[b], 1);
        mpfr_set_zero(br[b], 1);
    }
    r->clipped = r->flushed = r->inexact = 0;
    r->err_max = 0.0;
    for (size_t i = 0; i < n; i++) {
        size_t b = geo_block_of(&r->G, i);
        const double xi = x[i], s = r->scale[b];
        if (isnan(s) || !isfinite(xi))
            continue;
        quot_sticky(q, xi, s * r->g);
        mpfr_set_d(t, sf->elem.max, MPFR_RNDN);
        bool clip = mpfr_cmpabs(q, t) > 0;
        bool flush = xi != 0.0 && e[i] == 0.0;
        /* v = e s g exactly (<= 72 bits); dif = v - x exactly */
        mpfr_set_d(v, e[i], MPFR_RNDN);
        mpfr_mul_d(v, v, s, MPFR_RNDN);
        mpfr_mul_d(v, v, r->g, MPFR_RNDN);
        mpfr_sub_d(dif, v, xi, MPFR_RNDN);
        bool inex = !mpfr_zero_p(dif);
        r->bs[b].clipped += clip;
        r->bs[b].flushed += flush;
        r->bs[b].inexact += inex;
        r->clipped += clip;
        r->flushed += flush;
        r->inexact += inex;
        mpfr_sqr(t, dif, MPFR_RNDN);
        mpfr_add(be[b], be[b], t, MPFR_RNDN);
        mpfr_set_d(t, xi, MPFR_RNDN);
        mpfr_sqr(t, t, MPFR_RNDN);
        mpfr_add(br[b], br[b], t, MPFR_RNDN);
        if (xi != 0.0) {
            mpfr_div_d(t, dif, xi, MPFR_RNDN);
            double rel = fabs(mpfr_get_d(t, MPFR_RNDN));
            if (rel > r->err_max)
                r->err_max = rel;
        }
    }
    for (size_t b = 0; b < nb; b++) {
        r->bs[b].err_sq = mpfr_get_d(be[b], MPFR_RNDN);
        r->bs[b].ref_sq = mpfr_get_d(br[b], MPFR_RNDN);
        mpfr_add(tot_e, tot_e, be[b], MPFR_RNDN);
        mpfr_add(tot_r, tot_r, br[b], MPFR_RNDN);
        mpfr_clears(be[b], br[b], (mpfr_ptr)0);
    }
    r->err_sq = mpfr_get_d(tot_e, MPFR_RNDN);
    r->ref_sq = mpfr_get_d(tot_r, MPFR_RNDN);
    mpfr_clears(q, v, dif, t, tot_e, tot_r, (mpfr_ptr)0);
    free(be);
    free(br);
}

/* ---- the library against the reference ------------------------------------ */

static unsigned long long n_elem_checked, n_scale_checked, n_stat_checked;

static bool close_rel(double got, double want, double tol)
{
    if (want == 0.0)
        return got == 0.0;
    return fabs(got - want) <= tol * fabs(want);
}

/* The tolerance for err_sq, ref_sq and err_max: the library rounds each
 * difference, its square and every partial sum (at most n + 3 roundings of
 * non-negative terms, relative error (n + 3) 2^-53 < 1e-12 for the
 * n < 9000 elements of any tensor here); MPFR sums exactly. */
static const double STAT_TOL = 1e-12;

/* Quantizes x into a tensor of format sf (shape, axis) with options o and
 * compares everything with the oracle.  desc describes the case. */
static void check_quantization(const emu_scaled_format *sf, const char *desc,
                               int ndim, const size_t *shape, int axis,
                               const float *x, const emu_quant_opts *o)
{
    emu_scaled_tensor q;
    sq_alloc(&q, sf, ndim, shape, axis);
    emu_quant_counts c;
    memset(&c, 0, sizeof c);
    emu_block_stats *bl = calloc(q.nblocks, sizeof *bl);
    ck_assert(bl);
    emu_error err;
    int rc = emu_scaled_quantize(&q, x, o, &c, bl, &err);
    CHECK(rc == 0, "%s: quantize failed: %s: %s", desc, err.key, err.message);
    if (rc) {
        free(bl);
        emu_scaled_free(&q);
        return;
    }
    /* Without statistics the quantizer takes other paths (NVFP4's scales
     * sixteen to a run): the same scales and elements. */
    {
        emu_scaled_tensor q0;
        sq_alloc(&q0, sf, ndim, shape, axis);
        int rc0 = emu_scaled_quantize(&q0, x, o, NULL, NULL, &err);
        CHECK(rc0 == 0, "%s: quantize without statistics failed: %s", desc,
              err.message);
        for (size_t b = 0; rc0 == 0 && b < q.nblocks; b++)
            CHECK(test_same(q0.scale[b], q.scale[b]), "%s: block %zu: scale "
                  "%a without statistics, %a with", desc, b,
                  (double)q0.scale[b], (double)q.scale[b]);
        for (size_t i = 0; rc0 == 0 && i < q.n; i++)
            CHECK(test_same(q0.elem[i], q.elem[i]), "%s: element %zu: %a "
                  "without statistics, %a with", desc, i, (double)q0.elem[i],
                  (double)q.elem[i]);
        emu_scaled_free(&q0);
    }
    ref_q r;
    ref_quantize(&r, sf, ndim, shape, axis, x, o);
    const bool sr = emu_rnd_is_stochastic(o->mode);
    CHECK(q.nblocks == r.nblocks, "%s: %zu blocks, expected %zu", desc,
          q.nblocks, r.nblocks);
    const size_t nb = q.nblocks < r.nblocks ? q.nblocks : r.nblocks;
    CHECK(test_same(q.tensor_scale, r.g), "%s: tensor scale %a, expected "
          "(MPFR) %a", desc, (double)q.tensor_scale, r.g);
    for (size_t b = 0; b < nb; b++) {
        n_scale_checked++;
        CHECK(test_same(q.scale[b], r.scale[b]), "%s: block %zu (amax %a): "
              "scale %a, expected (MPFR) %a, g %a", desc, b,
              (double)r.bs[b].amax, (double)q.scale[b], r.scale[b], r.g);
    }
    double *e = malloc(q.n * sizeof *e);
    ck_assert(e);
    for (size_t i = 0; i < q.n; i++) {
        size_t b = geo_block_of(&r.G, i);
        CHECK(emu_scaled_block_of(&q, i) == b, "%s: element %zu in block %zu, "
              "the geometry says %zu", desc, i, emu_scaled_block_of(&q, i), b);
        e[i] = q.elem[i];
        if (isnan(r.scale[b])) {
            CHECK(isnan(emu_scaled_value(&q, i)), "%s: element %zu of "
                  "non-finite block %zu decodes as %a, not NaN", desc, i, b,
                  emu_scaled_value(&q, i));
            continue;
        }
        n_elem_checked++;
        if (!sr) {
            CHECK(test_same(q.elem[i], r.elem[i]), "%s: element %zu x=%a "
                  "(block %zu, scale %a, g %a): got %a, expected (MPFR) %a",
                  desc, i, (double)x[i], b, r.scale[b], r.g,
                  (double)q.elem[i], r.elem[i]);
            e[i] = r.elem[i];
        } else {
            CHECK(test_same(q.elem[i], r.rd[i]) || test_same(q.elem[i], r.ru[i]),
                  "%s: element %zu x=%a (scale %a, g %a): stochastic result %a "
                  "is neither neighbour %a nor %a (MPFR)", desc, i,
                  (double)x[i], r.scale[b], r.g, (double)q.elem[i], r.rd[i],
                  r.ru[i]);
        }
        double v = exact_prod3(e[i], r.scale[b], r.g);
        CHECK(test_same(emu_scaled_value(&q, i), v), "%s: value of element "
              "%zu = %a, expected e s g = %a * %a * %a = %a", desc, i,
              emu_scaled_value(&q, i), e[i], r.scale[b], r.g, v);
    }
    ref_stats(&r, sf, x, e);
    n_stat_checked++;
    CHECK(c.n == q.n && c.blocks == r.nblocks, "%s: counts n %" PRIu64
          " blocks %" PRIu64 ", expected %zu, %zu", desc, c.n, c.blocks, q.n,
          r.nblocks);
    CHECK(c.clipped == r.clipped, "%s: clipped %" PRIu64 ", expected (MPFR) "
          "%" PRIu64, desc, c.clipped, r.clipped);
    CHECK(c.flushed == r.flushed, "%s: flushed %" PRIu64 ", expected %" PRIu64,
          desc, c.flushed, r.flushed);
    CHECK(c.inexact == r.inexact, "%s: inexact %" PRIu64 ", expected (MPFR) "
          "%" PRIu64, desc, c.inexact, r.inexact);
    CHECK(c.nonfinite_blocks == r.nonfinite, "%s: nonfinite_blocks %" PRIu64
          ", expected %" PRIu64, desc, c.nonfinite_blocks, r.nonfinite);
    CHECK(c.scale_clamped >= r.clamp_lo && c.scale_clamped <= r.clamp_hi,
          "%s: scale_clamped %" PRIu64 ", expected %" PRIu64 "..%" PRIu64,
          desc, c.scale_clamped, r.clamp_lo, r.clamp_hi);
    CHECK(close_rel(c.err_sq, r.err_sq, STAT_TOL), "%s: err_sq %a, MPFR %a",
          desc, c.err_sq, r.err_sq);
    CHECK(close_rel(c.ref_sq, r.ref_sq, STAT_TOL), "%s: ref_sq %a, MPFR %a",
          desc, c.ref_sq, r.ref_sq);
    CHECK(close_rel(c.err_max, r.err_max, STAT_TOL), "%s: err_max %a, MPFR %a",
          desc, c.err_max, r.err_max);
    if (sf->block_scaled)
        CHECK(!memcmp(c.scale_hist, r.scale_hist, sizeof c.scale_hist),
              "%s: scale histogram differs from the scales' log2", desc);
    for (size_t b = 0; b < nb; b++) {
        const emu_block_stats *g = &bl[b], *w = &r.bs[b];
        CHECK(test_same(g->amax, w->amax), "%s: block %zu amax %a, expected %a",
              desc, b, (double)g->amax, (double)w->amax);
        if (isnan(r.scale[b]))
            continue; /* the header defines the sums over finite blocks */
        CHECK(g->clipped == w->clipped && g->flushed == w->flushed &&
              g->inexact == w->inexact, "%s: block %zu clipped/flushed/inexact"
              " %u/%u/%u, expected (MPFR) %u/%u/%u", desc, b, g->clipped,
              g->flushed, g->inexact, w->clipped, w->flushed, w->inexact);
        CHECK(close_rel(g->err_sq, w->err_sq, STAT_TOL) &&
              close_rel(g->ref_sq, w->ref_sq, STAT_TOL), "%s: block %zu "
              "err_sq %a ref_sq %a, MPFR %a %a", desc, b, g->err_sq,
              g->ref_sq, w->err_sq, w->ref_sq);
    }
    /* dequantize: e s (and g) as binary32, when they are binary32 values */
    float *dq = malloc(q.n * sizeof *dq);
    ck_assert(dq);
    for (int with_g = 0; with_g < 2; with_g++) {
        bool all_f32 = true;
        for (size_t i = 0; i < q.n; i++) {
            double s = r.scale[geo_block_of(&r.G, i)];
            double v = isnan(s) ? NAN
                                : exact_prod3(e[i], s, with_g ? r.g : 1.0);
            all_f32 &= isnan(s) || (float)v == v;
        }
        rc = emu_scaled_dequantize(&q, dq, with_g, &err);
        CHECK((rc == 0) == all_f32, "%s: dequantize(with g %d) returned %d, "
              "values %s binary32", desc, with_g, rc,
              all_f32 ? "all" : "not all");
        if (rc == 0 && all_f32)
            for (size_t i = 0; i < q.n; i++) {
                double s = r.scale[geo_block_of(&r.G, i)];
                double v = isnan(s) ? NAN
                                    : exact_prod3(e[i], s, with_g ? r.g : 1.0);
                CHECK(test_same(dq[i], v), "%s: dequantize(with g %d) "
                      "element %zu = %a, expected %a", desc, with_g, i,
                      (double)dq[i], v);
            }
        if (rc != 0)
            CHECK(strstr(err.message, "element ") != NULL, "%s: dequantize "
                  "error does not name the element: %s", desc, err.message);
    }
    free(dq);
    free(e);
    free(bl);
    ref_free(&r);
    emu_scaled_free(&q);
}

static void describe(char *buf, size_t size, const emu_scaled_format *sf,
                     const emu_quant_opts *o, int ndim, const size_t *shape,
                     int axis)
{
    char spec[300];
    spec_of(sf, spec, sizeof spec);
    int k = snprintf(buf, size, "[%s] mode %s", spec, emu_rnd_name(o->mode));
    if (o->mode == EMU_RS_BITS)
        k += snprintf(buf + k, size - (size_t)k, "%u", o->sr_bits);
    k += snprintf(buf + k, size - (size_t)k, " seed %" PRIu64 " g_opt %a shape (",
                  o->seed, o->tensor_scale);
    for (int d = 0; d < ndim; d++)
        k += snprintf(buf + k, size - (size_t)k, "%s%zu", d ? ", " : "",
                      shape[d]);
    snprintf(buf + k, size - (size_t)k, ") axis %d", axis);
}

/* ---- 2. the MPFR oracle for every preset, custom formats and geometry ---- */

static const char *const presets[] = { "mxfp8", "mxfp8-e5m2", "mxfp6-e2m3",
                                       "mxfp6-e3m2", "mxfp4", "mxint8", "nvfp4" };
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

/* Custom formats: every element format with each scale format, with and
 * without a tensor scale, the three rules in turn. */
static int custom_specs(char specs[][128], int max)
{
    static const char *const elems[] = { "e5m2", "e3m2", "e2m3", "binary16" };
    static const char *const scales[] = { "e8m0", "e4m3" };
    static const char *const rules[] = { "floor", "ceil", "amax" };
    static const char *const smodes[] = { "rne", "ru", "rz", "rd" };
    int n = 0;
    for (int e = 0; e < 4; e++)
        for (int s = 0; s < 2; s++)
            for (int t = 0; t < 2; t++) {
                int k = e * 4 + s * 2 + t;
                ck_assert(n < max);
                snprintf(specs[n++], 128, "elem=%s,scale=%s,tensor=%s,rule=%s,"
                         "scale_mode=%s", elems[e], scales[s], t ? "yes" : "no",
                         rules[k % 3], smodes[(k / 3) % 4]);
            }
    /* bfloat16 elements reach below 2^-124: the fast path must step aside */
    snprintf(specs[n++], 128, "elem=bfloat16,scale=e8m0");
    /* per-tensor formats: no block scales */
    snprintf(specs[n++], 128, "elem=e4m3,scale=none,tensor=yes");
    snprintf(specs[n++], 128, "elem=e2m1,scale=none,tensor=yes");
    return n;
}

typedef struct geom_case {
    const char *block;   /* override, or NULL: the format's own */
    int ndim, axis;
    size_t max[3];       /* each dimension random in 1..max       */
} geom_case;

static const geom_case geoms[] = {
    { NULL, 1, 0, { 150, 0, 0 } },
    { "1", 1, 0, { 60, 0, 0 } },
    { "7", 2, 1, { 6, 30, 0 } },
    { "7", 3, 1, { 3, 17, 5 } },
    { "4x3", 2, 0, { 11, 11, 0 } },
    { "4x3", 2, -1, { 11, 11, 0 } },
    { NULL, 2, 0, { 40, 5, 0 } },
};
enum { N_GEOMS = sizeof geoms / sizeof geoms[0] };

static void run_oracle(const char *base, test_rng *g, int reps)
{
    emu_scaled_format sf0 = sfmt(base);
    for (int gi = 0; gi < N_GEOMS; gi++) {
        const geom_case *gc = &geoms[gi];
        if (!sf0.block_scaled && gc->block)
            continue; /* a per-tensor format has no blocks to reshape */
        char spec[256];
        if (gc->block)
            snprintf(spec, sizeof spec, "%s,block=%s", base, gc->block);
        else
            snprintf(spec, sizeof spec, "%s", base);
        emu_scaled_format sf = sfmt(spec);
        for (int m = 0; m < EMU_RND_COUNT; m++)
            for (int rep = 0; rep < reps; rep++) {
                size_t shape[3];
                size_t n = 1;
                for (int d = 0; d < gc->ndim; d++) {
                    shape[d] = 1 + (size_t)test_below(g, gc->max[d]);
                    n *= shape[d];
                }
                float *x = malloc(n * sizeof *x);
                ck_assert(x);
                gen_data(g, x, n);
                emu_quant_opts o;
                memset(&o, 0, sizeof o);
                o.mode = (emu_rnd)m;
                o.sr_bits = 1 + (unsigned)test_below(g, 12);
                o.seed = test_next(g);
                o.stream = test_below(g, 100);
                /* Tensor scales: current scaling, or a given (delayed)
                 * value that is not a power of two. */
                if (sf.tensor_scale && (rep + m) % 2)
                    o.tensor_scale = (double)(float)ldexp(
                        1.0 + (double)test_below(g, 255) / 256.0,
                        (int)test_below(g, 40) - 20);
                char desc[600];
                describe(desc, sizeof desc, &sf, &o, gc->ndim, shape, gc->axis);
                check_quantization(&sf, desc, gc->ndim, shape, gc->axis, x, &o);
                free(x);
            }
    }
}

START_TEST(oracle_presets)
{
    unsigned long long before = begin_test(), e0 = n_elem_checked, s0 = n_scale_checked;
    test_rng g = test_rng_make(0x5ca1ed);
    int reps = (int)test_scaled(40, 1);
    for (int p = 0; p < N_PRESETS; p++)
        run_oracle(presets[p], &g, reps);
    tally("quantize presets: elements", n_elem_checked - e0);
    tally("quantize presets: block scales", n_scale_checked - s0);
    FINISH("presets against MPFR", before);
}
END_TEST

START_TEST(oracle_custom)
{
    unsigned long long before = begin_test(), e0 = n_elem_checked, s0 = n_scale_checked;
    test_rng g = test_rng_make(0xc057);
    char specs[32][128];
    int ns = custom_specs(specs, 32);
    int reps = (int)test_scaled(16, 1);
    for (int s = 0; s < ns; s++)
        run_oracle(specs[s], &g, reps);
    tally("quantize custom: elements", n_elem_checked - e0);
    tally("quantize custom: block scales", n_scale_checked - s0);
    tally("quantize all: count/err_sq sets", n_stat_checked);
    FINISH("custom formats against MPFR", before);
}
END_TEST

/* ---- 1. the spec's rules on hand-computed examples ------------------------- */

/* Quantizes x (a vector of n, blocked along it) into a fresh tensor. */
static void quant_vec(emu_scaled_tensor *q, const emu_scaled_format *sf,
                      const float *x, size_t n, emu_rnd mode, double g,
                      emu_quant_counts *c, emu_block_stats *bl)
{
    sq_alloc(q, sf, 1, &n, 0);
    emu_quant_opts o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.sr_bits = 8;
    o.tensor_scale = g;
    emu_error err;
    if (c)
        memset(c, 0, sizeof *c);
    int rc = emu_scaled_quantize(q, x, &o, c, bl, &err);
    ck_assert_msg(rc == 0, "quantize %s: %s", sf->name, err.message);
}

START_TEST(spec_examples)
{
    unsigned long long before = begin_test();
    emu_scaled_tensor q;
    emu_quant_counts c;
    float x[64];
    for (emu_rnd m = EMU_RNE; m <= EMU_RU; m += 3) { /* fast and slow path */
        /* MXFP8 E4M3: amax 1.0 -> 2^(0 - 8). */
        emu_scaled_format sf = sfmt("mxfp8");
        memset(x, 0, sizeof x);
        x[0] = 1.0f;
        x[1] = -0.5f;
        x[33] = 0x1p-140f; /* tiny block: 2^(-140-8) clamps to 2^-127 */
        quant_vec(&q, &sf, x, 64, m, 0, &c, NULL);
        CHECK(q.scale[0] == 0x1p-8f && q.elem[0] == 256.0f &&
              q.elem[1] == -128.0f, "mxfp8 %s, amax 1.0: scale %a (want 2^-8), "
              "elements %a %a (want 256, -128)", emu_rnd_name(m),
              (double)q.scale[0], (double)q.elem[0], (double)q.elem[1]);
        CHECK(q.scale[1] == 0x1p-127f, "mxfp8 %s: tiny block amax 2^-140: "
              "scale %a, want 2^-127", emu_rnd_name(m), (double)q.scale[1]);
        /* 2^-140 / 2^-127 = 2^-13, below e4m3's 2^-9: flushed (ru: up). */
        CHECK(q.elem[33] == (m == EMU_RU ? 0x1p-9f : 0.0f) &&
              c.flushed == (m == EMU_RU ? 0u : 1u) && c.scale_clamped == 1,
              "mxfp8 %s: x=0x1p-140: element %a, flushed %" PRIu64
              ", scale_clamped %" PRIu64 " (want 1)", emu_rnd_name(m),
              (double)q.elem[33], c.flushed, c.scale_clamped);
        emu_scaled_free(&q);
        /* an all-zero block: the smallest E8M0 scale */
        memset(x, 0, sizeof x);
        quant_vec(&q, &sf, x, 32, m, 0, &c, NULL);
        CHECK(q.scale[0] == 0x1p-127f && q.elem[0] == 0.0f, "mxfp8 zero block:"
              " scale %a, want 2^-127", (double)q.scale[0]);
        emu_scaled_free(&q);

        /* MXFP4: amax 7.5 -> 2^(2 - 2) = 1; the top binade above 6 clips. */
        sf = sfmt("mxfp4");
        static const float v4[] = { 7.5f, 6.5f, 5.5f, -7.0f, 1.0f, 0.25f };
        memset(x, 0, sizeof x);
        memcpy(x, v4, sizeof v4);
        quant_vec(&q, &sf, x, 32, m, 0, &c, NULL);
        const float w_rne[] = { 6, 6, 6, -6, 1, 0 }, w_ru[] = { 6, 6, 6, -6, 1, 0.5f };
        const float *w = m == EMU_RU ? w_ru : w_rne;
        for (int i = 0; i < 6; i++)
            CHECK(test_same(q.elem[i], w[i]), "mxfp4 %s: x=%a -> %a, want %a "
                  "(scale %a)", emu_rnd_name(m), (double)x[i],
                  (double)q.elem[i], (double)w[i], (double)q.scale[0]);
        CHECK(q.scale[0] == 1.0f && c.clipped == 3 &&
              c.flushed == (m == EMU_RU ? 0u : 1u), "mxfp4 %s: scale %a (want "
              "1), clipped %" PRIu64 " (want 3: 7.5, 6.5, -7), flushed %" PRIu64,
              emu_rnd_name(m), (double)q.scale[0], c.clipped, c.flushed);
        emu_scaled_free(&q);

        /* MXFP4 with amax 2^-149 (a binary32 subnormal): 2^-151 clamps. */
        memset(x, 0, sizeof x);
        x[5] = -0x1p-149f;
        quant_vec(&q, &sf, x, 32, m, 0, &c, NULL);
        CHECK(q.scale[0] == 0x1p-127f && c.scale_clamped == 1,
              "mxfp4: amax 2^-149: scale %a, clamped %" PRIu64,
              (double)q.scale[0], c.scale_clamped);
        emu_scaled_free(&q);

        /* MXINT8: amax 127/64 -> scale 1, elements k/64. */
        sf = sfmt("mxint8");
        memset(x, 0, sizeof x);
        x[0] = 127.0f / 64;
        x[1] = -1.0f / 64;
        x[2] = 0.3f;
        quant_vec(&q, &sf, x, 32, m, 0, &c, NULL);
        CHECK(q.scale[0] == 1.0f && q.elem[0] == 127.0f / 64 &&
              q.elem[1] == -1.0f / 64 &&
              q.elem[2] == (m == EMU_RU ? 20.0f : 19.0f) / 64,
              "mxint8 %s: scale %a, elements %a %a %a (want 1, 127/64, -1/64, "
              "%s/64)", emu_rnd_name(m), (double)q.scale[0], (double)q.elem[0],
              (double)q.elem[1], (double)q.elem[2], m == EMU_RU ? "20" : "19");
        emu_scaled_free(&q);

        /* NVFP4: g = RN32(2688 / (6 * 448)) = 1; block scales RN_e4m3(amax_b
         * / 6): 448 and 1. */
        sf = sfmt("nvfp4");
        memset(x, 0, sizeof x);
        x[0] = 2688.0f;
        x[1] = 1000.0f;
        x[16] = 6.0f;
        x[17] = 3.0f;
        x[18] = -1.5f;
        quant_vec(&q, &sf, x, 32, m, 0, &c, NULL);
        CHECK(q.tensor_scale == 1.0f && q.scale[0] == 448.0f &&
              q.scale[1] == 1.0f && q.elem[0] == 6.0f && q.elem[16] == 6.0f &&
              q.elem[17] == 3.0f && q.elem[18] == -1.5f &&
              q.elem[1] == (m == EMU_RU ? 3.0f : 2.0f),
              "nvfp4 %s: g %a (want 1), scales %a %a (want 448, 1), elements "
              "%a %a %a %a %a", emu_rnd_name(m), (double)q.tensor_scale,
              (double)q.scale[0], (double)q.scale[1], (double)q.elem[0],
              (double)q.elem[1], (double)q.elem[16], (double)q.elem[17],
              (double)q.elem[18]);
        emu_scaled_free(&q);
        /* NVFP4 with a tensor scale that is not a power of two: g and the
         * block scale from MPFR quotients. */
        x[0] = 1000.0f;
        x[16] = 0.3f;
        x[17] = x[18] = 0.0f;
        quant_vec(&q, &sf, x, 32, m, 0, &c, NULL);
        double g = ref_rn32_quot(1000.0, 2688.0);
        mpfr_t t;
        mpfr_init2(t, WPREC);
        quot_sticky(t, (double)0.3f, 6.0 * g);
        double s1 = mround(test_format("e4m3"), t, EMU_RNE, true, NULL);
        mpfr_clear(t);
        CHECK(q.tensor_scale == g && q.scale[1] == s1, "nvfp4: g %a (MPFR %a), "
              "scale of block amax 0.3: %a (MPFR %a)", (double)q.tensor_scale,
              g, (double)q.scale[1], s1);
        emu_scaled_free(&q);
    }
    FINISH("spec examples", before);
}
END_TEST

/* MX presets have power-of-two scales; the ceil rule (and the amax rule
 * rounding up) never clips; MXINT8 elements are k/64, |k| <= 127. */
START_TEST(spec_invariants)
{
    unsigned long long before = begin_test(), cases = 0;
    test_rng g = test_rng_make(0x1a7);
    static const char *const noclip[] = {
        "mxfp8,rule=ceil", "mxfp4,rule=ceil", "mxfp6-e3m2,rule=ceil",
        "elem=e2m3,scale=e8m0,rule=ceil,tensor=yes",
        "elem=e5m2,scale=e4m3,rule=ceil", "nvfp4,scale_mode=ru",
    };
    const int reps = (int)test_scaled(40, 2);
    for (int rep = 0; rep < reps; rep++) {
        size_t n = 1 + (size_t)test_below(&g, 300);
        float *x = malloc(n * sizeof *x);
        ck_assert(x);
        gen_data(&g, x, n);
        emu_rnd m = (emu_rnd)(rep % EMU_RND_COUNT);
        for (int p = 0; p < N_PRESETS; p++) {
            emu_scaled_format sf = sfmt(presets[p]);
            emu_scaled_tensor q;
            quant_vec(&q, &sf, x, n, m, 0, NULL, NULL);
            for (size_t b = 0; b < q.nblocks && sf.rule != EMU_SCALE_RULE_AMAX; b++) {
                int e;
                CHECK(frexpf(q.scale[b], &e) == 0.5f, "%s %s: scale %a of "
                      "block %zu is not a power of two", presets[p],
                      emu_rnd_name(m), (double)q.scale[b], b);
            }
            if (sf.int_elem)
                for (size_t i = 0; i < n; i++) {
                    double k = (double)q.elem[i] * 64;
                    CHECK(k == floor(k) && fabs(k) <= 127, "mxint8 %s: x=%a "
                          "-> element %a = %g/64", emu_rnd_name(m),
                          (double)x[i], (double)q.elem[i], k);
                }
            emu_scaled_free(&q);
        }
        for (size_t s = 0; s < sizeof noclip / sizeof noclip[0]; s++) {
            emu_scaled_format sf = sfmt(noclip[s]);
            emu_scaled_tensor q;
            emu_quant_counts c;
            quant_vec(&q, &sf, x, n, m, 0, &c, NULL);
            cases++;
            size_t worst = 0;
            for (size_t i = 0; i < n; i++) /* the element whose |x/(s g)| is largest */
                if (fabs(q.elem[i]) > fabs(q.elem[worst]))
                    worst = i;
            /* A scale clamped at the top of its format must clip (e4m3
             * scales stop at 2^8).  nvfp4 with ru reaches its 448 through
             * the rounding of g alone: nvfp4_ru_current_clips_nothing shows
             * that case separately. */
            if (c.scale_clamped != 0) {
                emu_scaled_free(&q);
                continue;
            }
            CHECK(c.clipped == 0, "%s %s n=%zu: %" PRIu64 " clipped (the rule "
                  "clips nothing); largest element %zu x=%a -> %a, scale %a, "
                  "g %a", noclip[s], emu_rnd_name(m), n, c.clipped, worst,
                  (double)x[worst], (double)q.elem[worst],
                  (double)q.scale[emu_scaled_block_of(&q, worst)],
                  (double)q.tensor_scale);
            emu_scaled_free(&q);
        }
        free(x);
    }
    tally("no-clip rules (quantizations)", cases);
    FINISH("spec invariants", before);
}
END_TEST

/* A NaN or inf marks its block with a NaN scale; the other blocks are what
 * they would be without it.  A scale format without NaN refuses. */
START_TEST(nonfinite_blocks)
{
    unsigned long long before = begin_test();
    static const char *const specs[] = { "mxfp8", "mxfp4", "nvfp4",
                                         "elem=e3m2,scale=e4m3,rule=amax,block=8",
                                         "mxint8,block=4x3" };
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (int m = 0; m < 4; m++) {
            emu_rnd mode = m == 0 ? EMU_RNE : m == 1 ? EMU_RZ : m == 2 ? EMU_RU
                                                                 : EMU_RS;
            emu_scaled_format sf = sfmt(specs[s]);
            const bool tile = sf.block[1] > 1;
            size_t shape[2] = { tile ? 10 : 100, tile ? 10 : 1 };
            int ndim = tile ? 2 : 1;
            size_t n = shape[0] * shape[1];
            float x[100], clean[100];
            test_rng g = test_rng_make(0x4a4 + s);
            gen_data(&g, clean, n);
            memcpy(x, clean, sizeof x);
            const size_t bad1 = 40, bad2 = 70;
            x[bad1] = NAN;
            x[bad2] = -INFINITY;
            emu_quant_opts o;
            memset(&o, 0, sizeof o);
            o.mode = mode;
            o.seed = 9;
            o.tensor_scale = sf.tensor_scale ? 0.5 : 0.0; /* same g for both */
            emu_scaled_tensor q, qc;
            sq_alloc(&q, &sf, ndim, shape, 0);
            sq_alloc(&qc, &sf, ndim, shape, 0);
            emu_quant_counts c;
            memset(&c, 0, sizeof c);
            emu_block_stats *bl = calloc(q.nblocks, sizeof *bl);
            emu_error err;
            ck_assert(bl);
            ck_assert(emu_scaled_quantize(&qc, clean, &o, NULL, NULL, &err) == 0);
            int rc = emu_scaled_quantize(&q, x, &o, &c, bl, &err);
            CHECK(rc == 0, "%s: NaN data refused: %s", specs[s], err.message);
            if (rc == 0) {
                size_t b1 = emu_scaled_block_of(&q, bad1),
                       b2 = emu_scaled_block_of(&q, bad2);
                CHECK(isnan(q.scale[b1]) && isnan(q.scale[b2]) &&
                      c.nonfinite_blocks == (b1 == b2 ? 1u : 2u),
                      "%s %s: blocks %zu and %zu hold NaN and -inf: scales %a "
                      "%a, nonfinite_blocks %" PRIu64, specs[s],
                      emu_rnd_name(mode), b1, b2, (double)q.scale[b1],
                      (double)q.scale[b2], c.nonfinite_blocks);
                CHECK(isnan(bl[b1].amax) &&
                      (b1 == b2 || bl[b2].amax == INFINITY), "%s: "
                      "block amax %a %a, want NaN, inf", specs[s],
                      (double)bl[b1].amax, (double)bl[b2].amax);
                float *dq = malloc(n * sizeof *dq);
                ck_assert(dq);
                rc = emu_scaled_dequantize(&q, dq, false, &err);
                for (size_t i = 0; i < n; i++) {
                    size_t b = emu_scaled_block_of(&q, i);
                    if (b == b1 || b == b2) {
                        CHECK(isnan(emu_scaled_value(&q, i)) &&
                              (rc != 0 || isnan(dq[i])), "%s %s: element %zu "
                              "of a NaN block decodes %a", specs[s],
                              emu_rnd_name(mode), i, emu_scaled_value(&q, i));
                    } else {
                        CHECK(test_same(q.scale[b], qc.scale[b]) &&
                              test_same(q.elem[i], qc.elem[i]), "%s %s: "
                              "element %zu x=%a of finite block %zu changed by"
                              " a NaN elsewhere: %a * %a, alone %a * %a",
                              specs[s], emu_rnd_name(mode), i, (double)x[i], b,
                              (double)q.elem[i], (double)q.scale[b],
                              (double)qc.elem[i], (double)qc.scale[b]);
                    }
                }
                free(dq);
            }
            free(bl);
            emu_scaled_free(&q);
            emu_scaled_free(&qc);
        }
    /* A scale format without NaN (e3m2) cannot mark the block. */
    emu_scaled_format sf = sfmt("elem=e2m1,scale=e3m2,block=8,rule=amax");
    for (int k = 0; k < 2; k++) {
        float x[40];
        for (int i = 0; i < 40; i++)
            x[i] = (float)i / 8;
        const size_t at = k ? 13 : 5;
        x[at] = k ? INFINITY : NAN;
        emu_scaled_tensor q;
        size_t n = 40;
        sq_alloc(&q, &sf, 1, &n, 0);
        emu_error err;
        memset(&err, 0, sizeof err);
        emu_quant_opts o;
        memset(&o, 0, sizeof o);
        int rc = emu_scaled_quantize(&q, x, &o, NULL, NULL, &err);
        char want[32];
        snprintf(want, sizeof want, "element %zu", at);
        CHECK(rc == -1 && strstr(err.message, want), "e3m2 scales, %s at %zu:"
              " rc %d, message '%s' (want it to name '%s')", k ? "inf" : "NaN",
              at, rc, err.message, want);
        emu_scaled_free(&q);
    }
    FINISH("non-finite blocks", before);
}
END_TEST

/* Options quantization refuses. */
START_TEST(quantize_refuses)
{
    unsigned long long before = begin_test();
    emu_scaled_format sf = sfmt("nvfp4");
    emu_scaled_tensor q;
    size_t n = 20;
    float x[20];
    for (int i = 0; i < 20; i++)
        x[i] = (float)i;
    sq_alloc(&q, &sf, 1, &n, 0);
    static const double bad_g[] = { -1.0, INFINITY, NAN, 0.1, 1e300 };
    for (size_t k = 0; k < sizeof bad_g / sizeof bad_g[0]; k++) {
        emu_quant_opts o;
        memset(&o, 0, sizeof o);
        o.tensor_scale = bad_g[k];
        emu_error err;
        memset(&err, 0, sizeof err);
        int rc = emu_scaled_quantize(&q, x, &o, NULL, NULL, &err);
        CHECK(rc == -1 && err.message[0], "tensor_scale %a accepted (rc %d)",
              bad_g[k], rc);
    }
    static const unsigned bad_bits[] = { 0, 65 };
    for (int k = 0; k < 2; k++) {
        emu_quant_opts o;
        memset(&o, 0, sizeof o);
        o.mode = EMU_RS_BITS;
        o.sr_bits = bad_bits[k];
        emu_error err;
        int rc = emu_scaled_quantize(&q, x, &o, NULL, NULL, &err);
        CHECK(rc == -1, "sr_bits %u accepted", bad_bits[k]);
    }
    emu_scaled_free(&q);
    FINISH("quantize refuses", before);
}
END_TEST

/* The amax rule with ru clips nothing, also under current scaling: the
 * tensor scale g is then rounded up as well.  With g rounded to nearest,
 * the case below (one element, 100.0) used to clip: RN32(100/2688) lies
 * below the exact quotient, amax / (6 g) exceeds 448 by less than a
 * binary32 ulp, and the scale saturated at 448. */
START_TEST(nvfp4_ru_current_clips_nothing)
{
    unsigned long long before = begin_test();
    emu_scaled_format sf = sfmt("nvfp4,scale_mode=ru");
    float x[1] = { 100.0f };
    emu_scaled_tensor q;
    emu_quant_counts c;
    quant_vec(&q, &sf, x, 1, EMU_RNE, 0, &c, NULL);
    double g = ref_f32_quot(100.0, 2688.0, EMU_RU);
    CHECK(c.clipped == 0 && (double)q.tensor_scale == g,
          "nvfp4,scale_mode=ru, x = {%a}, current scaling: g = %a (MPFR "
          "RU32(100/2688) = %a), scale %a, element %a: clipped %" PRIu64,
          (double)x[0], (double)q.tensor_scale, g, (double)q.scale[0],
          (double)q.elem[0], c.clipped);
    emu_scaled_free(&q);
    FINISH("nvfp4 ru under current scaling", before);
}
END_TEST

/* ---- 3. stochastic rounding of elements ------------------------------------ */

static void quant_sr(emu_scaled_tensor *q, const float *x, emu_rnd mode,
                     unsigned bits, uint64_t seed, uint64_t stream, double g)
{
    emu_quant_opts o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.sr_bits = bits;
    o.seed = seed;
    o.stream = stream;
    o.tensor_scale = g;
    emu_error err;
    int rc = emu_scaled_quantize(q, x, &o, NULL, NULL, &err);
    ck_assert_msg(rc == 0, "quantize: %s", err.message);
}

START_TEST(sr_reproducible)
{
    unsigned long long before = begin_test();
    static const char *const specs[] = { "mxfp8", "nvfp4", "mxfp4,block=4x3" };
    test_rng g = test_rng_make(0x5eed);
    for (size_t s = 0; s < 3; s++)
        for (int m = 0; m < 2; m++) {
            emu_rnd mode = m ? EMU_RS_BITS : EMU_RS;
            emu_scaled_format sf = sfmt(specs[s]);
            size_t shape[2] = { 24, 25 }, n = 600;
            float x[600];
            gen_data(&g, x, n);
            emu_scaled_tensor a, b, c, d;
            sq_alloc(&a, &sf, 2, shape, 1);
            sq_alloc(&b, &sf, 2, shape, 1);
            sq_alloc(&c, &sf, 2, shape, 1);
            sq_alloc(&d, &sf, 2, shape, 1);
            quant_sr(&a, x, mode, 7, 1, 5, 0);
            quant_sr(&b, x, mode, 7, 1, 5, 0);
            quant_sr(&c, x, mode, 7, 2, 5, 0);
            quant_sr(&d, x, mode, 7, 1, 6, 0);
            size_t same_ab = 0, same_ac = 0, same_ad = 0;
            for (size_t i = 0; i < n; i++) {
                same_ab += test_same(a.elem[i], b.elem[i]);
                same_ac += test_same(a.elem[i], c.elem[i]);
                same_ad += test_same(a.elem[i], d.elem[i]);
            }
            CHECK(same_ab == n, "%s %s: same seed and stream, %zu of %zu "
                  "elements differ", specs[s], emu_rnd_name(mode), n - same_ab, n);
            CHECK(same_ac < n && same_ad < n, "%s %s: another seed changes %zu,"
                  " another stream %zu of %zu elements (want some)", specs[s],
                  emu_rnd_name(mode), n - same_ac, n - same_ad, n);
            emu_scaled_free(&a);
            emu_scaled_free(&b);
            emu_scaled_free(&c);
            emu_scaled_free(&d);
        }
    FINISH("stochastic reproducibility", before);
}
END_TEST

/* P(round away from zero) is the distance ratio F (EMU_RS), or F truncated
 * to r bits, floor(F 2^r) / 2^r (EMU_RS_BITS: the r top bits of F plus r
 * random bits, carry out), tested with a binomial 5-sigma bound; the mean
 * of the dequantized values is x for EMU_RS (unbiased). */
START_TEST(sr_statistics)
{
    unsigned long long before = begin_test(), samples = 0;
    const size_t n = (size_t)test_scaled(1 << 15, 2048);
    typedef struct sr_case {
        const char *spec;
        float x;
        double g;
    } sr_case;
    /* mxfp8: s = 2^-8, fast-path scale but stochastic: the slow path.
     * nvfp4 with g = 3: s = RN_e4m3(6 / 18), x / (s g) has no finite
     * binary expansion (the quotient's low part matters). */
    static const sr_case cases[] = { { "mxfp8", 1.3f, 0 },
                                     { "mxfp8", -0.2f, 0 },
                                     { "nvfp4", 1.3f, 3.0 },
                                     { "mxint8", 0.7f, 0 } };
    static const unsigned rbits[] = { 64, 3, 1, 9 };
    float *x = malloc(n * sizeof *x);
    ck_assert(x);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (size_t rb = 0; rb < 4; rb++) {
            const sr_case *sc = &cases[k];
            emu_scaled_format sf = sfmt(sc->spec);
            /* the first element of every block is the block's amax, the
             * rest are x: all blocks alike */
            const size_t B = sf.block[0];
            const float top = sf.tensor_scale ? 6.0f : 2.0f * fabsf(sc->x);
            for (size_t i = 0; i < n; i++)
                x[i] = i % B == 0 ? top : sc->x;
            emu_scaled_tensor q;
            sq_alloc(&q, &sf, 1, &n, 0);
            emu_rnd mode = rbits[rb] == 64 ? EMU_RS : EMU_RS_BITS;
            quant_sr(&q, x, mode, rbits[rb], 77 + rb, k, sc->g);
            const double d = (double)q.scale[1] * q.tensor_scale;
            mpfr_t t;
            mpfr_init2(t, WPREC);
            quot_sticky(t, sc->x, d);
            double rz = mround(&sf.elem, t, EMU_RZ, true, NULL);
            double ra = sc->x > 0 ? mround(&sf.elem, t, EMU_RU, true, NULL)
                                  : mround(&sf.elem, t, EMU_RD, true, NULL);
            /* F = (|q| - |rz|) / (|ra| - |rz|), exactly enough */
            mpfr_abs(t, t, MPFR_RNDN);
            mpfr_sub_d(t, t, fabs(rz), MPFR_RNDN);
            mpfr_div_d(t, t, fabs(ra) - fabs(rz), MPFR_RNDN);
            double F = mpfr_get_d(t, MPFR_RNDN);
            mpfr_clear(t);
            double P = mode == EMU_RS ? F
                                      : floor(ldexp(F, (int)rbits[rb])) /
                                            ldexp(1.0, (int)rbits[rb]);
            size_t m = 0, up = 0, other = 0;
            double sum = 0.0;
            for (size_t i = 0; i < n; i++) {
                if (i % B == 0)
                    continue;
                m++;
                up += q.elem[i] == ra;
                other += q.elem[i] != ra && q.elem[i] != rz;
                sum += emu_scaled_value(&q, i);
            }
            samples += m;
            double sd = sqrt((double)m * P * (1.0 - P));
            CHECK(other == 0 && fabs((double)up - (double)m * P) <= 5.0 * sd,
                  "%s %s%u x=%a (scale %a, g %a): %zu of %zu rounded away to "
                  "%a (not %a), expected P = %.6f +- 5 sigma (%.1f); %zu "
                  "elements neither", sc->spec, emu_rnd_name(mode),
                  mode == EMU_RS ? 0 : rbits[rb], (double)sc->x,
                  (double)q.scale[1], (double)q.tensor_scale, up, m, ra, rz, P,
                  5.0 * sd, other);
            /* the mean: x itself for EMU_RS, rz + P (ra - rz) for r bits */
            double want = mode == EMU_RS ? (double)sc->x : (rz + P * (ra - rz)) * d;
            double tol = 5.0 * fabs(ra - rz) * d * sqrt(P * (1.0 - P) / (double)m);
            CHECK(fabs(sum / (double)m - want) <= tol + 1e-12 * fabs(want),
                  "%s %s%u x=%a: mean of the values %.12g, expected %.12g "
                  "+- %.3g", sc->spec, emu_rnd_name(mode),
                  mode == EMU_RS ? 0 : rbits[rb], (double)sc->x,
                  sum / (double)m, want, tol);
            emu_scaled_free(&q);
        }
    free(x);
    tally("stochastic rounding: samples", samples);
    FINISH("stochastic statistics", before);
}
END_TEST

/* ---- 4. packed storage --------------------------------------------------- */

static size_t code_size(const emu_format *f, size_t n)
{
    if (f->bits <= 8)
        return (n * (size_t)f->bits + 7) / 8;
    return n * (f->bits <= 16 ? 2 : 4);
}

START_TEST(pack_roundtrip)
{
    unsigned long long before = begin_test(), cases = 0;
    static const char *const extra[] = {
        "elem=e3m2,scale=e4m3,rule=amax,tensor=yes", "elem=binary16,scale=e8m0",
        "mxfp4,block=4x3", "elem=e4m3,scale=none,tensor=yes", "mxfp6-e3m2,block=5",
    };
    const char *specs[N_PRESETS + 5];
    for (int p = 0; p < N_PRESETS; p++)
        specs[p] = presets[p];
    for (int p = 0; p < 5; p++)
        specs[N_PRESETS + p] = extra[p];
    test_rng g = test_rng_make(0xbac);
    const int reps = (int)test_scaled(30, 3);
    for (int rep = 0; rep < reps; rep++)
        for (int p = 0; p < N_PRESETS + 5; p++) {
            emu_scaled_format sf = sfmt(specs[p]);
            size_t shape[2] = { 1 + (size_t)test_below(&g, 13),
                                1 + (size_t)test_below(&g, 70) };
            int ndim = sf.block[1] > 1 || rep % 2 ? 2 : 1;
            int axis = ndim == 2 ? (int)test_below(&g, 2) : 0;
            size_t n = ndim == 2 ? shape[0] * shape[1] : shape[1];
            const size_t *sh = ndim == 2 ? shape : shape + 1;
            float *x = malloc(n * sizeof *x);
            ck_assert(x);
            gen_data(&g, x, n);
            if (sf.block_scaled && rep % 3 == 0)
                x[test_below(&g, n)] = NAN; /* a NaN scale to pack */
            emu_scaled_tensor q, u;
            sq_alloc(&q, &sf, ndim, sh, axis);
            sq_alloc(&u, &sf, ndim, sh, axis);
            quant_sr(&q, x, (emu_rnd)(rep % TEST_DET_MODES), 8, 1, 2, 0);
            size_t want = code_size(&sf.elem, n) +
                          (sf.block_scaled ? code_size(&sf.scale, q.nblocks) : 0) +
                          (sf.tensor_scale ? 4 : 0);
            size_t size = emu_scaled_packed_size(&q);
            CHECK(size == want, "%s: packed size %zu for %zu elements, %zu "
                  "blocks: expected %zu", specs[p], size, n, q.nblocks, want);
            uint8_t *buf = malloc(size + 1);
            ck_assert(buf);
            emu_error err;
            int rc = emu_scaled_pack(&q, buf, size, &err);
            CHECK(rc == 0, "%s: pack: %s", specs[p], err.message);
            rc = rc ? rc : emu_scaled_unpack(&u, buf, size, &err);
            CHECK(rc == 0, "%s: unpack of a packed tensor: %s", specs[p],
                  err.message);
            cases++;
            if (rc == 0) {
                CHECK(test_same(u.tensor_scale, q.tensor_scale), "%s: tensor "
                      "scale %a after the round trip, was %a", specs[p],
                      (double)u.tensor_scale, (double)q.tensor_scale);
                for (size_t b = 0; b < q.nblocks; b++)
                    CHECK(test_same(u.scale[b], q.scale[b]), "%s: block %zu "
                          "scale %a after the round trip, was %a", specs[p], b,
                          (double)u.scale[b], (double)q.scale[b]);
                for (size_t i = 0; i < n; i++)
                    CHECK((test_same(emu_scaled_value(&u, i),
                                     emu_scaled_value(&q, i)) ||
                           (sf.int_elem && emu_scaled_value(&u, i) ==
                                               emu_scaled_value(&q, i))) &&
                          (isnan(q.scale[emu_scaled_block_of(&q, i)]) ||
                           test_same(u.elem[i], q.elem[i]) ||
                           /* two's complement has no -0 */
                           (sf.int_elem && u.elem[i] == q.elem[i])),
                          "%s: element %zu = %a after the round trip, was %a",
                          specs[p], i, (double)u.elem[i], (double)q.elem[i]);
            }
            /* one byte short is refused */
            rc = emu_scaled_unpack(&u, buf, size - 1, &err);
            CHECK(rc == -1, "%s: unpack of %zu bytes (%zu needed) accepted",
                  specs[p], size - 1, size);
            rc = emu_scaled_pack(&q, buf, size - 1, &err);
            CHECK(rc == -1, "%s: pack into %zu bytes (%zu needed) accepted",
                  specs[p], size - 1, size);
            free(buf);
            free(x);
            emu_scaled_free(&q);
            emu_scaled_free(&u);
        }
    /* Bytes -> tensor -> bytes is the identity on valid codes (the layout
     * is a bijection): random bytes for FP4, FP6, MXINT8, nvfp4. */
    static const char *const raw[] = { "mxfp4", "mxfp6-e2m3", "mxfp6-e3m2",
                                       "mxint8", "nvfp4", "mxfp8-e5m2" };
    for (int rep = 0; rep < reps; rep++)
        for (size_t p = 0; p < sizeof raw / sizeof raw[0]; p++) {
            emu_scaled_format sf = sfmt(raw[p]);
            size_t n = 4 * (1 + (size_t)test_below(&g, 40)); /* no pad bits */
            emu_scaled_tensor u;
            sq_alloc(&u, &sf, 1, &n, 0);
            size_t size = emu_scaled_packed_size(&u);
            size_t eb = code_size(&sf.elem, n);
            uint8_t *buf = malloc(size), *back = malloc(size);
            ck_assert(buf && back);
            for (size_t i = 0; i < size; i++)
                buf[i] = (uint8_t)test_next(&g);
            for (size_t i = 0; i < eb; i++) {
                if (sf.int_elem && buf[i] == 0x80)
                    buf[i] = 0x7f; /* -128 is not an MXINT8 value */
                if (!strcmp(raw[p], "mxfp8-e5m2") && (buf[i] & 0x7c) == 0x7c)
                    buf[i] &= 0x83; /* no inf or NaN codes: NaN is canonicalised */
            }
            for (size_t i = eb; i < eb + u.nblocks; i++)
                if (sf.scale.has_zero) /* e4m3 scales: positive, not NaN */
                    buf[i] = (uint8_t)(1 + buf[i] % 0x7e);
            if (sf.tensor_scale) {
                float gv = ldexpf(1.0f + (float)(test_next(&g) >> 41) * 0x1p-23f,
                                  (int)test_below(&g, 60) - 30);
                uint32_t w;
                memcpy(&w, &gv, 4);
                for (int k = 0; k < 4; k++)
                    buf[size - 4 + (size_t)k] = (uint8_t)(w >> (8 * k));
            }
            emu_error err;
            int rc = emu_scaled_unpack(&u, buf, size, &err);
            CHECK(rc == 0, "%s: unpack of valid codes: %s", raw[p], err.message);
            rc = rc ? rc : emu_scaled_pack(&u, back, size, &err);
            size_t diff = size;
            for (size_t i = 0; rc == 0 && i < size; i++)
                if (buf[i] != back[i]) {
                    diff = i;
                    break;
                }
            CHECK(rc == 0 && diff == size, "%s: bytes -> tensor -> bytes: "
                  "byte %zu of %zu was 0x%02x, packs back as 0x%02x", raw[p],
                  diff, size, diff < size ? buf[diff] : 0,
                  diff < size ? back[diff] : 0);
            cases++;
            free(buf);
            free(back);
            emu_scaled_free(&u);
        }
    tally("pack/unpack round trips", cases);
    FINISH("pack round trips", before);
}
END_TEST

static void expect_bytes(const char *what, const uint8_t *got,
                         const uint8_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        CHECK(got[i] == want[i], "%s: byte %zu is 0x%02x, expected 0x%02x",
              what, i, got[i], want[i]);
}

START_TEST(pack_layout)
{
    unsigned long long before = begin_test();
    emu_error err;
    /* MXFP4, 40 elements: 20 bytes of nibbles (element 0 low), then the
     * two E8M0 scale codes.  Block 0: amax 6 -> 2^0 (code 127); codes
     * 1.0 = 0x2, 6.0 = 0x7, -0.5 = 0x9, 3.0 = 0x5.  Block 1 (8 elements):
     * amax 0.75 -> 2^(-1-2) (code 124), 0.75 / 2^-3 = 6 -> 0x7. */
    {
        emu_scaled_format sf = sfmt("mxfp4");
        float x[40] = { 1.0f, 6.0f, -0.5f, 3.0f };
        x[32] = 0.75f;
        emu_scaled_tensor q;
        quant_vec(&q, &sf, x, 40, EMU_RNE, 0, NULL, NULL);
        uint8_t want[22] = { 0x72, 0x59 };
        want[16] = 0x07;
        want[20] = 0x7f;
        want[21] = 0x7c;
        uint8_t buf[22];
        ck_assert_uint_eq(emu_scaled_packed_size(&q), 22);
        ck_assert(emu_scaled_pack(&q, buf, sizeof buf, &err) == 0);
        expect_bytes("mxfp4 layout", buf, want, 22);
        emu_scaled_free(&q);
    }
    /* MXINT8: two's complement bytes; amax 127/64 -> scale 1 (0x7f). */
    {
        emu_scaled_format sf = sfmt("mxint8");
        float x[32] = { -1.0f / 64, 127.0f / 64, -127.0f / 64, 1.0f / 64, 0.5f,
                        -0.5f };
        emu_scaled_tensor q;
        quant_vec(&q, &sf, x, 32, EMU_RNE, 0, NULL, NULL);
        uint8_t want[33] = { 0xff, 0x7f, 0x81, 0x01, 0x20, 0xe0 };
        want[32] = 0x7f;
        uint8_t buf[33];
        ck_assert_uint_eq(emu_scaled_packed_size(&q), 33);
        ck_assert(emu_scaled_pack(&q, buf, sizeof buf, &err) == 0);
        expect_bytes("mxint8 layout", buf, want, 33);
        /* -128 (0x80) is refused, naming the element */
        buf[3] = 0x80;
        memset(&err, 0, sizeof err);
        int rc = emu_scaled_unpack(&q, buf, sizeof buf, &err);
        CHECK(rc == -1 && strstr(err.message, "3"), "mxint8: unpack of -128 "
              "at element 3: rc %d, '%s'", rc, err.message);
        /* E8M0 code 0 is 2^-127 (positive), 0xff is NaN: both read */
        buf[3] = 0x01;
        buf[32] = 0x00;
        rc = emu_scaled_unpack(&q, buf, sizeof buf, &err);
        CHECK(rc == 0 && q.scale[0] == 0x1p-127f, "mxint8: scale code 0 reads "
              "as %a (rc %d), want 2^-127", (double)q.scale[0], rc);
        buf[32] = 0xff;
        rc = emu_scaled_unpack(&q, buf, sizeof buf, &err);
        CHECK(rc == 0 && isnan(emu_scaled_value(&q, 0)), "mxint8: scale code "
              "0xff: rc %d, value %a, want NaN", rc, emu_scaled_value(&q, 0));
        emu_scaled_free(&q);
    }
    /* NVFP4: E4M3 scale codes that are not positive values, and tensor
     * scales that are not positive finite binary32 values, are refused. */
    {
        emu_scaled_format sf = sfmt("nvfp4");
        float x[16] = { 1.0f, 2.0f };
        emu_scaled_tensor q;
        quant_vec(&q, &sf, x, 16, EMU_RNE, 0, NULL, NULL);
        uint8_t buf[8 + 1 + 4], good[13];
        ck_assert_uint_eq(emu_scaled_packed_size(&q), 13);
        ck_assert(emu_scaled_pack(&q, good, sizeof good, &err) == 0);
        static const uint8_t bad_scale[] = { 0x00, 0x80, 0xb8, 0xff, 0x7f };
        for (size_t k = 0; k < sizeof bad_scale; k++) {
            memcpy(buf, good, sizeof buf);
            buf[8] = bad_scale[k];
            memset(&err, 0, sizeof err);
            int rc = emu_scaled_unpack(&q, buf, sizeof buf, &err);
            /* 0x7f/0xff are E4M3's NaN: a NaN block is representable */
            bool nan_code = (bad_scale[k] & 0x7f) == 0x7f;
            CHECK(nan_code ? rc == 0 && isnan(q.scale[0])
                           : rc == -1 && err.message[0],
                  "nvfp4: scale code 0x%02x: rc %d '%s'", bad_scale[k], rc,
                  err.message);
        }
        static const float bad_g[] = { 0.0f, -0.0f, -2.0f, INFINITY, NAN };
        for (size_t k = 0; k < sizeof bad_g / sizeof bad_g[0]; k++) {
            memcpy(buf, good, sizeof buf);
            uint32_t w;
            memcpy(&w, &bad_g[k], 4);
            for (int j = 0; j < 4; j++)
                buf[9 + j] = (uint8_t)(w >> (8 * j));
            memset(&err, 0, sizeof err);
            int rc = emu_scaled_unpack(&q, buf, sizeof buf, &err);
            CHECK(rc == -1 && err.message[0], "nvfp4: tensor scale %a accepted",
                  (double)bad_g[k]);
        }
        /* the good bytes: g = RN32(2 / 2688) little-endian after the scale */
        float gq;
        uint32_t w = (uint32_t)good[9] | (uint32_t)good[10] << 8 |
                     (uint32_t)good[11] << 16 | (uint32_t)good[12] << 24;
        memcpy(&gq, &w, 4);
        CHECK(gq == ref_rn32_quot(2.0, 2688.0), "nvfp4: packed tensor scale "
              "bytes read %a, MPFR RN32(2/2688) = %a", (double)gq,
              ref_rn32_quot(2.0, 2688.0));
        emu_scaled_free(&q);
    }
    FINISH("pack layout", before);
}
END_TEST

/* ---- 5. the scaled matmul against MPFR simulations --------------------------- */

/* A random (r, c) matrix quantized into q along axis (current scaling). */
static void quant_matrix(emu_scaled_tensor *q, const char *spec, size_t r,
                         size_t c, int axis, test_rng *g, int elo, int ehi)
{
    emu_scaled_format sf = sfmt(spec);
    size_t shape[2] = { r, c };
    sq_alloc(q, &sf, 2, shape, axis);
    float *x = malloc(r * c * sizeof *x);
    ck_assert(x);
    for (size_t i = 0; i < r * c; i++)
        x[i] = test_below(g, 16) == 0 ? 0.0f : rand_f32(g, elo, ehi);
    quant_sr(q, x, EMU_RNE, 0, 0, 0, 0);
    free(x);
}

/* The value of element i without the tensor scale: e s, exact. */
static double value_wo_g(const emu_scaled_tensor *q, size_t i)
{
    geo G = geo_make(&q->sf, q->ndim, q->shape, q->axis);
    double s = q->sf.block_scaled ? q->scale[geo_block_of(&G, i)] : 1.0;
    return exact_prod3(q->elem[i], s, 1.0);
}

typedef enum { MODEL_EXACT, MODEL_SEQ, MODEL_FUSED } model;

/* One output by the model's definition in MPFR: the terms t_k = a_k b_k
 * (exact), summed as the model says, the result times scale (alpha g_a
 * g_b, exact) rounded once into out under r. */
static double ref_output(model mdl, const emu_accum *acc, const double *a,
                         const double *b, size_t K, double scale,
                         const emu_format *out, const emu_rounding *r)
{
    mpfr_t t, sum, x;
    mpfr_inits2(BIGPREC, t, sum, x, (mpfr_ptr)0);
    double s = 0.0; /* the accumulator: a value of acc->acc */
    if (mdl == MODEL_EXACT) {
        for (size_t k = 0; k < K; k++) {
            mpfr_set_d(t, a[k], MPFR_RNDN);
            mpfr_mul_d(t, t, b[k], MPFR_RNDN);
            if (k == 0)
                mpfr_set(sum, t, MPFR_RNDN); /* -0 only if every term is */
            else
                mpfr_add(sum, sum, t, MPFR_RNDN); /* exact at BIGPREC */
        }
    } else if (mdl == MODEL_SEQ) {
        for (size_t k = 0; k < K; k++) {
            mpfr_set_d(t, a[k], MPFR_RNDN);
            mpfr_mul_d(t, t, b[k], MPFR_RNDN);
            mpfr_add_d(x, t, s, MPFR_RNDN); /* exact; IEEE's zero signs */
            s = mround(&acc->acc, x, acc->rnd.mode, false, NULL);
        }
        mpfr_set_d(sum, s, MPFR_RNDN);
    } else {
        const size_t kk = acc->fused_k;
        const long w = (long)acc->fused_w;
        double v[4097];
        for (size_t k0 = 0; k0 < K; k0 += kk) {
            size_t m = K - k0 < kk ? K - k0 : kk;
            v[0] = s;
            for (size_t i = 0; i < m; i++)
                v[i + 1] = a[k0 + i] * b[k0 + i]; /* exact: 48 bits */
            long E = LONG_MIN;
            for (size_t i = 0; i <= m; i++)
                if (v[i] != 0.0) {
                    int e;
                    frexp(v[i], &e);
                    if (e - 1 > E)
                        E = e - 1;
                }
            mpfr_set_zero(x, 1);
            if (E != LONG_MIN) {
                /* each truncated toward zero to a multiple of 2^(E-w+1) */
                for (size_t i = 0; i <= m; i++) {
                    mpfr_set_d(t, v[i], MPFR_RNDN);
                    mpfr_mul_2si(t, t, -(E - w + 1), MPFR_RNDN);
                    mpfr_trunc(t, t);
                    mpfr_mul_2si(t, t, E - w + 1, MPFR_RNDN);
                    mpfr_add(x, x, t, MPFR_RNDN);
                }
            }
            if (mpfr_zero_p(x))
                mpfr_set_zero(x, 1); /* an exact zero sum is +0 */
            s = mround(&acc->acc, x, acc->rnd.mode, false, NULL);
        }
        mpfr_set_d(sum, s, MPFR_RNDN);
    }
    mpfr_mul_d(sum, sum, scale, MPFR_RNDN); /* exact: scale has <= 48 bits */
    double o = emu_ref_round(out, sum, r, NULL);
    mpfr_clears(t, sum, x, (mpfr_ptr)0);
    return o;
}

START_TEST(matmul_oracle)
{
    unsigned long long before = begin_test(), cases = 0;
    test_rng g = test_rng_make(0x3a73);
    typedef struct mm_case {
        const char *fa, *fb;
        int elo, ehi;
    } mm_case;
    static const mm_case fm[] = {
        { "mxfp8", "mxfp8", -20, 20 },
        { "nvfp4", "nvfp4", -10, 10 },
        { "mxfp4", "mxfp4", -40, 40 },
        { "mxfp8", "elem=e4m3,scale=none,tensor=yes", -6, 6 },
        { "mxint8", "mxfp6-e3m2", -3, 3 },
    };
    static const char *const accs[] = {
        "exact", "sequential,acc=binary32", "sequential,acc=bfloat16",
        "fused,acc=binary32,k=%zu,w=24", "fused,acc=bfloat16,k=%zu,w=12",
    };
    static const char *const outs[] = { "binary32", "bfloat16", "binary16" };
    static const double alphas[] = { 0.0, 0.25, 8.0 };
    const int reps = (int)test_scaled(40, 1);
    for (int rep = 0; rep < reps; rep++)
        for (size_t f = 0; f < sizeof fm / sizeof fm[0]; f++)
            for (size_t ai = 0; ai < sizeof accs / sizeof accs[0]; ai++) {
                const int c = rep * 7 + (int)(f * 5 + ai);
                const bool ta = c & 1, tb = (c >> 1) & 1;
                size_t M = 1 + (size_t)test_below(&g, 5);
                size_t N = 1 + (size_t)test_below(&g, 5);
                size_t K = 1 + (size_t)test_below(&g, 100);
                emu_scaled_tensor A, B;
                quant_matrix(&A, fm[f].fa, ta ? K : M, ta ? M : K, ta ? 0 : 1,
                             &g, fm[f].elo, fm[f].ehi);
                quant_matrix(&B, fm[f].fb, tb ? N : K, tb ? K : N, tb ? 1 : 0,
                             &g, fm[f].elo, fm[f].ehi);
                emu_ctx ctx;
                emu_ctx_init(&ctx, 5);
                emu_rounding rnd = test_rne;
                emu_accum accum;
                emu_accum_default(&accum);
                char aspec[80];
                snprintf(aspec, sizeof aspec, accs[ai], A.sf.block[0]);
                emu_error err;
                ck_assert(emu_accum_parse(&accum, aspec, &err) == 0);
                model mdl = ai == 0 ? MODEL_EXACT : ai < 3 ? MODEL_SEQ
                                                           : MODEL_FUSED;
                rnd.mode = (emu_rnd)(c % TEST_DET_MODES);
                const emu_format *fo = test_format(outs[c % 3]);
                emu_tensor out;
                ck_assert(emu_tensor_alloc4(&out, "out", EMU_ROLE_ACTIVATION,
                                            fo, M, N, 0, 0, &err) == 0);
                const double alpha = alphas[(size_t)c % 3];
                emu_matmul_opts o;
                memset(&o, 0, sizeof o);
                o.accum = &accum;
                o.trans_a = ta;
                o.trans_b = tb;
                o.alpha = alpha;
                int rc = emu_t_matmul_scaled(&ctx, "t.mm", &out, &A, &B, &o,
                                             &rnd);
                CHECK(rc == 0, "%s x %s, %s: %s", fm[f].fa, fm[f].fb, aspec,
                      ctx.err.message);
                const double scale = (alpha == 0.0 ? 1.0 : alpha) *
                                     (double)A.tensor_scale * B.tensor_scale;
                double *av = malloc(K * sizeof *av), *bv = malloc(K * sizeof *bv);
                ck_assert(av && bv);
                for (size_t i = 0; rc == 0 && i < M; i++)
                    for (size_t j = 0; j < N; j++) {
                        for (size_t k = 0; k < K; k++) {
                            av[k] = value_wo_g(&A, ta ? k * M + i : i * K + k);
                            bv[k] = value_wo_g(&B, tb ? j * K + k : k * N + j);
                        }
                        double want = ref_output(mdl, &accum, av, bv, K,
                                                 scale, fo, &rnd);
                        double got = out.data[i * N + j];
                        cases++;
                        CHECK(test_same(got, want), "matmul %s x %s (%zux%zux%zu"
                              ", ta %d tb %d), accum %s, out %s mode %s, alpha "
                              "%g, g_a %a g_b %a: (%zu, %zu) = %a, expected "
                              "(MPFR) %a; a[0] %a b[0] %a", fm[f].fa, fm[f].fb,
                              M, N, K, ta, tb, aspec, fo->name,
                              emu_rnd_name(rnd.mode), alpha,
                              (double)A.tensor_scale, (double)B.tensor_scale,
                              i, j, got, want, av[0], bv[0]);
                    }
                free(av);
                free(bv);
                emu_tensor_free(&out);
                emu_scaled_free(&A);
                emu_scaled_free(&B);
            }
    tally("scaled matmul outputs", cases);
    FINISH("scaled matmul against MPFR", before);
}
END_TEST

static void expect_mm_fail(const char *what, emu_ctx *ctx, emu_tensor *out,
                           const emu_scaled_tensor *a,
                           const emu_scaled_tensor *b, const emu_matmul_opts *o)
{
    for (size_t i = 0; i < out->n; i++)
        out->data[i] = 0.5f;
    memset(&ctx->err, 0, sizeof ctx->err);
    uint64_t op = ctx->op_index;
    int rc = emu_t_matmul_scaled(ctx, "t.bad", out, a, b, o, &test_rne);
    bool untouched = true;
    for (size_t i = 0; i < out->n; i++)
        untouched &= out->data[i] == 0.5f;
    CHECK(rc == -1 && ctx->err.message[0] && untouched && ctx->op_index == op,
          "matmul with %s: rc %d, message '%s', output %s, op_index %" PRIu64
          " -> %" PRIu64, what, rc, ctx->err.message,
          untouched ? "untouched" : "written", op, ctx->op_index);
}

START_TEST(matmul_refuses)
{
    unsigned long long before = begin_test();
    test_rng g = test_rng_make(0xbad);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_error err;
    emu_tensor out;
    ck_assert(emu_tensor_alloc4(&out, "out", EMU_ROLE_ACTIVATION,
                                test_format("binary32"), 3, 4, 0, 0, &err) == 0);
    emu_scaled_tensor A, B, B16, Aw, Bw;
    quant_matrix(&A, "mxfp8", 3, 64, 1, &g, -3, 3);
    quant_matrix(&B, "mxfp8", 64, 4, 0, &g, -3, 3);
    quant_matrix(&B16, "mxfp8,block=16", 64, 4, 0, &g, -3, 3);
    quant_matrix(&Aw, "mxfp8", 3, 64, 0, &g, -3, 3);
    quant_matrix(&Bw, "mxfp8", 64, 4, 1, &g, -3, 3);
    emu_matmul_opts o;
    memset(&o, 0, sizeof o);
    /* no defaults: the options name the accumulator */
    expect_mm_fail("no options", &ctx, &out, &A, &B, NULL);
    expect_mm_fail("no accumulator", &ctx, &out, &A, &B, &o);
    o.accum = test_default_accum();
    expect_mm_fail("block 32 against 16 along K", &ctx, &out, &A, &B16, &o);
    expect_mm_fail("A blocked along M", &ctx, &out, &Aw, &B, &o);
    expect_mm_fail("B blocked along N", &ctx, &out, &A, &Bw, &o);
    o.accumulate = true;
    expect_mm_fail("accumulate", &ctx, &out, &A, &B, &o);
    o.accumulate = false;
    o.alpha = 3.0;
    expect_mm_fail("alpha 3", &ctx, &out, &A, &B, &o);
    o.alpha = 0.0;
    o.trans_a = true; /* A (3, 64) read as (64, 3)^T: shapes do not match */
    expect_mm_fail("trans_a on a non-transposed A", &ctx, &out, &A, &B, &o);
    o.trans_a = false;
    uint64_t op = ctx.op_index;
    CHECK(emu_t_matmul_scaled(&ctx, "t.good", &out, &A, &B, &o,
                              &test_rne) == 0 &&
          ctx.op_index == op + 1, "the good product after the bad ones: %s",
          ctx.err.message);
    emu_scaled_free(&A);
    emu_scaled_free(&B);
    emu_scaled_free(&B16);
    emu_scaled_free(&Aw);
    emu_scaled_free(&Bw);
    emu_tensor_free(&out);
    FINISH("matmul refuses", before);
}
END_TEST

/* ---- 6. per-tensor recipes, specs and their errors ------------------------ */

static emu_tensor_scaling tscaling(const char *spec)
{
    emu_tensor_scaling t;
    emu_error err;
    int rc = emu_tensor_scaling_parse(&t, spec, &err);
    ck_assert_msg(rc == 0, "tensor scaling '%s': %s", spec, err.message);
    return t;
}

START_TEST(tensor_recipes)
{
    unsigned long long before = begin_test(), cases = 0;
    emu_scaled_format nv = sfmt("nvfp4"), pt = sfmt("elem=e4m3,scale=none,tensor=yes");
    const double D = 6.0 * 448.0;
#define EXPECT_G(what, got, want)                                             \
    do {                                                                      \
        cases++;                                                              \
        CHECK(test_same((got), (want)), "%s: g %a, expected (MPFR) %a",       \
              (what), (double)(got), (double)(want));                         \
    } while (0)
    emu_tensor_scaling cur = tscaling("current");
    EXPECT_G("current, amax 100",
             emu_tensor_scaling_factor(&cur, NULL, 100.0, 0, &nv),
             ref_rn32_quot(100.0, D));
    EXPECT_G("current, per-tensor e4m3, amax 100",
             emu_tensor_scaling_factor(&cur, NULL, 100.0, 0, &pt),
             ref_rn32_quot(100.0, 448.0));
    emu_tensor_scaling m3 = tscaling("current,margin=3");
    EXPECT_G("margin 3", emu_tensor_scaling_factor(&m3, NULL, 100.0, 0, &nv),
             ref_rn32_quot(800.0, D));
    emu_tensor_scaling mm2 = tscaling("current,margin=-2");
    EXPECT_G("margin -2", emu_tensor_scaling_factor(&mm2, NULL, 100.0, 0, &nv),
             ref_rn32_quot(25.0, D));

    /* delayed: max and most recent of the history */
    emu_amax_history h;
    memset(&h, 0, sizeof h);
    emu_tensor_scaling dmax = tscaling("delayed,history=4");
    emu_tensor_scaling drec = tscaling("delayed,history=4,algo=recent");
    EXPECT_G("delayed, empty history: amax_now",
             emu_tensor_scaling_factor(&dmax, &h, 50.0, 0, &nv), ref_rn32_quot(50.0, D));
    emu_amax_record(&h, 4, 0.0);
    emu_amax_record(&h, 4, 0.0);
    EXPECT_G("delayed, history of zeros: amax_now",
             emu_tensor_scaling_factor(&dmax, &h, 50.0, 0, &nv), ref_rn32_quot(50.0, D));
    memset(&h, 0, sizeof h);
    static const double steps[] = { 10, 20, 30, 40, 5, 6 };
    for (int k = 0; k < 6; k++)
        emu_amax_record(&h, 4, steps[k]);
    CHECK(h.len == 4, "history 4 after 6 records: len %d", h.len);
    EXPECT_G("delayed max over {5, 6, 30, 40}",
             emu_tensor_scaling_factor(&dmax, &h, 1.0, 0, &nv), ref_rn32_quot(40.0, D));
    EXPECT_G("delayed recent (6)", emu_tensor_scaling_factor(&drec, &h, 1.0, 0, &nv),
             ref_rn32_quot(6.0, D));
    emu_amax_record(&h, 4, 7.0);
    emu_amax_record(&h, 4, 8.0);
    EXPECT_G("delayed max after the ring wrapped {5, 6, 7, 8}",
             emu_tensor_scaling_factor(&dmax, &h, 1.0, 0, &nv), ref_rn32_quot(8.0, D));
    EXPECT_G("delayed recent (8)", emu_tensor_scaling_factor(&drec, &h, 1.0, 0, &nv),
             ref_rn32_quot(8.0, D));
    /* non-finite amax values are counted and skipped */
    emu_amax_record(&h, 4, INFINITY);
    emu_amax_record(&h, 4, NAN);
    CHECK(h.rejected == 2 && h.len == 4, "rejected %" PRIu64 " (want 2), len "
          "%d", h.rejected, h.len);
    EXPECT_G("after rejected values, recent is still 8",
             emu_tensor_scaling_factor(&drec, &h, 1.0, 0, &nv), ref_rn32_quot(8.0, D));
    emu_amax_record(&h, 4, 1000.0);
    emu_amax_record(&h, 4, 3.0);
    EXPECT_G("delayed max {7, 8, 1000, 3}",
             emu_tensor_scaling_factor(&dmax, &h, 1.0, 0, &nv), ref_rn32_quot(1000.0, D));

    /* guards: no amax usable -> previous, or 1 */
    static const double bad_amax[] = { 0.0, INFINITY, NAN, -0.0 };
    static const double prevs[] = { 0.25, 0.0, -1.0, INFINITY, NAN };
    emu_amax_history empty;
    memset(&empty, 0, sizeof empty);
    const emu_tensor_scaling *kinds[] = { &cur, &dmax };
    for (int k = 0; k < 2; k++)
        for (size_t a = 0; a < 4; a++)
            for (size_t p = 0; p < 5; p++) {
                double gv = emu_tensor_scaling_factor(kinds[k], &empty, bad_amax[a],
                                             prevs[p], &nv);
                cases++;
                CHECK(gv == (p == 0 ? 0.25 : 1.0), "%s, amax %a, previous %a: "
                      "g %a (want %s)", k ? "delayed" : "current", bad_amax[a],
                      prevs[p], gv, p == 0 ? "previous, 0.25" : "1");
            }
    /* extremes stay positive and finite */
    static const double ext[] = { 0x1p-149, 0x1.fffffep127 };
    emu_tensor_scaling big = tscaling("current,margin=64"),
                       small = tscaling("current,margin=-64");
    for (int k = 0; k < 2; k++) {
        double g1 = emu_tensor_scaling_factor(&big, NULL, ext[k], 0, &nv);
        double g2 = emu_tensor_scaling_factor(&small, NULL, ext[k], 0, &nv);
        cases += 2;
        CHECK(g1 > 0 && g1 <= FLT_MAX && g2 > 0 && g2 <= FLT_MAX &&
              (double)(float)g1 == g1 && (double)(float)g2 == g2,
              "amax %a, margins +-64: g %a and %a (want positive finite "
              "binary32)", ext[k], g1, g2);
    }
    /* emu_amax */
    float v[5] = { 1.0f, -3.0f, 2.0f, -0.0f, 0.5f };
    CHECK(emu_amax(v, 5) == 3.0 && emu_amax(v, 0) == 0.0, "emu_amax %a",
          emu_amax(v, 5));
    v[2] = -INFINITY;
    CHECK(emu_amax(v, 5) == INFINITY, "emu_amax with -inf: %a", emu_amax(v, 5));
    v[4] = NAN;
    CHECK(isnan(emu_amax(v, 5)), "emu_amax with NaN: %a", emu_amax(v, 5));
    tally("tensor scaling recipes", cases);
#undef EXPECT_G
    FINISH("tensor recipes", before);
}
END_TEST

static void expect_spec_error(const char *spec, const char *key)
{
    emu_scaled_format sf;
    emu_error err;
    memset(&err, 0, sizeof err);
    int rc = emu_scaled_format_parse(&sf, spec, &err);
    CHECK(rc == -1 && !strcmp(err.key, key) && err.message[0], "spec '%s': rc "
          "%d, key '%s' (want '%s'), message '%s'", spec, rc, err.key, key,
          err.message);
}

START_TEST(spec_parsing)
{
    unsigned long long before = begin_test();
    /* presets and good specs round-trip through the canonical string */
    static const char *const good[] = {
        "elem=binary16,scale=binary32", "elem=binary32,scale=e8m0,tensor=yes",
        "mxfp8,block=16x16", "elem=e4m3,scale=none,tensor=yes",
        "nvfp4,scale_mode=ru", "mxint8,block=7", "elem=e2m1,scale=e4m3,rule=ceil,pad=no",
    };
    const char *const *names = emu_scaled_preset_names();
    size_t np = 0;
    while (names[np])
        np++;
    CHECK(np == N_PRESETS, "%zu presets, want %d", np, N_PRESETS);
    for (size_t k = 0; k < np + sizeof good / sizeof good[0]; k++) {
        const char *spec = k < np ? names[k] : good[k - np];
        emu_scaled_format a, b;
        emu_error err;
        int rc = emu_scaled_format_parse(&a, spec, &err);
        CHECK(rc == 0, "good spec '%s' refused: %s: %s", spec, err.key, err.message);
        if (rc)
            continue;
        char s1[400], s2[400];
        spec_of(&a, s1, sizeof s1);
        rc = emu_scaled_format_parse(&b, s1, &err);
        CHECK(rc == 0, "canonical '%s' of '%s' refused: %s", s1, spec, err.message);
        if (rc)
            continue;
        spec_of(&b, s2, sizeof s2);
        CHECK(!strcmp(s1, s2) && !strcmp(a.elem.name, b.elem.name) &&
              a.block_scaled == b.block_scaled && a.int_elem == b.int_elem &&
              (!a.block_scaled || !strcmp(a.scale.name, b.scale.name)) &&
              (!a.block_scaled || (a.block[0] == b.block[0] &&
                                   a.block[1] == b.block[1] && a.rule == b.rule &&
                                   a.scale_mode == b.scale_mode && a.pad == b.pad)) &&
              a.tensor_scale == b.tensor_scale,
              "'%s' -> '%s' -> '%s' is not the same format", spec, s1, s2);
    }
    /* the presets' definitions */
    emu_scaled_format f = sfmt("mxfp8");
    CHECK(!strcmp(f.elem.name, "e4m3") && !strcmp(f.scale.name, "e8m0") &&
          f.block[0] == 32 && f.block[1] == 1 && f.rule == EMU_SCALE_RULE_FLOOR &&
          !f.tensor_scale && emu_scaled_bits_per_element(&f) == 8.25,
          "mxfp8 is not e4m3 / e8m0 / 32 / floor (%g bits)",
          emu_scaled_bits_per_element(&f));
    f = sfmt("nvfp4");
    CHECK(!strcmp(f.elem.name, "e2m1") && !strcmp(f.scale.name, "e4m3") &&
          f.block[0] == 16 && f.rule == EMU_SCALE_RULE_AMAX &&
          f.scale_mode == EMU_RNE && f.tensor_scale &&
          emu_scaled_bits_per_element(&f) == 4.5,
          "nvfp4 is not e2m1 / e4m3 / 16 / amax rne / tensor (%g bits)",
          emu_scaled_bits_per_element(&f));
    f = sfmt("mxint8");
    CHECK(f.int_elem && f.elem.max == 127.0 / 64 &&
          emu_scaled_bits_per_element(&f) == 8.25, "mxint8: int_elem %d, max %a",
          f.int_elem, f.elem.max);
    f = sfmt("mxfp6-e2m3");
    CHECK(emu_scaled_bits_per_element(&f) == 6.25 && !strcmp(f.elem.name, "e2m3"),
          "mxfp6-e2m3: %g bits", emu_scaled_bits_per_element(&f));

    /* bad specs name the key */
    {
        emu_scaled_format sf;
        emu_error err;
        memset(&err, 0, sizeof err);
        int rc = emu_scaled_format_parse(&sf, "mxfp9", &err);
        CHECK(rc == -1 && strstr(err.message, "mxfp9"), "unknown preset: rc %d,"
              " message '%s'", rc, err.message);
        rc = emu_scaled_format_parse(&sf, "", &err);
        CHECK(rc == -1 && err.message[0], "empty spec accepted");
    }
    expect_spec_error("mxfp8,color=red", "color");
    expect_spec_error("mxfp8,block=0", "block");
    expect_spec_error("mxfp8,block=abc", "block");
    expect_spec_error("mxfp8,block=4x0", "block");
    expect_spec_error("mxfp8,block=-3", "block");
    expect_spec_error("mxfp8,rule=bogus", "rule");
    expect_spec_error("elem=unknown", "elem");
    expect_spec_error("elem=e4m3,scale=nosuch", "scale");
    expect_spec_error("mxfp8,scale_mode=sr", "scale_mode");
    expect_spec_error("mxfp8,scale_mode=sr8", "scale_mode");
    expect_spec_error("nvfp4,tensor=maybe", "tensor");
    expect_spec_error("mxfp8,pad=perhaps", "pad");
    expect_spec_error("scale=e8m0", "elem");
    expect_spec_error("elem=e8m0", "elem");           /* unsigned elements */
    expect_spec_error("elem=e4m3,scale=none", "scale"); /* no scale at all */
    /* 11 + 24 + 24 significand bits > 53 */
    expect_spec_error("elem=binary16,scale=binary32,tensor=yes", "elem");

    /* a scale format that cannot hold 1, for the power-of-two rules */
    {
        emu_scaled_format sf = sfmt("mxfp8");
        emu_error err;
        ck_assert(emu_format_parse_inline(&sf.scale, "e3m2,bias=10", &err) == 0);
        for (int r = 0; r < EMU_SCALE_RULE_COUNT; r++) {
            sf.rule = (emu_scale_rule)r;
            memset(&err, 0, sizeof err);
            int rc = emu_scaled_format_validate(&sf, &err);
            bool want_fail = r != EMU_SCALE_RULE_AMAX;
            CHECK(want_fail ? rc == -1 && !strcmp(err.key, "scale") : rc == 0,
                  "scale e3m2,bias=10 (max %g) with rule %s: rc %d key '%s'",
                  sf.scale.max, emu_scale_rule_name(sf.rule), rc, err.key);
        }
    }

    /* allocation: geometry errors name the key */
    {
        emu_error err;
        emu_scaled_tensor q;
        emu_scaled_format tile = sfmt("mxfp8,block=4x3");
        size_t s3[3] = { 4, 6, 6 }, s2[2] = { 40, 2 }, s2b[2] = { 8, 10 };
        struct {
            const emu_scaled_format *sf;
            int nd;
            const size_t *shape;
            int axis;
            const char *key, *what;
        } bad[4];
        emu_scaled_format nopad = sfmt("mxfp8,pad=no"),
                          nopad_t = sfmt("mxfp8,block=4x3,pad=no");
        bad[0].sf = &tile, bad[0].nd = 3, bad[0].shape = s3, bad[0].axis = 1,
        bad[0].key = "block", bad[0].what = "a 2-D block on a 3-d tensor";
        bad[1].sf = &nopad, bad[1].nd = 2, bad[1].shape = s2, bad[1].axis = 0,
        bad[1].key = "block", bad[1].what = "pad=no, 40 along the axis";
        bad[2].sf = &nopad_t, bad[2].nd = 2, bad[2].shape = s2b, bad[2].axis = 0,
        bad[2].key = "block", bad[2].what = "pad=no, 10 across a 3-wide tile";
        bad[3].sf = &nopad, bad[3].nd = 2, bad[3].shape = s2, bad[3].axis = 2,
        bad[3].key = "axis", bad[3].what = "axis 2 of a matrix";
        for (int k = 0; k < 4; k++) {
            memset(&err, 0, sizeof err);
            int rc = emu_scaled_alloc(&q, bad[k].sf, bad[k].nd, bad[k].shape,
                                      bad[k].axis, &err);
            CHECK(rc == -1 && !strcmp(err.key, bad[k].key) && err.message[0] &&
                  q.elem == NULL, "alloc with %s: rc %d key '%s' (want '%s')",
                  bad[k].what, rc, err.key, bad[k].key);
            emu_scaled_free(&q);
        }
        size_t ok[2] = { 64, 2 };
        CHECK(emu_scaled_alloc(&q, &nopad, 2, ok, 0, &err) == 0 && q.nblocks == 4,
              "pad=no with 64 along blocks of 32: %s", err.message);
        emu_scaled_free(&q);
        CHECK(emu_scaled_alloc(&q, &nopad, 2, ok, -2, &err) == 0 && q.axis == 0,
              "axis -2 of a matrix is axis 0: %s", err.message);
        emu_scaled_free(&q);
    }

    /* tensor scaling specs */
    static const char *const tgood[] = { "current", "current,margin=2", "delayed",
                                         "delayed,history=4,algo=recent,margin=-3",
                                         "delayed,history=1024,algo=max" };
    for (size_t k = 0; k < sizeof tgood / sizeof tgood[0]; k++) {
        emu_tensor_scaling a = tscaling(tgood[k]), b;
        char s1[200], s2[200];
        emu_tensor_scaling_string(&a, s1, sizeof s1);
        emu_error err;
        int rc = emu_tensor_scaling_parse(&b, s1, &err);
        emu_tensor_scaling_string(&b, s2, sizeof s2);
        CHECK(rc == 0 && !strcmp(s1, s2) && a.kind == b.kind &&
              a.margin == b.margin && (a.kind == EMU_TSCALE_CURRENT ||
              (a.history == b.history && a.algo == b.algo)),
              "tensor scaling '%s' -> '%s' -> '%s'", tgood[k], s1, s2);
    }
    emu_tensor_scaling d = tscaling("delayed");
    CHECK(d.history == 16 && d.algo == EMU_AMAX_MAX && d.margin == 0,
          "delayed defaults: history %d algo %d margin %d", d.history, d.algo,
          d.margin);
    static const struct { const char *spec, *key; } tbad[] = {
        { "sometimes", "" }, { "delayed,history=0", "history" },
        { "delayed,history=2000", "history" }, { "delayed,algo=min", "algo" },
        { "current,margin=x", "margin" }, { "delayed,foo=1", "foo" },
        { "", "" },
    };
    for (size_t k = 0; k < sizeof tbad / sizeof tbad[0]; k++) {
        emu_tensor_scaling t;
        emu_error err;
        memset(&err, 0, sizeof err);
        int rc = emu_tensor_scaling_parse(&t, tbad[k].spec, &err);
        CHECK(rc == -1 && !strcmp(err.key, tbad[k].key) && err.message[0],
              "tensor scaling '%s': rc %d key '%s' (want '%s') message '%s'",
              tbad[k].spec, rc, err.key, tbad[k].key, err.message);
    }
    FINISH("spec parsing", before);
}
END_TEST

/* ---- 7. the statistics site of emu_t_quantize_scaled ----------------------- */

/* Elements whose exact quotient x / (s g), rounded to the element
 * precision with an unbounded exponent (MPFR at p bits in its own huge
 * range) in deterministic mode m, lies beyond ±max: IEEE overflow, what
 * the choke point counts.  Scales from q (checked against the oracle by
 * the tests above). */
static uint64_t mpfr_overflows(const emu_scaled_tensor *q, const float *x,
                               emu_rnd m)
{
    static const mpfr_rnd_t mr[] = { [EMU_RNE] = MPFR_RNDN, [EMU_RZ] = MPFR_RNDZ,
                                     [EMU_RU] = MPFR_RNDU, [EMU_RD] = MPFR_RNDD };
    mpfr_t t;
    mpfr_init2(t, 600);
    uint64_t k = 0;
    for (size_t i = 0; i < q->n; i++) {
        const double sb = q->sf.block_scaled ? q->scale[emu_scaled_block_of(q, i)]
                                             : 1.0;
        if (isnan(sb) || !isfinite(x[i]))
            continue;
        mpfr_set_prec(t, 600); /* prec_round below narrowed it */
        mpfr_set_flt(t, x[i], MPFR_RNDN);
        mpfr_div_d(t, t, sb, MPFR_RNDN);               /* exact: 2^k or   */
        mpfr_div_d(t, t, q->tensor_scale, MPFR_RNDN);  /* 600 bits, far   */
        mpfr_prec_round(t, q->sf.elem.p, mr[m]);       /* below any tie   */
        mpfr_abs(t, t, MPFR_RNDN);
        k += mpfr_cmp_d(t, q->sf.elem.max) > 0;
    }
    mpfr_clear(t);
    return k;
}

/* The errors a quantize site must report at ref_rate 1, recomputed with
 * MPFR from the sources and the scales: every element's exact quotient
 * x / (s g), its error in ulps of the element format at the quotient (the
 * quantum of its binade, 2^(max(e, emin) - mbits)) truncated as the
 * choke point documents, and its relative error. */
typedef struct err_ref {
    uint64_t samples;
    double ulp_sum, ulp_max, rel_sum, rel_max;
    uint64_t ulp_hist[EMU_ULPERR_BINS], rel_hist[EMU_RELERR_BINS];
} err_ref;

static void mpfr_quant_errors(const emu_scaled_tensor *q, const float *x,
                              err_ref *r)
{
    memset(r, 0, sizeof *r);
    mpfr_t ex, d, t;
    mpfr_inits2(700, ex, d, t, (mpfr_ptr)0);
    const emu_format *ef = &q->sf.elem;
    for (size_t i = 0; i < q->n; i++) {
        const double sb = q->sf.block_scaled ? q->scale[emu_scaled_block_of(q, i)]
                                             : 1.0;
        if (isnan(sb) || !isfinite(x[i]))
            continue;
        mpfr_set_d(d, sb, MPFR_RNDN);
        mpfr_mul_d(d, d, q->tensor_scale, MPFR_RNDN); /* exact */
        mpfr_set_flt(ex, x[i], MPFR_RNDN);
        mpfr_div(ex, ex, d, MPFR_RNDN);
        mpfr_set_flt(t, q->elem[i], MPFR_RNDN);
        mpfr_sub(t, t, ex, MPFR_RNDN);
        mpfr_abs(t, t, MPFR_RNDN);
        double rel;
        if (mpfr_zero_p(ex)) {
            rel = mpfr_zero_p(t) ? 0.0 : INFINITY;
        } else {
            mpfr_t u;
            mpfr_init2(u, 700);
            mpfr_div(u, t, ex, MPFR_RNDN);
            rel = fabs(mpfr_get_d(u, MPFR_RNDN));
            mpfr_clear(u);
        }
        long e = mpfr_zero_p(ex) ? ef->emin : mpfr_get_exp(ex) - 1;
        if (e < ef->emin)
            e = ef->emin;
        mpfr_div_2si(t, t, e - ef->mbits, MPFR_RNDN); /* exact */
        const double ulps = mpfr_get_d(t, MPFR_RNDZ);
        r->samples++;
        r->ulp_sum += ulps;
        r->ulp_max = fmax(r->ulp_max, ulps);
        r->ulp_hist[emu_ulperr_bin(ulps)]++;
        if (isfinite(rel)) {
            r->rel_sum += rel;
            r->rel_max = fmax(r->rel_max, rel);
        }
        r->rel_hist[emu_relerr_bin(rel)]++;
    }
    mpfr_clears(ex, d, t, (mpfr_ptr)0);
}

/* Whether a site's error statistics equal the MPFR recomputation (sums to
 * a relative 1e-12: the same terms, added in the same order). */
static bool errors_match(const emu_site_stats *t, const err_ref *r)
{
    return t->ref_samples == r->samples && t->ulp_max == r->ulp_max &&
           t->rel_max == r->rel_max &&
           fabs(t->ulp_sum - r->ulp_sum) <= 1e-12 * r->ulp_sum &&
           fabs(t->rel_sum - r->rel_sum) <= 1e-12 * r->rel_sum &&
           !memcmp(t->ulp_hist, r->ulp_hist, sizeof r->ulp_hist) &&
           !memcmp(t->rel_hist, r->rel_hist, sizeof r->rel_hist);
}


START_TEST(quantize_site_stats)
{
    unsigned long long before = begin_test(), cases = 0;
    test_rng g = test_rng_make(0x57a7);
    static const char *const specs[] = { "mxfp4", "nvfp4", "mxfp8,block=4x3",
                                         "elem=e4m3,scale=none,tensor=yes" };
    for (size_t s = 0; s < 4; s++)
        for (int m = 0; m < 3; m++) {
            emu_scaled_format sf = sfmt(specs[s]);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 31);
            emu_rounding rnd = test_rne;
            ctx.measure = EMU_MEASURE_ALL;
            ctx.ref_rate = 1.0;
            ctx.op_index = 7;
            rnd.mode = m == 0 ? EMU_RNE : m == 1 ? EMU_RD : EMU_RS;
            emu_stats st;
            emu_stats_init(&st);
            ctx.stats = &st;
            emu_error err;
            emu_tensor x;
            size_t R = 1 + (size_t)test_below(&g, 20), C = 1 + (size_t)test_below(&g, 40);
            ck_assert(emu_tensor_alloc4(&x, "x", EMU_ROLE_WEIGHT,
                                        test_format("binary32"), R, C, 0, 0,
                                        &err) == 0);
            gen_data(&g, x.data, x.n);
            emu_scaled_tensor q, q2;
            size_t shape[2] = { R, C };
            sq_alloc(&q, &sf, 2, shape, 1);
            sq_alloc(&q2, &sf, 2, shape, 1);
            emu_quant_counts c;
            memset(&c, 0, sizeof c);
            int rc = emu_t_quantize_scaled(&ctx, "q.w", &q, &x, NULL, &c, &rnd);
            CHECK(rc == 0 && ctx.op_index == 8, "%s: emu_t_quantize_scaled rc "
                  "%d (%s), op_index %" PRIu64, specs[s], rc, ctx.err.message,
                  ctx.op_index);
            /* the same quantization by hand: the op's stream is op 7 */
            emu_quant_opts o;
            memset(&o, 0, sizeof o);
            o.mode = rnd.mode;
            o.sr_bits = rnd.sr_bits;
            o.seed = 31;
            o.stream = 7;
            ck_assert(emu_scaled_quantize(&q2, x.data, &o, NULL, NULL, &err) == 0);
            size_t diff = 0;
            for (size_t i = 0; i < x.n; i++)
                diff += !test_same(q.elem[i], q2.elem[i]);
            CHECK(diff == 0, "%s %s: %zu elements differ from emu_scaled_quantize"
                  " with seed 31, stream 7", specs[s], emu_rnd_name(o.mode), diff);
            /* without the caller's counts the quantizer sets the scales
             * only and the choke point rounds the elements (one pass): the
             * same elements, scales and site statistics */
            {
                emu_scaled_tensor q3;
                sq_alloc(&q3, &sf, 2, shape, 1);
                emu_ctx ctx3;
                emu_ctx_init(&ctx3, 31);
                ctx3.measure = EMU_MEASURE_ALL;
                ctx3.ref_rate = 1.0;
                ctx3.op_index = 7;
                emu_stats st3;
                emu_stats_init(&st3);
                ctx3.stats = &st3;
                ck_assert_int_eq(emu_t_quantize_scaled(&ctx3, "q.w", &q3, &x,
                                                       NULL, NULL, &rnd), 0);
                size_t d3 = 0;
                for (size_t i = 0; i < x.n; i++)
                    d3 += !test_same(q3.elem[i], q2.elem[i]);
                for (size_t b = 0; b < q3.nblocks; b++)
                    d3 += !test_same(q3.scale[b], q2.scale[b]);
                d3 += !test_same(q3.tensor_scale, q2.tensor_scale);
                const emu_site_stats *a = &emu_stats_find(&st, "q.w", EMU_ROLE_WEIGHT)->total;
                const emu_site_stats *b3 = &emu_stats_find(&st3, "q.w", EMU_ROLE_WEIGHT)->total;
                CHECK(d3 == 0 && a->results == b3->results &&
                      a->inexact == b3->inexact && a->underflow == b3->underflow &&
                      a->to_zero == b3->to_zero && a->subnormal == b3->subnormal &&
                      a->overflow == b3->overflow && a->nan == b3->nan &&
                      a->ref_samples == b3->ref_samples &&
                      test_same(a->ulp_sum, b3->ulp_sum) &&
                      test_same(a->rel_sum, b3->rel_sum) &&
                      !memcmp(a->hist_exact, b3->hist_exact, sizeof a->hist_exact) &&
                      !memcmp(a->hist_rounded, b3->hist_rounded, sizeof a->hist_rounded) &&
                      !memcmp(a->hist_scale, b3->hist_scale, sizeof a->hist_scale),
                      "%s %s: one pass (no counts): %zu elements or scales "
                      "differ, or the site's statistics", specs[s],
                      emu_rnd_name(o.mode), d3);
                emu_stats_free(&st3);
                emu_scaled_free(&q3);
            }
            /* the scale histogram: one count per block, in the bin of the
             * block's scale times the tensor scale (from the scales by hand) */
            uint64_t want_hist[EMU_HIST_BINS] = { 0 };
            for (size_t b = 0; b < q2.nblocks; b++)
                if (!isnan(q2.scale[b]))
                    want_hist[emu_hist_bin((double)q2.scale[b] *
                                           (double)q2.tensor_scale)]++;
            const emu_site *hs = NULL;
            for (size_t k = 0; k < st.count; k++)
                if (!strcmp(st.sites[k].name, "q.w"))
                    hs = &st.sites[k];
            CHECK(hs && !memcmp(hs->total.hist_scale, want_hist, sizeof want_hist),
                  "%s %s: the site's scale histogram differs from the blocks' "
                  "scales", specs[s], emu_rnd_name(o.mode));
            /* the value histograms, element by element: x before the
             * rounding, the element times its scales after (the choke
             * point bins them a chunk at a time, through tables from 64
             * elements on, directly below) */
            uint64_t want_x[EMU_HIST_BINS] = { 0 }, want_v[EMU_HIST_BINS] = { 0 };
            for (size_t i = 0; i < x.n; i++) {
                want_x[emu_hist_bin((double)x.data[i])]++;
                want_v[emu_hist_bin(emu_scaled_value(&q, i))]++;
            }
            CHECK(hs && !memcmp(hs->total.hist_exact, want_x, sizeof want_x) &&
                  !memcmp(hs->total.hist_rounded, want_v, sizeof want_v),
                  "%s %s (%zu elements): the site's value histograms differ "
                  "from the elements' bins", specs[s], emu_rnd_name(o.mode),
                  x.n);
            /* the oracle's counts */
            ref_q r;
            ref_quantize(&r, &sf, 2, shape, 1, x.data, &o);
            double *e = malloc(x.n * sizeof *e);
            ck_assert(e);
            for (size_t i = 0; i < x.n; i++)
                e[i] = q.elem[i];
            ref_stats(&r, &sf, x.data, e);
            const emu_site *site = NULL;
            for (size_t k = 0; k < st.count; k++)
                if (!strcmp(st.sites[k].name, "q.w"))
                    site = &st.sites[k];
            cases++;
            CHECK(site != NULL, "%s: no site 'q.w' in ctx->stats", specs[s]);
            if (site) {
                const emu_site_stats *t = &site->total;
                CHECK(!strcmp(site->kind, "quantize") &&
                      site->role == EMU_ROLE_WEIGHT, "%s: site kind '%s' role "
                      "%d", specs[s], site->kind, site->role);
                /* the format column names the scaled format */
                CHECK(!strcmp(site->format, sf.name), "%s: site format "
                      "'%s', expected the scaled format's name '%s'",
                      specs[s], site->format, sf.name);
                /* overflow is IEEE's (the rounding with an unbounded
                 * exponent lies beyond max), as for every op: at most the
                 * clipped elements; exactly MPFR's count in the
                 * deterministic modes */
                const uint64_t ovf = o.mode == EMU_RS
                                         ? t->overflow
                                         : mpfr_overflows(&q, x.data, o.mode);
                CHECK(t->results == x.n && t->to_zero == r.flushed &&
                      t->overflow == ovf && t->overflow <= r.clipped &&
                      t->inexact == r.inexact && t->nan == 0 &&
                      t->nan_produced == 0,
                      "%s %s: results %" PRIu64 " (want %zu), to_zero %" PRIu64
                      " (MPFR flushed %" PRIu64 "), overflow %" PRIu64 " (MPFR "
                      "%" PRIu64 ", clipped %" PRIu64 "), inexact %" PRIu64
                      " (%" PRIu64 ")", specs[s], emu_rnd_name(o.mode),
                      t->results, x.n, t->to_zero, r.flushed, t->overflow,
                      ovf, r.clipped, t->inexact, r.inexact);
                /* the errors, every element sampled, against MPFR */
                err_ref er;
                mpfr_quant_errors(&q, x.data, &er);
                CHECK(errors_match(t, &er) && er.samples == x.n,
                      "%s %s: errors: samples %" PRIu64 " (MPFR %" PRIu64 "), "
                      "ulp sum %.17g max %.17g (MPFR %.17g %.17g), rel sum "
                      "%.17g max %.17g (MPFR %.17g %.17g)", specs[s],
                      emu_rnd_name(o.mode), t->ref_samples, er.samples,
                      t->ulp_sum, t->ulp_max, er.ulp_sum, er.ulp_max,
                      t->rel_sum, t->rel_max, er.rel_sum, er.rel_max);
                CHECK(c.n == x.n && c.flushed == r.flushed &&
                      c.clipped == r.clipped, "%s: counts from the op differ",
                      specs[s]);
            }
            /* a shape that does not match is refused */
            emu_tensor y;
            ck_assert(emu_tensor_alloc4(&y, "y", EMU_ROLE_WEIGHT,
                                        test_format("binary32"), R, C + 1, 0,
                                        0, &err) == 0);
            rc = emu_t_quantize_scaled(&ctx, "q.w", &q, &y, NULL, NULL, &rnd);
            CHECK(rc == -1 && ctx.op_index == 8, "%s: shape mismatch accepted",
                  specs[s]);
            /* and so is a missing rounding: there is no default */
            rc = emu_t_quantize_scaled(&ctx, "q.w", &q, &x, NULL, NULL, NULL);
            CHECK(rc == -1 && ctx.op_index == 8 &&
                  strstr(ctx.err.message, "no rounding"),
                  "%s: quantization without a rounding accepted", specs[s]);
            emu_tensor_free(&y);
            free(e);
            ref_free(&r);
            emu_scaled_free(&q);
            emu_scaled_free(&q2);
            emu_tensor_free(&x);
            emu_stats_free(&st);
        }
    tally("quantize statistics sites", cases);
    FINISH("quantize site statistics", before);
}
END_TEST

/* What an observer saw of one op. */
typedef struct seen_op {
    int calls;
    char kind[32];
    size_t n;
    uint64_t inexact;
    bool values_match;        /* ev->hi[i] is x_i / (s g)                  */
    const emu_scaled_tensor *q;
    const float *x;
} seen_op;

static void observe(void *user, const emu_op_event *ev)
{
    seen_op *s = user;
    s->calls++;
    snprintf(s->kind, sizeof s->kind, "%s", ev->kind);
    s->n = ev->out->n;
    s->inexact = ev->counts->inexact;
    s->values_match = true;
    for (size_t i = 0; i < ev->out->n; i++) {
        const double sb = s->q->scale[emu_scaled_block_of(s->q, i)];
        if (!isnan(sb) && isfinite(s->x[i]))
            s->values_match &= ev->hi[i] == s->x[i] / (sb * s->q->tensor_scale) &&
                               ev->out->data[i] == s->q->elem[i];
    }
}

/* NaN in the statistics of a quantize site, and its observer event: a
 * block holding an inf turns every value of the block into NaN (produced:
 * from a number), a block holding a NaN too (propagated). */
START_TEST(quantize_site_nan_observer)
{
    unsigned long long before = begin_test();
    emu_scaled_format sf = sfmt("mxfp8");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 5);
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    emu_error err;
    emu_tensor x;
    ck_assert(emu_tensor_alloc4(&x, "x", EMU_ROLE_ACTIVATION,
                                test_format("binary32"), 3, 32, 0, 0, &err) == 0);
    for (size_t i = 0; i < x.n; i++)
        x.data[i] = (float)(0.3 * (double)i - 4.0);
    x.data[5] = INFINITY;  /* block 0: produced NaNs */
    x.data[40] = NAN;      /* block 1: propagated     */
    x.data[41] = -INFINITY;
    emu_scaled_tensor q;
    size_t shape[2] = { 3, 32 };
    sq_alloc(&q, &sf, 2, shape, 1);
    seen_op seen = { .q = &q, .x = x.data };
    ctx.observer = observe;
    ctx.observer_user = &seen;
    int rc = emu_t_quantize_scaled(&ctx, "q.x", &q, &x, NULL, NULL, &test_rne);
    CHECK(rc == 0, "quantize: %s", ctx.err.message);
    const emu_site *site = st.count == 1 ? &st.sites[0] : NULL;
    CHECK(site && site->total.nan == 64 && site->total.nan_produced == 32 &&
          site->total.results == 96 && site->total.ref_samples == 32,
          "nan %" PRIu64 " (want 64), nan_produced %" PRIu64 " (want 32), "
          "results %" PRIu64 ", ref_samples %" PRIu64 " (want the 32 of the "
          "finite block)", site ? site->total.nan : 0,
          site ? site->total.nan_produced : 0, site ? site->total.results : 0,
          site ? site->total.ref_samples : 0);
    CHECK(seen.calls == 1 && !strcmp(seen.kind, "quantize") && seen.n == 96 &&
          site && seen.inexact == site->total.inexact && seen.values_match,
          "observer: %d calls, kind '%s', %zu outputs, inexact %" PRIu64
          ", values %s", seen.calls, seen.kind, seen.n, seen.inexact,
          seen.values_match ? "match" : "differ");
    /* the value histograms element by element (NaN values in the NaN
     * bin), and the same statistics without the observer, whose chunks
     * find the NaN values from the products of elements and scales */
    uint64_t want_x[EMU_HIST_BINS] = { 0 }, want_v[EMU_HIST_BINS] = { 0 };
    for (size_t i = 0; i < x.n; i++) {
        want_x[emu_hist_bin((double)x.data[i])]++;
        want_v[emu_hist_bin(emu_scaled_value(&q, i))]++;
    }
    CHECK(site && !memcmp(site->total.hist_exact, want_x, sizeof want_x) &&
          !memcmp(site->total.hist_rounded, want_v, sizeof want_v),
          "the value histograms differ from the elements' bins");
    emu_ctx ctx2;
    emu_ctx_init(&ctx2, 5);
    ctx2.measure = EMU_MEASURE_ALL;
    ctx2.ref_rate = 1.0;
    emu_stats st2;
    emu_stats_init(&st2);
    ctx2.stats = &st2;
    emu_scaled_tensor q2;
    sq_alloc(&q2, &sf, 2, shape, 1);
    rc = emu_t_quantize_scaled(&ctx2, "q.x", &q2, &x, NULL, NULL, &test_rne);
    const emu_site *s2 = st2.count == 1 ? &st2.sites[0] : NULL;
    CHECK(rc == 0 && site && s2 && s2->total.nan == site->total.nan &&
          s2->total.nan_produced == site->total.nan_produced &&
          !memcmp(s2->total.hist_exact, want_x, sizeof want_x) &&
          !memcmp(s2->total.hist_rounded, want_v, sizeof want_v),
          "without the observer: nan %" PRIu64 ", nan_produced %" PRIu64
          " or the value histograms differ", s2 ? s2->total.nan : 0,
          s2 ? s2->total.nan_produced : 0);
    emu_scaled_free(&q2);
    emu_stats_free(&st2);
    emu_scaled_free(&q);
    emu_tensor_free(&x);
    emu_stats_free(&st);
    FINISH("quantize site: NaN and observer", before);
}
END_TEST

/* Quotients next to a rounding boundary.  With a tensor scale g that is
 * not a power of two, x / g is rounded to binary32 first on the fast path,
 * and can land exactly on a grid point or midpoint of the element format
 * while the true quotient lies just beside it: x = RN32(B g) for a
 * boundary B with g in (1, 2) gives |x / g - B| < ulp(B) / 2.  Those
 * elements must be redone from the exact quotient; here every boundary of
 * three element formats, both signs and the neighbouring binary32 values,
 * in every deterministic mode, against MPFR. */
START_TEST(near_boundaries)
{
    unsigned long long before = begin_test();
    static const char *const specs[] = { "elem=e2m1,scale=none,tensor=yes",
                                         "elem=e3m2,scale=none,tensor=yes",
                                         "elem=e4m3,scale=none,tensor=yes" };
    static const float gs[] = { 0x1.3c0ca4p+0f, 0x1.fffffep+0f, 0x1.000002p+0f };
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        emu_scaled_format sf = sfmt(specs[si]);
        const emu_format *ef = &sf.elem;
        /* the positive values of the element format, then the midpoints */
        double vals[512];
        int nv = 0;
        for (double v = ef->min_value; v <= ef->max && nv < 255;
             v = emu_next_up(ef, v))
            vals[nv++] = v;
        int nb = nv;
        for (int i = 0; i + 1 < nv && nb < 510; i++)
            vals[nb++] = (vals[i] + vals[i + 1]) / 2;
        vals[nb++] = ef->min_value / 2;
        for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++) {
            const double g = gs[gi];
            float *x = malloc((size_t)nb * 6 * sizeof *x);
            ck_assert(x);
            size_t n = 0;
            for (int i = 0; i < nb; i++) {
                float c = (float)(vals[i] * g);
                const float cand[3] = { nextafterf(c, 0.0f), c,
                                        nextafterf(c, INFINITY) };
                for (int k = 0; k < 3; k++) {
                    x[n++] = cand[k];
                    x[n++] = -cand[k];
                }
            }
            for (int m = 0; m < TEST_DET_MODES; m++) {
                emu_quant_opts o;
                memset(&o, 0, sizeof o);
                o.mode = (emu_rnd)m;
                o.tensor_scale = g;
                char desc[300];
                snprintf(desc, sizeof desc, "near boundaries: %s, g %a, mode %s",
                         specs[si], g, emu_rnd_name(o.mode));
                size_t shape[1] = { n };
                check_quantization(&sf, desc, 1, shape, 0, x, &o);
            }
            free(x);
        }
    }
    FINISH("quotients next to rounding boundaries", before);
}
END_TEST

/* The error split of a scaled matmul: with the unquantized sources given,
 * the quantization error is measured against the sources' own product
 * (alpha alone, not the tensor scales the dequantized operands leave out).
 * Positive data, so no cancellation: the relative quantization error of
 * each dot product is bounded by the elements' (below 1/2 for E2M1 with
 * its scale; 2^-4 for E4M3), and its mean is checked against an MPFR
 * recomputation from the sources. */
START_TEST(matmul_error_split)
{
    unsigned long long before = begin_test();
    static const char *const specs[] = { "nvfp4", "elem=e4m3,scale=none,tensor=yes",
                                         "mxfp4" };
    static const double bound[] = { 0.5, 0.0625, 0.5 };
    test_rng g = test_rng_make(0x5b1);
    for (size_t si = 0; si < 3; si++) {
        emu_scaled_format sf = sfmt(specs[si]);
        const size_t M = 5, K = 48, N = 6;
        emu_error err;
        emu_tensor a, b, out;
        ck_assert(emu_tensor_alloc4(&a, "a", EMU_ROLE_ACTIVATION,
                                    test_format("binary32"), M, K, 0, 0, &err) == 0);
        ck_assert(emu_tensor_alloc4(&b, "b", EMU_ROLE_WEIGHT,
                                    test_format("binary32"), K, N, 0, 0, &err) == 0);
        ck_assert(emu_tensor_alloc4(&out, "out", EMU_ROLE_OTHER,
                                    test_format("binary32"), M, N, 0, 0, &err) == 0);
        for (size_t i = 0; i < a.n; i++)
            a.data[i] = (float)ldexp(1.0 + (double)test_below(&g, 1000) / 1000.0,
                                     (int)test_below(&g, 8) + 3);
        for (size_t i = 0; i < b.n; i++)
            b.data[i] = (float)ldexp(1.0 + (double)test_below(&g, 1000) / 1000.0,
                                     -(int)test_below(&g, 8) - 5);
        emu_scaled_tensor qa, qb;
        size_t sa[2] = { M, K }, sb[2] = { K, N };
        sq_alloc(&qa, &sf, 2, sa, 1);
        sq_alloc(&qb, &sf, 2, sb, 0);
        ck_assert(emu_scaled_quantize(&qa, a.data, NULL, NULL, NULL, &err) == 0);
        ck_assert(emu_scaled_quantize(&qb, b.data, NULL, NULL, NULL, &err) == 0);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 3);
        emu_stats st;
        emu_stats_init(&st);
        ctx.stats = &st;
        ctx.measure = EMU_MEASURE_ALL;
        ctx.ref_rate = 1.0;
        emu_matmul_opts o = { .accum = test_default_accum(), .a_src = &a,
                              .b_src = &b, .alpha = 0.5 };
        int rc = emu_t_matmul_scaled(&ctx, "mm", &out, &qa, &qb, &o, &test_rne);
        CHECK(rc == 0, "%s: matmul failed: %s", specs[si], ctx.err.message);
        /* the mean quantization error, from MPFR: |dot(values) - dot(x)| / dot(x) */
        double want = 0.0;
        mpfr_t dv, dx, t;
        mpfr_inits2(256, dv, dx, t, (mpfr_ptr)0);
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) {
                mpfr_set_zero(dv, 1);
                mpfr_set_zero(dx, 1);
                for (size_t k = 0; k < K; k++) {
                    mpfr_set_d(t, emu_scaled_value(&qa, i * K + k), MPFR_RNDN);
                    mpfr_mul_d(t, t, emu_scaled_value(&qb, k * N + j), MPFR_RNDN);
                    mpfr_add(dv, dv, t, MPFR_RNDN);
                    mpfr_set_flt(t, a.data[i * K + k], MPFR_RNDN);
                    mpfr_mul_d(t, t, (double)b.data[k * N + j], MPFR_RNDN);
                    mpfr_add(dx, dx, t, MPFR_RNDN);
                }
                mpfr_sub(t, dv, dx, MPFR_RNDN);
                mpfr_div(t, t, dx, MPFR_RNDN);
                want += fabs(mpfr_get_d(t, MPFR_RNDN));
            }
        mpfr_clears(dv, dx, t, (mpfr_ptr)0);
        want /= (double)(M * N);
        const emu_site *site = st.count ? &st.sites[0] : NULL;
        double got = site && site->total.dot_samples
                         ? site->total.quant_sum / (double)site->total.dot_samples
                         : -1.0;
        CHECK(site && site->total.dot_samples == M * N &&
              got <= bound[si] && fabs(got - want) <= 1e-9 * want,
              "%s: mean quantization error %.10g over %" PRIu64 " dot products, "
              "MPFR from the sources %.10g (bound %g)", specs[si], got,
              site ? site->total.dot_samples : 0, want, bound[si]);
        emu_stats_free(&st);
        emu_scaled_free(&qa);
        emu_scaled_free(&qb);
        emu_tensor_free(&a);
        emu_tensor_free(&b);
        emu_tensor_free(&out);
    }
    FINISH("error split of a scaled matmul", before);
}
END_TEST

/* range=error: data that needs a scale the scale format cannot hold is
 * refused, naming the block, before anything is written; data within the
 * range quantizes exactly as with range=clamp; a block of zeros is fine.
 * E8M0 holds 2^-127 .. 2^127, so with E4M3 elements (emax 8) a block whose
 * amax is below 2^-119 needs a clamped scale (2^-127 - 8 < -127). */
START_TEST(range_error)
{
    unsigned long long before = begin_test();
    emu_scaled_format strict = sfmt("mxfp8,block=4,range=error");
    emu_scaled_format loose = sfmt("mxfp8,block=4");
    char canon[256];
    emu_scaled_format_string(&strict, canon, sizeof canon);
    CHECK(strstr(canon, "range=error") != NULL && strict.strict_range,
          "range=error is lost in the canonical spec '%s'", canon);
    emu_scaled_format back = sfmt(canon);
    CHECK(back.strict_range, "'%s' does not parse back with range=error", canon);
    float ok[8] = { 1.0f, -3.0f, 0.5f, 100.0f, 0.0f, 0.0f, 0.0f, 0.0f };
    float bad[8] = { 1.0f, 2.0f, 3.0f, 4.0f, 0x1p-121f, 0x1p-125f, 0.0f, 0.0f };
    size_t shape[1] = { 8 };
    emu_scaled_tensor qs, ql;
    sq_alloc(&qs, &strict, 1, shape, 0);
    sq_alloc(&ql, &loose, 1, shape, 0);
    emu_error err;
    CHECK(emu_scaled_quantize(&qs, ok, NULL, NULL, NULL, &err) == 0 &&
          emu_scaled_quantize(&ql, ok, NULL, NULL, NULL, &err) == 0,
          "in-range data refused: %s", err.message);
    for (size_t i = 0; i < 8; i++)
        CHECK(test_same(emu_scaled_value(&qs, i), emu_scaled_value(&ql, i)),
              "element %zu: range=error %a, range=clamp %a", i,
              emu_scaled_value(&qs, i), emu_scaled_value(&ql, i));
    memset(&err, 0, sizeof err);
    int rc = emu_scaled_quantize(&qs, bad, NULL, NULL, NULL, &err);
    CHECK(rc == -1 && err.code == EMU_ERANGE && !strcmp(err.key, "range") &&
          strstr(err.message, "block 1"),
          "amax 2^-121 with E8M0 scales: rc %d, key '%s', message '%s'", rc,
          err.key, err.message);
    emu_quant_counts c;
    memset(&c, 0, sizeof c);
    CHECK(emu_scaled_quantize(&ql, bad, NULL, &c, NULL, &err) == 0 &&
          c.scale_clamped == 1, "range=clamp: %" PRIu64 " blocks clamped, "
          "expected 1", c.scale_clamped);
    emu_scaled_free(&qs);
    emu_scaled_free(&ql);
    FINISH("range=error", before);
}
END_TEST

/* ---- the fast paths of divisors that are not powers of two ----------------
 * scaled.c rounds x / d for such divisors without the choke point: nearest
 * even through RN32(x * (1/d)) and the lean kernel (boundary-shaped values
 * redone), stochastic modes by the choke point's decision written out
 * branch-free.  The MPFR oracle checks the deterministic results; the
 * stochastic ones must be the choke point's own on the same words. */

/* Every element of q (quantized from x with seed, stream and rnd) against
 * emu_round2_word on the pair the choke point is given, hi = fl(x / d)
 * and lo = fl(fma(-hi, d, x) / d), with word i of the stream. */
static unsigned long long check_sr_words(const emu_scaled_tensor *q,
                                         const float *x, const emu_rounding *rnd,
                                         uint64_t seed, uint64_t stream,
                                         const char *desc)
{
    unsigned long long n = 0;
    emu_rounding r = *rnd;
    r.saturate = true;
    for (size_t i = 0; i < q->n; i++) {
        const size_t b = emu_scaled_block_of(q, i);
        const double d = (q->sf.block_scaled ? (double)q->scale[b] : 1.0) *
                         (double)q->tensor_scale;
        n++;
        if (isnan(d)) {
            /* a NaN block's elements are zeros (of either sign: the MX
             * path keeps the sign of a -0 source), decoded as NaN */
            CHECK(q->elem[i] == 0.0f, "%s: element %zu of NaN block %zu is "
                  "%a, not zero", desc, i, b, (double)q->elem[i]);
            continue;
        }
        double want;
        {
            const double hi = x[i] / d;
            int e;
            const bool pow2 = fabs(frexp(d, &e)) == 0.5;
            const double lo = !pow2 && isfinite(hi) && hi != 0.0
                                  ? fma(-hi, d, x[i]) / d
                                  : 0.0;
            want = emu_round2_word(&q->sf.elem, hi, lo, &r,
                                   emu_random64(seed, stream, i), NULL);
            if (q->sf.int_elem)
                want += 0.0;
        }
        CHECK(test_same(q->elem[i], want), "%s: element %zu x=%a d=%a: %a, "
              "the choke point on word %zu gives %a", desc, i, (double)x[i], d,
              (double)q->elem[i], i, want);
    }
    return n;
}

/* Stochastic quantization through every kind of divisor, all modes of
 * random bits, against the choke point on the same words: random data
 * (zeros, binary32 subnormals, huge values), tensor scales that put the
 * quotients past the element format's max (saturation) and deep into its
 * subnormals (where fr 2^64 is no integer), and non-finite values (NaN
 * blocks; infinities into a per-tensor format).  Tensors of several chunks,
 * so that the words follow the elements across chunk boundaries. */
START_TEST(sr_fast_paths_match_choke_point)
{
    unsigned long long before = begin_test(), cases = 0;
    static const char *const specs[] = {
        "nvfp4", "elem=e4m3,scale=none,tensor=yes",
        "elem=e2m1,scale=none,tensor=yes", "elem=e5m2,scale=none,tensor=yes",
        "elem=e4m3fnuz,scale=none,tensor=yes",
        "elem=dlfloat,scale=none,tensor=yes",
        "elem=e3m2,scale=e4m3,block=8,rule=amax",
        "elem=e2m1,scale=e4m3,block=16,rule=amax,tensor=yes,scale_mode=ru",
        "mxfp6-e2m3", "mxint8,block=5" };
    static const double gs[] = { 0.0, 0x1.3c0ca4p+0, 0x1p-24, 0x1.8p+40,
                                 0x1.fffffep+0 };
    static const unsigned bits[] = { 64, 1, 3, 8, 23, 52, 63 };
    test_rng g = test_rng_make(0x5f);
    const size_t R = 70, C = 131, n = R * C; /* > 2 chunks of 4096 */
    float *x = malloc(n * sizeof *x);
    ck_assert(x);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        const emu_scaled_format sf = sfmt(specs[s]);
        for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++) {
            if (!sf.tensor_scale && gi > 0)
                break;
            for (size_t bi = 0; bi < sizeof bits / sizeof bits[0]; bi++) {
                gen_data(&g, x, n);
                /* some non-finite values where the format takes them */
                const bool nan_ok = sf.block_scaled ? sf.scale.has_nan
                                                    : sf.elem.has_nan;
                const bool inf_ok = sf.block_scaled ? sf.scale.has_nan : true;
                for (int k = 0; k < 6; k++) {
                    size_t i = (size_t)test_below(&g, n);
                    if (k < 3 && nan_ok)
                        x[i] = NAN;
                    else if (k >= 3 && inf_ok)
                        x[i] = k & 1 ? -INFINITY : INFINITY;
                }
                emu_rounding rnd = test_rne;
                rnd.mode = bits[bi] == 64 ? EMU_RS : EMU_RS_BITS;
                rnd.sr_bits = bits[bi];
                emu_quant_opts o;
                memset(&o, 0, sizeof o);
                o.mode = rnd.mode;
                o.sr_bits = rnd.sr_bits;
                o.seed = 1000 + s;
                o.stream = 3 + bi;
                o.tensor_scale = gs[gi];
                const size_t shape[2] = { R, C };
                emu_scaled_tensor q;
                sq_alloc(&q, &sf, 2, shape, 1);
                emu_error err;
                int rc = emu_scaled_quantize(&q, x, &o, NULL, NULL, &err);
                CHECK(rc == 0, "%s: quantize: %s", specs[s], err.message);
                char desc[200];
                snprintf(desc, sizeof desc, "%s, g %a, %u random bits",
                         specs[s], gs[gi], bits[bi]);
                if (rc == 0)
                    cases += check_sr_words(&q, x, &rnd, o.seed, o.stream, desc);
                emu_scaled_free(&q);
            }
        }
    }
    free(x);
    fprintf(stderr, "test_scaled: %-44s %llu cases\n",
            "stochastic fast paths vs the choke point", cases);
    FINISH("stochastic fast paths vs the choke point", before);
}
END_TEST

/* The boundaries of f up to its max, positive: grid points, midpoints,
 * and the midpoint above max (the overflow threshold).  Returns how many. */
static int boundaries(const emu_format *f, double *out, int cap)
{
    int n = 0;
    double prev = 0.0;
    for (double v = f->min_value; v <= f->max && n + 2 < cap;
         v = emu_next_up(f, v)) {
        out[n++] = (prev + v) / 2;
        out[n++] = v;
        prev = v;
    }
    out[n++] = f->max + (f->max - emu_next_down(f, f->max)) / 2;
    return n;
}

/* NVFP4 with quotients next to every boundary of E2M1 through
 * block scales that are not powers of two: each block carries an amax that
 * makes its E4M3 scale s (6 s g, rounded to binary32), then the boundaries
 * B times s g and their binary32 neighbours.  Every deterministic mode
 * against MPFR, and stochastic rounding against the choke point. */
START_TEST(nvfp4_near_boundaries)
{
    unsigned long long before = begin_test(), cases = 0;
    const emu_scaled_format sf = sfmt("nvfp4");
    double bnd[64];
    const int nbnd = boundaries(&sf.elem, bnd, 64);
    static const float gs[] = { 0x1.3cp+0f, 0x1.fffffep+0f, 0x1.000002p-3f,
                                0x1.5555p-100f };
    static const double ss[] = { 1.0, 1.125, 1.375, 0x1.ep-3, 0x1.cp+5,
                                 0x1.2p-6, 0x1.8p-8 /* subnormal */, 448.0 };
    for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++) {
        float *x = malloc(sizeof ss / sizeof ss[0] * (size_t)nbnd * 6 * 16 *
                          sizeof *x);
        ck_assert(x);
        size_t n = 0;
        for (size_t si = 0; si < sizeof ss / sizeof ss[0]; si++) {
            const double d = ss[si] * gs[gi];
            /* the candidates of this scale, 15 to a block behind its amax */
            float cand[64 * 6];
            size_t nc = 0;
            for (int k = 0; k < nbnd; k++) {
                if (bnd[k] >= 6.0)
                    continue; /* above the amax: it would set the scale */
                const float c = (float)(bnd[k] * d);
                const float three[3] = { nextafterf(c, 0.0f), c,
                                         nextafterf(c, INFINITY) };
                for (int j = 0; j < 3; j++) {
                    cand[nc++] = three[j];
                    cand[nc++] = -three[j];
                }
            }
            for (size_t c0 = 0; c0 < nc; c0 += 15) {
                x[n++] = (float)(6.0 * d);
                for (size_t j = 0; j < 15; j++)
                    x[n++] = c0 + j < nc ? cand[c0 + j] : 0.0f;
            }
        }
        const size_t shape[2] = { n / 16, 16 };
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_quant_opts o;
            memset(&o, 0, sizeof o);
            o.mode = (emu_rnd)m;
            o.tensor_scale = gs[gi];
            char desc[200];
            snprintf(desc, sizeof desc, "nvfp4 near boundaries: g %a, mode %s",
                     (double)gs[gi], emu_rnd_name(o.mode));
            check_quantization(&sf, desc, 2, shape, 1, x, &o);
        }
        for (int b = 0; b < 2; b++) {
            emu_rounding rnd = test_rne;
            rnd.mode = b ? EMU_RS_BITS : EMU_RS;
            rnd.sr_bits = b ? 5 : 64;
            emu_quant_opts o;
            memset(&o, 0, sizeof o);
            o.mode = rnd.mode;
            o.sr_bits = rnd.sr_bits;
            o.seed = 77;
            o.stream = gi;
            o.tensor_scale = gs[gi];
            emu_scaled_tensor q;
            sq_alloc(&q, &sf, 2, shape, 1);
            emu_error err;
            CHECK(emu_scaled_quantize(&q, x, &o, NULL, NULL, &err) == 0,
                  "nvfp4 near boundaries, SR: %s", err.message);
            char desc[200];
            snprintf(desc, sizeof desc, "nvfp4 near boundaries: g %a, %s",
                     (double)gs[gi], emu_rnd_name(rnd.mode));
            cases += check_sr_words(&q, x, &rnd, o.seed, o.stream, desc);
            emu_scaled_free(&q);
        }
        free(x);
    }
    fprintf(stderr, "test_scaled: %-44s %llu cases\n",
            "nvfp4 near boundaries (SR vs choke point)", cases);
    FINISH("nvfp4 quotients next to rounding boundaries", before);
}
END_TEST

/* AMAX-rule scales whose quotient amax / (max_elem g) lies next to every
 * boundary of E4M3 (blocks of one element: the amax is the element), the
 * clamped ones beyond E4M3's max and below its smallest subnormal
 * included: the scales (fast path or block_scale) against MPFR. */
START_TEST(amax_scales_near_boundaries)
{
    unsigned long long before = begin_test();
    const emu_scaled_format sf =
        sfmt("elem=e2m1,scale=e4m3,block=1,rule=amax,tensor=yes");
    double bnd[600];
    const int nbnd = boundaries(&sf.scale, bnd, 590);
    static const float gs[] = { 0x1.3c0ca4p+0f, 0x1.000002p+0f, 0x1p-3f };
    float *x = malloc((size_t)(nbnd + 2) * 6 * sizeof *x);
    ck_assert(x);
    for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++) {
        size_t n = 0;
        for (int k = 0; k < nbnd + 2; k++) {
            const double v = k < nbnd ? bnd[k]
                             : k == nbnd ? sf.scale.min_value / 4
                                         : sf.scale.max * 4;
            const float c = (float)(v * 6.0 * gs[gi]);
            const float three[3] = { nextafterf(c, 0.0f), c,
                                     nextafterf(c, INFINITY) };
            for (int j = 0; j < 3; j++) {
                x[n++] = three[j];
                x[n++] = -three[j];
            }
        }
        const size_t shape[1] = { n };
        emu_quant_opts o;
        memset(&o, 0, sizeof o);
        o.tensor_scale = gs[gi];
        char desc[200];
        snprintf(desc, sizeof desc, "E4M3 scales near boundaries: g %a",
                 (double)gs[gi]);
        check_quantization(&sf, desc, 1, shape, 0, x, &o);
    }
    free(x);
    FINISH("AMAX scales next to rounding boundaries", before);
}
END_TEST

/* floor(F 2^64) of the exact |x / d| in f (F its fraction at the quantum
 * 2^q that round.c uses: the binade's, or the subnormal one), and
 * M = floor(|x / d| 2^-q), from MPFR; *exact if F = 0. */
static uint64_t exact_fq(const emu_format *f, float x, double d, double *M,
                         int *q, bool *exact)
{
    mpfr_t Q, t, fl;
    mpfr_inits2(WPREC + 80, Q, t, fl, (mpfr_ptr)0);
    quot_sticky(Q, fabs((double)x), d);
    const int e = (int)mpfr_get_exp(Q) - 1; /* 2^e <= |Q| < 2^(e+1) */
    *q = e < f->emin ? (f->subnormals ? f->emin - f->p + 1 : f->emin)
                     : e - f->p + 1;
    mpfr_mul_2si(t, Q, -*q, MPFR_RNDN); /* exact */
    mpfr_floor(fl, t);
    *M = mpfr_get_d(fl, MPFR_RNDN);
    mpfr_sub(t, t, fl, MPFR_RNDN); /* F, exact */
    *exact = mpfr_zero_p(t) != 0;
    mpfr_mul_2si(t, t, 64, MPFR_RNDN);
    mpfr_floor(t, t);
    mpz_t z;
    mpz_init(z);
    mpfr_get_z(z, t, MPFR_RNDN);
    uint64_t fq = (uint64_t)mpz_get_ui(z) & 0xffffffffu;
    mpz_fdiv_q_2exp(z, z, 32);
    fq |= (uint64_t)mpz_get_ui(z) << 32;
    mpz_clear(z);
    mpfr_clears(Q, t, fl, (mpfr_ptr)0);
    return fq;
}

/* The stochastic fast path on words chosen next to each decision's
 * threshold (random words almost never tell the low bits of F, where the
 * remainder lo enters): against the choke point on the same words, and
 * the choke point against the exact decision from MPFR. */
START_TEST(sr_threshold_words)
{
    unsigned long long before = begin_test(), cases = 0;
    static const char *const fmts[] = { "e2m1", "e3m2", "e4m3", "e5m2",
                                        "e4m3fnuz", "dlfloat", "int8" };
    static const double ds[] = { 0x1.cp+0 * 0x1.3c0ca4p+0, 0x1.2p-6 * 0x1.fffffep-1,
                                 3.0, 0x1.5p+30 * 0x1.000002p+0,
                                 0x1.ep-20 * 0x1.8p-3 };
    static const unsigned bitsv[] = { 64, 5, 40 };
    enum { NX = 64, NW = 40 };
    test_rng g = test_rng_make(0x7e5);
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
        const emu_format *f = test_format(fmts[fi]);
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (size_t bi = 0; bi < sizeof bitsv / sizeof bitsv[0]; bi++) {
                const double d = ds[di];
                const unsigned b = bitsv[bi];
                emu_rounding r = test_rne;
                r.mode = b == 64 ? EMU_RS : EMU_RS_BITS;
                r.sr_bits = b;
                r.saturate = true;
                /* quotients from deep below f's subnormals to past its max */
                int elo, ehi;
                frexp(d, &elo);
                ehi = elo + f->emax + 3;
                elo = elo + f->emin - f->p - 6;
                for (int k = 0; k < NX; k++) {
                    float x = rand_f32(&g, elo < -149 ? -149 : elo,
                                       ehi > 127 ? 127 : ehi);
                    double M;
                    int q;
                    bool exact;
                    const uint64_t fq = exact_fq(f, x, d, &M, &q, &exact);
                    /* the threshold word: up iff word >= 2^64 - Fq (in the
                     * top b bits: w >= 2^b - (Fq >> (64 - b))) */
                    const unsigned sh = 64 - b;
                    const uint64_t thr = ((UINT64_C(0) - (fq >> sh)) &
                                          (UINT64_MAX >> sh)) << sh;
                    float xs[NW], got[NW];
                    uint64_t ws[NW];
                    for (int j = 0; j < NW; j++) {
                        xs[j] = x;
                        int64_t delta = j < 3 ? j - 1
                                        : j < 33 ? (j & 1 ? 1 : -1) *
                                                       ((int64_t)1 << ((j - 3) / 2 + 1))
                                                 : 0;
                        /* below the compared bits: anything */
                        const uint64_t low = test_next(&g) &
                                             ((UINT64_C(1) << sh) - 1);
                        ws[j] = j < 33 ? (thr + ((uint64_t)delta << sh)) | low
                                       : test_next(&g);
                    }
                    const bool ran = emu_scaled_sr_words(f, &r, d, got, xs, ws,
                                                         NW);
                    CHECK(ran, "%s: the stochastic fast path refused", fmts[fi]);
                    if (!ran)
                        break;
                    const double hi = (double)x / d;
                    const double lo = isfinite(hi) && hi != 0.0
                                          ? fma(-hi, d, (double)x) / d
                                          : 0.0;
                    for (int j = 0; j < NW; j++) {
                        const double want = emu_round2_word(f, hi, lo, &r, ws[j],
                                                            NULL);
                        cases++;
                        CHECK(test_same(got[j], want), "%s, d %a, %u bits: x %a "
                              "word %016" PRIx64 ": fast path %a, choke point %a",
                              fmts[fi], d, b, (double)x, ws[j], (double)got[j],
                              want);
                        /* and the choke point against the exact decision */
                        const uint64_t a = fq >> sh, w = ws[j] >> sh;
                        const bool up = !exact &&
                                        a > (UINT64_MAX >> sh) - w;
                        double v = ldexp(M + (up ? 1.0 : 0.0), q);
                        v = v > f->max ? f->max : v;
                        CHECK(fabs(want) == v, "%s, d %a, %u bits: x %a word "
                              "%016" PRIx64 ": choke point %a, exact (MPFR) "
                              "decision %a", fmts[fi], d, b, (double)x, ws[j],
                              want, v);
                    }
                }
            }
    }
    fprintf(stderr, "test_scaled: %-44s %llu cases\n",
            "stochastic decisions at threshold words", cases);
    FINISH("stochastic decisions at threshold words", before);
}
END_TEST

/* The 1-d layout's memory-order paths (scales_1d, the dequantization and
 * element-scale rows, the choke point's power-of-two quotients) against
 * the definitions: scales and elements as emu_scaled_quantize's block
 * visits set them, element scales and values element by element through
 * emu_scaled_block_of.  Every axis of 1-, 2- and 3-d shapes (inner 1 and
 * > 1, ragged last blocks), data with zeros, subnormals, huge values,
 * infinities and NaNs.  Run at each EMU_ISA level (tests/CMakeLists.txt):
 * the rows are compiled per level. */
/* Storage kept from call to call (emu_quant_keep: emu_quant_keep_shape
 * and the element scales of emu_t_quantize_scaled_kept, what the training
 * layers use) against a fresh scaled tensor and emu_t_quantize_scaled for
 * each call: the same elements, scales, tensor scale and site statistics,
 * over a sequence of shapes, axes and formats that grows the buffers and
 * reuses them for smaller tensors (a kept tensor's old elements and
 * scales must not show). */
START_TEST(kept_storage)
{
    unsigned long long before = begin_test(), cases = 0;
    test_rng g = test_rng_make(0x6ee9);
    static const char *const specs[] = { "mxfp8", "mxfp4", "nvfp4",
                                         "mxfp8,block=4x3",
                                         "elem=e4m3,scale=none,tensor=yes" };
    emu_quant_keep k;
    memset(&k, 0, sizeof k);
    for (int it = 0; it < 60; it++) {
        const size_t s = (size_t)test_below(&g, 5);
        emu_scaled_format sf = sfmt(specs[s]);
        /* a few shapes only, so that later calls meet earlier ones */
        const size_t R = 1 + 7 * (size_t)test_below(&g, 3);
        const size_t C = 16 + 16 * (size_t)test_below(&g, 3);
        const int axis = sf.block[1] > 1 ? 1 : (int)test_below(&g, 2);
        emu_rounding rnd = test_rne;
        const int m = (int)test_below(&g, 3);
        rnd.mode = m == 0 ? EMU_RNE : m == 1 ? EMU_RD : EMU_RS;
        emu_error err;
        emu_tensor x;
        ck_assert(emu_tensor_alloc4(&x, "x", EMU_ROLE_ACTIVATION,
                                    test_format("binary32"), R, C, 0, 0,
                                    &err) == 0);
        gen_data(&g, x.data, x.n);
        if (test_below(&g, 4) == 0) /* a NaN block now and then */
            x.data[test_below(&g, x.n)] = NAN;
        const size_t shape[2] = { R, C };
        emu_ctx ca, cb;
        emu_stats sa, sb;
        emu_ctx *cs[2] = { &ca, &cb };
        emu_stats *ss[2] = { &sa, &sb };
        for (int c = 0; c < 2; c++) {
            emu_ctx_init(cs[c], 41);
            cs[c]->measure = EMU_MEASURE_ALL;
            cs[c]->ref_rate = 0.25;
            cs[c]->op_index = (uint64_t)it;
            emu_stats_init(ss[c]);
            cs[c]->stats = ss[c];
        }
        emu_scaled_tensor q;
        sq_alloc(&q, &sf, 2, shape, axis);
        int ra = emu_t_quantize_scaled(&ca, "q", &q, &x, NULL, NULL, &rnd);
        int rr = emu_quant_keep_shape(&k, &sf, 2, shape, axis, &err);
        ck_assert_msg(rr == 0, "emu_quant_keep_shape: %s", err.message);
        int rb = emu_t_quantize_scaled_kept(&cb, "q", &k.q, &x, NULL, NULL,
                                            &rnd, &k);
        size_t d = 0;
        if (ra == 0 && rb == 0) {
            d += q.n != k.q.n || q.nblocks != k.q.nblocks || q.axis != k.q.axis;
            for (size_t i = 0; !d && i < q.n; i++)
                d += !test_same(q.elem[i], k.q.elem[i]);
            for (size_t b = 0; !d && b < q.nblocks; b++)
                d += !test_same(q.scale[b], k.q.scale[b]);
            d += !test_same(q.tensor_scale, k.q.tensor_scale);
            const emu_site_stats *a = &emu_stats_find(&sa, "q", EMU_ROLE_ACTIVATION)->total;
            const emu_site_stats *b = &emu_stats_find(&sb, "q", EMU_ROLE_ACTIVATION)->total;
            d += !(a->results == b->results && a->inexact == b->inexact &&
                   a->underflow == b->underflow && a->to_zero == b->to_zero &&
                   a->subnormal == b->subnormal && a->overflow == b->overflow &&
                   a->nan == b->nan && a->nan_produced == b->nan_produced &&
                   a->ref_samples == b->ref_samples &&
                   test_same(a->ulp_sum, b->ulp_sum) &&
                   test_same(a->rel_sum, b->rel_sum) &&
                   !memcmp(a->hist_exact, b->hist_exact, sizeof a->hist_exact) &&
                   !memcmp(a->hist_rounded, b->hist_rounded, sizeof a->hist_rounded) &&
                   !memcmp(a->hist_scale, b->hist_scale, sizeof a->hist_scale));
        }
        CHECK(ra == rb && d == 0, "call %d, %s %s, %zux%zu along %d: fresh rc "
              "%d, kept rc %d; %zu elements, scales or statistics differ",
              it, specs[s], emu_rnd_name(rnd.mode), R, C, axis, ra, rb, d);
        cases++;
        emu_stats_free(&sa);
        emu_stats_free(&sb);
        emu_scaled_free(&q);
        emu_tensor_free(&x);
    }
    emu_quant_keep_free(&k);
    fprintf(stderr, "test_scaled: %-44s %llu cases\n", "kept storage", cases);
    FINISH("kept storage", before);
}
END_TEST

START_TEST(memory_order_paths)
{
    unsigned long long before = begin_test(), cases = 0;
    test_rng g = test_rng_make(0x0de7);
    static const char *const specs[] = { "mxfp8", "mxfp4", "mxint8",
                                         "mxfp6-e3m2", "nvfp4",
                                         "mxfp8-e5m2",
                                         "mxfp8,tensor=yes" };
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++)
        for (int trial = 0; trial < 24; trial++) {
            emu_scaled_format sf = sfmt(specs[s]);
            const int ndim = 1 + trial % 3;
            size_t shape[3];
            for (int d = 0; d < ndim; d++)
                shape[d] = 1 + (size_t)test_below(&g, d == ndim - 1 ? 70 : 9);
            const int axis = (int)test_below(&g, (uint64_t)ndim);
            size_t n = 1;
            for (int d = 0; d < ndim; d++)
                n *= shape[d];
            emu_tensor x;
            emu_error err;
            ck_assert(emu_tensor_alloc(&x, "x", EMU_ROLE_ACTIVATION,
                                       test_format("binary32"), ndim, shape,
                                       &err) == 0);
            gen_data(&g, x.data, n);
            /* a few infinities and NaNs (their blocks' scales are NaN) */
            if (trial % 4 == 3)
                for (int k = 0; k < 2; k++)
                    x.data[test_below(&g, n)] = k ? NAN : -INFINITY;
            emu_scaled_tensor q, q2;
            sq_alloc(&q, &sf, ndim, shape, axis);
            sq_alloc(&q2, &sf, ndim, shape, axis);
            /* measured: scales only, then the choke point rounds the
             * quotients (pow2_quotients where every divisor is 2^k) */
            emu_ctx ctx;
            emu_ctx_init(&ctx, 5);
            ctx.measure = EMU_MEASURE_ALL;
            emu_stats st;
            emu_stats_init(&st);
            ctx.stats = &st;
            ctx.op_index = 3;
            int rc = emu_t_quantize_scaled(&ctx, "q.x", &q, &x, NULL, NULL,
                                           &test_rne);
            CHECK(rc == 0, "%s: emu_t_quantize_scaled: %s", specs[s],
                  ctx.err.message);
            emu_quant_opts o;
            memset(&o, 0, sizeof o);
            o.mode = EMU_RNE;
            ck_assert(emu_scaled_quantize(&q2, x.data, &o, NULL, NULL, &err) == 0);
            size_t diff = 0;
            for (size_t b = 0; b < q.nblocks; b++)
                diff += !test_same(q.scale[b], q2.scale[b]);
            /* (a NaN block's elements stand for nothing: the choke
             * point writes them +0, the quantizer's paths keep the sign
             * of a zero; only the NaN value is defined) */
            for (size_t i = 0; i < n; i++)
                diff += !isnan(q.scale[emu_scaled_block_of(&q, i)]) &&
                        !test_same(q.elem[i], q2.elem[i]);
            CHECK(diff == 0, "%s, %d-d axis %d: %zu scales or elements differ "
                  "from emu_scaled_quantize's", specs[s], ndim, axis, diff);
            float *es = malloc(n * sizeof *es), *dq = malloc(n * sizeof *dq);
            ck_assert(es && dq);
            emu_scaled_element_scales(&q, es);
            for (size_t i = 0; i < n; i++) {
                const float want = q.scale[emu_scaled_block_of(&q, i)];
                CHECK(test_same(es[i], want), "%s, %d-d axis %d: element %zu's "
                      "scale %a, its block's %a", specs[s], ndim, axis, i,
                      (double)es[i], (double)want);
            }
            for (int with_g = 0; with_g < 2; with_g++) {
                /* refused iff a product is not a binary32 value (with
                 * the tensor scale) */
                bool wide = false;
                for (size_t i = 0; i < n; i++) {
                    const double sb = q.scale[emu_scaled_block_of(&q, i)];
                    const double v = (double)q.elem[i] * sb *
                                     (with_g ? q.tensor_scale : 1.0);
                    wide |= !isnan(v) && (double)(float)v != v;
                }
                const int drc = emu_scaled_dequantize(&q, dq, with_g, &err);
                CHECK((drc != 0) == wide, "%s, %d-d axis %d: dequantize rc %d,"
                      " a product not binary32: %d", specs[s], ndim, axis, drc,
                      (int)wide);
                for (size_t i = 0; i < n && !drc; i++) {
                    const double sb = q.scale[emu_scaled_block_of(&q, i)];
                    const double gs = with_g ? q.tensor_scale : 1.0;
                    const float want = isnan(sb) ? NAN
                                                 : (float)((double)q.elem[i] * sb * gs);
                    uint32_t a, b;
                    memcpy(&a, &dq[i], sizeof a);
                    memcpy(&b, &want, sizeof b);
                    CHECK(a == b, "%s, %d-d axis %d: element %zu dequantized "
                          "to %a, by the definition %a", specs[s], ndim, axis,
                          i, (double)dq[i], (double)want);
                    cases++;
                }
            }
            free(es);
            free(dq);
            emu_stats_free(&st);
            emu_scaled_free(&q);
            emu_scaled_free(&q2);
            emu_tensor_free(&x);
        }
    fprintf(stderr, "test_scaled: %-44s %llu cases (%s)\n",
            "memory-order paths", cases, getenv("EMU_ISA") ? getenv("EMU_ISA")
                                                           : "best level");
    FINISH("memory-order paths", before);
}
END_TEST

/* An element for dequantize_rows_edges, of scale sb: zeros, subnormals,
 * NaNs with payloads (quiet or signaling), infinities, values of 1..24
 * bits, drawn until the product with sb is a binary32 value (0 after 64
 * draws), or, wide, until it is not (the last draw after 64). */
static float edge_elem(test_rng *g, double sb, bool wide)
{
    float e = 0.0f;
    for (int tries = 0; tries < 64; tries++) {
        const uint64_t w = test_below(g, 256); /* (edges rare: most rows have none) */
        if (wide) /* (by a scale not 2^k: a normal product, inexact) */
            e = isfinite(sb) && frexp(sb, &(int){ 0 }) != 0.5
                    ? rand_f32(g, -9, 9) : rand_f32(g, -149, 127);
        else if (w == 0)
            e = (test_next(g) & 1) ? -0.0f : 0.0f;
        else if (w == 1)
            e = rand_f32(g, -149, -127);
        else if (w == 2) {
            uint32_t u = 0x7f800000u | (uint32_t)(1 + test_below(g, 0x7fffff));
            u |= (test_next(g) & 1) ? 0x80000000u : 0;
            memcpy(&e, &u, sizeof e);
        } else if (w == 3)
            e = (test_next(g) & 1) ? -INFINITY : INFINITY;
        else
            e = rand_f32(g, -9, 9);
        const double v = (double)e * sb;
        if (isnan(v) ? !wide : ((double)(float)v != v) == wide)
            return e;
    }
    return wide ? e : 0.0f;
}

/* emu_scaled_dequantize's binary32 rows (deq_row_f32, deq_blocks_f32:
 * no tensor scale, normal scales 2^k) against the definition, on elements and
 * scales no quantizer makes: products at the edges of binary32's normal
 * range and beyond, subnormal, zero and infinite elements, NaNs with
 * payloads, scales 2^-127 (a binary32 subnormal), 2^127, infinite, NaN
 * and not powers of two.  Every bit of every value (a NaN block's is
 * binary64's default NaN, an element's NaN keeps its payload), and the
 * refusal iff a product is not a binary32 value; at each ISA level as
 * test_scaled runs. */
START_TEST(dequantize_rows_edges)
{
    unsigned long long before = begin_test(), cases = 0;
    test_rng g = test_rng_make(0xde9f32);
    static const char *const specs[] = { "mxfp8", "mxfp8,tensor=yes" };
    for (size_t sp = 0; sp < sizeof specs / sizeof *specs; sp++)
        for (int trial = 0; trial < 150; trial++) {
            emu_scaled_format sf = sfmt(specs[sp]);
            const int ndim = 1 + trial / 3 % 3;
            size_t shape[3];
            for (int d = 0; d < ndim; d++)
                shape[d] = 1 + (size_t)test_below(&g, d == ndim - 1 ? 90 : 40);
            const int axis = (int)test_below(&g, (uint64_t)ndim);
            emu_scaled_tensor q;
            sq_alloc(&q, &sf, ndim, shape, axis);
            /* Normal powers of two, with binary32's extreme binades (the
             * rows in binary32); odd trials add one kind of edge scale to
             * one block in 16 (the rows then in binary64): 2^-127 (a
             * binary32 subnormal), NaN, 1.5 2^k or infinity. */
            for (size_t b = 0; b < q.nblocks; b++) {
                const uint64_t w = test_below(&g, 64);
                q.scale[b] = ldexpf(1.0f, w == 0 ? -126 : w == 1 ? 127
                                          : (int)test_below(&g, 31) - 15);
                if (trial % 2 == 0 || test_below(&g, 16))
                    continue;
                switch (trial / 2 % 4) {
                case 0: q.scale[b] = ldexpf(1.0f, -127); break;
                case 1: q.scale[b] = NAN; break;
                case 2:
                    q.scale[b] = ldexpf(1.5f, (int)test_below(&g, 21) - 10);
                    break;
                default: q.scale[b] = INFINITY; break;
                }
            }
            /* Elements whose products are binary32 values (drawn again
             * until so), then in two trials of three one that is not (a
             * product inexact below the normal range, zero from
             * underflow, infinite from overflow): it alone refuses the
             * tensor, which only the range check finds. */
            for (size_t i = 0; i < q.n; i++)
                q.elem[i] = edge_elem(&g, q.scale[emu_scaled_block_of(&q, i)],
                                      false);
            if (trial % 3) {
                /* (trial % 3 == 2: in a block whose scale is not 2^k if
                 * one is met, where the product is normal but inexact) */
                size_t i = (size_t)test_below(&g, q.n);
                for (int k = 0; k < 256 && trial % 3 == 2; k++) {
                    const size_t j = (size_t)test_below(&g, q.n);
                    const float sj = q.scale[emu_scaled_block_of(&q, j)];
                    if (isfinite(sj) && frexpf(sj, &(int){ 0 }) != 0.5f) {
                        i = j;
                        break;
                    }
                }
                q.elem[i] = edge_elem(&g, q.scale[emu_scaled_block_of(&q, i)],
                                      true);
            }
            q.tensor_scale = (float)ldexp(1.0 + (double)test_below(&g, 8) / 8.0,
                                          (int)test_below(&g, 9) - 4);
            float *dq = malloc(q.n * sizeof *dq);
            ck_assert(dq);
            for (int with_g = 0; with_g < 2; with_g++) {
                const double gs = with_g ? q.tensor_scale : 1.0;
                bool wide = false;
                for (size_t i = 0; i < q.n; i++) {
                    const double sb = q.scale[emu_scaled_block_of(&q, i)];
                    const double v = isnan(sb) ? NAN : (double)q.elem[i] * sb * gs;
                    wide |= !isnan(v) && (double)(float)v != v;
                }
                emu_error err;
                const int rc = emu_scaled_dequantize(&q, dq, with_g, &err);
                CHECK((rc != 0) == wide, "%d-d axis %d, trial %d: dequantize "
                      "rc %d, a product not binary32: %d", ndim, axis, trial,
                      rc, (int)wide);
                for (size_t i = 0; i < q.n && !rc; i++) {
                    const double sb = q.scale[emu_scaled_block_of(&q, i)];
                    const float want = isnan(sb) ? NAN
                                                 : (float)((double)q.elem[i] * sb * gs);
                    uint32_t a, b;
                    memcpy(&a, &dq[i], sizeof a);
                    memcpy(&b, &want, sizeof b);
                    CHECK(a == b, "%d-d axis %d, trial %d: element %zu (%a, "
                          "scale %a) dequantized to %08x, by the definition "
                          "%08x", ndim, axis, trial, i, (double)q.elem[i], sb,
                          (unsigned)a, (unsigned)b);
                    cases++;
                }
            }
            free(dq);
            emu_scaled_free(&q);
        }
    fprintf(stderr, "test_scaled: %-44s %llu cases (%s)\n",
            "dequantize rows at the edges", cases,
            getenv("EMU_ISA") ? getenv("EMU_ISA") : "best level");
    ck_assert(cases > 0);
    FINISH("dequantize rows at the edges", before);
}
END_TEST

static Suite *scaled_suite(void)
{
    Suite *s = suite_create("scaled");
    TCase *tc = tcase_create("scaled");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, oracle_presets);
    tcase_add_test(tc, oracle_custom);
    tcase_add_test(tc, spec_examples);
    tcase_add_test(tc, spec_invariants);
    tcase_add_test(tc, nonfinite_blocks);
    tcase_add_test(tc, quantize_refuses);
    tcase_add_test(tc, sr_reproducible);
    tcase_add_test(tc, sr_statistics);
    tcase_add_test(tc, pack_roundtrip);
    tcase_add_test(tc, pack_layout);
    tcase_add_test(tc, matmul_oracle);
    tcase_add_test(tc, matmul_refuses);
    tcase_add_test(tc, tensor_recipes);
    tcase_add_test(tc, spec_parsing);
    tcase_add_test(tc, quantize_site_stats);
    tcase_add_test(tc, quantize_site_nan_observer);
    tcase_add_test(tc, nvfp4_ru_current_clips_nothing);
    tcase_add_test(tc, near_boundaries);
    tcase_add_test(tc, matmul_error_split);
    tcase_add_test(tc, range_error);
    tcase_add_test(tc, sr_fast_paths_match_choke_point);
    tcase_add_test(tc, nvfp4_near_boundaries);
    tcase_add_test(tc, amax_scales_near_boundaries);
    tcase_add_test(tc, sr_threshold_words);
    tcase_add_test(tc, memory_order_paths);
    tcase_add_test(tc, kept_storage);
    tcase_add_test(tc, dequantize_rows_edges);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(scaled_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    mpfr_free_cache();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
