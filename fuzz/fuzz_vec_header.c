/*
 * fuzz_vec_header.c — libFuzzer harness for the "#! emu-vectors" header
 * of emu gen/verify files (cli/header.c, cli/vecopts.c): the lines a
 * verify run reads before its first case, from files made by anyone.
 *
 * The input is split into lines, read as emu verify reads them.  A line
 * refused must come with a message that names the file and line; a header
 * accepted whose settings resolve must write back (as emu gen writes it)
 * into a header that reads to the same settings.
 */
#define _POSIX_C_SOURCE 200809L

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

/* Reads the lines of text as a header; false if refused. */
static bool read_header(cli_vecopts *v, const char *text, size_t len)
{
    cli_header h;
    cli_header_init(&h, CLI_VECTORS_TAG, cli_vecopts_header_keys, "fuzz");
    char why[400] = "";
    unsigned long lineno = 0;
    for (size_t start = 0, i = 0; i <= len; i++) {
        if (i < len && text[i] != '\n')
            continue;
        if (cli_header_read(&h, text + start, i - start, ++lineno, why,
                            sizeof why) < 0) {
            check_why(why, sizeof why);
            return false;
        }
        start = i + 1;
    }
    memset(v, 0, sizeof *v);
    if (!cli_vecopts_from_header(v, &h, why, sizeof why)) {
        check_why(why, sizeof why);
        return false;
    }
    return true;
}

/* What cli_vecopts_finish checks, without exiting. */
static bool resolve(cli_vecopts *v)
{
    emu_error err;
    if (names_file(v->in_spec) || names_file(v->out_spec))
        return false;
    return v->have_op && v->in_spec &&
           !emu_format_resolve(&v->in, v->in_spec, &err) &&
           !emu_format_resolve(&v->out, v->out_spec ? v->out_spec : v->in_spec,
                               &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_vecopts v, w;
    if (!read_header(&v, (const char *)data, size) || !resolve(&v))
        return 0;
    char buf[2048];
    FILE *fp = fmemopen(buf, sizeof buf, "w");
    if (!fp)
        abort();
    cli_vecopts_write_header(&v, fp);
    long n = ftell(fp);
    fclose(fp);
    if (n <= 0 || n >= (long)sizeof buf || !read_header(&w, buf, (size_t)n) ||
        !resolve(&w)) {
        fprintf(stderr, "fuzz_vec_header: '%.*s' does not read back\n",
                (int)(n > 0 ? n : 0), buf);
        abort();
    }
    if (w.op != v.op || w.rnd.mode != v.rnd.mode ||
        (v.rnd.mode == EMU_RS_BITS && w.rnd.sr_bits != v.rnd.sr_bits) ||
        w.rnd.tininess != v.rnd.tininess || w.rnd.saturate != v.rnd.saturate ||
        w.seed != v.seed || w.in.bits != v.in.bits || w.out.bits != v.out.bits ||
        w.in.bias != v.in.bias || w.out.bias != v.out.bias) {
        fprintf(stderr, "fuzz_vec_header: '%.*s' reads back differently\n",
                (int)n, buf);
        abort();
    }
    return 0;
}
