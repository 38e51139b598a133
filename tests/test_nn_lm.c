/*
 * test_nn_lm.c — the language models of emu/nn.h (emu_model_build_lm):
 * the gpt graph's gradients against binary64 finite differences, the
 * tied head, determinism, named tensors, weights files, initialisation,
 * the scaled presets' operand sites and the refusals.
 *
 * Gradient check.  The model runs under the fp32 preset with the exact
 * accumulator, so every value it computes is the binary32 rounding of an
 * exactly computed quantity.  An independent binary64 implementation of
 * the same GPT (ref_loss below: written from the formulas, not from the
 * library's code) gives the loss as a function of the binary32 parameter
 * values read back from the model; its central differences, step
 * h = 2^-13, are exact to ~1e-10 (truncation h^2/6 |L'''| and rounding
 * 2^-53 |L| / h are both far below the tolerance), so they stand for the
 * true gradient.  The library's gradient differs from it by the binary32
 * roundings of its forward and backward passes: each op's result carries
 * a relative error of at most 2^-24, and a gradient element is a chain of
 * some 6L + 8 such ops whose sums cancel (layer norm's backward
 * subtracts two means; the softmax's backward a dot product), so its
 * error is bounded relative to the largest terms involved, i.e. to the
 * largest gradient of the tensor, not to the element itself.  The
 * tolerance is |g - fd| <= 2^-17 max_j |fd_j| + 2^-15 |fd| per tensor:
 * 2^-24 times a chain of ~20 ops times a conditioning of ~6 (layer
 * norm's 1/std on a residual stream of width 16).  The worst ratio
 * error/tolerance is printed per tensor: seen <= 0.02, i.e. the errors
 * are a few units in the last place of the largest gradient.  A wrong
 * term misses by orders of magnitude more: a head whose gradient does
 * not accumulate into wte's (the embedding's overwriting it) fails by
 * 10^4 tolerances (checked by mutation), and so would any missing or
 * transposed term.  wte is checked on the rows of ids that no input
 * token takes, whose gradient is the head's alone, and on the others,
 * the sum.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_internal.h"
#include "testutil.h"

/* ---- a gpt under test ---------------------------------------------------- */

typedef struct lm_fixture {
    emu_policy p;
    emu_ctx ctx;
    emu_model m;
    int *targets;
    int L, D, H, T, V, B, S; /* S: the window the model runs on (<= T) */
} lm_fixture;

/* Builds gpt:L-D-H-T on windows of S tokens, with random tokens (ids
 * below V - 2: the last two rows of wte are reached only by the head)
 * and targets, and random biases and layer-norm parameters (the builder
 * zeroes biases and sets gamma 1: nonzero values make the check general). */
static void lm_make(lm_fixture *f, const char *preset, int L, int D, int H,
                    int T, int V, int B, int S, uint64_t seed)
{
    emu_error err;
    memset(f, 0, sizeof *f);
    f->L = L, f->D = D, f->H = H, f->T = T, f->V = V, f->B = B, f->S = S;
    if (emu_policy_preset(&f->p, preset, &err) ||
        (!strcmp(preset, "fp32") && emu_policy_set(&f->p, "accum=exact", &err)) ||
        emu_policy_validate(&f->p, &err))
        ck_abort_msg("policy: %s", err.message);
    emu_ctx_init(&f->ctx, seed);
    char arch[64];
    snprintf(arch, sizeof arch, "gpt:%d-%d-%d-%d", L, D, H, T);
    if (emu_model_build_lm(&f->m, arch, &f->p, B, S, V, seed, &f->ctx, &err))
        ck_abort_msg("build %s: %s: %s", arch, err.key, err.message);
    ck_assert_int_eq(f->m.seq_len, S);
    ck_assert_int_eq(f->m.vocab, V);
    ck_assert_int_eq(f->m.classes, V);
    f->targets = malloc((size_t)B * (size_t)S * sizeof *f->targets);
    ck_assert_ptr_nonnull(f->targets);
    test_rng g = test_rng_make(seed);
    for (int i = 0; i < B * S; i++) {
        f->m.tokens[i] = (int32_t)test_below(&g, (uint64_t)(V - 2));
        f->targets[i] = (int)test_below(&g, (uint64_t)V);
    }
    for (int i = 0; i < f->m.n_layers; i++) {
        emu_layer *l = &f->m.layers[i];
        if (!l->has_params)
            continue;
        if (l->kind == EMU_LAYER_LAYERNORM)
            for (size_t j = 0; j < l->weight.w.n; j++)
                l->weight.w.data[j] = (float)(1.0 + ldexp((double)(test_next(&g) >> 44) -
                                                         524288.0, -21));
        for (size_t j = 0; j < l->bias.w.n; j++)
            l->bias.w.data[j] =
                (float)ldexp((double)(test_next(&g) >> 44) - 524288.0, -23);
    }
}

