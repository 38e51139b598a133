/*
 * test_matmul.c — emu_t_matmul and emu_t_bmm against their definition.
 *
 * Each output of a product is one dot product under the options'
 * accumulator model, whose
 * stochastic words come from stream op_index ^ 2^63, dot number
 * (batch * M + i) * N + j, then rounded once into the output format by the
 * choke point with word i of stream op_index.  The suite rebuilds that from
 * emu_accum_dot and emu_round2_word (whose own correctness test_accum.c
 * and the MPFR suites establish), and checks the exact model end to end
 * against mpfr_dot rounded once by the MPFR oracle.  Then: accumulation and
 * alpha, thread independence of results, counts and sampled errors, the
 * error decomposition, and bad arguments.
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

static const emu_format *fmt(const char *name)
{
    return test_format(name);
}

/* A random value of f (normal-ish spread 2^elo .. 2^ehi, some zeros). */
static float rand_val(test_rng *g, const emu_format *f, int elo, int ehi)
{
    uint64_t w = test_next(g);
    if ((w & 31) == 0)
        return 0.0f;
    int e = elo + (int)test_below(g, (uint64_t)(ehi - elo + 1));
    double x = ldexp(1.0 + ldexp((double)(test_next(g) >> 11), -53), e);
    if (w & 32)
        x = -x;
    double v = emu_round(f, x, NULL, NULL);
    if (!isfinite(v))
        v = x < 0 ? -f->max : f->max;
    return (float)v;
}

static void alloc(emu_tensor *t, const char *name, const emu_format *f,
                  size_t d0, size_t d1, size_t d2)
{
    emu_error err;
    int rc = emu_tensor_alloc4(t, name, EMU_ROLE_ACTIVATION, f, d0, d1, d2, 0, &err);
    ck_assert_msg(rc == 0, "alloc %s: %s", name, err.message);
}

static void fill(test_rng *g, emu_tensor *t, int elo, int ehi)
{
    for (size_t i = 0; i < t->n; i++)
        t->data[i] = rand_val(g, &t->fmt, elo, ehi);
}

static uint64_t bits_of(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The definition of one product: expected outputs into want (n values). */
static void expected_product(const emu_ctx *ctx, const emu_accum *accum,
                             const emu_rounding *rnd, const emu_tensor *out,
                             const emu_tensor *a, const emu_tensor *b,
                             bool ta, bool tb, size_t batch, size_t M,
                             size_t N, size_t K, uint64_t op, double *want)
{
    for (size_t bt = 0; bt < batch; bt++)
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) {
                const float *ar = a->data + bt * M * K + (ta ? i : i * K);
                const float *bc = b->data + bt * K * N + (tb ? j * K : j);
                size_t o = (bt * M + i) * N + j;
                emu_accum_rng rng = { ctx->seed, op ^ ACCUM_TAG, o };
                double lo;
                double v = emu_accum_dot(&lo, NULL, accum, ar,
                                         ta ? (ptrdiff_t)M : 1, bc,
                                         tb ? 1 : (ptrdiff_t)N, K, &rng);
                uint64_t word = emu_rnd_is_stochastic(rnd->mode)
                              ? emu_random64(ctx->seed, op, o) : 0;
                want[o] = emu_round2_word(&out->fmt, v, lo, rnd, word, NULL);
            }
}

static const char *const accs[] = {
    "sequential,acc=binary16", "sequential,acc=bfloat16,mode=rz",
    "sequential,acc=binary32", "pairwise,acc=bfloat16", "exact",
    "blocked,acc=e5m2,wide=binary32,block=8", "kahan,acc=binary16",
    "fused,acc=binary32,k=8,w=20", "sequential,acc=bfloat16,mode=sr",
};
enum { N_ACCS = sizeof accs / sizeof accs[0] };

