/*
 * accum_internal.h — what the accumulator files share (library-private):
 * one accumulator step, round(hi + lo) into a carrier format, and the
 * random words of a dot product.  accum_step.c (the step as a function,
 * and swamping), accum_ref.c (the models, one dot product at a time) and
 * accum_gemm.c (the GEMM engine) include it; its functions are static
 * inline so that the kernels inline them as before.  The exact model's
 * fixed-point accumulator (xacc) is here too: the reference and the GEMM
 * kernel sum into the same one.
 *
 * One accumulator step, round(hi + lo) into a carrier format, is done by
 * bit manipulation (fast_round, fast_round_sr) where the result is a
 * normal value up to max (or a zero), and by the choke point
 * emu_round2_word otherwise (subnormal or overflowing results, NaN, inf,
 * fnuz zeros, unsigned formats).  hi + lo is the exact result of the step
 * (TwoSum).  Deterministic modes first round it to odd at 53 bits, one
 * integer operation on hi's pattern, then round that double to p <= 24
 * bits by integer arithmetic on its pattern: rounding to odd with at least
 * p + 2 bits and then to p bits equals rounding once, in every
 * deterministic mode (Boldo and Melquiond, "Emulation of FMA and correctly
 * rounded sums: proved algorithms using rounding to odd", IEEE TC 2008).
 * Stochastic modes read floor(F 2^64) off hi's low bits and lo.
 * tests/test_accum.c proves both bit-identical to the choke point.
 *
 * Stochastic accumulator roundings: in dot product `dot`, the rounding of
 * product i takes word base + i, and the r-th accumulator rounding
 * (counted from 0 in the order the model performs them) takes word
 * base + n + r, base = dot * EMU_ACCUM_WORDS_PER_DOT for the dot products
 * short enough (accum.h), a range in a stream of their own for longer
 * ones, so that no two dot products share a word.
 */
#ifndef EMU_ACCUM_INTERNAL_H
#define EMU_ACCUM_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "emu/accum.h"
#include "emu/rng.h"
#include "ops_internal.h"

#define SIGN_BIT ((uint64_t)1 << 63)

/* ---- one accumulator step ---------------------------------------------- */

/* What the fast rounding of one format and mode needs. */
typedef struct fast_plan {
    bool ok;            /* the fast path applies at all                   */
    bool sr;            /* a stochastic mode (fast_round_sr)              */
    bool zero_slow;     /* zero results must go to the choke point (fnuz) */
    emu_rnd mode;
    unsigned sr_bits;   /* random bits of a stochastic mode, 1..64        */
    int p, emin;
    int d;              /* fraction bits of a double dropped: 53 - p      */
    uint64_t mask;      /* 2^d - 1                                         */
    uint64_t half;      /* 2^(d - 1)                                       */
    double min_normal;  /* 2^emin                                          */
    double max;
} fast_plan;

static inline void plan_init(fast_plan *pl, const emu_format *f,
                             const emu_rounding *r)
{
    memset(pl, 0, sizeof *pl);
    pl->mode = r->mode;
    pl->ok = f->fits_carrier && f->is_signed && f->has_zero && f->p >= 1 &&
             f->p <= 51 && (unsigned)r->mode < EMU_RND_COUNT;
    if (!pl->ok)
        return;
    pl->sr = emu_rnd_is_stochastic(r->mode);
    pl->sr_bits = r->mode == EMU_RS_BITS && r->sr_bits >= 1 && r->sr_bits <= 64
                ? r->sr_bits : 64;
    pl->p = f->p;
    pl->emin = f->emin;
    pl->zero_slow = f->specials == EMU_SPECIALS_FNUZ;
    pl->d = 53 - f->p;
    pl->mask = ((uint64_t)1 << pl->d) - 1;
    pl->half = (uint64_t)1 << (pl->d - 1);
    pl->min_normal = f->min_normal;
    pl->max = f->max;
}

/* |hi + lo| rounded to odd at 53 bits, as a pattern, from the pattern u of
 * |hi|: hi = RN(hi + lo), so the truncation is hi when lo points away from
 * zero and hi's predecessor (pattern u - 1, also across a binade) when it
 * points toward zero; the last bit is then set because the value is
 * inexact.  A zero lo leaves u alone. */
static inline uint64_t odd53(uint64_t u, uint64_t hb, double lo)
{
    if (lo == 0.0)
        return u;
    return (u - ((hb ^ d2u(lo)) >> 63)) | 1;
}

/* Rounds the pattern u of a non-negative double to the format's grid in
 * the normal range (d low bits dropped); neg says whether the value it
 * stands for is negative (for the directed modes). */
