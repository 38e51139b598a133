/*
 * cmd_info.c — `emu info FORMAT`: everything about one format that a
 * person checking a spec or an RTL design wants on one page: the spec,
 * the field layout, what the specials are, the derived constants and the
 * bit patterns of the notable values.
 */
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static void field_layout(const emu_format *f)
{
    int top = f->bits - 1;
    printf("%-16s%d bits:", "layout", f->bits);
    if (f->is_signed)
        printf(" sign [%d] |", top--);
    printf(" exponent [%d:%d] (%d bits, bias %d)", top, top - f->ebits + 1,
           f->ebits, f->bias);
    if (f->mbits)
        printf(" | fraction [%d:0] (%d bits)", f->mbits - 1, f->mbits);
    printf("\n%-16s%s", "", f->is_signed ? "S " : "");
    for (int i = 0; i < f->ebits; i++)
        putchar('E');
    if (f->mbits)
        putchar(' ');
    for (int i = 0; i < f->mbits; i++)
        putchar('M');
    putchar('\n');
}

static void describe_specials(const emu_format *f)
{
    const char *label = "specials";
    switch (f->specials) {
    case EMU_SPECIALS_IEEE:
        printf("%-16sieee: exponent all ones is inf (fraction 0) or NaN\n"
               "%-16s(quiet if the fraction's top bit is set, signaling "
               "otherwise)\n", label, "");
        break;
    case EMU_SPECIALS_FN:
        if (f->mbits)
            printf("%-16sfn: no infinities; NaN only where exponent and "
                   "fraction are all ones\n", label);
        else
            printf("%-16sfn: no infinities; the all-ones exponent is NaN\n",
                   label);
        break;
    case EMU_SPECIALS_FINITE:
        printf("%-16sfinite: no infinities, no NaN; every pattern is a "
               "number\n", label);
        break;
    case EMU_SPECIALS_FNUZ:
        printf("%-16sfnuz: no infinities, no negative zero; the one NaN is "
               "sign 1 with all else 0\n", label);
        break;
    default:
        break;
    }
    if (f->subnormals)
        printf("%-16syes: exponent field 0 holds 0.f x 2^emin\n", "subnormals");
    else if (f->has_zero)
        printf("%-16sno: exponent field 0 reads as zero, results below "
               "2^emin flush to zero\n", "subnormals");
    else
        printf("%-16sno, and no zero: exponent field 0 is the binade "
               "2^emin\n", "subnormals");
    if (!f->is_signed)
        printf("%-16sunsigned: no sign bit, negative values are invalid\n",
               "sign");
    static const char *const overflow_text[EMU_OVERFLOW_COUNT] = {
        [EMU_OVERFLOW_INF] = "inf: beyond max gives inf or max by rounding "
                             "direction (IEEE 754)",
        [EMU_OVERFLOW_SATURATE] = "saturate: beyond max gives +-max",
        [EMU_OVERFLOW_NAN] = "nan: beyond max gives NaN where IEEE gives "
                             "inf; max in directed modes",
    };
    printf("%-16s%s\n", "overflow", overflow_text[f->overflow]);
    emu_bits nan;
    if (emu_nan_bits(f, &nan)) {
        char hex[CLI_NUM_MAX], fields[80];
        cli_bits_hex(f, nan.v, hex, sizeof hex);
        cli_bits_fields(f, nan.v, fields, sizeof fields);
        printf("%-16s%s  %s\n", "canonical NaN", hex, fields);
    } else {
        printf("%-16snone: a NaN result is encoded as +0 with the invalid "
               "flag\n", "canonical NaN");
    }
}

static void constant(const char *label, double x)
{
    char dec[CLI_NUM_MAX], hex[CLI_NUM_MAX];
    cli_decimal(x, dec, sizeof dec);
    cli_hexfloat(x, hex, sizeof hex);
    printf("%-16s%-24s %s\n", label, dec, hex);
}

static void constants(const emu_format *f)
{
    printf("%-16s%d\n", "precision p", f->p);
    printf("%-16s%d\n", "emin", f->emin);
    printf("%-16s%d\n", "emax", f->emax);
    constant("max", f->max);
    constant("min normal", f->min_normal);
    if (f->subnormals)
        constant("min subnormal", f->min_subnormal);
    constant("epsilon", f->epsilon);
    constant("unit roundoff", f->unit_roundoff);
    printf("%-16s%" PRIu64 "\n", "finite patterns", f->finite_count);
    printf("%-16s%s\n", "tensor carrier", f->fits_carrier
           ? "yes: every value is a binary32"
           : "no: scalar (binary64) rounding only");
}