START_TEST(matmul_definition)
{
    test_rng g = test_rng_make(0x3a7);
    static const char *const ins[] = { "binary16", "bfloat16", "e4m3" };
    static const char *const outs[] = { "binary32", "binary16", "e4m3" };
    static const emu_rnd out_modes[] = { EMU_RNE, EMU_RZ, EMU_RS };
    for (int ai = 0; ai < N_ACCS; ai++)
        for (int c = 0; c < 12; c++) {
            emu_ctx ctx;
            emu_ctx_init(&ctx, 42 + (uint64_t)c);
            emu_rounding rnd = test_rne;
            emu_accum accum;
            emu_accum_default(&accum);
            emu_error err;
            ck_assert(emu_accum_parse(&accum, accs[ai], &err) == 0);
            rnd.mode = out_modes[c % 3];
            ctx.op_index = test_below(&g, 1000);
            ctx.threads = 1 + c % 3;
            bool ta = c & 1, tb = (c >> 1) & 1;
            size_t M = 1 + (size_t)test_below(&g, 7), N = 1 + (size_t)test_below(&g, 40);
            size_t K = 1 + (size_t)test_below(&g, 70);
            if (c == 4)
                K = 1;
            if (c == 5)
                N = 1;
            const emu_format *fi = fmt(ins[c % 3]), *fo = fmt(outs[(c / 3) % 3]);
            emu_tensor a, b, out;
            alloc(&a, "a", fi, ta ? K : M, ta ? M : K, 0);
            alloc(&b, "b", fi, tb ? N : K, tb ? K : N, 0);
            alloc(&out, "out", fo, M, N, 0);
            fill(&g, &a, -6, 3);
            fill(&g, &b, -6, 3);
            double *want = malloc(M * N * sizeof *want);
            uint64_t op = ctx.op_index;
            expected_product(&ctx, &accum, &rnd, &out, &a, &b, ta, tb, 1, M, N,
                             K, op, want);
            emu_matmul_opts o = { .accum = &accum, .trans_a = ta, .trans_b = tb };
            int rc = emu_t_matmul(&ctx, "t.mm", &out, &a, &b, &o, &rnd);
            ck_assert_msg(rc == 0, "%s", ctx.err.message);
            ck_assert_uint_eq(ctx.op_index, op + 1);
            for (size_t x = 0; x < M * N; x++)
                EXPECT(test_same(out.data[x], want[x]),
                       "%s, out %s mode %s, %zux%zux%zu ta %d tb %d threads %d: "
                       "(%zu, %zu) = %a (0x%016" PRIx64 "), expected %a",
                       accs[ai], fo->name, emu_rnd_name(rnd.mode), M, N, K,
                       ta, tb, ctx.threads, x / N, x % N, (double)out.data[x],
                       bits_of(out.data[x]), want[x]);
            free(want);
            emu_tensor_free(&a);
            emu_tensor_free(&b);
            emu_tensor_free(&out);
        }
}
END_TEST

/* The exact model end to end: mpfr_dot of the inputs, rounded once by the
 * MPFR oracle into the output format. */
static double oracle_dot(const float *x, ptrdiff_t incx, const float *y,
                         ptrdiff_t incy, size_t n, double alpha, double c,
                         const emu_format *f, const emu_rounding *r)
{
    mpfr_t *xs = malloc(n * sizeof *xs), *ys = malloc(n * sizeof *ys);
    mpfr_ptr *px = malloc(n * sizeof *px), *py = malloc(n * sizeof *py);
    for (size_t i = 0; i < n; i++) {
        mpfr_inits2(24, xs[i], ys[i], (mpfr_ptr)0);
        mpfr_set_flt(xs[i], x[(ptrdiff_t)i * incx], MPFR_RNDN);
        mpfr_set_flt(ys[i], y[(ptrdiff_t)i * incy], MPFR_RNDN);
        px[i] = xs[i];
        py[i] = ys[i];
    }
    mpfr_t d;
    mpfr_init2(d, 4096); /* every dot here is exact at this precision */
    mpfr_dot(d, px, py, n, MPFR_RNDN);
    mpfr_mul_d(d, d, alpha, MPFR_RNDN);
    mpfr_add_d(d, d, c, MPFR_RNDN);
    double v = emu_ref_round(f, d, r, NULL);
    for (size_t i = 0; i < n; i++)
        mpfr_clears(xs[i], ys[i], (mpfr_ptr)0);
    mpfr_clear(d);
    free(xs);
    free(ys);
    free(px);
    free(py);
    return v;
}

