/*
 * nn_train.c — the training loop: data order, loss scaling, weight updates,
 * evaluation, the results folder, checkpoints and resume.
 *
 * Everything that computes is a tensor op (so it is measured); this file
 * only decides what runs when.  A run is a pure function of its
 * configuration and seed: data order comes from Philox streams keyed by
 * epoch, stochastic rounding from the context's op counter, and both are
 * saved in the checkpoint, so a resumed run ends exactly where an
 * uninterrupted one does.
 *
 * Language models (emu_arch_is_lm) train on text (data "text" or
 * "fortunes", emu/data.h): each step's B windows of T tokens come from
 * a Philox stream of (seed, step), the loss is the mean over the B*T
 * next-token rows, one epoch is n_train / (B*T) steps, and evaluation
 * scores a fixed set of validation windows.
 *
 * Growing logs (steps.csv, ...) are kept in memory and written whole,
 * atomically, at every checkpoint and at the end: a killed run leaves the
 * files of its last checkpoint, never half a line.
 */
#define _POSIX_C_SOURCE 200809L

#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/nn.h"

#include <errno.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "emu/extend.h" /* emu_ctx_fail */
#include "emu/version.h"
#include "internal.h"
#include "ops_internal.h"
#include "nn_ckpt.h"
#include "nn_internal.h"

void emu_train_config_default(emu_train_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->preset, sizeof c->preset, "fp16-mpt");
    snprintf(c->arch, sizeof c->arch, "mlp:784-256-128-10");
    snprintf(c->data, sizeof c->data, "synthetic");
    c->train_examples = 0;
    c->test_examples = 0;
    c->epochs = 1;
    c->batch = 64;
    c->opt = EMU_OPT_SGD;
    c->lr = 0.02;
    c->momentum = 0.9;
    c->weight_decay = 0.0;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->schedule = EMU_LR_CONSTANT;
    c->lr_final = 0.0;
    c->lr_step = 0;
    c->loss_mult = 1.0;
    c->seed = 1;
    c->ref_rate = 0.0;
    c->stats_every = 50;
    c->checkpoint_every = 500;
    c->threads = 1;
    snprintf(c->out_dir, sizeof c->out_dir, "runs/latest");
}

/* ---- a growable text buffer --------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_vprintf(sbuf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || b->oom)
        return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

static void sb_free(sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int write_sbuf(FILE *fp, const void *arg)
{
    const sbuf *b = arg;
    if (b->oom)
        return -1;
    return b->len && fwrite(b->p, 1, b->len, fp) != b->len ? -1 : 0;
}

/* A memory stream for the stats module's FILE-based writers. */
static int sb_from_file(sbuf *b, const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0)
        sb_printf(b, "%.*s", (int)n, chunk);
    fclose(fp);
    return b->oom ? -1 : 0;
}

/* Keeps the header and the rows whose integer field `col` is below
 * `limit` (or at most `limit` if inclusive): on resume, the logs are cut
 * back to the checkpoint (a kill between writing them and writing it
 * leaves them ahead). */
static void sb_keep_rows(sbuf *b, int col, int64_t limit, bool inclusive)
{
    if (!b->p)
        return;
    size_t w = 0;
    bool header = true;
    for (size_t r = 0; r < b->len;) {
        size_t e = r;
        while (e < b->len && b->p[e] != '\n')
            e++;
        if (e < b->len)
            e++; /* the newline */
        bool keep = header;
        if (!header) {
            const char *f = b->p + r;
            for (int k = 0; k < col && f < b->p + e; k++) {
                while (f < b->p + e && *f != ',')
                    f++;
                f++;
            }
            long long v = f < b->p + e ? strtoll(f, NULL, 10) : INT64_MAX;
            keep = inclusive ? v <= limit : v < limit;
        }
        header = false;
        if (keep) {
            memmove(b->p + w, b->p + r, e - r);
            w += e - r;
        }
        r = e;
    }
    b->len = w;
    if (b->cap)
        b->p[w] = '\0';
}

/* ---- the run ------------------------------------------------------------- */

typedef struct layer_trace {
    double sigma;   /* std of the unscaled input gradient, last step       */
    double amax;    /* largest |unscaled input gradient|, last step        */
    double corr;    /* ADAPTIVE: feedback factor on the Gaussian estimate  */
} layer_trace;

typedef struct run {
    const emu_train_config *cfg;
    const emu_policy *p;      /* &pol                                      */
    emu_policy pol;           /* the caller's, the op classes the model has
                                 no op of reset (emu_policy_for_arch)      */
    emu_dataset train, test;
    /* Language models: the text, the window length and the number of
     * validation windows; batch_y then holds the B*T targets. */
    bool lm;
    emu_textset ttrain, tval;
    int T;
    size_t eval_count;
    int32_t *win_y;
    double last_eval_loss;    /* the last evaluation's mean loss (nats)     */
    double last_eval_ppl, last_eval_bpc; /* and its perplexity, bits/char   */
    emu_model m;
    emu_ctx ctx;
    emu_stats stats;
    sbuf steps, ops_steps, layers, eval;
    char dir[512];
    char path[640];
    uint64_t fingerprint;
    int64_t step;             /* steps done                                  */
    int64_t steps_per_epoch;
    int64_t total_steps;
    double scale;             /* loss scale                                  */
    int good;                 /* overflow-free steps since the last change   */
    double floor;             /* ENHANCED: current floor                      */
    double adaptive_cut;      /* ADAPTIVE: backoff factor after an overflow  */
    int64_t skipped;
    layer_trace *trace;       /* per layer, and [n_layers] for the loss */
    float *batch_x;
    int *batch_y;
    size_t *perm;
    double t0, elapsed_before;
    bool tty;
    /* meta.json's "init_from" value (JSON), "" if the run started from
     * the random initialisation; a resumed run takes it from the
     * meta.json it continues. */
    char init_json[1400];
    /* Kahan-compensated Adam: each parameter's step in its weight's format
     * (two per layer, weight and bias; made on first use), since the
     * moments occupy m and v.  Rewritten every step: not checkpointed. */
    emu_tensor *kahan_delta;
    /* The sites histogrammed at every step (stats.hist_always): each
     * parameter layer's "<layer>.dinput", NULL-terminated, and the
     * names they point into. */
    const char **dinput_sites;
    char (*dinput_names)[EMU_TENSOR_NAME_MAX];
} run;

/* Every how many steps the histograms are measured (0: never in a step). */
static int hist_every(const emu_train_config *c)
{
    return c->hist_every ? c->hist_every : c->stats_every;
}

/* What a step measures: everything on a histogram step; otherwise the
 * counters, swamping and MPFR samples, with histograms only at the sites
 * of stats.hist_always (layer_rows reads their zeros every step).  The
 * histograms are the commit's costliest statistic: kept every step, they
 * took a seventh of an fp32 MLP step's instructions and a quarter of the
 * emulated presets'. */
static unsigned step_measure(const emu_train_config *c, int64_t step)
{
    const int every = hist_every(c);
    if (every > 0 && step % every == 0)
        return EMU_MEASURE_ALL;
    return EMU_MEASURE_ALL & ~(unsigned)EMU_MEASURE_HIST;
}