static void lm_free(lm_fixture *f)
{
    emu_model_free(&f->m);
    free(f->targets);
}

static void lm_step(lm_fixture *f)
{
    if (emu_model_forward(&f->m, &f->ctx, &f->p) ||
        emu_model_backward(&f->m, &f->ctx, &f->p, f->targets, 1.0f))
        ck_abort_msg("step: %s: %s", f->ctx.err.key, f->ctx.err.message);
}

/* ---- the binary64 reference ---------------------------------------------- */

/* The parameters in named order: wte, wpe, per block 12 (ln1 w b, qkv w b,
 * proj w b, ln2 w b, fc w b, mlp.proj w b), ln_f w b. */
typedef struct ref_gpt {
    int L, D, H, T, V, B, S;
    int n;          /* tensors */
    double **P;     /* values  */
    size_t *len;
    const int32_t *tok;
    const int *tgt;
} ref_gpt;

static void ref_make(ref_gpt *r, lm_fixture *f)
{
    memset(r, 0, sizeof *r);
    r->L = f->L, r->D = f->D, r->H = f->H, r->T = f->T, r->V = f->V;
    r->B = f->B, r->S = f->S;
    r->n = emu_model_named_count(&f->m);
    ck_assert_int_eq(r->n, 2 + 12 * f->L + 2);
    r->P = calloc((size_t)r->n, sizeof *r->P);
    r->len = calloc((size_t)r->n, sizeof *r->len);
    ck_assert(r->P && r->len);
    for (int k = 0; k < r->n; k++) {
        emu_param *p;
        emu_model_named_at(&f->m, k, &p, NULL);
        ck_assert_ptr_nonnull(p);
        r->len[k] = p->w.n;
        r->P[k] = malloc(p->w.n * sizeof **r->P);
        ck_assert_ptr_nonnull(r->P[k]);
        for (size_t j = 0; j < p->w.n; j++)
            r->P[k][j] = p->w.data[j];
    }
    r->tok = f->m.tokens;
    r->tgt = f->targets;
}

static void ref_free(ref_gpt *r)
{
    for (int k = 0; k < r->n; k++)
        free(r->P[k]);
    free(r->P);
    free(r->len);
}

/* y (R, F) = layer norm of x (R, F), eps 1e-5, biased variance. */
static void ref_ln(double *y, const double *x, const double *g,
                   const double *b, int R, int F)
{
    for (int r = 0; r < R; r++) {
        const double *xr = x + (size_t)r * F;
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < F; i++)
            mean += xr[i];
        mean /= F;
        for (int i = 0; i < F; i++)
            var += (xr[i] - mean) * (xr[i] - mean);
        var /= F;
        double rstd = 1.0 / sqrt(var + 1e-5);
        for (int i = 0; i < F; i++)
            y[(size_t)r * F + i] = (xr[i] - mean) * rstd * g[i] + b[i];
    }
}

/* y (R, O) = x (R, I) W^T (W (O, I)) + b (b may be NULL). */
static void ref_linear(double *y, const double *x, const double *W,
                       const double *b, int R, int I, int O)
{
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < I; i++)
                s += x[(size_t)r * I + i] * W[(size_t)o * I + i];
            y[(size_t)r * O + o] = s;
        }
}

