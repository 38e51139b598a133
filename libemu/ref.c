/*
 * ref.c — the GNU MPFR oracle: the maps of round.c and arith.c, computed a
 * second, independent way.
 *
 * Called by the verification suites (tests/test_mpfr_*.c) and by the
 * sampled oracle checks of the op choke point.  Nothing here is shared
 * with round.c or arith.c: every numeric rounding is MPFR's own, done the
 * way MPFR emulates a smaller format —
 *
 *   mpfr_set at precision p (exponent unbounded), then
 *   emin = emin_f - p + 2, emax = emax_f + 1 (MPFR's significands lie in
 *   [1/2, 1), ours in [1, 2)), mpfr_check_range and mpfr_subnormalize,
 *
 * which MPFR documents as free of double rounding because the ternary
 * value of each step is handed to the next.  What MPFR has no mode for is
 * built from its directed roundings: ties-away compares the exact value
 * with the midpoint of the toward-zero and away-from-zero results, and
 * round-to-odd keeps the toward-zero result when its last bit is 1, else
 * takes the away one.  Formats without subnormals set MPFR's emin so that
 * 2^emin_f is the smallest positive number: mpfr_check_range's underflow
 * handling then rounds everything below to 0 or 2^emin_f.
 *
 * The library's policies on top of the rounded value (overflow rule,
 * tininess, flags, formats without zero, sign or infinity) follow
 * README's Formats and Rounding sections rule by rule.  MPFR's own underflow flag is not used:
 * it is raised for exact subnormals too, while ours means tiny AND inexact.
 *
 * Exact inputs: sums, products and fma of doubles are computed exactly at
 * a precision chosen from the operands; quotients and square roots are
 * rounded to odd at REF_ODD_PREC >= p + 2 bits, which rounds again to any
 * p-bit format (subnormal quanta included) as the exact value would
 * (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums:
 * proved algorithms using rounding to odd", IEEE TC 2008), and keeps
 * inexactness, the ternary sign and both tininess tests intact.
 *
 * The caller's MPFR exponent range and flags are saved on entry and
 * restored on exit; scratch variables live on the stack (MPFR's custom
 * interface), so the oracle allocates nothing and is reentrant.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/ref.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define REF_LIMBS(prec) (((prec) + GMP_NUMB_BITS - 1) / GMP_NUMB_BITS)

enum {
    /* Format precisions are at most 53; ties-away needs p + 2. */
    REF_SMALL_PREC = 64,
    /* Quotients and square roots, rounded to odd: >= 53 + 2. */
    REF_ODD_PREC = 128,
    /* An exact fma of doubles: product up to 2^2048, last bit down to
     * 2^-2148, one bit of carry. */
    REF_EXACT_PREC = 4224
};

typedef struct ref_small {
    mpfr_t v;
    mp_limb_t d[REF_LIMBS(REF_SMALL_PREC)];
} ref_small;

typedef struct ref_odd {
    mpfr_t v;
    mp_limb_t d[REF_LIMBS(REF_ODD_PREC)];
} ref_odd;

typedef struct ref_wide {
    mpfr_t v;
    mp_limb_t d[REF_LIMBS(REF_EXACT_PREC)];
} ref_wide;

/* (Re)initialises a stack variable at precision prec (<= its storage). */
#define REF_INIT(var, prec)                                                  \
    do {                                                                     \
        mpfr_custom_init((var).d, (prec));                                   \
        mpfr_custom_init_set((var).v, MPFR_ZERO_KIND, 0, (prec), (var).d);   \
    } while (0)

/* ---- the caller's MPFR state ------------------------------------------ */

typedef struct ref_saved {
    mpfr_exp_t emin, emax;
    mpfr_flags_t flags;
    bool widened;
} ref_saved;

/* Every intermediate value of the oracle (doubles, exact products and fma
 * of doubles, midpoints) has an exponent well inside +-2^16. */
enum { REF_WIDE_EXP = 1 << 16 };

