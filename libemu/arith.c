/*
 * arith.c — correctly rounded scalar arithmetic in any format.
 *
 * The operands are binary32 values held in doubles.  That is what makes
 * every result recoverable exactly in two doubles:
 *
 *   a * b        exact in one double (24 + 24 bits, exponents far from
 *                binary64's limits);
 *   a + b        TwoSum gives hi + lo exactly;
 *   a * b + c    the exact product, then TwoSum with c;
 *   a / b        q = fl(a/b); the remainder r = a - q*b is a double and
 *                fma(-q, b, a) computes it exactly; a/b = q + r/b;
 *   sqrt(a)      s = fl(sqrt a); r = a - s*s exactly by fma; sqrt a ~ s + r/(2s).
 *
 * For division and square root the second term is rounded once more, but
 * only its sign and zeroness decide a deterministic rounding (q is the
 * double nearest the exact value, and every tie point of a format with
 * p <= 53 is a double, so q lands on a tie point only if the exact value is
 * there or r says which side it is on).  For stochastic rounding the
 * probability is then exact to within 2^-64, one step of the random word.
 *
 * Each operation handles IEEE 754's special cases, then hands hi + lo to
 * emu_round2(): the result is rounded once, in one place.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/arith.h"

#include <math.h>
#include <stdint.h>

#include "internal.h"

bool emu_arith_supported(const emu_format *fmt)
{
    return fmt->fits_carrier;
}

static emu_status *status_or(emu_status *st, emu_status *local)
{
    return st ? st : local;
}

static const emu_rounding *rounding_or_default(const emu_rounding *r)
{
    static const emu_rounding rne;
    return r ? r : &rne;
}

/* The random word a stochastic rounding takes: r->rng's next, unless
 * emu_bits_op_word gave one for this call (per thread, so concurrent
 * callers do not see each other's word). */
static _Thread_local const uint64_t *given_word;

void emu_arith_given_word(const uint64_t *word)
{
    given_word = word;
}

static double round2(const emu_format *f, double hi, double lo,
                     const emu_rounding *r, emu_status *st)
{
    if (given_word && emu_rnd_is_stochastic(r->mode))
        return emu_round2_word_unguarded(f, hi, lo, r, *given_word, st);
    return emu_round2_unguarded(f, hi, lo, r, st);
}

static double round1(const emu_format *f, double x, const emu_rounding *r,
                     emu_status *st)
{
    return round2(f, x, 0.0, r, st);
}

/* A NaN result that the operands made invalid (inf - inf, 0 * inf, ...):
 * a new NaN, the profile's default. */
static double invalid(const emu_format *f, const emu_rounding *r,
                      emu_status *st)
{
    st->ternary = 0;
    st->flags = EMU_FLAG_INVALID;
    return emu_nan_result(f, &r->profile, 0.0);
}

/* The NaN operand a NaN result propagates: the first in argument order,
 * as x86's SSE does (the profile decides whether its sign and payload
 * survive, emu_nan_result). */
static double first_nan(double a, double b, double c)
{
    return isnan(a) ? a : isnan(b) ? b : c;
}

/* The zero that an exact zero sum of x and y gets (IEEE 754 6.3): the
 * common sign if both are zeros of one sign, else +0, or -0 toward -inf. */
static double zero_sum(double x, double y, const emu_rounding *r)
{
    if (x == 0.0 && y == 0.0 && signbit(x) == signbit(y))
        return x;
    return r->mode == EMU_RD ? -0.0 : 0.0;
}

/* Rounds the exact sum of x and y, both finite (and each exact). */
static double round_sum(const emu_format *f, double x, double y,
                        const emu_rounding *r, emu_status *st)
{
    double hi, lo;
    emu_two_sum(x, y, &hi, &lo);
    if (hi == 0.0 && lo == 0.0)
        hi = zero_sum(x, y, r);
    return round2(f, hi, lo, r, st);
}

double emu_add(const emu_format *f, double a, double b, const emu_rounding *r,
               emu_status *st)
{
    EMU_HOSTFP_GUARD;
    emu_status local;
    st = status_or(st, &local);
    r = rounding_or_default(r);
    if (isnan(a) || isnan(b))
        return round1(f, first_nan(a, b, NAN), r, st);
    if (isinf(a) || isinf(b)) {
        if (isinf(a) && isinf(b) && signbit(a) != signbit(b))
            return invalid(f, r, st);
        return round1(f, isinf(a) ? a : b, r, st);
    }
    return round_sum(f, a, b, r, st);
}

double emu_sub(const emu_format *f, double a, double b, const emu_rounding *r,
               emu_status *st)
{
    EMU_HOSTFP_GUARD;
    /* A NaN subtrahend propagates as it is: negation is for numbers. */
    return emu_add(f, a, isnan(b) ? b : -b, r, st);
}