/* The mean cross-entropy of the next-token targets. */
static double ref_loss(const ref_gpt *r)
{
    const int D = r->D, H = r->H, S = r->S, V = r->V, R = r->B * r->S;
    const int hs = D / H;
    double *x = malloc((size_t)R * D * sizeof *x);
    double *h = malloc((size_t)R * D * sizeof *h);
    double *qkv = malloc((size_t)R * 3 * D * sizeof *qkv);
    double *att = malloc((size_t)R * D * sizeof *att);
    double *t = malloc((size_t)R * 4 * D * sizeof *t);
    double *logits = malloc((size_t)R * V * sizeof *logits);
    double *w = malloc((size_t)S * sizeof *w);
    ck_assert(x && h && qkv && att && t && logits && w);
    for (int i = 0; i < R; i++)
        for (int d = 0; d < D; d++)
            x[(size_t)i * D + d] = r->P[0][(size_t)r->tok[i] * D + d] +
                                   r->P[1][(size_t)(i % S) * D + d];
    for (int l = 0; l < r->L; l++) {
        double *const *P = r->P + 2 + 12 * l;
        ref_ln(h, x, P[0], P[1], R, D);
        ref_linear(qkv, h, P[2], P[3], R, D, 3 * D);
        for (int b = 0; b < r->B; b++)
            for (int hd = 0; hd < H; hd++)
                for (int i = 0; i < S; i++) {
                    const double *q = qkv + (size_t)(b * S + i) * 3 * D + hd * hs;
                    double mx = -INFINITY, sum = 0.0;
                    for (int j = 0; j <= i; j++) {
                        const double *k = qkv + (size_t)(b * S + j) * 3 * D + D +
                                          hd * hs;
                        double s = 0.0;
                        for (int e = 0; e < hs; e++)
                            s += q[e] * k[e];
                        w[j] = s / sqrt((double)hs);
                        mx = fmax(mx, w[j]);
                    }
                    for (int j = 0; j <= i; j++)
                        sum += (w[j] = exp(w[j] - mx));
                    for (int e = 0; e < hs; e++) {
                        double s = 0.0;
                        for (int j = 0; j <= i; j++)
                            s += w[j] / sum *
                                 qkv[(size_t)(b * S + j) * 3 * D + 2 * D + hd * hs + e];
                        att[(size_t)(b * S + i) * D + hd * hs + e] = s;
                    }
                }
        ref_linear(h, att, P[4], P[5], R, D, D);
        for (size_t i = 0; i < (size_t)R * D; i++)
            x[i] += h[i];
        ref_ln(h, x, P[6], P[7], R, D);
        ref_linear(t, h, P[8], P[9], R, D, 4 * D);
        for (size_t i = 0; i < (size_t)R * 4 * D; i++)
            t[i] = 0.5 * t[i] * (1.0 + erf(t[i] / sqrt(2.0)));
        ref_linear(h, t, P[10], P[11], R, 4 * D, D);
        for (size_t i = 0; i < (size_t)R * D; i++)
            x[i] += h[i];
    }
    ref_ln(h, x, r->P[r->n - 2], r->P[r->n - 1], R, D);
    ref_linear(logits, h, r->P[0], NULL, R, D, V);
    double loss = 0.0;
    for (int i = 0; i < R; i++) {
        const double *z = logits + (size_t)i * V;
        double mx = z[0], s = 0.0;
        for (int v = 1; v < V; v++)
            mx = fmax(mx, z[v]);
        for (int v = 0; v < V; v++)
            s += exp(z[v] - mx);
        loss += log(s) + mx - z[r->tgt[i]];
    }
    free(x), free(h), free(qkv), free(att), free(t), free(logits), free(w);
    return loss / R;
}

/* ---- gradients -------------------------------------------------------------- */

