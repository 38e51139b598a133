/*
 * test_nn.c — the training layer (emu/nn.h): gradients of every layer and
 * of whole models against central finite differences, and the model,
 * policy and training-loop refusals that a C caller meets.
 *
 * Gradient checks.  The models run under the fp32 preset with the exact
 * accumulator, so every value is the binary32 rounding of an exactly
 * computed quantity.  The loss is recomputed in binary64 from the binary32
 * logits, and for a coordinate v (a parameter, or an element of the input
 * of a layer) the central difference D = (L(v + h) - L(v - h)) / 2h is
 * compared with the gradient the backward pass produced.  Its tolerance is
 * derived, not guessed:
 *   noise   the forward pass rounds each activation y_j with a relative
 *           error of at most 2^-24 (twice for linear layers: the product
 *           and the bias are separate ops), so each loss value is off by at
 *           most N = sum_j 2^-24 k_j |dL/dy_j| |y_j| to first order; the
 *           difference of two is off by N / h at most (N measured at the
 *           base point from the backward pass's own activation gradients);
 *   trunc.  with the ReLU and max-pool patterns fixed, the logits are
 *           affine in any one parameter or input (GELU adds a bounded
 *           curvature), so the error of the central difference is
 *           h^2 / 6 |L'''| with L''' a third cumulant of the softmax,
 *           below 0.1 R^3 for logits that move at rate R; R is taken as
 *           twice the fastest observed logit rate, and the bound doubled
 *           (at h = 2^-10 this term is negligible anyway);
 *   grad.   the analytic gradient is itself rounded along a few layers:
 *           2^-20 |g|.
 * The whole is doubled for second-order terms.  (Observed errors are 1-7%
 * of these tolerances; each case prints its worst ratio, and how many of
 * its checks are "sharp": tolerance below a tenth of the gradient.)  A
 * perturbation that flips a ReLU or moves a max-pool's choice crosses a
 * kink where the loss has no derivative (ties of a max-pool after a ReLU
 * are common): such a move is retried with smaller steps, then skipped;
 * every layer must still have at least 8 checked coordinates and a
 * quarter of those it tried (it cannot pass by skipping).  Sample sizes
 * scale with EMU_TEST_SCALE.
 * A gradient with the wrong transposition or a missing term misses by
 * orders of magnitude more than the tolerance (checked by mutations:
 * a transposed weight in the input or weight gradient, GELU's derivative
 * taken at its output, an unflipped conv kernel, a missing conv bias
 * gradient, a wrong max-pool choice); the square layers of the MLPs
 * (16 x 16) let a transposed weight pass the shape checks, so that only
 * the values can catch it.
 *
 * Then: loss and per-layer scales enter the backward pass exactly; the
 * FP8 recipe's exemptions and stochastic errors; model shapes and
 * initialisation; presets and policy refusals; and a resume with another
 * configuration through the API.  (emu train's folders, determinism,
 * resume and presets in training are tested by tests/cli/train_*.sh.)
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_internal.h" /* batch norm's saved statistics */
#include "testutil.h"

/* Step of the central differences: large enough that the rounding noise
 * over h stays far below typical gradients, small enough that few kinks
 * are crossed and the truncation error is negligible. */
static const double FD_H = 0x1p-10;

/* ---- a model under test ------------------------------------------------ */

typedef struct fixture {
    emu_policy p;
    emu_ctx ctx;
    emu_model m;
    int *labels;
    int batch;
} fixture;

static void fixture_make(fixture *f, const char *arch, int batch, int c, int h,
                         int w, int classes, uint64_t seed)
{
    emu_error err;
    memset(f, 0, sizeof *f);
    if (emu_policy_preset(&f->p, "fp32", &err) ||
        emu_policy_set(&f->p, "accum=exact", &err) ||
        emu_policy_validate(&f->p, &err))
        ck_abort_msg("policy: %s", err.message);
    emu_ctx_init(&f->ctx, seed);
    if (emu_model_build(&f->m, arch, &f->p, batch, c, h, w, classes, seed,
                        &f->ctx, &err))
        ck_abort_msg("build %s: %s: %s", arch, err.key, err.message);
    f->batch = batch;
    f->labels = malloc((size_t)batch * sizeof *f->labels);
    ck_assert_ptr_nonnull(f->labels);

    /* Inputs in [0, 1) like images, labels and biases random (the builder
     * zeroes biases; nonzero ones make the check general). */
    test_rng g = test_rng_make(seed);
    float *x = malloc(f->m.x.n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < f->m.x.n; i++)
        x[i] = (float)ldexp((double)(test_next(&g) >> 40), -24);
    if (emu_t_load(&f->ctx, "input", &f->m.x, x, f->m.x.n, &test_rne))
        ck_abort_msg("load: %s", f->ctx.err.message);
    free(x);
    for (int i = 0; i < batch; i++)
        f->labels[i] = (int)test_below(&g, (uint64_t)classes);
    for (int i = 0; i < f->m.n_layers; i++) {
        emu_layer *l = &f->m.layers[i];
        if (!l->has_params)
            continue;
        for (size_t j = 0; j < l->bias.w.n; j++)
            l->bias.w.data[j] =
                (float)ldexp((double)(test_next(&g) >> 44) - 524288.0, -22);
    }
}

static void fixture_free(fixture *f)
{
    emu_model_free(&f->m);
    free(f->labels);
}

static const emu_tensor *logits_of(const emu_model *m)
{
    return &m->layers[m->n_layers - 1].y;
}

/* Mean cross-entropy of the current logits, in binary64. */
static double loss64(const emu_model *m, const int *labels)
{
    const emu_tensor *z = logits_of(m);
    const int k = m->classes;
    double sum = 0.0;
    for (int b = 0; b < m->batch; b++) {
        const float *row = z->data + (size_t)b * (size_t)k;
        double mx = row[0];
        for (int j = 1; j < k; j++)
            mx = fmax(mx, (double)row[j]);
        double s = 0.0;
        for (int j = 0; j < k; j++)
            s += exp((double)row[j] - mx);
        sum += log(s) + mx - (double)row[labels[b]];
    }
    return sum / m->batch;
}

/* The kinks of the model at its current point: the sign of every ReLU's
 * input and every max-pool's choice. */
typedef struct pattern {
    size_t n;
    size_t *v;
} pattern;

static pattern pattern_take(const emu_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const emu_layer *l = &m->layers[i];
        if (l->kind == EMU_LAYER_RELU || l->kind == EMU_LAYER_MAXPOOL)
            n += l->y.n;
    }
    pattern pt = { n, malloc((n ? n : 1) * sizeof(size_t)) };
    ck_assert_ptr_nonnull(pt.v);
    size_t k = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const emu_layer *l = &m->layers[i];
        if (l->kind == EMU_LAYER_RELU)
            for (size_t j = 0; j < l->y.n; j++)
                pt.v[k++] = l->in->data[j] > 0.0f;
        else if (l->kind == EMU_LAYER_MAXPOOL)
            for (size_t j = 0; j < l->y.n; j++)
                pt.v[k++] = l->argmax[j];
    }
    return pt;
}

static bool pattern_same(const pattern *a, const pattern *b)
{
    return a->n == b->n && !memcmp(a->v, b->v, a->n * sizeof(size_t));
}

/* The model from layer k on, fed by the tensor that is layer k's input:
 * perturbing that tensor and running this forward gives the loss as a
 * function of layer k's input.  Its layers are copies (sharing every
 * buffer) whose sources count from k, layer k - 1 becoming the input;
 * free them with tail_free. */
static emu_model tail_from(const emu_model *m, int k)
{
    emu_model t = *m;
    t.n_layers = m->n_layers - k;
    t.layers = malloc((size_t)t.n_layers * sizeof *t.layers);
    ck_assert_ptr_nonnull(t.layers);
    memcpy(t.layers, m->layers + k, (size_t)t.n_layers * sizeof *t.layers);
    for (int i = 0; i < t.n_layers; i++) {
        emu_layer *l = &t.layers[i];
        ck_assert(l->src >= k - 1 && (l->kind != EMU_LAYER_ADD || l->src2 >= k - 1));
        l->src = l->src >= k ? l->src - k : -1;
        l->src2 = l->src2 >= k ? l->src2 - k : -1;
    }
    t.x = k ? m->layers[k - 1].y : m->x;
    t.x.owns_data = false;
    return t;
}

static void tail_free(emu_model *t)
{
    free(t->layers);
}

static double forward_loss(fixture *f, emu_model *tail)
{
    if (emu_model_forward(tail, &f->ctx, &f->p))
        ck_abort_msg("forward: %s", f->ctx.err.message);
    return loss64(&f->m, f->labels);
}

/* First-order bound on the rounding error of the binary64 loss of the
 * forward pass from layer k on (see the header comment); dys[i] is the
 * gradient of the loss w.r.t. layer i's output. */
static double noise_bound(const emu_model *m, int k, float *const *dys)
{
    double nb = 0.0;
    for (int i = k; i < m->n_layers; i++) {
        const emu_layer *l = &m->layers[i];
        double roundings = l->kind == EMU_LAYER_LINEAR ? 2.0
                         : l->kind == EMU_LAYER_CONV || l->kind == EMU_LAYER_GELU
                             ? 1.0 : 0.0; /* ReLU, pool, flatten: exact */
        if (roundings == 0.0)
            continue;
        for (size_t j = 0; j < l->y.n; j++)
            nb += roundings * fabs((double)dys[i][j] * (double)l->y.data[j]);
    }
    return nb * 0x1p-24;
}

