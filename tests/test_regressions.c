/*
 * test_regressions.c — one named test per bug seen in floating-point
 * emulators (ours in draft, or others'), so that none comes back.
 *
 * Each test states the answer the bug got wrong, and checks the emulator
 * against the MPFR oracle (emu/ref.h) on value, sign, ternary and flags.
 * The stated answer is also checked against the oracle: if the two ever
 * disagree, either the regression's premise or the oracle is wrong, and
 * the message says which number came from where.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/ref.h>

#include "testutil.h"

#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

static int sgn(int t)
{
    return (t > 0) - (t < 0);
}

static emu_rounding mode(emu_rnd m)
{
    emu_rounding r;
    memset(&r, 0, sizeof r);
    r.mode = m;
    return r;
}

/* The emulator's answer (got, gs) against the oracle's (ref, rs), and the
 * oracle against the value the regression is about. */
static void agree(const char *what, const emu_rounding *r, double got,
                  emu_status gs, double ref, emu_status rs, double stated)
{
    char gf[128], rf[128];
    emu_flags_string(gs.flags, gf, sizeof gf);
    emu_flags_string(rs.flags, rf, sizeof rf);
    EXPECT(test_same(ref, stated), "%s [%s]: MPFR gives %a (%s), the "
           "regression expects %a", what, emu_rnd_name(r->mode), ref, rf,
           stated);
    EXPECT(test_same(got, ref) && sgn(gs.ternary) == sgn(rs.ternary) &&
           gs.flags == rs.flags, "%s [%s]: got %a ternary %d flags %s; MPFR "
           "%a ternary %d flags %s", what, emu_rnd_name(r->mode), got,
           gs.ternary, gf, ref, rs.ternary, rf);
}

/* emu_round of a double, against the oracle's conversion. */
static double round_checked(const char *what, const emu_format *f, double x,
                            const emu_rounding *r, double stated)
{
    emu_status gs, rs;
    double got = emu_round(f, x, r, &gs);
    double ref = emu_ref_convert(f, x, r, &rs);
    char w[256];
    snprintf(w, sizeof w, "%s: round %s(%a)", what, f->name, x);
    agree(w, r, got, gs, ref, rs, stated);
    return got;
}

/* ---- ties ------------------------------------------------------------- */

/* Ties-away masquerading as ties-to-even (a round-half-up "add half an
 * ulp and truncate" implementation): 1 + 2^-11 is exactly halfway between
 * 1 and 1 + 2^-10 in binary16, and RNE keeps the even 1. */
START_TEST(rne_tie_goes_to_even_not_away)
{
    const emu_format *h = test_format("binary16");
    emu_rounding rne = mode(EMU_RNE), rna = mode(EMU_RNA);
    round_checked("tie below", h, 1.0 + 0x1p-11, &rne, 1.0);
    round_checked("tie below", h, -(1.0 + 0x1p-11), &rne, -1.0);
    round_checked("tie above", h, 1.0 + 3 * 0x1p-11, &rne, 1.0 + 0x1p-9);
    round_checked("ties away", h, 1.0 + 0x1p-11, &rna, 1.0 + 0x1p-10);

    emu_status gs, rs;
    double got = emu_add(h, 1.0, 0x1p-11, &rne, &gs);
    double ref = emu_ref_add(h, 1.0, 0x1p-11, &rne, &rs);
    agree("add 1 + 2^-11", &rne, got, gs, ref, rs, 1.0);
}
END_TEST

/* ---- signed zeros ----------------------------------------------------- */

/* Rounding toward +inf that "fixes up" negative zeros: -0 + -0 is -0 in
 * every mode, -0 rounds to -0, and a tiny negative rounds up to -0, not +0. */
