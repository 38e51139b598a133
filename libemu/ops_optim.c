/*
 * ops_optim.c — optimizer updates: SGD (momentum, weight decay) and Adam
 * (bias correction, decoupled weight decay), in place on the weights and
 * the optimizer state.
 *
 * Each state tensor is rounded into its own format through emu_commit():
 * site "<site>.v" (and "<site>.m" for Adam) first, under o->state_rnd if
 * given (else the op's rnd), then the weights at "<site>" under rnd,
 * whose update reads the state as stored (rounded), as an optimizer with
 * low-precision state does.
 *
 * What is exact.  Carrier values are binary32, so a product of two of
 * them is exact in one double, and so is lr * wd.  A value that is a sum
 * of such products (or of TwoProduct pairs, for a double times a binary32)
 * is formed exactly as a non-overlapping expansion (Shewchuk's
 * Grow-Expansion, TwoSum only) and handed to the choke point as hi + lo,
 * hi within one ulp of the sum and lo carrying the sign of the remainder
 * exactly and its value to a relative 2^-52: every deterministic mode
 * rounds the exact sum, and stochastic rounding's probability is exact to
 * about 2^-64.  Adam's weight step needs a square root and divisions; its
 * update u is evaluated in binary64 and w - u is then formed exactly.
 * emu_exact_sum_ref below is that sum's definition; the update passes
 * form it with optim_sum.h's straight-line equivalents (tested bit for
 * bit against it), one vectorisable loop per state tensor, and fall back
 * to it only for elements whose terms are not finite.
 *
 * Swamping.  The weight update is the accumulation the mixed-precision
 * papers measure (an update below half an ulp of w vanishes).  Every
 * weight whose update t is non-zero counts one add; an update that left
 * w unchanged counts as absorbed; the bits lost are counted by
 * emu_accum_count_add against the weights' format.  The choke point
 * counts them from the weights it rounds: the update hands it the old
 * weights and t (emu_op_out's acc_old and addend).
 *
 * A zero hyper-parameter (momentum, weight decay, beta) omits its term
 * rather than multiplying: 0 * inf would otherwise make NaN.
 *
 * Called by the nn layer's optimizer step and the CLI.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"
#include "optim_sum.h"

/* ---- exact sums of a few doubles -------------------------------------- */

enum { MAX_TERMS = 4 };

/* a * b = *p + *e exactly (no underflow: binary32-derived operands). */
static void two_prod(double a, double b, double *p, double *e)
{
    *p = a * b;
    *e = fma(a, b, -*p);
}

/* *hi + *lo represents t[0] + ... + t[n-1] (n <= MAX_TERMS) as above:
 * the exact sum S lies strictly within ulp(hi) of hi, sign(lo) =
 * sign(S - hi), and |lo - (S - hi)| <= 2^-52 |lo|.  A zero sum is -0
 * only if every term is -0 (IEEE addition's rule); a non-finite term
 * gives the plain IEEE sum in order. */
void emu_exact_sum_ref(const double *t, int n, double *hi, double *lo)
{
    double e[MAX_TERMS];
    int m = 0;
    bool all_neg_zero = true;
    for (int i = 0; i < n; i++) {
        if (!isfinite(t[i])) {
            double s = 0.0;
            for (int j = 0; j < n; j++)
                s += t[j];
            *hi = s;
            *lo = 0.0;
            return;
        }
        all_neg_zero = all_neg_zero && t[i] == 0.0 && signbit(t[i]);
    }
    /* Grow-Expansion: e stays non-overlapping, increasing in magnitude,
     * zero-free. */
    for (int i = 0; i < n; i++) {
        double q = t[i];
        int k = 0;
        for (int j = 0; j < m; j++) {
            double s, err;
            emu_two_sum(q, e[j], &s, &err);
            if (err != 0.0)
                e[k++] = err;
            q = s;
        }
        if (q != 0.0)
            e[k++] = q;
        m = k;
    }
    if (m == 0) {
        *hi = all_neg_zero ? -0.0 : 0.0;
        *lo = 0.0;
        return;
    }
    /* Top down: add components while the sum stays exact.  The first
     * inexact addition leaves an error l that is a multiple of the unit
     * of the component just added, and everything below that component
     * is smaller than that unit, hence than |l|: l plus the next
     * component has the sign of the whole remainder. */
    double h = e[m - 1], l = 0.0;
    int i = m - 2;
    while (i >= 0) {
        double s, err;
        emu_two_sum(h, e[i], &s, &err);
        h = s;
        i--;
        if (err != 0.0) {
            l = err;
            break;
        }
    }
    if (l != 0.0 && i >= 0)
        l += e[i];
    *hi = h;
    *lo = l;
}

/* ---- shared checks and helpers ---------------------------------------- */

/* c * x, exact for binary32 c and x; a zero coefficient omits its term
 * (as optimizers do: no weight decay must not turn an infinite weight
 * into NaN through 0 * inf). */
static double coef_times(double c, double x)
{
    return c == 0.0 ? 0.0 : c * x;
}

