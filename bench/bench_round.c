/*
 * bench_round.c — throughput of the array rounding, the hot path of every
 * tensor op, against memcpy of the same array and against the MPFR
 * recipe that the oracle uses.
 *
 * Data: 2^24 binary32 values shaped like gradients: log2|x| normal with
 * mean -12 and standard deviation 8, random signs, 5% exact zeros, so a
 * good share falls below the 8-bit formats' normal range (and some above
 * it).  Every row rounds the whole array out of place, single-threaded,
 * with counts (as the tensor choke point always asks), best of several
 * repetitions; memcpy of the same array is the reference.  The MPFR
 * figure (the oracle's recipe, nearest-even) is measured on a slice of
 * --mpfr-n elements; its throughput stands for the whole array.
 *
 * A second reference is a plain loop that rounds into bfloat16 to nearest
 * even with the classic bit trick (add 0x7fff plus the last kept bit,
 * NaNs made quiet), without counts: about what a hand-written conversion
 * costs, timed in the same run.  The library's kernels run at the
 * instruction-set level isa.c chooses (EMU_ISA=baseline|avx2|avx512 forces
 * one); the header line names it.
 *
 * A second table times binary64 input, the values the tensor choke point
 * sends to emu_round_array_f64 (an optimizer's new weights: binary32
 * values plus an update, not binary32 values any more), shaped as the
 * array above with random bits below binary32's precision; and pairs
 * hi + lo (an optimizer's exact sums) under stochastic rounding, through
 * the library-private kernel the choke point uses for them, beside the
 * scalar choke point applied per element (what the kernel replaced).
 * Their memcpy reference copies the binary64 input (8 bytes an element).
 *
 * The host-guard rows time the same rounding with the calling thread in
 * the default floating-point state (the guard's fast path: one MXCSR read
 * per call) and in a hostile one (upward, FTZ, DAZ: every call saves,
 * sets and restores the state), as one array per call, as 256 elements
 * per call, and as one scalar emu_round per element; --no-guard-rows
 * leaves them out.  Build with -DEMU_HOSTFP_GUARD=OFF to compare the
 * default-state figures with a library without the guard.
 *
 * Usage: bench_round [--csv] [--log2n N] [--reps R] [--mpfr-n N]
 *                    [--no-guard-rows] [--cpu]
 * --cpu times the rows (memcpy and the bit trick included) with the
 * process's CPU clock: the figure to use on a machine shared with others.
 * A program, not a test: it is never registered with CTest.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpfr.h>

#include <emu/emu.h>

#include "bench_util.h"
#ifndef BENCH_OLD_LIB
#include "internal.h" /* emu_round_pairs_f32_unguarded, emu_round2_word */
#endif

/* BENCH_OLD_LIB: built against a library from before the ISA levels. */
#ifdef BENCH_OLD_LIB
#define BENCH_KERNEL_ISA() "clones"
#else
#define BENCH_KERNEL_ISA() emu_round_kernel_isa()
#endif

static void make_data(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double u1 = bench_uniform(0xbe7c4, 1, 3 * i);
        double u2 = bench_uniform(0xbe7c4, 1, 3 * i + 1);
        double sel = bench_uniform(0xbe7c4, 1, 3 * i + 2);
        if (sel < 0.05) {
            x[i] = 0.0f;
            continue;
        }
        /* Box-Muller: one standard normal per element. */
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        double v = exp2(-12.0 + 8.0 * z);
        x[i] = (float)(sel < 0.525 ? -v : v);
    }
}

typedef struct row {
    const char *fmt, *mode;
    double melem;
} row;

/* --cpu: time with the process's CPU clock instead of the wall clock.  On
 * a machine shared with other jobs the wall time of a pass counts the
 * time slices others got; the CPU time does not (memory bandwidth is still
 * shared).  The program runs one thread, so process time is its time. */
static int use_cpu_clock;

static double clock_now(void)
{
    return use_cpu_clock ? (double)clock() / CLOCKS_PER_SEC : bench_now();
}

/* memcpy, timed with clock_now(). */
static double best_memcpy(float *dst, const float *src, size_t n, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = clock_now();
        memcpy(dst, src, n * sizeof *src);
        t = clock_now() - t;
        best = t < best ? t : best;
    }
    return best;
}

