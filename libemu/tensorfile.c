/*
 * tensorfile.c — the safetensors layout (emu/tensorfile.h): a writer of
 * binary32 tensors, and a reader that checks every byte of a file before
 * it hands out a value.
 *
 * The JSON parser is written for exactly this schema, not for JSON in
 * general: an object of tensor entries ({"dtype", "shape",
 * "data_offsets"}, each once) and at most one "__metadata__" object of
 * strings.  It accepts what RFC 8259 allows in that shape (whitespace
 * anywhere between tokens, any escape, the keys in any order) and nothing
 * else: no other keys, no duplicates, no numbers but unsigned integers
 * without leading zeros, no invalid UTF-8 (overlong forms, surrogates),
 * no NUL in a string (names are C strings here).
 *
 * Byte order: every value is assembled from its bytes, so the file is
 * little-endian whatever the host.  Called by nn_weights.c (model
 * weights), the `emu weights` command and the PyTorch peer test.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/tensorfile.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[EMU_TF_DTYPE_COUNT] = {
    [EMU_TF_F32] = { "F32", 4 },
    [EMU_TF_F64] = { "F64", 8 },
    [EMU_TF_F16] = { "F16", 2 },
    [EMU_TF_BF16] = { "BF16", 2 },
};

/* The other dtypes of the safetensors format: well formed, not read here. */
static const char *const other_dtypes[] = {
    "BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64",
    "F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64", NULL,
};

const char *emu_tf_dtype_name(emu_tf_dtype d)
{
    return (unsigned)d < EMU_TF_DTYPE_COUNT ? dtypes[d].name : "?";
}

/* ---- UTF-8 --------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0 if it
 * is not one: overlong forms, surrogates and code points above U+10FFFF
 * are not. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(p + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

/* ---- the header's JSON -------------------------------------------------------- */

typedef struct parser {
    const unsigned char *p, *end;
    const unsigned char *start;   /* the header's first byte (file offset 8) */
    const char *file;
    emu_error *err;
} parser;

