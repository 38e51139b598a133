/*
 * bench_gemm.c — speed of emulated matrix products (emu_t_matmul) under
 * each accumulator model, against a plain binary32 triple loop built with
 * the same flags and, when available, OpenBLAS sgemm in the same run.
 *
 *   cmake --build build --target bench_gemm
 *   OPENBLAS_NUM_THREADS=1 ./build/bench/bench_gemm [options]
 *
 * Options:
 *   --sizes 256,512     square sizes M = N = K
 *   --formats LIST      input formats (default binary16,bfloat16,e4m3)
 *   --models LIST       model names from the table below (default: all)
 *   --threads T         ctx->threads (default 1)
 *   --reps R            repetitions of the faster runs; the best is kept
 *   --ref-rate X        MPFR sampling rate of the "ref" column (default 1/1024)
 *   --quick             one size (256), binary16 only
 *   --guard-sizes LIST  sizes of the host-guard rows (default 8,32,128;
 *                       "none" leaves them out)
 *
 * Columns, in GMAC/s (M N K multiply-adds per second; CPU time of the
 * process, so that a loaded machine skews less; with threads > 1 it is
 * wall time):
 *   off     statistics off (ctx->stats NULL)
 *   on      counters and histograms at the choke point
 *   swamp   on + swamping counts inside the accumulator
 *   ref     swamp + MPFR reference on a sample of outputs (--ref-rate)
 * and the ratios off/loop (the plain loop) and off/sgemm.  The inputs are
 * already rounded into their format; the output is binary32 or the input
 * format.  At the end, the measured cost of one MPFR-sampled output gives
 * the sampling rate that keeps the ref column within 2x of swamp.
 *
 * The host-guard rows time one model (seq-b16, counters and histograms
 * on, binary16 in and out) with the calling thread in the default
 * floating-point state (the guard's fast path) and in a hostile one
 * (upward, FTZ, DAZ: the slow path, state saved, set and restored per
 * call), small sizes first, where the per-call cost would show.  Build
 * with -DEMU_HOSTFP_GUARD=OFF to compare with a library without the guard.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <emu/emu.h>

#include "bench_util.h"

#ifdef BENCH_HAVE_CBLAS
#include <cblas.h>
#endif

typedef struct model_row {
    const char *name;
    const char *spec;
    bool slow;   /* per-dot emulation: one repetition, no stats variants */
} model_row;

static const model_row models[] = {
    { "seq-b16", "sequential,acc=binary16", false },
    { "seq-bf16", "sequential,acc=bfloat16", false },
    { "seq-b32", "sequential,acc=binary32", false },
    { "seq-b32-rz", "sequential,acc=binary32,mode=rz", false },
    { "blocked", "blocked,acc=bfloat16,wide=binary32,block=128", false },
    { "pairwise", "pairwise,acc=binary32", true },
    { "fused", "fused,acc=binary32,k=16,w=25", true },
    { "kahan", "kahan,acc=binary16", true },
    { "exact", "exact", true },
    { "seq-sr", "sequential,acc=bfloat16,mode=sr", true },
    { "fast", "fast", false },
};
enum { N_MODELS = sizeof models / sizeof models[0] };

static double cpu_now(int threads)
{
    struct timespec t;
    clock_gettime(threads > 1 ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Deterministic standard normal values (xorshift + Box-Muller): the bench
 * needs no statistical quality, only the same data every run. */
static uint64_t xs_state = 0x9e3779b97f4a7c15ull;
static double uniform(void)
{
    xs_state ^= xs_state << 13;
    xs_state ^= xs_state >> 7;
    xs_state ^= xs_state << 17;
    return ((double)(xs_state >> 11) + 0.5) * 0x1p-53;
}

static void normal_fill(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()));
}

/* C = A B, the loop any C programmer writes (i-k-j: unit stride inside). */
static void plain_sgemm(size_t n, const float *a, const float *b, float *c)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++)
            c[i * n + j] = 0.0f;
        for (size_t k = 0; k < n; k++) {
            float x = a[i * n + k];
            for (size_t j = 0; j < n; j++)
                c[i * n + j] += x * b[k * n + j];
        }
    }
}

static bool in_list(const char *list, const char *name)
{
    if (!list)
        return true;
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && !strncmp(p, name, len))
            return true;
        p += l + (e != NULL);
    }
    return false;
}

typedef struct bench {
    int threads, reps;
    double ref_rate;
    emu_stats stats;
} bench;

enum { COL_OFF, COL_ON, COL_SWAMP, COL_REF, N_COLS };

