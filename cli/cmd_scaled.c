/*
 * cmd_scaled.c — `emu scaled formats|quant|unpack`: block-scaled formats
 * (OCP MX, NVFP4, user-defined combinations; emu/scaled.h) from the
 * command line.
 *
 * Format researchers want golden values: what a block of their data
 * becomes, element by element, with the scale the rule picked and what
 * the block lost.  Hardware designers want the same values as bytes, laid
 * out as the library packs them, and a way to read their simulator's
 * bytes back.  So `quant` prints both tables and can write the packed
 * tensor, and `unpack` decodes a packed tensor with the same columns, so
 * that the two outputs can be compared line by line.
 *
 * Input values are binary32, the library's carrier.  A decimal is read by
 * MPFR and rounded once to binary32 (subnormals included), never through
 * a binary64 first, so "0.1" is the binary32 nearest 1/10 on every libc.
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <mpfr.h>
#include <stdlib.h>
#include <string.h>

#define CMD "scaled"

/* A token longer than this is no number anyone means. */
enum { TOKEN_MAX = 256 };
/* Bad values reported before giving up: enough to see a pattern, not a
 * screenful per line of a wrong file. */
enum { MAX_VALUE_ERRORS = 10 };

/* ---- reading binary32 values -------------------------------------------- */

enum { VAL_OK, VAL_BAD, VAL_HUGE };

/* s as the nearest binary32 (ties to even), from the exact decimal or
 * hex value.  MPFR's exponent range is narrowed to binary32's for the
 * conversion, and mpfr_subnormalize rounds again on the subnormal grid
 * using the first rounding's ternary, which is what makes the result
 * correctly rounded there too. */
static int parse_f32(const char *s, float *out)
{
    const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
    mpfr_set_emin(-148); /* 2^-149 = 0.1b * 2^-148, MPFR's convention */
    mpfr_set_emax(128);
    mpfr_t x;
    mpfr_init2(x, 24);
    char *end;
    int t = mpfr_strtofr(x, s, &end, 0, MPFR_RNDN);
    int rc = VAL_OK;
    if (end == s || *end) {
        rc = VAL_BAD;
    } else if (mpfr_nan_p(x)) {
        *out = s[strspn(s, " \t")] == '-' ? -NAN : NAN;
    } else {
        t = mpfr_check_range(x, t, MPFR_RNDN);
        t = mpfr_subnormalize(x, t, MPFR_RNDN);
        /* An exact infinity was written as one; a rounded one is a
         * finite number too large for binary32. */
        if (mpfr_inf_p(x) && t != 0)
            rc = VAL_HUGE;
        else
            *out = mpfr_get_flt(x, MPFR_RNDN);
    }
    mpfr_clear(x);
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    return rc;
}

typedef struct values {
    float *x;
    size_t n, cap;
    unsigned errors;
} values;

static void values_push(values *v, float x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 1024;
        float *p = cap > SIZE_MAX / sizeof *p ? NULL
                                              : realloc(v->x, cap * sizeof *p);
        if (!p) {
            cli_error(CMD, "out of memory after %zu values", v->n);
            exit(CLI_EXIT_USAGE);
        }
        v->x = p;
        v->cap = cap;
    }
    v->x[v->n++] = x;
}

/* One value token; `where` says where it came from ("line 3: " or ""). */
static void take_value(values *v, const char *tok, const char *where)
{
    float x = 0.0f;
    int rc = parse_f32(tok, &x);
    if (rc == VAL_OK) {
        values_push(v, x);
        return;
    }
    if (v->errors++ >= MAX_VALUE_ERRORS)
        return;
    if (rc == VAL_BAD)
        cli_error(CMD, "%svalue '%.60s' is not a number (decimal, hex float, "
                  "inf or nan)", where, tok);
    else
        cli_error(CMD, "%svalue '%.60s' is beyond binary32's range (it would "
                  "round to inf; write inf if you mean it)", where, tok);
}

/* Values from a stream: separated by blanks or commas, any number per
 * line, '#' to the end of the line a comment.  Read a character at a time
 * so that no line is too long; only a token can be. */
static void read_values(values *v, FILE *fp, const char *name)
{
    char tok[TOKEN_MAX + 1];
    size_t len = 0;
    unsigned long line = 1;
    bool comment = false, toolong = false, nul = false;
    char where[64];
    for (;;) {
        int c = getc(fp);
        bool sep = c == EOF || c == '\n' || c == ' ' || c == '\t' ||
                   c == '\r' || c == ',' || c == '#';
        if (!comment && sep && (len || toolong || nul)) {
            tok[len] = '\0';
            snprintf(where, sizeof where, "line %lu: ", line);
            if (toolong || nul) {
                if (v->errors++ < MAX_VALUE_ERRORS)
                    cli_error(CMD, "%svalue '%.40s...' is %s", where, tok,
                              nul ? "not text (a NUL byte)" : "too long");
            } else {
                take_value(v, tok, where);
            }
            len = 0;
            toolong = nul = false;
        }
        if (c == EOF)
            break;
        if (c == '\n') {
            line++;
            comment = false;
        } else if (c == '#') {
            comment = true;
        } else if (!comment && !sep) {
            if (c == '\0')
                nul = true;
            else if (len < TOKEN_MAX)
                tok[len++] = (char)c;
            else
                toolong = true;
        }
    }
    if (ferror(fp)) {
        cli_error(CMD, "%s: read error after line %lu", name, line);
        exit(CLI_EXIT_USAGE);
    }
}

