/*
 * test_mpfr_arith8.c — the formats of at most 8 bits, exhaustively, against
 * the GNU MPFR oracle (libemu/ref.c).
 *
 * For every format of the registry with fmt->bits <= 8, and a few user
 * formats that reach the flush, saturate, shifted-bias and unsigned paths:
 * add, sub, mul and div of every pair of bit patterns, sqrt of every
 * pattern, and the conversion of every pattern into every format, under
 * the six deterministic modes, both tininess rules, and with the caller's
 * saturation on and off where the format does not saturate already.
 * Results must agree bit for bit: the value (the sign of zero included),
 * the ternary sign and all seven flags.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/ref.h>

#include "testutil.h"

/* ---- checking against the oracle: check_one (mpfr_check.h) compares
 * value, sign of zero, ternary sign and all seven flags, and prints what
 * replays a mismatch. */
#include "mpfr_check.h"

/* ---- the formats under test ------------------------------------------- */

enum { MAX_FORMATS = 64 };
static const emu_format *small[MAX_FORMATS]; /* <= 8 bits: the operands  */
static size_t n_small;
static const emu_format *targets[MAX_FORMATS]; /* every format: conversions */
static size_t n_targets;

/* Inline specs reaching what the shipped formats do not: IEEE formats
 * flushing to zero, a format without inf flushing, saturation of an fn
 * format, a shifted bias, an unsigned format with a zero (rule 4). */
static const char *const user_specs[] = {
    "e3m2,nosubnormals", "e5m2,nosubnormals", "e4m3,saturate",
    "e5m2,bias=20",      "e4m3,unsigned",     "e2m1,nosubnormals",
};
static emu_format user[sizeof user_specs / sizeof user_specs[0]];

static void collect_formats(void)
{
    for (size_t i = 0; i < emu_format_count(); i++) {
        const emu_format *f = emu_format_at(i);
        targets[n_targets++] = f;
        if (f->bits <= 8)
            small[n_small++] = f;
    }
    for (size_t i = 0; i < sizeof user_specs / sizeof user_specs[0]; i++) {
        emu_error err;
        if (emu_format_parse_inline(&user[i], user_specs[i], &err)) {
            char msg[600];
            emu_error_format(&err, msg, sizeof msg);
            fprintf(stderr, "test setup: %s\n", msg);
            abort();
        }
        small[n_small++] = &user[i];
        targets[n_targets++] = &user[i];
    }
}

/* The rounding settings a format is run under: both tininess rules, and
 * the caller's saturation where the format's own rule is not saturation
 * already (saturation only changes overflow, which tininess never
 * meets). */
static int settings(const emu_format *f, emu_rounding out[3])
{
    memset(out, 0, 3 * sizeof out[0]);
    out[0].tininess = EMU_TINY_AFTER;
    out[1].tininess = EMU_TINY_BEFORE;
    if (f->overflow == EMU_OVERFLOW_SATURATE)
        return 2;
    out[2].tininess = EMU_TINY_AFTER;
    out[2].saturate = true;
    return 3;
}

/* Every pattern of f and its value. */
static size_t patterns(const emu_format *f, uint64_t *bits, double *v)
{
    size_t n = (size_t)1 << f->bits;
    for (size_t i = 0; i < n; i++) {
        bits[i] = i;
        v[i] = emu_decode(f, (emu_bits){ i });
    }
    return n;
}

typedef double (*binop_fn)(const emu_format *, double, double,
                           const emu_rounding *, emu_status *);

static const struct {
    const char *name;
    binop_fn emu, ref;
} binops[] = {
    { "add", emu_add, emu_ref_add },
    { "sub", emu_sub, emu_ref_sub },
    { "mul", emu_mul, emu_ref_mul },
    { "div", emu_div, emu_ref_div },
};

/* ---- the tests -------------------------------------------------------- */

