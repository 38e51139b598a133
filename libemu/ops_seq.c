/*
 * ops_seq.c — the row ops of sequence models: token embedding
 * (emu_t_embedding, emu_t_embedding_backward) and layer normalisation
 * over the last dimension (emu_t_layernorm, emu_t_layernorm_backward).
 * Causal attention is in ops_attn.c.  Called by the GPT layers of the nn
 * code and by users.
 *
 * Shapes: a sequence batch's activations are (N, D) matrices, N = B T
 * (any tensor of N*D elements whose last dimension is D); the embedding
 * table and its gradient (V, D); layer norm's gamma, beta, dgamma, dbeta
 * (D), mean and rstd (N).
 *
 * What is rounded, and where (each through the choke point, once):
 *   embedding:
 *   <site>            out[i, d] = table[idx[i], d], a cast (fill32)
 *   embedding backward:
 *   <site>            dtable[v, d] = the model's sum of the terms
 *                     dout[i, d] over the positions i with idx[i] = v in
 *                     ascending order (a scatter-add in position order, as
 *                     a sequential kernel would form it), dot product
 *                     number v D + d; with accumulate the accumulator
 *                     starts at dtable's old value (emu_accum_dot_init:
 *                     the fused model aligns it with the first group).
 *                     A row no index reaches: +0, or the old value with
 *                     accumulate (no sum is formed, nothing is counted as
 *                     an addition)
 *   layer norm (row i of x, D values, terms in column order, dot product
 *   number i of each reduction):
 *   <site>.mean       sum of x[i, :] under the model, divided by D: the
 *                     accumulator's value's exact quotient, rounded once
 *                     (emu_mean_pair, as emu_t_reduce's mean)
 *   <site>.var        sum of c_d^2 under the model (exact squares), / D,
 *                     c_d = x[i, d] - mean[i] (the stored mean) rounded to
 *                     binary32 (nearest-even): a kernel's centred value in
 *                     its carrier.  The biased variance, rounded into
 *                     rstd's format under stat_rnd (a scratch tensor: it
 *                     is measured, not kept)
 *   <site>.rstd       1 / sqrt(var + eps) of the stored var, binary64
 *   <site>            y = (x - mean) rstd gamma + beta, binary64 from the
 *                     stored mean and rstd
 *   layer norm backward (xh[i, d] = (x - mean) rstd in binary64, rounded
 *   to binary32 nearest-even: the normalised value a kernel recomputes):
 *   <site>.dweight    dgamma[d] = sum over rows i of dy[i, d] xh[i, d]
 *                     (exact products) under the model, dot product d
 *   <site>.dbias      dbeta[d] = sum over rows of dy[i, d], dot product d
 *   <site>.dinput     dx = rstd (dy gamma - S1 / D - xhat S2 / D) in
 *                     binary64, xhat = (x - mean) rstd in binary64,
 *                     S1 = sum over d of dy gamma (exact products; of dy
 *                     without gamma) and S2 = sum of dy w, w = gamma xh
 *                     rounded to binary32 (xh without gamma), each under
 *                     the model (dot products 2i and 2i + 1; their
 *                     swamping is counted at this site), as the
 *                     accumulator left them
 * The fast model sums in binary64 (exact products of binary32 values): as
 * fast as a binary32 loop at these lengths and below binary32's rounding of
 * the result (batch norm's reason, ops_norm.c).
 * The MPFR references: exact sums of the defined terms (mean; var: the
 * squares of the binary32 centred values; dgamma: dy times the binary32
 * xh; dbeta; dtable), so they measure the accumulation and the output
 * rounding, as batch norm's var of its stored xc; exact evaluations of
 * rstd, y and dx from the stored statistics and the accumulators' S1, S2
 * (as ops_norm.c's dx).  A row holding an infinity or a NaN normalises to
 * NaN (inf - inf in its centred values).
 * Stochastic accumulator words: stream op_index ^ 2^63 of the commit the
 * sum belongs to (S1, S2: the dinput commit's), as emu_t_reduce.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accum_internal.h"
#include "ops_internal.h"

#define ACCUM_STREAM_TAG ((uint64_t)1 << 63)

/* ---- shared checks ----------------------------------------------------------- */

/* t holds rows of D values: n_rows * D elements, last dimension D. */
static int check_rows(emu_ctx *ctx, const char *site, const char *what,
                      const emu_tensor *t, size_t n_rows, size_t D)
{
    if (emu_check_tensor(ctx, site, what, t))
        return -1;
    if (t->n != n_rows * D || t->shape[t->ndim - 1] != D) {
        char want[96];
        snprintf(want, sizeof want, "%zu rows of %zu values (last dimension %zu)",
                 n_rows, D, D);
        return emu_shape_fail(ctx, site, what, t, want);
    }
    return 0;
}

static int check_vec(emu_ctx *ctx, const char *site, const char *what,
                     const emu_tensor *t, size_t n, bool optional)
{
    if (!t && optional)
        return 0;
    if (emu_check_tensor(ctx, site, what, t))
        return -1;
    if (t->n != n) {
        char want[48];
        snprintf(want, sizeof want, "%zu values", n);
        return emu_shape_fail(ctx, site, what, t, want);
    }
    return 0;
}

