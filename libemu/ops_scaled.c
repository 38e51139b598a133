/*
 * ops_scaled.c — scaled formats as ops: quantization through the choke
 * point (emu_commit rounds the exact quotients and measures them like any
 * op's results), and matmul with block-scaled operands.
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

/* What the choke point's callbacks need to know about a quantization. */
typedef struct quant_op {
    const emu_scaled_tensor *q;
    const float *x;          /* the sources                               */
    const float *scale;      /* s_b(i) per element                        */
    double g;
    const bool *block_nan;   /* per block: it held a NaN (NULL: none did)  */
    bool pow2;               /* every divisor a power of two (or NaN)      */
    bool plain;              /* and none NaN, g = 1: x times 1/s           */
} quant_op;

/* The exact quotients x[j] / (s[j] g) for power-of-two divisors (or
 * NaN: 0), as x[j] times the divisor's reciprocal, which is exact: for
 * d = 2^k (|k| < 1000 here: a binary32 scale times a binary32 tensor
 * scale) 1/d = 2^-k has the biased exponent 2046 minus d's, and the
 * product of a binary32 and a power of two in binary64's normal range is
 * exact, so equal to the quotient (zeros' signs, infinities and NaNs'
 * payloads alike).  A multiplication where the definition divides: a loop
 * of vector lanes, compiled for each instruction-set level (EMU_ISA picks
 * one, as for the array kernels). */
static EMU_KERNEL_INLINE void pow2_quotients_any(double *restrict hi,
                                                 const float *restrict x,
                                                 const float *restrict s,
                                                 double g, bool plain,
                                                 size_t m)
{
    /* plain: no divisor NaN and g = 1 (MX's operands), d = s[j]: the same
     * products without the multiplication by g and the NaN select, a
     * third of the loop's vector instructions. */
    if (plain) {
        for (size_t j = 0; j < m; j++) {
            const double d = s[j];
            uint64_t u;
            memcpy(&u, &d, sizeof u);
            u = UINT64_C(0x7fe0000000000000) - u;
            double inv;
            memcpy(&inv, &u, sizeof inv);
            hi[j] = (double)x[j] * inv;
        }
        return;
    }
    for (size_t j = 0; j < m; j++) {
        const double d = (double)s[j] * g; /* exact */
        uint64_t u;
        memcpy(&u, &d, sizeof u);
        u = UINT64_C(0x7fe0000000000000) - u;
        double inv;
        memcpy(&inv, &u, sizeof inv);
        const double q = (double)x[j] * inv;
        hi[j] = d != d ? 0.0 : q;
    }
}

