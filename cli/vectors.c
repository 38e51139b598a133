/*
 * vectors.c — parsing and writing TestFloat-format vector lines (see
 * vectors.h).  Used by `emu gen`, `emu verify` and fuzz/fuzz_vectors.c;
 * it depends on nothing but the C library, so that a malformed file can
 * only ever produce a message.
 */
#include "vectors.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A field as it may be quoted in a message: at most 24 bytes, anything
 * unprintable shown as '?'. */
static void quote(const char *s, size_t n, char *out, size_t size)
{
    size_t k = 0;
    for (size_t i = 0; i < n && i < 24 && k + 4 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        out[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (n > 24 && k + 4 < size) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    if (size)
        out[k < size ? k : size - 1] = '\0';
}

/* One hexadecimal field (optional 0x, any number of leading zeros) whose
 * value must fit in `bits` bits.  Returns 0, or -1 with why filled in. */
static int parse_hex(const char *s, size_t n, int bits, const char *name,
                     uint64_t *out, char *why, size_t why_size)
{
    char shown[32];
    quote(s, n, shown, sizeof shown);
    size_t i = 0;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        i = 2;
    if (i == n) {
        snprintf(why, why_size, "%s '%s' has no hex digits", name, shown);
        return -1;
    }
    uint64_t v = 0;
    bool too_wide = false;
    for (; i < n; i++) {
        int d = hex_value(s[i]);
        if (d < 0) {
            snprintf(why, why_size, "%s '%s' is not hexadecimal", name, shown);
            return -1;
        }
        if (v >> 60)
            too_wide = true;
        v = v << 4 | (uint64_t)d;
    }
    if (too_wide || (bits < 64 && v >> bits)) {
        snprintf(why, why_size, "%s '%s' is wider than %d bit%s", name,
                 shown, bits, bits == 1 ? "" : "s");
        return -1;
    }
    *out = v;
    return 0;
}

vec_status vec_parse_line(const vec_layout *lay, const char *line, size_t len,
                          vec_case *out, char *why, size_t why_size)
{
    /* The comment and the blanks around the fields go first. */
    for (size_t i = 0; i < len; i++)
        if (line[i] == '#') {
            len = i;
            break;
        }
    while (len && (is_blank(line[len - 1]) || line[len - 1] == '\r'))
        len--;
    size_t pos = 0;
    while (pos < len && is_blank(line[pos]))
        pos++;
    if (pos == len)
        return VEC_SKIP;

    const int want = lay->operands + 2;
    const char *field[VEC_MAX_OPERANDS + 2];
    size_t flen[VEC_MAX_OPERANDS + 2];
    int nfields = 0;
    while (pos < len) {
        size_t start = pos;
        while (pos < len && !is_blank(line[pos]))
            pos++;
        if (nfields < want) {
            field[nfields] = line + start;
            flen[nfields] = pos - start;
        }
        nfields++;
        while (pos < len && is_blank(line[pos]))
            pos++;
    }
    if (nfields != want) {
        snprintf(why, why_size, "%d field%s, expected %d (%d operand%s, "
                 "result, flags)", nfields, nfields == 1 ? "" : "s", want,
                 lay->operands, lay->operands == 1 ? "" : "s");
        return VEC_BAD;
    }

    static const char *const names[VEC_MAX_OPERANDS] = {
        "operand A", "operand B", "operand C",
    };
    for (int i = 0; i < lay->operands; i++)
        if (parse_hex(field[i], flen[i], lay->operand_bits, names[i],
                      &out->operand[i], why, why_size))
            return VEC_BAD;
    for (int i = lay->operands; i < VEC_MAX_OPERANDS; i++)
        out->operand[i] = 0;
    int k = lay->operands;
    if (parse_hex(field[k], flen[k], lay->result_bits, "result",
                  &out->result, why, why_size))
        return VEC_BAD;
    uint64_t flags;
    if (parse_hex(field[k + 1], flen[k + 1], 8, "flags", &flags, why,
                  why_size))
        return VEC_BAD;
    out->flags = (unsigned)flags;
    return VEC_OK;
}

static int hex_digits(int bits)
{
    return bits < 1 ? 1 : (bits + 3) / 4;
}

int vec_format_line(const vec_layout *lay, const vec_case *c, char *buf,
                    size_t size)
{
    size_t used = 0;
    int n;
    for (int i = 0; i < lay->operands; i++) {
        n = snprintf(buf + used, used < size ? size - used : 0, "%0*llX ",
                     hex_digits(lay->operand_bits),
                     (unsigned long long)c->operand[i]);
        used += n > 0 ? (size_t)n : 0;
    }
    n = snprintf(buf + used, used < size ? size - used : 0, "%0*llX %02X",
                 hex_digits(lay->result_bits), (unsigned long long)c->result,
                 c->flags & 0xffu);
    used += n > 0 ? (size_t)n : 0;
    return (int)used;
}

int vec_read_line(FILE *fp, char **buf, size_t *cap, size_t *len)
{
    size_t n = 0;
    bool too_long = false;
    int c;
    while ((c = getc(fp)) != EOF && c != '\n') {
        if (n >= VEC_LINE_MAX) {
            too_long = true;
            continue;
        }
        if (n + 1 >= *cap) {
            size_t ncap = *cap ? 2 * *cap : 256;
            char *nb = realloc(*buf, ncap);
            if (!nb)
                return -1;
            *buf = nb;
            *cap = ncap;
        }
        (*buf)[n++] = (char)c;
    }
    if (ferror(fp))
        return -1;
    if (c == EOF && n == 0 && !too_long)
        return 0;
    if (!*buf) {
        *buf = malloc(1);
        if (!*buf)
            return -1;
        *cap = 1;
    }
    (*buf)[n] = '\0';
    *len = n;
    return too_long ? 2 : 1;
}
