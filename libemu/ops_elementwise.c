/*
 * ops_elementwise.c — elementwise tensor ops: arithmetic, activations,
 * their derivatives, casts and loads.
 *
 * Called by the layers (nn), the CLI and the tests.  Every op here hands
 * the choke point (emu_commit, ops_core.c) a pre-rounding value per output
 * that makes the one output rounding a correct rounding of the exact
 * result, in every deterministic mode and for every output format the
 * carrier holds:
 *
 *   add, sub, add_bias     TwoSum: hi + lo exact.
 *   mul, scale, square     exact in one double (carrier values are binary32).
 *   axpy                   exact product, then TwoSum.
 *   div; log and sqrt      q = fl(a/b), r = fma(-q, b, a) exact: q + r/b
 *     backward             (r/b rounded; its sign and zeroness exact).
 *   sqrt                   s = fl(sqrt a), lo = fma(-s, s, a) / 2s.
 *   neg abs relu leaky     exact selections and exact products; so are the
 *     relu clamp           backward ops of relu, leaky relu, abs, neg,
 *                          square and exp (dy * y).
 *   tanh, sigmoid backward dy (1 - y^2) = dy - (dy y) y, dy y (1 - y) =
 *                          dy y - (dy y) y: three exact doubles, summed
 *                          into hi + lo by sum3().
 *   exp log tanh sigmoid   binary64 libm, checked, with an MPFR fallback:
 *     gelu, gelu backward  see "Transcendental functions" below; under
 *                          the deterministic modes gelu (backward),
 *                          sigmoid and tanh try a cheaper evaluation of
 *                          proven error first (their sections below).
 *
 * The scalar operations of emu/arith.h are the specification of the
 * arithmetic ops (special cases, signs of zero, SR words), and the tests
 * hold the two bit-identical.  Stochastic rounding takes element i's word
 * from stream op_index (emu_commit does that); for the transcendental
 * functions the probability is exact to about 2^-40 of an ulp.
 *
 * Outputs may alias inputs: emu_commit calls the MPFR reference and the
 * NaN classifier on the op's inputs before it writes the output.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

/* ---- names ------------------------------------------------------------- */

static const char *const unary_names[EMU_UNARY_COUNT] = {
    [EMU_UNARY_NEG] = "neg",         [EMU_UNARY_ABS] = "abs",
    [EMU_UNARY_RELU] = "relu",       [EMU_UNARY_LEAKY_RELU] = "leaky_relu",
    [EMU_UNARY_GELU] = "gelu",       [EMU_UNARY_TANH] = "tanh",
    [EMU_UNARY_SIGMOID] = "sigmoid", [EMU_UNARY_EXP] = "exp",
    [EMU_UNARY_LOG] = "log",         [EMU_UNARY_SQRT] = "sqrt",
    [EMU_UNARY_SQUARE] = "square",   [EMU_UNARY_CLAMP] = "clamp",
};

/* Site kinds of the backward ops ("relu_backward", ...). */
static const char *const backward_kinds[EMU_UNARY_COUNT] = {
    [EMU_UNARY_NEG] = "neg_backward",
    [EMU_UNARY_ABS] = "abs_backward",
    [EMU_UNARY_RELU] = "relu_backward",
    [EMU_UNARY_LEAKY_RELU] = "leaky_relu_backward",
    [EMU_UNARY_GELU] = "gelu_backward",
    [EMU_UNARY_TANH] = "tanh_backward",
    [EMU_UNARY_SIGMOID] = "sigmoid_backward",
    [EMU_UNARY_EXP] = "exp_backward",
    [EMU_UNARY_LOG] = "log_backward",
    [EMU_UNARY_SQRT] = "sqrt_backward",
    [EMU_UNARY_SQUARE] = "square_backward",
};

const char *emu_unary_name(emu_unary f)
{
    return (unsigned)f < EMU_UNARY_COUNT ? unary_names[f] : "?";
}

/* ---- exact values of the arithmetic ------------------------------------ */

/* The exact sum x + y as hi + lo, IEEE special cases as emu_add has them:
 * an exact zero sum is +0, or -0 toward -inf, unless both are zeros of
 * one sign. */
static void exact_sum(double x, double y, emu_rnd mode, double *hi,
                      double *lo)
{
    *lo = 0.0;
    if (isnan(x) || isnan(y)) {
        *hi = NAN;
        return;
    }
    if (isinf(x) || isinf(y)) {
        *hi = isinf(x) && isinf(y) && signbit(x) != signbit(y) ? NAN
                                                              : x + y;
        return;
    }
    emu_two_sum(x, y, hi, lo);
    if (*hi == 0.0 && *lo == 0.0) {
        if (!(x == 0.0 && y == 0.0 && signbit(x) == signbit(y)))
            *hi = mode == EMU_RD ? -0.0 : 0.0;
    }
}

/* exact_sum of m pairs a[j] + b[j] (b[j] negated if neg) of binary32
 * values.  In runs of SUM_RUN without an infinity or a NaN (loops of
 * constant length, which gcc -O2 vectorises) it is TwoSum alone: under
 * the default environment (the guard holds it) an exact zero sum of
 * finite values is already +0, or the zeros' common sign, which is
 * exact_sum's answer in every mode but toward -inf.  That mode, runs
 * with a special value and the tail take exact_sum element by element.
 * The runs are compiled for each instruction-set level (the same IEEE
 * operations lane by lane, so the same bits; test_ops_elementwise runs at
 * each level): AVX-512 forms eight sums a vector where the baseline forms
 * two. */
enum { SUM_RUN = 64 };

/* The runs of exact_sums from j0 on; returns where they stopped (a run
 * with a special value, or fewer than SUM_RUN left).  *nz gets the low
 * parts' bits past the sign ORed in (emu_any_nonzero's test, in the same
 * vector loop rather than a scalar pass over lo afterwards). */
static EMU_KERNEL_INLINE size_t sum_runs(const float *a, const float *b,
                                         bool neg, size_t j0, size_t m,
                                         double *hi, double *lo,
                                         uint64_t *nz)
{
    uint64_t acc = 0;
    for (; j0 + SUM_RUN <= m; j0 += SUM_RUN) {
        /* Local copies: the loops then need no alias checks. */
        float fa[SUM_RUN], fb[SUM_RUN];
        uint32_t ua[SUM_RUN], ub[SUM_RUN], special = 0;
        memcpy(fa, a + j0, sizeof fa);
        memcpy(fb, b + j0, sizeof fb);
        memcpy(ua, fa, sizeof ua);
        memcpy(ub, fb, sizeof ub);
        for (int j = 0; j < SUM_RUN; j++)
            special |= (uint32_t)((ua[j] & 0x7f800000u) == 0x7f800000u) |
                       (uint32_t)((ub[j] & 0x7f800000u) == 0x7f800000u);
        if (special)
            break; /* this run and the rest one by one */
        double h[SUM_RUN], l[SUM_RUN];
        if (neg)
            for (int j = 0; j < SUM_RUN; j++)
                emu_two_sum(fa[j], -(double)fb[j], &h[j], &l[j]);
        else
            for (int j = 0; j < SUM_RUN; j++)
                emu_two_sum(fa[j], fb[j], &h[j], &l[j]);
        for (int j = 0; j < SUM_RUN; j++)
            acc |= d2u(l[j]) << 1;
        memcpy(hi + j0, h, sizeof h);
        memcpy(lo + j0, l, sizeof l);
    }
    *nz |= acc;
    return j0;
}

#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX512
static size_t sum_runs_avx512(const float *a, const float *b, bool neg,
                              size_t m, double *hi, double *lo, uint64_t *nz)
{
    return sum_runs(a, b, neg, 0, m, hi, lo, nz);
}

EMU_ISA_TARGET_AVX2
static size_t sum_runs_avx2(const float *a, const float *b, bool neg,
                            size_t m, double *hi, double *lo, uint64_t *nz)
{
    return sum_runs(a, b, neg, 0, m, hi, lo, nz);
}
#endif

/* Returns whether a low part is not a zero (emu_any_nonzero of lo). */
static inline bool exact_sums(const float *a, const float *b, bool neg,
                              emu_rnd mode, size_t m, double *hi, double *lo)
{
    size_t j0 = 0;
    uint64_t nz = 0;
    if (mode != EMU_RD) {
#if EMU_HAVE_ISA_CLONES
        const emu_isa isa = emu_isa_active();
        if (isa >= EMU_ISA_AVX512)
            j0 = sum_runs_avx512(a, b, neg, m, hi, lo, &nz);
        else if (isa >= EMU_ISA_AVX2)
            j0 = sum_runs_avx2(a, b, neg, m, hi, lo, &nz);
        else
#endif
            j0 = sum_runs(a, b, neg, 0, m, hi, lo, &nz);
    }
    for (size_t j = j0; j < m; j++) {
        exact_sum(a[j], neg ? -(double)b[j] : (double)b[j], mode, &hi[j],
                  &lo[j]);
        nz |= d2u(lo[j]) << 1;
    }
    return nz != 0;
}

/* x * y: exact for carrier values (24 + 24 bits, no overflow or
 * underflow in binary64); 0 * inf is NaN. */
static double exact_mul(double x, double y)
{
    return x * y;
}

/* x / y as q + r/y, as emu_div: the quotient's low part is rounded, but
 * its sign and zeroness are exact, which is all a deterministic rounding
 * to p <= 24 bits reads (every tie point of such a format is a double). */
static void exact_div(double x, double y, double *hi, double *lo)
{
    *lo = 0.0;
    if (isnan(x) || isnan(y) || (x == 0.0 && y == 0.0) ||
        (isinf(x) && isinf(y))) {
        *hi = isnan(x) ? x : isnan(y) ? y : NAN;
        return;
    }
    if (y == 0.0 || isinf(x) || isinf(y) || x == 0.0) {
        *hi = x / y; /* exact: an infinity or a signed zero */
        return;
    }
    double q = x / y;
    *hi = q;
    *lo = fma(-q, y, x) / y;
}

/* a * x + y with one rounding, special cases as emu_fma. */
static void exact_fma(double a, double x, double y, emu_rnd mode, double *hi,
                      double *lo)
{
    *lo = 0.0;
    if ((isinf(a) && x == 0.0) || (a == 0.0 && isinf(x))) {
        *hi = NAN;
        return;
    }
    if (isnan(a) || isnan(x) || isnan(y)) {
        *hi = NAN;
        return;
    }
    exact_sum(a * x, y, mode, hi, lo); /* the product is exact */
}

/* sqrt(x) as s + lo, as emu_sqrt. */
static void exact_sqrt(double x, double *hi, double *lo)
{
    *lo = 0.0;
    if (isnan(x) || x < 0.0) {
        *hi = isnan(x) ? x : NAN;
        return;
    }
    if (x == 0.0 || isinf(x)) {
        *hi = x; /* sqrt(-0) = -0 */
        return;
    }
    double s = sqrt(x);
    *hi = s;
    *lo = fma(-s, s, x) / (2.0 * s);
}

static bool last_bit_even(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 1) == 0;
}

/* hi + lo = a + b + c for three doubles (magnitudes far from binary64's
 * limits), with hi = RN(a + b + c) and lo of exact sign, zero iff the sum
 * is hi.  The algorithm of Boldo and Melquiond ("Emulation of FMA and
 * correctly-rounded sums: proved algorithms using rounding to odd", IEEE
 * TC 57(4), 2008): RN(th + RO(tl + ul)) = RN(a + b + c).  The remainder
 * (th + v - hi) + (tl + ul - v) keeps the sign of its first term when that
 * is non-zero: v is odd, so the first is a multiple of ulp(v) while the
 * second is below ulp(v). */
static void sum3(double a, double b, double c, double *hi, double *lo)
{
    double uh, ul, th, tl, sh, sl;
    emu_two_sum(b, c, &uh, &ul);
    emu_two_sum(a, uh, &th, &tl);
    emu_two_sum(tl, ul, &sh, &sl);
    double v = sh, d = sl; /* v = RO(tl + ul), d = tl + ul - v (signed) */
    if (sl != 0.0 && last_bit_even(sh)) {
        v = nextafter(sh, sl > 0.0 ? INFINITY : -INFINITY);
        d = (sh - v) + sl; /* sh - v exact; the sign of the sum exact */
    }
    double r;
    emu_two_sum(th, v, hi, &r);
    *lo = r != 0.0 ? r : d;
}

/* dy * (1 - y^2) exactly: dy - (dy y) y, dy y exact, its product with y
 * split by fma. */
static void exact_tanh_grad(double dy, double y, double *hi, double *lo)
{
    *lo = 0.0;
    if (!isfinite(dy) || !isfinite(y)) {
        *hi = dy * (1.0 - y * y);
        return;
    }
    double a = dy * y;
    double u = a * y, w = fma(a, y, -u);
    sum3(dy, -u, -w, hi, lo);
    if (*hi == 0.0 && *lo == 0.0)
        *hi = dy * (1.0 - y * y); /* the sign IEEE gives an exact zero */
}

/* dy * y * (1 - y) exactly: (dy y) - (dy y) y. */
static void exact_sigmoid_grad(double dy, double y, double *hi, double *lo)
{
    *lo = 0.0;
    if (!isfinite(dy) || !isfinite(y)) {
        *hi = dy * y * (1.0 - y);
        return;
    }
    double a = dy * y;
    double u = a * y, w = fma(a, y, -u);
    sum3(a, -u, -w, hi, lo);
    if (*hi == 0.0 && *lo == 0.0)
        *hi = a * (1.0 - y);
}

/* ---- transcendental functions ------------------------------------------
 *
 * exp, log, tanh, sigmoid, gelu (and gelu's derivative) are evaluated in
 * binary64 with the C library, whose error is far below the spacing of
 * any carrier format; the evaluation y then rounds to the same value as
 * the exact f(x) unless a rounding boundary of the output format lies
 * between them.  The boundaries of every deterministic mode — values of
 * the format, midpoints, and the two points the tininess-after test
 * compares with — all lie on the grid of multiples of 2^(max(e, emin-1)-p)
 * around a value of binade 2^e.  So each evaluation comes with a relative
 * error bound eps (generous: 5 to 60 times the C library's documented
 * worst case), and
 *
 *   settled(y, eps): no grid point within eps |y| of y  ->  use y;
 *   y on a known asymptote (tanh x ~ x or ~ +-1, exp x ~ 1, sigmoid x ~ 1
 *     or ~ 1/2, gelu x ~ x or ~ x/2), where the side of f(x) is known
 *     from an inequality (|tanh x| < |x|, ...)  ->  y nudged one binary64
 *     ulp to that side, which lies in the same gap between boundaries;
 *   otherwise (f(x) within ~2^-45 of a boundary: a hard case)  ->  f(x)
 *     rounded to odd at 53 bits by MPFR, which rounds to any p <= 51
 *     format exactly as f(x) would (Boldo & Melquiond).
 *
 * Results below 2^-900 or beyond 2^(emax+2) need no care: every rounding
 * treats such values of one sign alike.  An exact result (exp 0 = 1,
 * log 1 = 0, sigmoid 0 = 1/2, gelu'(0) = 1/2, f(0) = 0) is returned
 * exactly; every other result at a binary32 argument is transcendental,
 * so never a boundary, and the MPFR loop terminates.
 *
 * Hence these ops are correctly rounded for every carrier output format
 * and every deterministic mode, on the condition that the C library meets
 * the bounds below (glibc's documented maxima: exp, log 1 ulp; tanh 2;
 * erfc 5).  tests/test_transcendental.c proves the outcome (not just the
 * bound) exhaustively for every binary16, bfloat16 and 8-bit input and
 * measures the library's actual errors (at most 0.5, 0.5, 2.0 and 2.4
 * ulps there).  Cost: the fast path is the libm call plus a dozen
 * operations (40-90 ns an element with the rounding); the MPFR path
 * (1-20 us) is never taken for binary16 or bfloat16 inputs into binary16,
 * bfloat16, e4m3 or e5m2, nor for 8-bit inputs into their own format (all
 * inputs tried), about once per 10^6 binary32 inputs into binary32, next
 * to the zero of gelu' (x = -0.7518) for binary32 gelu backward, and
 * never in the asymptotic ranges. */

