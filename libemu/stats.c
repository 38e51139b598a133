/*
 * stats.c — the measurement store: sites, histograms, exports.
 *
 * The choke point (ops_core.c) fills emu_site_stats; this file owns the
 * bins, the site table and every file the measurements are written to.
 * Files are written through emu_write_atomic (atomic_file.c), so a
 * reader (or a killed run) never sees half a file.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/stats.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Bins come from the exponent field alone, in integers: frexp per element
 * was a sixth of a training step.  The bins span binary32's binades, so a
 * subnormal double (below 2^-1022) is always below them, and every
 * binary32 value, subnormals included, has a binade bin of its own. */
_Static_assert(EMU_HIST_EMIN > -1022 && EMU_HIST_EMAX < 1023,
               "subnormal doubles fall below the bins");
_Static_assert(EMU_HIST_EMIN == -149 && EMU_HIST_EMAX == 127,
               "the bins are binary32's binades");

/* Masks rather than branches, so that a loop of them vectorises.  The
 * biased exponent e of a normal double gives the bin e - 1023 - EMIN +
 * FIRST, clamped to BELOW and ABOVE; e = 0 (zero and the subnormals, all
 * below the bins) and e = 0x7ff are then told apart by their fraction. */
_Static_assert(EMU_HIST_ZERO == 0 && EMU_HIST_NAN == EMU_HIST_INF + 1,
               "the masks below");

static inline int bin_of_bits64(uint64_t u)
{
    const uint32_t hi = (uint32_t)(u >> 32), lo = (uint32_t)u;
    const int32_t e = (int32_t)((hi >> 20) & 0x7ff);
    const int32_t frac = ((hi & 0xfffff) | lo) != 0;
    int32_t b = e - 1023 - EMU_HIST_EMIN + EMU_HIST_FIRST;
    b = b < EMU_HIST_BELOW ? EMU_HIST_BELOW : b;
    b = b > EMU_HIST_ABOVE ? EMU_HIST_ABOVE : b;
    b &= -(int32_t)((e | frac) != 0); /* zero */
    const int32_t sp = -(int32_t)(e == 0x7ff);
    return (b & ~sp) | ((EMU_HIST_INF + frac) & sp);
}

/* A binary32 always has a binade bin: a normal one its exponent's, a
 * subnormal one its fraction's leading bit, which the exponent of the
 * fraction converted to binary32 (exactly) gives without a bit scan. */
static inline int bin_of_bits32(uint32_t u)
{
    const int32_t e = (int32_t)((u >> 23) & 0xff);
    const int32_t frac = (int32_t)(u & 0x7fffff);
    const float ff = (float)frac;
    uint32_t v;
    memcpy(&v, &ff, sizeof v);
    const int32_t lead = (int32_t)(v >> 23) - 127; /* 2^lead <= frac */
    const int32_t sub = -(int32_t)(e == 0);
    int32_t b = ((e - 127) & ~sub) | ((lead - 149) & sub);
    b += EMU_HIST_FIRST - EMU_HIST_EMIN;
    b &= -(int32_t)((u & 0x7fffffff) != 0); /* zero */
    const int32_t sp = -(int32_t)(e == 0xff);
    return (b & ~sp) | ((EMU_HIST_INF + (frac != 0)) & sp);
}

static inline int bin_f64(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return bin_of_bits64(u);
}

static inline int bin_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return bin_of_bits32(u);
}

int emu_hist_bin_unguarded(double x)
{
    return bin_f64(x);
}

int emu_hist_bin_f32_unguarded(float x)
{
    return bin_f32(x);
}

/* Counting binned values.  Neighbouring values mostly share a bin, and
 * with one table each increment would wait for the store of the one
 * before: WAYS tables, merged at the end, let WAYS increments run at
 * once.  The bins of a chunk are computed first, in a loop apart, which
 * has no stores to wait for; they are 32-bit, the width the bins are
 * computed at (narrower, the vector loops spent more on packing lanes
 * than on the bins). */
enum { WAYS = 4, BIN_CHUNK = 512 };

typedef struct bin_tables {
    uint64_t t[WAYS][EMU_HIST_BINS];
} bin_tables;

static void tables_count(bin_tables *tab, const uint32_t *bins, size_t m)
{
    _Static_assert(WAYS == 4, "the unrolled loop below");
    uint64_t *t0 = tab->t[0], *t1 = tab->t[1], *t2 = tab->t[2],
             *t3 = tab->t[3];
    size_t j = 0;
    /* two rounds of the four tables per iteration: the loop's own
     * instructions were a fifth of the count */
    for (; j + 2 * WAYS <= m; j += 2 * WAYS) {
        t0[bins[j]]++;
        t1[bins[j + 1]]++;
        t2[bins[j + 2]]++;
        t3[bins[j + 3]]++;
        t0[bins[j + 4]]++;
        t1[bins[j + 5]]++;
        t2[bins[j + 6]]++;
        t3[bins[j + 7]]++;
    }
    /* the fewer than 2 WAYS left; the second bound, always true, keeps
     * gcc -O3 from a false "iteration 2^62 - 1 invokes undefined
     * behavior" */
    for (const size_t tail = j; j < m && j - tail < 2 * WAYS; j++)
        t0[bins[j]]++;
}

/* The four tables summed into hist in one pass: runs of constant length,
 * which gcc's cheap vectoriser (-O2) takes, then the tail (282 bins are
 * no multiple of a vector).  Every commit with tables merges them twice. */
enum { MERGE_RUN = 8 };

static void tables_merge(uint64_t *hist, const bin_tables *tab)
{
    _Static_assert(WAYS == 4, "the sum below");
    const uint64_t *t0 = tab->t[0], *t1 = tab->t[1], *t2 = tab->t[2],
                   *t3 = tab->t[3];
    const size_t n = EMU_HIST_BINS, full = n - n % MERGE_RUN;
    for (size_t b = 0; b < full; b += MERGE_RUN)
        for (size_t k = b; k < b + MERGE_RUN; k++)
            hist[k] += (t0[k] + t1[k]) + (t2[k] + t3[k]);
    for (size_t k = full; k < n; k++)
        hist[k] += (t0[k] + t1[k]) + (t2[k] + t3[k]);
}

