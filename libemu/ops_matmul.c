/*
 * ops_matmul.c — matrix products (emu_t_matmul, emu_t_bmm).
 *
 * Called by the layers (linear forward and backward) and by users.  Each
 * output is one dot product formed by the options' accumulator model
 * through the GEMM engine (emu_gemm_accum_ex in accum_gemm.c), then rounded
 * once into the output's format, under the op's rounding, by the choke
 * point.  The fast model's products stay binary32 (emu_gemm_fast_f32) and
 * reach the choke point a chunk at a time (emu_gemm_src).  The MPFR reference of a sampled output is
 * mpfr_dot of the same row and column (plus the old output value when
 * accumulating), once from the op's inputs and once from their unquantized
 * sources, which is what splits the error into quantization, accumulation
 * and output rounding.
 *
 * Shapes (legend): A is (M, K), or (K, M) stored when trans_a; B is (K, N),
 * or (N, K) stored when trans_b; out is (M, N).  bmm prefixes a batch
 * dimension to all three.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

/* Stream of the accumulator roundings of the op about to commit: apart
 * from the output roundings' stream (README: the choke point, item 1). */
#define ACCUM_STREAM_TAG ((uint64_t)1 << 63)

typedef struct mm_op {
    size_t batch, M, N, K;
    const float *a, *b, *as, *bs;   /* inputs and sources (as/bs may be a/b) */
    const float *c;                 /* old output values, or NULL            */
    double alpha;                   /* output scale (emu_scale_pairs)        */
    double src_alpha;               /* the sources' reference scale          */
    ptrdiff_t a_rs, a_cs, b_rs, b_cs;
    mpfr_t *xa, *xb;                /* K + 1 terms each, binary32-exact     */
    mpfr_ptr *pa, *pb;
    emu_gemm_src out;               /* the fast model's products            */
    /* Set when an output is NaN (mm_nan_flags): which rows of A and which
     * columns of B, per batch entry, hold a NaN. */
    bool *row_nan, *col_nan;
} mm_op;

static int mm_fill(const void *op, size_t i0, size_t m, double *hi, double *lo)
{
    return emu_gemm_src_fill(&((const mm_op *)op)->out, i0, m, hi, lo);
}

static void mm_fill32(const void *op, size_t i0, size_t m, float *v)
{
    emu_gemm_src_fill32(&((const mm_op *)op)->out, i0, m, v);
}

static const float *a_elem(const mm_op *m, const float *a, size_t bt, size_t i,
                           size_t k)
{
    return a + bt * m->M * m->K + (ptrdiff_t)i * m->a_rs + (ptrdiff_t)k * m->a_cs;
}

static const float *b_elem(const mm_op *m, const float *b, size_t bt, size_t k,
                           size_t j)
{
    return b + bt * m->K * m->N + (ptrdiff_t)k * m->b_rs + (ptrdiff_t)j * m->b_cs;
}

/* alpha (row i of A . column j of B) + c[o], from a and b. */
static void mm_dot(const mm_op *m, size_t o, const float *a, const float *b,
                   double alpha, mpfr_ptr out)
{
    size_t bt = o / (m->M * m->N), ij = o % (m->M * m->N);
    size_t i = ij / m->N, j = ij % m->N;
    for (size_t k = 0; k < m->K; k++) {
        mpfr_set_flt(m->xa[k], *a_elem(m, a, bt, i, k), MPFR_RNDN);
        mpfr_set_flt(m->xb[k], *b_elem(m, b, bt, k, j), MPFR_RNDN);
    }
    mpfr_dot(out, m->pa, m->pb, m->K, MPFR_RNDN);
    mpfr_mul_d(out, out, alpha, MPFR_RNDN); /* exact, or 2^-256 close */
    if (m->c)
        mpfr_add_d(out, out, m->c[o], MPFR_RNDN);
}

static int mm_ref(const void *op, size_t o, mpfr_ptr exact, mpfr_ptr exact_src)
{
    const mm_op *m = op;
    mm_dot(m, o, m->a, m->b, m->alpha, exact);
    if (m->as == m->a && m->bs == m->b && m->src_alpha == m->alpha)
        mpfr_set(exact_src, exact, MPFR_RNDN);
    else
        mm_dot(m, o, m->as, m->bs, m->src_alpha, exact_src);
    return 1;
}

/* Output o's inputs held a NaN: its old value, or a term of its row of A
 * or its column of B (the flags mm_nan_flags set: the choke point asks
 * only for NaN outputs, and a diverged model's are all of them). */
