/*
 * ops_lstm.c — one LSTM layer over a window of T steps (emu_t_lstm,
 * emu_t_lstm_backward): PyTorch's nn.LSTM with batch_first=True, gate
 * order i, f, g, o.  Called by the lstm language model (nn) and by users.
 *
 * Shapes: x (B, T, I); y, c, dy (B, T, H); gates (B, T, 4H); w_ih (4H, I),
 * w_hh (4H, H), b_ih, b_hh (4H); h0, c0, h_n, c_n (B, H).  G = 4H; gate q
 * of row b is column q H + k of the (B, 4H) matrix of a step.  h_{-1} =
 * h0, c_{-1} = c0, both +0 when NULL.
 *
 * What is rounded, and where (each through the choke point, once; the T
 * steps of a site are T commits aggregated under that site):
 *   <site>.gates   a_t[b, j] = ONE dot product under o->accum of the
 *                  terms, in this order: b_ih[j] * 1, b_hh[j] * 1 (each
 *                  only if that bias is given), x[b,t,k] w_ih[j,k] over k,
 *                  h_{t-1}[b,k] w_hh[j,k] over k — emu_t_matmul of the
 *                  row [1, 1, x_t, h_{t-1}] with the row [b_ih, b_hh,
 *                  w_ih, w_hh] (dot product number b G + j) — rounded
 *                  into gates' format under rnd (the pre-activation,
 *                  kept only for the step)
 *   <site>.act     sigmoid (columns i, f, o) or tanh (g) of the rounded
 *                  a_t, evaluated as emu_t_unary does (so correctly
 *                  rounded), into gates' format under rnd: the saved
 *                  gates
 *   <site>.c       c_t = f c_{t-1} + i g from the stored gates and
 *                  c_{t-1}: exact (two exact products, TwoSum), rounded
 *                  into c's format under o->cell_rnd (an exact zero is
 *                  +0 unless both products are -0)
 *   <site>.h       h_t = o tanh(c_t), binary64 (libm tanh), into y's
 *                  format under rnd
 *   <site>.h_n     h_T (= y[:, T-1]) cast into h_n's format under rnd
 *   <site>.c_n     c_T (= c[:, T-1]) cast into c_n's format under cell_rnd
 * Backward, t = T-1 down to 0 (dc_T = 0, f_T unused):
 *   <site>.dh      dh_t = dy_t + dgates_{t+1} W_hh: emu_t_matmul with
 *                  accumulate, the accumulator starting at dy_t, terms
 *                  dgates_{t+1}[b, j] w_hh[j, k] over j, into dy's format
 *                  under rnd; at t = T-1, dh = dy_{T-1} (no commit)
 *   <site>.dc      dc_t = (dh_t o) s + dc_{t+1} f_{t+1}, s = 1 / cosh(c_t)^2
 *                  (= 1 - tanh(c_t)^2), binary64 from the stored dh_t,
 *                  gates, c_t and dc_{t+1}, into c's format under
 *                  o->cell_rnd
 *   <site>.dgates  the gradients of the pre-activations, binary64 from
 *                  the stored values, into dy's format under rnd:
 *                    i: (dc_t g) (i (1 - i))
 *                    f: (dc_t c_{t-1}) (f (1 - f))
 *                    g: (dc_t i) (1 - g g)
 *                    o: (dh_t tanh(c_t)) (o (1 - o))
 *                  (the products in parentheses first, left to right)
 * then, over the window, with D = dgates as a (B T, 4H) matrix, rows in
 * (b, t) order (t fastest):
 *   <site>.dinput      dx = D W_ih (emu_t_matmul), into dx under rnd
 *   <site>.dweight_ih  dw_ih = D^T X, X = x as (B T, I): terms over (b, t)
 *   <site>.dweight_hh  dw_hh = D^T Hp, Hp row (b, t) = h_{t-1}[b] (at
 *                      t = 0: h0, or zero terms kept when NULL)
 *   <site>.dbias_ih, <site>.dbias_hh   the column sums of D, as dot
 *                      products 1 * D[(b, t), j] over (b, t) (emu_t_matmul
 *                      of a row of ones with D), the same sum rounded into
 *                      each tensor
 *   all four under o->param_grad_rnd, dot products under o->accum.
 * The binary64 evaluations (h, dc, dgates) differ from the exact values
 * of their formulas by a few 2^-53 relative (libm's tanh and cosh: 1 to 2
 * ulps), which the MPFR references measure; everything else is exact
 * before its one rounding or is the accumulator model's result.
 * Why one GEMM per step with the bias and input columns in it: each gate
 * is then a single dot product (as the convolution's bias is a term),
 * with one output rounding.  The fast model (host binary32 BLAS, whose
 * summation order is its own) groups the same binary32 sums as PyTorch
 * does: the bias and input terms of the whole window are one sgemm
 * (x W_ih^T, not rounded: the accumulator's binary32 value), and each
 * step adds h_{t-1} W_hh^T to its rows (emu_t_matmul's accumulate, sgemm's
 * beta = 1), so the site's MPFR reference starts from the window sum as
 * sgemm left it and measures the recurrent terms and the output rounding.
 * Operand hook (o->operands, emu_lstm_operand): x, w_ih, w_hh are
 * replaced once before the window's products, h_{t-1} at each step before
 * that step's GEMM (from step 1, or 0 with h0), dgates_{t+1} at each step
 * of the backward recurrence, and D, w_ih, x, Hp before the window's
 * products; the products then read the replacements in place of the
 * values, in the same order and concatenation (the bias terms and the
 * bias gradients' sums read the values as they are).  Without a hook
 * nothing is copied.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

typedef struct lstm_dims {
    size_t B, T, I, H, G;
} lstm_dims;

/* What the per-step producers read (time-major scratch, one step). */
typedef struct lstm_op {
    size_t H, G;
    const emu_format *fmt;  /* act: the output format                     */
    bool det;               /* act: rnd is deterministic (fast activations) */
    const float *pre;       /* act: pre-activations (B, G)                */
    const float *act;       /* the step's gates (B, G)                    */
    const float *cprev;     /* c_{t-1} (B, H)                             */
    const float *c;         /* c_t (B, H)                                 */
    const float *dh;        /* dh_t (B, H)                                */
    const float *dc;        /* dgates: dc_t;  dc: dc_{t+1} or NULL        */
    const float *fnext;     /* dc: the gates of step t+1 (B, G) or NULL   */
} lstm_op;

