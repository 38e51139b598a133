/*
 * round.c — the rounding choke point: an exact value hi + lo into a format.
 *
 * Method.  Let a = |hi + lo| lie in binade e (2^e <= a < 2^(e+1)).  The
 * format's quantum there is 2^q, q = max(e, emin) - p + 1 (the subnormal
 * quantum below 2^emin; without subnormals the only values below 2^emin
 * are 0 and 2^emin, so q = emin there).  Scaling by 2^-q is exact, so
 *
 *     a / 2^q = M + F,    M an integer < 2^p,  0 <= F < 1,
 *
 * where M and the coarse part of F come exactly from hi, and lo adds a
 * correction smaller than one unit of hi's last place.  Every rounding
 * mode is a rule for choosing M or M + 1 from (M, F, sign): nearest modes
 * compare F with 1/2 (lo breaks what would look like a tie in hi alone),
 * directed modes look only at whether F = 0, stochastic modes compare
 * floor(F * 2^64) with a random word.  The result is (M + up) * 2^q: one
 * rounding, from the exact value, whatever the mode.
 *
 * Range handling (overflow, tininess, flushing, formats without zero or
 * sign) happens after that choice, in one place, so every mode gets it.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/round.h"

#include "internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* The decision at quantum 2^q: returns M (as an exact integer-valued
 * double) and sets *up and *inexact. */
static double decide(double ah, double al, int q, bool neg,
                     const emu_rounding *r, uint64_t word, bool *up,
                     bool *inexact)
{
    double m = ldexp(ah, -q);  /* exact: a power-of-two scaling into range */
    double M = floor(m);
    double fr = m - M;         /* exact */
    if (fr == 0.0 && al < 0.0) {
        /* hi sits on the grid and the exact value is just below it. */
        M -= 1.0;
        fr = 1.0;
    }
    *inexact = fr != 0.0 || al != 0.0;
    if (!*inexact) {
        *up = false;
        return M;
    }
    /* lo on the scale of the quantum.  It can underflow to zero when the
     * quantum is huge compared to lo; its sign is then read from al. */
    double flo = ldexp(al, -q);
    bool odd = ((uint64_t)M & 1) != 0; /* M < 2^53: exact as an integer */

    switch (r->mode) {
    case EMU_RNE:
    case EMU_RNA: {
        double d = fr - 0.5;   /* exact */
        double s = d + flo;    /* sign of the exact F - 1/2 */
        int half = s > 0.0 ? 1 : s < 0.0 ? -1
                 : d == 0.0 ? (al > 0.0) - (al < 0.0) : 0;
        *up = half > 0 || (half == 0 && (r->mode == EMU_RNA || odd));
        break;
    }
    case EMU_RZ:
        *up = false;
        break;
    case EMU_RU:
        *up = !neg;
        break;
    case EMU_RD:
        *up = neg;
        break;
    case EMU_RO:
        *up = !odd;
        break;
    case EMU_RS:
    case EMU_RS_BITS:
    default: {
        /* Fq = floor(F * 2^64).  fr * 2^64 is an integer or lies strictly
         * between integers by more than lo can move it, so
         * floor(F * 2^64) = floor(fr * 2^64) + floor(lo-part * 2^64)
         * (the second term only counts when the first is an integer). */
        uint64_t Fq;
        double x = ldexp(al, 64 - q);
        double fx = floor(x);
        if (al < 0.0 && x == 0.0)
            fx = -1.0;
        if (fr == 1.0) {
            /* F = 1 + flo with flo < 0: 2^64 + floor(flo 2^64). */
            Fq = (uint64_t)0 - (uint64_t)(-fx);
        } else {
            double t = ldexp(fr, 64);
            uint64_t T = (uint64_t)t;
            if ((double)T == t && fx != 0.0)
                T = fx > 0.0 ? T + (uint64_t)fx : T - (uint64_t)(-fx);
            Fq = T;
        }
        unsigned bits = r->mode == EMU_RS ? 64 : r->sr_bits;
        if (bits == 0 || bits > 64)
            bits = 64;
        if (bits == 64) {
            *up = word + Fq < word; /* carry out of word + Fq */
        } else {
            uint64_t fr_bits = Fq >> (64 - bits);
            uint64_t w_bits = word >> (64 - bits);
            *up = ((fr_bits + w_bits) >> bits) != 0;
        }
        break;
    }
    }
    return M;
}