START_TEST(exact_model_oracle)
{
    test_rng g = test_rng_make(0xe8);
    for (int c = 0; c < 24; c++) {
        emu_ctx ctx;
        emu_ctx_init(&ctx, 7);
        emu_rounding rnd = test_rne;
        emu_accum accum;
        emu_accum_default(&accum);
        emu_error err;
        ck_assert(emu_accum_parse(&accum, "exact", &err) == 0);
        rnd.mode = (emu_rnd)(c % TEST_DET_MODES);
        const bool acc = c & 1;
        /* c & 8 without accumulate: a product of two binary32 scales, as
         * scaled formats pass it (the exact model's lo then goes through
         * the MPFR path of emu_scale_pairs). */
        const double alpha = (c & 8) && !acc ? (double)0x1.7c0a3ep-2f * 0x1.b3p+0
                             : (c & 2) ? 0x1p-5 : (c & 4) ? 8.0 : 1.0;
        size_t M = 1 + (size_t)test_below(&g, 5), N = 1 + (size_t)test_below(&g, 20);
        size_t K = 1 + (size_t)test_below(&g, 200);
        const emu_format *fo = fmt(c % 3 == 0 ? "binary16" : c % 3 == 1 ? "e5m2" : "binary32");
        emu_tensor a, b, out;
        alloc(&a, "a", fmt("binary32"), M, K, 0);
        alloc(&b, "b", fmt("binary32"), K, N, 0);
        alloc(&out, "out", fo, M, N, 0);
        fill(&g, &a, -30, 10);
        fill(&g, &b, -30, 10);
        fill(&g, &out, -8, 4);
        float *old = malloc(M * N * sizeof *old);
        memcpy(old, out.data, M * N * sizeof *old);
        emu_matmul_opts o = { .accum = &accum, .accumulate = acc, .alpha = alpha };
        ck_assert_msg(emu_t_matmul(&ctx, "t.exact", &out, &a, &b, &o,
                                   &rnd) == 0, "%s",
                      ctx.err.message);
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) {
                double w = oracle_dot(a.data + i * K, 1, b.data + j, (ptrdiff_t)N,
                                      K, alpha, acc ? old[i * N + j] : 0.0, fo,
                                      &rnd);
                EXPECT(test_same(out.data[i * N + j], w),
                       "exact %zux%zux%zu into %s, mode %s, alpha %g, "
                       "accumulate %d (old %a): (%zu, %zu) = %a, MPFR %a", M, N,
                       K, fo->name, emu_rnd_name(rnd.mode), alpha, acc,
                       (double)old[i * N + j], i, j, (double)out.data[i * N + j], w);
            }
        free(old);
        emu_tensor_free(&a);
        emu_tensor_free(&b);
        emu_tensor_free(&out);
    }
}
END_TEST

/* accumulate with a sequential binary16 accumulator: s starts at
 * out / alpha and takes each exact product, every sum rounded by MPFR. */
START_TEST(accumulate_sequential)
{
    test_rng g = test_rng_make(0xacc);
    const emu_format *b16 = fmt("binary16");
    for (int c = 0; c < 16; c++) {
        emu_ctx ctx;
        emu_ctx_init(&ctx, 3);
        emu_rounding rnd = test_rne;
        emu_accum accum;
        emu_accum_default(&accum);
        emu_error err;
        ck_assert(emu_accum_parse(&accum, "sequential,acc=binary16", &err) == 0);
        const double alpha = (c & 1) ? 0x1p-3 : 1.0;
        size_t M = 3, N = 1 + (size_t)test_below(&g, 30), K = 1 + (size_t)test_below(&g, 100);
        emu_tensor a, b, out;
        alloc(&a, "a", b16, M, K, 0);
        alloc(&b, "b", b16, K, N, 0);
        alloc(&out, "out", fmt("binary32"), M, N, 0);
        fill(&g, &a, -5, 2);
        fill(&g, &b, -5, 2);
        fill(&g, &out, -3, 6);
        float *old = malloc(M * N * sizeof *old);
        memcpy(old, out.data, M * N * sizeof *old);
        emu_matmul_opts o = { .accum = &accum, .accumulate = true, .alpha = (float)alpha };
        ck_assert(emu_t_matmul(&ctx, "t.acc", &out, &a, &b, &o, &rnd) == 0);
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) {
                double s = old[i * N + j] / alpha;
                for (size_t k = 0; k < K; k++)
                    s = emu_ref_add(b16, s, (double)a.data[i * K + k] * b.data[k * N + j],
                                    &accum.rnd, NULL);
                double w = emu_ref_convert(&out.fmt, s * alpha, &rnd, NULL);
                EXPECT(test_same(out.data[i * N + j], w),
                       "accumulate, alpha %g, K %zu: (%zu, %zu) = %a, expected "
                       "%a (old %a)", alpha, K, i, j, (double)out.data[i * N + j],
                       w, (double)old[i * N + j]);
            }
        free(old);
        emu_tensor_free(&a);
        emu_tensor_free(&b);
        emu_tensor_free(&out);
    }
}
END_TEST

