/*
 * test_ops_elementwise.c — the elementwise tensor ops (ops_elementwise.c)
 * against the scalar arithmetic (emu/arith.h) and the MPFR oracle.
 *
 * Every output of add, sub, mul, div, scale, axpy, add_bias, the exact
 * unary ops and the casts must be bit-identical to the scalar operation
 * on the same operands (stochastic modes included: element i of op k uses
 * word i of stream k, which the scalar call gets through an emu_rng placed
 * at that index), and, in the deterministic modes, to MPFR's exact result
 * rounded by emu_ref_round.  The backward ops are checked against MPFR's
 * exact value of dy * f'(.) (quotients and gelu' rounded to odd at 80
 * bits, which rounds as the exact value would), in every deterministic
 * mode: they are correctly rounded too.
 *
 * Inputs: random patterns of the input format (NaN and inf included),
 * pairs biased to cancel, and the cross product of each format's edge
 * values; input and output formats the same, or binary32/16-bit inputs
 * into narrower outputs.  Then the errors (every argument check leaves
 * the output and the op counter untouched), in-place operation, and NaN
 * accounting.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/ops.h>
#include <emu/ref.h>

#include "testutil.h"

enum { PRINT_LIMIT = 30, P = 80 };
static unsigned long long n_checked, n_failed;

/* ---- reporting ----------------------------------------------------------- */

static void print_val(const char *label, const emu_format *f, double v)
{
    emu_bits b = { 0 };
    if (f && emu_encode(f, v, &b))
        fprintf(stderr, " %s 0x%0*llx (%a)", label, (f->bits + 3) / 4,
                (unsigned long long)b.v, v);
    else
        fprintf(stderr, " %s %a", label, v);
}

/* One output against its expected value; operands printed on mismatch. */
static void expect(const char *op, const emu_format *in,
                   const emu_format *out, const emu_rounding *r, int nops,
                   const double *ops, double want, double got)
{
    n_checked++;
    if (test_same(want, got))
        return;
    if (n_failed++ >= PRINT_LIMIT)
        return;
    fprintf(stderr, "MISMATCH %s %s -> %s, mode %s%s, operands:", op,
            in ? in->name : "?", out->name, emu_rnd_name(r->mode),
            r->saturate ? " saturating" : "");
    for (int k = 0; k < nops; k++)
        print_val("", in, ops[k]);
    fprintf(stderr, "\n   ");
    print_val("want", out, want);
    print_val("got", out, got);
    fprintf(stderr, "\n");
}

#define ASSERT_NO_FAILURES(before)                                           \
    ck_assert_msg(n_failed == (before), "%llu mismatches (listed above)",    \
                  n_failed - (before))

/* ---- tensors and data ---------------------------------------------------- */

static void make(emu_tensor *t, const emu_format *f, size_t n,
                 const char *name)
{
    emu_error err;
    ck_assert_msg(emu_tensor_alloc(t, name, EMU_ROLE_ACTIVATION, f, 1, &n,
                                   &err) == 0, "%s", err.message);
}

/* Values every format has trouble with: zeros, the ends of the range,
 * specials, and neighbours of 1. */
static size_t edge_values(const emu_format *f, double *v)
{
    size_t n = 0;
    double mags[] = { 0.0, f->min_subnormal, f->min_normal, f->max, 1.0,
                      1.0 + f->epsilon, 1.0 - f->epsilon / 2, 3.0,
                      f->max / 2, 2 * f->min_normal, INFINITY };
    for (size_t k = 0; k < sizeof mags / sizeof mags[0]; k++) {
        for (int s = 0; s < (f->is_signed ? 2 : 1); s++) {
            double x = s ? -mags[k] : mags[k];
            if (emu_representable(f, x) && !isinf(x))
                v[n++] = x;
            else if (isinf(x) && f->has_inf)
                v[n++] = x;
        }
    }
    if (f->has_nan)
        v[n++] = NAN;
    return n;
}

/* A random value of f: any pattern, or (one time in four) a value close
 * to `near` (same or opposite sign, a few ulps away, or a nearby
 * exponent), so that sums cancel and round at every distance. */
static double random_value(test_rng *g, const emu_format *f, double near)
{
    if (!isfinite(near) || test_below(g, 4) != 0)
        return emu_decode(f, test_random_bits(g, f));
    double x = near;
    for (uint64_t k = test_below(g, 4); k > 0; k--)
        x = test_below(g, 2) ? emu_next_up(f, x) : emu_next_down(f, x);
    if (test_below(g, 2))
        x = ldexp(x, (int)test_below(g, 7) - 3);
    if (test_below(g, 2))
        x = -x;
    return emu_representable(f, x) ? x : near;
}

/* The carrier formats the tests run on: every shipped one with a zero. */
static size_t carrier_formats(const emu_format **fs)
{
    size_t n = 0;
    for (size_t k = 0; k < emu_format_count(); k++) {
        const emu_format *f = emu_format_at(k);
        if (f->fits_carrier && f->has_zero)
            fs[n++] = f;
    }
    return n;
}

/* The roundings each check runs under. */
static const emu_rounding roundings[] = {
    { .mode = EMU_RNE }, { .mode = EMU_RNA }, { .mode = EMU_RZ },
    { .mode = EMU_RU },  { .mode = EMU_RD },  { .mode = EMU_RO },
    { .mode = EMU_RNE, .saturate = true, .tininess = EMU_TINY_BEFORE },
    { .mode = EMU_RS, .sr_bits = 64 },
    { .mode = EMU_RS_BITS, .sr_bits = 7 },
};
enum { N_ROUNDINGS = sizeof roundings / sizeof roundings[0] };

/* The scalar operations' rounding for element i of the op with stream s:
 * the same mode, and for SR a generator positioned at word i. */
static emu_rounding scalar_rounding(const emu_rounding *rnd,
                                    const emu_ctx *ctx, uint64_t stream,
                                    size_t i, emu_rng *g)
{
    emu_rounding r = *rnd;
    *g = (emu_rng){ ctx->seed, stream, i };
    r.rng = g;
    return r;
}

/* ---- binary ops ---------------------------------------------------------- */

typedef enum {
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_SCALE,
    OP_AXPY,
    OP_COUNT
} bop;
static const char *const bop_names[] = { "add", "sub", "mul", "div", "scale",
                                         "axpy" };

/* (in, out) format pairs: each carrier format into itself, binary32 into
 * each, and a few 16-bit inputs into 8-bit outputs. */
typedef struct fmt_pair {
    const emu_format *in, *out;
} fmt_pair;

static size_t format_pairs(fmt_pair *p)
{
    const emu_format *fs[64];
    size_t nf = carrier_formats(fs), n = 0;
    for (size_t k = 0; k < nf; k++)
        p[n++] = (fmt_pair){ fs[k], fs[k] };
    for (size_t k = 0; k < nf; k++)
        if (strcmp(fs[k]->name, "binary32"))
            p[n++] = (fmt_pair){ test_format("binary32"), fs[k] };
    p[n++] = (fmt_pair){ test_format("bfloat16"), test_format("e4m3") };
    p[n++] = (fmt_pair){ test_format("binary16"), test_format("e5m2") };
    p[n++] = (fmt_pair){ test_format("bfloat16"), test_format("binary16") };
    return n;
}

static double scalar_bop(bop op, const emu_format *f, double a, double b,
                         double c, double alpha, const emu_rounding *r)
{
    switch (op) {
    case OP_ADD: return emu_add(f, a, b, r, NULL);
    case OP_SUB: return emu_sub(f, a, b, r, NULL);
    case OP_MUL: return emu_mul(f, a, b, r, NULL);
    case OP_DIV: return emu_div(f, a, b, r, NULL);
    case OP_SCALE: return emu_mul(f, alpha, a, r, NULL);
    default: return emu_fma(f, alpha, a, c, r, NULL);
    }
}

static double ref_bop(bop op, const emu_format *f, double a, double b,
                      double c, double alpha, const emu_rounding *r)
{
    switch (op) {
    case OP_ADD: return emu_ref_add(f, a, b, r, NULL);
    case OP_SUB: return emu_ref_sub(f, a, b, r, NULL);
    case OP_MUL: return emu_ref_mul(f, a, b, r, NULL);
    case OP_DIV: return emu_ref_div(f, a, b, r, NULL);
    case OP_SCALE: return emu_ref_mul(f, alpha, a, r, NULL);
    default: return emu_ref_fma(f, alpha, a, c, r, NULL);
    }
}