static int check_distinct(emu_ctx *ctx, const char *site,
                          const emu_tensor *const *t, const char *const *what,
                          int n)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (emu_tensors_overlap(t[i], t[j]))
                return emu_ctx_fail(ctx, site, "%s '%s' and %s '%s' share "
                                    "storage", what[i], t[i]->name, what[j],
                                    t[j]->name);
    return 0;
}

static float *copy_of(emu_ctx *ctx, const char *site, const emu_tensor *t)
{
    float *c = malloc(t->n * sizeof *c);
    if (!c)
        emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for a copy of '%s'", t->name);
    else /* on ctx->threads: its fresh pages fault in as it writes */
        emu_pool_memcpy(ctx->threads, c, t->data, t->n * sizeof *c);
    return c;
}

static void sub_site(char *buf, size_t size, const char *site,
                     const char *name)
{
    snprintf(buf, size, "%s.%s", site ? site : "op", name);
}

/* ---- the update passes --------------------------------------------------
 *
 * Each pass forms its exact sums with optim_sum.h's straight-line code
 * (bit-identical to emu_exact_sum_ref for finite terms, and vectorisable),
 * noting whether any result came out non-finite; only then does a second
 * pass redo those elements with the reference, which also defines what
 * non-finite terms give.  Products of two binary32 values, and of a
 * binary32 value and a binary32-times-binary32 coefficient, are exact in
 * one double; the others are Dekker pairs. */

/* Whether x is an infinity or a NaN, as a 0/1 word (no branch). */
static inline uint64_t nonfinite(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return (uint64_t)(((u >> 52) & 0x7ff) == 0x7ff);
}

/* The reference terms of SGD's velocity. */
static void sgd_velocity_terms(double *terms, double mom, double wd, float v0,
                               float g, float w0)
{
    terms[0] = coef_times(mom, v0);
    terms[1] = g;
    terms[2] = coef_times(wd, w0);
}

/* hi + lo = mom v0 + g + wd w0 (zero coefficients omit their terms). */
static void sgd_velocity(double *restrict hi, double *restrict lo,
                         const float *v0, const float *g, const float *w0,
                         double mom, double wd, size_t n,
                         uint64_t (*vel)(double *restrict, double *restrict,
                                         const float *restrict,
                                         const float *restrict, double, bool,
                                         size_t))
{
    const double m = mom, keep_m = mom != 0.0;
    uint64_t odd = 0;
    if (wd == 0.0) {
        /* vel: the loop below, blocked and cloned (sgd_kernels) */
        odd = vel(hi, lo, v0, g, m, mom != 0.0, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            const double a = keep_m ? m * v0[i] : 0.0;
            emu_osum3(a, g[i], wd * w0[i], &hi[i], &lo[i]);
            odd |= nonfinite(hi[i]);
        }
    }
    if (!odd)
        return;
    for (size_t i = 0; i < n; i++)
        if (nonfinite(hi[i])) {
            double terms[3];
            sgd_velocity_terms(terms, mom, wd, v0[i], g[i], w0[i]);
            emu_exact_sum_ref(terms, 3, &hi[i], &lo[i]);
        }
}

/* The reference terms of plain SGD's step: w - lr g - (lr wd) w, lr wd
 * exact, its product with w a TwoProduct pair. */
static void sgd_plain_terms(double *terms, double lr, double lrwd, float g,
                            float w0)
{
    double p = 0.0, pe = 0.0;
    if (lrwd != 0.0)
        two_prod(lrwd, w0, &p, &pe);
    terms[0] = -(lr * g);
    terms[1] = -p;
    terms[2] = -pe;
    terms[3] = w0;
}

/* t = -lr g - (lr wd) w0 (the addend), hi + lo = w0 + t. */
static void sgd_plain(double *restrict hi, double *restrict lo,
                      double *restrict t, const float *w0, const float *g,
                      double lr, double wd, size_t n)
{
    const double lrwd = lr * wd;
    uint64_t odd = 0;
    if (lrwd == 0.0) {
        /* The terms -p and -pe are -0: t is -lr g itself, and the sum
         * TwoSum's pair (its zero is -0 only if w0 and t both are). */
        for (size_t i = 0; i < n; i++) {
            const double x = -(lr * g[i]);
            double r;
            t[i] = x;
            emu_two_sum(w0[i], x, &hi[i], &r);
            lo[i] = r + 0.0;
            odd |= nonfinite(hi[i]);
        }
    } else {
        double ah, al;
        emu_osum_split(lrwd, &ah, &al);
        for (size_t i = 0; i < n; i++) {
            const double w = w0[i], x = -(lr * g[i]);
            double p, pe, tl;
            emu_osum_two_prod(lrwd, ah, al, w, &p, &pe);
            emu_osum3(x, -p, -pe, &t[i], &tl);
            emu_osum4(x, -p, -pe, w, &hi[i], &lo[i]);
            odd |= nonfinite(hi[i]);
        }
    }
    if (!odd)
        return;
    for (size_t i = 0; i < n; i++)
        if (nonfinite(hi[i])) {
            double terms[4], tl;
            sgd_plain_terms(terms, lr, lrwd, g[i], w0[i]);
            emu_exact_sum_ref(terms, 3, &t[i], &tl);
            emu_exact_sum_ref(terms, 4, &hi[i], &lo[i]);
        }
}

