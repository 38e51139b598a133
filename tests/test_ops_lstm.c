/*
 * test_ops_lstm.c — the LSTM layer (emu_t_lstm, emu_t_lstm_backward,
 * libemu/ops_lstm.c).
 *
 *  1. binary32 forward against a binary64 evaluation of the recurrence,
 *     under the fast, sequential and exact accumulators, with and without
 *     initial state and biases.  Bound 4e-7 (1 + |v|): every stored value
 *     is within 2^-24 (6e-8) relative of its binary64 counterpart computed
 *     from the same (rounded) inputs, and the recurrence over T = 6 steps
 *     with gates in (0, 1) and |w| <= 1/2 amplifies an input error at
 *     most a few times (measured: at most 5.6e-8).
 *  2. Every gradient (dx, dw_ih, dw_hh, db_ih, db_hh) of L = sum r y
 *     against central differences of the binary64 recurrence (step 2^-12:
 *     truncation error ~2^-24 |L'''|, cancellation ~2^-53 / 2^-12, both
 *     far below the bound).  The op runs in binary32 with the exact
 *     accumulator; its gradients then differ from the true ones only by
 *     the propagated binary32 roundings of the stored quantities (a few
 *     2^-24 relative per quantity, through sums of at most B T = 15
 *     terms of magnitude <= 1 here): bound 5e-7 (1 + |g|), 10 times the
 *     measured 5e-8, while a missing term of the recurrence (dc through
 *     f, dh through W_hh) moves gradients by 1e-2 or more (dropping dc's
 *     f term: 0.15).
 *  3. binary16 (cell state binary32) and bfloat16: forward and backward
 *     with the exact accumulator, every saved value and gradient bit for
 *     bit against a step-by-step MPFR computation that rounds each
 *     quantity once at the documented point (the header of ops_lstm.c).
 *  4. Every site sampled against MPFR through the choke point: with the
 *     exact accumulator each output is within half an ulp (plus the
 *     binary64 evaluations' few 2^-53) of its exact value; the fast
 *     model's pre-activations within half an ulp and the recurrent sum's
 *     binary32 error.
 *  5. PyTorch (torch.nn.LSTM, fp32, batch_first) forward and gradients,
 *     through tests/lstm_torch.py; skipped (a note, no failure) without
 *     torch.  Bound 5e-6 (1 + |v|): both sides are binary32 computations
 *     of the same formulas that differ in summation order and in
 *     rounding tanh(c) before the product with o (about 2^-24 relative
 *     each); the weight gradients sum B T = 48 terms in binary32, whose
 *     order differs (measured: 8e-8 forward, 1.6e-6 for dw_ih under the
 *     sequential binary32 accumulator, 6e-7 under the fast one).
 *  6. Bad arguments: EMU_EINVAL naming the tensor, outputs untouched.
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp */

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

typedef struct lstm_case {
    size_t B, T, I, H;
    bool state, bias;
    emu_tensor x, y, gates, c, h_n, c_n, h0, c0, w_ih, w_hh, b_ih, b_hh;
    emu_tensor dy, dx, dw_ih, dw_hh, db_ih, db_hh;
} lstm_case;

static emu_tensor mk(const char *name, emu_role role, const emu_format *f,
                     size_t a, size_t b, size_t c)
{
    emu_tensor t;
    emu_error e;
    if (emu_tensor_alloc4(&t, name, role, f, a, b, c, 0, &e))
        ck_abort_msg("alloc %s: %s", name, e.message);
    return t;
}

/* s k / 128, |k| <= 128: exact in bfloat16, binary16 and binary32. */
static float grid(test_rng *g, double s)
{
    return (float)(s * ((double)test_below(g, 257) - 128.0) / 128.0);
}

/* fa: activations and their gradients; fc: the cell state; fw: weights
 * and their gradients. */