static int run_bop(bop op, emu_ctx *ctx, emu_tensor *out, const emu_tensor *a,
                   const emu_tensor *b, float alpha, const emu_rounding *rnd)
{
    switch (op) {
    case OP_ADD: return emu_t_add(ctx, "t", out, a, b, rnd);
    case OP_SUB: return emu_t_sub(ctx, "t", out, a, b, rnd);
    case OP_MUL: return emu_t_mul(ctx, "t", out, a, b, rnd);
    case OP_DIV: return emu_t_div(ctx, "t", out, a, b, rnd);
    case OP_SCALE: return emu_t_scale(ctx, "t", out, alpha, a, rnd);
    default: return emu_t_axpy(ctx, "t", out, alpha, a, b, rnd);
    }
}

/* Runs op on (a, b) under every rounding; each output against the scalar
 * op and (deterministic modes) MPFR. */
static void check_bop(bop op, const fmt_pair *fp, const emu_tensor *a,
                      const emu_tensor *b, float alpha)
{
    emu_tensor out;
    make(&out, fp->out, a->n, "out");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 0xadd + (uint64_t)op);
    ctx.op_index = 17; /* any op counter: streams are per op */
    for (int k = 0; k < N_ROUNDINGS; k++) {
        const emu_rounding *rnd = &roundings[k];
        const uint64_t stream = ctx.op_index;
        ck_assert_int_eq(run_bop(op, &ctx, &out, a, b, alpha, rnd), 0);
        ck_assert_uint_eq(ctx.op_index, stream + 1);
        const bool det = !emu_rnd_is_stochastic(rnd->mode);
        for (size_t i = 0; i < a->n; i++) {
            double x = a->data[i], y = b->data[i];
            double ops[3] = { x, y, alpha };
            emu_rng g;
            emu_rounding r = scalar_rounding(rnd, &ctx, stream, i, &g);
            double want = scalar_bop(op, fp->out, x, y, y, alpha, &r);
            expect(bop_names[op], fp->in, fp->out, &r, op >= OP_SCALE ? 3 : 2,
                   ops, want, out.data[i]);
            if (det)
                expect(bop_names[op], fp->in, fp->out, &r,
                       op >= OP_SCALE ? 3 : 2, ops,
                       ref_bop(op, fp->out, x, y, y, alpha, &r), out.data[i]);
        }
    }
    emu_tensor_free(&out);
}

START_TEST(test_binary_ops)
{
    const bop op = (bop)_i;
    fmt_pair pairs[64];
    const size_t np = format_pairs(pairs);
    unsigned long long before = n_failed;
    test_rng g = test_rng_make(0xb1 + (uint64_t)op);
    for (size_t k = 0; k < np; k++) {
        const emu_format *in = pairs[k].in;
        /* random pairs */
        const size_t n = test_scaled(1024, 64);
        emu_tensor a, b;
        make(&a, in, n, "a");
        make(&b, in, n, "b");
        for (size_t i = 0; i < n; i++) {
            a.data[i] = (float)random_value(&g, in, NAN);
            b.data[i] = (float)random_value(&g, in, a.data[i]);
        }
        float alpha = (float)random_value(&g, test_format("binary32"), 1.0);
        if (!isfinite(alpha))
            alpha = 0.75f;
        check_bop(op, &pairs[k], &a, &b, alpha);
        emu_tensor_free(&a);
        emu_tensor_free(&b);

        /* the cross product of edge values */
        double ev[32];
        size_t ne = edge_values(in, ev);
        make(&a, in, ne * ne, "a");
        make(&b, in, ne * ne, "b");
        for (size_t i = 0; i < ne * ne; i++) {
            a.data[i] = (float)ev[i / ne];
            b.data[i] = (float)ev[i % ne];
        }
        check_bop(op, &pairs[k], &a, &b, 0.5f);
        if (op >= OP_SCALE) {
            /* alpha at the edges too: inf, 0, -0, NaN, huge, tiny */
            const float alphas[] = { INFINITY, 0.0f, -0.0f, NAN, 0x1p127f,
                                     0x1p-149f, -3.0f };
            for (size_t m = 0; m < sizeof alphas / sizeof alphas[0]; m++)
                check_bop(op, &pairs[k], &a, &b, alphas[m]);
        }
        emu_tensor_free(&a);
        emu_tensor_free(&b);
    }
    ASSERT_NO_FAILURES(before);
}
END_TEST

/* ---- add_bias ------------------------------------------------------------ */

/* x + bias along `axis`, checked by explicit nested loops over the shape. */
static void check_bias(const emu_format *f, int ndim, const size_t *shape,
                       int axis, emu_ctx *ctx, test_rng *g)
{
    emu_error err;
    emu_tensor x, out, bias;
    ck_assert_int_eq(emu_tensor_alloc(&x, "x", EMU_ROLE_ACTIVATION, f, ndim,
                                      shape, &err), 0);
    ck_assert_int_eq(emu_tensor_alloc(&out, "y", EMU_ROLE_ACTIVATION, f, ndim,
                                      shape, &err), 0);
    make(&bias, f, shape[axis], "bias");
    for (size_t i = 0; i < x.n; i++)
        x.data[i] = (float)random_value(g, f, NAN);
    for (size_t i = 0; i < bias.n; i++)
        bias.data[i] = (float)random_value(g, f, x.data[i]);
    for (int k = 0; k < N_ROUNDINGS; k++) {
        const emu_rounding *rnd = &roundings[k];
        const uint64_t stream = ctx->op_index;
        ck_assert_int_eq(emu_t_add_bias(ctx, "b", &out, &x, &bias, axis, rnd),
                         0);
        size_t s[4] = { 1, 1, 1, 1 }, idx[4];
        for (int d = 0; d < ndim; d++)
            s[d] = shape[d];
        size_t i = 0;
        for (idx[0] = 0; idx[0] < s[0]; idx[0]++)
            for (idx[1] = 0; idx[1] < s[1]; idx[1]++)
                for (idx[2] = 0; idx[2] < s[2]; idx[2]++)
                    for (idx[3] = 0; idx[3] < s[3]; idx[3]++, i++) {
                        double bv = bias.data[idx[axis]];
                        double ops[2] = { x.data[i], bv };
                        emu_rng rg;
                        emu_rounding r = scalar_rounding(rnd, ctx, stream, i,
                                                         &rg);
                        expect("add_bias", f, f, &r, 2, ops,
                               emu_add(f, x.data[i], bv, &r, NULL),
                               out.data[i]);
                    }
    }
    emu_tensor_free(&x);
    emu_tensor_free(&out);
    emu_tensor_free(&bias);
}

START_TEST(test_add_bias)
{
    unsigned long long before = n_failed;
    emu_ctx ctx;
    emu_ctx_init(&ctx, 5);
    test_rng g = test_rng_make(0xb1a5);
    const char *fmts[] = { "binary16", "bfloat16", "e4m3", "binary32" };
    for (size_t k = 0; k < 4; k++) {
        const emu_format *f = test_format(fmts[k]);
        const size_t mat[2] = { 7, 13 };          /* (B, F) */
        const size_t img[4] = { 3, 5, 4, 6 };     /* (N, C, H, W) */
        check_bias(f, 2, mat, 1, &ctx, &g);       /* rows */
        check_bias(f, 2, mat, 0, &ctx, &g);
        check_bias(f, 4, img, 1, &ctx, &g);       /* channels */
        check_bias(f, 4, img, 3, &ctx, &g);
        check_bias(f, 4, img, 0, &ctx, &g);
    }
    ASSERT_NO_FAILURES(before);
}
END_TEST

/* ---- exact unary ops ----------------------------------------------------- */

/* The specification of the exact unary ops, through the scalar layer. */
static double scalar_unary(emu_unary fn, const emu_format *f, double x,
                           double p1, double p2, const emu_rounding *r)
{
    switch (fn) {
    case EMU_UNARY_NEG: return emu_convert(f, -x, r, NULL);
    case EMU_UNARY_ABS: return emu_convert(f, fabs(x), r, NULL);
    case EMU_UNARY_RELU:
        return emu_convert(f, isnan(x) ? x : x > 0.0 ? x : 0.0, r, NULL);
    case EMU_UNARY_LEAKY_RELU:
        return isnan(x) || x > 0.0 ? emu_convert(f, x, r, NULL)
                                   : emu_mul(f, p1, x, r, NULL);
    case EMU_UNARY_SQRT: return emu_sqrt(f, x, r, NULL);
    case EMU_UNARY_SQUARE: return emu_mul(f, x, x, r, NULL);
    case EMU_UNARY_CLAMP:
        return emu_convert(f, isnan(x) ? x : x < p1 ? p1 : x > p2 ? p2 : x, r,
                           NULL);
    default: return NAN;
    }
}