START_TEST(toward_positive_keeps_negative_zero)
{
    const emu_format *h = test_format("binary16");
    emu_rounding ru = mode(EMU_RU), rd = mode(EMU_RD), rne = mode(EMU_RNE);
    emu_status gs, rs;
    double got = emu_add(h, -0.0, -0.0, &ru, &gs);
    double ref = emu_ref_add(h, -0.0, -0.0, &ru, &rs);
    agree("-0 + -0", &ru, got, gs, ref, rs, -0.0);
    got = emu_sub(h, -0.0, 0.0, &ru, &gs);
    ref = emu_ref_sub(h, -0.0, 0.0, &ru, &rs);
    agree("-0 - +0", &ru, got, gs, ref, rs, -0.0);

    round_checked("round(-0)", h, -0.0, &ru, -0.0);
    round_checked("-tiny", h, -0x1p-30, &ru, -0.0);
    round_checked("-tiny", h, -0x1p-26, &ru, -0.0);

    got = emu_mul(h, -0x1p-14, 0x1p-14, &ru, &gs);
    ref = emu_ref_mul(h, -0x1p-14, 0x1p-14, &ru, &rs);
    agree("-2^-14 * 2^-14", &ru, got, gs, ref, rs, -0.0);

    /* x - x: +0, except toward -inf. */
    got = emu_add(h, 1.0, -1.0, &rd, &gs);
    ref = emu_ref_add(h, 1.0, -1.0, &rd, &rs);
    agree("1 + -1", &rd, got, gs, ref, rs, -0.0);
    got = emu_add(h, 1.0, -1.0, &ru, &gs);
    ref = emu_ref_add(h, 1.0, -1.0, &ru, &rs);
    agree("1 + -1", &ru, got, gs, ref, rs, 0.0);
    got = emu_add(h, 1.0, -1.0, &rne, &gs);
    ref = emu_ref_add(h, 1.0, -1.0, &rne, &rs);
    agree("1 + -1", &rne, got, gs, ref, rs, 0.0);
}
END_TEST

/* ---- double rounding -------------------------------------------------- */

/* fma computed as a binary32 product-sum and then rounded to binary16:
 * the exact value 1 + 2^-11 + 2^-31 lies just above the midpoint of 1 and
 * 1 + 2^-10, but binary32 drops the 2^-31 and the tie then goes to 1. */
START_TEST(fma_rounds_once)
{
    const emu_format *h = test_format("binary16");
    const double a = -0x1p-11 * (1.0 + 0x1p-10), b = 1.0 - 0x1p-10,
                 c = 1.0 + 0x1p-10;
    emu_rounding rne = mode(EMU_RNE);
    emu_status gs, rs;
    double got = emu_fma(h, a, b, c, &rne, &gs);
    double ref = emu_ref_fma(h, a, b, c, &rne, &rs);
    agree("fma(-2^-11(1+2^-10), 1-2^-10, 1+2^-10)", &rne, got, gs, ref, rs,
          1.0 + 0x1p-10);
    /* What the bug computes, to show the case discriminates. */
    float p = (float)a * (float)b + (float)c; /* -ffp-contract=off: 2 roundings */
    double twice = emu_round(h, (double)p, &rne, NULL);
    EXPECT(twice == 1.0, "binary32-then-binary16 gives %a, expected the "
           "double-rounded 1", twice);
    /* Every deterministic mode agrees with the oracle here too. */
    for (int m = 0; m < TEST_DET_MODES; m++) {
        emu_rounding r = mode((emu_rnd)m);
        got = emu_fma(h, a, b, c, &r, &gs);
        ref = emu_ref_fma(h, a, b, c, &r, &rs);
        agree("fma", &r, got, gs, ref, rs, ref);
    }
}
END_TEST

/* binary32 -> e4m3 through binary16 (a common shortcut): 1 + 2^-4 + 2^-20
 * is above the e4m3 midpoint 1 + 2^-4, so it rounds to 1.125; through
 * binary16 it first becomes the midpoint itself and then ties to 1. */
