/*
 * ops_attn.c — causal multi-head self-attention in GPT-2's layout
 * (emu_t_attention, emu_t_attention_backward).  Called by the GPT layers
 * of the nn code and by users.
 *
 * Shapes: qkv, dqkv (B, T, 3C), [q | k | v] along the last dimension,
 * head h owning columns h hs .. (h+1) hs - 1 of each, hs = C / H; out,
 * dout (B, T, C) (or (B*T, C)); att (B, H, T, T).  Below, for one
 * example b and head h, q[t, d] = qkv[b, t, h hs + d], k[t, d] =
 * qkv[b, t, C + h hs + d], v[t, d] = qkv[b, t, 2C + h hs + d], and
 * s = 1 / sqrt(hs) rounded to binary64.
 *
 * What is rounded, and where (each through the choke point, once); every
 * sum is one dot product under the model of the options, its terms (exact
 * products of binary32 values) in the order given.  The fast model, as
 * emu_t_matmul's: per example and head, each product is one binary32 GEMM
 * (sgemm where the library has BLAS; its summation order), the masked
 * entries entering as zero terms, the scale s applied in binary64; when
 * qkv or dout holds an inf or NaN (which a zero term would spread across
 * the mask), binary64 sums of the defined terms in their order
 * (fast_dots).  The softmax and dscores row sums under the fast model are
 * binary64 sums.
 *   <site>.scores   S[t, t2] = s (sum over d of q[t, d] k[t2, d]), t2 <= t:
 *                   the accumulator's value times s, exactly
 *                   (emu_scale_pairs), rounded once into att's format
 *                   under stat_rnd.  Kept in a scratch tensor of the
 *                   B H T (T+1) / 2 causal entries (row-major triangle):
 *                   the masked entries are not outputs.
 *   <site>.softmax  att[t, t2] = e[t2] / E for t2 <= t, +0 above the
 *                   diagonal, from the stored scores: m = the row's
 *                   maximum (NaN if it holds one), e[j] = exp(S[t, j] - m)
 *                   in binary64 rounded to binary32 (nearest-even: the
 *                   values a kernel keeps), E = the model's sum of e[0..t]
 *                   (dot product number (b H + h) T + t; its swamping
 *                   counted here), the quotient in binary64; rounded into
 *                   att under stat_rnd.  A NaN or +inf among a row's
 *                   scores makes the row's t + 1 entries NaN (inf - inf);
 *                   a -inf score has probability +0 (all -inf: NaN), as
 *                   in PyTorch.  The reference is the exact softmax of
 *                   the stored scores: it measures the binary32 e[j] too.
 *   <site>          out[t, h hs + d] = sum over t2 <= t of att[t, t2]
 *                   v[t2, d] (t2 ascending), rounded under rnd.
 * Backward, from dout, qkv and the stored att:
 *   <site>.dv       dv[t2, d] = sum over t >= t2 of att[t, t2] dout[t, d]
 *                   (t ascending), under rnd
 *   <site>.datt     G[t, t2] = sum over d of dout[t, d] v[t2, d], t2 <= t,
 *                   into att's format under stat_rnd (a triangle, as the
 *                   scores)
 *   <site>.dscores  dS[t, t2] = att[t, t2] (G[t, t2] - R[t]) in binary64,
 *                   R[t] = the model's sum over t2 <= t of att[t, t2]
 *                   G[t, t2] (dot product (b H + h) T + t, counted here),
 *                   as the accumulator left it; into att's format under
 *                   stat_rnd (a triangle)
 *   <site>.dq       dq[t, d] = s (sum over t2 <= t of dS[t, t2] k[t2, d]),
 *                   the scale applied exactly before the rounding, under rnd
 *   <site>.dk       dk[t2, d] = s (sum over t >= t2 of dS[t, t2] q[t, d])
 * dq, dk and dv are committed to scratch tensors in dqkv's format and
 * copied (exactly) into dqkv's three column blocks.  Dot products are
 * numbered by their output's index in the committed tensor; stochastic
 * accumulator words: stream op_index ^ 2^63 of that commit, as
 * emu_t_reduce.  The MPFR references: exact dot products of the stored
 * operands (times s), the exact softmax of the stored scores, and the
 * exact dS from the stored att, G and the accumulator's R.
 * Operand hook (o->operands, emu_attn_operand): each product's two
 * operands are replaced right before its commit, q, k, v in a packed copy
 * of qkv (each product reads only its own parts of it), att and dS in a
 * copy of their own; the softmax and dscores read the stored att and G as
 * they are.  The producers read through op's pointers, which are swapped
 * to the copies for the product and back; without a hook nothing is
 * copied.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

#define ACCUM_STREAM_TAG ((uint64_t)1 << 63)

/* Which dot products a generic producer forms. */
enum at_dot { AT_SCORES, AT_OUT, AT_DV, AT_DATT, AT_DQ, AT_DK };

typedef struct attn_op {
    size_t B, T, C, H, hs, C3, tri;  /* tri = T (T + 1) / 2            */
    double scale;
    enum at_dot what;
    const float *qkv, *att, *dout;
    const float *sc;          /* packed triangle: scores, or G          */
    const float *ds;          /* dS unpacked into B H T T (zeros above)  */
    const double *R;          /* the rows' sum of att G                  */
    const emu_accum *accum;
    uint64_t seed, stream;
    emu_accum_counts *counts;
    const double *fres;       /* the fast model's sums, by output index   */
    const float *f32;         /* or its binary32 GEMM results             */
    const double *ehi, *elo;  /* emulated models: the engine's values     */
    bool finite;              /* qkv and dout hold no inf or NaN          */
    /* softmax: the row being produced */
    size_t row;
    bool have_row;
    float *e;
    double E;
    const emu_format *b32;    /* binary32, e's format                     */
} attn_op;

/* Row t and column t2 of entry r of a packed lower triangle. */
static void tri_pos(size_t r, size_t *t, size_t *t2)
{
    size_t u = (size_t)((sqrt(8.0 * (double)r + 1.0) - 1.0) / 2.0);
    while (u * (u + 1) / 2 > r)
        u--;
    while ((u + 1) * (u + 2) / 2 <= r)
        u++;
    *t = u;
    *t2 = r - u * (u + 1) / 2;
}

