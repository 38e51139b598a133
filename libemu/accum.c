/*
 * accum.c — the accumulator models: how a dot product or a sum is formed.
 *
 * Called by matmul and the reductions (emu_accum_dot, emu_gemm_accum), by
 * the convolutions (emu_gemm_accum) and by the optimizer updates
 * (emu_accum_count_add).  The definitions are in emu/accum.h; this file has
 * three parts:
 *
 *  1. One accumulator step, round(hi + lo) into a carrier format, done by
 *     bit manipulation (fast_round, fast_round_sr) where the result is a
 *     normal value up to max (or a zero), and by the choke point
 *     emu_round2_word otherwise (subnormal or overflowing results, NaN,
 *     inf, fnuz zeros, unsigned formats).  hi + lo is the exact result of
 *     the step (TwoSum).  Deterministic modes first round it to odd at 53
 *     bits, one integer operation on hi's pattern, then round that double
 *     to p <= 24 bits by integer arithmetic on its pattern: rounding to odd
 *     with at least p + 2 bits and then to p bits equals rounding once, in
 *     every deterministic mode (Boldo and Melquiond, "Emulation of FMA and
 *     correctly rounded sums: proved algorithms using rounding to odd",
 *     IEEE TC 2008).  Stochastic modes read floor(F 2^64) off hi's low bits
 *     and lo.  tests/test_accum.c proves both bit-identical to the choke
 *     point.
 *
 *  2. The models, one dot product at a time (emu_accum_dot): the reference
 *     definitions, written to be read next to accum.h.
 *
 *  3. The GEMM engine (emu_gemm_accum): many dot products at once.  For
 *     the sequential, blocked, Kahan and pairwise models in deterministic
 *     modes with exact products, one row's dot products with a panel of JB
 *     columns run side by side as straight-line lane code that compilers
 *     vectorise; every other model calls emu_accum_dot per output; fast
 *     calls sgemm.  Rows are split over C11 threads.  Each value is
 *     bit-identical to emu_accum_dot of the same terms (fast with a BLAS
 *     excepted), and the counts are sums of integers, so neither depends
 *     on the thread count.
 *
 * Stochastic accumulator roundings: in dot product `dot`, the rounding of
 * product i takes word base + i, and the r-th accumulator rounding
 * (counted from 0 in the order the model performs them) takes word
 * base + n + r, base = dot * EMU_ACCUM_WORDS_PER_DOT for the dot products
 * short enough (accum.h), a range in a stream of their own for longer
 * ones, so that no two dot products share a word.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/accum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "emu/rng.h"
#include "ops_internal.h"

#ifdef EMU_HAVE_CBLAS
#include <cblas.h>
#endif

#define SIGN_BIT ((uint64_t)1 << 63)

static uint64_t d2u(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static double u2d(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- 1. one accumulator step ------------------------------------------- */

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

static void plan_init(fast_plan *pl, const emu_format *f, const emu_rounding *r)
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

