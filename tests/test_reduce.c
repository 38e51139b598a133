/*
 * test_reduce.c — emu_t_reduce (sum, mean, max, sum of squares) against
 * its definition and the MPFR oracle.
 *
 * Sums and sums of squares are dot products under the op's accumulator
 * model (terms x_i, or x_i * x_i) taking stochastic words from stream
 * op_index ^ 2^63, dot number = output index, then rounded by the choke
 * point under the op's rounding; the suite
 * rebuilds them from emu_accum_dot and emu_round2_word, and checks the
 * exact model against mpfr_sum / mpfr_dot rounded once by the MPFR oracle.
 * The mean is checked against MPFR's quotient of the accumulator's sum by
 * the count, rounded once (to odd at 200 bits first, then by the oracle).
 * The maximum is checked by hand, NaN and signed zeros included.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "testutil.h"

#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

#define ACCUM_TAG ((uint64_t)1 << 63)

static const char *const red_names[] = { "sum", "mean", "max", "sumsq" };

static float rand_val(test_rng *g, const emu_format *f, int elo, int ehi)
{
    uint64_t w = test_next(g);
    if ((w & 31) == 0)
        return (w & 32) ? -0.0f : 0.0f;
    int e = elo + (int)test_below(g, (uint64_t)(ehi - elo + 1));
    double x = ldexp(1.0 + ldexp((double)(test_next(g) >> 11), -53), e);
    if (w & 64)
        x = -x;
    double v = emu_round(f, x, NULL, NULL);
    if (!isfinite(v))
        v = x < 0 ? -f->max : f->max;
    return (float)v;
}

/* Geometry of a reduction: len terms at stride inner, output o starting at
 * (o / inner) * len * inner + o % inner. */
typedef struct geom {
    size_t len, inner, nout;
} geom;

static geom geometry(const emu_tensor *x, int axis)
{
    geom g = { x->n, 1, 1 };
    if (axis >= 0) {
        g.len = x->shape[axis];
        for (int d = axis + 1; d < x->ndim; d++)
            g.inner *= x->shape[d];
        g.nout = x->n / g.len;
    }
    return g;
}

static const float *first_of(const emu_tensor *x, const geom *g, size_t o)
{
    return x->data + (o / g->inner) * g->len * g->inner + o % g->inner;
}

/* x / n rounded into f: x exact (prec bits), quotient rounded to odd at
 * 200 bits (>= p + 2, so the oracle's rounding of it is the rounding of
 * the exact quotient), then by the MPFR oracle. */
static double oracle_div(const emu_format *f, mpfr_srcptr x, size_t n,
                         const emu_rounding *r)
{
    mpfr_t q;
    mpfr_init2(q, 200);
    int t = mpfr_div_ui(q, x, (unsigned long)n, MPFR_RNDZ);
    if (t != 0 && mpfr_min_prec(q) < 200) {
        if (mpfr_sgn(q) > 0)
            mpfr_nextabove(q);
        else
            mpfr_nextbelow(q);
    }
    double v = emu_ref_round(f, q, r, NULL);
    mpfr_clear(q);
    return v;
}