/* Relative error bounds of the binary64 evaluations (see above). */
#define EPS_EXP 0x1p-47
#define EPS_LOG 0x1p-47
#define EPS_TANH 0x1p-46
#define EPS_SIGMOID 0x1p-46
/* How close to an asymptote counts as on it: far below the relative gap
 * 2^-26 between a 24-bit number and any other boundary of a p <= 24
 * format, far above eps. */
#define TIGHT 0x1p-40

/* 1/sqrt(2) and 1/sqrt(2 pi), rounded to nearest (checked with MPFR). */
#define INV_SQRT2 0x1.6a09e667f3bcdp-1
#define INV_SQRT2PI 0x1.9884533d43651p-2

/* The exponent, scaling and integer rounding come from the bits (a is a
 * normal double here, 2^-g a normal power of two, m >= 0 and exact), not
 * from frexp, ldexp and nearbyint: the activations of fused ops (the
 * LSTM's gates) call this once an element. */
static bool settled(const emu_format *f, double y, double eps)
{
    double a = fabs(y);
    if (a < 0x1p-900)
        return true;
    if (!isfinite(a))
        return false; /* the slow path decides (never reached from here) */
    int e = (int)(d2u(a) >> 52) - 1023; /* 2^e <= a < 2^(e+1) */
    if (e >= f->emax + 2)
        return true;
    int g = (e > f->emin - 1 ? e : f->emin - 1) - f->p;
    double m = g > -1023 && g < 1023 ? a * u2d((uint64_t)(1023 - g) << 52)
                                     : ldexp(a, -g); /* exact */
    /* nearest integer, ties to even (the environment is the default) */
    double r = m < 0x1p52 ? (m + 0x1p52) - 0x1p52 : m;
    double d = fabs(m - r);
    return d > eps * m;
}

/* |y - A| <= TIGHT |A|: y sits on the asymptote A. */
static bool near(double y, double A)
{
    return fabs(y - A) <= TIGHT * fabs(A);
}

/* A, moved one binary64 ulp up (side > 0) or down. */
static double nudge(double A, int side)
{
    return nextafter(A, side > 0 ? INFINITY : -INFINITY);
}

/* ---- the MPFR path: f(x) rounded to odd at 53 bits --------------------- */

typedef enum tr_fn {
    TR_EXP, TR_LOG, TR_TANH, TR_SIGMOID, TR_GELU, TR_GELU_GRAD
} tr_fn;

/* A 53-bit MPFR value made odd (f(x) is transcendental, so never a
 * double) and brought to a double; extreme magnitudes are clamped to
 * values every carrier rounding treats alike. */
static double odd_double(mpfr_srcptr r)
{
    if (mpfr_zero_p(r))
        return mpfr_signbit(r) ? -0x1p-1000 : 0x1p-1000;
    if (mpfr_inf_p(r) || mpfr_get_exp(r) > 1000)
        return mpfr_signbit(r) ? -0x1p1000 : 0x1p1000;
    if (mpfr_get_exp(r) < -1000)
        return mpfr_signbit(r) ? -0x1p-1000 : 0x1p-1000;
    double d = mpfr_get_d(r, MPFR_RNDZ); /* exact: 53 bits, normal range */
    if (last_bit_even(d))
        d = nextafter(d, signbit(d) ? -INFINITY : INFINITY);
    return d;
}

/* An approximation t of f(x) (times dy for the derivative) and the bound
 * "error <= 2^(EXP(t) - err)" at working precision w (the analysis is in
 * the comments).  Returns err. */
static long approx(tr_fn fn, double x, double dy, mpfr_ptr t, mpfr_ptr u,
                   mpfr_ptr v, mpfr_prec_t w)
{
    mpfr_set_prec(t, w);
    mpfr_set_prec(u, w);
    mpfr_set_prec(v, w);
    if (fn == TR_SIGMOID) {
        /* 1 / (1 + e^-x): three roundings, relative error < 4 * 2^-w. */
        mpfr_set_d(u, -x, MPFR_RNDN);
        mpfr_exp(u, u, MPFR_RNDN);
        mpfr_add_ui(u, u, 1, MPFR_RNDN);
        mpfr_ui_div(t, 1, u, MPFR_RNDN);
        return (long)w - 2;
    }
    /* z = -x / sqrt 2 with relative error < 2.01 * 2^-w.  erfc's relative
     * condition |z erfc'(z) / erfc(z)| is < 1.2 |z| for z <= 0 and, by the
     * Mills-ratio bound erfc(z) > 2 e^(-z^2) / (sqrt(pi) (z + sqrt(z^2+2))),
     * < (2z + 2) z for z > 0. */
    double az = fabs(x) * 0.7072;
    double cond = x >= 0.0 ? 1.2 * az : (2.0 * az + 2.0) * az;
    mpfr_sqrt_ui(u, 2, MPFR_RNDN);
    mpfr_set_d(v, -x, MPFR_RNDN);
    mpfr_div(u, v, u, MPFR_RNDN);
    mpfr_erfc(u, u, MPFR_RNDN);      /* rel. error < (1 + 2.01 cond) 2^-w */
    if (fn == TR_GELU) {
        mpfr_mul_d(t, u, x, MPFR_RNDN);
        mpfr_div_2ui(t, t, 1, MPFR_RNDN);
        double rel = 3.0 + 2.01 * cond; /* in units of 2^-w */
        return (long)w - (long)ceil(log2(rel)) - 1;
    }
    /* gelu'(x) dy = (erfc(z) / 2 + x e^(-x^2/2) / sqrt(2 pi)) dy: the
     * terms' errors are bounded absolutely (the sum may cancel). */
    mpfr_div_2ui(u, u, 1, MPFR_RNDN);      /* t1, rel < (2 + 2.01 cond) */
    mpfr_set_d(v, x, MPFR_RNDN);
    mpfr_sqr(v, v, MPFR_RNDN);             /* exact: 48 bits */
    mpfr_div_2ui(v, v, 1, MPFR_RNDN);
    mpfr_neg(v, v, MPFR_RNDN);
    mpfr_exp(v, v, MPFR_RNDN);
    mpfr_mul_d(v, v, x, MPFR_RNDN);
    mpfr_const_pi(t, MPFR_RNDN);
    mpfr_mul_2ui(t, t, 1, MPFR_RNDN);
    mpfr_sqrt(t, t, MPFR_RNDN);
    mpfr_div(v, v, t, MPFR_RNDN);          /* t2, rel < 6 */
    double e1 = (2.0 + 2.01 * cond) * fabs(mpfr_get_d(u, MPFR_RNDA));
    double e2 = 6.0 * fabs(mpfr_get_d(v, MPFR_RNDA));
    mpfr_set_prec(t, w + 24);
    mpfr_add(t, u, v, MPFR_RNDN);          /* + 2^-24 ulp of the sum */
    double e3 = fabs(mpfr_get_d(t, MPFR_RNDA));
    mpfr_prec_round(t, w + 48, MPFR_RNDN); /* exact */
    mpfr_mul_d(t, t, dy, MPFR_RNDN);       /* exact: (w + 24) x 24 bits */
    if (mpfr_zero_p(t))
        return 0;
    /* |error| < (e1 + e2 + e3) |dy| 2^-w (each e a 1 + 2^-50 overestimate). */
    double bound = (e1 + e2 + e3) * fabs(dy) * (1.0 + 0x1p-40);
    int be;
    frexp(bound, &be); /* bound < 2^be */
    return (long)mpfr_get_exp(t) - (be - (long)w);
}

/* f(x) (or dy gelu'(x)) rounded to odd at 53 bits. */
static double slow_ro53(tr_fn fn, double x, double dy)
{
    const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
    const mpfr_flags_t flags = mpfr_flags_save();
    mpfr_set_emin(mpfr_get_emin_min());
    mpfr_set_emax(mpfr_get_emax_max());
    mpfr_t r, t, u, v;
    mpfr_inits2(53, r, t, u, v, (mpfr_ptr)0);
    double out;
    if (fn == TR_EXP || fn == TR_LOG || fn == TR_TANH) {
        /* MPFR rounds these correctly: toward zero, then odd. */
        mpfr_set_d(t, x, MPFR_RNDN);
        int inex = fn == TR_EXP ? mpfr_exp(r, t, MPFR_RNDZ)
                 : fn == TR_LOG ? mpfr_log(r, t, MPFR_RNDZ)
                                : mpfr_tanh(r, t, MPFR_RNDZ);
        out = inex ? odd_double(r) : mpfr_get_d(r, MPFR_RNDN);
    } else {
        /* Ziv's loop: the working precision doubles until the
         * approximation decides the 53-bit rounding toward zero. */
        mpfr_prec_t w = 96 + 2 * (mpfr_prec_t)log2(1.0 + fabs(x));
        for (;;) {
            long err = approx(fn, x, dy, t, u, v, w);
            if (mpfr_zero_p(t) || mpfr_inf_p(t) ||
                mpfr_can_round(t, err, MPFR_RNDN, MPFR_RNDZ, 53) ||
                w > 1 << 14)
                break;
            w *= 2;
        }
        mpfr_set(r, t, MPFR_RNDZ);
        out = odd_double(r);
    }
    mpfr_clears(r, t, u, v, (mpfr_ptr)0);
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    mpfr_flags_restore(flags, MPFR_FLAGS_ALL);
    return out;
}

/* ---- the functions ------------------------------------------------------ */

static double tr_exp(const emu_format *f, double x)
{
    if (isnan(x) || x == INFINITY)
        return x;
    if (x == -INFINITY)
        return 0.0;
    if (x == 0.0)
        return 1.0;
    if (x > 709.0)
        return 0x1p1000; /* beyond every carrier format */
    double y = exp(x);
    if (y == 0.0)
        return 0x1p-1000;
    if (near(y, 1.0))
        return nudge(1.0, x > 0.0 ? 1 : -1);
    return settled(f, y, EPS_EXP) ? y : slow_ro53(TR_EXP, x, 0.0);
}

static double tr_log(const emu_format *f, double x)
{
    if (isnan(x) || x < 0.0)
        return isnan(x) ? x : NAN;
    if (x == 0.0)
        return -INFINITY;
    if (x == INFINITY)
        return x;
    if (x == 1.0)
        return 0.0;
    double y = log(x);
    return settled(f, y, EPS_LOG) ? y : slow_ro53(TR_LOG, x, 0.0);
}

__attribute__((noinline)) static double tr_tanh(const emu_format *f,
                                                double x)
{
    if (isnan(x) || x == 0.0)
        return x;
    if (isinf(x))
        return x > 0.0 ? 1.0 : -1.0;
    double y = tanh(x);
    /* |tanh x| < min(|x|, 1) */
    if (near(y, x))
        return nudge(x, x > 0.0 ? -1 : 1);
    if (near(y, copysign(1.0, x)))
        return nudge(copysign(1.0, x), x > 0.0 ? -1 : 1);
    return settled(f, y, EPS_TANH) ? y : slow_ro53(TR_TANH, x, 0.0);
}

__attribute__((noinline)) static double tr_sigmoid(const emu_format *f,
                                                   double x)
{
    if (isnan(x))
        return x;
    if (isinf(x))
        return x > 0.0 ? 1.0 : 0.0;
    if (x == 0.0)
        return 0.5;
    double y;
    if (x > 0.0) {
        y = 1.0 / (1.0 + exp(-x));
    } else {
        double t = exp(x);
        y = t / (1.0 + t);
    }
    /* 0 < sigmoid x < 1, and sigmoid x - 1/2 has the sign of x. */
    if (y == 0.0)
        return 0x1p-1000;
    if (near(y, 1.0))
        return nudge(1.0, -1);
    if (near(y, 0.5))
        return nudge(0.5, x > 0.0 ? 1 : -1);
    return settled(f, y, EPS_SIGMOID) ? y : slow_ro53(TR_SIGMOID, x, 0.0);
}

/* The relative error of the binary64 erfc(-x / sqrt 2) and the products
 * around it, in units of 2^-52: the library's 5 ulps, and the rounded
 * argument's relative error 2^-52 amplified by erfc's condition number
 * (x^2 + 1.42|x| for x < 0, 0.85 |x| for x > 0). */
static double gelu_eps(double x)
{
    return (24.0 + 2.0 * (x * x + 2.0 * fabs(x))) * 0x1p-52;
}

__attribute__((noinline)) static double tr_gelu(const emu_format *f,
                                                double x)
{
    if (isnan(x) || x == 0.0 || x == INFINITY)
        return x;
    if (x == -INFINITY)
        return -0.0; /* the limit, from below */
    double y = 0.5 * x * erfc(-x * INV_SQRT2);
    /* x/2 < gelu x < max(x, 0) for x != 0 */
    if (y == 0.0)
        return -0x1p-1000;
    if (x > 0.0 && near(y, x))
        return nudge(x, -1);
    if (near(y, 0.5 * x))
        return nudge(0.5 * x, 1);
    return settled(f, y, gelu_eps(x)) ? y : slow_ro53(TR_GELU, x, 0.0);
}

/* dy * gelu'(x), gelu'(x) = Phi(x) + x phi(x). */
__attribute__((noinline)) static double
tr_gelu_grad(const emu_format *f, double dy, double x)
{
    if (isnan(x) || isnan(dy))
        return x + dy;
    if (isinf(x))
        return dy * (x > 0.0 ? 1.0 : 0.0); /* the limits 1 and 0 */
    if (x == 0.0)
        return dy * 0.5;
    double t1 = 0.5 * erfc(-x * INV_SQRT2);
    double t2 = x * exp(-0.5 * (x * x)) * INV_SQRT2PI;
    double d = t1 + t2;
    /* gelu' < 0 far left, where it underflows: any tiny value of that
     * sign keeps dy d far below every carrier format and non-zero. */
    if (fabs(d) < 0x1p-700)
        d = x < 0.0 ? -0x1p-700 : 0x1p-700;
    if (dy == 0.0 || isinf(dy))
        return dy * d;
    /* gelu'(x) = 1 - Q(x) + x phi(x) > 1 for x > 1 (Q(x) < phi(x)/x),
     * and gelu'(x) - 1/2 = (Phi(x) - 1/2) + x phi(x) has the sign of x.
     * The product with a nudged d lies strictly on that side of dy d. */
    if (x > 2.0 && near(d, 1.0))
        return dy * nudge(1.0, 1);
    if (near(d, 0.5))
        return dy * nudge(0.5, x > 0.0 ? 1 : -1);
    /* d's error is absolute, bounded by the terms' relative errors; the
     * product with dy is rounded once more. */
    double err = gelu_eps(x) * fabs(t1) + 16.0 * 0x1p-52 * fabs(t2) +
                 0x1p-52 * fabs(d);
    double y = dy * d;
    if (settled(f, y, err / fabs(d) + 0x1p-52))
        return y;
    return slow_ro53(TR_GELU_GRAD, x, dy);
}

