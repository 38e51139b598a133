/*
 * bench_quant.c — throughput of block-scaled quantization (MX, NVFP4,
 * per-tensor FP8) against memcpy of the same array, measured in the same
 * run.
 *
 * Data: 2^22 binary32 values as a (rows, 1024) matrix, activations-like
 * (normal, standard deviation 1, with one block in 64 carrying outliers
 * 100 times larger).  Every row quantizes the whole matrix along its last
 * axis (the layout of an activation before a GEMM), single-threaded, best
 * of several repetitions; "stats" rows also collect the per-block
 * counts and exact errors.  Rows "fn" call emu_scaled_quantize, rows "op"
 * the op emu_t_quantize_scaled: without statistics (its fast paths and
 * the choke point's bookkeeping) and with a statistics site (the choke
 * point rounding, counting and binning every element; ref_rate 0, as in
 * training).  memcpy of the array is the reference (its best time over
 * the whole run).
 *
 * --cpu times both the rows and memcpy in this thread's CPU time, not wall
 * time: on a machine shared with other jobs, a wall-clock best of R still
 * varies run to run by 2-4x, the CPU time much less.
 *
 * Usage: bench_quant [--csv] [--cpu] [--log2n N] [--reps R] [--only SPEC]
 *                    [--mode rne|sr] [--fn] (only that mode; only "fn" rows
 *                    without statistics: for profiling one path)
 * A program, not a test: it is never registered with CTest.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime: --cpu */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <emu/emu.h>

#include "bench_util.h"

static int use_cpu;

/* Seconds: wall time, or this thread's CPU time with --cpu. */
static double now(void)
{
    if (!use_cpu)
        return bench_now();
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The best of `reps` copies of n binary32 values, on now()'s clock. */
static double best_memcpy(float *dst, const float *src, size_t n, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now();
        memcpy(dst, src, n * sizeof *src);
        t = now() - t;
        best = t < best ? t : best;
    }
    return best;
}

static void make_data(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double z = sqrt(-2.0 * log(bench_uniform(0x9a47, 2, 2 * i))) *
                   cos(6.283185307179586 * bench_uniform(0x9a47, 2, 2 * i + 1));
        x[i] = (float)((i / 32) % 64 == 7 ? 100.0 * z : z);
    }
}

typedef struct row {
    const char *spec, *mode, *via;
    bool stats;
    double melem;
} row;

/* One quantization through the op, with a statistics site if st. */
static int quantize_op(emu_scaled_tensor *q, emu_tensor *x,
                       const emu_quant_opts *o, bool st, emu_error *err)
{
    emu_ctx ctx;
    emu_ctx_init(&ctx, o->seed);
    const emu_rounding rnd = { .mode = o->mode, .sr_bits = o->sr_bits };
    emu_stats stats;
    emu_stats_init(&stats);
    ctx.stats = st ? &stats : NULL;
    int rc = emu_t_quantize_scaled(&ctx, "q", q, x, NULL, NULL, &rnd);
    if (rc)
        *err = ctx.err;
    emu_stats_free(&stats);
    return rc;
}

