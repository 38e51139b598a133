/*
 * ops_core.c — the choke point: every tensor op's results are rounded,
 * counted, histogrammed and sampled against MPFR here, and nowhere else.
 *
 * The rounding itself is the library's one rounding map (emu_round2_word,
 * or its array form, tested bit-identical).  Stochastic rounding of op k
 * uses stream k of the context's seed, element i word i: a run is
 * reproducible from its seed whatever the threads or the chunking.
 * Sampling for the MPFR reference is deterministic too: output i of op k
 * is sampled iff word i of the sampling stream of op k falls below
 * ref_rate * 2^64.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/extend.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "emu/bits.h"
#include "emu/rng.h"
#include "internal.h"
#include "ops_internal.h"

/* Stream tags: op k's rounding words come from stream k; its sampling
 * decisions from stream k ^ SAMPLE_TAG, so the two never share words. */
#define SAMPLE_TAG ((uint64_t)1 << 62)

/* Precision of the reference values: enough for the exact result of any
 * elementwise op on binary32 values (a product plus a binary32 spans at
 * most 2^-298 .. 2^256, under 560 bits); dot products are rounded to it
 * once by mpfr_dot, far below any error we measure. */
enum { REF_PREC = 600 };

void emu_ctx_init(emu_ctx *ctx, uint64_t seed)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->seed = seed;
    ctx->measure = EMU_MEASURE_COUNTS | EMU_MEASURE_HIST | EMU_MEASURE_SWAMP;
    ctx->threads = 1;
}

uint64_t emu_ctx_stream(const emu_ctx *ctx)
{
    return ctx->op_index;
}

/* Argument checks are the common failure of an op: emu_ctx_fail files
 * them under EMU_EINVAL; the rest (memory, errors forwarded from parsers
 * and quantizers) say their code through emu_ctx_failc. */
int emu_ctx_fail(emu_ctx *ctx, const char *site, const char *fmt, ...)
{
    EMU_HOSTFP_GUARD; /* the message may print a double */
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(&ctx->err, EMU_EINVAL, site ? site : "op", "", fmt, ap);
    va_end(ap);
    return -1;
}

int emu_ctx_failc(emu_ctx *ctx, emu_errcode code, const char *site,
                  const char *fmt, ...)
{
    EMU_HOSTFP_GUARD;
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(&ctx->err, code, site ? site : "op", "", fmt, ap);
    va_end(ap);
    return -1;
}

/* The ulp of x's binade in fmt (the subnormal quantum below 2^emin). */
static double ulp_in(const emu_format *fmt, mpfr_srcptr x)
{
    long e = mpfr_get_exp(x) - 1; /* MPFR: x = 0.1... * 2^exp */
    if (e < fmt->emin)
        e = fmt->emin;
    return ldexp(1.0, (int)(e - fmt->p + 1));
}

/* |a - b| / |c| in double (a, b, c exact to REF_PREC bits). */
static double rel_diff(mpfr_srcptr a, mpfr_srcptr b, mpfr_srcptr c, mpfr_ptr t)
{
    mpfr_sub(t, a, b, MPFR_RNDN);
    mpfr_div(t, t, c, MPFR_RNDN);
    return fabs(mpfr_get_d(t, MPFR_RNDN));
}

typedef struct ref_work {
    mpfr_t exact, src, pre, out, t;
} ref_work;

/* Error of one sampled output against MPFR. */
static void sample(const emu_op_out *o, size_t i, double out, double hi,
                   const double *lo, ref_work *w, emu_site_stats *st)
{
    int dot = o->ref(o->op, i, w->exact, w->src);
    if (dot < 0 || mpfr_nan_p(w->exact) || !isfinite(out) ||
        mpfr_inf_p(w->exact))
        return; /* errors of non-numbers are not measured */
    mpfr_set_d(w->out, out, MPFR_RNDN); /* exact: out is a binary32 value */
    st->ref_samples++;
    /* Divided by the ulp (a power of two) in MPFR and converted toward
     * zero, so that an error just below one ulp is not recorded as one. */
    mpfr_sub(w->t, w->out, w->exact, MPFR_RNDN);
    mpfr_div_d(w->t, w->t, ulp_in(&o->out->fmt, w->exact), MPFR_RNDN);
    double ulps = fabs(mpfr_get_d(w->t, MPFR_RNDZ));
    double rel = mpfr_zero_p(w->exact) ? (out == 0.0 ? 0.0 : INFINITY)
                                       : rel_diff(w->out, w->exact, w->exact, w->t);
    st->ulp_sum += ulps;
    st->ulp_max = fmax(st->ulp_max, ulps);
    st->ulp_hist[emu_ulperr_bin_unguarded(ulps)]++;
    if (isfinite(rel)) {
        st->rel_sum += rel;
        st->rel_max = fmax(st->rel_max, rel);
    }
    st->rel_hist[emu_relerr_bin_unguarded(rel)]++;
    if (dot != 1 || mpfr_zero_p(w->src))
        return;
    /* The accumulator's value before output rounding, exactly hi + lo. */
    mpfr_set_d(w->pre, hi, MPFR_RNDN);
    if (lo)
        mpfr_add_d(w->pre, w->pre, *lo, MPFR_RNDN);
    double q = rel_diff(w->exact, w->src, w->src, w->t);
    double a = rel_diff(w->pre, w->exact, w->src, w->t);
    double r = rel_diff(w->out, w->pre, w->src, w->t);
    st->dot_samples++;
    st->quant_sum += q;
    st->accum_sum += a;
    st->round_sum += r;
    st->quant_max = fmax(st->quant_max, q);
    st->accum_max = fmax(st->accum_max, a);
    st->round_max = fmax(st->round_max, r);
}

/* The exact value's bin: hi + lo lies in hi's binade unless hi is a power
 * of two and lo points toward zero. */
static int exact_bin(double hi, double lo)
{
    int b = emu_hist_bin_unguarded(hi);
    if (lo != 0.0 && b > EMU_HIST_BELOW && b <= EMU_HIST_ABOVE &&
        (lo < 0.0) != (hi < 0.0)) {
        uint64_t u; /* hi is a normal double: a power of two has no fraction */
        memcpy(&u, &hi, sizeof u);
        if ((u << 12) == 0)
            b--;
    }
    return b;
}

enum { CHUNK = EMU_COMMIT_CHUNK };

/* The length of the runs that the array scans below take in loops of
 * constant trip count: gcc's cheap vectoriser (-O2) takes those. */
enum { CARRY_RUN = 64 };

/* Whether rounding hi alone gives what rounding hi + lo gives, under a
 * deterministic mode into a format of precision p.  hi is the binary64
 * nearest hi + lo, and every rounding boundary of the format (a grid point
 * or a midpoint, p + 1 significant bits at most) is a binary64, so none
 * lies strictly between hi and hi + lo: the two round alike unless hi is
 * itself a boundary while lo is not zero.  Such a hi has its fraction bits
 * below p + 1 clear (mask: those bits); lo_bad is 1 for it, and for a
 * subnormal or non-finite hi with a low part.  u, v: hi's and lo's bits. */
static inline uint32_t lo_bad32(uint32_t uh, uint32_t ul, uint32_t vh,
                                uint32_t vl, uint32_t mh, uint32_t ml)
{
    const uint32_t e = (uh >> 20) & 0x7ff;
    return (uint32_t)(((vh & 0x7fffffff) | vl) != 0) &
           ((uint32_t)(((uh & mh) | (ul & ml)) == 0) | (uint32_t)(e == 0) |
            (uint32_t)(e == 0x7ff));
}

/* The scans below read a binary64 as two 32-bit words, the width that
 * baseline x86-64 (SSE2) compares in vector lanes: W_HI holds sign,
 * exponent and the fraction's top 20 bits. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
enum { W_LO = 1, W_HI = 0 };
#else
enum { W_LO = 0, W_HI = 1 };
#endif

static inline uint64_t lo_mask(int p)
{
    return ((uint64_t)1 << (52 - p)) - 1;
}

static inline uint32_t lo_bad(double hi, double lo, uint64_t mask)
{
    uint64_t u, v;
    memcpy(&u, &hi, sizeof u);
    memcpy(&v, &lo, sizeof v);
    return lo_bad32((uint32_t)(u >> 32), (uint32_t)u, (uint32_t)(v >> 32),
                    (uint32_t)v, (uint32_t)(mask >> 32), (uint32_t)mask);
}

/* Whether no element of runs of CARRY_RUN is lo_bad, in 32-bit words,
 * which every level compares in vector lanes (baseline's SSE2 has no
 * 64-bit compare).  Compiled per instruction-set level (isa.c chooses):
 * an optimizer's update hands every weight through here, and baseline's
 * four lanes were a quarter of round_chunk's time on an fp8 MLP step.
 * Integer operations only: the same answer at every level. */
static EMU_KERNEL_INLINE uint32_t
lo_bad_scan_any(const double *restrict hi, const double *restrict lo,
                size_t runs, uint32_t mh, uint32_t ml)
{
    uint32_t bad = 0;
    for (size_t r = 0; r < runs; r++) {
        const unsigned char *u = (const unsigned char *)(hi + r * CARRY_RUN);
        const unsigned char *v = (const unsigned char *)(lo + r * CARRY_RUN);
        for (int k = 0; k < CARRY_RUN; k++) {
            uint32_t w[4];
            memcpy(&w[0], u + 8 * k + 4 * W_HI, 4);
            memcpy(&w[1], u + 8 * k + 4 * W_LO, 4);
            memcpy(&w[2], v + 8 * k + 4 * W_HI, 4);
            memcpy(&w[3], v + 8 * k + 4 * W_LO, 4);
            bad |= lo_bad32(w[0], w[1], w[2], w[3], mh, ml);
        }
    }
    return bad;
}

EMU_ISA_VARIANTS(uint32_t, lo_bad_scan,
                 (const double *restrict hi, const double *restrict lo,
                  size_t runs, uint32_t mh, uint32_t ml),
                 (hi, lo, runs, mh, ml))

/* Whether no element of a chunk is lo_bad: its runs through the kernel
 * of the CPU's level, then the tail. */