/* The definition, from emu_accum_dot and emu_round2_word. */
static double expected(const emu_ctx *ctx, const emu_accum *accum,
                       const emu_rounding *rnd, const emu_tensor *x,
                       const emu_format *fo, const geom *g, emu_reduce r,
                       size_t o, uint64_t op, emu_accum_counts *cnt)
{
    const float *p = first_of(x, g, o);
    const ptrdiff_t inc = (ptrdiff_t)g->inner;
    uint64_t word = emu_rnd_is_stochastic(rnd->mode)
                  ? emu_random64(ctx->seed, op, o) : 0;
    if (r == EMU_REDUCE_MAX) {
        double v = p[0];
        for (size_t k = 1; k < g->len; k++) {
            double y = p[(ptrdiff_t)k * inc];
            if (isnan(y) || isnan(v))
                v = NAN;
            else if (y > v || (y == 0.0 && v == 0.0 && signbit(v) && !signbit(y)))
                v = y;
        }
        return emu_round2_word(fo, v, 0.0, rnd, word, NULL);
    }
    emu_accum_rng rng = { ctx->seed, op ^ ACCUM_TAG, o };
    double lo;
    double v = emu_accum_dot(&lo, cnt, accum, p, inc,
                             r == EMU_REDUCE_SUMSQ ? p : NULL, inc, g->len,
                             &rng);
    if (r != EMU_REDUCE_MEAN)
        return emu_round2_word(fo, v, lo, rnd, word, NULL);
    if (!isfinite(v))
        return emu_round2_word(fo, v, 0.0, rnd, word, NULL);
    mpfr_t s;
    mpfr_init2(s, 2000);
    mpfr_set_d(s, v, MPFR_RNDN);
    mpfr_add_d(s, s, lo, MPFR_RNDN); /* exact at 2000 bits */
    double m = oracle_div(fo, s, g->len, rnd);
    mpfr_clear(s);
    return m;
}

static void alloc(emu_tensor *t, const char *name, const emu_format *f,
                  int nd, const size_t *shape)
{
    emu_error err;
    ck_assert_msg(emu_tensor_alloc(t, name, EMU_ROLE_ACTIVATION, f, nd, shape, &err) == 0,
                  "%s", err.message);
}

/* The fast model's column sums (a bias gradient's): ops_reduce.c sums a
 * run of columns row by row; each must still be the binary32 sum of its
 * column in row order, as emu_accum_dot's fast model forms it.  Binary32
 * values of wide range, so that the order shows; 300 x 300 outputs, more
 * than one chunk and one run; the middle axis of three as well. */
START_TEST(reduce_fast_columns)
{
    test_rng g = test_rng_make(0xc015);
    emu_accum accum;
    emu_accum_default(&accum);
    emu_error err;
    ck_assert(emu_accum_parse(&accum, "fast", &err) == 0);
    const emu_format *b32 = test_format("binary32");
    static const size_t shapes[2][3] = { { 301, 300, 1 }, { 3, 57, 41 } };
    for (int v = 0; v < 2; v++) {
        const int nd = v ? 3 : 2, axis = v ? 1 : 0;
        emu_tensor x, out;
        alloc(&x, "x", b32, nd, shapes[v]);
        size_t oshape[2] = { shapes[v][v ? 0 : 1], shapes[v][2] };
        alloc(&out, "out", b32, v ? 2 : 1, oshape);
        for (size_t i = 0; i < x.n; i++)
            x.data[i] = rand_val(&g, b32, -20, 20);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        ck_assert_int_eq(emu_t_reduce(&ctx, "t.cols", &out, &x, EMU_REDUCE_SUM,
                                      axis, &accum, &test_rne), 0);
        const size_t len = shapes[v][axis], inner = v ? shapes[v][2] : out.n;
        for (size_t o = 0; o < out.n; o++) {
            const size_t outer = o / inner, in = o % inner;
            float s = 0.0f;
            for (size_t k = 0; k < len; k++)
                s = s + x.data[(outer * len + k) * inner + in];
            EXPECT(test_same(out.data[o], s), "output %zu: %a, want %a", o,
                   (double)out.data[o], (double)s);
        }
        emu_tensor_free(&x);
        emu_tensor_free(&out);
    }
}
END_TEST