/* Every rounding here is nearest-even: what is timed is the accumulator. */
static const emu_rounding rne = { .mode = EMU_RNE, .sr_bits = 64 };

/* Best time of reps runs of out = a b under ctx settings for column col. */
static double time_matmul(bench *B, const emu_accum *acc, int col,
                          emu_tensor *out, const emu_tensor *a,
                          const emu_tensor *b, int reps)
{
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    const emu_matmul_opts o = { .accum = acc };
    ctx.threads = B->threads;
    ctx.stats = col == COL_OFF ? NULL : &B->stats;
    ctx.measure = EMU_MEASURE_COUNTS | EMU_MEASURE_HIST;
    if (col >= COL_SWAMP)
        ctx.measure |= EMU_MEASURE_SWAMP;
    if (col == COL_REF) {
        ctx.measure |= EMU_MEASURE_REF;
        ctx.ref_rate = B->ref_rate;
    }
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now(B->threads);
        if (emu_t_matmul(&ctx, "bench.matmul", out, a, b, &o, &rne)) {
            char msg[700];
            emu_error_format(&ctx.err, msg, sizeof msg);
            fprintf(stderr, "matmul failed: %s\n", msg);
            exit(1);
        }
        double t = cpu_now(B->threads) - t0;
        if (t < best)
            best = t;
    }
    return best;
}

static void die_err(const emu_error *e)
{
    char msg[700];
    emu_error_format(e, msg, sizeof msg);
    fprintf(stderr, "bench_gemm: %s\n", msg);
    exit(1);
}

/* The guard's cost on a size-n seq-b16 matmul: best of reps in the default
 * and in the hostile state, interleaved. */
static void guard_row(bench *B, size_t n)
{
    const emu_format *h = emu_format_find("binary16");
    emu_error err;
    emu_tensor a, b, c;
    if (emu_tensor_alloc4(&a, "A", EMU_ROLE_ACTIVATION, h, n, n, 0, 0, &err) ||
        emu_tensor_alloc4(&b, "B", EMU_ROLE_WEIGHT, h, n, n, 0, 0, &err) ||
        emu_tensor_alloc4(&c, "C", EMU_ROLE_ACTIVATION, h, n, n, 0, 0, &err))
        die_err(&err);
    float *x = malloc(n * n * sizeof *x);
    normal_fill(x, n * n);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    if (emu_t_load(&ctx, "bench.a", &a, x, n * n, &rne) ||
        emu_t_load(&ctx, "bench.b", &b, x, n * n, &rne))
        die_err(&ctx.err);
    emu_accum acc;
    if (emu_accum_parse(&acc, "sequential,acc=binary16", &err))
        die_err(&err);
    /* enough calls per timing that the clock's resolution does not matter */
    int calls = n >= 128 ? 1 : (int)(128 * 128 * 128 / (n * n * n));
    double best[2] = { INFINITY, INFINITY };
    for (int r = 0; r < B->reps + 2; r++)
        for (int hostile = 0; hostile < 2; hostile++) {
            if (hostile)
                bench_host_hostile();
            double t = 0.0;
            for (int k = 0; k < calls; k++)
                t += time_matmul(B, &acc, COL_ON, &c, &a, &b, 1);
            bench_host_default();
            best[hostile] = t < best[hostile] ? t : best[hostile];
        }
    const double macs = (double)n * (double)n * (double)n * calls;
    printf("%-6zu %6d %12.3f %12.3f %8.3fx\n", n, calls, macs / best[0] * 1e-9,
           macs / best[1] * 1e-9, best[1] / best[0]);
    free(x);
    emu_tensor_free(&a), emu_tensor_free(&b), emu_tensor_free(&c);
}

int main(int argc, char **argv)
{
    const char *sizes = "256,512", *formats = "binary16,bfloat16,e4m3";
    const char *model_list = NULL, *guard_sizes = "8,32,128";
    bench B = { .threads = 1, .reps = 3, .ref_rate = 1.0 / 1024 };
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--quick")) {
            sizes = "256";
            formats = "binary16";
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_gemm: %s needs a value (see the file's "
                    "header comment)\n", o);
            return 2;
        }
        i++;
        if (!strcmp(o, "--sizes"))
            sizes = v;
        else if (!strcmp(o, "--formats"))
            formats = v;
        else if (!strcmp(o, "--models"))
            model_list = v;
        else if (!strcmp(o, "--guard-sizes"))
            guard_sizes = v;
        else if (!strcmp(o, "--threads"))
            B.threads = atoi(v) > 0 ? atoi(v) : 1;
        else if (!strcmp(o, "--reps"))
            B.reps = atoi(v) > 0 ? atoi(v) : 1;
        else if (!strcmp(o, "--ref-rate"))
            B.ref_rate = atof(v);
        else {
            fprintf(stderr, "bench_gemm: unknown option %s\n", o);
            return 2;
        }
    }
    emu_stats_init(&B.stats);
    const emu_format *b32 = emu_format_find("binary32");
    printf("bench_gemm: threads %d, reps %d, ref_rate %g; GMAC/s from %s time\n",
           B.threads, B.reps, B.ref_rate,
           B.threads > 1 ? "wall" : "process CPU");
