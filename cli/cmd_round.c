/*
 * cmd_round.c — `emu round FORMAT MODE VALUE...`: round numbers typed by a
 * person into a format and show the result, its pattern, the ternary value
 * and the flags.
 *
 * A decimal such as 0.1 is not a binary64, so converting it to a double
 * first would round twice.  Instead the string is read by MPFR and handed
 * to the choke point emu_round2() as an exact-enough pair hi + lo:
 *
 *   y  = the input rounded to odd at 110 bits (toward zero, then the last
 *        bit set if anything was lost),
 *   hi = y rounded to nearest binary64 (= the input rounded to nearest,
 *        since 110 >= 53 + 2),
 *   lo = (y - hi) rounded to odd at 53 bits (y - hi is exact in MPFR).
 *
 * Rounding to odd keeps the one fact a later rounding to fewer bits needs:
 * on which side of every shorter number the input lies, and whether it is
 * one.  So hi + lo compares with every point at which any format (p <= 53)
 * changes its decision — grid points, midpoints, zero — exactly as the
 * input does, and every deterministic mode rounds it as it would the exact
 * decimal.  Stochastic modes see the input to about 106 bits.  The pair
 * cannot be formed below 2^-1022, where binary64 itself has fewer bits:
 * there the input is first rounded to binary64's subnormal grid, and a
 * note says so.
 */
#include "cli.h"

#include <math.h>
#include <mpfr.h>
#include <stdlib.h>
#include <string.h>

enum { PARSE_OK, PARSE_COARSE, PARSE_BAD, PARSE_HUGE };

static void make_odd(mpfr_ptr x, int ternary)
{
    /* mpfr_min_prec is below the precision exactly when the last
     * significand bit is 0. */
    if (ternary != 0 && !mpfr_zero_p(x) &&
        mpfr_min_prec(x) < mpfr_get_prec(x)) {
        if (mpfr_sgn(x) > 0)
            mpfr_nextabove(x);
        else
            mpfr_nextbelow(x);
    }
}

/* The input as hi + lo (see the header comment). */
static int parse_value(const char *s, double *hi, double *lo)
{
    mpfr_t y, d, l;
    mpfr_init2(y, 110);
    mpfr_init2(d, 128);
    mpfr_init2(l, 53);
    char *end;
    int t = mpfr_strtofr(y, s, &end, 0, MPFR_RNDZ);
    int rc = PARSE_OK;
    *lo = 0.0;
    if (end == s || *end) {
        rc = PARSE_BAD;
    } else if (mpfr_nan_p(y)) {
        *hi = s[0] == '-' ? -NAN : NAN;
    } else if (mpfr_inf_p(y)) {
        *hi = mpfr_sgn(y) > 0 ? INFINITY : -INFINITY;
    } else {
        make_odd(y, t);
        *hi = mpfr_get_d(y, MPFR_RNDN);
        if (isinf(*hi)) {
            rc = PARSE_HUGE;
        } else {
            mpfr_sub_d(d, y, *hi, MPFR_RNDN); /* exact: y is within 57 bits of hi */
            make_odd(l, mpfr_set(l, d, MPFR_RNDZ));
            *lo = mpfr_get_d(l, MPFR_RNDZ);
            if (mpfr_cmp_d(l, *lo) != 0)
                rc = PARSE_COARSE;
            if (*hi == 0.0 && *lo == 0.0 && !mpfr_zero_p(y))
                rc = PARSE_COARSE;
        }
    }
    mpfr_clears(y, d, l, (mpfr_ptr)0);
    return rc;
}

