/*
 * ops_norm.c — batch normalisation of images (NCHW), per channel over
 * (N, H, W): emu_t_batchnorm2d (training mode with batch statistics and
 * running statistics, evaluation mode with the running ones) and
 * emu_t_batchnorm2d_backward.  Called by the nn layer EMU_LAYER_BATCHNORM
 * and by users.
 *
 * Shapes: x, y, xc, dy, dx (N, C, H, W); gamma, beta, mean, var, running
 * statistics, dgamma, dbeta (C).  M = N H W values per channel.
 *
 * What is rounded, and where (each through the choke point, once):
 *   <site>.mean          sum of channel c's x, terms in (n, h, w) order,
 *                        under the accumulator model (dot product number
 *                        c; the fast model sums in binary64), divided by M: the quotient of the
 *                        accumulator's value, rounded once
 *   <site>.xc            x - mean[c] (the stored mean), exact, rounded once
 *   <site>.var           sum of xc^2 (exact squares of the stored xc) under
 *                        the model, divided by M: the biased variance
 *   <site>               y = gamma (xc / sqrt(var + eps)) + beta, evaluated
 *                        in binary64 from the stored xc and var
 *   <site>.running_mean  (1 - m) running_mean + m mean         (binary64)
 *   <site>.running_var   (1 - m) running_var + m var M / (M - 1)  (binary64:
 *                        the unbiased variance, as PyTorch keeps it)
 * Evaluation mode: only <site>, y = gamma ((x - running_mean) /
 * sqrt(running_var + eps)) + beta in binary64.
 * Backward (training mode; gamma and beta are the layer's weight and bias,
 * hence the site names the layers use):
 *   <site>.dbias         S1 = sum of dy over channel c under the model
 *   <site>.dweight       S2 / sqrt(var + eps), S2 = sum of dy xc under
 *                        the model (the product of the stored xc and dy
 *                        exact), the quotient in binary64
 *   <site>.dinput        dx = gamma inv (dy - S1 / M - xc inv^2 S2 / M),
 *                        inv = 1 / sqrt(var + eps), in binary64 from the
 *                        accumulators' values S1 and S2 as they left the
 *                        accumulator (before their rounding into dbeta
 *                        and dgamma), as a fused kernel keeps them
 * The reductions are the sites where narrow accumulators swamp and
 * statistics overflow: they count swamping like any dot product, and their
 * MPFR references (exact sums of the channel) split the error into
 * accumulation and output rounding.  The binary64 evaluations differ from
 * the exact values by a few 2^-53 relative, which the references measure.
 * Stochastic accumulator words: stream op_index ^ 2^63 of the reduction's
 * own commit, dot product c, as emu_t_reduce.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

#define ACCUM_STREAM_TAG ((uint64_t)1 << 63)

/* Precision of the exact channel sums in the references: binary32
 * products span 2^-298 .. 2^256, so 700 bits hold any sum of fewer than
 * 2^100 of them exactly. */
enum { SUM_PREC = 700 };

typedef struct bn_op {
    size_t N, C, HW, M;
    const float *a, *b;        /* the reduction's terms a (or a * b)      */
    const float *x;            /* xc: x;  y: xc (training) or x (eval)    */
    const float *dy;
    const float *mean, *var, *gamma, *beta, *stat;
    const float *run;          /* running statistic being updated         */
    double eps, momentum, unbias;
    emu_rnd mode;              /* xc: the sign of an exact zero           */
    const double *inv;         /* 1 / sqrt(var + eps) per channel         */
    const double *k1, *k2;     /* dinput: S1 / M and inv^2 S2 / M         */
    const double *s1, *s2;     /* the accumulators' sums                  */
    bool div_m;                /* mean, var: divide the sum by M          */
    bool by_inv;               /* dweight: multiply the sum by inv        */
} bn_op;

static size_t channel_of(const bn_op *op, size_t i)
{
    return (i / op->HW) % op->C;
}

/* Channel c's values of v (N, C, H, W) into buf, in (n, h, w) order. */
static void gather(const bn_op *op, const float *v, size_t c, float *buf)
{
    for (size_t n = 0; n < op->N; n++)
        memcpy(buf + n * op->HW, v + (n * op->C + c) * op->HW,
               op->HW * sizeof *buf);
}

/* ---- references ------------------------------------------------------------ */