static bool lo_harmless(const double *hi, const double *lo, size_t m, int p)
{
    const uint64_t mask = lo_mask(p);
    const size_t runs = m / CARRY_RUN;
    uint32_t bad = lo_bad_scan_for(emu_isa_active())(
        hi, lo, runs, (uint32_t)(mask >> 32), (uint32_t)mask);
    for (size_t j = runs * CARRY_RUN; j < m; j++)
        bad |= lo_bad(hi[j], lo[j], mask);
    return bad == 0;
}

bool emu_commit_measures(const emu_ctx *ctx)
{
    return (ctx->stats && (ctx->measure & EMU_MEASURE_ALL)) || ctx->observer;
}

/* ---- one pass per op ----------------------------------------------------
 * emu_commit walks the outputs CHUNK at a time.  A chunk's values before
 * rounding come from the op's arrays (hi, lo) or its producer (fill,
 * fill32); while they and the chunk's results are in cache, the chunk is
 * rounded (step 1), counted, binned, checked for NaN provenance and
 * swamping, sampled (steps 2 to 4) and stored.  Everything measured is a
 * sum over outputs (integer counts, and error sums added in output order),
 * so the totals do not depend on the chunking: tests/test_choke_point.c
 * holds the chunked producers equal to the whole arrays. */

/* Histograms below this many outputs are counted directly: the tables
 * would cost more than they save (as in stats.c). */
enum { HIST_TABLES_MIN = 64 };

static int ctz64(uint64_t x)
{
#if defined(__GNUC__)
    return __builtin_ctzll(x);
#else
    int k = 0;
    while (!(x & 1)) {
        x >>= 1;
        k++;
    }
    return k;
#endif
}

/* floor(log2 |x|) of a finite non-zero binary32 value, |x| as bits. */
static int f32_exponent(uint32_t a)
{
    if (a >= 0x800000)
        return (int)(a >> 23) - 127;
    int e = -149; /* subnormal: its leading bit */
    while (a >>= 1)
        e++;
    return e;
}

/* Swamping of an accumulation out = acc_old + addend, for the outputs
 * i0 .. i0+m-1 of a chunk, from its results res[0..m):
 * emu_accum_count_add's rule (an unchanged result is absorbed with every
 * bit lost; otherwise the bits of t below half the quantum of the result
 * in out's format are lost), from the bits, inline: an update's weights
 * are a call each otherwise.  Addends that are binary64 subnormals (no
 * optimizer makes them) take the library's function. */
static void count_swamp_scalar(const emu_op_out *o, size_t i0,
                               const double *add, const float *res, size_t m,
                               emu_accum_counts *c)
{
    const emu_format *f = &o->out->fmt;
    const int q_tiny = f->subnormals ? f->emin - f->p + 1 : f->emin;
    for (size_t j = 0; j < m; j++) {
        const double t = add[j];
        const float old = o->acc_old[i0 + j];
        uint64_t u;
        uint32_t ob, rb;
        memcpy(&u, &t, sizeof u);
        memcpy(&ob, &old, sizeof ob);
        u &= ~((uint64_t)1 << 63);
        const int et = (int)(u >> 52);
        if (u == 0 || et == 0x7ff || (ob & 0x7fffffff) >= 0x7f800000)
            continue; /* zero or non-finite addend, non-finite old value */
        if (et == 0) {
            emu_accum_count_add_unguarded(c, f, old, t, res[j]);
            continue;
        }
        c->adds++;
        const float r = res[j];
        if (r == old) {
            c->absorbed++;
            c->lost_bits[EMU_LOST_BINS - 1]++;
            continue;
        }
        memcpy(&rb, &r, sizeof rb);
        rb &= 0x7fffffff;
        if (rb >= 0x7f800000) {
            c->lost_bits[0]++;
            continue;
        }
        int q = q_tiny; /* exponent of the result's quantum */
        if (rb != 0) {
            const int e = f32_exponent(rb);
            if (e >= f->emin)
                q = e - f->p + 1;
        }
        const int msb = et - 1023;
        const int lsb = et - 1075 + ctz64((u & (((uint64_t)1 << 52) - 1)) |
                                          ((uint64_t)1 << 52));
        const int top = msb < q - 1 ? msb : q - 1;
        const int bits = top - lsb + 1;
        c->lost_bits[bits < 0 ? 0 : bits > 64 ? 64 : bits]++;
    }
}

/* The lowest set bit's position of a non-zero 32-bit word, as the
 * exponent of that bit converted to binary32 (exact; 2^31 converts as
 * -2^31 through int32_t, the same exponent): integer and conversion
 * operations that SSE2 has in vector lanes, unlike a bit scan. */
static inline int32_t ctz32_lanes(uint32_t x)
{
    const float f = (float)(int32_t)(x & (0u - x));
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return (int32_t)((b >> 23) & 0xff) - 127;
}

/* count_swamp_scalar's counts for CARRY_RUN outputs, branch-free in
 * 32-bit lanes (gcc -O2 vectorises the loop; an update's weights all come
 * through here): each output's lost-bits bin (SWAMP_SKIP for an output
 * that counts no add) into bins, then counted into n (four tables of
 * EMU_LOST_BINS + 1), the absorbed ones into *absorbed_sum; the tables'
 * bins below SWAMP_SKIP add up to the adds.  Returns false, counting
 * nothing, if the run holds an output that count_swamp_scalar hands to
 * the library (a subnormal binary64 addend) or a result that is not the
 * old value and is subnormal in binary32 (its exponent needs a bit scan)
 * or zero (a weight cancelled exactly: rare, and left out so that the
 * quantum is a normal result's or q_tiny by one comparison): the caller
 * counts that run with count_swamp_scalar. */
enum { SWAMP_SKIP = EMU_LOST_BINS };

static EMU_KERNEL_INLINE bool
count_swamp_run_any(const int32_t q_tiny, const int32_t emin, const int32_t p,
                    const double *t, const float *old, const float *res,
                    uint64_t n[4][EMU_LOST_BINS + 1], uint64_t *absorbed_sum)
{
    const unsigned char *tb = (const unsigned char *)t;
    /* a result's exponent field from which its quantum is e - p + 1 (a
     * normal value of the format; below, q_tiny's), and q_tiny + 1075 */
    const int32_t eb_min = emin + 127 > 1 ? emin + 127 : 1;
    const int32_t q_tiny1075 = q_tiny + 1075;
    uint32_t bins[CARRY_RUN], rare = 0, nabsorbed = 0;
    for (int k = 0; k < CARRY_RUN; k++) {
        /* each test a lane mask (all ones or zero), the form a vector
         * compare leaves: a branch-free body is what vectorises, and
         * masks need no turning into 0 or 1 */
        uint32_t th, tl, ow, rw;
        memcpy(&th, tb + 8 * k + 4 * W_HI, 4);
        memcpy(&tl, tb + 8 * k + 4 * W_LO, 4);
        memcpy(&ow, &old[k], 4);
        memcpy(&rw, &res[k], 4);
        const uint32_t ta = th << 1; /* the sign shifted out */
        const int32_t et = (int32_t)(ta >> 21);
        const uint32_t skip = -(uint32_t)((ta | tl) == 0) |
                              -(uint32_t)(et == 0x7ff) |
                              -(uint32_t)((ow << 1 >> 24) == 0xff);
        const uint32_t eb = rw << 1 >> 24; /* e + 127 */
        const uint32_t same = -(uint32_t)(res[k] == old[k]);
        /* rare: a subnormal binary64 addend, or a result that is zero
         * or subnormal in binary32 and not the old value */
        rare |= ~skip & (-(uint32_t)(et == 0) | (-(uint32_t)(eb == 0) & ~same));
        /* the result's quantum exponent q, plus 1075: q = e - p + 1 for
         * a normal result of the format, q_tiny below */
        const int32_t q1075 = (int32_t)eb >= eb_min ? (int32_t)eb + 949 - p
                                                    : q_tiny1075;
        /* t's lowest set bit, low above the significand's bottom: one
         * conversion, of the word that holds it */
        const uint32_t lm = -(uint32_t)(tl != 0);
        const uint32_t word = (tl & lm) |
                              (((th & 0xfffff) | 0x100000) & ~lm);
        const int32_t low = ctz32_lanes(word) + (int32_t)(32 & ~lm);
        /* count_swamp_scalar's bits = min(msb, q - 1) - lsb + 1, with
         * msb = et - 1023 and lsb = et - 1075 + low: at most 53 - low,
         * so only the clamp at zero is left */
        const int32_t top = q1075 - et;
        int32_t bits = (top < 53 ? top : 53) - low;
        bits = bits < 0 ? 0 : bits;
        const uint32_t inf = -(uint32_t)(eb == 0xff);
        uint32_t bin = (uint32_t)bits & ~inf;
        bin = (bin & ~same) | ((uint32_t)(EMU_LOST_BINS - 1) & same);
        bins[k] = (bin & ~skip) | ((uint32_t)SWAMP_SKIP & skip);
        nabsorbed += same & ~skip; /* minus the count */
    }
    if (rare)
        return false;
    /* four tables, so that increments of one bin need not wait for each
     * other (as stats.c's tables_count) */
    for (int k = 0; k < CARRY_RUN; k += 8) {
        n[0][bins[k]]++;
        n[1][bins[k + 1]]++;
        n[2][bins[k + 2]]++;
        n[3][bins[k + 3]]++;
        n[0][bins[k + 4]]++;
        n[1][bins[k + 5]]++;
        n[2][bins[k + 6]]++;
        n[3][bins[k + 7]]++;
    }
    *absorbed_sum += (uint32_t)(0u - nabsorbed);
    return true;
}

/* The runs of a chunk (runs <= 64) through count_swamp_run_any, in one
 * call: the format's constants and the lanes' are set up once per chunk
 * rather than once per run.  Returns the runs it did not count (bit r for
 * run r), which the caller counts with count_swamp_scalar. */
static EMU_KERNEL_INLINE uint64_t
count_swamp_runs_any(const emu_format *f, const double *t, const float *old,
                     const float *res, size_t runs,
                     uint64_t n[4][EMU_LOST_BINS + 1], uint64_t *absorbed_sum)
{
    const int32_t q_tiny = f->subnormals ? f->emin - f->p + 1 : f->emin;
    const int32_t emin = f->emin, p = f->p;
    uint64_t rare = 0;
    for (size_t r = 0; r < runs; r++) {
        const size_t o = r * CARRY_RUN;
        if (!count_swamp_run_any(q_tiny, emin, p, t + o, old + o, res + o, n,
                                 absorbed_sum))
            rare |= (uint64_t)1 << r;
    }
    return rare;
}

