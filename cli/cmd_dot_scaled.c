/*
 * cmd_dot_scaled.c — `emu dot gen|verify --scaled SPEC`: test vectors of a
 * block-scaled dot-product unit (OCP MX: MXFP8, MXFP6, MXFP4; NVFP4; any
 * scaled format of emu/scaled.h), the golden data an MX unit needs.
 *
 * Each line holds the codes as the unit receives them:
 *
 *     A0 .. A(K-1) SA0 .. SA(n-1) B0 .. B(K-1) SB0 .. SB(n-1) [GA GB] RESULT FLAGS
 *
 * element codes, the n = ceil(K / block) block-scale codes of each
 * operand, the binary32 tensor scales if the format has them, and the
 * result with the flags of its one rounding.  The value is that of
 * emu_dpi_dot_scaled (emu/dpi.h), which is emu_t_matmul_scaled's: the terms (e_a s_a)(e_b s_b) are exact, summed by
 * the accumulator model in index order, and the sum times g_a g_b is
 * rounded once into the output format.  A NaN scale (E8M0 0xFF) makes its
 * block's elements NaN, as the OCP spec says.  Settings travel in a
 * '#! emu-dot-scaled' header.  cmd_dot.c hands over here when --scaled is
 * given or the file starts with that header; emu coverage reads the same
 * files through the cli_sdot_* functions exported here (cli.h).
 */
#include "cli.h"
#include "vectors.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


/* Operand and scale streams, apart from cmd_dot.c's. */
#define ELEM_STREAM ((uint64_t)0xd5c << 40)
#define SCALE_STREAM ((uint64_t)0xd5d << 40)


void cli_sdot_finish(cli_sdot *d)
{
    if (!d->scaled_spec)
        cli_usage_error("dot", "--scaled: missing (e.g. mxfp8, nvfp4)");
    if (!d->accum_spec)
        d->accum_spec = "exact";
    /* The DPI model checks every setting and names what is wrong; what it
     * accepted parses again below for the header and the line layout. */
    const char *mode = d->mode_spec ? d->mode_spec : "rne";
    d->h = emu_dpi_open_scaled(d->scaled_spec, d->accum_spec, d->out_spec,
                               mode);
    if (d->h < 0)
        cli_usage_error("dot", "%s", emu_dpi_last_error());
    emu_error err;
    if (emu_scaled_format_parse(&d->sf, d->scaled_spec, &err) ||
        emu_accum_parse(&d->model, d->accum_spec, &err))
        cli_usage_error("dot", "settings the DPI model took do not parse "
                        "again (a bug)");
    cli_resolve_format("dot", "--out", d->out_spec ? d->out_spec : "binary32",
                       &d->out);
    cli_resolve_format("dot", "binary32", "binary32", &d->g32); /* GA, GB */
    memset(&d->rnd, 0, sizeof d->rnd);
    cli_parse_mode("dot", mode, &d->rnd);
    if (!d->have_k)
        d->k = d->sf.block_scaled ? (unsigned)d->sf.block[0] : 32;
    d->nblocks = d->sf.block_scaled
               ? (unsigned)((d->k + d->sf.block[0] - 1) / d->sf.block[0]) : 0;
    d->fields = 2 * (d->k + d->nblocks) + 2 * d->sf.tensor_scale + 2;
}

/* The unit on one case, through the DPI golden model (one definition for
 * both); returns the result pattern, *flags its flags, or sets *why (an
 * element times its scale that is not a binary32). */
uint64_t cli_sdot_eval(const cli_sdot *d, const cli_sdot_case *c, unsigned *flags,
                          const char **why)
{
    emu_dpi_u64 r = 0;
    emu_dpi_u32 f = 0;
    *why = NULL;
    if (emu_dpi_dot_scaled(d->h, (int)d->k, c->a, c->sa, c->b, c->sb, c->ga,
                           c->gb, &r, &f))
        *why = emu_dpi_last_error();
    *flags = f;
    return r;
}

/* e_i s_block(i) of one operand; binary32 values once cli_sdot_eval
 * accepted the case (a NaN scale gives NaN elements). */
static void scaled_values(const cli_sdot *d, const emu_dpi_u64 *e,
                          const emu_dpi_u64 *s, float *out)
{
    for (unsigned i = 0; i < d->k; i++) {
        double v = emu_decode(&d->sf.elem, (emu_bits){ e[i] });
        if (d->sf.block_scaled)
            v *= emu_decode(&d->sf.scale,
                            (emu_bits){ s[i / d->sf.block[0]] });
        out[i] = (float)v;
    }
}

