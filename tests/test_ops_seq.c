/*
 * test_ops_seq.c — the ops of sequence models: token embedding, layer
 * norm (libemu/ops_seq.c) and causal attention (libemu/ops_attn.c).
 *
 *  1. Forward values against MPFR (emu_ref_* : the exact value rounded
 *     once) in binary32, bfloat16, binary16 and e4m3 under several modes.
 *  2. Sums under accumulator models against the model's definition
 *     replayed with MPFR's correctly rounded additions (the sequential
 *     model in a narrow accumulator, where the order of the terms shows),
 *     and the exact model against the exact sum rounded once.
 *  3. Backward passes against central differences of L = sum r_i y_i in
 *     binary32 tensors with the exact accumulator (tolerances below).
 *  4. Every site sampled against MPFR with ref_rate 1.
 *  5. Refusals: ids outside the table, shapes, heads not dividing C.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static emu_tensor mk(const char *name, const char *fmt, size_t a, size_t b,
                     size_t c, size_t d)
{
    emu_tensor t;
    emu_error e;
    if (emu_tensor_alloc4(&t, name, EMU_ROLE_ACTIVATION, test_format(fmt), a, b,
                          c, d, &e))
        ck_abort_msg("alloc %s: %s", name, e.message);
    return t;
}

/* Values k 2^-10 with a few bits: exact in binary32, sums exact in double. */
static float grid(test_rng *g, double scale)
{
    return (float)(scale * ((double)test_below(g, 4096) - 2048.0) / 1024.0);
}

/* A random finite binary32 value of moderate range (subnormals of narrow
 * formats included): mantissa 24 random bits, exponent in [-30, 10]. */
static float rnd_val(test_rng *g)
{
    double m = (double)(test_next(g) >> 40) / 0x1p24; /* [0, 1) */
    int e = (int)test_below(g, 41) - 30;
    double v = ldexp(1.0 + m, e);
    return (float)(test_below(g, 2) ? -v : v);
}

static emu_accum accum_spec(const char *spec)
{
    emu_accum a;
    emu_error e;
    if (emu_accum_parse(&a, spec, &e))
        ck_abort_msg("accum %s: %s", spec, e.message);
    return a;
}

static const char *const fmts4[] = { "binary32", "bfloat16", "binary16", "e4m3" };

/* ---- embedding ------------------------------------------------------------------ */

START_TEST(embedding_forward_formats)
{
    test_rng g = test_rng_make(0x5e01);
    const size_t V = 7, D = 5, N = 13;
    emu_tensor table = mk("wte", "binary32", V, D, 0, 0);
    for (size_t k = 0; k < V * D; k++)
        table.data[k] = rnd_val(&g);
    int32_t idx[13];
    for (size_t i = 0; i < N; i++)
        idx[i] = (int32_t)test_below(&g, V);
    const emu_rnd modes[] = { EMU_RNE, EMU_RZ, EMU_RU, EMU_RD };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    for (int f = 0; f < 4; f++) {
        /* out as (B, T, D) = (1, 13, 5): any shape with last dimension D */
        emu_tensor out = mk("x", fmts4[f], 1, N, D, 0);
        for (int m = 0; m < 4; m++) {
            emu_rounding r = { .mode = modes[m] };
            ck_assert_int_eq(emu_t_embedding(&ctx, "wte", &out, &table, idx, N, &r),
                             0);
            for (size_t i = 0; i < N; i++)
                for (size_t d = 0; d < D; d++) {
                    emu_status st;
                    double want = emu_ref_convert(test_format(fmts4[f]),
                                                  table.data[idx[i] * D + d],
                                                  &r, &st);
                    EXPECT(test_same(out.data[i * D + d], want),
                           "%s mode %d (%zu, %zu): %a, want %a", fmts4[f],
                           (int)modes[m], i, d, out.data[i * D + d], want);
                }
        }
        emu_tensor_free(&out);
    }
    /* NaN and inf are copied (cast) like any value; D = 1 works */
    emu_tensor t1 = mk("t1", "binary32", 3, 1, 0, 0), o1 = mk("o1", "binary16", 4, 1, 0, 0);
    t1.data[0] = NAN, t1.data[1] = INFINITY, t1.data[2] = -0.0f;
    int32_t id1[4] = { 2, 0, 1, 2 };
    ck_assert_int_eq(emu_t_embedding(&ctx, "e1", &o1, &t1, id1, 4, &test_rne), 0);
    ck_assert(signbit(o1.data[0]) && o1.data[0] == 0.0f);
    ck_assert(isnan(o1.data[1]) && isinf(o1.data[2]) && signbit(o1.data[3]));
    emu_tensor_free(&t1);
    emu_tensor_free(&o1);
    emu_tensor_free(&table);
}
END_TEST

