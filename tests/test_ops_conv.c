/*
 * test_ops_conv.c — convolution and pooling: bit-exact definitions,
 * MPFR, gradient checks, refusals.
 *
 * 1. The documented term order.  This suite builds the terms of every
 *    output with its own nested loops (ops.h's order: forward bias, then
 *    (ci, kh, kw); data (co, kh, kw); weights (n, oh, ow); padded terms
 *    w * 0 kept) and checks
 *    - the sequential binary16 model bit for bit against scalar
 *      emu_fma / emu_add / emu_mul chains (arith.h), and
 *    - every accumulator model, stochastic ones included, against
 *      emu_accum_dot (accum.h's reference definition) with the documented
 *      dot-product numbers (FAST, host binary32 / BLAS with no fixed
 *      order, against the binary32 summation error bound instead).
 * 2. EXACT model and pooling: outputs equal emu_ref_round of the exact
 *    value computed with MPFR, in every deterministic mode.
 * 3. Gradient checks, binary32 tensors, EXACT model: the loss is
 *    L = sum_i r_i y_i in binary64, r fixed.  Convolution and average
 *    pooling are linear, so a central difference has no truncation error:
 *    the tolerance is exactly the rounding of the perturbed outputs,
 *    sum over the outputs the input reaches of |r_i| (ulp(y+_i) +
 *    ulp(y-_i)) / 2 / (2h), plus half an ulp of the binary32 gradient and
 *    2^-50 relative for the binary64 sum.  Max pooling on inputs spaced
 *    more than 2h apart routes exactly: tolerance half an ulp + 2^-50.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h" /* emu_gemm_fast_f32: the FAST model's GEMM */
#include "testutil.h"

#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

enum { PREC = 640 };

static emu_tensor mk(const char *name, const char *fmt, size_t d0, size_t d1,
                     size_t d2, size_t d3)
{
    emu_tensor t;
    emu_error e;
    if (emu_tensor_alloc4(&t, name, EMU_ROLE_OTHER, test_format(fmt), d0, d1,
                          d2, d3, &e))
        ck_abort_msg("alloc %s: %s", name, e.message);
    return t;
}

/* A value of fmt: exponent in [elo, ehi], random significand, sometimes 0. */
static float rand_val(test_rng *g, const emu_format *f, int elo, int ehi)
{
    if (test_below(g, 16) == 0)
        return 0.0f;
    if (elo < f->emin)
        elo = f->emin;
    if (ehi > f->emax)
        ehi = f->emax;
    int e = elo + (int)test_below(g, (uint64_t)(ehi - elo + 1));
    double x = ldexp(1.0 + (double)(test_next(g) >> 11) * 0x1p-53, e);
    if (test_next(g) & 1)
        x = -x;
    emu_rounding rz = { .mode = EMU_RZ };
    return (float)emu_round(f, x, &rz, NULL);
}

static void fill(test_rng *g, emu_tensor *t, const emu_format *f, int elo,
                 int ehi)
{
    for (size_t i = 0; i < t->n; i++)
        t->data[i] = rand_val(g, f, elo, ehi);
}

/* Multiples of 2^-20 in [-1, 1]: x +- 2^-3 stays exact, and products
 * have up to 41 bits, so the binary32 outputs are rounded. */
static void fill_grid(test_rng *g, emu_tensor *t)
{
    for (size_t i = 0; i < t->n; i++)
        t->data[i] = (float)ldexp((double)test_below(g, (1u << 21) + 1) -
                                  (double)(1u << 20), -20);
}

/* ---- geometry and the terms, written independently of the library ----- */

typedef struct geo {
    size_t N, Ci, H, W, Co, KH, KW, Ho, Wo;
    int s, pad;
} geo;

static geo make_geo(size_t N, size_t Ci, size_t H, size_t W, size_t Co,
                    size_t KH, size_t KW, int s, int pad)
{
    geo g = { N, Ci, H, W, Co, KH, KW, 0, 0, s, pad };
    g.Ho = (H + 2 * (size_t)pad - KH) / (size_t)s + 1;
    g.Wo = (W + 2 * (size_t)pad - KW) / (size_t)s + 1;
    return g;
}

static geo rand_geo(test_rng *r)
{
    int s = 1 + (int)test_below(r, 2), pad = (int)test_below(r, 3);
    size_t H = 2 + test_below(r, 6), W = 2 + test_below(r, 6);
    size_t KH = 1 + test_below(r, 3), KW = 1 + test_below(r, 3);
    if (KH > H + 2 * (size_t)pad)
        KH = H;
    if (KW > W + 2 * (size_t)pad)
        KW = W;
    return make_geo(1 + test_below(r, 2), 1 + test_below(r, 3), H, W,
                    1 + test_below(r, 3), KH, KW, s, pad);
}

static float xv(const geo *g, const float *x, size_t n, size_t ci, long ih,
                long iw)
{
    if (ih < 0 || iw < 0 || ih >= (long)g->H || iw >= (long)g->W)
        return 0.0f;
    return x[((n * g->Ci + ci) * g->H + (size_t)ih) * g->W + (size_t)iw];
}

static size_t wi(const geo *g, size_t co, size_t ci, size_t kh, size_t kw)
{
    return ((co * g->Ci + ci) * g->KH + kh) * g->KW + kw;
}

static size_t yi(const geo *g, size_t n, size_t co, size_t oh, size_t ow)
{
    return ((n * g->Co + co) * g->Ho + oh) * g->Wo + ow;
}

/* Forward: bias * 1 first, then (ci, kh, kw). */
static size_t terms_fwd(const geo *g, const float *x, const float *w,
                        const float *b, size_t n, size_t co, size_t oh,
                        size_t ow, float *A, float *B)
{
    size_t k = 0;
    if (b) {
        A[k] = b[co];
        B[k++] = 1.0f;
    }
    for (size_t ci = 0; ci < g->Ci; ci++)
        for (size_t kh = 0; kh < g->KH; kh++)
            for (size_t kw = 0; kw < g->KW; kw++) {
                A[k] = w[wi(g, co, ci, kh, kw)];
                B[k++] = xv(g, x, n, ci, (long)(oh * (size_t)g->s + kh) - g->pad,
                            (long)(ow * (size_t)g->s + kw) - g->pad);
            }
    return k;
}

/* Data gradient: (co, kh, kw), dy where an output position feeds. */
static size_t terms_data(const geo *g, const float *dy, const float *w,
                         size_t n, size_t ci, size_t ih, size_t iw, float *A,
                         float *B)
{
    size_t k = 0;
    for (size_t co = 0; co < g->Co; co++)
        for (size_t kh = 0; kh < g->KH; kh++)
            for (size_t kw = 0; kw < g->KW; kw++) {
                long th = (long)ih + g->pad - (long)kh;
                long tw = (long)iw + g->pad - (long)kw;
                float d = 0.0f;
                if (th >= 0 && tw >= 0 && th % g->s == 0 && tw % g->s == 0 &&
                    th / g->s < (long)g->Ho && tw / g->s < (long)g->Wo)
                    d = dy[yi(g, n, co, (size_t)(th / g->s),
                              (size_t)(tw / g->s))];
                A[k] = w[wi(g, co, ci, kh, kw)];
                B[k++] = d;
            }
    return k;
}

/* Weight gradient: (n, oh, ow), dy first. */
static size_t terms_weights(const geo *g, const float *dy, const float *x,
                            size_t co, size_t ci, size_t kh, size_t kw,
                            float *A, float *B)
{
    size_t k = 0;
    for (size_t n = 0; n < g->N; n++)
        for (size_t oh = 0; oh < g->Ho; oh++)
            for (size_t ow = 0; ow < g->Wo; ow++) {
                A[k] = dy[yi(g, n, co, oh, ow)];
                B[k++] = xv(g, x, n, ci, (long)(oh * (size_t)g->s + kh) - g->pad,
                            (long)(ow * (size_t)g->s + kw) - g->pad);
            }
    return k;
}

static size_t terms_bias(const geo *g, const float *dy, size_t co, float *A)
{
    size_t k = 0;
    for (size_t n = 0; n < g->N; n++)
        for (size_t p = 0; p < g->Ho * g->Wo; p++)
            A[k++] = dy[(n * g->Co + co) * g->Ho * g->Wo + p];
    return k;
}

/* The tensors of one convolution problem. */
typedef struct prob {
    geo g;
    double alpha;     /* emu_conv_opts.alpha of the run */
    emu_tensor x, w, b, y, dy, dx, dw, db;
} prob;

static prob make_prob(geo g, const char *in_fmt, const char *out_fmt)
{
    prob p;
    p.g = g;
    p.alpha = 0.0;
    p.x = mk("x", in_fmt, g.N, g.Ci, g.H, g.W);
    p.w = mk("w", in_fmt, g.Co, g.Ci, g.KH, g.KW);
    p.b = mk("b", in_fmt, g.Co, 0, 0, 0);
    p.dy = mk("dy", in_fmt, g.N, g.Co, g.Ho, g.Wo);
    p.y = mk("y", out_fmt, g.N, g.Co, g.Ho, g.Wo);
    p.dx = mk("dx", out_fmt, g.N, g.Ci, g.H, g.W);
    p.dw = mk("dw", out_fmt, g.Co, g.Ci, g.KH, g.KW);
    p.db = mk("db", out_fmt, g.Co, 0, 0, 0);
    return p;
}

static void free_prob(prob *p)
{
    emu_tensor *t[] = { &p->x, &p->w, &p->b, &p->y, &p->dy, &p->dx, &p->dw,
                        &p->db };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        emu_tensor_free(t[i]);
}

static void run_all(emu_ctx *ctx, const emu_accum *accum,
                    const emu_rounding *rnd, prob *p, bool bias)
{
    emu_conv_opts o = { .accum = accum, .stride = p->g.s, .pad = p->g.pad,
                       .alpha = p->alpha };
    EXPECT(emu_t_conv2d(ctx, "c", &p->y, &p->x, &p->w, bias ? &p->b : NULL,
                        &o, rnd) == 0, "conv2d: %s", ctx->err.message);
    EXPECT(emu_t_conv2d_backward_data(ctx, "cd", &p->dx, &p->dy, &p->w, &o,
                                      rnd) == 0,
           "backward_data: %s", ctx->err.message);
    EXPECT(emu_t_conv2d_backward_weights(ctx, "cw", &p->dw, &p->db, &p->dy,
                                         &p->x, &o, rnd) == 0,
           "backward_weights: %s", ctx->err.message);
}