/* ---- gelu's table-driven fast path ---------------------------------------
 *
 * The C library's erfc costs about 150 instructions; gelu and its
 * derivative run once an element of every GPT MLP.  For the deterministic
 * modes and |x| <= GT_XMAX, Phi(x) = erfc(-x / sqrt 2) / 2 and
 * gelu'(x) = Phi(x) + x phi(x) are evaluated as Taylor polynomials of
 * degree GT_DEG around the nearest of the centres c = k / GT_STEPS, with
 * coefficients computed once by MPFR (emu_gelu_table_init) and a
 * rigorous absolute error bound per centre:
 *
 *   remainder  h^K / K! max|f^(K)| on [c - H, c + H] (K = GT_DEG + 1,
 *              H = 1 / (2 GT_STEPS)), with Phi^(K) = (-1)^(K-1) He_(K-1)
 *              phi and gelu'^(K) = (K+1) phi^(K-1) + x phi^(K),
 *              phi^(m) = (-1)^m He_m phi; |He_m(xi)| <= A_m(|xi|), A the
 *              Hermite recurrence with all signs positive, and phi at its
 *              largest point of the interval;
 *   Horner     (2 K + 2) 2^-53 sum |a_k| H^k: one rounding a step (two
 *              without a fused multiply-add) and the coefficients'
 *              rounding to binary64;
 *   argument   h = x - c, rounded if x is not on the 2^-58 grid: at most
 *              2^-53 H max|f'|;
 *
 * the sum doubled (the bound's own binary64 arithmetic).  The value y is
 * then accepted when no rounding boundary of the output format lies
 * within that bound of y (settled_abs, settled's absolute twin); else
 * the exact path above (tr_gelu, tr_gelu_grad) decides, with the same
 * result.  Stochastic rounding keeps the C library path: its result
 * depends on every bit of the pre-rounding value, not only on the
 * rounding's boundaries, and runs stay bit-identical to earlier builds.
 * tests/test_transcendental.c checks the fast path against MPFR on every
 * binary16 and bfloat16 input and on large binary32 samples.
 *
 * Degree 7 (it was 9): eight coefficients are one 64-byte row, which the
 * vector lanes load as two aligned halves.  The remainder, h^8 / 8! ~
 * 2^-63 times max|f^(8)|, stays below the Horner bound (~2^-49 relative)
 * for |x| <= 3 and reaches ~2^-45.5 relative at x = -4, where Phi is
 * small; a binary32 output is still undecided only about once in 2^20
 * values there, and the result never depends on the degree. */

#define GT_XMAX 8
#define GT_STEPS 32
#define GT_DEG 7
#define GT_N (2 * GT_XMAX * GT_STEPS + 1)

typedef struct gelu_table {
    /* A row is one 64-byte cache line (the alignment below). */
    _Alignas(64) double phi[GT_N][GT_DEG + 1]; /* Taylor coefficients of Phi */
    _Alignas(64) double dphi[GT_N][GT_DEG + 1]; /* and of gelu'              */
    double ephi[GT_N], edphi[GT_N]; /* their absolute error bounds        */
} gelu_table;

static gelu_table gtab;
static _Atomic int gtab_state; /* 0 none, 1 being built, 2 ready */

/* Fills gtab (once; a thread that finds it being built uses the exact
 * path meanwhile).  Returns whether the table is ready. */
static bool gelu_table_ready(void)
{
    if (atomic_load_explicit(&gtab_state, memory_order_acquire) == 2)
        return true;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&gtab_state, &expected, 1))
        return false;
    const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
    const mpfr_flags_t flags = mpfr_flags_save();
    mpfr_set_emin(mpfr_get_emin_min());
    mpfr_set_emax(mpfr_get_emax_max());
    enum { K = GT_DEG + 1 };
    mpfr_t c, pc, ph, he[K + 2], t, u;
    mpfr_inits2(96, c, pc, ph, t, u, (mpfr_ptr)0);
    for (int m = 0; m < K + 2; m++)
        mpfr_init2(he[m], 96);
    const double H = 0.5 / GT_STEPS;
    double kfact = 1.0; /* K! */
    for (int k = 2; k <= K; k++)
        kfact *= k;
    for (int j = 0; j < GT_N; j++) {
        const double cd = (double)(j - GT_XMAX * GT_STEPS) / GT_STEPS;
        mpfr_set_d(c, cd, MPFR_RNDN); /* exact */
        /* Phi(c) = erfc(-c / sqrt 2) / 2, phi(c) = e^(-c^2/2) / sqrt(2 pi) */
        mpfr_sqrt_ui(t, 2, MPFR_RNDN);
        mpfr_neg(u, c, MPFR_RNDN);
        mpfr_div(u, u, t, MPFR_RNDN);
        mpfr_erfc(pc, u, MPFR_RNDN);
        mpfr_div_2ui(pc, pc, 1, MPFR_RNDN);
        mpfr_sqr(u, c, MPFR_RNDN);
        mpfr_div_2ui(u, u, 1, MPFR_RNDN);
        mpfr_neg(u, u, MPFR_RNDN);
        mpfr_exp(ph, u, MPFR_RNDN);
        mpfr_const_pi(t, MPFR_RNDN);
        mpfr_mul_2ui(t, t, 1, MPFR_RNDN);
        mpfr_sqrt(t, t, MPFR_RNDN);
        mpfr_div(ph, ph, t, MPFR_RNDN);
        /* He_0 .. He_(K+1) at c */
        mpfr_set_ui(he[0], 1, MPFR_RNDN);
        mpfr_set(he[1], c, MPFR_RNDN);
        for (int m = 1; m + 1 < K + 2; m++) {
            mpfr_mul(t, c, he[m], MPFR_RNDN);
            mpfr_mul_ui(u, he[m - 1], (unsigned long)m, MPFR_RNDN);
            mpfr_sub(he[m + 1], t, u, MPFR_RNDN);
        }
        /* phi^(m)(c) / k! = (-1)^m He_m(c) phi(c) / k! */
        double sp = 0.0, sd = 0.0, hk = 1.0, fact = 1.0;
        for (int k = 0; k <= GT_DEG; k++) {
            if (k > 0)
                fact *= k;
            if (k == 0) {
                mpfr_set(t, pc, MPFR_RNDN);
                mpfr_mul(u, c, ph, MPFR_RNDN);
                mpfr_add(u, u, pc, MPFR_RNDN); /* Phi + c phi */
            } else {
                /* Phi^(k) = phi^(k-1);  gelu'^(k) = (k+1) phi^(k-1) + c phi^(k) */
                mpfr_mul(t, he[k - 1], ph, MPFR_RNDN);
                if ((k - 1) & 1)
                    mpfr_neg(t, t, MPFR_RNDN);
                mpfr_mul(u, he[k], ph, MPFR_RNDN);
                if (k & 1)
                    mpfr_neg(u, u, MPFR_RNDN);
                mpfr_mul(u, u, c, MPFR_RNDN);
                mpfr_t w;
                mpfr_init2(w, 96);
                mpfr_mul_ui(w, t, (unsigned long)(k + 1), MPFR_RNDN);
                mpfr_add(u, u, w, MPFR_RNDN);
                mpfr_clear(w);
                mpfr_div_d(t, t, fact, MPFR_RNDN); /* fact exact (<= 9!) */
                mpfr_div_d(u, u, fact, MPFR_RNDN);
            }
            gtab.phi[j][k] = mpfr_get_d(t, MPFR_RNDN);
            gtab.dphi[j][k] = mpfr_get_d(u, MPFR_RNDN);
            sp += fabs(gtab.phi[j][k]) * hk;
            sd += fabs(gtab.dphi[j][k]) * hk;
            hk *= H;
        }
        /* Bounds over [c - H, c + H]: M = max |xi|, phi at min |xi|. */
        const double M = fabs(cd) + H;
        const double mn = fabs(cd) > H ? fabs(cd) - H : 0.0;
        const double phimax = exp(-0.5 * mn * mn) * INV_SQRT2PI * 1.001;
        double A[K + 2];
        A[0] = 1.0;
        A[1] = M;
        for (int m = 1; m + 1 < K + 2; m++)
            A[m + 1] = M * A[m] + m * A[m - 1];
        const double hK = pow(H, K) / kfact;
        const double rem_p = hK * A[K - 1] * phimax;
        const double rem_d = hK * ((K + 1) * A[K - 1] + M * A[K]) * phimax;
        const double horner = (2.0 * K + 2.0) * 0x1p-53;
        const double arg_p = 0x1p-53 * H * phimax;
        const double arg_d = 0x1p-53 * H * phimax * (2.0 + M * M);
        gtab.ephi[j] = 2.0 * (rem_p + horner * sp + arg_p);
        gtab.edphi[j] = 2.0 * (rem_d + horner * sd + arg_d);
    }
    for (int m = 0; m < K + 2; m++)
        mpfr_clear(he[m]);
    mpfr_clears(c, pc, ph, t, u, (mpfr_ptr)0);
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    mpfr_flags_restore(flags, MPFR_FLAGS_ALL);
    atomic_store_explicit(&gtab_state, 2, memory_order_release);
    return true;
}

/* Whether every value within err (absolute) of y rounds as y does into f
 * in every deterministic mode: settled() with an absolute bound, which
 * also must leave y's sign certain. */
static bool settled_abs(const emu_format *f, double y, double err)
{
    double a = fabs(y);
    if (!(err < a * 0x1p-30) || !isfinite(a))
        return false;
    if (a < 0x1p-900)
        return true;
    int e = (int)(d2u(a) >> 52) - 1023;
    if (e >= f->emax + 2)
        return true;
    int g = (e > f->emin - 1 ? e : f->emin - 1) - f->p;
    if (g <= -1023 || g >= 1023)
        return false;
    double s = u2d((uint64_t)(1023 - g) << 52); /* 2^-g, exact */
    double m = a * s;
    double r = m < 0x1p52 ? (m + 0x1p52) - 0x1p52 : m;
    return fabs(m - r) > err * s;
}

/* The centre of x's interval and the polynomial's argument. */
static inline int gt_index(double x, double *h)
{
    /* nearest integer to 32 x by the 1.5 * 2^52 trick (|32 x| <= 256) */
    const double big = 0x1.8p52;
    int j = (int)((x * GT_STEPS + big) - big) + GT_XMAX * GT_STEPS;
    *h = x - (double)(j - GT_XMAX * GT_STEPS) * (1.0 / GT_STEPS);
    return j;
}

/* Degree GT_DEG, unrolled; two roundings a step (hostfp.h: no
 * contraction into a fused multiply-add). */
static inline double gt_horner(const double *a, double h)
{
    _Static_assert(GT_DEG == 7, "gt_horner is unrolled for degree 7");
    double s = a[7] * h + a[6];
    s = s * h + a[5];
    s = s * h + a[4];
    s = s * h + a[3];
    s = s * h + a[2];
    s = s * h + a[1];
    return s * h + a[0];
}

/* The boundary test of the hot loops, for outputs in the format's normal
 * range: the boundaries in the binade of 2^e are the multiples of
 * 2^(e-p), so no boundary lies in [y - err, y + err] when the two ends,
 * cut to p + 1 significant bits (mask), are equal (the same binade, the
 * same sign, the same gap).  err is widened by half to cover the
 * roundings of y -+ err (err >= 2^-52 |y| here).  Other cases go to
 * settled_abs. */
typedef struct gt_fmt {
    uint64_t mask;   /* binary64 bits kept: sign, exponent, p fraction bits */
    double min_norm; /* 2^emin                                             */
} gt_fmt;

static gt_fmt gt_fmt_of(const emu_format *f)
{
    /* 2^emin from its bits: carrier formats have emin >= -1022 */
    gt_fmt g = { ~(((uint64_t)1 << (52 - f->p)) - 1),
                 u2d((uint64_t)(1023 + f->emin) << 52) };
    return g;
}

static inline bool gt_decided(const gt_fmt *g, const emu_format *f, double y,
                              double err)
{
    double e = 1.5 * err;
    if (fabs(y) - e >= g->min_norm &&
        ((d2u(y - e) ^ d2u(y + e)) & g->mask) == 0)
        return true;
    return settled_abs(f, y, err);
}

/* gelu of one value (deterministic modes, table ready); the exact path
 * for arguments off the table and for undecided values. */
static inline double fast_gelu1(const gt_fmt *g, const emu_format *f,
                                double v)
{
    if (!(fabs(v) <= GT_XMAX) || v == 0.0)
        return tr_gelu(f, v);
    double h;
    int j = gt_index(v, &h);
    double y = v * gt_horner(gtab.phi[j], h);
    return gt_decided(g, f, y, fabs(v) * gtab.ephi[j] + 0x1p-52 * fabs(y))
               ? y
               : tr_gelu(f, v);
}

/* dy gelu'(x) of one pair, likewise. */
static inline double fast_gelu_grad1(const gt_fmt *g, const emu_format *f,
                                     double d, double v)
{
    if (!(fabs(v) <= GT_XMAX) || v == 0.0 || !isfinite(d) || d == 0.0)
        return tr_gelu_grad(f, d, v);
    double h;
    int j = gt_index(v, &h);
    double y = d * gt_horner(gtab.dphi[j], h);
    return gt_decided(g, f, y, fabs(d) * gtab.edphi[j] + 0x1p-52 * fabs(y))
               ? y
               : tr_gelu_grad(f, d, v);
}

#if EMU_HAVE_ISA_CLONES
#include <immintrin.h>

/* The same, four lanes at a time (AVX2):
 * every lane does fast_gelu1's IEEE operations in its order (no fused
 * multiply-add: target avx2 alone has none, and contraction is off), so a
 * lane the quick test of gt_decided accepts holds the scalar path's value;
 * the other lanes (off the table, zero, NaN, undecided by the quick test)
 * are redone by the scalar path, whose answer they then are.
 *
 * The loops are unrolled by pragma: left rolled, GCC kept the Horner sums
 * and coefficients in stack slots, and each step waited on a store
 * forwarding (this function was ~13% of a gpt fp32 step).  The main loop
 * runs GELU_GROUPS groups of four side by side, each Horner step issued
 * for every group before the next step, so that the groups' independent
 * chains overlap; each group's operations, and so each value, are the
 * scalar path's. */
#define GELU_GROUPS 4

typedef struct gelu_grp {
    __m256d ok;              /* lanes on the table path            */
    __m256d d;               /* x (gelu) or dy (gelu'), 0 off path */
    __m256d h;               /* the polynomial's argument          */
    __m256d et;              /* the centres' error bounds          */
    __m256d c[GT_DEG + 1];   /* the centres' coefficients          */
} gelu_grp;