static void pow2_quotients_base(double *restrict hi, const float *restrict x,
                                const float *restrict s, double g, bool plain,
                                size_t m)
{
    pow2_quotients_any(hi, x, s, g, plain, m);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static void pow2_quotients_avx2(double *restrict hi, const float *restrict x,
                                const float *restrict s, double g, bool plain,
                                size_t m)
{
    pow2_quotients_any(hi, x, s, g, plain, m);
}

EMU_ISA_TARGET_AVX512
static void pow2_quotients_avx512(double *restrict hi,
                                  const float *restrict x,
                                  const float *restrict s, double g,
                                  bool plain, size_t m)
{
    pow2_quotients_any(hi, x, s, g, plain, m);
}
#endif

static void pow2_quotients(double *hi, const float *x, const float *s,
                           double g, bool plain, size_t m)
{
#if EMU_HAVE_ISA_CLONES
    switch (emu_isa_active()) {
    case EMU_ISA_AVX512: pow2_quotients_avx512(hi, x, s, g, plain, m); return;
    case EMU_ISA_AVX2: pow2_quotients_avx2(hi, x, s, g, plain, m); return;
    default: break;
    }
#endif
    pow2_quotients_base(hi, x, s, g, plain, m);
}

/* emu_op_out.fill: the exact quotients x_i / (s_b(i) g) of a chunk, as
 * pairs where a divisor is not a power of two; a NaN block's elements are
 * zero. */
static int quant_fill(const void *opv, size_t i0, size_t m, double *hi,
                      double *lo)
{
    const quant_op *op = opv;
    if (op->pow2) {
        pow2_quotients(hi, op->x + i0, op->scale + i0, op->g, op->plain, m);
        return 0;
    }
    for (size_t j = 0; j < m; j++) {
        const size_t i = i0 + j;
        const double xi = op->x[i], d = (double)op->scale[i] * op->g; /* exact */
        hi[j] = isnan(d) ? 0.0 : xi / d; /* exact if d is a power of two */
        if (op->pow2)
            continue;
        lo[j] = 0.0;
        if (!isnan(d) && isfinite(hi[j]) && hi[j] != 0.0)
            lo[j] = fma(-hi[j], d, xi) / d; /* the remainder's sign exact */
    }
    return !op->pow2;
}

/* The exact quotient x_i / (s_b(i) g): the value the element rounds. */
static int quant_ref(const void *opv, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const quant_op *op = opv;
    const double d = (double)op->scale[i] * op->g; /* exact */
    if (isnan(d))
        return -1; /* a NaN block: its elements stand for nothing */
    mpfr_set_flt(exact, op->x[i], MPFR_RNDN);
    mpfr_div_d(exact, exact, d, MPFR_RNDN);
    return 0;
}

/* A NaN value propagates a NaN when the element or its block held one;
 * one made from an infinity is produced. */
static bool quant_had_nan(const void *opv, size_t i)
{
    const quant_op *op = opv;
    return isnan(op->x[i]) ||
           (op->block_nan && op->block_nan[emu_scaled_block_of(op->q, i)]);
}

/* The blocks holding a NaN, or NULL if none does (or out of memory: the
 * NaNs then count as produced). */
static bool *nan_blocks(const emu_scaled_tensor *q, const float *x)
{
    bool *nb = NULL;
    /* A block-scaled format's block holding a NaN has a NaN scale (the
     * quantizer's rule for inf and NaN): without one, no pass over x. */
    if (q->sf.block_scaled) {
        bool any = false;
        for (size_t b = 0; b < q->nblocks; b++)
            any |= isnan(q->scale[b]);
        if (!any)
            return NULL;
    }
    for (size_t i = 0; i < q->n; i++) {
        if (!isnan(x[i]))
            continue;
        if (!nb && !(nb = calloc(q->nblocks, sizeof *nb)))
            return NULL;
        nb[emu_scaled_block_of(q, i)] = true;
    }
    return nb;
}

/* Commits a quantization whose scales are in q: the choke point rounds
 * every quotient x_i / (s_b g) into q's elements (the quantizer's fast
 * paths are tested bit-identical to this map and its words), counts,
 * bins, samples and shows the op like any other, a chunk at a time. */
static int commit_quantized(emu_ctx *ctx, const char *site,
                            emu_scaled_tensor *q, const emu_tensor *x,
                            const emu_rounding *elem_rnd, emu_quant_keep *keep)
{
    const size_t n = q->n;
    /* The output: the elements, in the element format named after the
     * scaled format ("mxfp8": the site's format column). */
    emu_tensor view;
    memset(&view, 0, sizeof view);
    snprintf(view.name, sizeof view.name, "%s", x->name);
    view.role = x->role;
    view.fmt = q->sf.elem;
    snprintf(view.fmt.name, sizeof view.fmt.name, "%s", q->sf.name);
    view.ndim = q->ndim;
    memcpy(view.shape, q->shape, sizeof view.shape);
    view.n = n;
    view.data = q->elem;

    const double g = q->tensor_scale;
    /* Power-of-two divisors (MX's scales, no tensor scale) give exact
     * quotients: no low parts to compute or look at.  One pass over the
     * blocks, by the bits (a loop of vector lanes: a normal binary64 is
     * 2^k iff its fraction is zero; the rest by emu_is_pow2). */
    bool pow2 = true, nan_d = false;
    for (size_t b = 0; b < q->nblocks; b++) {
        const double d = (q->sf.block_scaled ? (double)q->scale[b] : 1.0) * g;
        uint64_t u;
        memcpy(&u, &d, sizeof u);
        const uint64_t e = u >> 52 & 0x7ff;
        nan_d |= d != d;
        pow2 &= d != d || ((e - 1 < 0x7fe) & !(u << 12)) ||
                (e == 0 && emu_is_pow2(d));
    }
    float *sc = !keep ? malloc(n * sizeof *sc)
              : emu_quant_keep_grow(&keep->sc, &keep->sc_cap, n) ? NULL
                                                                : keep->sc;
    if (!sc)
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for %zu scales", n);
    emu_scaled_element_scales(q, sc);
    /* The scales' histogram: without NaNs or a tensor scale, of the
     * binary32 scales themselves (the same binade bins), by the vector
     * binning. */
    uint64_t hist[EMU_HIST_BINS] = { 0 };
    if (q->sf.block_scaled && g == 1.0 && !nan_d)
        emu_hist_add_f32_unguarded(hist, q->scale, q->nblocks);
    else
        for (size_t b = 0; b < q->nblocks; b++) {
            const double sb = q->sf.block_scaled ? q->scale[b] : 1.0;
            if (!isnan(sb))
                hist[emu_hist_bin_unguarded(sb * g)]++; /* exact */
        }
    bool *block_nan = q->sf.block_scaled && !nan_d ? NULL /* as it finds */
                                                   : nan_blocks(q, x->data);
    quant_op op = { .q = q, .x = x->data, .scale = sc, .g = g,
                    .block_nan = block_nan, .pow2 = pow2,
                    .plain = pow2 && !nan_d && g == 1.0 };
    emu_rounding rnd = *elem_rnd;
    rnd.saturate = true; /* the OCP MX rule: elements clamp to ±max */
    /* The callbacks read x, the scales and the NaN blocks, never the
     * elements: each chunk is stored when measured, unless x is stored
     * in them. */
    int rc = emu_commit(ctx, &(emu_op_out){
        .site = site, .kind = "quantize", .out = &view, .fill = quant_fill,
        .op = &op, .ref = quant_ref, .inputs_had_nan = quant_had_nan,
        .rnd = &rnd, .scale = sc, .scale_g = g, .src = x->data,
        .hist_scale = hist,
        .store_early = emu_store_early_ok(&view, x->data, n) });
    if (q->sf.int_elem) /* two's complement integers have no -0 */
        for (size_t i = 0; i < n; i++)
            q->elem[i] += 0.0f;
    free(block_nan);
    if (!keep)
        free(sc);
    return rc;
}

int emu_t_quantize_scaled(emu_ctx *ctx, const char *site,
                          emu_scaled_tensor *q, const emu_tensor *x,
                          const emu_quant_opts *o, emu_quant_counts *counts,
                          const emu_rounding *rnd)
{
    return emu_t_quantize_scaled_kept(ctx, site, q, x, o, counts, rnd, NULL);
}

int emu_t_quantize_scaled_kept(emu_ctx *ctx, const char *site,
                               emu_scaled_tensor *q, const emu_tensor *x,
                               const emu_quant_opts *o,
                               emu_quant_counts *counts,
                               const emu_rounding *rnd, emu_quant_keep *keep)
{
    EMU_HOSTFP_GUARD;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "x", x))
        return -1;
    if (!q || !q->elem)
        return emu_ctx_fail(ctx, site, "scaled tensor not allocated");
    if (!same_shape(q, x))
        return emu_shape_fail(ctx, site, "x", x, "the scaled tensor's shape");
    emu_quant_opts qo;
    memset(&qo, 0, sizeof qo);
    if (o)
        qo.tensor_scale = o->tensor_scale;
    qo.mode = rnd->mode;
    qo.sr_bits = rnd->sr_bits;
    qo.seed = ctx->seed;
    qo.stream = emu_ctx_stream(ctx);
    /* The scales, and the elements by the fast paths: all that is needed
     * when nothing is measured.  Measured, the choke point rounds the
     * elements (commit_quantized), so the quantizer sets the scales only
     * unless the caller wants its counts, which it takes from its own
     * elements. */
    emu_error e;
    const bool measured = emu_commit_measures(ctx);
    if (measured && !counts ? emu_scaled_quantize_scales(q, x->data, &qo, &e)
                            : emu_scaled_quantize(q, x->data, &qo, counts,
                                                  NULL, &e))
        return emu_ctx_failc(ctx, e.code, site, "%s%s%s", e.key, e.key[0] ? ": " : "",
                            e.message);
    if (!measured) {
        emu_tensor none = { .n = q->n };
        return emu_commit(ctx, &(emu_op_out){ .site = site,
                                              .kind = "quantize",
                                              .out = &none, .rnd = rnd });
    }
    return commit_quantized(ctx, site, q, x, rnd, keep);
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
        return emu_ctx_failc(ctx, e.code, site, "%s: %s", what, e.message);
    if (emu_scaled_dequantize(q, t->data, false, &e)) {
        emu_tensor_free(t);
        return emu_ctx_failc(ctx, e.code, site, "%s: %s", what, e.message);
    }
    return 0;
}

int emu_t_matmul_scaled(emu_ctx *ctx, const char *site, emu_tensor *out,
                        const emu_scaled_tensor *a, const emu_scaled_tensor *b,
                        const emu_matmul_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    /* emu_t_matmul checks the rounding and the accumulator again; the
     * options are read here first. */
    if (!o)
        return emu_ctx_fail(ctx, site, "matmul options: NULL (they name "
                            "the accumulator model)");
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
    int rc = emu_t_matmul(ctx, site, out, &ta, &tb, &mo, rnd);
    emu_tensor_free(&ta);
    emu_tensor_free(&tb);
    return rc;
}