static void check_gradients(int L, int D, int H, int T, int V, int B, int S,
                            uint64_t seed)
{
    lm_fixture f;
    lm_make(&f, "fp32", L, D, H, T, V, B, S, seed);
    lm_step(&f);
    ref_gpt r;
    ref_make(&r, &f);
    const double L0 = ref_loss(&r);
    const double loss = f.m.loss.data[0];
    ck_assert_msg(fabs(loss - L0) <= 0x1p-18 * L0, "loss %.9g, binary64 %.9g",
                  loss, L0);
    const double hstep = 0x1p-13;
    test_rng g = test_rng_make(seed + 1);
    const uint64_t cap = test_scaled(600, 40);
    for (int k = 0; k < r.n; k++) {
        emu_param *p;
        const char *name = emu_model_named_at(&f.m, k, &p, NULL);
        char nm[64];
        snprintf(nm, sizeof nm, "%s", name);
        const size_t n = r.len[k];
        /* Every coordinate if few, else a random sample (and the head-only
         * rows of wte, the unused rows of wpe, always). */
        const bool all = n <= cap;
        const size_t m = all ? n : (size_t)cap;
        double *fd = malloc(m * sizeof *fd);
        size_t *at = malloc(m * sizeof *at);
        ck_assert(fd && at);
        double fdmax = 0.0;
        for (size_t s = 0; s < m; s++) {
            size_t j = all ? s : (size_t)test_below(&g, n);
            if (!all && s < (size_t)D && k <= 1)
                j = (k == 0 ? (size_t)(V - 1) : (size_t)(T - 1)) * D + s;
            at[s] = j;
            const double v = r.P[k][j];
            r.P[k][j] = v + hstep;
            double lp = ref_loss(&r);
            r.P[k][j] = v - hstep;
            double lm = ref_loss(&r);
            r.P[k][j] = v;
            fd[s] = (lp - lm) / (2.0 * hstep);
            fdmax = fmax(fdmax, fabs(fd[s]));
        }
        ck_assert_msg(fdmax > 0.0, "%s: no gradient at all", nm);
        double worst = 0.0;
        for (size_t s = 0; s < m; s++) {
            const double gv = p->g.data[at[s]];
            const double tol = 0x1p-17 * fdmax + 0x1p-15 * fabs(fd[s]);
            const double err = fabs(gv - fd[s]);
            worst = fmax(worst, err / tol);
            ck_assert_msg(err <= tol, "%s[%zu]: gradient %.9g, binary64 "
                          "difference %.9g (tolerance %.3g)", nm, at[s], gv,
                          fd[s], tol);
        }
        printf("gpt:%d-%d-%d-%d S=%d %-20s %5zu of %5zu checked, worst "
               "error/tolerance %.4f\n", L, D, H, T, S, nm, m, n, worst);
        free(fd);
        free(at);
    }
    /* A position the windows never reach has no gradient at all. */
    emu_param *wpe;
    emu_model_named_at(&f.m, 1, &wpe, NULL);
    for (size_t j = (size_t)S * D; j < wpe->g.n; j++)
        ck_assert_msg(wpe->g.data[j] == 0.0f, "wpe.grad[%zu] = %g", j,
                      wpe->g.data[j]);
    ref_free(&r);
    lm_free(&f);
}

START_TEST(gradient_gpt)
{
    check_gradients(2, 16, 2, 8, 11, 2, 8, 1);
}
END_TEST

/* A window shorter than the context; four heads of 2. */
START_TEST(gradient_gpt_short_window)
{
    check_gradients(1, 8, 4, 8, 7, 3, 5, 2);
}
END_TEST

/* The tied head: wte's gradient is the head's (dlogits^T ln_f's output)
 * plus the embedding's scatter of its output gradient.  Rows no token
 * takes hold the head's part alone, equal to that product computed here
 * in binary64 from the model's own binary32 tensors; rows that tokens
 * take differ from it by the scatter. */
START_TEST(tied_head_gradient)
{
    lm_fixture f;
    lm_make(&f, "fp32", 1, 8, 2, 8, 9, 2, 8, 3);
    lm_step(&f);
    const emu_layer *head = &f.m.layers[f.m.n_layers - 1];
    ck_assert_int_eq(head->kind, EMU_LAYER_TIED);
    ck_assert_str_eq(head->name, "lm_head");
    ck_assert_int_eq(head->tie, 0);
    ck_assert(!head->has_params);
    const emu_layer *wte = &f.m.layers[0];
    ck_assert_str_eq(wte->name, "wte");
    const int D = f.D, V = f.V, R = f.B * f.S;
    const emu_tensor *x = head->in, *dy = &f.m.dlogits;
    int used[16] = { 0 };
    for (int i = 0; i < R; i++)
        used[f.m.tokens[i]] = 1;
    int head_only = 0, summed = 0;
    for (int v = 0; v < V; v++) {
        double diff = 0.0, mag = 0.0;
        for (int d = 0; d < D; d++) {
            double s = 0.0;
            for (int i = 0; i < R; i++)
                s += (double)dy->data[(size_t)i * V + v] * x->data[(size_t)i * D + d];
            float gd = wte->weight.g.data[(size_t)v * D + d];
            diff = fmax(diff, fabs(gd - s));
            mag = fmax(mag, fabs(s));
        }
        if (!used[v]) {
            /* One rounding of an exact sum (exact accumulator). */
            ck_assert_msg(diff <= 0x1p-24 * mag, "wte row %d (no token): "
                          "%g off the head's gradient", v, diff);
            head_only++;
        } else {
            ck_assert_msg(diff > 0x1p-10 * mag, "wte row %d: the embedding's "
                          "gradient is missing", v);
            summed++;
        }
    }
    ck_assert_int_ge(head_only, 2);
    ck_assert_int_ge(summed, 2);
    lm_free(&f);
}
END_TEST

