/*
 * test_bits.c — bit patterns: decode, encode, classify, next_up/next_down,
 * canonical and signaling NaNs.
 *
 * Every pattern of every shipped format of up to 19 bits (and a few user
 * variants: unsigned, no subnormals) is decoded twice, by the library and
 * by a reference decoder written here from the encoding rules of README's
 * format table, and then pushed back through encode, classify and
 * the next_up/next_down walk.  binary32 and binary64 are spot-checked
 * against the host's own float and double bit patterns.
 */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Check's ck_assert records every passing check with a write to a file;
 * over loops of millions of cases that is most of the run time, so the
 * suites test first and call into Check only to fail. */
#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

/* Shipped formats of up to 19 bits, then user variants that reach the
 * sign, zero and subnormal branches the shipped ones leave out. */
static const char *const formats[] = {
    "binary16", "bfloat16", "tf32", "dlfloat", "e4m3", "e5m2", "e4m3fnuz",
    "e5m2fnuz", "e4m3b11fnuz", "e3m4", "e2m3", "e3m2", "e2m1", "e8m0",
    "e4m3,unsigned", "e5m2,nosubnormals", "e3m2,unsigned", "e4m3,fnuz,ftz",
    "e5m2,unsigned,nosubnormals", "e6m5,fn", "e2m1,fn", "e4m0,fn,unsigned",
    "e4m0,finite",
};
enum { N_FORMATS = sizeof formats / sizeof formats[0] };

static emu_format get_format(const char *spec)
{
    emu_format f;
    emu_error err;
    int rc = emu_format_resolve(&f, spec, &err);
    EXPECT(rc == 0, "'%s': %s: %s", spec, err.key, err.message);
    return f;
}

/* ---- the reference decoder -------------------------------------------- */

typedef struct fields {
    bool sign;
    uint64_t e, f;
} fields;

static fields split(const emu_format *fmt, uint64_t v)
{
    fields x;
    x.f = v & ((1ull << fmt->mbits) - 1);
    x.e = (v >> fmt->mbits) & ((1ull << fmt->ebits) - 1);
    x.sign = fmt->is_signed && ((v >> (fmt->ebits + fmt->mbits)) & 1);
    return x;
}

/* The value of a pattern, from the rules as written: specials first, then
 * zero/subnormal at exponent field 0 (formats with a zero), then normal. */
static double ref_decode(const emu_format *fmt, uint64_t v)
{
    fields x = split(fmt, v);
    const uint64_t top = (1ull << fmt->ebits) - 1;
    const uint64_t ones = (1ull << fmt->mbits) - 1;
    double mag;
    switch (fmt->specials) {
    case EMU_SPECIALS_IEEE:
        if (x.e == top)
            return x.f ? NAN : (x.sign ? -INFINITY : INFINITY);
        break;
    case EMU_SPECIALS_FN:
        if (x.e == top && x.f == ones)
            return NAN;
        break;
    case EMU_SPECIALS_FNUZ:
        if (x.sign && x.e == 0 && x.f == 0)
            return NAN;
        break;
    default:
        break;
    }
    if (fmt->has_zero && x.e == 0) {
        if (!fmt->subnormals || x.f == 0) {
            /* Zero keeps its sign, except where the format has no -0. */
            bool neg = x.sign && fmt->specials != EMU_SPECIALS_FNUZ;
            return neg ? -0.0 : 0.0;
        }
        mag = ldexp((double)x.f, 1 - fmt->bias - fmt->mbits);
    } else
        mag = ldexp((double)(x.f + (1ull << fmt->mbits)),
                    (int)x.e - fmt->bias - fmt->mbits);
    return x.sign ? -mag : mag;
}

/* The canonical NaN, found rather than built: the smallest pattern that
 * the reference decoder reads as a quiet NaN (for IEEE formats, one with
 * the top fraction bit set).  That is the positive quiet NaN with the
 * smallest payload (binary16 0x7e00, the default NaN of ARM and RISC-V),
 * the positive S.1...1.1...1 of fn formats, 1000...0 of fnuz; none
 * without NaN.  (test_canonical_nans holds the library to the published
 * patterns of the shipped formats.) */
