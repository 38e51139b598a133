/*
 * test_choke_point.c — emu_commit (ops_core.c) and the statistics store
 * (stats.c): what every op gets measured with.
 *
 *   counts      a hand-made binary32 -> binary16 addition whose exact
 *               results include known numbers of underflows to zero,
 *               subnormals, overflows, produced and propagated NaNs, a
 *               tie, a tininess-before/after difference: every counter
 *               and both histograms checked against hand-computed values;
 *   sampling    MPFR at rate 1 on several ops, formats and modes: every
 *               finite output sampled, errors <= 1/2 ulp in the nearest
 *               modes and < 1 ulp in the others, each output on the side
 *               of its exact value that its mode demands (the neighbour
 *               at ties: even or away; odd under round-to-odd), and the
 *               sampled errors equal to those; a deliberately wrong
 *               op is caught; partial rates sample deterministically;
 *   observer    sees every op once, in order, with its pre-rounding values;
 *   SR          element i of op k rounds with word i of stream k: same
 *               seed same results, another op or seed other words;
 *   bins        the integer bins (double and binary32 bits) equal a
 *               frexp reference at every binade edge +-1 ulp of both
 *               formats, every subnormal leading bit, the specials and
 *               random bit patterns;
 *   carrier     a commit into binary32 itself (the copy that skips the
 *               rounding) gives the results and counts of the scalar
 *               choke point, for edges, specials and random patterns,
 *               under every profile, with and without saturation;
 *   rne32       binary64 values and pairs into binary32 under nearest-even
 *               (the one-pass lanes of the fp32 policy's updates): results,
 *               counts and both histograms against MPFR, chunks of common
 *               lanes and chunks with each kind of rare lane, with the
 *               histograms and without;
 *   chunks      the chunked producers (fill, fill32), with and without
 *               early stores and an observer, equal the whole arrays in
 *               results and in every counter, histogram and sampled error,
 *               at sizes 0, 1, chunk - 1, chunk, chunk + 1 and larger, on
 *               values with NaN, inf, overflow and subnormals, in place too;
 *   ops         matmul and conv2d (fast model), reductions and the losses
 *               hand their outputs to the choke point a chunk at a time:
 *               each equals
 *               its values formed independently here, whole, and committed
 *               as arrays, in results and every counter and histogram, at
 *               1, chunk - 1, chunk, chunk + 1 and 3000 outputs (rows split
 *               by chunk boundaries), statistics on and off, nearest and
 *               stochastic, binary32 and binary16 outputs;
 *   exports     CSV (header + one row per site, quoted names), histogram
 *               CSV, JSON (checked by a small parser), step rows, summary,
 *               and the atomic writes' failure paths.
 */
/* mkdtemp, opendir: the export tests' scratch directory */
#define _POSIX_C_SOURCE 200809L

#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <emu/ops.h>
#include <emu/ref.h>

#include "testutil.h"
#include "internal.h" /* the integer bin functions the commit loops call */
#include "ops_internal.h" /* the GEMM engine: the matmul tests' reference */

static void make(emu_tensor *t, const emu_format *f, size_t n,
                 const char *name, emu_role role)
{
    emu_error err;
    ck_assert_msg(emu_tensor_alloc(t, name, role, f, 1, &n, &err) == 0, "%s",
                  err.message);
}

static int bin_of_binade(int e)
{
    return EMU_HIST_FIRST + (e - EMU_HIST_EMIN);
}

/* The histogram bin of an exact value held by MPFR: its binade, or the
 * zero, below-range and above-range bins. */
static int exact_bin(mpfr_srcptr e)
{
    if (mpfr_zero_p(e))
        return EMU_HIST_ZERO;
    const long ex = mpfr_get_exp(e) - 1;
    return ex < EMU_HIST_EMIN   ? EMU_HIST_BELOW
           : ex > EMU_HIST_EMAX ? EMU_HIST_ABOVE
                                : bin_of_binade((int)ex);
}

/* The site (name, r), which the test expects to exist. */
static const emu_site *find_site(const emu_stats *s, const char *name,
                                 emu_role r)
{
    const emu_site *site = emu_stats_find(s, name, r);
    if (!site)
        ck_abort_msg("no site '%s' of role %s", name, emu_role_name(r));
    return site;
}

/* Commits hi (+ lo, or NULL) into a new tensor *y of format f under rnd,
 * at site `site`, counting and binning into *stats (initialised here). */
static void commit_measured(const emu_format *f, size_t n, const char *site,
                            uint64_t seed, const double *hi, const double *lo,
                            const emu_rounding *rnd, unsigned measure,
                            emu_tensor *y, emu_stats *stats)
{
    make(y, f, n, "y", EMU_ROLE_OTHER);
    emu_stats_init(stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, seed);
    ctx.stats = stats;
    ctx.measure = measure;
    emu_op_out o = { .site = site, .kind = "test", .out = y, .hi = hi,
                     .lo = lo, .rnd = rnd };
    ck_assert_int_eq(emu_commit(&ctx, &o), 0);
}

static void commit_counted(const emu_format *f, size_t n, const char *site,
                           uint64_t seed, const double *hi, const double *lo,
                           const emu_rounding *rnd, emu_tensor *y,
                           emu_stats *stats)
{
    commit_measured(f, n, site, seed, hi, lo, rnd,
                    EMU_MEASURE_COUNTS | EMU_MEASURE_HIST, y, stats);
}

/* Site `name`'s totals equal the counts and the two histograms computed
 * element by element by the test. */
static void want_site_totals(const emu_stats *stats, const char *name,
                             const emu_round_counts *want,
                             const uint64_t *hist, const uint64_t *hist_x)
{
    const emu_site_stats *t = &find_site(stats, name, EMU_ROLE_OTHER)->total;
    ck_assert_uint_eq(t->results, want->n);
    ck_assert_uint_eq(t->inexact, want->inexact);
    ck_assert_uint_eq(t->underflow, want->underflow);
    ck_assert_uint_eq(t->to_zero, want->to_zero);
    ck_assert_uint_eq(t->subnormal, want->subnormal);
    ck_assert_uint_eq(t->overflow, want->overflow);
    ck_assert_uint_eq(t->nan, want->nan);
    for (int b = 0; b < EMU_HIST_BINS; b++) {
        ck_assert_uint_eq(t->hist_rounded[b], hist[b]);
        ck_assert_uint_eq(t->hist_exact[b], hist_x[b]);
    }
}

/* ---- counts and histograms on hand-made values --------------------------- */

typedef struct obs_log {
    int calls;
    uint64_t op_index[16];
    char site[16][32], kind[16][24];
    const emu_tensor *out[16];
    emu_round_counts counts[16];
    double hi[16][64], lo[16][64];
    bool had_lo[16];
} obs_log;

static void observe(void *user, const emu_op_event *ev)
{
    obs_log *l = user;
    ck_assert_int_lt(l->calls, 16);
    int k = l->calls++;
    l->op_index[k] = ev->op_index;
    snprintf(l->site[k], sizeof l->site[k], "%s", ev->site);
    snprintf(l->kind[k], sizeof l->kind[k], "%s", ev->kind);
    l->out[k] = ev->out;
    l->counts[k] = *ev->counts;
    l->had_lo[k] = ev->lo != NULL;
    for (size_t i = 0; i < ev->out->n && i < 64; i++) {
        l->hi[k][i] = ev->hi[i];
        l->lo[k][i] = ev->lo ? ev->lo[i] : 0.0;
    }
}

/* a + b in binary16 from binary32 operands; see the table in the test. */
static const float case_a[] = { 1.0f, 0x1p-26f, 0x1p-26f, 0x1.8p-23f,
                                0x1p-20f, 65504.0f, 65504.0f, INFINITY,
                                NAN, INFINITY, 1.0f, 0x1p-14f, 0x1p-14f,
                                1.0f };
static const float case_b[] = { 2.0f, 0x1p-27f, -0x1p-26f, 0.0f, 0x1p-30f,
                                32.0f, 15.0f, -INFINITY, 1.0f, 1.0f,
                                0x1p-11f, -0x1p-25f, -0x1p-27f, -0x1p-60f };
enum { N_CASES = sizeof case_a / sizeof case_a[0] };

START_TEST(test_counts_by_hand)
{
    const emu_format *b32 = test_format("binary32");
    const emu_format *h = test_format("binary16");
    emu_tensor a, b, y;
    make(&a, b32, N_CASES, "a", EMU_ROLE_ACTIVATION);
    make(&b, b32, N_CASES, "b", EMU_ROLE_ACTIVATION);
    make(&y, h, N_CASES, "y", EMU_ROLE_ACTIVATION);
    memcpy(a.data, case_a, sizeof case_a);
    memcpy(b.data, case_b, sizeof case_b);
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_rounding rnd = test_rne;
    ctx.stats = &stats;
    obs_log log = { 0 };
    ctx.observer = observe;
    ctx.observer_user = &log;

    ck_assert_int_eq(emu_t_add(&ctx, "sum", &y, &a, &b, &rnd), 0);
    /* the results, by hand */
    const float want[N_CASES] = { 3.0f, 0.0f, 0.0f, 0x1.8p-23f, 0x1p-20f,
                                  INFINITY, 65504.0f, NAN, NAN, INFINITY,
                                  1.0f, 0x1p-14f, 0x1p-14f, 1.0f };
    for (int i = 0; i < N_CASES; i++)
        ck_assert_msg(test_same(y.data[i], want[i]), "case %d: %a", i,
                      (double)y.data[i]);

    const emu_site *s = find_site(&stats, "sum", EMU_ROLE_ACTIVATION);
    const emu_site_stats *t = &s->total;
    ck_assert_str_eq(s->kind, "add");
    ck_assert_str_eq(s->format, "binary16");
    ck_assert_uint_eq(t->results, N_CASES);
    ck_assert_uint_eq(t->inexact, 8);     /* 1 4 5 6 10 11 12 13 */
    ck_assert_uint_eq(t->underflow, 3);   /* 1 4 11 (tiny after rounding) */
    ck_assert_uint_eq(t->to_zero, 1);     /* 1 */
    ck_assert_uint_eq(t->subnormal, 2);   /* 3 4 */
    ck_assert_uint_eq(t->overflow, 1);    /* 5 */
    ck_assert_uint_eq(t->nan, 2);         /* 7 8 */
    ck_assert_uint_eq(t->nan_produced, 1);/* 7: inf - inf */
    ck_assert_uint_eq(t->adds, 0);
    ck_assert_uint_eq(t->ref_samples, 0); /* ref_rate 0 by default */

    /* histograms: binade of each exact value and of each result */
    uint64_t hx[EMU_HIST_BINS] = { 0 }, hr[EMU_HIST_BINS] = { 0 };
    const int ex_binade[N_CASES] = { 1, -26, 999, -23, -20, 16, 15, 999, 999,
                                     999, 0, -15, -15, -1 };
    const int r_binade[N_CASES] = { 1, 999, 999, -23, -20, 999, 15, 999, 999,
                                    999, 0, -14, -14, 0 };
    for (int i = 0; i < N_CASES; i++) {
        if (ex_binade[i] != 999)
            hx[bin_of_binade(ex_binade[i])]++;
        if (r_binade[i] != 999)
            hr[bin_of_binade(r_binade[i])]++;
    }
    hx[EMU_HIST_ZERO] = 1;   /* 2: exact zero */
    hx[EMU_HIST_NAN] = 2;
    hx[EMU_HIST_INF] = 1;    /* 9 */
    hr[EMU_HIST_ZERO] = 2;   /* 1 2 */
    hr[EMU_HIST_NAN] = 2;
    hr[EMU_HIST_INF] = 2;    /* 5 9 */
    char lab[16];
    for (int k = 0; k < EMU_HIST_BINS; k++) {
        ck_assert_msg(t->hist_exact[k] == hx[k], "exact bin %s: %llu, want "
                      "%llu", emu_hist_label(k, lab, sizeof lab),
                      (unsigned long long)t->hist_exact[k],
                      (unsigned long long)hx[k]);
        ck_assert_msg(t->hist_rounded[k] == hr[k], "rounded bin %s: %llu, "
                      "want %llu", emu_hist_label(k, lab, sizeof lab),
                      (unsigned long long)t->hist_rounded[k],
                      (unsigned long long)hr[k]);
    }

    /* the observer saw the same counts, and hi + lo exact */
    ck_assert_int_eq(log.calls, 1);
    ck_assert_uint_eq(log.counts[0].n, N_CASES);
    ck_assert_uint_eq(log.counts[0].inexact, 8);
    ck_assert_uint_eq(log.counts[0].to_zero, 1);
    ck_assert(log.had_lo[0]);
    ck_assert(log.hi[0][13] == 1.0 && log.lo[0][13] == -0x1p-60);

    /* tininess before rounding: case 12 (2^-14 - 2^-27, which rounds to
     * 2^-14 even with an unbounded exponent) becomes an underflow too */
    rnd.tininess = EMU_TINY_BEFORE;
    ck_assert_int_eq(emu_t_add(&ctx, "sum_before", &y, &a, &b, &rnd), 0);
    ck_assert_uint_eq(find_site(&stats, "sum_before", EMU_ROLE_ACTIVATION)
                          ->total.underflow, 4);

    /* into e4m3 (no inf, overflow -> NaN): 3, 65536, 65519 and inf + 1
     * overflow or are invalid; the NaNs from finite values are produced */
    emu_tensor y8;
    make(&y8, test_format("e4m3"), N_CASES, "y8", EMU_ROLE_ACT_GRAD);
    rnd.tininess = EMU_TINY_AFTER;
    ck_assert_int_eq(emu_t_add(&ctx, "sum8", &y8, &a, &b, &rnd), 0);
    const emu_site_stats *t8 = &find_site(&stats, "sum8",
                                          EMU_ROLE_ACT_GRAD)->total;
    ck_assert_uint_eq(t8->overflow, 2);     /* 5 6: 65536, 65519 */
    ck_assert_uint_eq(t8->nan, 5);          /* 5 6 7 8 9 (inf + 1: no inf) */
    ck_assert_uint_eq(t8->nan_produced, 4); /* all but 8, NaN + 1 */
    ck_assert_uint_eq(t8->to_zero, 5);      /* 1 3 4 11 12: below 2^-10 */
    emu_tensor_free(&y8);

    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&y);
    emu_stats_free(&stats);
}
END_TEST

/* Histograms of random data: every exact value's bin (computed by MPFR
 * here) and every result's, whatever the op. */
START_TEST(test_histograms_random)
{
    const emu_format *b32 = test_format("binary32");
    const emu_format *bf = test_format("bfloat16");
    const size_t n = 4096;
    emu_tensor a, b, y;
    make(&a, b32, n, "a", EMU_ROLE_WEIGHT);
    make(&b, b32, n, "b", EMU_ROLE_WEIGHT);
    make(&y, bf, n, "y", EMU_ROLE_WEIGHT);
    test_rng g = test_rng_make(0x4157);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)test_next(&g),
                 v = u ^ (uint32_t)test_below(&g, 1u << 20);
        if (test_below(&g, 2))
            v ^= 0x80000000u; /* cancellation */
        memcpy(&a.data[i], &u, 4);
        memcpy(&b.data[i], &v, 4);
    }
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 2);
    ctx.stats = &stats;
    ck_assert_int_eq(emu_t_add(&ctx, "h", &y, &a, &b, &test_rne), 0);
    uint64_t hx[EMU_HIST_BINS] = { 0 }, hr[EMU_HIST_BINS] = { 0 };
    MPFR_DECL_INIT(e, 512);
    for (size_t i = 0; i < n; i++) {
        double x = a.data[i], z = b.data[i];
        int bin;
        if (isnan(x) || isnan(z) || (isinf(x) && isinf(z) && x != z))
            bin = EMU_HIST_NAN;
        else if (isinf(x) || isinf(z))
            bin = EMU_HIST_INF;
        else {
            mpfr_set_d(e, x, MPFR_RNDN);
            mpfr_add_d(e, e, z, MPFR_RNDN); /* exact at 512 bits */
            bin = exact_bin(e);
        }
        hx[bin]++;
        hr[emu_hist_bin(y.data[i])]++;
    }
    const emu_site_stats *t = &find_site(&stats, "h", EMU_ROLE_WEIGHT)->total;
    for (int k = 0; k < EMU_HIST_BINS; k++) {
        ck_assert_msg(t->hist_exact[k] == hx[k], "exact bin %d: %llu want %llu",
                      k, (unsigned long long)t->hist_exact[k],
                      (unsigned long long)hx[k]);
        ck_assert_uint_eq(t->hist_rounded[k], hr[k]);
    }
    /* hist bins and labels at their edges */
    char lab[16];
    ck_assert_int_eq(emu_hist_bin(0x1p-149), EMU_HIST_FIRST);
    ck_assert_int_eq(emu_hist_bin(0x1.fffffep-149), EMU_HIST_FIRST);
    ck_assert_int_eq(emu_hist_bin(0x1p-150), EMU_HIST_BELOW);
    ck_assert_int_eq(emu_hist_bin(-0x1p127), bin_of_binade(127));
    ck_assert_int_eq(emu_hist_bin(0x1p128), EMU_HIST_ABOVE);
    ck_assert_int_eq(emu_hist_bin(-0.0), EMU_HIST_ZERO);
    ck_assert_int_eq(emu_hist_bin(-INFINITY), EMU_HIST_INF);
    ck_assert_str_eq(emu_hist_label(bin_of_binade(-3), lab, sizeof lab), "-3");
    ck_assert_str_eq(emu_hist_label(EMU_HIST_BELOW, lab, sizeof lab), "below");
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&y);
    emu_stats_free(&stats);
}
END_TEST

/* The bin by frexp, as the library computed it before it used the bits. */
static int ref_hist_bin(double x)
{
    if (isnan(x))
        return EMU_HIST_NAN;
    if (isinf(x))
        return EMU_HIST_INF;
    if (x == 0.0)
        return EMU_HIST_ZERO;
    int e;
    frexp(x, &e);
    e -= 1;
    if (e < EMU_HIST_EMIN)
        return EMU_HIST_BELOW;
    if (e > EMU_HIST_EMAX)
        return EMU_HIST_ABOVE;
    return EMU_HIST_FIRST + (e - EMU_HIST_EMIN);
}

static void check_bin_d(uint64_t u, uint64_t *hist)
{
    double x;
    memcpy(&x, &u, sizeof x);
    const int want = ref_hist_bin(x);
    ck_assert_msg(emu_hist_bin(x) == want, "bin of %016llx (%a): %d want %d",
                  (unsigned long long)u, x, emu_hist_bin(x), want);
    hist[want]++;
}

static void check_bin_f(uint32_t u, uint64_t *hist)
{
    float x;
    memcpy(&x, &u, sizeof x);
    const int got = emu_hist_bin_f32_unguarded(x), want = ref_hist_bin(x);
    ck_assert_msg(got == want, "bin of binary32 %08x (%a): %d want %d",
                  (unsigned)u, (double)x, got, want);
    hist[want]++;
}

