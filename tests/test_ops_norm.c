/*
 * test_ops_norm.c — batch normalisation (emu_t_batchnorm2d and its
 * backward pass, libemu/ops_norm.c).
 *
 *  1. Gradients against central differences of L = sum r_i y_i, binary32
 *     tensors and the exact accumulator (every stored value the binary32
 *     rounding of an exactly computed quantity).  Tolerance: the rounding
 *     noise of L(v + h) and L(v - h) over 2h (each output off by half an
 *     ulp of itself, and by what the roundings of mean, xc and var move it:
 *     |gamma inv| (ulp(mean) + ulp(xc)) / 2 and |y - beta| ulp-rel(var)),
 *     plus the truncation error estimated from the difference of the
 *     central differences at h and 2h, plus the gradient's own rounding.
 *  2. The binary32 forward and backward (sequential binary32 accumulator)
 *     against a binary64 computation, within bounds derived from the
 *     accumulations' error (gamma_M = M 2^-24 relative to the sums of
 *     magnitudes) and the output rounding.
 *  3. Evaluation mode and the running statistics against binary64
 *     (one rounding of a binary64 evaluation: within one ulp).
 *  4. Every site sampled against MPFR: with the exact accumulator every
 *     output is within half an ulp (plus the binary64 evaluation's few
 *     2^-53) of the exact value.
 *  5. Bad arguments: EMU_EINVAL.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct bn_case {
    size_t N, C, H, W;
    emu_tensor x, y, xc, mean, var, rm, rv, gamma, beta, dy, dx, dg, db;
} bn_case;

static emu_tensor mk4(const char *name, size_t a, size_t b, size_t c, size_t d)
{
    emu_tensor t;
    emu_error e;
    if (emu_tensor_alloc4(&t, name, EMU_ROLE_ACTIVATION, test_format("binary32"),
                          a, b, c, d, &e))
        ck_abort_msg("alloc %s: %s", name, e.message);
    return t;
}

/* Values k 2^-e with a few bits: exact in binary32, sums exact in double. */
static float grid(test_rng *g, double scale)
{
    return (float)(scale * ((double)test_below(g, 4096) - 2048.0) / 1024.0);
}

static void case_make(bn_case *k, size_t N, size_t C, size_t H, size_t W,
                      test_rng *g)
{
    memset(k, 0, sizeof *k);
    k->N = N, k->C = C, k->H = H, k->W = W;
    k->x = mk4("x", N, C, H, W);
    k->y = mk4("y", N, C, H, W);
    k->xc = mk4("xc", N, C, H, W);
    k->dy = mk4("dy", N, C, H, W);
    k->dx = mk4("dx", N, C, H, W);
    emu_tensor *cs[] = { &k->mean, &k->var, &k->rm, &k->rv, &k->gamma,
                         &k->beta, &k->dg, &k->db };
    const char *names[] = { "mean", "var", "rm", "rv", "gamma", "beta", "dg",
                            "db" };
    for (int i = 0; i < 8; i++)
        *cs[i] = mk4(names[i], C, 0, 0, 0);
    for (size_t c = 0; c < C; c++) {
        /* channels with their own offset and spread */
        double off = grid(g, 4.0), spread = ldexp(1.0, (int)test_below(g, 5) - 2);
        for (size_t n = 0; n < N; n++)
            for (size_t j = 0; j < H * W; j++)
                k->x.data[(n * C + c) * H * W + j] =
                    (float)(off + spread * grid(g, 1.0));
        k->gamma.data[c] = grid(g, 1.0) + 0.25f;
        k->beta.data[c] = grid(g, 1.0);
        k->rm.data[c] = grid(g, 1.0);
        k->rv.data[c] = fabsf(grid(g, 1.0)) + 0.5f;
    }
    for (size_t i = 0; i < k->dy.n; i++)
        k->dy.data[i] = grid(g, 1.0);
}

static void case_free(bn_case *k)
{
    emu_tensor *ts[] = { &k->x, &k->y, &k->xc, &k->mean, &k->var, &k->rm,
                         &k->rv, &k->gamma, &k->beta, &k->dy, &k->dx, &k->dg,
                         &k->db };
    for (int i = 0; i < 13; i++)
        emu_tensor_free(ts[i]);
}

static emu_accum accum_of(emu_accum_kind kind)
{
    emu_accum a;
    emu_accum_default(&a);
    a.kind = kind;
    return a;
}