/* The bins of m values; with m the constant BIN_CHUNK the loop has no
 * remainder, which is what gcc's cheap vectoriser (-O2) asks. */
static inline void bins_f64(uint32_t *bins, const double *x, size_t m)
{
    /* bin_of_bits64 in 32-bit lanes (the high word but for zero's test):
     * every exponent field but 0x7ff gives its clamped bin (subnormal
     * doubles clamp to BELOW), zero its own; infinities and NaNs are
     * binned apart. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    enum { LO = 1, HI = 0 };
#else
    enum { LO = 0, HI = 1 };
#endif
    const int32_t normal0 = 1023 + EMU_HIST_EMIN - EMU_HIST_FIRST;
    uint32_t w[2 * BIN_CHUNK], special = 0;
    memcpy(w, x, m * sizeof *x);
    for (size_t j = 0; j < m; j++) {
        const uint32_t lo = w[2 * j + LO], hi = w[2 * j + HI];
        const int32_t e = (int32_t)((hi >> 20) & 0x7ff);
        int32_t b = e - normal0;
        b = b < EMU_HIST_BELOW ? EMU_HIST_BELOW : b;
        b = b > EMU_HIST_ABOVE ? EMU_HIST_ABOVE : b;
        b &= -(int32_t)(((hi & 0x7fffffff) | lo) != 0); /* zero */
        bins[j] = (uint32_t)b;
        special |= (uint32_t)(e == 0x7ff);
    }
    if (special)
        for (size_t j = 0; j < m; j++)
            if (((w[2 * j + HI] >> 20) & 0x7ff) == 0x7ff)
                bins[j] = (uint32_t)bin_of_bits64((uint64_t)w[2 * j + HI] << 32 |
                                                  w[2 * j + LO]);
}

/* binary32 values: a normal value's bin is its exponent field plus a
 * constant, zero's is EMU_HIST_ZERO, in a few integer operations that
 * vectorise; the rest (subnormals, infinities, NaNs: rare) are flagged
 * and binned afterwards by bin_of_bits32, which bins everything. */
static inline void bins_f32(uint32_t *bins, const float *x, size_t m)
{
    _Static_assert(EMU_HIST_ZERO == 0, "the mask below");
    const uint32_t normal0 = 127 + EMU_HIST_EMIN - EMU_HIST_FIRST;
    uint32_t u[BIN_CHUNK], rare = 0;
    memcpy(u, x, m * sizeof *x);
    for (size_t j = 0; j < m; j++) {
        const uint32_t a = u[j] & 0x7fffffff;
        const uint32_t normal = -(uint32_t)(a - 0x00800000u < 0x7f000000u);
        bins[j] = ((a >> 23) - normal0) & normal;
        rare |= (uint32_t)(a - 1 < 0x007fffffu) | (uint32_t)(a >= 0x7f800000u);
    }
    if (rare)
        for (size_t j = 0; j < m; j++) {
            const uint32_t a = u[j] & 0x7fffffff;
            if (a - 1 < 0x007fffffu || a >= 0x7f800000u)
                bins[j] = (uint32_t)bin_of_bits32(u[j]);
        }
}

/* The bins of m values, binary32 (f32) or binary64 at x. */
static inline void bins_of(uint32_t *bins, const void *x, size_t m, bool f32)
{
    if (f32)
        bins_f32(bins, x, m);
    else
        bins_f64(bins, x, m);
}

/* Below SMALL values the tables would cost more than they save. */
enum { SMALL = 64 };

static void hist_add(uint64_t *hist, const void *x, size_t n, bool f32)
{
    const size_t size = f32 ? sizeof(float) : sizeof(double);
    const char *p = x;
    uint32_t bins[BIN_CHUNK];
    if (n < SMALL) {
        bins_of(bins, p, n, f32);
        for (size_t j = 0; j < n; j++)
            hist[bins[j]]++;
        return;
    }
    bin_tables tab = { 0 };
    size_t i = 0;
    for (; i + BIN_CHUNK <= n; i += BIN_CHUNK) {
        bins_of(bins, p + i * size, BIN_CHUNK, f32);
        tables_count(&tab, bins, BIN_CHUNK);
    }
    bins_of(bins, p + i * size, n - i, f32);
    tables_count(&tab, bins, n - i);
    tables_merge(hist, &tab);
}

/* Two binary32 arrays binned at once, x the values before rounding and y
 * after, BIN_CHUNK of each (the pair kernel): their bins as bins_f32 gives
 * them for normal values and zeros, *rare set if either holds another
 * value (binned afterwards by bin_of_bits32), and diff[r] non-zero if run
 * r of PAIR_RUN values has a value whose bins differ.  Integer operations
 * only, compiled per instruction-set level (isa.c chooses): the same bins
 * at every level. */
enum { PAIR_RUN = 16, PAIR_RUNS = BIN_CHUNK / PAIR_RUN };

typedef void (*pair_kernel)(uint32_t *restrict bx, uint32_t *restrict by,
                            uint32_t *restrict diff, uint32_t *rare,
                            const float *restrict x, const float *restrict y);