/* The array forms at lengths around their inner chunks and tables. */
static void check_hist_add_lengths(const double *xd, const float *xf)
{
    static const size_t lens[] = { 0, 1, 63, 64, 511, 512, 513, 1537, 4096 };
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        uint64_t gd[EMU_HIST_BINS] = { 0 }, gf[EMU_HIST_BINS] = { 0 };
        uint64_t wd[EMU_HIST_BINS] = { 0 }, wf[EMU_HIST_BINS] = { 0 };
        emu_hist_add_unguarded(gd, xd, lens[k]);
        emu_hist_add_f32_unguarded(gf, xf, lens[k]);
        /* and the choke point's tables, fed in two uneven pieces and
         * merged on top of the counts above (so each bin counts twice) */
        emu_hist_tables td, tf;
        memset(&td, 0, sizeof td);
        memset(&tf, 0, sizeof tf);
        const size_t cut = lens[k] / 3;
        emu_hist_tables_add(&td, xd, cut, false);
        emu_hist_tables_add(&td, xd + cut, lens[k] - cut, false);
        emu_hist_tables_add(&tf, xf, cut, true);
        emu_hist_tables_add(&tf, xf + cut, lens[k] - cut, true);
        emu_hist_tables_merge(gd, &td);
        emu_hist_tables_merge(gf, &tf);
        for (size_t i = 0; i < lens[k]; i++) {
            wd[ref_hist_bin(xd[i])]++;
            wf[ref_hist_bin(xf[i])]++;
        }
        for (int b = 0; b < EMU_HIST_BINS; b++) {
            ck_assert_uint_eq(gd[b], 2 * wd[b]);
            ck_assert_uint_eq(gf[b], 2 * wf[b]);
        }
        /* the pair form (values x and their roundings y counted at once):
         * y mostly xf in the same binade (low bits changed), some runs
         * without a change of bin, and every few values another value */
        float *y = malloc((lens[k] ? lens[k] : 1) * sizeof *y);
        ck_assert_ptr_nonnull(y);
        uint64_t wy[EMU_HIST_BINS] = { 0 }, gx[EMU_HIST_BINS] = { 0 },
                 gy[EMU_HIST_BINS] = { 0 };
        for (size_t i = 0; i < lens[k]; i++) {
            uint32_t u;
            memcpy(&u, &xf[i], sizeof u);
            u ^= (uint32_t)i & 0x3f;
            if (i % 97 == 5 || (i % 7 == 3 && i < 40))
                memcpy(&u, &xf[(i * 31 + 7) % lens[k]], sizeof u);
            memcpy(&y[i], &u, sizeof u);
            wy[ref_hist_bin(y[i])]++;
        }
        emu_hist_tables tp;
        memset(&tp, 0, sizeof tp);
        emu_hist_tables_add_pair_f32(&tp, gx, xf, y, cut);
        emu_hist_tables_add_pair_f32(&tp, gx, xf + cut, y + cut, lens[k] - cut);
        emu_hist_tables_merge(gx, &tp);
        emu_hist_tables_merge(gy, &tp);
        for (int b = 0; b < EMU_HIST_BINS; b++) {
            ck_assert_uint_eq(gx[b], wf[b]);
            ck_assert_uint_eq(gy[b], wy[b]);
        }
        /* and the form with binary64 values (the pairs' hi): y's values
         * widened with low bits below binary32's, runs of them unchanged,
         * every few values one of xd (which holds every kind), zeros and
         * subnormal doubles; in the first half only normal values and
         * zeros among the roundings, so that chunks take the kernels'
         * path without a value binned apart */
        double *xp = malloc((lens[k] ? lens[k] : 1) * sizeof *xp);
        float *yp = malloc((lens[k] ? lens[k] : 1) * sizeof *yp);
        ck_assert_ptr_nonnull(xp);
        ck_assert_ptr_nonnull(yp);
        uint64_t wp[EMU_HIST_BINS] = { 0 }, wq[EMU_HIST_BINS] = { 0 };
        for (size_t i = 0; i < lens[k]; i++) {
            yp[i] = y[i];
            if (i < lens[k] / 2 && !isnormal(yp[i]) && yp[i] != 0.0f)
                yp[i] = (float)(i % 7) - 3.0f;
            wq[ref_hist_bin(yp[i])]++;
            uint64_t u;
            const double yi = yp[i];
            memcpy(&u, &yi, sizeof u);
            if (!isnan(yi) && !isinf(yi) && (i / 64) % 3 != 1)
                u ^= (uint64_t)(i * 0x9e3779b9u) & 0x1fffffff;
            memcpy(&xp[i], &u, sizeof u);
            if (i >= lens[k] / 2 && (i % 89 == 7 || (i % 5 == 2 && i < 30)))
                xp[i] = xd[(i * 17 + 3) % lens[k]];
            if (i % 61 == 11)
                xp[i] = (i & 1 ? -1 : 1) * 0x1p-1060;
            if (i % 61 == 12)
                xp[i] = i & 1 ? -0.0 : 0.0;
            wp[ref_hist_bin(xp[i])]++;
        }
        uint64_t gp[EMU_HIST_BINS] = { 0 }, gq[EMU_HIST_BINS] = { 0 };
        memset(&tp, 0, sizeof tp);
        emu_hist_tables_add_pair_f64(&tp, gp, xp, yp, cut);
        emu_hist_tables_add_pair_f64(&tp, gp, xp + cut, yp + cut,
                                     lens[k] - cut);
        emu_hist_tables_merge(gp, &tp);
        emu_hist_tables_merge(gq, &tp);
        for (int b = 0; b < EMU_HIST_BINS; b++) {
            ck_assert_uint_eq(gp[b], wp[b]);
            ck_assert_uint_eq(gq[b], wq[b]);
        }
        free(yp);
        free(xp);
        free(y);
    }
}

START_TEST(test_hist_bins_from_bits)
{
    enum { NR = 1 << 14 };
    static uint64_t ud[NR];
    static uint32_t uf[NR];
    static double xd[NR];
    static float xf[NR];
    uint64_t hd[EMU_HIST_BINS] = { 0 }, hf[EMU_HIST_BINS] = { 0 };
    for (uint64_t sign = 0; sign < 2; sign++) {
        /* every binary64 binade edge, one ulp either side, its top */
        for (uint64_t e = 0; e < 2048; e++) {
            const uint64_t edge = sign << 63 | e << 52;
            check_bin_d(edge, hd);
            check_bin_d(edge + 1, hd);
            check_bin_d(edge | (((uint64_t)1 << 52) - 1), hd);
            if (e > 0)
                check_bin_d(edge - 1, hd);
        }
        /* every subnormal leading bit, of both formats */
        for (int k = 0; k < 52; k++) {
            check_bin_d(sign << 63 | (uint64_t)1 << k, hd);
            check_bin_d(sign << 63 | (((uint64_t)2 << k) - 1), hd);
        }
        for (uint32_t e = 0; e < 256; e++) {
            const uint32_t edge = (uint32_t)sign << 31 | e << 23;
            check_bin_f(edge, hf);
            check_bin_f(edge + 1, hf);
            check_bin_f(edge | 0x7fffff, hf);
            if (e > 0)
                check_bin_f(edge - 1, hf);
        }
        for (int k = 0; k < 23; k++) {
            check_bin_f((uint32_t)sign << 31 | (uint32_t)1 << k, hf);
            check_bin_f((uint32_t)sign << 31 | ((2u << k) - 1), hf);
        }
    }
    /* the specials of both signs, quiet and signalling NaNs */
    const double sp[] = { 0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN };
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) {
        uint64_t u;
        memcpy(&u, &sp[i], sizeof u);
        check_bin_d(u, hd);
        check_bin_f((uint32_t)(u >> 32), hf);
    }
    check_bin_d(0x7ff0000000000001u, hd);
    check_bin_f(0xff800001u, hf);
    /* random patterns, also through the array forms the commit calls */
    test_rng g = test_rng_make(12);
    const uint64_t rounds = test_scaled(1000000, NR) / NR;
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t wd[EMU_HIST_BINS] = { 0 }, wf[EMU_HIST_BINS] = { 0 };
        uint64_t gd[EMU_HIST_BINS] = { 0 }, gf[EMU_HIST_BINS] = { 0 };
        for (size_t i = 0; i < NR; i++) {
            ud[i] = test_next(&g);
            uf[i] = (uint32_t)test_next(&g);
            check_bin_d(ud[i], wd);
            check_bin_f(uf[i], wf);
        }
        memcpy(xd, ud, sizeof xd);
        memcpy(xf, uf, sizeof xf);
        emu_hist_add_unguarded(gd, xd, NR);
        emu_hist_add_f32_unguarded(gf, xf, NR);
        for (int b = 0; b < EMU_HIST_BINS; b++) {
            ck_assert_uint_eq(gd[b], wd[b]);
            ck_assert_uint_eq(gf[b], wf[b]);
        }
        check_hist_add_lengths(xd, xf);
        /* again with only normal values and zeros (a training's usual
         * chunk): the arrays' path without a value binned apart */
        for (size_t i = 0; i < NR; i++) {
            const uint32_t e = (uf[i] >> 23) & 0xff;
            if (e == 0 || e == 0xff)
                uf[i] &= i % 2 ? 0x80000000u : 0xc07fffffu;
        }
        memcpy(xf, uf, sizeof xf);
        check_hist_add_lengths(xd, xf);
    }
    /* every bin was reached by the edges of one format or the other */
    for (int b = 0; b < EMU_HIST_BINS; b++)
        ck_assert_msg(hd[b] + hf[b] > 0, "bin %d never reached", b);
}
END_TEST

/* The exact bin of hi + lo: one binade down only when hi is a power of
 * two and lo points toward zero; checked against MPFR's exponent of the
 * exact sum. */
START_TEST(test_exact_bin_low_parts)
{
    const double his[] = { 1.0, 1.5, 0x1.fffffffffffffp0, -1.0, -1.5, 0x1p-149,
                           0x1.8p-149, 0x1p-126, 0x1p127, 0x1p128, 0x1p-150 };
    const double los[] = { -0x1p-60, 0x1p-60 };
    const size_t nh = sizeof his / sizeof *his, n = 2 * 2 * nh;
    emu_tensor y;
    make(&y, test_format("binary32"), n, "y", EMU_ROLE_OTHER);
    double hi[2 * 2 * sizeof his / sizeof *his], lo[sizeof hi / sizeof *hi];
    uint64_t want[EMU_HIST_BINS] = { 0 };
    mpfr_t e;
    mpfr_init2(e, 512);
    for (size_t i = 0; i < n; i++) {
        hi[i] = (i & 2 ? -1 : 1) * his[i / 4];
        lo[i] = los[i & 1] * fabs(hi[i]) * 0x1p-10;
        mpfr_set_d(e, hi[i], MPFR_RNDN);
        mpfr_add_d(e, e, lo[i], MPFR_RNDN); /* exact at 512 bits */
        want[exact_bin(e)]++;
    }
    mpfr_clear(e);
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 3);
    ctx.stats = &stats;
    emu_op_out o = { .site = "lo", .kind = "test", .out = &y, .hi = hi,
                     .lo = lo, .rnd = &test_rne };
    ck_assert_int_eq(emu_commit(&ctx, &o), 0);
    const emu_site_stats *t = &find_site(&stats, "lo", EMU_ROLE_OTHER)->total;
    for (int b = 0; b < EMU_HIST_BINS; b++)
        ck_assert_msg(t->hist_exact[b] == want[b], "bin %d: %llu want %llu", b,
                      (unsigned long long)t->hist_exact[b],
                      (unsigned long long)want[b]);
    emu_tensor_free(&y);
    emu_stats_free(&stats);
}
END_TEST

/* Binary64 values that are all binary32 values (a bias added to rounded
 * products, sums of 16-bit values): round_chunk rounds such a chunk by
 * the binary32 array path and measure_chunk bins it from those binary32
 * copies.  Every bit pattern of binary32 (NaNs, infinities, zeros,
 * subnormals) as doubles into bfloat16 and binary16, some chunks with one
 * value that is not a binary32 value (the binary64 path), some shorter
 * than a chunk: both histograms and the counts as the scalar choke point
 * (emu_round of each value) and emu_hist_bin of each value and result
 * give them. */
START_TEST(test_hist_narrow_chunks)
{
    enum { N = 5 * EMU_COMMIT_CHUNK + 77 };
    static double hi[N];
    const char *const fmts[] = { "bfloat16", "binary16" };
    test_rng g = test_rng_make(0x4e41);
    for (int f = 0; f < 2; f++) {
        emu_tensor y;
        make(&y, test_format(fmts[f]), N, "y", EMU_ROLE_OTHER);
        uint64_t hx[EMU_HIST_BINS] = { 0 }, hr[EMU_HIST_BINS] = { 0 };
        uint64_t inexact = 0;
        for (size_t i = 0; i < N; i++) {
            uint32_t u = (uint32_t)test_next(&g);
            if (i % 97 == 5)
                u &= 0x807fffffu; /* a subnormal or zero */
            if (i % 89 == 7)
                u |= 0x7f800000u; /* an infinity or a NaN */
            float v;
            memcpy(&v, &u, sizeof v);
            hi[i] = v;
            /* chunks 1 and 3: one value between two binary32 values */
            if ((i / EMU_COMMIT_CHUNK == 1 || i / EMU_COMMIT_CHUNK == 3) &&
                i % EMU_COMMIT_CHUNK == (size_t)(100 + 7 * f))
                hi[i] = 1.0 + 0x1p-30;
            emu_status st;
            const double r = emu_round(&y.fmt, hi[i], &test_rne, &st);
            y.data[i] = -1.0f; /* overwritten by the commit */
            hx[emu_hist_bin(hi[i])]++;
            hr[emu_hist_bin(r)]++;
            inexact += (st.flags & EMU_FLAG_INEXACT) != 0;
        }
        emu_stats stats;
        emu_stats_init(&stats);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 5);
        ctx.stats = &stats;
        emu_op_out o = { .site = "narrow", .kind = "test", .out = &y,
                         .hi = hi, .rnd = &test_rne };
        ck_assert_int_eq(emu_commit(&ctx, &o), 0);
        const emu_site_stats *t =
            &find_site(&stats, "narrow", EMU_ROLE_OTHER)->total;
        ck_assert_uint_eq(t->results, N);
        ck_assert_uint_eq(t->inexact, inexact);
        for (int b = 0; b < EMU_HIST_BINS; b++) {
            ck_assert_msg(t->hist_exact[b] == hx[b], "%s exact bin %d: %llu "
                          "want %llu", fmts[f], b,
                          (unsigned long long)t->hist_exact[b],
                          (unsigned long long)hx[b]);
            ck_assert_msg(t->hist_rounded[b] == hr[b], "%s rounded bin %d: "
                          "%llu want %llu", fmts[f], b,
                          (unsigned long long)t->hist_rounded[b],
                          (unsigned long long)hr[b]);
        }
        emu_tensor_free(&y);
        emu_stats_free(&stats);
    }
}
END_TEST

/* The same over whole runs of pairs, which the choke point scans a run at
 * a time (vector lanes where the CPU has them) for the one pair in the
 * binade below: that pair at every position of a 256-pair commit, among
 * pairs whose exact values stay in hi's binade; checked against MPFR. */
START_TEST(test_exact_bin_low_parts_runs)
{
    enum { N = 256 };
    emu_tensor y; /* binary16: not binary32's own lanes (rne32_chunk) */
    make(&y, test_format("binary16"), N, "y", EMU_ROLE_OTHER);
    double hi[N], lo[N];
    mpfr_t e;
    mpfr_init2(e, 512);
    for (size_t at = 0; at < N; at++) {
        uint64_t want[EMU_HIST_BINS] = { 0 };
        for (size_t i = 0; i < N; i++) {
            const double s = (i + at) & 1 ? -1.0 : 1.0;
            hi[i] = s * (i == at ? 0x1p-3 : 1.5);
            lo[i] = (i == at ? -s : s) * 0x1p-70;
            mpfr_set_d(e, hi[i], MPFR_RNDN);
            mpfr_add_d(e, e, lo[i], MPFR_RNDN); /* exact at 512 bits */
            want[exact_bin(e)]++;
        }
        emu_stats stats;
        emu_stats_init(&stats);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 3);
        ctx.stats = &stats;
        emu_op_out o = { .site = "lo", .kind = "test", .out = &y, .hi = hi,
                         .lo = lo, .rnd = &test_rne };
        ck_assert_int_eq(emu_commit(&ctx, &o), 0);
        const emu_site_stats *t =
            &find_site(&stats, "lo", EMU_ROLE_OTHER)->total;
        for (int b = 0; b < EMU_HIST_BINS; b++)
            ck_assert_msg(t->hist_exact[b] == want[b],
                          "pair at %zu, bin %d: %llu want %llu", at, b,
                          (unsigned long long)t->hist_exact[b],
                          (unsigned long long)want[b]);
        emu_stats_free(&stats);
    }
    mpfr_clear(e);
    emu_tensor_free(&y);
}
END_TEST

/* Values for a commit into binary32: chunk 0 the binary32 edges and
 * specials (NaNs of both signs, quiet and signalling payloads) then random
 * binary32 patterns, chunk 1 the same with one value that is not a
 * binary32, chunk 2 random patterns with runs of 64 free of NaNs holding
 * infinities and subnormals (runs that are copied and binned whole), and
 * a short tail. */
static void carrier_values(double *hi, size_t n, test_rng *g)
{
    static const uint32_t edges[] = {
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff,
        0x807fffff, 0x00800000, 0x80800000, 0x00400000, 0x7f7fffff,
        0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
        0x7f800001, 0xff800001, 0x7fffffff, 0x7fa5a5a5, 0x3f800000
    };
    const size_t ne = sizeof edges / sizeof *edges;
    for (size_t i = 0; i < n; i++) {
        uint32_t w = i < ne ? edges[i] : (uint32_t)test_next(g);
        float f;
        memcpy(&f, &w, sizeof f);
        hi[i] = f;
    }
    for (size_t i = 2048; i < 2048 + 3 * 64 && i < n; i++)
        if (isnan(hi[i]))
            hi[i] = -1.5;
    if (n > 2048 + 3 * 64) {
        hi[2048 + 5] = INFINITY;       /* alone among normal values */
        hi[2048 + 64 + 9] = -INFINITY; /* with a subnormal */
        hi[2048 + 64 + 10] = -0x1p-140;
        hi[2048 + 128 + 63] = 0x1p-149;
    }
    hi[1024 + 7] = 1.0 + 0x1p-30;
    uint64_t nan = 0x7ff0000000000001u; /* a payload binary32 cannot hold */
    memcpy(&hi[ne], &nan, sizeof nan);
}

/* A producer of binary32 values (the op is the array). */
static void carrier_fill32(const void *op, size_t i0, size_t m, float *v)
{
    memcpy(v, (const float *)op + i0, m * sizeof *v);
}

