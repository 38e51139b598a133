/*
 * test_nn_lstm.c — the LSTM language model of emu/nn.h ("lstm:L-H",
 * emu_model_build_lm): its layers and parameter names, the gradients of
 * every parameter against binary64 finite differences, a weights file
 * round trip, and the loss and gradients against PyTorch's word language
 * model loaded strictly from the model's weights file (skipped without
 * torch).
 *
 * Gradient check.  The model runs under the fp32 preset with the exact
 * accumulator, every value the binary32 rounding of an exactly computed
 * quantity.  ref_loss below is an independent binary64 implementation of
 * the same network (embedding, L LSTM layers from zero state, linear
 * head, mean cross-entropy over the B T rows), written from PyTorch's
 * formulas; its central differences (step 2^-12, truncation and rounding
 * errors below 1e-9) stand for the true gradient.  The model's gradients
 * differ from them by the propagated binary32 roundings of some 4L + 6
 * ops a chain (each 2^-24 relative), summed over the window: the bound
 * |g - fd| <= 2^-19 (max_j |fd_j| / 8 + |fd|) per tensor is 5 times the
 * largest error seen (the ratios are printed), while a wrong or missing
 * term (an LSTM layer reading the wrong input, a gradient not delivered
 * to the encoder, the w_hh gradient left at zero) misses by orders of
 * magnitude.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn_internal.h"
#include "testutil.h"

typedef struct lstm_fixture {
    emu_policy p;
    emu_ctx ctx;
    emu_model m;
    int *targets;
    int L, H, V, B, S;
} lstm_fixture;

static void fx_make(lstm_fixture *f, int L, int H, int V, int B, int S,
                    uint64_t seed)
{
    emu_error err;
    memset(f, 0, sizeof *f);
    f->L = L, f->H = H, f->V = V, f->B = B, f->S = S;
    if (emu_policy_preset(&f->p, "fp32", &err) ||
        emu_policy_set(&f->p, "accum=exact", &err) ||
        emu_policy_validate(&f->p, &err))
        ck_abort_msg("policy: %s", err.message);
    emu_ctx_init(&f->ctx, seed);
    char arch[64];
    snprintf(arch, sizeof arch, "lstm:%d-%d", L, H);
    if (emu_model_build_lm(&f->m, arch, &f->p, B, S, V, seed, &f->ctx, &err))
        ck_abort_msg("build %s: %s: %s", arch, err.key, err.message);
    test_rng g = test_rng_make(seed);
    f->targets = malloc((size_t)(B * S) * sizeof *f->targets);
    for (int i = 0; i < B * S; i++) {
        f->m.tokens[i] = (int32_t)test_below(&g, (uint64_t)V);
        f->targets[i] = (int)test_below(&g, (uint64_t)V);
    }
}

static void fx_free(lstm_fixture *f)
{
    emu_model_free(&f->m);
    free(f->targets);
}

/* ---- the binary64 reference ------------------------------------------------ */

/* The parameters in binary64: enc (V, H); per layer w_ih (4H, H), w_hh,
 * b_ih, b_hh; dec (V, H), dec_b (V). */
typedef struct ref_params {
    double *enc, *dec, *dec_b;
    double *w_ih[4], *w_hh[4], *b_ih[4], *b_hh[4];
} ref_params;

static double *dup64(const emu_tensor *t)
{
    double *d = malloc(t->n * sizeof *d);
    for (size_t i = 0; i < t->n; i++)
        d[i] = t->data[i];
    return d;
}

static ref_params ref_make(const lstm_fixture *f)
{
    const emu_model *m = &f->m;
    ref_params r;
    memset(&r, 0, sizeof r);
    r.enc = dup64(&m->layers[0].weight.w);
    for (int k = 0; k < f->L; k++) {
        const emu_layer *hh = &m->layers[1 + 2 * k], *l = &m->layers[2 + 2 * k];
        r.w_ih[k] = dup64(&l->weight.w);
        r.b_ih[k] = dup64(&l->bias.w);
        r.w_hh[k] = dup64(&hh->weight.w);
        r.b_hh[k] = dup64(&hh->bias.w);
    }
    r.dec = dup64(&m->layers[m->n_layers - 1].weight.w);
    r.dec_b = dup64(&m->layers[m->n_layers - 1].bias.w);
    return r;
}

static void ref_free(ref_params *r, int L)
{
    free(r->enc), free(r->dec), free(r->dec_b);
    for (int k = 0; k < L; k++)
        free(r->w_ih[k]), free(r->w_hh[k]), free(r->b_ih[k]), free(r->b_hh[k]);
}

static double sig(double v) { return 1.0 / (1.0 + exp(-v)); }