static inline uint64_t round_bits(emu_rnd mode, uint64_t u, bool neg, int d,
                                  uint64_t mask, uint64_t half)
{
    switch (mode) {
    case EMU_RNE:
        return (u + (half - 1) + ((u >> d) & 1)) & ~mask;
    case EMU_RNA:
        return (u + half) & ~mask;
    case EMU_RU:
        return (u + (neg ? 0 : mask)) & ~mask;
    case EMU_RD:
        return (u + (neg ? mask : 0)) & ~mask;
    case EMU_RO: {
        uint64_t t = u & mask;
        return (u - t) | (((t + mask) >> d) << d);
    }
    case EMU_RZ:
    default:
        return u & ~mask;
    }
}

/* round(hi + lo) if the fast path covers it; false otherwise. */
static inline bool fast_round(const fast_plan *pl, double hi, double lo,
                              double *out)
{
    uint64_t hb = d2u(hi);
    uint64_t sign = hb & SIGN_BIT;
    uint64_t u = odd53(hb ^ sign, hb, lo);
    uint64_t r = round_bits(pl->mode, u, sign != 0, pl->d, pl->mask, pl->half);
    double a = u2d(u), rv = u2d(r);
    if ((!(a >= pl->min_normal) && a != 0.0) || !(rv <= pl->max))
        return false; /* subnormal range, overflow, inf, NaN */
    if (rv == 0.0 && pl->zero_slow)
        return false;
    *out = u2d(r | sign);
    return true;
}

/* Stochastic rounding of hi + lo (|lo| <= ulp(hi)/2) with `word`, when
 * the result is a normal value up to max; false otherwise.  Integer
 * arithmetic on hi's pattern: in hi's binade E (results below 2^emin, and
 * a value just under a power of two, whose binade is E - 1, decline) the
 * quantum is 2^q, q = E - p + 1; hi's d = 53 - p low significand bits R
 * and lo give floor(F 2^64) = R 2^(64-d) + floor(lo' 2^(64-q)), lo'
 * measured away from zero, borrowing one quantum when R = 0 and lo' < 0
 * (the value then lies just under hi's grid point).  The decision is then
 * README's (Rounding): a carry out of word + floor(F 2^64), or of the
 * top r bits of each. */
static inline bool fast_round_sr(const fast_plan *pl, double hi, double lo,
                                 uint64_t word, double *out)
{
    uint64_t hb = d2u(hi);
    uint64_t sign = hb & SIGN_BIT;
    uint64_t u = hb ^ sign;
    int ef = (int)(u >> 52);
    if (ef == 0 || ef == 0x7ff || ef - 1023 < pl->emin)
        return false;
    double al = sign ? -lo : lo;
    if (al < 0.0 && (u & (((uint64_t)1 << 52) - 1)) == 0)
        return false;
    int q = ef - 1023 - pl->p + 1;
    /* lo' 2^(64-q) exactly (a power-of-two scaling, |result| < 2^(p+11)),
     * then its floor as an integer. */
    double x = al * u2d((uint64_t)(1023 + 64 - q) << 52);
    int64_t L = (int64_t)x;
    if ((double)L > x || (al < 0.0 && L == 0 && x == 0.0))
        L -= 1;
    uint64_t R = u & pl->mask, base = u & ~pl->mask, Fq;
    if (R == 0 && L < 0) {
        base -= (uint64_t)1 << pl->d;
        Fq = (uint64_t)0 - (uint64_t)(-L);
    } else {
        Fq = (R << (64 - pl->d)) + (uint64_t)L;
    }
    unsigned bits = pl->sr_bits;
    bool up = bits >= 64 ? word + Fq < word
                         : (((Fq >> (64 - bits)) + (word >> (64 - bits))) >> bits) != 0;
    uint64_t r = base + ((uint64_t)up << pl->d);
    if (!(u2d(r) <= pl->max))
        return false;
    *out = u2d(r | sign);
    return true;
}

/* Random words of one dot product, drawn WORD_RUN at a time: the models
 * consume them in order, and the bulk generator is four times faster. */
enum { WORD_RUN = 64 };
typedef struct word_cache {
    uint64_t first;          /* index of w[0]; valid if n > 0 */
    size_t n;
    uint64_t w[WORD_RUN];
} word_cache;

/* Everything one dot product needs to round its steps. */
typedef struct stepper {
    const emu_format *f;
    const emu_rounding *r;
    fast_plan pl;
    bool sr;
    uint64_t seed, stream, base;
    word_cache *wc;          /* stochastic modes */
} stepper;

/* The words of a dot product of n terms (accum.h): its own range of
 * EMU_ACCUM_WORDS_PER_DOT words in the op's stream while 5n + 1 fit,
 * else a range of 2^c words in the stream of size class c. */