static void geo_string(const geo *g, char *buf, size_t size)
{
    snprintf(buf, size, "N%zu Ci%zu %zux%zu Co%zu k%zux%zu s%d p%d", g->N,
             g->Ci, g->H, g->W, g->Co, g->KH, g->KW, g->s, g->pad);
}

/* ---- 1a. sequential binary16 against scalar arithmetic ------------------- */

static double scalar_seq(const emu_accum *m, const float *A, const float *B,
                         size_t k)
{
    double s = 0.0;
    for (size_t i = 0; i < k; i++) {
        if (!B)
            s = emu_add(&m->acc, s, A[i], &m->rnd, NULL);
        else if (m->round_products)
            s = emu_add(&m->acc, s, emu_mul(&m->prod, A[i], B[i], &m->rnd, NULL),
                        &m->rnd, NULL);
        else
            s = emu_fma(&m->acc, A[i], B[i], s, &m->rnd, NULL);
    }
    return s;
}

START_TEST(sequential16_equals_scalar_chain)
{
    test_rng r = test_rng_make(0xc0a);
    static const char *const specs[] = {
        "sequential,acc=binary16", "sequential,acc=binary16,mode=rz",
        "sequential,acc=binary16,prod=binary16",
        "sequential,acc=binary16,prod=bfloat16,mode=ru" };
    static const char *const outs[] = { "binary16", "binary32", "e4m3" };
    float A[512], B[512];
    char gs[96];
    const uint64_t reps = test_scaled(40, 4);
    for (uint64_t rep = 0; rep < reps; rep++)
        for (int si = 0; si < 4; si++) {
            geo g = rand_geo(&r);
            const char *of = outs[(rep + (uint64_t)si) % 3];
            prob p = make_prob(g, "binary16", of);
            const emu_format *f16 = test_format("binary16");
            fill(&r, &p.x, f16, -4, 3);
            fill(&r, &p.w, f16, -4, 3);
            fill(&r, &p.b, f16, -4, 3);
            fill(&r, &p.dy, f16, -4, 3);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 5);
            emu_rounding rnd = test_rne;
            emu_accum accum;
            emu_accum_default(&accum);
            emu_error e;
            ck_assert_int_eq(emu_accum_parse(&accum, specs[si], &e), 0);
            rnd.mode = (emu_rnd)(rep % TEST_DET_MODES);
            const bool bias = rep % 2 == 0;
            run_all(&ctx, &accum, &rnd, &p, bias);
            geo_string(&g, gs, sizeof gs);
            const emu_accum *m = &accum;
            for (size_t n = 0; n < g.N; n++)
                for (size_t co = 0; co < g.Co; co++)
                    for (size_t oh = 0; oh < g.Ho; oh++)
                        for (size_t ow = 0; ow < g.Wo; ow++) {
                            size_t k = terms_fwd(&g, p.x.data, p.w.data,
                                                 bias ? p.b.data : NULL, n, co,
                                                 oh, ow, A, B);
                            double want = emu_convert(&p.y.fmt,
                                                      scalar_seq(m, A, B, k),
                                                      &rnd, NULL);
                            double got = p.y.data[yi(&g, n, co, oh, ow)];
                            EXPECT(test_same(want, got),
                                   "conv2d %s %s out %s %s bias %d at (%zu, "
                                   "%zu, %zu, %zu): got %a want %a", specs[si],
                                   gs, of, emu_rnd_name(rnd.mode), bias, n,
                                   co, oh, ow, got, want);
                        }
            for (size_t i = 0; i < p.dx.n; i++) {
                size_t iw = i % g.W, ih = (i / g.W) % g.H;
                size_t ci = (i / (g.W * g.H)) % g.Ci, n = i / (g.W * g.H * g.Ci);
                size_t k = terms_data(&g, p.dy.data, p.w.data, n, ci, ih, iw, A, B);
                double want = emu_convert(&p.dx.fmt, scalar_seq(m, A, B, k),
                                          &rnd, NULL);
                EXPECT(test_same(want, p.dx.data[i]),
                       "backward_data %s %s at %zu: got %a want %a", specs[si],
                       gs, i, (double)p.dx.data[i], want);
            }
            for (size_t i = 0; i < p.dw.n; i++) {
                size_t kw = i % g.KW, kh = (i / g.KW) % g.KH;
                size_t ci = (i / (g.KW * g.KH)) % g.Ci, co = i / (g.KW * g.KH * g.Ci);
                size_t k = terms_weights(&g, p.dy.data, p.x.data, co, ci, kh,
                                         kw, A, B);
                double want = emu_convert(&p.dw.fmt, scalar_seq(m, A, B, k),
                                          &rnd, NULL);
                EXPECT(test_same(want, p.dw.data[i]),
                       "backward_weights %s %s at %zu: got %a want %a",
                       specs[si], gs, i, (double)p.dw.data[i], want);
            }
            for (size_t co = 0; co < g.Co; co++) {
                size_t k = terms_bias(&g, p.dy.data, co, A);
                double want = emu_convert(&p.db.fmt, scalar_seq(m, A, NULL, k),
                                          &rnd, NULL);
                EXPECT(test_same(want, p.db.data[co]),
                       "dbias %s %s at %zu: got %a want %a", specs[si], gs, co,
                       (double)p.db.data[co], want);
            }
            free_prob(&p);
        }
}
END_TEST

/* ---- 1b. every model against emu_accum_dot ------------------------------- */

static const char *const model_specs[] = {
    "sequential,acc=binary16",
    "sequential,acc=bfloat16,prod=bfloat16,mode=rz",
    "pairwise,acc=binary16",
    "blocked,acc=e5m2,wide=binary32,block=5",
    "fused,k=4,w=14,acc=binary32",
    "kahan,acc=bfloat16",
    "exact",
    "fast",
    "sequential,acc=binary16,mode=sr",
    "pairwise,acc=bfloat16,mode=sr5",
};
enum { N_MODELS = sizeof model_specs / sizeof model_specs[0] };

static double model_out(const emu_ctx *ctx, const emu_accum *accum,
                        const emu_format *of, uint64_t stream,
                        uint64_t dot, const float *A, const float *B, size_t k,
                        double alpha);

/* The model's value of the terms, times alpha, rounded by RNE.  FAST is
 * host binary32 arithmetic (BLAS where available) with no promise of a
 * summation order: got must lie within the binary32 recursive-summation
 * bound, (k + 1) 2^-24 sum |terms| (+ the output rounding), of the exact
 * value; it is returned if so. */
static double model_out_got(const emu_ctx *ctx, const emu_accum *accum,
                            const emu_format *of,
                            uint64_t stream, uint64_t dot, const float *A,
                            const float *B, size_t k, double alpha, double got)
{
    if (accum->kind == EMU_ACCUM_FAST) {
        double s = 0.0, mag = 0.0; /* products exact, sum error << bound */
        for (size_t i = 0; i < k; i++) {
            double t = B ? (double)A[i] * B[i] : A[i];
            s += t;
            mag += fabs(t);
        }
        double bound = ((double)k + 1.0) * 0x1p-24 * mag * fabs(alpha) +
                       0x1p-24 * fabs(got);
        return fabs(got - s * alpha) <= bound ? got : s * alpha;
    }
    return model_out(ctx, accum, of, stream, dot, A, B, k, alpha);
}

/* The model's value of the terms, times alpha, rounded by RNE. */
static double model_out(const emu_ctx *ctx, const emu_accum *accum,
                        const emu_format *of, uint64_t stream,
                        uint64_t dot, const float *A, const float *B, size_t k,
                        double alpha)
{
    emu_accum_rng rng = { ctx->seed, stream ^ ((uint64_t)1 << 63), dot };
    double lo;
    double hi = emu_accum_dot(&lo, NULL, accum, A, 1, B, B ? 1 : 0, k, &rng);
    emu_rounding rne = { .mode = EMU_RNE };
    /* (hi + lo) alpha exactly (alpha need not be a power of two), then
     * the MPFR oracle's one rounding. */
    mpfr_t x, t;
    mpfr_inits2(256, x, t, (mpfr_ptr)0);
    mpfr_set_d(x, hi, MPFR_RNDN);
    mpfr_mul_d(x, x, alpha, MPFR_RNDN);
    if (isfinite(hi) && lo != 0.0) { /* adding +0 would lose a -0 */
        mpfr_set_d(t, lo, MPFR_RNDN);
        mpfr_mul_d(t, t, alpha, MPFR_RNDN);
        mpfr_add(x, x, t, MPFR_RNDN);
    }
    double v = emu_ref_round(of, x, &rne, NULL);
    mpfr_clears(x, t, (mpfr_ptr)0);
    return v;
}