/* exact = sum over channel c of a (or a * b), exactly. */
static void exact_channel_sum(const bn_op *op, size_t c, mpfr_ptr exact)
{
    mpfr_t s;
    mpfr_init2(s, SUM_PREC);
    mpfr_set_zero(s, 1);
    for (size_t n = 0; n < op->N; n++) {
        const size_t base = (n * op->C + c) * op->HW;
        for (size_t k = 0; k < op->HW; k++) {
            double t = op->a[base + k];
            if (op->b)
                t *= op->b[base + k]; /* exact: two binary32 values */
            mpfr_add_d(s, s, t, MPFR_RNDN);
        }
    }
    mpfr_set(exact, s, MPFR_RNDN);
    mpfr_clear(s);
}

/* 1 / sqrt(v + eps) at exact's precision. */
static void ref_inv(mpfr_ptr inv, double v, double eps)
{
    mpfr_set_d(inv, v, MPFR_RNDN);
    mpfr_add_d(inv, inv, eps, MPFR_RNDN);
    mpfr_rec_sqrt(inv, inv, MPFR_RNDN);
}

/* The channel reductions: mean, var, dbias, dweight. */
static int sum_ref(const void *vop, size_t c, mpfr_ptr exact, mpfr_ptr src)
{
    const bn_op *op = vop;
    exact_channel_sum(op, c, exact);
    if (op->div_m)
        mpfr_div_ui(exact, exact, (unsigned long)op->M, MPFR_RNDN);
    if (op->by_inv) {
        mpfr_t inv;
        mpfr_init2(inv, mpfr_get_prec(exact));
        ref_inv(inv, op->var[c], op->eps);
        mpfr_mul(exact, exact, inv, MPFR_RNDN);
        mpfr_clear(inv);
    }
    mpfr_set(src, exact, MPFR_RNDN); /* no separate sources */
    return 1;
}

static int xc_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const bn_op *op = vop;
    mpfr_set_d(exact, op->x[i], MPFR_RNDN);
    mpfr_sub_d(exact, exact, op->mean[channel_of(op, i)], MPFR_RNDN);
    return 0;
}

/* y = gamma (v - centre) inv + beta, v = xc (training, centre 0) or x
 * (evaluation, centre running_mean). */
static int y_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const bn_op *op = vop;
    const size_t c = channel_of(op, i);
    mpfr_t inv;
    mpfr_init2(inv, mpfr_get_prec(exact));
    ref_inv(inv, op->var[c], op->eps);
    mpfr_set_d(exact, op->x[i], MPFR_RNDN);
    if (op->mean)
        mpfr_sub_d(exact, exact, op->mean[c], MPFR_RNDN);
    mpfr_mul(exact, exact, inv, MPFR_RNDN);
    if (op->gamma)
        mpfr_mul_d(exact, exact, op->gamma[c], MPFR_RNDN);
    if (op->beta)
        mpfr_add_d(exact, exact, op->beta[c], MPFR_RNDN);
    mpfr_clear(inv);
    return 0;
}

static int running_ref(const void *vop, size_t c, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const bn_op *op = vop;
    mpfr_t t;
    mpfr_init2(t, mpfr_get_prec(exact));
    mpfr_set_d(t, op->stat[c], MPFR_RNDN);
    if (op->unbias != 1.0) {
        mpfr_mul_ui(t, t, (unsigned long)op->M, MPFR_RNDN);
        mpfr_div_ui(t, t, (unsigned long)(op->M - 1), MPFR_RNDN);
    }
    mpfr_mul_d(t, t, op->momentum, MPFR_RNDN);
    mpfr_set_d(exact, 1.0, MPFR_RNDN);
    mpfr_sub_d(exact, exact, op->momentum, MPFR_RNDN); /* exact */
    mpfr_mul_d(exact, exact, op->run[c], MPFR_RNDN);
    mpfr_add(exact, exact, t, MPFR_RNDN);
    mpfr_clear(t);
    return 0;
}

