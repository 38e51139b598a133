/*
 * test_layerwise.c — the LAYERWISE loss scaling (Zhao et al.'s per-layer
 * rule, libemu/nn_layerwise.c and emu_model_backward).
 *
 * - The operand statistics and the factor against MPFR: mean squares and
 *   largest magnitudes summed exactly; the factor recomputed from its
 *   definition (the smallest power of two >= 1 whose expected underflow
 *   rate erf(u / (sqrt 2 alpha sigma)), evaluated by MPFR at 256 bits, is
 *   at most the target; the largest power of two under the overflow bound
 *   f_max / (k max|dY| max|W|); the caps), over random operands whose
 *   scales sweep every regime; each regime must have governed many cases.
 * - Training runs: on the deep MLP (mlp:784-128x8-10, loss x 2^-12) the
 *   scale each layer's weight gradient carries never falls from the output
 *   toward the input, some factors exceed 1, the caps hold; on resnet:1
 *   the run is finite and the merges are measured (site grad_rescale).
 * - Bad parameters are refused by key; the caps come back from a
 *   checkpoint; a resnet:1 run stopped after its first step and resumed
 *   ends bit for bit like an uninterrupted one.
 */
#define _POSIX_C_SOURCE 200809L

#include <check.h>
#include <math.h>
#include <mpfr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#include "internal.h"    /* emu_is_pow2 */
#include "nn_internal.h" /* the rule's functions */
#include "testutil.h"

/* ---- the factor against MPFR --------------------------------------------- */

/* Exact mean square and largest magnitude of n binary32 values, rounded
 * to binary64 once. */
static void exact_stats(const float *v, size_t n, double *ms, double *amax)
{
    mpfr_t s, t;
    mpfr_inits2(1024, s, t, (mpfr_ptr)0);
    mpfr_set_zero(s, 1);
    double mx = 0.0;
    for (size_t i = 0; i < n; i++) {
        mpfr_set_flt(t, v[i], MPFR_RNDN);
        mpfr_sqr(t, t, MPFR_RNDN); /* exact at 1024 bits */
        mpfr_add(s, s, t, MPFR_RNDN);
        mx = fmax(mx, fabs((double)v[i]));
    }
    mpfr_div_ui(s, s, (unsigned long)n, MPFR_RNDN);
    *ms = mpfr_get_d(s, MPFR_RNDN);
    *amax = mx;
    mpfr_clears(s, t, (mpfr_ptr)0);
}

/* erf(u / (sqrt 2 2^e sigma)) <= target, at 256 bits, sigma^2 = gms wms. */
static bool rate_ok(double u, double gms, double wms, int e, double target)
{
    mpfr_t x, y;
    mpfr_inits2(256, x, y, (mpfr_ptr)0);
    mpfr_set_d(x, gms, MPFR_RNDN);
    mpfr_mul_d(x, x, wms, MPFR_RNDN);
    mpfr_sqrt(x, x, MPFR_RNDN);             /* sigma */
    mpfr_mul_2si(x, x, e, MPFR_RNDN);
    mpfr_sqrt_ui(y, 2, MPFR_RNDN);
    mpfr_mul(x, x, y, MPFR_RNDN);
    mpfr_d_div(x, u, x, MPFR_RNDN);
    mpfr_erf(x, x, MPFR_RNDN);
    bool ok = mpfr_cmp_d(x, target) <= 0;
    mpfr_clears(x, y, (mpfr_ptr)0);
    return ok;
}

/* The largest e with 2^e <= fmax / (k ga wa), by MPFR at 256 bits. */
static int upper_exp(double fmax, double k, double ga, double wa)
{
    mpfr_t x;
    mpfr_init2(x, 256);
    mpfr_set_d(x, k, MPFR_RNDN);
    mpfr_mul_d(x, x, ga, MPFR_RNDN); /* exact: 53 + 53 + 53 bits < 256 */
    mpfr_mul_d(x, x, wa, MPFR_RNDN);
    mpfr_d_div(x, fmax, x, MPFR_RNDD);
    int e = (int)mpfr_get_exp(x) - 1; /* x in [2^e, 2^(e+1)) */
    mpfr_clear(x);
    return e;
}