/* The bit-trick reference: binary32 into bfloat16, nearest-even, in
 * blocks of fixed length so that GCC's -O2 cost model vectorises them. */
static uint32_t bf16_rne_bits(uint32_t u)
{
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    uint32_t quiet = u | 0x00400000u;
    return (((0u - nan) & quiet) | ((nan - 1u) & rounded)) & 0xffff0000u;
}

static void bf16_bit_trick(float *restrict dst, const float *restrict src,
                           size_t n)
{
    enum { B = 1024 };
    size_t i = 0;
    for (; i + B <= n; i += B)
        for (size_t j = 0; j < B; j++) {
            uint32_t u;
            memcpy(&u, src + i + j, 4);
            u = bf16_rne_bits(u);
            memcpy(dst + i + j, &u, 4);
        }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, 4);
        u = bf16_rne_bits(u);
        memcpy(dst + i, &u, 4);
    }
}

static double best_bit_trick(float *dst, const float *src, size_t n, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = clock_now();
        bf16_bit_trick(dst, src, n);
        t = clock_now() - t;
        best = t < best ? t : best;
    }
    return best;
}

static double best_round(const emu_format *f, const emu_array_rounding *a,
                         float *dst, const float *src, size_t n, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        emu_round_counts c = { 0 };
        double t = clock_now();
        emu_round_array_f32(f, dst, src, n, a, &c, NULL);
        t = clock_now() - t;
        if (t < best)
            best = t;
        if (c.n != n) {
            fprintf(stderr, "bench_round: counts.n %llu != %zu\n",
                    (unsigned long long)c.n, n);
            exit(1);
        }
    }
    return best;
}

/* The oracle's recipe for converting into a p-bit format: round to p bits
 * in MPFR's default exponent range, then narrow the range and
 * subnormalize (see DESIGN/STYLE).  Returns seconds for n elements. */
static double mpfr_recipe(const emu_format *f, float *dst, const float *src,
                          size_t n)
{
    mpfr_t m;
    mpfr_init2(m, f->p);
    const mpfr_exp_t emin0 = mpfr_get_emin(), emax0 = mpfr_get_emax();
    const mpfr_exp_t emin = f->emin - f->p + 2, emax = f->emax + 1;
    double t = clock_now();
    for (size_t i = 0; i < n; i++) {
        int ter = mpfr_set_flt(m, src[i], MPFR_RNDN);
        mpfr_set_emin(emin);
        mpfr_set_emax(emax);
        ter = mpfr_check_range(m, ter, MPFR_RNDN);
        ter = mpfr_subnormalize(m, ter, MPFR_RNDN);
        dst[i] = mpfr_get_flt(m, MPFR_RNDN);
        mpfr_set_emin(emin0);
        mpfr_set_emax(emax0);
    }
    t = clock_now() - t;
    mpfr_clear(m);
    return t;
}

/* Seconds for one pass over n elements: `chunk` elements per call of
 * emu_round_array_f32, or (chunk 0) one emu_round per element. */
static double guard_pass(const emu_format *f, const emu_array_rounding *a,
                         float *dst, const float *src, size_t n, size_t chunk)
{
    double t = bench_now();
    if (chunk == 0) {
        for (size_t i = 0; i < n; i++)
            dst[i] = (float)emu_round(f, src[i], &a->rnd, NULL);
    } else {
        for (size_t i = 0; i < n; i += chunk)
            emu_round_array_f32(f, dst + i, src + i, n - i < chunk ? n - i
                                : chunk, a, NULL, NULL);
    }
    return bench_now() - t;
}

/* ---- binary64 input and pairs ---------------------------------------- */

static double best_round_f64(const emu_format *f, const emu_array_rounding *a,
                             double *dst, const double *src, size_t n,
                             int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        emu_round_counts c = { 0 };
        double t = clock_now();
        emu_round_array_f64(f, dst, src, n, a, &c, NULL);
        t = clock_now() - t;
        best = t < best ? t : best;
    }
    return best;
}

#ifndef BENCH_OLD_LIB
/* kernel: the pairs kernel; otherwise emu_round2_word per element with
 * the words the choke point draws (the loop the kernel replaced). */
