/*
 * round_array.c — rounding whole arrays: the hot path of every tensor op.
 *
 * Called by the tensor choke point for every op's outputs, by casts and by
 * the CLI's bulk conversions.  The map is emu_round2_word() applied to each
 * element with word emu_random64(seed, stream, first_index + i); this file
 * only makes it fast, and tests/test_round_array.c proves it bit-identical,
 * flags and counts included.
 *
 * binary32 into a format that fits the carrier.  Let u be the magnitude
 * bits of the input and 2^emin the format's smallest normal.
 *
 *  - At or above 2^emin the format's quantum is a fixed number d = 24 - p
 *    of binary32's fraction bits, so rounding is integer arithmetic on u:
 *    add an increment that depends on the mode (half - 1 + last kept bit
 *    for nearest-even, the top bits of the random word for stochastic, ...)
 *    and clear the d low bits.  A carry out of the fraction lands in the
 *    exponent, which is exactly the step to the next binade; the result is
 *    compared with max's pattern for overflow.
 *
 *  - Below 2^emin the quantum is fixed in absolute terms, 2^qs, so the
 *    number of dropped bits varies with the input's exponent.  Adding
 *    magic = 2^(qs + 23), whose ulp is 2^qs, rounds the input to the
 *    quantum grid in one binary32 addition (to nearest even: the default
 *    floating-point environment, which the whole library assumes), and
 *    a - ((a + magic) - magic) is the exact error.  The other modes move
 *    that result by one quantum according to the error's sign; the
 *    stochastic modes compare the exact fraction, scaled to 32-bit fixed
 *    point, with the random word's high half (the low halves decide only
 *    in a tie, probability 2^-32, redone separately).
 *
 * Both candidates are computed for every element and blended, so the
 * loops have no data-dependent branches and vectorise (no floating-point
 * operation sits under a condition, which -ftrapping-math would forbid
 * if-converting).  Work goes in tiles of TILE elements, one fused pass
 * per tile: each lane's rounding, then overflow, sign and zero rules, and
 * its events summed in vector lanes; each input is read once and each
 * result written once.  The rare lanes the fast code does not cover (NaN
 * and inf inputs, negatives into unsigned formats, zeros in formats
 * without zero, binary32 subnormals when emin <= -126, stochastic ties of
 * probability 2^-32) are redone by the scalar choke point, and what the
 * pass counted for them is taken back.  The results of overflow are taken
 * from emu_round2_word itself, so the two paths cannot drift apart.
 *
 * The pass is specialised at compile time by mode, by whether the format
 * needs the grid below 2^emin (not bfloat16 and tf32, whose lanes there
 * are zeros or binary32 subnormals) and by whether it needs the general
 * sign, zero and overflow rules (unsigned, fnuz, no zero, RU/RD), and each
 * specialisation is compiled for baseline x86-64, AVX2 and AVX-512; isa.c
 * picks the level per process (EMU_ISA forces a lower one, which is how
 * the tests check every level).  Stochastic rounding takes the words'
 * high halves from rng.c's vectorised Philox: the low halves matter only
 * in the ties left to the choke point.
 *
 * binary64 input uses the same method on 64-bit patterns, as the same
 * kind of fused tile kernel (the choke point rounds through it the values
 * that are not binary32 values: an optimizer's new weights, and under
 * stochastic rounding the gradients and other sums of products); its
 * stochastic lanes below 2^emin decide on integers, as the pairs' do.
 * Pairs hi + lo under stochastic rounding (the optimizer's exact sums)
 * have a kernel of their own, emu_round_pairs_f32_unguarded, below.
 *
 * With EMU_OPENMP, large arrays are split into tiles across threads.  The
 * random word of element i depends only on i, and the counts are sums of
 * integers, so the results and counts equal the sequential ones exactly.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/round.h"
#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { TILE = 1024 };

/* Below this, threads cost more than they save. */
#define EMU_OMP_MIN_N ((size_t)1 << 16)

void emu_round_counts_add_unguarded(emu_round_counts *c, double in, double out,
                                    unsigned flags)
{
    c->n++;
    c->inexact += (flags & EMU_FLAG_INEXACT) != 0;
    c->underflow += (flags & EMU_FLAG_UNDERFLOW) != 0;
    c->to_zero += isfinite(in) && in != 0.0 && out == 0.0;
    c->subnormal += (flags & EMU_FLAG_SUBNORMAL) != 0;
    c->overflow += (flags & EMU_FLAG_OVERFLOW) != 0;
    c->nan += isnan(out) != 0;
    c->invalid += (flags & EMU_FLAG_INVALID) != 0;
    c->flags |= flags;
}

void emu_round_counts_add(emu_round_counts *c, double in, double out,
                          unsigned flags)
{
    EMU_HOSTFP_GUARD;
    emu_round_counts_add_unguarded(c, in, out, flags);
}

static void counts_merge(emu_round_counts *c, const emu_round_counts *d)
{
    c->n += d->n;
    c->inexact += d->inexact;
    c->underflow += d->underflow;
    c->to_zero += d->to_zero;
    c->subnormal += d->subnormal;
    c->overflow += d->overflow;
    c->nan += d->nan;
    c->invalid += d->invalid;
    c->flags |= d->flags;
}

/* k elements each counted as emu_round_counts_add(c, in, out, flags). */
static void counts_add_times(emu_round_counts *c, double in, double out,
                             unsigned flags, uint64_t k)
{
    if (!k)
        return;
    c->n += k;
    c->inexact += (flags & EMU_FLAG_INEXACT) ? k : 0;
    c->underflow += (flags & EMU_FLAG_UNDERFLOW) ? k : 0;
    c->to_zero += isfinite(in) && in != 0.0 && out == 0.0 ? k : 0;
    c->subnormal += (flags & EMU_FLAG_SUBNORMAL) ? k : 0;
    c->overflow += (flags & EMU_FLAG_OVERFLOW) ? k : 0;
    c->nan += isnan(out) ? k : 0;
    c->invalid += (flags & EMU_FLAG_INVALID) ? k : 0;
    c->flags |= flags;
}

/* The slow lanes of a diverged model are its whole arrays of NaN (and
 * inf), mostly one pattern.  A non-finite input's result does not depend
 * on the random word, and while its magnitude u stays one quantum below
 * the top of the pattern range (u + 2^d <= the largest NaN), the kernels'
 * rounded magnitude cannot wrap into the sign bit, so the events they
 * counted for it (overflow and inexact, overflow_neg for negatives) do
 * not depend on the word either.  So the slow loops keep the last such
 * pattern's result, events and counts, and its repeats in the tile take
 * them without a lane of their own. */
typedef struct special_run {
    bool on;            /* a pattern is held                           */
    uint64_t bits;      /* its input pattern                           */
    double x, y;        /* its input and result                        */
    unsigned flags;     /* the choke point's flags for it              */
    uint64_t k;         /* its repeats since it was first rounded      */
} special_run;

/* m ? x : y for m all ones or zero.  Written as a mask blend so that the
 * compiler keeps both operands' (floating-point) computations
 * unconditional: it may not move a possibly trapping operation under a
 * condition and then cannot vectorise the loop. */
static inline uint32_t blend(uint32_t m, uint32_t x, uint32_t y)
{
    return (x & m) | (y & ~m);
}

static inline uint32_t mask_of(bool c)
{
    return 0u - (uint32_t)c;
}

static inline float fblend(uint32_t m, float x, float y)
{
    return u2f(blend(m, f2u(x), f2u(y)));
}

static unsigned sr_bits_of(const emu_rounding *r)
{
    if (r->mode == EMU_RS_BITS && r->sr_bits >= 1 && r->sr_bits <= 64)
        return r->sr_bits;
    return 64;
}

/* ---- the scalar path: any format, any mode --------------------------- */

static void scalar_tile_f32(const emu_format *f, float *out, const float *in,
                            size_t len, const emu_array_rounding *a,
                            uint64_t first, emu_round_counts *c)
{
    uint64_t w[TILE];
    if (emu_rnd_is_stochastic(a->rnd.mode))
        emu_random_fill(a->seed, a->stream, first, w, len);
    else
        memset(w, 0, len * sizeof w[0]);
    for (size_t i = 0; i < len; i++) {
        emu_status st;
        double x = in[i];
        double y = emu_round2_word_unguarded(f, x, 0.0, &a->rnd, w[i], &st);
        out[i] = (float)y;
        emu_round_counts_add_unguarded(c, x, y, st.flags);
    }
}

static void scalar_tile_f64(const emu_format *f, double *out,
                            const double *in, size_t len,
                            const emu_array_rounding *a, uint64_t first,
                            emu_round_counts *c)
{
    uint64_t w[TILE];
    if (emu_rnd_is_stochastic(a->rnd.mode))
        emu_random_fill(a->seed, a->stream, first, w, len);
    else
        memset(w, 0, len * sizeof w[0]);
    for (size_t i = 0; i < len; i++) {
        emu_status st;
        double x = in[i];
        double y = emu_round2_word_unguarded(f, x, 0.0, &a->rnd, w[i], &st);
        out[i] = y;
        emu_round_counts_add_unguarded(c, x, y, st.flags);
    }
}

/* ---- constants shared by both fast paths ----------------------------- */

/* What overflow gives for each sign (index 1: negative), asked of the
 * choke point with a value that overflows in every mode. */
static void overflow_results(const emu_format *f, const emu_rounding *r,
                             double res[2])
{
    for (int s = 0; s < 2; s++) {
        double x = s ? -2.0 * f->max : 2.0 * f->max;
        if (s && !f->is_signed) {
            res[s] = NAN; /* never used: negatives go to the scalar path */
            continue;
        }
        res[s] = emu_round2_word_unguarded(f, x, 0.0, r, 0, NULL);
    }
}

/* The quantum exponent below 2^emin: the subnormal quantum, or 2^emin
 * itself (the only non-zero value there) without subnormals. */
static int low_quantum(const emu_format *f)
{
    return f->subnormals ? f->emin - f->p + 1 : f->emin;
}

/* ---- the plans' memory ----------------------------------------------
 *
 * The tensor choke point rounds an op's outputs a chunk (1024 elements)
 * at a time, so every chunk built its plan anew: five ldexp and two calls
 * of the scalar choke point for the overflow results, some 1300
 * instructions a chunk, 1.3 an element, 2.8% of the instructions of an
 * fp8-e5m2 MLP step.
 * A plan is a function of the format's spec and derived fields and of the
 * rounding's mode, r, tininess, saturation and profile (overflow_results
 * passes word 0: never the rng), and of nothing else.  So each thread
 * keeps its last plan of each kind with a copy of those bytes and builds
 * a new one only when they differ.  Equal bytes imply equal fields, so a
 * stale plan cannot be taken; unequal padding only costs a rebuild. */
typedef struct plan_key {
    unsigned char spec[sizeof(emu_format) - offsetof(emu_format, ebits)];
    emu_rnd mode;
    unsigned sr_bits;
    emu_tininess tininess;
    bool saturate;
    emu_profile profile;
} plan_key;

static void plan_key_of(plan_key *k, const emu_format *f,
                        const emu_rounding *r)
{
    memset(k, 0, sizeof *k);
    memcpy(k->spec, (const unsigned char *)f + offsetof(emu_format, ebits),
           sizeof k->spec);
    k->mode = r->mode;
    k->sr_bits = r->sr_bits;
    k->tininess = r->tininess;
    k->saturate = r->saturate;
    k->profile = r->profile;
}

/* true if *key (held, with *valid) is f's and r's; otherwise makes it so,
 * and the caller builds the plan that goes with it. */