static int dx_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const bn_op *op = vop;
    const size_t c = channel_of(op, i);
    const mpfr_prec_t p = mpfr_get_prec(exact);
    mpfr_t inv, t;
    mpfr_inits2(p, inv, t, (mpfr_ptr)0);
    ref_inv(inv, op->var[c], op->eps);
    /* t = xc inv^2 S2 / M */
    mpfr_mul(t, inv, inv, MPFR_RNDN);
    mpfr_mul_d(t, t, op->x[i], MPFR_RNDN);
    mpfr_mul_d(t, t, op->s2[c], MPFR_RNDN);
    mpfr_div_ui(t, t, (unsigned long)op->M, MPFR_RNDN);
    mpfr_set_d(exact, op->s1[c], MPFR_RNDN);
    mpfr_div_ui(exact, exact, (unsigned long)op->M, MPFR_RNDN);
    mpfr_sub_d(exact, exact, op->dy[i], MPFR_RNDN); /* S1/M - dy */
    mpfr_add(exact, exact, t, MPFR_RNDN);           /* -(dy - S1/M - t) */
    mpfr_mul(exact, exact, inv, MPFR_RNDN);
    mpfr_neg(exact, exact, MPFR_RNDN);
    if (op->gamma)
        mpfr_mul_d(exact, exact, op->gamma[c], MPFR_RNDN);
    mpfr_clears(inv, t, (mpfr_ptr)0);
    return 0;
}

/* ---- producers --------------------------------------------------------------- */

/* The producers work a run of one channel's outputs at a time (a plane,
 * or the part of it in the chunk), with the channel's constants hoisted,
 * so that their loops vectorise; each element's operations are those of
 * the definitions above, in their order, never contracted. */
#if defined(__GNUC__) && !defined(__clang__)
#define BN_VECTORISE                                                        \
    __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic",   \
                            "fp-contract=off")))
#else
#define BN_VECTORISE
#endif
/* The run kernels below are also compiled for AVX2 and AVX-512
 * (EMU_TARGET_CLONES, as accum_gemm.c's): the same IEEE operations,
 * never contracted, 4 or 8 lanes an instruction instead of SSE2's 2
 * (xc_run_plain's TwoSums were 3.6% of a resnet:1 fp32 step). */

/* The length of the run of outputs from i (at most m) in i's plane. */
static size_t run_len(const bn_op *op, size_t i, size_t m)
{
    const size_t left = op->HW - i % op->HW;
    return left < m ? left : m;
}

/* x - mu for the run, elementwise as xc_fill says. */
static bool xc_run_ref(const bn_op *op, const float *x, double mu, size_t n,
                       double *hi, double *lo)
{
    bool any = false;
    for (size_t j = 0; j < n; j++) {
        const double xv = x[j];
        lo[j] = 0.0;
        if (!isfinite(xv) || !isfinite(mu)) {
            hi[j] = xv - mu;
            continue;
        }
        emu_two_sum(xv, -mu, &hi[j], &lo[j]);
        /* IEEE's exact zero: +0 (-0 toward -inf), unless x and -mu are
         * zeros of one sign, which keep it (TwoSum gave that). */
        if (hi[j] == 0.0 && lo[j] == 0.0 &&
            !(xv == 0.0 && mu == 0.0 && signbit(xv) != signbit(mu)))
            hi[j] = op->mode == EMU_RD ? -0.0 : 0.0;
        any |= lo[j] != 0.0;
    }
    return any;
}

/* The run's TwoSums with no tests; *special when a sum is zero or not
 * finite, the elements xc_run_ref treats apart (with mu finite, the sum
 * of binary32 values in binary64 is finite exactly when x is, and its
 * error is 0 when it is). */
BN_VECTORISE EMU_TARGET_CLONES
static bool xc_run_plain(const float *x, double mu, size_t n, double *hi,
                         double *lo, bool *special)
{
    int any = 0, sp = 0;
    for (size_t j = 0; j < n; j++) {
        /* emu_two_sum written out: a call could not be vectorised */
        const double a = x[j], b = -mu, h = a + b, bv = h - a, av = h - bv;
        const double l = (a - av) + (b - bv);
        hi[j] = h;
        lo[j] = l;
        any |= l != 0.0;
        sp |= !(fabs(h) <= DBL_MAX) | (h == 0.0);
    }
    *special = sp;
    return any;
}