static EMU_KERNEL_INLINE void pair_any(uint32_t *restrict bx,
                                       uint32_t *restrict by,
                                       uint32_t *restrict diff, uint32_t *rare,
                                       const float *restrict x,
                                       const float *restrict y)
{
    _Static_assert(EMU_HIST_ZERO == 0, "the mask below");
    const uint32_t normal0 = 127 + EMU_HIST_EMIN - EMU_HIST_FIRST;
    uint32_t r = 0;
    for (size_t j = 0; j < BIN_CHUNK; j++) {
        uint32_t ux, uy;
        memcpy(&ux, &x[j], sizeof ux);
        memcpy(&uy, &y[j], sizeof uy);
        const uint32_t ax = ux & 0x7fffffff, ay = uy & 0x7fffffff;
        const uint32_t nx = -(uint32_t)(ax - 0x00800000u < 0x7f000000u);
        const uint32_t ny = -(uint32_t)(ay - 0x00800000u < 0x7f000000u);
        bx[j] = ((ax >> 23) - normal0) & nx;
        by[j] = ((ay >> 23) - normal0) & ny;
        /* rare: neither normal (the masks above) nor zero */
        r |= ~((nx | -(uint32_t)(ax == 0)) & (ny | -(uint32_t)(ay == 0)));
    }
    *rare = r;
    for (size_t k = 0; k < PAIR_RUNS; k++) {
        uint32_t d = 0;
        for (size_t j = 0; j < PAIR_RUN; j++)
            d |= bx[k * PAIR_RUN + j] ^ by[k * PAIR_RUN + j];
        diff[k] = d;
    }
}

/* One binary32 array's bins, BIN_CHUNK of them, as bins_f32 gives them,
 * *rare set for a value other than a normal one or zero (the single form
 * of the pair kernel, for values carried unrounded). */
typedef void (*bins_kernel)(uint32_t *restrict b, uint32_t *rare,
                            const float *restrict x);

static EMU_KERNEL_INLINE void bins_any(uint32_t *restrict b, uint32_t *rare,
                                       const float *restrict x)
{
    const uint32_t normal0 = 127 + EMU_HIST_EMIN - EMU_HIST_FIRST;
    uint32_t r = 0;
    for (size_t j = 0; j < BIN_CHUNK; j++) {
        uint32_t u;
        memcpy(&u, &x[j], sizeof u);
        const uint32_t a = u & 0x7fffffff;
        const uint32_t nm = -(uint32_t)(a - 0x00800000u < 0x7f000000u);
        b[j] = ((a >> 23) - normal0) & nm;
        r |= ~(nm | -(uint32_t)(a == 0)); /* neither normal nor zero */
    }
    *rare = r;
}

/* The pair kernel with x binary64 (an op's values before rounding, y
 * their binary32 results): x's bins as bins_f64 gives them, y's as
 * bins_f32, *rare set if x holds an infinity or NaN or y another value
 * than a normal one or zero, diff as in pair_any.  One loop per chunk at
 * the CPU's level rather than bins_f64 at the baseline's and a loop
 * apart for diff: x's bins were most of a stochastic preset's histogram
 * time. */
typedef void (*pair64_kernel)(uint32_t *restrict bx, uint32_t *restrict by,
                              uint32_t *restrict diff, uint32_t *rare,
                              const double *restrict x,
                              const float *restrict y);

static EMU_KERNEL_INLINE void pair64_any(uint32_t *restrict bx,
                                         uint32_t *restrict by,
                                         uint32_t *restrict diff,
                                         uint32_t *rare,
                                         const double *restrict x,
                                         const float *restrict y)
{
    const int32_t normal0x = 1023 + EMU_HIST_EMIN - EMU_HIST_FIRST;
    const uint32_t normal0y = 127 + EMU_HIST_EMIN - EMU_HIST_FIRST;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    enum { LO = 1, HI = 0 };
#else
    enum { LO = 0, HI = 1 };
#endif
    /* x's words as 32-bit lanes: the loop then narrows by shuffles of
     * the loads rather than of 64-bit results */
    uint32_t w[2 * BIN_CHUNK], r = 0;
    memcpy(w, x, sizeof w);
    for (size_t j = 0; j < BIN_CHUNK; j++) {
        uint32_t uy;
        memcpy(&uy, &y[j], sizeof uy);
        /* bins_f64's rule */
        const uint32_t lo = w[2 * j + LO], hi = w[2 * j + HI];
        const int32_t e = (int32_t)((hi >> 20) & 0x7ff);
        int32_t b = e - normal0x;
        b = b < EMU_HIST_BELOW ? EMU_HIST_BELOW : b;
        b = b > EMU_HIST_ABOVE ? EMU_HIST_ABOVE : b;
        b &= -(int32_t)(((hi & 0x7fffffff) | lo) != 0); /* zero */
        bx[j] = (uint32_t)b;
        const uint32_t ay = uy & 0x7fffffff;
        const uint32_t ny = -(uint32_t)(ay - 0x00800000u < 0x7f000000u);
        by[j] = ((ay >> 23) - normal0y) & ny;
        r |= (uint32_t)(e == 0x7ff) | ~(ny | -(uint32_t)(ay == 0));
    }
    *rare = r;
    for (size_t k = 0; k < PAIR_RUNS; k++) {
        uint32_t d = 0;
        for (size_t j = 0; j < PAIR_RUN; j++)
            d |= bx[k * PAIR_RUN + j] ^ by[k * PAIR_RUN + j];
        diff[k] = d;
    }
}

static void bins_base(uint32_t *restrict b, uint32_t *rare,
                      const float *restrict x)
{
    bins_any(b, rare, x);
}

static void pair64_base(uint32_t *restrict bx, uint32_t *restrict by,
                        uint32_t *restrict diff, uint32_t *rare,
                        const double *restrict x, const float *restrict y)
{
    pair64_any(bx, by, diff, rare, x, y);
}