/* The scatter-add of one output, replayed: the sequential model in acc
 * (MPFR-backed correctly rounded additions), starting at init. */
static double seq_ref(const emu_format *acc, const emu_rounding *r, double init,
                      const float *terms, size_t n)
{
    double s = init;
    for (size_t k = 0; k < n; k++) {
        emu_status st;
        double t = terms[k];
        double sum = emu_ref_add(acc, s, t, r, &st);
        /* IEEE's exact zero: +0 unless both are -0 (toward -inf: -0) */
        s = sum;
    }
    return s;
}

/* The terms of dtable[v, d] in ascending position order. */
static size_t terms_of(const float *dout, const int32_t *idx, size_t N, size_t D,
                       size_t v, size_t d, float *buf)
{
    size_t k = 0;
    for (size_t i = 0; i < N; i++)
        if ((size_t)idx[i] == v)
            buf[k++] = dout[i * D + d];
    return k;
}

START_TEST(embedding_backward_models)
{
    test_rng g = test_rng_make(0x5e02);
    const size_t V = 6, D = 4, N = 40;
    emu_tensor dout = mk("dx", "binary32", N, D, 0, 0);
    for (size_t k = 0; k < N * D; k++)
        dout.data[k] = rnd_val(&g);
    int32_t idx[40];
    for (size_t i = 0; i < N; i++)
        idx[i] = (int32_t)test_below(&g, V - 1); /* row V-1 never reached */
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    float buf[40];
    for (int f = 0; f < 4; f++) {
        emu_tensor dt = mk("dwte", fmts4[f], V, D, 0, 0);
        const emu_format *of = test_format(fmts4[f]);
        for (int a = 0; a < 3; a++) {
            const char *spec[] = { "seq,acc=bfloat16", "seq,acc=binary16,mode=rz",
                                   "exact" };
            emu_accum acc = accum_spec(spec[a]);
            for (int accu = 0; accu < 2; accu++) {
                /* old values: representable in dt's format */
                float old[24];
                for (size_t k = 0; k < V * D; k++) {
                    emu_status st;
                    old[k] = dt.data[k] = accu ? (float)emu_ref_convert(
                                                     of, grid(&g, 1.0), &test_rne, &st)
                                               : 777.0f;
                }
                emu_embedding_opts o = { .accum = &acc, .accumulate = accu };
                ck_assert_int_eq(emu_t_embedding_backward(&ctx, "wte", &dt, &dout,
                                                          idx, N, &o, &test_rne),
                                 0);
                for (size_t v = 0; v < V; v++)
                    for (size_t d = 0; d < D; d++) {
                        size_t n = terms_of(dout.data, idx, N, D, v, d, buf);
                        double init = accu ? old[v * D + d] : 0.0;
                        double want;
                        emu_status st;
                        if (n == 0) {
                            want = init;
                        } else if (acc.kind == EMU_ACCUM_EXACT) {
                            mpfr_t s;
                            mpfr_init2(s, 2000);
                            mpfr_set_d(s, init, MPFR_RNDN);
                            for (size_t k = 0; k < n; k++)
                                mpfr_add_d(s, s, buf[k], MPFR_RNDN);
                            want = emu_ref_round(of, s, &test_rne, &st);
                            mpfr_clear(s);
                        } else {
                            double s = seq_ref(&acc.acc, &acc.rnd, init, buf, n);
                            want = emu_ref_convert(of, s, &test_rne, &st);
                        }
                        float got = dt.data[v * D + d];
                        EXPECT(test_same(got, want),
                               "%s %s accumulate %d [%zu, %zu] (%zu terms): %a, want %a",
                               fmts4[f], spec[a], accu, v, d, n, got, want);
                    }
            }
        }
        emu_tensor_free(&dt);
    }
    emu_tensor_free(&dout);
}
END_TEST

/* The terms are summed in ascending position order: a sequential bfloat16
 * accumulator gives 1 for 1, then four 2^-9 (each one absorbed), but
 * 1 + 2^-7 the other way round. */