static void value_row(const emu_format *f, const char *label, double x)
{
    emu_bits b;
    if (!emu_encode(f, x, &b))
        return;
    char hex[CLI_NUM_MAX], fields[80], dec[CLI_NUM_MAX], hf[CLI_NUM_MAX];
    cli_bits_hex(f, b.v, hex, sizeof hex);
    cli_bits_fields(f, b.v, fields, sizeof fields);
    cli_decimal(x, dec, sizeof dec);
    cli_hexfloat(x, hf, sizeof hf);
    printf("  %-15s %-*s %-*s %-24s %s\n", label, cli_hex_digits(f->bits) + 2,
           hex, f->bits + 2, fields, dec, hf);
}

static void special_values(const emu_format *f)
{
    printf("\nnotable values:\n");
    if (f->has_zero) {
        value_row(f, "+0", 0.0);
        if (f->is_signed && f->specials != EMU_SPECIALS_FNUZ)
            value_row(f, "-0", -0.0);
    }
    if (f->subnormals) {
        value_row(f, "min subnormal", f->min_subnormal);
        value_row(f, "max subnormal", f->min_normal - f->min_subnormal);
    }
    value_row(f, "min normal", f->min_normal);
    if (1.0 <= f->max && 1.0 >= f->min_normal) {
        value_row(f, "1", 1.0);
        value_row(f, "1 + epsilon", 1.0 + f->epsilon);
        if (f->mbits > 0)
            value_row(f, "1 - epsilon/2", 1.0 - f->epsilon / 2);
    }
    value_row(f, "max", f->max);
    if (f->is_signed)
        value_row(f, "-max", -f->max);
    if (f->has_inf) {
        value_row(f, "+inf", INFINITY);
        value_row(f, "-inf", -INFINITY);
    }
    if (f->has_nan)
        value_row(f, "NaN", NAN);
}

/* The first line: the format's name, or for a .fmt file its path and the
 * name it declares (which may be a registered name for another format:
 * the title must not pass the file off as the built-in). */
static void title(const emu_format *f, const char *spec, const char *canon)
{
    /* The rule of emu_format_resolve for "this is a file". */
    size_t n = strlen(spec);
    bool file = (n > 4 && !strcmp(spec + n - 4, ".fmt")) || strchr(spec, '/');
    if (file)
        printf("%s: declares '%s'", spec, f->name);
    else
        printf("%s", f->name);
    if (f->aliases[0])
        printf("  (aliases: %s)", f->aliases);
    putchar('\n');
    const emu_format *reg = file ? emu_format_find(f->name) : NULL;
    char reg_canon[256];
    if (reg) {
        emu_format_spec_string(reg, reg_canon, sizeof reg_canon);
        if (strcmp(reg_canon, canon))
            printf("(not the registered %s, which is %s)\n", reg->name,
                   reg_canon);
    }
}

static void help(void)
{
    printf(
        "Usage: emu [--load FILE.fmt]... info FORMAT\n"
        "\n"
        "Prints the spec of a format, its field layout, what its special\n"
        "encodings mean, the canonical NaN pattern, the derived constants\n"
        "and the bit patterns of its notable values.\n"
        "\n"
        "FORMAT is a registered name or alias, an inline spec such as\n"
        "'e5m10,bias=14' or 'e4m3,nosubnormals,saturate', or a .fmt file.\n"
        "Inline items: bias=N, specials=ieee|fn|finite|fnuz, overflow=inf|\n"
        "saturate|nan, subnormals=yes|no, signed=yes|no, zero=yes|no, and\n"
        "the flags nosubnormals (ftz), saturate, unsigned, nozero, ieee, fn,\n"
        "finite, fnuz.\n"
        "\n"
        "Examples: emu info e4m3\n"
        "          emu info 'e3m4,bias=5,fn'\n"
        "          emu --load my.fmt info myformat\n");
}

int cmd_info(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "help", 'h', false }, { NULL, 0, false },
    };
    const char *spec = NULL, *val;
    cli_parser p;
    cli_parser_init(&p, "info", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o != CLI_ARG_POSITIONAL) {
            help();
            return CLI_EXIT_OK;
        }
        if (spec)
            cli_usage_error("info", "one FORMAT only (got '%s' and '%s')",
                            spec, val);
        spec = val;
    }
    if (!spec)
        cli_usage_error("info", "missing FORMAT");
    emu_format f;
    cli_resolve_format("info", "FORMAT", spec, &f);

    char canon[256];
    emu_format_spec_string(&f, canon, sizeof canon);
    title(&f, spec, canon);
    if (f.description[0])
        printf("%s\n", f.description);
    printf("\n%-16s%s\n", "spec", canon);
    field_layout(&f);
    describe_specials(&f);
    putchar('\n');
    constants(&f);
    special_values(&f);
    return cli_stdout_status("info");
}