/* Inside the oracle MPFR runs with an exponent range wide enough to be
 * our "unbounded" one, and clear flags.  The caller's range is kept if it
 * is wide enough already: MPFR's state lives in thread-local variables,
 * and each access to them is a visible part of the oracle's cost. */
static ref_saved ref_enter(void)
{
    ref_saved s = { mpfr_get_emin(), mpfr_get_emax(), mpfr_flags_save(),
                    false };
    if (s.emin > -REF_WIDE_EXP || s.emax < REF_WIDE_EXP) {
        mpfr_set_emin(mpfr_get_emin_min());
        mpfr_set_emax(mpfr_get_emax_max());
        s.widened = true;
    }
    mpfr_flags_clear(MPFR_FLAGS_ALL);
    return s;
}

static void ref_leave(const ref_saved *s)
{
    if (s->widened) {
        mpfr_set_emin(s->emin);
        mpfr_set_emax(s->emax);
    }
    mpfr_flags_restore(s->flags, MPFR_FLAGS_ALL);
}

/* ---- rounding into a format, by MPFR ---------------------------------- */

/* y (precision p) = x rounded by MPFR mode rnd: to p bits only (bounded
 * false: the unbounded exponent range of the tininess-after test), or into
 * the format's range.  *ovf: MPFR overflowed (rounded value >= 2^(emax+1)).
 * Returns the ternary value. */
static int round_mpfr(mpfr_ptr y, mpfr_srcptr x, const emu_format *f,
                      mpfr_rnd_t rnd, bool bounded, bool *ovf)
{
    int t = mpfr_set(y, x, rnd);
    *ovf = false;
    if (!bounded)
        return t;
    const mpfr_exp_t wide_min = mpfr_get_emin(), wide_max = mpfr_get_emax();
    mpfr_set_emin(f->subnormals ? f->emin - f->p + 2 : f->emin + 1);
    mpfr_set_emax(f->emax + 1);
    mpfr_clear_overflow();
    t = mpfr_check_range(y, t, rnd);
    if (f->subnormals)
        t = mpfr_subnormalize(y, t, rnd);
    *ovf = mpfr_overflow_p() != 0;
    mpfr_set_emin(wide_min);
    mpfr_set_emax(wide_max);
    return t;
}

/* Is the last bit of y's significand, at the format's quantum, a 1? */
static bool last_bit_odd(mpfr_srcptr y, const emu_format *f, bool bounded)
{
    if (!mpfr_regular_p(y))
        return false;
    mpfr_exp_t e = mpfr_get_exp(y); /* 2^(e-1) <= |y| < 2^e */
    long k = bounded && e <= f->emin ? f->qmin : (long)e - f->p;
    ref_small h;
    REF_INIT(h, f->p);
    mpfr_mul_2si(h.v, y, -k - 1, MPFR_RNDN); /* exact */
    return !mpfr_integer_p(h.v);
}