START_TEST(models_equal_accum_dot)
{
    test_rng r = test_rng_make(0xd07);
    float A[512], B[512];
    char gs[96];
    const uint64_t reps = test_scaled(12, 2);
    for (uint64_t rep = 0; rep < reps; rep++)
        for (int mi = 0; mi < N_MODELS; mi++) {
            geo g = rand_geo(&r);
            prob p = make_prob(g, "binary32", "binary32");
            /* the last: a product of two binary32 tensor scales */
            static const double alphas[] = { 0.0, 1.0, 0x1p-3, 0x1p10,
                                             (double)0x1.7c0a3ep-2f * 0x1.b3p+0 };
            p.alpha = alphas[(rep + (uint64_t)mi) % 5];
            const double alpha = p.alpha == 0.0 ? 1.0 : p.alpha;
            const emu_format *f32 = test_format("binary32");
            fill(&r, &p.x, f32, -8, 4);
            fill(&r, &p.w, f32, -8, 4);
            fill(&r, &p.b, f32, -8, 4);
            fill(&r, &p.dy, f32, -8, 4);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 0x5eed + rep);
            emu_rounding rnd = test_rne;
            emu_accum accum;
            emu_accum_default(&accum);
            ctx.threads = 1 + (int)(rep % 2);
            emu_error e;
            ck_assert_int_eq(emu_accum_parse(&accum, model_specs[mi], &e), 0);
            /* streams: y 0, dx 1, dw 2, db 3 */
            run_all(&ctx, &accum, &rnd, &p, true);
            geo_string(&g, gs, sizeof gs);
            for (size_t i = 0; i < p.y.n; i++) {
                size_t ow = i % g.Wo, oh = (i / g.Wo) % g.Ho;
                size_t co = (i / (g.Wo * g.Ho)) % g.Co, n = i / (g.Wo * g.Ho * g.Co);
                size_t k = terms_fwd(&g, p.x.data, p.w.data, p.b.data, n, co,
                                     oh, ow, A, B);
                uint64_t dot = ((n * g.Ho + oh) * g.Wo + ow) * g.Co + co;
                double want = model_out_got(&ctx, &accum, &p.y.fmt, 0, dot, A,
                                            B, k, alpha, p.y.data[i]);
                EXPECT(test_same(want, p.y.data[i]),
                       "conv2d %s %s alpha %g [%zu]: got %a want %a",
                       model_specs[mi], gs, alpha, i, (double)p.y.data[i], want);
            }
            for (size_t i = 0; i < p.dx.n; i++) {
                size_t iw = i % g.W, ih = (i / g.W) % g.H;
                size_t ci = (i / (g.W * g.H)) % g.Ci, n = i / (g.W * g.H * g.Ci);
                size_t k = terms_data(&g, p.dy.data, p.w.data, n, ci, ih, iw, A, B);
                uint64_t dot = ((n * g.H + ih) * g.W + iw) * g.Ci + ci;
                double want = model_out_got(&ctx, &accum, &p.dx.fmt, 1, dot, A,
                                            B, k, alpha, p.dx.data[i]);
                EXPECT(test_same(want, p.dx.data[i]),
                       "backward_data %s %s [%zu]: got %a want %a",
                       model_specs[mi], gs, i, (double)p.dx.data[i], want);
            }
            for (size_t i = 0; i < p.dw.n; i++) {
                size_t kw = i % g.KW, kh = (i / g.KW) % g.KH;
                size_t ci = (i / (g.KW * g.KH)) % g.Ci, co = i / (g.KW * g.KH * g.Ci);
                size_t k = terms_weights(&g, p.dy.data, p.x.data, co, ci, kh,
                                         kw, A, B);
                double want = model_out_got(&ctx, &accum, &p.dw.fmt, 2, i, A,
                                            B, k, alpha, p.dw.data[i]);
                EXPECT(test_same(want, p.dw.data[i]),
                       "backward_weights %s %s [%zu]: got %a want %a",
                       model_specs[mi], gs, i, (double)p.dw.data[i], want);
            }
            for (size_t co = 0; co < g.Co; co++) {
                size_t k = terms_bias(&g, p.dy.data, co, A);
                double want = model_out_got(&ctx, &accum, &p.db.fmt, 3, co, A,
                                            NULL, k, alpha, p.db.data[co]);
                EXPECT(test_same(want, p.db.data[co]),
                       "dbias %s %s [%zu]: got %a want %a", model_specs[mi],
                       gs, co, (double)p.db.data[co], want);
            }
            free_prob(&p);
        }
}
END_TEST

/* ---- 1c. the fast model: sgemm on the documented matrices ---------------- */

/* The FAST model has no summation order of its own: it is BLAS sgemm (or
 * the host loop) on the im2row matrices, so the matrices' every entry
 * decides its bits.  This builds them from the suite's own term lists
 * (the rows of terms_fwd / terms_data / terms_weights, the padding +0)
 * and calls the same GEMM on them: the convolution must give the same
 * bits, at shapes that exercise each specialised kernel width (1, 3, 5)
 * and the general one, strides, padding wider and narrower than the
 * kernel, and a single channel. */
static void fast_case(geo g, test_rng *r)
{
    char gs[96];
    geo_string(&g, gs, sizeof gs);
    prob p = make_prob(g, "binary32", "binary32");
    const emu_format *f32 = test_format("binary32");
    fill(&r[0], &p.x, f32, -8, 4);
    fill(&r[0], &p.w, f32, -8, 4);
    fill(&r[0], &p.b, f32, -8, 4);
    fill(&r[0], &p.dy, f32, -8, 4);
    /* input channel 0's weights all negative: a data-gradient output whose
     * terms are all zero is then a sum of -0 products (the 1x1 stride-2
     * path copies that output of sgemm to every position off the grid) */
    for (size_t co = 0; co < g.Co; co++)
        for (size_t k = 0; k < g.KH * g.KW; k++) {
            float *v = &p.w.data[co * g.Ci * g.KH * g.KW + k];
            *v = -fabsf(*v);
        }
    /* -0 inputs stay -0 in the matrices, padding is +0 */
    p.x.data[0] = -0.0f;
    p.dy.data[p.dy.n - 1] = -0.0f;
    emu_ctx ctx;
    emu_ctx_init(&ctx, 7);
    emu_rounding rnd = test_rne;
    emu_accum accum;
    emu_accum_default(&accum);
    emu_error e;
    ck_assert_int_eq(emu_accum_parse(&accum, "fast", &e), 0);
    run_all(&ctx, &accum, &rnd, &p, true);

    const size_t Kf = g.Ci * g.KH * g.KW + 1, Pf = g.N * g.Ho * g.Wo;
    const size_t Kd = g.Co * g.KH * g.KW, Pd = g.N * g.H * g.W;
    const size_t Kw = g.Ci * g.KH * g.KW, T = Pf;
    size_t big = Kf * Pf + Kd * Pd + Kw * T;
    float *rows = malloc(big * sizeof *rows), *wm = malloc(big * sizeof *wm);
    float *out = malloc(big * sizeof *out);
    float *A = malloc((Kf + Kd + T) * sizeof *A);
    float *B = malloc((Kf + Kd + T) * sizeof *B);
    ck_assert(rows && wm && out && A && B);

    /* forward: rows (n, oh, ow) x (1, ci, kh, kw); wm (co) x K */
    for (size_t n = 0; n < g.N; n++)
        for (size_t oh = 0; oh < g.Ho; oh++)
            for (size_t ow = 0; ow < g.Wo; ow++)
                for (size_t co = 0; co < g.Co; co++) {
                    size_t k = terms_fwd(&g, p.x.data, p.w.data, p.b.data, n,
                                         co, oh, ow, A, B);
                    EXPECT(k == Kf, "forward terms: %zu, want %zu", k, (size_t)Kf);
                    memcpy(rows + ((n * g.Ho + oh) * g.Wo + ow) * Kf, B,
                           Kf * sizeof *B);
                    memcpy(wm + co * Kf, A, Kf * sizeof *A);
                }
    ck_assert_int_eq(emu_gemm_fast_f32(Pf, g.Co, Kf, rows, (ptrdiff_t)Kf, 1,
                                       wm, 1, (ptrdiff_t)Kf, NULL, out), 0);
    for (size_t i = 0; i < p.y.n; i++) {
        size_t ow = i % g.Wo, oh = (i / g.Wo) % g.Ho;
        size_t co = (i / (g.Wo * g.Ho)) % g.Co, n = i / (g.Wo * g.Ho * g.Co);
        float want = out[((n * g.Ho + oh) * g.Wo + ow) * g.Co + co];
        EXPECT(memcmp(&want, &p.y.data[i], sizeof want) == 0,
               "fast conv2d %s [%zu]: got %a, sgemm %a", gs, i,
               (double)p.y.data[i], (double)want);
    }

    /* data: rows (n, ih, iw) x (co, kh, kw); wm (ci) x K */
    for (size_t n = 0; n < g.N; n++)
        for (size_t ih = 0; ih < g.H; ih++)
            for (size_t iw = 0; iw < g.W; iw++)
                for (size_t ci = 0; ci < g.Ci; ci++) {
                    size_t k = terms_data(&g, p.dy.data, p.w.data, n, ci, ih,
                                          iw, A, B);
                    EXPECT(k == Kd, "data terms: %zu, want %zu", k, (size_t)Kd);
                    memcpy(rows + ((n * g.H + ih) * g.W + iw) * Kd, B,
                           Kd * sizeof *B);
                    memcpy(wm + ci * Kd, A, Kd * sizeof *A);
                }
    ck_assert_int_eq(emu_gemm_fast_f32(Pd, g.Ci, Kd, rows, (ptrdiff_t)Kd, 1,
                                       wm, 1, (ptrdiff_t)Kd, NULL, out), 0);
    for (size_t i = 0; i < p.dx.n; i++) {
        size_t iw = i % g.W, ih = (i / g.W) % g.H;
        size_t ci = (i / (g.W * g.H)) % g.Ci, n = i / (g.W * g.H * g.Ci);
        float want = out[((n * g.H + ih) * g.W + iw) * g.Ci + ci];
        EXPECT(memcmp(&want, &p.dx.data[i], sizeof want) == 0,
               "fast backward_data %s [%zu]: got %a, sgemm %a", gs, i,
               (double)p.dx.data[i], (double)want);
    }

    /* weights: dy (co) x (n, oh, ow); rows (n, oh, ow) x (ci, kh, kw) */
    for (size_t co = 0; co < g.Co; co++)
        for (size_t ci = 0; ci < g.Ci; ci++)
            for (size_t kh = 0; kh < g.KH; kh++)
                for (size_t kw = 0; kw < g.KW; kw++) {
                    size_t k = terms_weights(&g, p.dy.data, p.x.data, co, ci,
                                             kh, kw, A, B);
                    EXPECT(k == T, "weights terms: %zu, want %zu", k, (size_t)T);
                    size_t c = (ci * g.KH + kh) * g.KW + kw;
                    memcpy(wm + co * T, A, T * sizeof *A);
                    for (size_t t = 0; t < T; t++)
                        rows[t * Kw + c] = B[t];
                }
    ck_assert_int_eq(emu_gemm_fast_f32(g.Co, Kw, T, wm, (ptrdiff_t)T, 1, rows,
                                       (ptrdiff_t)Kw, 1, NULL, out), 0);
    for (size_t i = 0; i < p.dw.n; i++)
        EXPECT(memcmp(&out[i], &p.dw.data[i], sizeof out[i]) == 0,
               "fast backward_weights %s [%zu]: got %a, sgemm %a", gs, i,
               (double)p.dw.data[i], (double)out[i]);

    /* dbias: the fast model's dot product of the terms (a binary32 sum in
     * (n, oh, ow) order), bit for bit, whichever channels the op sums
     * side by side */
    for (size_t co = 0; co < g.Co; co++) {
        size_t k = terms_bias(&g, p.dy.data, co, A);
        emu_accum_rng rng = { ctx.seed, 0, co };
        double lo, want = emu_accum_dot(&lo, NULL, &accum, A, 1, NULL, 0, k,
                                        &rng);
        EXPECT(test_same(want, p.db.data[co]),
               "fast dbias %s [%zu]: got %a, the fast dot %a", gs, co,
               (double)p.db.data[co], want);
    }
    free(rows);
    free(wm);
    free(out);
    free(A);
    free(B);
    free_prob(&p);
}