/* ---- shape, axis and spec arguments ------------------------------------- */

typedef struct shape {
    int ndim;
    size_t dim[EMU_SCALED_MAX_DIMS];
    bool given;
} shape;

static void parse_shape(const char *s, shape *sh)
{
    char buf[128];
    if (strlen(s) >= sizeof buf)
        cli_usage_error(CMD, "--shape: '%.40s...' is too long", s);
    strcpy(buf, s);
    sh->ndim = 0;
    char *cur = buf;
    for (;;) {
        char *x = strchr(cur, 'x');
        if (x)
            *x = '\0';
        char *end;
        errno = 0;
        unsigned long long d = *cur >= '0' && *cur <= '9'
                                   ? strtoull(cur, &end, 10) : 0;
        if (d == 0 || *end || errno || d > SIZE_MAX ||
            sh->ndim == EMU_SCALED_MAX_DIMS)
            cli_usage_error(CMD, "--shape: '%s' is not R[xC...]: 1 to %d "
                            "positive sizes separated by 'x' (e.g. 4x64)", s,
                            EMU_SCALED_MAX_DIMS);
        sh->dim[sh->ndim++] = (size_t)d;
        if (!x)
            break;
        cur = x + 1;
    }
    sh->given = true;
}

static void shape_string(const shape *sh, char *buf, size_t size)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int d = 0; d < sh->ndim && off < size; d++)
        off += (size_t)snprintf(buf + off, size - off, "%s%zu", d ? "x" : "",
                                sh->dim[d]);
}

static int parse_axis(const char *s)
{
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10);
    if (!*s || *end || errno || a < -EMU_SCALED_MAX_DIMS ||
        a >= EMU_SCALED_MAX_DIMS)
        cli_usage_error(CMD, "--axis: '%s' is not an axis (an integer; "
                        "negative counts from the last, -1)", s);
    return (int)a;
}

static void parse_spec(const char *spec, emu_scaled_format *sf)
{
    emu_error err;
    if (emu_scaled_format_parse(sf, spec, &err) == 0)
        return;
    char msg[700];
    emu_error_format(&err, msg, sizeof msg);
    cli_usage_error(CMD, "SPEC: %s", msg);
}

/* The tensor for sh, blocked along `axis`.  The axis is checked here,
 * before the library sees it, so that the message names the option and
 * the valid range. */
/* Elements of the shape; SIZE_MAX if that overflows. */
static size_t shape_elements(const shape *sh)
{
    size_t n = 1;
    for (int d = 0; d < sh->ndim; d++)
        n = n > SIZE_MAX / sh->dim[d] ? SIZE_MAX : n * sh->dim[d];
    return n;
}

static void alloc_tensor(emu_scaled_tensor *q, const emu_scaled_format *sf,
                         const shape *sh, int axis, const char *spec)
{
    if (axis < -sh->ndim || axis >= sh->ndim) {
        char s[128];
        shape_string(sh, s, sizeof s);
        cli_usage_error(CMD, "--axis %d is out of range for the %d-"
                        "dimensional shape %s (-%d..%d)", axis, sh->ndim, s,
                        sh->ndim, sh->ndim - 1);
    }
    emu_error err;
    if (emu_scaled_alloc(q, sf, sh->ndim, sh->dim, axis, &err)) {
        char msg[700];
        emu_error_format(&err, msg, sizeof msg);
        char s[128];
        shape_string(sh, s, sizeof s);
        cli_error(CMD, "SPEC '%s' with --shape %s: %s", spec, s, msg);
        exit(CLI_EXIT_USAGE);
    }
}

/* ---- tables --------------------------------------------------------------
 * Every output is one table: aligned columns for people (widths from a
 * first pass over the rows), or CSV with exactly one header line and no
 * comments, so that pandas.read_csv reads it with no options. */

enum { CELL = 176, MAXCOLS = 16 };

typedef struct table {
    const char *head[MAXCOLS];
    int ncols;
    unsigned left;          /* bit c: column c is text, left-aligned     */
    size_t nrows;
    void (*row)(const void *ctx, size_t r, char cell[][CELL]);
    const void *ctx;
} table;

static void print_table(const table *t, bool csv)
{
    char cell[MAXCOLS][CELL];
    if (csv) {
        for (int c = 0; c < t->ncols; c++) {
            cli_csv_text(t->head[c]);
            putchar(c + 1 < t->ncols ? ',' : '\n');
        }
        for (size_t r = 0; r < t->nrows; r++) {
            t->row(t->ctx, r, cell);
            for (int c = 0; c < t->ncols; c++) {
                cli_csv_text(cell[c]);
                putchar(c + 1 < t->ncols ? ',' : '\n');
            }
        }
        return;
    }
    /* Widths from the first WIDTH_ROWS rows: a table longer than that is
     * for grep and diff, not for reading, and a second full pass of
     * shortest-decimal formatting would double the time of a large
     * tensor.  A later, wider cell only shifts its own line. */
    enum { WIDTH_ROWS = 100000 };
    int width[MAXCOLS];
    for (int c = 0; c < t->ncols; c++)
        width[c] = (int)strlen(t->head[c]);
    for (size_t r = 0; r < t->nrows && r < WIDTH_ROWS; r++) {
        t->row(t->ctx, r, cell);
        for (int c = 0; c < t->ncols; c++)
            if ((int)strlen(cell[c]) > width[c])
                width[c] = (int)strlen(cell[c]);
    }
    for (int c = 0; c < t->ncols; c++)
        printf((t->left >> c) & 1 ? "%-*s%s" : "%*s%s", width[c], t->head[c],
               c + 1 < t->ncols ? "  " : "\n");
    for (size_t r = 0; r < t->nrows; r++) {
        t->row(t->ctx, r, cell);
        for (int c = 0; c < t->ncols; c++) {
            /* No trailing blanks after a left-aligned last column. */
            if (c + 1 == t->ncols && ((t->left >> c) & 1))
                printf("%s\n", cell[c]);
            else
                printf((t->left >> c) & 1 ? "%-*s%s" : "%*s%s", width[c],
                       cell[c], c + 1 < t->ncols ? "  " : "\n");
        }
    }
}

