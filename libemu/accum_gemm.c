/*
 * accum_gemm.c — the GEMM engine (emu_gemm_accum): many dot products at
 * once, under any accumulator model.
 *
 * Called by matmul and the convolutions.  With exact products, one row's
 * dot products with a panel of JB columns run side by side as
 * straight-line lane code that compilers vectorise: seq_rows for the
 * sequential, blocked, Kahan and pairwise models in deterministic modes,
 * kern_rows for the fused unit, the exact sum and stochastic sequential
 * summation (which hand a row-panel they cannot take to the definition);
 * every other model calls the reference definition (accum_ref.c) per
 * output; fast calls sgemm.  At the AVX-512 level the sequential,
 * blocked, Kahan, pairwise and stochastic sequential lanes run as
 * intrinsics on registers (v8_*), falling back to the C lanes step by
 * step where a lane leaves their domain.  Rows are split over C11 threads.  Each value is bit-identical
 * to emu_accum_dot of the same terms (fast with a BLAS excepted), and the
 * counts are sums of integers, so neither depends on the thread count.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/accum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <threads.h>

#include "accum_internal.h"

#ifdef EMU_HAVE_CBLAS
#include <cblas.h>
#endif
#if EMU_HAVE_ISA_CLONES
#include <immintrin.h>
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
    bool v8;                    /* seq_steps_avx512 (isa.c's level)           */
    const double *bp;           /* the worker's current panel, [k][j]         */
    const int64_t *lbp;         /* lsb(b) + 1022, same layout (tables)        */
    uint32_t *pt;               /* bin pairs (flush_pairs; AVX-512 counts)   */
    int p;                      /* acc's precision (counting)                 */
    /* The other kernels (fused, exact, stochastic sequential): */
    bool sr;                    /* a stochastic mode                          */
    bool sums_exact;            /* the sum of two acc values is exact in a
                                   binary64 (Kahan's last three steps)       */
    bool row_finite, panel_finite; /* no inf or NaN in the row / the panel   */
    int row_w, panel_w;         /* widest significand (bits) of row / panel   */
    int row_lo, row_hi;         /* least and greatest exponent of a non-zero */
    int panel_lo, panel_hi;     /* value of the row / the panel (exact)      */
    /* Exponents of the lowest set bit over the finite non-zero values of
     * the row / the panel (NO_LSB if none): every product a_k b_kj is a
     * multiple of 2^(row_lsb + panel_lsb) (see kahan_v8_mode). */
    int row_lsb, panel_lsb;
} seq_ctx;

enum { NO_LSB = 4000 };

/* Exponent of the lowest set bit of a binary32 value (0 for zero, inf and
 * NaN, whose products the counts never look at), without branches, so
 * that loops of it vectorise: the significand with its implicit bit (none
 * for a subnormal), its lowest set bit isolated (m & -m) and converted to
 * a float, exact below 2^24, whose exponent field is the bit's position.
 * (lowest_bit's value on every binary32 pattern, checked exhaustively.) */
static EMU_ALWAYS_INLINE int lowest_bit_f(float x)
{
    const uint32_t u = f2u(x), e = u >> 23 & 0xff;
    const uint32_t m = (u & 0x7fffff) | (uint32_t)(e != 0) << 23;
    const uint32_t low = m & (0u - m);
    const int32_t pos = (int32_t)(f2u((float)(int32_t)low) >> 23) - 127;
    const int32_t lsb = (int32_t)(e + (e == 0)) - 150 + pos;
    /* & rather than ||: no branch, which would keep GCC from vectorising */
    const uint32_t keep = (uint32_t)(e != 0xff) & (uint32_t)(m != 0);
    return lsb & -(int32_t)keep;
}

/* Swamping bins of one step of the JB lanes, s -> s_new of t = ak b[j]
 * (emu_accum_count_add's definition, read off the patterns): bin 65 if the
 * addition was absorbed, else the bits of t below 2^(E_new - p + 1), from
 * t's lowest set bit lsb (the factors' lowest bits, tabulated as
 * L = lsb(a) + lsb(b) + 1022) up to t's leading bit.  A zero t has a zero
 * exponent field and lands in bin 0 by the clamp.  Lanes whose s_new is not
 * a normal finite value, or whose t is inf or NaN, get bin -1: the caller
 * counts them by the definition itself.  Vectorisable like lanes_step. */
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
        /* s_new out of the normal range, or t inf or NaN (whose s_new
         * may still be finite: a saturating acc) */
        uint64_t odd = ((nu - mn) >> 63) | ((mx - nu) >> 63) |
                       (uint64_t)(et == 0x7ff);
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

/* count_step for any addend vector t (not only products with tabulated
 * lowest bits): t's lowest set bit read off its pattern, the significand's
 * lowest set bit isolated (m & -m, below the implicit bit) and converted
 * to a double by the 2^52 trick, whose exponent is its position.  Zero t is bin 0; subnormal t
 * (which no carrier value or binary32 product is) goes to the definition
 * with the other odd lanes.  Every lane j < jn is counted, adds included. */
static EMU_ALWAYS_INLINE void count_lanes(const seq_ctx *c,
                                          const emu_format *f,
                                          const double *restrict sv,
                                          const double *restrict nv,
                                          const double *restrict tv,
                                          size_t jn,
                                          uint32_t (*hist)[EMU_LOST_BINS],
                                          emu_accum_counts *cnt)
{
    const uint64_t mn = d2u(c->pl.min_normal), mx = d2u(c->pl.max);
    const int64_t p = c->p;
    const uint64_t frac = ((uint64_t)1 << 52) - 1, two52 = 0x4330000000000000u;
    int32_t off[JB]; /* lane j's bin as an offset into hist, or -1 */
    uint64_t any = 0;
    for (size_t j = 0; j < JB; j++) {
        uint64_t tu = d2u(tv[j]), tb = tu << 1;
        uint64_t nb = d2u(nv[j]), sb = d2u(sv[j]);
        uint64_t nu = nb & ~SIGN_BIT;
        int64_t et = (int64_t)(tb >> 53);
        uint64_t m = tu & frac;
        uint64_t low = m & (0 - m);                    /* 2^ctz(m), < 2^52 */
        int64_t ctz = (int64_t)(d2u(u2d(low | two52) - 0x1p52) >> 52) - 1023;
        ctz = m ? ctz : 52;                            /* the implicit bit */
        int64_t lsb = et - 52 + ctz;                   /* biased */
        int64_t top = (int64_t)(nu >> 52) - p;
        int64_t hb = et < top ? et : top;
        int64_t n = hb - lsb + 1;
        n = n < 0 ? 0 : n > 64 ? 64 : n;
        uint64_t x = nb ^ sb;
        n = x == 0 && tb != 0 ? EMU_LOST_BINS - 1 : n;
        n = tb == 0 ? 0 : n;
        uint64_t odd = (uint64_t)((nu < mn) | (nu > mx) | (et == 0x7ff) |
                                  ((et == 0) & (tb != 0)));
        off[j] = odd ? -1 : (int32_t)(n + (int64_t)j * EMU_LOST_BINS);
        any |= odd;
    }
    uint32_t *hf = &hist[0][0];
    if (!any && jn == JB) {
        /* the common case: one increment per lane, unrolled */
        for (size_t j = 0; j < JB; j++)
            hf[off[j]]++;
        cnt->adds += JB;
        return;
    }
    for (size_t j = 0; j < jn; j++) {
        if (off[j] >= 0) {
            hf[off[j]]++;
            cnt->adds++;
        } else {
            accum_count_add(cnt, f, sv[j], tv[j], nv[j]); /* adds too */
        }
    }
}

/* Adds the interleaved histograms to cnt and clears them (row by row
 * into a sum per bin, which compilers vectorise: the fused kernel empties
 * them per row-panel). */
static void flush_hist(uint32_t (*hist)[EMU_LOST_BINS], emu_accum_counts *cnt)
{
    uint64_t sum[EMU_LOST_BINS] = { 0 };
    for (int h = 0; h < JB; h++)
        for (int bin = 0; bin < EMU_LOST_BINS; bin++)
            sum[bin] += hist[h][bin];
    for (int bin = 0; bin < EMU_LOST_BINS; bin++)
        cnt->lost_bits[bin] += sum[bin];
    cnt->absorbed += sum[EMU_LOST_BINS - 1];
    memset(hist, 0, JB * sizeof *hist);
}

/* What lanes_step needs to bin the steps it makes (NULL: no counts).  A
 * lane that is not redone has a normal s_new (or a zero one, u == 0) and a
 * finite t, so its bin is lanes_bins' without the range checks: 65 if
 * absorbed, else the bits of t from its lowest set bit (the tables' la +
 * lb) up to the lower of its leading bit and 2^(E_new - p); -1 for an
 * exact zero sum, which the caller counts by the definition with the
 * redone lanes. */