/* Fails with the file offset of the parser's position. */
static int bad(parser *ps, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int bad(parser *ps, const char *key, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return emu_fail(ps->err, EMU_EDATA, ps->file, key, "header, byte %zu: %s",
                    (size_t)(ps->p - ps->start) + 8, msg);
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
                               *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int expect(parser *ps, char c, const char *key, const char *what)
{
    skip_ws(ps);
    if (ps->p == ps->end)
        return bad(ps, key, "the header ends where %s was expected", what);
    if (*ps->p != (unsigned char)c) {
        unsigned char got = *ps->p;
        return bad(ps, key, "expected %s, found %s%c%s", what,
                   got >= 0x20 && got < 0x7f ? "'" : "byte 0x",
                   got >= 0x20 && got < 0x7f ? got : '?',
                   got >= 0x20 && got < 0x7f ? "'" : "");
    }
    ps->p++;
    return 0;
}

static int hex4(parser *ps, uint32_t *v)
{
    *v = 0;
    if (ps->end - ps->p < 4)
        return bad(ps, "header", "a \\u escape needs four hex digits");
    for (int i = 0; i < 4; i++) {
        int c = ps->p[i], d = c >= '0' && c <= '9'   ? c - '0'
                            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                   : -1;
        if (d < 0)
            return bad(ps, "header", "a \\u escape needs four hex digits");
        *v = *v << 4 | (uint32_t)d;
    }
    ps->p += 4;
    return 0;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A JSON string, decoded into a new NUL-terminated buffer (*out). */
static int parse_string(parser *ps, const char *key, char **out)
{
    *out = NULL;
    if (expect(ps, '"', key, "a string"))
        return -1;
    /* Decoding never lengthens: escapes shrink, raw bytes stay. */
    const unsigned char *q = ps->p;
    while (q < ps->end && *q != '"')
        q += *q == '\\' && q + 1 < ps->end ? 2 : 1;
    if (q >= ps->end)
        return bad(ps, key, "a string that does not end");
    char *s = malloc((size_t)(q - ps->p) + 1);
    if (!s)
        return emu_fail(ps->err, EMU_ENOMEM, ps->file, key, "out of memory");
    size_t n = 0;
    while (*ps->p != '"') {
        unsigned char c = *ps->p;
        if (c < 0x20) {
            free(s);
            return bad(ps, key, "a control character (0x%02x) in a string", c);
        }
        if (c != '\\') {
            size_t k = utf8_seq(ps->p, (size_t)(ps->end - ps->p));
            if (!k) {
                free(s);
                return bad(ps, key, "a string that is not UTF-8");
            }
            memcpy(s + n, ps->p, k);
            n += k;
            ps->p += k;
            continue;
        }
        ps->p++;
        c = *ps->p++;
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            static const char repl[] = "\"\\/\b\f\n\r\t";
            s[n++] = repl[simple - "\"\\/bfnrt"];
            continue;
        }
        if (c != 'u') {
            ps->p--;
            free(s);
            return bad(ps, key, "an unknown escape in a string");
        }
        uint32_t cp, lo;
        if (hex4(ps, &cp)) {
            free(s);
            return -1;
        }
        if (cp >= 0xdc00 && cp <= 0xdfff) {
            free(s);
            return bad(ps, key, "a lone low surrogate escape");
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                free(s);
                return bad(ps, key, "a high surrogate escape without its low half");
            }
            ps->p += 2;
            if (hex4(ps, &lo)) {
                free(s);
                return -1;
            }
            if (lo < 0xdc00 || lo > 0xdfff) {
                free(s);
                return bad(ps, key, "a high surrogate escape without its low half");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp == 0) {
            free(s);
            return bad(ps, key, "a NUL character (\\u0000) in a string");
        }
        n += put_utf8(s + n, cp);
    }
    ps->p++; /* the closing quote */
    s[n] = '\0';
    *out = s;
    return 0;
}

/* An unsigned integer without sign, fraction, exponent or leading zero. */
static int parse_uint(parser *ps, const char *key, uint64_t *v)
{
    skip_ws(ps);
    if (ps->p == ps->end || *ps->p < '0' || *ps->p > '9')
        return bad(ps, key, "expected an unsigned integer");
    if (*ps->p == '0' && ps->end - ps->p > 1 && ps->p[1] >= '0' && ps->p[1] <= '9')
        return bad(ps, key, "an integer with a leading zero");
    uint64_t x = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        unsigned d = (unsigned)(*ps->p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return bad(ps, key, "an integer above 2^64 - 1");
        x = x * 10 + d;
        ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
        return bad(ps, key, "expected an integer, found a fraction or exponent");
    *v = x;
    return 0;
}

/* '[' integers ']': at most max of them into v; *count. */
static int parse_uint_array(parser *ps, const char *key, uint64_t *v, int max,
                            int *count)
{
    *count = 0;
    if (expect(ps, '[', key, "'['"))
        return -1;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return 0;
    }
    for (;;) {
        uint64_t x = 0;
        if (parse_uint(ps, key, &x))
            return -1;
        if (*count == max)
            return bad(ps, key, "more than %d values", max);
        v[(*count)++] = x;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        return expect(ps, ']', key, "',' or ']'");
    }
}

/* One entry's fields, before they are checked against each other. */
typedef struct raw_entry {
    char *name;
    int dtype;                 /* -1 until read */
    int ndim;                  /* -1 until read */
    uint64_t shape[EMU_TF_MAX_DIMS];
    uint64_t begin, end;
    bool have_offsets;
    size_t header_at;          /* file offset of its name, for messages */
} raw_entry;

static int parse_entry(parser *ps, raw_entry *e)
{
    const char *nm = e->name;
    if (expect(ps, '{', "header", "'{' (a tensor's fields)"))
        return -1;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}')
        return bad(ps, "header", "tensor '%s': no dtype, shape or data_offsets",
                   nm);
    for (;;) {
        char *field;
        if (parse_string(ps, "header", &field))
            return -1;
        if (expect(ps, ':', "header", "':'")) {
            free(field);
            return -1;
        }
        int rc = 0;
        if (!strcmp(field, "dtype")) {
            char *d;
            if (e->dtype != -1)
                rc = bad(ps, "dtype", "tensor '%s': dtype given twice", nm);
            else if (!(rc = parse_string(ps, "dtype", &d))) {
                for (int k = 0; k < EMU_TF_DTYPE_COUNT; k++)
                    if (!strcmp(d, dtypes[k].name))
                        e->dtype = k;
                if (e->dtype == -1) {
                    bool known = false;
                    for (int k = 0; other_dtypes[k]; k++)
                        known |= !strcmp(d, other_dtypes[k]);
                    rc = emu_fail(ps->err, known ? EMU_EUNSUPPORTED : EMU_EDATA,
                                  ps->file, "dtype", "tensor '%s': dtype '%.32s' "
                                  "%s (F32, F64, F16, BF16 are)", nm, d,
                                  known ? "is not read by libemu"
                                        : "is no safetensors dtype");
                }
                free(d);
            }
        } else if (!strcmp(field, "shape")) {
            if (e->ndim != -1)
                rc = bad(ps, "shape", "tensor '%s': shape given twice", nm);
            else
                rc = parse_uint_array(ps, "shape", e->shape, EMU_TF_MAX_DIMS,
                                      &e->ndim);
        } else if (!strcmp(field, "data_offsets")) {
            uint64_t v[2];
            int k;
            if (e->have_offsets)
                rc = bad(ps, "data_offsets", "tensor '%s': data_offsets given "
                         "twice", nm);
            else if (!(rc = parse_uint_array(ps, "data_offsets", v, 2, &k))) {
                if (k != 2)
                    rc = bad(ps, "data_offsets", "tensor '%s': data_offsets "
                             "needs [begin, end]", nm);
                e->begin = v[0];
                e->end = v[1];
                e->have_offsets = true;
            }
        } else {
            rc = bad(ps, "header", "tensor '%s': unknown field '%.40s' (dtype, "
                     "shape, data_offsets)", nm, field);
        }
        free(field);
        if (rc)
            return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (expect(ps, '}', "header", "',' or '}'"))
            return -1;
        break;
    }
    const char *missing = e->dtype == -1 ? "dtype"
                          : e->ndim == -1 ? "shape"
                          : !e->have_offsets ? "data_offsets" : NULL;
    if (missing)
        return bad(ps, missing, "tensor '%s' has no %s", nm, missing);
    return 0;
}

/* What the header holds, before the data are looked at. */
typedef struct header {
    raw_entry *e;
    int n, cap;
    char **mk, **mv;
    int mn, mcap;
    bool have_meta;
} header;

static void header_free(header *h)
{
    for (int i = 0; i < h->n; i++)
        free(h->e[i].name);
    for (int i = 0; i < h->mn; i++) {
        free(h->mk[i]);
        free(h->mv[i]);
    }
    free(h->e);
    free(h->mk);
    free(h->mv);
    memset(h, 0, sizeof *h);
}

static int grow(void **p, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return 0;
    int c = *cap ? 2 * *cap : 16;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int parse_metadata(parser *ps, header *h)
{
    if (h->have_meta)
        return bad(ps, "__metadata__", "__metadata__ given twice");
    h->have_meta = true;
    if (expect(ps, '{', "__metadata__", "'{'"))
        return -1;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return 0;
    }
    for (;;) {
        char *k, *v;
        if (parse_string(ps, "__metadata__", &k))
            return -1;
        for (int i = 0; i < h->mn; i++)
            if (!strcmp(h->mk[i], k)) {
                free(k);
                return bad(ps, "__metadata__", "metadata key '%.60s' given twice",
                           h->mk[i]);
            }
        if (expect(ps, ':', "__metadata__", "':'") ||
            parse_string(ps, "__metadata__", &v)) {
            free(k);
            return -1;
        }
        int cap = h->mcap;
        if (grow((void **)&h->mk, &cap, h->mn, sizeof *h->mk) ||
            grow((void **)&h->mv, &h->mcap, h->mn, sizeof *h->mv)) {
            free(k);
            free(v);
            return emu_fail(ps->err, EMU_ENOMEM, ps->file, "__metadata__",
                            "out of memory");
        }
        h->mk[h->mn] = k;
        h->mv[h->mn++] = v;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        return expect(ps, '}', "__metadata__", "',' or '}'");
    }
}

static int parse_header(parser *ps, header *h)
{
    if (expect(ps, '{', "header", "'{'"))
        return -1;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
    } else {
        for (;;) {
            size_t at = (size_t)(ps->p - ps->start) + 8;
            char *name;
            if (parse_string(ps, "header", &name))
                return -1;
            if (expect(ps, ':', "header", "':'")) {
                free(name);
                return -1;
            }
            int rc;
            if (!strcmp(name, "__metadata__")) {
                free(name);
                rc = parse_metadata(ps, h);
            } else if (!name[0]) {
                free(name);
                rc = bad(ps, "header", "an empty tensor name");
            } else if (strlen(name) >= EMU_TF_NAME_MAX) {
                rc = bad(ps, "header", "a tensor name of %zu bytes (at most %d)",
                         strlen(name), EMU_TF_NAME_MAX - 1);
                free(name);
            } else if (grow((void **)&h->e, &h->cap, h->n, sizeof *h->e)) {
                free(name);
                rc = emu_fail(ps->err, EMU_ENOMEM, ps->file, "header",
                              "out of memory");
            } else {
                raw_entry *e = &h->e[h->n++];
                memset(e, 0, sizeof *e);
                e->name = name;
                e->dtype = e->ndim = -1;
                e->header_at = at;
                rc = parse_entry(ps, e);
            }
            if (rc)
                return -1;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (expect(ps, '}', "header", "',' or '}'"))
                return -1;
            break;
        }
    }
    skip_ws(ps);
    if (ps->p != ps->end)
        return bad(ps, "header", "bytes after the JSON object (only whitespace "
                   "may pad it)");
    return 0;
}