static bool plan_key_hit(plan_key *key, bool *valid, const emu_format *f,
                         const emu_rounding *r)
{
    plan_key k;
    plan_key_of(&k, f, r);
    if (*valid && !memcmp(&k, key, sizeof k))
        return true;
    *key = k;
    *valid = false; /* until the caller's plan is stored */
    return false;
}

/* ---- binary32: the plan ----------------------------------------------- */

/* The kernels' modes: the deterministic ones, and stochastic (full or
 * r-bit, told apart by the plan's constants). */
enum { K_RNE, K_RZ, K_RNA, K_RU, K_RD, K_RO, K_SR };

typedef struct f32_plan {
    int kmode;                  /* K_*                                  */
    uint32_t tiny_u;            /* all ones: tininess before rounding   */
    uint32_t d, mask, half;     /* dropped bits at and above 2^emin     */
    uint32_t emin_bits;         /* pattern of 2^emin                    */
    uint32_t max_bits;          /* pattern of max                       */
    float magic;                /* 2^(qs + 23)                          */
    float quantum;              /* 2^qs                                 */
    float half_q;               /* 2^(qs - 1): the tie distance         */
    uint32_t ovf[2], ovf_nan[2];/* overflow result and whether NaN      */
    uint32_t zero_sign;         /* sign bit a zero result may keep      */
    uint32_t ovf_sign;          /* sign bit an overflow result keeps    */
    /* which elements go to the scalar path (see lane()) */
    bool neg_slow, small_slow, zero_slow;
    /* Kernels with every rule; the others assume a signed format with a
     * signed zero, whose overflow results for -x and x differ in the sign
     * only or not at all (IEEE-like formats in every mode but RU/RD, and
     * fn formats: e4m3's overflow NaN is the same for both signs) */
    bool general;
    int32_t neg_above, small_below, zero_below;
    /* stochastic: r-bit words at and above 2^emin ... */
    uint32_t sr_keep, sr_shift_r, sr_shift_l;
    /* ... and below: the top-r masks of the word's halves, and 2^(32-qs)
     * as two factors */
    uint32_t sr_mask_hi, sr_mask_lo;
    float sr_scale1, sr_scale2;
} f32_plan;

/* Fills the plan; false if the fast path does not cover fmt and mode. */
static bool build_plan_f32(f32_plan *pl, const emu_format *f,
                           const emu_rounding *r)
{
    int d = 24 - f->p;
    int qs = low_quantum(f);
    /* d = 0 (p = 24) leaves nothing to round at and above 2^emin; the
     * tie distance 2^(qs - 1) must be a binary32 and magic = 2^(qs + 23)
     * a normal one: the scalar path takes the odd formats outside. */
    if (!f->fits_carrier || d < 1 || d > 23 || qs > 0 || qs - 1 < -149
        || (unsigned)r->mode >= EMU_RND_COUNT)
        return false;
    memset(pl, 0, sizeof *pl);
    switch (r->mode) {
    case EMU_RNE: pl->kmode = K_RNE; break;
    case EMU_RZ:  pl->kmode = K_RZ; break;
    case EMU_RNA: pl->kmode = K_RNA; break;
    case EMU_RU:  pl->kmode = K_RU; break;
    case EMU_RD:  pl->kmode = K_RD; break;
    case EMU_RO:  pl->kmode = K_RO; break;
    default:      pl->kmode = K_SR; break;
    }
    pl->tiny_u = mask_of(r->tininess == EMU_TINY_BEFORE);
    pl->d = (uint32_t)d;
    pl->mask = (1u << d) - 1;
    pl->half = 1u << (d - 1);
    pl->emin_bits = f2u((float)f->min_normal);
    pl->max_bits = f2u((float)f->max);
    pl->magic = (float)ldexp(1.0, qs + 23);
    pl->quantum = (float)ldexp(1.0, qs);
    pl->half_q = (float)ldexp(1.0, qs - 1);

    double ovf[2];
    overflow_results(f, r, ovf);
    for (int s = 0; s < 2; s++) {
        pl->ovf[s] = f2u((float)ovf[s]);
        pl->ovf_nan[s] = isnan(ovf[s]) != 0;
    }
    pl->zero_sign = f->is_signed && f->specials != EMU_SPECIALS_FNUZ
                    ? 0x80000000u : 0;
    /* Negative non-zero inputs to an unsigned format. */
    pl->neg_slow = !f->is_signed;
    pl->neg_above = pl->neg_slow ? 0 : INT32_MAX;
    /* With emin <= -126 the binade just below 2^emin (or 2^emin itself)
     * holds binary32 subnormals, whose patterns the integer rounding does
     * not cover: 1 <= u <= 0x7fffff, as (u - 1) < 0x7fffff unsigned. */
    pl->small_slow = f->emin <= -126;
    pl->small_below = pl->small_slow ? (int32_t)(0x007fffffu ^ 0x80000000u)
                                     : INT32_MIN;
    /* Zero results (r = 0) in a format without zero. */
    pl->zero_slow = !f->has_zero;
    pl->zero_below = pl->zero_slow ? 1 : 0;
    /* The kernels without the general rules take the overflow result
     * of -x as x's with x's sign (ovf_sign) or as the same (e4m3's NaN). */
    const bool ovf_signed = pl->ovf[1] == (pl->ovf[0] | 0x80000000u)
                            && !(pl->ovf[0] & 0x80000000u);
    pl->ovf_sign = ovf_signed ? 0x80000000u : 0;
    pl->general = pl->neg_slow || pl->zero_slow
                  || pl->zero_sign != 0x80000000u
                  || (!ovf_signed && pl->ovf[1] != pl->ovf[0]);

    unsigned rb = sr_bits_of(r);
    uint32_t k = rb < (unsigned)d ? rb : (uint32_t)d;
    pl->sr_keep = ~((1u << (d - (int)k)) - 1);
    pl->sr_shift_r = 32 - k;
    pl->sr_shift_l = (uint32_t)d - k;
    pl->sr_mask_hi = rb >= 32 ? 0xffffffffu : ~(0xffffffffu >> rb);
    pl->sr_mask_lo = rb >= 64 ? 0xffffffffu
                   : rb <= 32 ? 0 : ~(0xffffffffu >> (rb - 32));
    int sc = 32 - qs;                       /* 32 .. 181 */
    int sc1 = sc < 127 ? sc : 127;
    pl->sr_scale1 = (float)ldexp(1.0, sc1);
    pl->sr_scale2 = (float)ldexp(1.0, sc - sc1);
    return true;
}

/* NAME(pl, f, r): the plan of TYPE for f and r from the thread's memory,
 * built by BUILD if f or r is not the last's. */
#define PLAN_MEMORY(NAME, TYPE, BUILD)                                        \
    static bool NAME(TYPE *pl, const emu_format *f, const emu_rounding *r)    \
    {                                                                         \
        static _Thread_local struct {                                         \
            plan_key key;                                                     \
            bool valid, fast;                                                 \
            TYPE plan;                                                        \
        } m;                                                                  \
        if (!plan_key_hit(&m.key, &m.valid, f, r)) {                          \
            m.fast = BUILD(&m.plan, f, r);                                    \
            m.valid = true;                                                   \
        }                                                                     \
        *pl = m.plan;                                                         \
        return m.fast;                                                        \
    }

PLAN_MEMORY(plan_f32, f32_plan, build_plan_f32)

/* ---- binary32: the fused kernel ---------------------------------------
 *
 * One pass per tile reads each input once and writes each result once:
 * per lane, the rounded magnitude r (the integer rounding n at d bits at
 * and above 2^emin, the quantum-grid rounding below), then the range
 * rules (overflow, sign, zero) and the lane's events, summed in 32-bit
 * lanes.  Lanes that the fast code does not cover are marked "slow" and
 * redone by the scalar choke point afterwards.
 *
 * Below 2^emin n is the rounding with an unbounded exponent range, which
 * tininess after rounding asks for (in the binade just below 2^emin, the
 * only place where it differs from tininess before rounding).  In formats
 * with emin <= -126 ("wide": bfloat16, tf32) every non-zero magnitude
 * below 2^emin is a binary32 subnormal, which is slow: those kernels skip
 * the grid rounding and the tiny-result events, which cannot happen in
 * their other lanes.
 *
 * In lanes the fast path covers, the input magnitude u and the rounded
 * magnitudes r and n are below 2^31 (u <= max float, plus at most one
 * quantum), so signed comparisons, which SSE2 has, are exact. */

/* Below 2^emin: a rounded to nearest-even on the quantum grid. */
static inline float low_rne(const f32_plan *pl, float a)
{
    return (a + pl->magic) - pl->magic;
}

/* Below 2^emin: a truncated to the quantum grid. */
static inline float low_rz(const f32_plan *pl, float a)
{
    /* Both candidates first: a select the vectoriser can if-convert,
     * with no floating-point operation under a condition. */
    float s = low_rne(pl, a), s_down = s - pl->quantum;
    return fblend(mask_of(s > a), s_down, s);
}

/* Stochastic, r-bit or full, from the high half wh of the lane's word.
 *
 * At and above 2^emin only the top min(r, d) bits of the word can change
 * the outcome, so they are added below the kept bits (after clearing the
 * dropped bits an r-bit rounder does not see) and the carry does the rest.
 *
 * Below 2^emin, with z the truncation and F = (a - z) / 2^qs exactly, the
 * outcome is the carry out of floor(F 2^64) + word, each cut to its top r
 * bits.  Split both into 32-bit halves fh:fl and wh:wl: the high halves
 * decide unless wh + fh = 2^32 - 1 exactly, which a uniform word gives
 * with probability 2^-32.  The kernel decides on the high halves and
 * leaves those ties to the choke point, with the whole word. */

/* floor(F 2^32) for the lane, and z. */
static inline uint32_t low_sr_high(const f32_plan *pl, float a, float *z)
{
    *z = low_rz(pl, a);
    float x = ((a - *z) * pl->sr_scale1) * pl->sr_scale2;  /* F 2^32, exact */
    /* 0 <= x < 2^32 in the lanes below 2^emin; the others may hold
     * anything (inf, NaN from inf - inf, negative values of lanes whose
     * z lies above a), and are kept from a conversion that C leaves
     * undefined.  AVX-512 converts to unsigned in one instruction. */
    return (uint32_t)(x >= 0.0f && x < 4294967296.0f ? x : 0.0f);
}

typedef struct tile_events {
    uint32_t inexact, underflow, to_zero, subnormal, overflow, overflow_neg;
    uint32_t slow;
} tile_events;

/* *e += k * one, slow aside. */
static void events_add_times(tile_events *e, const tile_events *one,
                             uint32_t k)
{
    e->inexact += one->inexact * k;
    e->underflow += one->underflow * k;
    e->to_zero += one->to_zero * k;
    e->subnormal += one->subnormal * k;
    e->overflow += one->overflow * k;
    e->overflow_neg += one->overflow_neg * k;
}

/* One lane: its result pattern, its events added to *e.  mode and low are
 * constants wherever this is inlined, so each kernel keeps only its own
 * arithmetic. */