typedef struct lane_count {
    int64_t p, la;              /* acc's precision; lsb(a_k) (tables)       */
    const int64_t *lb;          /* lsb(b_kj) + 1022, per lane (tables)      */
    int64_t *bins;              /* out: each lane's bin, or -1             */
    uint64_t *zany;             /* out: some lane's exact sum is zero      */
} lane_count;

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
                                             bool exact,
                                             const double *restrict sv,
                                             const double *restrict b,
                                             double ak, double *restrict ns,
                                             uint64_t *restrict bad, int d,
                                             uint64_t mask, uint64_t half,
                                             uint64_t mn, uint64_t mx,
                                             uint64_t zs,
                                             const lane_count *cn)
{
    const bool nearest = (mode == EMU_RNE || mode == EMU_RNA) && !pairs;
    uint64_t any = 0, zany = 0;
    for (size_t j = 0; j < JB; j++) {
        double sj = sv[j];
        double tj = ak * b[j];
        double h = sj + tj;
        uint64_t hb = d2u(h);
        uint64_t sg = hb & SIGN_BIT;
        uint64_t u = hb ^ sg;
        uint64_t neg = sg >> 63, r, mid = 0;
        if (!nearest && !exact) {
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
        if (cn) {
            /* lane_count's bins, from the step's own values: r is
             * |s_new|'s pattern wherever the lane is not redone */
            uint64_t tb = d2u(tj) << 1;
            int64_t et = (int64_t)(tb >> 53);
            int64_t top = (int64_t)(r >> 52) - cn->p;
            /* lanes_bins' branch-free min(et, top), max(n, 0) and tests,
             * which baseline SSE2 (no 64-bit compares) runs in pairs */
            int64_t dm = et - top;
            int64_t m = top + (int64_t)((uint64_t)dm & (0 - ((uint64_t)dm >> 63)));
            int64_t n = m - (cn->la + cn->lb[j]);
            n &= (int64_t)(((uint64_t)n >> 63) - 1);
            uint64_t x = d2u(sj) ^ (r | sg);
            uint64_t ab = (1 ^ ((x | (0 - x)) >> 63)) & ((tb | (0 - tb)) >> 63);
            n += (int64_t)((uint64_t)(EMU_LOST_BINS - 1 - n) & (0 - ab));
            uint64_t z = 1 ^ ((u | (0 - u)) >> 63); /* u == 0 */
            cn->bins[j] = n | (int64_t)(0 - z);
            zany |= z;
        }
    }
    if (cn)
        *cn->zany = zany;
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

/* out[j] = round(x[j] + y[j]) for the JB lanes, every lane exact.  With
 * `exact` the caller knows x + y to be exact in binary64 (two values of
 * an accumulator whose whole grid spans at most 53 bits, sums_exact), so
 * that binary64's sum is the pair (h, 0) and needs no TwoSum. */
static EMU_ALWAYS_INLINE void lanes_add(const seq_ctx *c, emu_rnd mode,
                                        bool exact, const double *x,
                                        const double *y, double *out,
                                        size_t jn)
{
    const uint64_t zs = c->pl.zero_slow || mode == EMU_RD;
    uint64_t bad[JB];
    if (lanes_step(mode, true, exact, x, y, 1.0, out, bad, c->pl.d, c->pl.mask,
                   c->pl.half, d2u(c->pl.min_normal), d2u(c->pl.max), zs,
                   NULL))
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
        if (!cnt) {
            uint64_t any = lanes_step(mode, pairs, false, cur, b, ak, nxt, bad,
                                      d, mask, half, mn, mx, zs, NULL);
            redone += any != 0;
            if (any)
                redo_lanes(c, cur, b, ak, nxt, bad, jn);
        } else {
            int64_t bins[JB];
            uint64_t zany;
            const lane_count cn = { c->p, la[k], lb + k * JB, bins, &zany };
            uint64_t any = lanes_step(mode, pairs, false, cur, b, ak, nxt, bad,
                                      d, mask, half, mn, mx, zs, &cn);
            redone += any != 0;
            if (any)
                redo_lanes(c, cur, b, ak, nxt, bad, jn);
            if (!any && !zany && jn == JB) {
                for (size_t j = 0; j < JB; j++)
                    hist[j][bins[j]]++;
            } else {
                for (size_t j = 0; j < jn; j++) {
                    if (!bad[j] && bins[j] >= 0) {
                        hist[j][bins[j]]++;
                    } else {
                        /* counted in full; the adds below cover all lanes */
                        accum_count_add(cnt, &c->g->model->acc, cur[j],
                                        ak * b[j], nxt[j]);
                        cnt->adds--;
                    }
                }
            }
        }
        double *tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    memcpy(s, cur, sizeof buf[0]);
    if (cnt)
        cnt->adds += (k1 - k0) * jn;
    return redone;
}

/* ---- swamping bins of lane pairs (AVX-512) ---------------------------------
 * One histogram increment per lane and step is a load and a store per
 * addition, as many memory operations as the step has vector ones.  The
 * AVX-512 sequential kernel halves them: lanes j and j + 8 share one
 * increment, into a table of bin pairs, pt[b_j][b_{j+8}], whose rows and
 * columns add up to the lanes' histograms (flush_pairs).  Its bins are
 * 0 .. PT_BINS - 3, PT_ABS for an absorbed addition (bin 65) and PT_SKIP
 * for a lane counted otherwise; a lane with a bin above PT_BINS - 3 (rare:
 * a product of wide significands far below the quantum) is counted by
 * itself.  The counts are integers, so their grouping does not matter. */
enum { PT_BINS = 33, PT_ABS = PT_BINS - 2, PT_SKIP = PT_BINS - 1,
       PT_STRIDE = 64, PT_SIZE = PT_BINS * PT_STRIDE };

/* Adds the pair table's margins to cnt and clears it. */
static void flush_pairs(uint32_t *pt, emu_accum_counts *cnt)
{
    uint64_t sum[PT_BINS] = { 0 };
    for (int x = 0; x < PT_BINS; x++)
        for (int y = 0; y < PT_BINS; y++) {
            uint64_t v = pt[x * PT_STRIDE + y];
            sum[x] += v;
            sum[y] += v;
        }
    for (int b = 0; b < PT_ABS; b++)
        cnt->lost_bits[b] += sum[b];
    cnt->lost_bits[EMU_LOST_BINS - 1] += sum[PT_ABS];
    cnt->absorbed += sum[PT_ABS];
    memset(pt, 0, PT_SIZE * sizeof *pt);
}

/* ---- seq_steps in AVX-512 intrinsics ---------------------------------------
 * The same map as lanes_step and its counts, for the AVX-512 level (isa.c
 * picks it; EMU_ISA=avx2 or baseline runs the C above, which the tests
 * compare): the JB lanes as two vectors of 8 that stay in registers from
 * step to step (the C kernel's compiled loop stores and reloads them and
 * rebuilds its constants every step), the range, midpoint and absorption
 * tests as compares into mask registers, and the swamping bins computed
 * on the 16 lanes' exponent words at once and counted in pairs of lanes
 * (v8_bins16, the pair table).  Every lane's operations are lanes_step's,
 * in binary64 and on the same patterns, so every value, redo and bin is
 * the same. */
#if EMU_HAVE_ISA_CLONES
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m512d v8_step(emu_rnd mode, bool nearest,
                                         bool exact,
                                         __m512d s, __m512d t, int d,
                                         __m512i vmask, __m512i vnmask,
                                         __m512i vhalf, __m512i vhm1,
                                         __m512i vmn, __m512i vmx, bool zs,
                                         __m512i *ro, __m512i *uo,
                                         __mmask8 *bad)
{
    const __m512i vabs = _mm512_set1_epi64(INT64_MAX);
    const __m512i one = _mm512_set1_epi64(1);
    __m512d h = _mm512_add_pd(s, t);
    __m512i hb = _mm512_castpd_si512(h);
    __m512i u = _mm512_and_si512(hb, vabs);
    __m512i sg = _mm512_andnot_si512(vabs, hb);
    if (!nearest && !exact) {
        /* TwoSum, then u rounded to odd at 53 bits where l != 0 */
        __m512d bv = _mm512_sub_pd(h, s);
        __m512d av = _mm512_sub_pd(h, bv);
        __m512d l = _mm512_add_pd(_mm512_sub_pd(s, av), _mm512_sub_pd(t, bv));
        __m512i lb = _mm512_castpd_si512(l);
        __mmask8 lnz = _mm512_test_epi64_mask(lb, vabs);
        __m512i down = _mm512_srli_epi64(_mm512_xor_si512(hb, lb), 63);
        __m512i odd = _mm512_or_si512(_mm512_sub_epi64(u, down), one);
        u = _mm512_mask_mov_epi64(u, lnz, odd);
    }
    __m512i r;
    switch (mode) {
    case EMU_RNE: {
        __m512i lsb = _mm512_and_si512(_mm512_srl_epi64(u, _mm_cvtsi32_si128(d)), one);
        r = _mm512_and_si512(_mm512_add_epi64(_mm512_add_epi64(u, vhm1), lsb),
                             vnmask);
        break;
    }
    case EMU_RNA:
        r = _mm512_and_si512(_mm512_add_epi64(u, vhalf), vnmask);
        break;
    case EMU_RU:
    case EMU_RD: {
        /* + mask on the positive lanes (RU) or the negative ones (RD) */
        __mmask8 neg = _mm512_movepi64_mask(hb);
        __mmask8 up = mode == EMU_RU ? (__mmask8)~neg : neg;
        r = _mm512_and_si512(_mm512_mask_add_epi64(u, up, u, vmask), vnmask);
        break;
    }
    case EMU_RO: {
        __m512i f = _mm512_and_si512(u, vmask);
        __m512i c = _mm512_sll_epi64(
            _mm512_srl_epi64(_mm512_add_epi64(f, vmask), _mm_cvtsi32_si128(d)),
            _mm_cvtsi32_si128(d));
        r = _mm512_or_si512(_mm512_sub_epi64(u, f), c);
        break;
    }
    default:
        r = _mm512_and_si512(u, vnmask);
        break;
    }
    __mmask8 out = _mm512_cmplt_epu64_mask(u, vmn);
    if (!zs)
        out &= _mm512_test_epi64_mask(u, u);
    out |= _mm512_cmpgt_epu64_mask(r, vmx);
    if (nearest)
        out |= _mm512_cmpeq_epi64_mask(_mm512_and_si512(u, vmask), vhalf);
    *bad = out;
    *ro = r;
    *uo = u;
    return _mm512_castsi512_pd(_mm512_or_si512(r, sg));
}

/* lane_count's bins of one vector as offsets into the lanes' histograms
 * (off: lane j's first bin); *odd gets the lanes whose exact sum is zero. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m256i v8_bins(__m512d s, __m512d ns, __m512d t,
                                         __m512i r, __m512i u, __m512i L,
                                         __m512i vp, __m512i off,
                                         __mmask8 *zero)
{
    __m512i tb = _mm512_slli_epi64(_mm512_castpd_si512(t), 1);
    __m512i et = _mm512_srli_epi64(tb, 53);
    __m512i top = _mm512_sub_epi64(_mm512_srli_epi64(r, 52), vp);
    __m512i n = _mm512_sub_epi64(_mm512_min_epi64(et, top), L);
    n = _mm512_max_epi64(n, _mm512_setzero_si512());
    __mmask8 ab = _mm512_cmpeq_epi64_mask(_mm512_castpd_si512(ns),
                                          _mm512_castpd_si512(s)) &
                  _mm512_test_epi64_mask(tb, tb);
    n = _mm512_mask_mov_epi64(n, ab, _mm512_set1_epi64(EMU_LOST_BINS - 1));
    *zero = _mm512_testn_epi64_mask(u, u);
    return _mm512_cvtepi64_epi32(_mm512_add_epi64(n, off));
}

/* The high (odd) 32-bit halves of the 16 lanes of x0 and x1, in order. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m512i v8_hi32(__m512i x0, __m512i x1)
{
    const __m512i idx = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17,
                                         15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi32(x0, idx, x1);
}

/* The low (even) 32-bit halves. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m512i v8_lo32(__m512i x0, __m512i x1)
{
    const __m512i idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16,
                                         14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_permutex2var_epi32(x0, idx, x1);
}

/* v8_bins on all 16 lanes at once, on the exponent words: the bins of the
 * non-absorbed lanes (dwords), *ab the absorbed lanes (s_new == s, t != 0)
 * and *zero those whose exact sum is zero.  The exponents sit in the high
 * words: et from t << 1 (a product of binary32 values is never a
 * subnormal double, so t != 0 is its high word's test too), top from r's. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m512i v8_bins16(__m512d s0, __m512d s1, __m512d n0,
                                           __m512d n1, __m512d t0, __m512d t1,
                                           __m512i r0, __m512i r1, __m512i u0,
                                           __m512i u1, __m512i L, __m512i vp,
                                           __mmask16 *ab, __mmask16 *zero)
{
    __m512i T = v8_hi32(_mm512_castpd_si512(t0), _mm512_castpd_si512(t1));
    __m512i et = _mm512_srli_epi32(_mm512_slli_epi32(T, 1), 21);
    __m512i top = _mm512_sub_epi32(_mm512_srli_epi32(v8_hi32(r0, r1), 20), vp);
    __m512i n = _mm512_sub_epi32(_mm512_min_epi32(et, top), L);
    n = _mm512_max_epi32(n, _mm512_setzero_si512());
    __mmask16 eq = (__mmask16)(
        (unsigned)_mm512_cmpeq_epi64_mask(_mm512_castpd_si512(n0),
                                          _mm512_castpd_si512(s0)) |
        (unsigned)_mm512_cmpeq_epi64_mask(_mm512_castpd_si512(n1),
                                          _mm512_castpd_si512(s1)) << 8);
    *ab = eq & _mm512_test_epi32_mask(et, et);
    *zero = (__mmask16)((unsigned)_mm512_testn_epi64_mask(u0, u0) |
                        (unsigned)_mm512_testn_epi64_mask(u1, u1) << 8);
    return n;
}

EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE size_t v8_steps(const seq_ctx *c, emu_rnd mode,
                                         bool nearest, bool xk, uint64_t xt,
                                         size_t *misses, const double *arow,
                                         const int *la, const double *bp,
                                         const int64_t *lb, size_t k0,
                                         size_t k1, size_t jn, double *s,
                                         emu_accum_counts *cnt,
                                         uint32_t (*hist)[EMU_LOST_BINS])
{
    const int d = c->pl.d;
    const __m512i vmask = _mm512_set1_epi64((long long)c->pl.mask);
    const __m512i vnmask = _mm512_set1_epi64((long long)~c->pl.mask);
    const __m512i vhalf = _mm512_set1_epi64((long long)c->pl.half);
    const __m512i vhm1 = _mm512_set1_epi64((long long)(c->pl.half - 1));
    const __m512i vmn = _mm512_set1_epi64((long long)d2u(c->pl.min_normal));
    const __m512i vmx = _mm512_set1_epi64((long long)d2u(c->pl.max));
    const bool zs = c->pl.zero_slow || mode == EMU_RD;
    const __m512i vp = _mm512_set1_epi32(c->p);
    const __mmask16 live = (__mmask16)((1u << jn) - 1);
    const __m512i vabs3 = _mm512_set1_epi32(PT_ABS - 1);
    const __m512i vxt = _mm512_set1_epi64((long long)xt);
    uint32_t *pt = c->pt;
    (void)hist;
    size_t redone = 0, missed = 0;
    __m512d s0 = _mm512_loadu_pd(s), s1 = _mm512_loadu_pd(s + 8);
    for (size_t k = k0; k < k1; k++) {
        const double ak = arow[k], *b = bp + k * JB;
        const __m512d a = _mm512_set1_pd(ak);
        __m512d t0 = _mm512_mul_pd(a, _mm512_loadu_pd(b));
        __m512d t1 = _mm512_mul_pd(a, _mm512_loadu_pd(b + 8));
        __m512i r0, r1, u0, u1;
        __mmask8 bad0, bad1;
        /* with xk, s + t rounded as exact where its binary64 sum is below
         * xt (seq_row_panel), the step made again with TwoSum if some
         * lane's is not */
        __m512d n0 = v8_step(mode, nearest, xk, s0, t0, d, vmask, vnmask, vhalf,
                             vhm1, vmn, vmx, zs, &r0, &u0, &bad0);
        __m512d n1 = v8_step(mode, nearest, xk, s1, t1, d, vmask, vnmask, vhalf,
                             vhm1, vmn, vmx, zs, &r1, &u1, &bad1);
        if (xk && (_mm512_cmpge_epu64_mask(u0, vxt) |
                   _mm512_cmpge_epu64_mask(u1, vxt))) {
            missed++;
            n0 = v8_step(mode, false, false, s0, t0, d, vmask, vnmask, vhalf,
                         vhm1, vmn, vmx, zs, &r0, &u0, &bad0);
            n1 = v8_step(mode, false, false, s1, t1, d, vmask, vnmask, vhalf,
                         vhm1, vmn, vmx, zs, &r1, &u1, &bad1);
        }
        const unsigned bad = (unsigned)bad0 | (unsigned)bad1 << 8;
        if (!cnt) {
            if (bad) {
                double sv[JB], nv[JB];
                uint64_t bl[JB];
                _mm512_storeu_pd(sv, s0), _mm512_storeu_pd(sv + 8, s1);
                _mm512_storeu_pd(nv, n0), _mm512_storeu_pd(nv + 8, n1);
                for (size_t j = 0; j < JB; j++)
                    bl[j] = bad >> j & 1;
                redo_lanes(c, sv, b, ak, nv, bl, jn);
                n0 = _mm512_loadu_pd(nv), n1 = _mm512_loadu_pd(nv + 8);
                redone++;
            }
            s0 = n0, s1 = n1;
            continue;
        }
        const __m512i L = _mm512_add_epi32(
            _mm512_set1_epi32(la[k]),
            v8_lo32(_mm512_loadu_si512(lb + k * JB),
                    _mm512_loadu_si512(lb + k * JB + 8)));
        __mmask16 ab, z;
        __m512i n = v8_bins16(s0, s1, n0, n1, t0, t1, r0, r1, u0, u1, L, vp,
                              &ab, &z);
        const __mmask16 odd = (__mmask16)(bad | z) & live;
        const __mmask16 skip = odd | (__mmask16)~live;
        __mmask16 big = _mm512_cmpgt_epi32_mask(n, vabs3) & ~(skip | ab);
        if (big) {
            /* bins past the table's: counted one by one */
            int32_t nb[JB];
            _mm512_storeu_si512(nb, n);
            for (size_t j = 0; j < JB; j++)
                if (big >> j & 1)
                    cnt->lost_bits[nb[j]]++;
        }
        n = _mm512_mask_mov_epi32(n, ab, _mm512_set1_epi32(PT_ABS));
        n = _mm512_mask_mov_epi32(n, skip | big, _mm512_set1_epi32(PT_SKIP));
        __m256i pidx = _mm256_add_epi32(
            _mm256_slli_epi32(_mm512_castsi512_si256(n), 6),
            _mm512_extracti64x4_epi64(n, 1));
        int32_t idx[8];
        _mm256_storeu_si256((__m256i *)idx, pidx);
        /* read back as scalars: GCC would otherwise extract the lanes
         * with two vector-port instructions each */
        __asm__ volatile("" : : "r"(idx) : "memory");
        pt[idx[0]]++, pt[idx[1]]++, pt[idx[2]]++, pt[idx[3]]++;
        pt[idx[4]]++, pt[idx[5]]++, pt[idx[6]]++, pt[idx[7]]++;
        if (bad | odd) {
            double sv[JB], nv[JB];
            uint64_t bl[JB];
            _mm512_storeu_pd(sv, s0), _mm512_storeu_pd(sv + 8, s1);
            _mm512_storeu_pd(nv, n0), _mm512_storeu_pd(nv + 8, n1);
            if (bad) {
                for (size_t j = 0; j < JB; j++)
                    bl[j] = bad >> j & 1;
                redo_lanes(c, sv, b, ak, nv, bl, jn);
                n0 = _mm512_loadu_pd(nv), n1 = _mm512_loadu_pd(nv + 8);
                redone++;
            }
            for (size_t j = 0; j < jn; j++)
                if (odd >> j & 1) {
                    /* counted in full; the adds below cover all lanes */
                    accum_count_add(cnt, &c->g->model->acc, sv[j], ak * b[j],
                                    nv[j]);
                    cnt->adds--;
                }
        }
        s0 = n0, s1 = n1;
    }
    _mm512_storeu_pd(s, s0);
    _mm512_storeu_pd(s + 8, s1);
    if (cnt)
        cnt->adds += (k1 - k0) * jn;
    *misses = missed;
    return redone;
}

/* v8_steps for a mode, with the pairs or the shortcut, counting or not. */
EMU_ISA_TARGET_AVX512
static size_t seq_steps_avx512(const seq_ctx *c, emu_rnd mode, bool pairs,
                               bool xk, uint64_t xt, size_t *misses,
                               const double *arow, const int *la,
                               const double *bp, const int64_t *lb, size_t k0,
                               size_t k1, size_t jn, double *s,
                               emu_accum_counts *cnt,
                               uint32_t (*hist)[EMU_LOST_BINS])
{
#define V8X(m, nr, x)                                                         \
    (cnt ? v8_steps(c, m, nr, x, xt, misses, arow, la, bp, lb, k0, k1, jn, s, \
                    cnt, hist)                                                \
         : v8_steps(c, m, nr, x, xt, misses, arow, la, bp, lb, k0, k1, jn, s, \
                    NULL, hist))
#define V8(m, nr) (xk ? V8X(m, false, true) : V8X(m, nr, false))
    switch (mode) {
    case EMU_RNE:
        return pairs ? V8(EMU_RNE, false) : V8(EMU_RNE, true);
    case EMU_RNA:
        return pairs ? V8(EMU_RNA, false) : V8(EMU_RNA, true);
    case EMU_RU:
        return V8(EMU_RU, false);
    case EMU_RD:
        return V8(EMU_RD, false);
    case EMU_RO:
        return V8(EMU_RO, false);
    default:
        return V8(EMU_RZ, false);
    }
#undef V8
#undef V8X
}
#endif

/* Which variant of the nearest modes a worker runs (see lanes_step): the
 * shortcut until it redoes more than 1/16 of its steps, then exact pairs
 * for 32 row-panels before trying again. */
typedef struct seq_state {
    bool pairs;
    unsigned countdown;
    unsigned xk_off;   /* row-panels left without the exactness bound */
} seq_state;