static int check_table(emu_ctx *ctx, const char *site, const char *what,
                       const emu_tensor *t)
{
    if (emu_check_tensor(ctx, site, what, t))
        return -1;
    if (t->ndim != 2)
        return emu_shape_fail(ctx, site, what, t, "a (V, D) table");
    return 0;
}

/* Every index in [0, V), else EMU_EINVAL naming the first one outside. */
static int check_idx(emu_ctx *ctx, const char *site, const int32_t *idx,
                     size_t n, size_t V)
{
    if (!idx)
        return emu_ctx_fail(ctx, site, "token ids: NULL");
    for (size_t i = 0; i < n; i++)
        if (idx[i] < 0 || (size_t)idx[i] >= V)
            return emu_ctx_fail(ctx, site, "token id %ld at position %zu is "
                                "outside the table's rows [0, %zu)",
                                (long)idx[i], i, V);
    return 0;
}

/* ---- embedding --------------------------------------------------------------- */

typedef struct emb_op {
    size_t D;
    const float *table;       /* forward                                   */
    const int32_t *idx;
    /* backward: positions of row v are pos[start[v] .. start[v+1]) */
    const float *dout;
    const float *old;         /* dtable's old values (accumulate), or NULL */
    const size_t *start, *pos;
    const emu_accum *accum;
    uint64_t seed, stream;
    emu_accum_counts *counts;
    float *buf;               /* the terms of one output                   */
    const double *fast;       /* the fast model's sums (V*D), or NULL      */
} emb_op;

static void emb_fill32(const void *vop, size_t i0, size_t m, float *v)
{
    const emb_op *op = vop;
    const size_t D = op->D;
    size_t r = i0 / D, d = i0 % D;
    for (size_t j = 0; j < m; j++) {
        v[j] = op->table[(size_t)op->idx[r] * D + d];
        if (++d == D) {
            d = 0;
            r++;
        }
    }
}

static int emb_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const emb_op *op = vop;
    mpfr_set_flt(exact, op->table[(size_t)op->idx[i / op->D] * op->D + i % op->D],
                 MPFR_RNDN);
    return 0;
}

int emu_t_embedding(emu_ctx *ctx, const char *site, emu_tensor *out,
                    const emu_tensor *table, const int32_t *idx, size_t n,
                    const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "embedding";
    if (emu_check_rounding(ctx, site, rnd) ||
        check_table(ctx, site, "table", table))
        return -1;
    const size_t V = table->shape[0], D = table->shape[1];
    if (n == 0)
        return emu_ctx_fail(ctx, site, "no token ids (n = 0)");
    if (check_rows(ctx, site, "out", out, n, D) ||
        check_idx(ctx, site, idx, n, V))
        return -1;
    if (emu_tensors_overlap(out, table))
        return emu_ctx_fail(ctx, site, "out shares storage with the table");
    emb_op op = { .D = D, .table = table->data, .idx = idx };
    emu_op_out o = { .site = site, .kind = "embedding", .out = out,
                     .fill32 = emb_fill32, .op = &op, .ref = emb_ref,
                     .rnd = rnd, .store_early = true };
    return emu_commit(ctx, &o);
}

/* The terms of dtable[v, d] into op->buf; returns their number. */
static size_t emb_terms(const emb_op *op, size_t o)
{
    const size_t D = op->D, v = o / D, d = o % D;
    const size_t a = op->start[v], b = op->start[v + 1];
    for (size_t k = a; k < b; k++)
        op->buf[k - a] = op->dout[op->pos[k] * D + d];
    return b - a;
}

static int emb_bwd_fill(const void *vop, size_t i0, size_t m, double *hi,
                        double *lo)
{
    const emb_op *op = vop;
    const size_t D = op->D;
    bool any = false;
    for (size_t j = 0; j < m; j++) {
        const size_t o = i0 + j, v = o / D;
        lo[j] = 0.0;
        if (op->fast) {
            hi[j] = op->fast[o];
            continue;
        }
        if (op->start[v] == op->start[v + 1]) {
            hi[j] = op->old ? op->old[o] : 0.0;
            continue;
        }
        const size_t k = emb_terms(op, o);
        const double init = op->old ? op->old[o] : 0.0;
        emu_accum_rng rng = { op->seed, op->stream, o };
        hi[j] = emu_accum_dot_init_unguarded(op->accum, op->buf, 1, NULL, 0, k,
                                             op->old ? &init : NULL, &rng,
                                             op->counts, &lo[j]);
        any |= lo[j] != 0.0;
    }
    return any;
}