static double ref_unary(emu_unary fn, const emu_format *f, double x,
                        double p1, double p2, const emu_rounding *r)
{
    switch (fn) {
    case EMU_UNARY_LEAKY_RELU:
        return isnan(x) || x > 0.0 ? emu_ref_convert(f, x, r, NULL)
                                   : emu_ref_mul(f, p1, x, r, NULL);
    case EMU_UNARY_SQRT: return emu_ref_sqrt(f, x, r, NULL);
    case EMU_UNARY_SQUARE: return emu_ref_mul(f, x, x, r, NULL);
    default: {
        emu_rounding rne = { .mode = EMU_RNE };
        /* the exact value is x or a bound: a conversion */
        double v = scalar_unary(fn, test_format("binary64"), x, p1, p2, &rne);
        return emu_ref_convert(f, v, r, NULL);
    }
    }
}

START_TEST(test_exact_unary)
{
    static const emu_unary fns[] = { EMU_UNARY_NEG, EMU_UNARY_ABS,
                                     EMU_UNARY_RELU, EMU_UNARY_LEAKY_RELU,
                                     EMU_UNARY_SQRT, EMU_UNARY_SQUARE,
                                     EMU_UNARY_CLAMP };
    unsigned long long before = n_failed;
    fmt_pair pairs[64];
    const size_t np = format_pairs(pairs);
    test_rng g = test_rng_make(0x0e);
    for (size_t k = 0; k < np; k++) {
        const fmt_pair *fp = &pairs[k];
        double ev[32];
        size_t ne = edge_values(fp->in, ev);
        const size_t n = ne + test_scaled(512, 32);
        emu_tensor x, y;
        make(&x, fp->in, n, "x");
        make(&y, fp->out, n, "y");
        for (size_t i = 0; i < n; i++)
            x.data[i] = (float)(i < ne ? ev[i] : random_value(&g, fp->in, NAN));
        for (size_t m = 0; m < sizeof fns / sizeof fns[0]; m++) {
            const emu_unary fn = fns[m];
            float p1 = fn == EMU_UNARY_LEAKY_RELU ? 0.01f : -1.5f;
            float p2 = 0x1.8p+7f;
            emu_ctx ctx;
            emu_ctx_init(&ctx, 77);
            for (int r = 0; r < N_ROUNDINGS; r++) {
                const emu_rounding *rnd = &roundings[r];
                const uint64_t stream = ctx.op_index;
                ck_assert_int_eq(emu_t_unary(&ctx, NULL, &y, &x, fn, p1, p2,
                                             rnd), 0);
                for (size_t i = 0; i < n; i++) {
                    double v = x.data[i];
                    emu_rng rg;
                    emu_rounding rr = scalar_rounding(rnd, &ctx, stream, i,
                                                      &rg);
                    expect(emu_unary_name(fn), fp->in, fp->out, &rr, 1, &v,
                           scalar_unary(fn, fp->out, v, p1, p2, &rr),
                           y.data[i]);
                    if (!emu_rnd_is_stochastic(rr.mode))
                        expect(emu_unary_name(fn), fp->in, fp->out, &rr, 1,
                               &v, ref_unary(fn, fp->out, v, p1, p2, &rr),
                               y.data[i]);
                }
            }
        }
        emu_tensor_free(&x);
        emu_tensor_free(&y);
    }
    ASSERT_NO_FAILURES(before);
}
END_TEST

/* ---- casts and loads ----------------------------------------------------- */

START_TEST(test_cast_load)
{
    unsigned long long before = n_failed;
    fmt_pair pairs[64];
    const size_t np = format_pairs(pairs);
    test_rng g = test_rng_make(0xca57);
    for (size_t k = 0; k < np; k++) {
        const fmt_pair *fp = &pairs[k];
        const size_t n = test_scaled(1024, 64);
        emu_tensor in, out;
        make(&in, fp->in, n, "in");
        make(&out, fp->out, n, "out");
        float *raw = malloc(n * sizeof *raw);
        ck_assert_ptr_nonnull(raw);
        for (size_t i = 0; i < n; i++) {
            in.data[i] = (float)random_value(&g, fp->in, NAN);
            uint32_t u = (uint32_t)test_next(&g);
            memcpy(&raw[i], &u, sizeof u); /* any binary32, NaNs too */
        }
        emu_ctx ctx;
        emu_ctx_init(&ctx, 3);
        for (int r = 0; r < N_ROUNDINGS; r++) {
            const emu_rounding *rnd = &roundings[r];
            for (int load = 0; load < 2; load++) {
                const uint64_t stream = ctx.op_index;
                const float *src = load ? raw : in.data;
                ck_assert_int_eq(load ? emu_t_load(&ctx, "l", &out, raw, n, rnd)
                                      : emu_t_cast(&ctx, "c", &out, &in, rnd),
                                 0);
                for (size_t i = 0; i < n; i++) {
                    double v = src[i];
                    emu_rng rg;
                    emu_rounding rr = scalar_rounding(rnd, &ctx, stream, i,
                                                      &rg);
                    const char *what = load ? "load" : "cast";
                    expect(what, load ? test_format("binary32") : fp->in,
                           fp->out, &rr, 1, &v,
                           emu_convert(fp->out, v, &rr, NULL), out.data[i]);
                    if (!emu_rnd_is_stochastic(rr.mode))
                        expect(what, fp->in, fp->out, &rr, 1, &v,
                               emu_ref_convert(fp->out, v, &rr, NULL),
                               out.data[i]);
                }
            }
        }
        free(raw);
        emu_tensor_free(&in);
        emu_tensor_free(&out);
    }
    ASSERT_NO_FAILURES(before);
}
END_TEST

/* ---- backward ------------------------------------------------------------ */

/* make_odd: r (precision P) rounded toward zero with ternary t, made odd. */
static void make_odd(mpfr_ptr r, int t)
{
    if (!t || !mpfr_regular_p(r))
        return;
    MPFR_DECL_INIT(h, P);
    mpfr_mul_2si(h, r, -(mpfr_get_exp(r) - P) - 1, MPFR_RNDN);
    if (mpfr_integer_p(h)) {
        if (mpfr_signbit(r))
            mpfr_nextbelow(r);
        else
            mpfr_nextabove(r);
    }
}

static mpfr_t zw1, zw2, zw3;

/* dy * gelu'(x), rounded to odd at P bits (or a stand-in that rounds the
 * same way), by Ziv's loop: gelu'(x) = (1 + erf(x/sqrt2))/2 + x phi(x)
 * for x >= 0, erfc(|x|/sqrt2)/2 + x phi(x) for x < 0. */
static void ref_gelu_grad(mpfr_ptr r, double dy, double x)
{
    static bool init;
    if (!init)
        mpfr_inits2(64, zw1, zw2, zw3, (mpfr_ptr)0);
    init = true;
    if (x > 12.0) {
        /* 1 < gelu'(x) < 1 + phi(x) x, phi(12) 12 < 2^-(P + 10) */
        mpfr_set_d(r, dy, MPFR_RNDN);
        if (dy > 0)
            mpfr_nextabove(r);
        else
            mpfr_nextbelow(r);
        return;
    }
    if (x < -40.0) {
        /* gelu'(x) < 0, |gelu'(x)| < e^-800: far below every format */
        mpfr_set_si_2exp(r, dy > 0 ? -1 : 1, -100000, MPFR_RNDN);
        return;
    }
    for (mpfr_prec_t w = 128;; w *= 2) {
        mpfr_set_prec(zw1, w);
        mpfr_set_prec(zw2, w);
        mpfr_set_prec(zw3, w);
        /* t1 = Phi(x), relative error < (4 + 2.01 cond) 2^-w */
        mpfr_sqrt_ui(zw3, 2, MPFR_RNDN);
        mpfr_set_d(zw1, fabs(x), MPFR_RNDN);
        mpfr_div(zw1, zw1, zw3, MPFR_RNDN);
        double az = fabs(x) * 0.7072, rel1;
        if (x >= 0.0) {
            mpfr_erf(zw1, zw1, MPFR_RNDN);
            mpfr_add_ui(zw1, zw1, 1, MPFR_RNDN);
            rel1 = 6.0;
        } else {
            mpfr_erfc(zw1, zw1, MPFR_RNDN);
            rel1 = 4.0 + 2.01 * (2.0 * az + 2.0) * az;
        }
        mpfr_div_2ui(zw1, zw1, 1, MPFR_RNDN);
        /* t2 = x e^(-x^2/2) / sqrt(2 pi), relative error < 8 2^-w */
        mpfr_set_d(zw2, x, MPFR_RNDN);
        mpfr_sqr(zw2, zw2, MPFR_RNDN);
        mpfr_div_2ui(zw2, zw2, 1, MPFR_RNDN);
        mpfr_neg(zw2, zw2, MPFR_RNDN);
        mpfr_exp(zw2, zw2, MPFR_RNDN);
        mpfr_const_pi(zw3, MPFR_RNDN);
        mpfr_mul_2ui(zw3, zw3, 1, MPFR_RNDN);
        mpfr_sqrt(zw3, zw3, MPFR_RNDN);
        mpfr_div(zw2, zw2, zw3, MPFR_RNDN);
        mpfr_mul_d(zw2, zw2, x, MPFR_RNDN);
        double e = rel1 * mpfr_get_d(zw1, MPFR_RNDA) +
                   8.0 * fabs(mpfr_get_d(zw2, MPFR_RNDA));
        mpfr_set_prec(zw3, 2 * w);
        mpfr_add(zw3, zw1, zw2, MPFR_RNDN);      /* + 2^-w of the sum */
        e += fabs(mpfr_get_d(zw3, MPFR_RNDA));
        mpfr_mul_d(zw3, zw3, dy, MPFR_RNDN);     /* exact: 2w >= w + 24 */
        int be;
        frexp(e * fabs(dy) * 1.001, &be);        /* error < 2^(be - w) */
        long err = (long)mpfr_get_exp(zw3) - (be - (long)w);
        if (!mpfr_zero_p(zw3) &&
            mpfr_can_round(zw3, err, MPFR_RNDN, MPFR_RNDZ, P))
            break;
        if (w >= 8192)
            ck_abort_msg("gelu' reference: no decision at x = %a", x);
    }
    mpfr_set(r, zw3, MPFR_RNDZ);
    make_odd(r, 1);
}

