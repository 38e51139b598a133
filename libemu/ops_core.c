/*
 * ops_core.c — the choke point: every tensor op's results are rounded,
 * counted, histogrammed and sampled against MPFR here, and nowhere else.
 *
 * The rounding itself is the library's one rounding map (emu_round2_word,
 * or its array form, tested bit-identical).  Stochastic rounding of op k
 * uses stream k of the context's seed, element i word i: a run is
 * reproducible from its seed whatever the threads or the chunking.
 * Sampling for the MPFR reference is deterministic too: output i of op k
 * is sampled iff word i of the sampling stream of op k falls below
 * ref_rate * 2^64.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/extend.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "emu/bits.h"
#include "emu/rng.h"
#include "internal.h"
#include "ops_internal.h"

/* Stream tags: op k's rounding words come from stream k; its sampling
 * decisions from stream k ^ SAMPLE_TAG, so the two never share words. */
#define SAMPLE_TAG ((uint64_t)1 << 62)

/* Precision of the reference values: enough for the exact result of any
 * elementwise op on binary32 values (a product plus a binary32 spans at
 * most 2^-298 .. 2^256, under 560 bits); dot products are rounded to it
 * once by mpfr_dot, far below any error we measure. */
enum { REF_PREC = 600 };

void emu_ctx_init(emu_ctx *ctx, uint64_t seed)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->seed = seed;
    ctx->measure = EMU_MEASURE_COUNTS | EMU_MEASURE_HIST | EMU_MEASURE_SWAMP;
    ctx->threads = 1;
}

uint64_t emu_ctx_stream(const emu_ctx *ctx)
{
    return ctx->op_index;
}

/* Argument checks are the common failure of an op: emu_ctx_fail files
 * them under EMU_EINVAL; the rest (memory, errors forwarded from parsers
 * and quantizers) say their code through emu_ctx_failc. */
int emu_ctx_fail(emu_ctx *ctx, const char *site, const char *fmt, ...)
{
    EMU_HOSTFP_GUARD; /* the message may print a double */
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(&ctx->err, EMU_EINVAL, site ? site : "op", "", fmt, ap);
    va_end(ap);
    return -1;
}

int emu_ctx_failc(emu_ctx *ctx, emu_errcode code, const char *site,
                  const char *fmt, ...)
{
    EMU_HOSTFP_GUARD;
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(&ctx->err, code, site ? site : "op", "", fmt, ap);
    va_end(ap);
    return -1;
}

/* The ulp of x's binade in fmt (the subnormal quantum below 2^emin). */
static double ulp_in(const emu_format *fmt, mpfr_srcptr x)
{
    long e = mpfr_get_exp(x) - 1; /* MPFR: x = 0.1... * 2^exp */
    if (e < fmt->emin)
        e = fmt->emin;
    return ldexp(1.0, (int)(e - fmt->p + 1));
}

/* |a - b| / |c| in double (a, b, c exact to REF_PREC bits). */
static double rel_diff(mpfr_srcptr a, mpfr_srcptr b, mpfr_srcptr c, mpfr_ptr t)
{
    mpfr_sub(t, a, b, MPFR_RNDN);
    mpfr_div(t, t, c, MPFR_RNDN);
    return fabs(mpfr_get_d(t, MPFR_RNDN));
}

typedef struct ref_work {
    mpfr_t exact, src, pre, out, t;
} ref_work;

/* Error of one sampled output against MPFR. */
static void sample(const emu_op_out *o, size_t i, double out, ref_work *w,
                   emu_site_stats *st)
{
    int dot = o->ref(o->op, i, w->exact, w->src);
    if (dot < 0 || mpfr_nan_p(w->exact) || !isfinite(out) ||
        mpfr_inf_p(w->exact))
        return; /* errors of non-numbers are not measured */
    mpfr_set_d(w->out, out, MPFR_RNDN); /* exact: out is a binary32 value */
    st->ref_samples++;
    /* Divided by the ulp (a power of two) in MPFR and converted toward
     * zero, so that an error just below one ulp is not recorded as one. */
    mpfr_sub(w->t, w->out, w->exact, MPFR_RNDN);
    mpfr_div_d(w->t, w->t, ulp_in(&o->out->fmt, w->exact), MPFR_RNDN);
    double ulps = fabs(mpfr_get_d(w->t, MPFR_RNDZ));
    double rel = mpfr_zero_p(w->exact) ? (out == 0.0 ? 0.0 : INFINITY)
                                       : rel_diff(w->out, w->exact, w->exact, w->t);
    st->ulp_sum += ulps;
    st->ulp_max = fmax(st->ulp_max, ulps);
    st->ulp_hist[emu_ulperr_bin_unguarded(ulps)]++;
    if (isfinite(rel)) {
        st->rel_sum += rel;
        st->rel_max = fmax(st->rel_max, rel);
    }
    st->rel_hist[emu_relerr_bin_unguarded(rel)]++;
    if (dot != 1 || mpfr_zero_p(w->src))
        return;
    /* The accumulator's value before output rounding, exactly hi + lo. */
    mpfr_set_d(w->pre, o->hi[i], MPFR_RNDN);
    if (o->lo)
        mpfr_add_d(w->pre, w->pre, o->lo[i], MPFR_RNDN);
    double q = rel_diff(w->exact, w->src, w->src, w->t);
    double a = rel_diff(w->pre, w->exact, w->src, w->t);
    double r = rel_diff(w->out, w->pre, w->src, w->t);
    st->dot_samples++;
    st->quant_sum += q;
    st->accum_sum += a;
    st->round_sum += r;
    st->quant_max = fmax(st->quant_max, q);
    st->accum_max = fmax(st->accum_max, a);
    st->round_max = fmax(st->round_max, r);
}