/* ---- determinism ------------------------------------------------------------ */

static void grads_equal(const emu_model *a, const emu_model *b)
{
    ck_assert_int_eq(a->n_layers, b->n_layers);
    ck_assert(test_same(a->loss.data[0], b->loss.data[0]));
    for (int i = 0; i < a->n_layers; i++) {
        const emu_layer *la = &a->layers[i], *lb = &b->layers[i];
        ck_assert(!memcmp(la->y.data, lb->y.data, la->y.n * sizeof *la->y.data));
        if (!la->has_params)
            continue;
        ck_assert(!memcmp(la->weight.g.data, lb->weight.g.data,
                          la->weight.g.n * sizeof(float)));
        if (la->has_bias)
            ck_assert(!memcmp(la->bias.g.data, lb->bias.g.data,
                              la->bias.g.n * sizeof(float)));
    }
}

/* Same seed, same model bit for bit; the same step twice on one model,
 * and on two threads, gives the same bits (bf16 with stochastic
 * rounding: the streams depend on the op index, not on the threads). */
START_TEST(determinism)
{
    const char *presets[] = { "fp32", "bf16-sr" };
    for (int k = 0; k < 2; k++) {
        lm_fixture a, b;
        lm_make(&a, presets[k], 2, 16, 2, 8, 11, 2, 8, 5);
        lm_make(&b, presets[k], 2, 16, 2, 8, 11, 2, 8, 5);
        for (int i = 0; i < a.m.n_layers; i++)
            if (a.m.layers[i].has_params)
                ck_assert(!memcmp(a.m.layers[i].weight.w.data,
                                  b.m.layers[i].weight.w.data,
                                  a.m.layers[i].weight.w.n * sizeof(float)));
        const uint64_t op0 = a.ctx.op_index;
        lm_step(&a);
        b.ctx.threads = 2;
        lm_step(&b);
        grads_equal(&a.m, &b.m);
        /* Again on the same model from the same op index: nothing the
         * first step left behind changes the second. */
        a.ctx.op_index = op0;
        lm_step(&a);
        grads_equal(&a.m, &b.m);
        lm_free(&a), lm_free(&b);
    }
}
END_TEST

/* ---- names, initialisation, weights files ------------------------------------- */

START_TEST(named_tensors)
{
    lm_fixture f;
    lm_make(&f, "fp32", 2, 16, 2, 8, 11, 2, 8, 7);
    static const char *const block[12] = {
        "ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
        "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
        "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias" };
    /* PyTorch's shapes: nn.Linear's weight is (out, in). */
    const size_t bshape[12][2] = { { 16, 0 }, { 16, 0 }, { 48, 16 }, { 48, 0 },
                                   { 16, 16 }, { 16, 0 }, { 16, 0 }, { 16, 0 },
                                   { 64, 16 }, { 64, 0 }, { 16, 64 }, { 16, 0 } };
    ck_assert_int_eq(emu_model_named_count(&f.m), 28);
    size_t total = 0;
    for (int k = 0; k < 28; k++) {
        emu_param *p;
        emu_tensor *b;
        const char *name = emu_model_named_at(&f.m, k, &p, &b);
        ck_assert_ptr_nonnull(p);
        ck_assert_ptr_null(b);
        char want[64];
        size_t s0, s1;
        if (k < 2) {
            snprintf(want, sizeof want, "%s", k ? "wpe.weight" : "wte.weight");
            s0 = k ? 8 : 11, s1 = 16;
        } else if (k < 26) {
            snprintf(want, sizeof want, "h%d.%s", (k - 2) / 12, block[(k - 2) % 12]);
            s0 = bshape[(k - 2) % 12][0], s1 = bshape[(k - 2) % 12][1];
        } else {
            snprintf(want, sizeof want, "ln_f.%s", k == 26 ? "weight" : "bias");
            s0 = 16, s1 = 0;
        }
        ck_assert_str_eq(name, want);
        ck_assert_int_eq(p->w.ndim, s1 ? 2 : 1);
        ck_assert_uint_eq(p->w.shape[0], s0);
        if (s1)
            ck_assert_uint_eq(p->w.shape[1], s1);
        total += p->w.n;
    }
    ck_assert_ptr_null(emu_model_named_at(&f.m, 28, NULL, NULL));
    ck_assert_uint_eq(total, emu_model_param_count(&f.m));
    lm_free(&f);

    /* The default model: ~0.8M parameters at V = 97. */
    emu_policy p;
    emu_error err;
    emu_ctx ctx;
    emu_model m;
    ck_assert_int_eq(emu_policy_preset(&p, "fp32", &err), 0);
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_model_build_lm(&m, "gpt", &p, 2, 64, 97, 1, &ctx, &err), 0);
    /* wte + wpe + 4 (12 D^2 + 13 D) + 2 D, D = 128. */
    ck_assert_uint_eq(emu_model_param_count(&m),
                      97 * 128 + 64 * 128 + 4 * (12 * 128 * 128 + 13 * 128) +
                          2 * 128);
    ck_assert_str_eq(m.arch, "gpt");
    emu_model_free(&m);
}
END_TEST