static void forward(emu_ctx *ctx, bn_case *k, const emu_batchnorm_opts *o,
                    bool running)
{
    if (emu_t_batchnorm2d(ctx, "bn", &k->y, &k->xc, &k->mean, &k->var,
                          running ? &k->rm : NULL, running ? &k->rv : NULL,
                          &k->x, &k->gamma, &k->beta, o, &test_rne))
        ck_abort_msg("forward: %s", ctx->err.message);
}

static void backward(emu_ctx *ctx, bn_case *k, const emu_batchnorm_opts *o)
{
    if (emu_t_batchnorm2d_backward(ctx, "bn", &k->dx, &k->dg, &k->db, &k->dy,
                                   &k->xc, &k->var, &k->gamma, o, &test_rne))
        ck_abort_msg("backward: %s", ctx->err.message);
}

static double ulp32(double v)
{
    int e;
    if (v == 0.0)
        return 0x1p-149;
    frexp(v, &e);
    return ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

/* ---- 1. gradients -------------------------------------------------------- */

/* L = sum dy_i y_i at the current inputs, and its rounding-noise bound. */
static double loss_at(emu_ctx *ctx, bn_case *k, const emu_batchnorm_opts *o,
                      double *noise)
{
    forward(ctx, k, o, false);
    const size_t HW = k->H * k->W;
    double L = 0.0, nb = 0.0;
    for (size_t i = 0; i < k->y.n; i++) {
        size_t c = (i / HW) % k->C;
        double inv = 1.0 / sqrt((double)k->var.data[c] + o->eps);
        double y = k->y.data[i], r = fabs((double)k->dy.data[i]);
        L += (double)k->dy.data[i] * y;
        double gi = fabs((double)k->gamma.data[c]) * inv;
        nb += r * (ulp32(y) / 2 + gi * (ulp32(k->mean.data[c]) +
                                         ulp32(k->xc.data[i])) / 2 +
                   fabs(y - k->beta.data[c]) * ulp32(k->var.data[c]) /
                       k->var.data[c]);
    }
    *noise = nb;
    return L;
}

typedef struct gstat {
    double worst;
    size_t checks;
} gstat;

static double central_at(emu_ctx *ctx, bn_case *k, const emu_batchnorm_opts *o,
                         float *v, double h, double *noise)
{
    const float v0 = *v;
    double n1, n2;
    *v = (float)(v0 + h);
    double lp = loss_at(ctx, k, o, &n1);
    *v = (float)(v0 - h);
    double lm = loss_at(ctx, k, o, &n2);
    *v = v0;
    *noise = (n1 + n2) / (2.0 * h);
    return (lp - lm) / (2.0 * h);
}

static void check_grad(emu_ctx *ctx, bn_case *k, const emu_batchnorm_opts *o,
                       float *v, double grad, const char *what, size_t j,
                       gstat *st)
{
    const double h = 0x1p-9;
    double n1, n2;
    double f1 = central_at(ctx, k, o, v, h, &n1);
    double f2 = central_at(ctx, k, o, v, 2 * h, &n2);
    /* Truncation: f(h) = g + c h^2, f(2h) = g + 4 c h^2, so the error of
     * f(h) is about |f(2h) - f(h)| / 3 (noise included: bound it by twice
     * that, and add both noises). */
    double tol = n1 + n2 + fabs(f2 - f1) + ulp32(grad) + 0x1p-40;
    double e = fabs(f1 - grad);
    st->worst = fmax(st->worst, e / tol);
    st->checks++;
    EXPECT(e <= tol, "%s[%zu]: backward %.10g, central difference %.10g, "
           "|diff| %.3g > tolerance %.3g (noise %.3g, truncation %.3g)", what,
           j, grad, f1, e, tol, n1 + n2, fabs(f2 - f1));
}

START_TEST(gradients)
{
    test_rng g = test_rng_make(0xb40);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum exact = accum_of(EMU_ACCUM_EXACT);
    emu_batchnorm_opts o = { .accum = &exact, .training = true, .eps = 1e-5,
                             .momentum = 0.1 };
    const size_t shapes[][4] = { { 2, 3, 3, 3 }, { 4, 2, 1, 1 }, { 1, 2, 4, 3 } };
    gstat st = { 0, 0 };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        bn_case k;
        case_make(&k, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], &g);
        forward(&ctx, &k, &o, false);
        backward(&ctx, &k, &o);
        float *dx = malloc(k.dx.n * sizeof *dx);
        ck_assert_ptr_nonnull(dx);
        memcpy(dx, k.dx.data, k.dx.n * sizeof *dx);
        float dg[8], db[8];
        memcpy(dg, k.dg.data, k.C * sizeof *dg);
        memcpy(db, k.db.data, k.C * sizeof *db);
        for (size_t j = 0; j < k.x.n; j++)
            check_grad(&ctx, &k, &o, &k.x.data[j], dx[j], "dx", j, &st);
        for (size_t c = 0; c < k.C; c++) {
            check_grad(&ctx, &k, &o, &k.gamma.data[c], dg[c], "dgamma", c, &st);
            check_grad(&ctx, &k, &o, &k.beta.data[c], db[c], "dbeta", c, &st);
        }
        free(dx);
        case_free(&k);
    }
    fprintf(stderr, "batchnorm2d gradient check: %zu derivatives, worst "
            "|fd - g| / tol = %.3f\n", st.checks, st.worst);
}
END_TEST