/* Results, counts and sampled errors do not depend on the thread count. */
START_TEST(threads_do_not_matter)
{
    test_rng g = test_rng_make(0x7d);
    for (int ai = 0; ai < N_ACCS; ai++) {
        emu_tensor a, b, out;
        const size_t M = 37, N = 45, K = 130;
        alloc(&a, "a", fmt("bfloat16"), M, K, 0);
        alloc(&b, "b", fmt("bfloat16"), K, N, 0);
        alloc(&out, "out", fmt("binary16"), M, N, 0);
        fill(&g, &a, -12, 4);
        fill(&g, &b, -12, 4);
        float *first = malloc(M * N * sizeof *first);
        emu_site_stats st[3];
        for (int t = 1; t <= 3; t++) {
            emu_stats stats;
            emu_stats_init(&stats);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 11);
            emu_accum accum;
            emu_accum_default(&accum);
            emu_error err;
            ck_assert(emu_accum_parse(&accum, accs[ai], &err) == 0);
            ctx.threads = t;
            ctx.stats = &stats;
            ctx.measure = EMU_MEASURE_ALL;
            ctx.ref_rate = 0.2;
            ck_assert_msg(emu_t_matmul(&ctx, "t.thr", &out, &a, &b,
                                       &(emu_matmul_opts){ .accum = &accum }, &test_rne) == 0, "%s",
                          ctx.err.message);
            ck_assert_uint_eq(stats.count, 1);
            st[t - 1] = stats.sites[0].total;
            if (t == 1)
                memcpy(first, out.data, M * N * sizeof *first);
            else
                for (size_t x = 0; x < M * N; x++)
                    EXPECT(test_same(out.data[x], first[x]), "%s: threads %d "
                           "changed output %zu: %a vs %a", accs[ai], t, x,
                           (double)out.data[x], (double)first[x]);
            emu_stats_free(&stats);
        }
        for (int t = 1; t < 3; t++) {
            const emu_site_stats *x = &st[0], *y = &st[t];
            EXPECT(x->results == y->results && x->inexact == y->inexact &&
                   x->underflow == y->underflow && x->adds == y->adds &&
                   x->absorbed == y->absorbed && x->ref_samples == y->ref_samples &&
                   x->dot_samples == y->dot_samples && x->ulp_sum == y->ulp_sum &&
                   x->accum_sum == y->accum_sum && x->quant_sum == y->quant_sum &&
                   x->round_sum == y->round_sum &&
                   !memcmp(x->lost_bits, y->lost_bits, sizeof x->lost_bits) &&
                   !memcmp(x->hist_exact, y->hist_exact, sizeof x->hist_exact),
                   "%s: statistics differ between 1 and %d threads (adds %" PRIu64
                   " vs %" PRIu64 ", absorbed %" PRIu64 " vs %" PRIu64
                   ", samples %" PRIu64 " vs %" PRIu64 ")", accs[ai], t + 1,
                   x->adds, y->adds, x->absorbed, y->absorbed, x->ref_samples,
                   y->ref_samples);
        }
        /* Swamping is counted for every emulated model (not for fast). */
        EXPECT(st[0].adds == (strstr(accs[ai], "blocked") ? M * N * (K + (K + 7) / 8)
                              : strstr(accs[ai], "pairwise") ? M * N * (K - 1)
                              : M * N * K),
               "%s: %" PRIu64 " additions counted", accs[ai], st[0].adds);
        EXPECT(st[0].ref_samples > 0 && st[0].dot_samples == st[0].ref_samples,
               "%s: %" PRIu64 " samples, %" PRIu64 " dot samples", accs[ai],
               st[0].ref_samples, st[0].dot_samples);
        free(first);
        emu_tensor_free(&a);
        emu_tensor_free(&b);
        emu_tensor_free(&out);
    }
}
END_TEST

/* The error decomposition: the exact model has no accumulation error,
 * quantization shows when the inputs are rounded sources, and a binary16
 * accumulator over long sums has accumulation error. */