/* x - mean[c], exact as hi + lo, with IEEE's sign of an exact zero. */
static int xc_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    const bn_op *op = vop;
    bool any = false;
    for (size_t j = 0, n; j < m; j += n) {
        const size_t i = i0 + j;
        const double mu = op->mean[channel_of(op, i)];
        n = run_len(op, i, m - j);
        bool special = !isfinite(mu), a = false;
        if (!special)
            a = xc_run_plain(op->x + i, mu, n, hi + j, lo + j, &special);
        if (special)
            a = xc_run_ref(op, op->x + i, mu, n, hi + j, lo + j);
        any |= a;
    }
    return any;
}

/* y = ((x - mu) inv) g + b for the run; an absent mean, gamma or beta is
 * mu = +0, g = 1, b = -0, which leave every value as it is. */
BN_VECTORISE EMU_TARGET_CLONES
static void y_run(const float *x, double mu, double inv, double g, double b,
                  size_t n, double *hi)
{
    for (size_t j = 0; j < n; j++) {
        double v = x[j];
        v -= mu;
        v *= inv;
        v *= g;
        v += b;
        hi[j] = v;
    }
}

static int y_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    (void)lo;
    const bn_op *op = vop;
    for (size_t j = 0, n; j < m; j += n) {
        const size_t i = i0 + j, c = channel_of(op, i);
        n = run_len(op, i, m - j);
        y_run(op->x + i, op->mean ? op->mean[c] : 0.0, op->inv[c],
              op->gamma ? op->gamma[c] : 1.0, op->beta ? op->beta[c] : -0.0,
              n, hi + j);
    }
    return 0;
}

/* dx = ((dy - k1) - xc k2) g for the run, g = inv gamma (inv alone
 * without gamma). */
BN_VECTORISE EMU_TARGET_CLONES
static void dx_run(const float *dy, const float *xc, double k1, double k2,
                   double g, size_t n, double *hi)
{
    for (size_t j = 0; j < n; j++) {
        double t = (double)dy[j] - k1;
        t -= (double)xc[j] * k2;
        hi[j] = t * g;
    }
}

static int dx_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    (void)lo;
    const bn_op *op = vop;
    for (size_t j = 0, n; j < m; j += n) {
        const size_t i = i0 + j, c = channel_of(op, i);
        n = run_len(op, i, m - j);
        double g = op->inv[c];
        if (op->gamma)
            g *= op->gamma[c];
        dx_run(op->dy + i, op->x + i, op->k1[c], op->k2[c], g, n, hi + j);
    }
    return 0;
}

/* ---- the channel reductions ------------------------------------------------- */

/* (hi[c] + lo[c]) / n for the C channels, each as a pair that rounds
 * like the exact quotient: MPFR's quotient rounded to odd at 106 bits
 * (>= p + 2 bits for any carrier format), split exactly into two doubles;
 * as emu_t_reduce's mean.  One set of MPFR temporaries for all channels. */
static void div_pairs(double *hi, double *lo, size_t C, size_t n)
{
    mpfr_t s, q, r;
    mpfr_init2(s, 1200);
    mpfr_inits2(106, q, r, (mpfr_ptr)0);
    for (size_t c = 0; c < C; c++)
        emu_mean_pair(&hi[c], &lo[c], n, s, q, r);
    mpfr_clears(s, q, r, (mpfr_ptr)0);
}

/* The fast model's channel sums: binary64 accumulations.  A binary32
 * running sum of M = N H W terms (50,176 for a 64-image batch of 28 x 28)
 * loses of the order of M 2^-24 of the terms' magnitude, and batch norm's
 * backward sums cancel (dy sums to nearly zero over a channel): measured
 * on resnet:1, that left layer gradients 1e-3 off PyTorch's, whose kernels
 * sum in vectorised partial sums.  In binary64 the sum is as fast and the
 * error is below binary32's rounding of the result.
 *
 * Each channel's sum is one chain of adds in (n, h, w) order from +0.
 * One chain at a time waits an add's latency per term; FAST_LANES
 * channels' chains side by side, read in place from their planes, keep
 * each chain's order (so its bits) while their adds overlap. */
enum { FAST_LANES = 8 };

/* Channels c .. c + 7 (8 named accumulators: an array here was kept in
 * memory, each add then waiting on a store). */
