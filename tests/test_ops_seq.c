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

#include "ops_internal.h" /* emu_gemm_fast_f32: the fast model's GEMM */
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


/* ---- layer norm ---------------------------------------------------------------- */

typedef struct ln_case {
    size_t N, D;
    emu_tensor x, y, mean, rstd, gamma, beta, dy, dx, dg, db;
} ln_case;

static void ln_make(ln_case *k, size_t N, size_t D, const char *yfmt, test_rng *g)
{
    memset(k, 0, sizeof *k);
    k->N = N, k->D = D;
    k->x = mk("x", "binary32", N, D, 0, 0);
    k->y = mk("y", yfmt, N, D, 0, 0);
    k->dy = mk("dy", "binary32", N, D, 0, 0);
    k->dx = mk("dx", "binary32", N, D, 0, 0);
    k->mean = mk("mean", "binary32", N, 0, 0, 0);
    k->rstd = mk("rstd", "binary32", N, 0, 0, 0);
    k->gamma = mk("gamma", "binary32", D, 0, 0, 0);
    k->beta = mk("beta", "binary32", D, 0, 0, 0);
    k->dg = mk("dgamma", "binary32", D, 0, 0, 0);
    k->db = mk("dbeta", "binary32", D, 0, 0, 0);
    for (size_t i = 0; i < N; i++) {
        double off = grid(g, 2.0), spread = ldexp(1.0, (int)test_below(g, 4) - 1);
        for (size_t d = 0; d < D; d++)
            k->x.data[i * D + d] = (float)(off + spread * grid(g, 1.0));
    }
    for (size_t d = 0; d < D; d++) {
        k->gamma.data[d] = grid(g, 1.0) + 0.25f;
        k->beta.data[d] = grid(g, 1.0);
    }
    for (size_t j = 0; j < N * D; j++)
        k->dy.data[j] = grid(g, 1.0);
}

static void ln_free(ln_case *k)
{
    emu_tensor *ts[] = { &k->x, &k->y, &k->mean, &k->rstd, &k->gamma, &k->beta,
                         &k->dy, &k->dx, &k->dg, &k->db };
    for (int i = 0; i < 10; i++)
        emu_tensor_free(ts[i]);
}

/* Forward values of every site against MPFR in four formats and four
 * modes: the exact model makes each sum exact, so every output is the
 * exact value of its definition rounded once (within the binary64
 * evaluation's few 2^-53 relative). */
START_TEST(layernorm_sampled)
{
    test_rng g = test_rng_make(0x1a01);
    emu_accum exact = accum_spec("exact");
    const emu_rnd modes[] = { EMU_RNE, EMU_RZ, EMU_RU, EMU_RNA };
    for (int f = 0; f < 4; f++) {
        emu_ctx ctx;
        emu_ctx_init(&ctx, 5);
        emu_stats st;
        emu_stats_init(&st);
        ctx.stats = &st;
        ctx.measure = EMU_MEASURE_ALL;
        ctx.ref_rate = 1.0;
        ln_case k;
        ln_make(&k, 5, 12, fmts4[f], &g);
        emu_tensor dx = mk("dxf", fmts4[f], 5, 12, 0, 0);
        emu_rounding r = { .mode = modes[f] };
        emu_layernorm_opts o = { .accum = &exact, .eps = 1e-5 };
        ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                         &k.gamma, &k.beta, &o, &r), 0);
        ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &dx, &k.dg, &k.db,
                                                  &k.dy, &k.x, &k.mean, &k.rstd,
                                                  &k.gamma, &o, &r), 0);
        const char *sites[] = { "ln.mean", "ln.var", "ln.rstd", "ln", "ln.dweight",
                                "ln.dbias", "ln.dinput" };
        /* directed modes: up to one ulp; nearest: half */
        check_sites(&st, sites, 7, (modes[f] == EMU_RNE || modes[f] == EMU_RNA
                                    ? 0.5 : 1.0) + 0x1p-20);
        ck_assert(emu_stats_find_name(&st, "ln.var")->total.dot_samples > 0);
        emu_stats_free(&st);
        emu_tensor_free(&dx);
        ln_free(&k);
    }
    /* the fast model sampled too (its references need no kept terms):
     * binary64 sums, within an ulp of binary32 here */
    emu_accum fast = accum_spec("fast");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 5);
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    ln_case k;
    ln_make(&k, 5, 12, "binary32", &g);
    emu_layernorm_opts o = { .accum = &fast, .eps = 1e-5 };
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                     &k.gamma, &k.beta, &o, &test_rne), 0);
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &k.dx, &k.dg, &k.db, &k.dy,
                                              &k.x, &k.mean, &k.rstd, &k.gamma, &o,
                                              &test_rne), 0);
    const char *sites[] = { "ln.mean", "ln.var", "ln.rstd", "ln", "ln.dweight",
                            "ln.dbias", "ln.dinput" };
    check_sites(&st, sites, 7, 1.0);
    emu_stats_free(&st);
    ln_free(&k);
}
END_TEST

/* The mean under a narrow sequential accumulator: the model's sum (MPFR's
 * additions in binary16) divided by D with one rounding; the variance's
 * terms are the binary32 centred values. */
START_TEST(layernorm_narrow_accumulator)
{
    test_rng g = test_rng_make(0x1a02);
    ln_case k;
    ln_make(&k, 4, 24, "binary32", &g);
    for (size_t j = 0; j < k.x.n; j++)
        k.x.data[j] = rnd_val(&g);
    emu_accum seq = accum_spec("seq,acc=binary16");
    emu_layernorm_opts o = { .accum = &seq, .eps = 1e-5 };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                     NULL, NULL, &o, &test_rne), 0);
    const emu_format *b16 = test_format("binary16"), *b32 = test_format("binary32");
    for (size_t i = 0; i < k.N; i++) {
        emu_status st;
        double s = seq_ref(b16, &test_rne, 0.0, k.x.data + i * k.D, k.D);
        double want = emu_ref_div(b32, s, (double)k.D, &test_rne, &st);
        EXPECT(test_same(k.mean.data[i], want), "row %zu: mean %a, want %a", i,
               k.mean.data[i], want);
        float c[24];
        double v = 0.0;
        for (size_t d = 0; d < k.D; d++)
            c[d] = (float)((double)k.x.data[i * k.D + d] - k.mean.data[i]);
        for (size_t d = 0; d < k.D; d++) {
            double sq = emu_ref_mul(b32, c[d], c[d], &test_rne, &st);
            (void)sq;
            /* the products are exact: the sum of squares in binary16 */
            v = emu_ref_add(b16, v, (double)c[d] * c[d], &test_rne, &st);
        }
        double var = emu_ref_div(b32, v, (double)k.D, &test_rne, &st);
        double rs = emu_ref_convert(b32, 1.0 / sqrt(var + 1e-5), &test_rne, &st);
        EXPECT(fabs(k.rstd.data[i] - rs) <= ldexp(fabs(rs), -23),
               "row %zu: rstd %a, want %a", i, k.rstd.data[i], rs);
    }
    ln_free(&k);
}
END_TEST

