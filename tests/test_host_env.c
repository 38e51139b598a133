/*
 * test_host_env.c — the caller's floating-point environment never changes
 * a result (README, "The host's floating-point state").
 *
 * Each workload (scalar arithmetic, array rounding, the transcendental
 * ops, a GEMM per accumulator model, block-scaled quantization, a short
 * training run) writes every output bit pattern, ternary, flag set and
 * statistic as a list of 64-bit records.  The list made in the default
 * environment is the reference; the same workload is then run with the
 * calling thread in each hostile environment (every IEEE rounding mode,
 * x86 flush-to-zero, denormals-are-zero, both, all of it together, and
 * unmasked invalid/divide/overflow traps) and must give the same list.
 * After each workload the caller's environment must be exactly what it
 * set (the library neither leaks its own state nor keeps the caller's).
 *
 * Inputs come from integers and bit patterns, never from the test's own
 * arithmetic, which runs under the hostile environment too.  Failures
 * print how many records differ and the first one.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <check.h>
#include <fenv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <emu/emu.h>

#include "testutil.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
enum {
    MXCSR_DAZ = 1 << 6, MXCSR_FTZ = 1 << 15,
    /* exception mask bits: invalid, divide by zero, overflow */
    MXCSR_TRAPS = (1 << 7) | (1 << 9) | (1 << 10),
    MXCSR_CONTROL = 0xFFC0 /* all but the sticky flags */
};
#else
#define HAVE_MXCSR 0
#endif

/* ---- the environments ---------------------------------------------------- */

enum {
    ENV_DEFAULT, ENV_UPWARD, ENV_DOWNWARD, ENV_TOWARDZERO, ENV_FTZ, ENV_DAZ,
    ENV_FTZ_DAZ, ENV_ALL, ENV_TRAPS, ENV_COUNT
};
static const char *const env_names[ENV_COUNT] = {
    "default", "upward", "downward", "towardzero", "ftz", "daz", "ftz+daz",
    "upward+ftz+daz", "traps",
};

static int env_round(int e)
{
    switch (e) {
    case ENV_UPWARD: case ENV_ALL: return FE_UPWARD;
    case ENV_DOWNWARD: return FE_DOWNWARD;
    case ENV_TOWARDZERO: return FE_TOWARDZERO;
    default: return FE_TONEAREST;
    }
}

#if HAVE_MXCSR
/* The MXCSR control bits environment e sets on top of its rounding mode. */
static unsigned env_mxcsr_extra(int e)
{
    switch (e) {
    case ENV_FTZ: return MXCSR_FTZ;
    case ENV_DAZ: return MXCSR_DAZ;
    case ENV_FTZ_DAZ: case ENV_ALL: return MXCSR_FTZ | MXCSR_DAZ;
    default: return 0;
    }
}
#endif

/* Puts the calling thread into environment e; returns its control word
 * (x86: MXCSR's control bits; elsewhere the rounding mode) to compare
 * with after the workload. */
static unsigned env_enter(int e)
{
    ck_assert_int_eq(fesetround(env_round(e)), 0);
#if HAVE_MXCSR
    unsigned csr = _mm_getcsr() | env_mxcsr_extra(e);
    if (e == ENV_TRAPS)
        csr &= ~(unsigned)MXCSR_TRAPS;
    _mm_setcsr(csr & ~0x3Fu);
    return _mm_getcsr() & MXCSR_CONTROL;
#else
    return (unsigned)fegetround();
#endif
}

static unsigned env_now(void)
{
#if HAVE_MXCSR
    return _mm_getcsr() & MXCSR_CONTROL;
#else
    return (unsigned)fegetround();
#endif
}

static void env_leave(void)
{
    fesetenv(FE_DFL_ENV);
}

/* ---- records ------------------------------------------------------------- */

typedef struct records {
    uint64_t *v;
    size_t n, cap;
} records;

static void put(records *r, uint64_t x)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 4096;
        r->v = realloc(r->v, r->cap * sizeof *r->v);
        ck_assert_ptr_nonnull(r->v);
    }
    r->v[r->n++] = x;
}

static void put_double(records *r, double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    put(r, u);
}

static void put_floats(records *r, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        put(r, u);
    }
}

