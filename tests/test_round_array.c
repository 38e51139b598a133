/*
 * test_round_array.c — the array roundings against the scalar choke point.
 *
 * emu_round_array_f32/_f64 promise the same map as emu_round2_word applied
 * element by element, with element i taking the word
 * emu_random64(seed, stream, first_index + i), and the same counts as
 * emu_round_counts_add over the elements.  Every check here compares with
 * exactly that: bit patterns of the results (NaN signs included) and every
 * field of the counts.  MPFR is not needed: test_round.c checks the choke
 * point itself against MPFR, and this suite checks that the fast paths
 * agree with it.
 *
 * The kernels are compiled for several instruction-set levels; CTest runs
 * this suite once per level (EMU_ISA=baseline|avx2|avx512, skipped where
 * the CPU or the build lacks the level), so that each one is checked.
 */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h" /* the lean nearest-even kernel of scaled formats */

/* Test first, call into Check only to fail (ck_assert writes a record per
 * passing check, which over millions of cases is most of the run time). */
#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

/* The shipped formats that fit the binary32 carrier, found at run time so
 * that a new spec file is covered without editing this list. */
static const emu_format *carrier[64];
static int n_carrier;

static void find_carrier_formats(void)
{
    n_carrier = 0;
    for (size_t i = 0; i < emu_format_count() && n_carrier < 64; i++)
        if (emu_format_at(i)->fits_carrier)
            carrier[n_carrier++] = emu_format_at(i);
}

/* Modes: the deterministic ones, full stochastic, and r-bit stochastic
 * with the widths hardware uses and the edge cases. */
typedef struct mode_case {
    emu_rnd mode;
    unsigned bits;
} mode_case;

static const mode_case modes[] = {
    { EMU_RNE, 0 }, { EMU_RNA, 0 }, { EMU_RZ, 0 }, { EMU_RU, 0 },
    { EMU_RD, 0 },  { EMU_RO, 0 },  { EMU_RS, 64 },
    { EMU_RS_BITS, 1 },  { EMU_RS_BITS, 3 },  { EMU_RS_BITS, 8 },
    { EMU_RS_BITS, 13 }, { EMU_RS_BITS, 23 }, { EMU_RS_BITS, 64 },
};
enum { N_MODES = sizeof modes / sizeof modes[0] };

static const char *mode_label(const mode_case *m, char *buf, size_t size)
{
    if (m->mode == EMU_RS_BITS)
        snprintf(buf, size, "sr%u", m->bits);
    else
        snprintf(buf, size, "%s", emu_rnd_name(m->mode));
    return buf;
}

static emu_array_rounding make_rounding(const mode_case *m, bool before,
                                        bool sat, uint64_t seed,
                                        uint64_t first)
{
    emu_array_rounding a;
    memset(&a, 0, sizeof a);
    a.rnd.mode = m->mode;
    a.rnd.sr_bits = m->bits;
    a.rnd.tininess = before ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
    a.rnd.saturate = sat;
    a.seed = seed;
    a.stream = 0xa77a;
    a.first_index = first;
    return a;
}

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bitsf(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void print_counts(char *buf, size_t size, const emu_round_counts *c)
{
    snprintf(buf, size,
             "n %" PRIu64 " inexact %" PRIu64 " underflow %" PRIu64
             " to_zero %" PRIu64 " subnormal %" PRIu64 " overflow %" PRIu64
             " nan %" PRIu64 " invalid %" PRIu64 " flags 0x%x",
             c->n, c->inexact, c->underflow, c->to_zero, c->subnormal,
             c->overflow, c->nan, c->invalid, c->flags);
}

/* Rounds in[0..n) with the array function and element by element with
 * the choke point; fails on the first difference. */
static void compare_f32(const emu_format *f, const emu_array_rounding *a,
                        const float *in, size_t n, float *out)
{
    emu_round_counts got = { 0 }, want = { 0 };
    int rc = emu_round_array_f32(f, out, in, n, a, &got, NULL);
    char mb[16];
    const mode_case mc = { a->rnd.mode, a->rnd.sr_bits };
    EXPECT(rc == 0, "%s: emu_round_array_f32 returned %d", f->name, rc);
    for (size_t i = 0; i < n; i++) {
        uint64_t word = emu_random64(a->seed, a->stream, a->first_index + i);
        emu_status st;
        double y = emu_round2_word(f, in[i], 0.0, &a->rnd, word, &st);
        emu_round_counts_add(&want, in[i], y, st.flags);
        float yf = (float)y;
        EXPECT(fbits(yf) == fbits(out[i]),
               "%s %s tininess %s saturate %d: in[%zu] = 0x%08" PRIx32
               " (%a) word 0x%016" PRIx64 ": expected 0x%08" PRIx32
               " (%a, flags 0x%x) got 0x%08" PRIx32 " (%a)",
               f->name, mode_label(&mc, mb, sizeof mb),
               a->rnd.tininess == EMU_TINY_BEFORE ? "before" : "after",
               (int)a->rnd.saturate, i, fbits(in[i]), (double)in[i], word,
               fbits(yf), y, st.flags, fbits(out[i]), (double)out[i]);
    }
    const char *diff = test_counts_diff(&want, &got);
    if (*diff) {
        /* Find the first element whose own counts differ, for the message. */
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++) {
            emu_round_counts g1 = { 0 }, w1 = { 0 };
            emu_round_array_f32(f, out, in + i, 1,
                                &(emu_array_rounding){ a->rnd, a->seed,
                                                       a->stream,
                                                       a->first_index + i },
                                &g1, NULL);
            uint64_t word = emu_random64(a->seed, a->stream,
                                         a->first_index + i);
            emu_status st;
            double y = emu_round2_word(f, in[i], 0.0, &a->rnd, word, &st);
            emu_round_counts_add(&w1, in[i], y, st.flags);
            if (*test_counts_diff(&w1, &g1))
                bad = i;
        }
        char wb[256], gb[256];
        print_counts(wb, sizeof wb, &want);
        print_counts(gb, sizeof gb, &got);
        ck_abort_msg("%s %s tininess %s saturate %d: counts differ in %s "
                     "(first element alone differing: %zu, 0x%08" PRIx32
                     " %a)\nexpected %s\ngot      %s",
                     f->name, mode_label(&mc, mb, sizeof mb),
                     a->rnd.tininess == EMU_TINY_BEFORE ? "before" : "after",
                     (int)a->rnd.saturate, diff, bad,
                     bad < n ? fbits(in[bad]) : 0,
                     bad < n ? (double)in[bad] : 0.0, wb, gb);
    }
}

/* Rounds in[0..n) into out and a copy of it in place (inplace, n
 * values): the same results and counts. */