/* The exact value's bin: hi + lo lies in hi's binade unless hi is a power
 * of two and lo points toward zero. */
static int exact_bin(double hi, double lo)
{
    int b = emu_hist_bin_unguarded(hi);
    if (lo != 0.0 && b > EMU_HIST_BELOW && b <= EMU_HIST_ABOVE &&
        (lo < 0.0) != (hi < 0.0)) {
        uint64_t u; /* hi is a normal double: a power of two has no fraction */
        memcpy(&u, &hi, sizeof u);
        if ((u << 12) == 0)
            b--;
    }
    return b;
}

enum { CHUNK = 1024 };

/* Whether rounding hi alone gives what rounding hi + lo gives, for every
 * element of a chunk, under a deterministic mode into a format of
 * precision p.  hi is the binary64 nearest hi + lo, and every rounding
 * boundary of the format (a grid point or a midpoint, p + 1 significant
 * bits at most) is a binary64, so none lies strictly between hi and
 * hi + lo: the two round alike unless hi is itself a boundary while lo is
 * not zero.  Such a hi has its fraction bits below p + 1 clear; the rare
 * chunk that holds one goes through the scalar choke point whole, so the
 * counts (which the array path takes from hi) are right as well. */
static bool lo_harmless(const double *hi, const double *lo, size_t m, int p)
{
    const uint64_t mask = ((uint64_t)1 << (52 - p)) - 1;
    uint64_t bad = 0;
    for (size_t j = 0; j < m; j++) {
        uint64_t u;
        memcpy(&u, &hi[j], sizeof u);
        const uint64_t e = (u >> 52) & 0x7ff;
        /* a boundary-shaped, subnormal or non-finite hi with a low part */
        bad |= (uint64_t)(lo[j] != 0.0) &
               ((uint64_t)((u & mask) == 0) | (uint64_t)(e == 0) |
                (uint64_t)(e == 0x7ff));
    }
    return bad == 0;
}

bool emu_commit_measures(const emu_ctx *ctx)
{
    return (ctx->stats && (ctx->measure & EMU_MEASURE_ALL)) || ctx->observer;
}

/* Output i's value before rounding, for the histogram: hi + lo, or the
 * source of a scaled output. */
static int exact_bin_of(const emu_op_out *o, size_t i)
{
    if (o->scale)
        return emu_hist_bin_unguarded(o->src[i]);
    return o->lo ? exact_bin(o->hi[i], o->lo[i]) : emu_hist_bin_unguarded(o->hi[i]);
}

/* Output i's value after rounding: the element times its scales (exact:
 * the scaled formats keep every such product a binary64). */
static double value_of(const emu_op_out *o, const float *res, size_t i)
{
    return o->scale ? (double)res[i] * (double)o->scale[i] * o->scale_g
                    : (double)res[i];
}

/* NaN results, and those made from numbers rather than passed on. */
static void count_nans(const emu_op_out *o, const float *res, size_t n,
                       emu_site_stats *s)
{
    if (!o->scale && !s->nan)
        return;
    uint64_t nan = 0; /* of the values: a scaled element's scale may be NaN */
    for (size_t i = 0; i < n; i++) {
        if (!isnan(value_of(o, res, i)))
            continue;
        nan++;
        const bool nan_in = isnan(o->hi[i]) || (o->scale && isnan(o->scale[i]));
        if (!nan_in || (o->inputs_had_nan && !o->inputs_had_nan(o->op, i)))
            s->nan_produced++;
    }
    s->nan = nan;
}

