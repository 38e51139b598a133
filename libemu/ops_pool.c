/*
 * ops_pool.c — 2-d max and average pooling (NCHW), forward and backward.
 *
 * Windows are size x size with the given stride and no padding; output
 * (oh, ow) covers input rows oh*stride .. oh*stride + size - 1 (columns
 * likewise), so Ho = (H - size) / stride + 1 and trailing rows or columns
 * that no window reaches get a zero gradient.
 *
 * What is rounded, exactly once per output, by emu_commit():
 *  - max: the selected input itself (exact; rounded only if y's format
 *    differs from x's).  Selection in window order (kh, kw): the first
 *    maximum in IEEE 754-2019 maximum's order (-0 < +0); a NaN in the
 *    window wins (first NaN), so NaN propagates.
 *  - max backward: dx[j] = the exact sum of the dy routed to j (several
 *    when windows overlap), in increasing output order for the IEEE sign of
 *    a zero sum; +0 where nothing is routed.
 *  - avg: the exact window sum divided by size^2; avg backward: the exact
 *    sum of dy over the windows covering j, divided by size^2 (equal to
 *    summing dy / size^2 exactly).
 * Exact sums are the EXACT accumulator model's (hi = RN(sum), lo =
 * RN(sum - hi)); the division by size^2 is carried out on the pair with
 * fma remainders (div_pair), so the pair handed to the choke point keeps
 * the sign of its remainder exactly.
 *
 * Called by the nn layer's pooling layers and the CLI.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

typedef struct pool_geom {
    size_t N, C, H, W, Ho, Wo, size, stride;
} pool_geom;

/* Geometry from the input-sized tensor `in` (x or dx) and the options. */
static int pool_geometry(emu_ctx *ctx, const char *site, const char *what,
                         const emu_tensor *in, const emu_pool_opts *o,
                         pool_geom *g)
{
    if (!o)
        return emu_ctx_fail(ctx, site, "pooling options: NULL");
    if (in->ndim != 4)
        return emu_shape_fail(ctx, site, what, in, "an (N, C, H, W) image");
    if (o->size < 1 || o->stride < 1)
        return emu_ctx_fail(ctx, site, "pooling size %d, stride %d: both "
                            "must be at least 1", o->size, o->stride);
    g->N = in->shape[0];
    g->C = in->shape[1];
    g->H = in->shape[2];
    g->W = in->shape[3];
    g->size = (size_t)o->size;
    g->stride = (size_t)o->stride;
    if (g->H < g->size || g->W < g->size)
        return emu_ctx_fail(ctx, site, "a %dx%d window does not fit in the "
                            "%zux%zu input '%s': no output", o->size, o->size,
                            g->H, g->W, in->name);
    g->Ho = (g->H - g->size) / g->stride + 1;
    g->Wo = (g->W - g->size) / g->stride + 1;
    return 0;
}

static int check_pooled(emu_ctx *ctx, const char *site, const char *what,
                        const emu_tensor *t, const pool_geom *g)
{
    if (t->ndim == 4 && t->shape[0] == g->N && t->shape[1] == g->C &&
        t->shape[2] == g->Ho && t->shape[3] == g->Wo)
        return 0;
    char want[96];
    snprintf(want, sizeof want, "(%zu, %zu, %zu, %zu)", g->N, g->C, g->Ho,
             g->Wo);
    return emu_shape_fail(ctx, site, what, t, want);
}

/* ---- exact sums and the division by the window size ------------------- */

static void exact_model(emu_accum *a)
{
    emu_accum_default(a);
    a->kind = EMU_ACCUM_EXACT;
}

/* hi + lo = the exact sum of v[0..k-1] (EXACT model); k = 1 is v itself,
 * -0 included. */
static double exact_sum(const emu_accum *exact, const float *v, size_t k,
                        double *lo)
{
    *lo = 0.0;
    if (k == 0)
        return 0.0;
    if (k == 1)
        return v[0];
    return emu_accum_dot_unguarded(exact, v, 1, NULL, 0, k, NULL, NULL, lo);
}

/* qh + ql represents (hi + lo) / S for an exact pair (|lo| <= ulp(hi)/2)
 * and an integer S >= 1: qh lies within one ulp of the quotient, ql has
 * the sign of the remainder exactly and its value to about 2^-52.  Every
 * step is error-free but the divisions, whose remainders are recovered
 * exactly with fma and carried down. */
