/*
 * ops_loss.c — softmax, log-softmax and the two training losses
 * (cross-entropy over class logits, mean squared error).
 *
 * These are fused ops: every output is evaluated in binary64 from the op's
 * carrier inputs (max-subtracted exponentials, one binary64 sum per row,
 * sequential in column order) and rounded once, by emu_commit(), into the
 * output tensor's format.  The binary64 evaluation is accurate to a few
 * units of 2^-53 relative, far below the rounding of any carrier format;
 * the MPFR reference recomputes each sampled output from the same inputs
 * at 64 bits more than the precision the choke point asks for, so the
 * statistics show whatever difference remains.
 *
 * Called by the nn layer (classifier heads, regression losses) and the CLI.
 * Shapes: logits and probabilities (B, C), one row per example.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

/* Intermediate precision of the references: x_k - m is exact at this
 * precision for any two binary32 values (their spread is below 280 bits). */
enum { REF_EXTRA = 64 };

static int check_rows(emu_ctx *ctx, const char *site, const char *what,
                      const emu_tensor *x)
{
    if (x->ndim != 2) {
        char s[96];
        emu_tensor_shape_string(x, s, sizeof s);
        return emu_ctx_fail(ctx, site, "%s '%s' must be a (rows, classes) "
                            "matrix, is %s", what, x->name, s);
    }
    return 0;
}

/* Sub-site name "<site>.<name>" for an op's second output. */
static void sub_site(char *buf, size_t size, const char *site,
                     const char *name)
{
    snprintf(buf, size, "%s.%s", site ? site : "op", name);
}

/* ---- per-row binary64 evaluation ---------------------------------------- */

/* Largest entry of a row, ignoring NaN (a NaN then propagates through
 * exp(x - m) anyway); -inf for an all-NaN or all -inf row. */
static double row_max(const float *x, size_t C)
{
    double m = -INFINITY;
    for (size_t j = 0; j < C; j++)
        if (x[j] > m)
            m = x[j];
    return m;
}

/* e[j] = exp(x[j] - m); returns their sum in column order and sets
 * *log_s to its logarithm.  The sum is 1 (the first maximum's term) plus
 * the rest, and log1p of the rest keeps log(s) accurate relative to
 * itself when the rest is tiny (a confident row).  A +inf entry makes
 * inf - inf = NaN and the whole row NaN, as the formula says. */
static double row_exp(const float *x, size_t C, double m, double *e,
                      double *log_s)
{
    size_t jm = C;
    for (size_t j = 0; j < C && jm == C; j++)
        if ((double)x[j] == m)
            jm = j;
    double s = 0.0, rest = 0.0;
    for (size_t j = 0; j < C; j++) {
        e[j] = exp((double)x[j] - m);
        s += e[j];
        if (j != jm)
            rest += e[j];
    }
    *log_s = jm < C && e[jm] == 1.0 ? log1p(rest) : log(s);
    return s;
}

/* ---- MPFR references ------------------------------------------------------ */

/* Lazily initialised scratch of a reference, with the row sum it last
 * computed: the choke point samples outputs in increasing order, so each
 * sampled row is summed once. */
typedef struct ref_scratch {
    bool init;
    size_t row;       /* row whose sum is in `sum`; SIZE_MAX: none */
    mpfr_t sum, t, u, m;
} ref_scratch;

static void scratch_init(ref_scratch *w, mpfr_prec_t prec)
{
    if (w->init)
        return;
    mpfr_inits2(prec + REF_EXTRA, w->sum, w->t, w->u, w->m, (mpfr_ptr)0);
    w->row = SIZE_MAX;
    w->init = true;
}

static void scratch_clear(ref_scratch *w)
{
    if (w->init)
        mpfr_clears(w->sum, w->t, w->u, w->m, (mpfr_ptr)0);
    w->init = false;
}

/* w->sum = sum_k exp(x_k - m) and w->m = m for row r (m its maximum). */
static void ref_row_sum(ref_scratch *w, const float *x, size_t C, size_t r)
{
    if (w->row == r)
        return;
    mpfr_set_d(w->m, row_max(x + r * C, C), MPFR_RNDN);
    mpfr_set_zero(w->sum, 1);
    for (size_t k = 0; k < C; k++) {
        mpfr_set_d(w->t, x[r * C + k], MPFR_RNDN);
        mpfr_sub(w->t, w->t, w->m, MPFR_RNDN); /* exact */
        mpfr_exp(w->t, w->t, MPFR_RNDN);
        mpfr_add(w->sum, w->sum, w->t, MPFR_RNDN);
    }
    w->row = r;
}