/* The backward pass's formula is the one the differences check; a
 * mutation (dropping the mean of dy) must fail them by far: this case
 * shows the check has the power to see a missing term. */
START_TEST(gradient_check_sees_a_missing_term)
{
    test_rng g = test_rng_make(0xb41);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum exact = accum_of(EMU_ACCUM_EXACT);
    emu_batchnorm_opts o = { .accum = &exact, .training = true, .eps = 1e-5,
                             .momentum = 0.1 };
    bn_case k;
    case_make(&k, 2, 2, 2, 2, &g);
    forward(&ctx, &k, &o, false);
    backward(&ctx, &k, &o);
    /* dx without the -S1/M term: gamma inv S1 / M off. */
    const size_t HW = 4;
    double worst = 0.0;
    for (size_t j = 0; j < k.x.n; j++) {
        size_t c = (j / HW) % k.C;
        double inv = 1.0 / sqrt((double)k.var.data[c] + o.eps);
        double wrong = k.dx.data[j] + k.gamma.data[c] * inv * k.db.data[c] / 8.0;
        float saved = k.x.data[j];
        double n1;
        double f = central_at(&ctx, &k, &o, &k.x.data[j], 0x1p-9, &n1);
        k.x.data[j] = saved;
        worst = fmax(worst, fabs(f - wrong) / (n1 + 1e-12));
    }
    ck_assert_msg(worst > 10.0, "a missing term stays within %g noises", worst);
    case_free(&k);
}
END_TEST

/* ---- 2. binary32 against binary64 --------------------------------------------- */