static EMU_KERNEL_INLINE uint32_t lane(const f32_plan *p, const int mode,
                                       const bool low, const bool general,
                                       uint32_t b, uint32_t wh,
                                       tile_events *e)
{
    const uint32_t u = b & 0x7fffffffu, neg = b >> 31;
    const int32_t su = (int32_t)u, emin = (int32_t)p->emin_bits;
    const uint32_t keep = ~p->mask;
    const float a = u2f(u);
    uint32_t n, lo = 0, tie = 0;
    switch (mode) {
    case K_RNE:
        /* The last kept bit; with p = 1 it is the implicit bit (1). */
        n = (u + (p->half - 1) + (((u | 0x800000u) >> p->d) & 1)) & keep;
        if (low)
            lo = f2u(low_rne(p, a));
        break;
    case K_RZ:
        n = u & keep;
        if (low)
            lo = f2u(low_rz(p, a));
        break;
    case K_RNA:
        n = (u + p->half) & keep;
        if (low) {
            float s = low_rne(p, a), s_up = s + p->quantum;
            /* A tie that nearest-even sent down goes up instead. */
            lo = f2u(fblend(mask_of(a - s == p->half_q), s_up, s));
        }
        break;
    case K_RU:
    case K_RD: {
        /* Away from zero for one sign, toward it for the other. */
        const uint32_t away = neg ^ (mode == K_RU);
        n = (u + (mask_of(away) & p->mask)) & keep;
        if (low) {
            float z = low_rz(p, a), z_up = z + p->quantum;
            lo = f2u(fblend(mask_of(away & (z != a)), z_up, z));
        }
        break;
    }
    case K_RO: {
        /* Truncate, then set the last kept bit if anything was dropped
         * (an odd result stays, an even one moves up by one unit). */
        const uint32_t odd = ((u | 0x800000u) >> p->d) & 1;
        n = (u & keep) + (mask_of(((u & p->mask) != 0) & (odd ^ 1))
                          & (p->mask + 1));
        if (low) {
            float z = low_rz(p, a);
            /* z + magic is exact; its last bit is the parity of z / 2^qs. */
            uint32_t k = f2u(z + p->magic) | (mask_of(z != a) & 1);
            lo = f2u(u2f(k) - p->magic);
        }
        break;
    }
    default: /* K_SR */
        n = ((u & p->sr_keep) + ((wh >> p->sr_shift_r) << p->sr_shift_l))
            & keep;
        if (low) {
            float z;
            uint32_t fh = low_sr_high(p, a, &z) & p->sr_mask_hi;
            uint32_t gh = wh & p->sr_mask_hi;
            float z_up = z + p->quantum;
            lo = f2u(fblend(mask_of(gh > ~fh), z_up, z));
            /* With r <= 32 the low halves are cut away: no ties. */
            tie = (gh == ~fh) & (p->sr_mask_lo != 0);
        }
        break;
    }
    uint32_t r = n, slow = (uint32_t)(su > 0x7f7fffff); /* NaN, inf */
    if (low) {
        const uint32_t is_low = su < emin;
        r = blend(mask_of(is_low), lo, n);
        slow |= tie & is_low;
    } else {
        /* binary32 subnormals: 1 <= u <= 0x7fffff */
        slow |= (int32_t)((u - 1) ^ 0x80000000u) < p->small_below;
    }
    /* Negative non-zero inputs to unsigned formats (b ^ sign > 0:
     * negative and not -0), and zero results in formats without zero: one
     * signed comparison each with a threshold that is never passed in the
     * other formats, which have kernels without them. */
    if (general)
        slow |= ((int32_t)(b ^ 0x80000000u) > p->neg_above)
              | ((int32_t)r < p->zero_below);

    const int32_t sr = (int32_t)r;
    const uint32_t ovf = sr > (int32_t)p->max_bits;
    const uint32_t inx = (r != u) | ovf;
    const uint32_t zero = r == 0;
    e->inexact += inx;
    e->overflow += ovf;
    if (general)
        e->overflow_neg += ovf & neg;
    e->slow += slow;
    if (low) {
        /* Tiny after rounding: the unbounded rounding n is below 2^emin
         * (which implies u is); before rounding: u is. */
        const int32_t st = (int32_t)blend(p->tiny_u, u, n);
        e->underflow += (st < emin) & inx;
        e->to_zero += zero & (su != 0);
        e->subnormal += (zero ^ 1) & (sr < emin);
    }
    if (!general) /* signed zeros, overflow results -x's = -(x's) or x's */
        return blend(mask_of(ovf), p->ovf[0] | (b & p->ovf_sign),
                     r | (b & 0x80000000u));
    const uint32_t zero_drop = p->zero_sign ^ 0x80000000u;
    const uint32_t sign = b & (0x80000000u ^ (mask_of(zero) & zero_drop));
    const uint32_t ovf_res = p->ovf[0] ^ ((0u - neg) & (p->ovf[0] ^ p->ovf[1]));
    return blend(mask_of(ovf), ovf_res, r | sign);
}

/* TILE lanes of one mode; wh is read by the stochastic kernels only.  A
 * fixed count: GCC's cost model at -O2 vectorises only loops that need no
 * scalar epilogue. */
static EMU_KERNEL_INLINE void kernel_run(const f32_plan *plan, const int mode,
                                         const bool low, const bool general,
                                         float *restrict out,
                                         const float *restrict in,
                                         const uint32_t *restrict wh,
                                         tile_events *ev)
{
    /* The constants in a local the compiler keeps in registers. */
    const f32_plan p = *plan;
    tile_events e = { 0 };
    for (size_t i = 0; i < TILE; i++) {
        uint32_t b = f2u(in[i]);
        out[i] = u2f(lane(&p, mode, low, general, b,
                          mode == K_SR ? wh[i] : 0, &e));
    }
    *ev = e;
}

static EMU_KERNEL_INLINE void kernel_any(const f32_plan *p, float *restrict out,
                                         const float *restrict in,
                                         const uint32_t *restrict wh,
                                         tile_events *e)
{
#define K_CASE(k)                                                             \
    case k:                                                                   \
        if (p->small_slow && p->general)                                      \
            kernel_run(p, k, false, true, out, in, wh, e);                    \
        else if (p->small_slow)                                               \
            kernel_run(p, k, false, false, out, in, wh, e);                   \
        else if (p->general)                                                  \
            kernel_run(p, k, true, true, out, in, wh, e);                     \
        else                                                                  \
            kernel_run(p, k, true, false, out, in, wh, e);                    \
        break
    switch (p->kmode) {
    K_CASE(K_RNE);
    K_CASE(K_RZ);
    K_CASE(K_RNA);
    K_CASE(K_RU);
    K_CASE(K_RD);
    K_CASE(K_RO);
    default:
    K_CASE(K_SR);
    }
#undef K_CASE
}

/* The kernel for each instruction-set level (isa.c chooses): the same
 * integer and IEEE operations, so the same results. */
typedef void (*tile_kernel)(const f32_plan *, float *restrict,
                            const float *restrict, const uint32_t *restrict,
                            tile_events *);

static void kernel_base(const f32_plan *p, float *restrict out,
                        const float *restrict in, const uint32_t *restrict wh,
                        tile_events *e)
{
    kernel_any(p, out, in, wh, e);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static void kernel_avx2(const f32_plan *p, float *restrict out,
                        const float *restrict in, const uint32_t *restrict wh,
                        tile_events *e)
{
    kernel_any(p, out, in, wh, e);
}

EMU_ISA_TARGET_AVX512
static void kernel_avx512(const f32_plan *p, float *restrict out,
                          const float *restrict in,
                          const uint32_t *restrict wh, tile_events *e)
{
    kernel_any(p, out, in, wh, e);
}
#endif

static tile_kernel kernel_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return kernel_avx512;
    if (isa == EMU_ISA_AVX2)
        return kernel_avx2;
#endif
    (void)isa;
    return kernel_base;
}

/* ---- values already on the format's grid ---------------------------------
 * A cast into a format that holds every value of its source (e5m2 ->
 * binary16, binary16 -> binary16), or an exact power-of-two scale, gives
 * tiles whose every input is a value of the format: each lane's result is
 * its input, and of the events only "subnormal" can happen (a non-zero
 * value below 2^emin); every rounding mode agrees on a representable
 * value.  grid_lane gives a lane's bits off the grid (0: on it);
 * grid_scan says whether a whole tile is on it, counting those
 * subnormals, in one pass of a few vector operations a lane instead of
 * the kernel's rounding and its six event counters (and, stochastic, the
 * random words).  Only the plans with the grid below 2^emin (not
 * small_slow) and without the general rules: there a lane is on the grid
 * exactly when u <= max, and its dropped bits are zero at and above
 * 2^emin, or the grid rounding keeps it below; no such lane is slow. */
static EMU_KERNEL_INLINE uint32_t grid_lane(const f32_plan *p, uint32_t b,
                                            uint32_t *sub)
{
    const uint32_t u = b & 0x7fffffffu;
    const int32_t su = (int32_t)u;
    const uint32_t is_low = mask_of(su < (int32_t)p->emin_bits);
    /* the bits that must be zero: those the grid rounding moves below
     * 2^emin, the dropped ones above; all of them past max */
    const uint32_t off = blend(is_low, f2u(low_rne(p, u2f(u))) ^ u,
                               u & p->mask) |
                         mask_of(su > (int32_t)p->max_bits);
    /* non-zero and below 2^emin: 0 < u < 2^emin as (u - 1) < 2^emin - 1 */
    *sub += (int32_t)((u - 1) ^ 0x80000000u) <
            (int32_t)((p->emin_bits - 1) ^ 0x80000000u);
    return off;
}

/* TILE lanes of src (a short tile padded with +0, which is on every such
 * grid and no subnormal): true if every one is on the grid, with the
 * count of subnormals in *nsub.  In blocks of GRID_BLOCK lanes, so that
 * a tile that is not (a zero first lane, then rounding work) is told
 * after a block or a few, not after the whole tile. */
enum { GRID_BLOCK = 64 };

static EMU_KERNEL_INLINE bool grid_scan_any(const f32_plan *plan,
                                            const float *restrict src,
                                            uint32_t *nsub)
{
    const f32_plan p = *plan;
    uint32_t sub = 0;
    for (size_t i = 0; i < TILE; i += GRID_BLOCK) {
        uint32_t off = 0;
        for (size_t j = i; j < i + GRID_BLOCK; j++)
            off |= grid_lane(&p, f2u(src[j]), &sub);
        if (off)
            return false;
    }
    *nsub = sub;
    return true;
}

typedef bool (*grid_kernel)(const f32_plan *, const float *restrict,
                            uint32_t *);

EMU_ISA_VARIANTS(bool, grid_scan,
                 (const f32_plan *p, const float *restrict src, uint32_t *nsub),
                 (p, src, nsub))

/* The tile in[0..len) if every value is on the grid (see grid_lane):
 * copied to out, counted into c, and true; otherwise false with nothing
 * written or counted.  A first lane off the grid (a rounding that has
 * work to do, nearly always) answers at the cost of one lane. */
static bool grid_tile_f32(const f32_plan *pl, grid_kernel grid, float *out,
                          const float *in, size_t len, emu_round_counts *c)
{
    uint32_t sub = 0;
    if (grid_lane(pl, f2u(in[0]), &sub))
        return false;
    const float *src = in;
    float pad[TILE];
    if (len < TILE) {
        memcpy(pad, in, len * sizeof pad[0]);
        memset(pad + len, 0, (TILE - len) * sizeof pad[0]);
        src = pad;
    }
    if (!grid(pl, src, &sub))
        return false;
    if (out != in)
        memmove(out, in, len * sizeof *out);
    c->n += len;
    c->subnormal += sub;
    if (sub)
        c->flags |= EMU_FLAG_SUBNORMAL;
    return true;
}

/* The events the kernels count for one lane: the same code, one lane.
 * Inlined into the slow loop (a lane of its own per repeat there), as it
 * was while the loop was its only caller. */
