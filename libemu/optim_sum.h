/*
 * optim_sum.h — the exact sums of the optimizer updates, branch-free
 * (library-private; ops_optim.c and its tests).
 *
 * emu_exact_sum_ref() (ops_optim.c) is the reference: Shewchuk's
 * Grow-Expansion of n <= 4 doubles (TwoSum only, zero components dropped),
 * then summed top down into hi + lo (see there for what hi and lo
 * guarantee).  The update loops run it per element, with a branch per
 * component, through a loop of unknown length, so nothing vectorises.
 *
 * The functions here give the same hi and lo, bit for bit (signs of zero
 * included), for FINITE terms, as straight-line code:
 *  - Dropping zeros changes nothing but the positions of the components:
 *    TwoSum(q, 0) = (q, 0) and TwoSum(0, e) = (e, 0) up to the sign of a
 *    zero, so the expansion grown WITH its zeros is the reference's with
 *    zeros in between.  Only two places see the difference: the
 *    reference's all-zero answer (-0 iff every term is -0) and the one
 *    component it adds to lo after the first inexact step of the top-down
 *    pass, which is the first NON-ZERO component below: both are selected
 *    explicitly here.
 *  - lo is +0 whenever it is zero, as in the reference.
 * Non-finite terms take the reference (the caller checks hi).  Products
 * come from Dekker's TwoProduct (Veltkamp splitting), exact for the
 * magnitudes of binary32-derived operands, so that no per-element fma()
 * library call is left on baseline x86-64; its error term is made +0 when
 * zero, as fma(a, b, -a*b) gives it.
 */
#ifndef EMU_OPTIM_SUM_H
#define EMU_OPTIM_SUM_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* The reference (ops_optim.c): t[0] + ... + t[n-1], n <= 4, any doubles. */
void emu_exact_sum_ref(const double *t, int n, double *hi, double *lo);

static inline uint64_t emu_osum_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* m all ones: x; m zero: y (bit for bit, without a branch). */
static inline double emu_osum_pick(uint64_t m, double x, double y)
{
    const uint64_t u = (emu_osum_bits(x) & m) | (emu_osum_bits(y) & ~m);
    double r;
    memcpy(&r, &u, sizeof r);
    return r;
}

/* The reference's value of an exactly zero sum: -0 iff every term is -0. */
static inline double emu_osum_zero(uint64_t or_bits, uint64_t and_bits)
{
    const uint64_t sign = (uint64_t)1 << 63;
    return (or_bits == sign && and_bits == sign) ? -0.0 : 0.0;
}

/* a + b + (+0): the common case of a three-term sum whose last
 * coefficient is zero (no weight decay). */
static inline void emu_osum2z(double a, double b, double *hi, double *lo)
{
    double s, r;
    emu_two_sum(b, a, &s, &r);
    *hi = s + 0.0; /* a +0 term: the zero sum is +0 */
    *lo = r + 0.0;
}

/* a + b + c. */
static inline void emu_osum3(double a, double b, double c, double *hi,
                             double *lo)
{
    double s1, r1, q, r2, s3, r3, h1, e1, h2, e2;
    emu_two_sum(b, a, &s1, &r1);
    emu_two_sum(c, r1, &q, &r2);
    emu_two_sum(q, s1, &s3, &r3);
    /* expansion [r2, r3, s3], top down */
    emu_two_sum(s3, r3, &h1, &e1);
    emu_two_sum(h1, r2, &h2, &e2);
    /* Selected on the bits, every candidate formed: written as ?:, GCC
     * moved the second TwoSum and e1 + r2 into their branches, and under
     * -ftrapping-math if-conversion cannot run them unconditionally
     * again, so only AVX-512's masked operations vectorised the loops. */
    const uint64_t top = -(uint64_t)(e1 != 0.0);
    double h = emu_osum_pick(top, h1, h2);
    double l = emu_osum_pick(top, e1 + r2, e2);
    const uint64_t ua = emu_osum_bits(a), ub = emu_osum_bits(b),
                   uc = emu_osum_bits(c);
    *hi = h == 0.0 ? emu_osum_zero(ua | ub | uc, ua & ub & uc) : h;
    *lo = l + 0.0;
}

/* a + b + c + d. */
static inline void emu_osum4(double a, double b, double c, double d,
                             double *hi, double *lo)
{
    double s1, r1, q, r2, s3, r3, r4, r5, s6, r6;
    emu_two_sum(b, a, &s1, &r1);
    emu_two_sum(c, r1, &q, &r2);
    emu_two_sum(q, s1, &s3, &r3);
    emu_two_sum(d, r2, &q, &r4);
    emu_two_sum(q, r3, &q, &r5);
    emu_two_sum(q, s3, &s6, &r6);
    /* expansion [r4, r5, r6, s6], top down */
    double h1, e1, h2, e2, h3, e3;
    emu_two_sum(s6, r6, &h1, &e1);
    emu_two_sum(h1, r5, &h2, &e2);
    emu_two_sum(h2, r4, &h3, &e3);
    const double below5 = r5 != 0.0 ? r5 : r4; /* first non-zero below r6 */
    double h = e1 != 0.0 ? h1 : e2 != 0.0 ? h2 : h3;
    double l = e1 != 0.0 ? e1 + below5 : e2 != 0.0 ? e2 + r4 : e3;
    const uint64_t ua = emu_osum_bits(a), ub = emu_osum_bits(b),
                   uc = emu_osum_bits(c), ud = emu_osum_bits(d);
    *hi = h == 0.0 ? emu_osum_zero(ua | ub | uc | ud, ua & ub & uc & ud) : h;
    *lo = l + 0.0;
}

/* Veltkamp's split of a finite double (|x| < 2^995): x = *h + *l, each
 * half of at most 26 significant bits. */
static inline void emu_osum_split(double x, double *h, double *l)
{
    const double c = 134217729.0 * x; /* 2^27 + 1 */
    *h = c - (c - x);
    *l = x - *h;
}

/* a * b = *p + *e exactly (Dekker), for a split once as (ah, al); *e is
 * +0 when zero, as fma(a, b, -p) under nearest-even. */
static inline void emu_osum_two_prod(double a, double ah, double al, double b,
                                     double *p, double *e)
{
    double bh, bl;
    emu_osum_split(b, &bh, &bl);
    const double prod = a * b;
    const double err = ((ah * bh - prod) + ah * bl + al * bh) + al * bl;
    *p = prod;
    *e = err + 0.0;
}

#endif