enum { GOV_LOWER, GOV_ONE, GOV_UPPER, GOV_LAYER, GOV_ROOM, GOV_COUNT };

START_TEST(factor_against_mpfr)
{
    test_fpstate fs = test_oracle_enter();
    test_rng g = test_rng_make(0x7a4a0u);
    const emu_format *f16 = test_format("binary16");
    const emu_format *fmts[2] = { f16, test_format("e5m2") };
    int governed[GOV_COUNT] = { 0 };
    const int cases = (int)test_scaled(1500, 300);
    for (int c = 0; c < cases; c++) {
        const emu_format *f = fmts[c % 2];
        const size_t rows = 1 + test_below(&g, 24), k = 1 + test_below(&g, 40);
        const size_t cols = 1 + test_below(&g, 24);
        emu_tensor dy, w;
        emu_error err;
        size_t ds[2] = { rows, k }, wsh[2] = { k, cols };
        if (emu_tensor_alloc(&dy, "dy", EMU_ROLE_ACT_GRAD, f, 2, ds, &err) ||
            emu_tensor_alloc(&w, "w", EMU_ROLE_WEIGHT, f, 2, wsh, &err))
            ck_abort_msg("%s", err.message);
        /* Scales from far below the format's smallest value to near its
         * largest, so that every bound gets to decide. */
        const int ge = -40 + (int)test_below(&g, 56), we = -8 + (int)test_below(&g, 16);
        for (size_t i = 0; i < dy.n; i++) {
            double v = ldexp((double)(test_next(&g) >> 11) * 0x1p-53 - 0.5, ge);
            dy.data[i] = (float)v;
        }
        if (test_below(&g, 8) == 0) /* an all-zero gradient now and then */
            memset(dy.data, 0, dy.n * sizeof *dy.data);
        for (size_t i = 0; i < w.n; i++)
            w.data[i] = (float)ldexp((double)(test_next(&g) >> 11) * 0x1p-53 - 0.5, we);
        const double target = c % 3 == 0 ? 1e-3 : c % 3 == 1 ? 1e-2 : 0.25;
        const double layer_max = ldexp(1.0, (int)test_below(&g, 12));
        const double room = ldexp(1.0, (int)test_below(&g, 16));

        emu_layerwise_stats st;
        emu_layerwise_operand_stats(&st, &dy, &w, (double)k);
        double gms, gamax, wms, wamax;
        exact_stats(dy.data, dy.n, &gms, &gamax);
        exact_stats(w.data, w.n, &wms, &wamax);
        EXPECT(fabs(st.g_ms - gms) <= 1e-13 * gms && fabs(st.w_ms - wms) <= 1e-13 * wms &&
                   st.g_amax == gamax && st.w_amax == wamax && st.k == (double)k,
               "case %d: statistics %.17g %.17g %g %g, exact %.17g %.17g %g %g", c,
               st.g_ms, st.w_ms, st.g_amax, st.w_amax, gms, wms, gamax, wamax);
        double a = emu_layerwise_factor(&st, f, target, layer_max, room);

        /* The definition, from the exact statistics. */
        int lo = 0;
        if (gms > 0.0 && wms > 0.0)
            while (!rate_ok(f->min_value, gms, wms, lo, target))
                lo++;
        double ref = ldexp(1.0, lo);
        int gov = lo > 0 ? GOV_LOWER : GOV_ONE;
        if (gamax > 0.0 && wamax > 0.0) {
            double up = ldexp(1.0, upper_exp(f->max, (double)k, gamax, wamax));
            if (up < ref)
                ref = up, gov = GOV_UPPER;
        }
        if (layer_max < ref)
            ref = layer_max, gov = GOV_LAYER;
        if (room < ref)
            ref = room, gov = GOV_ROOM;
        EXPECT(a == ref, "case %d (%s, target %g, k %zu, caps %g %g): factor %g, "
               "expected %g", c, f->name, target, k, layer_max, room, a, ref);
        EXPECT(emu_is_pow2(a), "case %d: %g is not a power of two", c, a);
        governed[gov]++;
        emu_tensor_free(&dy);
        emu_tensor_free(&w);
    }
    /* Each regime decided a share of the cases (the test cannot pass on
     * one branch alone). */
    for (int i = 0; i < GOV_COUNT; i++)
        EXPECT(governed[i] >= cases / 50, "regime %d governed %d of %d cases", i,
               governed[i], cases);
    test_oracle_leave(fs);
}
END_TEST