static double ref_loss(const lstm_fixture *f, const ref_params *r)
{
    const int H = f->H, B = f->B, S = f->S, V = f->V, G = 4 * H;
    double *x = malloc((size_t)(B * S * H) * sizeof *x);
    double *y = malloc((size_t)(B * S * H) * sizeof *y);
    double *h = malloc((size_t)H * sizeof *h), *c = malloc((size_t)H * sizeof *c);
    double *a = malloc((size_t)G * sizeof *a);
    for (int i = 0; i < B * S; i++)
        for (int q = 0; q < H; q++)
            x[i * H + q] = r->enc[f->m.tokens[i] * H + q];
    for (int k = 0; k < f->L; k++) {
        for (int b = 0; b < B; b++) {
            for (int q = 0; q < H; q++)
                h[q] = c[q] = 0.0;
            for (int t = 0; t < S; t++) {
                const double *xt = x + (b * S + t) * H;
                for (int j = 0; j < G; j++) {
                    double s = r->b_ih[k][j] + r->b_hh[k][j];
                    for (int q = 0; q < H; q++)
                        s += r->w_ih[k][j * H + q] * xt[q] +
                             r->w_hh[k][j * H + q] * h[q];
                    a[j] = j / H == 2 ? tanh(s) : sig(s);
                }
                for (int q = 0; q < H; q++) {
                    c[q] = a[H + q] * c[q] + a[q] * a[2 * H + q];
                    h[q] = a[3 * H + q] * tanh(c[q]);
                    y[(b * S + t) * H + q] = h[q];
                }
            }
        }
        double *sw = x;
        x = y;
        y = sw;
    }
    double loss = 0.0;
    double *z = malloc((size_t)V * sizeof *z);
    for (int i = 0; i < B * S; i++) {
        double mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++) {
            z[v] = r->dec_b[v];
            for (int q = 0; q < H; q++)
                z[v] += r->dec[v * H + q] * x[i * H + q];
            mx = fmax(mx, z[v]);
        }
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - mx);
        loss += mx + log(sum) - z[f->targets[i]];
    }
    free(x), free(y), free(h), free(c), free(a), free(z);
    return loss / (B * S);
}

/* ---- tests ------------------------------------------------------------------- */

START_TEST(layers_and_names)
{
    lstm_fixture f;
    fx_make(&f, 2, 6, 11, 2, 4, 7);
    const emu_model *m = &f.m;
    ck_assert_int_eq(m->n_layers, 6);
    const char *layers[] = { "encoder", "lstm.l0.hh", "lstm.l0", "lstm.l1.hh",
                             "lstm.l1", "decoder" };
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(m->layers[i].name, layers[i]);
    ck_assert_int_eq(m->layers[2].kind, EMU_LAYER_LSTM);
    ck_assert_int_eq(m->layers[2].tie, 1);
    ck_assert_int_eq(m->layers[3].kind, EMU_LAYER_LSTM_HH);
    const char *names[] = { "encoder.weight", "lstm.weight_hh_l0",
                            "lstm.bias_hh_l0", "lstm.weight_ih_l0",
                            "lstm.bias_ih_l0", "lstm.weight_hh_l1",
                            "lstm.bias_hh_l1", "lstm.weight_ih_l1",
                            "lstm.bias_ih_l1", "decoder.weight", "decoder.bias" };
    const size_t sizes[] = { 66, 144, 24, 144, 24, 144, 24, 144, 24, 66, 11 };
    ck_assert_int_eq(emu_model_named_count(&f.m), 11);
    size_t total = 0;
    for (int i = 0; i < 11; i++) {
        emu_param *prm = NULL;
        const char *name = emu_model_named_at(&f.m, i, &prm, NULL);
        ck_assert_str_eq(name, names[i]);
        ck_assert_uint_eq(prm->w.n, sizes[i]);
        total += sizes[i];
    }
    ck_assert_uint_eq(emu_model_param_count(m), total);
    /* PyTorch's initialisation: every LSTM value within 1/sqrt(H), the
     * biases not zero */
    const double bound = 1.0 / sqrt(6.0);
    bool nonzero = false;
    for (int i = 1; i <= 4; i++)
        for (size_t k = 0; k < m->layers[i].bias.w.n; k++) {
            ck_assert(fabs(m->layers[i].bias.w.data[k]) <= bound);
            nonzero |= m->layers[i].bias.w.data[k] != 0.0f;
        }
    ck_assert(nonzero);
    fx_free(&f);
}
END_TEST