START_TEST(reduce_definition)
{
    test_rng g = test_rng_make(0x5ed);
    static const char *const accs[] = {
        "sequential,acc=binary16", "sequential,acc=binary32,mode=rd",
        "pairwise,acc=bfloat16", "kahan,acc=binary16", "exact",
        "blocked,acc=e5m2,wide=binary32,block=4", "fused,acc=binary32,k=4,w=16",
        "sequential,acc=bfloat16,mode=sr", "fast",
    };
    static const emu_rnd modes[] = { EMU_RNE, EMU_RU, EMU_RS, EMU_RZ };
    static const char *const outs[] = { "binary32", "binary16", "e4m3" };
    for (int ai = 0; ai < 9; ai++)
        for (int c = 0; c < 16; c++) {
            emu_ctx ctx;
            emu_ctx_init(&ctx, 5 + (uint64_t)c);
            emu_rounding rnd = test_rne;
            emu_accum accum;
            emu_accum_default(&accum);
            emu_error err;
            ck_assert(emu_accum_parse(&accum, accs[ai], &err) == 0);
            rnd.mode = modes[c % 4];
            ctx.op_index = test_below(&g, 500);
            emu_reduce r = (emu_reduce)(c % EMU_REDUCE_COUNT);
            int nd = 1 + (int)test_below(&g, 4);
            size_t shape[4];
            for (int d = 0; d < nd; d++)
                shape[d] = 1 + (size_t)test_below(&g, nd == 1 ? 200 : 9);
            int axis = (int)test_below(&g, (uint64_t)nd + 1) - 1;
            emu_tensor x, out;
            alloc(&x, "x", test_format(c & 4 ? "bfloat16" : "binary16"), nd, shape);
            for (size_t i = 0; i < x.n; i++)
                x.data[i] = rand_val(&g, &x.fmt, -8, 4);
            /* out: x's shape without the axis, or with it kept as 1 */
            size_t oshape[4];
            int ond = 0;
            bool keep = c & 8;
            if (axis < 0) {
                oshape[ond++] = 1;
            } else {
                for (int d = 0; d < nd; d++)
                    if (d != axis || keep)
                        oshape[ond++] = d == axis ? 1 : shape[d];
                if (ond == 0)
                    oshape[ond++] = 1;
            }
            const emu_format *fo = test_format(outs[c % 3]);
            alloc(&out, "out", fo, ond, oshape);
            geom ge = geometry(&x, axis);
            ck_assert_uint_eq(out.n, ge.nout);
            uint64_t op = ctx.op_index;
            double *want = malloc(out.n * sizeof *want);
            for (size_t o = 0; o < out.n; o++)
                want[o] = expected(&ctx, &accum, &rnd, &x, fo, &ge, r, o, op,
                                   NULL);
            int rc = emu_t_reduce(&ctx, "t.red", &out, &x, r, axis, &accum,
                                  &rnd);
            ck_assert_msg(rc == 0, "%s %s axis %d: %s", accs[ai], red_names[r],
                          axis, ctx.err.message);
            for (size_t o = 0; o < out.n; o++)
                EXPECT(test_same(out.data[o], want[o]),
                       "%s %s of a %d-d tensor along axis %d (len %zu) into %s, "
                       "mode %s: output %zu = %a, expected %a", accs[ai],
                       red_names[r], nd, axis, ge.len, fo->name,
                       emu_rnd_name(rnd.mode), o, (double)out.data[o], want[o]);
            free(want);
            emu_tensor_free(&x);
            emu_tensor_free(&out);
        }
}
END_TEST

/* The exact model against MPFR, end to end: sum and sum of squares rounded
 * once; the mean rounded once from the exact quotient. */