/* count_swamp_runs_any compiled per instruction-set level (isa.c
 * chooses): integer operations and exact conversions, the same counts at
 * every level; AVX2's eight 32-bit lanes take half the instructions of
 * baseline's four. */
typedef uint64_t (*swamp_kernel)(const emu_format *, const double *,
                                 const float *, const float *, size_t,
                                 uint64_t[4][EMU_LOST_BINS + 1], uint64_t *);

static uint64_t count_swamp_run_base(const emu_format *f, const double *t,
                                     const float *old, const float *res,
                                     size_t runs,
                                     uint64_t n[4][EMU_LOST_BINS + 1],
                                     uint64_t *absorbed_sum)
{
    return count_swamp_runs_any(f, t, old, res, runs, n, absorbed_sum);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static uint64_t count_swamp_run_avx2(const emu_format *f, const double *t,
                                     const float *old, const float *res,
                                     size_t runs,
                                     uint64_t n[4][EMU_LOST_BINS + 1],
                                     uint64_t *absorbed_sum)
{
    return count_swamp_runs_any(f, t, old, res, runs, n, absorbed_sum);
}

EMU_ISA_TARGET_AVX512
static uint64_t count_swamp_run_avx512(const emu_format *f, const double *t,
                                       const float *old, const float *res,
                                       size_t runs,
                                       uint64_t n[4][EMU_LOST_BINS + 1],
                                       uint64_t *absorbed_sum)
{
    return count_swamp_runs_any(f, t, old, res, runs, n, absorbed_sum);
}
#endif

static swamp_kernel swamp_kernel_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return count_swamp_run_avx512;
    if (isa == EMU_ISA_AVX2)
        return count_swamp_run_avx2;
#endif
    (void)isa;
    return count_swamp_run_base;
}

/* The vector runs' swamping counts of one commit (or one part of it),
 * kept across its chunks and folded into its emu_accum_counts once, at
 * the end (swamp_fold): clearing and summing the tables per chunk cost
 * as much as a run's counting. */
typedef struct swamp_tables {
    uint64_t n[4][EMU_LOST_BINS + 1];
    uint64_t absorbed;
} swamp_tables;

/* Swamping of the outputs i0 .. i0+m-1 of a chunk, whose addends are
 * add[0..m): runs of CARRY_RUN through count_swamp_run_any into st, the
 * rest (and its rare runs) through count_swamp_scalar, the reference,
 * into c. */
static void count_swamp(const emu_op_out *o, size_t i0, const double *add,
                        const float *res, size_t m, swamp_tables *st,
                        emu_accum_counts *c)
{
    const emu_format *f = &o->out->fmt;
    const swamp_kernel run = swamp_kernel_for(emu_isa_active());
    _Static_assert(CHUNK / CARRY_RUN <= 64, "a run's bit in a 64-bit word");
    const size_t runs = m / CARRY_RUN, j = runs * CARRY_RUN;
    const uint64_t rare = run(f, add, o->acc_old + i0, res, runs, st->n,
                              &st->absorbed);
    for (size_t k = 0; k < runs; k++)
        if (rare >> k & 1)
            count_swamp_scalar(o, i0 + k * CARRY_RUN, add + k * CARRY_RUN,
                               res + k * CARRY_RUN, CARRY_RUN, c);
    if (j < m)
        count_swamp_scalar(o, i0 + j, add + j, res + j, m - j, c);
}

/* st's counts into c (the tables' bins below SWAMP_SKIP add up to the
 * adds). */
static void swamp_fold(const swamp_tables *st, emu_accum_counts *c)
{
    for (int b = 0; b < EMU_LOST_BINS; b++) {
        const uint64_t k = st->n[0][b] + st->n[1][b] + st->n[2][b] +
                           st->n[3][b];
        c->adds += k;
        c->lost_bits[b] += k;
    }
    c->absorbed += st->absorbed;
}

/* ---- binary64 values and pairs into binary32 under nearest-even ---------
 * The fp32 policy's commits of values that are not binary32 values (an
 * optimizer's exact sums w0 - lr v and mom v0 + g, as pairs hi + lo; wide
 * binary64 results): the host's own conversion (float)hi is the rounding,
 * the floating-point environment being the default one (EMU_HOSTFP_GUARD:
 * nearest-even, no flush to zero).  hi is the binary64 nearest hi + lo,
 * and every boundary of binary32's grid (its midpoints, for nearest) is a
 * binary64, so hi + lo rounds as hi does unless hi is itself a midpoint
 * while lo is not zero.  A lane is common when its result is a normal
 * binary32 above 2^-126 (or a zero from an exact zero) and hi is no such
 * midpoint: then the rounding raised nothing but inexact (hi + lo is not
 * the result), and the exact value's binade is the result's, or the one
 * below when the result is a power of two above the exact value (a carry
 * into the next binade, or hi a power of two with lo toward zero).  The
 * other lanes (midpoints with a low part, tiny, subnormal, zero from a
 * non-zero value, overflow, infinities, NaNs: rare in a training step)
 * send their whole chunk to the general path, which then recomputes it.
 * In 64-bit lanes (the binary32 result compared as the binary64 it
 * converts back to), branch-free, runs of constant length: one clone per
 * instruction-set level (isa.c chooses), the same IEEE operations in each. */
typedef struct rne32_sums {
    uint64_t inexact; /* lanes whose result is not hi + lo               */
    uint64_t rare;    /* non-zero: a lane the general path must take     */
    uint64_t down;    /* non-zero: a lane whose result is a power of two,
                         whose exact value may lie in the binade below
                         (looked for with the bins only: the histograms
                         are its one reader)                            */
} rne32_sums;

static EMU_KERNEL_INLINE void rne32_run(float *restrict res,
                                        uint32_t *restrict bins,
                                        const double *restrict h,
                                        const double *restrict l,
                                        const bool has_lo, const bool has_bins,
                                        rne32_sums *s)
{
    const uint64_t sign = (uint64_t)1 << 63;
    const int64_t min_normal = (int64_t)(1023 - 126) << 52; /* 2^-126 */
    const int64_t inf = (int64_t)0x7ff << 52;
    const uint32_t bin0 = 127 + EMU_HIST_EMIN - EMU_HIST_FIRST;
    /* Each test a lane mask (all ones or zero), the form a vector
     * compare leaves, so that no lane spends operations turning it into
     * 0 or 1; nexact adds the masks of the lanes whose result is hi + lo
     * itself, minus their count (gcc -O2 vectorises a sum, not a
     * difference). */
    uint64_t nexact = 0, ok = ~(uint64_t)0, mid = 0, down = 0;
    for (int k = 0; k < CARRY_RUN; k++) {
        const double x = h[k];
        const double y = has_lo ? l[k] : 0.0;
        const float f = (float)x;
        const double back = (double)f;
        uint64_t hb, bb;
        memcpy(&hb, &x, sizeof hb);
        memcpy(&bb, &back, sizeof bb);
        /* magnitudes below 2^63: signed comparisons, which every
         * vector level has */
        const int64_t ab = (int64_t)(bb & ~sign);
        /* lo == 0: +-0 (a NaN low part is not zero) */
        const uint64_t lz = -(uint64_t)(y == 0.0);
        /* a normal result above 2^-126, or zero from hi = lo = 0 */
        const uint64_t normal = -(uint64_t)(ab > min_normal) &
                                -(uint64_t)(ab < inf);
        ok &= normal | (-(uint64_t)(x == 0.0) & lz);
        /* hi a midpoint of binary32's grid (29 low bits 1 followed by
         * 28 zeros), with a low part */
        mid |= -(uint64_t)((hb & 0x1fffffff) == 0x10000000) & ~lz;
        /* a NaN hi makes its lane not ok, so == on the values serves
         * for the bits' equality */
        nexact += -(uint64_t)(x == back) & lz;
        /* the result a power of two (rare): hist_down_fix then finds
         * those above their exact values; wanted with the bins only */
        if (has_bins)
            down |= normal & -(uint64_t)((bb << 12) == 0);
        res[k] = f;
    }
    /* The results' histogram bins, as stats.c's bins give them to a
     * normal binary32 or a zero (the only results of a chunk that stays
     * here): the binade from the exponent field, EMU_HIST_ZERO (0) for a
     * zero.  A loop apart, in 32-bit lanes over the results just stored
     * (narrowing 64-bit lanes cost more than this loop). */
    if (has_bins) {
        for (int k = 0; k < CARRY_RUN; k++) {
            uint32_t w;
            memcpy(&w, &res[k], sizeof w);
            const uint32_t a = w & 0x7fffffff;
            bins[k] = ((a >> 23) - bin0) & (0u - (uint32_t)(a != 0));
        }
    }
    s->inexact += CARRY_RUN + nexact; /* modulo 2^64 */
    s->rare |= ~ok | mid;
    s->down |= down;
}

/* The runs, each shape of them (low parts or none, bins or none) a loop
 * of its own, which keeps each branch-free. */
static EMU_KERNEL_INLINE void rne32_any(float *restrict res,
                                        uint32_t *restrict bins,
                                        const double *restrict h,
                                        const double *restrict l, size_t runs,
                                        rne32_sums *s)
{
    for (size_t j = 0; j < runs; j++) {
        const size_t o = j * CARRY_RUN;
        if (l && bins)
            rne32_run(res + o, bins + o, h + o, l + o, true, true, s);
        else if (l)
            rne32_run(res + o, NULL, h + o, l + o, true, false, s);
        else if (bins)
            rne32_run(res + o, bins + o, h + o, NULL, false, true, s);
        else
            rne32_run(res + o, NULL, h + o, NULL, false, false, s);
    }
}

typedef void (*rne32_kernel)(float *restrict, uint32_t *restrict,
                             const double *restrict, const double *restrict,
                             size_t, rne32_sums *);

