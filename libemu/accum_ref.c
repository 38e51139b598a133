/*
 * accum_ref.c — the accumulator models, one dot product at a time
 * (emu_accum_dot, emu_accum_dot_init): the reference definitions, written
 * to be read next to emu/accum.h.
 *
 * Called by the reductions and pooling, by the DPI-C units, by the CLI's
 * dot-product vectors, and by the GEMM engine (accum_gemm.c) for the
 * models its kernels do not cover; every kernel is tested bit-identical
 * to these definitions.  Each step rounds as accum_internal.h says.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/accum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accum_internal.h"

/* ---- the models, one dot product at a time ------------------------------ */

typedef struct dot_job {
    const emu_accum *a;
    const float *x, *y;
    ptrdiff_t incx, incy;
    size_t n;
    bool has_init;          /* the accumulator starts at init, not 0     */
    double init;
    stepper acc, prod, wide;
    emu_accum_counts *counts;
} dot_job;

/* Term i: the exact product (or x alone), rounded into prod if asked. */
static double term(const dot_job *j, size_t i)
{
    double x = j->x[(ptrdiff_t)i * j->incx];
    if (!j->y)
        return x;
    double t = x * (double)j->y[(ptrdiff_t)i * j->incy]; /* exact */
    if (j->a->round_products)
        t = step_round(&j->prod, t, 0.0, i);
    return t;
}

static void count(const dot_job *j, const emu_format *f, double s, double t,
                  double s_new)
{
    if (j->counts)
        accum_count_add(j->counts, f, s, t, s_new);
}

static double dot_sequential(const dot_job *j)
{
    double s = j->has_init ? j->init : 0.0;
    for (size_t i = 0; i < j->n; i++) {
        double t = term(j, i);
        double s_new = add_round(&j->acc, s, t, j->n + i);
        count(j, &j->a->acc, s, t, s_new);
        s = s_new;
    }
    return s;
}

/* Leaf l of the tree: the initial value, if any, is the leftmost. */
static double leaf(const dot_job *j, size_t l)
{
    if (!j->has_init)
        return term(j, l);
    return l == 0 ? j->init : term(j, l - 1);
}

/* Pairwise sum of leaves [first, first + n), n >= 1; r counts the
 * accumulator roundings done so far (post-order). */
static double pairwise(const dot_job *j, size_t first, size_t n, uint64_t *r)
{
    if (n == 1)
        return leaf(j, first);
    size_t nl = (n + 1) / 2;
    double l = pairwise(j, first, nl, r);
    double rt = pairwise(j, first + nl, n - nl, r);
    double s = add_round(&j->acc, l, rt, j->n + (*r)++);
    if (fabs(l) >= fabs(rt))
        count(j, &j->a->acc, l, rt, s);
    else
        count(j, &j->a->acc, rt, l, s);
    return s;
}

static double dot_pairwise(const dot_job *j)
{
    if (j->n == 0)
        return j->has_init ? j->init : 0.0;
    uint64_t r = 0;
    if (j->has_init)
        return pairwise(j, 0, j->n + 1, &r);
    if (j->n == 1) {
        /* One term: it still enters the accumulator, as 0 + t. */
        double t = term(j, 0);
        double s = add_round(&j->acc, 0.0, t, j->n);
        count(j, &j->a->acc, 0.0, t, s);
        return s;
    }
    return pairwise(j, 0, j->n, &r);
}

static double dot_blocked(const dot_job *j)
{
    const unsigned block = j->a->block ? j->a->block : 1;
    double w = j->has_init ? j->init : 0.0;
    uint64_t r = 0;
    for (size_t i0 = 0; i0 < j->n; i0 += block) {
        size_t i1 = j->n - i0 < block ? j->n : i0 + block;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) {
            double t = term(j, i);
            double s_new = add_round(&j->acc, s, t, j->n + r++);
            count(j, &j->a->acc, s, t, s_new);
            s = s_new;
        }
        double w_new = add_round(&j->wide, w, s, j->n + r++);
        count(j, &j->a->wide, w, s, w_new);
        w = w_new;
    }
    return w;
}