/* y = x rounded under one of our deterministic modes; see round_mpfr. */
static int round_mode(mpfr_ptr y, mpfr_srcptr x, const emu_format *f,
                      emu_rnd mode, bool bounded, bool *ovf)
{
    switch (mode) {
    case EMU_RNE:
        return round_mpfr(y, x, f, MPFR_RNDN, bounded, ovf);
    case EMU_RZ:
        return round_mpfr(y, x, f, MPFR_RNDZ, bounded, ovf);
    case EMU_RU:
        return round_mpfr(y, x, f, MPFR_RNDU, bounded, ovf);
    case EMU_RD:
        return round_mpfr(y, x, f, MPFR_RNDD, bounded, ovf);
    case EMU_RO: {
        int t = round_mpfr(y, x, f, MPFR_RNDZ, bounded, ovf);
        if (t == 0 || last_bit_odd(y, f, bounded))
            return t;
        /* The away neighbour of an even toward-zero result is odd and in
         * the same binade: (2^p - 1) is odd, so no carry out. */
        return round_mpfr(y, x, f, MPFR_RNDA, bounded, ovf);
    }
    case EMU_RNA: {
        int tz = round_mpfr(y, x, f, MPFR_RNDZ, bounded, ovf);
        if (tz == 0)
            return 0;
        ref_small a, mid;
        REF_INIT(a, f->p);
        REF_INIT(mid, f->p + 2);
        bool ovf_a;
        int ta = round_mpfr(a.v, x, f, MPFR_RNDA, bounded, &ovf_a);
        if (mpfr_inf_p(a.v)) {
            /* The away neighbour is 2^(emax+1), MPFR's overflow: y is the
             * top of the last binade and the midpoint half a quantum
             * above it. */
            mpfr_set_ui_2exp(mid.v, 1, f->emax - f->p, MPFR_RNDN);
            if (mpfr_signbit(y))
                mpfr_neg(mid.v, mid.v, MPFR_RNDN);
            mpfr_add(mid.v, mid.v, y, MPFR_RNDN); /* exact in p + 1 bits */
        } else {
            mpfr_add(mid.v, y, a.v, MPFR_RNDN);   /* exact in p + 1 bits */
            mpfr_div_2ui(mid.v, mid.v, 1, MPFR_RNDN);
        }
        if (mpfr_cmpabs(x, mid.v) < 0)
            return tz;
        mpfr_set(y, a.v, MPFR_RNDN);
        *ovf = ovf_a;
        return ta;
    }
    default:
        /* Stochastic modes have no single right answer to compare with. */
        fprintf(stderr, "emu_ref: rounding mode %s is not deterministic\n",
                emu_rnd_name(mode));
        abort();
    }
}

/* ---- the policies of README's Rounding section ----------------------- */

static bool saturates(const emu_format *f, const emu_rounding *r)
{
    return r->saturate || f->overflow == EMU_OVERFLOW_SATURATE;
}

/* A value the format cannot hold at all: its NaN, or +0 standing for it. */
static double invalid(const emu_format *f, emu_status *st)
{
    st->flags |= EMU_FLAG_INVALID;
    st->ternary = 0;
    return f->has_nan ? NAN : 0.0;
}

static double zero_of(const emu_format *f, bool neg)
{
    return neg && f->is_signed && f->specials != EMU_SPECIALS_FNUZ ? -0.0
                                                                   : 0.0;
}

/* Rule 5, overflow: the result by rounding direction, then the format's or
 * the caller's overflow rule. */
static double overflowed(const emu_format *f, bool neg, const emu_rounding *r,
                         emu_status *st)
{
    st->flags |= EMU_FLAG_OVERFLOW | EMU_FLAG_INEXACT;
    bool toward_max = r->mode == EMU_RZ || r->mode == EMU_RO ||
                      (r->mode == EMU_RU && neg) || (r->mode == EMU_RD && !neg);
    if (toward_max || saturates(f, r)) {
        st->ternary = neg ? 1 : -1;
        return neg ? -f->max : f->max;
    }
    if (f->overflow == EMU_OVERFLOW_NAN) {
        st->ternary = 0;
        return NAN;
    }
    st->ternary = neg ? -1 : 1;
    return neg ? -INFINITY : INFINITY;
}

/* Rule 4: a negative non-zero x in an unsigned format. */
static double negative_unsigned(const emu_format *f, mpfr_srcptr x,
                                const emu_rounding *r, emu_status *st)
{
    if (!f->has_zero || r->mode == EMU_RD)
        return invalid(f, st);
    ref_small y;
    REF_INIT(y, f->p);
    bool ovf;
    /* The modes left are symmetric: rounding x is rounding |x|, negated. */
    round_mode(y.v, x, f, r->mode == EMU_RU ? EMU_RZ : r->mode, true, &ovf);
    if (!mpfr_zero_p(y.v))
        return invalid(f, st);
    st->flags |= EMU_FLAG_INEXACT;
    st->ternary = 1;
    return 0.0;
}