/* The reference terms of an Adam moment: beta s + (1 - beta) x, the
 * second product a TwoProduct pair. */
static void adam_moment_terms(double *terms, double beta, double c, float s,
                              double x)
{
    terms[0] = coef_times(beta, s);
    two_prod(c, x, &terms[1], &terms[2]);
}

/* hi + lo = beta s + c x with c = 1 - beta, x = g (first moment) or g^2
 * (second: exact in a double), c split once as (ch, cl); odd collects
 * the non-finite test of hi on its bits, as SGD_VEL's. */
#define ADAM_MOM(j, a, x)                                                     \
    do {                                                                      \
        double p_, pe_;                                                       \
        uint64_t u_;                                                          \
        emu_osum_two_prod(c, ch, cl, (x), &p_, &pe_);                         \
        emu_osum3((a), p_, pe_, &hi[j], &lo[j]);                              \
        memcpy(&u_, &hi[j], sizeof u_);                                       \
        odd |= (((u_ >> 52) & 0x7ff) + 1) >> 11;                              \
    } while (0)

/* One loop of the moment's four kinds (first or second; beta kept, or
 * zero and its term omitted), in blocks of ADAM_MBLOCK for the vectoriser
 * as SGD's kernels (the moments were a scalar loop, ~8% of a gpt fp32
 * step); the remainder through the same expression.  GCC vectorises
 * the AVX2 and AVX-512 clones (emu_osum3 selects on the bits for that). */
#define ADAM_MOM_LOOP(A, X)                                                   \
    do {                                                                      \
        for (; i + ADAM_MBLOCK <= n; i += ADAM_MBLOCK)                        \
            for (size_t j = i; j < i + ADAM_MBLOCK; j++)                      \
                ADAM_MOM(j, A, X);                                            \
        for (; i < n; i++) {                                                  \
            const size_t j = i;                                               \
            ADAM_MOM(j, A, X);                                                \
        }                                                                     \
    } while (0)

enum { ADAM_MBLOCK = 16 };

#define ADAM_MOM_FN(sfx, attrs)                                               \
    attrs static uint64_t adam_mom_##sfx(double *restrict hi,                 \
                                         double *restrict lo,                 \
                                         const float *restrict s,             \
                                         const float *restrict g,             \
                                         bool square, double beta, double c,  \
                                         size_t n)                            \
    {                                                                         \
        double ch, cl;                                                        \
        emu_osum_split(c, &ch, &cl);                                          \
        uint64_t odd = 0;                                                     \
        size_t i = 0;                                                         \
        /* a zero beta omits its term: 0 inf would be NaN */                  \
        if (beta != 0.0 && square)                                            \
            ADAM_MOM_LOOP(beta * (double)s[j], (double)g[j] * (double)g[j]);  \
        else if (beta != 0.0)                                                 \
            ADAM_MOM_LOOP(beta * (double)s[j], (double)g[j]);                 \
        else if (square)                                                      \
            ADAM_MOM_LOOP(0.0, (double)g[j] * (double)g[j]);                  \
        else                                                                  \
            ADAM_MOM_LOOP(0.0, (double)g[j]);                                 \
        return odd;                                                           \
    }

ADAM_MOM_FN(base, )
#if EMU_HAVE_ISA_CLONES
ADAM_MOM_FN(avx2, EMU_ISA_TARGET_AVX2)
ADAM_MOM_FN(avx512, EMU_ISA_TARGET_AVX512)
#endif

typedef uint64_t (*adam_mom_fn)(double *restrict, double *restrict,
                                const float *restrict, const float *restrict,
                                bool, double, double, size_t);

static adam_mom_fn adam_mom_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return adam_mom_avx512;
    if (isa == EMU_ISA_AVX2)
        return adam_mom_avx2;
#endif
    (void)isa;
    return adam_mom_base;
}

/* The moment's pairs through the level's kernel; elements whose hi came
 * out non-finite are redone by the reference. */
static void adam_moment(adam_mom_fn kern, double *restrict hi,
                        double *restrict lo, const float *s, const float *g,
                        bool square, double beta, double c, size_t n)
{
    if (!kern(hi, lo, s, g, square, beta, c, n))
        return;
    for (size_t i = 0; i < n; i++)
        if (nonfinite(hi[i])) {
            const double gi = g[i];
            double terms[3];
            adam_moment_terms(terms, beta, c, s[i], square ? gi * gi : gi);
            emu_exact_sum_ref(terms, 3, &hi[i], &lo[i]);
        }
}

/* ---- Adam's weight step --------------------------------------------------
 *
 * u = lr (m_hat / (sqrt(v_hat) + eps) + wd w0), t = -u, hi + lo = w0 + t
 * (TwoSum), from the stored moments.  Every operation is an IEEE one
 * (division and square root correctly rounded), so any vector width gives
 * the scalar loop's bits.  What kept the loop scalar was sqrt's errno: the
 * compiler calls the library for a negative operand, and GCC 12 does not
 * honour -fno-math-errno as a per-function attribute.  The square roots
 * are therefore the SSE2/AVX/AVX-512 instructions themselves (IEEE's
 * correctly rounded sqrt; a negative or NaN operand gives the NaN the
 * library's sqrt returns too), taken per block of fixed length between two
 * loops that the compiler vectorises; one clone per instruction-set level
 * (isa.c chooses). */
