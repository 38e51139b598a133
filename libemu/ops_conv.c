/*
 * ops_conv.c — 2-d convolution (NCHW, stride, zero padding): forward,
 * gradient with respect to the data, gradient with respect to the weights
 * and the bias.
 *
 * Every output is one dot product under o->accum, and since the
 * accumulator models round at every step, the terms and their order are
 * part of the definition (ops.h states them):
 *
 *   y[n,co,oh,ow]  = bias[co] * 1, then w[co,ci,kh,kw] * x[n,ci,ih,iw]
 *                    over (ci, kh, kw) in that order, ih = oh*s - pad + kh,
 *                    iw = ow*s - pad + kw; a padded position is the term
 *                    w * 0.  K = Ci*KH*KW terms, + 1 with a bias.
 *   dx[n,ci,ih,iw] = w[co,ci,kh,kw] * dy[n,co,oh,ow] over (co, kh, kw), where
 *                    oh = (ih + pad - kh) / s when that is an integer in
 *                    [0, Ho) (likewise ow); otherwise the term is w * 0.
 *                    K = Co*KH*KW terms.
 *   dw[co,ci,kh,kw] = dy[n,co,oh,ow] * x[n,ci,ih,iw] over (n, oh, ow), padded
 *                    x = 0.  K = N*Ho*Wo terms.
 *   dbias[co]      = the sum (no products) of dy[n,co,oh,ow] over (n, oh, ow).
 *
 * Zero terms are kept, not skipped, so that a blocked or fused model sees
 * the same K for every output (as an im2col GEMM unit does).  Each family
 * is one GEMM through emu_gemm_accum() on an im2col ("im2row") matrix with
 * the k index contiguous; the dot-product numbers that pick stochastic
 * accumulator words are those of that GEMM:
 *   forward: ((n*Ho + oh)*Wo + ow)*Co + co;  data: ((n*H + ih)*W + iw)*Ci + ci;
 *   weights: the flat index of dw;           bias: co (in the bias op).
 *
 * o->alpha (0 means 1; any positive value, applied without error) multiplies the
 * accumulator's result of every output, dbias included, before the one
 * output rounding: per-layer loss scaling applied where gradients form.
 *
 * The MPFR reference gathers the same terms straight from the tensors (not
 * from the im2row matrix) and forms the exact dot product with mpfr_dot.
 *
 * Called by the nn layer's convolution layers and the CLI.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

typedef struct conv_geom {
    size_t N, Ci, H, W, Co, KH, KW, Ho, Wo, s, pad;
    double alpha;   /* output scale (emu_scale_pairs) */
} conv_geom;

static int check_4d(emu_ctx *ctx, const char *site, const char *what,
                    const emu_tensor *t, size_t d0, size_t d1, size_t d2,
                    size_t d3)
{
    if (t->ndim == 4 && t->shape[0] == d0 && t->shape[1] == d1 &&
        t->shape[2] == d2 && t->shape[3] == d3)
        return 0;
    char want[128];
    snprintf(want, sizeof want, "(%zu, %zu, %zu, %zu)", d0, d1, d2, d3);
    return emu_shape_fail(ctx, site, what, t, want);
}

/* Geometry from an image-shaped tensor `img` (x or dx), named `iw`, and
 * a weight-shaped one `wt` (w or dw). */
static int conv_geometry(emu_ctx *ctx, const char *site, const char *iname,
                         const emu_tensor *img, const char *wname,
                         const emu_tensor *wt, const emu_conv_opts *o,
                         conv_geom *g)
{
    if (!o)
        return emu_ctx_fail(ctx, site, "convolution options: NULL");
    if (o->stride < 1 || o->pad < 0)
        return emu_ctx_fail(ctx, site, "stride %d, pad %d: the stride must "
                            "be at least 1 and the padding at least 0",
                            o->stride, o->pad);
    if (img->ndim != 4)
        return emu_shape_fail(ctx, site, iname, img, "an (N, C, H, W) image");
    if (wt->ndim != 4)
        return emu_shape_fail(ctx, site, wname, wt, "(C_out, C_in, KH, KW) weights");
    g->N = img->shape[0];
    g->Ci = img->shape[1];
    g->H = img->shape[2];
    g->W = img->shape[3];
    g->Co = wt->shape[0];
    g->KH = wt->shape[2];
    g->KW = wt->shape[3];
    g->s = (size_t)o->stride;
    g->pad = (size_t)o->pad;
    if (wt->shape[1] != g->Ci)
        return emu_ctx_fail(ctx, site, "channel mismatch: %s '%s' has %zu "
                            "channels, %s '%s' expects %zu", iname, img->name,
                            g->Ci, wname, wt->name, wt->shape[1]);
    if (g->H + 2 * g->pad < g->KH || g->W + 2 * g->pad < g->KW)
        return emu_ctx_fail(ctx, site, "a %zux%zu kernel does not fit in the "
                            "%zux%zu input '%s' padded by %zu: no output",
                            g->KH, g->KW, g->H, g->W, img->name, g->pad);
    g->Ho = (g->H + 2 * g->pad - g->KH) / g->s + 1;
    g->Wo = (g->W + 2 * g->pad - g->KW) / g->s + 1;
    g->alpha = o->alpha == 0.0 ? 1.0 : o->alpha;
    if (!(g->alpha > 0.0) || !isfinite(g->alpha))
        return emu_ctx_fail(ctx, site, "alpha %g is not positive and finite",
                            o->alpha);
    return 0;
}

/* a * b * c * d elements, or 0 if that overflows (or any is 0). */
static size_t mul4(size_t a, size_t b, size_t c, size_t d)
{
    size_t f[4] = { a, b, c, d }, p = 1;
    for (int i = 0; i < 4; i++) {
        if (f[i] == 0 || p > SIZE_MAX / sizeof(double) / f[i])
            return 0;
        p *= f[i];
    }
    return p;
}

/* Floats past the end of an im2row matrix (and of the planes it is copied
 * from) that its copies may write (read): see copy_taps. */
enum { ROW_SLACK = 4 };

static float *falloc(emu_ctx *ctx, const char *site, size_t rows, size_t cols)
{
    size_t n = mul4(rows, cols, 1, 1);
    float *p = n ? malloc((n + ROW_SLACK) * sizeof *p) : NULL;
    if (!p)
        emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for a %zu x %zu im2col matrix",
                     rows, cols);
    return p;
}

/* Outputs must not share storage with inputs: an in-place convolution has
 * no meaning (each output reads many inputs). */
static int check_no_alias(emu_ctx *ctx, const char *site, const emu_tensor *out,
                          const emu_tensor *a, const emu_tensor *b,
                          const emu_tensor *c)
{
    const emu_tensor *in[3] = { a, b, c };
    for (int i = 0; i < 3; i++)
        if (emu_tensors_overlap(out, in[i]))
            return emu_ctx_fail(ctx, site, "output '%s' shares storage with "
                                "input '%s'", out->name, in[i]->name);
    return 0;
}

/* x[n, ci, ih, iw] with zero padding (ih, iw as signed positions). */
static float x_at(const conv_geom *g, const float *x, size_t n, size_t ci,
                  ptrdiff_t ih, ptrdiff_t iw)
{
    if (ih < 0 || iw < 0 || (size_t)ih >= g->H || (size_t)iw >= g->W)
        return 0.0f;
    return x[((n * g->Ci + ci) * g->H + (size_t)ih) * g->W + (size_t)iw];
}

/* n floats from src to dst; with n a constant (the kernel widths that
 * im2row and im2row_data specialise) memcpy is a few moves, no call (a
 * loop of n copies is not unrolled at -O2).  The runs of kernel widths 3,
 * 5 and 7 are copied as 4 or 8 floats (one vector move), when the source
 * planes have ROW_SLACK floats after them (row_src.slack): the up to 3
 * floats past a run land where the next run (or the next row) is written
 * next, and past the last row in the matrix's ROW_SLACK. */
static EMU_KERNEL_INLINE void copy_taps(float *dst, const float *src,
                                        size_t n)
{
    memcpy(dst, src, n * sizeof *dst);
}

/* Rows r0 .. r1 of im2row from an image whose padding is already in it:
 * xp has Hp x Wp planes, and row (n, oh, ow)'s taps (ci, kh, kw) are the
 * runs xp[n, ci, oh*s + kh, ow*s .. ow*s + KW): one copy of KW values per
 * (ci, kh), no bounds to test.  KH, KW and copy (the floats each copy
 * moves: KW, or more with slack) are constants where inlined below. */