static bool mm_inputs_had_nan(const void *op, size_t o)
{
    const mm_op *m = op;
    size_t bt = o / (m->M * m->N), ij = o % (m->M * m->N);
    size_t i = ij / m->N, j = ij % m->N;
    if (m->c && isnan(m->c[o]))
        return true;
    return m->row_nan[bt * m->M + i] || m->col_nan[bt * m->N + j];
}

/* The flags mm_inputs_had_nan reads: one pass over A and one over B, in
 * their storage order.  Returns 0, or -1 if out of memory.  *all: every
 * row of A holds a NaN (or every column of B), so that every output's
 * inputs did. */
static int mm_nan_flags(mm_op *m, bool *all)
{
    const size_t M = m->M, N = m->N, K = m->K;
    m->row_nan = calloc(m->batch * M + 1, sizeof *m->row_nan);
    m->col_nan = calloc(m->batch * N + 1, sizeof *m->col_nan);
    if (!m->row_nan || !m->col_nan)
        return -1;
    bool rows = true, cols = true;
    for (size_t bt = 0; bt < m->batch; bt++) {
        bool *r = m->row_nan + bt * M, *cn = m->col_nan + bt * N;
        if (m->a_cs == 1) {
            for (size_t i = 0; i < M; i++)
                r[i] = emu_any_nan(a_elem(m, m->a, bt, i, 0), K);
        } else { /* stored (K, M): row k of storage spans the M rows */
            for (size_t k = 0; k < K; k++) {
                const float *ak = a_elem(m, m->a, bt, 0, k);
                for (size_t i = 0; i < M; i++)
                    r[i] |= isnan(ak[i]) != 0;
            }
        }
        if (m->b_rs == 1) { /* stored (N, K): a column of B is contiguous */
            for (size_t j = 0; j < N; j++)
                cn[j] = emu_any_nan(b_elem(m, m->b, bt, 0, j), K);
        } else {
            for (size_t k = 0; k < K; k++) {
                const float *bk = b_elem(m, m->b, bt, k, 0);
                for (size_t j = 0; j < N; j++)
                    cn[j] |= isnan(bk[j]) != 0;
            }
        }
        for (size_t i = 0; i < M; i++)
            rows &= r[i];
        for (size_t j = 0; j < N; j++)
            cols &= cn[j];
    }
    *all = rows || cols;
    return 0;
}

/* The MPFR terms of the sampled references: nt binary32-exact values for
 * each operand (m->xa, m->xb) and the pointer arrays mpfr_dot takes. */
static void ref_terms_free(mm_op *m, size_t nt)
{
    for (size_t k = 0; m->xa && m->xb && k < nt; k++) {
        mpfr_clear(m->xa[k]);
        mpfr_clear(m->xb[k]);
    }
    free(m->xa);
    free(m->xb);
    free(m->pa);
    free(m->pb);
    m->xa = m->xb = NULL;
    m->pa = m->pb = NULL;
}

/* Returns 0, or -1 with nothing left allocated. */
static int ref_terms_alloc(mm_op *m, size_t nt)
{
    m->xa = malloc(nt * sizeof *m->xa);
    m->xb = malloc(nt * sizeof *m->xb);
    m->pa = malloc(nt * sizeof *m->pa);
    m->pb = malloc(nt * sizeof *m->pb);
    if (!m->xa || !m->xb || !m->pa || !m->pb) {
        free(m->xa);
        free(m->xb);
        free(m->pa);
        free(m->pb);
        m->xa = m->xb = NULL;
        m->pa = m->pb = NULL;
        return -1;
    }
    for (size_t k = 0; k < nt; k++) {
        mpfr_init2(m->xa[k], 24); /* binary32 values are exact */
        mpfr_init2(m->xb[k], 24);
        m->pa[k] = m->xa[k];
        m->pb[k] = m->xb[k];
    }
    return 0;
}

