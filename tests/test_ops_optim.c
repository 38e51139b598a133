/*
 * test_ops_optim.c — SGD and Adam updates against MPFR, and the swamping
 * counts of the weight update (the absorbed updates of the
 * mixed-precision papers).
 *
 * SGD's outputs and Adam's moments are exact sums rounded once: every
 * output must equal emu_ref_round (the MPFR oracle) of the exact value,
 * bit for bit, in every deterministic mode, including ties and
 * cancellations built on purpose.  Adam's weight step divides by a square
 * root, evaluated in binary64: its output must be the rounding of
 * w - u (1 + d) with |d| <= 2^-45.
 *
 * Absorption is checked on hand-made binary16 cases (w = 1: an update of
 * 2^-12 downward is a tie that nearest-even sends back to 1, 2^-10 is
 * applied), on random data against the test's own count of unchanged
 * weights, and under stochastic rounding with a binomial bound.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "optim_sum.h" /* library-private: the fast sums and their reference */

#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

enum { PREC = 512 };

static emu_tensor mk(const char *name, const char *fmt, size_t n)
{
    emu_tensor t;
    emu_error e;
    if (emu_tensor_alloc4(&t, name, EMU_ROLE_OTHER, test_format(fmt), n, 0, 0,
                          0, &e))
        ck_abort_msg("alloc %s: %s", name, e.message);
    return t;
}

/* A random value of fmt: sign, exponent in [elo, ehi] (clamped to the
 * format's normal range), full random significand, rounded into fmt. */
static float rand_val(test_rng *g, const emu_format *f, int elo, int ehi)
{
    if (elo < f->emin)
        elo = f->emin;
    if (ehi > f->emax)
        ehi = f->emax;
    int e = elo + (int)test_below(g, (uint64_t)(ehi - elo + 1));
    double m = 1.0 + (double)(test_next(g) >> 11) * 0x1p-53;
    double x = ldexp(m, e);
    if (f->is_signed && (test_next(g) & 1))
        x = -x;
    emu_rounding rz = { .mode = EMU_RZ };
    return (float)emu_round(f, x, &rz, NULL);
}

static void mp_prod(mpfr_ptr r, double a, double b)
{
    mpfr_set_d(r, a, MPFR_RNDN);
    mpfr_mul_d(r, r, b, MPFR_RNDN); /* exact at PREC */
}

/* ---- SGD against MPFR ---------------------------------------------------- */

static const char *const w_formats[] = { "binary16", "bfloat16", "binary32",
                                         "e4m3", "e5m2" };
enum { N_WF = sizeof w_formats / sizeof w_formats[0] };

/* Inputs with the hard cases mixed in: cancellation between momentum v
 * and g, a decay term far below the rest, updates at a tie of w. */
static void sgd_inputs(test_rng *g, emu_tensor *w, emu_tensor *v,
                       emu_tensor *gr, double mom, double lr)
{
    for (size_t i = 0; i < w->n; i++) {
        w->data[i] = rand_val(g, &w->fmt, -6, 3);
        if (v)
            v->data[i] = rand_val(g, &v->fmt, -12, 2);
        gr->data[i] = rand_val(g, &gr->fmt, -14, 2);
        switch (test_below(g, 4)) {
        case 0: /* g cancels momentum * v (as far as g's format allows) */
            if (v)
                gr->data[i] = (float)emu_round(&gr->fmt, -mom * v->data[i],
                                               NULL, NULL);
            break;
        case 1: { /* lr * g lands on half an ulp of w */
            double ulp = ldexp(1.0, ilogb(w->data[i]) - w->fmt.p + 1);
            gr->data[i] = (float)emu_round(&gr->fmt, ulp / 2.0 / lr, NULL, NULL);
            if (v)
                v->data[i] = 0.0f;
            break;
        }
        default:
            break;
        }
    }
}

START_TEST(sgd_vs_mpfr)
{
    test_rng g = test_rng_make(0x56d);
    mpfr_t e, t;
    mpfr_inits2(PREC, e, t, (mpfr_ptr)0);
    const size_t n = (size_t)test_scaled(3000, 300);
    /* 2^-60: at a tie of w, the decay term lies beyond binary64's reach
     * of the other terms, so only an exact sum rounds it right. */
    const float wds[] = { 0.0f, 1e-4f, 0x1p-60f };
    for (int fi = 0; fi < N_WF; fi++)
        for (int mode = 0; mode < TEST_DET_MODES; mode++)
            for (int with_v = 0; with_v < 2; with_v++) {
                const char *vf = fi % 2 ? "binary32" : w_formats[fi];
                emu_tensor w = mk("w", w_formats[fi], n);
                emu_tensor v = mk("v", vf, n);
                emu_tensor gr = mk("g", "binary32", n);
                /* state rounded in another mode half of the time */
                emu_rounding srnd = { .mode = (emu_rnd)((mode + 3) % TEST_DET_MODES) };
                emu_sgd_opts o = { .lr = 0x1p-7f,
                                   .momentum = with_v ? 0.9f : 0.0f,
                                   .weight_decay = wds[mode % 3],
                                   .state_rnd = fi % 2 ? &srnd : NULL };
                const emu_rounding *vr = fi % 2 ? &srnd : NULL;
                sgd_inputs(&g, &w, with_v ? &v : NULL, &gr, o.momentum, o.lr);
                float *w0 = malloc(n * sizeof *w0), *v0 = malloc(n * sizeof *v0);
                memcpy(w0, w.data, n * sizeof *w0);
                memcpy(v0, v.data, n * sizeof *v0);
                emu_ctx ctx;
                emu_ctx_init(&ctx, 9);
                emu_rounding rnd = test_rne;
                rnd.mode = (emu_rnd)mode;
                ck_assert_int_eq(emu_t_sgd_update(&ctx, "sgd", &w,
                                                  with_v ? &v : NULL, &gr, &o,
                                                  &rnd),
                                 0);
                for (size_t i = 0; i < n; i++) {
                    double vn = 0.0;
                    if (with_v) {
                        mp_prod(e, o.momentum, v0[i]);
                        mp_prod(t, o.weight_decay, w0[i]);
                        mpfr_add(e, e, t, MPFR_RNDN);
                        mpfr_add_d(e, e, gr.data[i], MPFR_RNDN);
                        double want = emu_ref_round(&v.fmt, e,
                                                    vr ? vr : &rnd, NULL);
                        EXPECT(test_same(want, v.data[i]),
                               "sgd v %s %s [%zu]: v %a g %a w %a: got %a want %a",
                               vf, emu_rnd_name(vr ? vr->mode : rnd.mode),
                               i, (double)v0[i],
                               (double)gr.data[i], (double)w0[i],
                               (double)v.data[i], want);
                        vn = v.data[i];
                        mp_prod(e, o.lr, vn);
                    } else {
                        mp_prod(e, o.weight_decay, w0[i]);
                        mpfr_add_d(e, e, gr.data[i], MPFR_RNDN);
                        mpfr_mul_d(e, e, o.lr, MPFR_RNDN);
                    }
                    mpfr_d_sub(e, w0[i], e, MPFR_RNDN);
                    double want = emu_ref_round(&w.fmt, e, &rnd, NULL);
                    EXPECT(test_same(want, w.data[i]),
                           "sgd w %s %s v=%d wd %a [%zu]: w %a g %a v' %a: "
                           "got %a want %a", w_formats[fi],
                           emu_rnd_name(rnd.mode), with_v,
                           (double)o.weight_decay, i, (double)w0[i],
                           (double)gr.data[i], vn, (double)w.data[i], want);
                }
                free(w0);
                free(v0);
                emu_tensor_free(&w);
                emu_tensor_free(&v);
                emu_tensor_free(&gr);
            }
    mpfr_clears(e, t, (mpfr_ptr)0);
}
END_TEST