void cli_sdot_sum(const cli_sdot *d, const cli_sdot_case *c, double *hi,
                  double *lo)
{
    float x[CLI_SDOT_MAX_K], y[CLI_SDOT_MAX_K];
    scaled_values(d, c->a, c->sa, x);
    scaled_values(d, c->b, c->sb, y);
    *lo = 0.0;
    *hi = emu_accum_dot(lo, NULL, &d->model, x, 1, y, 1, d->k, NULL);
}

/* ---- gen ----------------------------------------------------------------- */

/* A block scale code: a value within 2^±span of 1 (span 16, or the scale
 * format's own range if narrower), so that every element times it is a
 * binary32; one block in 64 gets the scale format's NaN, where it has
 * one. */
static uint64_t random_scale(const cli_sdot *d, uint64_t i)
{
    const emu_format *f = &d->sf.scale;
    const int span = f->emax < 16 ? f->emax : 16;
    uint64_t w = emu_random64(d->seed, SCALE_STREAM, i);
    emu_bits nan;
    if (w % 64 == 0 && emu_nan_bits(f, &nan))
        return nan.v;
    for (;;) {
        double v = ldexp(1.0 + (double)(w >> 40 & 0xff) / 256.0,
                         (int)((w >> 8) % (uint64_t)(2 * span)) - span);
        emu_rounding rz = { .mode = EMU_RZ, .saturate = true };
        emu_bits b;
        if (emu_encode(f, emu_round(f, v, &rz, NULL), &b) && b.v != 0)
            return b.v;
        w = emu_random64(d->seed, SCALE_STREAM, w);
    }
}

/* A binary32 tensor scale in [2^-8, 2^8). */
static uint64_t random_tensor_scale(const cli_sdot *d, uint64_t i)
{
    uint64_t w = emu_random64(d->seed, SCALE_STREAM ^ 1, i);
    return (uint64_t)(119 + w % 16) << 23 | (w >> 20 & 0x7fffff);
}

static void make_case(const cli_sdot *d, uint64_t n, cli_sdot_case *c)
{
    const uint64_t base = n * 2 * CLI_SDOT_MAX_K;
    for (unsigned i = 0; i < d->k; i++) {
        c->a[i] = cli_random_pattern(&d->sf.elem, d->seed, ELEM_STREAM,
                                     base + 2 * i);
        c->b[i] = cli_random_pattern(&d->sf.elem, d->seed, ELEM_STREAM,
                                     base + 2 * i + 1);
    }
    for (unsigned j = 0; j < d->nblocks; j++) {
        c->sa[j] = random_scale(d, base + 2 * j);
        c->sb[j] = random_scale(d, base + 2 * j + 1);
    }
    c->ga = random_tensor_scale(d, 2 * n);
    c->gb = random_tensor_scale(d, 2 * n + 1);
}

static void print_codes(FILE *fp, const emu_format *f, const emu_dpi_u64 *v,
                        unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        fprintf(fp, "%0*llX ", cli_hex_digits(f->bits),
                (unsigned long long)v[i]);
}

static void write_case(const cli_sdot *d, FILE *fp, const cli_sdot_case *c,
                       uint64_t r, unsigned flags)
{
    print_codes(fp, &d->sf.elem, c->a, d->k);
    print_codes(fp, &d->sf.scale, c->sa, d->nblocks);
    print_codes(fp, &d->sf.elem, c->b, d->k);
    print_codes(fp, &d->sf.scale, c->sb, d->nblocks);
    if (d->sf.tensor_scale)
        fprintf(fp, "%08llX %08llX ", (unsigned long long)c->ga,
                (unsigned long long)c->gb);
    fprintf(fp, "%0*llX %02X\n", cli_hex_digits(d->out.bits),
            (unsigned long long)r, flags);
}

