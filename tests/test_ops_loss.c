/*
 * test_ops_loss.c — softmax, log-softmax, cross-entropy and MSE against
 * MPFR, gradient checks of the losses, and their refusals of bad input.
 *
 * The ops are fused: evaluated in binary64, rounded once.  So an output
 * must be the correct rounding (emu_ref_round, the MPFR oracle) of a value
 * within a relative FUSED_SLACK of the exact value, which this suite
 * computes with MPFR independently of the library's reference callbacks.
 * The callbacks themselves are checked through the statistics they feed.
 *
 * Gradient checks: central differences of the binary32 loss, step h, in
 * binary64.  The tolerance is the sum of the worst rounding noise of the
 * two loss values, ulp(f) / (2h), a bound on the truncation error
 * h^2/6 |f'''| (given per loss below) and the rounding of the analytic
 * gradient itself, 2^-24 |g|; both sides come from the same op.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

/* binary64 evaluation error of the fused ops, as a relative bound on the
 * value that is rounded (a few units of 2^-53; generous). */
#define FUSED_SLACK 0x1p-45

enum { PREC = 320 };

static emu_tensor mk(const char *name, const char *fmt, size_t d0, size_t d1)
{
    emu_tensor t;
    emu_error e;
    if (emu_tensor_alloc4(&t, name, EMU_ROLE_OTHER, test_format(fmt), d0, d1,
                          0, 0, &e))
        ck_abort_msg("alloc %s: %s", name, e.message);
    return t;
}

/* A binary32 value uniform-ish in [-r, r] on a 2^-20 grid. */
static float rand_in(test_rng *g, double r)
{
    double u = (double)(test_next(g) >> 11) * 0x1p-53; /* [0, 1) */
    return (float)(ldexp(floor(ldexp((2.0 * u - 1.0) * r, 20)), -20));
}

static void fill(test_rng *g, emu_tensor *t, double r)
{
    for (size_t i = 0; i < t->n; i++)
        t->data[i] = rand_in(g, r);
}

/* out is the rounding under r of exact * (1 + d), |d| <= FUSED_SLACK. */
static bool fused_ok(const emu_format *f, const emu_rounding *r,
                     mpfr_srcptr exact, double out)
{
    double want = emu_ref_round(f, exact, r, NULL);
    if (test_same(want, out))
        return true;
    mpfr_t t;
    mpfr_init2(t, PREC);
    mpfr_mul_d(t, exact, 1.0 + FUSED_SLACK, MPFR_RNDN);
    double a = emu_ref_round(f, t, r, NULL);
    mpfr_mul_d(t, exact, 1.0 - FUSED_SLACK, MPFR_RNDN);
    double b = emu_ref_round(f, t, r, NULL);
    mpfr_clear(t);
    return test_same(out, a) || test_same(out, b);
}