static void put_status(records *r, double v, const emu_status *st)
{
    put_double(r, v);
    put(r, (uint64_t)(uint32_t)st->ternary << 32 | st->flags);
}

static void put_words(records *r, const void *p, size_t bytes)
{
    const unsigned char *b = p;
    uint64_t w = 0;
    for (size_t i = 0; i < bytes; i++) {
        w = w << 8 | b[i];
        if (i % 8 == 7 || i + 1 == bytes) {
            put(r, w);
            w = 0;
        }
    }
}

static void put_site_stats(records *r, const emu_site_stats *s)
{
    /* integers and doubles only, no padding: compare it as words */
    put_words(r, s, sizeof *s);
}

static void put_stats(records *r, const emu_stats *s)
{
    for (size_t i = 0; i < s->count; i++) {
        put_words(r, s->sites[i].name, strlen(s->sites[i].name));
        put_site_stats(r, &s->sites[i].total);
    }
}

static float float_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Fills a tensor of a 16-bit format with patterns pat(i), through the
 * library's unpacking (a conversion in the test would run under the
 * hostile environment: DAZ reads a subnormal binary32 as zero, traps fire
 * on a signaling NaN). */
static void fill_16bit(emu_tensor *t, uint16_t (*pat)(size_t i, void *),
                       void *arg)
{
    uint8_t *buf = malloc(2 * t->n);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < t->n; i++) {
        uint16_t u = pat(i, arg);
        buf[2 * i] = (uint8_t)u, buf[2 * i + 1] = (uint8_t)(u >> 8);
    }
    emu_error err;
    ck_assert_msg(!emu_tensor_unpack(t, buf, 2 * t->n, &err), "%s",
                  err.message);
    free(buf);
}

static double double_of_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* A random finite pattern of fmt, decoded (the library's decode: itself
 * guarded, and exact). */
static double random_value(test_rng *g, const emu_format *f)
{
    for (;;) {
        double x = emu_decode(f, test_random_bits(g, f));
        if (emu_classify(f, x) != EMU_CLASS_NAN)
            return x;
    }
}

/* ---- the workloads ------------------------------------------------------- */

static const emu_rounding *mode_of(int m, emu_rounding *r, emu_rng *rng)
{
    memset(r, 0, sizeof *r);
    if (m < TEST_DET_MODES) {
        r->mode = (emu_rnd)m;
    } else {
        r->mode = m == TEST_DET_MODES ? EMU_RS : EMU_RS_BITS;
        r->sr_bits = 7;
        *rng = emu_rng_make(99, (uint64_t)m);
        r->rng = rng;
    }
    return r;
}
enum { MODES = TEST_DET_MODES + 2 };

static void scalar_op(records *out, const emu_format *f, int op, double a,
                      double b, double c, const emu_rounding *r)
{
    emu_status st = { 0, 0 };
    double v;
    switch (op) {
    case 0: v = emu_add(f, a, b, r, &st); break;
    case 1: v = emu_sub(f, a, b, r, &st); break;
    case 2: v = emu_mul(f, a, b, r, &st); break;
    case 3: v = emu_div(f, a, b, r, &st); break;
    case 4: v = emu_fma(f, a, b, c, r, &st); break;
    default: v = emu_sqrt(f, a, r, &st); break;
    }
    put_status(out, v, &st);
}

/* add, sub, mul, div, fma, sqrt and conversions: every pair of e4m3
 * values, random binary16 and bfloat16 operands (subnormals included),
 * conversions of binary32 subnormals and of random binary32/64 patterns,
 * to and from integers, comparisons, classes and histogram bins of
 * subnormal doubles; every deterministic mode and two SR modes. */