/* Central differences of L = sum r y (binary32 tensors, exact model).
 * Tolerance: the rounding noise of L(v +- h) over 2h (each y within half
 * an ulp, and the stored mean and rstd within half an ulp of binary32,
 * which move y by at most |y| 2^-23: together about
 * sum |r| (|y| + 4) 2^-24 / (2h)), plus the truncation error, estimated
 * from the difference of the central differences at h and 2h. */
START_TEST(layernorm_finite_difference)
{
    test_rng g = test_rng_make(0x1a03);
    ln_case k;
    ln_make(&k, 3, 7, "binary32", &g);
    emu_accum exact = accum_spec("exact");
    emu_layernorm_opts o = { .accum = &exact, .eps = 1e-5 };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                     &k.gamma, &k.beta, &o, &test_rne), 0);
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &k.dx, &k.dg, &k.db,
                                              &k.dy, &k.x, &k.mean, &k.rstd,
                                              &k.gamma, &o, &test_rne), 0);
    emu_tensor y2 = mk("y2", "binary32", 3, 7, 0, 0);
    emu_tensor m2 = mk("m2", "binary32", 3, 0, 0, 0), r2 = mk("r2", "binary32", 3, 0, 0, 0);
    /* parameters to perturb: x, gamma, beta; the gradients to compare */
    emu_tensor *par[] = { &k.x, &k.gamma, &k.beta };
    emu_tensor *grad[] = { &k.dx, &k.dg, &k.db };
    double worst = 0.0;
    for (int p = 0; p < 3; p++)
        for (size_t j = 0; j < par[p]->n; j++) {
            double fd[2], noise = 0.0;
            for (int hh = 0; hh < 2; hh++) {
                const float h = hh ? 0x1p-9f : 0x1p-10f;
                double L[2];
                for (int s = 0; s < 2; s++) {
                    float keep = par[p]->data[j];
                    par[p]->data[j] = keep + (s ? -h : h);
                    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &y2, &m2, &r2,
                                                     &k.x, &k.gamma, &k.beta, &o,
                                                     &test_rne), 0);
                    par[p]->data[j] = keep;
                    L[s] = 0.0;
                    for (size_t q = 0; q < y2.n; q++) {
                        L[s] += (double)k.dy.data[q] * y2.data[q];
                        if (hh == 0)
                            noise += fabs(k.dy.data[q]) *
                                     (fabs(y2.data[q]) + 4.0) * 0x1p-24;
                    }
                }
                fd[hh] = (L[0] - L[1]) / (2.0 * h);
                if (hh == 0)
                    noise /= 2.0 * h;
            }
            const double got = grad[p]->data[j];
            const double tol = noise + fabs(fd[1] - fd[0]) +
                               ldexp(fabs(got), -23) + 1e-12;
            EXPECT(fabs(got - fd[0]) <= tol,
                   "param %d [%zu]: %.9g, fd %.9g (h: %.9g), tolerance %.3g", p, j,
                   got, fd[0], fd[1], tol);
            if (fabs(got - fd[0]) / tol > worst)
                worst = fabs(got - fd[0]) / tol;
        }
    /* the check can fail: a gradient off by 1% of its size would show */
    ck_assert(worst < 1.0);
    emu_tensor_free(&y2);
    emu_tensor_free(&m2);
    emu_tensor_free(&r2);
    ln_free(&k);
}
END_TEST

/* The fast model agrees with the exact one to the binary64 sums' error
 * (within one ulp of binary32 on these well-conditioned rows); D = 1 and
 * a non-finite row; NULL gamma, beta and parameter gradients. */
START_TEST(layernorm_fast_and_edges)
{
    test_rng g = test_rng_make(0x1a04);
    ln_case a, b;
    ln_make(&a, 6, 16, "binary32", &g);
    g = test_rng_make(0x1a04);
    ln_make(&b, 6, 16, "binary32", &g);
    emu_accum exact = accum_spec("exact"), fast = accum_spec("fast");
    emu_layernorm_opts oe = { .accum = &exact, .eps = 1e-5 },
                       of = { .accum = &fast, .eps = 1e-5 };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &a.y, &a.mean, &a.rstd, &a.x,
                                     &a.gamma, &a.beta, &oe, &test_rne), 0);
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &a.dx, &a.dg, &a.db, &a.dy,
                                              &a.x, &a.mean, &a.rstd, &a.gamma,
                                              &oe, &test_rne), 0);
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &b.y, &b.mean, &b.rstd, &b.x,
                                     &b.gamma, &b.beta, &of, &test_rne), 0);
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &b.dx, &b.dg, &b.db, &b.dy,
                                              &b.x, &b.mean, &b.rstd, &b.gamma,
                                              &of, &test_rne), 0);
    emu_tensor *ta[] = { &a.y, &a.mean, &a.rstd, &a.dx, &a.dg, &a.db };
    emu_tensor *tb[] = { &b.y, &b.mean, &b.rstd, &b.dx, &b.dg, &b.db };
    for (int t = 0; t < 6; t++)
        for (size_t j = 0; j < ta[t]->n; j++) {
            double u = ta[t]->data[j], v = tb[t]->data[j];
            EXPECT(fabs(u - v) <= ldexp(fabs(u), -23) + 1e-6, "%s [%zu]: %a vs %a",
                   ta[t]->name, j, u, v);
        }
    /* row 2 with an infinity: NaN (inf - inf); other rows unchanged */
    a.x.data[2 * 16 + 5] = INFINITY;
    float keep = a.y.data[0];
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &a.y, &a.mean, &a.rstd, &a.x,
                                     NULL, NULL, &oe, &test_rne), 0);
    for (size_t d = 0; d < 16; d++)
        ck_assert(isnan(a.y.data[2 * 16 + d]));
    ck_assert(!isnan(a.y.data[0]) && a.y.data[0] != keep); /* no gamma, beta now */
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &a.dx, NULL, NULL, &a.dy,
                                              &a.x, &a.mean, &a.rstd, NULL, &oe,
                                              &test_rne), 0);
    ck_assert(isnan(a.dx.data[2 * 16]) && !isnan(a.dx.data[0]));
    /* D = 1: x - mean = 0, y = beta; the gradient of x is 0 */
    emu_tensor x1 = mk("x1", "binary32", 3, 1, 0, 0), y1 = mk("y1", "binary32", 3, 1, 0, 0);
    emu_tensor m1 = mk("m1", "binary32", 3, 0, 0, 0), r1 = mk("r1", "binary32", 3, 0, 0, 0);
    emu_tensor b1 = mk("b1", "binary32", 1, 0, 0, 0), d1 = mk("d1", "binary32", 3, 1, 0, 0);
    b1.data[0] = 0.75f;
    x1.data[0] = 3.0f, x1.data[1] = -2.5f, x1.data[2] = 1e30f;
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln1", &y1, &m1, &r1, &x1, NULL, &b1,
                                     &oe, &test_rne), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert(y1.data[i] == 0.75f && m1.data[i] == x1.data[i]);
        ck_assert(r1.data[i] == (float)(1.0 / sqrt(1e-5)));
    }
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln1", &d1, NULL, NULL, &x1,
                                              &x1, &m1, &r1, NULL, &oe,
                                              &test_rne), 0);
    for (int i = 0; i < 3; i++)
        ck_assert(d1.data[i] == 0.0f);
    emu_tensor *t1[] = { &x1, &y1, &m1, &r1, &b1, &d1 };
    for (int i = 0; i < 6; i++)
        emu_tensor_free(t1[i]);
    ln_free(&a);
    ln_free(&b);
}
END_TEST