START_TEST(test_commit_carrier)
{
    const emu_format *f32 = test_format("binary32");
    const size_t n = 3 * 1024 + 17;
    emu_tensor y;
    make(&y, f32, n, "y", EMU_ROLE_OTHER);
    double *hi = malloc(n * sizeof *hi), *hv = malloc(n * sizeof *hv);
    float *fv = malloc(n * sizeof *fv);
    test_rng g = test_rng_make(32);
    carrier_values(hi, n, &g);
    for (size_t i = 0; i < n; i++) {
        fv[i] = (float)hi[i];
        hv[i] = fv[i];
    }
    const emu_rnd modes[] = { EMU_RNE, EMU_RZ, EMU_RS };
    /* the values as doubles, then as binary32 values through fill32; with
     * histograms and without (whose binary32 values take another loop) */
    for (int hists = 0; hists < 2; hists++)
    for (int via = 0; via < 2; via++)
    for (int pid = 0; pid < EMU_PROFILE_COUNT; pid++)
    for (int sat = 0; sat < 2; sat++)
    for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
        emu_rounding r = { .mode = modes[k], .sr_bits = 64, .saturate = sat,
                           .profile = emu_profile_preset(pid) };
        emu_stats stats;
        emu_stats_init(&stats);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 9);
        ctx.stats = &stats;
        ctx.measure = EMU_MEASURE_COUNTS | (hists ? EMU_MEASURE_HIST : 0u);
        const uint64_t stream = emu_ctx_stream(&ctx);
        const double *x = via ? hv : hi;
        emu_op_out o = { .site = "carrier", .kind = "test", .out = &y,
                         .rnd = &r };
        if (via) {
            o.fill32 = carrier_fill32;
            o.op = fv;
        } else {
            o.hi = hi;
        }
        ck_assert_int_eq(emu_commit(&ctx, &o), 0);
        /* the scalar choke point, element by element */
        emu_round_counts want = { 0 };
        uint64_t hist[EMU_HIST_BINS] = { 0 }, hist_x[EMU_HIST_BINS] = { 0 };
        for (size_t i = 0; i < n; i++) {
            emu_status st;
            const double z = emu_round2_word(f32, x[i], 0.0, &r,
                                             emu_random64(9, stream, i), &st);
            emu_round_counts_add(&want, x[i], z, st.flags);
            hist[emu_hist_bin(z)] += (uint64_t)hists;
            hist_x[emu_hist_bin(x[i])] += (uint64_t)hists;
            const float zf = (float)z;
            ck_assert_msg(memcmp(&zf, &y.data[i], sizeof zf) == 0,
                          "hists %d via %d profile %d sat %d mode %d: element "
                          "%zu (%a): %a want %a", hists, via, pid, sat,
                          (int)modes[k], i, x[i],
                          (double)y.data[i], z);
        }
        want_site_totals(&stats, "carrier", &want, hist, hist_x);
        emu_stats_free(&stats);
    }
    emu_tensor_free(&y);
    free(hi);
    free(hv);
    free(fv);
}
END_TEST

/* emu_stats.hist_always: with the histograms off, the sites it lists
 * still get theirs (as with them on), the others none; their counters
 * are the same either way. */
START_TEST(test_commit_hist_always)
{
    const emu_format *f16 = test_format("binary16");
    const size_t n = 1000;
    emu_tensor y;
    make(&y, f16, n, "y", EMU_ROLE_OTHER);
    double *hi = malloc(n * sizeof *hi);
    test_rng g = test_rng_make(77);
    for (size_t i = 0; i < n; i++)
        hi[i] = ldexp((double)test_below(&g, 1u << 20) - 0x1p19,
                      (int)(i % 40) - 50);
    emu_rounding r = { .mode = EMU_RNE };
    const char *list[] = { "b.dinput", "a.dinput", NULL };
    const char *sites[] = { "a.dinput", "a", "a.dinput.x" };
    emu_stats on, off;
    emu_stats_init(&on);
    emu_stats_init(&off);
    off.hist_always = list;
    for (int pass = 0; pass < 2; pass++)
        for (size_t s = 0; s < 3; s++) {
            emu_ctx ctx;
            emu_ctx_init(&ctx, 3);
            ctx.stats = pass ? &off : &on;
            ctx.measure = EMU_MEASURE_COUNTS | (pass ? 0u : EMU_MEASURE_HIST);
            emu_op_out o = { .site = sites[s], .kind = "test", .out = &y,
                             .hi = hi, .rnd = &r };
            ck_assert_int_eq(emu_commit(&ctx, &o), 0);
        }
    for (size_t s = 0; s < 3; s++) {
        const emu_site_stats *a = &find_site(&on, sites[s], EMU_ROLE_OTHER)->total;
        const emu_site_stats *b = &find_site(&off, sites[s], EMU_ROLE_OTHER)->total;
        ck_assert_uint_eq(a->results, n);
        ck_assert_uint_eq(b->results, n);
        ck_assert_uint_eq(a->inexact, b->inexact);
        ck_assert_uint_eq(a->underflow, b->underflow);
        ck_assert_uint_gt(a->underflow, 0);
        uint64_t sum_a = 0, sum_b = 0;
        for (int k = 0; k < EMU_HIST_BINS; k++) {
            sum_a += a->hist_rounded[k];
            sum_b += b->hist_rounded[k];
            if (s == 0) {
                ck_assert_uint_eq(a->hist_rounded[k], b->hist_rounded[k]);
                ck_assert_uint_eq(a->hist_exact[k], b->hist_exact[k]);
            }
        }
        ck_assert_uint_eq(sum_a, n);
        ck_assert_uint_eq(sum_b, s == 0 ? n : 0);
    }
    emu_stats_free(&off);
    ck_assert_ptr_null(off.hist_always);
    emu_stats_free(&on);
    emu_tensor_free(&y);
    free(hi);
}
END_TEST

/* Pairs hi + lo whose hi is a grid point or a midpoint of the output
 * format while lo is not zero (an update below half a binary64 ulp of its
 * weight makes them): the choke point rounds these elements apart from
 * the rest of their chunk.  Results and counts against the scalar choke
 * point element by element, every deterministic mode, chunks holding none,
 * one, a few and many of them. */
START_TEST(test_commit_pairs_lo_apart)
{
    const char *fmts[] = { "binary32", "binary16", "bfloat16", "e4m3",
                           "e5m2", "e2m1" };
    const emu_rnd modes[] = { EMU_RNE, EMU_RNA, EMU_RZ, EMU_RU, EMU_RD,
                              EMU_RO };
    const size_t n = 4 * 1024 + 33;
    double *hi = malloc(n * sizeof *hi), *lo = malloc(n * sizeof *lo);
    test_rng g = test_rng_make(41);
    for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++) {
        const emu_format *f = test_format(fmts[fi]);
        for (size_t i = 0; i < n; i++) {
            /* chunk c holds boundary pairs with odds 0, 1/64, 1/4, 3/4, 1 */
            const uint64_t r = test_next(&g);
            const unsigned odds[] = { 0, 1, 16, 48, 64 };
            const bool boundary = (r & 63) < odds[(i / 1024) % 5];
            double x;
            do
                x = emu_decode(f, test_random_bits(&g, f));
            while (!isfinite(x) || x == 0.0 || fabs(x) >= f->max);
            if (boundary && (r >> 6) & 1) {
                /* the midpoint above |x|, a binary64 */
                const double up = emu_next_up(f, fabs(x));
                x = copysign((fabs(x) + up) / 2.0, x);
            } else if (!boundary) {
                x *= 1.0 + (double)(r >> 20) * 0x1p-46; /* a wider value */
            }
            hi[i] = x;
            lo[i] = (r >> 7) % 5 == 0 ? 0.0
                    : ldexp(x, -58 - (int)((r >> 10) % 4)) *
                      ((r >> 12) & 1 ? 1.0 : -1.0);
        }
        for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
            emu_rounding rnd = { .mode = modes[k] };
            emu_tensor y;
            emu_stats stats;
            commit_counted(f, n, "pairs", 5, hi, lo, &rnd, &y, &stats);
            emu_round_counts want = { 0 };
            uint64_t hist[EMU_HIST_BINS] = { 0 }, hist_x[EMU_HIST_BINS] = { 0 };
            mpfr_t e;
            mpfr_init2(e, 512);
            for (size_t i = 0; i < n; i++) {
                emu_status st;
                const double z = emu_round2_word(f, hi[i], lo[i], &rnd, 0,
                                                 &st);
                emu_round_counts_add(&want, hi[i], z, st.flags);
                hist[emu_hist_bin(z)]++;
                /* the exact value's binade, in MPFR */
                mpfr_set_d(e, hi[i], MPFR_RNDN);
                mpfr_add_d(e, e, lo[i], MPFR_RNDN);
                hist_x[exact_bin(e)]++;
                ck_assert_msg(test_same(z, y.data[i]),
                              "%s mode %d: element %zu (%a + %a): %a want %a",
                              fmts[fi], (int)modes[k], i, hi[i], lo[i],
                              (double)y.data[i], z);
            }
            want_site_totals(&stats, "pairs", &want, hist, hist_x);
            mpfr_clear(e);
            emu_stats_free(&stats);
            emu_tensor_free(&y);
        }
    }
    free(hi);
    free(lo);
}
END_TEST

/* binary64 values that are binary32 values (subnormals among them, the
 * largest and the smallest) with one wider value at every position of two
 * runs and the tail but the first (which the choke point tests before the
 * runs), or none: into binary32, carried unrounded unless the wider value
 * is found, and into binary16, through the binary32 array path unless it
 * is found.  Each lane of the two scans' kernels (at the level EMU_ISA
 * names) has to find it.  Results and counts against the scalar choke
 * point. */
START_TEST(test_commit_carry_each_lane)
{
    const char *fmts[] = { "binary32", "binary16" };
    const emu_rnd modes[] = { EMU_RNE, EMU_RU };
    const size_t n = 2 * 64 + 7;
    double hi[2 * 64 + 7];
    for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++)
    for (size_t k = 0; k < sizeof modes / sizeof *modes; k++)
    for (size_t pos = 1; pos <= n; pos++) { /* n: none */
        for (size_t i = 0; i < n; i++) {
            const uint32_t b = i % 7 == 3   ? 0x7fffffu - (uint32_t)(i - 3)
                               : i % 7 == 5 ? 1u + (uint32_t)(i - 5)
                                            : 0x3f800000u + 4099u * (uint32_t)i;
            float v;
            memcpy(&v, &b, sizeof v);
            hi[i] = i & 1 ? -(double)v : (double)v;
        }
        if (pos < n)
            hi[pos] = 1.0 + 0x1p-30; /* wider than binary32 */
        const emu_format *f = test_format(fmts[fi]);
        const emu_rounding rnd = { .mode = modes[k] };
        emu_tensor y;
        emu_stats stats;
        commit_counted(f, n, "carry", 3, hi, NULL, &rnd, &y, &stats);
        emu_round_counts want = { 0 };
        uint64_t hist[EMU_HIST_BINS] = { 0 }, hist_x[EMU_HIST_BINS] = { 0 };
        for (size_t i = 0; i < n; i++) {
            emu_status st;
            const double z = emu_round2_word(f, hi[i], 0.0, &rnd, 0, &st);
            emu_round_counts_add(&want, hi[i], z, st.flags);
            hist[emu_hist_bin(z)]++;
            hist_x[emu_hist_bin(hi[i])]++;
            ck_assert_msg(test_same(z, y.data[i]),
                          "%s mode %d, the wide value at %zu: element %zu "
                          "(%a): %a want %a", fmts[fi], (int)modes[k], pos,
                          i, hi[i],
                          (double)y.data[i], z);
        }
        want_site_totals(&stats, "carry", &want, hist, hist_x);
        emu_stats_free(&stats);
        emu_tensor_free(&y);
    }
}
END_TEST

/* binary32 values from a producer (fill32) into binary32 under
 * nearest-even with the histograms off: carried by runs of 64, each
 * counted and copied by the kernel of the level EMU_ISA names, a run
 * holding a NaN and the rest of the chunk element by element; and into
 * binary16, and binary32 with NaN payloads kept (not the identity),
 * through the runs that make signalling NaNs quiet (kernels of that level
 * too) before the rounding: the payload shows the quiet bit.
 * Subnormals (the largest and the smallest), infinities and zeros of
 * both signs throughout, and a signalling NaN at every position of two
 * runs and the tail, or none.  Results (NaNs as the scalar choke point
 * makes them) and counts against the scalar choke point. */
START_TEST(test_commit_carry32_each_lane)
{
    const char *fmts[] = { "binary32", "binary16", "binary32" };
    const size_t n = 2 * 64 + 7;
    float v[2 * 64 + 7];
    for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++)
    for (size_t pos = 0; pos <= n; pos++) { /* n: none */
        const emu_format *f = test_format(fmts[fi]);
        emu_rounding rnd = { .mode = EMU_RNE };
        rnd.profile.nan_keep_payload = fi == 2;
        for (size_t i = 0; i < n; i++) {
            const uint32_t b = i % 7 == 3    ? 0x7fffffu - (uint32_t)(i - 3)
                               : i % 7 == 5  ? 1u + (uint32_t)(i - 5)
                               : i % 11 == 4 ? 0x7f800000u
                               : i % 13 == 6 ? 0u
                                             : 0x3f800000u + 4099u * (uint32_t)i;
            memcpy(&v[i], &b, sizeof b);
            if (i & 1)
                v[i] = -v[i];
        }
        if (pos < n) {
            const uint32_t snan = 0x7fa00001u;
            memcpy(&v[pos], &snan, sizeof snan);
        }
        emu_tensor y;
        make(&y, f, n, "y", EMU_ROLE_OTHER);
        emu_stats stats;
        emu_stats_init(&stats);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 3);
        ctx.stats = &stats;
        ctx.measure = EMU_MEASURE_COUNTS;
        emu_op_out o = { .site = "carry32", .kind = "test", .out = &y,
                         .fill32 = carrier_fill32, .op = v, .rnd = &rnd };
        ck_assert_int_eq(emu_commit(&ctx, &o), 0);
        emu_round_counts want = { 0 };
        const uint64_t none[EMU_HIST_BINS] = { 0 };
        for (size_t i = 0; i < n; i++) {
            emu_status st;
            const double z = emu_round2_word(f, v[i], 0.0, &rnd, 0, &st);
            emu_round_counts_add(&want, v[i], z, st.flags);
            const float zf = (float)z;
            ck_assert_msg(memcmp(&zf, &y.data[i], sizeof zf) == 0,
                          "%s, the NaN at %zu: element %zu (%a): %a want %a",
                          fmts[fi], pos, i, (double)v[i], (double)y.data[i],
                          z);
        }
        want_site_totals(&stats, "carry32", &want, none, none);
        emu_stats_free(&stats);
        emu_tensor_free(&y);
    }
}
END_TEST

/* One pair that must be rounded apart (hi a midpoint, lo above it, so
 * that hi alone rounds to the even neighbour below and hi + lo to the one
 * above) in a chunk of pairs that need not: at every position of two
 * scanned runs and the tail, so that each lane of the scan's kernel (at
 * the level EMU_ISA names) has to find it. */
START_TEST(test_commit_lo_apart_each_lane)
{
    const char *fmts[] = { "binary16", "e5m2" };
    const size_t n = 2 * 64 + 7;
    double hi[2 * 64 + 7], lo[2 * 64 + 7];
    const emu_rounding rnd = { .mode = EMU_RNE };
    for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++) {
        const emu_format *f = test_format(fmts[fi]);
        const double mid = (1.0 + emu_next_up(f, 1.0)) / 2.0;
        for (size_t pos = 0; pos < n; pos++) {
            for (size_t i = 0; i < n; i++) {
                hi[i] = (i & 1 ? -1.5 : 1.5) + (double)i * 0x1p-40;
                lo[i] = 0.0;
            }
            hi[pos] = pos & 1 ? -mid : mid;
            lo[pos] = ldexp(hi[pos], -60);
            emu_tensor y;
            emu_stats stats;
            commit_counted(f, n, "apart", 7, hi, lo, &rnd, &y, &stats);
            for (size_t i = 0; i < n; i++) {
                emu_status st;
                const double z = emu_round2_word(f, hi[i], lo[i], &rnd, 0,
                                                 &st);
                ck_assert_msg(test_same(z, y.data[i]),
                              "%s, the pair at %zu: element %zu (%a + %a): "
                              "%a want %a", fmts[fi], pos, i, hi[i], lo[i],
                              (double)y.data[i], z);
            }
            emu_stats_free(&stats);
            emu_tensor_free(&y);
        }
    }
}
END_TEST

/* binary64 values and pairs hi + lo into binary32 under nearest-even (the
 * fp32 policy's weight updates and wide results): the choke point rounds
 * a chunk of common lanes in one pass of vector lanes (the host's
 * conversion, the exact histogram from the results' bins), and sends a
 * chunk with a rare lane to the general path.  Results, every counter and
 * both histograms against MPFR element by element (emu_ref_round for the
 * value and flags, the exact value's binade from hi + lo), with lo and
 * without, at each instruction-set level (CTest runs this suite per
 * EMU_ISA): chunks of common lanes only (grid points with a low part,
 * powers of two with a low part toward and away from zero, values that
 * round up to a power of two, ties, zeros, values near the largest
 * binary32), chunks where one kind of rare lane (a midpoint with a low
 * part, a value at or below 2^-126, an overflow, an infinity, a NaN) comes
 * with odds 1/64 among common ones, chunks of every kind with odds 1/4 and
 * 1, and a tail shorter than a run. */
static double rne32_common(test_rng *g, uint64_t r, double *lo, bool with_lo)
{
    const int e = (int)test_below(g, 250) - 125; /* 2^-125 .. 2^124 */
    const double sgn = (r >> 1) & 1 ? -1.0 : 1.0;
    /* a binary32 significand, 1 <= s < 2 */
    const double s = 1.0 + (double)test_below(g, (uint64_t)1 << 23) * 0x1p-23;
    double x;
    *lo = 0.0;
    switch ((r >> 2) % 8) {
    case 0: /* a wide value */
    default:
        x = ldexp(s * (1.0 + (double)(test_next(g) >> 24) * 0x1p-64), e);
        break;
    case 1: /* a grid point (the weight of a tiny update) */
        x = ldexp(s, e);
        break;
    case 2: /* a power of two */
        x = ldexp(1.0, e);
        break;
    case 3: /* just below a power of two: rounds up to it */
        x = ldexp(1.0 - 0x1p-30, e);
        break;
    case 4: /* a tie, resolved to even when lo is zero */
        x = ldexp(s + 0x1p-24, e);
        break;
    case 5: /* zero */
        return (r >> 1) & 1 ? -0.0 : 0.0;
    case 6: /* near the largest binary32 */
        x = 0x1.fffffep127 * (1.0 - (double)test_below(g, 1024) * 0x1p-40);
        break;
    }
    x *= sgn;
    if (with_lo && ((r >> 5) & 3) != 0 && (r >> 2) % 8 != 4)
        *lo = ldexp(x, -55 - (int)((r >> 7) % 6)) * ((r >> 13) & 1 ? 1.0 : -1.0);
    return x;
}