static double dot_kahan(const dot_job *j)
{
    double s = j->has_init ? j->init : 0.0, c = 0.0;
    uint64_t r = j->n;
    for (size_t i = 0; i < j->n; i++) {
        double p = term(j, i);
        double y = add_round(&j->acc, p, -c, r++);
        double t = add_round(&j->acc, s, y, r++);
        double d = add_round(&j->acc, t, -s, r++);
        c = add_round(&j->acc, d, -y, r++);
        count(j, &j->a->acc, s, y, t);
        s = t;
    }
    return s;
}

/* Signed 128-bit integers as two's complement word pairs (ISO C has no
 * 128-bit type); the fused unit's exact sums need up to 73 bits. */
typedef struct i128 {
    uint64_t hi, lo;
} i128;

static void i128_add(i128 *a, uint64_t m, bool neg)
{
    if (!neg) {
        a->lo += m;
        a->hi += a->lo < m;
    } else {
        a->hi -= a->lo < m;
        a->lo -= m;
    }
}

/* The exact value N * 2^Q of an i128 N (|N| < 2^80) as a TwoSum pair. */
static void i128_to_pair(i128 a, int Q, double *hi, double *lo)
{
    bool neg = a.hi >> 63;
    if (neg) {
        a.lo = ~a.lo + 1;
        a.hi = ~a.hi + (a.lo == 0);
    }
    uint64_t top = (a.hi << 24) | (a.lo >> 40); /* N >> 40, < 2^40 */
    uint64_t bot = a.lo & (((uint64_t)1 << 40) - 1);
    double h, l;
    emu_two_sum(ldexp((double)top, 40), (double)bot, &h, &l);
    h = ldexp(h, Q);
    l = ldexp(l, Q);
    *hi = neg ? -h : h;
    *lo = neg ? -l : l;
}

static double dot_fused(const dot_job *j)
{
    const unsigned k = j->a->fused_k ? j->a->fused_k : 1;
    const int w = (int)j->a->fused_w;
    double s = j->has_init ? j->init : 0.0;
    uint64_t r = 0;
    double v[4097];
    for (size_t i0 = 0; i0 < j->n; i0 += k) {
        size_t m = j->n - i0 < k ? j->n - i0 : k;
        v[0] = s;
        bool special = !isfinite(s);
        int E = s != 0.0 && !special ? ilogb(s) : INT32_MIN;
        for (size_t i = 0; i < m; i++) {
            double t = term(j, i0 + i);
            v[i + 1] = t;
            if (!isfinite(t))
                special = true;
            else if (t != 0.0 && ilogb(t) > E)
                E = ilogb(t);
        }
        double s_new;
        int Q = E == INT32_MIN ? 0 : E - w + 1;
        if (special) {
            /* inf and NaN: IEEE's sum decides (no finite sum overflows). */
            double x = 0.0;
            for (size_t i = 0; i <= m; i++)
                x += v[i];
            s_new = step_round(&j->acc, x, 0.0, j->n + r++);
        } else if (E == INT32_MIN) {
            s_new = step_round(&j->acc, 0.0, 0.0, j->n + r++);
        } else {
            i128 N = { 0, 0 };
            for (size_t i = 0; i <= m; i++)
                if (v[i] != 0.0)
                    i128_add(&N, (uint64_t)floor(ldexp(fabs(v[i]), -Q)),
                             v[i] < 0.0);
            double hi, lo;
            i128_to_pair(N, Q, &hi, &lo);
            s_new = step_round(&j->acc, hi, lo, j->n + r++);
        }
        if (j->counts) {
            for (size_t i = 1; i <= m; i++) {
                emu_accum_counts *c = j->counts;
                double t = v[i];
                c->adds++;
                if (t == 0.0 || special) {
                    c->lost_bits[0]++;
                } else if (exponent_of(t) < Q) {
                    c->absorbed++;
                    c->lost_bits[EMU_LOST_BINS - 1]++;
                } else if (!isfinite(s_new)) {
                    c->lost_bits[0]++;
                } else {
                    int q = quantum_exp(&j->a->acc, s_new);
                    c->lost_bits[bits_below(t, q > Q ? q : Q)]++;
                }
            }
        }
        s = s_new;
    }
    return s;
}

