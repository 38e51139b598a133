/*
 * test_profiles.c — the special-value profiles (emu/round.h: ieee, ocp,
 * riscv) on the bit-pattern layer that test vectors are made of.
 *
 * Numbers are held against the MPFR oracle (emu/ref.h: value, sign,
 * ternary, flags); NaN patterns and the invalid flag of signalling NaNs
 * against a model of each profile's table written here from the table
 * (README "Special-value profiles"), on exponent and fraction fields,
 * without the library's NaN code.
 *
 * Conversions: every pattern of every format of at most 8 bits into
 * binary16 and binary32; every binary16 pattern, and every binary32
 * pattern's top 16 bits (low half 0 or 1: the sticky bit and payloads
 * that live in the low bits only), into every such format; saturation
 * on and off, two modes.  Arithmetic: NaN operands and invalid operations
 * under each profile.  And the cases the issue names.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/ref.h>

#include "testutil.h"

/* ---- the formats ------------------------------------------------------ */

enum { MAX_NARROW = 32 };
static const emu_format *narrow[MAX_NARROW];
static int n_narrow;

static void collect_narrow(void)
{
    for (size_t i = 0; i < emu_format_count(); i++)
        if (emu_format_at(i)->bits <= 8 && n_narrow < MAX_NARROW)
            narrow[n_narrow++] = emu_format_at(i);
}

/* ---- the model of the profile tables ----------------------------------- */

typedef struct fields {
    unsigned sign;
    uint64_t e, f;
} fields;

