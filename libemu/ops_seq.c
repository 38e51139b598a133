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
 *   <site>.dinput     dx = rstd (dy gamma - S1 / D - xh S2 / D) in
 *                     binary64, S1 = sum over d of dy gamma (exact
 *                     products) and S2 = sum of dy w, w = gamma xh
 *                     rounded to binary32 (xh without gamma), each under
 *                     the model (dot products 2i and 2i + 1; their
 *                     swamping is counted at this site), as the
 *                     accumulator left them
 * The fast model sums in binary64 (exact products of binary32 values): as
 * fast as a binary32 loop at these lengths and below binary32's rounding of
 * the result (batch norm's reason, ops_norm.c).
 * The MPFR references: exact sums (mean, var of the stored values,
 * dgamma, dbeta, dtable), exact evaluations of rstd, y and dx from the
 * stored statistics and the accumulators' S1, S2 (as ops_norm.c's dx).
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
        if (o->accumulate)
            for (size_t k = 0; k < V * D; k++)
                fast[k] = dtable->data[k];
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
    int rc = emu_commit(ctx, &oo);
    free(op.buf);
    free(fast);
    free(start);
    return rc;
}

/* ---- layer norm (not yet: the next commit) ----------------------------------- */

int emu_t_layernorm(emu_ctx *ctx, const char *site, emu_tensor *y,
                    emu_tensor *mean, emu_tensor *rstd, const emu_tensor *x,
                    const emu_tensor *gamma, const emu_tensor *beta,
                    const emu_layernorm_opts *o, const emu_rounding *rnd)
{
    (void)y, (void)mean, (void)rstd, (void)x, (void)gamma, (void)beta, (void)o,
        (void)rnd;
    return emu_ctx_failc(ctx, EMU_EUNSUPPORTED, site ? site : "layernorm",
                         "layer norm is not implemented yet");
}

int emu_t_layernorm_backward(emu_ctx *ctx, const char *site, emu_tensor *dx,
                             emu_tensor *dgamma, emu_tensor *dbeta,
                             const emu_tensor *dy, const emu_tensor *x,
                             const emu_tensor *mean, const emu_tensor *rstd,
                             const emu_tensor *gamma,
                             const emu_layernorm_opts *o, const emu_rounding *rnd)
{
    (void)dx, (void)dgamma, (void)dbeta, (void)dy, (void)x, (void)mean,
        (void)rstd, (void)gamma, (void)o, (void)rnd;
    return emu_ctx_failc(ctx, EMU_EUNSUPPORTED, site ? site : "layernorm",
                         "layer norm is not implemented yet");
}