static bool ref_nan_bits(const emu_format *fmt, uint64_t *out)
{
    for (uint64_t v = 0; v < (1ull << fmt->bits); v++) {
        bool quiet = fmt->specials != EMU_SPECIALS_IEEE || fmt->mbits == 0 ||
                     (split(fmt, v).f >> (fmt->mbits - 1)) & 1;
        if (isnan(ref_decode(fmt, v)) && quiet) {
            *out = v;
            return true;
        }
    }
    return false;
}

static emu_class class_of_value(const emu_format *fmt, double x)
{
    if (isnan(x))
        return EMU_CLASS_NAN;
    if (isinf(x))
        return EMU_CLASS_INF;
    if (x == 0.0)
        return EMU_CLASS_ZERO;
    return fabs(x) < fmt->min_normal ? EMU_CLASS_SUBNORMAL : EMU_CLASS_NORMAL;
}

/* ---- every pattern ---------------------------------------------------- */

START_TEST(test_every_pattern)
{
    const char *spec = formats[_i];
    const emu_format fmt = get_format(spec);
    const emu_format *f = &fmt;
    ck_assert(f->bits <= 19);
    uint64_t canon = 0;
    bool has_canon = ref_nan_bits(f, &canon);
    emu_bits nb;
    EXPECT(emu_nan_bits(f, &nb) == has_canon, "%s: emu_nan_bits", spec);
    if (has_canon)
        EXPECT(nb.v == canon, "%s: canonical NaN %#" PRIx64 ", expected "
                      "%#" PRIx64, spec, nb.v, canon);

    test_rng g = test_rng_make(3);
    for (uint64_t v = 0; v < (1ull << f->bits); v++) {
        const double x = emu_decode(f, (emu_bits){ v });
        const double want = ref_decode(f, v);
        EXPECT(test_same(x, want), "%s: decode(%#" PRIx64 ") = %a, "
                      "expected %a", spec, v, x, want);
        /* Bits above the format's width are ignored. */
        uint64_t junk = test_next(&g) << f->bits;
        if (f->bits < 64)
            EXPECT(test_same(emu_decode(f, (emu_bits){ v | junk }), x),
                          "%s: decode(%#" PRIx64 ") sees bits above %d", spec,
                          v | junk, f->bits);

        const emu_class c = class_of_value(f, x);
        EXPECT(emu_classify_bits(f, (emu_bits){ v }) == c,
                      "%s: classify_bits(%#" PRIx64 ") = %s, value %a is %s",
                      spec, v,
                      emu_class_name(emu_classify_bits(f, (emu_bits){ v })),
                      x, emu_class_name(c));
        EXPECT(emu_classify(f, x) == c, "%s: classify(%a) = %s, "
                      "expected %s", spec, x,
                      emu_class_name(emu_classify(f, x)), emu_class_name(c));

        /* Encode: NaNs go to the canonical NaN; patterns flushed on read
         * (no subnormals) to the zero of their sign; others to themselves. */
        fields fl = split(f, v);
        uint64_t expect = v;
        if (isnan(x))
            expect = canon;
        else if (x == 0.0)
            expect = signbit(x) ? 1ull << (f->bits - 1) : 0;
        emu_bits out;
        bool ok = emu_encode(f, x, &out);
        EXPECT(ok, "%s: encode(%a) (from %#" PRIx64 ") refused", spec, x,
                      v);
        EXPECT(out.v == expect, "%s: encode(%a) = %#" PRIx64 ", expected"
                      " %#" PRIx64 " (decoded from %#" PRIx64 ")", spec, x,
                      out.v, expect, v);
        EXPECT(emu_representable(f, x), "%s: %a (from %#" PRIx64 ") not "
                      "representable", spec, x, v);

        bool signaling = isnan(x) && f->specials == EMU_SPECIALS_IEEE &&
                         !((fl.f >> (f->mbits - 1)) & 1);
        EXPECT(emu_is_signaling(f, (emu_bits){ v }) == signaling,
                      "%s: is_signaling(%#" PRIx64 ") = %d", spec, v,
                      !signaling);
    }
}
END_TEST

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The finite values in increasing order, zeros merged. */
static double *sorted_values(const emu_format *f, size_t *n, size_t *zeros,
                             uint64_t *finite_patterns)
{
    double *v = malloc(sizeof *v << f->bits);
    ck_assert_ptr_nonnull(v);
    size_t k = 0;
    *zeros = 0;
    for (uint64_t p = 0; p < (1ull << f->bits); p++) {
        double x = emu_decode(f, (emu_bits){ p });
        if (isfinite(x))
            v[k++] = x;
    }
    *finite_patterns = k;
    qsort(v, k, sizeof *v, cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < k; i++) {
        if (v[i] == 0.0)
            ++*zeros;
        if (u == 0 || v[i] != v[u - 1])
            v[u++] = v[i];
    }
    *n = u;
    return v;
}