#ifdef BENCH_HAVE_CBLAS
    printf("OpenBLAS: %s (set OPENBLAS_NUM_THREADS=1 for one core)\n",
           openblas_get_config());
#endif

    double sample_cost = 0.0; /* seconds per MPFR-sampled output, largest K */
    double per_output = 0.0;  /* seconds per output of seq-bf16, swamp column */
    size_t sample_k = 0;
    bool first_size = true;
    for (const char *sp = sizes; *sp;) {
        size_t n = (size_t)strtoul(sp, NULL, 10);
        const char *comma = strchr(sp, ',');
        sp = comma ? comma + 1 : sp + strlen(sp);
        if (n == 0)
            continue;
        const double macs = (double)n * (double)n * (double)n;
        float *sa = malloc(n * n * sizeof *sa), *sb = malloc(n * n * sizeof *sb);
        float *sc = malloc(n * n * sizeof *sc);
        normal_fill(sa, n * n);
        normal_fill(sb, n * n);

        double t_loop = INFINITY, t_blas = NAN;
        for (int r = 0; r < B.reps; r++) {
            double t0 = cpu_now(1);
            plain_sgemm(n, sa, sb, sc);
            double t = cpu_now(1) - t0;
            t_loop = t < t_loop ? t : t_loop;
        }
#ifdef BENCH_HAVE_CBLAS
        t_blas = INFINITY;
        for (int r = 0; r < B.reps + 2; r++) {
            double t0 = cpu_now(B.threads);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n,
                        (blasint)n, (blasint)n, 1.0f, sa, (blasint)n, sb,
                        (blasint)n, 0.0f, sc, (blasint)n);
            double t = cpu_now(B.threads) - t0;
            t_blas = t < t_blas ? t : t_blas;
        }