/* ---- number cells ------------------------------------------------------- */

/* buf holds the shortest "%.*g" form of x with `prec` digits.  %g turns
 * to exponent notation as soon as the exponent reaches the precision, so
 * 1000 comes out as "1e+03" and 320 as "3.2e+02"; between 1e-4 and 1e15
 * the same digits are written positionally, which people read faster and
 * which is the same number to any CSV reader. */
static void positional(double x, int prec, char *buf)
{
    char *e = strchr(buf, 'e');
    double ax = fabs(x);
    if (!e || ax < 1e-4 || ax >= 1e15)
        return;
    int exp10 = atoi(e + 1);
    int decimals = prec - 1 - exp10;
    snprintf(buf, CELL, "%.*f", decimals > 0 ? decimals : 0, x);
}

/* An input value: the shortest decimal that reads back as the same
 * binary32 ("0.3", not the 17 digits of its binary64 widening). */
static void f32_cell(float x, bool hex, char *buf)
{
    if (hex || isnan(x) || isinf(x)) {
        cli_hexfloat((double)x, buf, CELL);
        return;
    }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, CELL, "%.*g", prec, (double)x);
        if (strtof(buf, NULL) == x) {
            positional(x, prec, buf);
            return;
        }
    }
}

/* A computed value (exact in binary64): the shortest decimal that reads
 * back as it, as cli_decimal writes it but positional where it can be. */
static void f64_cell(double x, bool hex, char *buf)
{
    if (hex || isnan(x) || isinf(x)) {
        cli_hexfloat(x, buf, CELL);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, CELL, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) {
            positional(x, prec, buf);
            return;
        }
    }
}

/* The code an element has in the packed file: the format's pattern, or
 * for integer elements the two's complement byte the hardware stores. */
static void elem_code_cell(const emu_scaled_format *sf, float e, char *buf)
{
    emu_bits b;
    if (!emu_encode(&sf->elem, (double)e, &b)) {
        snprintf(buf, CELL, "-");
        return;
    }
    uint64_t v = b.v;
    if (sf->int_elem) {
        const uint64_t sign = (uint64_t)1 << (sf->elem.bits - 1);
        const uint64_t all = (sign << 1) - 1;
        if (v & sign)
            v = (~(v & (sign - 1)) + 1) & all;
    }
    cli_bits_hex(&sf->elem, v, buf, CELL);
}

static void scale_code_cell(const emu_scaled_format *sf, float s, char *buf)
{
    emu_bits b;
    if (!sf->block_scaled || !emu_encode(&sf->scale, (double)s, &b))
        snprintf(buf, CELL, "-");
    else
        cli_bits_hex(&sf->scale, b.v, buf, CELL);
}

/* ---- the element and block tables of quant and unpack -------------------- */

typedef struct view {
    const emu_scaled_tensor *q;
    const float *x;              /* inputs, or NULL (unpack)              */
    const emu_block_stats *bs;   /* quant's statistics, or NULL           */
    size_t *bcount;              /* elements of each block                */
    bool hex;
} view;

static void element_row(const void *ctx, size_t i, char cell[][CELL])
{
    const view *v = ctx;
    const emu_scaled_tensor *q = v->q;
    int c = 0;
    snprintf(cell[c++], CELL, "%zu", i);
    if (q->ndim > 1) {
        /* Coordinates, last axis fastest (row-major). */
        size_t rest = i;
        for (int d = q->ndim - 1; d >= 0; d--) {
            snprintf(cell[c + d], CELL, "%zu", rest % q->shape[d]);
            rest /= q->shape[d];
        }
        c += q->ndim;
    }
    size_t b = emu_scaled_block_of(q, i);
    snprintf(cell[c++], CELL, "%zu", b);
    if (v->x)
        f32_cell(v->x[i], v->hex, cell[c++]);
    f64_cell(q->elem[i], v->hex, cell[c++]);
    elem_code_cell(&q->sf, q->elem[i], cell[c++]);
    f64_cell(q->sf.block_scaled ? q->scale[b] : 1.0, v->hex, cell[c++]);
    if (q->sf.tensor_scale)
        f64_cell(q->tensor_scale, v->hex, cell[c++]);
    f64_cell(emu_scaled_value(q, i), v->hex, cell[c++]);
}

