/*
 * accum_real.c — experiment 5 on real operands: the accumulator models of
 * accum_sweep.c applied to the dot products of a trained model's GEMMs.
 *
 * Reads a weights file written by `emu train --export` (its metadata names
 * the architecture, the seed and the step), builds that model under the
 * fp32 preset, loads the weights, and runs one real batch forward and
 * backward through the library's own ops: for an image model the first B
 * examples of the run's epoch-0 order (emu_batch_permutation), for a
 * language model the B windows the run would have drawn at its next step
 * (emu_text_batch).  Then, for every linear layer (and GPT's tied head),
 * the three GEMMs of a training step:
 *
 *   fwd    Y  = X W^T    a row of X times a row of W,       K = Fin
 *   dgrad  dX = dY W     a row of dY times a column of W,   K = Fout
 *                        (not where no parameter lies before the layer:
 *                        training computes none)
 *   wgrad  dW = dY^T X   a column of dY times a column of X, K = rows
 *                        (the batch, or batch x positions)
 *
 * X is the layer's input, W its weight (wte for the tied head), dY the
 * gradient of the mean loss with respect to its output.  The operands are
 * put into the input format the way a GEMM would read them:
 *
 *   binary16    each tensor times one power of two that brings its largest
 *               magnitude into (1, 2] (a per-tensor scale, as loss scaling
 *               is for gradients: exact), rounded to nearest-even;
 *   e4m3-tile   DeepSeek-V3's fine-grained FP8 quantization: activations
 *               and gradients in tiles of 128 consecutive elements along
 *               the GEMM's reduction axis (1x128 for X in fwd and dY in
 *               dgrad; 128x1, along the rows, for both wgrad operands),
 *               weights in 128x128 blocks; each tile's scale the power of
 *               two 2^e, smallest with amax / 2^e <= 448 (UE8M0, as
 *               DeepSeek's later releases and MX use; the V3 paper's
 *               scales are binary32), each element rounded to nearest-even.
 *
 * The models see the dequantized operands (element times its tile's scale,
 * exact in binary32).  With power-of-two scales this is DeepSeek's recipe
 * exactly for the promoted model: its 128-term chunks coincide with the
 * tiles, each chunk's products share one scale, and the fused unit's
 * alignment and truncation are invariant under a power of two, so the
 * chunk sum times the scales is what the tensor core's sum of the raw
 * codes, dequantized in binary32 on the CUDA cores, gives.  For the
 * unpromoted models, which hardware cannot run with per-tile scales (the
 * scales change along K), the same operands show what the accumulator
 * alone does to these values.
 *
 * `dots` output elements of each GEMM are drawn at random (with
 * replacement; all of them when the GEMM has fewer); each dot product is
 * formed by each model (emu_accum_dot, as in accum_sweep.c) and compared
 * with the exact sum from MPFR, whose every addition is checked to be
 * exact.  The error measures are accum_sweep's: rel = |got - exact| /
 * |exact| and nrel = |got - exact| / sum |x_i y_i| (normwise); and per GEMM
 * the data's cancellation |exact| / sum |x_i y_i| (1 when every product
 * has one sign, as in the synthetic uniform case; about sqrt(pi / 2K)
 * for the synthetic normal case).
 *
 * Called by experiments/05-accumulation/run.sh; writes one CSV (one row
 * per input format, GEMM and model) to stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "emu/emu.h"
#include "accum_models.h"

/* ---- quantization --------------------------------------------------------- */

/* The exponent e of the smallest power of two with amax / 2^e <= top
 * (amax > 0), found by exact comparisons. */
static int scale_exponent(double amax, double top)
{
    int e = ilogb(amax) - ilogb(top);
    while (amax > ldexp(top, e))
        e++;
    while (amax <= ldexp(top, e - 1))
        e--;
    return e;
}

/* dst = src (rows x cols, row-major) quantized into fmt in tiles of tr x tc
 * (clipped at the edges), each tile scaled by its power of two so that its
 * largest magnitude is at most top, rounded to nearest-even, and scaled
 * back (exact).  Returns 0, or -1 if a dequantized value left binary32. */