static void work_scalar(records *out)
{
    const emu_format *e4m3 = test_format("e4m3");
    const emu_format *b32 = test_format("binary32");
    const char *const wide[] = { "binary16", "bfloat16" };
    for (int m = 0; m < MODES; m++) {
        emu_rounding r;
        emu_rng rng;
        mode_of(m, &r, &rng);
        for (uint32_t i = 0; i < 256; i++)
            for (uint32_t j = 0; j < 256; j++) {
                double a = emu_decode(e4m3, (emu_bits){ i });
                double b = emu_decode(e4m3, (emu_bits){ j });
                for (int op = 0; op < 4; op++)
                    scalar_op(out, e4m3, op, a, b, 0.0, &r);
            }
        for (int w = 0; w < 2; w++) {
            const emu_format *f = test_format(wide[w]);
            test_rng g = test_rng_make(1000 + (uint64_t)w);
            for (int k = 0; k < 3000; k++) {
                double a = random_value(&g, f), b = random_value(&g, f);
                double c = random_value(&g, f);
                for (int op = 0; op < 6; op++)
                    scalar_op(out, f, op, a, b, c, &r);
            }
            /* binary32 subnormals and random patterns into f */
            for (uint32_t k = 0; k < 4096; k++) {
                emu_status st = { 0, 0 };
                double x = emu_decode(b32, (emu_bits){ k << 11 | (k & 0x7FF) });
                put_status(out, emu_convert(f, x, &r, &st), &st);
                x = emu_decode(b32, test_random_bits(&g, b32));
                put_status(out, emu_convert(f, x, &r, &st), &st);
                x = double_of_bits(test_next(&g));
                put_status(out, emu_convert(f, x, &r, &st), &st);
                put(out, (uint64_t)emu_to_int(x, 32, &r, &st));
                put(out, st.flags);
                put_status(out, emu_from_int(f, (int64_t)test_next(&g) >> 20,
                                             &r, &st), &st);
                /* decisions on a subnormal double, which DAZ reads as 0 */
                double d = double_of_bits(test_next(&g) >> 13);
                put(out, (uint64_t)emu_eq(d, 0.0, &st) |
                         (uint64_t)emu_lt(0.0, d, &st) << 1 |
                         (uint64_t)emu_classify(f, d) << 2 |
                         (uint64_t)emu_representable(f, d) << 5 |
                         (uint64_t)emu_hist_bin(d) << 8);
                put_double(out, emu_max(d, -d));
                put_double(out, emu_next_up(f, emu_decode(f, (emu_bits){ k })));
            }
        }
    }
}

/* emu_round_array_f32 (binary16, bfloat16, e4m3, e5m2, e2m1) and _f64,
 * every mode, on binary32 subnormals and random patterns. */
static void work_array(records *out)
{
    const char *const names[] = { "binary16", "bfloat16", "e4m3", "e5m2",
                                  "e2m1" };
    enum { N = 3 * 4096 };
    float *in = malloc(N * sizeof *in), *res = malloc(N * sizeof *res);
    double *in64 = malloc(N * sizeof *in64), *res64 = malloc(N * sizeof *res64);
    ck_assert(in && res && in64 && res64);
    test_rng g = test_rng_make(7);
    for (uint32_t k = 0; k < 4096; k++) {
        in[k] = float_of_bits(k << 11 | (k * 2654435761u >> 21));
        in[4096 + k] = float_of_bits((uint32_t)test_next(&g));
        in[8192 + k] =
            float_of_bits(0x3F800000u + (uint32_t)(test_next(&g) >> 40));
        in64[k] = double_of_bits(test_next(&g) >> 12); /* subnormal */
        in64[4096 + k] = double_of_bits(test_next(&g));
        in64[8192 + k] = in[8192 + k];
    }
    for (size_t fi = 0; fi < sizeof names / sizeof *names; fi++) {
        const emu_format *f = test_format(names[fi]);
        for (int m = 0; m < MODES; m++) {
            emu_array_rounding a;
            memset(&a, 0, sizeof a);
            emu_rng unused;
            mode_of(m, &a.rnd, &unused);
            a.rnd.rng = NULL;
            a.seed = 5, a.stream = (uint64_t)m, a.first_index = 17;
            emu_round_counts c32, c64;
            memset(&c32, 0, sizeof c32);
            memset(&c64, 0, sizeof c64);
            ck_assert_int_eq(emu_round_array_f32(f, res, in, N, &a, &c32, NULL), 0);
            ck_assert_int_eq(emu_round_array_f64(f, res64, in64, N, &a, &c64, NULL),
                             0);
            put_floats(out, res, N);
            for (size_t i = 0; i < N; i++)
                put_double(out, res64[i]);
            put_words(out, &c32, sizeof c32);
            put_words(out, &c64, sizeof c64);
        }
    }
    free(in), free(res), free(in64), free(res64);
}