double emu_accum_round_step(const emu_format *f, const emu_rounding *r,
                            double hi, double lo, uint64_t word, bool *fast)
{
    fast_plan pl;
    plan_init(&pl, f, r);
    double out;
    if (pl.ok && (pl.sr ? fast_round_sr(&pl, hi, lo, word, &out)
                        : fast_round(&pl, hi, lo, &out))) {
        if (fast)
            *fast = true;
        return out;
    }
    if (fast)
        *fast = false;
    return emu_round2_word_unguarded(f, hi, lo, r, word, NULL);
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
static void dot_words(const emu_accum_rng *rng, size_t n, uint64_t *stream,
                      uint64_t *base)
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

static void stepper_init(stepper *s, const emu_format *f, const emu_rounding *r,
                         const emu_accum_rng *rng, size_t n, word_cache *wc)
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
static uint64_t step_word(const stepper *s, uint64_t idx)
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
static double step_round(const stepper *s, double hi, double lo, uint64_t idx)
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
static double add_round(const stepper *s, double a, double b, uint64_t idx)
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

/* ---- swamping ------------------------------------------------------------ */

/* Number of trailing zero bits of x != 0. */
static int ctz64(uint64_t x)
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
static int lowest_bit(double t)
{
    uint64_t u = d2u(t) & ~SIGN_BIT;
    int e = (int)(u >> 52);
    uint64_t m = u & (((uint64_t)1 << 52) - 1);
    if (e == 0)
        return -1074 + ctz64(m);              /* subnormal: m != 0 */
    return e - 1075 + ctz64(m | ((uint64_t)1 << 52));
}

/* floor(log2 |x|) of a finite non-zero double. */
static int exponent_of(double x)
{
    uint64_t u = d2u(x) & ~SIGN_BIT;
    int e = (int)(u >> 52);
    if (e == 0)
        return ilogb(x); /* subnormal */
    return e - 1023;
}

/* Exponent of the quantum of fmt at |x| (x finite): round.c's q. */
static int quantum_exp(const emu_format *f, double x)
{
    int e = x == 0.0 ? INT32_MIN : exponent_of(x);
    if (e >= f->emin)
        return e - f->p + 1;
    return f->subnormals ? f->emin - f->p + 1 : f->emin;
}

/* Bits of t at or below 2^(q-1): from t's lowest set bit up to the lower
 * of t's leading bit and 2^(q-1). */
static int bits_below(double t, int q)
{
    int msb = exponent_of(t), lsb = lowest_bit(t);
    int top = msb < q - 1 ? msb : q - 1;
    int n = top - lsb + 1;
    return n < 0 ? 0 : n > 64 ? 64 : n;
}

void emu_accum_count_add_unguarded(emu_accum_counts *c, const emu_format *acc,
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

void emu_accum_count_add(emu_accum_counts *c, const emu_format *acc, double s,
                         double t, double s_new)
{
    EMU_HOSTFP_GUARD;
    emu_accum_count_add_unguarded(c, acc, s, t, s_new);
}

/* ---- 2. the models, one dot product at a time --------------------------- */

typedef struct dot_job {
    const emu_accum *a;
    const float *x, *y;
    ptrdiff_t incx, incy;
    size_t n;
    bool has_init;          /* the accumulator starts at init, not 0     */
    double init;
    stepper acc, prod, wide;
    emu_accum_counts *counts;
} dot_job;

/* Term i: the exact product (or x alone), rounded into prod if asked. */
static double term(const dot_job *j, size_t i)
{
    double x = j->x[(ptrdiff_t)i * j->incx];
    if (!j->y)
        return x;
    double t = x * (double)j->y[(ptrdiff_t)i * j->incy]; /* exact */
    if (j->a->round_products)
        t = step_round(&j->prod, t, 0.0, i);
    return t;
}

static void count(const dot_job *j, const emu_format *f, double s, double t,
                  double s_new)
{
    if (j->counts)
        emu_accum_count_add_unguarded(j->counts, f, s, t, s_new);
}

static double dot_sequential(const dot_job *j)
{
    double s = j->has_init ? j->init : 0.0;
    for (size_t i = 0; i < j->n; i++) {
        double t = term(j, i);
        double s_new = add_round(&j->acc, s, t, j->n + i);
        count(j, &j->a->acc, s, t, s_new);
        s = s_new;
    }
    return s;
}

/* Leaf l of the tree: the initial value, if any, is the leftmost. */
static double leaf(const dot_job *j, size_t l)
{
    if (!j->has_init)
        return term(j, l);
    return l == 0 ? j->init : term(j, l - 1);
}

/* Pairwise sum of leaves [first, first + n), n >= 1; r counts the
 * accumulator roundings done so far (post-order). */
static double pairwise(const dot_job *j, size_t first, size_t n, uint64_t *r)
{
    if (n == 1)
        return leaf(j, first);
    size_t nl = (n + 1) / 2;
    double l = pairwise(j, first, nl, r);
    double rt = pairwise(j, first + nl, n - nl, r);
    double s = add_round(&j->acc, l, rt, j->n + (*r)++);
    if (fabs(l) >= fabs(rt))
        count(j, &j->a->acc, l, rt, s);
    else
        count(j, &j->a->acc, rt, l, s);
    return s;
}

static double dot_pairwise(const dot_job *j)
{
    if (j->n == 0)
        return j->has_init ? j->init : 0.0;
    uint64_t r = 0;
    if (j->has_init)
        return pairwise(j, 0, j->n + 1, &r);
    if (j->n == 1) {
        /* One term: it still enters the accumulator, as 0 + t. */
        double t = term(j, 0);
        double s = add_round(&j->acc, 0.0, t, j->n);
        count(j, &j->a->acc, 0.0, t, s);
        return s;
    }
    return pairwise(j, 0, j->n, &r);
}

static double dot_blocked(const dot_job *j)
{
    const unsigned block = j->a->block ? j->a->block : 1;
    double w = j->has_init ? j->init : 0.0;
    uint64_t r = 0;
    for (size_t i0 = 0; i0 < j->n; i0 += block) {
        size_t i1 = j->n - i0 < block ? j->n : i0 + block;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) {
            double t = term(j, i);
            double s_new = add_round(&j->acc, s, t, j->n + r++);
            count(j, &j->a->acc, s, t, s_new);
            s = s_new;
        }
        double w_new = add_round(&j->wide, w, s, j->n + r++);
        count(j, &j->a->wide, w, s, w_new);
        w = w_new;
    }
    return w;
}

static double dot_kahan(const dot_job *j)
{
    double s = j->has_init ? j->init : 0.0, c = 0.0;
    uint64_t r = j->n;
    for (size_t i = 0; i < j->n; i++) {
        double p = term(j, i);
        double y = add_round(&j->acc, p, -c, r++);
        double t = add_round(&j->acc, s, y, r++);
        double d = add_round(&j->acc, t, -s, r++);
        c = add_round(&j->acc, d, -y, r++);
        count(j, &j->a->acc, s, y, t);
        s = t;
    }
    return s;
}

/* Signed 128-bit integers as two's complement word pairs (ISO C has no
 * 128-bit type); the fused unit's exact sums need up to 73 bits. */
typedef struct i128 {
    uint64_t hi, lo;
} i128;

static void i128_add(i128 *a, uint64_t m, bool neg)
{
    if (!neg) {
        a->lo += m;
        a->hi += a->lo < m;
    } else {
        a->hi -= a->lo < m;
        a->lo -= m;
    }
}

/* The exact value N * 2^Q of an i128 N (|N| < 2^80) as a TwoSum pair. */
static void i128_to_pair(i128 a, int Q, double *hi, double *lo)
{
    bool neg = a.hi >> 63;
    if (neg) {
        a.lo = ~a.lo + 1;
        a.hi = ~a.hi + (a.lo == 0);
    }
    uint64_t top = (a.hi << 24) | (a.lo >> 40); /* N >> 40, < 2^40 */
    uint64_t bot = a.lo & (((uint64_t)1 << 40) - 1);
    double h, l;
    emu_two_sum(ldexp((double)top, 40), (double)bot, &h, &l);
    h = ldexp(h, Q);
    l = ldexp(l, Q);
    *hi = neg ? -h : h;
    *lo = neg ? -l : l;
}

static double dot_fused(const dot_job *j)
{
    const unsigned k = j->a->fused_k ? j->a->fused_k : 1;
    const int w = (int)j->a->fused_w;
    double s = j->has_init ? j->init : 0.0;
    uint64_t r = 0;
    double v[4097];
    for (size_t i0 = 0; i0 < j->n; i0 += k) {
        size_t m = j->n - i0 < k ? j->n - i0 : k;
        v[0] = s;
        bool special = !isfinite(s);
        int E = s != 0.0 && !special ? ilogb(s) : INT32_MIN;
        for (size_t i = 0; i < m; i++) {
            double t = term(j, i0 + i);
            v[i + 1] = t;
            if (!isfinite(t))
                special = true;
            else if (t != 0.0 && ilogb(t) > E)
                E = ilogb(t);
        }
        double s_new;
        int Q = E == INT32_MIN ? 0 : E - w + 1;
        if (special) {
            /* inf and NaN: IEEE's sum decides (no finite sum overflows). */
            double x = 0.0;
            for (size_t i = 0; i <= m; i++)
                x += v[i];
            s_new = step_round(&j->acc, x, 0.0, j->n + r++);
        } else if (E == INT32_MIN) {
            s_new = step_round(&j->acc, 0.0, 0.0, j->n + r++);
        } else {
            i128 N = { 0, 0 };
            for (size_t i = 0; i <= m; i++)
                if (v[i] != 0.0)
                    i128_add(&N, (uint64_t)floor(ldexp(fabs(v[i]), -Q)),
                             v[i] < 0.0);
            double hi, lo;
            i128_to_pair(N, Q, &hi, &lo);
            s_new = step_round(&j->acc, hi, lo, j->n + r++);
        }
        if (j->counts) {
            for (size_t i = 1; i <= m; i++) {
                emu_accum_counts *c = j->counts;
                double t = v[i];
                c->adds++;
                if (t == 0.0 || special) {
                    c->lost_bits[0]++;
                } else if (exponent_of(t) < Q) {
                    c->absorbed++;
                    c->lost_bits[EMU_LOST_BINS - 1]++;
                } else if (!isfinite(s_new)) {
                    c->lost_bits[0]++;
                } else {
                    int q = quantum_exp(&j->a->acc, s_new);
                    c->lost_bits[bits_below(t, q > Q ? q : Q)]++;
                }
            }
        }
        s = s_new;
    }
    return s;
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
static void xacc_add(xacc *a, uint64_t m, int pos, bool neg)
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

static void xacc_add_double(xacc *a, double t)
{
    if (t == 0.0)
        return;
    int e;
    double m = frexp(fabs(t), &e); /* |t| = m 2^e */
    uint64_t M = (uint64_t)ldexp(m, 53);
    xacc_add(a, M, e - 53 + XBIAS, t < 0.0);
}

/* RN of the accumulator's value (the accumulator is not changed). */
static double xacc_round(const xacc *acc)
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

static double dot_exact(const dot_job *j, double *lo)
{
    xacc a;
    memset(&a, 0, sizeof a);
    size_t nt = j->n + j->has_init;
    bool nan = false, pinf = false, ninf = false, all_negzero = nt > 0;
    for (size_t l = 0; l < nt; l++) {
        double t = leaf(j, l);
        if (isnan(t))
            nan = true;
        else if (isinf(t))
            *(t > 0.0 ? &pinf : &ninf) = true;
        else
            xacc_add_double(&a, t);
        if (!(t == 0.0 && signbit(t)))
            all_negzero = false;
    }
    if (j->counts) {
        j->counts->adds += j->n;
        j->counts->lost_bits[0] += j->n;
    }
    *lo = 0.0;
    if (nan || (pinf && ninf))
        return NAN;
    if (pinf || ninf)
        return pinf ? INFINITY : -INFINITY;
    double hi = xacc_round(&a);
    if (hi == 0.0)
        return all_negzero ? -0.0 : 0.0;
    xacc_add_double(&a, -hi); /* exact: hi lies on the accumulator's grid */
    *lo = xacc_round(&a);
    return hi;
}

static double dot_fast(const dot_job *j)
{
    float s = j->has_init ? (float)j->init : 0.0f;
    for (size_t i = 0; i < j->n; i++) {
        float x = j->x[(ptrdiff_t)i * j->incx];
        s = j->y ? s + x * j->y[(ptrdiff_t)i * j->incy] : s + x;
    }
    return s;
}

/* emu_accum_dot, optionally starting from an initial value. */
static double dot_init(const emu_accum *a, const float *x, ptrdiff_t incx,
                       const float *y, ptrdiff_t incy, size_t n,
                       const double *init, const emu_accum_rng *rng,
                       emu_accum_counts *counts, double *lo)
{
    dot_job j = { .a = a, .x = x, .y = y, .incx = incx, .incy = incy, .n = n,
                  .has_init = init != NULL, .init = init ? *init : 0.0,
                  .counts = counts };
    word_cache wc[3];
    bool sr = emu_rnd_is_stochastic(a->rnd.mode);
    stepper_init(&j.acc, &a->acc, &a->rnd, rng, n, sr ? &wc[0] : NULL);
    stepper_init(&j.prod, &a->prod, &a->rnd, rng, n, sr ? &wc[1] : NULL);
    stepper_init(&j.wide, &a->wide, &a->rnd, rng, n, sr ? &wc[2] : NULL);
    double lo_local = 0.0;
    if (!lo)
        lo = &lo_local;
    *lo = 0.0;
    switch (a->kind) {
    case EMU_ACCUM_PAIRWISE:
        return dot_pairwise(&j);
    case EMU_ACCUM_BLOCKED:
        return dot_blocked(&j);
    case EMU_ACCUM_FUSED:
        return dot_fused(&j);
    case EMU_ACCUM_KAHAN:
        return dot_kahan(&j);
    case EMU_ACCUM_EXACT:
        return dot_exact(&j, lo);
    case EMU_ACCUM_FAST:
        return dot_fast(&j);
    case EMU_ACCUM_SEQUENTIAL:
    default:
        return dot_sequential(&j);
    }
}

double emu_accum_dot_unguarded(const emu_accum *a, const float *x,
                               ptrdiff_t incx, const float *y, ptrdiff_t incy,
                               size_t n, const emu_accum_rng *rng,
                               emu_accum_counts *counts, double *lo)
{
    return dot_init(a, x, incx, y, incy, n, NULL, rng, counts, lo);
}

double emu_accum_dot(double *lo, emu_accum_counts *counts, const emu_accum *a,
                     const float *x, ptrdiff_t incx, const float *y,
                     ptrdiff_t incy, size_t n, const emu_accum_rng *rng)
{
    EMU_HOSTFP_GUARD;
    return dot_init(a, x, incx, y, incy, n, NULL, rng, counts, lo);
}

/* ---- 3. the GEMM engine ------------------------------------------------- */

typedef struct gemm_job {
    const emu_accum *model;
    size_t M, N, K;
    const float *a, *b;
    ptrdiff_t a_rs, a_cs, b_rs, b_cs;
    const double *c;
    double *hi, *lo;
    uint64_t seed, stream, dot0;
} gemm_job;

struct shared;

typedef struct gemm_worker {
    const gemm_job *job;
    const struct shared *sh;
    size_t r0, r1;                /* rows [r0, r1)                         */
    emu_accum_counts counts;
    bool want_counts;
    int status;
} gemm_worker;

/* Any model, one emu_accum_dot per output. */
static void rows_generic(gemm_worker *w)
{
    const gemm_job *g = w->job;
    for (size_t i = w->r0; i < w->r1; i++)
        for (size_t j = 0; j < g->N; j++) {
            size_t o = i * g->N + j;
            emu_accum_rng rng = { g->seed, g->stream, g->dot0 + o };
            double lo;
            g->hi[o] = dot_init(g->model, g->a + (ptrdiff_t)i * g->a_rs,
                                g->a_cs, g->b + (ptrdiff_t)j * g->b_cs,
                                g->b_rs, g->K, g->c ? g->c + o : NULL, &rng,
                                w->want_counts ? &w->counts : NULL, &lo);
            if (g->lo)
                g->lo[o] = lo;
        }
}

/* ---- the sequential (and blocked) kernel ----------------------------------
 * Columns go in panels of JB: B is packed once into K x JB blocks of
 * doubles (zero-padded), and one row's dot products with a panel run side
 * by side, so that the step below is the same straight-line code on JB
 * independent lanes, which the compiler turns into SIMD instructions.  A
 * lane whose step leaves the fast path's domain (a subnormal or
 * overflowing result, inf, NaN, an RD or fnuz zero) is redone by
 * add_round after the vector step: the same map, so the results are those
 * of dot_sequential / dot_blocked.
 *
 * Swamping counts need the lowest set bit of each product: for an exact
 * product of binary32 values it is the sum of the factors' lowest set
 * bits, tabulated once per row of A and per packed column of B. */
enum { JB = 16 };

#if defined(__GNUC__)
#define EMU_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define EMU_ALWAYS_INLINE inline
#endif

typedef struct seq_ctx {
    const gemm_job *g;
    fast_plan pl;               /* the accumulator's fast rounding          */
    stepper acc, wide;          /* the slow path (deterministic modes)       */
    size_t block;               /* terms per narrow sum (K: sequential)      */
    bool blocked;
    emu_accum_kind kind;
    size_t npanels;
    bool tables;                /* counting with lowest-bit tables            */
    const double *bp;           /* the worker's current panel, [k][j]         */
    const int64_t *lbp;         /* lsb(b) + 1022, same layout (tables)        */
    int p;                      /* acc's precision (counting)                 */
} seq_ctx;

/* Exponent of the lowest set bit of a binary32 value (0 for zero, inf and
 * NaN, whose products the counts never look at). */
static int lowest_bit_f(float x)
{
    return isfinite(x) && x != 0.0f ? lowest_bit(x) : 0;
}

/* Swamping bins of one step of the JB lanes, s -> s_new of t = ak b[j]
 * (emu_accum_count_add's definition, read off the patterns): bin 65 if the
 * addition was absorbed, else the bits of t below 2^(E_new - p + 1), from
 * t's lowest set bit lsb (the factors' lowest bits, tabulated as
 * L = lsb(a) + lsb(b) + 1022) up to t's leading bit.  A zero t has a zero
 * exponent field and lands in bin 0 by the clamp.  Lanes whose s_new is not
 * a normal finite value get bin -1: the caller counts them by the
 * definition itself.  Vectorisable like lanes_step. */
static EMU_ALWAYS_INLINE uint64_t lanes_bins(const double *restrict sv,
                                         const double *restrict nv,
                                         const double *restrict b, double ak,
                                         int64_t la,
                                         const int64_t *restrict lb,
                                         int64_t p, uint64_t mn, uint64_t mx,
                                         int64_t *restrict bins)
{
    uint64_t any = 0;
    for (size_t j = 0; j < JB; j++) {
        uint64_t tb = d2u(ak * b[j]) << 1;        /* |t|, shifted left 1 */
        uint64_t nb = d2u(nv[j]), sb = d2u(sv[j]);
        uint64_t nu = nb & ~SIGN_BIT;
        int64_t et = (int64_t)(tb >> 53);          /* biased exponents */
        int64_t top = (int64_t)(nu >> 52) - p;
        int64_t dm = et - top;
        int64_t m = top + (int64_t)((uint64_t)dm & (0 - ((uint64_t)dm >> 63)));
        int64_t n = m - (la + lb[j]);
        n &= (int64_t)(((uint64_t)n >> 63) - 1);   /* max(n, 0) */
        uint64_t x = nb ^ sb;
        uint64_t ab = (1 ^ ((x | (0 - x)) >> 63)) & ((tb | (0 - tb)) >> 63);
        n += (int64_t)((uint64_t)(EMU_LOST_BINS - 1 - n) & (0 - ab));
        uint64_t odd = ((nu - mn) >> 63) | ((mx - nu) >> 63);
        bins[j] = n | (int64_t)(0 - odd);
        any |= odd;
    }
    return any;
}

/* Counts the additions of one step of a panel, s_old -> s_new of t, into
 * hist (one histogram per lane, so that runs of one bin do not wait on
 * each other's increments; the caller adds them up). */
static EMU_ALWAYS_INLINE void count_step(const seq_ctx *c, const double *s_old,
                                         const double *s_new, double ak,
                                         const double *b, int la,
                                         const int64_t *lb, size_t jn,
                                         uint32_t (*hist)[EMU_LOST_BINS],
                                         emu_accum_counts *cnt)
{
    int64_t bins[JB];
    uint64_t odd = lanes_bins(s_old, s_new, b, ak, la, lb, c->p,
                              d2u(c->pl.min_normal), d2u(c->pl.max), bins);
    if (!odd && jn == JB) {
        /* The common case, unrolled: one increment per lane. */
        for (size_t j = 0; j < JB; j++)
            hist[j][bins[j]]++;
        return;
    }
    for (size_t j = 0; j < jn; j++) {
        int64_t bin = bins[j];
        if (bin >= 0) {
            hist[j][bin]++;
        } else {
            /* counted here in full; the caller's adds cover all lanes */
            emu_accum_count_add_unguarded(cnt, &c->g->model->acc, s_old[j],
                                          ak * b[j], s_new[j]);
            cnt->adds--;
        }
    }
}

/* Adds the interleaved histograms to cnt and clears them. */
static void flush_hist(uint32_t (*hist)[EMU_LOST_BINS], emu_accum_counts *cnt)
{
    for (int h = 0; h < JB; h++)
        for (int bin = 0; bin < EMU_LOST_BINS; bin++) {
            cnt->lost_bits[bin] += hist[h][bin];
            if (bin == EMU_LOST_BINS - 1)
                cnt->absorbed += hist[h][bin];
            hist[h][bin] = 0;
        }
}

/* One step of the JB lanes: ns[j] = round(sv[j] + ak b[j]) where the fast
 * path holds; returns non-zero if some lane needs redoing exactly.
 *
 * Nearest modes can skip the TwoSum (pairs false): h = RN53(s + t) rounded
 * to nearest at p bits equals the exact sum rounded once unless h lies
 * exactly on a midpoint of the p-bit grid (rounding to nearest cannot
 * carry a value across a midpoint, which is itself a 53-bit number,
 * without landing on it); those lanes, like every lane outside the normal
 * range, are redone exactly.  When exact ties are common (a binary32
 * accumulator fed narrow products) that costs more than it saves, and the
 * caller switches to the exact pair, rounded to odd at 53 bits (see
 * odd53), which the other modes always use.  Both give the same results.
 *
 * The lane loop is branch-free on purpose, with its tests written as
 * integer arithmetic on patterns below 2^63 (x < y as the sign bit of
 * x - y, x != 0 as the sign bit of x | -x), so that baseline SSE2 runs the
 * lanes in pairs (and the AVX clones of seq_rows in fours and eights). */
static EMU_ALWAYS_INLINE uint64_t lanes_step(emu_rnd mode, bool pairs,
                                             const double *restrict sv,
                                             const double *restrict b,
                                             double ak, double *restrict ns,
                                             uint64_t *restrict bad, int d,
                                             uint64_t mask, uint64_t half,
                                             uint64_t mn, uint64_t mx,
                                             uint64_t zs)
{
    const bool nearest = (mode == EMU_RNE || mode == EMU_RNA) && !pairs;
    uint64_t any = 0;
    for (size_t j = 0; j < JB; j++) {
        double sj = sv[j];
        double tj = ak * b[j];
        double h = sj + tj;
        uint64_t hb = d2u(h);
        uint64_t sg = hb & SIGN_BIT;
        uint64_t u = hb ^ sg;
        uint64_t neg = sg >> 63, r, mid = 0;
        if (!nearest) {
            double bv = h - sj, av = h - bv;
            double l = (sj - av) + (tj - bv);
            uint64_t lbits = d2u(l);
            uint64_t l2 = lbits << 1;
            uint64_t lnz = 0 - ((l2 | (0 - l2)) >> 63);   /* l != 0 */
            uint64_t ro = (u - ((hb ^ lbits) >> 63)) | 1;  /* odd53 */
            u = (ro & lnz) | (u & ~lnz);
        }
        switch (mode) {
        case EMU_RNE:
            r = (u + (half - 1) + ((u >> d) & 1)) & ~mask;
            break;
        case EMU_RNA:
            r = (u + half) & ~mask;
            break;
        case EMU_RU:
            r = (u + (mask & (neg - 1))) & ~mask;
            break;
        case EMU_RD:
            r = (u + (mask & (0 - neg))) & ~mask;
            break;
        case EMU_RO: {
            uint64_t f = u & mask;
            r = (u - f) | (((f + mask) >> d) << d);
            break;
        }
        default:
            r = u & ~mask;
            break;
        }
        if (nearest) {
            uint64_t m = (u & mask) ^ half;
            mid = 1 ^ ((m | (0 - m)) >> 63);
        }
        uint64_t unz = (u | (0 - u)) >> 63;
        /* 0 < |x| < 2^emin (or a zero that must go slow) */
        uint64_t tiny = ((u - mn) >> 63) & (unz | zs);
        /* r > max, which also catches inf and NaN: their r is above
         * max's pattern or wraps past 2^63 by less than max's. */
        uint64_t over = (mx - r) >> 63;
        uint64_t out = tiny | over | mid;
        bad[j] = out;
        any |= out;
        ns[j] = u2d(r | sg);
    }
    return any;
}

/* Redoes ns[j] = round(sv[j] + ak b[j]) exactly for the flagged lanes
 * j < jn: fast_round on the exact pair, the choke point where that
 * declines. */
static void redo_lanes(const seq_ctx *c, const double *sv, const double *b,
                       double ak, double *ns, const uint64_t *bad, size_t jn)
{
    for (size_t j = 0; j < jn; j++) {
        if (!bad[j])
            continue;
        double t = ak * b[j], hi, lo, v;
        emu_two_sum(sv[j], t, &hi, &lo);
        if (!c->pl.ok || !isfinite(hi) || hi == 0.0 ||
            !fast_round(&c->pl, hi, lo, &v))
            v = add_round(&c->acc, sv[j], t, 0);
        ns[j] = v;
    }
}

/* out[j] = round(x[j] + y[j]) for the JB lanes, every lane exact. */
static EMU_ALWAYS_INLINE void lanes_add(const seq_ctx *c, emu_rnd mode,
                                        const double *x, const double *y,
                                        double *out, size_t jn)
{
    const uint64_t zs = c->pl.zero_slow || mode == EMU_RD;
    uint64_t bad[JB];
    if (lanes_step(mode, true, x, y, 1.0, out, bad, c->pl.d, c->pl.mask,
                   c->pl.half, d2u(c->pl.min_normal), d2u(c->pl.max), zs))
        redo_lanes(c, x, y, 1.0, out, bad, jn);
}

/* k in [k0, k1) of one row against one panel: s[j] = round(s[j] + a_k b_kj).
 * Returns the number of steps in which some lane was redone. */
static EMU_ALWAYS_INLINE size_t seq_steps(const seq_ctx *c, emu_rnd mode,
                                        const double *arow, const int *la,
                                        const double *bp, const int64_t *lb,
                                        size_t k0, size_t k1, size_t jn,
                                        double *s, emu_accum_counts *cnt,
                                        uint32_t (*hist)[EMU_LOST_BINS],
                                        bool pairs)
{
    size_t redone = 0;
    const int d = c->pl.d;
    const uint64_t mask = c->pl.mask, half = c->pl.half;
    const uint64_t mn = d2u(c->pl.min_normal), mx = d2u(c->pl.max);
    /* Zero results that must go to the choke point: fnuz's (no -0) and
     * RD's (an exact zero sum is -0 there). */
    const uint64_t zs = c->pl.zero_slow || mode == EMU_RD;
    double buf[2][JB];
    double *cur = buf[0], *nxt = buf[1];
    memcpy(cur, s, sizeof buf[0]);
    for (size_t k = k0; k < k1; k++) {
        const double ak = arow[k];
        const double *b = bp + k * JB;
        uint64_t bad[JB];
        uint64_t any = lanes_step(mode, pairs, cur, b, ak, nxt, bad, d, mask,
                                  half, mn, mx, zs);
        redone += any != 0;
        if (any)
            redo_lanes(c, cur, b, ak, nxt, bad, jn);
        if (cnt)
            count_step(c, cur, nxt, ak, b, la[k], lb + k * JB, jn, hist, cnt);
        double *tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    memcpy(s, cur, sizeof buf[0]);
    if (cnt)
        cnt->adds += (k1 - k0) * jn;
    return redone;
}

/* Which variant of the nearest modes a worker runs (see lanes_step): the
 * shortcut until it redoes more than 1/16 of its steps, then exact pairs
 * for 32 row-panels before trying again. */
typedef struct seq_state {
    bool pairs;
    unsigned countdown;
} seq_state;

static EMU_ALWAYS_INLINE void seq_run(const seq_ctx *c, emu_rnd mode,
                                      seq_state *st, const double *arow,
                                      const int *la, const double *bp,
                                      const int64_t *lb, size_t k0, size_t k1,
                                      size_t jn, double *s,
                                      emu_accum_counts *cnt,
                                      uint32_t (*hist)[EMU_LOST_BINS])
{
    if ((mode == EMU_RNE || mode == EMU_RNA) && !st->pairs) {
        size_t redone = seq_steps(c, mode, arow, la, bp, lb, k0, k1, jn, s,
                                  cnt, hist, false);
        if (redone * 16 > k1 - k0) {
            st->pairs = true;
            st->countdown = 32;
        }
    } else {
        seq_steps(c, mode, arow, la, bp, lb, k0, k1, jn, s, cnt, hist, true);
        if (st->pairs && --st->countdown == 0)
            st->pairs = false;
    }
}

/* One row against one panel, the whole model (sequential or blocked). */
static EMU_ALWAYS_INLINE void seq_row_panel(const seq_ctx *c, emu_rnd mode,
                                            seq_state *st, size_t i, size_t q,
                                            const double *arow, const int *la,
                                            emu_accum_counts *cnt)
{
    const gemm_job *g = c->g;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const double *bp = c->bp;
    const int64_t *lb = c->lbp;
    double s[JB], w[JB];
    /* Partial swamping histograms, one per lane: at most K < 2^32 per bin. */
    uint32_t hist[JB][EMU_LOST_BINS];
    if (cnt)
        memset(hist, 0, sizeof hist);
    for (size_t j = 0; j < JB; j++) {
        double init = g->c && j < jn ? g->c[i * g->N + j0 + j] : 0.0;
        s[j] = c->blocked ? 0.0 : init;
        w[j] = init;
    }
    if (!c->blocked) {
        seq_run(c, mode, st, arow, la, bp, lb, 0, K, jn, s, cnt, hist);
    } else {
        for (size_t k0 = 0; k0 < K; k0 += c->block) {
            size_t k1 = K - k0 < c->block ? K : k0 + c->block;
            seq_run(c, mode, st, arow, la, bp, lb, k0, k1, jn, s, cnt, hist);
            for (size_t j = 0; j < jn; j++) {
                double w_new = add_round(&c->wide, w[j], s[j], 0);
                if (cnt)
                    emu_accum_count_add_unguarded(cnt, &g->model->wide, w[j],
                                                  s[j], w_new);
                w[j] = w_new;
                s[j] = 0.0;
            }
        }
        for (size_t j = 0; j < JB; j++)
            s[j] = w[j];
    }
    for (size_t j = 0; j < jn; j++)
        g->hi[i * g->N + j0 + j] = s[j];
    if (cnt)
        flush_hist(hist, cnt);
}

/* Kahan's summation on the lanes, step by step as dot_kahan does it:
 * y = p - c; t = s + y; c = (t - s) - y; s = t, every operation rounded. */
static EMU_ALWAYS_INLINE void kahan_row_panel(const seq_ctx *c, emu_rnd mode,
                                              size_t i, size_t q,
                                              const double *arow,
                                              emu_accum_counts *cnt)
{
    const gemm_job *g = c->g;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const double *bp = c->bp;
    double s[JB], cc[JB], p[JB], y[JB], t[JB], d[JB], neg[JB];
    for (size_t j = 0; j < JB; j++) {
        s[j] = g->c && j < jn ? g->c[i * g->N + j0 + j] : 0.0;
        cc[j] = 0.0;
    }
    for (size_t k = 0; k < K; k++) {
        const double ak = arow[k], *b = bp + k * JB;
        for (size_t j = 0; j < JB; j++) {
            p[j] = ak * b[j];
            neg[j] = -cc[j];
        }
        lanes_add(c, mode, p, neg, y, jn);
        lanes_add(c, mode, s, y, t, jn);
        for (size_t j = 0; j < JB; j++)
            neg[j] = -s[j];
        lanes_add(c, mode, t, neg, d, jn);
        for (size_t j = 0; j < JB; j++)
            neg[j] = -y[j];
        lanes_add(c, mode, d, neg, cc, jn);
        if (cnt)
            for (size_t j = 0; j < jn; j++)
                emu_accum_count_add_unguarded(cnt, &g->model->acc, s[j], y[j],
                                              t[j]);
        memcpy(s, t, sizeof s);
    }
    for (size_t j = 0; j < jn; j++)
        g->hi[i * g->N + j0 + j] = s[j];
}

/* The pairwise tree of dot_pairwise on the lanes, walked without
 * recursion (the kernel is inlined for a constant mode): frames of
 * (first leaf, leaves, stage), partial sums on a stack of lane vectors.
 * Each node is one rounded addition; the node order is irrelevant to
 * deterministic modes, the tree's shape is everything. */
static EMU_ALWAYS_INLINE void pw_row_panel(const seq_ctx *c, emu_rnd mode,
                                           size_t i, size_t q,
                                           const double *arow,
                                           emu_accum_counts *cnt)
{
    const gemm_job *g = c->g;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const double *bp = c->bp;
    const bool init = g->c != NULL;
    double iv[JB];
    for (size_t j = 0; j < JB; j++)
        iv[j] = init && j < jn ? g->c[i * g->N + j0 + j] : 0.0;
    double res[JB];
    if (K == 0) {
        memcpy(res, iv, sizeof res);
    } else if (K == 1 && !init) {
        /* One term: it still enters the accumulator, as 0 + t. */
        double zero[JB] = { 0.0 }, t[JB];
        for (size_t j = 0; j < JB; j++)
            t[j] = arow[0] * bp[j];
        lanes_add(c, mode, zero, t, res, jn);
        if (cnt)
            for (size_t j = 0; j < jn; j++)
                emu_accum_count_add_unguarded(cnt, &g->model->acc, 0.0, t[j],
                                              res[j]);
    } else {
        enum { DEPTH = 130 };
        struct frame {
            size_t first, n;
            int stage;
        } f[DEPTH];
        double v[DEPTH][JB];
        int nf = 0, nv = 0;
        f[nf++] = (struct frame){ 0, K + init, 0 };
        while (nf) {
            struct frame *fr = &f[nf - 1];
            if (fr->n == 1) {
                size_t l = fr->first;
                if (init && l == 0) {
                    memcpy(v[nv], iv, sizeof iv);
                } else {
                    size_t k = l - init;
                    for (size_t j = 0; j < JB; j++)
                        v[nv][j] = arow[k] * bp[k * JB + j];
                }
                nv++;
                nf--;
            } else if (fr->stage == 0) {
                fr->stage = 1;
                f[nf++] = (struct frame){ fr->first, (fr->n + 1) / 2, 0 };
            } else if (fr->stage == 1) {
                fr->stage = 2;
                size_t nl = (fr->n + 1) / 2;
                f[nf++] = (struct frame){ fr->first + nl, fr->n - nl, 0 };
            } else {
                double sum[JB];
                const double *l = v[nv - 2], *r = v[nv - 1];
                lanes_add(c, mode, l, r, sum, jn);
                if (cnt)
                    for (size_t j = 0; j < jn; j++) {
                        bool lbig = fabs(l[j]) >= fabs(r[j]);
                        emu_accum_count_add_unguarded(cnt, &g->model->acc,
                                                      lbig ? l[j] : r[j],
                                                      lbig ? r[j] : l[j],
                                                      sum[j]);
                    }
                nv -= 2;
                memcpy(v[nv++], sum, sizeof sum);
                nf--;
            }
        }
        memcpy(res, v[0], sizeof res);
    }
    for (size_t j = 0; j < jn; j++)
        g->hi[i * g->N + j0 + j] = res[j];
}

static EMU_ALWAYS_INLINE void row_panel(const seq_ctx *c, emu_rnd mode,
                                        seq_state *st, size_t i, size_t q,
                                        const double *arow, const int *la,
                                        emu_accum_counts *cnt)
{
    if (c->kind == EMU_ACCUM_KAHAN)
        kahan_row_panel(c, mode, i, q, arow, cnt);
    else if (c->kind == EMU_ACCUM_PAIRWISE)
        pw_row_panel(c, mode, i, q, arow, cnt);
    else
        seq_row_panel(c, mode, st, i, q, arow, la, cnt);
}

/* The mode is a constant inside each instance of the kernel.  On x86-64
 * Linux the kernels are also compiled for AVX2 and AVX-512 and picked at
 * load time by the CPU (GCC/Clang function multiversioning): the same
 * source and the same IEEE operations, so the same results, in 4 or 8
 * lanes per instruction instead of SSE2's 2; no -march flag is needed.
 * -DEMU_NO_TARGET_CLONES builds the baseline only. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(EMU_NO_TARGET_CLONES)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void seq_rows(const seq_ctx *c, size_t q, size_t r0, size_t r1,
                     double *arow, int *la, emu_accum_counts *cnt)
{
    const gemm_job *g = c->g;
    seq_state st = { false, 0 };
    for (size_t i = r0; i < r1; i++) {
        for (size_t k = 0; k < g->K; k++) {
            float x = g->a[(ptrdiff_t)i * g->a_rs + (ptrdiff_t)k * g->a_cs];
            arow[k] = x;
            if (c->tables)
                la[k] = lowest_bit_f(x);
        }
        switch (c->pl.mode) {
        case EMU_RNE:
            row_panel(c, EMU_RNE, &st, i, q, arow, la, cnt);
            break;
        case EMU_RNA:
            row_panel(c, EMU_RNA, &st, i, q, arow, la, cnt);
            break;
        case EMU_RU:
            row_panel(c, EMU_RU, &st, i, q, arow, la, cnt);
            break;
        case EMU_RD:
            row_panel(c, EMU_RD, &st, i, q, arow, la, cnt);
            break;
        case EMU_RO:
            row_panel(c, EMU_RO, &st, i, q, arow, la, cnt);
            break;
        default:
            row_panel(c, EMU_RZ, &st, i, q, arow, la, cnt);
            break;
        }
    }
}

/* Whether the kernels cover a model: sequential, blocked, Kahan or
 * pairwise, exact products, a deterministic mode the fast rounding
 * handles. */
static bool seq_kernel_applies(const emu_accum *m)
{
    if ((m->kind != EMU_ACCUM_SEQUENTIAL && m->kind != EMU_ACCUM_BLOCKED &&
         m->kind != EMU_ACCUM_KAHAN && m->kind != EMU_ACCUM_PAIRWISE) ||
        m->round_products)
        return false;
    fast_plan pl;
    plan_init(&pl, &m->acc, &m->rnd);
    return pl.ok && !pl.sr;
}

typedef struct shared {
    seq_ctx seq;                /* when the kernel applies                  */
    bool use_seq;
} shared;

static int worker_main(void *arg)
{
    EMU_HOSTFP_GUARD; /* a new thread's state is the platform's choice */
    gemm_worker *w = arg;
    const shared *sh = w->sh;
    if (!sh->use_seq) {
        rows_generic(w);
        return 0;
    }
    /* Panel by panel: B's JB columns packed as doubles (zero-padded), so
     * that a worker holds K * JB of them, not all of B; each row of A is
     * reread per panel (a 1/JB overhead on the loads). */
    const gemm_job *g = w->job;
    const size_t K = g->K, K1 = K ? K : 1;
    seq_ctx c = sh->seq;
    double *arow = malloc(K1 * sizeof *arow);
    int *la = malloc(K1 * sizeof *la);
    double *bp = malloc(K1 * JB * sizeof *bp);
    int64_t *lbp = c.tables ? malloc(K1 * JB * sizeof *lbp) : NULL;
    if (!arow || !la || !bp || (c.tables && !lbp)) {
        free(arow);
        free(la);
        free(bp);
        free(lbp);
        w->status = -1;
        return 0;
    }
    c.bp = bp;
    c.lbp = lbp;
    for (size_t q = 0; q < c.npanels; q++) {
        for (size_t k = 0; k < K; k++)
            for (size_t j = 0; j < JB; j++) {
                size_t col = q * JB + j;
                float x = col < g->N ? g->b[(ptrdiff_t)k * g->b_rs +
                                            (ptrdiff_t)col * g->b_cs]
                                     : 0.0f;
                bp[k * JB + j] = x;
                if (lbp)
                    lbp[k * JB + j] = lowest_bit_f(x) + 1022;
            }
        seq_rows(&c, q, w->r0, w->r1, arow, la,
                 w->want_counts ? &w->counts : NULL);
    }
    free(arow);
    free(la);
    free(bp);
    free(lbp);
    return 0;
}

/* ---- the fast model --------------------------------------------------------
 * Binary32 host arithmetic on the (already rounded) inputs.  With a BLAS,
 * one sgemm call (beta = 1 over the initial values when there are some):
 * its summation order is the library's, and does not depend on our thread
 * count.  Without one, dot_fast's loop run across a panel of columns,
 * which keeps each column's order and so equals dot_fast exactly. */
#ifdef EMU_HAVE_CBLAS
/* An R x C operand with strides (rs, cs) as sgemm takes it: a unit column
 * stride as is, a unit row stride as the transpose, anything else packed
 * row-major into *packed (NULL returned if that allocation fails). */
static const float *sgemm_operand(const float *p, ptrdiff_t rs, ptrdiff_t cs,
                                  size_t R, size_t C,
                                  enum CBLAS_TRANSPOSE *t, blasint *ld,
                                  float **packed)
{
    *packed = NULL;
    *t = CblasNoTrans;
    if (cs == 1 && rs >= (ptrdiff_t)C) {
        *ld = (blasint)rs;
        return p;
    }
    if (rs == 1 && cs >= (ptrdiff_t)R) {
        *t = CblasTrans;
        *ld = (blasint)cs;
        return p;
    }
    *ld = (blasint)C;
    float *q = *packed = malloc(R * C * sizeof *q);
    if (q)
        for (size_t i = 0; i < R; i++)
            for (size_t j = 0; j < C; j++)
                q[i * C + j] = p[(ptrdiff_t)i * rs + (ptrdiff_t)j * cs];
    return q;
}
#endif

static int gemm_fast(const gemm_job *g)
{
    const size_t M = g->M, N = g->N, K = g->K;
    if (K == 0) {
        for (size_t o = 0; o < M * N; o++)
            g->hi[o] = g->c ? (double)(float)g->c[o] : 0.0;
        return 0;
    }
#ifdef EMU_HAVE_CBLAS
    float *ap = NULL, *bp = NULL, *cp = malloc(M * N * sizeof *cp);
    enum CBLAS_TRANSPOSE ta, tb;
    blasint lda, ldb;
    const float *A = sgemm_operand(g->a, g->a_rs, g->a_cs, M, K, &ta, &lda, &ap);
    const float *B = sgemm_operand(g->b, g->b_rs, g->b_cs, K, N, &tb, &ldb, &bp);
    if (!cp || !A || !B) {
        free(ap);
        free(bp);
        free(cp);
        return -1;
    }
    if (g->c)
        for (size_t o = 0; o < M * N; o++)
            cp[o] = (float)g->c[o];
    /* OpenBLAS's kernels (and so its summation order) change with its
     * thread count: pinned to one thread, a run's results do not depend
     * on the machine it runs on. */
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)M, (blasint)N, (blasint)K,
                1.0f, A, lda, B, ldb, g->c ? 1.0f : 0.0f, cp, (blasint)N);
    for (size_t o = 0; o < M * N; o++)
        g->hi[o] = cp[o];
    free(ap);
    free(bp);
    free(cp);
    return 0;
#else
    float *bp = malloc(JB * K * sizeof *bp);
    if (!bp)
        return -1;
    for (size_t j0 = 0; j0 < N; j0 += JB) {
        size_t jn = N - j0 < JB ? N - j0 : JB;
        for (size_t k = 0; k < K; k++)
            for (size_t j = 0; j < JB; j++)
                bp[k * JB + j] = j < jn ? g->b[(ptrdiff_t)k * g->b_rs +
                                               (ptrdiff_t)(j0 + j) * g->b_cs]
                                        : 0.0f;
        for (size_t i = 0; i < M; i++) {
            float acc[JB];
            for (size_t j = 0; j < JB; j++)
                acc[j] = g->c && j < jn ? (float)g->c[i * N + j0 + j] : 0.0f;
            for (size_t k = 0; k < K; k++) {
                float x = g->a[(ptrdiff_t)i * g->a_rs + (ptrdiff_t)k * g->a_cs];
                for (size_t j = 0; j < JB; j++)
                    acc[j] = acc[j] + x * bp[k * JB + j];
            }
            for (size_t j = 0; j < jn; j++)
                g->hi[i * N + j0 + j] = acc[j];
        }
    }
    free(bp);
    return 0;
#endif
}

static void counts_merge(emu_accum_counts *into, const emu_accum_counts *from)
{
    into->adds += from->adds;
    into->absorbed += from->absorbed;
    for (int i = 0; i < EMU_LOST_BINS; i++)
        into->lost_bits[i] += from->lost_bits[i];
}

int emu_gemm_accum_ex(const emu_accum *model, size_t M, size_t N, size_t K,
                      const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                      const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                      const double *c, double *hi, double *lo, uint64_t seed,
                      uint64_t stream, uint64_t dot0,
                      emu_accum_counts *counts, int threads)
{
    gemm_job g = { model, M, N, K, a, b, a_rs, a_cs, b_rs, b_cs, c, hi, lo,
                   seed, stream, dot0 };
    if (M == 0 || N == 0)
        return 0;
    if (lo && model->kind != EMU_ACCUM_EXACT)
        memset(lo, 0, M * N * sizeof *lo); /* all bits zero: +0.0 */
    if (model->kind == EMU_ACCUM_FAST)
        return gemm_fast(&g);
    size_t T = threads < 1 ? 1 : (size_t)threads;
    if (T > M)
        T = M;
    enum { MAX_THREADS = 64 };
    if (T > MAX_THREADS)
        T = MAX_THREADS;
    shared sh;
    memset(&sh, 0, sizeof sh);
    if (seq_kernel_applies(model)) {
        seq_ctx *sc = &sh.seq;
        sc->g = &g;
        plan_init(&sc->pl, &model->acc, &model->rnd);
        stepper_init(&sc->acc, &model->acc, &model->rnd, NULL, 0, NULL);
        stepper_init(&sc->wide, &model->wide, &model->rnd, NULL, 0, NULL);
        sc->blocked = model->kind == EMU_ACCUM_BLOCKED;
        sc->kind = model->kind;
        sc->block = sc->blocked ? (model->block ? model->block : 1) : K;
        sc->npanels = (N + JB - 1) / JB;
        sc->p = model->acc.p;
        /* The lowest-bit tables serve the sequential kernel's counts. */
        sc->tables = counts && (model->kind == EMU_ACCUM_SEQUENTIAL ||
                                model->kind == EMU_ACCUM_BLOCKED);
        if (K > SIZE_MAX / (JB * sizeof(double)))
            return -1;
        sh.use_seq = true;
    }
    gemm_worker w[MAX_THREADS];
    thrd_t tid[MAX_THREADS];
    bool started[MAX_THREADS];
    for (size_t t = 0; t < T; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].job = &g;
        w[t].sh = &sh;
        w[t].r0 = M * t / T;
        w[t].r1 = M * (t + 1) / T;
        w[t].want_counts = counts != NULL;
    }
    /* Worker 0 runs in the calling thread; a worker whose thread cannot
     * start runs there too, afterwards (same rows, same results). */
    for (size_t t = 1; t < T; t++)
        started[t] = thrd_create(&tid[t], worker_main, &w[t]) == thrd_success;
    worker_main(&w[0]);
    int status = w[0].status;
    for (size_t t = 1; t < T; t++) {
        if (started[t])
            thrd_join(tid[t], NULL);
        else
            worker_main(&w[t]);
        if (w[t].status)
            status = w[t].status;
    }
    if (counts)
        for (size_t t = 0; t < T; t++)
            counts_merge(counts, &w[t].counts);
    return status;
}

int emu_gemm_accum(const emu_accum *model, size_t M, size_t N, size_t K,
                   const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                   const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                   double *hi, double *lo, uint64_t seed, uint64_t stream,
                   emu_accum_counts *counts, int threads)
{
    return emu_gemm_accum_ex(model, M, N, K, a, a_rs, a_cs, b, b_rs, b_cs,
                             NULL, hi, lo, seed, stream, 0, counts, threads);
}

/* For units with an accumulator input C (emu/dpi.h). */
double emu_accum_dot_init(double *lo, emu_accum_counts *counts,
                          const emu_accum *a, double init, const float *x,
                          ptrdiff_t incx, const float *y, ptrdiff_t incy,
                          size_t n, const emu_accum_rng *rng)
{
    EMU_HOSTFP_GUARD;
    return dot_init(a, x, incx, y, incy, n, &init, rng, counts, lo);
}