START_TEST(embedding_backward_order)
{
    emu_tensor dout = mk("d", "binary32", 6, 1, 0, 0);
    emu_tensor dt = mk("dt", "binary32", 2, 1, 0, 0);
    const float vals[6] = { 5.0f, 1.0f, 0x1p-9f, 0x1p-9f, 0x1p-9f, 0x1p-9f };
    memcpy(dout.data, vals, sizeof vals);
    int32_t idx[6] = { 0, 1, 1, 1, 1, 1 };
    emu_accum acc = accum_spec("seq,acc=bfloat16");
    emu_embedding_opts o = { .accum = &acc };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "e", &dt, &dout, idx, 6, &o,
                                              &test_rne), 0);
    ck_assert(dt.data[0] == 5.0f);
    ck_assert(dt.data[1] == 1.0f);
    /* reversed positions: the small terms first */
    const float rev[6] = { 5.0f, 0x1p-9f, 0x1p-9f, 0x1p-9f, 0x1p-9f, 1.0f };
    memcpy(dout.data, rev, sizeof rev);
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "e", &dt, &dout, idx, 6, &o,
                                              &test_rne), 0);
    ck_assert(dt.data[1] == 1.0f + 0x1p-7f);
    /* the swamping of the first order is counted: 4 absorbed addends */
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    memcpy(dout.data, vals, sizeof vals);
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "e", &dt, &dout, idx, 6, &o,
                                              &test_rne), 0);
    const emu_site *s = emu_stats_find_name(&st, "e");
    ck_assert(s && s->total.absorbed == 4);
    /* inf and -inf at one row: NaN; NaN propagates */
    dout.data[0] = INFINITY, dout.data[1] = -INFINITY, dout.data[2] = NAN;
    idx[1] = 0;
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "e", &dt, &dout, idx, 6, &o,
                                              &test_rne), 0);
    ck_assert(isnan(dt.data[0]) && isnan(dt.data[1]));
    emu_stats_free(&st);
    emu_tensor_free(&dout);
    emu_tensor_free(&dt);
}
END_TEST

/* The fast model: binary64 sums in position order, rounded once. */
START_TEST(embedding_backward_fast)
{
    test_rng g = test_rng_make(0x5e03);
    const size_t V = 5, D = 3, N = 30;
    emu_tensor dout = mk("d", "binary32", N, D, 0, 0);
    emu_tensor dt = mk("dt", "bfloat16", V, D, 0, 0);
    for (size_t k = 0; k < N * D; k++)
        dout.data[k] = rnd_val(&g);
    int32_t idx[30];
    for (size_t i = 0; i < N; i++)
        idx[i] = (int32_t)test_below(&g, V);
    emu_accum fast = accum_spec("fast");
    emu_embedding_opts o = { .accum = &fast, .accumulate = true };
    for (size_t k = 0; k < V * D; k++)
        dt.data[k] = 0.5f;
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "e", &dt, &dout, idx, N, &o,
                                              &test_rne), 0);
    for (size_t v = 0; v < V; v++)
        for (size_t d = 0; d < D; d++) {
            double s = 0.5;
            for (size_t i = 0; i < N; i++)
                if ((size_t)idx[i] == v)
                    s += dout.data[i * D + d];
            emu_status st;
            double want = emu_ref_convert(test_format("bfloat16"), s, &test_rne, &st);
            EXPECT(test_same(dt.data[v * D + d], want), "[%zu, %zu]: %a, want %a",
                   v, d, dt.data[v * D + d], want);
        }
    emu_tensor_free(&dout);
    emu_tensor_free(&dt);
}
END_TEST

/* The backward pass is the adjoint of the forward: for L = sum r out,
 * central differences in each table entry (exact: L is linear and the grid
 * values sum exactly) equal dtable. */
START_TEST(embedding_finite_difference)
{
    test_rng g = test_rng_make(0x5e04);
    const size_t V = 4, D = 3, N = 9;
    emu_tensor table = mk("t", "binary32", V, D, 0, 0), out = mk("o", "binary32", N, D, 0, 0);
    emu_tensor r = mk("r", "binary32", N, D, 0, 0), dt = mk("dt", "binary32", V, D, 0, 0);
    for (size_t k = 0; k < V * D; k++)
        table.data[k] = grid(&g, 1.0);
    for (size_t k = 0; k < N * D; k++)
        r.data[k] = grid(&g, 1.0);
    int32_t idx[9];
    for (size_t i = 0; i < N; i++)
        idx[i] = (int32_t)test_below(&g, V);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum exact = accum_spec("exact");
    emu_embedding_opts o = { .accum = &exact };
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "e", &dt, &r, idx, N, &o,
                                              &test_rne), 0);
    const float h = 0x1p-4f;
    for (size_t k = 0; k < V * D; k++) {
        double L[2];
        for (int s = 0; s < 2; s++) {
            float keep = table.data[k];
            table.data[k] = keep + (s ? -h : h);
            ck_assert_int_eq(emu_t_embedding(&ctx, "e", &out, &table, idx, N,
                                             &test_rne), 0);
            table.data[k] = keep;
            L[s] = 0.0;
            for (size_t j = 0; j < N * D; j++)
                L[s] += (double)r.data[j] * out.data[j];
        }
        double fd = (L[0] - L[1]) / (2.0 * h);
        EXPECT(fd == dt.data[k], "entry %zu: %.17g, fd %.17g", k, dt.data[k], fd);
    }
    emu_tensor_free(&table);
    emu_tensor_free(&out);
    emu_tensor_free(&r);
    emu_tensor_free(&dt);
}
END_TEST