static void fast_lanes8(const bn_op *op, size_t c, double *s)
{
    const size_t HW = op->HW, C = op->C;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    double s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0;
    for (size_t n = 0; n < op->N; n++) {
        const float *a = op->a + (n * C + c) * HW;
        const float *b = op->b ? op->b + (n * C + c) * HW : NULL;
        if (b) {
            for (size_t i = 0; i < HW; i++) { /* exact products */
                s0 += (double)a[i] * b[i];
                s1 += (double)a[HW + i] * b[HW + i];
                s2 += (double)a[2 * HW + i] * b[2 * HW + i];
                s3 += (double)a[3 * HW + i] * b[3 * HW + i];
                s4 += (double)a[4 * HW + i] * b[4 * HW + i];
                s5 += (double)a[5 * HW + i] * b[5 * HW + i];
                s6 += (double)a[6 * HW + i] * b[6 * HW + i];
                s7 += (double)a[7 * HW + i] * b[7 * HW + i];
            }
        } else {
            for (size_t i = 0; i < HW; i++) {
                s0 += a[i];
                s1 += a[HW + i];
                s2 += a[2 * HW + i];
                s3 += a[3 * HW + i];
                s4 += a[4 * HW + i];
                s5 += a[5 * HW + i];
                s6 += a[6 * HW + i];
                s7 += a[7 * HW + i];
            }
        }
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
    s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
}

/* Channel c alone. */
static double fast_lane1(const bn_op *op, size_t c)
{
    const size_t HW = op->HW, C = op->C;
    double s = 0.0;
    for (size_t n = 0; n < op->N; n++) {
        const float *a = op->a + (n * C + c) * HW;
        const float *b = op->b ? op->b + (n * C + c) * HW : NULL;
        if (b)
            for (size_t i = 0; i < HW; i++)
                s += (double)a[i] * b[i]; /* exact products */
        else
            for (size_t i = 0; i < HW; i++)
                s += a[i];
    }
    return s;
}

/* s[c] = the sum of channel c of a (a * b), for every channel. */
static void fast_sums(const bn_op *op, double *s)
{
    size_t c = 0;
    for (; op->C - c >= FAST_LANES; c += FAST_LANES)
        fast_lanes8(op, c, s + c);
    for (; c < op->C; c++)
        s[c] = fast_lane1(op, c);
}

/* Commits out[c] = the model's sum over channel c of a (a * b if b), then
 * divided by M (div_m) or multiplied by inv[c] (by_inv); sums[c] receives
 * the accumulator's value (hi + lo) when not NULL.  bufs: 2 M floats. */
static int channel_reduce(emu_ctx *ctx, const char *site, const char *kind,
                          emu_tensor *out, bn_op *op, const emu_accum *accum,
                          float *bufs, double *sums, const emu_rounding *rnd)
{
    const size_t C = op->C;
    double *hi = emu_scratch(ctx, site, 2 * C);
    if (!hi)
        return -1;
    double *lo = hi + C;
    const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP);
    emu_accum_counts counts;
    memset(&counts, 0, sizeof counts);
    const uint64_t stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
    float *ba = bufs, *bb = op->b ? bufs + op->M : NULL;
    const bool fast = accum->kind == EMU_ACCUM_FAST;
    if (fast)
        fast_sums(op, hi);
    for (size_t c = 0; c < C; c++) {
        lo[c] = 0.0;
        if (!fast) {
            gather(op, op->a, c, ba);
            if (bb)
                gather(op, op->b, c, bb);
            emu_accum_rng rng = { ctx->seed, stream, c };
            hi[c] = emu_accum_dot_unguarded(accum, ba, 1, bb, 1, op->M, &rng,
                                            swamp ? &counts : NULL, &lo[c]);
        }
        if (sums)
            sums[c] = hi[c] + lo[c];
        if (op->by_inv && !op->div_m) {
            hi[c] = (hi[c] + lo[c]) * op->inv[c];
            lo[c] = 0.0;
        }
    }
    if (op->div_m)
        div_pairs(hi, lo, C, op->M);
    emu_op_out o = { .site = site, .kind = kind, .out = out, .hi = hi,
                     .lo = lo, .swamp = swamp ? &counts : NULL, .op = op,
                     .ref = sum_ref, .rnd = rnd };
    int rc = emu_commit(ctx, &o);
    free(hi);
    return rc;
}

/* ---- argument checks ----------------------------------------------------------- */