/* A tie broken only by a term 2^-60 below the update: binary64 alone
 * (lr * (g + wd w) = lr * RN(1 + 2^-60) = 2^-12) would see an exact tie
 * and round to even, back to 1.  The exact value is below the tie. */
START_TEST(sgd_tie_broken_below_binary64)
{
    emu_tensor w = mk("w", "binary16", 1);
    emu_tensor gr = mk("g", "binary32", 1);
    w.data[0] = 1.0f;
    gr.data[0] = 1.0f;
    emu_sgd_opts o = { .lr = 0x1p-12f, .momentum = 0.0f,
                       .weight_decay = 0x1p-60f };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_sgd_update(&ctx, "sgd", &w, NULL, &gr, &o,
                                      &test_rne), 0);
    EXPECT(w.data[0] == 1.0f - 0x1p-11f, "w = %a, want %a", (double)w.data[0],
           1.0 - 0x1p-11);
    /* The same for the momentum: v = 0 * 0.9 + (1 + 2^-11) + 2^-60 w in
     * binary16 is just above (w = 1) or below (w = -1) the tie between
     * 1 and 1 + 2^-10. */
    emu_tensor w2 = mk("w2", "binary32", 2), v = mk("v", "binary16", 2);
    emu_tensor g2 = mk("g2", "binary32", 2);
    w2.data[0] = 1.0f;
    w2.data[1] = -1.0f;
    g2.data[0] = g2.data[1] = 1.0f + 0x1p-11f;
    emu_sgd_opts om = { .lr = 0x1p-20f, .momentum = 0.9f,
                        .weight_decay = 0x1p-60f };
    ck_assert_int_eq(emu_t_sgd_update(&ctx, "sgd", &w2, &v, &g2, &om,
                                      &test_rne), 0);
    EXPECT(v.data[0] == 1.0f + 0x1p-10f && v.data[1] == 1.0f,
           "v = %a, %a; want %a, 1", (double)v.data[0], (double)v.data[1],
           1.0 + 0x1p-10);
    emu_tensor_free(&w2);
    emu_tensor_free(&v);
    emu_tensor_free(&g2);
    emu_tensor_free(&w);
    emu_tensor_free(&gr);
}
END_TEST

/* ---- Adam against MPFR -------------------------------------------------- */