/* ---- the data ---------------------------------------------------------------- */

static double half_to_double(uint16_t h)
{
    int e = h >> 10 & 0x1f;
    double m = h & 0x3ff;
    double v = e == 0    ? ldexp(m, -24)
               : e == 31 ? (m ? NAN : INFINITY)
                         : ldexp(m + 1024.0, e - 25);
    return h & 0x8000 ? -v : v;
}

static double decode(const unsigned char *p, emu_tf_dtype d)
{
    uint64_t u = 0;
    for (size_t i = 0; i < dtypes[d].size; i++)
        u |= (uint64_t)p[i] << 8 * i;
    switch (d) {
    case EMU_TF_F32: return u2f((uint32_t)u);
    case EMU_TF_F64: return u2d(u);
    case EMU_TF_F16: return half_to_double((uint16_t)u);
    default: return u2f((uint32_t)u << 16); /* BF16 */
    }
}

/* "[i, j, k]" of flat index i in shape. */
static void index_text(char *buf, size_t size, size_t i, const size_t *shape,
                       int ndim)
{
    size_t idx[EMU_TF_MAX_DIMS];
    for (int k = ndim - 1; k >= 0; k--) {
        idx[k] = shape[k] ? i % shape[k] : 0;
        i = shape[k] ? i / shape[k] : 0;
    }
    size_t n = 0;
    n += (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < ndim && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%zu", k ? ", " : "", idx[k]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

static int cmp_offsets(const void *a, const void *b)
{
    const raw_entry *x = *(const raw_entry *const *)a;
    const raw_entry *y = *(const raw_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp((*(const raw_entry *const *)a)->name,
                  (*(const raw_entry *const *)b)->name);
}

/* Sizes against ranges, then the ranges against each other and the data. */
static int check_layout(header *h, size_t data_size, const char *file,
                        emu_error *err)
{
    for (int i = 0; i < h->n; i++) {
        raw_entry *e = &h->e[i];
        uint64_t n = 1;
        for (int k = 0; k < e->ndim; k++) {
            if (e->shape[k] && n > UINT64_MAX / e->shape[k])
                return emu_fail(err, EMU_EDATA, file, "shape", "tensor '%s': "
                                "the shape's element count overflows 64 bits",
                                e->name);
            n *= e->shape[k];
        }
        uint64_t sz = dtypes[e->dtype].size;
        /* values are held as doubles: at least as wide as any dtype */
        if (n > SIZE_MAX / sizeof(double))
            return emu_fail(err, EMU_EDATA, file, "shape", "tensor '%s': %" PRIu64
                            " elements: the byte size overflows", e->name, n);
        if (e->end < e->begin)
            return emu_fail(err, EMU_EDATA, file, "data_offsets", "tensor '%s': "
                            "[%" PRIu64 ", %" PRIu64 "] ends before it begins",
                            e->name, e->begin, e->end);
        if (e->end > data_size)
            return emu_fail(err, EMU_EDATA, file, "data_offsets", "tensor '%s': "
                            "[%" PRIu64 ", %" PRIu64 "] reaches past the data "
                            "(%zu bytes)", e->name, e->begin, e->end, data_size);
        if (e->end - e->begin != n * sz)
            return emu_fail(err, EMU_EDATA, file, "data_offsets", "tensor '%s': "
                            "[%" PRIu64 ", %" PRIu64 "] holds %" PRIu64 " bytes, "
                            "but %s of that shape needs %" PRIu64, e->name,
                            e->begin, e->end, e->end - e->begin,
                            dtypes[e->dtype].name, n * sz);
    }
    raw_entry **by = malloc(((size_t)h->n + 1) * sizeof *by);
    if (!by)
        return emu_fail(err, EMU_ENOMEM, file, "", "out of memory");
    for (int i = 0; i < h->n; i++)
        by[i] = &h->e[i];
    int rc = 0;
    qsort(by, (size_t)h->n, sizeof *by, cmp_names);
    for (int i = 1; i < h->n && !rc; i++)
        if (!strcmp(by[i - 1]->name, by[i]->name))
            rc = emu_fail(err, EMU_EDATA, file, "header", "tensor '%s' is given "
                          "twice (header bytes %zu and %zu)", by[i]->name,
                          by[i - 1]->header_at < by[i]->header_at
                              ? by[i - 1]->header_at : by[i]->header_at,
                          by[i - 1]->header_at < by[i]->header_at
                              ? by[i]->header_at : by[i - 1]->header_at);
    qsort(by, (size_t)h->n, sizeof *by, cmp_offsets);
    uint64_t pos = 0;
    const raw_entry *prev = NULL;
    for (int i = 0; i < h->n && !rc; i++) {
        const raw_entry *e = by[i];
        if (e->begin < pos)
            rc = emu_fail(err, EMU_EDATA, file, "data_offsets", "tensor '%s' "
                          "[%" PRIu64 ", %" PRIu64 "] overlaps tensor '%s' "
                          "[%" PRIu64 ", %" PRIu64 "]", e->name, e->begin,
                          e->end, prev->name, prev->begin, prev->end);
        else if (e->begin > pos)
            rc = emu_fail(err, EMU_EDATA, file, "data_offsets", "tensor '%s' "
                          "begins at %" PRIu64 ", leaving a gap of %" PRIu64
                          " bytes after %s%s%s", e->name, e->begin,
                          e->begin - pos, prev ? "tensor '" : "the header",
                          prev ? prev->name : "", prev ? "'" : "");
        pos = e->end;
        prev = e;
    }
    if (!rc && pos != data_size)
        rc = emu_fail(err, EMU_EDATA, file, "data_offsets", "%zu bytes after the "
                      "last tensor's data%s%s%s (trailing garbage or a "
                      "truncated header)", data_size - (size_t)pos,
                      prev ? " ('" : "", prev ? prev->name : "", prev ? "')" : "");
    free(by);
    return rc;
}

void emu_tensorfile_free(emu_tensorfile *tf)
{
    if (!tf)
        return;
    for (int i = 0; i < tf->count; i++)
        free(tf->tensors[i].values);
    for (int i = 0; i < tf->meta_count; i++) {
        free(tf->meta_keys[i]);
        free(tf->meta_values[i]);
    }
    free(tf->tensors);
    free(tf->meta_keys);
    free(tf->meta_values);
    memset(tf, 0, sizeof *tf);
}

int emu_tensorfile_parse(emu_tensorfile *tf, const void *data, size_t size,
                         const char *name, unsigned flags, emu_error *err)
{
    EMU_HOSTFP_GUARD; /* binary32 subnormals must survive DAZ */
    memset(tf, 0, sizeof *tf);
    const unsigned char *b = data;
    if (!name)
        name = "tensor file";
    if (!data && size)
        return emu_fail(err, EMU_EINVAL, name, "", "no data");
    if (size < 8)
        return emu_fail(err, EMU_EDATA, name, "header", "%zu bytes: shorter than "
                        "the 8-byte header length", size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)b[i] << 8 * i;
    if (hlen < 2 || hlen > EMU_TF_HEADER_MAX || hlen > size - 8)
        return emu_fail(err, EMU_EDATA, name, "header", "a header of %" PRIu64
                        " bytes in a file of %zu (at least 2, at most %d and "
                        "the file's size less 8)", hlen, size, EMU_TF_HEADER_MAX);
    parser ps = { .p = b + 8, .end = b + 8 + hlen, .start = b + 8, .file = name,
                  .err = err };
    header h = { 0 };
    int rc = parse_header(&ps, &h);
    const size_t data_size = size - 8 - (size_t)hlen;
    const unsigned char *base = b + 8 + hlen;
    if (!rc)
        rc = check_layout(&h, data_size, name, err);
    if (!rc && h.n &&
        !(tf->tensors = calloc((size_t)h.n, sizeof *tf->tensors)))
        rc = emu_fail(err, EMU_ENOMEM, name, "", "out of memory");
    for (int i = 0; i < h.n && !rc; i++) {
        const raw_entry *e = &h.e[i];
        emu_tf_tensor *t = &tf->tensors[tf->count++];
        snprintf(t->name, sizeof t->name, "%s", e->name);
        t->dtype = (emu_tf_dtype)e->dtype;
        t->ndim = e->ndim;
        t->n = 1;
        for (int k = 0; k < e->ndim; k++) {
            t->shape[k] = (size_t)e->shape[k];
            t->n *= t->shape[k];
        }
        if (!(t->values = malloc(t->n ? t->n * sizeof *t->values : 1))) {
            rc = emu_fail(err, EMU_ENOMEM, name, e->name, "out of memory");
            break;
        }
        const size_t sz = dtypes[t->dtype].size;
        const unsigned char *p = base + e->begin;
        for (size_t j = 0; j < t->n; j++) {
            double v = decode(p + j * sz, t->dtype);
            t->values[j] = v;
            if (!isfinite(v) && t->nonfinite++ == 0 &&
                !(flags & EMU_TF_ALLOW_NONFINITE)) {
                char idx[160];
                index_text(idx, sizeof idx, j, t->shape, t->ndim);
                rc = emu_fail(err, EMU_EDATA, name, "value", "tensor '%s': "
                              "element %s is %s", t->name, idx,
                              isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf");
                break;
            }
        }
    }
    if (!rc && h.mn) {
        tf->meta_keys = h.mk;
        tf->meta_values = h.mv;
        tf->meta_count = h.mn;
        h.mk = h.mv = NULL;
        h.mn = 0;
    }
    header_free(&h);
    if (rc)
        emu_tensorfile_free(tf);
    return rc;
}

int emu_tensorfile_read(emu_tensorfile *tf, const char *path, unsigned flags,
                        emu_error *err)
{
    memset(tf, 0, sizeof *tf);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return emu_fail(err, EMU_EIO, path, "", "cannot open: %s", strerror(errno));
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    int rc = 0;
    for (;;) {
        if (!buf) {
            rc = emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
            break;
        }
        if (n == cap) {
            unsigned char *p = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!p) {
                free(buf);
                buf = NULL;
                continue;
            }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp))
                rc = emu_fail(err, EMU_EIO, path, "", "cannot read: %s",
                              strerror(errno));
            break;
        }
    }
    fclose(fp);
    if (!rc)
        rc = emu_tensorfile_parse(tf, buf, n, path, flags, err);
    free(buf);
    return rc;
}

const emu_tf_tensor *emu_tensorfile_find(const emu_tensorfile *tf,
                                         const char *name)
{
    for (int i = 0; i < tf->count; i++)
        if (!strcmp(tf->tensors[i].name, name))
            return &tf->tensors[i];
    return NULL;
}

const char *emu_tensorfile_meta(const emu_tensorfile *tf, const char *key)
{
    for (int i = 0; i < tf->meta_count; i++)
        if (!strcmp(tf->meta_keys[i], key))
            return tf->meta_values[i];
    return NULL;
}

/* ---- writing ------------------------------------------------------------------ */

typedef struct text {
    char *p;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->oom)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t c = t->cap ? t->cap : 1024;
        while (c < t->len + n + 1)
            c *= 2;
        char *p = realloc(t->p, c);
        if (!p) {
            t->oom = true;
            return;
        }
        t->p = p;
        t->cap = c;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

static void put_json_string(text *t, const char *s)
{
    put(t, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            put(t, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            put(t, e, 6);
        } else {
            put(t, (const char *)&c, 1);
        }
    }
    put(t, "\"", 1);
}

typedef struct write_job {
    const text *header;
    const emu_tf_out *tensors;
    int count;
    const size_t *counts;
} write_job;

static int write_file(FILE *fp, const void *arg)
{
    const write_job *j = arg;
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)j->header->len >> 8 * i);
    if (fwrite(len, 1, 8, fp) != 8 ||
        fwrite(j->header->p, 1, j->header->len, fp) != j->header->len)
        return -1;
    unsigned char chunk[4 * 1024];
    for (int i = 0; i < j->count; i++) {
        const float *v = j->tensors[i].data;
        for (size_t k = 0; k < j->counts[i];) {
            size_t m = j->counts[i] - k < sizeof chunk / 4 ? j->counts[i] - k
                                                           : sizeof chunk / 4;
            for (size_t q = 0; q < m; q++) {
                uint32_t u = f2u(v[k + q]);
                for (int b = 0; b < 4; b++)
                    chunk[4 * q + (size_t)b] = (unsigned char)(u >> 8 * b);
            }
            if (fwrite(chunk, 4, m, fp) != m)
                return -1;
            k += m;
        }
    }
    return 0;
}