START_TEST(error_decomposition)
{
    test_rng g = test_rng_make(0xdec);
    const size_t M = 8, N = 8, K = 500;
    emu_tensor a, b, as, bs, out;
    alloc(&as, "a_src", fmt("binary32"), M, K, 0);
    alloc(&bs, "b_src", fmt("binary32"), K, N, 0);
    alloc(&a, "a", fmt("e4m3"), M, K, 0);
    alloc(&b, "b", fmt("e4m3"), K, N, 0);
    alloc(&out, "out", fmt("binary32"), M, N, 0);
    fill(&g, &as, -3, 1);
    fill(&g, &bs, 0, 1);
    for (size_t i = 0; i < as.n; i++)
        as.data[i] = fabsf(as.data[i]); /* no cancellation: sizeable sums */
    for (size_t i = 0; i < bs.n; i++)
        bs.data[i] = fabsf(bs.data[i]);
    for (size_t i = 0; i < a.n; i++)
        a.data[i] = (float)emu_round(&a.fmt, as.data[i], NULL, NULL);
    for (size_t i = 0; i < b.n; i++)
        b.data[i] = (float)emu_round(&b.fmt, bs.data[i], NULL, NULL);
    static const char *const specs[] = { "exact", "sequential,acc=binary16" };
    for (int m = 0; m < 2; m++) {
        emu_stats stats;
        emu_stats_init(&stats);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        emu_accum accum;
        emu_accum_default(&accum);
        emu_error err;
        ck_assert(emu_accum_parse(&accum, specs[m], &err) == 0);
        ctx.stats = &stats;
        ctx.measure = EMU_MEASURE_ALL;
        ctx.ref_rate = 1.0;
        emu_matmul_opts o = { .accum = &accum, .a_src = &as, .b_src = &bs };
        ck_assert_msg(emu_t_matmul(&ctx, "t.dec", &out, &a, &b, &o,
                                   &test_rne) == 0, "%s",
                      ctx.err.message);
        const emu_site_stats *s = &stats.sites[0].total;
        ck_assert_uint_eq(s->dot_samples, M * N);
        EXPECT(s->quant_sum > 0.0, "%s: no quantization error from e4m3 inputs",
               specs[m]);
        if (m == 0)
            EXPECT(s->accum_sum == 0.0 && s->accum_max == 0.0,
                   "exact: accumulation error %g", s->accum_sum);
        else
            EXPECT(s->accum_max > 1e-4, "binary16 accumulator over %zu terms: "
                   "accumulation error only %g", K, s->accum_max);
        /* Output rounding into binary32 of a binary16 sum is exact. */
        if (m == 1)
            EXPECT(s->round_max == 0.0, "round error %g", s->round_max);
        emu_stats_free(&stats);
    }
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&as);
    emu_tensor_free(&bs);
    emu_tensor_free(&out);
}
END_TEST

START_TEST(bmm_definition)
{
    test_rng g = test_rng_make(0xb33);
    static const char *const specs[] = { "sequential,acc=bfloat16,mode=sr",
                                         "sequential,acc=binary16", "kahan,acc=bfloat16" };
    for (int c = 0; c < 9; c++) {
        emu_ctx ctx;
        emu_ctx_init(&ctx, 99);
        emu_rounding rnd = test_rne;
        emu_accum accum;
        emu_accum_default(&accum);
        emu_error err;
        ck_assert(emu_accum_parse(&accum, specs[c % 3], &err) == 0);
        ctx.threads = 1 + c % 2;
        rnd.mode = c % 2 ? EMU_RS : EMU_RNE;
        bool ta = c & 1, tb = c & 2;
        size_t B = 1 + (size_t)test_below(&g, 4), M = 1 + (size_t)test_below(&g, 6);
        size_t N = 1 + (size_t)test_below(&g, 20), K = 1 + (size_t)test_below(&g, 40);
        emu_tensor a, b, out;
        alloc(&a, "a", fmt("binary16"), B, ta ? K : M, ta ? M : K);
        alloc(&b, "b", fmt("binary16"), B, tb ? N : K, tb ? K : N);
        alloc(&out, "out", fmt("bfloat16"), B, M, N);
        fill(&g, &a, -4, 4);
        fill(&g, &b, -4, 4);
        double *want = malloc(out.n * sizeof *want);
        expected_product(&ctx, &accum, &rnd, &out, &a, &b, ta, tb, B, M, N, K,
                         ctx.op_index, want);
        emu_matmul_opts o = { .accum = &accum, .trans_a = ta, .trans_b = tb };
        ck_assert_msg(emu_t_bmm(&ctx, "t.bmm", &out, &a, &b, &o, &rnd) == 0,
                      "%s",
                      ctx.err.message);
        for (size_t x = 0; x < out.n; x++)
            EXPECT(test_same(out.data[x], want[x]), "bmm %s %zux%zux%zux%zu: "
                   "element %zu = %a, expected %a", specs[c % 3], B, M, N, K, x,
                   (double)out.data[x], want[x]);
        free(want);
        emu_tensor_free(&a);
        emu_tensor_free(&b);
        emu_tensor_free(&out);
    }
}
END_TEST