static EMU_KERNEL_INLINE void im2row_runs(const conv_geom *g, const float *xp,
                                          size_t Hp, size_t Wp, bool ones,
                                          size_t r0, size_t r1, float *rows,
                                          size_t KH, size_t KW, size_t copy)
{
    const size_t K = g->Ci * KH * KW + (ones ? 1 : 0);
    const size_t plane = Hp * Wp;
    size_t ow = r0 % g->Wo, oh = (r0 / g->Wo) % g->Ho, n = r0 / (g->Wo * g->Ho);
    for (float *r = rows; r0 < r1; r0++, r += K) {
        float *p = r;
        if (ones)
            *p++ = 1.0f;
        const float *x0 = xp + n * g->Ci * plane + oh * g->s * Wp + ow * g->s;
        for (size_t ci = 0; ci < g->Ci; ci++, x0 += plane) {
            /* (GCC -O3 leaves a loop of 5 runs rolled: 3 instructions of
             * loop beside the copy's 4) */
#pragma GCC unroll 7
            for (size_t kh = 0; kh < KH; kh++, p += KW)
                copy_taps(p, x0 + kh * Wp, copy);
        }
        if (++ow == g->Wo) {
            ow = 0;
            if (++oh == g->Ho) {
                oh = 0;
                n++;
            }
        }
    }
}

/* Rows r0 .. r1 of the data gradient's matrix from dp (see
 * row_src_data): row (n, ih, iw), taps (co, kh, kw) = the run
 * dp[n, co, ih + KH-1 - kh, W-1 - iw .. W-1 - iw + KW).  KH, KW and copy
 * are constants where inlined below, as in im2row_runs. */
static EMU_KERNEL_INLINE void data_runs(const conv_geom *g, const float *dp,
                                        size_t Hp, size_t Wp, size_t r0,
                                        size_t r1, float *rows, size_t KH,
                                        size_t KW, size_t copy)
{
    const size_t K = g->Co * KH * KW, plane = Hp * Wp;
    size_t iw = r0 % g->W, ih = (r0 / g->W) % g->H, n = r0 / (g->W * g->H);
    for (float *r = rows; r0 < r1; r0++, r += K) {
        float *p = r;
        const float *d0 = dp + n * g->Co * plane + (ih + KH - 1) * Wp +
                          (g->W - 1 - iw);
        for (size_t co = 0; co < g->Co; co++, d0 += plane) {
#pragma GCC unroll 7
            for (size_t kh = 0; kh < KH; kh++, p += KW)
                copy_taps(p, d0 - kh * Wp, copy);
        }
        if (++iw == g->W) {
            iw = 0;
            if (++ih == g->H) {
                ih = 0;
                n++;
            }
        }
    }
}

/* The output position fed through a tap at offset t = i + pad - k of an
 * input position ((t / s when t is a multiple of s in [0, s*n_out)), or
 * -1. */
static ptrdiff_t dy_pos_t(ptrdiff_t t, size_t s, size_t n_out)
{
    if (t < 0 || (size_t)t % s || (size_t)t / s >= n_out)
        return -1;
    return (ptrdiff_t)((size_t)t / s);
}

/* The left operand of a forward or data-gradient GEMM (an im2row matrix
 * of P rows and K columns), made a block of rows at a time from planes
 * prepared once (row_src_fill), so that the fast model never holds the
 * whole matrix (see conv_rows_gemm). */
typedef struct row_src {
    const conv_geom *g;
    bool data;          /* the data gradient's matrix, else im2row */
    bool ones;          /* im2row: a first column of ones (the bias) */
    bool slack;         /* src has ROW_SLACK readable floats after it */
    const float *src;   /* the planes the rows are copied from */
    float *own;         /* src's storage when made here */
    size_t Hp, Wp;
} row_src;

/* The forward pass's im2row: row (n, oh, ow), column (ci, kh, kw),
 * preceded by a column of ones when `ones`; a padded position holds +0.
 * With padding, x is first copied into zero-bordered planes (a pass over
 * the image, small beside the matrix, which is KH*KW times larger), so
 * that every row is made of plain runs.  Returns -1 if that copy cannot
 * be allocated. */
static int row_src_im2row(const conv_geom *g, const float *x, bool ones,
                          row_src *s)
{
    *s = (row_src){ .g = g, .ones = ones, .src = x, .Hp = g->H + 2 * g->pad,
                    .Wp = g->W + 2 * g->pad };
    if (!g->pad)
        return 0;
    const size_t planes = g->N * g->Ci, all = mul4(planes, s->Hp, s->Wp, 1);
    const size_t pad = g->pad, Wp = s->Wp;
    float *xp = all ? malloc((all + ROW_SLACK) * sizeof *xp) : NULL;
    if (!xp)
        return -1;
    /* the image in the middle, +0.0 in the border only (not a pass that
     * zeroes the planes and another that overwrites most of them) */
    for (size_t q = 0; q < planes; q++) {
        float *o = xp + q * s->Hp * Wp;
        memset(o, 0, pad * Wp * sizeof *o);
        o += pad * Wp;
        for (size_t ih = 0; ih < g->H; ih++, o += Wp) {
            for (size_t k = 0; k < pad; k++)
                o[k] = o[pad + g->W + k] = 0.0f;
            memcpy(o + pad, x + (q * g->H + ih) * g->W, g->W * sizeof *o);
        }
        memset(o, 0, pad * Wp * sizeof *o);
    }
    memset(xp + all, 0, ROW_SLACK * sizeof *xp);
    s->src = s->own = xp;
    s->slack = true;
    return 0;
}

/* The matrix of the data gradient: row (n, ih, iw), column (co, kh, kw),
 * dy[n, co, oh, ow] where output (oh, ow) is fed by (ih, iw) through tap
 * (kh, kw) (dy_pos_t), +0 where none is.  dy is first spread into planes dp
 * of (H + KH-1) x (W + KW-1): dp[r][c] is the dy reached at the row
 * offset t = r + pad - (KH-1) and the column offset W-1 + pad - c (+0 if
 * none, stride included), so that the taps (kh, kw) of one co and kh are
 * KW neighbours, in kw order.  Returns -1 if dp cannot be allocated. */
static int row_src_data(const conv_geom *g, const float *dy, row_src *s)
{
    const size_t Hp = g->H + g->KH - 1, Wp = g->W + g->KW - 1;
    const size_t planes = g->N * g->Co, plane = Hp * Wp;
    const size_t all = mul4(planes, Hp, Wp, 1);
    *s = (row_src){ .g = g, .data = true, .Hp = Hp, .Wp = Wp };
    float *dp = all ? malloc((all + ROW_SLACK) * sizeof *dp) : NULL;
    ptrdiff_t *map = malloc((Hp + Wp) * sizeof *map);
    if (!dp || !map) {
        free(dp);
        free(map);
        return -1;
    }
    ptrdiff_t *ohm = map, *owm = map + Hp;
    for (size_t r = 0; r < Hp; r++)
        ohm[r] = dy_pos_t((ptrdiff_t)(r + g->pad) - (ptrdiff_t)(g->KH - 1),
                          g->s, g->Ho);
    size_t clo = Wp, chi = 0; /* the columns that reach a dy */
    for (size_t c = 0; c < Wp; c++) {
        owm[c] = dy_pos_t((ptrdiff_t)(g->W - 1 + g->pad) - (ptrdiff_t)c,
                          g->s, g->Wo);
        if (owm[c] >= 0) {
            clo = c < clo ? c : clo;
            chi = c + 1;
        }
    }
    /* At stride 1 they are one run, dy's row reversed between +0
     * borders: copied as such, not through owm a column at a time (that
     * loop was 1.5% of the CNN's step) */
    const bool run = g->s == 1 && clo < chi;
    for (size_t q = 0; q < planes; q++) {
        const float *d = dy + q * g->Ho * g->Wo;
        float *o = dp + q * plane;
        for (size_t r = 0; r < Hp; r++, o += Wp) {
            if (ohm[r] < 0) {
                memset(o, 0, Wp * sizeof *o); /* +0.0 */
                continue;
            }
            const float *dr = d + (size_t)ohm[r] * g->Wo;
            if (run) {
                const float *src = dr + owm[clo];
                memset(o, 0, clo * sizeof *o);
                for (size_t k = 0; k < chi - clo; k++)
                    o[clo + k] = src[-(ptrdiff_t)k];
                memset(o + chi, 0, (Wp - chi) * sizeof *o);
                continue;
            }
            for (size_t c = 0; c < Wp; c++)
                o[c] = owm[c] < 0 ? 0.0f : dr[owm[c]];
        }
    }
    free(map);
    memset(dp + all, 0, ROW_SLACK * sizeof *dp);
    s->src = s->own = dp;
    s->slack = true;
    return 0;
}

/* Rows r0 .. r1 of the matrix into rows ((r1 - r0) x K, and ROW_SLACK
 * floats after them that may be overwritten).  Copies only, so every
 * instruction set gives the same bytes: compiled for AVX2 and AVX-512 too
 * (EMU_TARGET_CLONES), where a run of 5 or 7 taps (8 floats) is one
 * vector move instead of SSE2's two (row_src_fill was 11% of the CNN's
 * fp32 step). */