START_TEST(adam_vs_mpfr)
{
    test_rng g = test_rng_make(0xada);
    mpfr_t e, t, c;
    mpfr_inits2(PREC, e, t, c, (mpfr_ptr)0);
    const size_t n = (size_t)test_scaled(2000, 200);
    for (int fi = 0; fi < N_WF; fi++)
        for (int mode = 0; mode < TEST_DET_MODES; mode++) {
            emu_tensor w = mk("w", w_formats[fi], n);
            emu_tensor m = mk("m", fi % 2 ? "binary32" : "bfloat16", n);
            emu_tensor v = mk("v", fi % 2 ? "binary32" : "binary16", n);
            emu_tensor gr = mk("g", "binary32", n);
            for (size_t i = 0; i < n; i++) {
                w.data[i] = rand_val(&g, &w.fmt, -6, 2);
                m.data[i] = rand_val(&g, &m.fmt, -12, 0);
                v.data[i] = fabsf(rand_val(&g, &v.fmt, -14, 0));
                gr.data[i] = rand_val(&g, &gr.fmt, -14, 1);
            }
            emu_rounding srnd = { .mode = (emu_rnd)((mode + 1) % TEST_DET_MODES) };
            const emu_rounding *sr = fi % 2 ? NULL : &srnd;
            emu_adam_opts o = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                                .eps = 1e-8f, .weight_decay = 0.01f,
                                .t = 1 + (int64_t)test_below(&g, 1000),
                                .state_rnd = sr };
            float *w0 = malloc(n * sizeof *w0), *m0 = malloc(n * sizeof *m0),
                  *v0 = malloc(n * sizeof *v0);
            memcpy(w0, w.data, n * sizeof *w0);
            memcpy(m0, m.data, n * sizeof *m0);
            memcpy(v0, v.data, n * sizeof *v0);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 9);
            emu_rounding rnd = test_rne;
            rnd.mode = (emu_rnd)mode;
            ck_assert_int_eq(emu_t_adam_update(&ctx, "adam", &w, &m, &v, &gr,
                                               &o, &rnd), 0);
            for (size_t i = 0; i < n; i++) {
                double gi = gr.data[i];
                /* m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 */
                mp_prod(e, o.beta1, m0[i]);
                mpfr_set_d(t, o.beta1, MPFR_RNDN);
                mpfr_ui_sub(t, 1, t, MPFR_RNDN);
                mpfr_mul_d(t, t, gi, MPFR_RNDN);
                mpfr_add(e, e, t, MPFR_RNDN);
                double want = emu_ref_round(&m.fmt, e, sr ? sr : &rnd, NULL);
                EXPECT(test_same(want, m.data[i]),
                       "adam m %s [%zu]: m %a g %a: got %a want %a",
                       emu_rnd_name(rnd.mode), i, (double)m0[i], gi,
                       (double)m.data[i], want);
                mp_prod(e, o.beta2, v0[i]);
                mpfr_set_d(t, o.beta2, MPFR_RNDN);
                mpfr_ui_sub(t, 1, t, MPFR_RNDN);
                mpfr_mul_d(t, t, gi, MPFR_RNDN);
                mpfr_mul_d(t, t, gi, MPFR_RNDN);
                mpfr_add(e, e, t, MPFR_RNDN);
                want = emu_ref_round(&v.fmt, e, sr ? sr : &rnd, NULL);
                EXPECT(test_same(want, v.data[i]),
                       "adam v %s [%zu]: v %a g %a: got %a want %a",
                       emu_rnd_name(rnd.mode), i, (double)v0[i], gi,
                       (double)v.data[i], want);
                /* u = lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd w) */
                mpfr_set_d(c, o.beta2, MPFR_RNDN);
                mpfr_pow_si(c, c, (long)o.t, MPFR_RNDN);
                mpfr_ui_sub(c, 1, c, MPFR_RNDN);
                mpfr_set_flt(t, v.data[i], MPFR_RNDN);
                mpfr_div(t, t, c, MPFR_RNDN);
                mpfr_sqrt(t, t, MPFR_RNDN);
                mpfr_add_d(t, t, o.eps, MPFR_RNDN);
                mpfr_set_d(c, o.beta1, MPFR_RNDN);
                mpfr_pow_si(c, c, (long)o.t, MPFR_RNDN);
                mpfr_ui_sub(c, 1, c, MPFR_RNDN);
                mpfr_set_flt(e, m.data[i], MPFR_RNDN);
                mpfr_div(e, e, c, MPFR_RNDN);
                mpfr_div(e, e, t, MPFR_RNDN);
                mp_prod(t, o.weight_decay, w0[i]);
                mpfr_add(e, e, t, MPFR_RNDN);
                mpfr_mul_d(e, e, o.lr, MPFR_RNDN); /* e = u */
                double got = w.data[i];
                bool ok = false;
                for (int k = -1; k <= 1 && !ok; k++) {
                    mpfr_mul_d(t, e, 1.0 + k * 0x1p-45, MPFR_RNDN);
                    mpfr_d_sub(t, w0[i], t, MPFR_RNDN);
                    ok = test_same(emu_ref_round(&w.fmt, t, &rnd, NULL), got);
                }
                mpfr_d_sub(t, w0[i], e, MPFR_RNDN);
                EXPECT(ok, "adam w %s %s t=%lld [%zu]: w %a: got %a want %a",
                       w_formats[fi], emu_rnd_name(rnd.mode),
                       (long long)o.t, i, (double)w0[i], got,
                       emu_ref_round(&w.fmt, t, &rnd, NULL));
            }
            free(w0);
            free(m0);
            free(v0);
            emu_tensor_free(&w);
            emu_tensor_free(&m);
            emu_tensor_free(&v);
            emu_tensor_free(&gr);
        }
    mpfr_clears(e, t, c, (mpfr_ptr)0);
}
END_TEST

/* The reference callbacks agree with the ops: every output sampled, RNE,
 * error at most half an ulp (Adam's weights: plus the binary64 slack). */
START_TEST(reference_callbacks)
{
    test_rng g = test_rng_make(0x3ef);
    const size_t n = 64;
    emu_tensor w = mk("w", "binary16", n), v = mk("v", "bfloat16", n);
    emu_tensor m = mk("m", "binary32", n), gr = mk("g", "binary32", n);
    for (size_t i = 0; i < n; i++) {
        w.data[i] = rand_val(&g, &w.fmt, -4, 2);
        v.data[i] = fabsf(rand_val(&g, &v.fmt, -10, 0));
        m.data[i] = rand_val(&g, &m.fmt, -10, 0);
        gr.data[i] = rand_val(&g, &gr.fmt, -10, 1);
    }
    emu_stats st;
    emu_stats_init(&st);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 2);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    emu_sgd_opts so = { .lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f };
    ck_assert_int_eq(emu_t_sgd_update(&ctx, "sgd", &w, &v, &gr, &so, &test_rne),
                     0);
    so.momentum = 0.0f;
    ck_assert_int_eq(emu_t_sgd_update(&ctx, "sgd0", &w, NULL, &gr, &so,
                                      &test_rne), 0);
    for (size_t i = 0; i < n; i++) /* SGD's velocity may be negative */
        v.data[i] = fabsf(v.data[i]);
    emu_adam_opts ao = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                         .eps = 1e-8f, .weight_decay = 0.01f, .t = 3 };
    ck_assert_int_eq(emu_t_adam_update(&ctx, "adam", &w, &m, &v, &gr, &ao,
                                       &test_rne), 0);
    const char *names[] = { "sgd.v", "sgd", "sgd0", "adam.m", "adam.v",
                            "adam" };
    for (int i = 0; i < 6; i++) {
        const emu_site *s = emu_stats_find_name(&st, names[i]);
        ck_assert_msg(s != NULL, "site %s missing", names[i]);
        EXPECT(s->total.ref_samples == n, "site %s: %llu samples", names[i],
               (unsigned long long)s->total.ref_samples);
        EXPECT(s->total.ulp_max <= 0.5 + 0x1p-20, "site %s: ulp_max %.9g",
               names[i], s->total.ulp_max);
    }
    emu_stats_free(&st);
    emu_tensor_free(&w);
    emu_tensor_free(&v);
    emu_tensor_free(&m);
    emu_tensor_free(&gr);
}
END_TEST

/* ---- swamping ------------------------------------------------------------ */

typedef struct swamp_result {
    uint64_t adds, absorbed, lost_all;
    float w;
} swamp_result;