static int check_image(emu_ctx *ctx, const char *site, const char *what,
                       const emu_tensor *t, const emu_tensor *like)
{
    if (emu_check_tensor(ctx, site, what, t))
        return -1;
    if (!like) {
        if (t->ndim != 4)
            return emu_shape_fail(ctx, site, what, t, "an (N, C, H, W) image");
        return 0;
    }
    return emu_check_same_shape(ctx, site, what, t, "x", like);
}

/* A per-channel tensor of C values (NULL allowed if optional). */
static int check_channels(emu_ctx *ctx, const char *site, const char *what,
                          const emu_tensor *t, size_t C, bool optional)
{
    if (!t && optional)
        return 0;
    if (emu_check_tensor(ctx, site, what, t))
        return -1;
    if (t->n != C) {
        char want[48];
        snprintf(want, sizeof want, "%zu values (one per channel)", C);
        return emu_shape_fail(ctx, site, what, t, want);
    }
    return 0;
}

static int check_opts(emu_ctx *ctx, const char *site,
                      const emu_batchnorm_opts *o)
{
    if (!o)
        return emu_ctx_fail(ctx, site, "batch-norm options: NULL");
    if (!(o->eps > 0.0) || !isfinite(o->eps))
        return emu_ctx_fail(ctx, site, "eps %g: must be positive and finite",
                            o->eps);
    if (!(o->momentum >= 0.0 && o->momentum <= 1.0))
        return emu_ctx_fail(ctx, site, "momentum %g is outside [0, 1]",
                            o->momentum);
    return 0;
}

static double *inv_std(emu_ctx *ctx, const char *site, const float *var,
                       size_t C, double eps)
{
    double *inv = emu_scratch(ctx, site, C);
    if (inv)
        for (size_t c = 0; c < C; c++)
            inv[c] = 1.0 / sqrt((double)var[c] + eps);
    return inv;
}

/* ---- forward -------------------------------------------------------------------- */

