/*
 * util.c — the helpers every subcommand of `emu` uses (see cli.h): option
 * parsing, error messages, argument parsers and value printers.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- options ----------------------------------------------------------- */

void cli_parser_init(cli_parser *p, const char *cmd, int argc, char **argv)
{
    p->cmd = cmd;
    p->argc = argc;
    p->argv = argv;
    p->next = 0;
    p->positional_only = false;
}

static bool ieq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    return *a == *b;
}

/* "-470", "-.5", "-inf", "-nan", "-0x1p-3": numbers, not options. */
static bool looks_negative_number(const char *s)
{
    if (s[0] != '-')
        return false;
    if (isdigit((unsigned char)s[1]) || s[1] == '.')
        return true;
    return ieq(s + 1, "inf") || ieq(s + 1, "infinity") || ieq(s + 1, "nan");
}

int cli_next(cli_parser *p, const cli_opt *opts, const char **value)
{
    if (p->next >= p->argc)
        return CLI_ARG_END;
    const char *arg = p->argv[p->next++];
    *value = arg;
    if (p->positional_only || arg[0] != '-' || arg[1] == '\0' ||
        looks_negative_number(arg))
        return CLI_ARG_POSITIONAL;
    if (!strcmp(arg, "--")) {
        p->positional_only = true;
        return cli_next(p, opts, value);
    }

    const char *name = NULL, *inline_value = NULL;
    size_t name_len = 0;
    char short_name = 0;
    if (arg[1] == '-') {
        name = arg + 2;
        const char *eq = strchr(name, '=');
        name_len = eq ? (size_t)(eq - name) : strlen(name);
        inline_value = eq ? eq + 1 : NULL;
    } else if (arg[2] == '\0') {
        short_name = arg[1];
    } else {
        cli_usage_error(p->cmd, "unknown option '%s'", arg);
    }

    for (int i = 0; opts[i].name; i++) {
        bool match = name ? strlen(opts[i].name) == name_len &&
                            !strncmp(opts[i].name, name, name_len)
                          : short_name && opts[i].short_name == short_name;
        if (!match)
            continue;
        if (!opts[i].takes_value) {
            if (inline_value)
                cli_usage_error(p->cmd, "option --%s takes no value",
                                opts[i].name);
            *value = NULL;
            return i;
        }
        if (inline_value) {
            *value = inline_value;
        } else if (p->next < p->argc) {
            *value = p->argv[p->next++];
        } else {
            cli_usage_error(p->cmd, "option %s needs a value", arg);
        }
        return i;
    }
    cli_usage_error(p->cmd, "unknown option '%s'", arg);
}

/* ---- errors ------------------------------------------------------------ */

static void vreport(const char *cmd, const char *fmt, va_list ap)
{
    fprintf(stderr, "emu%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

_Noreturn void cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try 'emu %s%s--help' for more information.\n",
            cmd ? cmd : "", cmd ? " " : "");
    exit(CLI_EXIT_USAGE);
}

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, fmt, ap);
    va_end(ap);
}

/* ---- argument parsers --------------------------------------------------- */

bool cli_load_format_file(const char *path)
{
    emu_error err;
    if (emu_format_load_file(path, &err) == 0)
        return true;
    char msg[600];
    emu_error_format(&err, msg, sizeof msg);
    cli_error(NULL, "--load: %s", msg);
    return false;
}

void cli_resolve_format(const char *cmd, const char *what, const char *spec,
                        emu_format *out)
{
    emu_error err;
    if (emu_format_resolve(out, spec, &err) == 0)
        return;
    char msg[600];
    emu_error_format(&err, msg, sizeof msg);
    cli_error(cmd, "%s: %s", what, msg);
    exit(CLI_EXIT_USAGE);
}

uint64_t cli_parse_u64(const char *cmd, const char *opt, const char *s)
{
    unsigned long long v;
    if (!cli_text_u64(s, &v))
        cli_usage_error(cmd, "%s: '%s' is not a non-negative integer below "
                        "2^64", opt, s);
    return (uint64_t)v;
}

void cli_parse_mode(const char *cmd, const char *s, emu_rounding *r)
{
    if (emu_rnd_parse(s, &r->mode, &r->sr_bits))
        cli_usage_error(cmd, "'%s' is not a rounding mode (rne rna rz ru rd "
                        "ro sr srN with N = 1..64)", s);
}

void cli_parse_tininess(const char *cmd, const char *s, emu_rounding *r)
{
    if (!strcmp(s, "after"))
        r->tininess = EMU_TINY_AFTER;
    else if (!strcmp(s, "before"))
        r->tininess = EMU_TINY_BEFORE;
    else
        cli_usage_error(cmd, "--tiny: '%s' is neither 'before' nor 'after'", s);
}

/* ---- printing ------------------------------------------------------------ */

int cli_hex_digits(int bits)
{
    return bits < 1 ? 1 : (bits + 3) / 4;
}

void cli_bits_hex(const emu_format *fmt, uint64_t v, char *buf, size_t size)
{
    snprintf(buf, size, "0x%0*llx", cli_hex_digits(fmt->bits),
             (unsigned long long)v);
}

void cli_bits_fields(const emu_format *fmt, uint64_t v, char *buf, size_t size)
{
    /* Widest case: 64 digits and two separators. */
    char tmp[80];
    size_t n = 0;
    for (int i = fmt->bits - 1; i >= 0; i--) {
        tmp[n++] = (char)('0' + ((v >> i) & 1));
        bool sign_end = fmt->is_signed && i == fmt->bits - 1;
        bool exp_end = i == fmt->mbits && fmt->mbits > 0;
        if (i > 0 && (sign_end || exp_end))
            tmp[n++] = ' ';
    }
    tmp[n] = '\0';
    snprintf(buf, size, "%s", tmp);
}

void cli_decimal(double x, char *buf, size_t size)
{
    if (isnan(x)) {
        snprintf(buf, size, "%snan", signbit(x) ? "-" : "");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, size, "%sinf", x < 0 ? "-" : "");
        return;
    }
    /* 17 significant digits always round-trip a binary64; most values of
     * small formats need far fewer. */
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

void cli_hexfloat(double x, char *buf, size_t size)
{
    if (isnan(x) || isinf(x))
        cli_decimal(x, buf, size);
    else
        snprintf(buf, size, "%a", x);
}

const char *cli_pattern_class(const emu_format *fmt, emu_bits b)
{
    emu_class c = emu_classify_bits(fmt, b);
    if (c == EMU_CLASS_NAN && fmt->specials == EMU_SPECIALS_IEEE)
        return emu_is_signaling(fmt, b) ? "snan" : "qnan";
    return emu_class_name(c);
}

void cli_csv_text(const char *s)
{
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}