/* ---- shapes -------------------------------------------------------------- */

static int check_shape(emu_ctx *ctx, const char *site, const char *what,
                       const emu_tensor *t, int nd, size_t d0, size_t d1,
                       size_t d2)
{
    if (emu_check_tensor(ctx, site, what, t))
        return -1;
    const size_t want[3] = { d0, d1, d2 };
    bool ok = t->ndim == nd;
    for (int k = 0; ok && k < nd; k++)
        ok = t->shape[k] == want[k];
    if (ok)
        return 0;
    char s[96];
    if (nd == 1)
        snprintf(s, sizeof s, "(%zu)", d0);
    else if (nd == 2)
        snprintf(s, sizeof s, "(%zu, %zu)", d0, d1);
    else
        snprintf(s, sizeof s, "(%zu, %zu, %zu)", d0, d1, d2);
    return emu_shape_fail(ctx, site, what, t, s);
}

/* Options, weights and x; the dimensions into *d. */
static int check_common(emu_ctx *ctx, const char *site, const emu_tensor *x,
                        const emu_tensor *h0, const emu_tensor *c0,
                        const emu_lstm_weights *w, const emu_lstm_opts *o,
                        const emu_rounding *rnd, lstm_dims *d)
{
    if (emu_check_rounding(ctx, site, rnd))
        return -1;
    if (!o)
        return emu_ctx_fail(ctx, site, "lstm options: NULL (they name the "
                            "accumulator model)");
    if (emu_check_accum(ctx, site, o->accum) ||
        (o->cell_rnd && emu_check_rounding(ctx, site, o->cell_rnd)) ||
        (o->param_grad_rnd && emu_check_rounding(ctx, site, o->param_grad_rnd)))
        return -1;
    if (!w || !w->w_ih || !w->w_hh)
        return emu_ctx_fail(ctx, site, "lstm weights: w_ih and w_hh are "
                            "required");
    if (emu_check_tensor(ctx, site, "x", x) ||
        emu_check_tensor(ctx, site, "w_hh", w->w_hh))
        return -1;
    if (x->ndim != 3)
        return emu_shape_fail(ctx, site, "x", x, "(B, T, I)");
    if (w->w_hh->ndim != 2 || w->w_hh->shape[0] != 4 * w->w_hh->shape[1])
        return emu_shape_fail(ctx, site, "w_hh", w->w_hh, "(4H, H)");
    d->B = x->shape[0];
    d->T = x->shape[1];
    d->I = x->shape[2];
    d->H = w->w_hh->shape[1];
    d->G = 4 * d->H;
    if (check_shape(ctx, site, "w_ih", w->w_ih, 2, d->G, d->I, 0) ||
        (w->b_ih && check_shape(ctx, site, "b_ih", w->b_ih, 1, d->G, 0, 0)) ||
        (w->b_hh && check_shape(ctx, site, "b_hh", w->b_hh, 1, d->G, 0, 0)) ||
        (h0 && check_shape(ctx, site, "h0", h0, 2, d->B, d->H, 0)) ||
        (c0 && check_shape(ctx, site, "c0", c0, 2, d->B, d->H, 0)))
        return -1;
    return 0;
}

/* Any two of the n tensors (NULLs skipped) sharing storage, where the
 * first n_out are outputs: an output with anything. */
static int check_overlaps(emu_ctx *ctx, const char *site,
                          const emu_tensor *const *t, int n, int n_out)
{
    for (int a = 0; a < n_out; a++)
        for (int b = 0; b < n; b++)
            if (b != a && t[a] && t[b] && emu_tensors_overlap(t[a], t[b]))
                return emu_ctx_fail(ctx, site, "'%s' shares storage with "
                                    "'%s' (outputs must not overlap anything)",
                                    t[a]->name, t[b]->name);
    return 0;
}

/* ---- scratch tensors --------------------------------------------------------- */

/* A (r, c) matrix over data with like's format and role (the choke point
 * keeps statistics per site and role): views of scratch and of reshaped
 * tensors.  name NULL keeps like's. */
static emu_tensor view2(const emu_tensor *like, const char *name,
                        const float *data, size_t r, size_t c)
{
    emu_tensor v = *like;
    if (name) /* a long site's "site.gates" is cut at the field's size */
        snprintf(v.name, sizeof v.name, "%.*s", (int)sizeof v.name - 1,
                 name);
    v.ndim = 2;
    memset(v.shape, 0, sizeof v.shape);
    v.shape[0] = r;
    v.shape[1] = c;
    v.n = r * c;
    v.data = (float *)data; /* inputs are only read */
    v.owns_data = false;
    return v;
}