/* A measuring context with statistics. */
static void ctx_with_stats(emu_ctx *ctx, emu_stats *stats, double ref_rate)
{
    emu_ctx_init(ctx, 21);
    emu_stats_init(stats);
    ctx->stats = stats;
    ctx->measure = EMU_MEASURE_ALL;
    ctx->ref_rate = ref_rate;
}

static uint16_t every_pattern(size_t i, void *arg)
{
    (void)arg;
    return (uint16_t)i;
}

/* exp, log, tanh, sigmoid and gelu, binary16 -> binary16, every input. */
static void work_unary(records *out)
{
    const emu_format *h = test_format("binary16");
    const emu_unary fs[] = { EMU_UNARY_EXP, EMU_UNARY_LOG, EMU_UNARY_TANH,
                             EMU_UNARY_SIGMOID, EMU_UNARY_GELU };
    emu_error err;
    emu_tensor x, y;
    ck_assert_int_eq(emu_tensor_alloc4(&x, "x", EMU_ROLE_ACTIVATION, h, 65536,
                                       0, 0, 0, &err), 0);
    ck_assert_int_eq(emu_tensor_alloc4(&y, "y", EMU_ROLE_ACTIVATION, h, 65536,
                                       0, 0, 0, &err), 0);
    fill_16bit(&x, every_pattern, NULL);
    emu_ctx ctx;
    emu_stats stats;
    ctx_with_stats(&ctx, &stats, 0.01);
    for (size_t k = 0; k < sizeof fs / sizeof *fs; k++) {
        ck_assert_msg(!emu_t_unary(&ctx, emu_unary_name(fs[k]), &y, &x, fs[k],
                                   0.0f, 0.0f, &test_rne), "%s",
                      ctx.err.message);
        put_floats(out, y.data, y.n);
    }
    put_stats(out, &stats);
    emu_stats_free(&stats);
    emu_tensor_free(&x);
    emu_tensor_free(&y);
}

/* Any finite binary16 pattern: a wide spread, subnormals too. */
static uint16_t finite_pattern(size_t i, void *g)
{
    (void)i;
    uint16_t u;
    do
        u = (uint16_t)test_next(g);
    while ((u & 0x7C00) == 0x7C00);
    return u;
}

/* Magnitudes below 1, either sign. */
static uint16_t small_pattern(size_t i, void *g)
{
    return (uint16_t)(test_next(g) % 0x3C00 ^ (i & 1) << 15);
}

/* bfloat16 values near 2^-70 (either sign): their binary32 products lie
 * below 2^-126, where FTZ flushes host binary32 arithmetic. */
static uint16_t tiny_pattern(size_t i, void *g)
{
    uint64_t w = test_next(g);
    return (uint16_t)((57 + w % 4) << 7 | (w >> 8 & 0x7F) | (i & 1) << 15);
}

/* One matmul per accumulator model, two threads, every statistic and MPFR
 * samples: binary16 over its whole range, and bfloat16 whose products are
 * binary32 subnormals. */
static void work_gemm(records *out)
{
    const char *const models[] = {
        "sequential,acc=binary16", "pairwise,acc=bfloat16",
        "blocked,acc=e5m2,wide=binary32,block=8", "fused,acc=binary32,k=8,w=20",
        "kahan,acc=binary16", "exact", "fast",
        "sequential,acc=binary16,mode=sr",
    };
    enum { M = 24, K = 80, N = 20 };
    for (int pass = 0; pass < 2; pass++) {
        const emu_format *h = test_format(pass ? "bfloat16" : "binary16");
        emu_error err;
        emu_tensor a, b, c;
        ck_assert_int_eq(emu_tensor_alloc4(&a, "a", EMU_ROLE_ACTIVATION, h, M,
                                           K, 0, 0, &err), 0);
        ck_assert_int_eq(emu_tensor_alloc4(&b, "b", EMU_ROLE_WEIGHT, h, K, N,
                                           0, 0, &err), 0);
        ck_assert_int_eq(emu_tensor_alloc4(&c, "c", EMU_ROLE_ACTIVATION, h, M,
                                           N, 0, 0, &err), 0);
        test_rng g = test_rng_make(3);
        fill_16bit(&a, pass ? tiny_pattern : finite_pattern, &g);
        fill_16bit(&b, pass ? tiny_pattern : small_pattern, &g);
        for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
            emu_ctx ctx;
            emu_stats stats;
            ctx_with_stats(&ctx, &stats, 0.1);
            ctx.threads = 2;
            emu_accum accum;
            ck_assert_msg(!emu_accum_parse(&accum, models[k], &err), "%s",
                          err.message);
            const emu_matmul_opts o = { .accum = &accum };
            ck_assert_msg(!emu_t_matmul(&ctx, "mm", &c, &a, &b, &o, &test_rne),
                          "%s", ctx.err.message);
            put_floats(out, c.data, c.n);
            put_stats(out, &stats);
            emu_stats_free(&stats);
        }
        emu_tensor_free(&a), emu_tensor_free(&b), emu_tensor_free(&c);
    }
}