static EMU_ALWAYS_INLINE void seq_run(const seq_ctx *c, emu_rnd mode,
                                      seq_state *st, uint64_t xt,
                                      const double *arow,
                                      const int *la, const double *bp,
                                      const int64_t *lb, size_t k0, size_t k1,
                                      size_t jn, double *s,
                                      emu_accum_counts *cnt,
                                      uint32_t (*hist)[EMU_LOST_BINS])
{
    (void)xt; /* the AVX-512 lanes' only */
#if EMU_HAVE_ISA_CLONES
    if (c->v8) {
        const bool nearest = (mode == EMU_RNE || mode == EMU_RNA) && !st->pairs;
        /* The exactness bound (seq_row_panel) in place of both the
         * nearest shortcut and TwoSum, until more than 1/16 of a run's
         * steps miss it; then those for 32 runs. */
        const bool xk = st->xk_off == 0;
        size_t misses = 0;
        size_t redone = seq_steps_avx512(c, mode, !nearest, xk, xt, &misses,
                                         arow, la, bp, lb, k0, k1, jn, s, cnt,
                                         hist);
        if (xk && misses * 16 > k1 - k0)
            st->xk_off = 32;
        else if (!xk)
            st->xk_off--;
        if (xk)
            return;
        if (nearest && redone * 16 > k1 - k0) {
            st->pairs = true;
            st->countdown = 32;
        } else if (!nearest && st->pairs && --st->countdown == 0) {
            st->pairs = false;
        }
        return;
    }
#endif
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
                                            emu_accum_counts *cnt,
                                            uint32_t (*hist)[EMU_LOST_BINS])
{
    const gemm_job *g = c->g;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const double *bp = c->bp;
    const int64_t *lb = c->lbp;
    double s[JB], w[JB];
    for (size_t j = 0; j < JB; j++) {
        double init = g->c && j < jn ? g->c[i * g->N + j0 + j] : 0.0;
        s[j] = c->blocked ? 0.0 : init;
        w[j] = init;
    }
    /* The exactness bound of v8_steps: every product is a multiple of
     * 2^L, L = row_lsb + panel_lsb, and so are the initial values (L
     * lowered to their lowest bits), and then every partial sum, since a
     * rounding that changes a multiple of 2^L lands on a grid whose
     * spacing is above 2^L.  So s + t is exact in binary64 where its
     * binary64 sum is below 2^(L + 53): rounding being monotonic, the exact
     * sum is then below it too, a multiple of 2^L of at most 53 bits.
     * L >= -1074, so 2^(L + 53) is a normal double (inf's pattern when
     * every binary64 sum of multiples of 2^L is exact). */
    int L = c->row_lsb < NO_LSB && c->panel_lsb < NO_LSB
          ? c->row_lsb + c->panel_lsb : NO_LSB;
    if (!c->blocked)
        for (size_t j = 0; j < jn; j++)
            if (isfinite(s[j]) && s[j] != 0.0 && lowest_bit(s[j]) < L)
                L = lowest_bit(s[j]);
    const uint64_t xt = L + 53 >= 1024 ? (uint64_t)0x7ff0000000000000
                                       : (uint64_t)(L + 53 + 1023) << 52;
    if (!c->blocked) {
        seq_run(c, mode, st, xt, arow, la, bp, lb, 0, K, jn, s, cnt, hist);
    } else {
        for (size_t k0 = 0; k0 < K; k0 += c->block) {
            size_t k1 = K - k0 < c->block ? K : k0 + c->block;
            seq_run(c, mode, st, xt, arow, la, bp, lb, k0, k1, jn, s, cnt,
                    hist);
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
}

/* One step k of Kahan's summation on the lanes, as dot_kahan does it:
 * y = p - c; t = s + y; c = (t - s) - y; s = t, every operation rounded,
 * the addition s + y counted.  ex: s is a value of acc (every step but
 * the first), so that with sums_exact the sums of acc values need no
 * TwoSum. */
static EMU_ALWAYS_INLINE void kahan_step(const seq_ctx *c, emu_rnd mode,
                                         bool ex, double ak, const double *b,
                                         double *s, double *cc, size_t jn,
                                         emu_accum_counts *cnt,
                                         uint32_t (*hist)[EMU_LOST_BINS])
{
    double p[JB], y[JB], t[JB], d[JB], neg[JB];
    for (size_t j = 0; j < JB; j++) {
        p[j] = ak * b[j];
        neg[j] = -cc[j];
    }
    lanes_add(c, mode, false, p, neg, y, jn);
    /* the exact variants inlined apart, so that each stays vector code */
    if (ex)
        lanes_add(c, mode, true, s, y, t, jn);
    else
        lanes_add(c, mode, false, s, y, t, jn);
    for (size_t j = 0; j < JB; j++)
        neg[j] = -s[j];
    if (ex)
        lanes_add(c, mode, true, t, neg, d, jn);
    else
        lanes_add(c, mode, false, t, neg, d, jn);
    for (size_t j = 0; j < JB; j++)
        neg[j] = -y[j];
    if (c->sums_exact)
        lanes_add(c, mode, true, d, neg, cc, jn);
    else
        lanes_add(c, mode, false, d, neg, cc, jn);
    if (cnt)
        count_lanes(c, &c->g->model->acc, s, t, y, jn, hist, cnt);
    memcpy(s, t, sizeof t);
}

#if EMU_HAVE_ISA_CLONES
/* kahan_step for a mode that is not a constant: the AVX-512 kernel's way
 * back to the C lanes for a step in which some lane left its domain. */
static void kahan_step_any(const seq_ctx *c, emu_rnd mode, bool ex,
                           double ak, const double *b, double *s, double *cc,
                           size_t jn, emu_accum_counts *cnt,
                           uint32_t (*hist)[EMU_LOST_BINS])
{
    kahan_step(c, mode, ex, ak, b, s, cc, jn, cnt, hist);
}

static void kahan_v8(const seq_ctx *c, emu_rnd mode, size_t i, size_t q,
                     const double *arow, emu_accum_counts *cnt,
                     uint32_t (*hist)[EMU_LOST_BINS]);
#endif

/* Kahan's summation of one row against one panel. */
static EMU_ALWAYS_INLINE void kahan_row_panel(const seq_ctx *c, emu_rnd mode,
                                              size_t i, size_t q,
                                              const double *arow,
                                              emu_accum_counts *cnt,
                                              uint32_t (*hist)[EMU_LOST_BINS])
{
#if EMU_HAVE_ISA_CLONES
    if (c->v8) {
        kahan_v8(c, mode, i, q, arow, cnt, hist);
        return;
    }
#endif
    const gemm_job *g = c->g;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const double *bp = c->bp;
    double s[JB], cc[JB];
    for (size_t j = 0; j < JB; j++) {
        s[j] = g->c && j < jn ? g->c[i * g->N + j0 + j] : 0.0;
        cc[j] = 0.0;
    }
    for (size_t k = 0; k < K; k++) {
        /* s is a value of acc from the second step on (the initial value
         * need not be); y, t, d always are */
        const bool ex = c->sums_exact && k > 0;
        kahan_step(c, mode, ex, arow[k], bp + k * JB, s, cc, jn, cnt, hist);
    }
    for (size_t j = 0; j < jn; j++)
        g->hi[i * g->N + j0 + j] = s[j];
}

/* ---- Kahan's and the pairwise sums in AVX-512 intrinsics ------------------
 * kahan_step and the pairwise nodes for the AVX-512 level, the lanes as
 * two vectors of 8 held in registers: each rounded addition is v8_step
 * (its exact variant where sums_exact makes binary64's sum exact), the
 * swamping bins those of count_lanes, read off the same patterns.  A step
 * in which some lane leaves v8_step's domain is done again from its
 * inputs by the C lanes (kahan_step_any, lanes_add), so every value and
 * count is theirs, as the C kernels' are dot_kahan's and dot_pairwise's
 * (test_accum compares them at each ISA level). */
#if EMU_HAVE_ISA_CLONES
/* The rounding constants of v8_step, once per kernel call. */
typedef struct v8_consts {
    int d;
    __m512i mask, nmask, half, hm1, mn, mx, p, off0, off1;
    bool zs;
    /* v8_add rounds subnormal results and RD's exact zero sums itself
     * (an accumulator with subnormals and a -0) */
    bool sub;
    __m512i shb;         /* emin + 1023 - p + 53: the subnormal shift's base */
    __m512i eminb;       /* emin + 1023                                      */
    __m512d quantum;     /* 2^(emin - p + 1)                                 */
    __m512i xt;          /* v8_add_x's bound (kahan_v8_mode, per row-panel)  */
} v8_consts;

EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE void v8_consts_init(v8_consts *k, const seq_ctx *c,
                                             emu_rnd mode)
{
    k->d = c->pl.d;
    k->mask = _mm512_set1_epi64((long long)c->pl.mask);
    k->nmask = _mm512_set1_epi64((long long)~c->pl.mask);
    k->half = _mm512_set1_epi64((long long)c->pl.half);
    k->hm1 = _mm512_set1_epi64((long long)(c->pl.half - 1));
    k->mn = _mm512_set1_epi64((long long)d2u(c->pl.min_normal));
    k->mx = _mm512_set1_epi64((long long)d2u(c->pl.max));
    k->p = _mm512_set1_epi64(c->p);
    k->off0 = _mm512_mullo_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0),
                                 _mm512_set1_epi64(EMU_LOST_BINS));
    k->off1 = _mm512_add_epi64(k->off0, _mm512_set1_epi64(8 * EMU_LOST_BINS));
    const emu_format *f = &c->g->model->acc;
    k->sub = f->subnormals && !c->pl.zero_slow;
    k->zs = c->pl.zero_slow || (mode == EMU_RD && !k->sub);
    k->shb = _mm512_set1_epi64(f->emin + 1023 - f->p + 53);
    k->eminb = _mm512_set1_epi64(f->emin + 1023);
    k->quantum = _mm512_set1_pd(ldexp(1.0, f->emin - f->p + 1));
}

/* round(x + y) on 8 lanes, the exact pair (or, with exact, binary64's
 * sum); *bad gets the lanes outside the domain.  sub and zs are k->sub
 * and k->zs (constants where the caller knows them: kahan_v8_mode).  With
 * sub, a result below 2^emin is rounded here too: |x + y| rounded to odd
 * at 53 bits (v8_step's u, M 2^(E - 52) with M < 2^53) has at least
 * 53 - p + 1 more bits than the subnormal grid 2^(emin - p + 1), so
 * rounding M's integer to sh = emin - p + 1 - (E - 52) fewer bits is the
 * single rounding (as in fast_round); a shift beyond 63 rounds like 63,
 * M being below 2^53 and non-zero either way.  The result R times the
 * quantum is exact.  An exact zero sum is -0 under RD unless both operands
 * are +0 (add_round). */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m512d v8_add_x(const v8_consts *k, bool sub,
                                          bool zs, emu_rnd mode,
                                          bool exact, __m512d x, __m512d y,
                                          __mmask8 *bad, __mmask8 *big)
{
    __m512i r, u;
    __m512d v = v8_step(mode, false, exact, x, y, k->d, k->mask, k->nmask,
                        k->half, k->hm1, k->mn, k->mx, zs, &r, &u, bad);
    if (big)
        *big = _mm512_cmpge_epu64_mask(u, k->xt);
    if (!sub)
        return v;
    const __m512i one = _mm512_set1_epi64(1);
    const __m512i sgn = _mm512_set1_epi64((long long)SIGN_BIT);
    const __mmask8 nz = _mm512_test_epi64_mask(u, u);
    if (mode == EMU_RD) {
        __mmask8 z = (__mmask8)~nz &
                     _mm512_test_epi64_mask(_mm512_or_si512(
                         _mm512_castpd_si512(x), _mm512_castpd_si512(y)),
                         _mm512_set1_epi64(-1));
        v = _mm512_castsi512_pd(_mm512_mask_mov_epi64(
            _mm512_castpd_si512(v), z, sgn));
    }
    __mmask8 tiny = _mm512_cmplt_epu64_mask(u, k->mn) & nz;
    if (!tiny)
        return v;
    __m512i ef = _mm512_srli_epi64(u, 52);
    __m512i m = _mm512_or_si512(
        _mm512_and_si512(u, _mm512_set1_epi64((long long)(((uint64_t)1 << 52) - 1))),
        _mm512_set1_epi64((long long)((uint64_t)1 << 52)));
    __m512i sh = _mm512_min_epu64(_mm512_sub_epi64(k->shb, ef),
                                  _mm512_set1_epi64(63));
    __m512i msk = _mm512_sub_epi64(_mm512_sllv_epi64(one, sh), one);
    __m512i hf = _mm512_sllv_epi64(one, _mm512_sub_epi64(sh, one));
    __m512i rm;
    switch (mode) {
    case EMU_RNE:
        rm = _mm512_add_epi64(_mm512_add_epi64(m, _mm512_sub_epi64(hf, one)),
                              _mm512_and_si512(_mm512_srlv_epi64(m, sh), one));
        break;
    case EMU_RNA:
        rm = _mm512_add_epi64(m, hf);
        break;
    case EMU_RU:
    case EMU_RD: {
        __mmask8 neg = _mm512_movepi64_mask(_mm512_castpd_si512(v));
        __mmask8 up = mode == EMU_RU ? (__mmask8)~neg : neg;
        rm = _mm512_mask_add_epi64(m, up, m, msk);
        break;
    }
    case EMU_RO: {
        /* the kept bits' last one set if any dropped bit is */
        __m512i f = _mm512_and_si512(m, msk);
        __mmask8 inex = _mm512_test_epi64_mask(f, f);
        rm = _mm512_mask_or_epi64(m, inex, m, _mm512_sllv_epi64(one, sh));
        break;
    }
    default:
        rm = m;
        break;
    }
    __m512i R = _mm512_srlv_epi64(rm, sh);
    __m512i rs = _mm512_or_si512(
        _mm512_castpd_si512(_mm512_mul_pd(_mm512_cvtepu64_pd(R), k->quantum)),
        _mm512_and_si512(_mm512_castpd_si512(v), sgn));
    v = _mm512_castsi512_pd(_mm512_mask_mov_epi64(_mm512_castpd_si512(v),
                                                  tiny, rs));
    /* a binary64 subnormal (no implicit bit) stays with the C lanes */
    *bad = (__mmask8)(*bad & ~tiny) |
           (tiny & _mm512_cmpeq_epi64_mask(ef, _mm512_setzero_si512()));
    return v;
}

EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m512d v8_add(const v8_consts *k, bool sub,
                                        bool zs, emu_rnd mode,
                                        bool exact, __m512d x, __m512d y,
                                        __mmask8 *bad)
{
    return v8_add_x(k, sub, zs, mode, exact, x, y, bad, NULL);
}

/* The lanes in which h, the exact sum of two values of acc (a multiple of
 * its quantum, exact in binary64 under sums_exact), is itself a value of
 * acc, so that rounding it changes nothing: no bits below the format's
 * last place in the normal range (a multiple of the quantum below 2^emin
 * is a subnormal of acc, if acc has them), not above max, and not a zero
 * whose sign the rounding would decide otherwise than binary64's addition
 * (RD's exact zero sums, fnuz's), which v8_add handles. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __mmask8 v8_keeps(const v8_consts *k, bool sub,
                                           bool zs, emu_rnd mode, __m512d h)
{
    const __m512i hb = _mm512_castpd_si512(h);
    const __m512i u = _mm512_and_si512(hb, _mm512_set1_epi64(INT64_MAX));
    __mmask8 ok = _mm512_testn_epi64_mask(hb, k->mask) &
                  _mm512_cmple_epu64_mask(u, k->mx);
    if (!sub)
        ok &= _mm512_cmpge_epu64_mask(u, k->mn) | _mm512_testn_epi64_mask(u, u);
    if (zs || mode == EMU_RD)
        ok &= _mm512_test_epi64_mask(u, u);
    return ok;
}

EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m512d v8_neg(__m512d x)
{
    return _mm512_castsi512_pd(_mm512_xor_si512(
        _mm512_castpd_si512(x), _mm512_set1_epi64((long long)SIGN_BIT)));
}

/* count_lanes' bins of the addition s -> ns of t on 8 lanes, as offsets
 * into the lanes' histograms (off: lane j's first bin); *odd gets the
 * lanes count_lanes gives to the definition.  The lowest set bit of t's
 * significand from a leading-zero count of m & -m. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m256i v8_bins_any(const v8_consts *k, bool sub,
                                             __m512d s,
                                             __m512d ns, __m512d t,
                                             __m512i off, __mmask8 *odd)
{
    const __m512i vabs = _mm512_set1_epi64(INT64_MAX);
    const __m512i frac = _mm512_set1_epi64((long long)(((uint64_t)1 << 52) - 1));
    __m512i tu = _mm512_castpd_si512(t);
    __m512i tb = _mm512_slli_epi64(tu, 1);
    __m512i et = _mm512_srli_epi64(tb, 53);
    __m512i m = _mm512_and_si512(tu, frac);
    __m512i low = _mm512_and_si512(m, _mm512_sub_epi64(_mm512_setzero_si512(), m));
    __m512i ctz = _mm512_sub_epi64(_mm512_set1_epi64(63), _mm512_lzcnt_epi64(low));
    ctz = _mm512_mask_mov_epi64(ctz, _mm512_testn_epi64_mask(m, m),
                                _mm512_set1_epi64(52));
    __m512i lsb = _mm512_add_epi64(_mm512_sub_epi64(et, _mm512_set1_epi64(52)),
                                   ctz);
    __m512i nb = _mm512_castpd_si512(ns);
    __m512i nu = _mm512_and_si512(nb, vabs);
    __m512i en = _mm512_srli_epi64(nu, 52);
    if (sub) /* quantum_exp: emin's quantum below 2^emin (zero too) */
        en = _mm512_max_epi64(en, k->eminb);
    __m512i top = _mm512_sub_epi64(en, k->p);
    __m512i n = _mm512_sub_epi64(_mm512_min_epi64(et, top), lsb);
    n = _mm512_add_epi64(n, _mm512_set1_epi64(1));
    n = _mm512_max_epi64(n, _mm512_setzero_si512());
    n = _mm512_min_epi64(n, _mm512_set1_epi64(64));
    __mmask8 tnz = _mm512_test_epi64_mask(tb, tb);
    /* s_new == s as doubles (a zero s_new may differ from s in sign) */
    __mmask8 ab = _mm512_cmp_pd_mask(ns, s, _CMP_EQ_OQ) & tnz;
    n = _mm512_mask_mov_epi64(n, ab, _mm512_set1_epi64(EMU_LOST_BINS - 1));
    n = _mm512_maskz_mov_epi64(tnz, n);
    *odd = (sub ? 0 : _mm512_cmplt_epu64_mask(nu, k->mn)) |
           _mm512_cmpgt_epu64_mask(nu, k->mx) |
           _mm512_cmpeq_epi64_mask(et, _mm512_set1_epi64(0x7ff)) |
           (_mm512_cmpeq_epi64_mask(et, _mm512_setzero_si512()) & tnz);
    return _mm512_cvtepi64_epi32(_mm512_add_epi64(n, off));
}

/* Counts one addition of the JB lanes, s -> ns of t, into hist and cnt
 * (adds included), as count_lanes does. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE void v8_count(const seq_ctx *c, const v8_consts *k,
                                       bool sub, __m512d s0, __m512d s1,
                                       __m512d n0,
                                       __m512d n1, __m512d t0, __m512d t1,
                                       size_t jn,
                                       uint32_t (*hist)[EMU_LOST_BINS],
                                       emu_accum_counts *cnt)
{
    __mmask8 o0, o1;
    __m256i i0 = v8_bins_any(k, sub, s0, n0, t0, k->off0, &o0);
    __m256i i1 = v8_bins_any(k, sub, s1, n1, t1, k->off1, &o1);
    int32_t idx[JB];
    _mm256_storeu_si256((__m256i *)idx, i0);
    _mm256_storeu_si256((__m256i *)(idx + 8), i1);
    /* read back as scalars (see v8_steps) */
    __asm__ volatile("" : : "r"(idx) : "memory");
    uint32_t *hf = &hist[0][0];
    const unsigned odd = (unsigned)o0 | (unsigned)o1 << 8;
    if (!odd && jn == JB) {
        hf[idx[0]]++, hf[idx[1]]++, hf[idx[2]]++, hf[idx[3]]++;
        hf[idx[4]]++, hf[idx[5]]++, hf[idx[6]]++, hf[idx[7]]++;
        hf[idx[8]]++, hf[idx[9]]++, hf[idx[10]]++, hf[idx[11]]++;
        hf[idx[12]]++, hf[idx[13]]++, hf[idx[14]]++, hf[idx[15]]++;
        cnt->adds += JB;
        return;
    }
    double sv[JB], nv[JB], tv[JB];
    _mm512_storeu_pd(sv, s0), _mm512_storeu_pd(sv + 8, s1);
    _mm512_storeu_pd(nv, n0), _mm512_storeu_pd(nv + 8, n1);
    _mm512_storeu_pd(tv, t0), _mm512_storeu_pd(tv + 8, t1);
    for (size_t j = 0; j < jn; j++) {
        if (!(odd >> j & 1)) {
            hf[idx[j]]++;
            cnt->adds++;
        } else {
            accum_count_add(cnt, &c->g->model->acc, sv[j], tv[j], nv[j]);
        }
    }
}