static int emb_bwd_ref(const void *vop, size_t o, mpfr_ptr exact, mpfr_ptr src)
{
    const emb_op *op = vop;
    const size_t D = op->D, v = o / D, d = o % D;
    mpfr_set_d(exact, op->old ? op->old[o] : 0.0, MPFR_RNDN);
    for (size_t k = op->start[v]; k < op->start[v + 1]; k++)
        mpfr_add_d(exact, exact, op->dout[op->pos[k] * D + d], MPFR_RNDN);
    mpfr_set(src, exact, MPFR_RNDN);
    return 1;
}

static bool emb_bwd_had_nan(const void *vop, size_t o)
{
    const emb_op *op = vop;
    const size_t D = op->D, v = o / D, d = o % D;
    if (op->old && isnan(op->old[o]))
        return true;
    for (size_t k = op->start[v]; k < op->start[v + 1]; k++)
        if (isnan(op->dout[op->pos[k] * D + d]))
            return true;
    return false;
}

int emu_t_embedding_backward(emu_ctx *ctx, const char *site, emu_tensor *dtable,
                             const emu_tensor *dout, const int32_t *idx, size_t n,
                             const emu_embedding_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "embedding";
    if (emu_check_rounding(ctx, site, rnd))
        return -1;
    if (!o)
        return emu_ctx_fail(ctx, site, "embedding options: NULL");
    if (emu_check_accum(ctx, site, o->accum) ||
        check_table(ctx, site, "dtable", dtable))
        return -1;
    const size_t V = dtable->shape[0], D = dtable->shape[1];
    if (n == 0)
        return emu_ctx_fail(ctx, site, "no token ids (n = 0)");
    if (check_rows(ctx, site, "dout", dout, n, D) ||
        check_idx(ctx, site, idx, n, V))
        return -1;
    if (emu_tensors_overlap(dtable, dout))
        return emu_ctx_fail(ctx, site, "dtable shares storage with dout");

    /* The positions of each row in ascending order: a stable counting
     * sort of the ids. */
    size_t *start = calloc(V + 1 + n, sizeof *start);
    if (!start)
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for %zu ids",
                             n);
    size_t *pos = start + V + 1, maxc = 0;
    for (size_t i = 0; i < n; i++)
        start[idx[i] + 1]++;
    for (size_t v = 0; v < V; v++) {
        if (start[v + 1] > maxc)
            maxc = start[v + 1];
        start[v + 1] += start[v];
    }
    {
        size_t *next = malloc(V * sizeof *next);
        if (!next) {
            free(start);
            return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
        }
        memcpy(next, start, V * sizeof *next);
        for (size_t i = 0; i < n; i++)
            pos[next[idx[i]]++] = i;
        free(next);
    }

    const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP);
    emu_accum_counts counts;
    memset(&counts, 0, sizeof counts);
    emb_op op = { .D = D, .dout = dout->data,
                  .old = o->accumulate ? dtable->data : NULL,
                  .start = start, .pos = pos, .accum = o->accum,
                  .seed = ctx->seed,
                  .stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG,
                  .counts = swamp ? &counts : NULL };
    double *fast = NULL;
    if (o->accum->kind == EMU_ACCUM_FAST) {
        /* Row by row in position order: each element's binary64 sum takes
         * its terms in ascending position order, as the definition. */
        fast = emu_scratch(ctx, site, V * D);
        if (!fast) {
            free(start);
            return -1;
        }
        for (size_t k = 0; k < V * D; k++) /* emu_scratch does not zero */
            fast[k] = o->accumulate ? dtable->data[k] : 0.0;
        for (size_t i = 0; i < n; i++) {
            double *row = fast + (size_t)idx[i] * D;
            const float *g = dout->data + i * D;
            for (size_t d = 0; d < D; d++)
                row[d] += g[d];
        }
        op.fast = fast;
        op.counts = NULL;
    } else {
        op.buf = malloc((maxc ? maxc : 1) * sizeof *op.buf);
        if (!op.buf) {
            free(start);
            return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
        }
    }
    /* The callbacks read dtable's old value at their own output only. */
    emu_op_out oo = { .site = site, .kind = "embedding_backward", .out = dtable,
                      .fill = emb_bwd_fill, .swamp = op.counts, .op = &op,
                      .ref = emb_bwd_ref, .inputs_had_nan = emb_bwd_had_nan,
                      .rnd = rnd, .store_early = true };
    int rc = emu_commit_direct(ctx, &oo);
    free(op.buf);
    free(fast);
    free(start);
    return rc;
}

/* ---- layer norm --------------------------------------------------------------- */

enum ln_sum { LN_MEAN, LN_VAR, LN_DBETA, LN_DGAMMA };

typedef struct ln_op {
    size_t N, D;
    enum ln_sum what;
    const float *x, *mean, *var, *rstd, *gamma, *beta, *dy;
    const float *xh;           /* backward: binary32 (x - mean) rstd       */
    double eps;
    const emu_accum *accum;
    uint64_t seed, stream;
    emu_accum_counts *counts;
    float *buf;                /* var: one row's centred values           */
    mpfr_ptr s, q, r;          /* emu_mean_pair's temporaries             */
    const double *fs;          /* the fast model's column sums, or NULL   */
    const double *s1, *s2;     /* dinput: the row sums as accumulated     */
} ln_op;