/* Statistics of one gradient check. */
typedef struct fd_result {
    int checked, skipped;
    double worst;        /* largest error / tolerance                    */
    int sharp;           /* checks whose tolerance is < |gradient| / 10   */
} fd_result;

/* One central difference: v[j] moved by +-h (j < n), or every v[i] by
 * +-h dir[i] (j == n, a directional derivative).  Returns false if the
 * move crossed a kink. */
typedef struct probe {
    double fd;           /* (L+ - L-) / 2h                               */
    double an;           /* the backward pass's gradient along the move  */
    double an_abs;       /* the same with |gradient|: its rounding scale */
    double rate;         /* the fastest logit change per unit of the move */
    double lp, lm;
} probe;

static bool probe_at(fixture *f, emu_model *tail, float *v, const float *grad,
                     size_t n, size_t j, const signed char *dir, double h,
                     const pattern *p0, probe *pr)
{
    const emu_tensor *z = logits_of(&f->m);
    const size_t lo = j < n ? j : 0, hi = j < n ? j + 1 : n;
    float *saved = malloc((hi - lo) * sizeof *saved);
    double *zp = malloc(z->n * sizeof *zp);
    ck_assert(saved && zp);
    memcpy(saved, v + lo, (hi - lo) * sizeof *saved);
    /* The perturbed values are binary32: the gradient is taken along the
     * steps actually made. */
    pr->an = pr->an_abs = 0.0;
    for (size_t i = lo; i < hi; i++) {
        double d = j < n ? 1.0 : dir[i];
        double up = (float)(saved[i - lo] + d * h), dn = (float)(saved[i - lo] - d * h);
        pr->an += (double)grad[i] * (up - dn) / (2.0 * h);
        pr->an_abs += fabs((double)grad[i] * (up - dn) / (2.0 * h));
        v[i] = (float)up;
    }
    pr->lp = forward_loss(f, tail);
    for (size_t i = 0; i < z->n; i++)
        zp[i] = z->data[i];
    pattern pp = pattern_take(&f->m);
    for (size_t i = lo; i < hi; i++) {
        double d = j < n ? 1.0 : dir[i];
        v[i] = (float)(saved[i - lo] - d * h);
    }
    pr->lm = forward_loss(f, tail);
    pattern pm = pattern_take(&f->m);
    memcpy(v + lo, saved, (hi - lo) * sizeof *saved);
    bool smooth = pattern_same(p0, &pp) && pattern_same(p0, &pm);
    pr->fd = (pr->lp - pr->lm) / (2.0 * h);
    pr->rate = 0.0;
    for (size_t i = 0; i < z->n; i++)
        pr->rate = fmax(pr->rate, fabs(zp[i] - (double)z->data[i]) / (2.0 * h));
    free(pp.v);
    free(pm.v);
    free(saved);
    free(zp);
    return smooth;
}

/* Checks `grad` (n values, the backward pass's gradient of the loss
 * w.r.t. the n binary32 values at v, which the forward pass from layer k
 * reads) at `count` sampled coordinates and along one random direction.
 * A move that crosses a kink is retried with h / 4 and h / 16 (a
 * direction, which crosses more, down to h / 4^6) before it is skipped. */
static void check_tensor(fixture *f, int k, float *v, const float *grad,
                         size_t n, int count, double noise, const char *what,
                         test_rng *g, fd_result *res)
{
    emu_model tail = tail_from(&f->m, k);
    (void)forward_loss(f, &tail);
    pattern p0 = pattern_take(&f->m);
    signed char *dir = malloc(n);
    ck_assert_ptr_nonnull(dir);
    for (size_t i = 0; i < n; i++)
        dir[i] = test_next(g) & 1 ? 1 : -1;
    const bool all = (size_t)count >= n;
    const int probes = all ? (int)n + 1 : count + 1;
    for (int s = 0; s < probes; s++) {
        /* The last probe is the directional one. */
        const bool directional = s == probes - 1;
        const size_t j = directional ? n : all ? (size_t)s
                                               : (size_t)test_below(g, n);
        probe pr;
        double h = FD_H;
        bool smooth = false;
        for (int t = 0; t < (directional ? 7 : 3) && !smooth; t++, h /= 4.0)
            smooth = probe_at(f, &tail, v, grad, n, j, dir, h, &p0, &pr);
        if (!smooth) {
            res->skipped++;
            continue;
        }
        h *= 4.0; /* the step of the smooth probe */
        const double trunc = 2.0 * h * h / 6.0 * 0.1 * pow(2.0 * pr.rate, 3.0);
        const double tol = 2.0 * (noise / h + trunc + 0x1p-20 * pr.an_abs);
        const double e = fabs(pr.fd - pr.an);
        res->checked++;
        res->sharp += tol < 0.1 * fabs(pr.an);
        if (e / tol > res->worst)
            res->worst = e / tol;
        char where[32];
        if (directional)
            snprintf(where, sizeof where, "random direction");
        else
            snprintf(where, sizeof where, "[%zu] (v = %a)", j, (double)v[j]);
        EXPECT(e <= tol,
               "%s %s %s: backward %a (%.9g), central difference %a (%.9g), "
               "error %.3g > tolerance %.3g (noise %.3g, truncation %.3g; "
               "h = %a, L(v+h) = %.17g, L(v-h) = %.17g)",
               f->m.arch, what, where, pr.an, pr.an, pr.fd, pr.fd, e, tol,
               noise / h, trunc, h, pr.lp, pr.lm);
    }
    free(dir);
    free(p0.v);
    tail_free(&tail);
    /* Leave the model as the backward pass saw it (and every layer's
     * input pointer on the model's own tensors, not on `tail`). */
    (void)forward_loss(f, &f->m);
}

static float *copy_of(const emu_tensor *t)
{
    float *c = malloc((t->n ? t->n : 1) * sizeof *c);
    ck_assert_ptr_nonnull(c);
    memcpy(c, t->data, t->n * sizeof *c);
    return c;
}

/* The gradient check of a whole model: every parameter tensor at
 * `per_tensor` coordinates, and the input of every layer whose input
 * gradient the backward pass produces.  Returns the layer kinds whose
 * input gradient was checked (bit k for emu_layer_kind k). */
static unsigned check_model(const char *arch, int batch, int c, int h, int w,
                        int classes, int per_tensor, uint64_t seed)
{
    fixture f;
    fixture_make(&f, arch, batch, c, h, w, classes, seed);
    emu_model *m = &f.m;
    const int n = m->n_layers;
    if (emu_model_forward(m, &f.ctx, &f.p) ||
        emu_model_backward(m, &f.ctx, &f.p, f.labels, 1.0f))
        ck_abort_msg("%s: %s", arch, f.ctx.err.message);

    /* Save what the backward pass produced before the differences move
     * the activations: dys[i] = dL/d(output of layer i). */
    float **dys = calloc((size_t)n, sizeof *dys);
    float **dxs = calloc((size_t)n, sizeof *dxs);
    float **gw = calloc((size_t)n, sizeof *gw), **gb = calloc((size_t)n, sizeof *gb);
    ck_assert(dys && dxs && gw && gb);
    int first_param = 0;
    while (!m->layers[first_param].has_params)
        first_param++;
    for (int i = 0; i < n; i++) {
        const emu_layer *l = &m->layers[i];
        if (i > first_param)
            dxs[i] = copy_of(&l->dx);
        if (l->has_params) {
            gw[i] = copy_of(&l->weight.g);
            gb[i] = copy_of(&l->bias.g);
        }
    }
    /* (NULL below the first parameter layer, where nothing is checked.) */
    for (int i = 0; i < n; i++)
        dys[i] = i == n - 1 ? copy_of(&m->dlogits) : dxs[i + 1];

    test_rng g = test_rng_make(seed ^ 0xfd);
    char what[64];
    unsigned kinds = 0;
    for (int i = 0; i < n; i++) {
        emu_layer *l = &m->layers[i];
        fd_result res = { 0, 0, 0.0, 0 };
        /* The loss as a function of this layer's parameters and input
         * goes through layers i.. n-1 only. */
        if (i >= first_param) {
            double noise = noise_bound(m, i, dys);
            if (l->has_params) {
                snprintf(what, sizeof what, "%s.w", l->name);
                check_tensor(&f, i, l->weight.w.data, gw[i], l->weight.w.n,
                             per_tensor, noise, what, &g, &res);
                snprintf(what, sizeof what, "%s.b", l->name);
                check_tensor(&f, i, l->bias.w.data, gb[i], l->bias.w.n,
                             per_tensor, noise, what, &g, &res);
            }
            if (i > first_param) {
                emu_tensor *in = i ? &m->layers[i - 1].y : &m->x;
                snprintf(what, sizeof what, "%s.input", l->name);
                check_tensor(&f, i, in->data, dxs[i], in->n, per_tensor,
                             noise, what, &g, &res);
                kinds |= 1u << l->kind;
            }
        }
        if (res.checked + res.skipped)
            fprintf(stderr, "  %-22s %-8s checked %3d (sharp %3d) skipped %2d "
                    "worst error/tolerance %.3g\n", arch, l->name, res.checked,
                    res.sharp, res.skipped, res.worst);
        EXPECT(res.checked + res.skipped == 0 ||
                   (res.checked >= 8 && 4 * res.checked >= res.checked + res.skipped),
               "%s %s: %d of %d coordinates crossed a kink, %d checked: the "
               "check would be vacuous", arch, l->name, res.skipped,
               res.checked + res.skipped, res.checked);
    }
    for (int i = 0; i < n; i++) {
        free(dxs[i]);
        free(gw[i]);
        free(gb[i]);
    }
    free(dys[n - 1]);
    free(dys);
    free(dxs);
    free(gw);
    free(gb);
    fixture_free(&f);
    return kinds;
}