int emu_tensorfile_write(const char *path, const emu_tf_out *tensors,
                         int count, const char *const *meta, emu_error *err)
{
    if (!path || count < 0 || (count && !tensors))
        return emu_fail(err, EMU_EINVAL, path ? path : "tensor file", "",
                        "no path or no tensors");
    size_t *counts = malloc(((size_t)count + 1) * sizeof *counts);
    if (!counts)
        return emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
    int rc = 0;
    for (int i = 0; i < count && !rc; i++) {
        const emu_tf_out *t = &tensors[i];
        if (!t->name || !t->name[0] || strlen(t->name) >= EMU_TF_NAME_MAX ||
            !strcmp(t->name, "__metadata__") || !utf8_valid(t->name))
            rc = emu_fail(err, EMU_EINVAL, path, "name", "tensor %d: the name "
                          "'%.60s' is empty, longer than %d bytes, reserved or "
                          "not UTF-8", i, t->name ? t->name : "(null)",
                          EMU_TF_NAME_MAX - 1);
        for (int k = 0; k < i && !rc; k++)
            if (!strcmp(tensors[k].name, t->name))
                rc = emu_fail(err, EMU_EINVAL, path, "name", "tensor '%s' is "
                              "given twice (%d and %d)", t->name, k, i);
        if (!rc && (t->ndim < 0 || t->ndim > EMU_TF_MAX_DIMS))
            rc = emu_fail(err, EMU_EINVAL, path, "shape", "tensor '%s': %d "
                          "dimensions (0 to %d)", t->name, t->ndim,
                          EMU_TF_MAX_DIMS);
        size_t n = 1;
        for (int k = 0; k < t->ndim && !rc; k++) {
            if (t->shape[k] && n > SIZE_MAX / 4 / t->shape[k])
                rc = emu_fail(err, EMU_EINVAL, path, "shape", "tensor '%s': the "
                              "byte size overflows", t->name);
            n *= t->shape[k];
        }
        if (!rc && n && !t->data)
            rc = emu_fail(err, EMU_EINVAL, path, "data", "tensor '%s': no data",
                          t->name);
        counts[i] = n;
    }
    for (int i = 0; !rc && meta && meta[i]; i += 2)
        if (!meta[i + 1] || !utf8_valid(meta[i]) || !utf8_valid(meta[i + 1]))
            rc = emu_fail(err, EMU_EINVAL, path, "__metadata__", "key '%.60s': no "
                          "value, or text that is not UTF-8", meta[i]);
    text h = { 0 };
    if (!rc) {
        puts_(&h, "{");
        bool first = true;
        if (meta && meta[0]) {
            puts_(&h, "\"__metadata__\":{");
            for (int i = 0; meta[i]; i += 2) {
                if (i)
                    puts_(&h, ",");
                put_json_string(&h, meta[i]);
                puts_(&h, ":");
                put_json_string(&h, meta[i + 1]);
            }
            puts_(&h, "}");
            first = false;
        }
        uint64_t off = 0;
        for (int i = 0; i < count; i++) {
            char num[64];
            puts_(&h, first ? "" : ",");
            first = false;
            put_json_string(&h, tensors[i].name);
            puts_(&h, ":{\"dtype\":\"F32\",\"shape\":[");
            for (int k = 0; k < tensors[i].ndim; k++) {
                snprintf(num, sizeof num, "%s%zu", k ? "," : "",
                         tensors[i].shape[k]);
                puts_(&h, num);
            }
            snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64
                     "]}", off, off + 4 * (uint64_t)counts[i]);
            puts_(&h, num);
            off += 4 * (uint64_t)counts[i];
        }
        puts_(&h, "}");
        /* Spaces to a multiple of 8, so that the data is aligned. */
        while (!h.oom && (h.len + 8) % 8)
            puts_(&h, " ");
        if (h.oom)
            rc = emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
        else if (h.len > EMU_TF_HEADER_MAX)
            rc = emu_fail(err, EMU_EINVAL, path, "header", "a header of %zu bytes "
                          "(at most %d)", h.len, EMU_TF_HEADER_MAX);
    }
    if (!rc) {
        write_job j = { &h, tensors, count, counts };
        rc = emu_write_atomic(path, write_file, &j, err);
    }
    free(h.p);
    free(counts);
    return rc;
}