static void element_table(const view *v, table *t)
{
    static const char *const coord[EMU_SCALED_MAX_DIMS] = { "i0", "i1", "i2",
                                                            "i3" };
    const emu_scaled_tensor *q = v->q;
    memset(t, 0, sizeof *t);
    t->head[t->ncols++] = "index";
    if (q->ndim > 1)
        for (int d = 0; d < q->ndim; d++)
            t->head[t->ncols++] = coord[d];
    t->head[t->ncols++] = "block";
    if (v->x)
        t->head[t->ncols++] = "input";
    t->head[t->ncols++] = "elem";
    t->head[t->ncols++] = "elem_bits";
    t->head[t->ncols++] = "scale";
    if (q->sf.tensor_scale)
        t->head[t->ncols++] = "tensor_scale";
    t->head[t->ncols++] = "value";
    t->nrows = q->n;
    t->row = element_row;
    t->ctx = v;
}

static void block_row(const void *ctx, size_t b, char cell[][CELL])
{
    const view *v = ctx;
    const emu_scaled_tensor *q = v->q;
    const float s = q->sf.block_scaled ? q->scale[b] : 1.0f;
    int c = 0;
    snprintf(cell[c++], CELL, "%zu", b);
    snprintf(cell[c++], CELL, "%zu", v->bcount[b]);
    if (v->bs)
        f32_cell(v->bs[b].amax, v->hex, cell[c++]);
    f64_cell(s, v->hex, cell[c++]);
    scale_code_cell(&q->sf, s, cell[c++]);
    if (v->bs) {
        const emu_block_stats *st = &v->bs[b];
        snprintf(cell[c++], CELL, "%lu", (unsigned long)st->clipped);
        snprintf(cell[c++], CELL, "%lu", (unsigned long)st->flushed);
        snprintf(cell[c++], CELL, "%lu", (unsigned long)st->inexact);
        /* ||v - x|| / ||x||; a block of zeros loses nothing, and a NaN
         * block has no error to speak of. */
        double rel = isnan(s) ? NAN
                   : st->ref_sq > 0.0 ? sqrt(st->err_sq / st->ref_sq) : 0.0;
        char tmp[CELL];
        if (isnan(rel))
            snprintf(tmp, sizeof tmp, "nan");
        else
            snprintf(tmp, sizeof tmp, "%.6g", rel);
        snprintf(cell[c++], CELL, "%s", tmp);
    }
}

static void block_table(const view *v, table *t)
{
    memset(t, 0, sizeof *t);
    t->head[t->ncols++] = "block";
    t->head[t->ncols++] = "n";
    if (v->bs)
        t->head[t->ncols++] = "amax";
    t->head[t->ncols++] = "scale";
    t->head[t->ncols++] = "scale_bits";
    if (v->bs) {
        t->head[t->ncols++] = "clipped";
        t->head[t->ncols++] = "flushed";
        t->head[t->ncols++] = "inexact";
        t->head[t->ncols++] = "rel_l2";
    }
    t->nrows = v->q->nblocks;
    t->row = block_row;
    t->ctx = v;
}

static size_t *count_blocks(const emu_scaled_tensor *q)
{
    size_t *n = calloc(q->nblocks, sizeof *n);
    if (!n) {
        cli_error(CMD, "out of memory for %zu blocks", q->nblocks);
        exit(CLI_EXIT_USAGE);
    }
    for (size_t i = 0; i < q->n; i++)
        n[emu_scaled_block_of(q, i)]++;
    return n;
}

/* "# mxfp4 = elem=e2m1,...: shape 4x64, axis 1 (64 blocks)" */
static void describe(const emu_scaled_tensor *q, const char *what)
{
    char spec[512], s[128];
    shape sh = { q->ndim, { 0 }, true };
    for (int d = 0; d < q->ndim; d++)
        sh.dim[d] = q->shape[d];
    emu_scaled_format_string(&q->sf, spec, sizeof spec);
    shape_string(&sh, s, sizeof s);
    printf("# %s%s%s = %s\n# shape %s, blocks along axis %d: %zu block%s",
           what, *what ? ": " : "", q->sf.name, spec, s, q->axis, q->nblocks,
           q->nblocks == 1 ? "" : "s");
    if (q->sf.tensor_scale) {
        char g[CELL], gh[CELL];
        cli_decimal(q->tensor_scale, g, sizeof g);
        cli_hexfloat(q->tensor_scale, gh, sizeof gh);
        printf(", tensor scale %s (%s)", g, gh);
    }
    putchar('\n');
}

/* ---- emu scaled formats ------------------------------------------------- */

typedef struct fmt_rows {
    const char *const *label;
    const emu_scaled_format *sf;
    bool csv;
} fmt_rows;

enum { FMT_COLS = 10 };