typedef struct adam_step_k {
    double bc1, bc2, lr, eps, wd;
} adam_step_k;

enum { ADAM_BLOCK = 16 };

#if defined(__GNUC__) && defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#define ADAM_SQRT_ONE(x) _mm_cvtsd_f64(_mm_sqrt_sd(_mm_setzero_pd(), \
                                                   _mm_set_sd(x)))
#define ADAM_SQRT_SSE2(s)                                                     \
    for (int j_ = 0; j_ < ADAM_BLOCK; j_ += 2)                                \
        _mm_storeu_pd((s) + j_, _mm_sqrt_pd(_mm_loadu_pd((s) + j_)))
#define ADAM_SQRT_AVX(s)                                                      \
    for (int j_ = 0; j_ < ADAM_BLOCK; j_ += 4)                                \
        _mm256_storeu_pd((s) + j_, _mm256_sqrt_pd(_mm256_loadu_pd((s) + j_)))
#define ADAM_SQRT_AVX512(s)                                                   \
    for (int j_ = 0; j_ < ADAM_BLOCK; j_ += 8)                                \
        _mm512_storeu_pd((s) + j_, _mm512_sqrt_pd(_mm512_loadu_pd((s) + j_)))
#else
#define ADAM_SQRT_ONE(x) sqrt(x)
#define ADAM_SQRT_SSE2(s)                                                     \
    for (int j_ = 0; j_ < ADAM_BLOCK; j_++)                                   \
        (s)[j_] = sqrt((s)[j_])
#endif

/* The step of element j, its square root r = sqrt(v_hat) given. */
#define ADAM_STEP(k, j, r, m, w0, t, hi, lo)                                  \
    do {                                                                      \
        const double mh_ = (double)(m)[j] / (k).bc1;                          \
        const double wt_ = (k).wd == 0.0 ? 0.0 : (k).wd * (double)(w0)[j];    \
        const double u_ = (k).lr * (mh_ / ((r) + (k).eps) + wt_);             \
        const double w_ = (w0)[j], nu_ = -u_;                                 \
        const double s_ = w_ + nu_, bv_ = s_ - w_, av_ = s_ - bv_;            \
        (t)[j] = nu_;                                                         \
        (hi)[j] = s_;                                                         \
        (lo)[j] = (w_ - av_) + (nu_ - bv_);                                   \
    } while (0)

#define ADAM_STEP_FN(name, attrs, SQRT_BLOCK)                                 \
    attrs static void name(const adam_step_k *kp, const float *restrict m,    \
                           const float *restrict v,                           \
                           const float *restrict w0, double *restrict t,      \
                           double *restrict hi, double *restrict lo,          \
                           size_t n)                                          \
    {                                                                         \
        const adam_step_k k = *kp;                                            \
        double r[ADAM_BLOCK];                                                 \
        size_t i = 0;                                                         \
        for (; i + ADAM_BLOCK <= n; i += ADAM_BLOCK) {                        \
            for (int j = 0; j < ADAM_BLOCK; j++)                              \
                r[j] = (double)v[i + j] / k.bc2;                              \
            SQRT_BLOCK(r);                                                    \
            for (int j = 0; j < ADAM_BLOCK; j++)                              \
                ADAM_STEP(k, i + j, r[j], m, w0, t, hi, lo);                  \
        }                                                                     \
        for (; i < n; i++) {                                                  \
            const double r1 = ADAM_SQRT_ONE((double)v[i] / k.bc2);            \
            ADAM_STEP(k, i, r1, m, w0, t, hi, lo);                            \
        }                                                                     \
    }

typedef void (*adam_step_fn)(const adam_step_k *, const float *restrict,
                             const float *restrict, const float *restrict,
                             double *restrict, double *restrict,
                             double *restrict, size_t);

ADAM_STEP_FN(adam_step_base, , ADAM_SQRT_SSE2)
#if EMU_HAVE_ISA_CLONES
ADAM_STEP_FN(adam_step_avx2, EMU_ISA_TARGET_AVX2, ADAM_SQRT_AVX)
ADAM_STEP_FN(adam_step_avx512, EMU_ISA_TARGET_AVX512, ADAM_SQRT_AVX512)
#endif

static adam_step_fn adam_step_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return adam_step_avx512;
    if (isa == EMU_ISA_AVX2)
        return adam_step_avx2;
#endif
    (void)isa;
    return adam_step_base;
}

/* ---- SGD -------------------------------------------------------------- */

/* The two loops of every momentum step without weight decay (the
 * velocity's pair mom v0 + g, emu_osum2z; the weights' w0 - lr v, a
 * TwoSum), in blocks of SGD_BLOCK: a constant trip count is what gcc
 * -O2's cheap vectoriser takes, so they run in vector lanes; one clone
 * per instruction-set level (isa.c chooses), the same IEEE operations in
 * the same order in each.  The velocity loop's non-finite test is on the
 * bits ((e + 1) >> 11 is 1 for the exponent field 0x7ff alone), which
 * SSE2 has in 64-bit lanes. */