static void pair_base(uint32_t *restrict bx, uint32_t *restrict by,
                      uint32_t *restrict diff, uint32_t *rare,
                      const float *restrict x, const float *restrict y)
{
    pair_any(bx, by, diff, rare, x, y);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static void pair_avx2(uint32_t *restrict bx, uint32_t *restrict by,
                      uint32_t *restrict diff, uint32_t *rare,
                      const float *restrict x, const float *restrict y)
{
    pair_any(bx, by, diff, rare, x, y);
}

EMU_ISA_TARGET_AVX2
static void pair64_avx2(uint32_t *restrict bx, uint32_t *restrict by,
                        uint32_t *restrict diff, uint32_t *rare,
                        const double *restrict x, const float *restrict y)
{
    pair64_any(bx, by, diff, rare, x, y);
}

EMU_ISA_TARGET_AVX512
static void pair64_avx512(uint32_t *restrict bx, uint32_t *restrict by,
                          uint32_t *restrict diff, uint32_t *rare,
                          const double *restrict x, const float *restrict y)
{
    pair64_any(bx, by, diff, rare, x, y);
}

EMU_ISA_TARGET_AVX2
static void bins_avx2(uint32_t *restrict b, uint32_t *rare,
                      const float *restrict x)
{
    bins_any(b, rare, x);
}

EMU_ISA_TARGET_AVX512
static void bins_avx512(uint32_t *restrict b, uint32_t *rare,
                        const float *restrict x)
{
    bins_any(b, rare, x);
}

EMU_ISA_TARGET_AVX512
static void pair_avx512(uint32_t *restrict bx, uint32_t *restrict by,
                        uint32_t *restrict diff, uint32_t *rare,
                        const float *restrict x, const float *restrict y)
{
    pair_any(bx, by, diff, rare, x, y);
}
#endif

static pair_kernel pair_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return pair_avx512;
    if (isa == EMU_ISA_AVX2)
        return pair_avx2;
#endif
    (void)isa;
    return pair_base;
}

static pair64_kernel pair64_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return pair64_avx512;
    if (isa == EMU_ISA_AVX2)
        return pair64_avx2;
#endif
    (void)isa;
    return pair64_base;
}

static bins_kernel bins_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return bins_avx512;
    if (isa == EMU_ISA_AVX2)
        return bins_avx2;
#endif
    (void)isa;
    return bins_base;
}

/* x's bins corrected into fix where they differ from y's (bx, by: m
 * bins each). */
static void pair_fix(uint64_t *fix, const uint32_t *bx, const uint32_t *by,
                     size_t m)
{
    for (size_t j = 0; j < m; j++)
        if (bx[j] != by[j]) {
            fix[bx[j]]++;
            fix[by[j]]--;
        }
}

/* The choke point bins its outputs a chunk at a time: the tables then
 * live across its chunks and are merged once, at the end, rather than
 * cleared and merged per chunk (which would cost more than the binning). */
void emu_hist_tables_add(emu_hist_tables *t, const void *x, size_t n, bool f32)
{
    _Static_assert(sizeof t->t == sizeof(bin_tables), "emu_hist_tables");
    const size_t size = f32 ? sizeof(float) : sizeof(double);
    const char *p = x;
    uint32_t bins[BIN_CHUNK];
    size_t i = 0;
    if (f32) {
        /* the kernel of the CPU's level, then the rare values apart */
        const bins_kernel kern = bins_for(emu_isa_active());
        for (; i + BIN_CHUNK <= n; i += BIN_CHUNK) {
            const float *xf = (const float *)x + i;
            uint32_t rare;
            kern(bins, &rare, xf);
            if (rare)
                for (size_t j = 0; j < BIN_CHUNK; j++) {
                    uint32_t u;
                    memcpy(&u, &xf[j], sizeof u);
                    bins[j] = (uint32_t)bin_of_bits32(u);
                }
            tables_count((bin_tables *)t->t, bins, BIN_CHUNK);
        }
    }
    for (; i + BIN_CHUNK <= n; i += BIN_CHUNK) {
        bins_of(bins, p + i * size, BIN_CHUNK, f32); /* constant: vectorised */
        tables_count((bin_tables *)t->t, bins, BIN_CHUNK);
    }
    if (i < n) {
        bins_of(bins, p + i * size, n - i, f32);
        tables_count((bin_tables *)t->t, bins, n - i);
    }
}

/* Bins computed by the caller (the choke point's rounding lanes, which
 * bin as bins_f32 does) counted into the tables. */
void emu_hist_tables_add_bins(emu_hist_tables *t, const uint32_t *bins,
                              size_t n)
{
    tables_count((bin_tables *)t->t, bins, n);
}

/* Two binary32 arrays binned at once, x the values before rounding and y
 * after: y's bins into t, which then counts both histograms, and where x
 * has another bin (a rounding that crossed a binade, underflowed or
 * overflowed: rare), fix[bin of x]++ and fix[bin of y]-- (modulo 2^64):
 * x's histogram is t's counts plus fix.  One table increment per value
 * instead of two; the bins are those emu_hist_tables_add gives. */
void emu_hist_tables_add_pair_f32(emu_hist_tables *t, uint64_t *fix,
                                  const float *x, const float *y, size_t n)
{
    const pair_kernel kern = pair_for(emu_isa_active());
    uint32_t bx[BIN_CHUNK], by[BIN_CHUNK], diff[PAIR_RUNS];
    size_t i = 0;
    for (; i + BIN_CHUNK <= n; i += BIN_CHUNK) {
        uint32_t rare;
        kern(bx, by, diff, &rare, x + i, y + i);
        if (rare) {
            /* subnormals, infinities, NaNs: their bins, then every run
             * compared */
            for (size_t j = 0; j < BIN_CHUNK; j++) {
                uint32_t ux, uy;
                memcpy(&ux, &x[i + j], sizeof ux);
                memcpy(&uy, &y[i + j], sizeof uy);
                bx[j] = (uint32_t)bin_of_bits32(ux);
                by[j] = (uint32_t)bin_of_bits32(uy);
            }
            for (size_t k = 0; k < PAIR_RUNS; k++)
                diff[k] = 1;
        }
        tables_count((bin_tables *)t->t, by, BIN_CHUNK);
        for (size_t k = 0; k < PAIR_RUNS; k++)
            if (diff[k])
                pair_fix(fix, bx + k * PAIR_RUN, by + k * PAIR_RUN, PAIR_RUN);
    }
    if (i < n) {
        bins_f32(bx, x + i, n - i);
        bins_f32(by, y + i, n - i);
        tables_count((bin_tables *)t->t, by, n - i);
        pair_fix(fix, bx, by, n - i);
    }
}