static void div_pair(double hi, double lo, double S, double *qh, double *ql)
{
    *ql = 0.0;
    if (S == 1.0) {
        *qh = hi;
        *ql = lo;
        return;
    }
    if (!isfinite(hi) || hi == 0.0) {
        *qh = hi / S;
        return;
    }
    double q = hi / S;
    double r = fma(-q, S, hi);          /* hi - q S, exact             */
    double rr, rre;
    emu_two_sum(r, lo, &rr, &rre);      /* E - q = (rr + rre) / S      */
    double c = rr / S;
    double r2 = fma(-c, S, rr);         /* rr - c S, exact              */
    double t, te;
    emu_two_sum(r2, rre, &t, &te);      /* E - q - c = (t + te) / S     */
    double d = (t + te) / S;            /* sign exact: |te| < |t| or t = 0 */
    double h, l;
    emu_two_sum(q, c, &h, &l);          /* E = h + l + d_exact          */
    /* l, if non-zero, is a multiple of ulp(c) > |d|: it decides the sign. */
    *qh = h;
    *ql = l + d;
}

/* ---- references --------------------------------------------------------- */

/* Sum of float values at the given precision + 64 bits (all but exact:
 * binary32 values span fewer than 280 bits). */
static void ref_sum(mpfr_ptr out, const float *v, size_t k)
{
    mpfr_t s;
    mpfr_init2(s, mpfr_get_prec(out) + 64);
    mpfr_set_zero(s, 1);
    for (size_t i = 0; i < k; i++)
        mpfr_add_d(s, s, v[i], MPFR_RNDN);
    mpfr_set(out, s, MPFR_RNDN);
    mpfr_clear(s);
}

/* ---- forward ------------------------------------------------------------ */

typedef struct pool_op {
    const float *x;           /* forward: the input                       */
    pool_geom g;
    float *buf;               /* window scratch for the callbacks          */
    size_t *arg;              /* max: the argmax output, or NULL           */
    emu_accum exact;          /* avg: the exact sums' model                */
} pool_op;

/* Gathers the window of output o (window order kh, kw) into buf. */
static size_t gather_window(const pool_geom *g, const float *x, size_t o,
                            float *buf)
{
    size_t ow = o % g->Wo, oh = (o / g->Wo) % g->Ho, nc = o / (g->Wo * g->Ho);
    size_t k = 0;
    for (size_t kh = 0; kh < g->size; kh++)
        for (size_t kw = 0; kw < g->size; kw++) {
            size_t j = (nc * g->H + oh * g->stride + kh) * g->W +
                       ow * g->stride + kw;
            buf[k++] = x[j];
        }
    return k;
}

static bool window_had_nan(const void *opv, size_t i)
{
    const pool_op *op = opv;
    size_t k = gather_window(&op->g, op->x, i, op->buf);
    return emu_any_nan(op->buf, k);
}

static int maxpool_ref(const void *opv, size_t i, mpfr_ptr exact,
                       mpfr_ptr src)
{
    (void)src;
    const pool_op *op = opv;
    size_t k = gather_window(&op->g, op->x, i, op->buf);
    if (emu_any_nan(op->buf, k)) {
        mpfr_set_nan(exact);
        return 0;
    }
    mpfr_t v;
    mpfr_init2(v, 64);
    mpfr_set_d(exact, op->buf[0], MPFR_RNDN);
    for (size_t j = 1; j < k; j++) {
        mpfr_set_d(v, op->buf[j], MPFR_RNDN);
        mpfr_max(exact, exact, v, MPFR_RNDN);
    }
    mpfr_clear(v);
    return 0;
}

/* IEEE maximum's order of the non-NaN binary32 values (-0 < +0) as a
 * signed integer order: a negative value's magnitude bits inverted. */
static inline int32_t max_key(uint32_t u)
{
    return (int32_t)(u ^ ((uint32_t)((int32_t)u >> 31) >> 1));
}

/* The first maximum of a window in window order (kh, kw), or its first
 * NaN: the selection rule, one comparison at a time (the rule's
 * definition, and the path of windows that hold a NaN). */