EMU_TARGET_CLONES
static void row_src_fill(const row_src *s, size_t r0, size_t r1, float *rows)
{
    const conv_geom *g = s->g;
    const float *p = s->src;
    const size_t Hp = s->Hp, Wp = s->Wp;
    /* square kernels of the specialised widths have their height
     * constant too (the loop over kh unrolled) */
    const size_t KH = g->KH, KW = g->KW;
    const size_t sq = KH == KW ? KW : 0;
    const bool w = s->slack;
#define ROW_RUNS(runs, ...)                                                  \
    do {                                                                     \
        if (KW == 1 && KH == 1)                                              \
            runs(__VA_ARGS__, 1, 1, 1);                                      \
        else if (sq == 3 && w)                                               \
            runs(__VA_ARGS__, 3, 3, 4);                                      \
        else if (sq == 5 && w)                                               \
            runs(__VA_ARGS__, 5, 5, 8);                                      \
        else if (sq == 7 && w)                                               \
            runs(__VA_ARGS__, 7, 7, 8);                                      \
        else if (KW == 1)                                                    \
            runs(__VA_ARGS__, KH, 1, 1);                                     \
        else if (KW == 3)                                                    \
            runs(__VA_ARGS__, KH, 3, 3);                                     \
        else if (KW == 5)                                                    \
            runs(__VA_ARGS__, KH, 5, 5);                                     \
        else if (KW == 7)                                                    \
            runs(__VA_ARGS__, KH, 7, 7);                                     \
        else                                                                 \
            runs(__VA_ARGS__, KH, KW, KW);                                   \
    } while (0)
    if (s->data)
        ROW_RUNS(data_runs, g, p, Hp, Wp, r0, r1, rows);
    else
        ROW_RUNS(im2row_runs, g, p, Hp, Wp, s->ones, r0, r1, rows);
#undef ROW_RUNS
}

static void row_src_free(row_src *s)
{
    free(s->own);
    s->own = NULL;
}

/* dy[n, co, oh, ow] feeding input position (ih, iw) through kernel tap
 * (kh, kw), or 0 if no output position does. */
static float dy_at(const conv_geom *g, const float *dy, size_t n, size_t co,
                   size_t ih, size_t iw, size_t kh, size_t kw)
{
    size_t th = ih + g->pad, tw = iw + g->pad;
    if (th < kh || tw < kw)
        return 0.0f;
    th -= kh;
    tw -= kw;
    if (th % g->s || tw % g->s)
        return 0.0f;
    size_t oh = th / g->s, ow = tw / g->s;
    if (oh >= g->Ho || ow >= g->Wo)
        return 0.0f;
    return dy[((n * g->Co + co) * g->Ho + oh) * g->Wo + ow];
}

static bool swamp_measured(const emu_ctx *ctx)
{
    return ctx->stats && (ctx->measure & EMU_MEASURE_SWAMP);
}

static uint64_t accum_stream(const emu_ctx *ctx)
{
    return emu_ctx_stream(ctx) ^ ((uint64_t)1 << 63);
}

/* ---- references: the terms of one output, and mpfr_dot ------------------ */

typedef struct conv_op conv_op;
/* Fills a[k], b[k] with the terms of output i; returns their number. */
typedef size_t (*gather_fn)(const conv_op *op, size_t i, float *a, float *b);

typedef struct ref_ws {
    bool init, failed;
    size_t cap;
    float *a, *b;
    mpfr_t *ma, *mb;
    mpfr_ptr *pa, *pb;
} ref_ws;

struct conv_op {
    conv_geom g;
    const float *x, *w, *bias, *dy;
    gather_fn gather;
    size_t max_terms;
    ref_ws *ws;
    /* The GEMM's results, for the producer that hands them to the choke
     * point (from the GEMM's (N*P, C) layout in NCHW order, or as they
     * are). */
    emu_gemm_src out;
};

/* emu_op_out.fill and fill32: the GEMM's results, read in NCHW order
 * while the choke point rounds the chunk (a transpose that costs no pass
 * of its own). */
static int conv_fill(const void *opv, size_t i0, size_t m, double *hi,
                     double *lo)
{
    return emu_gemm_src_fill(&((const conv_op *)opv)->out, i0, m, hi, lo);
}

static void conv_fill32(const void *opv, size_t i0, size_t m, float *v)
{
    emu_gemm_src_fill32(&((const conv_op *)opv)->out, i0, m, v);
}

/* The GEMM of a convolution: emu_gemm_accum's values in hi (lo), or
 * under the fast model its binary32 values in a new array *f32 (the
 * producers scale and transpose them; nothing is widened). */
static int conv_gemm(emu_ctx *ctx, const emu_accum *model, size_t M,
                     size_t N, size_t K, const float *a, ptrdiff_t a_rs,
                     ptrdiff_t a_cs, const float *b, ptrdiff_t b_rs,
                     ptrdiff_t b_cs, double *hi, double *lo,
                     emu_accum_counts *counts, float **f32)
{
    *f32 = NULL;
    if (model->kind != EMU_ACCUM_FAST)
        return emu_gemm_accum(model, M, N, K, a, a_rs, a_cs, b, b_rs, b_cs,
                              hi, lo, ctx->seed, accum_stream(ctx), counts,
                              ctx->threads);
    const size_t mn = M * N;
    float *f = malloc((mn ? mn : 1) * sizeof *f);
    if (!f || emu_gemm_fast_f32_mt(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs,
                                   NULL, f, ctx->threads)) {
        free(f);
        return -1;
    }
    *f32 = f;
    return 0;
}

/* The fast model's row blocks (conv_rows_gemm): at least this many
 * multiply-adds each, and about this many bytes of rows if that is more. */
#define CONV_BLOCK_MACS 2000000.0
#define CONV_BLOCK_BYTES ((size_t)256 * 1024)

#if EMU_HAVE_ISA_CLONES
#include <immintrin.h>

/* block_to_nchw's run of one image for C a multiple of 8 (AVX2): tiles of
 * 8 positions x 8 channels loaded as 8 runs of channels, transposed in
 * registers, stored as 8 runs of positions (a move of values, nothing
 * computed); the scalar loop's stride-C loads were 3.6% of a resnet:1
 * step.  Returns the positions done (len rounded down to a multiple of
 * 8). */
EMU_ISA_TARGET_AVX2
static size_t nchw_tiles_avx2(const float *src, size_t len, size_t C,
                              size_t pp, float *dst)
{
    const size_t done = len / 8 * 8;
    for (size_t j = 0; j < done; j += 8) {
        const float *s = src + j * C;
        for (size_t c = 0; c < C; c += 8, s += 8) {
            const __m256 r0 = _mm256_loadu_ps(s);
            const __m256 r1 = _mm256_loadu_ps(s + C);
            const __m256 r2 = _mm256_loadu_ps(s + 2 * C);
            const __m256 r3 = _mm256_loadu_ps(s + 3 * C);
            const __m256 r4 = _mm256_loadu_ps(s + 4 * C);
            const __m256 r5 = _mm256_loadu_ps(s + 5 * C);
            const __m256 r6 = _mm256_loadu_ps(s + 6 * C);
            const __m256 r7 = _mm256_loadu_ps(s + 7 * C);
            /* pairs of rows interleaved, then 4-row columns in each
             * 128-bit half (column k | column k + 4), then the halves */
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1);
            const __m256 t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3);
            const __m256 t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 t4 = _mm256_unpacklo_ps(r4, r5);
            const __m256 t5 = _mm256_unpackhi_ps(r4, r5);
            const __m256 t6 = _mm256_unpacklo_ps(r6, r7);
            const __m256 t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44);
            const __m256 u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44);
            const __m256 u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44);
            const __m256 u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44);
            const __m256 u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *d = dst + c * pp + j;
            _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d + pp, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d + 2 * pp, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d + 3 * pp, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d + 4 * pp, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d + 5 * pp, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d + 6 * pp, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(d + 7 * pp, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
    }
    return done;
}
#endif

/* Rows r0 .. r1 of a GEMM's (P x C) result, fb (rows r0.. at fb[0]), into
 * f in NCHW order: position p of image n, channel c at (n*C + c)*pp + p,
 * pp positions per image.  Each channel's run of an image is written in
 * order while fb, one block, is in cache (the stride-C reads stay there). */
static void block_to_nchw(const float *fb, size_t r0, size_t r1, size_t C,
                          size_t pp, float *f)
{
#if EMU_HAVE_ISA_CLONES
    const bool tiles = C % 8 == 0 && emu_isa_active() >= EMU_ISA_AVX2;
#else
    const bool tiles = false;
#endif
    for (size_t r = r0; r < r1;) {
        const size_t n = r / pp, p = r % pp;
        const size_t len = r1 - r < pp - p ? r1 - r : pp - p;
        const float *src = fb + (r - r0) * C;
        float *dst = f + n * C * pp + p;
        size_t j0 = 0;
#if EMU_HAVE_ISA_CLONES
        if (tiles)
            j0 = nchw_tiles_avx2(src, len, C, pp, dst);
#endif
        /* 32 positions at a time: their C floats (<= 32 cache lines for
         * C <= 256) stay in L1 while every channel's run reads them */
        for (; j0 < len; j0 += 32) {
            const size_t j1 = len - j0 < 32 ? len : j0 + 32;
            for (size_t c = 0; c < C; c++)
                for (size_t j = j0; j < j1; j++)
                    dst[c * pp + j] = src[j * C + c];
        }
        r += len;
    }
    (void)tiles;
}