/* emu_ref_round inside ref_enter/ref_leave. */
static double round_in(const emu_format *f, mpfr_srcptr x,
                       const emu_rounding *r, emu_status *st)
{
    st->ternary = 0;
    st->flags = 0;
    /* Rule 1 under the profile: NaN, or ±inf, into a format that cannot
     * hold it is invalid unless the profile keeps quiet about it. */
    const unsigned unheld = r->profile.quiet_unrepresentable ? 0
                                                             : EMU_FLAG_INVALID;
    if (mpfr_nan_p(x)) {
        st->flags |= f->has_nan ? 0 : unheld;
        return NAN;
    }
    bool neg = mpfr_signbit(x) != 0;
    if (mpfr_inf_p(x)) {
        if (neg && !f->is_signed)
            return invalid(f, st);
        /* Saturation is OCP OFP8's: infinities saturate too (unless the
         * profile keeps them). */
        bool sat = saturates(f, r) && !r->profile.saturate_keeps_inf;
        if (f->has_inf && !sat)
            return neg ? -INFINITY : INFINITY;
        st->flags |= f->has_inf ? 0 : unheld;
        if (!sat)
            return f->has_nan ? NAN : 0.0;
        /* ±max stands below +inf (above -inf): the ternary says so. */
        st->ternary = neg ? 1 : -1;
        return neg ? -f->max : f->max;
    }
    if (mpfr_zero_p(x))
        return f->has_zero ? zero_of(f, neg) : invalid(f, st);
    if (neg && !f->is_signed)
        return negative_unsigned(f, x, r, st);

    ref_small y;
    REF_INIT(y, f->p);
    bool ovf;
    int t = round_mode(y.v, x, f, r->mode, true, &ovf);
    double v = mpfr_get_d(y.v, MPFR_RNDN); /* exact: the format fits a double */
    /* MPFR's range ends at the top of the last binade; in fn formats that
     * value is the NaN pattern and max lies one quantum below. */
    if (ovf || fabs(v) > f->max)
        return overflowed(f, neg, r, st);

    if (t != 0) {
        st->flags |= EMU_FLAG_INEXACT;
        /* 2^(e-1) <= |x| < 2^e: tiny before rounding iff e <= emin.  Tiny
         * after rounding implies tiny before (2^emin has p bits), so the
         * unbounded rounding is needed only then. */
        bool tiny = mpfr_get_exp(x) <= f->emin;
        if (tiny && r->tininess == EMU_TINY_AFTER) {
            ref_small u;
            REF_INIT(u, f->p);
            bool unused;
            round_mode(u.v, x, f, r->mode, false, &unused);
            tiny = mpfr_get_exp(u.v) <= f->emin;
        }
        if (tiny)
            st->flags |= EMU_FLAG_UNDERFLOW;
    }
    st->ternary = (t > 0) - (t < 0);
    if (mpfr_zero_p(y.v)) {
        if (!f->has_zero) {
            st->ternary = neg ? -1 : 1;
            return neg ? -f->min_value : f->min_value;
        }
        if (!f->subnormals)
            st->flags |= EMU_FLAG_FLUSHED;
        return zero_of(f, neg);
    }
    if (mpfr_get_exp(y.v) <= f->emin)
        st->flags |= EMU_FLAG_SUBNORMAL;
    return v;
}

double emu_ref_round(const emu_format *fmt, mpfr_srcptr x,
                     const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    static const emu_rounding rne;
    emu_status local;
    ref_saved s = ref_enter();
    double v = round_in(fmt, x, r ? r : &rne, st ? st : &local);
    ref_leave(&s);
    return v;
}

/* ---- operations ------------------------------------------------------- */

/* Exponent of the last non-zero bit of a regular x. */
static mpfr_exp_t low_exp(mpfr_srcptr x)
{
    return mpfr_get_exp(x) - (mpfr_exp_t)mpfr_min_prec(x);
}

/* Precision holding u + v exactly (v may be scaled by the caller). */
static mpfr_prec_t sum_prec(mpfr_exp_t eu, mpfr_exp_t lu, mpfr_exp_t ev,
                            mpfr_exp_t lv)
{
    mpfr_exp_t hi = eu > ev ? eu : ev, lo = lu < lv ? lu : lv;
    mpfr_prec_t p = (mpfr_prec_t)(hi - lo + 1);
    return p < 2 * 53 ? 2 * 53 : p;
}