int emu_t_batchnorm2d(emu_ctx *ctx, const char *site, emu_tensor *y,
                      emu_tensor *xc, emu_tensor *mean, emu_tensor *var,
                      emu_tensor *running_mean, emu_tensor *running_var,
                      const emu_tensor *x, const emu_tensor *gamma,
                      const emu_tensor *beta, const emu_batchnorm_opts *o,
                      const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "batchnorm2d";
    if (emu_check_rounding(ctx, site, rnd) || check_opts(ctx, site, o) ||
        check_image(ctx, site, "x", x, NULL) ||
        check_image(ctx, site, "y", y, x))
        return -1;
    const size_t N = x->shape[0], C = x->shape[1];
    const size_t HW = x->shape[2] * x->shape[3], M = N * HW;
    const emu_rounding *srnd = o->stat_rnd ? o->stat_rnd : rnd;
    if (emu_check_rounding(ctx, site, srnd) ||
        check_channels(ctx, site, "gamma", gamma, C, true) ||
        check_channels(ctx, site, "beta", beta, C, true))
        return -1;
    if ((running_mean == NULL) != (running_var == NULL))
        return emu_ctx_fail(ctx, site, "running_mean and running_var: give "
                            "both or neither");
    if (running_mean &&
        (check_channels(ctx, site, "running_mean", running_mean, C, false) ||
         check_channels(ctx, site, "running_var", running_var, C, false)))
        return -1;
    bn_op op = { .N = N, .C = C, .HW = HW, .M = M, .eps = o->eps,
                 .momentum = o->momentum,
                 .gamma = gamma ? gamma->data : NULL,
                 .beta = beta ? beta->data : NULL };

    if (!o->training) {
        if (!running_mean)
            return emu_ctx_fail(ctx, site, "evaluation mode needs the running "
                                "statistics (running_mean, running_var)");
        if (emu_tensors_overlap(y, running_mean) ||
            emu_tensors_overlap(y, running_var))
            return emu_ctx_fail(ctx, site, "y shares storage with the running "
                                "statistics");
        double *inv = inv_std(ctx, site, running_var->data, C, o->eps);
        if (!inv)
            return -1;
        op.x = x->data;
        op.mean = running_mean->data;
        op.var = running_var->data;
        op.inv = inv;
        emu_op_out oo = { .site = site, .kind = "batchnorm2d", .out = y,
                          .fill = y_fill, .op = &op, .ref = y_ref, .rnd = rnd,
                          .store_early = emu_store_early_ok(y, x->data, x->n) };
        int rc = emu_commit(ctx, &oo);
        free(inv);
        return rc;
    }

    if (emu_check_accum(ctx, site, o->accum) ||
        check_image(ctx, site, "xc", xc, x) ||
        check_channels(ctx, site, "mean", mean, C, false) ||
        check_channels(ctx, site, "var", var, C, false))
        return -1;
    if (M < 2)
        return emu_ctx_fail(ctx, site, "training mode needs more than one value "
                            "per channel (N H W = %zu)", M);
    const emu_tensor *outs[] = { y, xc, mean, var, running_mean, running_var };
    for (int a = 0; a < 6; a++)
        for (int b = a + 1; b < 6; b++)
            if (outs[a] && outs[b] && emu_tensors_overlap(outs[a], outs[b]))
                return emu_ctx_fail(ctx, site, "outputs '%s' and '%s' share "
                                    "storage", outs[a]->name, outs[b]->name);
    for (int a = 2; a < 6; a++)
        if (outs[a] && emu_tensors_overlap(outs[a], x))
            return emu_ctx_fail(ctx, site, "output '%s' shares storage with x",
                                outs[a]->name);

    char sub[EMU_TENSOR_NAME_MAX + 24];
    float *bufs = malloc(2 * M * sizeof *bufs);
    if (!bufs)
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for %zu values",
                             2 * M);
    /* mean */
    snprintf(sub, sizeof sub, "%s.mean", site);
    op.a = x->data;
    op.div_m = true;
    int rc = channel_reduce(ctx, sub, "bn_mean", mean, &op, o->accum, bufs,
                            NULL, srnd);
    /* xc = x - mean */
    if (!rc) {
        snprintf(sub, sizeof sub, "%s.xc", site);
        op.x = x->data;
        op.mean = mean->data;
        op.mode = srnd->mode;
        emu_op_out oo = { .site = sub, .kind = "bn_center", .out = xc,
                          .fill = xc_fill, .op = &op, .ref = xc_ref,
                          .rnd = srnd,
                          .store_early = emu_store_early_ok(xc, x->data, x->n) };
        rc = emu_commit(ctx, &oo);
    }
    /* var = mean of xc^2 */
    if (!rc) {
        snprintf(sub, sizeof sub, "%s.var", site);
        op.a = op.b = xc->data;
        rc = channel_reduce(ctx, sub, "bn_var", var, &op, o->accum, bufs, NULL,
                            srnd);
        op.a = op.b = NULL;
        op.div_m = false;
    }
    free(bufs);
    /* y */
    double *inv = rc ? NULL : inv_std(ctx, site, var->data, C, o->eps);
    if (!rc && !inv)
        rc = -1;
    if (!rc) {
        op.x = xc->data;
        op.mean = NULL;
        op.var = var->data;
        op.inv = inv;
        emu_op_out oo = { .site = site, .kind = "batchnorm2d", .out = y,
                          .fill = y_fill, .op = &op, .ref = y_ref, .rnd = rnd,
                          .store_early = emu_store_early_ok(y, xc->data, xc->n) };
        rc = emu_commit(ctx, &oo);
    }
    free(inv);
    /* running statistics */
    for (int k = 0; k < 2 && !rc && running_mean; k++) {
        emu_tensor *run = k ? running_var : running_mean;
        snprintf(sub, sizeof sub, "%s.%s", site, k ? "running_var" : "running_mean");
        op.stat = k ? var->data : mean->data;
        op.run = run->data;
        op.unbias = k ? (double)M / (double)(M - 1) : 1.0;
        double *hi = emu_scratch(ctx, sub, C);
        if (!hi) {
            rc = -1;
            break;
        }
        for (size_t c = 0; c < C; c++)
            hi[c] = (1.0 - op.momentum) * (double)op.run[c] +
                    op.momentum * ((double)op.stat[c] * op.unbias);
        emu_op_out oo = { .site = sub, .kind = "bn_running", .out = run,
                          .hi = hi, .op = &op, .ref = running_ref,
                          .rnd = srnd };
        rc = emu_commit(ctx, &oo);
        free(hi);
    }
    return rc;
}

/* ---- backward -------------------------------------------------------------------- */