START_TEST(layernorm_refusals)
{
    test_rng g = test_rng_make(0x1a05);
    ln_case k;
    ln_make(&k, 3, 4, "binary32", &g);
    emu_accum seq = accum_spec("seq");
    emu_layernorm_opts o = { .accum = &seq, .eps = 1e-5 }, bad = o;
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    k.y.data[0] = 99.0f;
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                     &k.gamma, &k.beta, NULL, &test_rne), -1);
    bad.eps = 0.0;
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                     &k.gamma, &k.beta, &bad, &test_rne), -1);
    bad = o;
    bad.accum = NULL;
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                     &k.gamma, &k.beta, &bad, &test_rne), -1);
    /* gamma of N values, mean of D values, y sharing the mean's storage */
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                     &k.mean, &k.beta, &o, &test_rne), -1);
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.gamma, &k.rstd, &k.x,
                                     NULL, NULL, &o, &test_rne), -1);
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.rstd, &k.rstd, &k.x,
                                     NULL, NULL, &o, &test_rne), -1);
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    ck_assert(k.y.data[0] == 99.0f);
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &k.dx, &k.dg, &k.dg,
                                              &k.dy, &k.x, &k.mean, &k.rstd,
                                              &k.gamma, &o, &test_rne), -1);
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &k.dx, &k.dg, &k.db,
                                              &k.dy, &k.x, &k.mean, &k.rstd,
                                              &k.gamma, &o, NULL), -1);
    /* in place is allowed: y over x, dx over dy */
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.x, &k.mean, &k.rstd, &k.x,
                                     &k.gamma, &k.beta, &o, &test_rne), 0);
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &k.dy, &k.dg, &k.db,
                                              &k.dy, &k.x, &k.mean, &k.rstd,
                                              &k.gamma, &o, &test_rne), 0);
    ln_free(&k);
}
END_TEST


/* ---- causal attention ------------------------------------------------------------ */

typedef struct at_case {
    size_t B, T, C, H;
    emu_tensor qkv, out, att, dout, dqkv;
} at_case;

static void at_make(at_case *k, size_t B, size_t T, size_t C, size_t H,
                    const char *fmt, test_rng *g)
{
    memset(k, 0, sizeof *k);
    k->B = B, k->T = T, k->C = C, k->H = H;
    k->qkv = mk("qkv", "binary32", B, T, 3 * C, 0);
    k->out = mk("y", fmt, B, T, C, 0);
    k->att = mk("att", fmt, B, H, T, T);
    k->dout = mk("dy", "binary32", B, T, C, 0);
    k->dqkv = mk("dqkv", fmt, B, T, 3 * C, 0);
    for (size_t j = 0; j < k->qkv.n; j++)
        k->qkv.data[j] = grid(g, 1.0);
    for (size_t j = 0; j < k->dout.n; j++)
        k->dout.data[j] = grid(g, 1.0);
}

static void at_free(at_case *k)
{
    emu_tensor_free(&k->qkv);
    emu_tensor_free(&k->out);
    emu_tensor_free(&k->att);
    emu_tensor_free(&k->dout);
    emu_tensor_free(&k->dqkv);
}

/* The plain binary64 attention, written from the definition (not from the
 * library's indexing): out, att and, if dout, dqkv. */
static void at_ref64(const at_case *k, double *out, double *att, double *dqkv)
{
    const size_t B = k->B, T = k->T, C = k->C, H = k->H, hs = C / H;
    const float *x = k->qkv.data;
    const double sc = 1.0 / sqrt((double)hs);
#define Q(b, t, c) ((double)x[((b) * T + (t)) * 3 * C + (c)])
#define K(b, t, c) ((double)x[((b) * T + (t)) * 3 * C + C + (c)])
#define V(b, t, c) ((double)x[((b) * T + (t)) * 3 * C + 2 * C + (c)])
#define P(b, h, t, u) att[(((b) * H + (h)) * T + (t)) * T + (u)]
    for (size_t j = 0; j < B * T * C; j++)
        out[j] = 0.0;
    if (dqkv)
        for (size_t j = 0; j < B * T * 3 * C; j++)
            dqkv[j] = 0.0;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            for (size_t t = 0; t < T; t++) {
                double s[64], m = -INFINITY, sum = 0.0;
                for (size_t u = 0; u <= t; u++) {
                    s[u] = 0.0;
                    for (size_t d = 0; d < hs; d++)
                        s[u] += Q(b, t, h * hs + d) * K(b, u, h * hs + d);
                    s[u] *= sc;
                    m = fmax(m, s[u]);
                }
                for (size_t u = 0; u < T; u++) {
                    P(b, h, t, u) = u <= t ? exp(s[u] - m) : 0.0;
                    sum += P(b, h, t, u);
                }
                for (size_t u = 0; u < T; u++)
                    P(b, h, t, u) /= sum;
                for (size_t d = 0; d < hs; d++)
                    for (size_t u = 0; u <= t; u++)
                        out[(b * T + t) * C + h * hs + d] +=
                            P(b, h, t, u) * V(b, u, h * hs + d);
            }
            if (!dqkv)
                continue;
            const float *dy = k->dout.data;
            for (size_t t = 0; t < T; t++) {
                double datt[64], r = 0.0;
                for (size_t u = 0; u <= t; u++) {
                    datt[u] = 0.0;
                    for (size_t d = 0; d < hs; d++) {
                        datt[u] += dy[(b * T + t) * C + h * hs + d] *
                                   V(b, u, h * hs + d);
                        dqkv[(b * T + u) * 3 * C + 2 * C + h * hs + d] +=
                            P(b, h, t, u) * dy[(b * T + t) * C + h * hs + d];
                    }
                    r += P(b, h, t, u) * datt[u];
                }
                for (size_t u = 0; u <= t; u++) {
                    const double dsc = P(b, h, t, u) * (datt[u] - r) * sc;
                    for (size_t d = 0; d < hs; d++) {
                        dqkv[(b * T + t) * 3 * C + h * hs + d] +=
                            dsc * K(b, u, h * hs + d);
                        dqkv[(b * T + u) * 3 * C + C + h * hs + d] +=
                            dsc * Q(b, t, h * hs + d);
                    }
                }
            }
        }
