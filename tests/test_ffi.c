/*
 * test_ffi.c — the foreign-function ABI (emu/ffi.h) from C.
 *
 * The Python package's pytest suite exercises the same functions through
 * ctypes, but not under the sanitizers (an ASan libemu.so cannot be
 * loaded into python3); this suite runs them in the ASan + UBSan build:
 * every handle created and freed, every array path, the error slots.
 * Each function is checked against the library function it wraps
 * (array rounding, the scalar choke point, emu_scaled_quantize,
 * emu_t_matmul, the stats writers), never against hard-coded results.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static emu_ffi_format *fmt_new(const char *spec)
{
    emu_ffi_format *f = NULL;
    ck_assert_msg(emu_ffi_format_new(spec, &f) == 0, "%s: %s", spec,
                  emu_ffi_error_message());
    return f;
}

static emu_ffi_rounding *rnd_new(const char *mode, int saturate)
{
    emu_ffi_rounding *r = NULL;
    ck_assert_msg(emu_ffi_rounding_new(mode, saturate, NULL, NULL, &r) == 0,
                  "%s: %s", mode, emu_ffi_error_message());
    return r;
}

/* Random binary32 values over a wide range, and a few specials. */
static void data(float *x, size_t n, uint64_t seed)
{
    test_rng g = test_rng_make(seed);
    const float sp[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f,
                         3.4e38f, 0.1f };
    for (size_t i = 0; i < n; i++) {
        if (i < sizeof sp / sizeof sp[0]) {
            x[i] = sp[i];
            continue;
        }
        uint64_t w = test_next(&g);
        double m = 1.0 + (double)(w >> 12) * 0x1p-52;
        x[i] = (float)ldexp(w & 1 ? -m : m, (int)(w % 80) - 50);
    }
}