static int ctz64(uint64_t x)
{
#if defined(__GNUC__)
    return __builtin_ctzll(x);
#else
    int k = 0;
    while (!(x & 1)) {
        x >>= 1;
        k++;
    }
    return k;
#endif
}

/* floor(log2 |x|) of a finite non-zero binary32 value, |x| as bits. */
static int f32_exponent(uint32_t a)
{
    if (a >= 0x800000)
        return (int)(a >> 23) - 127;
    int e = -149; /* subnormal: its leading bit */
    while (a >>= 1)
        e++;
    return e;
}

/* Swamping of an accumulation out = acc_old + addend, from the results:
 * emu_accum_count_add's rule (an unchanged result is absorbed with every
 * bit lost; otherwise the bits of t below half the quantum of the result
 * in out's format are lost), from the bits, inline: an update's weights
 * are a call each otherwise.  Addends that are binary64 subnormals (no
 * optimizer makes them) take the library's function. */
static void count_swamp(const emu_op_out *o, const float *res, size_t n,
                        emu_accum_counts *c)
{
    const emu_format *f = &o->out->fmt;
    const int q_tiny = f->subnormals ? f->emin - f->p + 1 : f->emin;
    for (size_t i = 0; i < n; i++) {
        const double t = o->addend[i];
        const float old = o->acc_old[i];
        uint64_t u;
        uint32_t ob, rb;
        memcpy(&u, &t, sizeof u);
        memcpy(&ob, &old, sizeof ob);
        u &= ~((uint64_t)1 << 63);
        const int et = (int)(u >> 52);
        if (u == 0 || et == 0x7ff || (ob & 0x7fffffff) >= 0x7f800000)
            continue; /* zero or non-finite addend, non-finite old value */
        if (et == 0) {
            emu_accum_count_add_unguarded(c, f, old, t, res[i]);
            continue;
        }
        c->adds++;
        const float r = res[i];
        if (r == old) {
            c->absorbed++;
            c->lost_bits[EMU_LOST_BINS - 1]++;
            continue;
        }
        memcpy(&rb, &r, sizeof rb);
        rb &= 0x7fffffff;
        if (rb >= 0x7f800000) {
            c->lost_bits[0]++;
            continue;
        }
        int q = q_tiny; /* exponent of the result's quantum */
        if (rb != 0) {
            const int e = f32_exponent(rb);
            if (e >= f->emin)
                q = e - f->p + 1;
        }
        const int msb = et - 1023;
        const int lsb = et - 1075 + ctz64((u & (((uint64_t)1 << 52) - 1)) |
                                          ((uint64_t)1 << 52));
        const int top = msb < q - 1 ? msb : q - 1;
        const int bits = top - lsb + 1;
        c->lost_bits[bits < 0 ? 0 : bits > 64 ? 64 : bits]++;
    }
}

/* The exact values' histogram of pairs hi + lo: hi's bins, in one array
 * pass, then moved down a bin where exact_bin says so (hi a power of two,
 * lo toward zero): rare, found by a branch-free scan. */
static void hist_pairs(uint64_t *hist, const double *hi, const double *lo,
                       size_t n)
{
    emu_hist_add_unguarded(hist, hi, n);
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        const size_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        uint64_t any = 0;
        for (size_t j = 0; j < m; j++) {
            uint64_t u, v;
            memcpy(&u, &hi[i0 + j], sizeof u);
            memcpy(&v, &lo[i0 + j], sizeof v);
            any |= (uint64_t)((u << 12) == 0) & (uint64_t)((v << 1) != 0) &
                   ((u ^ v) >> 63);
        }
        if (!any)
            continue;
        for (size_t j = 0; j < m; j++) {
            const size_t i = i0 + j;
            const int b = emu_hist_bin_unguarded(hi[i]);
            const int e = exact_bin(hi[i], lo[i]);
            if (e != b) {
                hist[b]--;
                hist[e]++;
            }
        }
    }
}