START_TEST(fast_is_sgemm_on_the_matrices)
{
    test_rng r = test_rng_make(0xfa57);
    /* N, Ci, H, W, Co, KH, KW, stride, pad */
    const geo shapes[] = {
        make_geo(2, 1, 28, 28, 6, 5, 5, 1, 2),  /* LeNet conv1: same padding */
        make_geo(3, 6, 14, 14, 16, 5, 5, 1, 0), /* LeNet conv2 */
        make_geo(2, 3, 9, 8, 4, 3, 3, 2, 1),    /* ResNet downsampling 3x3 */
        make_geo(2, 4, 8, 7, 5, 1, 1, 2, 0),    /* 1x1 shortcut, stride 2 */
        make_geo(1, 1, 5, 6, 1, 1, 1, 1, 0),    /* 1x1, one channel */
        make_geo(2, 2, 11, 9, 3, 5, 5, 2, 0),   /* 5x5, stride 2, odd size */
        make_geo(1, 2, 13, 12, 3, 7, 7, 2, 3),  /* 7x7 stem, stride 2 */
        make_geo(1, 2, 6, 7, 3, 4, 2, 3, 3),    /* general widths, pad >= KW */
        make_geo(2, 1, 3, 4, 2, 3, 4, 1, 2),    /* kernel wider than input */
        make_geo(3, 2, 10, 9, 11, 3, 3, 1, 1),  /* 11 channels: the bias sums'
                                                 * lanes, a partial group */
        /* large enough for the fast model's row blocks (several, and a
         * longer last one): ResNet stages, the stem */
        make_geo(5, 16, 28, 28, 16, 3, 3, 1, 1),
        make_geo(6, 16, 28, 28, 32, 3, 3, 2, 1),
        make_geo(7, 32, 14, 13, 64, 3, 3, 1, 1),
        make_geo(40, 1, 28, 28, 16, 3, 3, 1, 1),
        /* 1x1 stride-2 shortcuts (ResNet stages 2 and 3), large enough for
         * the data gradient's GEMM on the distinct rows only; padded, and
         * stride 3 with an odd size */
        make_geo(64, 16, 28, 28, 32, 1, 1, 2, 0),
        make_geo(64, 32, 14, 14, 64, 1, 1, 2, 0),
        make_geo(40, 16, 15, 15, 32, 1, 1, 2, 1),
        make_geo(60, 24, 17, 16, 40, 1, 1, 3, 0),
        /* weight gradients above 8e6 multiply-adds, made in slices of the
         * sum over positions (several, and a longer last one): ResNet's
         * first stage, a stride-2 stage, a 5x5 kernel without padding */
        make_geo(12, 16, 28, 28, 16, 3, 3, 1, 1),
        make_geo(10, 16, 28, 28, 32, 3, 3, 2, 1),
        make_geo(9, 8, 30, 30, 24, 5, 5, 1, 0),
        /* LeNet conv1 at batch 64: 7.5e6, just above 28 * 512^2 */
        make_geo(64, 1, 28, 28, 6, 5, 5, 1, 2),
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        fast_case(shapes[i], &r);
    const uint64_t reps = test_scaled(40, 8);
    for (uint64_t i = 0; i < reps; i++)
        fast_case(rand_geo(&r), &r);
}
END_TEST

/* Results and swamping counts do not depend on the thread count. */
START_TEST(threads_do_not_matter)
{
    test_rng r = test_rng_make(0x712);
    geo g = make_geo(2, 3, 9, 8, 4, 3, 3, 1, 1);
    prob p[2] = { make_prob(g, "binary32", "binary16"),
                  make_prob(g, "binary32", "binary16") };
    const emu_format *f32 = test_format("binary32");
    fill(&r, &p[0].x, f32, -6, 3);
    fill(&r, &p[0].w, f32, -6, 3);
    fill(&r, &p[0].b, f32, -6, 3);
    fill(&r, &p[0].dy, f32, -6, 3);
    memcpy(p[1].x.data, p[0].x.data, p[0].x.n * sizeof(float));
    memcpy(p[1].w.data, p[0].w.data, p[0].w.n * sizeof(float));
    memcpy(p[1].b.data, p[0].b.data, p[0].b.n * sizeof(float));
    memcpy(p[1].dy.data, p[0].dy.data, p[0].dy.n * sizeof(float));
    emu_stats st[2];
    for (int t = 0; t < 2; t++) {
        emu_stats_init(&st[t]);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 42);
        emu_rounding rnd = test_rne;
        emu_accum accum;
        emu_accum_default(&accum);
        ctx.stats = &st[t];
        ctx.threads = 1 + 2 * t;
        rnd.mode = EMU_RS;
        emu_error e;
        ck_assert_int_eq(emu_accum_parse(&accum,
                                         "sequential,acc=binary16,mode=sr", &e), 0);
        run_all(&ctx, &accum, &rnd, &p[t], true);
    }
    emu_tensor *a[] = { &p[0].y, &p[0].dx, &p[0].dw, &p[0].db };
    emu_tensor *b[] = { &p[1].y, &p[1].dx, &p[1].dw, &p[1].db };
    for (int k = 0; k < 4; k++)
        EXPECT(memcmp(a[k]->data, b[k]->data, a[k]->n * sizeof(float)) == 0,
               "output %s differs between 1 and 3 threads", a[k]->name);
    const char *sites[] = { "c", "cd", "cw", "cw.dbias" };
    for (int k = 0; k < 4; k++) {
        const emu_site *s0 = emu_stats_find_name(&st[0], sites[k]);
        const emu_site *s1 = emu_stats_find_name(&st[1], sites[k]);
        ck_assert(s0 && s1);
        EXPECT(s0->total.adds == s1->total.adds &&
               s0->total.absorbed == s1->total.absorbed &&
               memcmp(s0->total.lost_bits, s1->total.lost_bits,
                      sizeof s0->total.lost_bits) == 0,
               "site %s: swamping counts depend on threads", sites[k]);
    }
    /* sequential counts one add per term, zero terms included */
    const emu_site *sy = emu_stats_find_name(&st[0], "c");
    size_t K = g.Ci * g.KH * g.KW + 1;
    EXPECT(sy->total.adds == p[0].y.n * K, "conv adds %llu, want %zu",
           (unsigned long long)sy->total.adds, p[0].y.n * K);
    EXPECT(sy->total.absorbed > 0, "binary16 accumulation absorbed nothing");
    emu_stats_free(&st[0]);
    emu_stats_free(&st[1]);
    free_prob(&p[0]);
    free_prob(&p[1]);
}
END_TEST

/* ---- 2. EXACT model against MPFR, and the reference callbacks ----------- */

/* The exact dot product.  Its zero is +0: accum_ref.c's EXACT model gives -0
 * when every term is -0 (IEEE addition's rule), a convention of that file
 * (tested in test_accum.c), so zero results match up to sign here. */
static void mp_dot(mpfr_ptr out, const float *A, const float *B, size_t k)
{
    mpfr_t t;
    mpfr_init2(t, PREC);
    mpfr_set_zero(out, 1);
    for (size_t i = 0; i < k; i++) {
        mpfr_set_flt(t, A[i], MPFR_RNDN);
        if (B)
            mpfr_mul_d(t, t, B[i], MPFR_RNDN);
        mpfr_add(out, out, t, MPFR_RNDN); /* exact at PREC */
    }
    mpfr_clear(t);
}

static bool same_or_zeros(double want, double got)
{
    return test_same(want, got) || (want == 0.0 && got == 0.0);
}

START_TEST(exact_model_vs_mpfr)
{
    test_rng r = test_rng_make(0xe4ac);
    float A[512], B[512];
    mpfr_t ex;
    mpfr_init2(ex, PREC);
    static const char *const outs[] = { "binary16", "bfloat16", "e4m3",
                                        "binary32" };
    char gs[96];
    const uint64_t reps = test_scaled(4, 1) * TEST_DET_MODES;
    for (uint64_t rep = 0; rep < reps; rep++)
        for (int oi = 0; oi < 4; oi++) {
            const int mode = (int)(rep % TEST_DET_MODES);
            geo g = rand_geo(&r);
            prob p = make_prob(g, "binary32", outs[oi]);
            const emu_format *f32 = test_format("binary32");
            /* wide exponents: cancellation and terms far apart */
            fill(&r, &p.x, f32, -40, 3);
            fill(&r, &p.w, f32, -40, 3);
            fill(&r, &p.b, f32, -40, 3);
            fill(&r, &p.dy, f32, -40, 3);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 1);
            emu_rounding rnd = test_rne;
            emu_accum accum;
            emu_accum_default(&accum);
            accum.kind = EMU_ACCUM_EXACT;
            rnd.mode = (emu_rnd)mode;
            run_all(&ctx, &accum, &rnd, &p, true);
            geo_string(&g, gs, sizeof gs);
            for (size_t i = 0; i < p.y.n; i++) {
                size_t ow = i % g.Wo, oh = (i / g.Wo) % g.Ho;
                size_t co = (i / (g.Wo * g.Ho)) % g.Co, n = i / (g.Wo * g.Ho * g.Co);
                mp_dot(ex, A, B, terms_fwd(&g, p.x.data, p.w.data, p.b.data, n,
                                           co, oh, ow, A, B));
                double want = emu_ref_round(&p.y.fmt, ex, &rnd, NULL);
                EXPECT(same_or_zeros(want, p.y.data[i]), "exact conv2d %s %s %s "
                       "[%zu]: got %a want %a", outs[oi],
                       emu_rnd_name(rnd.mode), gs, i, (double)p.y.data[i],
                       want);
            }
            for (size_t i = 0; i < p.dx.n; i++) {
                size_t iw = i % g.W, ih = (i / g.W) % g.H;
                size_t ci = (i / (g.W * g.H)) % g.Ci, n = i / (g.W * g.H * g.Ci);
                mp_dot(ex, A, B, terms_data(&g, p.dy.data, p.w.data, n, ci, ih,
                                            iw, A, B));
                double want = emu_ref_round(&p.dx.fmt, ex, &rnd, NULL);
                EXPECT(same_or_zeros(want, p.dx.data[i]), "exact backward_data %s "
                       "%s %s [%zu]: got %a want %a", outs[oi],
                       emu_rnd_name(rnd.mode), gs, i,
                       (double)p.dx.data[i], want);
            }
            for (size_t i = 0; i < p.dw.n; i++) {
                size_t kw = i % g.KW, kh = (i / g.KW) % g.KH;
                size_t ci = (i / (g.KW * g.KH)) % g.Ci, co = i / (g.KW * g.KH * g.Ci);
                mp_dot(ex, A, B, terms_weights(&g, p.dy.data, p.x.data, co, ci,
                                               kh, kw, A, B));
                double want = emu_ref_round(&p.dw.fmt, ex, &rnd, NULL);
                EXPECT(same_or_zeros(want, p.dw.data[i]), "exact backward_weights "
                       "%s %s %s [%zu]: got %a want %a", outs[oi],
                       emu_rnd_name(rnd.mode), gs, i,
                       (double)p.dw.data[i], want);
            }
            for (size_t co = 0; co < g.Co; co++) {
                mp_dot(ex, A, NULL, terms_bias(&g, p.dy.data, co, A));
                double want = emu_ref_round(&p.db.fmt, ex, &rnd, NULL);
                EXPECT(same_or_zeros(want, p.db.data[co]), "exact dbias %s %s "
                       "[%zu]: got %a want %a", outs[oi],
                       emu_rnd_name(rnd.mode), co, (double)p.db.data[co],
                       want);
            }
            free_prob(&p);
        }
    mpfr_clear(ex);
}
END_TEST