/* fast: binary32 host arithmetic (BLAS when built with it). */
START_TEST(fast_model)
{
    test_rng g = test_rng_make(0xfa);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum accum;
    emu_accum_default(&accum);
    emu_error err;
    ck_assert(emu_accum_parse(&accum, "fast", &err) == 0);
    const size_t M = 20, N = 33, K = 64;
    emu_tensor a, b, out;
    alloc(&a, "a", fmt("binary16"), K, M, 0);
    alloc(&b, "b", fmt("binary16"), N, K, 0);
    alloc(&out, "out", fmt("binary32"), M, N, 0);
    fill(&g, &a, -4, 4);
    fill(&g, &b, -4, 4);
    emu_matmul_opts o = { .accum = &accum, .trans_a = true, .trans_b = true };
    ck_assert(emu_t_matmul(&ctx, "t.fast", &out, &a, &b, &o, &test_rne) == 0);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double exact = 0.0, mag = 0.0;
            for (size_t k = 0; k < K; k++) {
                double p = (double)a.data[k * M + i] * b.data[j * K + k];
                exact += p; /* exact: 22-bit products within 2^20 of each other */
                mag += fabs(p);
            }
            double v = out.data[i * N + j];
            EXPECT(fabs(v - exact) <= (double)K * 0x1p-24 * mag, "fast (%zu, %zu): "
                   "%a, exact %a", i, j, v, exact);
        }
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&out);
}
END_TEST

/* NaN outputs made from numbers (inf * 0, inf - inf) are told from those
 * passed on from a NaN input (a term of the output's row of A or column
 * of B, or its old value when accumulating): per output, whatever the
 * layout, model, alpha and threads, and when every row of A (or column of
 * B) holds a NaN. */