START_TEST(binary32_to_e4m3_rounds_once)
{
    const emu_format *e = test_format("e4m3"), *h = test_format("binary16");
    emu_rounding rne = mode(EMU_RNE);
    const float x = 1.0f + 0x1p-4f + 0x1p-20f;
    round_checked("single rounding", e, (double)x, &rne, 1.125);
    emu_status gs, rs;
    double got = emu_convert(e, (double)x, &rne, &gs);
    double ref = emu_ref_convert(e, (double)x, &rne, &rs);
    agree("emu_convert", &rne, got, gs, ref, rs, 1.125);
    double twice = emu_round(e, emu_round(h, (double)x, &rne, NULL), &rne, NULL);
    EXPECT(twice == 1.0, "via binary16: %a, expected the double-rounded 1",
           twice);

    /* The tensor path (binary32 arrays) on a sample of binary32 values,
     * every deterministic mode, against the oracle; the sample must contain
     * cases where the binary16 shortcut would differ. */
    enum { N = 4096 };
    static float in[N], out[N];
    test_rng g = test_rng_make(0xe4);
    for (size_t i = 0; i < N; i++) {
        /* e4m3's range and a little beyond, all 24 bits random. */
        uint32_t u = (uint32_t)(117 + test_below(&g, 22)) << 23 |
                     (uint32_t)(test_next(&g) & 0x7fffff) |
                     (uint32_t)test_below(&g, 2) << 31;
        memcpy(&in[i], &u, sizeof u);
    }
    in[0] = x;
    for (int m = 0; m < TEST_DET_MODES; m++) {
        emu_array_rounding a;
        memset(&a, 0, sizeof a);
        a.rnd = mode((emu_rnd)m);
        ck_assert_int_eq(emu_round_array_f32(e, out, in, N, &a, NULL, NULL), 0);
        size_t discriminating = 0;
        for (size_t i = 0; i < N; i++) {
            double r = emu_ref_convert(e, (double)in[i], &a.rnd, &rs);
            uint32_t u;
            memcpy(&u, &in[i], sizeof u);
            EXPECT(test_same((double)out[i], r), "e4m3 %s: binary32 %a "
                   "(%#010" PRIx32 ") -> %a, MPFR %a", emu_rnd_name(a.rnd.mode),
                   (double)in[i], u, (double)out[i], r);
            double via = emu_round(e, emu_round(h, (double)in[i], &a.rnd, NULL),
                                   &a.rnd, NULL);
            discriminating += !test_same(via, r);
        }
        /* Only the nearest modes suffer from the shortcut: directed
         * roundings compose (rounding toward a direction twice is rounding
         * once), and round-to-odd at p + 2 or more bits is the classic
         * innocuous double rounding (Boldo and Melquiond). */
        if (m == EMU_RNE || m == EMU_RNA)
            EXPECT(discriminating > 0, "e4m3 %s: no sample value where the "
                   "binary16 shortcut differs", emu_rnd_name(a.rnd.mode));
    }
}
END_TEST

/* ---- OCP E4M3's range ------------------------------------------------- */

/* E4M3 decoders that treat S.1111.111's neighbour binade like IEEE's
 * produce 480 (= 1.875 * 2^8), a NaN pattern in OCP's encoding.  Nothing
 * may round to 480: the largest finite value is 448; a value whose
 * rounding exceeds 448 overflows (NaN, or 448 when saturating, or 448 for
 * the modes that round toward it). */