/* The terms of dot product o of op->what: x[k*incx] * y[k*incy], k < n. */
static void dot_terms(const attn_op *op, size_t o, const float **x,
                      ptrdiff_t *incx, const float **y, ptrdiff_t *incy,
                      size_t *n)
{
    const size_t T = op->T, C = op->C, H = op->H, hs = op->hs, C3 = op->C3;
    if (op->what == AT_SCORES || op->what == AT_DATT) {
        const size_t bh = o / op->tri, b = bh / H, h = bh % H;
        size_t t, t2;
        tri_pos(o % op->tri, &t, &t2);
        if (op->what == AT_SCORES) {
            *x = op->qkv + (b * T + t) * C3 + h * hs;
            *y = op->qkv + (b * T + t2) * C3 + C + h * hs;
        } else {
            *x = op->dout + (b * T + t) * C + h * hs;
            *y = op->qkv + (b * T + t2) * C3 + 2 * C + h * hs;
        }
        *incx = *incy = 1;
        *n = hs;
        return;
    }
    /* (b, t, c) outputs of (B, T, C) tensors */
    const size_t bt = o / C, c = o % C, b = bt / T, t = bt % T, h = c / hs;
    const size_t bh = b * H + h;
    switch (op->what) {
    case AT_OUT: /* att[t, 0..t] . v[0..t, c] */
        *x = op->att + (bh * T + t) * T;
        *incx = 1;
        *y = op->qkv + b * T * C3 + 2 * C + c;
        *n = t + 1;
        break;
    case AT_DV: /* att[t..T-1, t] . dout[t..T-1, c] */
        *x = op->att + (bh * T + t) * T + t;
        *incx = (ptrdiff_t)T;
        *y = op->dout + (b * T + t) * C + c;
        *incy = (ptrdiff_t)C;
        *n = T - t;
        return;
    case AT_DQ: /* dS[t, 0..t] . k[0..t, c] */
        *x = op->ds + (bh * T + t) * T;
        *incx = 1;
        *y = op->qkv + b * T * C3 + C + c;
        *n = t + 1;
        break;
    default: /* AT_DK: dS[t..T-1, t] . q[t..T-1, c] */
        *x = op->ds + (bh * T + t) * T + t;
        *incx = (ptrdiff_t)T;
        *y = op->qkv + (b * T + t) * C3 + c;
        *n = T - t;
        break;
    }
    *incy = (ptrdiff_t)C3;
}

static double model_dot(const attn_op *op, const float *x, ptrdiff_t incx,
                        const float *y, ptrdiff_t incy, size_t n, size_t dot,
                        double *lo)
{
    emu_accum_rng rng = { op->seed, op->stream, dot };
    return emu_model_dot_unguarded(op->accum, x, incx, y, incy, n, &rng,
                                   op->counts, lo);
}

static bool scaled(const attn_op *op)
{
    return op->what == AT_SCORES || op->what == AT_DQ || op->what == AT_DK;
}

static int dot_fill(const void *vop, size_t i0, size_t m, double *hi,
                    double *lo)
{
    const attn_op *op = vop;
    bool any = false;
    if (op->f32) {
        /* the fast model's binary32 results, scaled in binary64 */
        const double sc = scaled(op) ? op->scale : 1.0;
        for (size_t j = 0; j < m; j++)
            hi[j] = (double)op->f32[i0 + j] * sc;
        return 0;
    }
    if (op->ehi) {
        memcpy(hi, op->ehi + i0, m * sizeof *hi);
        memcpy(lo, op->elo + i0, m * sizeof *lo);
        if (scaled(op)) {
            emu_scale_pairs(hi, lo, true, m, op->scale);
            return 1;
        }
        return emu_any_nonzero(lo, m);
    }
    if (op->fres) {
        /* the fast model: binary64 sums, scaled in binary64 */
        const double *r = op->fres + i0;
        if (scaled(op)) {
            const double sc = op->scale;
            for (size_t j = 0; j < m; j++)
                hi[j] = r[j] * sc;
        } else {
            memcpy(hi, r, m * sizeof *hi);
        }
        memset(lo, 0, m * sizeof *lo);
        return 0;
    }
    for (size_t j = 0; j < m; j++) {
        const float *x, *y;
        ptrdiff_t incx, incy;
        size_t n;
        dot_terms(op, i0 + j, &x, &incx, &y, &incy, &n);
        hi[j] = model_dot(op, x, incx, y, incy, n, i0 + j, &lo[j]);
        any |= lo[j] != 0.0;
    }
    if (scaled(op)) {
        emu_scale_pairs(hi, lo, true, m, op->scale);
        return 1;
    }
    return any;
}

/* The fast model's sums of op->what for every output, into res (by output
 * index): each one the binary64 sum of its terms in their defined order,
 * as model_dot forms it, but computed for many outputs at once so that the
 * loops run across outputs (vectorised) while each output's own sum keeps
 * its sequence.  tmp: T hs floats. */
/* Vectorised across outputs (each output's sum keeps its order); still no
 * contraction into fma.  Compiled for each instruction-set level (isa.c):
 * every lane does the same IEEE operations in the same order whatever its
 * width, so the levels' sums are the same; a diverged model runs every
 * product here (its operands are NaN), AVX-512's eight binary64 lanes a
 * quarter of baseline's loop trips. */
#define FAST_DOTS_OPT                                                         \
    __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic",     \
                           "fp-contract=off")))