/* conv_rows_gemm's fast model on T threads.  Its one-thread blocks
 * number nblk (R rows each, the last up to 2R - 1), R a multiple of
 * sgemm's row panel width (emu_fast_row_granule, nonzero here: nblk >= 2);
 * those blocks have the bits of one sgemm on the whole of A, and so has
 * any block starting on a multiple of the width: here nb, nblk rounded
 * down to a multiple of the parts, blocks of about P / nb rows (an even
 * share cut at the nearest multiple of the width, so never below R / 2
 * rows: still past the small-matrix kernels), for an even load.  Part t
 * takes blocks nb*t/T .. nb*(t+1)/T - 1. */
typedef struct rows_part {
    size_t P, C, K, nb, pp, g, maxrows;
    const row_src *src;
    const float *whole;
    const float *b;
    float *f;
    int rc[EMU_POOL_MAX];
} rows_part;

/* The first row of block i (i = nb: P). */
static size_t rows_block(const rows_part *rp, size_t i)
{
    if (i >= rp->nb)
        return rp->P;
    const size_t r = (rp->P * i / rp->nb + rp->g / 2) / rp->g * rp->g;
    return r < rp->P ? r : rp->P;
}

static void rows_part_run(void *p, int t, int T)
{
    rows_part *rp = p;
    const size_t K = rp->K, nb = rp->nb;
    const size_t i0 = nb * (size_t)t / (size_t)T;
    const size_t i1 = nb * (size_t)(t + 1) / (size_t)T;
    float *blk = rp->whole
                     ? NULL
                     : malloc((rp->maxrows * K + ROW_SLACK) * sizeof *blk);
    float *fb = malloc((rp->maxrows * rp->C + 1) * sizeof *fb);
    int rc = (blk || rp->whole) && fb ? 0 : -1;
    for (size_t i = i0; rc == 0 && i < i1; i++) {
        const size_t r0 = rows_block(rp, i), r1 = rows_block(rp, i + 1);
        if (r1 <= r0)
            continue;
        const float *a = blk;
        if (rp->whole)
            a = rp->whole + r0 * K;
        else
            row_src_fill(rp->src, r0, r1, blk);
        rc = emu_gemm_fast_f32_part(r1 - r0, rp->C, K, a, (ptrdiff_t)K, 1,
                                    rp->b, 1, (ptrdiff_t)K, NULL, fb);
        if (rc == 0) /* rows r0 .. r1 are this part's alone */
            block_to_nchw(fb, r0, r1, rp->C, rp->pp, rp->f);
    }
    free(fb);
    free(blk);
    rp->rc[t] = rc;
}

static int conv_rows_gemm_mt(size_t P, size_t C, size_t K, size_t pp,
                             size_t g, size_t nblk, int threads,
                             const row_src *src, const float *whole,
                             const float *b, float **f32)
{
    size_t T = (size_t)threads < nblk ? (size_t)threads : nblk;
    if (T > EMU_POOL_MAX)
        T = EMU_POOL_MAX;
    rows_part rp = { .P = P, .C = C, .K = K, .nb = nblk / T * T,
                     .pp = pp, .g = g,
                     .src = src, .whole = whole, .b = b };
    for (size_t i = 0; i < rp.nb; i++) {
        const size_t rows = rows_block(&rp, i + 1) - rows_block(&rp, i);
        if (rows > rp.maxrows)
            rp.maxrows = rows;
    }
    rp.f = malloc(P * C * sizeof *rp.f);
    if (!rp.f)
        return -1;
    emu_gemm_fast_pin();
    emu_pool_run((int)T, rows_part_run, &rp);
    for (size_t t = 0; t < T; t++)
        if (rp.rc[t]) {
            free(rp.f);
            return -1;
        }
    *f32 = rp.f;
    return 0;
}