static inline void dot_words(const emu_accum_rng *rng, size_t n,
                             uint64_t *stream, uint64_t *base)
{
    *stream = rng ? rng->stream : 0;
    const uint64_t dot = rng ? rng->dot : 0;
    if (n <= EMU_ACCUM_SHORT_DOT) {
        *base = dot * EMU_ACCUM_WORDS_PER_DOT;
        return;
    }
    unsigned c = 25;
    while (c < 64 && ((uint64_t)1 << c) < 5 * (uint64_t)n + 1)
        c++;
    *stream ^= EMU_ACCUM_LONG_STREAM(c);
    *base = c < 64 ? dot << c : 0;
}

static inline void stepper_init(stepper *s, const emu_format *f,
                                const emu_rounding *r,
                                const emu_accum_rng *rng, size_t n,
                                word_cache *wc)
{
    s->f = f;
    s->r = r;
    plan_init(&s->pl, f, r);
    s->sr = emu_rnd_is_stochastic(r->mode);
    s->seed = rng ? rng->seed : 0;
    dot_words(rng, n, &s->stream, &s->base);
    s->wc = wc;
    if (wc)
        wc->n = 0;
}

/* Word idx of the dot product. */
static inline uint64_t step_word(const stepper *s, uint64_t idx)
{
    word_cache *c = s->wc;
    if (!c)
        return emu_random64(s->seed, s->stream, s->base + idx);
    if (c->n == 0 || idx - c->first >= WORD_RUN) {
        emu_random_fill(s->seed, s->stream, s->base + idx, c->w, WORD_RUN);
        c->first = idx;
        c->n = WORD_RUN;
    }
    return c->w[idx - c->first];
}

/* round(hi + lo) with word `idx` of the dot product. */
static inline double step_round(const stepper *s, double hi, double lo,
                                uint64_t idx)
{
    double out;
    if (!s->sr) {
        if (s->pl.ok && fast_round(&s->pl, hi, lo, &out))
            return out;
        return emu_round2_word_unguarded(s->f, hi, lo, s->r, 0, NULL);
    }
    uint64_t word = step_word(s, idx);
    if (s->pl.ok && fast_round_sr(&s->pl, hi, lo, word, &out))
        return out;
    return emu_round2_word_unguarded(s->f, hi, lo, s->r, word, NULL);
}

/* round(a + b): the exact sum as a TwoSum pair, with IEEE 754's sign for
 * an exact zero (the common sign of two like-signed zeros, else +0, or -0
 * when rounding toward -inf). */
static inline double add_round(const stepper *s, double a, double b,
                               uint64_t idx)
{
    double hi, lo;
    emu_two_sum(a, b, &hi, &lo);
    if (!isfinite(hi))
        lo = 0.0; /* inf or NaN: the hardware sum is IEEE's answer */
    else if (hi == 0.0 && s->r->mode == EMU_RD &&
        !(a == 0.0 && b == 0.0 && !signbit(a) && !signbit(b)))
        hi = -0.0;
    return step_round(s, hi, lo, idx);
}

/* ---- bits of a double (swamping counts) ---------------------------------- */

