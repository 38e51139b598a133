/*
 * ops_reduce.c — reductions along one axis or over a whole tensor
 * (emu_t_reduce: sum, mean, max, sum of squares).
 *
 * Called by the losses, the bias gradients and users.  Sums and sums of
 * squares are dot products under the op's accumulator model
 * (emu_accum_dot: terms x_i, or x_i * x_i), so the accumulator model, its
 * stochastic words and its swamping counts are those of matmul.  The mean is the accumulator's sum
 * divided by the count with one rounding: the quotient is formed in MPFR,
 * rounded to odd at 106 bits and handed to the choke point as an exact
 * pair, which rounds it into the output format as the exact quotient
 * would be (round-to-odd with >= p + 2 bits; accum_internal.h).  The maximum is
 * exact (IEEE 754-2019 maximum: NaN if any element is NaN, +0 > -0).
 *
 * Shapes: x is (d0, ..., d_{n-1}); the output drops dimension `axis`, or
 * keeps it with size 1; axis = -1 reduces everything to one element.
 * Element k of output o lies at x[outer * (len * inner) + k * inner + in]
 * with o = outer * inner + in.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

#define ACCUM_STREAM_TAG ((uint64_t)1 << 63)

static const char *const reduce_names[EMU_REDUCE_COUNT] = {
    [EMU_REDUCE_SUM] = "sum", [EMU_REDUCE_MEAN] = "mean",
    [EMU_REDUCE_MAX] = "max", [EMU_REDUCE_SUMSQ] = "sumsq",
};

typedef struct red_op {
    const float *x;
    emu_reduce r;
    size_t len, inner;
    mpfr_t *t;         /* len terms, binary32-exact */
    mpfr_ptr *pt;
    /* the producer's: the model, its words, swamping, the mean's MPFR */
    const emu_accum *accum;
    uint64_t seed, stream;
    emu_accum_counts *counts;   /* NULL: not counted */
    mpfr_ptr s, q, rem;
} red_op;

static const float *first_of(const red_op *m, size_t o)
{
    size_t outer = o / m->inner, in = o % m->inner;
    return m->x + outer * m->len * m->inner + in;
}

static int red_ref(const void *op, size_t o, mpfr_ptr exact, mpfr_ptr exact_src)
{
    const red_op *m = op;
    const float *x = first_of(m, o);
    if (m->r == EMU_REDUCE_MAX) {
        double v = x[0];
        for (size_t k = 1; k < m->len; k++) {
            double y = x[k * m->inner];
            if (isnan(v) || isnan(y))
                v = NAN;
            else if (y > v || (y == 0.0 && v == 0.0 && !signbit(y)))
                v = y;
        }
        mpfr_set_d(exact, v, MPFR_RNDN);
        return 0;
    }
    for (size_t k = 0; k < m->len; k++)
        mpfr_set_flt(m->t[k], x[k * m->inner], MPFR_RNDN);
    if (m->r == EMU_REDUCE_SUMSQ)
        mpfr_dot(exact, m->pt, m->pt, m->len, MPFR_RNDN);
    else
        mpfr_sum(exact, m->pt, m->len, MPFR_RNDN);
    if (m->r == EMU_REDUCE_MEAN)
        mpfr_div_ui(exact, exact, m->len, MPFR_RNDN);
    /* No separate sources: the inputs are the sources. */
    mpfr_set(exact_src, exact, MPFR_RNDN);
    return 1;
}

static bool red_inputs_had_nan(const void *op, size_t o)
{
    const red_op *m = op;
    const float *x = first_of(m, o);
    for (size_t k = 0; k < m->len; k++)
        if (isnan(x[k * m->inner]))
            return true;
    return false;
}

/* (hi + lo) / n as a pair that rounds like the exact quotient: MPFR's
 * quotient rounded to odd at 106 bits, split exactly into two doubles.
 * s (1200 bits), q and r (106 bits) are the caller's temporaries. */
