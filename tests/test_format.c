/*
 * test_format.c — format specs: the shipped formats' constants, the derived
 * constants of arbitrary eXmY formats, the inline grammar, and the errors
 * for bad specs.
 *
 * The shipped formats are checked against the numbers their defining
 * documents publish (a table here is right: these are definitions, not
 * something MPFR could compute).  User formats are checked against
 * constants found by brute force: every bit pattern decoded, the largest,
 * smallest and count taken directly.  Bad specs are written to real files
 * where the failure is about files (missing, binary, duplicate names) and
 * parsed from memory otherwise.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "ops_internal.h" /* emu_check_tensor, which every op calls */

/* Check's ck_assert records every passing check with a write to a file;
 * over loops of millions of cases that is most of the run time, so the
 * suites test first and call into Check only to fail. */
#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

/* ---- the shipped formats against their definitions -------------------- */

typedef struct shipped {
    const char *name, *alias;
    int ebits, mbits, bias;
    bool is_signed, subnormals, has_zero, has_inf, has_nan;
    emu_specials specials;
    emu_overflow overflow;
    int p, emin, emax;
    double max, min_normal, min_subnormal, epsilon, unit_roundoff;
    uint64_t finite_count;
    bool fits_carrier;
    /* Patterns (both signs) that are NaN / infinite; checked by decoding
     * every pattern of the formats of up to 19 bits. */
    unsigned nan_patterns, inf_patterns;
} shipped;

static const shipped shipped_formats[] = {
    /* IEEE 754-2019 Table 3.5 (binary16: p = 11, emax = 15). */
    { "binary16", "half", 5, 10, 15, true, true, true, true, true,
      EMU_SPECIALS_IEEE, EMU_OVERFLOW_INF, 11, -14, 15,
      65504.0, 0x1p-14, 0x1p-24, 0x1p-10, 0x1p-11, 63488, true, 2046, 2 },
    /* ml_dtypes finfo(bfloat16): eps 2^-7, max 0x1.fep127, tiny 2^-126,
     * smallest_subnormal 2^-133 (binary32's exponent, 8-bit precision). */
    { "bfloat16", "bf16", 8, 7, 127, true, true, true, true, true,
      EMU_SPECIALS_IEEE, EMU_OVERFLOW_INF, 8, -126, 127,
      0x1.fep127, 0x1p-126, 0x1p-133, 0x1p-7, 0x1p-8, 65280, true, 254, 2 },
    /* NVIDIA A100 architecture whitepaper (2020): TF32 = binary32's 8-bit
     * exponent and binary16's 10-bit fraction, 19 bits. */
    { "tf32", "tensorfloat32", 8, 10, 127, true, true, true, true, true,
      EMU_SPECIALS_IEEE, EMU_OVERFLOW_INF, 11, -126, 127,
      0x1.ffcp127, 0x1p-126, 0x1p-136, 0x1p-10, 0x1p-11, 522240, true,
      2046, 2 },
    /* IEEE 754-2019 Table 3.5 (binary32: p = 24, emax = 127). */
    { "binary32", "fp32", 8, 23, 127, true, true, true, true, true,
      EMU_SPECIALS_IEEE, EMU_OVERFLOW_INF, 24, -126, 127,
      0x1.fffffep127, 0x1p-126, 0x1p-149, 0x1p-23, 0x1p-24,
      4278190080u, true, 0, 0 },
    /* IEEE 754-2019 Table 3.5 (binary64: p = 53, emax = 1023). */
    { "binary64", "double", 11, 52, 1023, true, true, true, true, true,
      EMU_SPECIALS_IEEE, EMU_OVERFLOW_INF, 53, -1022, 1023,
      0x1.fffffffffffffp1023, 0x1p-1022, 0x1p-1074, 0x1p-52, 0x1p-53,
      UINT64_C(18437736874454810624), false, 0, 0 },
    /* OCP 8-bit Floating Point Specification (OFP8) v1.0, Table 1, E4M3:
     * bias 7, max S.1111.110 = 448, min normal S.0001.000 = 2^-6, min
     * subnormal S.0000.001 = 2^-9, no infinities, NaN S.1111.111 only.
     * eps 0.125 as ml_dtypes finfo(float8_e4m3fn). */
    { "e4m3", "float8_e4m3fn", 4, 3, 7, true, true, true, false, true,
      EMU_SPECIALS_FN, EMU_OVERFLOW_NAN, 4, -6, 8,
      448.0, 0x1p-6, 0x1p-9, 0.125, 0.0625, 254, true, 2, 0 },
    /* OFP8 v1.0, Table 1, E5M2: bias 15, max S.11110.11 = 57344, min normal
     * 2^-14, min subnormal S.00000.01 = 2^-16, inf S.11111.00, NaN
     * S.11111.{01,10,11}. */
    { "e5m2", "float8_e5m2", 5, 2, 15, true, true, true, true, true,
      EMU_SPECIALS_IEEE, EMU_OVERFLOW_INF, 3, -14, 15,
      57344.0, 0x1p-14, 0x1p-16, 0.25, 0.125, 248, true, 6, 2 },
    /* ml_dtypes finfo(float8_e4m3fnuz) (Graphcore/AMD, Noune et al.,
     * arXiv:2206.02915): bias 8, max 240, tiny 2^-7, smallest subnormal
     * 2^-10, eps 0.125; NaN = 0x80 only, no -0. */
    { "e4m3fnuz", "float8_e4m3fnuz", 4, 3, 8, true, true, true, false, true,
      EMU_SPECIALS_FNUZ, EMU_OVERFLOW_NAN, 4, -7, 7,
      240.0, 0x1p-7, 0x1p-10, 0.125, 0.0625, 255, true, 1, 0 },
    /* ml_dtypes finfo(float8_e5m2fnuz): bias 16, max 57344, tiny 2^-15,
     * smallest subnormal 2^-17, eps 0.25. */
    { "e5m2fnuz", "float8_e5m2fnuz", 5, 2, 16, true, true, true, false, true,
      EMU_SPECIALS_FNUZ, EMU_OVERFLOW_NAN, 3, -15, 15,
      57344.0, 0x1p-15, 0x1p-17, 0.25, 0.125, 255, true, 1, 0 },
    /* ml_dtypes finfo(float8_e4m3b11fnuz): bias 11, max 30 (= 1.875 * 2^(15
     * - 11), the top binade being all numbers in fnuz), tiny 2^(1 - 11) =
     * 2^-10, smallest subnormal 2^-10 * 2^-3 = 2^-13, eps 0.125. */
    { "e4m3b11fnuz", "float8_e4m3b11fnuz", 4, 3, 11, true, true, true, false,
      true, EMU_SPECIALS_FNUZ, EMU_OVERFLOW_NAN, 4, -10, 4,
      30.0, 0x1p-10, 0x1p-13, 0.125, 0.0625, 255, true, 1, 0 },
    /* ml_dtypes finfo(float8_e3m4) and LLVM APFloat f8E3M4: bias 3, IEEE
     * specials, max S.110.1111 = 15.5, min normal 0.25, min subnormal 2^-6,
     * eps 2^-4. */
    { "e3m4", "float8_e3m4", 3, 4, 3, true, true, true, true, true,
      EMU_SPECIALS_IEEE, EMU_OVERFLOW_INF, 5, -2, 3,
      15.5, 0.25, 0x1p-6, 0.0625, 0.03125, 224, true, 30, 2 },
    /* OCP Microscaling Formats (MX) v1.0, section 5.3.2, FP6 E2M3: bias 1,
     * max S.11.111 = 7.5, min normal 1.0, min subnormal 0.125, no inf/NaN. */
    { "e2m3", "fp6_e2m3", 2, 3, 1, true, true, true, false, false,
      EMU_SPECIALS_FINITE, EMU_OVERFLOW_SATURATE, 4, 0, 2,
      7.5, 1.0, 0.125, 0.125, 0.0625, 64, true, 0, 0 },
    /* OCP MX v1.0, section 5.3.2, FP6 E3M2: bias 3, max S.111.11 = 28,
     * min normal 0.25, min subnormal 0.0625. */
    { "e3m2", "fp6_e3m2", 3, 2, 3, true, true, true, false, false,
      EMU_SPECIALS_FINITE, EMU_OVERFLOW_SATURATE, 3, -2, 4,
      28.0, 0.25, 0.0625, 0.25, 0.125, 64, true, 0, 0 },
    /* OCP MX v1.0, section 5.3.3, FP4 E2M1: bias 1, max S.11.1 = 6, min
     * normal 1.0, min subnormal 0.5. */
    { "e2m1", "fp4", 2, 1, 1, true, true, true, false, false,
      EMU_SPECIALS_FINITE, EMU_OVERFLOW_SATURATE, 2, 0, 2,
      6.0, 1.0, 0.5, 0.5, 0.25, 16, true, 0, 0 },
    /* OCP MX v1.0, section 5.3.4, MXINT8 element: 8-bit integers with an
     * implicit scale of 2^-6, here as sign-magnitude e1m6 with bias 1
     * (formats/int8.fmt): max 127/64, smallest step 2^-6, no specials. */
    { "int8", "mxint8_elem", 1, 6, 1, true, true, true, false, false,
      EMU_SPECIALS_FINITE, EMU_OVERFLOW_SATURATE, 7, 0, 0,
      0x1.fcp0, 1.0, 0x1p-6, 0x1p-6, 0x1p-7, 256, true, 0, 0 },
    /* OCP MX v1.0, section 5.4, E8M0 scale: unsigned, bias 127, values
     * 2^-127 .. 2^127, NaN 0xFF, no zero, no infinities.  Precision 1:
     * the gap after 1 is 1. */
    { "e8m0", "float8_e8m0fnu", 8, 0, 127, false, false, false, false, true,
      EMU_SPECIALS_FN, EMU_OVERFLOW_NAN, 1, -127, 127,
      0x1p127, 0x1p-127, 0x1p-127, 1.0, 0.5, 255, true, 1, 0 },
    /* IBM DLFloat (Agrawal et al., ARITH 2019): 1-6-9, bias 31, no
     * subnormals, one merged NaN/inf code at S.111111.111111111.  Row as
     * formats/dlfloat.fmt declares it (min normal 2^-30, exponent field 0
     * reads as zero); the paper/patent also use the exponent-0 binade for
     * normal numbers 2^-31 * 1.f, which this format model cannot express
     * (see the report in notes).  max = (2 - 2^-8) * 2^32 in both. */
    { "dlfloat", "dlfloat16", 6, 9, 31, true, false, true, false, true,
      EMU_SPECIALS_FN, EMU_OVERFLOW_NAN, 10, -30, 32,
      0x1.ffp32, 0x1p-30, 0x1p-30, 0x1p-9, 0x1p-10, 65534, true, 2, 0 },
};
enum { N_SHIPPED = sizeof shipped_formats / sizeof shipped_formats[0] };