static double dot_exact(const dot_job *j, double *lo)
{
    xacc a;
    memset(&a, 0, sizeof a);
    size_t nt = j->n + j->has_init;
    bool nan = false, pinf = false, ninf = false, all_negzero = nt > 0;
    for (size_t l = 0; l < nt; l++) {
        double t = leaf(j, l);
        if (isnan(t))
            nan = true;
        else if (isinf(t))
            *(t > 0.0 ? &pinf : &ninf) = true;
        else
            xacc_add_double(&a, t);
        if (!(t == 0.0 && signbit(t)))
            all_negzero = false;
    }
    if (j->counts) {
        j->counts->adds += j->n;
        j->counts->lost_bits[0] += j->n;
    }
    *lo = 0.0;
    if (nan || (pinf && ninf))
        return NAN;
    if (pinf || ninf)
        return pinf ? INFINITY : -INFINITY;
    double hi = xacc_round(&a);
    if (hi == 0.0)
        return all_negzero ? -0.0 : 0.0;
    xacc_add_double(&a, -hi); /* exact: hi lies on the accumulator's grid */
    *lo = xacc_round(&a);
    return hi;
}

static double dot_fast(const dot_job *j)
{
    float s = j->has_init ? (float)j->init : 0.0f;
    for (size_t i = 0; i < j->n; i++) {
        float x = j->x[(ptrdiff_t)i * j->incx];
        s = j->y ? s + x * j->y[(ptrdiff_t)i * j->incy] : s + x;
    }
    return s;
}

/* emu_accum_dot, optionally starting from an initial value. */
double emu_accum_dot_init_unguarded(const emu_accum *a, const float *x,
                                    ptrdiff_t incx, const float *y,
                                    ptrdiff_t incy, size_t n,
                                    const double *init,
                                    const emu_accum_rng *rng,
                                    emu_accum_counts *counts, double *lo)
{
    dot_job j = { .a = a, .x = x, .y = y, .incx = incx, .incy = incy, .n = n,
                  .has_init = init != NULL, .init = init ? *init : 0.0,
                  .counts = counts };
    word_cache wc[3];
    bool sr = emu_rnd_is_stochastic(a->rnd.mode);
    stepper_init(&j.acc, &a->acc, &a->rnd, rng, n, sr ? &wc[0] : NULL);
    stepper_init(&j.prod, &a->prod, &a->rnd, rng, n, sr ? &wc[1] : NULL);
    stepper_init(&j.wide, &a->wide, &a->rnd, rng, n, sr ? &wc[2] : NULL);
    double lo_local = 0.0;
    if (!lo)
        lo = &lo_local;
    *lo = 0.0;
    switch (a->kind) {
    case EMU_ACCUM_PAIRWISE:
        return dot_pairwise(&j);
    case EMU_ACCUM_BLOCKED:
        return dot_blocked(&j);
    case EMU_ACCUM_FUSED:
        return dot_fused(&j);
    case EMU_ACCUM_KAHAN:
        return dot_kahan(&j);
    case EMU_ACCUM_EXACT:
        return dot_exact(&j, lo);
    case EMU_ACCUM_FAST:
        return dot_fast(&j);
    case EMU_ACCUM_SEQUENTIAL:
    default:
        return dot_sequential(&j);
    }
}

double emu_accum_dot_unguarded(const emu_accum *a, const float *x,
                               ptrdiff_t incx, const float *y, ptrdiff_t incy,
                               size_t n, const emu_accum_rng *rng,
                               emu_accum_counts *counts, double *lo)
{
    return emu_accum_dot_init_unguarded(a, x, incx, y, incy, n, NULL, rng,
                                        counts, lo);
}

double emu_accum_dot(double *lo, emu_accum_counts *counts, const emu_accum *a,
                     const float *x, ptrdiff_t incx, const float *y,
                     ptrdiff_t incy, size_t n, const emu_accum_rng *rng)
{
    EMU_HOSTFP_GUARD;
    return emu_accum_dot_init_unguarded(a, x, incx, y, incy, n, NULL, rng,
                                        counts, lo);
}

/* For units with an accumulator input C (emu/dpi.h). */
double emu_accum_dot_init(double *lo, emu_accum_counts *counts,
                          const emu_accum *a, double init, const float *x,
                          ptrdiff_t incx, const float *y, ptrdiff_t incy,
                          size_t n, const emu_accum_rng *rng)
{
    EMU_HOSTFP_GUARD;
    return emu_accum_dot_init_unguarded(a, x, incx, y, incy, n, &init, rng,
                                        counts, lo);
}
