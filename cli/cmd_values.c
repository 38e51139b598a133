/*
 * cmd_values.c — `emu values FORMAT`: every bit pattern of a small format
 * with its fields, exact value and class: the table a person checks a
 * format (or an RTL decoder) against, and the input of notebooks.
 */
#include "cli.h"

#include <string.h>

enum { VALUES_MAX_BITS = 16 };

static void help(void)
{
    printf(
        "Usage: emu values FORMAT [--csv]\n"
        "\n"
        "Prints every bit pattern of FORMAT (at most %d bits) in order: the\n"
        "pattern in hex, its sign/exponent/fraction fields, its exact value\n"
        "as a hex float (%%a) and as the shortest decimal that reads back\n"
        "exactly, and its class (zero subnormal normal inf qnan snan nan).\n"
        "Patterns a format without subnormals reads as zero show as zero.\n"
        "\n"
        "  --csv   comma-separated, one header line\n"
        "\n"
        "Example: emu values e4m3 | grep nan\n", VALUES_MAX_BITS);
}

int cmd_values(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "csv", 0, false }, { "help", 'h', false }, { NULL, 0, false },
    };
    enum { OPT_CSV, OPT_HELP };
    const char *spec = NULL, *val;
    bool csv = false;
    cli_parser p;
    cli_parser_init(&p, "values", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o == OPT_HELP) {
            help();
            return CLI_EXIT_OK;
        }
        if (o == OPT_CSV) {
            csv = true;
        } else if (spec) {
            cli_usage_error("values", "one FORMAT only (got '%s' and '%s')",
                            spec, val);
        } else {
            spec = val;
        }
    }
    if (!spec)
        cli_usage_error("values", "missing FORMAT");
    emu_format f;
    cli_resolve_format("values", "FORMAT", spec, &f);
    if (f.bits > VALUES_MAX_BITS)
        cli_usage_error("values", "%s has %d bits: listing its 2^%d patterns "
                        "is not useful (at most %d bits; see 'emu info %s')",
                        f.name, f.bits, f.bits, VALUES_MAX_BITS, spec);

    if (csv)
        puts("bits,sign,exponent,fraction,hex,decimal,class");
    else
        printf("%-*s  %-*s  %-24s %-24s %s\n", cli_hex_digits(f.bits) + 2,
               "bits", f.bits + 2, "fields", "value (hex)",
               "value (decimal)", "class");
    const uint64_t n = (uint64_t)1 << f.bits;
    for (uint64_t v = 0; v < n; v++) {
        emu_bits b = { v };
        double x = emu_decode(&f, b);
        char hex[CLI_NUM_MAX], fields[80], dec[CLI_NUM_MAX], hf[CLI_NUM_MAX];
        cli_bits_hex(&f, v, hex, sizeof hex);
        cli_bits_fields(&f, v, fields, sizeof fields);
        cli_decimal(x, dec, sizeof dec);
        cli_hexfloat(x, hf, sizeof hf);
        const char *cls = cli_pattern_class(&f, b);
        if (csv) {
            unsigned sign = f.is_signed ? (unsigned)(v >> (f.bits - 1)) : 0;
            uint64_t e = (v >> f.mbits) & (((uint64_t)1 << f.ebits) - 1);
            uint64_t m = v & (((uint64_t)1 << f.mbits) - 1);
            printf("%s,%u,%llu,%llu,%s,%s,%s\n", hex, sign,
                   (unsigned long long)e, (unsigned long long)m, hf, dec, cls);
        } else {
            printf("%s  %-*s  %-24s %-24s %s\n", hex, f.bits + 2, fields, hf,
                   dec, cls);
        }
    }
    return cli_stdout_status("values");
}