static EMU_KERNEL_INLINE tile_events lane_events(const f32_plan *p, uint32_t b,
                                                 uint32_t wh)
{
    tile_events e = { 0 };
    const bool low = !p->small_slow;
#define K_CASE(k)                                                             \
    case k:                                                                   \
        if (!low && p->general)                                               \
            lane(p, k, false, true, b, wh, &e);                               \
        else if (!low)                                                        \
            lane(p, k, false, false, b, wh, &e);                              \
        else if (p->general)                                                  \
            lane(p, k, true, true, b, wh, &e);                                \
        else                                                                  \
            lane(p, k, true, false, b, wh, &e);                               \
        break
    switch (p->kmode) {
    K_CASE(K_RNE);
    K_CASE(K_RZ);
    K_CASE(K_RNA);
    K_CASE(K_RU);
    K_CASE(K_RD);
    K_CASE(K_RO);
    default:
    K_CASE(K_SR);
    }
#undef K_CASE
    return e;
}

/* A diverged model's tiles mostly hold one non-finite pattern in every
 * slow lane (all NaN, or NaN among finite values).  If so, and a run may
 * hold the pattern (special_run), its lanes take the result, events and
 * counts the slow loop would give them, in loops over the whole tile
 * that vectorise (src and dst have TILE lanes, the padding +0), and this
 * returns true with the events in *back; otherwise false, with nothing
 * written or counted.  slow: the tile's slow lanes. */
static bool special_tile_f32(const f32_plan *pl, const emu_format *f,
                             const emu_array_rounding *a, const float *src,
                             float *dst, const uint32_t *wh, size_t len,
                             uint32_t slow, uint32_t run_top,
                             tile_events *back, emu_round_counts *c)
{
    size_t i = 0;
    while (i < len && (f2u(src[i]) & 0x7fffffffu) < 0x7f800000u)
        i++;
    if (i == len || (f2u(src[i]) & 0x7fffffffu) > run_top)
        return false;
    const uint32_t b = f2u(src[i]);
    uint32_t k = 0;
    for (size_t j = 0; j < TILE; j++)
        k += f2u(src[j]) == b;
    if (k != slow)
        return false;
    const tile_events one = lane_events(pl, b, pl->kmode == K_SR ? wh[i] : 0);
    emu_status st;
    const double x = src[i];
    const double y = emu_round2_word_unguarded(f, x, 0.0, &a->rnd, 0, &st);
    const uint32_t yb = f2u((float)y);
    for (size_t j = 0; j < TILE; j++)
        dst[j] = u2f(blend(mask_of(f2u(src[j]) == b), yb, f2u(dst[j])));
    events_add_times(back, &one, k);
    counts_add_times(c, x, y, st.flags, k);
    return true;
}

static void tile_f32(const f32_plan *pl, tile_kernel kern, grid_kernel grid,
                     const emu_format *f, float *out, const float *in,
                     size_t len, const emu_array_rounding *a, uint64_t first,
                     emu_round_counts *c)
{
    if (grid && grid_tile_f32(pl, grid, out, in, len, c))
        return;
    uint32_t wh[TILE];
    float copy[TILE], part[TILE];
    const float *src = in;
    float *dst = out;
    /* A short tile is padded with +0; in place, the slow lanes need their
     * inputs after the kernel overwrote them. */
    const uintptr_t o = (uintptr_t)out, i0 = (uintptr_t)in,
                    size = len * sizeof *in;
    if (len < TILE || (o < i0 + size && i0 < o + size)) {
        memcpy(copy, in, len * sizeof copy[0]);
        memset(copy + len, 0, (TILE - len) * sizeof copy[0]);
        src = copy;
    }
    if (len < TILE)
        dst = part;
    const bool sr = pl->kmode == K_SR;
    if (sr) {
        emu_random_fill_hi32(a->seed, a->stream, first, wh, len);
        /* +0 with word 0 is no tie: the padding stays out of the slow
         * lanes */
        memset(wh + len, 0, (TILE - len) * sizeof wh[0]);
    }
    tile_events e;
    kern(pl, dst, src, wh, &e);
    /* Padding lanes raise no events, but a format without zero sends
     * them to the scalar path. */
    e.slow -= (uint32_t)(TILE - len) * (pl->zero_below > 0);
    if (e.slow) {
        /* Redo the slow lanes with the choke point, and take back what
         * the kernel counted for them; non-finite inputs without their
         * (unused) words, and the repeats of the last such pattern as
         * special_run says. */
        tile_events back = { 0 }, run_ev = { 0 };
        special_run run = { .on = false };
        const uint32_t run_top = 0x7fffffffu - (pl->mask + 1);
        const bool whole = special_tile_f32(pl, f, a, src, dst, wh, len,
                                            e.slow, run_top, &back, c);
        for (size_t i = 0; i < len && !whole; i++) {
            const uint32_t b = f2u(src[i]);
            if (run.on && b == run.bits) {
                dst[i] = (float)run.y;
                run.k++;
                continue;
            }
            tile_events one = lane_events(pl, b, sr ? wh[i] : 0);
            if (!one.slow)
                continue;
            back.inexact += one.inexact;
            back.underflow += one.underflow;
            back.to_zero += one.to_zero;
            back.subnormal += one.subnormal;
            back.overflow += one.overflow;
            back.overflow_neg += one.overflow_neg;
            emu_status st;
            const double x = src[i];
            const bool special = !isfinite(x);
            const uint64_t word = sr && !special
                                  ? emu_random64(a->seed, a->stream, first + i)
                                  : 0;
            const double y = emu_round2_word_unguarded(f, x, 0.0, &a->rnd,
                                                       word, &st);
            dst[i] = (float)y;
            emu_round_counts_add_unguarded(c, x, y, st.flags);
            if (special && (b & 0x7fffffffu) <= run_top) {
                events_add_times(&back, &run_ev, (uint32_t)run.k);
                counts_add_times(c, run.x, run.y, run.flags, run.k);
                run = (special_run){ true, b, x, y, st.flags, 0 };
                run_ev = one;
            }
        }
        events_add_times(&back, &run_ev, (uint32_t)run.k);
        counts_add_times(c, run.x, run.y, run.flags, run.k);
        e.inexact -= back.inexact;
        e.underflow -= back.underflow;
        e.to_zero -= back.to_zero;
        e.subnormal -= back.subnormal;
        e.overflow -= back.overflow;
        e.overflow_neg -= back.overflow_neg;
    }
    /* Without the general rules the overflow results of both signs are
     * NaN or neither, and overflow_neg is not counted. */
    uint32_t nan = !pl->general ? (pl->ovf_nan[0] ? e.overflow : 0)
                 : (pl->ovf_nan[0] ? e.overflow - e.overflow_neg : 0)
                   + (pl->ovf_nan[1] ? e.overflow_neg : 0);
    c->n += len - e.slow;
    c->inexact += e.inexact;
    c->underflow += e.underflow;
    c->to_zero += e.to_zero;
    c->subnormal += e.subnormal;
    c->overflow += e.overflow;
    c->nan += nan;
    c->flags |= (e.inexact ? EMU_FLAG_INEXACT : 0)
              | (e.underflow ? EMU_FLAG_UNDERFLOW : 0)
              | (e.overflow ? EMU_FLAG_OVERFLOW : 0)
              | (e.subnormal ? EMU_FLAG_SUBNORMAL : 0)
              | (e.to_zero && !f->subnormals ? EMU_FLAG_FLUSHED : 0);
    if (dst != out)
        memcpy(out, dst, len * sizeof dst[0]);
}

/* ---- binary64: the plan ----------------------------------------------
 *
 * The binary32 method on 64-bit patterns: d = 53 - p dropped bits at and
 * above 2^emin, the grid 2^qs below it through magic = 2^(qs + 52).  No
 * binary64 subnormal lies near a carrier format's range, so every format
 * takes the grid below 2^emin and no lane is slow for its size.
 *
 * Stochastic rounding at and above 2^emin adds the word's top min(r, d)
 * bits below the kept bits, as the binary32 lanes do.  Below 2^emin the
 * fraction F of a quantum is not a binary32-sized number, so the lanes
 * take it from the pattern, as the pairs kernel does without a low part:
 * with sig the significand (implicit bit included) and E the exponent
 * field (1 for binary64's subnormals, whose scale is E = 1's), the
 * quantum 2^qs drops dl = d_low + (emin's field - E) bits of sig, d_low
 * being d with subnormals and 52 without (2^emin is then the quantum).
 * floor(F 2^64) is sig's dl low bits shifted up by 64 - dl, or sig
 * shifted down by dl - 64 when dl > 64 (the value lies below 2^-10
 * quanta); the word carries out of 64 bits with it or not, each cut to
 * its top r bits: decide()'s rule.  The result is the pattern with dl
 * bits cleared plus the carry's quantum, or, once the implicit bit is
 * dropped (dl >= 53), zero or one quantum.  Every lane's words are the
 * words of emu_random_fill, so no tie is left to the choke point. */

typedef struct f64_plan {
    int kmode;                  /* K_*                                  */
    uint64_t tiny_u;            /* all ones: tininess before rounding   */
    uint64_t d, mask, half, emin_bits, max_bits;
    double magic, quantum, half_q;
    uint64_t ovf[2], ovf_nan[2];
    uint64_t zero_sign, ovf_sign;
    bool general;               /* as f32_plan's                        */
    int64_t neg_above, zero_below;
    /* stochastic: the word's bits added at and above 2^emin (as
     * f32_plan's), the top r bits of a word, and below 2^emin d_low,
     * emin's exponent field and the pattern of the quantum 2^qs */
    uint64_t sr_keep, sr_shift_r, sr_shift_l, sr_top;
    uint64_t d_low, emin_e, q_bits;
} f64_plan;

static bool build_plan_f64(f64_plan *pl, const emu_format *f,
                           const emu_rounding *r)
{
    int qs = low_quantum(f);
    if (!f->fits_carrier || f->p > 52 || qs > 0 || qs - 1 < -1022
        || (unsigned)r->mode >= EMU_RND_COUNT)
        return false;
    memset(pl, 0, sizeof *pl);
    switch (r->mode) {
    case EMU_RNE: pl->kmode = K_RNE; break;
    case EMU_RZ:  pl->kmode = K_RZ; break;
    case EMU_RNA: pl->kmode = K_RNA; break;
    case EMU_RU:  pl->kmode = K_RU; break;
    case EMU_RD:  pl->kmode = K_RD; break;
    case EMU_RO:  pl->kmode = K_RO; break;
    default:      pl->kmode = K_SR; break;
    }
    pl->tiny_u = r->tininess == EMU_TINY_BEFORE ? ~(uint64_t)0 : 0;
    pl->d = (uint64_t)(53 - f->p);
    pl->mask = ((uint64_t)1 << pl->d) - 1;
    pl->half = (uint64_t)1 << (pl->d - 1);
    pl->emin_bits = d2u(f->min_normal);
    pl->max_bits = d2u(f->max);
    pl->magic = ldexp(1.0, qs + 52);
    pl->quantum = ldexp(1.0, qs);
    pl->half_q = ldexp(1.0, qs - 1);
    double ovf[2];
    overflow_results(f, r, ovf);
    for (int s = 0; s < 2; s++) {
        pl->ovf[s] = d2u(ovf[s]);
        pl->ovf_nan[s] = isnan(ovf[s]) != 0;
    }
    const uint64_t sign = (uint64_t)1 << 63;
    pl->zero_sign = f->is_signed && f->specials != EMU_SPECIALS_FNUZ ? sign : 0;
    pl->neg_above = !f->is_signed ? 0 : INT64_MAX;
    pl->zero_below = !f->has_zero ? 1 : 0;
    const bool ovf_signed = pl->ovf[1] == (pl->ovf[0] | sign)
                            && !(pl->ovf[0] & sign);
    pl->ovf_sign = ovf_signed ? sign : 0;
    pl->general = !f->is_signed || !f->has_zero || pl->zero_sign != sign
                  || (!ovf_signed && pl->ovf[1] != pl->ovf[0]);

    const unsigned rb = sr_bits_of(r);
    const uint64_t k = rb < pl->d ? rb : pl->d; /* 1 .. d */
    pl->sr_keep = ~(((uint64_t)1 << (pl->d - k)) - 1);
    pl->sr_shift_r = 64 - k;
    pl->sr_shift_l = pl->d - k;
    pl->sr_top = rb >= 64 ? ~(uint64_t)0 : ~(~(uint64_t)0 >> rb);
    pl->d_low = f->subnormals ? pl->d : 52;
    pl->emin_e = pl->emin_bits >> 52;
    pl->q_bits = d2u(pl->quantum);
    return true;
}