/* One Kahan step of the JB lanes (kahan_step): ex as there, exl for the
 * last addition (d - y, both values of acc).  With xk, p - c is taken to
 * be exact in binary64 where its sum is below k->xt (kahan_v8_mode), and
 * a lane where it is not fails the step like a lane out of the domain.
 * With ex and exl, d = t - s and c = d - y, exact sums of values of acc,
 * are mostly values of acc already (t - s is exact whenever |s| >= |y|,
 * and then d - y is the rounding error of t): they are rounded only where
 * some lane is not (v8_keeps).  Returns false, leaving s and cc as they
 * were, if some lane left the domain. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE bool v8_kahan_step(const seq_ctx *c,
                                            const v8_consts *k, bool sub,
                                            bool zs, emu_rnd mode,
                                            bool ex, bool exl, bool xk,
                                            double ak, const double *b,
                                            __m512d *s, __m512d *cc,
                                            size_t jn, emu_accum_counts *cnt,
                                            uint32_t (*hist)[EMU_LOST_BINS])
{
    const __m512d a = _mm512_set1_pd(ak);
    __m512d y[2], t[2], d[2], cn[2];
    __mmask8 b0, b1, b2 = 0, b3 = 0, big = 0;
    unsigned bad = 0;
#pragma GCC unroll 2
    for (int v = 0; v < 2; v++) {
        __m512d p = _mm512_mul_pd(a, _mm512_loadu_pd(b + 8 * v));
        y[v] = xk ? v8_add_x(k, sub, zs, mode, true, p, v8_neg(cc[v]), &b0,
                             &big)
                  : v8_add(k, sub, zs, mode, false, p, v8_neg(cc[v]), &b0);
        t[v] = v8_add(k, sub, zs, mode, ex, s[v], y[v], &b1);
        if (ex && exl) {
            d[v] = _mm512_sub_pd(t[v], s[v]);
            b2 = 0;
            if (v8_keeps(k, sub, zs, mode, d[v]) != 0xff)
                d[v] = v8_add(k, sub, zs, mode, true, t[v], v8_neg(s[v]),
                              &b2);
            cn[v] = _mm512_sub_pd(d[v], y[v]);
            b3 = 0;
            if (v8_keeps(k, sub, zs, mode, cn[v]) != 0xff)
                cn[v] = v8_add(k, sub, zs, mode, true, d[v], v8_neg(y[v]),
                               &b3);
        } else {
            d[v] = v8_add(k, sub, zs, mode, ex, t[v], v8_neg(s[v]), &b2);
            cn[v] = v8_add(k, sub, zs, mode, exl, d[v], v8_neg(y[v]), &b3);
        }
        bad |= (unsigned)(b0 | b1 | b2 | b3 | big) << (8 * v);
    }
    if (bad)
        return false;
    if (cnt)
        v8_count(c, k, sub, s[0], s[1], t[0], t[1], y[0], y[1], jn, hist,
                 cnt);
    s[0] = t[0], s[1] = t[1];
    cc[0] = cn[0], cc[1] = cn[1];
    return true;
}

/* K(m) with m the constant for mode, so that each rounding mode runs its
 * own inlined copy of a lane kernel (the modes the lanes take). */
#define BY_MODE(mode, K)                                                    \
    do {                                                                    \
        switch (mode) {                                                     \
        case EMU_RNE: K(EMU_RNE); break;                                    \
        case EMU_RNA: K(EMU_RNA); break;                                    \
        case EMU_RU: K(EMU_RU); break;                                      \
        case EMU_RD: K(EMU_RD); break;                                      \
        case EMU_RO: K(EMU_RO); break;                                      \
        default: K(EMU_RZ); break;                                          \
        }                                                                   \
    } while (0)

/* A step that kahan_v8_mode's loop does not make itself (the first, one
 * in which some lane fails xk's test or leaves the domain): v8_kahan_step
 * without xk, else the C lanes.  io holds s and cc (two vectors each).
 * Apart and not inlined, so that the loop's registers stay the fast
 * step's. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE void kahan_v8_other(const seq_ctx *c,
                                             const v8_consts *k, emu_rnd mode,
                                             bool sx, size_t kk, double ak,
                                             const double *b, __m512d *io,
                                             size_t jn, emu_accum_counts *cnt,
                                             uint32_t (*hist)[EMU_LOST_BINS])
{
    /* s is a value of acc from the second step on (kahan_row_panel); the
     * exact variants inlined apart */
    const bool ks = k->sub, kz = k->zs;
    bool ok;
    if (kk == 0)
        ok = sx ? v8_kahan_step(c, k, ks, kz, mode, false, true, false, ak,
                                b, io, io + 2, jn, cnt, hist)
                : v8_kahan_step(c, k, ks, kz, mode, false, false, false, ak,
                                b, io, io + 2, jn, cnt, hist);
    else
        ok = sx ? v8_kahan_step(c, k, ks, kz, mode, true, true, false, ak,
                                b, io, io + 2, jn, cnt, hist)
                : v8_kahan_step(c, k, ks, kz, mode, false, false, false, ak,
                                b, io, io + 2, jn, cnt, hist);
    if (!ok) {
        double sv[JB], cv[JB];
        _mm512_storeu_pd(sv, io[0]), _mm512_storeu_pd(sv + 8, io[1]);
        _mm512_storeu_pd(cv, io[2]), _mm512_storeu_pd(cv + 8, io[3]);
        kahan_step_any(c, mode, sx && kk > 0, ak, b, sv, cv, jn, cnt, hist);
        io[0] = _mm512_loadu_pd(sv), io[1] = _mm512_loadu_pd(sv + 8);
        io[2] = _mm512_loadu_pd(cv), io[3] = _mm512_loadu_pd(cv + 8);
    }
}

EMU_ISA_TARGET_AVX512
static __attribute__((noinline)) void kahan_v8_slow(
    const seq_ctx *c, const v8_consts *k, emu_rnd mode, bool sx, size_t kk,
    double ak, const double *b, __m512d *io, size_t jn,
    emu_accum_counts *cnt, uint32_t (*hist)[EMU_LOST_BINS])
{
#define KO(m) kahan_v8_other(c, k, m, sx, kk, ak, b, io, jn, cnt, hist)
    BY_MODE(mode, KO);
#undef KO
}

EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE void kahan_v8_mode(const seq_ctx *c, emu_rnd mode,
                                            bool sub, size_t i, size_t q,
                                            const double *arow,
                                            emu_accum_counts *cnt,
                                            uint32_t (*hist)[EMU_LOST_BINS])
{
    const gemm_job *g = c->g;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const double *bp = c->bp;
    const bool sx = c->sums_exact;
    v8_consts kc;
    v8_consts_init(&kc, c, mode);
    /* sub is kc.sub as a constant (kahan_v8), and with it kc.zs is false:
     * the lanes' tests of both fold away (as fields of kc they were
     * reloaded and tested at every step) */
    const bool zs = sub ? false : kc.zs;
    double sv[JB];
    for (size_t j = 0; j < JB; j++)
        sv[j] = g->c && j < jn ? g->c[i * g->N + j0 + j] : 0.0;
    /* Every product is a multiple of 2^L, L = row_lsb + panel_lsb, and so
     * are the initial values (L lowered to their lowest bits), and then
     * every value of the recurrence: a rounding that changes a multiple of
     * 2^L lands on a grid whose spacing is above 2^L.  So p - c is exact
     * in binary64 if its binary64 sum is below 2^(L + 53) (rounding being
     * monotonic, the exact sum is then below it too, a multiple of 2^L of
     * at most 53 bits), which v8_kahan_step tests per lane instead of
     * TwoSum.  Steps that fail the test are done again with TwoSum; after
     * XK_MISSES of them the row-panel does without the test. */
    enum { XK_MISSES = 8 };
    int L = c->row_lsb < NO_LSB && c->panel_lsb < NO_LSB
          ? c->row_lsb + c->panel_lsb : NO_LSB;
    for (size_t j = 0; j < jn; j++)
        if (isfinite(sv[j]) && sv[j] != 0.0 && lowest_bit(sv[j]) < L)
            L = lowest_bit(sv[j]);
    /* L >= -1074, so 2^(L + 53) is a normal double; inf's pattern when
     * every binary64 sum of multiples of 2^L is exact */
    kc.xt = _mm512_set1_epi64(L + 53 >= 1024 ? (long long)0x7ff0000000000000
                                              : (long long)(L + 53 + 1023) << 52);
    bool xk = sx;
    unsigned misses = 0;
    __m512d s[2] = { _mm512_loadu_pd(sv), _mm512_loadu_pd(sv + 8) };
    __m512d cc[2] = { _mm512_setzero_pd(), _mm512_setzero_pd() };
    for (size_t kk = 0; kk < K; kk++) {
        const double ak = arow[kk], *b = bp + kk * JB;
        if (kk > 0 && xk) {
            if (v8_kahan_step(c, &kc, sub, zs, mode, true, true, true, ak, b,
                              s, cc, jn, cnt, hist))
                continue;
            if (++misses >= XK_MISSES)
                xk = false;
        } else if (kk > 0 && !sx) {
            /* no sums known exact: the general step, inlined too */
            if (v8_kahan_step(c, &kc, sub, zs, mode, false, false, false, ak,
                              b, s, cc, jn, cnt, hist))
                continue;
        }
        __m512d io[4] = { s[0], s[1], cc[0], cc[1] };
        kahan_v8_slow(c, &kc, mode, sx, kk, ak, b, io, jn, cnt, hist);
        s[0] = io[0], s[1] = io[1], cc[0] = io[2], cc[1] = io[3];
    }
    _mm512_storeu_pd(sv, s[0]), _mm512_storeu_pd(sv + 8, s[1]);
    for (size_t j = 0; j < jn; j++)
        g->hi[i * g->N + j0 + j] = sv[j];
}


EMU_ISA_TARGET_AVX512
static void kahan_v8(const seq_ctx *c, emu_rnd mode, size_t i, size_t q,
                     const double *arow, emu_accum_counts *cnt,
                     uint32_t (*hist)[EMU_LOST_BINS])
{
    /* v8_consts_init's sub (and then !zs): the common accumulators' */
    const bool sub = c->g->model->acc.subnormals && !c->pl.zero_slow;
#define KV8(m)                                                            \
    (cnt ? (sub ? kahan_v8_mode(c, m, true, i, q, arow, cnt, hist)         \
                : kahan_v8_mode(c, m, false, i, q, arow, cnt, hist))       \
         : (sub ? kahan_v8_mode(c, m, true, i, q, arow, NULL, hist)        \
                : kahan_v8_mode(c, m, false, i, q, arow, NULL, hist)))
    BY_MODE(mode, KV8);
#undef KV8
}
#endif

/* One node of the pairwise tree on the lanes: out = round(l + r),
 * counted with the operand of smaller magnitude as the addend (the right
 * one on a tie). */
static EMU_ALWAYS_INLINE void pw_node(const seq_ctx *c, emu_rnd mode,
                                      const double *l, const double *r,
                                      double *out, size_t jn,
                                      emu_accum_counts *cnt,
                                      uint32_t (*hist)[EMU_LOST_BINS])
{
    lanes_add(c, mode, false, l, r, out, jn);
    if (cnt) {
        double big[JB], small[JB];
        for (size_t j = 0; j < JB; j++) {
            bool lbig = fabs(l[j]) >= fabs(r[j]);
            big[j] = lbig ? l[j] : r[j];
            small[j] = lbig ? r[j] : l[j];
        }
        count_lanes(c, &c->g->model->acc, big, out, small, jn, hist, cnt);
    }
}

#if EMU_HAVE_ISA_CLONES
/* pw_node for a mode that is not a constant (the AVX-512 tree's way back
 * to the C lanes). */
static void pw_node_any(const seq_ctx *c, emu_rnd mode, const double *l,
                        const double *r, double *out, size_t jn,
                        emu_accum_counts *cnt,
                        uint32_t (*hist)[EMU_LOST_BINS])
{
    pw_node(c, mode, l, r, out, jn, cnt, hist);
}

/* pw_node at the AVX-512 level on register lanes; a node with a lane
 * outside v8_add's domain is done again by pw_node_any. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE void pw_node_v8(const seq_ctx *c, const v8_consts *k,
                                         emu_rnd mode, __m512d *l,
                                         const __m512d *r, size_t jn,
                                         emu_accum_counts *cnt,
                                         uint32_t (*hist)[EMU_LOST_BINS])
{
    __mmask8 b0, b1;
    __m512d s0 = v8_add(k, k->sub, k->zs, mode, false, l[0], r[0], &b0);
    __m512d s1 = v8_add(k, k->sub, k->zs, mode, false, l[1], r[1], &b1);
    if (b0 | b1) {
        double lv[JB], rv[JB], sv[JB];
        _mm512_storeu_pd(lv, l[0]), _mm512_storeu_pd(lv + 8, l[1]);
        _mm512_storeu_pd(rv, r[0]), _mm512_storeu_pd(rv + 8, r[1]);
        pw_node_any(c, mode, lv, rv, sv, jn, cnt, hist);
        l[0] = _mm512_loadu_pd(sv), l[1] = _mm512_loadu_pd(sv + 8);
        return;
    }
    if (cnt) {
        __m512d big[2], small[2];
        for (int v = 0; v < 2; v++) {
            __mmask8 lbig = _mm512_cmp_pd_mask(_mm512_abs_pd(l[v]),
                                               _mm512_abs_pd(r[v]),
                                               _CMP_GE_OQ);
            big[v] = _mm512_mask_blend_pd(lbig, r[v], l[v]);
            small[v] = _mm512_mask_blend_pd(lbig, l[v], r[v]);
        }
        v8_count(c, k, k->sub, big[0], big[1], s0, s1, small[0], small[1],
                 jn, hist, cnt);
    }
    l[0] = s0, l[1] = s1;
}

/* The pairwise tree of pw_row_panel (K + init >= 2 leaves) at the AVX-512
 * level: the same frames, the partial sums a stack of register pairs, a
 * frame of two leaves added at once. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE void pw_tree_v8_mode(const seq_ctx *c, emu_rnd mode,
                                              const double *arow,
                                              const double *iv, bool init,
                                              size_t jn, double *res,
                                              emu_accum_counts *cnt,
                                              uint32_t (*hist)[EMU_LOST_BINS])
{
    const size_t K = c->g->K;
    const double *bp = c->bp;
    v8_consts k;
    v8_consts_init(&k, c, mode);
    enum { DEPTH = 130 };
    struct frame {
        size_t first, n;
        int stage;
    } f[DEPTH];
    __m512d v[DEPTH][2];
    int nf = 0, nv = 0;
    f[nf++] = (struct frame){ 0, K + init, 0 };
#define PW_LEAF(dst, l)                                                    \
    do {                                                                   \
        if (init && (l) == 0) {                                            \
            (dst)[0] = _mm512_loadu_pd(iv);                                \
            (dst)[1] = _mm512_loadu_pd(iv + 8);                            \
        } else {                                                           \
            const size_t kl = (l) - init;                                  \
            const __m512d a = _mm512_set1_pd(arow[kl]);                    \
            (dst)[0] = _mm512_mul_pd(a, _mm512_loadu_pd(bp + kl * JB));    \
            (dst)[1] = _mm512_mul_pd(a, _mm512_loadu_pd(bp + kl * JB + 8)); \
        }                                                                  \
    } while (0)
    while (nf) {
        struct frame *fr = &f[nf - 1];
        if (fr->n == 1) {
            PW_LEAF(v[nv], fr->first);
            nv++;
            nf--;
        } else if (fr->n == 2) {
            __m512d rl[2];
            PW_LEAF(v[nv], fr->first);
            PW_LEAF(rl, fr->first + 1);
            pw_node_v8(c, &k, mode, v[nv], rl, jn, cnt, hist);
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
            pw_node_v8(c, &k, mode, v[nv - 2], v[nv - 1], jn, cnt, hist);
            nv--;
            nf--;
        }
    }
#undef PW_LEAF
    _mm512_storeu_pd(res, v[0][0]);
    _mm512_storeu_pd(res + 8, v[0][1]);
}

EMU_ISA_TARGET_AVX512
static void pw_tree_v8(const seq_ctx *c, emu_rnd mode, const double *arow,
                       const double *iv, bool init, size_t jn, double *res,
                       emu_accum_counts *cnt, uint32_t (*hist)[EMU_LOST_BINS])
{
#define PV8(m)                                                             \
    (cnt ? pw_tree_v8_mode(c, m, arow, iv, init, jn, res, cnt, hist)       \
         : pw_tree_v8_mode(c, m, arow, iv, init, jn, res, NULL, hist))
    BY_MODE(mode, PV8);
#undef PV8
}
#endif

/* The pairwise tree of dot_pairwise on the lanes, walked without
 * recursion (the kernel is inlined for a constant mode): frames of
 * (first leaf, leaves, stage), partial sums on a stack of lane vectors.
 * Each node is one rounded addition; the node order is irrelevant to
 * deterministic modes, the tree's shape is everything. */