#define EXPECT_INT(field)                                                     \
    EXPECT(f->field == e->field, "%s: " #field " expected %d got %d", \
                  e->name, (int)e->field, (int)f->field)
#define EXPECT_DBL(field)                                                     \
    EXPECT(f->field == e->field, "%s: " #field " expected %a (%g) "   \
                  "got %a (%g)", e->name, e->field, e->field, f->field,     \
                  f->field)

START_TEST(test_shipped_constants)
{
    const shipped *e = &shipped_formats[_i];
    const emu_format *f = emu_format_find(e->name);
    EXPECT(f != NULL, "shipped format '%s' is not registered", e->name);
    ck_assert_str_eq(f->name, e->name);
    EXPECT(emu_format_find(e->alias) == f, "alias '%s' does not name %s",
                  e->alias, e->name);
    EXPECT_INT(ebits);
    EXPECT_INT(mbits);
    EXPECT_INT(bias);
    EXPECT_INT(is_signed);
    EXPECT_INT(subnormals);
    EXPECT_INT(has_zero);
    EXPECT_INT(has_inf);
    EXPECT_INT(has_nan);
    EXPECT_INT(specials);
    EXPECT_INT(overflow);
    EXPECT_INT(p);
    EXPECT_INT(emin);
    EXPECT_INT(emax);
    EXPECT_DBL(max);
    EXPECT_DBL(min_normal);
    EXPECT_DBL(min_subnormal);
    EXPECT_DBL(epsilon);
    EXPECT_DBL(unit_roundoff);
    EXPECT_INT(fits_carrier);
    EXPECT(f->fits_double, "%s: fits_double false", e->name);
    EXPECT(f->finite_count == e->finite_count, "%s: finite_count "
                  "expected %" PRIu64 " got %" PRIu64, e->name,
                  e->finite_count, f->finite_count);
    ck_assert_int_eq(f->bits, (e->is_signed ? 1 : 0) + e->ebits + e->mbits);
    double min_value = e->subnormals ? e->min_subnormal : e->min_normal;
    EXPECT(f->min_value == min_value, "%s: min_value expected %a got %a",
                  e->name, min_value, f->min_value);
    ck_assert_int_eq(f->qmin, e->emin - e->p + 1);
}
END_TEST

/* The special patterns, counted by decoding every pattern: the published
 * definitions say e.g. that e4m3 has NaN at 0x7F and 0xFF and nowhere else. */
START_TEST(test_shipped_special_patterns)
{
    const shipped *e = &shipped_formats[_i];
    const emu_format *f = test_format(e->name);
    if (f->bits > 19)
        return;
    unsigned nans = 0, infs = 0;
    for (uint64_t v = 0; v < (1ull << f->bits); v++) {
        emu_bits b = { v };
        double x = emu_decode(f, b);
        nans += isnan(x) != 0;
        infs += isinf(x) != 0;
    }
    EXPECT(nans == e->nan_patterns, "%s: %u NaN patterns, expected %u",
                  e->name, nans, e->nan_patterns);
    EXPECT(infs == e->inf_patterns, "%s: %u infinite patterns, expected "
                  "%u", e->name, infs, e->inf_patterns);
}
END_TEST