PLAN_MEMORY(plan_f64, f64_plan, build_plan_f64)

/* ---- binary64: the fused kernel (as the binary32 one) ----------------- */

static inline uint64_t blend64(uint64_t m, uint64_t x, uint64_t y)
{
    return (x & m) | (y & ~m);
}

static inline uint64_t mask64(bool c)
{
    return (uint64_t)0 - (uint64_t)c;
}

static inline double dblend(uint64_t m, double x, double y)
{
    return u2d(blend64(m, d2u(x), d2u(y)));
}

typedef struct tile_events64 {
    uint64_t inexact, underflow, to_zero, subnormal, overflow, overflow_neg;
    uint64_t slow;
} tile_events64;

static void events64_add_times(tile_events64 *e, const tile_events64 *one,
                               uint64_t k)
{
    e->inexact += one->inexact * k;
    e->underflow += one->underflow * k;
    e->to_zero += one->to_zero * k;
    e->subnormal += one->subnormal * k;
    e->overflow += one->overflow * k;
    e->overflow_neg += one->overflow_neg * k;
}

/* Below 2^emin: a on the quantum grid, to nearest-even, and truncated. */
static inline double low_rne64(const f64_plan *pl, double a)
{
    return (a + pl->magic) - pl->magic;
}

static inline double low_rz64(const f64_plan *pl, double a)
{
    double s = low_rne64(pl, a), s_down = s - pl->quantum;
    return dblend(mask64(s > a), s_down, s);
}

/* Below 2^emin, stochastic: the rounded magnitude of pattern u (the
 * plan's comment says how) with word w. */
static inline uint64_t low_sr64(const f64_plan *p, uint64_t u, uint64_t w)
{
    const uint64_t E = u >> 52, frac = u & (((uint64_t)1 << 52) - 1);
    const uint64_t sig = frac | ((uint64_t)(E != 0) << 52);
    /* d_low + emin's field - E, E >= 1 (d_low in the lanes at or above
     * 2^emin, whose results are thrown away); every shift count below
     * stays in 0 .. 63.  (Shifts of variables by variables only: gcc
     * vectorises no shift of a constant by a variable.) */
    const uint64_t low = E < p->emin_e;
    const uint64_t dd = p->d_low
                        + (mask64(low) & (p->emin_e - (E | (E == 0))));
    const uint64_t far = dd > 63;
    const uint64_t dl = blend64(mask64(far), 63, dd);
    const uint64_t fint = sig - ((sig >> dl) << dl);
    const uint64_t sh = blend64(mask64(far & (dd < 127)), dd - 64, 63);
    const uint64_t fq = blend64(mask64(far), sig >> sh, fint << (64 - dl));
    const uint64_t wt = w & p->sr_top;
    const uint64_t up = ((fq & p->sr_top) + wt) < wt;
    const uint64_t r = ((u >> dl) + up) << dl;
    return blend64(mask64(dl >= 53), mask64(up) & p->q_bits, r);
}

/* One lane, as lane() (binary64 patterns are below 2^63 in the lanes the
 * fast path covers, so signed comparisons are exact); w is the lane's
 * random word, read by the stochastic kernels only. */
static EMU_KERNEL_INLINE uint64_t lane64(const f64_plan *p, const int mode,
                                         const bool general, uint64_t b,
                                         uint64_t w, tile_events64 *e)
{
    const uint64_t sign_bit = (uint64_t)1 << 63, implicit = (uint64_t)1 << 52;
    const uint64_t u = b & ~sign_bit, neg = b >> 63;
    const int64_t su = (int64_t)u, emin = (int64_t)p->emin_bits;
    const uint64_t keep = ~p->mask;
    const double a = u2d(u);
    uint64_t n, lo;
    switch (mode) {
    case K_RNE:
        n = (u + (p->half - 1) + (((u | implicit) >> p->d) & 1)) & keep;
        lo = d2u(low_rne64(p, a));
        break;
    case K_RZ:
        n = u & keep;
        lo = d2u(low_rz64(p, a));
        break;
    case K_RNA: {
        n = (u + p->half) & keep;
        double s = low_rne64(p, a), s_up = s + p->quantum;
        lo = d2u(dblend(mask64(a - s == p->half_q), s_up, s));
        break;
    }
    case K_RU:
    case K_RD: {
        const uint64_t away = neg ^ (uint64_t)(mode == K_RU);
        n = (u + (mask64(away) & p->mask)) & keep;
        double z = low_rz64(p, a), z_up = z + p->quantum;
        lo = d2u(dblend(mask64(away & (z != a)), z_up, z));
        break;
    }
    case K_RO: {
        const uint64_t odd = ((u | implicit) >> p->d) & 1;
        n = (u & keep) + (mask64(((u & p->mask) != 0) & (odd ^ 1))
                          & (p->mask + 1));
        double z = low_rz64(p, a);
        uint64_t k = d2u(z + p->magic) | (mask64(z != a) & 1);
        lo = d2u(u2d(k) - p->magic);
        break;
    }
    default: /* K_SR */
        n = ((u & p->sr_keep) + ((w >> p->sr_shift_r) << p->sr_shift_l))
            & keep;
        lo = low_sr64(p, u, w);
        break;
    }
    const uint64_t is_low = su < emin;
    const uint64_t r = blend64(mask64(is_low), lo, n);
    uint64_t slow = su > (int64_t)0x7fefffffffffffff; /* NaN, inf */
    if (general)
        slow |= (uint64_t)((int64_t)(b ^ sign_bit) > p->neg_above)
              | (uint64_t)((int64_t)r < p->zero_below);
    const int64_t sr = (int64_t)r;
    const uint64_t ovf = sr > (int64_t)p->max_bits;
    const uint64_t inx = (uint64_t)(r != u) | ovf;
    const uint64_t zero = r == 0;
    const int64_t st = (int64_t)blend64(p->tiny_u, u, n);
    e->inexact += inx;
    e->overflow += ovf;
    if (general)
        e->overflow_neg += ovf & neg;
    e->slow += slow;
    e->underflow += (uint64_t)(st < emin) & inx;
    e->to_zero += zero & (uint64_t)(su != 0);
    e->subnormal += (zero ^ 1) & (uint64_t)(sr < emin);
    if (!general)
        return blend64(mask64(ovf), p->ovf[0] | (b & p->ovf_sign),
                       r | (b & sign_bit));
    const uint64_t zero_drop = p->zero_sign ^ sign_bit;
    const uint64_t sgn = b & (sign_bit ^ (mask64(zero) & zero_drop));
    const uint64_t ovf_res = p->ovf[0] ^ (((uint64_t)0 - neg)
                                          & (p->ovf[0] ^ p->ovf[1]));
    return blend64(mask64(ovf), ovf_res, r | sgn);
}

static EMU_KERNEL_INLINE void kernel64_run(const f64_plan *plan,
                                           const int mode, const bool general,
                                           double *restrict out,
                                           const double *restrict in,
                                           const uint64_t *restrict w,
                                           tile_events64 *ev)
{
    const f64_plan p = *plan;
    tile_events64 e = { 0 };
    for (size_t i = 0; i < TILE; i++)
        out[i] = u2d(lane64(&p, mode, general, d2u(in[i]),
                            mode == K_SR ? w[i] : 0, &e));
    *ev = e;
}

static EMU_KERNEL_INLINE void kernel64_any(const f64_plan *p,
                                           double *restrict out,
                                           const double *restrict in,
                                           const uint64_t *restrict w,
                                           tile_events64 *e)
{
#define K_CASE(k)                                                             \
    case k:                                                                   \
        if (p->general)                                                       \
            kernel64_run(p, k, true, out, in, w, e);                          \
        else                                                                  \
            kernel64_run(p, k, false, out, in, w, e);                         \
        break
    switch (p->kmode) {
    K_CASE(K_RNE);
    K_CASE(K_RZ);
    K_CASE(K_RNA);
    K_CASE(K_RU);
    K_CASE(K_RD);
    K_CASE(K_RO);
    default:
    K_CASE(K_SR);
    }
#undef K_CASE
}

typedef void (*tile_kernel64)(const f64_plan *, double *restrict,
                              const double *restrict,
                              const uint64_t *restrict, tile_events64 *);

static void kernel64_base(const f64_plan *p, double *restrict out,
                          const double *restrict in,
                          const uint64_t *restrict w, tile_events64 *e)
{
    kernel64_any(p, out, in, w, e);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static void kernel64_avx2(const f64_plan *p, double *restrict out,
                          const double *restrict in,
                          const uint64_t *restrict w, tile_events64 *e)
{
    kernel64_any(p, out, in, w, e);
}

EMU_ISA_TARGET_AVX512
static void kernel64_avx512(const f64_plan *p, double *restrict out,
                            const double *restrict in,
                            const uint64_t *restrict w, tile_events64 *e)
{
    kernel64_any(p, out, in, w, e);
}
#endif

static tile_kernel64 kernel64_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return kernel64_avx512;
    if (isa == EMU_ISA_AVX2)
        return kernel64_avx2;
#endif
    (void)isa;
    return kernel64_base;
}

/* lane_events for binary64 lanes (inlined likewise). */
static EMU_KERNEL_INLINE tile_events64 lane64_events(const f64_plan *p,
                                                     uint64_t b, uint64_t w)
{
    tile_events64 e = { 0 };
#define K_CASE(k)                                                             \
    case k:                                                                   \
        if (p->general)                                                       \
            lane64(p, k, true, b, w, &e);                                     \
        else                                                                  \
            lane64(p, k, false, b, w, &e);                                    \
        break
    switch (p->kmode) {
    K_CASE(K_RNE);
    K_CASE(K_RZ);
    K_CASE(K_RNA);
    K_CASE(K_RU);
    K_CASE(K_RD);
    K_CASE(K_RO);
    default:
    K_CASE(K_SR);
    }
#undef K_CASE
    return e;
}

/* The events of a tile into counts; the slow lanes (their events taken
 * back by the caller) are counted by the choke point's own. */
static void events64_to_counts(const f64_plan *pl, const emu_format *f,
                               const tile_events64 *e, size_t lanes,
                               emu_round_counts *c)
{
    const uint64_t nan = !pl->general ? (pl->ovf_nan[0] ? e->overflow : 0)
                       : (pl->ovf_nan[0] ? e->overflow - e->overflow_neg : 0)
                         + (pl->ovf_nan[1] ? e->overflow_neg : 0);
    c->n += lanes - e->slow;
    c->inexact += e->inexact;
    c->underflow += e->underflow;
    c->to_zero += e->to_zero;
    c->subnormal += e->subnormal;
    c->overflow += e->overflow;
    c->nan += nan;
    c->flags |= (e->inexact ? EMU_FLAG_INEXACT : 0)
              | (e->underflow ? EMU_FLAG_UNDERFLOW : 0)
              | (e->overflow ? EMU_FLAG_OVERFLOW : 0)
              | (e->subnormal ? EMU_FLAG_SUBNORMAL : 0)
              | (e->to_zero && !f->subnormals ? EMU_FLAG_FLUSHED : 0);
}