START_TEST(binary32_against_binary64)
{
    test_rng g = test_rng_make(0xb42);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum seq = accum_of(EMU_ACCUM_SEQUENTIAL); /* binary32, RNE */
    emu_batchnorm_opts o = { .accum = &seq, .training = true, .eps = 1e-5,
                             .momentum = 0.1 };
    const double u = 0x1p-24;
    for (int rep = 0; rep < 4; rep++) {
        bn_case k;
        case_make(&k, 3 + (size_t)rep, 4, 5, 3, &g);
        /* values with full binary32 mantissas, so that sums round */
        for (size_t i = 0; i < k.x.n; i++)
            k.x.data[i] = (float)(k.x.data[i] * (1.0 + 0.3 * ldexp((double)(test_next(&g) >> 11), -53)));
        forward(&ctx, &k, &o, false);
        backward(&ctx, &k, &o);
        const size_t HW = k.H * k.W, M = k.N * HW;
        const double gM = (double)M * u;
        for (size_t c = 0; c < k.C; c++) {
            double s = 0.0, sa = 0.0;
            for (size_t n = 0; n < k.N; n++)
                for (size_t j = 0; j < HW; j++) {
                    double v = k.x.data[(n * k.C + c) * HW + j];
                    s += v;
                    sa += fabs(v);
                }
            double mu = s / (double)M;
            double emu_ = gM * sa / (double)M + ulp32(mu);
            EXPECT(fabs(k.mean.data[c] - mu) <= emu_, "mean[%zu] %.9g vs %.17g", c,
                   k.mean.data[c], mu);
            double v2 = 0.0, sdy = 0.0, sady = 0.0, sdyx = 0.0, sadyx = 0.0;
            for (size_t n = 0; n < k.N; n++)
                for (size_t j = 0; j < HW; j++) {
                    size_t i = (n * k.C + c) * HW + j;
                    double d = (double)k.x.data[i] - mu;
                    v2 += d * d;
                    /* backward from the library's own xc */
                    sdy += k.dy.data[i];
                    sady += fabs(k.dy.data[i]);
                    sdyx += (double)k.dy.data[i] * k.xc.data[i];
                    sadyx += fabs((double)k.dy.data[i] * k.xc.data[i]);
                }
            double var = v2 / (double)M;
            /* var from the stored xc = x - mean + (error of mean and xc):
             * |xc^2 - d^2| <= 2 |d| |e| + e^2 with e <= emu_ + ulp(xc). */
            double ev = gM * var + ulp32(var);
            for (size_t n = 0; n < k.N; n++)
                for (size_t j = 0; j < HW; j++) {
                    size_t i = (n * k.C + c) * HW + j;
                    double d = (double)k.x.data[i] - mu;
                    double e = emu_ + ulp32(k.xc.data[i]);
                    ev += (2.0 * fabs(d) * e + e * e) / (double)M;
                }
            EXPECT(fabs(k.var.data[c] - var) <= ev, "var[%zu] %.9g vs %.17g "
                   "(bound %.3g)", c, k.var.data[c], var, ev);
            double inv = 1.0 / sqrt((double)k.var.data[c] + o.eps);
            double db = sdy, dg = sdyx * inv;
            EXPECT(fabs(k.db.data[c] - db) <= gM * sady + ulp32(db),
                   "dbeta[%zu] %.9g vs %.17g", c, k.db.data[c], db);
            EXPECT(fabs(k.dg.data[c] - dg) <= gM * sadyx * inv + ulp32(dg) + 1e-12,
                   "dgamma[%zu] %.9g vs %.17g", c, k.dg.data[c], dg);
            for (size_t n = 0; n < k.N; n++)
                for (size_t j = 0; j < HW; j++) {
                    size_t i = (n * k.C + c) * HW + j;
                    double gi = k.gamma.data[c] * inv;
                    double y = gi * k.xc.data[i] + k.beta.data[c];
                    EXPECT(fabs(k.y.data[i] - y) <= ulp32(y) + 1e-12 * fabs(y),
                           "y[%zu] %.9g vs %.17g", i, k.y.data[i], y);
                    double dx = gi * (k.dy.data[i] - sdy / M -
                                      k.xc.data[i] * inv * inv * sdyx / M);
                    double edx = fabs(gi) * (gM * sady / M +
                                             fabs(k.xc.data[i]) * inv * inv *
                                                 gM * sadyx / M) +
                                 ulp32(dx) + 1e-12;
                    EXPECT(fabs(k.dx.data[i] - dx) <= edx, "dx[%zu] %.9g vs "
                           "%.17g (bound %.3g)", i, k.dx.data[i], dx, edx);
                }
        }
        case_free(&k);
    }
}
END_TEST

/* Tensors of several commit chunks whose planes do not divide a chunk (and
 * planes of one value, whose channel changes at every element): the
 * producers' per-element channel must be right wherever a chunk starts.
 * Under the fast model every value is a documented binary64 expression
 * of binary32 inputs, rounded once (RNE: the narrowing cast), so xc, y,
 * dx and the evaluation-mode y are checked bit for bit. */