/* The model's sum of x[i*incx] (times y[i*incy] if y): the accumulator's
 * value as hi + *lo; the fast model in binary64. */
static double model_dot(const ln_op *op, const float *x, ptrdiff_t incx,
                        const float *y, ptrdiff_t incy, size_t n, size_t dot,
                        double *lo)
{
    emu_accum_rng rng = { op->seed, op->stream, dot };
    return emu_model_dot_unguarded(op->accum, x, incx, y, incy, n, &rng,
                                   op->counts, lo);
}

static bool is_pow2(size_t n)
{
    return n && !(n & (n - 1));
}

/* (hi + lo) / D as a pair that rounds like the exact quotient: a power of
 * two divides exactly (checked: no underflow), else emu_mean_pair. */
static void div_rows(const ln_op *op, double *hi, double *lo)
{
    const size_t D = op->D;
    if (!isfinite(*hi) || D == 1)
        return;
    if (is_pow2(D)) {
        const double h = *hi / (double)D, l = *lo / (double)D;
        if (h * (double)D == *hi && l * (double)D == *lo) {
            *hi = h;
            *lo = l;
            return;
        }
    }
    emu_mean_pair(hi, lo, D, op->s, op->q, op->r);
}

/* Row i's values x - mean[i], rounded to binary32, into op->buf. */
static void centre_row(const ln_op *op, size_t i)
{
    const float *x = op->x + i * op->D;
    const double mu = op->mean[i];
    for (size_t d = 0; d < op->D; d++)
        op->buf[d] = (float)((double)x[d] - mu);
}

/* The fast model's row sums of nr rows of D values (rows of x at stride
 * D): out[r] = sum over d of t(r, d) in binary64, d ascending, with t the
 * value x (kind 0), x y[d] (1), x y at row stride D (2), or c^2 with c =
 * x - mean[r] rounded to binary32 (3): as model_dot's fast loop forms each
 * sum, but eight rows at a time, so that eight independent chains of
 * additions overlap instead of one row's waiting on its latency. */
enum { ROWS = 8 };

static void fast_row_sums1(int kind, const float *x, const float *y,
                           const float *mean, size_t nr, size_t D, double *out)
{
    for (size_t r = 0; r < nr; r++) {
        const float *xr = x + r * D;
        double s = 0.0;
        for (size_t d = 0; d < D; d++) {
            if (kind == 0) {
                s += xr[d];
            } else if (kind == 3) {
                const float c = (float)((double)xr[d] - mean[r]);
                s += (double)c * c;
            } else {
                s += (double)xr[d] * y[kind == 2 ? r * D + d : d];
            }
        }
        out[r] = s;
    }
}

static void fast_row_sums(int kind, const float *x, const float *y,
                          const float *mean, size_t nr, size_t D, double *out)
{
    for (size_t r0 = 0; r0 < nr; r0 += ROWS) {
        if (nr - r0 < ROWS) { /* the last rows, one at a time */
            fast_row_sums1(kind, x + r0 * D, y ? y + (kind == 2 ? r0 * D : 0) : NULL,
                           mean ? mean + r0 : NULL, nr - r0, D, out + r0);
            break;
        }
        const size_t k = ROWS; /* a constant: the sums stay in registers */
        double s[ROWS] = { 0 };
        const float *xr = x + r0 * D;
        switch (kind) {
        case 0:
            for (size_t d = 0; d < D; d++)
                for (size_t r = 0; r < k; r++)
                    s[r] += xr[r * D + d];
            break;
        case 1:
            for (size_t d = 0; d < D; d++)
                for (size_t r = 0; r < k; r++)
                    s[r] += (double)xr[r * D + d] * y[d];
            break;
        case 2:
            for (size_t d = 0; d < D; d++)
                for (size_t r = 0; r < k; r++)
                    s[r] += (double)xr[r * D + d] * y[(r0 + r) * D + d];
            break;
        default:
            for (size_t d = 0; d < D; d++)
                for (size_t r = 0; r < k; r++) {
                    const float c = (float)((double)xr[r * D + d] - mean[r0 + r]);
                    s[r] += (double)c * c;
                }
            break;
        }
        memcpy(out + r0, s, k * sizeof *s);
    }
}