static void case_make(lstm_case *k, size_t B, size_t T, size_t I, size_t H,
                      const emu_format *fa, const emu_format *fc,
                      const emu_format *fw, bool state, bool bias, test_rng *g)
{
    memset(k, 0, sizeof *k);
    k->B = B, k->T = T, k->I = I, k->H = H;
    k->state = state, k->bias = bias;
    const size_t G = 4 * H;
    k->x = mk("x", EMU_ROLE_ACTIVATION, fa, B, T, I);
    k->y = mk("y", EMU_ROLE_ACTIVATION, fa, B, T, H);
    k->gates = mk("gates", EMU_ROLE_ACTIVATION, fa, B, T, G);
    k->c = mk("c", EMU_ROLE_ACTIVATION, fc, B, T, H);
    k->h_n = mk("h_n", EMU_ROLE_ACTIVATION, fa, B, H, 0);
    k->c_n = mk("c_n", EMU_ROLE_ACTIVATION, fc, B, H, 0);
    k->h0 = mk("h0", EMU_ROLE_ACTIVATION, fa, B, H, 0);
    k->c0 = mk("c0", EMU_ROLE_ACTIVATION, fc, B, H, 0);
    k->w_ih = mk("w_ih", EMU_ROLE_WEIGHT, fw, G, I, 0);
    k->w_hh = mk("w_hh", EMU_ROLE_WEIGHT, fw, G, H, 0);
    k->b_ih = mk("b_ih", EMU_ROLE_WEIGHT, fw, G, 0, 0);
    k->b_hh = mk("b_hh", EMU_ROLE_WEIGHT, fw, G, 0, 0);
    k->dy = mk("dy", EMU_ROLE_ACT_GRAD, fa, B, T, H);
    k->dx = mk("dx", EMU_ROLE_ACT_GRAD, fa, B, T, I);
    k->dw_ih = mk("dw_ih", EMU_ROLE_WEIGHT_GRAD, fw, G, I, 0);
    k->dw_hh = mk("dw_hh", EMU_ROLE_WEIGHT_GRAD, fw, G, H, 0);
    k->db_ih = mk("db_ih", EMU_ROLE_WEIGHT_GRAD, fw, G, 0, 0);
    k->db_hh = mk("db_hh", EMU_ROLE_WEIGHT_GRAD, fw, G, 0, 0);
    emu_tensor *in[] = { &k->x, &k->h0, &k->c0, &k->dy };
    const double sc[] = { 1.0, 0.5, 1.0, 1.0 };
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < in[t]->n; i++)
            in[t]->data[i] = grid(g, sc[t]);
    emu_tensor *w[] = { &k->w_ih, &k->w_hh, &k->b_ih, &k->b_hh };
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < w[t]->n; i++)
            w[t]->data[i] = grid(g, 0.5);
}

static void case_free(lstm_case *k)
{
    emu_tensor *ts[] = { &k->x, &k->y, &k->gates, &k->c, &k->h_n, &k->c_n,
                         &k->h0, &k->c0, &k->w_ih, &k->w_hh, &k->b_ih,
                         &k->b_hh, &k->dy, &k->dx, &k->dw_ih, &k->dw_hh,
                         &k->db_ih, &k->db_hh };
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        emu_tensor_free(ts[i]);
}

static emu_lstm_weights weights_of(const lstm_case *k)
{
    emu_lstm_weights w = { &k->w_ih, &k->w_hh, k->bias ? &k->b_ih : NULL,
                           k->bias ? &k->b_hh : NULL };
    return w;
}

static void forward(emu_ctx *ctx, lstm_case *k, const emu_lstm_opts *o)
{
    emu_lstm_weights w = weights_of(k);
    if (emu_t_lstm(ctx, "lstm", &k->y, &k->gates, &k->c, &k->h_n, &k->c_n,
                   &k->x, k->state ? &k->h0 : NULL, k->state ? &k->c0 : NULL,
                   &w, o, &test_rne))
        ck_abort_msg("forward: %s", ctx->err.message);
}

static void backward(emu_ctx *ctx, lstm_case *k, const emu_lstm_opts *o)
{
    emu_lstm_weights w = weights_of(k);
    emu_lstm_grads gr = { &k->dw_ih, &k->dw_hh, k->bias ? &k->db_ih : NULL,
                          k->bias ? &k->db_hh : NULL };
    if (emu_t_lstm_backward(ctx, "lstm", &k->dx, &gr, &k->dy, &k->x, &k->y,
                            &k->gates, &k->c, k->state ? &k->h0 : NULL,
                            k->state ? &k->c0 : NULL, &w, o, &test_rne))
        ck_abort_msg("backward: %s", ctx->err.message);
}

static emu_accum accum_of(emu_accum_kind kind)
{
    emu_accum a;
    emu_accum_default(&a);
    a.kind = kind;
    return a;
}

/* ---- the binary64 recurrence --------------------------------------------- */

/* Parameters as doubles, perturbed by the finite differences. */
typedef struct d64 {
    double *x, *w_ih, *w_hh, *b_ih, *b_hh, *h0, *c0;
} d64;

static double *dup(const emu_tensor *t)
{
    double *d = malloc(t->n * sizeof *d);
    for (size_t i = 0; i < t->n; i++)
        d[i] = t->data[i];
    return d;
}

static d64 d64_make(const lstm_case *k)
{
    d64 p = { dup(&k->x), dup(&k->w_ih), dup(&k->w_hh), dup(&k->b_ih),
              dup(&k->b_hh), dup(&k->h0), dup(&k->c0) };
    return p;
}

static void d64_free(d64 *p)
{
    free(p->x), free(p->w_ih), free(p->w_hh), free(p->b_ih), free(p->b_hh);
    free(p->h0), free(p->c0);
}

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

/* y (B, T, H), c (B, T, H), act (B, T, 4H) of the recurrence in binary64;
 * returns L = sum r y. */