#endif
        printf("\n== M = N = K = %zu: plain binary32 loop %.3f GMAC/s, "
               "OpenBLAS sgemm %.3f GMAC/s\n", n, macs / t_loop * 1e-9,
               macs / t_blas * 1e-9);
        printf("%-9s %-9s %-11s %8s %8s %8s %8s %9s %9s\n", "input", "output",
               "model", "off", "on", "swamp", "ref", "off/loop", "off/sgemm");

        for (const char *fp = formats; *fp;) {
            const char *fc = strchr(fp, ',');
            char fname[64];
            size_t fl = fc ? (size_t)(fc - fp) : strlen(fp);
            snprintf(fname, sizeof fname, "%.*s", (int)fl, fp);
            fp += fl + (fc != NULL);
            emu_format fin;
            emu_error err;
            if (emu_format_resolve(&fin, fname, &err))
                die_err(&err);
            emu_tensor a, b, srcA, srcB;
            if (emu_tensor_alloc4(&a, "A", EMU_ROLE_ACTIVATION, &fin, n, n, 0, 0, &err) ||
                emu_tensor_alloc4(&b, "B", EMU_ROLE_WEIGHT, &fin, n, n, 0, 0, &err) ||
                emu_tensor_alloc4(&srcA, "A32", EMU_ROLE_ACTIVATION, b32, n, n, 0, 0, &err) ||
                emu_tensor_alloc4(&srcB, "B32", EMU_ROLE_WEIGHT, b32, n, n, 0, 0, &err))
                die_err(&err);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 1);
            if (emu_t_load(&ctx, "bench.a", &a, sa, n * n, &rne) ||
                emu_t_load(&ctx, "bench.b", &b, sb, n * n, &rne) ||
                emu_t_load(&ctx, "bench.a32", &srcA, sa, n * n, &rne) ||
                emu_t_load(&ctx, "bench.b32", &srcB, sb, n * n, &rne))
                die_err(&ctx.err);

            for (int oi = 0; oi < 2; oi++) {
                const emu_format *fout = oi == 0 ? b32 : &fin;
                if (oi == 1 && !strcmp(fin.name, "binary32"))
                    continue;
                emu_tensor out;
                if (emu_tensor_alloc4(&out, "C", EMU_ROLE_ACTIVATION, fout, n, n, 0, 0, &err))
                    die_err(&err);
                for (int mi = 0; mi < N_MODELS; mi++) {
                    const model_row *m = &models[mi];
                    if (!in_list(model_list, m->name))
                        continue;
                    emu_accum acc;
                    if (emu_accum_parse(&acc, m->spec, &err))
                        die_err(&err);
                    double t[N_COLS];
                    for (int c = 0; c < N_COLS; c++)
                        t[c] = NAN;
                    int reps = m->slow ? 1 : B.reps;
                    /* Statistics variants with the binary32 output only; the
                     * slow models only at the smallest size asked. */
                    bool variants = oi == 0 && (!m->slow || first_size);
                    for (int c = 0; c < N_COLS; c++) {
                        if (c > COL_OFF && !variants)
                            break;
                        t[c] = time_matmul(&B, &acc, c, &out, &a, &b, reps);
                    }
                    if (variants && !strcmp(m->name, "seq-bf16") &&
                        n >= sample_k) {
                        /* Cost per sample: about 4096 outputs sampled. */
                        double saved = B.ref_rate;
                        B.ref_rate = 4096.0 / ((double)n * n);
                        double tr = time_matmul(&B, &acc, COL_REF, &out, &a, &b, 1);
                        B.ref_rate = saved;
                        sample_cost = (tr - t[COL_SWAMP]) / 4096.0;
                        per_output = t[COL_SWAMP] / ((double)n * n);
                        sample_k = n;
                    }
                    printf("%-9s %-9s %-11s", fin.name, fout->name, m->name);
                    for (int c = 0; c < N_COLS; c++)
                        if (isnan(t[c]))
                            printf(" %8s", "-");
                        else
                            printf(" %8.3f", macs / t[c] * 1e-9);
                    printf(" %9.3f %9.3f\n", t_loop / t[COL_OFF],
                           t_blas / t[COL_OFF]);
                    if (!strcmp(m->name, "fast") && oi == 1) {
                        /* The fast model end to end: round the binary32
                         * sources into the input format, multiply, round. */
                        double best = INFINITY;
                        emu_ctx fctx;
                        emu_ctx_init(&fctx, 1);
                        const emu_matmul_opts fo = { .accum = &acc };
                        fctx.threads = B.threads;
                        for (int r = 0; r < B.reps; r++) {
                            double t0 = cpu_now(B.threads);
                            if (emu_t_cast(&fctx, "bench.qa", &a, &srcA, &rne) ||
                                emu_t_cast(&fctx, "bench.qb", &b, &srcB, &rne) ||
                                emu_t_matmul(&fctx, "bench.mm", &out, &a, &b,
                                             &fo, &rne))
                                die_err(&fctx.err);
                            double tt = cpu_now(B.threads) - t0;
                            best = tt < best ? tt : best;
                        }
                        printf("%-9s %-9s %-11s %8.3f %8s %8s %8s %9.3f %9.3f"
                               "   (casts in + matmul + rounding out)\n",
                               fin.name, fout->name, "fast+casts",
                               macs / best * 1e-9, "-", "-", "-",
                               t_loop / best, t_blas / best);
                    }
                    fflush(stdout);
                }
                emu_tensor_free(&out);
            }
            emu_tensor_free(&a);
            emu_tensor_free(&b);
            emu_tensor_free(&srcA);
            emu_tensor_free(&srcB);
        }
        free(sa);
        free(sb);
        free(sc);
        first_size = false;
    }
    if (sample_k && sample_cost > 0.0) {
        printf("\nMPFR reference at K = %zu: %.1f us per sampled output; "
               "seq-bf16 with swamping counts spends %.3f us per output.\n",
               sample_k, sample_cost * 1e6, per_output * 1e6);
        printf("Sampling rates that keep a %zu^3 seq-bf16 matmul within 2x / "
               "1.2x of its unsampled time: %.2g / %.2g\n", sample_k,
               per_output / sample_cost, 0.2 * per_output / sample_cost);
    }
    if (strcmp(guard_sizes, "none")) {
        printf("\nhost guard, seq-b16 binary16 -> binary16, counters on: "
               "caller in the default state vs upward+FTZ+DAZ\n"
               "%-6s %6s %12s %12s %9s\n", "n", "calls", "default GMAC",
               "hostile GMAC", "ratio");
        for (const char *sp = guard_sizes; *sp;) {
            size_t n = (size_t)strtoul(sp, NULL, 10);
            const char *comma = strchr(sp, ',');
            sp = comma ? comma + 1 : sp + strlen(sp);
            if (n)
                guard_row(&B, n);
        }
    }
    emu_stats_free(&B.stats);
    return 0;
}