static void compare_in_place_f32(const emu_format *f,
                                 const emu_array_rounding *a, const float *in,
                                 size_t n, float *out, float *inplace)
{
    memcpy(inplace, in, n * sizeof *in);
    emu_round_counts c1 = { 0 }, c2 = { 0 };
    emu_round_array_f32(f, out, in, n, a, &c1, NULL);
    emu_round_array_f32(f, inplace, inplace, n, a, &c2, NULL);
    EXPECT(memcmp(out, inplace, n * sizeof *out) == 0 &&
           !*test_counts_diff(&c1, &c2), "%s in place", f->name);
}

/* ---- structured patterns: every top half, tie-sensitive low halves ---- */

enum { N_LOW = 6, N_STRUCT = 65536 * N_LOW };

/* For each of the 65536 high halves, low halves at and around the tie of
 * the format's dropped bits (in its normal range; below it, and for
 * formats dropping more than 16 bits, the tie bit lies in the high half,
 * which runs through all values). */
static void structured_inputs(const emu_format *f, float *in)
{
    int d = 24 - f->p;
    uint32_t tie = d >= 1 && d <= 16 ? 1u << (d - 1) : 0x8000u;
    const uint32_t low[N_LOW] = { 0, 1, tie - 1, tie, tie + 1, 0xffff };
    size_t k = 0;
    for (uint32_t h = 0; h < 65536; h++)
        for (int j = 0; j < N_LOW; j++)
            in[k++] = bitsf(h << 16 | (low[j] & 0xffff));
}

START_TEST(test_structured)
{
    const emu_format *f = carrier[_i];
    float *in = malloc(N_STRUCT * sizeof *in);
    float *out = malloc(N_STRUCT * sizeof *out);
    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    structured_inputs(f, in);
    for (int m = 0; m < N_MODES; m++)
        for (int cfg = 0; cfg < 4; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg & 1, cfg >> 1,
                                                 0x5eed + (uint64_t)cfg,
                                                 (uint64_t)m << 40);
            compare_f32(f, &a, in, N_STRUCT, out);
        }
    free(in);
    free(out);
}
END_TEST

/* ---- random patterns -------------------------------------------------- */

START_TEST(test_random)
{
    const emu_format *f = carrier[_i];
    const size_t total = test_scaled(1000000, 4096), block = 4096;
    float *in = malloc(block * sizeof *in), *out = malloc(block * sizeof *out);
    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    test_rng g = test_rng_make(0x7a1d0000u + (uint64_t)_i);
    for (size_t done = 0, b = 0; done < total; done += block, b++) {
        for (size_t i = 0; i < block; i++) {
            uint64_t w = test_next(&g);
            /* Half uniform patterns, half magnitudes near the format's
             * range (uniform patterns are mostly far outside it). */
            uint32_t u = (uint32_t)w;
            if (w >> 63) {
                int e = f->emin - f->p - 2 + (int)((w >> 40) % (unsigned)(
                            f->emax - f->emin + f->p + 5));
                if (e < -149)
                    e = -149;
                float x = ldexpf(1.0f + (float)(u & 0x7fffff) * 0x1p-23f, e);
                u = fbits(x) | (u & 0x80000000u);
            }
            in[i] = bitsf(u);
        }
        const mode_case *m = &modes[b % N_MODES];
        emu_array_rounding a = make_rounding(m, (b / N_MODES) & 1,
                                             (b / N_MODES / 2) & 1, b,
                                             b * block * 3);
        compare_f32(f, &a, in, block, out);
    }
    free(in);
    free(out);
}
END_TEST

/* ---- tiles already on the format's grid -------------------------------- */

/* A value of f near x (x rounded to nearest-even into f), or 0 if that
 * is not finite. */
static float on_grid(const emu_format *f, double x)
{
    static const emu_rounding rne = { .mode = EMU_RNE };
    const double y = emu_round(f, x, &rne, NULL);
    return isfinite(y) ? (float)y : 0.0f;
}

/* Tiles whose values are all values of the format (a cast from a narrower
 * format, an exact power-of-two scale), which the binary32 array path
 * copies after one scan: wholly on the grid, with subnormals, zeros of
 * both signs and the largest values; and tiles on the grid but for one
 * lane (first, middle, last; off the grid by a dropped bit, a binary32
 * subnormal, the grid point above max, inf, NaN), whose every lane must
 * still round as the choke point does; a short last tile; out of place
 * and in place. */
START_TEST(test_on_grid_tiles)
{
    const emu_format *f = carrier[_i];
    enum { T = 1024, NT = 12, N = NT * T + 300 };
    static float in[N], out[N], inplace[N];
    test_rng g = test_rng_make(0x961d + (uint64_t)_i);
    const float maxf = (float)f->max, min_n = (float)f->min_normal;
    const int d = 24 - f->p;
    /* the next pattern above max at f's precision (inf past binary32) */
    const float above = d >= 1 && d <= 23
                        ? bitsf(fbits(maxf) + (1u << d)) : INFINITY;
    const float odd[] = { above, INFINITY, NAN, bitsf(0x00000003u),
                          -maxf * 4.0f };
    for (size_t t = 0; t <= NT; t++) {
        const size_t len = t < NT ? T : N - NT * T;
        float *v = in + t * T;
        for (size_t j = 0; j < len; j++) {
            const uint64_t w = test_next(&g);
            /* magnitudes across the range, a quarter below 2^emin */
            const int e = (w & 3) == 0
                          ? f->emin - 1 - (int)((w >> 2) % (unsigned)f->p)
                          : f->emin + (int)((w >> 2) % (unsigned)(
                                f->emax - f->emin + 1));
            const double x = ldexp(1.0 + (double)(w >> 40) * 0x1p-24, e);
            float y = on_grid(f, (w >> 63) ? -x : x);
            if ((w >> 8) % 61 == 0)
                y = (w >> 20) & 1 ? -maxf : maxf;
            else if ((w >> 8) % 61 == 1)
                y = (w >> 20) & 1 ? -0.0f : 0.0f;
            else if ((w >> 8) % 61 == 2)
                y = (w >> 20) & 1 ? -min_n : min_n;
            if (!f->is_signed || !f->has_zero) /* unsigned, no zero */
                y = fabsf(y) > 0.0f ? fabsf(y) : maxf;
            v[j] = y;
        }
        /* tiles 0-2 and the short one wholly on the grid; the others
         * with one lane off it */
        if (t >= 3 && t < NT) {
            const size_t lane = t % 3 == 0 ? 0 : t % 3 == 1 ? 517 : T - 1;
            const float x = v[lane];
            v[lane] = t - 3 < 5 ? odd[t - 3]
                    : bitsf(fbits(x != 0.0f ? x : min_n) ^ 1u);
        }
    }
    for (int m = 0; m < N_MODES; m++)
        for (int cfg = 0; cfg < 4; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg & 1, cfg >> 1,
                                                 0x961d, 3 * (uint64_t)cfg);
            compare_f32(f, &a, in, N, out);
            compare_in_place_f32(f, &a, in, N, out, inplace);
        }
}
END_TEST

