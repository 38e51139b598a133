/*
 * update_rule.c — experiment 1's check of the "2^-11 rule" (Micikevicius
 * et al.): an FP16 weight update w - u leaves w unchanged when |u/w| is
 * below 2^-11, i.e. when the weight is more than 2048 times the update.
 *
 * `emu train` reports how many updates changed nothing, but not the ratio
 * of each update to its weight, so this program trains the same model with
 * the library's own pieces (emu_model_build, forward, backward and
 * emu_t_sgd_update, with the batch order `emu train` uses) in the
 * fp16-no-master policy, and for every weight and step compares
 *   absorbed   w_new == w_old while u = lr * step != 0
 * with the rule's prediction |u| < 2^-11 |w_old|.  Exact analysis: with
 * round-to-nearest-even, an update is absorbed iff |u| < ulp(w)/2 (or
 * equal, with w's last bit even), and for w in [2^e, 2^(e+1)) half an
 * ulp is 2^(e-11): so |u/w| < 2^-12 always absorbs, |u/w| >= 2^-11 never
 * does (except for w = 0, which u can only move if u survives rounding to
 * FP16, and subnormal w), and in between it depends on where w lies in
 * its binade.
 *
 * Writes PREFIX_steps.csv (per step counts) and PREFIX_ratio.csv (over the
 * whole run, per binade of |u/w|: updates and how many were absorbed).
 * Called by experiments/01-loss-scaling/run.sh.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/data.h"
#include "emu/nn.h"

enum { RATIO_MIN = -40, RATIO_MAX = 10, RATIO_BINS = RATIO_MAX - RATIO_MIN + 1 };

typedef struct tally {
    unsigned long long updates;      /* u != 0                            */
    unsigned long long absorbed;     /* ... and w unchanged                */
    unsigned long long rule11;       /* |u| < 2^-11 |w|                    */
    unsigned long long rule12;       /* |u| < 2^-12 |w|                    */
    unsigned long long abs_rule11;   /* absorbed and rule11                */
    unsigned long long zero_w;       /* w == 0 and u != 0                  */
    unsigned long long zero_w_stuck; /* ... and w stayed 0 (u underflowed) */
    unsigned long long sub_w;        /* w subnormal in FP16, u != 0        */
} tally;

static void usage(void)
{
    fprintf(stderr,
            "usage: update_rule --out PREFIX [--data synthetic|fashion-mnist]\n"
            "       [--model ARCH] [--steps N] [--batch N] [--lr X]\n"
            "       [--momentum X] [--scale S] [--seed N] [--train-examples N]\n");
    exit(2);
}

static int die(const char *what, const emu_error *err)
{
    char msg[700];
    emu_error_format(err, msg, sizeof msg);
    fprintf(stderr, "update_rule: %s: %s\n", what, msg);
    return 1;
}

