/*
 * test_threads.c — ctx->threads changes the speed, never the bits.
 *
 * The choke point's chunks on several threads (each part with its own
 * counts, histogram tables and swamping counts, merged in part order)
 * against the same commit on one thread: every result and every field of
 * the site's statistics equal, on sizes around the chunk and part
 * boundaries, under nearest-even and stochastic rounding, through arrays
 * and both kinds of producer.  And the fast model's GEMM split into row
 * blocks against the one sgemm call, bit for bit, on shapes just above
 * the split's threshold, where OpenBLAS's small-matrix kernels would
 * change the summation order if a block were too small.  And the
 * convolution's weight gradient, whose im2row, transpose and bias sums run
 * in parts, and max pooling's backward pass (checks, scatter, commit),
 * against one thread.
 */
#define _POSIX_C_SOURCE 200809L /* fork, waitpid */

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <emu/extend.h>
#include <emu/ops.h>
#include <emu/rng.h>

#include "internal.h"
#include "ops_internal.h"
#include "testutil.h"

enum { CH = EMU_COMMIT_CHUNK };

/* Sizes around the boundaries: a part needs 8 chunks, so 2 parts start at
 * 16 chunks, 3 at 24; chunk-sized, one over, one under, and odd. */
static const size_t sizes[] = { 16 * CH - 1, 16 * CH,      16 * CH + 1,
                                24 * CH - 1, 24 * CH + 17, 40 * CH + 513,
                                100003 };

/* A value for output i: every binade of binary32 and beyond it, zeros,
 * infinities and NaNs now and then, most of them with a low part. */
static void value_at(uint64_t seed, size_t i, double *hi, double *lo)
{
    const uint64_t w = emu_random64(seed, 77, i);
    const int e = (int)(w % 300) - 160;
    const double m = 1.0 + (double)(w >> 12) * 0x1p-52;
    *hi = ldexp((w >> 11) & 1 ? -m : m, e);
    *lo = ((w >> 5) & 3) ? ldexp(*hi, -30 - (int)((w >> 7) & 31)) : 0.0;
    switch ((w >> 20) % 97) {
    case 0: *hi = NAN; *lo = 0.0; break;
    case 1: *hi = INFINITY; *lo = 0.0; break;
    case 2: *hi = 0.0; *lo = 0.0; break;
    case 3: *hi = ldexp(1.0, e); break; /* a power of two with a low part */
    default: break;
    }
}

typedef struct src {
    uint64_t seed;
    const float *old;  /* swamping: the accumulator's old values */
    const double *add; /* and the addends */
} src;

/* Low parts in odd chunks only: both kinds of chunk in one commit. */
static int fill(const void *op, size_t i0, size_t m, double *hi, double *lo)
{
    const src *s = op;
    const bool with_lo = (i0 / CH) & 1;
    for (size_t j = 0; j < m; j++) {
        value_at(s->seed, i0 + j, &hi[j], &lo[j]);
        if (s->old) {
            hi[j] = (double)s->old[i0 + j] + s->add[i0 + j];
            lo[j] = 0.0;
        }
    }
    return with_lo && !s->old;
}

static void fill32(const void *op, size_t i0, size_t m, float *v)
{
    const src *s = op;
    for (size_t j = 0; j < m; j++) {
        double h, l;
        value_at(s->seed, i0 + j, &h, &l);
        v[j] = (float)h;
    }
}

static bool had_nan(const void *op, size_t i)
{
    (void)op;
    return i % 3 == 0;
}

typedef enum { VIA_ARRAYS, VIA_FILL, VIA_FILL32, VIA_SWAMP } via;

/* Commits n values into format f under mode on `threads` threads: the
 * results into *y, the statistics into *stats. */