static double ref64(const lstm_case *k, const d64 *p, double *y, double *c,
                    double *act)
{
    const size_t B = k->B, T = k->T, I = k->I, H = k->H, G = 4 * H;
    double L = 0.0;
    double *a = malloc(G * sizeof *a);
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            for (size_t j = 0; j < G; j++) {
                double s = k->bias ? p->b_ih[j] + p->b_hh[j] : 0.0;
                for (size_t q = 0; q < I; q++)
                    s += p->x[(b * T + t) * I + q] * p->w_ih[j * I + q];
                for (size_t q = 0; q < H; q++) {
                    double h = t ? y[(b * T + t - 1) * H + q]
                                 : k->state ? p->h0[b * H + q] : 0.0;
                    s += h * p->w_hh[j * H + q];
                }
                a[j] = j / H == 2 ? tanh(s) : sigm(s);
                if (act)
                    act[(b * T + t) * G + j] = a[j];
            }
            for (size_t q = 0; q < H; q++) {
                double cp = t ? c[(b * T + t - 1) * H + q]
                              : k->state ? p->c0[b * H + q] : 0.0;
                double cv = a[H + q] * cp + a[q] * a[2 * H + q];
                double hv = a[3 * H + q] * tanh(cv);
                c[(b * T + t) * H + q] = cv;
                y[(b * T + t) * H + q] = hv;
                L += k->dy.data[(b * T + t) * H + q] * hv;
            }
        }
    free(a);
    return L;
}

/* max |t - ref| / (1 + |ref|) */
static double max_rel(const emu_tensor *t, const double *ref)
{
    double m = 0.0;
    for (size_t i = 0; i < t->n; i++) {
        double e = fabs(t->data[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(e <= m))
            m = e;
    }
    return m;
}

/* ---- 1. binary32 against binary64 ---------------------------------------- */

START_TEST(binary32_against_binary64)
{
    test_rng g = test_rng_make(0x157);
    const emu_format *f32 = test_format("binary32");
    const emu_accum_kind kinds[] = { EMU_ACCUM_FAST, EMU_ACCUM_SEQUENTIAL,
                                     EMU_ACCUM_EXACT };
    for (int v = 0; v < 4; v++)
        for (int a = 0; a < 3; a++) {
            lstm_case k;
            case_make(&k, 3, 6, 4, 5, f32, f32, f32, v & 1, v & 2, &g);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 1);
            emu_accum acc = accum_of(kinds[a]);
            emu_lstm_opts o = { .accum = &acc };
            forward(&ctx, &k, &o);
            const size_t BTH = k.B * k.T * k.H;
            double *y = malloc(BTH * sizeof *y), *c = malloc(BTH * sizeof *c);
            double *act = malloc(4 * BTH * sizeof *act);
            d64 p = d64_make(&k);
            ref64(&k, &p, y, c, act);
            double e = max_rel(&k.y, y);
            double ec = max_rel(&k.c, c);
            double eg = max_rel(&k.gates, act);
            EXPECT(e < 4e-7 && ec < 4e-7 && eg < 4e-7,
                   "state %d bias %d accum %d: errors y %g c %g gates %g",
                   v & 1, !!(v & 2), a, e, ec, eg);
            /* the final state is the last step's */
            for (size_t b = 0; b < k.B; b++)
                for (size_t q = 0; q < k.H; q++) {
                    size_t i = (b * k.T + k.T - 1) * k.H + q;
                    EXPECT(test_same(k.h_n.data[b * k.H + q], k.y.data[i]) &&
                           test_same(k.c_n.data[b * k.H + q], k.c.data[i]),
                           "final state differs at (%zu, %zu)", b, q);
                }
            free(y), free(c), free(act);
            d64_free(&p);
            case_free(&k);
        }
}
END_TEST

/* ---- 2. gradients by finite differences ---------------------------------- */

/* Central differences of L over every element of v (n of them). */
static void fd_grad(const lstm_case *k, d64 *p, double *v, size_t n,
                    double *grad)
{
    const size_t BTH = k->B * k->T * k->H;
    double *y = malloc(BTH * sizeof *y), *c = malloc(BTH * sizeof *c);
    const double h = 0x1p-12;
    for (size_t i = 0; i < n; i++) {
        double keep = v[i];
        v[i] = keep + h;
        double lp = ref64(k, p, y, c, NULL);
        v[i] = keep - h;
        double lm = ref64(k, p, y, c, NULL);
        v[i] = keep;
        grad[i] = (lp - lm) / (2.0 * h);
    }
    free(y), free(c);
}

static double grad_err(const emu_tensor *t, const double *fd)
{
    double m = 0.0;
    for (size_t i = 0; i < t->n; i++) {
        double e = fabs(t->data[i] - fd[i]) / (1.0 + fabs(fd[i]));
        if (!(e <= m))
            m = e;
    }
    return m;
}