/* special_tile_f32 for binary64 input: the slow loop's result, events
 * and counts for a tile whose slow lanes all hold one non-finite pattern
 * that a run may hold (its first lane's word, as the loop uses it). */
static bool special_tile_f64(const f64_plan *pl, const emu_format *f,
                             const emu_array_rounding *a, const double *src,
                             double *dst, const uint64_t *w, size_t len,
                             uint64_t slow, uint64_t run_top,
                             tile_events64 *back, emu_round_counts *c)
{
    const uint64_t mag = ~((uint64_t)1 << 63), inf = (uint64_t)0x7ff << 52;
    size_t i = 0;
    while (i < len && (d2u(src[i]) & mag) < inf)
        i++;
    if (i == len || (d2u(src[i]) & mag) > run_top)
        return false;
    const uint64_t b = d2u(src[i]);
    uint64_t k = 0;
    for (size_t j = 0; j < TILE; j++)
        k += d2u(src[j]) == b;
    if (k != slow)
        return false;
    const uint64_t word = pl->kmode == K_SR ? w[i] : 0;
    const tile_events64 one = lane64_events(pl, b, word);
    emu_status st;
    const double x = src[i];
    const double y = emu_round2_word_unguarded(f, x, 0.0, &a->rnd, word, &st);
    const uint64_t yb = d2u(y);
    for (size_t j = 0; j < TILE; j++)
        dst[j] = u2d(blend64(mask64(d2u(src[j]) == b), yb, d2u(dst[j])));
    events64_add_times(back, &one, k);
    counts_add_times(c, x, y, st.flags, k);
    return true;
}

static void tile_f64(const f64_plan *pl, tile_kernel64 kern,
                     const emu_format *f, double *out, const double *in,
                     size_t len, const emu_array_rounding *a, uint64_t first,
                     emu_round_counts *c)
{
    uint64_t w[TILE];
    double copy[TILE], part[TILE];
    const double *src = in;
    double *dst = out;
    const uintptr_t o = (uintptr_t)out, i0 = (uintptr_t)in,
                    size = len * sizeof *in;
    if (len < TILE || (o < i0 + size && i0 < o + size)) {
        memcpy(copy, in, len * sizeof copy[0]);
        memset(copy + len, 0, (TILE - len) * sizeof copy[0]);
        src = copy;
    }
    if (len < TILE)
        dst = part;
    const bool sr = pl->kmode == K_SR;
    if (sr) {
        emu_random_fill(a->seed, a->stream, first, w, len);
        /* +0 with word 0 rounds to +0: the padding raises no events */
        memset(w + len, 0, (TILE - len) * sizeof w[0]);
    }
    tile_events64 e;
    kern(pl, dst, src, w, &e);
    e.slow -= (uint64_t)(TILE - len) * (pl->zero_below > 0);
    if (e.slow) {
        /* as tile_f32's */
        tile_events64 back = { 0 }, run_ev = { 0 };
        special_run run = { .on = false };
        const uint64_t run_top = ((uint64_t)1 << 63) - 1 - (pl->mask + 1);
        const bool whole = special_tile_f64(pl, f, a, src, dst, w, len,
                                            e.slow, run_top, &back, c);
        for (size_t i = 0; i < len && !whole; i++) {
            const uint64_t b = d2u(src[i]);
            if (run.on && b == run.bits) {
                dst[i] = run.y;
                run.k++;
                continue;
            }
            tile_events64 one = lane64_events(pl, b, sr ? w[i] : 0);
            if (!one.slow)
                continue;
            back.inexact += one.inexact;
            back.underflow += one.underflow;
            back.to_zero += one.to_zero;
            back.subnormal += one.subnormal;
            back.overflow += one.overflow;
            back.overflow_neg += one.overflow_neg;
            emu_status st;
            const double x = src[i];
            const double y = emu_round2_word_unguarded(f, x, 0.0, &a->rnd,
                                                       sr ? w[i] : 0, &st);
            dst[i] = y;
            emu_round_counts_add_unguarded(c, x, y, st.flags);
            if (!isfinite(x) && (b & ~((uint64_t)1 << 63)) <= run_top) {
                events64_add_times(&back, &run_ev, run.k);
                counts_add_times(c, run.x, run.y, run.flags, run.k);
                run = (special_run){ true, b, x, y, st.flags, 0 };
                run_ev = one;
            }
        }
        events64_add_times(&back, &run_ev, run.k);
        counts_add_times(c, run.x, run.y, run.flags, run.k);
        e.inexact -= back.inexact;
        e.underflow -= back.underflow;
        e.to_zero -= back.to_zero;
        e.subnormal -= back.subnormal;
        e.overflow -= back.overflow;
        e.overflow_neg -= back.overflow_neg;
    }
    events64_to_counts(pl, f, &e, len, c);
    if (dst != out)
        memcpy(out, dst, len * sizeof dst[0]);
}

/* ---- pairs hi + lo under stochastic rounding ----------------------------
 *
 * The exact sums of the optimizer updates reach the choke point as pairs
 * hi + lo, and stochastic rounding must see lo.  The lanes this kernel
 * covers are the common ones: finite pairs whose exact value lies at or
 * above 2^emin (or is zero), in a format that fits the carrier.  The pair
 * is first normalised as emu_round2_word normalises it (TwoSum, when lo is
 * not zero), so that hi = RN(hi + lo) and |lo| <= ulp(hi) / 2.  With u the
 * pattern of |hi|, al the low part measured away from zero and q the
 * quantum's exponent in hi's binade, the truncation is u with its
 * d = 53 - p low bits cleared, and floor(F 2^64), F the exact fraction in
 * quanta, is (u's d low bits) 2^(64-d) + floor(al 2^(64-q)): the first
 * term an integer, the second at most 2^(p+10) in magnitude, so that its
 * floor comes exactly from adding and subtracting 1.5 2^52 (a negative
 * floor with no dropped bits borrows one quantum: the exact value lies
 * just below a grid point).  The random word (its top r bits for r-bit
 * rounding) carries out of 64 bits with it or not: decide()'s rule.
 *
 * Below 2^emin, in a format with subnormals, the quantum is fixed at
 * 2^qs: the same holds with d' = d + (emin's field - E) dropped bits of
 * hi's significand (implicit bit included) and the scale 2^(64-qs), as
 * long as d' <= 63 keeps the dropped bits an integer at 2^64 (hi at least
 * 2^(emin-p-10)).  The truncation is the pattern
 * with d' bits cleared and a quantum 2^(d') added to it, or, when the
 * implicit bit itself is dropped (d' >= 53), zero or one quantum.  These
 * lanes raise underflow (tiny and inexact), subnormal and to-zero events
 * too.  Tininess after rounding differs from before only in the binade
 * just below 2^emin, where the value rounded at p bits could reach 2^emin:
 * only when its p - 1 stored bits are all ones, lanes sent to the choke
 * point (probability 2^(1-p) in that binade).
 *
 * Slow lanes, redone by the choke point: non-finite parts or sums,
 * non-zero values below 2^emin in formats without subnormals, with
 * d' > 63 or in the kernels without those lanes (a call starts with them:
 * see emu_round_pairs_f32_unguarded), those candidates for tininess after rounding, a power of two
 * hi with a low part toward zero (the exact value lies in the binade
 * below), and the general rules' negatives into unsigned formats and
 * zeros into formats without zero.  Nothing but inexact and overflow
 * (and the events above below 2^emin) can happen in the others. */

typedef struct pair_plan {
    uint64_t d, mask, keep, emin_bits, max_bits;
    uint64_t scale_base;        /* exponent field of 2^(64-q) + hi's field */
    uint64_t top;               /* the word's top r bits                   */
    uint64_t ovf[2], ovf_nan[2];
    uint64_t zero_sign;
    bool general;
    int64_t neg_above, zero_below;
    /* below 2^emin (formats with subnormals): emin's exponent field, the
     * pattern of the quantum 2^qs, and 1 for tininess after rounding */
    bool low;
    uint64_t emin_e, q_bits, tiny_after;
} pair_plan;

static bool build_plan_pairs(pair_plan *pl, const emu_format *f,
                       const emu_rounding *r)
{
    if (!f->fits_carrier || f->p > 52 || f->emin < -1000 || f->emax > 1000
        || !emu_rnd_is_stochastic(r->mode))
        return false;
    memset(pl, 0, sizeof *pl);
    pl->d = (uint64_t)(53 - f->p);
    pl->mask = ((uint64_t)1 << pl->d) - 1;
    pl->keep = ~pl->mask;
    pl->emin_bits = d2u(f->min_normal);
    pl->max_bits = d2u(f->max);
    /* 2^(64-q) with q = E - 1023 - p + 1, E hi's exponent field: the
     * field 1023 + 64 - q = (2109 + p) - E. */
    pl->scale_base = (uint64_t)(2109 + f->p);
    unsigned rb = sr_bits_of(r);
    pl->top = rb >= 64 ? ~(uint64_t)0 : ~(~(uint64_t)0 >> rb);
    double ovf[2];
    overflow_results(f, r, ovf);
    for (int s = 0; s < 2; s++) {
        pl->ovf[s] = d2u(ovf[s]);
        pl->ovf_nan[s] = isnan(ovf[s]) != 0;
    }
    const uint64_t sign = (uint64_t)1 << 63;
    pl->zero_sign = f->is_signed && f->specials != EMU_SPECIALS_FNUZ ? sign : 0;
    pl->neg_above = !f->is_signed ? 0 : INT64_MAX;
    pl->zero_below = !f->has_zero ? 1 : 0;
    pl->general = !f->is_signed || !f->has_zero || pl->zero_sign != sign
                  || pl->ovf[1] != (pl->ovf[0] | sign) || (pl->ovf[0] & sign);
    pl->low = f->subnormals;
    pl->emin_e = pl->emin_bits >> 52;
    pl->q_bits = d2u(ldexp(1.0, low_quantum(f)));
    pl->tiny_after = r->tininess != EMU_TINY_BEFORE;
    return true;
}

PLAN_MEMORY(plan_pairs, pair_plan, build_plan_pairs)

typedef struct pair_events {
    uint64_t inexact, overflow, overflow_neg, to_zero, slow;
    uint64_t underflow, subnormal;
} pair_events;