/* ---- softmax and log-softmax --------------------------------------------- */

typedef struct softmax_op {
    const float *x;
    size_t B, C;
    bool log;
    ref_scratch *w;
    /* the producer's row: exp(x - m) of row `row` (SIZE_MAX: none yet),
     * its maximum m, sum s and log(s) */
    double *e;
    size_t row;
    double m, s, ls;
} softmax_op;

/* emu_op_out.fill: outputs i0 .. i0+m-1, row by row in binary64 as the
 * op defines them; a row that a chunk boundary splits is kept for the
 * next chunk, so every row is evaluated once. */
static int softmax_fill(const void *opv, size_t i0, size_t m, double *hi,
                        double *lo)
{
    (void)lo;
    softmax_op *op = (softmax_op *)opv; /* the row cache is the op's own */
    const size_t C = op->C;
    for (size_t j = 0; j < m; j++) {
        const size_t i = i0 + j, r = i / C, k = i % C;
        const float *xr = op->x + r * C;
        if (r != op->row) {
            op->m = row_max(xr, C);
            op->s = row_exp(xr, C, op->m, op->e, &op->ls);
            op->row = r;
        }
        hi[j] = op->log ? ((double)xr[k] - op->m) - op->ls : op->e[k] / op->s;
    }
    return 0;
}

static int softmax_ref(const void *opv, size_t i, mpfr_ptr exact,
                       mpfr_ptr exact_src)
{
    (void)exact_src;
    const softmax_op *op = opv;
    size_t r = i / op->C;
    if (!emu_all_finite(op->x + r * op->C, op->C))
        return -1;
    ref_scratch *w = op->w;
    scratch_init(w, mpfr_get_prec(exact));
    ref_row_sum(w, op->x, op->C, r);
    mpfr_set_d(w->t, op->x[i], MPFR_RNDN);
    mpfr_sub(w->t, w->t, w->m, MPFR_RNDN);
    if (op->log) {
        mpfr_log(w->u, w->sum, MPFR_RNDN);
        mpfr_sub(exact, w->t, w->u, MPFR_RNDN);
    } else {
        mpfr_exp(w->t, w->t, MPFR_RNDN);
        mpfr_div(exact, w->t, w->sum, MPFR_RNDN);
    }
    return 0;
}

static bool softmax_had_nan(const void *opv, size_t i)
{
    const softmax_op *op = opv;
    size_t r = i / op->C;
    return emu_any_nan(op->x + r * op->C, op->C);
}

static int softmax_common(emu_ctx *ctx, const char *site, emu_tensor *out,
                          const emu_tensor *x, bool log_form,
                          const emu_rounding *rnd)
{
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "x", x) ||
        check_rows(ctx, site, "x", x) ||
        emu_check_same_shape(ctx, site, "out", out, "x", x))
        return -1;
    const size_t B = x->shape[0], C = x->shape[1];
    const float *xs = x->data;
    double *e = emu_scratch(ctx, site, C);
    if (!e)
        return -1;
    ref_scratch w = { 0 };
    softmax_op op = { .x = xs, .B = B, .C = C, .log = log_form, .w = &w,
                      .e = e, .row = SIZE_MAX };
    /* The callbacks read x; in place, a row must be read before any of
     * it is stored: early stores only when out and x share nothing. */
    int rc = emu_commit(ctx, &(emu_op_out){
        .site = site, .kind = log_form ? "log_softmax" : "softmax",
        .out = out, .fill = softmax_fill, .op = &op, .ref = softmax_ref,
        .inputs_had_nan = softmax_had_nan, .rnd = rnd,
        .store_early = !emu_tensors_overlap(out, x) });
    scratch_clear(&w);
    free(e);
    return rc;
}

int emu_t_softmax(emu_ctx *ctx, const char *site, emu_tensor *out,
                  const emu_tensor *x, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    return softmax_common(ctx, site, out, x, false, rnd);
}

int emu_t_log_softmax(emu_ctx *ctx, const char *site, emu_tensor *out,
                      const emu_tensor *x, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    return softmax_common(ctx, site, out, x, true, rnd);
}

/* ---- cross-entropy ------------------------------------------------------- */