static void format_row(const void *ctx, size_t r, char cell[][CELL])
{
    const fmt_rows *f = ctx;
    const emu_scaled_format *sf = &f->sf[r];
    const bool bs = sf->block_scaled;
    snprintf(cell[0], CELL, "%s", f->label[r]);
    snprintf(cell[1], CELL, "%s", sf->elem.name);
    snprintf(cell[2], CELL, "%s", bs ? sf->scale.name : "none");
    if (!bs)
        snprintf(cell[3], CELL, "-");
    else if (sf->block[1] > 1)
        snprintf(cell[3], CELL, "%zux%zu", sf->block[0], sf->block[1]);
    else
        snprintf(cell[3], CELL, "%zu", sf->block[0]);
    if (!bs)
        snprintf(cell[4], CELL, "-");
    else if (sf->rule == EMU_SCALE_RULE_AMAX)
        snprintf(cell[4], CELL, "amax/%s", emu_rnd_name(sf->scale_mode));
    else
        snprintf(cell[4], CELL, "%s", emu_scale_rule_name(sf->rule));
    snprintf(cell[5], CELL, "%s", sf->tensor_scale ? "binary32" : "none");
    snprintf(cell[6], CELL, "%.6g", emu_scaled_bits_per_element(sf));
    /* Exact in binary64 (the significands of element and scale fit): the
     * CSV has them in full, the table to six digits as `emu formats`. */
    const double mx = sf->elem.max * (bs ? sf->scale.max : 1.0);
    const double mn = sf->elem.min_value * (bs ? sf->scale.min_value : 1.0);
    if (f->csv) {
        cli_decimal(mx, cell[7], CELL);
        cli_decimal(mn, cell[8], CELL);
    } else {
        snprintf(cell[7], CELL, "%.6g", mx);
        snprintf(cell[8], CELL, "%.6g", mn);
    }
    emu_scaled_format_string(sf, cell[9], CELL);
}

static int scaled_formats(const char **specs, int nspecs, bool csv)
{
    const char *const *presets = emu_scaled_preset_names();
    int n = nspecs;
    if (!nspecs)
        while (presets[n])
            n++;
    emu_scaled_format *sf = calloc((size_t)n, sizeof *sf);
    const char **label = calloc((size_t)n, sizeof *label);
    if (!sf || !label) {
        cli_error(CMD, "out of memory");
        return CLI_EXIT_USAGE;
    }
    for (int i = 0; i < n; i++) {
        label[i] = nspecs ? specs[i] : presets[i];
        parse_spec(label[i], &sf[i]);
    }
    fmt_rows rows = { label, sf, csv };
    static const char *const head_text[FMT_COLS] = {
        "name", "element", "scale", "block", "rule", "tensor scale",
        "bits/elem", "max (g=1)", "min (g=1)", "spec",
    };
    static const char *const head_csv[FMT_COLS] = {
        "name", "element", "scale", "block", "rule", "tensor_scale",
        "bits_per_element", "max", "min", "spec",
    };
    table t = { .ncols = FMT_COLS, .left = 0x3f | 1u << 9,
                .nrows = (size_t)n, .row = format_row, .ctx = &rows };
    for (int c = 0; c < FMT_COLS; c++)
        t.head[c] = csv ? head_csv[c] : head_text[c];
    /* The canonical spec makes a long line: CSV only. */
    if (!csv)
        t.ncols--;
    print_table(&t, csv);
    free(sf);
    free(label);
    return cli_stdout_status(CMD);
}

/* ---- emu scaled quant ----------------------------------------------------- */

typedef struct quant_args {
    const char *spec, *pack;
    const char **vals;
    int nvals;
    bool from_stdin, csv, hex, blocks_only, have_axis;
    const char *mode, *tscale;
    uint64_t seed;
    shape sh;
    int axis;
} quant_args;

static int write_pack(const emu_scaled_tensor *q, const char *path)
{
    size_t size = emu_scaled_packed_size(q);
    uint8_t *buf = size ? malloc(size) : NULL;
    if (!buf) {
        cli_error(CMD, "--pack: cannot hold %zu bytes", size);
        return -1;
    }
    emu_error err;
    if (emu_scaled_pack(q, buf, size, &err)) {
        char msg[700];
        emu_error_format(&err, msg, sizeof msg);
        cli_error(CMD, "--pack: %s", msg);
        free(buf);
        return -1;
    }
    /* The bytes go to a temporary file renamed over FILE only once all
     * are written: a failed or killed run never leaves half a tensor. */
    cli_output out;
    if (cli_output_open(&out, CMD, path)) {
        free(buf);
        return -1;
    }
    if (fwrite(buf, 1, size, out.fp) != size) {
        cli_error(CMD, "--pack: %s: write failed", path);
        cli_output_abort(&out);
        free(buf);
        return -1;
    }
    free(buf);
    return cli_output_commit(&out, CMD);
}