START_TEST(gradients_against_finite_differences)
{
    test_rng g = test_rng_make(0x158);
    const emu_format *f32 = test_format("binary32");
    for (int v = 0; v < 4; v++) {
        lstm_case k;
        case_make(&k, 3, 5, 4, 5, f32, f32, f32, v & 1, v & 2, &g);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        emu_accum acc = accum_of(EMU_ACCUM_EXACT);
        emu_lstm_opts o = { .accum = &acc };
        forward(&ctx, &k, &o);
        backward(&ctx, &k, &o);
        d64 p = d64_make(&k);
        struct {
            const char *name;
            const emu_tensor *t;
            double *v;
        } ps[] = { { "dx", &k.dx, p.x }, { "dw_ih", &k.dw_ih, p.w_ih },
                   { "dw_hh", &k.dw_hh, p.w_hh }, { "db_ih", &k.db_ih, p.b_ih },
                   { "db_hh", &k.db_hh, p.b_hh } };
        int np = k.bias ? 5 : 3;
        for (int q = 0; q < np; q++) {
            double *fd = malloc(ps[q].t->n * sizeof *fd);
            fd_grad(&k, &p, ps[q].v, ps[q].t->n, fd);
            double e = grad_err(ps[q].t, fd);
            EXPECT(e < 5e-7, "state %d bias %d: %s off by %g (relative to "
                   "1 + |g|)", v & 1, !!(v & 2), ps[q].name, e);
            free(fd);
        }
        d64_free(&p);
        case_free(&k);
    }
}
END_TEST

/* ---- 3. narrow formats, step by step in MPFR -------------------------------- */

enum { MP_PREC = 400 };

static double rd(const emu_format *f, mpfr_srcptr v)
{
    return emu_ref_round(f, v, &test_rne, NULL);
}

/* m = sum of a[i] b[i] (exact at MP_PREC for these few-bit values). */
static void mp_dot(mpfr_ptr m, const double *a, const double *b, size_t n,
                   size_t sa, size_t sb)
{
    mpfr_t t;
    mpfr_init2(t, MP_PREC);
    for (size_t i = 0; i < n; i++) {
        mpfr_set_d(t, a[i * sa], MPFR_RNDN);
        mpfr_mul_d(t, t, b[i * sb], MPFR_RNDN);
        mpfr_add(m, m, t, MPFR_RNDN);
    }
    mpfr_clear(t);
}

/* The documented computation, each quantity rounded once, all (b, t)
 * arrays batch-major; then compared bit for bit with the op's tensors. */