START_TEST(exact_oracle)
{
    test_rng g = test_rng_make(0xe5);
    for (int c = 0; c < 60; c++) {
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        emu_rounding rnd = test_rne;
        emu_accum accum;
        emu_accum_default(&accum);
        emu_error err;
        ck_assert(emu_accum_parse(&accum, "exact", &err) == 0);
        rnd.mode = (emu_rnd)(c % TEST_DET_MODES);
        emu_reduce r = c % 3 == 0 ? EMU_REDUCE_SUM : c % 3 == 1 ? EMU_REDUCE_MEAN
                                                                : EMU_REDUCE_SUMSQ;
        size_t len = 1 + (size_t)test_below(&g, 500);
        if (c % 10 == 9)
            len = 3 * (1 + (size_t)test_below(&g, 100)); /* divisions by 3 */
        emu_tensor x, out;
        size_t sx[1] = { len }, so[1] = { 1 };
        alloc(&x, "x", test_format("binary32"), 1, sx);
        const emu_format *fo = test_format(c & 1 ? "binary16" : "bfloat16");
        alloc(&out, "out", fo, 1, so);
        for (size_t i = 0; i < len; i++)
            x.data[i] = rand_val(&g, &x.fmt, (c & 4) ? -40 : -6, (c & 4) ? 20 : 3);
        if (c % 10 == 9 && len > 3) {
            /* exact cancellation down to a few small terms */
            for (size_t i = len / 2; i < len - 1; i++)
                x.data[i] = -x.data[i - len / 2];
        }
        mpfr_t *t = malloc(len * sizeof *t);
        mpfr_ptr *pt = malloc(len * sizeof *pt);
        for (size_t i = 0; i < len; i++) {
            mpfr_init2(t[i], 24);
            mpfr_set_flt(t[i], x.data[i], MPFR_RNDN);
            pt[i] = t[i];
        }
        mpfr_t s;
        mpfr_init2(s, 2000);
        if (r == EMU_REDUCE_SUMSQ)
            mpfr_dot(s, pt, pt, len, MPFR_RNDN);
        else
            mpfr_sum(s, pt, len, MPFR_RNDN);
        double want = r == EMU_REDUCE_MEAN ? oracle_div(fo, s, len, &rnd)
                                           : emu_ref_round(fo, s, &rnd, NULL);
        ck_assert(emu_t_reduce(&ctx, "t.exact", &out, &x, r, -1, &accum,
                               &rnd) == 0);
        EXPECT(test_same(out.data[0], want), "exact %s of %zu terms into %s, "
               "mode %s: %a, MPFR %a (x[0] = %a)", red_names[r], len, fo->name,
               emu_rnd_name(rnd.mode), (double)out.data[0], want,
               (double)x.data[0]);
        for (size_t i = 0; i < len; i++)
            mpfr_clear(t[i]);
        mpfr_clear(s);
        free(t);
        free(pt);
        emu_tensor_free(&x);
        emu_tensor_free(&out);
    }
}
END_TEST

/* A mean whose quotient is on the output grid for 120 bits and only then
 * moves: (1 + 2 + 2^-120) / 3 = 1 + 2^-120 / 3.  Directed roundings must
 * still see that it lies above 1. */
START_TEST(mean_sticky_bits)
{
    const float x3[3] = { 1.0f, 2.0f, 0x1p-120f };
    for (int m = 0; m < TEST_DET_MODES; m++)
        for (int neg = 0; neg < 2; neg++) {
            emu_ctx ctx;
            emu_ctx_init(&ctx, 1);
            emu_rounding rnd = test_rne;
            emu_accum accum;
            emu_accum_default(&accum);
            emu_error err;
            ck_assert(emu_accum_parse(&accum, "exact", &err) == 0);
            rnd.mode = (emu_rnd)m;
            emu_tensor x, out;
            size_t sx[1] = { 3 }, so[1] = { 1 };
            alloc(&x, "x", test_format("binary32"), 1, sx);
            alloc(&out, "out", test_format("binary16"), 1, so);
            for (int i = 0; i < 3; i++)
                x.data[i] = neg ? -x3[i] : x3[i];
            ck_assert(emu_t_reduce(&ctx, "t.mean", &out, &x, EMU_REDUCE_MEAN, 0,
                                   &accum, &rnd) == 0);
            mpfr_t s;
            mpfr_init2(s, 200);
            mpfr_set_si(s, neg ? -3 : 3, MPFR_RNDN);
            mpfr_add_d(s, s, neg ? -0x1p-120 : 0x1p-120, MPFR_RNDN);
            double want = oracle_div(&out.fmt, s, 3, &rnd);
            mpfr_clear(s);
            EXPECT(test_same(out.data[0], want), "mean of %s(1, 2, 2^-120) in "
                   "binary16, mode %s: %a, expected %a", neg ? "-" : "",
                   emu_rnd_name(rnd.mode), (double)out.data[0], want);
            emu_tensor_free(&x);
            emu_tensor_free(&out);
        }
}
END_TEST