#define KIND(k) (1u << (k))

/* Flatten, linear (its square middle layer), ReLU; every parameter. */
START_TEST(gradient_mlp)
{
    unsigned k = check_model("mlp:36-16-16-5", 4, 1, 6, 6, 5,
                             (int)test_scaled(40, 24), 11);
    ck_assert_uint_eq(k, KIND(EMU_LAYER_LINEAR) | KIND(EMU_LAYER_RELU));
}
END_TEST

START_TEST(gradient_mlp_gelu)
{
    unsigned k = check_model("mlp-gelu:36-16-16-5", 4, 1, 6, 6, 5,
                             (int)test_scaled(40, 24), 12);
    ck_assert_uint_eq(k, KIND(EMU_LAYER_LINEAR) | KIND(EMU_LAYER_GELU));
}
END_TEST

/* A small LeNet: 2 x 16 x 16 in, conv5 (3, padded) 16 x 16, pool 8 x 8,
 * conv5 (4) 4 x 4, pool 2 x 2, flatten 16, fc 8, fc 5. */
START_TEST(gradient_cnn)
{
    unsigned k = check_model("cnn:3-4-8", 3, 2, 16, 16, 5,
                             (int)test_scaled(64, 24), 13);
    ck_assert_uint_eq(k, KIND(EMU_LAYER_LINEAR) | KIND(EMU_LAYER_CONV) |
                             KIND(EMU_LAYER_MAXPOOL) | KIND(EMU_LAYER_RELU) |
                             KIND(EMU_LAYER_FLATTEN));
}
END_TEST

/* ---- the residual network ----------------------------------------------- */

static void build_with(emu_model *m, emu_ctx *ctx, const emu_policy *p,
                       const char *arch, int batch, uint64_t seed);

/* dL/d(output of each layer) after a backward pass: the sum of the input
 * gradients of the layers that read it (an addition's is its own). */
static float **output_grads(const emu_model *m)
{
    const int n = m->n_layers;
    float **d = calloc((size_t)n, sizeof *d);
    ck_assert_ptr_nonnull(d);
    d[n - 1] = copy_of(&m->dlogits);
    for (int i = n - 2; i >= 0; i--) {
        const emu_layer *l = &m->layers[i];
        size_t cnt = l->y.n;
        d[i] = calloc(cnt, sizeof **d);
        ck_assert_ptr_nonnull(d[i]);
        for (int k = i + 1; k < n; k++) {
            const emu_layer *c = &m->layers[k];
            int reads = (c->src == i) + (c->kind == EMU_LAYER_ADD && c->src2 == i);
            for (int r = 0; r < reads; r++)
                for (size_t j = 0; j < cnt; j++)
                    d[i][j] += c->kind == EMU_LAYER_ADD ? d[k][j] : c->dx.data[j];
        }
    }
    return d;
}

/* First-order bound on the rounding noise of the binary64 loss of a
 * forward pass (as noise_bound, for any graph): each output rounded once
 * (linear layers twice, ReLU exact), and a batch norm's output moved, in
 * addition, by the roundings of its statistics: its mean (gamma inv
 * ulp(mean) / 2), its centred value (|y - beta| 2^-24) and its variance
 * (|y - beta| 2^-25).  *rms receives the root of the sum of the squares of
 * the same terms (the scale of the noise if the roundings were
 * independent). */
static double graph_noise(const emu_model *m, float *const *dys, double *rms)
{
    double nb = 0.0, sq = 0.0;
    for (int i = 0; i < m->n_layers; i++) {
        const emu_layer *l = &m->layers[i];
        double k = l->kind == EMU_LAYER_LINEAR ? 2.0
                 : l->kind == EMU_LAYER_RELU || l->kind == EMU_LAYER_MAXPOOL ||
                           l->kind == EMU_LAYER_FLATTEN ? 0.0 : 1.0;
        if (k == 0.0)
            continue;
        const size_t hw = l->kind == EMU_LAYER_BATCHNORM
                              ? (size_t)l->out_dims[1] * (size_t)l->out_dims[2] : 1;
        for (size_t j = 0; j < l->y.n; j++) {
            double y = l->y.data[j], e = k * fabs(y);
            if (l->kind == EMU_LAYER_BATCHNORM) {
                size_t c = (j / hw) % (size_t)l->out_dims[0];
                double beta = l->bias.w.data[c], gamma = l->weight.w.data[c];
                double inv = 1.0 / sqrt((double)l->priv->bn_var.data[c] + 1e-5);
                e += 2.0 * fabs(y - beta) +
                     fabs(gamma) * inv * fabs((double)l->priv->bn_mean.data[c]);
            }
            nb += fabs((double)dys[i][j]) * e;
            sq += ((double)dys[i][j] * e) * ((double)dys[i][j] * e);
        }
    }
    *rms = sqrt(sq) * 0x1p-24;
    return nb * 0x1p-24;
}

/* The whole resnet:1 (every kind of its layers, the residual additions
 * and the gradient sums of the shortcuts) against central differences in
 * its parameters, fp32 preset, exact accumulator, on 2 images of 8 x 8
 * (layer1 at 8 x 8, layer2 at 4 x 4, layer3 at 2 x 2: every tap of every
 * convolution meets data, and each batch norm sums at least 8 values per
 * channel; each probe is four passes over the whole model, the test's
 * whole cost, so the batch is kept small).
 * Two tolerances, both doubled, both with the truncation error estimated
 * from the difference of the central differences at h and 2h (batch norm
 * makes the loss curved in every parameter, so the affine argument of
 * check_tensor does not hold) and the backward pass's own roundings 2^-20
 * |g|:
 *   rigorous      the first-order worst case of the rounding noise over h
 *                 (graph_noise): every error aligned.  It holds, but over
 *                 ~10^4 activations it is as large as the gradients, so it
 *                 alone could not see a wrong one;
 *   statistical   the noise of L(v+h) - L(v-h) if the roundings were
 *                 independent, each uniform within half an ulp (standard
 *                 deviation <= 2^-24 |term| / sqrt(3)), at 6 standard
 *                 deviations: sqrt(2) 6 / sqrt(3) rms / 2h.  The errors
 *                 stay far below it (the run prints the worst ratio), and
 *                 it is sharp (below a tenth of the gradient) for most
 *                 coordinates, which the test requires. */
START_TEST(gradient_resnet)
{
    fixture f;
    fixture_make(&f, "resnet:1", 2, 1, 8, 8, 4, 21);
    emu_model *m = &f.m;
    test_rng g = test_rng_make(0x2e5);
    /* gamma away from 1, so that its gradient path is general */
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == EMU_LAYER_BATCHNORM)
            for (size_t j = 0; j < m->layers[i].weight.w.n; j++)
                m->layers[i].weight.w.data[j] =
                    (float)(0.5 + ldexp((double)(test_next(&g) >> 44), -20));
    if (emu_model_forward(m, &f.ctx, &f.p) ||
        emu_model_backward(m, &f.ctx, &f.p, f.labels, 1.0f))
        ck_abort_msg("resnet: %s", f.ctx.err.message);
    const int n = m->n_layers;
    float **dys = output_grads(m);
    float **gw = calloc((size_t)n, sizeof *gw), **gb = calloc((size_t)n, sizeof *gb);
    ck_assert(gw && gb);
    for (int i = 0; i < n; i++)
        if (m->layers[i].has_params) {
            gw[i] = copy_of(&m->layers[i].weight.g);
            if (m->layers[i].has_bias)
                gb[i] = copy_of(&m->layers[i].bias.g);
        }
    double rms;
    const double noise = graph_noise(m, dys, &rms);
    const double stat = sqrt(2.0) * 6.0 / sqrt(3.0) * rms / 2.0;
    emu_model whole = tail_from(m, 0);
    (void)forward_loss(&f, &whole);
    pattern p0 = pattern_take(m);
    const int per = (int)test_scaled(6, 3);
    int checked = 0, skipped = 0, sharp = 0, tensors = 0;
    double worst = 0.0, worst_stat = 0.0;
    for (int i = 0; i < n; i++) {
        emu_layer *l = &m->layers[i];
        if (!l->has_params)
            continue;
        for (int t = 0; t < 1 + l->has_bias; t++) {
            emu_tensor *w = t ? &l->bias.w : &l->weight.w;
            const float *grad = t ? gb[i] : gw[i];
            tensors++;
            for (int s = 0; s < per; s++) {
                size_t j = (size_t)test_below(&g, w->n);
                probe p1, p2;
                double h = FD_H;
                bool ok = false;
                for (int r = 0; r < 3 && !ok; r++, h /= 4.0)
                    ok = probe_at(&f, &whole, w->data, grad, w->n, j, NULL, h,
                                  &p0, &p1) &&
                         probe_at(&f, &whole, w->data, grad, w->n, j, NULL,
                                  2.0 * h, &p0, &p2);
                if (!ok) {
                    skipped++;
                    continue;
                }
                h *= 4.0;
                if (s == 0 && getenv("EMU_TEST_VERBOSE"))
                    fprintf(stderr, "    %s.%s: g %.3g noise/h %.3g (statistical "
                            "%.3g) |fd(h) - fd(2h)| %.3g\n", l->name,
                            t ? "b" : "w", p1.an, noise / h, stat / h,
                            fabs(p1.fd - p2.fd));
                const double rest = fabs(p1.fd - p2.fd) + 0x1p-20 * p1.an_abs;
                double tol = 2.0 * (noise / h + rest);
                double tol_stat = 2.0 * (stat / h + rest);
                double e = fabs(p1.fd - p1.an);
                checked++;
                sharp += tol_stat < 0.1 * fabs(p1.an);
                worst = fmax(worst, e / tol);
                worst_stat = fmax(worst_stat, e / tol_stat);
                EXPECT(e <= tol && e <= tol_stat, "resnet:1 %s.%s[%zu]: backward "
                       "%.9g, central difference %.9g (2h: %.9g), error %.3g > "
                       "tolerance %.3g (statistical %.3g; noise/h %.3g)", l->name,
                       t ? "b" : "w", j, p1.an, p1.fd, p2.fd, e, tol, tol_stat,
                       noise / h);
            }
        }
    }
    tail_free(&whole);
    (void)forward_loss(&f, m);
    fprintf(stderr, "  resnet:1 %d parameter tensors: checked %d (sharp %d) "
            "skipped %d worst error/tolerance %.3g (statistical %.3g)\n",
            tensors, checked, sharp, skipped, worst, worst_stat);
    /* (per is 3 under the sanitizer's reduced scale, 6 otherwise) */
    EXPECT(3 * checked >= 2 * per * tensors && 2 * sharp >= checked,
           "resnet:1: %d checked (%d sharp) of %d tensors: the check would be "
           "vacuous", checked, sharp, tensors);
    for (int i = 0; i < n; i++) {
        free(dys[i]);
        free(gw[i]);
        free(gb[i]);
    }
    free(dys);
    free(gw);
    free(gb);
    free(p0.v);
    fixture_free(&f);
}
END_TEST