static void rne32_base(float *restrict res, uint32_t *restrict bins,
                       const double *restrict h, const double *restrict l,
                       size_t runs, rne32_sums *s)
{
    rne32_any(res, bins, h, l, runs, s);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static void rne32_avx2(float *restrict res, uint32_t *restrict bins,
                       const double *restrict h, const double *restrict l,
                       size_t runs, rne32_sums *s)
{
    rne32_any(res, bins, h, l, runs, s);
}

EMU_ISA_TARGET_AVX512
static void rne32_avx512(float *restrict res, uint32_t *restrict bins,
                         const double *restrict h, const double *restrict l,
                         size_t runs, rne32_sums *s)
{
    rne32_any(res, bins, h, l, runs, s);
}
#endif

static rne32_kernel rne32_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return rne32_avx512;
    if (isa == EMU_ISA_AVX2)
        return rne32_avx2;
#endif
    (void)isa;
    return rne32_base;
}

/* A chunk of values h (and l, or NULL) into binary32 under nearest-even,
 * with the fast lanes above: true, res and the counts set, *down set if
 * bins is not NULL and some result is a power of two (its exact value may
 * lie in the binade below), and bins[0..m) the results' histogram bins
 * unless bins is NULL, when every lane is common; false, counts untouched, otherwise.  The
 * chunk's tail (below a run) goes through the same lanes from a
 * zero-padded copy. */
static bool rne32_chunk(rne32_kernel kern, float *res, uint32_t *bins,
                        const double *h, const double *l, size_t m,
                        emu_round_counts *counts, bool *down)
{
    rne32_sums s = { 0, 0, 0 };
    const size_t runs = m / CARRY_RUN, done = runs * CARRY_RUN;
    kern(res, bins, h, l, runs, &s);
    if (done < m && !s.rare) {
        double th[CARRY_RUN] = { 0 }, tl[CARRY_RUN] = { 0 };
        float tr[CARRY_RUN];
        uint32_t tb[CARRY_RUN];
        memcpy(th, h + done, (m - done) * sizeof *th);
        if (l)
            memcpy(tl, l + done, (m - done) * sizeof *tl);
        /* the padding: exact zeros */
        kern(tr, bins ? tb : NULL, th, l ? tl : NULL, 1, &s);
        memcpy(res + done, tr, (m - done) * sizeof *tr);
        if (bins)
            memcpy(bins + done, tb, (m - done) * sizeof *tb);
    }
    if (s.rare)
        return false;
    counts->n += m;
    counts->inexact += s.inexact;
    if (s.inexact)
        counts->flags |= EMU_FLAG_INEXACT;
    *down = s.down != 0;
    return true;
}

/* What one commit carries from chunk to chunk. */
typedef struct commit_run {
    const emu_ctx *ctx;
    const emu_op_out *o;
    uint64_t stream;
    emu_array_rounding ar;
    bool sr, identity;
    rne32_kernel rne32;     /* binary32 under nearest-even: the fast
                               lanes of rne32_chunk, or NULL            */
    bool down;              /* the chunk just rounded by them has a
                               power of two among its results          */
    uint32_t *bins;         /* where they put the results' histogram
                               bins (run_chunk's array), or NULL       */
    bool binned;            /* bins holds the chunk's bins             */
    float *fin;             /* run_chunk's array for the chunk's values
                               as binary32 (round_chunk's)            */
    bool narrowed;          /* fin holds the chunk's values, all of
                               them binary32 values, with no low parts */
    emu_round_counts counts;
    bool measure, hist, tables, swamp, ref, ref_all;
    uint64_t cut;           /* sampling threshold on a 64-bit word        */
    ref_work w;
    emu_site_stats s;       /* accumulated over the chunks               */
    uint64_t nan;           /* NaN values found by the chunks' NaN loops  */
    emu_accum_counts c;     /* swamping                                   */
    swamp_tables *st;       /* its vector runs' counts (swamp_fold), or
                               NULL when nothing is counted             */
    bool st_used;           /* st zeroed and holding counts              */
    emu_hist_tables *hb;    /* bins of both histograms, their differences
                               counted into hist_exact (tables); for
                               scaled outputs the rounded values' only   */
    emu_hist_tables *hbx;   /* scaled outputs: the exact values' bins     */
    bool hb_used;           /* hb (and hbx) zeroed and holding counts     */
    float *res;             /* results kept aside, or NULL: stored early */
    const double *add;      /* the chunk's addends from fill_add, or NULL:
                               o->addend's                              */
} commit_run;

/* Subnormals and NaNs among CARRY_RUN binary32 values: a loop of constant
 * length, which gcc's cheap vectoriser (-O2) takes (inlined, in each
 * level's carry_runs too). */
static EMU_KERNEL_INLINE void carry_scan(const float *v, uint32_t *sub,
                                         uint32_t *nan)
{
    uint32_t w[CARRY_RUN], s = 0, q = 0;
    memcpy(w, v, sizeof w);
    for (int j = 0; j < CARRY_RUN; j++) {
        const uint32_t a = w[j] & 0x7fffffff;
        s += a - 1 < 0x7fffff; /* 0 < |f| < 2^-126 */
        q += a > 0x7f800000;
    }
    *sub = s;
    *nan = q;
}

/* CARRY_RUN doubles narrowed into binary32; true if each was a binary32
 * value or NaN.  A constant count and tests without short circuit, which
 * gcc vectorises.  IEEE conversions and compares under the default
 * environment: the same values and answer at every level. */
static EMU_KERNEL_INLINE bool narrow_run(float *restrict out,
                                         const double *restrict h)
{
    unsigned ok = 1;
    for (int j = 0; j < CARRY_RUN; j++) {
        const float f = (float)h[j];
        out[j] = f;
        ok &= (unsigned)((double)f == h[j]) | (unsigned)(f != f);
    }
    return ok != 0;
}

/* runs of CARRY_RUN doubles through narrow_run: false at the first run
 * holding a value wider than binary32 (out then partly written).
 * Compiled per instruction-set level (isa.c chooses): most ops' values
 * pass here before the binary32 rounding path, and baseline's SSE2
 * converts two doubles an instruction, AVX-512 eight. */
static EMU_KERNEL_INLINE bool narrow_runs_any(float *restrict out,
                                              const double *restrict h,
                                              size_t runs)
{
    for (size_t r = 0; r < runs; r++)
        if (!narrow_run(out + r * CARRY_RUN, h + r * CARRY_RUN))
            return false;
    return true;
}

EMU_ISA_VARIANTS(bool, narrow_runs,
                 (float *restrict out, const double *restrict h, size_t runs),
                 (out, h, runs))

/* Runs of CARRY_RUN binary32 values with each signalling NaN made quiet
 * (returns the runs: all): one loop that loads, sets the quiet bit under
 * a mask and stores.
 * Compiled per instruction-set level (isa.c chooses), as copy_runs: every
 * binary32 value of a producer (fill32) under a rounding that is not the
 * identity (binary16 and 8-bit outputs) passes here. */
static EMU_KERNEL_INLINE size_t quiet_runs_any(float *restrict out,
                                               const float *restrict v,
                                               size_t runs)
{
    for (size_t r = 0; r < runs; r++) {
        const float *restrict src = v + r * CARRY_RUN;
        float *restrict dst = out + r * CARRY_RUN;
        for (int k = 0; k < CARRY_RUN; k++) {
            uint32_t w;
            memcpy(&w, &src[k], sizeof w);
            w |= 0x00400000u & -(uint32_t)((w & 0x7fffffff) > 0x7f800000);
            memcpy(&dst[k], &w, sizeof w);
        }
    }
    return runs;
}

EMU_ISA_VARIANTS(size_t, quiet_runs,
                 (float *restrict out, const float *restrict v, size_t runs),
                 (out, v, runs))

/* carry_f32's runs: each narrowed into res and checked (narrow_run),
 * then its subnormals and NaNs counted (carry_scan, on the run just
 * written, still in cache).  Returns the runs done, their subnormals
 * added to *sub; stops at the first run holding a wider value (*wide
 * set) or a NaN (left to the caller, element by element).  Compiled per
 * instruction-set level (isa.c chooses), as narrow_runs. */
static EMU_KERNEL_INLINE size_t carry_runs_any(float *restrict res,
                                               const double *restrict hi,
                                               size_t runs, uint64_t *sub,
                                               bool *wide)
{
    uint64_t sum = 0;
    size_t r = 0;
    for (; r < runs; r++) {
        uint32_t s, q;
        if (!narrow_run(res + r * CARRY_RUN, hi + r * CARRY_RUN)) {
            *wide = true;
            break;
        }
        carry_scan(res + r * CARRY_RUN, &s, &q);
        if (q)
            break;
        sum += s;
    }
    *sub += sum;
    return r;
}

EMU_ISA_VARIANTS(size_t, carry_runs,
                 (float *restrict res, const double *restrict hi,
                  size_t runs, uint64_t *sub, bool *wide),
                 (res, hi, runs, sub, wide))

/* A chunk of values into binary32 itself, under a rounding that maps
 * binary32 to itself (emu_round_is_identity_f32): if every value is a
 * binary32 value (or a NaN), res gets them, NaNs made the canonical quiet
 * NaN, counted as emu_round_array_f32 counts them (nothing inexact,
 * subnormals flagged), and true; else false, counts untouched (res then
 * holds anything).  Runs of CARRY_RUN through carry_runs_any; a run with
 * a NaN and the rest of the chunk go one element at a time. */
static bool carry_f32(float *res, const double *hi, size_t m,
                      emu_round_counts *counts)
{
    const uint64_t d_inf = (uint64_t)0x7ff << 52;
    const uint32_t qnan = 0x7fc00000;
    uint64_t wide = 0, sub = 0, nan = 0;
    bool wide_run = false;
    const size_t j0 = CARRY_RUN * carry_runs_for(emu_isa_active())(
                                      res, hi, m / CARRY_RUN, &sub, &wide_run);
    if (wide_run)
        return false;
    for (size_t j = j0; j < m; j++) {
        const float f = (float)hi[j];
        const double back = (double)f;
        uint64_t u, v;
        uint32_t w;
        memcpy(&u, &hi[j], sizeof u);
        memcpy(&v, &back, sizeof v);
        memcpy(&w, &f, sizeof w);
        const uint32_t a = w & 0x7fffffff;
        const uint32_t is_nan = a > 0x7f800000;
        wide |= (uint64_t)(u != v) & (uint64_t)((u << 1) <= d_inf << 1);
        sub += a - 1 < 0x7fffff; /* 0 < |f| < 2^-126 */
        nan += is_nan;
        w = is_nan ? qnan : w;
        memcpy(&res[j], &w, sizeof w);
    }
    if (wide)
        return false;
    counts->n += m;
    counts->subnormal += sub;
    counts->nan += nan;
    if (sub)
        counts->flags |= EMU_FLAG_SUBNORMAL;
    return true;
}