/* Number of trailing zero bits of x != 0. */
static inline int ctz64(uint64_t x)
{
#if defined(__GNUC__)
    return __builtin_ctzll(x);
#else
    int n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

/* Exponent of the lowest set bit of a finite non-zero double. */
static inline int lowest_bit(double t)
{
    uint64_t u = d2u(t) & ~SIGN_BIT;
    int e = (int)(u >> 52);
    uint64_t m = u & (((uint64_t)1 << 52) - 1);
    if (e == 0)
        return -1074 + ctz64(m);              /* subnormal: m != 0 */
    return e - 1075 + ctz64(m | ((uint64_t)1 << 52));
}

/* floor(log2 |x|) of a finite non-zero double. */
static inline int exponent_of(double x)
{
    uint64_t u = d2u(x) & ~SIGN_BIT;
    int e = (int)(u >> 52);
    if (e == 0)
        return ilogb(x); /* subnormal */
    return e - 1023;
}

/* Exponent of the quantum of fmt at |x| (x finite): round.c's q. */
static inline int quantum_exp(const emu_format *f, double x)
{
    int e = x == 0.0 ? INT32_MIN : exponent_of(x);
    if (e >= f->emin)
        return e - f->p + 1;
    return f->subnormals ? f->emin - f->p + 1 : f->emin;
}

/* Bits of t at or below 2^(q-1): from t's lowest set bit up to the lower
 * of t's leading bit and 2^(q-1). */
static inline int bits_below(double t, int q)
{
    int msb = exponent_of(t), lsb = lowest_bit(t);
    int top = msb < q - 1 ? msb : q - 1;
    int n = top - lsb + 1;
    return n < 0 ? 0 : n > 64 ? 64 : n;
}

/* emu_accum_count_add (emu/accum.h), inline for the models and kernels. */
static inline void accum_count_add(emu_accum_counts *c, const emu_format *acc,
                                   double s, double t, double s_new)
{
    c->adds++;
    if (t != 0.0 && s_new == s) {
        c->absorbed++;
        c->lost_bits[EMU_LOST_BINS - 1]++;
        return;
    }
    if (t == 0.0 || !isfinite(t) || !isfinite(s_new)) {
        c->lost_bits[0]++;
        return;
    }
    c->lost_bits[bits_below(t, quantum_exp(acc, s_new))]++;
}

/* ---- the exact model: a fixed-point superaccumulator ---------------------
 * Terms are doubles with at most 53 significant bits, the lowest of weight
 * >= 2^-350 (a product of two binary32 values is at least 2^-298 with a
 * 48-bit significand, written as 53 bits) and magnitude < 2^256.  Bit b of
 * the accumulator weighs 2^(b - XBIAS); 12 limbs leave room for 2^60 terms
 * and the two's complement sign. */
enum { XLIMBS = 12, XBIAS = 384 };

typedef struct xacc {
    uint64_t w[XLIMBS];
} xacc;

/* a += (neg ? -m : m) * 2^(pos - XBIAS), m < 2^53, 0 <= pos. */
static inline void xacc_add(xacc *a, uint64_t m, int pos, bool neg)
{
    int li = pos / 64, sh = pos % 64;
    uint64_t part[2] = { m << sh, sh ? m >> (64 - sh) : 0 };
    uint64_t c = 0; /* carry or borrow */
    for (int i = li; i < XLIMBS; i++) {
        uint64_t v = i - li < 2 ? part[i - li] : 0;
        if (i - li >= 2 && !c)
            break;
        uint64_t x = a->w[i];
        if (!neg) {
            uint64_t y = x + v;
            uint64_t c1 = y < v;
            y += c;
            c = c1 | (y < c);
            a->w[i] = y;
        } else {
            uint64_t b1 = x < v;
            uint64_t y = x - v;
            uint64_t b2 = y < c;
            a->w[i] = y - c;
            c = b1 | b2;
        }
    }
}

static inline void xacc_add_double(xacc *a, double t)
{
    if (t == 0.0)
        return;
    int e;
    double m = frexp(fabs(t), &e); /* |t| = m 2^e */
    uint64_t M = (uint64_t)ldexp(m, 53);
    xacc_add(a, M, e - 53 + XBIAS, t < 0.0);
}

/* RN of the accumulator's value (the accumulator is not changed). */
static inline double xacc_round(const xacc *acc)
{
    xacc a = *acc;
    bool neg = a.w[XLIMBS - 1] >> 63;
    if (neg) {
        uint64_t carry = 1;
        for (int i = 0; i < XLIMBS; i++) {
            a.w[i] = ~a.w[i] + carry;
            carry = carry && a.w[i] == 0;
        }
    }
    int top = XLIMBS - 1;
    while (top >= 0 && a.w[top] == 0)
        top--;
    if (top < 0)
        return 0.0;
    int lz = 0;
    while (!(a.w[top] >> (63 - lz) & 1))
        lz++;
    int msb = top * 64 + 63 - lz; /* position of the leading bit */
    /* The 64 bits from msb down, and a sticky bit for the rest. */
    uint64_t hi64 = a.w[top] << lz;
    bool sticky = false;
    if (lz && top > 0)
        hi64 |= a.w[top - 1] >> (64 - lz);
    if (top > 0)
        sticky = (lz ? a.w[top - 1] << lz : a.w[top - 1]) != 0;
    for (int i = top - 2; i >= 0 && !sticky; i--)
        sticky = a.w[i] != 0;
    uint64_t m = hi64 >> 11, rest = hi64 & 0x7ff;
    if (rest > 0x400 || (rest == 0x400 && (sticky || (m & 1))))
        m++; /* a carry to 2^53 is still exact in a double */
    double v = ldexp((double)m, msb - 63 + 11 - XBIAS);
    return neg ? -v : v;
}

/* emu_accum_dot, optionally starting from an initial value (init NULL:
 * +0), without the host guard (accum_ref.c; the GEMM engine calls it). */
double emu_accum_dot_init_unguarded(const emu_accum *a, const float *x,
                                    ptrdiff_t incx, const float *y,
                                    ptrdiff_t incy, size_t n,
                                    const double *init,
                                    const emu_accum_rng *rng,
                                    emu_accum_counts *counts, double *lo);

#endif