/* Shapes, names (torchvision's, for the weights file and the PyTorch
 * peer), sources and parameter counts of resnet:1 and resnet:3 on
 * 28 x 28 x 1, and the initial values of batch norm. */
START_TEST(resnet_shapes)
{
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "fp32", &err))
        ck_abort_msg("%s", err.message);
    emu_model m;
    emu_ctx ctx;
    build_with(&m, &ctx, &p, "resnet:1", 2, 1);
    /* conv1 144, bn1 32, layer1 2 (2304 + 32), layer2 4608 + 64 + 9216 +
     * 64 + 512 + 64, layer3 18432 + 128 + 36864 + 128 + 2048 + 128, fc 650 */
    ck_assert_uint_eq(emu_model_param_count(&m), 77754);
    static const struct { const char *name; int kind, src, src2, c, h; } want[] = {
        { "conv1", EMU_LAYER_CONV, -1, -1, 16, 28 },
        { "bn1", EMU_LAYER_BATCHNORM, 0, -1, 16, 28 },
        { "relu", EMU_LAYER_RELU, 1, -1, 16, 28 },
        { "layer1.0.conv1", EMU_LAYER_CONV, 2, -1, 16, 28 },
        { "layer1.0.bn1", EMU_LAYER_BATCHNORM, 3, -1, 16, 28 },
        { "layer1.0.relu1", EMU_LAYER_RELU, 4, -1, 16, 28 },
        { "layer1.0.conv2", EMU_LAYER_CONV, 5, -1, 16, 28 },
        { "layer1.0.bn2", EMU_LAYER_BATCHNORM, 6, -1, 16, 28 },
        { "layer1.0.add", EMU_LAYER_ADD, 7, 2, 16, 28 },
        { "layer1.0.relu2", EMU_LAYER_RELU, 8, -1, 16, 28 },
        { "layer2.0.conv1", EMU_LAYER_CONV, 9, -1, 32, 14 },
        { "layer2.0.bn1", EMU_LAYER_BATCHNORM, 10, -1, 32, 14 },
        { "layer2.0.relu1", EMU_LAYER_RELU, 11, -1, 32, 14 },
        { "layer2.0.conv2", EMU_LAYER_CONV, 12, -1, 32, 14 },
        { "layer2.0.bn2", EMU_LAYER_BATCHNORM, 13, -1, 32, 14 },
        { "layer2.0.downsample.0", EMU_LAYER_CONV, 9, -1, 32, 14 },
        { "layer2.0.downsample.1", EMU_LAYER_BATCHNORM, 15, -1, 32, 14 },
        { "layer2.0.add", EMU_LAYER_ADD, 14, 16, 32, 14 },
        { "layer2.0.relu2", EMU_LAYER_RELU, 17, -1, 32, 14 },
        { "layer3.0.conv1", EMU_LAYER_CONV, 18, -1, 64, 7 },
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const emu_layer *l = &m.layers[i];
        EXPECT(!strcmp(l->name, want[i].name) && (int)l->kind == want[i].kind &&
                   l->src == want[i].src && l->src2 == want[i].src2 &&
                   l->out_dims[0] == want[i].c && l->out_dims[1] == want[i].h,
               "layer %zu: %s kind %d src %d/%d out (%d, %d), expected %s", i,
               l->name, (int)l->kind, l->src, l->src2, l->out_dims[0],
               l->out_dims[1], want[i].name);
    }
    const emu_layer *ds = &m.layers[15], *bn = &m.layers[16];
    ck_assert(ds->stride == 2 && ds->ksize == 1 && ds->pad == 0 && !ds->has_bias);
    ck_assert(m.layers[10].stride == 2 && m.layers[10].ksize == 3 &&
              m.layers[10].pad == 1);
    ck_assert(ds->bias.w.data == NULL && ds->bias.w.n == 0);
    ck_assert(bn->has_params && bn->has_bias && bn->weight.w.n == 32 &&
              bn->bias.w.n == 32 && bn->running_mean.n == 32 &&
              bn->running_var.n == 32);
    for (size_t c = 0; c < 32; c++)
        ck_assert(bn->weight.w.data[c] == 1.0f && bn->bias.w.data[c] == 0.0f &&
                  bn->running_mean.data[c] == 0.0f &&
                  bn->running_var.data[c] == 1.0f);
    ck_assert_str_eq(m.layers[m.n_layers - 2].name, "avgpool");
    ck_assert_int_eq(m.layers[m.n_layers - 2].out_ndim, 1);
    ck_assert_str_eq(m.layers[m.n_layers - 1].name, "fc");
    ck_assert(m.layers[m.n_layers - 1].has_bias);
    ck_assert_int_eq(m.n_layers, 30);
    emu_model_free(&m);
    /* ResNet-20: 0.27 M parameters, as He et al. report (1 input channel) */
    build_with(&m, &ctx, &p, "resnet:3", 2, 1);
    ck_assert_uint_eq(emu_model_param_count(&m), 272186);
    ck_assert_str_eq(m.layers[m.n_layers - 3].name, "layer3.2.relu2");
    emu_model_free(&m);
    /* adaptive per-layer scaling is refused on the graph */
    if (emu_policy_preset(&p, "adaptive", &err))
        ck_abort_msg("%s", err.message);
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_model_build(&m, "resnet:1", &p, 2, 1, 28, 28, 10, 1,
                                     &ctx, &err), -1);
    ck_assert_int_eq(err.code, EMU_ESPEC);
    ck_assert_ptr_nonnull(strstr(err.message, "adaptive"));
}
END_TEST

/* Evaluation mode: batch norm normalises with its running statistics,
 * which it leaves alone, so an example's logits do not depend on the rest
 * of its batch (in training mode they do: the check can fail). */
START_TEST(resnet_eval_mode)
{
    fixture f;
    fixture_make(&f, "resnet:1", 4, 1, 8, 8, 4, 22);
    emu_model *m = &f.m;
    /* two training passes move the running statistics off 0 and 1 */
    for (int k = 0; k < 2; k++)
        if (emu_model_forward(m, &f.ctx, &f.p))
            ck_abort_msg("%s", f.ctx.err.message);
    const emu_layer *bn = &m->layers[1];
    ck_assert(bn->kind == EMU_LAYER_BATCHNORM);
    float *rm = NULL, *rv = NULL;
    const size_t k = (size_t)m->classes;
    float row_train[8], row_eval[8];
    for (int mode = 0; mode < 2; mode++) {
        m->eval = mode == 1;
        if (mode == 1) {
            rm = copy_of(&bn->running_mean);
            rv = copy_of(&bn->running_var);
            ck_assert(rm[0] != 0.0f && rv[0] != 1.0f);
        }
        float *x0 = copy_of(&m->x);
        if (emu_model_forward(m, &f.ctx, &f.p))
            ck_abort_msg("%s", f.ctx.err.message);
        float *row = mode ? row_eval : row_train;
        memcpy(row, logits_of(m)->data, k * sizeof *row);
        if (mode == 1) {
            ck_assert(!memcmp(rm, bn->running_mean.data, 16 * sizeof(float)));
            ck_assert(!memcmp(rv, bn->running_var.data, 16 * sizeof(float)));
            /* bn1's output is the running-statistics formula, rounded once */
            const emu_tensor *x = &m->layers[0].y, *y = &bn->y;
            for (size_t j = 0; j < y->n; j += 7) {
                size_t c = (j / 64) % 16;
                double v = bn->weight.w.data[c] *
                               ((double)x->data[j] - rm[c]) /
                               sqrt((double)rv[c] + 1e-5) +
                           bn->bias.w.data[c];
                EXPECT(fabs(y->data[j] - v) <= 0x1p-23 * fabs(v) + 1e-30,
                       "eval bn1[%zu] %.9g vs %.17g", j, y->data[j], v);
            }
        }
        /* other images in the rest of the batch */
        for (size_t j = 64; j < m->x.n; j++)
            m->x.data[j] = m->x.data[j] * 0.5f + 0.25f;
        if (emu_model_forward(m, &f.ctx, &f.p))
            ck_abort_msg("%s", f.ctx.err.message);
        bool same = !memcmp(row, logits_of(m)->data, k * sizeof *row);
        EXPECT(same == (mode == 1), "%s mode: example 0's logits %s with the "
               "rest of the batch", mode ? "evaluation" : "training",
               same ? "do not change" : "change");
        memcpy(m->x.data, x0, m->x.n * sizeof *x0);
        free(x0);
    }
    m->eval = false;
    free(rm);
    free(rv);
    fixture_free(&f);
}
END_TEST