/* r->dinput_sites for the model built: false if out of memory. */
static bool list_dinput_sites(run *r)
{
    const int n = r->m.n_layers;
    r->dinput_sites = calloc((size_t)n + 1, sizeof *r->dinput_sites);
    r->dinput_names = calloc((size_t)n + 1, sizeof *r->dinput_names);
    if (!r->dinput_sites || !r->dinput_names)
        return false;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (r->m.layers[i].has_params) {
            snprintf(r->dinput_names[k], sizeof r->dinput_names[k],
                     "%s.dinput", r->m.layers[i].name);
            r->dinput_sites[k] = r->dinput_names[k];
            k++;
        }
    return true;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *path_in(run *r, const char *file)
{
    snprintf(r->path, sizeof r->path, "%s/%s", r->dir, file);
    return r->path;
}

static int save_sbuf(run *r, const sbuf *b, const char *file, emu_error *err)
{
    return emu_write_atomic(path_in(r, file), write_sbuf, b, err);
}

/* The settings a run's numbers depend on, as text: hashed into the
 * checkpoint so that a resume with other settings is refused. */
static void config_text(sbuf *b, const emu_train_config *c, const emu_policy *p)
{
    sb_printf(b, "preset=%s arch=%s data=%s train=%zu test=%zu epochs=%d "
              "max_steps=%lld batch=%d opt=%d lr=%.17g momentum=%.17g wd=%.17g "
              "b1=%.17g b2=%.17g eps=%.17g schedule=%d lr_final=%.17g "
              "lr_step=%lld loss_mult=%.17g seed=%llu ref_rate=%.17g "
              "stats_every=%d\n",
              c->preset, c->arch, c->data, c->train_examples, c->test_examples,
              c->epochs, (long long)c->max_steps, c->batch, (int)c->opt, c->lr,
              c->momentum, c->weight_decay, c->beta1, c->beta2, c->eps,
              (int)c->schedule, c->lr_final, (long long)c->lr_step,
              c->loss_mult, (unsigned long long)c->seed, c->ref_rate,
              c->stats_every);
    /* Settings added later, written only when used: a run without them
     * keeps the fingerprint (and checkpoint) it always had. */
    if (c->warmup)
        sb_printf(b, "warmup=%lld\n", (long long)c->warmup);
    if (c->clip_norm != 0.0)
        sb_printf(b, "clip_norm=%.17g\n", c->clip_norm);
    if (c->seq_len || c->eval_windows)
        sb_printf(b, "seq_len=%d eval_windows=%zu\n", c->seq_len,
                  c->eval_windows);
    if (c->hist_every)
        sb_printf(b, "hist_every=%d\n", c->hist_every);
    char *ptext = NULL;
    size_t plen = 0;
    FILE *fp = open_memstream(&ptext, &plen);
    if (fp) {
        emu_policy_write_json(p, fp, 0);
        fclose(fp);
        sb_printf(b, "%s\n", ptext);
        free(ptext);
    }
}

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* ---- output folder ---------------------------------------------------------- */

static int make_dirs(const char *path)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

static const char *const run_files[] = {
    "meta.json", "steps.csv", "ops_steps.csv", "layers_steps.csv", "eval.csv",
    "ops.csv", "hist.csv", "ops.json", "summary.txt", "checkpoint.bin",
    "weights.safetensors", NULL,
};

/* Whether path is a run's record: libemu's meta.json begins so. */
static bool is_meta(const char *path)
{
    static const char head[] = "{\n  \"libemu_version\": ";
    char buf[sizeof head - 1];
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return false;
    bool ok = fread(buf, 1, sizeof buf, fp) == sizeof buf &&
              !memcmp(buf, head, sizeof buf);
    fclose(fp);
    return ok;
}

/* The name of one entry of dir other than . and .. into name ("" if none). */
static void some_entry(const char *dir, char *name, size_t size)
{
    name[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(name, size, "%s", e->d_name);
            break;
        }
    closedir(d);
}

/* Whether the run may use its folder; nothing is changed yet.  A folder
 * that is not a run's is never written into, --force or not: it may hold
 * a user's own steps.csv or summary.txt. */
static int check_dir(run *r, emu_error *err)
{
    const emu_train_config *c = r->cfg;
    struct stat st;
    bool exists = stat(r->dir, &st) == 0;
    if (exists && !S_ISDIR(st.st_mode))
        return emu_fail(err, EMU_ESTATE, r->dir, "", "exists and is not a folder");
    if (c->resume) {
        if (!exists || stat(path_in(r, "checkpoint.bin"), &st) != 0)
            return emu_fail(err, EMU_ESTATE, r->dir, "", "no checkpoint.bin to resume "
                            "from%s", is_meta(path_in(r, "meta.json")) ?
                            " (the run ended before its first one: start it "
                            "again with --force)" : "");
        if (stat(path_in(r, "meta.json"), &st) != 0)
            return emu_fail(err, EMU_ESTATE, r->dir, "", "no meta.json beside "
                            "checkpoint.bin: the run's record is missing, so "
                            "the checkpoint cannot be checked against it");
        return 0;
    }
    if (!exists)
        return 0;
    if (is_meta(path_in(r, "meta.json"))) {
        if (!c->force)
            return emu_fail(err, EMU_ESTATE, r->dir, "", "holds a run already: use "
                            "--resume to continue it or --force to replace it");
        return 0;
    }
    char name[256];
    some_entry(r->dir, name, sizeof name);
    if (name[0])
        return emu_fail(err, EMU_ESTATE, r->dir, "", "is not empty and holds no run "
                        "(no libemu meta.json; it holds '%s'): give --out a "
                        "new or empty folder; --force replaces only a run", name);
    return 0;
}

/* Once data and model are ready: the folder is created, or a replaced
 * run's files removed (a refused setting never costs the old run). */
static int claim_dir(run *r, emu_error *err)
{
    if (r->cfg->resume)
        return 0;
    if (r->cfg->force)
        for (int i = 0; run_files[i]; i++)
            remove(path_in(r, run_files[i]));
    if (make_dirs(r->dir))
        return emu_fail(err, EMU_EIO, r->dir, "", "cannot create the folder: %s",
                        strerror(errno));
    return 0;
}

/* ---- schedule, data ------------------------------------------------------------ */

/* The learning rate of step `step` (0-based) of a run of `total` steps: a
 * function of the step alone, so that a resumed run needs nothing stored.
 * Warm-up (llm.c's form) reaches lr at its last step; the decay then runs
 * over the steps after it as over a run of their own. */
static double lr_at(const emu_train_config *c, int64_t step, int64_t total)
{
    if (c->warmup > 0) {
        if (step < c->warmup)
            return c->lr * (double)(step + 1) / (double)c->warmup;
        step -= c->warmup;
        total -= c->warmup;
    }
    switch (c->schedule) {
    case EMU_LR_STEP:
        return c->lr_step > 0 ? c->lr * pow(c->lr_final > 0.0 ? c->lr_final : 0.1,
                                            (double)(step / c->lr_step))
                              : c->lr;
    case EMU_LR_COSINE: {
        double t = total > 1 ? (double)step / (double)(total - 1) : 1.0;
        return c->lr_final + 0.5 * (c->lr - c->lr_final) *
                                 (1.0 + cos(3.14159265358979323846 * t));
    }
    default:
        return c->lr;
    }
}

static size_t example_size(const emu_dataset *d)
{
    return (size_t)d->channels * (size_t)d->height * (size_t)d->width;
}

typedef struct batch_gather {
    run *r;
    const emu_dataset *d;
    const size_t *idx;
    size_t count;
} batch_gather;

/* Examples b*t/T .. b*(t+1)/T - 1 of the batch: rows scattered over the
 * data set, so mostly cache misses, which two threads overlap. */
static void gather_part(void *p, int t, int T)
{
    const batch_gather *bg = p;
    const size_t es = example_size(bg->d);
    const size_t b = (size_t)bg->r->m.batch;
    for (size_t i = b * (size_t)t / (size_t)T;
         i < b * (size_t)(t + 1) / (size_t)T; i++) {
        /* A short last batch (evaluation) repeats its first example. */
        size_t k = bg->idx[i < bg->count ? i : 0];
        memcpy(bg->r->batch_x + i * es, bg->d->x + k * es, es * sizeof(float));
        bg->r->batch_y[i] = bg->d->y[k];
    }
}

/* Bytes per part of a batch's gather at least (a batch of 64 28x28
 * images is 200 kB: two parts). */
enum { GATHER_PART_MIN = 32 * 1024 };

static int load_batch(run *r, const emu_dataset *d, const size_t *idx,
                      size_t count)
{
    const size_t es = example_size(d);
    const int b = r->m.batch;
    batch_gather bg = { r, d, idx, count };
    const size_t bytes = (size_t)b * es * sizeof(float);
    emu_pool_run(emu_pool_parts(r->ctx.threads, bytes, GATHER_PART_MIN),
                 gather_part, &bg);
    return emu_t_load(&r->ctx, "input", &r->m.x, r->batch_x,
                      (size_t)b * es, &r->p->activation.rnd);
}

/* A language model's step: the training windows of `step` into the
 * model's tokens and the targets into batch_y. */
static void load_text_batch(run *r, int64_t step)
{
    const size_t rows = (size_t)r->m.batch * (size_t)r->T;
    emu_text_batch(&r->ttrain, r->m.batch, r->T, r->cfg->seed, (uint64_t)step,
                   r->m.tokens, r->win_y);
    for (size_t i = 0; i < rows; i++)
        r->batch_y[i] = r->win_y[i];
}

static const emu_tensor *logits(const emu_model *m)
{
    return &m->layers[m->n_layers - 1].y;
}

/* Correct predictions among the first `count` rows, and their summed
 * cross-entropy (binary64, from the rounded logits). */
static int score(const emu_model *m, const int *labels, size_t count,
                 double *loss_sum)
{
    const emu_tensor *y = logits(m);
    const int k = m->seq_len ? m->vocab : m->classes; /* rows of logits */
    int right = 0;
    for (size_t i = 0; i < count; i++) {
        const float *row = y->data + i * (size_t)k;
        int best = 0;
        double mx = row[0];
        for (int j = 1; j < k; j++)
            if (row[j] > mx || isnan(mx))
                mx = row[j], best = j;
        right += best == labels[i];
        double s = 0.0;
        for (int j = 0; j < k; j++)
            s += exp((double)row[j] - mx);
        *loss_sum += log(s) - ((double)row[labels[i]] - mx);
    }
    return right;
}

/* ---- gradients, scaling ------------------------------------------------------- */

static double pow2_floor(double x)
{
    int e;
    if (!(x > 0.0) || !isfinite(x))
        return 1.0;
    frexp(x, &e);
    return ldexp(1.0, e - 1);
}

/* Per-layer adaptive scales (Zhao et al.).  A gradient of standard
 * deviation sigma, if it were Gaussian, would lose a fraction
 * ~ sqrt(2/pi) * u / (D sigma) of its values below the format's underflow
 * threshold u at a total scale D; choose D to put that at the target rate,
 * keep the headroom its largest value needs, round down to a power of two.
 * The loss gradient (dlogits) gets its scale this way — that is the loss
 * scale — and each parameter layer l the factor D_l / T_l on its input
 * gradient (T_l: the scale its incoming gradient already carries; at least
 * 1), applied where that gradient is produced.
 *
 * The Gaussian estimate is optimistic for ReLU-gated gradients, which hold
 * far more mass near zero, so each estimate is multiplied by a factor fed
 * back from the underflow rate the choke point measured at that site in the
 * last step: doubled while above the target, halved while below a quarter
 * of it. */
static double adaptive_total(const layer_trace *t, const emu_format *f,
                             const emu_loss_scaling *s)
{
    double u = f->min_value / 2.0; /* below it, RNE gives zero */
    double want = 0.7978845608028654 * u / (t->sigma * s->target) * t->corr;
    double headroom = t->amax > 0.0 ? f->max / (4.0 * t->amax) : s->max;
    return pow2_floor(fmin(fmin(want, headroom), s->max));
}

static void adaptive_scales(run *r)
{
    emu_model *m = &r->m;
    const emu_loss_scaling *s = &r->p->scaling;
    const layer_trace *lt = &r->trace[m->n_layers];
    if (lt->sigma > 0.0) {
        double D = adaptive_total(lt, &m->dlogits.fmt, s);
        r->scale = fmin(pow2_floor(D / r->cfg->loss_mult * r->adaptive_cut),
                        s->max);
    }
    double T = r->scale * r->cfg->loss_mult;
    for (int i = m->n_layers - 1; i >= 0; i--) {
        emu_layer *l = &m->layers[i];
        l->scale = 1.0;
        if (!l->has_params)
            continue;
        const layer_trace *t = &r->trace[i];
        if (t->sigma > 0.0) {
            double D = adaptive_total(t, &l->dx.fmt, s);
            double a = pow2_floor(D / T * r->adaptive_cut);
            l->scale = a > 1.0 ? a : 1.0;
        }
        T *= l->scale;
    }
}

static double site_to_zero_rate(const emu_stats *st, const char *name)
{
    for (size_t i = 0; i < st->count; i++)
        if (st->sites[i].active && st->sites[i].step.results &&
            !strcmp(st->sites[i].name, name))
            return (double)st->sites[i].step.to_zero /
                   (double)st->sites[i].step.results;
    return -1.0;
}

static void feedback(layer_trace *t, double rate, double target)
{
    if (rate < 0.0)
        return;
    if (rate > target)
        t->corr = fmin(t->corr * 2.0, 0x1p24);
    else if (rate < target / 4.0)
        t->corr = fmax(t->corr * 0.5, 0x1p-24);
}

/* After a step: move each site's correction toward the target rate. */
static void adaptive_feedback(run *r)
{
    const double target = r->p->scaling.target;
    feedback(&r->trace[r->m.n_layers],
             site_to_zero_rate(&r->stats, "loss.dlogits"), target);
    for (int i = 0; i < r->m.n_layers; i++) {
        const emu_layer *l = &r->m.layers[i];
        if (!l->has_params)
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s.dinput", l->name);
        feedback(&r->trace[i], site_to_zero_rate(&r->stats, name), target);
    }
}

/* The total scale each layer's weight gradient carries. */
static void grad_scales(run *r)
{
    emu_model *m = &r->m;
    int first = 0;
    while (first < m->n_layers && !m->layers[first].has_params)
        first++;
    /* The loss multiplier of the "shifted" experiments makes gradients
     * small where they are computed and is divided out with the loss
     * scale, so a run in binary32 trains as if it were not there. */
    double T = r->scale * r->cfg->loss_mult;
    for (int i = m->n_layers - 1; i >= 0; i--) {
        emu_layer *l = &m->layers[i];
        l->grad_scale = T;
        if (l->has_params && i > first)
            T *= l->scale;
    }
}

static void trace_tensor(layer_trace *t, const emu_tensor *g, double unscale)
{
    double s2 = 0.0, amax = 0.0;
    size_t n = 0;
    for (size_t j = 0; j < g->n; j++) {
        double v = g->data[j] * unscale;
        if (!isfinite(v))
            continue;
        s2 += v * v;
        /* fmax without its NaN cases (v is finite): no call */
        amax = fabs(v) > amax ? fabs(v) : amax;
        n++;
    }
    t->sigma = n ? sqrt(s2 / (double)n) : 0.0;
    t->amax = amax;
}

/* ---- the step's own passes over the gradients, on ctx.threads -------
 * What the adaptive rule needs from this step (the spread of the unscaled
 * loss gradient and of each parameter layer's input gradient: sums of
 * doubles, so each tensor's whole on one part, in its one-thread order)
 * and whether every parameter gradient is finite (an AND: any split);
 * one pool job for both. */
typedef struct step_trace {
    layer_trace *out;
    const emu_tensor *g;
    double unscale;
    int part;
} step_trace;

typedef struct step_scan {
    step_trace *tr;           /* n_layers + 1 at most                     */
    int ntr;
    const emu_tensor **grads; /* 2 n_layers at most                       */
    int ngrads;
    size_t grad_total; /* elements of grads[], split evenly among parts */
    bool finite[EMU_POOL_MAX];
} step_scan;

static void step_scan_part(void *p, int t, int T)
{
    step_scan *sc = p;
    for (int i = 0; i < sc->ntr; i++)
        if (sc->tr[i].part == t)
            trace_tensor(sc->tr[i].out, sc->tr[i].g, sc->tr[i].unscale);
    /* elements e0 .. e1 - 1 of the gradients laid end to end */
    const size_t e0 = sc->grad_total * (size_t)t / (size_t)T;
    const size_t e1 = sc->grad_total * (size_t)(t + 1) / (size_t)T;
    bool ok = true;
    size_t base = 0;
    for (int i = 0; i < sc->ngrads && ok && base < e1; i++) {
        const size_t n = sc->grads[i]->n;
        const size_t a = e0 > base ? e0 - base : 0;
        const size_t b = e1 - base < n ? e1 - base : n;
        if (a < b)
            ok = emu_all_finite(sc->grads[i]->data + a, b - a);
        base += n;
    }
    sc->finite[t] = ok;
}

/* A traced element (a dependent double add) costs some ten checked ones;
 * below this many such units a part costs about what it saves. */
enum { SCAN_PART_MIN = 32768 };

/* Traces the gradients (r->trace) and returns whether every parameter
 * gradient is finite. */
static bool scan_gradients(run *r)
{
    emu_model *m = &r->m;
    const int L = m->n_layers;
    step_trace tr_small[16];
    const emu_tensor *g_small[32];
    step_trace *tr = L + 1 <= 16 ? tr_small : malloc((size_t)(L + 1) * sizeof *tr);
    const emu_tensor **grads =
        2 * L <= 32 ? g_small : malloc((size_t)(2 * L) * sizeof *grads);
    step_scan sc = { .tr = tr, .grads = grads };
    int T = r->ctx.threads < 1 ? 1 : r->ctx.threads;
    if (!tr || !grads)
        T = 1; /* below, the same passes with no table */
    size_t work = 0;
    if (tr)
        tr[sc.ntr++] = (step_trace){ &r->trace[L], &m->dlogits,
                                     1.0 / (r->scale * r->cfg->loss_mult), 0 };
    else
        trace_tensor(&r->trace[L], &m->dlogits,
                     1.0 / (r->scale * r->cfg->loss_mult));
    bool finite = true;
    for (int i = 0; i < L; i++) {
        emu_layer *l = &m->layers[i];
        if (!l->has_params)
            continue;
        if (l->dx.data) {
            const double u = 1.0 / (l->grad_scale * l->scale);
            if (tr)
                tr[sc.ntr++] = (step_trace){ &r->trace[i], &l->dx, u, 0 };
            else
                trace_tensor(&r->trace[i], &l->dx, u);
            work += l->dx.n;
        }
        if (grads) {
            grads[sc.ngrads++] = &l->weight.g;
            grads[sc.ngrads++] = &l->bias.g;
            sc.grad_total += l->weight.g.n + l->bias.g.n;
        } else {
            finite = finite && emu_all_finite(l->weight.g.data, l->weight.g.n) &&
                     emu_all_finite(l->bias.g.data, l->bias.g.n);
        }
    }
    if (tr && grads) {
        work += m->dlogits.n + sc.grad_total / 10;
        if (T > EMU_POOL_MAX)
            T = EMU_POOL_MAX;
        if ((size_t)T > work / SCAN_PART_MIN + 1)
            T = (int)(work / SCAN_PART_MIN + 1);
        /* traces to parts, largest first onto the least loaded part:
         * each sum is one tensor's, whichever part forms it */
        size_t load[EMU_POOL_MAX] = { 0 };
        for (int k = 0; k < sc.ntr && T > 1; k++) {
            int big = -1;
            for (int i = 0; i < sc.ntr; i++)
                if (tr[i].part == 0 && (big < 0 || tr[i].g->n > tr[big].g->n))
                    big = i;
            int least = 0;
            for (int t = 1; t < T; t++)
                if (load[t] < load[least])
                    least = t;
            tr[big].part = least + 1; /* 1-based while placing */
            load[least] += tr[big].g->n;
        }
        for (int i = 0; i < sc.ntr && T > 1; i++)
            tr[i].part--;
        emu_pool_run(T, step_scan_part, &sc);
        for (int t = 0; t < T; t++)
            finite = finite && sc.finite[t];
    } else if (grads) {
        sc.ntr = 0;
        step_scan_part(&sc, 0, 1);
        finite = sc.finite[0];
    } else if (tr) {
        for (int i = 0; i < sc.ntr; i++)
            trace_tensor(tr[i].out, tr[i].g, tr[i].unscale);
    }
    if (tr != tr_small)
        free(tr);
    if (grads != g_small)
        free(grads);
    return finite;
}

/* Loss-scale bookkeeping after a step; returns true if the step is skipped. */
static bool update_scale(run *r, bool finite)
{
    const emu_loss_scaling *s = &r->p->scaling;
    switch (s->kind) {
    case EMU_SCALE_DYNAMIC:
    case EMU_SCALE_ENHANCED: {
        if (s->kind == EMU_SCALE_ENHANCED && s->floor_every > 0 &&
            r->step > 0 && r->step % s->floor_every == 0)
            r->floor = fmin(r->floor * s->floor_growth, s->max);
        double lo = s->kind == EMU_SCALE_ENHANCED ? r->floor : 0x1p-24;
        if (!finite) {
            r->scale = fmax(r->scale * s->backoff, lo);
            r->good = 0;
            return true;
        }
        if (++r->good >= s->interval) {
            r->scale = fmin(r->scale * s->growth, s->max);
            r->good = 0;
        }
        r->scale = fmax(r->scale, lo);
        return false;
    }
    case EMU_SCALE_ADAPTIVE:
        if (!finite) {
            r->adaptive_cut *= 0.5;
            return true;
        }
        r->adaptive_cut = fmin(1.0, r->adaptive_cut * 2.0);
        return false;
    case EMU_SCALE_LAYERWISE:
        /* The rule keeps nothing from step to step (its factors come from
         * each step's operands, emu_model_backward): a step whose
         * gradients overflowed anyway is skipped, and that is all. */
        return !finite;
    default:
        return false; /* none, static: a non-finite gradient goes in */
    }
}

/* ---- weight updates ------------------------------------------------------------ */

/* One optimizer update of w (rounded under w_rnd) from g; the state
 * (momentum, moments) is rounded under state_rnd. */
static int optimizer_step(run *r, const char *site, emu_tensor *w, emu_param *prm,
                          const emu_tensor *g, double lr,
                          const emu_rounding *w_rnd,
                          const emu_rounding *state_rnd)
{
    const emu_train_config *c = r->cfg;
    if (c->opt == EMU_OPT_ADAM) {
        emu_adam_opts o = { .lr = (float)lr, .beta1 = (float)c->beta1,
                            .beta2 = (float)c->beta2, .eps = (float)c->eps,
                            .weight_decay = (float)c->weight_decay,
                            .t = r->step + 1 - r->skipped,
                            .state_rnd = state_rnd };
        return emu_t_adam_update(&r->ctx, site, w, &prm->m, &prm->v, g, &o,
                                 w_rnd);
    }
    emu_sgd_opts o = { .lr = (float)lr, .momentum = (float)c->momentum,
                       .weight_decay = (float)c->weight_decay,
                       .state_rnd = state_rnd };
    return emu_t_sgd_update(&r->ctx, site, w, c->momentum != 0.0 ? &prm->v : NULL,
                            g, &o, w_rnd);
}

/* The step buffer of a Kahan-compensated Adam update of prm (layer l). */
static emu_tensor *kahan_delta(run *r, const emu_layer *l, const emu_param *prm)
{
    if (!r->kahan_delta) {
        r->kahan_delta = calloc(2 * (size_t)r->m.n_layers, sizeof *r->kahan_delta);
        if (!r->kahan_delta) {
            emu_ctx_failc(&r->ctx, EMU_ENOMEM, prm->c.name, "out of memory");
            return NULL;
        }
    }
    emu_tensor *d = &r->kahan_delta[2 * (size_t)(l - r->m.layers) +
                                    (prm == &l->bias)];
    if (!d->data) {
        char name[EMU_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "%.*s.delta", (int)sizeof name - 7,
                 prm->w.name);
        if (emu_tensor_alloc(d, name, EMU_ROLE_OTHER, &prm->w.fmt, prm->w.ndim,
                             prm->w.shape, &r->ctx.err))
            return NULL;
    }
    return d;
}

/* Kahan-compensated updates in the weight's own format (Zamirai et al.):
 *   delta = the optimizer's step;  y = delta - c;  t = w + y;
 *   c = (t - w) - y;  w = t,
 * each a rounded op.  The addition t = w + y is done as an SGD step of
 * learning rate 1 on -y, so that its swamping is measured like any update.
 * SGD: delta = -lr v (v the momentum of the decayed gradient, or the
 * gradient), one rounding into w's format, in the buffer m.  AdamW: delta
 * = -lr wd w (one rounding; the coefficient -lr wd is a binary32), then
 * the Adam op moves it by -lr m_hat / (sqrt(v_hat) + eps) (a second
 * rounding), updating the moments; sites "<name>.kahan.decay",
 * "<name>.kahan.delta" (and its ".m", ".v"). */
static int kahan_step(run *r, const emu_layer *l, const char *name,
                      emu_param *prm, double lr, const emu_rounding *w_rnd,
                      const emu_rounding *state_rnd)
{
    emu_ctx *ctx = &r->ctx;
    const emu_train_config *c = r->cfg;
    char site[96];
    emu_tensor *delta = &prm->m;
    if (c->opt == EMU_OPT_ADAM) {
        if (!(delta = kahan_delta(r, l, prm)))
            return -1;
        if (c->weight_decay != 0.0) {
            snprintf(site, sizeof site, "%s.kahan.decay", name);
            if (emu_t_scale(ctx, site, delta,
                            (float)(-(double)(float)lr *
                                    (double)(float)c->weight_decay),
                            &prm->w, w_rnd))
                return -1;
        } else {
            memset(delta->data, 0, delta->n * sizeof *delta->data);
        }
        emu_adam_opts o = { .lr = (float)lr, .beta1 = (float)c->beta1,
                            .beta2 = (float)c->beta2, .eps = (float)c->eps,
                            .t = r->step + 1 - r->skipped,
                            .state_rnd = state_rnd };
        snprintf(site, sizeof site, "%s.kahan.delta", name);
        if (emu_t_adam_update(ctx, site, delta, &prm->m, &prm->v, &prm->g, &o,
                              w_rnd))
            return -1;
    } else {
        const emu_tensor *step = &prm->g;
        /* The decayed gradient and the momentum under the state's
         * rounding, everything in the weight's format under the weight's. */
        if (c->weight_decay != 0.0) {
            snprintf(site, sizeof site, "%s.decay", name);
            if (emu_t_axpy(ctx, site, &prm->g, (float)c->weight_decay, &prm->w,
                           &prm->g, state_rnd))
                return -1;
        }
        if (c->momentum != 0.0) {
            snprintf(site, sizeof site, "%s.update.v", name);
            if (emu_t_axpy(ctx, site, &prm->v, (float)c->momentum, &prm->v,
                           &prm->g, state_rnd))
                return -1;
            step = &prm->v;
        }
        snprintf(site, sizeof site, "%s.kahan.delta", name);
        if (emu_t_scale(ctx, site, delta, (float)-lr, step, w_rnd))
            return -1;
    }
    snprintf(site, sizeof site, "%s.kahan.negy", name); /* c - delta = -y */
    if (emu_t_sub(ctx, site, delta, &prm->c, delta, w_rnd))
        return -1;
    snprintf(site, sizeof site, "%s.kahan.wold", name);
    if (emu_t_cast(ctx, site, &prm->gm, &prm->w, w_rnd))
        return -1;
    snprintf(site, sizeof site, "%s.update", name);
    emu_sgd_opts o = { .lr = 1.0f };
    if (emu_t_sgd_update(ctx, site, &prm->w, NULL, delta, &o, w_rnd))
        return -1;
    snprintf(site, sizeof site, "%s.kahan.c", name);
    if (emu_t_sub(ctx, site, &prm->c, &prm->w, &prm->gm, w_rnd))
        return -1;
    snprintf(site, sizeof site, "%s.kahan.c2", name);
    return emu_t_add(ctx, site, &prm->c, &prm->c, delta, w_rnd);
}

/* The gradient an update reads once it is unscaled: the master-format
 * copy under a master policy, the gradient itself otherwise; and the
 * rounding of that tensor's role. */
static emu_tensor *update_grad(const emu_policy *p, const emu_layer *l,
                               emu_param *prm, const emu_rounding **rnd)
{
    const bool ex = l->exempt;
    if (p->use_master) {
        *rnd = &(ex ? &p->exempt_prec : &p->master)->rnd;
        return &prm->gm;
    }
    *rnd = &(ex ? &p->exempt_prec : &p->weight_grad)->rnd;
    return &prm->g;
}

/* First half of an update: the gradient unscaled (under a master policy
 * cast to the master format first), ready for clipping and the step. */
static int unscale_param(run *r, const emu_layer *l, emu_param *prm,
                         const char *what)
{
    const emu_policy *p = r->p;
    emu_ctx *ctx = &r->ctx;
    const bool ex = l->exempt;
    const emu_role_prec *mp = ex ? &p->exempt_prec : &p->master;
    const emu_role_prec *gp = ex ? &p->exempt_prec : &p->weight_grad;
    char name[64], site[96];
    snprintf(name, sizeof name, "%s.%s", l->name, what);
    const double inv = 1.0 / l->grad_scale; /* a power of two */

    if (p->use_master) {
        /* The gradient goes to the master format, is unscaled there, and
         * updates the master copy; the compute copy is its rounding. */
        snprintf(site, sizeof site, "%s.gradm", name);
        if (emu_t_cast(ctx, site, &prm->gm, &prm->g, &mp->rnd))
            return -1;
        if (inv != 1.0) {
            snprintf(site, sizeof site, "%s.unscale", name);
            if (emu_t_scale(ctx, site, &prm->gm, (float)inv, &prm->gm,
                            &mp->rnd))
                return -1;
        }
        return 0;
    }
    if (inv != 1.0) {
        snprintf(site, sizeof site, "%s.unscale", name);
        if (emu_t_scale(ctx, site, &prm->g, (float)inv, &prm->g, &gp->rnd))
            return -1;
    }
    return 0;
}

/* Second half: the optimizer step from the unscaled gradient. */
static int step_param(run *r, const emu_layer *l, emu_param *prm,
                      const char *what, double lr)
{
    const emu_policy *p = r->p;
    emu_ctx *ctx = &r->ctx;
    const bool ex = l->exempt;
    const emu_role_prec *wp = ex ? &p->exempt_prec : &p->weight;
    const emu_role_prec *mp = ex ? &p->exempt_prec : &p->master;
    const emu_role_prec *sp = ex ? &p->exempt_prec : &p->opt_state;
    const emu_rounding sr = { .mode = EMU_RS, .sr_bits = 64 };
    char name[64], site[96];
    snprintf(name, sizeof name, "%s.%s", l->name, what);

    if (p->use_master) {
        snprintf(site, sizeof site, "%s.update", name);
        if (optimizer_step(r, site, &prm->master, prm, &prm->gm, lr,
                           p->update == EMU_UPDATE_SR ? &sr : &mp->rnd,
                           &sp->rnd))
            return -1;
        snprintf(site, sizeof site, "%s.cast", name);
        return emu_t_cast(ctx, site, &prm->w, &prm->master, &wp->rnd);
    }
    if (p->update == EMU_UPDATE_KAHAN)
        return kahan_step(r, l, name, prm, lr, &wp->rnd, &sp->rnd);
    snprintf(site, sizeof site, "%s.update", name);
    return optimizer_step(r, site, &prm->w, prm, &prm->g, lr,
                          p->update == EMU_UPDATE_SR ? &sr : &wp->rnd,
                          &sp->rnd);
}

/* Without clipping each parameter is unscaled and stepped in turn (the op
 * order, and so the site order and stochastic streams, of every run
 * before clipping existed). */
static int update_param(run *r, const emu_layer *l, emu_param *prm,
                        const char *what, double lr)
{
    return unscale_param(r, l, prm, what) || step_param(r, l, prm, what, lr);
}

/* emu/nn.h: the update's gradients as update_grad picks them. */
int emu_model_clip_grad_norm(emu_model *m, emu_ctx *ctx, const emu_policy *p,
                             double clip, bool skip_nonfinite, double *norm)
{
    if (!(clip >= 0.0) || isinf(clip))
        return emu_ctx_fail(ctx, "clip", "the clipping norm %g is not a "
                            "finite number >= 0", clip);
    const emu_role_prec *gp = p->use_master ? &p->master : &p->weight_grad;
    size_t nt = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].has_params)
            nt += m->layers[i].has_bias ? 2 : 1;
    emu_tensor sq, one, total, nrm;
    memset(&sq, 0, sizeof sq), memset(&one, 0, sizeof one);
    memset(&total, 0, sizeof total), memset(&nrm, 0, sizeof nrm);
    int rc = -1;
    if (!nt) {
        *norm = 0.0;
        return 0;
    }
    if (emu_tensor_alloc4(&sq, "clip.sumsq", EMU_ROLE_WEIGHT_GRAD, &gp->fmt, nt,
                          0, 0, 0, &ctx->err) ||
        emu_tensor_alloc4(&one, "clip.sumsq", EMU_ROLE_WEIGHT_GRAD, &gp->fmt, 1,
                          0, 0, 0, &ctx->err) ||
        emu_tensor_alloc4(&total, "clip.sum", EMU_ROLE_WEIGHT_GRAD, &gp->fmt, 1,
                          0, 0, 0, &ctx->err) ||
        emu_tensor_alloc4(&nrm, "clip.norm", EMU_ROLE_WEIGHT_GRAD, &gp->fmt, 1,
                          0, 0, 0, &ctx->err))
        goto done;
    size_t k = 0;
    for (int i = 0; i < m->n_layers; i++) {
        emu_layer *l = &m->layers[i];
        if (!l->has_params)
            continue;
        emu_param *prms[2] = { &l->weight, l->has_bias ? &l->bias : NULL };
        for (int t = 0; t < 2 && prms[t]; t++) {
            const emu_rounding *grnd;
            const emu_tensor *g = update_grad(p, l, prms[t], &grnd);
            if (emu_t_reduce(ctx, "clip.sumsq", &one, g, EMU_REDUCE_SUMSQ, -1,
                             &p->accum, &gp->rnd))
                goto done;
            sq.data[k++] = one.data[0]; /* already in sq's format */
        }
    }
    if (emu_t_reduce(ctx, "clip.sum", &total, &sq, EMU_REDUCE_SUM, -1,
                     &p->accum, &gp->rnd) ||
        emu_t_unary(ctx, "clip.norm", &nrm, &total, EMU_UNARY_SQRT, 0.0f, 0.0f,
                    &gp->rnd))
        goto done;
    *norm = nrm.data[0];
    rc = 0;
    if (clip <= 0.0 || (skip_nonfinite && !isfinite(*norm)))
        goto done;
    float coef = (float)clip / (nrm.data[0] + 1e-6f);
    if (!(coef < 1.0f))
        goto done;
    for (int i = 0; i < m->n_layers && !rc; i++) {
        emu_layer *l = &m->layers[i];
        if (!l->has_params)
            continue;
        emu_param *prms[2] = { &l->weight, l->has_bias ? &l->bias : NULL };
        const char *whats[2] = { "w", "b" };
        for (int t = 0; t < 2 && prms[t] && !rc; t++) {
            const emu_rounding *grnd;
            emu_tensor *g = update_grad(p, l, prms[t], &grnd);
            char site[96];
            snprintf(site, sizeof site, "%s.%s.clip", l->name, whats[t]);
            rc = emu_t_scale(ctx, site, g, coef, g, grnd);
        }
    }