/* The exact dy * f'(.) (v is x or y as the op takes it), rounded to odd at
 * P bits where it is not exact; NaN where IEEE makes one. */
static void ref_backward(emu_unary fn, double dy, double v, double slope,
                         mpfr_ptr r)
{
    MPFR_DECL_INIT(t, 1024);
    MPFR_DECL_INIT(u, 1024);
    if (isnan(dy) || (isnan(v) && fn != EMU_UNARY_NEG)) {
        mpfr_set_nan(r); /* neg' = -1 does not look at x */
        return;
    }
    if (isinf(dy) || isinf(v) || dy == 0.0) {
        /* IEEE arithmetic of the formula; exact in binary64 here */
        double d;
        switch (fn) {
        case EMU_UNARY_TANH: d = dy * (1.0 - v * v); break;
        case EMU_UNARY_SIGMOID: d = dy * v * (1.0 - v); break;
        case EMU_UNARY_LOG: d = dy / v; break;
        case EMU_UNARY_SQRT: d = dy / (2.0 * v); break;
        case EMU_UNARY_EXP: d = dy * v; break;
        case EMU_UNARY_SQUARE: d = dy * (2.0 * v); break;
        case EMU_UNARY_NEG: d = -dy; break;
        case EMU_UNARY_ABS: d = dy * ((v > 0.0) - (v < 0.0)); break;
        case EMU_UNARY_RELU: d = dy * (v > 0.0); break;
        case EMU_UNARY_LEAKY_RELU: d = dy * (v > 0.0 ? 1.0 : slope); break;
        default: /* gelu */
            if (isinf(v))
                d = dy * (v > 0.0 ? 1.0 : 0.0);
            else if (v < -38.0)
                d = dy * -0x1p-700; /* gelu' < 0 there, and underflows */
            else
                d = dy * (v == 0.0 ? 0.5
                                   : 0.5 * erfc(-v * 0x1.6a09e667f3bcdp-1) +
                                         v * exp(-0.5 * v * v) *
                                             0x1.9884533d43651p-2);
            break;
        }
        mpfr_set_d(r, d, MPFR_RNDN);
        return;
    }
    switch (fn) {
    case EMU_UNARY_TANH: /* dy (1 - v^2), exact at 1024 bits */
        mpfr_set_d(t, v, MPFR_RNDN);
        mpfr_sqr(t, t, MPFR_RNDN);
        mpfr_ui_sub(t, 1, t, MPFR_RNDN);
        mpfr_mul_d(t, t, dy, MPFR_RNDN);
        make_odd(r, mpfr_set(r, t, MPFR_RNDZ));
        return;
    case EMU_UNARY_SIGMOID: /* dy v (1 - v) */
        mpfr_set_d(t, v, MPFR_RNDN);
        mpfr_ui_sub(u, 1, t, MPFR_RNDN);
        mpfr_mul(t, t, u, MPFR_RNDN);
        mpfr_mul_d(t, t, dy, MPFR_RNDN);
        make_odd(r, mpfr_set(r, t, MPFR_RNDZ));
        return;
    case EMU_UNARY_LOG:
    case EMU_UNARY_SQRT:
        mpfr_set_d(t, dy, MPFR_RNDN);
        mpfr_set_d(u, fn == EMU_UNARY_LOG ? v : 2.0 * v, MPFR_RNDN);
        make_odd(r, mpfr_div(r, t, u, MPFR_RNDZ));
        return;
    case EMU_UNARY_GELU:
        if (v == 0.0)
            mpfr_set_d(r, dy * 0.5, MPFR_RNDN);
        else
            ref_gelu_grad(r, dy, v);
        return;
    default: { /* products: exact */
        double d = fn == EMU_UNARY_EXP ? v
                 : fn == EMU_UNARY_SQUARE ? 2.0 * v
                 : fn == EMU_UNARY_NEG ? -1.0
                 : fn == EMU_UNARY_ABS ? (double)((v > 0.0) - (v < 0.0))
                 : v > 0.0 ? 1.0
                 : fn == EMU_UNARY_LEAKY_RELU ? slope : 0.0;
        mpfr_set_d(t, dy, MPFR_RNDN);
        mpfr_mul_d(t, t, d, MPFR_RNDN);
        make_odd(r, mpfr_set(r, t, MPFR_RNDZ));
        return;
    }
    }
}

/* A backward input v (x or y): for tanh and sigmoid mostly values of the
 * forward output's range, near its ends; else any value. */
static double backward_input(test_rng *g, const emu_format *f, emu_unary fn)
{
    double v = emu_decode(f, test_random_bits(g, f));
    if ((fn == EMU_UNARY_TANH || fn == EMU_UNARY_SIGMOID) &&
        test_below(g, 4) != 0) {
        switch (test_below(g, 4)) {
        case 0: v = 1.0; break;
        case 1: v = fn == EMU_UNARY_TANH ? -1.0 : 0.0; break;
        case 2: v = ldexp(1.0, -(int)test_below(g, 30)); break;
        default: v = fabs(fmod(v, 1.0)); break;
        }
        for (uint64_t k = test_below(g, 3); k > 0; k--)
            v = test_below(g, 2) ? emu_next_up(f, v) : emu_next_down(f, v);
        if (fn == EMU_UNARY_TANH && test_below(g, 2))
            v = -v;
    }
    if (fn == EMU_UNARY_GELU && test_below(g, 3) == 0) {
        /* around gelu's minimum, where gelu' vanishes */
        v = -0.7517915 + ldexp((double)test_below(g, 2001) - 1000.0, -20);
        v = emu_round(f, v, NULL, NULL);
    }
    return v;
}

START_TEST(test_backward)
{
    static const emu_unary fns[] = {
        EMU_UNARY_RELU, EMU_UNARY_LEAKY_RELU, EMU_UNARY_TANH,
        EMU_UNARY_SIGMOID, EMU_UNARY_GELU, EMU_UNARY_EXP, EMU_UNARY_LOG,
        EMU_UNARY_SQRT, EMU_UNARY_SQUARE, EMU_UNARY_NEG, EMU_UNARY_ABS,
    };
    const emu_unary fn = fns[_i];
    unsigned long long before = n_failed;
    static const char *const pairs[][2] = {
        { "binary16", "binary16" }, { "bfloat16", "bfloat16" },
        { "binary32", "binary32" }, { "binary32", "bfloat16" },
        { "e4m3", "e4m3" },         { "binary16", "e5m2" },
    };
    test_rng g = test_rng_make(0xbac + (uint64_t)fn);
    const float slope = 0.125f;
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        const emu_format *in = test_format(pairs[k][0]);
        const emu_format *out = test_format(pairs[k][1]);
        const size_t n = test_scaled(2048, 128);
        emu_tensor dy, v, dx;
        make(&dy, in, n, "dy");
        make(&v, in, n, "v");
        make(&dx, out, n, "dx");
        mpfr_t *refs = malloc(n * sizeof *refs);
        ck_assert_ptr_nonnull(refs);
        for (size_t i = 0; i < n; i++) {
            dy.data[i] = (float)emu_decode(in, test_random_bits(&g, in));
            if (test_below(&g, 8) == 0)
                dy.data[i] = 1.0f;
            v.data[i] = (float)backward_input(&g, in, fn);
            mpfr_init2(refs[i], P);
            ref_backward(fn, dy.data[i], v.data[i], slope, refs[i]);
        }
        emu_ctx ctx;
        emu_ctx_init(&ctx, 11);
        for (int r = 0; r < N_ROUNDINGS; r++) {
            const emu_rounding *rnd = &roundings[r];
            if (emu_rnd_is_stochastic(rnd->mode))
                continue; /* SR of these: test_choke_point */
            ck_assert_int_eq(emu_t_unary_backward(&ctx, "bw", &dx, &dy, &v, fn,
                                                  slope, rnd), 0);
            for (size_t i = 0; i < n; i++) {
                double ops[2] = { dy.data[i], v.data[i] };
                double want = emu_ref_round(out, refs[i], rnd, NULL);
                char name[40];
                snprintf(name, sizeof name, "%s_backward", emu_unary_name(fn));
                expect(name, in, out, rnd, 2, ops, want, dx.data[i]);
            }
        }
        for (size_t i = 0; i < n; i++)
            mpfr_clear(refs[i]);
        free(refs);
        emu_tensor_free(&dy);
        emu_tensor_free(&v);
        emu_tensor_free(&dx);
    }
    ASSERT_NO_FAILURES(before);
}
END_TEST