/* Checks and shapes common to matmul (nd = 2) and bmm (nd = 3). */
static int mm_check(emu_ctx *ctx, const char *site, int nd, emu_tensor *out,
                    const emu_tensor *a, const emu_tensor *b,
                    const emu_matmul_opts *o, mm_op *m)
{
    if (!o)
        return emu_ctx_fail(ctx, site, "matmul options: NULL (they name "
                            "the accumulator model)");
    if (emu_check_accum(ctx, site, o->accum) ||
        emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "a", a) ||
        emu_check_tensor(ctx, site, "b", b))
        return -1;
    const emu_tensor *ts[3] = { out, a, b };
    const char *names[3] = { "out", "a", "b" };
    for (int t = 0; t < 3; t++)
        if (ts[t]->ndim != nd)
            return emu_ctx_fail(ctx, site, "%s '%s' has %d dimensions, "
                                "expected %d", names[t], ts[t]->name,
                                ts[t]->ndim, nd);
    int d = nd - 2; /* first matrix dimension */
    size_t batch = nd == 3 ? out->shape[0] : 1;
    if (nd == 3 && (a->shape[0] != batch || b->shape[0] != batch))
        return emu_ctx_fail(ctx, site, "batch sizes differ: out %zu, a %zu, "
                            "b %zu", batch, a->shape[0], b->shape[0]);
    size_t M = o->trans_a ? a->shape[d + 1] : a->shape[d];
    size_t K = o->trans_a ? a->shape[d] : a->shape[d + 1];
    size_t Kb = o->trans_b ? b->shape[d + 1] : b->shape[d];
    size_t N = o->trans_b ? b->shape[d] : b->shape[d + 1];
    if (K != Kb)
        return emu_ctx_fail(ctx, site, "shape mismatch: op(a) of '%s' is "
                            "(%zu, %zu) but op(b) of '%s' is (%zu, %zu)",
                            a->name, M, K, b->name, Kb, N);
    if (out->shape[d] != M || out->shape[d + 1] != N)
        return emu_ctx_fail(ctx, site, "shape mismatch: out '%s' is (%zu, "
                            "%zu), the product is (%zu, %zu)", out->name,
                            out->shape[d], out->shape[d + 1], M, N);
    if (o->a_src && (emu_check_tensor(ctx, site, "a_src", o->a_src) ||
                     emu_check_same_shape(ctx, site, "a", a, "a_src", o->a_src)))
        return -1;
    if (o->b_src && (emu_check_tensor(ctx, site, "b_src", o->b_src) ||
                     emu_check_same_shape(ctx, site, "b", b, "b_src", o->b_src)))
        return -1;
    if (emu_tensors_overlap(out, a) || emu_tensors_overlap(out, b) ||
        emu_tensors_overlap(out, o->a_src) || emu_tensors_overlap(out, o->b_src))
        return emu_ctx_fail(ctx, site, "out '%s' shares storage with an "
                            "input (a product cannot be formed in place)",
                            out->name);
    double alpha = o->alpha == 0.0 ? 1.0 : o->alpha;
    if (!(alpha > 0.0) || !isfinite(alpha))
        return emu_ctx_fail(ctx, site, "alpha %g is not positive and finite",
                            o->alpha);
    if (o->accumulate && !emu_is_pow2(alpha))
        return emu_ctx_fail(ctx, site, "alpha %g with accumulate: the old "
                            "output would be divided by it inexactly (a power "
                            "of two only)", o->alpha);
    if (!(o->src_alpha >= 0.0) || !isfinite(o->src_alpha))
        return emu_ctx_fail(ctx, site, "src_alpha %g is not 0 or positive "
                            "and finite", o->src_alpha);
    memset(m, 0, sizeof *m);
    m->alpha = alpha;
    m->src_alpha = o->src_alpha == 0.0 ? alpha : o->src_alpha;
    m->batch = batch;
    m->M = M;
    m->N = N;
    m->K = K;
    m->a = a->data;
    m->b = b->data;
    m->as = o->a_src ? o->a_src->data : a->data;
    m->bs = o->b_src ? o->b_src->data : b->data;
    m->a_rs = o->trans_a ? 1 : (ptrdiff_t)K;
    m->a_cs = o->trans_a ? (ptrdiff_t)M : 1;
    m->b_rs = o->trans_b ? 1 : (ptrdiff_t)N;
    m->b_cs = o->trans_b ? (ptrdiff_t)K : 1;
    return 0;
}