/* As emu_hist_tables_add_pair_f32, x binary64 (an op's values before
 * rounding, y their binary32 results): x's bins as bins_f64 gives them,
 * one table increment per value. */
void emu_hist_tables_add_pair_f64(emu_hist_tables *t, uint64_t *fix,
                                  const double *x, const float *y, size_t n)
{
    const pair64_kernel kern = pair64_for(emu_isa_active());
    uint32_t bx[BIN_CHUNK], by[BIN_CHUNK], diff[PAIR_RUNS];
    size_t i = 0;
    for (; i + BIN_CHUNK <= n; i += BIN_CHUNK) {
        uint32_t rare;
        kern(bx, by, diff, &rare, x + i, y + i);
        if (rare) {
            /* infinities and NaNs of x, subnormals, infinities and NaNs
             * of y: their bins, then every run compared */
            for (size_t j = 0; j < BIN_CHUNK; j++) {
                uint64_t ux;
                uint32_t uy;
                memcpy(&ux, &x[i + j], sizeof ux);
                memcpy(&uy, &y[i + j], sizeof uy);
                bx[j] = (uint32_t)bin_of_bits64(ux);
                by[j] = (uint32_t)bin_of_bits32(uy);
            }
            for (size_t k = 0; k < PAIR_RUNS; k++)
                diff[k] = 1;
        }
        tables_count((bin_tables *)t->t, by, BIN_CHUNK);
        for (size_t k = 0; k < PAIR_RUNS; k++)
            if (diff[k])
                pair_fix(fix, bx + k * PAIR_RUN, by + k * PAIR_RUN, PAIR_RUN);
    }
    if (i < n) {
        bins_f64(bx, x + i, n - i);
        bins_f32(by, y + i, n - i);
        tables_count((bin_tables *)t->t, by, n - i);
        pair_fix(fix, bx, by, n - i);
    }
}

void emu_hist_tables_merge(uint64_t *hist, const emu_hist_tables *t)
{
    tables_merge(hist, (const bin_tables *)t->t);
}

void emu_hist_add_unguarded(uint64_t *hist, const double *x, size_t n)
{
    hist_add(hist, x, n, false);
}

void emu_hist_add_f32_unguarded(uint64_t *hist, const float *x, size_t n)
{
    hist_add(hist, x, n, true);
}

int emu_hist_bin(double x)
{
    EMU_HOSTFP_GUARD;
    return emu_hist_bin_unguarded(x);
}

const char *emu_hist_label(int b, char *buf, size_t size)
{
    EMU_HOSTFP_GUARD;
    switch (b) {
    case EMU_HIST_ZERO: return "zero";
    case EMU_HIST_BELOW: return "below";
    case EMU_HIST_ABOVE: return "above";
    case EMU_HIST_INF: return "inf";
    case EMU_HIST_NAN: return "nan";
    default:
        snprintf(buf, size, "%d", b - EMU_HIST_FIRST + EMU_HIST_EMIN);
        return buf;
    }
}

int emu_ulperr_bin_unguarded(double ulps)
{
    if (!(ulps > 0.0))
        return 0; /* exact (NaN is never passed) */
    if (!isfinite(ulps))
        return EMU_ULPERR_BINS - 1;
    if (ulps <= 0.5)
        return 1;
    if (ulps <= 1.0)
        return 2;
    int e;
    frexp(ulps, &e); /* 2^(e-1) <= ulps < 2^e */
    if (ldexp(1.0, e - 1) == ulps)
        e -= 1;          /* (2^(k-3), 2^(k-2)] holds its upper edge */
    int b = e + 2;       /* (1, 2] -> 3 */
    return b < EMU_ULPERR_BINS ? b : EMU_ULPERR_BINS - 1;
}

int emu_ulperr_bin(double ulps)
{
    EMU_HOSTFP_GUARD;
    return emu_ulperr_bin_unguarded(ulps);
}

int emu_relerr_bin_unguarded(double rel)
{
    if (!(rel > 0.0))
        return 0;
    if (!isfinite(rel))
        return EMU_RELERR_BINS - 1;
    int e;
    frexp(rel, &e); /* 2^(e-1) <= rel < 2^e, so rel in [2^-k, 2^-(k-1)) for k = 1 - e */
    int k = 1 - e;
    if (k < 1)
        return EMU_RELERR_BINS - 1; /* rel >= 1: last bin */
    return k < EMU_RELERR_BINS - 1 ? k : EMU_RELERR_BINS - 2;
}

int emu_relerr_bin(double rel)
{
    EMU_HOSTFP_GUARD;
    return emu_relerr_bin_unguarded(rel);
}

/* The counters every commit measures: a += b. */
void emu_site_stats_merge_counts(emu_site_stats *a, const emu_site_stats *b)
{
    a->results += b->results;
    a->inexact += b->inexact;
    a->underflow += b->underflow;
    a->to_zero += b->to_zero;
    a->subnormal += b->subnormal;
    a->overflow += b->overflow;
    a->nan += b->nan;
    a->nan_produced += b->nan_produced;
    a->adds += b->adds;
    a->absorbed += b->absorbed;
    for (int i = 0; i < EMU_LOST_BINS; i++)
        a->lost_bits[i] += b->lost_bits[i];
}