static EMU_ALWAYS_INLINE void pw_row_panel(const seq_ctx *c, emu_rnd mode,
                                           size_t i, size_t q,
                                           const double *arow,
                                           emu_accum_counts *cnt,
                                           uint32_t (*hist)[EMU_LOST_BINS])
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
        lanes_add(c, mode, false, zero, t, res, jn);
        if (cnt)
            for (size_t j = 0; j < jn; j++)
                accum_count_add(cnt, &g->model->acc, 0.0, t[j],
                                res[j]);
#if EMU_HAVE_ISA_CLONES
    } else if (c->v8) {
        pw_tree_v8(c, mode, arow, iv, init, jn, res, cnt, hist);
#endif
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
                pw_node(c, mode, l, r, sum, jn, cnt, hist);
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
                                        emu_accum_counts *cnt,
                                        uint32_t (*hist)[EMU_LOST_BINS])
{
    if (c->kind == EMU_ACCUM_KAHAN)
        kahan_row_panel(c, mode, i, q, arow, cnt, hist);
    else if (c->kind == EMU_ACCUM_PAIRWISE)
        pw_row_panel(c, mode, i, q, arow, cnt, hist);
    else
        seq_row_panel(c, mode, st, i, q, arow, la, cnt, hist);
}

/* Row i of A as doubles in arow, and its lowest set bits in la (with the
 * lowest-bit tables); returns whether the row is finite.  Branch-free
 * loops that compilers vectorise, cheap enough to run once per row and
 * panel (a K-term conversion against the panel's 16 K multiply-adds), so
 * that the sequential and stochastic kernels need no copy of the worker's
 * rows: the 3/4 MB that copy took at 256^3 came fresh from the system on
 * every call (glibc trims the heap's top once the call's buffers are
 * freed), and its page faults cost as much as a third of a call. */
static EMU_ALWAYS_INLINE uint32_t load_run(const float *restrict a,
                                           ptrdiff_t cs, size_t K,
                                           double *restrict arow,
                                           int *restrict la, bool tables,
                                           int *lmin)
{
    uint32_t inf = 0;
    int lm = NO_LSB;
    for (size_t k = 0; k < K; k++) {
        const float x = a[(ptrdiff_t)k * cs];
        const uint32_t ax = f2u(x) & 0x7fffffff;
        const int lb = lowest_bit_f(x);
        arow[k] = x;
        if (tables)
            la[k] = lb;
        inf |= ax >= 0x7f800000;
        /* NO_LSB unless finite and non-zero (1 <= ax < 0x7f800000), as
         * arithmetic: a conditional here kept GCC from vectorising */
        const int32_t use = -(int32_t)(ax - 1 < 0x7f800000 - 1);
        const int l = NO_LSB + ((lb - NO_LSB) & use);
        lm = l < lm ? l : lm;
    }
    *lmin = lm;
    return inf;
}

static EMU_ALWAYS_INLINE bool load_row(const seq_ctx *c, size_t i,
                                       double *arow, int *la, int *lmin)
{
    const gemm_job *g = c->g;
    const float *a = g->a + (ptrdiff_t)i * g->a_rs;
    /* each case its own loop: unit stride and no tables vectorise best */
    uint32_t inf;
    if (g->a_cs == 1)
        inf = c->tables ? load_run(a, 1, g->K, arow, la, true, lmin)
                        : load_run(a, 1, g->K, arow, la, false, lmin);
    else
        inf = c->tables ? load_run(a, g->a_cs, g->K, arow, la, true, lmin)
                        : load_run(a, g->a_cs, g->K, arow, la, false, lmin);
    return !inf;
}

/* The mode is a constant inside each instance of the kernel.  On x86-64
 * Linux the kernels are also compiled for AVX2 and AVX-512 and picked at
 * load time by the CPU (GCC/Clang function multiversioning): the same
 * source and the same IEEE operations, so the same results, in 4 or 8
 * lanes per instruction instead of SSE2's 2; no -march flag is needed.
 * -DEMU_NO_TARGET_CLONES builds the baseline only. */
EMU_TARGET_CLONES
static void seq_rows(const seq_ctx *c0, size_t q, size_t r0, size_t r1,
                     double *arow, int *la, emu_accum_counts *cnt)
{
    const gemm_job *g = c0->g;
    seq_state st = { false, 0, 0 };
    /* The AVX-512 kernel's table of bin pairs, under the same bound. */
    uint32_t pt[PT_SIZE];
    seq_ctx cl = *c0;
    const seq_ctx *c = &cl;
    cl.pt = pt;
    /* Swamping histograms, one per lane, kept over the rows and emptied
     * into cnt before a bin could pass 2^32 - 1 (a row-panel adds at most
     * K + 1 to a lane's bins): emptying them per row-panel cost as much as
     * a sixth of the counting at K = 256. */
    uint32_t hist[JB][EMU_LOST_BINS];
    uint64_t pending = 0;
    if (cnt) {
        memset(hist, 0, sizeof hist);
        memset(pt, 0, sizeof pt);
    }
    for (size_t i = r0; i < r1; i++) {
        if (cnt && pending + g->K + 1 > UINT32_MAX) {
            flush_hist(hist, cnt);
            flush_pairs(pt, cnt);
            pending = 0;
        }
        pending += g->K + 1;
        load_row(c, i, arow, la, &cl.row_lsb);
        switch (c->pl.mode) {
        case EMU_RNE:
            row_panel(c, EMU_RNE, &st, i, q, arow, la, cnt, hist);
            break;
        case EMU_RNA:
            row_panel(c, EMU_RNA, &st, i, q, arow, la, cnt, hist);
            break;
        case EMU_RU:
            row_panel(c, EMU_RU, &st, i, q, arow, la, cnt, hist);
            break;
        case EMU_RD:
            row_panel(c, EMU_RD, &st, i, q, arow, la, cnt, hist);
            break;
        case EMU_RO:
            row_panel(c, EMU_RO, &st, i, q, arow, la, cnt, hist);
            break;
        default:
            row_panel(c, EMU_RZ, &st, i, q, arow, la, cnt, hist);
            break;
        }
    }
    if (cnt) {
        flush_hist(hist, cnt);
        flush_pairs(pt, cnt);
    }
}

/* ---- the other kernels: fused unit, exact sum, stochastic sequential -----
 * The same panels and lanes as above.  Each kernel covers the common case
 * (finite inputs, every step's result in range) and hands a whole
 * row-panel to the definition when it meets anything else before it has
 * counted anything outside its own histograms: its results and counts are
 * then the definition's by construction. */

/* Width in bits of x's significand, from its leading to its lowest set
 * bit (0 for zero, inf and NaN). */
static int sig_width_f(float x)
{
    if (!isfinite(x) || x == 0.0f)
        return 0;
    return exponent_of(x) - lowest_bit(x) + 1;
}

/* Row i against panel q by the definition, one dot product at a time. */
static void ref_row_panel(const seq_ctx *c, size_t i, size_t q,
                          emu_accum_counts *cnt)
{
    const gemm_job *g = c->g;
    const size_t j0 = q * JB, jn = g->N - j0 < JB ? g->N - j0 : JB;
    for (size_t j = 0; j < jn; j++) {
        size_t o = i * g->N + j0 + j;
        emu_accum_rng rng = { g->seed, g->stream, g->dot0 + o };
        double lo;
        g->hi[o] = emu_accum_dot_init_unguarded(
            g->model, g->a + (ptrdiff_t)i * g->a_rs, g->a_cs,
            g->b + (ptrdiff_t)(j0 + j) * g->b_cs, g->b_rs, g->K,
            g->c ? g->c + o : NULL, &rng, cnt, &lo);
        if (g->lo)
            g->lo[o] = lo;
    }
}

/* Where the random words of output o start (accum.h): its stream, and
 * the index of its word 0. */
static void out_words(const seq_ctx *c, size_t o, uint64_t *stream,
                      uint64_t *base)
{
    emu_accum_rng rng = { c->g->seed, c->g->stream, c->g->dot0 + o };
    dot_words(&rng, c->g->K, stream, base);
}

/* n words of output o from its word `first` on (emu_random_fill asked from
 * an even index, where it runs its vector blocks); tmp holds n + 1. */
static void out_fill(const seq_ctx *c, uint64_t stream, uint64_t first,
                     uint64_t *out, size_t n, uint64_t *tmp)
{
    size_t odd = (size_t)(first & 1);
    emu_random_fill(c->g->seed, stream, first - odd, tmp, n + odd);
    memcpy(out, tmp + odd, n * sizeof *out);
}

/* n words of a stream from its word `first` on, in place: filled into tmp
 * (n + 1 words) from the even index below `first`; returns where word
 * `first` landed (out_fill without its copy). */
static const uint64_t *out_fill_at(const seq_ctx *c, uint64_t stream,
                                   uint64_t first, size_t n, uint64_t *tmp)
{
    size_t odd = (size_t)(first & 1);
    emu_random_fill(c->g->seed, stream, first - odd, tmp, n + odd);
    return tmp + odd;
}

/* round(hi + lo) into acc with `word` (stochastic modes): step_round. */
static double round_pair(const seq_ctx *c, double hi, double lo,
                         uint64_t word)
{
    const emu_accum *m = c->g->model;
    double out;
    if (c->pl.ok && (c->sr ? fast_round_sr(&c->pl, hi, lo, word, &out)
                           : fast_round(&c->pl, hi, lo, &out)))
        return out;
    return emu_round2_word_unguarded(&m->acc, hi, lo, &m->rnd,
                                     c->sr ? word : 0, NULL);
}

/* Adds the histograms of lanes j < jn to cnt with their adds. */
static void flush_lanes(uint32_t (*hist)[EMU_LOST_BINS], size_t jn,
                        uint64_t adds_per_lane, emu_accum_counts *cnt)
{
    for (size_t j = jn; j < JB; j++)
        memset(hist[j], 0, sizeof hist[j]);
    flush_hist(hist, cnt);
    cnt->adds += adds_per_lane * jn;
}

/* trunc(x) for |x| < 2^52: the nearest integer of |x| by the addition of
 * 2^52 (binary64 rounds to nearest under the guard), one less if that
 * went up, and x's sign back. */
static EMU_ALWAYS_INLINE double trunc52(double x)
{
    uint64_t xb = d2u(x), sg = xb & SIGN_BIT;
    double ax = u2d(xb ^ sg);
    double r = (ax + 0x1p52) - 0x1p52;
    /* r - 1.0 or r - +0 (r itself, r being >= +0): a select of doubles
     * became a branch where GCC left the loop scalar */
    r -= u2d(d2u(1.0) & -(uint64_t)(r > ax));
    return u2d(d2u(r) | sg);
}

/* dot_fused on the lanes.  Per group, the largest magnitude among s and
 * the terms gives E (a maximum of doubles, then its exponent field; all
 * of them are normal binary64 values or zeros), each value is scaled by
 * 2^-Q, exact, or below 1 and truncated to zero anyway, and truncated; the
 * sum of the truncated integers is exact in a double because the kernel
 * takes the model only when (k + 1) 2^w <= 2^53 (gemm_kernel_of).  Scaled
 * back by 2^Q it is dot_fused's hi, and lo a zero of its sign.  Swamping
 * per term from the patterns: the leading bit from the exponent field,
 * the lowest from the lowest-bit tables. */
static EMU_ALWAYS_INLINE bool fused_row_panel(const seq_ctx *c, size_t i,
                                              size_t q, const double *arow,
                                              const int *la,
                                              emu_accum_counts *cnt,
                                              uint64_t *words, uint64_t *tmp)
{
    const gemm_job *g = c->g;
    const emu_accum *m = g->model;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const size_t kk = m->fused_k ? m->fused_k : 1;
    const int64_t w = (int64_t)m->fused_w;
    const double *bp = c->bp;
    const int64_t *lb = c->lbp;
    if (!c->row_finite || !c->panel_finite)
        return false;
    double s[JB];
    for (size_t j = 0; j < JB; j++) {
        s[j] = g->c && j < jn ? g->c[i * g->N + j0 + j] : 0.0;
        if (!isfinite(s[j]))
            return false;
    }
    const size_t groups = (K + kk - 1) / kk;
    if (c->sr)
        for (size_t j = 0; j < jn; j++) {
            uint64_t st, base;
            out_words(c, i * g->N + j0 + j, &st, &base);
            out_fill(c, st, base + K, words + j * groups, groups, tmp);
        }
    uint32_t hist[JB][EMU_LOST_BINS];
    if (cnt)
        memset(hist, 0, sizeof hist);
    for (size_t k0 = 0, r = 0; k0 < K; k0 += kk, r++) {
        const size_t k1 = K - k0 < kk ? K : k0 + kk;
        double sc[JB], n[JB], sn[JB];
        int64_t qe[JB];
        /* The largest magnitude as the largest pattern (the values are
         * finite: the order of their patterns without the sign is
         * theirs), so that the loop vectorises; the maximum of the
         * doubles was left scalar. */
        uint64_t mx[JB];
        for (size_t j = 0; j < JB; j++)
            mx[j] = d2u(s[j]) & ~SIGN_BIT;
        for (size_t k = k0; k < k1; k++) {
            const double ak = arow[k], *b = bp + k * JB;
            for (size_t j = 0; j < JB; j++) {
                uint64_t t = d2u(ak * b[j]) & ~SIGN_BIT;
                mx[j] = t > mx[j] ? t : mx[j];
            }
        }
        for (size_t j = 0; j < JB; j++) {
            int64_t ef = (int64_t)(mx[j] >> 52);
            int64_t Q = ef ? ef - 1023 - w + 1 : 0; /* all zero: Q = 0 */
            qe[j] = Q;
            sc[j] = u2d((uint64_t)(1023 - Q) << 52);
            n[j] = 0.0 + trunc52(s[j] * sc[j]); /* +0 for a zero sum */
        }
        for (size_t k = k0; k < k1; k++) {
            const double ak = arow[k], *b = bp + k * JB;
            for (size_t j = 0; j < JB; j++)
                n[j] += trunc52(ak * b[j] * sc[j]);
        }
        for (size_t j = 0; j < jn; j++) {
            double hv = n[j] * u2d((uint64_t)(1023 + qe[j]) << 52);
            sn[j] = round_pair(c, hv, u2d(d2u(hv) & SIGN_BIT),
                               c->sr ? words[j * groups + r] : 0);
            if (!isfinite(sn[j]))
                return false; /* later groups are dot_fused's special ones */
        }
        if (cnt) {
            /* Biased exponents: absorbed below Q, bits lost below the
             * coarser of 2^Q and ulp(s_new). */
            int64_t top[JB], qb[JB];
            for (size_t j = 0; j < JB; j++) {
                int64_t qa = j < jn ? quantum_exp(&m->acc, sn[j]) : 0;
                qb[j] = qe[j] + 1023;
                top[j] = (qa > qe[j] ? qa : qe[j]) - 1 + 1023;
            }
            /* The bins of up to FB steps as offsets into the lanes'
             * histograms (vector code), then their increments: reading
             * each step's bins back right after its vector store stalled
             * on store forwarding. */
            enum { FB = 16 };
            uint32_t *hf = &hist[0][0];
            for (size_t kb = k0; kb < k1; kb += FB) {
                const size_t ke = k1 - kb < FB ? k1 : kb + FB;
                int32_t off[FB * JB];
                for (size_t k = kb; k < ke; k++) {
                    const double ak = arow[k], *b = bp + k * JB;
                    const int64_t *lk = lb + k * JB, l0 = la[k] + 1;
                    int32_t *o = off + (k - kb) * JB;
                    for (size_t j = 0; j < JB; j++) {
                        uint64_t tb = d2u(ak * b[j]) << 1;
                        int64_t et = (int64_t)(tb >> 53);
                        int64_t hb = et < top[j] ? et : top[j];
                        int64_t nb = hb - (l0 + lk[j]) + 1;
                        nb = nb < 0 ? 0 : nb > 64 ? 64 : nb;
                        nb = et < qb[j] ? EMU_LOST_BINS - 1 : nb;
                        nb = tb == 0 ? 0 : nb;
                        o[j] = (int32_t)(nb + (int64_t)j * EMU_LOST_BINS);
                    }
                }
                /* a step's JB increments unrolled: the loop's own
                 * counting was most of its instructions */
                for (size_t x = 0; x < (ke - kb) * JB; x += JB) {
                    const int32_t *o = off + x;
#pragma GCC unroll 16
                    for (size_t j = 0; j < JB; j++)
                        hf[o[j]]++;
                }
            }
        }
        for (size_t j = 0; j < jn; j++)
            s[j] = sn[j];
    }
    for (size_t j = 0; j < jn; j++)
        g->hi[i * g->N + j0 + j] = s[j];
    if (cnt)
        flush_lanes(hist, jn, K, cnt);
    return true;
}

/* The exact model: per lane, binary64 bins of 2^XB_SHIFT binades each
 * (bin = exponent field >> XB_SHIFT, less XB_FIRST, at least 0; a product
 * of two binary32 values has a field in [725, 1278]), and dot_exact's
 * fixed-point accumulator for the bins' sums.  A bin's terms are
 * multiples of 2^(e0 - W + 1) below 2^(e0 + 8) in magnitude (e0 its
 * lowest binade, W the widest product significand: the row's widest
 * significand plus the panel's), so up to 2^(46 - W) of them add up
 * exactly in a double; the bins are emptied into the accumulator that
 * often.  The sum is the same exact number, so its roundings are
 * dot_exact's. */