START_TEST(gradients_against_finite_differences)
{
    lstm_fixture f;
    fx_make(&f, 2, 5, 7, 2, 4, 11);
    emu_model *m = &f.m;
    ck_assert_int_eq(emu_model_forward(m, &f.ctx, &f.p), 0);
    ck_assert_int_eq(emu_model_backward(m, &f.ctx, &f.p, f.targets, 1.0f), 0);
    ref_params r = ref_make(&f);
    const double L0 = ref_loss(&f, &r);
    EXPECT(fabs(L0 - m->loss.data[0]) < 1e-6 * (1.0 + fabs(L0)),
           "loss %.9g, binary64 %.9g", m->loss.data[0], L0);
    typedef struct {
        const char *name;
        double *v;
        const emu_tensor *g;
    } checked;
    checked ps[16];
    int np = 0;
    ps[np++] = (checked){ "encoder", r.enc, &m->layers[0].weight.g };
    for (int k = 0; k < f.L; k++) {
        const emu_layer *hh = &m->layers[1 + 2 * k], *l = &m->layers[2 + 2 * k];
        ps[np++] = (checked){ "w_ih", r.w_ih[k], &l->weight.g };
        ps[np++] = (checked){ "b_ih", r.b_ih[k], &l->bias.g };
        ps[np++] = (checked){ "w_hh", r.w_hh[k], &hh->weight.g };
        ps[np++] = (checked){ "b_hh", r.b_hh[k], &hh->bias.g };
    }
    ps[np++] = (checked){ "decoder", r.dec, &m->layers[m->n_layers - 1].weight.g };
    ps[np++] = (checked){ "decoder.b", r.dec_b, &m->layers[m->n_layers - 1].bias.g };
    const double h = 0x1p-12;
    for (int q = 0; q < np; q++) {
        const size_t n = ps[q].g->n;
        double *fd = malloc(n * sizeof *fd), big = 0.0;
        for (size_t i = 0; i < n; i++) {
            double keep = ps[q].v[i];
            ps[q].v[i] = keep + h;
            double lp = ref_loss(&f, &r);
            ps[q].v[i] = keep - h;
            double lm = ref_loss(&f, &r);
            ps[q].v[i] = keep;
            fd[i] = (lp - lm) / (2.0 * h);
            big = fmax(big, fabs(fd[i]));
        }
        ck_assert(big > 0.0);
        double worst = 0.0;
        for (size_t i = 0; i < n; i++) {
            double tol = 0x1p-19 * (big / 8.0 + fabs(fd[i]));
            double e = fabs(ps[q].g->data[i] - fd[i]) / tol;
            worst = fmax(worst, e);
            EXPECT(e <= 1.0, "%s (param %d) [%zu]: %.9g, finite differences "
                   "%.9g", ps[q].name, q, i, ps[q].g->data[i], fd[i]);
        }
        printf("%-10s worst error / tolerance %.3f\n", ps[q].name, worst);
        free(fd);
    }
    ref_free(&r, f.L);
    fx_free(&f);
}
END_TEST

START_TEST(weights_round_trip)
{
    char dir[] = "/tmp/emu_lstm_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    lstm_fixture a, b;
    fx_make(&a, 1, 4, 9, 2, 3, 21);
    fx_make(&b, 1, 4, 9, 2, 3, 22);
    emu_error err;
    ck_assert_msg(emu_model_save_weights(&a.m, path, &err) == 0, "%s", err.message);
    ck_assert_msg(emu_model_load_weights(&b.m, &b.ctx, &b.p, path, &err) == 0, "%s", err.message);
    for (int i = 0; i < a.m.n_layers; i++) {
        const emu_layer *la = &a.m.layers[i], *lb = &b.m.layers[i];
        if (!la->has_params)
            continue;
        ck_assert(!memcmp(la->weight.w.data, lb->weight.w.data,
                          la->weight.w.n * sizeof(float)));
        if (la->has_bias)
            ck_assert(!memcmp(la->bias.w.data, lb->bias.w.data,
                              la->bias.w.n * sizeof(float)));
    }
    remove(path);
    rmdir(dir);
    fx_free(&a);
    fx_free(&b);
}
END_TEST

/* ---- PyTorch -------------------------------------------------------------------- */

#ifndef EMU_LSTM_MODEL_TORCH_SCRIPT
#define EMU_LSTM_MODEL_TORCH_SCRIPT "tests/lstm_model_torch.py"
#endif

/* The model's weights file loaded strictly into PyTorch's word language
 * model of the same shape (every name and shape must match), its loss and
 * gradients against the model's under the fp32 preset's fast model.
 * Bound 2e-6 relative to each tensor's largest gradient: both sides are
 * binary32 computations of the same formulas, differing in summation
 * order and in PyTorch's rounding of tanh(c) before the product with o
 * (a few 2^-24 over chains of ~10 ops; seen: at most 2.5e-7). */