static size_t window_max_slow(const float *xw, size_t W, size_t size,
                              float *out)
{
    size_t best = 0;
    float b = xw[0];
    for (size_t kh = 0; kh < size && !isnan(b); kh++)
        for (size_t kw = 0; kw < size; kw++) {
            const float c = xw[kh * W + kw];
            if (isnan(c) || c > b ||
                (c == 0.0f && b == 0.0f && signbit(b) && !signbit(c))) {
                b = c;
                best = kh * W + kw;
                if (isnan(b))
                    break;
            }
        }
    *out = b;
    return best;
}

/* The same selection for windows without a NaN, in integers: the first
 * strictly larger key (max_key) in window order; returns false, having
 * chosen nothing, if the window holds a NaN.  SIZE is a constant where
 * inlined below. */
static EMU_KERNEL_INLINE bool window_max_fast(const float *xw, size_t W,
                                              size_t size, float *out,
                                              size_t *best)
{
    uint32_t nan = 0, bu;
    memcpy(&bu, xw, sizeof bu);
    int32_t bk = max_key(bu);
    size_t bi = 0;
    for (size_t kh = 0; kh < size; kh++)
        for (size_t kw = 0; kw < size; kw++) {
            uint32_t u;
            memcpy(&u, xw + kh * W + kw, sizeof u);
            nan |= (uint32_t)((u & 0x7fffffff) > 0x7f800000);
            const int32_t k = max_key(u);
            const bool gt = k > bk;
            bk = gt ? k : bk;
            bu = gt ? u : bu;
            bi = gt ? kh * W + kw : bi;
        }
    if (nan)
        return false;
    memcpy(out, &bu, sizeof bu);
    *best = bi;
    return true;
}

/* window_max_fast for 2 x 2 windows, written out (gcc -O2 does not
 * unroll the loops of the general one). */
static inline bool window_max_2x2(const float *xw, size_t W, float *out,
                                  size_t *best)
{
    uint32_t u[4];
    memcpy(&u[0], xw, sizeof u[0]);
    memcpy(&u[1], xw + 1, sizeof u[1]);
    memcpy(&u[2], xw + W, sizeof u[2]);
    memcpy(&u[3], xw + W + 1, sizeof u[3]);
    const uint32_t nan = (uint32_t)((u[0] & 0x7fffffff) > 0x7f800000) |
                         (uint32_t)((u[1] & 0x7fffffff) > 0x7f800000) |
                         (uint32_t)((u[2] & 0x7fffffff) > 0x7f800000) |
                         (uint32_t)((u[3] & 0x7fffffff) > 0x7f800000);
    if (nan)
        return false;
    int32_t bk = max_key(u[0]);
    uint32_t bu = u[0];
    size_t bi = 0;
#define MAX_2X2_STEP(k, offset)                                               \
    do {                                                                      \
        const int32_t key_ = max_key(u[k]);                                   \
        const bool gt_ = key_ > bk;                                           \
        bk = gt_ ? key_ : bk;                                                 \
        bu = gt_ ? u[k] : bu;                                                 \
        bi = gt_ ? (offset) : bi;                                             \
    } while (0)
    MAX_2X2_STEP(1, 1);
    MAX_2X2_STEP(2, W);
    MAX_2X2_STEP(3, W + 1);
#undef MAX_2X2_STEP
    memcpy(out, &bu, sizeof bu);
    *best = bi;
    return true;
}

/* emu_op_out.fill32 of max pooling for windows of SIZE (a constant where
 * inlined below): outputs i0 .. i0+m-1, each the first maximum of its
 * window in window order (kh, kw) by IEEE maximum's order (-0 < +0), or
 * its first NaN. */
static EMU_KERNEL_INLINE void maxpool_run(const pool_op *op, size_t i0,
                                          size_t m, float *v, size_t size)
{
    const pool_geom *g = &op->g;
    size_t ow = i0 % g->Wo, oh = i0 / g->Wo % g->Ho, nc = i0 / (g->Wo * g->Ho);
    size_t row = (nc * g->H + oh * g->stride) * g->W;
    for (size_t j = 0; j < m; j++) {
        const size_t base = row + ow * g->stride;
        const float *xw = op->x + base;
        size_t best;
        if (!(size == 2 ? window_max_2x2(xw, g->W, &v[j], &best)
                        : window_max_fast(xw, g->W, size, &v[j], &best)))
            best = window_max_slow(xw, g->W, size, &v[j]);
        if (op->arg)
            op->arg[i0 + j] = base + best;
        if (++ow == g->Wo) {
            ow = 0;
            if (++oh == g->Ho) {
                oh = 0;
                nc++;
            }
            row = (nc * g->H + oh * g->stride) * g->W;
        }
    }
}