static void stepwise_check(lstm_case *k)
{
    const size_t B = k->B, T = k->T, I = k->I, H = k->H, G = 4 * H;
    const emu_format *fg = &k->gates.fmt, *fc = &k->c.fmt, *fy = &k->y.fmt;
    const emu_format *fd = &k->dy.fmt, *fx = &k->dx.fmt, *fw = &k->dw_ih.fmt;
    double *x = dup(&k->x), *wih = dup(&k->w_ih), *whh = dup(&k->w_hh);
    double *bih = dup(&k->b_ih), *bhh = dup(&k->b_hh), *dy = dup(&k->dy);
    double *act = calloc(B * T * G, sizeof *act), *c = calloc(B * T * H, sizeof *c);
    double *y = calloc(B * T * H, sizeof *y), *dg = calloc(B * T * G, sizeof *dg);
    double *hp = calloc(B * T * H, sizeof *hp), *cp = calloc(B * T * H, sizeof *cp);
    double *dh = calloc(H, sizeof *dh), *dc = calloc(B * T * H, sizeof *dc);
    mpfr_t m, t;
    mpfr_inits2(MP_PREC, m, t, (mpfr_ptr)0);
    for (size_t b = 0; b < B; b++)
        for (size_t s = 0; s < T; s++) {
            const size_t r = b * T + s;
            for (size_t q = 0; q < H; q++) {
                hp[r * H + q] = s ? y[(r - 1) * H + q]
                              : k->state ? k->h0.data[b * H + q] : 0.0;
                cp[r * H + q] = s ? c[(r - 1) * H + q]
                              : k->state ? k->c0.data[b * H + q] : 0.0;
            }
            for (size_t j = 0; j < G; j++) {
                mpfr_set_zero(m, 1);
                if (k->bias) {
                    mpfr_set_d(m, bih[j], MPFR_RNDN);
                    mpfr_add_d(m, m, bhh[j], MPFR_RNDN);
                }
                mp_dot(m, x + r * I, wih + j * I, I, 1, 1);
                mp_dot(m, hp + r * H, whh + j * H, H, 1, 1);
                double pre = rd(fg, m);
                mpfr_set_d(m, pre, MPFR_RNDN);
                if (j / H == 2) {
                    mpfr_tanh(m, m, MPFR_RNDN);
                } else {
                    mpfr_neg(m, m, MPFR_RNDN);
                    mpfr_exp(m, m, MPFR_RNDN);
                    mpfr_add_ui(m, m, 1, MPFR_RNDN);
                    mpfr_ui_div(m, 1, m, MPFR_RNDN);
                }
                act[r * G + j] = rd(fg, m);
            }
            const double *a = act + r * G;
            for (size_t q = 0; q < H; q++) {
                mpfr_set_d(m, a[H + q], MPFR_RNDN);
                mpfr_mul_d(m, m, cp[r * H + q], MPFR_RNDN);
                mpfr_set_d(t, a[q], MPFR_RNDN);
                mpfr_mul_d(t, t, a[2 * H + q], MPFR_RNDN);
                mpfr_add(m, m, t, MPFR_RNDN);
                c[r * H + q] = rd(fc, m);
                mpfr_set_d(m, c[r * H + q], MPFR_RNDN);
                mpfr_tanh(m, m, MPFR_RNDN);
                mpfr_mul_d(m, m, a[3 * H + q], MPFR_RNDN);
                y[r * H + q] = rd(fy, m);
            }
        }
    for (size_t i = 0; i < B * T * G; i++)
        EXPECT(test_same(k->gates.data[i], act[i]), "%s gates[%zu] = %a, "
               "expected %a", fg->name, i, k->gates.data[i], act[i]);
    for (size_t i = 0; i < B * T * H; i++)
        EXPECT(test_same(k->c.data[i], c[i]) && test_same(k->y.data[i], y[i]),
               "%s c/y [%zu] = %a %a, expected %a %a", fg->name, i,
               k->c.data[i], k->y.data[i], c[i], y[i]);

    /* backward, t = T-1 .. 0, per example */
    for (size_t b = 0; b < B; b++)
        for (size_t s = T; s-- > 0;) {
            const size_t r = b * T + s;
            const double *a = act + r * G;
            for (size_t q = 0; q < H; q++) {
                mpfr_set_d(m, dy[r * H + q], MPFR_RNDN);
                if (s + 1 < T)
                    mp_dot(m, dg + (r + 1) * G, whh + q, G, 1, H);
                dh[q] = rd(fd, m);
            }
            for (size_t q = 0; q < H; q++) {
                mpfr_set_d(t, c[r * H + q], MPFR_RNDN);
                mpfr_sech(t, t, MPFR_RNDN);
                mpfr_sqr(t, t, MPFR_RNDN);
                mpfr_mul_d(t, t, dh[q], MPFR_RNDN);
                mpfr_mul_d(m, t, a[3 * H + q], MPFR_RNDN);
                if (s + 1 < T) {
                    mpfr_set_d(t, dc[(r + 1) * H + q], MPFR_RNDN);
                    mpfr_mul_d(t, t, act[(r + 1) * G + H + q], MPFR_RNDN);
                    mpfr_add(m, m, t, MPFR_RNDN);
                }
                dc[r * H + q] = rd(fc, m);
            }
            for (size_t j = 0; j < G; j++) {
                const size_t q = j % H;
                const double gi = a[q], gf = a[H + q], gg = a[2 * H + q];
                const double go = a[3 * H + q], d = dc[r * H + q];
                switch (j / H) {
                case 0: /* dc g i (1 - i) */
                    mpfr_set_d(m, 1.0, MPFR_RNDN);
                    mpfr_sub_d(m, m, gi, MPFR_RNDN);
                    mpfr_mul_d(m, m, gi * gg, MPFR_RNDN); /* exact product */
                    mpfr_mul_d(m, m, d, MPFR_RNDN);
                    break;
                case 1: /* dc c_{t-1} f (1 - f) */
                    mpfr_set_d(m, 1.0, MPFR_RNDN);
                    mpfr_sub_d(m, m, gf, MPFR_RNDN);
                    mpfr_mul_d(m, m, gf, MPFR_RNDN);
                    mpfr_mul_d(m, m, cp[r * H + q], MPFR_RNDN);
                    mpfr_mul_d(m, m, d, MPFR_RNDN);
                    break;
                case 2: /* dc i (1 - g^2) */
                    mpfr_set_d(m, gg, MPFR_RNDN);
                    mpfr_sqr(m, m, MPFR_RNDN);
                    mpfr_ui_sub(m, 1, m, MPFR_RNDN);
                    mpfr_mul_d(m, m, gi, MPFR_RNDN);
                    mpfr_mul_d(m, m, d, MPFR_RNDN);
                    break;
                default: /* dh tanh(c) o (1 - o) */
                    mpfr_set_d(m, c[r * H + q], MPFR_RNDN);
                    mpfr_tanh(m, m, MPFR_RNDN);
                    mpfr_mul_d(m, m, dh[q], MPFR_RNDN);
                    mpfr_mul_d(m, m, go, MPFR_RNDN);
                    mpfr_set_d(t, 1.0, MPFR_RNDN);
                    mpfr_sub_d(t, t, go, MPFR_RNDN);
                    mpfr_mul(m, m, t, MPFR_RNDN);
                    break;
                }
                dg[r * G + j] = rd(fd, m);
            }
        }
    for (size_t i = 0; i < B * T * I; i++) {
        mpfr_set_zero(m, 1);
        mp_dot(m, dg + (i / I) * G, wih + i % I, G, 1, I);
        double v = rd(fx, m);
        EXPECT(test_same(k->dx.data[i], v), "%s dx[%zu] = %a, expected %a",
               fg->name, i, k->dx.data[i], v);
    }
    for (size_t j = 0; j < G; j++) {
        for (size_t q = 0; q < I + H; q++) {
            mpfr_set_zero(m, 1);
            if (q < I)
                mp_dot(m, dg + j, x + q, B * T, G, I);
            else
                mp_dot(m, dg + j, hp + (q - I), B * T, G, H);
            double v = rd(fw, m);
            float got = q < I ? k->dw_ih.data[j * I + q]
                              : k->dw_hh.data[j * H + q - I];
            EXPECT(test_same(got, v), "%s dw[%zu][%zu] = %a, expected %a",
                   fg->name, j, q, got, v);
        }
        if (k->bias) {
            mpfr_set_zero(m, 1);
            for (size_t r = 0; r < B * T; r++)
                mpfr_add_d(m, m, dg[r * G + j], MPFR_RNDN);
            double v = rd(fw, m);
            EXPECT(test_same(k->db_ih.data[j], v) && test_same(k->db_hh.data[j], v),
                   "%s db[%zu] = %a %a, expected %a", fg->name, j,
                   k->db_ih.data[j], k->db_hh.data[j], v);
        }
    }
    mpfr_clears(m, t, (mpfr_ptr)0);
    free(x), free(wih), free(whh), free(bih), free(bhh), free(dy);
    free(act), free(c), free(y), free(dg), free(hp), free(cp), free(dh), free(dc);
}

