/*
 * registry.c — the named formats: the embedded spec files of formats/, parsed once,
 * plus any spec files a user loads at run time.
 *
 * Names and aliases are one namespace, matched without regard to ASCII
 * case; a second format claiming a taken name is refused.  Loading is not
 * thread-safe with respect to concurrent lookups; lookups among themselves
 * are.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/format.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "embedded.h"
#include "internal.h"

enum { REGISTRY_MAX = 256 };

static emu_format registry[REGISTRY_MAX];
static size_t registry_len;
static once_flag registry_once = ONCE_FLAG_INIT;

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

static bool name_eq(const char *a, size_t alen, const char *b)
{
    size_t i = 0;
    for (; i < alen && b[i]; i++)
        if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
            return false;
    return i == alen && b[i] == '\0';
}

/* Does fmt answer to `name` (its name or one of its comma-separated
 * aliases)? */
static bool answers_to(const emu_format *fmt, const char *name)
{
    if (name_eq(fmt->name, strlen(fmt->name), name))
        return true;
    const char *s = fmt->aliases;
    while (*s) {
        while (*s == ' ' || *s == ',')
            s++;
        const char *e = s;
        while (*e && *e != ',')
            e++;
        size_t n = (size_t)(e - s);
        while (n && s[n - 1] == ' ')
            n--;
        if (n && name_eq(s, n, name))
            return true;
        s = e;
    }
    return false;
}

static const emu_format *lookup(const char *name)
{
    for (size_t i = 0; i < registry_len; i++)
        if (answers_to(&registry[i], name))
            return &registry[i];
    return NULL;
}

/* The first of fmt's names (name, then aliases) that is already taken;
 * *key says which key of the spec holds it. */
static const emu_format *clash(const emu_format *fmt, char *taken, size_t size,
                               const char **key)
{
    const emu_format *other = lookup(fmt->name);
    *key = "name";
    if (other) {
        snprintf(taken, size, "%s", fmt->name);
        return other;
    }
    *key = "aliases";
    char buf[sizeof fmt->aliases];
    snprintf(buf, sizeof buf, "%s", fmt->aliases);
    char *save = buf;
    for (char *a; (a = emu_next_token(&save, ", "));)
        if ((other = lookup(a))) {
            snprintf(taken, size, "%s", a);
            return other;
        }
    return NULL;
}

/* "ORIGIN:LINE" of the line of text that gives `key` (the spec parsed
 * without error, so the first "key =" line is the one), or ORIGIN. */
static void key_where(const char *text, const char *origin, const char *key,
                      char *where, size_t size)
{
    size_t klen = strlen(key);
    int lineno = 1;
    for (const char *s = text; *s; lineno++) {
        while (*s == ' ' || *s == '\t')
            s++;
        const char *t = s + klen;
        if (!strncmp(s, key, klen)) {
            while (*t == ' ' || *t == '\t')
                t++;
            if (*t == '=') {
                snprintf(where, size, "%s:%d", origin, lineno);
                return;
            }
        }
        s = strchr(s, '\n');
        if (!s)
            break;
        s++;
    }
    snprintf(where, size, "%s", origin);
}

/* A name of the form eXmY is also inline-spec syntax: "e5m7,bias=3" starts
 * from the registered e5m7 if there is one.  So a registered eXmY must
 * have X exponent and Y fraction bits, or inline specs would change
 * meaning with the registry. */
static bool widths_match_name(const emu_format *fmt)
{
    int e, m;
    char tail;
    if (sscanf(fmt->name, "e%dm%d%c", &e, &m, &tail) != 2 &&
        sscanf(fmt->name, "E%dM%d%c", &e, &m, &tail) != 2)
        return true;
    return e == fmt->ebits && m == fmt->mbits;
}

/* Registers fmt, parsed from `text` (for the line of a refused name). */
static int add(const emu_format *fmt, const char *text, const char *origin,
               emu_error *err)
{
    char where[256];
    if (!widths_match_name(fmt)) {
        key_where(text, origin, "name", where, sizeof where);
        return emu_fail(err, EMU_ESPEC, where, "name", "'%s' reads as an eXmY spec but "
                        "the format has %d exponent and %d fraction bits",
                        fmt->name, fmt->ebits, fmt->mbits);
    }
    char taken[EMU_NAME_MAX];
    const char *key;
    const emu_format *other = clash(fmt, taken, sizeof taken, &key);
    if (other) {
        key_where(text, origin, key, where, sizeof where);
        return emu_fail(err, EMU_ESTATE, where, key, "'%s' is already a registered "
                        "format (%s)", taken, other->name);
    }
    if (registry_len == REGISTRY_MAX)
        return emu_fail(err, EMU_ESTATE, origin, "", "registry full (%d formats)",
                        REGISTRY_MAX);
    registry[registry_len++] = *fmt;
    return 0;
}

static void load_embedded(void)
{
    EMU_HOSTFP_GUARD; /* the first emu_format_find may come from anywhere */
    for (size_t i = 0; i < emu_embedded_spec_count; i++) {
        const emu_embedded_spec *s = &emu_embedded_specs[i];
        emu_format fmt;
        emu_error err;
        if (emu_format_parse_file_text(&fmt, s->text, strlen(s->text), s->path,
                                       &err) == 0 &&
            add(&fmt, s->text, s->path, &err) == 0)
            continue;
        /* A broken embedded spec is a build defect: say so loudly; the
         * registry tests fail on the missing format. */
        char msg[600];
        emu_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "libemu: embedded format rejected: %s\n", msg);
    }
}

static void ensure_loaded(void)
{
    call_once(&registry_once, load_embedded);
}

size_t emu_format_count(void)
{
    ensure_loaded();
    return registry_len;
}

const emu_format *emu_format_at(size_t i)
{
    ensure_loaded();
    return i < registry_len ? &registry[i] : NULL;
}

const emu_format *emu_format_find(const char *name)
{
    ensure_loaded();
    return name ? lookup(name) : NULL;
}

/* Reads a whole spec file (at most 64 KiB: a spec is a dozen lines). */
static char *read_spec_file(const char *path, size_t *len, emu_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        emu_fail(err, EMU_EIO, path, "", "cannot open: %s", strerror(errno));
        return NULL;
    }
    enum { LIMIT = 65536 };
    char *buf = malloc(LIMIT + 1);
    size_t n = buf ? fread(buf, 1, LIMIT + 1, fp) : 0;
    int bad = !buf || ferror(fp);
    fclose(fp);
    if (bad || n > LIMIT) {
        emu_fail(err, bad ? EMU_EIO : EMU_ESPEC, path, "", "%s",
                 bad ? "read error" : "larger than 64 KiB: not a spec file");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Parses the spec file at path; its text in *text_out (to free) if not
 * NULL. */
static int parse_path(emu_format *out, const char *path, char **text_out,
                      emu_error *err)
{
    size_t len;
    char *text = read_spec_file(path, &len, err);
    if (!text)
        return -1;
    int rc = emu_format_parse_file_text(out, text, len, path, err);
    if (text_out && rc == 0)
        *text_out = text;
    else
        free(text);
    return rc;
}

int emu_format_load_file(const char *path, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    ensure_loaded();
    emu_format fmt;
    char *text;
    if (parse_path(&fmt, path, &text, err))
        return -1;
    int rc = add(&fmt, text, path, err);
    free(text);
    return rc;
}

int emu_format_resolve(emu_format *out, const char *spec, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (spec && (emu_ends_with(spec, ".fmt") || strchr(spec, '/')))
        return parse_path(out, spec, NULL, err);
    return emu_format_parse_inline(out, spec, err);
}