/* gelu backward on its table-driven fast path (ops_elementwise.c):
 * every binary16 and bfloat16 argument x, with dy = 1 and with a random
 * binary32 dy (tiny, huge and subnormal-output products included), then
 * random binary32 arguments over the table's range and around the zero
 * of gelu', into binary32, binary16 and bfloat16, in every deterministic
 * mode, against MPFR. */
START_TEST(test_gelu_backward_exhaustive)
{
    unsigned long long before = n_failed;
    static const char *const ins[] = { "binary16", "bfloat16", "binary32" };
    static const char *const outs[] = { "binary32", "binary16", "bfloat16" };
    const emu_format *b32 = test_format("binary32");
    test_rng g = test_rng_make(0x9e1u);
    for (size_t k = 0; k < 3; k++) {
        const emu_format *in = test_format(ins[k]);
        const bool all = in->bits <= 16;
        const size_t n = all ? (size_t)1 << in->bits : test_scaled(1 << 16, 512);
        emu_tensor dy, v;
        make(&dy, b32, n, "dy");
        make(&v, in, n, "v");
        for (int pass = 0; pass < 2; pass++) {
            for (size_t i = 0; i < n; i++) {
                double x;
                if (all) {
                    x = emu_decode(in, (emu_bits){ i });
                } else if (test_below(&g, 4) == 0) {
                    x = -0.7517915 + ldexp((double)test_below(&g, 1 << 16) -
                                               32768.0, -24);
                } else {
                    x = ldexp((double)test_below(&g, 1u << 24),
                              -24 + (int)test_below(&g, 28) - 24);
                    x = fmin(x, 9.0) * (test_below(&g, 2) ? -1.0 : 1.0);
                }
                v.data[i] = (float)x;
                double d = 1.0;
                if (pass) {
                    d = emu_decode(b32, test_random_bits(&g, b32));
                    if (!isfinite(d) || test_below(&g, 2))
                        d = ldexp(1.0 + (double)test_below(&g, 1u << 23) *
                                            0x1p-23,
                                  (int)test_below(&g, 300) - 150);
                }
                dy.data[i] = (float)d;
            }
            mpfr_t *refs = malloc(n * sizeof *refs);
            ck_assert_ptr_nonnull(refs);
            for (size_t i = 0; i < n; i++) {
                mpfr_init2(refs[i], P);
                ref_backward(EMU_UNARY_GELU, dy.data[i], v.data[i], 0.0,
                             refs[i]);
            }
            for (size_t o = 0; o < 3; o++) {
                const emu_format *out = test_format(outs[o]);
                emu_tensor dx;
                make(&dx, out, n, "dx");
                emu_ctx ctx;
                emu_ctx_init(&ctx, 12);
                for (int r = 0; r < N_ROUNDINGS; r++) {
                    const emu_rounding *rnd = &roundings[r];
                    if (emu_rnd_is_stochastic(rnd->mode))
                        continue;
                    ck_assert_int_eq(emu_t_unary_backward(&ctx, "bw", &dx, &dy,
                                                          &v, EMU_UNARY_GELU,
                                                          0.0f, rnd), 0);
                    for (size_t i = 0; i < n; i++) {
                        double ops[2] = { dy.data[i], v.data[i] };
                        double want = emu_ref_round(out, refs[i], rnd, NULL);
                        expect("gelu_backward", in, out, rnd, 2, ops, want,
                               dx.data[i]);
                    }
                }
                emu_tensor_free(&dx);
            }
            for (size_t i = 0; i < n; i++)
                mpfr_clear(refs[i]);
            free(refs);
        }
        emu_tensor_free(&dy);
        emu_tensor_free(&v);
    }
    ASSERT_NO_FAILURES(before);
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

/* Runs `call`, which must fail: ctx->err names the site and mentions
 * `needle`; out's data and the op counter are unchanged. */
#define EXPECT_FAIL(ctx, out, needle, call)                                   \
    do {                                                                      \
        float save_[8];                                                       \
        size_t nsave_ = (out)->data ? ((out)->n < 8 ? (out)->n : 8) : 0;      \
        if (nsave_)                                                           \
            memcpy(save_, (out)->data, nsave_ * sizeof save_[0]);             \
        uint64_t idx_ = (ctx)->op_index;                                      \
        memset(&(ctx)->err, 0, sizeof (ctx)->err);                            \
        ck_assert_int_eq((call), -1);                                         \
        ck_assert_msg(strstr((ctx)->err.message, (needle)) != NULL,           \
                      "error '%s' does not mention '%s'", (ctx)->err.message, \
                      (needle));                                              \
        ck_assert_str_eq((ctx)->err.where, "site");                           \
        ck_assert_uint_eq((ctx)->op_index, idx_);                             \
        if (nsave_)                                                           \
            ck_assert(memcmp(save_, (out)->data,                              \
                             nsave_ * sizeof save_[0]) == 0);                 \
    } while (0)

START_TEST(test_errors)
{
    const emu_format *h = test_format("binary16");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_tensor a, b, out, big, bias, none;
    make(&a, h, 6, "a");
    make(&b, h, 6, "b");
    make(&out, h, 6, "out");
    make(&big, h, 7, "big");
    make(&bias, h, 4, "bias");
    memset(&none, 0, sizeof none);
    for (int i = 0; i < 6; i++)
        out.data[i] = (float)(i + 1); /* a sentinel the ops must not touch */

    EXPECT_FAIL(&ctx, &out, "shape mismatch",
                emu_t_add(&ctx, "site", &out, &a, &big, &test_rne));
    EXPECT_FAIL(&ctx, &out, "shape mismatch",
                emu_t_sub(&ctx, "site", &out, &big, &a, &test_rne));
    EXPECT_FAIL(&ctx, &out, "shape mismatch",
                emu_t_mul(&ctx, "site", &out, &a, &big, &test_rne));
    EXPECT_FAIL(&ctx, &big, "shape mismatch",
                emu_t_div(&ctx, "site", &big, &a, &b, &test_rne));
    EXPECT_FAIL(&ctx, &big, "shape mismatch",
                emu_t_scale(&ctx, "site", &big, 2.0f, &a, &test_rne));
    EXPECT_FAIL(&ctx, &out, "shape mismatch",
                emu_t_axpy(&ctx, "site", &out, 2.0f, &a, &big, &test_rne));
    EXPECT_FAIL(&ctx, &big, "shape mismatch",
                emu_t_cast(&ctx, "site", &big, &a, &test_rne));
    EXPECT_FAIL(&ctx, &big, "shape mismatch",
                emu_t_unary(&ctx, "site", &big, &a, EMU_UNARY_EXP, 0, 0,
                            &test_rne));
    EXPECT_FAIL(
        &ctx, &out, "shape mismatch",
        emu_t_unary_backward(&ctx, "site", &out, &a, &big, EMU_UNARY_TANH, 0,
                             &test_rne));
    EXPECT_FAIL(&ctx, &out, "not allocated",
                emu_t_add(&ctx, "site", &out, &a, &none, &test_rne));
    EXPECT_FAIL(&ctx, &out, "not allocated",
                emu_t_unary(&ctx, "site", &out, NULL, EMU_UNARY_NEG, 0, 0,
                            &test_rne));
    EXPECT_FAIL(&ctx, &none, "not allocated",
                emu_t_add(&ctx, "site", &none, &a, &b, &test_rne));
    /* a tensor whose format the carrier cannot hold (built by hand: the
     * allocator refuses it) */
    emu_tensor wide = a;
    wide.fmt = *test_format("binary64");
    EXPECT_FAIL(&ctx, &out, "carrier",
                emu_t_add(&ctx, "site", &out, &a, &wide, &test_rne));
    EXPECT_FAIL(&ctx, &out, "carrier", emu_t_cast(&ctx, "site", &out, &wide,
                                                  &test_rne));
    EXPECT_FAIL(&ctx, &out, "unknown unary",
                emu_t_unary(&ctx, "site", &out, &a, EMU_UNARY_COUNT, 0, 0,
                            &test_rne));
    EXPECT_FAIL(&ctx, &out, "unknown unary",
                emu_t_unary(&ctx, "site", &out, &a, (emu_unary)-1, 0, 0,
                            &test_rne));
    EXPECT_FAIL(
        &ctx, &out, "clamp",
        emu_t_unary(&ctx, "site", &out, &a, EMU_UNARY_CLAMP, 2.0f, 1.0f,
                    &test_rne));
    EXPECT_FAIL(
        &ctx, &out, "clamp",
        emu_t_unary(&ctx, "site", &out, &a, EMU_UNARY_CLAMP, NAN, 1.0f,
                    &test_rne));
    EXPECT_FAIL(
        &ctx, &out, "slope",
        emu_t_unary(&ctx, "site", &out, &a, EMU_UNARY_LEAKY_RELU, INFINITY, 0,
                    &test_rne));
    EXPECT_FAIL(&ctx, &out, "slope",
                emu_t_unary_backward(&ctx, "site", &out, &a, &b,
                                     EMU_UNARY_LEAKY_RELU, NAN, &test_rne));
    EXPECT_FAIL(
        &ctx, &out, "no backward",
        emu_t_unary_backward(&ctx, "site", &out, &a, &b, EMU_UNARY_CLAMP, 0,
                             &test_rne));
    EXPECT_FAIL(
        &ctx, &out, "no backward",
        emu_t_unary_backward(&ctx, "site", &out, &a, &b, EMU_UNARY_COUNT, 0,
                             &test_rne));
    EXPECT_FAIL(&ctx, &out, "source", emu_t_load(&ctx, "site", &out, NULL, 6,
                                                 &test_rne));
    float src[6] = { 1, 2, 3, 4, 5, 6 };
    EXPECT_FAIL(&ctx, &out, "5 source values",
                emu_t_load(&ctx, "site", &out, src, 5, &test_rne));
    /* the rounding is an argument without a default: NULL and unknown
     * modes are refused before anything is computed */
    EXPECT_FAIL(&ctx, &out, "no rounding",
                emu_t_add(&ctx, "site", &out, &a, &b, NULL));
    EXPECT_FAIL(&ctx, &out, "no rounding",
                emu_t_scale(&ctx, "site", &out, 2.0f, &a, NULL));
    EXPECT_FAIL(&ctx, &out, "no rounding",
                emu_t_unary(&ctx, "site", &out, &a, EMU_UNARY_EXP, 0, 0, NULL));
    EXPECT_FAIL(&ctx, &out, "no rounding",
                emu_t_load(&ctx, "site", &out, src, 6, NULL));
    const emu_rounding bad = { .mode = EMU_RND_COUNT };
    EXPECT_FAIL(&ctx, &out, "unknown rounding mode",
                emu_t_cast(&ctx, "site", &out, &a, &bad));

    /* add_bias: axis and bias size */
    emu_error err;
    emu_tensor m, mo;
    const size_t shape[2] = { 3, 4 };
    ck_assert_int_eq(
        emu_tensor_alloc(&m, "m", EMU_ROLE_ACTIVATION, h, 2, shape, &err), 0);
    ck_assert_int_eq(
        emu_tensor_alloc(&mo, "mo", EMU_ROLE_ACTIVATION, h, 2, shape, &err), 0);
    EXPECT_FAIL(&ctx, &mo, "axis 2",
                emu_t_add_bias(&ctx, "site", &mo, &m, &bias, 2, &test_rne));
    EXPECT_FAIL(&ctx, &mo, "axis -1",
                emu_t_add_bias(&ctx, "site", &mo, &m, &bias, -1, &test_rne));
    EXPECT_FAIL(&ctx, &mo, "4 elements",
                emu_t_add_bias(&ctx, "site", &mo, &m, &bias, 0, &test_rne));
    EXPECT_FAIL(&ctx, &mo, "shape mismatch",
                emu_t_add_bias(&ctx, "site", &mo, &big, &bias, 0, &test_rne));
    ck_assert_int_eq(emu_t_add_bias(&ctx, "site", &mo, &m, &bias, 1, &test_rne),
                     0);

    /* a good call after all that still works and counts */
    uint64_t idx = ctx.op_index;
    ck_assert_int_eq(emu_t_add(&ctx, "site", &out, &a, &b, &test_rne), 0);
    ck_assert_uint_eq(ctx.op_index, idx + 1);
    ck_assert_int_eq(emu_t_load(&ctx, "site", &out, src, 6, &test_rne), 0);
    ck_assert_float_eq(out.data[5], 6.0f);

    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&out);
    emu_tensor_free(&big);
    emu_tensor_free(&bias);
    emu_tensor_free(&m);
    emu_tensor_free(&mo);
}
END_TEST