/* z was rounded toward zero with ternary t: make it round-to-odd, the
 * sticky form that a second rounding to p <= PREC(z) - 2 bits cannot
 * tell from the exact value. */
static void make_odd(mpfr_ptr z, int t)
{
    if (t != 0 && mpfr_regular_p(z) && mpfr_min_prec(z) < mpfr_get_prec(z)) {
        if (mpfr_signbit(z))
            mpfr_nextbelow(z);
        else
            mpfr_nextabove(z);
    }
}

/* Rounds the computed z, or reports the invalid operation MPFR found
 * (operands were not NaN, so a NaN result is 0*inf, inf-inf, 0/0 ...). */
static double finish(const emu_format *f, mpfr_srcptr z, const emu_rounding *r,
                     emu_status *st)
{
    bool divby0 = mpfr_divby0_p() != 0;
    double v;
    if (mpfr_nan_p(z)) {
        st->flags = EMU_FLAG_INVALID;
        st->ternary = 0;
        v = NAN;
    } else {
        v = round_in(f, z, r, st);
    }
    if (divby0)
        st->flags |= EMU_FLAG_INFINITE;
    return v;
}

/* Rule 1 for operations: a NaN operand gives NaN. */
static double nan_operand(const emu_format *f, const emu_rounding *r,
                          emu_status *st)
{
    st->ternary = 0;
    st->flags = f->has_nan || r->profile.quiet_unrepresentable
              ? 0 : EMU_FLAG_INVALID;
    return NAN;
}

/* The sign of an exact zero sum is IEEE's, which MPFR implements: +0
 * unless rounding downward. */
static mpfr_rnd_t zero_sign_mode(const emu_rounding *r)
{
    return r->mode == EMU_RD ? MPFR_RNDD : MPFR_RNDN;
}

static void check_exact(int t, const char *op)
{
    if (t != 0) {
        fprintf(stderr, "emu_ref_%s: internal error: exact result inexact\n",
                op);
        abort();
    }
}

enum ref_op { REF_ADD, REF_SUB, REF_MUL, REF_DIV };

static double binary(enum ref_op op, const emu_format *f, double a, double b,
                     const emu_rounding *r, emu_status *st)
{
    static const emu_rounding rne;
    emu_status local;
    if (!r)
        r = &rne;
    if (!st)
        st = &local;
    if (isnan(a) || isnan(b))
        return nan_operand(f, r, st);

    ref_saved s = ref_enter();
    ref_small ma, mb;
    REF_INIT(ma, 53);
    REF_INIT(mb, 53);
    mpfr_set_d(ma.v, a, MPFR_RNDN); /* exact */
    mpfr_set_d(mb.v, b, MPFR_RNDN);
    if (op == REF_SUB) {
        mpfr_neg(mb.v, mb.v, MPFR_RNDN);
        op = REF_ADD;
    }
    ref_wide z;
    int t;
    switch (op) {
    case REF_ADD: {
        mpfr_prec_t p = 2 * 53;
        if (mpfr_regular_p(ma.v) && mpfr_regular_p(mb.v))
            p = sum_prec(mpfr_get_exp(ma.v), low_exp(ma.v),
                         mpfr_get_exp(mb.v), low_exp(mb.v));
        REF_INIT(z, p);
        t = mpfr_add(z.v, ma.v, mb.v, zero_sign_mode(r));
        check_exact(t, "add");
        break;
    }
    case REF_MUL:
        REF_INIT(z, 2 * 53);
        t = mpfr_mul(z.v, ma.v, mb.v, MPFR_RNDN);
        check_exact(t, "mul");
        break;
    default:
        REF_INIT(z, REF_ODD_PREC);
        t = mpfr_div(z.v, ma.v, mb.v, MPFR_RNDZ);
        make_odd(z.v, t);
        break;
    }
    double v = finish(f, z.v, r, st);
    ref_leave(&s);
    return v;
}