START_TEST(nan_accounting)
{
    const char *const models[] = { "fast", "sequential,acc=binary32", "exact" };
    const size_t batch = 2, M = 5, N = 7, K = 6;
    test_rng g = test_rng_make(0x4a4);
    const emu_format *f32 = fmt("binary32");
    int site_no = 0;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++)
        for (int lay = 0; lay < 4; lay++)
            for (int kase = 0; kase < 4; kase++) {
                const bool ta = lay & 1, tb = lay >> 1;
                emu_accum accum;
                emu_accum_default(&accum);
                emu_error err;
                ck_assert(emu_accum_parse(&accum, models[mi], &err) == 0);
                emu_tensor a, b, out;
                alloc(&a, "a", f32, batch, ta ? K : M, ta ? M : K);
                alloc(&b, "b", f32, batch, tb ? N : K, tb ? K : N);
                alloc(&out, "out", f32, batch, M, N);
                fill(&g, &a, -3, 3);
                fill(&g, &b, -3, 3);
                fill(&g, &out, -3, 3);
#define A_AT(bt, i, k) a.data[(bt) * M * K + (ta ? (k) * M + (i) : (i) * K + (k))]
#define B_AT(bt, k, j) b.data[(bt) * K * N + (tb ? (j) * K + (k) : (k) * N + (j))]
                /* example 1: row 2 of A starts with inf, and row 0 of B is
                 * zero: NaN made in every column of that row */
                A_AT(1, 2, 0) = INFINITY;
                for (size_t j = 0; j < N; j++)
                    B_AT(1, 0, j) = 0.0f;
                /* passed on: a term of row 1 of A (example 0), of column 3
                 * of B (example 1), which also crosses row 2 */
                A_AT(0, 1, 2) = NAN;
                B_AT(1, 4, 3) = NAN;
                if (kase == 1)
                    for (size_t k = 0; k < a.n; k++)
                        a.data[k] = NAN;
                if (kase == 2)
                    for (size_t k = 0; k < b.n; k++)
                        b.data[k] = (k % 3) ? NAN : -NAN;
                float old[2 * 5 * 7];
                if (kase == 3) /* old values, some NaN */
                    for (size_t o = 0; o < out.n; o++)
                        out.data[o] = o % 11 == 4 ? NAN : out.data[o];
                memcpy(old, out.data, sizeof old);
#undef A_AT
#undef B_AT
                for (int threads = 1; threads <= 2; threads++) {
                    emu_stats stats;
                    emu_stats_init(&stats);
                    emu_ctx ctx;
                    emu_ctx_init(&ctx, (uint64_t)threads);
                    ctx.stats = &stats;
                    ctx.threads = threads;
                    memcpy(out.data, old, sizeof old);
                    emu_matmul_opts o = { .accum = &accum, .trans_a = ta,
                                          .trans_b = tb,
                                          .accumulate = kase == 3,
                                          .alpha = lay == 3 ? 0.5 : 1.0 };
                    char site[32];
                    snprintf(site, sizeof site, "t.nan%d", site_no++);
                    ck_assert(emu_t_bmm(&ctx, site, &out, &a, &b, &o,
                                        &test_rne) == 0);
                    uint64_t nan = 0, produced = 0;
                    for (size_t bt = 0; bt < batch; bt++)
                        for (size_t i = 0; i < M; i++)
                            for (size_t j = 0; j < N; j++) {
                                const size_t oi = (bt * M + i) * N + j;
                                if (!isnan(out.data[oi]))
                                    continue;
                                nan++;
                                bool in = kase == 3 && isnan(old[oi]);
                                for (size_t k = 0; k < K; k++) {
                                    const float x = a.data[bt * M * K +
                                        (ta ? k * M + i : i * K + k)];
                                    const float y = b.data[bt * K * N +
                                        (tb ? j * K + k : k * N + j)];
                                    in |= isnan(x) || isnan(y);
                                }
                                produced += !in;
                            }
                    /* the made NaNs: row 2 of example 1 but column 3 */
                    if (kase == 0)
                        EXPECT(produced == N - 1 && nan >= 2 * N - 1 + M,
                               "%s: %" PRIu64 " NaN, %" PRIu64 " made",
                               models[mi], nan, produced);
                    if (kase == 1 || kase == 2)
                        EXPECT(nan == out.n && produced == 0, "%s case %d: %"
                               PRIu64 " NaN, %" PRIu64 " made", models[mi],
                               kase, nan, produced);
                    const emu_site *st = emu_stats_site(&stats, site, NULL,
                                                        EMU_ROLE_ACTIVATION,
                                                        f32);
                    EXPECT(st && st->total.nan == nan &&
                           st->total.nan_produced == produced,
                           "%s layout %d case %d threads %d: counted %" PRIu64
                           " NaN (%" PRIu64 " made), want %" PRIu64 " (%"
                           PRIu64 ")", models[mi], lay, kase, threads,
                           st ? st->total.nan : 0,
                           st ? st->total.nan_produced : 0, nan, produced);
                    emu_stats_free(&stats);
                }
                emu_tensor_free(&a);
                emu_tensor_free(&b);
                emu_tensor_free(&out);
            }
}
END_TEST

/* Bad arguments: -1, a message naming the site, outputs untouched. */
static void expect_fail(emu_ctx *ctx, int rc, const emu_tensor *out,
                        const float *before, const char *what, const char *needle)
{
    EXPECT(rc == -1, "%s: returned %d", what, rc);
    char msg[700];
    emu_error_format(&ctx->err, msg, sizeof msg);
    EXPECT(strstr(msg, "t.bad") && strstr(msg, needle), "%s: message '%s' "
           "(expected the site and '%s')", what, msg, needle);
    if (out && out->data && before)
        EXPECT(!memcmp(out->data, before, out->n * sizeof *before),
               "%s: out was modified", what);
}