static int sdot_gen(cli_sdot *d, uint64_t count, const char *path)
{
    cli_sdot_finish(d);
    cli_output out;
    if (cli_output_open(&out, "dot", path))
        return CLI_EXIT_USAGE;
    char sf[256], accum[256], outs[256], mode[16];
    emu_scaled_format_string(&d->sf, sf, sizeof sf);
    emu_accum_string(&d->model, accum, sizeof accum);
    emu_format_spec_string(&d->out, outs, sizeof outs);
    cli_mode_name(&d->rnd, mode, sizeof mode);
    fprintf(out.fp, "# emu dot gen --scaled (libemu %s): %s, K = %u, n = %u "
            "block scale(s) per operand; line = A0..A(K-1) SA0..SA(n-1) "
            "B0..B(K-1) SB0..SB(n-1)%s RESULT FLAGS\n", EMU_VERSION_STRING,
            d->scaled_spec, d->k, d->nblocks,
            d->sf.tensor_scale ? " GA GB" : "");
    fprintf(out.fp, "#! emu-dot-scaled scaled=%s accum=%s out=%s mode=%s "
            "k=%u seed=%llu\n", sf, accum, outs, mode, d->k,
            (unsigned long long)d->seed);
    cli_sdot_case c;
    for (uint64_t n = 0; n < count; n++) {
        unsigned flags;
        const char *why;
        make_case(d, n, &c);
        uint64_t r = cli_sdot_eval(d, &c, &flags, &why);
        if (why) {
            cli_output_abort(&out);
            cli_error("dot", "case %llu: %s", (unsigned long long)n, why);
            return CLI_EXIT_USAGE;
        }
        write_case(d, out.fp, &c, r, flags);
    }
    if (cli_output_commit(&out, "dot"))
        return CLI_EXIT_USAGE;
    if (path && strcmp(path, "-"))
        fprintf(stderr, "emu dot: %llu cases written to %s\n",
                (unsigned long long)count, path);
    return CLI_EXIT_OK;
}

/* ---- verify -------------------------------------------------------------- */

static void parse_k(cli_sdot *d, const char *val)
{
    char *end;
    errno = 0;
    unsigned long k = strtoul(val, &end, 10);
    if (!*val || *end || errno || k < 1 || k > CLI_SDOT_MAX_K)
        cli_usage_error("dot", "k: '%s' is not a length from 1 to %d", val,
                        CLI_SDOT_MAX_K);
    d->k = (unsigned)k;
    d->have_k = true;
}

/* Takes from a '#! emu-dot-scaled' line what the command line left open. */
void cli_sdot_read_header(cli_sdot *d, char *line)
{
    static char keep[4][256];
    static const char *const keys[4] = { "scaled", "accum", "out", "mode" };
    const char **slot[4] = { &d->scaled_spec, &d->accum_spec, &d->out_spec,
                             &d->mode_spec };
    char *cursor = line + strlen("#! emu-dot-scaled");
    for (char *tok = strtok(cursor, " \t"); tok; tok = strtok(NULL, " \t")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            continue;
        *eq = '\0';
        for (int i = 0; i < 4; i++)
            if (!strcmp(tok, keys[i]) && !*slot[i]) {
                snprintf(keep[i], sizeof keep[i], "%s", eq + 1);
                *slot[i] = keep[i];
            }
        if (!strcmp(tok, "k") && !d->have_k)
            parse_k(d, eq + 1);
    }
}

/* The hex fields of a line into c; NULL or why it is malformed. */
const char *cli_sdot_parse_line(const cli_sdot *d, char *line, cli_sdot_case *c,
                              uint64_t *result, unsigned *flags)
{
    static char why[160];
    unsigned got = 0;
    const unsigned k = d->k, nb = d->nblocks;
    for (char *tok = strtok(line, " \t\r"); tok; tok = strtok(NULL, " \t\r")) {
        if (*tok == '#')
            break;
        if (got == d->fields) {
            snprintf(why, sizeof why, "more than %u fields", d->fields);
            return why;
        }
        /* Which field this is: A, SA, B, SB, GA GB, RESULT, FLAGS. */
        unsigned i = got;
        emu_dpi_u64 *slot;
        const emu_format *f;
        int bits;
        if (i < k) {
            slot = &c->a[i], f = &d->sf.elem;
        } else if ((i -= k) < nb) {
            slot = &c->sa[i], f = &d->sf.scale;
        } else if ((i -= nb) < k) {
            slot = &c->b[i], f = &d->sf.elem;
        } else if ((i -= k) < nb) {
            slot = &c->sb[i], f = &d->sf.scale;
        } else if ((i -= nb) < 2u * d->sf.tensor_scale) {
            slot = i ? &c->gb : &c->ga, f = &d->g32;
        } else {
            slot = NULL;
            f = got + 1 == d->fields ? NULL : &d->out;
        }
        bits = f ? f->bits : 8;
        for (const char *p = tok; *p; p++)
            if (!isxdigit((unsigned char)*p) || p - tok >= 16) {
                snprintf(why, sizeof why, "field %u '%.40s' is not a hex "
                         "pattern", got + 1, tok);
                return why;
            }
        uint64_t v = strtoull(tok, NULL, 16);
        if (bits < 64 && v >> bits) {
            snprintf(why, sizeof why, "field %u (%s) is wider than %d bits",
                     got + 1, tok, bits);
            return why;
        }
        if (slot)
            *slot = v;
        else if (f)
            *result = v;
        else
            *flags = (unsigned)v;
        got++;
    }
    if (got != d->fields) {
        snprintf(why, sizeof why, "%u fields, expected %u (K = %u, %u block "
                 "scales per operand%s, result, flags)", got, d->fields, k, nb,
                 d->sf.tensor_scale ? ", 2 tensor scales" : "");
        return why;
    }
    return NULL;
}