START_TEST(channels_across_chunks)
{
    test_rng g = test_rng_make(0xb45);
    /* C = 19: the fast sums' lanes of 8 channels and the ones left */
    const size_t shapes[][4] = { { 3, 5, 15, 15 }, { 300, 7, 1, 1 },
                                 { 2, 3, 37, 29 }, { 4, 19, 9, 7 } };
    emu_accum fast = accum_of(EMU_ACCUM_FAST);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        emu_batchnorm_opts o = { .accum = &fast, .training = true, .eps = 1e-5,
                                 .momentum = 0.1 };
        bn_case k;
        case_make(&k, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                  &g);
        const size_t C = k.C, HW = k.H * k.W, M = k.N * HW;
        ck_assert(k.x.n > 2 * EMU_COMMIT_CHUNK);
        if (C == 19) {
            /* small values between +-2^20 and -+2^20 (the first and the
             * last of the channel): binary64 sums that round and cancel,
             * whose bits show their order in the results */
            for (size_t i = 0; i < k.x.n; i++) {
                k.x.data[i] = ldexpf(k.x.data[i], -(int)test_below(&g, 16) - 8);
                k.dy.data[i] = ldexpf(k.dy.data[i], -(int)test_below(&g, 16) - 8);
            }
            for (size_t c = 0; c < C; c++) {
                const size_t first = c * HW, last = ((k.N - 1) * C + c + 1) * HW - 1;
                const float big = c % 2 ? 1048576.0f : -1048576.0f;
                k.x.data[first] = k.dy.data[first] = big;
                k.x.data[last] = k.dy.data[last] = -big;
            }
            /* a constant channel: x - mean exactly zero everywhere */
            for (size_t n = 0; n < k.N; n++)
                for (size_t j = 0; j < HW; j++)
                    k.x.data[(n * C + 5) * HW + j] = 0.75f;
        }
        forward(&ctx, &k, &o, false);
        backward(&ctx, &k, &o);
        for (size_t c = 0; c < C; c++) {
            /* mean and var: a binary64 running sum in (n, h, w) order,
             * divided by M with one rounding */
            double sx = 0.0, sv = 0.0;
            for (size_t n = 0; n < k.N; n++)
                for (size_t j = 0; j < HW; j++) {
                    const size_t i = (n * C + c) * HW + j;
                    sx += k.x.data[i];
                    sv += (double)k.xc.data[i] * k.xc.data[i];
                }
            mpfr_t sm, q; /* sm holds a binary64 sum exactly */
            mpfr_init2(sm, 53);
            mpfr_init2(q, 24);
            mpfr_set_d(sm, sx, MPFR_RNDN);
            mpfr_div_ui(q, sm, (unsigned long)M, MPFR_RNDN);
            EXPECT(test_same(mpfr_get_flt(q, MPFR_RNDN), k.mean.data[c]),
                   "mean[%zu] %a, want %a", c, (double)k.mean.data[c],
                   (double)mpfr_get_flt(q, MPFR_RNDN));
            mpfr_set_d(sm, sv, MPFR_RNDN);
            mpfr_div_ui(q, sm, (unsigned long)M, MPFR_RNDN);
            EXPECT(test_same(mpfr_get_flt(q, MPFR_RNDN), k.var.data[c]),
                   "var[%zu] %a, want %a", c, (double)k.var.data[c],
                   (double)mpfr_get_flt(q, MPFR_RNDN));
            mpfr_clears(sm, q, (mpfr_ptr)0);
            const double inv = 1.0 / sqrt((double)k.var.data[c] + o.eps);
            double s1 = 0.0, s2 = 0.0;
            for (size_t n = 0; n < k.N; n++)
                for (size_t j = 0; j < HW; j++) {
                    const size_t i = (n * C + c) * HW + j;
                    s1 += k.dy.data[i];
                    s2 += (double)k.dy.data[i] * k.xc.data[i];
                }
            s1 += 0.0;
            s2 += 0.0;
            const double k1 = s1 / (double)M, k2 = inv * inv * s2 / (double)M;
            for (size_t n = 0; n < k.N; n++)
                for (size_t j = 0; j < HW; j++) {
                    const size_t i = (n * C + c) * HW + j;
                    mpfr_t d;
                    mpfr_init2(d, 64);
                    mpfr_set_flt(d, k.x.data[i], MPFR_RNDN);
                    mpfr_sub_d(d, d, k.mean.data[c], MPFR_RNDN); /* exact */
                    const float xc = (float)emu_ref_round(&k.xc.fmt, d,
                                                          &test_rne, NULL);
                    mpfr_clear(d);
                    EXPECT(test_same(xc, k.xc.data[i]), "%zux%zux%zux%zu xc[%zu] "
                           "%a, want %a", k.N, C, k.H, k.W, i,
                           (double)k.xc.data[i], (double)xc);
                    double v = k.xc.data[i];
                    v *= inv;
                    v *= k.gamma.data[c];
                    v += k.beta.data[c];
                    EXPECT(test_same((float)v, k.y.data[i]), "y[%zu] %a, want "
                           "%a", i, (double)k.y.data[i], (double)(float)v);
                    double t = (double)k.dy.data[i] - k1;
                    t -= (double)k.xc.data[i] * k2;
                    const double dx = t * (inv * k.gamma.data[c]);
                    EXPECT(test_same((float)dx, k.dx.data[i]), "dx[%zu] %a, "
                           "want %a", i, (double)k.dx.data[i], (double)(float)dx);
                }
        }
        /* evaluation mode from the running statistics */
        o.training = false;
        o.accum = NULL;
        if (emu_t_batchnorm2d(&ctx, "bn", &k.y, NULL, NULL, NULL, &k.rm, &k.rv,
                              &k.x, &k.gamma, &k.beta, &o, &test_rne))
            ck_abort_msg("eval: %s", ctx.err.message);
        for (size_t i = 0; i < k.x.n; i++) {
            const size_t c = (i / HW) % C;
            double v = k.x.data[i];
            v -= k.rm.data[c];
            v *= 1.0 / sqrt((double)k.rv.data[c] + 1e-5);
            v *= k.gamma.data[c];
            v += k.beta.data[c];
            EXPECT(test_same((float)v, k.y.data[i]), "eval y[%zu] %a, want %a",
                   i, (double)k.y.data[i], (double)(float)v);
        }
        case_free(&k);
    }
}
END_TEST