void emu_site_stats_merge(emu_site_stats *a, const emu_site_stats *b)
{
    EMU_HOSTFP_GUARD;
    emu_site_stats_merge_counts(a, b);
    for (int i = 0; i < EMU_HIST_BINS; i++) {
        a->hist_exact[i] += b->hist_exact[i];
        a->hist_rounded[i] += b->hist_rounded[i];
        a->hist_scale[i] += b->hist_scale[i];
    }
    a->ref_samples += b->ref_samples;
    a->ulp_sum += b->ulp_sum;
    a->rel_sum += b->rel_sum;
    a->ulp_max = fmax(a->ulp_max, b->ulp_max);
    a->rel_max = fmax(a->rel_max, b->rel_max);
    for (int i = 0; i < EMU_ULPERR_BINS; i++)
        a->ulp_hist[i] += b->ulp_hist[i];
    for (int i = 0; i < EMU_RELERR_BINS; i++)
        a->rel_hist[i] += b->rel_hist[i];
    a->dot_samples += b->dot_samples;
    a->quant_sum += b->quant_sum;
    a->accum_sum += b->accum_sum;
    a->round_sum += b->round_sum;
    a->quant_max = fmax(a->quant_max, b->quant_max);
    a->accum_max = fmax(a->accum_max, b->accum_max);
    a->round_max = fmax(a->round_max, b->round_max);
}

void emu_stats_init(emu_stats *s)
{
    memset(s, 0, sizeof *s);
}

void emu_stats_free(emu_stats *s)
{
    free(s->sites);
    memset(s, 0, sizeof *s);
}

emu_site *emu_stats_site(emu_stats *s, const char *name, const char *kind,
                         emu_role role, const emu_format *fmt)
{
    /* Sites are keyed by the name as stored (truncated to the field), so
     * a long name finds its site again. */
    char key[sizeof s->sites[0].name];
    snprintf(key, sizeof key, "%s", name);
    for (size_t i = 0; i < s->count; i++)
        if (s->sites[i].role == role && !strcmp(s->sites[i].name, key))
            return &s->sites[i];
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        emu_site *p = realloc(s->sites, cap * sizeof *p);
        if (!p)
            return NULL;
        s->sites = p;
        s->cap = cap;
    }
    emu_site *site = &s->sites[s->count++];
    memset(site, 0, sizeof *site);
    snprintf(site->name, sizeof site->name, "%s", key);
    snprintf(site->kind, sizeof site->kind, "%s", kind ? kind : "");
    site->role = role;
    snprintf(site->format, sizeof site->format, "%s", fmt ? fmt->name : "");
    return site;
}

size_t emu_stats_site_count(const emu_stats *s)
{
    return s ? s->count : 0;
}

const emu_site *emu_stats_site_at(const emu_stats *s, size_t i)
{
    return s && i < s->count ? &s->sites[i] : NULL;
}

/* The first site named `name` (truncated as stored) with role `role`, or
 * with any role if role is EMU_ROLE_COUNT. */
static const emu_site *find(const emu_stats *s, const char *name,
                            emu_role role)
{
    if (!s || !name)
        return NULL;
    char key[sizeof s->sites[0].name];
    snprintf(key, sizeof key, "%s", name);
    for (size_t i = 0; i < s->count; i++)
        if ((role == EMU_ROLE_COUNT || s->sites[i].role == role) &&
            !strcmp(s->sites[i].name, key))
            return &s->sites[i];
    return NULL;
}

const emu_site *emu_stats_find(const emu_stats *s, const char *name,
                               emu_role role)
{
    return (unsigned)role < EMU_ROLE_COUNT ? find(s, name, role) : NULL;
}

const emu_site *emu_stats_find_name(const emu_stats *s, const char *name)
{
    return find(s, name, EMU_ROLE_COUNT);
}

void emu_stats_begin_step(emu_stats *s, int64_t step)
{
    s->step = step;
    for (size_t i = 0; i < s->count; i++) {
        memset(&s->sites[i].step, 0, sizeof s->sites[i].step);
        s->sites[i].active = false;
    }
}

/* ---- CSV ------------------------------------------------------------------ */

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

static double mean(double sum, uint64_t n)
{
    return n ? sum / (double)n : 0.0;
}

/* Site names are ours, but a user's may hold a comma or a quote: quote
 * every string field the CSV way. */
static void csv_string(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', fp);
        fputc(*s, fp);
    }
    fputc('"', fp);
}

/* ---- the counters, by name ------------------------------------------------
 * One table names every per-site number the exports write and
 * emu_stats_counter reads, so the names cannot drift apart: the CSV
 * header and rows, the JSON keys and the reader all walk it. */

typedef enum counter_kind {
    C_COUNT,  /* a uint64_t field                                         */
    C_REAL,   /* a double field                                           */
    C_MEAN,   /* double sum / uint64_t count (0 without samples)         */
    C_RATE,   /* uint64_t / uint64_t (0 without a denominator): CSV only  */
} counter_kind;

typedef struct counter_def {
    const char *name;
    counter_kind kind;
    size_t a, b;            /* offsets into emu_site_stats                 */
    bool json_break;        /* the JSON export starts a line before it     */
} counter_def;

#define OFF(f) offsetof(emu_site_stats, f)
static const counter_def counters[] = {
    { "results", C_COUNT, OFF(results), 0, true },
    { "inexact", C_COUNT, OFF(inexact), 0, false },
    { "underflow", C_COUNT, OFF(underflow), 0, false },
    { "to_zero", C_COUNT, OFF(to_zero), 0, false },
    { "subnormal", C_COUNT, OFF(subnormal), 0, false },
    { "overflow", C_COUNT, OFF(overflow), 0, false },
    { "nan", C_COUNT, OFF(nan), 0, false },
    { "nan_produced", C_COUNT, OFF(nan_produced), 0, false },
    { "adds", C_COUNT, OFF(adds), 0, false },
    { "absorbed", C_COUNT, OFF(absorbed), 0, false },
    { "ref_samples", C_COUNT, OFF(ref_samples), 0, false },
    { "ulp_mean", C_MEAN, OFF(ulp_sum), OFF(ref_samples), true },
    { "ulp_max", C_REAL, OFF(ulp_max), 0, false },
    { "rel_mean", C_MEAN, OFF(rel_sum), OFF(ref_samples), false },
    { "rel_max", C_REAL, OFF(rel_max), 0, false },
    { "dot_samples", C_COUNT, OFF(dot_samples), 0, false },
    { "quant_mean", C_MEAN, OFF(quant_sum), OFF(dot_samples), false },
    { "quant_max", C_REAL, OFF(quant_max), 0, false },
    { "accum_mean", C_MEAN, OFF(accum_sum), OFF(dot_samples), false },
    { "accum_max", C_REAL, OFF(accum_max), 0, false },
    { "round_mean", C_MEAN, OFF(round_sum), OFF(dot_samples), false },
    { "round_max", C_REAL, OFF(round_max), 0, false },
    { "inexact_rate", C_RATE, OFF(inexact), OFF(results), false },
    { "to_zero_rate", C_RATE, OFF(to_zero), OFF(results), false },
    { "underflow_rate", C_RATE, OFF(underflow), OFF(results), false },
    { "overflow_rate", C_RATE, OFF(overflow), OFF(results), false },
    { "absorbed_rate", C_RATE, OFF(absorbed), OFF(adds), false },
};
enum { N_COUNTERS = sizeof counters / sizeof counters[0] };