/* Steps 2 to 4 of emu_commit: everything measured about the results. */
static void measure_results(const emu_ctx *ctx, const emu_op_out *o,
                            const float *res, const emu_round_counts *counts,
                            uint64_t stream, emu_site_stats *s)
{
    const size_t n = o->out->n;
    memset(s, 0, sizeof *s);
    s->results = counts->n;
    s->inexact = counts->inexact;
    s->underflow = counts->underflow;
    s->to_zero = counts->to_zero;
    s->subnormal = counts->subnormal;
    s->overflow = counts->overflow;
    s->nan = counts->nan;
    count_nans(o, res, n, s);
    if ((o->swamp || o->addend) && (ctx->measure & EMU_MEASURE_SWAMP)) {
        emu_accum_counts c;
        memset(&c, 0, sizeof c);
        if (o->swamp)
            c = *o->swamp;
        if (o->addend)
            count_swamp(o, res, n, &c);
        s->adds = c.adds;
        s->absorbed = c.absorbed;
        memcpy(s->lost_bits, c.lost_bits, sizeof s->lost_bits);
    }
    if (ctx->measure & EMU_MEASURE_HIST) {
        /* Plain values and binary32 results: the bins straight from
         * the arrays, in integers. */
        if (o->scale)
            for (size_t i = 0; i < n; i++)
                s->hist_exact[exact_bin_of(o, i)]++;
        else if (o->lo)
            hist_pairs(s->hist_exact, o->hi, o->lo, n);
        else
            emu_hist_add_unguarded(s->hist_exact, o->hi, n);
        if (o->scale)
            for (size_t i = 0; i < n; i++)
                s->hist_rounded[emu_hist_bin_unguarded(value_of(o, res, i))]++;
        else
            emu_hist_add_f32_unguarded(s->hist_rounded, res, n);
        if (o->hist_scale)
            for (int b = 0; b < EMU_HIST_BINS; b++)
                s->hist_scale[b] += o->hist_scale[b];
    }
    if ((ctx->measure & EMU_MEASURE_REF) && o->ref && ctx->ref_rate > 0.0) {
        /* Threshold on a 64-bit word; rate 1 samples every output. */
        const bool all = ctx->ref_rate >= 1.0;
        const uint64_t cut = all ? 0 : (uint64_t)ldexp(ctx->ref_rate, 64);
        ref_work w;
        mpfr_inits2(REF_PREC, w.exact, w.src, w.pre, w.out, w.t, (mpfr_ptr)0);
        for (size_t i = 0; i < n; i++)
            if (all || emu_random64(ctx->seed, stream ^ SAMPLE_TAG, i) < cut)
                sample(o, i, res[i], &w, s);
        mpfr_clears(w.exact, w.src, w.pre, w.out, w.t, (mpfr_ptr)0);
    }
}

/* A chunk of values into binary32 itself, under a rounding that maps
 * binary32 to itself (emu_round_is_identity_f32): if every value is a
 * binary32 value (or a NaN), res gets them, NaNs made the canonical quiet
 * NaN, counted as emu_round_array_f32 counts them (nothing inexact,
 * subnormals flagged), and true; else false, counts untouched.  One
 * branch-free pass where a narrowing pass and the array path's scalar
 * identity loop were a tenth of an fp32 training step.  (gcc -O2 does not
 * vectorise it yet: the double-to-bits loads stop it.) */
static bool carry_f32(float *res, const double *hi, size_t m,
                      emu_round_counts *counts)
{
    const uint64_t d_inf = (uint64_t)0x7ff << 52;
    const uint32_t qnan = 0x7fc00000;
    uint64_t wide = 0, sub = 0, nan = 0;
    for (size_t j = 0; j < m; j++) {
        const float f = (float)hi[j];
        const double back = (double)f;
        uint64_t u, v;
        uint32_t w;
        memcpy(&u, &hi[j], sizeof u);
        memcpy(&v, &back, sizeof v);
        memcpy(&w, &f, sizeof w);
        const uint32_t a = w & 0x7fffffff;
        const uint32_t is_nan = a > 0x7f800000;
        wide |= (uint64_t)(u != v) & (uint64_t)((u << 1) <= d_inf << 1);
        sub += a - 1 < 0x7fffff; /* 0 < |f| < 2^-126 */
        nan += is_nan;
        w = is_nan ? qnan : w;
        memcpy(&res[j], &w, sizeof w);
    }
    if (wide)
        return false;
    counts->n += m;
    counts->subnormal += sub;
    counts->nan += nan;
    if (sub)
        counts->flags |= EMU_FLAG_SUBNORMAL;
    return true;
}

/* Step 1 of emu_commit: rounds o's values into res.  The array path where
 * the values are plain doubles, the scalar choke point where a low part
 * must be seen. */