/* Every output sampled: with the EXACT model the error is the output
 * rounding alone (<= 1/2 ulp under RNE, no accumulation error); with a
 * binary16 sequential accumulator the accumulation error shows. */
START_TEST(reference_callbacks)
{
    test_rng r = test_rng_make(0x4ef);
    geo g = make_geo(2, 3, 6, 5, 2, 3, 2, 2, 1);
    for (int exact = 0; exact < 2; exact++) {
        prob p = make_prob(g, "binary32", "binary32");
        const emu_format *f32 = test_format("binary32");
        fill(&r, &p.x, f32, -3, 3);
        fill(&r, &p.w, f32, -3, 3);
        fill(&r, &p.b, f32, -3, 3);
        fill(&r, &p.dy, f32, -3, 3);
        emu_stats st;
        emu_stats_init(&st);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        emu_rounding rnd = test_rne;
        emu_accum accum;
        emu_accum_default(&accum);
        ctx.stats = &st;
        ctx.measure = EMU_MEASURE_ALL;
        ctx.ref_rate = 1.0;
        emu_error e;
        ck_assert_int_eq(emu_accum_parse(&accum, exact ? "exact"
                                         : "sequential,acc=binary16", &e), 0);
        run_all(&ctx, &accum, &rnd, &p, true);
        const char *sites[] = { "c", "cd", "cw", "cw.dbias" };
        const size_t n[] = { p.y.n, p.dx.n, p.dw.n, p.db.n };
        for (int k = 0; k < 4; k++) {
            const emu_site *s = emu_stats_find_name(&st, sites[k]);
            ck_assert_msg(s != NULL, "site %s", sites[k]);
            /* zero exact dot products have no relative split */
            EXPECT(s->total.ref_samples == n[k] && s->total.dot_samples > 0,
                   "site %s: %llu samples (%llu dot) of %zu", sites[k],
                   (unsigned long long)s->total.ref_samples,
                   (unsigned long long)s->total.dot_samples, n[k]);
            if (exact)
                EXPECT(s->total.ulp_max <= 0.5 && s->total.accum_max == 0.0,
                       "exact site %s: ulp_max %g accum_max %g", sites[k],
                       s->total.ulp_max, s->total.accum_max);
            else
                EXPECT(s->total.accum_max > 0x1p-20,
                       "binary16 site %s: accumulation error %g invisible",
                       sites[k], s->total.accum_max);
        }
        emu_stats_free(&st);
        free_prob(&p);
    }
}
END_TEST

/* ---- 3. gradient checks ------------------------------------------------- */