/* n outputs of one output row of 2 x 2 windows at stride 2, from the
 * window row xr (input offset base): window_max_2x2's selection (the
 * first strictly larger max_key in window order), without a branch or a
 * call per window so that the compiler vectorises the run.  Returns false
 * if a window holds a NaN: the caller then makes the run again window by
 * window (maxpool_run), overwriting what was written here.  ARG (a
 * constant where inlined) says whether argmax is written. */
static EMU_KERNEL_INLINE bool maxpool_row_2x2s2(const float *xr, size_t W,
                                                size_t n, float *v,
                                                size_t *arg, size_t base,
                                                bool ARG)
{
    uint32_t nan = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t u0, u1, u2, u3;
        memcpy(&u0, xr + 2 * j, sizeof u0);
        memcpy(&u1, xr + 2 * j + 1, sizeof u1);
        memcpy(&u2, xr + W + 2 * j, sizeof u2);
        memcpy(&u3, xr + W + 2 * j + 1, sizeof u3);
        nan |= (uint32_t)((u0 & 0x7fffffff) > 0x7f800000) |
               (uint32_t)((u1 & 0x7fffffff) > 0x7f800000) |
               (uint32_t)((u2 & 0x7fffffff) > 0x7f800000) |
               (uint32_t)((u3 & 0x7fffffff) > 0x7f800000);
        int32_t bk = max_key(u0);
        uint32_t bu = u0;
        size_t bi = 0;
        const int32_t k1 = max_key(u1), k2 = max_key(u2), k3 = max_key(u3);
        bi = k1 > bk ? 1 : bi;
        bu = k1 > bk ? u1 : bu;
        bk = k1 > bk ? k1 : bk;
        bi = k2 > bk ? W : bi;
        bu = k2 > bk ? u2 : bu;
        bk = k2 > bk ? k2 : bk;
        bi = k3 > bk ? W + 1 : bi;
        bu = k3 > bk ? u3 : bu;
        memcpy(&v[j], &bu, sizeof bu);
        if (ARG)
            arg[j] = base + 2 * j + bi;
    }
    return nan == 0;
}

/* maxpool_fill32 for 2 x 2 windows at stride 2 (the CNN's pooling), an
 * output row's run at a time; compiled for AVX2 and AVX-512 too (integer
 * selections and moves: the same bits at every level). */
EMU_TARGET_CLONES
static void maxpool_fill32_2x2s2(const pool_op *op, size_t i0, size_t m,
                                 float *v)
{
    const pool_geom *g = &op->g;
    for (size_t j = 0; j < m;) {
        const size_t i = i0 + j, ow = i % g->Wo, oh = i / g->Wo % g->Ho;
        const size_t nc = i / (g->Wo * g->Ho);
        const size_t n = g->Wo - ow < m - j ? g->Wo - ow : m - j;
        const size_t base = (nc * g->H + 2 * oh) * g->W + 2 * ow;
        const bool ok =
            op->arg ? maxpool_row_2x2s2(op->x + base, g->W, n, v + j,
                                        op->arg + i, base, true)
                    : maxpool_row_2x2s2(op->x + base, g->W, n, v + j, NULL,
                                        base, false);
        if (!ok)
            maxpool_run(op, i, n, v + j, 2);
        j += n;
    }
}

static void maxpool_fill32(const void *opv, size_t i0, size_t m, float *v)
{
    const pool_op *op = opv;
    if (op->g.size == 2 && op->g.stride == 2) {
        maxpool_fill32_2x2s2(op, i0, m, v);
        return;
    }
    switch (op->g.size) {
    case 2: maxpool_run(op, i0, m, v, 2); break;
    case 3: maxpool_run(op, i0, m, v, 3); break;
    default: maxpool_run(op, i0, m, v, op->g.size); break;
    }
}