done:
    emu_tensor_free(&sq), emu_tensor_free(&one);
    emu_tensor_free(&total), emu_tensor_free(&nrm);
    return rc;
}

/* ---- per-step records ------------------------------------------------------------ */

typedef struct step_rates {
    double agrad_zero, agrad_under, wgrad_zero, act_zero, overflow, absorbed;
    uint64_t agrad_n, wgrad_n, adds;
} step_rates;

static step_rates rates(const emu_stats *st)
{
    step_rates q;
    memset(&q, 0, sizeof q);
    uint64_t az = 0, au = 0, wz = 0, actz = 0, actn = 0, ovf = 0, all = 0, abs = 0;
    for (size_t i = 0; i < st->count; i++) {
        const emu_site *s = &st->sites[i];
        if (!s->active)
            continue;
        const emu_site_stats *t = &s->step;
        ovf += t->overflow;
        all += t->results;
        if (s->role == EMU_ROLE_ACT_GRAD) {
            az += t->to_zero, au += t->underflow, q.agrad_n += t->results;
        } else if (s->role == EMU_ROLE_WEIGHT_GRAD && !emu_ends_with(s->name, ".gradm") &&
                   !emu_ends_with(s->name, ".unscale") &&
                   !emu_ends_with(s->name, ".clip") && strncmp(s->name, "clip.", 5)) {
            wz += t->to_zero, q.wgrad_n += t->results;
        } else if (s->role == EMU_ROLE_ACTIVATION) {
            actz += t->to_zero, actn += t->results;
        }
        if (emu_ends_with(s->name, ".update")) {
            abs += t->absorbed;
            q.adds += t->adds;
        }
    }
    q.agrad_zero = q.agrad_n ? (double)az / (double)q.agrad_n : 0.0;
    q.agrad_under = q.agrad_n ? (double)au / (double)q.agrad_n : 0.0;
    q.wgrad_zero = q.wgrad_n ? (double)wz / (double)q.wgrad_n : 0.0;
    q.act_zero = actn ? (double)actz / (double)actn : 0.0;
    q.overflow = all ? (double)ovf / (double)all : 0.0;
    q.absorbed = q.adds ? (double)abs / (double)q.adds : 0.0;
    return q;
}