START_TEST(test_specific_special_patterns)
{
    /* OFP8 v1.0: E4M3 NaN only at S.1111.111. */
    const emu_format *f = test_format("e4m3");
    for (unsigned v = 0; v < 256; v++) {
        emu_bits b = { v };
        bool nan = isnan(emu_decode(f, b));
        EXPECT(nan == ((v & 0x7f) == 0x7f), "e4m3 pattern 0x%02x: NaN %d",
                      v, nan);
    }
    ck_assert(emu_decode(f, (emu_bits){ 0x7e }) == 448.0);
    ck_assert(emu_decode(f, (emu_bits){ 0xfe }) == -448.0);
    /* fnuz: NaN only at 0x80. */
    f = test_format("e4m3fnuz");
    for (unsigned v = 0; v < 256; v++)
        EXPECT(!isnan(emu_decode(f, (emu_bits){ v })) == (v != 0x80),
                      "e4m3fnuz pattern 0x%02x", v);
    /* E8M0: NaN only at 0xFF, 0x00 is 2^-127, 0x7F is 1. */
    f = test_format("e8m0");
    ck_assert(isnan(emu_decode(f, (emu_bits){ 0xff })));
    ck_assert(emu_decode(f, (emu_bits){ 0x00 }) == 0x1p-127);
    ck_assert(emu_decode(f, (emu_bits){ 0x7f }) == 1.0);
    ck_assert(emu_decode(f, (emu_bits){ 0xfe }) == 0x1p127);
    /* E5M2: inf 0x7C, NaN 0x7D..0x7F. */
    f = test_format("e5m2");
    ck_assert(emu_decode(f, (emu_bits){ 0x7c }) == INFINITY);
    ck_assert(emu_decode(f, (emu_bits){ 0xfc }) == -INFINITY);
    for (unsigned v = 0x7d; v <= 0x7f; v++)
        ck_assert(isnan(emu_decode(f, (emu_bits){ v })));
}
END_TEST

/* Every registered format that is not a test's own must be in the table
 * above, so a new shipped format cannot go in unchecked. */
START_TEST(test_every_shipped_format_is_tabled)
{
    for (size_t i = 0; i < emu_format_count(); i++) {
        const emu_format *f = emu_format_at(i);
        if (!strncmp(f->name, "suites_", 7))
            continue; /* loaded by the file tests below */
        bool found = false;
        for (size_t j = 0; j < N_SHIPPED; j++)
            found |= !strcmp(shipped_formats[j].name, f->name);
        EXPECT(found, "registered format '%s' has no row of published "
                      "constants in test_format.c", f->name);
    }
}
END_TEST

/* ---- derived constants of user formats, by brute force ---------------- */