/* One lane; low and general are constants wherever it is inlined. */
static EMU_KERNEL_INLINE double pair_lane(const pair_plan *p, const bool low,
                                          const bool general, double hi,
                                          double lo, uint64_t word,
                                          pair_events *e, uint64_t *lane_slow)
{
    const uint64_t sign_bit = (uint64_t)1 << 63;
    const double C = 0x1.8p52; /* ulp 1: adding it rounds to an integer */
    const uint64_t hb = d2u(hi), lb = d2u(lo);
    /* TwoSum when lo is not zero, as the choke point normalises */
    const uint64_t lo_nz = mask64((lb << 1) != 0);
    const double s = hi + lo, bb = s - hi;
    const double l2 = (hi - (s - bb)) + (lo - bb);
    const uint64_t H = blend64(lo_nz, d2u(s), hb);
    const double L = dblend(lo_nz, l2, lo);
    const uint64_t u = H & ~sign_bit, neg = H >> 63;
    const uint64_t E = u >> 52;
    const uint64_t zero = u == 0;
    /* Below 2^emin (low kernels): d' dropped bits, the scale at emin's
     * binade, the significand with its implicit bit. */
    uint64_t dl = p->d, Es = E, sig = u, is_low = 0, far = 0;
    if (low) {
        is_low = (uint64_t)(E < p->emin_e) & (zero ^ 1);
        const uint64_t dd = p->d + (mask64(is_low) & (p->emin_e - E));
        far = dd > 63;
        dl = blend64(mask64(far), 63, dd);
        Es = blend64(mask64(is_low), p->emin_e, E);
        sig = (u & (((uint64_t)1 << 52) - 1)) | ((uint64_t)(E != 0) << 52);
    }
    /* the low part away from zero, and its floor at 2^(64-q) */
    const double al = u2d(d2u(L) ^ (H & sign_bit));
    const double x = al * u2d((p->scale_base - Es) << 52);
    const double k = (x + C) - C;
    const double fl = k - dblend(mask64(k > x), 1.0, 0.0);
    /* an underflowed negative product still floors to -1 */
    const double flr = dblend(mask64(al < 0.0 && x == 0.0), -1.0, fl);
    const uint64_t fq_lo = d2u(flr + C) - d2u(C); /* two's complement */
    /* (Shifts of variables by variables only: gcc vectorises no shift
     * of a constant by a variable.) */
    const uint64_t fint = low ? sig - ((sig >> dl) << dl) : u & p->mask;
    const uint64_t fq = (fint << (64 - dl)) + fq_lo;
    const uint64_t borrow = (fint == 0) & (flr < 0.0);
    const uint64_t up = ((fq & p->top) + (word & p->top)) < (word & p->top);
    const uint64_t unit = p->mask + 1;
    uint64_t r;
    if (low) {
        r = (((u >> dl) + up - borrow) << dl) & ~mask64(zero);
        /* the implicit bit dropped: zero or one quantum */
        r = blend64(mask64(dl >= 53), mask64(up) & p->q_bits, r);
    } else {
        r = ((u & p->keep) - (mask64(borrow) & unit)
             + (mask64(up) & unit)) & ~mask64(zero);
    }
    const uint64_t inx = ((fint != 0) | (al != 0.0)) & (zero ^ 1);
    /* a non-finite hi or lo makes H non-finite (hi alone when lo is
     * zero, their sum otherwise): E == 0x7ff tests all three */
    uint64_t slow = (uint64_t)(E == 0x7ff)
                  | ((uint64_t)((u << 12) == 0) & (uint64_t)(al < 0.0)
                     & (zero ^ 1));
    if (low)
        slow |= far | (p->tiny_after & is_low
                       & (uint64_t)((u | p->mask) + 1 == p->emin_bits));
    else
        slow |= (uint64_t)(u < p->emin_bits) & (zero ^ 1);
    if (general)
        slow |= (uint64_t)((int64_t)(H ^ sign_bit) > p->neg_above)
              | (uint64_t)((int64_t)r < p->zero_below);
    const uint64_t ovf = (int64_t)r > (int64_t)p->max_bits;
    const uint64_t rzero = low ? (uint64_t)(r == 0) : zero;
    e->inexact += inx | ovf;
    e->overflow += ovf;
    if (general)
        e->overflow_neg += ovf & neg;
    e->to_zero += rzero & (uint64_t)((hb << 1) != 0);
    if (low) {
        e->underflow += inx & is_low;
        e->subnormal += is_low & (rzero ^ 1)
                        & (uint64_t)(r < p->emin_bits);
    }
    e->slow += slow;
    *lane_slow = slow;
    if (!general)
        return u2d(blend64(mask64(ovf), p->ovf[0], r) | (H & sign_bit));
    const uint64_t zero_drop = p->zero_sign ^ sign_bit;
    const uint64_t sgn = H & (sign_bit ^ (mask64(rzero) & zero_drop));
    const uint64_t ovf_res = p->ovf[0] ^ (((uint64_t)0 - neg)
                                          & (p->ovf[0] ^ p->ovf[1]));
    return u2d(blend64(mask64(ovf), ovf_res, r | sgn));
}

static EMU_KERNEL_INLINE void pairs_run(const pair_plan *plan,
                                        const bool low, const bool general,
                                        float *restrict out,
                                        const double *restrict hi,
                                        const double *restrict lo,
                                        const uint64_t *restrict w,
                                        pair_events *ev,
                                        uint64_t *restrict slow)
{
    const pair_plan p = *plan;
    pair_events e = { 0 };
    for (size_t i = 0; i < TILE; i++)
        out[i] = (float)pair_lane(&p, low, general, hi[i], lo[i], w[i], &e,
                                  &slow[i]);
    *ev = e;
}

typedef void (*pairs_kernel)(const pair_plan *, float *restrict,
                             const double *restrict, const double *restrict,
                             const uint64_t *restrict, pair_events *,
                             uint64_t *restrict);

static EMU_KERNEL_INLINE void pairs_any(const pair_plan *p,
                                        float *restrict out,
                                        const double *restrict hi,
                                        const double *restrict lo,
                                        const uint64_t *restrict w,
                                        pair_events *e,
                                        uint64_t *restrict slow)
{
    if (p->low && p->general)
        pairs_run(p, true, true, out, hi, lo, w, e, slow);
    else if (p->low)
        pairs_run(p, true, false, out, hi, lo, w, e, slow);
    else if (p->general)
        pairs_run(p, false, true, out, hi, lo, w, e, slow);
    else
        pairs_run(p, false, false, out, hi, lo, w, e, slow);
}

/* The events the kernels count for one lane: the same code, one lane. */
static pair_events pair_lane_events(const pair_plan *p, double hi, double lo,
                                    uint64_t word, uint64_t *slow)
{
    pair_events e = { 0 };
    if (p->low && p->general)
        pair_lane(p, true, true, hi, lo, word, &e, slow);
    else if (p->low)
        pair_lane(p, true, false, hi, lo, word, &e, slow);
    else if (p->general)
        pair_lane(p, false, true, hi, lo, word, &e, slow);
    else
        pair_lane(p, false, false, hi, lo, word, &e, slow);
    return e;
}

static void pairs_base(const pair_plan *p, float *restrict out,
                       const double *restrict hi, const double *restrict lo,
                       const uint64_t *restrict w, pair_events *e,
                       uint64_t *restrict slow)
{
    pairs_any(p, out, hi, lo, w, e, slow);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static void pairs_avx2(const pair_plan *p, float *restrict out,
                       const double *restrict hi, const double *restrict lo,
                       const uint64_t *restrict w, pair_events *e,
                       uint64_t *restrict slow)
{
    pairs_any(p, out, hi, lo, w, e, slow);
}

EMU_ISA_TARGET_AVX512
static void pairs_avx512(const pair_plan *p, float *restrict out,
                         const double *restrict hi, const double *restrict lo,
                         const uint64_t *restrict w, pair_events *e,
                         uint64_t *restrict slow)
{
    pairs_any(p, out, hi, lo, w, e, slow);
}
#endif

static pairs_kernel pairs_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return pairs_avx512;
    if (isa == EMU_ISA_AVX2)
        return pairs_avx2;
#endif
    (void)isa;
    return pairs_base;
}

/* Returns the number of slow lanes. */
static uint64_t tile_pairs(const pair_plan *pl, pairs_kernel kern,
                           const emu_format *f, float *out, const double *hi,
                           const double *lo, size_t len,
                           const emu_array_rounding *a, uint64_t first,
                           emu_round_counts *c)
{
    uint64_t w[TILE];
    double h2[TILE], l2[TILE];
    float part[TILE];
    const double *h = hi, *l = lo;
    float *dst = out;
    emu_random_fill(a->seed, a->stream, first, w, len);
    if (len < TILE) {
        /* +0 + +0 with word 0: a zero lane, never slow but without zero */
        memcpy(h2, hi, len * sizeof h2[0]);
        memcpy(l2, lo, len * sizeof l2[0]);
        memset(h2 + len, 0, (TILE - len) * sizeof h2[0]);
        memset(l2 + len, 0, (TILE - len) * sizeof l2[0]);
        memset(w + len, 0, (TILE - len) * sizeof w[0]);
        h = h2, l = l2, dst = part;
    }
    pair_events e;
    uint64_t slow[TILE];
    kern(pl, dst, h, l, w, &e, slow);
    e.slow -= (uint64_t)(TILE - len) * (pl->zero_below > 0);
    if (e.slow) {
        /* the kernel marked its slow lanes: their events taken back
         * (the same lane again, alone), their results the choke point's */
        pair_events back = { 0 };
        for (size_t i = 0; i < len; i++) {
            if (!slow[i])
                continue;
            uint64_t one_slow;
            const pair_events one = pair_lane_events(pl, h[i], l[i], w[i],
                                                     &one_slow);
            back.inexact += one.inexact;
            back.overflow += one.overflow;
            back.overflow_neg += one.overflow_neg;
            back.to_zero += one.to_zero;
            back.underflow += one.underflow;
            back.subnormal += one.subnormal;
            emu_status st;
            double y = emu_round2_word_unguarded(f, h[i], l[i], &a->rnd, w[i],
                                                 &st);
            dst[i] = (float)y;
            emu_round_counts_add_unguarded(c, h[i], y, st.flags);
        }
        e.inexact -= back.inexact;
        e.overflow -= back.overflow;
        e.overflow_neg -= back.overflow_neg;
        e.to_zero -= back.to_zero;
        e.underflow -= back.underflow;
        e.subnormal -= back.subnormal;
    }
    const uint64_t nan = !pl->general ? (pl->ovf_nan[0] ? e.overflow : 0)
                       : (pl->ovf_nan[0] ? e.overflow - e.overflow_neg : 0)
                         + (pl->ovf_nan[1] ? e.overflow_neg : 0);
    c->n += len - e.slow;
    c->inexact += e.inexact;
    c->to_zero += e.to_zero;
    c->underflow += e.underflow;
    c->subnormal += e.subnormal;
    c->overflow += e.overflow;
    c->nan += nan;
    c->flags |= (e.inexact ? EMU_FLAG_INEXACT : 0)
              | (e.overflow ? EMU_FLAG_OVERFLOW : 0)
              | (e.underflow ? EMU_FLAG_UNDERFLOW : 0)
              | (e.subnormal ? EMU_FLAG_SUBNORMAL : 0);
    if (dst != out)
        memcpy(out, dst, len * sizeof dst[0]);
    return e.slow;
}

/* The pairs of the scalar path: any format, any mode. */
static void scalar_pairs(const emu_format *f, float *out, const double *hi,
                         const double *lo, size_t len,
                         const emu_array_rounding *a, uint64_t first,
                         emu_round_counts *c)
{
    uint64_t w[TILE];
    if (emu_rnd_is_stochastic(a->rnd.mode))
        emu_random_fill(a->seed, a->stream, first, w, len);
    else
        memset(w, 0, len * sizeof w[0]);
    for (size_t i = 0; i < len; i++) {
        emu_status st;
        double y = emu_round2_word_unguarded(f, hi[i], lo[i], &a->rnd, w[i],
                                             &st);
        out[i] = (float)y;
        emu_round_counts_add_unguarded(c, hi[i], y, st.flags);
    }
}