static const char STEPS_HEADER[] =
    "step,epoch,lr,loss,accuracy,loss_scale,skipped,act_grad_to_zero,"
    "act_grad_underflow,weight_grad_to_zero,activation_to_zero,overflow_rate,"
    "update_absorbed,updates,seconds\n";

static void layer_rows(run *r)
{
    /* Per parameter layer: its scales and how much of its gradients
     * vanished in this step. */
    for (int i = 0; i < r->m.n_layers; i++) {
        const emu_layer *l = &r->m.layers[i];
        if (!l->has_params)
            continue;
        char dname[64], wname[64];
        snprintf(dname, sizeof dname, "%s.dinput", l->name);
        snprintf(wname, sizeof wname, "%s.dweight", l->name);
        double dz = NAN, wz = NAN, dsub = NAN, dzero = NAN, dexact0 = NAN;
        for (size_t k = 0; k < r->stats.count; k++) {
            const emu_site *s = &r->stats.sites[k];
            if (!s->active || !s->step.results)
                continue;
            double n = (double)s->step.results;
            if (!strcmp(s->name, dname)) {
                dz = (double)s->step.to_zero / n;
                dsub = (double)s->step.subnormal / n;
                /* Zero however it came about (here or upstream), and zero
                 * before this op's rounding: their difference is what this
                 * layer lost itself. */
                dzero = (double)s->step.hist_rounded[EMU_HIST_ZERO] / n;
                dexact0 = (double)s->step.hist_exact[EMU_HIST_ZERO] / n;
            } else if (!strcmp(s->name, wname) && s->role == EMU_ROLE_WEIGHT_GRAD) {
                wz = (double)s->step.to_zero / n;
            }
        }
        sb_printf(&r->layers, "%lld,%s,%d,%.17g,%.17g,%.9g,%.9g,%.9g,%.9g,"
                  "%.9g,%.9g\n",
                  (long long)r->step, l->name, i, l->scale, l->grad_scale, dz,
                  dsub, dzero, dexact0, wz, r->trace[i].sigma);
    }
}

/* This step's per-op rows, appended to the in-memory ops_steps.csv. */
static void append_step_rows(run *r)
{
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    if (!fp)
        return;
    emu_stats_write_step_rows(&r->stats, fp, false, NULL);
    fclose(fp);
    sb_printf(&r->ops_steps, "%s", text);
    free(text);
}

/* ---- evaluation ------------------------------------------------------------------ */

/* The loss of a language model in the units people quote. */
static double bits_per_char(double nats)
{
    return nats / 0.69314718055994530942;
}

/* A language model's evaluation: the eval_count validation windows, in
 * batches (a short last batch repeats window 0, scored once). */
static int evaluate_lm(run *r, int epoch, double *acc_out)
{
    emu_stats *saved = r->ctx.stats;
    r->ctx.stats = NULL;
    r->m.eval = true;
    const size_t b = (size_t)r->m.batch, T = (size_t)r->T;
    size_t right = 0;
    double loss = 0.0;
    int rc = 0;
    for (size_t w0 = 0; w0 < r->eval_count && !rc; w0 += b) {
        size_t count = r->eval_count - w0 < b ? r->eval_count - w0 : b;
        emu_text_eval_batch(&r->tval, r->T, r->eval_count, w0, r->m.batch,
                            r->m.tokens, r->win_y);
        for (size_t i = 0; i < b * T; i++)
            r->batch_y[i] = r->win_y[i];
        rc = emu_model_forward(&r->m, &r->ctx, r->p);
        if (!rc)
            right += (size_t)score(&r->m, r->batch_y, count * T, &loss);
    }
    r->ctx.stats = saved;
    r->m.eval = false;
    if (rc)
        return -1;
    const double rows = (double)(r->eval_count * T);
    *acc_out = (double)right / rows;
    loss /= rows;
    sb_printf(&r->eval, "%d,%lld,%.9g,%.9g,%.9g,%.9g\n", epoch,
              (long long)r->step, loss, *acc_out, exp(loss), bits_per_char(loss));
    r->last_eval_loss = loss;
    r->last_eval_ppl = exp(loss);
    r->last_eval_bpc = bits_per_char(loss);
    return 0;
}

static int evaluate(run *r, int epoch, double *acc_out)
{
    if (r->lm)
        return evaluate_lm(r, epoch, acc_out);
    emu_stats *saved = r->ctx.stats;
    r->ctx.stats = NULL; /* evaluation is not part of the measured run */
    r->m.eval = true;    /* batch norm normalises with its running statistics */
    const emu_dataset *d = &r->test;
    const size_t b = (size_t)r->m.batch;
    size_t *idx = malloc(b * sizeof *idx);
    if (!idx) {
        r->ctx.stats = saved;
        return emu_ctx_failc(&r->ctx, EMU_ENOMEM, "eval", "out of memory");
    }
    size_t right = 0;
    double loss = 0.0;
    int rc = 0;
    for (size_t i0 = 0; i0 < d->n && !rc; i0 += b) {
        size_t count = d->n - i0 < b ? d->n - i0 : b;
        for (size_t i = 0; i < b; i++)
            idx[i] = i0 + (i < count ? i : 0);
        rc = load_batch(r, d, idx, count) || emu_model_forward(&r->m, &r->ctx, r->p);
        if (!rc)
            right += (size_t)score(&r->m, r->batch_y, count, &loss);
    }
    free(idx);
    r->ctx.stats = saved;
    r->m.eval = false;
    if (rc)
        return -1;
    *acc_out = (double)right / (double)d->n;
    sb_printf(&r->eval, "%d,%lld,%.9g,%.9g\n", epoch, (long long)r->step,
              loss / (double)d->n, *acc_out);
    return 0;
}

/* The final evaluation of a finished run, from the last row of eval.csv
 * (written with the final checkpoint): its accuracy, and a language
 * model's loss, perplexity and bits per character as they were printed.
 * Evaluating again could draw other stochastic roundings. */
static int final_eval(run *r, double *acc, emu_error *err)
{
    const char *row = NULL;
    for (size_t i = 0; r->eval.p && i + 1 < r->eval.len; i++)
        if (r->eval.p[i] == '\n')
            row = r->eval.p + i + 1;
    int epoch;
    long long step;
    double v[4] = { NAN, NAN, NAN, NAN };
    const int want = r->lm ? 6 : 4;
    if (!row || sscanf(row, "%d,%lld,%lf,%lf,%lf,%lf", &epoch, &step, &v[0], &v[1],
                       &v[2], &v[3]) != want || step != r->step)
        return emu_fail(err, EMU_ESTATE, path_in(r, "eval.csv"), "", "the "
                        "checkpoint is at the run's last step %lld but no "
                        "evaluation of that step is recorded",
                        (long long)r->step);
    *acc = v[1];
    if (r->lm) {
        r->last_eval_loss = v[0];
        r->last_eval_ppl = v[2];
        r->last_eval_bpc = v[3];
    }
    r->t0 = now();
    return 0;
}

/* ---- checkpoint ----------------------------------------------------------------- */

/* The layout is nn_ckpt.h's; what each section holds is decided here. */

/* Every tensor that carries state from step to step, in a fixed order:
 * per parameter layer, the weight's and the bias's tensors (those that
 * exist), then batch norm's running statistics.  (Models without batch
 * norm have none, so their checkpoints are those of before it.) */