/* The result of an overflow, as IEEE 754 defines it by rounding direction,
 * then adjusted by the format's (or the caller's) overflow rule. */
static double overflow_result(const emu_format *f, bool neg,
                              const emu_rounding *r, emu_status *st)
{
    bool to_max;
    switch (r->mode) {
    case EMU_RZ:
    case EMU_RO:
        to_max = true;
        break;
    case EMU_RU:
        to_max = neg;
        break;
    case EMU_RD:
        to_max = !neg;
        break;
    default:
        /* Nearest and stochastic modes: the value rounded with an unbounded
         * exponent lies above max, whether it got there by rounding away
         * or was already beyond max's binade; IEEE 754 gives infinity. */
        to_max = false;
        break;
    }
    emu_overflow rule = r->saturate ? EMU_OVERFLOW_SATURATE : f->overflow;
    st->flags |= EMU_FLAG_OVERFLOW | EMU_FLAG_INEXACT;
    if (to_max || rule == EMU_OVERFLOW_SATURATE) {
        st->ternary = neg ? 1 : -1;
        return neg ? -f->max : f->max;
    }
    if (rule == EMU_OVERFLOW_NAN) {
        st->ternary = 0;
        return emu_nan_result(f, &r->profile, neg ? -1.0 : 1.0);
    }
    st->ternary = neg ? -1 : 1;
    return neg ? -INFINITY : INFINITY;
}

/* A NaN operand (or hi + lo with a NaN part) into f. */
static double nan_result(const emu_format *f, const emu_rounding *r, double x,
                         emu_status *st)
{
    st->ternary = 0;
    if (!f->has_nan && !r->profile.quiet_unrepresentable)
        st->flags |= EMU_FLAG_INVALID;
    return emu_nan_result(f, &r->profile, x);
}

/* Values a format cannot hold at all: negative numbers in an unsigned
 * format, zero in a format without one. */
static double invalid_result(const emu_format *f, const emu_rounding *r,
                             emu_status *st)
{
    st->flags |= EMU_FLAG_INVALID;
    st->ternary = 0;
    if (f->has_nan)
        return emu_nan_result(f, &r->profile, 0.0);
    return 0.0;
}

/* ±inf into f.  Saturation is OCP OFP8's saturation mode: infinities
 * become ±max like the finite values beyond it (unless the profile keeps
 * them); the result lies inside ±inf, which the ternary says.  A format
 * that cannot hold the infinity raises invalid, unless the profile says
 * otherwise. */
static double inf_result(const emu_format *f, bool neg, const emu_rounding *r,
                         emu_status *st)
{
    if (neg && !f->is_signed)
        return invalid_result(f, r, st);
    bool sat = (r->saturate || f->overflow == EMU_OVERFLOW_SATURATE) &&
               !r->profile.saturate_keeps_inf;
    if (f->has_inf && !sat)
        return neg ? -INFINITY : INFINITY;
    if (!f->has_inf && !r->profile.quiet_unrepresentable)
        st->flags |= EMU_FLAG_INVALID;
    if (sat) {
        st->ternary = neg ? 1 : -1;
        return neg ? -f->max : f->max;
    }
    /* No infinity and no saturation: NaN.  A format without NaN gets it
     * too; the bit layer writes that as +0, with the invalid flag. */
    return emu_nan_result(f, &r->profile, neg ? -1.0 : 1.0);
}

static double signed_zero(const emu_format *f, bool neg)
{
    bool keep_sign = neg && f->is_signed && f->specials != EMU_SPECIALS_FNUZ;
    return keep_sign ? -0.0 : 0.0;
}