int emu_t_maxpool2d(emu_ctx *ctx, const char *site, emu_tensor *y,
                    size_t *argmax, const emu_tensor *x,
                    const emu_pool_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    pool_geom g;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "y", y) ||
        emu_check_tensor(ctx, site, "x", x) ||
        pool_geometry(ctx, site, "x", x, o, &g) ||
        check_pooled(ctx, site, "y", y, &g))
        return -1;
    const size_t S = g.size * g.size;
    float *buf = malloc(S * sizeof *buf);
    if (!buf)
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    /* The selected values are binary32 values: produced as such, chunk by
     * chunk, with argmax written as they are selected (the choke point
     * fails, if at all, before it asks for values). */
    pool_op op = { .x = x->data, .g = g, .buf = buf, .arg = argmax };
    int rc = emu_commit(ctx, &(emu_op_out){
        .site = site, .kind = "maxpool2d", .out = y, .fill32 = maxpool_fill32,
        .op = &op, .ref = maxpool_ref, .rnd = rnd,
        .store_early = !emu_tensors_overlap(y, x), .parallel = true });
    free(buf);
    return rc;
}

static int avgpool_ref(const void *opv, size_t i, mpfr_ptr exact,
                       mpfr_ptr src)
{
    (void)src;
    const pool_op *op = opv;
    size_t k = gather_window(&op->g, op->x, i, op->buf);
    if (!emu_all_finite(op->buf, k))
        return -1;
    ref_sum(exact, op->buf, k);
    mpfr_div_ui(exact, exact, (unsigned long)k, MPFR_RNDN);
    return 0;
}

/* emu_op_out.fill of average pooling: the exact window sums / size^2. */
static int avgpool_fill(const void *opv, size_t i0, size_t m, double *hi,
                        double *lo)
{
    const pool_op *op = opv;
    const double S = (double)(op->g.size * op->g.size);
    for (size_t j = 0; j < m; j++) {
        size_t k = gather_window(&op->g, op->x, i0 + j, op->buf);
        double sl, sh = exact_sum(&op->exact, op->buf, k, &sl);
        div_pair(sh, sl, S, &hi[j], &lo[j]);
    }
    return 1;
}

int emu_t_avgpool2d(emu_ctx *ctx, const char *site, emu_tensor *y,
                    const emu_tensor *x, const emu_pool_opts *o,
                    const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    pool_geom g;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "y", y) ||
        emu_check_tensor(ctx, site, "x", x) ||
        pool_geometry(ctx, site, "x", x, o, &g) ||
        check_pooled(ctx, site, "y", y, &g))
        return -1;
    const size_t S = g.size * g.size;
    float *buf = malloc(S * sizeof *buf);
    if (!buf)
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    pool_op op = { .x = x->data, .g = g, .buf = buf };
    exact_model(&op.exact);
    int rc = emu_commit(ctx, &(emu_op_out){
        .site = site, .kind = "avgpool2d", .out = y, .fill = avgpool_fill,
        .op = &op, .ref = avgpool_ref, .inputs_had_nan = window_had_nan,
        .rnd = rnd, .store_early = !emu_tensors_overlap(y, x) });
    free(buf);
    return rc;
}

/* ---- backward ----------------------------------------------------------- */

/* What reaches input element j: entries list[first[j] .. first[j+1]) of
 * the dy values (as indices into dy), in increasing output order. */
typedef struct routes {
    size_t *first;   /* n_in + 1 offsets */
    size_t *list;
} routes;

typedef struct pool_bwd_op {
    const float *dy;
    const float *dense; /* windows apart: the one dy routed to each input,
                           +0 where none is (then rt is unused) */
    routes rt;
    float *buf;      /* max_k scratch for the callbacks */
    double S;        /* divisor: 1 for max, size^2 for avg */
    emu_accum exact; /* the exact sums' model */
} pool_bwd_op;

static size_t gather_routes(const pool_bwd_op *op, size_t j, float *buf)
{
    if (op->dense) {
        /* an input nothing reaches: the sum of nothing, +0, as one +0 */
        buf[0] = op->dense[j];
        return 1;
    }
    size_t k = 0;
    for (size_t r = op->rt.first[j]; r < op->rt.first[j + 1]; r++)
        buf[k++] = op->dy[op->rt.list[r]];
    return k;
}

static bool bwd_had_nan(const void *opv, size_t j)
{
    const pool_bwd_op *op = opv;
    return emu_any_nan(op->buf, gather_routes(op, j, op->buf));
}