static int state_tensors(emu_model *m, emu_tensor **out, int max)
{
    int n = 0;
    for (int i = 0; i < m->n_layers; i++) {
        emu_layer *l = &m->layers[i];
        if (!l->has_params)
            continue;
        emu_param *ps[2] = { &l->weight, &l->bias };
        for (int k = 0; k < 2; k++) {
            emu_tensor *ts[5] = { &ps[k]->w, &ps[k]->master, &ps[k]->m,
                                  &ps[k]->v, &ps[k]->c };
            for (int j = 0; j < 5; j++)
                if (ts[j]->data && n < max)
                    out[n++] = ts[j];
        }
        emu_tensor *bufs[2] = { &l->running_mean, &l->running_var };
        for (int j = 0; j < 2; j++)
            if (bufs[j]->data && n < max)
                out[n++] = bufs[j];
    }
    return n;
}

enum { MAX_STATE = 4096 };

static void put_amax(ckpt_out *o, const emu_amax_history *h)
{
    ckpt_u32(o, (uint32_t)h->len);
    ckpt_u32(o, (uint32_t)h->pos);
    ckpt_u64(o, h->rejected);
    /* Entries at len and beyond are never written (emu_amax_record). */
    ckpt_f32s(o, h->amax, (size_t)h->len);
}

static void get_amax(ckpt_in *in, emu_amax_history *h)
{
    memset(h, 0, sizeof *h);
    size_t at = in->pos;
    uint32_t len = ckpt_get_u32(in), pos = ckpt_get_u32(in);
    if (!in->failed && (len > EMU_AMAX_HISTORY_MAX || pos >= EMU_AMAX_HISTORY_MAX)) {
        in->pos = at;
        ckpt_bad(in, "an amax history of %u values at %u (at most %d)", len,
                 pos, EMU_AMAX_HISTORY_MAX);
        return;
    }
    h->len = (int)len;
    h->pos = (int)pos;
    h->rejected = ckpt_get_u64(in);
    ckpt_get_f32s(in, h->amax, len);
}

static void ckpt_image(run *r, ckpt_out *o)
{
    ckpt_begin(o);
    /* The configuration and policy ride along, so that a run resumes from
     * its folder alone (emu_train_resume). */
    ckpt_section(o, CKPT_CONF);
    ckpt_put_config(o, r->cfg);
    ckpt_section(o, CKPT_POLI);
    ckpt_put_policy(o, r->p);
    ckpt_section(o, CKPT_STAT);
    ckpt_u64(o, r->fingerprint);
    ckpt_u64(o, (uint64_t)r->step);
    ckpt_u64(o, (uint64_t)r->skipped);
    ckpt_u64(o, r->ctx.op_index);
    ckpt_f64(o, r->scale);
    ckpt_f64(o, r->floor);
    ckpt_f64(o, r->adaptive_cut);
    ckpt_u32(o, (uint32_t)r->good);
    ckpt_section(o, CKPT_LAYR);
    ckpt_u32(o, (uint32_t)r->m.n_layers);
    for (int i = 0; i <= r->m.n_layers; i++) {
        ckpt_f64(o, r->trace[i].sigma);
        ckpt_f64(o, r->trace[i].amax);
        ckpt_f64(o, r->trace[i].corr);
    }
    for (int i = 0; i < r->m.n_layers; i++) {
        const emu_layer *l = &r->m.layers[i];
        /* The scaled-operand recipes' state: amax histories, tensor scales. */
        ckpt_f64(o, l->scale);
        for (int k = 0; k < EMU_QT_COUNT; k++)
            put_amax(o, &l->priv->amax_hist[k]);
        for (int k = 0; k < EMU_QT_COUNT; k++)
            ckpt_f64(o, l->priv->tscale[k]);
    }
    ckpt_section(o, CKPT_TENS);
    emu_tensor *ts[MAX_STATE];
    int nt = state_tensors(&r->m, ts, MAX_STATE);
    ckpt_u64(o, (uint64_t)nt);
    for (int i = 0; i < nt; i++) {
        ckpt_str(o, ts[i]->name);
        ckpt_u64(o, ts[i]->n);
        ckpt_f32s(o, ts[i]->data, ts[i]->n);
    }
    ckpt_section(o, CKPT_SITE);
    ckpt_put_stats(o, &r->stats);
    ckpt_section(o, CKPT_TIME);
    ckpt_f64(o, r->elapsed_before + (now() - r->t0));
    ckpt_finish(o);
}

static int write_ckpt(FILE *fp, const void *arg)
{
    const ckpt_out *o = arg;
    return o->oom || fwrite(o->p, 1, o->len, fp) != o->len ? -1 : 0;
}

static int save_ckpt(run *r, emu_error *err)
{
    ckpt_out o;
    ckpt_image(r, &o);
    int rc = o.oom ? emu_fail(err, EMU_ENOMEM, path_in(r, "checkpoint.bin"), "",
                              "out of memory")
                   : emu_write_atomic(path_in(r, "checkpoint.bin"), write_ckpt,
                                      &o, err);
    ckpt_out_free(&o);
    return rc;
}

/* The loop's scalars; r NULL: only checked. */
static int get_scalars(ckpt_in *in, run *r)
{
    uint64_t fp = ckpt_get_u64(in);
    int64_t step = (int64_t)ckpt_get_u64(in);
    int64_t skipped = (int64_t)ckpt_get_u64(in);
    uint64_t op_index = ckpt_get_u64(in);
    double scale = ckpt_get_f64(in), floor = ckpt_get_f64(in);
    double cut = ckpt_get_f64(in);
    int good = (int)(int32_t)ckpt_get_u32(in);
    if (!in->failed && (step < 0 || skipped < 0 || skipped > step || good < 0))
        ckpt_bad(in, "step %lld with %lld skipped and %d clean: not a run's "
                 "state", (long long)step, (long long)skipped, good);
    if (ckpt_done(in))
        return -1;
    if (!r)
        return 0;
    if (fp != r->fingerprint)
        return emu_fail(in->err, EMU_ESTATE, in->path, "", "the checkpoint is from another "
                        "configuration: resume with the options the run "
                        "started with (see its meta.json)");
    r->step = step;
    r->skipped = skipped;
    r->ctx.op_index = op_index;
    r->scale = scale;
    r->floor = floor;
    r->adaptive_cut = cut;
    r->good = good;
    return 0;
}

/* Per-layer state; m and trace NULL: only checked. */
static int get_layers(ckpt_in *in, emu_model *m, layer_trace *trace)
{
    size_t at = in->pos;
    uint32_t n = ckpt_get_u32(in);
    /* 3 reals of trace and 64 bytes of layer at the least */
    if (!in->failed && ((m && n != (uint32_t)m->n_layers) ||
                        n > (in->end - in->pos) / 64)) {
        in->pos = at;
        ckpt_bad(in, "%u layers; the model has %d", n, m ? m->n_layers : -1);
        return -1;
    }
    for (uint32_t i = 0; i <= n && !in->failed; i++) {
        layer_trace t;
        t.sigma = ckpt_get_f64(in);
        t.amax = ckpt_get_f64(in);
        t.corr = ckpt_get_f64(in);
        if (trace)
            trace[i] = t;
    }
    for (uint32_t i = 0; i < n && !in->failed; i++) {
        emu_layer scratch;
        struct emu_layer_priv scratch_priv;
        scratch.priv = &scratch_priv;
        emu_layer *l = m ? &m->layers[i] : &scratch;
        l->scale = ckpt_get_f64(in);
        for (int k = 0; k < EMU_QT_COUNT; k++)
            get_amax(in, &l->priv->amax_hist[k]);
        for (int k = 0; k < EMU_QT_COUNT; k++)
            l->priv->tscale[k] = ckpt_get_f64(in);
    }
    return ckpt_done(in);
}

/* The state tensors, into m's (which must match them); m NULL: only
 * checked. */
static int get_tensors(ckpt_in *in, emu_model *m)
{
    emu_tensor *ts[MAX_STATE];
    int nt = m ? state_tensors(m, ts, MAX_STATE) : 0;
    size_t at = in->pos;
    size_t n = ckpt_get_count(in, 12, "tensors");
    if (!in->failed && m && n != (size_t)nt) {
        in->pos = at;
        ckpt_bad(in, "%zu state tensors; the model has %d", n, nt);
    }
    for (size_t i = 0; i < n && !in->failed; i++) {
        char name[EMU_TENSOR_NAME_MAX];
        ckpt_get_str(in, name, sizeof name);
        at = in->pos;
        size_t count = ckpt_get_count(in, 4, "values");
        if (in->failed)
            break;
        if (m && (strcmp(name, ts[i]->name) || count != ts[i]->n)) {
            in->pos = at;
            ckpt_bad(in, "tensor '%s' of %zu values where the model has '%s' "
                     "of %zu", name, count, ts[i]->name, ts[i]->n);
            break;
        }
        if (m)
            ckpt_get_f32s(in, ts[i]->data, count);
        else
            in->pos += 4 * count;
    }
    return ckpt_done(in);
}

static int get_time(ckpt_in *in, double *elapsed)
{
    *elapsed = ckpt_get_f64(in);
    return ckpt_done(in);
}

enum { CKPT_LIMIT = 1 << 30 }; /* far above any model this library trains */

static int read_ckpt(run *r, emu_error *err)
{
    const char *path = path_in(r, "checkpoint.bin");
    size_t size;
    unsigned char *img = ckpt_slurp(path, CKPT_LIMIT, &size, err);
    if (!img)
        return -1;
    ckpt_span span[CKPT_SECTIONS];
    ckpt_in in[CKPT_SECTIONS];
    int rc = ckpt_open(img, size, path, span, err);
    for (int s = 0; !rc && s < CKPT_SECTIONS; s++)
        ckpt_in_init(&in[s], img, span, (ckpt_tag)s, path, err);
    /* The configuration and policy were checked against this run's by the
     * fingerprint (in STAT and meta.json); the rest is the state. */
    rc = rc || get_scalars(&in[CKPT_STAT], r) ||
         get_layers(&in[CKPT_LAYR], &r->m, r->trace) ||
         get_tensors(&in[CKPT_TENS], &r->m) ||
         ckpt_get_stats(&in[CKPT_SITE], &r->stats) ||
         get_time(&in[CKPT_TIME], &r->elapsed_before) ? -1 : 0;
    free(img);
    return rc;
}

/* Every section decoded, nothing applied: the fuzzers' entry point. */
int emu_checkpoint_check(const void *data, size_t size, emu_train_config *cfg,
                         emu_policy *p, emu_error *err)
{
    const unsigned char *img = data;
    const char *path = "checkpoint";
    ckpt_span span[CKPT_SECTIONS];
    ckpt_in in[CKPT_SECTIONS];
    if (ckpt_open(img, size, path, span, err))
        return -1;
    for (int s = 0; s < CKPT_SECTIONS; s++)
        ckpt_in_init(&in[s], img, span, (ckpt_tag)s, path, err);
    emu_stats st;
    emu_stats_init(&st);
    double elapsed;
    int rc = ckpt_get_config(&in[CKPT_CONF], cfg) ||
             ckpt_get_policy(&in[CKPT_POLI], p) ||
             get_scalars(&in[CKPT_STAT], NULL) ||
             get_layers(&in[CKPT_LAYR], NULL, NULL) ||
             get_tensors(&in[CKPT_TENS], NULL) ||
             ckpt_get_stats(&in[CKPT_SITE], &st) ||
             get_time(&in[CKPT_TIME], &elapsed) ? -1 : 0;
    emu_stats_free(&st);
    return rc;
}
/* ---- results ------------------------------------------------------------------- */

static void json_string(char *out, size_t size, const char *s);