START_TEST(against_pytorch)
{
    char dir[] = "/tmp/emu_lstm_torch_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char wpath[64], ipath[64], opath[64], cmd[512];
    snprintf(wpath, sizeof wpath, "%s/w.safetensors", dir);
    snprintf(ipath, sizeof ipath, "%s/in.safetensors", dir);
    snprintf(opath, sizeof opath, "%s/out.safetensors", dir);
    emu_error err;
    lstm_fixture f;
    memset(&f, 0, sizeof f);
    f.L = 2, f.H = 16, f.V = 13, f.B = 3, f.S = 9;
    if (emu_policy_preset(&f.p, "fp32", &err) || emu_policy_validate(&f.p, &err))
        ck_abort_msg("policy: %s", err.message);
    emu_ctx_init(&f.ctx, 5);
    ck_assert_msg(emu_model_build_lm(&f.m, "lstm:2-16", &f.p, f.B, f.S, f.V, 5,
                                     &f.ctx, &err) == 0, "%s", err.message);
    test_rng g = test_rng_make(5);
    const int R = f.B * f.S;
    f.targets = malloc((size_t)R * sizeof *f.targets);
    float *tok = malloc((size_t)R * sizeof *tok), *tgt = malloc((size_t)R * sizeof *tgt);
    for (int i = 0; i < R; i++) {
        f.m.tokens[i] = (int32_t)test_below(&g, (uint64_t)f.V);
        f.targets[i] = (int)test_below(&g, (uint64_t)f.V);
        tok[i] = (float)f.m.tokens[i];
        tgt[i] = (float)f.targets[i];
    }
    emu_tf_out in[2] = { { "tokens", 2, { (size_t)f.B, (size_t)f.S }, tok },
                         { "targets", 2, { (size_t)f.B, (size_t)f.S }, tgt } };
    ck_assert_msg(emu_model_save_weights(&f.m, wpath, &err) == 0, "%s", err.message);
    ck_assert_msg(emu_tensorfile_write(ipath, in, 2, NULL, &err) == 0, "%s",
                  err.message);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %s %s",
             EMU_LSTM_MODEL_TORCH_SCRIPT, wpath, ipath, opath);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77 ||
        WEXITSTATUS(rc) == 127) {
        printf("against_pytorch: skipped (no /usr/bin/python3 with torch)\n");
    } else {
        ck_assert_msg(WEXITSTATUS(rc) == 0, "%s failed (%d)", cmd, WEXITSTATUS(rc));
        ck_assert_int_eq(emu_model_forward(&f.m, &f.ctx, &f.p), 0);
        ck_assert_int_eq(emu_model_backward(&f.m, &f.ctx, &f.p, f.targets, 1.0f), 0);
        emu_tensorfile tf;
        ck_assert_msg(emu_tensorfile_read(&tf, opath, 0, &err) == 0, "%s",
                      err.message);
        const emu_tf_tensor *loss = emu_tensorfile_find(&tf, "loss");
        ck_assert(loss);
        EXPECT(fabs(loss->values[0] - f.m.loss.data[0]) < 1e-6 * loss->values[0],
               "loss %.9g, torch %.9g", f.m.loss.data[0], loss->values[0]);
        const int n = emu_model_named_count(&f.m);
        ck_assert_int_eq(n, tf.count - 1);
        for (int i = 0; i < n; i++) {
            emu_param *prm = NULL;
            const char *name = emu_model_named_at(&f.m, i, &prm, NULL);
            const emu_tf_tensor *t = emu_tensorfile_find(&tf, name);
            EXPECT(t && t->n == prm->g.n, "torch has no gradient %s", name);
            double big = 0.0, worst = 0.0;
            for (size_t k = 0; k < t->n; k++)
                big = fmax(big, fabs(t->values[k]));
            for (size_t k = 0; k < t->n; k++)
                worst = fmax(worst, fabs(prm->g.data[k] - t->values[k]) / big);
            printf("%-20s max |g - torch| / max |torch| = %.3g\n", name, worst);
            EXPECT(worst < 2e-6, "%s: %g", name, worst);
        }
        emu_tensorfile_free(&tf);
    }
    remove(wpath), remove(ipath), remove(opath);
    rmdir(dir);
    free(tok), free(tgt);
    fx_free(&f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nn_lstm");
    TCase *tc = tcase_create("lstm");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, layers_and_names);
    tcase_add_test(tc, gradients_against_finite_differences);
    tcase_add_test(tc, weights_round_trip);
    tcase_add_test(tc, against_pytorch);
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