void emu_round_pairs_f32_unguarded(const emu_format *fmt, float *out,
                                   const double *hi, const double *lo,
                                   size_t n, const emu_array_rounding *a,
                                   emu_round_counts *counts)
{
    pair_plan pl;
    const bool fast = plan_pairs(&pl, fmt, &a->rnd);
    const pairs_kernel kern = pairs_for(emu_isa_active());
    emu_round_counts c = { 0 };
    /* The kernels with the lanes below 2^emin cost about a quarter more
     * per lane; the optimizer's weights seldom lie there.  So the tiles
     * start without them and switch for the rest of the array once a
     * tile sent more than LOW_SWITCH lanes to the choke point.  Either
     * kernel gives the choke point's results: only the speed changes. */
    enum { LOW_SWITCH = 16 };
    const bool low_ok = fast && pl.low;
    pl.low = false;
    for (size_t i = 0; i < n; i += TILE) {
        const size_t len = n - i < TILE ? n - i : TILE;
        if (fast) {
            const uint64_t slow = tile_pairs(&pl, kern, fmt, out + i, hi + i,
                                             lo + i, len, a,
                                             a->first_index + i, &c);
            if (low_ok && slow > LOW_SWITCH)
                pl.low = true;
        } else
            scalar_pairs(fmt, out + i, hi + i, lo + i, len, a,
                         a->first_index + i, &c);
    }
    if (counts)
        counts_merge(counts, &c);
}

/* ---- entry points ----------------------------------------------------- */

/* A format with exactly binary32's values and specials: rounding a binary32
 * value into it is exact in every mode (saturation aside), so the map is
 * the identity, with NaNs made the canonical quiet NaN as the scalar choke
 * point makes them, and exact subnormals flagged. */
bool emu_round_is_identity_f32(const emu_format *f, const emu_rounding *r)
{
    return f->ebits == 8 && f->mbits == 23 && f->bias == 127 && f->is_signed &&
           f->subnormals && f->has_zero && f->specials == EMU_SPECIALS_IEEE &&
           f->overflow == EMU_OVERFLOW_INF && !r->saturate &&
           !r->profile.nan_keep_sign && !r->profile.nan_keep_payload &&
           !r->profile.nan_negative; /* NaNs other than the canonical one */
}

static void identity_f32(float *out, const float *in, size_t n,
                         emu_round_counts *c)
{
    uint64_t sub = 0, nan = 0;
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        nan += isnan(x) != 0;
        sub += x != 0.0f && fabsf(x) < 0x1p-126f;
        out[i] = isnan(x) ? NAN : x;
    }
    c->n += n;
    c->subnormal += sub;
    c->nan += nan;
    if (sub)
        c->flags |= EMU_FLAG_SUBNORMAL;
}

int emu_round_array_f32(const emu_format *fmt, float *out, const float *in,
                        size_t n, const emu_array_rounding *a,
                        emu_round_counts *counts, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (!emu_format_is_validated(fmt))
        return emu_fail(err, EMU_EINVAL, fmt ? fmt->name : "format", "format",
                        "%s was not validated, or was changed since: call "
                        "emu_format_validate", fmt ? fmt->name : "(null)");
    if (!fmt->fits_carrier)
        return emu_fail(err, EMU_EUNSUPPORTED, fmt->name, "format",
                        "%s has values that are not binary32 values: "
                        "round binary64 arrays with emu_round_array_f64",
                        fmt->name);
    return emu_round_array_f32_unguarded(fmt, out, in, n, a, counts);
}

int emu_round_array_f32_unguarded(const emu_format *fmt, float *out,
                                  const float *in, size_t n,
                                  const emu_array_rounding *a,
                                  emu_round_counts *counts)
{
    if (!fmt->fits_carrier)
        return -1;
    if (emu_round_is_identity_f32(fmt, &a->rnd)) {
        emu_round_counts c = { 0 };
        identity_f32(out, in, n, &c);
        if (counts)
            counts_merge(counts, &c);
        return 0;
    }
    f32_plan pl;
    const bool fast = plan_f32(&pl, fmt, &a->rnd);
    const tile_kernel kern = kernel_for(emu_isa_active());
    const grid_kernel grid = fast && !pl.small_slow && !pl.general
                             ? grid_scan_for(emu_isa_active()) : NULL;
    const size_t tiles = (n + TILE - 1) / TILE;
    uint64_t c_n = 0, c_inx = 0, c_unf = 0, c_tz = 0, c_sub = 0, c_ovf = 0,
             c_nan = 0, c_inv = 0;
    unsigned c_flags = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n >= EMU_OMP_MIN_N) \
    reduction(+ : c_n, c_inx, c_unf, c_tz, c_sub, c_ovf, c_nan, c_inv) \
    reduction(| : c_flags)
#endif
    for (size_t t = 0; t < tiles; t++) {
        EMU_HOSTFP_GUARD; /* OpenMP pool threads keep the state they had */
        size_t i = t * TILE, len = n - i < TILE ? n - i : TILE;
        emu_round_counts c = { 0 };
        if (fast)
            tile_f32(&pl, kern, grid, fmt, out + i, in + i, len, a,
                     a->first_index + i, &c);
        else
            scalar_tile_f32(fmt, out + i, in + i, len, a, a->first_index + i,
                            &c);
        c_n += c.n, c_inx += c.inexact, c_unf += c.underflow;
        c_tz += c.to_zero, c_sub += c.subnormal, c_ovf += c.overflow;
        c_nan += c.nan, c_inv += c.invalid, c_flags |= c.flags;
    }
    if (counts) {
        emu_round_counts sum = { c_n, c_inx, c_unf, c_tz, c_sub, c_ovf,
                                 c_nan, c_inv, c_flags };
        counts_merge(counts, &sum);
    }
    return 0;
}

int emu_round_array_f64(const emu_format *fmt, double *out, const double *in,
                        size_t n, const emu_array_rounding *a,
                        emu_round_counts *counts, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (!emu_format_is_validated(fmt))
        return emu_fail(err, EMU_EINVAL, fmt ? fmt->name : "format", "format",
                        "%s was not validated, or was changed since: call "
                        "emu_format_validate", fmt ? fmt->name : "(null)");
    return emu_round_array_f64_unguarded(fmt, out, in, n, a, counts);
}

int emu_round_array_f64_unguarded(const emu_format *fmt, double *out,
                                  const double *in, size_t n,
                                  const emu_array_rounding *a,
                                  emu_round_counts *counts)
{
    f64_plan pl;
    const bool fast = plan_f64(&pl, fmt, &a->rnd);
    const tile_kernel64 kern = kernel64_for(emu_isa_active());
    const size_t tiles = (n + TILE - 1) / TILE;
    uint64_t c_n = 0, c_inx = 0, c_unf = 0, c_tz = 0, c_sub = 0, c_ovf = 0,
             c_nan = 0, c_inv = 0;
    unsigned c_flags = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n >= EMU_OMP_MIN_N) \
    reduction(+ : c_n, c_inx, c_unf, c_tz, c_sub, c_ovf, c_nan, c_inv) \
    reduction(| : c_flags)
#endif
    for (size_t t = 0; t < tiles; t++) {
        EMU_HOSTFP_GUARD; /* OpenMP pool threads keep the state they had */
        size_t i = t * TILE, len = n - i < TILE ? n - i : TILE;
        emu_round_counts c = { 0 };
        if (fast)
            tile_f64(&pl, kern, fmt, out + i, in + i, len, a,
                     a->first_index + i, &c);
        else
            scalar_tile_f64(fmt, out + i, in + i, len, a, a->first_index + i,
                            &c);
        c_n += c.n, c_inx += c.inexact, c_unf += c.underflow;
        c_tz += c.to_zero, c_sub += c.subnormal, c_ovf += c.overflow;
        c_nan += c.nan, c_inv += c.invalid, c_flags |= c.flags;
    }
    if (counts) {
        emu_round_counts sum = { c_n, c_inx, c_unf, c_tz, c_sub, c_ovf,
                                 c_nan, c_inv, c_flags };
        counts_merge(counts, &sum);
    }
    return 0;
}

/* ---- the lean nearest-even kernel (internal.h) ---------------------------
 * Block-scaled quantization's hot loop with its default mode: what
 * tile_f32 does for EMU_RNE with saturation, without counts, flags, NaN
 * and inf, on the bit patterns.  The scaled-format tests check it against
 * MPFR. */
bool emu_rne_sat_plan_make(emu_rne_sat_plan *k, const emu_format *f)
{
    if (!f->fits_carrier || !f->is_signed ||
        !f->subnormals || !f->has_zero || f->specials == EMU_SPECIALS_FNUZ ||
        f->mbits > 22 || f->qmin + 23 > 127 || f->qmin + 23 < -126)
        return false;
    float mn = (float)f->min_normal, mx = (float)f->max;
    memcpy(&k->min_normal, &mn, 4);
    memcpy(&k->max, &mx, 4);
    k->shift = (uint32_t)(23 - f->mbits);
    k->half_minus_1 = (1u << (k->shift - 1)) - 1;
    k->magic = ldexpf(1.0f, f->qmin + 23);
    return true;
}

enum { KTILE = 64 };

/* One element, branch-free, from constants in locals (loads through the
 * plan inside the loop would keep compilers from vectorizing it). */
static inline void rne_kernel_one(uint32_t min_normal, uint32_t max,
                                  uint32_t shift, uint32_t half_minus_1,
                                  float magic, float *out, const float *in)
{
    uint32_t u;
    memcpy(&u, in, 4);
    const uint32_t sign = u & 0x80000000u, a = u ^ sign;
    /* normal in the element format: round the pattern's low bits */
    const uint32_t rn =
        (a + half_minus_1 + ((a >> shift) & 1u)) & ~((1u << shift) - 1);
    /* subnormal: binary32's own addition rounds to the quantum */
    float fa, fs;
    memcpy(&fa, &a, 4);
    fs = (fa + magic) - magic;
    uint32_t rs;
    memcpy(&rs, &fs, 4);
    const uint32_t normal = 0u - (uint32_t)(a >= min_normal);
    const uint32_t v = (rn & normal) | (rs & ~normal);
    const uint32_t over = 0u - (uint32_t)(v > max);
    const uint32_t r = ((max & over) | (v & ~over)) | sign;
    memcpy(out, &r, 4);
}

/* Tiles of fixed length, so that compilers vectorize the loop; compiled
 * also for AVX2 and AVX-512 and chosen by isa.c, as the array kernels
 * are: the same integer and IEEE operations, so the same results. */
static EMU_KERNEL_INLINE void rne_sat_any(const emu_rne_sat_plan *k,
                                          float *restrict out,
                                          const float *restrict in, size_t n)
{
    const uint32_t mn = k->min_normal, mx = k->max, sh = k->shift,
                   h = k->half_minus_1;
    const float mg = k->magic;
    size_t i = 0;
    for (; i + KTILE <= n; i += KTILE)
        for (int j = 0; j < KTILE; j++)
            rne_kernel_one(mn, mx, sh, h, mg, out + i + j, in + i + j);
    for (; i < n; i++)
        rne_kernel_one(mn, mx, sh, h, mg, out + i, in + i);
}

static void rne_sat_base(const emu_rne_sat_plan *k, float *restrict out,
                         const float *restrict in, size_t n)
{
    rne_sat_any(k, out, in, n);
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX2
static void rne_sat_avx2(const emu_rne_sat_plan *k, float *restrict out,
                         const float *restrict in, size_t n)
{
    rne_sat_any(k, out, in, n);
}

EMU_ISA_TARGET_AVX512
static void rne_sat_avx512(const emu_rne_sat_plan *k, float *restrict out,
                           const float *restrict in, size_t n)
{
    rne_sat_any(k, out, in, n);
}
#endif

void emu_rne_sat_f32(const emu_rne_sat_plan *k, float *out, const float *in,
                     size_t n)
{
#if EMU_HAVE_ISA_CLONES
    switch (emu_isa_active()) {
    case EMU_ISA_AVX512: rne_sat_avx512(k, out, in, n); return;
    case EMU_ISA_AVX2:   rne_sat_avx2(k, out, in, n); return;
    default: break;
    }
#endif
    rne_sat_base(k, out, in, n);
}