static double rne32_rare(test_rng *g, uint64_t r, int kind, double *lo)
{
    const double sgn = (r >> 1) & 1 ? -1.0 : 1.0;
    const double s = 1.0 + (double)test_below(g, (uint64_t)1 << 23) * 0x1p-23;
    *lo = 0.0;
    switch (kind < 0 ? (int)((r >> 2) % 7) : kind) {
    case 0: /* a midpoint with a low part */
    default: {
        const double x = sgn * ldexp(s + 0x1p-24, (int)test_below(g, 200) - 100);
        *lo = ldexp(x, -60) * ((r >> 9) & 1 ? 1.0 : -1.0);
        return x;
    }
    case 1: /* tiny: around and below 2^-126, subnormal results */
        *lo = (r >> 9) & 1 ? sgn * 0x1p-190 : 0.0;
        return sgn * ldexp(s, -126 - (int)test_below(g, 30));
    case 2: /* exactly 2^-126, or just below it */
        return sgn * ((r >> 9) & 1 ? 0x1p-126 : 0x1p-126 * (1.0 - 0x1p-30));
    case 3: /* underflow to zero */
        return sgn * 0x1p-160;
    case 4: /* overflow */
        return sgn * ldexp(s, 128 + (int)test_below(g, 4));
    case 5: /* infinities */
        return sgn * INFINITY;
    case 6: /* NaN */
        return NAN;
    }
}

START_TEST(test_commit_rne32)
{
    const emu_format *f = test_format("binary32");
    const emu_rounding rnd = { .mode = EMU_RNE };
    const size_t big = 20 * 1024 + 37;
    double *hi = malloc(big * sizeof *hi), *lo = malloc(big * sizeof *lo);
    test_rng g = test_rng_make(97);
    mpfr_t e;
    mpfr_init2(e, 256);
    /* then commits too short for the histogram tables (counted bin by
     * bin, from the lanes' bins too): a tail of common lanes only; then
     * the long ones again with the counts alone (the lanes without bins,
     * which do not look for powers of two) */
    for (int pass = 0; pass < 6; pass++) {
        const int with_lo = pass % 2;
        const bool hists = pass < 4;
        const size_t n = pass < 2 || !hists ? big
                                            : 37 + 20 * (size_t)(pass - 2);
        for (size_t i = 0; i < n; i++) {
            /* even chunks: common lanes only; odd chunk 2k + 1, k < 7:
             * rare lanes of kind k with odds 1/64; then every kind with
             * odds 1/4, and 1 */
            const uint64_t r = test_next(&g);
            const size_t c = i / 1024;
            const int kind = c % 2 == 0 || c / 2 >= 7 ? -1 : (int)(c / 2);
            const unsigned odds = c % 2 == 0 ? 0 : kind >= 0 ? 1
                                  : c / 2 == 7 ? 16 : 64;
            if ((r >> 58) < odds)
                hi[i] = rne32_rare(&g, r, kind, &lo[i]);
            else
                hi[i] = rne32_common(&g, r, &lo[i], with_lo);
            if (!with_lo)
                lo[i] = 0.0;
        }
        emu_tensor y;
        emu_stats stats;
        commit_measured(f, n, "rne32", 3, hi, with_lo ? lo : NULL, &rnd,
                        EMU_MEASURE_COUNTS | (hists ? EMU_MEASURE_HIST : 0),
                        &y, &stats);
        emu_round_counts want = { 0 };
        uint64_t hist[EMU_HIST_BINS] = { 0 }, hist_x[EMU_HIST_BINS] = { 0 };
        for (size_t i = 0; i < n; i++) {
            emu_status st;
            double z;
            if (isnan(hi[i]) || isinf(hi[i]) || (hi[i] == 0.0 && lo[i] == 0.0)) {
                /* no number to hand MPFR, or a zero whose sign is hi's
                 * (MPFR's -0 + 0 is +0): the scalar choke point */
                z = emu_round2_word(f, hi[i], lo[i], &rnd, 0, &st);
                hist_x[emu_hist_bin(hi[i])]++;
            } else {
                mpfr_set_d(e, hi[i], MPFR_RNDN);
                mpfr_add_d(e, e, lo[i], MPFR_RNDN); /* exact at 256 bits */
                z = emu_ref_round(f, e, &rnd, &st);
                hist_x[exact_bin(e)]++;
            }
            emu_round_counts_add(&want, hi[i], z, st.flags);
            hist[emu_hist_bin(z)]++;
            ck_assert_msg(test_same(z, y.data[i]),
                          "lo %d: element %zu (%a + %a): %a want %a", with_lo,
                          i, hi[i], lo[i], (double)y.data[i], z);
        }
        if (!hists) {
            memset(hist, 0, sizeof hist);
            memset(hist_x, 0, sizeof hist_x);
        }
        want_site_totals(&stats, "rne32", &want, hist, hist_x);
        emu_stats_free(&stats);
        emu_tensor_free(&y);
    }
    mpfr_clear(e);
    free(hi);
    free(lo);
}
END_TEST

/* Swamping of an accumulation out = acc_old + addend, counted by the
 * choke point from the results it rounds (vector runs, and the scalar
 * loop for the rest), against emu_accum_count_add element by element:
 * addends that vanish, lose a few bits or none, subnormal binary64
 * addends, zeros, infinities and NaNs, old values that are not finite,
 * results that are subnormal, zero (old values cancelled exactly too) or
 * overflow. */
START_TEST(test_commit_swamp_counts)
{
    const char *fmts[] = { "binary32", "binary16", "bfloat16", "e5m2",
                           "e4m3" };
    const emu_rnd modes[] = { EMU_RNE, EMU_RZ };
    const size_t n = 3 * 1024 + 45;
    double *hi = malloc(n * sizeof *hi), *lo = malloc(n * sizeof *lo);
    double *t = malloc(n * sizeof *t);
    float *old = malloc(n * sizeof *old);
    test_rng g = test_rng_make(43);
    for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++) {
        const emu_format *f = test_format(fmts[fi]);
        for (size_t i = 0; i < n; i++) {
            const uint64_t r = test_next(&g);
            double w;
            do
                w = emu_decode(f, test_random_bits(&g, f));
            while (isnan(w));
            /* chunk 1 holds no rare element: its runs stay vector */
            const bool plain = (i / 1024) == 1;
            switch (plain ? 4 + r % 4 : r % 12) {
            case 0: t[i] = 0.0; break;
            case 1: t[i] = (r >> 8) & 1 ? INFINITY : NAN; break;
            case 2: t[i] = ldexp((double)(r >> 40), -1074 - 24 + (int)(r % 30)); break;
            case 3: w = (r >> 8) & 1 ? INFINITY : -INFINITY; t[i] = 1.0; break;
            default:
                /* an update 2^-40 .. 2^4 times w's size (or a small one
                 * for w = 0), of 1 to 40 significant bits */
                t[i] = ldexp((double)((r >> 24) | 1) * 0x1p-40,
                             (int)((r >> 4) % 45) - 40) *
                       (w != 0.0 ? fabs(w) : f->min_normal) *
                       ((r >> 3) & 1 ? 1.0 : -1.0);
                if ((r >> 10) % 3 == 0)
                    t[i] = (double)(float)t[i];
                if ((r >> 10) % 5 == 1 && w != 0.0)
                    t[i] = w; /* on the grid: no bit lost, or overflow */
                if ((r >> 10) % 5 == 2 && w != 0.0 && !plain)
                    t[i] = -w; /* a zero result: cancelled exactly */
            }
            old[i] = (float)w;
            /* hi + lo = w + t exactly (TwoSum) */
            hi[i] = w + t[i];
            const double bv = hi[i] - w, av = hi[i] - bv;
            lo[i] = (w - av) + (t[i] - bv);
            if (!isfinite(hi[i]))
                lo[i] = 0.0;
        }
        for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
            emu_rounding rnd = { .mode = modes[k] };
            emu_tensor y;
            make(&y, f, n, "y", EMU_ROLE_OTHER);
            emu_stats stats;
            emu_stats_init(&stats);
            emu_ctx ctx;
            emu_ctx_init(&ctx, 5);
            ctx.stats = &stats;
            ctx.measure = EMU_MEASURE_COUNTS | EMU_MEASURE_SWAMP;
            emu_op_out o = { .site = "upd", .kind = "test", .out = &y,
                             .hi = hi, .lo = lo, .acc_old = old,
                             .addend = t, .rnd = &rnd };
            ck_assert_int_eq(emu_commit(&ctx, &o), 0);
            emu_accum_counts want = { 0 };
            for (size_t i = 0; i < n; i++)
                if (t[i] != 0.0 && isfinite(t[i]) && isfinite(old[i]))
                    emu_accum_count_add(&want, f, old[i], t[i], y.data[i]);
            const emu_site_stats *s =
                &find_site(&stats, "upd", EMU_ROLE_OTHER)->total;
            ck_assert_msg(want.adds > n / 2 && want.absorbed > 0 &&
                          want.lost_bits[0] > 0, "%s: a weak case (adds %llu absorbed %llu lost0 %llu)", fmts[fi], (unsigned long long)want.adds, (unsigned long long)want.absorbed, (unsigned long long)want.lost_bits[0]);
            ck_assert_uint_eq(s->adds, want.adds);
            ck_assert_uint_eq(s->absorbed, want.absorbed);
            for (int b = 0; b < EMU_LOST_BINS; b++)
                ck_assert_msg(s->lost_bits[b] == want.lost_bits[b],
                              "%s mode %d: lost_bits[%d] %llu want %llu",
                              fmts[fi], (int)modes[k], b,
                              (unsigned long long)s->lost_bits[b],
                              (unsigned long long)want.lost_bits[b]);
            emu_stats_free(&stats);
            emu_tensor_free(&y);
        }
    }
    free(hi);
    free(lo);
    free(t);
    free(old);
}
END_TEST

/* ---- MPFR sampling ------------------------------------------------------- */

typedef enum { S_ADD, S_MUL, S_DIV, S_SQRT, S_EXP, S_AXPY, S_COUNT } s_op;

static int run(s_op op, emu_ctx *ctx, const char *site, emu_tensor *y,
               const emu_tensor *a, const emu_tensor *b,
               const emu_rounding *rnd)
{
    switch (op) {
    case S_ADD: return emu_t_add(ctx, site, y, a, b, rnd);
    case S_MUL: return emu_t_mul(ctx, site, y, a, b, rnd);
    case S_DIV: return emu_t_div(ctx, site, y, a, b, rnd);
    case S_SQRT: return emu_t_unary(ctx, site, y, a, EMU_UNARY_SQRT, 0, 0,
                                    rnd);
    case S_EXP: return emu_t_unary(ctx, site, y, a, EMU_UNARY_EXP, 0, 0,
                                   rnd);
    default: return emu_t_axpy(ctx, site, y, 0.7f, a, b, rnd);
    }
}

/* A random value of f whose products, quotients and sums with another
 * stay inside f's range (no overflow: the error bounds are about
 * rounding, not saturation), and whose exp does too. */
static double tame_value(test_rng *g, const emu_format *f, bool for_exp)
{
    const double lo = 2.0 * sqrt(f->min_normal), hi = sqrt(f->max) / 2.0;
    for (;;) {
        double x = emu_decode(f, test_random_bits(g, f));
        if (x == 0.0 || (for_exp && fabs(x) < log(f->max) - 1.0) ||
            (!for_exp && fabs(x) >= lo && fabs(x) <= hi))
            return x;
    }
}

/* Output i's exact value in MPFR (ex at 600 bits: add, mul and axpy
 * exactly; div, sqrt and exp correctly rounded there, and exact only where
 * the true value is a short binary number). */
static void exact_of(s_op op, mpfr_ptr ex, double x, double z, double e)
{
    mpfr_t t;
    mpfr_init2(t, 600);
    switch (op) {
    case S_ADD:
        mpfr_set_d(ex, x, MPFR_RNDN);
        mpfr_add_d(ex, ex, z, MPFR_RNDN);
        break;
    case S_MUL:
        mpfr_set_d(ex, x, MPFR_RNDN);
        mpfr_mul_d(ex, ex, z, MPFR_RNDN);
        break;
    case S_DIV:
        mpfr_set_d(ex, x, MPFR_RNDN);
        mpfr_div_d(ex, ex, z, MPFR_RNDN);
        break;
    case S_SQRT:
        mpfr_set_d(t, x, MPFR_RNDN);
        mpfr_sqrt(ex, t, MPFR_RNDN);
        break;
    case S_EXP:
        mpfr_set_d(t, e, MPFR_RNDN);
        mpfr_exp(ex, t, MPFR_RNDN);
        break;
    default:
        mpfr_set_flt(ex, 0.7f, MPFR_RNDN);
        mpfr_mul_d(ex, ex, x, MPFR_RNDN);
        mpfr_add_d(ex, ex, z, MPFR_RNDN);
        break;
    }
    mpfr_clear(t);
}

/* One output y of f under mode m against its exact value: the side it
 * lies on, and at an exact tie the neighbour chosen, as the mode defines
 * them.  An error bound alone cannot tell RNE from RNA or RZ from RU; this
 * can.  Returns |y - exact| in ulps at |exact| (the choke point's unit)
 * and counts the ties met. */
static double check_side(const emu_format *f, emu_rnd m, const char *site,
                         size_t i, double y, mpfr_srcptr ex, unsigned *ties)
{
    mpfr_t d;
    mpfr_init2(d, 1300);
    mpfr_set_d(d, y, MPFR_RNDN);
    mpfr_sub(d, d, ex, MPFR_RNDN); /* exact: y - exact, signed */
    long e = (long)mpfr_get_exp(ex) - 1;
    if (mpfr_zero_p(ex) || e < f->emin)
        e = f->emin;
    const long q = e - f->p + 1; /* the quantum at |exact| */
    const int side = mpfr_sgn(d); /* > 0: y above the exact value */
    const int away = mpfr_signbit(ex) ? -side : side;
    emu_bits b;
    ck_assert(emu_encode(f, y, &b));
    const bool odd = b.v & 1; /* the significand's last bit */
    mpfr_abs(d, d, MPFR_RNDN);
    const bool tie = side != 0 && mpfr_cmp_ui_2exp(d, 1, q - 1) == 0;
    *ties += tie;
    bool ok;
    switch (m) {
    case EMU_RNE: ok = !tie || !odd; break;
    case EMU_RNA: ok = !tie || away > 0; break;
    case EMU_RZ:  ok = away <= 0; break;
    case EMU_RU:  ok = side >= 0; break;
    case EMU_RD:  ok = side <= 0; break;
    case EMU_RO:  ok = side == 0 || odd; break;
    default:      ok = mpfr_cmp_ui_2exp(d, 1, q) < 0; break; /* a neighbour */
    }
    EXPECT(ok, "%s (mode %s) output %zu: %a is %s the exact value%s, its "
           "last bit %s", site, emu_rnd_name(m), i, y, side > 0 ? "above"
           : side < 0 ? "below" : "on", tie ? " at a tie" : "",
           odd ? "odd" : "even");
    mpfr_div_2si(d, d, q, MPFR_RNDN);
    double ulps = mpfr_get_d(d, MPFR_RNDZ);
    mpfr_clear(d);
    return ulps;
}

START_TEST(test_sampling_rate1)
{
    const char *fmts[] = { "binary16", "bfloat16", "e4m3", "e5m2", "e3m4" };
    const size_t n = 2048;
    emu_stats stats;
    emu_stats_init(&stats);
    test_rng g = test_rng_make(0x5a);
    mpfr_t ex;
    mpfr_init2(ex, 600);
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
        const emu_format *f = test_format(fmts[k]);
        emu_tensor a, b, y, e;
        make(&a, f, n, "a", EMU_ROLE_OTHER);
        make(&b, f, n, "b", EMU_ROLE_OTHER);
        make(&e, f, n, "e", EMU_ROLE_OTHER);
        make(&y, f, n, "y", EMU_ROLE_OTHER);
        for (size_t i = 0; i < n; i++) {
            a.data[i] = (float)tame_value(&g, f, false);
            b.data[i] = (float)tame_value(&g, f, false);
            e.data[i] = (float)tame_value(&g, f, true);
        }
        unsigned ties[EMU_RS + 1] = { 0 };
        for (int m = 0; m <= EMU_RS; m++) {
            for (int op = 0; op < S_COUNT; op++) {
                emu_ctx ctx;
                emu_ctx_init(&ctx, 3);
                emu_rounding rnd = test_rne;
                ctx.stats = &stats;
                ctx.measure = EMU_MEASURE_ALL;
                ctx.ref_rate = 1.0;
                rnd.mode = (emu_rnd)m;
                char site[EMU_NAME_MAX + 32];
                snprintf(site, sizeof site, "%s.%d.%d", f->name, m, op);
                ck_assert_int_eq(run((s_op)op, &ctx, site, &y,
                                     op == S_EXP ? &e : &a, &b, &rnd), 0);
                /* Expected samples: finite outputs of finite exact values;
                 * each one's side of the exact value checked, and the
                 * magnitudes summed as the choke point sums its samples. */
                uint64_t want = 0;
                double sum = 0.0, max = 0.0;
                for (size_t i = 0; i < n; i++) {
                    exact_of((s_op)op, ex, a.data[i], b.data[i], e.data[i]);
                    if (!isfinite(y.data[i]) || !mpfr_number_p(ex))
                        continue;
                    want++;
                    double u = check_side(f, (emu_rnd)m, site, i, y.data[i],
                                          ex, &ties[m]);
                    sum += u;
                    max = fmax(max, u);
                }
                const emu_site_stats *t = &find_site(&stats, site,
                                                     EMU_ROLE_OTHER)->total;
                ck_assert_msg(t->ref_samples == want, "%s: %llu samples, want "
                              "%llu", site, (unsigned long long)t->ref_samples,
                              (unsigned long long)want);
                ck_assert_msg(t->ulp_max == max && fabs(t->ulp_sum - sum) <= 1e-9 * sum,
                              "%s: sampled errors max %g sum %g ulp, the outputs' "
                              "%g and %g", site, t->ulp_max, t->ulp_sum, max, sum);
                /* Directed errors are < 1 ulp, but one of 1 - 2^-74 ulp
                 * reaches the statistics as the double 1.0 (ops_core.c
                 * converts |out - exact| to double to nearest). */
                const bool nearest = m == EMU_RNE || m == EMU_RNA;
                ck_assert_msg(nearest ? t->ulp_max <= 0.5 : t->ulp_max <= 1.0,
                              "%s (mode %s): max error %g ulp", site,
                              emu_rnd_name((emu_rnd)m), t->ulp_max);
                uint64_t sum_u = 0, sum_r = 0;
                for (int j = 0; j < EMU_ULPERR_BINS; j++) {
                    sum_u += t->ulp_hist[j];
                    if (j > (nearest ? 1 : 2))
                        ck_assert_uint_eq(t->ulp_hist[j], 0);
                }
                for (int j = 0; j < EMU_RELERR_BINS; j++)
                    sum_r += t->rel_hist[j];
                ck_assert_uint_eq(sum_u, t->ref_samples);
                ck_assert_uint_eq(sum_r, t->ref_samples);
                ck_assert_uint_eq(t->dot_samples, 0);
            }
        }
        /* The nearest modes differ only at ties: they must have been met. */
        ck_assert_msg(ties[EMU_RNE] > 0 && ties[EMU_RNA] > 0, "%s: no ties "
                      "(%u under rne, %u under rna)", f->name, ties[EMU_RNE],
                      ties[EMU_RNA]);
        emu_tensor_free(&a);
        emu_tensor_free(&b);
        emu_tensor_free(&e);
        emu_tensor_free(&y);
    }
    mpfr_clear(ex);
    emu_stats_free(&stats);
}
END_TEST