static int bwd_ref(const void *opv, size_t j, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const pool_bwd_op *op = opv;
    size_t k = gather_routes(op, j, op->buf);
    if (!emu_all_finite(op->buf, k))
        return -1;
    ref_sum(exact, op->buf, k);
    mpfr_div_d(exact, exact, op->S, MPFR_RNDN);
    return 0;
}

/* emu_op_out.fill of the backward passes: the exact sums of the routed
 * dy divided by S. */
static int bwd_fill(const void *opv, size_t i0, size_t m, double *hi,
                    double *lo)
{
    const pool_bwd_op *op = opv;
    if (op->dense) { /* one value per input: exact_sum's k = 1 */
        for (size_t j = 0; j < m; j++)
            div_pair(op->dense[i0 + j], 0.0, op->S, &hi[j], &lo[j]);
        return 1;
    }
    for (size_t j = 0; j < m; j++) {
        size_t k = gather_routes(op, i0 + j, op->buf);
        double sl, sh = exact_sum(&op->exact, op->buf, k, &sl);
        div_pair(sh, sl, op->S, &hi[j], &lo[j]);
    }
    return 1;
}

/* emu_op_out.fill32 where at most one dy reaches each input and S is 1
 * (max pooling with windows that do not overlap): the sum of nothing is
 * +0 and of one value that value itself, -0 included (exact_sum), a
 * binary32 value. */
static void bwd_fill32(const void *opv, size_t i0, size_t m, float *v)
{
    const pool_bwd_op *op = opv;
    if (op->dense) {
        memcpy(v, op->dense + i0, m * sizeof *v);
        return;
    }
    const size_t *first = op->rt.first;
    for (size_t j = 0; j < m; j++) {
        const size_t r = first[i0 + j];
        v[j] = r < first[i0 + j + 1] ? op->dy[op->rt.list[r]] : 0.0f;
    }
}

/* emu_op_out.inputs_had_nan where bwd_fill32 produces: the one value
 * read where it lies, no scratch (so callable from several threads). */
static bool bwd_had_nan32(const void *opv, size_t j)
{
    const pool_bwd_op *op = opv;
    float v = 0.0f;
    if (op->dense) {
        v = op->dense[j];
    } else {
        const size_t r = op->rt.first[j];
        if (r < op->rt.first[j + 1])
            v = op->dy[op->rt.list[r]];
    }
    return emu_any_nan(&v, 1);
}

/* Commits dx from the routes: the exact sums divided by S, produced a
 * chunk at a time; with one value per input (fill32), whose callbacks
 * only read, on ctx->threads. */
static int bwd_commit(emu_ctx *ctx, const char *site, const char *kind,
                      emu_tensor *dx, const emu_tensor *dy, pool_bwd_op *op,
                      size_t max_k, const emu_rounding *rnd)
{
    float *buf = malloc((max_k ? max_k : 1) * sizeof *buf);
    if (!buf)
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    op->buf = buf;
    exact_model(&op->exact);
    const bool f32 = max_k <= 1 && op->S == 1.0;
    int rc = emu_commit(ctx, &(emu_op_out){
        .site = site, .kind = kind, .out = dx, .op = op,
        .fill = f32 ? NULL : bwd_fill, .fill32 = f32 ? bwd_fill32 : NULL,
        .ref = bwd_ref, .inputs_had_nan = f32 ? bwd_had_nan32 : bwd_had_nan,
        .rnd = rnd, .store_early = !emu_tensors_overlap(dx, dy),
        .parallel = f32 });
    free(buf);
    return rc;
}

/* Counting sort of (target, source) pairs into routes: sources stay in
 * increasing order within a target. */
static int routes_alloc(emu_ctx *ctx, const char *site, routes *rt,
                        size_t n_in, size_t n_list)
{
    rt->first = calloc(n_in + 1, sizeof *rt->first);
    rt->list = malloc((n_list ? n_list : 1) * sizeof *rt->list);
    if (!rt->first || !rt->list) {
        free(rt->first);
        free(rt->list);
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for the "
                             "routing of %zu gradients", n_list);
    }
    return 0;
}

static void routes_free(routes *rt)
{
    free(rt->first);
    free(rt->list);
}

/* ---- max pooling's backward checks and scatter, on ctx->threads -------
 * Planes (n, c) split among parts: every argmax is checked against its
 * own window (the first bad one is the lowest part's first), and with
 * windows apart each dy lands in its own plane of dx, written by that
 * plane's part alone. */
