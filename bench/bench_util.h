/*
 * bench_util.h — what the benchmarks share: a wall clock, reproducible
 * uniform data from the library's own generator, and the memcpy reference
 * the throughput figures are ratios to.  Header only (static functions):
 * each benchmark is one program.
 */
#ifndef EMU_BENCH_UTIL_H
#define EMU_BENCH_UTIL_H

#include <fenv.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <emu/rng.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* Seconds of wall time (C11's clock: no POSIX needed). */
static inline double bench_now(void)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Uniform in (0, 1): word i of Philox stream (seed, stream). */
static inline double bench_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    return ((double)(emu_random64(seed, stream, i) >> 11) + 0.5) * 0x1p-53;
}

/* The best of `reps` copies of n binary32 values: the reference. */
static inline double bench_best_memcpy(float *dst, const float *src, size_t n,
                                       int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = bench_now();
        memcpy(dst, src, n * sizeof *src);
        t = bench_now() - t;
        best = t < best ? t : best;
    }
    return best;
}

/* The caller's floating-point state for the host-guard rows.  A hostile
 * caller (rounding upward and, on x86, flush-to-zero and
 * denormals-are-zero, as -ffast-math code and torch.set_flush_denormal
 * leave it) makes every library call take the guard's slow path: save,
 * install the default state, restore on return. */
static inline void bench_host_hostile(void)
{
    fesetround(FE_UPWARD);
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | 0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
#endif
}

static inline void bench_host_default(void)
{
    fesetenv(FE_DFL_ENV);
}

#endif