/* ---- 3. evaluation mode and running statistics ----------------------------------- */

START_TEST(evaluation_and_running_statistics)
{
    test_rng g = test_rng_make(0xb43);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum fast = accum_of(EMU_ACCUM_FAST);
    emu_batchnorm_opts o = { .accum = &fast, .training = true, .eps = 1e-5,
                             .momentum = 0.1 };
    bn_case k;
    case_make(&k, 3, 3, 4, 4, &g);
    const size_t HW = 16, M = 48;
    float rm0[3], rv0[3];
    memcpy(rm0, k.rm.data, sizeof rm0);
    memcpy(rv0, k.rv.data, sizeof rv0);
    forward(&ctx, &k, &o, true);
    for (size_t c = 0; c < 3; c++) {
        double m = 0.9 * rm0[c] + 0.1 * (double)k.mean.data[c];
        double v = 0.9 * rv0[c] + 0.1 * (double)k.var.data[c] * M / (M - 1);
        EXPECT(fabs(k.rm.data[c] - m) <= ulp32(m), "running_mean[%zu] %.9g vs "
               "%.17g", c, k.rm.data[c], m);
        EXPECT(fabs(k.rv.data[c] - v) <= ulp32(v), "running_var[%zu] %.9g vs "
               "%.17g", c, k.rv.data[c], v);
        /* the unbiased variance is the stored one times M / (M - 1) */
        ck_assert(k.rv.data[c] != (float)(0.9 * rv0[c] + 0.1 * k.var.data[c]) ||
                  k.var.data[c] == 0.0f);
    }
    /* momentum 0: the running statistics stay; training without them */
    float rm1[3];
    memcpy(rm1, k.rm.data, sizeof rm1);
    emu_batchnorm_opts o0 = o;
    o0.momentum = 0.0;
    forward(&ctx, &k, &o0, true);
    ck_assert(!memcmp(rm1, k.rm.data, sizeof rm1));
    /* evaluation: the running statistics, one rounding of binary64 */
    emu_batchnorm_opts oe = o;
    oe.training = false;
    oe.accum = NULL; /* no sums in evaluation mode */
    memset(k.mean.data, 0, 3 * sizeof(float));
    if (emu_t_batchnorm2d(&ctx, "bn", &k.y, NULL, NULL, NULL, &k.rm, &k.rv,
                          &k.x, &k.gamma, &k.beta, &oe, &test_rne))
        ck_abort_msg("eval: %s", ctx.err.message);
    for (size_t i = 0; i < k.x.n; i++) {
        size_t c = (i / HW) % 3;
        double y = k.gamma.data[c] * ((double)k.x.data[i] - k.rm.data[c]) /
                       sqrt((double)k.rv.data[c] + 1e-5) + k.beta.data[c];
        EXPECT(fabs(k.y.data[i] - y) <= ulp32(y), "eval y[%zu] %.9g vs %.17g",
               i, k.y.data[i], y);
    }
    /* and nothing else moved: no statistics in evaluation mode */
    for (size_t c = 0; c < 3; c++)
        ck_assert(k.mean.data[c] == 0.0f);
    case_free(&k);
}
END_TEST