static int field_cmp(const emu_format *a, const emu_format *b, char *what,
                     size_t size)
{
#define CMP(x)                                                               \
    if (a->x != b->x) {                                                      \
        snprintf(what, size, #x ": %g vs %g", (double)a->x, (double)b->x);  \
        return 1;                                                            \
    }
    CMP(ebits) CMP(mbits) CMP(bias) CMP(is_signed) CMP(subnormals)
    CMP(has_zero) CMP(specials) CMP(overflow) CMP(bits) CMP(p) CMP(emin)
    CMP(emax) CMP(qmin) CMP(max) CMP(min_normal) CMP(min_subnormal)
    CMP(min_value) CMP(epsilon) CMP(unit_roundoff) CMP(finite_count)
    CMP(has_inf) CMP(has_nan) CMP(fits_carrier) CMP(fits_double)
#undef CMP
    return 0;
}

static const char *yesno(bool b)
{
    return b ? "yes" : "no";
}

/* The format spec for one grid point, built both ways: as an inline string
 * (so the parser is exercised) and field by field + emu_format_validate. */
typedef struct grid_point {
    int e, m, bias;
    bool subnormals, is_signed;
    emu_specials specials;
} grid_point;

static emu_overflow default_overflow(emu_specials s)
{
    return s == EMU_SPECIALS_IEEE ? EMU_OVERFLOW_INF
         : s == EMU_SPECIALS_FINITE ? EMU_OVERFLOW_SATURATE : EMU_OVERFLOW_NAN;
}

/* Whether the spec is valid, decided from the definitions and not from
 * format.c: ieee needs a fraction bit for its NaN; some exponent field
 * other than 0 must hold finite numbers; everything must be a double. */
static bool grid_valid(const grid_point *g)
{
    if (g->specials == EMU_SPECIALS_IEEE && g->m == 0)
        return false;
    if (g->specials == EMU_SPECIALS_FNUZ && !g->is_signed)
        return false;
    int top = (1 << g->e) - 1, top_finite;
    switch (g->specials) {
    case EMU_SPECIALS_IEEE:
        top_finite = top - 1;
        break;
    case EMU_SPECIALS_FN:
        top_finite = g->m > 0 ? top : top - 1;
        break;
    default:
        top_finite = top;
        break;
    }
    if (top_finite < 1)
        return false;
    return top_finite - g->bias <= 1023 && 1 - g->bias - g->m >= -1074;
}

/* What decoding every pattern says about a format. */
typedef struct brute {
    double max, min_value, min_normal, epsilon;
    uint64_t finite;
    bool has_inf, has_nan, all_float, eps_known;
} brute;

static brute brute_force(const emu_format *f)
{
    brute b = { 0 };
    b.min_value = INFINITY;
    b.min_normal = INFINITY;
    b.all_float = true;
    for (uint64_t v = 0; v < (1ull << f->bits); v++) {
        double x = emu_decode(f, (emu_bits){ v });
        if (isnan(x)) {
            b.has_nan = true;
            continue;
        }
        if (isinf(x)) {
            b.has_inf = true;
            continue;
        }
        b.finite++;
        if ((double)(float)x != x)
            b.all_float = false;
        if (x > b.max)
            b.max = x;
        if (x > 0.0 && x < b.min_value)
            b.min_value = x;
        uint64_t efield = (v >> f->mbits) & ((1ull << f->ebits) - 1);
        if (x > 0.0 && (efield != 0 || !f->has_zero) && x < b.min_normal)
            b.min_normal = x;
    }
    /* epsilon: the gap after the smallest normal, relative to it. */
    double next = INFINITY;
    for (uint64_t v = 0; v < (1ull << f->bits); v++) {
        double x = emu_decode(f, (emu_bits){ v });
        if (x > b.min_normal && x < next)
            next = x;
    }
    if (next < INFINITY) {
        b.epsilon = (next - b.min_normal) / b.min_normal;
        b.eps_known = true;
    }
    return b;
}

/* Checks one grid point: validity, and then either the spec-string
 * round-trip or the constants against brute force. */
static void check_grid_point(const grid_point *g, bool round_trip)
{
    char spec[160], what[128];
    snprintf(spec, sizeof spec, "e%dm%d,bias=%d,specials=%s,overflow=%s,"
             "subnormals=%s,signed=%s,zero=yes", g->e, g->m, g->bias,
             emu_specials_name(g->specials),
             emu_overflow_name(default_overflow(g->specials)),
             yesno(g->subnormals), yesno(g->is_signed));
    emu_format fi, fv;
    emu_error err;
    memset(&err, 0, sizeof err);
    int rc = emu_format_parse_inline(&fi, spec, &err);
    bool valid = grid_valid(g);
    EXPECT((rc == 0) == valid, "'%s': parse %s, expected %s (%s: %s: "
                  "%s)", spec, rc ? "failed" : "succeeded",
                  valid ? "valid" : "invalid", err.where, err.key, err.message);

    memset(&fv, 0, sizeof fv);
    snprintf(fv.name, sizeof fv.name, "grid");
    fv.ebits = g->e;
    fv.mbits = g->m;
    fv.bias = g->bias;
    fv.is_signed = g->is_signed;
    fv.subnormals = g->subnormals;
    fv.has_zero = true;
    fv.specials = g->specials;
    fv.overflow = default_overflow(g->specials);
    int rcv = emu_format_validate(&fv, &err);
    EXPECT((rcv == 0) == valid, "'%s': validate %s", spec,
                  rcv ? "failed" : "succeeded");
    if (!valid)
        return;
    EXPECT(!field_cmp(&fi, &fv, what, sizeof what),
                  "'%s': inline parse and validate disagree on %s", spec, what);

    if (round_trip) {
        char canon[200];
        emu_format_spec_string(&fi, canon, sizeof canon);
        emu_format fr;
        rc = emu_format_parse_inline(&fr, canon, &err);
        EXPECT(rc == 0, "'%s': its spec string '%s' does not parse: "
                      "%s: %s", spec, canon, err.key, err.message);
        EXPECT(!field_cmp(&fi, &fr, what, sizeof what), "'%s': spec "
                      "string '%s' round-trips to a different format (%s)",
                      spec, canon, what);
        return;
    }

    /* Constants against the formulas every format satisfies. */
    const emu_format *f = &fi;
    EXPECT(f->p == g->m + 1 && f->emin == 1 - g->bias &&
           f->bits == (g->is_signed ? 1 : 0) + g->e + g->m,
           "'%s': p %d emin %d bits %d", spec, f->p, f->emin, f->bits);
    EXPECT(f->epsilon == ldexp(1.0, -g->m) &&
           f->unit_roundoff == ldexp(1.0, -g->m - 1),
           "'%s': epsilon %a unit roundoff %a", spec, f->epsilon,
           f->unit_roundoff);
    EXPECT(f->has_inf == (g->specials == EMU_SPECIALS_IEEE) &&
           f->has_nan == (g->specials != EMU_SPECIALS_FINITE),
           "'%s': has_inf %d has_nan %d", spec, f->has_inf, f->has_nan);

    if (f->bits > 16)
        return;
    brute b = brute_force(f);
    EXPECT(f->max == b.max, "'%s': max %a, every pattern says %a", spec,
                  f->max, b.max);
    EXPECT(f->min_value == b.min_value, "'%s': min_value %a, every "
                  "pattern says %a", spec, f->min_value, b.min_value);
    EXPECT(f->min_normal == b.min_normal, "'%s': min_normal %a, every "
                  "pattern says %a", spec, f->min_normal, b.min_normal);
    double min_sub = g->subnormals ? b.min_value : b.min_normal;
    EXPECT(f->min_subnormal == min_sub, "'%s': min_subnormal %a, every "
                  "pattern says %a", spec, f->min_subnormal, min_sub);
    EXPECT(f->finite_count == b.finite, "'%s': finite_count %" PRIu64
                  ", every pattern says %" PRIu64, spec, f->finite_count,
                  b.finite);
    EXPECT(f->has_inf == b.has_inf && f->has_nan == b.has_nan,
                  "'%s': has_inf %d has_nan %d, patterns say %d %d", spec,
                  f->has_inf, f->has_nan, b.has_inf, b.has_nan);
    EXPECT(f->fits_carrier == b.all_float, "'%s': fits_carrier %d but "
                  "every value a binary32: %d", spec, f->fits_carrier,
                  b.all_float);
    if (b.eps_known)
        EXPECT(f->epsilon == b.epsilon, "'%s': epsilon %a, the gap "
                      "after the smallest normal says %a", spec, f->epsilon,
                      b.epsilon);
    EXPECT(ldexp(1.0, f->emax) <= f->max && f->max < ldexp(1.0, f->emax + 1),
                  "'%s': max %a is not in binade 2^%d", spec, f->max, f->emax);
    if (g->subnormals)
        EXPECT(f->min_value == ldexp(1.0, f->qmin), "'%s': min_value %a "
                      "is not 2^qmin = 2^%d", spec, f->min_value, f->qmin);
}

/* One loop iteration per exponent width; inside, every fraction width,
 * specials kind, sign, subnormal choice and a few biases around the
 * default (the larger ones push the grid toward binary32's edges). */
static void run_grid(int e, bool round_trip)
{
    static const emu_specials kinds[] = {
        EMU_SPECIALS_IEEE, EMU_SPECIALS_FN, EMU_SPECIALS_FINITE,
        EMU_SPECIALS_FNUZ,
    };
    const int dflt = (1 << (e - 1)) - 1;
    /* +27 and -3 take e = 8 past binary32's bottom and top. */
    const int offsets[] = { 0, -1, 2, 9, 27, -3 };
    for (int m = 0; m <= 10; m++)
        for (int k = 0; k < 4; k++)
            for (int s = 0; s < 2; s++)
                for (int sub = 0; sub < 2; sub++)
                    for (int o = 0; o < 6; o++) {
                        grid_point g = { e, m, dflt + offsets[o], sub != 0,
                                         s == 0, kinds[k] };
                        check_grid_point(&g, round_trip);
                    }
}

START_TEST(test_grid_brute_force)
{
    run_grid(_i, false);
}
END_TEST

/* Separate from the brute force so that a spec-string defect cannot hide
 * a wrong constant, or the other way round. */
START_TEST(test_grid_spec_string_round_trip)
{
    run_grid(_i, true);
}
END_TEST

/* Edges of the carrier and of binary64, one exponent width at a time. */
START_TEST(test_grid_range_edges)
{
    static const struct { int e, m, bias; bool sub; bool valid; } pts[] = {
        { 8, 10, 140, true, true },  { 8, 10, 141, true, true },
        { 8, 10, 141, false, true }, { 8, 7, 126, true, true },
        { 8, 0, 127, true, true },   { 9, 10, 255, true, true },
        { 11, 52, 1023, true, true }, { 11, 52, 1022, true, false },
        { 11, 52, 1024, true, false }, { 11, 10, 1065, true, true },
        { 11, 10, 1066, true, false }, { 11, 10, -100, true, false },
        { 1, 1, 0, true, true }, { 1, 0, 0, true, true },
    };
    /* Constants for every row first, then the round-trips. */
    for (int round_trip = 0; round_trip < 2; round_trip++)
        for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
            grid_point g = { pts[i].e, pts[i].m, pts[i].bias, pts[i].sub,
                             true, EMU_SPECIALS_FINITE };
            if (pts[i].e >= 9)
                g.specials = EMU_SPECIALS_IEEE;
            EXPECT(grid_valid(&g) == pts[i].valid, "table row %zu", i);
            check_grid_point(&g, round_trip != 0);
        }
}
END_TEST