START_TEST(errors_and_formats)
{
    emu_ffi_format *f = NULL;
    ck_assert_int_eq(emu_ffi_format_new("e4m3,bogus=1", &f), -1);
    ck_assert_ptr_null(f);
    ck_assert_int_eq(emu_ffi_error_code(), EMU_ESPEC);
    ck_assert_str_eq(emu_ffi_error_code_name(), "EMU_ESPEC");
    ck_assert_str_eq(emu_ffi_error_key(), "bogus");
    ck_assert_ptr_nonnull(strstr(emu_ffi_error_where(), "e4m3,bogus=1"));
    /* a success leaves the last failure readable */
    f = fmt_new("e4m3");
    ck_assert_str_eq(emu_ffi_error_key(), "bogus");
    /* every key reads with the getter of its type, and matches the C format */
    const emu_format *c = test_format("e4m3");
    size_t nkeys = 0;
    for (const char *k; (k = emu_ffi_format_key(nkeys)); nkeys++) {
        int t = emu_ffi_format_key_type(nkeys);
        char buf[256];
        int64_t iv;
        uint64_t uv;
        double dv;
        if (t == 'u')
            ck_assert_int_eq(emu_ffi_format_get_uint(f, k, &uv), 0);
        else if (t == 's')
            ck_assert_int_eq(emu_ffi_format_get_str(f, k, buf, sizeof buf), 0);
        else if (t == 'd')
            ck_assert_int_eq(emu_ffi_format_get_real(f, k, &dv), 0);
        else
            ck_assert_int_eq(emu_ffi_format_get_int(f, k, &iv), 0);
    }
    ck_assert_int_ge(nkeys, 20);
    int64_t iv;
    double dv;
    char buf[256];
    ck_assert_int_eq(emu_ffi_format_get_int(f, "bias", &iv), 0);
    ck_assert_int_eq(iv, c->bias);
    ck_assert_int_eq(emu_ffi_format_get_int(f, "has_nan", &iv), 0);
    ck_assert_int_eq(iv, c->has_nan);
    uint64_t uv;
    ck_assert_int_eq(emu_ffi_format_get_uint(f, "finite_count", &uv), 0);
    ck_assert_uint_eq(uv, c->finite_count);
    emu_ffi_format *f64 = fmt_new("binary64");
    ck_assert_int_eq(emu_ffi_format_get_uint(f64, "finite_count", &uv), 0);
    ck_assert_uint_eq(uv, test_format("binary64")->finite_count);
    ck_assert_uint_gt(uv, (uint64_t)INT64_MAX);
    emu_ffi_format_free(f64);
    ck_assert_int_eq(emu_ffi_format_get_uint(f, "bits", &uv), -1);
    ck_assert_int_eq(emu_ffi_format_get_real(f, "max", &dv), 0);
    ck_assert(dv == c->max);
    ck_assert_int_eq(emu_ffi_format_get_str(f, "name", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, c->name);
    ck_assert_int_eq(emu_ffi_format_get_int(f, "max", &iv), -1);
    ck_assert_int_eq(emu_ffi_error_code(), EMU_EINVAL);
    ck_assert_int_eq(emu_ffi_format_get_real(f, "nosuch", &dv), -1);
    ck_assert_int_eq(emu_ffi_format_get_str(f, "name", buf, 0), -1);
    /* the registry */
    ck_assert_uint_eq(emu_ffi_format_count(), emu_format_count());
    ck_assert_str_eq(emu_ffi_format_name(0), emu_format_at(0)->name);
    ck_assert_ptr_null(emu_ffi_format_name(emu_format_count()));
    emu_ffi_format_free(f);
    emu_ffi_format_free(NULL);
    /* roundings */
    emu_ffi_rounding *r = NULL;
    ck_assert_int_eq(emu_ffi_rounding_new("nope", -1, NULL, NULL, &r), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "mode");
    ck_assert_int_eq(emu_ffi_rounding_new("rne", 2, NULL, NULL, &r), -1);
    ck_assert_int_eq(emu_ffi_rounding_new("rne", 1, "sideways", NULL, &r), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "tininess");
    ck_assert_int_eq(emu_ffi_rounding_new("rne", 1, "before", "x", &r), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "profile");
    ck_assert_ptr_null(r);
    emu_ffi_rounding_free(NULL);
    ck_assert_str_eq(emu_ffi_version_string(), EMU_VERSION_STRING);
}
END_TEST

/* The array roundings against the library's array and scalar roundings. */
START_TEST(round_arrays)
{
    enum { N = 3000 };
    static float x[N], y[N], z[N];
    static double xd[N], yd[N], zd[N];
    static uint16_t bits[N];
    data(x, N, 1);
    for (size_t i = 0; i < N; i++)
        xd[i] = (double)x[i] * (1 + 0x1p-40);
    const char *const fmts[] = { "binary16", "bfloat16", "e4m3", "e5m2", "e2m1" };
    const char *const modes[] = { "rne", "rz", "sr", "sr7" };
    for (size_t fi = 0; fi < 5; fi++) {
        emu_ffi_format *f = fmt_new(fmts[fi]);
        const emu_format *c = test_format(fmts[fi]);
        for (size_t mi = 0; mi < 4; mi++) {
            emu_ffi_rounding *r = rnd_new(modes[mi], -1);
            emu_array_rounding a = { .seed = 5, .stream = 2, .first_index = 9 };
            ck_assert_int_eq(emu_rnd_parse(modes[mi], &a.rnd.mode,
                                           &a.rnd.sr_bits), 0);
            uint64_t counts[16] = { 0 };
            ck_assert_uint_le(emu_ffi_counts_count(), 16);
            emu_round_counts want = { 0 };
            ck_assert_int_eq(emu_ffi_round_f32(f, r, 5, 2, 9, y, x, N, counts), 0);
            ck_assert_int_eq(emu_round_array_f32(c, z, x, N, &a, &want, NULL), 0);
            ck_assert(!memcmp(y, z, sizeof y));
            ck_assert_uint_eq(counts[0], want.n);
            ck_assert_uint_eq(counts[1], want.inexact);
            ck_assert_uint_eq(counts[8], want.flags);
            ck_assert_str_eq(emu_ffi_counts_name(5), "overflow");
            ck_assert_uint_eq(counts[5], want.overflow);
            ck_assert_int_eq(emu_ffi_round_f64(f, r, 5, 2, 9, yd, xd, N, NULL), 0);
            ck_assert_int_eq(emu_round_array_f64(c, zd, xd, N, &a, NULL, NULL), 0);
            ck_assert(!memcmp(yd, zd, sizeof yd));
            ck_assert_int_eq(emu_ffi_round_f64_to_f32(f, r, 5, 2, 9, y, xd, N,
                                                      NULL), 0);
            for (size_t i = 0; i < N; i++)
                ck_assert(test_same(y[i], zd[i]));
            /* one element through the scalar choke point */
            for (size_t i = 0; i < N; i += 97) {
                double v;
                ck_assert_int_eq(emu_ffi_round_scalar(f, r, x[i], 0, 5, 2, 9 + i,
                                                      &v, NULL, NULL), 0);
                ck_assert(test_same(v, z[i]));
            }
            /* bit patterns: those of the values, except NaN in e2m1 */
            int rc = emu_ffi_round_f32_bits(f, r, 5, 2, 9, bits, 2, x, N, NULL);
            if (c->has_nan) {
                ck_assert_int_eq(rc, 0);
                for (size_t i = 0; i < N; i += 13) {
                    double v;
                    ck_assert_int_eq(emu_ffi_decode(f, bits[i], &v), 0);
                    ck_assert(test_same(v, z[i]));
                }
            } else {
                ck_assert_int_eq(rc, -1);
                ck_assert_int_eq(emu_ffi_error_code(), EMU_ERANGE);
                ck_assert_ptr_nonnull(strstr(emu_ffi_error_message(),
                                             "element 4"));
            }
            emu_ffi_rounding_free(r);
        }
        /* a pattern narrower than the format is refused */
        emu_ffi_rounding *r = rnd_new("rne", -1);
        if (c->bits > 8) {
            ck_assert_int_eq(emu_ffi_round_f32_bits(f, r, 0, 0, 0, bits, 1, x,
                                                    N, NULL), -1);
            ck_assert_str_eq(emu_ffi_error_key(), "width");
        }
        ck_assert_int_eq(emu_ffi_round_f32_bits(f, r, 0, 0, 0, bits, 3, x, 4,
                                                NULL), -1);
        emu_ffi_rounding_free(r);
        emu_ffi_format_free(f);
    }
}
END_TEST

START_TEST(saturation)
{
    emu_ffi_format *f = fmt_new("e4m3,saturate");
    emu_ffi_rounding *never = rnd_new("rne", 0), *own = rnd_new("rne", -1);
    float x[2] = { 1000.0f, -1e9f }, y[2];
    ck_assert_int_eq(emu_ffi_round_f32(f, own, 0, 0, 0, y, x, 2, NULL), 0);
    ck_assert(y[0] == 448.0f && y[1] == -448.0f);
    ck_assert_int_eq(emu_ffi_round_f32(f, never, 0, 0, 0, y, x, 2, NULL), 0);
    ck_assert(isnan(y[0]) && isnan(y[1]));
    emu_ffi_format_free(f);
    f = fmt_new("e2m1,saturate"); /* no inf, no NaN: cannot unsaturate */
    ck_assert_int_eq(emu_ffi_round_f32(f, never, 0, 0, 0, y, x, 2, NULL), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "saturate");
    emu_ffi_format_free(f);
    emu_ffi_rounding_free(never);
    emu_ffi_rounding_free(own);
}
END_TEST

/* A session's ops are emu_t_load / emu_t_matmul in a context of the same
 * seed; its files are the stats writers'. */
START_TEST(sessions)
{
    enum { M = 6, K = 40, N = 5 };
    static float a[M * K], b[K * N], c1[M * N], c2[M * N], x[M * K], y[M * K];
    data(a, M * K, 3);
    data(b, K * N, 4);
    for (size_t i = 0; i < M * K; i++)
        if (!isfinite(a[i]))
            a[i] = 1;
    for (size_t i = 0; i < K * N; i++)
        if (!isfinite(b[i]))
            b[i] = -2;
    emu_ffi_session *s = NULL;
    ck_assert_int_eq(emu_ffi_session_new(7, 2.0, 1, &s), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "ref_rate");
    ck_assert_int_eq(emu_ffi_session_new(7, 1.0, 2, &s), 0);
    emu_ffi_accum *acc = NULL;
    ck_assert_int_eq(emu_ffi_accum_new("sequential,acc=nosuch", &acc), -1);
    ck_assert_int_eq(emu_ffi_accum_new("sequential,acc=binary16,mode=sr", &acc), 0);
    char spec[256];
    ck_assert_int_eq(emu_ffi_accum_string(acc, spec, sizeof spec), 0);
    emu_ffi_format *h = fmt_new("binary16");
    emu_ffi_rounding *sr = rnd_new("sr", -1);
    ck_assert_int_eq(emu_ffi_session_begin_step(s, 0), 0);
    ck_assert_int_eq(emu_ffi_session_round(s, "x.cast", NULL, "activation", h, sr, x,
                                           a, M * K), 0);
    ck_assert_int_eq(emu_ffi_session_round(s, "x.cast", NULL, "gradient", h, sr, y,
                                           a, M * K), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "role");
    ck_assert_int_eq(emu_ffi_session_matmul(s, "fc.mm", "activation", acc, h,
                                            sr, c1, x, b, M, K, N, 0, 0, 1.0, 0,
                                            a, NULL), 0);
    ck_assert_int_eq(emu_ffi_session_begin_step(s, 1), 0);
    ck_assert_int_eq(emu_ffi_session_matmul(s, "fc.mm", "activation", acc, h,
                                            sr, c1, x, b, M, 0, N, 0, 0, 1.0, 0,
                                            NULL, NULL), -1);

    /* the same two ops by hand */
    emu_stats st;
    emu_stats_init(&st);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 7);
    ctx.stats = &st;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    ctx.threads = 2;
    emu_tensor tx, ta, tb, tc, tsrc;
    ck_assert_int_eq(emu_tensor_alloc4(&tx, "x", EMU_ROLE_ACTIVATION,
                                       test_format("binary16"), M * K, 0, 0, 0,
                                       NULL), 0);
    emu_rounding rs = { .mode = EMU_RS, .sr_bits = 64 };
    ck_assert_int_eq(emu_t_load(&ctx, "x.cast", &tx, a, M * K, &rs), 0);
    ck_assert(!memcmp(tx.data, x, sizeof x));
    const emu_format *b32 = test_format("binary32");
    ck_assert_int_eq(emu_tensor_alloc4(&ta, "a", 0, b32, M, K, 0, 0, NULL), 0);
    ck_assert_int_eq(emu_tensor_alloc4(&tsrc, "s", 0, b32, M, K, 0, 0, NULL), 0);
    ck_assert_int_eq(emu_tensor_alloc4(&tb, "b", 0, b32, K, N, 0, 0, NULL), 0);
    ck_assert_int_eq(emu_tensor_alloc4(&tc, "c", EMU_ROLE_ACTIVATION,
                                       test_format("binary16"), M, N, 0, 0,
                                       NULL), 0);
    memcpy(ta.data, x, sizeof x);
    memcpy(tsrc.data, a, sizeof a);
    memcpy(tb.data, b, sizeof b);
    emu_accum am;
    ck_assert_int_eq(emu_accum_parse(&am, spec, NULL), 0);
    emu_matmul_opts o = { .accum = &am, .a_src = &tsrc };
    ck_assert_int_eq(emu_t_matmul(&ctx, "fc.mm", &tc, &ta, &tb, &o, &rs), 0);
    ck_assert_int_eq(emu_ffi_session_begin_step(s, 2), 0);
    ck_assert_int_eq(emu_ffi_session_matmul(s, "fc.mm2", "weight", acc, h,
                                            sr, c2, x, b, M, K, N, 0, 0, 1.0, 0,
                                            NULL, NULL), 0);
    (void)c2;

    /* counters of the first two sites equal the hand-run context's */
    ck_assert_uint_eq(emu_ffi_session_site_count(s), 3);
    size_t nc = emu_stats_counter_count();
    double *got = calloc(nc, sizeof *got);
    char buf[128];
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(emu_ffi_session_counters(s, i, 0, got, nc), 0);
        const emu_site *site = emu_stats_site_at(&st, i);
        for (size_t k = 0; k < nc; k++) {
            double want;
            ck_assert_int_eq(emu_stats_counter(site, EMU_SPAN_TOTAL,
                                               emu_stats_counter_name(k), &want), 0);
            ck_assert_msg(got[k] == want || (isnan(got[k]) && isnan(want)),
                          "site %zu counter %s: %g, expected %g", i,
                          emu_stats_counter_name(k), got[k], want);
        }
        ck_assert_int_eq(emu_ffi_session_site_str(s, i, "name", buf, sizeof buf), 0);
        ck_assert_str_eq(buf, site->name);
    }
    ck_assert_int_eq(emu_ffi_session_site_str(s, 2, "role", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "weight");
    ck_assert_int_eq(emu_ffi_session_site_str(s, 3, "name", buf, sizeof buf), -1);
    ck_assert_int_eq(emu_ffi_session_site_str(s, 0, "color", buf, sizeof buf), -1);
    ck_assert_int_eq(emu_ffi_session_counters(s, 0, 5, got, nc), -1);
    ck_assert_int_eq(emu_ffi_session_counters(s, 0, 0, got, nc - 1), -1);
    uint64_t hist[EMU_HIST_BINS], want_hist[EMU_HIST_BINS];
    ck_assert_uint_eq(emu_ffi_hist_bins(), EMU_HIST_BINS);
    ck_assert_int_eq(emu_ffi_session_hist(s, 1, 0, "rounded", hist,
                                          EMU_HIST_BINS), 0);
    ck_assert_int_eq(emu_stats_hist(emu_stats_site_at(&st, 1), EMU_SPAN_TOTAL,
                                    "rounded", want_hist), 0);
    ck_assert(!memcmp(hist, want_hist, sizeof hist));
    ck_assert_int_eq(emu_ffi_session_hist(s, 1, 0, "wrong", hist,
                                          EMU_HIST_BINS), -1);
    free(got);

    /* the files */
    char dir[] = "/tmp/emu-test-ffi-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char sub[64], path[96];
    snprintf(sub, sizeof sub, "%s/out", dir);
    ck_assert_int_eq(emu_ffi_session_write(s, sub), 0);
    const char *const files[] = { "ops.csv", "hist.csv", "ops.json",
                                  "ops_steps.csv" };
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", sub, files[i]);
        ck_assert_msg(access(path, R_OK) == 0, "%s not written", path);
    }
    snprintf(path, sizeof path, "%s/ops_steps.csv", sub);
    FILE *fp = fopen(path, "r");
    ck_assert_ptr_nonnull(fp);
    char line[4096];
    int rows = 0, headers = 0;
    while (fgets(line, sizeof line, fp))
        if (!strncmp(line, "step,", 5))
            headers++;
        else
            rows++;
    fclose(fp);
    ck_assert_int_eq(headers, 1);
    ck_assert_int_eq(rows, 3); /* step 0: x.cast, fc.mm; step 2: fc.mm2 */
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", sub, files[i]);
        remove(path);
    }
    snprintf(path, sizeof path, "%s/none/deeper", dir);
    ck_assert_int_eq(emu_ffi_session_write(s, path), -1);
    ck_assert_int_eq(emu_ffi_error_code(), EMU_EIO);
    rmdir(sub);
    rmdir(dir);

    emu_tensor_free(&tx);
    emu_tensor_free(&ta);
    emu_tensor_free(&tb);
    emu_tensor_free(&tc);
    emu_tensor_free(&tsrc);
    emu_stats_free(&st);
    emu_ffi_rounding_free(sr);
    emu_ffi_format_free(h);
    emu_ffi_accum_free(acc);
    emu_ffi_session_free(s);
    emu_ffi_session_free(NULL);
}
END_TEST