/* ---- 4. MPFR sampling --------------------------------------------------------- */

START_TEST(sampled_against_mpfr)
{
    test_rng g = test_rng_make(0xb44);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 3);
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    emu_accum exact = accum_of(EMU_ACCUM_EXACT);
    emu_batchnorm_opts o = { .accum = &exact, .training = true, .eps = 1e-5,
                             .momentum = 0.1 };
    bn_case k;
    case_make(&k, 2, 3, 3, 2, &g);
    /* binary16 outputs: the rounding is visible, the bound still 1/2 ulp */
    emu_tensor y16, dx16;
    emu_error e;
    ck_assert_int_eq(emu_tensor_alloc4(&y16, "y16", EMU_ROLE_ACTIVATION,
                                       test_format("binary16"), 2, 3, 3, 2, &e), 0);
    ck_assert_int_eq(emu_tensor_alloc4(&dx16, "dx16", EMU_ROLE_ACT_GRAD,
                                       test_format("binary16"), 2, 3, 3, 2, &e), 0);
    ck_assert_int_eq(emu_t_batchnorm2d(&ctx, "bn", &y16, &k.xc, &k.mean, &k.var,
                                       &k.rm, &k.rv, &k.x, &k.gamma, &k.beta, &o,
                                       &test_rne), 0);
    ck_assert_int_eq(emu_t_batchnorm2d_backward(&ctx, "bn", &dx16, &k.dg, &k.db,
                                                &k.dy, &k.xc, &k.var, &k.gamma,
                                                &o, &test_rne), 0);
    o.training = false;
    ck_assert_int_eq(emu_t_batchnorm2d(&ctx, "bneval", &k.y, NULL, NULL, NULL,
                                       &k.rm, &k.rv, &k.x, &k.gamma, &k.beta, &o,
                                       &test_rne), 0);
    const char *sites[] = { "bn.mean", "bn.xc", "bn.var", "bn", "bn.running_mean",
                            "bn.running_var", "bn.dbias", "bn.dweight",
                            "bn.dinput", "bneval" };
    for (int i = 0; i < 10; i++) {
        const emu_site *s = emu_stats_find_name(&st, sites[i]);
        EXPECT(s, "no site %s", sites[i]);
        EXPECT(s->total.ref_samples == s->total.results && s->total.results > 0,
               "site %s: %llu samples of %llu", sites[i],
               (unsigned long long)s->total.ref_samples,
               (unsigned long long)s->total.results);
        /* half an ulp, and the binary64 evaluation's few 2^-53 relative
         * (2^-40 of an ulp of binary32 at most) */
        EXPECT(s->total.ulp_max <= 0.5 + 0x1p-20, "site %s: %.17g ulps",
               sites[i], s->total.ulp_max);
    }
    /* the sums are dot products: their error is split */
    ck_assert(emu_stats_find_name(&st, "bn.var")->total.dot_samples > 0);
    ck_assert(emu_stats_find_name(&st, "bn.dweight")->total.dot_samples > 0);
    emu_tensor_free(&y16);
    emu_tensor_free(&dx16);
    case_free(&k);
    emu_stats_free(&st);
}
END_TEST

/* ---- 5. refusals --------------------------------------------------------------- */