static void commit_n(const emu_format *f, emu_rnd mode, via how, size_t n,
                     int threads, emu_tensor *y, emu_stats *stats)
{
    emu_error err;
    ck_assert_msg(emu_tensor_alloc(y, "y", EMU_ROLE_OTHER, f, 1, &n, &err) == 0,
                  "%s", err.message);
    emu_stats_init(stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 11);
    ctx.stats = stats;
    ctx.threads = threads;
    const emu_rounding rnd = { .mode = mode };
    src s = { .seed = 5 };
    double *hi = NULL, *lo = NULL, *add = NULL;
    float *old = NULL;
    emu_op_out o = { .site = "t", .kind = "test", .out = y, .op = &s,
                     .rnd = &rnd, .inputs_had_nan = had_nan,
                     .parallel = true, .store_early = true };
    switch (how) {
    case VIA_ARRAYS:
        hi = malloc(n * sizeof *hi);
        lo = malloc(n * sizeof *lo);
        ck_assert(hi && lo);
        for (size_t i = 0; i < n; i++)
            value_at(s.seed, i, &hi[i], &lo[i]);
        o.hi = hi;
        o.lo = lo;
        /* arrays without callbacks run in parts without the flag */
        o.inputs_had_nan = NULL;
        o.parallel = false;
        break;
    case VIA_FILL:
        o.fill = fill;
        break;
    case VIA_FILL32:
        o.fill32 = fill32;
        break;
    case VIA_SWAMP:
        old = malloc(n * sizeof *old);
        add = malloc(n * sizeof *add);
        ck_assert(old && add);
        for (size_t i = 0; i < n; i++) {
            double h, l;
            value_at(s.seed, i, &h, &l);
            old[i] = isfinite(h) ? (float)ldexp(h, -(int)(i % 40)) : 1.0f;
            add[i] = isfinite(h) ? (double)(float)ldexp(h, -(int)(i % 29) - 8)
                                 : 0.0;
        }
        s.old = old;
        s.add = add;
        o.fill = fill;
        o.acc_old = old;
        o.addend = add;
        break;
    }
    const int parts = emu_commit_parts_(&ctx, &o);
    /* every size here has chunks for two parts at least */
    const size_t most = (n + CH - 1) / CH / 8;
    const int want = (size_t)threads < most ? threads : (int)most;
    ck_assert_msg(parts == want && (threads == 1 || parts > 1),
                  "n %zu threads %d: %d parts", n, threads, parts);
    ck_assert_msg(emu_commit(&ctx, &o) == 0, "%s", ctx.err.message);
    free(hi);
    free(lo);
    free(old);
    free(add);
}

static void same_commit(const char *fmt, emu_rnd mode, via how)
{
    const emu_format *f = test_format(fmt);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        const size_t n = sizes[k];
        emu_tensor y1;
        emu_stats s1;
        commit_n(f, mode, how, n, 1, &y1, &s1);
        const emu_site_stats *t1 = &emu_stats_find_name(&s1, "t")->total;
        ck_assert_uint_eq(t1->results, n);
        for (int threads = 2; threads <= 3; threads++) {
            emu_tensor y;
            emu_stats s;
            commit_n(f, mode, how, n, threads, &y, &s);
            ck_assert_msg(memcmp(y.data, y1.data, n * sizeof *y.data) == 0,
                          "%s mode %d via %d n %zu threads %d: results differ",
                          fmt, (int)mode, (int)how, n, threads);
            const emu_site_stats *t = &emu_stats_find_name(&s, "t")->total;
            ck_assert_msg(memcmp(t, t1, sizeof *t) == 0,
                          "%s mode %d via %d n %zu threads %d: statistics "
                          "differ (inexact %llu vs %llu, nan %llu vs %llu, "
                          "absorbed %llu vs %llu)",
                          fmt, (int)mode, (int)how, n, threads,
                          (unsigned long long)t->inexact,
                          (unsigned long long)t1->inexact,
                          (unsigned long long)t->nan,
                          (unsigned long long)t1->nan,
                          (unsigned long long)t->absorbed,
                          (unsigned long long)t1->absorbed);
            emu_stats_free(&s);
            emu_tensor_free(&y);
        }
        emu_stats_free(&s1);
        emu_tensor_free(&y1);
    }
}

START_TEST(test_commit_threads_arrays)
{
    same_commit("binary16", EMU_RNE, VIA_ARRAYS);
    same_commit("binary16", EMU_RS, VIA_ARRAYS);
    same_commit("binary32", EMU_RNE, VIA_ARRAYS);
    same_commit("e4m3", EMU_RZ, VIA_ARRAYS);
}
END_TEST