/* Rounding in place gives what rounding into another array gives, with
 * the same counters; the kind is the caller's; the measurement switches
 * change what is counted, never the values. */
START_TEST(session_round_in_place_kinds_measure)
{
    enum { N = 3000 };
    static float x[N], ref[N], y[N];
    data(x, N, 11);
    emu_ffi_format *h = fmt_new("e4m3");
    emu_ffi_rounding *sr = rnd_new("sr", -1);
    emu_ffi_session *a = NULL, *b = NULL, *c = NULL;
    ck_assert_int_eq(emu_ffi_session_new(3, 1.0, 1, &a), 0);
    ck_assert_int_eq(emu_ffi_session_new(3, 1.0, 1, &b), 0);
    ck_assert_int_eq(emu_ffi_session_new(3, 0.0, 1, &c), 0);
    ck_assert_int_eq(emu_ffi_session_round(a, "r", "relu", "activation", h,
                                           sr, ref, x, N), 0);
    memcpy(y, x, sizeof y);
    ck_assert_int_eq(emu_ffi_session_round(b, "r", "relu", "activation", h,
                                           sr, y, y, N), 0);
    ck_assert(!memcmp(y, ref, sizeof y));
    size_t nc = emu_stats_counter_count();
    double *ca = malloc(2 * nc * sizeof *ca), *cb = ca + nc;
    ck_assert_ptr_nonnull(ca);
    ck_assert_int_eq(emu_ffi_session_counters(a, 0, 0, ca, nc), 0);
    ck_assert_int_eq(emu_ffi_session_counters(b, 0, 0, cb, nc), 0);
    for (size_t i = 0; i < nc; i++) /* NaN-free: counts, sums of errors */
        ck_assert_msg(ca[i] == cb[i], "%s", emu_stats_counter_name(i));
    char kind[32];
    ck_assert_int_eq(emu_ffi_session_site_str(b, 0, "kind", kind, sizeof kind), 0);
    ck_assert_str_eq(kind, "relu");
    /* partial overlap and overlong kinds are refused */
    ck_assert_int_eq(emu_ffi_session_round(b, "r", NULL, "activation", h, sr,
                                           y + 1, y, N - 1), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "out");
    ck_assert_int_eq(emu_ffi_session_round(b, "r", "a_kind_of_twenty_four_ch",
                                           "activation", h, sr, y, x, N), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "kind");
    /* counters only, then nothing: same values, fewer statistics */
    ck_assert_int_eq(emu_ffi_session_measure(c, 16, 0.0), -1);
    ck_assert_int_eq(emu_ffi_session_measure(c, 1, 2.0), -1);
    ck_assert_int_eq(emu_ffi_session_measure(c, 1, 0.0), 0);
    ck_assert_int_eq(emu_ffi_session_round(c, "r", NULL, "activation", h, sr,
                                           y, x, N), 0);
    ck_assert(!memcmp(y, ref, sizeof y));
    uint64_t hist[EMU_HIST_BINS];
    ck_assert_int_eq(emu_ffi_session_hist(c, 0, 0, "rounded", hist,
                                          EMU_HIST_BINS), 0);
    uint64_t hsum = 0;
    for (int i = 0; i < EMU_HIST_BINS; i++)
        hsum += hist[i];
    ck_assert_uint_eq(hsum, 0);
    ck_assert_int_eq(emu_ffi_session_counters(c, 0, 0, cb, nc), 0);
    for (size_t i = 0; i < nc; i++)
        if (!strcmp(emu_stats_counter_name(i), "results") ||
            !strcmp(emu_stats_counter_name(i), "inexact"))
            ck_assert_msg(ca[i] == cb[i], "%s", emu_stats_counter_name(i));
    ck_assert_int_eq(emu_ffi_session_measure(c, 0, 0.0), 0);
    ck_assert_int_eq(emu_ffi_session_round(c, "other", NULL, "activation", h,
                                           sr, y, x, N), 0);
    ck_assert_uint_eq(emu_ffi_session_site_count(c), 1);
    /* unmeasured (the array rounding's fast path): op 1's words, as a
     * measured session's second op */
    ck_assert_int_eq(emu_ffi_session_round(a, "r2", NULL, "activation", h,
                                           sr, ref, x, N), 0);
    ck_assert(!memcmp(y, ref, sizeof y));
    free(ca);
    emu_ffi_session_free(a);
    emu_ffi_session_free(b);
    emu_ffi_session_free(c);
    emu_ffi_rounding_free(sr);
    emu_ffi_format_free(h);
}
END_TEST