START_TEST(max_specials)
{
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    static const struct {
        float x[4];
        double want;
    } cases[] = {
        { { -3.0f, -1.0f, -2.0f, -5.0f }, -1.0 },
        { { -0.0f, 0.0f, -0.0f, -1.0f }, 0.0 },    /* +0 above -0 */
        { { -0.0f, -0.0f, -0.0f, -1.0f }, -0.0 },
        { { 1.0f, NAN, 7.0f, 2.0f }, NAN },         /* NaN wins */
        { { -INFINITY, -1e30f, -INFINITY, -2.0f }, -2.0 },
        { { 65504.0f, INFINITY, 1.0f, 2.0f }, INFINITY },
    };
    const emu_format *f = test_format("binary32");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        emu_tensor x, out;
        size_t sx[1] = { 4 }, so[1] = { 1 };
        alloc(&x, "x", f, 1, sx);
        alloc(&out, "out", f, 1, so);
        memcpy(x.data, cases[c].x, sizeof cases[c].x);
        ck_assert(emu_t_reduce(&ctx, "t.max", &out, &x, EMU_REDUCE_MAX, 0,
                               test_default_accum(), &test_rne) == 0);
        EXPECT(test_same(out.data[0], cases[c].want), "max case %zu: %a, expected %a",
               c, (double)out.data[0], cases[c].want);
        emu_tensor_free(&x);
        emu_tensor_free(&out);
    }
}
END_TEST

/* Swamping counts reach the site, as the accumulator counted them. */
START_TEST(reduce_counts)
{
    test_rng g = test_rng_make(0xc0);
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_rounding rnd = test_rne;
    emu_accum accum;
    emu_accum_default(&accum);
    emu_error err;
    ck_assert(emu_accum_parse(&accum, "sequential,acc=binary16", &err) == 0);
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    emu_tensor x, out;
    size_t sx[2] = { 3, 2000 }, so[1] = { 3 };
    alloc(&x, "x", test_format("binary16"), 2, sx);
    alloc(&out, "out", test_format("binary32"), 1, so);
    for (size_t i = 0; i < x.n; i++)
        x.data[i] = fabsf(rand_val(&g, &x.fmt, -4, 0));
    emu_accum_counts want;
    memset(&want, 0, sizeof want);
    geom ge = geometry(&x, 1);
    for (size_t o = 0; o < 3; o++)
        (void)expected(&ctx, &accum, &rnd, &x, &out.fmt, &ge, EMU_REDUCE_SUM, o,
                       ctx.op_index, &want);
    ck_assert(emu_t_reduce(&ctx, "t.cnt", &out, &x, EMU_REDUCE_SUM, 1, &accum,
                           &rnd) == 0);
    const emu_site_stats *s = &stats.sites[0].total;
    EXPECT(s->adds == want.adds && s->absorbed == want.absorbed &&
           !memcmp(s->lost_bits, want.lost_bits, sizeof want.lost_bits),
           "site adds %" PRIu64 " absorbed %" PRIu64 ", accumulator %" PRIu64
           " and %" PRIu64, s->adds, s->absorbed, want.adds, want.absorbed);
    /* A long binary16 sum of positive terms stalls: many addends absorbed. */
    EXPECT(s->absorbed > s->adds / 5, "only %" PRIu64 " of %" PRIu64 " absorbed",
           s->absorbed, s->adds);
    EXPECT(s->dot_samples == 3 && s->accum_max > 0.01, "samples %" PRIu64
           ", accumulation error %g", s->dot_samples, s->accum_max);
    emu_tensor_free(&x);
    emu_tensor_free(&out);
    emu_stats_free(&stats);
}
END_TEST