START_TEST(test_commit_threads_fill)
{
    same_commit("binary16", EMU_RNE, VIA_FILL);
    same_commit("bfloat16", EMU_RS, VIA_FILL);
    same_commit("binary32", EMU_RNE, VIA_FILL);
    same_commit("binary32", EMU_RS, VIA_FILL);
}
END_TEST

START_TEST(test_commit_threads_fill32)
{
    same_commit("binary32", EMU_RNE, VIA_FILL32);
    same_commit("binary16", EMU_RNE, VIA_FILL32);
    same_commit("e5m2", EMU_RS, VIA_FILL32);
}
END_TEST

START_TEST(test_commit_threads_swamp)
{
    same_commit("binary32", EMU_RNE, VIA_SWAMP);
    same_commit("bfloat16", EMU_RNE, VIA_SWAMP);
    same_commit("binary16", EMU_RS, VIA_SWAMP);
    /* the swamping counts must have had something to count */
    emu_tensor y;
    emu_stats s;
    commit_n(test_format("bfloat16"), EMU_RNE, VIA_SWAMP, 100003, 2, &y, &s);
    const emu_site_stats *t = &emu_stats_find_name(&s, "t")->total;
    ck_assert_uint_gt(t->adds, 0);
    ck_assert_uint_gt(t->absorbed, 0);
    emu_stats_free(&s);
    emu_tensor_free(&y);
}
END_TEST

static int no_ref(const void *op, size_t i, mpfr_ptr exact, mpfr_ptr xsrc)
{
    (void)op, (void)i, (void)exact, (void)xsrc;
    return -1;
}

/* Without the flag a producer's chunks stay on one thread, and so do all
 * chunks while MPFR samples (its error sums are doubles). */
START_TEST(test_commit_threads_opt_in)
{
    emu_tensor y;
    const size_t n = 64 * CH;
    emu_error err;
    ck_assert(emu_tensor_alloc(&y, "y", EMU_ROLE_OTHER,
                               test_format("binary16"), 1, &n, &err) == 0);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ctx.threads = 4;
    const emu_rounding rnd = { .mode = EMU_RNE };
    src s = { .seed = 1 };
    emu_op_out o = { .site = "t", .out = &y, .op = &s, .rnd = &rnd,
                     .fill = fill };
    ck_assert_int_eq(emu_commit_parts_(&ctx, &o), 1);
    o.parallel = true;
    ck_assert_int_eq(emu_commit_parts_(&ctx, &o), 4);
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    ctx.measure |= EMU_MEASURE_REF;
    ctx.ref_rate = 0.5;
    o.ref = no_ref;
    ck_assert_int_eq(emu_commit_parts_(&ctx, &o), 1);
    emu_stats_free(&st);
    emu_tensor_free(&y);
}
END_TEST

/* ---- the fast GEMM's row blocks --------------------------------------- */

static float rnd_float(uint64_t i)
{
    const uint64_t w = emu_random64(3, 9, i);
    return (float)(((double)(w >> 11) * 0x1p-53 - 0.5) *
                   ldexp(1.0, (int)(w % 7) - 3));
}