static int scaled_quant(quant_args *a)
{
    emu_scaled_format sf;
    parse_spec(a->spec, &sf);
    emu_rounding r = { 0 };
    cli_parse_mode(CMD, a->mode ? a->mode : "rne", &r);
    float g = 0.0f;
    if (a->tscale) {
        if (!sf.tensor_scale)
            cli_usage_error(CMD, "--tensor-scale: %s has no tensor scale (add "
                            "tensor=yes to the spec)", a->spec);
        if (parse_f32(a->tscale, &g) != VAL_OK || !(g > 0.0f) || isinf(g))
            cli_usage_error(CMD, "--tensor-scale: '%s' is not a positive "
                            "finite binary32 value", a->tscale);
    }

    values v = { 0 };
    for (int i = 0; i < a->nvals; i++) {
        char where[48];
        snprintf(where, sizeof where, "argument %d: ", i + 1);
        take_value(&v, a->vals[i], where);
    }
    if (a->from_stdin)
        read_values(&v, stdin, "<stdin>");
    if (v.errors) {
        if (v.errors > MAX_VALUE_ERRORS)
            cli_error(CMD, "... %u bad values in all", v.errors);
        free(v.x);
        return CLI_EXIT_USAGE;
    }
    if (!v.n)
        cli_usage_error(CMD, "no values to quantize%s", a->from_stdin
                        ? " on standard input" : "");

    shape sh = a->sh;
    if (!sh.given) {
        sh.ndim = 1;
        sh.dim[0] = v.n;
    }
    size_t want = shape_elements(&sh);
    if (want != v.n) {
        char s[128];
        shape_string(&sh, s, sizeof s);
        cli_usage_error(CMD, "--shape %s holds %zu values, but %zu %s given",
                        s, want, v.n, v.n == 1 ? "was" : "were");
    }

    emu_scaled_tensor q;
    alloc_tensor(&q, &sf, &sh, a->have_axis ? a->axis : -1, a->spec);
    emu_block_stats *bs = calloc(q.nblocks, sizeof *bs);
    emu_quant_counts counts;
    memset(&counts, 0, sizeof counts);
    emu_quant_opts o = { .mode = r.mode, .sr_bits = r.sr_bits,
                         .seed = a->seed, .tensor_scale = g };
    emu_error err;
    if (!bs || emu_scaled_quantize(&q, v.x, &o, &counts, bs, &err)) {
        char msg[700] = "out of memory";
        if (bs)
            emu_error_format(&err, msg, sizeof msg);
        cli_error(CMD, "%s", msg);
        free(bs);
        free(v.x);
        emu_scaled_free(&q);
        return CLI_EXIT_USAGE;
    }

    int status = CLI_EXIT_OK;
    bool to_stdout = a->pack && !strcmp(a->pack, "-");
    if (a->pack && write_pack(&q, a->pack))
        status = CLI_EXIT_USAGE;
    if (status == CLI_EXIT_OK && !to_stdout) {
        view vw = { &q, v.x, bs, count_blocks(&q), a->hex };
        table t;
        if (!a->csv) {
            char mode[16];
            cli_mode_name(&r, mode, sizeof mode);
            describe(&q, "");
            printf("# elements rounded %s%s", mode,
                   emu_rnd_is_stochastic(r.mode) ? " (seed " : "");
            if (emu_rnd_is_stochastic(r.mode))
                printf("%llu)", (unsigned long long)a->seed);
            printf("; value = elem * scale%s\n",
                   sf.tensor_scale ? " * tensor_scale" : "");
        }
        if (!a->blocks_only) {
            element_table(&vw, &t);
            print_table(&t, a->csv);
        }
        if (a->blocks_only || !a->csv) {
            if (!a->blocks_only)
                putchar('\n');
            block_table(&vw, &t);
            print_table(&t, a->csv);
        }
        if (!a->csv) {
            char rel[32], mx[32];
            snprintf(rel, sizeof rel, "%.6g", counts.ref_sq > 0.0
                     ? sqrt(counts.err_sq / counts.ref_sq) : 0.0);
            snprintf(mx, sizeof mx, "%.6g", counts.err_max);
            printf("\n# total: %llu element%s, %llu block%s (%llu non-finite, "
                   "%llu with the scale clamped), %llu clipped, %llu flushed, "
                   "%llu inexact, relative L2 error %s, largest relative "
                   "error %s\n", (unsigned long long)counts.n,
                   counts.n == 1 ? "" : "s",
                   (unsigned long long)counts.blocks,
                   counts.blocks == 1 ? "" : "s",
                   (unsigned long long)counts.nonfinite_blocks,
                   (unsigned long long)counts.scale_clamped,
                   (unsigned long long)counts.clipped,
                   (unsigned long long)counts.flushed,
                   (unsigned long long)counts.inexact, rel, mx);
        }
        free(vw.bcount);
        status = cli_stdout_status(CMD);
    }
    free(bs);
    free(v.x);
    emu_scaled_free(&q);
    return status;
}

/* ---- emu scaled unpack ---------------------------------------------------- */

static uint8_t *read_file(const char *path, size_t *size)
{
    const char *name;
    FILE *fp = cli_open_input(CMD, path, &name);
    if (!fp)
        exit(CLI_EXIT_USAGE);
    size_t n = 0, cap = 4096;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf; n += got) {
        if (n == cap) {
            uint8_t *p = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
            cap *= 2;
        }
        got = fread(buf + n, 1, cap - n, fp);
        if (!got)
            break;
    }
    bool bad = !buf || ferror(fp);
    if (fp != stdin)
        fclose(fp);
    if (bad) {
        cli_error(CMD, "%s: %s", name, buf ? "read error" : "out of memory");
        exit(CLI_EXIT_USAGE);
    }
    *size = n;
    return buf;
}