enum { XB_SHIFT = 3, XB_FIRST = 90, XB_N = 71, XB_MAX_W = 40, XV_RUN = 8 };

static void exact_flush(double *bins, xacc *xa, size_t jn)
{
    for (size_t j = 0; j < jn; j++)
        for (size_t b = 0; b < XB_N; b++)
            if (bins[j * XB_N + b] != 0.0) {
                xacc_add_double(&xa[j], bins[j * XB_N + b]);
                bins[j * XB_N + b] = 0.0;
            }
}

static EMU_ALWAYS_INLINE bool exact_row_panel(const seq_ctx *c, size_t i,
                                              size_t q, const double *arow,
                                              emu_accum_counts *cnt,
                                              double *bins, xacc *xa)
{
    const gemm_job *g = c->g;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const double *bp = c->bp;
    const int W = c->row_w + c->panel_w;
    if (!c->row_finite || !c->panel_finite || W > XB_MAX_W)
        return false;
    const bool init = g->c != NULL;
    for (size_t j = 0; j < jn; j++)
        if (init && !isfinite(g->c[i * g->N + j0 + j]))
            return false;
    const size_t F = (size_t)1 << (46 - W);
    memset(bins, 0, JB * XB_N * sizeof *bins);
    memset(xa, 0, JB * sizeof *xa);
    uint64_t nz[JB]; /* every leaf so far is -0 */
    for (size_t j = 0; j < JB; j++)
        nz[j] = K + init > 0;
    if (init)
        for (size_t j = 0; j < jn; j++) {
            double v = g->c[i * g->N + j0 + j];
            xacc_add_double(&xa[j], v);
            nz[j] &= d2u(v) == SIGN_BIT;
        }
    /* With few bins, bins of g binades over the products' exponent range,
     * each a vector of lanes added to under a mask: the terms' exponents
     * lie in [lo, hi] (the row's and the panel's ranges added, and one
     * binade more for the carry of the significands' product), and up to
     * 2^XV_RUN of them add up exactly in a bin of g binades: below
     * 2^(g + XV_RUN) times the bin's least power, multiples of 2^(1 - W)
     * times it, so g + XV_RUN + W - 1 <= 53. */
    const int g4 = 54 - W - XV_RUN;
    if (c->row_lo <= c->row_hi && c->panel_lo <= c->panel_hi && g4 >= 1) {
        const int64_t lo = c->row_lo + c->panel_lo + 1023;
        const int64_t span = (int64_t)(c->row_hi + c->panel_hi + 1023 + 1) - lo + 1;
        if (span <= 4 * (int64_t)g4) {
            const int64_t b1 = lo + g4, b2 = lo + 2 * g4, b3 = lo + 3 * g4;
            double v0[JB], v1[JB], v2[JB], v3[JB];
            for (size_t k0 = 0; k0 < K; k0 += (size_t)1 << XV_RUN) {
                const size_t k1 = K - k0 < ((size_t)1 << XV_RUN) ? K : k0 + ((size_t)1 << XV_RUN);
                for (size_t j = 0; j < JB; j++)
                    v0[j] = v1[j] = v2[j] = v3[j] = 0.0;
                /* The bins' masks as bits (a term, or +0 where t was
                 * 0.0 before): with the selects written as t or 0.0 GCC
                 * made branches of them, taken at random, and left the
                 * loop scalar (exact ran at 0.25 GMAC/s on AMD). */
                for (size_t k = k0; k < k1; k++) {
                    const double ak = arow[k], *b = bp + k * JB;
                    for (size_t j = 0; j < JB; j++) {
                        const uint64_t tb = d2u(ak * b[j]);
                        const int64_t f = (int64_t)((tb & ~SIGN_BIT) >> 52);
                        const uint64_t m1 = -(uint64_t)(f >= b1);
                        const uint64_t m2 = -(uint64_t)(f >= b2);
                        const uint64_t m3 = -(uint64_t)(f >= b3);
                        v0[j] += u2d(tb & ~m1);
                        v1[j] += u2d(tb & m1 & ~m2);
                        v2[j] += u2d(tb & m2 & ~m3);
                        v3[j] += u2d(tb & m3);
                        nz[j] &= tb == SIGN_BIT;
                    }
                }
                for (size_t j = 0; j < jn; j++) {
                    if (v0[j] != 0.0)
                        xacc_add_double(&xa[j], v0[j]);
                    if (v1[j] != 0.0)
                        xacc_add_double(&xa[j], v1[j]);
                    if (v2[j] != 0.0)
                        xacc_add_double(&xa[j], v2[j]);
                    if (v3[j] != 0.0)
                        xacc_add_double(&xa[j], v3[j]);
                }
            }
            goto round;
        }
    }
    for (size_t k = 0, since = 0; k < K; k++) {
        const double ak = arow[k], *b = bp + k * JB;
        for (size_t j = 0; j < JB; j++) {
            double t = ak * b[j];
            uint64_t tb = d2u(t);
            int64_t bi = (int64_t)((tb & ~SIGN_BIT) >> (52 + XB_SHIFT)) -
                         XB_FIRST;
            bi = bi < 0 ? 0 : bi;
            bins[j * XB_N + (size_t)bi] += t;
            nz[j] &= tb == SIGN_BIT;
        }
        if (++since == F) {
            exact_flush(bins, xa, jn);
            since = 0;
        }
    }
    exact_flush(bins, xa, jn);
round:
    for (size_t j = 0; j < jn; j++) {
        size_t o = i * g->N + j0 + j;
        double hi = xacc_round(&xa[j]), lo = 0.0;
        if (hi == 0.0) {
            hi = nz[j] ? -0.0 : 0.0;
        } else {
            xacc_add_double(&xa[j], -hi); /* exact, as in dot_exact */
            lo = xacc_round(&xa[j]);
        }
        g->hi[o] = hi;
        if (g->lo)
            g->lo[o] = lo;
    }
    if (cnt) {
        cnt->adds += K * jn;
        cnt->lost_bits[0] += K * jn;
    }
    return true;
}

/* One stochastic step of the JB lanes: ns[j] = round(sv[j] + ak b[j])
 * with word wv[j], fast_round_sr on the TwoSum pair written branch-free
 * (floor and the conversion to an integer by the 1.5 2^52 trick, valid
 * because |lo' 2^(64-q)| < 2^(p+11) there); the lanes fast_round_sr
 * declines are flagged for redo_sr.  Lanes out of the domain compute
 * garbage without undefined behaviour (the scale is clamped). */
static EMU_ALWAYS_INLINE uint64_t lanes_sr(const double *restrict sv,
                                           const double *restrict b,
                                           double ak,
                                           const uint64_t *restrict wv,
                                           double *restrict ns,
                                           uint64_t *restrict bad, int d,
                                           int64_t p, int64_t eminb,
                                           unsigned bits, uint64_t mx)
{
    const uint64_t mask = ((uint64_t)1 << d) - 1;
    const uint64_t frac = ((uint64_t)1 << 52) - 1;
    const double magic = 0x1.8p52;
    uint64_t any = 0;
    for (size_t j = 0; j < JB; j++) {
        double sj = sv[j], tj = ak * b[j];
        double h = sj + tj, bv = h - sj, av = h - bv;
        double l = (sj - av) + (tj - bv);
        uint64_t hb = d2u(h), sg = hb & SIGN_BIT, u = hb ^ sg;
        int64_t ef = (int64_t)(u >> 52);
        double al = u2d(d2u(l) ^ sg);
        /* 2^(64 - q), q = ef - 1023 - p + 1 */
        int64_t se = 2109 + p - ef;
        se = se < 1 ? 1 : se > 2046 ? 2046 : se;
        double x = al * u2d((uint64_t)se << 52);
        double r = (x + magic) - magic;
        r = r > x ? r - 1.0 : r;
        int64_t L = (int64_t)(d2u(r + magic) - d2u(magic));
        L -= (int64_t)((al < 0.0) & (x == 0.0));
        uint64_t R = u & mask, base = u & ~mask;
        base -= (uint64_t)((R == 0) & (L < 0)) << d;
        uint64_t Fq = (R << (64 - d)) + (uint64_t)L;
        uint64_t wj = wv[j], up;
        if (bits >= 64)
            up = wj + Fq < wj;
        else
            up = ((Fq >> (64 - bits)) + (wj >> (64 - bits))) >> bits;
        uint64_t rr = base + (up << d);
        uint64_t out = (uint64_t)((ef == 0) | (ef == 0x7ff) | (ef < eminb) |
                                  ((al < 0.0) & ((u & frac) == 0)) |
                                  (rr > mx));
        bad[j] = out;
        any |= out;
        ns[j] = u2d(rr | sg);
    }
    return any;
}

/* Redoes the flagged lanes j < jn as add_round does. */
static void redo_sr(const seq_ctx *c, const double *sv, const double *b,
                    double ak, const uint64_t *wv, double *ns,
                    const uint64_t *bad, size_t jn)
{
    for (size_t j = 0; j < jn; j++) {
        if (!bad[j])
            continue;
        double hi, lo;
        emu_two_sum(sv[j], ak * b[j], &hi, &lo);
        if (!isfinite(hi))
            lo = 0.0;
        ns[j] = round_pair(c, hi, lo, wv[j]);
    }
}

#if EMU_HAVE_ISA_CLONES
/* lanes_sr on 8 lanes (the same operations on the same patterns; the
 * floor by a rounding toward -inf, exact for |x| < 2^(p+11) as there). */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE __m512d v8_sr(__m512d s, __m512d t, __m512i w,
                                       int d, int64_t p, int64_t eminb,
                                       unsigned bits, __m512i vmx,
                                       __mmask8 *bad)
{
    const __m512i vabs = _mm512_set1_epi64(INT64_MAX);
    const __m512i frac = _mm512_set1_epi64((long long)(((uint64_t)1 << 52) - 1));
    const __m512i mask = _mm512_set1_epi64((long long)(((uint64_t)1 << d) - 1));
    const __m512i zero = _mm512_setzero_si512();
    __m512d h = _mm512_add_pd(s, t);
    __m512d bv = _mm512_sub_pd(h, s), av = _mm512_sub_pd(h, bv);
    __m512d l = _mm512_add_pd(_mm512_sub_pd(s, av), _mm512_sub_pd(t, bv));
    __m512i hb = _mm512_castpd_si512(h);
    __m512i u = _mm512_and_si512(hb, vabs);
    __m512i sg = _mm512_andnot_si512(vabs, hb);
    __m512i ef = _mm512_srli_epi64(u, 52);
    __m512d al = _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(l), sg));
    __m512i se = _mm512_sub_epi64(_mm512_set1_epi64(2109 + p), ef);
    se = _mm512_max_epi64(se, _mm512_set1_epi64(1));
    se = _mm512_min_epi64(se, _mm512_set1_epi64(2046));
    __m512d x = _mm512_mul_pd(al, _mm512_castsi512_pd(_mm512_slli_epi64(se, 52)));
    __m512d fl = _mm512_roundscale_pd(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512i L = _mm512_cvtpd_epi64(fl);
    __mmask8 aneg = _mm512_cmp_pd_mask(al, _mm512_setzero_pd(), _CMP_LT_OQ);
    __mmask8 xz = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_EQ_OQ);
    L = _mm512_mask_sub_epi64(L, aneg & xz, L, _mm512_set1_epi64(1));
    __m512i R = _mm512_and_si512(u, mask);
    __m512i base = _mm512_andnot_si512(mask, u);
    __mmask8 borrow = _mm512_testn_epi64_mask(R, R) &
                      _mm512_cmplt_epi64_mask(L, zero);
    base = _mm512_mask_sub_epi64(base, borrow, base,
                                 _mm512_set1_epi64((long long)((uint64_t)1 << d)));
    __m512i Fq = _mm512_add_epi64(_mm512_sll_epi64(R, _mm_cvtsi32_si128(64 - d)), L);
    __mmask8 up;
    if (bits >= 64) {
        up = _mm512_cmplt_epu64_mask(_mm512_add_epi64(w, Fq), w);
    } else {
        const __m128i sh = _mm_cvtsi32_si128((int)(64 - bits));
        __m512i sum = _mm512_add_epi64(_mm512_srl_epi64(Fq, sh),
                                       _mm512_srl_epi64(w, sh));
        /* (sum >> bits) != 0 */
        up = _mm512_test_epi64_mask(_mm512_srl_epi64(sum, _mm_cvtsi32_si128((int)bits)),
                                    _mm512_set1_epi64(-1));
    }
    __m512i rr = _mm512_mask_add_epi64(base, up, base,
                                       _mm512_set1_epi64((long long)((uint64_t)1 << d)));
    *bad = _mm512_testn_epi64_mask(ef, ef) |
           _mm512_cmpeq_epi64_mask(ef, _mm512_set1_epi64(0x7ff)) |
           _mm512_cmplt_epi64_mask(ef, _mm512_set1_epi64(eminb)) |
           (aneg & _mm512_testn_epi64_mask(u, frac)) |
           _mm512_cmpgt_epu64_mask(rr, vmx);
    return _mm512_castsi512_pd(_mm512_or_si512(rr, sg));
}

/* Steps k0 .. k0 + ch - 1 of srseq_row_panel at the AVX-512 level, the
 * lanes in registers: v8_sr, the lanes it declines redone by redo_sr, and
 * count_step's bins (lanes_bins, from the lowest-bit tables) as offsets
 * into the lanes' histograms; a lane lanes_bins gives to the definition
 * is counted by it, as there.  s: the lanes' sums, in and out. */
EMU_ISA_TARGET_AVX512
static EMU_ALWAYS_INLINE void sr_steps_v8_bits(const seq_ctx *c,
                                               const double *arow,
                                               const int *la,
                                               const double *bp,
                                               const int64_t *lb, size_t k0,
                                               size_t ch, const uint64_t *wk,
                                               double *s, size_t jn,
                                               emu_accum_counts *cnt,
                                               uint32_t (*hist)[EMU_LOST_BINS],
                                               unsigned bits)
{
    const int d = c->pl.d;
    const int64_t p = c->pl.p, eminb = c->pl.emin + 1023;
    const __m512i vmx = _mm512_set1_epi64((long long)d2u(c->pl.max));
    const __m512i vmn = _mm512_set1_epi64((long long)d2u(c->pl.min_normal));
    const __m512i vp = _mm512_set1_epi64(c->p);
    const __m512i vabs = _mm512_set1_epi64(INT64_MAX);
    const __m512i off0 = _mm512_mullo_epi64(
        _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi64(EMU_LOST_BINS));
    const __m512i off1 = _mm512_add_epi64(
        off0, _mm512_set1_epi64(8 * EMU_LOST_BINS));
    uint32_t *hf = &hist[0][0];
    __m512d s0 = _mm512_loadu_pd(s), s1 = _mm512_loadu_pd(s + 8);
    for (size_t kk = 0; kk < ch; kk++) {
        const size_t k = k0 + kk;
        const double ak = arow[k], *b = bp + k * JB;
        const uint64_t *w = wk + kk * JB;
        const __m512d a = _mm512_set1_pd(ak);
        __m512d t0 = _mm512_mul_pd(a, _mm512_loadu_pd(b));
        __m512d t1 = _mm512_mul_pd(a, _mm512_loadu_pd(b + 8));
        __mmask8 bad0, bad1;
        __m512d n0 = v8_sr(s0, t0, _mm512_loadu_si512(w), d, p, eminb, bits,
                           vmx, &bad0);
        __m512d n1 = v8_sr(s1, t1, _mm512_loadu_si512(w + 8), d, p, eminb,
                           bits, vmx, &bad1);
        if (bad0 | bad1) {
            double sv[JB], nv[JB];
            uint64_t bl[JB];
            _mm512_storeu_pd(sv, s0), _mm512_storeu_pd(sv + 8, s1);
            _mm512_storeu_pd(nv, n0), _mm512_storeu_pd(nv + 8, n1);
            const unsigned bad = (unsigned)bad0 | (unsigned)bad1 << 8;
            for (size_t j = 0; j < JB; j++)
                bl[j] = bad >> j & 1;
            redo_sr(c, sv, b, ak, w, nv, bl, jn);
            n0 = _mm512_loadu_pd(nv), n1 = _mm512_loadu_pd(nv + 8);
        }
        if (cnt) {
            /* lanes_bins: |s_new| out of the normal range, or t inf or
             * NaN, go to the definition */
            const __m512i L = _mm512_set1_epi64((int64_t)la[k]);
            __m512i u0 = _mm512_and_si512(_mm512_castpd_si512(n0), vabs);
            __m512i u1 = _mm512_and_si512(_mm512_castpd_si512(n1), vabs);
            __mmask8 z0, z1;
            __m256i i0 = v8_bins(s0, n0, t0, u0, u0,
                                 _mm512_add_epi64(L, _mm512_loadu_si512(lb + k * JB)),
                                 vp, off0, &z0);
            __m256i i1 = v8_bins(s1, n1, t1, u1, u1,
                                 _mm512_add_epi64(L, _mm512_loadu_si512(lb + k * JB + 8)),
                                 vp, off1, &z1);
            const __m512i inf = _mm512_set1_epi64(0x7ff);
            __mmask8 o0 = _mm512_cmplt_epu64_mask(u0, vmn) |
                          _mm512_cmpgt_epu64_mask(u0, vmx) |
                          _mm512_cmpeq_epi64_mask(_mm512_srli_epi64(
                              _mm512_slli_epi64(_mm512_castpd_si512(t0), 1), 53), inf);
            __mmask8 o1 = _mm512_cmplt_epu64_mask(u1, vmn) |
                          _mm512_cmpgt_epu64_mask(u1, vmx) |
                          _mm512_cmpeq_epi64_mask(_mm512_srli_epi64(
                              _mm512_slli_epi64(_mm512_castpd_si512(t1), 1), 53), inf);
            int32_t idx[JB];
            _mm256_storeu_si256((__m256i *)idx, i0);
            _mm256_storeu_si256((__m256i *)(idx + 8), i1);
            __asm__ volatile("" : : "r"(idx) : "memory");
            const unsigned odd = (unsigned)o0 | (unsigned)o1 << 8;
            if (!odd && jn == JB) {
                hf[idx[0]]++, hf[idx[1]]++, hf[idx[2]]++, hf[idx[3]]++;
                hf[idx[4]]++, hf[idx[5]]++, hf[idx[6]]++, hf[idx[7]]++;
                hf[idx[8]]++, hf[idx[9]]++, hf[idx[10]]++, hf[idx[11]]++;
                hf[idx[12]]++, hf[idx[13]]++, hf[idx[14]]++, hf[idx[15]]++;
            } else {
                double sv[JB], nv[JB];
                _mm512_storeu_pd(sv, s0), _mm512_storeu_pd(sv + 8, s1);
                _mm512_storeu_pd(nv, n0), _mm512_storeu_pd(nv + 8, n1);
                for (size_t j = 0; j < jn; j++) {
                    if (!(odd >> j & 1)) {
                        hf[idx[j]]++;
                    } else {
                        /* counted in full; the caller's adds cover all */
                        accum_count_add(cnt, &c->g->model->acc, sv[j],
                                        ak * b[j], nv[j]);
                        cnt->adds--;
                    }
                }
            }
        }
        s0 = n0, s1 = n1;
    }
    _mm512_storeu_pd(s, s0);
    _mm512_storeu_pd(s + 8, s1);
}