/* n binary16 weights equal to w0, plain SGD with update lr * g. */
static swamp_result plain_update(size_t n, float w0, float lr, float g,
                                 emu_rnd mode, uint64_t seed)
{
    emu_tensor w = mk("w", "binary16", n), gr = mk("g", "binary32", n);
    for (size_t i = 0; i < n; i++) {
        w.data[i] = w0;
        gr.data[i] = g;
    }
    emu_stats st;
    emu_stats_init(&st);
    emu_ctx ctx;
    emu_ctx_init(&ctx, seed);
    emu_rounding rnd = test_rne;
    ctx.stats = &st;
    rnd.mode = mode;
    emu_sgd_opts o = { .lr = lr };
    ck_assert_int_eq(emu_t_sgd_update(&ctx, "upd", &w, NULL, &gr, &o, &rnd), 0);
    const emu_site *s = emu_stats_find_name(&st, "upd");
    swamp_result r = { s->total.adds, s->total.absorbed,
                       s->total.lost_bits[EMU_LOST_BINS - 1], w.data[0] };
    uint64_t unchanged = 0;
    for (size_t i = 0; i < n; i++)
        unchanged += w.data[i] == w0;
    EXPECT(g == 0.0f || unchanged == r.absorbed,
           "absorbed %llu but %llu weights unchanged",
           (unsigned long long)r.absorbed, (unsigned long long)unchanged);
    emu_stats_free(&st);
    emu_tensor_free(&w);
    emu_tensor_free(&gr);
    return r;
}

/* binary16 at w = 1: ulp above is 2^-10, below 2^-11. */
START_TEST(absorbed_hand_made)
{
    static const struct {
        float w, lr, g;
        bool absorbed;
        float w_new;
    } cases[] = {
        { 1.0f, 0x1p-12f, 1.0f, true, 1.0f },            /* tie below: even */
        { 1.0f, 0x1p-13f, 1.0f, true, 1.0f },
        { 1.0f, 0x1p-11f, 1.0f, false, 1.0f - 0x1p-11f }, /* one ulp below */
        { 1.0f, 0x1p-10f, 1.0f, false, 1.0f - 0x1p-10f },
        { 1.0f, 0x1p-11f, -1.0f, true, 1.0f },           /* tie above: even */
        { 1.0f, 0x1p-12f, -1.0f, true, 1.0f },
        { 1.0f, 0x1p-10f, -1.0f, false, 1.0f + 0x1p-10f },
        { 1.0f, 0x1.8p-12f, 1.0f, false, 1.0f - 0x1p-11f }, /* above the tie */
        { 1024.0f, 0.25f, 1.0f, true, 1024.0f },          /* ulp 0.5 there */
        { 1024.0f, 0.5f, -1.0f, true, 1024.0f },          /* ulp 1 above */
        { 1024.0f, 0.5f, 1.0f, false, 1023.5f },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        swamp_result r = plain_update(8, cases[k].w, cases[k].lr, cases[k].g,
                                      EMU_RNE, 1);
        EXPECT(r.adds == 8, "case %zu: adds %llu, want 8", k,
               (unsigned long long)r.adds);
        EXPECT(r.absorbed == (cases[k].absorbed ? 8u : 0u) &&
               r.lost_all == r.absorbed && r.w == cases[k].w_new,
               "case %zu: w %a - %a * %a: absorbed %llu (lost-all %llu), "
               "w %a; want absorbed %d, w %a", k, (double)cases[k].w,
               (double)cases[k].lr, (double)cases[k].g,
               (unsigned long long)r.absorbed, (unsigned long long)r.lost_all,
               (double)r.w, cases[k].absorbed, (double)cases[k].w_new);
    }
    /* A zero update is not an add. */
    swamp_result r = plain_update(8, 1.0f, 0.5f, 0.0f, EMU_RNE, 1);
    EXPECT(r.adds == 0 && r.absorbed == 0, "zero update counted: adds %llu",
           (unsigned long long)r.adds);
}
END_TEST

/* Stochastic rounding: w = 1 - 2^-12 lies halfway between 1 - 2^-11 and
 * 1, so each weight stays at 1 (absorbed) with probability 1/2; 1 - 3 *
 * 2^-14 is 5/8 of the way up.  Bound: 5 binomial standard deviations
 * (a false failure has probability < 6e-7, and the seed is fixed). */
START_TEST(absorbed_stochastic)
{
    const size_t n = (size_t)test_scaled(20000, 4000);
    static const struct {
        float lr;
        double p_absorbed;
    } cases[] = { { 0x1p-12f, 0.5 }, { 0x3p-14f, 0.625 }, { 0x1p-14f, 0.875 } };
    for (size_t k = 0; k < 3; k++) {
        swamp_result r = plain_update(n, 1.0f, cases[k].lr, 1.0f, EMU_RS,
                                      100 + k);
        double mean = cases[k].p_absorbed * (double)n;
        double sd = sqrt((double)n * cases[k].p_absorbed *
                         (1.0 - cases[k].p_absorbed));
        EXPECT(fabs((double)r.absorbed - mean) <= 5.0 * sd,
               "SR update %a at w = 1: %llu of %zu absorbed, expected %.0f "
               "+- %.0f", (double)cases[k].lr, (unsigned long long)r.absorbed,
               n, mean, 5.0 * sd);
        EXPECT(r.adds == n, "SR adds %llu", (unsigned long long)r.adds);
    }
}
END_TEST

/* Random data, momentum, all modes: the predicted absorbed count equals
 * the weights that did not move although lr * v' != 0. */
START_TEST(absorbed_random)
{
    test_rng g = test_rng_make(0xab5);
    const size_t n = 500;
    const emu_rnd modes[] = { EMU_RNE, EMU_RZ, EMU_RU, EMU_RS, EMU_RS_BITS };
    for (int mi = 0; mi < 5; mi++) {
        emu_tensor w = mk("w", "binary16", n), v = mk("v", "binary32", n);
        emu_tensor gr = mk("g", "binary32", n);
        for (size_t i = 0; i < n; i++) {
            w.data[i] = rand_val(&g, &w.fmt, -3, 3);
            v.data[i] = i % 5 ? rand_val(&g, &v.fmt, -14, 0) : 0.0f;
            gr.data[i] = i % 5 ? rand_val(&g, &gr.fmt, -16, -2) : 0.0f;
        }
        float *w0 = malloc(n * sizeof *w0);
        memcpy(w0, w.data, n * sizeof *w0);
        emu_stats st;
        emu_stats_init(&st);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 77);
        emu_rounding rnd = test_rne;
        ctx.stats = &st;
        rnd.mode = modes[mi];
        rnd.sr_bits = 5;
        emu_sgd_opts o = { .lr = 0x1p-4f, .momentum = 0.9f };
        ck_assert_int_eq(emu_t_sgd_update(&ctx, "s", &w, &v, &gr, &o, &rnd), 0);
        uint64_t adds = 0, absorbed = 0;
        for (size_t i = 0; i < n; i++)
            if (v.data[i] != 0.0f) {
                adds++;
                absorbed += w.data[i] == w0[i];
            }
        const emu_site *s = emu_stats_find_name(&st, "s");
        EXPECT(s->total.adds == adds && s->total.absorbed == absorbed,
               "mode %s: counted adds %llu absorbed %llu, actual %llu %llu",
               emu_rnd_name(modes[mi]), (unsigned long long)s->total.adds,
               (unsigned long long)s->total.absorbed,
               (unsigned long long)adds, (unsigned long long)absorbed);
        EXPECT(absorbed > 0 && absorbed < adds, "mode %s: degenerate data "
               "(%llu of %llu absorbed)", emu_rnd_name(modes[mi]),
               (unsigned long long)absorbed, (unsigned long long)adds);
        free(w0);
        emu_stats_free(&st);
        emu_tensor_free(&w);
        emu_tensor_free(&v);
        emu_tensor_free(&gr);
    }
}
END_TEST