#undef Q
#undef K
#undef V
#undef P
}

static void at_run(emu_ctx *ctx, at_case *k, const emu_accum *acc,
                   const emu_rounding *r, bool backward)
{
    emu_attention_opts o = { .accum = acc, .heads = (int)k->H };
    ck_assert_int_eq(emu_t_attention(ctx, "attn", &k->out, &k->att, &k->qkv, &o, r),
                     0);
    if (backward)
        ck_assert_int_eq(emu_t_attention_backward(ctx, "attn", &k->dqkv, &k->dout,
                                                  &k->qkv, &k->att, &o, r), 0);
}

/* binary32 tensors, exact and fast models, against the binary64
 * definition: every stored intermediate (scores, att, G, dS) is a binary32
 * rounding, so the results agree to a few 2^-24 of the magnitudes;
 * 2^-16 (1.5e-5) leaves room and still sees any misplaced term. */
START_TEST(attention_against_binary64)
{
    test_rng g = test_rng_make(0xa701);
    const char *specs[] = { "exact", "fast", "seq" };
    for (int a = 0; a < 3; a++) {
        at_case k;
        at_make(&k, 2, 5, 8, 2, "binary32", &g);
        emu_accum acc = accum_spec(specs[a]);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        at_run(&ctx, &k, &acc, &test_rne, true);
        double *out = malloc(k.out.n * sizeof *out), *att = malloc(k.att.n * sizeof *att);
        double *dq = malloc(k.dqkv.n * sizeof *dq);
        at_ref64(&k, out, att, dq);
        for (size_t j = 0; j < k.out.n; j++)
            EXPECT(fabs(k.out.data[j] - out[j]) <= 0x1p-16 * (1.0 + fabs(out[j])),
                   "%s out[%zu] %.9g, want %.9g", specs[a], j, k.out.data[j], out[j]);
        for (size_t j = 0; j < k.att.n; j++)
            EXPECT(fabs(k.att.data[j] - att[j]) <= 0x1p-20 &&
                   (att[j] != 0.0 || (k.att.data[j] == 0.0 && !signbit(k.att.data[j]))),
                   "%s att[%zu] %.9g, want %.9g", specs[a], j, k.att.data[j], att[j]);
        for (size_t j = 0; j < k.dqkv.n; j++)
            EXPECT(fabs(k.dqkv.data[j] - dq[j]) <= 0x1p-16 * (1.0 + fabs(dq[j])),
                   "%s dqkv[%zu] %.9g, want %.9g", specs[a], j, k.dqkv.data[j], dq[j]);
        free(out);
        free(att);
        free(dq);
        at_free(&k);
    }
}
END_TEST

/* Every site sampled against MPFR in four formats (att, out and dqkv in
 * that format): with the exact model each output is its definition's
 * exact value, from the stored operands, rounded once. */
START_TEST(attention_sampled)
{
    test_rng g = test_rng_make(0xa702);
    emu_accum exact = accum_spec("exact");
    const emu_rnd modes[] = { EMU_RNE, EMU_RNE, EMU_RZ, EMU_RNE };
    for (int f = 0; f < 4; f++) {
        emu_ctx ctx;
        emu_ctx_init(&ctx, 9);
        emu_stats st;
        emu_stats_init(&st);
        ctx.stats = &st;
        ctx.measure = EMU_MEASURE_ALL;
        ctx.ref_rate = 1.0;
        at_case k;
        at_make(&k, 2, 4, 6, 3, fmts4[f], &g);
        emu_rounding r = { .mode = modes[f] };
        at_run(&ctx, &k, &exact, &r, true);
        const char *sites[] = { "attn.scores", "attn.softmax", "attn", "attn.dv",
                                "attn.datt", "attn.dscores", "attn.dq", "attn.dk" };
        const double base = (modes[f] == EMU_RNE ? 0.5 : 1.0) + 0x1p-20;
        check_sites(&st, sites, 1, base);
        check_sites(&st, sites + 2, 6, base);
        /* the softmax against the exact one: its binary32 exponentials and
         * their sum add up to 2^-23 relative, 2^(p-23) ulps of a p-bit
         * format (2 for binary32) */
        check_sites(&st, sites + 1, 1, base + ldexp(1.0, test_format(fmts4[f])->p - 23));
        /* the softmax's masked entries are outputs; the scores' are not */
        ck_assert_uint_eq(emu_stats_find_name(&st, "attn.softmax")->total.results,
                          2 * 3 * 4 * 4);
        ck_assert_uint_eq(emu_stats_find_name(&st, "attn.scores")->total.results,
                          2 * 3 * 10);
        ck_assert(emu_stats_find_name(&st, "attn.dq")->total.dot_samples > 0);
        emu_stats_free(&st);
        at_free(&k);
    }
    /* the fast model sampled too (binary32 GEMMs: a few ulps of binary32) */
    emu_accum fast = accum_spec("fast");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 9);
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    at_case k;
    at_make(&k, 2, 4, 6, 3, "binary32", &g);
    at_run(&ctx, &k, &fast, &test_rne, true);
    const char *sites[] = { "attn.scores", "attn.softmax", "attn", "attn.dv",
                            "attn.datt", "attn.dscores", "attn.dq", "attn.dk" };
    check_sites(&st, sites, 8, 16.0);
    emu_stats_free(&st);
    at_free(&k);
}
END_TEST

/* Central differences of L = sum r out in the entries of qkv (binary32
 * tensors, exact model).  Tolerance: the rounding noise of L(v +- h) over
 * 2h: each out within half an ulp, and the stored scores and att (binary32)
 * move each out by at most about (|out| + max |v|) 2^-23; plus the
 * truncation error (the difference of the central differences at h and
 * 2h) and the gradient's own rounding. */