START_TEST(e4m3_never_480)
{
    const emu_format *e = test_format("e4m3");
    for (int sat = 0; sat < 2; sat++)
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_rounding r = mode((emu_rnd)m);
            r.saturate = sat;
            for (int k = 440 * 8; k <= 500 * 8; k++)
                for (int sign = 1; sign >= -1; sign -= 2) {
                    double x = sign * k / 8.0;
                    emu_status gs, rs;
                    double got = emu_round(e, x, &r, &gs);
                    double ref = emu_ref_convert(e, x, &r, &rs);
                    EXPECT(!(fabs(got) > 448.0), "e4m3 %s%s: %a -> %a",
                           emu_rnd_name(r.mode), sat ? "+sat" : "", x, got);
                    EXPECT(test_same(got, ref) && gs.flags == rs.flags &&
                           sgn(gs.ternary) == sgn(rs.ternary), "e4m3 %s%s: %a "
                           "-> %a flags %#x, MPFR %a flags %#x",
                           emu_rnd_name(r.mode), sat ? "+sat" : "", x, got,
                           gs.flags, ref, rs.flags);
                }
        }
    /* The landmarks: 464 is the midpoint of 448 and (non-existent) 480 and
     * ties to the even 448; anything above it is an overflow in RNE. */
    emu_rounding rne = mode(EMU_RNE), sat = mode(EMU_RNE);
    sat.saturate = true;
    round_checked("midpoint", e, 464.0, &rne, 448.0);
    round_checked("above the midpoint", e, 464.0 + 0x1p-10, &rne, NAN);
    round_checked("470", e, 470.0, &rne, NAN);
    round_checked("470", e, 470.0, &sat, 448.0);
    round_checked("500", e, 500.0, &sat, 448.0);
    emu_rounding ru = mode(EMU_RU), rz = mode(EMU_RZ), rd = mode(EMU_RD);
    round_checked("449", e, 449.0, &ru, NAN);
    round_checked("449", e, 449.0, &rz, 448.0);
    round_checked("-449", e, -449.0, &ru, -448.0);
    round_checked("-449", e, -449.0, &rd, NAN);
    /* Stochastic rounding of (448, 480) gives 448 or the overflow NaN. */
    emu_rng rng = emu_rng_make(4, 8);
    emu_rounding sr = mode(EMU_RS);
    sr.rng = &rng;
    for (int k = 0; k < 10000; k++) {
        double x = 448.0 + 32.0 * (k + 0.5) / 10000.0;
        double y = emu_round(e, x, &sr, NULL);
        EXPECT(y == 448.0 || isnan(y), "e4m3 sr: %a -> %a", x, y);
    }
}
END_TEST

/* Flush-to-zero below the smallest subnormal's half: 2^-10 is the
 * midpoint of 0 and 2^-9 (E4M3's smallest subnormal), so anything above
 * it must round up to 2^-9, not to 0. */
START_TEST(e4m3_above_half_min_subnormal_rounds_up)
{
    const emu_format *e = test_format("e4m3");
    emu_rounding rne = mode(EMU_RNE);
    round_checked("2^-10 + 2^-30", e, 0x1p-10 + 0x1p-30, &rne, 0x1p-9);
    round_checked("2^-10 + 2^-20", e, 0x1p-10 + 0x1p-20, &rne, 0x1p-9);
    round_checked("0.75 * 2^-9", e, 0.75 * 0x1p-9, &rne, 0x1p-9);
    round_checked("-(2^-10 + 2^-30)", e, -(0x1p-10 + 0x1p-30), &rne, -0x1p-9);
    round_checked("2^-10 (tie to even 0)", e, 0x1p-10, &rne, 0.0);
    round_checked("2^-10 - 2^-30", e, 0x1p-10 - 0x1p-30, &rne, 0.0);
    /* The tensor path too. */
    float in[2] = { 0x1p-10f + 0x1p-30f, -(0x1p-10f + 0x1p-23f) }, out[2];
    emu_array_rounding a;
    memset(&a, 0, sizeof a);
    ck_assert_int_eq(emu_round_array_f32(e, out, in, 2, &a, NULL, NULL), 0);
    EXPECT(out[0] == 0x1p-9f && out[1] == -0x1p-9f, "array: %a %a", (double)out[0],
           (double)out[1]);
}
END_TEST

/* ---- stochastic rounding ---------------------------------------------- */

/* An SR that draws no random word (or a constant one) is truncation:
 * adding a quarter ulp to 1 in binary16 then never moves.  With real SR
 * the sum of 4096 additions of 2^-12 reaches about 2; see
 * test_stochastic.c for the statistics. */
