/* internal.h — library-private declarations shared between modules. */
#ifndef EMU_INTERNAL_H
#define EMU_INTERNAL_H

#include "hostfp.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

/* A word for stochastic rounding when the caller gave no generator: the
 * next index of one process-wide stream (seed 0, stream 0).  Reproducible
 * in a single thread; never a constant, so SR never degenerates. */
uint64_t emu_default_random_word(void);

/* strtok_r without POSIX: the next token of *cursor delimited by any of
 * `delims` (empty tokens are skipped), NUL-terminated in place; NULL at
 * the end. */
char *emu_next_token(char **cursor, const char *delims);

/* Fills *err (if not NULL): the code (emu/error.h), where
 * ("formats/e4m3.fmt:3", "policy"), the offending key ("" if none) and a
 * printf-style message.  Returns -1, so that a failing function can end
 * with `return emu_fail(...)`. */
#include <stdarg.h>
#include "emu/error.h"

/* The bits of a binary32 or binary64 value and back (memcpy: no aliasing
 * rules broken, one move once compiled); shared by the array kernels, the
 * accumulator kernels and the block-scaled quantizer. */
static inline uint32_t f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline uint64_t d2u(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double u2d(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}
int emu_fail(emu_error *err, emu_errcode code, const char *where,
             const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
int emu_vfail(emu_error *err, emu_errcode code, const char *where,
              const char *key, const char *fmt, va_list ap);

/* emu_write_atomic and friends: atomic_file.h. */
#include "atomic_file.h"

/* Exact s + e = a + b (Knuth's TwoSum; no condition on the magnitudes):
 * the error-free sum behind every exact pre-rounding value. */
static inline void emu_two_sum(double a, double b, double *s, double *e)
{
    double sum = a + b;
    double bv = sum - a;
    double av = sum - bv;
    *e = (a - av) + (b - bv);
    *s = sum;
}

/* |x| is a power of two (finite, non-zero): scaling by x is exact. */
static inline bool emu_is_pow2(double x)
{
    int e;
    return isfinite(x) && x != 0.0 && fabs(frexp(x, &e)) == 0.5;
}

static inline bool emu_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Each element's block scale (1 without block scales), in one pass over
 * the blocks (scaled.c; for ops that visit every element). */
struct emu_scaled_tensor;
void emu_scaled_element_scales(const struct emu_scaled_tensor *q, float *out);

/* emu_scaled_quantize without the elements (scaled.c): every check and
 * refusal, the tensor scale and the block scales, as it sets them; the
 * elements are left alone.  For the quantize op while it measures, whose
 * choke point rounds every element itself (the same map and words as the
 * quantizer's fast paths, tested bit-identical): one rounding pass, not
 * two. */
struct emu_quant_opts;
int emu_scaled_quantize_scales(struct emu_scaled_tensor *q, const float *x,
                               const struct emu_quant_opts *o,
                               emu_error *err);

/* Nearest-even rounding with saturation of binary32 values into a format
 * with subnormals and a signed zero (round_array.c): the lean kernel of
 * block-scaled quantization, for finite inputs only (NaN and inf give
 * unspecified results; the caller keeps them out).  Bit-identical to
 * emu_round2 with EMU_RNE and saturate on those inputs.  _make returns
 * false if the format does not qualify. */
typedef struct emu_rne_sat_plan {
    uint32_t min_normal, max, shift, half_minus_1;
    float magic;            /* 2^(qmin + 23): adding it rounds to 2^qmin   */
} emu_rne_sat_plan;
bool emu_rne_sat_plan_make(emu_rne_sat_plan *k, const emu_format *f);
void emu_rne_sat_f32(const emu_rne_sat_plan *k, float *out, const float *in,
                     size_t n);

/* The hot public functions without the host floating-point guard, for
 * callers inside the library (which already hold it: every path into the
 * library goes through a guarded entry point).  Same contracts as the
 * public versions. */
#include "emu/accum.h"
#include "emu/bits.h"
#include "emu/round.h"
/* Block-scaled quantization's stochastic fast path (scaled.c) on given
 * words, for the tests: out[k] = x[k] / d rounded into f by r's
 * stochastic mode (saturating) with words[k], which must be what the
 * choke point gives for the pair hi = fl(x / d), lo = fl(fma(-hi, d, x)
 * / d).  False (nothing written) if f or r is not one it covers or d is
 * not positive and finite. */
bool emu_scaled_sr_words(const emu_format *f, const emu_rounding *r, double d,
                         float *out, const float *x, const uint64_t *words,
                         size_t n);

double emu_round2_word_unguarded(const emu_format *fmt, double hi, double lo,
                                 const emu_rounding *r, uint64_t word,
                                 emu_status *st);
double emu_round2_unguarded(const emu_format *fmt, double hi, double lo,
                            const emu_rounding *r, emu_status *st);
/* emu_bits_op with the random word of a stochastic rounding given, not
 * drawn from r->rng (the DPI-C golden model: the hardware supplies its
 * random bits).  Deterministic modes ignore the word.  The arith.c hook
 * behind it: a non-NULL word is used by this thread's roundings until
 * reset to NULL. */
#include "emu/arith.h"
int emu_bits_op_word(emu_op op, const emu_format *in, const emu_format *out,
                     const emu_bits *operands, const emu_rounding *r,
                     uint64_t word, emu_bits *res, emu_status *st,
                     emu_error *err);
void emu_arith_given_word(const uint64_t *word);
static inline double emu_round_unguarded(const emu_format *fmt, double x,
                                         const emu_rounding *r, emu_status *st)
{
    return emu_round2_unguarded(fmt, x, 0.0, r, st);
}
/* Whether rounding a binary32 value into f under r is the identity (NaNs
 * aside, which become the canonical quiet NaN). */
bool emu_round_is_identity_f32(const emu_format *f, const emu_rounding *r);
int emu_round_array_f32_unguarded(const emu_format *fmt, float *out,
                                  const float *in, size_t n,
                                  const emu_array_rounding *a,
                                  emu_round_counts *counts);
int emu_round_array_f64_unguarded(const emu_format *fmt, double *out,
                                  const double *in, size_t n,
                                  const emu_array_rounding *a,
                                  emu_round_counts *counts);
/* Pairs hi[i] + lo[i] (exact values, as emu_round2_word takes them) into
 * a format that fits the carrier, as binary32: out[i] is
 * emu_round2_word(fmt, hi[i], lo[i], &a->rnd, word i) with word i =
 * emu_random64(a->seed, a->stream, a->first_index + i) under the
 * stochastic modes (0 otherwise), counted as emu_round_counts_add(counts,
 * hi[i], out[i], flags) counts it.  The stochastic modes run a vector
 * kernel (round_array.c); the others take the scalar path. */
void emu_round_pairs_f32_unguarded(const emu_format *fmt, float *out,
                                   const double *hi, const double *lo,
                                   size_t n, const emu_array_rounding *a,
                                   emu_round_counts *counts);
void emu_round_counts_add_unguarded(emu_round_counts *counts, double in,
                                    double out, unsigned flags);
double emu_decode_unguarded(const emu_format *fmt, emu_bits b);
bool emu_encode_unguarded(const emu_format *fmt, double x, emu_bits *out);
int emu_hist_bin_unguarded(double x);
int emu_hist_bin_f32_unguarded(float x);
/* hist[bin of x[i]]++ for each of the n values. */
void emu_hist_add_unguarded(uint64_t *hist, const double *x, size_t n);
void emu_hist_add_f32_unguarded(uint64_t *hist, const float *x, size_t n);
/* The same counting spread over several calls (the choke point's chunks):
 * zero the tables, add values (binary32 if f32, else binary64), merge
 * into a histogram once at the end. */
typedef struct emu_hist_tables {
    uint64_t t[4][EMU_HIST_BINS];
} emu_hist_tables;
void emu_hist_tables_add(emu_hist_tables *t, const void *x, size_t n,
                         bool f32);
void emu_hist_tables_merge(uint64_t *hist, const emu_hist_tables *t);
/* emu_site_stats_merge's counters alone (results .. lost_bits): a commit
 * that measured no histogram and sampled nothing has only those. */
void emu_site_stats_merge_counts(emu_site_stats *a, const emu_site_stats *b);
/* n bins already computed (each < EMU_HIST_BINS) counted into t. */
void emu_hist_tables_add_bins(emu_hist_tables *t, const uint32_t *bins,
                              size_t n);
/* Values x and their roundings y (binary32) into both histograms at once:
 * y's bins into t (to be merged into both), x's differences from them into
 * fix (added to x's histogram, modulo 2^64). */
void emu_hist_tables_add_pair_f32(emu_hist_tables *t, uint64_t *fix,
                                  const float *x, const float *y, size_t n);
/* The same with binary64 values x (their bins those of
 * emu_hist_tables_add with f32 false). */
void emu_hist_tables_add_pair_f64(emu_hist_tables *t, uint64_t *fix,
                                  const double *x, const float *y, size_t n);
int emu_ulperr_bin_unguarded(double ulps);
int emu_relerr_bin_unguarded(double rel);
void emu_accum_count_add_unguarded(emu_accum_counts *c, const emu_format *acc,
                                   double s, double t, double s_new);
double emu_accum_dot_unguarded(const emu_accum *a, const float *x,
                               ptrdiff_t incx, const float *y, ptrdiff_t incy,
                               size_t n, const emu_accum_rng *rng,
                               emu_accum_counts *counts, double *lo);
/* The same sum, with the fast model as the sequence ops define it: a
 * binary64 running sum of the binary32 terms (*lo = 0), nothing counted. */
static inline double emu_model_dot_unguarded(const emu_accum *a,
                                             const float *x, ptrdiff_t incx,
                                             const float *y, ptrdiff_t incy,
                                             size_t n, const emu_accum_rng *rng,
                                             emu_accum_counts *counts,
                                             double *lo)
{
    *lo = 0.0;
    if (a->kind == EMU_ACCUM_FAST) {
        double s = 0.0;
        if (y)
            for (size_t k = 0; k < n; k++)
                s += (double)x[(ptrdiff_t)k * incx] * y[(ptrdiff_t)k * incy];
        else
            for (size_t k = 0; k < n; k++)
                s += x[(ptrdiff_t)k * incx];
        return s;
    }
    return emu_accum_dot_unguarded(a, x, incx, y, incy, n, rng, counts, lo);
}

/* ---- instruction-set levels of the array kernels (isa.c) ----------------
 * The hot array passes are compiled for baseline x86-64, AVX2 and AVX-512
 * and one is chosen per process: the best the CPU has, or a lower one named
 * by the environment variable EMU_ISA ("baseline", "avx2", "avx512"), which
 * is how the tests run each version.  EMU_ISA_TARGET_AVX2/_AVX512 are the
 * attributes that compile a function for a level. */
typedef enum emu_isa {
    EMU_ISA_BASELINE,
    EMU_ISA_AVX2,
    EMU_ISA_AVX512,
    EMU_ISA_COUNT
} emu_isa;

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(EMU_NO_TARGET_CLONES)
#define EMU_HAVE_ISA_CLONES 1
#define EMU_ISA_TARGET_AVX2 __attribute__((target("avx2")))
#define EMU_ISA_TARGET_AVX512 \
    __attribute__((target("arch=x86-64-v4")))
/* A function compiled for the three levels, the CPU's best chosen when the
 * library is loaded (an ifunc resolver: EMU_ISA does not reach it).  Only
 * on static functions: clang 14 names an external clone's resolver
 * "f.ifunc", so that another file's call to f does not link; an exported
 * entry point is a plain function that calls a static clone. */
#define EMU_TARGET_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define EMU_HAVE_ISA_CLONES 0
#define EMU_TARGET_CLONES
#endif

#if defined(__GNUC__)
#define EMU_KERNEL_INLINE inline __attribute__((always_inline))
#else
#define EMU_KERNEL_INLINE inline
#endif

/* EMU_ISA_VARIANTS(ret, name, (params), (args)): name_base, name_avx2 and
 * name_avx512, each `return name_any args;` compiled for its level (so
 * name_any, an EMU_KERNEL_INLINE function, is vectorised three ways),
 * and name_for(isa), which returns the one for a level (name_base alone
 * without the clones).  params is the parenthesised parameter list, args
 * the parenthesised names passed on. */
#if EMU_HAVE_ISA_CLONES
#define EMU_ISA_VARIANTS(ret, name, params, args)                             \
    static ret name##_base params { return name##_any args; }               \
    EMU_ISA_TARGET_AVX2 static ret name##_avx2 params                        \
    {                                                                         \
        return name##_any args;                                               \
    }                                                                         \
    EMU_ISA_TARGET_AVX512 static ret name##_avx512 params                    \
    {                                                                         \
        return name##_any args;                                               \
    }                                                                         \
    static ret (*name##_for(emu_isa isa)) params                              \
    {                                                                         \
        return isa == EMU_ISA_AVX512 ? name##_avx512                          \
               : isa == EMU_ISA_AVX2 ? name##_avx2                            \
                                     : name##_base;                           \
    }
#else
#define EMU_ISA_VARIANTS(ret, name, params, args)                             \
    static ret name##_base params { return name##_any args; }               \
    static ret (*name##_for(emu_isa isa)) params                              \
    {                                                                         \
        (void)isa;                                                            \
        return name##_base;                                                   \
    }
#endif

/* The level in use (decided at the first call). */
emu_isa emu_isa_active(void);
/* The best level this CPU and build have. */
emu_isa emu_isa_best(void);
/* The level EMU_ISA names, or EMU_ISA_COUNT if it names none. */
emu_isa emu_isa_requested(void);
const char *emu_isa_name(emu_isa isa);

/* Words (uint32_t)(emu_random64(seed, stream, index + i) >> 32) for i < n:
 * the high halves, which decide stochastic rounding in binary32 but for
 * ties of probability 2^-32 (rng.c). */
void emu_random_fill_hi32(uint64_t seed, uint64_t stream, uint64_t index,
                          uint32_t *out, size_t n);

/* Files a failure of an FFI call (emu/ffi.h) as the calling thread's last
 * error, for the emu_ffi_* functions outside ffi.c; returns -1 (ffi.c). */
int emu_ffi_fail_(emu_errcode code, const char *where, const char *key,
                  const char *msg);

/* The persistent worker threads (pool.c): fn(arg, t, T) for every part
 * t = 0 .. T-1 (T clamped to EMU_POOL_MAX), part 0 in the calling thread,
 * returning when all have returned.  Parts may run in any order or all in
 * the caller (pool busy, threads unavailable): a part's work must depend
 * on (t, T) alone. */
enum { EMU_POOL_MAX = 64 };
typedef void (*emu_pool_fn)(void *arg, int t, int T);
void emu_pool_run(int T, emu_pool_fn fn, void *arg);
/* The parts a job of `work` units takes on `threads` threads: one a
 * thread, at most EMU_POOL_MAX, none smaller than min_part units (below,
 * a part costs about what it saves), and at least one. */
int emu_pool_parts(int threads, size_t work, size_t min_part);
/* memcpy(dst, src, bytes) in up to T parts of at least EMU_POOL_COPY_MIN
 * bytes each (a copy has no order: any split gives the same bytes).  The
 * optimizers' copies of their state tensors, whose fresh pages fault in
 * as they are written, are what it shares out. */
enum { EMU_POOL_COPY_MIN = 128 * 1024 };
void emu_pool_memcpy(int T, void *dst, const void *src, size_t bytes);

#endif