enum { SGD_BLOCK = 16 };

#define SGD_VEL(i, a)                                                         \
    do {                                                                      \
        const double a_ = (a);                                                \
        uint64_t u_;                                                          \
        emu_osum2z(a_, g[i], &hi[i], &lo[i]);                                 \
        memcpy(&u_, &hi[i], sizeof u_);                                       \
        odd |= (((u_ >> 52) & 0x7ff) + 1) >> 11;                              \
    } while (0)

#define SGD_WMOM(i)                                                           \
    do {                                                                      \
        t[i] = -(lr * (double)v[i]);                                          \
        emu_two_sum(w0[i], t[i], &hi[i], &lo[i]);                             \
    } while (0)

#define SGD_KERNELS(sfx, attrs)                                               \
    attrs static uint64_t sgd_vel_##sfx(double *restrict hi,                  \
                                        double *restrict lo,                  \
                                        const float *restrict v0,             \
                                        const float *restrict g, double mom,  \
                                        bool keep, size_t n)                  \
    {                                                                         \
        uint64_t odd = 0;                                                     \
        size_t i = 0;                                                         \
        if (keep) {                                                           \
            for (; i + SGD_BLOCK <= n; i += SGD_BLOCK)                        \
                for (size_t j = i; j < i + SGD_BLOCK; j++)                    \
                    SGD_VEL(j, mom * (double)v0[j]);                          \
            for (; i < n; i++)                                                \
                SGD_VEL(i, mom * (double)v0[i]);                              \
        } else { /* a zero momentum omits its term: 0 inf would be NaN */     \
            for (; i + SGD_BLOCK <= n; i += SGD_BLOCK)                        \
                for (size_t j = i; j < i + SGD_BLOCK; j++)                    \
                    SGD_VEL(j, 0.0);                                          \
            for (; i < n; i++)                                                \
                SGD_VEL(i, 0.0);                                              \
        }                                                                     \
        return odd;                                                           \
    }                                                                         \
    attrs static void sgd_wmom_##sfx(double *restrict t, double *restrict hi, \
                                     double *restrict lo,                     \
                                     const float *restrict v,                 \
                                     const float *restrict w0, double lr,     \
                                     size_t n)                                \
    {                                                                         \
        size_t i = 0;                                                         \
        for (; i + SGD_BLOCK <= n; i += SGD_BLOCK)                            \
            for (size_t j = i; j < i + SGD_BLOCK; j++)                        \
                SGD_WMOM(j);                                                  \
        for (; i < n; i++)                                                    \
            SGD_WMOM(i);                                                      \
    }

SGD_KERNELS(base, )
#if EMU_HAVE_ISA_CLONES
SGD_KERNELS(avx2, EMU_ISA_TARGET_AVX2)
SGD_KERNELS(avx512, EMU_ISA_TARGET_AVX512)
#endif

typedef struct sgd_kernels {
    uint64_t (*vel)(double *restrict, double *restrict, const float *restrict,
                    const float *restrict, double, bool, size_t);
    void (*wmom)(double *restrict, double *restrict, double *restrict,
                 const float *restrict, const float *restrict, double, size_t);
} sgd_kernels;

static sgd_kernels sgd_kernels_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return (sgd_kernels){ sgd_vel_avx512, sgd_wmom_avx512 };
    if (isa == EMU_ISA_AVX2)
        return (sgd_kernels){ sgd_vel_avx2, sgd_wmom_avx2 };
#endif
    (void)isa;
    return (sgd_kernels){ sgd_vel_base, sgd_wmom_base };
}

typedef struct sgd_op {
    const float *w0, *v0, *g; /* inputs as they were before the update   */
    const float *v_new;       /* the stored new momentum, or NULL        */
    double lr, mom, wd;
    sgd_kernels k;            /* the vector loops of this process's level */
} sgd_op;

/* The producers of the commits (emu/extend.h): each chunk's exact sums,
 * formed while the chunk is rounded and measured, instead of whole hi and
 * lo arrays; the weights' addends too, into the chunk's array that the
 * choke point's swamping count reads (fill_add). */
static int sgd_v_fill(const void *opv, size_t i0, size_t m, double *hi,
                      double *lo)
{
    const sgd_op *op = opv;
    sgd_velocity(hi, lo, op->v0 + i0, op->g + i0, op->w0 + i0, op->mom,
                 op->wd, m, op->k.vel);
    return 1;
}

/* w - lr v: lr v is exact in one double, TwoSum makes the pair. */
static int sgd_w_mom_fill(const void *opv, size_t i0, size_t m, double *hi,
                          double *lo, double *t)
{
    const sgd_op *op = opv;
    op->k.wmom(t, hi, lo, op->v_new + i0, op->w0 + i0, op->lr, m);
    return 1;
}

static int sgd_w_plain_fill(const void *opv, size_t i0, size_t m, double *hi,
                            double *lo, double *t)
{
    const sgd_op *op = opv;
    sgd_plain(hi, lo, t, op->w0 + i0, op->g + i0, op->lr, op->wd, m);
    return 1;
}