static int sdot_verify(cli_sdot *d, const char *path, bool exact_nan,
                       uint64_t max_errors)
{
    FILE *fp = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!fp) {
        cli_error("dot", "%s: %s", path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    const char *name = fp == stdin ? "<stdin>" : path;
    char *line = NULL;
    size_t cap = 0, len = 0;
    unsigned long lineno = 0;
    uint64_t checked = 0, mismatches = 0, malformed = 0;
    bool ready = false;
    cli_sdot_case *c = malloc(sizeof *c);
    int rc;
    while (c && (rc = vec_read_line(fp, &line, &cap, &len)) > 0) {
        lineno++;
        char *t = line + strspn(line, " \t");
        if (rc == 1 && !ready && !strncmp(t, "#! emu-dot-scaled", 17)) {
            cli_sdot_read_header(d, t);
            continue;
        }
        if (rc == 1 && (!*t || *t == '#'))
            continue;
        if (!ready) {
            cli_sdot_finish(d);
            ready = true;
        }
        uint64_t want = 0, got = 0;
        unsigned want_flags = 0, flags = 0;
        const char *why = rc == 2 ? "line too long"
                        : strlen(line) != len ? "NUL byte in the line"
                        : cli_sdot_parse_line(d, line, c, &want, &want_flags);
        if (!why)
            got = cli_sdot_eval(d, c, &flags, &why);
        if (why) {
            if (malformed++ < max_errors)
                cli_error("dot", "%s:%lu: malformed line: %s", name, lineno,
                          why);
            continue;
        }
        checked++;
        want_flags &= EMU_FLAG_TESTFLOAT_MASK;
        bool both_nan =
            !exact_nan &&
            emu_classify_bits(&d->out, (emu_bits){ want }) == EMU_CLASS_NAN &&
            emu_classify_bits(&d->out, (emu_bits){ got }) == EMU_CLASS_NAN;
        if ((want == got || both_nan) && want_flags == flags)
            continue;
        if (mismatches++ < max_errors)
            printf("%s:%lu: expected %0*llX flags %02X, the model gives "
                   "%0*llX (%a) flags %02X\n", name, lineno,
                   cli_hex_digits(d->out.bits), (unsigned long long)want,
                   want_flags, cli_hex_digits(d->out.bits),
                   (unsigned long long)got,
                   emu_decode(&d->out, (emu_bits){ got }), flags);
    }
    bool read_error = !c || rc < 0 || ferror(fp);
    free(line);
    free(c);
    if (fp != stdin)
        fclose(fp);
    if (read_error) {
        cli_error("dot", "%s: read error after line %lu", name, lineno);
        return CLI_EXIT_USAGE;
    }
    if (!ready && !malformed)
        cli_error("dot", "%s: no test vectors", name);
    printf("%s: %llu lines checked, %llu mismatch%s", name,
           (unsigned long long)checked, (unsigned long long)mismatches,
           mismatches == 1 ? "" : "es");
    if (malformed)
        printf(", %llu malformed", (unsigned long long)malformed);
    putchar('\n');
    if (malformed || !ready || cli_stdout_status("dot"))
        return CLI_EXIT_USAGE;
    return mismatches ? CLI_EXIT_MISMATCH : CLI_EXIT_OK;
}

/* ---- the hook from cmd_dot.c ------------------------------------------------ */

/* True if the file starts (after comments) with a '#! emu-dot-scaled'
 * header; standard input is not peeked at (give --scaled). */
static bool file_is_scaled(const char *path)
{
    if (!path || !strcmp(path, "-"))
        return false;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return false;
    char buf[256];
    bool found = false;
    while (fgets(buf, sizeof buf, fp)) {
        const char *t = buf + strspn(buf, " \t");
        if (!strncmp(t, "#! emu-dot-scaled", 17)) {
            found = true;
            break;
        }
        if (*t != '#' && *t != '\n' && *t)
            break;
    }
    fclose(fp);
    return found;
}

bool cli_dot_is_scaled(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--scaled") || !strncmp(argv[i], "--scaled=", 9))
            return true;
    /* verify FILE: the file's header decides (the last argument that is
     * not an option value is enough for the common spellings). */
    return argc >= 2 && !strcmp(argv[0], "verify") &&
           file_is_scaled(argv[argc - 1]);
}

static void help(void)
{
    printf(
        "Usage: emu dot gen    --scaled SPEC [options] [-o FILE]\n"
        "       emu dot verify [--scaled SPEC ...] FILE|-\n"
        "\n"
        "Test vectors of a block-scaled dot-product unit (OCP MX, NVFP4).\n"
        "Each line, hex codes as the unit receives them:\n"
        "  A0..A(K-1) SA0..SA(n-1) B0..B(K-1) SB0..SB(n-1) [GA GB] RESULT FLAGS\n"
        "n = ceil(K / block) block scales per operand; GA GB the binary32\n"
        "tensor scales of formats that have them (nvfp4).  The terms\n"
        "(e_a s_a)(e_b s_b) are exact, summed by --accum, and the sum times\n"
        "GA GB is rounded once into --out; a NaN scale makes its block NaN.\n"
        "\n"
        "  --scaled SPEC     mxfp8, mxfp8-e5m2, mxfp6-e2m3, mxfp6-e3m2, mxfp4,\n"
        "                    nvfp4, or keys (see emu scaled --help)\n"
        "  --accum SPEC      accumulator model (default exact), e.g.\n"
        "                    fused,k=32,w=25,acc=binary32\n"
        "  --out FMT         output format (default binary32)\n"
        "  --mode MODE       output rounding (default rne)\n"
        "  --k K             elements per operand, 1..%d (default: one block)\n"
        "  --count N, --seed N, -o FILE, --exact-nan, --max-errors N\n"
        "                    as for emu dot\n"
        "\n"
        "Example:\n"
        "  emu dot gen --scaled mxfp4 --k 64 --count 1000 -o mxfp4.tv\n"
        "  emu dot verify rtl_mxfp4.tv\n", CLI_SDOT_MAX_K);
}

int cmd_dot_scaled(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "scaled", 0, true }, { "out", 0, true },     { "accum", 0, true },
        { "mode", 0, true },   { "k", 0, true },       { "count", 0, true },
        { "seed", 0, true },   { "output", 'o', true }, { "exact-nan", 0, false },
        { "max-errors", 0, true }, { "help", 'h', false }, { NULL, 0, false },
    };
    enum { O_SCALED, O_OUT, O_ACCUM, O_MODE, O_K, O_COUNT, O_SEED, O_OUTPUT,
           O_EXACT_NAN, O_MAX_ERRORS, O_HELP };
    cli_sdot d;
    memset(&d, 0, sizeof d);
    uint64_t count = 1000, max_errors = 20;
    bool exact_nan = false;
    const char *verb = NULL, *file = NULL, *path = NULL, *val;
    cli_parser p;
    cli_parser_init(&p, "dot", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        switch (o) {
        case O_HELP: help(); return CLI_EXIT_OK;
        case O_SCALED: d.scaled_spec = val; break;
        case O_OUT: d.out_spec = val; break;
        case O_ACCUM: d.accum_spec = val; break;
        case O_MODE: d.mode_spec = val; break;
        case O_K: parse_k(&d, val); break;
        case O_COUNT: count = cli_parse_u64("dot", "--count", val); break;
        case O_SEED: d.seed = cli_parse_u64("dot", "--seed", val); break;
        case O_OUTPUT: path = val; break;
        case O_EXACT_NAN: exact_nan = true; break;
        case O_MAX_ERRORS:
            max_errors = cli_parse_u64("dot", "--max-errors", val);
            break;
        default:
            cli_dot_operand(val, &verb, &file);
        }
    }
    if (cli_dot_is_gen(verb, file))
        return sdot_gen(&d, count, path);
    return sdot_verify(&d, file, exact_nan, max_errors);
}