double emu_round2_word_unguarded(const emu_format *f, double hi, double lo,
                                 const emu_rounding *r, uint64_t word,
                                 emu_status *st)
{
    static const emu_rounding rne;
    emu_status local;
    if (!st)
        st = &local;
    if (!r)
        r = &rne;
    st->ternary = 0;
    st->flags = 0;

    if (isnan(hi) || isnan(lo))
        return nan_result(f, r, isnan(hi) ? hi : lo, st);
    bool neg = signbit(hi) != 0;
    if (isinf(hi))
        return inf_result(f, neg, r, st);
    if (lo != 0.0) {
        /* Any pair is normalised: hi = RN(hi + lo) and lo the exact rest
         * (TwoSum, exact whatever the order of magnitudes: Fast2Sum's
         * |hi| >= |lo| need not hold, as in (1, 2^60)).  A sum that
         * overflows binary64 is at least 2^1024 - 2^970.  Unless the pair
         * is normalised already (hi in the top binade, |lo| within half
         * its ulp), that lies beyond every format whose binades stop
         * below 2^1023, whatever the mode; for the others (binary64) it is
         * refused, see round.h. */
        if (isinf(lo))
            return emu_round2_word_unguarded(f, lo, 0.0, r, word, st);
        double s = hi + lo, bb = s - hi;
        if (isfinite(s)) {
            lo = (hi - (s - bb)) + (lo - bb);
            hi = s;
            neg = signbit(hi) != 0;
        } else if (!(fabs(hi) >= 0x1p1023 && fabs(lo) <= 0x1p970)) {
            if (f->emax >= 1023 || (signbit(s) && !f->is_signed))
                return invalid_result(f, r, st);
            return overflow_result(f, signbit(s) != 0, r, st);
        }
    }
    if (hi == 0.0) {
        if (!f->has_zero)
            return invalid_result(f, r, st);
        return signed_zero(f, neg);
    }
    if (neg && !f->is_signed) {
        /* Only a negative value that rounds to zero is representable
         * (as +0), as with conversions to unsigned integers. */
        if (!f->has_zero)
            return invalid_result(f, r, st);
        emu_rounding mag = *r;
        if (r->mode == EMU_RU)
            mag.mode = EMU_RZ;
        else if (r->mode == EMU_RD)
            mag.mode = EMU_RNA; /* anything but toward zero */
        double ah = fabs(hi), al = -lo;
        int e;
        frexp(ah, &e);
        e -= 1;
        if (al < 0.0 && ah == ldexp(1.0, e))
            e -= 1;
        int q = (e < f->emin ? (f->subnormals ? f->emin - f->p + 1 : f->emin)
                             : e - f->p + 1);
        bool up, inexact;
        double M = decide(ah, al, q, true, &mag, word, &up, &inexact);
        if (r->mode == EMU_RD)
            up = true;
        if (M + up == 0.0) {
            st->flags |= EMU_FLAG_INEXACT;
            st->ternary = 1;
            return 0.0;
        }
        return invalid_result(f, r, st);
    }

    double ah = fabs(hi);
    double al = neg ? -lo : lo; /* lo measured away from zero */
    int e;
    frexp(ah, &e);
    e -= 1;                                   /* 2^e <= ah < 2^(e+1) */
    if (al < 0.0 && ah == ldexp(1.0, e))
        e -= 1;                               /* exact value below 2^e  */
    const bool tiny_before = e < f->emin;
    int q;
    if (!tiny_before)
        q = e - f->p + 1;
    else
        q = f->subnormals ? f->emin - f->p + 1 : f->emin;

    bool up, inexact;
    double M = decide(ah, al, q, neg, r, word, &up, &inexact);
    double R = ldexp(M + (up ? 1.0 : 0.0), q);

    if (R > f->max)
        return overflow_result(f, neg, r, st);

    if (inexact) {
        st->flags |= EMU_FLAG_INEXACT;
        bool tiny = tiny_before;
        if (tiny && r->tininess == EMU_TINY_AFTER && e == f->emin - 1) {
            /* Tiny after rounding: the value rounded with an unbounded
             * exponent range (same mode, same random word) stays below
             * 2^emin. */
            bool up_u, inexact_u;
            double Mu = decide(ah, al, e - f->p + 1, neg, r, word, &up_u,
                               &inexact_u);
            tiny = ldexp(Mu + (up_u ? 1.0 : 0.0), e - f->p + 1) < f->min_normal;
        }
        if (tiny)
            st->flags |= EMU_FLAG_UNDERFLOW;
    }
    if (R == 0.0) {
        if (!f->has_zero) {
            /* No zero (E8M0): the smallest value is the only candidate. */
            st->ternary = neg ? -1 : 1;
            return neg ? -f->min_value : f->min_value;
        }
        if (!f->subnormals)
            st->flags |= EMU_FLAG_FLUSHED;
        st->ternary = neg ? 1 : -1;
        return signed_zero(f, neg);
    }
    if (R < f->min_normal)
        st->flags |= EMU_FLAG_SUBNORMAL;
    if (inexact)
        st->ternary = up != neg ? 1 : -1;
    return neg ? -R : R;
}