START_TEST(bad_arguments)
{
    test_rng g = test_rng_make(0xb45);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum fast = accum_of(EMU_ACCUM_FAST);
    emu_batchnorm_opts o = { .accum = &fast, .training = true, .eps = 1e-5,
                             .momentum = 0.1 };
    bn_case k;
    case_make(&k, 2, 3, 2, 2, &g);
    emu_tensor g4 = mk4("g4", 4, 0, 0, 0), y2 = mk4("y2", 2, 3, 2, 1);
    emu_tensor x1 = mk4("x1", 1, 3, 1, 1), y1 = mk4("y1", 1, 3, 1, 1);
    float before = k.y.data[0] = 12345.0f;
#define REFUSED(call)                                                       \
    do {                                                                    \
        ctx.err.code = EMU_OK;                                              \
        ck_assert_int_eq((call), -1);                                       \
        ck_assert_int_eq(ctx.err.code, EMU_EINVAL);                         \
        ck_assert(k.y.data[0] == before);                                   \
    } while (0)
    /* NULL rounding, NULL options, no accumulator in training */
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &k.mean, &k.var, NULL,
                              NULL, &k.x, &k.gamma, &k.beta, &o, NULL));
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &k.mean, &k.var, NULL,
                              NULL, &k.x, &k.gamma, &k.beta, NULL, &test_rne));
    emu_batchnorm_opts bad = o;
    bad.accum = NULL;
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &k.mean, &k.var, NULL,
                              NULL, &k.x, &k.gamma, &k.beta, &bad, &test_rne));
    bad = o;
    bad.eps = 0.0;
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &k.mean, &k.var, NULL,
                              NULL, &k.x, &k.gamma, &k.beta, &bad, &test_rne));
    bad = o;
    bad.momentum = 1.5;
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &k.mean, &k.var, NULL,
                              NULL, &k.x, &k.gamma, &k.beta, &bad, &test_rne));
    /* shapes: gamma of 4 channels, y of another shape, one running stat */
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &k.mean, &k.var, NULL,
                              NULL, &k.x, &g4, &k.beta, &o, &test_rne));
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &y2, &k.xc, &k.mean, &k.var, NULL,
                              NULL, &k.x, &k.gamma, &k.beta, &o, &test_rne));
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &k.mean, &k.var, &k.rm,
                              NULL, &k.x, &k.gamma, &k.beta, &o, &test_rne));
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &g4, &k.var, NULL, NULL,
                              &k.x, &k.gamma, &k.beta, &o, &test_rne));
    /* one value per channel: no variance to train with */
    ctx.err.code = EMU_OK;
    ck_assert_int_eq(emu_t_batchnorm2d(&ctx, "bn", &y1, &k.xc, &k.mean, &k.var,
                                       NULL, NULL, &x1, NULL, NULL, &o,
                                       &test_rne), -1);
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    /* an output that is an input's storage */
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, &k.xc, &k.mean, &k.mean, NULL,
                              NULL, &k.x, &k.gamma, &k.beta, &o, &test_rne));
    /* evaluation without running statistics */
    bad = o;
    bad.training = false;
    REFUSED(emu_t_batchnorm2d(&ctx, "bn", &k.y, NULL, NULL, NULL, NULL, NULL,
                              &k.x, &k.gamma, &k.beta, &bad, &test_rne));
    /* backward: NULL rounding, evaluation mode, shapes */
    float dxb = k.dx.data[0] = 777.0f;
    ctx.err.code = EMU_OK;
    ck_assert_int_eq(emu_t_batchnorm2d_backward(&ctx, "bn", &k.dx, &k.dg, &k.db,
                                                &k.dy, &k.xc, &k.var, &k.gamma,
                                                &o, NULL), -1);
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    ck_assert_int_eq(emu_t_batchnorm2d_backward(&ctx, "bn", &k.dx, &k.dg, &k.db,
                                                &k.dy, &k.xc, &k.var, &k.gamma,
                                                &bad, &test_rne), -1);
    ck_assert_int_eq(emu_t_batchnorm2d_backward(&ctx, "bn", &k.dx, &g4, &k.db,
                                                &k.dy, &k.xc, &k.var, &k.gamma,
                                                &o, &test_rne), -1);
    ck_assert_int_eq(emu_t_batchnorm2d_backward(&ctx, "bn", &y2, &k.dg, &k.db,
                                                &k.dy, &k.xc, &k.var, &k.gamma,
                                                &o, &test_rne), -1);
    ck_assert_int_eq(emu_t_batchnorm2d_backward(&ctx, "bn", &k.dx, &k.dg, &k.db,
                                                &k.dx, &k.xc, &k.var, &k.gamma,
                                                &o, &test_rne), -1);
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    ck_assert(k.dx.data[0] == dxb);
#undef REFUSED
    emu_tensor_free(&g4);
    emu_tensor_free(&y2);
    emu_tensor_free(&x1);
    emu_tensor_free(&y1);
    case_free(&k);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_norm");
    TCase *tc = tcase_create("batchnorm2d");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, gradients);
    tcase_add_test(tc, gradient_check_sees_a_missing_term);
    tcase_add_test(tc, binary32_against_binary64);
    tcase_add_test(tc, evaluation_and_running_statistics);
    tcase_add_test(tc, channels_across_chunks);
    tcase_add_test(tc, sampled_against_mpfr);
    tcase_add_test(tc, bad_arguments);
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