static bool sgd_had_nan(const void *opv, size_t i)
{
    const sgd_op *op = opv;
    return isnan(op->w0[i]) || isnan(op->g[i]) ||
           (op->v0 && isnan(op->v0[i])) || (op->v_new && isnan(op->v_new[i]));
}

/* v = momentum v + g + wd w, exact (products of binary32 values are exact
 * at 48 bits; the sum is rounded once at the given precision + 64). */
static int sgd_v_ref(const void *opv, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const sgd_op *op = opv;
    mpfr_t a, b;
    mpfr_inits2(mpfr_get_prec(exact) + 64, a, b, (mpfr_ptr)0);
    mpfr_set_d(a, op->mom, MPFR_RNDN);
    mpfr_mul_d(a, a, op->v0[i], MPFR_RNDN);
    mpfr_set_d(b, op->wd, MPFR_RNDN);
    mpfr_mul_d(b, b, op->w0[i], MPFR_RNDN);
    mpfr_add(a, a, b, MPFR_RNDN);
    mpfr_add_d(exact, a, op->g[i], MPFR_RNDN);
    mpfr_clears(a, b, (mpfr_ptr)0);
    return 0;
}

/* w = w - lr v_new, or w - lr (g + wd w) without momentum state. */
static int sgd_w_ref(const void *opv, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const sgd_op *op = opv;
    mpfr_t a, b;
    mpfr_inits2(mpfr_get_prec(exact) + 64, a, b, (mpfr_ptr)0);
    if (op->v_new) {
        mpfr_set_d(a, op->v_new[i], MPFR_RNDN);
    } else {
        mpfr_set_d(a, op->wd, MPFR_RNDN);
        mpfr_mul_d(a, a, op->w0[i], MPFR_RNDN);
        mpfr_add_d(a, a, op->g[i], MPFR_RNDN);
    }
    mpfr_mul_d(a, a, op->lr, MPFR_RNDN);
    mpfr_set_d(b, op->w0[i], MPFR_RNDN);
    mpfr_sub(exact, b, a, MPFR_RNDN);
    mpfr_clears(a, b, (mpfr_ptr)0);
    return 0;
}

int emu_t_sgd_update(emu_ctx *ctx, const char *site, emu_tensor *w,
                     emu_tensor *v, const emu_tensor *g,
                     const emu_sgd_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (emu_check_rounding(ctx, site, rnd))
        return -1;
    if (!o)
        return emu_ctx_fail(ctx, site, "SGD options: NULL");
    /* The state's own rounding, or the weights'. */
    const emu_rounding *state_rnd = o->state_rnd ? o->state_rnd : rnd;
    if (emu_check_rounding(ctx, site, state_rnd))
        return -1;
    if (emu_check_tensor(ctx, site, "w", w) ||
        emu_check_tensor(ctx, site, "g", g) ||
        emu_check_same_shape(ctx, site, "w", w, "g", g))
        return -1;
    if (v && (emu_check_tensor(ctx, site, "v", v) ||
              emu_check_same_shape(ctx, site, "v", v, "w", w)))
        return -1;
    if (!v && o->momentum != 0.0f)
        return emu_ctx_fail(ctx, site, "momentum %g needs a velocity tensor "
                            "v", (double)o->momentum);
    {
        const emu_tensor *t[3] = { w, g, v };
        const char *what[3] = { "w", "g", "v" };
        if (check_distinct(ctx, site, t, what, v ? 3 : 2))
            return -1;
    }
    /* w is written in place by the last commit, chunk by chunk, each
     * after its callbacks ran (they read w at their own index only:
     * store_early); v is overwritten by the first the same way, and the
     * weight's NaN provenance still asks whether its old value was NaN.
     * With no NaN among the old values (every step of a run that trains)
     * that answer is no for each, and v itself serves as v0: read at an
     * element's own index before its new value is stored, then asking
     * isnan of the new value, which sgd_had_nan asks anyway.  Otherwise
     * (or rather than scan it twice) a copy.  With momentum the scan is
     * not needed either: an old NaN makes the new velocity NaN (m v0 is
     * NaN, and rounding keeps a NaN in a format that has one), so the new
     * value answers for the old one. */
    const float *w0 = w->data;
    float *v0 = NULL;
    const bool nan_kept = v && o->momentum != 0.0f && v->fmt.has_nan;
    if (v && (nan_kept || !emu_any_nan(v->data, v->n)))
        v0 = v->data;
    else if (v && !(v0 = copy_of(ctx, site, v)))
        return -1;
    sgd_op op = { .w0 = w0, .v0 = v0, .g = g->data, .lr = o->lr,
                  .mom = o->momentum, .wd = o->weight_decay,
                  .k = sgd_kernels_for(emu_isa_active()) };
    int rc = 0;

    if (v) {
        char sub[EMU_TENSOR_NAME_MAX + 16];
        sub_site(sub, sizeof sub, site, "v");
        rc = emu_commit(ctx, &(emu_op_out){
            .site = sub, .kind = "sgd_momentum", .out = v,
            .fill = sgd_v_fill, .store_early = true, .parallel = true, .op = &op,
            .ref = sgd_v_ref, .inputs_had_nan = sgd_had_nan,
            .rnd = state_rnd });
        op.v_new = v->data;
    }
    if (rc == 0)
        rc = emu_commit(ctx, &(emu_op_out){
            .site = site, .kind = "sgd", .out = w,
            .fill_add = v ? sgd_w_mom_fill : sgd_w_plain_fill,
            .store_early = true, .parallel = true, .acc_old = w0,
            .op = &op, .ref = sgd_w_ref, .inputs_had_nan = sgd_had_nan,
            .rnd = rnd });
    if (v0 != (v ? v->data : NULL))
        free(v0);
    return rc;
}