typedef struct xent_op {
    const float *x;
    const int *labels;
    size_t B, C;
    double scale;
    ref_scratch *w;
    /* the producer's: exp(x - m) per element, and per row the sum s and
     * the sum of the exponentials other than the label's */
    const double *e, *s, *others;
} xent_op;

/* emu_op_out.fill of dlogits: (softmax - onehot) * scale / B from the
 * row sums, the label's entry as -(others / s) (see below). */
static int xent_grad_fill(const void *opv, size_t i0, size_t m, double *hi,
                          double *lo)
{
    (void)lo;
    const xent_op *op = opv;
    const size_t C = op->C;
    for (size_t j = 0; j < m; j++) {
        const size_t i = i0 + j, r = i / C;
        const double p = i % C == (size_t)op->labels[r]
                       ? -(op->others[r] / op->s[r]) : op->e[i] / op->s[r];
        hi[j] = p * op->scale / (double)op->B;
    }
    return 0;
}

static bool xent_loss_had_nan(const void *opv, size_t i)
{
    (void)i;
    const xent_op *op = opv;
    return emu_any_nan(op->x, op->B * op->C);
}

static bool xent_grad_had_nan(const void *opv, size_t i)
{
    const xent_op *op = opv;
    return emu_any_nan(op->x + (i / op->C) * op->C, op->C);
}

/* loss = (1/B) sum_r [log sum_k exp(x_rk - m_r) - (x_r,label - m_r)] */
static int xent_loss_ref(const void *opv, size_t i, mpfr_ptr exact,
                         mpfr_ptr exact_src)
{
    (void)i;
    (void)exact_src;
    const xent_op *op = opv;
    if (!emu_all_finite(op->x, op->B * op->C))
        return -1;
    ref_scratch *w = op->w;
    scratch_init(w, mpfr_get_prec(exact));
    mpfr_t acc;
    mpfr_init2(acc, mpfr_get_prec(exact) + REF_EXTRA);
    mpfr_set_zero(acc, 1);
    for (size_t r = 0; r < op->B; r++) {
        ref_row_sum(w, op->x, op->C, r);
        mpfr_log(w->u, w->sum, MPFR_RNDN);
        mpfr_set_d(w->t, op->x[r * op->C + (size_t)op->labels[r]], MPFR_RNDN);
        mpfr_sub(w->t, w->t, w->m, MPFR_RNDN);
        mpfr_sub(w->u, w->u, w->t, MPFR_RNDN);
        mpfr_add(acc, acc, w->u, MPFR_RNDN);
    }
    mpfr_div_ui(exact, acc, (unsigned long)op->B, MPFR_RNDN);
    mpfr_clear(acc);
    return 0;
}

/* dlogits_rj = (softmax_rj - [j == label_r]) * scale / B */
static int xent_grad_ref(const void *opv, size_t i, mpfr_ptr exact,
                         mpfr_ptr exact_src)
{
    (void)exact_src;
    const xent_op *op = opv;
    size_t r = i / op->C, j = i % op->C;
    if (!emu_all_finite(op->x + r * op->C, op->C))
        return -1;
    ref_scratch *w = op->w;
    scratch_init(w, mpfr_get_prec(exact));
    ref_row_sum(w, op->x, op->C, r);
    mpfr_set_d(w->t, op->x[i], MPFR_RNDN);
    mpfr_sub(w->t, w->t, w->m, MPFR_RNDN);
    mpfr_exp(w->t, w->t, MPFR_RNDN);
    mpfr_div(w->t, w->t, w->sum, MPFR_RNDN);
    if ((size_t)op->labels[r] == j)
        mpfr_sub_ui(w->t, w->t, 1, MPFR_RNDN);
    mpfr_mul_d(w->t, w->t, op->scale, MPFR_RNDN);
    mpfr_div_ui(exact, w->t, (unsigned long)op->B, MPFR_RNDN);
    return 0;
}

int emu_t_cross_entropy(emu_ctx *ctx, const char *site, emu_tensor *loss,
                        emu_tensor *dlogits, const emu_tensor *logits,
                        const int *labels, float scale,
                        const emu_rounding *rnd)
{
    return emu_cross_entropy_rnd2(ctx, site, loss, dlogits, logits, labels,
                                  scale, rnd, rnd);
}