static int write_meta(run *r, bool completed, double test_acc, emu_error *err)
{
    const emu_train_config *c = r->cfg;
    sbuf b = { 0 };
    sb_printf(&b, "{\n  \"libemu_version\": \"%s\",\n", EMU_VERSION_STRING);
    sb_printf(&b, "  \"completed\": %s,\n", completed ? "true" : "false");
    sb_printf(&b, "  \"fingerprint\": \"%016llx\",\n",
              (unsigned long long)r->fingerprint);
    sb_printf(&b, "  \"steps\": %lld,\n  \"skipped_steps\": %lld,\n",
              (long long)r->step, (long long)r->skipped);
    sb_printf(&b, "  \"test_accuracy\": ");
    if (isfinite(test_acc))
        sb_printf(&b, "%.9g,\n", test_acc);
    else
        sb_printf(&b, "null,\n");
    sb_printf(&b, "  \"seconds\": %.3f,\n", r->elapsed_before + (now() - r->t0));
    if (r->init_json[0])
        sb_printf(&b, "  \"init_from\": %s,\n", r->init_json);
    /* Settings added later, only when used (older runs' meta.json as they
     * were). */
    char extra[200] = "";
    if (c->warmup || c->clip_norm != 0.0)
        snprintf(extra, sizeof extra, ", \"warmup\": %lld, \"clip_norm\": %.17g",
                 (long long)c->warmup, c->clip_norm);
    if (r->lm) /* the window actually used, whatever the default */
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
                 ", \"seq_len\": %d, \"eval_windows\": %zu", r->T,
                 r->eval_count);
    sb_printf(&b, "  \"config\": {\"preset\": \"%s\", \"arch\": \"%s\", "
              "\"data\": \"%s\", \"epochs\": %d, \"max_steps\": %lld, "
              "\"batch\": %d, \"optimizer\": \"%s\", \"lr\": %.17g, "
              "\"momentum\": %.17g, \"weight_decay\": %.17g, \"schedule\": "
              "\"%s\", \"lr_final\": %.17g, \"loss_mult\": %.17g, "
              "\"seed\": %llu, \"ref_rate\": %.17g, \"stats_every\": %d, "
              "\"hist_every\": %d, \"threads\": %d%s},\n",
              c->preset, c->arch, c->data, c->epochs, (long long)c->max_steps,
              c->batch, c->opt == EMU_OPT_ADAM ? "adam" : "sgd", c->lr,
              c->momentum, c->weight_decay,
              c->schedule == EMU_LR_COSINE ? "cosine"
              : c->schedule == EMU_LR_STEP ? "step" : "constant",
              c->lr_final, c->loss_mult, (unsigned long long)c->seed,
              c->ref_rate, c->stats_every, hist_every(c), c->threads, extra);
    char *ptext = NULL;
    size_t plen = 0;
    FILE *fp = open_memstream(&ptext, &plen);
    if (fp) {
        emu_policy_write_json(r->p, fp, 2);
        fclose(fp);
        sb_printf(&b, "  \"policy\": %s,\n", ptext);
        free(ptext);
    }
    if (r->lm) {
        /* The text: generator and seed, or every file read with its size. */
        char src[2 * sizeof r->ttrain.source + 8];
        json_string(src, sizeof src, r->ttrain.source);
        sb_printf(&b, "  \"data\": {\"train\": \"%s\", \"test\": \"%s\", "
                  "\"train_tokens\": %zu, \"test_tokens\": %zu, "
                  "\"train_records\": %zu, \"test_records\": %zu, "
                  "\"vocab\": %d, \"vocabulary\": \"tab, newline, ' ' .. '~'\", "
                  "\"seq_len\": %d, \"eval_windows\": %zu, \"source\": %s",
                  r->ttrain.name, r->tval.name, r->ttrain.n, r->tval.n,
                  r->ttrain.records, r->tval.records, EMU_TEXT_VOCAB, r->T,
                  r->eval_count, src);
        if (r->ttrain.entropy_bits > 0.0)
            sb_printf(&b, ", \"generator_bits_per_char\": %.4f",
                      r->ttrain.entropy_bits);
        sb_printf(&b, "},\n");
        if (isfinite(r->last_eval_loss))
            sb_printf(&b, "  \"test_loss\": %.9g,\n  \"test_perplexity\": "
                      "%.9g,\n  \"test_bits_per_char\": %.9g,\n",
                      r->last_eval_loss, r->last_eval_ppl, r->last_eval_bpc);
    } else {
        sb_printf(&b, "  \"data\": {\"train\": \"%s\", \"test\": \"%s\", "
                  "\"train_examples\": %zu, \"test_examples\": %zu, \"source\": "
                  "\"%s\"},\n", r->train.name, r->test.name, r->train.n,
                  r->test.n, r->train.source);
    }
    sb_printf(&b, "  \"model\": {\"arch\": \"%s\", \"parameters\": %zu, "
              "\"layers\": [", r->m.arch, emu_model_param_count(&r->m));
    for (int i = 0; i < r->m.n_layers; i++) {
        const emu_layer *l = &r->m.layers[i];
        sb_printf(&b, "%s\n    {\"name\": \"%s\", \"exempt\": %s, "
                  "\"activation_format\": \"%s\"", i ? "," : "", l->name,
                  l->exempt ? "true" : "false",
                  l->kind == EMU_LAYER_FLATTEN ? "view" : l->y.fmt.name);
        if (l->has_params)
            sb_printf(&b, ", \"weight_format\": \"%s\"", l->weight.w.fmt.name);
        sb_printf(&b, "}");
    }
    sb_printf(&b, "]}\n}\n");
    int rc = save_sbuf(r, &b, "meta.json", err);
    sb_free(&b);
    return rc;
}

static int write_stats_file(FILE *fp, const void *arg)
{
    emu_stats_print_summary(arg, fp);
    return 0;
}

/* The final weights, with what made them. */
static int save_weights(run *r, emu_error *err)
{
    char step[32], seed[32];
    snprintf(step, sizeof step, "%lld", (long long)r->step);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->cfg->seed);
    const char *meta[] = { "policy", r->p->name, "step", step, "seed", seed,
                           NULL };
    return emu_model_save_weights_meta(&r->m, path_in(r, "weights.safetensors"),
                                       meta, err);
}

static int save_all(run *r, bool final, double test_acc, emu_error *err)
{
    if (save_sbuf(r, &r->steps, "steps.csv", err) ||
        save_sbuf(r, &r->ops_steps, "ops_steps.csv", err) ||
        save_sbuf(r, &r->layers, "layers_steps.csv", err) ||
        save_sbuf(r, &r->eval, "eval.csv", err) ||
        emu_stats_write_csv(&r->stats, path_in(r, "ops.csv"), err) ||
        emu_stats_write_hist_csv(&r->stats, path_in(r, "hist.csv"), err) ||
        emu_stats_write_json(&r->stats, path_in(r, "ops.json"), err) ||
        emu_write_atomic(path_in(r, "summary.txt"), write_stats_file, &r->stats,
                         err))
        return -1;
    if (final && save_weights(r, err))
        return -1;
    /* The checkpoint last but one and meta last: a reader that sees
     * "completed" sees every other file of the finished run. */
    if (save_ckpt(r, err))
        return -1;
    return write_meta(r, final, test_acc, err);
}

/* ---- progress ------------------------------------------------------------------- */

static void progress(run *r, FILE *log, int epoch, double loss, double acc,
                     const step_rates *q, bool force)
{
    if (!log || r->cfg->quiet)
        return;
    static double last;
    double t = now();
    double sps = (double)(r->step) / fmax(1e-9, r->elapsed_before + (t - r->t0));
    if (r->tty) {
        if (!force && t - last < 0.1)
            return;
        last = t;
        fprintf(log, "\r\033[Kstep %lld/%lld ep %d loss %.4f acc %5.1f%% scale "
                "2^%d uflow %.1e ovf %.1e absorbed %.1f%% %.0f steps/s",
                (long long)r->step, (long long)r->total_steps, epoch, loss,
                100.0 * acc, (int)lrint(log2(r->scale)), q->agrad_zero,
                q->overflow, 100.0 * q->absorbed, sps);
        if (force)
            fputc('\n', log);
        fflush(log);
        return;
    }
    if (!force && r->step % 100 != 0)
        return;
    fprintf(log, "step %lld/%lld epoch %d loss %.4f acc %.1f%% scale %g "
            "act_grad_to_zero %.2e overflow %.2e absorbed %.2f%% %.1f steps/s\n",
            (long long)r->step, (long long)r->total_steps, epoch, loss,
            100.0 * acc, r->scale, q->agrad_zero, q->overflow,
            100.0 * q->absorbed, sps);
    fflush(log);
}

/* The run's statistics by tensor role, for the end of the log: what the
 * precision policy cost, in one table. */
static void role_summary(const emu_stats *st, FILE *log)
{
    fprintf(log, "%-12s %14s %9s %9s %9s %9s %9s %9s\n", "role", "results",
            "inexact", "->zero", "subnorm", "overflow", "absorbed",
            "ulp max");
    for (int role = 0; role < EMU_ROLE_COUNT; role++) {
        emu_site_stats t;
        memset(&t, 0, sizeof t);
        for (size_t i = 0; i < st->count; i++)
            if (st->sites[i].role == (emu_role)role &&
                !emu_ends_with(st->sites[i].name, ".init"))
                emu_site_stats_merge(&t, &st->sites[i].total);
        if (!t.results)
            continue;
        double n = (double)t.results;
        fprintf(log, "%-12s %14llu %8.3f%% %8.4f%% %8.4f%% %8.4f%% ",
                emu_role_name((emu_role)role), (unsigned long long)t.results,
                100.0 * (double)t.inexact / n, 100.0 * (double)t.to_zero / n,
                100.0 * (double)t.subnormal / n, 100.0 * (double)t.overflow / n);
        if (t.adds)
            fprintf(log, "%8.4f%% ", 100.0 * (double)t.absorbed / (double)t.adds);
        else
            fprintf(log, "%9s ", "-");
        /* Against MPFR, on the outputs sampled with --ref-rate. */
        if (t.ref_samples)
            fprintf(log, "%9.3g\n", t.ulp_max);
        else
            fprintf(log, "%9s\n", "-");
    }
}

/* ---- the loop ----------------------------------------------------------------- */

/* The signal that asked the run to stop (0: none).  Set from a signal
 * handler, so nothing but a store of a sig_atomic_t. */
static volatile sig_atomic_t stop_signal;

void emu_train_stop(int sig)
{
    stop_signal = sig > 0 ? sig : SIGTERM;
}

/* Whether to stop after the step just done: a signal came, or the test
 * hook EMU_TRAIN_STOP_AFTER=N (steps of this session) says so, acting as
 * SIGTERM, so that the tests of a stopped run need no timing. */
static int stop_requested(int64_t done)
{
    const char *hook = getenv("EMU_TRAIN_STOP_AFTER");
    if (hook && *hook && done >= strtoll(hook, NULL, 10))
        emu_train_stop(SIGTERM);
    return stop_signal;
}

static bool is_text_data(const char *data)
{
    return !strcmp(data, "text") || !strcmp(data, "fortunes");
}

/* A language model's text; train_examples and test_examples are the
 * characters generated (text) or a prefix of the files' (fortunes). */
static int load_text(run *r, emu_error *err)
{
    const emu_train_config *c = r->cfg;
    if (!strcmp(c->data, "text")) {
        if (emu_text_embedded(&r->ttrain, &r->tval, c->seed,
                              c->train_examples ? c->train_examples : 1000000,
                              c->test_examples ? c->test_examples : 100000, err))
            return -1;
    } else {
        if (emu_text_fortunes_max(&r->ttrain, &r->tval,
                                  c->data_dir[0] ? c->data_dir : NULL,
                                  c->data_max_bytes, err))
            return -1;
        if (c->train_examples && c->train_examples < r->ttrain.n)
            r->ttrain.n = c->train_examples;
        if (c->test_examples && c->test_examples < r->tval.n)
            r->tval.n = c->test_examples;
    }
    if (emu_text_check_context(&r->ttrain, r->T, err) ||
        emu_text_check_context(&r->tval, r->T, err))
        return -1;
    r->eval_count = emu_text_eval_count(&r->tval, r->T,
                                        c->eval_windows ? c->eval_windows : 256);
    return 0;
}

static int load_data(run *r, emu_error *err)
{
    const emu_train_config *c = r->cfg;
    int rc;
    if (r->lm)
        return load_text(r, err);
    if (!strcmp(c->data, "synthetic"))
        rc = emu_dataset_synthetic(&r->train, &r->test, c->seed,
                                   c->train_examples ? c->train_examples : 6000,
                                   c->test_examples ? c->test_examples : 1000, err);
    else if (!strcmp(c->data, "fashion-mnist"))
        rc = emu_dataset_fashion_mnist(&r->train, &r->test,
                                       c->data_dir[0] ? c->data_dir : NULL, err);
    else
        return emu_fail(err, EMU_ESPEC, "data", "", "'%s' is not synthetic, "
                        "fashion-mnist, text or fortunes", c->data);
    if (rc)
        return -1;
    if (r->test.channels != r->train.channels ||
        r->test.height != r->train.height || r->test.width != r->train.width)
        return emu_fail(err, EMU_EDATA, r->test.source, "", "test images are %dx%dx%d, "
                        "training images %dx%dx%d", r->test.channels,
                        r->test.height, r->test.width, r->train.channels,
                        r->train.height, r->train.width);
    for (size_t i = 0; i < r->test.n; i++)
        if (r->test.y[i] >= r->train.classes)
            return emu_fail(err, EMU_EDATA, r->test.source, "", "test example %zu has "
                            "label %d; the training set has %d classes", i,
                            r->test.y[i], r->train.classes);
    /* A prefix of a real data set: the first n examples. */
    if (c->train_examples && c->train_examples < r->train.n)
        r->train.n = c->train_examples;
    if (c->test_examples && c->test_examples < r->test.n)
        r->test.n = c->test_examples;
    return 0;
}