/* sr_steps_v8 with its random bits a constant where they are all 64 (the
 * stochastic modes but EMU_RS_BITS), so that v8_sr's test of them leaves
 * the loop. */
EMU_ISA_TARGET_AVX512
static void sr_steps_v8(const seq_ctx *c, const double *arow, const int *la,
                        const double *bp, const int64_t *lb, size_t k0,
                        size_t ch, const uint64_t *wk, double *s, size_t jn,
                        emu_accum_counts *cnt,
                        uint32_t (*hist)[EMU_LOST_BINS])
{
    if (c->pl.sr_bits >= 64)
        sr_steps_v8_bits(c, arow, la, bp, lb, k0, ch, wk, s, jn, cnt, hist,
                         64);
    else
        sr_steps_v8_bits(c, arow, la, bp, lb, k0, ch, wk, s, jn, cnt, hist,
                         c->pl.sr_bits);
}
#endif

/* dot_sequential in a stochastic mode on the lanes: step k of output o
 * takes its word K + k (accum.h), drawn SR_RUN steps at a time per lane
 * and laid out [step][lane]. */
enum { SR_RUN = 128 };

#if EMU_HAVE_ISA_CLONES
/* The random words of steps k0 .. k0 + ch - 1 (word K + k of each output,
 * accum.h) laid out [step][lane] in wk for the AVX-512 lanes: each lane's
 * run drawn into its own part of tmp (SR_RUN + 2 words), then 8 steps of
 * 8 lanes at a time transposed in registers, where the C lanes move them
 * one by one.  The padding lanes read zeros, as there. */
EMU_ISA_TARGET_AVX512
static void sr_words_v8(const seq_ctx *c, const uint64_t *st,
                        const uint64_t *first, size_t jn, size_t ch,
                        uint64_t *wk, uint64_t *tmp)
{
    static const uint64_t zeros[SR_RUN];
    const uint64_t *w[JB];
    for (size_t j = 0; j < JB; j++)
        w[j] = j < jn ? out_fill_at(c, st[j], first[j], ch,
                                    tmp + j * (SR_RUN + 2))
                      : zeros;
    const __m512i lo2 = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i hi2 = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    size_t kk = 0;
    for (; kk + 8 <= ch; kk += 8)
        for (size_t h = 0; h < JB; h += 8) {
            __m512i r[8], a[8], b[4], d[4];
            for (int j = 0; j < 8; j++)
                r[j] = _mm512_loadu_si512(w[h + j] + kk);
            for (int j = 0; j < 8; j += 2) {
                /* a[j]: steps 0, 2, 4, 6 of lanes j, j + 1; a[j + 1]: 1, 3,
                 * 5, 7 */
                a[j] = _mm512_unpacklo_epi64(r[j], r[j + 1]);
                a[j + 1] = _mm512_unpackhi_epi64(r[j], r[j + 1]);
            }
            /* b: lanes 0-3 of steps (0, 4), (2, 6), (1, 5), (3, 7); d:
             * lanes 4-7 */
            b[0] = _mm512_permutex2var_epi64(a[0], lo2, a[2]);
            b[1] = _mm512_permutex2var_epi64(a[0], hi2, a[2]);
            b[2] = _mm512_permutex2var_epi64(a[1], lo2, a[3]);
            b[3] = _mm512_permutex2var_epi64(a[1], hi2, a[3]);
            d[0] = _mm512_permutex2var_epi64(a[4], lo2, a[6]);
            d[1] = _mm512_permutex2var_epi64(a[4], hi2, a[6]);
            d[2] = _mm512_permutex2var_epi64(a[5], lo2, a[7]);
            d[3] = _mm512_permutex2var_epi64(a[5], hi2, a[7]);
            static const int step[4] = { 0, 2, 1, 3 };
            for (int m = 0; m < 4; m++) {
                uint64_t *o = wk + (kk + (size_t)step[m]) * JB + h;
                _mm512_storeu_si512(o, _mm512_shuffle_i64x2(b[m], d[m], 0x44));
                _mm512_storeu_si512(o + 4 * JB,
                                    _mm512_shuffle_i64x2(b[m], d[m], 0xee));
            }
        }
    for (; kk < ch; kk++)
        for (size_t j = 0; j < JB; j++)
            wk[kk * JB + j] = w[j][kk];
}
#endif

static EMU_ALWAYS_INLINE void srseq_row_panel(const seq_ctx *c, size_t i,
                                              size_t q, const double *arow,
                                              const int *la,
                                              emu_accum_counts *cnt,
                                              uint64_t *wk, uint64_t *tmp,
                                              uint32_t (*hist)[EMU_LOST_BINS])
{
    const gemm_job *g = c->g;
    const size_t K = g->K, j0 = q * JB;
    const size_t jn = g->N - j0 < JB ? g->N - j0 : JB;
    const double *bp = c->bp;
    const int64_t *lb = c->lbp;
    const int d = c->pl.d;
    const int64_t p = c->pl.p, eminb = c->pl.emin + 1023;
    const unsigned bits = c->pl.sr_bits;
    const uint64_t mx = d2u(c->pl.max);
    uint64_t st[JB], base[JB];
    double buf[2][JB];
    double *cur = buf[0], *nxt = buf[1];
    for (size_t j = 0; j < JB; j++) {
        cur[j] = g->c && j < jn ? g->c[i * g->N + j0 + j] : 0.0;
        if (j < jn)
            out_words(c, i * g->N + j0 + j, &st[j], &base[j]);
    }
    for (size_t k0 = 0; k0 < K; k0 += SR_RUN) {
        const size_t ch = K - k0 < SR_RUN ? K - k0 : SR_RUN;
#if EMU_HAVE_ISA_CLONES
        if (c->v8) {
            uint64_t first[JB];
            for (size_t j = 0; j < jn; j++)
                first[j] = base[j] + K + k0;
            sr_words_v8(c, st, first, jn, ch, wk, tmp);
            sr_steps_v8(c, arow, la, bp, lb, k0, ch, wk, cur, jn, cnt, hist);
            continue;
        }
#endif
        if (jn < JB) /* the padding lanes' words, never used */
            memset(wk, 0, SR_RUN * JB * sizeof *wk);
        for (size_t j = 0; j < jn; j++) {
            const uint64_t *wj = out_fill_at(c, st[j], base[j] + K + k0, ch,
                                             tmp);
            for (size_t kk = 0; kk < ch; kk++)
                wk[kk * JB + j] = wj[kk];
        }
        for (size_t kk = 0; kk < ch; kk++) {
            const size_t k = k0 + kk;
            const double ak = arow[k], *b = bp + k * JB;
            uint64_t bad[JB];
            if (lanes_sr(cur, b, ak, wk + kk * JB, nxt, bad, d, p, eminb,
                         bits, mx))
                redo_sr(c, cur, b, ak, wk + kk * JB, nxt, bad, jn);
            if (cnt)
                count_step(c, cur, nxt, ak, b, la[k], lb + k * JB, jn, hist,
                           cnt);
            double *t = cur;
            cur = nxt;
            nxt = t;
        }
    }
    for (size_t j = 0; j < jn; j++)
        g->hi[i * g->N + j0 + j] = cur[j];
    if (cnt)
        cnt->adds += K * jn;
}

/* Which kernel runs a model. */
typedef enum gemm_kernel {
    KERN_GENERIC,   /* emu_accum_dot per output                       */
    KERN_SEQ,       /* sequential, blocked, Kahan, pairwise (seq_rows) */
    KERN_FUSED,
    KERN_EXACT,
    KERN_SEQ_SR,    /* sequential, stochastic modes                    */
} gemm_kernel;

/* Scratch of the kernels above, per worker. */
typedef struct kern_scratch {
    uint64_t *words, *tmp; /* fused and stochastic words */
    double *bins;          /* exact: JB x XB_N            */
    xacc *xa;              /* exact: JB                   */
} kern_scratch;

/* What kern_rows knows of a row of A besides its values. */
typedef struct row_info {
    bool finite;
    int w, lo, hi;              /* seq_ctx's row_w, row_lo, row_hi          */
} row_info;

/* Row i of A as doubles in arow (and la with the lowest-bit tables), and
 * what the kernels need to know of it. */
static EMU_ALWAYS_INLINE row_info load_row_info(const seq_ctx *c,
                                                gemm_kernel kern, size_t i,
                                                double *arow, int *la)
{
    const gemm_job *g = c->g;
    row_info r = { true, 0, INT_MAX, INT_MIN };
    int lmin;
    r.finite = load_row(c, i, arow, la, &lmin);
    if (kern == KERN_EXACT)
        for (size_t k = 0; k < g->K; k++) {
            const float x = (float)arow[k];
            int wx = sig_width_f(x);
            r.w = wx > r.w ? wx : r.w;
            if (wx) {
                int e = exponent_of(x);
                r.lo = e < r.lo ? e : r.lo;
                r.hi = e > r.hi ? e : r.hi;
            }
        }
    return r;
}

/* ac, lc, ri: the worker's rows as load_row_info gives them, converted
 * once for every panel (NULL: one row at a time into arow and la). */
EMU_TARGET_CLONES
static void kern_rows(seq_ctx *c, gemm_kernel kern, size_t q, size_t r0,
                      size_t r1, double *arow, int *la, const double *ac,
                      const int *lc, const row_info *ri,
                      emu_accum_counts *cnt, const kern_scratch *ks)
{
    const gemm_job *g = c->g;
    /* The stochastic kernel's swamping histograms, one per lane (lanes
     * past N never counted), kept over the rows and emptied into cnt
     * before a bin could pass 2^32 - 1 (a row-panel adds at most K to
     * one), as in seq_rows, rather than cleared and emptied per row-panel
     * (flush_hist and the clearing were 1.8% of bench_gemm's seq-sr
     * profile, bench/profiles/gemm3-seq-sr.txt). */
    uint32_t hist[JB][EMU_LOST_BINS];
    const bool hists = cnt && kern == KERN_SEQ_SR;
    uint64_t pending = 0;
    if (hists)
        memset(hist, 0, sizeof hist);
    for (size_t i = r0; i < r1; i++) {
        if (hists && pending + g->K > UINT32_MAX) {
            flush_hist(hist, cnt);
            pending = 0;
        }
        pending += g->K;
        row_info r;
        if (ac) {
            arow = (double *)ac + (i - r0) * g->K;
            la = (int *)lc + (i - r0) * g->K;
            r = ri[i - r0];
        } else {
            r = load_row_info(c, kern, i, arow, la);
        }
        c->row_finite = r.finite;
        c->row_lo = r.lo;
        c->row_hi = r.hi;
        c->row_w = r.w;
        bool done;
        switch (kern) {
        case KERN_FUSED:
            done = fused_row_panel(c, i, q, arow, la, cnt, ks->words, ks->tmp);
            break;
        case KERN_EXACT:
            done = exact_row_panel(c, i, q, arow, cnt, ks->bins, ks->xa);
            break;
        default:
            srseq_row_panel(c, i, q, arow, la, cnt, ks->words, ks->tmp,
                            hist);
            done = true;
            break;
        }
        if (!done)
            ref_row_panel(c, i, q, cnt);
    }
    if (hists)
        flush_hist(hist, cnt);
}

/* Which kernel covers a model: seq_rows the sequential, blocked, Kahan
 * and pairwise models in deterministic modes; kern_rows the fused unit
 * (when its group sums fit a double), the exact sum and the stochastic
 * sequential model; all with exact products and an accumulator the fast
 * rounding handles.  Anything else, one emu_accum_dot per output. */
static gemm_kernel gemm_kernel_of(const emu_accum *m)
{
    fast_plan pl;
    plan_init(&pl, &m->acc, &m->rnd);
    if (m->round_products)
        return KERN_GENERIC;
    switch (m->kind) {
    case EMU_ACCUM_EXACT:
        return KERN_EXACT;
    case EMU_ACCUM_SEQUENTIAL:
        if (pl.ok && pl.sr)
            return KERN_SEQ_SR;
        return pl.ok ? KERN_SEQ : KERN_GENERIC;
    case EMU_ACCUM_BLOCKED:
    case EMU_ACCUM_KAHAN:
    case EMU_ACCUM_PAIRWISE:
        return pl.ok && !pl.sr ? KERN_SEQ : KERN_GENERIC;
    case EMU_ACCUM_FUSED: {
        uint64_t k = m->fused_k ? m->fused_k : 1;
        if (!pl.ok || m->fused_w > 40 || (k + 1) << m->fused_w > (uint64_t)1 << 53)
            return KERN_GENERIC;
        return KERN_FUSED;
    }
    default:
        return KERN_GENERIC;
    }
}

typedef struct shared {
    seq_ctx seq;                /* when a kernel applies                    */
    gemm_kernel kern;
} shared;