START_TEST(attention_finite_difference)
{
    test_rng g = test_rng_make(0xa703);
    at_case k;
    at_make(&k, 2, 4, 6, 2, "binary32", &g);
    emu_accum exact = accum_spec("exact");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    at_run(&ctx, &k, &exact, &test_rne, true);
    emu_tensor out2 = mk("y2", "binary32", 2, 4, 6, 0), att2 = mk("a2", "binary32", 2, 2, 4, 4);
    emu_attention_opts o = { .accum = &exact, .heads = 2 };
    double vmax = 0.0;
    for (size_t j = 0; j < k.qkv.n; j++)
        vmax = fmax(vmax, fabs(k.qkv.data[j]));
    double worst = 0.0;
    for (size_t j = 0; j < k.qkv.n; j++) {
        double fd[2], noise = 0.0;
        for (int hh = 0; hh < 2; hh++) {
            const float h = hh ? 0x1p-8f : 0x1p-9f;
            double L[2];
            for (int s = 0; s < 2; s++) {
                float keep = k.qkv.data[j];
                k.qkv.data[j] = keep + (s ? -h : h);
                ck_assert_int_eq(emu_t_attention(&ctx, "a", &out2, &att2, &k.qkv, &o,
                                                 &test_rne), 0);
                k.qkv.data[j] = keep;
                L[s] = 0.0;
                for (size_t q = 0; q < out2.n; q++) {
                    L[s] += (double)k.dout.data[q] * out2.data[q];
                    if (hh == 0)
                        noise += fabs(k.dout.data[q]) * (fabs(out2.data[q]) + vmax) *
                                 0x1p-23;
                }
            }
            fd[hh] = (L[0] - L[1]) / (2.0 * h);
            if (hh == 0)
                noise /= 2.0 * h;
        }
        const double got = k.dqkv.data[j];
        const double tol = noise + fabs(fd[1] - fd[0]) + ldexp(fabs(got), -23) + 1e-12;
        EXPECT(fabs(got - fd[0]) <= tol, "qkv[%zu]: %.9g, fd %.9g (2h: %.9g), tol %.3g",
               j, got, fd[0], fd[1], tol);
        if (fabs(got - fd[0]) / tol > worst)
            worst = fabs(got - fd[0]) / tol;
    }
    ck_assert(worst < 1.0);
    emu_tensor_free(&out2);
    emu_tensor_free(&att2);
    at_free(&k);
}
END_TEST

/* T = 1: att = 1 and out = v, dv = dout, dq = dk = 0; NaN propagation:
 * a NaN in q at time t makes rows t of att and out NaN (and no other); a
 * NaN in k at time t makes every row from t on NaN. */
START_TEST(attention_edges)
{
    test_rng g = test_rng_make(0xa704);
    emu_accum seq = accum_spec("seq");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    at_case k;
    at_make(&k, 2, 1, 4, 2, "binary32", &g);
    at_run(&ctx, &k, &seq, &test_rne, true);
    for (size_t b = 0; b < 2; b++)
        for (size_t c = 0; c < 4; c++) {
            ck_assert(k.out.data[b * 4 + c] == k.qkv.data[b * 12 + 8 + c]);
            ck_assert(k.dqkv.data[b * 12 + 8 + c] == k.dout.data[b * 4 + c]);
            ck_assert(k.dqkv.data[b * 12 + c] == 0.0f &&
                      k.dqkv.data[b * 12 + 4 + c] == 0.0f);
        }
    for (size_t j = 0; j < k.att.n; j++)
        ck_assert(k.att.data[j] == 1.0f);
    at_free(&k);

    at_make(&k, 1, 4, 4, 1, "binary32", &g);
    k.qkv.data[1 * 12 + 2] = NAN; /* q at t = 1 */
    at_run(&ctx, &k, &seq, &test_rne, false);
    for (size_t t = 0; t < 4; t++)
        for (size_t u = 0; u < 4; u++) {
            float a = k.att.data[t * 4 + u];
            ck_assert(u > t ? a == 0.0f : (t == 1) == (bool)isnan(a));
        }
    ck_assert(isnan(k.out.data[4]) && !isnan(k.out.data[0]) && !isnan(k.out.data[8]));
    k.qkv.data[1 * 12 + 2] = 0.5f;
    k.qkv.data[2 * 12 + 4 + 1] = NAN; /* k at t = 2 */
    at_run(&ctx, &k, &seq, &test_rne, false);
    for (size_t t = 0; t < 4; t++)
        ck_assert((t >= 2) == (bool)isnan(k.att.data[t * 4]));
    at_free(&k);
}
END_TEST

START_TEST(attention_refusals)
{
    test_rng g = test_rng_make(0xa705);
    emu_accum seq = accum_spec("seq");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    at_case k;
    at_make(&k, 2, 3, 6, 3, "binary32", &g);
    k.out.data[0] = 99.0f;
    emu_attention_opts o = { .accum = &seq, .heads = 4 };
    ck_assert_int_eq(emu_t_attention(&ctx, "attn", &k.out, &k.att, &k.qkv, &o,
                                     &test_rne), -1);
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    EXPECT(strstr(ctx.err.message, "4 heads"), "message: %s", ctx.err.message);
    o.heads = 0;
    ck_assert_int_eq(emu_t_attention(&ctx, "attn", &k.out, &k.att, &k.qkv, &o,
                                     &test_rne), -1);
    o.heads = 2; /* att is (B, 3, T, T) */
    ck_assert_int_eq(emu_t_attention(&ctx, "attn", &k.out, &k.att, &k.qkv, &o,
                                     &test_rne), -1);
    o.heads = 3;
    o.accum = NULL;
    ck_assert_int_eq(emu_t_attention(&ctx, "attn", &k.out, &k.att, &k.qkv, &o,
                                     &test_rne), -1);
    o.accum = &seq;
    ck_assert_int_eq(emu_t_attention(&ctx, "attn", &k.out, &k.att, &k.qkv, &o,
                                     NULL), -1);
    /* out of the wrong shape; dqkv over qkv */
    ck_assert_int_eq(emu_t_attention(&ctx, "attn", &k.dout, &k.att, &k.qkv, &o,
                                     &test_rne), 0);
    ck_assert_int_eq(emu_t_attention(&ctx, "attn", &k.qkv, &k.att, &k.qkv, &o,
                                     &test_rne), -1);
    ck_assert_int_eq(emu_t_attention_backward(&ctx, "attn", &k.qkv, &k.dout, &k.qkv,
                                              &k.att, &o, &test_rne), -1);
    ck_assert(k.out.data[0] == 99.0f);
    at_free(&k);
}
END_TEST


/* The fast model: with finite operands each product is emu_gemm_fast_f32
 * of an example and a head (att v and att^T dout checked here, rounded once
 * into bfloat16); with a NaN in qkv, the binary64 sums of the defined terms
 * in their order, and the NaN reaches only the outputs whose terms hold it
 * (nothing leaks across the mask as 0 * NaN). */