START_TEST(bad_arguments)
{
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum accum;
    emu_accum_default(&accum);
    emu_tensor x, out, out2;
    size_t sx[2] = { 3, 4 }, so[1] = { 3 }, so2[2] = { 2, 2 };
    alloc(&x, "x", test_format("binary16"), 2, sx);
    alloc(&out, "out", test_format("binary32"), 1, so);
    alloc(&out2, "out2", test_format("binary32"), 2, so2);
    for (size_t i = 0; i < 3; i++)
        out.data[i] = 42.0f;
    struct {
        emu_tensor *o;
        int axis;
        emu_reduce r;
        const char *needle;
    } cases[] = {
        { &out, 0, EMU_REDUCE_SUM, "shape mismatch" },   /* axis 0 leaves 4 */
        { &out, 2, EMU_REDUCE_SUM, "axis" },
        { &out, -2, EMU_REDUCE_MAX, "axis" },
        { &out2, 1, EMU_REDUCE_MEAN, "shape mismatch" },
        { &out, 1, (emu_reduce)9, "reduction" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rc = emu_t_reduce(&ctx, "t.bad", cases[c].o, &x, cases[c].r,
                              cases[c].axis, &accum, &test_rne);
        char msg[700];
        emu_error_format(&ctx.err, msg, sizeof msg);
        EXPECT(rc == -1 && strstr(msg, "t.bad") && strstr(msg, cases[c].needle),
               "case %zu: rc %d, message '%s'", c, rc, msg);
        EXPECT(out.data[0] == 42.0f && out.data[2] == 42.0f, "case %zu: out "
               "modified", c);
    }
    emu_tensor bad = x;
    bad.fmt = *test_format("binary64");
    ck_assert_int_eq(emu_t_reduce(&ctx, "t.bad", &out, &bad, EMU_REDUCE_SUM, 1,
                                  &accum, &test_rne), -1);
    accum.kind = EMU_ACCUM_FUSED;
    accum.fused_k = 0;
    ck_assert_int_eq(emu_t_reduce(&ctx, "t.bad", &out, &x, EMU_REDUCE_SUM, 1,
                                  &accum, &test_rne), -1);
    ck_assert_int_eq(emu_t_reduce(&ctx, "t.bad", &out, &x, EMU_REDUCE_MAX, 1,
                                  &accum, &test_rne), 0);
    /* No defaults: a sum needs its accumulator, every reduction its
     * rounding; the maximum accumulates nothing and may go without. */
    ck_assert_int_eq(emu_t_reduce(&ctx, "t.bad", &out, &x, EMU_REDUCE_SUM, 1,
                                  NULL, &test_rne), -1);
    ck_assert_ptr_nonnull(strstr(ctx.err.message, "no accumulator"));
    ck_assert_int_eq(emu_t_reduce(&ctx, "t.bad", &out, &x, EMU_REDUCE_MAX, 1,
                                  NULL, NULL), -1);
    ck_assert_ptr_nonnull(strstr(ctx.err.message, "no rounding"));
    ck_assert_int_eq(emu_t_reduce(&ctx, "t.bad", &out, &x, EMU_REDUCE_MAX, 1,
                                  NULL, &test_rne), 0);
    emu_tensor_free(&x);
    emu_tensor_free(&out);
    emu_tensor_free(&out2);
}
END_TEST

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *tc = tcase_create("reduce");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, reduce_definition);
    tcase_add_test(tc, exact_oracle);
    tcase_add_test(tc, mean_sticky_bits);
    tcase_add_test(tc, max_specials);
    tcase_add_test(tc, reduce_counts);
    tcase_add_test(tc, bad_arguments);
    tcase_add_test(tc, reduce_fast_columns);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(reduce_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