/* The underflow bound alone, at sigma where the answer is known in closed
 * form: sigma = u / (sqrt 2 x 2^e x erfinv(target)) needs exactly 2^e;
 * and a zero or non-finite sigma needs nothing. */
START_TEST(lower_bound_edges)
{
    const double u = 0x1p-24;
    EXPECT(emu_layerwise_lower(0.0, u, 1e-3) == 1.0, "sigma 0");
    EXPECT(emu_layerwise_lower(NAN, u, 1e-3) == 1.0, "sigma NaN");
    EXPECT(emu_layerwise_lower(INFINITY, u, 1e-3) == 1.0, "sigma inf");
    /* Huge sigma: nothing underflows even at 1. */
    EXPECT(emu_layerwise_lower(1.0, u, 1e-3) == 1.0, "sigma 1");
    /* Far below: a factor in the binary64 range, and the defining
     * inequalities hold at it and fail at half of it. */
    for (int e = -300; e <= -20; e += 7) {
        double sigma = ldexp(1.0, e) * 1.2345;
        double a = emu_layerwise_lower(sigma, u, 1e-3);
        int ea;
        frexp(a, &ea);
        EXPECT(rate_ok(u, sigma * sigma, 1.0, ea - 1, 1e-3) &&
                   !rate_ok(u, sigma * sigma, 1.0, ea - 2, 1e-3),
               "sigma 2^%d: factor %g", e, a);
    }
}
END_TEST

/* ---- parameters ------------------------------------------------------------- */