FAST_DOTS_OPT
static EMU_KERNEL_INLINE void fast_dots_any(const attn_op *op, double *res,
                                            float *tmp, double *acc)
{
    const size_t B = op->B, T = op->T, C = op->C, H = op->H, hs = op->hs;
    const size_t C3 = op->C3;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            const size_t bh = b * H + h;
            const float *q = op->qkv + b * T * C3 + h * hs;
            const float *k = q + C, *v = q + 2 * C;
            switch (op->what) {
            case AT_SCORES:
            case AT_DATT: {
                /* row t: x[t, d] . y[t2, d] over d, for t2 <= t */
                const float *x = op->what == AT_SCORES ? q : op->dout + b * T * C + h * hs;
                const float *y = op->what == AT_SCORES ? k : v;
                const size_t xs = op->what == AT_SCORES ? C3 : C;
                for (size_t t2 = 0; t2 < T; t2++) /* y transposed: tmp[d T + t2] */
                    for (size_t d = 0; d < hs; d++)
                        tmp[d * T + t2] = y[t2 * C3 + d];
                for (size_t t = 0; t < T; t++) {
                    for (size_t t2 = 0; t2 <= t; t2++)
                        acc[t2] = 0.0;
                    for (size_t d = 0; d < hs; d++) {
                        const double a = x[t * xs + d];
                        const float *yt = tmp + d * T;
                        for (size_t t2 = 0; t2 <= t; t2++)
                            acc[t2] += a * yt[t2];
                    }
                    memcpy(res + bh * op->tri + t * (t + 1) / 2, acc,
                           (t + 1) * sizeof *acc);
                }
                break;
            }
            case AT_OUT:
            case AT_DQ: {
                /* out[t, d] = sum over t2 <= t of P[t, t2] y[t2, d] */
                const float *P = op->what == AT_OUT ? op->att : op->ds;
                const float *y = op->what == AT_OUT ? v : k;
                for (size_t t = 0; t < T; t++) {
                    const float *pr = P + (bh * T + t) * T;
                    for (size_t d = 0; d < hs; d++)
                        acc[d] = 0.0;
                    for (size_t t2 = 0; t2 <= t; t2++) {
                        const double a = pr[t2];
                        const float *yr = y + t2 * C3;
                        for (size_t d = 0; d < hs; d++)
                            acc[d] += a * yr[d];
                    }
                    memcpy(res + (b * T + t) * C + h * hs, acc, hs * sizeof *acc);
                }
                break;
            }
            default: {
                /* AT_DV, AT_DK: out[t2, d] = sum over t >= t2 of
                 * P[t, t2] y[t, d] */
                const float *P = op->what == AT_DV ? op->att : op->ds;
                const float *y = op->what == AT_DV ? op->dout + b * T * C + h * hs : q;
                const size_t ys = op->what == AT_DV ? C : C3;
                for (size_t t2 = 0; t2 < T; t2++) {
                    for (size_t d = 0; d < hs; d++)
                        acc[d] = 0.0;
                    for (size_t t = t2; t < T; t++) {
                        const double a = P[(bh * T + t) * T + t2];
                        const float *yr = y + t * ys;
                        for (size_t d = 0; d < hs; d++)
                            acc[d] += a * yr[d];
                    }
                    memcpy(res + (b * T + t2) * C + h * hs, acc, hs * sizeof *acc);
                }
                break;
            }
            }
        }
}

FAST_DOTS_OPT
static void fast_dots_base(const attn_op *op, double *res, float *tmp,
                           double *acc)
{
    fast_dots_any(op, res, tmp, acc);
}

#if EMU_HAVE_ISA_CLONES
FAST_DOTS_OPT EMU_ISA_TARGET_AVX2
static void fast_dots_avx2(const attn_op *op, double *res, float *tmp,
                           double *acc)
{
    fast_dots_any(op, res, tmp, acc);
}

FAST_DOTS_OPT EMU_ISA_TARGET_AVX512
static void fast_dots_avx512(const attn_op *op, double *res, float *tmp,
                             double *acc)
{
    fast_dots_any(op, res, tmp, acc);
}
#endif

static void fast_dots(const attn_op *op, double *res, float *tmp, double *acc)
{
#if EMU_HAVE_ISA_CLONES
    const emu_isa isa = emu_isa_active();
    if (isa == EMU_ISA_AVX512) {
        fast_dots_avx512(op, res, tmp, acc);
        return;
    }
    if (isa == EMU_ISA_AVX2) {
        fast_dots_avx2(op, res, tmp, acc);
        return;
    }
#endif
    fast_dots_base(op, res, tmp, acc);
}

/* The emulated models: every dot product of op->what through the GEMM
 * engine (emu_gemm_accum_ex: each value bit-identical to emu_accum_dot of
 * the same terms in the same order, numbered as their outputs), one call
 * per row of an example and head, each call only the causal terms.  hi,
 * lo: out->n values by output index.  Returns -1 if out of memory. */
static int engine_dots(const attn_op *op, double *hi, double *lo)
{
    const size_t B = op->B, T = op->T, C = op->C, H = op->H, hs = op->hs;
    const ptrdiff_t C3 = (ptrdiff_t)op->C3, Cs = (ptrdiff_t)C, Ts = (ptrdiff_t)T;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            const size_t bh = b * H + h;
            const float *q = op->qkv + b * T * op->C3 + h * hs;
            const float *k = q + C, *v = q + 2 * C;
            const float *dy = op->dout ? op->dout + b * T * C + h * hs : NULL;
            for (size_t t = 0; t < T; t++) {
                const float *a, *y;
                ptrdiff_t a_cs, y_rs, y_cs = 1;
                size_t n, K, o;
                switch (op->what) {
                case AT_SCORES: /* row t: q_t . k_t2, t2 <= t */
                case AT_DATT:   /* dout_t . v_t2 */
                    a = op->what == AT_SCORES ? q + (size_t)t * op->C3 : dy + t * C;
                    y = op->what == AT_SCORES ? k : v;
                    a_cs = 1;
                    y_rs = 1;
                    y_cs = C3;
                    n = t + 1;
                    K = hs;
                    o = bh * op->tri + t * (t + 1) / 2;
                    break;
                case AT_OUT: /* att[t, 0..t] . v[0..t, c] */
                case AT_DQ:  /* dS[t, 0..t] . k[0..t, c] */
                    a = (op->what == AT_OUT ? op->att : op->ds) + (bh * T + t) * T;
                    y = op->what == AT_OUT ? v : k;
                    a_cs = 1;
                    y_rs = C3;
                    n = hs;
                    K = t + 1;
                    o = (b * T + t) * C + h * hs;
                    break;
                default: /* AT_DV, AT_DK: P[t..T-1, t] . y[t..T-1, c] */
                    a = (op->what == AT_DV ? op->att : op->ds) + (bh * T + t) * T + t;
                    y = op->what == AT_DV ? dy + t * C : q + t * op->C3;
                    a_cs = Ts;
                    y_rs = op->what == AT_DV ? Cs : C3;
                    n = hs;
                    K = T - t;
                    o = (b * T + t) * C + h * hs;
                    break;
                }
                if (emu_gemm_accum_ex(op->accum, 1, n, K, a, 0, a_cs, y, y_rs,
                                      y_cs, NULL, hi + o, lo + o, op->seed,
                                      op->stream, o, op->counts, 1))
                    return -1;
            }
        }
    return 0;
}