/* Quantization through the FFI is emu_scaled_quantize. */
START_TEST(quantization)
{
    enum { R = 8, C = 96 };
    static float x[R * C], v[R * C], el[R * C];
    data(x, R * C, 9);
    for (size_t i = 0; i < R * C; i++)
        if (!isfinite(x[i]))
            x[i] = 0.5f;
    const char *const specs[] = { "mxfp8", "mxfp4", "nvfp4", "mxint8",
                                  "elem=e4m3,scale=none,tensor=yes" };
    const size_t shape[2] = { R, C };
    for (int si = 0; si < 5; si++) {
        emu_ffi_quant *q = NULL;
        ck_assert_int_eq(emu_ffi_quant_new(specs[si], 2, shape, -1, &q), 0);
        size_t nb = emu_ffi_quant_nblocks(q);
        ck_assert_int_eq(emu_ffi_quant_values_f32(q, v, R * C), -1);
        ck_assert_int_eq(emu_ffi_error_code(), EMU_ESTATE);
        double *counts = calloc(emu_ffi_quant_counts_count(), sizeof *counts);
        double *blocks = calloc(nb * emu_ffi_quant_block_count(), sizeof *blocks);
        ck_assert_int_eq(emu_ffi_quant_run(q, x, "sr", 4, 0, 0, counts, blocks), 0);

        emu_scaled_format sf;
        emu_scaled_tensor t;
        ck_assert_int_eq(emu_scaled_format_parse(&sf, specs[si], NULL), 0);
        ck_assert_int_eq(emu_scaled_alloc(&t, &sf, 2, shape, -1, NULL), 0);
        emu_quant_opts o = { .mode = EMU_RS, .sr_bits = 64, .seed = 4 };
        emu_quant_counts qc;
        memset(&qc, 0, sizeof qc);
        ck_assert_int_eq(emu_scaled_quantize(&t, x, &o, &qc, NULL, NULL), 0);
        ck_assert_int_eq(emu_ffi_quant_elements(q, el, R * C), 0);
        ck_assert(!memcmp(el, t.elem, sizeof el));
        ck_assert(counts[0] == (double)qc.n && counts[1] == (double)qc.blocks);
        ck_assert(counts[2] == (double)qc.clipped);
        ck_assert(emu_ffi_quant_tensor_scale(q) == t.tensor_scale);
        ck_assert_int_eq(emu_ffi_quant_values_f32(q, v, R * C), 0);
        double *vd = calloc(R * C, sizeof *vd);
        ck_assert_int_eq(emu_ffi_quant_values_f64(q, vd, R * C), 0);
        for (size_t i = 0; i < R * C; i++) {
            ck_assert(test_same(vd[i], emu_scaled_value(&t, i)));
            ck_assert(test_same(v[i], (float)vd[i]));
        }
        float *sc = calloc(nb, sizeof *sc);
        ck_assert_int_eq(emu_ffi_quant_scales(q, sc, nb), 0);
        ck_assert(!memcmp(sc, t.scale, nb * sizeof *sc));
        size_t ps = emu_ffi_quant_packed_size(q);
        ck_assert_uint_eq(ps, emu_scaled_packed_size(&t));
        uint8_t *p1 = malloc(ps), *p2 = malloc(ps);
        ck_assert_int_eq(emu_ffi_quant_pack(q, p1, ps), 0);
        ck_assert_int_eq(emu_scaled_pack(&t, p2, ps, NULL), 0);
        ck_assert(!memcmp(p1, p2, ps));
        ck_assert_int_eq(emu_ffi_quant_pack(q, p1, ps - 1), -1);
        char spec[256];
        ck_assert_int_eq(emu_ffi_quant_spec(q, spec, sizeof spec), 0);
        ck_assert(emu_ffi_quant_bits_per_element(q) ==
                  emu_scaled_bits_per_element(&sf));
        ck_assert_int_eq(emu_ffi_quant_run(q, x, "bad", 4, 0, 0, NULL, NULL), -1);
        ck_assert_str_eq(emu_ffi_error_key(), "mode");

        /* as a session op: emu_t_quantize_scaled in a context of the same
         * seed (op 0: stream 0), the same elements and counts, and the
         * site of emu train's scaled operands */
        emu_ffi_session *s = NULL;
        ck_assert_int_eq(emu_ffi_session_new(4, 0.0, 1, &s), 0);
        emu_ffi_rounding *sr = rnd_new("sr", -1);
        double *c2 = calloc(emu_ffi_quant_counts_count(), sizeof *c2);
        ck_assert_int_eq(emu_ffi_session_quantize(s, "fc1.q.x", "activation",
                                                  q, x, sr, 0.0, c2), 0);
        emu_stats st;
        emu_stats_init(&st);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 4);
        ctx.stats = &st;
        emu_tensor tx;
        ck_assert_int_eq(emu_tensor_alloc4(&tx, "x", EMU_ROLE_ACTIVATION,
                                           test_format("binary32"), R, C, 0,
                                           0, NULL), 0);
        memcpy(tx.data, x, sizeof x);
        emu_rounding rs = { .mode = EMU_RS, .sr_bits = 64 };
        memset(&qc, 0, sizeof qc);
        ck_assert_int_eq(emu_t_quantize_scaled(&ctx, "fc1.q.x", &t, &tx, NULL,
                                               &qc, &rs), 0);
        ck_assert_int_eq(emu_ffi_quant_elements(q, el, R * C), 0);
        ck_assert(!memcmp(el, t.elem, sizeof el));
        ck_assert(c2[0] == (double)qc.n && c2[4] == (double)qc.inexact);
        char str[64];
        ck_assert_int_eq(emu_ffi_session_site_str(s, 0, "kind", str, sizeof str), 0);
        ck_assert_str_eq(str, "quantize");
        ck_assert_int_eq(emu_ffi_session_site_str(s, 0, "role", str, sizeof str), 0);
        ck_assert_str_eq(str, "activation");
        double a1 = -1, a2 = -2;
        ck_assert_int_eq(emu_ffi_session_counters(s, 0, 0, c2, 1), -1);
        ck_assert_int_eq(emu_stats_counter(emu_stats_site_at(&st, 0), EMU_SPAN_TOTAL,
                                           "inexact", &a1), 0);
        size_t nc = emu_stats_counter_count();
        double *all = calloc(nc, sizeof *all);
        ck_assert_int_eq(emu_ffi_session_counters(s, 0, 0, all, nc), 0);
        for (size_t i = 0; i < nc; i++)
            if (!strcmp(emu_stats_counter_name(i), "inexact"))
                a2 = all[i];
        ck_assert(a1 == a2);
        free(all);
        free(c2);
        emu_tensor_free(&tx);
        emu_stats_free(&st);
        emu_ffi_rounding_free(sr);
        emu_ffi_session_free(s);
        free(p1);
        free(p2);
        free(sc);
        free(vd);
        free(counts);
        free(blocks);
        emu_scaled_free(&t);
        emu_ffi_quant_free(q);
    }
    emu_ffi_quant *q = NULL;
    ck_assert_int_eq(emu_ffi_quant_new("mxfp8,bogus=2", 2, shape, -1, &q), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "bogus");
    ck_assert_int_eq(emu_ffi_quant_new("mxfp8", 2, shape, 3, &q), -1);
    ck_assert_ptr_null(q);
    emu_ffi_quant_free(NULL);
}
END_TEST

