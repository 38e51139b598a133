/*
 * bits.c — the encoding of a format: bit patterns to values and back.
 *
 * A pattern is [sign][exponent field E][fraction F], the sign present only
 * in signed formats.  Values are
 *
 *     E = 0, has_zero:   F * 2^qmin      (zero, or a subnormal; without
 *                                          subnormals F != 0 reads as zero)
 *     otherwise:        (2^mbits + F) * 2^(E - bias - mbits)
 *
 * and the specials policy carves NaN and infinity out of that grid.  All
 * of it fits a double exactly (emu_format_validate refuses formats that do
 * not), so decoding is one ldexp and encoding one frexp.
 *
 * Called by the CLI (value tables, test vectors), the bit-level arithmetic
 * (arith_bits.c) and the tests; nothing here is on a hot path.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/bits.h"

#include "internal.h"

#include <math.h>
#include <string.h>

typedef struct fields {
    unsigned sign;
    uint64_t e;  /* exponent field */
    uint64_t f;  /* fraction field */
} fields;

static uint64_t low_mask(int n)
{
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

static fields split(const emu_format *fmt, emu_bits b)
{
    fields x;
    uint64_t v = b.v & low_mask(fmt->bits);
    x.f = v & low_mask(fmt->mbits);
    x.e = (v >> fmt->mbits) & low_mask(fmt->ebits);
    x.sign = fmt->is_signed ? (unsigned)(v >> (fmt->ebits + fmt->mbits)) & 1 : 0;
    return x;
}

static emu_bits join(const emu_format *fmt, unsigned sign, uint64_t e,
                     uint64_t f)
{
    emu_bits b = { (e << fmt->mbits) | f };
    if (sign)
        b.v |= 1ull << (fmt->ebits + fmt->mbits);
    return b;
}

static uint64_t top_exponent(const emu_format *fmt)
{
    return low_mask(fmt->ebits);
}

static bool is_nan_fields(const emu_format *fmt, fields x)
{
    const uint64_t top = top_exponent(fmt);
    switch (fmt->specials) {
    case EMU_SPECIALS_IEEE:
        return x.e == top && x.f != 0;
    case EMU_SPECIALS_FN:
        return x.e == top && x.f == low_mask(fmt->mbits);
    case EMU_SPECIALS_FNUZ:
        return x.sign && x.e == 0 && x.f == 0;
    default:
        return false;
    }
}

static bool is_inf_fields(const emu_format *fmt, fields x)
{
    return fmt->specials == EMU_SPECIALS_IEEE && x.e == top_exponent(fmt) &&
           x.f == 0;
}

/* A quiet double NaN carrying an IEEE-specials pattern's fraction in its
 * top fraction bits (mbits <= 52 always holds: formats fit a double). */
static double nan_with_fraction(const emu_format *fmt, fields x)
{
    double v = NAN;
    if (fmt->specials != EMU_SPECIALS_IEEE)
        return v;
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    u |= x.f << (52 - fmt->mbits);
    memcpy(&v, &u, sizeof v);
    return v;
}

emu_class emu_classify_bits(const emu_format *fmt, emu_bits b)
{
    fields x = split(fmt, b);
    if (is_nan_fields(fmt, x))
        return EMU_CLASS_NAN;
    if (is_inf_fields(fmt, x))
        return EMU_CLASS_INF;
    if (fmt->has_zero && x.e == 0) {
        if (x.f == 0 || !fmt->subnormals)
            return EMU_CLASS_ZERO;
        return EMU_CLASS_SUBNORMAL;
    }
    return EMU_CLASS_NORMAL;
}

double emu_decode_unguarded(const emu_format *fmt, emu_bits b)
{
    fields x = split(fmt, b);
    double v;
    switch (emu_classify_bits(fmt, b)) {
    case EMU_CLASS_NAN:
        v = nan_with_fraction(fmt, x);
        break;
    case EMU_CLASS_INF:
        v = INFINITY;
        break;
    case EMU_CLASS_ZERO:
        /* fnuz has no -0: its flushed negative patterns read as +0. */
        if (fmt->specials == EMU_SPECIALS_FNUZ)
            return 0.0;
        v = 0.0;
        break;
    case EMU_CLASS_SUBNORMAL:
        v = ldexp((double)x.f, fmt->qmin);
        break;
    default:
        v = ldexp((double)((1ull << fmt->mbits) | x.f),
                  (int)x.e - fmt->bias - fmt->mbits);
        break;
    }
    return x.sign ? -v : v;
}

double emu_decode(const emu_format *fmt, emu_bits b)
{
    EMU_HOSTFP_GUARD;
    return emu_decode_unguarded(fmt, b);
}

bool emu_nan_bits(const emu_format *fmt, emu_bits *out)
{
    const uint64_t top = top_exponent(fmt);
    switch (fmt->specials) {
    case EMU_SPECIALS_IEEE:
        *out = join(fmt, 0, top, 1ull << (fmt->mbits - 1));
        return true;
    case EMU_SPECIALS_FN:
        *out = join(fmt, 0, top, low_mask(fmt->mbits));
        return true;
    case EMU_SPECIALS_FNUZ:
        *out = join(fmt, 1, 0, 0);
        return true;
    default:
        out->v = 0;
        return false;
    }
}

bool emu_is_signaling(const emu_format *fmt, emu_bits b)
{
    if (fmt->specials != EMU_SPECIALS_IEEE || fmt->mbits == 0)
        return false;
    fields x = split(fmt, b);
    return is_nan_fields(fmt, x) && !(x.f >> (fmt->mbits - 1) & 1);
}

/* ---- under a profile ---------------------------------------------------- */

static bool is_narrow(const emu_format *fmt)
{
    return fmt->bits <= 8;
}

bool emu_is_signaling_in(const emu_format *fmt, const emu_profile *p,
                         emu_bits b)
{
    if (p && p->narrow_nans_quiet && is_narrow(fmt))
        return false;
    return emu_is_signaling(fmt, b);
}

bool emu_nan_bits_in(const emu_format *fmt, const emu_profile *p,
                     emu_bits *out)
{
    if (!emu_nan_bits(fmt, out))
        return false;
    if (!p)
        return true;
    fields x = split(fmt, *out);
    if (fmt->specials == EMU_SPECIALS_IEEE && p->narrow_nan_all_ones &&
        is_narrow(fmt))
        x.f = low_mask(fmt->mbits);
    /* fnuz's one NaN is the sign bit itself. */
    if (fmt->specials != EMU_SPECIALS_FNUZ && fmt->is_signed)
        x.sign = p->nan_negative;
    *out = join(fmt, x.sign, x.e, x.f);
    return true;
}

bool emu_encode_in(const emu_format *fmt, const emu_profile *p, double x,
                   emu_bits *out)
{
    EMU_HOSTFP_GUARD;
    if (!isnan(x))
        return emu_encode_unguarded(fmt, x, out);
    static const emu_profile ieee;
    if (!p)
        p = &ieee;
    if (!emu_nan_bits_in(fmt, p, out))
        return false;
    if (fmt->specials == EMU_SPECIALS_FNUZ || !fmt->is_signed)
        return true;
    /* Where the profile keeps them, the value layer has put the operand's
     * sign and payload (cut to this format) into x: emu_nan_result. */
    fields n = split(fmt, *out);
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    if (p->nan_keep_sign)
        n.sign = (unsigned)(u >> 63);
    if (fmt->specials == EMU_SPECIALS_IEEE && p->nan_keep_payload)
        n.f = (u & ((1ull << 52) - 1)) >> (52 - fmt->mbits);
    *out = join(fmt, n.sign, n.e, n.f);
    return true;
}

bool emu_encode_unguarded(const emu_format *fmt, double x, emu_bits *out)
{
    out->v = 0;
    if (isnan(x))
        return emu_nan_bits(fmt, out);
    const unsigned sign = signbit(x) ? 1 : 0;
    if (sign && !fmt->is_signed)
        return false;
    if (isinf(x)) {
        if (!fmt->has_inf)
            return false;
        *out = join(fmt, sign, top_exponent(fmt), 0);
        return true;
    }
    if (x == 0.0) {
        if (!fmt->has_zero)
            return false;
        /* fnuz has no -0: its pattern is the NaN. */
        if (sign && fmt->specials == EMU_SPECIALS_FNUZ)
            return false;
        *out = join(fmt, sign, 0, 0);
        return true;
    }
    const double a = fabs(x);
    if (a > fmt->max || a < fmt->min_value)
        return false;
    int e;
    frexp(a, &e);
    e -= 1; /* 2^e <= a < 2^(e+1) */
    if (e < fmt->emin) {
        /* Below the normal range only subnormals, on the 2^qmin grid. */
        double m = ldexp(a, -fmt->qmin);
        if (!fmt->subnormals || m != floor(m))
            return false;
        *out = join(fmt, sign, 0, (uint64_t)m);
        return true;
    }
    double m = ldexp(a, fmt->mbits - e); /* in [2^mbits, 2^(mbits+1)) */
    if (m != floor(m))
        return false;
    *out = join(fmt, sign, (uint64_t)(e + fmt->bias),
                (uint64_t)m - (1ull << fmt->mbits));
    return true;
}

bool emu_encode(const emu_format *fmt, double x, emu_bits *out)
{
    EMU_HOSTFP_GUARD;
    return emu_encode_unguarded(fmt, x, out);
}

bool emu_representable(const emu_format *fmt, double x)
{
    EMU_HOSTFP_GUARD;
    emu_bits b;
    return emu_encode_unguarded(fmt, x, &b);
}

emu_class emu_classify(const emu_format *fmt, double x)
{
    EMU_HOSTFP_GUARD;
    if (isnan(x))
        return EMU_CLASS_NAN;
    if (isinf(x))
        return EMU_CLASS_INF;
    if (x == 0.0)
        return EMU_CLASS_ZERO;
    return fabs(x) < fmt->min_normal ? EMU_CLASS_SUBNORMAL : EMU_CLASS_NORMAL;
}

/* The zero a format holds for a result of sign `neg` (none: NaN). */
static double zero_of(const emu_format *fmt, bool neg)
{
    if (!fmt->has_zero)
        return NAN;
    bool keep = neg && fmt->is_signed && fmt->specials != EMU_SPECIALS_FNUZ;
    return keep ? -0.0 : 0.0;
}

/* The next magnitude above a (a = 0 or a representable magnitude). */
static double mag_up(const emu_format *fmt, double a)
{
    if (a == 0.0)
        return fmt->min_value;
    if (a >= fmt->max)
        return INFINITY;
    emu_bits b;
    emu_encode_unguarded(fmt, a, &b);
    b.v += 1; /* the fraction carries into the exponent field */
    return fabs(emu_decode_unguarded(fmt, b));
}

/* The next magnitude below a (a > 0 representable); 0 below min_value, or
 * NaN if the format has no zero. */
static double mag_down(const emu_format *fmt, double a)
{
    if (a == fmt->min_value)
        return fmt->has_zero ? 0.0 : NAN;
    if (isinf(a))
        return fmt->max;
    emu_bits b;
    emu_encode_unguarded(fmt, a, &b);
    b.v -= 1;
    return fabs(emu_decode_unguarded(fmt, b)); /* flushed patterns read as 0 */
}

double emu_next_up(const emu_format *fmt, double x)
{
    EMU_HOSTFP_GUARD;
    if (isnan(x) || x == INFINITY)
        return x;
    if (x == -INFINITY)
        return -fmt->max;
    if (x > 0.0 || (x == 0.0 && (!signbit(x) || fmt->is_signed)))
        return mag_up(fmt, fabs(x));
    double m = mag_down(fmt, -x);
    return m == 0.0 ? zero_of(fmt, true) : -m;
}

double emu_next_down(const emu_format *fmt, double x)
{
    EMU_HOSTFP_GUARD;
    if (isnan(x) || x == -INFINITY)
        return x;
    if (x == INFINITY)
        return fmt->max;
    if (x > 0.0) {
        if (x == fmt->min_value && !fmt->has_zero)
            return -INFINITY; /* e8m0: nothing below its smallest value */
        double m = mag_down(fmt, x);
        return m == 0.0 ? zero_of(fmt, false) : m;
    }
    if (!fmt->is_signed)
        return -INFINITY; /* nothing below zero */
    return -mag_up(fmt, fabs(x));
}

const char *emu_class_name(emu_class c)
{
    static const char *const names[EMU_CLASS_COUNT] = {
        [EMU_CLASS_ZERO] = "zero",     [EMU_CLASS_SUBNORMAL] = "subnormal",
        [EMU_CLASS_NORMAL] = "normal", [EMU_CLASS_INF] = "inf",
        [EMU_CLASS_NAN] = "nan",
    };
    return (unsigned)c < EMU_CLASS_COUNT ? names[c] : "?";
}