START_TEST(test_binary_ops)
{
    const emu_format *f = small[_i];
    uint64_t bits[256];
    double v[256];
    size_t n = patterns(f, bits, v);
    emu_rounding set[3];
    int nset = settings(f, set);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (size_t op = 0; op < sizeof binops / sizeof binops[0]; op++)
        for (int s = 0; s < nset; s++)
            for (int m = 0; m < TEST_DET_MODES; m++) {
                emu_rounding r = set[s];
                r.mode = (emu_rnd)m;
                for (size_t i = 0; i < n; i++)
                    for (size_t j = 0; j < n; j++) {
                        emu_status ws, gs;
                        double want = binops[op].ref(f, v[i], v[j], &r, &ws);
                        double got = binops[op].emu(f, v[i], v[j], &r, &gs);
                        uint64_t b2[2] = { bits[i], bits[j] };
                        double v2[2] = { v[i], v[j] };
                        check_one(binops[op].name, f, f, &r, 2, b2, v2, want,
                                  ws, got, gs);
                    }
            }
    ck_assert_msg(n_mismatch == before,
                  "%s: %llu of %llu add/sub/mul/div results differ from MPFR",
                  f->name, n_mismatch - before, n_checked - checked);
}
END_TEST

START_TEST(test_sqrt)
{
    const emu_format *f = small[_i];
    uint64_t bits[256];
    double v[256];
    size_t n = patterns(f, bits, v);
    emu_rounding set[3];
    int nset = settings(f, set);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (int s = 0; s < nset; s++)
        for (int m = 0; m < TEST_DET_MODES; m++) {
            emu_rounding r = set[s];
            r.mode = (emu_rnd)m;
            for (size_t i = 0; i < n; i++) {
                emu_status ws, gs;
                double want = emu_ref_sqrt(f, v[i], &r, &ws);
                double got = emu_sqrt(f, v[i], &r, &gs);
                check_one("sqrt", f, f, &r, 1, &bits[i], &v[i], want, ws, got,
                          gs);
            }
        }
    ck_assert_msg(n_mismatch == before,
                  "%s: %llu of %llu sqrt results differ from MPFR", f->name,
                  n_mismatch - before, n_checked - checked);
}
END_TEST

/* Every value of a small format into every format (binary16, bfloat16,
 * binary32, binary64 and the user formats included). */
START_TEST(test_convert)
{
    const emu_format *src = small[_i];
    uint64_t bits[256];
    double v[256];
    size_t n = patterns(src, bits, v);
    unsigned long long before = n_mismatch, checked = n_checked;

    for (size_t t = 0; t < n_targets; t++) {
        const emu_format *dst = targets[t];
        emu_rounding set[3];
        int nset = settings(dst, set);
        for (int s = 0; s < nset; s++)
            for (int m = 0; m < TEST_DET_MODES; m++) {
                emu_rounding r = set[s];
                r.mode = (emu_rnd)m;
                for (size_t i = 0; i < n; i++) {
                    emu_status ws, gs;
                    double want = emu_ref_convert(dst, v[i], &r, &ws);
                    double got = emu_convert(dst, v[i], &r, &gs);
                    check_one("convert", src, dst, &r, 1, &bits[i], &v[i],
                              want, ws, got, gs);
                }
            }
    }
    ck_assert_msg(n_mismatch == before,
                  "%s: %llu of %llu conversions differ from MPFR", src->name,
                  n_mismatch - before, n_checked - checked);
}
END_TEST

/* The suite must have met every shipped small format the brief names:
 * a registry that lost one would otherwise pass silently. */
START_TEST(test_coverage)
{
    static const char *const names[] = {
        "e5m2", "e4m3", "e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz",
        "e3m4", "e2m3", "e3m2",     "e2m1",     "e8m0",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const emu_format *f = test_format(names[i]);
        bool found = false;
        for (size_t j = 0; j < n_small; j++)
            found |= small[j] == f;
        ck_assert_msg(found, "format %s (%d bits) is not among the tested",
                      names[i], f->bits);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("mpfr_arith8");
    TCase *tc = tcase_create("exhaustive");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_coverage);
    tcase_add_loop_test(tc, test_binary_ops, 0, (int)n_small);
    tcase_add_loop_test(tc, test_sqrt, 0, (int)n_small);
    tcase_add_loop_test(tc, test_convert, 0, (int)n_small);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    collect_formats();
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    fprintf(stderr, "mpfr_arith8: %llu results checked, %llu mismatches\n",
            n_checked, n_mismatch);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