/* ---- Adam --------------------------------------------------------------- */

typedef struct adam_op {
    const float *w0, *m0, *v0, *g;
    const float *m_new, *v_new;      /* stored state, for the weight step */
    double lr, b1, b2, eps, wd;
    int64_t t;
    double c1, c2;                   /* 1 - b1, 1 - b2                    */
    double *addend;                  /* the weights' addends              */
    adam_step_k step;                /* the weight step's constants       */
    adam_step_fn step_fn;
    adam_mom_fn mom_fn;              /* the moments' loop of this level   */
} adam_op;

/* The producers of the three commits, as SGD's. */
static int adam_m_fill(const void *opv, size_t i0, size_t m, double *hi,
                       double *lo)
{
    const adam_op *op = opv;
    adam_moment(op->mom_fn, hi, lo, op->m0 + i0, op->g + i0, false, op->b1,
                op->c1, m);
    return 1;
}

static int adam_v_fill(const void *opv, size_t i0, size_t m, double *hi,
                       double *lo)
{
    const adam_op *op = opv;
    adam_moment(op->mom_fn, hi, lo, op->v0 + i0, op->g + i0, true, op->b2,
                op->c2, m);
    return 1;
}

static int adam_w_fill(const void *opv, size_t i0, size_t m, double *hi,
                       double *lo)
{
    const adam_op *op = opv;
    op->step_fn(&op->step, op->m_new + i0, op->v_new + i0, op->w0 + i0,
                op->addend + i0, hi, lo, m);
    return 1;
}

static bool adam_had_nan(const void *opv, size_t i)
{
    const adam_op *op = opv;
    return isnan(op->w0[i]) || isnan(op->m0[i]) || isnan(op->v0[i]) ||
           isnan(op->g[i]);
}

/* beta s + (1 - beta) x, exact but for the final rounding at the given
 * precision + 64 (1 - beta is exact at 64 + 24 bits for beta >= 2^-64). */
static void mix_ref(mpfr_ptr exact, double beta, double s, double x)
{
    mpfr_t a, b;
    mpfr_inits2(mpfr_get_prec(exact) + 64, a, b, (mpfr_ptr)0);
    mpfr_set_d(a, beta, MPFR_RNDN);
    mpfr_mul_d(a, a, s, MPFR_RNDN);
    mpfr_set_d(b, beta, MPFR_RNDN);
    mpfr_ui_sub(b, 1, b, MPFR_RNDN);
    mpfr_mul_d(b, b, x, MPFR_RNDN);
    mpfr_add(exact, a, b, MPFR_RNDN);
    mpfr_clears(a, b, (mpfr_ptr)0);
}

static int adam_m_ref(const void *opv, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const adam_op *op = opv;
    mix_ref(exact, op->b1, op->m0[i], op->g[i]);
    return 0;
}

static int adam_v_ref(const void *opv, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const adam_op *op = opv;
    double g = op->g[i];
    mix_ref(exact, op->b2, op->v0[i], g * g); /* g^2 exact in a double */
    return 0;
}

/* w - lr (m_hat / (sqrt(v_hat) + eps) + wd w), m_hat = m / (1 - b1^t),
 * v_hat = v / (1 - b2^t), from the stored m and v. */
static int adam_w_ref(const void *opv, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    const adam_op *op = opv;
    if (!isfinite(op->m_new[i]) || !isfinite(op->v_new[i]) ||
        !isfinite(op->w0[i]) || op->v_new[i] < 0.0f)
        return -1;
    mpfr_t a, b, c;
    mpfr_inits2(mpfr_get_prec(exact) + 64, a, b, c, (mpfr_ptr)0);
    long t = (long)op->t;
    /* b = sqrt(v / (1 - b2^t)) + eps */
    mpfr_set_d(c, op->b2, MPFR_RNDN);
    mpfr_pow_si(c, c, t, MPFR_RNDN);
    mpfr_ui_sub(c, 1, c, MPFR_RNDN);
    mpfr_set_d(b, op->v_new[i], MPFR_RNDN);
    mpfr_div(b, b, c, MPFR_RNDN);
    mpfr_sqrt(b, b, MPFR_RNDN);
    mpfr_add_d(b, b, op->eps, MPFR_RNDN);
    /* a = m / (1 - b1^t) / b */
    mpfr_set_d(c, op->b1, MPFR_RNDN);
    mpfr_pow_si(c, c, t, MPFR_RNDN);
    mpfr_ui_sub(c, 1, c, MPFR_RNDN);
    mpfr_set_d(a, op->m_new[i], MPFR_RNDN);
    mpfr_div(a, a, c, MPFR_RNDN);
    mpfr_div(a, a, b, MPFR_RNDN);
    /* a = lr (a + wd w) */
    mpfr_set_d(b, op->wd, MPFR_RNDN);
    mpfr_mul_d(b, b, op->w0[i], MPFR_RNDN);
    mpfr_add(a, a, b, MPFR_RNDN);
    mpfr_mul_d(a, a, op->lr, MPFR_RNDN);
    mpfr_set_d(b, op->w0[i], MPFR_RNDN);
    mpfr_sub(exact, b, a, MPFR_RNDN);
    mpfr_clears(a, b, c, (mpfr_ptr)0);
    return 0;
}