int emu_cross_entropy_rnd2(emu_ctx *ctx, const char *site, emu_tensor *loss,
                           emu_tensor *dlogits, const emu_tensor *logits,
                           const int *labels, float scale,
                           const emu_rounding *loss_rnd,
                           const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_rounding(ctx, site, loss_rnd) ||
        emu_check_tensor(ctx, site, "loss", loss) ||
        emu_check_tensor(ctx, site, "logits", logits) ||
        check_rows(ctx, site, "logits", logits))
        return -1;
    if (loss->n != 1)
        return emu_ctx_fail(ctx, site, "loss '%s' must have one element, "
                            "has %zu", loss->name, loss->n);
    if (dlogits && (emu_check_tensor(ctx, site, "dlogits", dlogits) ||
                    emu_check_same_shape(ctx, site, "dlogits", dlogits,
                                         "logits", logits)))
        return -1;
    if (emu_tensors_overlap(loss, dlogits))
        return emu_ctx_fail(ctx, site, "loss and dlogits share storage");
    if (!labels)
        return emu_ctx_fail(ctx, site, "labels: NULL");
    const size_t B = logits->shape[0], C = logits->shape[1];
    for (size_t r = 0; r < B; r++)
        if (labels[r] < 0 || (size_t)labels[r] >= C)
            return emu_ctx_fail(ctx, site, "label %d of row %zu is out of "
                                "range: logits '%s' have %zu classes",
                                labels[r], r, logits->name, C);

    const float *xs = logits->data;
    double *g = emu_scratch(ctx, site, logits->n + 2 * B);
    if (!g)
        return -1;
    double *rs = g + logits->n, *ro = rs + B;
    /* g holds exp(x - m) per row; the producer forms the gradient from
     * it while the choke point rounds.  The label's entry is -(sum of the
     * other exponentials) / s rather than softmax - 1, so that a
     * confident prediction (softmax near 1) keeps its relative accuracy
     * instead of cancelling; the loss likewise (below). */
    double total = 0.0;
    for (size_t r = 0; r < B; r++) {
        const float *xr = xs + r * C;
        double *gr = g + r * C;
        const size_t lab = (size_t)labels[r];
        double m = row_max(xr, C), ls;
        double s = row_exp(xr, C, m, gr, &ls);
        double others = 0.0;
        for (size_t j = 0; j < C; j++)
            if (j != lab)
                others += gr[j];
        /* log(s) - (x_label - m): both terms are non-negative, and log(s)
         * is accurate even for a confident row (row_exp). */
        total += ls - ((double)xr[lab] - m);
        rs[r] = s;
        ro[r] = others;
    }
    double lossv = total / (double)B;

    ref_scratch w = { 0 };
    xent_op op = { .x = xs, .labels = labels, .B = B, .C = C,
                   .scale = scale, .w = &w, .e = g, .s = rs, .others = ro };
    int rc = emu_commit(ctx, &(emu_op_out){
        .site = site, .kind = "cross_entropy", .out = loss, .hi = &lossv,
        .op = &op, .ref = xent_loss_ref, .inputs_had_nan = xent_loss_had_nan,
        .rnd = loss_rnd });
    if (rc == 0 && dlogits) {
        char sub[EMU_TENSOR_NAME_MAX + 16];
        sub_site(sub, sizeof sub, site, "dlogits");
        w.row = SIZE_MAX;
        rc = emu_commit(ctx, &(emu_op_out){
            .site = sub, .kind = "cross_entropy_grad", .out = dlogits,
            .fill = xent_grad_fill, .op = &op, .ref = xent_grad_ref,
            .inputs_had_nan = xent_grad_had_nan, .rnd = rnd,
            .store_early = !emu_tensors_overlap(dlogits, logits) });
    }
    scratch_clear(&w);
    free(g);
    return rc;
}

/* ---- mean squared error -------------------------------------------------- */

typedef struct mse_op {
    const float *p, *t;
    size_t n;
    double scale;
} mse_op;

/* emu_op_out.fill of dpred: 2 (p - t) scale / n in binary64. */
static int mse_grad_fill(const void *opv, size_t i0, size_t m, double *hi,
                         double *lo)
{
    (void)lo;
    const mse_op *op = opv;
    for (size_t j = 0; j < m; j++) {
        const size_t i = i0 + j;
        const double d = (double)op->p[i] - (double)op->t[i];
        hi[j] = d * (2.0 * op->scale) / (double)op->n;
    }
    return 0;
}

static bool mse_loss_had_nan(const void *opv, size_t i)
{
    (void)i;
    const mse_op *op = opv;
    return emu_any_nan(op->p, op->n) || emu_any_nan(op->t, op->n);
}