/* GPT-2's initialisation: normal weights of standard deviation 0.02 (the
 * residual projections 0.02 / sqrt(2L)), zero biases, layer norms 1 and 0.
 * The sample deviation of n normal values has a relative standard error
 * of 1/sqrt(2n): within 5% is > 10 of those for every tensor here. */
START_TEST(initialisation)
{
    emu_policy p;
    emu_error err;
    emu_ctx ctx;
    emu_model m;
    ck_assert_int_eq(emu_policy_preset(&p, "fp32", &err), 0);
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_model_build_lm(&m, "gpt:2-64-2-32", &p, 1, 32, 97, 9,
                                        &ctx, &err), 0);
    int normal = 0;
    for (int i = 0; i < m.n_layers; i++) {
        const emu_layer *l = &m.layers[i];
        if (!l->has_params)
            continue;
        const emu_tensor *w = &l->weight.w;
        if (l->kind == EMU_LAYER_LAYERNORM) {
            for (size_t j = 0; j < w->n; j++)
                ck_assert(w->data[j] == 1.0f && l->bias.w.data[j] == 0.0f);
            continue;
        }
        for (size_t j = 0; j < l->bias.w.n; j++)
            ck_assert(l->bias.w.data[j] == 0.0f);
        double s = 0.0, s2 = 0.0;
        for (size_t j = 0; j < w->n; j++)
            s += w->data[j], s2 += (double)w->data[j] * w->data[j];
        double mean = s / (double)w->n, sd = sqrt(s2 / (double)w->n - mean * mean);
        const bool proj = strstr(l->name, "proj") != NULL;
        double want = proj ? 0.02 / sqrt(4.0) : 0.02;
        ck_assert_msg(fabs(sd / want - 1.0) < 0.05, "%s: sd %g, want %g",
                      l->name, sd, want);
        ck_assert_msg(fabs(mean) < 4.0 * want / sqrt((double)w->n), "%s: mean %g",
                      l->name, mean);
        normal++;
    }
    ck_assert_int_eq(normal, 2 + 4 * 2);
    /* Another seed, other values. */
    emu_model m2;
    ck_assert_int_eq(emu_model_build_lm(&m2, "gpt:2-64-2-32", &p, 1, 32, 97, 10,
                                        &ctx, &err), 0);
    ck_assert(memcmp(m.layers[0].weight.w.data, m2.layers[0].weight.w.data,
                     m.layers[0].weight.w.n * sizeof(float)));
    emu_model_free(&m2);
    emu_model_free(&m);
}
END_TEST