int emu_t_adam_update(emu_ctx *ctx, const char *site, emu_tensor *w,
                      emu_tensor *m, emu_tensor *v, const emu_tensor *g,
                      const emu_adam_opts *o, const emu_rounding *rnd)
{
    EMU_HOSTFP_GUARD;
    if (emu_check_rounding(ctx, site, rnd))
        return -1;
    if (!o)
        return emu_ctx_fail(ctx, site, "Adam options: NULL");
    const emu_rounding *state_rnd = o->state_rnd ? o->state_rnd : rnd;
    if (emu_check_rounding(ctx, site, state_rnd))
        return -1;
    if (emu_check_tensor(ctx, site, "w", w) ||
        emu_check_tensor(ctx, site, "m", m) ||
        emu_check_tensor(ctx, site, "v", v) ||
        emu_check_tensor(ctx, site, "g", g) ||
        emu_check_same_shape(ctx, site, "w", w, "g", g) ||
        emu_check_same_shape(ctx, site, "m", m, "w", w) ||
        emu_check_same_shape(ctx, site, "v", v, "w", w))
        return -1;
    {
        const emu_tensor *t[4] = { w, m, v, g };
        const char *what[4] = { "w", "m", "v", "g" };
        if (check_distinct(ctx, site, t, what, 4))
            return -1;
    }
    if (o->t < 1)
        return emu_ctx_fail(ctx, site, "Adam step t = %lld: steps count "
                            "from 1", (long long)o->t);
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f) ||
        !(o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return emu_ctx_fail(ctx, site, "Adam betas (%g, %g) must lie in "
                            "[0, 1)", (double)o->beta1, (double)o->beta2);

    const size_t n = w->n;
    double *t = emu_scratch(ctx, site, n ? n : 1);
    if (!t)
        return -1;
    /* As for SGD: the moments are overwritten before the weight's
     * callbacks run, the weight chunk by chunk after its own. */
    const float *w0 = w->data;
    float *m0 = copy_of(ctx, site, m);
    float *v0 = m0 ? copy_of(ctx, site, v) : NULL;
    if (!v0) {
        free(t);
        free(m0);
        return -1;
    }
    const double b1 = o->beta1, b2 = o->beta2;
    adam_op op = { .w0 = w0, .m0 = m0, .v0 = v0, .g = g->data, .lr = o->lr,
                   .b1 = b1, .b2 = b2, .eps = o->eps,
                   .wd = o->weight_decay, .t = o->t,
                   .mom_fn = adam_mom_for(emu_isa_active()) };
    /* 1 - beta is exact in binary64 for any beta >= 2^-29. */
    op.c1 = 1.0 - b1;
    op.c2 = 1.0 - b2;
    op.addend = t;
    char sub[EMU_TENSOR_NAME_MAX + 16];

    sub_site(sub, sizeof sub, site, "m");
    int rc = emu_commit(ctx, &(emu_op_out){
        .site = sub, .kind = "adam_m", .out = m, .fill = adam_m_fill,
        .store_early = true, .op = &op, .ref = adam_m_ref,
        .inputs_had_nan = adam_had_nan, .rnd = state_rnd });

    if (rc == 0) {
        sub_site(sub, sizeof sub, site, "v");
        rc = emu_commit(ctx, &(emu_op_out){
            .site = sub, .kind = "adam_v", .out = v, .fill = adam_v_fill,
            .store_early = true, .op = &op, .ref = adam_v_ref,
            .inputs_had_nan = adam_had_nan, .rnd = state_rnd });
    }

    if (rc == 0) {
        op.m_new = m->data;
        op.v_new = v->data;
        op.step = (adam_step_k){ .bc1 = 1.0 - pow(b1, (double)o->t),
                                 .bc2 = 1.0 - pow(b2, (double)o->t),
                                 .lr = op.lr, .eps = op.eps, .wd = op.wd };
        op.step_fn = adam_step_for(emu_isa_active());
        rc = emu_commit(ctx, &(emu_op_out){
            .site = site, .kind = "adam", .out = w, .fill = adam_w_fill,
            .store_early = true, .acc_old = w0, .addend = t, .op = &op,
            .ref = adam_w_ref, .inputs_had_nan = adam_had_nan, .rnd = rnd });
    }
    free(t);
    free(m0);
    free(v0);
    return rc;
}