/* Loads four values (and dy) at x + i and sets up their group. */
EMU_ISA_TARGET_AVX2
static inline __attribute__((always_inline)) void
gelu_avx2_prep(const double *tab, const double *etab, const float *x,
               const float *dy, size_t i, gelu_grp *gp)
{
    const __m256d big = _mm256_set1_pd(0x1.8p52);
    const __m256d steps = _mm256_set1_pd((double)GT_STEPS);
    const __m256d inv_steps = _mm256_set1_pd(1.0 / GT_STEPS);
    const __m256d xmax = _mm256_set1_pd((double)GT_XMAX);
    const __m256d zero = _mm256_setzero_pd();
    const __m256d inf = _mm256_set1_pd(INFINITY);
    const __m256d absmask = _mm256_castsi256_pd(
        _mm256_set1_epi64x(0x7fffffffffffffffLL));
    const __m128i centre = _mm_set1_epi32(GT_XMAX * GT_STEPS);
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    __m256d ok = _mm256_and_pd(
        _mm256_cmp_pd(_mm256_and_pd(v, absmask), xmax, _CMP_LE_OQ),
        _mm256_cmp_pd(v, zero, _CMP_NEQ_OQ));
    __m256d d = v;
    if (dy) {
        d = _mm256_cvtps_pd(_mm_loadu_ps(dy + i));
        ok = _mm256_and_pd(
            ok, _mm256_and_pd(
                    _mm256_cmp_pd(_mm256_and_pd(d, absmask), inf,
                                  _CMP_LT_OQ),
                    _mm256_cmp_pd(d, zero, _CMP_NEQ_OQ)));
    }
    /* lanes off the path computed at 0 (the table's centre row) */
    const __m256d vv = _mm256_and_pd(v, ok);
    gp->ok = ok;
    gp->d = _mm256_and_pd(d, ok);
    const __m256d t = _mm256_sub_pd(
        _mm256_add_pd(_mm256_mul_pd(vv, steps), big), big);
    gp->h = _mm256_sub_pd(vv, _mm256_mul_pd(t, inv_steps));
    /* Each lane's ten coefficients are a row of the table: four rows
     * loaded whole and transposed (gathers are microcoded, and slow on
     * CPUs with the GDS mitigation). */
    int32_t j[4];
    _mm_storeu_si128((__m128i *)(void *)j,
                     _mm_add_epi32(_mm256_cvttpd_epi32(t), centre));
    const double *r0 = tab + (size_t)j[0] * (GT_DEG + 1);
    const double *r1 = tab + (size_t)j[1] * (GT_DEG + 1);
    const double *r2 = tab + (size_t)j[2] * (GT_DEG + 1);
    const double *r3 = tab + (size_t)j[3] * (GT_DEG + 1);
#pragma GCC unroll 2
    for (int q = 0; q < 8; q += 4) {
        const __m256d a0 = _mm256_load_pd(r0 + q);
        const __m256d a1 = _mm256_load_pd(r1 + q);
        const __m256d a2 = _mm256_load_pd(r2 + q);
        const __m256d a3 = _mm256_load_pd(r3 + q);
        const __m256d t0 = _mm256_unpacklo_pd(a0, a1);
        const __m256d t1 = _mm256_unpackhi_pd(a0, a1);
        const __m256d t2 = _mm256_unpacklo_pd(a2, a3);
        const __m256d t3 = _mm256_unpackhi_pd(a2, a3);
        gp->c[q] = _mm256_permute2f128_pd(t0, t2, 0x20);
        gp->c[q + 1] = _mm256_permute2f128_pd(t1, t3, 0x20);
        gp->c[q + 2] = _mm256_permute2f128_pd(t0, t2, 0x31);
        gp->c[q + 3] = _mm256_permute2f128_pd(t1, t3, 0x31);
    }
    _Static_assert(GT_DEG == 7, "the loads above");
    gp->et = _mm256_set_pd(etab[j[3]], etab[j[2]], etab[j[1]], etab[j[0]]);
}

/* The group's value y = d s, stored at out + i, and its boundary test;
 * lanes the quick test does not accept are redone by the scalar path. */
EMU_ISA_TARGET_AVX2
static inline __attribute__((always_inline)) void
gelu_avx2_finish(const gt_fmt *g, const emu_format *f, const float *x,
                 const float *dy, size_t i, const gelu_grp *gp, __m256d s,
                 double *out)
{
    const __m256d eps = _mm256_set1_pd(0x1p-52);
    const __m256d half3 = _mm256_set1_pd(1.5);
    const __m256d min_norm = _mm256_set1_pd(g->min_norm);
    const __m256d absmask = _mm256_castsi256_pd(
        _mm256_set1_epi64x(0x7fffffffffffffffLL));
    const __m256i mask = _mm256_set1_epi64x((long long)g->mask);
    const __m256d y = _mm256_mul_pd(gp->d, s);
    const __m256d ay = _mm256_and_pd(y, absmask);
    const __m256d err = _mm256_add_pd(
        _mm256_mul_pd(_mm256_and_pd(gp->d, absmask), gp->et),
        _mm256_mul_pd(eps, ay));
    const __m256d e = _mm256_mul_pd(half3, err);
    const __m256d norm = _mm256_cmp_pd(_mm256_sub_pd(ay, e), min_norm,
                                       _CMP_GE_OQ);
    const __m256i diff = _mm256_and_si256(
        _mm256_xor_si256(_mm256_castpd_si256(_mm256_sub_pd(y, e)),
                         _mm256_castpd_si256(_mm256_add_pd(y, e))),
        mask);
    const __m256d same = _mm256_castsi256_pd(
        _mm256_cmpeq_epi64(diff, _mm256_setzero_si256()));
    const int done = _mm256_movemask_pd(
        _mm256_and_pd(gp->ok, _mm256_and_pd(norm, same)));
    _mm256_storeu_pd(out + i, y);
    if (done != 0xf)
        for (int k = 0; k < 4; k++)
            if (!(done >> k & 1))
                out[i + (size_t)k] =
                    dy ? fast_gelu_grad1(g, f, dy[i + (size_t)k],
                                         x[i + (size_t)k])
                       : fast_gelu1(g, f, x[i + (size_t)k]);
}

/* dy NULL: gelu; else dy gelu'.  Returns the elements done (a multiple
 * of four). */
EMU_ISA_TARGET_AVX2
static size_t gelu_avx2(const gt_fmt *g, const emu_format *f, const float *x,
                        const float *dy, size_t m, double *out)
{
    const double *tab = dy ? &gtab.dphi[0][0] : &gtab.phi[0][0];
    const double *etab = dy ? gtab.edphi : gtab.ephi;
    size_t i = 0;
    for (; i + 4 * GELU_GROUPS <= m; i += 4 * GELU_GROUPS) {
        gelu_grp gp[GELU_GROUPS];
        __m256d s[GELU_GROUPS];
        #pragma GCC unroll 8
        for (int k = 0; k < GELU_GROUPS; k++)
            gelu_avx2_prep(tab, etab, x, dy, i + 4 * (size_t)k, &gp[k]);
        #pragma GCC unroll 8
        for (int k = 0; k < GELU_GROUPS; k++)
            s[k] = _mm256_add_pd(_mm256_mul_pd(gp[k].c[7], gp[k].h),
                                 gp[k].c[6]);
        #pragma GCC unroll 8
        for (int q = 5; q >= 0; q--)
            #pragma GCC unroll 8
            for (int k = 0; k < GELU_GROUPS; k++)
                s[k] = _mm256_add_pd(_mm256_mul_pd(s[k], gp[k].h),
                                     gp[k].c[q]);
        #pragma GCC unroll 8
        for (int k = 0; k < GELU_GROUPS; k++)
            gelu_avx2_finish(g, f, x, dy, i + 4 * (size_t)k, &gp[k], s[k],
                             out);
    }
    for (; i + 4 <= m; i += 4) {
        gelu_grp gp;
        gelu_avx2_prep(tab, etab, x, dy, i, &gp);
        __m256d s = _mm256_add_pd(_mm256_mul_pd(gp.c[7], gp.h), gp.c[6]);
        #pragma GCC unroll 8
        for (int q = 5; q >= 0; q--)
            s = _mm256_add_pd(_mm256_mul_pd(s, gp.h), gp.c[q]);
        gelu_avx2_finish(g, f, x, dy, i, &gp, s, out);
    }
    return i;
}

/* The same, eight lanes at a time (AVX-512; the AVX2 lanes were ~9% of a
 * gpt fp32 step on an AVX-512 machine): each lane does fast_gelu1's IEEE
 * operations in its order, as above.  Two groups side by side (each holds
 * eleven registers); the eight coefficient rows of a group are loaded
 * whole and transposed, the error bounds gathered. */
#define GELU512_GROUPS 2

typedef struct gelu_grp512 {
    __mmask8 ok;             /* lanes on the table path            */
    __m512d d;               /* x (gelu) or dy (gelu'), 0 off path */
    __m512d h;               /* the polynomial's argument          */
    __m512d et;              /* the centres' error bounds          */
    __m512d c[GT_DEG + 1];   /* the centres' coefficients          */
} gelu_grp512;