static uint64_t u64_at(const emu_site_stats *t, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)t + off, sizeof v);
    return v;
}

static double f64_at(const emu_site_stats *t, size_t off)
{
    double v;
    memcpy(&v, (const char *)t + off, sizeof v);
    return v;
}

static double counter_value(const counter_def *c, const emu_site_stats *t)
{
    switch (c->kind) {
    case C_COUNT: return (double)u64_at(t, c->a);
    case C_REAL: return f64_at(t, c->a);
    case C_MEAN: return mean(f64_at(t, c->a), u64_at(t, c->b));
    case C_RATE: return ratio(u64_at(t, c->a), u64_at(t, c->b));
    }
    return 0.0;
}

static const emu_site_stats *span_of(const emu_site *site,
                                    emu_stats_span span)
{
    return span == EMU_SPAN_TOTAL ? &site->total
         : span == EMU_SPAN_STEP ? &site->step
                                 : NULL;
}

size_t emu_stats_counter_count(void)
{
    return N_COUNTERS;
}

const char *emu_stats_counter_name(size_t i)
{
    return i < N_COUNTERS ? counters[i].name : NULL;
}

int emu_stats_counter(const emu_site *site, emu_stats_span span,
                      const char *name, double *value)
{
    EMU_HOSTFP_GUARD; /* means and rates divide */
    const emu_site_stats *t = site && name ? span_of(site, span) : NULL;
    if (!t)
        return -1;
    for (int k = 0; k < N_COUNTERS; k++)
        if (!strcmp(counters[k].name, name)) {
            *value = counter_value(&counters[k], t);
            return 0;
        }
    return -1;
}

/* The histograms by the names the histogram CSV gives them. */
static const struct {
    const char *which;
    size_t off;
} hists[] = {
    { "exact", offsetof(emu_site_stats, hist_exact) },
    { "rounded", offsetof(emu_site_stats, hist_rounded) },
    { "scale", offsetof(emu_site_stats, hist_scale) },
};
enum { N_HISTS = sizeof hists / sizeof hists[0] };

static const uint64_t *hist_of(const emu_site_stats *t, int k)
{
    return (const uint64_t *)(const void *)((const char *)t + hists[k].off);
}

int emu_stats_hist(const emu_site *site, emu_stats_span span,
                   const char *which, uint64_t out[EMU_HIST_BINS])
{
    const emu_site_stats *t = site && which ? span_of(site, span) : NULL;
    if (!t)
        return -1;
    for (int k = 0; k < N_HISTS; k++)
        if (!strcmp(hists[k].which, which)) {
            memcpy(out, hist_of(t, k), EMU_HIST_BINS * sizeof *out);
            return 0;
        }
    return -1;
}

static void csv_counter_header(FILE *fp)
{
    for (int k = 0; k < N_COUNTERS; k++)
        fprintf(fp, "%s%s", k ? "," : "", counters[k].name);
}

static void csv_counters(FILE *fp, const emu_site_stats *t)
{
    for (int k = 0; k < N_COUNTERS; k++) {
        const counter_def *c = &counters[k];
        if (k)
            fputc(',', fp);
        if (c->kind == C_COUNT)
            fprintf(fp, "%llu", (unsigned long long)u64_at(t, c->a));
        else
            fprintf(fp, "%.9g", counter_value(c, t));
    }
}

static void csv_site_prefix(FILE *fp, const emu_site *site)
{
    csv_string(fp, site->name);
    fputc(',', fp);
    csv_string(fp, site->kind);
    fprintf(fp, ",%s,", emu_role_name(site->role));
    csv_string(fp, site->format);
    fputc(',', fp);
}

int emu_stats_write_step_rows(const emu_stats *s, FILE *fp, bool header,
                              emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (header) {
        fprintf(fp, "step,site,kind,role,format,");
        csv_counter_header(fp);
        fputc('\n', fp);
    }
    for (size_t i = 0; i < s->count; i++) {
        const emu_site *site = &s->sites[i];
        if (!site->active)
            continue;
        fprintf(fp, "%lld,", (long long)s->step);
        csv_site_prefix(fp, site);
        csv_counters(fp, &site->step);
        fputc('\n', fp);
    }
    if (ferror(fp))
        return emu_fail(err, EMU_EIO, "step rows", "", "cannot write: %s",
                        errno ? strerror(errno) : "write error");
    return 0;
}

static int write_sites_csv(FILE *fp, const void *arg)
{
    const emu_stats *s = arg;
    fprintf(fp, "site,kind,role,format,");
    csv_counter_header(fp);
    fputc('\n', fp);
    for (size_t i = 0; i < s->count; i++) {
        csv_site_prefix(fp, &s->sites[i]);
        csv_counters(fp, &s->sites[i].total);
        fputc('\n', fp);
    }
    return 0;
}