/* MX and NVFP4 quantization of values down to binary32 subnormals. */
static void work_scaled(records *out)
{
    const char *const specs[] = { "mxfp8", "mxfp4", "nvfp4", "mxfp6-e3m2" };
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x), *deq = malloc(N * sizeof *deq);
    ck_assert(x && deq);
    test_rng g = test_rng_make(11);
    for (uint32_t i = 0; i < N; i++) {
        /* blocks of one binade each, from subnormal to large */
        uint32_t e = (i / 32) * 2 % 250;
        x[i] = float_of_bits(e << 23 | (uint32_t)(test_next(&g) >> 41) |
                             (i & 1u) << 31);
    }
    for (size_t k = 0; k < sizeof specs / sizeof *specs; k++)
        for (int m = 0; m < 2; m++) {
            emu_error err;
            emu_scaled_format sf;
            emu_scaled_tensor q;
            ck_assert_msg(!emu_scaled_format_parse(&sf, specs[k], &err), "%s",
                          err.message);
            size_t shape[1] = { N };
            ck_assert_int_eq(emu_scaled_alloc(&q, &sf, 1, shape, -1, &err), 0);
            emu_quant_opts o;
            memset(&o, 0, sizeof o);
            o.mode = m ? EMU_RS_BITS : EMU_RNE;
            o.sr_bits = 9, o.seed = 4, o.stream = (uint64_t)k;
            emu_quant_counts c;
            memset(&c, 0, sizeof c);
            ck_assert_msg(!emu_scaled_quantize(&q, x, &o, &c, NULL, &err),
                          "%s", err.message);
            put_floats(out, q.elem, q.n);
            put_floats(out, q.scale, q.nblocks);
            put_floats(out, &q.tensor_scale, 1);
            put_words(out, &c, sizeof c);
            ck_assert_int_eq(emu_scaled_dequantize(&q, deq, false, &err), 0);
            put_floats(out, deq, N);
            for (size_t i = 0; i < N; i += 7)
                put_double(out, emu_scaled_value(&q, i));
            emu_scaled_free(&q);
        }
    free(x), free(deq);
}

/* Appends the bytes of a results file (for steps.csv, all but the last
 * column, the wall-clock time). */
static void put_file(records *out, const char *dir, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    bool timed = !strcmp(name, "steps.csv");
    char line[4096];
    while (fgets(line, sizeof line, fp)) {
        char *cut = timed ? strrchr(line, ',') : NULL;
        size_t n = cut ? (size_t)(cut - line) : strlen(line);
        put_words(out, line, n);
    }
    fclose(fp);
    remove(path);
}

/* A few steps of the MLP on the embedded data, binary16 with loss
 * scaling and master weights, MPFR sampling on: losses, statistics and
 * every histogram as the run's files hold them. */