typedef struct argmax_scan {
    const pool_geom *g;
    const size_t *argmax;
    const unsigned char *in_win;
    size_t span;
    size_t bad[EMU_POOL_MAX]; /* a part's first bad index, or SIZE_MAX */
    float *dense;             /* the scatter (windows apart), or NULL */
    const float *dy;
} argmax_scan;

/* dy elements per part at least */
enum { POOL_BWD_PART_MIN = 16 * 1024 };

static void argmax_part(void *p, int t, int T)
{
    argmax_scan *a = p;
    const pool_geom *g = a->g;
    const size_t planes = g->N * g->C, per = g->Ho * g->Wo;
    const size_t p0 = planes * (size_t)t / (size_t)T;
    const size_t p1 = planes * (size_t)(t + 1) / (size_t)T;
    size_t i = p0 * per, bad = SIZE_MAX;
    for (size_t nc = p0; nc < p1 && bad == SIZE_MAX; nc++)
        for (size_t oh = 0; oh < g->Ho; oh++) {
            const size_t row = (nc * g->H + oh * g->stride) * g->W;
            for (size_t ow = 0; ow < g->Wo; ow++, i++) {
                const size_t d = a->argmax[i] - (row + ow * g->stride);
                if ((d >= a->span || !a->in_win[d]) && bad == SIZE_MAX)
                    bad = i; /* the first */
            }
        }
    a->bad[t] = bad;
    if (!a->dense || bad != SIZE_MAX)
        return;
    const size_t hw = g->H * g->W;
    memset(a->dense + p0 * hw, 0, (p1 - p0) * hw * sizeof *a->dense); /* +0.0f */
    for (size_t k = p0 * per; k < p1 * per; k++)
        a->dense[a->argmax[k]] = a->dy[k];
}

int emu_t_maxpool2d_backward(emu_ctx *ctx, const char *site, emu_tensor *dx,
                             const emu_tensor *dy, const size_t *argmax,
                             const emu_pool_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    pool_geom g;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "dx", dx) ||
        emu_check_tensor(ctx, site, "dy", dy) ||
        pool_geometry(ctx, site, "dx", dx, o, &g) ||
        check_pooled(ctx, site, "dy", dy, &g))
        return -1;
    if (!argmax)
        return emu_ctx_fail(ctx, site, "argmax: NULL (the forward pass "
                            "records it)");
    /* An argmax from another shape or options would route gradients to
     * the wrong place: every entry must lie in its own window, at an
     * offset d from the window's first element with d = kh*W + kw,
     * kh, kw < size (a table of those offsets, no division per entry). */
    const size_t span = (g.size - 1) * g.W + g.size;
    unsigned char *in_win = calloc(span, 1);
    if (!in_win)
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    for (size_t kh = 0; kh < g.size; kh++)
        for (size_t kw = 0; kw < g.size; kw++)
            in_win[kh * g.W + kw] = 1;
    const float *dys = dy->data;
    pool_bwd_op op = { .dy = dys, .S = 1.0 };
    /* Windows that do not overlap: at most one dy reaches an input, so
     * the gradient is dy scattered to the argmax, +0 elsewhere
     * (exact_sum's sum of nothing and of one value); scattered as the
     * argmax are checked. */
    const bool apart = g.stride >= g.size;
    float *dense = apart ? malloc((dx->n ? dx->n : 1) * sizeof *dense) : NULL;
    if (apart && !dense) {
        free(in_win);
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    }
    argmax_scan as = { .g = &g, .argmax = argmax, .in_win = in_win,
                       .span = span, .dense = dense, .dy = dys };
    size_t T = (size_t)emu_pool_parts(ctx->threads, dy->n, POOL_BWD_PART_MIN);
    if (T > g.N * g.C)
        T = g.N * g.C;
    if (T < 1)
        T = 1;
    emu_pool_run((int)T, argmax_part, &as);
    free(in_win);
    size_t bad = SIZE_MAX;
    for (size_t t = 0; t < T && bad == SIZE_MAX; t++)
        bad = as.bad[t];
    if (bad != SIZE_MAX) {
        free(dense);
        return emu_ctx_fail(ctx, site, "argmax[%zu] = %zu is not in the "
                            "window of output %zu", bad, argmax[bad], bad);
    }
    if (apart) {
        op.dense = dense;
        int rc = bwd_commit(ctx, site, "maxpool2d_bwd", dx, dy, &op, 1, rnd);
        free(dense);
        return rc;
    }
    if (routes_alloc(ctx, site, &op.rt, dx->n, dy->n))
        return -1;
    size_t *first = op.rt.first, max_k = 0;
    for (size_t k = 0; k < dy->n; k++)
        first[argmax[k] + 1]++;
    for (size_t j = 0; j < dx->n; j++) {
        if (first[j + 1] > max_k)
            max_k = first[j + 1];
        first[j + 1] += first[j];
    }
    /* Fill in increasing k, using first[] as cursors, then shift back. */
    for (size_t k = 0; k < dy->n; k++)
        op.rt.list[first[argmax[k]]++] = k;
    for (size_t j = dx->n; j > 0; j--)
        first[j] = first[j - 1];
    first[0] = 0;
    int rc = bwd_commit(ctx, site, "maxpool2d_bwd", dx, dy, &op, max_k, rnd);
    routes_free(&op.rt);
    return rc;
}