START_TEST(test_fast_threads_are_one_sgemm)
{
    /* M, N, K: the MLP's and CNN's shapes, odd ones, some just past the
     * split's threshold (blocks of 10^6 + 1 multiply-adds or a little
     * more: OpenBLAS's small-matrix kernels take 10^6 and fewer) */
    static const size_t shapes[][3] = {
        { 64, 256, 784 }, { 256, 784, 64 }, { 64, 784, 256 },
        { 64, 128, 256 }, { 128, 256, 64 }, { 256, 128, 64 },
        { 64, 256, 128 }, { 40, 250, 201 }, { 18, 1000, 112 },
        { 64, 64, 490 }, { 6, 1000, 334 }, { 4, 7, 142858 },
        { 33, 300, 500 }, { 97, 211, 301 }, { 8, 500, 1001 },
        { 1000, 63, 65 }, { 5, 1000, 1000 }, { 129, 129, 257 },
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b);
        float *one = malloc(M * N * sizeof *one), *thr = malloc(M * N * sizeof *thr);
        double *c = malloc(M * N * sizeof *c);
        ck_assert(a && b && one && thr && c);
        for (size_t i = 0; i < M * K; i++)
            a[i] = rnd_float(i);
        for (size_t i = 0; i < K * N; i++)
            b[i] = rnd_float(M * K + i);
        for (size_t i = 0; i < M * N; i++)
            c[i] = rnd_float(7 * i + 1);
        for (int layout = 0; layout < 4; layout++) {
            const bool ta = layout & 1, tb = layout & 2;
            const ptrdiff_t a_rs = ta ? 1 : (ptrdiff_t)K, a_cs = ta ? (ptrdiff_t)M : 1;
            const ptrdiff_t b_rs = tb ? 1 : (ptrdiff_t)N, b_cs = tb ? (ptrdiff_t)K : 1;
            const double *cc = layout == 3 ? c : NULL;
            ck_assert_int_eq(emu_gemm_fast_f32(M, N, K, a, a_rs, a_cs, b, b_rs,
                                               b_cs, cc, one), 0);
            for (int threads = 2; threads <= 4; threads++) {
                const int parts = emu_fast_split_parts(M, N, K, threads);
                ck_assert((double)parts * emu_fast_split_min() <=
                          (double)M * (double)(N * K));
                /* where any row may start a block (SkylakeX's kernels),
                 * every shape here splits in two */
                if (threads == 2 && emu_fast_row_granule() == 1)
                    ck_assert_msg(parts == 2, "%zux%zux%zu: %d parts", M, N, K,
                                  parts);
                memset(thr, 0xff, M * N * sizeof *thr);
                ck_assert_int_eq(emu_gemm_fast_f32_mt(M, N, K, a, a_rs, a_cs, b,
                                                      b_rs, b_cs, cc, thr,
                                                      threads), 0);
                ck_assert_msg(memcmp(one, thr, M * N * sizeof *one) == 0,
                              "%zux%zux%zu layout %d threads %d: bits differ",
                              M, N, K, layout, threads);
                /* the NaN answer of the parts' scans: none here, then a
                 * NaN in A's last row (the last block's) */
                bool nan = true;
                ck_assert_int_eq(emu_gemm_fast_f32_mt_nan(M, N, K, a, a_rs,
                                                          a_cs, b, b_rs, b_cs,
                                                          cc, thr, threads,
                                                          &nan), 0);
                ck_assert(!nan && memcmp(one, thr, M * N * sizeof *one) == 0);
                float *last = a + (M - 1) * (size_t)a_rs + (K / 2) * (size_t)a_cs;
                const float keep = *last;
                *last = NAN;
                ck_assert_int_eq(emu_gemm_fast_f32_mt_nan(M, N, K, a, a_rs,
                                                          a_cs, b, b_rs, b_cs,
                                                          cc, thr, threads,
                                                          &nan), 0);
                *last = keep;
                ck_assert(nan && emu_any_nan(thr, M * N));
            }
        }
        free(a);
        free(b);
        free(one);
        free(thr);
        free(c);
    }
    /* too small for two blocks: one call */
    ck_assert_int_eq(emu_fast_split_parts(64, 10, 128, 8), 1);
    ck_assert_int_eq(emu_fast_split_parts(2, 1000, 1000, 2), 1);
    if (emu_fast_split_min() == EMU_FAST_SPLIT_MACS) /* small kernels */
        ck_assert_int_eq(emu_fast_split_parts(64, 125, 250, 2), 1);
    else /* none: blocks of 28 rows or more (875,000 terms) do */
        ck_assert_int_eq(emu_fast_split_parts(64, 125, 250, 2), 2);
    ck_assert_int_eq(emu_fast_split_parts(64, 10, 128, 2), 1);
}
END_TEST

/* The convolution's weight gradient (im2row and dy's transpose in parts,
 * a part's last row through a row of its own; the bias sums one channel
 * per part): dw, dbias and both sites' statistics those of one thread,
 * with kernel widths whose rows are copied with slack (3, 5, 7). */