/* ---- in place, chunking, edge cases ---------------------------------- */

/* Values that exercise every path: spread magnitudes, zeros, specials. */
static void mixed_inputs(test_rng *g, float *in, size_t n)
{
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
        0xffc00001u, 0x7f800001u, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
    };
    for (size_t i = 0; i < n; i++) {
        uint64_t w = test_next(g);
        if (w % 16 == 0) {
            in[i] = bitsf(specials[(w >> 8) % 10]);
            continue;
        }
        int e = (int)((w >> 8) % 80) - 60;
        float x = ldexpf(1.0f + (float)((w >> 20) & 0x7fffff) * 0x1p-23f, e);
        in[i] = (w >> 63) ? -x : x;
    }
}

START_TEST(test_in_place)
{
    const emu_format *f = carrier[_i];
    enum { N = 5000 };
    float in[N], buf[N], out[N];
    test_rng g = test_rng_make(0x1b1ace);
    mixed_inputs(&g, in, N);
    for (int m = 0; m < N_MODES; m++) {
        emu_array_rounding a = make_rounding(&modes[m], false, false, 9, 77);
        emu_round_counts c1 = { 0 }, c2 = { 0 };
        memcpy(buf, in, sizeof buf);
        emu_round_array_f32(f, out, in, N, &a, &c1, NULL);
        emu_round_array_f32(f, buf, buf, N, &a, &c2, NULL);
        for (int i = 0; i < N; i++)
            EXPECT(fbits(buf[i]) == fbits(out[i]),
                   "%s mode %d: in place in[%d] = 0x%08" PRIx32
                   " expected 0x%08" PRIx32 " got 0x%08" PRIx32,
                   f->name, m, i, fbits(in[i]), fbits(out[i]), fbits(buf[i]));
        EXPECT(!*test_counts_diff(&c1, &c2), "%s mode %d: in-place counts differ "
               "in %s", f->name, m, test_counts_diff(&c1, &c2));
    }
}
END_TEST

START_TEST(test_chunking)
{
    const emu_format *f = carrier[_i];
    enum { N = 20000 };
    static float in[N], whole[N], parts[N];
    test_rng g = test_rng_make(0xc4u + (uint64_t)_i);
    mixed_inputs(&g, in, N);
    for (int m = 0; m < N_MODES; m++) {
        emu_array_rounding a = make_rounding(&modes[m], m & 1, false, 31,
                                             1000003);
        emu_round_counts cw = { 0 }, cp = { 0 };
        emu_round_array_f32(f, whole, in, N, &a, &cw, NULL);
        for (size_t i = 0; i < N;) {
            size_t len = 1 + test_below(&g, test_below(&g, 2) ? 17 : 3000);
            if (len > N - i)
                len = N - i;
            emu_array_rounding part = a;
            part.first_index = a.first_index + i;
            emu_round_array_f32(f, parts + i, in + i, len, &part, &cp, NULL);
            i += len;
        }
        for (int i = 0; i < N; i++)
            EXPECT(fbits(whole[i]) == fbits(parts[i]),
                   "%s mode %d: chunked in[%d] = 0x%08" PRIx32
                   " whole 0x%08" PRIx32 " chunked 0x%08" PRIx32, f->name, m,
                   i, fbits(in[i]), fbits(whole[i]), fbits(parts[i]));
        EXPECT(!*test_counts_diff(&cw, &cp), "%s mode %d: chunked counts differ "
               "in %s", f->name, m, test_counts_diff(&cw, &cp));
    }
}
END_TEST

START_TEST(test_empty)
{
    const emu_format *f = test_format("e4m3");
    float in[1] = { 1.5f }, out[1] = { 7.0f };
    double din[1] = { 1.5 }, dout[1] = { 7.0 };
    for (int m = 0; m < N_MODES; m++) {
        emu_array_rounding a = make_rounding(&modes[m], false, false, 1, 0);
        emu_round_counts c = { 0 };
        EXPECT(emu_round_array_f32(f, out, in, 0, &a, &c, NULL) == 0,
               "n = 0 must succeed");
        EXPECT(emu_round_array_f64(f, dout, din, 0, &a, &c, NULL) == 0,
               "n = 0 must succeed (f64)");
        EXPECT(out[0] == 7.0f && dout[0] == 7.0, "n = 0 wrote to out");
        EXPECT(c.n == 0 && c.flags == 0, "n = 0 changed the counts");
        EXPECT(emu_round_array_f32(f, out, in, 0, &a, NULL, NULL) == 0,
               "n = 0 with counts NULL must succeed");
    }
}
END_TEST

START_TEST(test_nan_payloads)
{
    const emu_format *f = carrier[_i];
    enum { N = 64 };
    float in[N], out[N];
    for (int i = 0; i < N; i++) {
        /* Quiet and signalling, both signs, payloads from 1 to all ones. */
        uint32_t payload = i < 32 ? 1u << (i % 22) : 0x3fffffu >> (i % 22);
        uint32_t quiet = (i & 1) ? 0x00400000u : 0;
        uint32_t sign = (i & 2) ? 0x80000000u : 0;
        in[i] = bitsf(sign | 0x7f800000u | quiet | (payload | (quiet ? 0 : 1)));
    }
    for (int m = 0; m < N_MODES; m++)
        for (int sat = 0; sat < 2; sat++) {
            emu_array_rounding a = make_rounding(&modes[m], false, sat, 3, 5);
            compare_f32(f, &a, in, N, out);
        }
}
END_TEST

START_TEST(test_refuses_wide_formats)
{
    static const char *const specs[] = {
        "binary64", "e8m24", "e9m3", "e5m30", "e8m7,bias=160",
    };
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        emu_format f;
        emu_error err;
        EXPECT(emu_format_resolve(&f, specs[s], &err) == 0,
               "test setup: spec '%s' does not resolve", specs[s]);
        EXPECT(!f.fits_carrier, "test setup: '%s' fits the carrier",
               specs[s]);
        float in[3] = { 1.0f, 2.0f, 3.0f }, out[3] = { -1.0f, -1.0f, -1.0f };
        emu_array_rounding a = make_rounding(&modes[0], false, false, 0, 0);
        emu_round_counts c = { 0 };
        int rc = emu_round_array_f32(&f, out, in, 3, &a, &c, NULL);
        EXPECT(rc == -1, "'%s' does not fit binary32: expected -1, got %d",
               specs[s], rc);
        EXPECT(out[0] == -1.0f && out[1] == -1.0f && out[2] == -1.0f,
               "'%s': refused call wrote to out", specs[s]);
        EXPECT(c.n == 0, "'%s': refused call changed the counts", specs[s]);
    }
}
END_TEST

