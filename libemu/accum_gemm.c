/*
 * accum_gemm.c — the GEMM engine (emu_gemm_accum): many dot products at
 * once, under any accumulator model.
 *
 * Called by matmul and the convolutions.  For the sequential, blocked,
 * Kahan and pairwise models in deterministic modes with exact products,
 * one row's dot products with a panel of JB columns run side by side as
 * straight-line lane code that compilers vectorise; every other model
 * calls the reference definition (accum_ref.c) per output; fast calls
 * sgemm.  Rows are split over C11 threads.  Each value is bit-identical
 * to emu_accum_dot of the same terms (fast with a BLAS excepted), and the
 * counts are sums of integers, so neither depends on the thread count.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/accum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "accum_internal.h"

#ifdef EMU_HAVE_CBLAS
#include <cblas.h>
#endif

/* ---- the GEMM engine ---------------------------------------------------- */

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
            g->hi[o] = emu_accum_dot_init_unguarded(
                g->model, g->a + (ptrdiff_t)i * g->a_rs, g->a_cs,
                g->b + (ptrdiff_t)j * g->b_cs, g->b_rs, g->K,
                g->c ? g->c + o : NULL, &rng,
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
            accum_count_add(cnt, &c->g->model->acc, s_old[j],
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
                    accum_count_add(cnt, &g->model->wide, w[j],
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
                accum_count_add(cnt, &g->model->acc, s[j], y[j],
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
                accum_count_add(cnt, &g->model->acc, 0.0, t[j],
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
                        accum_count_add(cnt, &g->model->acc,
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