/* The reductions: mean and var per row; dbeta, dgamma per column. */
static int ln_sum_fill(const void *vop, size_t i0, size_t m, double *hi,
                       double *lo)
{
    const ln_op *op = vop;
    const size_t D = op->D, N = op->N;
    bool any = false;
    if (op->accum->kind == EMU_ACCUM_FAST &&
        (op->what == LN_MEAN || op->what == LN_VAR)) {
        fast_row_sums(op->what == LN_MEAN ? 0 : 3, op->x + i0 * D, NULL,
                      op->mean + i0, m, D, hi);
        for (size_t j = 0; j < m; j++) {
            lo[j] = 0.0;
            div_rows(op, &hi[j], &lo[j]);
            any |= lo[j] != 0.0;
        }
        return any;
    }
    for (size_t j = 0; j < m; j++) {
        const size_t i = i0 + j;
        switch (op->what) {
        case LN_MEAN:
            hi[j] = model_dot(op, op->x + i * D, 1, NULL, 0, D, i, &lo[j]);
            div_rows(op, &hi[j], &lo[j]);
            break;
        case LN_VAR:
            centre_row(op, i);
            hi[j] = model_dot(op, op->buf, 1, op->buf, 1, D, i, &lo[j]);
            div_rows(op, &hi[j], &lo[j]);
            break;
        case LN_DBETA:
            if (op->fs) {
                hi[j] = op->fs[i];
                lo[j] = 0.0;
            } else {
                hi[j] = model_dot(op, op->dy + i, (ptrdiff_t)D, NULL, 0, N, i,
                                  &lo[j]);
            }
            break;
        case LN_DGAMMA:
            if (op->fs) {
                hi[j] = op->fs[i];
                lo[j] = 0.0;
            } else {
                hi[j] = model_dot(op, op->dy + i, (ptrdiff_t)D, op->xh + i,
                                  (ptrdiff_t)D, N, i, &lo[j]);
            }
            break;
        }
        any |= lo[j] != 0.0;
    }
    return any;
}

/* exact = (x[i, d] - mean[i]) rstd[i] */
static void ref_xhat(const ln_op *op, size_t i, size_t d, mpfr_ptr t)
{
    mpfr_set_flt(t, op->x[i * op->D + d], MPFR_RNDN);
    mpfr_sub_d(t, t, op->mean[i], MPFR_RNDN);
    mpfr_mul_d(t, t, op->rstd[i], MPFR_RNDN);
}

static int ln_sum_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    const ln_op *op = vop;
    const size_t D = op->D;
    mpfr_t t;
    mpfr_init2(t, mpfr_get_prec(exact));
    mpfr_set_zero(exact, 1);
    if (op->what == LN_MEAN || op->what == LN_VAR) {
        for (size_t d = 0; d < D; d++) {
            mpfr_set_flt(t, op->x[i * D + d], MPFR_RNDN);
            if (op->what == LN_VAR) {
                /* the defined term: the binary32 centred value, squared */
                mpfr_set_flt(t, (float)((double)op->x[i * D + d] - op->mean[i]),
                             MPFR_RNDN);
                mpfr_sqr(t, t, MPFR_RNDN);
            }
            mpfr_add(exact, exact, t, MPFR_RNDN);
        }
        mpfr_div_ui(exact, exact, (unsigned long)D, MPFR_RNDN);
    } else {
        for (size_t r = 0; r < op->N; r++) {
            if (op->what == LN_DGAMMA) {
                /* the defined terms: dy times the binary32 xhat (formed
                 * here: the fast model keeps no xh array) */
                const float h = (float)(((double)op->x[r * D + i] - op->mean[r]) *
                                        op->rstd[r]);
                mpfr_set_flt(t, h, MPFR_RNDN);
                mpfr_mul_d(t, t, op->dy[r * D + i], MPFR_RNDN);
                mpfr_add(exact, exact, t, MPFR_RNDN);
            } else {
                mpfr_add_d(exact, exact, op->dy[r * D + i], MPFR_RNDN);
            }
        }
    }
    mpfr_clear(t);
    mpfr_set(src, exact, MPFR_RNDN); /* no separate sources */
    return 1;
}

static int rstd_fill(const void *vop, size_t i0, size_t m, double *hi,
                     double *lo)
{
    (void)lo;
    const ln_op *op = vop;
    for (size_t j = 0; j < m; j++)
        hi[j] = 1.0 / sqrt((double)op->var[i0 + j] + op->eps);
    return 0;
}

static int rstd_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const ln_op *op = vop;
    mpfr_set_flt(exact, op->var[i], MPFR_RNDN);
    mpfr_add_d(exact, exact, op->eps, MPFR_RNDN);
    mpfr_rec_sqrt(exact, exact, MPFR_RNDN);
    return 0;
}

/* Row segments, the per-row values hoisted and the NULL parameters
 * branches out of the inner loops, which the compiler vectorises (the
 * same operations in the same order per element; no contraction). */
#define LN_VECTORISE                                                        \
    __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic",   \
                            "fp-contract=off")))

LN_VECTORISE
static int y_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    (void)lo;
    const ln_op *op = vop;
    const size_t D = op->D;
    const float *ga = op->gamma, *be = op->beta;
    for (size_t j = 0; j < m;) {
        const size_t i = (i0 + j) / D, d0 = (i0 + j) % D;
        const size_t n = D - d0 < m - j ? D - d0 : m - j;
        const double mu = op->mean[i], rs = op->rstd[i];
        const float *x = op->x + i0 + j;
        double *h = hi + j;
        if (ga && be)
            for (size_t k = 0; k < n; k++)
                h[k] = ((double)x[k] - mu) * rs * ga[d0 + k] + be[d0 + k];
        else if (ga)
            for (size_t k = 0; k < n; k++)
                h[k] = ((double)x[k] - mu) * rs * ga[d0 + k];
        else if (be)
            for (size_t k = 0; k < n; k++)
                h[k] = ((double)x[k] - mu) * rs + be[d0 + k];
        else
            for (size_t k = 0; k < n; k++)
                h[k] = ((double)x[k] - mu) * rs;
        j += n;
    }
    return 0;
}

