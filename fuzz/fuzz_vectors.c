/*
 * fuzz_vectors.c — libFuzzer harness for the TestFloat line parser of the
 * CLI (cli/vectors.c), the code that reads files from outside: hardware
 * simulations, other people's generators.  The first three bytes choose a
 * layout (operand count, operand and result widths); the rest is split
 * into lines.  A line that parses must write back and parse again to the
 * same case; a line that does not must come with a message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vectors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_line(const vec_layout *lay, const char *line, size_t len)
{
    vec_case c, d;
    char why[160] = "";
    vec_status s = vec_parse_line(lay, line, len, &c, why, sizeof why);
    if (s == VEC_BAD) {
        if (!why[0] || !memchr(why, '\0', sizeof why))
            abort();
        return;
    }
    if (s != VEC_OK)
        return;
    if (c.flags > 0xff)
        abort();
    char buf[256];
    int n = vec_format_line(lay, &c, buf, sizeof buf);
    if (n < 0 || (size_t)n >= sizeof buf)
        abort();
    if (vec_parse_line(lay, buf, (size_t)n, &d, why, sizeof why) != VEC_OK ||
        memcmp(c.operand, d.operand, sizeof c.operand) || c.result != d.result ||
        c.flags != d.flags) {
        fprintf(stderr, "fuzz_vectors: '%s' does not parse back: %s\n", buf, why);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    vec_layout lay = { 1 + data[0] % VEC_MAX_OPERANDS, 1 + data[1] % 64,
                       1 + data[2] % 64 };
    const char *text = (const char *)data + 3;
    size_t len = size - 3, start = 0;
    for (size_t i = 0; i <= len; i++)
        if (i == len || text[i] == '\n') {
            check_line(&lay, text + start, i - start);
            start = i + 1;
        }
    return 0;
}