static size_t gcd_size(size_t a, size_t b)
{
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The GEMM out(P x C) = A(P x K) B^T of a forward or a data-gradient
 * pass, A the rows of src and B(c, k) = b[c*K + k]: emu_gemm_accum's hi
 * (lo) from the whole of A under the emulated models; under the fast
 * model its binary32 values in a new array *f32, a block of A's rows at
 * a time, each block copied out just before its sgemm reads it, while it
 * is in cache: the matrix, KH*KW times the image, is never written to
 * memory and read back.  The fast model's results are stored in NCHW
 * order (pp positions per image, block_to_nchw) as each block's sgemm
 * ends, while they are in cache, rather than gathered across the whole
 * (P x C) array by the commit.  The bits are those of one sgemm on
 * the whole of A (test_ops_conv's fast_is_sgemm_on_the_matrices): an
 * output of sgemm is its own dot product, whose summation order depends
 * on K but not on the rows around it, except in the small-matrix kernels
 * that OpenBLAS 0.3's x86-64 builds use below 10^6 multiply-adds; a block
 * has twice that at least (the last takes the remainder, so it is never
 * shorter), and a GEMM too small for two blocks is one call as before.
 * With whole (fast model only), A is that matrix, already made, and src
 * is not read. */
static int conv_rows_gemm(emu_ctx *ctx, const emu_accum *model, size_t P,
                          size_t C, size_t K, size_t pp,
                          const row_src *src, const float *whole,
                          const float *b, double *hi, double *lo,
                          emu_accum_counts *counts, float **f32)
{
    *f32 = NULL;
    if (model->kind != EMU_ACCUM_FAST) {
        size_t n = mul4(P, K, 1, 1);
        float *rows = n ? malloc((n + ROW_SLACK) * sizeof *rows) : NULL;
        if (!rows)
            return -1;
        row_src_fill(src, 0, P, rows);
        int rc = conv_gemm(ctx, model, P, C, K, rows, (ptrdiff_t)K, 1, b, 1,
                           (ptrdiff_t)K, hi, lo, counts, f32);
        free(rows);
        return rc;
    }
    size_t R = (size_t)(CONV_BLOCK_MACS / (double)(C * K)) + 1;
    if (R < CONV_BLOCK_BYTES / (K * sizeof(float)))
        R = CONV_BLOCK_BYTES / (K * sizeof(float));
    /* Blocks start on multiples of sgemm's row panel width (64 rows
     * where the panels divide 64, as SkylakeX's do; 192 under the Haswell
     * kernels' 12), so that every row is in the panel it had in one call;
     * where no width is known, one call. */
    const size_t g = emu_fast_row_granule();
    const size_t unit = !g ? P : 64 % g == 0 ? 64 : 64 / gcd_size(64, g) * g;
    R = unit ? (R + unit - 1) / unit * unit : P;
    if (R > P)
        R = P;
    const size_t nblk = P / R; /* what the loop below makes (>= 1) */
    const int T = ctx && ctx->threads > 1 ? ctx->threads : 1;
    if (T > 1 && nblk >= 2)
        return conv_rows_gemm_mt(P, C, K, pp, g, nblk, T, src, whole, b, f32);
    const size_t nf = P * C, nb = 2 * R * K; /* the last block: < 2R rows */
    float *f = malloc((nf ? nf : 1) * sizeof *f);
    float *blk = whole ? NULL : malloc((nb + ROW_SLACK) * sizeof *blk);
    float *fb = malloc((2 * R * C + 1) * sizeof *fb);
    int rc = f && (blk || whole) && fb ? 0 : -1;
    for (size_t r0 = 0; rc == 0 && r0 < P;) {
        size_t r1 = P - r0 < 2 * R ? P : r0 + R;
        const float *a = blk;
        if (whole)
            a = whole + r0 * K;
        else
            row_src_fill(src, r0, r1, blk);
        rc = emu_gemm_fast_f32(r1 - r0, C, K, a, (ptrdiff_t)K, 1, b, 1,
                               (ptrdiff_t)K, NULL, fb);
        if (rc == 0)
            block_to_nchw(fb, r0, r1, C, pp, f);
        r0 = r1;
    }
    free(fb);
    free(blk);
    if (rc) {
        free(f);
        return -1;
    }
    *f32 = f;
    return 0;
}

static size_t gather_fwd(const conv_op *op, size_t i, float *a, float *b)
{
    const conv_geom *g = &op->g;
    size_t ow = i % g->Wo, oh = (i / g->Wo) % g->Ho;
    size_t co = (i / (g->Wo * g->Ho)) % g->Co, n = i / (g->Wo * g->Ho * g->Co);
    size_t k = 0;
    if (op->bias) {
        a[k] = op->bias[co];
        b[k++] = 1.0f;
    }
    ptrdiff_t h0 = (ptrdiff_t)(oh * g->s) - (ptrdiff_t)g->pad;
    ptrdiff_t w0 = (ptrdiff_t)(ow * g->s) - (ptrdiff_t)g->pad;
    for (size_t ci = 0; ci < g->Ci; ci++)
        for (size_t kh = 0; kh < g->KH; kh++)
            for (size_t kw = 0; kw < g->KW; kw++) {
                a[k] = op->w[((co * g->Ci + ci) * g->KH + kh) * g->KW + kw];
                b[k++] = x_at(g, op->x, n, ci, h0 + (ptrdiff_t)kh,
                              w0 + (ptrdiff_t)kw);
            }
    return k;
}

static size_t gather_data(const conv_op *op, size_t i, float *a, float *b)
{
    const conv_geom *g = &op->g;
    size_t iw = i % g->W, ih = (i / g->W) % g->H;
    size_t ci = (i / (g->W * g->H)) % g->Ci, n = i / (g->W * g->H * g->Ci);
    size_t k = 0;
    for (size_t co = 0; co < g->Co; co++)
        for (size_t kh = 0; kh < g->KH; kh++)
            for (size_t kw = 0; kw < g->KW; kw++) {
                a[k] = op->w[((co * g->Ci + ci) * g->KH + kh) * g->KW + kw];
                b[k++] = dy_at(g, op->dy, n, co, ih, iw, kh, kw);
            }
    return k;
}

static size_t gather_weights(const conv_op *op, size_t i, float *a, float *b)
{
    const conv_geom *g = &op->g;
    size_t kw = i % g->KW, kh = (i / g->KW) % g->KH;
    size_t ci = (i / (g->KW * g->KH)) % g->Ci, co = i / (g->KW * g->KH * g->Ci);
    size_t k = 0;
    for (size_t n = 0; n < g->N; n++)
        for (size_t oh = 0; oh < g->Ho; oh++)
            for (size_t ow = 0; ow < g->Wo; ow++) {
                a[k] = op->dy[((n * g->Co + co) * g->Ho + oh) * g->Wo + ow];
                b[k++] = x_at(g, op->x, n, ci,
                              (ptrdiff_t)(oh * g->s + kh) - (ptrdiff_t)g->pad,
                              (ptrdiff_t)(ow * g->s + kw) - (ptrdiff_t)g->pad);
            }
    return k;
}

/* dbias: the terms dy * 1. */
static size_t gather_bias(const conv_op *op, size_t co, float *a, float *b)
{
    const conv_geom *g = &op->g;
    size_t k = 0;
    for (size_t n = 0; n < g->N; n++)
        for (size_t p = 0; p < g->Ho * g->Wo; p++) {
            a[k] = op->dy[(n * g->Co + co) * g->Ho * g->Wo + p];
            b[k++] = 1.0f;
        }
    return k;
}

static bool ws_ready(ref_ws *ws, size_t cap)
{
    if (ws->init)
        return !ws->failed;
    ws->init = true;
    ws->cap = cap;
    ws->a = malloc(cap * sizeof *ws->a);
    ws->b = malloc(cap * sizeof *ws->b);
    ws->ma = malloc(cap * sizeof *ws->ma);
    ws->mb = malloc(cap * sizeof *ws->mb);
    ws->pa = malloc(cap * sizeof *ws->pa);
    ws->pb = malloc(cap * sizeof *ws->pb);
    if (!ws->a || !ws->b || !ws->ma || !ws->mb || !ws->pa || !ws->pb) {
        ws->failed = true;
        return false;
    }
    for (size_t k = 0; k < cap; k++) {
        /* 24 bits hold any binary32 value; mpfr_dot forms the products exactly. */
        mpfr_init2(ws->ma[k], 24);
        mpfr_init2(ws->mb[k], 24);
        ws->pa[k] = ws->ma[k];
        ws->pb[k] = ws->mb[k];
    }
    return true;
}

static void ws_free(ref_ws *ws)
{
    if (ws->init && !ws->failed)
        for (size_t k = 0; k < ws->cap; k++) {
            mpfr_clear(ws->ma[k]);
            mpfr_clear(ws->mb[k]);
        }
    free(ws->a);
    free(ws->b);
    free(ws->ma);
    free(ws->mb);
    free(ws->pa);
    free(ws->pb);
    memset(ws, 0, sizeof *ws);
}

static int conv_ref(const void *opv, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    const conv_op *op = opv;
    ref_ws *ws = op->ws;
    if (!ws_ready(ws, op->max_terms ? op->max_terms : 1))
        return -1;
    size_t k = op->gather(op, i, ws->a, ws->b);
    for (size_t j = 0; j < k; j++) {
        if (!isfinite(ws->a[j]) || !isfinite(ws->b[j]))
            return -1;
        mpfr_set_flt(ws->ma[j], ws->a[j], MPFR_RNDN);
        mpfr_set_flt(ws->mb[j], ws->b[j], MPFR_RNDN);
    }
    mpfr_dot(exact, ws->pa, ws->pb, (unsigned long)k, MPFR_RNDN);
    mpfr_mul_d(exact, exact, op->g.alpha, MPFR_RNDN); /* exact */
    mpfr_set(src, exact, MPFR_RNDN); /* no unquantized sources */
    return 1;
}

static bool conv_had_nan(const void *opv, size_t i)
{
    /* Its own terms, not the reference's workspace: the commit may ask
     * from several threads at once (parallel; asked for NaN results
     * only, so the allocation costs nothing that matters). */
    const conv_op *op = opv;
    const size_t cap = op->max_terms ? op->max_terms : 1;
    float *a = malloc(2 * cap * sizeof *a);
    if (!a)
        return true;
    const size_t k = op->gather(op, i, a, a + cap);
    bool nan = false;
    for (size_t j = 0; j < k && !nan; j++)
        nan = isnan(a[j]) || isnan(a[cap + j]);
    free(a);
    return nan;
}

/* Commits hi (and lo for the EXACT model), or the fast model's f32,
 * scaled by alpha, with the op's reference: as they are, or (channels > 0)
 * from the GEMM's (N*P, C) layout in NCHW order.  Outputs share no
 * storage with inputs (check_no_alias): each chunk is stored as soon as
 * it is measured. */
static int conv_commit(emu_ctx *ctx, const char *site, const char *kind,
                       emu_tensor *out, double *hi, double *lo,
                       const float *f32, size_t channels,
                       const emu_accum_counts *swamp, conv_op *op,
                       const emu_accum *model, const emu_rounding *rnd)
{
    const bool exact = model->kind == EMU_ACCUM_EXACT;
    op->out = (emu_gemm_src){ .f = f32, .alpha = op->g.alpha };
    if (!f32) {
        emu_scale_pairs(hi, lo, exact, out->n, op->g.alpha);
        op->out.hi = hi;
        op->out.lo = exact || !emu_is_pow2(op->g.alpha) ? lo : NULL;
    }
    ref_ws ws = { 0 };
    op->ws = &ws;
    emu_op_out o = { .site = site, .kind = kind, .out = out, .swamp = swamp,
                     .op = op, .ref = conv_ref,
                     .inputs_had_nan = conv_had_nan, .rnd = rnd,
                     .store_early = true, .parallel = true };
    if (channels) {
        op->out.tc = channels;
        op->out.tp = out->n ? out->n / (op->g.N * channels) : 0;
    }
    if (!f32 && !channels) {
        o.hi = op->out.hi;
        o.lo = op->out.lo;
    } else if (emu_gemm_src_f32(&op->out)) {
        o.fill32 = conv_fill32;
    } else {
        o.fill = conv_fill;
    }
    int rc = emu_commit(ctx, &o);
    ws_free(&ws);
    return rc;
}

/* ---- forward ------------------------------------------------------------- */

int emu_t_conv2d(emu_ctx *ctx, const char *site, emu_tensor *y,
                 const emu_tensor *x, const emu_tensor *w,
                 const emu_tensor *bias, const emu_conv_opts *o,
                 const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    conv_geom g;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "y", y) ||
        emu_check_tensor(ctx, site, "x", x) ||
        emu_check_tensor(ctx, site, "w", w) ||
        (bias && emu_check_tensor(ctx, site, "bias", bias)) ||
        conv_geometry(ctx, site, "x", x, "w", w, o, &g) ||
        check_4d(ctx, site, "y", y, g.N, g.Co, g.Ho, g.Wo) ||
        check_no_alias(ctx, site, y, x, w, bias) || emu_check_accum(ctx, site, o->accum))
        return -1;
    if (bias && (bias->ndim != 1 || bias->n != g.Co)) {
        char want[48];
        snprintf(want, sizeof want, "(%zu)", g.Co);
        return emu_shape_fail(ctx, site, "bias", bias, want);
    }
    const size_t K = g.Ci * g.KH * g.KW + (bias ? 1 : 0);
    const size_t P = g.N * g.Ho * g.Wo;
    const bool fast = o->accum->kind == EMU_ACCUM_FAST;
    float *wp = falloc(ctx, site, g.Co, K);
    /* hi, lo: the emulated models' values (the fast model's are binary32) */
    double *t = wp && !fast ? emu_scratch(ctx, site, 2 * y->n) : NULL;
    if (!wp || (!fast && !t)) {
        free(wp);
        return -1;
    }
    double *lo = t ? t + y->n : NULL;
    row_src src;
    if (row_src_im2row(&g, x->data, bias != NULL, &src)) {
        free(wp);
        free(t);
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    }
    /* Weights as (Co, K) with the bias first: B(k, co) = wp[co*K + k]. */
    for (size_t co = 0; co < g.Co; co++) {
        float *p = wp + co * K;
        if (bias)
            *p++ = bias->data[co];
        memcpy(p, w->data + co * (K - (bias ? 1 : 0)),
               (K - (bias ? 1 : 0)) * sizeof *p);
    }
    emu_accum_counts swamp;
    memset(&swamp, 0, sizeof swamp);
    const bool count = swamp_measured(ctx);
    int rc = 0;
    float *f32;
    if (conv_rows_gemm(ctx, o->accum, P, g.Co, K, g.Ho * g.Wo, &src, NULL, wp, t, lo,
                       count ? &swamp : NULL, &f32))
        rc = emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory in the GEMM engine");
    row_src_free(&src);
    free(wp);
    if (rc == 0) {
        conv_op op = { .g = g, .x = x->data, .w = w->data,
                       .bias = bias ? bias->data : NULL,
                       .gather = gather_fwd, .max_terms = K };
        rc = conv_commit(ctx, site, "conv2d", y, t, lo, f32, f32 ? 0 : g.Co,
                         count ? &swamp : NULL, &op, o->accum, rnd);
    }
    free(f32);
    free(t);
    return rc;
}