int emu_stats_write_csv(const emu_stats *s, const char *path, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    return emu_write_atomic(path, write_sites_csv, s, err);
}

static void hist_rows(FILE *fp, const emu_site *site, const char *which,
                      const uint64_t *h)
{
    char label[16];
    for (int b = 0; b < EMU_HIST_BINS; b++) {
        if (!h[b])
            continue;
        csv_site_prefix(fp, site);
        fprintf(fp, "%s,%s,", which, emu_hist_label(b, label, sizeof label));
        if (b >= EMU_HIST_FIRST && b < EMU_HIST_ABOVE)
            fprintf(fp, "%d", b - EMU_HIST_FIRST + EMU_HIST_EMIN);
        fprintf(fp, ",%llu\n", (unsigned long long)h[b]);
    }
}

static int write_hist_csv(FILE *fp, const void *arg)
{
    const emu_stats *s = arg;
    fprintf(fp, "site,kind,role,format,which,bin,log2_lower,count\n");
    for (size_t i = 0; i < s->count; i++)
        for (int k = 0; k < N_HISTS; k++)
            hist_rows(fp, &s->sites[i], hists[k].which,
                      hist_of(&s->sites[i].total, k));
    return 0;
}

int emu_stats_write_hist_csv(const emu_stats *s, const char *path,
                             emu_error *err)
{
    EMU_HOSTFP_GUARD;
    return emu_write_atomic(path, write_hist_csv, s, err);
}

/* ---- JSON ----------------------------------------------------------------- */

static void json_string(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(fp, "\\%c", c);
        else if (c < 0x20)
            fprintf(fp, "\\u%04x", c);
        else
            fputc(c, fp);
    }
    fputc('"', fp);
}

/* JSON has no inf or NaN: non-finite numbers are written as null. */
static void json_number(FILE *fp, double x)
{
    if (isfinite(x))
        fprintf(fp, "%.9g", x);
    else
        fputs("null", fp);
}

static void json_array(FILE *fp, const uint64_t *v, int n)
{
    fputc('[', fp);
    for (int i = 0; i < n; i++)
        fprintf(fp, "%s%llu", i ? "," : "", (unsigned long long)v[i]);
    fputc(']', fp);
}

static int write_json(FILE *fp, const void *arg)
{
    const emu_stats *s = arg;
    char label[16];
    fprintf(fp, "{\n  \"hist_bins\": [");
    for (int b = 0; b < EMU_HIST_BINS; b++) {
        fputs(b ? "," : "", fp);
        json_string(fp, emu_hist_label(b, label, sizeof label));
    }
    fprintf(fp, "],\n  \"sites\": [");
    for (size_t i = 0; i < s->count; i++) {
        const emu_site *site = &s->sites[i];
        const emu_site_stats *t = &site->total;
        fprintf(fp, "%s\n    {\"site\": ", i ? "," : "");
        json_string(fp, site->name);
        fprintf(fp, ", \"kind\": ");
        json_string(fp, site->kind);
        fprintf(fp, ", \"role\": \"%s\", \"format\": ",
                emu_role_name(site->role));
        json_string(fp, site->format);
        for (int k = 0; k < N_COUNTERS; k++) {
            const counter_def *c = &counters[k];
            if (c->kind == C_RATE)
                continue; /* derived: the CSV's convenience */
            fprintf(fp, ",%s\"%s\": ", c->json_break ? "\n     " : " ",
                    c->name);
            if (c->kind == C_COUNT)
                fprintf(fp, "%llu", (unsigned long long)u64_at(t, c->a));
            else
                json_number(fp, counter_value(c, t));
        }
        fprintf(fp, ",\n     \"lost_bits\": ");
        json_array(fp, t->lost_bits, EMU_LOST_BINS);
        fprintf(fp, ",\n     \"ulp_hist\": ");
        json_array(fp, t->ulp_hist, EMU_ULPERR_BINS);
        fprintf(fp, ",\n     \"rel_hist\": ");
        json_array(fp, t->rel_hist, EMU_RELERR_BINS);
        fprintf(fp, ",\n     \"hist_exact\": ");
        json_array(fp, t->hist_exact, EMU_HIST_BINS);
        fprintf(fp, ",\n     \"hist_rounded\": ");
        json_array(fp, t->hist_rounded, EMU_HIST_BINS);
        fprintf(fp, ",\n     \"hist_scale\": ");
        json_array(fp, t->hist_scale, EMU_HIST_BINS);
        fputc('}', fp);
    }
    fprintf(fp, "\n  ]\n}\n");
    return 0;
}

int emu_stats_write_json(const emu_stats *s, const char *path, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    return emu_write_atomic(path, write_json, s, err);
}

void emu_stats_print_summary(const emu_stats *s, FILE *fp)
{
    EMU_HOSTFP_GUARD;
    fprintf(fp, "%-28s %-11s %-10s %12s %8s %8s %8s %8s %8s %9s\n", "site",
            "role", "format", "results", "inexact", "->zero", "subnorm",
            "overflow", "absorbed", "ulp max");
    for (size_t i = 0; i < s->count; i++) {
        const emu_site *site = &s->sites[i];
        const emu_site_stats *t = &site->total;
        fprintf(fp, "%-28.28s %-11s %-10.10s %12llu %7.2f%% %7.3f%% %7.3f%% "
                "%7.3f%% %7.3f%% ",
                site->name, emu_role_name(site->role), site->format,
                (unsigned long long)t->results,
                100.0 * ratio(t->inexact, t->results),
                100.0 * ratio(t->to_zero, t->results),
                100.0 * ratio(t->subnormal, t->results),
                100.0 * ratio(t->overflow, t->results),
                100.0 * ratio(t->absorbed, t->adds));
        if (t->ref_samples)
            fprintf(fp, "%9.3g\n", t->ulp_max);
        else
            fprintf(fp, "%9s\n", "-");
    }
}
