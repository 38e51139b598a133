/*
 * header.c — reading the "#! emu-vectors" / "#! emu-dot" settings lines
 * (see header.h): items, duplicates, unknown keys, and where each came
 * from.
 */
#include "header.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_header_init(cli_header *h, const char *tag, const char *const *keys,
                     const char *file)
{
    memset(h, 0, sizeof *h);
    h->tag = tag;
    h->keys = keys;
    h->file = file;
}

static int key_index(const cli_header *h, const char *key, size_t n)
{
    for (int i = 0; h->keys[i]; i++)
        if (strlen(h->keys[i]) == n && !memcmp(h->keys[i], key, n))
            return i;
    return -1;
}

static void known_keys(const cli_header *h, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; h->keys[i] && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s",
                                 i ? " " : "", h->keys[i]);
}

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* One item "key=value" of `n` bytes at s. */
static int read_item(cli_header *h, const char *s, size_t n,
                     unsigned long lineno, char *why, size_t why_size)
{
    const char *eq = memchr(s, '=', n);
    if (!eq || eq == s) {
        snprintf(why, why_size, "%s:%lu: header item '%.*s' is not key=value",
                 h->file, lineno, (int)(n > 60 ? 60 : n), s);
        return -1;
    }
    size_t klen = (size_t)(eq - s), vlen = n - klen - 1;
    int k = key_index(h, s, klen);
    if (k < 0) {
        char known[160];
        known_keys(h, known, sizeof known);
        snprintf(why, why_size, "%s:%lu: header key '%.*s' is unknown (%s "
                 "holds: %s)", h->file, lineno, (int)(klen > 40 ? 40 : klen),
                 s, h->tag, known);
        return -1;
    }
    if (h->line[k] == lineno) {
        snprintf(why, why_size, "%s:%lu: header key '%s' given twice on the "
                 "line", h->file, lineno, h->keys[k]);
        return -1;
    }
    if (h->line[k]) {
        snprintf(why, why_size, "%s:%lu: header key '%s' given twice (first "
                 "at line %lu)", h->file, lineno, h->keys[k], h->line[k]);
        return -1;
    }
    if (vlen == 0 || vlen >= CLI_HEADER_VALUE_MAX) {
        snprintf(why, why_size, "%s:%lu: header key '%s': %s value",
                 h->file, lineno, h->keys[k], vlen ? "overlong" : "empty");
        return -1;
    }
    memcpy(h->value[k], eq + 1, vlen);
    h->value[k][vlen] = '\0';
    h->line[k] = lineno;
    return 0;
}

int cli_header_read(cli_header *h, const char *line, size_t len,
                    unsigned long lineno, char *why, size_t why_size)
{
    size_t i = 0, tag = strlen(h->tag);
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (len - i < tag || memcmp(line + i, h->tag, tag))
        return 0;
    i += tag;
    if (i < len && !blank(line[i])) /* "#! emu-vectorsX" is a comment */
        return 0;
    if (memchr(line, '\0', len)) {
        snprintf(why, why_size, "%s:%lu: NUL byte in the header", h->file,
                 lineno);
        return -1;
    }
    while (i < len) {
        while (i < len && blank(line[i]))
            i++;
        size_t start = i;
        while (i < len && !blank(line[i]))
            i++;
        if (i > start && read_item(h, line + start, i - start, lineno, why,
                                   why_size))
            return -1;
    }
    return 1;
}

const char *cli_header_get(const cli_header *h, const char *key, char *where,
                           size_t where_size)
{
    int k = key_index(h, key, strlen(key));
    if (k < 0 || !h->line[k])
        return NULL;
    if (where)
        snprintf(where, where_size, "%s:%lu: header key '%s'", h->file,
                 h->line[k], key);
    return h->value[k];
}

bool cli_text_u64(const char *s, unsigned long long *out)
{
    /* strtoull would accept "-1" as 2^64 - 1 and skip leading blanks. */
    if (!isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    char *end;
    *out = strtoull(s, &end, 0);
    return !errno && !*end;
}

bool cli_text_yes_no(const char *s, bool *out)
{
    if (strcmp(s, "yes") && strcmp(s, "no"))
        return false;
    *out = s[0] == 'y';
    return true;
}