START_TEST(attention_fast_is_its_definition)
{
    test_rng g = test_rng_make(0xa706);
    const size_t B = 2, T = 7, C = 12, H = 3, hs = 4;
    const emu_format *bf = test_format("bfloat16");
    emu_accum fast = accum_spec("fast");
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    for (int with_nan = 0; with_nan < 2; with_nan++) {
        at_case k;
        at_make(&k, B, T, C, H, "bfloat16", &g);
        for (size_t j = 0; j < k.qkv.n; j++)
            k.qkv.data[j] = rnd_val(&g);
        for (size_t j = 0; j < k.dout.n; j++)
            k.dout.data[j] = rnd_val(&g);
        const size_t nan_t = 4, nan_c = 5; /* v of example 1, time 4, column 5 */
        if (with_nan)
            k.qkv.data[(1 * T + nan_t) * 3 * C + 2 * C + nan_c] = NAN;
        at_run(&ctx, &k, &fast, &test_rne, true);
        float gem[7 * 4], gemv[7 * 4];
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < H; h++) {
                const float *P = k.att.data + (b * H + h) * T * T;
                const float *v = k.qkv.data + b * T * 3 * C + 2 * C + h * hs;
                const float *dy = k.dout.data + b * T * C + h * hs;
                ck_assert_int_eq(emu_gemm_fast_f32(T, hs, T, P, (ptrdiff_t)T, 1, v,
                                                   (ptrdiff_t)(3 * C), 1, NULL, gem), 0);
                ck_assert_int_eq(emu_gemm_fast_f32(T, hs, T, P, 1, (ptrdiff_t)T, dy,
                                                   (ptrdiff_t)C, 1, NULL, gemv), 0);
                for (size_t t = 0; t < T; t++)
                    for (size_t d = 0; d < hs; d++) {
                        const size_t c = h * hs + d;
                        double s = gem[t * hs + d], sv = gemv[t * hs + d];
                        if (with_nan) {
                            s = sv = 0.0;
                            for (size_t u = 0; u <= t; u++)
                                s += (double)P[t * T + u] * v[u * 3 * C + d];
                            for (size_t u = t; u < T; u++)
                                sv += (double)P[u * T + t] * dy[u * C + d];
                            EXPECT((bool)isnan(s) == (b == 1 && c == nan_c && t >= nan_t),
                                   "NaN at (%zu, %zu, %zu)", b, t, c);
                        }
                        emu_status st;
                        double want = emu_ref_convert(bf, s, &test_rne, &st);
                        double wantv = emu_ref_convert(bf, sv, &test_rne, &st);
                        const float got = k.out.data[(b * T + t) * C + c];
                        const float gotv = k.dqkv.data[(b * T + t) * 3 * C + 2 * C + c];
                        EXPECT(test_same(got, want), "nan %d out (%zu, %zu, %zu): %a, "
                               "want %a", with_nan, b, t, c, got, want);
                        EXPECT(test_same(gotv, wantv), "nan %d dv (%zu, %zu, %zu): %a, "
                               "want %a", with_nan, b, t, c, gotv, wantv);
                    }
            }
        at_free(&k);
    }
}
END_TEST


/* What an observer keeps of the attention's products: the values before
 * rounding of each dot-product site, and dS as stored. */
typedef struct at_seen {
    double *hi[6];
    float *ds;
} at_seen;

static const char *const at_sites[6] = { "attn.scores", "attn", "attn.dv",
                                         "attn.datt", "attn.dq", "attn.dk" };

static void at_observe(void *user, const emu_op_event *ev)
{
    at_seen *s = user;
    for (int p = 0; p < 6; p++)
        if (!strcmp(ev->site, at_sites[p])) {
            free(s->hi[p]);
            s->hi[p] = malloc(ev->out->n * sizeof(double));
            memcpy(s->hi[p], ev->hi, ev->out->n * sizeof(double));
        }
    if (!strcmp(ev->site, "attn.dscores")) {
        free(s->ds);
        s->ds = malloc(ev->out->n * sizeof(float));
        memcpy(s->ds, ev->out->data, ev->out->n * sizeof(float));
    }
}

/* Equal bits, or both NaN. */
static bool same_sum(double got, double want)
{
    return isnan(got) ? isnan(want) : !memcmp(&got, &want, sizeof got);
}

/* The fast model with an inf and a NaN in qkv: every product's values
 * before rounding, bit for bit, are the binary64 sums of the defined
 * terms in their order (times s for the scores, dq and dk), from the
 * operands as stored (att, and dS as the dscores commit stored it).  The
 * sums run in vector lanes compiled for each instruction-set level, which
 * must not change a bit: odd T and hs leave every loop a remainder. */
START_TEST(attention_fast_nonfinite_sums)
{
    test_rng g = test_rng_make(0xa70f);
    const size_t B = 2, T = 19, C = 24, H = 2, hs = 12, C3 = 3 * C;
    emu_accum fast = accum_spec("fast");
    at_case k;
    at_make(&k, B, T, C, H, "binary32", &g);
    k.qkv.data[(1 * T + 4) * C3 + 2 * C + 5] = NAN;   /* v, example 1 */
    k.qkv.data[(0 * T + 3) * C3 + 1] = INFINITY;      /* q, example 0 */
    at_seen seen;
    memset(&seen, 0, sizeof seen);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ctx.observer = at_observe;
    ctx.observer_user = &seen;
    at_run(&ctx, &k, &fast, &test_rne, true);
    for (int p = 0; p < 6; p++)
        ck_assert_msg(seen.hi[p] != NULL, "no values seen at %s", at_sites[p]);
    ck_assert(seen.ds != NULL);
    const double s = 1.0 / sqrt((double)hs);
    const size_t tri = T * (T + 1) / 2;
    const float *x = k.qkv.data, *dy = k.dout.data;
#define Q(b, t, c) ((double)x[((b) * T + (t)) * C3 + (c)])
#define K(b, t, c) ((double)x[((b) * T + (t)) * C3 + C + (c)])
#define V(b, t, c) ((double)x[((b) * T + (t)) * C3 + 2 * C + (c)])
#define DY(b, t, c) ((double)dy[((b) * T + (t)) * C + (c)])
#define P(t, u) ((double)k.att.data[((b * H + h) * T + (t)) * T + (u)])
#define DS(t, u) ((double)seen.ds[(b * H + h) * tri + (t) * ((t) + 1) / 2 + (u)])
    size_t nan = 0, bad = 0;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t t = 0; t < T; t++) {
                for (size_t u = 0; u <= t; u++) { /* scores and G */
                    double sc = 0.0, gg = 0.0;
                    for (size_t d = 0; d < hs; d++) {
                        sc += Q(b, t, h * hs + d) * K(b, u, h * hs + d);
                        gg += DY(b, t, h * hs + d) * V(b, u, h * hs + d);
                    }
                    const size_t o = (b * H + h) * tri + t * (t + 1) / 2 + u;
                    bad += !same_sum(seen.hi[0][o], sc * s);
                    bad += !same_sum(seen.hi[3][o], gg);
                    nan += isnan(sc) + isnan(gg);
                }
                for (size_t d = 0; d < hs; d++) { /* out, dv, dq, dk */
                    const size_t c = h * hs + d, o = (b * T + t) * C + c;
                    double y = 0.0, dv = 0.0, dq = 0.0, dk = 0.0;
                    for (size_t u = 0; u <= t; u++) {
                        y += P(t, u) * V(b, u, c);
                        dq += DS(t, u) * K(b, u, c);
                    }
                    for (size_t u = t; u < T; u++) {
                        dv += P(u, t) * DY(b, u, c);
                        dk += DS(u, t) * Q(b, u, c);
                    }
                    bad += !same_sum(seen.hi[1][o], y);
                    bad += !same_sum(seen.hi[2][o], dv);
                    bad += !same_sum(seen.hi[4][o], dq * s);
                    bad += !same_sum(seen.hi[5][o], dk * s);
                    nan += isnan(y) + isnan(dv) + isnan(dq) + isnan(dk);
                }
            }