/* The lost-bits bin of one weight update s -> s_new by t (binary16
 * weights), from emu/accum.h's words with frexp: the bits of t from its
 * lowest set bit up to the lower of its leading bit and 2^(q-1), q the
 * quantum exponent of binary16 at |s_new|; an absorbed update in the last
 * bin. */
static int lost_bin(double s, double t, double s_new)
{
    if (t != 0.0 && s_new == s)
        return EMU_LOST_BINS - 1;
    if (t == 0.0 || !isfinite(t) || !isfinite(s_new))
        return 0;
    int et;
    double m = frexp(fabs(t), &et);          /* |t| = m 2^et, m in [1/2, 1) */
    uint64_t M = (uint64_t)ldexp(m, 53);     /* t = M 2^(et - 53)           */
    int lsb = et - 53;
    while (!(M & 1)) {
        M >>= 1;
        lsb++;
    }
    int es = 0;
    if (s_new != 0.0)
        frexp(s_new, &es);
    const int q = s_new != 0.0 && es - 1 >= -14 ? es - 1 - 10 : -24;
    const int top = et - 1 < q - 1 ? et - 1 : q - 1;
    const int n = top - lsb + 1;
    return n < 0 ? 0 : n > 64 ? 64 : n;
}

/* The choke point counts the swamping of a weight update from the weights
 * it rounds: adds, absorbed and every lost-bits bin equal a recomputation
 * from the old weights, the stored new ones and the update lr * v' (exact
 * in binary64), in every mode; and Adam's absorbed updates are the
 * weights that did not move although m' != 0. */
START_TEST(swamp_from_commit)
{
    test_rng g = test_rng_make(0x5a3b);
    const size_t n = 2000;
    const emu_rnd modes[] = { EMU_RNE, EMU_RZ, EMU_RD, EMU_RS, EMU_RS_BITS };
    for (int mi = 0; mi < 5; mi++) {
        emu_tensor w = mk("w", "binary16", n), v = mk("v", "binary32", n);
        emu_tensor gr = mk("g", "binary32", n), m = mk("m", "binary32", n);
        emu_tensor v2 = mk("v2", "binary32", n);
        for (size_t i = 0; i < n; i++) {
            w.data[i] = i % 7 ? rand_val(&g, &w.fmt, -16, 3) : 0.0f;
            v.data[i] = i % 5 ? rand_val(&g, &v.fmt, -20, 0) : 0.0f;
            gr.data[i] = i % 5 ? rand_val(&g, &gr.fmt, -24, -2) : 0.0f;
        }
        float *w0 = malloc(n * sizeof *w0);
        ck_assert(w0);
        memcpy(w0, w.data, n * sizeof *w0);
        emu_stats st;
        emu_stats_init(&st);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 91);
        emu_rounding rnd = test_rne;
        ctx.stats = &st;
        rnd.mode = modes[mi];
        rnd.sr_bits = 7;
        const float lr = 0x1.8p-5f;
        emu_sgd_opts o = { .lr = lr, .momentum = 0.9f };
        ck_assert_int_eq(emu_t_sgd_update(&ctx, "s", &w, &v, &gr, &o, &rnd), 0);
        uint64_t adds = 0, absorbed = 0, lost[EMU_LOST_BINS] = { 0 };
        for (size_t i = 0; i < n; i++) {
            const double t = -((double)lr * v.data[i]); /* exact */
            if (t == 0.0)
                continue;
            adds++;
            absorbed += w.data[i] == w0[i];
            lost[lost_bin(w0[i], t, w.data[i])]++;
        }
        const emu_site *s = emu_stats_find_name(&st, "s");
        EXPECT(s->total.adds == adds && s->total.absorbed == absorbed &&
               !memcmp(s->total.lost_bits, lost, sizeof lost),
               "SGD, mode %s: counted adds %llu absorbed %llu, actual %llu "
               "%llu%s", emu_rnd_name(modes[mi]),
               (unsigned long long)s->total.adds,
               (unsigned long long)s->total.absorbed, (unsigned long long)adds,
               (unsigned long long)absorbed,
               memcmp(s->total.lost_bits, lost, sizeof lost)
                   ? "; lost-bits bins differ" : "");
        EXPECT(absorbed > 0 && absorbed < adds, "mode %s: degenerate data "
               "(%llu of %llu absorbed)", emu_rnd_name(modes[mi]),
               (unsigned long long)absorbed, (unsigned long long)adds);

        /* Adam on the same weights */
        memcpy(w0, w.data, n * sizeof *w0);
        emu_adam_opts ao = { .lr = 0x1p-10f, .beta1 = 0.9f, .beta2 = 0.999f,
                             .eps = 1e-8f, .t = 1 };
        ck_assert_int_eq(emu_t_adam_update(&ctx, "a", &w, &m, &v2, &gr, &ao,
                                           &rnd), 0);
        adds = absorbed = 0;
        for (size_t i = 0; i < n; i++)
            if (m.data[i] != 0.0f) {
                adds++;
                absorbed += w.data[i] == w0[i];
            }
        s = emu_stats_find_name(&st, "a");
        EXPECT(s->total.adds == adds && s->total.absorbed == absorbed &&
               absorbed > 0 && absorbed < adds,
               "Adam, mode %s: counted adds %llu absorbed %llu, actual %llu "
               "%llu", emu_rnd_name(modes[mi]),
               (unsigned long long)s->total.adds,
               (unsigned long long)s->total.absorbed, (unsigned long long)adds,
               (unsigned long long)absorbed);
        free(w0);
        emu_stats_free(&st);
        emu_tensor_free(&w);
        emu_tensor_free(&v);
        emu_tensor_free(&gr);
        emu_tensor_free(&m);
        emu_tensor_free(&v2);
    }
}
END_TEST