int emu_t_avgpool2d_backward(emu_ctx *ctx, const char *site, emu_tensor *dx,
                             const emu_tensor *dy, const emu_pool_opts *o,
                             const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    pool_geom g;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "dx", dx) ||
        emu_check_tensor(ctx, site, "dy", dy) ||
        pool_geometry(ctx, site, "dx", dx, o, &g) ||
        check_pooled(ctx, site, "dy", dy, &g))
        return -1;
    const float *dys = dy->data;
    pool_bwd_op op = { .dy = dys, .S = (double)(g.size * g.size) };
    if (g.stride >= g.size) {
        /* Windows that do not overlap (the global average pool among
         * them): at most one dy reaches an input, the dy of the window it
         * lies in, +0 for an input outside every window (exact_sum's sum
         * of one value and of nothing), with no routing lists. */
        float *dense = malloc((dx->n ? dx->n : 1) * sizeof *dense);
        if (!dense)
            return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
        float *d = dense;
        for (size_t nc = 0; nc < dx->n / (g.H * g.W); nc++)
            for (size_t ih = 0; ih < g.H; ih++) {
                const size_t oh = ih / g.stride;
                const bool in_h = oh < g.Ho && ih - oh * g.stride < g.size;
                for (size_t iw = 0; iw < g.W; iw++, d++) {
                    const size_t ow = iw / g.stride;
                    *d = in_h && ow < g.Wo && iw - ow * g.stride < g.size
                             ? dys[(nc * g.Ho + oh) * g.Wo + ow]
                             : 0.0f;
                }
            }
        op.dense = dense;
        int rc = bwd_commit(ctx, site, "avgpool2d_bwd", dx, dy, &op, 1, rnd);
        free(dense);
        return rc;
    }
    if (routes_alloc(ctx, site, &op.rt, dx->n, dy->n * g.size * g.size))
        return -1;
    /* Windows covering input row ih: oh*stride <= ih <= oh*stride + size-1,
     * in increasing (oh, ow) order. */
    size_t *first = op.rt.first, *list = op.rt.list, k = 0, max_k = 0;
    for (size_t j = 0; j < dx->n; j++) {
        size_t iw = j % g.W, ih = (j / g.W) % g.H, nc = j / (g.W * g.H);
        size_t oh0 = ih + 1 > g.size ? (ih + 1 - g.size + g.stride - 1) / g.stride : 0;
        size_t ow0 = iw + 1 > g.size ? (iw + 1 - g.size + g.stride - 1) / g.stride : 0;
        size_t oh1 = ih / g.stride, ow1 = iw / g.stride; /* inclusive */
        if (oh1 >= g.Ho)
            oh1 = g.Ho - 1;
        if (ow1 >= g.Wo)
            ow1 = g.Wo - 1;
        size_t k0 = k;
        for (size_t oh = oh0; oh <= oh1; oh++)
            for (size_t ow = ow0; ow <= ow1; ow++)
                list[k++] = (nc * g.Ho + oh) * g.Wo + ow;
        first[j + 1] = k;
        if (k - k0 > max_k)
            max_k = k - k0;
    }
    int rc = bwd_commit(ctx, site, "avgpool2d_bwd", dx, dy, &op, max_k, rnd);
    routes_free(&op.rt);
    return rc;
}