START_TEST(weights_round_trip)
{
    char dir[] = "/tmp/emu-nnlm-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    lm_fixture a, b;
    lm_make(&a, "fp32", 2, 16, 2, 8, 11, 2, 8, 11);
    lm_make(&b, "fp32", 2, 16, 2, 8, 11, 2, 8, 12);
    emu_error err;
    ck_assert_msg(!emu_model_save_weights(&a.m, path, &err), "%s", err.message);
    ck_assert_msg(!emu_model_load_weights(&b.m, &b.ctx, &b.p, path, &err), "%s",
                  err.message);
    memcpy(b.m.tokens, a.m.tokens, (size_t)a.B * a.S * sizeof *a.m.tokens);
    memcpy(b.targets, a.targets, (size_t)a.B * a.S * sizeof *a.targets);
    for (int i = 0; i < a.m.n_layers; i++)
        if (a.m.layers[i].has_params) {
            ck_assert(!memcmp(a.m.layers[i].weight.w.data,
                              b.m.layers[i].weight.w.data,
                              a.m.layers[i].weight.w.n * sizeof(float)));
            ck_assert(!memcmp(a.m.layers[i].bias.w.data,
                              b.m.layers[i].bias.w.data,
                              a.m.layers[i].bias.w.n * sizeof(float)));
        }
    a.ctx.op_index = b.ctx.op_index = 0;
    lm_step(&a);
    lm_step(&b);
    grads_equal(&a.m, &b.m);
    /* A gpt of another width is refused, naming a tensor. */
    lm_fixture c;
    lm_make(&c, "fp32", 2, 8, 2, 8, 11, 2, 8, 13);
    ck_assert(emu_model_load_weights(&c.m, &c.ctx, &c.p, path, &err));
    ck_assert_int_eq(err.code, EMU_EDATA);
    ck_assert_msg(strstr(err.message, "wte.weight"), "%s", err.message);
    /* And an image model cannot read it either. */
    unlink(path);
    rmdir(dir);
    lm_free(&a), lm_free(&b), lm_free(&c);
}
END_TEST

/* ---- the scaled presets ---------------------------------------------------- */

static bool has_site(const emu_stats *st, const char *name)
{
    for (size_t i = 0; i < st->count; i++)
        if (!strcmp(st->sites[i].name, name))
            return true;
    return false;
}

/* Every linear layer of the blocks and the head quantize their GEMM
 * operands (sites <layer>.q.*); attention's two products do not. */
START_TEST(scaled_presets)
{
    const char *presets[] = { "fp8-delayed", "mxfp8", "mxfp4", "nvfp4",
                              "fp8-hybrid", "bf16-nearest" };
    for (int k = 0; k < 6; k++) {
        lm_fixture f;
        lm_make(&f, presets[k], 1, 32, 2, 8, 11, 2, 8, 17);
        emu_stats st;
        emu_stats_init(&st);
        f.ctx.stats = &st;
        lm_step(&f);
        const double loss = f.m.loss.data[0];
        ck_assert_msg(isfinite(loss) && fabs(loss - log(11.0)) < 0.5,
                      "%s: loss %g", presets[k], loss);
        const bool q = f.p.q_weight.on;
        const char *sites[] = { "h0.attn.qkv.q.x", "h0.attn.qkv.q.w",
                                "h0.mlp.proj.q.dy", "h0.attn.proj.q.w.dx",
                                "lm_head.q.x" };
        for (int s = 0; s < 5; s++)
            ck_assert_msg(has_site(&st, sites[s]) == (q && !(s == 4 &&
                                                             f.m.layers[f.m.n_layers - 1].exempt)),
                          "%s: site %s", presets[k], sites[s]);
        ck_assert(has_site(&st, "h0.attn.qkv.matmul"));
        ck_assert(has_site(&st, "lm_head.matmul"));
        ck_assert(has_site(&st, "lm_head.dweight"));
        ck_assert(has_site(&st, "wte.dweight"));
        ck_assert(has_site(&st, "h0.grad_add"));
        ck_assert(!has_site(&st, "h0.attn.q.x"));
        f.ctx.stats = NULL;
        emu_stats_free(&st);
        lm_free(&f);
    }
}
END_TEST

/* FP8 recipe: the embeddings are "first", the head "last". */
START_TEST(exemptions)
{
    lm_fixture f;
    lm_make(&f, "fp8-hybrid", 1, 16, 2, 8, 11, 2, 8, 19);
    for (int i = 0; i < f.m.n_layers; i++) {
        const emu_layer *l = &f.m.layers[i];
        bool want = i < 3 || i == f.m.n_layers - 1;
        ck_assert_msg(l->exempt == want, "%s exempt %d", l->name, l->exempt);
    }
    /* ln_f's output enters the exempt head through a cast. */
    ck_assert(f.m.layers[f.m.n_layers - 1].has_xq);
    lm_step(&f);
    ck_assert(isfinite(f.m.loss.data[0]));
    lm_free(&f);
}
END_TEST

/* ---- refusals -------------------------------------------------------------- */