/* NaN: a NaN gradient propagates; inf - inf is produced. */
START_TEST(nan_accounting)
{
    emu_tensor w = mk("w", "binary16", 3), gr = mk("g", "binary32", 3);
    w.data[0] = 1.0f;
    gr.data[0] = NAN;
    w.data[1] = INFINITY;
    gr.data[1] = -INFINITY; /* w - lr g = inf + inf = inf */
    w.data[2] = INFINITY;
    gr.data[2] = INFINITY;  /* inf - inf */
    emu_stats st;
    emu_stats_init(&st);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ctx.stats = &st;
    emu_sgd_opts o = { .lr = 1.0f };
    ck_assert_int_eq(emu_t_sgd_update(&ctx, "s", &w, NULL, &gr, &o, &test_rne),
                     0);
    ck_assert(isnan(w.data[0]));
    ck_assert(w.data[1] == INFINITY);
    ck_assert(isnan(w.data[2]));
    const emu_site *s = emu_stats_find_name(&st, "s");
    EXPECT(s->total.nan == 2 && s->total.nan_produced == 1,
           "nan %llu produced %llu", (unsigned long long)s->total.nan,
           (unsigned long long)s->total.nan_produced);
    emu_stats_free(&st);
    emu_tensor_free(&w);
    emu_tensor_free(&gr);
}
END_TEST

/* The two cases below: w = g = inf and v = 0 but for v[0] = NaN when
 * with_nan, one SGD step of lr 1 under `momentum`; the weights' NaN
 * provenance (element 1's inf - inf is produced, element 0's NaN only
 * when its old velocity held none), and under momentum the velocity's
 * own commit, which sees the old values. */
static void sgd_nan_provenance(float momentum)
{
    for (int with_nan = 0; with_nan < 2; with_nan++) {
        emu_tensor w = mk("w", "binary32", 2), v = mk("v", "binary32", 2),
                   gr = mk("g", "binary32", 2);
        for (int i = 0; i < 2; i++) {
            w.data[i] = INFINITY;
            gr.data[i] = INFINITY;
            v.data[i] = 0.0f;
        }
        if (with_nan)
            v.data[0] = NAN;
        emu_stats st;
        emu_stats_init(&st);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        ctx.stats = &st;
        emu_sgd_opts o = { .lr = 1.0f, .momentum = momentum };
        ck_assert_int_eq(emu_t_sgd_update(&ctx, "s", &w, &v, &gr, &o,
                                          &test_rne), 0);
        ck_assert(with_nan && momentum != 0.0f ? isnan(v.data[0])
                                               : v.data[0] == INFINITY);
        ck_assert(v.data[1] == INFINITY);
        ck_assert(isnan(w.data[0]) && isnan(w.data[1]));
        const emu_site *s = emu_stats_find_name(&st, "s");
        EXPECT(s->total.nan == 2 &&
                   s->total.nan_produced == (with_nan ? 1u : 2u),
               "old NaN %d: nan %llu produced %llu", with_nan,
               (unsigned long long)s->total.nan,
               (unsigned long long)s->total.nan_produced);
        if (momentum != 0.0f) {
            const emu_site *sv = emu_stats_find_name(&st, "s.v");
            EXPECT(sv && sv->total.nan == (with_nan ? 1u : 0u) &&
                       sv->total.nan_produced == 0,
                   "velocity: nan %llu produced %llu",
                   sv ? (unsigned long long)sv->total.nan : 0ull,
                   sv ? (unsigned long long)sv->total.nan_produced : 0ull);
        }
        emu_stats_free(&st);
        emu_tensor_free(&w);
        emu_tensor_free(&v);
        emu_tensor_free(&gr);
    }
}

/* NaN provenance of the weights under momentum: an old velocity that was
 * NaN still counts as a NaN input after the velocity commit overwrote it.
 * With zero momentum the old velocity drops out of the new one (g = inf
 * gives v = inf), so only its old value tells element 0's NaN (inf - inf)
 * from element 1's, which is produced; with no NaN among the old
 * velocities emu_t_sgd_update reads v in place instead of a copy. */
START_TEST(nan_accounting_momentum)
{
    sgd_nan_provenance(0.0f);
}
END_TEST

/* The same under momentum, where emu_t_sgd_update reads v in place even
 * with a NaN among the old velocities: the NaN carries into the new
 * velocity, so element 0's weight NaN (inf - NaN) still counts as passed
 * on and element 1's (inf - inf) as produced, and the velocity's own
 * commit sees the old values. */
START_TEST(nan_accounting_momentum_in_place)
{
    sgd_nan_provenance(0.5f);
}
END_TEST

/* ---- refusals ------------------------------------------------------------ */

static void expect_fail(int rc, const emu_ctx *ctx, const char *needle)
{
    EXPECT(rc == -1, "expected a refusal mentioning '%s'", needle);
    EXPECT(strstr(ctx->err.message, needle) != NULL,
           "error '%s' does not mention '%s'", ctx->err.message, needle);
}