static double ulp32(double v)
{
    int e;
    frexp(v, &e);
    return ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

/* The central difference of L = sum r_i y_i and its rigorous tolerance,
 * over the outputs in `reach` (those whose exact value depends on the
 * perturbed input; the others are bit-identical in both runs). */
static void central(const emu_tensor *r, const emu_tensor *yp,
                    const emu_tensor *ym, const bool *reach, double h,
                    double *fd, double *tol)
{
    double s = 0.0, mag = 0.0, bound = 0.0;
    for (size_t i = 0; i < r->n; i++) {
        double d = (double)r->data[i] * ((double)yp->data[i] - ym->data[i]);
        s += d;
        mag += fabs(d);
        if (reach[i])
            bound += fabs(r->data[i]) * (ulp32(yp->data[i]) + ulp32(ym->data[i])) / 2.0;
    }
    *fd = s / (2.0 * h);
    *tol = (bound + 0x1p-50 * mag) / (2.0 * h);
}

typedef struct gc_stats {
    double worst;   /* max |fd - g| / tol */
    size_t checks;
} gc_stats;

static void gc_check(gc_stats *st, const char *what, const char *gs, size_t j,
                     double fd, double tol, double gr)
{
    tol += ulp32(gr) / 2.0;
    double err = fabs(fd - gr);
    st->worst = fmax(st->worst, err / tol);
    st->checks++;
    EXPECT(err <= tol, "%s gradient %s [%zu]: fd %.10g analytic %.10g |diff| "
           "%.3g > tol %.3g", what, gs, j, fd, gr, err, tol);
}

static void conv_gradient_case(geo g, test_rng *r, gc_stats *st)
{
    const double h = 0x1p-3;
    prob p = make_prob(g, "binary32", "binary32");
    emu_tensor yp = mk("yp", "binary32", g.N, g.Co, g.Ho, g.Wo);
    emu_tensor ym = mk("ym", "binary32", g.N, g.Co, g.Ho, g.Wo);
    fill_grid(r, &p.x);
    fill_grid(r, &p.w);
    fill_grid(r, &p.b);
    fill_grid(r, &p.dy); /* r of the loss */
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_rounding rnd = test_rne;
    emu_accum accum;
    emu_accum_default(&accum);
    accum.kind = EMU_ACCUM_EXACT;
    run_all(&ctx, &accum, &rnd, &p, true);
    emu_conv_opts o = { .accum = &accum, .stride = g.s, .pad = g.pad };
    bool *reach = malloc(p.y.n * sizeof *reach);
    char gs[96];
    geo_string(&g, gs, sizeof gs);
    /* data */
    for (size_t j = 0; j < p.x.n; j++) {
        size_t iw = j % g.W, ih = (j / g.W) % g.H, nj = j / (g.W * g.H * g.Ci);
        for (size_t i = 0; i < p.y.n; i++) {
            size_t ow = i % g.Wo, oh = (i / g.Wo) % g.Ho;
            size_t n = i / (g.Wo * g.Ho * g.Co);
            long kh = (long)ih + g.pad - (long)(oh * (size_t)g.s);
            long kw = (long)iw + g.pad - (long)(ow * (size_t)g.s);
            reach[i] = n == nj && kh >= 0 && kh < (long)g.KH && kw >= 0 &&
                       kw < (long)g.KW;
        }
        float x0 = p.x.data[j];
        p.x.data[j] = x0 + (float)h;
        ck_assert_int_eq(emu_t_conv2d(&ctx, "c", &yp, &p.x, &p.w, &p.b, &o,
                                      &rnd), 0);
        p.x.data[j] = x0 - (float)h;
        ck_assert_int_eq(emu_t_conv2d(&ctx, "c", &ym, &p.x, &p.w, &p.b, &o,
                                      &rnd), 0);
        p.x.data[j] = x0;
        double fd, tol;
        central(&p.dy, &yp, &ym, reach, h, &fd, &tol);
        gc_check(st, "conv data", gs, j, fd, tol, p.dx.data[j]);
    }
    /* weights and bias: every output of channel co */
    for (size_t j = 0; j < p.w.n + p.b.n; j++) {
        bool is_w = j < p.w.n;
        size_t co = is_w ? j / (g.Ci * g.KH * g.KW) : j - p.w.n;
        for (size_t i = 0; i < p.y.n; i++)
            reach[i] = (i / (g.Ho * g.Wo)) % g.Co == co;
        float *v = is_w ? &p.w.data[j] : &p.b.data[co];
        float v0 = *v;
        *v = v0 + (float)h;
        ck_assert_int_eq(emu_t_conv2d(&ctx, "c", &yp, &p.x, &p.w, &p.b, &o,
                                      &rnd), 0);
        *v = v0 - (float)h;
        ck_assert_int_eq(emu_t_conv2d(&ctx, "c", &ym, &p.x, &p.w, &p.b, &o,
                                      &rnd), 0);
        *v = v0;
        double fd, tol;
        central(&p.dy, &yp, &ym, reach, h, &fd, &tol);
        gc_check(st, is_w ? "conv weight" : "conv bias", gs, j, fd, tol,
                 is_w ? p.dw.data[j] : p.db.data[co]);
    }
    free(reach);
    emu_tensor_free(&yp);
    emu_tensor_free(&ym);
    free_prob(&p);
}

START_TEST(conv_gradient)
{
    test_rng r = test_rng_make(0x96ad);
    gc_stats st = { 0, 0 };
    /* stride 2 with padding 1, non-square kernels, and random shapes */
    conv_gradient_case(make_geo(2, 2, 7, 6, 3, 3, 3, 2, 1), &r, &st);
    conv_gradient_case(make_geo(1, 3, 5, 8, 2, 2, 3, 1, 1), &r, &st);
    conv_gradient_case(make_geo(2, 1, 6, 6, 2, 3, 1, 2, 0), &r, &st);
    for (int k = 0; k < 4; k++)
        conv_gradient_case(rand_geo(&r), &r, &st);
    fprintf(stderr, "conv2d gradient check: %zu derivatives, worst |fd - g| "
            "/ tol = %.3f\n", st.checks, st.worst);
}
END_TEST

typedef struct pgeo {
    size_t N, C, H, W, size, stride, Ho, Wo;
} pgeo;

static pgeo make_pgeo(size_t N, size_t C, size_t H, size_t W, size_t size,
                      size_t stride)
{
    pgeo g = { N, C, H, W, size, stride, (H - size) / stride + 1,
               (W - size) / stride + 1 };
    return g;
}

static bool in_window(const pgeo *g, size_t o, size_t j)
{
    size_t ow = o % g->Wo, oh = (o / g->Wo) % g->Ho, nc = o / (g->Wo * g->Ho);
    size_t jw = j % g->W, jh = (j / g->W) % g->H, jnc = j / (g->W * g->H);
    return nc == jnc && jh >= oh * g->stride && jh < oh * g->stride + g->size &&
           jw >= ow * g->stride && jw < ow * g->stride + g->size;
}

static void pool_gradient_case(pgeo g, test_rng *r, gc_stats *st_avg,
                               gc_stats *st_max)
{
    const double h = 0x1p-8;
    emu_tensor x = mk("x", "binary32", g.N, g.C, g.H, g.W);
    emu_tensor dx = mk("dx", "binary32", g.N, g.C, g.H, g.W);
    emu_tensor rr = mk("r", "binary32", g.N, g.C, g.Ho, g.Wo);
    emu_tensor yp = mk("yp", "binary32", g.N, g.C, g.Ho, g.Wo);
    emu_tensor ym = mk("ym", "binary32", g.N, g.C, g.Ho, g.Wo);
    /* distinct values 2^-6 apart (> 2h), shuffled: no argmax changes */
    for (size_t i = 0; i < x.n; i++)
        x.data[i] = (float)ldexp((double)i - (double)x.n / 2.0, -6);
    for (size_t i = x.n; i > 1; i--) {
        size_t k = test_below(r, i);
        float t = x.data[i - 1];
        x.data[i - 1] = x.data[k];
        x.data[k] = t;
    }
    fill_grid(r, &rr);
    emu_pool_opts o = { (int)g.size, (int)g.stride };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    size_t *arg = malloc(yp.n * sizeof *arg);
    bool *reach = malloc(yp.n * sizeof *reach);
    char gs[64];
    snprintf(gs, sizeof gs, "N%zu C%zu %zux%zu size %zu stride %zu", g.N, g.C,
             g.H, g.W, g.size, g.stride);
    for (int maxp = 0; maxp < 2; maxp++) {
        if (maxp) {
            ck_assert_int_eq(emu_t_maxpool2d(&ctx, "p", &yp, arg, &x, &o,
                                             &test_rne), 0);
            ck_assert_int_eq(emu_t_maxpool2d_backward(&ctx, "pb", &dx, &rr,
                                                      arg, &o, &test_rne), 0);
        } else {
            ck_assert_int_eq(emu_t_avgpool2d_backward(&ctx, "pb", &dx, &rr,
                                                      &o, &test_rne), 0);
        }
        for (size_t j = 0; j < x.n; j++) {
            for (size_t i = 0; i < yp.n; i++)
                reach[i] = in_window(&g, i, j);
            float x0 = x.data[j];
            x.data[j] = x0 + (float)h;
            ck_assert_int_eq(maxp ? emu_t_maxpool2d(&ctx, "p", &yp, NULL, &x,
                                                    &o, &test_rne)
                                  : emu_t_avgpool2d(&ctx, "p", &yp, &x, &o,
                                                    &test_rne), 0);
            x.data[j] = x0 - (float)h;
            ck_assert_int_eq(maxp ? emu_t_maxpool2d(&ctx, "p", &ym, NULL, &x,
                                                    &o, &test_rne)
                                  : emu_t_avgpool2d(&ctx, "p", &ym, &x, &o,
                                                    &test_rne), 0);
            x.data[j] = x0;
            double fd, tol;
            central(&rr, &yp, &ym, reach, h, &fd, &tol);
            if (maxp) /* selections are exact: no output rounding */
                tol = 0x1p-50 * fabs(fd);
            gc_check(maxp ? st_max : st_avg, maxp ? "maxpool" : "avgpool", gs,
                     j, fd, tol, dx.data[j]);
        }
    }
    free(arg);
    free(reach);
    emu_tensor_free(&x);
    emu_tensor_free(&dx);
    emu_tensor_free(&rr);
    emu_tensor_free(&yp);
    emu_tensor_free(&ym);
}

START_TEST(pool_gradient)
{
    test_rng r = test_rng_make(0x9001);
    gc_stats sa = { 0, 0 }, sm = { 0, 0 };
    pool_gradient_case(make_pgeo(2, 2, 6, 7, 2, 2), &r, &sa, &sm);
    pool_gradient_case(make_pgeo(1, 2, 7, 7, 3, 2), &r, &sa, &sm); /* overlap */
    pool_gradient_case(make_pgeo(1, 1, 5, 6, 3, 1), &r, &sa, &sm);
    pool_gradient_case(make_pgeo(1, 3, 7, 5, 2, 3), &r, &sa, &sm); /* gaps */
    fprintf(stderr, "pool gradient checks: avg %zu derivatives, worst %.3f; "
            "max %zu derivatives, worst %.3f\n", sa.checks, sa.worst,
            sm.checks, sm.worst);
}
END_TEST

/* ---- pooling exactness against MPFR ------------------------------------- */

START_TEST(pooling_vs_mpfr)
{
    test_rng r = test_rng_make(0x9007);
    static const char *const outs[] = { "binary16", "bfloat16", "e4m3",
                                        "binary32" };
    /* { size, stride }: windows apart (with inputs outside every window
     * when the stride is larger or the size odd), overlapping, and one
     * window over the whole (5 x 5) image, the global average pool */
    static const size_t cfg[][2] = { { 2, 2 }, { 3, 2 }, { 3, 1 }, { 2, 1 },
                                     { 2, 3 }, { 5, 5 } };
    enum { NCFG = sizeof cfg / sizeof cfg[0] };
    mpfr_t ex, t;
    mpfr_inits2(PREC, ex, t, (mpfr_ptr)0);
    const emu_format *f32 = test_format("binary32");
    for (int mode = 0; mode < TEST_DET_MODES; mode++)
        for (int oi = 0; oi < 4; oi++)
            for (int ci = 0; ci < NCFG; ci++) {
                const bool global = cfg[ci][0] == 5;
                const size_t h = global ? 5 : 5 + test_below(&r, 3);
                const size_t w = global ? 5 : 5 + test_below(&r, 3);
                pgeo g = make_pgeo(1, 2, h, w, cfg[ci][0], cfg[ci][1]);
                emu_tensor x = mk("x", "binary32", g.N, g.C, g.H, g.W);
                emu_tensor y = mk("y", outs[oi], g.N, g.C, g.Ho, g.Wo);
                emu_tensor dy = mk("dy", "binary32", g.N, g.C, g.Ho, g.Wo);
                emu_tensor dx = mk("dx", outs[oi], g.N, g.C, g.H, g.W);
                emu_tensor dxm = mk("dxm", outs[oi], g.N, g.C, g.H, g.W);
                const emu_format *of = &y.fmt;
                double mid = 1.0 + ldexp(1.0, -of->p); /* a tie of `of` */
                for (size_t i = 0; i < x.n; i++) {
                    switch (test_below(&r, 3)) {
                    case 0: /* ties of the output format, broken far below */
                        x.data[i] = (float)mid;
                        if (test_below(&r, 2))
                            x.data[i] += (float)ldexp(test_below(&r, 2) ? 1.0 : -1.0,
                                                      -23);
                        break;
                    default:
                        x.data[i] = rand_val(&r, f32, -30, 2);
                    }
                }
                for (size_t i = 0; i < dy.n; i++)
                    dy.data[i] = test_below(&r, 3) ? rand_val(&r, f32, -30, 2)
                                                   : (float)mid;
                emu_pool_opts o = { (int)g.size, (int)g.stride };
                size_t *arg = malloc(y.n * sizeof *arg);
                emu_ctx ctx;
                emu_ctx_init(&ctx, 1);
                emu_rounding rnd = test_rne;
                rnd.mode = (emu_rnd)mode;
                ck_assert_int_eq(emu_t_avgpool2d(&ctx, "a", &y, &x, &o, &rnd),
                                 0);
                ck_assert_int_eq(emu_t_avgpool2d_backward(&ctx, "ab", &dx, &dy,
                                                          &o, &rnd), 0);
                /* argmax from a binary32 max pool of the same x */
                emu_tensor y32 = mk("y32", "binary32", g.N, g.C, g.Ho, g.Wo);
                ck_assert_int_eq(emu_t_maxpool2d(&ctx, "m", &y32, arg, &x, &o,
                                                 &rnd), 0);
                ck_assert_int_eq(emu_t_maxpool2d_backward(&ctx, "mb", &dxm, &dy,
                                                          arg, &o, &rnd), 0);
                const double S = (double)(g.size * g.size);
                for (size_t i = 0; i < y.n; i++) {
                    mpfr_set_zero(ex, 1);
                    for (size_t j = 0; j < x.n; j++)
                        if (in_window(&g, i, j))
                            mpfr_add_d(ex, ex, x.data[j], MPFR_RNDN);
                    mpfr_div_d(ex, ex, S, MPFR_RNDN);
                    double want = emu_ref_round(of, ex, &rnd, NULL);
                    EXPECT(test_same(want, y.data[i]), "avgpool %s %s size %zu "
                           "stride %zu [%zu]: got %a want %a", outs[oi],
                           emu_rnd_name(rnd.mode), g.size, g.stride, i,
                           (double)y.data[i], want);
                }
                for (size_t j = 0; j < x.n; j++) {
                    mpfr_set_zero(ex, 1);
                    mpfr_set_zero(t, 1);
                    for (size_t i = 0; i < y.n; i++) {
                        if (in_window(&g, i, j))
                            mpfr_add_d(ex, ex, dy.data[i], MPFR_RNDN);
                        if (arg[i] == j)
                            mpfr_add_d(t, t, dy.data[i], MPFR_RNDN);
                    }
                    mpfr_div_d(ex, ex, S, MPFR_RNDN);
                    double want = emu_ref_round(of, ex, &rnd, NULL);
                    EXPECT(test_same(want, dx.data[j]) ||
                           (want == 0.0 && dx.data[j] == 0.0f),
                           "avgpool backward %s %s size %zu stride %zu [%zu]: "
                           "got %a want %a", outs[oi],
                           emu_rnd_name(rnd.mode), g.size, g.stride, j,
                           (double)dx.data[j], want);
                    want = emu_ref_round(of, t, &rnd, NULL);
                    EXPECT(test_same(want, dxm.data[j]) ||
                           (want == 0.0 && dxm.data[j] == 0.0f),
                           "maxpool backward %s %s size %zu stride %zu [%zu]: "
                           "got %a want %a", outs[oi],
                           emu_rnd_name(rnd.mode), g.size, g.stride, j,
                           (double)dxm.data[j], want);
                }
                free(arg);
                emu_tensor_free(&x);
                emu_tensor_free(&y);
                emu_tensor_free(&y32);
                emu_tensor_free(&dy);
                emu_tensor_free(&dx);
                emu_tensor_free(&dxm);
            }
    mpfr_clears(ex, t, (mpfr_ptr)0);
}
END_TEST

/* Sums that are ties of the output format plus (or minus) a term 2^-70
 * below them: binary64 alone cannot see the term, so only an exact sum,
 * and a division that carries its low part, rounds these right.
 *  avg forward: windows {k tie, (S-k) tie, +-tiny, 0...} (stride = size);
 *  avg backward: size 2, stride 1, dy = S tie at one output and +-tiny at
 *    a neighbouring one, so the inputs both cover get tie + tiny/S;
 *  max backward: size 3, stride 1, one large input is the maximum of all
 *    nine windows around it and collects {tie, +-tiny, 0...}. */
START_TEST(pooling_ties_below_binary64)
{
    test_rng r = test_rng_make(0x71e5);
    static const char *const outs[] = { "binary16", "bfloat16", "e4m3" };
    mpfr_t ex;
    mpfr_init2(ex, PREC);
    for (int mode = 0; mode < TEST_DET_MODES; mode++)
        for (int oi = 0; oi < 3; oi++)
            for (size_t size = 2; size <= 3; size++) {
                const emu_format *of = test_format(outs[oi]);
                const size_t S = size * size;
                emu_ctx ctx;
                emu_ctx_init(&ctx, 1);
                emu_rounding rnd = test_rne;
                rnd.mode = (emu_rnd)mode;
                /* a random tie of `of`: (2m+1) 2^(e-p), m a p-bit significand */
                double ties[8];
                for (int k = 0; k < 8; k++) {
                    double m = (double)((1u << (of->p - 1)) +
                                        test_below(&r, 1u << (of->p - 1)));
                    ties[k] = ldexp(2.0 * m + 1.0, -of->p - (int)test_below(&r, 4));
                    if (test_below(&r, 2))
                        ties[k] = -ties[k];
                }
                /* forward */
                pgeo g = make_pgeo(1, 2, 2 * size, 2 * size, size, size);
                emu_tensor x = mk("x", "binary32", g.N, g.C, g.H, g.W);
                emu_tensor y = mk("y", outs[oi], g.N, g.C, g.Ho, g.Wo);
                for (size_t o = 0; o < y.n; o++) {
                    double tie = ties[o % 8];
                    size_t k = 1 + test_below(&r, S - 1);
                    float v[9] = { (float)(k * tie), (float)((S - k) * tie),
                                   (float)ldexp((double)test_below(&r, 3) - 1.0, -70) };
                    size_t idx[9], n = 0;
                    for (size_t j = 0; j < x.n; j++)
                        if (in_window(&g, o, j))
                            idx[n++] = j;
                    for (size_t q = 0; q < n; q++) /* shuffle into the window */
                        x.data[idx[(q + o) % n]] = q < 3 ? v[q] : 0.0f;
                }
                emu_pool_opts o = { (int)size, (int)size };
                ck_assert_int_eq(emu_t_avgpool2d(&ctx, "a", &y, &x, &o, &rnd),
                                 0);
                for (size_t i = 0; i < y.n; i++) {
                    mpfr_set_zero(ex, 1);
                    for (size_t j = 0; j < x.n; j++)
                        if (in_window(&g, i, j))
                            mpfr_add_d(ex, ex, x.data[j], MPFR_RNDN);
                    mpfr_div_ui(ex, ex, (unsigned long)S, MPFR_RNDN);
                    double want = emu_ref_round(of, ex, &rnd, NULL);
                    EXPECT(test_same(want, y.data[i]), "avgpool tie %s %s size "
                           "%zu [%zu]: exact %.20g, got %a want %a", outs[oi],
                           emu_rnd_name(rnd.mode), size, i,
                           mpfr_get_d(ex, MPFR_RNDN), (double)y.data[i], want);
                }
                emu_tensor_free(&x);
                emu_tensor_free(&y);

                /* backward, average (size 2 stride 1) and max (size 3 stride 1) */
                pgeo gb = make_pgeo(1, 1, 6, 6, size, 1);
                emu_tensor dx = mk("dx", outs[oi], 1, 1, 6, 6);
                emu_tensor dy = mk("dy", "binary32", 1, 1, gb.Ho, gb.Wo);
                emu_tensor xb = mk("xb", "binary32", 1, 1, 6, 6);
                emu_tensor yb = mk("yb", "binary32", 1, 1, gb.Ho, gb.Wo);
                size_t *arg = malloc(yb.n * sizeof *arg);
                for (size_t j = 0; j < xb.n; j++)
                    xb.data[j] = (float)j * 0x1p-10f;
                xb.data[2 * 6 + 2] = 100.0f; /* in all windows of size 3 at (0..2, 0..2) */
                emu_pool_opts ob = { (int)size, 1 };
                ck_assert_int_eq(emu_t_maxpool2d(&ctx, "m", &yb, arg, &xb, &ob,
                                                 &rnd), 0);
                for (int trial = 0; trial < 4; trial++) {
                    memset(dy.data, 0, dy.n * sizeof(float));
                    size_t a = test_below(&r, dy.n), b = test_below(&r, dy.n);
                    dy.data[a] = (float)((size == 2 ? (double)S : 1.0) * ties[trial]);
                    if (b != a)
                        dy.data[b] = (float)ldexp(test_below(&r, 2) ? 1.0 : -1.0, -70);
                    if (size == 2)
                        ck_assert_int_eq(emu_t_avgpool2d_backward(&ctx, "ab", &dx,
                                                                  &dy, &ob, &rnd), 0);
                    else
                        ck_assert_int_eq(emu_t_maxpool2d_backward(&ctx, "mb", &dx,
                                                                  &dy, arg, &ob, &rnd), 0);
                    for (size_t j = 0; j < dx.n; j++) {
                        mpfr_set_zero(ex, 1);
                        for (size_t i = 0; i < dy.n; i++)
                            if (size == 2 ? in_window(&gb, i, j) : arg[i] == j)
                                mpfr_add_d(ex, ex, dy.data[i], MPFR_RNDN);
                        if (size == 2)
                            mpfr_div_ui(ex, ex, (unsigned long)S, MPFR_RNDN);
                        double want = emu_ref_round(of, ex, &rnd, NULL);
                        EXPECT(test_same(want, dx.data[j]) ||
                               (want == 0.0 && dx.data[j] == 0.0f),
                               "%s backward tie %s %s [%zu]: exact %.20g, got "
                               "%a want %a", size == 2 ? "avgpool" : "maxpool",
                               outs[oi], emu_rnd_name(rnd.mode), j,
                               mpfr_get_d(ex, MPFR_RNDN), (double)dx.data[j],
                               want);
                    }
                }
                free(arg);
                emu_tensor_free(&dx);
                emu_tensor_free(&dy);
                emu_tensor_free(&xb);
                emu_tensor_free(&yb);
            }
    mpfr_clear(ex);
}
END_TEST

/* Selection rules: first maximum, -0 < +0, NaN wins (first NaN). */
START_TEST(maxpool_selection)
{
    emu_tensor x = mk("x", "binary32", 1, 1, 2, 8);
    emu_tensor y = mk("y", "binary16", 1, 1, 1, 4);
    float v[16] = { 3, 1, -0.0f, 0.0f, 2, NAN, 5, 5,
                    3, 2, 0.0f, -0.0f, NAN, 7, 5, 4 };
    memcpy(x.data, v, sizeof v);
    size_t arg[4];
    emu_pool_opts o = { 2, 2 };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_maxpool2d(&ctx, "m", &y, arg, &x, &o, &test_rne), 0);
    /* windows: {3,1,3,2} -> 3 at 0; {-0,+0,+0,-0} -> +0 at 3;
     * {2,NaN,NaN,7} -> NaN at 5; {5,5,5,4} -> 5 at 6 */
    const size_t want_arg[4] = { 0, 3, 5, 6 };
    for (int i = 0; i < 4; i++)
        EXPECT(arg[i] == want_arg[i], "window %d: argmax %zu, want %zu", i,
               arg[i], want_arg[i]);
    ck_assert(y.data[0] == 3.0f);
    ck_assert(y.data[1] == 0.0f && !signbit(y.data[1]));
    ck_assert(isnan(y.data[2]));
    ck_assert(y.data[3] == 5.0f);
    emu_tensor_free(&x);
    emu_tensor_free(&y);
}
END_TEST