/* dst (B, T, n) from src (T, B, n), or the other way (to_time). */
static void permute(float *dst, const float *src, size_t B, size_t T,
                    size_t n, bool to_time)
{
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            const size_t bm = (b * T + t) * n, tm = (t * B + b) * n;
            if (to_time)
                memcpy(dst + tm, src + bm, n * sizeof *dst);
            else
                memcpy(dst + bm, src + tm, n * sizeof *dst);
        }
}

/* Row b of step t of a (B, T, n) tensor. */
static const float *row_bt(const float *v, size_t b, size_t t, size_t T,
                           size_t n)
{
    return v + (b * T + t) * n;
}

static float *alloc_floats(emu_ctx *ctx, const char *site, size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p)
        emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for %zu values", n);
    return p;
}

/* Operand `which` of a product as the product reads it: v's values, or
 * (o->operands set) the hook's replacement, written into buf (v->n
 * values).  *out receives the values; returns 0 or -1. */
static int operand(emu_ctx *ctx, const emu_lstm_opts *o,
                   emu_lstm_operand which, const emu_tensor *v, int axis,
                   float *buf, const float **out)
{
    *out = v->data;
    if (!o->operands || !o->operands->fn)
        return 0;
    if (o->operands->fn(o->operands->user, ctx, (int)which, v, axis, buf))
        return -1;
    *out = buf;
    return 0;
}

/* ---- MPFR helpers ------------------------------------------------------------- */

/* sigmoid(v) = 1 / (1 + e^-v), into r (its precision). */
static void mp_sigmoid(mpfr_ptr r, double v)
{
    mpfr_set_d(r, -v, MPFR_RNDN);
    mpfr_exp(r, r, MPFR_RNDN);
    mpfr_add_ui(r, r, 1, MPFR_RNDN);
    mpfr_ui_div(r, 1, r, MPFR_RNDN);
}

/* r = a b (two binary32 values: exact at any precision >= 48). */
static void mp_mul2(mpfr_ptr r, double a, double b)
{
    mpfr_set_d(r, a, MPFR_RNDN);
    mpfr_mul_d(r, r, b, MPFR_RNDN);
}

/* r = v (1 - v), exactly (precision >= 100). */
static void mp_logistic_grad(mpfr_ptr r, double v)
{
    mpfr_set_d(r, 1.0, MPFR_RNDN);
    mpfr_sub_d(r, r, v, MPFR_RNDN);
    mpfr_mul_d(r, r, v, MPFR_RNDN);
}

/* ---- forward producers ------------------------------------------------------ */

static int act_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    (void)lo;
    const lstm_op *op = vop;
    /* A run of one gate's columns at a time (gate g, q = 2, is tanh), so
     * that neither a division nor the choice of function is per element. */
    size_t col = i0 % op->G;
    for (size_t k = 0; k < m;) {
        const size_t left = op->H - col % op->H;
        const size_t run = left < m - k ? left : m - k;
        const emu_unary fn = col / op->H == 2 ? EMU_UNARY_TANH
                                              : EMU_UNARY_SIGMOID;
        const float *x = op->pre + i0 + k;
        if (op->det)
            emu_unary_eval_det_n(op->fmt, fn, x, run, hi + k);
        else
            for (size_t j = 0; j < run; j++)
                hi[k + j] = emu_unary_eval(op->fmt, fn, x[j]);
        k += run;
        col = (col + run) % op->G;
    }
    return 0;
}

static int act_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const lstm_op *op = vop;
    if ((i % op->G) / op->H == 2) {
        mpfr_set_d(exact, op->pre[i], MPFR_RNDN);
        mpfr_tanh(exact, exact, MPFR_RNDN);
    } else {
        mp_sigmoid(exact, op->pre[i]);
    }
    return 0;
}

static bool act_nan(const void *vop, size_t i)
{
    return isnan(((const lstm_op *)vop)->pre[i]);
}

/* Gate q of output i of a (B, H) result. */
static float gate(const lstm_op *op, const float *act, size_t i, int q)
{
    return act[(i / op->H) * op->G + (size_t)q * op->H + i % op->H];
}

/* The producers of (B, H) outputs walk a row's run of units at a time:
 * gate q of unit u of row b is act[b G + q H + u], with no division per
 * element (gate() is for the references, one element at a time). */
static int c_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    const lstm_op *op = vop;
    const size_t H = op->H, G = op->G;
    size_t b = i0 / H, u0 = i0 % H;
    for (size_t k = 0; k < m;) {
        const size_t run = H - u0 < m - k ? H - u0 : m - k;
        const float *a = op->act + b * G + u0;
        const float *cp = op->cprev + b * H + u0;
        for (size_t u = 0; u < run; u++) {
            const double fc = (double)a[H + u] * cp[u];
            const double ig = (double)a[u] * a[2 * H + u];
            emu_two_sum(fc, ig, &hi[k + u], &lo[k + u]);
            if (!isfinite(hi[k + u]))
                lo[k + u] = 0.0;
        }
        k += run;
        u0 = 0;
        b++;
    }
    return 1;
}

static int c_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const lstm_op *op = vop;
    mpfr_t t;
    mpfr_init2(t, mpfr_get_prec(exact));
    mp_mul2(exact, gate(op, op->act, i, 1), op->cprev[i]);
    mp_mul2(t, gate(op, op->act, i, 0), gate(op, op->act, i, 2));
    mpfr_add(exact, exact, t, MPFR_RNDN);
    mpfr_clear(t);
    return 0;
}