static int train_epochs(run *r, FILE *log, double *final_acc, emu_error *err)
{
    const emu_train_config *c = r->cfg;
    const size_t b = (size_t)c->batch;
    double acc = NAN;
    int64_t session = 0; /* steps taken by this process */
    /* after any checkpoint was read, which sets r->stats anew */
    r->stats.hist_always = r->dinput_sites;
    for (;;) {
        if (r->step >= r->total_steps)
            break;
        int epoch = (int)(r->step / r->steps_per_epoch);
        int64_t in_epoch = r->step % r->steps_per_epoch;
        if (!r->lm) /* a language model's windows are drawn per step */
            emu_batch_permutation(r->perm, r->train.n, c->seed, (uint64_t)epoch);
        for (int64_t k = in_epoch; k < r->steps_per_epoch &&
                                   r->step < r->total_steps; k++) {
            double t_step = now();
            emu_stats_begin_step(&r->stats, r->step);
            r->ctx.measure = step_measure(c, r->step);
            if (r->lm)
                load_text_batch(r, r->step);
            else if (load_batch(r, &r->train, r->perm + (size_t)k * b, b))
                return emu_fail(err, r->ctx.err.code, r->ctx.err.where, "", "%s",
                                r->ctx.err.message);
            if (r->p->scaling.kind == EMU_SCALE_ADAPTIVE)
                adaptive_scales(r);
            else
                for (int i = 0; i < r->m.n_layers; i++)
                    r->m.layers[i].scale = 1.0;
            grad_scales(r);
            float ce_scale = (float)(r->scale * c->loss_mult);
            if (emu_model_forward(&r->m, &r->ctx, r->p) ||
                emu_model_backward(&r->m, &r->ctx, r->p, r->batch_y, ce_scale))
                return emu_fail(err, r->ctx.err.code, r->ctx.err.where, "", "%s",
                                r->ctx.err.message);
            double loss_sum = 0.0;
            /* Rows scored: the batch, or its B*T positions. */
            const size_t rows = r->lm ? b * (size_t)r->T : b;
            int right = score(&r->m, r->batch_y, rows, &loss_sum);
            bool finite = scan_gradients(r);
            double used_scale = r->scale;
            /* Clipping needs every gradient unscaled before any update.  A
             * step the loss scaling skips anyway is not clipped; under it a
             * norm that overflows skips the step like an overflowed
             * gradient (grad_norm is nan when it was not computed). */
            const bool clipping = c->clip_norm > 0.0;
            const bool skips = r->p->scaling.kind == EMU_SCALE_DYNAMIC ||
                               r->p->scaling.kind == EMU_SCALE_ENHANCED ||
                               r->p->scaling.kind == EMU_SCALE_ADAPTIVE ||
                               r->p->scaling.kind == EMU_SCALE_LAYERWISE;
            double gnorm = NAN;
            if (clipping && (finite || !skips)) {
                for (int i = 0; i < r->m.n_layers; i++) {
                    emu_layer *l = &r->m.layers[i];
                    if (l->has_params &&
                        (unscale_param(r, l, &l->weight, "w") ||
                         (l->has_bias && unscale_param(r, l, &l->bias, "b"))))
                        return emu_fail(err, r->ctx.err.code, r->ctx.err.where, "", "%s",
                                        r->ctx.err.message);
                }
                if (emu_model_clip_grad_norm(&r->m, &r->ctx, r->p, c->clip_norm, skips,
                                             &gnorm))
                    return emu_fail(err, r->ctx.err.code, r->ctx.err.where, "", "%s",
                                    r->ctx.err.message);
                if (skips && !isfinite(gnorm))
                    finite = false;
            }
            bool skip = update_scale(r, finite);
            double lr = lr_at(c, r->step, r->total_steps);
            if (!skip) {
                for (int i = 0; i < r->m.n_layers; i++) {
                    emu_layer *l = &r->m.layers[i];
                    if (!l->has_params)
                        continue;
                    int (*upd)(run *, const emu_layer *, emu_param *,
                               const char *, double) =
                        clipping ? step_param : update_param;
                    if (upd(r, l, &l->weight, "w", lr) ||
                        (l->has_bias && upd(r, l, &l->bias, "b", lr)))
                        return emu_fail(err, r->ctx.err.code, r->ctx.err.where, "", "%s",
                                    r->ctx.err.message);
                }
            } else {
                r->skipped++;
            }
            step_rates q = rates(&r->stats);
            if (r->p->scaling.kind == EMU_SCALE_ADAPTIVE)
                adaptive_feedback(r);
            double loss = loss_sum / (double)rows;
            char norm_col[40] = ""; /* the grad_norm column, when clipping */
            if (clipping)
                snprintf(norm_col, sizeof norm_col, ",%.9g", gnorm);
            char lm_cols[48] = ""; /* bits_per_char, perplexity (LM runs) */
            if (r->lm)
                snprintf(lm_cols, sizeof lm_cols, "%.9g,%.9g,",
                         bits_per_char(loss), exp(loss));
            double bacc = (double)right / (double)rows;
            sb_printf(&r->steps, "%lld,%d,%.9g,%.9g,%s%.9g,%.17g,%d,%.9g,%.9g,%.9g,"
                      "%.9g,%.9g,%.9g,%llu%s,%.6f\n",
                      (long long)r->step, epoch, lr, loss, lm_cols, bacc, used_scale,
                      skip ? 1 : 0, q.agrad_zero, q.agrad_under, q.wgrad_zero,
                      q.act_zero, q.overflow, q.absorbed,
                      (unsigned long long)q.adds, norm_col, now() - t_step);
            layer_rows(r);
            if (c->stats_every > 0 && r->step % c->stats_every == 0)
                append_step_rows(r);
            r->step++;
            progress(r, log, epoch, loss, bacc, &q, false);
            /* An epoch's evaluation belongs to its last step, before any
             * checkpoint of that step: it advances the op counter (so the
             * stochastic streams after it), and a resume must see it done. */
            if (r->step % r->steps_per_epoch == 0 || r->step >= r->total_steps) {
                if (evaluate(r, epoch, &acc))
                    return emu_fail(err, r->ctx.err.code, r->ctx.err.where, "", "%s",
                                    r->ctx.err.message);
                if (log && !c->quiet) {
                    if (r->tty)
                        fputc('\n', log);
                    if (r->lm)
                        fprintf(log, "epoch %d: validation loss %.4f, perplexity "
                                "%.3f, %.4f bits/char, next-character accuracy "
                                "%.2f%% (%zu windows of %d)\n", epoch,
                                r->last_eval_loss, r->last_eval_ppl,
                                r->last_eval_bpc, 100.0 * acc,
                                r->eval_count, r->T);
                    else
                        fprintf(log, "epoch %d: test accuracy %.2f%% (%zu "
                                "examples)\n", epoch, 100.0 * acc, r->test.n);
                }
            }
            if (c->checkpoint_every > 0 && r->step % c->checkpoint_every == 0 &&
                r->step < r->total_steps && save_all(r, false, NAN, err))
                return -1;
            if (r->step < r->total_steps && stop_requested(++session)) {
                int sig = stop_signal;
                stop_signal = 0;
                if (save_all(r, false, NAN, err))
                    return -1;
                emu_fail(err, EMU_ESTOPPED, r->dir, "", "stopped by signal %d after step "
                         "%lld of %lld; its checkpoint is saved: continue "
                         "with emu train --resume %s", sig,
                         (long long)r->step, (long long)r->total_steps, r->dir);
                return 1;
            }
        }
    }
    *final_acc = acc;
    return 0;
}

/* ---- starting from a weights file ----------------------------------------------- */

static void json_string(char *out, size_t size, const char *s)
{
    size_t n = 0;
    if (size < 3)
        return;
    out[n++] = '"';
    for (; *s && n + 8 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            n += (size_t)snprintf(out + n, size - n, "\\%c", c);
        else if (c < 0x20)
            n += (size_t)snprintf(out + n, size - n, "\\u%04x", c);
        else
            out[n++] = (char)c;
    }
    out[n++] = '"';
    out[n] = '\0';
}

/* Loads cfg->init_from over the random initialisation, and records the
 * file (path, size, FNV-1a of its bytes) for meta.json.  The load's ops
 * round nearest-even and draw no random words; the op counter is put
 * back, so that the stochastic streams of a run from a file are those of
 * the run whose weights it holds: a run started from the initial
 * weights another run exported repeats that run bit for bit. */
static int init_from(run *r, emu_error *err)
{
    const char *path = r->cfg->init_from;
    const uint64_t op_index = r->ctx.op_index;
    if (emu_model_load_weights(&r->m, &r->ctx, r->p, path, err))
        return -1;
    r->ctx.op_index = op_index;
    FILE *fp = fopen(path, "rb");
    uint64_t h = 0xcbf29ce484222325ull, size = 0;
    if (fp) {
        unsigned char buf[65536];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, fp)) > 0) {
            for (size_t i = 0; i < got; i++) {
                h ^= buf[i];
                h *= 0x100000001b3ull;
            }
            size += got;
        }
        fclose(fp);
    }
    char name[1100];
    json_string(name, sizeof name, path);
    snprintf(r->init_json, sizeof r->init_json, "{\"path\": %s, \"bytes\": %llu, "
             "\"fnv1a64\": \"%016llx\"}", name, (unsigned long long)size,
             (unsigned long long)h);
    return 0;
}

/* A resumed run's record keeps the "init_from" its start wrote (one line
 * of the meta.json being continued). */
static void carry_init_from(run *r, const char *meta)
{
    static const char key[] = "\n  \"init_from\": ";
    const char *s = strstr(meta, key);
    if (!s)
        return;
    s += sizeof key - 1;
    size_t n = strcspn(s, "\n");
    if (n && s[n - 1] == ',')
        n--;
    if (n < sizeof r->init_json)
        snprintf(r->init_json, sizeof r->init_json, "%.*s", (int)n, s);
}

/* Each setting on its own, so that a message names the one that is wrong
 * and the rule it breaks. */
static int check_config(const emu_train_config *c, const emu_policy *p,
                        emu_error *err)
{
    const struct { const char *key; double v; double lo; bool lo_open;
                   double hi; bool hi_open; } reals[] = {
        { "lr", c->lr, 0.0, true, INFINITY, true },
        { "momentum", c->momentum, 0.0, false, 1.0, true },
        { "weight_decay", c->weight_decay, 0.0, false, INFINITY, true },
        { "beta1", c->beta1, 0.0, false, 1.0, true },
        { "beta2", c->beta2, 0.0, false, 1.0, true },
        { "eps", c->eps, 0.0, true, INFINITY, true },
        { "lr_final", c->lr_final, 0.0, false, INFINITY, true },
        { "clip_norm", c->clip_norm, 0.0, false, INFINITY, true },
        { "loss_mult", c->loss_mult, 0.0, true, INFINITY, true },
        { "ref_rate", c->ref_rate, 0.0, false, 1.0, false },
    };
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
        double v = reals[i].v;
        bool ok = (reals[i].lo_open ? v > reals[i].lo : v >= reals[i].lo) &&
                  (reals[i].hi_open ? v < reals[i].hi : v <= reals[i].hi);
        if (!ok)
            return emu_fail(err, EMU_ESPEC, "config", reals[i].key, "%g is outside "
                            "%c%g, %g%c", v, reals[i].lo_open ? '(' : '[',
                            reals[i].lo, reals[i].hi, reals[i].hi_open ? ')' : ']');
    }
    const struct { const char *key; long long v, lo; } counts[] = {
        { "batch", c->batch, 1 }, { "epochs", c->epochs, 1 },
        { "max_steps", c->max_steps, 0 }, { "threads", c->threads, 1 },
        { "stats_every", c->stats_every, 0 },
        { "hist_every", c->hist_every, 0 },
        { "checkpoint_every", c->checkpoint_every, 0 },
        { "warmup", c->warmup, 0 },
    };
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        if (counts[i].v < counts[i].lo)
            return emu_fail(err, EMU_ESPEC, "config", counts[i].key, "%lld is below %lld",
                            counts[i].v, counts[i].lo);
    /* The loss is binary32, and so is the factor it is multiplied by. */
    const emu_loss_scaling *s = &p->scaling;
    double top = s->kind == EMU_SCALE_NONE ? 1.0
                 : s->kind == EMU_SCALE_STATIC ? s->init : fmax(s->init, s->max);
    if (top * c->loss_mult >= 0x1p128)
        return emu_fail(err, EMU_ESPEC, "config", "loss_mult", "%g times a loss scale of "
                        "up to %g reaches 2^128: the product multiplies the "
                        "binary32 loss, where it overflows", c->loss_mult, top);
    return 0;
}

/* The window of a language model when seq_len is 0: a gpt's own T (the
 * last number of "gpt:L-D-H-T"; "gpt" is gpt:4-128-4-64), 64 otherwise. */
static int default_seq_len(const char *arch)
{
    int T = 0;
    if (sscanf(arch, "gpt:%*d-%*d-%*d-%d", &T) == 1 && T > 0)
        return T;
    return 64;
}

/* Text data goes with a language model and images with an image model. */
static int check_data_model(const emu_train_config *c, emu_error *err)
{
    const bool text = is_text_data(c->data), lm = emu_arch_is_lm(c->arch);
    if (text && !lm)
        return emu_fail(err, EMU_ESPEC, "config", "data", "--data %s is text, "
                        "for a language model; '%s' is an image model: use "
                        "--model gpt[:L-D-H-T] or lstm[:L-H]", c->data, c->arch);
    if (lm && !text)
        return emu_fail(err, EMU_ESPEC, "config", "data", "'%s' is a language "
                        "model; --data %s is images: use --data text or "
                        "fortunes", c->arch, c->data);
    if (c->data_max_bytes && strcmp(c->data, "fortunes"))
        return emu_fail(err, EMU_ESPEC, "config", "data_max_bytes", "applies to "
                        "--data fortunes only (the text files read)");
    if (!lm && (c->seq_len || c->eval_windows))
        return emu_fail(err, EMU_ESPEC, "config", c->seq_len ? "seq_len" :
                        "eval_windows", "applies to language models only "
                        "(--model gpt or lstm with --data text or fortunes)");
    return 0;
}