/* User formats the shipped list does not have: no subnormals with small
 * exponents, unsigned with a zero, emin below binary32's, p = 24. */
START_TEST(test_user_formats)
{
    static const char *const specs[] = {
        "e4m3,nosubnormals", "e5m2,unsigned", "e3m4,bias=1",
        "e8m3,bias=128", "e8m23,bias=120", "e6m5,bias=40,saturate",
        "e4m2,specials=fnuz,nosubnormals", "e8m1,bias=127,nosubnormals",
    };
    enum { N = 8192 };
    static float in[N], out[N];
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        emu_format f;
        emu_error err;
        char msg[512];
        if (emu_format_resolve(&f, specs[s], &err) != 0) {
            emu_error_format(&err, msg, sizeof msg);
            ck_abort_msg("test setup: spec '%s': %s", specs[s], msg);
        }
        if (!f.fits_carrier)
            continue;
        test_rng g = test_rng_make(0x05e7 + s);
        mixed_inputs(&g, in, N);
        for (int i = 0; i < N; i += 3) /* and some near the format's range */
            in[i] = ldexpf(bitsf(0x3f800000u | (uint32_t)(test_next(&g) & 0x7fffff)),
                           f.emin - f.p - 1 + (int)test_below(&g, (uint64_t)(
                               f.emax - f.emin + f.p + 3))) * (i % 2 ? -1.0f : 1.0f);
        for (int m = 0; m < N_MODES; m++)
            for (int cfg = 0; cfg < 4; cfg++) {
                emu_array_rounding a = make_rounding(&modes[m], cfg & 1,
                                                     cfg >> 1, s, 11);
                compare_f32(&f, &a, in, N, out);
            }
    }
}
END_TEST

/* Stochastic rounding below 2^emin compares floor(F 2^64) + word in 32-bit
 * halves; the low halves matter only when the high halves sum to exactly
 * 2^32 - 1, which random data hits with probability 2^-32.  Here the
 * inputs are built from the words: element i gets F 2^32 = ~wh + 3/4
 * (when that fits binary32 below 2^emin), so the high halves tie and
 * floor(F 2^64)'s low half is 0xc0000000: it rounds up iff the word's
 * low half exceeds 0x3fffffff. */
START_TEST(test_sr_low_half_ties)
{
    const emu_format *f = carrier[_i];
    enum { N = 1 << 17 };
    static float in[N], out[N];
    const int qs = f->subnormals ? f->emin - f->p + 1 : f->emin;
    if (qs - 34 < -149 || f->emin <= -126) /* not representable / scalar path */
        return;
    static const unsigned widths[] = { 64, 33, 40, 63 };
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        const mode_case m = { wi ? EMU_RS_BITS : EMU_RS, widths[wi] };
        emu_array_rounding a = make_rounding(&m, false, false, 0x7135, 99);
        test_rng g = test_rng_make(0x71e5 + wi);
        int ties = 0;
        for (int i = 0; i < N; i++) {
            uint64_t w = emu_random64(a.seed, a.stream, a.first_index + i);
            uint32_t nh = ~(uint32_t)(w >> 32);
            float x = ldexpf((float)nh + 0.75f, qs - 32);
            if (nh < (1u << 22) && x < (float)f->min_normal) {
                in[i] = (w & 1) ? -x : x;
                ties++;
            } else {
                in[i] = ldexpf((float)(test_next(&g) >> 40), qs - 30);
            }
        }
        EXPECT(ties > 32, "%s: only %d constructed ties", f->name, ties);
        compare_f32(f, &a, in, N, out);
    }
}
END_TEST

/* ---- binary64 input ---------------------------------------------------- */

static void compare_f64(const emu_format *f, const emu_array_rounding *a,
                        const double *in, size_t n, double *out)
{
    emu_round_counts got = { 0 }, want = { 0 };
    char mb[16];
    const mode_case mc = { a->rnd.mode, a->rnd.sr_bits };
    EXPECT(emu_round_array_f64(f, out, in, n, a, &got, NULL) == 0,
           "%s: emu_round_array_f64 failed", f->name);
    for (size_t i = 0; i < n; i++) {
        uint64_t word = emu_random64(a->seed, a->stream, a->first_index + i);
        emu_status st;
        double y = emu_round2_word(f, in[i], 0.0, &a->rnd, word, &st);
        emu_round_counts_add(&want, in[i], y, st.flags);
        EXPECT(d2u(y) == d2u(out[i]),
               "%s %s tininess %s saturate %d: in[%zu] = 0x%016" PRIx64
               " (%a): expected 0x%016" PRIx64 " (%a, flags 0x%x) got 0x%016"
               PRIx64 " (%a)", f->name, mode_label(&mc, mb, sizeof mb),
               a->rnd.tininess == EMU_TINY_BEFORE ? "before" : "after",
               (int)a->rnd.saturate, i, d2u(in[i]), in[i], d2u(y), y,
               st.flags, d2u(out[i]), out[i]);
    }
    char wb[256], gb[256];
    print_counts(wb, sizeof wb, &want);
    print_counts(gb, sizeof gb, &got);
    EXPECT(!*test_counts_diff(&want, &got), "%s %s: f64 counts differ in %s\n"
           "expected %s\ngot      %s", f->name, mode_label(&mc, mb, sizeof mb),
           test_counts_diff(&want, &got), wb, gb);
}

START_TEST(test_f64)
{
    const emu_format *f = emu_format_at((size_t)_i);
    enum { N = 6000 };
    static double in[N], out[N];
    test_rng g = test_rng_make(0xf64 + (uint64_t)_i);
    for (int i = 0; i < N; i++) {
        uint64_t w = test_next(&g);
        if (i % 3 == 0) { /* any pattern */
            in[i] = (double)bitsf((uint32_t)w);
            if (i % 6 == 0)
                memcpy(&in[i], &w, sizeof w);
            continue;
        }
        /* Near the format's range, with bits below binary32's precision
         * and ties at the format's precision. */
        int e = f->emin - f->p - 3 + (int)(w % (uint64_t)(f->emax - f->emin
                                                          + f->p + 6));
        double m = 1.0 + (double)(w >> 12) * 0x1p-52;
        if (i % 3 == 2)
            m = 1.0 + ldexp((double)((w >> 20) | 1), -f->p - 0) * 0x1p-44;
        in[i] = ldexp((w >> 11) & 1 ? -m : m, e);
    }
    in[1] = 0.0, in[2] = -0.0, in[4] = INFINITY, in[5] = -NAN;
    for (int m = 0; m < N_MODES; m++)
        for (int cfg = 0; cfg < 4; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg & 1, cfg >> 1,
                                                 17, 23);
            compare_f64(f, &a, in, N, out);
        }
}
END_TEST

