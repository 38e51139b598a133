/*
 * ops_scaled.c — scaled formats as ops: quantization that reports to the
 * statistics, and matmul with block-scaled operands.
 *
 * The matmul needs no engine of its own.  Without their tensor scales, the
 * operands' values e * s are binary32 numbers (emu_scaled_dequantize
 * checks it), so the terms (e_a s_a)(e_b s_b) are exactly the products the
 * GEMM engine forms from two binary32 tensors holding them; the tensor
 * scales join alpha, which the matmul applies without error before its one
 * rounding.  Every accumulator model, the swamping counts and the MPFR
 * error split then come from emu_t_matmul unchanged.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/scaled.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

static int same_shape(const emu_scaled_tensor *q, const emu_tensor *x)
{
    if (q->ndim != x->ndim)
        return 0;
    for (int d = 0; d < q->ndim; d++)
        if (q->shape[d] != x->shape[d])
            return 0;
    return 1;
}

/* The unit in the last place of the element format at scaled value y:
 * 2^(max(emin, min(emax, floor(log2 |y|))) - mbits), by exponent bits
 * (y is a normal binary64, or zero). */
static double elem_ulp(const emu_format *f, double y)
{
    uint64_t u;
    memcpy(&u, &y, sizeof u);
    int x = (int)((u >> 52) & 0x7ff) - 1023;
    if (y == 0.0 || x < f->emin)
        x = f->emin;
    if (x > f->emax)
        x = f->emax;
    const uint64_t p = (uint64_t)(x - f->mbits + 1023) << 52;
    double d;
    memcpy(&d, &p, sizeof d);
    return d;
}

int emu_t_quantize_scaled(emu_ctx *ctx, const char *site,
                          emu_scaled_tensor *q, const emu_tensor *x,
                          const emu_quant_opts *o, emu_quant_counts *counts)
{
    EMU_HOSTFP_GUARD;
    if (emu_check_tensor(ctx, site, "x", x))
        return -1;
    if (!q || !q->elem)
        return emu_ctx_fail(ctx, site, "scaled tensor not allocated");
    if (!same_shape(q, x))
        return emu_shape_fail(ctx, site, "x", x, "the scaled tensor's shape");
    emu_quant_opts qo;
    memset(&qo, 0, sizeof qo);
    if (o)
        qo.tensor_scale = o->tensor_scale;
    qo.mode = ctx->rnd.mode;
    qo.sr_bits = ctx->rnd.sr_bits;
    qo.seed = ctx->seed;
    qo.stream = emu_ctx_stream(ctx);
    /* The per-element statistics cost as much as the quantization: taken
     * only for a statistics site or a caller who asks.  The site needs this
     * call's counts alone; the caller's accumulate. */
    const bool site_stats = ctx->stats && (ctx->measure & EMU_MEASURE_ALL);
    emu_quant_counts c;
    memset(&c, 0, sizeof c);
    emu_error e;
    if (emu_scaled_quantize(q, x->data, &qo, site_stats ? &c : counts, NULL,
                            &e))
        return emu_ctx_fail(ctx, site, "%s%s%s", e.key, e.key[0] ? ": " : "",
                            e.message);
    ctx->op_index++;
    if (!site_stats)
        return 0;
    if (counts) {
        counts->n += c.n;
        counts->blocks += c.blocks;
        counts->clipped += c.clipped;
        counts->flushed += c.flushed;
        counts->inexact += c.inexact;
        counts->nonfinite_blocks += c.nonfinite_blocks;
        counts->scale_clamped += c.scale_clamped;
        counts->err_sq += c.err_sq;
        counts->ref_sq += c.ref_sq;
        counts->err_max = c.err_max > counts->err_max ? c.err_max
                                                      : counts->err_max;
        for (int b = 0; b < EMU_HIST_BINS; b++)
            counts->scale_hist[b] += c.scale_hist[b];
    }
    /* The site shows the scaled format's name ("mxfp8"), not the
     * element format's. */
    emu_format named = q->sf.elem;
    snprintf(named.name, sizeof named.name, "%s", q->sf.name);
    emu_site *st = emu_stats_site(ctx->stats, site, "quantize", x->role,
                                  &named);
    if (!st)
        return emu_ctx_fail(ctx, site, "out of memory for statistics");
    emu_site_stats s;
    memset(&s, 0, sizeof s);
    s.results = c.n;
    s.inexact = c.inexact;
    s.to_zero = c.flushed;
    s.overflow = c.clipped;
    const bool hist = ctx->measure & EMU_MEASURE_HIST;
    const bool ref = ctx->measure & EMU_MEASURE_REF;
    const double g = q->tensor_scale;
    if (hist)
        for (size_t b = 0; b < q->nblocks; b++) {
            const double sb = q->sf.block_scaled ? q->scale[b] : 1.0;
            if (!isnan(sb))
                s.hist_scale[emu_hist_bin_unguarded(sb * g)]++; /* exact */
        }
    float *sc = malloc(q->n * sizeof *sc);
    if (!sc)
        return emu_ctx_fail(ctx, site, "out of memory for %zu scales", q->n);
    emu_scaled_element_scales(q, sc);
    for (size_t i = 0; i < q->n; i++) {
        const double xi = x->data[i];
        const double sb = sc[i];
        const double v = isnan(sb) ? NAN : (double)q->elem[i] * sb * g;
        s.nan += isnan(v);
        if (hist) {
            s.hist_exact[emu_hist_bin_unguarded(xi)]++;
            s.hist_rounded[emu_hist_bin_unguarded(v)]++;
        }
        if (!ref || xi == 0.0 || !isfinite(xi) || isnan(v))
            continue;
        /* The exact error v - x, rounded once (TwoSum). */
        double d, dl;
        emu_two_sum(v, -xi, &d, &dl);
        const double scale = sb * g;
        const double ulps = fabs(d) / (elem_ulp(&q->sf.elem, xi / scale) * scale);
        const double rel = fabs(d) / fabs(xi);
        s.ref_samples++;
        s.ulp_sum += ulps;
        s.ulp_max = ulps > s.ulp_max ? ulps : s.ulp_max;
        s.ulp_hist[emu_ulperr_bin_unguarded(ulps)]++;
        s.rel_sum += rel;
        s.rel_max = rel > s.rel_max ? rel : s.rel_max;
        s.rel_hist[emu_relerr_bin_unguarded(rel)]++;
    }
    free(sc);
    emu_site_stats_merge(&st->total, &s);
    emu_site_stats_merge(&st->step, &s);
    st->active = true;
    return 0;
}