static int y_ref(const void *vop, size_t k, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const ln_op *op = vop;
    const size_t i = k / op->D, d = k % op->D;
    ref_xhat(op, i, d, exact);
    if (op->gamma)
        mpfr_mul_d(exact, exact, op->gamma[d], MPFR_RNDN);
    if (op->beta)
        mpfr_add_d(exact, exact, op->beta[d], MPFR_RNDN);
    return 0;
}

/* dx = rstd (dy gamma - S1 / D - xhat S2 / D), xhat in binary64. */
LN_VECTORISE
static int dx_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    (void)lo;
    const ln_op *op = vop;
    const size_t D = op->D;
    const double invD = 1.0 / (double)D;
    const float *ga = op->gamma;
    for (size_t j = 0; j < m;) {
        const size_t i = (i0 + j) / D, d0 = (i0 + j) % D;
        const size_t n = D - d0 < m - j ? D - d0 : m - j;
        const double mu = op->mean[i], rs = op->rstd[i];
        const double k1 = op->s1[i] * invD, k2 = op->s2[i] * invD;
        const float *x = op->x + i0 + j, *dy = op->dy + i0 + j;
        double *h = hi + j;
        if (ga)
            for (size_t k = 0; k < n; k++) {
                const double xh = ((double)x[k] - mu) * rs;
                h[k] = rs * ((double)dy[k] * ga[d0 + k] - k1 - xh * k2);
            }
        else
            for (size_t k = 0; k < n; k++) {
                const double xh = ((double)x[k] - mu) * rs;
                h[k] = rs * ((double)dy[k] - k1 - xh * k2);
            }
        j += n;
    }
    return 0;
}

static int dx_ref(const void *vop, size_t k, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const ln_op *op = vop;
    const size_t D = op->D, i = k / D, d = k % D;
    mpfr_t t;
    mpfr_init2(t, mpfr_get_prec(exact));
    ref_xhat(op, i, d, t);
    mpfr_mul_d(t, t, op->s2[i], MPFR_RNDN);
    mpfr_add_d(t, t, op->s1[i], MPFR_RNDN);
    mpfr_div_ui(t, t, (unsigned long)D, MPFR_RNDN); /* (S1 + xhat S2) / D */
    mpfr_set_flt(exact, op->dy[k], MPFR_RNDN);
    if (op->gamma)
        mpfr_mul_d(exact, exact, op->gamma[d], MPFR_RNDN);
    mpfr_sub(exact, exact, t, MPFR_RNDN);
    mpfr_mul_d(exact, exact, op->rstd[i], MPFR_RNDN);
    mpfr_clear(t);
    return 0;
}

static int check_ln_opts(emu_ctx *ctx, const char *site,
                         const emu_layernorm_opts *o)
{
    if (!o)
        return emu_ctx_fail(ctx, site, "layer-norm options: NULL");
    if (!(o->eps > 0.0) || !isfinite(o->eps))
        return emu_ctx_fail(ctx, site, "eps %g: must be positive and finite",
                            o->eps);
    return emu_check_accum(ctx, site, o->accum);
}

/* Outputs must not share storage with each other or with the inputs
 * (except y with x, and dx with dy: elementwise in place). */
static int check_disjoint(emu_ctx *ctx, const char *site,
                          const emu_tensor *const *outs, int n_out,
                          const emu_tensor *const *ins, int n_in,
                          const emu_tensor *inplace_out,
                          const emu_tensor *inplace_in)
{
    for (int a = 0; a < n_out; a++) {
        if (!outs[a])
            continue;
        for (int b = a + 1; b < n_out; b++)
            if (emu_tensors_overlap(outs[a], outs[b]))
                return emu_ctx_fail(ctx, site, "outputs '%s' and '%s' share "
                                    "storage", outs[a]->name, outs[b]->name);
        for (int b = 0; b < n_in; b++) {
            if (outs[a] == inplace_out && ins[b] == inplace_in &&
                outs[a]->data == ins[b]->data)
                continue;
            if (emu_tensors_overlap(outs[a], ins[b]))
                return emu_ctx_fail(ctx, site, "output '%s' shares storage "
                                    "with input '%s'", outs[a]->name,
                                    ins[b]->name);
        }
    }
    return 0;
}