#undef Q
#undef K
#undef V
#undef DY
#undef P
#undef DS
    EXPECT(bad == 0, "%zu values differ from their sums (%s)", bad,
           emu_isa_name(emu_isa_active()));
    EXPECT(nan > 0 && nan < 3 * B * T * C, "%zu NaN sums: the case should "
           "hold some, not only", nan);
    for (int p = 0; p < 6; p++)
        free(seen.hi[p]);
    free(seen.ds);
    at_free(&k);
}
END_TEST


/* ---- unmeasured runs ---------------------------------------------------------- */


/* With nothing measured, binary32 outputs under nearest-even are written
 * by the host's conversion (emu_commit_direct): bit for bit what the
 * measured commit writes, NaN rows, subnormal and overflowing results
 * included, and the op index advances alike. */
START_TEST(unmeasured_is_bit_identical)
{
    const char *specs[] = { "fast", "exact" };
    for (int a = 0; a < 2; a++) {
        emu_accum acc = accum_spec(specs[a]);
        emu_tensor res[2][9];
        uint64_t index[2];
        for (int m = 0; m < 2; m++) {
            test_rng g = test_rng_make(0xd1);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 4);
            emu_stats st;
            emu_stats_init(&st);
            if (m) {
                ctx.stats = &st;
                ctx.measure = EMU_MEASURE_ALL;
            }
            ln_case k;
            ln_make(&k, 5, 8, "binary32", &g);
            k.x.data[3 * 8 + 2] = NAN;
            for (size_t d = 0; d < 8; d++) /* a row of tiny spread: y subnormal */
                k.x.data[8 + d] = 1.0f + (float)d * 0x1p-23f;
            k.gamma.data[1] = 0x1p-140f;
            k.beta.data[5] = 3e38f;
            k.beta.data[6] = -3.4e38f;
            emu_layernorm_opts o = { .accum = &acc, .eps = 1e-5 };
            ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                             &k.gamma, &k.beta, &o, &test_rne), 0);
            ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &k.dx, &k.dg, &k.db,
                                                      &k.dy, &k.x, &k.mean, &k.rstd,
                                                      &k.gamma, &o, &test_rne), 0);
            at_case c;
            at_make(&c, 2, 5, 6, 2, "binary32", &g);
            c.qkv.data[7] = 60.0f; /* a large score */
            if (a == 0)
                c.qkv.data[2 * 18 + 13] = NAN;
            emu_attention_opts ao = { .accum = &acc, .heads = 2 };
            ck_assert_int_eq(emu_t_attention(&ctx, "at", &c.out, &c.att, &c.qkv, &ao,
                                             &test_rne), 0);
            ck_assert_int_eq(emu_t_attention_backward(&ctx, "at", &c.dqkv, &c.dout,
                                                      &c.qkv, &c.att, &ao, &test_rne), 0);
            emu_tensor dt = mk("dt", "binary32", 3, 8, 0, 0);
            int32_t idx[5] = { 2, 0, 2, 2, 1 };
            emu_embedding_opts eo = { .accum = &acc };
            ck_assert_int_eq(emu_t_embedding_backward(&ctx, "e", &dt, &k.y, idx, 5, &eo,
                                                      &test_rne), 0);
            emu_tensor *keep[9] = { &k.y, &k.mean, &k.rstd, &k.dx, &k.dg, &k.db,
                                    &c.att, &c.dqkv, &dt };
            for (int i = 0; i < 9; i++) {
                res[m][i] = *keep[i];
                keep[i]->data = NULL; /* kept: freed below */
                keep[i]->owns_data = false;
            }
            for (int i = 0; i < 9; i++)
                res[m][i].owns_data = true;
            emu_tensor_free(&c.out);
            index[m] = ctx.op_index;
            ln_free(&k);
            at_free(&c);
            emu_stats_free(&st);
        }
        ck_assert_uint_eq(index[0], index[1]);
        for (int i = 0; i < 9; i++) {
            for (size_t j = 0; j < res[0][i].n; j++) {
                uint32_t u0, u1;
                memcpy(&u0, &res[0][i].data[j], 4);
                memcpy(&u1, &res[1][i].data[j], 4);
                EXPECT(u0 == u1, "%s: %s[%zu] differs: %08x unmeasured, %08x "
                       "measured", specs[a], res[0][i].name, j, (unsigned)u0,
                       (unsigned)u1);
            }
            emu_tensor_free(&res[0][i]);
            emu_tensor_free(&res[1][i]);
        }
    }
}
END_TEST


/* The emulated models run through the GEMM engine: each output of att v
 * and of att^T dout is emu_accum_dot of its defined terms, with the
 * stochastic words of dot product number = its output index in the
 * stream op_index ^ 2^63 of its commit. */