/* Checks that a block-scaled operand runs its blocks along K. */
static int along_k(emu_ctx *ctx, const char *site, const char *what,
                   const emu_scaled_tensor *q, int k_axis)
{
    if (!q->sf.block_scaled || q->axis == k_axis)
        return 0;
    return emu_ctx_fail(ctx, site, "%s is blocked along axis %d, but its "
                        "reduction axis (K) is axis %d: quantize it along K",
                        what, q->axis, k_axis);
}

/* A binary32 tensor holding q's values without the tensor scale. */
static int dequantized(emu_ctx *ctx, const char *site, const char *what,
                       const emu_scaled_tensor *q, emu_tensor *t)
{
    emu_error e;
    char name[EMU_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s", what);
    if (emu_tensor_alloc(t, name, EMU_ROLE_OTHER, emu_format_find("binary32"),
                         q->ndim, q->shape, &e))
        return emu_ctx_fail(ctx, site, "%s: %s", what, e.message);
    if (emu_scaled_dequantize(q, t->data, false, &e)) {
        emu_tensor_free(t);
        return emu_ctx_fail(ctx, site, "%s: %s", what, e.message);
    }
    return 0;
}

int emu_t_matmul_scaled(emu_ctx *ctx, const char *site, emu_tensor *out,
                        const emu_scaled_tensor *a, const emu_scaled_tensor *b,
                        const emu_matmul_opts *opts)
{
    EMU_HOSTFP_GUARD;
    static const emu_matmul_opts none;
    const emu_matmul_opts *o = opts ? opts : &none;
    if (!a || !b || !a->elem || !b->elem)
        return emu_ctx_fail(ctx, site, "scaled operand not allocated");
    if (a->ndim != 2 || b->ndim != 2)
        return emu_ctx_fail(ctx, site, "operands are matrices (a has %d "
                            "dimensions, b %d)", a->ndim, b->ndim);
    if (o->accumulate)
        return emu_ctx_fail(ctx, site, "accumulate is not available with "
                            "scaled operands (the old output would be divided "
                            "by their tensor scales inexactly)");
    const double alpha = o->alpha == 0.0 ? 1.0 : o->alpha;
    if (!emu_is_pow2(alpha))
        return emu_ctx_fail(ctx, site, "alpha %g is not a power of two (with "
                            "the tensor scales the product must stay exact)",
                            o->alpha);
    if (along_k(ctx, site, "a", a, o->trans_a ? 0 : 1) ||
        along_k(ctx, site, "b", b, o->trans_b ? 1 : 0))
        return -1;
    if (a->sf.block_scaled && b->sf.block_scaled &&
        a->sf.block[0] != b->sf.block[0])
        return emu_ctx_fail(ctx, site, "block shapes do not match along K: a "
                            "has blocks of %zu, b of %zu (each block of a must "
                            "meet one block of b)", a->sf.block[0],
                            b->sf.block[0]);
    emu_tensor ta, tb;
    if (dequantized(ctx, site, "a", a, &ta))
        return -1;
    if (dequantized(ctx, site, "b", b, &tb)) {
        emu_tensor_free(&ta);
        return -1;
    }
    emu_matmul_opts mo = *o;
    mo.alpha = alpha * (double)a->tensor_scale * (double)b->tensor_scale;
    mo.src_alpha = alpha; /* the sources carry their scales themselves */
    int rc = emu_t_matmul(ctx, site, out, &ta, &tb, &mo);
    emu_tensor_free(&ta);
    emu_tensor_free(&tb);
    return rc;
}