START_TEST(narrow_formats_step_by_step)
{
    test_rng g = test_rng_make(0x159);
    const char *fa[] = { "binary16", "bfloat16", "binary16" };
    const char *fc[] = { "binary32", "bfloat16", "binary16" };
    for (int v = 0; v < 3; v++) {
        lstm_case k;
        case_make(&k, 3, 5, 4, 3, test_format(fa[v]), test_format(fc[v]),
                  test_format(fa[v]), v != 1, v != 2, &g);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        emu_accum acc = accum_of(EMU_ACCUM_EXACT);
        emu_lstm_opts o = { .accum = &acc };
        forward(&ctx, &k, &o);
        backward(&ctx, &k, &o);
        stepwise_check(&k);
        case_free(&k);
    }
}
END_TEST

/* ---- 4. MPFR sampling through the choke point ----------------------------------- */

START_TEST(sampled_against_mpfr)
{
    test_rng g = test_rng_make(0x15a);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 3);
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    emu_accum acc = accum_of(EMU_ACCUM_EXACT);
    emu_lstm_opts o = { .accum = &acc };
    lstm_case k;
    case_make(&k, 2, 4, 3, 3, test_format("binary16"), test_format("binary32"),
              test_format("bfloat16"), true, true, &g);
    forward(&ctx, &k, &o);
    backward(&ctx, &k, &o);
    const char *sites[] = { "lstm.gates", "lstm.act", "lstm.c", "lstm.h",
                            "lstm.h_n", "lstm.c_n", "lstm.dh", "lstm.dc",
                            "lstm.dgates", "lstm.dinput", "lstm.dweight_ih",
                            "lstm.dweight_hh", "lstm.dbias_ih", "lstm.dbias_hh" };
    for (size_t i = 0; i < sizeof sites / sizeof *sites; i++) {
        const emu_site *s = emu_stats_find_name(&st, sites[i]);
        EXPECT(s, "no site %s", sites[i]);
        EXPECT(s->total.ref_samples == s->total.results && s->total.results > 0,
               "site %s: %llu samples of %llu", sites[i],
               (unsigned long long)s->total.ref_samples,
               (unsigned long long)s->total.results);
        EXPECT(s->total.ulp_max <= 0.5 + 0x1p-20, "site %s: %.17g ulps",
               sites[i], s->total.ulp_max);
    }
    /* the T steps aggregate into one site */
    ck_assert_uint_eq(emu_stats_find_name(&st, "lstm.c")->total.results,
                      k.B * k.T * k.H);
    ck_assert_uint_eq(emu_stats_find_name(&st, "lstm.dh")->total.results,
                      k.B * (k.T - 1) * k.H);
    /* the products are dot products: their error is split */
    ck_assert(emu_stats_find_name(&st, "lstm.gates")->total.dot_samples > 0);
    ck_assert(emu_stats_find_name(&st, "lstm.dweight_hh")->total.dot_samples > 0);
    case_free(&k);
    emu_stats_free(&st);

    /* The fast model: the window's input product is the accumulator's
     * start, and the reference measures from there the recurrent terms'
     * binary32 sum (errors of 2^-24 relative to the terms, 2^-13 of a
     * binary16 ulp) and the output rounding. */
    emu_stats_init(&st);
    ctx.stats = &st;
    acc = accum_of(EMU_ACCUM_FAST);
    case_make(&k, 2, 4, 3, 3, test_format("binary16"), test_format("binary32"),
              test_format("bfloat16"), false, true, &g);
    forward(&ctx, &k, &o);
    const emu_site *s = emu_stats_find_name(&st, "lstm.gates");
    ck_assert(s && s->total.ref_samples == k.B * k.T * 4 * k.H);
    EXPECT(s->total.ulp_max <= 0.5 + 0x1p-10, "fast gates: %.17g ulps",
           s->total.ulp_max);
    case_free(&k);
    emu_stats_free(&st);
}
END_TEST

