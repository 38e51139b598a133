/*
 * cmd_formats.c — `emu formats`: one row per registered format (the
 * embedded formats plus any --load'ed), as an aligned table for
 * people or CSV for scripts.
 */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

enum { COLS = 13, CELL = 200 };

static const char *const headers[COLS] = {
    "name", "aliases", "e/m/bias", "specials", "overflow", "p", "emin",
    "emax", "max", "min normal", "min subnormal", "epsilon", "finite",
};

/* Specials plus the spec's departures from the defaults, e.g. "fn,unsigned". */
static void specials_cell(const emu_format *f, char *buf, size_t size)
{
    snprintf(buf, size, "%s%s%s%s", emu_specials_name(f->specials),
             f->subnormals ? "" : ",nosub", f->is_signed ? "" : ",unsigned",
             f->has_zero ? "" : ",nozero");
}

static void row_cells(const emu_format *f, char cell[COLS][CELL])
{
    snprintf(cell[0], CELL, "%s", f->name);
    snprintf(cell[1], CELL, "%s", f->aliases[0] ? f->aliases : "-");
    snprintf(cell[2], CELL, "%d/%d/%d", f->ebits, f->mbits, f->bias);
    specials_cell(f, cell[3], CELL);
    snprintf(cell[4], CELL, "%s", emu_overflow_name(f->overflow));
    snprintf(cell[5], CELL, "%d", f->p);
    snprintf(cell[6], CELL, "%d", f->emin);
    snprintf(cell[7], CELL, "%d", f->emax);
    snprintf(cell[8], CELL, "%.6g", f->max);
    snprintf(cell[9], CELL, "%.6g", f->min_normal);
    if (f->subnormals)
        snprintf(cell[10], CELL, "%.6g", f->min_subnormal);
    else
        snprintf(cell[10], CELL, "-");
    snprintf(cell[11], CELL, "%.6g", f->epsilon);
    snprintf(cell[12], CELL, "%" PRIu64, f->finite_count);
}

static void print_table(void)
{
    size_t n = emu_format_count();
    int width[COLS];
    for (int c = 0; c < COLS; c++)
        width[c] = (int)strlen(headers[c]);
    char cell[COLS][CELL];
    for (size_t i = 0; i < n; i++) {
        row_cells(emu_format_at(i), cell);
        for (int c = 0; c < COLS; c++)
            if ((int)strlen(cell[c]) > width[c])
                width[c] = (int)strlen(cell[c]);
    }
    /* Text columns left-aligned, numbers right-aligned. */
    for (int c = 0; c < COLS; c++)
        printf(c < 5 ? "%-*s%s" : "%*s%s", width[c], headers[c],
               c + 1 < COLS ? "  " : "\n");
    for (size_t i = 0; i < n; i++) {
        row_cells(emu_format_at(i), cell);
        for (int c = 0; c < COLS; c++) {
            if (c + 1 == COLS)
                printf("%*s\n", width[c], cell[c]);
            else
                printf(c < 5 ? "%-*s  " : "%*s  ", width[c], cell[c]);
        }
    }
}

static void print_csv(void)
{
    puts("name,aliases,bits,ebits,mbits,bias,specials,overflow,subnormals,"
         "signed,zero,p,emin,emax,max,min_normal,min_subnormal,epsilon,"
         "finite_count");
    for (size_t i = 0; i < emu_format_count(); i++) {
        const emu_format *f = emu_format_at(i);
        cli_csv_text(f->name);
        putchar(',');
        cli_csv_text(f->aliases);
        printf(",%d,%d,%d,%d,%s,%s,%s,%s,%s,%d,%d,%d,%.17g,%.17g,",
               f->bits, f->ebits, f->mbits, f->bias,
               emu_specials_name(f->specials), emu_overflow_name(f->overflow),
               f->subnormals ? "yes" : "no", f->is_signed ? "yes" : "no",
               f->has_zero ? "yes" : "no", f->p, f->emin, f->emax, f->max,
               f->min_normal);
        if (f->subnormals)
            printf("%.17g", f->min_subnormal);
        printf(",%.17g,%" PRIu64 "\n", f->epsilon, f->finite_count);
    }
}

static void help(void)
{
    printf(
        "Usage: emu formats [--csv]\n"
        "\n"
        "Lists every registered format: the embedded ones and any added with\n"
        "the global option --load FILE.fmt.  Columns: exponent/fraction bits\n"
        "and bias, special-value encoding (ieee, fn, finite, fnuz, and\n"
        "nosub/unsigned/nozero where they apply), overflow rule, precision p,\n"
        "emin and emax (min normal = 2^emin), max, min normal, min subnormal\n"
        "('-' without subnormals), epsilon = 2^(1-p), finite bit patterns.\n"
        "\n"
        "  --csv   machine-readable output (full precision, one header line)\n"
        "\n"
        "Example: emu formats --csv > formats.csv\n");
}

int cmd_formats(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "csv", 0, false }, { "help", 'h', false }, { NULL, 0, false },
    };
    enum { OPT_CSV, OPT_HELP };
    bool csv = false;
    cli_parser p;
    cli_parser_init(&p, "formats", argc, argv);
    const char *val;
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o == OPT_HELP) {
            help();
            return CLI_EXIT_OK;
        }
        if (o == OPT_CSV)
            csv = true;
        else
            cli_usage_error("formats", "unexpected argument '%s'", val);
    }
    if (csv)
        print_csv();
    else
        print_table();
    return cli_stdout_status("formats");
}