START_TEST(test_next_walk)
{
    const char *spec = formats[_i];
    const emu_format fmt = get_format(spec);
    const emu_format *f = &fmt;
    size_t n, zeros;
    uint64_t finite_patterns;
    double *v = sorted_values(f, &n, &zeros, &finite_patterns);
    EXPECT(finite_patterns == f->finite_count, "%s: %" PRIu64 " finite "
                  "patterns, finite_count %" PRIu64, spec, finite_patterns,
                  f->finite_count);
    uint64_t dup = zeros ? zeros - 1 : 0;
    EXPECT(n == f->finite_count - dup, "%s: %zu distinct values, "
                  "expected finite_count %" PRIu64 " - %" PRIu64 " duplicate "
                  "zeros", spec, n, f->finite_count, dup);

    /* Upward from the least value, then downward from the greatest. */
    for (size_t i = 0; i + 1 < n; i++) {
        double up = emu_next_up(f, v[i]);
        EXPECT(up == v[i + 1] && up > v[i], "%s: next_up(%a) = %a, "
                      "expected %a", spec, v[i], up, v[i + 1]);
        double down = emu_next_down(f, v[i + 1]);
        EXPECT(down == v[i] && down < v[i + 1], "%s: next_down(%a) = "
                      "%a, expected %a", spec, v[i + 1], down, v[i]);
        /* Midpoints of neighbours are never values. */
        double mid = v[i] + (v[i + 1] - v[i]) / 2;
        emu_bits b;
        EXPECT(!emu_representable(f, mid) && !emu_encode(f, mid, &b),
                      "%s: midpoint %a of %a and %a is representable", spec,
                      mid, v[i], v[i + 1]);
    }
    EXPECT(v[n - 1] == f->max, "%s: greatest value %a, max %a", spec,
                  v[n - 1], f->max);
    double beyond = emu_next_up(f, f->max);
    EXPECT(!isfinite(beyond), "%s: next_up(max) = %a", spec, beyond);
    if (f->has_inf) {
        ck_assert(beyond == INFINITY);
        ck_assert(emu_next_up(f, -INFINITY) == -f->max);
        ck_assert(emu_next_down(f, INFINITY) == f->max);
    }
    double below = emu_next_down(f, v[0]);
    EXPECT(!isfinite(below), "%s: next_down(least %a) = %a", spec, v[0],
                  below);
    if (f->has_zero) {
        ck_assert(emu_next_up(f, 0.0) == f->min_value);
        if (f->is_signed)
            ck_assert(emu_next_down(f, 0.0) == -f->min_value);
        if (f->is_signed && f->specials != EMU_SPECIALS_FNUZ)
            ck_assert(emu_next_up(f, -0.0) == f->min_value);
        ck_assert(emu_next_down(f, f->min_value) == 0.0);
    }

    /* Outside the range. */
    ck_assert(!emu_representable(f, 2 * f->max));
    ck_assert(!emu_representable(f, INFINITY) || f->has_inf);
    ck_assert(!emu_representable(f, NAN) || f->has_nan);
    ck_assert(emu_representable(f, -1.0) ==
              (f->is_signed && emu_representable(f, 1.0)));
    free(v);
}
END_TEST

/* ---- named cases ------------------------------------------------------ */