double emu_round2_word(const emu_format *f, double hi, double lo,
                       const emu_rounding *r, uint64_t word, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    return emu_round2_word_unguarded(f, hi, lo, r, word, st);
}

/* Scalar stochastic rounding without an explicit generator draws from one
 * process-wide stream (seed 0, stream 0): reproducible in a single thread,
 * and never a silent truncation. */
static _Atomic uint64_t default_stream_index;

uint64_t emu_default_random_word(void)
{
    return emu_random64(0, 0, atomic_fetch_add(&default_stream_index, 1));
}

double emu_round2_unguarded(const emu_format *f, double hi, double lo,
                            const emu_rounding *r, emu_status *st)
{
    uint64_t word = 0;
    if (r && emu_rnd_is_stochastic(r->mode))
        word = r->rng ? emu_rng_next(r->rng) : emu_default_random_word();
    return emu_round2_word_unguarded(f, hi, lo, r, word, st);
}

double emu_round2(const emu_format *f, double hi, double lo,
                  const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    return emu_round2_unguarded(f, hi, lo, r, st);
}

/* ---- names ----------------------------------------------------------- */

static const char *const rnd_names[EMU_RND_COUNT] = {
    [EMU_RNE] = "rne", [EMU_RNA] = "rna", [EMU_RZ] = "rz", [EMU_RU] = "ru",
    [EMU_RD] = "rd",   [EMU_RO] = "ro",   [EMU_RS] = "sr", [EMU_RS_BITS] = "srN",
};

const char *emu_rnd_name(emu_rnd m)
{
    return (unsigned)m < EMU_RND_COUNT ? rnd_names[m] : "?";
}

bool emu_rnd_is_stochastic(emu_rnd m)
{
    return m == EMU_RS || m == EMU_RS_BITS;
}

int emu_rnd_parse(const char *s, emu_rnd *mode, unsigned *sr_bits)
{
    static const struct { const char *name; emu_rnd mode; } names[] = {
        { "rne", EMU_RNE }, { "nearest", EMU_RNE }, { "nearest-even", EMU_RNE },
        { "rna", EMU_RNA }, { "nearest-away", EMU_RNA },
        { "rz", EMU_RZ },   { "zero", EMU_RZ },  { "toward-zero", EMU_RZ },
        { "ru", EMU_RU },   { "up", EMU_RU },    { "toward-positive", EMU_RU },
        { "rd", EMU_RD },   { "down", EMU_RD },  { "toward-negative", EMU_RD },
        { "ro", EMU_RO },   { "odd", EMU_RO },
        { "sr", EMU_RS },   { "stochastic", EMU_RS },
    };
    if (!s)
        return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *mode = names[i].mode;
            if (sr_bits)
                *sr_bits = names[i].mode == EMU_RS ? 64 : 0;
            return 0;
        }
    /* "srN": stochastic with N random bits, 1 <= N <= 64. */
    if (s[0] == 's' && s[1] == 'r' && s[2] >= '1' && s[2] <= '9') {
        unsigned n = 0;
        const char *p = s + 2;
        while (*p >= '0' && *p <= '9' && n <= 64)
            n = n * 10 + (unsigned)(*p++ - '0');
        if (*p || n < 1 || n > 64)
            return -1;
        *mode = EMU_RS_BITS;
        if (sr_bits)
            *sr_bits = n;
        return 0;
    }
    return -1;
}