/* ---- scales in the backward pass ----------------------------------------- */

static void expect_scaled(const float *got, const float *base, size_t n,
                          double factor, const char *what)
{
    for (size_t i = 0; i < n; i++)
        EXPECT((double)got[i] == factor * (double)base[i],
               "%s[%zu]: %a with the scale, %a without: not exactly %g times",
               what, i, (double)got[i], (double)base[i], factor);
}

/* In binary32 without overflow or underflow, a loss scale 2^k multiplies
 * every gradient by exactly 2^k; a per-layer factor (layer.scale) lifts
 * that layer's input gradient and everything below it, but not its own
 * weight gradient. */
START_TEST(scales_are_exact)
{
    fixture f;
    fixture_make(&f, "mlp:36-16-16-5", 4, 1, 6, 6, 5, 21);
    emu_model *m = &f.m;
    const int fc1 = 1, fc2 = 3, fc3 = 5;
    ck_assert_int_eq(m->layers[fc2].kind, EMU_LAYER_LINEAR);
    if (emu_model_forward(m, &f.ctx, &f.p) ||
        emu_model_backward(m, &f.ctx, &f.p, f.labels, 1.0f))
        ck_abort_msg("%s", f.ctx.err.message);
    float *g1 = copy_of(&m->layers[fc1].weight.g);
    float *g2 = copy_of(&m->layers[fc2].weight.g);
    float *g3 = copy_of(&m->layers[fc3].weight.g);
    float *b1 = copy_of(&m->layers[fc1].bias.g);
    float *d2 = copy_of(&m->layers[fc2].dx);

    /* Gradient tensor, saved copy, factor. */
#define SCALED(t, base, k, what) \
    expect_scaled((t).data, base, (t).n, k, what)
    if (emu_model_backward(m, &f.ctx, &f.p, f.labels, 1024.0f))
        ck_abort_msg("%s", f.ctx.err.message);
    SCALED(m->layers[fc1].weight.g, g1, 1024.0, "S: fc1.w.grad");
    SCALED(m->layers[fc1].bias.g, b1, 1024.0, "S: fc1.b.grad");
    SCALED(m->layers[fc3].weight.g, g3, 1024.0, "S: fc3.w.grad");

    m->layers[fc2].scale = 8.0;
    if (emu_model_backward(m, &f.ctx, &f.p, f.labels, 1.0f))
        ck_abort_msg("%s", f.ctx.err.message);
    SCALED(m->layers[fc3].weight.g, g3, 1.0, "fc2 x8: fc3.w.grad");
    SCALED(m->layers[fc2].weight.g, g2, 1.0, "fc2 x8: fc2.w.grad");
    SCALED(m->layers[fc2].dx, d2, 8.0, "fc2 x8: fc2.dx");
    SCALED(m->layers[fc1].weight.g, g1, 8.0, "fc2 x8: fc1.w.grad");
    SCALED(m->layers[fc1].bias.g, b1, 8.0, "fc2 x8: fc1.b.grad");
#undef SCALED
    free(g1);
    free(g2);
    free(g3);
    free(b1);
    free(d2);
    fixture_free(&f);
}
END_TEST

/* ---- global gradient-norm clipping ---------------------------------------- */

/* The binary64 L2 norm of every parameter gradient of m. */
static double grad_norm64(const emu_model *m)
{
    double ss = 0.0;
    for (int i = 0; i < m->n_layers; i++) {
        const emu_layer *l = &m->layers[i];
        if (!l->has_params)
            continue;
        for (size_t j = 0; j < l->weight.g.n; j++)
            ss += (double)l->weight.g.data[j] * l->weight.g.data[j];
        if (l->has_bias)
            for (size_t j = 0; j < l->bias.g.n; j++)
                ss += (double)l->bias.g.data[j] * l->bias.g.data[j];
    }
    return sqrt(ss);
}

/* emu_model_clip_grad_norm under fp32 with exact sums: the norm is the
 * binary64 one within three roundings (the sums of squares, their sum,
 * the square root: < 2^-22 relative); clipped gradients have norm C
 * (coef = C / (norm + 1e-6) and one rounding per element); a norm below C
 * leaves every gradient bit for bit; under binary16 the sum of squares
 * overflows (the norm is inf) where the binary64 norm is finite, and then
 * the step is left alone (skip_nonfinite) or zeroed (PyTorch's coef 0). */
START_TEST(clip_grad_norm)
{
    fixture f;
    fixture_make(&f, "mlp:36-16-16-5", 4, 1, 6, 6, 5, 33);
    emu_model *m = &f.m;
    ck_assert(!f.p.use_master);
    if (emu_model_forward(m, &f.ctx, &f.p) ||
        emu_model_backward(m, &f.ctx, &f.p, f.labels, 1.0f))
        ck_abort_msg("%s", f.ctx.err.message);
    const int fc1 = 1;
    float *g1 = copy_of(&m->layers[fc1].weight.g);
    const double ref = grad_norm64(m);
    ck_assert(ref > 0.0 && isfinite(ref));

    /* Norm only (clip 0), and a C above the norm: nothing changes. */
    double norm = -1.0;
    ck_assert_int_eq(emu_model_clip_grad_norm(m, &f.ctx, &f.p, 0.0, true, &norm), 0);
    EXPECT(fabs(norm - ref) <= 0x1p-22 * ref, "norm %.9g, binary64 %.17g", norm, ref);
    ck_assert_int_eq(emu_model_clip_grad_norm(m, &f.ctx, &f.p, 2.0 * ref, true,
                                              &norm), 0);
    EXPECT(fabs(norm - ref) <= 0x1p-22 * ref, "norm %.9g, binary64 %.17g", norm, ref);
    EXPECT(!memcmp(g1, m->layers[fc1].weight.g.data,
                   m->layers[fc1].weight.g.n * sizeof *g1),
           "a norm below C changed the gradients");

    /* C a quarter of the norm: the clipped norm is C (to 1e-6 / norm for
     * the epsilon, and the roundings). */
    const double c = ref / 4.0;
    ck_assert_int_eq(emu_model_clip_grad_norm(m, &f.ctx, &f.p, c, true, &norm), 0);
    EXPECT(fabs(norm - ref) <= 0x1p-22 * ref, "norm %.9g, binary64 %.17g", norm, ref);
    const double after = grad_norm64(m);
    EXPECT(fabs(after - c) <= c * (1e-6 / ref + 0x1p-21), "clipped norm %.17g, "
           "C %.17g", after, c);
    const double coef = (double)((float)c / ((float)norm + 1e-6f));
    for (size_t j = 0; j < m->layers[fc1].weight.g.n; j++)
        EXPECT(m->layers[fc1].weight.g.data[j] == (float)(coef * g1[j]),
               "fc1.w.g[%zu] = %a, not %a times %a rounded", j,
               (double)m->layers[fc1].weight.g.data[j], coef, (double)g1[j]);

    /* binary16: 300^2 times 256 elements overflows 65504. */
    emu_policy p16;
    emu_error err;
    if (emu_policy_preset(&p16, "fp16-no-master", &err))
        ck_abort_msg("%s", err.message);
    ck_assert(!p16.use_master);
    for (size_t j = 0; j < m->layers[fc1].weight.g.n; j++)
        m->layers[fc1].weight.g.data[j] = 300.0f;
    ck_assert(isfinite(grad_norm64(m)));
    ck_assert_int_eq(emu_model_clip_grad_norm(m, &f.ctx, &p16, 1.0, true, &norm), 0);
    EXPECT(isinf(norm), "binary16 norm %g: the sum of squares should overflow", norm);
    EXPECT(m->layers[fc1].weight.g.data[0] == 300.0f, "a skipped step was clipped");
    ck_assert_int_eq(emu_model_clip_grad_norm(m, &f.ctx, &p16, 1.0, false, &norm), 0);
    EXPECT(m->layers[fc1].weight.g.data[0] == 0.0f, "coef 0 (inf norm) left %g",
           (double)m->layers[fc1].weight.g.data[0]);

    /* Refusals. */
    EXPECT(emu_model_clip_grad_norm(m, &f.ctx, &f.p, -1.0, true, &norm) == -1 &&
               strstr(f.ctx.err.message, "clipping norm"),
           "a negative norm: %s", f.ctx.err.message);
    EXPECT(emu_model_clip_grad_norm(m, &f.ctx, &f.p, NAN, true, &norm) == -1,
           "a NaN clipping norm was accepted");
    free(g1);
    fixture_free(&f);
}
END_TEST