/* An op that lies: its pre-rounding values are 3 ulps off the exact value
 * its reference gives.  The sampling must see 3 ulps. */
typedef struct liar {
    const float *x;
} liar;

static int liar_ref(const void *op, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    mpfr_set_d(exact, ((const liar *)op)->x[i], MPFR_RNDN);
    return 0;
}

static int zero_ref(const void *op, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)op;
    (void)i;
    (void)src;
    mpfr_set_zero(exact, 1);
    return 0;
}

START_TEST(test_sampling_catches_errors)
{
    const emu_format *h = test_format("binary16");
    const size_t n = 64;
    emu_tensor x, y;
    make(&x, h, n, "x", EMU_ROLE_OTHER);
    make(&y, h, n, "y", EMU_ROLE_OTHER);
    double *hi = malloc(n * sizeof *hi);
    for (size_t i = 0; i < n; i++) {
        x.data[i] = (float)(1.0 + (double)i / 64.0);
        hi[i] = x.data[i] + 3 * 0x1p-10; /* 3 ulps of binary16 in [1, 2) */
    }
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 4);
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    liar op = { x.data };
    emu_op_out o = { .site = "liar", .kind = "test", .out = &y, .hi = hi,
                     .op = &op, .ref = liar_ref, .rnd = &test_rne };
    ck_assert_int_eq(emu_commit(&ctx, &o), 0);
    const emu_site_stats *t = &find_site(&stats, "liar", EMU_ROLE_OTHER)->total;
    ck_assert_uint_eq(t->ref_samples, n);
    ck_assert_double_eq_tol(t->ulp_max, 3.0, 1e-12);
    ck_assert_double_eq_tol(t->ulp_sum, 3.0 * n, 1e-9);
    ck_assert_uint_eq(t->ulp_hist[emu_ulperr_bin(3.0)], n);
    ck_assert_uint_eq(t->inexact, 0); /* hi was a binary16 value */

    /* No reference: nothing sampled; measuring off: no site at all. */
    o.site = "noref";
    o.ref = NULL;
    ck_assert_int_eq(emu_commit(&ctx, &o), 0);
    ck_assert_uint_eq(
        find_site(&stats, "noref", EMU_ROLE_OTHER)->total.ref_samples, 0);
    size_t sites = stats.count;
    ctx.measure = 0;
    o.site = "unmeasured";
    ck_assert_int_eq(emu_commit(&ctx, &o), 0);
    ck_assert_uint_eq(stats.count, sites);
    ck_assert_uint_eq(ctx.op_index, 3);
    /* The rounding has no context default: without one the commit fails,
     * measuring or not, and the op index stays. */
    o.rnd = NULL;
    ck_assert_int_eq(emu_commit(&ctx, &o), -1);
    ck_assert_ptr_nonnull(strstr(ctx.err.message, "no rounding"));
    ctx.measure = EMU_MEASURE_ALL;
    o.site = "liar";
    ck_assert_int_eq(emu_commit(&ctx, &o), -1);
    ck_assert_uint_eq(ctx.op_index, 3);

    emu_tensor_free(&x);
    emu_tensor_free(&y);
    free(hi);
    emu_stats_free(&stats);
}
END_TEST

/* stats.c: an exact value of 0 with a non-zero output (an accumulator's
 * cancellation) has an infinite relative error, which belongs in the last
 * relative-error bin ("everything above"). */
START_TEST(test_core_relerr_of_exact_zero)
{
    const emu_format *h = test_format("binary16");
    emu_tensor y;
    make(&y, h, 1, "y", EMU_ROLE_OTHER);
    double hi = 0.25;
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 4);
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    emu_op_out o = { .site = "cancel", .kind = "test", .out = &y, .hi = &hi,
                     .op = NULL, .ref = zero_ref, .rnd = &test_rne };
    ck_assert_int_eq(emu_commit(&ctx, &o), 0);
    const emu_site_stats *t =
        &find_site(&stats, "cancel", EMU_ROLE_OTHER)->total;
    const uint64_t samples = t->ref_samples;
    const uint64_t last = t->rel_hist[EMU_RELERR_BINS - 1];
    emu_tensor_free(&y);
    emu_stats_free(&stats);
    ck_assert_msg(emu_relerr_bin(INFINITY) == EMU_RELERR_BINS - 1,
                  "stats.c: emu_relerr_bin(inf) = %d, want %d (frexp leaves "
                  "the exponent unspecified for inf)", emu_relerr_bin(INFINITY),
                  EMU_RELERR_BINS - 1);
    ck_assert_uint_eq(samples, 1);
    ck_assert_uint_eq(last, 1);
}
END_TEST

/* stats.c: a site name as long as the name field or longer is stored
 * truncated but looked up whole, so every op adds a new site. */
START_TEST(test_core_long_site_names)
{
    char name[100];
    memset(name, 's', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    emu_stats stats;
    emu_stats_init(&stats);
    emu_stats_site(&stats, name, "add", EMU_ROLE_OTHER, NULL);
    emu_stats_site(&stats, name, "add", EMU_ROLE_OTHER, NULL);
    const size_t count = stats.count;
    emu_stats_free(&stats);
    ck_assert_msg(count == 1, "stats.c: a %zu-character site name made %zu "
                  "sites", strlen(name), count);
}
END_TEST

START_TEST(test_sampling_rate_partial)
{
    const emu_format *f = test_format("bfloat16");
    const size_t n = 20000;
    emu_tensor a, b, y;
    make(&a, f, n, "a", EMU_ROLE_OTHER);
    make(&b, f, n, "b", EMU_ROLE_OTHER);
    make(&y, f, n, "y", EMU_ROLE_OTHER);
    for (size_t i = 0; i < n; i++) {
        a.data[i] = (float)(1.0 + (double)(i % 128) / 128.0);
        b.data[i] = (float)ldexp(1.0, -(int)(i % 20));
    }
    uint64_t samples[3];
    for (int run = 0; run < 3; run++) {
        emu_stats stats;
        emu_stats_init(&stats);
        emu_ctx ctx;
        emu_ctx_init(&ctx, run == 2 ? 99 : 42);
        ctx.stats = &stats;
        ctx.measure = EMU_MEASURE_ALL;
        ctx.ref_rate = 0.25;
        ck_assert_int_eq(emu_t_add(&ctx, "p", &y, &a, &b, &test_rne), 0);
        samples[run] = stats.sites[0].total.ref_samples;
        emu_stats_free(&stats);
    }
    /* binomial(20000, 1/4): mean 5000, sd 61 */
    ck_assert_msg(samples[0] > 4700 && samples[0] < 5300, "%llu samples",
                  (unsigned long long)samples[0]);
    ck_assert_uint_eq(samples[0], samples[1]); /* deterministic */
    ck_assert_uint_ne(samples[0], samples[2]); /* another seed, other picks */
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&y);
}
END_TEST

/* ---- the observer -------------------------------------------------------- */

START_TEST(test_observer)
{
    const emu_format *h = test_format("binary16");
    const emu_format *b32 = test_format("binary32");
    const size_t n = 40;
    emu_tensor a, b, y, w;
    make(&a, b32, n, "a", EMU_ROLE_OTHER);
    make(&b, b32, n, "b", EMU_ROLE_OTHER);
    make(&y, h, n, "y", EMU_ROLE_OTHER);
    make(&w, b32, n, "w", EMU_ROLE_MASTER);
    test_rng g = test_rng_make(0x0b5);
    for (size_t i = 0; i < n; i++) {
        a.data[i] = (float)ldexp((double)test_below(&g, 1u << 24),
                                 -(int)test_below(&g, 30));
        b.data[i] = -(float)ldexp((double)test_below(&g, 1u << 24),
                                  -(int)test_below(&g, 30));
    }
    obs_log log = { 0 };
    emu_ctx ctx;
    emu_ctx_init(&ctx, 5); /* no stats: the observer still sees every op */
    ctx.observer = observe;
    ctx.observer_user = &log;
    ctx.op_index = 100;
    ck_assert_uint_eq(emu_ctx_stream(&ctx), 100);
    ck_assert_int_eq(emu_t_add(&ctx, "fc1.add", &y, &a, &b, &test_rne), 0);
    ck_assert_int_eq(emu_t_cast(&ctx, "fc1.cast", &w, &a, &test_rne), 0);
    ck_assert_int_eq(emu_t_unary(&ctx, NULL, &y, &a, EMU_UNARY_RELU, 0, 0,
                                 &test_rne), 0);
    /* same shape */
    ck_assert_int_eq(emu_t_add(&ctx, "bad", &y, &a, &w, &test_rne), 0);
    /* no event */
    ck_assert_int_eq(emu_t_mul(&ctx, "bad", &y, &a, NULL, &test_rne), -1);
    ck_assert_int_eq(log.calls, 4);
    const char *sites[] = { "fc1.add", "fc1.cast", "relu", "bad" };
    const char *kinds[] = { "add", "cast", "relu", "add" };
    for (int k = 0; k < 4; k++) {
        ck_assert_uint_eq(log.op_index[k], 100 + (uint64_t)k);
        ck_assert_str_eq(log.site[k], sites[k]);
        ck_assert_str_eq(log.kind[k], kinds[k]);
        ck_assert_uint_eq(log.counts[k].n, n);
    }
    ck_assert_ptr_eq(log.out[0], &y);
    ck_assert_ptr_eq(log.out[1], &w);
    ck_assert_uint_eq(ctx.op_index, 104);
    /* add: hi + lo is the exact sum; cast: hi is the input */
    MPFR_DECL_INIT(e, 256);
    MPFR_DECL_INIT(s, 256);
    for (size_t i = 0; i < n; i++) {
        mpfr_set_d(e, a.data[i], MPFR_RNDN);
        mpfr_add_d(e, e, b.data[i], MPFR_RNDN);
        mpfr_set_d(s, log.hi[0][i], MPFR_RNDN);
        mpfr_add_d(s, s, log.lo[0][i], MPFR_RNDN);
        ck_assert_msg(mpfr_equal_p(e, s), "element %zu: hi + lo inexact", i);
        ck_assert(log.hi[0][i] + log.lo[0][i] == log.hi[0][i]); /* normalised */
        ck_assert(log.hi[1][i] == a.data[i]);
    }
    ck_assert(!log.had_lo[1]);
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&y);
    emu_tensor_free(&w);
}
END_TEST

/* ---- stochastic rounding streams ----------------------------------------- */

START_TEST(test_sr_streams)
{
    const emu_format *b32 = test_format("binary32");
    const emu_format *h = test_format("binary16");
    const size_t n = 4096;
    emu_tensor a, b, y1, y2;
    make(&a, b32, n, "a", EMU_ROLE_OTHER);
    make(&b, b32, n, "b", EMU_ROLE_OTHER);
    make(&y1, h, n, "y1", EMU_ROLE_OTHER);
    make(&y2, h, n, "y2", EMU_ROLE_OTHER);
    for (size_t i = 0; i < n; i++) {
        a.data[i] = 1.0f + 0x1p-12f;   /* a quarter of a binary16 ulp up */
        b.data[i] = (float)ldexp(1.0, -30 - (int)(i % 8)); /* lo for add */
    }
    const emu_rounding modes[] = { { .mode = EMU_RS, .sr_bits = 64 },
                                   { .mode = EMU_RS_BITS, .sr_bits = 7 } };
    for (int m = 0; m < 2; m++) {
        for (int op = 0; op < 2; op++) {
            /* op 0: add (the hi + lo path); op 1: mul by 1 (the array path) */
            emu_ctx c1, c2;
            emu_ctx_init(&c1, 1234);
            emu_ctx_init(&c2, 1234);
            const emu_rounding *rnd = &modes[m];
            obs_log log = { 0 };
            c1.observer = observe;
            c1.observer_user = &log;
            c2.threads = 2; /* results never depend on threads */
            emu_tensor ones;
            make(&ones, b32, n, "ones", EMU_ROLE_OTHER);
            for (size_t i = 0; i < n; i++)
                ones.data[i] = 1.0f;
            const emu_tensor *second = op ? &ones : &b;
            int (*fn)(emu_ctx *, const char *, emu_tensor *, const emu_tensor *,
                      const emu_tensor *, const emu_rounding *) =
                op ? emu_t_mul : emu_t_add;
            ck_assert_int_eq(fn(&c1, "s", &y1, &a, second, rnd), 0);
            ck_assert_int_eq(fn(&c2, "s", &y2, &a, second, rnd), 0);
            ck_assert(memcmp(y1.data, y2.data, n * sizeof *y1.data) == 0);
            /* element i: word i of stream op_index */
            size_t up = 0;
            for (size_t i = 0; i < 64; i++) {
                double want = emu_round2_word(
                    h, log.hi[0][i], log.lo[0][i], rnd,
                    emu_random64(c1.seed, log.op_index[0], i), NULL);
                ck_assert_msg(test_same(want, y1.data[i]), "element %zu", i);
            }
            for (size_t i = 0; i < n; i++)
                up += y1.data[i] > 1.0f;
            /* P(up) = 1/4 (+ 2^-18 from b): 1024 +- 4 sd (27) */
            ck_assert_msg(up > 1024 - 110 && up < 1024 + 110, "%zu up", up);
            /* the next op (stream 1) draws other words */
            ck_assert_int_eq(fn(&c2, "s", &y2, &a, second, rnd), 0);
            size_t differ = 0;
            for (size_t i = 0; i < n; i++)
                differ += y1.data[i] != y2.data[i];
            ck_assert_msg(differ > n / 5, "stream 1 vs 0: %zu differ", differ);
            /* another seed, same op index */
            emu_ctx c3;
            emu_ctx_init(&c3, 4321);
            ck_assert_int_eq(fn(&c3, "s", &y2, &a, second, rnd), 0);
            differ = 0;
            for (size_t i = 0; i < n; i++)
                differ += y1.data[i] != y2.data[i];
            ck_assert_msg(differ > n / 5, "seed 4321 vs 1234: %zu differ",
                          differ);
            emu_tensor_free(&ones);
        }
    }
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&y1);
    emu_tensor_free(&y2);
}
END_TEST

/* ---- exports ------------------------------------------------------------- */

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *s = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(fread(s, 1, (size_t)len, fp), (size_t)len);
    s[len] = '\0';
    fclose(fp);
    return s;
}

/* Splits one CSV line (RFC 4180 quoting) into fields; returns the count.
 * The fields are copied into out (at most max, each < 128 characters). */
static int csv_fields(const char *line, char out[][128], int max)
{
    int n = 0;
    const char *p = line;
    for (;;) {
        char *f = n < max ? out[n] : NULL;
        size_t k = 0;
        if (*p == '"') {
            for (p++;; p++) {
                ck_assert_msg(*p != '\0', "unterminated quote: %s", line);
                if (*p == '"') {
                    if (p[1] != '"')
                        break;
                    p++;
                }
                if (f && k < 127)
                    f[k++] = *p;
            }
            p++;
        } else {
            for (; *p && *p != ',' && *p != '\n'; p++)
                if (f && k < 127)
                    f[k++] = *p;
        }
        if (f)
            f[k] = '\0';
        n++;
        if (*p != ',')
            break;
        p++;
    }
    return n;
}