int emu_t_layernorm(emu_ctx *ctx, const char *site, emu_tensor *y,
                    emu_tensor *mean, emu_tensor *rstd, const emu_tensor *x,
                    const emu_tensor *gamma, const emu_tensor *beta,
                    const emu_layernorm_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "layernorm";
    if (emu_check_rounding(ctx, site, rnd) || check_ln_opts(ctx, site, o) ||
        emu_check_tensor(ctx, site, "x", x))
        return -1;
    const size_t D = x->shape[x->ndim - 1], N = x->n / D;
    const emu_rounding *srnd = o->stat_rnd ? o->stat_rnd : rnd;
    if (emu_check_rounding(ctx, site, srnd) ||
        check_rows(ctx, site, "y", y, N, D) ||
        check_vec(ctx, site, "mean", mean, N, false) ||
        check_vec(ctx, site, "rstd", rstd, N, false) ||
        check_vec(ctx, site, "gamma", gamma, D, true) ||
        check_vec(ctx, site, "beta", beta, D, true))
        return -1;
    const emu_tensor *outs[] = { y, mean, rstd };
    const emu_tensor *ins[] = { x, gamma, beta };
    if (check_disjoint(ctx, site, outs, 3, ins, 3, y, x))
        return -1;

    char sub[EMU_TENSOR_NAME_MAX + 24];
    emu_tensor var;
    emu_error e;
    char vname[EMU_TENSOR_NAME_MAX]; /* the site's name, cut to fit */
    snprintf(vname, sizeof vname, "%.*s.var", EMU_TENSOR_NAME_MAX - 5, site);
    if (emu_tensor_alloc(&var, vname, rstd->role, &rstd->fmt, 1, &N, &e))
        return emu_ctx_failc(ctx, e.code, site, "%s", e.message);
    float *buf = malloc(D * sizeof *buf);
    if (!buf) {
        emu_tensor_free(&var);
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    }
    mpfr_t ms, mq, mr;
    mpfr_init2(ms, 1200);
    mpfr_inits2(106, mq, mr, (mpfr_ptr)0);
    const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP) &&
                       o->accum->kind != EMU_ACCUM_FAST;
    emu_accum_counts counts;
    ln_op op = { .N = N, .D = D, .x = x->data, .eps = o->eps,
                 .gamma = gamma ? gamma->data : NULL,
                 .beta = beta ? beta->data : NULL, .accum = o->accum,
                 .seed = ctx->seed, .counts = swamp ? &counts : NULL,
                 .buf = buf, .s = ms, .q = mq, .r = mr };
    /* mean, then var of the stored mean: the callbacks read x only */
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        snprintf(sub, sizeof sub, "%s.%s", site, k ? "var" : "mean");
        memset(&counts, 0, sizeof counts);
        op.what = k ? LN_VAR : LN_MEAN;
        op.mean = mean->data;
        op.stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
        emu_op_out oo = { .site = sub, .kind = k ? "ln_var" : "ln_mean",
                          .out = k ? &var : mean, .fill = ln_sum_fill,
                          .swamp = op.counts, .op = &op, .ref = ln_sum_ref,
                          .rnd = srnd, .store_early = true };
        rc = emu_commit_direct(ctx, &oo);
    }
    mpfr_clears(ms, mq, mr, (mpfr_ptr)0);
    free(buf);
    if (!rc) {
        snprintf(sub, sizeof sub, "%s.rstd", site);
        op.var = var.data;
        emu_op_out oo = { .site = sub, .kind = "ln_rstd", .out = rstd,
                          .fill = rstd_fill, .op = &op, .ref = rstd_ref,
                          .rnd = srnd, .store_early = true };
        rc = emu_commit_direct(ctx, &oo);
    }
    if (!rc) {
        op.rstd = rstd->data;
        emu_op_out oo = { .site = site, .kind = "layernorm", .out = y,
                          .fill = y_fill, .op = &op, .ref = y_ref, .rnd = rnd,
                          .store_early = emu_store_early_ok(y, x->data, x->n) };
        rc = emu_commit_direct(ctx, &oo);
    }
    emu_tensor_free(&var);
    return rc;
}