double emu_mul(const emu_format *f, double a, double b, const emu_rounding *r,
               emu_status *st)
{
    EMU_HOSTFP_GUARD;
    emu_status local;
    st = status_or(st, &local);
    r = rounding_or_default(r);
    if (isnan(a) || isnan(b))
        return round1(f, first_nan(a, b, NAN), r, st);
    if ((isinf(a) && b == 0.0) || (a == 0.0 && isinf(b)))
        return invalid(f, r, st);
    /* exact, zeros and infinities too */
    return round1(f, a * b, r, st);
}

double emu_div(const emu_format *f, double a, double b, const emu_rounding *r,
               emu_status *st)
{
    EMU_HOSTFP_GUARD;
    emu_status local;
    st = status_or(st, &local);
    r = rounding_or_default(r);
    if (isnan(a) || isnan(b))
        return round1(f, first_nan(a, b, NAN), r, st);
    if ((a == 0.0 && b == 0.0) || (isinf(a) && isinf(b)))
        return invalid(f, r, st);
    if (b == 0.0 && isfinite(a)) {
        /* Division by zero proper: an exact infinity from a finite
         * dividend (inf / 0 is just inf, with no flag). */
        double v = round1(
            f, signbit(a) != signbit(b) ? -INFINITY : INFINITY, r, st);
        st->flags |= EMU_FLAG_INFINITE;
        return v;
    }
    if (isinf(a) || isinf(b) || a == 0.0)
        /* exact: inf or a signed zero */
        return round1(f, a / b, r, st);
    double q = a / b;
    double rem = fma(-q, b, a); /* exact */
    return round2(f, q, rem / b, r, st);
}

double emu_sqrt(const emu_format *f, double a, const emu_rounding *r,
                emu_status *st)
{
    EMU_HOSTFP_GUARD;
    emu_status local;
    st = status_or(st, &local);
    r = rounding_or_default(r);
    if (isnan(a))
        return round1(f, a, r, st);
    if (a < 0.0)
        return invalid(f, r, st);
    if (a == 0.0 || isinf(a))
        return round1(f, a, r, st); /* sqrt(-0) = -0 */
    double s = sqrt(a);
    double rem = fma(-s, s, a); /* exact */
    return round2(f, s, rem / (2.0 * s), r, st);
}

double emu_fma(const emu_format *f, double a, double b, double c,
               const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    emu_status local;
    st = status_or(st, &local);
    r = rounding_or_default(r);
    /* 0 * inf is invalid even beside a quiet NaN addend, as SoftFloat has it. */
    if ((isinf(a) && b == 0.0) || (a == 0.0 && isinf(b)))
        return invalid(f, r, st);
    if (isnan(a) || isnan(b) || isnan(c))
        return round1(f, first_nan(a, b, c), r, st);
    double p = a * b; /* exact (binary32 operands) */
    if (isinf(p) || isinf(c)) {
        if (isinf(p) && isinf(c) && signbit(p) != signbit(c))
            return invalid(f, r, st);
        return round1(f, isinf(p) ? p : c, r, st);
    }
    return round_sum(f, p, c, r, st);
}

double emu_convert(const emu_format *f, double a, const emu_rounding *r,
                   emu_status *st)
{
    EMU_HOSTFP_GUARD;
    return round1(f, a, rounding_or_default(r), st);
}

/* ---- integers ---------------------------------------------------------- */

/* Whether rounding |x| = t + frac (t an integer, 0 < frac < 1) goes away
 * from zero, under r.  `odd` is the parity of t. */
static bool int_round_up(double frac, bool neg, bool odd, const emu_rounding *r)
{
    switch (r->mode) {
    case EMU_RNE:
        return frac > 0.5 || (frac == 0.5 && odd);
    case EMU_RNA:
        return frac >= 0.5;
    case EMU_RZ:
        return false;
    case EMU_RU:
        return !neg;
    case EMU_RD:
        return neg;
    case EMU_RO:
        return !odd;
    default: {
        /* The same comparison as the format rounding: frac * 2^64 is
         * exact, its floor the 64-bit threshold. */
        uint64_t word = r->rng ? emu_rng_next(r->rng) : emu_default_random_word();
        uint64_t fq = (uint64_t)ldexp(frac, 64);
        unsigned bits = r->mode == EMU_RS || r->sr_bits == 0 || r->sr_bits > 64
                      ? 64 : r->sr_bits;
        if (bits == 64)
            return word + fq < word;
        return ((fq >> (64 - bits)) + (word >> (64 - bits))) >> bits != 0;
    }
    }
}