/* carry_f32_f32's runs: each copied while its subnormals are counted
 * and its NaNs looked for (carry_scan's tests, in the copy's loop: one
 * pass, the words in registers).  Returns the runs done, their
 * subnormals added to *sub; stops at the first run holding a NaN (left
 * to the caller, element by element, which rewrites it).  Compiled per
 * instruction-set level (isa.c chooses), as carry_runs: with the
 * histograms off, every binary32 result of an identity rounding (a
 * fast-model GEMM's, an activation's) passes here. */
static EMU_KERNEL_INLINE size_t copy_runs_any(float *restrict res,
                                              const float *restrict v,
                                              size_t runs, uint64_t *sub)
{
    uint64_t sum = 0;
    size_t r = 0;
    for (; r < runs; r++) {
        const float *restrict src = v + r * CARRY_RUN;
        float *restrict dst = res + r * CARRY_RUN;
        uint32_t s = 0, q = 0;
        for (int k = 0; k < CARRY_RUN; k++) {
            uint32_t w;
            memcpy(&w, &src[k], sizeof w);
            const uint32_t a = w & 0x7fffffff;
            s += a - 1 < 0x7fffff; /* 0 < |f| < 2^-126 */
            q |= -(uint32_t)(a > 0x7f800000);
            memcpy(&dst[k], &w, sizeof w);
        }
        if (q)
            break;
        sum += s;
    }
    *sub += sum;
    return r;
}

EMU_ISA_VARIANTS(size_t, copy_runs,
                 (float *restrict res, const float *restrict v, size_t runs,
                  uint64_t *sub),
                 (res, v, runs, sub))

/* A chunk of binary32 values into binary32 under an identity rounding:
 * carry_f32's work without its check, which binary32 values pass.  Runs
 * without a NaN (nearly all) are counted and copied by copy_runs; a run
 * with a NaN and the rest of the chunk go one element at a time. */
static void carry_f32_f32(float *res, const float *v, size_t m,
                          emu_round_counts *counts)
{
    const uint32_t qnan = 0x7fc00000;
    uint64_t sub = 0, nan = 0;
    const size_t j0 = CARRY_RUN * copy_runs_for(emu_isa_active())(
                                      res, v, m / CARRY_RUN, &sub);
    for (size_t j = j0; j < m; j++) {
        uint32_t w;
        memcpy(&w, &v[j], sizeof w);
        const uint32_t a = w & 0x7fffffff;
        const uint32_t is_nan = a > 0x7f800000;
        sub += a - 1 < 0x7fffff;
        nan += is_nan;
        w = is_nan ? qnan : w;
        memcpy(&res[j], &w, sizeof w);
    }
    counts->n += m;
    counts->subnormal += sub;
    counts->nan += nan;
    if (sub)
        counts->flags |= EMU_FLAG_SUBNORMAL;
}

/* ---- binary32 values carried into binary32, binned as they are copied --
 * An op whose values are binary32 (a producer's fill32) under an identity
 * rounding, histograms wanted: each run of CARRY_RUN values copied into
 * the results with its histogram bins, in one loop of 32-bit lanes, which
 * also finds the runs holding a value that is not a normal binary32 or a
 * zero (subnormals, infinities, NaNs: rare).  A run without one counts
 * nothing but its results (carry_f32_f32 would find no subnormal and no
 * NaN in it); a rare run is redone by carry_f32_f32 and binned value by
 * value.  The bins are those stats.c gives (rne32_run's formula, tested
 * against emu_hist_bin_f32 with them).  One clone per instruction-set
 * level (isa.c chooses), integer operations only: the same bins and the
 * same runs flagged at every level. */
static EMU_KERNEL_INLINE uint64_t carry_bins_any(float *restrict res,
                                                 uint32_t *restrict bins,
                                                 const float *restrict v,
                                                 size_t runs)
{
    const uint32_t bin0 = 127 + EMU_HIST_EMIN - EMU_HIST_FIRST;
    uint64_t rare_runs = 0;
    for (size_t r = 0; r < runs; r++) {
        const size_t o = r * CARRY_RUN;
        uint32_t w[CARRY_RUN], rare = 0;
        memcpy(w, v + o, sizeof w);
        for (int k = 0; k < CARRY_RUN; k++) {
            const uint32_t a = w[k] & 0x7fffffff;
            bins[o + (size_t)k] =
                ((a >> 23) - bin0) & (0u - (uint32_t)(a != 0));
            rare |= (uint32_t)(a - 1 < 0x7fffff) | (uint32_t)(a >= 0x7f800000);
        }
        memcpy(res + o, w, sizeof w);
        rare_runs |= (uint64_t)(rare != 0) << r;
    }
    return rare_runs;
}

typedef uint64_t (*carry_bins_kernel)(float *restrict, uint32_t *restrict,
                                      const float *restrict, size_t);

static uint64_t carry_bins_base(float *restrict res, uint32_t *restrict bins,
                                const float *restrict v, size_t runs)
{
    return carry_bins_any(res, bins, v, runs);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static uint64_t carry_bins_avx2(float *restrict res, uint32_t *restrict bins,
                                const float *restrict v, size_t runs)
{
    return carry_bins_any(res, bins, v, runs);
}

EMU_ISA_TARGET_AVX512
static uint64_t carry_bins_avx512(float *restrict res,
                                  uint32_t *restrict bins,
                                  const float *restrict v, size_t runs)
{
    return carry_bins_any(res, bins, v, runs);
}
#endif

static carry_bins_kernel carry_bins_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return carry_bins_avx512;
    if (isa == EMU_ISA_AVX2)
        return carry_bins_avx2;
#endif
    (void)isa;
    return carry_bins_base;
}

/* carry_f32_f32's results and counts for a chunk, with the results'
 * histogram bins in bins[0..m). */
static void carry_f32_f32_bins(float *res, uint32_t *bins, const float *v,
                               size_t m, emu_round_counts *counts)
{
    _Static_assert(CHUNK / CARRY_RUN <= 64, "a run's bit in a 64-bit word");
    const size_t runs = m / CARRY_RUN, done = runs * CARRY_RUN;
    const uint64_t rare =
        carry_bins_for(emu_isa_active())(res, bins, v, runs);
    counts->n += done;
    for (size_t r = 0; r < runs; r++) {
        if (!(rare >> r & 1))
            continue;
        const size_t o = r * CARRY_RUN;
        counts->n -= CARRY_RUN; /* counted again, with its kinds, below */
        carry_f32_f32(res + o, v + o, CARRY_RUN, counts);
        for (size_t j = o; j < o + CARRY_RUN; j++)
            bins[j] = (uint32_t)emu_hist_bin_f32_unguarded(res[j]);
    }
    if (done < m) {
        carry_f32_f32(res + done, v + done, m - done, counts);
        for (size_t j = done; j < m; j++)
            bins[j] = (uint32_t)emu_hist_bin_f32_unguarded(res[j]);
    }
}

static bool round_chunk(commit_run *r, size_t i0, size_t m, const double *h,
                        const double *l, const float *v, float *res);

/* A chunk of pairs under a deterministic mode, some of them lo_bad (an
 * update smaller than half a binary64 ulp of its weight leaves hi on the
 * weight itself, a grid point, and lo the update): the chunk through the
 * array path with those elements' values replaced by zeros (exact: a
 * tensor's format always has a zero; they count one result and nothing
 * else, taken off again), then those elements alone through the scalar choke point, which
 * sees their low parts.  Every element is rounded and counted as if the
 * whole chunk had gone through the scalar choke point, which the array
 * path is tested to agree with element by element. */
static void round_lo_apart(commit_run *r, size_t i0, size_t m, const double *h,
                           const double *l, float *res)
{
    const emu_format *fmt = &r->o->out->fmt;
    const uint64_t mask = lo_mask(fmt->p);
    double hz[CHUNK];
    uint64_t nbad = 0;
    for (size_t j = 0; j < m; j++) {
        const uint32_t bad = lo_bad(h[j], l[j], mask);
        hz[j] = bad ? 0.0 : h[j];
        nbad += bad;
    }
    round_chunk(r, i0, m, hz, NULL, NULL, res);
    r->narrowed = false; /* fin holds hz, not the values */
    r->counts.n -= nbad;
    for (size_t j = 0; j < m; j++) {
        if (lo_bad(h[j], l[j], mask)) {
            r->ar.first_index = i0 + j;
            emu_round_pairs_f32_unguarded(fmt, res + j, h + j, l + j, 1,
                                          &r->ar, &r->counts);
        }
    }
}

/* Step 1 for one chunk: outputs i0 .. i0+m-1, whose values are h (and l,
 * or NULL), or the binary32 values v, rounded into res[0..m).  The array
 * path where the values are plain doubles, the scalar choke point where a
 * low part must be seen.  Returns true if the chunk was carried into
 * binary32 unrounded (no low parts) or rounded by rne32_chunk's lanes: its
 * values and results then fall in the same histogram bins (a NaN's payload
 * aside, which bins as NaN), but where r->down says some exact values may
 * lie a binade below (hist_down_fix). */