static double best_pairs(const emu_format *f, const emu_array_rounding *a,
                         float *dst, const double *hi, const double *lo,
                         size_t n, int reps, int kernel)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        emu_round_counts c = { 0 };
        double t = clock_now();
        if (kernel) {
            emu_round_pairs_f32_unguarded(f, dst, hi, lo, n, a, &c);
        } else {
            enum { B = 1024 };
            uint64_t w[B];
            for (size_t i = 0; i < n; i += B) {
                size_t m = n - i < B ? n - i : B;
                emu_random_fill(a->seed, a->stream, i, w, m);
                for (size_t j = 0; j < m; j++) {
                    emu_status st;
                    double y = emu_round2_word(f, hi[i + j], lo[i + j],
                                               &a->rnd, w[j], &st);
                    dst[i + j] = (float)y;
                    emu_round_counts_add(&c, hi[i + j], y, st.flags);
                }
            }
        }
        t = clock_now() - t;
        best = t < best ? t : best;
    }
    return best;
}
#endif

static void f64_rows(const float *x, size_t n, int reps, int csv)
{
    double *hi = malloc(n * sizeof *hi), *lo = malloc(n * sizeof *lo);
    double *dst = malloc(n * sizeof *dst);
    float *dst32 = malloc(n * sizeof *dst32);
    if (!hi || !lo || !dst || !dst32) {
        fprintf(stderr, "bench_round: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        double u1 = bench_uniform(0xf64, 2, 2 * i) - 0.5;
        double u2 = bench_uniform(0xf64, 2, 2 * i + 1) - 0.5;
        hi[i] = (double)x[i] * (1.0 + 0x1p-27 * u1);
        lo[i] = hi[i] * 0x1p-55 * u2;
    }
    memset(dst, 0, n * sizeof *dst);
    memset(dst32, 0, n * sizeof *dst32);
    double t_copy = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = clock_now();
        memcpy(dst, hi, n * sizeof *hi);
        t = clock_now() - t;
        t_copy = t < t_copy ? t : t_copy;
    }
    const double copy_melem = (double)n / t_copy * 1e-6;
    if (csv)
        printf("\ninput,format,mode,melem_per_s,pct_of_memcpy64,"
               "scalar_melem_per_s,speedup_vs_scalar,isa\n");
    else
        printf("\nbinary64 input (memcpy of binary64: %.0f Melem/s)\n"
               "%-6s %-9s %-5s %10s %9s %12s %9s\n", copy_melem, "input",
               "format", "mode", "Melem/s", "%memcpy", "scalar Me/s",
               "x scalar");
    static const struct { const char *fmt, *mode; } f64r[] = {
        { "binary32", "rne" }, { "binary32", "rz" }, { "bfloat16", "rne" },
        { "bfloat16", "rz" }, { "binary16", "rne" }, { "binary16", "rz" },
        { "e4m3", "rne" }, { "e5m2", "rne" },
    };
    for (size_t k = 0; k < sizeof f64r / sizeof f64r[0]; k++) {
        const emu_format *f = emu_format_find(f64r[k].fmt);
        emu_array_rounding a;
        memset(&a, 0, sizeof a);
        if (!f || emu_rnd_parse(f64r[k].mode, &a.rnd.mode, &a.rnd.sr_bits))
            exit(1);
        double me = (double)n / best_round_f64(f, &a, dst, hi, n, reps) * 1e-6;
        if (csv)
            printf("f64,%s,%s,%.1f,%.1f,,,%s\n", f64r[k].fmt, f64r[k].mode,
                   me, 100.0 * me / copy_melem, BENCH_KERNEL_ISA());
        else
            printf("%-6s %-9s %-5s %10.0f %8.1f%%\n", "f64", f64r[k].fmt,
                   f64r[k].mode, me, 100.0 * me / copy_melem);
    }
#ifndef BENCH_OLD_LIB
    static const struct { const char *fmt, *mode; } pr[] = {
        { "bfloat16", "sr" }, { "bfloat16", "sr13" }, { "binary16", "sr" },
        { "e5m2", "sr" },
    };
    for (size_t k = 0; k < sizeof pr / sizeof pr[0]; k++) {
        const emu_format *f = emu_format_find(pr[k].fmt);
        emu_array_rounding a;
        memset(&a, 0, sizeof a);
        if (!f || emu_rnd_parse(pr[k].mode, &a.rnd.mode, &a.rnd.sr_bits))
            exit(1);
        a.seed = 42;
        double me = (double)n / best_pairs(f, &a, dst32, hi, lo, n, reps, 1)
                    * 1e-6;
        double ms = (double)n / best_pairs(f, &a, dst32, hi, lo, n, reps, 0)
                    * 1e-6;
        if (csv)
            printf("pair,%s,%s,%.1f,%.1f,%.1f,%.2f,%s\n", pr[k].fmt,
                   pr[k].mode, me, 100.0 * me / copy_melem, ms, me / ms,
                   BENCH_KERNEL_ISA());
        else
            printf("%-6s %-9s %-5s %10.0f %8.1f%% %12.0f %8.1fx\n", "pair",
                   pr[k].fmt, pr[k].mode, me, 100.0 * me / copy_melem, ms,
                   me / ms);
    }
#endif
    free(hi);
    free(lo);
    free(dst);
    free(dst32);
}