START_TEST(test_names)
{
    const char *want[EMU_UNARY_COUNT] = {
        "neg", "abs", "relu", "leaky_relu", "gelu", "tanh", "sigmoid",
        "exp", "log", "sqrt", "square", "clamp",
    };
    for (int f = 0; f < EMU_UNARY_COUNT; f++)
        ck_assert_str_eq(emu_unary_name((emu_unary)f), want[f]);
    ck_assert_str_eq(emu_unary_name(EMU_UNARY_COUNT), "?");
    ck_assert_str_eq(emu_unary_name((emu_unary)-3), "?");
}
END_TEST

/* ---- in place, with every measurement on --------------------------------- */

/* Each op computed in place (out aliasing an input) gives the out-of-place
 * result, and its MPFR samples (rate 1) see the inputs as they were: a
 * correctly rounded op measures at most half an ulp. */
START_TEST(test_in_place)
{
    const emu_format *h = test_format("binary16");
    const size_t n = 257;
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 9);
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    emu_tensor a, b, a2, want;
    make(&a, h, n, "a");
    make(&b, h, n, "b");
    make(&a2, h, n, "a2");
    make(&want, h, n, "want");
    test_rng g = test_rng_make(0x1a);
    for (int op = 0; op < 8; op++) {
        for (size_t i = 0; i < n; i++) {
            a.data[i] =
                (float)ldexp((double)(test_below(&g, 2001)) - 1000.0, -7);
            b.data[i] =
                (float)ldexp((double)(test_below(&g, 2001)) - 1000.0, -9);
        }
        memcpy(a2.data, a.data, n * sizeof *a.data);
        char site[16];
        snprintf(site, sizeof site, "inplace%d", op);
        emu_ctx plain;
        emu_ctx_init(&plain, 9);
        int rc1, rc2;
        switch (op) {
        case 0:
            rc1 = emu_t_add(&plain, "p", &want, &a, &b, &test_rne);
            rc2 = emu_t_add(&ctx, site, &a2, &a2, &b, &test_rne);
            break;
        case 1:
            rc1 = emu_t_div(&plain, "p", &want, &b, &a, &test_rne);
            rc2 = emu_t_div(&ctx, site, &a2, &b, &a2, &test_rne);
            break;
        case 2:
            rc1 = emu_t_axpy(&plain, "p", &want, 0.3f, &a, &b, &test_rne);
            rc2 = emu_t_axpy(&ctx, site, &a2, 0.3f, &a2, &b, &test_rne);
            break;
        case 3:
            rc1 = emu_t_unary(&plain, "p", &want, &a, EMU_UNARY_TANH, 0, 0,
                              &test_rne);
            rc2 = emu_t_unary(&ctx, site, &a2, &a2, EMU_UNARY_TANH, 0, 0,
                              &test_rne);
            break;
        case 4:
            rc1 = emu_t_unary(&plain, "p", &want, &a, EMU_UNARY_GELU, 0, 0,
                              &test_rne);
            rc2 = emu_t_unary(&ctx, site, &a2, &a2, EMU_UNARY_GELU, 0, 0,
                              &test_rne);
            break;
        case 5:
            rc1 = emu_t_unary_backward(&plain, "p", &want, &b, &a,
                                       EMU_UNARY_TANH, 0, &test_rne);
            rc2 = emu_t_unary_backward(&ctx, site, &a2, &b, &a2, EMU_UNARY_TANH,
                                       0, &test_rne);
            break;
        case 6:
            rc1 = emu_t_scale(&plain, "p", &want, 0.1f, &a, &test_rne);
            rc2 = emu_t_scale(&ctx, site, &a2, 0.1f, &a2, &test_rne);
            break;
        default:
            rc1 = emu_t_mul(&plain, "p", &want, &a, &a, &test_rne);
            rc2 = emu_t_mul(&ctx, site, &a2, &a2, &a2, &test_rne);
            break;
        }
        ck_assert_int_eq(rc1, 0);
        ck_assert_int_eq(rc2, 0);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(test_same(want.data[i], a2.data[i]),
                          "op %d element %zu: in place %a, out of place %a",
                          op, i, (double)a2.data[i], (double)want.data[i]);
        const emu_site *s = emu_stats_site(&stats, site, NULL,
                                           EMU_ROLE_ACTIVATION, h);
        ck_assert_uint_eq(s->total.results, n);
        ck_assert_uint_gt(s->total.ref_samples, n / 2);
        ck_assert_msg(s->total.ulp_max <= 0.5, "op %d in place: MPFR sees "
                      "%g ulp (inputs overwritten before sampling?)", op,
                      s->total.ulp_max);
    }
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&a2);
    emu_tensor_free(&want);
    emu_stats_free(&stats);
}
END_TEST