/* ---- the FP8 recipe ------------------------------------------------------ */

static void build_with(emu_model *m, emu_ctx *ctx, const emu_policy *p,
                       const char *arch, int batch, uint64_t seed)
{
    emu_error err;
    emu_ctx_init(ctx, seed);
    if (emu_model_build(m, arch, p, batch, 1, 28, 28, 10, seed, ctx, &err))
        ck_abort_msg("build %s under %s: %s", arch, p->name, err.message);
}

/* fp8-e5m2: first and last parameter layers (and the layers without
 * parameters before the first) in binary16, the rest in e5m2; errors
 * rounded stochastically, so that two seeds give two sets of errors from
 * the same forward pass, which is deterministic (RNE). */
START_TEST(fp8_recipe)
{
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "fp8-e5m2", &err) || emu_policy_validate(&p, &err))
        ck_abort_msg("%s", err.message);
    ck_assert_int_eq(p.act_grad.rnd.mode, EMU_RS);
    ck_assert_int_eq(p.weight_grad.rnd.mode, EMU_RS);
    ck_assert_int_eq(p.activation.rnd.mode, EMU_RNE);

    const char *arch = "mlp:784-32-16-16-10";
    emu_model m[2];
    emu_ctx ctx[2];
    for (int k = 0; k < 2; k++)
        build_with(&m[k], &ctx[k], &p, arch, 8, 5);
    const char *want[] = { "flat1 1", "fc1 1", "relu1 1", "fc2 0", "relu2 0",
                           "fc3 0", "relu3 0", "fc4 1" };
    ck_assert_int_eq(m[0].n_layers, 8);
    for (int i = 0; i < m[0].n_layers; i++) {
        const emu_layer *l = &m[0].layers[i];
        char got[64];
        snprintf(got, sizeof got, "%s %d", l->name, (int)l->exempt);
        EXPECT(!strcmp(got, want[i]), "layer %d: '%s', expected '%s'", i, got, want[i]);
        if (l->has_params)
            EXPECT(!strcmp(l->weight.w.fmt.name, l->exempt ? "binary16" : "e5m2"),
                   "%s: weights in %s", l->name, l->weight.w.fmt.name);
    }

    test_rng g = test_rng_make(77);
    float *x = malloc(m[0].x.n * sizeof *x);
    int labels[8];
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < m[0].x.n; i++)
        x[i] = (float)ldexp((double)(test_next(&g) >> 56), -8);
    for (int i = 0; i < 8; i++)
        labels[i] = (int)test_below(&g, 10);
    for (int k = 0; k < 2; k++) {
        ctx[k].seed = 100 + (uint64_t)k; /* the SR streams, not the weights */
        if (emu_t_load(&ctx[k], "input", &m[k].x, x, m[k].x.n, &test_rne) ||
            emu_model_forward(&m[k], &ctx[k], &p) ||
            emu_model_backward(&m[k], &ctx[k], &p, labels, 1024.0f))
            ck_abort_msg("%s", ctx[k].err.message);
    }
    free(x);
    /* The forward passes agree; the e5m2 errors of fc3 (dx of the layer
     * after an exempt one is not enough: take a layer inside) differ. */
    const emu_tensor *y0 = &m[0].layers[5].y, *y1 = &m[1].layers[5].y;
    ck_assert_int_eq(memcmp(y0->data, y1->data, y0->n * sizeof(float)), 0);
    const emu_tensor *d0 = &m[0].layers[5].dx, *d1 = &m[1].layers[5].dx;
    ck_assert_str_eq(d0->fmt.name, "e5m2");
    size_t differ = 0, nonzero = 0;
    for (size_t i = 0; i < d0->n; i++) {
        differ += d0->data[i] != d1->data[i];
        nonzero += d0->data[i] != 0.0f;
    }
    EXPECT(nonzero > d0->n / 4 && differ > nonzero / 10,
           "fc3.dx under two SR seeds: %zu of %zu differ (%zu non-zero): "
           "not rounded stochastically?", differ, d0->n, nonzero);
    for (int k = 0; k < 2; k++)
        emu_model_free(&m[k]);
}
END_TEST

/* ---- model shapes and initialisation ------------------------------------- */

START_TEST(model_shapes)
{
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "fp32", &err))
        ck_abort_msg("%s", err.message);
    emu_model m;
    emu_ctx ctx;
    /* 784*256+256 + 256*128+128 + 128*10+10 */
    build_with(&m, &ctx, &p, "mlp:784-256-128-10", 4, 1);
    ck_assert_uint_eq(emu_model_param_count(&m), 235146);
    emu_model_free(&m);
    /* LeNet on 28 x 28: conv5 pad 2 (6) 28x28, pool 14x14, conv5 (16)
     * 10x10, pool 5x5, 400 -> 120 -> 84 -> 10:
     * 156 + 2416 + 48120 + 10164 + 850. */
    build_with(&m, &ctx, &p, "cnn", 4, 1);
    ck_assert_uint_eq(emu_model_param_count(&m), 61706);
    const int expect_out[][3] = { { 6, 28, 28 }, { 6, 28, 28 }, { 6, 14, 14 },
                                  { 16, 10, 10 }, { 16, 10, 10 }, { 16, 5, 5 } };
    for (int i = 0; i < 6; i++)
        for (int d = 0; d < 3; d++)
            EXPECT(m.layers[i].out_dims[d] == expect_out[i][d],
                   "cnn layer %d (%s): out dim %d is %d, expected %d", i,
                   m.layers[i].name, d, m.layers[i].out_dims[d], expect_out[i][d]);
    ck_assert_int_eq(m.layers[6].out_dims[0], 400);
    /* He-uniform: |w| <= sqrt(6 / fan_in), spread over the range; zero
     * biases; the same seed gives the same weights, another seed others. */
    emu_model m2, m3;
    emu_ctx c2, c3;
    build_with(&m2, &c2, &p, "cnn", 4, 1);
    build_with(&m3, &c3, &p, "cnn", 4, 2);
    for (int i = 0; i < m.n_layers; i++) {
        const emu_layer *l = &m.layers[i];
        if (!l->has_params)
            continue;
        const double fan_in = (double)(l->weight.w.n / l->weight.w.shape[0]);
        const double bound = sqrt(6.0 / fan_in);
        double amax = 0.0;
        for (size_t j = 0; j < l->weight.w.n; j++)
            amax = fmax(amax, fabs((double)l->weight.w.data[j]));
        EXPECT(amax <= bound && amax > 0.9 * bound,
               "%s: largest |w| %g, He-uniform bound %g", l->name, amax, bound);
        for (size_t j = 0; j < l->bias.w.n; j++)
            EXPECT(l->bias.w.data[j] == 0.0f, "%s: bias %zu is %a", l->name, j,
                   (double)l->bias.w.data[j]);
        ck_assert_int_eq(memcmp(l->weight.w.data, m2.layers[i].weight.w.data,
                                l->weight.w.n * sizeof(float)), 0);
        EXPECT(memcmp(l->weight.w.data, m3.layers[i].weight.w.data,
                      l->weight.w.n * sizeof(float)),
               "%s: seeds 1 and 2 give the same weights", l->name);
    }
    emu_model_free(&m);
    emu_model_free(&m2);
    emu_model_free(&m3);
}
END_TEST