START_TEST(test_canonical_nans)
{
    static const struct { const char *fmt; uint64_t nan; } cases[] = {
        { "binary16", 0x7e00 }, { "bfloat16", 0x7fc0 }, { "tf32", 0x3fe00 },
        { "binary32", 0x7fc00000 }, { "binary64", 0x7ff8000000000000ull },
        { "e5m2", 0x7e }, { "e3m4", 0x78 }, { "e4m3", 0x7f },
        { "dlfloat", 0x7fff }, { "e8m0", 0xff }, { "e4m3fnuz", 0x80 },
        { "e5m2fnuz", 0x80 }, { "e4m3b11fnuz", 0x80 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const emu_format *f = test_format(cases[i].fmt);
        emu_bits b;
        EXPECT(emu_nan_bits(f, &b) && b.v == cases[i].nan,
                      "%s: canonical NaN %#" PRIx64 ", expected %#" PRIx64,
                      cases[i].fmt, b.v, cases[i].nan);
        ck_assert(emu_encode(f, NAN, &b) && b.v == cases[i].nan);
        ck_assert(emu_encode(f, -NAN, &b) && b.v == cases[i].nan);
    }
    static const char *const none[] = { "e2m1", "e2m3", "e3m2" };
    for (size_t i = 0; i < 3; i++) {
        emu_bits b;
        EXPECT(!emu_nan_bits(test_format(none[i]), &b), "%s has a NaN",
                      none[i]);
        ck_assert(!emu_encode(test_format(none[i]), NAN, &b));
    }
}
END_TEST

START_TEST(test_signaling)
{
    const emu_format *h = test_format("binary16");
    static const struct { uint64_t v; bool s; } cases[] = {
        { 0x7c01, true },  { 0xfc01, true },  { 0x7dff, true },
        { 0x7e00, false }, { 0x7fff, false }, { 0xfe00, false },
        { 0x7c00, false }, { 0x3c00, false }, { 0x0001, false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        EXPECT(emu_is_signaling(h, (emu_bits){ cases[i].v }) ==
                      cases[i].s, "binary16 %#06" PRIx64 ": is_signaling "
                      "expected %d", cases[i].v, cases[i].s);
    ck_assert(emu_is_signaling(test_format("binary32"),
                               (emu_bits){ 0x7f800001 }));
    ck_assert(!emu_is_signaling(test_format("binary32"),
                                (emu_bits){ 0x7fc00000 }));
    /* Only IEEE formats have signaling NaNs. */
    ck_assert(!emu_is_signaling(test_format("e4m3"), (emu_bits){ 0x7f }));
    ck_assert(!emu_is_signaling(test_format("e4m3fnuz"), (emu_bits){ 0x80 }));
    ck_assert(!emu_is_signaling(test_format("e8m0"), (emu_bits){ 0xff }));
}
END_TEST

/* A NaN pattern's sign and fraction survive decoding (quieted: the quiet
 * bit set, the rest of the fraction top-aligned in the double), and a
 * profile that keeps payloads encodes them back; the IEEE profile gives
 * the canonical NaN, as emu_encode does. */
START_TEST(test_nan_payload_round_trip)
{
    static const char *const names[] = { "binary16", "bfloat16", "e5m2",
                                         "e3m4", "binary32", "tf32" };
    const emu_profile ocp = emu_profile_preset(EMU_PROFILE_OCP);
    const emu_profile ieee = emu_profile_preset(EMU_PROFILE_IEEE);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const emu_format *f = test_format(names[i]);
        const uint64_t quiet = 1ull << (f->mbits - 1);
        const uint64_t all = (1ull << f->mbits) - 1;
        const uint64_t top = ((1ull << f->ebits) - 1) << f->mbits;
        const uint64_t sign = 1ull << (f->bits - 1);
        /* Every fraction of formats up to 10 bits; ends and single bits
         * of the wider ones. */
        for (uint64_t fr = 1; fr <= all; fr = f->mbits <= 10 ? fr + 1
                                               : fr == all ? all + 1
                                               : fr * 2 > all ? all : fr * 2)
            for (int s = 0; s < 2; s++) {
                const uint64_t p = (s ? sign : 0) | top | fr;
                double d = emu_decode(f, (emu_bits){ p });
                uint64_t u;
                memcpy(&u, &d, sizeof u);
                const uint64_t dfrac = u & ((1ull << 52) - 1);
                EXPECT(isnan(d) && (signbit(d) != 0) == s &&
                       dfrac == (fr | quiet) << (52 - f->mbits),
                       "%s decode %#" PRIx64 ": double %#" PRIx64, f->name, p,
                       u);
                emu_bits b, canon;
                EXPECT(emu_encode_in(f, &ocp, d, &b) && b.v == (p | quiet),
                       "%s ocp encode of decode %#" PRIx64 ": %#" PRIx64,
                       f->name, p, b.v);
                emu_nan_bits(f, &canon);
                EXPECT(emu_encode_in(f, &ieee, d, &b) && b.v == canon.v,
                       "%s ieee encode of decode %#" PRIx64 ": %#" PRIx64,
                       f->name, p, b.v);
            }
    }
}
END_TEST

/* e4m3: the value table at a few landmarks, straight from OFP8 v1.0. */
START_TEST(test_landmarks)
{
    static const struct { const char *fmt; uint64_t v; double x; } cases[] = {
        { "e4m3", 0x7e, 448.0 },      { "e4m3", 0x08, 0x1p-6 },
        { "e4m3", 0x01, 0x1p-9 },     { "e4m3", 0x07, 0.875 * 0x1p-6 },
        { "e4m3", 0x38, 1.0 },        { "e4m3", 0x80, -0.0 },
        { "e5m2", 0x7b, 57344.0 },    { "e5m2", 0x01, 0x1p-16 },
        { "e5m2", 0x3c, 1.0 },        { "binary16", 0x7bff, 65504.0 },
        { "binary16", 0x0001, 0x1p-24 }, { "binary16", 0x3555, 0x1.554p-2 },
        { "bfloat16", 0x7f7f, 0x1.fep127 }, { "bfloat16", 0x3f80, 1.0 },
        { "e4m3fnuz", 0x7f, 240.0 },  { "e4m3fnuz", 0x00, 0.0 },
        { "e5m2fnuz", 0x7f, 57344.0 }, { "e4m3b11fnuz", 0x7f, 30.0 },
        { "e3m4", 0x6f, 15.5 },       { "e2m3", 0x1f, 7.5 },
        { "e3m2", 0x1f, 28.0 },       { "e2m1", 0x07, 6.0 },
        { "e2m1", 0x01, 0.5 },        { "e8m0", 0x00, 0x1p-127 },
        { "dlfloat", 0x7ffe, 0x1.ffp32 }, { "dlfloat", 0x0001, 0.0 },
        { "dlfloat", 0x8001, -0.0 },  { "dlfloat", 0x0200, 0x1p-30 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double x = emu_decode(test_format(cases[i].fmt), (emu_bits){ cases[i].v });
        EXPECT(test_same(x, cases[i].x), "%s %#" PRIx64 ": %a, "
                      "expected %a", cases[i].fmt, cases[i].v, x, cases[i].x);
    }
}
END_TEST

/* ---- binary32 and binary64 against the host --------------------------- */

/* A random pattern with the exponent field drawn to hit the edges often. */
static uint64_t edgy_pattern(test_rng *g, int ebits, int mbits)
{
    uint64_t w = test_next(g);
    uint64_t top = (1ull << ebits) - 1;
    uint64_t e;
    switch (test_below(g, 6)) {
    case 0: e = 0; break;
    case 1: e = 1; break;
    case 2: e = top; break;
    case 3: e = top - 1; break;
    default: e = test_below(g, top + 1); break;
    }
    uint64_t frac = w & ((1ull << mbits) - 1);
    if (test_below(g, 8) == 0)
        frac = test_below(g, 2) ? 0 : 1;
    uint64_t sign = test_below(g, 2);
    return sign << (ebits + mbits) | e << mbits | frac;
}

START_TEST(test_binary32_host)
{
    const emu_format *f = test_format("binary32");
    test_rng g = test_rng_make(32);
    const uint64_t n = test_scaled(400000, 2000);
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)edgy_pattern(&g, 8, 23);
        float h;
        memcpy(&h, &u, sizeof h);
        double x = emu_decode(f, (emu_bits){ u });
        EXPECT(test_same(x, (double)h), "binary32 decode(%#010" PRIx32
                      ") = %a, host %a", u, x, (double)h);
        emu_bits b;
        EXPECT(emu_encode(f, (double)h, &b), "binary32 encode(%a) refused",
               (double)h);
        uint64_t want = isnan(h) ? 0x7fc00000u : u;
        EXPECT(b.v == want, "binary32 encode(%a) = %#" PRIx64 ", host %#"
                      PRIx64, (double)h, b.v, want);
        int fc = fpclassify(h);
        emu_class c = fc == FP_NAN ? EMU_CLASS_NAN
                    : fc == FP_INFINITE ? EMU_CLASS_INF
                    : fc == FP_ZERO ? EMU_CLASS_ZERO
                    : fc == FP_SUBNORMAL ? EMU_CLASS_SUBNORMAL
                    : EMU_CLASS_NORMAL;
        EXPECT(emu_classify_bits(f, (emu_bits){ u }) == c,
                      "binary32 classify(%#010" PRIx32 ")", u);
        if (isfinite(h)) {
            double up = emu_next_up(f, x), down = emu_next_down(f, x);
            float hu = nextafterf(h, INFINITY), hd = nextafterf(h, -INFINITY);
            EXPECT(up == (double)hu, "binary32 next_up(%a) = %a, host "
                          "%a", x, up, (double)hu);
            EXPECT(down == (double)hd, "binary32 next_down(%a) = %a, "
                          "host %a", x, down, (double)hd);
        }
    }
    /* The bit-pattern spot checks cover float.h's constants too. */
    ck_assert(f->max == FLT_MAX && f->min_normal == FLT_MIN &&
              f->epsilon == FLT_EPSILON && f->min_subnormal == FLT_TRUE_MIN);
}
END_TEST

START_TEST(test_binary64_host)
{
    const emu_format *f = test_format("binary64");
    test_rng g = test_rng_make(64);
    const uint64_t n = test_scaled(400000, 2000);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t u = edgy_pattern(&g, 11, 52);
        double h;
        memcpy(&h, &u, sizeof h);
        double x = emu_decode(f, (emu_bits){ u });
        EXPECT(test_same(x, h), "binary64 decode(%#018" PRIx64 ") = %a, "
                      "host %a", u, x, h);
        emu_bits b;
        EXPECT(emu_encode(f, h, &b), "binary64 encode(%a) refused", h);
        uint64_t want = isnan(h) ? 0x7ff8000000000000ull : u;
        EXPECT(b.v == want, "binary64 encode(%a) = %#" PRIx64 ", host %#"
                      PRIx64, h, b.v, want);
        if (isfinite(h)) {
            double up = emu_next_up(f, x), down = emu_next_down(f, x);
            EXPECT(up == nextafter(h, INFINITY), "binary64 next_up(%a) ="
                          " %a, host %a", h, up, nextafter(h, INFINITY));
            EXPECT(down == nextafter(h, -INFINITY), "binary64 "
                          "next_down(%a) = %a, host %a", h, down,
                          nextafter(h, -INFINITY));
        }
    }
    ck_assert(f->max == DBL_MAX && f->min_normal == DBL_MIN &&
              f->epsilon == DBL_EPSILON && f->min_subnormal == DBL_TRUE_MIN);
}
END_TEST

static Suite *bits_suite(void)
{
    Suite *s = suite_create("bits");
    TCase *tc = tcase_create("exhaustive");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_every_pattern, 0, N_FORMATS);
    tcase_add_loop_test(tc, test_next_walk, 0, N_FORMATS);
    suite_add_tcase(s, tc);

    tc = tcase_create("named");
    tcase_add_test(tc, test_canonical_nans);
    tcase_add_test(tc, test_signaling);
    tcase_add_test(tc, test_nan_payload_round_trip);
    tcase_add_test(tc, test_landmarks);
    suite_add_tcase(s, tc);

    tc = tcase_create("host");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_binary32_host);
    tcase_add_test(tc, test_binary64_host);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(bits_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