EMU_ISA_TARGET_AVX512
static inline __attribute__((always_inline)) void
gelu_avx512_prep(const double *tab, const double *etab, const float *x,
                 const float *dy, size_t i, gelu_grp512 *gp)
{
    const __m512d big = _mm512_set1_pd(0x1.8p52);
    const __m512d steps = _mm512_set1_pd((double)GT_STEPS);
    const __m512d inv_steps = _mm512_set1_pd(1.0 / GT_STEPS);
    const __m512d xmax = _mm512_set1_pd((double)GT_XMAX);
    const __m512d zero = _mm512_setzero_pd();
    const __m512d inf = _mm512_set1_pd(INFINITY);
    const __m256i centre = _mm256_set1_epi32(GT_XMAX * GT_STEPS);
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    __mmask8 ok = _mm512_cmp_pd_mask(_mm512_abs_pd(v), xmax, _CMP_LE_OQ) &
                  _mm512_cmp_pd_mask(v, zero, _CMP_NEQ_OQ);
    __m512d d = v;
    if (dy) {
        d = _mm512_cvtps_pd(_mm256_loadu_ps(dy + i));
        ok &= _mm512_cmp_pd_mask(_mm512_abs_pd(d), inf, _CMP_LT_OQ) &
              _mm512_cmp_pd_mask(d, zero, _CMP_NEQ_OQ);
    }
    /* lanes off the path computed at 0 (the table's centre row) */
    const __m512d vv = _mm512_maskz_mov_pd(ok, v);
    gp->ok = ok;
    gp->d = _mm512_maskz_mov_pd(ok, d);
    const __m512d t = _mm512_sub_pd(
        _mm512_add_pd(_mm512_mul_pd(vv, steps), big), big);
    gp->h = _mm512_sub_pd(vv, _mm512_mul_pd(t, inv_steps));
    const __m256i jv = _mm256_add_epi32(_mm512_cvttpd_epi32(t), centre);
    int32_t j[8];
    _mm256_storeu_si256((__m256i *)(void *)j, jv);
    __m512d r[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        r[k] = _mm512_load_pd(tab + (size_t)j[k] * (GT_DEG + 1));
    _Static_assert(GT_DEG == 7, "a row is one register");
    /* 8 x 8 transpose: pairs of rows, then 128-bit blocks */
    __m512d u[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
        u[k] = _mm512_unpacklo_pd(r[k], r[k + 1]);     /* cols 0 2 4 6 */
        u[k + 1] = _mm512_unpackhi_pd(r[k], r[k + 1]); /* cols 1 3 5 7 */
    }
    /* w[0]: rows 0-3 of cols 0, 4; w[1]: of 2, 6; w[2]: 1, 5; w[3]: 3, 7;
     * w[4..7] likewise for rows 4-7 */
    __m512d w[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k += 4) {
        w[k] = _mm512_shuffle_f64x2(u[k], u[k + 2], 0x88);
        w[k + 1] = _mm512_shuffle_f64x2(u[k], u[k + 2], 0xdd);
        w[k + 2] = _mm512_shuffle_f64x2(u[k + 1], u[k + 3], 0x88);
        w[k + 3] = _mm512_shuffle_f64x2(u[k + 1], u[k + 3], 0xdd);
    }
    gp->c[0] = _mm512_shuffle_f64x2(w[0], w[4], 0x88);
    gp->c[4] = _mm512_shuffle_f64x2(w[0], w[4], 0xdd);
    gp->c[2] = _mm512_shuffle_f64x2(w[1], w[5], 0x88);
    gp->c[6] = _mm512_shuffle_f64x2(w[1], w[5], 0xdd);
    gp->c[1] = _mm512_shuffle_f64x2(w[2], w[6], 0x88);
    gp->c[5] = _mm512_shuffle_f64x2(w[2], w[6], 0xdd);
    gp->c[3] = _mm512_shuffle_f64x2(w[3], w[7], 0x88);
    gp->c[7] = _mm512_shuffle_f64x2(w[3], w[7], 0xdd);
    gp->et = _mm512_i32gather_pd(jv, etab, 8);
}

EMU_ISA_TARGET_AVX512
static inline __attribute__((always_inline)) void
gelu_avx512_finish(const gt_fmt *g, const emu_format *f, const float *x,
                   const float *dy, size_t i, const gelu_grp512 *gp,
                   __m512d s, double *out)
{
    const __m512d eps = _mm512_set1_pd(0x1p-52);
    const __m512d half3 = _mm512_set1_pd(1.5);
    const __m512d min_norm = _mm512_set1_pd(g->min_norm);
    const __m512i mask = _mm512_set1_epi64((long long)g->mask);
    const __m512d y = _mm512_mul_pd(gp->d, s);
    const __m512d ay = _mm512_abs_pd(y);
    const __m512d err = _mm512_add_pd(
        _mm512_mul_pd(_mm512_abs_pd(gp->d), gp->et), _mm512_mul_pd(eps, ay));
    const __m512d e = _mm512_mul_pd(half3, err);
    const __mmask8 norm = _mm512_cmp_pd_mask(_mm512_sub_pd(ay, e), min_norm,
                                             _CMP_GE_OQ);
    const __m512i diff = _mm512_and_si512(
        _mm512_xor_si512(_mm512_castpd_si512(_mm512_sub_pd(y, e)),
                         _mm512_castpd_si512(_mm512_add_pd(y, e))),
        mask);
    const unsigned done = gp->ok & norm & _mm512_testn_epi64_mask(diff, diff);
    _mm512_storeu_pd(out + i, y);
    if (done != 0xff)
        for (int k = 0; k < 8; k++)
            if (!(done >> k & 1))
                out[i + (size_t)k] =
                    dy ? fast_gelu_grad1(g, f, dy[i + (size_t)k],
                                         x[i + (size_t)k])
                       : fast_gelu1(g, f, x[i + (size_t)k]);
}

/* As gelu_avx2; returns the elements done (a multiple of eight). */
EMU_ISA_TARGET_AVX512
static size_t gelu_avx512(const gt_fmt *g, const emu_format *f,
                          const float *x, const float *dy, size_t m,
                          double *out)
{
    const double *tab = dy ? &gtab.dphi[0][0] : &gtab.phi[0][0];
    const double *etab = dy ? gtab.edphi : gtab.ephi;
    size_t i = 0;
    for (; i + 8 * GELU512_GROUPS <= m; i += 8 * GELU512_GROUPS) {
        gelu_grp512 gp[GELU512_GROUPS];
        __m512d s[GELU512_GROUPS];
        #pragma GCC unroll 8
        for (int k = 0; k < GELU512_GROUPS; k++)
            gelu_avx512_prep(tab, etab, x, dy, i + 8 * (size_t)k, &gp[k]);
        #pragma GCC unroll 8
        for (int k = 0; k < GELU512_GROUPS; k++)
            s[k] = _mm512_add_pd(_mm512_mul_pd(gp[k].c[7], gp[k].h),
                                 gp[k].c[6]);
        #pragma GCC unroll 8
        for (int q = 5; q >= 0; q--)
            #pragma GCC unroll 8
            for (int k = 0; k < GELU512_GROUPS; k++)
                s[k] = _mm512_add_pd(_mm512_mul_pd(s[k], gp[k].h),
                                     gp[k].c[q]);
        #pragma GCC unroll 8
        for (int k = 0; k < GELU512_GROUPS; k++)
            gelu_avx512_finish(g, f, x, dy, i + 8 * (size_t)k, &gp[k], s[k],
                               out);
    }
    for (; i + 8 <= m; i += 8) {
        gelu_grp512 gp;
        gelu_avx512_prep(tab, etab, x, dy, i, &gp);
        __m512d s = _mm512_add_pd(_mm512_mul_pd(gp.c[7], gp.h), gp.c[6]);
        #pragma GCC unroll 8
        for (int q = 5; q >= 0; q--)
            s = _mm512_add_pd(_mm512_mul_pd(s, gp.h), gp.c[q]);
        gelu_avx512_finish(g, f, x, dy, i, &gp, s, out);
    }
    return i;
}
#endif

/* gelu of m values (deterministic modes, table ready). */
static void fast_gelu_n(const emu_format *f, const float *x, size_t m,
                        double *out)
{
    const gt_fmt g = gt_fmt_of(f);
    size_t i = 0;
#if EMU_HAVE_ISA_CLONES
    const emu_isa isa = emu_isa_active();
    if (isa >= EMU_ISA_AVX512)
        i = gelu_avx512(&g, f, x, NULL, m, out);
    else if (isa >= EMU_ISA_AVX2)
        i = gelu_avx2(&g, f, x, NULL, m, out);
#endif
    for (; i < m; i++)
        out[i] = fast_gelu1(&g, f, x[i]);
}

/* dy gelu'(x) of m values, likewise. */
static void fast_gelu_grad_n(const emu_format *f, const float *dy,
                             const float *x, size_t m, double *out)
{
    const gt_fmt g = gt_fmt_of(f);
    size_t i = 0;
#if EMU_HAVE_ISA_CLONES
    const emu_isa isa = emu_isa_active();
    if (isa >= EMU_ISA_AVX512)
        i = gelu_avx512(&g, f, x, dy, m, out);
    else if (isa >= EMU_ISA_AVX2)
        i = gelu_avx2(&g, f, x, dy, m, out);
#endif
    for (; i < m; i++)
        out[i] = fast_gelu_grad1(&g, f, dy[i], x[i]);
}

bool emu_gelu_fast_n(const emu_format *f, const float *x, const float *dy,
                     size_t n, double *out, bool lanes)
{
    if (!gelu_table_ready())
        return false;
    if (lanes) {
        if (dy)
            fast_gelu_grad_n(f, dy, x, n, out);
        else
            fast_gelu_n(f, x, n, out);
        return true;
    }
    const gt_fmt g = gt_fmt_of(f);
    for (size_t i = 0; i < n; i++)
        out[i] = dy ? fast_gelu_grad1(&g, f, dy[i], x[i])
                    : fast_gelu1(&g, f, x[i]);
    return true;
}

/* ---- sigmoid and tanh: a fast path through an exp of known error --------
 *
 * For the deterministic modes, sigmoid and tanh of finite moderate
 * arguments are formed from exp_core, a binary64 exp with a proven
 * relative error bound, and accepted by gt_decided under the bounds
 * below; undecided values (about one binary32 output in 2^15) and other
 * arguments take the exact path above (tr_sigmoid, tr_tanh), with the
 * same result.  Stochastic rounding keeps the C library path (see gelu's).
 *
 * exp_core(t), |t| <= 700: k = nearest integer to t / ln 2, r = (t - k L1)
 * - k L2 with fdlibm's split L1 + L2 of ln 2 (L1 has 32 significant bits,
 * so k L1 and, when k != 0 and t is a binary32 value or twice one, t - k L1
 * are exact; |r| <= 0.3466 + 2^-40, absolute error < 2^-53), then the
 * Taylor polynomial of degree 12 of e^r (remainder < e^|r| |r|^13 / 13!
 * < 2^-51.4 e^r) by Horner (25 roundings and 13 rounded coefficients:
 * < 25 2^-53 e^|r| / e^-|r| < 2^-47.4 e^r), times 2^k exactly.  Relative
 * error < 2^-47; EPS_CORE = 2^-46.
 *
 * sigmoid x = 1 / (1 + e^-x) (x > 0) or e^x / (1 + e^x): relative error
 * < 2 EPS_CORE + 3 2^-53 < 2^-44 = EPS_SIG_FAST.
 * tanh |x| = 1 - 2 / (e^(2|x|) + 1) for |x| >= 1/16: the error of q =
 * 2 / (e + 1) (< EPS_CORE + 2^-52 relative) is amplified by q / tanh =
 * 2 / (e - 1) <= 1 / |x| <= 16, plus the subtraction's rounding: < 2^-41.
 * For |x| < 1/16, the odd Taylor polynomial of degree 11 (remainder
 * < 2^-55 relative, the coefficients bounded by 2 zeta(2n) (2/pi)^2n) in
 * u = x^2: < 2^-50.  EPS_TANH_FAST = 2^-41. */

#define EPS_CORE 0x1p-46
#define EPS_SIG_FAST 0x1p-44
#define EPS_TANH_FAST 0x1p-41
#define LN2_HI 0x1.62e42feep-1     /* fdlibm's ln2_hi: 32 significant bits */
#define LN2_LO 0x1.a39ef35793c76p-33 /* ln 2 - LN2_HI, rounded           */
#define INV_LN2 0x1.71547652b82fep0

static inline double exp_core(double t)
{
    const double big = 0x1.8p52;
    const double kd = (t * INV_LN2 + big) - big; /* nearest integer */
    const double r = (t - kd * LN2_HI) - kd * LN2_LO;
    double s = r * (1.0 / 479001600.0) + 1.0 / 39916800.0;
    s = s * r + 1.0 / 3628800.0;
    s = s * r + 1.0 / 362880.0;
    s = s * r + 1.0 / 40320.0;
    s = s * r + 1.0 / 5040.0;
    s = s * r + 1.0 / 720.0;
    s = s * r + 1.0 / 120.0;
    s = s * r + 1.0 / 24.0;
    s = s * r + 1.0 / 6.0;
    s = s * r + 0.5;
    s = s * r + 1.0;
    s = s * r + 1.0;
    const int k = (int)kd;
    return s * u2d((uint64_t)(1023 + k) << 52); /* |k| <= 1010: exact */
}

/* sigmoid of a binary32 value, deterministic modes. */
static inline double fast_sigmoid1(const gt_fmt *g, const emu_format *f,
                                   double x)
{
    if (!(fabs(x) <= 80.0) || x == 0.0)
        return tr_sigmoid(f, x);
    double y;
    if (x > 0.0) {
        y = 1.0 / (1.0 + exp_core(-x));
    } else {
        double t = exp_core(x);
        y = t / (1.0 + t);
    }
    return gt_decided(g, f, y, EPS_SIG_FAST * y) ? y : tr_sigmoid(f, x);
}

/* tanh of a binary32 value, deterministic modes. */
static inline double fast_tanh1(const gt_fmt *g, const emu_format *f,
                                double x)
{
    const double a = fabs(x);
    if (!(a <= 10.0) || x == 0.0)
        return tr_tanh(f, x);
    double y;
    if (a >= 0.0625) {
        y = 1.0 - 2.0 / (exp_core(2.0 * a) + 1.0);
    } else {
        const double u = a * a;
        double p = u * (-1382.0 / 155925.0) + 62.0 / 2835.0;
        p = p * u + -17.0 / 315.0;
        p = p * u + 2.0 / 15.0;
        p = p * u + -1.0 / 3.0;
        y = a + a * (u * p);
    }
    return gt_decided(g, f, y, EPS_TANH_FAST * y) ? copysign(y, x)
                                                  : tr_tanh(f, x);
}

/* ---- sigmoid and tanh in vector lanes -----------------------------------
 *
 * fast_sigmoid1 and fast_tanh1, eight lanes at a time (AVX-512) or four
 * (AVX2): every lane does the scalar path's IEEE operations in its order
 * (contraction is off, so no fused multiply-add), with both sides of its
 * branches formed and the lane's own selected; 2^k is built from the bits
 * of t / ln 2 + 1.5 * 2^52 (kb below), whose fraction holds k.  A lane the
 * quick test of gt_decided accepts holds the scalar path's value; every
 * other lane (off the range, zero, NaN, undecided by the quick test) is
 * redone by the scalar path, whose answer it then is.  (GCC's generic
 * vectors scalarise the comparisons, hence intrinsics.)
 * tests/test_transcendental.c holds the lanes bit-identical to the scalar
 * path at each instruction-set level. */
#if EMU_HAVE_ISA_CLONES
/* exp_core's Horner coefficients, highest degree first (1/12! ... 1/2!,
 * 1, 1), for its vector lanes: the same constants in the same order. */
static const double EXP_HORNER[13] = {
    1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
    1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
    1.0 / 6.0, 0.5, 1.0, 1.0,
};

/* The scalar path for the lanes of x[0..w) not in done. */
static void sigtanh_redo(const gt_fmt *g, const emu_format *f, bool tanh_fn,
                         const float *x, unsigned done, int w, double *out)
{
    for (int k = 0; k < w; k++)
        if (!(done >> k & 1))
            out[k] = tanh_fn ? fast_tanh1(g, f, x[k])
                             : fast_sigmoid1(g, f, x[k]);
}

EMU_ISA_TARGET_AVX512
static inline __m512d exp_core_avx512(__m512d t)
{
    const __m512d big = _mm512_set1_pd(0x1.8p52);
    const __m512d kb = _mm512_add_pd(_mm512_mul_pd(t, _mm512_set1_pd(INV_LN2)),
                                     big);
    const __m512d kd = _mm512_sub_pd(kb, big); /* nearest integer */
    const __m512d r = _mm512_sub_pd(
        _mm512_sub_pd(t, _mm512_mul_pd(kd, _mm512_set1_pd(LN2_HI))),
        _mm512_mul_pd(kd, _mm512_set1_pd(LN2_LO)));
    __m512d s = _mm512_mul_pd(r, _mm512_set1_pd(EXP_HORNER[0]));
    s = _mm512_add_pd(s, _mm512_set1_pd(EXP_HORNER[1]));
    for (int q = 2; q < 13; q++)
        s = _mm512_add_pd(_mm512_mul_pd(s, r), _mm512_set1_pd(EXP_HORNER[q]));
    const __m512i k = _mm512_sub_epi64(_mm512_castpd_si512(kb),
                                       _mm512_castpd_si512(big));
    const __m512i e = _mm512_slli_epi64(
        _mm512_add_epi64(k, _mm512_set1_epi64(1023)), 52);
    return _mm512_mul_pd(s, _mm512_castsi512_pd(e));
}

EMU_ISA_TARGET_AVX512
static size_t sigtanh_avx512(const gt_fmt *g, const emu_format *f,
                             bool tanh_fn, const float *x, size_t m,
                             double *out)
{
    const __m512d zero = _mm512_setzero_pd(), one = _mm512_set1_pd(1.0);
    const __m512i sign = _mm512_set1_epi64(INT64_MIN);
    const __m512i mask = _mm512_set1_epi64((long long)g->mask);
    const __m512d lim = _mm512_set1_pd(tanh_fn ? 10.0 : 80.0);
    const __m512d eps = _mm512_set1_pd(tanh_fn ? EPS_TANH_FAST : EPS_SIG_FAST);
    size_t i = 0;
    for (; i + 8 <= m; i += 8) {
        const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        const __m512d a = _mm512_abs_pd(v);
        const __mmask8 ok = _mm512_cmp_pd_mask(a, lim, _CMP_LE_OQ) &
                            _mm512_cmp_pd_mask(v, zero, _CMP_NEQ_OQ);
        const __m512d as = _mm512_maskz_mov_pd(ok, a); /* others at 0 */
        __m512d y;
        if (!tanh_fn) {
            /* e^-x (x > 0) or e^x; then 1 / (1 + t) or t / (1 + t) */
            const __m512d t = exp_core_avx512(_mm512_castsi512_pd(
                _mm512_xor_si512(_mm512_castpd_si512(as), sign)));
            const __mmask8 pos = _mm512_cmp_pd_mask(v, zero, _CMP_GT_OQ);
            y = _mm512_div_pd(_mm512_mask_blend_pd(pos, t, one),
                              _mm512_add_pd(one, t));
        } else {
            const __m512d eb = exp_core_avx512(_mm512_add_pd(as, as));
            const __m512d yb = _mm512_sub_pd(
                one, _mm512_div_pd(_mm512_set1_pd(2.0),
                                   _mm512_add_pd(eb, one)));
            const __m512d u = _mm512_mul_pd(as, as);
            __m512d p = _mm512_add_pd(
                _mm512_mul_pd(u, _mm512_set1_pd(-1382.0 / 155925.0)),
                _mm512_set1_pd(62.0 / 2835.0));
            p = _mm512_add_pd(_mm512_mul_pd(p, u), _mm512_set1_pd(-17.0 / 315.0));
            p = _mm512_add_pd(_mm512_mul_pd(p, u), _mm512_set1_pd(2.0 / 15.0));
            p = _mm512_add_pd(_mm512_mul_pd(p, u), _mm512_set1_pd(-1.0 / 3.0));
            const __m512d ys = _mm512_add_pd(
                as, _mm512_mul_pd(as, _mm512_mul_pd(u, p)));
            const __mmask8 wide = _mm512_cmp_pd_mask(
                as, _mm512_set1_pd(0.0625), _CMP_GE_OQ);
            y = _mm512_mask_blend_pd(wide, ys, yb);
        }
        /* gt_decided's quick test, err = eps y */
        const __m512d e = _mm512_mul_pd(_mm512_set1_pd(1.5),
                                        _mm512_mul_pd(eps, y));
        const __mmask8 norm = _mm512_cmp_pd_mask(
            _mm512_sub_pd(_mm512_abs_pd(y), e), _mm512_set1_pd(g->min_norm),
            _CMP_GE_OQ);
        const __m512i diff = _mm512_and_si512(
            _mm512_xor_si512(_mm512_castpd_si512(_mm512_sub_pd(y, e)),
                             _mm512_castpd_si512(_mm512_add_pd(y, e))),
            mask);
        const unsigned done =
            ok & norm & _mm512_testn_epi64_mask(diff, diff);
        if (tanh_fn) /* copysign(y, x) */
            y = _mm512_castsi512_pd(_mm512_or_si512(
                _mm512_castpd_si512(y),
                _mm512_and_si512(_mm512_castpd_si512(v), sign)));
        _mm512_storeu_pd(out + i, y);
        if (done != 0xff)
            sigtanh_redo(g, f, tanh_fn, x + i, done, 8, out + i);
    }
    return i;
}

EMU_ISA_TARGET_AVX2
static inline __m256d exp_core_avx2(__m256d t)
{
    const __m256d big = _mm256_set1_pd(0x1.8p52);
    const __m256d kb = _mm256_add_pd(_mm256_mul_pd(t, _mm256_set1_pd(INV_LN2)),
                                     big);
    const __m256d kd = _mm256_sub_pd(kb, big); /* nearest integer */
    const __m256d r = _mm256_sub_pd(
        _mm256_sub_pd(t, _mm256_mul_pd(kd, _mm256_set1_pd(LN2_HI))),
        _mm256_mul_pd(kd, _mm256_set1_pd(LN2_LO)));
    __m256d s = _mm256_mul_pd(r, _mm256_set1_pd(EXP_HORNER[0]));
    s = _mm256_add_pd(s, _mm256_set1_pd(EXP_HORNER[1]));
    for (int q = 2; q < 13; q++)
        s = _mm256_add_pd(_mm256_mul_pd(s, r), _mm256_set1_pd(EXP_HORNER[q]));
    const __m256i k = _mm256_sub_epi64(_mm256_castpd_si256(kb),
                                       _mm256_castpd_si256(big));
    const __m256i e = _mm256_slli_epi64(
        _mm256_add_epi64(k, _mm256_set1_epi64x(1023)), 52);
    return _mm256_mul_pd(s, _mm256_castsi256_pd(e));
}

EMU_ISA_TARGET_AVX2
static size_t sigtanh_avx2(const gt_fmt *g, const emu_format *f,
                           bool tanh_fn, const float *x, size_t m,
                           double *out)
{
    const __m256d zero = _mm256_setzero_pd(), one = _mm256_set1_pd(1.0);
    const __m256d sign = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MIN));
    const __m256i mask = _mm256_set1_epi64x((long long)g->mask);
    const __m256d lim = _mm256_set1_pd(tanh_fn ? 10.0 : 80.0);
    const __m256d eps = _mm256_set1_pd(tanh_fn ? EPS_TANH_FAST : EPS_SIG_FAST);
    size_t i = 0;
    for (; i + 4 <= m; i += 4) {
        const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        const __m256d a = _mm256_andnot_pd(sign, v);
        const __m256d ok = _mm256_and_pd(_mm256_cmp_pd(a, lim, _CMP_LE_OQ),
                                         _mm256_cmp_pd(v, zero, _CMP_NEQ_OQ));
        const __m256d as = _mm256_and_pd(ok, a); /* others at 0 */
        __m256d y;
        if (!tanh_fn) {
            const __m256d t = exp_core_avx2(_mm256_xor_pd(as, sign));
            const __m256d pos = _mm256_cmp_pd(v, zero, _CMP_GT_OQ);
            y = _mm256_div_pd(_mm256_blendv_pd(t, one, pos),
                              _mm256_add_pd(one, t));
        } else {
            const __m256d eb = exp_core_avx2(_mm256_add_pd(as, as));
            const __m256d yb = _mm256_sub_pd(
                one, _mm256_div_pd(_mm256_set1_pd(2.0),
                                   _mm256_add_pd(eb, one)));
            const __m256d u = _mm256_mul_pd(as, as);
            __m256d p = _mm256_add_pd(
                _mm256_mul_pd(u, _mm256_set1_pd(-1382.0 / 155925.0)),
                _mm256_set1_pd(62.0 / 2835.0));
            p = _mm256_add_pd(_mm256_mul_pd(p, u), _mm256_set1_pd(-17.0 / 315.0));
            p = _mm256_add_pd(_mm256_mul_pd(p, u), _mm256_set1_pd(2.0 / 15.0));
            p = _mm256_add_pd(_mm256_mul_pd(p, u), _mm256_set1_pd(-1.0 / 3.0));
            const __m256d ys = _mm256_add_pd(
                as, _mm256_mul_pd(as, _mm256_mul_pd(u, p)));
            const __m256d wide = _mm256_cmp_pd(as, _mm256_set1_pd(0.0625),
                                               _CMP_GE_OQ);
            y = _mm256_blendv_pd(ys, yb, wide);
        }
        const __m256d e = _mm256_mul_pd(_mm256_set1_pd(1.5),
                                        _mm256_mul_pd(eps, y));
        const __m256d norm = _mm256_cmp_pd(
            _mm256_sub_pd(_mm256_andnot_pd(sign, y), e),
            _mm256_set1_pd(g->min_norm), _CMP_GE_OQ);
        const __m256i diff = _mm256_and_si256(
            _mm256_xor_si256(_mm256_castpd_si256(_mm256_sub_pd(y, e)),
                             _mm256_castpd_si256(_mm256_add_pd(y, e))),
            mask);
        const __m256d same = _mm256_castsi256_pd(
            _mm256_cmpeq_epi64(diff, _mm256_setzero_si256()));
        const unsigned done = (unsigned)_mm256_movemask_pd(
            _mm256_and_pd(ok, _mm256_and_pd(norm, same)));
        if (tanh_fn) /* copysign(y, x) */
            y = _mm256_or_pd(y, _mm256_and_pd(v, sign));
        _mm256_storeu_pd(out + i, y);
        if (done != 0xf)
            sigtanh_redo(g, f, tanh_fn, x + i, done, 4, out + i);
    }
    return i;
}
#endif