START_TEST(model_refusals)
{
    emu_policy p;
    emu_error err;
    emu_ctx ctx;
    emu_model m;
    if (emu_policy_preset(&p, "fp32", &err))
        ck_abort_msg("%s", err.message);
    emu_ctx_init(&ctx, 1);
    static const struct { const char *arch; int h; const char *says; } bad[] = {
        { "mlp:100-10", 28, "784" },       /* input size */
        { "mlp:784-32-7", 28, "10" },       /* classes */
        { "mlp:784", 28, "output" },
        { "mlp:784-0-10", 28, "width" },
        { "mlp:784-32x-10", 28, "repeat" },
        { "mlp:784-32;10", 28, ";" },
        { "cnn:6", 28, "two conv" },
        { "cnn", 8, "smaller than the kernel" },
        { "transformer", 28, "unknown model" },
        { "resnet:0", 28, "1..9" },
        { "resnet:10", 28, "resnet:10" },
        { "resnet:two", 28, "resnet:two" },
        { "resnet:", 28, "1..9" },
        { "resnet-gelu:1", 28, "unknown model" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = emu_model_build(&m, bad[i].arch, &p, 4, 1, bad[i].h, bad[i].h,
                                 10, 1, &ctx, &err);
        EXPECT(rc == -1, "'%s' on %dx%d built", bad[i].arch, bad[i].h, bad[i].h);
        EXPECT(strstr(err.message, bad[i].says),
               "'%s': message '%s' does not say '%s'", bad[i].arch, err.message,
               bad[i].says);
    }
    EXPECT(emu_model_build(&m, "mlp:784-10", &p, 0, 1, 28, 28, 10, 1, &ctx, &err) == -1,
           "batch 0 accepted");
}
END_TEST

/* ---- presets and policies ------------------------------------------------ */

START_TEST(presets_and_policies)
{
    emu_policy p;
    emu_error err;
    int n = 0;
    for (const char *const *name = emu_policy_preset_names(); *name; name++, n++) {
        if (emu_policy_preset(&p, *name, &err) || emu_policy_validate(&p, &err))
            ck_abort_msg("preset %s: %s", *name, err.message);
        ck_assert_str_eq(p.name, *name);
        EXPECT(p.paper[0], "preset %s names no paper", *name);
    }
    ck_assert_int_ge(n, 10);
    ck_assert_int_eq(emu_policy_preset(&p, "fp7", &err), -1);
    EXPECT(strstr(err.message, "fp7") && strstr(err.message, "bf16-sr"),
           "unknown preset: '%s'", err.message);

    /* What each preset is, where its recipe is explicit. */
    emu_policy_preset(&p, "fp16-mpt", &err);
    EXPECT(p.use_master && !strcmp(p.master.fmt.name, "binary32") &&
           !strcmp(p.weight.fmt.name, "binary16") &&
           p.scaling.kind == EMU_SCALE_DYNAMIC && p.scaling.init == 65536.0 &&
           p.scaling.growth == 2.0 && p.scaling.backoff == 0.5 &&
           p.scaling.interval == 2000, "fp16-mpt is not FP16 + FP32 master + GradScaler");
    emu_policy_preset(&p, "fp16-no-master", &err);
    EXPECT(!p.use_master, "fp16-no-master has a master copy");
    emu_policy_preset(&p, "fp16-no-scaling", &err);
    EXPECT(p.scaling.kind == EMU_SCALE_NONE, "fp16-no-scaling scales");
    static const struct { const char *name; emu_update_rule rule; } bf[] = {
        { "bf16-nearest", EMU_UPDATE_PLAIN }, { "bf16-sr", EMU_UPDATE_SR },
        { "bf16-kahan", EMU_UPDATE_KAHAN },
    };
    for (int i = 0; i < 3; i++) {
        emu_policy_preset(&p, bf[i].name, &err);
        EXPECT(p.update == bf[i].rule && !strcmp(p.weight.fmt.name, "bfloat16") &&
               !strcmp(p.act_grad.fmt.name, "bfloat16"), "%s", bf[i].name);
    }
    emu_policy_preset(&p, "fp8-hybrid", &err);
    EXPECT(!strcmp(p.activation.fmt.name, "e4m3") && !strcmp(p.act_grad.fmt.name, "e5m2"),
           "fp8-hybrid: activations %s, errors %s", p.activation.fmt.name,
           p.act_grad.fmt.name);
    emu_policy_preset(&p, "adaptive", &err);
    EXPECT(p.scaling.kind == EMU_SCALE_ADAPTIVE && p.scaling.target == 1e-3, "adaptive");

    /* Overrides, and the refusals that validation owes. */
    static const struct { const char *preset, *set, *key; } bad[] = {
        { "fp16-mpt", "master=e5m2", "master" },
        { "fp16-mpt", "master=bfloat16", "master" },
        { "fp16-mpt", "scale=0", "scale" },
        { "fp16-mpt", "scale=-2", "scale" },
        { "fp16-mpt", "scale=inf", "scale" },
        { "fp16-mpt", "scale=3", "scale" },
        { "fp16-mpt", "growth=1", "growth" },
        { "fp16-mpt", "backoff=1", "backoff" },
        { "fp16-mpt", "interval=0", "interval" },
        { "fp16-mpt", "update=kahan", "update" },
        { "adaptive", "target=1", "target" },
        { "fp32", "max_scale=1000", "max_scale" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        emu_policy_preset(&p, bad[i].preset, &err);
        memset(&err, 0, sizeof err);
        EXPECT(emu_policy_set(&p, bad[i].set, &err) == 0, "%s: set %s: %s",
               bad[i].preset, bad[i].set, err.message);
        EXPECT(emu_policy_validate(&p, &err) == -1, "%s with %s validated",
               bad[i].preset, bad[i].set);
        EXPECT(!strcmp(err.key, bad[i].key), "%s with %s: error key '%s' (%s), "
               "expected '%s'", bad[i].preset, bad[i].set, err.key, err.message,
               bad[i].key);
    }
    static const char *const unparsable[] = { "colour=red", "weight", "weight=",
                                              "weight=e9m9m9", "act_grad.mode=sideways",
                                              "interval=x", "exempt=middle",
                                              "update=magic", "scaling=lots" };
    for (size_t i = 0; i < sizeof unparsable / sizeof unparsable[0]; i++) {
        emu_policy_preset(&p, "fp32", &err);
        EXPECT(emu_policy_set(&p, unparsable[i], &err) == -1, "'%s' accepted",
               unparsable[i]);
    }
    /* A few that must work. */
    emu_policy_preset(&p, "fp16-mpt", &err);
    if (emu_policy_set(&p, "master=none", &err) ||
        emu_policy_set(&p, "update=kahan", &err) ||
        emu_policy_set(&p, "act_grad.mode=sr", &err) ||
        emu_policy_set(&p, "accum=sequential,acc=binary16", &err) ||
        emu_policy_set(&p, "exempt=first+last", &err) ||
        emu_policy_validate(&p, &err))
        ck_abort_msg("overrides: %s: %s", err.key, err.message);
    EXPECT(!p.use_master && p.update == EMU_UPDATE_KAHAN &&
           p.act_grad.rnd.mode == EMU_RS &&
           p.exempt == (EMU_EXEMPT_FIRST | EMU_EXEMPT_LAST), "overrides not applied");
}
END_TEST

/* ---- resume with another configuration (the API) ------------------------- */

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int c;
    while ((c = fgetc(fp)) != EOF) {
        if (n == cap) {
            cap = cap ? 2 * cap : 65536;
            char *b = realloc(buf, cap);
            ck_assert_ptr_nonnull(b);
            buf = b;
        }
        buf[n++] = (char)c;
    }
    fclose(fp);
    *len = n;
    return buf ? buf : calloc(1, 1);
}

START_TEST(resume_other_configuration)
{
    char dir[] = "./test_nn.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    emu_train_config c;
    emu_train_config_default(&c);
    snprintf(c.preset, sizeof c.preset, "fp32");
    snprintf(c.arch, sizeof c.arch, "mlp:784-8-10");
    snprintf(c.out_dir, sizeof c.out_dir, "%s/run", dir);
    c.train_examples = 128;
    c.test_examples = 32;
    c.batch = 16;
    c.max_steps = 4;
    c.quiet = true;
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "fp32", &err) || emu_train(&c, &p, NULL, &err))
        ck_abort_msg("first run: %s: %s", err.where, err.message);
    char path[600];
    snprintf(path, sizeof path, "%s/checkpoint.bin", c.out_dir);
    size_t n0, n1;
    char *before = slurp(path, &n0);
    ck_assert_ptr_nonnull(before);

    /* Each of these changes the numbers: a resume must refuse them. */
    for (int k = 0; k < 4; k++) {
        emu_train_config r = c;
        emu_policy q = p;
        r.resume = true;
        if (k == 0) r.lr = 0.1;
        if (k == 1) r.seed = 2;
        if (k == 2) snprintf(r.arch, sizeof r.arch, "mlp:784-9-10");
        if (k == 3 && emu_policy_set(&q, "weight=bfloat16", &err))
            ck_abort_msg("%s", err.message);
        memset(&err, 0, sizeof err);
        EXPECT(emu_train(&r, &q, NULL, &err) == -1, "resume %d with another "
               "configuration accepted", k);
        EXPECT(strstr(err.message, "configuration") || strstr(err.message, "model"),
               "resume %d: message '%s: %s' does not name the problem", k,
               err.where, err.message);
        char *after = slurp(path, &n1);
        EXPECT(after && n1 == n0 && !memcmp(before, after, n0),
               "resume %d: the refused resume changed the checkpoint", k);
        free(after);
    }
    /* The same configuration resumes (here: nothing left to do). */
    emu_train_config r = c;
    r.resume = true;
    r.threads = 2; /* does not change the numbers */
    if (emu_train(&r, &p, NULL, &err))
        ck_abort_msg("resume with the same configuration: %s", err.message);
    free(before);

    static const char *const files[] = {
        "meta.json", "steps.csv", "ops_steps.csv", "layers_steps.csv", "eval.csv",
        "ops.csv", "hist.csv", "ops.json", "summary.txt", "checkpoint.bin",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", c.out_dir, files[i]);
        remove(path);
    }
    rmdir(c.out_dir);
    rmdir(dir);
}
END_TEST

/* The policy as JSON, for comparing two policies field by field. */
static char *policy_json(const emu_policy *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(fp);
    emu_policy_write_json(p, fp, 0);
    fclose(fp);
    return text;
}

/* A checkpoint decodes to the configuration and policy it was written
 * with; with any byte flipped (every byte of the first and last 256, one
 * in 61 elsewhere) or cut short it is refused, naming an offset; each
 * bad setting is refused by name. */