static bool mse_grad_had_nan(const void *opv, size_t i)
{
    const mse_op *op = opv;
    return isnan(op->p[i]) || isnan(op->t[i]);
}

/* loss = (1/n) sum (p - t)^2, every step exact at 2 (prec + extra) bits
 * but the division. */
static int mse_loss_ref(const void *opv, size_t i, mpfr_ptr exact,
                        mpfr_ptr exact_src)
{
    (void)i;
    (void)exact_src;
    const mse_op *op = opv;
    if (!emu_all_finite(op->p, op->n) || !emu_all_finite(op->t, op->n))
        return -1;
    mpfr_prec_t wp = 2 * (mpfr_get_prec(exact) + REF_EXTRA);
    mpfr_t acc, d;
    mpfr_inits2(wp, acc, d, (mpfr_ptr)0);
    mpfr_set_zero(acc, 1);
    for (size_t k = 0; k < op->n; k++) {
        mpfr_set_d(d, op->p[k], MPFR_RNDN);
        mpfr_sub_d(d, d, op->t[k], MPFR_RNDN);
        mpfr_sqr(d, d, MPFR_RNDN);
        mpfr_add(acc, acc, d, MPFR_RNDN);
    }
    mpfr_div_ui(exact, acc, (unsigned long)op->n, MPFR_RNDN);
    mpfr_clears(acc, d, (mpfr_ptr)0);
    return 0;
}

/* dpred = 2 (p - t) scale / n */
static int mse_grad_ref(const void *opv, size_t i, mpfr_ptr exact,
                        mpfr_ptr exact_src)
{
    (void)exact_src;
    const mse_op *op = opv;
    if (!isfinite(op->p[i]) || !isfinite(op->t[i]))
        return -1;
    mpfr_t d;
    mpfr_init2(d, mpfr_get_prec(exact) + REF_EXTRA);
    mpfr_set_d(d, op->p[i], MPFR_RNDN);
    mpfr_sub_d(d, d, op->t[i], MPFR_RNDN);
    mpfr_mul_d(d, d, 2.0 * op->scale, MPFR_RNDN);
    mpfr_div_ui(exact, d, (unsigned long)op->n, MPFR_RNDN);
    mpfr_clear(d);
    return 0;
}

int emu_t_mse(emu_ctx *ctx, const char *site, emu_tensor *loss,
              emu_tensor *dpred, const emu_tensor *pred,
              const emu_tensor *target, float scale,
              const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "loss", loss) ||
        emu_check_tensor(ctx, site, "pred", pred) ||
        emu_check_tensor(ctx, site, "target", target) ||
        emu_check_same_shape(ctx, site, "pred", pred, "target", target))
        return -1;
    if (loss->n != 1)
        return emu_ctx_fail(ctx, site, "loss '%s' must have one element, "
                            "has %zu", loss->name, loss->n);
    if (dpred && (emu_check_tensor(ctx, site, "dpred", dpred) ||
                  emu_check_same_shape(ctx, site, "dpred", dpred, "pred",
                                       pred)))
        return -1;
    if (emu_tensors_overlap(loss, dpred))
        return emu_ctx_fail(ctx, site, "loss and dpred share storage");

    const float *ps = pred->data, *ts = target->data;
    const size_t n = pred->n;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)ps[i] - (double)ts[i];
        sum += d * d;
    }
    double lossv = sum / (double)n;

    mse_op op = { .p = ps, .t = ts, .n = n, .scale = scale };
    int rc = emu_commit(ctx, &(emu_op_out){
        .site = site, .kind = "mse", .out = loss, .hi = &lossv, .op = &op,
        .ref = mse_loss_ref, .inputs_had_nan = mse_loss_had_nan, .rnd = rnd });
    if (rc == 0 && dpred) {
        char sub[EMU_TENSOR_NAME_MAX + 16];
        sub_site(sub, sizeof sub, site, "dpred");
        /* element i reads pred and target at i alone */
        rc = emu_commit(ctx, &(emu_op_out){
            .site = sub, .kind = "mse_grad", .out = dpred,
            .fill = mse_grad_fill, .op = &op, .ref = mse_grad_ref,
            .inputs_had_nan = mse_grad_had_nan, .rnd = rnd,
            .store_early = emu_store_early_ok(dpred, ps, n) &&
                           emu_store_early_ok(dpred, ts, n) });
    }
    return rc;
}