/* The unscaled products' binary32 results are binary32 values: copied. */
static void dot_fill32(const void *vop, size_t i0, size_t m, float *v)
{
    const attn_op *op = vop;
    memcpy(v, op->f32 + i0, m * sizeof *v);
}

/* The fast model with finite operands: each product of an example and a
 * head as a binary32 GEMM (emu_gemm_fast_f32: sgemm where the library has
 * BLAS, as emu_t_matmul's fast model), masked entries as zero terms (the
 * scores and G computed in full, their triangle kept), into res by output
 * index.  tmp: T max(T, hs) floats.  Returns -1 if out of memory. */
static int fast_gemms(const attn_op *op, float *res, float *tmp)
{
    const size_t B = op->B, T = op->T, C = op->C, H = op->H, hs = op->hs;
    const ptrdiff_t C3 = (ptrdiff_t)op->C3, Cs = (ptrdiff_t)C, Ts = (ptrdiff_t)T;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            const size_t bh = b * H + h;
            const float *q = op->qkv + b * T * op->C3 + h * hs;
            const float *k = q + C, *v = q + 2 * C;
            const float *dy = op->dout ? op->dout + b * T * C + h * hs : NULL;
            const float *P = op->what == AT_OUT || op->what == AT_DV
                                 ? op->att + bh * T * T
                                 : op->ds ? op->ds + bh * T * T : NULL;
            int rc;
            switch (op->what) {
            case AT_SCORES: /* q k^T */
            case AT_DATT:   /* dout v^T */
                rc = op->what == AT_SCORES
                         ? emu_gemm_fast_f32(T, T, hs, q, C3, 1, k, 1, C3, NULL, tmp)
                         : emu_gemm_fast_f32(T, T, hs, dy, Cs, 1, v, 1, C3, NULL, tmp);
                if (rc)
                    return -1;
                for (size_t t = 0; t < T; t++)
                    memcpy(res + bh * op->tri + t * (t + 1) / 2, tmp + t * T,
                           (t + 1) * sizeof *res);
                continue;
            case AT_OUT: /* att v */
                rc = emu_gemm_fast_f32(T, hs, T, P, Ts, 1, v, C3, 1, NULL, tmp);
                break;
            case AT_DQ: /* dS k */
                rc = emu_gemm_fast_f32(T, hs, T, P, Ts, 1, k, C3, 1, NULL, tmp);
                break;
            case AT_DV: /* att^T dout */
                rc = emu_gemm_fast_f32(T, hs, T, P, 1, Ts, dy, Cs, 1, NULL, tmp);
                break;
            default: /* AT_DK: dS^T q */
                rc = emu_gemm_fast_f32(T, hs, T, P, 1, Ts, q, C3, 1, NULL, tmp);
                break;
            }
            if (rc)
                return -1;
            for (size_t t = 0; t < T; t++)
                memcpy(res + (b * T + t) * C + h * hs, tmp + t * hs,
                       hs * sizeof *res);
        }
    return 0;
}

/* exact = sum x[k] y[k] (exact products, exact sum at exact's precision:
 * binary32 products span 2^-298 .. 2^256, and REF_PREC is 600 bits). */
static void ref_dot(mpfr_ptr exact, const float *x, ptrdiff_t incx,
                    const float *y, ptrdiff_t incy, size_t n)
{
    mpfr_t t;
    mpfr_init2(t, 64);
    mpfr_set_zero(exact, 1);
    for (size_t k = 0; k < n; k++) {
        mpfr_set_flt(t, x[(ptrdiff_t)k * incx], MPFR_RNDN);
        mpfr_mul_d(t, t, y[(ptrdiff_t)k * incy], MPFR_RNDN); /* 48 bits */
        mpfr_add(exact, exact, t, MPFR_RNDN);
    }
    mpfr_clear(t);
}

static int dot_ref(const void *vop, size_t o, mpfr_ptr exact, mpfr_ptr src)
{
    const attn_op *op = vop;
    const float *x, *y;
    ptrdiff_t incx, incy;
    size_t n;
    dot_terms(op, o, &x, &incx, &y, &incy, &n);
    ref_dot(exact, x, incx, y, incy, n);
    if (scaled(op))
        mpfr_mul_d(exact, exact, op->scale, MPFR_RNDN);
    mpfr_set(src, exact, MPFR_RNDN);
    return 1;
}

/* ---- softmax ------------------------------------------------------------------ */

/* The stored scores of row `row` = bh T + t: t + 1 values. */
static const float *score_row(const attn_op *op, size_t row, size_t *n)
{
    const size_t t = row % op->T;
    *n = t + 1;
    return op->sc + (row / op->T) * op->tri + t * (t + 1) / 2;
}

static void softmax_row(attn_op *op, size_t row)
{
    size_t n;
    const float *s = score_row(op, row, &n);
    double m = -INFINITY;
    for (size_t k = 0; k < n; k++)
        if (isnan(s[k]) || isnan(m))
            m = NAN;
        else if (s[k] > m)
            m = s[k];
    /* (float)exp(s[k] - m), bit for bit, in vector lanes */
    emu_exp_f32_n(op->b32, s, m, n, op->e, true);
    double lo;
    op->E = model_dot(op, op->e, 1, NULL, 0, n, row, &lo);
    op->E += lo;
    op->row = row;
    op->have_row = true;
}