START_TEST(attention_emulated_is_accum_dot)
{
    const char *specs[] = { "seq,acc=bfloat16,mode=sr", "blocked,acc=binary16,block=3",
                            "fused,acc=bfloat16,k=4,w=12" };
    const size_t B = 2, T = 6, C = 8, H = 2, hs = 4;
    for (int a = 0; a < 3; a++) {
        test_rng g = test_rng_make(0xa707);
        at_case k;
        at_make(&k, B, T, C, H, "binary32", &g);
        for (size_t j = 0; j < k.qkv.n; j++)
            k.qkv.data[j] = rnd_val(&g);
        emu_accum acc = accum_spec(specs[a]);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 77);
        const uint64_t tag = (uint64_t)1 << 63;
        const uint64_t fwd = ctx.op_index; /* scores, softmax, out */
        at_run(&ctx, &k, &acc, &test_rne, false);
        /* again from op index fwd, then the backward (dv: fwd + 3) */
        emu_tensor out1 = mk("o1", "binary32", B, T, C, 0);
        emu_attention_opts o = { .accum = &acc, .heads = (int)H };
        ctx.op_index = fwd;
        ck_assert_int_eq(emu_t_attention(&ctx, "attn", &out1, &k.att, &k.qkv, &o,
                                         &test_rne), 0);
        ck_assert_int_eq(emu_t_attention_backward(&ctx, "attn", &k.dqkv, &k.dout,
                                                  &k.qkv, &k.att, &o, &test_rne), 0);
        const uint64_t s_out = (fwd + 2) ^ tag, s_dv = (fwd + 3) ^ tag;
        for (size_t b = 0; b < B; b++)
            for (size_t t = 0; t < T; t++)
                for (size_t c = 0; c < C; c++) {
                    const size_t h = c / hs, i = (b * T + t) * C + c;
                    const float *P = k.att.data + (b * H + h) * T * T;
                    emu_accum_rng r1 = { 77, s_out, i }, r2 = { 77, s_dv, i };
                    double lo1, lo2;
                    double v1 = emu_accum_dot(&lo1, NULL, &acc, P + t * T, 1,
                                              k.qkv.data + b * T * 3 * C + 2 * C + c,
                                              (ptrdiff_t)(3 * C), t + 1, &r1);
                    double v2 = emu_accum_dot(&lo2, NULL, &acc, P + t * T + t,
                                              (ptrdiff_t)T,
                                              k.dout.data + (b * T + t) * C + c,
                                              (ptrdiff_t)C, T - t, &r2);
                    emu_status st;
                    double w1 = emu_round2(test_format("binary32"), v1, lo1, &test_rne, &st);
                    double w2 = emu_round2(test_format("binary32"), v2, lo2, &test_rne, &st);
                    EXPECT(test_same(out1.data[i], w1), "%s out[%zu]: %a, want %a",
                           specs[a], i, out1.data[i], w1);
                    const float dv = k.dqkv.data[(b * T + t) * 3 * C + 2 * C + c];
                    EXPECT(test_same(dv, w2), "%s dv[%zu]: %a, want %a", specs[a], i,
                           dv, w2);
                }
        emu_tensor_free(&out1);
        at_free(&k);
    }
}
END_TEST


/* The fast model's layer norm is its definition: binary64 sums in their
 * order (rows' columns ascending, columns' rows ascending), each value
 * rounded once. */
START_TEST(layernorm_fast_is_its_definition)
{
    test_rng g = test_rng_make(0x1a06);
    ln_case k;
    ln_make(&k, 11, 16, "binary32", &g); /* 11 rows: a block of 8 and 3 more */
    for (size_t j = 0; j < k.x.n; j++)
        k.x.data[j] = rnd_val(&g);
    emu_accum fast = accum_spec("fast");
    emu_layernorm_opts o = { .accum = &fast, .eps = 1e-5 };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_layernorm(&ctx, "ln", &k.y, &k.mean, &k.rstd, &k.x,
                                     &k.gamma, &k.beta, &o, &test_rne), 0);
    ck_assert_int_eq(emu_t_layernorm_backward(&ctx, "ln", &k.dx, &k.dg, &k.db, &k.dy,
                                              &k.x, &k.mean, &k.rstd, &k.gamma, &o,
                                              &test_rne), 0);
    const size_t N = 11, D = 16;
    const float *x = k.x.data, *dy = k.dy.data, *ga = k.gamma.data;
    for (size_t i = 0; i < N; i++) {
        double s = 0.0, v = 0.0, s1 = 0.0, s2 = 0.0;
        for (size_t d = 0; d < D; d++)
            s += x[i * D + d];
        EXPECT(k.mean.data[i] == (float)(s / 16.0), "mean %zu", i);
        for (size_t d = 0; d < D; d++) {
            const float c = (float)((double)x[i * D + d] - k.mean.data[i]);
            v += (double)c * c;
        }
        const float var = (float)(v / 16.0);
        EXPECT(k.rstd.data[i] == (float)(1.0 / sqrt((double)var + 1e-5)), "rstd %zu", i);
        const double mu = k.mean.data[i], rs = k.rstd.data[i];
        for (size_t d = 0; d < D; d++) {
            const float h = (float)(((double)x[i * D + d] - mu) * rs);
            s1 += (double)dy[i * D + d] * ga[d];
            s2 += (double)dy[i * D + d] * (float)((double)ga[d] * h);
        }
        for (size_t d = 0; d < D; d++) {
            const double xh = ((double)x[i * D + d] - mu) * rs;
            const double want = rs * ((double)dy[i * D + d] * ga[d] - s1 * (1.0 / 16.0) -
                                      xh * (s2 * (1.0 / 16.0)));
            EXPECT(k.dx.data[i * D + d] == (float)want, "dx (%zu, %zu): %a, want %a",
                   i, d, k.dx.data[i * D + d], (float)want);
        }
    }
    for (size_t d = 0; d < D; d++) {
        double sb = 0.0, sg = 0.0;
        for (size_t i = 0; i < N; i++) {
            const float h = (float)(((double)x[i * D + d] - k.mean.data[i]) *
                                    k.rstd.data[i]);
            sb += dy[i * D + d];
            sg += (double)dy[i * D + d] * h;
        }
        EXPECT(k.db.data[d] == (float)sb && k.dg.data[d] == (float)sg, "column %zu", d);
    }
    ln_free(&k);
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
    tc = tcase_create("layernorm");
    tcase_add_test(tc, layernorm_sampled);
    tcase_add_test(tc, layernorm_narrow_accumulator);
    tcase_add_test(tc, layernorm_finite_difference);
    tcase_add_test(tc, layernorm_fast_and_edges);
    tcase_add_test(tc, layernorm_fast_is_its_definition);
    tcase_add_test(tc, layernorm_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("attention");
    tcase_add_test(tc, attention_against_binary64);
    tcase_add_test(tc, attention_sampled);
    tcase_add_test(tc, attention_finite_difference);
    tcase_add_test(tc, attention_edges);
    tcase_add_test(tc, attention_fast_is_its_definition);
    tcase_add_test(tc, attention_fast_nonfinite_sums);
    tcase_add_test(tc, attention_emulated_is_accum_dot);
    tcase_add_test(tc, attention_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("unmeasured");
    tcase_add_test(tc, unmeasured_is_bit_identical);
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