static void help(void)
{
    printf(
        "Usage: emu round [options] FORMAT MODE VALUE...\n"
        "\n"
        "Rounds each VALUE into FORMAT and prints the result (decimal and hex\n"
        "float), its bit pattern, the ternary value (+1 result above the\n"
        "exact value, -1 below, 0 exact) and the flags raised.\n"
        "\n"
        "MODE: rne (nearest even), rna (nearest away), rz (toward zero),\n"
        "ru (up), rd (down), ro (round to odd), sr (stochastic, 64 random\n"
        "bits), srN (stochastic with N random bits, N = 1..64).\n"
        "\n"
        "VALUE: decimal or hex float in strtod syntax (1e-3, -0x1.8p-7), or\n"
        "inf, -inf, nan.  Decimal input is exact: it is read by MPFR and\n"
        "rounded once, never first converted to binary64 (0.1 rounds as the\n"
        "real number 1/10, not as the double nearest it).  Caveats: values\n"
        "below 2^-1022 in magnitude are first rounded to binary64's\n"
        "subnormal grid (a note says when that lost anything); stochastic\n"
        "modes see the input to about 106 bits; values that round to inf in\n"
        "binary64 (about 1.8e308 and beyond) are refused.\n"
        "\n"
        "Options:\n"
        "  --seed N            stochastic modes: the random stream (default 0);\n"
        "                      value i uses word i of stream 0 under seed N\n"
        "  --tiny before|after tininess detection for underflow (default after)\n"
        "  --saturate          overflow and +-inf give +-max whatever the format\n"
        "                      says (OCP OFP8 saturation mode)\n"
        "  --profile P         special values as ieee (default), ocp or riscv\n"
        "                      define them (default NaN, NaN sign and payload)\n"
        "\n"
        "Examples: emu round binary16 rne 1.00048828125\n"
        "          emu round e4m3 rne 470 1e6 --saturate\n"
        "          emu round bf16 sr --seed 7 0.1 0.1 0.1\n");
}

int cmd_round(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "seed", 0, true }, { "tiny", 0, true }, { "saturate", 0, false },
        { "help", 'h', false }, { "profile", 0, true }, { NULL, 0, false },
    };
    enum { OPT_SEED, OPT_TINY, OPT_SATURATE, OPT_HELP, OPT_PROFILE };
    emu_rounding r = { 0 };
    uint64_t seed = 0;
    const char *spec = NULL, *mode = NULL, *val;
    const char **values = calloc((size_t)argc + 1, sizeof *values);
    int nvalues = 0;
    cli_parser p;
    cli_parser_init(&p, "round", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        switch (o) {
        case OPT_HELP:
            help();
            free(values);
            return CLI_EXIT_OK;
        case OPT_SEED:
            seed = cli_parse_u64("round", "--seed", val);
            break;
        case OPT_TINY:
            cli_parse_tininess("round", val, &r);
            break;
        case OPT_SATURATE:
            r.saturate = true;
            break;
        case OPT_PROFILE:
            cli_parse_profile("round", val, &r);
            break;
        default:
            if (!spec)
                spec = val;
            else if (!mode)
                mode = val;
            else
                values[nvalues++] = val;
        }
    }
    if (!spec || !mode || !nvalues)
        cli_usage_error("round", "expected FORMAT MODE VALUE...");
    emu_format f;
    cli_resolve_format("round", "FORMAT", spec, &f);
    cli_parse_mode("round", mode, &r);
    emu_rng rng = emu_rng_make(seed, 0);
    r.rng = &rng;

    int status = CLI_EXIT_OK;
    printf("%-24s %-24s %-24s %-*s %8s  %s\n", "input", "result",
           "result (hex)", cli_hex_digits(f.bits) + 2, "bits", "ternary",
           "flags");
    for (int i = 0; i < nvalues; i++) {
        double hi, lo;
        switch (parse_value(values[i], &hi, &lo)) {
        case PARSE_BAD:
            cli_error("round", "VALUE '%s' is not a number (decimal, hex "
                      "float, inf or nan)", values[i]);
            status = CLI_EXIT_USAGE;
            continue;
        case PARSE_HUGE:
            cli_error("round", "VALUE '%s' is beyond binary64's range "
                      "(it rounds to inf in binary64): refused", values[i]);
            status = CLI_EXIT_USAGE;
            continue;
        case PARSE_COARSE:
            cli_error("round", "note: '%s' is below 2^-1022 and was first "
                      "rounded to binary64's subnormal grid", values[i]);
            break;
        default:
            break;
        }
        emu_status st;
        double x = emu_round2(&f, hi, lo, &r, &st);
        emu_bits b;
        char bits[CLI_NUM_MAX] = "-", dec[CLI_NUM_MAX], hf[CLI_NUM_MAX];
        char flags[128];
        if (emu_encode_in(&f, &r.profile, x, &b))
            cli_bits_hex(&f, b.v, bits, sizeof bits);
        cli_decimal(x, dec, sizeof dec);
        cli_hexfloat(x, hf, sizeof hf);
        emu_flags_string(st.flags, flags, sizeof flags);
        printf("%-24s %-24s %-24s %-*s %8d  %s\n", values[i], dec, hf,
               cli_hex_digits(f.bits) + 2, bits, st.ternary, flags);
    }
    free(values);
    int out = cli_stdout_status("round");
    return status != CLI_EXIT_OK ? status : out;
}