/* The guard's cost: each call shape, best of reps in the default and in
 * the hostile state, interleaved so that a busy moment hits both. */
static void guard_rows(float *dst, const float *src, size_t n, int reps,
                       int csv)
{
    const emu_format *f = emu_format_find("binary16");
    emu_array_rounding a;
    memset(&a, 0, sizeof a);
    static const struct { const char *name; size_t chunk, n_max; } shapes[] = {
        { "array/call", SIZE_MAX, SIZE_MAX },
        { "256/call", 256, SIZE_MAX },
        { "scalar", 0, (size_t)1 << 20 },
    };
    if (!csv)
        printf("\nhost guard, binary16 rne: caller in the default state vs "
               "upward+FTZ+DAZ\n%-11s %12s %12s %9s\n", "calls",
               "default Me/s", "hostile Me/s", "ratio");
    else
        printf("\nguard_calls,default_melem_per_s,hostile_melem_per_s,"
               "time_ratio\n");
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        size_t m = n < shapes[k].n_max ? n : shapes[k].n_max;
        size_t chunk = shapes[k].chunk == SIZE_MAX ? m : shapes[k].chunk;
        double best[2] = { 1e30, 1e30 };
        for (int r = 0; r < reps; r++)
            for (int h = 0; h < 2; h++) {
                if (h)
                    bench_host_hostile();
                double t = guard_pass(f, &a, dst, src, m, chunk);
                bench_host_default();
                best[h] = t < best[h] ? t : best[h];
            }
        double d = (double)m / best[0] * 1e-6, o = (double)m / best[1] * 1e-6;
        if (csv)
            printf("%s,%.1f,%.1f,%.3f\n", shapes[k].name, d, o,
                   best[1] / best[0]);
        else
            printf("%-11s %12.1f %12.1f %8.3fx\n", shapes[k].name, d, o,
                   best[1] / best[0]);
    }
}