static bool round_chunk(commit_run *r, size_t i0, size_t m, const double *h,
                        const double *l, const float *v, float *res)
{
    const emu_format *fmt = &r->o->out->fmt;
    emu_round_counts *counts = &r->counts;
    r->ar.first_index = i0;
    r->down = false;
    r->binned = false;
    r->narrowed = false;
    float *const fin = r->fin;
    if (v) {
        if (r->identity && r->bins) {
            carry_f32_f32_bins(res, r->bins, v, m, counts);
            r->binned = true;
            return true;
        }
        if (r->identity) {
            carry_f32_f32(res, v, m, counts);
            return true;
        }
        /* As the values were read before through a binary64: a
         * signalling NaN quiet, sign and payload kept (quiet_runs,
         * then the tail). */
        size_t j = CARRY_RUN * quiet_runs_for(emu_isa_active())(
                                   fin, v, m / CARRY_RUN);
        for (; j < m; j++) {
            uint32_t w;
            memcpy(&w, &v[j], sizeof w);
            w |= ((w & 0x7fffffff) > 0x7f800000) ? 0x00400000u : 0u;
            memcpy(&fin[j], &w, sizeof w);
        }
        emu_round_array_f32_unguarded(fmt, res, fin, m, &r->ar, counts);
        return false;
    }
    /* binary32 under nearest-even: pairs in one pass of vector lanes */
    if (l && r->rne32 &&
        rne32_chunk(r->rne32, res, r->bins, h, l, m, counts, &r->down)) {
        r->binned = r->bins != NULL;
        return true;
    }
    if (l && !r->sr && !lo_harmless(h, l, m, fmt->p)) {
        round_lo_apart(r, i0, m, h, l, res);
        return false;
    }
    double buf[CHUNK];
    if (!l || !r->sr) { /* no low part, or a harmless one */
        /* Both binary32 shortcuts below need every value of the chunk
         * to be a binary32 value (or NaN): a first value that is not
         * (an optimizer's new weights, mostly) rules them out without
         * two passes over the chunk. */
        const bool wide0 = (double)(float)h[0] != h[0] && !isnan(h[0]);
        if (!wide0 && r->identity && carry_f32(res, h, m, counts))
            return !l;
        if (!l && r->rne32 &&
            rne32_chunk(r->rne32, res, r->bins, h, NULL, m, counts,
                        &r->down)) {
            r->binned = r->bins != NULL;
            return true;
        }
        /* Most ops' values are binary32 values already (a fast-model
         * GEMM, sums of 16-bit values, casts): then the binary32 array
         * path, several times faster, rounds them the same way. */
        const size_t runs = m / CARRY_RUN;
        bool narrow =
            !wide0 && narrow_runs_for(emu_isa_active())(fin, h, runs);
        for (size_t j = runs * CARRY_RUN; narrow && j < m; j++) {
            fin[j] = (float)h[j];
            narrow = (double)fin[j] == h[j] || isnan(fin[j]);
        }
        if (narrow) {
            emu_round_array_f32_unguarded(fmt, res, fin, m, &r->ar, counts);
            r->narrowed = !l;
            return false;
        }
        emu_round_array_f64_unguarded(fmt, buf, h, m, &r->ar, counts);
    } else {
        /* Pairs whose low part must be seen: the array kernel (vector
         * lanes under stochastic rounding, the scalar choke point
         * otherwise), with the words of element i0 + j as emu_random64
         * gives them. */
        emu_round_pairs_f32_unguarded(fmt, res, h, l, m, &r->ar, counts);
        return false;
    }
    /* Narrowed (exact: carrier values) in runs of constant length, which
     * gcc -O2 vectorises, then the tail. */
    size_t j = 0;
    for (; j + CARRY_RUN <= m; j += CARRY_RUN) {
        float f[CARRY_RUN];
        for (int k = 0; k < CARRY_RUN; k++)
            f[k] = (float)buf[j + (size_t)k];
        memcpy(res + j, f, sizeof f);
    }
    for (; j < m; j++)
        res[j] = (float)buf[j];
    return false;
}

/* Output i's value after rounding (res: its element): the element times
 * its scales (exact: the scaled formats keep every such product a
 * binary64). */
static double value_of(const emu_op_out *o, float res, size_t i)
{
    return o->scale ? (double)res * (double)o->scale[i] * o->scale_g
                    : (double)res;
}

/* m values into a histogram, directly (the short outputs: longer ones
 * count both histograms through one table, measure_chunk). */
static void hist_put(uint64_t *hist, const void *x, size_t m, bool f32)
{
    for (size_t j = 0; j < m; j++)
        hist[f32 ? emu_hist_bin_f32_unguarded(((const float *)x)[j])
                 : emu_hist_bin_unguarded(((const double *)x)[j])]++;
}

/* The exact values' histogram of a chunk of pairs hi + lo: hi's bins
 * moved down a bin where exact_bin says so (hi a power of two, lo toward
 * zero): rare, found by a branch-free scan.  With the tables, hi's counts
 * reach hist_exact only at the merge, so a move may take hist_exact below
 * zero for a while: unsigned, the sum is right. */
static void hist_lo_fix_run(uint64_t *hist, const double *h,
                            const double *l, size_t m)
{
    for (size_t j = 0; j < m; j++) {
        const int b = emu_hist_bin_unguarded(h[j]);
        const int e = exact_bin(h[j], l[j]);
        if (e != b) {
            hist[b]--;
            hist[e]++;
        }
    }
}

/* Whether a run of CARRY_RUN pairs holds one whose exact value may lie
 * a binade below hi's: hi's fraction zero, lo not zero, their signs
 * apart.  On 64-bit patterns, compiled per instruction-set level (isa.c
 * chooses): AVX2 compares 64-bit lanes, which baseline's SSE2 cannot;
 * integer operations only, the same answer at every level. */
static EMU_KERNEL_INLINE uint64_t lo_fix_scan_any(const double *restrict h,
                                                  const double *restrict l)
{
    uint64_t any = 0;
    for (int k = 0; k < CARRY_RUN; k++) {
        uint64_t a, b;
        memcpy(&a, &h[k], sizeof a);
        memcpy(&b, &l[k], sizeof b);
        any |= (uint64_t)((a & 0x000fffffffffffffu) == 0) &
               (uint64_t)((b << 1) != 0) & ((a ^ b) >> 63);
    }
    return any;
}

typedef uint64_t (*lo_scan_kernel)(const double *restrict,
                                   const double *restrict);

static uint64_t lo_fix_scan_base(const double *restrict h,
                                 const double *restrict l)
{
    return lo_fix_scan_any(h, l);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static uint64_t lo_fix_scan_avx2(const double *restrict h,
                                 const double *restrict l)
{
    return lo_fix_scan_any(h, l);
}

EMU_ISA_TARGET_AVX512
static uint64_t lo_fix_scan_avx512(const double *restrict h,
                                   const double *restrict l)
{
    return lo_fix_scan_any(h, l);
}
#endif

static lo_scan_kernel lo_scan_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return lo_fix_scan_avx512;
    if (isa == EMU_ISA_AVX2)
        return lo_fix_scan_avx2;
#endif
    (void)isa;
    return lo_fix_scan_base;
}

static void hist_lo_fix(uint64_t *hist, const double *h, const double *l,
                        size_t m)
{
    /* runs of constant length scanned by the kernel; a run with such an
     * element is then moved element by element (an update's weights and
     * momentum in binary16 hold powers of two often enough that the
     * whole chunk would cost) */
    const lo_scan_kernel scan = lo_scan_for(emu_isa_active());
    size_t j0 = 0;
    for (; j0 + CARRY_RUN <= m; j0 += CARRY_RUN)
        if (scan(h + j0, l + j0))
            hist_lo_fix_run(hist, h + j0, l + j0, CARRY_RUN);
    if (j0 < m)
        hist_lo_fix_run(hist, h + j0, l + j0, m - j0);
}

/* The exact values' histogram of a chunk rounded by rne32_chunk, whose
 * counts hist_both took from the results: an exact value below its result
 * that is a power of two (a normal one: rne32_chunk's) lies in the binade
 * below.  Modulo 2^64 while the tables hold the rest, as hist_lo_fix. */
static void hist_down_fix(uint64_t *hist, const double *h, const double *l,
                          const float *res, size_t m)
{
    for (size_t j = 0; j < m; j++) {
        const double x = fabs(h[j]), y = fabs((double)res[j]);
        uint32_t u;
        memcpy(&u, &res[j], sizeof u);
        if ((u & 0x7fffff) != 0 || y == 0.0)
            continue;
        const bool toward_zero = l && l[j] != 0.0 &&
                                 (signbit(l[j]) != signbit(h[j]));
        if (x < y || (x == y && toward_zero)) {
            const int b = emu_hist_bin_f32_unguarded(res[j]);
            hist[b]--;
            hist[b - 1]++;
        }
    }
}

/* The bins of a carried chunk, into both histograms at once: those
 * rne32_chunk's lanes left in r->bins, or the results' own. */
static void hist_both(commit_run *r, const float *res, size_t m)
{
    if (!r->tables) {
        for (size_t j = 0; j < m; j++) {
            const int b = r->binned ? (int)r->bins[j]
                                    : emu_hist_bin_f32_unguarded(res[j]);
            r->s.hist_exact[b]++;
            r->s.hist_rounded[b]++;
        }
        return;
    }
    if (!r->hb_used) {
        memset(r->hb, 0, sizeof *r->hb);
        r->hb_used = true;
    }
    if (r->binned)
        emu_hist_tables_add_bins(r->hb, r->bins, m);
    else
        emu_hist_tables_add(r->hb, res, m, true);
}

/* Steps 2 to 4 for one chunk (as round_chunk's arguments, res rounded;
 * nan: the NaN results the rounding counted in it; carried: round_chunk's
 * answer). */