/* ---- NaN and infinity ---------------------------------------------------- */

/* NaN inputs propagate, inf - inf, 0 * inf, 0/0, sqrt(-1), log(-1) make
 * NaN, and the statistics tell the two apart. */
START_TEST(test_nan_accounting)
{
    const emu_format *h = test_format("binary16");
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 2);
    ctx.stats = &stats;
    emu_tensor a, b, y;
    const float av[] = {INFINITY, NAN, 1.0f, 0.0f, -INFINITY, 2.0f, NAN, 0.0f};
    const float bv[] = {-INFINITY, 1.0f, NAN, INFINITY,
                        INFINITY,  3.0f, NAN, 0.0f};
    const size_t n = sizeof av / sizeof av[0];
    make(&a, h, n, "a");
    make(&b, h, n, "b");
    make(&y, h, n, "y");
    memcpy(a.data, av, sizeof av);
    memcpy(b.data, bv, sizeof bv);
    /* add: inf + -inf (produced), NaN + 1, 1 + NaN, 0 + inf = inf,
     * -inf + inf (produced), 2 + 3, NaN + NaN, 0 + 0 */
    ck_assert_int_eq(emu_t_add(&ctx, "add", &y, &a, &b, &test_rne), 0);
    ck_assert(isnan(y.data[0]) && isnan(y.data[1]) && isnan(y.data[2]));
    ck_assert(y.data[3] == INFINITY && isnan(y.data[4]) && y.data[5] == 5.0f);
    /* mul: inf * -inf = -inf, NaN, NaN, 0 * inf (produced), -inf * inf,
     * 6, NaN, 0 */
    ck_assert_int_eq(emu_t_mul(&ctx, "mul", &y, &a, &b, &test_rne), 0);
    ck_assert(y.data[0] == -INFINITY && isnan(y.data[3]) && y.data[5] == 6.0f);
    /* div: inf/-inf (produced), NaN, NaN, 0/inf = 0, -inf/inf (produced),
     * 2/3, NaN, 0/0 (produced) */
    ck_assert_int_eq(emu_t_div(&ctx, "div", &y, &a, &b, &test_rne), 0);
    ck_assert(isnan(y.data[0]) && y.data[3] == 0.0f && isnan(y.data[7]));
    /* unary on b: sqrt(-inf) (produced), sqrt(NaN); log(-inf) (produced),
     * log(NaN), log(0) = -inf */
    ck_assert_int_eq(emu_t_unary(&ctx, "sqrt", &y, &b, EMU_UNARY_SQRT, 0, 0,
                                 &test_rne),
                     0);
    ck_assert_int_eq(emu_t_unary(&ctx, "log", &y, &b, EMU_UNARY_LOG, 0, 0,
                                 &test_rne), 0);
    ck_assert(y.data[7] == -INFINITY);
    /* backward: dy = a, relu' at b: inf * 0 (b = -inf: produced) */
    ck_assert_int_eq(emu_t_unary_backward(&ctx, "relu_bw", &y, &a, &b,
                                          EMU_UNARY_RELU, 0, &test_rne), 0);
    const struct {
        const char *site;
        uint64_t nan, produced;
    } want[] = {
        { "add", 5, 2 }, { "mul", 4, 1 }, { "div", 6, 3 },
        { "sqrt", 3, 1 }, { "log", 3, 1 }, { "relu_bw", 4, 1 },
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const emu_site *s = emu_stats_site(&stats, want[k].site, NULL,
                                           EMU_ROLE_ACTIVATION, h);
        ck_assert_msg(s->total.nan == want[k].nan &&
                      s->total.nan_produced == want[k].produced,
                      "%s: %llu NaN (%llu produced), want %llu (%llu)",
                      want[k].site, (unsigned long long)s->total.nan,
                      (unsigned long long)s->total.nan_produced,
                      (unsigned long long)want[k].nan,
                      (unsigned long long)want[k].produced);
        ck_assert_uint_eq(s->total.results, n);
    }
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&y);
    emu_stats_free(&stats);
}
END_TEST

/* A diverged model's arrays are all NaN: every NaN output passed on,
 * none made, also where the other input would make one (inf - inf, a
 * bias of inf beside -inf); arrays NaN in all but their last element
 * (past the first block of the all-NaN scan) still tell the made ones. */
START_TEST(test_nan_all_inputs)
{
    const emu_format *h = test_format("binary16");
    enum { R = 9, D = 20, N = R * D };
    emu_error err;
    const size_t shape[2] = { R, D }, dn = D;
    emu_tensor x, y, bias, out;
    ck_assert_int_eq(emu_tensor_alloc(&x, "x", EMU_ROLE_ACTIVATION, h, 2,
                                      shape, &err), 0);
    ck_assert_int_eq(emu_tensor_alloc(&y, "y", EMU_ROLE_ACTIVATION, h, 2,
                                      shape, &err), 0);
    ck_assert_int_eq(emu_tensor_alloc(&out, "out", EMU_ROLE_ACTIVATION, h, 2,
                                      shape, &err), 0);
    ck_assert_int_eq(emu_tensor_alloc(&bias, "bias", EMU_ROLE_ACTIVATION, h,
                                      1, &dn, &err), 0);
    for (int threads = 1; threads <= 2; threads++)
        for (int partial = 0; partial < 2; partial++) {
            emu_stats stats;
            emu_stats_init(&stats);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 3);
            ctx.stats = &stats;
            ctx.threads = threads;
            for (size_t i = 0; i < N; i++) {
                x.data[i] = i % 2 ? NAN : -NAN;
                y.data[i] = i % 3 ? -INFINITY : 1.0f;
            }
            for (size_t j = 0; j < D; j++)
                bias.data[j] = NAN;
            /* partial: the last x and bias values are inf (inf + -inf
             * made) */
            if (partial) {
                x.data[N - 1] = INFINITY; /* y's last is -inf (N - 1 = 179) */
                bias.data[D - 1] = INFINITY;
            }
            ck_assert_int_eq(emu_t_add(&ctx, "add", &out, &x, &y, &test_rne), 0);
            ck_assert_int_eq(emu_t_add(&ctx, "add2", &out, &y, &x, &test_rne), 0);
            ck_assert_int_eq(emu_t_add_bias(&ctx, "bias", &out, &y, &bias, 1,
                                            &test_rne), 0);
            ck_assert_int_eq(emu_t_unary_backward(&ctx, "relu_bw", &out, &x,
                                                  &y, EMU_UNARY_RELU, 0,
                                                  &test_rne), 0);
            /* bias: the last column is -inf + inf (made) where y is -inf,
             * 1 + inf elsewhere */
            uint64_t want_bias_made = 0;
            for (size_t r = 0; r < R; r++)
                want_bias_made += partial && (r * D + D - 1) % 3 != 0;
            const struct {
                const char *site;
                uint64_t nan, produced;
            } want[] = {
                { "add", N, (uint64_t)partial },
                { "add2", N, (uint64_t)partial },
                { "bias", N - (partial ? R - want_bias_made : 0),
                  want_bias_made },
                /* dy = x times relu'(y): inf * 0 at the inf (made) */
                { "relu_bw", N, (uint64_t)partial },
            };
            for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
                const emu_site *st = emu_stats_site(&stats, want[k].site, NULL,
                                                    EMU_ROLE_ACTIVATION, h);
                ck_assert_msg(st && st->total.nan == want[k].nan &&
                              st->total.nan_produced == want[k].produced,
                              "%s partial %d threads %d: %llu NaN (%llu "
                              "made), want %llu (%llu)", want[k].site,
                              partial, threads,
                              st ? (unsigned long long)st->total.nan : 0ull,
                              st ? (unsigned long long)st->total.nan_produced
                                 : 0ull,
                              (unsigned long long)want[k].nan,
                              (unsigned long long)want[k].produced);
            }
            emu_stats_free(&stats);
        }
    emu_tensor_free(&x);
    emu_tensor_free(&y);
    emu_tensor_free(&bias);
    emu_tensor_free(&out);
}
END_TEST