static bool c_nan(const void *vop, size_t i)
{
    const lstm_op *op = vop;
    return isnan(op->cprev[i]) || isnan(gate(op, op->act, i, 0)) ||
           isnan(gate(op, op->act, i, 1)) || isnan(gate(op, op->act, i, 2));
}

static int h_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    (void)lo;
    const lstm_op *op = vop;
    const size_t H = op->H, G = op->G;
    size_t b = i0 / H, u0 = i0 % H;
    for (size_t k = 0; k < m;) {
        const size_t run = H - u0 < m - k ? H - u0 : m - k;
        const float *o = op->act + b * G + 3 * H + u0;
        const float *c = op->c + b * H + u0;
        for (size_t u = 0; u < run; u++)
            hi[k + u] = (double)o[u] * tanh((double)c[u]);
        k += run;
        u0 = 0;
        b++;
    }
    return 0;
}

static int h_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const lstm_op *op = vop;
    mpfr_set_d(exact, op->c[i], MPFR_RNDN);
    mpfr_tanh(exact, exact, MPFR_RNDN);
    mpfr_mul_d(exact, exact, gate(op, op->act, i, 3), MPFR_RNDN);
    return 0;
}

static bool h_nan(const void *vop, size_t i)
{
    const lstm_op *op = vop;
    return isnan(op->c[i]) || isnan(gate(op, op->act, i, 3));
}

/* ---- backward producers ------------------------------------------------------- */

static int dc_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    (void)lo;
    const lstm_op *op = vop;
    const size_t H = op->H, G = op->G;
    size_t b = i0 / H, u0 = i0 % H;
    for (size_t k = 0; k < m;) {
        const size_t run = H - u0 < m - k ? H - u0 : m - k;
        const size_t j = b * H + u0;
        const float *o = op->act + b * G + 3 * H + u0;
        for (size_t u = 0; u < run; u++) {
            const double ch = cosh((double)op->c[j + u]);
            hi[k + u] = ((double)op->dh[j + u] * o[u]) * (1.0 / (ch * ch));
        }
        if (op->dc) {
            const float *fn = op->fnext + b * G + H + u0;
            for (size_t u = 0; u < run; u++)
                hi[k + u] += (double)op->dc[j + u] * fn[u];
        }
        k += run;
        u0 = 0;
        b++;
    }
    return 0;
}

static int dc_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const lstm_op *op = vop;
    mpfr_t t;
    mpfr_init2(t, mpfr_get_prec(exact));
    mpfr_set_d(t, op->c[i], MPFR_RNDN);
    mpfr_sech(t, t, MPFR_RNDN);
    mpfr_sqr(t, t, MPFR_RNDN);
    mp_mul2(exact, op->dh[i], gate(op, op->act, i, 3));
    mpfr_mul(exact, exact, t, MPFR_RNDN);
    if (op->dc) {
        mp_mul2(t, op->dc[i], gate(op, op->fnext, i, 1));
        mpfr_add(exact, exact, t, MPFR_RNDN);
    }
    mpfr_clear(t);
    return 0;
}

static bool dc_nan(const void *vop, size_t i)
{
    const lstm_op *op = vop;
    return isnan(op->c[i]) || isnan(op->dh[i]) || isnan(gate(op, op->act, i, 3)) ||
           (op->dc && (isnan(op->dc[i]) || isnan(gate(op, op->fnext, i, 1))));
}

/* Output i of dgates (B, G): row b, gate q, unit k; j = b H + k indexes
 * the (B, H) quantities. */
static void dg_index(const lstm_op *op, size_t i, int *q, size_t *j)
{
    const size_t b = i / op->G, col = i % op->G;
    *q = (int)(col / op->H);
    *j = b * op->H + col % op->H;
}

/* A run of one gate's columns of a row at a time (no division or choice
 * of formula per element); the products in the order the header gives. */
static int dg_fill(const void *vop, size_t i0, size_t m, double *hi, double *lo)
{
    (void)lo;
    const lstm_op *op = vop;
    const size_t H = op->H, G = op->G;
    size_t b = i0 / G, col = i0 % G;
    for (size_t k = 0; k < m;) {
        const int q = (int)(col / H);
        const size_t u0 = col % H;
        const size_t run = H - u0 < m - k ? H - u0 : m - k;
        const size_t j = b * H + u0;
        const float *a = op->act + b * G + u0; /* gate q at a[q H + u] */
        const float *dc = op->dc + j;
        double *out = hi + k;
        switch (q) {
        case 0:
            for (size_t u = 0; u < run; u++) {
                const double ig = a[u], gg = a[2 * H + u];
                out[u] = ((double)dc[u] * gg) * (ig * (1.0 - ig));
            }
            break;
        case 1:
            for (size_t u = 0; u < run; u++) {
                const double fg = a[H + u];
                out[u] = ((double)dc[u] * op->cprev[j + u]) * (fg * (1.0 - fg));
            }
            break;
        case 2:
            for (size_t u = 0; u < run; u++) {
                const double ig = a[u], gg = a[2 * H + u];
                out[u] = ((double)dc[u] * ig) * (1.0 - gg * gg);
            }
            break;
        default:
            for (size_t u = 0; u < run; u++) {
                const double og = a[3 * H + u];
                out[u] = ((double)op->dh[j + u] * tanh((double)op->c[j + u])) *
                         (og * (1.0 - og));
            }
            break;
        }
        k += run;
        col += run;
        if (col == G) {
            col = 0;
            b++;
        }
    }
    return 0;
}