/* Edge classes of binary64 input, for every binade from below the
 * format's subnormals to above its max (and binary64's own extremes): the
 * grid points of the format there, one binary64 ulp either side of them
 * and of the midpoints, the binade's ends, with both signs; zeros,
 * infinities, NaNs and binary64 subnormals.  Returns the count. */
static size_t f64_edge_inputs(const emu_format *f, double *in, size_t cap)
{
    size_t k = 0;
#define PUT(v)                                                                \
    do {                                                                      \
        if (k + 2 <= cap) {                                                   \
            in[k++] = (v);                                                    \
            in[k++] = -(v);                                                   \
        }                                                                     \
    } while (0)
    PUT(0.0);
    PUT(INFINITY);
    PUT(NAN);
    PUT(0x1p-1074);
    PUT(0x1.fffffffffffffp-1023);
    PUT(DBL_MAX);
    PUT(f->max);
    PUT(f->min_normal);
    for (int e = f->emin - f->p - 4; e <= f->emax + 2; e++) {
        const int q = (e < f->emin ? (f->subnormals ? f->emin - f->p + 1
                                                    : f->emin)
                                   : e - f->p + 1);
        const double lo_b = ldexp(1.0, e), step = ldexp(1.0, q);
        /* a few grid points of the binade: its first ones and its last */
        for (int j = 0; j < 6; j++) {
            double g = j < 3 ? lo_b + j * step
                             : ldexp(2.0, e) - (j - 2) * step;
            double mid = g + step / 2;
            const double v[] = { g, nextafter(g, 0.0), nextafter(g, INFINITY),
                                 mid, nextafter(mid, 0.0),
                                 nextafter(mid, INFINITY) };
            for (size_t t = 0; t < sizeof v / sizeof v[0]; t++)
                if (v[t] > 0.0)
                    PUT(v[t]);
        }
    }
#undef PUT
    return k;
}

START_TEST(test_f64_edges)
{
    const emu_format *f = carrier[_i];
    enum { CAP = 1 << 16 };
    static double in[CAP], out[CAP];
    const size_t n = f64_edge_inputs(f, in, CAP);
    EXPECT(n > 100 && n < CAP, "%s: %zu edge inputs", f->name, n);
    for (int m = 0; m < N_MODES; m++)
        for (int cfg = 0; cfg < 4; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg & 1, cfg >> 1,
                                                 5, 0);
            compare_f64(f, &a, in, n, out);
            /* again as short arrays, in place and at an offset: the
             * padded tiles and the copy of overlapping input */
            const size_t n_ip = n - 1 < 700 ? n - 1 : 700;
            memcpy(out, in, n * sizeof *in);
            emu_round_counts got = { 0 };
            EXPECT(emu_round_array_f64(f, out + 1, out + 1, n_ip, &a, &got,
                                       NULL) == 0, "in place");
            for (size_t i = 1; i <= n_ip; i++) {
                double y = emu_round2_word(f, in[i], 0.0, &a.rnd,
                                           emu_random64(a.seed, a.stream,
                                                        a.first_index + i - 1),
                                           NULL);
                EXPECT(d2u(y) == d2u(out[i]), "%s in place [%zu]",
                       f->name, i);
            }
        }
}
END_TEST

/* Arrays of a diverged model: long runs of one non-finite pattern (the
 * slow loops keep the last one's result, events and counts for its
 * repeats), switching between patterns, both signs, payloads up to the
 * largest (whose kernel lanes may wrap: no repeats taken for them),
 * broken by finite values, binary32 and binary64 input. */
START_TEST(test_special_runs)
{
    const emu_format *f = carrier[_i];
    enum { N = 3 * 1024 + 77 };
    static float in[N], out[N];
    static double in64[N], out64[N];
    static const uint32_t pat[] = {
        0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u, 0x7fa00001u,
        0x7fffffffu, 0xfffffffeu, 0x7ffc0000u, 0xff800001u,
    };
    enum { NP = sizeof pat / sizeof pat[0] };
    test_rng g = test_rng_make(0x5bec + (uint64_t)_i);
    size_t i = 0;
    while (i < N) {
        const uint32_t pb = pat[test_below(&g, NP)];
        size_t len = 1 + (size_t)test_below(&g, 300);
        for (size_t j = 0; j < len && i < N; j++, i++) {
            const bool finite = test_below(&g, 16) == 0;
            in[i] = finite ? ldexpf((float)(test_next(&g) >> 40),
                                    f->emin - 20 + (int)test_below(&g, 30))
                           : bitsf(pb);
            /* binary64: the same values, NaNs with their payload widened */
            uint64_t w = (uint64_t)(pb >> 31) << 63 | (uint64_t)0x7ff << 52
                         | (uint64_t)(pb & 0x7fffffu) << 29;
            if ((pb & 0x7fffffu) == 0x7fffffu || (pb & 0x7fffffu) == 0x7ffffeu)
                w |= ((uint64_t)1 << 29) - 1; /* the top payloads */
            in64[i] = finite ? (double)in[i] : u2d(w);
        }
    }
    for (int m = 0; m < N_MODES; m++)
        for (int cfg = 0; cfg < 4; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg & 1, cfg >> 1,
                                                 41, 9 * (uint64_t)cfg);
            compare_f32(f, &a, in, N, out);
            compare_f64(f, &a, in64, N, out64);
        }
}
END_TEST

/* Tiles whose slow lanes all hold one non-finite pattern (the paths
 * take them in passes over the whole tile) and tiles that only nearly
 * do: the pattern after finite values, among numbers the kernels cover,
 * beside a second pattern, beside a value that is slow for its size, the
 * largest payloads (no repeats taken), a short last tile; binary32 and
 * binary64 input, out of place and (binary32) in place. */