void emu_mean_pair(double *hi, double *lo, size_t n, mpfr_ptr s,
                      mpfr_ptr q, mpfr_ptr r)
{
    if (!isfinite(*hi) || n == 1) {
        return; /* inf / n = inf; NaN stays NaN; n = 1: the sum itself */
    }
    /* s = hi + lo exactly: the pair spans at most the accumulator's range
     * (2^-350 .. 2^320), well inside s's precision. */
    mpfr_set_d(s, *hi, MPFR_RNDN);
    mpfr_add_d(s, s, *lo, MPFR_RNDN);
    int t = mpfr_div_ui(q, s, (unsigned long)n, MPFR_RNDZ);
    if (t != 0 && mpfr_min_prec(q) < mpfr_get_prec(q)) {
        /* Inexact with an even last bit: round to odd, away from zero. */
        if (mpfr_sgn(q) > 0)
            mpfr_nextabove(q);
        else
            mpfr_nextbelow(q);
    }
    double h = mpfr_get_d(q, MPFR_RNDN);
    mpfr_sub_d(r, q, h, MPFR_RNDN); /* exact: at most 53 bits remain */
    *hi = h;
    *lo = mpfr_get_d(r, MPFR_RNDN);
    if (h == 0.0)
        *lo = 0.0;
}

/* emu_op_out.fill: outputs i0 .. i0+m-1, each its own dot product (its
 * accumulator words numbered by the output, so the chunking changes
 * nothing), formed while the choke point rounds the chunk.  Low parts
 * only where the value needs one (the mean, the exact model). */
static int red_fill(const void *opv, size_t i0, size_t m, double *hi,
                    double *lo)
{
    const red_op *op = opv;
    const emu_reduce r = op->r;
    const size_t len = op->len;
    const ptrdiff_t inc = (ptrdiff_t)op->inner;
    const bool need_lo = r == EMU_REDUCE_MEAN ||
                         (r != EMU_REDUCE_MAX &&
                          op->accum->kind == EMU_ACCUM_EXACT);
    if (r == EMU_REDUCE_SUM && op->accum->kind == EMU_ACCUM_FAST &&
        op->inner > 1) {
        /* The fast model's sum is a binary32 sum in order (accum_ref.c's
         * dot_fast): along an inner axis (a bias gradient's column sums)
         * a run of neighbouring outputs is summed row by row, each in its
         * own order, instead of one strided walk over x per output. */
        enum { COLS = 256 };
        for (size_t j = 0; j < m;) {
            const size_t o = i0 + j, in = o % op->inner;
            size_t run = op->inner - in < m - j ? op->inner - in : m - j;
            run = run < COLS ? run : COLS;
            const float *p = first_of(op, o);
            float s[COLS];
            for (size_t c = 0; c < run; c++)
                s[c] = 0.0f;
            for (size_t k = 0; k < len; k++) {
                const float *row = p + (ptrdiff_t)k * inc;
                for (size_t c = 0; c < run; c++)
                    s[c] = s[c] + row[c];
            }
            for (size_t c = 0; c < run; c++)
                hi[j + c] = s[c];
            j += run;
        }
        return 0;
    }
    for (size_t j = 0; j < m; j++) {
        const size_t o = i0 + j;
        const float *p = first_of(op, o);
        if (r == EMU_REDUCE_MAX) {
            double v = p[0];
            for (size_t k = 1; k < len; k++) {
                double y = p[(ptrdiff_t)k * inc];
                if (isnan(v) || isnan(y))
                    v = NAN;
                else if (y > v || (y == 0.0 && v == 0.0 && !signbit(y)))
                    v = y;
            }
            hi[j] = v;
            continue;
        }
        emu_accum_rng rng = { op->seed, op->stream, o };
        hi[j] = emu_accum_dot_unguarded(op->accum, p, inc,
                                        r == EMU_REDUCE_SUMSQ ? p : NULL, inc,
                                        len, &rng, op->counts,
                                        need_lo ? &lo[j] : NULL);
        if (r == EMU_REDUCE_MEAN)
            emu_mean_pair(&hi[j], &lo[j], len, op->s, op->q, op->rem);
    }
    return need_lo;
}