static int dg_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const lstm_op *op = vop;
    int q;
    size_t j;
    dg_index(op, i, &q, &j);
    mpfr_t t;
    mpfr_init2(t, mpfr_get_prec(exact));
    const double ig = gate(op, op->act, j, 0), fg = gate(op, op->act, j, 1);
    const double gg = gate(op, op->act, j, 2), og = gate(op, op->act, j, 3);
    switch (q) {
    case 0:
        mp_mul2(exact, op->dc[j], gg);
        mp_logistic_grad(t, ig);
        break;
    case 1:
        mp_mul2(exact, op->dc[j], op->cprev[j]);
        mp_logistic_grad(t, fg);
        break;
    case 2:
        mp_mul2(exact, op->dc[j], ig);
        mpfr_set_d(t, gg, MPFR_RNDN);
        mpfr_sqr(t, t, MPFR_RNDN);
        mpfr_ui_sub(t, 1, t, MPFR_RNDN);
        break;
    default:
        mpfr_set_d(exact, op->c[j], MPFR_RNDN);
        mpfr_tanh(exact, exact, MPFR_RNDN);
        mpfr_mul_d(exact, exact, op->dh[j], MPFR_RNDN);
        mp_logistic_grad(t, og);
        break;
    }
    mpfr_mul(exact, exact, t, MPFR_RNDN);
    mpfr_clear(t);
    return 0;
}

static bool dg_nan(const void *vop, size_t i)
{
    const lstm_op *op = vop;
    int q;
    size_t j;
    dg_index(op, i, &q, &j);
    bool n = isnan(gate(op, op->act, j, q));
    switch (q) {
    case 0: return n || isnan(op->dc[j]) || isnan(gate(op, op->act, j, 2));
    case 1: return n || isnan(op->dc[j]) || isnan(op->cprev[j]);
    case 2: return n || isnan(op->dc[j]) || isnan(gate(op, op->act, j, 0));
    default: return n || isnan(op->dh[j]) || isnan(op->c[j]);
    }
}

/* One commit of a step's producer into out. */
static int commit(emu_ctx *ctx, const char *site, const char *kind,
                  emu_tensor *out, const lstm_op *op,
                  int (*fill)(const void *, size_t, size_t, double *, double *),
                  int (*ref)(const void *, size_t, mpfr_ptr, mpfr_ptr),
                  bool (*had_nan)(const void *, size_t), const emu_rounding *rnd)
{
    emu_op_out oo = { .site = site, .kind = kind, .out = out, .fill = fill,
                      .op = op, .ref = ref, .inputs_had_nan = had_nan,
                      .rnd = rnd, .store_early = true };
    return emu_commit(ctx, &oo);
}

/* ---- forward ---------------------------------------------------------------- */