static int mm_run(emu_ctx *ctx, const char *site, const char *kind, int nd,
                  emu_tensor *out, const emu_tensor *a, const emu_tensor *b,
                  const emu_matmul_opts *o, const emu_rounding *rnd)
{
    mm_op m;
    if (emu_check_rounding(ctx, site, rnd) ||
        mm_check(ctx, site, nd, out, a, b, o, &m))
        return -1;

    const emu_accum *model = o->accum;
    const size_t n = out->n, mn = m.M * m.N;
    const bool exact = model->kind == EMU_ACCUM_EXACT;
    /* The fast model's products are binary32 values: formed in out itself
     * and handed to the choke point a chunk at a time (scaled by alpha
     * there), which reads each chunk before it stores the chunk's results
     * over it, with no array of doubles and, into binary32 under an
     * identity rounding, nothing to round.  (No callback reads out: the
     * reference reads the inputs and the old values, copied in c.)  The
     * other models' values come from the engine as arrays (a dot product
     * each, far more work than a pass). */
    const bool fast = model->kind == EMU_ACCUM_FAST;
    const bool pairs = !fast && (exact || !emu_is_pow2(m.alpha));
    double *hi = NULL, *lo = NULL;
    float *p32 = NULL;
    if (fast) {
        p32 = out->data;
    } else {
        hi = emu_scratch(ctx, site, n);
        lo = pairs && hi ? emu_scratch(ctx, site, n) : NULL;
        if (!hi || (pairs && !lo)) {
            free(hi);
            return -1;
        }
    }
    /* Accumulating: the old values (for the reference) and where the
     * accumulator starts, out / alpha (exact in binary64). */
    float *c = NULL;
    double *c0 = NULL;
    if (o->accumulate) {
        c = malloc(n * sizeof *c);
        c0 = c ? emu_scratch(ctx, site, n) : NULL;
        if (c && c0) {
            memcpy(c, out->data, n * sizeof *c);
            for (size_t i = 0; i < n; i++)
                c0[i] = (double)c[i] / m.alpha;
        } else if (!c) {
            emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for %zu values", n);
        }
        if (!c || !c0) {
            free(hi);
            free(lo);
            free(c);
            free(c0);
            return -1;
        }
    }
    m.c = c;

    const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP);
    emu_accum_counts counts;
    memset(&counts, 0, sizeof counts);
    const uint64_t stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
    int rc = 0;
    bool out_nan = false; /* the fast model's: a NaN among the products */
    for (size_t bt = 0; bt < m.batch && rc == 0; bt++) {
        const float *ab = m.a + bt * m.M * m.K, *bb = m.b + bt * m.K * m.N;
        const double *cb = c0 ? c0 + bt * mn : NULL;
        bool bt_nan = false;
        rc = fast ? emu_gemm_fast_f32_mt_nan(m.M, m.N, m.K, ab, m.a_rs,
                                             m.a_cs, bb, m.b_rs, m.b_cs, cb,
                                             p32 + bt * mn, ctx->threads,
                                             &bt_nan)
                  : emu_gemm_accum_ex(model, m.M, m.N, m.K, ab, m.a_rs,
                                      m.a_cs, bb, m.b_rs, m.b_cs, cb,
                                      hi + bt * mn, exact ? lo + bt * mn : NULL,
                                      ctx->seed, stream, bt * mn,
                                      swamp ? &counts : NULL, ctx->threads);
        out_nan |= bt_nan;
    }
    free(c0);
    if (rc) {
        free(hi);
        free(lo);
        free(c);
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory in the GEMM engine");
    }
    if (!fast)
        emu_scale_pairs(hi, lo, exact, n, m.alpha);

    /* MPFR terms for the sampled references, only if sampling is on. */
    const bool ref = ctx->stats && (ctx->measure & EMU_MEASURE_REF) &&
                     ctx->ref_rate > 0.0;
    const size_t nt = m.K + 1;
    if (ref && ref_terms_alloc(&m, nt)) {
        free(hi);
        free(lo);
        free(c);
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for the reference");
    }

    /* NaN outputs: their inputs' NaNs from flags per row and column, or,
     * when every output's inputs held one, no question asked. */
    bool all_nan = false;
    if ((fast ? out_nan : emu_any_nan64(hi, n)) &&
        mm_nan_flags(&m, &all_nan)) {
        rc = emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for %zu "
                           "NaN flags", m.batch * (m.M + m.N));
        goto done;
    }
    emu_op_out oo = { .site = site, .kind = kind, .out = out, .hi = hi,
                      .lo = lo, .swamp = swamp ? &counts : NULL, .op = &m,
                      .ref = mm_ref,
                      .inputs_had_nan = all_nan ? NULL : mm_inputs_had_nan,
                      .rnd = rnd,
                      /* no input shares out's storage (mm_check); the
                       * old values the reference reads are copied in c */
                      .store_early = true, .parallel = true };
    if (fast) {
        m.out = (emu_gemm_src){ .f = p32, .alpha = m.alpha };
        if (emu_gemm_src_f32(&m.out))
            oo.fill32 = mm_fill32;
        else
            oo.fill = mm_fill;
    }
    rc = emu_commit(ctx, &oo);
done:
    if (ref)
        ref_terms_free(&m, nt);
    free(m.row_nan);
    free(m.col_nan);
    free(hi);
    free(lo);
    free(c);
    return rc;
}

int emu_t_matmul(emu_ctx *ctx, const char *site, emu_tensor *out,
                 const emu_tensor *a, const emu_tensor *b,
                 const emu_matmul_opts *opts, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    return mm_run(ctx, site, "matmul", 2, out, a, b, opts, rnd);
}

int emu_t_bmm(emu_ctx *ctx, const char *site, emu_tensor *out,
              const emu_tensor *a, const emu_tensor *b,
              const emu_matmul_opts *opts, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    return mm_run(ctx, site, "bmm", 3, out, a, b, opts, rnd);
}