START_TEST(bad_arguments)
{
    test_rng g = test_rng_make(0xbad);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum accum;
    emu_accum_default(&accum);
    emu_matmul_opts plain = { .accum = &accum };
    emu_tensor a, b, out, out3, b3;
    alloc(&a, "a", fmt("binary16"), 4, 5, 0);
    alloc(&b, "b", fmt("binary16"), 5, 6, 0);
    alloc(&out, "out", fmt("binary32"), 4, 6, 0);
    alloc(&out3, "out3", fmt("binary32"), 2, 4, 6);
    alloc(&b3, "b3", fmt("binary16"), 3, 5, 6);
    fill(&g, &a, -2, 2);
    fill(&g, &b, -2, 2);
    fill(&g, &out, -2, 2);
    fill(&g, &out3, -2, 2);
    float before[24], before3[48];
    memcpy(before, out.data, sizeof before);
    memcpy(before3, out3.data, sizeof before3);

    /* K mismatch, out shape, transposes that do not fit */
    emu_matmul_opts tr = { .accum = &accum, .trans_a = true };
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &b, &tr, &test_rne),
                &out,
                before, "trans_a K mismatch", "shape mismatch");
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &b, &b, &plain,
                                   &test_rne), &out,
                before, "inner dimensions", "shape mismatch");
    emu_tensor small;
    alloc(&small, "small", fmt("binary32"), 4, 5, 0);
    memcpy(small.data, before, 20 * sizeof(float));
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &small, &a, &b, &plain,
                                   &test_rne), &small,
                before, "out shape", "shape mismatch");
    /* dimensions */
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out3, &a, &b, &plain,
                                   &test_rne), &out3,
                before3, "3-d out for matmul", "dimensions");
    expect_fail(&ctx, emu_t_bmm(&ctx, "t.bad", &out3, &a, &b3, &plain,
                                &test_rne), &out3,
                before3, "2-d a for bmm", "dimensions");
    /* a format the carrier cannot hold, a zero-size tensor */
    emu_tensor wide = a;
    wide.fmt = *fmt("binary64");
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &wide, &b, &plain,
                                   &test_rne), &out,
                before, "binary64 input", "carrier");
    emu_tensor empty = b;
    empty.n = 0;
    empty.data = NULL;
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &empty, &plain,
                                   &test_rne), &out,
                before, "zero-size b", "not allocated");
    /* sources of the wrong shape, alpha not a power of two, aliasing */
    emu_matmul_opts src = { .accum = &accum, .b_src = &a };
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &b, &src,
                                   &test_rne), &out,
                before, "b_src shape", "shape mismatch");
    emu_matmul_opts al = { .accum = &accum, .alpha = 3.0, .accumulate = true };
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &b, &al, &test_rne),
                &out,
                before, "alpha 3 with accumulate", "power of two");
    emu_matmul_opts neg = { .accum = &accum, .alpha = -2.0 };
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &b, &neg,
                                   &test_rne), &out,
                before, "alpha -2", "positive");
    emu_tensor sq;
    alloc(&sq, "sq", fmt("binary32"), 5, 5, 0);
    emu_tensor sqa = sq;
    fill(&g, &sq, -2, 2);
    float before_sq[25];
    memcpy(before_sq, sq.data, sizeof before_sq);
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &sq, &sqa, &sq, &plain,
                                   &test_rne), &sq,
                before_sq, "out aliasing a", "storage");
    /* an accumulator model that does not validate */
    accum.kind = EMU_ACCUM_BLOCKED;
    accum.block = 0;
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &b, &plain,
                                   &test_rne), &out,
                before, "blocked with block 0", "block");
    emu_accum_default(&accum);
    /* the accumulator and the rounding are arguments without defaults */
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &b, NULL,
                                   &test_rne),
                &out, before, "no options", "options");
    emu_matmul_opts none = { .trans_a = false };
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &b, &none,
                                   &test_rne),
                &out, before, "no accumulator", "no accumulator");
    expect_fail(&ctx, emu_t_bmm(&ctx, "t.bad", &out3, &a, &b3, &none,
                                &test_rne),
                &out3, before3, "bmm without accumulator", "no accumulator");
    expect_fail(&ctx, emu_t_matmul(&ctx, "t.bad", &out, &a, &b, &plain, NULL),
                &out, before, "no rounding", "no rounding");
    /* After all that, a good call still works and counts as one op. */
    uint64_t op = ctx.op_index;
    ck_assert_int_eq(emu_t_matmul(&ctx, "t.good", &out, &a, &b, &plain,
                                  &test_rne), 0);
    ck_assert_uint_eq(ctx.op_index, op + 1);
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&out);
    emu_tensor_free(&out3);
    emu_tensor_free(&b3);
    emu_tensor_free(&small);
    emu_tensor_free(&sq);
}
END_TEST

static Suite *matmul_suite(void)
{
    Suite *s = suite_create("matmul");
    TCase *tc = tcase_create("matmul");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, matmul_definition);
    tcase_add_test(tc, exact_model_oracle);
    tcase_add_test(tc, accumulate_sequential);
    tcase_add_test(tc, threads_do_not_matter);
    tcase_add_test(tc, error_decomposition);
    tcase_add_test(tc, bmm_definition);
    tcase_add_test(tc, fast_model);
    tcase_add_test(tc, nan_accounting);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(matmul_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
