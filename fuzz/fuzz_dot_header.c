/*
 * fuzz_dot_header.c — libFuzzer harness for the "#! emu-dot" header of
 * emu dot verify files (cli/header.c, cli/dotopts.c): RTL testbenches
 * write these, so anything may be in them.
 *
 * The input is split into lines, read as emu dot verify reads them.  A
 * line refused must come with a message naming the file and line; the
 * specs accepted go through the parsers emu dot resolves them with.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A spec that names a file (emu_format_resolve would open it: /dev/stdin
 * would hang the fuzzer); the header parser's part ends before it. */
static bool names_file(const char *spec)
{
    return spec && (strchr(spec, '/') || strstr(spec, ".fmt"));
}

static void check_why(const char *why, size_t size)
{
    if (!memchr(why, '\0', size) || strncmp(why, "fuzz:", 5))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    cli_header h;
    cli_header_init(&h, CLI_DOT_TAG, cli_dot_header_keys, "fuzz");
    char why[400] = "";
    unsigned long lineno = 0;
    for (size_t start = 0, i = 0; i <= size; i++) {
        if (i < size && text[i] != '\n')
            continue;
        if (cli_header_read(&h, text + start, i - start, ++lineno, why,
                            sizeof why) < 0) {
            check_why(why, sizeof why);
            return 0;
        }
        start = i + 1;
    }
    cli_dotopts d;
    memset(&d, 0, sizeof d);
    if (!cli_dot_from_header(&d, &h, why, sizeof why)) {
        check_why(why, sizeof why);
        return 0;
    }
    if (d.have_k && (d.k < 1 || d.k > CLI_DOT_MAX_K))
        abort();
    for (int i = 0; i < CLI_DOT_SPECS; i++)
        if (d.where[i][0] && strncmp(d.where[i], "fuzz:", 5))
            abort();
    /* What emu dot's finish() does with them, without exiting. */
    if (names_file(d.in_spec) || names_file(d.out_spec))
        return 0;
    emu_error err;
    if (d.in_spec)
        (void)emu_format_resolve(&d.in, d.in_spec, &err);
    if (d.out_spec)
        (void)emu_format_resolve(&d.out, d.out_spec, &err);
    if (d.accum_spec)
        (void)emu_accum_parse(&d.model, d.accum_spec, &err);
    if (d.mode_spec)
        (void)emu_rnd_parse(d.mode_spec, &d.rnd.mode, &d.rnd.sr_bits);
    return 0;
}