static void measure_chunk(commit_run *r, size_t i0, size_t m, const double *h,
                          const double *l, const float *v, const float *res,
                          uint64_t nan, bool carried)
{
    const emu_op_out *o = r->o;
    emu_site_stats *s = &r->s;
    /* Scaled outputs: the values after rounding (value_of's products, in
     * a loop that vectorises) for the NaN loop and the histograms.  A
     * scaled element's scale may be NaN: the products show it. */
    double sv[CHUNK];
    if (o->scale) {
        const float *sc = o->scale + i0;
        const double g = o->scale_g;
        uint32_t any = 0;
        for (size_t j = 0; j < m; j++) {
            sv[j] = (double)res[j] * (double)sc[j] * g;
            any |= (uint32_t)(sv[j] != sv[j]);
        }
        nan = any; /* the loop below runs iff a product is NaN */
    }
    /* NaN results, and those made from numbers rather than passed on.
     * Without a scale and without a question to the op (none asked when
     * every output's inputs held a NaN, as in a diverged model), a NaN
     * result was made here exactly when its own value was no NaN:
     * counted in registers, with no call and no store an element. */
    if (nan && !o->scale && !o->inputs_had_nan) {
        uint64_t all = 0, made = 0;
        if (v)
            for (size_t j = 0; j < m; j++) {
                const uint64_t out = isnan(res[j]) != 0;
                all += out;
                made += out & (uint64_t)!isnan(v[j]);
            }
        else
            for (size_t j = 0; j < m; j++) {
                const uint64_t out = isnan(res[j]) != 0;
                all += out;
                made += out & (uint64_t)!isnan(h[j]);
            }
        r->nan += all;
        s->nan_produced += made;
    } else if (nan) {
        for (size_t j = 0; j < m; j++) {
            const size_t i = i0 + j;
            if (!isnan(value_of(o, res[j], i)))
                continue;
            r->nan++;
            const bool nan_in = (v ? isnan(v[j]) : isnan(h[j])) ||
                                (o->scale && isnan(o->scale[i]));
            if (!nan_in || (o->inputs_had_nan && !o->inputs_had_nan(o->op, i)))
                s->nan_produced++;
        }
    }
    /* Swamping of an accumulation out = acc_old + addend. */
    if (r->st) {
        if (!r->st_used) {
            memset(r->st, 0, sizeof *r->st);
            r->st_used = true;
        }
        count_swamp(o, i0, r->add ? r->add : o->addend + i0, res, m, r->st,
                    &r->c);
    }
    if (r->hist) {
        /* Plain values and binary32 results: the bins straight from the
         * arrays, in integers.  The exact value hi + lo: hi's binade
         * unless hi is a power of two and lo points toward zero. */
        if (carried && !o->scale) {
            hist_both(r, res, m);
            if (r->down)
                hist_down_fix(s->hist_exact, h, l, res, m);
        } else if (o->scale && r->tables) {
            /* the exact values (src) and the rounded ones (sv) mostly
             * lie in different binades (the element's scale apart):
             * a table each, merged each into its own histogram */
            if (!r->hb_used) {
                memset(r->hb, 0, sizeof *r->hb);
                memset(r->hbx, 0, sizeof *r->hbx);
                r->hb_used = true;
            }
            emu_hist_tables_add(r->hbx, o->src + i0, m, true);
            emu_hist_tables_add(r->hb, sv, m, false);
        } else if (o->scale) {
            emu_hist_add_f32_unguarded(s->hist_exact, o->src + i0, m);
            emu_hist_add_unguarded(s->hist_rounded, sv, m);
        } else if ((v || r->narrowed) && r->tables) {
            /* binary32 values and results: mostly in the same bins, so
             * counted once into the table of both, the exact histogram
             * corrected where a value's bin differs from its result's.
             * Binary64 values that round_chunk found to be binary32 ones
             * (sums of 16-bit values, a bias added to a GEMM's rounded
             * products) are binned from their binary32 copies, which
             * fall in the same bins as the binary64 values (binary32's
             * range lies inside the histograms'; NaN bins as NaN) by
             * the cheaper kernel of the two. */
            if (!r->hb_used) {
                memset(r->hb, 0, sizeof *r->hb);
                r->hb_used = true;
            }
            emu_hist_tables_add_pair_f32(r->hb, s->hist_exact,
                                         v ? v : r->fin, res, m);
        } else if (r->tables) {
            /* binary64 values (hi of pairs): counted once into the table
             * of both, as above, then hi's moves for the low parts */
            if (!r->hb_used) {
                memset(r->hb, 0, sizeof *r->hb);
                r->hb_used = true;
            }
            emu_hist_tables_add_pair_f64(r->hb, s->hist_exact, h, res, m);
            if (l)
                hist_lo_fix(s->hist_exact, h, l, m);
        } else {
            if (v) {
                hist_put(s->hist_exact, v, m, true);
            } else {
                hist_put(s->hist_exact, h, m, false);
                if (l)
                    hist_lo_fix(s->hist_exact, h, l, m);
            }
            hist_put(s->hist_rounded, res, m, true);
        }
    }
    if (r->ref) {
        for (size_t j = 0; j < m; j++) {
            const size_t i = i0 + j;
            if (r->ref_all ||
                emu_random64(r->ctx->seed, r->stream ^ SAMPLE_TAG, i) < r->cut)
                sample(o, i, res[j], v ? (double)v[j] : h[j],
                       l ? &l[j] : NULL, &r->w, s);
        }
    }
}

/* One chunk, all steps, then its results stored. */
static void run_chunk(commit_run *r, size_t i0, size_t m, const double *h,
                      const double *l, const float *v)
{
    float res[CHUNK], fin[CHUNK];
    uint32_t bins[CHUNK];
    const uint64_t nan0 = r->counts.nan;
    r->fin = fin;
    /* rne32_chunk's lanes bin the results as they round them when the
     * histograms are wanted of a chunk not scaled (whose bins are the
     * scaled values') */
    r->bins = r->hist && !r->o->scale ? bins : NULL;
    const bool carried = round_chunk(r, i0, m, h, l, v, res);
    if (r->measure)
        measure_chunk(r, i0, m, h, l, v, res, r->counts.nan - nan0, carried);
    memcpy(r->res ? r->res + i0 : r->o->out->data + i0, res,
           m * sizeof *res);
}

/* The chunks of outputs i_begin .. i_end - 1 (i_begin a multiple of
 * CHUNK), in order. */
static void run_chunks(commit_run *r, size_t i_begin, size_t i_end)
{
    const emu_op_out *o = r->o;
    if (o->hi) {
        for (size_t i0 = i_begin; i0 < i_end; i0 += CHUNK)
            run_chunk(r, i0, i_end - i0 < CHUNK ? i_end - i0 : CHUNK,
                      o->hi + i0, o->lo ? o->lo + i0 : NULL, NULL);
    } else if (o->fill || o->fill_add) {
        double h[CHUNK], l[CHUNK], a[CHUNK];
        r->add = o->fill_add ? a : NULL;
        for (size_t i0 = i_begin; i0 < i_end; i0 += CHUNK) {
            const size_t m = i_end - i0 < CHUNK ? i_end - i0 : CHUNK;
            const bool has_lo = (o->fill ? o->fill(o->op, i0, m, h, l)
                                         : o->fill_add(o->op, i0, m, h, l, a)) != 0;
            run_chunk(r, i0, m, h, has_lo ? l : NULL, NULL);
        }
        r->add = NULL;
    } else {
        float v[CHUNK];
        for (size_t i0 = i_begin; i0 < i_end; i0 += CHUNK) {
            const size_t m = i_end - i0 < CHUNK ? i_end - i0 : CHUNK;
            o->fill32(o->op, i0, m, v);
            run_chunk(r, i0, m, NULL, NULL, v);
        }
    }
    if (r->st_used) {
        swamp_fold(r->st, &r->c);
        r->st_used = false;
    }
}

/* ---- the chunks on several threads ----------------------------------------
 * ctx->threads parts, each a run of whole chunks (part t: chunks
 * nc*t/T .. nc*(t+1)/T - 1) with its own commit_run: its own counts,
 * histogram tables, swamping counts and NaN counts, merged into the
 * caller's in part order once all have run.  Every statistic merged so is
 * a count (integer sums, the histogram tables' differences modulo 2^64,
 * OR of flags), so the totals are the one-thread ones bit for bit.  The
 * sums of doubles (the MPFR errors) would not be: with sampling on, the
 * chunks stay on one thread.  Rounding reads its random words by element
 * index (emu_random64(seed, stream, i)), so stochastic rounding gives the
 * one-thread results whatever thread rounds an element. */

/* At least this many chunks per part: below, waking a worker costs about
 * what it saves (a chunk takes one to a few microseconds). */
enum { PAR_MIN_CHUNKS = 8 };

/* How many parts emu_commit splits o's chunks into (1: the plain loop).
 * Only ops whose callbacks may run concurrently (o->parallel), or arrays
 * with no callback at all; never with MPFR sampling (ref). */
static int commit_parts(const emu_ctx *ctx, const emu_op_out *o, bool ref)
{
    /* Scaled outputs keep a second table (hbx, the exact values' bins)
     * that the parts' merge does not carry: they run on one thread. */
    if (ctx->threads <= 1 || ref || o->scale)
        return 1;
    if (!o->parallel && !(o->hi && !o->inputs_had_nan))
        return 1;
    const size_t nc = (o->out->n + CHUNK - 1) / CHUNK;
    return emu_pool_parts(ctx->threads, nc, PAR_MIN_CHUNKS);
}

int emu_commit_parts_(const emu_ctx *ctx, const emu_op_out *o)
{
    return commit_parts(ctx, o,
                        ctx->stats && (ctx->measure & EMU_MEASURE_REF) &&
                            o->ref && ctx->ref_rate > 0.0);
}

typedef struct commit_part {
    commit_run r;
    emu_hist_tables table;
    swamp_tables st;
} commit_part;

typedef struct commit_par {
    const commit_run *base;
    commit_part *parts;
    size_t n, nc;
} commit_par;

static void commit_part_run(void *p, int t, int T)
{
    commit_par *cp = p;
    commit_run *r = &cp->parts[t].r;
    *r = *cp->base; /* its sums all zero: nothing has run yet */
    if (r->hb)
        r->hb = &cp->parts[t].table;
    if (r->st)
        r->st = &cp->parts[t].st;
    const size_t c0 = cp->nc * (size_t)t / (size_t)T;
    const size_t c1 = cp->nc * (size_t)(t + 1) / (size_t)T;
    const size_t i1 = c1 * CHUNK < cp->n ? c1 * CHUNK : cp->n;
    run_chunks(r, c0 * CHUNK, i1);
}

static void counts_add(emu_round_counts *a, const emu_round_counts *b)
{
    a->n += b->n;
    a->inexact += b->inexact;
    a->underflow += b->underflow;
    a->to_zero += b->to_zero;
    a->subnormal += b->subnormal;
    a->overflow += b->overflow;
    a->nan += b->nan;
    a->invalid += b->invalid;
    a->flags |= b->flags;
}

/* into += from, a commit's statistics (r's: hist, ref): the histograms
 * only if it measured them and the MPFR errors only if it sampled.  The
 * rest of from is then zeros whose sums would change nothing (the error
 * sums and maxima are +0.0, added to sums of magnitudes and taken by fmax
 * of them, never -0.0 or NaN) but cost passes over its 7 KB of histogram
 * bins, three a commit on two threads, on the caller's thread: ~1 us each
 * on this machine, 50-70 commits a step. */
