/*
 * test_cli_round.c — `emu round` on inputs outside binary64's range,
 * against MPFR.
 *
 * The CLI reads a decimal through MPFR and used to pass it to the choke
 * point as a pair of doubles, which cannot hold 0x1p-2000 (it became 0:
 * exact, no flags), 1e-320 (rounded to binary64's grid first) or 1e400
 * (refused).  Here every deterministic mode, several formats, saturation
 * and tininess-before are checked: the program (path compiled in as
 * EMU_PROGRAM) is run and each printed row compared with the oracle
 * emu_ref_round on the value read by MPFR at 4096 bits.
 */
#define _POSIX_C_SOURCE 200809L

#include <check.h>
#include <math.h>
#include <mpfr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/emu.h>
#include <emu/ref.h>

#include "testutil.h"

/* Outside binary64's normal range, both signs, ties and near-ties of
 * binary64's subnormal grid (0x1.8p-1074 is the tie between 2^-1074 and
 * 2^-1073; 2.47...e-324 straddle 2^-1075, half the smallest subnormal). */
static const char *const values[] = {
    "0x1p-2000", "-0x1p-2000", "1e-320", "-1e-320", "1e-400", "-1e-400",
    "1e400", "-1e400", "0x1.8p-1074", "-0x1.8p-1074", "0x1.0000001p-1074",
    "2.4703282292062327e-324", "2.4703282292062328e-324", "1e-310",
    "0x1.fffffffffffff8p-1023", "3e-308", "1e-99999999999",
};
static const char *const formats[] = {
    "binary64", "binary32", "binary16", "bfloat16", "e4m3", "e5m2",
    "e4m3fnuz", "e2m1", "e8m0", "dlfloat",
};
static const char *const modes[] = { "rne", "rna", "rz", "ru", "rd", "ro" };
static const char *const options[] = { "", "--saturate", "--tiny before" };

enum { NV = sizeof values / sizeof *values };

static void expected(const emu_format *f, const char *s, const emu_rounding *r,
                     double *v, emu_status *st)
{
    mpfr_t x;
    mpfr_init2(x, 4096);
    char *end;
    mpfr_strtofr(x, s, &end, 0, MPFR_RNDN);
    ck_assert(*end == '\0');
    /* 1e-99999999999 is below MPFR's default range too: any tiny value
     * of its sign rounds the same into every format. */
    if (mpfr_zero_p(x))
        mpfr_set_si_2exp(x, s[0] == '-' ? -1 : 1, -100000, MPFR_RNDN);
    *v = emu_ref_round(f, x, r, st);
    mpfr_clear(x);
}

static void check_row(const emu_format *f, const char *mode, const char *opt,
                      const char *row, const char *value,
                      const emu_rounding *r)
{
    char in[128], dec[128], hex[128], bits[128], flags[128];
    int ternary;
    ck_assert_msg(sscanf(row, "%127s %127s %127s %127s %d %127s", in, dec,
                         hex, bits, &ternary, flags) == 6,
                  "emu round %s %s %s: unreadable row '%s'", f->name, mode,
                  opt, row);
    ck_assert_str_eq(in, value);
    double v;
    emu_status st;
    expected(f, value, r, &v, &st);
    emu_bits b;
    char want_bits[64] = "-", want_flags[128];
    if (emu_encode(f, v, &b))
        snprintf(want_bits, sizeof want_bits, "0x%0*llx", (f->bits + 3) / 4,
                 (unsigned long long)b.v);
    emu_flags_string(st.flags, want_flags, sizeof want_flags);
    ck_assert_msg(!strcmp(bits, want_bits) && ternary == st.ternary &&
                      !strcmp(flags, want_flags),
                  "emu round %s %s %s %s: got %s ternary %d %s, MPFR says "
                  "%s ternary %d %s", opt, f->name, mode, value, bits, ternary,
                  flags, want_bits, st.ternary, want_flags);
}

/* One run of the program per format, mode and option set, all values at
 * once; each printed row against the oracle. */
START_TEST(test_out_of_binary64_range)
{
    const emu_format *f = test_format(formats[_i]);
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        for (size_t o = 0; o < sizeof options / sizeof *options; o++) {
            emu_rounding r = { 0 };
            ck_assert(emu_rnd_parse(modes[m], &r.mode, &r.sr_bits) == 0);
            r.saturate = strstr(options[o], "saturate") != NULL;
            r.tininess = strstr(options[o], "before") ? EMU_TINY_BEFORE
                                                      : EMU_TINY_AFTER;
            char cmd[4096];
            int n = snprintf(cmd, sizeof cmd, "'%s' round %s %s %s --",
                             EMU_PROGRAM, options[o], f->name, modes[m]);
            for (int i = 0; i < NV; i++)
                n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %s", values[i]);
            FILE *p = popen(cmd, "r");
            ck_assert(p);
            char row[512];
            int got = 0;
            ck_assert(fgets(row, sizeof row, p)); /* the column titles */
            while (got < NV && fgets(row, sizeof row, p))
                check_row(f, modes[m], options[o], row, values[got++], &r);
            int status = pclose(p);
            ck_assert_msg(got == NV && status == 0, "%s: %d rows, status %d",
                          cmd, got, status);
        }
    }
}
END_TEST

/* The case of the issue, said plainly: 1e-320 rounded up into binary64 is
 * the subnormal just above it, inexact and underflowing. */
START_TEST(test_1e320_up_is_the_next_subnormal)
{
    FILE *p = popen("'" EMU_PROGRAM "' round binary64 ru 1e-320", "r");
    ck_assert(p);
    char row[512], in[64], dec[64], hex[64], bits[64], flags[128];
    int ternary;
    ck_assert(fgets(row, sizeof row, p) && fgets(row, sizeof row, p));
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_int_eq(sscanf(row, "%63s %63s %63s %63s %d %127s", in, dec, hex,
                            bits, &ternary, flags), 6);
    double got = strtod(hex, NULL);
    mpfr_t x;
    mpfr_init2(x, 4096);
    mpfr_set_str(x, "1e-320", 10, MPFR_RNDN);
    ck_assert(mpfr_cmp_d(x, got) < 0);
    ck_assert(mpfr_cmp_d(x, nextafter(got, 0.0)) > 0);
    ck_assert(got == mpfr_get_d(x, MPFR_RNDU));
    mpfr_clear(x);
    ck_assert_int_eq(ternary, 1);
    ck_assert_str_eq(flags, "inexact|underflow|subnormal");
}
END_TEST

static Suite *cli_round_suite(void)
{
    Suite *s = suite_create("cli_round");
    TCase *tc = tcase_create("exact_input");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_out_of_binary64_range, 0,
                        (int)(sizeof formats / sizeof *formats));
    tcase_add_test(tc, test_1e320_up_is_the_next_subnormal);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cli_round_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