/* ---- gradient with respect to the data ------------------------------------ */

/* Whether the fast model's data gradient of a 1x1 kernel with stride > 1
 * goes through data_1x1_gemm: its smaller GEMM must be above OpenBLAS's
 * small-matrix kernels in every call (conv_rows_gemm's blocks, or one
 * call of at least 2 CONV_BLOCK_MACS), and an output's bits must not
 * depend on its row's place in the matrix, which moves there: so only
 * where sgemm's row panels are one row wide (SkylakeX's kernels; not the
 * Haswell kernels' 12, whose partial panels sum in another order). */
static bool data_1x1_compact(const conv_geom *g, const emu_accum *model)
{
    return model->kind == EMU_ACCUM_FAST && g->KH == 1 && g->KW == 1 &&
           g->s > 1 &&
           (double)(g->N * g->Ho * g->Wo + 1) * (double)g->Ci * (double)g->Co >=
               2 * CONV_BLOCK_MACS &&
           emu_fast_row_granule() == 1;
}

/* The fast model's data gradient of a 1x1 kernel with stride s > 1, in a
 * new array *f32 in dx's NCHW order.  Its matrix (row_src_data) has a row
 * (co) = dy[n, co, oh, ow] for an input position on the stride grid and a
 * row of zeros for every other one (3/4 of them at stride 2).  Since an
 * output of sgemm is a function of its row of A and B alone at these
 * sizes (conv_rows_gemm), the GEMM is run on the distinct rows only: one
 * per output position, and one row of zeros, whose result (+0, or NaN
 * from an infinite or NaN weight; whatever sgemm gives) is copied to every
 * position off the grid.  The bits are those of sgemm on the whole matrix
 * (test_ops_conv's fast_is_sgemm_on_the_matrices), for a quarter of the
 * multiply-adds and no matrix 4 times dy's size. */
static int data_1x1_gemm(const conv_geom *g, const float *dy, const float *wt,
                         float **f32)
{
    *f32 = NULL;
    const size_t Q = g->Ho * g->Wo, Pc = g->N * Q + 1, Co = g->Co;
    const size_t HW = g->H * g->W;
    float *a = malloc((Pc * Co + ROW_SLACK) * sizeof *a);
    ptrdiff_t *map = malloc((g->H + g->W) * sizeof *map);
    float *fc = NULL;
    if (!a || !map) {
        free(a);
        free(map);
        return -1;
    }
    /* rows (n, oh, ow), columns co: dy transposed, image by image */
    for (size_t n = 0; n < g->N; n++)
        for (size_t co = 0; co < Co; co++) {
            const float *d = dy + (n * Co + co) * Q;
            float *r = a + n * Q * Co + co;
            for (size_t q = 0; q < Q; q++)
                r[q * Co] = d[q];
        }
    memset(a + (Pc - 1) * Co, 0, Co * sizeof *a); /* +0.0 */
    int rc = conv_rows_gemm(NULL, &(emu_accum){ .kind = EMU_ACCUM_FAST }, Pc,
                            g->Ci, Co, Pc, NULL, a, wt, NULL, NULL, NULL, &fc);
    free(a);
    if (rc) {
        free(map);
        return -1;
    }
    float *f = malloc((g->N * g->Ci * HW + 1) * sizeof *f);
    if (!f) {
        free(fc);
        free(map);
        return -1;
    }
    /* the output position fed by input row ih (column iw), or -1 */
    ptrdiff_t *ohm = map, *owm = map + g->H;
    for (size_t ih = 0; ih < g->H; ih++)
        ohm[ih] = dy_pos_t((ptrdiff_t)(ih + g->pad), g->s, g->Ho);
    for (size_t iw = 0; iw < g->W; iw++)
        owm[iw] = dy_pos_t((ptrdiff_t)(iw + g->pad), g->s, g->Wo);
    /* fc is (ci, row) after conv_rows_gemm's NCHW store with one image */
    for (size_t n = 0; n < g->N; n++)
        for (size_t ci = 0; ci < g->Ci; ci++) {
            const float *src = fc + ci * Pc + n * Q;
            const float zero = fc[ci * Pc + Pc - 1];
            float *o = f + (n * g->Ci + ci) * HW;
            for (size_t ih = 0; ih < g->H; ih++, o += g->W) {
                if (ohm[ih] < 0) {
                    for (size_t iw = 0; iw < g->W; iw++)
                        o[iw] = zero;
                    continue;
                }
                const float *sr = src + (size_t)ohm[ih] * g->Wo;
                for (size_t iw = 0; iw < g->W; iw++)
                    o[iw] = owm[iw] < 0 ? zero : sr[owm[iw]];
            }
        }
    free(fc);
    free(map);
    *f32 = f;
    return 0;
}

int emu_t_conv2d_backward_data(emu_ctx *ctx, const char *site, emu_tensor *dx,
                               const emu_tensor *dy, const emu_tensor *w,
                               const emu_conv_opts *o,
                               const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    conv_geom g;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "dx", dx) ||
        emu_check_tensor(ctx, site, "dy", dy) ||
        emu_check_tensor(ctx, site, "w", w) ||
        conv_geometry(ctx, site, "dx", dx, "w", w, o, &g) ||
        check_4d(ctx, site, "dy", dy, g.N, g.Co, g.Ho, g.Wo) ||
        check_no_alias(ctx, site, dx, dy, w, NULL) || emu_check_accum(ctx, site, o->accum))
        return -1;
    const size_t K = g.Co * g.KH * g.KW;
    const size_t P = g.N * g.H * g.W;
    const bool fast = o->accum->kind == EMU_ACCUM_FAST;
    float *wt = falloc(ctx, site, g.Ci, K);
    double *t = wt && !fast ? emu_scratch(ctx, site, 2 * dx->n) : NULL;
    if (!wt || (!fast && !t)) {
        free(wt);
        return -1;
    }
    double *lo = t ? t + dx->n : NULL;
    const bool compact = data_1x1_compact(&g, o->accum);
    row_src src = { 0 };
    if (!compact && row_src_data(&g, dy->data, &src)) {
        free(wt);
        free(t);
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    }
    /* B(k, ci) = w[co, ci, kh, kw] with k = (co, kh, kw): wt[ci*K + k]. */
    const size_t KK = g.KH * g.KW;
    for (size_t ci = 0; ci < g.Ci; ci++)
        for (size_t co = 0; co < g.Co; co++)
            memcpy(wt + ci * K + co * KK, w->data + (co * g.Ci + ci) * KK,
                   KK * sizeof *wt);
    emu_accum_counts swamp;
    memset(&swamp, 0, sizeof swamp);
    const bool count = swamp_measured(ctx);
    int rc = 0;
    float *f32;
    if (compact ? data_1x1_gemm(&g, dy->data, wt, &f32)
                : conv_rows_gemm(ctx, o->accum, P, g.Ci, K, g.H * g.W, &src,
                                 NULL, wt, t, lo, count ? &swamp : NULL, &f32))
        rc = emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory in the GEMM engine");
    row_src_free(&src);
    free(wt);
    if (rc == 0) {
        conv_op op = { .g = g, .w = w->data, .dy = dy->data,
                       .gather = gather_data, .max_terms = K };
        rc = conv_commit(ctx, site, "conv2d_bwd_data", dx, t, lo, f32,
                         f32 ? 0 : g.Ci,
                         count ? &swamp : NULL, &op, o->accum, rnd);
    }
    free(f32);
    free(t);
    return rc;
}