/* The lines of s, split in place. */
static int lines_of(char *s, char **lines, int max)
{
    int n = 0;
    for (char *p = s; *p && n < max;) {
        lines[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    return n;
}

/* A small JSON parser: true if the text is one well-formed value;
 * *sites counts the elements of the top-level "sites" array. */
typedef struct jp {
    const char *p;
    int depth;
    long *sites;
} jp;

static void jws(jp *j)
{
    while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
        j->p++;
}

static bool jvalue(jp *j, bool count_array);

static bool jstring(jp *j, char *copy, size_t size)
{
    size_t k = 0;
    if (*j->p != '"')
        return false;
    for (j->p++; *j->p != '"'; j->p++) {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20 || c == '\0')
            return false;
        if (c == '\\') {
            j->p++;
            if (*j->p == 'u') {
                for (int d = 1; d <= 4; d++)
                    if (!strchr("0123456789abcdefABCDEF", j->p[d]) || !j->p[d])
                        return false;
                j->p += 4;
            } else if (!strchr("\"\\/bfnrt", *j->p) || !*j->p) {
                return false;
            }
        }
        if (copy && k + 1 < size)
            copy[k++] = (char)c;
    }
    if (copy)
        copy[k] = '\0';
    j->p++;
    return true;
}

static bool jnumber(jp *j)
{
    const char *s = j->p;
    if (*j->p == '-')
        j->p++;
    if (*j->p == '0')
        j->p++;
    else if (*j->p >= '1' && *j->p <= '9')
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    else
        return false;
    if (*j->p == '.') {
        j->p++;
        if (!(*j->p >= '0' && *j->p <= '9'))
            return false;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (*j->p == 'e' || *j->p == 'E') {
        j->p++;
        if (*j->p == '+' || *j->p == '-')
            j->p++;
        if (!(*j->p >= '0' && *j->p <= '9'))
            return false;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    return j->p > s;
}

static bool jvalue(jp *j, bool count_array)
{
    jws(j);
    switch (*j->p) {
    case '{': {
        j->p++;
        j->depth++;
        jws(j);
        if (*j->p == '}') {
            j->p++;
            j->depth--;
            return true;
        }
        for (;;) {
            char key[64];
            jws(j);
            if (!jstring(j, key, sizeof key))
                return false;
            jws(j);
            if (*j->p++ != ':')
                return false;
            if (!jvalue(j, j->depth == 1 && !strcmp(key, "sites")))
                return false;
            jws(j);
            if (*j->p == ',') {
                j->p++;
                continue;
            }
            if (*j->p++ != '}')
                return false;
            j->depth--;
            return true;
        }
    }
    case '[': {
        j->p++;
        j->depth++;
        jws(j);
        if (*j->p == ']') {
            j->p++;
            j->depth--;
            return true;
        }
        for (;;) {
            if (!jvalue(j, false))
                return false;
            if (count_array)
                (*j->sites)++;
            jws(j);
            if (*j->p == ',') {
                j->p++;
                continue;
            }
            if (*j->p++ != ']')
                return false;
            j->depth--;
            return true;
        }
    }
    case '"':
        return jstring(j, NULL, 0);
    case 't':
        return !strncmp(j->p, "true", 4) ? (j->p += 4, true) : false;
    case 'f':
        return !strncmp(j->p, "false", 5) ? (j->p += 5, true) : false;
    case 'n':
        return !strncmp(j->p, "null", 4) ? (j->p += 4, true) : false;
    default:
        return jnumber(j);
    }
}

static bool json_ok(const char *text, long *sites)
{
    jp j = { text, 0, sites };
    *sites = 0;
    if (!jvalue(&j, false))
        return false;
    jws(&j);
    return *j.p == '\0';
}

/* Files in dir (names joined by spaces, sorted as readdir gives them). */
static int count_files(const char *dir, const char *containing)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strstr(e->d_name, containing))
            n++;
    closedir(d);
    return n;
}

START_TEST(test_exports)
{
    char dir[] = "/tmp/emu_choke_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const emu_format *h = test_format("binary16");
    const size_t n = 100;
    emu_tensor a, b, y;
    make(&a, h, n, "a", EMU_ROLE_OTHER);
    make(&b, h, n, "b", EMU_ROLE_OTHER);
    make(&y, h, n, "y", EMU_ROLE_ACT_GRAD);
    for (size_t i = 0; i < n; i++) {
        a.data[i] = (float)((double)i - 50.0) * 0.375f;
        b.data[i] = i % 7 ? 0.3125f : INFINITY;
    }
    b.data[3] = -INFINITY;
    a.data[3] = INFINITY; /* a NaN produced */
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 6);
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 0.5;
    const char *odd_name = "fc1,\"odd\" name";
    ck_assert_int_eq(emu_t_add(&ctx, "fc1.add", &y, &a, &b, &test_rne), 0);
    ck_assert_int_eq(emu_t_mul(&ctx, odd_name, &y, &a, &b, &test_rne), 0);
    ck_assert_int_eq(emu_t_unary(&ctx, "act", &y, &a, EMU_UNARY_TANH, 0, 0,
                                 &test_rne), 0);
    y.role = EMU_ROLE_WEIGHT; /* the same site name, another role: a new row */
    ck_assert_int_eq(emu_t_add(&ctx, "fc1.add", &y, &a, &b, &test_rne), 0);
    ck_assert_uint_eq(stats.count, 4);

    char path[256], hpath[256], jpath[256];
    emu_error err;
    snprintf(path, sizeof path, "%s/sites.csv", dir);
    snprintf(hpath, sizeof hpath, "%s/hist.csv", dir);
    snprintf(jpath, sizeof jpath, "%s/stats.json", dir);
    ck_assert_int_eq(emu_stats_write_csv(&stats, path, &err), 0);
    ck_assert_int_eq(emu_stats_write_hist_csv(&stats, hpath, &err), 0);
    ck_assert_int_eq(emu_stats_write_json(&stats, jpath, &err), 0);
    ck_assert_int_eq(count_files(dir, ""), 3); /* no temporaries left */

    /* sites CSV: a header and one row per site, all of the same width */
    char *csv = slurp(path);
    char *lines[64];
    int nl = lines_of(csv, lines, 64);
    ck_assert_int_eq(nl, 1 + 4);
    static char f[64][128];
    int width = csv_fields(lines[0], f, 64);
    ck_assert_int_ge(width, 20);
    ck_assert_str_eq(f[0], "site");
    int col_results = -1, col_nanp = -1;
    for (int c = 0; c < width; c++) {
        if (!strcmp(f[c], "results"))
            col_results = c;
        if (!strcmp(f[c], "nan_produced"))
            col_nanp = c;
    }
    ck_assert_int_ge(col_results, 0);
    ck_assert_int_ge(col_nanp, 0);
    for (int r = 1; r < nl; r++) {
        ck_assert_int_eq(csv_fields(lines[r], f, 64), width);
        ck_assert_str_eq(f[0], stats.sites[r - 1].name); /* quoting undone */
        ck_assert_str_eq(f[2], emu_role_name(stats.sites[r - 1].role));
        ck_assert_uint_eq(strtoull(f[col_results], NULL, 10), n);
    }
    csv_fields(lines[1], f, 64);
    ck_assert_str_eq(f[col_nanp], "1"); /* inf + -inf */
    free(csv);

    /* histogram CSV: non-zero bins, each site's counts add up to n */
    char *hcsv = slurp(hpath);
    char *hl[2048];
    int nh = lines_of(hcsv, hl, 2048);
    ck_assert_int_gt(nh, 8);
    ck_assert_str_eq(hl[0], "site,kind,role,format,which,bin,log2_lower,count");
    uint64_t total[4][2] = { { 0 } };
    for (int r = 1; r < nh; r++) {
        ck_assert_int_eq(csv_fields(hl[r], f, 64), 8);
        int site = -1;
        for (size_t k = 0; k < stats.count; k++)
            if (!strcmp(f[0], stats.sites[k].name) &&
                !strcmp(f[2], emu_role_name(stats.sites[k].role)))
                site = (int)k;
        ck_assert_int_ge(site, 0);
        int which = !strcmp(f[4], "rounded");
        ck_assert(which || !strcmp(f[4], "exact"));
        uint64_t c = strtoull(f[7], NULL, 10);
        ck_assert_uint_gt(c, 0);
        /* log2_lower is the bin label for binades, empty otherwise */
        ck_assert(f[6][0] == '\0'
                      ? !isdigit((unsigned char)f[5][strlen(f[5]) - 1])
                      : !strcmp(f[5], f[6]));
        total[site][which] += c;
    }
    for (int k = 0; k < 4; k++)
        ck_assert(total[k][0] == n && total[k][1] == n);
    free(hcsv);

    /* JSON: well-formed, one object per site, no bare nan/inf */
    char *json = slurp(jpath);
    long nsites;
    ck_assert_msg(json_ok(json, &nsites), "malformed JSON:\n%s", json);
    ck_assert_int_eq(nsites, 4);
    ck_assert_ptr_nonnull(strstr(json, "\"fc1,\\\"odd\\\" name\""));
    free(json);

    /* step rows: only the sites active in the step */
    y.role = EMU_ROLE_ACT_GRAD;
    emu_stats_begin_step(&stats, 7);
    FILE *tf = tmpfile();
    ck_assert_ptr_nonnull(tf);
    ck_assert_int_eq(emu_stats_write_step_rows(&stats, tf, true, NULL), 0);
    ck_assert_int_eq(emu_t_unary(&ctx, "act", &y, &a, EMU_UNARY_TANH, 0, 0,
                                 &test_rne), 0);
    ck_assert_int_eq(emu_stats_write_step_rows(&stats, tf, false, NULL), 0);
    rewind(tf);
    char line[4096];
    int rows = 0;
    ck_assert_ptr_nonnull(fgets(line, sizeof line, tf));
    ck_assert(!strncmp(line, "step,site,kind,role,format,", 27));
    while (fgets(line, sizeof line, tf)) {
        rows++;
        ck_assert_msg(!strncmp(line, "7,\"act\",\"tanh\",act_grad,", 24),
                      "%s", line);
    }
    ck_assert_int_eq(rows, 1);
    fclose(tf);
    const emu_site *act = find_site(&stats, "act", EMU_ROLE_ACT_GRAD);
    ck_assert_uint_eq(act->step.results, n);
    ck_assert_uint_eq(act->total.results, 2 * n);

    /* summary: a header and one line per site */
    tf = tmpfile();
    emu_stats_print_summary(&stats, tf);
    rewind(tf);
    rows = 0;
    while (fgets(line, sizeof line, tf))
        rows++;
    ck_assert_int_eq(rows, 1 + (int)stats.count);
    fclose(tf);

    /* atomic writes that fail leave nothing behind and say where */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/s.csv", dir);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(emu_stats_write_csv(&stats, bad, &err), -1);
    ck_assert_msg(strstr(err.where, "no/such/dir"), "where: %s", err.where);
    ck_assert_msg(strstr(err.message, "cannot write"), "%s", err.message);
    /* the rename fails (the target is a directory): the temporary goes */
    char sub[300];
    snprintf(sub, sizeof sub, "%s/target", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    ck_assert_int_eq(emu_stats_write_json(&stats, sub, &err), -1);
    ck_assert_int_eq(count_files(dir, "tmp"), 0);
    ck_assert_int_eq(count_files(dir, ""), 4); /* 3 files + target */
    /* overwriting an existing export works and leaves one file */
    ck_assert_int_eq(emu_stats_write_csv(&stats, path, &err), 0);
    ck_assert_int_eq(count_files(dir, ""), 4);
    char *again = slurp(path);
    ck_assert_int_eq(lines_of(again, lines, 64), 1 + 4);
    free(again);

    remove(path);
    remove(hpath);
    remove(jpath);
    rmdir(sub);
    rmdir(dir);
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&y);
    emu_stats_free(&stats);
}
END_TEST

/* The reading API (emu/stats.h): sites by (name, role), by name, by
 * index; counters by the CSV's column names, with the values the CSV
 * holds; histograms by the histogram CSV's names; whole run and step.
 * Unknown names, roles, spans and indices are refused. */
START_TEST(test_stats_api)
{
    char dir[] = "/tmp/emu_stats_api_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const emu_format *h = test_format("binary16");
    const size_t n = 64;
    emu_tensor a, y;
    make(&a, h, n, "a", EMU_ROLE_OTHER);
    make(&y, h, n, "y", EMU_ROLE_ACTIVATION);
    for (size_t i = 0; i < n; i++)
        a.data[i] = (float)ldexp(1.0 + (double)i / 64.0, (int)i / 4 - 20);
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 2);
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0;
    ck_assert_int_eq(emu_t_unary(&ctx, "sq", &y, &a, EMU_UNARY_SQUARE, 0, 0,
                                 &test_rne), 0);
    y.role = EMU_ROLE_WEIGHT; /* the same name, another role: another site */
    ck_assert_int_eq(emu_t_scale(&ctx, "sq", &y, 0x1p-10f, &a, &test_rne), 0);
    ck_assert_int_eq(emu_t_add(&ctx, "sum", &y, &a, &a, &test_rne), 0);

    /* sites */
    ck_assert_uint_eq(emu_stats_site_count(&stats), 3);
    ck_assert_ptr_eq(emu_stats_site_at(&stats, 0), &stats.sites[0]);
    ck_assert_ptr_eq(emu_stats_site_at(&stats, 2), &stats.sites[2]);
    ck_assert_ptr_null(emu_stats_site_at(&stats, 3));
    const emu_site *act = emu_stats_find(&stats, "sq", EMU_ROLE_ACTIVATION);
    const emu_site *wt = emu_stats_find(&stats, "sq", EMU_ROLE_WEIGHT);
    ck_assert_ptr_eq(act, &stats.sites[0]);
    ck_assert_ptr_eq(wt, &stats.sites[1]);
    ck_assert_ptr_eq(emu_stats_find_name(&stats, "sq"), act); /* the first */
    ck_assert_ptr_eq(emu_stats_find_name(&stats, "sum"), &stats.sites[2]);
    ck_assert_ptr_null(emu_stats_find(&stats, "sq", EMU_ROLE_MASTER));
    ck_assert_ptr_null(emu_stats_find(&stats, "sq", EMU_ROLE_COUNT));
    ck_assert_ptr_null(emu_stats_find(&stats, "sq2", EMU_ROLE_ACTIVATION));
    ck_assert_ptr_null(emu_stats_find_name(&stats, "s"));
    ck_assert_ptr_null(emu_stats_find_name(&stats, NULL));

    /* counters: the names are the CSV's columns, in order, and the values
     * are the CSV's */
    char path[256];
    emu_error err;
    snprintf(path, sizeof path, "%s/sites.csv", dir);
    ck_assert_int_eq(emu_stats_write_csv(&stats, path, &err), 0);
    char *csv = slurp(path);
    char *lines[8];
    ck_assert_int_eq(lines_of(csv, lines, 8), 4);
    static char f[64][128];
    int width = csv_fields(lines[0], f, 64);
    const size_t nc = emu_stats_counter_count();
    ck_assert_int_eq(width, 4 + (int)nc);
    ck_assert_str_eq(f[3], "format");
    for (size_t k = 0; k < nc; k++)
        ck_assert_str_eq(f[4 + k], emu_stats_counter_name(k));
    ck_assert_ptr_null(emu_stats_counter_name(nc));
    for (int r = 1; r < 4; r++) {
        ck_assert_int_eq(csv_fields(lines[r], f, 64), width);
        const emu_site *site = emu_stats_site_at(&stats, (size_t)r - 1);
        for (size_t k = 0; k < nc; k++) {
            double v = -1.0;
            ck_assert_int_eq(emu_stats_counter(site, EMU_SPAN_TOTAL,
                                               emu_stats_counter_name(k), &v),
                             0);
            char want[64], got[64];
            snprintf(want, sizeof want, "%.9g", strtod(f[4 + k], NULL));
            snprintf(got, sizeof got, "%.9g", v);
            ck_assert_msg(!strcmp(want, got), "site %d column %s: CSV %s, "
                          "API %s", r, emu_stats_counter_name(k), want, got);
        }
    }
    free(csv);
    double v = 0.0;
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_TOTAL, "results", &v), 0);
    ck_assert(v == (double)n);
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_TOTAL, "ulp_max", &v), 0);
    ck_assert(v == act->total.ulp_max && v > 0.0);
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_TOTAL, "inexact_rate", &v), 0);
    ck_assert(v == (double)act->total.inexact / (double)n);
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_TOTAL, "Results", &v), -1);
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_TOTAL, "", &v), -1);
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_TOTAL, "hist_exact", &v), -1);
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_COUNT, "results", &v), -1);
    ck_assert_int_eq(emu_stats_counter(NULL, EMU_SPAN_TOTAL, "results", &v), -1);

    /* histograms */
    uint64_t hist[EMU_HIST_BINS];
    ck_assert_int_eq(emu_stats_hist(act, EMU_SPAN_TOTAL, "exact", hist), 0);
    ck_assert_mem_eq(hist, act->total.hist_exact, sizeof hist);
    ck_assert_int_eq(emu_stats_hist(act, EMU_SPAN_TOTAL, "rounded", hist), 0);
    ck_assert_mem_eq(hist, act->total.hist_rounded, sizeof hist);
    ck_assert_int_eq(emu_stats_hist(act, EMU_SPAN_TOTAL, "scale", hist), 0);
    ck_assert_mem_eq(hist, act->total.hist_scale, sizeof hist);
    ck_assert_int_eq(emu_stats_hist(act, EMU_SPAN_TOTAL, "hist_exact", hist), -1);
    ck_assert_int_eq(emu_stats_hist(act, EMU_SPAN_COUNT, "exact", hist), -1);

    /* the current step against the whole run */
    emu_stats_begin_step(&stats, 5);
    y.role = EMU_ROLE_ACTIVATION;
    ck_assert_int_eq(emu_t_unary(&ctx, "sq", &y, &a, EMU_UNARY_SQUARE, 0, 0,
                                 &test_rne), 0);
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_STEP, "results", &v), 0);
    ck_assert(v == (double)n);
    ck_assert_int_eq(emu_stats_counter(act, EMU_SPAN_TOTAL, "results", &v), 0);
    ck_assert(v == (double)(2 * n));
    ck_assert_int_eq(emu_stats_counter(wt, EMU_SPAN_STEP, "results", &v), 0);
    ck_assert(v == 0.0);
    ck_assert_int_eq(emu_stats_hist(act, EMU_SPAN_STEP, "rounded", hist), 0);
    uint64_t sum = 0;
    for (int b = 0; b < EMU_HIST_BINS; b++) {
        ck_assert(2 * hist[b] == act->total.hist_rounded[b]);
        sum += hist[b];
    }
    ck_assert_uint_eq(sum, n);

    remove(path);
    rmdir(dir);
    emu_tensor_free(&a);
    emu_tensor_free(&y);
    emu_stats_free(&stats);
}
END_TEST

/* ---- chunked producers against whole arrays ------------------------------ */

/* An op whose values are given arrays: the producers read them back a
 * chunk at a time, so every commit below sees the same values. */
typedef struct arr_op {
    const double *hi, *lo;   /* lo may be NULL                           */
    const float *f;          /* the same values as binary32 (fill32)     */
    const double *add;       /* an accumulation's addends (fill_add)      */
    bool lo_per_chunk;       /* fill reports all-zero chunks as no lo     */
    size_t calls, next;      /* producer calls, and the i0 expected next  */
} arr_op;

static int arr_fill(const void *vop, size_t i0, size_t m, double *hi,
                    double *lo)
{
    arr_op *op = (arr_op *)vop;
    ck_assert_uint_eq(i0, op->next);
    ck_assert_uint_le(m, EMU_COMMIT_CHUNK);
    ck_assert_uint_gt(m, 0);
    op->next = i0 + m;
    op->calls++;
    memcpy(hi, op->hi + i0, m * sizeof *hi);
    if (!op->lo)
        return 0;
    bool any = false;
    for (size_t j = 0; j < m; j++)
        any |= op->lo[i0 + j] != 0.0;
    if (op->lo_per_chunk && !any)
        return 0;
    memcpy(lo, op->lo + i0, m * sizeof *lo);
    return 1;
}

/* fill, and the chunk's addends for the swamping count */
static int arr_fill_add(const void *vop, size_t i0, size_t m, double *hi,
                        double *lo, double *add)
{
    const arr_op *op = vop;
    memcpy(add, op->add + i0, m * sizeof *add);
    return arr_fill(vop, i0, m, hi, lo);
}

static void arr_fill32(const void *vop, size_t i0, size_t m, float *v)
{
    arr_op *op = (arr_op *)vop;
    ck_assert_uint_eq(i0, op->next);
    op->next = i0 + m;
    op->calls++;
    memcpy(v, op->f + i0, m * sizeof *v);
}

/* The exact value hi + lo from MPFR; as a dot product, with sources a
 * relative 2^-20 away, so that the error split is exercised too. */
static int arr_ref(const void *vop, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    const arr_op *op = vop;
    if (isnan(op->hi[i]))
        return -1;
    mpfr_set_d(exact, op->hi[i], MPFR_RNDN);
    if (op->lo)
        mpfr_add_d(exact, exact, op->lo[i], MPFR_RNDN);
    if (i % 2)
        return 0;
    mpfr_mul_d(src, exact, 1.0 + 0x1p-20, MPFR_RNDN);
    return 1;
}

static bool arr_had_nan(const void *vop, size_t i)
{
    (void)vop;
    return i % 3 == 0;
}

/* Awkward values for chunk tests: a random mix of binary32 values, wider
 * doubles, subnormals of both the carrier and the small formats, values
 * beyond every format's range, zeros, infinities and NaNs; low parts in
 * some chunks only (the second chunk has none), some exactly at ties. */