static int worker_main(void *arg)
{
    EMU_HOSTFP_GUARD; /* a new thread's state is the platform's choice */
    gemm_worker *w = arg;
    const shared *sh = w->sh;
    if (sh->kern == KERN_GENERIC) {
        rows_generic(w);
        return 0;
    }
    /* Panel by panel: B's JB columns packed as doubles (zero-padded), so
     * that a worker holds K * JB of them, not all of B; each row of A is
     * reread per panel (a 1/JB overhead on the loads). */
    const gemm_job *g = w->job;
    const size_t K = g->K, K1 = K ? K : 1;
    const gemm_kernel kern = sh->kern;
    seq_ctx c = sh->seq;
    double *arow = malloc(K1 * sizeof *arow);
    int *la = malloc(K1 * sizeof *la);
    double *bp = malloc(K1 * JB * sizeof *bp);
    int64_t *lbp = c.tables ? malloc(K1 * JB * sizeof *lbp) : NULL;
    kern_scratch ks = { NULL, NULL, NULL, NULL };
    bool ok = arow && la && bp && (!c.tables || lbp);
    if (kern == KERN_FUSED || kern == KERN_SEQ_SR) {
        const size_t kk = g->model->fused_k ? g->model->fused_k : 1;
        size_t nw = kern == KERN_FUSED ? JB * ((K + kk - 1) / kk)
                                       : (size_t)SR_RUN * JB;
        ks.words = malloc((nw ? nw : 1) * sizeof *ks.words);
        /* fused: K1 + 1 words; stochastic: a run (+ 1) per lane */
        ks.tmp = malloc((K1 + JB * (SR_RUN + 2)) * sizeof *ks.tmp);
        ok = ok && ks.words && ks.tmp;
    } else if (kern == KERN_EXACT) {
        ks.bins = malloc(JB * XB_N * sizeof *ks.bins);
        ks.xa = malloc(JB * sizeof *ks.xa);
        ok = ok && ks.bins && ks.xa;
    }
    /* The exact kernel's rows of A, converted once rather than once per
     * panel (its load_row_info scans each row's exponents), when they take
     * at most ROW_CACHE values; the other kernels' conversion is a
     * vector loop (load_row). */
    enum { ROW_CACHE = 1 << 19 };
    const size_t nrows = w->r1 - w->r0;
    double *ac = NULL;
    int *lc = NULL;
    row_info *ri = NULL;
    if (ok && kern == KERN_EXACT && c.npanels > 1 && K &&
        nrows <= ROW_CACHE / K) {
        ac = malloc(nrows * K * sizeof *ac);
        lc = malloc(nrows * K * sizeof *lc);
        ri = malloc(nrows * sizeof *ri);
        if (ac && lc && ri) {
            for (size_t i = w->r0; i < w->r1; i++) {
                double *ar = ac + (i - w->r0) * K;
                int *lr = lc + (i - w->r0) * K;
                ri[i - w->r0] = load_row_info(&c, kern, i, ar, lr);
            }
        } else {
            free(ac), free(lc), free(ri);
            ac = NULL, lc = NULL, ri = NULL;
        }
    }
    if (ok) {
        c.bp = bp;
        c.lbp = lbp;
        for (size_t q = 0; q < c.npanels; q++) {
            bool fin = true;
            int wmax = 0, elo = INT_MAX, ehi = INT_MIN, lmin = NO_LSB;
            for (size_t k = 0; k < K; k++)
                for (size_t j = 0; j < JB; j++) {
                    size_t col = q * JB + j;
                    float x = col < g->N ? g->b[(ptrdiff_t)k * g->b_rs +
                                                (ptrdiff_t)col * g->b_cs]
                                         : 0.0f;
                    bp[k * JB + j] = x;
                    const int lb = lowest_bit_f(x);
                    if (lbp)
                        lbp[k * JB + j] = lb + 1022;
                    if (isfinite(x) && x != 0.0f && lb < lmin)
                        lmin = lb;
                    if (kern != KERN_SEQ) {
                        fin &= isfinite(x) != 0;
                        int wx = sig_width_f(x);
                        wmax = wx > wmax ? wx : wmax;
                        if (wx) {
                            int e = exponent_of(x);
                            elo = e < elo ? e : elo;
                            ehi = e > ehi ? e : ehi;
                        }
                    }
                }
            c.panel_finite = fin;
            c.panel_w = wmax;
            c.panel_lo = elo;
            c.panel_hi = ehi;
            c.panel_lsb = lmin;
            emu_accum_counts *cnt = w->want_counts ? &w->counts : NULL;
            if (kern == KERN_SEQ)
                seq_rows(&c, q, w->r0, w->r1, arow, la, cnt);
            else
                kern_rows(&c, kern, q, w->r0, w->r1, arow, la, ac, lc, ri,
                          cnt, &ks);
        }
    } else {
        w->status = -1;
    }
    free(arow);
    free(la);
    free(ac);
    free(lc);
    free(ri);
    free(bp);
    free(lbp);
    free(ks.words);
    free(ks.tmp);
    free(ks.bins);
    free(ks.xa);
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

/* The fast model's values as binary32, out[i*N + j] (what gemm_fast
 * widens into hi).  pin: set OpenBLAS to one thread first (the threaded
 * caller does that once, before its parts run). */
static int gemm_fast_f32_pin(const gemm_job *g, float *out, bool pin)
{
    const size_t M = g->M, N = g->N, K = g->K;
    if (K == 0) {
        for (size_t o = 0; o < M * N; o++)
            out[o] = g->c ? (float)g->c[o] : 0.0f;
        return 0;
    }
#ifdef EMU_HAVE_CBLAS
    float *ap = NULL, *bp = NULL;
    enum CBLAS_TRANSPOSE ta, tb;
    blasint lda, ldb;
    const float *A = sgemm_operand(g->a, g->a_rs, g->a_cs, M, K, &ta, &lda, &ap);
    const float *B = sgemm_operand(g->b, g->b_rs, g->b_cs, K, N, &tb, &ldb, &bp);
    if (!A || !B) {
        free(ap);
        free(bp);
        return -1;
    }
    if (g->c)
        for (size_t o = 0; o < M * N; o++)
            out[o] = (float)g->c[o];
    /* OpenBLAS's kernels (and so its summation order) change with its
     * thread count: pinned to one thread, a run's results do not depend
     * on the machine it runs on. */
    if (pin)
        openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)M, (blasint)N, (blasint)K,
                1.0f, A, lda, B, ldb, g->c ? 1.0f : 0.0f, out, (blasint)N);
    free(ap);
    free(bp);
    return 0;
#else
    (void)pin;
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
                out[i * N + j0 + j] = acc[j];
        }
    }
    free(bp);
    return 0;
#endif
}

static int gemm_fast_f32(const gemm_job *g, float *out)
{
    return gemm_fast_f32_pin(g, out, true);
}

static int gemm_fast(const gemm_job *g)
{
    const size_t mn = g->M * g->N;
    float *cp = malloc((mn ? mn : 1) * sizeof *cp);
    if (!cp)
        return -1;
    int rc = gemm_fast_f32(g, cp);
    for (size_t o = 0; rc == 0 && o < g->M * g->N; o++)
        g->hi[o] = cp[o];
    free(cp);
    return rc;
}

int emu_gemm_fast_f32(size_t M, size_t N, size_t K,
                      const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                      const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                      const double *c, float *out)
{
    static const emu_accum fast = { .kind = EMU_ACCUM_FAST };
    gemm_job g = { &fast, M, N, K, a, b, a_rs, a_cs, b_rs, b_cs, c, NULL,
                   NULL, 0, 0, 0 };
    if (M == 0 || N == 0)
        return 0;
    return gemm_fast_f32(&g, out);
}

/* ---- the fast model on several threads -------------------------------
 * Rows split into T blocks, one sgemm each.  An output of sgemm is its
 * own dot product, summed in an order that depends on K and not on the
 * rows around it (the blocked im2row of ops_conv.c relies on the same),
 * with two exceptions.  The small-matrix kernels OpenBLAS 0.3 uses on
 * some x86-64 cores (SkylakeX's) up to 10^6 multiply-adds: a GEMM is
 * split only into blocks of at least EMU_FAST_SPLIT_MACS each, one more
 * than that, so that no block runs through them, and a GEMM the
 * one-thread call would run through them is never split; unless a trial
 * (small_blocks_ok) finds that blocks under that size give the one call's
 * bits, as on the Haswell and Zen kernels, which have none: then blocks
 * of EMU_FAST_SPLIT_SMALL do.  And the kernels' edges: sgemm's rows (the
 * column-major kernel's columns) go through its micro-kernel in panels of
 * a few (12 for the Haswell kernels OpenBLAS 0.3.21 runs on AMD EPYC, where
 * a split at row 32 of 64 changes the bits of both halves), and the
 * narrower kernel of a partial panel sums in another order; a block that
 * starts on a multiple of the panel width keeps every row in the panel
 * it had in the one call.  That width is not part of the interface: it is
 * found once by trial (fast_row_granule), and blocks start on multiples
 * of it.  test_threads' fast GEMM test checks the bits on shapes whose
 * blocks are just past the limit, and on the models' shapes. */
typedef struct fast_split {
    const gemm_job *g;
    float *out;
    size_t granule;
    bool scan;                /* each part scans its rows for a NaN     */
    int rc[EMU_POOL_MAX];
    bool nan[EMU_POOL_MAX];
} fast_split;

/* The first row of block t of T (t = T: M), a multiple of g nearest to
 * an even share. */
static size_t fast_row(size_t M, size_t g, int t, int T)
{
    if (t >= T)
        return M;
    const size_t r = (M * (size_t)t / (size_t)T + g / 2) / g * g;
    return r < M ? r : M;
}

static void fast_part(void *p, int t, int T)
{
    fast_split *fs = p;
    const gemm_job *g = fs->g;
    const size_t r0 = fast_row(g->M, fs->granule, t, T);
    const size_t r1 = fast_row(g->M, fs->granule, t + 1, T);
    gemm_job b = *g;
    b.M = r1 - r0;
    b.a = g->a + (ptrdiff_t)r0 * g->a_rs;
    b.c = g->c ? g->c + r0 * g->N : NULL;
    fs->rc[t] = gemm_fast_f32_pin(&b, fs->out + r0 * g->N, false);
    /* the caller's NaN question, asked of the block while its rows are
     * still in this core's cache, and on both threads */
    fs->nan[t] = fs->scan && !fs->rc[t] &&
                 emu_any_nan(fs->out + r0 * g->N, b.M * g->N);
}

/* The probe: M x K times K x N, row-major, every block of every trial
 * split past the small-matrix kernels (2 rows: 1.3 * 10^6 terms). */
enum { GRANULE_M = 107, GRANULE_N = 640, GRANULE_K = 1000 };

/* Whether sgemm in three blocks cut at multiples of g (the first two
 * rows or more) gives the one call's bits; whole: the one call's. */
static bool granule_ok(size_t g, const float *a, const float *b,
                       const float *whole, float *part)
{
    const size_t M = GRANULE_M, N = GRANULE_N, K = GRANULE_K;
    const size_t cut[4] = { 0, (2 + g - 1) / g * g, M / 2 / g * g, M };
    for (int i = 0; i < 3; i++) {
        if (cut[i + 1] <= cut[i])
            continue;
        if (emu_gemm_fast_f32(cut[i + 1] - cut[i], N, K, a + cut[i] * K,
                              (ptrdiff_t)K, 1, b, (ptrdiff_t)N, 1, NULL,
                              part + cut[i] * N))
            return false;
    }
    return memcmp(whole, part, M * N * sizeof *part) == 0;
}

/* The probes' operands: values in (-1, 1) with full 24-bit significands
 * and spread exponents (xorshift64 from seed), so that another order of a
 * sum rounds differently somewhere; a's na values, then b's nb. */
static void probe_fill(float *a, size_t na, float *b, size_t nb,
                       uint64_t seed)
{
    uint64_t x = seed;
    for (size_t i = 0; i < na + nb; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        float v = ldexpf((float)(x >> 40) * 0x1p-24f, -(int)(x >> 36 & 7));
        (i < na ? a : b)[i < na ? i : i - na] = x >> 35 & 1 ? -v : v;
    }
}

static size_t probe_granule(void)
{
    static const size_t cand[] = { 1, 2, 4, 6, 8, 12, 16, 24, 32, 48 };
    const size_t M = GRANULE_M, N = GRANULE_N, K = GRANULE_K;
    float *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b);
    float *w = malloc(2 * M * N * sizeof *w);
    size_t found = 0;
    if (a && b && w) {
        probe_fill(a, M * K, b, K * N, 0x9e3779b97f4a7c15u);
        if (!emu_gemm_fast_f32(M, N, K, a, (ptrdiff_t)K, 1, b, (ptrdiff_t)N,
                               1, NULL, w))
            for (size_t i = 0; !found && i < sizeof cand / sizeof *cand; i++)
                if (granule_ok(cand[i], a, b, w, w + M * N))
                    found = cand[i];
    }
    free(a);
    free(b);
    free(w);
    return found;
}

size_t emu_probe_once(atomic_size_t *cached, size_t (*probe)(void))
{
    size_t v = atomic_load_explicit(cached, memory_order_relaxed);
    if (v == SIZE_MAX) {
        v = probe();
        atomic_store_explicit(cached, v, memory_order_relaxed);
    }
    return v;
}

size_t emu_fast_row_granule(void)
{
    static atomic_size_t cached = SIZE_MAX;
    return emu_probe_once(&cached, probe_granule);
}

/* Whether blocks under the small-matrix limit give the one call's bits:
 * GEMMs of 1.6 * 10^6 multiply-adds (past the limit: the one call is the
 * large kernels') cut into blocks of g rows (4 * 10^5 each, under it), in
 * the four layouts, one shape with a long K and one with a short one.
 * OpenBLAS 0.3.21's Haswell and Zen kernels (what this machine runs) have
 * no small-matrix path and pass; SkylakeX's takes such blocks in the
 * layouts it permits (all with A not transposed) and fails. */
static bool small_blocks_ok(size_t g)
{
    const size_t M = 4 * (g < 2 ? 2 : g);
    const size_t shape[2][2] = { { 128, 1600000 / (M * 128) + 1 },
                                 { 1600000 / (M * 64) + 1, 64 } };
    bool ok = true;
    for (int s = 0; ok && s < 2; s++) {
        const size_t N = shape[s][0], K = shape[s][1];
        float *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b);
        float *w = malloc(2 * M * N * sizeof *w);
        ok = a && b && w;
        if (ok)
            probe_fill(a, M * K, b, K * N, 0x2545f4914f6cdd1du);
        for (int l = 0; ok && l < 4; l++) {
            const bool ta = l & 1, tb = l & 2;
            const ptrdiff_t a_rs = ta ? 1 : (ptrdiff_t)K;
            const ptrdiff_t a_cs = ta ? (ptrdiff_t)M : 1;
            const ptrdiff_t b_rs = tb ? 1 : (ptrdiff_t)N;
            const ptrdiff_t b_cs = tb ? (ptrdiff_t)K : 1;
            float *whole = w, *part = w + M * N;
            ok = !emu_gemm_fast_f32(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs,
                                    NULL, whole);
            for (size_t r = 0; ok && r < M; r += M / 4)
                ok = !emu_gemm_fast_f32(M / 4, N, K, a + (ptrdiff_t)r * a_rs,
                                        a_rs, a_cs, b, b_rs, b_cs, NULL,
                                        part + r * N);
            ok = ok && memcmp(whole, part, M * N * sizeof *part) == 0;
        }
        free(a);
        free(b);
        free(w);
    }
    return ok;
}

static size_t probe_split_min(void)
{
    const size_t g = emu_fast_row_granule();
    return g && small_blocks_ok(g) ? EMU_FAST_SPLIT_SMALL
                                   : (size_t)EMU_FAST_SPLIT_MACS;
}

double emu_fast_split_min(void)
{
    static atomic_size_t cached = SIZE_MAX;
    return (double)emu_probe_once(&cached, probe_split_min);
}

/* Whether every block of M rows in T is of two rows or more (later
 * OpenBLAS releases hand a one-row GEMM to their GEMV kernels, which sum
 * in another order) and past the small-matrix kernels. */
static bool fast_blocks_ok(size_t M, double nk, size_t g, int T,
                           double min)
{
    for (int t = 0; t < T; t++) {
        const size_t rows = fast_row(M, g, t + 1, T) - fast_row(M, g, t, T);
        if (rows < 2 || (double)rows * nk < min)
            return false;
    }
    return true;
}

int emu_fast_split_parts(size_t M, size_t N, size_t K, int threads)
{
    const double nk = (double)N * (double)K;
    int T = threads < 1 ? 1 : threads > EMU_POOL_MAX ? EMU_POOL_MAX : threads;
    /* no probe for what cannot be split anyway */
    if (T <= 1 || (double)M * nk < 2 * EMU_FAST_SPLIT_SMALL || M < 4)
        return 1;
    const size_t g = emu_fast_row_granule();
    if (!g)
        return 1;
    const double min = emu_fast_split_min();
    while (T > 1 && !fast_blocks_ok(M, nk, g, T, min))
        T--;
    return T;
}

int emu_gemm_fast_f32_mt(size_t M, size_t N, size_t K,
                         const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                         const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                         const double *c, float *out, int threads)
{
    return emu_gemm_fast_f32_mt_nan(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c,
                                    out, threads, NULL);
}

int emu_gemm_fast_f32_mt_nan(size_t M, size_t N, size_t K,
                             const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                             const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                             const double *c, float *out, int threads,
                             bool *any_nan)
{
    static const emu_accum fast = { .kind = EMU_ACCUM_FAST };
    gemm_job g = { &fast, M, N, K, a, b, a_rs, a_cs, b_rs, b_cs, c, NULL,
                   NULL, 0, 0, 0 };
    if (any_nan)
        *any_nan = false;
    if (M == 0 || N == 0)
        return 0;
    const int T = K ? emu_fast_split_parts(M, N, K, threads) : 1;
    if (T == 1) {
        const int rc = gemm_fast_f32(&g, out);
        if (any_nan && !rc)
            *any_nan = emu_any_nan(out, M * N);
        return rc;
    }
    emu_gemm_fast_pin();
    fast_split fs = { .g = &g, .out = out, .granule = emu_fast_row_granule(),
                      .scan = any_nan != NULL };
    emu_pool_run(T, fast_part, &fs);
    for (int t = 0; t < T; t++) {
        if (fs.rc[t])
            return -1;
        if (any_nan && fs.nan[t])
            *any_nan = true;
    }
    return 0;
}

void emu_gemm_fast_pin(void)
{
#ifdef EMU_HAVE_CBLAS
    openblas_set_num_threads(1);
#endif
}

int emu_gemm_fast_f32_part(size_t M, size_t N, size_t K,
                           const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                           const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                           const double *c, float *out)
{
    static const emu_accum fast = { .kind = EMU_ACCUM_FAST };
    gemm_job g = { &fast, M, N, K, a, b, a_rs, a_cs, b_rs, b_cs, c, NULL,
                   NULL, 0, 0, 0 };
    if (M == 0 || N == 0)
        return 0;
    return gemm_fast_f32_pin(&g, out, false);
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
    sh.kern = gemm_kernel_of(model);
    if (sh.kern != KERN_GENERIC) {
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
        sc->sr = sc->pl.sr;
#if EMU_HAVE_ISA_CLONES
        sc->v8 = emu_isa_active() == EMU_ISA_AVX512;
#endif
        /* acc's values are multiples of 2^(emin - p + 1) below 2^(emax + 1) */
        sc->sums_exact = sc->pl.ok && model->acc.emax + 2 -
                                      (model->acc.emin - model->acc.p + 1) <= 53;
        /* The lowest-bit tables serve the sequential and fused kernels'
         * counts. */
        sc->tables = counts && (model->kind == EMU_ACCUM_SEQUENTIAL ||
                                model->kind == EMU_ACCUM_BLOCKED ||
                                model->kind == EMU_ACCUM_FUSED);
        if (K > SIZE_MAX / (JB * sizeof(double)))
            return -1;
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