START_TEST(bad_parameters)
{
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "layerwise", &err) || emu_policy_validate(&p, &err))
        ck_abort_msg("the preset: %s", err.message);
    EXPECT(p.scaling.kind == EMU_SCALE_LAYERWISE && p.scaling.target == 1e-3 &&
               p.layer_max == 16.0 && p.total_max == 1024.0 && p.scaling.init == 1.0,
           "the layerwise preset's defaults");
    static const struct { const char *set, *key; } bad[] = {
        { "target=0", "target" },        { "target=1", "target" },
        { "target=-0.5", "target" },     { "target=nan", "target" },
        { "layer_max=3", "layer_max" },  { "layer_max=0.5", "layer_max" },
        { "layer_max=0", "layer_max" },  { "layer_max=inf", "layer_max" },
        { "layer_max=0x1p128", "layer_max" },
        { "total_max=1000", "total_max" }, { "total_max=0.25", "total_max" },
        { "total_max=-1024", "total_max" }, { "total_max=0x1p128", "total_max" },
        { "scale=2048", "scale" },       { "scale=3", "scale" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        emu_policy_preset(&p, "layerwise", &err);
        memset(&err, 0, sizeof err);
        EXPECT(emu_policy_set(&p, bad[i].set, &err) == 0, "set %s: %s", bad[i].set,
               err.message);
        EXPECT(emu_policy_validate(&p, &err) == -1 && err.code == EMU_ESPEC &&
                   !strcmp(err.key, bad[i].key),
               "%s: validated, or key '%s' (%s)", bad[i].set, err.key, err.message);
    }
    static const char *const unparsable[] = { "layer_max=x", "total_max=",
                                              "total_max=1k", "scaling=zhao2" };
    for (size_t i = 0; i < sizeof unparsable / sizeof *unparsable; i++) {
        emu_policy_preset(&p, "layerwise", &err);
        EXPECT(emu_policy_set(&p, unparsable[i], &err) == -1, "'%s' accepted",
               unparsable[i]);
    }
    /* A language model refuses the rule, by name. */
    {
        emu_train_config c;
        emu_train_config_default(&c);
        snprintf(c.arch, sizeof c.arch, "gpt:1-8-2-4");
        snprintf(c.data, sizeof c.data, "text");
        snprintf(c.out_dir, sizeof c.out_dir, "./test_layerwise.never");
        c.quiet = true;
        c.max_steps = 1;
        emu_policy_preset(&p, "layerwise", &err);
        memset(&err, 0, sizeof err);
        EXPECT(emu_train(&c, &p, NULL, &err) == -1 && err.code == EMU_ESPEC &&
                   strstr(err.message, "layerwise"),
               "gpt with layerwise scaling: %s", err.message);
        EXPECT(access(c.out_dir, F_OK) != 0, "the refused run made its folder");
    }
    /* The caps mean nothing to the other kinds: not validated there. */
    emu_policy_preset(&p, "fp16-mpt", &err);
    if (emu_policy_set(&p, "layer_max=3", &err) || emu_policy_validate(&p, &err))
        ck_abort_msg("layer_max under dynamic scaling: %s", err.message);
    /* Any preset takes the kind. */
    emu_policy_preset(&p, "fp16-mpt", &err);
    if (emu_policy_set(&p, "scaling=layerwise", &err) ||
        emu_policy_set(&p, "scale=1", &err) ||
        emu_policy_set(&p, "total_max=65536", &err) ||
        emu_policy_set(&p, "layer_max=1", &err) || emu_policy_validate(&p, &err))
        ck_abort_msg("fp16-mpt with scaling=layerwise: %s", err.message);
}
END_TEST

/* ---- training runs ------------------------------------------------------------ */

static void config(emu_train_config *c, const char *arch, const char *dir,
                   const char *sub)
{
    emu_train_config_default(c);
    snprintf(c->preset, sizeof c->preset, "layerwise");
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    snprintf(c->out_dir, sizeof c->out_dir, "%s/%s", dir, sub);
    c->quiet = true;
    c->checkpoint_every = 0;
}

static const char *const run_files[] = {
    "meta.json", "steps.csv", "ops_steps.csv", "layers_steps.csv", "eval.csv",
    "ops.csv", "hist.csv", "ops.json", "summary.txt", "checkpoint.bin",
    "weights.safetensors",
};

static void remove_run(const char *dir)
{
    char path[700];
    for (size_t i = 0; i < sizeof run_files / sizeof *run_files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, run_files[i]);
        remove(path);
    }
    rmdir(dir);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    *len = fread(buf, 1, (size_t)n, fp);
    buf[*len] = '\0';
    fclose(fp);
    return buf;
}

/* One row of layers_steps.csv. */
typedef struct lrow {
    long step;
    char layer[48];
    int index;
    double scale, grad_scale;
} lrow;

static int read_layers(const char *dir, lrow *rows, int max)
{
    char path[700], line[1024];
    snprintf(path, sizeof path, "%s/layers_steps.csv", dir);
    FILE *fp = fopen(path, "r");
    ck_assert_ptr_nonnull(fp);
    int n = 0;
    ck_assert_ptr_nonnull(fgets(line, sizeof line, fp)); /* header */
    while (n < max && fgets(line, sizeof line, fp)) {
        lrow *r = &rows[n];
        if (sscanf(line, "%ld,%47[^,],%d,%lf,%lf", &r->step, r->layer, &r->index,
                   &r->scale, &r->grad_scale) == 5)
            n++;
    }
    fclose(fp);
    return n;
}

/* The deep MLP on the loss x 2^-12: in every step, the scale a weight
 * gradient carries never falls from the output toward the input; every
 * factor is a power of two from 1 to layer_max; the loss scale times the
 * factors stays within total_max; and the rule does raise it. */