/* ---- gradient with respect to the weights and the bias ------------------- */

/* The fast model's weight gradient is one sgemm, dw(Co x K0) = dy(Co x T)
 * im2row(T x K0), whose sum runs over the T = N*Ho*Wo positions: for the
 * first ResNet stage a 29 MB matrix (64 images of 28 x 28, K0 = 144),
 * which made whole went to memory and came back for sgemm to pack: the
 * largest single cost of a resnet:1 step.  It is made here a slice of T
 * at a time, each slice in cache just before an sgemm that adds it to the
 * results of the slices before (beta = 1), and the bits stay those of the
 * one call because the slices follow the call's own structure: OpenBLAS's
 * level-3 driver cuts the sum into blocks of Q terms (GEMM_Q, fixed per
 * CPU type; the remainder below 2Q in one or two blocks), forms each
 * block's sum in registers and adds it to C.  Slices whose boundaries are
 * multiples of Q, none within Q of the end, cut the sum where the one
 * call does, and the last slice sees the remainder the one call saw.  Q is
 * not part of the interface, so it is found once by trial
 * (sgemm_kblock): the smallest q for which slices of exactly q terms give
 * the one call's bits on random operands, which happens only when every
 * multiple of q is a block boundary (a cut anywhere else rounds a partial
 * sum the one call does not).  Every call stays on the level-3 path the
 * one call takes: the whole GEMM has at least SLICE_MIN_MACS
 * multiply-adds (above the small-matrix kernels' 10^6, and SkylakeX's
 * direct sgemm's 28 * 512^2, at and above which that kernel is not taken:
 * LeNet's first layer at batch 64, 7.5 * 10^6, was made whole below the
 * earlier bound of 8 * 10^6, a 5 MB matrix), each slice at least
 * CONV_BLOCK_MACS, and every slice, the first included, starts from given
 * values (beta = 1, never the direct kernel's beta = 0).  test_ops_conv's
 * fast_is_sgemm_on_the_matrices checks the bits against one sgemm on the
 * whole matrix. */
#define SLICE_MIN_MACS (28.0 * 512 * 512)

/* q for the probe: 64 x 64 outputs, so that every trial slice
 * (>= 256 terms) is above the small-matrix kernels. */
enum { PROBE_MN = 64, PROBE_Q_MIN = 256, PROBE_Q_MAX = 1024 };

/* Whether sgemm on (64 x K)(K x 64) in slices of q terms (the last 1.5 q
 * + 7) gives the bits of the one call. */
static bool probe_q(size_t q, const float *a, const float *b, size_t lda,
                    float *whole, float *part, double *c)
{
    const size_t K = 4 * q + q / 2 + 7, mn = PROBE_MN * PROBE_MN;
    if (emu_gemm_fast_f32(PROBE_MN, PROBE_MN, K, a, (ptrdiff_t)lda, 1, b,
                          PROBE_MN, 1, NULL, whole))
        return false;
    for (size_t i = 0; i < mn; i++)
        c[i] = 0.0;
    for (size_t k0 = 0, k1; k0 < K; k0 = k1) {
        k1 = K - k0 < 2 * q ? K : k0 + q;
        if (emu_gemm_fast_f32(PROBE_MN, PROBE_MN, k1 - k0, a + k0,
                              (ptrdiff_t)lda, 1, b + k0 * PROBE_MN, PROBE_MN,
                              1, c, part))
            return false;
        for (size_t i = 0; i < mn; i++)
            c[i] = part[i];
    }
    return memcmp(whole, part, mn * sizeof *part) == 0;
}

static size_t probe_kblock(void)
{
    const size_t lda = 4 * PROBE_Q_MAX + PROBE_Q_MAX / 2 + 7;
    const size_t mn = PROBE_MN * PROBE_MN;
    float *a = malloc(lda * PROBE_MN * sizeof *a);
    float *b = malloc(lda * PROBE_MN * sizeof *b);
    float *w = malloc(2 * mn * sizeof *w);
    double *c = malloc(mn * sizeof *c);
    size_t found = 0;
    if (a && b && w && c) {
        /* values in (-1, 1) with full 24-bit significands (xorshift64) */
        uint64_t x = 0x9e3779b97f4a7c15u;
        for (size_t i = 0; i < 2 * lda * PROBE_MN; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            float v = (float)(x >> 40) * 0x1p-24f;
            (i < lda * PROBE_MN ? a : b)[i % (lda * PROBE_MN)] =
                x >> 39 & 1 ? -v : v;
        }
        for (size_t q = PROBE_Q_MIN; !found && q <= PROBE_Q_MAX; q += 16)
            if (probe_q(q, a, b, lda, w, w + mn, c))
                found = q;
    }
    free(a);
    free(b);
    free(w);
    free(c);
    return found;
}

/* The sum's block length of sgemm's level-3 path (a multiple of it), or 0
 * if none was found (the weight gradient is then one call).  Probed once
 * per process; two threads probing at once find the same value. */
static size_t sgemm_kblock(void)
{
    static atomic_size_t cached = SIZE_MAX;
    return emu_probe_once(&cached, probe_kblock);
}

/* The fast model's weight gradient, dw = dyp(Co x T) im2row(T x K0), in
 * slices of T (see above) into a new array *f32 (Co x K0); returns 1 if
 * the GEMM is not sliced (too small, or no block length known), the caller
 * then making it whole. */
static int weights_sliced(const conv_geom *g, const row_src *src,
                          const float *dyp, size_t T, size_t K0, float **f32)
{
    *f32 = NULL;
    const size_t Co = g->Co, mn = Co * K0;
    if ((double)mn * (double)T < SLICE_MIN_MACS)
        return 1;
    const size_t q = sgemm_kblock();
    if (!q)
        return 1;
    /* slices of whole blocks: CONV_BLOCK_MACS at least, and about
     * CONV_BLOCK_BYTES of rows if that is more */
    size_t nq = (size_t)(CONV_BLOCK_MACS / ((double)mn * (double)q)) + 1;
    const size_t nb = CONV_BLOCK_BYTES / (K0 * sizeof(float) * q);
    if (nq < nb)
        nq = nb;
    const size_t L = nq * q;
    if (T < 2 * L)
        return 1;
    float *rows = malloc((2 * L * K0 + ROW_SLACK) * sizeof *rows);
    float *f = malloc(mn * sizeof *f);
    double *c = calloc(mn, sizeof *c); /* +0.0: the one call's C */
    int rc = rows && f && c ? 0 : -1;
    for (size_t t0 = 0, t1; rc == 0 && t0 < T; t0 = t1) {
        /* the last slice takes the remainder (L .. 2L - 1 terms) */
        t1 = T - t0 < 2 * L ? T : t0 + L;
        row_src_fill(src, t0, t1, rows);
        rc = emu_gemm_fast_f32(Co, K0, t1 - t0, dyp + t0, (ptrdiff_t)T, 1,
                               rows, (ptrdiff_t)K0, 1, c, f);
        for (size_t i = 0; rc == 0 && i < mn; i++)
            c[i] = f[i];
    }
    free(rows);
    free(c);
    if (rc) {
        free(f);
        return -1;
    }
    *f32 = f;
    return 0;
}


/* ---- the weight gradient's passes around its GEMM, on ctx->threads ----
 * The im2row of x and dy's transpose are copies (any split gives the
 * same bytes); the bias sums are one dot product per output channel,
 * each whole on one part with its own random words (by channel), the
 * parts' swamping counts (integers) added after. */
typedef struct bwdw_split {
    const row_src *src;
    float *rows, *dyp; /* rows NULL: dy's transpose only */
    const float *dy;
    bool dy_done;      /* dyp already made */
    size_t R, K0, Co, N, P;
    /* bias sums */
    const emu_accum *acc;
    uint64_t seed, stream;
    double *bh, *bl;
    bool count;
    emu_accum_counts sw[EMU_POOL_MAX];
    bool failed[EMU_POOL_MAX]; /* a part's row out of memory */
} bwdw_split;

/* Elements per part at least of the copies (below, a part costs about
 * what it saves). */
enum { BWDW_PART_MIN = 64 * 1024 };

static int bwdw_parts(const emu_ctx *ctx, size_t work)
{
    return emu_pool_parts(ctx->threads, work, BWDW_PART_MIN);
}