/* ---- 5. PyTorch ------------------------------------------------------------------ */

#ifndef EMU_LSTM_TORCH_SCRIPT
#define EMU_LSTM_TORCH_SCRIPT "tests/lstm_torch.py"
#endif

static bool read_f32(FILE *f, float *v, size_t n)
{
    return fread(v, sizeof *v, n, f) == n;
}

static double cmp_t(const emu_tensor *t, const float *ref)
{
    double m = 0.0;
    for (size_t i = 0; i < t->n; i++) {
        double e = fabs((double)t->data[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(e <= m))
            m = e;
    }
    return m;
}

START_TEST(against_pytorch)
{
    char path[] = "/tmp/emu_lstm_torch_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", EMU_LSTM_TORCH_SCRIPT,
             path);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77 ||
        WEXITSTATUS(rc) == 127) {
        printf("against_pytorch: skipped (no /usr/bin/python3 with torch)\n");
        remove(path);
        return;
    }
    ck_assert_msg(WEXITSTATUS(rc) == 0, "%s failed (%d)", cmd, WEXITSTATUS(rc));
    FILE *f = fopen(path, "rb");
    ck_assert(f);
    int32_t dims[4];
    ck_assert(fread(dims, sizeof *dims, 4, f) == 4);
    const emu_format *f32 = test_format("binary32");
    test_rng g = test_rng_make(1);
    lstm_case k;
    case_make(&k, (size_t)dims[0], (size_t)dims[1], (size_t)dims[2],
              (size_t)dims[3], f32, f32, f32, false, true, &g);
    emu_tensor *in[] = { &k.x, &k.w_ih, &k.w_hh, &k.b_ih, &k.b_hh, &k.dy };
    for (int i = 0; i < 6; i++)
        ck_assert(read_f32(f, in[i]->data, in[i]->n));
    /* expected: y, h_n, c_n, dx, dw_ih, dw_hh, db_ih, db_hh */
    emu_tensor *out[] = { &k.y, &k.h_n, &k.c_n, &k.dx, &k.dw_ih, &k.dw_hh,
                          &k.db_ih, &k.db_hh };
    const char *names[] = { "y", "h_n", "c_n", "dx", "dw_ih", "dw_hh", "db_ih",
                            "db_hh" };
    float *ref[8];
    for (int i = 0; i < 8; i++) {
        ref[i] = malloc(out[i]->n * sizeof *ref[i]);
        ck_assert(read_f32(f, ref[i], out[i]->n));
    }
    fclose(f);
    remove(path);
    emu_accum kinds[2] = { accum_of(EMU_ACCUM_FAST),
                           accum_of(EMU_ACCUM_SEQUENTIAL) };
    for (int a = 0; a < 2; a++) {
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        emu_lstm_opts o = { .accum = &kinds[a] };
        forward(&ctx, &k, &o);
        backward(&ctx, &k, &o);
        for (int i = 0; i < 8; i++) {
            double e = cmp_t(out[i], ref[i]);
            EXPECT(e < 5e-6, "accum %d: %s differs from torch by %g "
                   "(relative to 1 + |v|)", a, names[i], e);
        }
    }
    for (int i = 0; i < 8; i++)
        free(ref[i]);
    case_free(&k);
}
END_TEST

/* ---- 6. refusals ------------------------------------------------------------------- */