/* One parameter's update, with its tally. */
static int update(emu_ctx *ctx, const emu_policy *p, emu_param *prm,
                  const char *name, double lr, double momentum, double scale,
                  float *w_old, tally *t, unsigned long long (*hist)[2])
{
    char site[96];
    if (scale != 1.0) {
        snprintf(site, sizeof site, "%s.unscale", name);
        if (emu_t_scale(ctx, site, &prm->g, (float)(1.0 / scale), &prm->g,
                        &p->weight_grad.rnd))
            return -1;
    }
    memcpy(w_old, prm->w.data, prm->w.n * sizeof *w_old);
    emu_sgd_opts o = { .lr = (float)lr, .momentum = (float)momentum,
                       .state_rnd = &p->opt_state.rnd };
    snprintf(site, sizeof site, "%s.update", name);
    if (emu_t_sgd_update(ctx, site, &prm->w, momentum != 0.0 ? &prm->v : NULL,
                         &prm->g, &o, &p->weight.rnd))
        return -1;
    /* The op subtracted lr times the step as stored (exact in binary64). */
    const float *step = momentum != 0.0 ? prm->v.data : prm->g.data;
    const double min_normal = prm->w.fmt.min_normal;
    for (size_t i = 0; i < prm->w.n; i++) {
        double u = (double)o.lr * (double)step[i];
        if (u == 0.0 || !isfinite(u))
            continue;
        double w = w_old[i];
        bool same = prm->w.data[i] == w_old[i];
        t->updates++;
        t->absorbed += same;
        if (w == 0.0) {
            t->zero_w++;
            t->zero_w_stuck += same;
            continue;
        }
        if (fabs(w) < min_normal)
            t->sub_w++;
        double r = fabs(u) / fabs(w);
        bool r11 = r < 0x1p-11;
        t->rule11 += r11;
        t->rule12 += r < 0x1p-12;
        t->abs_rule11 += same && r11;
        int e = ilogb(r);
        int b = e < RATIO_MIN ? 0 : e > RATIO_MAX ? RATIO_BINS - 1 : e - RATIO_MIN;
        hist[b][0]++;
        hist[b][1] += same;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *data = "synthetic", *arch = "mlp:784-256-128-10", *out = NULL;
    long steps = 300, batch = 64;
    size_t train_n = 0;
    double lr = 0.005, momentum = 0.0, scale = 1024.0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--data")) data = v;
        else if (!strcmp(k, "--model")) arch = v;
        else if (!strcmp(k, "--out")) out = v;
        else if (!strcmp(k, "--steps")) steps = atol(v);
        else if (!strcmp(k, "--batch")) batch = atol(v);
        else if (!strcmp(k, "--lr")) lr = atof(v);
        else if (!strcmp(k, "--momentum")) momentum = atof(v);
        else if (!strcmp(k, "--scale")) scale = atof(v);
        else if (!strcmp(k, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--train-examples")) train_n = strtoul(v, NULL, 10);
        else usage();
    }
    if (!out || steps < 1 || batch < 1)
        usage();

    emu_error err;
    emu_dataset train, test;
    int rc = !strcmp(data, "fashion-mnist")
                 ? emu_dataset_fashion_mnist(&train, &test, NULL, &err)
                 : emu_dataset_synthetic(&train, &test, seed,
                                         train_n ? train_n : 6000, 1000, &err);
    if (rc)
        return die("data", &err);
    if (train_n && train_n < train.n)
        train.n = train_n;

    emu_policy p;
    char set[64];
    snprintf(set, sizeof set, "scale=%.17g", scale);
    if (emu_policy_preset(&p, "fp16-no-master", &err) ||
        emu_policy_set(&p, "scaling=static", &err) || emu_policy_set(&p, set, &err) ||
        emu_policy_validate(&p, &err))
        return die("policy", &err);

    emu_ctx ctx;
    emu_ctx_init(&ctx, seed);
    ctx.measure = 0;
    emu_model m;
    if (emu_model_build(&m, arch, &p, (int)batch, train.channels, train.height,
                        train.width, train.classes, seed, &ctx, &err))
        return die("model", &err);

    const size_t es = (size_t)train.channels * (size_t)train.height * (size_t)train.width;
    float *bx = malloc((size_t)batch * es * sizeof *bx);
    int *by = malloc((size_t)batch * sizeof *by);
    size_t *perm = malloc(train.n * sizeof *perm);
    size_t maxp = 0;
    for (int i = 0; i < m.n_layers; i++)
        if (m.layers[i].has_params && m.layers[i].weight.w.n > maxp)
            maxp = m.layers[i].weight.w.n;
    float *w_old = malloc(maxp * sizeof *w_old);
    if (!bx || !by || !perm || !w_old)
        return fprintf(stderr, "update_rule: out of memory\n"), 1;

    char path[512];
    snprintf(path, sizeof path, "%s_steps.csv", out);
    FILE *fs = fopen(path, "w");
    if (!fs)
        return perror(path), 1;
    fprintf(fs, "step,lr,loss,skipped,updates,absorbed,rule11,rule12,"
                "absorbed_and_rule11,zero_w,zero_w_stuck,subnormal_w\n");
    static unsigned long long hist[RATIO_BINS][2];

    const long per_epoch = (long)(train.n / (size_t)batch);
    int epoch = -1;
    for (long s = 0; s < steps; s++) {
        if (s / per_epoch != epoch) {
            epoch = (int)(s / per_epoch);
            /* emu train's batch order, so both programs see the same
             * batches. */
            emu_batch_permutation(perm, train.n, seed, (uint64_t)epoch);
        }
        const size_t *idx = perm + (size_t)(s % per_epoch) * (size_t)batch;
        for (long i = 0; i < batch; i++) {
            memcpy(bx + (size_t)i * es, train.x + idx[i] * es, es * sizeof(float));
            by[i] = train.y[idx[i]];
        }
        if (emu_t_load(&ctx, "input", &m.x, bx, (size_t)batch * es,
                       &p.activation.rnd) ||
            emu_model_forward(&m, &ctx, &p) ||
            emu_model_backward(&m, &ctx, &p, by, (float)scale))
            return die("step", &ctx.err);
        double loss = m.loss.data[0];
        bool finite = true;
        for (int i = 0; i < m.n_layers && finite; i++) {
            const emu_layer *l = &m.layers[i];
            if (!l->has_params)
                continue;
            for (size_t j = 0; j < l->weight.g.n && finite; j++)
                finite = isfinite(l->weight.g.data[j]);
            for (size_t j = 0; j < l->bias.g.n && finite; j++)
                finite = isfinite(l->bias.g.data[j]);
        }
        tally t;
        memset(&t, 0, sizeof t);
        if (finite)
            for (int i = 0; i < m.n_layers; i++) {
                emu_layer *l = &m.layers[i];
                if (!l->has_params)
                    continue;
                char name[64];
                snprintf(name, sizeof name, "%s.w", l->name);
                if (update(&ctx, &p, &l->weight, name, lr, momentum, scale, w_old,
                           &t, hist))
                    return die("update", &ctx.err);
                snprintf(name, sizeof name, "%s.b", l->name);
                if (update(&ctx, &p, &l->bias, name, lr, momentum, scale, w_old,
                           &t, hist))
                    return die("update", &ctx.err);
            }
        fprintf(fs, "%ld,%.9g,%.9g,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n",
                s, lr, loss, finite ? 0 : 1, t.updates, t.absorbed, t.rule11,
                t.rule12, t.abs_rule11, t.zero_w, t.zero_w_stuck, t.sub_w);
    }
    fclose(fs);

    snprintf(path, sizeof path, "%s_ratio.csv", out);
    FILE *fr = fopen(path, "w");
    if (!fr)
        return perror(path), 1;
    fprintf(fr, "log2_ratio,updates,absorbed\n");
    for (int b = 0; b < RATIO_BINS; b++)
        if (hist[b][0])
            fprintf(fr, "%d,%llu,%llu\n", b + RATIO_MIN, hist[b][0], hist[b][1]);
    fclose(fr);

    emu_model_free(&m);
    emu_dataset_free(&train);
    emu_dataset_free(&test);
    free(bx);
    free(by);
    free(perm);
    free(w_old);
    return 0;
}