START_TEST(policies)
{
    size_t need = 0;
    char small[8];
    ck_assert_int_eq(emu_ffi_policy_json("fp16-mpt", NULL, small, sizeof small,
                                         &need), 0);
    ck_assert_uint_gt(need, sizeof small);
    char *buf = malloc(need + 1);
    ck_assert_int_eq(emu_ffi_policy_json("fp16-mpt", "accum=exact\n\ngrowth=0.5",
                                         buf, need + 1, &need), -1);
    size_t had = need;
    ck_assert_int_eq(emu_ffi_policy_json("fp16-mpt", "accum=exact", buf,
                                         had + 1, &need), 0);
    ck_assert_uint_eq(need, had + 1); /* "exact" is longer than "fast" */
    buf = realloc(buf, need + 1);
    ck_assert_int_eq(emu_ffi_policy_json("fp16-mpt", "accum=exact", buf,
                                         need + 1, &need), 0);
    ck_assert_ptr_nonnull(strstr(buf, "\"name\": \"fp16-mpt\""));
    ck_assert_ptr_nonnull(strstr(buf, "\"accum\": \"exact\""));
    free(buf);
    ck_assert_int_eq(emu_ffi_policy_json("fp17", NULL, NULL, 0, &need), -1);
    ck_assert_int_eq(emu_ffi_error_code(), EMU_ESPEC);
    ck_assert_int_eq(emu_ffi_policy_json("fp16-mpt", "nokey=1", NULL, 0, &need), -1);
    ck_assert_str_eq(emu_ffi_error_key(), "nokey");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ffi");
    TCase *tc = tcase_create("ffi");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, errors_and_formats);
    tcase_add_test(tc, round_arrays);
    tcase_add_test(tc, saturation);
    tcase_add_test(tc, sessions);
    tcase_add_test(tc, session_round_in_place_kinds_measure);
    tcase_add_test(tc, quantization);
    tcase_add_test(tc, policies);
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