static void work_train(records *out)
{
    char dir[] = "/tmp/emu_host_env_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    emu_train_config cfg;
    emu_train_config_default(&cfg);
    snprintf(cfg.arch, sizeof cfg.arch, "mlp:784-32-10");
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s", dir);
    cfg.train_examples = 256, cfg.test_examples = 64;
    cfg.max_steps = 5, cfg.batch = 32;
    cfg.stats_every = 1, cfg.ref_rate = 0.01;
    cfg.force = true, cfg.quiet = true;
    emu_policy p;
    emu_error err;
    ck_assert_msg(!emu_policy_preset(&p, "fp16-mpt", &err), "%s", err.message);
    FILE *log = fopen("/dev/null", "w");
    ck_assert_msg(!emu_train(&cfg, &p, log, &err), "%s", err.message);
    fclose(log);
    const char *const files[] = { "steps.csv", "ops.csv", "hist.csv",
                                  "ops_steps.csv", "layers_steps.csv",
                                  "eval.csv", "ops.json" };
    for (size_t k = 0; k < sizeof files / sizeof *files; k++)
        put_file(out, dir, files[k]);
    const char *const others[] = { "meta.json", "checkpoint.bin",
                                   "summary.txt" };
    for (size_t k = 0; k < sizeof others / sizeof *others; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, others[k]);
        remove(path);
    }
    rmdir(dir);
}

/* ---- the comparison ------------------------------------------------------ */

enum { W_SCALAR, W_ARRAY, W_UNARY, W_GEMM, W_SCALED, W_TRAIN, W_COUNT };
static void (*const workloads[W_COUNT])(records *) = {
    work_scalar, work_array, work_unary, work_gemm, work_scaled, work_train,
};
static const char *const workload_names[W_COUNT] = {
    "scalar", "array", "unary", "gemm", "scaled", "train",
};
static records reference[W_COUNT];

static void run_in(int w, int e, records *out)
{
    unsigned set = env_enter(e);
    workloads[w](out);
    unsigned now = env_now();
    env_leave();
    ck_assert_msg(now == set, "%s under %s: the caller's state was %#x, is "
                  "%#x after the calls", workload_names[w], env_names[e], set,
                  now);
}

static void check_workload(int w, int e)
{
    if (!reference[w].n)
        run_in(w, ENV_DEFAULT, &reference[w]);
    records got = { NULL, 0, 0 };
    run_in(w, e, &got);
    const records *ref = &reference[w];
    size_t diff = 0, first = SIZE_MAX;
    size_t n = got.n < ref->n ? got.n : ref->n;
    for (size_t i = 0; i < n; i++)
        if (got.v[i] != ref->v[i]) {
            diff++;
            if (first == SIZE_MAX)
                first = i;
        }
    if (diff || got.n != ref->n)
        fprintf(stderr, "%s under %s: %zu of %zu records differ (first at "
                "%zu: %#llx, default %#llx); %zu records, default %zu\n",
                workload_names[w], env_names[e], diff, n, first,
                first < n ? (unsigned long long)got.v[first] : 0ull,
                first < n ? (unsigned long long)ref->v[first] : 0ull, got.n,
                ref->n);
    free(got.v);
    ck_assert_msg(diff == 0 && got.n == ref->n,
                  "%s under %s: %zu of %zu records differ", workload_names[w],
                  env_names[e], diff, n);
}

/* Loop index: workload * ENV_COUNT + environment (the default included,
 * which checks that the reference run is itself reproducible). */
START_TEST(test_same_results)
{
    int w = _i / ENV_COUNT, e = _i % ENV_COUNT;
#if !HAVE_MXCSR
    if (e >= ENV_FTZ)
        return; /* no portable way to set FTZ/DAZ or traps here */
#endif
    check_workload(w, e);
}
END_TEST

/* The scalar API from a hostile caller, one call at a time: the slow path
 * of the guard restores the caller's flags too. */
START_TEST(test_flags_restored)
{
    const emu_format *h = test_format("binary16");
    env_enter(ENV_ALL);
    feclearexcept(FE_ALL_EXCEPT);
    emu_status st;
    double v = emu_div(h, 1.0, 3.0, NULL, &st); /* inexact inside */
    int raised = fetestexcept(FE_ALL_EXCEPT);
    env_leave();
    ck_assert_msg(raised == 0, "flags %#x leaked out of the call", raised);
    ck_assert(st.flags & EMU_FLAG_INEXACT);
    ck_assert(v > 0.33 && v < 0.34);
}
END_TEST

static Suite *host_env_suite(void)
{
    Suite *s = suite_create("host_env");
    TCase *tc = tcase_create("workloads");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, test_same_results, 0, W_COUNT * ENV_COUNT);
    tcase_add_test(tc, test_flags_restored);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(host_env_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int w = 0; w < W_COUNT; w++)
        free(reference[w].v);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