int emu_t_lstm(emu_ctx *ctx, const char *site, emu_tensor *y, emu_tensor *gates,
               emu_tensor *c, emu_tensor *h_n, emu_tensor *c_n,
               const emu_tensor *x, const emu_tensor *h0, const emu_tensor *c0,
               const emu_lstm_weights *w, const emu_lstm_opts *o,
               const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "lstm";
    lstm_dims d;
    if (check_common(ctx, site, x, h0, c0, w, o, rnd, &d))
        return -1;
    const size_t B = d.B, T = d.T, I = d.I, H = d.H, G = d.G;
    if (check_shape(ctx, site, "y", y, 3, B, T, H) ||
        check_shape(ctx, site, "gates", gates, 3, B, T, G) ||
        check_shape(ctx, site, "c", c, 3, B, T, H) ||
        (h_n && check_shape(ctx, site, "h_n", h_n, 2, B, H, 0)) ||
        (c_n && check_shape(ctx, site, "c_n", c_n, 2, B, H, 0)))
        return -1;
    const emu_tensor *all[] = { y, gates, c, h_n, c_n, x, h0, c0,
                                w->w_ih, w->w_hh, w->b_ih, w->b_hh };
    if (check_overlaps(ctx, site, all, 12, 5))
        return -1;
    const emu_rounding *crnd = o->cell_rnd ? o->cell_rnd : rnd;

    /* The concatenated operands of the per-step GEMM. */
    const size_t nb = (w->b_ih != NULL) + (w->b_hh != NULL);
    const size_t K = nb + I + H;
    float *wcat = alloc_floats(ctx, site, G * K);
    float *acat = alloc_floats(ctx, site, B * K);
    float *pre = alloc_floats(ctx, site, B * G);
    float *gs = alloc_floats(ctx, site, T * B * G);
    float *cs = alloc_floats(ctx, site, T * B * H);
    float *hs = alloc_floats(ctx, site, T * B * H);
    float *zero = alloc_floats(ctx, site, B * H);
    float *ax = NULL, *xw = NULL; /* the fast model's window product */
    /* The operand hook's replacements of x, w_ih, w_hh and h_{t-1}. */
    const bool hook = o->operands && o->operands->fn;
    float *qx = NULL, *qwi = NULL, *qwh = NULL, *qh = NULL;
    const float *xd = x->data, *wid = w->w_ih->data, *whd = w->w_hh->data;
    int rc = -1;
    if (!wcat || !acat || !pre || !gs || !cs || !hs || !zero)
        goto out;
    if (hook) {
        qx = alloc_floats(ctx, site, B * T * I);
        qwi = qx ? alloc_floats(ctx, site, G * I) : NULL;
        qwh = qwi ? alloc_floats(ctx, site, G * H) : NULL;
        qh = qwh ? alloc_floats(ctx, site, B * H) : NULL;
        if (!qh)
            goto out;
        emu_tensor X2 = view2(x, NULL, x->data, B * T, I);
        if (operand(ctx, o, EMU_LSTM_X, &X2, 1, qx, &xd) ||
            operand(ctx, o, EMU_LSTM_W_IH, w->w_ih, 1, qwi, &wid) ||
            operand(ctx, o, EMU_LSTM_W_HH, w->w_hh, 1, qwh, &whd))
            goto out;
    }
    for (size_t j = 0; j < G; j++) {
        float *r = wcat + j * K;
        if (w->b_ih)
            *r++ = w->b_ih->data[j];
        if (w->b_hh)
            *r++ = w->b_hh->data[j];
        memcpy(r, wid + j * I, I * sizeof *r);
        memcpy(r + I, whd + j * H, H * sizeof *r);
    }
    for (size_t b = 0; b < B; b++)
        for (size_t k = 0; k < nb; k++)
            acat[b * K + k] = 1.0f;

    char sg[EMU_TENSOR_NAME_MAX + 24], sa[sizeof sg], sc[sizeof sg], sh[sizeof sg];
    snprintf(sg, sizeof sg, "%s.gates", site);
    snprintf(sa, sizeof sa, "%s.act", site);
    snprintf(sc, sizeof sc, "%s.c", site);
    snprintf(sh, sizeof sh, "%s.h", site);
    emu_tensor A = view2(x, sg, acat, B, K);
    emu_tensor W = view2(w->w_ih, sg, wcat, G, K);
    emu_tensor P = view2(gates, sg, pre, B, G);
    const emu_matmul_opts mo = { .accum = o->accum, .trans_b = true };
    const float *hprev0 = h0 ? h0->data : zero, *cprev0 = c0 ? c0->data : zero;
    lstm_op op = { .H = H, .G = G, .fmt = &gates->fmt, .pre = pre,
                   .det = !emu_rnd_is_stochastic(rnd->mode) };

    /* The fast model: the window's bias and input terms as one sgemm. */
    const bool fast = o->accum->kind == EMU_ACCUM_FAST;
    const emu_matmul_opts mf = { .accum = o->accum, .trans_b = true,
                                 .accumulate = true };
    if (fast) {
        const size_t K1 = nb + I;
        ax = alloc_floats(ctx, site, B * T * K1);
        xw = alloc_floats(ctx, site, B * T * G);
        if (!ax || !xw)
            goto out;
        for (size_t r = 0; r < B * T; r++) {
            for (size_t k = 0; k < nb; k++)
                ax[r * K1 + k] = 1.0f;
            memcpy(ax + r * K1 + nb, xd + r * I, I * sizeof *ax);
        }
        /* B(k, j) = wcat[j K + k]: the first K1 columns of wcat's rows */
        if (emu_gemm_fast_f32(B * T, G, K1, ax, (ptrdiff_t)K1, 1, wcat, 1,
                              (ptrdiff_t)K, NULL, xw)) {
            emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory in the GEMM");
            goto out;
        }
    }
    const emu_tensor Whh = view2(w->w_hh, NULL, whd, G, H);
    for (size_t t = 0; t < T; t++) {
        const float *hprev = t ? hs + (t - 1) * B * H : hprev0;
        if (hook && (t || h0)) {
            emu_tensor Hv = view2(y, NULL, hprev, B, H);
            if (operand(ctx, o, EMU_LSTM_H, &Hv, 1, qh, &hprev))
                goto out;
        }
        if (fast) {
            for (size_t b = 0; b < B; b++)
                memcpy(pre + b * G, row_bt(xw, b, t, T, G), G * sizeof *pre);
            emu_tensor Hp = view2(y, NULL, hprev, B, H);
            if (emu_t_matmul(ctx, sg, &P, &Hp, hook ? &Whh : w->w_hh, &mf,
                             rnd))
                goto out;
        } else {
            for (size_t b = 0; b < B; b++) {
                memcpy(acat + b * K + nb, row_bt(xd, b, t, T, I),
                       I * sizeof *acat);
                memcpy(acat + b * K + nb + I, hprev + b * H, H * sizeof *acat);
            }
            if (emu_t_matmul(ctx, sg, &P, &A, &W, &mo, rnd))
                goto out;
        }
        emu_tensor Gt = view2(gates, NULL, gs + t * B * G, B, G);
        emu_tensor Ct = view2(c, NULL, cs + t * B * H, B, H);
        emu_tensor Ht = view2(y, NULL, hs + t * B * H, B, H);
        op.act = Gt.data;
        op.cprev = t ? cs + (t - 1) * B * H : cprev0;
        op.c = Ct.data;
        if (commit(ctx, sa, "lstm_act", &Gt, &op, act_fill, act_ref, act_nan, rnd) ||
            commit(ctx, sc, "lstm_cell", &Ct, &op, c_fill, c_ref, c_nan, crnd) ||
            commit(ctx, sh, "lstm_hidden", &Ht, &op, h_fill, h_ref, h_nan, rnd))
            goto out;
    }
    permute(y->data, hs, B, T, H, false);
    permute(gates->data, gs, B, T, G, false);
    permute(c->data, cs, B, T, H, false);
    if (h_n) {
        emu_tensor last = view2(y, NULL, hs + (T - 1) * B * H, B, H);
        snprintf(sh, sizeof sh, "%s.h_n", site);
        if (emu_t_cast(ctx, sh, h_n, &last, rnd))
            goto out;
    }
    if (c_n) {
        emu_tensor last = view2(c, NULL, cs + (T - 1) * B * H, B, H);
        snprintf(sc, sizeof sc, "%s.c_n", site);
        if (emu_t_cast(ctx, sc, c_n, &last, crnd))
            goto out;
    }
    rc = 0;
out:
    free(qx);
    free(qwi);
    free(qwh);
    free(qh);
    free(ax);
    free(xw);
    free(wcat);
    free(acat);
    free(pre);
    free(gs);
    free(cs);
    free(hs);
    free(zero);
    return rc;
}