/* relu and its gradient go through bit-level runs of constant length and a
 * tail: at a length that leaves partial runs and a partial chunk, on
 * random bit patterns (NaNs, infinities, zeros and subnormals among
 * them) and ordinary values, into binary32 and bfloat16, in place too,
 * every output equals the scalar definition rounded once. */
START_TEST(test_relu_runs)
{
    enum { N = 2 * 1024 + 3 * 64 + 37 };
    test_rng g = test_rng_make(0x4e1);
    const char *outs[] = { "binary32", "bfloat16" };
    const emu_format *f32 = test_format("binary32");
    emu_tensor x, dy, y, xin;
    make(&x, f32, N, "x");
    make(&dy, f32, N, "dy");
    make(&xin, f32, N, "xin");
    for (int rep = 0; rep < 4; rep++) {
        for (size_t i = 0; i < N; i++) {
            const bool bits = test_below(&g, 4) == 0;
            x.data[i] = bits ? (float)emu_decode(f32, test_random_bits(&g, f32))
                             : (float)((int)test_below(&g, 9) - 4) * 0.375f;
            dy.data[i] = test_below(&g, 4) == 0
                             ? (float)emu_decode(f32, test_random_bits(&g, f32))
                             : (float)((int)test_below(&g, 9) - 4) * 0.25f;
        }
        if (rep == 0) /* runs without a rare element */
            for (size_t i = 0; i < N; i++)
                if (!isfinite(x.data[i]) || !isfinite(dy.data[i]))
                    x.data[i] = dy.data[i] = 1.5f;
        for (int k = 0; k < 2; k++) {
            const emu_format *of = test_format(outs[k]);
            make(&y, of, N, "y");
            emu_ctx ctx;
            emu_ctx_init(&ctx, 5);
            ck_assert_int_eq(emu_t_unary(&ctx, "r", &y, &x, EMU_UNARY_RELU, 0,
                                         0, &test_rne), 0);
            for (size_t i = 0; i < N; i++) {
                const double a = x.data[i];
                const double want = emu_round(of, isnan(a) || a > 0 ? a : 0.0,
                                              &test_rne, NULL);
                ck_assert_msg(test_same(want, y.data[i]), "relu %s [%zu] of "
                              "%a: %a, want %a", outs[k], i, a,
                              (double)y.data[i], want);
            }
            ck_assert_int_eq(emu_t_unary_backward(&ctx, "rb", &y, &dy, &x,
                                                  EMU_UNARY_RELU, 0, &test_rne),
                             0);
            for (size_t i = 0; i < N; i++) {
                const double d = dy.data[i], v = x.data[i];
                const double want = emu_round(
                    of, d * (isnan(v) ? v : v > 0.0 ? 1.0 : 0.0), &test_rne,
                    NULL);
                ck_assert_msg(test_same(want, y.data[i]), "relu backward %s "
                              "[%zu] of dy %a, x %a: %a, want %a", outs[k], i,
                              d, v, (double)y.data[i], want);
            }
            emu_tensor_free(&y);
        }
        /* in place */
        memcpy(xin.data, x.data, N * sizeof *x.data);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 5);
        ck_assert_int_eq(emu_t_unary(&ctx, "r", &xin, &xin, EMU_UNARY_RELU, 0,
                                     0, &test_rne), 0);
        for (size_t i = 0; i < N; i++) {
            const double a = x.data[i];
            ck_assert_msg(test_same(isnan(a) || a > 0 ? a : 0.0, xin.data[i]),
                          "relu in place [%zu] of %a: %a", i, a,
                          (double)xin.data[i]);
        }
    }
    emu_tensor_free(&x);
    emu_tensor_free(&dy);
    emu_tensor_free(&xin);
}
END_TEST

/* emu_t_scale by a power of two takes the binary32 fill when every
 * product is a binary32 value (scale_exact32).  Against emu_t_mul by a
 * tensor holding alpha, which forms the products in binary64 (the path
 * scale takes otherwise): the same results and every statistic, for
 * alphas up and down, inputs with and without values that leave the
 * range (which send scale to the binary64 path), in every rounding, into
 * a narrow format and binary32. */
START_TEST(test_scale_pow2)
{
    enum { N = 3 * 1024 + 77 };
    const float alphas[] = { 0.5f, 0x1p-7f, 0x1p-24f, 1.0f, 4.0f, 0x1p20f,
                             0.75f, -0x1p-3f };
    const char *outs[] = { "binary16", "e5m2", "binary32" };
    const emu_format *f32 = test_format("binary32");
    test_rng g = test_rng_make(0x5ca1e);
    emu_tensor x, al, y1, y2;
    make(&x, f32, N, "x");
    make(&al, f32, N, "alpha");
    /* Scaled runs (the sanitizers') take every rstep'th rounding, a
     * different one for each alpha and output, so that all still meet. */
    const uint64_t kept = test_scaled(N_ROUNDINGS, 3);
    const int rstep = kept < N_ROUNDINGS ? (int)(N_ROUNDINGS / kept) : 1;
    for (int data = 0; data < 3; data++) {
        for (size_t i = 0; i < N; i++) {
            /* gradients: binary16 magnitudes around 2^-20 .. 2^10 */
            const int e = (int)test_below(&g, 31) - 20;
            const float m = 1.0f + (float)test_below(&g, 1024) / 1024.0f;
            x.data[i] = ldexpf(test_below(&g, 2) ? -m : m, e);
            if (test_below(&g, 16) == 0)
                x.data[i] = 0.0f;
        }
        if (data == 1) { /* tiny and huge values: the binary64 path */
            x.data[5] = 0x1p-140f;
            x.data[9] = -0x1.8p120f;
        } else if (data == 2) { /* a NaN and an inf */
            x.data[3] = NAN;
            x.data[N - 1] = -INFINITY;
        }
        for (size_t a = 0; a < sizeof alphas / sizeof *alphas; a++) {
            for (size_t i = 0; i < N; i++)
                al.data[i] = alphas[a];
            for (int o = 0; o < 3; o++) {
                const emu_format *of = test_format(outs[o]);
                make(&y1, of, N, "y1");
                make(&y2, of, N, "y2");
                for (int r = 0; r < N_ROUNDINGS; r++) {
                    if ((r + (int)a + o) % rstep)
                        continue;
                    emu_stats s1, s2;
                    emu_stats_init(&s1);
                    emu_stats_init(&s2);
                    emu_ctx c1, c2;
                    emu_ctx_init(&c1, 21);
                    emu_ctx_init(&c2, 21);
                    c1.stats = &s1;
                    c2.stats = &s2;
                    ck_assert_int_eq(emu_t_scale(&c1, "s", &y1, alphas[a], &x,
                                                 &roundings[r]), 0);
                    ck_assert_int_eq(emu_t_mul(&c2, "s", &y2, &x, &al,
                                               &roundings[r]), 0);
                    for (size_t i = 0; i < N; i++)
                        ck_assert_msg(test_same(y1.data[i], y2.data[i]),
                                      "scale %a into %s, rounding %d, data "
                                      "%d: [%zu] %a: %a, mul gives %a",
                                      (double)alphas[a], outs[o], r, data, i,
                                      (double)x.data[i], (double)y1.data[i],
                                      (double)y2.data[i]);
                    const emu_site *t1 = emu_stats_find_name(&s1, "s"),
                                   *t2 = emu_stats_find_name(&s2, "s");
                    ck_assert(t1 && t2);
                    ck_assert_msg(!memcmp(&t1->total, &t2->total,
                                          sizeof t1->total),
                                  "scale %a into %s, rounding %d, data %d: "
                                  "statistics differ from mul's",
                                  (double)alphas[a], outs[o], r, data);
                    emu_stats_free(&s1);
                    emu_stats_free(&s2);
                }
                emu_tensor_free(&y1);
                emu_tensor_free(&y2);
            }
        }
    }
    emu_tensor_free(&x);
    emu_tensor_free(&al);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_elementwise");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_nan_accounting);
    tcase_add_test(tc, test_nan_all_inputs);
    tcase_add_test(tc, test_in_place);
    tcase_add_test(tc, test_relu_runs);
    tcase_add_test(tc, test_scale_pow2);
    tcase_add_loop_test(tc, test_binary_ops, 0, OP_COUNT);
    tcase_add_test(tc, test_add_bias);
    tcase_add_test(tc, test_exact_unary);
    tcase_add_test(tc, test_cast_load);
    tcase_add_loop_test(tc, test_backward, 0, 11);
    tcase_add_test(tc, test_gelu_backward_exhaustive);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("ops_elementwise: %llu results checked, %llu mismatches\n",
           n_checked, n_failed);
    return failed != 0;
}