/* sigmoid (tanh_fn false) or tanh of m binary32 values, deterministic
 * modes: the vector lanes where the CPU has them, then the scalar path. */
static void fast_sigtanh_n(const emu_format *f, bool tanh_fn, const float *x,
                           size_t m, double *out)
{
    const gt_fmt g = gt_fmt_of(f);
    size_t i = 0;
#if EMU_HAVE_ISA_CLONES
    const emu_isa isa = emu_isa_active();
    if (isa >= EMU_ISA_AVX512)
        i = sigtanh_avx512(&g, f, tanh_fn, x, m, out);
    else if (isa >= EMU_ISA_AVX2)
        i = sigtanh_avx2(&g, f, tanh_fn, x, m, out);
#endif
    if (tanh_fn)
        for (; i < m; i++)
            out[i] = fast_tanh1(&g, f, x[i]);
    else
        for (; i < m; i++)
            out[i] = fast_sigmoid1(&g, f, x[i]);
}

double emu_unary_eval_det(const emu_format *f, emu_unary fn, double x)
{
    const gt_fmt g = gt_fmt_of(f);
    switch (fn) {
    case EMU_UNARY_SIGMOID: return fast_sigmoid1(&g, f, x);
    case EMU_UNARY_TANH: return fast_tanh1(&g, f, x);
    default: return emu_unary_eval(f, fn, x);
    }
}

void emu_unary_eval_det_n(const emu_format *f, emu_unary fn, const float *x,
                          size_t n, double *out)
{
    switch (fn) {
    case EMU_UNARY_SIGMOID:
    case EMU_UNARY_TANH:
        fast_sigtanh_n(f, fn == EMU_UNARY_TANH, x, n, out);
        break;
    default:
        for (size_t i = 0; i < n; i++)
            out[i] = emu_unary_eval(f, fn, x[i]);
        break;
    }
}

/* ---- softmax's exponentials: the C library's exp rounded to binary32 ----
 *
 * Attention's softmax keeps e = (float)exp(s - m) (ops_attn.c), the C
 * library's binary64 exp rounded to nearest-even binary32.  exp_core (an
 * error below EPS_CORE = 2^-46 relative) and the library's exp (below
 * EPS_EXP = 2^-47, the bound the exact path above relies on too) lie within
 * 2^-45 y of each other; when no rounding boundary of binary32 lies in that
 * interval around y = exp_core(t) (gt_decided), both round to the same
 * binary32 value, which is then (float)y.  Every other argument (t = 0,
 * whose exp is exactly 1; |t| > 700, NaN, infinities; undecided values,
 * about one in 2^20) calls exp as before.  So the floats are the old
 * ones, bit for bit, at every instruction-set level;
 * tests/test_transcendental.c checks that against exp itself. */
#define EPS_EXP_F32 0x1p-45

static inline float exp_f32_1(const gt_fmt *g, const emu_format *f, double t)
{
    if (t == 0.0)
        return 1.0f; /* exp's exact value (the row's maximum) */
    if (!(t >= -700.0 && t <= 700.0))
        return (float)exp(t);
    const double y = exp_core(t);
    return gt_decided(g, f, y, EPS_EXP_F32 * y) ? (float)y : (float)exp(t);
}

#if EMU_HAVE_ISA_CLONES
/* Eight lanes at a time (AVX-512), the row's tail in masked lanes; the
 * lanes the quick test does not accept are redone by exp_f32_1.  Does all
 * n values. */
EMU_ISA_TARGET_AVX512
static size_t exp_f32_avx512(const gt_fmt *g, const emu_format *f,
                             const float *s, double m, size_t n, float *out)
{
    const __m512d mm = _mm512_set1_pd(m);
    const __m512d lo = _mm512_set1_pd(-700.0), hi = _mm512_set1_pd(700.0);
    const __m512d zero = _mm512_setzero_pd();
    const __m512d eps = _mm512_set1_pd(EPS_EXP_F32);
    const __m512i mask = _mm512_set1_epi64((long long)g->mask);
    for (size_t i = 0; i < n; i += 8) {
        /* the row's last lanes masked (a row is often short) */
        const __mmask8 live =
            n - i >= 8 ? 0xff : (__mmask8)((1u << (n - i)) - 1);
        const __m512d t = _mm512_sub_pd(
            _mm512_cvtps_pd(_mm256_maskz_loadu_ps(live, s + i)), mm);
        const __mmask8 ok = _mm512_cmp_pd_mask(t, lo, _CMP_GE_OQ) &
                            _mm512_cmp_pd_mask(t, hi, _CMP_LE_OQ) &
                            _mm512_cmp_pd_mask(t, zero, _CMP_NEQ_OQ);
        /* lanes at t = 0 hold exp_core(0) = 1 exactly, exp's value */
        const __mmask8 one = _mm512_cmp_pd_mask(t, zero, _CMP_EQ_OQ);
        const __m512d y = exp_core_avx512(_mm512_maskz_mov_pd(ok, t));
        /* gt_decided's quick test, err = eps y (y > 0) */
        const __m512d e = _mm512_mul_pd(_mm512_set1_pd(1.5),
                                        _mm512_mul_pd(eps, y));
        const __mmask8 norm = _mm512_cmp_pd_mask(
            _mm512_sub_pd(y, e), _mm512_set1_pd(g->min_norm), _CMP_GE_OQ);
        const __m512i diff = _mm512_and_si512(
            _mm512_xor_si512(_mm512_castpd_si512(_mm512_sub_pd(y, e)),
                             _mm512_castpd_si512(_mm512_add_pd(y, e))),
            mask);
        const unsigned done =
            (one | (ok & norm & _mm512_testn_epi64_mask(diff, diff))) & live;
        _mm256_mask_storeu_ps(out + i, live, _mm512_cvtpd_ps(y));
        if (done != live)
            for (int k = 0; k < 8; k++)
                if ((live & ~done) >> k & 1)
                    out[i + (size_t)k] =
                        exp_f32_1(g, f, (double)s[i + (size_t)k] - m);
    }
    return n;
}
#endif

void emu_exp_f32_n(const emu_format *f32, const float *s, double m,
                   size_t n, float *out, bool lanes)
{
    const gt_fmt g = gt_fmt_of(f32);
    size_t i = 0;
#if EMU_HAVE_ISA_CLONES
    if (lanes && emu_isa_active() >= EMU_ISA_AVX512)
        i = exp_f32_avx512(&g, f32, s, m, n, out);
#else
    (void)lanes; /* no lanes in a build without target clones */
#endif
    for (; i < n; i++)
        out[i] = exp_f32_1(&g, f32, (double)s[i] - m);
}

/* ---- one op: its inputs, its reference, its NaN classifier -------------- */

typedef enum ew_kind {
    EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_SCALE, EW_AXPY, EW_BIAS,
    EW_UNARY, EW_BACKWARD, EW_CAST
} ew_kind;

typedef struct ew_op {
    ew_kind kind;
    emu_unary f;
    const float *a;   /* first input (x, dy, in)                        */
    const float *b;   /* second input (y, bias, x_or_y), or NULL         */
    double alpha;     /* scale, axpy                                     */
    double p1, p2;    /* unary parameters                                */
    size_t inner;     /* add_bias: b's index is (i / inner) % dim        */
    size_t dim;
    const emu_format *fmt; /* the output's (transcendental functions)    */
    emu_rnd mode;     /* the sign of an exact zero sum                   */
    bool fast;        /* gelu (backward), sigmoid, tanh: the fast paths */
    bool scale32;     /* scale: every product a binary32 (scale_exact32) */
} ew_op;

static size_t b_index(const ew_op *op, size_t i)
{
    return op->kind == EW_BIAS ? (i / op->inner) % op->dim : i;
}

static bool ew_had_nan(const void *vop, size_t i)
{
    const ew_op *op = vop;
    if (isnan(op->a[i]) || (op->b && isnan(op->b[b_index(op, i)])))
        return true;
    return (op->kind == EW_SCALE || op->kind == EW_AXPY) && isnan(op->alpha);
}

/* Whether the n values of v are all NaN; stops at the first block that
 * holds a number (a model's arrays are all NaN once it diverged, and
 * rarely hold a NaN before). */
static bool all_nan(const float *v, size_t n)
{
    enum { BLOCK = 64 };
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        uint32_t all = 1;
        for (size_t j = 0; j < BLOCK; j++)
            all &= (uint32_t)(v[i + j] != v[i + j]);
        if (!all)
            return false;
    }
    for (; i < n; i++)
        if (!isnan(v[i]))
            return false;
    return true;
}

/* Whether every one of op's n outputs has a NaN among its inputs (a, b
 * or alpha all NaN): ew_had_nan's answer for every output, which the
 * choke point then need not ask output by output. */
static bool ew_all_had_nan(const ew_op *op, size_t n)
{
    if ((op->kind == EW_SCALE || op->kind == EW_AXPY) && isnan(op->alpha))
        return true;
    return (n && all_nan(op->a, n)) ||
           (op->b && all_nan(op->b, op->kind == EW_BIAS ? op->dim : n));
}

/* z = -x / sqrt(2), the argument of erfc in gelu and its derivative. */
static void mp_gelu_arg(mpfr_ptr z, double x, mpfr_ptr tmp)
{
    mpfr_sqrt_ui(tmp, 2, MPFR_RNDN);
    mpfr_set_d(z, -x, MPFR_RNDN);
    mpfr_div(z, z, tmp, MPFR_RNDN);
}

/* The MPFR value of unary f at x (precision of e, ~exact). */
static void mp_unary(const ew_op *op, double x, mpfr_ptr e, mpfr_ptr t)
{
    mpfr_set_d(e, x, MPFR_RNDN);
    switch (op->f) {
    case EMU_UNARY_NEG: mpfr_neg(e, e, MPFR_RNDN); break;
    case EMU_UNARY_ABS: mpfr_abs(e, e, MPFR_RNDN); break;
    case EMU_UNARY_RELU:
        if (!(x > 0.0) && !isnan(x))
            mpfr_set_zero(e, 1);
        break;
    case EMU_UNARY_LEAKY_RELU:
        if (!(x > 0.0))
            mpfr_mul_d(e, e, op->p1, MPFR_RNDN);
        break;
    case EMU_UNARY_GELU:
        mp_gelu_arg(t, x, e);
        mpfr_erfc(t, t, MPFR_RNDN);
        mpfr_mul_d(e, t, x, MPFR_RNDN);
        mpfr_div_2ui(e, e, 1, MPFR_RNDN);
        break;
    case EMU_UNARY_TANH: mpfr_tanh(e, e, MPFR_RNDN); break;
    case EMU_UNARY_SIGMOID:
        mpfr_neg(e, e, MPFR_RNDN);
        mpfr_exp(e, e, MPFR_RNDN);
        mpfr_add_ui(e, e, 1, MPFR_RNDN);
        mpfr_ui_div(e, 1, e, MPFR_RNDN);
        break;
    case EMU_UNARY_EXP: mpfr_exp(e, e, MPFR_RNDN); break;
    case EMU_UNARY_LOG: mpfr_log(e, e, MPFR_RNDN); break;
    case EMU_UNARY_SQRT: mpfr_sqrt(e, e, MPFR_RNDN); break;
    case EMU_UNARY_SQUARE: mpfr_sqr(e, e, MPFR_RNDN); break;
    case EMU_UNARY_CLAMP:
        if (x < op->p1)
            mpfr_set_d(e, op->p1, MPFR_RNDN);
        else if (x > op->p2)
            mpfr_set_d(e, op->p2, MPFR_RNDN);
        break;
    default: mpfr_set_nan(e); break;
    }
}