/* ---- backward ----------------------------------------------------------------- */

int emu_t_lstm_backward(emu_ctx *ctx, const char *site, emu_tensor *dx,
                        const emu_lstm_grads *g, const emu_tensor *dy,
                        const emu_tensor *x, const emu_tensor *y,
                        const emu_tensor *gates, const emu_tensor *c,
                        const emu_tensor *h0, const emu_tensor *c0,
                        const emu_lstm_weights *w, const emu_lstm_opts *o,
                        const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (!site)
        site = "lstm";
    lstm_dims d;
    if (check_common(ctx, site, x, h0, c0, w, o, rnd, &d))
        return -1;
    const size_t B = d.B, T = d.T, I = d.I, H = d.H, G = d.G;
    static const emu_lstm_grads none = { 0 };
    if (!g)
        g = &none;
    if (check_shape(ctx, site, "dy", dy, 3, B, T, H) ||
        check_shape(ctx, site, "y", y, 3, B, T, H) ||
        check_shape(ctx, site, "gates", gates, 3, B, T, G) ||
        check_shape(ctx, site, "c", c, 3, B, T, H) ||
        (dx && check_shape(ctx, site, "dx", dx, 3, B, T, I)) ||
        (g->dw_ih && check_shape(ctx, site, "dw_ih", g->dw_ih, 2, G, I, 0)) ||
        (g->dw_hh && check_shape(ctx, site, "dw_hh", g->dw_hh, 2, G, H, 0)) ||
        (g->db_ih && check_shape(ctx, site, "db_ih", g->db_ih, 1, G, 0, 0)) ||
        (g->db_hh && check_shape(ctx, site, "db_hh", g->db_hh, 1, G, 0, 0)))
        return -1;
    const emu_tensor *all[] = { dx, g->dw_ih, g->dw_hh, g->db_ih, g->db_hh,
                                dy, x, y, gates, c, h0, c0,
                                w->w_ih, w->w_hh, w->b_ih, w->b_hh };
    if (check_overlaps(ctx, site, all, 16, 5))
        return -1;
    const emu_rounding *crnd = o->cell_rnd ? o->cell_rnd : rnd;
    const emu_rounding *prnd = o->param_grad_rnd ? o->param_grad_rnd : rnd;

    float *gtm = alloc_floats(ctx, site, T * B * G);  /* gates, time-major */
    float *ctm = alloc_floats(ctx, site, T * B * H);  /* c, time-major     */
    float *dgt = alloc_floats(ctx, site, T * B * G);  /* dgates, time-major */
    float *dgb = alloc_floats(ctx, site, T * B * G);  /* dgates, (b, t)     */
    float *dh = alloc_floats(ctx, site, B * H);
    float *dcs = alloc_floats(ctx, site, 2 * B * H);  /* dc_t, dc_{t+1}    */
    float *hp = alloc_floats(ctx, site, B * T * H);   /* h_{t-1}, (b, t)    */
    float *zero = alloc_floats(ctx, site, B * H);
    /* The operand hook's replacements: w_hh and dgates_{t+1} of the
     * recurrence, w_ih, D and x, Hp of the window's products. */
    const bool hook = o->operands && o->operands->fn;
    float *qwh = NULL, *qdg = NULL, *qwi = NULL, *qd = NULL, *qx = NULL;
    const float *whd = w->w_hh->data;
    int rc = -1;
    if (!gtm || !ctm || !dgt || !dgb || !dh || !dcs || !hp || !zero)
        goto out;
    if (hook) {
        qwh = alloc_floats(ctx, site, G * H);
        qdg = qwh ? alloc_floats(ctx, site, B * G) : NULL;
        qwi = qdg ? alloc_floats(ctx, site, G * I) : NULL;
        qd = qwi ? alloc_floats(ctx, site, B * T * G) : NULL;
        qx = qd ? alloc_floats(ctx, site, B * T * (I > H ? I : H)) : NULL;
        if (!qx)
            goto out;
        if (T > 1 && operand(ctx, o, EMU_LSTM_W_HH_DH, w->w_hh, 0, qwh, &whd))
            goto out;
    }
    const emu_tensor Whh = view2(w->w_hh, NULL, whd, G, H);
    permute(gtm, gates->data, B, T, G, true);
    permute(ctm, c->data, B, T, H, true);

    char s1[EMU_TENSOR_NAME_MAX + 24], s2[sizeof s1], s3[sizeof s1];
    snprintf(s1, sizeof s1, "%s.dh", site);
    snprintf(s2, sizeof s2, "%s.dc", site);
    snprintf(s3, sizeof s3, "%s.dgates", site);
    emu_tensor DH = view2(dy, s1, dh, B, H);
    emu_tensor DC = view2(dy, s2, NULL, B, H);
    DC.fmt = c->fmt; /* the cell state's gradient in the cell state's format */
    emu_tensor DGn = view2(dy, s3, NULL, B, G);
    const emu_matmul_opts mh = { .accum = o->accum, .accumulate = true };
    const float *cprev0 = c0 ? c0->data : zero;
    for (size_t tt = T; tt-- > 0;) {
        for (size_t b = 0; b < B; b++)
            memcpy(dh + b * H, row_bt(dy->data, b, tt, T, H), H * sizeof *dh);
        if (tt + 1 < T) {
            DGn.data = dgt + (tt + 1) * B * G;
            const float *dg = DGn.data;
            if (hook) {
                if (operand(ctx, o, EMU_LSTM_DG_DH, &DGn, 1, qdg, &dg))
                    goto out;
                DGn.data = (float *)dg;
            }
            if (emu_t_matmul(ctx, s1, &DH, &DGn, hook ? &Whh : w->w_hh, &mh,
                             rnd))
                goto out;
        }
        float *dc = dcs + (tt & 1) * B * H, *dcn = dcs + ((tt + 1) & 1) * B * H;
        lstm_op op = { .H = H, .G = G, .act = gtm + tt * B * G,
                       .c = ctm + tt * B * H, .dh = dh,
                       .cprev = tt ? ctm + (tt - 1) * B * H : cprev0 };
        if (tt + 1 < T) {
            op.dc = dcn;
            op.fnext = gtm + (tt + 1) * B * G;
        }
        DC.data = dc;
        if (commit(ctx, s2, "lstm_dcell", &DC, &op, dc_fill, dc_ref, dc_nan, crnd))
            goto out;
        op.dc = dc;
        emu_tensor DG = view2(dy, s3, dgt + tt * B * G, B, G);
        if (commit(ctx, s3, "lstm_dgates", &DG, &op, dg_fill, dg_ref, dg_nan, rnd))
            goto out;
    }

    /* The window's GEMMs over (b, t) rows. */
    permute(dgb, dgt, B, T, G, false);
    emu_tensor D = view2(dy, s3, dgb, B * T, G);
    /* Dq: D as the weight gradients read it (the hook's, once for both). */
    emu_tensor Dq = D;
    if (dx) {
        emu_tensor DX = view2(dx, NULL, dx->data, B * T, I);
        const emu_matmul_opts m = { .accum = o->accum };
        emu_tensor Da = D, Wi = *w->w_ih;
        if (hook) {
            const float *v;
            if (operand(ctx, o, EMU_LSTM_D_DX, &D, 1, qd, &v))
                goto out;
            Da.data = (float *)v;
            if (operand(ctx, o, EMU_LSTM_W_IH_DX, w->w_ih, 0, qwi, &v))
                goto out;
            Wi.data = (float *)v;
            Wi.owns_data = false;
        }
        snprintf(s1, sizeof s1, "%s.dinput", site);
        if (emu_t_matmul(ctx, s1, &DX, &Da, hook ? &Wi : w->w_ih, &m, rnd))
            goto out;
    }
    if (hook && (g->dw_ih || g->dw_hh)) {
        const float *v;
        if (operand(ctx, o, EMU_LSTM_D_DW, &D, 0, qd, &v))
            goto out;
        Dq.data = (float *)v;
    }
    const emu_matmul_opts mw = { .accum = o->accum, .trans_a = true };
    if (g->dw_ih) {
        emu_tensor X = view2(x, NULL, x->data, B * T, I);
        if (hook) {
            const float *v;
            if (operand(ctx, o, EMU_LSTM_X_DW, &X, 0, qx, &v))
                goto out;
            X.data = (float *)v;
        }
        snprintf(s1, sizeof s1, "%s.dweight_ih", site);
        if (emu_t_matmul(ctx, s1, g->dw_ih, &Dq, &X, &mw, prnd))
            goto out;
    }
    if (g->dw_hh) {
        for (size_t b = 0; b < B; b++) {
            memcpy(hp + b * T * H, h0 ? h0->data + b * H : zero, H * sizeof *hp);
            memcpy(hp + (b * T + 1) * H, y->data + b * T * H,
                   (T - 1) * H * sizeof *hp);
        }
        emu_tensor HP = view2(y, NULL, hp, B * T, H);
        if (hook) {
            const float *v;
            if (operand(ctx, o, EMU_LSTM_H_DW, &HP, 0, qx, &v))
                goto out;
            HP.data = (float *)v;
        }
        snprintf(s1, sizeof s1, "%s.dweight_hh", site);
        if (emu_t_matmul(ctx, s1, g->dw_hh, &Dq, &HP, &mw, prnd))
            goto out;
    }
    /* The bias gradients as products (1, B T) x D: dot products of ones
     * with D's columns (the forward's bias terms times 1), so that the
     * fast model sums them with sgemm's contiguous reads. */
    emu_tensor *dbs[2] = { g->db_ih, g->db_hh };
    for (int q = 0; q < 2; q++) {
        if (!dbs[q])
            continue;
        for (size_t r = 0; r < B * T; r++)
            hp[r] = 1.0f;
        emu_tensor ONES = view2(dy, NULL, hp, 1, B * T);
        emu_tensor DB = view2(dbs[q], NULL, dbs[q]->data, 1, G);
        const emu_matmul_opts m = { .accum = o->accum };
        snprintf(s1, sizeof s1, "%s.%s", site, q ? "dbias_hh" : "dbias_ih");
        if (emu_t_matmul(ctx, s1, &DB, &ONES, &D, &m, prnd))
            goto out;
    }
    rc = 0;
out:
    free(gtm);
    free(ctm);
    free(dgt);
    free(dgb);
    free(dh);
    free(dcs);
    free(hp);
    free(zero);
    free(qwh);
    free(qdg);
    free(qwi);
    free(qd);
    free(qx);
    return rc;
}