START_TEST(test_special_tiles)
{
    const emu_format *f = carrier[_i];
    enum { T = 1024, NT = 9, N = NT * T + 77 };
    static float in[N], out[N], inplace[N];
    static double in64[N], out64[N];
    static const uint32_t pat[NT + 1] = {
        0x7fc00000u, 0xffc00000u, 0x7fc00000u, 0x7f800000u, 0xffc00000u,
        0x7fffffffu, 0xff800000u, 0x7fa00001u, 0xffc00000u, 0x7fc00000u,
    };
    test_rng g = test_rng_make(0x7113 + (uint64_t)_i);
    for (size_t t = 0; t <= NT; t++) {
        const size_t len = t < NT ? T : N - NT * T;
        float *v = in + t * T;
        for (size_t j = 0; j < len; j++) {
            /* numbers in the format's normal range: fast lanes */
            const float num = ldexpf(1.0f + (float)(test_next(&g) >> 41) * 0x1p-23f,
                                     f->emin + 1 + (int)test_below(&g, 4));
            switch (t) {
            case 1: case 6: /* a number in every fourth lane */
                v[j] = j % 4 == 3 ? num : bitsf(pat[t]);
                break;
            case 2: /* the pattern from lane 300 on */
                v[j] = j < 300 ? num : bitsf(pat[t]);
                break;
            case 4: /* and one lane of another pattern */
                v[j] = j == 700 ? bitsf(0x7fc00000u) : bitsf(pat[t]);
                break;
            case 8: /* and one binary32 subnormal (slow in some formats) */
                v[j] = j == 5 ? bitsf(0x00000007u) : j == 900 ? -num
                                                              : bitsf(pat[t]);
                break;
            default:
                v[j] = bitsf(pat[t]);
                break;
            }
            /* binary64: the same values, NaN payloads widened (the top
             * ones to the top) */
            const uint32_t u = fbits(v[j]);
            uint64_t w = (uint64_t)(u >> 31) << 63 | (uint64_t)0x7ff << 52
                         | (uint64_t)(u & 0x7fffffu) << 29;
            if ((u & 0x7fffffu) == 0x7fffffu)
                w |= ((uint64_t)1 << 29) - 1;
            in64[t * T + j] = (u & 0x7f800000u) == 0x7f800000u ? u2d(w)
                                                               : (double)v[j];
        }
    }
    for (int m = 0; m < N_MODES; m++)
        for (int cfg = 0; cfg < 4; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg & 1, cfg >> 1,
                                                 77, 5 * (uint64_t)cfg);
            compare_f32(f, &a, in, N, out);
            compare_f64(f, &a, in64, N, out64);
            compare_in_place_f32(f, &a, in, N, out, inplace);
        }
}
END_TEST

/* The smallest significand sig (implicit bit included, in [2^52, 2^53))
 * of a value whose quantum drops dd bits of it with floor(F 2^64) >= t,
 * t >= 1: the stochastic carry's edge, sig - 1 lying just below it.
 * False if no such pair sig - 1, sig exists in the binade. */
static bool sr_edge_sig(unsigned dd, uint64_t t, test_rng *g, uint64_t *sig)
{
    const uint64_t implicit = (uint64_t)1 << 52;
    uint64_t s;
    if (dd <= 52) { /* random kept bits, the dropped ones at the edge */
        const unsigned sh = 64 - dd;
        const uint64_t f = (t >> sh) + ((t & (((uint64_t)1 << sh) - 1)) != 0);
        if (f >= ((uint64_t)1 << dd) || f == 0)
            return false;
        const uint64_t kept = (test_next(g) >> (11 + dd)) | (implicit >> dd);
        s = (kept << dd) | f;
    } else if (dd <= 63) { /* every bit dropped */
        const unsigned sh = 64 - dd;
        s = (t >> sh) + ((t & (((uint64_t)1 << sh) - 1)) != 0);
        if (s <= implicit || s >= 2 * implicit)
            return false;
    } else { /* below 2^-11 quanta: floor(F 2^64) = sig >> (dd - 64) */
        const unsigned sh = dd - 64;
        if (sh > 52 || t > ((2 * implicit - 1) >> sh))
            return false;
        s = t << sh;
        if (s <= implicit)
            return false;
    }
    *sig = s;
    return true;
}

/* Stochastic rounding of binary64 input at the carry's edge: for element
 * i, with word w (cut to its top r bits), a value whose floor(F 2^64) is
 * 2^64 - w (rounds up) or one below it (rounds down), in binades from far
 * below 2^emin (F below 2^-11, the lanes' shifted-down case, which the
 * words near 2^64 allow) up through the format's normal range; a quarter
 * of them in the binade just below 2^emin with every bit kept at p bits
 * one (tininess after rounding's case, off the edge). */
START_TEST(test_f64_sr_edges)
{
    const emu_format *f = carrier[_i];
    enum { N = 1 << 15 };
    static double in[N], out[N];
    const int d = 53 - f->p, d_low = f->subnormals ? d : 52;
    const int emin_e = f->emin + 1023;
    const uint64_t frac = ((uint64_t)1 << 52) - 1;
    for (int m = 0; m < N_MODES; m++) {
        if (!emu_rnd_is_stochastic(modes[m].mode))
            continue;
        const unsigned rb = modes[m].bits ? modes[m].bits : 64;
        const uint64_t top = rb >= 64 ? ~(uint64_t)0 : ~(~(uint64_t)0 >> rb);
        for (int cfg = 0; cfg < 2; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg, false, 0x5e,
                                                 777 * (uint64_t)cfg);
            test_rng g = test_rng_make(0xed6e + (uint64_t)m);
            int tried = 0, built = 0, far = 0;
            for (size_t i = 0; i < N; i++) {
                const uint64_t w = emu_random64(a.seed, a.stream,
                                                a.first_index + i) & top;
                in[i] = ldexp((double)(test_next(&g) >> 11), f->emin - 60);
                if (w == 0)
                    continue;
                const uint64_t t = ~w + 1; /* 2^64 - w */
                tried++;
                int hb = 63;
                while (!(t >> hb))
                    hb--;
                for (int tries = 0; tries < 8; tries++) {
                    /* from dd = 63 below 2^emin up to emax */
                    int E = emin_e + d_low - 63
                            + (int)test_below(&g, (uint64_t)(f->emax - f->emin
                                                             + 64 - d_low));
                    const bool ones = tries == 0 && i % 4 == 0;
                    if (ones)
                        E = emin_e - 1;
                    else if (tries == 0 && hb <= 52)
                        E = emin_e + d_low - 64 - (52 - hb); /* far */
                    if (E < 1)
                        continue;
                    const unsigned dd = E >= emin_e ? (unsigned)d
                                        : (unsigned)(d_low + emin_e - E);
                    uint64_t sig;
                    if (!sr_edge_sig(dd, t, &g, &sig))
                        continue;
                    if (i % 2)
                        sig -= 1;
                    if (ones) /* the bits p keeps: 2^52 .. 2^d */
                        sig |= frac & ~(((uint64_t)1 << d) - 1);
                    const uint64_t u = ((uint64_t)E << 52) | (sig & frac);
                    in[i] = u2d(u | ((test_next(&g) & 1) << 63));
                    built++;
                    far += dd >= 64;
                    break;
                }
            }
            /* (r-bit words of r < 23 leave few far edges, none below 12) */
            EXPECT(built > tried * 3 / 4 && (far > 2 || rb < 23),
                   "%s sr%u: %d edge values of %d, %d far", f->name, rb,
                   built, tried, far);
            compare_f64(f, &a, in, N, out);
        }
    }
}
END_TEST