/* dy * f'(.) in MPFR, the same formula as the op's. */
static void mp_backward(const ew_op *op, double dy, double v, mpfr_ptr e,
                        mpfr_ptr t)
{
    switch (op->f) {
    case EMU_UNARY_TANH: /* dy (1 - y^2) */
    case EMU_UNARY_SIGMOID: /* dy y (1 - y) */
        mpfr_set_d(t, v, MPFR_RNDN);
        if (op->f == EMU_UNARY_TANH) {
            mpfr_sqr(t, t, MPFR_RNDN);
            mpfr_ui_sub(t, 1, t, MPFR_RNDN);
        } else {
            mpfr_ui_sub(t, 1, t, MPFR_RNDN);
            mpfr_mul_d(t, t, v, MPFR_RNDN);
        }
        mpfr_mul_d(e, t, dy, MPFR_RNDN);
        return;
    case EMU_UNARY_GELU: /* dy (erfc(-x/sqrt 2)/2 + x e^(-x^2/2)/sqrt(2 pi)) */
        mp_gelu_arg(t, v, e);
        mpfr_erfc(t, t, MPFR_RNDN);
        mpfr_div_2ui(t, t, 1, MPFR_RNDN);
        mpfr_const_pi(e, MPFR_RNDN);
        mpfr_mul_2ui(e, e, 1, MPFR_RNDN);
        mpfr_rec_sqrt(e, e, MPFR_RNDN);
        mpfr_mul_d(e, e, v, MPFR_RNDN);
        {
            MPFR_DECL_INIT(g, 256);
            mpfr_set_d(g, v, MPFR_RNDN);
            mpfr_sqr(g, g, MPFR_RNDN);
            mpfr_div_2ui(g, g, 1, MPFR_RNDN);
            mpfr_neg(g, g, MPFR_RNDN);
            mpfr_exp(g, g, MPFR_RNDN);
            mpfr_mul(e, e, g, MPFR_RNDN);
        }
        mpfr_add(e, e, t, MPFR_RNDN);
        mpfr_mul_d(e, e, dy, MPFR_RNDN);
        return;
    case EMU_UNARY_LOG: /* dy / x */
        mpfr_set_d(e, dy, MPFR_RNDN);
        mpfr_div_d(e, e, v, MPFR_RNDN);
        return;
    case EMU_UNARY_SQRT: /* dy / (2 y) */
        mpfr_set_d(e, dy, MPFR_RNDN);
        mpfr_div_d(e, e, 2.0 * v, MPFR_RNDN);
        return;
    case EMU_UNARY_EXP: /* dy y */
        mpfr_set_d(e, dy, MPFR_RNDN);
        mpfr_mul_d(e, e, v, MPFR_RNDN);
        return;
    case EMU_UNARY_SQUARE: /* dy 2x */
        mpfr_set_d(e, dy, MPFR_RNDN);
        mpfr_mul_d(e, e, 2.0 * v, MPFR_RNDN);
        return;
    default: { /* selections: neg, abs, relu, leaky relu */
        double d = op->f == EMU_UNARY_NEG ? -1.0
                 : op->f == EMU_UNARY_ABS ? (v > 0.0) - (v < 0.0)
                 : v > 0.0 ? 1.0
                 : op->f == EMU_UNARY_LEAKY_RELU ? op->p1 : 0.0;
        mpfr_set_d(e, dy, MPFR_RNDN);
        mpfr_mul_d(e, e, isnan(v) ? v : d, MPFR_RNDN);
        return;
    }
    }
}

static int ew_ref(const void *vop, size_t i, mpfr_ptr e, mpfr_ptr src)
{
    const ew_op *op = vop;
    (void)src;
    const double a = op->a[i];
    const double b = op->b ? op->b[b_index(op, i)] : 0.0;
    MPFR_DECL_INIT(t, 256);
    switch (op->kind) {
    case EW_ADD:
    case EW_BIAS:
        mpfr_set_d(e, a, MPFR_RNDN);
        mpfr_add_d(e, e, b, MPFR_RNDN);
        break;
    case EW_SUB:
        mpfr_set_d(e, a, MPFR_RNDN);
        mpfr_sub_d(e, e, b, MPFR_RNDN);
        break;
    case EW_MUL:
        mpfr_set_d(e, a, MPFR_RNDN);
        mpfr_mul_d(e, e, b, MPFR_RNDN);
        break;
    case EW_DIV:
        mpfr_set_d(e, a, MPFR_RNDN);
        mpfr_div_d(e, e, b, MPFR_RNDN);
        break;
    case EW_SCALE:
        mpfr_set_d(e, a, MPFR_RNDN);
        mpfr_mul_d(e, e, op->alpha, MPFR_RNDN);
        break;
    case EW_AXPY: /* alpha x + y: the product is exact at 256 bits */
        mpfr_set_d(e, a, MPFR_RNDN);
        mpfr_mul_d(e, e, op->alpha, MPFR_RNDN);
        mpfr_add_d(e, e, b, MPFR_RNDN);
        break;
    case EW_UNARY:
        mp_unary(op, a, e, t);
        break;
    case EW_BACKWARD:
        mp_backward(op, a, b, e, t);
        break;
    case EW_CAST:
        mpfr_set_d(e, a, MPFR_RNDN);
        break;
    }
    return 0;
}

/* ---- the common path ----------------------------------------------------
 * Each op hands the choke point a producer: the values of a chunk of
 * outputs, computed while the choke point rounds, counts and stores the
 * chunk before (no array of out->n doubles).  Selections and casts, whose
 * values are binary32 values, produce binary32. */

static double unary_value(const emu_format *f, emu_unary fn, double x,
                          double p1, double p2, double *lo);
static double backward_value(const emu_format *f, emu_unary fn, double dy,
                             double v, double slope, double *lo);

/* Whether op's values have low parts (the kinds formed by TwoSum, an fma
 * remainder or sum3). */
static bool ew_has_lo(const ew_op *op)
{
    switch (op->kind) {
    case EW_ADD: case EW_SUB: case EW_DIV: case EW_AXPY: case EW_BIAS:
        return true;
    case EW_UNARY:
        return op->f == EMU_UNARY_SQRT;
    case EW_BACKWARD:
        return op->f == EMU_UNARY_TANH || op->f == EMU_UNARY_SIGMOID ||
               op->f == EMU_UNARY_LOG || op->f == EMU_UNARY_SQRT;
    default:
        return false;
    }
}

/* emu_op_out.fill: outputs i0 .. i0+m-1.  Low parts that are all zero
 * (sums of 16-bit values always are) are reported as none: the choke
 * point's array path then rounds the same values faster. */
static int ew_fill(const void *vop, size_t i0, size_t m, double *hi,
                   double *lo)
{
    const ew_op *op = vop;
    const float *a = op->a + i0;
    const float *b = op->b && op->kind != EW_BIAS ? op->b + i0 : NULL;
    const emu_rnd mode = op->mode;
    switch (op->kind) {
    case EW_ADD:
        return exact_sums(a, b, false, mode, m, hi, lo);
    case EW_SUB:
        return exact_sums(a, b, true, mode, m, hi, lo);
    case EW_DIV:
        for (size_t j = 0; j < m; j++)
            exact_div(a[j], b[j], &hi[j], &lo[j]);
        break;
    case EW_MUL:
        for (size_t j = 0; j < m; j++)
            hi[j] = exact_mul(a[j], b[j]);
        break;
    case EW_SCALE:
        for (size_t j = 0; j < m; j++)
            hi[j] = exact_mul(op->alpha, a[j]);
        break;
    case EW_AXPY:
        for (size_t j = 0; j < m; j++)
            exact_fma(op->alpha, a[j], b[j], mode, &hi[j], &lo[j]);
        break;
    case EW_BIAS: {
        /* b's elements of the chunk, stepped through without a division
         * per element: (i / inner) % dim advances by one every inner. */
        float bb[EMU_COMMIT_CHUNK];
        if (m > EMU_COMMIT_CHUNK) { /* a producer's chunks are no longer */
            for (size_t j = 0; j < m; j++)
                exact_sum(a[j], op->b[b_index(op, i0 + j)], mode, &hi[j],
                          &lo[j]);
            break;
        }
        size_t r = i0 % op->inner, c = (i0 / op->inner) % op->dim;
        if (op->inner == 1) {
            /* the bias along the last axis: runs of its row */
            for (size_t j = 0; j < m;) {
                const size_t run = op->dim - c < m - j ? op->dim - c : m - j;
                memcpy(bb + j, op->b + c, run * sizeof *bb);
                j += run;
                c = 0;
            }
        } else {
            for (size_t j = 0; j < m; j++) {
                bb[j] = op->b[c];
                if (++r == op->inner) {
                    r = 0;
                    c = c + 1 == op->dim ? 0 : c + 1;
                }
            }
        }
        return exact_sums(a, bb, false, mode, m, hi, lo);
    }
    case EW_UNARY:
        if (op->fast) {
            if (op->f == EMU_UNARY_GELU)
                fast_gelu_n(op->fmt, a, m, hi);
            else
                fast_sigtanh_n(op->fmt, op->f == EMU_UNARY_TANH, a, m, hi);
            break;
        }
        for (size_t j = 0; j < m; j++)
            hi[j] = unary_value(op->fmt, op->f, a[j], op->p1, op->p2, &lo[j]);
        break;
    case EW_BACKWARD:
        if (op->fast) {
            fast_gelu_grad_n(op->fmt, a, op->b + i0, m, hi);
            break;
        }
        for (size_t j = 0; j < m; j++)
            hi[j] = backward_value(op->fmt, op->f, a[j], op->b[i0 + j], op->p1,
                                   &lo[j]);
        break;
    case EW_CAST:
        for (size_t j = 0; j < m; j++)
            hi[j] = a[j];
        break;
    }
    if (!ew_has_lo(op))
        return 0;
    return emu_any_nonzero(lo, m);
}

/* The ops whose values are binary32 values: casts and selections, and the
 * gradients of those that select or negate. */
static bool ew_is_f32(const ew_op *op)
{
    if (op->kind == EW_CAST || (op->kind == EW_SCALE && op->scale32))
        return true;
    if (op->kind == EW_BACKWARD)
        return op->f == EMU_UNARY_NEG || op->f == EMU_UNARY_ABS ||
               op->f == EMU_UNARY_RELU;
    return op->kind == EW_UNARY &&
           (op->f == EMU_UNARY_NEG || op->f == EMU_UNARY_ABS ||
            op->f == EMU_UNARY_RELU || op->f == EMU_UNARY_CLAMP);
}

/* Runs of EW_RUN elements: loops of constant length, which gcc -O2's
 * cheap vectoriser takes (it leaves loops of a variable count scalar). */
enum { EW_RUN = 64 };

/* relu's value isnan(a) || a > 0 ? a : +0 on the bits, for n <= EW_RUN
 * values (n = EW_RUN: vectorised; the copies to and from the stack take
 * away the aliasing of an in-place op, which would keep the loop
 * scalar): a positive non-zero pattern (+inf, +NaN included) or any NaN
 * is kept. */
static EMU_KERNEL_INLINE void relu_bits(const float *a, float *v,
                                        size_t n)
{
    uint32_t w[EW_RUN];
    memcpy(w, a, n * sizeof *a);
    for (size_t k = 0; k < n; k++) {
        const uint32_t keep = (uint32_t)((int32_t)w[k] > 0) |
                              (uint32_t)((w[k] & 0x7fffffff) > 0x7f800000);
        w[k] &= -keep;
    }
    memcpy(v, w, n * sizeof *v);
}

/* relu's gradient dy * (x > 0 ? 1 : 0) on the bits, n <= EW_RUN values as
 * relu_bits, where dy is finite and x not a NaN: dy, or a zero of dy's
 * sign.  Returns non-zero if another element (rare) is among them, which
 * the caller then forms by the expression. */
static EMU_KERNEL_INLINE uint32_t relu_grad_bits(const float *dy,
                                                 const float *x, float *out,
                                                 size_t n)
{
    uint32_t d[EW_RUN], v[EW_RUN], rare = 0;
    memcpy(d, dy, n * sizeof *dy);
    memcpy(v, x, n * sizeof *x);
    for (size_t k = 0; k < n; k++) {
        const uint32_t pos = -(uint32_t)((int32_t)v[k] > 0);
        rare |= (uint32_t)((d[k] & 0x7fffffff) >= 0x7f800000) |
                (uint32_t)((v[k] & 0x7fffffff) > 0x7f800000);
        d[k] = (d[k] & pos) | (d[k] & 0x80000000u);
    }
    memcpy(out, d, n * sizeof *out);
    return rare;
}

/* fill32 of the gradients that select or negate dy (ew_is_f32): the
 * values of backward_value, whose products with 0, 1 or -1 are binary32
 * values, formed by the same binary64 expressions (a NaN's sign and
 * payload included) and narrowed exactly. */
static EMU_KERNEL_INLINE void ew_backward_fill32(const ew_op *op, size_t i0,
                                                size_t m, float *out)
{
    const float *dy = op->a + i0, *x = op->b + i0;
    switch (op->f) {
    case EMU_UNARY_NEG:
        for (size_t j = 0; j < m; j++)
            out[j] = (float)-(double)dy[j];
        break;
    case EMU_UNARY_ABS:
        for (size_t j = 0; j < m; j++) {
            const double d = dy[j], v = x[j];
            out[j] = (float)(d * (isnan(v) ? v : (double)((v > 0.0) -
                                                          (v < 0.0))));
        }
        break;
    default: { /* EMU_UNARY_RELU */
        /* Where dy is finite and x not a NaN, the product is dy (x > 0)
         * or a zero of dy's sign, on the bits (a loop that vectorises);
         * the other elements (rare) are then formed by the expression. */
        uint32_t rare = 0;
        size_t r = 0;
        for (; r + EW_RUN <= m; r += EW_RUN)
            rare |= relu_grad_bits(dy + r, x + r, out + r, EW_RUN);
        rare |= relu_grad_bits(dy + r, x + r, out + r, m - r);
        if (rare)
            for (size_t j = 0; j < m; j++) {
                const double d = dy[j], v = x[j];
                if (!isfinite(d) || isnan(v))
                    out[j] = (float)(d * (isnan(v) ? v : v > 0.0 ? 1.0 : 0.0));
            }
        break;
    }
    }
}

/* emu_op_out.fill32 for those: the same values as unary_value's, in
 * binary32 (the clamp bounds are binary32 parameters).  Compiled for
 * AVX2 and AVX-512 too (EMU_TARGET_CLONES): ReLU's runs on the bits are
 * then 8 or 16 lanes wide, not SSE2's 4 (ew_fill32 was 4% of the CNN's
 * fp32 step's instructions); integer selections and single roundings
 * (-ffp-contract=off), so every level gives the same bits. */