static int quantize(float *dst, const float *src, size_t rows, size_t cols,
                    size_t tr, size_t tc, const emu_format *fmt, double top)
{
    emu_rounding rne;
    memset(&rne, 0, sizeof rne);
    for (size_t r0 = 0; r0 < rows; r0 += tr)
        for (size_t c0 = 0; c0 < cols; c0 += tc) {
            size_t r1 = r0 + tr < rows ? r0 + tr : rows;
            size_t c1 = c0 + tc < cols ? c0 + tc : cols;
            double amax = 0.0;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++)
                    amax = fmax(amax, fabs((double)src[r * cols + c]));
            int e = amax > 0.0 ? scale_exponent(amax, top) : 0;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++) {
                    double q = emu_round(fmt, ldexp((double)src[r * cols + c], -e),
                                         &rne, NULL);
                    double v = ldexp(q, e);
                    if ((double)(float)v != v)
                        return -1;
                    dst[r * cols + c] = (float)v;
                }
        }
    return 0;
}

/* ---- the GEMMs of a layer ------------------------------------------------- */

typedef enum gemm_kind { GEMM_FWD, GEMM_DGRAD, GEMM_WGRAD } gemm_kind;
static const char *const GEMM_NAMES[] = { "fwd", "dgrad", "wgrad" };

/* One GEMM as dot products: element (i, j) of the output is the sum over k
 * of a[i * a_row + k * a_k] b[j * b_row + k * b_k]. */
typedef struct gemm {
    const float *a, *b;
    size_t a_row, a_k, b_row, b_k;
    size_t m, n, K;           /* output m x n, reduction K                  */
} gemm;

/* The operands of one linear layer, as float matrices (row-major). */
typedef struct layer_ops {
    const char *name;
    const float *x, *w, *dy;
    size_t rows, fin, fout;
    int first;                /* no dgrad (the layer reads the input)       */
} layer_ops;

/* The input format's quantized copies of x, w and dy, laid out as the
 * layer (rows x fin, fout x fin, rows x fout): per GEMM kind, since FP8
 * tiles follow each GEMM's reduction axis. */
typedef struct quantized {
    float *x_fwd, *x_wgrad, *w, *dy_dgrad, *dy_wgrad;
} quantized;

static void quantized_free(quantized *q)
{
    free(q->x_fwd);
    free(q->x_wgrad);
    free(q->w);
    free(q->dy_dgrad);
    free(q->dy_wgrad);
    memset(q, 0, sizeof *q);
}

/* inputs: "binary16" (one scale per tensor) or "e4m3-tile" (DeepSeek-V3). */
static int quantize_layer(quantized *q, const layer_ops *L, const char *input)
{
    memset(q, 0, sizeof *q);
    const size_t nx = L->rows * L->fin, nw = L->fout * L->fin,
                 nd = L->rows * L->fout;
    q->x_fwd = malloc(nx * sizeof(float));
    q->x_wgrad = malloc(nx * sizeof(float));
    q->w = malloc(nw * sizeof(float));
    q->dy_dgrad = malloc(nd * sizeof(float));
    q->dy_wgrad = malloc(nd * sizeof(float));
    if (!q->x_fwd || !q->x_wgrad || !q->w || !q->dy_dgrad || !q->dy_wgrad)
        return -1;
    const bool tile = !strcmp(input, "e4m3-tile");
    const emu_format *fmt = emu_format_find(tile ? "e4m3" : "binary16");
    const double top = tile ? fmt->max : 2.0;
    const size_t T = 128;
    int rc = 0;
    if (tile) {
        rc |= quantize(q->x_fwd, L->x, L->rows, L->fin, 1, T, fmt, top);
        rc |= quantize(q->x_wgrad, L->x, L->rows, L->fin, T, 1, fmt, top);
        rc |= quantize(q->w, L->w, L->fout, L->fin, T, T, fmt, top);
        rc |= quantize(q->dy_dgrad, L->dy, L->rows, L->fout, 1, T, fmt, top);
        rc |= quantize(q->dy_wgrad, L->dy, L->rows, L->fout, T, 1, fmt, top);
    } else {
        rc |= quantize(q->x_fwd, L->x, L->rows, L->fin, L->rows, L->fin, fmt, top);
        memcpy(q->x_wgrad, q->x_fwd, nx * sizeof(float));
        rc |= quantize(q->w, L->w, L->fout, L->fin, L->fout, L->fin, fmt, top);
        rc |= quantize(q->dy_dgrad, L->dy, L->rows, L->fout, L->rows, L->fout,
                       fmt, top);
        memcpy(q->dy_wgrad, q->dy_dgrad, nd * sizeof(float));
    }
    return rc ? -1 : 0;
}