int emu_t_layernorm_backward(emu_ctx *ctx, const char *site, emu_tensor *dx,
                             emu_tensor *dgamma, emu_tensor *dbeta,
                             const emu_tensor *dy, const emu_tensor *x,
                             const emu_tensor *mean, const emu_tensor *rstd,
                             const emu_tensor *gamma,
                             const emu_layernorm_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "layernorm";
    if (emu_check_rounding(ctx, site, rnd) || check_ln_opts(ctx, site, o) ||
        emu_check_tensor(ctx, site, "x", x))
        return -1;
    const size_t D = x->shape[x->ndim - 1], N = x->n / D;
    const emu_rounding *prnd = o->param_grad_rnd ? o->param_grad_rnd : rnd;
    if (emu_check_rounding(ctx, site, prnd) ||
        check_rows(ctx, site, "dy", dy, N, D) ||
        check_rows(ctx, site, "dx", dx, N, D) ||
        check_vec(ctx, site, "mean", mean, N, false) ||
        check_vec(ctx, site, "rstd", rstd, N, false) ||
        check_vec(ctx, site, "gamma", gamma, D, true) ||
        check_vec(ctx, site, "dgamma", dgamma, D, true) ||
        check_vec(ctx, site, "dbeta", dbeta, D, true))
        return -1;
    const emu_tensor *outs[] = { dx, dgamma, dbeta };
    const emu_tensor *ins[] = { dy, x, mean, rstd, gamma };
    if (check_disjoint(ctx, site, outs, 3, ins, 5, dx, dy))
        return -1;

    /* xh = (x - mean) rstd rounded to binary32, and w = gamma xh rounded
     * to binary32 (the terms of dgamma and of S2); the sums' scratch. */
    const size_t ND = N * D;
    const bool fast = o->accum->kind == EMU_ACCUM_FAST;
    /* xh and w as terms: the emulated models only (the fast model forms
     * its sums in one pass below) */
    float *xh = fast ? NULL : malloc(2 * ND * sizeof *xh);
    double *sums = emu_scratch(ctx, site, 2 * N + 2 * D);
    if ((!fast && !xh) || !sums) {
        free(xh);
        free(sums);
        return sums ? emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for "
                                    "%zu values", 2 * ND)
                    : -1;
    }
    float *w = fast ? NULL : xh + ND;
    double *s1 = sums, *s2 = sums + N, *fs = sums + 2 * N;
    const float *xd = x->data, *gd = gamma ? gamma->data : NULL;
    if (fast) {
        /* One pass: the fast model's sums, each in its defined order in
         * binary64: the column sums of dy and dy xh (rows ascending) and
         * the row sums S1, S2 (columns ascending). */
        double *fb = fs, *fg = fs + D;
        memset(fs, 0, 2 * D * sizeof *fs);
        for (size_t i = 0; i < N; i++) {
            const double mu = mean->data[i], rs = rstd->data[i];
            const float *g = dy->data + i * D, *xr = xd + i * D;
            double a1 = 0.0, a2 = 0.0;
            for (size_t d = 0; d < D; d++) {
                const float h = (float)(((double)xr[d] - mu) * rs);
                const float wv = gd ? (float)((double)gd[d] * h) : h;
                fb[d] += g[d];
                fg[d] += (double)g[d] * h;
                a1 += gd ? (double)g[d] * gd[d] : (double)g[d];
                a2 += (double)g[d] * wv;
            }
            s1[i] = a1;
            s2[i] = a2;
        }
    } else {
        for (size_t i = 0; i < N; i++) {
            const double mu = mean->data[i], rs = rstd->data[i];
            for (size_t d = 0; d < D; d++) {
                const float h = (float)(((double)xd[i * D + d] - mu) * rs);
                xh[i * D + d] = h;
                w[i * D + d] = gd ? (float)((double)gd[d] * h) : h;
            }
        }
    }
    const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP) && !fast;
    emu_accum_counts counts;
    ln_op op = { .N = N, .D = D, .x = xd, .mean = mean->data,
                 .rstd = rstd->data, .gamma = gd, .dy = dy->data, .xh = xh,
                 .eps = o->eps, .accum = o->accum, .seed = ctx->seed,
                 .counts = swamp ? &counts : NULL };
    char sub[EMU_TENSOR_NAME_MAX + 24];
    int rc = 0;
    emu_tensor *pouts[2] = { dgamma, dbeta };
    for (int k = 0; k < 2 && !rc; k++) {
        if (!pouts[k])
            continue;
        snprintf(sub, sizeof sub, "%s.%s", site, k ? "dbias" : "dweight");
        memset(&counts, 0, sizeof counts);
        op.what = k ? LN_DBETA : LN_DGAMMA;
        op.fs = fast ? fs + (k ? 0 : D) : NULL;
        op.stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
        emu_op_out oo = { .site = sub, .kind = k ? "ln_dbeta" : "ln_dgamma",
                          .out = pouts[k], .fill = ln_sum_fill,
                          .swamp = op.counts, .op = &op, .ref = ln_sum_ref,
                          .rnd = prnd, .store_early = true };
        rc = emu_commit_direct(ctx, &oo);
    }
    if (!rc) {
        /* S1 = sum dy gamma, S2 = sum dy w per row: dot products 2i and
         * 2i + 1 of the dinput commit, their swamping counted there */
        memset(&counts, 0, sizeof counts);
        op.stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
        for (size_t i = 0; i < N && !fast; i++) { /* fast: done above */
            double lo;
            const float *g = dy->data + i * D;
            s1[i] = model_dot(&op, g, 1, gd, 1, D, 2 * i, &lo);
            s1[i] += lo;
            s2[i] = model_dot(&op, g, 1, w + i * D, 1, D, 2 * i + 1, &lo);
            s2[i] += lo;
        }
        snprintf(sub, sizeof sub, "%s.dinput", site);
        op.s1 = s1;
        op.s2 = s2;
        emu_op_out oo = { .site = sub, .kind = "layernorm_backward", .out = dx,
                          .fill = dx_fill, .swamp = op.counts, .op = &op,
                          .ref = dx_ref, .rnd = rnd,
                          .store_early = emu_store_early_ok(dx, dy->data, dy->n) };
        rc = emu_commit_direct(ctx, &oo);
    }
    free(xh);
    free(sums);
    return rc;
}