START_TEST(grows_toward_input)
{
    char dir[] = "./test_layerwise.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    emu_train_config c;
    config(&c, "mlp:784-128x8-10", dir, "mlp");
    c.train_examples = 640;
    c.test_examples = 64;
    c.max_steps = 8;
    c.loss_mult = 0x1p-12;
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "layerwise", &err) || emu_train(&c, &p, NULL, &err))
        ck_abort_msg("the run: %s: %s", err.where, err.message);
    static lrow rows[4096];
    int n = read_layers(c.out_dir, rows, 4096);
    EXPECT(n == 8 * 9, "%d rows (8 steps of 9 layers)", n);
    int raised = 0;
    for (int i = 0; i < n; i++) {
        const lrow *r = &rows[i];
        EXPECT(emu_is_pow2(r->scale) && r->scale >= 1.0 && r->scale <= p.layer_max,
               "step %ld %s: factor %g", r->step, r->layer, r->scale);
        EXPECT(r->grad_scale / c.loss_mult <= p.total_max,
               "step %ld %s: carries %g (x the loss multiplier)", r->step, r->layer,
               r->grad_scale / c.loss_mult);
        raised += r->scale > 1.0;
        /* rows are in layer order, the input's first */
        if (i + 1 < n && rows[i + 1].step == r->step)
            EXPECT(r->grad_scale >= rows[i + 1].grad_scale,
                   "step %ld: %s carries %g, %s above it %g", r->step, r->layer,
                   r->grad_scale, rows[i + 1].layer, rows[i + 1].grad_scale);
    }
    EXPECT(raised >= 8, "only %d factors above 1", raised);
    /* The first layer's scale beats the last's in every step. */
    for (int i = 0; i + 8 < n; i += 9)
        EXPECT(rows[i].grad_scale > rows[i + 8].grad_scale, "step %ld: %s %g, %s %g",
               rows[i].step, rows[i].layer, rows[i].grad_scale, rows[i + 8].layer,
               rows[i + 8].grad_scale);
    remove_run(c.out_dir);
    rmdir(dir);
}
END_TEST

/* A checkpoint holds the caps and gives them back; meta.json records
 * them. */
START_TEST(checkpoint_round_trip)
{
    char dir[] = "./test_layerwise.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    emu_train_config c;
    config(&c, "mlp:784-16-10", dir, "ck");
    c.train_examples = 64;
    c.test_examples = 16;
    c.batch = 16;
    c.max_steps = 2;
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "layerwise", &err) ||
        emu_policy_set(&p, "layer_max=64", &err) ||
        emu_policy_set(&p, "total_max=0x1p20", &err) ||
        emu_policy_set(&p, "target=0.01", &err) || emu_train(&c, &p, NULL, &err))
        ck_abort_msg("the run: %s: %s", err.where, err.message);
    char path[700];
    size_t n;
    snprintf(path, sizeof path, "%s/checkpoint.bin", c.out_dir);
    char *img = slurp(path, &n);
    ck_assert_ptr_nonnull(img);
    emu_train_config c2;
    emu_policy p2;
    if (emu_checkpoint_check(img, n, &c2, &p2, &err))
        ck_abort_msg("the checkpoint: %s", err.message);
    EXPECT(p2.scaling.kind == EMU_SCALE_LAYERWISE && p2.layer_max == 64.0 &&
               p2.total_max == 0x1p20 && p2.scaling.target == 0.01,
           "the policy comes back as %d, %g, %g, %g", (int)p2.scaling.kind,
           p2.layer_max, p2.total_max, p2.scaling.target);
    free(img);
    snprintf(path, sizeof path, "%s/meta.json", c.out_dir);
    char *meta = slurp(path, &n);
    ck_assert_ptr_nonnull(meta);
    EXPECT(strstr(meta, "\"kind\": \"layerwise\"") &&
               strstr(meta, "\"layer_max\": 64") &&
               strstr(meta, "\"total_max\": 1048576"),
           "meta.json does not record the rule: %s", meta);
    free(meta);
    remove_run(c.out_dir);
    rmdir(dir);
}
END_TEST