static int scaled_unpack(const char *spec, const shape *sh, bool have_axis,
                         int axis, const char *path, bool csv, bool hex,
                         bool blocks_only)
{
    emu_scaled_format sf;
    parse_spec(spec, &sf);
    if (!sh->given)
        cli_usage_error(CMD, "unpack needs --shape (the file holds no shape)");
    size_t size;
    uint8_t *buf = read_file(path, &size);
    const char *name = strcmp(path, "-") ? path : "<stdin>";
    /* The file's size bounds the shape before anything of the shape's
     * size is allocated: a typo in --shape must not ask for terabytes.
     * Within a KiB of the file's size (at one bit an element) the tensor
     * is allocated, so that the message below can break the size down. */
    size_t n = shape_elements(sh);
    size_t eb = n == SIZE_MAX ? 0 : emu_packed_size(&sf.elem, n);
    if (!eb || (eb > size && n / 8 > size + 1024)) {
        char s[128];
        shape_string(sh, s, sizeof s);
        char need[32] = "more than SIZE_MAX";
        if (eb)
            snprintf(need, sizeof need, "%zu", eb);
        cli_error(CMD, "%s: %zu bytes, but %s of shape %s needs %s bytes "
                  "of element codes alone", name, size, sf.name, s, need);
        free(buf);
        return CLI_EXIT_USAGE;
    }
    emu_scaled_tensor q;
    alloc_tensor(&q, &sf, sh, have_axis ? axis : -1, spec);
    size_t need = emu_scaled_packed_size(&q);
    if (size != need) {
        /* Say what the expected size is made of: a wrong --shape or
         * spec is the usual cause, and the parts show which. */
        char s[128];
        shape_string(sh, s, sizeof s);
        size_t sb = sf.block_scaled ? emu_packed_size(&sf.scale, q.nblocks)
                                    : 0;
        cli_error(CMD, "%s: %zu bytes, expected %zu for %s of shape %s "
                  "(%zu bytes of element codes + %zu of %zu block scale%s%s)",
                  name, size, need, sf.name, s, eb, sb, q.nblocks,
                  q.nblocks == 1 ? "" : "s",
                  sf.tensor_scale ? " + 4 of tensor scale" : "");
        free(buf);
        emu_scaled_free(&q);
        return CLI_EXIT_USAGE;
    }
    emu_error err;
    if (emu_scaled_unpack(&q, buf, size, &err)) {
        char msg[700];
        emu_error_format(&err, msg, sizeof msg);
        cli_error(CMD, "%s: %s", name, msg);
        free(buf);
        emu_scaled_free(&q);
        return CLI_EXIT_USAGE;
    }
    free(buf);
    view vw = { &q, NULL, NULL, count_blocks(&q), hex };
    table t;
    if (!csv) {
        describe(&q, name);
        printf("# value = elem * scale%s\n",
               sf.tensor_scale ? " * tensor_scale" : "");
    }
    if (!blocks_only) {
        element_table(&vw, &t);
        print_table(&t, csv);
    }
    if (blocks_only || !csv) {
        if (!blocks_only)
            putchar('\n');
        block_table(&vw, &t);
        print_table(&t, csv);
    }
    free(vw.bcount);
    emu_scaled_free(&q);
    return cli_stdout_status(CMD);
}

/* ---- dispatch ------------------------------------------------------------- */

static void help(void)
{
    printf(
        "Usage: emu scaled formats [--csv] [SPEC...]\n"
        "       emu scaled quant SPEC [options] VALUE... | -\n"
        "       emu scaled unpack SPEC --shape R[xC...] [options] FILE|-\n"
        "\n"
        "Block-scaled formats: narrow elements sharing one scale per block,\n"
        "and optionally one binary32 tensor scale g:  value = elem * scale * g.\n"
        "\n"
        "SPEC: a preset  mxfp8 (E4M3), mxfp8-e5m2, mxfp6-e2m3, mxfp6-e3m2,\n"
        "mxfp4, mxint8 (OCP MX: blocks of 32, E8M0 scales, scale =\n"
        "2^(floor(log2 amax) - emax_elem)), nvfp4 (E2M1, blocks of 16, E4M3\n"
        "scales = RNE(amax / 6 / g), binary32 tensor scale); or keys\n"
        "elem=FMT, scale=FMT|none, block=N|NxM, rule=floor|ceil|amax,\n"
        "scale_mode=MODE, tensor=yes|no, pad=yes|no, range=clamp|error\n"
        "(refuse data needing a scale out of the scale format's range),\n"
        "alone or after a preset ('mxfp8,block=16x16',\n"
        "'elem=e4m3,scale=none,tensor=yes').\n"
        "\n"
        "formats  one row per preset, or per SPEC given: element and scale\n"
        "         formats, block, scale rule, tensor scale, storage bits per\n"
        "         element (scales included), largest and smallest positive\n"
        "         magnitude with g = 1.\n"
        "\n"
        "quant    quantizes binary32 values, given as arguments or on standard\n"
        "         input ('-': any number per line, separated by blanks or\n"
        "         commas, '#' starts a comment).  Decimals are rounded once to\n"
        "         binary32 (nearest even).  Prints per element: index (and its\n"
        "         coordinates i0, i1, ... for more than one dimension), block,\n"
        "         input, element value, its code in the packed file\n"
        "         (elem_bits; two's complement for mxint8), block scale,\n"
        "         tensor scale (formats with one), value; then per block:\n"
        "         elements n, amax, scale and its code, elements clipped to\n"
        "         +-max_elem, non-zero inputs flushed to 0, inexact elements,\n"
        "         relative L2 error ||v - x|| / ||x||.\n"
        "\n"
        "unpack   reads a packed tensor (as quant --pack writes it) and prints\n"
        "         the same element table without the input, and the scales.\n"
        "\n"
        "Options:\n"
        "  --shape R[xC...]   tensor shape, row-major, 1 to %d dimensions\n"
        "                     (quant: default one dimension of all values)\n"
        "  --axis A           the axis blocks run along (default -1, the last;\n"
        "                     negative counts from the end)\n"
        "  --mode MODE        quant: element rounding: rne (default) rna rz ru\n"
        "                     rd ro sr srN; scales saturate, elements clip\n"
        "  --seed N           quant: stochastic modes' random stream (default\n"
        "                     0); element i takes word i\n"
        "  --tensor-scale G   quant: the tensor scale (formats with one),\n"
        "                     rounded to binary32; default: current scaling,\n"
        "                     g = amax / (max_elem * max_scale)\n"
        "  --pack FILE        quant: write the packed bytes to FILE (atomically:\n"
        "                     nothing is written if anything fails); '-' writes\n"
        "                     them to standard output instead of the tables\n"
        "  --blocks           print only the per-block table\n"
        "  --csv              CSV: one header line, no comments (pandas reads\n"
        "                     it as is); the element table, or with --blocks\n"
        "                     the block table\n"
        "  --hex              numbers as hex floats (0x1p-2) instead of decimals\n"
        "\n"
        "Packed layout: element codes as a little-endian bit stream (FP4: two\n"
        "per byte, element 0 in the low nibble; FP6: four per three bytes),\n"
        "then one byte per block scale (8-bit scale formats), blocks\n"
        "row-major over the block grid, then g as 4 little-endian bytes.\n"
        "\n"
        "Examples:\n"
        "  emu scaled formats\n"
        "  emu scaled quant mxfp4 1 0.3 -0.7 0.1\n"
        "  emu scaled quant nvfp4 --shape 4x32 --pack w.bin - < w.txt\n"
        "  emu scaled unpack nvfp4 --shape 4x32 w.bin --csv > w.csv\n",
        EMU_SCALED_MAX_DIMS);
}