/* The producers below: their inner loops vectorised (each element's
 * operations unchanged; no contraction). */
#define AT_VECTORISE                                                        \
    __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic",   \
                            "fp-contract=off")))

AT_VECTORISE
static int softmax_fill(const void *vop, size_t i0, size_t m, double *hi,
                        double *lo)
{
    (void)lo;
    attn_op *op = (attn_op *)vop; /* its row cache: filled in order */
    const size_t T = op->T;
    for (size_t j = 0; j < m;) {
        /* the rest of row `row` that lies in this chunk: t2 .. t2 + n - 1 */
        const size_t o = i0 + j, row = o / T, t2 = o % T, t = row % T;
        const size_t n = T - t2 < m - j ? T - t2 : m - j;
        if (t2 <= t && (!op->have_row || op->row != row))
            softmax_row(op, row);
        const float *e = op->e;
        const double E = op->E;
        double *h = hi + j;
        const size_t nk = t2 <= t ? (t + 1 - t2 < n ? t + 1 - t2 : n) : 0;
        for (size_t u = 0; u < nk; u++)
            h[u] = e[t2 + u] / E;
        for (size_t u = nk; u < n; u++)
            h[u] = 0.0;
        j += n;
    }
    return 0;
}

static int softmax_ref(const void *vop, size_t o, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const attn_op *op = vop;
    const size_t T = op->T, row = o / T, t2 = o % T;
    if (t2 > row % T) {
        mpfr_set_zero(exact, 1);
        return 0;
    }
    size_t n;
    const float *s = score_row(op, row, &n);
    double m = -INFINITY;
    for (size_t k = 0; k < n; k++)
        if (isnan(s[k]) || isnan(m))
            m = NAN;
        else if (s[k] > m)
            m = s[k];
    const mpfr_prec_t p = mpfr_get_prec(exact);
    mpfr_t t, sum;
    mpfr_inits2(p, t, sum, (mpfr_ptr)0);
    mpfr_set_zero(sum, 1);
    for (size_t k = 0; k < n; k++) {
        mpfr_set_d(t, (double)s[k], MPFR_RNDN);
        mpfr_sub_d(t, t, m, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add(sum, sum, t, MPFR_RNDN);
        if (k == t2)
            mpfr_set(exact, t, MPFR_RNDN);
    }
    mpfr_div(exact, exact, sum, MPFR_RNDN);
    mpfr_clears(t, sum, (mpfr_ptr)0);
    return 0;
}

/* ---- dscores ------------------------------------------------------------------ */

static void dscores_pos(const attn_op *op, size_t o, size_t *row, size_t *t2)
{
    size_t t;
    tri_pos(o % op->tri, &t, t2);
    *row = (o / op->tri) * op->T + t;
}

AT_VECTORISE
static int dscores_fill(const void *vop, size_t i0, size_t m, double *hi,
                        double *lo)
{
    (void)lo;
    const attn_op *op = vop;
    size_t row, t2;
    dscores_pos(op, i0, &row, &t2); /* then row segment by row segment */
    for (size_t j = 0; j < m;) {
        const size_t t = row % op->T;
        const size_t n = t + 1 - t2 < m - j ? t + 1 - t2 : m - j;
        const float *p = op->att + row * op->T + t2, *g = op->sc + i0 + j;
        const double r = op->R[row];
        double *h = hi + j;
        for (size_t u = 0; u < n; u++)
            h[u] = (double)p[u] * ((double)g[u] - r);
        j += n;
        t2 += n;
        if (t2 > t) {
            t2 = 0;
            row++;
        }
    }
    return 0;
}

static int dscores_ref(const void *vop, size_t o, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const attn_op *op = vop;
    size_t row, t2;
    dscores_pos(op, o, &row, &t2);
    mpfr_set_flt(exact, op->sc[o], MPFR_RNDN);
    mpfr_sub_d(exact, exact, op->R[row], MPFR_RNDN);
    mpfr_mul_d(exact, exact, op->att[row * op->T + t2], MPFR_RNDN);
    return 0;
}

/* ---- checks and commits ---------------------------------------------------- */

/* Checks o, qkv (B, T, 3C) and the heads; fills the sizes of op. */
static int check_common(emu_ctx *ctx, const char *site,
                        const emu_attention_opts *o, const emu_tensor *qkv,
                        attn_op *op)
{
    if (!o)
        return emu_ctx_fail(ctx, site, "attention options: NULL");
    if (emu_check_accum(ctx, site, o->accum) ||
        emu_check_tensor(ctx, site, "qkv", qkv))
        return -1;
    if (qkv->ndim != 3 || qkv->shape[2] % 3 != 0)
        return emu_shape_fail(ctx, site, "qkv", qkv, "(B, T, 3C)");
    const size_t C = qkv->shape[2] / 3;
    if (o->heads < 1 || C % (size_t)o->heads != 0)
        return emu_ctx_fail(ctx, site, "%d heads do not divide C = %zu",
                            o->heads, C);
    memset(op, 0, sizeof *op);
    op->B = qkv->shape[0];
    op->T = qkv->shape[1];
    op->C = C;
    op->C3 = 3 * C;
    op->H = (size_t)o->heads;
    op->hs = C / op->H;
    op->tri = op->T * (op->T + 1) / 2;
    op->scale = 1.0 / sqrt((double)op->hs);
    op->qkv = qkv->data;
    op->accum = o->accum;
    op->seed = ctx->seed;
    return 0;
}

static int check_att(emu_ctx *ctx, const char *site, const emu_tensor *att,
                     const attn_op *op)
{
    if (emu_check_tensor(ctx, site, "att", att))
        return -1;
    if (att->ndim != 4 || att->shape[0] != op->B || att->shape[1] != op->H ||
        att->shape[2] != op->T || att->shape[3] != op->T) {
        char want[96];
        snprintf(want, sizeof want, "(%zu, %zu, %zu, %zu) = (B, H, T, T)", op->B,
                 op->H, op->T, op->T);
        return emu_shape_fail(ctx, site, "att", att, want);
    }
    return 0;
}

/* A (B, T, C) activation: B T rows of C values, last dimension C. */
static int check_btc(emu_ctx *ctx, const char *site, const char *what,
                     const emu_tensor *t, const attn_op *op)
{
    if (emu_check_tensor(ctx, site, what, t))
        return -1;
    if (t->n != op->B * op->T * op->C || t->shape[t->ndim - 1] != op->C) {
        char want[96];
        snprintf(want, sizeof want, "(%zu, %zu, %zu) = (B, T, C)", op->B, op->T,
                 op->C);
        return emu_shape_fail(ctx, site, what, t, want);
    }
    return 0;
}

static int scratch(emu_ctx *ctx, const char *site, emu_tensor *t,
                   const char *suffix, const emu_tensor *like, size_t n)
{
    char name[EMU_TENSOR_NAME_MAX];
    emu_error e;
    snprintf(name, sizeof name, "%.*s%s", (int)(EMU_TENSOR_NAME_MAX - 1 -
                                                strlen(suffix)), site, suffix);
    if (emu_tensor_alloc(t, name, like->role, &like->fmt, 1, &n, &e))
        return emu_ctx_failc(ctx, e.code, site, "%s", e.message);
    return 0;
}

/* ---- operand hooks ------------------------------------------------------------ */

/* A view of data with like's format and role (the hook quantizes by role)
 * and the given shape (trailing zeros: fewer dimensions). */
static emu_tensor hook_view(const emu_tensor *like, const float *data,
                            size_t d0, size_t d1, size_t d2, size_t d3)
{
    emu_tensor v = *like;
    const size_t d[4] = { d0, d1, d2, d3 };
    memset(v.shape, 0, sizeof v.shape);
    v.ndim = 0;
    v.n = 1;
    for (int k = 0; k < 4 && d[k]; k++) {
        v.shape[v.ndim++] = d[k];
        v.n *= d[k];
    }
    v.data = (float *)data; /* only read */
    v.owns_data = false;
    return v;
}

/* Replaces part p (0 q, 1 k, 2 v) of the packed qkv in dst (B T rows of
 * 3C) by the hook's replacement of that part of src, gathered as a
 * contiguous (B T, C) tensor seen as (B T H, hs) along hs (by_head) or as
 * (B, T, C) along T.  tmp holds 2 B T C values. */
static int hook_part(emu_ctx *ctx, const emu_operand_hook *hk, int which,
                     const emu_tensor *qkv, const attn_op *op, int p,
                     bool by_head, float *dst, float *tmp)
{
    const size_t BT = op->B * op->T, C = op->C;
    float *part = tmp, *rep = tmp + BT * C;
    for (size_t r = 0; r < BT; r++)
        memcpy(part + r * C, qkv->data + r * op->C3 + (size_t)p * C,
               C * sizeof *part);
    emu_tensor v = by_head ? hook_view(qkv, part, BT * op->H, op->hs, 0, 0)
                           : hook_view(qkv, part, op->B, op->T, C, 0);
    if (hk->fn(hk->user, ctx, which, &v, 1, rep))
        return -1;
    for (size_t r = 0; r < BT; r++)
        memcpy(dst + r * op->C3 + (size_t)p * C, rep + r * C,
               C * sizeof *dst);
    return 0;
}

/* One commit of a generic dot-product op into out. */
static int commit_dots(emu_ctx *ctx, const char *site, const char *suffix,
                       const char *kind, emu_tensor *out, bool scratch_out,
                       attn_op *op, enum at_dot what, const emu_rounding *rnd)
{
    char sub[EMU_TENSOR_NAME_MAX + 24];
    snprintf(sub, sizeof sub, "%s%s", site, suffix);
    const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP) &&
                       op->accum->kind != EMU_ACCUM_FAST;
    emu_accum_counts counts;
    memset(&counts, 0, sizeof counts);
    op->what = what;
    op->counts = swamp ? &counts : NULL;
    op->stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
    double *fres = NULL;
    float *f32 = NULL;
    /* Zero terms of the masked entries would turn an inf or NaN of a later
     * (or, for dv and dk, earlier) position into NaN: the GEMMs only with
     * finite operands. */
    if (op->accum->kind == EMU_ACCUM_FAST && op->finite) {
        /* Into a scratch output itself (each chunk's producer reads its own
         * positions only, before the choke point stores them); the caller's
         * out stays untouched until the commit. */
        const size_t T = op->T, big = T > op->hs ? T : op->hs;
        const size_t extra = scratch_out ? 0 : out->n;
        f32 = malloc((extra + T * big) * sizeof *f32);
        if (!f32)
            return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
        float *res = scratch_out ? out->data : f32;
        if (fast_gemms(op, res, f32 + extra)) {
            free(f32);
            return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
        }
        op->f32 = res;
    } else if (op->accum->kind != EMU_ACCUM_FAST) {
        fres = emu_scratch(ctx, site, 2 * out->n);
        if (!fres)
            return -1;
        if (engine_dots(op, fres, fres + out->n)) {
            free(fres);
            return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
        }
        op->ehi = fres;
        op->elo = fres + out->n;
    } else if (op->accum->kind == EMU_ACCUM_FAST) {
        const size_t T = op->T, big = T > op->hs ? T : op->hs;
        fres = emu_scratch(ctx, site, out->n + big);
        float *tmp = fres ? malloc(T * op->hs * sizeof *tmp) : NULL;
        if (!tmp) {
            free(fres);
            return fres ? emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory")
                        : -1;
        }
        fast_dots(op, fres, tmp, fres + out->n);
        free(tmp);
        op->fres = fres;
    }
    emu_op_out oo = { .site = sub, .kind = kind, .out = out, .fill = dot_fill,
                      .swamp = op->counts, .op = op, .ref = dot_ref,
                      .rnd = rnd, .store_early = true };
    if (f32 && !scaled(op)) {
        oo.fill = NULL;
        oo.fill32 = dot_fill32;
    }
    int rc = emu_commit_direct(ctx, &oo);
    op->counts = NULL;
    op->fres = NULL;
    op->f32 = NULL;
    op->ehi = op->elo = NULL;
    free(fres);
    free(f32);
    return rc;
}