static void round_results(const emu_ctx *ctx, const emu_op_out *o,
                          uint64_t stream, float *res,
                          emu_round_counts *counts)
{
    const emu_tensor *out = o->out;
    const size_t n = out->n;
    emu_array_rounding ar = { .rnd = *o->rnd,
                              .seed = ctx->seed, .stream = stream,
                              .first_index = 0 };
    ar.rnd.rng = NULL;
    const bool sr = emu_rnd_is_stochastic(ar.rnd.mode);
    const bool identity = emu_round_is_identity_f32(&out->fmt, &ar.rnd);
    double buf[CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        size_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        if (!o->lo ||
            (!sr && lo_harmless(o->hi + i0, o->lo + i0, m, out->fmt.p))) {
            ar.first_index = i0;
            /* Both binary32 shortcuts below need every value of the chunk
             * to be a binary32 value (or NaN): a first value that is not
             * (an optimizer's new weights, mostly) rules them out without
             * two passes over the chunk. */
            const double h0 = o->hi[i0];
            const bool wide0 = (double)(float)h0 != h0 && !isnan(h0);
            if (!wide0 && identity && carry_f32(res + i0, o->hi + i0, m, counts))
                continue;
            /* Most ops' values are binary32 values already (a fast-model
             * GEMM, sums of 16-bit values, casts): then the binary32 array
             * path, several times faster, rounds them the same way. */
            float fin[CHUNK];
            bool narrow = !wide0;
            for (size_t j = 0; narrow && j < m; j += 256) {
                const size_t e = m - j < 256 ? m : j + 256;
                for (size_t k = j; k < e; k++) {
                    fin[k] = (float)o->hi[i0 + k];
                    narrow &= (double)fin[k] == o->hi[i0 + k] || isnan(fin[k]);
                }
            }
            if (narrow) {
                emu_round_array_f32_unguarded(&out->fmt, res + i0, fin, m, &ar, counts);
                continue;
            }
            emu_round_array_f64_unguarded(&out->fmt, buf, o->hi + i0, m, &ar, counts);
        } else {
            /* the words of element i0 + j, as emu_random64 gives them */
            uint64_t words[CHUNK];
            if (sr)
                emu_random_fill(ctx->seed, stream, i0, words, m);
            for (size_t j = 0; j < m; j++) {
                size_t i = i0 + j;
                uint64_t word = sr ? words[j] : 0;
                emu_status st;
                buf[j] = emu_round2_word_unguarded(&out->fmt, o->hi[i], o->lo[i],
                                         &ar.rnd, word, &st);
                emu_round_counts_add_unguarded(counts, o->hi[i], buf[j], st.flags);
            }
        }
        for (size_t j = 0; j < m; j++)
            res[i0 + j] = (float)buf[j]; /* exact: a carrier value */
    }
}

int emu_commit(emu_ctx *ctx, const emu_op_out *o)
{
    EMU_HOSTFP_GUARD;
    emu_tensor *out = o->out;
    const size_t n = out->n;
    /* Required even when nothing is rounded here, so that an op's missing
     * rounding shows whatever is being measured. */
    if (emu_check_rounding(ctx, o->site, o->rnd))
        return -1;
    if (!o->hi) {
        /* The op rounded its results itself: legal only when nothing here
         * would have looked at them. */
        if (emu_commit_measures(ctx))
            return emu_ctx_fail(ctx, o->site, "internal: results committed "
                                "without their values while measuring");
        ctx->op_index++;
        return 0;
    }
    const uint64_t stream = ctx->op_index++;
    emu_round_counts counts = { 0 };

    const bool measure = ctx->stats && (ctx->measure & EMU_MEASURE_ALL);
    emu_site *site = NULL;
    if (measure) {
        site = emu_stats_site(ctx->stats, o->site, o->kind, out->role,
                              &out->fmt);
        if (!site)
            return emu_ctx_failc(ctx, EMU_ENOMEM, o->site, "out of memory for statistics");
    }

    /* The results go to a private array first: the measurements below read
     * the op's inputs (MPFR reference, NaN provenance, old values of an
     * accumulation), and an in-place op's output is one of them. */
    float *res = malloc(n * sizeof *res);
    if (!res)
        return emu_ctx_failc(ctx, EMU_ENOMEM, o->site, "out of memory for %zu results", n);
    round_results(ctx, o, stream, res, &counts);

    if (measure) {
        emu_site_stats s;
        measure_results(ctx, o, res, &counts, stream, &s);
        emu_site_stats_merge(&site->total, &s);
        emu_site_stats_merge(&site->step, &s);
        site->active = true;
    }

    memcpy(out->data, res, n * sizeof *res);
    free(res);

    if (ctx->observer) {
        emu_op_event ev = { .site = o->site, .kind = o->kind, .out = out,
                            .hi = o->hi, .lo = o->lo, .counts = &counts,
                            .op_index = stream };
        ctx->observer(ctx->observer_user, &ev);
    }
    return 0;
}