int main(int argc, char **argv)
{
    int csv = 0, log2n = 22, reps = 5;
    const char *only = NULL, *only_mode = NULL;
    int fn_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv"))
            csv = 1;
        else if (!strcmp(argv[i], "--cpu"))
            use_cpu = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc)
            only_mode = argv[++i];
        else if (!strcmp(argv[i], "--fn"))
            fn_only = 1;
        else if (!strcmp(argv[i], "--log2n") && i + 1 < argc)
            log2n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_quant [--csv] [--cpu] [--log2n N] [--reps R] "
                            "[--only SPEC] [--mode rne|sr] [--fn]\n");
            return 2;
        }
    }
    if (log2n < 12 || log2n > 26 || reps < 1) {
        fprintf(stderr, "bench_quant: --log2n in 12..26, --reps >= 1\n");
        return 2;
    }
    const size_t n = (size_t)1 << log2n, cols = 1024;
    const size_t shape[2] = { n / cols, cols };
    float *src = malloc(n * sizeof *src), *dst = malloc(n * sizeof *dst);
    if (!src || !dst) {
        fprintf(stderr, "bench_quant: out of memory\n");
        return 1;
    }
    make_data(src, n);
    memset(dst, 0, n * sizeof *dst);

    static const char *const specs[] = { "mxfp8", "mxfp8-e5m2", "mxfp6-e3m2",
                                         "mxfp4", "mxint8", "nvfp4",
                                         "elem=e4m3,scale=none,tensor=yes" };
    static const char *const modes[] = { "rne", "sr" };
    enum { NS = sizeof specs / sizeof specs[0], NM = 2 };
    row rows[NS * NM * 4];
    emu_tensor xt = { .role = EMU_ROLE_ACTIVATION, .ndim = 2,
                      .shape = { shape[0], shape[1] }, .n = n, .data = src };
    xt.fmt = *emu_format_find("binary32");
    size_t nrows = 0;
    double t_copy = best_memcpy(dst, src, n, reps);
    for (size_t si = 0; si < NS; si++) {
        emu_scaled_format sf;
        emu_error err;
        if (only && strcmp(only, specs[si]))
            continue;
        if (emu_scaled_format_parse(&sf, specs[si], &err)) {
            fprintf(stderr, "bench_quant: %s: %s\n", specs[si], err.message);
            return 1;
        }
        emu_scaled_tensor q;
        if (emu_scaled_alloc(&q, &sf, 2, shape, 1, &err)) {
            fprintf(stderr, "bench_quant: %s\n", err.message);
            return 1;
        }
        for (int mi = 0; mi < NM; mi++)
            for (int st = 0; st < 4; st++) {
                const bool op = st >= 2, stats = st & 1;
                if ((only_mode && strcmp(only_mode, modes[mi])) ||
                    (fn_only && st != 0))
                    continue;
                emu_quant_opts o;
                memset(&o, 0, sizeof o);
                unsigned bits;
                emu_rnd_parse(modes[mi], &o.mode, &bits);
                o.sr_bits = bits;
                o.seed = 7;
                double best = 1e30;
                for (int r = 0; r < reps; r++) {
                    emu_quant_counts c;
                    memset(&c, 0, sizeof c);
                    double t = now();
                    int rc = op ? quantize_op(&q, &xt, &o, stats, &err)
                                : emu_scaled_quantize(&q, src, &o,
                                                      stats ? &c : NULL, NULL,
                                                      &err);
                    t = now() - t;
                    if (rc) {
                        fprintf(stderr, "bench_quant: %s\n", err.message);
                        return 1;
                    }
                    best = t < best ? t : best;
                }
                rows[nrows++] = (row){ specs[si], modes[mi],
                                       op ? "op" : "fn", stats,
                                       (double)n / best * 1e-6 };
            }
        emu_scaled_free(&q);
        double t = best_memcpy(dst, src, n, reps);
        t_copy = t < t_copy ? t : t_copy;
    }
    const double copy = (double)n / t_copy * 1e-6;
    if (csv)
        printf("format,mode,via,stats,melem_per_s,pct_of_memcpy,memcpy_melem_per_s\n");
    else
        printf("n = 2^%d binary32 values as (%zu, %zu), blocks along the last "
               "axis, best of %d, single thread, %s time\nmemcpy: %.0f "
               "Melem/s\n\n"
               "%-32s %-4s %-3s %-5s %9s %8s\n", log2n, shape[0], shape[1],
               reps, use_cpu ? "CPU" : "wall", copy, "format", "mode", "via",
               "stats", "Melem/s",
               "%memcpy");
    for (size_t i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (csv)
            printf("\"%s\",%s,%s,%d,%.1f,%.2f,%.1f\n", r->spec, r->mode,
                   r->via, r->stats, r->melem, 100.0 * r->melem / copy, copy);
        else
            printf("%-32s %-4s %-3s %-5s %9.1f %7.1f%%\n", r->spec, r->mode,
                   r->via, r->stats ? "yes" : "no", r->melem,
                   100.0 * r->melem / copy);
    }
    free(src);
    free(dst);
    return 0;
}