static gemm make_gemm(const layer_ops *L, const quantized *q, gemm_kind kind)
{
    gemm g;
    switch (kind) {
    case GEMM_FWD:   /* Y[r][o] = sum_i X[r][i] W[o][i] */
        g = (gemm){ q->x_fwd, q->w, L->fin, 1, L->fin, 1, L->rows, L->fout, L->fin };
        break;
    case GEMM_DGRAD: /* dX[r][i] = sum_o dY[r][o] W[o][i] */
        g = (gemm){ q->dy_dgrad, q->w, L->fout, 1, 1, L->fin, L->rows, L->fin,
                    L->fout };
        break;
    default:         /* dW[o][i] = sum_r dY[r][o] X[r][i] */
        g = (gemm){ q->dy_wgrad, q->x_wgrad, 1, L->fout, 1, L->fin, L->fout,
                    L->fin, L->rows };
        break;
    }
    return g;
}

/* ---- one GEMM's dot products under every model ---------------------------- */

typedef struct tally {
    double rel_sum, rel_max, nrel_sum, nrel_max;
    double *rel;              /* per dot, for the median                    */
    emu_accum_counts counts;
} tally;

static int cmp_double(const void *p, const void *q)
{
    double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct context {
    emu_accum acc[NMODELS];
    mpfr_t exact, t, d;
    float *a, *b;             /* one dot's operands, contiguous             */
    size_t kmax;
    size_t dots;
    uint64_t seed;
} context;

/* Measures `dots` output elements of g (stream picks them) and prints one
 * row per model. */
static int measure(context *cx, const char *arch, const char *input,
                   const char *layer, gemm_kind kind, const gemm *g,
                   uint64_t stream)
{
    const size_t total = g->m * g->n;
    const size_t dots = total < cx->dots ? total : cx->dots;
    tally t[NMODELS];
    memset(t, 0, sizeof t);
    for (int m = 0; m < NMODELS; m++)
        if (!(t[m].rel = malloc(dots * sizeof(double))))
            return -1;
    double cancel_sum = 0.0, pos_sum = 0.0;
    double *cancel = malloc(dots * sizeof(double));
    if (!cancel)
        return -1;
    for (size_t k = 0; k < dots; k++) {
        size_t at = total == dots ? k : (size_t)(emu_random64(cx->seed, stream, k) % total);
        size_t i = at / g->n, j = at % g->n;
        /* The products (exact in binary64: 48 bits at most) span the
         * exponents emin .. emax; their sum is exact in a precision of that
         * span plus 53 bits plus log2 K (every addition is checked). */
        int emin = 0, emax = 0;
        bool any = false;
        for (size_t q = 0; q < g->K; q++) {
            cx->a[q] = g->a[i * g->a_row + q * g->a_k];
            cx->b[q] = g->b[j * g->b_row + q * g->b_k];
            double p = (double)cx->a[q] * (double)cx->b[q];
            if (p != 0.0) {
                int e = ilogb(p);
                emin = any && emin < e ? emin : e;
                emax = any && emax > e ? emax : e;
                any = true;
            }
        }
        mpfr_set_prec(cx->exact, (mpfr_prec_t)(emax - emin) + 53 + 64);
        mpfr_set_zero(cx->exact, 1);
        double absdot = 0.0;
        size_t pos = 0, nonzero = 0;
        for (size_t q = 0; q < g->K; q++) {
            double p = (double)cx->a[q] * (double)cx->b[q]; /* exact */
            if (mpfr_add_d(cx->exact, cx->exact, p, MPFR_RNDN)) {
                fprintf(stderr, "accum_real: the MPFR sum was not exact\n");
                return -1;
            }
            absdot += fabs(p);
            nonzero += p != 0.0;
            pos += p > 0.0;
        }
        double ex = mpfr_get_d(cx->exact, MPFR_RNDN);
        cancel[k] = absdot > 0.0 ? fabs(ex) / absdot : 1.0;
        cancel_sum += cancel[k];
        pos_sum += nonzero ? (double)pos / (double)nonzero : 0.0;
        for (int m = 0; m < NMODELS; m++) {
            double lo = 0.0, got;
            if (MODELS[m].promote)
                got = promoted_dot(&cx->acc[m], MODELS[m].promote, cx->a,
                                   cx->b, g->K, &t[m].counts);
            else
                got = emu_accum_dot(&lo, &t[m].counts, &cx->acc[m], cx->a, 1,
                                    cx->b, 1, g->K, NULL);
            mpfr_set_d(cx->d, got, MPFR_RNDN);
            mpfr_add_d(cx->d, cx->d, lo, MPFR_RNDN);
            mpfr_sub(cx->d, cx->d, cx->exact, MPFR_RNDN);
            double err = fabs(mpfr_get_d(cx->d, MPFR_RNDN));
            double rel = ex != 0.0 ? err / fabs(ex) : (err != 0.0 ? INFINITY : 0.0);
            double nrel = absdot > 0.0 ? err / absdot : 0.0;
            t[m].rel[k] = rel;
            t[m].rel_sum += rel;
            t[m].rel_max = fmax(t[m].rel_max, rel);
            t[m].nrel_sum += nrel;
            t[m].nrel_max = fmax(t[m].nrel_max, nrel);
        }
    }
    double cancel_med = median(cancel, dots);
    free(cancel);
    for (int m = 0; m < NMODELS; m++) {
        const emu_accum_counts *c = &t[m].counts;
        printf("%s,%s,%s,%s,%zu,%s,%zu,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,"
               "%.6g\n",
               arch, input, layer, GEMM_NAMES[kind], g->K, MODELS[m].name, dots,
               t[m].rel_sum / (double)dots, median(t[m].rel, dots), t[m].rel_max,
               t[m].nrel_sum / (double)dots, t[m].nrel_max,
               c->adds ? (double)c->absorbed / (double)c->adds : 0.0,
               cancel_sum / (double)dots, cancel_med, pos_sum / (double)dots);
        free(t[m].rel);
    }
    fflush(stdout);
    return 0;
}

/* ---- a check that the operands are the layer's ------------------------------ */

/* The library's own results on the unquantized operands must be these
 * GEMMs: Y = X W^T + b (fwd), the layer's input gradient dY W (dgrad) and
 * its weight gradient dY^T X (wgrad; not for the tied head, whose
 * table's gradient also holds the embedding's), each within 1e-4 of
 * sum |terms| at a few elements (binary32 GEMMs are that close).  Catches
 * a dY taken from the wrong layer.  Returns 0 or -1 with a message. */
static int check_layer(const emu_layer *l, const layer_ops *L, bool tied)
{
    const gemm gs[3] = {
        { L->x, L->w, L->fin, 1, L->fin, 1, L->rows, L->fout, L->fin },
        { L->dy, L->w, L->fout, 1, 1, L->fin, L->rows, L->fin, L->fout },
        { L->dy, L->x, 1, L->fout, 1, L->fin, L->fout, L->fin, L->rows },
    };
    const float *want[3] = { l->y.data, L->first ? NULL : l->dx.data,
                             tied ? NULL : l->weight.g.data };
    for (int kind = 0; kind < 3; kind++) {
        const gemm *g = &gs[kind];
        if (!want[kind])
            continue;
        for (size_t k = 0; k < 8; k++) {
            size_t at = (k * 7919u) % (g->m * g->n);
            size_t i = at / g->n, j = at % g->n;
            double s = 0.0, abs_s = 0.0;
            if (kind == GEMM_FWD && l->has_bias) {
                s = l->bias.w.data[j];
                abs_s = fabs(s);
            }
            for (size_t q = 0; q < g->K; q++) {
                double p = (double)g->a[i * g->a_row + q * g->a_k] *
                           (double)g->b[j * g->b_row + q * g->b_k];
                s += p;
                abs_s += fabs(p);
            }
            if (fabs(s - (double)want[kind][at]) > 1e-4 * abs_s + 1e-30) {
                fprintf(stderr, "accum_real: %s %s: element %zu is %g, the "
                        "operands give %g\n", l->name, GEMM_NAMES[kind], at,
                        (double)want[kind][at], s);
                return -1;
            }
        }
    }
    return 0;
}

/* ---- the model and its batch ------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: accum_real --weights FILE --data DATA [--train-examples N]\n"
            "                  [--batch B] [--seq-len T] [--dots N] [--inputs LIST]\n"
            "  DATA: synthetic, fashion-mnist (image models) or text (gpt);\n"
            "  the model, seed and step come from FILE's metadata.  LIST:\n"
            "  comma-separated of binary16, e4m3-tile (default both).\n"
            "  Writes CSV to stdout: one row per input format, GEMM and model.\n");
    exit(2);
}

static int fail(const char *what, const emu_error *err)
{
    char msg[700];
    emu_error_format(err, msg, sizeof msg);
    fprintf(stderr, "accum_real: %s: %s\n", what, msg);
    return 1;
}

int main(int argc, char **argv)
{
    const char *weights = NULL, *data = NULL, *inputs = "binary16,e4m3-tile";
    size_t train_examples = 0, dots = 500;
    int batch = 0, seq_len = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--weights"))
            weights = v;
        else if (!strcmp(k, "--data"))
            data = v;
        else if (!strcmp(k, "--train-examples"))
            train_examples = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--batch"))
            batch = atoi(v);
        else if (!strcmp(k, "--seq-len"))
            seq_len = atoi(v);
        else if (!strcmp(k, "--dots"))
            dots = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--inputs"))
            inputs = v;
        else
            usage();
    }
    if (!weights || !data || !dots)
        usage();
    /* The input formats, in the order given. */
    const char *input_names[2];
    int n_inputs = 0;
    for (const char *p = inputs; *p;) {
        size_t len = strcspn(p, ",");
        const char *known = len == 8 && !strncmp(p, "binary16", 8) ? "binary16"
                            : len == 9 && !strncmp(p, "e4m3-tile", 9) ? "e4m3-tile"
                                                                      : NULL;
        if (!known || n_inputs == 2) {
            fprintf(stderr, "accum_real: --inputs %s: binary16 and e4m3-tile, "
                    "each once\n", inputs);
            return 2;
        }
        input_names[n_inputs++] = known;
        p += len + (p[len] == ',');
    }

    /* The run's architecture, seed and step. */
    emu_error err;
    emu_tensorfile tf;
    if (emu_tensorfile_read(&tf, weights, 0, &err))
        return fail(weights, &err);
    const char *ma = emu_tensorfile_meta(&tf, "arch"),
               *ms = emu_tensorfile_meta(&tf, "seed"),
               *mt = emu_tensorfile_meta(&tf, "step");
    if (!ma || !ms || !mt) {
        fprintf(stderr, "accum_real: %s: no arch, seed or step in its metadata\n",
                weights);
        return 1;
    }
    char arch[128];
    snprintf(arch, sizeof arch, "%s", ma);
    const uint64_t seed = strtoull(ms, NULL, 10), step = strtoull(mt, NULL, 10);
    emu_tensorfile_free(&tf);
    const bool lm = emu_arch_is_lm(arch);

    emu_policy pol;
    if (emu_policy_preset(&pol, "fp32", &err))
        return fail("fp32", &err);
    emu_ctx ctx;
    emu_ctx_init(&ctx, seed);
    emu_model m;
    emu_dataset train, test;
    emu_textset ttrain, tval;
    memset(&train, 0, sizeof train);
    memset(&test, 0, sizeof test);
    memset(&ttrain, 0, sizeof ttrain);
    memset(&tval, 0, sizeof tval);
    int *labels = NULL;
    if (lm) {
        if (strcmp(data, "text")) {
            fprintf(stderr, "accum_real: %s needs --data text\n", arch);
            return 2;
        }
        if (!batch)
            batch = 64;
        if (emu_text_embedded(&ttrain, &tval, seed,
                              train_examples ? train_examples : 1000000, 100000, &err))
            return fail("text", &err);
        if (!seq_len) { /* the context T of "gpt:L-D-H-T", 64 by default */
            const char *dash = strrchr(arch, '-');
            seq_len = strchr(arch, ':') && dash ? atoi(dash + 1) : 64;
        }
        if (emu_model_build_lm(&m, arch, &pol, batch, seq_len, EMU_TEXT_VOCAB, seed,
                               &ctx, &err))
            return fail(arch, &err);
        seq_len = m.seq_len;
        if (emu_text_check_context(&ttrain, seq_len, &err))
            return fail("text", &err);
        const size_t rows = (size_t)batch * (size_t)seq_len;
        int32_t *ty = malloc(rows * sizeof *ty);
        labels = malloc(rows * sizeof *labels);
        if (!ty || !labels)
            return 1;
        /* The windows the run would draw at its next step. */
        emu_text_batch(&ttrain, batch, seq_len, seed, step, m.tokens, ty);
        for (size_t r = 0; r < rows; r++)
            labels[r] = ty[r];
        free(ty);
    } else {
        int rc = !strcmp(data, "synthetic")
                     ? emu_dataset_synthetic(&train, &test, seed,
                                             train_examples ? train_examples : 6000,
                                             1000, &err)
                 : !strcmp(data, "fashion-mnist")
                     ? emu_dataset_fashion_mnist(&train, &test, NULL, &err)
                     : (fprintf(stderr, "accum_real: unknown --data %s\n", data), 2);
        if (rc == 2)
            return 2;
        if (rc)
            return fail(data, &err);
        if (train_examples && train_examples < train.n)
            train.n = train_examples;
        if (!batch)
            batch = 64;
        if ((size_t)batch > train.n) {
            fprintf(stderr, "accum_real: a batch of %d, more than the %zu examples\n",
                    batch, train.n);
            return 2;
        }
        if (emu_model_build(&m, arch, &pol, batch, train.channels, train.height,
                            train.width, train.classes, seed, &ctx, &err))
            return fail(arch, &err);
        /* The first examples of the run's epoch-0 order. */
        size_t *perm = malloc(train.n * sizeof *perm);
        const size_t es = (size_t)train.channels * (size_t)train.height *
                          (size_t)train.width;
        float *bx = malloc((size_t)batch * es * sizeof *bx);
        labels = malloc((size_t)batch * sizeof *labels);
        if (!perm || !bx || !labels)
            return 1;
        emu_batch_permutation(perm, train.n, seed, 0);
        for (int b = 0; b < batch; b++) {
            memcpy(bx + (size_t)b * es, train.x + perm[b] * es, es * sizeof *bx);
            labels[b] = train.y[perm[b]];
        }
        if (emu_t_load(&ctx, "input", &m.x, bx, (size_t)batch * es,
                       &pol.activation.rnd))
            return fail("input", &ctx.err);
        free(perm);
        free(bx);
    }
    if (emu_model_load_weights(&m, &ctx, &pol, weights, &err))
        return fail(weights, &err);
    if (emu_model_forward(&m, &ctx, &pol) ||
        emu_model_backward(&m, &ctx, &pol, labels, 1.0f))
        return fail("forward/backward", &ctx.err);

    context cx;
    memset(&cx, 0, sizeof cx);
    cx.dots = dots;
    cx.seed = seed;
    for (int k = 0; k < NMODELS; k++)
        if (emu_accum_parse(&cx.acc[k], MODELS[k].spec, &err) ||
            emu_accum_validate(&cx.acc[k], &err))
            return fail(MODELS[k].spec, &err);
    /* exact gets each dot's precision in measure; d = got + lo - exact
     * needs only to be accurate to a few bits (256: got + lo exactly). */
    mpfr_inits2(256, cx.exact, cx.t, cx.d, (mpfr_ptr)0);

    printf("arch,input,layer,gemm,K,model,dots,rel_mean,rel_median,rel_max,"
           "nrel_mean,nrel_max,absorbed_rate,cancel_mean,cancel_median,pos_frac\n");
    /* upstream[i]: a layer with parameters feeds layer i's output (or is
     * i): training computes an input gradient only where its source has
     * this, so a layer whose source has not gets no dgrad GEMM. */
    bool *upstream = calloc((size_t)m.n_layers, sizeof *upstream);
    if (!upstream)
        return 1;
    for (int i = 0; i < m.n_layers; i++) {
        const emu_layer *l = &m.layers[i];
        upstream[i] = l->has_params || l->kind == EMU_LAYER_TIED ||
                      (l->src >= 0 && upstream[l->src]) ||
                      (l->kind == EMU_LAYER_ADD && l->src2 >= 0 && upstream[l->src2]);
    }
    int li = 0;
    for (int i = 0; i < m.n_layers; i++) {
        const emu_layer *l = &m.layers[i];
        if (l->kind != EMU_LAYER_LINEAR && l->kind != EMU_LAYER_TIED)
            continue;
        /* dY: the gradient reaching the output, the logits' for the last
         * layer, else its one reader's input gradient (an addition passes
         * its own gradient on as both addends'). */
        const emu_tensor *dy = i == m.n_layers - 1 ? &m.dlogits : NULL;
        int readers = 0;
        for (int j = i + 1; j < m.n_layers; j++)
            if (m.layers[j].src == i || m.layers[j].src2 == i) {
                dy = &m.layers[j].dx;
                readers++;
            }
        if (!dy || readers > 1) {
            fprintf(stderr, "accum_real: %s: %d readers of its output\n", l->name,
                    readers);
            return 1;
        }
        const emu_tensor *w = l->kind == EMU_LAYER_TIED ? &m.layers[l->tie].weight.w
                                                         : &l->weight.w;
        const emu_tensor *x = l->has_xq ? &l->xq : l->in;
        layer_ops L = { l->name, x->data, w->data, dy->data, 0, w->shape[1],
                        w->shape[0], l->src < 0 || !upstream[l->src] };
        L.rows = x->n / L.fin;
        if (x->n != L.rows * L.fin || dy->n != L.rows * L.fout) {
            fprintf(stderr, "accum_real: %s: dY is not rows x fout\n", l->name);
            return 1;
        }
        if (check_layer(l, &L, l->kind == EMU_LAYER_TIED))
            return 1;
        size_t kmax = L.fin > L.fout ? L.fin : L.fout;
        kmax = kmax > L.rows ? kmax : L.rows;
        if (kmax > cx.kmax) {
            free(cx.a);
            free(cx.b);
            cx.a = malloc(kmax * sizeof(float));
            cx.b = malloc(kmax * sizeof(float));
            if (!cx.a || !cx.b)
                return 1;
            cx.kmax = kmax;
        }
        for (int ii = 0; ii < n_inputs; ii++) {
            const char *in = input_names[ii];
            quantized q;
            if (quantize_layer(&q, &L, in)) {
                fprintf(stderr, "accum_real: %s: quantizing into %s failed\n",
                        l->name, in);
                return 1;
            }
            for (int kind = GEMM_FWD; kind <= GEMM_WGRAD; kind++) {
                if (kind == GEMM_DGRAD && L.first)
                    continue;
                gemm g = make_gemm(&L, &q, (gemm_kind)kind);
                /* Streams: per layer and GEMM, so a cell never depends
                 * on which other cells ran, and both input formats
                 * measure the same output elements. */
                uint64_t stream = ((uint64_t)li << 4) | (uint64_t)kind;
                if (measure(&cx, arch, in, l->name, (gemm_kind)kind, &g, stream))
                    return 1;
            }
            quantized_free(&q);
        }
        li++;
    }
    mpfr_clears(cx.exact, cx.t, cx.d, (mpfr_ptr)0);
    free(upstream);
    free(cx.a);
    free(cx.b);
    free(labels);
    emu_model_free(&m);
    emu_dataset_free(&train);
    emu_dataset_free(&test);
    emu_textset_free(&ttrain);
    emu_textset_free(&tval);
    return 0;
}