/* ---- profiles ---------------------------------------------------------- */

/* The sources of each row are in README.md's profile table. */
static const struct {
    const char *name;
    emu_profile p;
} profiles[EMU_PROFILE_COUNT] = {
    [EMU_PROFILE_IEEE] = { "ieee", { 0 } },
    [EMU_PROFILE_OCP] = { "ocp", { .nan_keep_sign = true,
                                   .nan_keep_payload = true } },
    [EMU_PROFILE_RISCV] = { "riscv", { .narrow_nans_quiet = true,
                                       .narrow_nan_all_ones = true } },
};

emu_profile emu_profile_preset(emu_profile_id id)
{
    static const emu_profile none;
    return (unsigned)id < EMU_PROFILE_COUNT ? profiles[id].p : none;
}

const char *emu_profile_name(emu_profile_id id)
{
    return (unsigned)id < EMU_PROFILE_COUNT ? profiles[id].name : "?";
}

const char *emu_profile_names(void)
{
    return "ieee, ocp, riscv";
}

int emu_profile_parse(const char *s, emu_profile *out, emu_profile_id *id)
{
    for (int i = 0; s && i < EMU_PROFILE_COUNT; i++)
        if (!strcmp(s, profiles[i].name)) {
            if (out)
                *out = profiles[i].p;
            if (id)
                *id = (emu_profile_id)i;
            return 0;
        }
    return -1;
}

emu_profile_id emu_profile_id_of(const emu_profile *p)
{
    for (int i = 0; i < EMU_PROFILE_COUNT; i++) {
        const emu_profile *q = &profiles[i].p;
        if (p->narrow_nans_quiet == q->narrow_nans_quiet &&
            p->quiet_unrepresentable == q->quiet_unrepresentable &&
            p->saturate_keeps_inf == q->saturate_keeps_inf &&
            p->narrow_nan_all_ones == q->narrow_nan_all_ones &&
            p->nan_negative == q->nan_negative &&
            p->nan_keep_sign == q->nan_keep_sign &&
            p->nan_keep_payload == q->nan_keep_payload)
            return (emu_profile_id)i;
    }
    return EMU_PROFILE_COUNT;
}

/* Without a kept payload a NaN result is the plain quiet NaN of the
 * host (its payload empty); the bit layer turns it into the format's
 * default pattern.  A kept payload is cut to the fraction bits the format
 * holds, so that the value layer and the bit layer agree on it.  Only
 * bits are moved: no host arithmetic touches the NaN. */
double emu_nan_result(const emu_format *f, const emu_profile *p, double in)
{
    const bool propagate = isnan(in) != 0;
    /* A new NaN standing for a signed value (-inf into E4M3) may keep
     * that sign too; in = 0.0 has none to give. */
    const bool neg = p->nan_keep_sign && in != 0.0 ? signbit(in) != 0
                                                    : p->nan_negative;
    double x = NAN;
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    if (propagate && p->nan_keep_payload) {
        const int held = f->specials == EMU_SPECIALS_IEEE ? f->mbits : 0;
        const uint64_t frac_mask = (1ull << 52) - 1;
        uint64_t keep = held >= 52 ? frac_mask
                      : frac_mask & ~((1ull << (52 - held)) - 1);
        memcpy(&u, &in, sizeof u);
        u = (0x7ffull << 52) | (u & keep) | (1ull << 51);
    }
    u = (u & ~(1ull << 63)) | ((uint64_t)neg << 63);
    memcpy(&x, &u, sizeof x);
    return x;
}

void emu_flags_string(unsigned flags, char *buf, size_t size)
{
    static const char *const names[] = {
        "inexact", "underflow", "overflow", "infinite", "invalid",
        "subnormal", "flushed",
    };
    size_t used = 0;
    if (size)
        buf[0] = '\0';
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (flags & (1u << i)) {
            int n = snprintf(buf + used, used < size ? size - used : 0, "%s%s",
                             used ? "|" : "", names[i]);
            if (n > 0)
                used += (size_t)n;
        }
    if (!used && size)
        snprintf(buf, size, "none");
}