START_TEST(embedding_refusals)
{
    emu_tensor table = mk("wte", "binary32", 4, 3, 0, 0), out = mk("x", "binary32", 5, 3, 0, 0);
    emu_tensor bad = mk("x2", "binary32", 5, 2, 0, 0), dt = mk("dwte", "binary32", 4, 3, 0, 0);
    int32_t idx[5] = { 0, 1, 2, 3, 0 };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_accum seq = accum_spec("seq");
    emu_embedding_opts o = { .accum = &seq };
    out.data[0] = 99.0f;
    dt.data[0] = 99.0f;
    idx[3] = 4;
    ck_assert_int_eq(emu_t_embedding(&ctx, "wte", &out, &table, idx, 5, &test_rne), -1);
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    EXPECT(strstr(ctx.err.message, "position 3") && strstr(ctx.err.message, "4"),
           "message: %s", ctx.err.message);
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "wte", &dt, &out, idx, 5, &o,
                                              &test_rne), -1);
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    idx[3] = -1;
    ck_assert_int_eq(emu_t_embedding(&ctx, "wte", &out, &table, idx, 5, &test_rne), -1);
    EXPECT(strstr(ctx.err.message, "-1"), "message: %s", ctx.err.message);
    idx[3] = 3;
    /* shapes, n, NULL ids, NULL accumulator */
    ck_assert_int_eq(emu_t_embedding(&ctx, "wte", &bad, &table, idx, 5, &test_rne), -1);
    ck_assert_int_eq(emu_t_embedding(&ctx, "wte", &out, &table, idx, 4, &test_rne), -1);
    ck_assert_int_eq(emu_t_embedding(&ctx, "wte", &out, &table, NULL, 5, &test_rne), -1);
    ck_assert_int_eq(emu_t_embedding(&ctx, "wte", &out, &table, idx, 5, NULL), -1);
    emu_embedding_opts none = { 0 };
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "wte", &dt, &out, idx, 5, &none,
                                              &test_rne), -1);
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "wte", &dt, &bad, idx, 5, &o,
                                              &test_rne), -1);
    ck_assert(out.data[0] == 99.0f && dt.data[0] == 99.0f);
    emu_tensor_free(&table);
    emu_tensor_free(&out);
    emu_tensor_free(&bad);
    emu_tensor_free(&dt);
}
END_TEST

/* ---- MPFR sampling of every site -------------------------------------------------- */

static void check_sites(emu_stats *st, const char *const *sites, int n, double bound)
{
    for (int i = 0; i < n; i++) {
        const emu_site *s = emu_stats_find_name(st, sites[i]);
        EXPECT(s, "no site %s", sites[i]);
        EXPECT(s->total.ref_samples == s->total.results && s->total.results > 0,
               "site %s: %llu samples of %llu", sites[i],
               (unsigned long long)s->total.ref_samples,
               (unsigned long long)s->total.results);
        EXPECT(s->total.ulp_max <= bound, "site %s: %.17g ulps", sites[i],
               s->total.ulp_max);
    }
}

START_TEST(embedding_sampled)
{
    test_rng g = test_rng_make(0x5e05);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 3);
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    emu_tensor table = mk("t", "binary32", 5, 4, 0, 0), out = mk("o", "bfloat16", 8, 4, 0, 0);
    emu_tensor dt = mk("dt", "binary16", 5, 4, 0, 0);
    for (size_t k = 0; k < 20; k++)
        table.data[k] = rnd_val(&g);
    int32_t idx[8] = { 0, 1, 1, 2, 0, 3, 3, 1 };
    ck_assert_int_eq(emu_t_embedding(&ctx, "wte", &out, &table, idx, 8, &test_rne), 0);
    emu_accum exact = accum_spec("exact");
    emu_embedding_opts o = { .accum = &exact };
    ck_assert_int_eq(emu_t_embedding_backward(&ctx, "dwte", &dt, &out, idx, 8, &o,
                                              &test_rne), 0);
    const char *sites[] = { "wte", "dwte" };
    check_sites(&st, sites, 2, 0.5);
    ck_assert(emu_stats_find_name(&st, "dwte")->total.dot_samples > 0);
    emu_stats_free(&st);
    emu_tensor_free(&table);
    emu_tensor_free(&out);
    emu_tensor_free(&dt);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_seq");
    TCase *tc = tcase_create("embedding");
    tcase_add_test(tc, embedding_forward_formats);
    tcase_add_test(tc, embedding_backward_models);
    tcase_add_test(tc, embedding_backward_order);
    tcase_add_test(tc, embedding_backward_fast);
    tcase_add_test(tc, embedding_finite_difference);
    tcase_add_test(tc, embedding_refusals);
    tcase_add_test(tc, embedding_sampled);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