/* Rounds a finite x to an integer-valued double under r; *inexact set. */
static double round_integral(double x, const emu_rounding *r, bool *inexact)
{
    double a = fabs(x);
    double t = floor(a);
    double frac = a - t; /* exact */
    *inexact = frac != 0.0;
    /* t < 2^52 whenever frac != 0, so its parity is an integer's. */
    if (*inexact && int_round_up(frac, signbit(x) != 0, ((uint64_t)t & 1) != 0, r))
        t += 1.0; /* exact: t < 2^53 whenever frac != 0 */
    return signbit(x) ? -t : t;
}

int64_t emu_to_int(double a, int width, const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    emu_status local;
    st = status_or(st, &local);
    r = rounding_or_default(r);
    st->flags = 0;
    st->ternary = 0;
    if (width < 1 || width > 64)
        width = 64;
    const double lim = ldexp(1.0, width - 1); /* range [-lim, lim) */
    const int64_t hi = (int64_t)(((uint64_t)1 << (width - 1)) - 1);
    const int64_t lo = -hi - 1;
    if (isnan(a)) {
        st->flags = EMU_FLAG_INVALID;
        return lo;
    }
    bool inexact;
    double v = isinf(a) ? a : round_integral(a, r, &inexact);
    if (v >= lim || v < -lim) {
        st->flags = EMU_FLAG_INVALID;
        return v > 0.0 ? hi : lo;
    }
    if (inexact) {
        st->flags = EMU_FLAG_INEXACT;
        st->ternary = v > a ? 1 : -1;
    }
    return (int64_t)v;
}

uint64_t emu_to_uint(double a, int width, const emu_rounding *r,
                     emu_status *st)
{
    EMU_HOSTFP_GUARD;
    emu_status local;
    st = status_or(st, &local);
    r = rounding_or_default(r);
    st->flags = 0;
    st->ternary = 0;
    if (width < 1 || width > 64)
        width = 64;
    const double lim = ldexp(1.0, width); /* range [0, lim) */
    const uint64_t hi = width == 64 ? ~0ull : (1ull << width) - 1;
    if (isnan(a)) {
        st->flags = EMU_FLAG_INVALID;
        return hi;
    }
    bool inexact;
    double v = isinf(a) ? a : round_integral(a, r, &inexact);
    if (v >= lim || v < 0.0) {
        st->flags = EMU_FLAG_INVALID;
        return v > 0.0 ? hi : 0;
    }
    if (inexact) {
        st->flags = EMU_FLAG_INEXACT;
        st->ternary = v > a ? 1 : -1;
    }
    return (uint64_t)v; /* -0.0 converts to 0 */
}

/* i = h + l with h a multiple of 2^11 (at most 53 significant bits) and
 * 0 <= l < 2^11: both doubles exactly, and TwoSum makes them one exact pair. */
static double round_u64(const emu_format *f, uint64_t u, bool neg,
                        const emu_rounding *r, emu_status *st)
{
    double h = (double)(u & ~(uint64_t)0x7ff);
    double l = (double)(u & 0x7ff);
    if (neg)
        h = -h, l = -l;
    double hi, lo;
    emu_two_sum(h, l, &hi, &lo);
    return emu_round2_unguarded(f, hi, lo, r, st);
}

double emu_from_int(const emu_format *f, int64_t i, const emu_rounding *r,
                    emu_status *st)
{
    EMU_HOSTFP_GUARD;
    /* |i| as unsigned, without overflowing on INT64_MIN. */
    uint64_t m = i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
    return round_u64(f, m, i < 0, rounding_or_default(r), st);
}

double emu_from_uint(const emu_format *f, uint64_t u, const emu_rounding *r,
                     emu_status *st)
{
    EMU_HOSTFP_GUARD;
    return round_u64(f, u, false, rounding_or_default(r), st);
}

/* ---- comparisons ------------------------------------------------------- */

static void compare_status(emu_status *st, unsigned flags)
{
    if (st) {
        st->ternary = 0;
        st->flags = flags;
    }
}

bool emu_eq(double a, double b, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    compare_status(st, 0);
    return a == b;
}

bool emu_lt(double a, double b, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    compare_status(st, isnan(a) || isnan(b) ? EMU_FLAG_INVALID : 0);
    return a < b;
}

bool emu_le(double a, double b, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    compare_status(st, isnan(a) || isnan(b) ? EMU_FLAG_INVALID : 0);
    return a <= b;
}

bool emu_unordered(double a, double b)
{
    EMU_HOSTFP_GUARD;
    return isnan(a) || isnan(b);
}

double emu_min(double a, double b)
{
    EMU_HOSTFP_GUARD;
    if (isnan(a) || isnan(b))
        return NAN;
    if (a == b)
        return signbit(a) ? a : b; /* -0 < +0 */
    return a < b ? a : b;
}

double emu_max(double a, double b)
{
    EMU_HOSTFP_GUARD;
    if (isnan(a) || isnan(b))
        return NAN;
    if (a == b)
        return signbit(a) ? b : a;
    return a > b ? a : b;
}