/* Max pooling's selection and routing at every window size and stride
 * the kernels treat apart (sizes 2 and 3 specialised, 1 and 4 general;
 * windows overlapping or not), on values drawn from a small set so that
 * ties, -0 against +0, infinities and NaNs (quiet and signalling) meet in
 * windows: y's bits and argmax against the selection rule written out
 * here, and dx against the routed dy summed in output order. */
START_TEST(maxpool_rule_all_shapes)
{
    test_rng r = test_rng_make(0x9a11);
    const float pool[] = { 0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0x1p-140f,
                           -0x1p-140f, INFINITY, -INFINITY, 3.5f, -3.5f };
    uint32_t snan = 0x7fa00001, qnan = 0xffc00002;
    for (size_t size = 1; size <= 4; size++)
        for (size_t stride = 1; stride <= 3; stride++)
            for (int rep = 0; rep < 6; rep++) {
                size_t N = 1 + test_below(&r, 2), C = 1 + test_below(&r, 3);
                size_t H = size + test_below(&r, 6), W = size + test_below(&r, 6);
                /* rows of 18 windows and more, for the 2 x 2 stride-2
                 * path's vectorised runs (whole vectors and a rest) */
                if (rep >= 4)
                    W += 36 + (size_t)rep;
                emu_tensor x = mk("x", "binary32", N, C, H, W);
                size_t Ho = (H - size) / stride + 1, Wo = (W - size) / stride + 1;
                emu_tensor y = mk("y", "binary32", N, C, Ho, Wo);
                emu_tensor dy = mk("dy", "binary32", N, C, Ho, Wo);
                emu_tensor dx = mk("dx", "binary32", N, C, H, W);
                for (size_t i = 0; i < x.n; i++) {
                    uint64_t u = test_below(&r, 64);
                    if (u == 0 && rep % 2)
                        memcpy(&x.data[i], &snan, sizeof snan);
                    else if (u == 1 && rep % 2)
                        memcpy(&x.data[i], &qnan, sizeof qnan);
                    else
                        x.data[i] = pool[test_below(&r, sizeof pool / sizeof pool[0])];
                }
                for (size_t i = 0; i < dy.n; i++)
                    dy.data[i] = test_below(&r, 5) == 0
                                     ? -0.0f
                                     : (float)((int)test_below(&r, 9) - 4);
                size_t *arg = malloc(y.n * sizeof *arg);
                emu_pool_opts o = { (int)size, (int)stride };
                emu_ctx ctx;
                emu_ctx_init(&ctx, 3);
                ck_assert(arg);
                EXPECT(emu_t_maxpool2d(&ctx, "m", &y, arg, &x, &o, &test_rne) == 0,
                       "maxpool: %s", ctx.err.message);
                EXPECT(emu_t_maxpool2d_backward(&ctx, "mb", &dx, &dy, arg, &o,
                                                &test_rne) == 0,
                       "maxpool backward: %s", ctx.err.message);
                for (size_t i = 0; i < y.n; i++) {
                    size_t ow = i % Wo, oh = i / Wo % Ho, nc = i / (Wo * Ho);
                    size_t base = (nc * H + oh * stride) * W + ow * stride;
                    size_t best = base;
                    float b = x.data[base];
                    for (size_t kh = 0; kh < size && !isnan(b); kh++)
                        for (size_t kw = 0; kw < size && !isnan(b); kw++) {
                            size_t j = base + kh * W + kw;
                            float c = x.data[j];
                            bool more = isnan(c) || c > b ||
                                        (c == 0.0f && b == 0.0f &&
                                         signbit(b) && !signbit(c));
                            if (more) {
                                b = c;
                                best = j;
                            }
                        }
                    EXPECT(arg[i] == best, "size %zu stride %zu output %zu: "
                           "argmax %zu, want %zu", size, stride, i, arg[i], best);
                    uint32_t got, want;
                    memcpy(&got, &y.data[i], sizeof got);
                    memcpy(&want, &b, sizeof want);
                    if (isnan(b)) /* binary32 into itself: the canonical NaN */
                        want = 0x7fc00000;
                    EXPECT(got == want, "size %zu stride %zu output %zu: "
                           "y %08x, want %08x", size, stride, i, got, want);
                }
                for (size_t j = 0; j < dx.n; j++) {
                    bool any = false;
                    float s = 0.0f;
                    for (size_t i = 0; i < dy.n; i++)
                        if (arg[i] == j) {
                            s = any ? s + dy.data[i] : dy.data[i];
                            any = true;
                        }
                    EXPECT(memcmp(&s, &dx.data[j], sizeof s) == 0,
                           "size %zu stride %zu dx[%zu] = %a, want %a", size,
                           stride, j, (double)dx.data[j], (double)s);
                }
                /* an entry outside its window is refused, the first named */
                if (y.n > 2) {
                    size_t k = y.n / 2, saved = arg[k], saved2 = arg[y.n - 1];
                    size_t b = arg[k] = x.n + 1; /* past the end */
                    {
                        arg[y.n - 1] = x.n; /* and past the end */
                        EXPECT(emu_t_maxpool2d_backward(&ctx, "mb", &dx, &dy,
                                                        arg, &o, &test_rne) != 0,
                               "size %zu stride %zu: bad argmax accepted",
                               size, stride);
                        char want[64];
                        snprintf(want, sizeof want, "argmax[%zu] = %zu ", k, b);
                        EXPECT(strstr(ctx.err.message, want), "message '%s', "
                               "want '%s'", ctx.err.message, want);
                    }
                    arg[k] = saved;
                    arg[y.n - 1] = saved2;
                }
                free(arg);
                emu_tensor_free(&x);
                emu_tensor_free(&y);
                emu_tensor_free(&dy);
                emu_tensor_free(&dx);
            }
}
END_TEST