START_TEST(stochastic_rounding_is_not_truncation)
{
    const emu_format *h = test_format("binary16");
    emu_rng rng = emu_rng_make(2024, 0);
    emu_rounding sr = mode(EMU_RS), rz = mode(EMU_RZ), rne = mode(EMU_RNE);
    sr.rng = &rng;
    double xs = 1.0, xz = 1.0, xn = 1.0;
    for (int i = 0; i < 4096; i++) {
        xs = emu_add(h, xs, 0x1p-12, &sr, NULL);
        xz = emu_add(h, xz, 0x1p-12, &rz, NULL);
        xn = emu_add(h, xn, 0x1p-12, &rne, NULL);
    }
    EXPECT(xs >= 1.6875 && xs <= 2.3125, "sr: 1 + 4096 * 2^-12 = %a", xs);
    EXPECT(xz == 1.0 && xn == 1.0, "rz %a rne %a: expected 1 (swamped)", xz,
           xn);
    /* The same through the array path, where a vectorised SR might skip
     * the word. */
    enum { N = 4096 };
    static double in[N], out[N];
    for (size_t i = 0; i < N; i++)
        in[i] = 1.0 + 0x1p-12;
    emu_array_rounding a;
    memset(&a, 0, sizeof a);
    a.rnd = mode(EMU_RS);
    a.seed = 9;
    ck_assert_int_eq(emu_round_array_f64(h, out, in, N, &a, NULL, NULL), 0);
    size_t ups = 0;
    for (size_t i = 0; i < N; i++)
        ups += out[i] > 1.0;
    /* P = 1/4: mean 1024, sd 27.7; 5 sigma. */
    EXPECT(ups >= 1024 - 139 && ups <= 1024 + 139, "array sr: %zu of %d up",
           ups, N);
}
END_TEST

/* ---- overflow --------------------------------------------------------- */

/* An early draft clamped any value beyond max's binade to max in
 * round-to-nearest ("it is the nearest finite value").  IEEE 754 says
 * overflow to infinity whenever the value rounded with an unbounded
 * exponent exceeds max. */
START_TEST(overflow_beyond_max_binade_is_inf)
{
    const emu_format *h = test_format("binary16");
    emu_rounding rne = mode(EMU_RNE), rz = mode(EMU_RZ), sat = mode(EMU_RNE);
    sat.saturate = true;
    round_checked("65536", h, 65536.0, &rne, INFINITY);
    round_checked("1e6", h, 1e6, &rne, INFINITY);
    round_checked("-1e6", h, -1e6, &rne, -INFINITY);
    round_checked("1e300", h, 1e300, &rne, INFINITY);
    round_checked("65520 (tie to the even 65536)", h, 65520.0, &rne, INFINITY);
    round_checked("65520 - 2^-20", h, 65520.0 - 0x1p-20, &rne, 65504.0);
    round_checked("1e6", h, 1e6, &rz, 65504.0);
    round_checked("1e6", h, 1e6, &sat, 65504.0);
    emu_status gs, rs;
    double got = emu_add(h, 65504.0, 32.0, &rne, &gs);
    double ref = emu_ref_add(h, 65504.0, 32.0, &rne, &rs);
    agree("65504 + 32", &rne, got, gs, ref, rs, INFINITY);
    got = emu_mul(h, 256.0, 256.0, &rne, &gs);
    ref = emu_ref_mul(h, 256.0, 256.0, &rne, &rs);
    agree("256 * 256", &rne, got, gs, ref, rs, INFINITY);
    round_checked("bfloat16 1e39", test_format("bfloat16"), 1e39, &rne,
                  INFINITY);
    round_checked("e5m2 1e6", test_format("e5m2"), 1e6, &rne, INFINITY);
    round_checked("e5m2 61440 (tie to the even 65536)", test_format("e5m2"),
                  61440.0, &rne, INFINITY);
    round_checked("e5m2 61439", test_format("e5m2"), 61439.0, &rne, 57344.0);
}
END_TEST

/* Saturation that clamped overflowing finite values but let ±inf through
 * into E5M2: OCP OFP8's saturation mode (and NVIDIA's satfinite, and
 * RISC-V's vfncvt.sat) maps infinities to ±max too.  E4M3, which has no
 * infinity, always did; both are checked, in every mode. */