int main(int argc, char **argv)
{
    int guard = 1;
    int csv = 0, log2n = 24, reps = 5;
    size_t mpfr_n = (size_t)1 << 18;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv"))
            csv = 1;
        else if (!strcmp(argv[i], "--log2n") && i + 1 < argc)
            log2n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mpfr-n") && i + 1 < argc)
            mpfr_n = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-guard-rows"))
            guard = 0;
        else if (!strcmp(argv[i], "--cpu"))
            use_cpu_clock = 1;
        else {
            fprintf(stderr, "usage: bench_round [--csv] [--log2n N] "
                            "[--reps R] [--mpfr-n N] [--no-guard-rows] "
                            "[--cpu]\n");
            return 2;
        }
    }
    if (log2n < 10 || log2n > 28 || reps < 1) {
        fprintf(stderr, "bench_round: --log2n in 10..28, --reps >= 1\n");
        return 2;
    }
    const size_t n = (size_t)1 << log2n;
    if (mpfr_n > n)
        mpfr_n = n;
    float *src = malloc(n * sizeof *src), *dst = malloc(n * sizeof *dst);
    if (!src || !dst) {
        fprintf(stderr, "bench_round: out of memory\n");
        return 1;
    }
    make_data(src, n);
    memset(dst, 0, n * sizeof *dst); /* fault the pages in before timing */

    static const char *const formats[] = { "bfloat16", "tf32", "binary16",
                                           "e4m3", "e5m2", "e3m2", "e2m3",
                                           "e2m1" };
    static const char *const modes[] = { "rne", "rz", "sr", "sr13" };
    enum { NF = sizeof formats / sizeof formats[0],
           NM = sizeof modes / sizeof modes[0] };
    row rows[NF * NM];
    double mpfr_melem[NF];

    /* The machine may be shared: memcpy is timed between the format
     * groups too, and its best time over the whole run is the reference
     * (so a quiet moment for memcpy only makes the ratios smaller). */
    double t_copy = best_memcpy(dst, src, n, reps);
    double t_trick = best_bit_trick(dst, src, n, reps);
    for (size_t fi = 0; fi < NF; fi++) {
        const emu_format *f = emu_format_find(formats[fi]);
        if (!f) {
            fprintf(stderr, "bench_round: no format %s\n", formats[fi]);
            return 1;
        }
        mpfr_melem[fi] = (double)mpfr_n / mpfr_recipe(f, dst, src, mpfr_n)
                         * 1e-6;
        for (size_t mi = 0; mi < NM; mi++) {
            emu_array_rounding a;
            memset(&a, 0, sizeof a);
            if (emu_rnd_parse(modes[mi], &a.rnd.mode, &a.rnd.sr_bits) != 0)
                return 1;
            a.seed = 42;
            const double t = best_round(f, &a, dst, src, n, reps);
            rows[fi * NM + mi] = (row){ formats[fi], modes[mi],
                                        (double)n / t * 1e-6 };
        }
        double t = best_memcpy(dst, src, n, reps);
        if (t < t_copy)
            t_copy = t;
        t = best_bit_trick(dst, src, n, reps);
        if (t < t_trick)
            t_trick = t;
    }
    const double copy_melem = (double)n / t_copy * 1e-6;
    const double trick_melem = (double)n / t_trick * 1e-6;

    if (csv)
        printf("format,mode,melem_per_s,pct_of_memcpy,mpfr_melem_per_s,"
               "speedup_vs_mpfr,memcpy_melem_per_s,pct_of_bit_trick,"
               "bit_trick_melem_per_s,isa\n");
    else {
        printf("n = 2^%d binary32 values (log2|x| ~ N(-12, 8), 5%% zeros), "
               "best of %d, single thread, with counts, kernels: %s, "
               "%s time\n", log2n, reps, BENCH_KERNEL_ISA(),
               use_cpu_clock ? "CPU" : "wall");
        printf("memcpy: %.0f Melem/s (%.2f GB/s), best over the run\n",
               copy_melem, copy_melem * 4e-3);
        printf("bit trick (bfloat16 rne, no counts): %.0f Melem/s "
               "(%.1f%% of memcpy)\n\n", trick_melem,
               100.0 * trick_melem / copy_melem);
        printf("%-9s %-5s %10s %9s %9s %12s %9s\n", "format", "mode",
               "Melem/s", "%memcpy", "%trick", "MPFR Melem/s", "x MPFR");
    }
    for (size_t k = 0; k < NF * NM; k++) {
        const row *rw = &rows[k];
        const double mp = mpfr_melem[k / NM];
        if (csv)
            printf("%s,%s,%.1f,%.1f,%.2f,%.0f,%.0f,%.1f,%.0f,%s\n", rw->fmt,
                   rw->mode, rw->melem, 100.0 * rw->melem / copy_melem, mp,
                   rw->melem / mp, copy_melem,
                   100.0 * rw->melem / trick_melem, trick_melem,
                   BENCH_KERNEL_ISA());
        else
            printf("%-9s %-5s %10.0f %8.1f%% %8.1f%% %12.2f %8.0fx\n",
                   rw->fmt, rw->mode, rw->melem,
                   100.0 * rw->melem / copy_melem,
                   100.0 * rw->melem / trick_melem, mp, rw->melem / mp);
    }
    f64_rows(src, n, reps, csv);
    if (guard)
        guard_rows(dst, src, n, reps, csv);
    free(src);
    free(dst);
    return 0;
}