static void site_stats_add(emu_site_stats *into, const emu_site_stats *from,
                           const commit_run *r)
{
    if (r->hist || r->ref)
        emu_site_stats_merge(into, from);
    else
        emu_site_stats_merge_counts(into, from);
}

/* The chunks of r's op on T threads, the parts' statistics merged into r
 * in part order; -1 if out of memory (nothing committed). */
static int commit_parallel(commit_run *r, int T)
{
    commit_part *parts = malloc((size_t)T * sizeof *parts);
    if (!parts)
        return -1;
    const size_t n = r->o->out->n;
    commit_par cp = { .base = r, .parts = parts, .n = n,
                      .nc = (n + CHUNK - 1) / CHUNK };
    emu_pool_run(T, commit_part_run, &cp);
    for (int t = 0; t < T; t++) {
        const commit_run *p = &parts[t].r;
        counts_add(&r->counts, &p->counts);
        r->nan += p->nan;
        r->c.adds += p->c.adds;
        r->c.absorbed += p->c.absorbed;
        for (int b = 0; b < EMU_LOST_BINS; b++)
            r->c.lost_bits[b] += p->c.lost_bits[b];
        site_stats_add(&r->s, &p->s, r);
        if (p->hb_used) {
            emu_hist_tables_merge(r->s.hist_exact, &parts[t].table);
            emu_hist_tables_merge(r->s.hist_rounded, &parts[t].table);
        }
    }
    free(parts);
    return 0;
}

/* With an observer, which sees whole arrays: the producer's values
 * gathered into out->n doubles (lo kept only if a chunk had low parts),
 * then committed as arrays. */
static int commit_gathered(emu_ctx *ctx, const emu_op_out *o)
{
    const size_t n = o->out->n;
    const bool pairs = o->fill || o->fill_add;
    double *hi = emu_scratch(ctx, o->site, n ? n : 1);
    double *lo = pairs && hi ? emu_scratch(ctx, o->site, n ? n : 1) : NULL;
    double *add = o->fill_add && lo ? emu_scratch(ctx, o->site, n ? n : 1)
                                    : NULL;
    if (!hi || (pairs && !lo) || (o->fill_add && !add)) {
        free(hi);
        free(lo);
        return -1;
    }
    bool any_lo = false;
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        const size_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        if (pairs) {
            if (o->fill ? o->fill(o->op, i0, m, hi + i0, lo + i0)
                        : o->fill_add(o->op, i0, m, hi + i0, lo + i0,
                                      add + i0))
                any_lo = true;
            else
                memset(lo + i0, 0, m * sizeof *lo); /* +0.0 */
        } else {
            float v[CHUNK];
            o->fill32(o->op, i0, m, v);
            for (size_t j = 0; j < m; j++)
                hi[i0 + j] = v[j];
        }
    }
    emu_op_out a = *o;
    a.fill = NULL;
    a.fill32 = NULL;
    a.fill_add = NULL;
    a.hi = hi;
    a.lo = any_lo ? lo : NULL;
    if (add)
        a.addend = add;
    int rc = emu_commit(ctx, &a);
    free(hi);
    free(lo);
    free(add);
    return rc;
}

/* Whether site's histograms are measured whatever ctx->measure says
 * (emu_stats.hist_always). */
static bool hist_always(const emu_stats *st, const char *site)
{
    if (st->hist_always)
        for (const char *const *p = st->hist_always; *p; p++)
            if (!strcmp(*p, site))
                return true;
    return false;
}

int emu_commit(emu_ctx *ctx, const emu_op_out *o)
{
    EMU_HOSTFP_GUARD;
    emu_tensor *out = o->out;
    const size_t n = out->n;
    /* Required even when nothing is rounded here, so that an op's missing
     * rounding shows whatever is being measured. */
    if (emu_check_rounding(ctx, o->site, o->rnd))
        return -1;
    if (!!o->hi + !!o->fill + !!o->fill32 + !!o->fill_add > 1)
        return emu_ctx_fail(ctx, o->site, "internal: results committed "
                            "both as arrays and by a producer");
    if (o->fill_add && o->addend)
        return emu_ctx_fail(ctx, o->site, "internal: addends given both as "
                            "an array and by the producer");
    if (!o->hi && !o->fill && !o->fill32 && !o->fill_add) {
        /* The op rounded its results itself: legal only when nothing here
         * would have looked at them. */
        if (emu_commit_measures(ctx))
            return emu_ctx_fail(ctx, o->site, "internal: results committed "
                                "without their values while measuring");
        ctx->op_index++;
        return 0;
    }
    if (!o->hi && ctx->observer)
        return commit_gathered(ctx, o);

    const bool measure = ctx->stats && (ctx->measure & EMU_MEASURE_ALL);
    emu_site *site = NULL;
    if (measure) {
        site = emu_stats_site(ctx->stats, o->site, o->kind, out->role,
                              &out->fmt);
        if (!site)
            return emu_ctx_failc(ctx, EMU_ENOMEM, o->site,
                                 "out of memory for statistics");
    }
    /* Unless the op says its callbacks never look back at out's storage,
     * the results go to a private array first: the measurements read the
     * op's inputs (MPFR reference, NaN provenance, old values of an
     * accumulation), and an in-place op's output is one of them. */
    float *res = NULL;
    if (!o->store_early) {
        res = malloc((n ? n : 1) * sizeof *res);
        if (!res)
            return emu_ctx_failc(ctx, EMU_ENOMEM, o->site,
                                 "out of memory for %zu results", n);
    }
    emu_hist_tables table, table_x;
    swamp_tables st;
    commit_run r = {
        .ctx = ctx, .o = o, .stream = ctx->op_index++,
        .measure = measure, .res = res,
        .hist = measure && ((ctx->measure & EMU_MEASURE_HIST) ||
                            hist_always(ctx->stats, o->site)),
        .tables = n >= HIST_TABLES_MIN,
        .swamp = measure && (o->swamp || o->addend || o->fill_add) &&
                 (ctx->measure & EMU_MEASURE_SWAMP),
        .ref = measure && (ctx->measure & EMU_MEASURE_REF) && o->ref &&
               ctx->ref_rate > 0.0,
    };
    r.ar = (emu_array_rounding){ .rnd = *o->rnd, .seed = ctx->seed,
                                 .stream = r.stream, .first_index = 0 };
    r.ar.rnd.rng = NULL;
    r.sr = emu_rnd_is_stochastic(r.ar.rnd.mode);
    r.identity = emu_round_is_identity_f32(&out->fmt, &r.ar.rnd);
    r.rne32 = r.identity && r.ar.rnd.mode == EMU_RNE
                  ? rne32_for(emu_isa_active()) : NULL;
    if (r.swamp && (o->addend || o->fill_add))
        r.st = &st; /* zeroed by its first chunk */
    if (r.hist && r.tables) {
        r.hb = &table; /* zeroed by its first chunk */
        r.hbx = o->scale ? &table_x : NULL;
    }
    if (r.ref) {
        /* Threshold on a 64-bit word; rate 1 samples every output. */
        r.ref_all = ctx->ref_rate >= 1.0;
        r.cut = r.ref_all ? 0 : (uint64_t)ldexp(ctx->ref_rate, 64);
        mpfr_inits2(REF_PREC, r.w.exact, r.w.src, r.w.pre, r.w.out, r.w.t,
                    (mpfr_ptr)0);
    }

    const int parts = commit_parts(ctx, o, r.ref);
    if (parts > 1) {
        if (commit_parallel(&r, parts)) {
            if (r.ref)
                mpfr_clears(r.w.exact, r.w.src, r.w.pre, r.w.out, r.w.t,
                            (mpfr_ptr)0);
            free(res);
            return emu_ctx_failc(ctx, EMU_ENOMEM, o->site,
                                 "out of memory for the threads' statistics");
        }
    } else {
        run_chunks(&r, 0, n);
    }

    if (measure) {
        emu_site_stats *s = &r.s;
        const emu_round_counts *c = &r.counts;
        s->results = c->n;
        s->inexact = c->inexact;
        s->underflow = c->underflow;
        s->to_zero = c->to_zero;
        s->subnormal = c->subnormal;
        s->overflow = c->overflow;
        /* The NaN loops ran over every chunk holding a NaN result (for
         * scaled outputs, a NaN product of element and scales): with
         * none, the rounding's count. */
        s->nan = o->scale || c->nan ? r.nan : c->nan;
        if (r.swamp) {
            /* The op's own counts are read now, after its producer's last
             * chunk: a producer may count while it forms its values. */
            if (o->swamp) {
                r.c.adds += o->swamp->adds;
                r.c.absorbed += o->swamp->absorbed;
                for (int b = 0; b < EMU_LOST_BINS; b++)
                    r.c.lost_bits[b] += o->swamp->lost_bits[b];
            }
            s->adds = r.c.adds;
            s->absorbed = r.c.absorbed;
            memcpy(s->lost_bits, r.c.lost_bits, sizeof s->lost_bits);
        }
        if (r.hist) {
            if (r.tables && r.hb_used) {
                emu_hist_tables_merge(s->hist_exact, r.hbx ? r.hbx : r.hb);
                emu_hist_tables_merge(s->hist_rounded, r.hb);
            }
            if (o->hist_scale)
                for (int b = 0; b < EMU_HIST_BINS; b++)
                    s->hist_scale[b] += o->hist_scale[b];
        }
        site_stats_add(&site->total, s, &r);
        site_stats_add(&site->step, s, &r);
        site->active = true;
    }
    if (r.ref)
        mpfr_clears(r.w.exact, r.w.src, r.w.pre, r.w.out, r.w.t, (mpfr_ptr)0);
    if (res) {
        memcpy(out->data, res, n * sizeof *res);
        free(res);
    }

    if (ctx->observer) {
        emu_op_event ev = { .site = o->site, .kind = o->kind, .out = out,
                            .hi = o->hi, .lo = o->lo, .counts = &r.counts,
                            .op_index = r.stream };
        ctx->observer(ctx->observer_user, &ev);
    }
    return 0;
}