/* Carrier fit: a format fits binary32 iff p <= 24 and all its values lie
 * in binary32's range and on binary32's grid. */
START_TEST(test_fits_carrier)
{
    static const struct { const char *spec; bool fits; } cases[] = {
        { "e8m23", true },             /* binary32 itself */
        { "e8m24", false },            /* p = 25 */
        { "e9m10", false },            /* emax 255 */
        { "binary64", false },
        { "e11m10", false },
        { "e8m10,bias=140", true },    /* smallest quantum 2^-149 */
        { "e8m10,bias=141", false },   /* 2^-150 */
        { "e8m10,bias=141,nosubnormals", false }, /* min normal's last bit */
        { "e8m7,bias=126", false },    /* emax 128 */
        { "e8m7,bias=127", true },
        { "e5m10", true },
        { "e8m0", true },              /* 2^-127 is a binary32 subnormal */
        { "e8m0,bias=150", false },    /* 2^-150 */
        { "e7m16,bias=0", true },
        { "e7m23,bias=0", true },      /* p = 24, quanta >= 2^-22 */
        { "e7m24,bias=0", false },     /* p = 25 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        emu_format f;
        emu_error err;
        int rc = emu_format_parse_inline(&f, cases[i].spec, &err);
        EXPECT(rc == 0, "'%s': %s: %s", cases[i].spec, err.key,
                      err.message);
        EXPECT(f.fits_carrier == cases[i].fits, "'%s': fits_carrier %d,"
                      " expected %d (p %d, emax %d, qmin %d)", cases[i].spec,
                      f.fits_carrier, cases[i].fits, f.p, f.emax, f.qmin);
        ck_assert(f.fits_double);
    }
}
END_TEST

/* ---- the inline grammar ----------------------------------------------- */

static emu_format parse_ok(const char *spec)
{
    emu_format f;
    emu_error err;
    memset(&err, 0, sizeof err);
    int rc = emu_format_parse_inline(&f, spec, &err);
    EXPECT(rc == 0, "'%s' refused: %s: key '%s': %s", spec, err.where,
                  err.key, err.message);
    return f;
}

START_TEST(test_inline_grammar)
{
    emu_format f = parse_ok("e3m4");
    ck_assert_int_eq(f.ebits, 3);
    ck_assert_int_eq(f.mbits, 4);
    ck_assert_int_eq(f.bias, 3);
    ck_assert(f.max == 15.5);

    /* An unregistered eXmY: IEEE defaults, bias 2^(e-1) - 1. */
    f = parse_ok("e6m5");
    ck_assert_int_eq(f.bias, 31);
    ck_assert_int_eq(f.specials, EMU_SPECIALS_IEEE);
    ck_assert_int_eq(f.overflow, EMU_OVERFLOW_INF);
    ck_assert(f.subnormals && f.is_signed && f.has_zero);
    ck_assert(f.max == ldexp(2.0 - 0x1p-5, 31));

    f = parse_ok("e5m10,bias=14");
    ck_assert_int_eq(f.bias, 14);
    ck_assert_int_eq(f.emin, -13);
    ck_assert(f.max == 131008.0);
    ck_assert(f.min_subnormal == 0x1p-23);

    /* Named base plus overrides keeps the base's other choices. */
    f = parse_ok("e4m3,nosubnormals,saturate");
    ck_assert_int_eq(f.specials, EMU_SPECIALS_FN);
    ck_assert_int_eq(f.overflow, EMU_OVERFLOW_SATURATE);
    ck_assert(!f.subnormals);
    ck_assert(f.max == 448.0);
    ck_assert(f.min_value == 0x1p-6);
    f = parse_ok("e4m3,saturate");
    ck_assert(f.subnormals);
    ck_assert_int_eq(f.overflow, EMU_OVERFLOW_SATURATE);
    ck_assert(f.min_value == 0x1p-9);
    f = parse_ok("e4m3, sat");
    ck_assert_int_eq(f.overflow, EMU_OVERFLOW_SATURATE);
    f = parse_ok("binary16,ftz");
    ck_assert(!f.subnormals && f.min_value == 0x1p-14);

    /* Changing the specials of a named base re-derives its overflow rule. */
    f = parse_ok("binary16,fn");
    ck_assert_int_eq(f.overflow, EMU_OVERFLOW_NAN);
    /* The old infinity binade now holds numbers: (2 - 2^-9) * 2^16. */
    ck_assert(f.max == 130944.0);
    f = parse_ok("e5m2,finite");
    ck_assert_int_eq(f.overflow, EMU_OVERFLOW_SATURATE);
    ck_assert(f.max == 114688.0); /* 1.75 * 2^16 */

    /* Aliases and case. */
    const emu_format *bf = test_format("bfloat16");
    static const char *const names[] = { "bf16", "BF16", "bFloat16",
                                         "BFLOAT16" };
    for (size_t i = 0; i < 4; i++) {
        f = parse_ok(names[i]);
        char what[128];
        EXPECT(!field_cmp(&f, bf, what, sizeof what), "'%s' is not "
                      "bfloat16: %s", names[i], what);
        EXPECT(emu_format_find(names[i]) == bf, "find('%s')", names[i]);
    }
    ck_assert(emu_format_find("FP16") == test_format("binary16"));
    ck_assert(emu_format_find("E4M3") == test_format("e4m3"));
    f = parse_ok("E5M10");
    ck_assert_int_eq(f.ebits, 5);
    ck_assert_int_eq(f.mbits, 10);
    f = parse_ok("e5m10,bias=15");
    char what[128];
    EXPECT(!field_cmp(&f, test_format("binary16"), what, sizeof what),
                  "e5m10,bias=15 is not binary16: %s", what);

    /* Other flags. */
    f = parse_ok("e4m3,unsigned");
    ck_assert(!f.is_signed && f.bits == 7);
    f = parse_ok("e5m2,fnuz");
    ck_assert_int_eq(f.specials, EMU_SPECIALS_FNUZ);
    ck_assert(f.max == 114688.0);
    f = parse_ok("e4m3,overflow=inf,specials=ieee");
    ck_assert(f.has_inf && f.max == 240.0);
}
END_TEST

START_TEST(test_spec_string_round_trip_shipped)
{
    for (size_t i = 0; i < N_SHIPPED; i++) {
        const emu_format *f = test_format(shipped_formats[i].name);
        char canon[200], what[128];
        emu_format_spec_string(f, canon, sizeof canon);
        emu_format g;
        emu_error err;
        int rc = emu_format_parse_inline(&g, canon, &err);
        EXPECT(rc == 0, "%s: spec string '%s' refused: %s: %s", f->name,
                      canon, err.key, err.message);
        EXPECT(!field_cmp(f, &g, what, sizeof what), "%s: spec string "
                      "'%s' gives a different format (%s)", f->name, canon,
                      what);
    }
}
END_TEST

/* A spec string whose eXmY happens to be a registered name must not pick
 * up that format's sign, zero or subnormal choices. */
START_TEST(test_spec_string_round_trip_named_bases)
{
    static const char *const specs[] = {
        "e8m0,signed,zero=yes,subnormals,bias=127,specials=fn",
        "e8m0,zero=yes,bias=127,specials=finite",
        "e2m1,subnormals=no,specials=fn",
        "e4m3,specials=ieee,overflow=inf",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        emu_format f = parse_ok(specs[i]);
        char canon[200], what[128];
        emu_format_spec_string(&f, canon, sizeof canon);
        emu_format g;
        emu_error err;
        int rc = emu_format_parse_inline(&g, canon, &err);
        EXPECT(rc == 0, "'%s' -> '%s' refused: %s: %s", specs[i], canon,
                      err.key, err.message);
        EXPECT(!field_cmp(&f, &g, what, sizeof what), "'%s': spec string"
                      " '%s' gives a different format (%s)", specs[i], canon,
                      what);
    }
}
END_TEST

/* ---- bad specs -------------------------------------------------------- */

static void expect_error(int rc, const emu_error *err, const char *what,
                         const char *where_prefix, const char *key,
                         const char *message_part)
{
    EXPECT(rc == -1, "%s: accepted, expected an error about '%s'", what,
                  key);
    EXPECT(!strncmp(err->where, where_prefix, strlen(where_prefix)),
                  "%s: where '%s', expected it to start with '%s'", what,
                  err->where, where_prefix);
    EXPECT(!strcmp(err->key, key), "%s: key '%s', expected '%s' (%s)",
                  what, err->key, key, err->message);
    EXPECT(strstr(err->message, message_part) != NULL, "%s: message '%s'"
                  " does not mention '%s'", what, err->message, message_part);
    char line[700];
    emu_error_format(err, line, sizeof line);
    EXPECT(strstr(line, err->where) && strstr(line, key), "%s: "
                  "formatted error '%s' lacks where or key", what, line);
}

static void file_text_error(const char *text, const char *where,
                            const char *key, const char *message_part)
{
    emu_format f;
    emu_error err;
    memset(&err, 0, sizeof err);
    int rc = emu_format_parse_file_text(&f, text, strlen(text), "bad.fmt", &err);
    expect_error(rc, &err, text, where, key, message_part);
}

static void inline_error(const char *spec, const char *key,
                         const char *message_part)
{
    emu_format f;
    emu_error err;
    memset(&err, 0, sizeof err);
    int rc = emu_format_parse_inline(&f, spec, &err);
    char where[256];
    snprintf(where, sizeof where, "format spec '%s'", spec);
    expect_error(rc, &err, spec, where, key, message_part);
}

#define HEAD "name = t\nexponent = 4\nmantissa = 3\n"

START_TEST(test_bad_unknown_key)
{
    file_text_error(HEAD "colour = red\n", "bad.fmt:4", "colour", "unknown key");
    file_text_error("# comment\n\nname = t\nExponent = 4\n", "bad.fmt:4",
                    "Exponent", "unknown key");
}
END_TEST

START_TEST(test_bad_zero_exponent)
{
    file_text_error("name = t\nexponent = 0\nmantissa = 3\n", "bad.fmt:2",
                    "exponent", "1 to 11");
    inline_error("e0m3", "exponent", "1 to 11");
}
END_TEST

START_TEST(test_bad_negative_widths)
{
    file_text_error("name = t\nexponent = -3\nmantissa = 3\n", "bad.fmt:2",
                    "exponent", "1 to 11");
    file_text_error("name = t\nexponent = 4\nmantissa = -1\n", "bad.fmt:3",
                    "mantissa", "0 to 52");
    inline_error("e4m-1", "mantissa", "0 to 52");
    inline_error("e-4m3", "exponent", "1 to 11");
}
END_TEST

START_TEST(test_bad_absurd_widths)
{
    file_text_error("name = t\nexponent = 99\nmantissa = 3\n", "bad.fmt:2",
                    "exponent", "1 to 11");
    file_text_error("name = t\nexponent = 4\nmantissa = 60\n", "bad.fmt:3",
                    "mantissa", "0 to 52");
    file_text_error("name = t\nexponent = 4x\nmantissa = 3\n", "bad.fmt:2",
                    "exponent", "4x");
    inline_error("e99m3", "exponent", "1 to 11");
    inline_error("e4m60", "mantissa", "0 to 52");
    inline_error("e4m99999999999999999999", "mantissa", "0 to 52");
}
END_TEST

/* In this format model the number of normal binades depends on the
 * exponent width and the specials only (the bias shifts them), so "no
 * normal numbers" is an exponent-width error. */
START_TEST(test_bad_no_normal_numbers)
{
    inline_error("e1m3", "exponent", "no normal numbers");
    inline_error("e1m3,bias=-5", "exponent", "no normal numbers");
    inline_error("e1m0,fn", "exponent", "no normal numbers");
    file_text_error("name = t\nexponent = 1\nmantissa = 2\nspecials = ieee\n",
                    "bad.fmt", "exponent", "no normal numbers");
}
END_TEST

START_TEST(test_bad_outside_binary64)
{
    inline_error("e11m52,bias=2000", "bias", "outside binary64");
    inline_error("e11m10,bias=-100", "bias", "outside binary64");
    inline_error("e11m52,bias=1022", "bias", "outside binary64"); /* 2^1024 */
    inline_error("e11m52,bias=1024", "bias", "outside binary64"); /* 2^-1075 */
    inline_error("e5m2,bias=99999", "bias", "99999");
    file_text_error("name = t\nexponent = 11\nmantissa = 52\nbias = 1024\n",
                    "bad.fmt", "bias", "outside binary64");
}
END_TEST

START_TEST(test_bad_key_twice)
{
    file_text_error("name = t\nexponent = 4\nexponent = 5\nmantissa = 3\n",
                    "bad.fmt:3", "exponent", "twice");
    file_text_error(HEAD "bias = 3\nbias = 4\n", "bad.fmt:5", "bias", "twice");
    inline_error("e4m3,bias=3,bias=4", "bias", "twice");
    inline_error("e5m2,saturate,sat", "overflow", "twice");
}
END_TEST

START_TEST(test_bad_missing_keys)
{
    file_text_error("exponent = 4\nmantissa = 3\n", "bad.fmt", "name",
                    "missing");
    file_text_error("name = t\nmantissa = 3\n", "bad.fmt", "exponent",
                    "missing");
    file_text_error("name = t\nexponent = 4\n", "bad.fmt", "mantissa",
                    "missing");
    file_text_error("", "bad.fmt", "name", "missing");
}
END_TEST

START_TEST(test_bad_syntax)
{
    file_text_error("name = t\nexponent 4\nmantissa = 3\n", "bad.fmt:2", "",
                    "key = value");
    file_text_error(HEAD "bias =\n", "bad.fmt:4", "bias", "missing value");
    file_text_error(HEAD "bias =    # nothing\n", "bad.fmt:4", "bias",
                    "missing value");
    file_text_error(HEAD "= 3\n", "bad.fmt:4", "", "missing key");
    inline_error("e4m3,bias=", "bias", "missing value");
    inline_error("", "", "empty");
    inline_error("x4m3", "", "neither a known format");
}
END_TEST

START_TEST(test_bad_policy_combinations)
{
    file_text_error(HEAD "specials = fn\noverflow = inf\n", "bad.fmt",
                    "overflow", "inf");
    inline_error("e4m3,overflow=inf", "overflow", "inf");
    inline_error("e2m1,overflow=nan", "overflow", "nan");
    /* IEEE specials with no fraction bit: no room for a NaN. */
    inline_error("e5m0,ieee", "specials", "ieee");
    inline_error("e5m0", "specials", "ieee");
    inline_error("e4m3,fnuz,unsigned", "specials", "fnuz");
    inline_error("e4m3,nozero", "zero", "subnormals");
    inline_error("e4m3,finite,unsigned,nozero,nosubnormals", "signed", "NaN");
    inline_error("e4m3,specials=weird", "specials", "weird");
    inline_error("e4m3,overflow=wrap", "overflow", "wrap");
    inline_error("e4m3,subnormals=maybe", "subnormals", "maybe");
}
END_TEST

START_TEST(test_bad_inline_flag)
{
    inline_error("e4m3,fast", "fast", "unknown flag");
    inline_error("e4m3,saturate,nosubnormal", "nosubnormal", "unknown flag");
    inline_error("e4m3,exponent=5", "exponent", "eXmY");
    inline_error("e4m3,colour=red", "colour", "unknown key");
}
END_TEST

/* ---- spec files on disk ------------------------------------------------ */

/* A file name of our own under /tmp, unique to this process. */
static void temp_path(char *buf, size_t size, const char *tag)
{
    snprintf(buf, size, "/tmp/emu-test-format-%ld-%s.fmt", (long)getpid(),
             tag);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    EXPECT(fp != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(data, 1, n, fp), n);
    ck_assert_int_eq(fclose(fp), 0);
}

static void load_error(const char *tag, const void *data, size_t n,
                       const char *line_suffix, const char *key,
                       const char *message_part)
{
    char path[256], where[300];
    temp_path(path, sizeof path, tag);
    write_file(path, data, n);
    emu_error err;
    memset(&err, 0, sizeof err);
    size_t before = emu_format_count();
    int rc = emu_format_load_file(path, &err);
    remove(path);
    snprintf(where, sizeof where, "%s%s", path, line_suffix);
    expect_error(rc, &err, tag, where, key, message_part);
    ck_assert_uint_eq(emu_format_count(), before);
}

START_TEST(test_file_missing)
{
    char path[256];
    temp_path(path, sizeof path, "does-not-exist");
    remove(path);
    emu_error err;
    memset(&err, 0, sizeof err);
    int rc = emu_format_load_file(path, &err);
    expect_error(rc, &err, "missing file", path, "", "cannot open");
    emu_format f;
    rc = emu_format_resolve(&f, path, &err);
    expect_error(rc, &err, "resolve missing file", path, "", "cannot open");
}
END_TEST

START_TEST(test_file_garbage)
{
    /* Binary data: every byte value, in a scrambled order. */
    unsigned char bin[512];
    test_rng g = test_rng_make(7);
    for (size_t i = 0; i < sizeof bin; i++)
        bin[i] = (unsigned char)test_next(&g);
    load_error("binary", bin, sizeof bin, ":", "", "unexpected byte");

    static const char nul[] = "name = ab\0cd\nexponent = 4\nmantissa = 3\n";
    load_error("nul", nul, sizeof nul - 1, ":1", "", "0x00");

    static const char utf8[] = "name = t\ndescription = caf\xc3\xa9\n"
                               "exponent = 4\nmantissa = 3\n";
    load_error("utf8", utf8, sizeof utf8 - 1, ":2", "", "0xc3");

    static const char bom[] = "\xef\xbb\xbfname = t\nexponent = 4\n"
                              "mantissa = 3\n";
    load_error("bom", bom, sizeof bom - 1, ":1", "", "0xef");

    /* A line longer than any spec line, and an over-long name. */
    char longline[1200];
    memset(longline, 'x', sizeof longline);
    memcpy(longline, "name = ", 7);
    load_error("long", longline, sizeof longline, ":1", "", "longer");
    char longname[128];
    snprintf(longname, sizeof longname, "name = %070d\nexponent = 4\n"
             "mantissa = 3\n", 0);
    load_error("longname", longname, strlen(longname), ":1", "name",
               "not a name");
}
END_TEST

START_TEST(test_file_duplicate_names)
{
    static const char fp16[] = "name = fp16\nexponent = 5\nmantissa = 10\n";
    load_error("dup-alias-as-name", fp16, sizeof fp16 - 1, ":1", "name", "fp16");
    static const char upper[] = "name = BINARY16\nexponent = 5\nmantissa = 10\n";
    load_error("dup-case", upper, sizeof upper - 1, "", "name", "BINARY16");
    static const char alias[] = "name = suites_alias_clash\naliases = mine, "
                                "bf16\nexponent = 8\nmantissa = 7\n";
    /* The clash is in the aliases, on line 2: the message says so. */
    load_error("dup-alias", alias, sizeof alias - 1, ":2", "aliases", "bf16");

    /* A fresh name loads, answers to its name and alias, and a second
     * load of the same file is refused. */
    char path[256];
    temp_path(path, sizeof path, "fresh");
    static const char fresh[] =
        "# a user format\nname = suites_e3m3\naliases = suites_alias\n"
        "exponent = 3\nmantissa = 3\nbias = 2\nspecials = fn\n";
    write_file(path, fresh, sizeof fresh - 1);
    emu_error err;
    int rc = emu_format_load_file(path, &err);
    EXPECT(rc == 0, "fresh spec refused: %s: %s: %s", err.where, err.key,
                  err.message);
    const emu_format *f = emu_format_find("SUITES_ALIAS");
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(f->name, "suites_e3m3");
    ck_assert(f->max == 0x1.cp5);   /* (2 - 2 * 2^-3) * 2^(7 - 2) = 56 */
    ck_assert(f->min_value == 0x1p-4);
    ck_assert_int_eq(f->overflow, EMU_OVERFLOW_NAN);
    rc = emu_format_load_file(path, &err);
    remove(path);
    expect_error(rc, &err, "second load", path, "name", "suites_e3m3");
}
END_TEST

START_TEST(test_file_resolve)
{
    char path[256];
    temp_path(path, sizeof path, "resolve");
    static const char text[] = "name = suites_resolve\nexponent = 2\n"
                               "mantissa = 1\nspecials = finite\n";
    write_file(path, text, sizeof text - 1);
    emu_format f;
    emu_error err;
    int rc = emu_format_resolve(&f, path, &err);
    remove(path);
    EXPECT(rc == 0, "%s: %s", err.key, err.message);
    ck_assert(f.max == 6.0 && f.overflow == EMU_OVERFLOW_SATURATE);
    /* Resolving does not register. */
    ck_assert_ptr_null(emu_format_find("suites_resolve"));
}
END_TEST

/* The seal (emu_format_is_validated): set by emu_format_validate, broken by
 * any change to a spec or derived field, and checked by the entry points
 * that keep a format or sweep arrays with it. */
START_TEST(test_seal)
{
    const emu_format *e4m3 = test_format("e4m3");
    ck_assert(emu_format_is_validated(e4m3));
    ck_assert(!emu_format_is_validated(NULL));

    /* Built by hand: unsealed until validated. */
    emu_format f;
    memset(&f, 0, sizeof f);
    snprintf(f.name, sizeof f.name, "byhand");
    f.ebits = 4, f.mbits = 3, f.bias = 7, f.is_signed = true;
    f.subnormals = true, f.has_zero = true;
    f.specials = EMU_SPECIALS_IEEE, f.overflow = EMU_OVERFLOW_INF;
    ck_assert(!emu_format_is_validated(&f));
    emu_error err;
    ck_assert_int_eq(emu_format_validate(&f, &err), 0);
    ck_assert(emu_format_is_validated(&f));

    /* A renamed copy keeps its seal; a changed spec field or derived field
     * breaks it, and validating again restores it. */
    emu_format g = *e4m3;
    snprintf(g.name, sizeof g.name, "renamed");
    ck_assert(emu_format_is_validated(&g));
    g.subnormals = false;
    ck_assert(!emu_format_is_validated(&g));
    ck_assert_int_eq(emu_format_validate(&g, &err), 0);
    ck_assert(emu_format_is_validated(&g));
    ck_assert(g.min_value == g.min_normal);
    g = *e4m3;
    g.max = 500.0;
    ck_assert(!emu_format_is_validated(&g));
    g = *e4m3;
    g.p = 5;
    ck_assert(!emu_format_is_validated(&g));
    /* A failed validation leaves the format unsealed. */
    g = *e4m3;
    g.ebits = 0;
    ck_assert_int_ne(emu_format_validate(&g, &err), 0);
    g.ebits = e4m3->ebits;
    ck_assert(!emu_format_is_validated(&g));

    /* The entry points refuse the stale copy. */
    emu_format stale = *e4m3;
    stale.mbits = 2;
    emu_tensor t;
    const size_t shape[1] = { 4 };
    ck_assert_int_ne(emu_tensor_alloc(&t, "t", EMU_ROLE_OTHER, &stale, 1,
                                      shape, &err), 0);
    ck_assert_str_eq(err.key, "format");
    ck_assert_ptr_nonnull(strstr(err.message, "emu_format_validate"));

    float in[4] = { 0.1f, 1.0f, 300.0f, -2.5f }, out[4] = { 7, 7, 7, 7 };
    emu_array_rounding ar;
    memset(&ar, 0, sizeof ar);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(emu_round_array_f32(&stale, out, in, 4, &ar, NULL, &err), -1);
    ck_assert(out[0] == 7.0f);
    ck_assert_int_eq(err.code, EMU_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "emu_format_validate"));
    double ind[1] = { 0.1 }, outd[1] = { 7 };
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(emu_round_array_f64(&stale, outd, ind, 1, &ar, NULL, &err), -1);
    ck_assert(outd[0] == 7.0);
    ck_assert_int_eq(err.code, EMU_EINVAL);
    ck_assert_int_eq(emu_round_array_f32(e4m3, out, in, 4, &ar, NULL, NULL), 0);

    emu_accum a;
    ck_assert_int_eq(emu_accum_parse(&a, "seq,acc=binary16", &err), 0);
    ck_assert_int_eq(emu_accum_validate(&a, &err), 0);
    a.acc.bias = 14;
    ck_assert_int_ne(emu_accum_validate(&a, &err), 0);
    ck_assert_str_eq(err.key, "acc");

    emu_policy pol;
    ck_assert_int_eq(emu_policy_preset(&pol, "fp16-mpt", &err), 0);
    ck_assert_int_eq(emu_policy_validate(&pol, &err), 0);
    pol.activation.fmt.mbits = 9;
    ck_assert_int_ne(emu_policy_validate(&pol, &err), 0);
    ck_assert_str_eq(err.key, "activation");

    emu_scaled_format sf;
    ck_assert_int_eq(emu_scaled_format_parse(&sf, "mxfp8", &err), 0);
    sf.scale.bias = 100;
    ck_assert_int_ne(emu_scaled_format_validate(&sf, &err), 0);
    ck_assert_str_eq(err.key, "scale");

    /* Every op checks its tensors: one whose format was edited in place
     * after allocation is refused. */
    ck_assert_int_eq(emu_tensor_alloc(&t, "t", EMU_ROLE_OTHER, e4m3, 1, shape,
                                      &err), 0);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_check_tensor(&ctx, "op", "out", &t), 0);
    t.fmt.mbits = 2;
    ck_assert_int_eq(emu_check_tensor(&ctx, "op", "out", &t), -1);
    ck_assert_ptr_nonnull(strstr(ctx.err.message, "emu_format_validate"));
    emu_tensor_free(&t);
}
END_TEST