int emu_t_attention(emu_ctx *ctx, const char *site, emu_tensor *out,
                    emu_tensor *att, const emu_tensor *qkv,
                    const emu_attention_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "attention";
    attn_op op;
    if (emu_check_rounding(ctx, site, rnd) ||
        check_common(ctx, site, o, qkv, &op))
        return -1;
    const emu_rounding *srnd = o->stat_rnd ? o->stat_rnd : rnd;
    if (emu_check_rounding(ctx, site, srnd) || check_att(ctx, site, att, &op) ||
        check_btc(ctx, site, "out", out, &op))
        return -1;
    if (emu_tensors_overlap(out, att) || emu_tensors_overlap(out, qkv) ||
        emu_tensors_overlap(att, qkv))
        return emu_ctx_fail(ctx, site, "out, att and qkv must not share storage");

    emu_tensor sc;
    if (scratch(ctx, site, &sc, ".scores", att, op.B * op.H * op.tri))
        return -1;
    /* The operand hook: q, k (for the scores) and v (for out) replaced in
     * one packed copy (each product reads its own parts), att in another. */
    const emu_operand_hook *hk =
        o->operands && o->operands->fn ? o->operands : NULL;
    const size_t BTC = op.B * op.T * op.C;
    float *qq = NULL, *aq = NULL, *tmp = NULL;
    int rc = 0;
    if (hk) {
        qq = malloc(qkv->n * sizeof *qq);
        aq = malloc(att->n * sizeof *aq);
        tmp = malloc(2 * BTC * sizeof *tmp);
        if (!qq || !aq || !tmp)
            rc = emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
        if (!rc && (hook_part(ctx, hk, EMU_ATTN_Q, qkv, &op, 0, true, qq, tmp) ||
                    hook_part(ctx, hk, EMU_ATTN_K, qkv, &op, 1, true, qq, tmp) ||
                    hook_part(ctx, hk, EMU_ATTN_V, qkv, &op, 2, false, qq, tmp)))
            rc = -1;
        op.qkv = qq;
    }
    op.finite = !rc && o->accum->kind == EMU_ACCUM_FAST &&
                emu_all_finite(op.qkv, qkv->n);
    op.e = rc ? NULL : malloc(op.T * sizeof *op.e);
    op.b32 = emu_format_find("binary32");
    if (!op.e) {
        free(qq);
        free(aq);
        free(tmp);
        emu_tensor_free(&sc);
        return rc ? -1 : emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    }
    rc = commit_dots(ctx, site, ".scores", "attn_scores", &sc, true, &op,
                     AT_SCORES, srnd);
    if (!rc) {
        char sub[EMU_TENSOR_NAME_MAX + 24];
        snprintf(sub, sizeof sub, "%s.softmax", site);
        const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP) &&
                           op.accum->kind != EMU_ACCUM_FAST;
        emu_accum_counts counts;
        memset(&counts, 0, sizeof counts);
        op.sc = sc.data;
        op.counts = swamp ? &counts : NULL;
        op.stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
        op.have_row = false;
        emu_op_out oo = { .site = sub, .kind = "attn_softmax", .out = att,
                          .fill = softmax_fill, .swamp = op.counts, .op = &op,
                          .ref = softmax_ref, .rnd = srnd, .store_early = true };
        rc = emu_commit_direct(ctx, &oo);
        op.counts = NULL;
    }
    if (!rc) {
        op.att = att->data;
        if (hk) {
            emu_tensor a = hook_view(att, att->data, op.B, op.H, op.T, op.T);
            rc = hk->fn(hk->user, ctx, EMU_ATTN_ATT, &a, 3, aq);
            op.att = aq;
        }
    }
    if (!rc)
        rc = commit_dots(ctx, site, "", "attention", out, false, &op, AT_OUT,
                         rnd);
    free(op.e);
    free(qq);
    free(aq);
    free(tmp);
    emu_tensor_free(&sc);
    return rc;
}