static void conv_bwdw(const size_t *sh, int threads, const emu_accum *acc,
                      emu_tensor *dw, emu_tensor *db, emu_stats *st)
{
    const size_t N = sh[0], Ci = sh[1], H = sh[2], W = sh[3], Co = sh[4],
                 k = sh[5], stride = sh[6], pad = sh[7];
    const size_t Ho = (H + 2 * pad - k) / stride + 1;
    const size_t Wo = (W + 2 * pad - k) / stride + 1;
    const emu_format *f = test_format("binary32");
    emu_error err;
    emu_tensor x, dy;
    ck_assert(emu_tensor_alloc4(&x, "x", EMU_ROLE_ACTIVATION, f, N, Ci, H, W,
                                &err) == 0);
    ck_assert(emu_tensor_alloc4(&dy, "dy", EMU_ROLE_ACT_GRAD, f, N, Co, Ho, Wo,
                                &err) == 0);
    ck_assert(emu_tensor_alloc4(dw, "dw", EMU_ROLE_WEIGHT_GRAD, f, Co, Ci, k, k,
                                &err) == 0);
    ck_assert(emu_tensor_alloc(db, "db", EMU_ROLE_WEIGHT_GRAD, f, 1, &Co,
                               &err) == 0);
    for (size_t i = 0; i < x.n; i++)
        x.data[i] = (float)ldexp((double)(emu_random64(3, 1, i) >> 40), -20) - 8.0f;
    for (size_t i = 0; i < dy.n; i++)
        dy.data[i] = (float)ldexp((double)(emu_random64(3, 2, i) >> 40), -30) - 0.0078125f;
    emu_stats_init(st);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 11);
    ctx.stats = st;
    ctx.threads = threads;
    const emu_rounding rnd = { .mode = EMU_RNE };
    const emu_conv_opts o = { .accum = acc, .stride = (int)stride,
                              .pad = (int)pad };
    ck_assert_msg(emu_t_conv2d_backward_weights(&ctx, "c", dw, db, &dy, &x, &o,
                                                &rnd) == 0,
                  "%s", ctx.err.message);
    emu_tensor_free(&x);
    emu_tensor_free(&dy);
}

START_TEST(test_conv_weight_grad_threads)
{
    /* N, Ci, H, W, Co, k, stride, pad: the CNN's two layers, odd ones */
    static const size_t shapes[][8] = {
        { 64, 1, 28, 28, 6, 5, 1, 2 }, { 64, 6, 14, 14, 16, 5, 1, 0 },
        { 9, 3, 17, 19, 5, 3, 1, 1 },  { 7, 2, 23, 21, 3, 7, 2, 3 },
        { 33, 4, 12, 12, 7, 1, 1, 0 },
    };
    emu_accum fast, seq;
    emu_accum_default(&fast);
    fast.kind = EMU_ACCUM_FAST;
    emu_accum_default(&seq);
    const emu_accum *accs[2] = { &fast, &seq };
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
        for (int a = 0; a < 2; a++) {
            emu_tensor dw1, db1;
            emu_stats s1;
            conv_bwdw(shapes[k], 1, accs[a], &dw1, &db1, &s1);
            for (int threads = 2; threads <= 3; threads++) {
                emu_tensor dw, db;
                emu_stats s;
                conv_bwdw(shapes[k], threads, accs[a], &dw, &db, &s);
                ck_assert_msg(memcmp(dw.data, dw1.data, dw.n * sizeof *dw.data) == 0 &&
                                  memcmp(db.data, db1.data, db.n * sizeof *db.data) == 0,
                              "shape %zu accum %d threads %d: results differ",
                              k, a, threads);
                const char *sites[2] = { "c", "c.dbias" };
                for (int q = 0; q < 2; q++) {
                    const emu_site *e1 = emu_stats_find_name(&s1, sites[q]);
                    const emu_site *e = emu_stats_find_name(&s, sites[q]);
                    ck_assert(e1 && e);
                    ck_assert_msg(memcmp(&e->total, &e1->total, sizeof e->total) == 0,
                                  "shape %zu accum %d threads %d: %s's "
                                  "statistics differ", k, a, threads, sites[q]);
                }
                emu_stats_free(&s);
                emu_tensor_free(&dw);
                emu_tensor_free(&db);
            }
            emu_stats_free(&s1);
            emu_tensor_free(&dw1);
            emu_tensor_free(&db1);
        }
}
END_TEST