static Suite *format_suite(void)
{
    Suite *s = suite_create("format");
    TCase *tc = tcase_create("shipped");
    tcase_add_loop_test(tc, test_shipped_constants, 0, N_SHIPPED);
    tcase_add_loop_test(tc, test_shipped_special_patterns, 0, N_SHIPPED);
    tcase_add_test(tc, test_specific_special_patterns);
    tcase_add_test(tc, test_every_shipped_format_is_tabled);
    suite_add_tcase(s, tc);

    tc = tcase_create("grid");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_grid_brute_force, 1, 9);
    tcase_add_loop_test(tc, test_grid_spec_string_round_trip, 1, 9);
    tcase_add_test(tc, test_grid_range_edges);
    tcase_add_test(tc, test_fits_carrier);
    suite_add_tcase(s, tc);

    tc = tcase_create("inline");
    tcase_add_test(tc, test_inline_grammar);
    tcase_add_test(tc, test_spec_string_round_trip_shipped);
    tcase_add_test(tc, test_spec_string_round_trip_named_bases);
    suite_add_tcase(s, tc);

    tc = tcase_create("bad");
    tcase_add_test(tc, test_bad_unknown_key);
    tcase_add_test(tc, test_bad_zero_exponent);
    tcase_add_test(tc, test_bad_negative_widths);
    tcase_add_test(tc, test_bad_absurd_widths);
    tcase_add_test(tc, test_bad_no_normal_numbers);
    tcase_add_test(tc, test_bad_outside_binary64);
    tcase_add_test(tc, test_bad_key_twice);
    tcase_add_test(tc, test_bad_missing_keys);
    tcase_add_test(tc, test_bad_syntax);
    tcase_add_test(tc, test_bad_policy_combinations);
    tcase_add_test(tc, test_bad_inline_flag);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_test(tc, test_file_missing);
    tcase_add_test(tc, test_file_garbage);
    tcase_add_test(tc, test_file_duplicate_names);
    tcase_add_test(tc, test_file_resolve);
    suite_add_tcase(s, tc);

    tc = tcase_create("seal");
    tcase_add_test(tc, test_seal);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(format_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