/* resnet:1: residual merges align the branches' factors (site
 * <block>.grad_rescale); a run stopped after its first step and resumed
 * ends with every file of an uninterrupted run (the timing apart). */
START_TEST(resnet_resume_bit_identical)
{
    char dir[] = "./test_layerwise.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    emu_train_config c, s;
    config(&c, "resnet:1", dir, "full");
    c.train_examples = 96;
    c.test_examples = 16;
    c.batch = 16;
    c.max_steps = 4;
    c.checkpoint_every = 2;
    c.stats_every = 1;
    c.loss_mult = 0x1p-8;
    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, "layerwise", &err) || emu_train(&c, &p, NULL, &err))
        ck_abort_msg("the uninterrupted run: %s: %s", err.where, err.message);
    s = c;
    snprintf(s.out_dir, sizeof s.out_dir, "%s/cut", dir);
    emu_train_stop(SIGINT); /* the next run stops after its first step */
    int rc = emu_train(&s, &p, NULL, &err);
    EXPECT(rc == EMU_TRAIN_STOPPED, "the stopped run returned %d: %s", rc, err.message);
    if (emu_train_resume(s.out_dir, 1, true, NULL, &err))
        ck_abort_msg("the resume: %s: %s", err.where, err.message);

    char pa[700], pb[700];
    size_t na, nb;
    snprintf(pa, sizeof pa, "%s/ops.csv", c.out_dir);
    char *ops = slurp(pa, &na);
    ck_assert_ptr_nonnull(ops);
    EXPECT(strstr(ops, "grad_rescale"), "no residual merge rescaled a branch");
    free(ops);
    static const char *const same[] = { "layers_steps.csv", "ops_steps.csv",
                                        "ops.csv", "eval.csv", "hist.csv",
                                        "checkpoint.bin" };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        snprintf(pa, sizeof pa, "%s/%s", c.out_dir, same[i]);
        snprintf(pb, sizeof pb, "%s/%s", s.out_dir, same[i]);
        char *a = slurp(pa, &na), *b = slurp(pb, &nb);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        /* a checkpoint's last 36 bytes: the elapsed time and the trailer */
        size_t cmp = !strcmp(same[i], "checkpoint.bin") ? na - 36 : na;
        EXPECT(na == nb && !memcmp(a, b, cmp), "%s differs after the resume", same[i]);
        free(a);
        free(b);
    }
    /* steps.csv but for the last column (the step's time) */
    snprintf(pa, sizeof pa, "%s/steps.csv", c.out_dir);
    snprintf(pb, sizeof pb, "%s/steps.csv", s.out_dir);
    char *a = slurp(pa, &na), *b = slurp(pb, &nb);
    for (char *x = a, *y = b; x && y && *x && *y;) {
        char *ex = strchr(x, '\n'), *ey = strchr(y, '\n');
        ck_assert(ex && ey);
        char *cx = ex, *cy = ey;
        while (cx > x && cx[-1] != ',') cx--;
        while (cy > y && cy[-1] != ',') cy--;
        EXPECT(cx - x == cy - y && !memcmp(x, y, (size_t)(cx - x)),
               "steps.csv differs: %.*s / %.*s", (int)(ex - x), x, (int)(ey - y), y);
        x = ex + 1;
        y = ey + 1;
    }
    free(a);
    free(b);
    remove_run(c.out_dir);
    remove_run(s.out_dir);
    rmdir(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("layerwise");
    TCase *tc = tcase_create("rule");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, factor_against_mpfr);
    tcase_add_test(tc, lower_bound_edges);
    tcase_add_test(tc, bad_parameters);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("runs");
    tcase_set_timeout(tr, 900);
    tcase_add_test(tr, grows_toward_input);
    tcase_add_test(tr, checkpoint_round_trip);
    tcase_add_test(tr, resnet_resume_bit_identical);
    suite_add_tcase(s, tr);
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