int emu_t_batchnorm2d_backward(emu_ctx *ctx, const char *site, emu_tensor *dx,
                               emu_tensor *dgamma, emu_tensor *dbeta,
                               const emu_tensor *dy, const emu_tensor *xc,
                               const emu_tensor *var, const emu_tensor *gamma,
                               const emu_batchnorm_opts *o,
                               const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "batchnorm2d";
    if (emu_check_rounding(ctx, site, rnd) || check_opts(ctx, site, o))
        return -1;
    if (!o->training)
        return emu_ctx_fail(ctx, site, "the backward pass is defined for "
                            "training mode (batch statistics)");
    if (emu_check_accum(ctx, site, o->accum) ||
        check_image(ctx, site, "xc", xc, NULL) ||
        check_image(ctx, site, "dy", dy, xc) ||
        check_image(ctx, site, "dx", dx, xc))
        return -1;
    const size_t N = xc->shape[0], C = xc->shape[1];
    const size_t HW = xc->shape[2] * xc->shape[3], M = N * HW;
    if (check_channels(ctx, site, "var", var, C, false) ||
        check_channels(ctx, site, "gamma", gamma, C, true) ||
        check_channels(ctx, site, "dgamma", dgamma, C, false) ||
        check_channels(ctx, site, "dbeta", dbeta, C, false))
        return -1;
    const emu_tensor *outs[] = { dx, dgamma, dbeta };
    const emu_tensor *ins[] = { dy, xc, var, gamma };
    for (int a = 0; a < 3; a++) {
        for (int b = a + 1; b < 3; b++)
            if (emu_tensors_overlap(outs[a], outs[b]))
                return emu_ctx_fail(ctx, site, "outputs '%s' and '%s' share "
                                    "storage", outs[a]->name, outs[b]->name);
        for (int b = 0; b < 4; b++)
            if (ins[b] && emu_tensors_overlap(outs[a], ins[b]))
                return emu_ctx_fail(ctx, site, "output '%s' shares storage with "
                                    "input '%s'", outs[a]->name, ins[b]->name);
    }
    bn_op op = { .N = N, .C = C, .HW = HW, .M = M, .eps = o->eps,
                 .gamma = gamma ? gamma->data : NULL, .var = var->data };
    char sub[EMU_TENSOR_NAME_MAX + 24];
    double *inv = inv_std(ctx, site, var->data, C, o->eps);
    double *sums = inv ? emu_scratch(ctx, site, 4 * C) : NULL;
    float *bufs = sums ? malloc(2 * M * sizeof *bufs) : NULL;
    if (!bufs) {
        free(inv);
        free(sums);
        return inv && sums ? emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory "
                                           "for %zu values", 2 * M)
                           : -1;
    }
    double *s1 = sums, *s2 = sums + C, *k1 = sums + 2 * C, *k2 = sums + 3 * C;
    op.inv = inv;
    /* dbeta = S1 */
    snprintf(sub, sizeof sub, "%s.dbias", site);
    op.a = dy->data;
    const emu_rounding *prnd = o->param_grad_rnd ? o->param_grad_rnd : rnd;
    int rc = emu_check_rounding(ctx, site, prnd);
    if (!rc)
        rc = channel_reduce(ctx, sub, "bn_dbeta", dbeta, &op, o->accum, bufs,
                            s1, prnd);
    /* dgamma = S2 inv */
    if (!rc) {
        snprintf(sub, sizeof sub, "%s.dweight", site);
        op.b = xc->data;
        op.by_inv = true;
        rc = channel_reduce(ctx, sub, "bn_dgamma", dgamma, &op, o->accum, bufs,
                            s2, prnd);
        op.a = op.b = NULL;
        op.by_inv = false;
    }
    free(bufs);
    /* dx */
    if (!rc) {
        for (size_t c = 0; c < C; c++) {
            k1[c] = s1[c] / (double)M;
            k2[c] = inv[c] * inv[c] * s2[c] / (double)M;
        }
        snprintf(sub, sizeof sub, "%s.dinput", site);
        op.x = xc->data;
        op.dy = dy->data;
        op.k1 = k1;
        op.k2 = k2;
        op.s1 = s1;
        op.s2 = s2;
        emu_op_out oo = { .site = sub, .kind = "batchnorm2d_backward",
                          .out = dx, .fill = dx_fill, .op = &op, .ref = dx_ref,
                          .rnd = rnd, .store_early = true };
        rc = emu_commit(ctx, &oo);
    }
    free(inv);
    free(sums);
    return rc;
}