START_TEST(saturation_maps_infinity_to_max)
{
    static const struct { const char *fmt; double max; } cases[] = {
        { "e5m2", 57344.0 }, { "e4m3", 448.0 }, { "binary16", 65504.0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_rounding sat = mode((emu_rnd)m);
            sat.saturate = true;
            const emu_format *f = test_format(cases[i].fmt);
            round_checked("+inf saturated", f, INFINITY, &sat, cases[i].max);
            round_checked("-inf saturated", f, -INFINITY, &sat, -cases[i].max);
            /* An exact infinite result saturates as well: the choke
             * point sees only the infinity. */
            emu_status gs, rs;
            double got = emu_div(f, 1.0, 0.0, &sat, &gs);
            double ref = emu_ref_div(f, 1.0, 0.0, &sat, &rs);
            agree("1/0 saturated", &sat, got, gs, ref, rs, cases[i].max);
        }
}
END_TEST

/* ---- tininess --------------------------------------------------------- */

/* Underflow raised for a result that rounds up to the smallest normal:
 * IEEE 754's default (and x86's) detects tininess after rounding, with an
 * unbounded exponent range.  (1 + 2^-10) * (2^-14 - 2^-24) = 2^-14 - 2^-34
 * rounds to 2^-14 whatever the exponent range, so it is not tiny after
 * rounding (inexact only) but is tiny before (inexact and underflow). */
START_TEST(tininess_after_rounding)
{
    const emu_format *h = test_format("binary16");
    emu_rounding after = mode(EMU_RNE), before = mode(EMU_RNE);
    before.tininess = EMU_TINY_BEFORE;
    const double a = 1.0 + 0x1p-10, b = 0x1p-14 - 0x1p-24;
    emu_status gs, rs;
    double got = emu_mul(h, a, b, &after, &gs);
    double ref = emu_ref_mul(h, a, b, &after, &rs);
    agree("(1+2^-10)(2^-14-2^-24), tiny after", &after, got, gs, ref, rs,
          0x1p-14);
    EXPECT(gs.flags == EMU_FLAG_INEXACT, "tiny after: flags %#x, expected "
           "inexact only", gs.flags);
    got = emu_mul(h, a, b, &before, &gs);
    ref = emu_ref_mul(h, a, b, &before, &rs);
    agree("(1+2^-10)(2^-14-2^-24), tiny before", &before, got, gs, ref, rs,
          0x1p-14);
    EXPECT(gs.flags == (EMU_FLAG_INEXACT | EMU_FLAG_UNDERFLOW), "tiny before: "
           "flags %#x, expected inexact|underflow", gs.flags);

    /* The same through emu_round, and a value that stays tiny: 2^-14 -
     * 2^-25 - 2^-30 rounds (unbounded) to 2^-14 - 2^-25, below 2^-14. */
    round_checked("2^-14 - 2^-27", h, 0x1p-14 - 0x1p-27, &after, 0x1p-14);
    round_checked("2^-14 - 2^-27", h, 0x1p-14 - 0x1p-27, &before, 0x1p-14);
    double x = 0x1p-14 - 0x1p-25 - 0x1p-30;
    round_checked("2^-14 - 2^-25 - 2^-30", h, x, &after, 0x1p-14 - 0x1p-24);
    emu_round(h, x, &after, &gs);
    EXPECT(gs.flags & EMU_FLAG_UNDERFLOW, "2^-14 - 2^-25 - 2^-30 after: "
           "flags %#x lack underflow", gs.flags);
}
END_TEST

static Suite *regressions_suite(void)
{
    Suite *s = suite_create("regressions");
    TCase *tc = tcase_create("named");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rne_tie_goes_to_even_not_away);
    tcase_add_test(tc, toward_positive_keeps_negative_zero);
    tcase_add_test(tc, fma_rounds_once);
    tcase_add_test(tc, binary32_to_e4m3_rounds_once);
    tcase_add_test(tc, e4m3_never_480);
    tcase_add_test(tc, e4m3_above_half_min_subnormal_rounds_up);
    tcase_add_test(tc, stochastic_rounding_is_not_truncation);
    tcase_add_test(tc, overflow_beyond_max_binade_is_inf);
    tcase_add_test(tc, saturation_maps_infinity_to_max);
    tcase_add_test(tc, tininess_after_rounding);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(regressions_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