START_TEST(bad_arguments)
{
    test_rng g = test_rng_make(0x15b);
    const emu_format *f32 = test_format("binary32");
    lstm_case k;
    case_make(&k, 2, 3, 4, 5, f32, f32, f32, true, true, &g);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum acc = accum_of(EMU_ACCUM_FAST);
    emu_lstm_opts o = { .accum = &acc };
    emu_lstm_weights w = weights_of(&k);
    emu_tensor w55 = mk("w55", EMU_ROLE_WEIGHT, f32, 5, 5, 0);
    emu_tensor wih3 = mk("wih3", EMU_ROLE_WEIGHT, f32, 20, 3, 0);
    emu_tensor b19 = mk("b19", EMU_ROLE_WEIGHT, f32, 19, 0, 0);
    emu_tensor y4 = mk("y4", EMU_ROLE_ACTIVATION, f32, 2, 4, 5);
    emu_tensor x2 = mk("x2", EMU_ROLE_ACTIVATION, f32, 6, 4, 0);
    emu_tensor h3 = mk("h3", EMU_ROLE_ACTIVATION, f32, 3, 5, 0);
    const float before = k.y.data[0] = 12345.0f;
#define REFUSED(call, word)                                                  \
    do {                                                                     \
        ctx.err.code = EMU_OK;                                               \
        ck_assert_int_eq((call), -1);                                        \
        ck_assert_int_eq(ctx.err.code, EMU_EINVAL);                          \
        ck_assert_msg(strstr(ctx.err.message, word), "message '%s' lacks "   \
                      "'%s'", ctx.err.message, word);                        \
        ck_assert(k.y.data[0] == before);                                    \
    } while (0)
#define FWD(yy, gg, cc, hn, x, h0, ww, oo, r)                                \
    emu_t_lstm(&ctx, "lstm", yy, gg, cc, hn, NULL, x, h0, NULL, ww, oo, r)
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &k.x, NULL, &w, &o, NULL), "rounding");
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &k.x, NULL, &w, NULL, &test_rne),
            "options");
    emu_lstm_opts bad = { 0 };
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &k.x, NULL, &w, &bad, &test_rne),
            "accum");
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &k.x, NULL, NULL, &o, &test_rne),
            "w_ih");
    emu_lstm_weights bw = w;
    bw.w_hh = &w55;
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &k.x, NULL, &bw, &o, &test_rne),
            "(4H, H)");
    bw = w;
    bw.w_ih = &wih3;
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &k.x, NULL, &bw, &o, &test_rne),
            "wih3");
    bw = w;
    bw.b_hh = &b19;
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &k.x, NULL, &bw, &o, &test_rne),
            "b19");
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &x2, NULL, &w, &o, &test_rne),
            "(B, T, I)");
    REFUSED(FWD(&y4, &k.gates, &k.c, NULL, &k.x, NULL, &w, &o, &test_rne), "y4");
    REFUSED(FWD(&k.y, &k.c, &k.c, NULL, &k.x, NULL, &w, &o, &test_rne),
            "gates");
    REFUSED(FWD(&k.y, &k.gates, &k.c, NULL, &k.x, &h3, &w, &o, &test_rne), "h3");
    REFUSED(FWD(&k.y, &k.gates, &k.c, &h3, &k.x, NULL, &w, &o, &test_rne), "h_n");
    /* an output that is an input's storage */
    REFUSED(FWD(&k.y, &k.gates, &k.c, &k.h0, &k.x, &k.h0, &w, &o, &test_rne),
            "shares storage");
    /* backward */
    emu_lstm_grads gr = { &k.dw_ih, &k.dw_hh, &k.db_ih, &k.db_hh };
    const float dxb = k.dx.data[0] = 777.0f;
    ctx.err.code = EMU_OK;
    ck_assert_int_eq(emu_t_lstm_backward(&ctx, "lstm", &k.dx, &gr, &y4, &k.x,
                                         &k.y, &k.gates, &k.c, NULL, NULL, &w,
                                         &o, &test_rne), -1);
    ck_assert(strstr(ctx.err.message, "dy"));
    emu_lstm_grads bg = gr;
    bg.dw_hh = &wih3;
    ck_assert_int_eq(emu_t_lstm_backward(&ctx, "lstm", &k.dx, &bg, &k.dy, &k.x,
                                         &k.y, &k.gates, &k.c, NULL, NULL, &w,
                                         &o, &test_rne), -1);
    ck_assert(strstr(ctx.err.message, "dw_hh"));
    ck_assert_int_eq(emu_t_lstm_backward(&ctx, "lstm", &k.dy, &gr, &k.dy, &k.x,
                                         &k.y, &k.gates, &k.c, NULL, NULL, &w,
                                         &o, &test_rne), -1);
    ck_assert_int_eq(emu_t_lstm_backward(&ctx, "lstm", &k.dx, &gr, &k.dy, &k.x,
                                         &k.y, &k.gates, &k.c, NULL, NULL, &w,
                                         &o, NULL), -1);
    bg = gr;
    bg.db_ih = &k.db_hh;
    ck_assert_int_eq(emu_t_lstm_backward(&ctx, "lstm", &k.dx, &bg, &k.dy, &k.x,
                                         &k.y, &k.gates, &k.c, NULL, NULL, &w,
                                         &o, &test_rne), -1);
    ck_assert(strstr(ctx.err.message, "shares storage"));
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    ck_assert(k.dx.data[0] == dxb);
#undef FWD
#undef REFUSED
    emu_tensor *ts[] = { &w55, &wih3, &b19, &y4, &x2, &h3 };
    for (int i = 0; i < 6; i++)
        emu_tensor_free(ts[i]);
    case_free(&k);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_lstm");
    TCase *tc = tcase_create("lstm");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, binary32_against_binary64);
    tcase_add_test(tc, gradients_against_finite_differences);
    tcase_add_test(tc, narrow_formats_step_by_step);
    tcase_add_test(tc, sampled_against_mpfr);
    tcase_add_test(tc, against_pytorch);
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