/* MPFR: sum_k exp(x_k - m) and m for one row. */
static void mp_row(const float *x, size_t C, mpfr_ptr sum, mpfr_ptr m)
{
    mpfr_t t;
    mpfr_init2(t, PREC);
    mpfr_set_flt(m, x[0], MPFR_RNDN);
    for (size_t k = 1; k < C; k++) {
        mpfr_set_flt(t, x[k], MPFR_RNDN);
        mpfr_max(m, m, t, MPFR_RNDN);
    }
    mpfr_set_zero(sum, 1);
    for (size_t k = 0; k < C; k++) {
        mpfr_set_flt(t, x[k], MPFR_RNDN);
        mpfr_sub(t, t, m, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add(sum, sum, t, MPFR_RNDN);
    }
    mpfr_clear(t);
}

static const char *const out_formats[] = { "binary32", "binary16",
                                           "bfloat16", "e4m3", "e5m2" };
enum { N_OUT = sizeof out_formats / sizeof out_formats[0] };

/* ---- softmax / log-softmax ------------------------------------------------ */

static void check_softmax(bool log_form)
{
    test_rng g = test_rng_make(log_form ? 0x150f : 0x50f7);
    mpfr_t sum, m, t;
    mpfr_inits2(PREC, sum, m, t, (mpfr_ptr)0);
    const uint64_t reps = test_scaled(30, 3);
    for (uint64_t rep = 0; rep < reps; rep++)
        for (int fi = 0; fi < N_OUT; fi++)
            for (int mode = 0; mode < TEST_DET_MODES; mode++) {
                size_t B = 1 + test_below(&g, 6), C = 1 + test_below(&g, 40);
                double range = ldexp(1.0, (int)test_below(&g, 7) - 2);
                emu_tensor x = mk("x", "binary32", B, C);
                emu_tensor y = mk("y", out_formats[fi], B, C);
                fill(&g, &x, range);
                emu_ctx ctx;
                emu_ctx_init(&ctx, 7);
                emu_rounding rnd = test_rne;
                rnd.mode = (emu_rnd)mode;
                int rc = log_form ? emu_t_log_softmax(&ctx, "s", &y, &x, &rnd)
                                  : emu_t_softmax(&ctx, "s", &y, &x, &rnd);
                EXPECT(rc == 0, "softmax failed: %s", ctx.err.message);
                for (size_t r = 0; r < B; r++) {
                    mp_row(x.data + r * C, C, sum, m);
                    for (size_t j = 0; j < C; j++) {
                        mpfr_set_flt(t, x.data[r * C + j], MPFR_RNDN);
                        mpfr_sub(t, t, m, MPFR_RNDN);
                        if (log_form) {
                            mpfr_t ls;
                            mpfr_init2(ls, PREC);
                            mpfr_log(ls, sum, MPFR_RNDN);
                            mpfr_sub(t, t, ls, MPFR_RNDN);
                            mpfr_clear(ls);
                        } else {
                            mpfr_exp(t, t, MPFR_RNDN);
                            mpfr_div(t, t, sum, MPFR_RNDN);
                        }
                        double out = y.data[r * C + j];
                        EXPECT(fused_ok(&y.fmt, &rnd, t, out),
                               "%s %s %s: row %zu col %zu x=%a: got %a, "
                               "want %a (exact %.17g)",
                               log_form ? "log_softmax" : "softmax",
                               out_formats[fi], emu_rnd_name(rnd.mode), r,
                               j, (double)x.data[r * C + j], out,
                               emu_ref_round(&y.fmt, t, &rnd, NULL),
                               mpfr_get_d(t, MPFR_RNDN));
                    }
                }
                emu_tensor_free(&x);
                emu_tensor_free(&y);
            }
    mpfr_clears(sum, m, t, (mpfr_ptr)0);
}

START_TEST(softmax_vs_mpfr) { check_softmax(false); }
END_TEST

START_TEST(log_softmax_vs_mpfr) { check_softmax(true); }
END_TEST

/* The reference callbacks (sampling every output) must agree: under RNE
 * the error of a correctly rounded fused value is at most half an ulp
 * (plus the binary64 slack), so ulp_max <= 0.5 + 2^-20. */
START_TEST(reference_callbacks)
{
    test_rng g = test_rng_make(0x4ef);
    emu_tensor x = mk("x", "binary32", 5, 17);
    emu_tensor y = mk("y", "binary16", 5, 17);
    emu_tensor loss = mk("loss", "binary16", 1, 0);
    emu_tensor dl = mk("dl", "bfloat16", 5, 17);
    emu_tensor p = mk("p", "binary32", 5, 17);
    fill(&g, &x, 6.0);
    fill(&g, &p, 2.0);
    int labels[5] = { 0, 16, 3, 3, 9 };
    emu_stats st;
    emu_stats_init(&st);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    ck_assert_int_eq(emu_t_softmax(&ctx, "sm", &y, &x, &test_rne), 0);
    ck_assert_int_eq(emu_t_log_softmax(&ctx, "lsm", &y, &x, &test_rne), 0);
    ck_assert_int_eq(emu_t_cross_entropy(&ctx, "ce", &loss, &dl, &x, labels,
                                         256.0f, &test_rne), 0);
    ck_assert_int_eq(emu_t_mse(&ctx, "mse", &loss, &dl, &x, &p, 0.5f,
                               &test_rne), 0);
    const char *names[] = { "sm", "lsm", "ce", "ce.dlogits", "mse",
                            "mse.dpred" };
    const uint64_t counts[] = { 85, 85, 1, 85, 1, 85 };
    for (int i = 0; i < 6; i++) {
        const emu_site *s = emu_stats_find_name(&st, names[i]);
        ck_assert_msg(s != NULL, "site %s missing", names[i]);
        EXPECT(s->total.ref_samples == counts[i] &&
               s->total.results == counts[i],
               "site %s: %llu samples, %llu results, want %llu", names[i],
               (unsigned long long)s->total.ref_samples,
               (unsigned long long)s->total.results,
               (unsigned long long)counts[i]);
        EXPECT(s->total.ulp_max <= 0.5 + 0x1p-20,
               "site %s: ulp_max %.9g > 1/2", names[i], s->total.ulp_max);
    }
    emu_stats_free(&st);
    emu_tensor_free(&x);
    emu_tensor_free(&y);
    emu_tensor_free(&loss);
    emu_tensor_free(&dl);
    emu_tensor_free(&p);
}
END_TEST

/* In place: out = x gives the out-of-place result, and the reference (run
 * after the choke point overwrote x) still sees the old x. */
START_TEST(softmax_in_place)
{
    test_rng g = test_rng_make(0x1a);
    emu_tensor x = mk("x", "binary32", 3, 9);
    emu_tensor y = mk("y", "binary32", 3, 9);
    fill(&g, &x, 4.0);
    emu_stats st;
    emu_stats_init(&st);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    ck_assert_int_eq(emu_t_softmax(&ctx, "a", &y, &x, &test_rne), 0);
    ck_assert_int_eq(emu_t_softmax(&ctx, "b", &x, &x, &test_rne), 0);
    for (size_t i = 0; i < x.n; i++)
        EXPECT(test_same(x.data[i], y.data[i]), "in-place [%zu]: %a vs %a", i,
               (double)x.data[i], (double)y.data[i]);
    EXPECT(emu_stats_find_name(&st, "b")->total.ulp_max <= 0.5 + 0x1p-20,
           "in-place reference saw the overwritten input");
    emu_stats_free(&st);
    emu_tensor_free(&x);
    emu_tensor_free(&y);
}
END_TEST

/* NaN in a row: that row only is NaN, counted as propagated; +inf makes
 * inf - inf: NaN produced from numbers. */
START_TEST(softmax_specials)
{
    emu_tensor x = mk("x", "binary32", 3, 4);
    emu_tensor y = mk("y", "binary16", 3, 4);
    float v[12] = { 1, 2, 3, 4, 1, NAN, 0, 0, 1, INFINITY, -INFINITY, 0 };
    memcpy(x.data, v, sizeof v);
    emu_stats st;
    emu_stats_init(&st);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ctx.stats = &st;
    ck_assert_int_eq(emu_t_softmax(&ctx, "s", &y, &x, &test_rne), 0);
    for (int j = 0; j < 4; j++) {
        ck_assert(!isnan(y.data[j]));
        ck_assert(isnan(y.data[4 + j]));
        ck_assert(isnan(y.data[8 + j]));
    }
    const emu_site *s = emu_stats_find_name(&st, "s");
    EXPECT(s->total.nan == 8 && s->total.nan_produced == 4,
           "nan %llu produced %llu, want 8 and 4",
           (unsigned long long)s->total.nan,
           (unsigned long long)s->total.nan_produced);
    emu_stats_free(&st);
    emu_tensor_free(&x);
    emu_tensor_free(&y);
}
END_TEST

/* ---- cross-entropy ---------------------------------------------------- */

START_TEST(cross_entropy_vs_mpfr)
{
    test_rng g = test_rng_make(0xce);
    mpfr_t sum, m, t, acc;
    mpfr_inits2(PREC, sum, m, t, acc, (mpfr_ptr)0);
    const uint64_t reps = test_scaled(20, 2);
    for (uint64_t rep = 0; rep < reps; rep++)
        for (int fi = 0; fi < N_OUT; fi++)
            for (int mode = 0; mode < TEST_DET_MODES; mode++) {
                size_t B = 1 + test_below(&g, 8), C = 2 + test_below(&g, 30);
                emu_tensor x = mk("x", "binary32", B, C);
                emu_tensor loss = mk("loss", out_formats[fi], 1, 0);
                emu_tensor dl = mk("dl", out_formats[fi], B, C);
                fill(&g, &x, ldexp(1.0, (int)test_below(&g, 6) - 1));
                int labels[8];
                for (size_t r = 0; r < B; r++)
                    labels[r] = (int)test_below(&g, C);
                float scale = (float)ldexp(1.0, (int)test_below(&g, 16));
                emu_ctx ctx;
                emu_ctx_init(&ctx, 3);
                emu_rounding rnd = test_rne;
                rnd.mode = (emu_rnd)mode;
                ck_assert_int_eq(emu_t_cross_entropy(&ctx, "ce", &loss, &dl,
                                                     &x, labels, scale, &rnd), 0);
                mpfr_set_zero(acc, 1);
                for (size_t r = 0; r < B; r++) {
                    mp_row(x.data + r * C, C, sum, m);
                    for (size_t j = 0; j < C; j++) {
                        mpfr_set_flt(t, x.data[r * C + j], MPFR_RNDN);
                        mpfr_sub(t, t, m, MPFR_RNDN);
                        mpfr_exp(t, t, MPFR_RNDN);
                        mpfr_div(t, t, sum, MPFR_RNDN);
                        if ((int)j == labels[r])
                            mpfr_sub_ui(t, t, 1, MPFR_RNDN);
                        mpfr_mul_d(t, t, scale, MPFR_RNDN);
                        mpfr_div_ui(t, t, (unsigned long)B, MPFR_RNDN);
                        double out = dl.data[r * C + j];
                        EXPECT(fused_ok(&dl.fmt, &rnd, t, out),
                               "dlogits %s %s row %zu col %zu label %d "
                               "scale %g: got %a want %a",
                               out_formats[fi], emu_rnd_name(rnd.mode), r,
                               j, labels[r], (double)scale, out,
                               emu_ref_round(&dl.fmt, t, &rnd, NULL));
                    }
                    mpfr_log(t, sum, MPFR_RNDN);
                    mpfr_add(acc, acc, t, MPFR_RNDN);
                    mpfr_set_flt(t, x.data[r * C + (size_t)labels[r]],
                                 MPFR_RNDN);
                    mpfr_sub(t, t, m, MPFR_RNDN);
                    mpfr_sub(acc, acc, t, MPFR_RNDN);
                }
                mpfr_div_ui(acc, acc, (unsigned long)B, MPFR_RNDN);
                EXPECT(fused_ok(&loss.fmt, &rnd, acc, loss.data[0]),
                       "loss %s %s B %zu C %zu: got %a want %a",
                       out_formats[fi], emu_rnd_name(rnd.mode), B, C,
                       (double)loss.data[0],
                       emu_ref_round(&loss.fmt, acc, &rnd, NULL));
                emu_tensor_free(&x);
                emu_tensor_free(&loss);
                emu_tensor_free(&dl);
            }
    mpfr_clears(sum, m, t, acc, (mpfr_ptr)0);
}
END_TEST

/* A confident prediction: softmax[label] = 1 - ~e^-40.  softmax - 1
 * computed as such would keep no correct bit; the op must still be
 * correctly rounded in binary32. */
START_TEST(cross_entropy_confident)
{
    emu_tensor x = mk("x", "binary32", 1, 4);
    emu_tensor loss = mk("loss", "binary32", 1, 0);
    emu_tensor dl = mk("dl", "binary32", 1, 4);
    float v[4] = { 40.0f, 0.5f, -1.0f, 0.25f };
    memcpy(x.data, v, sizeof v);
    int label = 0;
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_rounding rnd = test_rne;
    ck_assert_int_eq(emu_t_cross_entropy(&ctx, "ce", &loss, &dl, &x, &label,
                                         1.0f, &rnd), 0);
    mpfr_t sum, m, t, o;
    mpfr_inits2(PREC, sum, m, t, o, (mpfr_ptr)0);
    mp_row(x.data, 4, sum, m);
    /* -(sum of the other exponentials) / sum */
    mpfr_set_zero(o, 1);
    for (int k = 1; k < 4; k++) {
        mpfr_set_flt(t, x.data[k], MPFR_RNDN);
        mpfr_sub(t, t, m, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add(o, o, t, MPFR_RNDN);
    }
    mpfr_div(o, o, sum, MPFR_RNDN);
    mpfr_neg(o, o, MPFR_RNDN);
    EXPECT(fused_ok(&dl.fmt, &rnd, o, dl.data[0]),
           "confident label gradient: got %a, want %a", (double)dl.data[0],
           emu_ref_round(&dl.fmt, o, &rnd, NULL));
    /* and the loss, log(1 + tiny) ~ tiny, keeps its relative accuracy */
    mpfr_log(t, sum, MPFR_RNDN);
    EXPECT(fused_ok(&loss.fmt, &rnd, t, loss.data[0]),
           "confident loss: got %a, want %a", (double)loss.data[0],
           emu_ref_round(&loss.fmt, t, &rnd, NULL));
    /* log_softmax of the winning class: -log(1 + tiny) */
    emu_tensor ls = mk("ls", "binary32", 1, 4);
    ck_assert_int_eq(emu_t_log_softmax(&ctx, "ls", &ls, &x, &rnd), 0);
    mpfr_log(t, sum, MPFR_RNDN);
    mpfr_neg(t, t, MPFR_RNDN);
    EXPECT(fused_ok(&ls.fmt, &rnd, t, ls.data[0]),
           "confident log_softmax: got %a, want %a", (double)ls.data[0],
           emu_ref_round(&ls.fmt, t, &rnd, NULL));
    emu_tensor_free(&ls);
    mpfr_clears(sum, m, t, o, (mpfr_ptr)0);
    emu_tensor_free(&x);
    emu_tensor_free(&loss);
    emu_tensor_free(&dl);
}
END_TEST

/* ---- MSE ------------------------------------------------------------------ */

START_TEST(mse_vs_mpfr)
{
    test_rng g = test_rng_make(0x35e);
    mpfr_t t, acc;
    mpfr_inits2(PREC, t, acc, (mpfr_ptr)0);
    const uint64_t reps = test_scaled(20, 2);
    for (uint64_t rep = 0; rep < reps; rep++)
        for (int fi = 0; fi < N_OUT; fi++)
            for (int mode = 0; mode < TEST_DET_MODES; mode++) {
                size_t R = 1 + test_below(&g, 5), C = 1 + test_below(&g, 20);
                emu_tensor p = mk("p", "binary32", R, C);
                emu_tensor q = mk("q", "binary32", R, C);
                emu_tensor loss = mk("loss", out_formats[fi], 1, 0);
                emu_tensor dp = mk("dp", out_formats[fi], R, C);
                fill(&g, &p, 3.0);
                fill(&g, &q, 3.0);
                float scale = (float)ldexp(1.0, (int)test_below(&g, 12) - 2);
                emu_ctx ctx;
                emu_ctx_init(&ctx, 3);
                emu_rounding rnd = test_rne;
                rnd.mode = (emu_rnd)mode;
                ck_assert_int_eq(emu_t_mse(&ctx, "mse", &loss, &dp, &p, &q,
                                           scale, &rnd), 0);
                mpfr_set_zero(acc, 1);
                for (size_t i = 0; i < p.n; i++) {
                    mpfr_set_flt(t, p.data[i], MPFR_RNDN);
                    mpfr_sub_d(t, t, q.data[i], MPFR_RNDN);
                    mpfr_mul_d(t, t, 2.0 * scale, MPFR_RNDN);
                    mpfr_div_ui(t, t, (unsigned long)p.n, MPFR_RNDN);
                    EXPECT(fused_ok(&dp.fmt, &rnd, t, dp.data[i]),
                           "dpred %s %s [%zu] p=%a q=%a: got %a want %a",
                           out_formats[fi], emu_rnd_name(rnd.mode), i,
                           (double)p.data[i], (double)q.data[i],
                           (double)dp.data[i],
                           emu_ref_round(&dp.fmt, t, &rnd, NULL));
                    mpfr_set_flt(t, p.data[i], MPFR_RNDN);
                    mpfr_sub_d(t, t, q.data[i], MPFR_RNDN);
                    mpfr_sqr(t, t, MPFR_RNDN);
                    mpfr_add(acc, acc, t, MPFR_RNDN);
                }
                mpfr_div_ui(acc, acc, (unsigned long)p.n, MPFR_RNDN);
                EXPECT(fused_ok(&loss.fmt, &rnd, acc, loss.data[0]),
                       "mse loss %s %s: got %a want %a", out_formats[fi],
                       emu_rnd_name(rnd.mode), (double)loss.data[0],
                       emu_ref_round(&loss.fmt, acc, &rnd, NULL));
                emu_tensor_free(&p);
                emu_tensor_free(&q);
                emu_tensor_free(&loss);
                emu_tensor_free(&dp);
            }
    mpfr_clears(t, acc, (mpfr_ptr)0);
}
END_TEST

/* ---- gradient checks ------------------------------------------------- */

static double ulp32(double f)
{
    int e;
    frexp(f, &e);
    return ldexp(1.0, (e - 24) < -149 ? -149 : e - 24);
}

/* Cross-entropy: |d^3 loss / d x^3| <= max |p(1-p)(1-2p)| / B < 0.1 / B. */
START_TEST(cross_entropy_gradient)
{
    test_rng g = test_rng_make(0x9ad);
    const double h = 0x1p-6;
    double worst = 0.0;
    for (int rep = 0; rep < 6; rep++) {
        size_t B = 1 + test_below(&g, 4), C = 2 + test_below(&g, 7);
        emu_tensor x = mk("x", "binary32", B, C);
        emu_tensor loss = mk("loss", "binary32", 1, 0);
        emu_tensor dl = mk("dl", "binary32", B, C);
        for (size_t i = 0; i < x.n; i++) /* multiples of 2^-12: x +- h exact */
            x.data[i] = (float)ldexp((double)test_below(&g, 6 << 12) - (3 << 12), -12);
        int labels[4];
        for (size_t r = 0; r < B; r++)
            labels[r] = (int)test_below(&g, C);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        ck_assert_int_eq(emu_t_cross_entropy(&ctx, "ce", &loss, &dl, &x,
                                             labels, 1.0f, &test_rne), 0);
        for (size_t i = 0; i < x.n; i++) {
            float x0 = x.data[i];
            x.data[i] = x0 + (float)h;
            ck_assert_int_eq(emu_t_cross_entropy(&ctx, "ce", &loss, NULL, &x,
                                                 labels, 1.0f, &test_rne), 0);
            double fp = loss.data[0];
            x.data[i] = x0 - (float)h;
            ck_assert_int_eq(emu_t_cross_entropy(&ctx, "ce", &loss, NULL, &x,
                                                 labels, 1.0f, &test_rne), 0);
            double fm = loss.data[0];
            x.data[i] = x0;
            double fd = (fp - fm) / (2.0 * h);
            double gr = dl.data[i];
            double tol = (ulp32(fp) + ulp32(fm)) / 2.0 / (2.0 * h) +
                         h * h / 6.0 * 0.1 / (double)B + 0x1p-24 * fabs(gr);
            double err = fabs(fd - gr);
            worst = fmax(worst, err / tol);
            EXPECT(err <= tol, "CE gradient B %zu C %zu [%zu]: fd %.9g, "
                   "analytic %.9g, |diff| %.3g > tol %.3g", B, C, i, fd, gr,
                   err, tol);
        }
        emu_tensor_free(&x);
        emu_tensor_free(&loss);
        emu_tensor_free(&dl);
    }
    fprintf(stderr, "cross-entropy gradient check: worst |fd - g| / tol = "
            "%.3f\n", worst);
}
END_TEST

/* MSE is quadratic: the central difference has no truncation error. */
START_TEST(mse_gradient)
{
    test_rng g = test_rng_make(0x3d);
    const double h = 0x1p-4;
    double worst = 0.0;
    for (int rep = 0; rep < 4; rep++) {
        size_t R = 1 + test_below(&g, 4), C = 1 + test_below(&g, 6);
        emu_tensor p = mk("p", "binary32", R, C);
        emu_tensor q = mk("q", "binary32", R, C);
        emu_tensor loss = mk("loss", "binary32", 1, 0);
        emu_tensor dp = mk("dp", "binary32", R, C);
        for (size_t i = 0; i < p.n; i++) {
            p.data[i] = (float)ldexp((double)test_below(&g, 1 << 12) - 2048, -10);
            q.data[i] = (float)ldexp((double)test_below(&g, 1 << 12) - 2048, -10);
        }
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        ck_assert_int_eq(emu_t_mse(&ctx, "m", &loss, &dp, &p, &q, 1.0f,
                                   &test_rne), 0);
        for (size_t i = 0; i < p.n; i++) {
            float p0 = p.data[i];
            p.data[i] = p0 + (float)h;
            ck_assert_int_eq(emu_t_mse(&ctx, "m", &loss, NULL, &p, &q, 1.0f,
                                       &test_rne), 0);
            double fp = loss.data[0];
            p.data[i] = p0 - (float)h;
            ck_assert_int_eq(emu_t_mse(&ctx, "m", &loss, NULL, &p, &q, 1.0f,
                                       &test_rne), 0);
            double fm = loss.data[0];
            p.data[i] = p0;
            double fd = (fp - fm) / (2.0 * h), gr = dp.data[i];
            double tol = (ulp32(fp) + ulp32(fm)) / 2.0 / (2.0 * h) +
                         0x1p-24 * fabs(gr);
            double err = fabs(fd - gr);
            worst = fmax(worst, err / tol);
            EXPECT(err <= tol, "MSE gradient [%zu]: fd %.9g analytic %.9g "
                   "|diff| %.3g > tol %.3g", i, fd, gr, err, tol);
        }
        emu_tensor_free(&p);
        emu_tensor_free(&q);
        emu_tensor_free(&loss);
        emu_tensor_free(&dp);
    }
    fprintf(stderr, "MSE gradient check: worst |fd - g| / tol = %.3f\n", worst);
}
END_TEST

/* ---- refusals ----------------------------------------------------------- */

static void expect_fail(int rc, const emu_ctx *ctx, const char *needle)
{
    EXPECT(rc == -1, "expected a refusal mentioning '%s'", needle);
    EXPECT(strstr(ctx->err.message, needle) != NULL,
           "error '%s' does not mention '%s'", ctx->err.message, needle);
}

static void fill_sentinel(emu_tensor *t)
{
    for (size_t i = 0; i < t->n; i++)
        t->data[i] = 0.125f * (float)(i % 7);
}

static void expect_sentinel(const emu_tensor *t)
{
    for (size_t i = 0; i < t->n; i++)
        EXPECT(t->data[i] == 0.125f * (float)(i % 7),
               "output '%s' touched at %zu", t->name, i);
}

START_TEST(bad_input)
{
    emu_tensor x = mk("x", "binary32", 3, 4);
    emu_tensor y = mk("y", "binary16", 3, 4);
    emu_tensor y2 = mk("y2", "binary16", 4, 3);
    emu_tensor v = mk("v", "binary32", 12, 0);
    emu_tensor loss = mk("loss", "binary32", 1, 0);
    emu_tensor loss2 = mk("loss2", "binary32", 2, 0);
    fill_sentinel(&x);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    fill_sentinel(&y);
    fill_sentinel(&y2);
    fill_sentinel(&loss);
    expect_fail(emu_t_softmax(&ctx, "s", &y2, &x, &test_rne), &ctx,
                "shape mismatch");
    expect_fail(emu_t_softmax(&ctx, "s", &v, &v, &test_rne), &ctx, "matrix");
    int bad[3] = { 0, 4, 1 }, neg[3] = { 0, 1, -1 }, ok[3] = { 0, 1, 3 };
    expect_fail(emu_t_cross_entropy(&ctx, "ce", &loss, &y, &x, bad, 1.0f,
                                    &test_rne),
                &ctx, "label 4 of row 1 is out of range");
    expect_fail(emu_t_cross_entropy(&ctx, "ce", &loss, &y, &x, neg, 1.0f,
                                    &test_rne),
                &ctx, "label -1 of row 2");
    expect_fail(emu_t_cross_entropy(&ctx, "ce", &loss, &y, &x, NULL, 1.0f,
                                    &test_rne),
                &ctx, "labels");
    expect_fail(emu_t_cross_entropy(&ctx, "ce", &loss2, &y, &x, ok, 1.0f,
                                    &test_rne),
                &ctx, "one element");
    expect_fail(emu_t_cross_entropy(&ctx, "ce", &loss, &y2, &x, ok, 1.0f,
                                    &test_rne),
                &ctx, "shape mismatch");
    expect_fail(emu_t_mse(&ctx, "m", &loss, &y, &x, &y2, 1.0f, &test_rne), &ctx,
                "shape mismatch");
    expect_fail(emu_t_mse(&ctx, "m", &loss2, NULL, &x, &y, 1.0f, &test_rne),
                &ctx, "one element");
    /* A tensor whose format the carrier cannot hold. */
    emu_tensor wide = x;
    wide.fmt = *test_format("binary64");
    expect_fail(emu_t_softmax(&ctx, "s", &y, &wide, &test_rne), &ctx,
                "carrier");
    expect_fail(emu_t_mse(&ctx, "m", &loss, NULL, &wide, &x, 1.0f, &test_rne),
                &ctx, "carrier");
    /* the rounding has no default */
    expect_fail(emu_t_softmax(&ctx, "s", &y, &x, NULL), &ctx, "no rounding");
    expect_fail(emu_t_cross_entropy(&ctx, "ce", &loss, &y, &x, ok, 1.0f, NULL),
                &ctx, "no rounding");
    expect_fail(emu_t_mse(&ctx, "m", &loss, NULL, &x, &x, 1.0f, NULL), &ctx,
                "no rounding");
    expect_sentinel(&y);
    expect_sentinel(&y2);
    expect_sentinel(&loss);
    expect_sentinel(&x);
    ck_assert_uint_eq(ctx.op_index, 0);
    emu_tensor_free(&x);
    emu_tensor_free(&y);
    emu_tensor_free(&y2);
    emu_tensor_free(&v);
    emu_tensor_free(&loss);
    emu_tensor_free(&loss2);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_loss");
    TCase *tc = tcase_create("loss");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, softmax_vs_mpfr);
    tcase_add_test(tc, log_softmax_vs_mpfr);
    tcase_add_test(tc, reference_callbacks);
    tcase_add_test(tc, softmax_in_place);
    tcase_add_test(tc, softmax_specials);
    tcase_add_test(tc, cross_entropy_vs_mpfr);
    tcase_add_test(tc, cross_entropy_confident);
    tcase_add_test(tc, mse_vs_mpfr);
    tcase_add_test(tc, cross_entropy_gradient);
    tcase_add_test(tc, mse_gradient);
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