int emu_t_attention_backward(emu_ctx *ctx, const char *site, emu_tensor *dqkv,
                             const emu_tensor *dout, const emu_tensor *qkv,
                             const emu_tensor *att,
                             const emu_attention_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "attention";
    attn_op op;
    if (emu_check_rounding(ctx, site, rnd) ||
        check_common(ctx, site, o, qkv, &op))
        return -1;
    const emu_rounding *srnd = o->stat_rnd ? o->stat_rnd : rnd;
    if (emu_check_rounding(ctx, site, srnd) || check_att(ctx, site, att, &op) ||
        check_btc(ctx, site, "dout", dout, &op) ||
        emu_check_tensor(ctx, site, "dqkv", dqkv) ||
        emu_check_same_shape(ctx, site, "dqkv", dqkv, "qkv", qkv))
        return -1;
    if (emu_tensors_overlap(dqkv, dout) || emu_tensors_overlap(dqkv, qkv) ||
        emu_tensors_overlap(dqkv, att))
        return emu_ctx_fail(ctx, site, "dqkv shares storage with an input");

    const size_t B = op.B, T = op.T, C = op.C, H = op.H, BTC = B * T * C;
    const size_t rows = B * H * T;
    emu_tensor g[3] = { 0 }, tri;  /* dq, dk, dv; G then dS */
    memset(&tri, 0, sizeof tri);
    float *ds = NULL;
    double *R = NULL;
    int rc = scratch(ctx, site, &g[2], ".dv", dqkv, BTC);
    if (!rc)
        rc = scratch(ctx, site, &g[0], ".dq", dqkv, BTC);
    if (!rc)
        rc = scratch(ctx, site, &g[1], ".dk", dqkv, BTC);
    if (!rc)
        rc = scratch(ctx, site, &tri, ".datt", att, B * H * op.tri);
    if (!rc) {
        ds = calloc(rows * T, sizeof *ds);
        R = ds ? emu_scratch(ctx, site, rows) : NULL;
        if (!ds)
            rc = emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for %zu "
                               "values", rows * T);
        else if (!R)
            rc = -1;
    }
    op.att = att->data;
    op.dout = dout->data;
    /* The operand hook: v, k, q (for datt, dq, dk) replaced in one packed
     * copy, each product reading its own part; att and dout for dv, dout
     * for datt, dS for dq and for dk, each replaced before its product. */
    const emu_operand_hook *hk =
        o->operands && o->operands->fn ? o->operands : NULL;
    float *qq = NULL, *aq = NULL, *dq1 = NULL, *dq2 = NULL, *tmp = NULL;
    if (!rc && hk) {
        qq = malloc(qkv->n * sizeof *qq);
        aq = malloc(att->n * sizeof *aq); /* att for dv, then dS */
        dq1 = malloc(BTC * sizeof *dq1);
        dq2 = malloc(BTC * sizeof *dq2);
        tmp = malloc(2 * BTC * sizeof *tmp);
        if (!qq || !aq || !dq1 || !dq2 || !tmp)
            rc = emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
        if (!rc && (hook_part(ctx, hk, EMU_ATTN_V_DATT, qkv, &op, 2, true, qq,
                              tmp) ||
                    hook_part(ctx, hk, EMU_ATTN_K_DQ, qkv, &op, 1, false, qq,
                              tmp) ||
                    hook_part(ctx, hk, EMU_ATTN_Q_DK, qkv, &op, 0, false, qq,
                              tmp)))
            rc = -1;
        emu_tensor a = hook_view(att, att->data, B, H, T, T);
        emu_tensor d1 = hook_view(dout, dout->data, B, T, C, 0);
        emu_tensor d2 = hook_view(dout, dout->data, B * T * H, op.hs, 0, 0);
        if (!rc && (hk->fn(hk->user, ctx, EMU_ATTN_ATT_DV, &a, 2, aq) ||
                    hk->fn(hk->user, ctx, EMU_ATTN_DOUT_DV, &d1, 1, dq1) ||
                    hk->fn(hk->user, ctx, EMU_ATTN_DOUT_DATT, &d2, 1, dq2)))
            rc = -1;
        if (!rc) {
            op.qkv = qq;
            op.att = aq;
            op.dout = dq1;
        }
    }
    op.finite = !rc && o->accum->kind == EMU_ACCUM_FAST &&
                emu_all_finite(op.qkv, qkv->n) &&
                emu_all_finite(op.dout, dout->n) &&
                (!hk || emu_all_finite(dq2, dout->n));
    if (!rc)
        rc = commit_dots(ctx, site, ".dv", "attn_dv", &g[2], true, &op, AT_DV,
                         rnd);
    if (!rc && hk)
        op.dout = dq2;
    if (!rc)
        rc = commit_dots(ctx, site, ".datt", "attn_datt", &tri, true, &op, AT_DATT,
                         srnd);
    op.att = att->data;
    op.dout = dout->data;
    if (!rc) {
        /* R = the rows' sums of att G: dot products of the dscores commit */
        char sub[EMU_TENSOR_NAME_MAX + 24];
        snprintf(sub, sizeof sub, "%s.dscores", site);
        const bool swamp = ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP) &&
                           op.accum->kind != EMU_ACCUM_FAST;
        emu_accum_counts counts;
        memset(&counts, 0, sizeof counts);
        op.counts = swamp ? &counts : NULL;
        op.stream = emu_ctx_stream(ctx) ^ ACCUM_STREAM_TAG;
        op.sc = tri.data;
        for (size_t r = 0; r < rows; r++) {
            const size_t t = r % T;
            double lo;
            R[r] = model_dot(&op, att->data + r * T, 1,
                             tri.data + (r / T) * op.tri + t * (t + 1) / 2, 1,
                             t + 1, r, &lo);
            R[r] += lo;
        }
        op.R = R;
        /* dS overwrites G in place: each output reads its own G only */
        emu_op_out oo = { .site = sub, .kind = "attn_dscores", .out = &tri,
                          .fill = dscores_fill, .swamp = op.counts, .op = &op,
                          .ref = dscores_ref, .rnd = srnd, .store_early = true };
        rc = emu_commit_direct(ctx, &oo);
        op.counts = NULL;
    }
    if (!rc) {
        /* dS unpacked into (B, H, T, T) with zeros above the diagonal */
        for (size_t r = 0; r < rows; r++) {
            const size_t t = r % T;
            memcpy(ds + r * T, tri.data + (r / T) * op.tri + t * (t + 1) / 2,
                   (t + 1) * sizeof *ds);
        }
        op.ds = ds;
        if (hk) {
            emu_tensor v = hook_view(&tri, ds, B, H, T, T);
            v.role = dout->role;
            rc = hk->fn(hk->user, ctx, EMU_ATTN_DS_DQ, &v, 3, aq);
            op.ds = aq;
        }
    }
    if (!rc)
        rc = commit_dots(ctx, site, ".dq", "attn_dq", &g[0], true, &op, AT_DQ,
                         rnd);
    if (!rc && hk) {
        emu_tensor v = hook_view(&tri, ds, B, H, T, T);
        v.role = dout->role;
        rc = hk->fn(hk->user, ctx, EMU_ATTN_DS_DK, &v, 2, aq);
    }
    if (!rc)
        rc = commit_dots(ctx, site, ".dk", "attn_dk", &g[1], true, &op, AT_DK,
                         rnd);
    if (!rc) {
        /* [dq | dk | dv]: exact copies, the values are in dqkv's format */
        for (size_t bt = 0; bt < B * T; bt++)
            for (int p = 0; p < 3; p++)
                memcpy(dqkv->data + bt * 3 * C + (size_t)p * C,
                       g[p].data + bt * C, C * sizeof(float));
    }
    for (int p = 0; p < 3; p++)
        emu_tensor_free(&g[p]);
    emu_tensor_free(&tri);
    free(ds);
    free(R);
    free(qq);
    free(aq);
    free(dq1);
    free(dq2);
    free(tmp);
    return rc;
}