static uint64_t ones(int n)
{
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

static fields fields_of(const emu_format *F, uint64_t b)
{
    fields x;
    x.f = b & ones(F->mbits);
    x.e = (b >> F->mbits) & ones(F->ebits);
    x.sign = F->is_signed ? (unsigned)(b >> (F->bits - 1)) & 1 : 0;
    return x;
}

static uint64_t pattern(const emu_format *F, unsigned sign, uint64_t e,
                        uint64_t f)
{
    uint64_t b = (e << F->mbits) | f;
    return sign && F->is_signed ? b | 1ull << (F->bits - 1) : b;
}

static bool is_nan(const emu_format *F, uint64_t b)
{
    return emu_classify_bits(F, (emu_bits){ b }) == EMU_CLASS_NAN;
}

/* Row "signalling NaNs": a NaN with IEEE specials whose fraction's top bit
 * is clear, except in narrow formats under riscv (Zvfofp8min: every OFP8
 * NaN is quiet). */
static bool model_signals(const emu_format *F, emu_profile_id id, uint64_t b)
{
    if (!is_nan(F, b) || F->specials != EMU_SPECIALS_IEEE)
        return false;
    if (id == EMU_PROFILE_RISCV && F->bits <= 8)
        return false;
    return !(fields_of(F, b).f >> (F->mbits - 1) & 1);
}

/* Row "default NaN", with the sign a new NaN gets: riscv's narrow default
 * is S.11111.11 (0x7F), the others' the quiet bit alone (0x7E in E5M2);
 * E4M3's only NaN mantissa is all ones; fnuz's NaN is the sign bit. */
static uint64_t model_new_nan(const emu_format *F, emu_profile_id id,
                              unsigned sign)
{
    uint64_t top = ones(F->ebits);
    switch (F->specials) {
    case EMU_SPECIALS_IEEE: {
        bool all = id == EMU_PROFILE_RISCV && F->bits <= 8;
        return pattern(F, sign, top, all ? ones(F->mbits)
                                         : 1ull << (F->mbits - 1));
    }
    case EMU_SPECIALS_FN:
        return pattern(F, sign, top, ones(F->mbits));
    case EMU_SPECIALS_FNUZ:
        return 1ull << (F->bits - 1);
    default:
        return 0; /* no NaN: +0 stands for it */
    }
}

/* Rows "NaN sign" and "NaN payload": ocp keeps the operand's sign and its
 * fraction (quiet bit set), cut to the top bits the output holds; ieee
 * and riscv give the default NaN. */
static uint64_t model_propagated(const emu_format *out, emu_profile_id id,
                                 const emu_format *in, uint64_t b)
{
    if (id != EMU_PROFILE_OCP)
        return model_new_nan(out, id, 0);
    /* fnuz's NaN is its sign bit alone: it reads as a negative NaN. */
    fields x = fields_of(in, b);
    if (out->specials != EMU_SPECIALS_IEEE)
        return model_new_nan(out, id, x.sign);
    /* The payload as a fraction of 64 bits, quiet bit first. */
    uint64_t wide = in->specials == EMU_SPECIALS_IEEE ? x.f << (64 - in->mbits)
                                                      : 0;
    wide |= 1ull << 63;
    return pattern(out, x.sign, ones(out->ebits), wide >> (64 - out->mbits));
}

/* ---- one conversion, checked ------------------------------------------- */

static const char *pname(emu_profile_id id)
{
    return emu_profile_name(id);
}

static emu_rounding rounding(emu_rnd m, bool sat, emu_profile_id id)
{
    emu_rounding r;
    memset(&r, 0, sizeof r);
    r.mode = m;
    r.saturate = sat;
    r.profile = emu_profile_preset(id);
    return r;
}

/* The expected pattern of a number the oracle computed (NaN: a new NaN of
 * the sign of the value it stands for, under ocp). */
static uint64_t expected_pattern(const emu_format *out, emu_profile_id id,
                                 double want, double x)
{
    if (isnan(want))
        return model_new_nan(out, id, id == EMU_PROFILE_OCP && signbit(x));
    emu_bits e;
    if (!emu_encode(out, want, &e))
        ck_abort_msg("oracle value %a is not a value of %s", want, out->name);
    return e.v;
}

/* Converts pattern b of `in` into `out` under every profile and checks
 * each against the oracle and the model. */
static void check_convert(const emu_format *in, const emu_format *out,
                          uint64_t b, emu_rnd m, bool sat)
{
    const double x = emu_decode(in, (emu_bits){ b });
    const bool nan_in = is_nan(in, b);
    emu_status ws = { 0, 0 };
    double want = NAN;
    if (!nan_in) {
        emu_rounding r0 = rounding(m, sat, EMU_PROFILE_IEEE);
        want = emu_ref_convert(out, x, &r0, &ws);
    }
    for (int id = 0; id < EMU_PROFILE_COUNT; id++) {
        emu_rounding r = rounding(m, sat, (emu_profile_id)id);
        uint64_t exp_bits;
        unsigned exp_flags;
        int exp_ternary = nan_in ? 0 : (ws.ternary > 0) - (ws.ternary < 0);
        if (nan_in) {
            exp_bits = out->has_nan
                     ? model_propagated(out, (emu_profile_id)id, in, b) : 0;
            exp_flags = (model_signals(in, (emu_profile_id)id, b) ||
                         !out->has_nan) ? EMU_FLAG_INVALID : 0;
        } else {
            exp_bits = expected_pattern(out, (emu_profile_id)id, want, x);
            exp_flags = ws.flags;
        }
        emu_bits res = { 0 };
        emu_status st;
        int rc = emu_bits_op(EMU_OP_CONVERT, in, out, &(emu_bits){ b }, &r,
                             &res, &st, NULL);
        int ternary = (st.ternary > 0) - (st.ternary < 0);
        EXPECT(rc == 0 && res.v == exp_bits && st.flags == exp_flags &&
               ternary == exp_ternary,
               "convert %s 0x%llx (%a) -> %s, %s%s, profile %s: got 0x%llx "
               "flags %#x ternary %d (rc %d), expected 0x%llx flags %#x "
               "ternary %d", in->name, (unsigned long long)b, x, out->name,
               emu_rnd_name(m), sat ? " saturate" : "",
               pname((emu_profile_id)id), (unsigned long long)res.v, st.flags,
               ternary, rc, (unsigned long long)exp_bits, exp_flags,
               exp_ternary);
    }
}

static const emu_rnd modes[] = { EMU_RNE, EMU_RZ };

/* ---- conversions -------------------------------------------------------- */

START_TEST(widen_every_narrow_pattern)
{
    const emu_format *in = narrow[_i];
    const emu_format *wide[] = { test_format("binary16"),
                                 test_format("binary32") };
    for (size_t w = 0; w < 2; w++)
        for (uint64_t b = 0; b < (1ull << in->bits); b++)
            for (int s = 0; s < 2; s++)
                for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
                    check_convert(in, wide[w], b, modes[m], s);
}
END_TEST

START_TEST(narrow_every_binary16_pattern)
{
    const emu_format *out = narrow[_i], *h = test_format("binary16");
    for (uint64_t b = 0; b < 0x10000; b++)
        for (int s = 0; s < 2; s++)
            for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
                check_convert(h, out, b, modes[m], s);
}
END_TEST

START_TEST(narrow_binary32_top_halves)
{
    const emu_format *out = narrow[_i], *f = test_format("binary32");
    for (uint64_t top = 0; top < 0x10000; top++)
        for (uint64_t low = 0; low < 2; low++)
            for (int s = 0; s < 2; s++)
                check_convert(f, out, top << 16 | low, EMU_RNE, s);
}
END_TEST

/* ---- arithmetic ---------------------------------------------------------- */

/* op on patterns of F under profile id; checks the NaN result against the
 * model: the first NaN operand propagates (x86's order), a signalling
 * operand raises invalid. */
static void check_nan_op(emu_op op, const emu_format *F, emu_profile_id id,
                         const uint64_t *b)
{
    const int n = emu_op_arity(op);
    int first = -1;
    bool signals = false;
    for (int i = 0; i < n; i++) {
        if (first < 0 && is_nan(F, b[i]))
            first = i;
        signals |= model_signals(F, id, b[i]);
    }
    emu_bits ops[3] = { { b[0] }, { n > 1 ? b[1] : 0 }, { n > 2 ? b[2] : 0 } };
    emu_rounding r = rounding(EMU_RNE, false, id);
    emu_bits res = { 0 };
    emu_status st;
    int rc = emu_bits_op(op, F, F, ops, &r, &res, &st, NULL);
    uint64_t want = model_propagated(F, id, F, b[first]);
    unsigned wflags = signals ? EMU_FLAG_INVALID : 0;
    EXPECT(rc == 0 && res.v == want && st.flags == wflags,
           "%s %s (0x%llx 0x%llx 0x%llx), profile %s: got 0x%llx flags %#x, "
           "expected 0x%llx flags %#x", emu_op_name(op), F->name,
           (unsigned long long)b[0], (unsigned long long)ops[1].v,
           (unsigned long long)ops[2].v, pname(id), (unsigned long long)res.v,
           st.flags, (unsigned long long)want, wflags);
}

/* Every NaN pattern of the format with every operand of a small set, in
 * every position, for the six arithmetic operations. */
START_TEST(nan_operands_propagate_by_profile)
{
    static const char *const names[] = { "e5m2", "binary16", "e4m3",
                                         "e5m2fnuz" };
    const emu_format *F = test_format(names[_i]);
    emu_bits one, inf = { 0 };
    emu_encode(F, 1.0, &one);
    if (F->has_inf)
        emu_encode(F, -INFINITY, &inf);
    uint64_t nans[64];
    int n_nans = 0;
    for (uint64_t b = 0; b < (1ull << F->bits) && n_nans < 64; b++) {
        /* binary16: every pattern of the top exponent with the low
         * fraction bits 0 or all ones (payload at both ends). */
        if (is_nan(F, b) && (F->bits <= 8 || (b & 0xff) == 0 ||
                             (b & 0xff) == 0xff))
            nans[n_nans++] = b;
    }
    ck_assert_int_gt(n_nans, 0);
    const uint64_t others[] = { 0, one.v, inf.v };
    const emu_op binops[] = { EMU_OP_ADD, EMU_OP_SUB, EMU_OP_MUL, EMU_OP_DIV };
    for (int id = 0; id < EMU_PROFILE_COUNT; id++)
        for (int i = 0; i < n_nans; i++) {
            uint64_t b1[1] = { nans[i] };
            check_nan_op(EMU_OP_SQRT, F, (emu_profile_id)id, b1);
            for (int j = 0; j < n_nans; j++)
                for (size_t o = 0; o < 4; o++) {
                    uint64_t b2[2] = { nans[i], nans[j] };
                    check_nan_op(binops[o], F, (emu_profile_id)id, b2);
                }
            for (size_t k = 0; k < 3; k++)
                for (size_t o = 0; o < 4; o++) {
                    uint64_t x2[2] = { others[k], nans[i] };
                    uint64_t y2[2] = { nans[i], others[k] };
                    check_nan_op(binops[o], F, (emu_profile_id)id, x2);
                    check_nan_op(binops[o], F, (emu_profile_id)id, y2);
                }
            for (int j = 0; j < n_nans; j += 7) {
                uint64_t f3[3] = { one.v, nans[i], nans[j] };
                uint64_t g3[3] = { nans[j], one.v, nans[i] };
                check_nan_op(EMU_OP_FMA, F, (emu_profile_id)id, f3);
                check_nan_op(EMU_OP_FMA, F, (emu_profile_id)id, g3);
            }
        }
}
END_TEST

/* inf - inf, 0 * inf, 0 / 0, inf / inf, sqrt(-1): a new NaN, the
 * profile's default, with invalid. */
START_TEST(invalid_operations_give_the_default_nan)
{
    static const char *const names[] = { "e5m2", "binary16", "e4m3" };
    const emu_format *F = test_format(names[_i]);
    const double big = F->has_inf ? INFINITY : F->max;
    emu_bits inf, ninf, zero, m1;
    emu_encode(F, big, &inf);
    emu_encode(F, -big, &ninf);
    emu_encode(F, 0.0, &zero);
    emu_encode(F, -1.0, &m1);
    const struct { emu_op op; emu_bits a, b; bool needs_inf; } cases[] = {
        { EMU_OP_ADD, inf, ninf, true }, { EMU_OP_SUB, inf, inf, true },
        { EMU_OP_MUL, zero, inf, true }, { EMU_OP_DIV, zero, zero, false },
        { EMU_OP_DIV, inf, inf, true },  { EMU_OP_SQRT, m1, m1, false },
    };
    for (int id = 0; id < EMU_PROFILE_COUNT; id++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            if (cases[c].needs_inf && !F->has_inf)
                continue;
            emu_bits ops[3] = { cases[c].a, cases[c].b, { 0 } }, res;
            emu_rounding r = rounding(EMU_RNE, false, (emu_profile_id)id);
            emu_status st;
            emu_bits_op(cases[c].op, F, F, ops, &r, &res, &st, NULL);
            uint64_t want = model_new_nan(F, (emu_profile_id)id, 0);
            EXPECT(res.v == want && st.flags == EMU_FLAG_INVALID,
                   "%s %s 0x%llx 0x%llx, profile %s: got 0x%llx flags %#x, "
                   "expected 0x%llx invalid", emu_op_name(cases[c].op),
                   F->name, (unsigned long long)ops[0].v,
                   (unsigned long long)ops[1].v, pname((emu_profile_id)id),
                   (unsigned long long)res.v, st.flags,
                   (unsigned long long)want);
        }
}
END_TEST

/* eq is quiet: invalid only for a signalling operand, which the profile
 * decides; lt is invalid for any NaN. */
START_TEST(comparisons_signal_by_profile)
{
    const emu_format *F = test_format("e5m2");
    for (int id = 0; id < EMU_PROFILE_COUNT; id++)
        for (uint64_t b = 0; b < 256; b++) {
            emu_bits ops[3] = { { b }, { 0x3c }, { 0 } }, res;
            emu_rounding r = rounding(EMU_RNE, false, (emu_profile_id)id);
            emu_status st;
            emu_bits_op(EMU_OP_EQ, F, F, ops, &r, &res, &st, NULL);
            unsigned want = model_signals(F, (emu_profile_id)id, b)
                          ? EMU_FLAG_INVALID : 0;
            EXPECT(st.flags == want, "eq e5m2 0x%02llx, profile %s: flags "
                   "%#x, expected %#x", (unsigned long long)b,
                   pname((emu_profile_id)id), st.flags, want);
            emu_bits_op(EMU_OP_LT, F, F, ops, &r, &res, &st, NULL);
            want = is_nan(F, b) ? EMU_FLAG_INVALID : 0;
            EXPECT(st.flags == want, "lt e5m2 0x%02llx, profile %s: flags "
                   "%#x, expected %#x", (unsigned long long)b,
                   pname((emu_profile_id)id), st.flags, want);
        }
}
END_TEST

/* ---- the cases the issue names ------------------------------------------- */

static emu_status convert_bits(const char *in, const char *out, uint64_t b,
                               emu_profile_id id, bool sat, uint64_t *res)
{
    emu_rounding r = rounding(EMU_RNE, sat, id);
    emu_bits o;
    emu_status st;
    ck_assert_int_eq(emu_bits_op(EMU_OP_CONVERT, test_format(in),
                                 test_format(out), &(emu_bits){ b }, &r, &o,
                                 &st, NULL), 0);
    *res = o.v;
    return st;
}

START_TEST(issue_examples)
{
    uint64_t v;
    /* E5M2 0x7D widened: signalling under ieee (invalid), quiet under
     * riscv (Zvfofp8min), whose result is binary16's canonical 0x7E00. */
    emu_status st = convert_bits("e5m2", "binary16", 0x7d, EMU_PROFILE_IEEE,
                                 false, &v);
    ck_assert_uint_eq(st.flags, EMU_FLAG_INVALID);
    st = convert_bits("e5m2", "binary32", 0x7d, EMU_PROFILE_RISCV, false, &v);
    ck_assert_uint_eq(st.flags, 0);
    ck_assert_uint_eq(v, 0x7fc00000);
    /* The canonical NaN of OFP8 on RISC-V is 0x7F, whatever the NaN. */
    convert_bits("binary32", "e5m2", 0xffc00001, EMU_PROFILE_RISCV, false, &v);
    ck_assert_uint_eq(v, 0x7f);
    convert_bits("binary32", "e4m3", 0xff800001, EMU_PROFILE_RISCV, false, &v);
    ck_assert_uint_eq(v, 0x7f);
    convert_bits("binary32", "e5m2", 0xffc00001, EMU_PROFILE_IEEE, false, &v);
    ck_assert_uint_eq(v, 0x7e);
    /* Saturation maps infinities to ±max in every profile. */
    for (int id = 0; id < EMU_PROFILE_COUNT; id++) {
        convert_bits("binary32", "e4m3", 0x7f800000, (emu_profile_id)id, true,
                     &v);
        ck_assert_uint_eq(v, 0x7e); /* 448 */
        convert_bits("binary32", "e5m2", 0xff800000, (emu_profile_id)id, true,
                     &v);
        ck_assert_uint_eq(v, 0xfb); /* -57344 */
        st = convert_bits("binary32", "e5m2", 0x7f800000, (emu_profile_id)id,
                          false, &v);
        ck_assert_uint_eq(v, 0x7c); /* no saturation: inf stays */
    }
}
END_TEST

/* Names: the three parse, an unknown one fails, zero is ieee, the three
 * differ, and a profile set field by field has no name. */
START_TEST(profile_names)
{
    emu_profile p, zero;
    memset(&zero, 0, sizeof zero);
    emu_profile_id id;
    for (int i = 0; i < EMU_PROFILE_COUNT; i++) {
        ck_assert_int_eq(emu_profile_parse(emu_profile_name((emu_profile_id)i),
                                           &p, &id), 0);
        ck_assert_int_eq(id, i);
        ck_assert_int_eq(emu_profile_id_of(&p), i);
    }
    ck_assert_int_eq(emu_profile_parse("IEEE", &p, &id), -1);
    ck_assert_int_eq(emu_profile_parse("", &p, &id), -1);
    ck_assert_int_eq(emu_profile_parse(NULL, &p, &id), -1);
    ck_assert_int_eq(emu_profile_id_of(&zero), EMU_PROFILE_IEEE);
    p = zero;
    p.nan_negative = true;
    ck_assert_int_eq(emu_profile_id_of(&p), EMU_PROFILE_COUNT);
    ck_assert_str_eq(emu_profile_name(EMU_PROFILE_COUNT), "?");
}
END_TEST

/* A choice set by hand: no invalid for inf or NaN into a format without
 * them, a negative default NaN, and saturation that keeps infinities. */
START_TEST(individual_choices)
{
    const emu_format *e4m3 = test_format("e4m3"), *e2m1 = test_format("e2m1");
    const emu_format *e5m2 = test_format("e5m2");
    emu_rounding r = rounding(EMU_RNE, false, EMU_PROFILE_IEEE);
    emu_status st;
    emu_round(e4m3, INFINITY, &r, &st);
    ck_assert_uint_eq(st.flags, EMU_FLAG_INVALID);
    emu_round(e2m1, NAN, &r, &st);
    ck_assert_uint_eq(st.flags, EMU_FLAG_INVALID);
    r.profile.quiet_unrepresentable = true;
    emu_round(e4m3, INFINITY, &r, &st);
    ck_assert_uint_eq(st.flags, 0);
    emu_round(e2m1, NAN, &r, &st);
    ck_assert_uint_eq(st.flags, 0);

    r = rounding(EMU_RNE, false, EMU_PROFILE_IEEE);
    r.profile.nan_negative = true;
    emu_bits o;
    emu_bits_op(EMU_OP_CONVERT, test_format("binary32"), e5m2,
                &(emu_bits){ 0x7fc00000 }, &r, &o, &st, NULL);
    ck_assert_uint_eq(o.v, 0xfe);

    r = rounding(EMU_RNE, true, EMU_PROFILE_IEEE);
    r.profile.saturate_keeps_inf = true;
    ck_assert(isinf(emu_round(e5m2, INFINITY, &r, &st)));
}
END_TEST

/* The array path gives the scalar choke point's NaNs bit for bit, also
 * where a profile keeps sign and payload (binary32 output: the identity
 * fast path must step aside). */
START_TEST(array_nans_match_scalar)
{
    static const uint32_t in_bits[] = { 0x7fc00000, 0xffc00000, 0x7fa12345,
                                        0xff812345, 0x7f800001, 0x3f800000 };
    enum { N = sizeof in_bits / sizeof in_bits[0] };
    static const char *const names[] = { "binary32", "e5m2", "binary16" };
    for (size_t f = 0; f < 3; f++)
        for (int id = 0; id < EMU_PROFILE_COUNT; id++) {
            const emu_format *F = test_format(names[f]);
            float in[N], out[N];
            memcpy(in, in_bits, sizeof in);
            emu_array_rounding a;
            memset(&a, 0, sizeof a);
            a.rnd.profile = emu_profile_preset((emu_profile_id)id);
            emu_round_array_f32(F, out, in, N, &a, NULL, NULL);
            for (int i = 0; i < N; i++) {
                float want = (float)emu_round(F, in[i], &a.rnd, NULL);
                uint32_t w, g;
                memcpy(&w, &want, 4);
                memcpy(&g, &out[i], 4);
                EXPECT(w == g, "%s, profile %s, input 0x%08x: array 0x%08x, "
                       "scalar 0x%08x", F->name, pname((emu_profile_id)id),
                       in_bits[i], g, w);
            }
        }
}
END_TEST

static Suite *profiles_suite(void)
{
    Suite *s = suite_create("profiles");
    TCase *tc = tcase_create("conversions");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, widen_every_narrow_pattern, 0, n_narrow);
    tcase_add_loop_test(tc, narrow_every_binary16_pattern, 0, n_narrow);
    tcase_add_loop_test(tc, narrow_binary32_top_halves, 0, n_narrow);
    suite_add_tcase(s, tc);
    tc = tcase_create("arithmetic");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, nan_operands_propagate_by_profile, 0, 4);
    tcase_add_loop_test(tc, invalid_operations_give_the_default_nan, 0, 3);
    tcase_add_test(tc, comparisons_signal_by_profile);
    suite_add_tcase(s, tc);
    tc = tcase_create("named");
    tcase_add_test(tc, issue_examples);
    tcase_add_test(tc, profile_names);
    tcase_add_test(tc, individual_choices);
    tcase_add_test(tc, array_nans_match_scalar);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    collect_narrow();
    SRunner *sr = srunner_create(profiles_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