/* ---- pairs hi + lo (emu_round_pairs_f32_unguarded) --------------------- */

/* The low parts tried with each hi: none, the smallest doubles, tiny and
 * moderate ones, half of hi's ulp (a tie in binary64) and just inside, and
 * parts that overlap hi (which the choke point normalises). */
static double pair_lo(const double hi, int j, test_rng *g)
{
    int e;
    frexp(hi, &e);
    const double half = hi == 0.0 ? 0x1p-1074 : ldexp(1.0, e - 54);
    const double s = (j & 1) ? -1.0 : 1.0;
    switch (j >> 1) {
    case 0: return s * 0.0;
    case 1: return s * 0x1p-1074;
    case 2: return s * half;
    case 3: return s * nextafter(half, 0.0);
    case 4: return s * ldexp(1.0 + (double)(test_next(g) >> 12) * 0x1p-52,
                             e - 60 - (int)test_below(g, 40));
    case 5: return s * ldexp(1.0 + (double)(test_next(g) >> 12) * 0x1p-52,
                             e - 54 - (int)test_below(g, 4));
    default: return s * ldexp((double)(test_next(g) >> 11),
                              e - 40 - (int)test_below(g, 40));
    }
}
enum { N_PAIR_LO = 14 };

static void compare_pairs(const emu_format *f, const emu_array_rounding *a,
                          const double *hi, const double *lo, size_t n,
                          float *out)
{
    emu_round_counts got = { 0 }, want = { 0 };
    char mb[16];
    const mode_case mc = { a->rnd.mode, a->rnd.sr_bits };
    emu_round_pairs_f32_unguarded(f, out, hi, lo, n, a, &got);
    for (size_t i = 0; i < n; i++) {
        uint64_t word = emu_rnd_is_stochastic(a->rnd.mode)
                        ? emu_random64(a->seed, a->stream, a->first_index + i)
                        : 0;
        emu_status st;
        double y = emu_round2_word(f, hi[i], lo[i], &a->rnd, word, &st);
        emu_round_counts_add(&want, hi[i], y, st.flags);
        EXPECT(fbits((float)y) == fbits(out[i]),
               "%s %s saturate %d: pair [%zu] %a + %a word 0x%016" PRIx64
               ": expected %a (flags 0x%x) got %a", f->name,
               mode_label(&mc, mb, sizeof mb), (int)a->rnd.saturate, i,
               hi[i], lo[i], word, y, st.flags, (double)out[i]);
    }
    char wb[256], gb[256];
    print_counts(wb, sizeof wb, &want);
    print_counts(gb, sizeof gb, &got);
    EXPECT(!*test_counts_diff(&want, &got), "%s %s: pair counts differ in %s\n"
           "expected %s\ngot      %s", f->name, mode_label(&mc, mb, sizeof mb),
           test_counts_diff(&want, &got), wb, gb);
}

/* The array functions remember their last plan per thread, keyed on the
 * format's bytes and the rounding's fields.  Here one emu_format object
 * (one address) takes each carrier format in turn, and the rounding's
 * mode, tininess, saturation and NaN profile change between calls with
 * the format unchanged: a plan kept when its key changed would give the
 * previous format's or rounding's results, which the comparisons with
 * the choke point catch. */
START_TEST(test_plan_memory)
{
    enum { N = 2 * 1024 + 37 };
    static float in[N], out[N];
    static double in64[N], out64[N], zero[N];
    test_rng g = test_rng_make(0x91a4);
    mixed_inputs(&g, in, N);
    for (size_t i = 0; i < N; i++)
        in64[i] = in[i];
    emu_format f;
    const mode_case rne = { EMU_RNE, 0 }, sr = { EMU_RS, 64 },
                    sr3 = { EMU_RS_BITS, 3 };
    for (int k = 0; k < 2 * n_carrier; k++) {
        /* forward through the list, then backward */
        const int j = k < n_carrier ? k : 2 * n_carrier - 1 - k;
        memcpy(&f, carrier[j], sizeof f);
        for (int cfg = 0; cfg < 8; cfg++) {
            const mode_case *m = cfg < 4 ? &rne : cfg < 6 ? &sr : &sr3;
            emu_array_rounding a = make_rounding(m, cfg & 1, (cfg >> 1) & 1,
                                                 (uint64_t)k, 5);
            a.rnd.profile.nan_negative = cfg == 3;
            a.rnd.profile.narrow_nan_all_ones = cfg == 2;
            compare_f32(&f, &a, in, N, out);
            compare_f64(&f, &a, in64, N, out64);
            if (emu_rnd_is_stochastic(m->mode))
                compare_pairs(&f, &a, in64, zero, N, out);
        }
    }
}
END_TEST

/* Every edge class of hi (f64_edge_inputs) with every class of lo, and
 * random pairs around the format's range, in every mode (the stochastic
 * ones run the kernel, the others the scalar path). */
START_TEST(test_pairs)
{
    const emu_format *f = carrier[_i];
    enum { CAP = 1 << 14, N = CAP * N_PAIR_LO };
    static double edges[CAP], hi[N], lo[N];
    static float out[N];
    test_rng g = test_rng_make(0x9a125 + (uint64_t)_i);
    const size_t ne = f64_edge_inputs(f, edges, CAP);
    size_t n = 0;
    for (size_t i = 0; i < ne; i++)
        for (int j = 0; j < N_PAIR_LO; j++) {
            hi[n] = edges[i];
            lo[n++] = pair_lo(edges[i], j, &g);
        }
    /* random pairs: hi anywhere near the range, of a random length */
    const size_t n_random = test_scaled(40000, 2000);
    for (size_t k = 0; k < n_random && n < N; k++) {
        uint64_t w = test_next(&g);
        int e = f->emin - f->p - 3 + (int)(w % (uint64_t)(f->emax - f->emin
                                                          + f->p + 6));
        double m = 1.0 + (double)(test_next(&g) >> (12 + (w >> 60))) * 0x1p-52;
        hi[n] = ldexp((w >> 11) & 1 ? -m : m, e);
        lo[n] = pair_lo(hi[n], (int)test_below(&g, N_PAIR_LO), &g);
        n++;
    }
    /* non-finite low parts under finite (and zero) high parts, which the
     * kernel sends to the choke point by their sum */
    const double nf_hi[] = { 1.0, -0x1.8p-3, 0.0, -0.0, 0x1p1023 };
    const double nf_lo[] = { INFINITY, -INFINITY, NAN, -NAN };
    for (size_t i = 0; i < sizeof nf_hi / sizeof *nf_hi; i++)
        for (size_t j = 0; j < sizeof nf_lo / sizeof *nf_lo && n < N; j++) {
            hi[n] = nf_hi[i];
            lo[n++] = nf_lo[j];
        }
    for (int m = 0; m < N_MODES; m++)
        for (int cfg = 0; cfg < 4; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg & 1, cfg >> 1,
                                                 31, 1000 * (uint64_t)cfg);
            compare_pairs(f, &a, hi, lo, n, out);
            /* a short array at an offset: the padded tile */
            compare_pairs(f, &a, hi + 3, lo + 3, 77, out);
        }
}
END_TEST