EMU_TARGET_CLONES
static void ew_fill32(const void *vop, size_t i0, size_t m, float *v)
{
    const ew_op *op = vop;
    const float *a = op->a + i0;
    if (op->kind == EW_CAST) {
        memcpy(v, a, m * sizeof *v);
        return;
    }
    if (op->kind == EW_SCALE) { /* scale32: each product exact */
        const float alpha = (float)op->alpha;
        for (size_t j = 0; j < m; j++)
            v[j] = a[j] * alpha;
        return;
    }
    if (op->kind == EW_BACKWARD) {
        ew_backward_fill32(op, i0, m, v);
        return;
    }
    const float p1 = (float)op->p1, p2 = (float)op->p2;
    switch (op->f) {
    case EMU_UNARY_NEG:
        for (size_t j = 0; j < m; j++)
            v[j] = -a[j];
        break;
    case EMU_UNARY_ABS:
        for (size_t j = 0; j < m; j++)
            v[j] = fabsf(a[j]);
        break;
    case EMU_UNARY_RELU: {
        size_t j = 0;
        for (; j + EW_RUN <= m; j += EW_RUN)
            relu_bits(a + j, v + j, EW_RUN);
        relu_bits(a + j, v + j, m - j);
        break;
    }
    default: /* EMU_UNARY_CLAMP */
        for (size_t j = 0; j < m; j++)
            v[j] = a[j] < p1 ? p1 : a[j] > p2 ? p2 : a[j];
        break;
    }
}

/* Commits op's values into out under rnd.  In-place use is fine: output i
 * reads input element i alone (add_bias's bias aside, which must not
 * share out's storage for the early stores), and the choke point measures
 * (and calls back into op's inputs) before it stores. */
static int ew_commit(emu_ctx *ctx, const char *site, const char *kind,
                     emu_tensor *out, ew_op *op, const emu_rounding *rnd)
{
    op->fmt = &out->fmt;
    op->mode = rnd->mode;
    op->fast = !emu_rnd_is_stochastic(rnd->mode) &&
               (op->kind == EW_UNARY || op->kind == EW_BACKWARD) &&
               ((op->f == EMU_UNARY_GELU && gelu_table_ready()) ||
                (op->kind == EW_UNARY && (op->f == EMU_UNARY_SIGMOID ||
                                          op->f == EMU_UNARY_TANH)));
    bool early = emu_store_early_ok(out, op->a, out->n);
    if (op->kind == EW_BIAS)
        early &= op->b != out->data && emu_store_early_ok(out, op->b, op->dim);
    else
        early &= emu_store_early_ok(out, op->b, out->n);
    emu_op_out o = { .site = site, .kind = kind, .out = out, .op = op,
                     .ref = ew_ref, .rnd = rnd,
                     .inputs_had_nan = ew_all_had_nan(op, out->n) ? NULL
                                                                  : ew_had_nan,
                     .store_early = early, .parallel = true };
    if (ew_is_f32(op))
        o.fill32 = ew_fill32;
    else
        o.fill = ew_fill;
    return emu_commit(ctx, &o);
}

static const char *site_or(const char *site, const char *kind)
{
    return site ? site : kind;
}

/* ---- binary ops ---------------------------------------------------------- */

static int binary(emu_ctx *ctx, const char *site, emu_tensor *out,
                  const emu_tensor *a, const emu_tensor *b, ew_kind kind,
                  const char *name, const emu_rounding *rnd)
{
    site = site_or(site, name);
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "a", a) ||
        emu_check_tensor(ctx, site, "b", b) ||
        emu_check_same_shape(ctx, site, "a", a, "b", b) ||
        emu_check_same_shape(ctx, site, "out", out, "a", a))
        return -1;
    ew_op op = { .kind = kind, .a = a->data, .b = b->data };
    return ew_commit(ctx, site, name, out, &op, rnd);
}

int emu_t_add(emu_ctx *ctx, const char *site, emu_tensor *out,
              const emu_tensor *a, const emu_tensor *b,
              const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    return binary(ctx, site, out, a, b, EW_ADD, "add", rnd);
}

int emu_t_sub(emu_ctx *ctx, const char *site, emu_tensor *out,
              const emu_tensor *a, const emu_tensor *b,
              const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    return binary(ctx, site, out, a, b, EW_SUB, "sub", rnd);
}

int emu_t_mul(emu_ctx *ctx, const char *site, emu_tensor *out,
              const emu_tensor *a, const emu_tensor *b,
              const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    return binary(ctx, site, out, a, b, EW_MUL, "mul", rnd);
}

int emu_t_div(emu_ctx *ctx, const char *site, emu_tensor *out,
              const emu_tensor *a, const emu_tensor *b,
              const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    return binary(ctx, site, out, a, b, EW_DIV, "div", rnd);
}

/* Whether alpha x is a binary32 value, computed exactly by one binary32
 * multiplication, for each of the n values of x: alpha a power of two,
 * and no finite non-zero product leaves the normal range (below it only
 * when alpha < 1: a subnormal times 2^k, k >= 0, keeps its bits), and no
 * inf or NaN among x (they would be exact too; rare, not worth a rule).
 * Then the binary32 fill gives the values the binary64 one gives, and
 * the choke point rounds and measures them the same way, faster (the
 * loss scaling's unscale of every gradient).  One pass over the bits for
 * the smallest and largest non-zero magnitude, in runs of constant length
 * that gcc -O2 vectorises (unsigned min and max: AVX2's, SSE4.1's). */
/* *x's magnitude bits m into the running min(m - 1) (a zero wraps to the
 * top, so that it never is the minimum) and max(m). */
static EMU_KERNEL_INLINE void magnitude_range(const float *x, uint32_t *lo,
                                              uint32_t *hi)
{
    uint32_t m;
    memcpy(&m, x, sizeof m);
    m &= 0x7fffffffu;
    *lo = m - 1 < *lo ? m - 1 : *lo;
    *hi = m > *hi ? m : *hi;
}

EMU_TARGET_CLONES
static bool scale_exact32(const float *x, size_t n, double alpha)
{
    int e;
    if (!(alpha != 0.0 && isfinite(alpha) && frexp(alpha, &e) == 0.5))
        return false;
    enum { RUN = 64 };
    uint32_t lo = UINT32_MAX, hi = 0; /* min |x| - 1 (0 wraps), max |x| */
    size_t i = 0;
    for (; i + RUN <= n; i += RUN)
        for (size_t k = i; k < i + RUN; k++)
            magnitude_range(x + k, &lo, &hi);
    for (; i < n; i++)
        magnitude_range(x + i, &lo, &hi);
    if (hi == 0)
        return true; /* zeros only */
    if (hi >= 0x7f800000u)
        return false;
    float fl, fh;
    const uint32_t l1 = lo + 1;
    memcpy(&fl, &l1, sizeof fl);
    memcpy(&fh, &hi, sizeof fh);
    return (double)fh * alpha < 0x1p128 &&
           (alpha >= 1.0 || (double)fl * alpha >= 0x1p-126);
}

int emu_t_scale(emu_ctx *ctx, const char *site, emu_tensor *out,
                float alpha, const emu_tensor *x, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    site = site_or(site, "scale");
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "x", x) ||
        emu_check_same_shape(ctx, site, "out", out, "x", x))
        return -1;
    ew_op op = { .kind = EW_SCALE, .a = x->data, .alpha = alpha,
                 .scale32 = scale_exact32(x->data, x->n, alpha) };
    return ew_commit(ctx, site, "scale", out, &op, rnd);
}

int emu_t_axpy(emu_ctx *ctx, const char *site, emu_tensor *out, float alpha,
               const emu_tensor *x, const emu_tensor *y,
               const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    site = site_or(site, "axpy");
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "x", x) ||
        emu_check_tensor(ctx, site, "y", y) ||
        emu_check_same_shape(ctx, site, "x", x, "y", y) ||
        emu_check_same_shape(ctx, site, "out", out, "x", x))
        return -1;
    ew_op op = { .kind = EW_AXPY, .a = x->data, .b = y->data, .alpha = alpha };
    return ew_commit(ctx, site, "axpy", out, &op, rnd);
}

int emu_t_add_bias(emu_ctx *ctx, const char *site, emu_tensor *out,
                   const emu_tensor *x, const emu_tensor *bias, int axis,
                   const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    site = site_or(site, "add_bias");
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "x", x) ||
        emu_check_tensor(ctx, site, "bias", bias) ||
        emu_check_same_shape(ctx, site, "out", out, "x", x))
        return -1;
    if (axis < 0 || axis >= x->ndim)
        return emu_ctx_fail(ctx, site, "axis %d out of range for x '%s' "
                            "with %d dimensions", axis, x->name, x->ndim);
    if (bias->n != x->shape[axis]) {
        char sx[96];
        emu_tensor_shape_string(x, sx, sizeof sx);
        return emu_ctx_fail(ctx, site, "bias '%s' has %zu elements, x '%s' "
                            "%s has %zu along axis %d", bias->name, bias->n,
                            x->name, sx, x->shape[axis], axis);
    }
    size_t inner = 1;
    for (int d = axis + 1; d < x->ndim; d++)
        inner *= x->shape[d];
    ew_op op = { .kind = EW_BIAS, .a = x->data, .b = bias->data,
                 .inner = inner, .dim = x->shape[axis] };
    return ew_commit(ctx, site, "add_bias", out, &op, rnd);
}

/* ---- unary ops ----------------------------------------------------------- */

static double unary_value(const emu_format *f, emu_unary fn, double x,
                          double p1, double p2, double *lo)
{
    *lo = 0.0;
    switch (fn) {
    case EMU_UNARY_NEG: return -x;
    case EMU_UNARY_ABS: return fabs(x);
    case EMU_UNARY_RELU: return isnan(x) || x > 0.0 ? x : 0.0;
    case EMU_UNARY_LEAKY_RELU: return isnan(x) || x > 0.0 ? x : p1 * x;
    case EMU_UNARY_GELU: return tr_gelu(f, x);
    case EMU_UNARY_TANH: return tr_tanh(f, x);
    case EMU_UNARY_SIGMOID: return tr_sigmoid(f, x);
    case EMU_UNARY_EXP: return tr_exp(f, x);
    case EMU_UNARY_LOG: return tr_log(f, x);
    case EMU_UNARY_SQRT: {
        double h;
        exact_sqrt(x, &h, lo);
        return h;
    }
    case EMU_UNARY_SQUARE: return x * x;
    case EMU_UNARY_CLAMP: return x < p1 ? p1 : x > p2 ? p2 : x;
    default: return NAN;
    }
}

double emu_unary_eval(const emu_format *f, emu_unary fn, double x)
{
    double lo;
    return unary_value(f, fn, x, 0.0, 0.0, &lo);
}

int emu_t_unary(emu_ctx *ctx, const char *site, emu_tensor *out,
                const emu_tensor *x, emu_unary f, float param, float param2,
                const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    site = site_or(site, emu_unary_name(f));
    if (emu_check_rounding(ctx, site, rnd))
        return -1;
    if ((unsigned)f >= EMU_UNARY_COUNT)
        return emu_ctx_fail(ctx, site, "unknown unary function %d", (int)f);
    if (emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "x", x) ||
        emu_check_same_shape(ctx, site, "out", out, "x", x))
        return -1;
    if (f == EMU_UNARY_LEAKY_RELU && !isfinite(param))
        return emu_ctx_fail(ctx, site, "leaky relu slope %g is not finite",
                            (double)param);
    if (f == EMU_UNARY_CLAMP && !(param <= param2))
        return emu_ctx_fail(ctx, site, "clamp bounds [%g, %g] are not an "
                            "interval", (double)param, (double)param2);
    ew_op op = { .kind = EW_UNARY, .f = f, .a = x->data, .p1 = param,
                 .p2 = param2 };
    return ew_commit(ctx, site, emu_unary_name(f), out, &op, rnd);
}

/* ---- backward ------------------------------------------------------------
 * dx = dy * f'(.) with f' at x (relu, leaky relu, abs, gelu, log, square)
 * or at the forward output y (tanh, sigmoid, exp, sqrt), where it is
 * cheaper and exact: exp' = y, sqrt' = 1/(2y).  Non-finite inputs follow
 * the formula's IEEE arithmetic (dy = inf where f' = 0 gives NaN). */

static double backward_value(const emu_format *f, emu_unary fn, double dy,
                             double v, double slope, double *lo)
{
    *lo = 0.0;
    double h;
    switch (fn) {
    case EMU_UNARY_NEG: return -dy;
    case EMU_UNARY_ABS:
        return dy * (isnan(v) ? v : (double)((v > 0.0) - (v < 0.0)));
    case EMU_UNARY_RELU: return dy * (isnan(v) ? v : v > 0.0 ? 1.0 : 0.0);
    case EMU_UNARY_LEAKY_RELU:
        return dy * (isnan(v) ? v : v > 0.0 ? 1.0 : slope);
    case EMU_UNARY_GELU: return tr_gelu_grad(f, dy, v);
    case EMU_UNARY_TANH: exact_tanh_grad(dy, v, &h, lo); return h;
    case EMU_UNARY_SIGMOID: exact_sigmoid_grad(dy, v, &h, lo); return h;
    case EMU_UNARY_EXP: return dy * v;
    case EMU_UNARY_LOG: exact_div(dy, v, &h, lo); return h;
    case EMU_UNARY_SQRT: exact_div(dy, 2.0 * v, &h, lo); return h;
    case EMU_UNARY_SQUARE: return dy * (2.0 * v);
    default: return NAN;
    }
}

int emu_t_unary_backward(emu_ctx *ctx, const char *site, emu_tensor *dx,
                         const emu_tensor *dy, const emu_tensor *x_or_y,
                         emu_unary f, float param, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    const char *kind = (unsigned)f < EMU_UNARY_COUNT ? backward_kinds[f]
                                                     : NULL;
    site = site_or(site, kind ? kind : "unary_backward");
    if (emu_check_rounding(ctx, site, rnd))
        return -1;
    if (!kind)
        return emu_ctx_fail(ctx, site, "no backward for unary function %s",
                            (unsigned)f < EMU_UNARY_COUNT ? unary_names[f]
                                                          : "(unknown)");
    if (emu_check_tensor(ctx, site, "dx", dx) ||
        emu_check_tensor(ctx, site, "dy", dy) ||
        emu_check_tensor(ctx, site, "x_or_y", x_or_y) ||
        emu_check_same_shape(ctx, site, "dy", dy, "x_or_y", x_or_y) ||
        emu_check_same_shape(ctx, site, "dx", dx, "dy", dy))
        return -1;
    if (f == EMU_UNARY_LEAKY_RELU && !isfinite(param))
        return emu_ctx_fail(ctx, site, "leaky relu slope %g is not finite",
                            (double)param);
    ew_op op = { .kind = EW_BACKWARD, .f = f, .a = dy->data,
                 .b = x_or_y->data, .p1 = param };
    return ew_commit(ctx, site, kind, dx, &op, rnd);
}

/* ---- casts --------------------------------------------------------------- */

int emu_t_cast(emu_ctx *ctx, const char *site, emu_tensor *out,
               const emu_tensor *in, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    site = site_or(site, "cast");
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "out", out) ||
        emu_check_tensor(ctx, site, "in", in) ||
        emu_check_same_shape(ctx, site, "out", out, "in", in))
        return -1;
    ew_op op = { .kind = EW_CAST, .a = in->data };
    return ew_commit(ctx, site, "cast", out, &op, rnd);
}

/* src holds n binary32 values; the tensor takes the first out->n. */
int emu_t_load(emu_ctx *ctx, const char *site, emu_tensor *out,
               const float *src, size_t n, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    site = site_or(site, "load");
    if (emu_check_rounding(ctx, site, rnd) ||
        emu_check_tensor(ctx, site, "out", out))
        return -1;
    if (!src)
        return emu_ctx_fail(ctx, site, "no source data");
    if (n < out->n)
        return emu_ctx_fail(ctx, site, "%zu source values for the %zu "
                            "elements of '%s'", n, out->n, out->name);
    ew_op op = { .kind = EW_CAST, .a = src };
    return ew_commit(ctx, site, "load", out, &op, rnd);
}