/* Max pooling's backward pass (argmax checked and scattered by planes,
 * committed in parts when one value reaches each input): dx and the
 * site's statistics those of one thread, with NaN and -0 among dy, under
 * binary16 (inexact, overflow), windows apart and overlapping. */
static void maxpool_bwd(const size_t *sh, int threads, emu_tensor *dx,
                        emu_stats *st)
{
    const size_t N = sh[0], C = sh[1], H = sh[2], W = sh[3], k = sh[4],
                 stride = sh[5];
    const size_t Ho = (H - k) / stride + 1, Wo = (W - k) / stride + 1;
    const emu_format *f32 = test_format("binary32");
    const emu_format *f16 = test_format("binary16");
    emu_error err;
    emu_tensor x, y, dy;
    ck_assert(emu_tensor_alloc4(&x, "x", EMU_ROLE_ACTIVATION, f32, N, C, H, W,
                                &err) == 0);
    ck_assert(emu_tensor_alloc4(&y, "y", EMU_ROLE_ACTIVATION, f32, N, C, Ho, Wo,
                                &err) == 0);
    ck_assert(emu_tensor_alloc4(&dy, "dy", EMU_ROLE_ACT_GRAD, f32, N, C, Ho, Wo,
                                &err) == 0);
    ck_assert(emu_tensor_alloc4(dx, "dx", EMU_ROLE_ACT_GRAD, f16, N, C, H, W,
                                &err) == 0);
    for (size_t i = 0; i < x.n; i++)
        x.data[i] = (float)(emu_random64(4, 1, i) >> 44);
    for (size_t i = 0; i < dy.n; i++) {
        const uint64_t w = emu_random64(4, 2, i);
        dy.data[i] = (float)ldexp((double)(w >> 40) - 0x1p23, (int)(w % 40) - 20);
        if (w % 1009 == 0)
            dy.data[i] = NAN;
        else if (w % 1013 == 0)
            dy.data[i] = -0.0f;
    }
    size_t *argmax = malloc(y.n * sizeof *argmax);
    ck_assert(argmax);
    const emu_pool_opts o = { .size = (int)k, .stride = (int)stride };
    const emu_rounding rnd = { .mode = EMU_RNE };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 11);
    ck_assert(emu_t_maxpool2d(&ctx, "p", &y, argmax, &x, &o, &rnd) == 0);
    emu_stats_init(st);
    ctx.stats = st;
    ctx.threads = threads;
    ck_assert_msg(emu_t_maxpool2d_backward(&ctx, "pb", dx, &dy, argmax, &o,
                                           &rnd) == 0,
                  "%s", ctx.err.message);
    /* an argmax out of its window: the first such index reported */
    argmax[y.n - 1] = 0;
    argmax[y.n / 2 + 1] = 0;
    ck_assert(emu_t_maxpool2d_backward(&ctx, "pb", dx, &dy, argmax, &o,
                                       &rnd) != 0);
    char want[64];
    snprintf(want, sizeof want, "argmax[%zu] = 0", y.n / 2 + 1);
    ck_assert_msg(strstr(ctx.err.message, want), "%s", ctx.err.message);
    free(argmax);
    emu_tensor_free(&x);
    emu_tensor_free(&y);
    emu_tensor_free(&dy);
}

START_TEST(test_maxpool_backward_threads)
{
    /* N, C, H, W, size, stride: the CNN's two pools, overlapping windows */
    static const size_t shapes[][6] = {
        { 64, 6, 28, 28, 2, 2 }, { 64, 16, 10, 10, 2, 2 },
        { 37, 5, 23, 17, 3, 3 }, { 40, 3, 31, 29, 3, 2 },
    };
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        emu_tensor dx1;
        emu_stats s1;
        maxpool_bwd(shapes[k], 1, &dx1, &s1);
        for (int threads = 2; threads <= 3; threads++) {
            emu_tensor dx;
            emu_stats s;
            maxpool_bwd(shapes[k], threads, &dx, &s);
            ck_assert_msg(memcmp(dx.data, dx1.data, dx.n * sizeof *dx.data) == 0,
                          "shape %zu threads %d: results differ", k, threads);
            const emu_site *e1 = emu_stats_find_name(&s1, "pb");
            const emu_site *e = emu_stats_find_name(&s, "pb");
            ck_assert(e1 && e && e1->total.nan > 0);
            ck_assert_msg(memcmp(&e->total, &e1->total, sizeof e->total) == 0,
                          "shape %zu threads %d: statistics differ", k, threads);
            emu_stats_free(&s);
            emu_tensor_free(&dx);
        }
        emu_stats_free(&s1);
        emu_tensor_free(&dx1);
    }
}
END_TEST