START_TEST(refusals)
{
    emu_policy p;
    emu_error err;
    emu_ctx ctx;
    emu_model m;
    ck_assert_int_eq(emu_policy_preset(&p, "fp32", &err), 0);
    emu_ctx_init(&ctx, 1);
    static const struct {
        const char *arch;
        int batch, seq, vocab;
        const char *says;
    } bad[] = {
        { "gpt:2-16-3-8", 2, 8, 11, "not divisible by the heads H = 3" },
        { "gpt:0-16-2-8", 2, 8, 11, "layer count L is 0" },
        { "gpt:2-0-2-8", 2, 8, 11, "width D is 0" },
        { "gpt:2-16-0-8", 2, 8, 11, "head count H is 0" },
        { "gpt:2-16-2-0", 2, 1, 11, "context T is 0" },
        { "gpt:2--16-2-8", 2, 8, 11, "'gpt:2--16-2-8': expected gpt:L-D-H-T" },
        { "gpt:2-16-2", 2, 8, 11, "'gpt:2-16-2': expected" },
        { "gpt:2-16-2-8-1", 2, 8, 11, "'gpt:2-16-2-8-1': expected" },
        { "gpt:2-16-2-8x", 2, 8, 11, "'gpt:2-16-2-8x': expected" },
        { "gpt:two", 2, 8, 11, "'gpt:two': expected" },
        { "gpt:", 2, 8, 11, "'gpt:': expected" },
        { "gpt:65-16-2-8", 2, 8, 11, "layer count L is 65, not in 1..64" },
        { "gpt:2-99999999999999999999-2-8", 2, 8, 11, "width D is" },
        { "gpt:64-8192-64-8192", 2, 8, 11, "more than 2^31" },
        { "gpt:2-16-2-8", 2, 9, 11, "9 is not in 1..8" },
        { "gpt:2-16-2-8", 2, 0, 11, "0 is not in 1..8" },
        { "gpt:2-16-2-8", 0, 8, 11, "0 is not in 1..65536" },
        { "gpt:2-16-2-8", 2, 8, 1, "1 is not in 2..1048576" },
        { "lstm:2-64", 2, 8, 11, "'lstm:2-64': the LSTM language model is not" },
        { "gpx", 2, 8, 11, "'gpx': unknown language model" },
        { "mlp:784-10", 2, 8, 11, "'mlp:784-10': unknown language model" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&err, 0, sizeof err);
        ck_assert_msg(emu_model_build_lm(&m, bad[i].arch, &p, bad[i].batch,
                                         bad[i].seq, bad[i].vocab, 1, &ctx,
                                         &err) == -1, "%s accepted", bad[i].arch);
        ck_assert_msg(strstr(err.message, bad[i].says), "%s: '%s' lacks '%s'",
                      bad[i].arch, err.message, bad[i].says);
        ck_assert_ptr_null(m.layers);
        ck_assert_ptr_null(m.tokens);
    }
    /* The image builder sends language models away, by name. */
    ck_assert_int_eq(emu_model_build(&m, "gpt:2-16-2-8", &p, 2, 1, 28, 28, 10, 1,
                                     &ctx, &err), -1);
    ck_assert_msg(strstr(err.message, "'gpt:2-16-2-8' is a language model"), "%s",
                  err.message);
    ck_assert(emu_arch_is_lm("gpt") && emu_arch_is_lm("gpt:1-8-1-8") &&
              emu_arch_is_lm("lstm") && emu_arch_is_lm("lstm:2-64"));
    ck_assert(!emu_arch_is_lm("gpt2") && !emu_arch_is_lm("mlp:784-10") &&
              !emu_arch_is_lm("cnn") && !emu_arch_is_lm(NULL) &&
              !emu_arch_is_lm("lstmx"));
    /* A token outside the vocabulary is refused by the forward pass. */
    lm_fixture f;
    lm_make(&f, "fp32", 1, 8, 2, 8, 11, 2, 8, 23);
    f.m.tokens[5] = 11;
    ck_assert_int_eq(emu_model_forward(&f.m, &f.ctx, &f.p), -1);
    ck_assert_msg(strstr(f.ctx.err.message, "11"), "%s", f.ctx.err.message);
    lm_free(&f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nn_lm");
    TCase *t = tcase_create("gpt");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, gradient_gpt);
    tcase_add_test(t, gradient_gpt_short_window);
    tcase_add_test(t, tied_head_gradient);
    tcase_add_test(t, determinism);
    tcase_add_test(t, named_tensors);
    tcase_add_test(t, initialisation);
    tcase_add_test(t, weights_round_trip);
    tcase_add_test(t, scaled_presets);
    tcase_add_test(t, exemptions);
    tcase_add_test(t, refusals);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