START_TEST(checkpoint_integrity)
{
    char dir[] = "./test_nn.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    emu_train_config c;
    emu_train_config_default(&c);
    snprintf(c.preset, sizeof c.preset, "fp8-delayed");
    snprintf(c.arch, sizeof c.arch, "mlp:784-4-10");
    snprintf(c.out_dir, sizeof c.out_dir, "%s/run", dir);
    c.train_examples = 64;
    c.test_examples = 16;
    c.batch = 16;
    c.max_steps = 2;
    c.lr = 0.0625;
    c.seed = 7;
    c.quiet = true;
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "fp8-delayed", &err) ||
        emu_policy_set(&p, "tensor_scaling=delayed,history=3", &err) ||
        emu_train(&c, &p, NULL, &err))
        ck_abort_msg("the run: %s: %s", err.where, err.message);
    char path[600];
    snprintf(path, sizeof path, "%s/checkpoint.bin", c.out_dir);
    size_t n;
    unsigned char *img = (unsigned char *)slurp(path, &n);

    emu_train_config c2;
    emu_policy p2;
    if (emu_checkpoint_check(img, n, &c2, &p2, &err))
        ck_abort_msg("the intact checkpoint: %s", err.message);
    EXPECT(!strcmp(c2.arch, c.arch) && c2.lr == c.lr && c2.seed == c.seed &&
           c2.max_steps == c.max_steps && c2.batch == c.batch,
           "the configuration does not come back");
    /* The policy as the run used it: an op class its model has no op of
     * (an MLP's softmax) reset to its legacy value. */
    emu_policy pr = p;
    if (emu_policy_set(&pr, "softmax=activation", &err))
        ck_abort_msg("softmax=activation: %s", err.message);
    char *a = policy_json(&pr), *b = policy_json(&p2);
    EXPECT(!strcmp(a, b), "the policy does not come back:\n%s\n%s", a, b);
    free(a);
    free(b);

    size_t flips = 0, cuts = 0;
    for (size_t i = 0; i < n; i += i < 256 || i + 256 >= n ? 1 : 61) {
        img[i] ^= 0x10;
        memset(&err, 0, sizeof err);
        EXPECT(emu_checkpoint_check(img, n, &c2, &p2, &err) == -1 &&
               err.code == EMU_EDATA && strstr(err.message, "offset"),
               "byte %zu flipped: %s", i, err.message[0] ? err.message : "accepted");
        img[i] ^= 0x10;
        flips++;
    }
    for (size_t k = 0; k < n; k += 997) {
        memset(&err, 0, sizeof err);
        EXPECT(emu_checkpoint_check(img, k, &c2, &p2, &err) == -1 &&
               err.code == EMU_EDATA &&
               strstr(err.message, "truncated at offset"),
               "cut to %zu bytes: %s", k, err.message[0] ? err.message : "accepted");
        cuts++;
    }
    EXPECT(flips > 500 && cuts > 10, "%zu flips, %zu cuts", flips, cuts);
    free(img);

    /* A gpt's checkpoint carries the op classes (appended to the policy
     * section when they differ from the legacy values): they come back. */
    {
        emu_train_config g = c;
        snprintf(g.arch, sizeof g.arch, "gpt:1-8-2-4");
        snprintf(g.data, sizeof g.data, "text");
        snprintf(g.out_dir, sizeof g.out_dir, "%s/lm", dir);
        g.train_examples = 400;
        g.test_examples = 100;
        g.batch = 2;
        g.eval_windows = 2;
        emu_policy q;
        if (emu_policy_preset(&q, "bf16-sr", &err) ||
            emu_policy_set(&q, "norm_stats=binary16", &err) ||
            emu_policy_set(&q, "softmax=e5m2", &err) ||
            emu_policy_set(&q, "softmax.mode=rz", &err) ||
            emu_policy_set(&q, "loss.mode=sr", &err) ||
            emu_train(&g, &q, NULL, &err))
            ck_abort_msg("the gpt run: %s: %s", err.where, err.message);
        snprintf(path, sizeof path, "%s/checkpoint.bin", g.out_dir);
        unsigned char *gi = (unsigned char *)slurp(path, &n);
        if (emu_checkpoint_check(gi, n, &c2, &p2, &err))
            ck_abort_msg("the gpt checkpoint: %s", err.message);
        a = policy_json(&q);
        b = policy_json(&p2);
        EXPECT(!strcmp(a, b) && strstr(b, "\"softmax\": {\"format\": \"e5m2\""),
               "the gpt's policy does not come back:\n%s\n%s", a, b);
        free(a);
        free(b);
        free(gi);
        static const char *const gfiles[] = {
            "meta.json", "steps.csv", "ops_steps.csv", "layers_steps.csv",
            "eval.csv", "ops.csv", "hist.csv", "ops.json", "summary.txt",
            "checkpoint.bin", "weights.safetensors",
        };
        for (size_t i = 0; i < sizeof gfiles / sizeof gfiles[0]; i++) {
            snprintf(path, sizeof path, "%s/%s", g.out_dir, gfiles[i]);
            remove(path);
        }
        rmdir(g.out_dir);
    }

    /* Each bad setting by its own name. */
    static const struct { const char *key; double lr, momentum, ref_rate; } bad[] = {
        { "lr", -1.0, 0.9, 0.0 }, { "lr", 0.0, 0.9, 0.0 },
        { "momentum", 0.02, 5.0, 0.0 }, { "momentum", 0.02, -1.0, 0.0 },
        { "ref_rate", 0.02, 0.9, 2.0 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        emu_train_config r = c;
        r.lr = bad[i].lr;
        r.momentum = bad[i].momentum;
        r.ref_rate = bad[i].ref_rate;
        snprintf(r.out_dir, sizeof r.out_dir, "%s/never", dir);
        memset(&err, 0, sizeof err);
        EXPECT(emu_train(&r, &p, NULL, &err) == -1 &&
               err.code == EMU_ESPEC && !strcmp(err.key, bad[i].key),
               "bad %s: key '%s', message '%s'", bad[i].key, err.key, err.message);
    }

    static const char *const files[] = {
        "meta.json", "steps.csv", "ops_steps.csv", "layers_steps.csv", "eval.csv",
        "ops.csv", "hist.csv", "ops.json", "summary.txt", "checkpoint.bin",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", c.out_dir, files[i]);
        remove(path);
    }
    rmdir(c.out_dir);
    rmdir(dir);
}
END_TEST

/* emu_batch_permutation: a bijection for every n (0 and 1 included), a
 * function of (n, seed, epoch) alone, a new order per epoch and per seed,
 * and each order about equally likely (n = 3: the six orders over 6,000
 * epochs, each within 5 standard deviations of 1,000). */
static bool is_permutation(const size_t *perm, size_t n)
{
    bool *seen = calloc(n ? n : 1, sizeof *seen);
    bool ok = seen != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        ok = perm[i] < n && !seen[perm[i]];
        if (ok)
            seen[perm[i]] = true;
    }
    free(seen);
    return ok;
}

START_TEST(batch_permutation)
{
    static const size_t sizes[] = { 0, 1, 2, 3, 10, 64, 1000, 60000 };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        size_t *a = malloc((n + 1) * sizeof *a), *b = malloc((n + 1) * sizeof *b);
        ck_assert(a && b);
        a[n] = b[n] = 12345; /* nothing written past n */
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            emu_batch_permutation(a, n, 7, epoch);
            EXPECT(is_permutation(a, n) && a[n] == 12345,
                   "n %zu epoch %" PRIu64 ": not a permutation of 0..n-1",
                   n, epoch);
            emu_batch_permutation(b, n, 7, epoch);
            EXPECT(!memcmp(a, b, n * sizeof *a),
                   "n %zu epoch %" PRIu64 ": two calls differ", n, epoch);
            if (n >= 10) {
                emu_batch_permutation(b, n, 7, epoch + 1);
                EXPECT(memcmp(a, b, n * sizeof *a),
                       "n %zu: epochs %" PRIu64 " and %" PRIu64 " share an "
                       "order", n, epoch, epoch + 1);
                emu_batch_permutation(b, n, 8, epoch);
                EXPECT(memcmp(a, b, n * sizeof *a),
                       "n %zu epoch %" PRIu64 ": seeds 7 and 8 share an "
                       "order", n, epoch);
            }
        }
        free(a);
        free(b);
    }
    unsigned count[3][3][3] = { { { 0 } } };
    for (uint64_t epoch = 0; epoch < 6000; epoch++) {
        size_t p[3];
        emu_batch_permutation(p, 3, 1, epoch);
        count[p[0]][p[1]][p[2]]++;
    }
    static const size_t orders[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
                                         { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };
    for (int o = 0; o < 6; o++) {
        unsigned c = count[orders[o][0]][orders[o][1]][orders[o][2]];
        EXPECT(c >= 855 && c <= 1145, "order %zu%zu%zu came %u times in "
               "6000 epochs (expected about 1000)", orders[o][0],
               orders[o][1], orders[o][2], c);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nn");
    TCase *tc = tcase_create("gradients");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, gradient_mlp);
    tcase_add_test(tc, gradient_mlp_gelu);
    tcase_add_test(tc, gradient_cnn);
    tcase_add_test(tc, gradient_resnet);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("models");
    tcase_set_timeout(tm, 600);
    tcase_add_test(tm, scales_are_exact);
    tcase_add_test(tm, clip_grad_norm);
    tcase_add_test(tm, fp8_recipe);
    tcase_add_test(tm, model_shapes);
    tcase_add_test(tm, resnet_shapes);
    tcase_add_test(tm, resnet_eval_mode);
    tcase_add_test(tm, model_refusals);
    tcase_add_test(tm, presets_and_policies);
    tcase_add_test(tm, resume_other_configuration);
    tcase_add_test(tm, checkpoint_integrity);
    suite_add_tcase(s, tm);
    TCase *td = tcase_create("data");
    tcase_add_test(td, batch_permutation);
    suite_add_tcase(s, td);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