int cmd_scaled(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "shape", 0, true }, { "axis", 0, true }, { "mode", 0, true },
        { "seed", 0, true }, { "tensor-scale", 0, true }, { "pack", 0, true },
        { "blocks", 0, false }, { "csv", 0, false }, { "hex", 0, false },
        { "help", 'h', false }, { NULL, 0, false },
    };
    enum { O_SHAPE, O_AXIS, O_MODE, O_SEED, O_TSCALE, O_PACK, O_BLOCKS,
           O_CSV, O_HEX, O_HELP };
    /* Which verbs each option applies to: F formats, Q quant, U unpack. */
    enum { F = 1, Q = 2, U = 4 };
    static const unsigned applies[] = { Q | U, Q | U, Q, Q, Q, Q, Q | U,
                                        F | Q | U, Q | U };
    quant_args a;
    memset(&a, 0, sizeof a);
    a.vals = calloc((size_t)argc + 1, sizeof *a.vals);
    if (!a.vals) {
        cli_error(CMD, "out of memory");
        return CLI_EXIT_USAGE;
    }
    const char *verb = NULL, *val;
    unsigned seen = 0; /* options given, by bit */
    cli_parser p;
    cli_parser_init(&p, CMD, argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o >= 0)
            seen |= 1u << o;
        switch (o) {
        case O_HELP: help(); free(a.vals); return CLI_EXIT_OK;
        case O_SHAPE: parse_shape(val, &a.sh); break;
        case O_AXIS: a.axis = parse_axis(val); a.have_axis = true; break;
        case O_MODE: a.mode = val; break;
        case O_SEED: a.seed = cli_parse_u64(CMD, "--seed", val); break;
        case O_TSCALE: a.tscale = val; break;
        case O_PACK: a.pack = val; break;
        case O_BLOCKS: a.blocks_only = true; break;
        case O_CSV: a.csv = true; break;
        case O_HEX: a.hex = true; break;
        default:
            if (!verb)
                verb = val;
            else if (!strcmp(val, "-") && !a.from_stdin)
                a.from_stdin = true;
            else
                a.vals[a.nvals++] = val;
        }
    }
    if (!verb)
        cli_usage_error(CMD, "missing formats, quant or unpack");
    unsigned which = !strcmp(verb, "formats") ? F : !strcmp(verb, "quant") ? Q
                   : !strcmp(verb, "unpack") ? U : 0;
    if (!which)
        cli_usage_error(CMD, "'%s' is not formats, quant or unpack", verb);
    for (int o = 0; o < O_HELP; o++)
        if ((seen >> o & 1) && !(applies[o] & which))
            cli_usage_error(CMD, "--%s does not apply to %s", opts[o].name,
                            verb);
    int rc;
    if (which == F) {
        if (a.from_stdin)
            cli_usage_error(CMD, "formats reads no standard input");
        rc = scaled_formats(a.vals, a.nvals, a.csv);
    } else if (which == Q) {
        if (!a.nvals)
            cli_usage_error(CMD, "quant: expected SPEC, then VALUE... or -");
        a.spec = a.vals[0];
        a.vals++;
        a.nvals--;
        if (!a.nvals && !a.from_stdin)
            cli_usage_error(CMD, "quant: no values (give VALUE... or - to "
                            "read standard input)");
        rc = scaled_quant(&a);
        a.vals--;
    } else {
        const char *file = a.from_stdin ? "-" : a.nvals == 2 ? a.vals[1] : NULL;
        if (a.nvals < 1)
            cli_usage_error(CMD, "unpack: expected SPEC and FILE (or -)");
        if (!file || a.nvals > (a.from_stdin ? 1 : 2))
            cli_usage_error(CMD, "unpack: expected SPEC and one FILE (or -)");
        rc = scaled_unpack(a.vals[0], &a.sh, a.have_axis, a.axis, file,
                           a.csv, a.hex, a.blocks_only);
    }
    free(a.vals);
    return rc;
}