START_TEST(bad_input)
{
    emu_tensor w = mk("w", "binary16", 6), v = mk("v", "binary16", 6);
    emu_tensor m = mk("m", "binary16", 6), gr = mk("g", "binary32", 6);
    emu_tensor g5 = mk("g5", "binary32", 5);
    for (size_t i = 0; i < 6; i++) {
        w.data[i] = 1.0f + (float)i;
        v.data[i] = 2.0f;
        m.data[i] = 3.0f;
        gr.data[i] = 0.5f;
    }
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_sgd_opts so = { .lr = 0.1f, .momentum = 0.9f };
    expect_fail(emu_t_sgd_update(&ctx, "s", &w, &v, &g5, &so, &test_rne), &ctx,
                "shape mismatch");
    expect_fail(emu_t_sgd_update(&ctx, "s", &w, NULL, &gr, &so, &test_rne),
                &ctx, "velocity");
    expect_fail(emu_t_sgd_update(&ctx, "s", &w, &w, &gr, &so, &test_rne), &ctx,
                "share storage");
    expect_fail(emu_t_sgd_update(&ctx, "s", &w, &v, &gr, NULL, &test_rne), &ctx,
                "NULL");
    emu_tensor wide = gr;
    wide.fmt = *test_format("binary64");
    expect_fail(emu_t_sgd_update(&ctx, "s", &w, &v, &wide, &so, &test_rne),
                &ctx, "carrier");
    emu_adam_opts ao = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                         .eps = 1e-8f, .t = 0 };
    expect_fail(emu_t_adam_update(&ctx, "a", &w, &m, &v, &gr, &ao, &test_rne),
                &ctx, "steps count from 1");
    ao.t = 1;
    ao.beta2 = 1.0f;
    expect_fail(emu_t_adam_update(&ctx, "a", &w, &m, &v, &gr, &ao, &test_rne),
                &ctx, "[0, 1)");
    ao.beta2 = 0.999f;
    expect_fail(emu_t_adam_update(&ctx, "a", &w, &m, &m, &gr, &ao, &test_rne),
                &ctx, "share storage");
    expect_fail(emu_t_adam_update(&ctx, "a", &w, &m, &v, &g5, &ao, &test_rne),
                &ctx, "shape mismatch");
    /* the weights' rounding has no default; a state rounding, if given,
     * must be one too */
    expect_fail(emu_t_sgd_update(&ctx, "s", &w, &v, &gr, &so, NULL), &ctx,
                "no rounding");
    expect_fail(emu_t_adam_update(&ctx, "a", &w, &m, &v, &gr, &ao, NULL), &ctx,
                "no rounding");
    const emu_rounding bad = { .mode = (emu_rnd)99 };
    emu_sgd_opts sb = so;
    sb.state_rnd = &bad;
    expect_fail(emu_t_sgd_update(&ctx, "s", &w, &v, &gr, &sb, &test_rne), &ctx,
                "unknown rounding mode");
    for (size_t i = 0; i < 6; i++)
        EXPECT(w.data[i] == 1.0f + (float)i && v.data[i] == 2.0f &&
               m.data[i] == 3.0f, "an output was touched at %zu", i);
    ck_assert_uint_eq(ctx.op_index, 0);
    emu_tensor_free(&w);
    emu_tensor_free(&v);
    emu_tensor_free(&m);
    emu_tensor_free(&gr);
    emu_tensor_free(&g5);
}
END_TEST

/* ---- the fast sums against their reference ------------------------------- */

/* Same bits (so -0 != +0, and NaNs compared by payload). */
static bool same_bits(double a, double b)
{
    return emu_osum_bits(a) == emu_osum_bits(b);
}

/* A binary32 value of the kind the updates see, exponents in a window of
 * 2^[-w, w] so that terms overlap and cancel; zeros of both signs. */
static float rand_term32(test_rng *g, int w)
{
    switch (test_below(g, 16)) {
    case 0:
        return 0.0f;
    case 1:
        return -0.0f;
    default:
        break;
    }
    int e = (int)test_below(g, (uint64_t)(2 * w + 1)) - w;
    uint32_t bits = (uint32_t)test_next(g);
    /* short significands now and then: exact cancellations and ties */
    int keep = test_below(g, 3) == 0 ? 1 + (int)test_below(g, 4) : 24;
    double m = 1.0 + (double)((bits >> 9) >> (23 - (keep - 1))) *
                         ldexp(1.0, -(keep - 1));
    double x = ldexp(m, e);
    return (float)((bits & 1) ? -x : x);
}

/* a term of a sum: a binary32 value, a product of two, or a TwoProduct
 * pair's error; now and then the negation of an earlier term. */
static double rand_term(test_rng *g, const double *prev, int k)
{
    if (k > 0 && test_below(g, 6) == 0)
        return -prev[test_below(g, (uint64_t)k)];
    const int w = test_below(g, 2) ? 4 : 40;
    double a = rand_term32(g, w);
    if (test_below(g, 2))
        a *= rand_term32(g, w);
    return a;
}

static void expect_same_pair(double hi, double lo, double rhi, double rlo,
                             const char *what, const double *t, int n)
{
    EXPECT(same_bits(hi, rhi) && same_bits(lo, rlo),
           "%s: %a + %a, reference %a + %a (terms %a %a %a %a)", what, hi,
           lo, rhi, rlo, t[0], t[1], n > 2 ? t[2] : 0.0, n > 3 ? t[3] : 0.0);
}

START_TEST(fast_sums_match_reference)
{
    test_rng g = test_rng_make(0xf5);
    const long n = test_scaled(2000000, 200000);
    for (long it = 0; it < n; it++) {
        double t[4], hi, lo, rhi, rlo;
        for (int k = 0; k < 4; k++)
            t[k] = rand_term(&g, t, k);
        /* two terms and a +0 */
        double t2[3] = { t[0], t[1], 0.0 };
        emu_osum2z(t[0], t[1], &hi, &lo);
        emu_exact_sum_ref(t2, 3, &rhi, &rlo);
        expect_same_pair(hi, lo, rhi, rlo, "sum2z", t2, 3);
        emu_osum3(t[0], t[1], t[2], &hi, &lo);
        emu_exact_sum_ref(t, 3, &rhi, &rlo);
        expect_same_pair(hi, lo, rhi, rlo, "sum3", t, 3);
        emu_osum4(t[0], t[1], t[2], t[3], &hi, &lo);
        emu_exact_sum_ref(t, 4, &rhi, &rlo);
        expect_same_pair(hi, lo, rhi, rlo, "sum4", t, 4);
        /* Dekker's product against fma's, as the updates use it: a
         * binary64 coefficient (1 - beta, lr wd) times a product */
        double c = 1.0 - (double)rand_term32(&g, 30);
        if (test_below(&g, 2))
            c = (double)rand_term32(&g, 60) * (double)rand_term32(&g, 60);
        const double x = t[test_below(&g, 4)];
        double ch, cl, p, pe;
        emu_osum_split(c, &ch, &cl);
        emu_osum_two_prod(c, ch, cl, x, &p, &pe);
        const double rp = c * x, rpe = fma(c, x, -rp);
        EXPECT(same_bits(p, rp) && same_bits(pe, rpe),
               "two_prod %a * %a: %a + %a, fma %a + %a", c, x, p, pe, rp, rpe);
    }
}
END_TEST

/* The ops' pre-rounding values, seen by an observer, are the reference's
 * exact sums of their terms, bit for bit: the library's own copies of the
 * fast passes, infinities and NaNs (the reference's second pass)
 * included. */