/* ---- refusals ------------------------------------------------------------ */

static void expect_fail(int rc, const emu_ctx *ctx, const char *needle)
{
    EXPECT(rc == -1, "expected a refusal mentioning '%s'", needle);
    EXPECT(strstr(ctx->err.message, needle) != NULL,
           "error '%s' does not mention '%s'", ctx->err.message, needle);
}

static void sentinel(emu_tensor *t)
{
    for (size_t i = 0; i < t->n; i++)
        t->data[i] = 0.25f * (float)(i % 5);
}

static void expect_sentinel(const emu_tensor *t)
{
    for (size_t i = 0; i < t->n; i++)
        EXPECT(t->data[i] == 0.25f * (float)(i % 5), "'%s' touched at %zu",
               t->name, i);
}

START_TEST(bad_input)
{
    geo g = make_geo(1, 2, 5, 5, 3, 3, 3, 1, 0);
    prob p = make_prob(g, "binary32", "binary16");
    emu_tensor x3 = mk("x3", "binary32", 1, 3, 5, 5);
    emu_tensor b4 = mk("b4", "binary32", 4, 0, 0, 0);
    emu_tensor ybad = mk("ybad", "binary16", 1, 3, 4, 3);
    emu_tensor *outs[] = { &p.y, &p.dx, &p.dw, &p.db, &ybad };
    for (int i = 0; i < 5; i++)
        sentinel(outs[i]);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_conv_opts o = { .accum = test_default_accum(), .stride = 1, .pad = 0 };
    expect_fail(emu_t_conv2d(&ctx, "c", &p.y, &x3, &p.w, NULL, &o, &test_rne),
                &ctx, "channel mismatch");
    expect_fail(emu_t_conv2d(&ctx, "c", &ybad, &p.x, &p.w, NULL, &o, &test_rne),
                &ctx, "expected (1, 3, 3, 3)");
    expect_fail(emu_t_conv2d(&ctx, "c", &p.y, &p.x, &p.w, &b4, &o, &test_rne),
                &ctx, "expected (3)");
    const emu_accum *acc = test_default_accum();
    emu_conv_opts s0 = { .accum = acc, .stride = 0 };
    emu_conv_opts pneg = { .accum = acc, .stride = 1, .pad = -1 };
    emu_conv_opts a3 = { .accum = acc, .stride = 1, .alpha = -3.0 };
    expect_fail(emu_t_conv2d(&ctx, "c", &p.y, &p.x, &p.w, NULL, &s0, &test_rne),
                &ctx, "stride");
    expect_fail(emu_t_conv2d(&ctx, "c", &p.y, &p.x, &p.w, NULL, &pneg,
                             &test_rne),
                &ctx, "padding");
    expect_fail(emu_t_conv2d(&ctx, "c", &p.y, &p.x, &p.w, NULL, NULL,
                             &test_rne),
                &ctx, "NULL");
    expect_fail(emu_t_conv2d_backward_data(&ctx, "c", &p.dx, &p.dy, &p.w, &a3,
                                           &test_rne),
                &ctx, "positive");
    /* a 7x7 kernel on a 5x5 input without padding has no output */
    emu_tensor w7 = mk("w7", "binary32", 3, 2, 7, 7);
    expect_fail(emu_t_conv2d(&ctx, "c", &p.y, &p.x, &w7, NULL, &o, &test_rne),
                &ctx, "no output");
    expect_fail(emu_t_conv2d_backward_data(&ctx, "c", &p.dx, &ybad, &p.w, &o,
                                           &test_rne),
                &ctx, "dy");
    expect_fail(emu_t_conv2d_backward_weights(&ctx, "c", &p.dw, &b4, &p.dy,
                                              &p.x, &o, &test_rne), &ctx, "dbias");
    expect_fail(emu_t_conv2d_backward_weights(&ctx, "c", &p.dw, NULL, &p.dy,
                                              &x3, &o, &test_rne), &ctx, "channel");
    emu_tensor wide = p.x;
    wide.fmt = *test_format("binary64");
    expect_fail(emu_t_conv2d(&ctx, "c", &p.y, &wide, &p.w, NULL, &o, &test_rne),
                &ctx, "carrier");
    /* an output sharing an input's storage */
    emu_tensor alias = p.y;
    alias.data = p.x.data;
    expect_fail(emu_t_conv2d(&ctx, "c", &alias, &p.x, &p.w, NULL, &o,
                             &test_rne),
                &ctx, "shares storage");
    /* the accumulator and the rounding have no defaults */
    emu_conv_opts noacc = { .stride = 1 };
    expect_fail(emu_t_conv2d(&ctx, "c", &p.y, &p.x, &p.w, NULL, &noacc,
                             &test_rne),
                &ctx, "no accumulator");
    expect_fail(emu_t_conv2d_backward_weights(&ctx, "c", &p.dw, &p.db, &p.dy,
                                              &p.x, &noacc, &test_rne),
                &ctx, "no accumulator");
    expect_fail(emu_t_conv2d_backward_data(&ctx, "c", &p.dx, &p.dy, &p.w, &o,
                                           NULL),
                &ctx, "no rounding");
    /* pooling */
    emu_pool_opts big = { 6, 1 }, zero = { 0, 1 }, ok = { 2, 2 };
    emu_tensor py = mk("py", "binary16", 1, 2, 2, 2);
    emu_tensor pdx = mk("pdx", "binary16", 1, 2, 5, 5);
    sentinel(&py);
    sentinel(&pdx);
    expect_fail(emu_t_maxpool2d(&ctx, "m", &py, NULL, &p.x, &big, &test_rne),
                &ctx, "no output");
    expect_fail(emu_t_avgpool2d(&ctx, "m", &py, &p.x, &zero, &test_rne),
                &ctx, "at least 1");
    expect_fail(emu_t_avgpool2d(&ctx, "m", &ybad, &p.x, &ok, &test_rne),
                &ctx, "expected (1, 2, 2, 2)");
    expect_fail(emu_t_maxpool2d_backward(&ctx, "m", &pdx, &py, NULL, &ok,
                                         &test_rne),
                &ctx, "argmax");
    size_t arg[8] = { 0, 2, 10, 12, 25, 27, 35, 36 }; /* 36 is outside */
    expect_fail(emu_t_maxpool2d_backward(&ctx, "m", &pdx, &py, arg, &ok,
                                         &test_rne),
                &ctx, "argmax[7] = 36 is not in the window of output 7");
    expect_fail(emu_t_avgpool2d_backward(&ctx, "m", &pdx, &ybad, &ok,
                                         &test_rne),
                &ctx, "dy");
    expect_fail(emu_t_avgpool2d(&ctx, "m", &py, &p.x, &ok, NULL), &ctx,
                "no rounding");
    for (int i = 0; i < 5; i++)
        expect_sentinel(outs[i]);
    expect_sentinel(&pdx);
    ck_assert_uint_eq(ctx.op_index, 0);
    emu_tensor_free(&x3);
    emu_tensor_free(&b4);
    emu_tensor_free(&ybad);
    emu_tensor_free(&w7);
    emu_tensor_free(&py);
    emu_tensor_free(&pdx);
    free_prob(&p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_conv");
    TCase *tc = tcase_create("conv");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sequential16_equals_scalar_chain);
    tcase_add_test(tc, models_equal_accum_dot);
    tcase_add_test(tc, fast_is_sgemm_on_the_matrices);
    tcase_add_test(tc, threads_do_not_matter);
    tcase_add_test(tc, exact_model_vs_mpfr);
    tcase_add_test(tc, reference_callbacks);
    tcase_add_test(tc, conv_gradient);
    tcase_add_test(tc, pool_gradient);
    tcase_add_test(tc, pooling_vs_mpfr);
    tcase_add_test(tc, pooling_ties_below_binary64);
    tcase_add_test(tc, maxpool_selection);
    tcase_add_test(tc, maxpool_rule_all_shapes);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