int emu_train(const emu_train_config *cfg, const emu_policy *p, FILE *log,
              emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (emu_policy_validate(p, err))
        return -1;
    if (check_config(cfg, p, err) || check_data_model(cfg, err))
        return -1;
    {
        if (!emu_is_pow2(cfg->loss_mult))
            return emu_fail(err, EMU_ESPEC, "config", "", "loss_mult %g is not a power of "
                            "two: dividing it out would round every gradient",
                            cfg->loss_mult);
    }

    run *r = calloc(1, sizeof *r);
    if (!r)
        return emu_fail(err, EMU_ENOMEM, "train", "", "out of memory");
    r->cfg = cfg;
    /* What the run records (fingerprint, meta.json, checkpoint) and uses:
     * an op class the model has no op of changes nothing and is left
     * out, so image runs keep the records they had. */
    r->pol = *p;
    emu_policy_for_arch(&r->pol, cfg->arch);
    r->p = p = &r->pol;
    r->t0 = now();
    r->tty = log && isatty(fileno(log));
    snprintf(r->dir, sizeof r->dir, "%s", cfg->out_dir);
    r->lm = emu_arch_is_lm(cfg->arch);
    r->T = r->lm ? (cfg->seq_len ? cfg->seq_len : default_seq_len(cfg->arch)) : 0;
    r->last_eval_loss = r->last_eval_ppl = r->last_eval_bpc = NAN;
    int rc = -1;
    double acc = NAN;
    emu_stats_init(&r->stats);

    sbuf text = { 0 };
    config_text(&text, cfg, p);
    r->fingerprint = fnv1a(text.p ? text.p : "", text.len);
    sb_free(&text);

    if (check_dir(r, err) || load_data(r, err))
        goto done;
    if (!r->lm && r->train.n < (size_t)cfg->batch) {
        emu_fail(err, EMU_ESPEC, "data", "", "%zu training examples, fewer than one batch "
                 "of %d", r->train.n, cfg->batch);
        goto done;
    }
    if (log && !cfg->quiet && r->lm)
        fprintf(log, "data: %s (%zu characters) and %s (%zu), from %.300s%s; "
                "windows of %d\n", r->ttrain.name, r->ttrain.n, r->tval.name,
                r->tval.n, r->ttrain.source,
                strlen(r->ttrain.source) > 300 ? "..." : "", r->T);
    else if (log && !cfg->quiet)
        fprintf(log, "data: %s (%zu examples) and %s (%zu), from %s\n",
                r->train.name, r->train.n, r->test.name, r->test.n,
                r->train.source);

    emu_ctx_init(&r->ctx, cfg->seed);
    r->ctx.threads = cfg->threads;
    r->ctx.ref_rate = cfg->ref_rate;
    r->ctx.measure = EMU_MEASURE_ALL;
    r->ctx.stats = &r->stats;
    if ((r->lm ? emu_model_build_lm(&r->m, cfg->arch, p, cfg->batch, r->T,
                                    EMU_TEXT_VOCAB, cfg->seed, &r->ctx, err)
               : emu_model_build(&r->m, cfg->arch, p, cfg->batch,
                                 r->train.channels, r->train.height,
                                 r->train.width, r->train.classes, cfg->seed,
                                 &r->ctx, err)) ||
        (!cfg->resume && cfg->init_from[0] && init_from(r, err)) ||
        claim_dir(r, err))
        goto done;
    r->trace = calloc((size_t)r->m.n_layers + 1, sizeof *r->trace);
    const bool listed = list_dinput_sites(r);
    /* Rows of targets: the batch, or its B*T positions. */
    const size_t rows = (size_t)cfg->batch * (size_t)(r->lm ? r->T : 1);
    if (r->lm) {
        r->win_y = malloc(rows * sizeof *r->win_y);
    } else {
        r->batch_x = malloc((size_t)cfg->batch * example_size(&r->train) *
                            sizeof(float));
        r->perm = malloc(r->train.n * sizeof *r->perm);
    }
    r->batch_y = malloc(rows * sizeof(int));
    if (!r->trace || !listed || !r->batch_y ||
        (r->lm ? !r->win_y || !r->m.tokens : !r->batch_x || !r->perm)) {
        emu_fail(err, EMU_ENOMEM, "train", "", "out of memory");
        goto done;
    }
    for (int i = 0; i <= r->m.n_layers; i++)
        r->trace[i].corr = 1.0;
    /* A language model's epoch: as many steps as there are B*T windows
     * in the training text (each step draws its own; at least one). */
    r->steps_per_epoch = r->lm ? (int64_t)(r->ttrain.n / rows)
                               : (int64_t)(r->train.n / (size_t)cfg->batch);
    if (r->steps_per_epoch < 1)
        r->steps_per_epoch = 1;
    r->total_steps = r->steps_per_epoch * cfg->epochs;
    if (cfg->max_steps && cfg->max_steps < r->total_steps)
        r->total_steps = cfg->max_steps;
    if (cfg->warmup > r->total_steps) {
        emu_fail(err, EMU_ESPEC, "config", "warmup", "%lld warm-up steps (--warmup) in a "
                 "run of %lld steps", (long long)cfg->warmup,
                 (long long)r->total_steps);
        goto done;
    }
    r->scale = p->scaling.kind == EMU_SCALE_NONE ? 1.0 : p->scaling.init;
    r->floor = p->scaling.floor;
    r->adaptive_cut = 1.0;
    {
        /* A language model's rows add bits_per_char and perplexity after
         * the loss; clipping adds grad_norm before the timing, kept last. */
        const char *h = STEPS_HEADER, *rest = strstr(h, "accuracy,");
        size_t tail = strlen("seconds\n");
        if (r->lm)
            sb_printf(&r->steps, "%.*sbits_per_char,perplexity,", (int)(rest - h), h);
        else
            sb_printf(&r->steps, "%.*s", (int)(rest - h), h);
        sb_printf(&r->steps, "%.*s%sseconds\n", (int)(strlen(rest) - tail), rest,
                  cfg->clip_norm > 0.0 ? "grad_norm," : "");
    }
    sb_printf(&r->layers, "step,layer,index,scale,grad_scale,dinput_to_zero,"
              "dinput_subnormal,dinput_zero,dinput_exact_zero,dweight_to_zero,"
              "dinput_sigma\n");
    /* A language model's "test" set is its validation text. */
    sb_printf(&r->eval, "epoch,step,test_loss,test_accuracy%s\n", r->lm ?
              ",test_perplexity,test_bits_per_char" : "");
    {
        /* The per-op header once, whatever the first rows hold. */
        char *t = NULL;
        size_t tl = 0;
        FILE *fp = open_memstream(&t, &tl);
        emu_stats empty;
        emu_stats_init(&empty);
        if (fp) {
            emu_stats_write_step_rows(&empty, fp, true, NULL);
            fclose(fp);
            sb_printf(&r->ops_steps, "%s", t);
            free(t);
        }
    }
    if (cfg->resume) {
        /* The checkpoint must be this folder's run: its fingerprint is in
         * meta.json, written when the run started. */
        sbuf meta = { 0 };
        char want[64];
        snprintf(want, sizeof want, "\"fingerprint\": \"%016llx\"",
                 (unsigned long long)r->fingerprint);
        if (sb_from_file(&meta, path_in(r, "meta.json"))) {
            emu_fail(err, EMU_EIO, path_in(r, "meta.json"), "", "cannot read: %s",
                     strerror(errno));
            sb_free(&meta);
            goto done;
        }
        bool same = meta.p && strstr(meta.p, want);
        const bool was_completed = same && strstr(meta.p, "\"completed\": true");
        if (same)
            carry_init_from(r, meta.p);
        sb_free(&meta);
        if (!same) {
            emu_fail(err, EMU_ESTATE, r->dir, "", "checkpoint.bin is from another "
                     "configuration than this folder's run (its meta.json): "
                     "copied from another run?");
            goto done;
        }
        /* Same model, same init (it is deterministic), then the saved state. */
        if (read_ckpt(r, err))
            goto done;
        sb_free(&r->steps);
        sb_free(&r->ops_steps);
        sb_free(&r->layers);
        sb_free(&r->eval);
        if (sb_from_file(&r->steps, path_in(r, "steps.csv")) ||
            sb_from_file(&r->ops_steps, path_in(r, "ops_steps.csv")) ||
            sb_from_file(&r->layers, path_in(r, "layers_steps.csv")) ||
            sb_from_file(&r->eval, path_in(r, "eval.csv"))) {
            emu_fail(err, EMU_EIO, r->dir, "", "cannot read the logs written with the "
                     "checkpoint");
            goto done;
        }
        sb_keep_rows(&r->steps, 0, r->step, false);
        sb_keep_rows(&r->ops_steps, 0, r->step, false);
        sb_keep_rows(&r->layers, 0, r->step, false);
        sb_keep_rows(&r->eval, 1, r->step, true);
        if (r->step >= r->total_steps) {
            /* A run stopped between its final checkpoint and its final
             * meta.json (save_all writes meta last) has every other file
             * of the finished run: it only lacks the mark. */
            double final_acc = NAN;
            if (!was_completed &&
                (final_eval(r, &final_acc, err) ||
                 write_meta(r, true, final_acc, err)))
                goto done;
            if (log && !cfg->quiet)
                fprintf(log, "the run in %s is complete (%lld steps): %s\n",
                        r->dir, (long long)r->step, was_completed
                        ? "nothing to resume"
                        : "its meta.json now says so (it was stopped while "
                          "writing its results)");
            rc = 0;
            goto done;
        }
        if (log && !cfg->quiet)
            fprintf(log, "resuming at step %lld of %lld\n", (long long)r->step,
                    (long long)r->total_steps);
    } else if (write_meta(r, false, NAN, err) || save_all(r, false, NAN, err)) {
        /* meta.json first, so that any folder with a run's files is seen
         * as a run; then a checkpoint at step 0, so that a run killed
         * before its first periodic one resumes like any other. */
        goto done;
    }
    r->t0 = now();
    rc = train_epochs(r, log, &acc, err);
    if (rc) {
        rc = rc > 0 ? EMU_TRAIN_STOPPED : -1;
        goto done;
    }
    rc = -1;
    if (save_all(r, true, acc, err))
        goto done;
    if (log && !cfg->quiet) {
        role_summary(&r->stats, log);
        if (r->lm)
            fprintf(log, "done: %lld steps (%lld skipped), validation loss "
                    "%.4f, perplexity %.3f (%.4f bits/char), results in %s\n",
                    (long long)r->step, (long long)r->skipped,
                    r->last_eval_loss, r->last_eval_ppl, r->last_eval_bpc,
                    r->dir);
        else
            fprintf(log, "done: %lld steps (%lld skipped), test accuracy "
                    "%.2f%%, results in %s\n", (long long)r->step,
                    (long long)r->skipped, 100.0 * acc, r->dir);
    }
    rc = 0;
done:
    if (r->kahan_delta)
        for (int i = 0; i < 2 * r->m.n_layers; i++)
            emu_tensor_free(&r->kahan_delta[i]);
    free(r->kahan_delta);
    emu_model_free(&r->m);
    emu_dataset_free(&r->train);
    emu_dataset_free(&r->test);
    emu_textset_free(&r->ttrain);
    emu_textset_free(&r->tval);
    free(r->win_y);
    emu_stats_free(&r->stats);
    sb_free(&r->steps);
    sb_free(&r->ops_steps);
    sb_free(&r->layers);
    sb_free(&r->eval);
    free(r->trace);
    free(r->dinput_sites);
    free(r->dinput_names);
    free(r->batch_x);
    free(r->batch_y);
    free(r->perm);
    free(r);
    return rc;
}

int emu_train_resume(const char *dir, int threads, bool quiet, FILE *log,
                     emu_error *err)
{
    EMU_HOSTFP_GUARD;
    char path[640];
    snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
    size_t size;
    unsigned char *img = ckpt_slurp(path, CKPT_LIMIT, &size, err);
    if (!img)
        return -1;
    ckpt_span span[CKPT_SECTIONS];
    ckpt_in in[2];
    emu_train_config cfg;
    emu_policy p;
    int rc = ckpt_open(img, size, path, span, err);
    if (!rc) {
        ckpt_in_init(&in[0], img, span, CKPT_CONF, path, err);
        ckpt_in_init(&in[1], img, span, CKPT_POLI, path, err);
        rc = ckpt_get_config(&in[0], &cfg) || ckpt_get_policy(&in[1], &p) ? -1 : 0;
    }
    free(img);
    if (rc)
        return -1;
    /* Settings that do not change the numbers may differ. */
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s", dir);
    cfg.resume = true;
    cfg.force = false;
    if (threads > 0)
        cfg.threads = threads;
    cfg.quiet = quiet;
    return emu_train(&cfg, &p, log, err);
}