double emu_ref_add(const emu_format *f, double a, double b,
                   const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    return binary(REF_ADD, f, a, b, r, st);
}

double emu_ref_sub(const emu_format *f, double a, double b,
                   const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    return binary(REF_SUB, f, a, b, r, st);
}

double emu_ref_mul(const emu_format *f, double a, double b,
                   const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    return binary(REF_MUL, f, a, b, r, st);
}

double emu_ref_div(const emu_format *f, double a, double b,
                   const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    return binary(REF_DIV, f, a, b, r, st);
}

double emu_ref_sqrt(const emu_format *f, double a, const emu_rounding *r,
                    emu_status *st)
{
    EMU_HOSTFP_GUARD;
    static const emu_rounding rne;
    emu_status local;
    if (!r)
        r = &rne;
    if (!st)
        st = &local;
    if (isnan(a))
        return nan_operand(f, r, st);
    ref_saved s = ref_enter();
    ref_small ma;
    REF_INIT(ma, 53);
    mpfr_set_d(ma.v, a, MPFR_RNDN);
    ref_odd w;
    REF_INIT(w, REF_ODD_PREC);
    int t = mpfr_sqrt(w.v, ma.v, MPFR_RNDZ); /* sqrt(-0) = -0, as IEEE */
    make_odd(w.v, t);
    double v = finish(f, w.v, r, st);
    ref_leave(&s);
    return v;
}

double emu_ref_fma(const emu_format *f, double a, double b, double c,
                   const emu_rounding *r, emu_status *st)
{
    EMU_HOSTFP_GUARD;
    static const emu_rounding rne;
    emu_status local;
    if (!r)
        r = &rne;
    if (!st)
        st = &local;
    /* 0 * inf is invalid even when c is a quiet NaN: IEEE 754 leaves the
     * flag to the implementation there, and SoftFloat (TestFloat's
     * reference) and x86 raise it. */
    if ((a == 0.0 && isinf(b)) || (isinf(a) && b == 0.0)) {
        st->ternary = 0;
        st->flags = EMU_FLAG_INVALID;
        return NAN;
    }
    if (isnan(a) || isnan(b) || isnan(c))
        return nan_operand(f, r, st);
    ref_saved s = ref_enter();
    ref_small ma, mb, mc;
    REF_INIT(ma, 53);
    REF_INIT(mb, 53);
    REF_INIT(mc, 53);
    mpfr_set_d(ma.v, a, MPFR_RNDN);
    mpfr_set_d(mb.v, b, MPFR_RNDN);
    mpfr_set_d(mc.v, c, MPFR_RNDN);
    mpfr_prec_t p = 2 * 53;
    if (mpfr_regular_p(ma.v) && mpfr_regular_p(mb.v) && mpfr_regular_p(mc.v))
        p = sum_prec(mpfr_get_exp(ma.v) + mpfr_get_exp(mb.v),
                     low_exp(ma.v) + low_exp(mb.v), mpfr_get_exp(mc.v),
                     low_exp(mc.v));
    ref_wide z;
    REF_INIT(z, p);
    /* MPFR's fma treats signed zeros and infinities as a product followed
     * by an addition, as IEEE 754 does. */
    int t = mpfr_fma(z.v, ma.v, mb.v, mc.v, zero_sign_mode(r));
    check_exact(t, "fma");
    double v = finish(f, z.v, r, st);
    ref_leave(&s);
    return v;
}

double emu_ref_convert(const emu_format *f, double a, const emu_rounding *r,
                       emu_status *st)
{
    EMU_HOSTFP_GUARD;
    static const emu_rounding rne;
    emu_status local;
    if (!r)
        r = &rne;
    if (!st)
        st = &local;
    if (isnan(a))
        return nan_operand(f, r, st);
    ref_saved s = ref_enter();
    ref_small ma;
    REF_INIT(ma, 53);
    mpfr_set_d(ma.v, a, MPFR_RNDN); /* exact */
    double v = round_in(f, ma.v, r, st);
    ref_leave(&s);
    return v;
}