/* The pool: parts from many jobs, nested calls run inline. */
typedef struct pool_probe {
    int hits[EMU_POOL_MAX];
    int nested;
} pool_probe;

static void probe_inner(void *p, int t, int T)
{
    (void)T;
    __atomic_add_fetch(&((pool_probe *)p)->nested, t + 1, __ATOMIC_RELAXED);
}

static void probe(void *p, int t, int T)
{
    pool_probe *pp = p;
    pp->hits[t] += T;
    if (t == 1)
        emu_pool_run(3, probe_inner, p); /* busy: runs here, in order */
}

START_TEST(test_pool_runs_every_part)
{
    for (int job = 0; job < 200; job++) {
        const int T = 1 + job % 5;
        pool_probe pp;
        memset(&pp, 0, sizeof pp);
        emu_pool_run(T, probe, &pp);
        for (int t = 0; t < EMU_POOL_MAX; t++)
            ck_assert_int_eq(pp.hits[t], t < T ? T : 0);
        ck_assert_int_eq(pp.nested, T > 1 ? 1 + 2 + 3 : 0);
    }
}
END_TEST

/* After fork() the child, which has none of the parent's threads, runs
 * its jobs on workers of its own (the pool's atfork handler), even when
 * it was forked from inside a part, the parent's pool busy with that job
 * and its lock perhaps held by the parent's other thread.  Part 0 of each
 * of the child's jobs waits (up to 5 s) for part 1 to start, which only
 * another thread can do: a child running its jobs inline, as on a busy
 * pool, would time out, one whose lock stayed locked would hang (until
 * its alarm). */
typedef struct rendezvous {
    int started;
    int met;
} rendezvous;

static void rendezvous_part(void *p, int t, int T)
{
    (void)T;
    rendezvous *r = p;
    if (t == 1) {
        __atomic_store_n(&r->started, 1, __ATOMIC_RELEASE);
        return;
    }
    const struct timespec pause = { 0, 100000 };
    for (int i = 0; i < 50000 && !r->met; i++) {
        if (__atomic_load_n(&r->started, __ATOMIC_ACQUIRE))
            r->met = 1;
        else
            nanosleep(&pause, NULL);
    }
}

static void fork_part(void *p, int t, int T)
{
    (void)T;
    if (t != 1)
        return;
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(60); /* a child hung on the parent's lock dies, and fails */
        int bad = 0;
        for (int job = 0; job < 20; job++) {
            rendezvous r = { 0, 0 };
            emu_pool_run(2, rendezvous_part, &r);
            bad |= !r.met;
        }
        _exit(bad);
    }
    *(pid_t *)p = pid;
}

START_TEST(test_pool_after_fork)
{
    pid_t pid = -1;
    emu_pool_run(2, fork_part, &pid);
    ck_assert(pid > 0);
    int status = 0;
    ck_assert(waitpid(pid, &status, 0) == pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the forked child's jobs ran on one thread");
    rendezvous r = { 0, 0 }; /* and the parent's pool still runs */
    emu_pool_run(2, rendezvous_part, &r);
    ck_assert(r.met);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_pool_runs_every_part);
    tcase_add_test(tc, test_pool_after_fork);
    tcase_add_test(tc, test_commit_threads_opt_in);
    tcase_add_test(tc, test_commit_threads_arrays);
    tcase_add_test(tc, test_commit_threads_fill);
    tcase_add_test(tc, test_commit_threads_fill32);
    tcase_add_test(tc, test_commit_threads_swamp);
    tcase_add_test(tc, test_fast_threads_are_one_sgemm);
    tcase_add_test(tc, test_conv_weight_grad_threads);
    tcase_add_test(tc, test_maxpool_backward_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