/* Pairs below 2^emin, which the stochastic kernel rounds in vector lanes
 * once a tile has sent many to the choke point: hi from 2^(emin-p-12)
 * (beyond the lanes' reach) up to 2^emin, a quarter of them with every
 * stored bit one (in the binade just below 2^emin: the values whose
 * rounding at p bits could reach 2^emin, tininess after rounding's
 * case), with every class of low part. */
START_TEST(test_pairs_below_emin)
{
    const emu_format *f = carrier[_i];
    if (!f->subnormals)
        return;
    enum { N = 8 * 1024 };
    static double hi[N], lo[N];
    static float out[N];
    test_rng g = test_rng_make(0xbe10 + (uint64_t)_i);
    for (size_t k = 0; k < N; k++) {
        uint64_t w = test_next(&g);
        int e = f->emin - f->p - 12 + (int)(w % (uint64_t)(f->p + 12));
        double m = 1.0 + (double)(test_next(&g) >> 12) * 0x1p-52;
        if ((w >> 40) % 4 == 0) /* the stored bits all ones, then random */
            m = 2.0 - ldexp(1.0, 1 - f->p)
                + (double)(test_next(&g) >> 12) * ldexp(1.0, 1 - f->p - 52);
        hi[k] = ldexp((w >> 11) & 1 ? -m : m, e);
        lo[k] = pair_lo(hi[k], (int)test_below(&g, N_PAIR_LO), &g);
    }
    for (int m = 0; m < N_MODES; m++) {
        if (!emu_rnd_is_stochastic(modes[m].mode))
            continue;
        for (int cfg = 0; cfg < 2; cfg++) {
            emu_array_rounding a = make_rounding(&modes[m], cfg, false, 77,
                                                 5000 * (uint64_t)cfg);
            compare_pairs(f, &a, hi, lo, N, out);
        }
    }
}
END_TEST

/* The lean kernel block-scaled quantization uses (emu_rne_sat_f32) is the
 * choke point with EMU_RNE and saturation, on finite inputs: every
 * binary32 value whose exponent lies within two binades of the format's
 * range is tried with its fraction's top 9 bits exhaustive and the rest
 * random, plus zeros, the smallest subnormals and the largest finite
 * values (the whole range, so rounding into saturation is covered). */
START_TEST(test_rne_sat_kernel)
{
    const emu_format *f = carrier[_i];
    emu_rne_sat_plan k;
    if (!emu_rne_sat_plan_make(&k, f))
        return; /* no subnormals, unsigned, fnuz...: the general path */
    test_rng g = test_rng_make(0x5a7 + (uint64_t)_i);
    enum { M = 1 << 9 };
    float in[2 * M], out[2 * M];
    const emu_rounding sat = { .mode = EMU_RNE, .saturate = true };
    const int e_lo = f->qmin - 2 < -149 ? -149 : f->qmin - 2;
    const int e_hi = f->emax + 2 > 127 ? 127 : f->emax + 2;
    uint64_t checked = 0;
    for (int e = e_lo; e <= e_hi; e++)
        for (int rep = 0; rep < 2; rep++) {
            for (int j = 0; j < 2 * M; j++) {
                uint32_t frac = ((uint32_t)(j % M) << 14) |
                                (uint32_t)(test_next(&g) & 0x3fffu);
                if (rep == 0 && j < 8)
                    frac &= ~0x3fffu; /* exact grid and tie points */
                float v = ldexpf(1.0f + (float)frac * 0x1p-23f, e);
                in[j] = j >= M ? -v : v;
            }
            emu_rne_sat_f32(&k, out, in, 2 * M);
            for (int j = 0; j < 2 * M; j++) {
                double want = emu_round(f, in[j], &sat, NULL);
                EXPECT(test_same(out[j], want), "%s: rne,saturate of %a: "
                       "kernel %a, choke point %a", f->name, (double)in[j],
                       (double)out[j], want);
                checked++;
            }
        }
    const float edge[] = { 0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 0x1p-126f,
                           0x1.fffffep127f, -0x1.fffffep127f, 0x1p-100f };
    float eo[8];
    emu_rne_sat_f32(&k, eo, edge, 8);
    for (int j = 0; j < 8; j++)
        EXPECT(test_same(eo[j], emu_round(f, edge[j], &sat, NULL)),
               "%s: rne,saturate of %a: kernel %a", f->name, (double)edge[j],
               (double)eo[j]);
    ck_assert(checked > 0);
}
END_TEST

static Suite *round_array_suite(void)
{
    Suite *s = suite_create("round_array");
    TCase *tc = tcase_create("carrier");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_structured, 0, n_carrier);
    tcase_add_loop_test(tc, test_random, 0, n_carrier);
    tcase_add_loop_test(tc, test_in_place, 0, n_carrier);
    tcase_add_loop_test(tc, test_chunking, 0, n_carrier);
    tcase_add_loop_test(tc, test_nan_payloads, 0, n_carrier);
    tcase_add_loop_test(tc, test_special_runs, 0, n_carrier);
    tcase_add_loop_test(tc, test_special_tiles, 0, n_carrier);
    tcase_add_loop_test(tc, test_on_grid_tiles, 0, n_carrier);
    tcase_add_loop_test(tc, test_sr_low_half_ties, 0, n_carrier);
    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_refuses_wide_formats);
    tcase_add_test(tc, test_user_formats);
    tcase_add_test(tc, test_plan_memory);
    tcase_add_loop_test(tc, test_f64, 0, (int)emu_format_count());
    tcase_add_loop_test(tc, test_f64_edges, 0, n_carrier);
    tcase_add_loop_test(tc, test_f64_sr_edges, 0, n_carrier);
    tcase_add_loop_test(tc, test_pairs, 0, n_carrier);
    tcase_add_loop_test(tc, test_pairs_below_emin, 0, n_carrier);
    tcase_add_loop_test(tc, test_rne_sat_kernel, 0, n_carrier);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (test_isa_skip())
        return 77;
    find_carrier_formats();
    if (n_carrier == 0) {
        fprintf(stderr, "no registered format fits the carrier\n");
        return 1;
    }
    SRunner *sr = srunner_create(round_array_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