typedef struct seen_pairs {
    double *hi[4], *lo[4];
    int count;
    size_t n;
} seen_pairs;

static void see_pairs(void *user, const emu_op_event *ev)
{
    seen_pairs *s = user;
    if (s->count >= 4 || !ev->lo)
        return;
    memcpy(s->hi[s->count], ev->hi, s->n * sizeof(double));
    memcpy(s->lo[s->count], ev->lo, s->n * sizeof(double));
    s->count++;
}

START_TEST(update_pairs_match_reference)
{
    enum { N = 4099 }; /* not a multiple of any vector width */
    test_rng g = test_rng_make(0x5e1);
    seen_pairs seen = { .n = N };
    for (int k = 0; k < 4; k++) {
        seen.hi[k] = malloc(N * sizeof(double));
        seen.lo[k] = malloc(N * sizeof(double));
    }
    emu_tensor w = mk("w", "binary32", N), v = mk("v", "binary32", N),
               m = mk("m", "binary32", N), gr = mk("g", "binary32", N);
    for (int round = 0; round < 12; round++) {
        const bool specials = round % 2;
        float w0[N], v0[N], m0[N], g0[N];
        for (size_t i = 0; i < N; i++) {
            w0[i] = rand_term32(&g, 8);
            v0[i] = rand_term32(&g, 8);
            m0[i] = rand_term32(&g, 8);
            g0[i] = rand_term32(&g, 8);
            if (specials && test_below(&g, 50) == 0) {
                const float sp[] = { INFINITY, -INFINITY, NAN };
                float *which[] = { &w0[i], &v0[i], &m0[i], &g0[i] };
                *which[test_below(&g, 4)] = sp[test_below(&g, 3)];
            }
        }
        memcpy(w.data, w0, sizeof w0);
        memcpy(v.data, v0, sizeof v0);
        memcpy(m.data, m0, sizeof m0);
        memcpy(gr.data, g0, sizeof g0);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 7);
        ctx.observer = see_pairs;
        ctx.observer_user = &seen;
        seen.count = 0;
        const double lr = 0x1p-5, wd = (round / 2) % 3 == 0 ? 0.0 : 0x1.8p-9;
        const double mom = (round / 2) % 3 == 2 ? 0.0 : 0.875;
        double hi, lo;
        if (round < 6) {
            const bool with_v = round / 2 != 1;
            emu_sgd_opts o = { .lr = (float)lr, .momentum = with_v ? (float)mom : 0.0f,
                               .weight_decay = (float)wd };
            ck_assert_int_eq(emu_t_sgd_update(&ctx, "s", &w, with_v ? &v : NULL,
                                              &gr, &o, &test_rne), 0);
            ck_assert_int_eq(seen.count, with_v ? 2 : 1);
            for (size_t i = 0; i < N; i++) {
                if (with_v) {
                    double t[3] = { mom == 0.0 ? 0.0 : mom * v0[i], g0[i],
                                    wd == 0.0 ? 0.0 : wd * w0[i] };
                    emu_exact_sum_ref(t, 3, &hi, &lo);
                    expect_same_pair(seen.hi[0][i], seen.lo[0][i], hi, lo,
                                     "sgd v", t, 3);
                    /* the weights: TwoSum of w0 and -(lr v), v as stored */
                    const double tw = -(lr * (double)v.data[i]);
                    const double s_ = w0[i] + tw, bv = s_ - w0[i];
                    const double lw = (w0[i] - (s_ - bv)) + (tw - bv);
                    double tt[2] = { w0[i], tw };
                    expect_same_pair(seen.hi[1][i], seen.lo[1][i], s_, lw,
                                     "sgd w", tt, 2);
                } else {
                    const double lrwd = lr * wd;
                    double p = 0.0, pe = 0.0;
                    if (lrwd != 0.0) {
                        p = lrwd * w0[i];
                        pe = fma(lrwd, w0[i], -p);
                    }
                    double t[4] = { -(lr * g0[i]), -p, -pe, w0[i] };
                    emu_exact_sum_ref(t, 4, &hi, &lo);
                    expect_same_pair(seen.hi[0][i], seen.lo[0][i], hi, lo,
                                     "sgd plain w", t, 4);
                }
            }
        } else {
            const float b1 = round % 4 < 2 ? 0.9f : 0.0f, b2 = 0.999f;
            emu_adam_opts o = { .lr = 1e-3f, .beta1 = b1, .beta2 = b2,
                                .eps = 1e-8f, .weight_decay = (float)wd,
                                .t = 3 };
            ck_assert_int_eq(emu_t_adam_update(&ctx, "a", &w, &m, &v, &gr, &o,
                                               &test_rne), 0);
            ck_assert_int_eq(seen.count, 3);
            for (size_t i = 0; i < N; i++) {
                const double gi = g0[i];
                for (int k = 0; k < 2; k++) {
                    const double beta = k ? b2 : b1, c = 1.0 - beta;
                    const double s = k ? v0[i] : m0[i], x = k ? gi * gi : gi;
                    double t[3] = { beta == 0.0 ? 0.0 : beta * s, c * x, 0.0 };
                    t[2] = fma(c, x, -t[1]);
                    emu_exact_sum_ref(t, 3, &hi, &lo);
                    expect_same_pair(seen.hi[k][i], seen.lo[k][i], hi, lo,
                                     k ? "adam v" : "adam m", t, 3);
                }
            }
        }
    }
    for (int k = 0; k < 4; k++) {
        free(seen.hi[k]);
        free(seen.lo[k]);
    }
    emu_tensor_free(&w);
    emu_tensor_free(&v);
    emu_tensor_free(&m);
    emu_tensor_free(&gr);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_optim");
    TCase *tc = tcase_create("optim");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sgd_vs_mpfr);
    tcase_add_test(tc, sgd_tie_broken_below_binary64);
    tcase_add_test(tc, adam_vs_mpfr);
    tcase_add_test(tc, reference_callbacks);
    tcase_add_test(tc, absorbed_hand_made);
    tcase_add_test(tc, absorbed_stochastic);
    tcase_add_test(tc, absorbed_random);
    tcase_add_test(tc, swamp_from_commit);
    tcase_add_test(tc, nan_accounting);
    tcase_add_test(tc, nan_accounting_momentum);
    tcase_add_test(tc, nan_accounting_momentum_in_place);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, fast_sums_match_reference);
    tcase_add_test(tc, update_pairs_match_reference);
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