int emu_t_reduce(emu_ctx *ctx, const char *site, emu_tensor *out,
                 const emu_tensor *x, emu_reduce r, int axis,
                 const emu_accum *accum, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "x", x))
        return -1;
    if ((unsigned)r >= EMU_REDUCE_COUNT)
        return emu_ctx_fail(ctx, site, "unknown reduction %d", (int)r);
    if (axis < -1 || axis >= x->ndim)
        return emu_ctx_fail(ctx, site, "axis %d is not -1 or a dimension of "
                            "'%s' (0..%d)", axis, x->name, x->ndim - 1);
    size_t len = x->n, inner = 1;
    if (axis >= 0) {
        len = x->shape[axis];
        for (int d = axis + 1; d < x->ndim; d++)
            inner *= x->shape[d];
    }
    /* The output's shape: x's without the axis (a 1-element tensor when
     * nothing is left), or x's with the axis of size 1. */
    bool ok;
    if (axis < 0) {
        ok = out->n == 1;
    } else {
        size_t dropped[EMU_TENSOR_MAX_DIMS];
        int nd = 0;
        for (int d = 0; d < x->ndim; d++)
            if (d != axis)
                dropped[nd++] = x->shape[d];
        ok = nd == 0 ? out->n == 1 : out->ndim == nd;
        for (int d = 0; ok && nd > 0 && d < nd; d++)
            ok = out->shape[d] == dropped[d];
        if (!ok && out->ndim == x->ndim) {
            ok = true;
            for (int d = 0; d < x->ndim; d++)
                ok = ok && out->shape[d] == (d == axis ? 1 : x->shape[d]);
        }
    }
    if (!ok) {
        char sx[96], so[96];
        emu_tensor_shape_string(x, sx, sizeof sx);
        emu_tensor_shape_string(out, so, sizeof so);
        return emu_ctx_fail(ctx, site, "shape mismatch: reducing '%s' %s "
                            "along axis %d cannot give out '%s' %s", x->name,
                            sx, axis, out->name, so);
    }
    if (r != EMU_REDUCE_MAX && emu_check_accum(ctx, site, accum))
        return -1;

    red_op m = { .x = x->data, .r = r, .len = len, .inner = inner,
                 .accum = accum, .seed = ctx->seed };
    float *xs = NULL;
    if (emu_tensors_overlap(out, x)) {
        /* In place (a 1-element x reduced into itself): the producer and
         * the reference must still see the input. */
        xs = malloc(x->n * sizeof *xs);
        if (!xs)
            return emu_ctx_failc(ctx, EMU_ENOMEM, site,
                                 "out of memory for %zu values", x->n);
        memcpy(xs, x->data, x->n * sizeof *xs);
        m.x = xs;
    }

    const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP);
    emu_accum_counts counts;
    memset(&counts, 0, sizeof counts);
    if (swamp && r != EMU_REDUCE_MAX)
        m.counts = &counts;
    m.stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
    mpfr_t s, q, rem;
    if (r == EMU_REDUCE_MEAN) {
        mpfr_inits2(1200, s, (mpfr_ptr)0);
        mpfr_inits2(106, q, rem, (mpfr_ptr)0);
        m.s = s;
        m.q = q;
        m.rem = rem;
    }

    const bool ref = ctx->stats && (ctx->measure & EMU_MEASURE_REF) &&
                     ctx->ref_rate > 0.0 && r != EMU_REDUCE_MAX;
    if (ref) {
        m.t = malloc(len * sizeof *m.t);
        m.pt = malloc(len * sizeof *m.pt);
        if (!m.t || !m.pt) {
            free(m.t);
            free(m.pt);
            if (r == EMU_REDUCE_MEAN)
                mpfr_clears(s, q, rem, (mpfr_ptr)0);
            free(xs);
            return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for the reference");
        }
        for (size_t k = 0; k < len; k++) {
            mpfr_init2(m.t[k], 24);
            m.pt[k] = m.t[k];
        }
    }
    /* The producer adds its chunks' swamping to counts, which the choke
     * point reads after the last chunk.  The callbacks read only x (a
     * copy if it shares out's storage): chunks are stored early. */
    emu_op_out oo = { .site = site, .kind = reduce_names[r], .out = out,
                      .fill = red_fill, .swamp = m.counts,
                      .op = &m, .ref = red_ref,
                      .inputs_had_nan = red_inputs_had_nan, .rnd = rnd,
                      .store_early = true };
    int rc = emu_commit(ctx, &oo);
    if (ref) {
        for (size_t k = 0; k < len; k++)
            mpfr_clear(m.t[k]);
        free(m.t);
        free(m.pt);
    }
    if (r == EMU_REDUCE_MEAN)
        mpfr_clears(s, q, rem, (mpfr_ptr)0);
    free(xs);
    return rc;
}