static void bwdw_prep_part(void *p, int t, int T)
{
    bwdw_split *b = p;
    const size_t r0 = b->R * (size_t)t / (size_t)T;
    const size_t r1 = b->R * (size_t)(t + 1) / (size_t)T;
    /* row_src_fill may write ROW_SLACK floats past its last row: into
     * the next part's first row, but for the last part's (the matrix has
     * them).  So a part's last row goes through a row of its own. */
    if (!b->rows) {
        /* no matrix: the sliced weight gradient makes its own rows */
    } else if (r0 < r1 && t == T - 1) {
        row_src_fill(b->src, r0, r1, b->rows + r0 * b->K0);
    } else if (r0 < r1) {
        float *last = malloc((b->K0 + ROW_SLACK) * sizeof *last);
        if (last) {
            if (r0 + 1 < r1)
                row_src_fill(b->src, r0, r1 - 1, b->rows + r0 * b->K0);
            row_src_fill(b->src, r1 - 1, r1, last);
            memcpy(b->rows + (r1 - 1) * b->K0, last, b->K0 * sizeof *last);
            free(last);
        } else {
            b->failed[t] = true; /* the caller fills the rows alone */
        }
    }
    /* dy as (Co, R), r = (n, oh, ow) */
    if (b->dy_done)
        return;
    for (size_t co = b->Co * (size_t)t / (size_t)T;
         co < b->Co * (size_t)(t + 1) / (size_t)T; co++)
        for (size_t n = 0; n < b->N; n++)
            memcpy(b->dyp + co * b->R + n * b->P,
                   b->dy + (n * b->Co + co) * b->P, b->P * sizeof *b->dyp);
}

/* The fast model's bias sums of channels c0 .. c1: each channel's
 * binary32 sum in index order from +0 (dot_fast's, bit for bit), BIAS_LANES
 * channels side by side, so that their additions overlap instead of each
 * waiting for the one before (one chain ran at the add's latency: 1.7% of
 * the CNN's fp32 step).  The fast model keeps no counts (dot_fast). */
enum { BIAS_LANES = 8 };

static void bias_sums_fast(const bwdw_split *b, size_t c0, size_t c1)
{
    for (; c0 < c1; c0 += BIAS_LANES) {
        const size_t nl = c1 - c0 < BIAS_LANES ? c1 - c0 : BIAS_LANES;
        const float *row[BIAS_LANES];
        float s[BIAS_LANES];
        for (size_t l = 0; l < BIAS_LANES; l++) {
            /* lanes past c1 repeat the last channel, unused */
            row[l] = b->dyp + (c0 + (l < nl ? l : nl - 1)) * b->R;
            s[l] = 0.0f;
        }
        for (size_t i = 0; i < b->R; i++)
            for (size_t l = 0; l < BIAS_LANES; l++)
                s[l] = s[l] + row[l][i];
        for (size_t l = 0; l < nl; l++) {
            b->bh[c0 + l] = s[l];
            b->bl[c0 + l] = 0.0;
        }
    }
}

static void bwdw_bias_part(void *p, int t, int T)
{
    bwdw_split *b = p;
    memset(&b->sw[t], 0, sizeof b->sw[t]);
    if (b->acc->kind == EMU_ACCUM_FAST) {
        bias_sums_fast(b, b->Co * (size_t)t / (size_t)T,
                       b->Co * (size_t)(t + 1) / (size_t)T);
        return;
    }
    for (size_t co = b->Co * (size_t)t / (size_t)T;
         co < b->Co * (size_t)(t + 1) / (size_t)T; co++) {
        emu_accum_rng rng = { b->seed, b->stream, co };
        b->bh[co] = emu_accum_dot_unguarded(b->acc, b->dyp + co * b->R, 1,
                                            NULL, 0, b->R, &rng,
                                            b->count ? &b->sw[t] : NULL,
                                            &b->bl[co]);
    }
}

int emu_t_conv2d_backward_weights(emu_ctx *ctx, const char *site,
                                  emu_tensor *dw, emu_tensor *dbias,
                                  const emu_tensor *dy, const emu_tensor *x,
                                  const emu_conv_opts *o,
                                  const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    conv_geom g;
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "dw", dw) ||
        emu_check_tensor(ctx, site, "dy", dy) ||
        emu_check_tensor(ctx, site, "x", x) ||
        (dbias && emu_check_tensor(ctx, site, "dbias", dbias)) ||
        conv_geometry(ctx, site, "x", x, "dw", dw, o, &g) ||
        check_4d(ctx, site, "dy", dy, g.N, g.Co, g.Ho, g.Wo) ||
        check_no_alias(ctx, site, dw, dy, x, NULL) ||
        (dbias && check_no_alias(ctx, site, dbias, dy, x, dw)) ||
        emu_check_accum(ctx, site, o->accum))
        return -1;
    if (dbias && (dbias->ndim != 1 || dbias->n != g.Co)) {
        char want[48];
        snprintf(want, sizeof want, "(%zu)", g.Co);
        return emu_shape_fail(ctx, site, "dbias", dbias, want);
    }
    const size_t K0 = g.Ci * g.KH * g.KW;
    const size_t T = g.N * g.Ho * g.Wo;
    const size_t P = g.Ho * g.Wo;
    float *dyp = falloc(ctx, site, g.Co, T);
    size_t nb = dbias ? g.Co : 0;
    double *hi = dyp ? emu_scratch(ctx, site, 2 * (dw->n + nb)) : NULL;
    if (!hi) {
        free(dyp);
        return -1;
    }
    double *lo = hi + dw->n;
    row_src src;
    if (row_src_im2row(&g, x->data, false, &src)) {
        free(dyp);
        free(hi);
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    }
    bwdw_split bs = { .src = &src, .dyp = dyp, .dy = dy->data, .R = T,
                      .K0 = K0, .Co = g.Co, .N = g.N, .P = P };
    emu_accum_counts swamp;
    memset(&swamp, 0, sizeof swamp);
    const bool count = swamp_measured(ctx);
    float *f32 = NULL;
    /* the fast model on one thread in slices of T; otherwise (and if
     * the GEMM is too small to slice) the whole matrix and one GEMM */
    int rc = 1;
    if (o->accum->kind == EMU_ACCUM_FAST && ctx->threads <= 1) {
        bwdw_prep_part(&bs, 0, 1); /* dy's transpose (no rows yet) */
        bs.dy_done = true;
        rc = weights_sliced(&g, &src, dyp, T, K0, &f32);
    }
    if (rc == 1) {
        /* the whole matrix (and dy's transpose if not done) in parts */
        float *rows = falloc(ctx, site, T, K0);
        rc = rows ? 0 : -2; /* -2: failure already filed */
        if (rows) {
            bs.rows = rows;
            const int parts = bwdw_parts(ctx, T * (K0 + g.Co));
            emu_pool_run(parts, bwdw_prep_part, &bs);
            for (int t = 0; t < parts; t++)
                if (bs.failed[t]) {
                    row_src_fill(&src, 0, T, rows);
                    break;
                }
        }
        if (rows && conv_gemm(ctx, o->accum, g.Co, K0, T, dyp, (ptrdiff_t)T,
                              1, rows, (ptrdiff_t)K0, 1, hi, lo,
                              count ? &swamp : NULL, &f32))
            rc = -1;
        free(rows);
    }
    row_src_free(&src);
    if (rc == -1)
        rc = emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory in the GEMM engine");
    else if (rc == -2)
        rc = -1;
    conv_op op = { .g = g, .x = x->data, .dy = dy->data,
                   .gather = gather_weights, .max_terms = T };
    if (rc == 0)
        rc = conv_commit(ctx, site, "conv2d_bwd_weights", dw, hi, lo, f32, 0,
                         count ? &swamp : NULL, &op, o->accum, rnd);
    free(f32);
    if (rc == 0 && dbias) {
        /* Plain sums of dy under the same model; the stream is that of the
         * bias commit (the next op). */
        double *bh = lo + dw->n, *bl = bh + nb;
        emu_accum_counts bswamp;
        memset(&bswamp, 0, sizeof bswamp);
        bs.acc = o->accum;
        bs.seed = ctx->seed;
        bs.stream = accum_stream(ctx);
        bs.bh = bh;
        bs.bl = bl;
        bs.count = count;
        /* the fast model's dots only: the others may keep MPFR state */
        int bt = o->accum->kind == EMU_ACCUM_FAST ? bwdw_parts(ctx, T * g.Co) : 1;
        if (bt > (int)g.Co)
            bt = (int)g.Co;
        emu_pool_run(bt < 1 ? 1 : bt, bwdw_bias_part, &bs);
        for (int t = 0; t < (bt < 1 ? 1 : bt); t++) {
            bswamp.adds += bs.sw[t].adds;
            bswamp.absorbed += bs.sw[t].absorbed;
            for (int k = 0; k < EMU_LOST_BINS; k++)
                bswamp.lost_bits[k] += bs.sw[t].lost_bits[k];
        }
        char sub[EMU_TENSOR_NAME_MAX + 16];
        snprintf(sub, sizeof sub, "%s.dbias", site ? site : "op");
        op.gather = gather_bias;
        rc = conv_commit(ctx, sub, "conv2d_bwd_bias", dbias, bh, bl, NULL, 0,
                         count ? &bswamp : NULL, &op, o->accum, rnd);
    }
    free(dyp);
    free(hi);
    return rc;
}