static void awkward_values(double *hi, double *lo, float *f, size_t n,
                           test_rng *g)
{
    static const double specials[] = {
        0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1e300, -1e300, 70000.0,
        65520.0, 0x1p-149, -0x1p-150, 0x1p-24, 0x1p-25, 0x1.8p-25, 3e38,
        0x1p-1030, 1.0, 0x1.002p0, 0x1.0000008p0
    };
    const size_t ns = sizeof specials / sizeof *specials;
    for (size_t i = 0; i < n; i++) {
        const uint64_t r = test_next(g);
        double x;
        switch (r % 8) {
        case 0: x = specials[(r >> 8) % ns]; break;
        case 1: x = ldexp((double)(r >> 11) * 0x1p-53, (int)((r >> 3) % 300) - 170); break;
        case 2: x = -ldexp(1.0 + (double)(r >> 40) * 0x1p-24, (int)((r >> 3) % 40) - 30); break;
        default: {
            uint32_t w = (uint32_t)(r >> 16);
            float v;
            memcpy(&v, &w, sizeof v);
            x = v;
        }
        }
        hi[i] = x;
        const bool chunk_lo = (i / EMU_COMMIT_CHUNK) % 2 == 0;
        lo[i] = chunk_lo && isfinite(x) && x != 0.0 && (r >> 60) < 8
              ? ldexp(x, -60 + (int)((r >> 56) % 4)) * ((r >> 55) & 1 ? 1 : -1)
              : 0.0;
        if (lo[i] != 0.0 && fabs(x) < 0x1p-960)
            lo[i] = 0.0; /* a pair stays exact: lo at most ulp(hi) / 2 */
        f[i] = (float)x;
    }
}

/* Every counter, histogram and sampled error of two sites is equal. */
static void same_stats(const emu_site_stats *a, const emu_site_stats *b,
                       const char *what)
{
    ck_assert_msg(a->results == b->results && a->inexact == b->inexact &&
                  a->underflow == b->underflow && a->to_zero == b->to_zero &&
                  a->subnormal == b->subnormal && a->overflow == b->overflow &&
                  a->nan == b->nan && a->nan_produced == b->nan_produced &&
                  a->adds == b->adds && a->absorbed == b->absorbed,
                  "%s: counters differ (results %llu/%llu inexact %llu/%llu "
                  "nan %llu/%llu produced %llu/%llu)", what,
                  (unsigned long long)a->results, (unsigned long long)b->results,
                  (unsigned long long)a->inexact, (unsigned long long)b->inexact,
                  (unsigned long long)a->nan, (unsigned long long)b->nan,
                  (unsigned long long)a->nan_produced,
                  (unsigned long long)b->nan_produced);
    ck_assert_msg(!memcmp(a->lost_bits, b->lost_bits, sizeof a->lost_bits),
                  "%s: lost bits differ", what);
    ck_assert_msg(!memcmp(a->hist_exact, b->hist_exact, sizeof a->hist_exact),
                  "%s: exact histograms differ", what);
    ck_assert_msg(!memcmp(a->hist_rounded, b->hist_rounded,
                          sizeof a->hist_rounded),
                  "%s: rounded histograms differ", what);
    ck_assert_msg(a->ref_samples == b->ref_samples &&
                  a->dot_samples == b->dot_samples,
                  "%s: samples %llu/%llu", what,
                  (unsigned long long)a->ref_samples,
                  (unsigned long long)b->ref_samples);
    const double da[] = { a->ulp_sum, a->ulp_max, a->rel_sum, a->rel_max,
                          a->quant_sum, a->quant_max, a->accum_sum,
                          a->accum_max, a->round_sum, a->round_max };
    const double db[] = { b->ulp_sum, b->ulp_max, b->rel_sum, b->rel_max,
                          b->quant_sum, b->quant_max, b->accum_sum,
                          b->accum_max, b->round_sum, b->round_max };
    for (size_t k = 0; k < sizeof da / sizeof *da; k++)
        ck_assert_msg(test_same(da[k], db[k]), "%s: error sum %zu: %a vs %a",
                      what, k, da[k], db[k]);
    ck_assert_msg(!memcmp(a->ulp_hist, b->ulp_hist, sizeof a->ulp_hist) &&
                  !memcmp(a->rel_hist, b->rel_hist, sizeof a->rel_hist),
                  "%s: error histograms differ", what);
}

/* One commit of n outputs through `how` (0 arrays, 1 fill, 2 fill32, 3
 * fill_add: addend from the producer), with or without early stores and
 * an observer; returns the site's totals and the results in y. */
static emu_site_stats commit_how(const emu_format *fmt, const emu_rounding *r,
                                 arr_op *op, const float *acc_old,
                                 const double *addend, size_t n, int how,
                                 bool early, bool observer, double rate,
                                 emu_tensor *y, obs_log *log)
{
    /* Tensors are never empty; the choke point must still take n = 0. */
    make(y, fmt, n ? n : 1, "y", EMU_ROLE_OTHER);
    y->n = n;
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 77);
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = rate;
    if (observer) {
        ctx.observer = observe;
        ctx.observer_user = log;
    }
    op->calls = op->next = 0;
    emu_op_out o = { .site = "chunks", .kind = "test", .out = y, .op = op,
                     .ref = arr_ref, .inputs_had_nan = arr_had_nan, .rnd = r,
                     .acc_old = acc_old, .addend = addend,
                     .store_early = early };
    if (how == 0) {
        o.hi = op->hi;
        o.lo = op->lo;
    } else if (how == 1) {
        o.fill = arr_fill;
    } else if (how == 3) {
        o.fill_add = arr_fill_add;
        o.addend = NULL;
        op->add = addend;
    } else {
        o.fill32 = arr_fill32;
    }
    ck_assert_int_eq(emu_commit(&ctx, &o), 0);
    ck_assert_uint_eq(ctx.op_index, 1);
    if (how)
        ck_assert_uint_eq(op->next, n);
    emu_site_stats t = { 0 };
    if (stats.count)
        t = find_site(&stats, "chunks", EMU_ROLE_OTHER)->total;
    emu_stats_free(&stats);
    return t;
}

START_TEST(test_chunked_equals_arrays)
{
    const size_t C = EMU_COMMIT_CHUNK;
    const size_t sizes[] = { 0, 1, C - 1, C, C + 1, 5 * C + 77 };
    const struct { const char *fmt; emu_rnd mode; } cases[] = {
        { "binary16", EMU_RNE }, { "binary16", EMU_RS }, { "bfloat16", EMU_RZ },
        { "e5m2", EMU_RNE }, { "e4m3", EMU_RNA }, { "binary32", EMU_RNE },
        { "binary32", EMU_RS }, { "e2m1", EMU_RO },
    };
    test_rng g = test_rng_make(12);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t n = sizes[si], na = n ? n : 1;
        double *hi = malloc(na * sizeof *hi), *lo = malloc(na * sizeof *lo);
        double *hi32 = malloc(na * sizeof *hi32), *addend = malloc(na * sizeof *addend);
        float *f = malloc(na * sizeof *f), *acc_old = malloc(na * sizeof *acc_old);
        awkward_values(hi, lo, f, n, &g);
        for (size_t i = 0; i < n; i++) {
            hi32[i] = f[i]; /* the binary32 values, as the array path sees them */
            acc_old[i] = (float)ldexp(1.0 + (double)(test_next(&g) >> 40) * 0x1p-24,
                                      (int)(test_next(&g) % 40) - 20);
            addend[i] = i % 5 == 0 ? 0.0 : hi[i] - acc_old[i];
        }
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int with_lo = 0; with_lo < 2; with_lo++)
        for (int rate = 0; rate < 2; rate++) {
            const emu_format *fmt = test_format(cases[ci].fmt);
            emu_rounding r = { .mode = cases[ci].mode, .sr_bits = 64 };
            const double ref_rate = rate ? 1.0 : 0.3;
            char what[160];
            snprintf(what, sizeof what, "n %zu, %s, mode %d, lo %d, rate %g", n,
                     cases[ci].fmt, (int)cases[ci].mode, with_lo, ref_rate);
            arr_op op = { .hi = hi, .lo = with_lo ? lo : NULL, .f = f };
            emu_tensor y0, y1;
            obs_log log = { 0 };
            const emu_site_stats want = commit_how(
                fmt, &r, &op, acc_old, addend, n, 0, false, false, ref_rate,
                &y0, &log);
            /* fill and fill_add: with and without early stores, low
             * parts whole or reported per chunk, through an observer or
             * not */
            for (int v = 0; v < 16; v++) {
                op.lo_per_chunk = v & 1;
                const bool early = v & 2, obs = v & 4;
                memset(&log, 0, sizeof log);
                const emu_site_stats got = commit_how(
                    fmt, &r, &op, acc_old, addend, n, v & 8 ? 3 : 1, early,
                    obs, ref_rate, &y1, &log);
                char w2[200];
                snprintf(w2, sizeof w2, "%s, fill%s variant %d", what,
                         v & 8 ? "_add" : "", v & 7);
                same_stats(&want, &got, w2);
                ck_assert_msg(!memcmp(y0.data, y1.data, n * sizeof *y0.data),
                              "%s: results differ", w2);
                if (obs) {
                    ck_assert_int_eq(log.calls, 1);
                    for (size_t i = 0; i < n && i < 64; i++) {
                        ck_assert(test_same(log.hi[0][i], hi[i]));
                        ck_assert(test_same(log.lo[0][i], with_lo ? lo[i] : 0.0));
                    }
                }
                emu_tensor_free(&y1);
            }
            emu_tensor_free(&y0);
            if (with_lo)
                continue;
            /* fill32 against arrays of the same binary32 values */
            arr_op op32 = { .hi = hi32, .f = f };
            const emu_site_stats want32 = commit_how(
                fmt, &r, &op32, acc_old, addend, n, 0, false, false, ref_rate,
                &y0, &log);
            for (int v = 0; v < 4; v++) {
                memset(&log, 0, sizeof log);
                const emu_site_stats got = commit_how(
                    fmt, &r, &op32, acc_old, addend, n, 2, v & 1, v & 2,
                    ref_rate, &y1, &log);
                char w2[200];
                snprintf(w2, sizeof w2, "%s, fill32 variant %d", what, v);
                same_stats(&want32, &got, w2);
                ck_assert_msg(!memcmp(y0.data, y1.data, n * sizeof *y0.data),
                              "%s: results differ", w2);
                emu_tensor_free(&y1);
            }
            emu_tensor_free(&y0);
        }
        free(hi);
        free(lo);
        free(hi32);
        free(addend);
        free(f);
        free(acc_old);
    }
}
END_TEST

/* In place: a producer that reads out's own storage at its own position
 * (an elementwise op on out), stored early, gives what the arrays give
 * with the results kept aside. */
START_TEST(test_chunked_in_place)
{
    const size_t n = 3 * EMU_COMMIT_CHUNK + 5;
    const emu_format *h = test_format("binary16");
    emu_tensor y;
    make(&y, h, n, "y", EMU_ROLE_OTHER);
    test_rng g = test_rng_make(5);
    float *x0 = malloc(n * sizeof *x0);
    double *hi = malloc(n * sizeof *hi);
    for (size_t i = 0; i < n; i++) {
        x0[i] = (float)ldexp((double)(test_next(&g) >> 11) * 0x1p-53,
                             (int)(test_next(&g) % 60) - 30);
        hi[i] = (double)x0[i] * 3.0; /* exact */
    }
    float *want = malloc(n * sizeof *want);
    for (int early = 0; early < 2; early++) {
        memcpy(y.data, x0, n * sizeof *x0);
        emu_stats stats;
        emu_stats_init(&stats);
        emu_ctx ctx;
        emu_ctx_init(&ctx, 1);
        ctx.stats = &stats;
        ctx.measure = EMU_MEASURE_ALL;
        /* acc_old is out itself: the update out = out + addend */
        double *addend = malloc(n * sizeof *addend);
        for (size_t i = 0; i < n; i++)
            addend[i] = hi[i] - y.data[i];
        emu_op_out o = { .site = "inplace", .kind = "test", .out = &y,
                         .hi = early ? NULL : hi, .rnd = &test_rne,
                         .acc_old = y.data, .addend = addend,
                         .store_early = early };
        arr_op op = { .hi = hi };
        if (early) {
            o.fill = arr_fill;
            o.op = &op;
        }
        ck_assert_int_eq(emu_commit(&ctx, &o), 0);
        const emu_site *s = find_site(&stats, "inplace", EMU_ROLE_OTHER);
        if (!early) {
            memcpy(want, y.data, n * sizeof *want);
            ck_assert_uint_eq(s->total.adds, n);
        } else {
            ck_assert(!memcmp(want, y.data, n * sizeof *want));
            ck_assert_uint_eq(s->total.adds, n);
        }
        free(addend);
        emu_stats_free(&stats);
    }
    free(x0);
    free(hi);
    free(want);
    emu_tensor_free(&y);
}
END_TEST

/* ---- ops through their producers against whole arrays -------------------- */

/* Sizes around the chunk, each with a (rows, columns) split whose rows a
 * chunk boundary cuts (341 and 205 do not divide 1024). */
static const struct { size_t rows, cols; } op_sizes[] = {
    { 1, 1 }, { 3, 341 }, { 2, 512 }, { 5, 205 }, { 300, 10 },
};

/* Finite binary32 values over a wide range (overflow and underflow in
 * binary16 and its subnormals; no NaN: the reference commits below give
 * no NaN provenance callbacks), some zeros. */
static void wide_values(float *v, size_t n, test_rng *g, int emin, int emax)
{
    for (size_t i = 0; i < n; i++) {
        const uint64_t r = test_next(g);
        if (r % 29 == 0) {
            v[i] = 0.0f;
            continue;
        }
        const double m = 1.0 + (double)(r >> 40) * 0x1p-24;
        const int e = emin + (int)((r >> 8) % (uint64_t)(emax - emin + 1));
        v[i] = (float)ldexp((r >> 7) & 1 ? -m : m, e);
    }
}

typedef struct op_case {
    const char *fmt;
    emu_rounding rnd;
    bool stats;
} op_case;

static const op_case op_cases[] = {
    { "binary32", { .mode = EMU_RNE }, true },
    { "binary32", { .mode = EMU_RNE }, false },
    { "binary16", { .mode = EMU_RNE }, true },
    { "binary16", { .mode = EMU_RS, .sr_bits = 64 }, true },
    { "binary16", { .mode = EMU_RS, .sr_bits = 64 }, false },
    { "binary32", { .mode = EMU_RS, .sr_bits = 64 }, true },
    { "e4m3", { .mode = EMU_RZ }, true },
};

static void op_ctx(emu_ctx *ctx, emu_stats *stats, bool on)
{
    emu_ctx_init(ctx, 99);
    emu_stats_init(stats);
    ctx->stats = on ? stats : NULL;
    ctx->measure = EMU_MEASURE_ALL;
}

/* The op's site totals (zero without statistics). */
static emu_site_stats op_totals(const emu_stats *stats, const char *site,
                                emu_role role, bool on)
{
    emu_site_stats t = { 0 };
    if (on)
        t = find_site(stats, site, role)->total;
    return t;
}

/* Commits hi (lo) as arrays into a copy of y's format, as op number k of
 * a context like op_ctx's; the results in *ref, the totals returned. */
static emu_site_stats commit_arrays(const emu_tensor *y, const char *site,
                                    const char *kind, const double *hi,
                                    const double *lo,
                                    const emu_accum_counts *swamp,
                                    const emu_rounding *rnd, bool on,
                                    uint64_t k, emu_tensor *ref)
{
    emu_error err;
    ck_assert(emu_tensor_alloc(ref, y->name, y->role, &y->fmt, y->ndim,
                               y->shape, &err) == 0);
    emu_stats stats;
    emu_ctx ctx;
    op_ctx(&ctx, &stats, on);
    ctx.op_index = k;
    emu_op_out o = { .site = site, .kind = kind, .out = ref, .hi = hi,
                     .lo = lo, .swamp = swamp, .rnd = rnd };
    ck_assert_int_eq(emu_commit(&ctx, &o), 0);
    emu_site_stats t = op_totals(&stats, site, y->role, on);
    emu_stats_free(&stats);
    return t;
}

static void alloc2(emu_tensor *t, const char *name, const char *fmt,
                   size_t r, size_t c)
{
    emu_error err;
    size_t shape[2] = { r, c };
    ck_assert_msg(emu_tensor_alloc(t, name, EMU_ROLE_ACTIVATION,
                                   test_format(fmt), 2, shape, &err) == 0,
                  "%s", err.message);
}

static void same_op(const emu_tensor *y, const emu_tensor *ref,
                    const emu_site_stats *got, const emu_site_stats *want,
                    const char *what)
{
    same_stats(want, got, what);
    ck_assert_msg(!memcmp(y->data, ref->data, y->n * sizeof *y->data),
                  "%s: results differ", what);
}

/* matmul under the fast model: the sgemm products chunk by chunk
 * (binary32, scaled by alpha in the producer) against the engine's
 * doubles scaled whole and committed as arrays. */
START_TEST(test_matmul_chunks)
{
    static const double alphas[] = { 1.0, 0x1p-3, 0.75 };
    emu_accum fast;
    emu_accum_default(&fast);
    fast.kind = EMU_ACCUM_FAST;
    test_rng g = test_rng_make(31);
    for (size_t si = 0; si < sizeof op_sizes / sizeof *op_sizes; si++)
    for (size_t ci = 0; ci < sizeof op_cases / sizeof *op_cases; ci++)
    for (size_t ai = 0; ai < 3; ai++) {
        const size_t M = op_sizes[si].rows, N = op_sizes[si].cols;
        const size_t K = 3 + si * 4, n = M * N;
        const op_case *c = &op_cases[ci];
        const double alpha = alphas[ai];
        emu_tensor a, b, y, ref;
        alloc2(&a, "a", "binary32", M, K);
        alloc2(&b, "b", "binary32", K, N);
        alloc2(&y, "y", c->fmt, M, N);
        wide_values(a.data, a.n, &g, -12, 5);
        wide_values(b.data, b.n, &g, -12, 5);
        emu_stats stats;
        emu_ctx ctx;
        op_ctx(&ctx, &stats, c->stats);
        emu_matmul_opts o = { .accum = &fast, .alpha = alpha };
        ck_assert_int_eq(emu_t_matmul(&ctx, "mm", &y, &a, &b, &o, &c->rnd), 0);
        const emu_site_stats got = op_totals(&stats, "mm", y.role, c->stats);
        emu_stats_free(&stats);

        double *hi = malloc(n * sizeof *hi), *lo = malloc(n * sizeof *lo);
        const bool pairs = !emu_is_pow2(alpha);
        ck_assert_int_eq(emu_gemm_accum_ex(&fast, M, N, K, a.data,
                                           (ptrdiff_t)K, 1, b.data,
                                           (ptrdiff_t)N, 1, NULL, hi,
                                           pairs ? lo : NULL, 99, 0, 0, NULL,
                                           1), 0);
        emu_scale_pairs(hi, pairs ? lo : NULL, false, n, alpha);
        const emu_site_stats want = commit_arrays(
            &y, "mm", "matmul", hi, pairs ? lo : NULL, NULL, &c->rnd,
            c->stats, 0, &ref);
        char what[128];
        snprintf(what, sizeof what, "matmul %zux%zux%zu, %s, mode %d, "
                 "stats %d, alpha %g", M, N, K, c->fmt, (int)c->rnd.mode,
                 c->stats, alpha);
        same_op(&y, &ref, &got, &want, what);
        free(hi);
        free(lo);
        emu_tensor_free(&a);
        emu_tensor_free(&b);
        emu_tensor_free(&y);
        emu_tensor_free(&ref);
    }
}
END_TEST

