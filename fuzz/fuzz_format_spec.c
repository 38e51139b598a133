/*
 * fuzz_format_spec.c — libFuzzer harness for the two spec parsers,
 * emu_format_parse_file_text() and emu_format_parse_inline(), fed the same
 * bytes.  Besides memory errors (ASan/UBSan) it checks what a parser that
 * said yes promises: the derived constants are consistent, and the
 * canonical spec string parses back to the same format.  Built by
 * fuzz/CMakeLists.txt; run by fuzz/run.sh.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const emu_format *f, const char *what)
{
    fprintf(stderr, "fuzz_format_spec: %s (format '%s': e%dm%d bias %d)\n",
            what, f->name, f->ebits, f->mbits, f->bias);
    abort();
}

static void check_error(const emu_error *err)
{
    char buf[700];
    emu_error_format(err, buf, sizeof buf);
    if (!memchr(err->where, '\0', sizeof err->where) ||
        !memchr(err->key, '\0', sizeof err->key) ||
        !memchr(err->message, '\0', sizeof err->message) || !err->message[0])
        abort();
}

static void check_format(const emu_format *f)
{
    if (f->bits != (f->is_signed ? 1 : 0) + f->ebits + f->mbits || f->bits > 64)
        fail(f, "bits is not sign + exponent + fraction");
    if (f->p != f->mbits + 1 || f->emin > f->emax)
        fail(f, "p or the exponent range is inconsistent");
    if (!(f->max > 0.0) || !isfinite(f->max) || !(f->min_normal > 0.0) ||
        !(f->min_subnormal > 0.0) || f->min_subnormal > f->min_normal ||
        f->min_normal > f->max)
        fail(f, "max, min normal and min subnormal are out of order");
    if (f->has_inf != (f->specials == EMU_SPECIALS_IEEE))
        fail(f, "has_inf disagrees with the specials");
    if (!emu_format_is_validated(f))
        fail(f, "a parsed format is not sealed");

    char spec[256];
    emu_format_spec_string(f, spec, sizeof spec);
    emu_format g;
    emu_error err;
    if (emu_format_parse_inline(&g, spec, &err))
        fail(f, "its canonical spec string is refused");
    if (g.ebits != f->ebits || g.mbits != f->mbits || g.bias != f->bias ||
        g.specials != f->specials || g.overflow != f->overflow ||
        g.subnormals != f->subnormals || g.is_signed != f->is_signed ||
        g.has_zero != f->has_zero)
        fail(f, "its canonical spec string parses to another format");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    emu_format f;
    emu_error err;
    if (emu_format_parse_file_text(&f, (const char *)data, size, "fuzz", &err) == 0)
        check_format(&f);
    else
        check_error(&err);

    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (emu_format_parse_inline(&f, s, &err) == 0)
        check_format(&f);
    else
        check_error(&err);
    free(s);
    return 0;
}