/* conv2d under the fast model: the sgemm products read in NCHW order
 * chunk by chunk (binary32, scaled in the producer) against the same
 * GEMM formed here on the im2row matrix conv2d documents (bias first,
 * then (ci, kh, kw); the same sgemm call, so the same sums), transposed
 * whole and committed as arrays.  Output sizes 1, 1176 and 2880: the
 * chunks start inside images and channels. */
START_TEST(test_conv_chunks)
{
    static const struct { size_t N, Ci, H, Co, K; int pad; } geo[] = {
        { 1, 1, 1, 1, 1, 0 }, { 2, 2, 14, 3, 3, 1 }, { 5, 3, 12, 4, 3, 1 },
    };
    static const double alphas[] = { 1.0, 0x1p-2, 0.75 };
    emu_accum fast;
    emu_accum_default(&fast);
    fast.kind = EMU_ACCUM_FAST;
    test_rng g = test_rng_make(34);
    for (size_t gi = 0; gi < sizeof geo / sizeof *geo; gi++)
    for (size_t ci = 0; ci < sizeof op_cases / sizeof *op_cases; ci++)
    for (size_t ai = 0; ai < 3; ai++) {
        const op_case *c = &op_cases[ci];
        const size_t N = geo[gi].N, Ci = geo[gi].Ci, H = geo[gi].H;
        const size_t Co = geo[gi].Co, KS = geo[gi].K;
        const size_t pad = (size_t)geo[gi].pad, Ho = H + 2 * pad - KS + 1;
        const double alpha = alphas[ai];
        emu_tensor x, w, bias, y, ref;
        emu_error err;
        const emu_format *f32 = test_format("binary32");
        ck_assert(emu_tensor_alloc4(&x, "x", EMU_ROLE_ACTIVATION, f32, N, Ci,
                                    H, H, &err) == 0);
        ck_assert(emu_tensor_alloc4(&w, "w", EMU_ROLE_WEIGHT, f32, Co, Ci, KS,
                                    KS, &err) == 0);
        ck_assert(emu_tensor_alloc4(&y, "y", EMU_ROLE_ACTIVATION,
                                    test_format(c->fmt), N, Co, Ho, Ho,
                                    &err) == 0);
        ck_assert(emu_tensor_alloc(&bias, "b", EMU_ROLE_WEIGHT, f32, 1, &Co,
                                   &err) == 0);
        wide_values(x.data, x.n, &g, -10, 4);
        wide_values(w.data, w.n, &g, -10, 4);
        wide_values(bias.data, bias.n, &g, -10, 4);
        emu_stats stats;
        emu_ctx ctx;
        op_ctx(&ctx, &stats, c->stats);
        emu_conv_opts o = { .accum = &fast, .stride = 1, .pad = (int)pad,
                            .alpha = alpha };
        ck_assert_int_eq(emu_t_conv2d(&ctx, "cv", &y, &x, &w, &bias, &o,
                                      &c->rnd), 0);
        const emu_site_stats got = op_totals(&stats, "cv", y.role, c->stats);
        emu_stats_free(&stats);

        /* rows (P, K) and weights (Co, K), bias first */
        const size_t K = 1 + Ci * KS * KS, P = N * Ho * Ho, n = y.n;
        float *rows = malloc(P * K * sizeof *rows);
        float *wp = malloc(Co * K * sizeof *wp), *prod = malloc(n * sizeof *prod);
        for (size_t b = 0; b < N; b++)
            for (size_t oh = 0; oh < Ho; oh++)
                for (size_t ow = 0; ow < Ho; ow++) {
                    float *r = rows + ((b * Ho + oh) * Ho + ow) * K;
                    *r++ = 1.0f;
                    for (size_t i = 0; i < Ci; i++)
                        for (size_t kh = 0; kh < KS; kh++)
                            for (size_t kw = 0; kw < KS; kw++) {
                                const ptrdiff_t ih = (ptrdiff_t)(oh + kh) - (ptrdiff_t)pad;
                                const ptrdiff_t iw = (ptrdiff_t)(ow + kw) - (ptrdiff_t)pad;
                                *r++ = ih < 0 || iw < 0 || ih >= (ptrdiff_t)H ||
                                       iw >= (ptrdiff_t)H
                                     ? 0.0f
                                     : x.data[((b * Ci + i) * H + (size_t)ih) * H +
                                              (size_t)iw];
                            }
                }
        for (size_t co = 0; co < Co; co++) {
            wp[co * K] = bias.data[co];
            memcpy(wp + co * K + 1, w.data + co * (K - 1), (K - 1) * sizeof *wp);
        }
        ck_assert_int_eq(emu_gemm_fast_f32(P, Co, K, rows, (ptrdiff_t)K, 1, wp,
                                           1, (ptrdiff_t)K, NULL, prod), 0);
        double *hi = malloc(n * sizeof *hi), *lo = malloc(n * sizeof *lo);
        const size_t HW = Ho * Ho;
        for (size_t b = 0; b < N; b++)
            for (size_t co = 0; co < Co; co++)
                for (size_t q = 0; q < HW; q++)
                    hi[(b * Co + co) * HW + q] = prod[(b * HW + q) * Co + co];
        const bool pairs = !emu_is_pow2(alpha);
        emu_scale_pairs(hi, pairs ? lo : NULL, false, n, alpha);
        const emu_site_stats want = commit_arrays(
            &y, "cv", "conv2d", hi, pairs ? lo : NULL, NULL, &c->rnd,
            c->stats, 0, &ref);
        char what[128];
        snprintf(what, sizeof what, "conv2d %zu outputs, %s, mode %d, stats "
                 "%d, alpha %g", n, c->fmt, (int)c->rnd.mode, c->stats, alpha);
        same_op(&y, &ref, &got, &want, what);
        free(rows);
        free(wp);
        free(prod);
        free(hi);
        free(lo);
        emu_tensor_free(&x);
        emu_tensor_free(&w);
        emu_tensor_free(&bias);
        emu_tensor_free(&y);
        emu_tensor_free(&ref);
    }
}
END_TEST

/* Reductions: each output's dot product formed here by emu_accum_dot
 * (its words numbered by the output), the swamping summed, committed as
 * arrays; along the last axis and along the first (strided). */
START_TEST(test_reduce_chunks)
{
    static const char *const models[] = {
        "fast", "sequential,acc=binary16", "exact",
        "sequential,acc=bfloat16,mode=sr",
    };
    static const emu_reduce kinds[] = {
        EMU_REDUCE_SUM, EMU_REDUCE_SUMSQ, EMU_REDUCE_MAX,
    };
    test_rng g = test_rng_make(32);
    for (size_t si = 0; si < sizeof op_sizes / sizeof *op_sizes; si++)
    for (size_t ci = 0; ci < sizeof op_cases / sizeof *op_cases; ci++)
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++)
    for (size_t ki = 0; ki < 3; ki++)
    for (int axis = 0; axis < 2; axis++) {
        const op_case *c = &op_cases[ci];
        const size_t n = op_sizes[si].rows * op_sizes[si].cols;
        const size_t L = 2 + (si + mi + ki) % 5;
        emu_accum acc;
        emu_error err;
        ck_assert(emu_accum_parse(&acc, models[mi], &err) == 0);
        /* axis 1: x (n, L) -> (n); axis 0: x (L, n) -> (n) */
        emu_tensor x, y, ref;
        if (axis)
            alloc2(&x, "x", "binary32", n, L);
        else
            alloc2(&x, "x", "binary32", L, n);
        size_t yshape = n;
        ck_assert(emu_tensor_alloc(&y, "y", EMU_ROLE_ACTIVATION,
                                   test_format(c->fmt), 1, &yshape, &err) == 0);
        wide_values(x.data, x.n, &g, -14, 6);
        emu_stats stats;
        emu_ctx ctx;
        op_ctx(&ctx, &stats, c->stats);
        const emu_reduce r = kinds[ki];
        ck_assert_int_eq(emu_t_reduce(&ctx, "red", &y, &x, r, axis, &acc,
                                      &c->rnd), 0);
        const emu_site_stats got = op_totals(&stats, "red", y.role, c->stats);
        emu_stats_free(&stats);

        double *hi = malloc(n * sizeof *hi), *lo = malloc(n * sizeof *lo);
        emu_accum_counts sw;
        memset(&sw, 0, sizeof sw);
        const ptrdiff_t inc = axis ? 1 : (ptrdiff_t)n;
        bool any_lo = false;
        for (size_t o = 0; o < n; o++) {
            const float *p = axis ? x.data + o * L : x.data + o;
            lo[o] = 0.0;
            if (r == EMU_REDUCE_MAX) {
                double v = p[0];
                for (size_t k = 1; k < L; k++) /* no NaN, no -0 race */
                    if (p[(ptrdiff_t)k * inc] > v ||
                        (p[(ptrdiff_t)k * inc] == 0.0 && v == 0.0 &&
                         !signbit(p[(ptrdiff_t)k * inc])))
                        v = p[(ptrdiff_t)k * inc];
                hi[o] = v;
                continue;
            }
            emu_accum_rng rng = { 99, (uint64_t)1 << 63, o };
            hi[o] = emu_accum_dot(&lo[o], c->stats ? &sw : NULL, &acc, p, inc,
                                  r == EMU_REDUCE_SUMSQ ? p : NULL, inc, L,
                                  &rng);
            any_lo |= lo[o] != 0.0;
        }
        const bool with_lo = r != EMU_REDUCE_MAX && acc.kind == EMU_ACCUM_EXACT;
        ck_assert(with_lo || !any_lo);
        const emu_site_stats want = commit_arrays(
            &y, "red", "sum", hi, with_lo ? lo : NULL,
            c->stats && r != EMU_REDUCE_MAX ? &sw : NULL, &c->rnd, c->stats,
            0, &ref);
        char what[160];
        snprintf(what, sizeof what, "reduce %d axis %d, %zu outputs of %zu, "
                 "%s, %s, mode %d, stats %d", (int)r, axis, n, L, models[mi],
                 c->fmt, (int)c->rnd.mode, c->stats);
        same_op(&y, &ref, &got, &want, what);
        free(hi);
        free(lo);
        emu_tensor_free(&x);
        emu_tensor_free(&y);
        emu_tensor_free(&ref);
    }
}
END_TEST

/* The losses' gradients and softmax: rows evaluated here in binary64 by
 * the ops' stated formulas, whole, committed as arrays. */
START_TEST(test_loss_chunks)
{
    test_rng g = test_rng_make(33);
    for (size_t si = 0; si < sizeof op_sizes / sizeof *op_sizes; si++)
    for (size_t ci = 0; ci < sizeof op_cases / sizeof *op_cases; ci++)
    for (int which = 0; which < 4; which++) {
        const op_case *c = &op_cases[ci];
        const size_t B = op_sizes[si].rows, C = op_sizes[si].cols, n = B * C;
        emu_tensor x, t, y, ref, loss;
        alloc2(&x, "x", "binary32", B, C);
        alloc2(&t, "t", "binary32", B, C);
        alloc2(&y, "y", c->fmt, B, C);
        size_t one = 1;
        emu_error err;
        ck_assert(emu_tensor_alloc(&loss, "loss", EMU_ROLE_OTHER,
                                   test_format("binary32"), 1, &one, &err) == 0);
        wide_values(x.data, n, &g, -3, 4);
        wide_values(t.data, n, &g, -3, 4);
        int *labels = malloc(B * sizeof *labels);
        for (size_t r = 0; r < B; r++)
            labels[r] = (int)(test_next(&g) % C);
        const float scale = 1024.0f;
        emu_stats stats;
        emu_ctx ctx;
        op_ctx(&ctx, &stats, c->stats);
        const char *site = which == 2 ? "ce.dlogits" : which == 3 ? "l2.dpred"
                                                                  : "sm";
        int rc = which == 0 ? emu_t_softmax(&ctx, "sm", &y, &x, &c->rnd)
               : which == 1 ? emu_t_log_softmax(&ctx, "sm", &y, &x, &c->rnd)
               : which == 2 ? emu_t_cross_entropy(&ctx, "ce", &loss, &y, &x,
                                                  labels, scale, &c->rnd)
                            : emu_t_mse(&ctx, "l2", &loss, &y, &x, &t, scale,
                                        &c->rnd);
        ck_assert_int_eq(rc, 0);
        const emu_site_stats got = op_totals(&stats, site, y.role, c->stats);
        emu_stats_free(&stats);

        double *hi = malloc(n * sizeof *hi), *e = malloc(C * sizeof *e);
        for (size_t r = 0; r < B; r++) {
            const float *xr = x.data + r * C;
            double m = -INFINITY;
            for (size_t j = 0; j < C; j++)
                m = xr[j] > m ? xr[j] : m;
            double s = 0.0, rest = 0.0;
            size_t jm = C;
            for (size_t j = 0; j < C; j++) {
                e[j] = exp((double)xr[j] - m);
                s += e[j];
                if (jm == C && (double)xr[j] == m)
                    jm = j;
                else
                    rest += e[j];
            }
            const double ls = e[jm] == 1.0 ? log1p(rest) : log(s);
            double others = 0.0;
            for (size_t j = 0; j < C; j++)
                if (j != (size_t)labels[r])
                    others += e[j];
            for (size_t j = 0; j < C; j++) {
                double h;
                if (which == 0) {
                    h = e[j] / s;
                } else if (which == 1) {
                    h = ((double)xr[j] - m) - ls;
                } else if (which == 2) {
                    const double p = j == (size_t)labels[r] ? -(others / s)
                                                            : e[j] / s;
                    h = p * (double)scale / (double)B;
                } else {
                    const double d = (double)xr[j] - (double)t.data[r * C + j];
                    h = d * (2.0 * (double)scale) / (double)n;
                }
                hi[r * C + j] = h;
            }
        }
        const emu_site_stats want = commit_arrays(
            &y, site, "loss", hi, NULL, NULL, &c->rnd, c->stats,
            which >= 2 ? 1 : 0, &ref);
        char what[128];
        snprintf(what, sizeof what, "loss op %d, %zux%zu, %s, mode %d, "
                 "stats %d", which, B, C, c->fmt, (int)c->rnd.mode, c->stats);
        same_op(&y, &ref, &got, &want, what);
        free(hi);
        free(e);
        free(labels);
        emu_tensor_free(&x);
        emu_tensor_free(&t);
        emu_tensor_free(&y);
        emu_tensor_free(&ref);
        emu_tensor_free(&loss);
    }
}
END_TEST

/* emu_site_stats_merge adds every field, and skips the count arrays that
 * are all zero in the source (most commits' histograms): merges of
 * sources with zero and non-zero arrays in every combination, against the
 * field-by-field sums. */
START_TEST(test_stats_merge)
{
    static emu_site_stats a, b, want;
    uint64_t *const arr_a[] = { a.lost_bits, a.hist_exact, a.hist_rounded,
                                a.hist_scale, a.ulp_hist, a.rel_hist };
    uint64_t *const arr_b[] = { b.lost_bits, b.hist_exact, b.hist_rounded,
                                b.hist_scale, b.ulp_hist, b.rel_hist };
    uint64_t *const arr_w[] = { want.lost_bits, want.hist_exact,
                                want.hist_rounded, want.hist_scale,
                                want.ulp_hist, want.rel_hist };
    const size_t len[] = { EMU_LOST_BINS, EMU_HIST_BINS, EMU_HIST_BINS,
                           EMU_HIST_BINS, EMU_ULPERR_BINS, EMU_RELERR_BINS };
    enum { N_ARR = 6 };
    uint64_t x = 0x5eed;
    memset(&a, 0, sizeof a);
    for (int k = 0; k < N_ARR; k++)
        for (size_t i = 0; i < len[k]; i++)
            arr_a[k][i] = (x = x * 6364136223846793005u + 1) >> 40;
    a.results = 7;
    a.ulp_max = 0.25;
    for (unsigned combo = 0; combo < 1u << N_ARR; combo++) {
        memset(&b, 0, sizeof b);
        b.results = combo + 1;
        b.ulp_max = combo % 3 ? 0.5 : 0.0;
        for (int k = 0; k < N_ARR; k++) {
            if (!(combo >> k & 1))
                continue;
            /* one bin only, or many, and a modulo-2^64 "negative" one */
            const size_t i = (combo * 37u + (unsigned)k) % len[k];
            arr_b[k][i] = combo & 8 ? ~(uint64_t)0 : combo + 3;
            if (combo & 16)
                for (size_t j = 0; j < len[k]; j += 5)
                    arr_b[k][j] += j + 1;
        }
        want = a;
        want.results += b.results;
        want.ulp_max = fmax(a.ulp_max, b.ulp_max);
        for (int k = 0; k < N_ARR; k++)
            for (size_t i = 0; i < len[k]; i++)
                arr_w[k][i] += arr_b[k][i];
        emu_site_stats_merge(&a, &b);
        ck_assert(memcmp(&a, &want, sizeof a) == 0);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("choke_point");
    TCase *tc = tcase_create("commit");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_counts_by_hand);
    tcase_add_test(tc, test_stats_merge);
    tcase_add_test(tc, test_histograms_random);
    tcase_add_test(tc, test_hist_bins_from_bits);
    tcase_add_test(tc, test_commit_carrier);
    tcase_add_test(tc, test_commit_hist_always);
    tcase_add_test(tc, test_commit_pairs_lo_apart);
    tcase_add_test(tc, test_commit_lo_apart_each_lane);
    tcase_add_test(tc, test_commit_carry_each_lane);
    tcase_add_test(tc, test_commit_rne32);
    tcase_add_test(tc, test_commit_carry32_each_lane);
    tcase_add_test(tc, test_commit_swamp_counts);
    tcase_add_test(tc, test_exact_bin_low_parts);
    tcase_add_test(tc, test_exact_bin_low_parts_runs);
    tcase_add_test(tc, test_hist_narrow_chunks);
    tcase_add_test(tc, test_sampling_rate1);
    tcase_add_test(tc, test_sampling_catches_errors);
    tcase_add_test(tc, test_sampling_rate_partial);
    tcase_add_test(tc, test_observer);
    tcase_add_test(tc, test_sr_streams);
    tcase_add_test(tc, test_exports);
    tcase_add_test(tc, test_stats_api);
    tcase_add_test(tc, test_chunked_equals_arrays);
    tcase_add_test(tc, test_chunked_in_place);
    tcase_add_test(tc, test_matmul_chunks);
    tcase_add_test(tc, test_conv_chunks);
    tcase_add_test(tc, test_reduce_chunks);
    tcase_add_test(tc, test_loss_chunks);
    suite_add_tcase(s, tc);
    /* Regressions: an infinite relative error went to the first bin, and
     * long site names made a new site on every call. */
    TCase *core = tcase_create("core_bugs");
    tcase_add_test(core, test_core_relerr_of_exact_zero);
    tcase_add_test(core, test_core_long_site_names);
    suite_add_tcase(s, core);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
